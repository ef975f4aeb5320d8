#!/usr/bin/python3
"""remat's Llama 3 against the PyTorch oracle (tests/oracle/llama_ref.py).

  /usr/bin/python3 tests/oracle/test_llama3_oracle.py path/to/remat

A small GQA model (configs/llama3_debug.toml with dim 64, 2 layers, 4 heads,
2 kv heads, vocab 300, multiple_of 32, seq 32, batch 2), all files in a fresh
temporary directory:
 1. `remat train --checkpoint.create_seed_checkpoint true` writes the step-0
    weights;
 2. a deterministic random int32 token file (10 rows of 33 tokens + 7);
 3. `remat grads` under every activation-checkpointing mode (none, full,
    selective 1, selective 2, selective op, selective op with an mm FLOP
    threshold of 1e50) against `llama_ref.py grads` on the same weights and
    tokens: loss and every parameter gradient within 1e-4 relative error
    (max|a-b| / max|b| per tensor), identical parameter names; and the AC
    modes agree with each other bit for bit (gradient files and printed loss);
    the chunked loss head (model.loss_chunk_rows 24) against the oracle too;
 4. `remat eval` against `llama_ref.py eval` on the step-0 weights: within
    1e-5 relative;
 5. `remat train` for 3 steps on the default dataset (fortunes) with
    checkpointing on, then the same eval comparison on the trained weights
    (the checkpoint also holds optimizer moments, which the oracle ignores).
Prints a summary table. Exit 0 only if everything holds; 1 otherwise,
including when torch cannot be imported (it fails, never skips).
"""

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
PY = "/usr/bin/python3"
REF = os.path.join(HERE, "llama_ref.py")
CONFIG = os.path.join(REPO, "configs", "llama3_debug.toml")

try:
    import numpy as np
    import torch  # noqa: F401  (llama_ref.py needs it; fail here with a clear message)
except ImportError as err:
    print(f"FAIL: cannot import torch/numpy ({err}).\n"
          "The oracle tests need PyTorch for Debian's Python: install the python3-torch "
          "package (sudo apt-get install python3-torch; `make test` does it) and run "
          "them with /usr/bin/python3.", file=sys.stderr)
    sys.exit(1)

sys.dont_write_bytecode = True  # never write into the repo (tests/oracle/__pycache__)
sys.path.insert(0, HERE)
from compare import read_safetensors, rel_error  # noqa: E402

DIM, N_LAYERS, N_HEADS, N_KV_HEADS, VOCAB, MULTIPLE_OF = 64, 2, 4, 2, 300, 32
SEQ, BATCH = 32, 2
EVAL_ROWS, REMAINDER = 10, 7
TRAIN_STEPS = 3
GRAD_TOL = 1e-4     # loss and per-tensor gradient relative error
EVAL_TOL = 1e-5     # validation loss relative difference
TIMEOUT_S = 300     # per command; the whole test takes a few seconds

MODEL_ARGS = {"dim": DIM, "n_layers": N_LAYERS, "n_heads": N_HEADS, "n_kv_heads": N_KV_HEADS,
              "vocab_size": VOCAB, "ffn_dim_multiplier": None, "multiple_of": MULTIPLE_OF,
              "rope_theta": 500000.0, "norm_eps": 1e-5}

AC_MODES = [
    ("none", ["--activation_checkpoint.mode", "none"]),
    ("full", ["--activation_checkpoint.mode", "full"]),
    ("selective 1", ["--activation_checkpoint.mode", "selective",
                     "--activation_checkpoint.selective_ac_option", "1"]),
    ("selective 2", ["--activation_checkpoint.mode", "selective",
                     "--activation_checkpoint.selective_ac_option", "2"]),
    ("selective op", ["--activation_checkpoint.mode", "selective",
                      "--activation_checkpoint.selective_ac_option", "op"]),
    ("selective op thr=1e50", ["--activation_checkpoint.mode", "selective",
                               "--activation_checkpoint.selective_ac_option", "op",
                               "--activation_checkpoint.selective_op_ac_mm_flops_threshold",
                               "1e50"]),
]

rows = []       # summary: (check, measured, limit, ok)
failures = []


def record(check, measured, limit, ok, detail=None):
    rows.append((check, measured, limit, ok))
    if not ok:
        failures.append(check + (f": {detail}" if detail else ""))


class CommandFailed(Exception):
    pass


def run(cmd, what):
    """Runs cmd; returns stdout. Raises CommandFailed with its output on a
    non-zero exit or timeout."""
    t0 = time.time()
    try:
        p = subprocess.run(cmd, capture_output=True, text=True, timeout=TIMEOUT_S, cwd=REPO)
    except subprocess.TimeoutExpired as e:
        raise CommandFailed(f"{what}: timed out after {TIMEOUT_S} s\n  $ {' '.join(cmd)}\n"
                            f"{e.stdout or ''}{e.stderr or ''}")
    dt = time.time() - t0
    if p.returncode != 0:
        status = (f"killed by {signal.Signals(-p.returncode).name}" if p.returncode < 0
                  else f"exit status {p.returncode}")
        raise CommandFailed(f"{what}: {status}\n  $ {' '.join(cmd)}\n"
                            f"--- stdout ---\n{p.stdout}--- stderr ---\n{p.stderr}")
    print(f"  ran {what} ({dt:.1f} s)")
    return p.stdout


def parse_number(text, label, what):
    m = re.search(r"^" + re.escape(label) + r":\s*(\S+)\s*$", text, re.MULTILINE)
    if not m:
        raise CommandFailed(f"{what}: no '{label}: X' line in its output:\n{text}")
    try:
        return m.group(1), float(m.group(1))
    except ValueError:
        raise CommandFailed(f"{what}: '{label}:' is followed by {m.group(1)!r}, not a number")


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-12)


def compare_grads(label, ours_path, ref_path):
    ours, ref = read_safetensors(ours_path), read_safetensors(ref_path)
    only_ours, only_ref = sorted(set(ours) - set(ref)), sorted(set(ref) - set(ours))
    record(f"{label}: parameter names", f"{len(ours)} vs {len(ref)}", "identical",
           not only_ours and not only_ref,
           f"only in remat: {only_ours}; only in oracle: {only_ref}")
    worst_name, worst = None, 0.0
    bad = []
    for name in sorted(set(ours) & set(ref)):
        if ours[name].shape != ref[name].shape:
            bad.append(f"{name} shape {list(ours[name].shape)} vs {list(ref[name].shape)}")
            worst_name, worst = name, float("inf")
            continue
        err = rel_error(ours[name], ref[name])
        if not err <= GRAD_TOL:
            bad.append(f"{name} rel_err {err:.3e}")
        if not err <= worst:  # also catches nan
            worst_name, worst = name, err
    record(f"{label}: worst gradient ({worst_name})", f"{worst:.3e}", f"<= {GRAD_TOL:g}",
           not bad, "; ".join(bad))
    return ours, ref


def print_per_tensor(ours, ref):
    print("  per-tensor gradient relative error (remat vs oracle):")
    for name in sorted(set(ours) & set(ref)):
        if ours[name].shape == ref[name].shape:
            err = rel_error(ours[name], ref[name])
            flag = "" if err <= GRAD_TOL else "   <-- FAIL"
            print(f"    {name:42s} {err:.3e}{flag}")


def main():
    if len(sys.argv) != 2:
        print(f"usage: {sys.argv[0]} path/to/remat", file=sys.stderr)
        return 1
    remat = os.path.abspath(sys.argv[1])
    if not os.access(remat, os.X_OK):
        print(f"FAIL: remat binary {remat} is missing or not executable", file=sys.stderr)
        return 1

    with tempfile.TemporaryDirectory(prefix="remat_llama3_oracle_") as tmp:
        model_over = ["--model.dim", str(DIM), "--model.n_layers", str(N_LAYERS),
                      "--model.n_heads", str(N_HEADS), "--model.n_kv_heads", str(N_KV_HEADS),
                      "--model.vocab_size", str(VOCAB), "--model.multiple_of", str(MULTIPLE_OF),
                      "--training.seq_len", str(SEQ), "--training.local_batch_size", str(BATCH)]
        args_json = os.path.join(tmp, "model_args.json")
        with open(args_json, "w") as f:
            json.dump(MODEL_ARGS, f)

        # 1. seed checkpoint
        seed_dump = os.path.join(tmp, "seed")
        run([remat, "train", "--config", CONFIG, *model_over, "--job.dump_folder", seed_dump,
             "--checkpoint.create_seed_checkpoint", "true"], "remat train (seed checkpoint)")
        seed = os.path.join(seed_dump, "checkpoint", "step-0.safetensors")
        if not os.path.isfile(seed):
            raise CommandFailed(f"the seed checkpoint {seed} was not written")
        seed_names = set(read_safetensors(seed))

        # 2. tokens
        tokens_path = os.path.join(tmp, "tokens.npy")
        rng = np.random.default_rng(20240601)
        np.save(tokens_path, rng.integers(0, VOCAB, size=EVAL_ROWS * (SEQ + 1) + REMAINDER)
                .astype(np.int32))

        # 3. gradients under every AC mode vs the oracle
        ref_grads = os.path.join(tmp, "grads_ref.safetensors")
        out = run([PY, REF, "grads", "--args", args_json, "--weights", seed, "--tokens",
                   tokens_path, "--batch", str(BATCH), "--seq", str(SEQ), "--out", ref_grads],
                  "llama_ref.py grads")
        ref_loss_text, ref_loss = parse_number(out, "loss", "llama_ref.py grads")

        first = None  # (mode, loss text, grads path) of the first AC mode
        for mode, flags in AC_MODES:
            path = os.path.join(tmp, "grads_" + re.sub(r"\W+", "_", mode) + ".safetensors")
            what = f"remat grads ({mode})"
            out = run([remat, "grads", "--config", CONFIG, *model_over,
                       "--job.dump_folder", os.path.join(tmp, "grads_dump"), *flags,
                       "--checkpoint.load", seed, "--tokens", tokens_path, "--out", path], what)
            loss_text, loss = parse_number(out, "loss", what)
            record(f"grads [{mode}]: loss {loss_text} vs oracle {ref_loss_text}",
                   f"{rel(loss, ref_loss):.3e}", f"<= {GRAD_TOL:g}",
                   rel(loss, ref_loss) <= GRAD_TOL)
            ours, ref = compare_grads(f"grads [{mode}]", path, ref_grads)
            if first is None:
                first = (mode, loss_text, path)
                print_per_tensor(ours, ref)
            else:
                with open(first[2], "rb") as a, open(path, "rb") as b:
                    identical = a.read() == b.read()
                record(f"grads [{mode}] vs [{first[0]}]: file bits", "identical" if identical
                       else "DIFFER", "identical", identical)
                record(f"grads [{mode}] vs [{first[0]}]: printed loss",
                       "identical" if loss_text == first[1] else f"{loss_text} vs {first[1]}",
                       "identical", loss_text == first[1])

        # 3b. the chunked loss head (model.loss_chunk_rows: 24 + 24 + 16 of the
        # 64 rows) against the oracle as well
        path = os.path.join(tmp, "grads_chunked_loss.safetensors")
        what = "remat grads (chunked loss, 24 rows)"
        out = run([remat, "grads", "--config", CONFIG, *model_over, "--model.loss_chunk_rows",
                   "24", "--job.dump_folder", os.path.join(tmp, "grads_dump"),
                   "--checkpoint.load", seed, "--tokens", tokens_path, "--out", path], what)
        loss_text, loss = parse_number(out, "loss", what)
        record(f"grads [chunked loss]: loss {loss_text} vs oracle {ref_loss_text}",
               f"{rel(loss, ref_loss):.3e}", f"<= {GRAD_TOL:g}", rel(loss, ref_loss) <= GRAD_TOL)
        compare_grads("grads [chunked loss]", path, ref_grads)

        # 4. eval on the step-0 weights
        def compare_eval(label, weights):
            out = run([remat, "eval", "--config", CONFIG, *model_over,
                       "--job.dump_folder", os.path.join(tmp, "eval_dump"),
                       "--checkpoint.load", weights, "--validation.dataset", tokens_path],
                      f"remat eval ({label})")
            ours_text, ours = parse_number(out, "validation loss", "remat eval")
            out = run([PY, REF, "eval", "--args", args_json, "--weights", weights, "--tokens",
                       tokens_path, "--seq", str(SEQ)], f"llama_ref.py eval ({label})")
            ref_text, ref = parse_number(out, "validation loss", "llama_ref.py eval")
            digits = min(len(re.sub(r"[^0-9]", "", re.sub(r"[eE].*", "", t)).lstrip("0"))
                         for t in (ours_text, ref_text))
            record(f"eval [{label}]: printed significant digits ({ours_text} / {ref_text})",
                   str(digits), ">= 6", digits >= 6)
            record(f"eval [{label}]: {ours_text} vs oracle {ref_text}",
                   f"{rel(ours, ref):.3e}", f"<= {EVAL_TOL:g}", rel(ours, ref) <= EVAL_TOL)

        compare_eval("step-0 weights", seed)

        # 5. train a few steps on fortunes, then eval the trained weights
        train_dump = os.path.join(tmp, "train")
        metrics = os.path.join(tmp, "metrics.jsonl")
        run([remat, "train", "--config", CONFIG, *model_over, "--job.dump_folder", train_dump,
             "--training.steps", str(TRAIN_STEPS), "--checkpoint.enable", "true",
             "--metrics.log_freq", "1", "--metrics.jsonl_path", metrics],
            f"remat train ({TRAIN_STEPS} steps)")
        trained = os.path.join(train_dump, "checkpoint", f"step-{TRAIN_STEPS}.safetensors")
        if not os.path.isfile(trained):
            raise CommandFailed(f"the training run did not write {trained}")
        with open(metrics) as f:
            losses = [json.loads(line)["loss"] for line in f if line.strip()]
        record(f"train: {len(losses)} finite logged losses",
               " ".join(f"{x:.4f}" for x in losses), f"{TRAIN_STEPS} finite",
               len(losses) == TRAIN_STEPS and all(np.isfinite(losses)))
        tensors = read_safetensors(trained)
        params = {n: t for n, t in tensors.items() if not n.startswith("optimizer.")}
        seed_w = read_safetensors(seed)
        record("trained checkpoint: parameter names", f"{len(params)}",
               f"{len(seed_names)} (as the seed)", set(params) == seed_names,
               f"differences: {sorted(set(params) ^ seed_names)[:5]}")
        moments = {f"optimizer.{m}.{n}" for n in seed_names for m in ("exp_avg", "exp_avg_sq")}
        opt_names = set(tensors) - set(params)
        record("trained checkpoint: optimizer moments", f"{len(opt_names)}",
               f"{len(moments)} (2 per param)", opt_names == moments,
               f"missing {sorted(moments - opt_names)[:3]}, unexpected "
               f"{sorted(opt_names - moments)[:3]}")
        moved = sum(1 for n in seed_names & set(params) if not np.array_equal(params[n], seed_w[n]))
        record("trained checkpoint: parameters changed by training", f"{moved}",
               f"{len(seed_names)}", moved == len(seed_names))
        compare_eval(f"step-{TRAIN_STEPS} weights", trained)

    return 0


def summary():
    width = max([len(r[0]) for r in rows] + [20])
    print()
    print(f"{'check':{width}s}  {'measured':>22s}  {'limit':>16s}  result")
    print("-" * (width + 50))
    for check, measured, limit, ok in rows:
        print(f"{check:{width}s}  {measured:>22s}  {limit:>16s}  {'ok' if ok else 'FAIL'}")


if __name__ == "__main__":
    start = time.time()
    try:
        rc = main()
    except CommandFailed as err:
        failures.append(str(err))
        rc = 1
    summary()
    print()
    if failures or rc:
        print(f"FAIL ({len(failures)} problem(s), {time.time() - start:.1f} s):")
        for f in failures:
            print("  - " + f)
        sys.exit(1)
    print(f"PASS: remat matches the PyTorch oracle ({len(rows)} checks, "
          f"{time.time() - start:.1f} s)")
    sys.exit(0)
