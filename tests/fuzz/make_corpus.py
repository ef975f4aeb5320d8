"""Writes the seed corpus of each fuzz target into tests/fuzz/corpus/<target>/.

The seeds are small valid inputs (and a few near misses) so libFuzzer starts
from the formats' structure instead of random bytes. Re-run after changing a
format; the output is deterministic.

Usage: /usr/bin/python3 tests/fuzz/make_corpus.py (Debian's python3, which has numpy)
"""
import json
import struct
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CORPUS = HERE / "corpus"


def crc32c(data):
    crc = 0xFFFFFFFF
    for b in data:
        crc ^= b
        for _ in range(8):
            crc = (crc >> 1) ^ (0x82F63B78 if crc & 1 else 0)
    return crc ^ 0xFFFFFFFF


def put(target, name, data):
    folder = CORPUS / target
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_bytes(data.encode() if isinstance(data, str) else data)


def config_seeds():
    for name in ("llama3_debug.toml", "llama4_debug.toml"):
        put("config", name, (REPO / "configs" / name).read_text())
    put("config", "sizes.toml", """
[model]
name = "llama4"
dim = 64
n_layers = 2
n_heads = 4
n_kv_heads = 2
vocab_size = 300
ffn_dim_multiplier = 1.3
multiple_of = 32
num_experts = 4
top_k = 2
interleave_moe_layer_step = 1
score_func = "sigmoid"
[training]
local_batch_size = 2
seq_len = 16
threads = 1
mixed_precision_param = "bfloat16"
[memory]
limit = "1.5GiB"
[activation_checkpoint]
mode = "memory_budget"
memory_budget = "512MiB"
""")
    put("config", "auto.toml", """
[activation_checkpoint]
mode = "auto"
selective_op_ac_mm_flops_threshold = 1e11
per_op_sac_force_recompute_mm_by_fqns = ["layers.*.attention.wk", "output"]
log_mm_flops = true
[memory]
limit = "80GB"
[checkpoint]
enable = true
interval = 5
load = "x.safetensors"
[validation]
enabled = true
dataset = "v.npy"
steps = -1
[parallelism]
data_parallel_shard_degree = 8
""")
    put("config", "syntax.toml", "[model\nname = 'llama3'\n[training]\nseq_len = 1_024\n"
        "x = 0x7fff\ny = 1979-05-27T07:32:00Z\nz = {a = [1, [2, 3]]}\n")


def cli_seeds():
    lines = [
        ["train", "--config", "configs/llama3_debug.toml", "--training.steps", "2"],
        ["train", "--config=c.toml", "--model.name=llama4", "--model.dim", "64",
         "--training.seq_len=32", "--checkpoint.enable", "--memory.limit", "150MiB"],
        ["eval", "--config", "c.toml", "--checkpoint.load", "a.safetensors",
         "--validation.dataset", "v.txt"],
        ["plan", "--json", "--config", "c.toml", "--mm", "--torchtitan", "--pareto", "f.svg",
         "--activation_checkpoint.mode", "memory_budget",
         "--activation_checkpoint.memory_budget", "0.5"],
        ["grads", "--config", "c.toml", "--tokens", "t.npy", "--out", "g.safetensors",
         "--activation_checkpoint.per_op_sac_force_recompute_mm_by_fqns", "wq,output"],
        ["train", "--config", "c.toml", "--model.vocab_size", "4611686018427387904"],
        ["train", "--config", "c.toml", "--model.ffn_dim_multiplier", "1e-9",
         "--training.threads", "100000"],
        ["--help"],
    ]
    for i, argv in enumerate(lines):
        put("cli", f"argv{i}", "\0".join(argv))


def npy_bytes(array, version=None):
    import io
    buf = io.BytesIO()
    if version is None:
        np.save(buf, array)
    else:
        np.lib.format.write_array(buf, array, version=version)
    return buf.getvalue()


def npy_seeds():
    tokens = np.arange(40) % 258
    for dtype in ("<u2", "<u4", "<i4", "<i8"):
        put("npy", f"tokens_{dtype[1:]}.npy", npy_bytes(tokens.astype(dtype)))
    put("npy", "v2.npy", npy_bytes(tokens.astype("<u2"), version=(2, 0)))
    put("npy", "fortran.npy", npy_bytes(np.asfortranarray(tokens.astype("<i4"))))
    put("npy", "2d.npy", npy_bytes(tokens.astype("<i4").reshape(4, 10)))
    put("npy", "negative.npy", npy_bytes(np.array([1, -2, 3], dtype="<i8")))
    put("npy", "float.npy", npy_bytes(np.zeros(3, dtype="<f4")))


def safetensors_bytes(tensors, metadata=None, checksums=True, dtype="F32"):
    """dtype F32 packs the values as floats; BF16 and F16 take them as the
    stored 16-bit patterns."""
    header, body, meta = {}, b"", dict(metadata or {})
    for name, (shape, values) in tensors.items():
        raw = struct.pack(("<%df" if dtype == "F32" else "<%dH") % len(values), *values)
        header[name] = {"dtype": dtype, "shape": shape,
                        "data_offsets": [len(body), len(body) + len(raw)]}
        if checksums:
            meta["crc32c." + name] = "%08x" % crc32c(raw)
        body += raw
    if meta:
        header["__metadata__"] = meta
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + body


def safetensors_seeds():
    tensors = {"tok_embeddings.weight": ([3, 2], [0.5, -1.0, 2.0, 0.0, 1e-3, 7.0]),
               "norm.weight": ([2], [1.0, 1.0]),
               "layers.0.moe.expert_bias": ([0], []),
               "scalar": ([], [3.0])}
    put("safetensors", "checkpoint.safetensors",
        safetensors_bytes(tensors, {"step": "12", "format": "remat"}))
    put("safetensors", "no_checksums.safetensors", safetensors_bytes(tensors, checksums=False))
    put("safetensors", "empty.safetensors", safetensors_bytes({}))
    bad = bytearray(safetensors_bytes(tensors, {"step": "1"}))
    bad[-1] ^= 0x40
    put("safetensors", "flipped.safetensors", bytes(bad))
    # Half precision: normal values, subnormals, signed zero, an infinity, a NaN.
    halves = {"w": ([2, 3], [0x3c00, 0x0001, 0x8000, 0x7bff, 0x7c00, 0x7e01]),
              "b": ([2], [0x3f80, 0x0001])}
    put("safetensors", "f16.safetensors", safetensors_bytes(halves, dtype="F16"))
    put("safetensors", "bf16.safetensors", safetensors_bytes(halves, {"step": "3"}, dtype="BF16"))


def dataset_seeds():
    # The first byte picks vocab_size and seq_len (fuzz_dataset.h).
    put("jsonl", "docs.jsonl", "\x05" + "\n".join(json.dumps(r) for r in [
        {"text": "Hello, world."}, {"text": "caf\u00e9 \u2603", "id": 3}, {"text": ""},
    ]) + "\n\r\n   \n")
    put("jsonl", "escapes.jsonl", '\x0f{"text": "a\\u0000b\\ud83d\\ude00\\n"}\n'
        '{"text": ["not", "a", "string"]}\n')
    put("jsonl", "nested.jsonl", '\x01{"meta": {"a": [1, 2.5e300, null, true]}, "text": "x"}\n')
    put("txt", "quote.txt", "\x07" + "The quick brown fox jumps over the lazy dog.\n" * 3)
    put("txt", "utf8.txt", "\x00caf\u00e9 \u2603 \xff\xfe")
    put("txt", "tiny.txt", "\x0fab")


def tokenizer_json_seeds():
    printable = (list(range(33, 127)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100)))
    chars, extra = {}, 0
    for b in range(256):
        chars[b] = chr(b) if b in printable else chr(256 + extra)
        extra += b not in printable
    vocab = {chars[b]: b for b in range(256)}
    merges = [("h", "e"), ("l", "l"), ("he", "ll"), ("\u0120", "w"), ("o", "r"), ("1", "2")]
    for a, b in merges:
        vocab[a + b] = len(vocab)
    split = {"type": "Split", "behavior": "Isolated", "invert": False, "pattern": {"Regex":
             r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
             r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"}}
    llama3 = {
        "added_tokens": [{"id": len(vocab), "content": "<|begin_of_text|>", "special": True},
                         {"id": len(vocab) + 1, "content": "<|end_of_text|>", "special": True}],
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            split, {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]},
        "model": {"type": "BPE", "ignore_merges": True, "vocab": vocab,
                  "merges": [a + " " + b for a, b in merges]}}
    put("tokenizer_json", "llama3.json", json.dumps(llama3))
    gpt2 = dict(llama3, pre_tokenizer={"type": "ByteLevel", "add_prefix_space": False})
    gpt2["model"] = dict(llama3["model"], merges=[[a, b] for a, b in merges], ignore_merges=False)
    put("tokenizer_json", "gpt2.json", json.dumps(gpt2, ensure_ascii=False))
    literal = dict(llama3, pre_tokenizer=dict(split, pattern={"String": " "}), added_tokens=[])
    put("tokenizer_json", "literal.json", json.dumps(literal))


def shard_index_seeds():
    """Indexes as remat writes them (io/shard_index.h): 2 ranks, two units."""
    def param(fqn, shape, offset, pid):
        return {"fqn": fqn, "shape": shape, "offset": offset, "id": pid}
    index = {"format": "remat-sharded-checkpoint", "version": 1, "step": 4, "ranks": 2,
             "with_optimizer": True, "run": {"training.steps": "8", "data.ranks": "2"},
             "units": [{"block": -1, "numel": 136, "chunk": 68,
                        "params": [param("tok_embeddings.weight", [16, 8], 0, 0),
                                   param("norm.weight", [8], 128, 2)]},
                       {"block": 0, "numel": 64, "chunk": 32,
                        "params": [param("layers.0.attention.wq.weight", [8, 8], 0, 1)]}],
             "files": [{"name": "shard-0-of-2.safetensors", "bytes": 1200},
                       {"name": "shard-1-of-2.safetensors", "bytes": 1192}]}
    put("shard_index", "index.json", json.dumps(index))
    one = dict(index, ranks=1, with_optimizer=False, units=[dict(index["units"][1], chunk=64,
               params=[param("layers.0.attention.wq.weight", [8, 8], 0, 0)])],
               files=index["files"][:1])
    put("shard_index", "one_rank.json", json.dumps(one))


def regression_seeds():
    """Inputs the fuzzers once failed on (tests/fuzz/README.md), kept so every
    run replays them."""
    put("config", "regress-header-key.toml", "[=")
    put("config", "regress-header-array.toml", "[[[1]]]")
    put("config", "regress-unicode-after-value.toml",
        b"#nlde\nio = 1111111\xcb\x9a\xce\xa215.8")
    put("config", "regress-unicode-line-ending-backslash.toml", b's = """\\\n\xc2\xa7"""\n')
    put("config", "regress-array-brace.toml", "\nt=[[[[[[[[[[[[[[}[[[[[[[[[[[[[[[[{[%[[[[[[[\".\b")
    put("config", "regress-datetime-nul.toml",
        (HERE / "corpus" / "config" / "regress-datetime-nul.toml").read_bytes())
    put("config", "regress-bare-value-brace.toml", b"t=[[[[-\x00{'%{[\xef\xb9\xbf")
    put("cli", "regress-short-override", "\0".join(["train", "--config", "c.toml", "x=1"]))
    put("cli", "regress-huge-size", "\0".join(["train", "--config", "c.toml", "--memory.limit",
                                               "1" * 100 + "MiB"]))
    put("jsonl", "regress-number-overflow.jsonl", '\x01{"a": [1, 2.1e3600], "text": "x"}\n')


if __name__ == "__main__":
    config_seeds()
    cli_seeds()
    npy_seeds()
    safetensors_seeds()
    dataset_seeds()
    tokenizer_json_seeds()
    shard_index_seeds()
    regression_seeds()
    for target in sorted(p.name for p in CORPUS.iterdir()):
        files = list((CORPUS / target).iterdir())
        print(f"{target}: {len(files)} seeds, {sum(f.stat().st_size for f in files)} bytes")
