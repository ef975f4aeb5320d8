#!/usr/bin/python3
"""remat's Llama 4 (mixture of experts) against the PyTorch oracle
(tests/oracle/llama4_ref.py).

  /usr/bin/python3 tests/oracle/test_llama4_oracle.py path/to/remat

A small MoE model (configs/llama4_debug.toml with dim 64, 4 layers, 4 heads,
2 kv heads, 4 experts, MoE every 2nd block, vocab 300, multiple_of 32, seq 32,
batch 2), for top_k 1 and 2, softmax and sigmoid scores:
 1. a seed checkpoint (`remat train --checkpoint.create_seed_checkpoint true`);
 2. `remat grads` under every AC mode (none, full, selective 1, selective 2,
    op without filter, op with threshold 1e50, op with filter
    moe.router.gate) against `llama4_ref.py grads`: loss and every gradient
    (router gate and experts included) within 1e-4 relative error
    (max|a-b| / max|b|), and the AC modes bit-identical to each other;
 3. one training step on a token file (`remat train --training.steps 1
    --checkpoint.enable true`): the checkpoint's expert_bias equals the
    oracle's load-balancing update on the same batch (1e-6 absolute), and the
    token counts were reset;
 4. 5 training steps on fortunes under every AC mode: loss and grad_norm of
    every step bit-identical.
Exit 0 only if everything holds.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"
REF = os.path.join(HERE, "llama4_ref.py")
CONFIG = os.path.join(REPO, "configs", "llama4_debug.toml")
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

try:
    import numpy as np
    import torch  # noqa: F401
except ImportError as err:
    print(f"FAIL: cannot import torch/numpy ({err}); install python3-torch", file=sys.stderr)
    sys.exit(1)
from compare import read_safetensors, rel_error  # noqa: E402

DIM, LAYERS, HEADS, KV, VOCAB, MULT = 64, 4, 4, 2, 300, 32
EXPERTS, INTERLEAVE, SEQ, BATCH = 4, 2, 32, 2
TOL = 1e-4
AC = "--activation_checkpoint."
OP = [AC + "mode", "selective", AC + "selective_ac_option", "op"]
AC_MODES = [
    ("none", [AC + "mode", "none"]),
    ("full", [AC + "mode", "full"]),
    ("selective 1", [AC + "mode", "selective", AC + "selective_ac_option", "1"]),
    ("selective 2", [AC + "mode", "selective", AC + "selective_ac_option", "2"]),
    ("op", OP + [AC + "per_op_sac_force_recompute_mm_by_fqns", ""]),
    ("op 1e50", OP + [AC + "selective_op_ac_mm_flops_threshold", "1e50"]),
    ("op filter moe.router.gate", OP + [AC + "per_op_sac_force_recompute_mm_by_fqns",
                                        "moe.router.gate"]),
]
failures = []
checks = 0


def check(ok, what):
    global checks
    checks += 1
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=600)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def loss_of(text):
    return float(re.search(r"^loss:\s*(\S+)", text, re.MULTILINE).group(1))


def model_flags(top_k, score):
    return ["--model.dim", str(DIM), "--model.n_layers", str(LAYERS), "--model.n_heads",
            str(HEADS), "--model.n_kv_heads", str(KV), "--model.vocab_size", str(VOCAB),
            "--model.multiple_of", str(MULT), "--model.num_experts", str(EXPERTS),
            "--model.top_k", str(top_k), "--model.interleave_moe_layer_step", str(INTERLEAVE),
            "--model.score_func", score, "--training.seq_len", str(SEQ),
            "--training.local_batch_size", str(BATCH), "--training.threads", "2",
            "--metrics.peak_flops", "1e11"]


def one_config(remat, tmp, top_k, score):
    tag = f"top_k={top_k} {score}"
    d = os.path.join(tmp, f"k{top_k}_{score}")
    flags = model_flags(top_k, score)
    args = {"dim": DIM, "n_layers": LAYERS, "n_heads": HEADS, "n_kv_heads": KV,
            "vocab_size": VOCAB, "ffn_dim_multiplier": None, "multiple_of": MULT,
            "rope_theta": 500000.0, "norm_eps": 1e-5, "num_experts": EXPERTS, "top_k": top_k,
            "interleave_moe_layer_step": INTERLEAVE, "score_func": score}
    os.makedirs(d)
    args_path = os.path.join(d, "args.json")
    with open(args_path, "w") as f:
        json.dump(args, f)
    run([remat, "train", "--config", CONFIG, *flags, "--job.dump_folder", d,
         "--checkpoint.create_seed_checkpoint", "true"])
    seed = os.path.join(d, "checkpoint", "step-0.safetensors")
    tokens = os.path.join(d, "tokens.npy")
    rng = np.random.default_rng(1234 + top_k)
    np.save(tokens, rng.integers(0, VOCAB, size=BATCH * (SEQ + 1) + 5).astype(np.int32))

    ref_path = os.path.join(d, "ref.safetensors")
    ref_loss = loss_of(run([PY, REF, "grads", "--args", args_path, "--weights", seed,
                            "--tokens", tokens, "--batch", str(BATCH), "--seq", str(SEQ),
                            "--out", ref_path]))
    ref = read_safetensors(ref_path)
    first = None
    for mode, mode_flags in AC_MODES:
        path = os.path.join(d, re.sub(r"\W+", "_", mode) + ".safetensors")
        loss = loss_of(run([remat, "grads", "--config", CONFIG, *flags, *mode_flags,
                            "--job.dump_folder", d, "--checkpoint.load", seed,
                            "--tokens", tokens, "--out", path]))
        ours = read_safetensors(path)
        if first is None:
            first = (mode, path, loss)
            check(abs(loss - ref_loss) <= TOL * abs(ref_loss),
                  f"{tag}: loss {loss:.7f} vs oracle {ref_loss:.7f}")
            check(set(ours) == set(ref), f"{tag}: gradient names match the oracle's "
                  f"({len(ours)}; differ: {sorted(set(ours) ^ set(ref))[:4]})")
            errs = {n: rel_error(ours[n], ref[n]) for n in sorted(set(ours) & set(ref))
                    if ours[n].shape == ref[n].shape}
            worst = max(errs, key=lambda n: errs[n])
            bad = [f"{n} {e:.2e}" for n, e in errs.items() if not e <= TOL]
            check(not bad and len(errs) == len(ref),
                  f"{tag}: every gradient within {TOL:g} (worst {worst} {errs[worst]:.2e}) {bad}")
            moe = [n for n in errs if ".moe." in n and ("router" in n or "experts" in n)]
            check(len(moe) == 4 * (LAYERS // INTERLEAVE) and
                  all(np.abs(ref[n]).max() > 0 for n in moe),
                  f"{tag}: router and expert gradients compared and non-zero ({len(moe)})")
        else:
            with open(first[1], "rb") as a, open(path, "rb") as b:
                same = a.read() == b.read()
            check(same and loss == first[2], f"{tag}: [{mode}] bit-identical to [{first[0]}]")

    # One training step on the token file: the load-balancing update.
    train_dir = os.path.join(d, "train")
    run([remat, "train", "--config", CONFIG, *flags, "--job.dump_folder", train_dir,
         "--training.dataset_path", tokens, "--training.steps", "1",
         "--checkpoint.enable", "true", "--metrics.log_freq", "1"])
    ckpt = read_safetensors(os.path.join(train_dir, "checkpoint", "step-1.safetensors"))
    bal_path = os.path.join(d, "balance.safetensors")
    run([PY, REF, "balance", "--args", args_path, "--weights", seed, "--tokens", tokens,
         "--batch", str(BATCH), "--seq", str(SEQ), "--out", bal_path])
    bal = read_safetensors(bal_path)
    for name in sorted(n for n in bal if n.endswith("expert_bias")):
        diff = float(np.abs(ckpt[name] - bal[name]).max())
        counts = bal[name.replace("expert_bias", "tokens_per_expert_before_reset")]
        check(diff <= 1e-6 and np.abs(bal[name]).max() > 0,
              f"{tag}: {name} after one step {np.round(ckpt[name], 6).tolist()} vs oracle "
              f"(counts {counts.tolist()}), max diff {diff:.1e}")
        reset = name.replace("expert_bias", "tokens_per_expert")
        check(not ckpt[reset].any(), f"{tag}: {reset} reset after the step")


def training_bit_identity(remat, tmp):
    # One batch of tokens, read again at every step: on different batches
    # of 64 tokens the loss moves by more than 5 steps lower it, so "the loss
    # falls" would test the data and the initial weights, not the training.
    tokens = os.path.join(tmp, "one_batch.npy")
    rng = np.random.default_rng(99)
    np.save(tokens, rng.integers(0, VOCAB, size=BATCH * (SEQ + 1)).astype(np.int32))
    flags = [*model_flags(2, "softmax"), "--training.dataset_path", tokens]
    reference = None
    for mode, mode_flags in AC_MODES:
        out = os.path.join(tmp, "m_" + re.sub(r"\W+", "_", mode) + ".jsonl")
        text = run([remat, "train", "--config", CONFIG, *flags, *mode_flags,
                    "--training.steps", "5", "--metrics.log_freq", "1",
                    "--metrics.jsonl_path", out, "--job.dump_folder", tmp])
        with open(out) as f:
            rows = [(r["step"], r["loss"], r["grad_norm"]) for r in map(json.loads, f)]
        if reference is None:
            reference = rows
            check(len(rows) == 5 and rows[-1][1] < rows[0][1],
                  f"train 5 steps [{mode}]: loss falls {rows[0][1]:.4f} -> {rows[-1][1]:.4f}")
            check("moe: min" in text, "train: the log line reports the MoE load")
        else:
            check(rows == reference, f"train 5 steps [{mode}]: loss and grad_norm bit-identical")


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} path/to/remat", file=sys.stderr)
        return 1
    remat = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="remat_llama4_oracle_") as tmp:
        for top_k in (1, 2):
            for score in ("softmax", "sigmoid"):
                one_config(remat, tmp, top_k, score)
        training_bit_identity(remat, tmp)
    if failures:
        print(f"FAIL: {len(failures)} of {checks} checks")
        for f in failures:
            print("  - " + f)
        return 1
    print(f"PASS: remat's Llama 4 matches the PyTorch oracle ({checks} checks)")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except RuntimeError as err:
        print(f"FAIL: {err}")
        sys.exit(1)
