"""bf16 mixed precision against fp32, side by side in one run.

Trains the wide model (dim 1024, 8 layers, batch 2 x seq 1024, AC none) in
fp32, in bf16 on the native AVX512-BF16 GEMM (where the CPU has it) and in
bf16 on the fallback path (bf16 storage, fp32 sgemm), interleaved over
--rounds rounds; reports the median and upper decile of tokens/s (the host's
other tenants only ever slow steps down), the ratio to fp32, MFU as remat
prints it (bf16 against the measured bf16 dot-product peak) and the
allocator's peak. Also runs build/gemm_rates, the GEMM rates at the model's
shapes. With --write, replaces the "bf16" section of BENCHMARKS.md.

Usage: /usr/bin/python3 bench/bf16_speed.py [--remat build/remat] [--steps 3]
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

WIDE = ["--config", "configs/llama3_debug.toml", "--model.dim", "1024", "--model.n_layers", "8",
        "--model.n_heads", "16", "--model.n_kv_heads", "16", "--training.seq_len", "1024",
        "--training.local_batch_size", "2", "--training.threads", "2",
        "--activation_checkpoint.mode", "none", "--validation.enabled", "false"]


def has_avx512_bf16():
    return "avx512_bf16" in open("/proc/cpuinfo").read()


def train(remat, precision, kernel, steps, tmp):
    metrics = os.path.join(tmp, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    env = dict(os.environ)
    env.pop("REMAT_BF16_KERNEL", None)
    if kernel:
        env["REMAT_BF16_KERNEL"] = kernel
    subprocess.run([remat, "train", *WIDE, "--training.mixed_precision_param", precision,
                    "--training.steps", str(steps + 1), "--metrics.log_freq", "1",
                    "--metrics.jsonl_path", metrics, "--job.dump_folder", tmp],
                   check=True, capture_output=True, env=env)
    rows = [json.loads(line) for line in open(metrics)][1:]
    return rows


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    setups = [("fp32", "float32", None)]
    if has_avx512_bf16():
        setups.append(("bf16, native AVX512-BF16 GEMM", "bfloat16", "native"))
    setups.append(("bf16, fallback (fp32 sgemm)", "bfloat16", "fallback"))
    rows = {name: [] for name, _, _ in setups}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for name, precision, kernel in setups:
                rows[name] += train(args.remat, precision, kernel, args.steps, tmp)
                print(name, [round(r["tps"]) for r in rows[name]], flush=True)
    gemm = subprocess.run([os.path.join(os.path.dirname(args.remat), "gemm_rates"), "2"],
                          capture_output=True, text=True).stdout.strip()
    begin, end = markers("bf16")
    out = [begin, "## bf16 mixed precision against fp32", "",
           f"Command: `/usr/bin/python3 bench/bf16_speed.py --write` on {machine()}, "
           f"{os.cpu_count()} cores, 2 threads, {time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute "
           f"load average {load:.1f} at the start. Wide model (dim 1024, 8 layers, batch 2 x seq "
           f"1024), AC none; {args.steps} steps after 1 warm-up x {args.rounds} interleaved "
           "rounds. MFU as the log line prints it (bf16: against the measured bf16 "
           "dot-product peak).", "",
           "| set-up | median tokens/s | upper decile | vs fp32 (median) | vs fp32 (upper "
           "decile) | MFU | peak MiB |", "|---|---:|---:|---:|---:|---:|---:|"]
    base = statistics.median(r["tps"] for r in rows["fp32"])
    base_top = statistics.quantiles([r["tps"] for r in rows["fp32"]], n=10)[-1]
    for name, _, _ in setups:
        tps = [r["tps"] for r in rows[name]]
        med, top = statistics.median(tps), statistics.quantiles(tps, n=10)[-1]
        mfu = statistics.median(r["mfu"] for r in rows[name])
        peak = max(r["peak_bytes"] for r in rows[name])
        out.append(f"| {name} | {med:,.0f} | {top:,.0f} | {med / base:.2f}x | "
                   f"{top / base_top:.2f}x | {100 * mfu:.0f}% | {peak / 2**20:,.0f} |")
    out += ["", "`build/gemm_rates 2` (GFLOP/s at the model's shapes, same run):", "", "```",
            gemm, "```", "", end]
    text = "\n".join(out)
    print(text)
    if args.write:
        replace_section("bf16", text)


main()
