#!/usr/bin/python3
"""Plain-PyTorch reference of torchtitan's Llama 3 (spec.md §3): the oracle
that remat's gradients and losses are checked against.

Written from the spec, independent of remat's C++ code. Everything is naive
on purpose (full score matrix, repeated kv heads) so it is easy to trust.

Usage (Debian's python3, which has python3-torch):
  /usr/bin/python3 tests/oracle/llama_ref.py grads --args ARGS.json \
      --weights W.safetensors --tokens T.npy --batch B --seq S --out G.safetensors
      -> writes every parameter's gradient (same names as the weights) and
         prints "loss: X" and "grad_norm: Y" (9 significant digits)
  /usr/bin/python3 tests/oracle/llama_ref.py eval --args ARGS.json \
      --weights W.safetensors --tokens T.npy --seq S
      -> prints "validation loss: X"

ARGS.json: {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size",
"ffn_dim_multiplier" (null or float), "multiple_of", "rope_theta", "norm_eps"};
rope_theta defaults to 500000 and norm_eps to 1e-5 when absent.

safetensors files are read and written by hand (json + numpy): the
`safetensors` package is not installed on the machines that run the tests.
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np

# ---------------------------------------------------------------------------
# safetensors (fp32 only), by hand


def write_safetensors(path, tensors, metadata=None):
    """tensors: ordered mapping name -> array (converted to little-endian
    float32). Data is laid out in the mapping's order. Atomic: path + ".tmp"
    then rename."""
    header = {}
    blobs = []
    offset = 0
    for name, array in tensors.items():
        if name == "__metadata__" or not name:
            raise ValueError(f"invalid tensor name {name!r}")
        a = np.array(array, dtype="<f4", order="C")  # (ascontiguousarray would make 0-d arrays 1-d)
        blob = a.tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    if metadata:
        header["__metadata__"] = {str(k): str(v) for k, v in metadata.items()}
    text = json.dumps(header, separators=(",", ":")).encode("utf-8")
    text += b" " * ((8 - len(text) % 8) % 8)
    parent = os.path.dirname(path)
    if parent:
        os.makedirs(parent, exist_ok=True)
    tmp = path + ".tmp"
    with open(tmp, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for blob in blobs:
            f.write(blob)
    os.replace(tmp, path)


def read_safetensors_header(path):
    """Returns (entries, metadata, data_start); entries: name -> dict."""
    size = os.path.getsize(path)
    with open(path, "rb") as f:
        if size < 8:
            raise ValueError(f"{path}: {size} bytes, shorter than the 8-byte header length")
        (n,) = struct.unpack("<Q", f.read(8))
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} is larger than the file")
        header = json.loads(f.read(n).decode("utf-8"))
    if not isinstance(header, dict):
        raise ValueError(f"{path}: header is not a JSON object")
    metadata = header.pop("__metadata__", {}) or {}
    data_size = size - 8 - n
    for name, e in header.items():
        if e.get("dtype") != "F32":
            raise ValueError(f"{path}: tensor {name!r} has dtype {e.get('dtype')!r}, expected F32")
        begin, end = e["data_offsets"]
        if not (0 <= begin <= end <= data_size):
            raise ValueError(f"{path}: tensor {name!r} data_offsets {e['data_offsets']} outside the file")
        if (end - begin) != 4 * math.prod(e["shape"]):
            raise ValueError(f"{path}: tensor {name!r} data_offsets do not match shape {e['shape']}")
    return header, metadata, 8 + n


def read_safetensors(path, with_metadata=False):
    """Returns {name: float32 array} in header-key order (and the metadata)."""
    entries, metadata, start = read_safetensors_header(path)
    out = {}
    with open(path, "rb") as f:
        for name, e in entries.items():
            begin, end = e["data_offsets"]
            f.seek(start + begin)
            buf = f.read(end - begin)
            out[name] = np.frombuffer(buf, dtype="<f4").astype(np.float32).reshape(e["shape"])
    return (out, metadata) if with_metadata else out


def load_tokens(path, vocab_size=None):
    tokens = np.load(path, allow_pickle=False)
    if tokens.ndim != 1:
        raise ValueError(f"{path}: token file must be one-dimensional, got shape {tokens.shape}")
    if tokens.dtype not in (np.uint16, np.uint32, np.int32, np.int64):
        raise ValueError(f"{path}: token dtype {tokens.dtype} not one of uint16, uint32, int32, int64")
    tokens = tokens.astype(np.int64)
    if vocab_size is not None and tokens.size and (tokens.min() < 0 or tokens.max() >= vocab_size):
        raise ValueError(f"{path}: token ids must lie in [0, {vocab_size}), "
                         f"got [{tokens.min()}, {tokens.max()}]")
    return tokens


# ---------------------------------------------------------------------------
# The model

import torch  # noqa: E402  (after the numpy-only helpers above)
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402


class ModelArgs:
    def __init__(self, dim, n_layers, n_heads, vocab_size, n_kv_heads=None,
                 ffn_dim_multiplier=None, multiple_of=256, rope_theta=500000.0, norm_eps=1e-5):
        self.dim = int(dim)
        self.n_layers = int(n_layers)
        self.n_heads = int(n_heads)
        self.n_kv_heads = int(n_kv_heads) if n_kv_heads is not None else self.n_heads
        self.vocab_size = int(vocab_size)
        self.ffn_dim_multiplier = None if ffn_dim_multiplier is None else float(ffn_dim_multiplier)
        self.multiple_of = int(multiple_of)
        self.rope_theta = float(rope_theta)
        self.norm_eps = float(norm_eps)
        assert self.dim % self.n_heads == 0, "dim must be divisible by n_heads"
        assert self.n_heads % self.n_kv_heads == 0, "n_heads must be divisible by n_kv_heads"
        assert (self.dim // self.n_heads) % 2 == 0, "head_dim must be even for RoPE"

    @property
    def head_dim(self):
        return self.dim // self.n_heads

    @staticmethod
    def from_json(path):
        with open(path) as f:
            d = json.load(f)
        known = {"dim", "n_layers", "n_heads", "n_kv_heads", "vocab_size", "ffn_dim_multiplier",
                 "multiple_of", "rope_theta", "norm_eps"}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"{path}: unknown model args {sorted(unknown)}")
        return ModelArgs(**d)


def ffn_hidden_dim(dim, multiple_of, ffn_dim_multiplier):
    """spec.md §3: start from 4*dim, take int(2h/3), times the multiplier if
    set (then int), round up to a multiple of multiple_of."""
    hidden = 4 * dim
    hidden = int(2 * hidden / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


class RMSNorm(nn.Module):
    def __init__(self, dim, eps):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


def precompute_freqs_cis(head_dim, seq_len, theta, dtype):
    """Complex rotations, shape (seq_len, head_dim/2): position p, pair i is
    rotated by p * theta^(-2i/head_dim). Computed in `dtype` (float32 as
    torchtitan does, or float64 for the finite-difference check)."""
    freqs = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=dtype)[: head_dim // 2] / head_dim))
    t = torch.arange(seq_len, dtype=dtype)
    angles = torch.outer(t, freqs)
    return torch.polar(torch.ones_like(angles), angles)


def apply_rotary_emb(x, freqs_cis):
    """x: (B, S, H, hd). Adjacent pairs (2i, 2i+1) are one complex number
    (torchtitan's layout, not the half-split layout)."""
    xc = torch.view_as_complex(x.reshape(*x.shape[:-1], -1, 2))
    rotated = xc * freqs_cis.view(1, x.shape[1], 1, xc.shape[-1])
    return torch.view_as_real(rotated).flatten(3)


def repeat_kv(x, n_rep):
    """(B, S, KV, hd) -> (B, S, KV*n_rep, hd); query head h reads kv head h // n_rep."""
    if n_rep == 1:
        return x
    b, s, kv, hd = x.shape
    return x[:, :, :, None, :].expand(b, s, kv, n_rep, hd).reshape(b, s, kv * n_rep, hd)


class Attention(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.n_heads = args.n_heads
        self.n_kv_heads = args.n_kv_heads
        self.head_dim = args.head_dim
        self.wq = nn.Linear(args.dim, args.n_heads * self.head_dim, bias=False)
        self.wk = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wv = nn.Linear(args.dim, args.n_kv_heads * self.head_dim, bias=False)
        self.wo = nn.Linear(args.n_heads * self.head_dim, args.dim, bias=False)

    def forward(self, x, freqs_cis):
        b, s, _ = x.shape
        q = self.wq(x).view(b, s, self.n_heads, self.head_dim)
        k = self.wk(x).view(b, s, self.n_kv_heads, self.head_dim)
        v = self.wv(x).view(b, s, self.n_kv_heads, self.head_dim)
        q = apply_rotary_emb(q, freqs_cis)
        k = apply_rotary_emb(k, freqs_cis)
        n_rep = self.n_heads // self.n_kv_heads
        k = repeat_kv(k, n_rep)
        v = repeat_kv(v, n_rep)
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # (B, H, S, hd)
        scores = (q @ k.transpose(-2, -1)) / math.sqrt(self.head_dim)
        future = torch.triu(torch.ones(s, s, dtype=torch.bool), diagonal=1)
        scores = scores.masked_fill(future, float("-inf"))
        probs = torch.softmax(scores, dim=-1)
        out = (probs @ v).transpose(1, 2).reshape(b, s, self.n_heads * self.head_dim)
        return self.wo(out)


class FeedForward(nn.Module):
    def __init__(self, args):
        super().__init__()
        hidden = ffn_hidden_dim(args.dim, args.multiple_of, args.ffn_dim_multiplier)
        self.w1 = nn.Linear(args.dim, hidden, bias=False)
        self.w2 = nn.Linear(hidden, args.dim, bias=False)
        self.w3 = nn.Linear(args.dim, hidden, bias=False)

    def forward(self, x):
        return self.w2(F.silu(self.w1(x)) * self.w3(x))


class TransformerBlock(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.attention = Attention(args)
        self.feed_forward = FeedForward(args)
        self.attention_norm = RMSNorm(args.dim, args.norm_eps)
        self.ffn_norm = RMSNorm(args.dim, args.norm_eps)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        return h + self.feed_forward(self.ffn_norm(h))


class Transformer(nn.Module):
    def __init__(self, args):
        super().__init__()
        self.args = args
        self.tok_embeddings = nn.Embedding(args.vocab_size, args.dim)
        self.layers = nn.ModuleList(TransformerBlock(args) for _ in range(args.n_layers))
        self.norm = RMSNorm(args.dim, args.norm_eps)
        self.output = nn.Linear(args.dim, args.vocab_size, bias=False)

    def forward(self, tokens):
        dtype = self.output.weight.dtype
        freqs_cis = precompute_freqs_cis(self.args.head_dim, tokens.shape[1], self.args.rope_theta, dtype)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, freqs_cis)
        return self.output(self.norm(h))


def build_model(args, weights, dtype=torch.float32):
    """A Transformer holding `weights` ({name: array}); every parameter must
    be present with its exact shape. Extra tensors are reported and ignored."""
    model = Transformer(args).to(dtype)
    params = dict(model.named_parameters())
    missing = [n for n in params if n not in weights]
    if missing:
        raise ValueError(f"weights lack {len(missing)} parameters, e.g. {missing[:3]}")
    for name, p in params.items():
        w = np.asarray(weights[name])
        if tuple(w.shape) != tuple(p.shape):
            raise ValueError(f"weight {name!r} has shape {list(w.shape)}, expected {list(p.shape)}")
        with torch.no_grad():
            p.copy_(torch.from_numpy(np.array(w, dtype=np.float64)).to(dtype))
    extra = sorted(set(weights) - set(params))
    if extra:
        print(f"llama_ref: ignoring {len(extra)} tensors that are not parameters, e.g. {extra[:3]}",
              file=sys.stderr)
    return model


def loss_on_rows(model, rows):
    """rows: int64 (B, S+1). Mean next-token cross-entropy over B*S targets."""
    rows = torch.as_tensor(rows, dtype=torch.int64)
    inputs, targets = rows[:, :-1], rows[:, 1:]
    logits = model(inputs)
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))


def setup_determinism():
    torch.manual_seed(0)
    torch.set_num_threads(2)
    torch.use_deterministic_algorithms(True)


# ---------------------------------------------------------------------------
# CLI


def cmd_grads(a):
    args = ModelArgs.from_json(a.args)
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    model = build_model(args, read_safetensors(a.weights), dtype)
    tokens = load_tokens(a.tokens, args.vocab_size)
    need = a.batch * (a.seq + 1)
    if tokens.size < need:
        raise ValueError(f"{a.tokens}: {tokens.size} tokens, need batch*(seq+1) = {need}")
    rows = tokens[:need].reshape(a.batch, a.seq + 1)
    loss = loss_on_rows(model, rows)
    loss.backward()
    grads = {name: p.grad.detach().to(torch.float64).numpy() for name, p in model.named_parameters()}
    grad_norm = math.sqrt(sum(float((g * g).sum()) for g in grads.values()))
    write_safetensors(a.out, grads)
    print(f"loss: {loss.item():.9g}")
    print(f"grad_norm: {grad_norm:.9g}")


def cmd_eval(a):
    args = ModelArgs.from_json(a.args)
    dtype = torch.float64 if a.dtype == "float64" else torch.float32
    model = build_model(args, read_safetensors(a.weights), dtype)
    tokens = load_tokens(a.tokens, args.vocab_size)
    n_rows = tokens.size // (a.seq + 1)
    if n_rows == 0:
        raise ValueError(f"{a.tokens}: {tokens.size} tokens, fewer than seq+1 = {a.seq + 1}")
    rows = tokens[: n_rows * (a.seq + 1)].reshape(n_rows, a.seq + 1)
    total = 0.0  # sum of per-token losses, accumulated in float64
    with torch.no_grad():
        for start in range(0, n_rows, a.batch):
            chunk = rows[start:start + a.batch]
            total += float(loss_on_rows(model, chunk)) * chunk.shape[0] * a.seq
    print(f"validation loss: {total / (n_rows * a.seq):.9g}")


def main(argv=None):
    setup_determinism()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    g = sub.add_parser("grads", help="loss and all parameter gradients of one batch")
    g.add_argument("--args", required=True)
    g.add_argument("--weights", required=True)
    g.add_argument("--tokens", required=True)
    g.add_argument("--batch", type=int, required=True)
    g.add_argument("--seq", type=int, required=True)
    g.add_argument("--out", required=True)
    g.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    e = sub.add_parser("eval", help="mean next-token cross-entropy over a token file")
    e.add_argument("--args", required=True)
    e.add_argument("--weights", required=True)
    e.add_argument("--tokens", required=True)
    e.add_argument("--seq", type=int, required=True)
    e.add_argument("--batch", type=int, default=8, help="rows per forward pass (memory only)")
    e.add_argument("--dtype", choices=["float32", "float64"], default="float32")
    a = p.parse_args(argv)
    if getattr(a, "batch", 1) < 1 or a.seq < 1:
        p.error("--batch and --seq must be >= 1")
    try:
        (cmd_grads if a.cmd == "grads" else cmd_eval)(a)
    except (ValueError, OSError) as err:
        print(f"llama_ref: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
