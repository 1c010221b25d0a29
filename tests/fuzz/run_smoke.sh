#!/usr/bin/env bash
# Builds the frame-parser fuzzer with Debian's clang (libFuzzer + ASan + UBSan) and runs a bounded
# smoke over the kept corpus (tests/fuzz/corpus/). New inputs go to a temporary directory; add the
# interesting ones to the kept corpus by hand. Exits 77 (skipped) when clang++ is missing.
# Usage: run_smoke.sh [RUNS] [SECONDS]
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../.." && pwd)
runs=${1:-20000}
seconds=${2:-30}
cxx=${DGT_FUZZ_CXX:-clang++}
command -v "$cxx" > /dev/null || { echo "run_smoke: $cxx not found, skipping"; exit 77; }
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2046
"$cxx" -std=c++20 -O1 -g -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined \
  -I"$src" "$here/wire_parser_fuzzer.cc" "$src/store/wire.cc" -o "$tmp/wire_parser_fuzzer" \
  $(pkg-config --libs absl_strings)
mkdir "$tmp/new"
"$tmp/wire_parser_fuzzer" -runs="$runs" -max_total_time="$seconds" -max_len=4096 \
  "$tmp/new" "$here/corpus" 2>&1 | tail -n 5
echo "run_smoke: ok ($runs runs or $seconds s)"
