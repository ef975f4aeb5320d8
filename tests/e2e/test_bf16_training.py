"""bf16 mixed precision trains for real, and keeps remat's invariants.

For the llama3 and llama4 debug models (batch 2 x seq 64) with
training.mixed_precision_param = "bfloat16", on each bf16 GEMM path this CPU
has (REMAT_BF16_KERNEL=fallback always; native and onednn where the CPU has
avx512_bf16, else said skipped):
 1. 3 steps give bit-identical loss and grad_norm in every AC mode (none,
    full, selective 1 and 2, op at thresholds 0 and 1e50, op with an FQN
    filter) and at training.threads 1 and 2;
 2. the numbers are really bf16: they differ from the fp32 run's, yet stay
    within 2% of its losses;
 3. `remat plan` predicts the allocator's measured peak and kept-activation
    bytes of one step to the byte in every mode it compares;
 4. kept activations take about half the bytes of fp32 (the fp32 statistics
    that stay, rstd and lse, are a few percent of them).
Unset, REMAT_BF16_KERNEL takes oneDNN where the CPU has avx512_bf16 and its
bf16 dot products outrun its fp32 FMAs (a measured ratio the run prints),
else the fallback.
 5. a memory budget (modes memory_budget and auto) in bf16, on each kernel
    path: the solver's peak is the plan's and the allocator's, within the
    budget, proven optimal.
A REMAT_BF16_KERNEL the process cannot honour is a clear error, exit 2. The
ISA cap
(REMAT_MAX_ISA=avx2, an AVX2-only machine emulated) takes the fallback,
refuses native and onednn, refuses a value other than avx2 and refuses to
run while OpenBLAS runs AVX-512 kernels (OPENBLAS_CORETYPE not capped as
well).

Usage: test_bf16_training.py <path-to-remat>
"""
import ctypes
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
AC = "--activation_checkpoint."
SHAPE = ["--training.seq_len", "64", "--training.local_batch_size", "2",
         "--metrics.peak_flops", "1e11", "--metrics.log_freq", "1"]
BF16 = ["--training.mixed_precision_param", "bfloat16"]
MODELS = {"llama3 debug": "configs/llama3_debug.toml", "llama4 debug": "configs/llama4_debug.toml"}
MODES = {
    "none": [AC + "mode", "none"],
    "full": [AC + "mode", "full"],
    "selective 1": [AC + "mode", "selective", AC + "selective_ac_option", "1"],
    "selective 2": [AC + "mode", "selective", AC + "selective_ac_option", "2"],
    # As `remat plan` compares them: no FQN filter (llama4's config has one).
    "op threshold 0": [AC + "mode", "selective", AC + "selective_ac_option", "op",
                       AC + "selective_op_ac_mm_flops_threshold", "0",
                       AC + "per_op_sac_force_recompute_mm_by_fqns", ""],
    "op threshold 1e50": [AC + "mode", "selective", AC + "selective_ac_option", "op",
                          AC + "selective_op_ac_mm_flops_threshold", "1e50",
                          AC + "per_op_sac_force_recompute_mm_by_fqns", ""],
    "op filter wk": [AC + "mode", "selective", AC + "selective_ac_option", "op",
                     AC + "per_op_sac_force_recompute_mm_by_fqns", "attention.wk"],
}


def has_avx512_bf16():
    with open("/proc/cpuinfo") as f:
        return "avx512_bf16" in f.read()


def kernel_env(kernel):
    env = dict(os.environ)
    env.pop("REMAT_BF16_KERNEL", None)
    if kernel:
        env["REMAT_BF16_KERNEL"] = kernel
    return env


def train(config, args, tmp, name, kernel=None, steps=3):
    out = Path(tmp) / (name.replace(" ", "_") + ".jsonl")
    env = kernel_env(kernel)
    cmd = [REMAT, "train", "--config", config, *SHAPE, "--training.steps", str(steps), *args,
           "--metrics.jsonl_path", str(out), "--job.dump_folder", tmp]
    result = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=REPO)
    if result.returncode != 0:
        sys.exit(f"FAIL: {name}: remat exited {result.returncode}\n{result.stderr}")
    return [json.loads(line) for line in out.read_text().splitlines()], result.stdout


def numbers(rows):
    return [(r["step"], r["loss"], r["grad_norm"]) for r in rows]


def check_bit_identity(model, config, kernel, tmp, failures):
    runs = {name: numbers(train(config, BF16 + args + ["--training.threads", "2"], tmp,
                                f"{model} {kernel} {name}", kernel)[0])
            for name, args in MODES.items()}
    runs["none, 1 thread"] = numbers(train(config, BF16 + MODES["none"] +
                                           ["--training.threads", "1"], tmp,
                                           f"{model} {kernel} 1 thread", kernel)[0])
    reference = runs["none"]
    for name, rows in runs.items():
        same = rows == reference
        print(f"{model} [{kernel}] {name:18s} {'identical' if same else 'DIFFERENT'}  "
              f"losses {[r[1] for r in rows]}")
        if not same:
            failures.append(f"{model} [{kernel}] {name}: {rows} != {reference}")
    return reference


def check_against_fp32(model, config, bf16_rows, tmp, failures):
    fp32 = numbers(train(config, MODES["none"] + ["--training.threads", "2"], tmp,
                         f"{model} fp32")[0])
    worst = max(abs(a[1] - b[1]) / b[1] for a, b in zip(bf16_rows, fp32))
    print(f"{model}: bf16 vs fp32 losses, worst relative difference {100 * worst:.3f}%")
    if bf16_rows == fp32:
        failures.append(f"{model}: bf16 run gives exactly the fp32 numbers: not computing in bf16")
    if worst > 0.02:
        failures.append(f"{model}: bf16 losses {bf16_rows} differ from fp32 {fp32} by > 2%")


def check_plan(model, config, kernel, tmp, failures):
    """The plan on each kernel path: they book different copies (the bf16
    GEMMs' bf16 weights and dy; none on the fallback, which reads fp32)."""
    plan = subprocess.run([REMAT, "plan", "--config", config, *SHAPE, *BF16, "--json"],
                          capture_output=True, text=True, cwd=REPO, env=kernel_env(kernel))
    if plan.returncode != 0:
        failures.append(f"{model}: remat plan failed: {plan.stderr}")
        return
    plan_json = json.loads(plan.stdout)
    path = {"fallback": "fp32 fallback", "native": "avx512_bf16",
            "onednn": "oneDNN avx512_bf16"}[kernel]
    if plan_json["run"]["bf16_matmuls"] != path:
        failures.append(f"{model}: plan [{kernel}] says bf16 matmuls on "
                        f"{plan_json['run']['bf16_matmuls']!r}, not {path!r}")
    kept = {}
    for row in plan_json["modes"]:
        args = MODES.get(row["name"])
        if args is None:
            continue  # "op configured" repeats one of the others
        measured = train(config, BF16 + args, tmp, f"{model} plan {kernel} {row['name']}",
                         kernel, steps=1)[0][-1]
        for key_plan, key_run in (("peak_bytes", "peak_bytes"),
                                  ("kept_activation_bytes", "max_activation_bytes")):
            want, got = row[key_plan], measured[key_run]
            print(f"{model} bf16 [{kernel}] {row['name']:18s} {key_plan:22s} predicted "
                  f"{want:>11,d}  measured {got:>11,d}  {'exact' if want == got else 'OFF'}")
            if want != got:
                failures.append(f"{model} bf16 [{kernel}] {row['name']} {key_plan}: {want} vs "
                                f"{got}")
        kept[row["name"]] = measured["max_activation_bytes"]
    fp32 = train(config, MODES["none"], tmp, f"{model} fp32 kept", steps=1)[0][-1]
    ratio = kept["none"] / fp32["max_activation_bytes"]
    print(f"{model}: kept activations bf16 / fp32 = {ratio:.4f} (AC none)")
    if not 0.5 <= ratio <= 0.55:
        failures.append(f"{model}: bf16 keeps {ratio:.4f} of the fp32 activation bytes")


def check_budget(model, config, kernel, tmp, failures):
    """Budget modes in bf16: each kernel path books its own copies, which the
    solver's block model must count as the run does."""
    none = json.loads(subprocess.run([REMAT, "plan", "--config", config, *SHAPE, *BF16, "--json"],
                                     capture_output=True, text=True, cwd=REPO,
                                     env=kernel_env(kernel)).stdout)
    peaks = {row["name"]: row["peak_bytes"] for row in none["modes"]}
    limit = f"{(peaks['full'] + peaks['none']) // 2}B"
    for name, args in (("memory_budget 0.25", [AC + "mode", "memory_budget",
                                               AC + "memory_budget", "0.25"]),
                       ("auto", [AC + "mode", "auto", "--memory.limit", limit])):
        plan = subprocess.run([REMAT, "plan", "--config", config, *SHAPE, *BF16, *args, "--json"],
                              capture_output=True, text=True, cwd=REPO, env=kernel_env(kernel))
        if plan.returncode != 0:
            failures.append(f"{model} bf16 [{kernel}] {name}: plan failed: {plan.stderr}")
            continue
        j = json.loads(plan.stdout)
        budget, predicted = j["budget"], j["configured"]["peak_bytes"]
        measured = train(config, BF16 + args, tmp, f"{model} budget {kernel} {name}", kernel,
                         steps=1)[0][-1]["peak_bytes"]
        print(f"{model} bf16 [{kernel}] {name:18s} budget {budget['budget_bytes']:>11,d}  solver "
              f"{budget['predicted_peak_bytes']:>11,d}  plan {predicted:>11,d}  measured "
              f"{measured:>11,d}  optimal {budget['optimal']}")
        if not (budget["predicted_peak_bytes"] == predicted == measured <= budget["budget_bytes"]
                and budget["optimal"]):
            failures.append(f"{model} bf16 [{kernel}] {name}: solver {budget}, plan {predicted}, "
                            f"measured {measured}")


def openblas_core():
    """The kernels this machine's OpenBLAS picks when it loads (as in remat)."""
    blas = ctypes.CDLL("libopenblas.so.0")
    blas.openblas_get_corename.restype = ctypes.c_char_p
    return blas.openblas_get_corename().decode()


def check_isa_cap(tmp, failures):
    def run(env_extra):
        env = dict(os.environ, **env_extra)
        for key in ("REMAT_BF16_KERNEL", "OPENBLAS_CORETYPE"):
            if key not in env_extra:
                env.pop(key, None)
        return subprocess.run([REMAT, "train", "--config", MODELS["llama3 debug"], *SHAPE, *BF16,
                               "--training.steps", "1", "--job.dump_folder", tmp],
                              capture_output=True, text=True, env=env, cwd=REPO)

    avx2 = {"REMAT_MAX_ISA": "avx2", "OPENBLAS_CORETYPE": "Haswell"}
    capped = run(avx2)
    line = [l for l in capped.stdout.splitlines() if l.startswith("mixed precision")]
    print(f"REMAT_MAX_ISA=avx2 OPENBLAS_CORETYPE=Haswell: exit {capped.returncode}, {line}")
    if capped.returncode != 0 or not line or not line[0].endswith("fp32 fallback"):
        failures.append(f"ISA cap: exit {capped.returncode}, {line}, {capped.stderr!r}")
    if has_avx512_bf16():
        default = run({})
        line = [l for l in default.stdout.splitlines() if l.startswith("mixed precision")]
        print(f"REMAT_BF16_KERNEL unset: exit {default.returncode}, {line}")
        # The default follows the measured speed of bf16 dot products against
        # fp32 FMAs, which the next line states.
        why = [l for l in default.stdout.splitlines() if l.startswith("bf16 matmuls:")]
        print(f"  {why}")
        speed = re.search(r"run at ([0-9.]+)x its fp32 FMA rate", why[0]) if why else None
        want = ("oneDNN avx512_bf16" if speed and float(speed.group(1)) >= 1.0
                else "fp32 fallback")
        if default.returncode != 0 or not line or not speed or not line[0].endswith(want):
            failures.append(f"default kernel: exit {default.returncode}, {line}, {why}")
        pinned = run({"REMAT_BF16_KERNEL": "onednn"})
        if [l for l in pinned.stdout.splitlines() if l.startswith("bf16 matmuls:")]:
            failures.append("REMAT_BF16_KERNEL=onednn still printed the measured choice")
    cases = [({**avx2, "REMAT_BF16_KERNEL": "native"}, "REMAT_MAX_ISA"),
             ({**avx2, "REMAT_BF16_KERNEL": "onednn"}, "REMAT_MAX_ISA"),
             ({"REMAT_MAX_ISA": "avx512"}, "REMAT_MAX_ISA")]
    core = openblas_core()
    if core.lower() in ("skylakex", "cooperlake", "sapphirerapids"):
        cases.append(({"REMAT_MAX_ISA": "avx2"}, "OPENBLAS_CORETYPE=Haswell"))
    else:
        print(f"SKIP ISA cap against OpenBLAS's own choice: it picks {core}, not AVX-512")
    for env_extra, expected in cases:
        bad = run(env_extra)
        print(f"{env_extra}: exit {bad.returncode}: {bad.stderr.strip()}")
        if bad.returncode != 2 or expected not in bad.stderr:
            failures.append(f"ISA cap {env_extra}: exit {bad.returncode}, {bad.stderr!r}")


def main():
    kernels = ["fallback"]
    if has_avx512_bf16():
        kernels += ["native", "onednn"]
    else:
        print("SKIP native and onednn bf16 kernels: this CPU has no avx512_bf16 (fallback tested "
              "only)")
    failures = []
    with tempfile.TemporaryDirectory() as tmp:
        for model, config in MODELS.items():
            reference = None
            for kernel in kernels:
                reference = check_bit_identity(model, config, kernel, tmp, failures)
            check_against_fp32(model, config, reference, tmp, failures)
            for kernel in kernels:
                check_plan(model, config, kernel, tmp, failures)
                check_budget(model, config, kernel, tmp, failures)
        check_isa_cap(tmp, failures)
        env = dict(os.environ, REMAT_BF16_KERNEL="avx9000")
        bad = subprocess.run([REMAT, "train", "--config", MODELS["llama3 debug"], *SHAPE, *BF16,
                              "--training.steps", "1", "--job.dump_folder", tmp],
                             capture_output=True, text=True, env=env, cwd=REPO)
        print(f"REMAT_BF16_KERNEL=avx9000: exit {bad.returncode}: {bad.stderr.strip()}")
        if bad.returncode != 2 or "REMAT_BF16_KERNEL" not in bad.stderr:
            failures.append(f"bad REMAT_BF16_KERNEL: exit {bad.returncode}, {bad.stderr!r}")
    if failures:
        print("FAIL:\n" + "\n".join(failures))
        sys.exit(1)
    print("PASS")


main()
