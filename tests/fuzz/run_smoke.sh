#!/usr/bin/env bash
# Builds one fuzzer with Debian's clang (build_fuzzer.sh: libFuzzer + ASan + UBSan) and runs a
# bounded smoke over its kept corpus. New inputs go to a temporary directory; add the interesting
# ones to the kept corpus by hand. Exits 77 (skipped) when clang++ is missing, 1 when the fuzzer
# crashed or diverged from its model (libFuzzer's own code for that, 77, would read as skipped).
# Usage: run_smoke.sh [RUNS] [SECONDS] [TARGET]   (TARGET defaults to wire_parser_fuzzer)
# DGT_FUZZER_BIN names a fuzzer already built (a clang build's CMake target): it runs, unbuilt.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
runs=${1:-20000}
seconds=${2:-30}
target=${3:-wire_parser_fuzzer}
case "$target" in
  wire_parser_fuzzer) corpus=$here/corpus max_len=4096 ;;
  *) corpus=$here/corpus_${target%_fuzzer} max_len=512 ;;
esac
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
fuzzer=${DGT_FUZZER_BIN:-$tmp/$target}
[ -n "${DGT_FUZZER_BIN:-}" ] || "$here/build_fuzzer.sh" "$target" "$fuzzer"
mkdir "$tmp/new"
set +e
"$fuzzer" -runs="$runs" -max_total_time="$seconds" -max_len="$max_len" \
  -error_exitcode=1 -timeout_exitcode=1 -artifact_prefix="$tmp/" "$tmp/new" "$corpus" \
  > "$tmp/log" 2>&1
rc=$?
set -e
tail -n 5 "$tmp/log"
if [ "$rc" -ne 0 ]; then
  grep -a -m 5 'divergence\|ERROR\|SUMMARY\|^Base64' "$tmp/log" || true
  echo "run_smoke: $target failed (exit $rc); the input above (Base64) reproduces it"
  exit 1
fi
echo "run_smoke: $target ok ($runs runs or $seconds s)"
