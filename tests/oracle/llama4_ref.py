#!/usr/bin/python3
"""Plain-PyTorch reference of torchtitan's Llama 4 (spec.md §3): Llama 3
attention blocks whose FFN is, in every interleave_moe_layer_step-th block, a
mixture of experts. Written from the spec, independent of remat's C++ code;
the attention, norms and dense FFN are llama_ref.py's.

MoE FFN of a token x (dim D):
  logits = x @ router.gate.weight^T           (E experts)
  scores = softmax(logits) or sigmoid(logits), fp32
  top-k experts by scores + expert_bias (ties: lower expert id)
  routed = sum over picked e of  w2[e]^T-style SwiGLU(x * score_e)
           with expert e: (silu(h @ w1[e]) * (h @ w3[e])) @ w2[e],
           w1, w3: (E, D, H), w2: (E, H, D)
  shared = the same SwiGLU with shared_expert.w1/w3 (1, D, H), w2 (1, H, D)
  out = routed + shared
Buffers: moe.expert_bias (E) and moe.tokens_per_expert (E), no gradient (the
`grads` command writes zeros for them, as remat does).

Usage:
  llama4_ref.py grads --args A.json --weights W.safetensors --tokens T.npy \
      --batch B --seq S --out G.safetensors     -> "loss: X"
  llama4_ref.py balance --args A.json --weights W.safetensors --tokens T.npy \
      --batch B --seq S --out B.safetensors
      -> the expert_bias of every MoE layer after one step's load-balancing
         update on that batch: delta = 1e-3 * sign(mean(counts) - counts),
         centred to zero mean, added to the bias.
"""

import argparse
import json
import sys
import os

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import numpy as np  # noqa: E402
import torch  # noqa: E402
import torch.nn as nn  # noqa: E402
import torch.nn.functional as F  # noqa: E402

from llama_ref import (Attention, FeedForward, ModelArgs, RMSNorm, load_tokens,  # noqa: E402
                       precompute_freqs_cis, read_safetensors, setup_determinism,
                       write_safetensors)

LOAD_BALANCE_COEFF = 1e-3


class MoeArgs:
    def __init__(self, d):
        d = dict(d)
        self.num_experts = int(d.pop("num_experts"))
        self.top_k = int(d.pop("top_k"))
        self.interleave = int(d.pop("interleave_moe_layer_step"))
        self.score_func = d.pop("score_func")
        self.moe_hidden_dim_expected = d.pop("moe_hidden_dim", None)
        self.base = ModelArgs(**d)
        b = self.base
        # torchtitan: int(8D/3), times the multiplier (int), / (top_k + 1)
        # for the shared expert (int), rounded up to multiple_of.
        hidden = int(2 * (4 * b.dim) / 3)
        if b.ffn_dim_multiplier is not None:
            hidden = int(b.ffn_dim_multiplier * hidden)
        hidden = int(hidden / (self.top_k + 1))
        self.moe_hidden = b.multiple_of * ((hidden + b.multiple_of - 1) // b.multiple_of)
        if self.moe_hidden_dim_expected is not None:
            assert self.moe_hidden == self.moe_hidden_dim_expected, \
                f"moe hidden {self.moe_hidden} vs remat's {self.moe_hidden_dim_expected}"


class Router(nn.Module):
    def __init__(self, dim, experts):
        super().__init__()
        self.gate = nn.Linear(dim, experts, bias=False)


class Experts(nn.Module):
    def __init__(self, experts, dim, hidden):
        super().__init__()
        self.w1 = nn.Parameter(torch.empty(experts, dim, hidden))
        self.w2 = nn.Parameter(torch.empty(experts, hidden, dim))
        self.w3 = nn.Parameter(torch.empty(experts, dim, hidden))

    def expert(self, e, h):
        return (F.silu(h @ self.w1[e]) * (h @ self.w3[e])) @ self.w2[e]


class MoE(nn.Module):
    def __init__(self, m):
        super().__init__()
        d = m.base.dim
        self.m = m
        self.router = Router(d, m.num_experts)
        self.experts = Experts(m.num_experts, d, m.moe_hidden)
        self.shared_expert = Experts(1, d, m.moe_hidden)
        self.register_buffer("expert_bias", torch.zeros(m.num_experts))
        self.register_buffer("tokens_per_expert", torch.zeros(m.num_experts))

    def forward(self, x):
        b, s, d = x.shape
        x = x.reshape(-1, d)
        logits = self.router.gate(x).float()
        scores = torch.sigmoid(logits) if self.m.score_func == "sigmoid" else torch.softmax(logits, dim=-1)
        # top-k by biased score, ties to the lower id: sort stably on (-biased).
        biased = (scores + self.expert_bias).detach()
        order = torch.sort(-biased, dim=-1, stable=True).indices[:, : self.m.top_k]
        picked = scores.gather(1, order)
        with torch.no_grad():
            self.tokens_per_expert += torch.bincount(order.reshape(-1), minlength=self.m.num_experts).float()
        out = torch.zeros_like(x)
        for e in range(self.m.num_experts):
            tok, slot = torch.nonzero(order == e, as_tuple=True)
            if tok.numel() == 0:
                continue
            h = x[tok] * picked[tok, slot].unsqueeze(-1)
            out = out.index_add(0, tok, self.experts.expert(e, h))
        out = out + self.shared_expert.expert(0, x)
        return out.reshape(b, s, d)


class Block(nn.Module):
    def __init__(self, m, layer):
        super().__init__()
        a = m.base
        self.attention = Attention(a)
        self.attention_norm = RMSNorm(a.dim, a.norm_eps)
        self.ffn_norm = RMSNorm(a.dim, a.norm_eps)
        self.moe_enabled = (layer + 1) % m.interleave == 0
        if self.moe_enabled:
            self.moe = MoE(m)
        else:
            self.feed_forward = FeedForward(a)

    def forward(self, x, freqs_cis):
        h = x + self.attention(self.attention_norm(x), freqs_cis)
        n = self.ffn_norm(h)
        return h + (self.moe(n) if self.moe_enabled else self.feed_forward(n))


class Transformer(nn.Module):
    def __init__(self, m):
        super().__init__()
        a = m.base
        self.a = a
        self.tok_embeddings = nn.Embedding(a.vocab_size, a.dim)
        self.layers = nn.ModuleList(Block(m, i) for i in range(a.n_layers))
        self.norm = RMSNorm(a.dim, a.norm_eps)
        self.output = nn.Linear(a.dim, a.vocab_size, bias=False)

    def forward(self, tokens):
        freqs = precompute_freqs_cis(self.a.head_dim, tokens.shape[1], self.a.rope_theta, torch.float32)
        h = self.tok_embeddings(tokens)
        for layer in self.layers:
            h = layer(h, freqs)
        return self.output(self.norm(h))


def build(a):
    with open(a.args) as f:
        m = MoeArgs(json.load(f))
    model = Transformer(m)
    weights = read_safetensors(a.weights)
    state = dict(model.named_parameters())
    state.update(dict(model.named_buffers()))
    missing = [n for n in state if n not in weights]
    if missing:
        raise ValueError(f"weights lack {len(missing)} tensors, e.g. {missing[:3]}")
    for name, p in state.items():
        w = weights[name]
        if tuple(w.shape) != tuple(p.shape):
            raise ValueError(f"{name}: shape {list(w.shape)}, expected {list(p.shape)}")
        with torch.no_grad():
            p.copy_(torch.from_numpy(np.array(w, dtype=np.float32)))
    tokens = load_tokens(a.tokens, m.base.vocab_size)
    if a.cmd == "balance":
        # remat's training batches: overlapping windows, row r = tokens[r*S : r*S + S + 1].
        rows = np.stack([tokens[r * a.seq: r * a.seq + a.seq + 1] for r in range(a.batch)])
    else:
        need = a.batch * (a.seq + 1)
        rows = tokens[:need].reshape(a.batch, a.seq + 1)
    return model, torch.as_tensor(rows, dtype=torch.int64)


def loss_of(model, rows):
    logits = model(rows[:, :-1])
    return F.cross_entropy(logits.reshape(-1, logits.shape[-1]), rows[:, 1:].reshape(-1))


def cmd_grads(a):
    model, rows = build(a)
    loss = loss_of(model, rows)
    loss.backward()
    out = {n: p.grad.detach().numpy() for n, p in model.named_parameters()}
    for n, buf in model.named_buffers():
        out[n] = np.zeros(buf.shape, dtype=np.float32)
    write_safetensors(a.out, out)
    print(f"loss: {loss.item():.9g}")


def cmd_balance(a):
    model, rows = build(a)
    with torch.no_grad():
        loss_of(model, rows)
    out = {}
    for i, layer in enumerate(model.layers):
        if not layer.moe_enabled:
            continue
        counts = layer.moe.tokens_per_expert
        delta = LOAD_BALANCE_COEFF * torch.sign(counts.mean() - counts)
        delta = delta - delta.mean()
        out[f"layers.{i}.moe.expert_bias"] = (layer.moe.expert_bias + delta).numpy()
        out[f"layers.{i}.moe.tokens_per_expert_before_reset"] = counts.numpy().copy()
    write_safetensors(a.out, out)


def main():
    setup_determinism()
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = p.add_subparsers(dest="cmd", required=True)
    for name in ("grads", "balance"):
        g = sub.add_parser(name)
        for flag in ("--args", "--weights", "--tokens", "--out"):
            g.add_argument(flag, required=True)
        g.add_argument("--batch", type=int, required=True)
        g.add_argument("--seq", type=int, required=True)
    a = p.parse_args()
    try:
        (cmd_grads if a.cmd == "grads" else cmd_balance)(a)
    except (ValueError, OSError) as err:
        print(f"llama4_ref: error: {err}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
