#!/usr/bin/env bash
# Runs one libFuzzer target (tests/fuzz/) for a given number of executions, starting from its
# kept corpus, and prints the figures docs/RELIABILITY.md records. A divergence from the
# fuzzer's model aborts like a crash, so a run that reaches its count had 0 of both.
# Usage: run.sh TARGET EXECUTIONS [MAX_SECONDS]
#   e.g. nice -n 19 bench/fuzz/run.sh store_fuzzer 10000000 3600
# Env: DGT_FUZZ_WORK keeps the binary, corpus and log there (default: a temporary directory);
# DGT_FUZZ_SANITIZE and DGT_FUZZ_OPT choose the build (tests/fuzz/build_fuzzer.sh), e.g.
# DGT_FUZZ_SANITIZE=undefined DGT_FUZZ_OPT=-O2 for the long runs docs/RELIABILITY.md records;
# DGT_FUZZ_ARGS adds libFuzzer flags, e.g. -entropic=0 (no feature-frequency bookkeeping: about
# 1.4x the scheduler fuzzer's executions per second).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
target=${1:?usage: run.sh TARGET EXECUTIONS [MAX_SECONDS]}
runs=${2:?usage: run.sh TARGET EXECUTIONS [MAX_SECONDS]}
max_seconds=${3:-86400}
case "$runs" in '' | *[!0-9]*) echo "run.sh: EXECUTIONS must be a count, got '$runs'" >&2; exit 2 ;; esac
case "$target" in
  wire_parser_fuzzer) corpus=$src/tests/fuzz/corpus max_len=4096 ;;
  *) corpus=$src/tests/fuzz/corpus_${target%_fuzzer} max_len=512 ;;
esac
[ -d "$corpus" ] || { echo "run.sh: no corpus for '$target' at $corpus" >&2; exit 2; }
work=${DGT_FUZZ_WORK:-}
if [ -z "$work" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
fi
mkdir -p "$work/corpus"
"$src/tests/fuzz/build_fuzzer.sh" "$target" "$work/$target"
cp -n "$corpus"/* "$work/corpus/"
start=$(date +%s)
set +e
"$work/$target" -runs="$runs" -max_total_time="$max_seconds" -max_len="$max_len" \
  -print_final_stats=1 -artifact_prefix="$work/" ${DGT_FUZZ_ARGS:-} "$work/corpus" > "$work/log" 2>&1
rc=$?
set -e
end=$(date +%s)
executions=$(sed -n 's/^stat::number_of_executed_units: *//p' "$work/log" | tail -n 1)
exec_s=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$work/log" | tail -n 1)
tail -n 3 "$work/log"
echo "run.sh: $target executions=${executions:-?} seconds=$((end - start)) exec/s=${exec_s:-?}" \
  "exit=$rc corpus=$(ls "$work/corpus" | wc -l) sanitize=${DGT_FUZZ_SANITIZE:-address,undefined}" \
  "opt=${DGT_FUZZ_OPT:--O1} args=${DGT_FUZZ_ARGS:-none}"
if grep -q -a 'libFuzzer: run interrupted' "$work/log"; then
  echo "run.sh: $target interrupted after $executions of $runs executions, none failed" >&2
  exit 3
fi
if [ "$rc" -ne 0 ]; then
  grep -a -m 3 'divergence\|ERROR\|SUMMARY' "$work/log" >&2 || true
  echo "run.sh: $target failed (a crash or a divergence); set DGT_FUZZ_WORK to keep the log" \
    "and the crashing input" >&2
  exit 1
fi
if [ "${executions:-0}" -lt "$runs" ]; then
  echo "run.sh: $target stopped after $executions of $runs executions (MAX_SECONDS)" >&2
  exit 3
fi
