#!/usr/bin/python3
"""Sharded checkpoints (checkpoint.format = "sharded"; README "Sharded
checkpoints") under mpirun -np 2, and one process.

  /usr/bin/python3 tests/dist/test_sharded_checkpoint.py path/to/remat

 1. a 2-rank run (llama3 and llama4 debug, seq 64, 5 steps) saving every 2
    steps writes step folders holding one shard file per rank and the index,
    nothing left under a temporary name;
 1b. the same with the 2 ranks training ZeRO-3 sharded
    (data_parallel_shard_degree 2), each rank writing the shards it holds;
 2. resumed with 2 ranks from step 2: steps 3 to 5 give the bits of the
    uninterrupted run;
 3. resumed as one process (no mpirun) with local batch 4, the same global
    batch: steps 3 to 5 within 1e-5 relative of the 2-rank run (the model
    and optimizer state resharded from 2 ranks to 1); and the other way, a
    one-process sharded checkpoint resumed by 2 ranks x batch 2;
 4. `remat checkpoint convert` turns a 2-rank sharded checkpoint into the
    very bytes a single-file save of the same run writes, and the PyTorch
    oracle on the converted weights agrees with `remat eval` within 1e-5
    (which reads the step folder as the converted file); bad arguments are
    exit 2 with nothing written;
 5. a save that cannot complete (rank 1's shard file blocked) ends the job
    non-zero and leaves that step folder without an index; loading it is
    exit 2 naming the incomplete save; the previous step still resumes;
 6. rank 1 killed (SIGKILL) while a run saves every step: every step folder
    with an index loads, and the last of them resumes;
 7. damaged checkpoints are exit 2 with the message printed once: a shard cut
    short (one process and 2 ranks), a flipped byte, a malformed index;
 8. Ctrl-C on mpirun (SIGINT to mpirun, with --mca odls_base_sigkill_timeout
    so that Open MPI's SIGTERM leaves the ranks time): both ranks stop after
    the same step, save it (a complete sharded checkpoint: each rank's shard
    of that step and the index) and exit 143; resuming from it continues with the
    bits of an uninterrupted run;
 9. checkpoint.last_save_model_weights_only on 2 ZeRO-3 ranks: the last
    step's save is a sharded checkpoint of the weights alone (its index says
    so, its shards hold no moments), the save before it keeps the moments,
    and its conversion holds the very weights of the usual run's last save;
10. checkpoint.keep_latest_k 2 on 2 ZeRO-3 ranks saving every step: only the
    latest two step folders are left, each whole (index and both shards);
    rank 0 alone removes, naming each removed folder once; the same command
    with more steps resumes from the latest and removes the older ones again.
Exit 0 only if everything holds.
"""

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
sys.dont_write_bytecode = True
sys.path.insert(0, os.path.join(REPO, "tests", "oracle"))
import test_llama3_oracle as oracle  # noqa: E402  (its model, and it checks torch)
from compare import read_safetensors  # noqa: E402
from mpi_kit import MPIRUN, check, failures, main_guarded, rank_pid, rel, run  # noqa: E402

TOL = 1e-5
COMMON = ["--training.seq_len", "64", "--training.threads", "1", "--metrics.log_freq", "1",
          "--metrics.peak_flops", "1e11", "--checkpoint.format", "sharded"]


def command(remat, tmp, name, config, batch, ranks, extra=(), dp="replicate"):
    cmd = [remat, "train", "--config", os.path.join(REPO, "configs", config), *COMMON,
           "--training.local_batch_size", str(batch),
           "--metrics.jsonl_path", os.path.join(tmp, name + ".jsonl"),
           "--job.dump_folder", os.path.join(tmp, name), *extra]
    if ranks > 1:
        cmd = MPIRUN + ["-np", str(ranks)] + cmd + [
            f"--parallelism.data_parallel_{dp}_degree", str(ranks)]
    return cmd


def steps(tmp, name):
    """step -> (loss, grad_norm), full doubles, from the run's metrics."""
    with open(os.path.join(tmp, name + ".jsonl")) as f:
        rows = [json.loads(line) for line in f if '"loss"' in line]
    return {r["step"]: (r["loss"], r["grad_norm"]) for r in rows}


def folder(tmp, name, step):
    return os.path.join(tmp, name, "checkpoint", f"step-{step}")


def save_and_resume(remat, tmp, config, dp="replicate"):
    """`dp` "shard": the 2-rank runs train ZeRO-3 sharded and save the shards they hold."""
    base = config.split("_")[0] + ("" if dp == "replicate" else "_" + dp)
    cmd = command(remat, tmp, base, config, 2, 2, ["--training.steps", "5",
                                                    "--checkpoint.enable", "true",
                                                    "--checkpoint.interval", "2"], dp)
    run(cmd, f"{base}: 2-rank run")
    straight = steps(tmp, base)
    files = sorted(os.listdir(folder(tmp, base, 2)))
    check(f"{base}: step-2 holds each rank's shard and the index",
          files == ["index.json", "shard-0-of-2.safetensors", "shard-1-of-2.safetensors"],
          str(files))
    everything = [f for _, _, fs in os.walk(os.path.join(tmp, base)) for f in fs]
    check(f"{base}: nothing left under a temporary name",
          not any(f.endswith(".tmp") for f in everything))
    check(f"{base}: the run saved steps 2, 4 and 5 (the last)",
          all(os.path.isfile(os.path.join(folder(tmp, base, s), "index.json"))
              for s in (2, 4, 5)))

    load = ["--training.steps", "5", "--checkpoint.load", folder(tmp, base, 2)]
    run(command(remat, tmp, base + "_2r", config, 2, 2, load, dp), f"{base}: 2-rank resume")
    resumed = steps(tmp, base + "_2r")
    check(f"{base}: 2-rank resume at step 2: steps 3-5 bit for bit",
          resumed == {s: straight[s] for s in (3, 4, 5)}, f"{resumed} vs {straight}")

    out = run(command(remat, tmp, base + "_1r", config, 4, 1, load),
              f"{base}: 1-process resume").stdout
    single = steps(tmp, base + "_1r")
    worst = max((max(rel(single[s][0], straight[s][0]), rel(single[s][1], straight[s][1]))
                 for s in (3, 4, 5)), default=1) if sorted(single) == [3, 4, 5] else 1
    check(f"{base}: resumed as 1 process x batch 4: steps 3-5 within {TOL:g}", worst <= TOL,
          f"worst relative difference {worst:.2e}")
    check(f"{base}: the resharded resume says so",
          "resharded: the checkpoint (step 2) was saved by 2 ranks x local_batch_size 2 = "
          "global batch 4, this run has 1 x 4 = 4" in out, out[-800:])
    return straight


def one_to_two(remat, tmp):
    """A sharded checkpoint of one process, resumed by 2 ranks."""
    run(command(remat, tmp, "one", "llama3_debug.toml", 4, 1, [
        "--training.steps", "5", "--checkpoint.enable", "true", "--checkpoint.interval", "2"]),
        "1-process sharded run")
    straight = steps(tmp, "one")
    check("1 process: its step folder holds one shard and the index",
          sorted(os.listdir(folder(tmp, "one", 2))) == ["index.json", "shard-0-of-1.safetensors"])
    run(command(remat, tmp, "one_2r", "llama3_debug.toml", 2, 2, [
        "--training.steps", "5", "--checkpoint.load", folder(tmp, "one", 2)]),
        "2-rank resume of a 1-process checkpoint")
    two = steps(tmp, "one_2r")
    worst = max((max(rel(two[s][0], straight[s][0]), rel(two[s][1], straight[s][1]))
                 for s in (3, 4, 5)), default=1) if sorted(two) == [3, 4, 5] else 1
    check(f"1 process resumed as 2 ranks x batch 2: steps 3-5 within {TOL:g}", worst <= TOL,
          f"worst relative difference {worst:.2e}")


def convert_and_oracle(remat, tmp):
    model = ["--model.dim", str(oracle.DIM), "--model.n_layers", str(oracle.N_LAYERS),
             "--model.n_heads", str(oracle.N_HEADS), "--model.n_kv_heads",
             str(oracle.N_KV_HEADS), "--model.vocab_size", str(oracle.VOCAB),
             "--model.multiple_of", str(oracle.MULTIPLE_OF), "--training.steps", "3",
             "--checkpoint.enable", "true"]
    run(command(remat, tmp, "small", "llama3_debug.toml", 2, 2, model), "sharded small run")
    run(command(remat, tmp, "small_file", "llama3_debug.toml", 2, 2,
                [*model, "--checkpoint.format", "single_file"]), "single-file small run")
    converted = os.path.join(tmp, "converted.safetensors")
    run([remat, "checkpoint", "convert", folder(tmp, "small", 3), converted], "convert")
    with open(converted, "rb") as a, open(os.path.join(
            tmp, "small_file", "checkpoint", "step-3.safetensors"), "rb") as b:
        check("converted: the bytes of the single-file save of the same run", a.read() == b.read())
    bad_out = os.path.join(tmp, "never.safetensors")
    for label, args, message in [
            ("no subcommand", [], "expected convert"),
            ("a file for SRC", [converted, bad_out], "expected a sharded checkpoint's step folder"),
            ("a folder that is no step folder", [os.path.join(tmp, "small"), bad_out],
             "holds neither index.json nor shard files"),
            ("one argument", [folder(tmp, "small", 3)], "takes SRC and DST"),
            # A resume from a folder would take it for step 5.
            ("a DST named for another step",
             [folder(tmp, "small", 3), os.path.join(tmp, "step-5.safetensors")],
             "names step 5, but")]:
        proc = run([remat, "checkpoint", *(["convert"] if args else []), *args], label,
                   status=None)
        check(f"convert, {label}: exit 2 naming the problem, nothing written",
              proc.returncode == 2 and message in proc.stderr and not os.path.exists(bad_out)
              and not os.path.exists(os.path.join(tmp, "step-5.safetensors")),
              f"{proc.returncode}: {proc.stderr[-300:]}")
    # Indexes a load would refuse: convert refuses them too, and the file
    # already at DST keeps its bytes.
    keep = os.path.join(tmp, "keep.safetensors")
    with open(keep, "wb") as f:
        f.write(b"an earlier file")
    for label, edit, message in [
            ("an index of no units", lambda index: index.update(units=[]), "lists no parameters"),
            ("a negative training.steps", lambda index: index["run"].update(
                {"training.steps": "-1"}), "expected a non-negative decimal integer")]:
        edited = os.path.join(tmp, "edited-" + label.replace(" ", "_"))
        shutil.copytree(folder(tmp, "small", 3), edited)
        with open(os.path.join(edited, "index.json")) as f:
            index = json.load(f)
        edit(index)
        with open(os.path.join(edited, "index.json"), "w") as f:
            json.dump(index, f)
        proc = run([remat, "checkpoint", "convert", edited, keep], label, status=None)
        with open(keep, "rb") as f:
            kept = f.read() == b"an earlier file"
        check(f"convert, {label}: exit 2 naming the problem, DST untouched",
              proc.returncode == 2 and message in proc.stderr and kept,
              f"{proc.returncode}: {proc.stderr[-300:]}")
    args_json = os.path.join(tmp, "args.json")
    with open(args_json, "w") as f:
        json.dump(oracle.MODEL_ARGS, f)
    tokens = os.path.join(tmp, "tokens.npy")
    rng = oracle.np.random.default_rng(7)
    oracle.np.save(tokens, rng.integers(0, oracle.VOCAB, size=5 * 65).astype(oracle.np.int32))
    evals = []
    for weights in (converted, folder(tmp, "small", 3)):
        ours = run([remat, "eval", "--config", os.path.join(REPO, "configs", "llama3_debug.toml"),
                    *model[:12], "--training.seq_len", "64", "--checkpoint.load", weights,
                    "--validation.dataset", tokens], "remat eval").stdout
        evals.append(float(re.search(r"validation loss: (\S+)", ours).group(1)))
    ref = run([oracle.PY, oracle.REF, "eval", "--args", args_json, "--weights", converted,
               "--tokens", tokens, "--seq", "64"], "llama_ref.py eval").stdout
    b = float(re.search(r"validation loss: (\S+)", ref).group(1))
    check("oracle on the converted 2-rank weights", rel(evals[0], b) <= TOL,
          f"{evals[0]} vs {b}: {rel(evals[0], b):.2e} (<= {TOL:g})")
    check("eval reads the sharded folder as the converted file", evals[0] == evals[1],
          f"{evals}")


def incomplete_save(remat, tmp):
    name = "blocked"
    # Rank 1's shard of step 4 cannot be written: a folder holds its name.
    os.makedirs(os.path.join(folder(tmp, name, 4), "shard-1-of-2.safetensors"))
    proc = run(command(remat, tmp, name, "llama3_debug.toml", 2, 2, [
        "--training.steps", "5", "--checkpoint.enable", "true", "--checkpoint.interval", "2"]),
        "blocked save", status=None)
    check("a save rank 1 cannot write ends the job non-zero", proc.returncode != 0,
          str(proc.returncode))
    check("the blocked step folder has no index",
          not os.path.exists(os.path.join(folder(tmp, name, 4), "index.json")))
    proc = run(command(remat, tmp, name + "_r", "llama3_debug.toml", 2, 1, [
        "--training.steps", "5", "--checkpoint.load", folder(tmp, name, 4)]),
        "load the incomplete save", status=2)
    check("loading it is exit 2 naming the incomplete save",
          proc.stderr.count("an incomplete sharded checkpoint") == 1, proc.stderr[-600:])
    run(command(remat, tmp, name + "_r2", "llama3_debug.toml", 2, 2, [
        "--training.steps", "5", "--checkpoint.load", folder(tmp, name, 2)]),
        "resume from the step before")
    check("the step before it resumes", len(steps(tmp, name + "_r2")) == 3)


def start(cmd, log_path, until):
    """Starts `cmd`; returns (process, log) once the log shows `until`."""
    log = open(log_path, "w+")
    proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, text=True)
    deadline = time.time() + 120
    while time.time() < deadline and proc.poll() is None:
        log.seek(0)
        if until in log.read():
            return proc, log
        time.sleep(0.1)
    proc.kill()
    log.seek(0)
    raise RuntimeError(f"the run did not reach '{until}':\n" + log.read()[-3000:])


def killed_mid_save(remat, tmp):
    name = "killed"
    proc, log = start(command(remat, tmp, name, "llama3_debug.toml", 2, 2, [
        "--training.steps", "1000", "--checkpoint.enable", "true", "--checkpoint.interval", "1"]),
        os.path.join(tmp, name + ".txt"), "step:  4")
    os.kill(rank_pid(proc.pid, 1, time.time() + 10), signal.SIGKILL)
    proc.wait(timeout=60)
    log.close()
    root = os.path.join(tmp, name, "checkpoint")
    complete = sorted(int(d[5:]) for d in os.listdir(root)
                      if os.path.isfile(os.path.join(root, d, "index.json")))
    check("killed mid-run: complete checkpoints remain", len(complete) >= 3, str(complete))
    loads = [s for s in complete if run(command(
        remat, tmp, f"{name}_{s}", "llama3_debug.toml", 4, 1,
        ["--training.steps", str(s), "--checkpoint.load", folder(tmp, name, s)]),
        "load", status=None).returncode == 0]
    check("killed mid-run: every step folder with an index loads", loads == complete,
          f"{loads} of {complete}")
    last = complete[-1] if complete else 0
    run(command(remat, tmp, name + "_resumed", "llama3_debug.toml", 2, 2, [
        "--training.steps", str(last + 1), "--checkpoint.load", folder(tmp, name, last)]),
        "resume the last complete checkpoint")
    check("killed mid-run: the last complete checkpoint resumes",
          list(steps(tmp, name + "_resumed")) == [last + 1])


def damaged(remat, tmp, source):
    def expect_exit_2(label, path, message, ranks=1):
        proc = run(command(remat, tmp, "damaged_out", "llama3_debug.toml", 2, ranks, [
            "--training.steps", "3", "--checkpoint.load", path]), label, status=None)
        check(f"{label}: exit 2, the message once", proc.returncode == 2 and
              proc.stderr.count(message) == 1, f"{proc.returncode}: {proc.stderr[-500:]}")

    def copy(name):
        target = os.path.join(tmp, "damaged", name)
        subprocess.run(["cp", "-r", source, target], check=True)
        return target

    cut = copy("cut")
    shard = os.path.join(cut, "shard-1-of-2.safetensors")
    os.truncate(shard, os.path.getsize(shard) - 8)
    expect_exit_2("a shard cut short", cut, "the index records")
    expect_exit_2("a shard cut short, 2 ranks", cut, "the index records", ranks=2)
    flipped = copy("flipped")
    with open(os.path.join(flipped, "shard-0-of-2.safetensors"), "r+b") as f:
        f.seek(-5, os.SEEK_END)
        byte = f.read(1)
        f.seek(-5, os.SEEK_END)
        f.write(bytes([byte[0] ^ 0x40]))
    expect_exit_2("a flipped byte", flipped, "fails its checksum")
    malformed = copy("malformed")
    with open(os.path.join(malformed, "index.json"), "r+") as f:
        index = json.load(f)
        index["units"][1]["chunk"] += 1
        f.seek(0)
        f.truncate()
        json.dump(index, f)
    expect_exit_2("a malformed index", malformed, "expected ceil(numel")
    # A shard of the same step from a run that differs only in its seed: same
    # rank, step and size, other weights. It loaded silently before shards
    # recorded their save's run.
    other = "llama3_seed1"
    run(command(remat, tmp, other, "llama3_debug.toml", 2, 2, [
        "--training.steps", "5", "--checkpoint.enable", "true", "--checkpoint.interval", "2",
        "--training.seed", "1"]), "llama3, seed 1: 2-rank run")
    spliced = copy("spliced")
    shard = "shard-1-of-2.safetensors"
    subprocess.run(["cp", os.path.join(folder(tmp, other, 4), shard), spliced], check=True)
    check("spliced shard: the same size as the one it replaces",
          os.path.getsize(os.path.join(spliced, shard)) == os.path.getsize(os.path.join(source, shard)))
    expect_exit_2("a shard of another run's save", spliced, "a file of another save")
    expect_exit_2("a shard of another run's save, 2 ranks", spliced, "a file of another save",
                  ranks=2)


def shard_step(path):
    """The step a rank's shard file records (its safetensors metadata)."""
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            return json.loads(f.read(n))["__metadata__"]["step"]
    except (OSError, ValueError, KeyError):
        return None


def ctrl_c(remat, tmp):
    name = "ctrl_c"
    # A learning rate that does not depend on training.steps (warmup, then
    # constant), so runs of other lengths compare step for step.
    lr = ["--lr_scheduler.warmup_steps", "2", "--lr_scheduler.decay_ratio", "0"]
    cmd = command(remat, tmp, name, "llama3_debug.toml", 2, 2, [
        *lr, "--training.steps", "100000", "--checkpoint.enable", "true",
        "--checkpoint.interval", "100000"])
    # Open MPI sends SIGTERM 5 s after the Ctrl-C and SIGKILL 5 s after that.
    cmd = cmd[:3] + ["--mca", "odls_base_sigkill_timeout", "5"] + cmd[3:]
    proc, log = start(cmd, os.path.join(tmp, name + ".txt"), "step:  2")
    proc.send_signal(signal.SIGINT)
    proc.wait(timeout=90)
    log.seek(0)
    out = log.read()
    log.close()
    stopped = re.findall(r"interrupted by SIGTERM: stopping after step (\d+)", out)
    check("Ctrl-C on mpirun: the run stops at a step boundary and says so", len(stopped) == 1,
          out[-800:])
    step = int(stopped[0]) if stopped else 0
    index = os.path.join(folder(tmp, name, step), "index.json")
    shard_steps = [shard_step(os.path.join(folder(tmp, name, step), f"shard-{r}-of-2.safetensors"))
                   for r in (0, 1)]
    check("Ctrl-C on mpirun: both ranks stopped after that step and saved it",
          shard_steps == [str(step)] * 2, f"step {step}, the shards' steps {shard_steps}")
    check("Ctrl-C on mpirun: a complete sharded checkpoint of that step",
          os.path.isfile(index) and sorted(os.listdir(folder(tmp, name, step))) ==
          ["index.json", "shard-0-of-2.safetensors", "shard-1-of-2.safetensors"])
    check("Ctrl-C on mpirun: each rank exits 143",
          "exit status 143: interrupted run" in out, out[-400:])
    if not os.path.isfile(index):
        return
    total = str(step + 2)
    run(command(remat, tmp, name + "_resumed", "llama3_debug.toml", 2, 2, [
        *lr, "--training.steps", total, "--checkpoint.load", folder(tmp, name, step)]),
        "resume after Ctrl-C")
    run(command(remat, tmp, name + "_straight", "llama3_debug.toml", 2, 2, [
        *lr, "--training.steps", total]), "uninterrupted run")
    straight, resumed = steps(tmp, name + "_straight"), steps(tmp, name + "_resumed")
    check("Ctrl-C on mpirun: the resumed run continues bit for bit",
          resumed == {s: v for s, v in straight.items() if s > step} and len(resumed) == 2,
          f"from step {step}")


def weights_only(remat, tmp):
    extra = ["--training.steps", "4", "--checkpoint.enable", "true", "--checkpoint.interval", "2"]
    run(command(remat, tmp, "usual", "llama3_debug.toml", 2, 2, extra, dp="shard"), "usual run")
    run(command(remat, tmp, "weights_only", "llama3_debug.toml", 2, 2,
                [*extra, "--checkpoint.last_save_model_weights_only", "true"], dp="shard"),
        "weights-only run")
    saves = {}
    for step in (2, 4):
        with open(os.path.join(folder(tmp, "weights_only", step), "index.json")) as f:
            saves[step] = json.load(f)["with_optimizer"]
    check("weights only: the step-2 save keeps the moments, the last (step 4) does not",
          saves == {2: True, 4: False}, f"{saves}")
    shard = os.path.join(folder(tmp, "weights_only", 4), "shard-0-of-2.safetensors")
    with open(shard, "rb") as f:
        header = json.loads(f.read(int.from_bytes(f.read(8), "little")))
    check("weights only: the last save's shards hold params alone",
          all(name.startswith("params.") for name in header if name != "__metadata__"),
          f"{sorted(header)[:4]}")
    files = []
    for name in ("usual", "weights_only"):
        files.append(os.path.join(tmp, name + "-4.safetensors"))
        run([remat, "checkpoint", "convert", folder(tmp, name, 4), files[-1]], "convert " + name)
    usual, exported = (read_safetensors(p) for p in files)
    weights = {n: a for n, a in usual.items() if not n.startswith("optimizer.")}
    check("weights only: converted, the usual run's last weights to the bit, no moments",
          set(exported) == set(weights) and
          all(exported[n].tobytes() == weights[n].tobytes() for n in weights),
          f"{len(exported)} tensors, {len(weights)} weights")


def keep_latest(remat, tmp):
    def saves(steps):
        extra = ["--training.steps", str(steps), "--checkpoint.enable", "true",
                 "--checkpoint.interval", "1", "--checkpoint.keep_latest_k", "2"]
        return run(command(remat, tmp, "keep", "llama3_debug.toml", 2, 2, extra, dp="shard"),
                   f"keep_latest_k 2, {steps} steps").stdout
    top = os.path.join(tmp, "keep", "checkpoint")
    whole = ["index.json", "shard-0-of-2.safetensors", "shard-1-of-2.safetensors"]
    for steps, removed in ((4, (1, 2)), (6, (3, 4))):
        out = saves(steps)
        left = sorted(os.listdir(top))
        check(f"keep_latest_k 2, {steps} steps: the latest two step folders are left, whole",
              left == [f"step-{steps - 1}", f"step-{steps}"] and
              all(sorted(os.listdir(os.path.join(top, name))) == whole for name in left),
              f"{left}")
        if steps == 6:
            check("keep_latest_k 2: run again, it resumes from the latest (step-4)",
                  f"{top}/step-4" in out and "step:  5" in out, out[-600:])
        lines = [line for line in out.splitlines() if line.startswith("removed ")]
        check(f"keep_latest_k 2, {steps} steps: each removed folder named once",
              lines == [f"removed {top}/step-{s} (checkpoint.keep_latest_k)" for s in removed],
              f"{lines}")


def main():
    remat = os.path.abspath(sys.argv[1])
    with tempfile.TemporaryDirectory(prefix="remat_sharded_") as tmp:
        save_and_resume(remat, tmp, "llama3_debug.toml")
        save_and_resume(remat, tmp, "llama4_debug.toml")
        save_and_resume(remat, tmp, "llama3_debug.toml", dp="shard")
        save_and_resume(remat, tmp, "llama4_debug.toml", dp="shard")
        one_to_two(remat, tmp)
        convert_and_oracle(remat, tmp)
        incomplete_save(remat, tmp)
        os.makedirs(os.path.join(tmp, "damaged"))
        damaged(remat, tmp, folder(tmp, "llama3", 4))
        killed_mid_save(remat, tmp)
        ctrl_c(remat, tmp)
        weights_only(remat, tmp)
        keep_latest(remat, tmp)
    return 1 if failures else 0


if __name__ == "__main__":
    main_guarded(main)
