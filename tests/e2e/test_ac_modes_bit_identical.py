"""AC never changes the numbers: 5 training steps of a GQA model give
bit-identical loss and grad_norm in every AC mode (spec.md §2), and the same
seed and config give the same numbers run after run.

Usage: test_ac_modes_bit_identical.py <path-to-remat>
"""
import json
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = sys.argv[1]
MODEL = ["--model.dim", "64", "--model.n_layers", "3", "--model.n_heads", "4",
         "--model.n_kv_heads", "2", "--model.multiple_of", "32",
         "--training.seq_len", "64", "--training.local_batch_size", "2",
         "--training.steps", "5", "--metrics.log_freq", "1", "--training.threads", "2",
         "--metrics.peak_flops", "1e11"]
AC = "--activation_checkpoint."
# Matmul FLOPs of this model at 128 tokens: wk/wv 2*128*64*32, wq/wo
# 2*128*64*64, w1/w3/w2 2*128*64*192, output 2*128*64*2048: 1e6 lies between.
MODES = {
    "none": [AC + "mode", "none"],
    "full": [AC + "mode", "full"],
    "selective 1": [AC + "mode", "selective", AC + "selective_ac_option", "1"],
    "selective 2": [AC + "mode", "selective", AC + "selective_ac_option", "2"],
    "selective 3": [AC + "mode", "selective", AC + "selective_ac_option", "3"],
    "op threshold 0": [AC + "mode", "selective", AC + "selective_ac_option", "op",
                       AC + "selective_op_ac_mm_flops_threshold", "0"],
    "op threshold 1e50": [AC + "mode", "selective", AC + "selective_ac_option", "op",
                          AC + "selective_op_ac_mm_flops_threshold", "1e50"],
    "op threshold 1e6": [AC + "mode", "selective", AC + "selective_ac_option", "op",
                         AC + "selective_op_ac_mm_flops_threshold", "1e6"],
    "op filter attention.wk": [AC + "mode", "selective", AC + "selective_ac_option", "op",
                               AC + "per_op_sac_force_recompute_mm_by_fqns", "attention.wk"],
}


def run(name, args, tmp):
    out = Path(tmp) / (name.replace(" ", "_") + ".jsonl")
    cmd = [REMAT, "train", "--config", "configs/llama3_debug.toml", *MODEL, *args,
           "--metrics.jsonl_path", str(out), "--job.dump_folder", tmp]
    result = subprocess.run(cmd, capture_output=True, text=True)
    if result.returncode != 0:
        sys.exit(f"FAIL: {name}: remat exited {result.returncode}\n{result.stderr}")
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    return [(r["step"], r["loss"], r["grad_norm"]) for r in rows], result.stdout


def main():
    with tempfile.TemporaryDirectory() as tmp:
        results = {name: run(name, args, tmp) for name, args in MODES.items()}
        again, _ = run("none again", MODES["none"], tmp)
    reference, _ = results["none"]
    failures = []
    if len(reference) != 5:
        failures.append(f"expected 5 logged steps, got {len(reference)}")
    if not reference[-1][1] < reference[0][1]:
        failures.append(f"loss did not fall: {reference}")
    if again != reference:
        failures.append(f"same seed and config differ run to run: {again} vs {reference}")
    for name, (rows, stdout) in results.items():
        same = rows == reference
        print(f"{name:26s} {'identical' if same else 'DIFFERENT'}  last loss {rows[-1][1]!r}")
        if not same:
            failures.append(f"{name}: {rows} != {reference}")
    # The threshold between the smallest and largest matmul must really split them.
    table = subprocess.run([REMAT, "train", "--config", "configs/llama3_debug.toml", *MODEL,
                            *MODES["op threshold 1e6"], AC + "log_mm_flops", "true",
                            "--training.steps", "0"], capture_output=True, text=True).stdout
    if "below FLOP threshold" not in table or "alternation: odd" not in table:
        failures.append("threshold 1e6 does not separate the matmuls:\n" + table)
    if failures:
        print("FAIL:\n" + "\n".join(failures))
        sys.exit(1)
    print("PASS: loss and grad_norm bit-identical across", len(MODES), "AC modes and reruns")


main()
