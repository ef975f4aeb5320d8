"""`remat plan` predicts what `remat train` measures (issue: planner).

For the debug model and the wider benchmark model, in every AC mode the plan
compares, the predicted peak and kept-activation bytes must equal the
allocator's measurement in a real training step within 2% (they are designed
to be exact). Also: a run that cannot fit its memory limit exits with status
2 before allocating, naming a mode or batch size that fits.

Usage: test_plan_matches_run.py <path-to-remat>
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = sys.argv[1]
CONFIG = ["--config", "configs/llama3_debug.toml"]
AC = "--activation_checkpoint."
MODELS = {
    # The debug model at the `make run` shape (smaller batch keeps CI quick).
    "debug": ["--training.local_batch_size", "4", "--training.seq_len", "256"],
    # The wider model of the benchmark (dim 1024, 8 layers, 16 heads, seq 1024)
    # at batch 1: the bookings are the same per sequence, and CI stays quick.
    "wide": ["--model.dim", "1024", "--model.n_layers", "8", "--model.n_heads", "16",
             "--model.n_kv_heads", "16", "--training.seq_len", "1024",
             "--training.local_batch_size", "1"],
}


def mode_args(prediction):
    """Turns a plan row back into overrides for `remat train`."""
    name = prediction["name"]
    if name == "none":
        return [AC + "mode", "none"]
    if name == "full":
        return [AC + "mode", "full"]
    if name == "selective 2":
        return [AC + "mode", "selective", AC + "selective_ac_option", "2"]
    threshold = {"op threshold 0": "0", "op threshold 1e50": "1e50"}.get(name)
    if threshold is None:
        return None  # "op configured" repeats one of the others here
    return [AC + "mode", "selective", AC + "selective_ac_option", "op",
            AC + "selective_op_ac_mm_flops_threshold", threshold,
            AC + "per_op_sac_force_recompute_mm_by_fqns", ""]


def main():
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, model_args in MODELS.items():
            plan = subprocess.run([REMAT, "plan", *CONFIG, *model_args, "--json"],
                                  capture_output=True, text=True, check=True)
            rows = json.loads(plan.stdout)["modes"]
            for row in rows:
                args = mode_args(row)
                if args is None:
                    continue
                metrics = Path(tmp) / f"{model}-{row['name'].replace(' ', '_')}.jsonl"
                run = subprocess.run(
                    [REMAT, "train", *CONFIG, *model_args, *args, "--training.steps", "1",
                     "--metrics.jsonl_path", str(metrics), "--metrics.peak_flops", "1e11",
                     "--job.dump_folder", tmp], capture_output=True, text=True)
                if run.returncode != 0:
                    failures.append(f"{model} {row['name']}: train failed: {run.stderr}")
                    continue
                measured = json.loads(metrics.read_text().splitlines()[-1])
                for key_plan, key_run in (("peak_bytes", "peak_bytes"),
                                          ("kept_activation_bytes", "max_activation_bytes")):
                    want, got = row[key_plan], measured[key_run]
                    error = abs(want - got) / got
                    status = "ok" if error <= 0.02 else "OFF"
                    print(f"{model:5s} {row['name']:18s} {key_plan:22s} predicted {want:>13,d}"
                          f"  measured {got:>13,d}  error {100 * error:.3f}%  {status}")
                    if error > 0.02:
                        failures.append(f"{model} {row['name']} {key_plan}: {want} vs {got}")

        # A limit that only checkpointing can meet: the error names a mode that fits.
        plan = json.loads(subprocess.run([REMAT, "plan", *CONFIG, *MODELS["debug"], "--json"],
                                         capture_output=True, text=True, check=True).stdout)
        peaks = {r["name"]: r["peak_bytes"] for r in plan["modes"]}
        limit = (peaks["full"] + peaks["none"]) // 2
        # Below full AC's peak at this batch: only a smaller batch fits.
        for limit_bytes, expect in ((limit, "would fit"), (peaks["full"] * 95 // 100,
                                                           "local_batch_size = 2")):
            out = Path(tmp) / "limited.jsonl"
            run = subprocess.run([REMAT, "train", *CONFIG, *MODELS["debug"],
                                  AC + "mode", "none", "--memory.limit", f"{limit_bytes}B",
                                  "--metrics.jsonl_path", str(out), "--job.dump_folder", tmp],
                                 capture_output=True, text=True)
            print(f"limit {limit_bytes:,d} B: exit {run.returncode}: {run.stderr.strip()}")
            if run.returncode != 2 or expect not in run.stderr or out.exists():
                failures.append(f"memory limit {limit_bytes}: exit {run.returncode}, "
                                f"stderr {run.stderr!r}, metrics written: {out.exists()}")
    if failures:
        print("FAIL:\n" + "\n".join(failures))
        sys.exit(1)
    print("PASS")


main()
