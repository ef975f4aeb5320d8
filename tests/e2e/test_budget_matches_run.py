"""memory_budget (issue 8): the plan `remat plan` predicts for a budget is the
plan `remat train` runs, to the byte, and AC still never changes the numbers.

For the debug, wide (dim 1024) and llama4 debug models, and the debug and
llama4 debug models in bf16 mixed precision, at five budgets
(fractions 0, 0.25, 0.5, 0.75 and 1 between full AC's peak and no AC's):
  - the predicted peak equals the allocator's measured peak in a real step;
  - the peak never rises and the recompute never falls as the budget falls;
  - the loss and grad_norm of a step are bit-identical to mode "none";
  - the solver says "optimal".
Also mode "auto" under a memory.limit, and a budget nothing meets (exit 2,
naming the smallest reachable peak, before any output is written).

Usage: test_budget_matches_run.py <path-to-remat>
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = sys.argv[1]
AC = "--activation_checkpoint."
MODELS = {
    "debug": ["--config", "configs/llama3_debug.toml", "--training.local_batch_size", "4",
              "--training.seq_len", "256"],
    "wide": ["--config", "configs/llama3_debug.toml", "--model.dim", "1024", "--model.n_layers",
             "8", "--model.n_heads", "16", "--model.n_kv_heads", "16", "--training.seq_len",
             "512", "--training.local_batch_size", "1"],
    "llama4": ["--config", "configs/llama4_debug.toml", "--training.local_batch_size", "4",
               "--training.seq_len", "256"],
}
# bf16 mixed precision: bf16 activations, the executor's weight copies and
# fp32 staging booked by the solver's block model as the run books them.
BF16 = ["--training.mixed_precision_param", "bfloat16"]
MODELS["debug bf16"] = MODELS["debug"] + BF16
MODELS["llama4 bf16"] = MODELS["llama4"] + BF16
FRACTIONS = ["1.0", "0.75", "0.5", "0.25", "0.0"]  # the budget falls


def train(tmp, name, args):
    metrics = Path(tmp) / f"{name}.jsonl"
    run = subprocess.run([REMAT, "train", *args, "--training.steps", "1", "--metrics.jsonl_path",
                          str(metrics), "--metrics.peak_flops", "1e11", "--job.dump_folder", tmp],
                         capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"FAIL: {name}: train exited {run.returncode}: {run.stderr}")
    return [json.loads(line) for line in metrics.read_text().splitlines()], run.stdout


def main():
    failures = []
    references = {}
    lowest = {}  # per model: the lowest peak any plan reaches (budget fraction 0)
    with tempfile.TemporaryDirectory() as tmp:
        for model, model_args in MODELS.items():
            reference, _ = train(tmp, f"{model}-none".replace(" ", "-"),
                                 [*model_args, AC + "mode", "none"])
            references[model] = reference
            previous = None
            for fraction in FRACTIONS:
                args = [*model_args, AC + "mode", "memory_budget", AC + "memory_budget", fraction]
                plan = json.loads(subprocess.run([REMAT, "plan", *args, "--json"],
                                                 capture_output=True, text=True,
                                                 check=True).stdout)
                budget = plan["budget"]
                predicted = plan["configured"]["peak_bytes"]
                recompute = plan["configured"]["recompute_flops"]
                steps, stdout = train(tmp, f"{model}-{fraction}".replace(" ", "-"), args)
                measured = steps[-1]["peak_bytes"]
                print(f"{model:11s} budget {fraction:4s} = {budget['budget_bytes']:>11,d} B  "
                      f"predicted {predicted:>11,d}  measured {measured:>11,d}  "
                      f"recompute {recompute:.4g}  optimal {budget['optimal']}")
                if predicted != measured or budget["predicted_peak_bytes"] != predicted:
                    failures.append(f"{model} {fraction}: predicted {predicted}, solver "
                                    f"{budget['predicted_peak_bytes']}, measured {measured}")
                if predicted > budget["budget_bytes"]:
                    failures.append(f"{model} {fraction}: peak {predicted} over the budget")
                if not budget["optimal"] or "optimal" not in stdout:
                    failures.append(f"{model} {fraction}: not reported optimal")
                for a, b in zip(steps, reference):
                    if a["loss"] != b["loss"] or a["grad_norm"] != b["grad_norm"]:
                        failures.append(f"{model} {fraction}: step {a['step']} differs from none: "
                                        f"{a['loss']!r} vs {b['loss']!r}")
                if previous is not None:
                    if predicted > previous[0]:
                        failures.append(f"{model} {fraction}: peak rose as the budget fell")
                    if recompute < previous[1]:
                        failures.append(f"{model} {fraction}: recompute fell as the budget fell")
                previous = (predicted, recompute)
            lowest[model] = previous[0]

        # auto: the fastest plan under memory.limit.
        plan = json.loads(subprocess.run([REMAT, "plan", *MODELS["debug"], AC + "mode", "auto",
                                          "--memory.limit", "150MiB", "--json"],
                                         capture_output=True, text=True, check=True).stdout)
        if plan["configured"]["peak_bytes"] > 150 * 2**20 or plan["budget"]["source"] != \
                "memory.limit 150MiB":
            failures.append(f"auto: {plan['budget']}")
        steps, _ = train(tmp, "debug-auto", [*MODELS["debug"], AC + "mode", "auto",
                                             "--memory.limit", "150MiB"])
        if steps[-1]["peak_bytes"] != plan["configured"]["peak_bytes"] or \
                steps[0]["loss"] != references["debug"][0]["loss"] or \
                steps[0]["grad_norm"] != references["debug"][0]["grad_norm"]:
            failures.append(f"auto: measured {steps[-1]} vs planned "
                            f"{plan['configured']['peak_bytes']} / none {references['debug'][0]}")

        # A budget nothing meets: exit 2 before writing anything.
        out = Path(tmp) / "never.jsonl"
        run = subprocess.run([REMAT, "train", *MODELS["debug"], AC + "mode", "memory_budget",
                              AC + "memory_budget", "10MiB", "--metrics.jsonl_path", str(out),
                              "--job.dump_folder", tmp], capture_output=True, text=True)
        print(f"10MiB budget: exit {run.returncode}: {run.stderr.strip()}")
        if run.returncode != 2 or "smallest peak" not in run.stderr or out.exists():
            failures.append(f"unreachable budget: exit {run.returncode}, {run.stderr!r}")
        run = subprocess.run([REMAT, "train", *MODELS["debug"], AC + "mode", "memory_budget",
                              AC + "memory_budget", f"{lowest['debug'] - 1}B", "--job.dump_folder",
                              tmp], capture_output=True, text=True)
        if run.returncode != 2 or "local_batch_size = " not in run.stderr:
            failures.append(f"budget below batch 4's lowest peak: no batch advice: {run.stderr!r}")
    if failures:
        print("FAIL:\n" + "\n".join(failures))
        sys.exit(1)
    print("PASS")


main()
