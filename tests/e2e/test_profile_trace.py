"""profiling.enable_profiling writes a Chrome/Perfetto trace every profile_freq steps.

Usage: test_profile_trace.py path/to/remat. Trains the debug model 4 steps
with profile_freq 2, in op AC and in AC none, and checks: traces exist for
iterations 2 and 4 only, at torchtitan's path; each is JSON with one
complete event per schedule step (as many forward and backward events as the
model has nodes, recompute events only under op AC), events in order and
not overlapping; and an
unwritable save_traces_folder exits 2 before training.
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = sys.argv[1]
AC = "--activation_checkpoint."
OP = [AC + "mode", "selective", AC + "selective_ac_option", "op"]


def train(tmp, mode, extra=()):
    return subprocess.run([REMAT, "train", "--config", "configs/llama3_debug.toml", *mode,
                           "--training.steps", "4", "--profiling.enable_profiling", "true",
                           "--profiling.profile_freq", "2", "--job.dump_folder", str(tmp),
                           "--validation.enabled", "false", *extra],
                          capture_output=True, text=True)


def events(path):
    trace = json.loads(path.read_text())
    return [e for e in trace["traceEvents"] if e["ph"] == "X"]


def check_mode(tmp, mode, expect_recompute):
    run = train(tmp, mode)
    assert run.returncode == 0, run.stderr
    folder = tmp / "profile_traces"
    found = sorted(p.parent.name for p in folder.glob("iteration_*/rank0_trace.json"))
    assert found == ["iteration_2", "iteration_4"], found
    evs = events(folder / "iteration_4" / "rank0_trace.json")
    phases = {}
    for e in evs:
        phases[e["cat"]] = phases.get(e["cat"], 0) + 1
    assert phases["forward"] == phases["backward"] > 0, phases
    assert (phases.get("recompute", 0) > 0) == expect_recompute, phases
    for a, b in zip(evs, evs[1:]):
        assert b["ts"] >= a["ts"] + a["dur"] - 1e-3, (a, b)  # in order, not overlapping
    assert all(e["dur"] >= 0 and e["args"]["op"] for e in evs), evs[:3]
    # The trace's events are the step's own: "op" names and FQNs, e.g. the
    # output projection and the attention of layer 0.
    names = {e["name"] for e in evs}
    assert "output" in names and any(n.startswith("layers.0.attention") for n in names), names
    return phases


def main():
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        op = check_mode(tmp / "op", OP, True)
        none = check_mode(tmp / "none", [AC + "mode", "none"], False)
        assert op["forward"] == none["forward"], (op, none)
        print(f"ok: traces at iterations 2 and 4; op AC {op}, none {none}")

        (tmp / "file").write_text("not a folder")
        bad = train(tmp, OP, ["--profiling.save_traces_folder", "file/traces"])
        bad_dump = subprocess.run([REMAT, "train", "--config", "configs/llama3_debug.toml",
                                   "--training.steps", "1", "--profiling.enable_profiling",
                                   "true", "--job.dump_folder", str(tmp / "file")],
                                  capture_output=True, text=True)
        for run in (bad, bad_dump):
            assert run.returncode == 2, (run.returncode, run.stderr)
            assert "step:" not in run.stdout, run.stdout
        print("ok: an unwritable trace folder exits 2 before training")


main()
