"""The chunked loss head (model.loss_chunk_rows, README "Chunked loss").

- The same training: the fused output projection + cross-entropy gives the
  loss and grad_norm of the unfused head at every step within 1e-6 relative
  (dw sums chunk by chunk; on OpenBLAS a row's logits round by the chunk's
  row blocks), for llama3 and llama4, with a ragged last chunk.
- Less memory, as planned: the allocator peak equals `remat plan`'s
  prediction byte for byte, and is below the unfused run's by at least half
  the logits' bytes.
- bf16 mixed precision, on the bf16 GEMMs and on the fallback: the unfused
  head's loss and grad_norm within 1e-5, the plan's peak, AC bit identity.
- AC modes none, op and full give the same bits with the fused head.
- The rebuilt logits are hardware work: with AC none, hfu exceeds mfu by the
  output projection's forward share, where the unfused run has hfu = mfu.
- The matmul log still lists the output projection.
- `remat plan` with the logits whole prices 1024-row chunks as a hint: the
  hint's peak is what planning with the key gives; a memory budget only the
  fused head reaches is refused naming the key, and fits with it.
- Generation reads the logits: `remat generate` gives the same tokens with
  and without the key, from a checkpoint the fused head trained.
- `model.loss_chunk_rows = "auto"` chooses what the planner says: whole
  logits where they fit at no more cost, 1024-row chunks under a memory.limit
  only they fit, or a budget where their rebuilt logits cost less recompute
  than the blocks' (each checked against planning both heads by hand at the
  same bytes); a training run with it runs the chosen program's bits and the
  plan's peak; `--maximize throughput` prices both heads at each batch.

Usage: test_chunked_loss.py <path-to-remat>
"""
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
REPO = Path(__file__).resolve().parents[2]
STEPS = 4
ROWS = 4 * 32      # local batch x seq_len
VOCAB = 4096
CHUNK = 48         # 48 + 48 + 32 rows: the last chunk ragged
SMALL = ["--training.seq_len", "32", "--training.local_batch_size", "4", "--model.dim", "64",
         "--model.n_heads", "4", "--model.n_kv_heads", "4", "--model.vocab_size", str(VOCAB),
         "--metrics.log_freq", "1", "--metrics.peak_flops", "1e11", "--training.steps",
         str(STEPS), "--validation.enabled", "false"]
FUSED = ["--model.loss_chunk_rows", str(CHUNK)]
TOL = 1e-6
BF16_TOL = 1e-5  # bf16 activations carry dw's chunk-by-chunk rounding on (2e-6 seen)
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what, flush=True)
    if not ok:
        failures.append(what)


def config_of(model):
    return str(REPO / "configs" / f"{model}_debug.toml")


def train(tmp, model, name, *extra):
    """Returns (stdout, {step: metrics line}) of a run, or (None, {}) if it failed."""
    proc = subprocess.run([REMAT, "train", "--config", config_of(model), *SMALL,
                           "--metrics.jsonl_path", f"{name}.jsonl", "--job.dump_folder", name,
                           *extra], cwd=tmp, capture_output=True, text=True, timeout=300)
    if proc.returncode != 0:
        print(proc.stdout[-1500:], proc.stderr[-1500:], sep="\n")
        return None, {}
    lines = [json.loads(line) for line in (tmp / f"{name}.jsonl").read_text().splitlines()]
    return proc.stdout, {m["step"]: m for m in lines}


def planned_peak(model, *extra):
    proc = subprocess.run([REMAT, "plan", "--config", config_of(model), *SMALL, *extra, "--json"],
                          capture_output=True, text=True, timeout=300)
    return json.loads(proc.stdout)["configured"]["peak_bytes"] if proc.returncode == 0 else None


def rel(a, b):
    return abs(a - b) / max(abs(a), abs(b), 1e-30)


def same_bits(a, b):
    return sorted(a) == sorted(b) == list(range(1, STEPS + 1)) and all(
        (a[s]["loss"], a[s]["grad_norm"]) == (b[s]["loss"], b[s]["grad_norm"]) for s in a)


def test_model(tmp, model):
    _, whole = train(tmp, model, f"{model}_whole")
    out, fused = train(tmp, model, f"{model}_fused", *FUSED)
    ok = out is not None and sorted(fused) == sorted(whole) == list(range(1, STEPS + 1))
    worst = max((max(rel(fused[s]["loss"], whole[s]["loss"]),
                     rel(fused[s]["grad_norm"], whole[s]["grad_norm"])) for s in fused),
                default=1.0) if ok else 1.0
    check(ok and worst <= TOL, f"{model}: loss and grad_norm of every step within {TOL:g} of the "
          f"unfused run (worst {worst:.1e})")

    predicted = planned_peak(model, *FUSED)
    measured = {fused[s]["peak_bytes"] for s in fused} if ok else set()
    logits = ROWS * VOCAB * 4
    saved = whole[1]["peak_bytes"] - predicted if ok and predicted else 0
    check(measured == {predicted} and saved >= logits // 2,
          f"{model}: the fused run's peak is the plan's ({measured} vs {predicted}) and "
          f"{saved:,} bytes below the unfused run's (logits {logits:,})")

    for mode in ("none", "full"):
        _, other = train(tmp, model, f"{model}_fused_{mode}", *FUSED,
                         "--activation_checkpoint.mode", mode)
        check(ok and same_bits(other, fused),
              f"{model}: fused head, AC {mode} gives the bits of selective op")

    _, whole_none = train(tmp, model, f"{model}_whole_none", "--activation_checkpoint.mode", "none")
    _, fused_none = train(tmp, model, f"{model}_fused_none", *FUSED,
                          "--activation_checkpoint.mode", "none")
    last = STEPS
    check(whole_none and fused_none and whole_none[last]["hfu"] == whole_none[last]["mfu"]
          and fused_none[last]["hfu"] > 1.02 * fused_none[last]["mfu"],
          f"{model}: AC none: hfu = mfu unfused, hfu > mfu fused (the rebuilt logits): "
          f"{whole_none.get(last, {}).get('hfu')}, {whole_none.get(last, {}).get('mfu')}; "
          f"{fused_none.get(last, {}).get('hfu')}, {fused_none.get(last, {}).get('mfu')}")


def test_bf16(tmp):
    """bf16 mixed precision, on the bf16 GEMMs the CPU chose and on the fallback
    (bf16 activations, fp32 GEMMs): the fused head against the unfused one, the
    peak against the plan, and AC none against selective op."""
    bf16 = ["--training.mixed_precision_param", "bfloat16"]
    for kernel in ("default", "fallback"):
        if kernel == "fallback":  # the runs below inherit it
            os.environ["REMAT_BF16_KERNEL"] = "fallback"
        _, whole = train(tmp, "llama3", f"bf16_{kernel}_whole", *bf16)
        out, fused = train(tmp, "llama3", f"bf16_{kernel}_fused", *FUSED, *bf16)
        ok = out is not None and sorted(fused) == sorted(whole) == list(range(1, STEPS + 1))
        worst = max((max(rel(fused[s]["loss"], whole[s]["loss"]),
                         rel(fused[s]["grad_norm"], whole[s]["grad_norm"])) for s in fused),
                    default=1.0) if ok else 1.0
        check(ok and worst <= BF16_TOL, f"bf16 ({kernel} kernels): loss and grad_norm within "
              f"{BF16_TOL:g} of the unfused head (worst {worst:.1e})")
        predicted = planned_peak("llama3", *FUSED, *bf16)
        measured = {fused[s]["peak_bytes"] for s in fused} if ok else set()
        check(measured == {predicted},
              f"bf16 ({kernel} kernels): the fused run's peak is the plan's "
              f"({measured} vs {predicted})")
        _, none = train(tmp, "llama3", f"bf16_{kernel}_fused_none", *FUSED, *bf16,
                        "--activation_checkpoint.mode", "none")
        check(ok and same_bits(none, fused),
              f"bf16 ({kernel} kernels): fused head, AC none gives the bits of selective op")
    os.environ.pop("REMAT_BF16_KERNEL", None)


def test_matmul_log(tmp):
    out, _ = train(tmp, "llama3", "mm_log", *FUSED, "--activation_checkpoint.log_mm_flops",
                   "true", "--training.steps", "1")
    line = re.search(r"^\s*output\s+\(128 x 64\) x \(64 x 4096\).*$", out or "", re.M)
    check(line is not None and f"logits made {CHUNK} rows at a time" in line.group(0),
          f"the matmul log lists the fused head as the output projection: "
          f"{line.group(0).strip() if line else None}")


def test_generate(tmp):
    _, _ = train(tmp, "llama3", "gen", *FUSED, "--checkpoint.enable", "true",
                 "--checkpoint.interval", "1", "--training.steps", "1")
    weights = tmp / "gen" / "checkpoint" / "step-1.safetensors"
    outs = []
    for extra in ([], FUSED):
        proc = subprocess.run([REMAT, "generate", "--config", config_of("llama3"), *SMALL, *extra,
                               "--checkpoint.load", str(weights), "--prompt", "Hi",
                               "--max_new_tokens", "6", "--temperature", "0", "--ids",
                               "--job.dump_folder", "gen_out"], cwd=tmp, capture_output=True,
                              text=True, timeout=300)
        m = re.search(r"^generated:((?: \d+)*)$", proc.stdout, re.M)
        outs.append(m.group(1).split() if proc.returncode == 0 and m else None)
    check(outs[0] is not None and len(outs[0]) >= 6 and outs[0] == outs[1],
          f"generate from the fused head's checkpoint, with and without the key: {outs}")


def test_plan_hint():
    big = ["--config", config_of("llama3"), "--model.vocab_size", "32768",
           "--training.local_batch_size", "8", "--training.seq_len", "256", "--json"]
    runs = [subprocess.run([REMAT, "plan", *big, *extra], capture_output=True, text=True,
                           timeout=300) for extra in ([], ["--model.loss_chunk_rows", "1024"])]
    whole, chunked = [json.loads(p.stdout) if p.returncode == 0 else {} for p in runs]
    hint = whole.get("chunked_loss_hint") or {}
    check(hint.get("loss_chunk_rows") == 1024 and
          hint.get("peak_bytes") == chunked.get("configured", {}).get("peak_bytes") and
          hint.get("peak_bytes", 1 << 62) < whole["configured"]["peak_bytes"] and
          "chunked_loss_hint" in chunked and chunked["chunked_loss_hint"] is None,
          f"plan's hint with the logits whole is the plan of 1024-row chunks: {hint}, "
          f"{chunked.get('configured', {}).get('peak_bytes')}")
    text = subprocess.run([REMAT, "plan", *big[:-1]], capture_output=True, text=True, timeout=300)
    check("hint: model.loss_chunk_rows = 1024" in text.stdout,
          "the text plan prints the hint")

    # A memory budget below every plan with the logits whole, above the
    # fused head's smallest: the refusal names the key, and with it the
    # budget plan fits.
    full = ["--activation_checkpoint.mode", "full"]
    lowest = [json.loads(subprocess.run([REMAT, "plan", *big, *full, *extra], capture_output=True,
                                        text=True, timeout=300).stdout)["configured"]["peak_bytes"]
              for extra in ([], ["--model.loss_chunk_rows", "1024"])]
    budget = (lowest[0] + lowest[1]) // 2
    flags = ["--activation_checkpoint.mode", "memory_budget", "--activation_checkpoint.memory_budget",
             f"{budget}B"]
    refused = subprocess.run([REMAT, "plan", *big[:-1], *flags], capture_output=True, text=True,
                             timeout=300)
    fits = subprocess.run([REMAT, "plan", *big, *flags, "--model.loss_chunk_rows", "1024"],
                          capture_output=True, text=True, timeout=300)
    peak = json.loads(fits.stdout)["configured"]["peak_bytes"] if fits.returncode == 0 else None
    check(lowest[1] < lowest[0] and refused.returncode == 2 and
          "model.loss_chunk_rows = 1024 would fit at this batch" in refused.stderr and
          peak is not None and peak <= budget,
          f"a budget between the lowest peaks ({lowest}) is refused naming the key, and fits "
          f"with it: {refused.stderr.strip()[-200:]!r}, {peak}")


PLANNED_1B = ["--config", config_of("llama3"), "--model.flavor", "8B", "--model.dim", "2048",
              "--model.n_layers", "16", "--model.n_heads", "32", "--model.n_kv_heads", "8",
              "--model.ffn_dim_multiplier", "1.5", "--model.multiple_of", "256",
              "--training.local_batch_size", "4", "--training.seq_len", "4096"]


def plan_json(*args):
    proc = subprocess.run([REMAT, "plan", *args, "--json"], capture_output=True, text=True,
                          timeout=300)
    return json.loads(proc.stdout) if proc.returncode == 0 else {"stderr": proc.stderr}


def test_auto_plans():
    """"auto" against both heads planned by hand at the same bytes."""
    big = ["--config", config_of("llama3"), "--model.vocab_size", "32768",
           "--training.local_batch_size", "8", "--training.seq_len", "256"]
    auto = ["--model.loss_chunk_rows", "auto"]
    by_hand = {rows: plan_json(*big, "--model.loss_chunk_rows", str(rows)) for rows in (0, 1024)}
    peaks = {rows: j["configured"]["peak_bytes"] for rows, j in by_hand.items()}
    chosen = plan_json(*big, *auto)
    check(chosen.get("loss_head", {}).get("loss_chunk_rows") == 0 and
          chosen["configured"]["peak_bytes"] == peaks[0] and
          chosen.get("chunked_loss_hint", 0) is None,
          f"auto, selective op, no limit: the logits whole, as planned by hand, and no hint: "
          f"{chosen.get('loss_head')}")
    limit = f"{(peaks[0] + peaks[1024]) // 2}B"
    chosen = plan_json(*big, *auto, "--memory.limit", limit)
    check(peaks[1024] < peaks[0] and chosen.get("loss_head", {}).get("loss_chunk_rows") == 1024 and
          chosen["configured"]["peak_bytes"] == peaks[1024],
          f"auto, selective op, memory.limit between the heads' peaks ({peaks}): 1024-row "
          f"chunks: {chosen.get('loss_head')}")

    # Budgets: a fraction of the whole model's range, then the chunked and
    # the whole plans solved by hand for the bytes it names; auto must be the
    # one with less recompute (the rebuilt logits counted).
    for fraction, expect in (("0.01", 1024), ("0.5", 0)):
        flags = ["--activation_checkpoint.mode", "memory_budget",
                 "--activation_checkpoint.memory_budget", fraction]
        chosen = plan_json(*PLANNED_1B, *flags, *auto)
        whole = plan_json(*PLANNED_1B, *flags, "--model.loss_chunk_rows", "0")
        budget = whole.get("budget", {}).get("budget_bytes")
        by_bytes = ["--activation_checkpoint.mode", "memory_budget",
                    "--activation_checkpoint.memory_budget", f"{budget}B"]
        fused = plan_json(*PLANNED_1B, *by_bytes, "--model.loss_chunk_rows", "1024")
        costs = {0: whole["configured"]["recompute_flops"],
                 1024: fused["configured"]["recompute_flops"]}
        best = min(costs, key=costs.get)
        check(best == expect and chosen.get("loss_head", {}).get("loss_chunk_rows") == best and
              chosen["configured"]["recompute_flops"] == costs[best] and
              chosen["configured"]["peak_bytes"] <= budget,
              f"auto, memory_budget {fraction} of a 1B-shaped model ({budget} bytes): the head "
              f"with less recompute ({costs}): {chosen.get('loss_head')}")


def test_auto_training(tmp):
    """A run with "auto" under a limit only the chunked head fits runs the
    chunked program: its bits, and the plan's peak."""
    rows = ["--training.local_batch_size", "8", "--training.seq_len", "256"]  # 2048 rows
    peaks = {n: planned_peak("llama3", *rows, "--model.loss_chunk_rows", str(n))
             for n in (0, 1024)}
    limit = ["--memory.limit", f"{(peaks[0] + peaks[1024]) // 2}B"]
    auto = ["--model.loss_chunk_rows", "auto"]
    out, chosen = train(tmp, "llama3", "auto", *rows, *limit, *auto)
    _, explicit = train(tmp, "llama3", "auto_by_hand", *rows, "--model.loss_chunk_rows", "1024")
    planned = planned_peak("llama3", *rows, *limit, *auto)
    check(out is not None and "loss head: fused with the loss, its logits 1024 rows" in out and
          same_bits(chosen, explicit) and {chosen[s]["peak_bytes"] for s in chosen} == {planned}
          and planned == peaks[1024] < peaks[0],
          f"training with auto under memory.limit between the peaks {peaks}: the chunked head's "
          f"bits and the plan's peak {planned}")


def test_auto_maximize(tmp):
    """--maximize throughput with "auto" prices both heads per batch: the
    chunks reach batches the whole logits cannot, and a batch whose rows one
    chunk holds is priced whole only."""
    seq, limit = 128, 120 << 20
    proc = subprocess.run([REMAT, "plan", "--config", config_of("llama3"), "--model.dim", "64",
                           "--model.n_heads", "4", "--model.n_kv_heads", "4",
                           "--model.vocab_size", str(VOCAB), "--training.seq_len", str(seq),
                           "--maximize", "throughput", "--memory.limit", f"{limit}B",
                           "--model.loss_chunk_rows", "auto", "--job.dump_folder", "maximize",
                           "--json"], cwd=tmp, capture_output=True, text=True, timeout=600)
    rows = json.loads(proc.stdout) if proc.returncode == 0 else []
    batches = {head: {c["local_batch_size"] for c in rows if c["loss_chunk_rows"] == head}
               for head in (0, 1024)}
    one_chunk = {c["local_batch_size"] for c in rows if c["local_batch_size"] * seq <= 1024}
    check(batches[0] and batches[1024] and max(batches[1024]) > max(batches[0]) and
          not (one_chunk & batches[1024]) and all(c["peak_bytes"] <= limit for c in rows),
          f"--maximize with auto: whole at batches {sorted(batches[0])}, 1024-row chunks at "
          f"{sorted(batches[1024])}, every peak within the limit")


def main():
    with tempfile.TemporaryDirectory(prefix="remat-chunked-loss-") as tmp:
        tmp = Path(tmp)
        for model in ("llama3", "llama4"):
            test_model(tmp, model)
        test_bf16(tmp)
        test_matmul_log(tmp)
        test_generate(tmp)
        test_plan_hint()
        test_auto_plans()
        test_auto_training(tmp)
        test_auto_maximize(tmp)
    if failures:
        print(f"{len(failures)} check(s) failed")
        sys.exit(1)
    print("all checks ok")


if __name__ == "__main__":
    main()
