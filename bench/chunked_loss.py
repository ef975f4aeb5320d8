"""What the chunked loss head (model.loss_chunk_rows) saves and costs.

Measured: llama3 debug with a 32,768-token vocabulary (dim 256, batch 8 x
seq 256, selective op AC), where the logits (2048 x 32768 fp32, 256 MiB)
dominate the step's memory: the logits whole against chunks of 1024, 512
and 256 rows, in interleaved rounds so slow phases of a shared machine hit
them alike, in fp32 and in bf16 mixed precision (whole against 1024-row
chunks). Per set-up: the allocator peak (the metrics' peak_bytes, what
memory.limit bounds) beside `remat plan`'s prediction for it, and the median
tokens/s of the timed steps with its ratio to the whole logits.

Planned: `remat plan` for a Llama 3.2 1B-shaped model (dim 2048, 16 layers,
32 heads, 8 kv heads, vocabulary 128,256) at batch 4 x seq 4096, whole
against 1024-row chunks, under full and selective op AC: the peak and the
recompute FLOPs the rebuilt logits add.

With --write it replaces the "chunked_loss" section of BENCHMARKS.md.

Usage: /usr/bin/python3 bench/chunked_loss.py [--remat build/remat] [--steps 5]
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

MEASURED = ["--config", "configs/llama3_debug.toml", "--model.vocab_size", "32768",
            "--training.local_batch_size", "8", "--training.seq_len", "256"]
BF16 = ["--training.mixed_precision_param", "bfloat16"]
# (dtype, chunk rows): each row's ratios are against its dtype's whole logits.
SETUPS = [("fp32", 0), ("fp32", 1024), ("fp32", 512), ("fp32", 256), ("bf16", 0), ("bf16", 1024)]
PLANNED = ["--config", "configs/llama3_debug.toml", "--model.flavor", "8B", "--model.dim", "2048",
           "--model.n_layers", "16", "--model.n_heads", "32", "--model.n_kv_heads", "8",
           "--model.ffn_dim_multiplier", "1.5", "--model.multiple_of", "256",
           "--training.local_batch_size", "4", "--training.seq_len", "4096"]
AC_MODES = {"full": ["--activation_checkpoint.mode", "full"],
            "selective op": ["--activation_checkpoint.mode", "selective",
                             "--activation_checkpoint.selective_ac_option", "op"]}
WARMUP = 2


def name_of(chunk):
    return "logits whole" if chunk == 0 else f"chunks of {chunk} rows"


def plan(remat, *args):
    proc = subprocess.run([remat, "plan", *args, "--json"], check=True, capture_output=True,
                          text=True)
    return json.loads(proc.stdout)["configured"]


def setup_flags(dtype, chunk):
    return [*MEASURED, "--model.loss_chunk_rows", str(chunk), *(BF16 if dtype == "bf16" else [])]


def train(remat, setup, steps, tmp):
    """The timed steps' tokens/s and the run's allocator peak in bytes."""
    metrics = os.path.join(tmp, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    subprocess.run([remat, "train", *setup_flags(*setup), "--training.steps", str(steps + WARMUP),
                    "--metrics.log_freq", "1", "--metrics.jsonl_path", metrics,
                    "--job.dump_folder", tmp, "--training.threads", "2",
                    "--validation.enabled", "false"], check=True, capture_output=True)
    rows = [json.loads(line) for line in open(metrics)]
    return [r["tps"] for r in rows[WARMUP:]], max(r["peak_bytes"] for r in rows)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--steps", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--write", action="store_true",
                        help="replace BENCHMARKS.md's chunked_loss section")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    print(f"{machine()}, 2 threads, 1-minute load average {load_before:.1f} at the start")

    measured_header = ["| dtype | set-up | allocator peak MiB | `remat plan` MiB | peak vs whole "
                       "| median tokens/s | tokens/s vs whole | added recompute / model FLOPs |",
                       "|---|---|---:|---:|---:|---:|---:|---:|"]
    print("\n".join(measured_header))
    measured = []
    with tempfile.TemporaryDirectory() as tmp:
        tps = {setup: [] for setup in SETUPS}
        peak = {}
        for _ in range(args.rounds):
            for setup in SETUPS:
                got, peak[setup] = train(args.remat, setup, args.steps, tmp)
                tps[setup].extend(got)
        for setup in SETUPS:
            dtype, chunk = setup
            whole = (dtype, 0)
            predicted = plan(args.remat, *setup_flags(*setup))
            base = plan(args.remat, *setup_flags(*whole))
            added = (predicted["recompute_flops"] - base["recompute_flops"]) / \
                predicted["model_flops"]
            median = statistics.median(tps[setup])
            measured.append(
                f"| {dtype} | {name_of(chunk)} | {peak[setup] / 2**20:.1f} | "
                f"{predicted['peak_bytes'] / 2**20:.1f}"
                f"{'' if predicted['peak_bytes'] == peak[setup] else ' (differs)'} | "
                f"{peak[setup] / peak[whole]:.2f}x | {median:,.0f} | "
                f"{median / statistics.median(tps[whole]):.2f}x | {100 * added:.1f}% |")
            print(measured[-1], flush=True)

    planned_header = ["| AC mode | set-up | planned peak GiB | peak vs whole | recompute TFLOP "
                      "| model TFLOP | peak during |", "|---|---|---:|---:|---:|---:|---|"]
    print("\n".join(planned_header))
    planned = []
    for mode, flags in AC_MODES.items():
        whole = None
        for chunk in (0, 1024):
            p = plan(args.remat, *PLANNED, *flags, "--model.loss_chunk_rows", str(chunk))
            whole = whole or p
            planned.append(f"| {mode} | {name_of(chunk)} | {p['peak_bytes'] / 2**30:.2f} | "
                           f"{p['peak_bytes'] / whole['peak_bytes']:.2f}x | "
                           f"{p['recompute_flops'] / 1e12:.1f} | {p['model_flops'] / 1e12:.1f} | "
                           f"{p['peak_during']} |")
            print(planned[-1], flush=True)
    load_after = os.getloadavg()[0]

    if args.write:
        begin, end = markers("chunked_loss")
        stamp = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
        body = "\n".join([
            begin,
            "## The chunked loss head: memory and speed",
            "",
            f"Command: `/usr/bin/python3 bench/chunked_loss.py --write` on {machine()}, 2 cores, "
            f"2 threads, {stamp}, 1-minute load average {load_before:.1f} at the start and "
            f"{load_after:.1f} at the end. llama3 debug with a 32,768-token vocabulary "
            "(`--model.vocab_size 32768`), batch 8 x seq 256, selective op AC: the logits "
            "(2048 x 32768 fp32, 256 MiB) whole against `model.loss_chunk_rows` chunks, in fp32 "
            "and under `training.mixed_precision_param = \"bfloat16\"`; "
            f"{args.rounds} interleaved rounds of {args.steps} timed steps after {WARMUP} "
            "warm-up. Allocator peak: the metrics' peak_bytes, beside `remat plan`'s "
            "prediction for the same keys. Tokens/s: the median of the timed steps. The "
            "rebuilt logits cost one more output-projection forward per step; at this "
            "vocabulary that is a large share of the model's FLOPs (last column: the "
            "recompute FLOPs the chunks add, over the model's, from `remat plan`), so the "
            "slowdown is to be read against it.",
            "", *measured_header, *measured, "",
            "Planned only (`remat plan`, no run): a Llama 3.2 1B-shaped model (dim 2048, 16 "
            "layers, 32 heads, 8 kv heads, vocabulary 128,256, FFN multiplier 1.5) at batch 4 x "
            "seq 4096 per device, fp32, logits whole against chunks of 1024 rows.",
            "", *planned_header, *planned, "", end])
        replace_section("chunked_loss", body)


if __name__ == "__main__":
    main()
