"""What remat guarantees when a run goes wrong (README "Failure behaviour").

- SIGTERM and SIGINT stop at a step boundary, save when checkpointing is on,
  and exit 143 / 130; a storm of further signals during the save loses nothing.
- Under gradient accumulation a SIGTERM between two microbatches drops the
  step in progress: the checkpoint is the step before's, and a run resumed
  from it equals an uninterrupted run bit for bit (llama4: its expert token
  counts as well as the data position go back to the step's start).
- kill -9 keeps every metrics line logged so far, each valid JSON.
- A non-finite loss stops the run at that step with exit 1, a message naming
  the step, the values and a parameter; metrics stay valid JSON; no checkpoint
  with NaN is written.
- A stale step-*.safetensors.tmp from a killed save is removed at the next start.
- Checkpoints carry a CRC-32C per tensor; NaN weights are refused on load (exit 2);
  weights whose logits overflow make eval, generate and grads exit 1.
- A save the system refuses (a file-size limit here; a full disk takes the
  same path) is exit 1 naming the file and why: the checkpoint before it
  unchanged, no temporary left, every metrics line whole.
- An allocation the system refuses (ulimit -v) is exit 1 saying so, not an
  internal error.
- A config that sets no keys says the defaults are used.
- REMAT_PROFILE is 1 (profile), 0 or unset; another value exits 2.

Usage: test_failure_behaviour.py <path-to-remat>
"""
import json
import re
import math
import os
import resource
import signal
import struct
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
CONFIG = str(REPO / "configs" / "llama3_debug.toml")
SMALL = ["--training.seq_len", "32", "--training.local_batch_size", "2", "--model.dim", "64",
         "--model.n_heads", "4", "--model.n_kv_heads", "4", "--metrics.log_freq", "1"]
TIMEOUT_S = 120
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def train_args(tmp, *extra):
    return [REMAT, "train", "--config", CONFIG, "--job.dump_folder", str(tmp / "out"),
            "--metrics.jsonl_path", str(tmp / "m.jsonl"), *SMALL, *extra]


def run(argv, cwd):
    return subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=TIMEOUT_S)


def read_safetensors(path):
    data = Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    meta = header.pop("__metadata__", {})
    tensors = {}
    for name, e in header.items():
        begin, end = e["data_offsets"]
        raw = data[8 + n + begin:8 + n + end]
        tensors[name] = struct.unpack("<%df" % (len(raw) // 4), raw)
    return tensors, meta


def metrics_lines(path):
    """Every line must parse as strict JSON (no NaN / Infinity tokens)."""
    def no_constants(token):
        raise ValueError("non-JSON constant " + token)
    lines = Path(path).read_text().splitlines() if Path(path).exists() else []
    return [json.loads(line, parse_constant=no_constants) for line in lines]


def wait_for_lines(path, count, proc, limit_s=60):
    start = time.time()
    while time.time() - start < limit_s and proc.poll() is None:
        if Path(path).exists() and len(Path(path).read_text().splitlines()) >= count:
            return True
        time.sleep(0.02)
    return False


def start_long_run(tmp, *extra):
    return subprocess.Popen(train_args(tmp, "--training.steps", "1000000",
                                       "--checkpoint.enable", "true",
                                       "--checkpoint.interval", "1000000", *extra),
                            cwd=tmp, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def resume_one_step(tmp, checkpoint, step):
    proc = run(train_args(tmp, "--training.steps", str(step + 1), "--checkpoint.load",
                          str(checkpoint), "--metrics.jsonl_path", str(tmp / "resume.jsonl")),
               tmp)
    return proc.returncode == 0 and f"loaded {checkpoint} (step {step})" in proc.stdout


def test_signal_stops_saves_and_says_so(name, sig, expected_rc, storm):
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        proc = start_long_run(tmp)
        started = wait_for_lines(tmp / "m.jsonl", 3, proc)
        proc.send_signal(sig)
        if storm:  # keep signalling through the final save
            while proc.poll() is None:
                try:
                    proc.send_signal(sig)
                except ProcessLookupError:
                    break
                time.sleep(0.005)
        out, err = proc.communicate(timeout=TIMEOUT_S)
        check(started, f"{name}: the run logged steps before the signal")
        check(proc.returncode == expected_rc,
              f"{name}: exit status {proc.returncode}, expected {expected_rc}")
        check(f"interrupted by {sig.name}" in out, f"{name}: says it was interrupted")
        lines = metrics_lines(tmp / "m.jsonl")
        last = lines[-1]["step"] if lines else -1
        saved = tmp / "out" / "checkpoint" / f"step-{last}.safetensors"
        check(saved.is_file(), f"{name}: checkpoint of the last step ({saved.name}) saved")
        check(not list((tmp / "out" / "checkpoint").glob("*.tmp")), f"{name}: no temporary left")
        check(lines == sorted(lines, key=lambda m: m["step"]) and
              [m["step"] for m in lines] == list(range(1, last + 1)),
              f"{name}: metrics hold every step 1..{last}, one line each")
        if saved.is_file():
            check(resume_one_step(tmp, saved, last), f"{name}: the checkpoint resumes")


def test_kill_9_keeps_metrics():
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        proc = start_long_run(tmp)
        wait_for_lines(tmp / "m.jsonl", 4, proc)
        proc.kill()
        proc.communicate(timeout=TIMEOUT_S)
        try:
            lines = metrics_lines(tmp / "m.jsonl")
            valid = True
        except ValueError:
            lines, valid = [], False
        check(valid and len(lines) >= 4,
              f"kill -9: the metrics file keeps its {len(lines)} logged lines, all valid JSON")


def test_nan_stops_the_run():
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        proc = run(train_args(tmp, "--training.steps", "20", "--optimizer.lr", "1e6",
                              "--checkpoint.enable", "true", "--checkpoint.interval", "1"), tmp)
        check(proc.returncode == 1, f"NaN: exit status {proc.returncode}, expected 1")
        err = proc.stderr
        bad_step = None
        m = re.search(r"non-finite (loss|gradient norm) at step (\d+) \(loss = (\S+), "
                      r"grad_norm = (\S+)\); the first parameter whose gradient went non-finite"
                      r" \(in backward order\) is '([^']+)'", err)
        check(m is not None, "NaN: message names the step, both values and a parameter: " +
              err.strip()[:300])
        if m:
            bad_step = int(m.group(2))
        try:
            lines = metrics_lines(tmp / "m.jsonl")
            valid = True
        except ValueError:
            lines, valid = [], False
        check(valid, "NaN: metrics file is valid JSON")
        check(bool(lines) and lines[-1]["step"] == bad_step and lines[-1]["loss"] is None,
              "NaN: the last metrics line is the bad step, its loss null")
        ckpts = sorted((tmp / "out" / "checkpoint").glob("step-*.safetensors"))
        check(bad_step is not None and not (tmp / "out" / "checkpoint" /
                                            f"step-{bad_step}.safetensors").exists(),
              "NaN: no checkpoint for the bad step")
        all_finite = all(math.isfinite(v) for c in ckpts
                         for values in read_safetensors(c)[0].values() for v in values)
        check(all_finite, f"NaN: every checkpoint written ({len(ckpts)}) is finite")


def test_stale_temporary_is_removed_and_checksums_stored():
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        folder = tmp / "out" / "checkpoint"
        stale = folder / "step-7.safetensors.tmp"
        stale.parent.mkdir(parents=True)
        stale.write_bytes(b"\0" * 100000)
        (folder / "step-9").mkdir()
        stale_shards = [folder / "step-9" / n for n in (
            "shard-0-of-2.safetensors.tmp", "index.json.tmp",
            "shard-1-of-2.safetensors.snapshot-123.tmp")]
        # Files a save never writes, however named, are the user's: kept.
        outside = tmp / "outside"
        outside.mkdir()
        (folder / "step-ext").symlink_to(outside)
        (folder / "step-9x").mkdir()
        kept = [folder / "step-best.safetensors.tmp", folder / "step--1.safetensors.tmp",
                folder / "step-9" / "notes.tmp", folder / "step-9x" / "index.json.tmp",
                outside / "thesis.tmp"]
        for f in stale_shards + kept:
            f.write_text("bytes")
        proc = run(train_args(tmp, "--training.steps", "1", "--checkpoint.enable", "true"), tmp)
        check(proc.returncode == 0 and not stale.exists(),
              "stale .tmp of a killed save is removed at the next start")
        check(not any(f.exists() for f in stale_shards),
              "the stale temporaries in a sharded step folder are removed")
        check(all(f.exists() for f in kept),
              "files a save never writes are kept, inside the folder or through a link: "
              f"{[str(f.relative_to(tmp)) for f in kept if not f.exists()]} were removed")
        saved = tmp / "out" / "checkpoint" / "step-1.safetensors"
        if saved.is_file():
            tensors, meta = read_safetensors(saved)
            check(all(f"crc32c.{name}" in meta for name in tensors) and meta.get("step") == "1",
                  "checkpoint metadata holds the step and a CRC-32C per tensor")


def test_overflowing_update_is_no_internal_error():
    """An update that overflows the weights (optimizer.lr 1e308) with a finite
    loss and gradient: the save after it, at the interval or at the end, stops
    the run with exit 1 naming the step and the lr (it was an internal error),
    and writes no checkpoint."""
    for extra in (["--checkpoint.interval", "1", "--training.steps", "3"],
                  ["--checkpoint.interval", "5", "--training.steps", "1",
                   "--metrics.sample_freq", "1"]):
        with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
            tmp = Path(tmp)
            proc = run(train_args(tmp, "--optimizer.lr", "1e308", "--checkpoint.enable", "true",
                                  *extra), tmp)
            saved = list((tmp / "out" / "checkpoint").glob("step-*"))
            check(proc.returncode == 1 and "step 1's optimizer update" in proc.stderr
                  and "left NaN or inf" in proc.stderr and "internal error" not in proc.stderr
                  and not saved,
                  f"lr 1e308 ({' '.join(extra)}): exit 1 naming the step, no checkpoint (got "
                  f"{proc.returncode}, {[p.name for p in saved]}: {proc.stderr.strip()[-200:]})")


def test_refused_save_keeps_the_checkpoint_before():
    """A checkpoint save past a file-size limit (ulimit -f): EFBIG, the error a
    full disk's ENOSPC shares a path with. It was exit 2, bad input, though
    nothing the user gave was wrong."""
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        first = run(train_args(tmp, "--training.steps", "1", "--checkpoint.enable", "true"), tmp)
        folder = tmp / "out" / "checkpoint"
        saved = folder / "step-1.safetensors"
        before = saved.read_bytes() if saved.is_file() else b""
        limit = max(len(before) // 2, 65536)

        def limited():
            resource.setrlimit(resource.RLIMIT_FSIZE, (limit, resource.RLIM_INFINITY))

        proc = subprocess.run(
            train_args(tmp, "--training.steps", "2", "--checkpoint.enable", "true",
                       "--metrics.jsonl_path", str(tmp / "limited.jsonl")),
            cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT_S, preexec_fn=limited)
        left = sorted(p.name for p in folder.iterdir())
        lines = metrics_lines(tmp / "limited.jsonl")
        check(first.returncode == 0 and len(before) > limit and proc.returncode == 1
              and "step-2.safetensors" in proc.stderr and "file-size limit" in proc.stderr
              and "internal error" not in proc.stderr and left == ["step-1.safetensors"]
              and saved.read_bytes() == before and [l["step"] for l in lines] == [2],
              "a save past the file-size limit: exit 1 naming the file and the limit, step-1 "
              f"unchanged, no temporary, metrics whole (got {proc.returncode}, {left}, "
              f"{proc.stderr.strip()[-300:]})")


def test_out_of_memory_is_no_internal_error():
    """An address-space limit (ulimit -v) the start-up memory check does not
    see: the allocation that fails is exit 1 saying the system is out of
    memory and what needs less, not an internal error (a bug)."""
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)

        def limited():
            resource.setrlimit(resource.RLIMIT_AS, (800 << 20, resource.RLIM_INFINITY))

        proc = subprocess.run(
            [REMAT, "train", "--config", CONFIG, "--job.dump_folder", str(tmp / "out"),
             "--training.steps", "1", "--training.local_batch_size", "64"],
            cwd=tmp, capture_output=True, text=True, timeout=TIMEOUT_S, preexec_fn=limited)
        check(proc.returncode == 1 and "error: out of memory" in proc.stderr
              and "remat plan" in proc.stderr and "internal error" not in proc.stderr,
              "an allocation the system refuses: exit 1 saying out of memory (got "
              f"{proc.returncode}: {proc.stderr.strip()[-300:]})")


def filled_checkpoint(tmp, source, tensor, value, name):
    """`source` with every element of `tensor` set to `value` (its CRC dropped)."""
    data = source.read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    begin, end = header[tensor]["data_offsets"]
    header["__metadata__"].pop("crc32c." + tensor)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    body = bytearray(data[8 + n:])
    body[begin:end] = struct.pack("<f", value) * ((end - begin) // 4)
    (tmp / name).write_bytes(struct.pack("<Q", len(text)) + text + bytes(body))
    return str(tmp / name)


def test_non_finite_weights_and_logits():
    """NaN weights are refused on load (exit 2: no save writes one); finite but
    huge weights give infinite logits: eval, generate and grads exit 1 saying
    so, grads writing nothing."""
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        run(train_args(tmp, "--training.steps", "1", "--checkpoint.enable", "true"), tmp)
        saved = tmp / "out" / "checkpoint" / "step-1.safetensors"
        nan = filled_checkpoint(tmp, saved, "tok_embeddings.weight", float("nan"), "nan.safetensors")
        huge = filled_checkpoint(tmp, saved, "output.weight", 3e38, "huge.safetensors")
        tokens = tmp / "val.txt"
        tokens.write_text("the quick brown fox jumps over the lazy dog " * 20)
        commands = {
            "eval": ["eval", "--validation.dataset", str(tokens)],
            "generate": ["generate", "--prompt", "the", "--max_new_tokens", "3"],
            "grads": ["grads", "--tokens", str(tokens), "--out", "g.safetensors"]}
        for name, args in commands.items():
            base = [REMAT, args[0], "--config", CONFIG, *SMALL, *args[1:], "--checkpoint.load"]
            proc = run(base + [nan], tmp)
            check(proc.returncode == 2 and "'tok_embeddings.weight' holding a non-finite value"
                  in proc.stderr, f"{name} of NaN weights: exit 2 naming the tensor (got "
                  f"{proc.returncode}: {proc.stderr.strip()[-200:]})")
            proc = run(base + [huge], tmp)
            check(proc.returncode == 1 and "give NaN or infinite logits" in proc.stderr
                  and "internal error" not in proc.stderr and not (tmp / "g.safetensors").exists(),
                  f"{name} of weights whose logits overflow: exit 1 saying so, nothing written "
                  f"(got {proc.returncode}: {proc.stderr.strip()[-200:]})")


def test_empty_config_says_defaults():
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        (tmp / "empty.toml").write_text("# nothing here\n")
        proc = run([REMAT, "train", "--config", "empty.toml", "--training.steps", "0"], tmp)
        check(proc.returncode == 0 and "sets no keys" in proc.stderr and
              "defaults" in proc.stderr, "a config that sets no keys says the defaults are used")


def test_mfu_never_above_100_percent():
    """A peak set far too low (as a disturbed measurement once read) cannot give MFU > 100%."""
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        proc = run(train_args(tmp, "--training.steps", "3", "--metrics.peak_flops", "1e6"), tmp)
        lines = metrics_lines(tmp / "m.jsonl") if proc.returncode == 0 else []
        check(len(lines) == 3 and all(0 < m["mfu"] <= m["hfu"] <= 1.0 for m in lines),
              "MFU and HFU stay <= 100% with a peak set too low: " +
              str([(m["mfu"], m["hfu"]) for m in lines]))
        check("above the peak" in proc.stdout, "the log says the peak was raised")


def test_bad_gemm_choice_stops_before_output():
    """REMAT_FP32_GEMM (README "fp32 matmuls") other than openblas or onednn: exit 2
    naming the variable and what it takes, before the dump folder or the metrics
    file exist."""
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        for value in ("mkl", " onednn", "ONEDNN"):
            proc = subprocess.run(train_args(tmp, "--training.steps", "1"), cwd=tmp,
                                  capture_output=True, text=True, timeout=TIMEOUT_S,
                                  env={**os.environ, "REMAT_FP32_GEMM": value})
            check(proc.returncode == 2 and "REMAT_FP32_GEMM" in proc.stderr and
                  "openblas" in proc.stderr and not (tmp / "out").exists() and
                  not (tmp / "m.jsonl").exists(),
                  f"REMAT_FP32_GEMM={value!r} exits 2 naming it, nothing written "
                  f"(got {proc.returncode}: {proc.stderr.strip()[:120]})")


def test_variables_checked_by_every_command():
    """A bad REMAT_* value is exit 2 whatever the command, also one that does not
    use it (an fp32 run and REMAT_BF16_KERNEL, generate and REMAT_PROFILE); a
    name remat does not read is warned about."""
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        for command, variable in ((train_args(tmp, "--training.steps", "1"), "REMAT_BF16_KERNEL"),
                                  ([REMAT, "generate", "--config", CONFIG, "--prompt", "x"],
                                   "REMAT_PROFILE"),
                                  ([REMAT, "plan", "--config", CONFIG], "REMAT_BF16_KERNEL"),
                                  (train_args(tmp, "--training.steps", "1"),
                                   "REMAT_WORK_STEALING")):
            proc = subprocess.run(command, cwd=tmp, capture_output=True, text=True,
                                  timeout=TIMEOUT_S, env={**os.environ, variable: "2"})
            check(proc.returncode == 2 and f'{variable}="2"' in proc.stderr
                  and not (tmp / "out").exists(),
                  f"{command[1]} with {variable}=2: exit 2 naming it, nothing written "
                  f"(got {proc.returncode}: {proc.stderr.strip()[-120:]})")
        proc = subprocess.run([REMAT, "plan", "--config", CONFIG], cwd=tmp, capture_output=True,
                              text=True, timeout=TIMEOUT_S, env={**os.environ, "REMAT_PROFLIE": "1"})
        check(proc.returncode == 0 and "REMAT_PROFLIE is not a variable remat reads" in proc.stderr,
              f"a misspelt REMAT_PROFLIE is warned about (got {proc.returncode}: "
              f"{proc.stderr.strip()[-120:]})")


def test_profile_variable_is_one_or_zero():
    """REMAT_PROFILE=1 profiles, 0 does not (it used to: any value did), and
    another value exits 2 naming it before anything is written."""
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        said = {}
        for value in ("1", "0", "yes"):
            proc = subprocess.run(train_args(tmp, "--training.steps", "1"), cwd=tmp,
                                  capture_output=True, text=True, timeout=TIMEOUT_S,
                                  env={**os.environ, "REMAT_PROFILE": value})
            said[value] = (proc.returncode, "profile (" in proc.stdout, proc.stderr.strip())
            if value == "yes":
                check(proc.returncode == 2 and 'REMAT_PROFILE="yes"' in proc.stderr and
                      "expected 1" in proc.stderr and not (tmp / "m.jsonl").exists(),
                      f"REMAT_PROFILE=yes exits 2 naming it, nothing written: {said[value]}")
            (tmp / "m.jsonl").unlink(missing_ok=True)
        check(said["1"][:2] == (0, True) and said["0"][:2] == (0, False),
              f"REMAT_PROFILE=1 prints the profile, 0 does not: {said}")


def test_signal_between_microbatches_drops_the_step():
    name = "SIGTERM between microbatches"
    # 200 microbatches of 2 sequences a step: about a second a step here.
    accumulate = ["--config", str(REPO / "configs" / "llama4_debug.toml"),
                  "--training.global_batch_size", "400"]
    with tempfile.TemporaryDirectory(prefix="remat-fail-") as tmp:
        tmp = Path(tmp)
        # 4 steps: the expert biases step 3 leaves act from step 4 on.
        straight = run(train_args(tmp, *accumulate, "--training.steps", "4",
                                  "--metrics.jsonl_path", str(tmp / "straight.jsonl")), tmp)
        check(straight.returncode == 0, f"{name}: the uninterrupted 4-step run trains")
        proc = start_long_run(tmp, *accumulate)
        started = wait_for_lines(tmp / "m.jsonl", 2, proc)
        time.sleep(0.3)  # into step 3, well before its end
        proc.send_signal(signal.SIGTERM)
        out, _ = proc.communicate(timeout=TIMEOUT_S)
        check(started, f"{name}: the run logged 2 steps before the signal")
        check(proc.returncode == 143, f"{name}: exit status {proc.returncode}, expected 143")
        said = re.search(r"interrupted by SIGTERM during step 3, after (\d+) of its 200 "
                         r"microbatches: the step is dropped .*stopping after step 2", out)
        check(said is not None and 0 < int(said.group(1)) < 200,
              f"{name}: says step 3 was dropped after some of its microbatches")
        check([m["step"] for m in metrics_lines(tmp / "m.jsonl")] == [1, 2],
              f"{name}: metrics hold steps 1 and 2 only")
        saved = tmp / "out" / "checkpoint" / "step-2.safetensors"
        check(saved.is_file() and not (saved.parent / "step-3.safetensors").exists(),
              f"{name}: the checkpoint is step 2's")
        # As every step leaves them: the counts of the dropped microbatches
        # would move the expert biases in step 3's update of a resumed run.
        counts = [v for k, t in (read_safetensors(saved)[0] if saved.is_file() else {}).items()
                  if k.endswith("tokens_per_expert") for v in t]
        check(counts and not any(counts),
              f"{name}: the checkpoint's expert token counts are zero, as after a step")
        resumed = run(train_args(tmp, *accumulate, "--training.steps", "4", "--checkpoint.load",
                                 str(saved), "--metrics.jsonl_path", str(tmp / "resumed.jsonl")),
                      tmp)
        steps = [{m["step"]: (m["loss"], m["grad_norm"]) for m in metrics_lines(tmp / f)}
                 for f in ("straight.jsonl", "resumed.jsonl")]
        done = run(train_args(tmp, *accumulate, "--training.steps", "2", "--checkpoint.load",
                              str(saved)), tmp)
        check(done.returncode == 0 and "the loaded checkpoint is at step 2 already, nothing to "
              "train" in done.stdout, f"{name}: a resume with nothing left to train says so")
        check(resumed.returncode == 0 and sorted(steps[1]) == [3, 4] and
              all(steps[0].get(k) == steps[1][k] for k in (3, 4)),
              f"{name}: steps 3-4 resumed from step 2 equal the uninterrupted run's bit for bit "
              f"({steps})")


def main():
    test_signal_stops_saves_and_says_so("SIGTERM", signal.SIGTERM, 143, storm=False)
    test_signal_between_microbatches_drops_the_step()
    test_signal_stops_saves_and_says_so("SIGINT storm", signal.SIGINT, 130, storm=True)
    test_kill_9_keeps_metrics()
    test_nan_stops_the_run()
    test_stale_temporary_is_removed_and_checksums_stored()
    test_non_finite_weights_and_logits()
    test_overflowing_update_is_no_internal_error()
    test_refused_save_keeps_the_checkpoint_before()
    test_out_of_memory_is_no_internal_error()
    test_variables_checked_by_every_command()
    test_empty_config_says_defaults()
    test_mfu_never_above_100_percent()
    test_bad_gemm_choice_stops_before_output()
    test_profile_variable_is_one_or_zero()
    print(f"{len(failures)} failing check(s)" if failures else "all checks ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
