"""`remat plan --timeline` (issue 13, point 5): the bytes held over one step.

For the debug model in op AC against none, the wide model, and Llama 3 8B
with --torchtitan: the JSON's largest sample is the peak `remat plan --json`
predicts for that mode, its breakdown at the peak sample is the plan's
at_peak, it happens during the plan's peak op, and every sample's categories
sum to its total; the SVG is well-formed and labels the phases and the peak.
Bad flags exit 2 without writing anything.

Usage: test_timeline.py <path-to-remat>
"""
import json
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

REMAT = sys.argv[1]
CONFIG = ["--config", "configs/llama3_debug.toml"]
OP = ["--activation_checkpoint.mode", "selective", "--activation_checkpoint.selective_ac_option",
      "op"]
CASES = {
    "debug": [*CONFIG, *OP, "--training.local_batch_size", "4", "--training.seq_len", "256"],
    "wide": [*CONFIG, *OP, "--model.dim", "1024", "--model.n_layers", "8", "--model.n_heads",
             "16", "--model.n_kv_heads", "16", "--training.seq_len", "1024",
             "--training.local_batch_size", "4"],
    "8b": ["--config", "configs/llama3_8b.toml", "--torchtitan"],
}
CATEGORIES = ["parameters", "gradients", "optimizer_state", "activations", "temporaries"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def check_series(case, timeline, predicted):
    name = timeline["name"]
    samples = timeline["samples"]
    sums_ok = all(sum(s[k][c] for c in CATEGORIES) == s[k]["total"]
                  for s in samples for k in ("after", "peak"))
    check(sums_ok, f"{case} {name}: every sample's categories sum to its total")
    top = max(s["peak"]["total"] for s in samples)
    check(top == timeline["peak_bytes"] == predicted["peak_bytes"],
          f"{case} {name}: largest sample {top:,} = predicted peak {predicted['peak_bytes']:,}")
    at = samples[timeline["peak_step"]]["peak"]
    check(all(at[c] == predicted["at_peak"][c] for c in CATEGORIES),
          f"{case} {name}: the peak sample's breakdown is the plan's at_peak")
    check(timeline["peak_during"] == predicted["peak_during"],
          f"{case} {name}: peak during {timeline['peak_during']!r}")
    phases = [s["phase"] for s in samples]
    check(phases[0] == "forward" and phases[-1] == "backward" and
          ("recompute" in phases) == (predicted["recompute_flops"] > 0),
          f"{case} {name}: forward, then backward, recompute exactly when the plan recomputes")


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        for case, args in CASES.items():
            svg = tmp / f"{case}.svg"
            plan = subprocess.run([REMAT, "plan", *args, "--json"], capture_output=True,
                                  text=True, check=True)
            predicted = json.loads(plan.stdout)
            modes = {m["name"]: m for m in predicted["modes"]}
            out = subprocess.run([REMAT, "plan", *args, "--timeline", str(svg),
                                  "--timeline-compare", "none"], capture_output=True, text=True)
            check(out.returncode == 0 and f"memory timeline written to {svg}" in out.stdout,
                  f"{case}: plan --timeline exits 0 and says where")
            timelines = json.loads(svg.with_suffix(".json").read_text())["timelines"]
            check([t["name"] for t in timelines] == ["configured", "none"],
                  f"{case}: the configured mode and none")
            check_series(case, timelines[0], predicted["configured"])
            check_series(case, timelines[1], modes["none"])
            root = ET.parse(svg).getroot()
            texts = " ".join("".join(t.itertext())
                             for t in root.iter("{http://www.w3.org/2000/svg}text"))
            check(all(w in texts for w in ["forward", "backward", "peak", *CATEGORIES,
                                           timelines[0]["peak_during"]]),
                  f"{case}: the SVG parses and labels phases, categories and the peak op")
        bad = [(["--timeline", str(tmp / "t.png")], "ending in .svg"),
               (["--timeline", str(tmp / "t.svg"), "--timeline-compare", "nope"], "known: none"),
               (["--timeline-compare", "none"], "needs --timeline")]
        for flags, says in bad:
            proc = subprocess.run([REMAT, "plan", *CASES["debug"], *flags], capture_output=True,
                                  text=True)
            check(proc.returncode == 2 and says in proc.stderr and not (tmp / "t.svg").exists(),
                  f"{' '.join(flags[-2:])}: exit 2 saying {says!r}")
    if failures:
        print("FAIL:\n" + "\n".join(failures))
        sys.exit(1)
    print("PASS")


main()
