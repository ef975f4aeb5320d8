"""SentencePiece tokenizers (issue 13, point 3), with python3-sentencepiece as the oracle.

- `remat tokenizer train` trains BPE and unigram models on a fortunes file;
  `remat tokenizer encode` gives, line by line, exactly the ids Debian's
  python3-sentencepiece gives with the same model, on a varied corpus
  (ASCII, accents, CJK, Cyrillic, emoji, odd whitespace, digits).
- Bad input to `remat tokenizer train` exits 2 with a clear message and
  leaves no output file (nor its temporary).
- model.tokenizer_path sets model.vocab_size; a different vocab_size is an
  input error (exit 2).
- The debug model trains 2 steps on the fortunes tokenised with the trained
  tokenizer.

Usage: test_sentencepiece_oracle.py <path-to-remat>
"""
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import sentencepiece as spm

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "llama3_debug.toml"
FORTUNES = Path("/usr/share/games/fortunes/fortunes")
TIMEOUT_S = 300

CORPUS = [
    "Hello, world!",
    "  leading and trailing spaces  ",
    "tabs\tand   many    spaces",
    "",
    "Numbers: 3.14159, 2,718, 1e-9 and 42%.",
    "Grüße aus Köln: Äpfel, Öl, Übermut, ß.",
    "Ça va? Où est l'hôtel? Señor, niño, açaí.",
    "Съешь же ещё этих мягких французских булок.",
    "東京は日本の首都です。",
    "中文测试：你好，世界！",
    "Emoji: 🙂🚀 and a flag 🇩🇪.",
    "Combining: e\u0301 vs \u00e9, fullwidth ＡＢＣ１２３ (NFKC).",
    "Greek: Ελληνικά, math: ∑ x² ≤ ∞",
    "The quick brown fox jumps over the lazy dog.",
    "\"Quotes\" and 'apostrophes' -- dashes — and ellipses…",
    "C++ code: for (int i = 0; i < n; ++i) { x[i] += y[i]; }",
]


def run(*args, check=True):
    p = subprocess.run([REMAT, *args], capture_output=True, text=True, timeout=TIMEOUT_S)
    if check and p.returncode != 0:
        sys.exit("FAIL: remat %s exited %d\n%s%s" % (" ".join(args), p.returncode, p.stdout,
                                                     p.stderr))
    return p


def expect_input_error(what, args, message, output=None):
    p = run(*args, check=False)
    assert p.returncode == 2, "%s: exit %d, expected 2\n%s" % (what, p.returncode, p.stderr)
    assert message in p.stderr, "%s: %r not in stderr:\n%s" % (what, message, p.stderr)
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    # One message: SentencePiece's own log lines ("LOG(WARNING) No valid symbol
    # found") do not precede remat's.
    assert "LOG(" not in p.stderr, "%s: a library log line in stderr:\n%s" % (what, p.stderr)
    if output is not None:
        assert not output.exists(), "%s left %s behind" % (what, output)
        assert not Path(str(output) + ".tmp").exists(), "%s left a temporary" % what
    print("ok: %s exits 2 (%s)" % (what, message))


def check_oracle(model, corpus_file, lines):
    ours = run("tokenizer", "encode", "--model", str(model), "--input", str(corpus_file))
    ours = [[int(t) for t in line.split()] for line in ours.stdout.split("\n")[:-1]]
    sp = spm.SentencePieceProcessor(model_file=str(model))
    theirs = [sp.encode(line) for line in lines]
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for line, a, b in zip(lines, ours, theirs):
        assert a == b, "ids differ on %r:\n  remat:  %s\n  python: %s" % (line, a, b)
    unknown = sum(ids.count(sp.unk_id()) for ids in theirs)
    print("ok: %s: identical ids on %d lines, %d ids (%d unknown)" %
          (model.name, len(lines), sum(map(len, theirs)), unknown))
    # One line of over 64 KiB: remat hands it to the library in pieces cut
    # at single spaces (the library's memory is about 190 bytes per byte of
    # one call); the ids must be those of one call over the whole line.
    long_line = " ".join((FORTUNES.read_text(errors="replace").split("\n") + CORPUS) * 4)
    long_file = corpus_file.parent / "long_line.txt"
    long_file.write_text(long_line + "\n")
    ours = run("tokenizer", "encode", "--model", str(model), "--input", str(long_file))
    ours = [int(t) for t in ours.stdout.split("\n")[0].split()]
    theirs = sp.encode(long_line)
    first = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b),
                 None if len(ours) == len(theirs) else min(len(ours), len(theirs)))
    assert first is None, "ids of a %d-byte line differ from id %d on: remat %s, python %s" % (
        len(long_line.encode()), first, ours[first:first + 8], theirs[first:first + 8])
    print("ok: %s: identical ids on one %d-byte line (%d ids)" %
          (model.name, len(long_line.encode()), len(theirs)))


def check_bad_inputs(tmp, train_text):
    out = tmp / "bad.model"
    expect_input_error("missing input", ["tokenizer", "train", "--input", str(tmp / "none.txt"),
                       "--vocab_size", "100", "--output", str(out)], "none.txt", out)
    expect_input_error("vocab too large", ["tokenizer", "train", "--input", str(train_text),
                       "--vocab_size", "1000000", "--output", str(out)],
                       "Vocabulary size too high", out)
    tiny = tmp / "abc.txt"
    tiny.write_text("abc")
    expect_input_error("vocab too large for three characters", ["tokenizer", "train", "--input",
                       str(tiny), "--vocab_size", "300", "--output", str(out)],
                       "Vocabulary size too high (300)", out)
    expect_input_error("bad model type", ["tokenizer", "train", "--input", str(train_text),
                       "--vocab_size", "100", "--output", str(out), "--model_type", "word2"],
                       "--model_type word2", out)
    expect_input_error("vocab of only the special pieces", ["tokenizer", "train", "--input",
                       str(train_text), "--vocab_size", "2", "--output", str(out)],
                       "expected an integer from 4 to 2147483647", out)
    for size in ("1e3", "99999999999"):  # not an integer; beyond SentencePiece's 32 bits
        expect_input_error("vocab_size " + size, ["tokenizer", "train", "--input",
                           str(train_text), "--vocab_size", size, "--output", str(out)],
                           "--vocab_size %s: expected an integer from 4 to 2147483647" % size,
                           out)
    expect_input_error("vocab smaller than the characters", ["tokenizer", "train", "--input",
                       str(train_text), "--vocab_size", "5", "--output", str(out)],
                       "Expected a --vocab_size above the text's number of distinct characters",
                       out)
    expect_input_error("bad vocab size", ["tokenizer", "train", "--input", str(train_text),
                       "--vocab_size", "12x", "--output", str(out)], "--vocab_size 12x", out)
    expect_input_error("unknown flag", ["tokenizer", "train", "--input", str(train_text),
                       "--vocab", "100", "--output", str(out)], "unknown option --vocab", out)
    expect_input_error("missing output", ["tokenizer", "train", "--input", str(train_text),
                       "--vocab_size", "100"], "needs --output")
    expect_input_error("no subcommand", ["tokenizer"], "train or encode")
    expect_input_error("not a model", ["tokenizer", "encode", "--model", str(train_text),
                       "--input", str(train_text)], "not a SentencePiece .model file")


def check_config(tmp, model, vocab):
    p = run("plan", "--config", str(CONFIG), "--json", "--model.tokenizer_path", str(model))
    assert '"vocab_size": %d' % vocab in p.stdout, p.stdout[:2000]
    print("ok: model.vocab_size follows the tokenizer (%d)" % vocab)
    expect_input_error("vocab_size mismatch", ["plan", "--config", str(CONFIG),
                       "--model.tokenizer_path", str(model), "--model.vocab_size", "2048"],
                       "model.vocab_size = 2048 differs")
    expect_input_error("missing tokenizer", ["train", "--config", str(CONFIG),
                       "--job.dump_folder", str(tmp / "gone_run"),
                       "--model.tokenizer_path", str(tmp / "gone.model")], "gone.model")
    # Planning reads no data: a tokenizer not on this machine (a torchtitan
    # config's) plans at the flavor's vocabulary size, and says so.
    p = run("plan", "--config", str(CONFIG), "--model.tokenizer_path", str(tmp / "gone.model"))
    assert "is not on this machine: planning with the flavor's vocab_size" in p.stdout, p.stdout
    print("ok: plan with a missing tokenizer plans at the flavor's vocab_size")


def check_training(tmp, model, vocab):
    metrics = tmp / "metrics.jsonl"
    p = run("train", "--config", str(CONFIG), "--model.tokenizer_path", str(model),
            "--training.steps", "2", "--training.seq_len", "32", "--training.local_batch_size", "2",
            "--metrics.log_freq", "1", "--metrics.jsonl_path", str(metrics),
            "--job.dump_folder", str(tmp / "out"))
    assert "vocab %d" % vocab in p.stdout, p.stdout
    losses = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    assert len(losses) == 2 and all(0 < x < 2 * math.log(vocab) for x in losses), losses
    print("ok: the debug model trains 2 steps on fortunes with the tokenizer (losses %s)" % losses)


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        # Training text: the fortunes plus a little of every script in the corpus.
        train_text = tmp / "train.txt"
        train_text.write_text(FORTUNES.read_text(errors="replace") + "\n".join(CORPUS[5:]) + "\n")
        corpus_file = tmp / "corpus.txt"
        lines = CORPUS + FORTUNES.read_text(errors="replace").split("\n")[:400]
        corpus_file.write_text("\n".join(lines) + "\n")
        for model_type, vocab in [("bpe", 1000), ("unigram", 800)]:
            model = tmp / ("%s.model" % model_type)
            run("tokenizer", "train", "--input", str(train_text), "--vocab_size", str(vocab),
                "--output", str(model), "--model_type", model_type)
            assert not Path(str(model) + ".tmp").exists()
            check_oracle(model, corpus_file, lines)
        check_bad_inputs(tmp, train_text)
        check_config(tmp, tmp / "bpe.model", 1000)
        check_training(tmp, tmp / "bpe.model", 1000)
    print("PASS")


if __name__ == "__main__":
    main()
