"""memory_budget against the fixed modes and PyTorch's knapsack, side by side.

For each model: trains op AC (threshold 0, torchtitan's default filter) and
takes its measured allocator peak; then trains remat's memory_budget at
exactly that peak, with the FLOP cost model and with the measured one; then
PyTorch's approach (activation_checkpoint.budget_solver = "pytorch_knapsack",
a knapsack over saved bytes with FLOP values, pointwise ops free) at a few
fractions, and remat's budget at each knapsack run's own true peak. Runs are
interleaved over --rounds rounds and each row reports the median step's
tokens/s over all rounds (2 warm-up steps dropped), so a disturbance hits
every row alike. With --write, replaces the "budget_vs_fixed" section of
BENCHMARKS.md.

Usage: /usr/bin/python3 bench/budget_vs_fixed.py [--remat build/remat] [--steps 6]
       [--rounds 2] [--write]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

from benchmarks_file import machine, markers, replace_section

AC = "--activation_checkpoint."
OP0 = [AC + "mode", "selective", AC + "selective_ac_option", "op",
       AC + "selective_op_ac_mm_flops_threshold", "0"]
MODELS = {
    "llama3 debug (batch 8 x seq 256)": ["--config", "configs/llama3_debug.toml"],
    "llama4 debug (batch 8 x seq 256)": ["--config", "configs/llama4_debug.toml"],
    "wide (dim 1024, 8 layers, batch 2 x seq 1024)": [
        "--config", "configs/llama3_debug.toml", "--model.dim", "1024", "--model.n_layers", "8",
        "--model.n_heads", "16", "--model.n_kv_heads", "16", "--training.seq_len", "1024",
        "--training.local_batch_size", "2"],
}
KNAPSACK_FRACTIONS = ["0.3", "0.6"]


def budget(bytes_, cost_model):
    return [AC + "mode", "memory_budget", AC + "memory_budget", f"{bytes_}B",
            AC + "cost_model", cost_model]


def train(remat, model, args, steps, tmp):
    metrics = os.path.join(tmp, "m.jsonl")
    subprocess.run([remat, "train", *model, *args, "--training.steps", str(steps + 2),
                    "--metrics.log_freq", "1", "--metrics.jsonl_path", metrics,
                    "--job.dump_folder", tmp, "--training.threads", "2"],
                   check=True, capture_output=True)
    rows = [json.loads(l) for l in open(metrics)][2:]
    plan = json.loads(subprocess.run([remat, "plan", *model, *args, "--job.dump_folder", tmp,
                                      "--json"], check=True, capture_output=True,
                                     text=True).stdout)
    return {"tps": [r["tps"] for r in rows], "peak": max(r["peak_bytes"] for r in rows),
            "recompute": plan["configured"]["recompute_flops"],
            "model": plan["configured"]["model_flops"],
            "predicted": plan["configured"]["peak_bytes"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    begin, end = markers("budget_vs_fixed")
    out = [begin, "## memory_budget against the fixed modes and PyTorch's knapsack", "",
           f"Command: `/usr/bin/python3 bench/budget_vs_fixed.py --write` on {machine()}, "
           f"{os.cpu_count()} cores, 2 threads, {time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute "
           f"load average {os.getloadavg()[0]:.1f} at the start. Median tokens/s of "
           f"{args.steps} timed steps x {args.rounds} interleaved rounds. `budget @ X` is "
           "remat's memory_budget set to X's measured peak. Recompute share = recompute "
           "FLOPs / model FLOPs (pointwise ops re-run but count 0).", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in MODELS.items():
            # Round 0 fixes the budgets (peaks are exact, so one run suffices).
            op0 = train(args.remat, model, OP0, 1, tmp)
            rows = [("none", [AC + "mode", "none"]), ("op threshold 0", OP0),
                    ("budget @ op threshold 0 (FLOPs)", budget(op0["peak"], "flops")),
                    ("budget @ op threshold 0 (measured)", budget(op0["peak"], "measured"))]
            for f in KNAPSACK_FRACTIONS:
                ks = [AC + "mode", "memory_budget", AC + "memory_budget", f,
                      AC + "budget_solver", "pytorch_knapsack"]
                peak = train(args.remat, model, ks, 1, tmp)["peak"]
                rows += [(f"pytorch knapsack {f}", ks),
                         (f"budget @ knapsack {f} (measured)", budget(peak, "measured"))]
            results = {label: None for label, _ in rows}
            for _ in range(args.rounds):
                for label, mode in rows:
                    r = train(args.remat, model, mode, args.steps, tmp)
                    if results[label] is None:
                        results[label] = r
                    else:
                        results[label]["tps"] += r["tps"]
            out += [f"### {name}", "",
                    "| plan | tokens/s | vs op threshold 0 | measured peak MiB | predicted peak "
                    "MiB | recompute share |", "|---|---:|---:|---:|---:|---:|"]
            base = statistics.median(results["op threshold 0"]["tps"])
            for label, _ in rows:
                r = results[label]
                tps = statistics.median(r["tps"])
                out.append(f"| {label} | {tps:,.0f} | {tps / base:.3f}x | "
                           f"{r['peak'] / 2**20:,.2f} | {r['predicted'] / 2**20:,.2f} | "
                           f"{100 * r['recompute'] / r['model']:.1f}% |")
                print(out[-1], flush=True)
            out.append("")
    out.append(end)
    text = "\n".join(out)
    print(text)
    if args.write:
        replace_section("budget_vs_fixed", text)


main()
