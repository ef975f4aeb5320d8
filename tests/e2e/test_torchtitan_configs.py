"""torchtitan's own config files run unchanged (issue 13, points 1 and 6; spec §1, §4).

tests/configs/torchtitan/ holds torchtitan's July 2025 train_configs for llama3
debug and 8B, llama4 debug and 17bx16e, with every key they set. Checked here:
- the debug ones train 2 steps (small seq_len and batch, the built-in data:
  torchtitan's c4_test is not shipped); the big ones run `remat plan` with
  their c4 dataset as written, so plan opens no data; plan --json keeps stdout
  pure JSON;
- every run prints the "ignored on this engine: key (reason), ..." line exactly
  once, naming the keys that ask for what this engine lacks and no key that
  it honors;
- a typo'd key or section exits 2 with a did-you-mean; dataset c4 or c4_test
  in a train run exits 2 saying how to give a file, and writes nothing;
- checkpoint.enable_checkpoint is checkpoint.enable, profiling.enable_profiling
  prints the profile, job.print_args prints the resolved config as TOML;
- the log line gives memory in GiB; colour on a terminal only, and not with
  metrics.disable_color_printing.

Usage: test_torchtitan_configs.py <path-to-remat>
"""
import json
import os
import pty
import re
import subprocess
import sys
import tempfile
from pathlib import Path

REMAT = os.path.abspath(sys.argv[1])
CONFIGS = Path(__file__).resolve().parents[1] / "configs" / "torchtitan"
# A quick run on the built-in data. tokenizer_path "" keeps the byte
# tokenizer the built-in data needs (torchtitan's test tokenizer is not here).
QUICK = ["--training.seq_len", "32", "--training.local_batch_size", "2", "--training.steps", "2",
         "--training.dataset", "fortunes", "--model.tokenizer_path", "",
         "--metrics.peak_flops", "1e11"]
IGNORED = "ignored on this engine: "
TIMEOUT_S = 300
failures = []


def check(ok, what):
    print(("ok    " if ok else "FAIL  ") + what)
    if not ok:
        failures.append(what)


def remat(*args, cwd):
    return subprocess.run([REMAT, *args], cwd=cwd, capture_output=True, text=True,
                          timeout=TIMEOUT_S)


def ignored_lines(run):
    return [ln for ln in (run.stdout + run.stderr).splitlines() if ln.startswith(IGNORED)]


def check_ignored_once(name, run, expected, honored):
    lines = ignored_lines(run)
    check(len(lines) == 1, f"{name}: the ignored-keys line is printed once (got {len(lines)})")
    if len(lines) != 1:
        return
    listed = lines[0][len(IGNORED):].split(", ")
    for key in expected:
        check(key in listed, f"{name}: '{key}' is listed as ignored")
    for key in honored:
        check(not any(item.startswith(key + " ") for item in listed),
              f"{name}: {key} is honored, so not listed")
    check(all(re.fullmatch(r"[a-z0-9_]+\.[a-z0-9_]+ \((GPU-only|not built)\)", item)
              for item in listed), f"{name}: each ignored key has its reason: {listed}")


def check_debug_trains(tmp):
    for name, honored in [("llama3_debug", ["training.compile", "checkpoint.async_mode",
                                            "profiling.save_traces_folder",
                                            "metrics.save_tb_folder"]),
                          ("llama4_debug", ["parallelism.tensor_parallel_degree"])]:
        run = remat("train", "--config", str(CONFIGS / f"{name}.toml"), *QUICK,
                    "--job.dump_folder", f"{tmp}/{name}", cwd=tmp)
        check(run.returncode == 0, f"{name}: trains 2 steps (exit {run.returncode}: "
                                   f"{run.stderr.strip()[-400:]})")
        steps = re.findall(r"^step:\s+(\d+)\s+loss:", run.stdout, re.M)
        check(steps == ["1", "2"], f"{name}: log lines for steps 1 and 2 (got {steps})")
        memory = re.findall(r"memory:\s+(\d+\.\d\d)(\w+)\(\d+\.\d\d%\)", run.stdout)
        check(bool(memory) and all(unit == "GiB" for _, unit in memory),
              f"{name}: memory in GiB, as torchtitan prints it ({memory})")
        check("\033[" not in run.stdout, f"{name}: no colour when piped")
        check_ignored_once(name, run, ["job.use_for_integration_test (not built)",
                                       "float8.filter_fqns (GPU-only)"], honored)


def check_big_ones_plan(tmp):
    for name, expected in [("llama3_8b", ["float8.filter_fqns (GPU-only)"]),
                           ("llama4_17bx16e", ["parallelism.tensor_parallel_degree (not built)",
                                               "float8.moe_fqns (GPU-only)"])]:
        config = str(CONFIGS / f"{name}.toml")
        run = remat("plan", "--config", config, cwd=tmp)
        check(run.returncode == 0, f"{name}: plan runs with dataset c4 as written (exit "
                                   f"{run.returncode}: {run.stderr.strip()[-400:]})")
        check_ignored_once(f"{name} plan", run, expected,
                           ["profiling.enable_profiling", "metrics.enable_tensorboard"])
        run = remat("plan", "--config", config, "--json", cwd=tmp)
        try:
            json.loads(run.stdout)
            parsed = True
        except ValueError:
            parsed = False
        check(run.returncode == 0 and parsed, f"{name}: plan --json prints pure JSON on stdout")
        check(len(ignored_lines(run)) == 1 and IGNORED in run.stderr,
              f"{name}: with --json the ignored-keys line goes to stderr, once")
    run = remat("plan", "--config", str(CONFIGS / "llama3_8b.toml"), "--training.dataset_path",
                f"{tmp}/no/such/data.txt", cwd=tmp)
    check(run.returncode == 0, "plan never opens the dataset (a missing dataset_path plans)")


def check_errors(tmp):
    text = (CONFIGS / "llama3_debug.toml").read_text()
    cases = [
        ("typo'd key", text.replace("enable_checkpoint = false", "enable_checkpont = false"), [],
         ["checkpoint.enable_checkpont", "did you mean 'checkpoint.enable_checkpoint'?"]),
        ("typo'd section", text.replace("[float8]", "[flaot8]"), [],
         ["unknown section 'flaot8'", "did you mean [float8]?"]),
        ("typo'd override", text, ["--training.stpes", "3"],
         ["training.stpes", "did you mean 'training.steps'?"]),
        ("dataset c4_test", text, [], ["c4_test", "torchtitan", "training.dataset_path FILE", "no run downloads"]),
        ("dataset c4", text, ["--training.dataset", "c4"], ['"c4"', "training.dataset_path"]),
    ]
    for name, config_text, args, expected in cases:
        case_dir = Path(tmp) / re.sub(r"\W+", "_", name)
        case_dir.mkdir()
        (case_dir / "config.toml").write_text(config_text)
        run = remat("train", "--config", "config.toml", "--training.seq_len", "32",
                    "--model.tokenizer_path", "", *args, cwd=case_dir)
        check(run.returncode == 2, f"{name}: exit 2 (got {run.returncode})")
        missing = [e for e in expected if e not in run.stderr]
        check(not missing, f"{name}: stderr says {missing or expected} ({run.stderr.strip()})")
        check(sorted(p.name for p in case_dir.iterdir()) == ["config.toml"],
              f"{name}: writes nothing")


def check_honored_keys(tmp):
    config = str(CONFIGS / "llama3_debug.toml")
    run = remat("train", "--config", config, *QUICK, "--job.dump_folder", f"{tmp}/honored",
                "--checkpoint.enable_checkpoint", "true", "--profiling.enable_profiling", "true",
                "--job.print_args", "true", cwd=tmp)
    check(run.returncode == 0, f"honored keys: train runs (exit {run.returncode})")
    check((Path(tmp) / "honored" / "checkpoint" / "step-2.safetensors").is_file(),
          "checkpoint.enable_checkpoint = true writes the checkpoint")
    check(re.search(r"^profile \(2 steps", run.stdout, re.M) is not None,
          "profiling.enable_profiling prints the profile")
    resolved = run.stdout.partition("resolved config (job.print_args):\n")[2]
    check("[training]\nlocal_batch_size = 2\nglobal_batch_size = -1\nseq_len = 32\nsteps = 2\n"
          in resolved and
          '\n[checkpoint]\nenable = true\n' in resolved,
          "job.print_args prints the resolved config as TOML")


def tty_output(args, cwd):
    """stdout of remat on a pseudo-terminal (stderr piped apart)."""
    master, slave = pty.openpty()
    proc = subprocess.Popen([REMAT, *args], cwd=cwd, stdout=slave, stderr=subprocess.DEVNULL)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not data:
            break
        chunks.append(data)
    os.close(master)
    proc.wait(timeout=TIMEOUT_S)
    return proc.returncode, b"".join(chunks).decode(errors="replace")


def check_colour(tmp):
    args = ["train", "--config", str(CONFIGS / "llama3_debug.toml"), *QUICK,
            "--job.dump_folder", f"{tmp}/colour"]
    code, out = tty_output(args, tmp)
    check(code == 0 and "\033[31mstep:" in out and "\033[38;2;54;234;195mmemory:" in out,
          "on a terminal the log line is in torchtitan's colours")
    code, out = tty_output(args + ["--metrics.disable_color_printing", "true"], tmp)
    check(code == 0 and "step:" in out and "\033[" not in out,
          "metrics.disable_color_printing turns colour off on a terminal")


def main():
    with tempfile.TemporaryDirectory() as tmp:
        check_debug_trains(tmp)
        check_big_ones_plan(tmp)
        check_errors(tmp)
        check_honored_keys(tmp)
        check_colour(tmp)
    print(f"{len(failures)} failing check(s)" if failures else "all checks ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
