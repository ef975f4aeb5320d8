"""`remat generate` and training samples (issue 13, point 4), end to end.

- stdout is the prompt and its continuation, nothing else: a crafted model
  that always predicts one letter continues "Hi" with max_new_tokens of it;
  one that always predicts EOS stops after it (it prints nothing of it);
  the text streams (the first bytes come while the rest is generated);
- a seed gives the same text every time, another seed another text;
  top_k = 1 is greedy (temperature 0), token for token;
- a SentencePiece tokenizer (model.tokenizer_path) reads the prompt and
  writes the text;
- bad input (no or a missing checkpoint, no or an empty prompt, a bad
  temperature, top_p, top_k or max_new_tokens, a KV cache larger than the
  memory) exits 2 with a message
  naming the flag and what was expected, and prints nothing on stdout;
- metrics.sample_freq prints a sample every N steps and changes nothing in
  training (same JSONL records without it); a negative one exits 2.

The greedy tokens against the PyTorch oracle are tests/oracle/test_generate_oracle.py;
the KV cache against the whole sequence, tests/generate/decoder_test.cc.

Usage: test_generate.py <path-to-remat>
"""
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "oracle"))
from llama_ref import read_safetensors, write_safetensors  # noqa: E402

REMAT = sys.argv[1]
MODEL = ["--config", "configs/llama3_debug.toml", "--model.dim", "64", "--model.n_layers", "2",
         "--model.n_heads", "4", "--model.n_kv_heads", "2", "--model.vocab_size", "300",
         "--model.multiple_of", "32", "--training.seq_len", "32",
         "--training.local_batch_size", "2", "--training.threads", "2",
         "--metrics.peak_flops", "1e11"]
EOS = 257
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args, tmp, model=MODEL):
    return subprocess.run([REMAT, *args, *model, "--job.dump_folder", str(tmp)],
                          capture_output=True, text=True, errors="replace", timeout=600)


def generate(tmp, weights, *flags, model=MODEL):
    return run(["generate", "--checkpoint.load", str(weights), *flags], tmp, model)


def generated_ids(proc):
    m = re.search(r"^generated:((?: \d+)*)$", proc.stdout, re.M)
    return [int(x) for x in m.group(1).split()] if m else None


def crafted(tmp, seed, name, always):
    """The seed weights changed so that every position predicts `always`: the
    blocks add nothing (wo and w2 zero), every token embeds to ones, and only
    the output row of `always` is non-zero."""
    w = read_safetensors(str(seed))
    w = {k: v.copy() for k, v in w.items()}
    for k in w:
        if k.endswith("attention.wo.weight") or k.endswith("feed_forward.w2.weight"):
            w[k][:] = 0
    w["tok_embeddings.weight"][:] = 1
    w["output.weight"][:] = 0
    w["output.weight"][always] = 1
    path = tmp / name
    write_safetensors(str(path), w)
    return path


def text_out(tmp, seed):
    letter = crafted(tmp, seed, "always_A.safetensors", ord("A"))
    p = generate(tmp, letter, "--prompt", "Hi", "--max_new_tokens", "7", "--temperature", "0")
    check(p.returncode == 0 and p.stdout == "HiAAAAAAA\n",
          f"stdout is the prompt and 7 new tokens: {p.stdout!r} {p.stderr[-300:]}")
    check("max_new_tokens reached" in p.stderr, f"stderr says why it stopped: {p.stderr!r}")
    ids = generate(tmp, letter, "--prompt", "Hi", "--max_new_tokens", "3", "--ids")
    check(ids.returncode == 0 and "prompt: 256 72 105\n" in ids.stdout and
          generated_ids(ids) == [65, 65, 65], f"--ids prints BOS + prompt, then the ids: {ids.stdout!r}")
    eos = crafted(tmp, seed, "always_eos.safetensors", EOS)
    for flags in (["--temperature", "0"], ["--seed", "3"]):
        p = generate(tmp, eos, "--prompt", "Hi", "--max_new_tokens", "50", "--ids", *flags)
        check(p.returncode == 0 and generated_ids(p) == [EOS] and "stopped at EOS" in p.stderr,
              f"stops after EOS {flags}: {generated_ids(p)} {p.stderr[-200:]!r}")
        p = generate(tmp, eos, "--prompt", "Hi", "--max_new_tokens", "50", *flags)
        check(p.returncode == 0 and p.stdout == "Hi\n", f"EOS prints no text {flags}: {p.stdout!r}")


def streaming(tmp):
    """Tokens reach stdout as they come: a pipe buffers 4 KiB, so without a
    flush per token the first read of a 2,000-byte text would be all of it,
    after the process ended."""
    model = MODEL + ["--model.dim", "256", "--model.n_layers", "4"]
    d = tmp / "streaming"
    s = run(["train", "--checkpoint.create_seed_checkpoint", "true"], d, model)
    letter = crafted(d, d / "checkpoint" / "step-0.safetensors", "always_A.safetensors", ord("A"))
    proc = subprocess.Popen([REMAT, "generate", "--checkpoint.load", str(letter), "--prompt", "Hi",
                             "--max_new_tokens", "2000", "--temperature", "0", *model,
                             "--job.dump_folder", str(d)],
                            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    first = os.read(proc.stdout.fileno(), 1 << 16)
    running = proc.poll() is None
    rest = proc.stdout.read()
    proc.wait(timeout=600)
    total = first + rest
    check(s.returncode == 0 and proc.returncode == 0 and total == b"Hi" + b"A" * 2000 + b"\n" and
          running and len(first) < len(total),
          f"text streams: the first read ({len(first)} bytes) came while generating "
          f"({running}), before the {len(total)} bytes of the whole")


def sampling(tmp, seed):
    base = ["--prompt", "Once upon a time", "--max_new_tokens", "24", "--ids"]
    a = generate(tmp, seed, *base, "--seed", "7", "--temperature", "0.8", "--top_k", "40",
                 "--top_p", "0.9")
    b = generate(tmp, seed, *base, "--seed", "7", "--temperature", "0.8", "--top_k", "40",
                 "--top_p", "0.9")
    c = generate(tmp, seed, *base, "--seed", "8", "--temperature", "0.8", "--top_k", "40",
                 "--top_p", "0.9")
    check(a.returncode == 0 and generated_ids(a) is not None and len(generated_ids(a)) == 24,
          f"seeded sampling gives 24 tokens: {a.stdout!r} {a.stderr[-300:]}")
    check(a.stdout == b.stdout, "the same seed gives the same tokens")
    check(a.stdout != c.stdout, "another seed gives other tokens")
    greedy = generate(tmp, seed, *base, "--temperature", "0")
    for s in ("1", "5"):
        top1 = generate(tmp, seed, *base, "--top_k", "1", "--temperature", "1.3", "--seed", s)
        check(generated_ids(top1) == generated_ids(greedy) and generated_ids(greedy),
              f"top_k 1 (seed {s}) is greedy: {generated_ids(top1)} vs {generated_ids(greedy)}")


def sentencepiece(tmp):
    corpus = Path("/usr/share/games/fortunes/fortunes").read_text(errors="replace")[:200000]
    text = tmp / "corpus.txt"
    text.write_text(corpus)
    tok = tmp / "tok.model"
    t = subprocess.run([REMAT, "tokenizer", "train", "--input", str(text), "--vocab_size", "400",
                        "--output", str(tok)], capture_output=True, text=True, timeout=600)
    check(t.returncode == 0, f"tokenizer train exits 0: {t.stderr[-300:]}")
    model = [a for a in MODEL if a not in ("--model.vocab_size", "300")]
    model += ["--model.tokenizer_path", str(tok)]
    sp_dir = tmp / "sp"
    seeded = run(["train", "--checkpoint.create_seed_checkpoint", "true"], sp_dir, model)
    check(seeded.returncode == 0, f"seed checkpoint with the tokenizer: {seeded.stderr[-300:]}")
    p = generate(sp_dir, sp_dir / "checkpoint" / "step-0.safetensors", "--prompt",
                 "The meaning of life", "--max_new_tokens", "12", "--seed", "1", model=model)
    check(p.returncode == 0 and p.stdout.startswith("The meaning of life") and
          len(p.stdout) > len("The meaning of life\n"),
          f"SentencePiece: the prompt and its continuation: {p.stdout!r} {p.stderr[-300:]}")
    # grads reads a text --tokens with the model's tokenizer, as eval does (it
    # used bytes whatever the tokenizer): the same 2 rows give the same loss.
    sample = tmp / "sample.txt"
    sample.write_text(corpus[:4000])
    weights = ["--checkpoint.load", str(sp_dir / "checkpoint" / "step-0.safetensors")]
    g = run(["grads", "--tokens", str(sample), "--out", str(tmp / "g.safetensors"), *weights],
            sp_dir, model)
    e = run(["eval", "--validation.dataset", str(sample), "--validation.steps", "2", *weights],
            sp_dir, model)
    losses = [re.search(r"loss: (\S+)", proc.stdout) for proc in (g, e)]
    same = all(losses) and abs(float(losses[0].group(1)) - float(losses[1].group(1))) < 1e-4
    check(g.returncode == e.returncode == 0 and same,
          f"SentencePiece: grads of a text file tokenizes it as eval does (loss "
          f"{[m.group(1) if m else None for m in losses]}) {g.stderr[-200:]}")


def bad_inputs(tmp, seed):
    cases = [
        ("no checkpoint", ["--prompt", "x"], ["checkpoint.load"], False),
        ("missing checkpoint file", ["--prompt", "x", "--checkpoint.load", str(tmp / "nope.st")],
         ["nope.st"], False),
        ("no prompt", [], ["--prompt"], True),
        ("empty prompt", ["--prompt", ""], ["--prompt", "empty", "expected"], True),
        ("temperature -1", ["--prompt", "x", "--temperature", "-1"],
         ["--temperature", "-1", "expected", ">= 0"], True),
        ("temperature abc", ["--prompt", "x", "--temperature", "abc"],
         ["--temperature", "abc", "expected"], True),
        ("temperature nan", ["--prompt", "x", "--temperature", "nan"],
         ["--temperature", "nan", "expected"], True),
        ("top_p 0", ["--prompt", "x", "--top_p", "0"], ["--top_p", "expected", "(0, 1]"], True),
        ("top_p 1.5", ["--prompt", "x", "--top_p", "1.5"], ["--top_p", "1.5", "(0, 1]"], True),
        ("top_k -2", ["--prompt", "x", "--top_k", "-2"], ["--top_k", "-2", ">= 0"], True),
        ("top_k above the vocabulary", ["--prompt", "x", "--top_k", "301"],
         ["--top_k", "301", "300"], True),
        ("max_new_tokens 0", ["--prompt", "x", "--max_new_tokens", "0"],
         ["--max_new_tokens", "0", ">= 1"], True),
        ("max_new_tokens 2.5", ["--prompt", "x", "--max_new_tokens", "2.5"],
         ["--max_new_tokens", "2.5", "integer"], True),
        ("max_new_tokens beyond int64", ["--prompt", "x", "--max_new_tokens",
                                         "99999999999999999999"],
         ["--max_new_tokens", "at most 9223372036854775807"], True),
        ("seed beyond 64 bits", ["--prompt", "x", "--seed", "18446744073709551616"],
         ["--seed", "at most 18446744073709551615"], True),
        ("max_new_tokens beyond the cache", ["--prompt", "x", "--max_new_tokens",
                                             "9223372036854775807"],
         ["--max_new_tokens", "9223372036854775807", "positions"], True),
        ("a KV cache over memory.limit", ["--prompt", "x", "--max_new_tokens", "1000000",
                                          "--memory.limit", "64MiB"],
         ["memory", "KV cache", "1000002 positions", "memory.limit", "expected"], True),
    ]
    for name, flags, words, with_weights in cases:
        p = run(["generate", *(["--checkpoint.load", str(seed)] if with_weights else []), *flags],
                tmp)
        said = p.stderr.lower()
        check(p.returncode == 2 and p.stdout == "" and all(w.lower() in said for w in words),
              f"{name}: exit 2 ({p.returncode}), nothing on stdout, message names {words}: "
              f"{p.stderr.strip()[-200:]!r}")


def training_samples(tmp):
    small = ["--training.steps", "4", "--metrics.log_freq", "1"]
    with_samples = tmp / "with.jsonl"
    p = subprocess.run([REMAT, "train", *small, *MODEL, "--job.dump_folder", str(tmp),
                        "--metrics.sample_freq", "2", "--metrics.jsonl_path", str(with_samples)],
                       capture_output=True, timeout=600)
    try:
        out = p.stdout.decode("utf-8")  # strict: a model's bytes are escaped, not copied
    except UnicodeDecodeError as err:
        out = ""
        check(False, f"the log is valid UTF-8: {err}")
    lines = re.findall(r'^sample step: +(\d+)  "(.*)"$', out, re.M)
    check(p.returncode == 0 and [int(s) for s, _ in lines] == [2, 4] and
          all(text.startswith("The") for _, text in lines),
          f"samples at steps 2 and 4, one line each, starting with the prompt: {lines}")
    plain = tmp / "without.jsonl"
    q = run(["train", *small, "--metrics.jsonl_path", str(plain)], tmp)
    strip = lambda path: [(r["step"], r["loss"], r["grad_norm"], r["peak_bytes"])
                          for r in map(json.loads, path.read_text().splitlines())]
    check(q.returncode == 0 and "sample step" not in q.stdout and
          strip(with_samples) == strip(plain),
          "sampling changes no training record (loss, grad_norm, step peak)")
    bad = run(["train", *small, "--metrics.sample_freq", "-1"], tmp)
    check(bad.returncode == 2 and "metrics.sample_freq" in bad.stderr and bad.stdout == "",
          f"metrics.sample_freq -1: exit 2 naming the key: {bad.stderr.strip()!r}")


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        s = run(["train", "--checkpoint.create_seed_checkpoint", "true"], tmp)
        check(s.returncode == 0, f"seed checkpoint: {s.stderr[-300:]}")
        seed = tmp / "checkpoint" / "step-0.safetensors"
        text_out(tmp, seed)
        streaming(tmp)
        sampling(tmp, seed)
        bad_inputs(tmp, seed)
        sentencepiece(tmp)
        training_samples(tmp)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
