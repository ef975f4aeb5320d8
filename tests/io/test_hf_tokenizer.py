"""Hugging Face tokenizer.json byte-level BPE (issue 13, point 3), against a BPE written here.

- This script trains a small byte-level BPE on the fortunes (GPT-2's
  byte-to-unicode alphabet, Llama 3's pre-tokenizer regex through Python's
  `regex` module, Debian's python3-regex) and writes it as a Llama-3-shaped
  tokenizer.json: merges as "a b" strings, and a second file with
  ["a", "b"] pairs and BOS/EOS placed before the merged tokens.
- `remat tokenizer encode` gives, line by line, exactly the ids of this
  script's own encoder (added tokens first, then the regex, then merges by
  rank, lowest first, leftmost among equals) on a varied corpus: fortunes,
  accents, CJK, Cyrillic, emoji, contractions in any case, long numbers,
  odd whitespace, special tokens inside text.
- model.vocab_size follows the file (plan --json); another one exits 2, and
  so do malformed files, naming the field.
- The debug model trains 2 steps on the fortunes with the file.

Usage: test_hf_tokenizer.py <path-to-remat>
"""
import collections
import json
import math
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import regex

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
CONFIG = REPO / "configs" / "llama3_debug.toml"
FORTUNES = Path("/usr/share/games/fortunes")
TIMEOUT_S = 300
MERGES = 600

# Llama 3's pre-tokenizer split, as its released tokenizer.json spells it.
LLAMA3_PATTERN = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                  r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")
SPECIALS = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>", "<|eot_id|>"]

CORPUS = [
    "Hello, world!",
    "  leading and trailing spaces  ",
    "tabs\tand   many    spaces\t\t",
    "",
    "Numbers: 3.14159, 2,718, 1e-9, 1234567890 and 42%.",
    "I'LL say it's done; WE'VE seen they're right, you'D know, he'S 'm",
    "Grüße aus Köln: Äpfel, Öl, Übermut, ß.",
    "Ça va? Où est l'hôtel? Señor, niño, açaí.",
    "Съешь же ещё этих мягких французских булок.",
    "東京は日本の首都です。",
    "中文测试：你好，世界！",
    "Emoji: 🙂🚀 and a flag 🇩🇪 and 👩‍👩‍👧.",
    "Combining: e\u0301 vs \u00e9, fullwidth ＡＢＣ１２３, Arabic digits ٣٤٥٦",
    "Greek: Ελληνικά, math: ∑ x² ≤ ∞",
    "no-break\u00a0space and ideographic\u3000space",
    "\"Quotes\" and 'apostrophes' -- dashes — and ellipses…",
    "C++ code: for (int i = 0; i < n; ++i) { x[i] += y[i]; }\r",
    "<|begin_of_text|>A document<|end_of_text|>",
    "inside<|eot_id|>text<|eot_id|><|eot_id|> and a broken <|eot_id and <|reserved_special_token_0|>",
]


def byte_chars():
    """GPT-2's byte -> unicode character map, written from its definition."""
    printable = (list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) +
                 list(range(0xAE, 0x100)))
    chars, extra = {}, 0
    for b in range(256):
        if b in printable:
            chars[b] = chr(b)
        else:
            chars[b] = chr(256 + extra)
            extra += 1
    return chars


CHARS = byte_chars()
PATTERN = regex.compile(LLAMA3_PATTERN)


def spell(token):
    return "".join(CHARS[b] for b in token)


def pre_tokens(text):
    pieces = PATTERN.findall(text)
    assert "".join(pieces) == text, "the split must cover the text: %r" % text
    return pieces


def train(text, merges):
    """Byte-level BPE: repeatedly merge the most frequent adjacent pair within
    pre-tokens (ties: the smaller pair), keeping pair counts incrementally."""
    counts = collections.Counter(p.encode() for p in pre_tokens(text))
    words = [[[bytes([b]) for b in w], c] for w, c in counts.items()]
    pairs, where = collections.Counter(), collections.defaultdict(set)
    for i, (symbols, c) in enumerate(words):
        for p in zip(symbols, symbols[1:]):
            pairs[p] += c
            where[p].add(i)
    learned = []
    for _ in range(merges):
        best = max(pairs.items(), key=lambda kv: (kv[1], kv[0]), default=None)
        if best is None or best[1] < 2:
            break
        (a, b), _ = best
        learned.append((a, b))
        for i in sorted(where.pop((a, b))):
            symbols, c = words[i]
            for p in zip(symbols, symbols[1:]):
                pairs[p] -= c
                if pairs[p] == 0:
                    del pairs[p]
            out, j = [], 0
            while j < len(symbols):
                if j + 1 < len(symbols) and symbols[j] == a and symbols[j + 1] == b:
                    out.append(a + b)
                    j += 2
                else:
                    out.append(symbols[j])
                    j += 1
            words[i][0] = out
            for p in zip(out, out[1:]):
                pairs[p] += c
                where[p].add(i)
    return learned


def tokenizer_json(learned, specials_first):
    """A Llama-3-shaped file. With `specials_first`, the added tokens take
    ids 256.. and merges are [a, b] pairs; else they follow the merges."""
    tokens = [bytes([b]) for b in range(256)]
    for a, b in learned:
        if a + b not in tokens:
            tokens.append(a + b)
    first = 256 if specials_first else len(tokens)
    added = [{"id": first + i, "content": s, "single_word": False, "lstrip": False,
              "rstrip": False, "normalized": False, "special": True}
             for i, s in enumerate(SPECIALS)]
    vocab = {}
    for i, t in enumerate(tokens):
        vocab[spell(t)] = i if i < 256 or not specials_first else i + len(SPECIALS)
    merges = [[spell(a), spell(b)] if specials_first else spell(a) + " " + spell(b)
              for a, b in learned]
    return {
        "version": "1.0", "truncation": None, "padding": None, "added_tokens": added,
        "normalizer": None,
        "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": LLAMA3_PATTERN}, "behavior": "Isolated",
             "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True,
             "use_regex": False}]},
        "post_processor": None,
        "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True,
                    "use_regex": True},
        "model": {"type": "BPE", "dropout": None, "unk_token": None,
                  "continuing_subword_prefix": None, "end_of_word_suffix": None,
                  "fuse_unk": False, "byte_fallback": False, "ignore_merges": True,
                  "vocab": vocab, "merges": merges},
    }


class Encoder:
    """An encoder for the files above, independent of remat's."""

    def __init__(self, file):
        unspell = {c: b for b, c in CHARS.items()}

        def raw(token):
            return bytes(unspell[c] for c in token)

        self.ids = {raw(t): i for t, i in file["model"]["vocab"].items()}
        merges = [m.split(" ") if isinstance(m, str) else m for m in file["model"]["merges"]]
        self.ranks = {}
        for rank, (a, b) in enumerate(merges):
            self.ranks.setdefault((raw(a), raw(b)), rank)
        self.added = {t["content"]: t["id"] for t in file["added_tokens"]}
        self.added_re = regex.compile("|".join(
            regex.escape(s) for s in sorted(self.added, key=len, reverse=True)))

    def word(self, piece):
        if piece in self.ids:  # ignore_merges
            return [self.ids[piece]]
        parts = [bytes([b]) for b in piece]
        while len(parts) > 1:
            candidates = [(self.ranks[p], i) for i, p in enumerate(zip(parts, parts[1:]))
                          if p in self.ranks]
            if not candidates:
                break
            _, i = min(candidates)
            parts[i:i + 2] = [parts[i] + parts[i + 1]]
        return [self.ids[p] for p in parts]

    def encode(self, text):
        ids, pos = [], 0
        for m in self.added_re.finditer(text):
            for piece in pre_tokens(text[pos:m.start()]):
                ids += self.word(piece.encode())
            ids.append(self.added[m.group()])
            pos = m.end()
        for piece in pre_tokens(text[pos:]):
            ids += self.word(piece.encode())
        return ids


def run(*args, check=True):
    p = subprocess.run([REMAT, *args], capture_output=True, text=True, timeout=TIMEOUT_S)
    if check and p.returncode != 0:
        sys.exit("FAIL: remat %s exited %d\n%s%s" % (" ".join(args), p.returncode, p.stdout,
                                                     p.stderr))
    return p


def expect_input_error(what, args, message):
    p = run(*args, check=False)
    assert p.returncode == 2, "%s: exit %d, expected 2\n%s" % (what, p.returncode, p.stderr)
    assert message in p.stderr, "%s: %r not in stderr:\n%s" % (what, message, p.stderr)
    assert "internal error" not in p.stderr and "Traceback" not in p.stderr, p.stderr
    print("ok: %s exits 2 (%s)" % (what, message))


def check_oracle(path, file, corpus_file, lines):
    ours = run("tokenizer", "encode", "--model", str(path), "--input", str(corpus_file))
    ours = [[int(t) for t in line.split()] for line in ours.stdout.split("\n")[:-1]]
    encoder = Encoder(file)
    theirs = [encoder.encode(line) for line in lines]
    assert len(ours) == len(theirs), (len(ours), len(theirs))
    for line, a, b in zip(lines, ours, theirs):
        assert a == b, "ids differ on %r:\n  remat:  %s\n  python: %s" % (line, a, b)
    merged = sum(1 for ids in theirs for i in ids if i >= 256)
    print("ok: %s: identical ids on %d lines, %d ids (%d above the bytes)" %
          (path.name, len(lines), sum(map(len, theirs)), merged))


def check_bad_files(tmp, file):
    text = json.dumps(file)
    bad = tmp / "bad.json"
    bad.write_text(text[:len(text) // 2])
    expect_input_error("truncated file", ["tokenizer", "encode", "--model", str(bad),
                       "--input", str(bad)], "not a Hugging Face tokenizer.json: invalid JSON")
    broken = json.loads(text)
    broken["model"]["merges"][3] = spell(b"zq") + " " + spell(b"x")
    bad.write_text(json.dumps(broken))
    expect_input_error("merge of unknown tokens", ["plan", "--config", str(CONFIG),
                       "--model.tokenizer_path", str(bad)], "model.merges[3] = \"zq x\"")
    broken = json.loads(text)
    del broken["model"]["vocab"][spell(b"\n")]
    bad.write_text(json.dumps(broken))
    expect_input_error("vocabulary without a byte", ["train", "--config", str(CONFIG),
                       "--job.dump_folder", str(tmp / "bad_run"),
                       "--model.tokenizer_path", str(bad)], "no token for the byte 10")
    assert not (tmp / "bad_run").exists(), "a refused run left output behind"


def check_config_and_training(tmp, path, vocab):
    p = run("plan", "--config", str(CONFIG), "--json", "--model.tokenizer_path", str(path))
    assert '"vocab_size": %d' % vocab in p.stdout, p.stdout[:2000]
    print("ok: model.vocab_size follows the tokenizer.json (%d)" % vocab)
    expect_input_error("vocab_size mismatch", ["plan", "--config", str(CONFIG),
                       "--model.tokenizer_path", str(path), "--model.vocab_size", "2048"],
                       "model.vocab_size = 2048 differs")
    metrics = tmp / "metrics.jsonl"
    p = run("train", "--config", str(CONFIG), "--model.tokenizer_path", str(path),
            "--training.steps", "2", "--training.seq_len", "32", "--training.local_batch_size", "2",
            "--metrics.log_freq", "1", "--metrics.jsonl_path", str(metrics),
            "--job.dump_folder", str(tmp / "out"))
    assert "vocab %d" % vocab in p.stdout, p.stdout
    losses = [json.loads(line)["loss"] for line in metrics.read_text().splitlines()]
    assert len(losses) == 2 and all(0 < x < 2 * math.log(vocab) for x in losses), losses
    print("ok: the debug model trains 2 steps on fortunes with the tokenizer.json (losses %s)" %
          losses)


def main():
    texts = [p.read_text(errors="replace") for p in sorted(FORTUNES.iterdir())
             if p.is_file() and not p.is_symlink() and p.suffix == ""]
    train_text = "".join(texts[:6]) + "\n".join(CORPUS[5:]) + "\n"
    learned = train(train_text, MERGES)
    assert len(learned) == MERGES, len(learned)
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        lines = CORPUS + "".join(texts[6:]).split("\n")[:1500]
        corpus_file = tmp / "corpus.txt"
        corpus_file.write_text("\n".join(lines) + "\n")
        for name, specials_first in [("strings.json", False), ("pairs.json", True)]:
            file = tokenizer_json(learned, specials_first)
            path = tmp / name
            path.write_text(json.dumps(file, ensure_ascii=name == "pairs.json"))
            check_oracle(path, file, corpus_file, lines)
        file = tokenizer_json(learned, False)
        check_bad_files(tmp, file)
        vocab = 1 + max(list(file["model"]["vocab"].values()) +
                        [t["id"] for t in file["added_tokens"]])
        check_config_and_training(tmp, tmp / "strings.json", vocab)
    print("PASS")


if __name__ == "__main__":
    main()
