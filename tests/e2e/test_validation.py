"""Validation while training, as torchtitan's [validation] (issue 13, point 2).

- Every validation.freq steps the run logs "validate step: N  loss: X" and a
  JSONL record {"step": N, "validation_loss": X}; the loss equals, to the
  bit, `remat eval` on the checkpoint of that step and the same data.
- Validating leaves no trace in training: the training records are the same
  with and without it.
- The validation pass does not raise the run's peak: the allocator peak of a
  run with validation is the training step's peak `remat plan` predicts.
- With the built-in fortunes and no validation.dataset, the last quotes are
  held out and cut from the training data (the unit test HeldOut.* holds the
  split itself); a validation.dataset that is one of the built-in dataset's
  files warns that it is trained on.

Usage: test_validation.py <path-to-remat>
"""
import json
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = sys.argv[1]
SMALL = ["--config", "configs/llama3_debug.toml", "--training.local_batch_size", "2",
         "--training.seq_len", "64", "--training.steps", "4", "--metrics.log_freq", "1",
         "--metrics.peak_flops", "1e11", "--training.threads", "2"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def run(args, tmp):
    proc = subprocess.run([REMAT, *args, "--job.dump_folder", str(tmp)], capture_output=True,
                          text=True)
    if proc.returncode != 0:
        print(proc.stdout, proc.stderr)
    return proc


def records(path):
    return [json.loads(line) for line in Path(path).read_text().splitlines()]


def explicit_file(tmp):
    data = tmp / "held_out.txt"
    data.write_text("Validation text that training never reads. " * 40)
    jsonl = tmp / "with.jsonl"
    train = run(["train", *SMALL, "--validation.enabled", "true", "--validation.freq", "2",
                 "--validation.steps", "3", "--validation.dataset", str(data),
                 "--checkpoint.enable", "true", "--checkpoint.interval", "4",
                 "--metrics.jsonl_path", str(jsonl)], tmp)
    check(train.returncode == 0, "train with validation.dataset exits 0")
    lines = re.findall(r"^validate step: +(\d+)  loss: +([0-9.]+)$", train.stdout, re.M)
    check([int(s) for s, _ in lines] == [2, 4], f"validate lines at steps 2 and 4: {lines}")
    validation = [r for r in records(jsonl) if "validation_loss" in r]
    check([r["step"] for r in validation] == [2, 4], f"JSONL validation records: {validation}")
    check(all(f"{r['validation_loss']:7.4f}".strip() == l for r, (_, l) in zip(validation, lines)),
          "the log line shows the JSONL's loss")
    ev = run(["eval", *SMALL, "--checkpoint.load", str(tmp / "checkpoint" / "step-4.safetensors"),
              "--validation.dataset", str(data), "--validation.steps", "3"], tmp)
    got = re.search(r"^validation loss: (\S+)$", ev.stdout, re.M)
    last = float(f"{validation[-1]['validation_loss']:.9g}")  # eval prints %.9g
    check(got is not None and float(got.group(1)) == last,
          f"remat eval on step 4 ({got and got.group(1)}) = validation loss at step 4 "
          f"({validation[-1]['validation_loss']:.9g})")

    check("warning" not in train.stdout, "a held-out validation.dataset warns about nothing")
    # The training file itself (through a second name) as validation data: a warning.
    (tmp / "alias.txt").symlink_to(data)
    same = run(["train", *SMALL, "--training.dataset_path", str(data), "--training.steps", "2",
                "--validation.enabled", "true", "--validation.freq", "2", "--validation.steps",
                "1", "--validation.dataset", str(tmp / "alias.txt")], tmp)
    check(same.returncode == 0 and "warning: validation.dataset" in same.stdout
          and "is the training data (training.dataset_path" in same.stdout,
          "validation.dataset naming the training file warns")

    plain = tmp / "without.jsonl"
    check(run(["train", *SMALL, "--metrics.jsonl_path", str(plain)], tmp).returncode == 0,
          "train without validation exits 0")
    strip = lambda rs: [(r["step"], r["loss"], r["grad_norm"], r["peak_bytes"]) for r in rs
                        if "loss" in r]
    check(strip(records(jsonl)) == strip(records(plain)),
          "training records (loss, grad_norm, peak) are the same with and without validation")

    plan = json.loads(subprocess.run([REMAT, "plan", *SMALL, "--json"], capture_output=True,
                                     text=True, check=True).stdout)
    want = plan["configured"]["peak_bytes"]
    peak = re.search(r"^memory: allocator peak \S+ \(([0-9,]+) bytes", train.stdout, re.M)
    check(peak is not None and int(peak.group(1).replace(",", "")) == want,
          f"allocator peak with validation {peak and peak.group(1)} = predicted {want:,}")
    announced = re.search(r"predicted peak \S+ \((\d+) bytes\), training step \S+ \((\d+) bytes\)",
                          train.stdout)
    check(announced is not None and int(announced.group(1)) <= int(announced.group(2)) == want,
          f"validation's predicted peak is within the training step's: "
          f"{announced and announced.groups()}")


def built_in_fortunes(tmp):
    jsonl = tmp / "fortunes.jsonl"
    train = run(["train", *SMALL, "--training.steps", "2", "--validation.enabled", "true",
                 "--validation.freq", "1", "--validation.steps", "2",
                 "--metrics.jsonl_path", str(jsonl)], tmp)
    check(train.returncode == 0, "train with validation on the built-in fortunes exits 0")
    dataset = re.search(r"^dataset: fortunes .*: ([0-9,]+) tokens, less the ([0-9,]+) held out",
                        train.stdout, re.M)
    held = re.search(r"the last ([0-9,]+) tokens of fortunes, held out", train.stdout)
    whole = run(["train", *SMALL, "--training.steps", "1"], tmp)
    total = re.search(r"^dataset: fortunes .*: ([0-9,]+) tokens$", whole.stdout, re.M)
    check(dataset is not None and held is not None and total is not None,
          "the dataset and validation lines name the held-out part")
    if dataset and held and total:
        number = lambda text: int(text.replace(",", ""))
        tokens = number(total.group(1))
        check(number(dataset.group(1)) == tokens and
              tokens // 110 < number(dataset.group(2)) == number(held.group(1)) <= tokens // 100,
              f"about 1% of the {tokens:,} fortune tokens held out ({held.group(1)})")
    check([r["step"] for r in records(jsonl) if "validation_loss" in r] == [1, 2],
          "validation records at steps 1 and 2")
    check("warning" not in train.stdout, "the built-in held-out part warns about nothing")
    # One of the files the built-in dataset trains on, as validation data.
    inside = run(["train", *SMALL, "--training.steps", "1", "--validation.enabled", "true",
                  "--validation.dataset", "/usr/share/games/fortunes/fortunes"], tmp)
    check(inside.returncode == 0 and "warning: validation.dataset '/usr/share/games/fortunes/"
          "fortunes' is one of the files in /usr/share/games/fortunes that the built-in "
          "dataset \"fortunes\" trains on" in inside.stdout,
          "a validation file the built-in dataset trains on warns")


def moe_leaves_no_trace(tmp):
    """Validation's forward passes route tokens too; the next step's expert-bias
    update must not see them."""
    llama4 = ["--config", "configs/llama4_debug.toml", *SMALL[2:], "--training.steps", "3"]
    a, b = tmp / "a.jsonl", tmp / "b.jsonl"
    run(["train", *llama4, "--validation.enabled", "true", "--validation.freq", "1",
         "--validation.steps", "2", "--metrics.jsonl_path", str(a)], tmp)
    run(["train", *llama4, "--metrics.jsonl_path", str(b)], tmp)
    strip = lambda rs: [(r["step"], r["loss"], r["grad_norm"]) for r in rs if "loss" in r]
    check(len(strip(records(a))) == 3 and strip(records(a)) == strip(records(b)),
          "llama4 (MoE): training records are the same with and without validation")


def main():
    with tempfile.TemporaryDirectory() as d:
        explicit_file(Path(d))
    with tempfile.TemporaryDirectory() as d:
        built_in_fortunes(Path(d))
    with tempfile.TemporaryDirectory() as d:
        moe_leaves_no_trace(Path(d))
    if failures:
        print("FAIL:\n" + "\n".join(failures))
        sys.exit(1)
    print("PASS")


main()
