#!/usr/bin/python3
"""Data parallelism over MPI (parallelism.data_parallel_replicate_degree): the
numerics of 2 ranks against one process.

  /usr/bin/python3 tests/dist/test_data_parallel.py path/to/remat

Each run trains a debug model for 5 steps (seq 64, one thread per rank) and
writes every step's loss and grad_norm to metrics.jsonl (full doubles):
 1. llama3 and llama4 debug: 2 ranks x batch 2 against 1 process x batch 4,
    the same data: loss and grad_norm within 1e-5 relative at every step
    (the sums over the ranks round differently from the single batch);
 2. two identical 2-rank runs: the same bits;
 3. AC modes none, full, selective 2, op, memory_budget 0.5 and auto under
    2 ranks: the same bits;
 4. a 2-rank run resumed from the checkpoint rank 0 saved at step 2: steps
    3 to 5 give the bits of the uninterrupted run;
 5. the PyTorch oracle on the weights rank 0 saved after 3 steps of a 2-rank
    run (the oracle test's small llama3): validation loss within 1e-5;
 6. gradient accumulation under 2 ranks: 2 ranks x batch 1 x 2 microbatches
    (training.global_batch_size 4) against 1 process x batch 4: within 1e-5,
    all-reducing once per step (the microbatches' sum, then divided);
 7. every 2-rank run ends with its replicas checked equal (remat compares a
    checksum of every rank's parameters and MoE expert_bias, and fails
    otherwise) and prints the peak of each rank, which `remat plan` with the
    same settings predicts to the byte.
Exit 0 only if everything holds.
"""

import json
import os
import re
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(REPO, "tests", "oracle"))
import test_llama3_oracle as oracle  # noqa: E402  (its model, and it checks torch)
from mpi_kit import MPIRUN, check, failures, main_guarded, output, rel, worst  # noqa: E402

TOL = 1e-5
STEPS = 5
COMMON = ["--training.seq_len", "64", "--training.steps", str(STEPS), "--training.threads", "1",
          "--metrics.log_freq", "1", "--metrics.peak_flops", "1e11"]


def train(remat, tmp, name, config, batch, ranks, extra=()):
    """Trains; returns [(loss, grad_norm)] per step and the stdout."""
    metrics = os.path.join(tmp, name + ".jsonl")
    cmd = [remat, "train", "--config", os.path.join(REPO, "configs", config), *COMMON,
           "--training.local_batch_size", str(batch), "--metrics.jsonl_path", metrics,
           "--job.dump_folder", os.path.join(tmp, name), *extra]
    if ranks > 1:
        cmd = MPIRUN + ["-np", str(ranks)] + cmd + [
            "--parallelism.data_parallel_replicate_degree", str(ranks)]
    out = output(cmd, f"{name} ({ranks} rank(s))")
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if '"loss"' in line]
    return [(r["loss"], r["grad_norm"]) for r in rows], out


def against_single_process(remat, tmp, config):
    one, _ = train(remat, tmp, config + "_1x4", config, 4, 1)
    two, out = train(remat, tmp, config + "_2x2", config, 2, 2)
    check(f"{config}: 5 steps logged by both", len(one) == len(two) == STEPS,
          f"{len(one)} and {len(two)}")
    w = worst(one, two)
    check(f"{config}: 2 ranks x 2 vs 1 x 4, loss and grad_norm", w <= TOL,
          f"worst relative difference {w:.2e} (<= {TOL:g})")
    check(f"{config}: the log says what is global", "global batch 4 = 2 x 2" in out and
          "global tps:" in out, "")
    peaks = re.search(r"memory per rank: allocator peak bytes rank 0 ([\d,]+), rank 1 ([\d,]+)",
                      out)
    check(f"{config}: each rank's peak is printed", peaks is not None)
    # Replicas hold what one process holds at the local batch: `remat plan`
    # with the run's settings predicts each rank's allocator peak exactly.
    plan = json.loads(output([remat, "plan", "--config", os.path.join(REPO, "configs", config),
                           *COMMON, "--training.local_batch_size", "2",
                           "--parallelism.data_parallel_replicate_degree", "2", "--json"],
                          "remat plan"))
    predicted = plan["configured"]["peak_bytes"]
    measured = [int(p.replace(",", "")) for p in peaks.groups()] if peaks else []
    check(f"{config}: each rank's peak is the plan's", measured == [predicted] * 2,
          f"predicted {predicted:,}, measured {measured}")
    return two


def main():
    remat = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="remat_dp_") as tmp:
        base = against_single_process(remat, tmp, "llama3_debug.toml")
        against_single_process(remat, tmp, "llama4_debug.toml")
        for config in ("llama3_debug.toml", "llama4_debug.toml"):
            one, _ = train(remat, tmp, config + "_accum_1x4", config, 4, 1)
            accumulated, out = train(remat, tmp, config + "_accum_2x1x2", config, 1, 2,
                                     ["--training.global_batch_size", "4"])
            w = worst(one, accumulated) if len(one) == len(accumulated) == STEPS else float("inf")
            check(f"{config}: 2 ranks x 1 x 2 microbatches vs 1 x 4, loss and grad_norm",
                  w <= TOL and "gradient accumulation: 2 microbatches of 2 sequences" in out,
                  f"worst relative difference {w:.2e} (<= {TOL:g})")

        again, _ = train(remat, tmp, "again", "llama3_debug.toml", 2, 2)
        check("two identical 2-rank runs: the same bits", again == base)
        for mode, flags in [("none", ["--activation_checkpoint.mode", "none"]),
                            ("full", ["--activation_checkpoint.mode", "full"]),
                            ("selective 2", ["--activation_checkpoint.selective_ac_option", "2"]),
                            ("memory_budget 0.5", ["--activation_checkpoint.mode", "memory_budget",
                                                   "--activation_checkpoint.memory_budget", "0.5"]),
                            ("auto", ["--activation_checkpoint.mode", "auto"])]:
            losses, _ = train(remat, tmp, "ac_" + mode.replace(" ", "_"), "llama3_debug.toml",
                              2, 2, flags)
            check(f"AC {mode} vs op under 2 ranks: the same bits", losses == base)

        # A 2-rank resume from rank 0's checkpoint of step 2 continues bit for bit.
        train(remat, tmp, "resumed", "llama3_debug.toml", 2, 2,
              ["--checkpoint.enable", "true", "--checkpoint.interval", "2",
               "--training.steps", "2"])
        resumed, _ = train(remat, tmp, "resumed", "llama3_debug.toml", 2, 2, [
            "--checkpoint.load", os.path.join(tmp, "resumed", "checkpoint", "step-2.safetensors")])
        # The resumed run appends its steps 3-5 to the metrics of steps 1-2.
        check("2-rank resume at step 2: steps 1-5 as in the uninterrupted run",
              resumed == base, f"{resumed} vs {base}")

        # The oracle on the weights a 2-rank run saved.
        model = ["--model.dim", str(oracle.DIM), "--model.n_layers", str(oracle.N_LAYERS),
                 "--model.n_heads", str(oracle.N_HEADS), "--model.n_kv_heads",
                 str(oracle.N_KV_HEADS), "--model.vocab_size", str(oracle.VOCAB),
                 "--model.multiple_of", str(oracle.MULTIPLE_OF)]
        train(remat, tmp, "saved", "llama3_debug.toml", 2, 2,
              [*model, "--training.steps", "3", "--checkpoint.enable", "true"])
        weights = os.path.join(tmp, "saved", "checkpoint", "step-3.safetensors")
        check("rank 0 saved the 2-rank run's weights", os.path.isfile(weights))
        args_json = os.path.join(tmp, "args.json")
        with open(args_json, "w") as f:
            json.dump(oracle.MODEL_ARGS, f)
        tokens = os.path.join(tmp, "tokens.npy")
        rng = oracle.np.random.default_rng(7)
        oracle.np.save(tokens, rng.integers(0, oracle.VOCAB, size=5 * 65).astype(oracle.np.int32))
        ours = output([remat, "eval", "--config", os.path.join(REPO, "configs", "llama3_debug.toml"),
                    *model, "--training.seq_len", "64", "--checkpoint.load", weights,
                    "--validation.dataset", tokens], "remat eval")
        ref = output([oracle.PY, oracle.REF, "eval", "--args", args_json, "--weights", weights,
                   "--tokens", tokens, "--seq", "64"], "llama_ref.py eval")
        a = float(re.search(r"validation loss: (\S+)", ours).group(1))
        b = float(re.search(r"validation loss: (\S+)", ref).group(1))
        check("oracle on the 2-rank run's weights", rel(a, b) <= TOL,
              f"{a} vs {b}: {rel(a, b):.2e} (<= {TOL:g})")
    return 1 if failures else 0


if __name__ == "__main__":
    main_guarded(main)
