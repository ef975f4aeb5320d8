"""BENCHMARKS.md is shared by several bench scripts: each owns one section
between <!-- NAME:begin --> and <!-- NAME:end --> and replaces only that,
writing to a temporary file and renaming it so a crash never truncates it."""
import os
import re

PATH = "BENCHMARKS.md"


def markers(name):
    return f"<!-- {name}:begin -->", f"<!-- {name}:end -->"


def replace_section(name, body, path=PATH):
    """Puts `body` (which must start and end with the markers of `name`) in place
    of the old section, or appends it if the file has none yet."""
    begin, end = markers(name)
    old = open(path).read() if os.path.exists(path) else "# Benchmarks\n"
    if begin in old and end in old:
        new = re.sub(re.escape(begin) + ".*?" + re.escape(end), lambda _: body, old, flags=re.S)
    else:
        new = old.rstrip() + "\n\n" + body + "\n"
    with open(path + ".tmp", "w") as f:
        f.write(new)
    os.replace(path + ".tmp", path)
