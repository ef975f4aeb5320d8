"""checkpoint.initial_load_path and checkpoint.initial_load_model_weights_only
(torchtitan's; README "Starting from pretrained weights"), llama3 and llama4.

- A run A saves step 4. A new run B with initial_load_path = A's step-4 and
  the default weights only says so, starts at step 1 with fresh AdamW
  moments and the data from its start: its metrics equal, to the bit, those
  of a run given with checkpoint.load a step-0 weights-only file holding
  A's step-4 weights (written here from the safetensors format, the
  optimizer tensors dropped, step 0).
- The same command of B run again, with more steps, resumes from B's own
  latest save and ignores initial_load_path, as torchtitan does.
- With initial_load_model_weights_only false, the whole state is loaded: the
  run continues at step 5 with the bits of checkpoint.load of the same file.
- initial_load_path with checkpoint.load, or naming a missing file: exit 2
  naming the key or the file.

Usage: test_initial_load.py <path-to-remat>
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
SMALL = ["--training.seq_len", "32", "--training.local_batch_size", "2", "--model.dim", "64",
         "--model.n_heads", "4", "--model.n_kv_heads", "4", "--metrics.log_freq", "1",
         "--metrics.peak_flops", "1e11"]
failures = []


def check(what, ok, detail=""):
    print(("ok   " if ok else "FAIL ") + what + ("" if ok else f": {detail}"), flush=True)
    if not ok:
        failures.append(what)


RUNS = []


def train(config, dump, *extra):
    """Runs `remat train`, each run with a metrics file of its own."""
    RUNS.append(dump)
    return subprocess.run([REMAT, "train", "--config", str(REPO / "configs" / config), *SMALL,
                           "--job.dump_folder", dump, "--metrics.jsonl_path",
                           f"{dump}.run{len(RUNS)}.jsonl", *extra],
                          capture_output=True, text=True, timeout=300)


def metrics(out):
    """step -> (loss, grad_norm), full doubles, from the run's metrics file."""
    path = out.args[out.args.index("--metrics.jsonl_path") + 1]
    with open(path) as f:
        return {r["step"]: (r["loss"], r["grad_norm"]) for r in map(json.loads, f) if "loss" in r}


def weights_at_step_0(src, dst):
    """A step-0 weights-only safetensors file with the weights of `src`."""
    data = Path(src).read_bytes()
    n = struct.unpack("<Q", data[:8])[0]
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    header.pop("__metadata__")
    out, chunks, offset = {}, [], 0
    for name, t in sorted(header.items(), key=lambda kv: kv[1]["data_offsets"][0]):
        if name.startswith("optimizer."):
            continue
        a, b = t["data_offsets"]
        chunks.append(body[a:b])
        out[name] = {"dtype": t["dtype"], "shape": t["shape"],
                     "data_offsets": [offset, offset + b - a]}
        offset += b - a
    out["__metadata__"] = {"step": "0", "format": "remat"}
    text = json.dumps(out).encode()
    text += b" " * (-len(text) % 8)
    Path(dst).write_bytes(struct.pack("<Q", len(text)) + text + b"".join(chunks))


def one_model(tmp, config):
    name = config.split("_")[0]
    run = lambda dump, *extra: train(config, os.path.join(tmp, name + "_" + dump), *extra)
    out = run("a", "--training.steps", "4", "--checkpoint.enable", "true")
    check(f"{name}: run A saves step 4", out.returncode == 0, out.stderr[-400:])
    saved = os.path.join(tmp, name + "_a", "checkpoint", "step-4.safetensors")

    b = run("b", "--training.steps", "3", "--checkpoint.enable", "true",
            "--checkpoint.initial_load_path", saved)
    check(f"{name}: B starts from A's weights and says so",
          b.returncode == 0 and f"starting from {saved} (checkpoint.initial_load_path, its "
          "weights only" in b.stdout and "training starts at step 1" in b.stdout,
          b.stdout[-800:] + b.stderr[-400:])
    zero = os.path.join(tmp, name + "_weights0.safetensors")
    weights_at_step_0(saved, zero)
    c = run("c", "--training.steps", "3", "--checkpoint.load", zero)
    check(f"{name}: B's steps 1-3 are, to the bit, a run from a step-0 file of those weights",
          b.returncode == 0 and c.returncode == 0 and sorted(metrics(b)) == [1, 2, 3] and
          metrics(b) == metrics(c), f"{metrics(b)} vs {metrics(c) if c.returncode == 0 else c.stderr}")

    again = run("b", "--training.steps", "5", "--checkpoint.enable", "true",
                "--checkpoint.initial_load_path", saved)
    check(f"{name}: B again resumes from its own step-3, initial_load_path ignored",
          again.returncode == 0 and "resuming from" in again.stdout and
          "starting from" not in again.stdout and sorted(metrics(again)) == [4, 5],
          again.stdout[-600:] + again.stderr[-400:])

    whole = run("whole", "--training.steps", "6", "--checkpoint.initial_load_path", saved,
                "--checkpoint.initial_load_model_weights_only", "false")
    loaded = run("load", "--training.steps", "6", "--checkpoint.load", saved)
    check(f"{name}: the whole state: steps 5-6 are checkpoint.load's, to the bit",
          whole.returncode == 0 and loaded.returncode == 0 and sorted(metrics(whole)) == [5, 6]
          and metrics(whole) == metrics(loaded), whole.stdout[-600:] + whole.stderr[-400:])


def main():
    with tempfile.TemporaryDirectory(prefix="remat_initial_load_") as tmp:
        one_model(tmp, "llama3_debug.toml")
        one_model(tmp, "llama4_debug.toml")
        saved = os.path.join(tmp, "llama3_a", "checkpoint", "step-4.safetensors")
        out = train("llama3_debug.toml", os.path.join(tmp, "both"), "--training.steps", "2",
                    "--checkpoint.initial_load_path", saved, "--checkpoint.load", saved)
        check("initial_load_path with checkpoint.load: exit 2 naming the key",
              out.returncode == 2 and "checkpoint.initial_load_path" in out.stderr and
              "one or the other" in out.stderr, out.stderr[-400:])
        missing = os.path.join(tmp, "missing.safetensors")
        out = train("llama3_debug.toml", os.path.join(tmp, "missing"), "--training.steps", "2",
                    "--checkpoint.initial_load_path", missing)
        check("initial_load_path naming a missing file: exit 2 naming it",
              out.returncode == 2 and "missing.safetensors" in out.stderr, out.stderr[-400:])
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
