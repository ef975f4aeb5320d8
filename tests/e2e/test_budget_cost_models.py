"""memory_budget against the fixed modes, under both cost models (issue 8).

- At the peak of each fixed mode (selective 2, op threshold 0, op 1e50) the
  budget plan's peak is no higher and its recompute no higher, under FLOPs
  (wide, llama4 debug, llama3 8B planned with --torchtitan) and under
  measured op times (wide, llama4 debug).
- The measured cost model calibrates once, names its cache file, gives the
  pointwise ops a non-zero cost, and reuses the cache the second time; no
  other output of the run (--pareto here) may replace the cache.
- PyTorch's knapsack baseline runs, and remat's budget at its true peak
  recomputes no more.
- selective_op_ac_mm_flops_threshold = "auto" is never worse than 0 in peak
  or recompute and says what it chose.

Usage: test_budget_cost_models.py <path-to-remat>
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = sys.argv[1]
AC = "--activation_checkpoint."
WIDE = ["--config", "configs/llama3_debug.toml", "--model.dim", "1024", "--model.n_layers", "8",
        "--model.n_heads", "16", "--model.n_kv_heads", "16", "--training.seq_len", "512",
        "--training.local_batch_size", "1"]
L4 = ["--config", "configs/llama4_debug.toml", "--training.local_batch_size", "4",
      "--training.seq_len", "256"]
BIG = ["--config", "configs/llama3_8b.toml", "--torchtitan"]
failures = []


def plan(args):
    run = subprocess.run([REMAT, "plan", *args, "--json"], capture_output=True, text=True)
    if run.returncode != 0:
        raise SystemExit(f"FAIL: plan {args}: {run.stderr}")
    return json.loads(run.stdout)


def check_fixed(name, j):
    for r in j["budget_at_fixed_modes"]:
        line = (f"{name:8s} {r['mode']:18s} fixed peak {r['fixed_peak_bytes']:>14,d} cost "
                f"{r['fixed_cost']:.4g} | budget peak {r['budget_peak_bytes']:>14,d} cost "
                f"{r['budget_cost']:.4g}")
        print(line)
        if r["budget_peak_bytes"] > r["fixed_peak_bytes"] or \
                r["budget_cost"] > r["fixed_cost"] * (1 + 1e-9):
            failures.append(line)


with tempfile.TemporaryDirectory() as tmp:
    dump = ["--job.dump_folder", tmp]
    for name, model in (("wide", WIDE), ("llama4", L4), ("8B", BIG)):
        check_fixed(name + " flops", plan([*model, *dump]))
    for name, model in (("wide", WIDE), ("llama4", L4)):
        cache = Path(tmp) / f"{name}_times.json"
        args = [*model, *dump, AC + "cost_model", "measured", AC + "cost_cache", str(cache)]
        first = plan(args)
        check_fixed(name + " measured", first)
        if "calibrated now" not in first["cost_model"] or str(cache) not in first["cost_model"]:
            failures.append(f"{name}: first measured run: {first['cost_model']}")
        ops = json.loads(cache.read_text())["ops"]
        pointwise = [s for s in ops if s.split()[0] == "forward" and
                     s.split()[1] in ("rmsnorm", "rope", "silu_mul", "add")]
        if not pointwise or min(ops[s] for s in pointwise) <= 0:
            failures.append(f"{name}: pointwise ops not timed: {ops}")
        second = plan(args)
        if "cached in" not in second["cost_model"]:
            failures.append(f"{name}: cache not reused: {second['cost_model']}")
        if name == "llama4":  # absurd entries (1e308 s) are damage: timed again
            damaged = json.loads(cache.read_text())
            damaged["ops"] = {s: 1e308 for s in damaged["ops"]}
            cache.write_text(json.dumps(damaged))
            third = plan(args)
            ops = json.loads(cache.read_text())["ops"]
            if "calibrated now" not in third["cost_model"] or max(ops.values()) >= 1e6:
                failures.append(f"{name}: a cache of 1e308 s entries was trusted: "
                                f"{third['cost_model']}")
            # The cache is its own writer's output only: --pareto naming it
            # would replace what the next run reads (it did, exit 0).
            before = cache.read_bytes()
            clash = subprocess.run([REMAT, "plan", *args, "--pareto", str(cache)],
                                   capture_output=True, text=True)
            if clash.returncode != 2 or "is the activation_checkpoint.cost_cache this run " \
                    "reads" not in clash.stderr or cache.read_bytes() != before:
                failures.append(f"{name}: --pareto over the cost cache: exit "
                                f"{clash.returncode}: {clash.stderr.strip()}")

    # PyTorch's knapsack, and remat at the peak it really reaches.
    for fraction in ("0.3", "0.7"):
        ks = plan([*L4, *dump, AC + "mode", "memory_budget", AC + "memory_budget", fraction,
                   AC + "budget_solver", "pytorch_knapsack"])["configured"]
        ours = plan([*L4, *dump, AC + "mode", "memory_budget", AC + "memory_budget",
                     f"{ks['peak_bytes']}B"])["configured"]
        print(f"knapsack {fraction}: peak {ks['peak_bytes']:,d} recompute "
              f"{ks['recompute_flops']:.4g} | remat: peak {ours['peak_bytes']:,d} recompute "
              f"{ours['recompute_flops']:.4g}")
        if ours["peak_bytes"] > ks["peak_bytes"] or ours["recompute_flops"] > ks["recompute_flops"]:
            failures.append(f"knapsack {fraction}: remat's budget plan is worse")

    # The "auto" threshold.
    op = [AC + "mode", "selective", AC + "selective_ac_option", "op"]
    for name, model in (("debug", ["--config", "configs/llama3_debug.toml"]), ("llama4", L4),
                        ("8B", BIG)):
        zero = plan([*model, *dump, *op, AC + "selective_op_ac_mm_flops_threshold", "0"])
        auto = plan([*model, *dump, *op, AC + "selective_op_ac_mm_flops_threshold", "auto"])
        z, a = zero["configured"], auto["configured"]
        print(f"auto {name}: {auto['auto_threshold']}")
        if a["peak_bytes"] > z["peak_bytes"] or a["recompute_flops"] > z["recompute_flops"] or \
                not auto["auto_threshold"].startswith("threshold auto = "):
            failures.append(f"auto threshold {name}: {a} vs {z}")
    bad = subprocess.run([REMAT, "plan", "--config", "configs/llama3_debug.toml",
                          AC + "selective_op_ac_mm_flops_threshold", "automatic"],
                         capture_output=True, text=True)
    if bad.returncode != 2 or "a number >= 0 or" not in bad.stderr + bad.stdout and \
            "number or" not in bad.stderr:
        failures.append(f"bad threshold: exit {bad.returncode}: {bad.stderr}")

if failures:
    print("FAIL:\n" + "\n".join(failures))
    sys.exit(1)
print("PASS")
