#!/usr/bin/python3
"""Compares two fp32 safetensors files tensor by tensor.

  /usr/bin/python3 tests/oracle/compare.py A.safetensors B.safetensors [--tol 1e-4]

B is the reference. For every tensor the error is
max|a - b| / max(max|b|, 1e-12) (relative to the reference tensor's largest
magnitude, so tiny entries do not blow it up). Prints one line per tensor and
the worst; exits 1 if the tensor names differ, a shape differs, a value is
not finite, or any error exceeds --tol; 2 if a file cannot be read.

Needs only numpy (no torch).
"""

import argparse
import json
import math
import os
import struct
import sys

import numpy as np


def read_safetensors(path):
    size = os.path.getsize(path)
    out = {}
    with open(path, "rb") as f:
        if size < 8:
            raise ValueError(f"{path}: {size} bytes, not a safetensors file")
        (n,) = struct.unpack("<Q", f.read(8))
        if n > size - 8:
            raise ValueError(f"{path}: header length {n} is larger than the file")
        header = json.loads(f.read(n).decode("utf-8"))
        header.pop("__metadata__", None)
        for name, e in header.items():
            if e["dtype"] != "F32":
                raise ValueError(f"{path}: tensor {name!r} has dtype {e['dtype']}, expected F32")
            begin, end = e["data_offsets"]
            if end - begin != 4 * math.prod(e["shape"]) or end > size - 8 - n:
                raise ValueError(f"{path}: tensor {name!r} has bad data_offsets {e['data_offsets']}")
            f.seek(8 + n + begin)
            out[name] = np.frombuffer(f.read(end - begin), dtype="<f4").reshape(e["shape"])
    return out


def rel_error(a, b):
    if a.size == 0:
        return 0.0
    a = a.astype(np.float64)
    b = b.astype(np.float64)
    if not (np.isfinite(a).all() and np.isfinite(b).all()):
        return math.inf
    return float(np.max(np.abs(a - b)) / max(float(np.max(np.abs(b))), 1e-12))


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("a")
    p.add_argument("b", help="the reference")
    p.add_argument("--tol", type=float, default=1e-4)
    args = p.parse_args(argv)
    try:
        a = read_safetensors(args.a)
        b = read_safetensors(args.b)
    except (OSError, ValueError, KeyError, json.JSONDecodeError) as err:
        print(f"compare: cannot read: {err}", file=sys.stderr)
        return 2

    ok = True
    only_a = sorted(set(a) - set(b))
    only_b = sorted(set(b) - set(a))
    if only_a or only_b:
        ok = False
        print(f"FAIL names differ: only in {args.a}: {only_a}; only in {args.b}: {only_b}")

    worst_name, worst = None, -1.0
    for name in sorted(set(a) & set(b)):
        if a[name].shape != b[name].shape:
            ok = False
            print(f"FAIL {name}: shape {list(a[name].shape)} vs {list(b[name].shape)}")
            continue
        err = rel_error(a[name], b[name])
        bad = not (err <= args.tol)
        ok = ok and not bad
        print(f"{'FAIL' if bad else 'ok  '} {name:50s} {str(list(a[name].shape)):>16s}  rel_err {err:.3e}")
        if err > worst:
            worst_name, worst = name, err
    if worst_name is not None:
        print(f"worst: {worst_name} rel_err {worst:.3e} (tol {args.tol:g})")
    print("PASS" if ok else "FAIL")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
