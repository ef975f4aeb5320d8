"""Resuming a run (README "Resuming a run").

- A resume is bit-exact: 2 steps, save, resume to 4 gives the loss and
  grad_norm of steps 3 and 4 of a straight 4-step run, byte for byte in the
  metrics (llama3 and llama4).
- Each checkpoint records the run: training.steps, local_batch_size, seq_len,
  the dataset's window count and the window the next batch starts at.
- A resume with another training.steps or local_batch_size warns, naming both
  values; with another batch size the data continues at the recorded window
  (the checkpoint the resumed run writes records where it got to); with
  another seq_len it warns that the data position is recomputed. The same
  settings give no warning.
- With checkpointing on and no checkpoint.load, the same command run again
  resumes from the latest checkpoint in its folder (torchtitan's behaviour),
  bit for bit; once at training.steps it trains and rewrites nothing.
- A weights-only checkpoint past step 0 warns that the AdamW moments start
  from zero.
- A resume from an earlier step into a folder that holds later checkpoints
  names those its saves will replace.
- Malformed run metadata is exit 2 naming the key.

Usage: test_resume.py <path-to-remat>
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
SMALL = ["--training.seq_len", "32", "--training.local_batch_size", "2", "--model.dim", "64",
         "--model.n_heads", "4", "--model.n_kv_heads", "4", "--metrics.log_freq", "1",
         "--metrics.peak_flops", "1e11"]
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def train(tmp, config, *extra):
    proc = subprocess.run([REMAT, "train", "--config", config, *SMALL, *extra], cwd=tmp,
                          capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(proc.stdout[-1500:], proc.stderr[-1500:], sep="\n")
    return proc


def metadata(path):
    data = Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    meta = json.loads(data[8:8 + n]).get("__metadata__", {})
    return {k: v for k, v in meta.items() if not k.startswith("crc32c.")}


def without_optimizer(data):
    """A safetensors file with its optimizer.* tensors (and their checksums) removed."""
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    kept, out, offset = {}, [], 0
    names = sorted((k for k in header if k != "__metadata__"),
                   key=lambda k: header[k]["data_offsets"][0])
    for name in names:
        if name.startswith("optimizer."):
            header["__metadata__"].pop("crc32c." + name, None)
            continue
        begin, end = header[name]["data_offsets"]
        kept[name] = dict(header[name], data_offsets=[offset, offset + end - begin])
        out.append(body[begin:end])
        offset += end - begin
    kept["__metadata__"] = header["__metadata__"]
    text = json.dumps(kept, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    return struct.pack("<Q", len(text)) + text + b"".join(out)


def steps_of(path):
    """step -> the metrics line without the timing fields."""
    out = {}
    for line in Path(path).read_text().splitlines():
        m = json.loads(line)
        out[m["step"]] = (m["loss"], m["grad_norm"], m["lr"])
    return out


def test_bit_exact(model):
    config = str(REPO / "configs" / f"{model}_debug.toml")
    with tempfile.TemporaryDirectory(prefix="remat-resume-") as tmp:
        tmp = Path(tmp)
        straight = train(tmp, config, "--training.steps", "4", "--metrics.jsonl_path", "a.jsonl",
                         "--job.dump_folder", "a")
        # Same training.steps, so the same LR schedule: only the stop differs.
        first = train(tmp, config, "--training.steps", "4", "--checkpoint.enable", "true",
                      "--checkpoint.interval", "2", "--metrics.jsonl_path", "b.jsonl",
                      "--job.dump_folder", "b")
        checkpoint = tmp / "b" / "checkpoint" / "step-2.safetensors"
        resumed = train(tmp, config, "--training.steps", "4", "--checkpoint.load", str(checkpoint),
                        "--metrics.jsonl_path", "c.jsonl", "--job.dump_folder", "c")
        ok = straight.returncode == first.returncode == resumed.returncode == 0
        a, c = (steps_of(tmp / "a.jsonl"), steps_of(tmp / "c.jsonl")) if ok else ({}, {})
        check(ok and sorted(c) == [3, 4] and all(a[s] == c[s] for s in (3, 4)),
              f"{model}: steps 3-4 resumed from step 2 equal the straight run's bit for bit: "
              f"{[a.get(s) for s in (3, 4)]} vs {[c.get(s) for s in (3, 4)]}")
        check("warning" not in resumed.stdout,
              f"{model}: resuming with the same settings warns about nothing")


def test_same_command_resumes(model):
    """torchtitan's resume: checkpointing on over a folder with checkpoints."""
    config = str(REPO / "configs" / f"{model}_debug.toml")
    with tempfile.TemporaryDirectory(prefix="remat-resume-") as tmp:
        tmp = Path(tmp)
        args = ["--training.steps", "4", "--checkpoint.enable", "true", "--checkpoint.interval",
                "2", "--job.dump_folder", "run"]
        straight = train(tmp, config, *args, "--metrics.jsonl_path", "a.jsonl")
        folder = tmp / "run" / "checkpoint"
        # The last checkpoint lost: the same command again continues from step 2.
        (folder / "step-4.safetensors").unlink(missing_ok=True)
        again = train(tmp, config, *args, "--metrics.jsonl_path", "b.jsonl")
        ok = straight.returncode == again.returncode == 0
        a, b = (steps_of(tmp / "a.jsonl"), steps_of(tmp / "b.jsonl")) if ok else ({}, {})
        check(ok and "resuming from run/checkpoint/step-2.safetensors, the latest checkpoint"
              in again.stdout and sorted(b) == [3, 4] and all(a[s] == b[s] for s in (3, 4)),
              f"{model}: the same command again resumes from the latest checkpoint (step 2) "
              f"and steps 3-4 equal the first run's bit for bit: {sorted(b)}")
        # Done already: nothing trained, no checkpoint rewritten. Its metrics go
        # beside the checkpoints under a name no save takes (it was refused).
        before = (folder / "step-4.safetensors").stat() if ok else None
        done = train(tmp, config, *args, "--metrics.jsonl_path", "run/checkpoint/step-9.jsonl")
        after = (folder / "step-4.safetensors").stat() if ok else None
        check(done.returncode == 0 and "nothing to train" in done.stdout and before is not None
              and "step-4.safetensors, the latest" in done.stdout
              and (before.st_ino, before.st_mtime_ns) == (after.st_ino, after.st_mtime_ns),
              f"{model}: a third run (metrics in checkpoint.folder as step-9.jsonl) finds step "
              f"4 = training.steps: nothing trained or rewritten")


def test_folder_found_however_reached():
    """The checkpoint folder is listed as the saves will reach it, or refused."""
    config = str(REPO / "configs" / "llama3_debug.toml")
    with tempfile.TemporaryDirectory(prefix="remat-resume-") as tmp:
        tmp = Path(tmp)
        args = ["--checkpoint.enable", "true", "--checkpoint.folder", "../ck"]
        first = train(tmp, config, *args, "--training.steps", "2", "--job.dump_folder", "a")
        # "b/../ck" does not resolve until b exists: it was read as no folder,
        # and the run trained afresh over ck's checkpoints.
        saved = tmp / "ck" / "step-2.safetensors"
        before = saved.stat() if saved.exists() else None
        again = train(tmp, config, *args, "--training.steps", "2", "--job.dump_folder", "b")
        after = saved.stat() if saved.exists() else None
        check(first.returncode == again.returncode == 0 and "nothing to train" in again.stdout
              and before is not None and after is not None
              and before.st_mtime_ns == after.st_mtime_ns,
              "a checkpoint.folder reached through a job.dump_folder still to be created is "
              "found: nothing trained or rewritten")
        # A folder this run cannot list would read as empty: exit 2 instead.
        if os.geteuid() == 0 and shutil.which("setpriv"):
            for p in (tmp, tmp / "ck"):
                p.chmod(0o777 if p == tmp else 0o333)
            proc = subprocess.run(
                ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", REMAT, "train",
                 "--config", config, *SMALL, *args, "--training.steps", "4",
                 "--job.dump_folder", "c"], cwd=tmp, capture_output=True, text=True, timeout=300)
            (tmp / "ck").chmod(0o755)
            check(proc.returncode == 2 and "checkpoint.folder: cannot list" in proc.stderr
                  and saved.stat().st_mtime_ns == before.st_mtime_ns,
                  f"a checkpoint folder the run cannot list is exit 2 (got {proc.returncode}: "
                  f"{proc.stderr.strip()[-200:]})")


def test_one_run_per_folder():
    """A second run in a checkpoint folder in use is exit 2, touching nothing."""
    config = str(REPO / "configs" / "llama3_debug.toml")
    with tempfile.TemporaryDirectory(prefix="remat-resume-") as tmp:
        tmp = Path(tmp)
        args = [REMAT, "train", "--config", config, *SMALL, "--checkpoint.enable", "true",
                "--checkpoint.interval", "1", "--job.dump_folder", "d"]
        first = subprocess.Popen(args + ["--training.steps", "100000"], cwd=tmp,
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        try:
            folder = tmp / "d" / "checkpoint"
            for _ in range(600):  # until the first run has saved a step
                if any(folder.glob("step-*.safetensors")):
                    break
                time.sleep(0.1)
            # Few steps: were it not refused, it would not write for long.
            second = subprocess.run(args + ["--training.steps", "5"], cwd=tmp,
                                    capture_output=True, text=True, timeout=300)
        finally:
            first.terminate()
            first.wait(timeout=300)
        check(second.returncode == 2 and "is in use by another remat run" in second.stderr
              and "step:" not in second.stdout,
              f"a second run in a checkpoint folder in use is exit 2 before any step "
              f"(got {second.returncode}: {second.stderr.strip()[-160:]})")


def test_record_and_warnings():
    config = str(REPO / "configs" / "llama3_debug.toml")
    with tempfile.TemporaryDirectory(prefix="remat-resume-") as tmp:
        tmp = Path(tmp)
        train(tmp, config, "--training.steps", "3", "--checkpoint.enable", "true",
              "--job.dump_folder", "a")
        saved = tmp / "a" / "checkpoint" / "step-3.safetensors"
        meta = metadata(saved) if saved.exists() else {}
        windows = int(meta.get("data.windows", "0"))
        check(meta.get("training.steps") == "3" and meta.get("training.local_batch_size") == "2"
              and meta.get("training.seq_len") == "32" and windows > 1000
              and meta.get("data.next_window") == "6" and meta.get("step") == "3",
              f"the checkpoint records the run: {meta}")

        # Another batch size: a warning, and the data goes on from window 6.
        proc = train(tmp, config, "--training.steps", "5", "--training.local_batch_size", "4",
                     "--checkpoint.load", str(saved), "--checkpoint.enable", "true",
                     "--job.dump_folder", "b")
        out = proc.stdout
        check(proc.returncode == 0 and "training.steps = 3, this run has 5" in out and
              "learning-rate schedule" in out, "another training.steps warns, naming both")
        check("training.local_batch_size = 2, this run has 4" in out and
              "the data continues where that run stopped" in out,
              "another local_batch_size warns, naming both")
        after = tmp / "b" / "checkpoint" / "step-5.safetensors"
        got = metadata(after).get("data.next_window") if after.exists() else None
        check(got == str(6 + 2 * 4),
              f"with batch 4 the data went on from window 6: next window {got}, expected 14 "
              "(step x batch would give 20)")

        check("its saves will replace" not in out,
              "no checkpoint of a later step in the folder: no word of replacing one")

        # A resume from an earlier step into the folder holding later ones:
        # its saves replace them (as in torchtitan), and it says so first.
        train(tmp, config, "--training.steps", "3", "--checkpoint.enable", "true",
              "--checkpoint.interval", "1", "--job.dump_folder", "e")
        proc = train(tmp, config, "--training.steps", "3", "--checkpoint.enable", "true",
                     "--checkpoint.interval", "1", "--job.dump_folder", "e", "--checkpoint.load",
                     str(tmp / "e" / "checkpoint" / "step-1.safetensors"))
        check(proc.returncode == 0 and "holds the checkpoints of steps 2, 3, later than this "
              "run's start (step 1); its saves will replace them" in proc.stdout,
              "a resume into a folder of later checkpoints names those its saves replace")

        proc = train(tmp, config, "--training.steps", "4", "--training.seq_len", "16",
                     "--checkpoint.load", str(saved), "--job.dump_folder", "c")
        check(proc.returncode == 0 and "training.seq_len = 32, this run has 16" in proc.stdout
              and "(step x batch) mod" in proc.stdout,
              "another seq_len warns that the data position is recomputed")

        # Weights only (the AdamW moments dropped from the file): the resume
        # says the moments start from zero.
        weights = tmp / "weights.safetensors"
        weights.write_bytes(without_optimizer(saved.read_bytes()))
        proc = train(tmp, config, "--training.steps", "4", "--checkpoint.load", str(weights),
                     "--job.dump_folder", "w")
        check(proc.returncode == 0 and "holds weights only, no AdamW moments" in proc.stdout
              and "start from zero at step 4" in proc.stdout,
              "a weights-only checkpoint at step 3 warns that the moments start from zero")

        # A malformed record is a bad checkpoint: exit 2 naming the key.
        data = saved.read_bytes()
        n = struct.unpack("<Q", data[:8])[0]
        header = json.loads(data[8:8 + n])
        header["__metadata__"]["data.next_window"] = "-1"
        text = json.dumps(header, separators=(",", ":")).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        bad = tmp / "bad.safetensors"
        bad.write_bytes(struct.pack("<Q", len(text)) + text + data[8 + n:])
        proc = train(tmp, config, "--training.steps", "4", "--checkpoint.load", str(bad),
                     "--job.dump_folder", "d")
        check(proc.returncode == 2 and "data.next_window" in proc.stderr and
              not (tmp / "d").exists(),
              f"malformed run metadata is exit 2 naming the key, nothing written "
              f"(got {proc.returncode}: {proc.stderr.strip()[:200]})")


def main():
    test_bit_exact("llama3")
    test_bit_exact("llama4")
    test_same_command_resumes("llama3")
    test_same_command_resumes("llama4")
    test_folder_found_however_reached()
    test_one_run_per_folder()
    test_record_and_warnings()
    print(f"{len(failures)} failing check(s)" if failures else "all checks ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
