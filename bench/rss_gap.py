"""What memory.limit bounds against what the operating system sees: the
allocator's peak (every tensor byte, what the planner predicts and
memory.limit bounds) next to the process's peak resident set size.

For each run it reads the line `train` prints at exit ("memory: allocator
peak ... reserved ... process peak RSS ... (VmHWM)") and, independently, the child's
ru_maxrss from wait4(2) (what /usr/bin/time -v reports as "Maximum resident
set size"). Prints a Markdown table; README "What memory.limit bounds" quotes
it.

Usage: /usr/bin/python3 bench/rss_gap.py [--remat build/remat] [--steps 3]
"""
import argparse
import os
import re
import subprocess
import tempfile

AC = "--activation_checkpoint."
RUNS = [
    # (model, config, shape, AC mode flags, dataset)
    ("llama3 debug", "configs/llama3_debug.toml", (8, 256), "none", [AC + "mode", "none"]),
    ("llama3 debug", "configs/llama3_debug.toml", (8, 256), "selective op",
     [AC + "mode", "selective", AC + "selective_ac_option", "op"]),
    ("llama3 debug", "configs/llama3_debug.toml", (8, 256), "full", [AC + "mode", "full"]),
    ("llama3 debug", "configs/llama3_debug.toml", (1, 32), "full", [AC + "mode", "full"]),
    ("llama4 debug", "configs/llama4_debug.toml", (8, 256), "none", [AC + "mode", "none"]),
    ("llama4 debug", "configs/llama4_debug.toml", (8, 256), "selective op",
     [AC + "mode", "selective", AC + "selective_ac_option", "op"]),
    ("llama4 debug", "configs/llama4_debug.toml", (8, 256), "full", [AC + "mode", "full"]),
    ("llama3, dim 1024, 8 layers", "configs/llama3_debug.toml", (4, 1024), "selective 2",
     ["--model.dim", "1024", "--model.n_layers", "8", "--model.n_heads", "16",
      "--model.n_kv_heads", "16", AC + "mode", "selective", AC + "selective_ac_option", "2"]),
]
LINE = re.compile(r"memory: allocator peak \S+ \(([\d,]+) bytes; what memory.limit bounds\), "
                  r"reserved \S+ \(([\d,]+) bytes, with its cache of freed buffers\), "
                  r"process peak RSS \S+ \(([\d,]+) bytes, VmHWM\)")
MIB = 1024 * 1024


def run(remat, config, shape, flags, steps, threads):
    argv = [remat, "train", "--config", config, "--training.local_batch_size", str(shape[0]),
            "--training.seq_len", str(shape[1]), "--training.steps", str(steps),
            "--metrics.peak_flops", "1e11", "--training.threads", str(threads), *flags]
    with tempfile.TemporaryDirectory(prefix="remat-rss-") as tmp:
        proc = subprocess.Popen(argv + ["--job.dump_folder", tmp], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)
        out, err = proc.communicate()
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed:\n{err}")
    m = LINE.search(out)
    if not m:
        raise SystemExit(f"no memory line in the output of {' '.join(argv)}")
    return [int(m.group(k).replace(",", "")) for k in (1, 2, 3)]


def maxrss_by_wait4(remat, config, shape, flags, steps, threads):
    """The same run, its peak RSS as the kernel accounts it (ru_maxrss, KiB)."""
    argv = [remat, "train", "--config", config, "--training.local_batch_size", str(shape[0]),
            "--training.seq_len", str(shape[1]), "--training.steps", str(steps),
            "--metrics.peak_flops", "1e11", "--training.threads", str(threads), *flags]
    with tempfile.TemporaryDirectory(prefix="remat-rss-") as tmp:
        devnull = os.open(os.devnull, os.O_WRONLY)
        pid = os.posix_spawn(remat, argv + ["--job.dump_folder", tmp], os.environ,
                             file_actions=[(os.POSIX_SPAWN_DUP2, devnull, 1)])
        _, status, usage = os.wait4(pid, 0)
        os.close(devnull)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{' '.join(argv)} failed")
    return usage.ru_maxrss * 1024


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--threads", type=int, default=os.cpu_count())
    args = parser.parse_args()
    remat = os.path.abspath(args.remat)
    print(f"{args.steps} steps, {args.threads} threads, fortunes dataset "
          "(2.58M tokens: 10 MB of int32 ids)\n")
    print("| model | batch x seq | AC | allocator peak (MiB) | allocator reserved (MiB) "
          "| peak RSS, VmHWM (MiB) | peak RSS, wait4 (MiB) | RSS - allocator peak (MiB) "
          "| RSS / allocator peak |")
    print("|---|---|---|---:|---:|---:|---:|---:|---:|")
    for model, config, shape, mode, flags in RUNS:
        peak, reserved, hwm = run(remat, config, shape, flags, args.steps, args.threads)
        maxrss = maxrss_by_wait4(remat, config, shape, flags, args.steps, args.threads)
        print(f"| {model} | {shape[0]} x {shape[1]} | {mode} | {peak / MIB:.1f} "
              f"| {reserved / MIB:.1f} | {hwm / MIB:.1f} | {maxrss / MIB:.1f} "
              f"| {(hwm - peak) / MIB:.1f} | {hwm / peak:.2f} |", flush=True)


if __name__ == "__main__":
    main()
