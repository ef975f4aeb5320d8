#!/usr/bin/env bash
# Runs every fuzz target (tests/fuzz/README.md): first over its seed corpus,
# then fuzzing for FUZZ_SECONDS (default 15), FUZZ_JOBS targets at a time
# (default: one per core). Fails when a target crashes, reports a sanitizer
# error, lets an exception other than InputError escape, times out on one
# input or allocates more than the limits below.
#
# New inputs are kept in a scratch folder, not in the repository; a failing
# input is saved under <build-fuzz>/artifacts/ with the command to replay it.
#
# Usage: tests/fuzz/run_fuzzers.sh <build-fuzz> [target ...]
set -euo pipefail
build=$(cd "$1" && pwd)
shift
here=$(cd "$(dirname "$0")" && pwd)
seconds=${FUZZ_SECONDS:-15}
targets=("$@")
[ ${#targets[@]} -gt 0 ] || targets=(config cli npy safetensors jsonl txt tokenizer_json shard_index)
artifacts="$build/artifacts"
base=/dev/shm
[ -d "$base" ] || base=${TMPDIR:-/tmp}
scratch=$(mktemp -d "$base/remat-fuzz-XXXXXX")
trap 'rm -rf "$scratch"' EXIT
# The harnesses write each input to a file under here (fuzz_common.h).
export REMAT_FUZZ_TMP="$scratch/files"
mkdir -p "$REMAT_FUZZ_TMP"
mkdir -p "$artifacts"

# One input may take at most 10 s and 512 MiB in one allocation, the whole
# process 2 GiB (libFuzzer's -rss_limit_mb); every input here is a few KiB.
limits=(-timeout=10 -malloc_limit_mb=512 -rss_limit_mb=2048)
jobs_max=${FUZZ_JOBS:-$(nproc)}
if ! [[ "$jobs_max" =~ ^[1-9][0-9]*$ ]]; then
  echo "FUZZ_JOBS=$jobs_max: expected a positive integer (targets run at a time)" >&2
  exit 2
fi

# One target; its verdict goes to $scratch/<target>.verdict, since the
# targets run as background jobs.
fuzz_one() {
  local target=$1
  local binary="$build/fuzz_$target"
  local seeds="$here/corpus/$target"
  local log="$build/fuzz_$target.log"
  local start
  start=$(date +%s)
  mkdir -p "$scratch/$target"
  rm -f "$artifacts/$target"-*
  # libFuzzer runs every seed first, then mutates for $seconds; new inputs go
  # to the first folder (scratch), the seeds folder is only read.
  if "$binary" "${limits[@]}" -max_total_time="$seconds" -print_final_stats=1 \
       -artifact_prefix="$artifacts/$target-" "$scratch/$target" "$seeds" >"$log" 2>&1; then
    local runs cov
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1 || true)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1 || true)
    echo "fuzz_$target: ok, ${runs:-?} inputs in $(($(date +%s) - start)) s, $cov edges," \
         "$(ls "$seeds" | wc -l) seeds"
    echo ok >"$scratch/$target.verdict"
  else
    # One write per report, so that reports of targets running side by side
    # do not interleave.
    {
      echo "fuzz_$target: FAILED (log: $log)"
      grep -E 'ERROR|fuzz:|runtime error|SUMMARY|Test unit written' "$log" | head -20 || true
      for input in "$artifacts/$target"-*; do
        [ -e "$input" ] && echo "  replay: $binary $input"
      done
    } 2>&1 | cat >&2
  fi
}

for target in "${targets[@]}"; do
  if [ ! -x "$build/fuzz_$target" ] || [ ! -d "$here/corpus/$target" ] ||
     [ -z "$(ls -A "$here/corpus/$target")" ]; then
    echo "fuzz_$target: missing binary $build/fuzz_$target or seed corpus $here/corpus/$target" >&2
    exit 1
  fi
done
for target in "${targets[@]}"; do
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n || true; done
  fuzz_one "$target" &
done
wait
failed=0
for target in "${targets[@]}"; do
  [ "$(cat "$scratch/$target.verdict" 2>/dev/null)" = ok ] || failed=1
done
exit $failed
