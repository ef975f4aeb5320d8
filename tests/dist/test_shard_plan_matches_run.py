#!/usr/bin/python3
"""`remat plan --parallelism.data_parallel_shard_degree 2` predicts what each
rank of a 2-rank sharded `remat train` measures, to the byte.

  /usr/bin/python3 tests/dist/test_shard_plan_matches_run.py path/to/remat

For the llama3 and llama4 debug models and the wide benchmark model (at a
smaller batch and sequence, to keep the test quick), in every AC mode the
plan compares,
one sharded training step under `mpirun -np 2`: each rank's allocator peak
and its parts at that peak (parameters, gradients, optimizer state,
activations, temporaries) must equal the plan's prediction exactly. The peak
includes the gathered blocks in flight (the one computing and the one
prefetched) and the full gradients before their reduce-scatter. HSDP
(replicate 2 x shard 2, 4 ranks) holds what shard 2 holds: each of its
ranks' peak and parts equal the plan's too, as do those of a memory_budget
run (the solver plans for what a rank holds) and of a run with the chunked
loss head (model.loss_chunk_rows). Also: the
sharded parameters, gradients and optimizer state of a rank are about half
of one process's (1/2 plus the padding of each unit to an even split,
under 0.1% here).
"""
import json
import re
import shutil
import subprocess
import sys
import tempfile

REMAT = sys.argv[1]
MPIRUN = ["mpirun", "--allow-run-as-root", "--oversubscribe"]
AC = "--activation_checkpoint."
SMALL = ["--training.local_batch_size", "2", "--training.seq_len", "128"]
MODELS = {
    "llama3 debug": ["--config", "configs/llama3_debug.toml", *SMALL],
    "llama4 debug": ["--config", "configs/llama4_debug.toml", *SMALL],
    # The benchmark's wider model (dim 1024, 8 layers, 16 heads), batch 1 x seq 256.
    "wide": ["--config", "configs/llama3_debug.toml", "--model.dim", "1024", "--model.n_layers",
             "8", "--model.n_heads", "16", "--model.n_kv_heads", "16",
             "--training.local_batch_size", "1", "--training.seq_len", "256"],
}
SHARD = ["--parallelism.data_parallel_shard_degree", "2"]
PARTS = ("parameters", "gradients", "optimizer_state", "activations", "temporaries")


def mode_args(name):
    """Turns a plan row back into overrides for `remat train`."""
    if name in ("none", "full"):
        return [AC + "mode", name]
    if name == "selective 2":
        return [AC + "mode", "selective", AC + "selective_ac_option", "2"]
    threshold = {"op threshold 0": "0", "op threshold 1e50": "1e50"}.get(name)
    if threshold is None:
        return None  # "op configured" repeats one of the others here
    return [AC + "mode", "selective", AC + "selective_ac_option", "op",
            AC + "selective_op_ac_mm_flops_threshold", threshold,
            AC + "per_op_sac_force_recompute_mm_by_fqns", ""]


def measured_parts(out):
    """{rank: {part: bytes}} from the run's 'memory per rank at the step peak' line."""
    line = re.search(r"memory per rank at the step peak: (.*)", out).group(1)
    ranks = {}
    for chunk in line.split("; "):
        words = chunk.replace(",", "").split()
        ranks[int(words[1])] = {words[i]: int(words[i + 1]) for i in range(2, len(words), 2)}
    return ranks


def against_plan(label, base, ranks, tmp):
    """Failures of each rank's peak and parts against the plan, in the configured mode."""
    plan = json.loads(subprocess.run([REMAT, "plan", *base, "--json"], capture_output=True,
                                     text=True, check=True).stdout)["configured"]
    run = subprocess.run(MPIRUN + ["-np", str(ranks), REMAT, "train", *base, "--training.steps",
                                   "1", "--metrics.peak_flops", "1e11", "--job.dump_folder", tmp],
                         capture_output=True, text=True, timeout=300)
    if run.returncode != 0:
        return [f"{label}: train failed: {run.stderr[-2000:]}"]
    want = {p: plan["at_peak"][p] for p in PARTS}
    failures = []
    for rank, got in sorted(measured_parts(run.stdout).items()):
        ok = got == want and sum(got.values()) == plan["peak_bytes"]
        print(f"{label} rank {rank}: predicted {plan['peak_bytes']:>11,d}  "
              f"measured {sum(got.values()):>11,d}  {'ok' if ok else 'OFF'}")
        if not ok:
            failures.append(f"{label} rank {rank}: plan {want}, run {got}")
    return failures


def main():
    failures = []
    tmp = tempfile.mkdtemp(prefix="remat_shard_plan_")
    for name, model in MODELS.items():
        base = [*model, "--training.threads", "1"]
        single = json.loads(subprocess.run([REMAT, "plan", *base, "--json"], capture_output=True,
                                           text=True, check=True).stdout)
        plan = json.loads(subprocess.run([REMAT, "plan", *base, *SHARD, "--json"],
                                         capture_output=True, text=True, check=True).stdout)
        state = {p: plan["modes"][0]["at_peak"][p] for p in PARTS[:3]}
        whole = {p: single["modes"][0]["at_peak"][p] for p in PARTS[:3]}
        for p in PARTS[:3]:
            ratio = state[p] / whole[p]
            print(f"{name}: {p} per rank / one process = {ratio:.4f}")
            if not 0.5 <= ratio <= 0.501:
                failures.append(f"{name}: {p} per rank is {ratio:.4f} of one process's")
        for row in plan["modes"]:
            args = mode_args(row["name"])
            if args is None:
                continue
            run = subprocess.run(MPIRUN + ["-np", "2", REMAT, "train", *base, *SHARD, *args,
                                           "--training.steps", "1", "--metrics.peak_flops", "1e11",
                                           "--job.dump_folder", tmp],
                                 capture_output=True, text=True, timeout=300)
            if run.returncode != 0:
                failures.append(f"{name} {row['name']}: train failed: {run.stderr[-2000:]}")
                continue
            want = {p: row["at_peak"][p] for p in PARTS}
            for rank, got in sorted(measured_parts(run.stdout).items()):
                ok = got == want and sum(got.values()) == row["peak_bytes"]
                print(f"{name} {row['name']:18s} rank {rank}: predicted {row['peak_bytes']:>11,d}"
                      f"  measured {sum(got.values()):>11,d}  {'ok' if ok else 'OFF'}")
                if not ok:
                    failures.append(f"{name} {row['name']} rank {rank}: plan {want}, run {got}")
    debug = [*MODELS["llama3 debug"], "--training.threads", "1", *SHARD]
    failures += against_plan("HSDP 2 x 2, llama3 debug", [
        *debug, "--parallelism.data_parallel_replicate_degree", "2"], 4, tmp)
    # The budget solver plans for what a rank holds, in `remat plan` and in the run alike.
    failures += against_plan("memory_budget 82000000B, llama3 debug", [
        *debug, AC + "mode", "memory_budget", AC + "memory_budget", "82000000B"], 2, tmp)
    # The chunked loss head: its logits chunk is a temporary of the rank.
    failures += against_plan("chunked loss (100 rows), llama3 debug", [
        *debug, "--model.loss_chunk_rows", "100"], 2, tmp)
    shutil.rmtree(tmp)
    if failures:
        print("FAIL:\n" + "\n".join(failures))
        sys.exit(1)
    print("PASS")


main()
