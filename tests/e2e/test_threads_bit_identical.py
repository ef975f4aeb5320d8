"""Loss, grad_norm and every gradient are bit-identical for any training.threads.

For the llama3 and llama4 debug models: 3 training steps at threads 1, 2 and 3
give the same loss and grad_norm in every step (compared as the exact decimal
text of the metrics JSON), and `remat grads` writes byte-identical gradient
files. A resume on a machine with another core count then continues exactly
(issue 9, finding 14). The shape (batch 3 x seq 96) makes every kernel go
parallel and split its rows unevenly.

Usage: test_threads_bit_identical.py <path-to-remat>
"""
import os
import struct
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
SHAPE = ["--training.seq_len", "96", "--training.local_batch_size", "3"]
THREADS = [1, 2, 3]


def npy_int32(tokens):
    header = "{'descr': '<i4', 'fortran_order': False, 'shape': (%d,), }" % len(tokens)
    header += " " * (64 - (10 + len(header) + 1) % 64) + "\n"
    return (b"\x93NUMPY\x01\x00" + struct.pack("<H", len(header)) + header.encode() +
            struct.pack("<%di" % len(tokens), *tokens))


def run(argv, cwd):
    proc = subprocess.run(argv, cwd=cwd, capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} failed ({proc.returncode}):\n{proc.stderr}")
    return proc


def main():
    failures = 0
    for model in ["llama3", "llama4"]:
        config = str(REPO / "configs" / f"{model}_debug.toml")
        with tempfile.TemporaryDirectory(prefix="remat-threads-") as tmp:
            tmp = Path(tmp)
            (tmp / "tokens.npy").write_bytes(npy_int32([(i * 131 + 7) % 2048 for i in range(400)]))
            run([REMAT, "train", "--config", config, *SHAPE, "--job.dump_folder", "out",
                 "--checkpoint.create_seed_checkpoint", "true"], tmp)
            seed = tmp / "out" / "checkpoint" / "step-0.safetensors"
            metrics, grads = {}, {}
            for t in THREADS:
                run([REMAT, "train", "--config", config, *SHAPE, "--training.steps", "3",
                     "--metrics.log_freq", "1", "--training.threads", str(t),
                     "--metrics.jsonl_path", f"m{t}.jsonl", "--job.dump_folder", "out"], tmp)
                metrics[t] = [line.split(', "lr"')[0]
                              for line in (tmp / f"m{t}.jsonl").read_text().splitlines()]
                run([REMAT, "grads", "--config", config, *SHAPE, "--training.threads", str(t),
                     "--checkpoint.load", str(seed), "--tokens", "tokens.npy",
                     "--out", f"g{t}.safetensors"], tmp)
                grads[t] = (tmp / f"g{t}.safetensors").read_bytes()
            for t in THREADS[1:]:
                same_metrics = metrics[t] == metrics[1] and len(metrics[1]) == 3
                same_grads = grads[t] == grads[1]
                for ok, what in ((same_metrics, "loss and grad_norm of 3 steps"),
                                 (same_grads, "every gradient (grads file bytes)")):
                    print(f"{'ok  ' if ok else 'FAIL'} {model}: {what}, threads {t} vs 1",
                          flush=True)
                    failures += not ok
                if not same_metrics:
                    print("   threads 1:", metrics[1], "\n   threads", t, ":", metrics[t])
    print(f"{failures} failing check(s)" if failures else "all checks ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
