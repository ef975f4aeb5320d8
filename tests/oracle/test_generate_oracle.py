#!/usr/bin/python3
"""`remat generate` (KV cache, greedy) against the PyTorch oracle, token for
token (issue 13, point 4).

  /usr/bin/python3 tests/oracle/test_generate_oracle.py path/to/remat

For a small Llama 3 (GQA: 4 heads over 2 kv heads) and a small Llama 4 (4
experts, top 2, MoE every 2nd block), each trained for 30 steps on the
fortunes and saved by `remat train --checkpoint.enable true`:
`remat generate --temperature 0 --ids` continues three prompts, and the
oracle (llama_ref.py / llama4_ref.py: no KV cache, the whole growing
sequence re-run for every token) picks the argmax of its last logits at each
step, stopping at EOS as remat does. The two token lists must be equal.
Exit 0 only if they are, for every prompt and both models.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True
sys.path.insert(0, HERE)

try:
    import numpy as np
    import torch
except ImportError as err:
    print(f"FAIL: cannot import torch/numpy ({err}); install python3-torch", file=sys.stderr)
    sys.exit(1)
import llama4_ref  # noqa: E402
from llama_ref import ModelArgs, build_model, read_safetensors, setup_determinism  # noqa: E402

DIM, LAYERS, HEADS, KV, VOCAB, MULT = 64, 4, 4, 2, 300, 32
EOS = 257
NEW_TOKENS = 40
PROMPTS = ["The ", "Q: What is the meaning of life?\nA:", "Never"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True, cwd=REPO, timeout=900)
    if p.returncode != 0:
        raise RuntimeError(f"exit {p.returncode}: {' '.join(cmd)}\n{p.stdout}\n{p.stderr}")
    return p.stdout


def flags(name):
    f = ["--model.dim", str(DIM), "--model.n_layers", str(LAYERS), "--model.n_heads", str(HEADS),
         "--model.n_kv_heads", str(KV), "--model.vocab_size", str(VOCAB), "--model.multiple_of",
         str(MULT), "--training.seq_len", "64", "--training.local_batch_size", "4",
         "--training.threads", "2", "--metrics.peak_flops", "1e11", "--metrics.log_freq", "10"]
    if name == "llama4":
        f += ["--model.num_experts", "4", "--model.top_k", "2",
              "--model.interleave_moe_layer_step", "2"]
    return f


def oracle_model(name, weights_path):
    args = {"dim": DIM, "n_layers": LAYERS, "n_heads": HEADS, "n_kv_heads": KV,
            "vocab_size": VOCAB, "ffn_dim_multiplier": None, "multiple_of": MULT}
    weights = read_safetensors(weights_path)
    if name == "llama3":
        return build_model(ModelArgs(**args), weights)
    model = llama4_ref.Transformer(llama4_ref.MoeArgs(
        {**args, "num_experts": 4, "top_k": 2, "interleave_moe_layer_step": 2,
         "score_func": "softmax"}))
    state = dict(model.named_parameters())
    state.update(dict(model.named_buffers()))
    for n, p in state.items():
        with torch.no_grad():
            p.copy_(torch.from_numpy(np.array(weights[n], dtype=np.float32)))
    return model


def oracle_greedy(model, prompt):
    """Greedy decoding without a cache: the whole sequence again for every token."""
    seq, out, margins = list(prompt), [], []
    with torch.no_grad():
        for _ in range(NEW_TOKENS):
            logits = model(torch.tensor([seq], dtype=torch.int64))[0, -1]
            top = torch.topk(logits, 2)
            margins.append(float(top.values[0] - top.values[1]))
            token = int(torch.argmax(logits))
            out.append(token)
            if token == EOS:
                break
            seq.append(token)
    return out, margins


def one_model(remat, tmp, name):
    config = os.path.join(REPO, "configs", f"{name}_debug.toml")
    d = os.path.join(tmp, name)
    run([remat, "train", "--config", config, *flags(name), "--job.dump_folder", d,
         "--training.steps", "30", "--checkpoint.enable", "true"])
    weights = os.path.join(d, "checkpoint", "step-30.safetensors")
    model = oracle_model(name, weights)
    for text in PROMPTS:
        out = run([remat, "generate", "--config", config, *flags(name), "--checkpoint.load",
                   weights, "--prompt", text, "--temperature", "0", "--max_new_tokens",
                   str(NEW_TOKENS), "--ids"])
        prompt = [int(x) for x in re.search(r"^prompt:(.*)$", out, re.M).group(1).split()]
        ours = [int(x) for x in re.search(r"^generated:(.*)$", out, re.M).group(1).split()]
        check(prompt == [256] + list(text.encode()), f"{name}: prompt ids are BOS + bytes")
        theirs, margins = oracle_greedy(model, prompt)
        first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
        detail = "" if first is None else \
            f"; first difference at token {first}, oracle's top-2 margin {margins[first]:.2e}"
        check(ours == theirs and len(ours) > 0,
              f"{name} {text!r}: {len(ours)} greedy tokens equal the oracle's argmax "
              f"(smallest margin {min(margins):.2e}){detail}")


def main():
    if len(sys.argv) != 2:
        print(__doc__)
        return 2
    setup_determinism()
    remat = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory() as tmp:
        for name in ("llama3", "llama4"):
            one_model(remat, tmp, name)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
