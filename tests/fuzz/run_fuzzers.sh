#!/usr/bin/env bash
# Runs every fuzz target (tests/fuzz/README.md): first over its seed corpus,
# then fuzzing for FUZZ_SECONDS (default 15). Fails at the first target that
# crashes, reports a sanitizer error, lets an exception other than InputError
# escape, times out on one input or allocates more than the limits below.
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
failed=0
for target in "${targets[@]}"; do
  binary="$build/fuzz_$target"
  seeds="$here/corpus/$target"
  if [ ! -x "$binary" ] || [ ! -d "$seeds" ] || [ -z "$(ls -A "$seeds")" ]; then
    echo "fuzz_$target: missing binary $binary or seed corpus $seeds" >&2
    exit 1
  fi
  mkdir -p "$scratch/$target"
  log="$build/fuzz_$target.log"
  start=$(date +%s)
  rm -f "$artifacts/$target"-*
  # libFuzzer runs every seed first, then mutates for $seconds; new inputs go
  # to the first folder (scratch), the seeds folder is only read.
  if "$binary" "${limits[@]}" -max_total_time="$seconds" -print_final_stats=1 \
       -artifact_prefix="$artifacts/$target-" "$scratch/$target" "$seeds" >"$log" 2>&1; then
    runs=$(grep -o 'stat::number_of_executed_units: *[0-9]*' "$log" | grep -o '[0-9]*$' | tail -1)
    cov=$(grep -o 'cov: [0-9]*' "$log" | tail -1)
    echo "fuzz_$target: ok, ${runs:-?} inputs in $(($(date +%s) - start)) s, $cov edges," \
         "$(ls "$seeds" | wc -l) seeds"
  else
    failed=1
    echo "fuzz_$target: FAILED (log: $log)" >&2
    grep -E 'ERROR|fuzz:|runtime error|SUMMARY|Test unit written' "$log" | head -20 >&2
    for input in "$artifacts/$target"-*; do
      [ -e "$input" ] && echo "  replay: $binary $input" >&2
    done
  fi
done
exit $failed
