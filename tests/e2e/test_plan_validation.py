"""`remat plan` shows the validation peak beside the training peak (issue 13, point 2).

With validation.enabled, plan prints the forward-only pass (batch 1, the
inference plan) that validation runs on top of the training state, and its
JSON has a "validation" object; both numbers are the ones `remat train`
prints before it validates (and tests/e2e/test_validation.py holds the
run's measured peak to them). Without validation neither appears.

Usage: test_plan_validation.py <path-to-remat>
"""
import json
import re
import subprocess
import sys
import tempfile

REMAT = sys.argv[1]
BASE = ["--config", "configs/llama3_debug.toml", "--training.local_batch_size", "4",
        "--training.seq_len", "128"]
VALIDATION = ["--validation.enabled", "true", "--validation.freq", "1", "--validation.steps", "1"]
TIMEOUT_S = 600
failures = []


def check(ok, what):
    print(("ok   " if ok else "FAIL ") + what)
    if not ok:
        failures.append(what)


def remat(*args):
    run = subprocess.run([REMAT, *args], capture_output=True, text=True, timeout=TIMEOUT_S)
    check(run.returncode == 0, f"remat {' '.join(args[:1])} exits 0 (got {run.returncode}: "
                               f"{run.stderr.strip()[-300:]})")
    return run


def main():
    text = remat("plan", *BASE, *VALIDATION).stdout
    shown = re.search(r"validation every 1 steps \(forward only, batch 1, (.+)\): peak .+ "
                      r"\((\d+) bytes\) on the CPU engine, training step .+ \((\d+) bytes\)", text)
    check(shown is not None, "plan prints the validation line: " +
          next((ln for ln in text.splitlines() if "validation" in ln), "(none)"))
    j = json.loads(remat("plan", *BASE, *VALIDATION, "--json").stdout)
    v = j.get("validation", {})
    check(v.get("local_batch_size") == 1 and v.get("freq") == 1 and v.get("peak_bytes", 0) > 0,
          f"plan --json has the validation object: {v}")
    check(0 < v.get("peak_bytes", 0) < v.get("training_peak_bytes", 0),
          "validation's peak is below the training step's")
    if shown:
        check(int(shown.group(2)) == v.get("peak_bytes") and
              int(shown.group(3)) == v.get("training_peak_bytes") and
              shown.group(1) == v.get("mode"), "the text and the JSON agree")
    with tempfile.TemporaryDirectory() as d:
        train = remat("train", *BASE, *VALIDATION, "--training.steps", "1",
                      "--job.dump_folder", d).stdout
    said = re.search(r"^validation: .*predicted peak .+ \((\d+) bytes\), training step .+ "
                     r"\((\d+) bytes\)", train, re.M)
    check(said is not None and int(said.group(1)) == v.get("peak_bytes") and
          int(said.group(2)) == v.get("training_peak_bytes"),
          "plan's numbers are those remat train prints: " + (said.group(0) if said else "(none)"))
    plain = remat("plan", *BASE)
    plain_json = json.loads(remat("plan", *BASE, "--json").stdout)
    check("validation every" not in plain.stdout and "validation" not in plain_json,
          "without validation.enabled, plan shows no validation peak")
    if failures:
        sys.exit("FAIL: %d checks failed" % len(failures))
    print("PASS")


if __name__ == "__main__":
    main()
