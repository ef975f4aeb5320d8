#!/usr/bin/python3
"""remat vs PyTorch eager, side by side on this machine: tokens/s and memory.

Both sides train the same Llama 3 model (same initial weights: PyTorch loads
remat's seed checkpoint), on the same token file (the `fortunes` quotes as
bytes, BOS=256/EOS=257 per quote, cut into the same windows in the same
order), with the same optimizer (AdamW lr 8e-4, betas 0.9/0.95, eps 1e-8,
weight decay 0.1, the same warm-up + linear decay schedule, grad-norm
clipping at 1.0), with the same number of threads, in fp32 and in bf16 mixed
precision (remat's, torch.autocast's). PyTorch runs in its fastest set-up on
this machine (sleeping OpenMP and OpenBLAS workers, jemalloc, foreach AdamW;
bench/README.md says why), plus the untuned set-up as a reference row. Every
run is its own child process, so its peak RSS is measured alone.

  /usr/bin/python3 bench/compare_pytorch.py            # full run, writes this CPU's benchmarks file
  /usr/bin/python3 bench/compare_pytorch.py --quick    # smoke test (< ~2 min), debug model only

Models: "debug" (torchtitan's debugmodel: dim 256, 6 layers, 16 heads, vocab
2048) at batch 8 x seq 256, and "wide" (dim 1024, 8 layers, 16 heads, vocab
2048) at batch 4 x seq 1024. See bench/README.md.

Needs Debian's python3 (torch 1.13 CPU, numpy) and a built remat
(default: build-bench/remat, else build/remat; or --remat PATH).
"""

import argparse
import datetime
import json
import os
import platform
import re
import resource
import shlex
import shutil
import signal
import subprocess
import sys
import time

import benchmarks_file

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FORTUNES_DIR = "/usr/share/games/fortunes"
BOS, EOS = 256, 257

MODELS = {
    "debug": dict(dim=256, n_layers=6, n_heads=16, n_kv_heads=16, vocab_size=2048,
                  multiple_of=256, ffn_dim_multiplier=None, batch=8, seq=256),
    "wide": dict(dim=1024, n_layers=8, n_heads=16, n_kv_heads=16, vocab_size=2048,
                 multiple_of=256, ffn_dim_multiplier=None, batch=4, seq=1024),
}

OPT = dict(lr=8e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_norm=1.0,
           warmup_steps=2, decay_ratio=0.8)

# remat activation-checkpointing variants: (label, flags)
AC = "--activation_checkpoint."
REMAT_MODES = [
    ("none", [AC + "mode", "none"]),
    ("full", [AC + "mode", "full"]),
    ("selective 2 (every 2nd block full)", [AC + "mode", "selective", AC + "selective_ac_option", "2"]),
    ("op, threshold 0", [AC + "mode", "selective", AC + "selective_ac_option", "op",
                         AC + "selective_op_ac_mm_flops_threshold", "0",
                         AC + "per_op_sac_force_recompute_mm_by_fqns", ""]),
    ("op, threshold 1e50 (no matmul kept)", [AC + "mode", "selective", AC + "selective_ac_option", "op",
                                             AC + "selective_op_ac_mm_flops_threshold", "1e50",
                                             AC + "per_op_sac_force_recompute_mm_by_fqns", ""]),
    ("op, default filter", [AC + "mode", "selective", AC + "selective_ac_option", "op"]),
    ("none, bf16 mixed precision", [AC + "mode", "none", "--training.mixed_precision_param", "bfloat16"]),
]
QUICK_REMAT_MODES = ["none", "full", "none, bf16 mixed precision"]

# PyTorch's runtime set-ups (torch_env): "tuned" makes torch 1.13 eager fastest here (see
# bench/README.md, "Why the old baseline was slow"); "tuned, OpenBLAS spinning" leaves OpenBLAS's
# workers spinning between calls (cheaper to wake for small GEMMs, but they compete for the
# cores), "untuned" is the old baseline. The same model code and math run in every one.
SETUPS = ["tuned", "tuned, OpenBLAS spinning", "untuned"]
# PyTorch variants: (label, AC, set-up, bf16 autocast). The fp32 eager rows compete: the
# headline compares remat with the fastest of them.
TORCH_VARIANTS = [
    ("eager", "none", "tuned", False),
    ("checkpoint per block", "full", "tuned", False),
    ("eager, bf16 autocast", "none", "tuned", True),
    ("eager, OpenBLAS workers spinning", "none", "tuned, OpenBLAS spinning", False),
    ("eager, untuned (the old baseline)", "none", "untuned", False),
]
QUICK_TORCH_VARIANTS = ["eager", "checkpoint per block", "eager, bf16 autocast"]
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"


# ---------------------------------------------------------------------------
# helpers shared by the parent and the torch worker


def rss_bytes():
    """Current resident set size of this process."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def lr_at(step, total_steps):
    """remat's LrSchedule::at (torchtitan's warm-up + linear decay)."""
    current = step - 1
    warmup = min(OPT["warmup_steps"], total_steps)
    decay_steps = int(round(total_steps * OPT["decay_ratio"]))
    stable_end = max(warmup, total_steps - decay_steps)
    if current < warmup:
        factor = (current + 1) / (warmup + 1)
    elif current < stable_end or decay_steps == 0:
        factor = 1.0
    else:
        factor = 1.0 - (current + 1 - stable_end) / decay_steps
    return OPT["lr"] * factor


def ffn_hidden(m):
    h = int(2 * (4 * m["dim"]) / 3)
    if m["ffn_dim_multiplier"] is not None:
        h = int(m["ffn_dim_multiplier"] * h)
    return m["multiple_of"] * ((h + m["multiple_of"] - 1) // m["multiple_of"])


def param_counts(m):
    d, hd = m["dim"], m["dim"] // m["n_heads"]
    per_layer = (2 * d * d + 2 * d * m["n_kv_heads"] * hd + 3 * d * ffn_hidden(m) + 2 * d)
    emb = m["vocab_size"] * d
    return emb * 2 + m["n_layers"] * per_layer + d, emb


def model_flops_per_token(m):
    """spec.md §4: 6 * (params - embedding) + 12 * layers * heads * head_dim * seq."""
    params, emb = param_counts(m)
    return 6 * (params - emb) + 12 * m["n_layers"] * m["dim"] * m["seq"]


# ---------------------------------------------------------------------------
# the PyTorch worker (runs in its own process)


def torch_worker(a):
    base_rss = rss_bytes()
    import numpy as np
    import torch
    import torch.nn.functional as F
    import torch.utils.checkpoint as tcp
    sys.path.insert(0, os.path.join(REPO, "tests", "oracle"))
    import llama_ref

    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    import_rss = rss_bytes()
    m = MODELS[a.model]
    args = llama_ref.ModelArgs(dim=m["dim"], n_layers=m["n_layers"], n_heads=m["n_heads"],
                               n_kv_heads=m["n_kv_heads"], vocab_size=m["vocab_size"],
                               ffn_dim_multiplier=m["ffn_dim_multiplier"], multiple_of=m["multiple_of"])
    model = llama_ref.Transformer(args)
    # remat's seed checkpoint, one tensor at a time (no second copy of the model).
    entries, _, start = llama_ref.read_safetensors_header(a.weights)
    params = dict(model.named_parameters())
    if set(params) - set(entries):
        raise SystemExit(f"seed checkpoint lacks {sorted(set(params) - set(entries))[:3]}")
    with open(a.weights, "rb") as f, torch.no_grad():
        for name, p in params.items():
            b, e = entries[name]["data_offsets"]
            f.seek(start + b)
            w = np.frombuffer(f.read(e - b), dtype="<f4").reshape(entries[name]["shape"])
            p.copy_(torch.from_numpy(w.copy()))
    # foreach: one multi-tensor kernel per AdamW stage instead of a Python loop over parameters
    # (the same update; torch 1.13's default is the loop on the CPU).
    opt = torch.optim.AdamW(model.parameters(), lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]),
                            eps=OPT["eps"], weight_decay=OPT["weight_decay"], foreach=a.foreach)

    tokens = llama_ref.load_tokens(a.tokens, m["vocab_size"])
    B, S = m["batch"], m["seq"]
    n_windows = (tokens.size - 1) // S
    offsets = np.arange(S + 1)

    def batch(k):  # remat's BatchLoader: window w = tokens[w*S : w*S + S + 1]
        w = (k * B + np.arange(B)) % n_windows
        rows = torch.from_numpy(tokens[w[:, None] * S + offsets[None, :]])
        return rows[:, :-1], rows[:, 1:]

    if a.attention == "sdpa":
        def attn_forward(self, x, freqs_cis):
            b, s, _ = x.shape
            q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
            k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim)
            v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim)
            q = llama_ref.apply_rotary_emb(q, freqs_cis)
            k = llama_ref.apply_rotary_emb(k, freqs_cis)
            n_rep = self.n_heads // self.n_kv_heads
            k, v = llama_ref.repeat_kv(k, n_rep), llama_ref.repeat_kv(v, n_rep)
            q, k, v = (t.transpose(1, 2) for t in (q, k, v))
            out, _ = F._scaled_dot_product_attention(q, k, v, None, 0.0, False, True)
            return self.wo(out.transpose(1, 2).reshape(b, s, -1))
        for layer in model.layers:
            layer.attention.forward = attn_forward.__get__(layer.attention)

    def forward(inputs):
        freqs = llama_ref.precompute_freqs_cis(args.head_dim, inputs.shape[1], args.rope_theta, torch.float32)
        h = model.tok_embeddings(inputs)
        for layer in model.layers:
            if a.ac == "full":
                h = tcp.checkpoint(layer, h, freqs, use_reentrant=False)
            else:
                h = layer(h, freqs)
        return model.output(model.norm(h))

    setup_rss = rss_bytes()
    steps = []
    prof = None
    for step in range(1, a.steps + 1):
        if a.profile_step == step:
            prof = torch.profiler.profile(activities=[torch.profiler.ProfilerActivity.CPU])
            prof.__enter__()
        t0 = time.perf_counter()
        cpu0 = resource.getrusage(resource.RUSAGE_SELF)
        inputs, targets = batch(step - 1)
        for g in opt.param_groups:
            g["lr"] = lr_at(step, a.steps)
        opt.zero_grad(set_to_none=True)
        # bf16 autocast as torchtitan's mixed precision: fp32 masters, bf16 matmuls; the loss in
        # fp32 (.float() is a no-op without autocast).
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=a.autocast):
            logits = forward(inputs)
        loss = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1))
        del logits
        loss.backward()
        grad_norm = torch.nn.utils.clip_grad_norm_(model.parameters(), OPT["max_norm"])
        opt.step()
        seconds = time.perf_counter() - t0
        cpu1 = resource.getrusage(resource.RUSAGE_SELF)
        if prof is not None:
            prof.__exit__(None, None, None)
            with open(a.profile_out, "w") as f:
                f.write(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25))
            prof = None
        steps.append(dict(step=step, loss=float(loss), grad_norm=float(grad_norm), seconds=seconds,
                          rss=rss_bytes(), minflt=cpu1.ru_minflt - cpu0.ru_minflt,
                          cpu=cpu1.ru_utime + cpu1.ru_stime - cpu0.ru_utime - cpu0.ru_stime))
        print(f"torch step {step}: loss {float(loss):.6f} grad_norm {float(grad_norm):.6f} "
              f"{seconds:.2f}s tps {B * S / seconds:.1f}", flush=True)
    with open(a.out, "w") as f:
        json.dump(dict(base_rss=base_rss, import_rss=import_rss, setup_rss=setup_rss, steps=steps,
                       torch_version=torch.__version__, threads=torch.get_num_threads(),
                       os_threads=len(os.listdir("/proc/self/task"))), f)


# ---------------------------------------------------------------------------
# the parent: data, child processes, tables


def log(msg):
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def make_tokens(path):
    """The fortunes quotes as in remat's built-in loader: files sorted by name
    (no .dat/.u8, no hidden files, no subdirectories), split at lines that
    hold only '%', each non-blank quote -> BOS + UTF-8 bytes + EOS."""
    import numpy as np
    names = sorted(n for n in os.listdir(FORTUNES_DIR)
                   if not n.startswith(".") and not n.endswith((".dat", ".u8"))
                   and os.path.isfile(os.path.join(FORTUNES_DIR, n)))
    out = []
    quotes = 0
    for n in names:
        with open(os.path.join(FORTUNES_DIR, n), "rb") as f:
            text = f.read()
        for quote in re.split(rb"(?m)^%\r?$\n?", text):
            if not quote.strip():
                continue
            quotes += 1
            out.append(np.array([BOS], np.uint16))
            out.append(np.frombuffer(quote, np.uint8).astype(np.uint16))
            out.append(np.array([EOS], np.uint16))
    tokens = np.concatenate(out)
    np.save(path, tokens)
    return f"{len(names)} files, {quotes:,} quotes, {tokens.size:,} tokens"


def run_child(cmd, log_path, timeout, env=None):
    """Runs cmd, stdout+stderr to log_path. Returns (rc, wall seconds, peak RSS
    bytes of that child from wait4, max 1-min load average seen, the child's CPU
    seconds: user + system, all its threads)."""
    t0 = time.time()
    load = os.getloadavg()[0]
    with open(log_path, "w") as logf:
        logf.write("$ " + " ".join(shlex.quote(c) for c in cmd) + "\n")
        logf.flush()
        proc = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, env=env, cwd=REPO)
        while True:
            pid, status, ru = os.wait4(proc.pid, os.WNOHANG)
            if pid:
                break
            load = max(load, os.getloadavg()[0])
            if time.time() - t0 > timeout:
                proc.send_signal(signal.SIGKILL)
                pid, status, ru = os.wait4(proc.pid, 0)
                break
            time.sleep(0.25)
    proc.returncode = os.waitstatus_to_exitcode(status)
    return proc.returncode, time.time() - t0, ru.ru_maxrss * 1024, load, ru.ru_utime + ru.ru_stime


def tail(path, n=15):
    with open(path, errors="replace") as f:
        return "".join(f.readlines()[-n:])


def remat_base_cmd(remat, m, threads, steps, tokens, workdir):
    return [remat, "train", "--config", os.path.join(REPO, "configs", "llama3_debug.toml"),
            "--model.dim", str(m["dim"]), "--model.n_layers", str(m["n_layers"]),
            "--model.n_heads", str(m["n_heads"]), "--model.n_kv_heads", str(m["n_kv_heads"]),
            "--model.vocab_size", str(m["vocab_size"]), "--model.multiple_of", str(m["multiple_of"]),
            "--training.local_batch_size", str(m["batch"]), "--training.seq_len", str(m["seq"]),
            "--training.steps", str(steps), "--training.threads", str(threads),
            "--training.dataset_path", tokens, "--training.max_norm", str(OPT["max_norm"]),
            "--optimizer.lr", str(OPT["lr"]), "--optimizer.weight_decay", str(OPT["weight_decay"]),
            "--optimizer.beta1", str(OPT["beta1"]), "--optimizer.beta2", str(OPT["beta2"]),
            "--optimizer.eps", str(OPT["eps"]),
            "--lr_scheduler.warmup_steps", str(OPT["warmup_steps"]),
            "--lr_scheduler.decay_ratio", str(OPT["decay_ratio"]),
            "--job.dump_folder", workdir, "--checkpoint.enable", "false", "--training.seed", "0"]


def upper_decile(values):
    """The value 10% of `values` exceed (linear interpolation between order statistics)."""
    v = sorted(values)
    if not v:
        return float("nan")
    pos = 0.9 * (len(v) - 1)
    lo = int(pos)
    hi = min(lo + 1, len(v) - 1)
    return v[lo] + (v[hi] - v[lo]) * (pos - lo)


def summarize_steps(step_rows, warmup, tokens_per_step):
    """step_rows: dicts with step, seconds, loss (+ anything). tokens/s over
    the steps after the warm-up: from the median step time (robust to bursts
    of background load; the headline), the upper decile of the per-step rates
    (the rate 10% of the steps beat: what the machine gives when the load lets
    up) and the mean."""
    timed = [r for r in step_rows if r["step"] > warmup]
    secs = sorted(r["seconds"] for r in timed)
    n = len(secs)
    median = (secs[n // 2] + secs[(n - 1) // 2]) / 2 if n else float("nan")
    return dict(tps=tokens_per_step / median if n else float("nan"),
                tps_p90=upper_decile([tokens_per_step / x for x in secs]),
                tps_mean=tokens_per_step * n / sum(secs) if n else float("nan"),
                timed_steps=n, step_seconds=[round(r["seconds"], 3) for r in timed],
                loss1=step_rows[0]["loss"] if step_rows else None,
                loss_last=step_rows[-1]["loss"] if step_rows else None)


def op_plan_signature(remat, m, flags, a, tokens, workdir):
    """For op-level variants: which matmuls the plan keeps (from
    --activation_checkpoint.log_mm_flops, no training). Two op variants with
    the same signature run exactly the same plan. None if not an op variant."""
    if "op" not in flags:
        return None
    cmd = remat_base_cmd(remat, m, a.threads, 0, tokens, os.path.join(workdir, "plan")) + flags + [
        AC + "log_mm_flops", "true"]
    out = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO).stdout
    rows = re.findall(r"^\s+(\S+)\s+\(.*?\)\s+x\s+\(.*?\)\s+\S+\s+\d+\s+(kept|recomputed)", out, re.M)
    return tuple(rows) if rows else None


def run_remat(remat, name, m, label, flags, a, tokens, workdir):
    tag = f"remat-{name}-{re.sub(r'[^a-z0-9]+', '_', label.lower()).strip('_')}"
    jsonl = os.path.join(workdir, tag + ".jsonl")
    if os.path.exists(jsonl):
        os.remove(jsonl)
    cmd = remat_base_cmd(remat, m, a.threads, a.steps[name], tokens, os.path.join(workdir, tag)) + flags + [
        "--metrics.log_freq", "1", "--metrics.jsonl_path", jsonl]
    log(f"{tag}: {a.steps[name]} steps ({a.warmups[name]} warm-up)")
    rc, wall, maxrss, load, cpu = run_child(cmd, os.path.join(workdir, tag + ".log"), a.timeout)
    res = dict(side="remat", model=name, label=label, rc=rc, wall=wall, maxrss=maxrss, load=load,
               cpu=cpu, cmd=flags, log=os.path.join(workdir, tag + ".log"))
    if rc != 0 or not os.path.exists(jsonl):
        log(f"  FAILED rc={rc}:\n{tail(res['log'])}")
        res["error"] = f"exit status {rc}"
        return res
    rows = [json.loads(line) for line in open(jsonl) if line.strip()]
    tokens_per_step = m["batch"] * m["seq"]
    for r in rows:
        r["seconds"] = tokens_per_step / r["tps"]
    res.update(summarize_steps(rows, a.warmups[name], tokens_per_step))
    timed = [r for r in rows if r["step"] > a.warmups[name]] or rows
    top = max(rows, key=lambda r: r["peak_bytes"])
    res["peak_bytes"] = top["peak_bytes"]
    res["activation_bytes_at_peak"] = top["activation_bytes_at_peak"]
    res["recompute_share"] = sum(r["hfu"] / r["mfu"] - 1 for r in timed) / len(timed)
    res["mfu"] = sum(r["mfu"] for r in timed) / len(timed)
    res["loss_steps"] = [r["loss"] for r in rows]
    log(f"  tps {res['tps']:.1f}, allocator peak {res['peak_bytes'] / 2**20:.1f} MiB, "
        f"max RSS {maxrss / 2**20:.1f} MiB, recompute {100 * res['recompute_share']:.1f}%, load {load:.1f}")
    return res


def torch_env(threads, setup):
    """The PyTorch child's environment for a set-up (SETUPS). Every one sets the thread counts.
    Tuned: OpenMP workers that sleep when idle (libgomp's default spins, stealing a core from
    OpenBLAS's threads, which torch's matmuls use), OpenBLAS workers that stop spinning after
    2^4 cycles (they spin ~2^28 by default, stealing a core from torch's OpenMP ops; "tuned,
    OpenBLAS spinning" keeps that default), and jemalloc keeping freed pages (glibc unmaps
    every block over 32 MiB on free, so each step page-faults its big activations in again)."""
    env = dict(os.environ, OMP_NUM_THREADS=str(threads), OPENBLAS_NUM_THREADS=str(threads))
    # OpenBLAS's own kernel choice for this CPU: a host may pin every process
    # to older kernels (OPENBLAS_CORETYPE=Haswell on AVX-512 machines), which
    # halves torch's fp32 matmuls; the baseline gets the fastest.
    env.pop("OPENBLAS_CORETYPE", None)
    if setup != "untuned":
        env.update(OMP_WAIT_POLICY="PASSIVE")
        if setup == "tuned":
            env.update(OPENBLAS_THREAD_TIMEOUT="4")
        if os.path.exists(JEMALLOC):
            env.update(LD_PRELOAD=JEMALLOC, MALLOC_CONF="dirty_decay_ms:-1,muzzy_decay_ms:-1")
    return env


def torch_setup(setup):
    """A set-up as the report states it."""
    if setup == "untuned":
        return "OMP_NUM_THREADS, OPENBLAS_NUM_THREADS only; glibc malloc; AdamW for-loop"
    alloc = ("jemalloc (LD_PRELOAD, MALLOC_CONF=dirty_decay_ms:-1,muzzy_decay_ms:-1)"
             if os.path.exists(JEMALLOC) else f"glibc malloc ({JEMALLOC} not installed)")
    spin = "OPENBLAS_THREAD_TIMEOUT=4, " if setup == "tuned" else ""
    return f"OMP_WAIT_POLICY=PASSIVE, {spin}{alloc}, AdamW foreach=True"


def run_torch(name, m, variant, a, tokens, weights, workdir, profile_out=None, steps=None):
    label, ac, setup, autocast = variant
    tag = f"torch-{name}-{ac}" + ("-bf16" if autocast else "") + \
        ("" if setup == "tuned" else "-" + re.sub(r"[^a-z]+", "_", setup)) + ("-profile" if profile_out else "")
    out = os.path.join(workdir, tag + ".json")
    steps = steps or a.steps[name]
    cmd = [sys.executable, os.path.abspath(__file__), "_torch_worker", "--model", name, "--ac", ac,
           "--threads", str(a.threads), "--steps", str(steps), "--tokens", tokens,
           "--weights", weights, "--out", out, "--attention", a.torch_attention]
    cmd += (["--foreach"] if setup != "untuned" else []) + (["--autocast"] if autocast else [])
    if profile_out:
        cmd += ["--profile-step", str(steps), "--profile-out", profile_out]
    log(f"{tag}: {steps} steps ({a.warmups[name]} warm-up)")
    rc, wall, maxrss, load, cpu = run_child(cmd, os.path.join(workdir, tag + ".log"), a.timeout,
                                            torch_env(a.threads, setup))
    res = dict(side="torch", model=name, label=label, rc=rc, wall=wall, maxrss=maxrss, load=load,
               cpu=cpu, setup=setup, ac=ac, autocast=autocast, log=os.path.join(workdir, tag + ".log"))
    if rc != 0 or not os.path.exists(out):
        log(f"  FAILED rc={rc}:\n{tail(res['log'])}")
        res["error"] = f"exit status {rc}"
        return res
    data = json.load(open(out))
    res.update(summarize_steps(data["steps"], a.warmups[name], m["batch"] * m["seq"]))
    timed = [s for s in data["steps"] if s["step"] > a.warmups[name]]
    res.update(import_rss=data["import_rss"], setup_rss=data["setup_rss"],
               torch_version=data["torch_version"], loss_steps=[s["loss"] for s in data["steps"]],
               step_cpu=sum(s["cpu"] for s in timed) / len(timed),
               step_minflt=sum(s["minflt"] for s in timed) / len(timed),
               os_threads=data["os_threads"])
    log(f"  tps {res['tps']:.1f}, CPU {res['step_cpu']:.2f} s/step, max RSS {maxrss / 2**20:.1f} MiB "
        f"(after import torch {data['import_rss'] / 2**20:.1f} MiB), load {load:.1f}")
    return res


def remat_perf_profile(remat, m, a, tokens, workdir):
    """perf's flat profile (self time by symbol) of a short remat run with AC none."""
    if not shutil.which("perf"):
        return None, "perf is not installed"
    data = os.path.join(workdir, "remat.perf.data")
    steps = 3
    cmd = ["perf", "record", "-q", "-F", "499", "-o", data, "--"] + remat_base_cmd(
        remat, m, a.threads, steps, tokens, os.path.join(workdir, "remat-perf")) + [
        AC + "mode", "none", "--metrics.peak_flops", "1e11"]
    log("remat perf profile (debug model, AC none, 3 steps)")
    rc = run_child(cmd, os.path.join(workdir, "remat-perf.log"), a.timeout)[0]
    if rc != 0:
        return None, f"perf record failed (exit {rc}): {tail(os.path.join(workdir, 'remat-perf.log'), 5)}"
    rep = subprocess.run(["perf", "report", "-i", data, "--stdio", "--sort", "dso,symbol",
                          "--percent-limit", "0.7"], capture_output=True, text=True)
    lines = []
    for ln in rep.stdout.splitlines():
        if not ln.strip() or ln.startswith("#"):
            continue
        ln = re.sub(r"(\s+-){2}\s*$", "", ln.rstrip())  # the empty IPC columns
        lines.append(re.sub(r"\s{2,}", "  ", ln.strip()))
    return lines[:30], None


# ---------------------------------------------------------------------------
# the report


def mib(b):
    return f"{b / 2**20:,.0f}" if b is not None else "n/a"


def fmt(x, spec=".1f"):
    return format(x, spec) if isinstance(x, (int, float)) else "n/a"


def machine_info():
    model = "unknown"
    try:
        out = subprocess.run(["lscpu"], capture_output=True, text=True).stdout
        for line in out.splitlines():
            if line.startswith("Model name:"):
                model = line.split(":", 1)[1].strip()
    except OSError:
        pass
    mem = 0
    with open("/proc/meminfo") as f:
        for line in f:
            if line.startswith("MemTotal:"):
                mem = int(line.split()[1]) * 1024
    flags = open("/proc/cpuinfo").read()
    isa = "AVX-512" if " avx512f" in flags else ("AVX2" if " avx2" in flags else "no AVX2")
    bf16 = "avx512_bf16 present" if " avx512_bf16" in flags else "no avx512_bf16"
    return dict(cpu=model, cores=os.cpu_count(), mem=mem, isa=isa, bf16=bf16, kernel=platform.release())


def torch_config():
    try:
        out = subprocess.run([sys.executable, "-c",
                              "import torch; print(torch.__version__); print(torch.__config__.show())"],
                             capture_output=True, text=True, timeout=120).stdout
    except (OSError, subprocess.TimeoutExpired):
        return "unknown", ""
    version = out.splitlines()[0] if out else "unknown"
    blas = re.search(r"BLAS_INFO=(\w+)", out)
    blas_lib = os.path.realpath("/usr/lib/x86_64-linux-gnu/libblas.so.3")
    return version, f"BLAS_INFO={blas.group(1) if blas else '?'} ({blas_lib})"


def measured(r):
    return "error" not in r and "same_as" not in r


def model_table(name, m, results):
    lines = []
    params, emb = param_counts(m)
    fpt = model_flops_per_token(m)
    lines.append(f"#### {name}: dim {m['dim']}, {m['n_layers']} layers, {m['n_heads']} heads "
                 f"(kv {m['n_kv_heads']}), FFN {ffn_hidden(m)}, vocab {m['vocab_size']}, "
                 f"batch {m['batch']} x seq {m['seq']}")
    lines.append("")
    lines.append(f"{params:,} parameters ({params - emb:,} without the embedding); "
                 f"{fpt / 1e6:,.1f} MFLOP per token (model FLOPs, spec.md §4).")
    lines.append("")
    lines.append("| engine | configuration | tokens/s (median step) | tokens/s (upper decile) | "
                 "model GFLOP/s (median step) | timed step seconds | process CPU s / wall s | "
                 "allocator peak MiB | kept activations at peak MiB | process peak RSS MiB | "
                 "recompute FLOPs / model FLOPs | loss step 1 | loss last step | load avg |")
    lines.append("|---|---|---:|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|")
    for r in results:
        if "same_as" in r:
            lines.append(f"| {r['side']} | {r['label']} | same plan as *{r['same_as']}* (every matmul "
                         "gets the same decision), not rerun | | | | | | | | | | | |")
            continue
        if "error" in r:
            lines.append(f"| {r['side']} | {r['label']} | failed: {r['error']} (log {r['log']}) "
                         "| | | | | | | | | | | |")
            continue
        remat = r["side"] == "remat"
        peak = mib(r["peak_bytes"]) if remat else "n/a"
        act = mib(r["activation_bytes_at_peak"]) if remat else "n/a"
        rec = f"{100 * r['recompute_share']:.1f}%" if remat else "n/a"
        rss = mib(r["maxrss"])
        if not remat:
            rss += f" ({mib(r['maxrss'] - r['import_rss'])} above `import torch`)"
        lines.append(f"| {r['side']} | {r['label']} | {r['tps']:,.1f} | {r['tps_p90']:,.1f} | "
                     f"{r['tps'] * fpt / 1e9:.1f} | {', '.join(f'{x:.2f}' for x in r['step_seconds'])} | "
                     f"{r['cpu']:.1f} / {r['wall']:.1f} | {peak} | {act} | {rss} | {rec} | "
                     f"{r['loss1']:.5f} | {r['loss_last']:.5f} | {r['load']:.1f} |")
    lines.append("")
    return lines


def ratio_lines(name, results):
    by = {(r["side"], r["label"]): r for r in results if measured(r)}
    # The fastest fp32 eager set-up, whichever it is on this machine.
    eagers = [r for r in results if r["side"] == "torch" and measured(r) and r["ac"] == "none"
              and not r["autocast"]]
    eager = max(eagers, key=lambda r: r["tps"]) if eagers else None
    pairs = [(f"remat none vs the fastest torch eager (*{eager['label'] if eager else 'n/a'}*)",
              by.get(("remat", "none")), eager),
             ("remat full vs torch checkpoint per block", by.get(("remat", "full")),
              by.get(("torch", "checkpoint per block"))),
             ("remat none, bf16 vs torch eager, bf16 autocast",
              by.get(("remat", "none, bf16 mixed precision")), by.get(("torch", "eager, bf16 autocast")))]
    if eager:  # remat's fastest fp32 variant whose peak RSS stays within torch eager's
        fits = [r for r in results if r["side"] == "remat" and measured(r) and "bf16" not in r["label"]
                and r["maxrss"] <= eager["maxrss"]]
        if fits:
            best = max(fits, key=lambda r: r["tps"])
            pairs.append((f"fastest remat within that torch eager's peak RSS (*{best['label']}*) "
                          "vs it", best, eager))
    pairs.append(("for reference: remat none vs the old, untuned torch eager", by.get(("remat", "none")),
                  by.get(("torch", "eager, untuned (the old baseline)"))))
    out = []
    for title, r, t in pairs:
        if r is None or t is None:
            continue
        out.append(f"| {name} | {title} | **{r['tps'] / t['tps']:.2f}x** | {r['tps_p90'] / t['tps_p90']:.2f}x | "
                   f"{r['maxrss'] / t['maxrss']:.2f}x | "
                   f"{r['peak_bytes'] / (t['maxrss'] - t['import_rss']):.2f}x | "
                   f"{abs(r['loss1'] - t['loss1']):.1e} |")
    return out


BEGIN, END = "<!-- compare_pytorch:begin -->", "<!-- compare_pytorch:end -->"
MARKED = re.compile(r"<!-- (\w+):begin -->.*?<!-- \1:end -->", re.S)


def report_state(a, info, tversion, tblas, token_desc, all_results, profiles, elapsed):
    """Everything the report shows, saved as WORKDIR/report_state.json so that
    --rerender can rewrite the report without measuring again."""
    cmd = "/usr/bin/python3 bench/compare_pytorch.py" + (" --quick" if a.quick else "")
    extra = [f"--threads {a.threads}"] if a.threads != 2 else []
    if a.models != ("debug" if a.quick else "debug,wide"):
        extra.append(f"--models {a.models}")
    if a.torch_attention != "sdpa":
        extra.append(f"--torch-attention {a.torch_attention}")
    git = subprocess.run(["git", "-C", REPO, "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip() or "unknown"
    dirty = subprocess.run(["git", "-C", REPO, "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True).stdout.strip()
    return dict(date=datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
                git=git, dirty=bool(dirty), cmd=" ".join([cmd] + extra), info=info, tversion=tversion,
                tblas=tblas, token_desc=token_desc, results=all_results, profiles=profiles,
                elapsed=elapsed, threads=a.threads, torch_attention=a.torch_attention,
                torch_setups={x: torch_setup(x) for x in SETUPS},
                model_list=a.model_list, steps=a.steps, warmups=a.warmups)


def merge_into(path, section):
    """Puts `section` (wrapped in this script's markers) into the file at
    `path`, keeping the sections other bench scripts own (marked
    <!-- NAME:begin --> ... <!-- NAME:end -->) and anything written by hand."""
    text = open(path).read() if os.path.exists(path) else ""
    block = f"{BEGIN}\n{section.strip()}\n{END}"
    if BEGIN in text and END in text:
        text = re.sub(re.escape(BEGIN) + ".*?" + re.escape(END), lambda _: block, text, flags=re.S)
    elif "Generated by `bench/compare_pytorch.py`" in text:
        # This script's older, unmarked whole-file output: replace it, keep marked sections.
        others = [mo.group(0) for mo in MARKED.finditer(text)]
        text = "\n\n".join(["# Benchmarks", block] + others) + "\n"
    elif text.strip():
        lines = text.split("\n")
        head = 1 if lines[0].startswith("# ") else 0
        text = "\n".join(lines[:head] + ["", block, ""] + lines[head:])
    else:
        text = "# Benchmarks\n\n" + block + "\n"
    with open(path + ".tmp", "w") as f:
        f.write(text)
    os.replace(path + ".tmp", path)


def write_report(path, st):
    info, a_threads = st["info"], st["threads"]
    all_results, profiles = st["results"], st["profiles"]
    L = []
    L.append("## remat vs PyTorch eager")
    L.append("")
    L.append("remat against PyTorch eager on the CPU: the same Llama 3 model, weights, data, optimizer "
             "and thread count, in fp32 and in bf16 mixed precision (fp32 master weights). Generated "
             "by `bench/compare_pytorch.py`; do not edit by hand, rerun the script.")
    L.append("")
    L.append(f"- Date: {st['date']}; remat at git {st['git']}"
             f"{' (with uncommitted changes)' if st['dirty'] else ''}")
    L.append(f"- Machine: {info['cpu']}, {info['cores']} cores ({info['isa']}, "
             f"{info.get('bf16', 'avx512_bf16 not recorded')}), "
             f"{info['mem'] / 2**30:.1f} GiB RAM, Linux {info['kernel']}")
    L.append(f"- Threads: {a_threads} on both sides (remat `--training.threads {a_threads}`; "
             f"torch.set_num_threads({a_threads}), OMP_NUM_THREADS=OPENBLAS_NUM_THREADS={a_threads})")
    setups = st.get("torch_setups")
    if setups:
        L.append("- PyTorch set-ups (the same model code and math in each; why they matter: "
                 "bench/README.md): " + "; ".join(f"*{k}*: {v}" for k, v in setups.items())
                 + ". Every torch row runs *tuned* unless its label names another.")
    else:  # a state measured before the set-ups were recorded: the thread counts only
        L.append("- PyTorch set-up: " + torch_setup("untuned"))
    L.append(f"- PyTorch {st['tversion']}, {st['tblas']}; attention in PyTorch: "
             + ("the oracle's naive math attention (full score matrix; torch 1.13 has no fused CPU "
                "attention)" if st["torch_attention"] == "naive" else
                "torch 1.13's F._scaled_dot_product_attention (math path, is_causal)"))
    L.append(f"- Data: {st['token_desc']} (fortunes as bytes, BOS/EOS per quote), one .npy file read by both")
    L.append("- Steps per run: " + "; ".join(f"{k} {st['steps'][k]} (the first {st['warmups'][k]} "
                                            "untimed warm-up)" for k in st["model_list"])
             + f"; tokens/s is over the timed steps; the whole script took {st['elapsed'] / 60:.1f} min")
    L.append(f"- Reproduce: `{st['cmd']}` (from the repo root, after building remat: "
             "`cmake -S . -B build-bench -G Ninja && ninja -C build-bench remat`)")
    loads = [r["load"] for r in all_results if measured(r)]
    if loads and max(loads) > a_threads + 1:  # each run itself adds about `threads`
        L.append(f"- **Warning**: the 1-minute load average reached {max(loads):.1f} on "
                 f"{info['cores']} cores during the runs (other processes were competing for the "
                 "CPU), so absolute tokens/s are pessimistic and noisy; runs were interleaved "
                 "remat/torch so both sides saw similar contention. The `load avg` column is the "
                 "highest 1-minute load average seen during each run.")
    L.append("")
    L.append("### Method")
    L.append("")
    L.append("- Each configuration runs in its own child process. tokens/s = tokens of the timed "
             "steps / their wall time. A step is: next batch, zero grads, forward, backward, grad-norm "
             "clip, AdamW update (remat: its own per-step timer, from `--metrics.jsonl_path`; PyTorch: "
             "`time.perf_counter` around the same work). Headline: the median step; *upper decile*: "
             "the rate 10% of the timed steps beat. *Process CPU s / wall s*: the child's user + "
             "system time (all threads, from `wait4`) against its wall time, start-up included: "
             "under background load wall time grows, CPU time much less.")
    L.append("- bf16 rows: remat `--training.mixed_precision_param bfloat16`; PyTorch "
             "`torch.autocast(\"cpu\", dtype=torch.bfloat16)` around the forward (fp32 parameters "
             "and AdamW, bf16 matmuls through oneDNN, the loss in fp32), as torchtitan's mixed "
             "precision. Their step-1 losses differ from fp32 by bf16 rounding.")
    L.append("- Same start: remat writes its seed checkpoint (`--checkpoint.create_seed_checkpoint`), "
             "PyTorch loads it; the `loss step 1` columns must agree (the difference is in the ratio "
             "table), which checks both sides do the same work.")
    L.append("- Memory: *process peak RSS* is the child's `ru_maxrss` from `wait4` (code, libraries "
             "and allocator slack included) for both sides. *Allocator peak* is remat's exact count "
             "of the bytes it held at the worst moment of a step (parameters, gradients, AdamW state, "
             "activations, temporaries); *kept activations at peak* is the part of it that were "
             "forward values saved for the backward pass. For PyTorch the closest analogue is peak "
             "RSS minus the RSS right after `import torch` (shown in brackets).")
    L.append("- Recompute share = hardware FLOPs / model FLOPs - 1 = hfu/mfu - 1 from remat's metrics "
             "(FLOPs spent re-running forward ops, relative to the model's FLOPs). PyTorch's "
             "checkpointing recomputes the whole block (about 1/3 of the model FLOPs of a block).")
    L.append("- PyTorch checkpointing: `torch.utils.checkpoint.checkpoint(block, h, freqs, "
             "use_reentrant=False)` around every transformer block (= remat `full`).")
    L.append("")
    L.append("### Headline ratios")
    L.append("")
    L.append("| model | comparison | tokens/s ratio (remat / torch, median step) | ratio of upper deciles | "
             "peak RSS ratio | remat allocator peak / torch RSS above import | step-1 loss difference |")
    L.append("|---|---|---:|---:|---:|---:|---:|")
    for name in st["model_list"]:
        L.extend(ratio_lines(name, [r for r in all_results if r["model"] == name]))
    L.append("")
    L.append("Target: remat >= 1.3x PyTorch eager tokens/s at no more than PyTorch's peak memory.")
    L.append("")
    L.append("### Results")
    L.append("")
    for name in st["model_list"]:
        L.extend(model_table(name, MODELS[name], [r for r in all_results if r["model"] == name]))
    L.append("### Profiles (debug model, AC none)")
    L.append("")
    rp, rerr = profiles.get("remat", (None, "not run"))
    L.append("#### remat: `perf record` flat profile, self time by symbol (3 steps incl. start-up)")
    L.append("")
    L.append("`[k]` symbols are time in the Linux kernel (mostly page faults of freshly allocated "
             "buffers); libgomp addresses are the OpenMP runtime (no symbols; threads waiting or "
             "spinning at barriers); OpenBLAS `sgemm_*` and remat's `micro_kernel` are the matmuls.")
    L.append("")
    if rp:
        L.append("```")
        L.extend(rp)
        L.append("```")
    else:
        L.append(f"Not measured: {rerr}.")
    L.append("")
    tp, terr = profiles.get("torch", (None, "not run"))
    L.append("#### PyTorch eager: `torch.profiler`, one training step after warm-up, by self CPU time")
    L.append("")
    if tp:
        L.append("```")
        L.append(tp.rstrip())
        L.append("```")
    else:
        L.append(f"Not measured: {terr}.")
    L.append("")
    merge_into(path, "\n".join(L))
    return "\n".join(L)


def rerender(a):
    path = os.path.join(a.workdir, "report_state.json")
    if not os.path.exists(path):
        raise SystemExit(f"--rerender: no {path}; run the benchmark first")
    st = json.load(open(path))
    for r in st["results"]:  # a state written before the upper decile, CPU time and bf16 rows
        if "step_seconds" in r and "tps_p90" not in r:
            m = MODELS[r["model"]]
            r["tps_p90"] = upper_decile([m["batch"] * m["seq"] / x for x in r["step_seconds"]])
        r.setdefault("cpu", float("nan"))
        if r["side"] == "torch":
            r.setdefault("ac", "full" if r["label"] == "checkpoint per block" else "none")
            r.setdefault("autocast", False)
    out_path = a.out or os.path.join(REPO, benchmarks_file.PATH)
    write_report(out_path, st)
    log(f"rewrote {out_path} from {path} (measured {st['date']})")
    return 0


def main_parent(a):
    if a.rerender:
        return rerender(a)
    t_start = time.time()
    a.model_list = [x for x in a.models.split(",") if x]
    for x in a.model_list:
        if x not in MODELS:
            raise SystemExit(f"unknown model {x!r} (known: {', '.join(MODELS)})")
    a.steps = {"debug": a.debug_steps, "wide": a.wide_steps}
    a.warmups = {"debug": a.debug_warmup, "wide": a.wide_warmup}
    if a.quick:
        a.steps = {"debug": 2, "wide": 2}
        a.warmups = {"debug": 1, "wide": 1}
        a.no_profile = True
    a.dedup_models = set() if a.rerun_duplicates else {"wide"}
    for k, v in a.steps.items():
        if v <= a.warmups[k]:
            raise SystemExit(f"{k}: steps ({v}) must exceed its warm-up steps ({a.warmups[k]})")
    remat = a.remat or next((p for p in (os.path.join(REPO, "build-bench", "remat"),
                                         os.path.join(REPO, "build", "remat")) if os.path.exists(p)), None)
    if not remat or not os.path.exists(remat):
        raise SystemExit("no remat binary: build it (cmake -S . -B build-bench -G Ninja && "
                         "ninja -C build-bench remat) or pass --remat PATH")
    remat = os.path.abspath(remat)
    os.makedirs(a.workdir, exist_ok=True)
    out_path = a.out or (os.path.join(a.workdir, "BENCHMARKS.quick.md") if a.quick
                         else os.path.join(REPO, benchmarks_file.PATH))
    log(f"remat: {remat}; work dir: {a.workdir}; report: {out_path}")

    tokens = os.path.join(a.workdir, "fortunes_tokens.npy")
    token_desc = make_tokens(tokens)
    log(f"tokens: {token_desc}")
    info = machine_info()
    tversion, tblas = torch_config()

    all_results = []
    for name in a.model_list:
        m = MODELS[name]
        seed_dir = os.path.join(a.workdir, f"seed-{name}")
        # This script's own scratch: an earlier run's seed would make remat
        # refuse to write a new one (a seed checkpoint never replaces one).
        shutil.rmtree(seed_dir, ignore_errors=True)
        cmd = remat_base_cmd(remat, m, a.threads, 1, tokens, seed_dir) + [
            "--checkpoint.create_seed_checkpoint", "true"]
        rc = run_child(cmd, os.path.join(a.workdir, f"seed-{name}.log"), a.timeout)[0]
        weights = os.path.join(seed_dir, "checkpoint", "step-0.safetensors")
        if rc != 0 or not os.path.exists(weights):
            raise SystemExit(f"remat could not write the seed checkpoint:\n"
                             f"{tail(os.path.join(a.workdir, f'seed-{name}.log'))}")
        modes = [x for x in REMAT_MODES if not a.quick or x[0] in QUICK_REMAT_MODES]
        variants = [v for v in TORCH_VARIANTS if not a.quick or v[0] in QUICK_TORCH_VARIANTS]
        # Interleaved so both sides see the same background load: each torch variant runs just
        # before the remat run it is compared with, the other remat modes after them.
        partner = {"eager": "none", "checkpoint per block": "full",
                   "eager, bf16 autocast": "none, bf16 mixed precision"}
        order = []
        for v in variants:
            order.append(("torch", v))
            order += [("remat", x) for x in modes if x[0] == partner.get(v[0])]
        order += [("remat", x) for x in modes if x[0] not in partner.values()]
        results = []
        signatures = {}
        for side, what in order:
            if side == "torch":
                results.append(run_torch(name, m, what, a, tokens, weights, a.workdir))
            else:
                label, flags = what
                sig = op_plan_signature(remat, m, flags, a, tokens, a.workdir)
                same = signatures.get(sig) if sig else None
                if same and name in a.dedup_models:
                    log(f"remat-{name} '{label}': same plan as '{same}', not rerun")
                    results.append(dict(side="remat", model=name, label=label, same_as=same,
                                        maxrss=None, load=0.0))
                    continue
                if sig:
                    signatures.setdefault(sig, label)
                results.append(run_remat(remat, name, m, label, flags, a, tokens, a.workdir))
        # Table order: torch in TORCH_VARIANTS order, then remat in REMAT_MODES order.
        results.sort(key=lambda r: (r["side"] != "torch", [x[0] for x in (
            TORCH_VARIANTS if r["side"] == "torch" else REMAT_MODES)].index(r["label"])))
        all_results.extend(results)

    profiles = {}
    if not a.no_profile and "debug" in a.model_list:
        m = MODELS["debug"]
        profiles["remat"] = remat_perf_profile(remat, m, a, tokens, a.workdir)
        prof_out = os.path.join(a.workdir, "torch-profile.txt")
        weights = os.path.join(a.workdir, "seed-debug", "checkpoint", "step-0.safetensors")
        log("torch profile (debug model, eager, profiling step 3)")
        r = run_torch("debug", m, TORCH_VARIANTS[0], a, tokens, weights, a.workdir, profile_out=prof_out,
                      steps=3)
        profiles["torch"] = (open(prof_out).read(), None) if "error" not in r and os.path.exists(prof_out) \
            else (None, f"the profiled run failed ({r.get('error')})")
    else:
        profiles["remat"] = profiles["torch"] = (None, "skipped (--no-profile or no debug model)")

    elapsed = time.time() - t_start
    st = report_state(a, info, tversion, tblas, token_desc, all_results, profiles, elapsed)
    with open(os.path.join(a.workdir, "report_state.json"), "w") as f:
        json.dump(st, f, indent=1)
    body = write_report(out_path, st)
    log(f"wrote {out_path} ({elapsed / 60:.1f} min)")
    print(body.split("### Results")[0])
    return 1 if any("error" in r for r in all_results) else 0


def main(argv=None):
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_torch_worker"]:
        p = argparse.ArgumentParser()
        p.add_argument("--model", required=True, choices=list(MODELS))
        p.add_argument("--ac", choices=["none", "full"], default="none")
        p.add_argument("--threads", type=int, default=2)
        p.add_argument("--steps", type=int, required=True)
        p.add_argument("--tokens", required=True)
        p.add_argument("--weights", required=True)
        p.add_argument("--out", required=True)
        p.add_argument("--attention", choices=["naive", "sdpa"], default="naive")
        p.add_argument("--foreach", action="store_true")
        p.add_argument("--autocast", action="store_true")
        p.add_argument("--profile-step", type=int, default=0)
        p.add_argument("--profile-out")
        torch_worker(p.parse_args(argv[1:]))
        return 0
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--quick", action="store_true",
                   help="smoke test: debug model, AC none/full, 2 steps (1 timed), no profiles")
    p.add_argument("--remat", help="the remat binary (default build-bench/remat, else build/remat)")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--models", help="comma-separated: debug,wide (default both; --quick: debug)")
    p.add_argument("--debug-steps", type=int, default=7)
    p.add_argument("--wide-steps", type=int, default=3)
    p.add_argument("--debug-warmup", type=int, default=2, help="untimed first steps (debug model)")
    p.add_argument("--wide-warmup", type=int, default=1, help="untimed first steps (wide model)")
    p.add_argument("--torch-attention", choices=["naive", "sdpa"], default="sdpa",
                   help="naive: the oracle's attention; sdpa: torch 1.13's F._scaled_dot_product_attention")
    p.add_argument("--workdir", default="/tmp/remat-bench")
    p.add_argument("--out", help="report path (default: this CPU's benchmarks file, benchmarks_file.py; --quick: WORKDIR/BENCHMARKS.quick.md)")
    p.add_argument("--timeout", type=float, default=1800, help="seconds per child process")
    p.add_argument("--no-profile", action="store_true", help="skip the perf / torch.profiler runs")
    p.add_argument("--rerender", action="store_true",
                   help="rewrite the report from WORKDIR/report_state.json (the last run's "
                        "measurements) without running anything")
    p.add_argument("--rerun-duplicates", action="store_true",
                   help="wide model: also run op variants whose plan equals an earlier one "
                        "(by default they are skipped there; the debug model always runs them)")
    a = p.parse_args(argv)
    if a.models is None:
        a.models = "debug" if a.quick else "debug,wide"
    return main_parent(a)


if __name__ == "__main__":
    sys.exit(main())
