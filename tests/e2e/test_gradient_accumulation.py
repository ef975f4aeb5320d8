"""Gradient accumulation (training.global_batch_size, README "Gradient accumulation").

- The same step, fewer sequences at a time: batch 4 as 2 microbatches of 2
  and as 4 of 1 gives the loss, grad_norm and learning rate of batch 4 in one
  pass, within 1e-5 relative at every step (the microbatches' gradients are
  summed, then divided by their count, which rounds differently from one
  pass), for llama3 and llama4 (whose expert biases follow the token counts
  of all microbatches).
- Memory is one microbatch's: the allocator peak of the accumulated run is
  what `remat plan` predicts for it, byte for byte, and below the one-pass
  run's.
- AC modes none and op give the same bits under accumulation.
- A resume is bit-exact: the checkpoint records the microbatch count and
  where the next step's data starts; another count warns, naming both.
- `remat plan --maximize throughput` with a global batch ranks only local
  batches that divide it, each with its microbatch count, within the memory
  limit, best first.

Usage: test_gradient_accumulation.py <path-to-remat>
"""
import json
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
STEPS = 4
SMALL = ["--training.seq_len", "32", "--model.dim", "64", "--model.n_heads", "4",
         "--model.n_kv_heads", "4", "--metrics.log_freq", "1", "--metrics.peak_flops", "1e11",
         "--training.steps", str(STEPS)]
TOL = 1e-5
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def config_of(model):
    return str(REPO / "configs" / f"{model}_debug.toml")


def train(tmp, model, name, *extra):
    """Returns (stdout, {step: metrics line}) of a run, or (None, {}) if it failed."""
    proc = subprocess.run([REMAT, "train", "--config", config_of(model), *SMALL,
                           "--metrics.jsonl_path", f"{name}.jsonl", "--job.dump_folder", name,
                           *extra], cwd=tmp, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(proc.stdout[-1500:], proc.stderr[-1500:], sep="\n")
        return None, {}
    lines = [json.loads(line) for line in (tmp / f"{name}.jsonl").read_text().splitlines()]
    return proc.stdout, {m["step"]: m for m in lines}


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def batch(local, global_batch=None):
    args = ["--training.local_batch_size", str(local)]
    if global_batch is not None:
        args += ["--training.global_batch_size", str(global_batch)]
    return args


def metadata(path):
    data = Path(path).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    return json.loads(data[8:8 + n]).get("__metadata__", {})


def test_equivalence(tmp, model):
    _, one_pass = train(tmp, model, f"{model}_4", *batch(4))
    for local, micro in ((2, 2), (1, 4)):
        out, acc = train(tmp, model, f"{model}_{local}x{micro}", *batch(local, 4))
        ok = out is not None and sorted(acc) == sorted(one_pass) == list(range(1, STEPS + 1))
        worst = max((max(rel(acc[s]["loss"], one_pass[s]["loss"]),
                         rel(acc[s]["grad_norm"], one_pass[s]["grad_norm"]))
                     for s in acc), default=1.0) if ok else 1.0
        check(ok and worst <= TOL and all(acc[s]["lr"] == one_pass[s]["lr"] for s in acc),
              f"{model}: batch 4 as {micro} microbatches of {local}: loss and grad_norm of one "
              f"pass of 4 within {TOL:g} (worst {worst:.1e})")
        said = f"gradient accumulation: {micro} microbatches of {local} sequence" + \
            ("s" if local > 1 else "") + " per optimizer step"
        check(ok and said in out,
              f"{model}: the run says it accumulates {micro} microbatches of {local}")
        if local == 2:
            plan = subprocess.run([REMAT, "plan", "--config", config_of(model), *SMALL,
                                   *batch(local, 4), "--json"], capture_output=True, text=True,
                                  timeout=300)
            predicted = (json.loads(plan.stdout)["configured"]["peak_bytes"]
                         if plan.returncode == 0 else None)
            measured = {acc[s]["peak_bytes"] for s in acc} if ok else set()
            check(measured == {predicted} and predicted < one_pass[1]["peak_bytes"],
                  f"{model}: the accumulated run's peak is one microbatch's, as planned: "
                  f"measured {measured}, predicted {predicted}, one pass of 4 "
                  f"{one_pass.get(1, {}).get('peak_bytes')}")
            _, none = train(tmp, model, f"{model}_{local}x{micro}_none", *batch(local, 4),
                            "--activation_checkpoint.mode", "none")
            same = ok and sorted(none) == sorted(acc) and all(
                (none[s]["loss"], none[s]["grad_norm"]) == (acc[s]["loss"], acc[s]["grad_norm"])
                for s in acc)
            check(same, f"{model}: accumulated, AC none and selective op give the same bits")


def test_resume(tmp):
    _, straight = train(tmp, "llama3", "r_straight", *batch(2, 4))
    _, _ = train(tmp, "llama3", "r_first", *batch(2, 4), "--checkpoint.enable", "true",
                 "--checkpoint.interval", "2")
    checkpoint = tmp / "r_first" / "checkpoint" / "step-2.safetensors"
    meta = metadata(checkpoint) if checkpoint.is_file() else {}
    # 2 steps x 2 microbatches x 2 sequences: the next step starts at window 8.
    check(meta.get("data.microbatches") == "2" and meta.get("data.next_window") == "8",
          f"the checkpoint records 2 microbatches and next window 8: "
          f"{meta.get('data.microbatches')}, {meta.get('data.next_window')}")
    out, resumed = train(tmp, "llama3", "r_resumed", *batch(2, 4), "--checkpoint.load",
                         str(checkpoint))
    check(out is not None and sorted(resumed) == [3, 4] and all(
        (resumed[s]["loss"], resumed[s]["grad_norm"]) ==
        (straight[s]["loss"], straight[s]["grad_norm"]) for s in (3, 4))
        and "warning" not in out,
        "resumed at step 2: steps 3-4 equal the straight accumulated run bit for bit, no warning")
    out, _ = train(tmp, "llama3", "r_other", *batch(2), "--checkpoint.load", str(checkpoint))
    check(out is not None and "2 microbatches per step (training.global_batch_size), this run "
          "has 1" in out, "a resume with another microbatch count warns, naming both")


def test_maximize(tmp):
    limit = 200 * 2**20
    proc = subprocess.run([REMAT, "plan", "--config", config_of("llama3"), "--maximize",
                           "throughput", "--memory.limit", f"{limit}B",
                           "--training.global_batch_size", "24", "--json",
                           "--job.dump_folder", "maximize"], cwd=tmp, capture_output=True,
                          text=True, timeout=600)
    choices = json.loads(proc.stdout) if proc.returncode == 0 else []
    batches = sorted(c["local_batch_size"] for c in choices)
    check(len(choices) >= 2 and all(
        c["local_batch_size"] * c["microbatches"] == 24 and c["peak_bytes"] <= limit
        for c in choices) and set(batches) <= {1, 2, 3, 4, 6, 8, 12, 24}
        and [c["tokens_per_second"] for c in choices] ==
        sorted((c["tokens_per_second"] for c in choices), reverse=True),
        f"plan --maximize throughput, global batch 24 within 200 MiB: divisors only, "
        f"batch x microbatches = 24, best first: {batches}")


def main():
    with tempfile.TemporaryDirectory(prefix="remat-accum-") as tmp:
        tmp = Path(tmp)
        for model in ("llama3", "llama4"):
            test_equivalence(tmp, model)
        test_resume(tmp)
        test_maximize(tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks ok")


if __name__ == "__main__":
    main()
