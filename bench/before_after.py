"""Two builds of remat side by side: did a change slow training down?

Trains the same models in the same AC modes with a "before" and an "after"
binary, interleaved step runs over --rounds rounds (so a disturbance hits
both alike), and reports each pair's median tokens/s and their ratio, and
each binary's measured peak memory. Also checks that both binaries report
the same loss at every step: a refactor must not change a bit. With --write, replaces the "before_after" section of
BENCHMARKS.md.

Usage: /usr/bin/python3 bench/before_after.py --before OLD/remat --after build/remat
       [--label "issue 10 seams"] [--steps 6] [--rounds 3] [--write]
"""
import json
import os
import statistics
import subprocess
import tempfile
import time

from benchmarks_file import machine, markers, replace_section, two_build_arguments

AC = "--activation_checkpoint."
MODES = {
    "none": [AC + "mode", "none"],
    "full": [AC + "mode", "full"],
    "op threshold 0": [AC + "mode", "selective", AC + "selective_ac_option", "op",
                       AC + "selective_op_ac_mm_flops_threshold", "0"],
}
MODELS = {
    "llama3 debug (batch 8 x seq 256)": ["--config", "configs/llama3_debug.toml"],
    "llama4 debug (batch 8 x seq 256)": ["--config", "configs/llama4_debug.toml"],
}


def train(remat, model, mode, steps, tmp):
    metrics = os.path.join(tmp, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    subprocess.run([remat, "train", *model, *mode, "--training.steps", str(steps + 2),
                    "--metrics.log_freq", "1", "--metrics.jsonl_path", metrics,
                    "--job.dump_folder", tmp, "--training.threads", "2"],
                   check=True, capture_output=True)
    rows = [json.loads(line) for line in open(metrics)]
    return ([r["tps"] for r in rows[2:]], [r["loss"] for r in rows],
            max(r["peak_bytes"] for r in rows))


def upper_decile(xs):
    """The value 10% of the samples exceed."""
    return statistics.quantiles(xs, n=10)[-1]


def losses_compared(before, after):
    """'identical', or the largest relative difference over the steps (a
    change of summation order moves the last bits; a wrong result moves
    more)."""
    if before == after:
        return "identical"
    if len(before) != len(after):
        return "DIFFER (another number of steps)"
    worst = max(abs(a - b) / max(abs(b), 1e-30) for a, b in zip(after, before))
    return f"differ by up to {worst:.1e} (relative)"


def main():
    parser = two_build_arguments(rounds=3)
    parser.add_argument("--steps", type=int, default=6)
    args = parser.parse_args()
    begin, end = markers("before_after")
    load = os.getloadavg()[0]
    out = [begin, f"## Before and after a change{': ' + args.label if args.label else ''}", "",
           f"Command: `/usr/bin/python3 bench/before_after.py --before {args.before} --after "
           f"{args.after} --write` on {machine()}, {os.cpu_count()} cores, 2 threads, "
           f"{time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute load average {load:.1f} at the "
           f"start. Median and upper decile (the rate 10% of steps beat) of tokens/s over "
           f"{args.steps} timed steps x {args.rounds} interleaved rounds; losses compared at "
           "every step; peak: the allocator's measured peak (the log's peak_bytes). This machine shares its host: other tenants slow some steps by up to "
           "half, never speed one up, so the upper decile is the steadier measure of what a "
           "binary can do.", "",
           "| model | AC mode | before median | after median | ratio | before upper decile | "
           "after upper decile | ratio | peak MiB before | after | losses |",
           "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---|"]
    with tempfile.TemporaryDirectory() as tmp:
        for name, model in MODELS.items():
            for mode_name, mode in MODES.items():
                tps = {"before": [], "after": []}
                losses, peak = {}, {}
                for _ in range(args.rounds):
                    for which in ("before", "after"):
                        binary = args.before if which == "before" else args.after
                        t, loss, peak[which] = train(binary, model, mode, args.steps, tmp)
                        tps[which] += t
                        losses[which] = loss
                before = statistics.median(tps["before"])
                after = statistics.median(tps["after"])
                before_top, after_top = upper_decile(tps["before"]), upper_decile(tps["after"])
                same = losses_compared(losses["before"], losses["after"])
                out.append(f"| {name} | {mode_name} | {before:,.0f} | {after:,.0f} | "
                           f"{after / before:.3f} | {before_top:,.0f} | {after_top:,.0f} | "
                           f"{after_top / before_top:.3f} | {peak['before'] / 2**20:,.1f} | "
                           f"{peak['after'] / 2**20:,.1f} | {same} |")
                print(out[-1], flush=True)
    out += ["", end]
    text = "\n".join(out)
    print(text)
    if args.write:
        replace_section("before_after", text)


main()
