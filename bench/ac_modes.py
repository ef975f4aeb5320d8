"""remat's AC modes side by side: tokens/s, memory and recompute per mode.

For each model (llama3 and llama4 debug by default), trains 2 warm-up + N
timed steps in every AC mode and reports the median step's tokens/s, the
allocator peak, the kept activations' high-water mark, the recompute FLOPs of
a step (from `remat plan --json`, the same schedule the run follows), and the
slowdown against AC none next to the recompute share of the FLOPs. With
--write, replaces the "AC modes" section of BENCHMARKS.md.

The modes run in --rounds interleaved rounds, each slowdown paired with the
none run of its own round (the median over rounds is reported): this shared
host's speed drifts over minutes, so modes run one after another once would
measure the drift.

Usage: /usr/bin/python3 bench/ac_modes.py [--remat build/remat] [--steps 5]
       [--rounds 3] [--write]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time

from benchmarks_file import markers, replace_section

BEGIN, END = markers("ac_modes")
AC = "--activation_checkpoint."
OP = [AC + "mode", "selective", AC + "selective_ac_option", "op"]
MODES = [
    ("none", "none", [AC + "mode", "none"]),
    ("full", "full", [AC + "mode", "full"]),
    ("selective 2", "selective 2", [AC + "mode", "selective", AC + "selective_ac_option", "2"]),
    ("op, threshold 0", "op threshold 0",
     OP + [AC + "selective_op_ac_mm_flops_threshold", "0",
           AC + "per_op_sac_force_recompute_mm_by_fqns", ""]),
    ("op, threshold 1e50", "op threshold 1e50",
     OP + [AC + "selective_op_ac_mm_flops_threshold", "1e50",
           AC + "per_op_sac_force_recompute_mm_by_fqns", ""]),
    ("op, default filter (moe.router.gate)", None,
     OP + [AC + "per_op_sac_force_recompute_mm_by_fqns", "moe.router.gate"]),
]
MODELS = {
    "llama3 debug (batch 8 x seq 256)": "configs/llama3_debug.toml",
    "llama4 debug (batch 8 x seq 256)": "configs/llama4_debug.toml",
}


def run_mode(remat, config, args, steps, tmp):
    metrics = os.path.join(tmp, "m.jsonl")
    cmd = [remat, "train", "--config", config, *args, "--training.steps", str(steps + 2),
           "--metrics.log_freq", "1", "--metrics.jsonl_path", metrics, "--job.dump_folder", tmp,
           "--training.threads", "2"]
    subprocess.run(cmd, check=True, capture_output=True)
    rows = [json.loads(l) for l in open(metrics)][2:]
    plan = json.loads(subprocess.run([remat, "plan", "--config", config, *args, "--json"],
                                     check=True, capture_output=True, text=True).stdout)
    return {"tps": statistics.median(r["tps"] for r in rows),
            "peak": max(r["peak_bytes"] for r in rows),
            "kept": max(r["max_activation_bytes"] for r in rows),
            "recompute": plan["configured"]["recompute_flops"],
            "model": plan["configured"]["model_flops"]}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo")
                if l.startswith("model name")), "?")
    out = [BEGIN, "## AC modes side by side (remat)", "",
           f"Command: `/usr/bin/python3 bench/ac_modes.py --write` on {cpu}, {os.cpu_count()} "
           f"cores, 2 threads, {time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute load average "
           f"{os.getloadavg()[0]:.1f} at the end. Median of {args.steps} timed steps after 2 "
           f"warm-up steps, {args.rounds} interleaved rounds (tokens/s: the median over rounds). "
           "Slowdown = tokens/s of none / tokens/s of the mode - 1, paired within a round, "
           "the median over rounds; recompute "
           "share = recompute FLOPs / model FLOPs of a step (matmuls and attention; the "
           "pointwise ops re-run as well but count 0 FLOPs).", ""]
    with tempfile.TemporaryDirectory() as tmp:
        for model, config in MODELS.items():
            out += [f"### {model}", "",
                    "| AC mode | tokens/s | allocator peak MiB | kept activations MiB | "
                    "recompute GFLOP/step | recompute share | slowdown vs none |",
                    "|---|---:|---:|---:|---:|---:|---:|"]
            runs = {label: [] for label, _, _ in MODES}
            for _ in range(args.rounds):
                for label, _, mode_args in MODES:
                    runs[label].append(run_mode(args.remat, config, mode_args, args.steps, tmp))
            none = runs[MODES[0][0]]
            for label, _, _ in MODES:
                rs = runs[label]
                slowdown = statistics.median(n["tps"] / r["tps"] - 1 for n, r in zip(none, rs))
                r = rs[-1]
                out.append(f"| {label} | {statistics.median(x['tps'] for x in rs):,.0f} | "
                           f"{r['peak'] / 2**20:,.1f} | {r['kept'] / 2**20:,.1f} | "
                           f"{r['recompute'] / 1e9:,.2f} | "
                           f"{100 * r['recompute'] / r['model']:.1f}% | {100 * slowdown:+.1f}% |")
                print(out[-1], flush=True)
            out.append("")
    out.append(END)
    text = "\n".join(out)
    print(text)
    if args.write:
        replace_section("ac_modes", text)

main()
