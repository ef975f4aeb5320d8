"""Page faults and memset work per steady-state training step, before and after.

Issue 11 asks that a steady-state step take no allocator page faults and
memset no gradient buffer its first writer could overwrite. Start-up (the
model state, the dataset, the first step's allocations) dwarfs one step, so
each setup trains S and 2S steps in two processes and reports the difference
divided by S: only what a step beyond the first S adds remains.

- page faults (minor, major) and task-clock come from `perf stat` (software
  events); without a working perf, from the child's rusage (no task-clock);
- in-process faults come from remat's own metrics file (`minor_faults`, its
  getrusage around each step) for steps S+1 .. 2S of the longer run: exact
  per step, with no start-up difference in them (binaries that do not report
  them show n/a);
- memset calls and bytes come from a counting shim this script compiles from
  a small C file into a temporary folder and preloads (LD_PRELOAD): it
  interposes memset (and __memset_chk), forwards to glibc's and adds up
  calls and bytes per calling address. memsets glibc makes inside itself
  (calloc) and ones the compiler inlined (small constant sizes) are not
  seen. The callers are named with addr2line, so the table says which
  function still zeroes memory every step.

Setups: llama3 debug and llama4 debug (configs/*.toml, batch 8 x seq 256,
2 threads), AC none and op, fp32 (and bf16 mixed precision with --bf16, by
this tree's binary only: the "before" one, 0ccfe77, trains fp32 whatever
mixed_precision_param says), each run by the "before" binary and by this
tree's, interleaved, over
--rounds rounds (the median per step is reported). With --write, replaces
the "steady_state" section of BENCHMARKS.md.

--before-env and --after-env NAME=VALUE (repeatable) set variables for one
binary's runs alone, so one binary can be compared with itself, e.g.
--before build/remat --before-env REMAT_FP32_GEMM=openblas --after-env
REMAT_FP32_GEMM=onednn.

Usage: /usr/bin/python3 bench/steady_state.py [--remat build/remat]
       [--before ../wt-before/build/remat] [--before-env NAME=VALUE]
       [--after-env NAME=VALUE] [--steps 4] [--rounds 3] [--bf16]
       [--models llama3,llama4] [--modes none,op] [--write]
"""
import argparse
import collections
import json
import os
import statistics
import subprocess
import tempfile

from benchmarks_file import machine, markers, replace_section

SHIM = r"""
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Counts memset calls and bytes per calling address; forwards to glibc. */
typedef void* (*memset_fn)(void*, int, size_t);
static memset_fn real_memset;
enum { kSlots = 4096 };
static struct { uintptr_t caller; uint64_t calls, bytes; } slots[kSlots];
static atomic_flag lock = ATOMIC_FLAG_INIT;

/* Before dlsym has run (and inside it): a plain loop the compiler may not
   turn back into a memset call (-fno-builtin, no loop distribution). */
static void* fill(void* d, int c, size_t n) {
  volatile unsigned char* p = d;
  for (size_t i = 0; i < n; ++i) p[i] = (unsigned char)c;
  return d;
}

static void count(uintptr_t caller, size_t n) {
  while (atomic_flag_test_and_set_explicit(&lock, memory_order_acquire)) {}
  size_t i = (caller >> 2) % kSlots;
  while (slots[i].caller != 0 && slots[i].caller != caller) i = (i + 1) % kSlots;
  slots[i].caller = caller;
  slots[i].calls += 1;
  slots[i].bytes += n;
  atomic_flag_clear_explicit(&lock, memory_order_release);
}

static void* forward(void* d, int c, size_t n) {
  if (!real_memset) {
    static _Thread_local int resolving;
    if (resolving) return fill(d, c, n);
    resolving = 1;
    real_memset = (memset_fn)dlsym(RTLD_NEXT, "memset");
    resolving = 0;
    if (!real_memset) return fill(d, c, n);
  }
  return real_memset(d, c, n);
}

void* memset(void* d, int c, size_t n) {
  count((uintptr_t)__builtin_return_address(0), n);
  return forward(d, c, n);
}

void* __memset_chk(void* d, int c, size_t n, size_t dest_len) {
  (void)dest_len;
  count((uintptr_t)__builtin_return_address(0), n);
  return forward(d, c, n);
}

/* One line per caller: module, offset in it, calls, bytes. */
__attribute__((destructor)) static void report(void) {
  const char* path = getenv("MEMSET_COUNT_OUT");
  if (!path) return;
  FILE* f = fopen(path, "w");
  if (!f) return;
  for (size_t i = 0; i < kSlots; ++i) {
    if (slots[i].caller == 0) continue;
    Dl_info info;
    const char* module = "?";
    uintptr_t offset = slots[i].caller;
    if (dladdr((void*)slots[i].caller, &info) && info.dli_fname) {
      module = info.dli_fname;
      offset -= (uintptr_t)info.dli_fbase;
    }
    fprintf(f, "%s\t%#lx\t%lu\t%lu\n", module, (unsigned long)offset,
            (unsigned long)slots[i].calls, (unsigned long)slots[i].bytes);
  }
  fclose(f);
}
"""

AC = "--activation_checkpoint."
MODES = {"none": [AC + "mode", "none"],
         "op": [AC + "mode", "selective", AC + "selective_ac_option", "op"]}
MODELS = {"llama3 debug": "configs/llama3_debug.toml", "llama4 debug": "configs/llama4_debug.toml"}
EVENTS = "page-faults,minor-faults,major-faults,task-clock"


def build_shim(tmp):
    source = os.path.join(tmp, "memset_count.c")
    library = os.path.join(tmp, "memset_count.so")
    with open(source, "w") as f:
        f.write(SHIM)
    subprocess.run(["cc", "-O2", "-shared", "-fPIC", "-fno-builtin",
                    "-fno-tree-loop-distribute-patterns", "-o", library, source, "-ldl"],
                   check=True)
    return library


def perf_works():
    try:
        return subprocess.run(["perf", "stat", "-e", "page-faults", "-x,", "true"],
                              capture_output=True).returncode == 0
    except FileNotFoundError:
        return False


def parse_perf(path):
    values = {}
    for line in open(path):
        fields = line.strip().split(",")
        if len(fields) >= 3 and fields[2] in EVENTS.split(","):
            values[fields[2]] = float(fields[0]) if fields[0] not in ("", "<not counted>") else 0.0
    return values


def parse_memsets(path):
    callers = collections.Counter()
    calls = collections.Counter()
    for line in open(path):
        module, offset, n, nbytes = line.rstrip("\n").split("\t")
        callers[(module, offset)] += int(nbytes)
        calls[(module, offset)] += int(n)
    return calls, callers


def train(remat, args, steps, shim, use_perf, tmp, env=()):
    """One process of `steps` steps: its counters and memsets by caller;
    `env`: NAME=VALUE settings for remat."""
    out = os.path.join(tmp, "memsets.tsv")
    stat = os.path.join(tmp, "perf.csv")
    metrics = os.path.join(tmp, "metrics.jsonl")
    for path in (out, stat, metrics):
        if os.path.exists(path):
            os.remove(path)
    # env(1) sets the preload for remat alone, not for perf.
    command = ["env", *env, f"LD_PRELOAD={shim}", f"MEMSET_COUNT_OUT={out}", remat, "train", *args,
               "--training.steps", str(steps), "--job.dump_folder", tmp,
               "--metrics.log_freq", "1", "--metrics.jsonl_path", metrics]
    if use_perf:
        subprocess.run(["perf", "stat", "-e", EVENTS, "-x,", "-o", stat, "--", *command],
                       check=True, capture_output=True)
        counters = parse_perf(stat)
    else:
        child = subprocess.Popen(command, stdout=subprocess.DEVNULL,
                                 stderr=subprocess.DEVNULL)
        _, status, usage = os.wait4(child.pid, 0)
        if status != 0:
            raise subprocess.CalledProcessError(status, command)
        counters = {"page-faults": usage.ru_minflt + usage.ru_majflt,
                    "minor-faults": usage.ru_minflt, "major-faults": usage.ru_majflt}
    calls, callers = parse_memsets(out)
    return counters, calls, callers, step_faults(metrics)


def step_faults(path):
    """The page faults remat counted in each logged step (getrusage inside
    the process, the metrics file's minor_faults), or None where the binary
    does not report them."""
    faults = []
    for line in open(path) if os.path.exists(path) else []:
        record = json.loads(line)
        if "minor_faults" not in record:
            return None
        faults.append(record["minor_faults"])
    return faults or None


def per_step(short, long, steps):
    """What S more steps added, per step: counters and memsets by caller;
    "start-up faults" keeps the S-step run's total (its spread over rounds
    is the noise a per-step figure carries, times S)."""
    counters = {k: (long[0][k] - short[0].get(k, 0)) / steps for k in long[0]}
    counters["start-up faults"] = short[0]["page-faults"]
    # Inside the process, steps S+1 .. 2S of the long run: exact, no start-up.
    if long[3] is not None and len(long[3]) == 2 * steps:
        counters["in-process faults"] = sum(long[3][steps:]) / steps
    calls = {k: (long[1][k] - short[1].get(k, 0)) / steps for k in long[1]}
    nbytes = {k: (long[2][k] - short[2].get(k, 0)) / steps for k in long[2]}
    return counters, calls, nbytes


_names = {}


def short_name(name):
    """A demangled name without its final argument list (kept: the clone
    suffix, and the parentheses a lambda's name holds)."""
    suffix = ""
    if " [clone" in name:
        name, suffix = name.split(" [clone", 1)
        suffix = " [clone" + suffix
    if name.endswith(")"):
        depth = 0
        for i in range(len(name) - 1, -1, -1):
            depth += {")": 1, "(": -1}.get(name[i], 0)
            if depth == 0:
                name = name[:i]
                break
    return name + suffix


def caller_name(module, offset):
    """The function at `offset` in `module` (addr2line), or module+offset."""
    key = (module, offset)
    if key not in _names:
        name = ""
        if module.startswith("/"):
            run = subprocess.run(["addr2line", "-f", "-C", "-e", module, offset],
                                 capture_output=True, text=True)
            name = run.stdout.splitlines()[0] if run.returncode == 0 and run.stdout else ""
            name = short_name(name) if name != "??" else name
        if not name or name == "??":
            name = f"{os.path.basename(module)}+{offset}"
        _names[key] = name
    return _names[key]


def summarize(samples, steps):
    """Medians over rounds of one setup and binary."""
    counters = {k: statistics.median(s[0][k] for s in samples) for k in samples[0][0]
                if all(k in s[0] for s in samples)}
    startup = [s[0]["start-up faults"] for s in samples]
    counters["noise"] = (max(startup) - min(startup)) / steps
    by_function = collections.defaultdict(lambda: [0.0, 0.0])
    for key in set().union(*(s[2].keys() for s in samples)):
        name = caller_name(*key)
        by_function[name][0] += statistics.median(s[1].get(key, 0) for s in samples)
        by_function[name][1] += statistics.median(s[2].get(key, 0) for s in samples)
    calls = sum(v[0] for v in by_function.values())
    nbytes = sum(v[1] for v in by_function.values())
    return counters, calls, nbytes, by_function


def run_all(args, shim, use_perf, tmp):
    precisions = ["float32"] + (["bfloat16"] if args.bf16 else [])
    families, modes = args.models.split(","), args.modes.split(",")
    for name, chosen, known in (("model", families, ["llama3", "llama4"]),
                                ("AC mode", modes, list(MODES))):
        unknown = [c for c in chosen if c not in known]
        if unknown:
            raise SystemExit(f"steady_state.py: unknown {name} {unknown[0]!r}; expected one of "
                             f"{', '.join(known)}")
    setups = [(f"{f} debug", mode, p) for f in families for mode in modes for p in precisions]
    # Absolute paths: the shim names the executable as it was started.
    binaries = {"before": os.path.abspath(args.before), "after": os.path.abspath(args.remat)}
    envs = {"before": args.before_env, "after": args.after_env}
    samples = collections.defaultdict(list)
    failed = set()
    for _ in range(args.rounds):
        for model, mode, precision in setups:
            common = ["--config", MODELS[model], *MODES[mode], "--training.threads", "2",
                      "--training.mixed_precision_param", precision]
            for label, remat in binaries.items():
                key = (model, mode, precision, label)
                if key in failed or (label == "before" and precision != "float32"):
                    continue
                try:
                    short = train(remat, common, args.steps, shim, use_perf, tmp, envs[label])
                    long = train(remat, common, 2 * args.steps, shim, use_perf, tmp, envs[label])
                except subprocess.CalledProcessError:
                    failed.add(key)  # e.g. the before binary without bf16 training
                    continue
                samples[key].append(per_step(short, long, args.steps))
    return setups, {k: summarize(v, args.steps) for k, v in samples.items()}


def fmt(value, digits=1):
    return f"{value:,.{digits}f}"


def report(setups, results, args, use_perf, load):
    source = "perf stat" if use_perf else "getrusage"
    lines = [f"Per steady-state step: (counters of a {2 * args.steps}-step run - those of a "
             f"{args.steps}-step run) / {args.steps}, median of {args.rounds} round(s); "
             f"faults from {source}, memsets from a counting LD_PRELOAD shim. "
             f"before = `{' '.join([*args.before_env, args.before])}`, "
             f"after = `{' '.join([*args.after_env, args.remat])}`. "
             f"Machine: {machine()}, load average {load:.2f} at the start.", "",
             "`noise`: the spread of the S-step runs' page faults over the rounds, / S "
             "(start-up does not fault the same number of pages every run); a per-step "
             "figure within it is no fault at all. `in-process`: the page faults remat "
             f"itself counts in steps {args.steps + 1}-{2 * args.steps} of the long run "
             "(getrusage around each step, the metrics file's `minor_faults`; n/a where the "
             "binary does not report them), per step: no start-up in it, so no noise.", "",
             "| model | AC | precision | binary | page faults / step | noise | in-process | "
             "major | task-clock ms / step | memset calls / step | memset KiB / step |",
             "|---|---|---|---|---|---|---|---|---|---|---|"]
    details = []
    for model, mode, precision in setups:
        for label in ("before", "after"):
            r = results.get((model, mode, precision, label))
            if r is None and label == "before" and precision != "float32":
                continue  # the before binary predates bf16 training
            if r is None:
                lines.append(f"| {model} | {mode} | {precision} | {label} | n/a (run failed) "
                             f"| | | | | |")
                continue
            counters, calls, nbytes, by_function = r
            clock = fmt(counters["task-clock"]) if "task-clock" in counters else "n/a"
            inside = (fmt(counters["in-process faults"]) if "in-process faults" in counters
                      else "n/a")
            lines.append(f"| {model} | {mode} | {precision} | {label} | "
                         f"{fmt(counters['page-faults'])} | {fmt(counters['noise'])} | {inside} | "
                         f"{fmt(counters['major-faults'])} | "
                         f"{clock} | {fmt(calls)} | {fmt(nbytes / 1024)} |")
            top = sorted(by_function.items(), key=lambda kv: -kv[1][1])[:args.callers]
            top = [f"`{name}` {fmt(b / 1024)} KiB in {fmt(c)} calls" for name, (c, b) in top
                   if b >= 1024]
            details.append(f"- {model}, {mode}, {precision}, {label}: " +
                           ("; ".join(top) if top else "no memset of 1 KiB or more"))
    lines += ["", "Where the memset bytes of a steady-state step go (the largest callers):", "",
              *details]
    if any("sgemm_beta" in d for d in details):
        lines += ["", "`sgemm_beta_*` is OpenBLAS zeroing C before a GEMM with beta = 0 (it "
                  "then accumulates the product into it): forward outputs and fresh gradients "
                  "alike."]
    return "\n".join(lines)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--remat", default="build/remat")
    parser.add_argument("--before", default="../wt-before/build/remat")
    parser.add_argument("--before-env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--after-env", action="append", default=[], metavar="NAME=VALUE")
    parser.add_argument("--steps", type=int, default=4, help="S: runs of S and 2S steps")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--callers", type=int, default=4, help="callers listed per setup")
    parser.add_argument("--bf16", action="store_true", help="also bf16 mixed precision")
    parser.add_argument("--models", default="llama3,llama4")
    parser.add_argument("--modes", default="none,op")
    parser.add_argument("--write", action="store_true")
    args = parser.parse_args()
    load = os.getloadavg()[0]
    use_perf = perf_works()
    with tempfile.TemporaryDirectory() as tmp:
        shim = build_shim(tmp)
        setups, results = run_all(args, shim, use_perf, tmp)
    table = report(setups, results, args, use_perf, load)
    print(table)
    if args.write:
        begin, end = markers("steady_state")
        replace_section("steady_state", f"{begin}\n## Steady-state page faults and memsets "
                        f"(bench/steady_state.py)\n\n{table}\n{end}")


if __name__ == "__main__":
    main()
