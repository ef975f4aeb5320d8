"""Where a training step's time goes, by op class, for three models.

Trains each model a few steps with op AC (torchtitan's default selective
mode) and profiling on, reads the Chrome trace remat writes of the last
step (profiling.profile_freq), and sums its events by op class and phase:
matmuls, attention, pointwise (norms, RoPE, SwiGLU, residual adds), MoE
routing (route, dispatch, combine), embedding and loss; recompute is its own
segment whatever the class. "outside ops" is the rest of the step's wall
time (gradient zeroing, clipping, AdamW, metrics). Writes a table (BENCHMARKS.md
section "op_breakdown") and a picture (docs/op_breakdown.svg) with --write.

Usage: /usr/bin/python3 bench/op_breakdown.py [--remat build/remat] [--steps 4] [--write]
"""
import argparse
import json
import os
import subprocess
import tempfile
import time
from xml.sax.saxutils import escape

from benchmarks_file import PATH, machine, markers, replace_section

AC = "--activation_checkpoint."
MODELS = {
    "llama3 debug (batch 8 x seq 256)": (["--config", "configs/llama3_debug.toml"], 8 * 256),
    "llama4 debug (batch 8 x seq 256)": (["--config", "configs/llama4_debug.toml"], 8 * 256),
    "wide (dim 1024, 8 layers, batch 2 x seq 1024)": (
        ["--config", "configs/llama3_debug.toml", "--model.dim", "1024", "--model.n_layers", "8",
         "--model.n_heads", "16", "--model.n_kv_heads", "16", "--training.seq_len", "1024",
         "--training.local_batch_size", "2"], 2 * 1024),
}
CLASSES = {"linear": "matmul", "grouped_linear": "matmul", "attention": "attention",
           "rmsnorm": "pointwise", "rope": "pointwise", "silu_mul": "pointwise",
           "add": "pointwise", "moe_route": "MoE routing", "moe_dispatch": "MoE routing",
           "moe_combine": "MoE routing", "embedding": "embedding and loss",
           "cross_entropy": "embedding and loss", "linear_cross_entropy": "embedding and loss"}
SEGMENTS = ["matmul", "attention", "pointwise", "MoE routing", "embedding and loss",
            "recompute", "outside ops"]
COLOURS = ["#1f77b4", "#ff7f0e", "#2ca02c", "#9467bd", "#8c564b", "#d62728", "#7f7f7f"]
# BENCHMARKS.md's picture; another CPU's benchmarks file (benchmarks_file.py)
# gets its own beside it, so neither replaces the other.
SVG = ("docs/op_breakdown.svg" if PATH == "BENCHMARKS.md"
       else os.path.splitext(PATH)[0] + "-op_breakdown.svg")
SVG_LINK = os.path.relpath(SVG, os.path.dirname(PATH) or ".")  # from the file that shows it


def breakdown(remat, model, tokens, steps, tmp):
    metrics = os.path.join(tmp, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    subprocess.run([remat, "train", *model, AC + "mode", "selective", AC + "selective_ac_option",
                    "op", "--training.steps", str(steps), "--profiling.enable_profiling", "true",
                    "--profiling.profile_freq", str(steps), "--metrics.log_freq", "1",
                    "--metrics.jsonl_path", metrics, "--job.dump_folder", tmp,
                    "--training.threads", "2", "--validation.enabled", "false"],
                   check=True, capture_output=True)
    trace = json.load(open(os.path.join(tmp, "profile_traces", f"iteration_{steps}",
                                        "rank0_trace.json")))
    seconds = {s: 0.0 for s in SEGMENTS}
    for e in trace["traceEvents"]:
        if e["ph"] != "X":
            continue
        segment = "recompute" if e["cat"] == "recompute" else CLASSES[e["args"]["op"]]
        seconds[segment] += e["dur"] / 1e6
    last = [json.loads(line) for line in open(metrics)][-1]
    step = tokens / last["tps"]
    seconds["outside ops"] = max(0.0, step - sum(seconds.values()))
    return seconds, step


def svg(results):
    w, bar, gap, left, top = 820, 34, 22, 300, 60
    h = top + len(results) * (bar + gap) + 60
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
         'font-family="sans-serif" font-size="12">',
         '<rect width="100%" height="100%" fill="white"/>',
         f'<text x="10" y="24" font-size="15">Share of a training step by op class (op AC, '
         f'measured from remat\'s profile trace)</text>']
    x_end = w - 20
    for i, (name, (seconds, step)) in enumerate(results.items()):
        y = top + i * (bar + gap)
        o.append(f'<text x="{left - 8}" y="{y + bar / 2 + 4}" text-anchor="end">'
                 f'{escape(name)}, {step:.2f} s</text>')
        x = left
        for segment, colour in zip(SEGMENTS, COLOURS):
            width = (x_end - left) * seconds[segment] / step
            if width <= 0:
                continue
            o.append(f'<rect x="{x:.1f}" y="{y}" width="{width:.1f}" height="{bar}" '
                     f'fill="{colour}"><title>{escape(segment)}: {seconds[segment]:.3f} s'
                     f'</title></rect>')
            if width > 30:
                o.append(f'<text x="{x + width / 2:.1f}" y="{y + bar / 2 + 4}" '
                         f'text-anchor="middle" fill="white">'
                         f'{100 * seconds[segment] / step:.0f}%</text>')
            x += width
    y = top + len(results) * (bar + gap) + 10
    x = 10
    for segment, colour in zip(SEGMENTS, COLOURS):
        o.append(f'<rect x="{x}" y="{y}" width="12" height="12" fill="{colour}"/>')
        o.append(f'<text x="{x + 16}" y="{y + 11}">{escape(segment)}</text>')
        x += 22 + 7 * len(segment)
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--steps", type=int, default=4)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (model, tokens) in MODELS.items():
            results[name] = breakdown(args.remat, model, tokens, args.steps, tmp)
            print(name, results[name], flush=True)
    begin, end = markers("op_breakdown")
    out = [begin, "## Where the step's time goes, by op class", "",
           f"Command: `/usr/bin/python3 bench/op_breakdown.py --write` on {machine()}, "
           f"{os.cpu_count()} cores, 2 threads, {time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute "
           f"load average {load:.1f} at the start. Op AC; the trace of step {args.steps}; "
           f"shares of that step's wall time. Picture: [{SVG}]({SVG_LINK}).", "",
           "| model | step s | " + " | ".join(SEGMENTS) + " |",
           "|---|---:|" + "---:|" * len(SEGMENTS)]
    for name, (seconds, step) in results.items():
        out.append(f"| {name} | {step:.3f} | " +
                   " | ".join(f"{100 * seconds[s] / step:.1f}%" for s in SEGMENTS) + " |")
    out += ["", end]
    text = "\n".join(out)
    print(text)
    if args.write:
        with open(SVG + ".tmp", "w") as f:
            f.write(svg(results))
        os.replace(SVG + ".tmp", SVG)
        replace_section("op_breakdown", text)


if __name__ == "__main__":
    main()
