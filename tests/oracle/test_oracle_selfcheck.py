#!/usr/bin/python3
"""Self-test of the PyTorch oracle (llama_ref.py, compare.py), before anything
is compared against it.

  /usr/bin/python3 tests/oracle/test_oracle_selfcheck.py [path-to-remat]

The argument (CTest passes the remat binary) is ignored: this checks the
oracle on its own. A tiny GQA model (dim 64, 2 layers, 4 heads, 2 kv heads,
vocab 300, multiple_of 32) with random weights:
- the hand-written safetensors writer and reader round-trip bit for bit;
- RoPE uses torchtitan's adjacent-pair layout, GQA maps query head h to kv
  head h // (n_heads / n_kv_heads), attention is causal (explicit loops);
- the FFN hidden size rule gives the spec's sizes for the real flavors;
- `llama_ref.py grads` (float32) matches float64 central finite differences
  of the model's own loss on chosen weight elements;
- `llama_ref.py eval` drops the remainder and averages over all rows;
- compare.py passes identical files and fails on perturbed or renamed ones.
Fails (never skips) when torch is missing.
"""

import json
import math
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PY = "/usr/bin/python3"

try:
    import numpy as np
    import torch
except ImportError as err:
    print(f"FAIL: cannot import torch/numpy ({err}).\n"
          "The oracle tests need PyTorch for Debian's Python: install the python3-torch "
          "package (sudo apt-get install python3-torch; `make test` does it) and run "
          "them with /usr/bin/python3.", file=sys.stderr)
    sys.exit(1)

sys.path.insert(0, HERE)
import llama_ref as ref  # noqa: E402

ARGS = {"dim": 64, "n_layers": 2, "n_heads": 4, "n_kv_heads": 2, "vocab_size": 300,
        "ffn_dim_multiplier": None, "multiple_of": 32, "rope_theta": 500000.0, "norm_eps": 1e-5}
BATCH, SEQ = 2, 16

failures = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        failures.append(what)


def run(cmd):
    p = subprocess.run(cmd, capture_output=True, text=True)
    return p.returncode, p.stdout, p.stderr


def random_weights(args, rng):
    """Parameter name -> float32 array, with scales that give non-trivial
    activations (so every gradient is far from zero)."""
    shapes = {name: tuple(p.shape) for name, p in ref.Transformer(args).named_parameters()}
    weights = {}
    for name, shape in shapes.items():
        if name == "tok_embeddings.weight":
            w = rng.normal(0.0, 1.0, shape)
        elif name.endswith("norm.weight"):
            w = 1.0 + 0.1 * rng.normal(0.0, 1.0, shape)
        else:  # Linear (out, in)
            w = rng.normal(0.0, 1.0 / math.sqrt(shape[1]), shape)
        weights[name] = w.astype(np.float32)
    return weights


def check_ffn_rule():
    expected = [(256, 256, None, 768), (4096, 1024, 1.3, 14336), (8192, 4096, 1.3, 28672),
                (16384, 4096, 1.2, 53248), (64, 32, None, 192)]
    for dim, mult_of, mult, hidden in expected:
        got = ref.ffn_hidden_dim(dim, mult_of, mult)
        check(got == hidden, f"ffn hidden dim dim={dim} multiple_of={mult_of} mult={mult}: {got} == {hidden}")


def check_safetensors_roundtrip(tmp, rng):
    tensors = {"z.last": rng.normal(size=(3, 5)).astype(np.float32),
               "a.first": rng.normal(size=(7,)).astype(np.float32),
               "scalar": np.array(2.5, dtype=np.float32),
               "empty": np.zeros((0, 4), dtype=np.float32),
               "special": np.array([np.inf, -np.inf, -0.0, 1e-45, 3.4e38], dtype=np.float32)}
    path = os.path.join(tmp, "sub", "dir", "rt.safetensors")
    ref.write_safetensors(path, tensors, metadata={"format": "pt", "step": 3})
    check(not os.path.exists(path + ".tmp"), "writer leaves no .tmp file")
    entries, metadata, start = ref.read_safetensors_header(path)
    check(start % 8 == 0, "header length (plus 8) is a multiple of 8")
    check(metadata == {"format": "pt", "step": "3"}, "metadata round-trips as strings")
    offsets = [entries[n]["data_offsets"] for n in tensors]
    check(all(offsets[i][1] == offsets[i + 1][0] for i in range(len(offsets) - 1)) and offsets[0][0] == 0,
          "data is laid out contiguously in entry order")
    back = ref.read_safetensors(path)
    check(sorted(back) == sorted(tensors), "read back the same names")
    same = all(back[n].dtype == np.float32 and back[n].shape == tensors[n].shape
               and np.array_equal(back[n].view(np.uint32), tensors[n].view(np.uint32)) for n in tensors)
    check(same, "read back identical arrays (bit for bit)")


def check_rope_layout():
    hd, s, theta = 8, 5, 500000.0
    x = torch.randn(1, s, 2, hd, dtype=torch.float64)
    got = ref.apply_rotary_emb(x, ref.precompute_freqs_cis(hd, s, theta, torch.float64)).numpy()
    xn = x.numpy()
    want = np.empty_like(xn)
    for p in range(s):
        for i in range(hd // 2):
            ang = p * theta ** (-2.0 * i / hd)
            c, sn = math.cos(ang), math.sin(ang)
            a, b = xn[0, p, :, 2 * i], xn[0, p, :, 2 * i + 1]
            want[0, p, :, 2 * i] = a * c - b * sn
            want[0, p, :, 2 * i + 1] = a * sn + b * c
    check(np.allclose(got, want, rtol=0, atol=1e-12), "RoPE rotates adjacent pairs (2i, 2i+1) by p*theta^(-2i/hd)")


def check_attention_loops(args):
    torch.manual_seed(1)
    attn = ref.Attention(args).to(torch.float64)
    b, s = 2, 6
    x = torch.randn(b, s, args.dim, dtype=torch.float64)
    fc = ref.precompute_freqs_cis(args.head_dim, s, args.rope_theta, torch.float64)
    with torch.no_grad():
        got = attn(x, fc).numpy()
        q = ref.apply_rotary_emb(attn.wq(x).view(b, s, args.n_heads, args.head_dim), fc).numpy()
        k = ref.apply_rotary_emb(attn.wk(x).view(b, s, args.n_kv_heads, args.head_dim), fc).numpy()
        v = attn.wv(x).view(b, s, args.n_kv_heads, args.head_dim).numpy()
        wo = attn.wo.weight.numpy()
    rep = args.n_heads // args.n_kv_heads
    out = np.zeros((b, s, args.n_heads, args.head_dim))
    for bi in range(b):
        for h in range(args.n_heads):
            kv = h // rep
            for i in range(s):
                sc = np.array([q[bi, i, h] @ k[bi, j, kv] for j in range(i + 1)]) / math.sqrt(args.head_dim)
                pr = np.exp(sc - sc.max())
                pr /= pr.sum()
                out[bi, i, h] = sum(pr[j] * v[bi, j, kv] for j in range(i + 1))
    want = out.reshape(b, s, -1) @ wo.T
    check(np.allclose(got, want, rtol=0, atol=1e-10),
          "causal GQA attention (head h reads kv head h // n_rep) matches explicit loops")


def check_causal(model, tokens):
    rows = torch.as_tensor(tokens[: SEQ].reshape(1, SEQ))
    changed = rows.clone()
    changed[0, -1] = (changed[0, -1] + 1) % ARGS["vocab_size"]
    with torch.no_grad():
        a, b = model(rows), model(changed)
    check(torch.equal(a[:, :-1], b[:, :-1]) and not torch.equal(a[:, -1], b[:, -1]),
          "changing the last token changes only the last position's logits")


def main():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    rng = np.random.default_rng(1234)
    args = ref.ModelArgs(**ARGS)
    check_ffn_rule()
    check_rope_layout()
    check_attention_loops(args)

    with tempfile.TemporaryDirectory(prefix="remat_oracle_") as tmp:
        check_safetensors_roundtrip(tmp, rng)

        weights = random_weights(args, rng)
        w_path = os.path.join(tmp, "w.safetensors")
        ref.write_safetensors(w_path, weights)
        back = ref.read_safetensors(w_path)
        check(list(back) == list(weights) or sorted(back) == sorted(weights), "weights file holds every parameter")
        check(all(np.array_equal(back[n], weights[n]) for n in weights), "weights read back identical")

        args_path = os.path.join(tmp, "args.json")
        with open(args_path, "w") as f:
            json.dump(ARGS, f)
        n_tokens = 5 * (SEQ + 1) + 7  # a remainder that eval must drop
        tokens = rng.integers(0, ARGS["vocab_size"], size=n_tokens).astype(np.uint16)
        t_path = os.path.join(tmp, "tokens.npy")
        np.save(t_path, tokens)

        # --- grads CLI, float32
        g_path = os.path.join(tmp, "g.safetensors")
        rc, out, err = run([PY, os.path.join(HERE, "llama_ref.py"), "grads", "--args", args_path,
                            "--weights", w_path, "--tokens", t_path, "--batch", str(BATCH),
                            "--seq", str(SEQ), "--out", g_path])
        check(rc == 0, f"llama_ref.py grads exits 0 (stderr: {err.strip()[-500:]})")
        if rc != 0:
            return
        loss_line = [ln for ln in out.splitlines() if ln.startswith("loss: ")]
        check(len(loss_line) == 1, f"grads prints one 'loss:' line: {out!r}")
        loss32 = float(loss_line[0].split()[1])
        grads = ref.read_safetensors(g_path)
        check(sorted(grads) == sorted(weights) and all(grads[n].shape == weights[n].shape for n in weights),
              "gradient file has the weights' names and shapes")
        check(all(np.isfinite(g).all() for g in grads.values()), "gradients are finite")
        check(all(np.abs(g).max() > 0 for g in grads.values()), "every parameter gets a non-zero gradient")

        # --- float64 model: loss and finite differences
        torch.set_grad_enabled(True)
        model64 = ref.build_model(args, weights, torch.float64)
        rows = tokens.astype(np.int64)[: BATCH * (SEQ + 1)].reshape(BATCH, SEQ + 1)
        loss64 = ref.loss_on_rows(model64, rows)
        check(abs(loss64.item() - loss32) <= 1e-5 * abs(loss64.item()),
              f"float32 loss {loss32:.9g} matches float64 loss {loss64.item():.9g}")
        check(abs(loss64.item() - math.log(ARGS["vocab_size"])) < 5.0, "loss is in a plausible range")
        loss64.backward()
        params = dict(model64.named_parameters())
        check_causal(model64, tokens.astype(np.int64))

        probes = ["layers.1.attention.wq.weight", "layers.1.attention.wk.weight",
                  "layers.0.attention.wv.weight", "layers.0.attention.wo.weight",
                  "layers.0.attention_norm.weight", "layers.1.feed_forward.w1.weight",
                  "layers.0.feed_forward.w2.weight", "layers.1.feed_forward.w3.weight",
                  "layers.1.ffn_norm.weight", "norm.weight", "tok_embeddings.weight", "output.weight"]
        eps = 1e-6
        for name in probes:
            g32 = grads[name]
            idx = np.unravel_index(np.argmax(np.abs(g32)), g32.shape)
            p = params[name]
            with torch.no_grad():
                orig = p[idx].item()
                p[idx] = orig + eps
                up = ref.loss_on_rows(model64, rows).item()
                p[idx] = orig - eps
                down = ref.loss_on_rows(model64, rows).item()
                p[idx] = orig
            fd = (up - down) / (2 * eps)
            g64 = p.grad[idx].item()
            check(abs(g64 - fd) <= 1e-6 * abs(fd) + 1e-9,
                  f"{name}{list(idx)}: float64 autograd {g64:.9e} vs finite difference {fd:.9e}")
            check(abs(float(g32[idx]) - fd) <= 1e-3 * abs(fd) + 1e-7,
                  f"{name}{list(idx)}: float32 CLI gradient {float(g32[idx]):.9e} vs finite difference {fd:.9e}")

        # --- eval CLI
        rc, out, err = run([PY, os.path.join(HERE, "llama_ref.py"), "eval", "--args", args_path,
                            "--weights", w_path, "--tokens", t_path, "--seq", str(SEQ), "--batch", "2"])
        check(rc == 0, f"llama_ref.py eval exits 0 (stderr: {err.strip()[-500:]})")
        if rc == 0:
            line = [ln for ln in out.splitlines() if ln.startswith("validation loss: ")]
            check(len(line) == 1, f"eval prints 'validation loss:': {out!r}")
            n_rows = n_tokens // (SEQ + 1)
            all_rows = tokens.astype(np.int64)[: n_rows * (SEQ + 1)].reshape(n_rows, SEQ + 1)
            with torch.no_grad():
                want = ref.loss_on_rows(model64, all_rows).item()
            got = float(line[0].split()[2])
            check(abs(got - want) <= 1e-5 * want, f"eval loss {got:.9g} == mean over {n_rows} rows {want:.9g}")

        # --- error path: too few tokens
        rc, out, err = run([PY, os.path.join(HERE, "llama_ref.py"), "grads", "--args", args_path,
                            "--weights", w_path, "--tokens", t_path, "--batch", "100",
                            "--seq", str(SEQ), "--out", os.path.join(tmp, "x.safetensors")])
        check(rc == 2 and "need batch*(seq+1)" in err, f"too few tokens is an error (rc {rc}, {err.strip()!r})")

        # --- compare.py
        cmp = [PY, os.path.join(HERE, "compare.py")]
        rc, out, _ = run(cmp + [g_path, g_path, "--tol", "1e-4"])
        check(rc == 0 and "PASS" in out, "compare.py passes a file against itself")
        perturbed = dict(grads)
        name = "layers.0.attention.wq.weight"
        bumped = grads[name].copy()
        bumped.flat[0] += 1e-3 * np.abs(bumped).max()
        perturbed[name] = bumped
        p_path = os.path.join(tmp, "p.safetensors")
        ref.write_safetensors(p_path, perturbed)
        rc, out, _ = run(cmp + [p_path, g_path, "--tol", "1e-4"])
        check(rc == 1 and name in out, "compare.py fails a 1e-3 relative perturbation at tol 1e-4")
        rc, out, _ = run(cmp + [p_path, g_path, "--tol", "1e-2"])
        check(rc == 0, "compare.py passes it at tol 1e-2")
        renamed = dict(grads)
        renamed["norm.weightx"] = renamed.pop("norm.weight")
        r_path = os.path.join(tmp, "r.safetensors")
        ref.write_safetensors(r_path, renamed)
        rc, out, _ = run(cmp + [r_path, g_path])
        check(rc == 1 and "names differ" in out, "compare.py fails when tensor names differ")
        nan = dict(grads)
        nan[name] = grads[name].copy()
        nan[name].flat[3] = np.nan
        n_path = os.path.join(tmp, "n.safetensors")
        ref.write_safetensors(n_path, nan)
        rc, out, _ = run(cmp + [n_path, g_path, "--tol", "1"])
        check(rc == 1, "compare.py fails on NaN")


if __name__ == "__main__":
    main()
    if failures:
        print(f"\n{len(failures)} check(s) FAILED:", file=sys.stderr)
        for f in failures:
            print("  " + f, file=sys.stderr)
        sys.exit(1)
    print("\nall oracle self-checks passed")
