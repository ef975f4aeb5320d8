"""Weights stored in bf16 or fp16 load as PyTorch widens them.

torchtitan can export a model's weights in half precision
(checkpoint.export_dtype = "bfloat16" or "float16"); a safetensors file of
such weights has dtype "BF16" or "F16". remat reads them as fp32: this test
takes the weights of a short remat run, narrows them with PyTorch (an
independent conversion), and checks that

- `remat eval` on the BF16 (F16) file gives exactly the validation loss of
  the fp32 file of PyTorch's own widening of the same values (bf16 -> fp32
  and fp16 -> fp32 are exact, so any difference is a wrong widening);
- that loss differs from the original fp32 weights' (the narrowing took
  effect, so the files are not read the same way by accident);
- training from the BF16 file continues with the losses training from the
  widened fp32 file gives, to the bit;
- a half-precision file whose tensor holds an infinity (fp16 overflow) is
  refused, exit 2, naming the tensor.

Usage: test_half_precision_weights.py <path-to-remat>
"""
import json
import re
import struct
import sys
import tempfile
from pathlib import Path

import torch

from io_kit import check, exit_status, run
from llama_ref import read_safetensors, write_safetensors  # tests/oracle, on the path io_kit set

STORED = {torch.bfloat16: "BF16", torch.float16: "F16"}


def write_half(path, tensors, dtype):
    """A safetensors file of `tensors` (name -> fp32 torch tensor) stored as
    `dtype`, written by hand: 2 little-endian bytes per element."""
    header, blobs, offset = {}, [], 0
    for name, t in tensors.items():
        blob = t.to(dtype).contiguous().view(torch.int16).numpy().astype("<i2").tobytes()
        header[name] = {"dtype": STORED[dtype], "shape": list(t.shape),
                        "data_offsets": [offset, offset + len(blob)]}
        blobs.append(blob)
        offset += len(blob)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def validation_loss(tmp, weights, data):
    p = run(["eval", "--checkpoint.load", str(weights), "--validation.dataset", str(data),
             "--validation.steps", "3"], tmp)
    m = re.search(r"^validation loss: (\S+)$", p.stdout, re.M)
    if p.returncode != 0 or not m:
        print(p.stdout, p.stderr)
        return None
    return m.group(1)


def losses(tmp, weights):
    p = run(["train", "--checkpoint.load", str(weights), "--training.steps", "3"], tmp)
    if p.returncode != 0:
        print(p.stdout, p.stderr)
    return re.findall(r"loss: +([0-9.]+)", p.stdout)


def main():
    with tempfile.TemporaryDirectory() as d:
        tmp = Path(d)
        trained = run(["train", "--training.steps", "3", "--checkpoint.enable", "true",
                       "--checkpoint.interval", "3"], tmp / "run")
        check(trained.returncode == 0, f"a 3-step run saves its weights: {trained.stderr[-300:]}")
        saved = read_safetensors(str(tmp / "run" / "checkpoint" / "step-3.safetensors"))
        weights = {n: torch.from_numpy(a.copy()) for n, a in saved.items()
                   if not n.startswith("optimizer.")}
        data = tmp / "held_out.txt"
        data.write_text("Validation text the weights are evaluated on. " * 40)
        original = validation_loss(tmp, tmp / "run" / "checkpoint" / "step-3.safetensors", data)
        check(original is not None, f"eval of the fp32 checkpoint: {original}")

        for dtype, name in STORED.items():
            half = tmp / f"weights_{name}.safetensors"
            widened = tmp / f"weights_{name}_widened.safetensors"
            write_half(half, weights, dtype)
            write_safetensors(str(widened), {n: t.to(dtype).to(torch.float32).numpy()
                                             for n, t in weights.items()})
            got = validation_loss(tmp, half, data)
            want = validation_loss(tmp, widened, data)
            check(got is not None and got == want,
                  f"{name}: eval of the {name} file ({got}) = eval of PyTorch's fp32 widening "
                  f"({want})")
            check(got != original, f"{name}: narrowing changed the loss ({got} vs fp32 {original})")
            if dtype == torch.bfloat16:
                a, b = losses(tmp / "train_half", half), losses(tmp / "train_widened", widened)
                check(len(a) == 3 and a == b,
                      f"training from the BF16 file = from its fp32 widening: {a} vs {b}")

        overflow = dict(weights)
        first = next(iter(overflow))
        overflow[first] = overflow[first].clone()
        overflow[first].view(-1)[5] = 1e6  # beyond fp16's 65504: an infinity
        bad = tmp / "overflow_F16.safetensors"
        write_half(bad, overflow, torch.float16)
        p = run(["eval", "--checkpoint.load", str(bad), "--validation.dataset", str(data)], tmp)
        check(p.returncode == 2 and first in p.stderr and "validation loss" not in p.stdout,
              f"an fp16 infinity is refused (exit {p.returncode}): {p.stderr.strip()[-200:]}")
    return exit_status()


if __name__ == "__main__":
    sys.exit(main())
