"""Layers that never reach up: every #include "area/..." in src/ must name a
folder its library depends on.

The dependencies are the ones CMakeLists.txt declares, `remat_area(name
remat_dep ...)`, taken transitively. The check fails, naming file, line and
header, when a file under src/<area>/ includes a header of a folder its
library does not depend on, when the declared graph has a cycle, or when a
folder of src/ has no remat_area line. It first runs itself on made-up trees
with known violations, so a parser that stopped matching cannot pass.

Usage: test_includes.py [remat binary, ignored] (run from the repository root).
"""
import re
import sys
import tempfile
from pathlib import Path

AREA_LINE = re.compile(r"^\s*remat_area\(\s*(\w+)([^)]*)\)", re.MULTILINE)
INCLUDE = re.compile(r'^[ \t]*#[ \t]*include[ \t]+"(([^"/]+)/[^"]*)"', re.MULTILINE)
SOURCES = (".h", ".cc")


def declared_graph(cmake_text):
    """{area: set of areas it links directly}, from the remat_area(...) lines."""
    graph = {}
    for name, rest in AREA_LINE.findall(cmake_text):
        graph[name] = {dep[len("remat_"):] for dep in rest.split() if dep.startswith("remat_")}
    return graph


def find_cycle(graph):
    """One cycle as a list of areas ([a, b, a]), or None."""
    state = {}  # area -> "open" while on the current path, "done" after

    def visit(area, path):
        state[area] = "open"
        path = path + [area]
        for dep in sorted(graph.get(area, ())):
            if state.get(dep) == "open":
                return path[path.index(dep):] + [dep]
            if dep not in state:
                found = visit(dep, path)
                if found:
                    return found
        state[area] = "done"
        return None

    for area in sorted(graph):
        if area not in state:
            found = visit(area, [])
            if found:
                return found
    return None


def closure(graph, area):
    seen, todo = set(), [area]
    while todo:
        for dep in graph.get(todo.pop(), ()):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def violations(root):
    """Every problem in the tree at `root`, one line each."""
    root = Path(root)
    graph = declared_graph((root / "CMakeLists.txt").read_text())
    problems = []
    cycle = find_cycle(graph)
    if cycle:
        problems.append("CMakeLists.txt: the declared libraries form a cycle: " +
                        " -> ".join(cycle))
    folders = sorted(p.name for p in (root / "src").iterdir() if p.is_dir())
    for folder in folders:
        if folder not in graph:
            problems.append(f"src/{folder}/: no remat_area({folder} ...) line in CMakeLists.txt")
    for area in folders:
        allowed = closure(graph, area) | {area}
        for path in sorted((root / "src" / area).rglob("*")):
            if path.suffix not in SOURCES:
                continue
            text = path.read_text()
            for match in INCLUDE.finditer(text):
                header, target = match.group(1), match.group(2)
                if target in folders and target not in allowed:
                    line = text.count("\n", 0, match.start()) + 1
                    problems.append(
                        f"{path.relative_to(root)}:{line}: includes \"{header}\" but "
                        f"remat_{area} does not depend on remat_{target}")
    return problems


def write_tree(root, cmake, files):
    root = Path(root)
    (root / "CMakeLists.txt").write_text(cmake)
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)


def self_check():
    """The checker finds made-up violations and passes a made-up clean tree."""
    cmake = "remat_area(low)\nremat_area(mid remat_low)\nremat_area(top remat_mid OpenMP::X)\n"
    files = {"src/low/a.h": "#pragma once\n",
             "src/mid/b.cc": '#include "low/a.h"\n',
             "src/top/c.cc": '#include <vector>\n#include "low/a.h"\n#include "mid/b.h"\n'}
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(tmp, cmake, files)
        if violations(tmp):
            failures.append(f"a clean made-up tree reported {violations(tmp)}")
        # top -> low is allowed only transitively; low -> top reaches up.
        write_tree(tmp, cmake, {"src/low/d.cc": '#include "low/a.h"\n\n#include "top/c.h"\n'})
        found = violations(tmp)
        want = 'src/low/d.cc:3: includes "top/c.h" but remat_low does not depend on remat_top'
        if found != [want]:
            failures.append(f"a made-up upward include: expected [{want!r}], got {found}")
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(tmp, cmake.replace("remat_area(low)", "remat_area(low remat_top)"), files)
        found = violations(tmp)
        if len(found) != 1 or "cycle" not in found[0]:
            failures.append(f"a made-up cycle low -> top -> mid -> low: got {found}")
    with tempfile.TemporaryDirectory() as tmp:
        write_tree(tmp, cmake, {**files, "src/extra/e.cc": "\n"})
        found = violations(tmp)
        if len(found) != 1 or "src/extra/" not in found[0]:
            failures.append(f"a made-up undeclared folder: got {found}")
    return failures


def main():
    failures = self_check()
    for f in failures:
        print(f"FAIL (self-check): {f}", file=sys.stderr)
    problems = violations(Path.cwd())
    for p in problems:
        print(f"FAIL: {p}", file=sys.stderr)
    if failures or problems:
        return 1
    graph = declared_graph((Path.cwd() / "CMakeLists.txt").read_text())
    print(f"ok: {len(graph)} libraries, acyclic; every include in src/ stays within "
          "its library's declared dependencies")
    return 0


if __name__ == "__main__":
    sys.exit(main())
