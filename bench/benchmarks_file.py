"""BENCHMARKS.md is shared by several bench scripts: each owns one section
between <!-- NAME:begin --> and <!-- NAME:end --> and replaces only that,
writing to a temporary file and renaming it so a crash never truncates it.

Each kind of CPU has its own file, so one CPU's results never replace
another's: BENCHMARKS.md holds Zen 5's (family 26, and any CPU not named
below), docs/benchmarks-zen4.md Zen 4's (family 25 with AVX-512),
docs/benchmarks-zen3.md Zen 3's (family 25, AVX2 only),
docs/benchmarks-intel-xeon.md an Intel Xeon's (GenuineIntel, family 6). A
script picks the file of the CPU it runs on; REMAT_BENCHMARKS_FILE names
another."""
import argparse
import os
import re
import sys


def _cpuinfo_field(info, name):
    return next((l.split(":", 1)[1].strip() for l in info if l.startswith(name)), "")


def file_for_this_cpu():
    """The benchmarks file of the CPU this runs on (see the module's text)."""
    info = open("/proc/cpuinfo").read().splitlines()
    if _cpuinfo_field(info, "vendor_id") == "GenuineIntel":
        return "docs/benchmarks-intel-xeon.md"
    if _cpuinfo_field(info, "cpu family") != "25":
        return "BENCHMARKS.md"
    avx512 = "avx512f" in _cpuinfo_field(info, "flags").split()
    return "docs/benchmarks-zen4.md" if avx512 else "docs/benchmarks-zen3.md"


PATH = os.environ.get("REMAT_BENCHMARKS_FILE") or file_for_this_cpu()
# Checked before a script measures anything, not when it writes at the end:
# a long run must not be lost to a misspelt folder.
if not os.path.isdir(os.path.dirname(PATH) or "."):
    print(f"benchmarks file {PATH!r}: its folder does not exist; expected a file in an existing "
          f"folder (relative to the repository root), e.g. docs/benchmarks-zen4.md",
          file=sys.stderr)
    sys.exit(2)


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


def machine():
    """The CPU model and the vector extensions that matter here, for the
    line every benchmark section states its figures with."""
    info = open("/proc/cpuinfo").read().splitlines()
    cpu = _cpuinfo_field(info, "model name") or "?"
    flags = _cpuinfo_field(info, "flags").split()
    isa = ("AVX-512 + AVX512-BF16" if "avx512_bf16" in flags else
           "AVX-512" if "avx512f" in flags else "AVX2 + FMA")
    # The family tells AMD's cores apart where the name does not ("AMD
    # EPYC"): 25 is Zen 3 or Zen 4 (512-bit FMAs as two halves), 26 is
    # Zen 5 (whole 512-bit FMAs, twice the fp32 peak).
    family = _cpuinfo_field(info, "cpu family")
    return f"{cpu} (family {family}, {isa})" if family else f"{cpu} ({isa})"


def two_build_arguments(rounds):
    """The arguments of a benchmark that runs two builds of remat side by side
    (before_after.py, startup.py): the binaries, a label for the section's
    title, the interleaved rounds and whether to write BENCHMARKS.md."""
    parser = argparse.ArgumentParser()
    parser.add_argument("--before", required=True)
    parser.add_argument("--after", default="build/remat")
    parser.add_argument("--label", default="")
    parser.add_argument("--rounds", type=int, default=rounds)
    parser.add_argument("--write", action="store_true")
    return parser
