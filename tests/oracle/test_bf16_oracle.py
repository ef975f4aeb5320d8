#!/usr/bin/python3
"""remat's bf16 mixed precision against the fp32 PyTorch oracle (llama_ref.py).

  /usr/bin/python3 tests/oracle/test_bf16_oracle.py path/to/remat

The llama3 debug model (dim 256, 6 layers, 16 heads, vocab 2048) at batch 2
x seq 64, on the fortunes text as bytes, from remat's fp32 seed checkpoint;
remat runs with training.mixed_precision_param = "bfloat16" on each bf16
GEMM path this CPU has (fallback always, native and onednn with avx512_bf16):
 1. step-1 gradients (`remat grads`) against llama_ref.py's fp32 gradients:
    cosine similarity >= 0.99 for every parameter, loss within 1%;
 2. 50 training steps (AdamW, warm-up + linear decay, clipping at 1.0, as
    remat does them) against the same 50 steps of the oracle model in fp32
    PyTorch: every step's loss within 2%.
Prints each check. Exit 0 only if all hold; 1 otherwise (also without torch).
"""

import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
CONFIG = os.path.join(REPO, "configs", "llama3_debug.toml")
FORTUNES = "/usr/share/games/fortunes"

try:
    import numpy as np
    import torch
    import torch.nn.functional as F
except ImportError as err:
    print(f"FAIL: cannot import torch/numpy ({err}); install python3-torch and run with "
          "/usr/bin/python3", file=sys.stderr)
    sys.exit(1)

sys.dont_write_bytecode = True
sys.path.insert(0, HERE)
import llama_ref  # noqa: E402
from compare import read_safetensors  # noqa: E402

BATCH, SEQ, STEPS = 2, 64, 50
COSINE_MIN, STEP1_LOSS_TOL, LOSS_TOL = 0.99, 0.01, 0.02
OPT = dict(lr=8e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, max_norm=1.0,
           warmup_steps=2, decay_ratio=0.8)
SHAPE = ["--training.local_batch_size", str(BATCH), "--training.seq_len", str(SEQ),
         "--training.threads", "2", "--metrics.peak_flops", "1e11"]
OPT_ARGS = ["--training.max_norm", str(OPT["max_norm"]), "--optimizer.lr", str(OPT["lr"]),
            "--optimizer.weight_decay", str(OPT["weight_decay"]),
            "--optimizer.beta1", str(OPT["beta1"]), "--optimizer.beta2", str(OPT["beta2"]),
            "--optimizer.eps", str(OPT["eps"]),
            "--lr_scheduler.warmup_steps", str(OPT["warmup_steps"]),
            "--lr_scheduler.decay_ratio", str(OPT["decay_ratio"]), "--training.seed", "0"]
BF16 = ["--training.mixed_precision_param", "bfloat16"]
failures = []


def check(what, ok, detail=""):
    print(f"{'ok  ' if ok else 'FAIL'} {what}" + (f"  ({detail})" if detail else ""))
    if not ok:
        failures.append(what + (f": {detail}" if detail else ""))


def run(cmd, env=None):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, env=env, timeout=900)
    if p.returncode != 0:
        sys.exit(f"FAIL: {' '.join(cmd)} exited {p.returncode}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def fortunes_tokens(path, count):
    """The first `count` bytes of the fortunes files (sorted), as int32 tokens."""
    data = b""
    for name in sorted(os.listdir(FORTUNES)):
        full = os.path.join(FORTUNES, name)
        if name.startswith(".") or name.endswith((".dat", ".u8")) or not os.path.isfile(full):
            continue
        with open(full, "rb") as f:
            data += f.read()
        if len(data) >= count:
            break
    np.save(path, np.frombuffer(data[:count], np.uint8).astype(np.int32))


def lr_at(step, total):
    """remat's LrSchedule::at (torchtitan's warm-up + linear decay)."""
    current, warmup = step - 1, min(OPT["warmup_steps"], total)
    decay = int(round(total * OPT["decay_ratio"]))
    stable_end = max(warmup, total - decay)
    if current < warmup:
        return OPT["lr"] * (current + 1) / (warmup + 1)
    if current < stable_end or decay == 0:
        return OPT["lr"]
    return OPT["lr"] * (1.0 - (current + 1 - stable_end) / decay)


def torch_losses(args, weights, tokens_path):
    """STEPS fp32 steps of the oracle model on remat's batches (BatchLoader's
    windows), from the seed checkpoint (remat's training starts from the same
    weights: its initialisation is deterministic in training.seed)."""
    torch.manual_seed(0)
    torch.set_num_threads(2)
    model = llama_ref.Transformer(args)
    state = read_safetensors(weights)
    with torch.no_grad():
        for name, p in model.named_parameters():
            p.copy_(torch.from_numpy(np.array(state[name], dtype=np.float32)))
    opt = torch.optim.AdamW(model.parameters(), lr=OPT["lr"], betas=(OPT["beta1"], OPT["beta2"]),
                            eps=OPT["eps"], weight_decay=OPT["weight_decay"])
    tokens = np.load(tokens_path).astype(np.int64)
    windows = (tokens.size - 1) // SEQ
    offsets = np.arange(SEQ + 1)
    freqs = llama_ref.precompute_freqs_cis(args.head_dim, SEQ, args.rope_theta, torch.float32)
    losses = []
    for step in range(1, STEPS + 1):
        w = ((step - 1) * BATCH + np.arange(BATCH)) % windows
        rows = torch.from_numpy(tokens[w[:, None] * SEQ + offsets[None, :]])
        for g in opt.param_groups:
            g["lr"] = lr_at(step, STEPS)
        opt.zero_grad(set_to_none=True)
        h = model.tok_embeddings(rows[:, :-1])
        for layer in model.layers:
            h = layer(h, freqs)
        logits = model.output(model.norm(h))
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), OPT["max_norm"])
        opt.step()
        losses.append(float(loss))
    return losses


def cosine(a, b):
    a, b = a.astype(np.float64).ravel(), b.astype(np.float64).ravel()
    denom = np.linalg.norm(a) * np.linalg.norm(b)
    return float(a @ b / denom) if denom > 0 else (1.0 if not a.any() and not b.any() else 0.0)


def compare_kernel(kernel, remat, tmp, seed, tokens, args_json, ref_grads, ref_loss, reference):
    env = dict(os.environ, REMAT_BF16_KERNEL=kernel)
    grads = os.path.join(tmp, f"grads_{kernel}.safetensors")
    out = run([remat, "grads", "--config", CONFIG, *SHAPE, *BF16, "--job.dump_folder", tmp,
               "--checkpoint.load", seed, "--tokens", tokens, "--out", grads], env)
    loss = float(re.search(r"^loss:\s*(\S+)", out, re.M).group(1))
    check(f"[{kernel}] step-1 loss {loss:.6f} vs oracle fp32 {ref_loss:.6f}",
          abs(loss - ref_loss) / ref_loss <= STEP1_LOSS_TOL)
    ours, ref = read_safetensors(grads), read_safetensors(ref_grads)
    check(f"[{kernel}] gradient names", set(ours) == set(ref))
    cosines = {n: cosine(ours[n], ref[n]) for n in sorted(set(ours) & set(ref))}
    worst = min(cosines, key=cosines.get)
    check(f"[{kernel}] gradient cosine, every parameter >= {COSINE_MIN} "
          f"(worst {worst}: {cosines[worst]:.5f})",
          all(c >= COSINE_MIN for c in cosines.values()),
          ", ".join(f"{n} {c:.4f}" for n, c in cosines.items() if c < COSINE_MIN))
    metrics = os.path.join(tmp, f"train_{kernel}.jsonl")
    run([remat, "train", "--config", CONFIG, *SHAPE, *BF16, *OPT_ARGS, "--job.dump_folder", tmp,
         "--training.steps", str(STEPS), "--training.dataset_path", tokens,
         "--checkpoint.enable", "false", "--metrics.log_freq", "1",
         "--metrics.jsonl_path", metrics], env)
    with open(metrics) as f:
        losses = [json.loads(line)["loss"] for line in f if line.strip()]
    diffs = [abs(a - b) / b for a, b in zip(losses, reference)]
    worst_step = int(np.argmax(diffs)) + 1
    check(f"[{kernel}] {len(losses)} bf16 steps vs oracle fp32: worst loss difference "
          f"{100 * max(diffs):.3f}% at step {worst_step} (last {losses[-1]:.4f} vs "
          f"{reference[-1]:.4f})", len(losses) == STEPS and max(diffs) <= LOSS_TOL)


def main():
    remat = os.path.abspath(sys.argv[1])
    kernels = ["fallback"]
    with open("/proc/cpuinfo") as f:
        if "avx512_bf16" in f.read():
            kernels += ["native", "onednn"]
        else:
            print("SKIP native and onednn bf16 kernels: this CPU has no avx512_bf16")
    with tempfile.TemporaryDirectory(prefix="remat_bf16_oracle_") as tmp:
        run([remat, "train", "--config", CONFIG, *SHAPE, "--job.dump_folder", tmp,
             "--checkpoint.create_seed_checkpoint", "true"])
        seed = os.path.join(tmp, "checkpoint", "step-0.safetensors")
        tokens = os.path.join(tmp, "tokens.npy")
        fortunes_tokens(tokens, STEPS * BATCH * SEQ + 1)
        margs = dict(dim=256, n_layers=6, n_heads=16, n_kv_heads=16, vocab_size=2048,
                     ffn_dim_multiplier=None, multiple_of=256, rope_theta=500000.0, norm_eps=1e-5)
        args_json = os.path.join(tmp, "model_args.json")
        with open(args_json, "w") as f:
            json.dump(margs, f)
        ref_grads = os.path.join(tmp, "grads_ref.safetensors")
        out = run(["/usr/bin/python3", os.path.join(HERE, "llama_ref.py"), "grads", "--args",
                   args_json, "--weights", seed, "--tokens", tokens, "--batch", str(BATCH),
                   "--seq", str(SEQ), "--out", ref_grads])
        ref_loss = float(re.search(r"^loss:\s*(\S+)", out, re.M).group(1))
        reference = torch_losses(llama_ref.ModelArgs(**margs), seed, tokens)
        for kernel in kernels:
            compare_kernel(kernel, remat, tmp, seed, tokens, args_json, ref_grads, ref_loss,
                           reference)
    if failures:
        print(f"FAIL ({len(failures)}):\n  " + "\n  ".join(failures))
        return 1
    print("PASS: bf16 training matches the fp32 PyTorch oracle")
    return 0


if __name__ == "__main__":
    sys.exit(main())
