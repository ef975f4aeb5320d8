"""Steady-state training steps touch no new memory: no page faults after warm-up.

Usage: test_steady_state_faults.py path/to/remat. The allocator keeps freed
buffers for the next step, so once the first steps have faulted in every
buffer, later steps must not fault again. Runs llama3 debug (AC none) and
llama4 debug (op AC, with recompute) for 2 and for 5 steps and compares the
minor page faults the child processes took (getrusage): the 3 extra steps
may add at most a few pages
(stdout buffers, the metrics line), far below one activation buffer of
these models (hundreds of pages each).
"""
import resource
import subprocess
import sys
import tempfile

REMAT = sys.argv[1]
AC = "--activation_checkpoint."
EXTRA_STEPS = 3
SLACK_PAGES = 64  # one [8 x 256 x 256] fp32 activation alone is 512 pages


def faults(args, steps, tmp):
    before = resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt
    subprocess.run([REMAT, "train", *args, "--training.steps", str(steps), "--job.dump_folder",
                    tmp, "--training.threads", "2"], check=True, capture_output=True)
    return resource.getrusage(resource.RUSAGE_CHILDREN).ru_minflt - before


def main():
    with tempfile.TemporaryDirectory() as tmp:
        for config, mode in (("configs/llama3_debug.toml", ["none"]),
                             ("configs/llama4_debug.toml",
                              ["selective", AC + "selective_ac_option", "op"])):
            args = ["--config", config, AC + "mode", *mode]
            short, long = faults(args, 2, tmp), faults(args, 2 + EXTRA_STEPS, tmp)
            extra = long - short
            assert extra <= SLACK_PAGES, (config, mode, short, long)
            print(f"ok: {config} {mode[0]}: {short} faults in 2 steps, {extra:+d} for "
                  f"{EXTRA_STEPS} more")


main()
