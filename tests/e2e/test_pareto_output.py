"""`remat plan --pareto FILE.svg|.csv|.json`: the same front in three files.

Usage: test_pareto_output.py path/to/remat. Checks, on the debug model with
a memory budget, that the JSON front falls in peak and rises in recompute,
that every point is proven optimal, that the CSV holds the same points and
fixed modes, that the SVG is well-formed XML naming every fixed mode, and
that an unknown extension exits 2 without writing a file. Under the
measured cost model the same front is in seconds, as a share of the
predicted step without recompute, and the fixed modes are priced in seconds
too: none at 0, full dearest.
"""
import csv
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REMAT = sys.argv[1]
BASE = ["plan", "--config", "configs/llama3_debug.toml",
        "--activation_checkpoint.mode", "memory_budget",
        "--activation_checkpoint.memory_budget", "0.5"]


def plan(out, check=True, extra=()):
    return subprocess.run([REMAT, *BASE, *extra, "--pareto", str(out)], capture_output=True,
                          text=True, check=check)


def check_front(data):
    front = data["front"]
    assert len(front) >= 3, front
    for a, b in zip(front, front[1:]):
        assert b["peak_bytes"] < a["peak_bytes"], (a, b)
        assert b["recompute"] >= a["recompute"], (a, b)
    assert all(p["lower_bound"] == p["recompute"] for p in front), front
    return front


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        plan(tmp / "f.json")
        data = json.loads((tmp / "f.json").read_text())
        front = check_front(data)
        assert data["cost_unit"] == "flops", data["cost_unit"]
        assert data["budget_bytes"] > 0, data["budget_bytes"]
        names = [m["name"] for m in data["fixed_modes"]]
        assert "none" in names and "full" in names, names
        print(f"ok: json front of {len(front)} points, monotone, all optimal")

        plan(tmp / "f.csv")
        rows = list(csv.DictReader((tmp / "f.csv").open()))
        front_rows = [r for r in rows if r["kind"] == "front"]
        assert [int(r["peak_bytes"]) for r in front_rows] == [p["peak_bytes"] for p in front]
        assert {r["name"] for r in rows if r["kind"] != "front"} >= set(names), rows
        print("ok: csv holds the same front and the fixed modes")

        plan(tmp / "f.svg")
        root = ET.parse(tmp / "f.svg").getroot()
        text = " ".join(t.text or "" for t in root.iter() if t.tag.endswith("text"))
        for name in names:
            assert name in text, (name, text[:400])
        print("ok: svg is well-formed and labels every fixed mode")

        plan(tmp / "s.json", extra=["--activation_checkpoint.cost_model", "measured",
                                    "--activation_checkpoint.cost_cache", str(tmp / "t.json")])
        data = json.loads((tmp / "s.json").read_text())
        check_front(data)
        assert data["cost_unit"] == "seconds" and data["percent_of"]["seconds"] > 0, data
        fixed = {m["name"]: m["recompute"] for m in data["fixed_modes"]}
        assert fixed["none"] == 0 and fixed["full"] == max(fixed.values()) > 0, fixed
        # A full recompute re-runs a forward pass: less than the whole step.
        assert fixed["full"] < data["percent_of"]["seconds"], (fixed, data["percent_of"])
        print("ok: measured cost model: front and fixed modes in seconds")

        bad = plan(tmp / "f.png", check=False)
        assert bad.returncode == 2, (bad.returncode, bad.stderr)
        assert not (tmp / "f.png").exists()
        print("ok: --pareto f.png exits 2 and writes nothing")

        # A link planted at the temporary's name is never written through, and
        # the front never replaces a file the command reads.
        precious = tmp / "precious.txt"
        precious.write_text("precious\n")
        (tmp / "g.svg.tmp").symlink_to(precious)
        bad = plan(tmp / "g.svg", check=False)
        assert bad.returncode == 2 and "symbolic link" in bad.stderr, (bad.returncode, bad.stderr)
        assert precious.read_text() == "precious\n" and not (tmp / "g.svg").exists()
        data_file = tmp / "d.json"
        data_file.write_text("a line of training text\n" * 100)
        bad = plan(data_file, check=False, extra=["--training.dataset_path", str(data_file)])
        assert bad.returncode == 2 and "this run reads" in bad.stderr, (bad.returncode, bad.stderr)
        assert data_file.read_text() == "a line of training text\n" * 100
        print("ok: --pareto never writes through a link or over an input")


main()
