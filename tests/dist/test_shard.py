#!/usr/bin/python3
"""ZeRO-3 / FSDP sharding over MPI (parallelism.data_parallel_shard_degree):
the numerics of 2 sharded ranks against replicate and one process.

  /usr/bin/python3 tests/dist/test_shard.py path/to/remat

Each run trains a debug model for 5 steps (seq 64, one thread per rank) and
writes every step's loss and grad_norm to metrics.jsonl (full doubles):
 1. llama3 and llama4 debug: shard 2 x batch 2 against replicate 2 x batch 2
    within 1e-6 relative (the gradients are the same rank-ordered sums, but
    grad_norm sums the shards' squares, not the parameters', so clipping may
    round differently), and against 1 process x batch 4 within 1e-5 (the
    sums over the ranks round differently from the single batch);
 2. two identical sharded runs: the same bits;
 3. AC modes none, full, selective 2, op, memory_budget 0.5 and auto under
    shard: the same bits;
 4. a sharded run resumed from the checkpoint it saved at step 2 (each rank
    its shards, checkpoint.format "auto"): steps 3 to 5 give the bits of the
    uninterrupted run;
 5. the PyTorch oracle on the weights rank 0 saved after 3 sharded steps
    (gathered to one file, checkpoint.format "single_file"): validation loss
    within 1e-5;
 6. each run checks at its end that the ranks' MoE expert_bias buffers are
    equal (remat fails otherwise);
 7. HSDP, replicate 2 x shard 2 on 4 ranks x batch 1, against 1 process x
    batch 4 and shard 2 x batch 2 within 1e-5 (the groups' sums are added
    in group order, not rank order), for llama3 and llama4 debug;
 8. degrees whose product is not the number of ranks exit 2 with the message
    printed once;
 9. gradient accumulation under shard: shard 2 x batch 1 x 2 microbatches
    (training.global_batch_size 4; the later microbatch's reduce-scatters add
    into the shards) against 1 process x batch 4 within 1e-5, llama3 and
    llama4 debug, and against the same steps under replicate within 1e-6.
Exit 0 only if everything holds.
"""

import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(REPO, "tests", "oracle"))
import test_llama3_oracle as oracle  # noqa: E402  (its model, and it checks torch)
from mpi_kit import MPIRUN, check, failures, main_guarded, output, rel, worst  # noqa: E402

STEPS = 5
COMMON = ["--training.seq_len", "64", "--training.steps", str(STEPS), "--training.threads", "1",
          "--metrics.log_freq", "1", "--metrics.peak_flops", "1e11"]
SHARD = ["--parallelism.data_parallel_shard_degree", "2"]
REPLICATE = ["--parallelism.data_parallel_replicate_degree", "2"]


def train(remat, tmp, name, config, batch, ranks, extra=()):
    """Trains; returns [(loss, grad_norm)] per step and the stdout."""
    metrics = os.path.join(tmp, name + ".jsonl")
    cmd = [remat, "train", "--config", os.path.join(REPO, "configs", config), *COMMON,
           "--training.local_batch_size", str(batch), "--metrics.jsonl_path", metrics,
           "--job.dump_folder", os.path.join(tmp, name), *extra]
    if ranks > 1:
        cmd = MPIRUN + ["-np", str(ranks)] + cmd
    out = output(cmd, f"{name} ({ranks} rank(s))")
    with open(metrics) as f:
        rows = [json.loads(line) for line in f if '"loss"' in line]
    return [(r["loss"], r["grad_norm"]) for r in rows], out


def against_replicate_and_one_process(remat, tmp, config):
    one, _ = train(remat, tmp, config + "_1x4", config, 4, 1)
    replicated, _ = train(remat, tmp, config + "_replicate", config, 2, 2, REPLICATE)
    sharded, out = train(remat, tmp, config + "_shard", config, 2, 2, SHARD)
    check(f"{config}: 5 steps logged by every run", len(one) == len(sharded) == STEPS == len(
        replicated), f"{len(one)}, {len(replicated)}, {len(sharded)}")
    w = worst(sharded, replicated)
    check(f"{config}: shard 2 x 2 vs replicate 2 x 2, loss and grad_norm", w <= 1e-6,
          f"worst relative difference {w:.2e} (<= 1e-6; losses bit-identical: "
          f"{[a[0] for a in sharded] == [b[0] for b in replicated]})")
    w = worst(sharded, one)
    check(f"{config}: shard 2 x 2 vs 1 x 4, loss and grad_norm", w <= 1e-5,
          f"worst relative difference {w:.2e} (<= 1e-5)")
    check(f"{config}: the log says the run shards", "(shard 2: parameters" in out and
          "global batch 4 = 2 x 2" in out, "")
    hsdp(remat, tmp, config, one, sharded)
    accumulated(remat, tmp, config, one)
    return sharded


def accumulated(remat, tmp, config, one):
    micro = ["--training.global_batch_size", "4"]
    shard, out = train(remat, tmp, config + "_shard_accum", config, 1, 2, SHARD + micro)
    replicated, _ = train(remat, tmp, config + "_replicate_accum", config, 1, 2,
                          REPLICATE + micro)
    ok = len(shard) == len(replicated) == STEPS and \
        "gradient accumulation: 2 microbatches of 2 sequences" in out
    w = worst(shard, one) if ok else float("inf")
    check(f"{config}: shard 2 x 1 x 2 microbatches vs 1 x 4, loss and grad_norm", w <= 1e-5,
          f"worst relative difference {w:.2e} (<= 1e-5)")
    w = worst(shard, replicated) if ok else float("inf")
    check(f"{config}: shard vs replicate, both 2 x 1 x 2 microbatches", w <= 1e-6,
          f"worst relative difference {w:.2e} (<= 1e-6)")
    # Each rank books one microbatch's peak, as `remat plan` predicts it.
    peaks = re.search(r"allocator peak bytes rank 0 ([\d,]+), rank 1 ([\d,]+)", out)
    plan = json.loads(output([remat, "plan", "--config", os.path.join(REPO, "configs", config),
                              *COMMON, "--training.local_batch_size", "1", *SHARD, *micro,
                              "--json"], "remat plan"))
    predicted = plan["configured"]["peak_bytes"]
    measured = [int(p.replace(",", "")) for p in peaks.groups()] if peaks else []
    check(f"{config}: accumulated under shard, each rank's peak is the plan's",
          measured == [predicted] * 2, f"predicted {predicted:,}, measured {measured}")


def hsdp(remat, tmp, config, one, sharded):
    both, out = train(remat, tmp, config + "_hsdp", config, 1, 4, SHARD + REPLICATE)
    check(f"{config}: HSDP 5 steps logged", len(both) == STEPS, f"{len(both)}")
    for what, other in [("1 x 4", one), ("shard 2 x 2", sharded)]:
        w = worst(both, other)
        check(f"{config}: HSDP replicate 2 x shard 2 x batch 1 vs {what}", w <= 1e-5,
              f"worst relative difference {w:.2e} (<= 1e-5)")
    check(f"{config}: the log says the run is HSDP", "(replicate 2 x shard 2" in out, "")


def bad_degrees(remat, tmp):
    config = os.path.join(REPO, "configs", "llama3_debug.toml")
    for what, extra in [("HSDP 2 x 2 on 2 ranks", SHARD + REPLICATE),
                        ("shard degree 4 on 2 ranks",
                         ["--parallelism.data_parallel_shard_degree", "4"])]:
        folder = os.path.join(tmp, "bad")
        proc = subprocess.run(MPIRUN + ["-np", "2", remat, "train", "--config", config, *COMMON,
                                        "--job.dump_folder", folder, *extra],
                              capture_output=True, text=True, timeout=120)
        errors = [line for line in proc.stderr.splitlines() if line.startswith("error:")]
        check(f"{what}: exit 2, one message naming the key",
              proc.returncode == 2 and len(errors) == 1 and "shard_degree" in errors[0],
              f"exit {proc.returncode}, {errors}")


def oracle_on_saved_weights(remat, tmp):
    model = ["--model.dim", str(oracle.DIM), "--model.n_layers", str(oracle.N_LAYERS),
             "--model.n_heads", str(oracle.N_HEADS), "--model.n_kv_heads",
             str(oracle.N_KV_HEADS), "--model.vocab_size", str(oracle.VOCAB),
             "--model.multiple_of", str(oracle.MULTIPLE_OF)]
    train(remat, tmp, "saved", "llama3_debug.toml", 2, 2,
          [*SHARD, *model, "--training.steps", "3", "--checkpoint.enable", "true",
           "--checkpoint.format", "single_file"])
    weights = os.path.join(tmp, "saved", "checkpoint", "step-3.safetensors")
    check("rank 0 saved the sharded run's weights", os.path.isfile(weights))
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
    check("oracle on the sharded run's weights", rel(a, b) <= 1e-5,
          f"{a} vs {b}: {rel(a, b):.2e} (<= 1e-5)")


def main():
    remat = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="remat_shard_") as tmp:
        base = against_replicate_and_one_process(remat, tmp, "llama3_debug.toml")
        against_replicate_and_one_process(remat, tmp, "llama4_debug.toml")

        again, _ = train(remat, tmp, "again", "llama3_debug.toml", 2, 2, SHARD)
        check("two identical sharded runs: the same bits", again == base)
        for mode, flags in [("none", ["--activation_checkpoint.mode", "none"]),
                            ("full", ["--activation_checkpoint.mode", "full"]),
                            ("selective 2", ["--activation_checkpoint.mode", "selective",
                                             "--activation_checkpoint.selective_ac_option", "2"]),
                            ("op", ["--activation_checkpoint.mode", "selective",
                                    "--activation_checkpoint.selective_ac_option", "op"]),
                            ("memory_budget 0.5", ["--activation_checkpoint.mode", "memory_budget",
                                                   "--activation_checkpoint.memory_budget", "0.5"]),
                            ("auto", ["--activation_checkpoint.mode", "auto"])]:
            losses, _ = train(remat, tmp, "ac_" + mode.replace(" ", "_"), "llama3_debug.toml",
                              2, 2, SHARD + flags)
            check(f"AC {mode} under shard: the bits of the configured mode", losses == base)

        # A sharded resume from the checkpoint of step 2 continues bit for bit.
        train(remat, tmp, "resumed", "llama3_debug.toml", 2, 2,
              [*SHARD, "--checkpoint.enable", "true", "--checkpoint.interval", "2",
               "--training.steps", "2"])
        resumed, _ = train(remat, tmp, "resumed", "llama3_debug.toml", 2, 2, [
            *SHARD,
            "--checkpoint.load", os.path.join(tmp, "resumed", "checkpoint", "step-2")])
        check("sharded resume at step 2: steps 1-5 as in the uninterrupted run", resumed == base,
              f"{resumed} vs {base}")

        oracle_on_saved_weights(remat, tmp)
        bad_degrees(remat, tmp)
    return 1 if failures else 0


if __name__ == "__main__":
    main_guarded(main)
