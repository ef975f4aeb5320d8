"""The final weights-only save, as torchtitan's
checkpoint.last_save_model_weights_only and checkpoint.export_dtype.

A 4-step run saving every 2 steps, once as usual and once per export dtype
with last_save_model_weights_only = true; PyTorch narrows the usual run's
fp32 weights (`tensor.to(torch.bfloat16)`, `.to(torch.float16)`), an
independent conversion. Checked:

- the step-2 save of every run is the usual one (weights and AdamW moments,
  F32): only the last step's save is weights-only, so a stopped run resumes;
- the step-4 save holds the weights alone, every tensor of the export dtype,
  its bytes those of PyTorch's narrowing of the usual run's weights (float32:
  the same bytes), with the run's step in its metadata;
- the training itself is unchanged (the same losses, to the printed digit);
- `remat eval` reads the exported file;
- a weight beyond fp16's range (65504) cannot be exported as float16: the
  run warns, naming it, and writes the weights in float32, nothing lost.

Usage: test_weights_only_export.py <path-to-remat>
"""
import json
import re
import struct
import sys
import tempfile
from pathlib import Path

import numpy as np
import torch

from io_kit import check, exit_status
from io_kit import run as run_small
from llama_ref import read_safetensors, write_safetensors  # tests/oracle, on the path io_kit set

CHECKPOINTS = ["--checkpoint.enable", "true", "--checkpoint.interval", "2"]
EXPORTS = {"float32": ("F32", torch.float32), "bfloat16": ("BF16", torch.bfloat16),
           "float16": ("F16", torch.float16)}


def run(args, tmp):
    return run_small(args, tmp, CHECKPOINTS)


def stored(path):
    """name -> (dtype, shape, raw bytes) and the metadata, read by hand."""
    with open(path, "rb") as f:
        (n,) = struct.unpack("<Q", f.read(8))
        header = json.loads(f.read(n))
        data = f.read()
    metadata = header.pop("__metadata__", {})
    return {name: (e["dtype"], e["shape"], data[e["data_offsets"][0]:e["data_offsets"][1]])
            for name, e in header.items()}, metadata


def narrowed_bytes(array, dtype):
    t = torch.from_numpy(np.ascontiguousarray(array)).to(dtype)
    view = torch.int32 if dtype == torch.float32 else torch.int16
    return t.contiguous().view(view).numpy().tobytes()


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        usual = run(["train", "--training.steps", "4"], tmp / "usual")
        check(usual.returncode == 0, f"the usual run: {usual.stderr[-300:]}")
        usual_losses = re.findall(r"loss: +([0-9.]+)", usual.stdout)
        weights = {n: a for n, a in
                   read_safetensors(str(tmp / "usual" / "checkpoint" / "step-4.safetensors")).items()
                   if not n.startswith("optimizer.")}
        for export, (name, dtype) in EXPORTS.items():
            folder = tmp / export
            p = run(["train", "--training.steps", "4", "--checkpoint.export_dtype", export,
                     "--checkpoint.last_save_model_weights_only", "true"], folder)
            check(p.returncode == 0 and f"step-4.safetensors as {export}, without the optimizer state" in p.stdout,
                  f"{export}: the run ends with a weights-only save: {p.stderr[-300:]}")
            check(re.findall(r"loss: +([0-9.]+)", p.stdout) == usual_losses,
                  f"{export}: the losses are the usual run's")
            early, _ = stored(folder / "checkpoint" / "step-2.safetensors")
            check(any(n.startswith("optimizer.") for n in early) and
                  {e[0] for e in early.values()} == {"F32"},
                  f"{export}: the step-2 save holds the moments, in F32")
            last, metadata = stored(folder / "checkpoint" / "step-4.safetensors")
            check(set(last) == set(weights), f"{export}: the step-4 save holds the weights alone "
                  f"({len(last)} tensors, {len(weights)} weights)")
            check({e[0] for e in last.values()} == {name},
                  f"{export}: every tensor stored as {name}: {sorted({e[0] for e in last.values()})}")
            check(metadata.get("step") == "4", f"{export}: step 4 in the metadata")
            differ = [n for n in weights if n in last and
                      (last[n][1] != list(weights[n].shape) or
                       last[n][2] != narrowed_bytes(weights[n], dtype))]
            check(not differ, f"{export}: every tensor's bytes are PyTorch's narrowing of the usual "
                  f"run's weights (differing: {differ[:3]})")
            data = tmp / "held_out.txt"
            data.write_text("Validation text the exported weights are evaluated on. " * 40)
            e = run(["eval", "--checkpoint.load", str(folder / "checkpoint" / "step-4.safetensors"),
                     "--validation.dataset", str(data), "--validation.steps", "2"], tmp / "eval")
            check(e.returncode == 0 and "validation loss" in e.stdout,
                  f"{export}: remat eval reads the exported file: {e.stderr[-200:]}")

        # A weight past fp16's range, in an embedding row no byte token reads
        # (its gradient is zero, so it stays past the range through training).
        seed = {n: a.copy() for n, a in weights.items()}
        seed["tok_embeddings.weight"][2000, 3] = 1e5
        write_safetensors(str(tmp / "seed.safetensors"), seed)
        p = run(["train", "--training.steps", "1", "--checkpoint.load", str(tmp / "seed.safetensors"),
                 "--checkpoint.export_dtype", "float16",
                 "--checkpoint.last_save_model_weights_only", "true"], tmp / "beyond")
        last, _ = stored(tmp / "beyond" / "checkpoint" / "step-1.safetensors")
        check(p.returncode == 0 and "tok_embeddings.weight holds" in p.stderr and
              "float32 instead" in p.stderr and {e[0] for e in last.values()} == {"F32"},
              f"a weight beyond fp16's range: a warning naming it, the weights in F32 "
              f"(exit {p.returncode}): {p.stderr.strip()[-300:]}")
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
