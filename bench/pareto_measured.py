"""The wide model's predicted memory/recompute front beside measured runs.

Asks `remat plan --pareto` for the front under the measured cost model (op
times calibrated on this machine, recompute in seconds), then trains the
fixed AC modes and the budget plan at a few peaks along the front, and puts
each run's measured allocator peak and measured slowdown against AC "none"
beside the prediction: a table (BENCHMARKS.md section "pareto_measured"
with --write) and a picture (docs/wide_front_measured.svg with --write).
Step times are the median of --steps steps after 2 warm-up steps; runs are
interleaved over --rounds rounds so a disturbance hits every row alike.

Usage: /usr/bin/python3 bench/pareto_measured.py [--remat build/remat]
       [--steps 3] [--rounds 2] [--budgets 3] [--write]
"""
import argparse
import json
import os
import statistics
import subprocess
import tempfile
import time
from xml.sax.saxutils import escape

from benchmarks_file import machine, markers, replace_section

AC = "--activation_checkpoint."
WIDE = ["--config", "configs/llama3_debug.toml", "--model.dim", "1024", "--model.n_layers", "8",
        "--model.n_heads", "16", "--model.n_kv_heads", "16", "--training.seq_len", "1024",
        "--training.local_batch_size", "2", "--training.threads", "2"]
FIXED = {
    "none": [AC + "mode", "none"],
    "full": [AC + "mode", "full"],
    "selective 2": [AC + "mode", "selective", AC + "selective_ac_option", "2"],
    "op threshold 0": [AC + "mode", "selective", AC + "selective_ac_option", "op",
                       AC + "selective_op_ac_mm_flops_threshold", "0"],
    "op threshold 1e50": [AC + "mode", "selective", AC + "selective_ac_option", "op",
                          AC + "selective_op_ac_mm_flops_threshold", "1e50"],
}
TOKENS = 2 * 1024  # per step: batch x seq_len above
SVG = "docs/wide_front_measured.svg"


def train(remat, common, mode, steps, tmp):
    metrics = os.path.join(tmp, "m.jsonl")
    if os.path.exists(metrics):
        os.remove(metrics)
    subprocess.run([remat, "train", *common, *mode, "--training.steps", str(steps + 2),
                    "--metrics.log_freq", "1", "--metrics.jsonl_path", metrics],
                   check=True, capture_output=True)
    rows = [json.loads(line) for line in open(metrics)]
    return [TOKENS / r["tps"] for r in rows[2:]], max(r["peak_bytes"] for r in rows)


def budget_points(front, count):
    """`count` front points spread evenly in peak between its ends (not the ends)."""
    lo, hi = front[-1]["peak_bytes"], front[0]["peak_bytes"]
    picks = []
    for i in range(1, count + 1):
        target = lo + (hi - lo) * i / (count + 1)
        best = min(front, key=lambda p: abs(p["peak_bytes"] - target))
        if best not in picks:
            picks.append(best)
    return picks


def svg(front, fixed, runs, whole):
    """x = peak GiB, y = recompute as % of a step without recompute."""
    w, h, left, right, top, bottom = 840, 480, 70, 260, 40, 50
    gib = 2.0 ** 30
    xs = [p["peak_bytes"] / gib for p in front] + [r["peak"] / gib for r in runs]
    ys = [100 * p["recompute"] / whole for p in front] + [r["measured"] for r in runs] + \
        [100 * m["recompute"] / whole for m in fixed]
    x0, x1 = min(xs), max(xs)
    pad = (x1 - x0) * 0.05 or 0.01
    x0, x1 = x0 - pad, x1 + pad
    y0, y1 = min(0.0, min(ys)) * 1.1, max(ys) * 1.1 or 1

    def px(x):
        return left + (x - x0) / (x1 - x0) * (w - left - right)

    def py(y):
        return h - bottom - (y - y0) / (y1 - y0) * (h - top - bottom)
    o = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{w}" height="{h}" '
         'font-family="sans-serif" font-size="12">', '<rect width="100%" height="100%" '
         'fill="white"/>', f'<text x="{left}" y="24" font-size="15">wide model (dim 1024, 8 '
         'layers, batch 2 x seq 1024): predicted front and measured runs</text>',
         f'<line x1="{left}" y1="{py(0):.1f}" x2="{w - right}" y2="{py(0):.1f}" stroke="black"/>',
         f'<line x1="{left}" y1="{top}" x2="{left}" y2="{h - bottom}" stroke="black"/>']
    for i in range(5):
        gx, gy = x0 + (x1 - x0) * i / 4, y0 + (y1 - y0) * i / 4
        o.append(f'<text x="{px(gx):.1f}" y="{h - bottom + 16}" text-anchor="middle">'
                 f'{gx:.3f}</text>')
        o.append(f'<text x="{left - 6}" y="{py(gy) + 4:.1f}" text-anchor="end">{gy:.0f}</text>')
    o.append(f'<text x="{(left + w - right) / 2}" y="{h - 12}" text-anchor="middle">peak memory '
             '(GiB)</text>')
    o.append(f'<text transform="translate(16,{(top + h - bottom) / 2}) rotate(-90)" '
             'text-anchor="middle">recompute (% of a step without recompute)</text>')
    pts, prev = [], None
    for p in front:
        x, y = px(p["peak_bytes"] / gib), py(100 * p["recompute"] / whole)
        if prev is not None:
            pts.append(f"{x:.1f},{prev:.1f}")
        pts.append(f"{x:.1f},{y:.1f}")
        prev = y
    o.append(f'<polyline fill="none" stroke="#1f77b4" stroke-width="2" points="{" ".join(pts)}"/>')
    for m in fixed:
        x, y = px(m["peak_bytes"] / gib), py(100 * m["recompute"] / whole)
        o.append(f'<rect x="{x - 4:.1f}" y="{y - 4:.1f}" width="8" height="8" fill="none" '
                 'stroke="#d62728"/>')
    for i, r in enumerate(runs):
        x, y = px(r["peak"] / gib), py(r["measured"])
        colour = "#2ca02c" if r["name"].startswith("budget") else "#d62728"
        o.append(f'<circle cx="{x:.1f}" cy="{y:.1f}" r="4" fill="{colour}"/>')
        o.append(f'<text x="{x + 7:.1f}" y="{y - 6 - 12 * (i % 2):.1f}" fill="{colour}">'
                 f'{escape(r["name"])}</text>')
    legend = [("#1f77b4", "— predicted front (measured op times)"),
              ("#d62728", "□ fixed mode, predicted"), ("#d62728", "● fixed mode, measured"),
              ("#2ca02c", "● budget plan, measured")]
    for i, (colour, text) in enumerate(legend):
        o.append(f'<text x="{w - right + 10}" y="{top + 10 + 18 * i}" fill="{colour}">'
                 f'{escape(text)}</text>')
    o.append("</svg>")
    return "\n".join(o) + "\n"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--steps", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--budgets", type=int, default=3)
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as tmp:
        common = [*WIDE, "--job.dump_folder", tmp, AC + "cost_cache",
                  os.path.join(tmp, "times.json")]
        front_path = os.path.join(tmp, "front.json")
        subprocess.run([args.remat, "plan", *common, AC + "cost_model", "measured",
                        "--pareto", front_path], check=True, capture_output=True)
        data = json.load(open(front_path))
        front, whole = data["front"], data["percent_of"]["seconds"]
        fixed = [m for m in data["fixed_modes"] if m["name"] in FIXED]
        plans = [(m["name"], FIXED[m["name"]], m["peak_bytes"], m["recompute"]) for m in fixed]
        for p in budget_points(front, args.budgets):
            mode = [AC + "mode", "memory_budget", AC + "memory_budget", f"{p['peak_bytes']}B",
                    AC + "cost_model", "measured"]
            plans.append((f"budget {p['peak_bytes'] / 2**30:.3f} GiB", mode, p["peak_bytes"],
                          p["recompute"]))
        seconds = {name: [] for name, *_ in plans}
        peaks = {}
        for _ in range(args.rounds):
            for name, mode, _, _ in plans:
                step_seconds, peak = train(args.remat, common, mode, args.steps, tmp)
                seconds[name] += step_seconds
                peaks[name] = peak
                print(name, step_seconds, peak, flush=True)
    base = statistics.median(seconds["none"])
    runs = []
    for name, _, predicted_peak, recompute in plans:
        step = statistics.median(seconds[name])
        runs.append({"name": name, "peak": peaks[name], "predicted_peak": predicted_peak,
                     "predicted": 100 * recompute / whole, "measured": 100 * (step / base - 1)})
    begin, end = markers("pareto_measured")
    out = [begin, "## The wide model's front beside measured runs", "",
           f"Command: `/usr/bin/python3 bench/pareto_measured.py --write` on {machine()}, "
           f"{os.cpu_count()} cores, 2 threads, {time.strftime('%Y-%m-%d %H:%M')} UTC, 1-minute "
           f"load average {load:.1f} at the start. Wide model (dim 1024, 8 layers, batch 2 x seq "
           f"1024). Predicted: `remat plan --pareto` under the measured cost model, recompute as "
           f"a share of the predicted step without recompute ({whole:.2f} s). Measured: median "
           f"step time of {args.steps} steps x {args.rounds} interleaved rounds against AC "
           f"none's. Picture: [{SVG}]({SVG}).", "",
           "| plan | predicted peak MiB | measured peak MiB | predicted recompute | measured "
           "slowdown vs none |", "|---|---:|---:|---:|---:|"]
    for r in runs:
        out.append(f"| {r['name']} | {r['predicted_peak'] / 2**20:,.2f} | "
                   f"{r['peak'] / 2**20:,.2f} | {r['predicted']:.1f}% | {r['measured']:+.1f}% |")
    out += ["", end]
    text = "\n".join(out)
    print(text)
    if args.write:
        with open(SVG + ".tmp", "w") as f:
            f.write(svg(front, fixed, runs, whole))
        os.replace(SVG + ".tmp", SVG)
        replace_section("pareto_measured", text)


main()
