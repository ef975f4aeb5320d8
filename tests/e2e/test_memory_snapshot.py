"""profiling.enable_memory_snapshot during `remat train` (issue 13, points 1 and 5).

The run's first step is measured from the allocator's own books as they
change and written, as `remat plan --timeline` draws the plan, to
<job.dump_folder>/<profiling.save_memory_snapshot_folder>/step-1.svg and
step-1.json. Since the planner is exact, for the debug model the measured
series equals the planned one sample by sample (phase, op, the level after
each schedule step and the breakdown at its highest moment), in three AC
modes. The key is honored, so not listed as ignored; an unwritable folder
exits 2 before training.

Usage: test_memory_snapshot.py <path-to-remat>
"""
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REMAT = sys.argv[1]
BASE = ["--config", "configs/llama3_debug.toml", "--training.local_batch_size", "2",
        "--training.seq_len", "64"]
MODES = {
    "op": ["--activation_checkpoint.mode", "selective",
           "--activation_checkpoint.selective_ac_option", "op"],
    "full": ["--activation_checkpoint.mode", "full"],
    "none": ["--activation_checkpoint.mode", "none"],
}
TIMEOUT_S = 600
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def remat(*args):
    return subprocess.run([REMAT, *args], capture_output=True, text=True, timeout=TIMEOUT_S)


def series(path):
    timeline = json.loads(path.read_text())["timelines"][0]
    return timeline, [(s["phase"], s["op"], s["after"], s["peak"]) for s in timeline["samples"]]


def check_mode(tmp, name, flags):
    run_dir = tmp / name
    run = remat("train", *BASE, *flags, "--training.steps", "2",
                "--profiling.enable_memory_snapshot", "true", "--job.dump_folder", str(run_dir))
    check(run.returncode == 0, f"{name}: trains with the snapshot (exit {run.returncode}: "
                               f"{run.stderr.strip()[-400:]})")
    if run.returncode != 0:
        return
    check("profiling.enable_memory_snapshot" not in run.stdout,
          f"{name}: the key is honored, not listed as ignored")
    folder = run_dir / "memory_snapshot"
    check(sorted(p.name for p in folder.iterdir()) == ["step-1.json", "step-1.svg"],
          f"{name}: step-1.svg and step-1.json, for the first step only")
    svg = ET.parse(folder / "step-1.svg").getroot()
    check(svg.tag.endswith("svg") and "measured at step 1" in ET.tostring(svg, encoding="unicode"),
          f"{name}: the SVG is well-formed and says it was measured")
    plan_json = tmp / f"{name}_plan.json"
    plan = remat("plan", *BASE, *flags, "--timeline", str(plan_json))
    check(plan.returncode == 0, f"{name}: plan --timeline (exit {plan.returncode})")
    measured, measured_samples = series(folder / "step-1.json")
    planned, planned_samples = series(plan_json)
    check(measured["name"] == "measured" and planned["name"] == "configured",
          f"{name}: the series are named measured and configured")
    check(len(measured_samples) == len(planned_samples) > 0,
          f"{name}: {len(measured_samples)} measured samples, {len(planned_samples)} planned")
    first_diff = next((i for i, (a, b) in enumerate(zip(measured_samples, planned_samples))
                       if a != b), None)
    check(first_diff is None and measured_samples == planned_samples,
          f"{name}: the measured series equals the planned one sample by sample" +
          ("" if first_diff is None else
           f" (first difference at {first_diff}: {measured_samples[first_diff]} vs "
           f"{planned_samples[first_diff]})"))
    check(measured["peak_bytes"] == planned["peak_bytes"] and
          measured["peak_during"] == planned["peak_during"],
          f"{name}: peak {measured['peak_bytes']:,} bytes during {measured['peak_during']!r}")


def check_unwritable(tmp):
    blocker = tmp / "a_file"
    blocker.write_text("not a folder")
    run = remat("train", *BASE, "--training.steps", "1", "--profiling.enable_memory_snapshot",
                "true", "--profiling.save_memory_snapshot_folder", "a_file/snapshots",
                "--job.dump_folder", str(tmp))
    check(run.returncode == 2 and "profiling.save_memory_snapshot_folder" in run.stderr and
          "step:" not in run.stdout,
          f"an unwritable snapshot folder exits 2 before training (exit {run.returncode}: "
          f"{run.stderr.strip()[-300:]})")


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for name, flags in MODES.items():
            check_mode(tmp, name, flags)
        check_unwritable(tmp)
    if failures:
        sys.exit("FAIL: %d checks failed" % len(failures))
    print("PASS")


if __name__ == "__main__":
    main()
