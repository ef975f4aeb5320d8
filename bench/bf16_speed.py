"""bf16 mixed precision against fp32, side by side in one run.

Trains the wide model (dim 1024, 8 layers, batch 2 x seq 1024, AC none) in
fp32, in bf16 on oneDNN's and on remat's native AVX512-BF16 GEMM (where the
CPU has avx512_bf16), in bf16 on the fallback path (bf16 storage, fp32 sgemm)
and in bf16 on the GEMM remat chooses by itself, interleaved over
--rounds rounds; reports the median and upper decile of tokens/s (the host's
other tenants only ever slow steps down), the ratio to fp32, MFU as remat
prints it (bf16 against the measured bf16 dot-product peak) and the
allocator's peak. Two more rows emulate an AVX2-only machine on this one
(REMAT_MAX_ISA=avx2 and OPENBLAS_CORETYPE=Haswell: AVX2 kernels everywhere,
so bf16 takes its fallback): fp32 against bf16 there, each bf16 row compared
with the fp32 row of its own ISA. Also runs build/gemm_rates, the GEMM rates at the model's
shapes, and build/ac_paired --precision bfloat16, which pairs fp32 and bf16 steps in
one process (the wide model and llama3 debug, on this CPU's kernels and on AVX2
ones): separate runs drift by more than the 1-2% the AVX2 fallback is about.
With --write, replaces the "bf16" section of BENCHMARKS.md.

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


# An AVX2-only machine as far as remat and OpenBLAS can tell (README "bf16").
AVX2 = {"REMAT_MAX_ISA": "avx2", "OPENBLAS_CORETYPE": "Haswell"}


def train(remat, precision, kernel, avx2, steps, tmp):
    """`kernel`: REMAT_BF16_KERNEL for bf16, REMAT_FP32_GEMM for fp32 (None:
    remat's default)."""
    metrics = os.path.join(tmp, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    env = dict(os.environ)
    for key in ["REMAT_BF16_KERNEL", "REMAT_FP32_GEMM", *AVX2]:
        env.pop(key, None)
    if kernel:
        env["REMAT_BF16_KERNEL" if precision == "bfloat16" else "REMAT_FP32_GEMM"] = kernel
    if avx2:
        env.update(AVX2)
    subprocess.run([remat, "train", *WIDE, "--training.mixed_precision_param", precision,
                    "--training.steps", str(steps + 1), "--metrics.log_freq", "1",
                    "--metrics.jsonl_path", metrics, "--job.dump_folder", tmp],
                   check=True, capture_output=True, env=env)
    rows = [json.loads(line) for line in open(metrics)][1:]
    return rows


def bf16_choice(remat):
    """The start-up lines saying which GEMM bf16 matmuls run on, and why."""
    env = {k: v for k, v in os.environ.items() if k not in ("REMAT_BF16_KERNEL", *AVX2)}
    with tempfile.TemporaryDirectory() as tmp:
        out = subprocess.run([remat, "train", *WIDE, "--training.mixed_precision_param",
                              "bfloat16", "--model.n_layers", "1", "--training.steps", "1",
                              "--job.dump_folder", tmp],
                             check=True, capture_output=True, text=True, env=env).stdout
    lines = [l for l in out.splitlines() if l.startswith(("mixed precision:", "bf16 matmuls:"))]
    return " / ".join(lines)


PAIRED = [("wide", WIDE, 16), ("llama3 debug", [
    "--config", "configs/llama3_debug.toml", "--training.threads", "2",
    "--validation.enabled", "false"], 20)]


def paired(binary, model, pairs, avx2):
    """fp32 (AC none) against bf16 steps interleaved in one process."""
    env = dict(os.environ)
    for key in ["REMAT_BF16_KERNEL", "REMAT_FP32_GEMM", *AVX2]:
        env.pop(key, None)
    if avx2:
        env.update(AVX2)
    # --mode none sets AC none whatever the model's arguments say.
    out = subprocess.run([binary, *model, "--mode", "none", "--precision", "bfloat16",
                          "--steps", str(pairs), "--warmup", "2"],
                         check=True, capture_output=True, text=True, env=env).stdout
    return json.loads(out)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    # (name, precision, kernel, AVX2 emulation, the fp32 row it is compared with)
    # fp32 is remat's default fp32 GEMM (oneDNN's brgemm on AVX-512, else
    # OpenBLAS: README "fp32 matmuls"), the fastest; OpenBLAS beside it.
    setups = [("fp32", "float32", None, False, "fp32"),
              ("fp32, OpenBLAS sgemm", "float32", "openblas", False, "fp32")]
    if has_avx512_bf16():
        setups.append(("bf16, oneDNN AVX512-BF16 GEMM", "bfloat16", "onednn", False, "fp32"))
        setups.append(("bf16, native AVX512-BF16 GEMM", "bfloat16", "native", False, "fp32"))
    setups.append(("bf16, fallback (fp32 GEMM)", "bfloat16", "fallback", False, "fp32"))
    # What a user gets: remat's choice by the measured speed of bf16 dot
    # products against fp32 FMAs (README "bf16 mixed precision").
    setups.append(("bf16, remat's choice", "bfloat16", None, False, "fp32"))
    setups.append(("fp32, AVX2 kernels", "float32", None, True, "fp32, AVX2 kernels"))
    setups.append(("bf16, AVX2 kernels (fallback)", "bfloat16", None, True,
                   "fp32, AVX2 kernels"))
    rows = {name: [] for name, *_ in setups}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(args.rounds):
            for name, precision, kernel, avx2, _ in setups:
                rows[name] += train(args.remat, precision, kernel, avx2, args.steps, tmp)
                print(name, [round(r["tps"]) for r in rows[name]], flush=True)
    ac_paired = os.path.join(os.path.dirname(args.remat), "ac_paired")
    pairs = []
    for avx2 in ([False, True] if has_avx512_bf16() else [False]):
        for name, model, count in PAIRED:
            r = paired(ac_paired, model, count, avx2)
            pairs.append((name, avx2, r))
            print(name, "avx2" if avx2 else "this CPU", r, flush=True)
    gemm_rates = [os.path.join(os.path.dirname(args.remat), "gemm_rates"), "2"]
    gemm = subprocess.run(gemm_rates, capture_output=True, text=True, check=True).stdout.strip()
    gemm_avx2 = subprocess.run(gemm_rates, capture_output=True, text=True, check=True,
                               env=dict(os.environ, **AVX2)).stdout.strip()
    choice = bf16_choice(args.remat)
    print(choice, flush=True)
    begin, end = markers("bf16")
    out = [begin, "## bf16 mixed precision against fp32", "",
           f"Command: `/usr/bin/python3 bench/bf16_speed.py --write` on {machine()}, "
           f"{os.cpu_count()} cores, 2 threads, {time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute "
           f"load average {load:.1f} at the start. Wide model (dim 1024, 8 layers, batch 2 x seq "
           f"1024), AC none; {args.steps} steps after 1 warm-up x {args.rounds} interleaved "
           "rounds. MFU as the log line prints it (bf16: against the measured bf16 "
           "dot-product peak). fp32 runs remat's default fp32 GEMM (oneDNN's f32 matmul "
           "where it is a brgemm kernel, else OpenBLAS: README \"fp32 matmuls\"); every "
           "row but the AVX2 ones is compared with it. The AVX2 rows run with REMAT_MAX_ISA=avx2 and "
           "OPENBLAS_CORETYPE=Haswell (an AVX2-only machine emulated) and compare with "
           "fp32 on AVX2 kernels. remat's choice, as its start-up printed it: "
           f"\"{choice}\"", "",
           "| set-up | median tokens/s | upper decile | vs fp32 (median) | vs fp32 (upper "
           "decile) | MFU | peak MiB |", "|---|---:|---:|---:|---:|---:|---:|"]
    for name, _, _, _, fp32 in setups:
        base = statistics.median(r["tps"] for r in rows[fp32])
        base_top = statistics.quantiles([r["tps"] for r in rows[fp32]], n=10)[-1]
        tps = [r["tps"] for r in rows[name]]
        med, top = statistics.median(tps), statistics.quantiles(tps, n=10)[-1]
        mfu = statistics.median(r["mfu"] for r in rows[name])
        peak = max(r["peak_bytes"] for r in rows[name])
        out.append(f"| {name} | {med:,.0f} | {top:,.0f} | {med / base:.2f}x | "
                   f"{top / base_top:.2f}x | {100 * mfu:.0f}% | {peak / 2**20:,.0f} |")
    out += ["", "Paired in one process (`build/ac_paired --mode none --precision bfloat16`): "
            "fp32 and bf16 steps alternate, each on its own model state and the same batches, "
            "after 2 warm-up pairs; bf16 speed = median over pairs of fp32 step time / bf16 "
            "step time, with its quartiles. bf16 runs remat's default bf16 kernel for the ISA "
            "(the fallback on AVX2, and where the CPU's bf16 dot products are slower than its "
            "fp32 FMAs).", "",
            "| kernels | model | pairs | fp32 step s | bf16 step s | bf16 speed vs fp32 | "
            "quartiles |", "|---|---|---:|---:|---:|---:|---|"]
    for name, avx2, r in pairs:
        out.append(f"| {'AVX2' if avx2 else 'this CPU'} | {name} | {r['pairs']} | "
                   f"{r['none_step_s']:.3f} | {r['mode_step_s']:.3f} | {r['speed_ratio']:.3f}x | "
                   f"{r['speed_ratio_q1']:.3f}-{r['speed_ratio_q3']:.3f} |")
    out += ["", "`build/gemm_rates 2` (GFLOP/s at the model's shapes, same run):", "", "```",
            gemm, "```", "", "The same with `REMAT_MAX_ISA=avx2 OPENBLAS_CORETYPE=Haswell`:",
            "", "```", gemm_avx2, "```", "", end]
    text = "\n".join(out)
    print(text)
    if args.write:
        replace_section("bf16", text)


main()
