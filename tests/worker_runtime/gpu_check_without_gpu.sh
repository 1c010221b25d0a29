#!/usr/bin/env bash
# scripts/gpu-check.sh on a machine without a GPU must stop with a clear message and status 2
# (it reuses the test build directory, so nothing is rebuilt). Skipped (77) where a GPU works.
set -uo pipefail
src=$1
build=$2
out=$(BUILD_DIR="$build" "$src/scripts/gpu-check.sh" 2>&1)
rc=$?
echo "$out"
if [ $rc -eq 0 ]; then echo "a GPU is present: nothing to check"; exit 77; fi
[ $rc -eq 2 ] || { echo "expected exit status 2, got $rc"; exit 1; }
echo "$out" | grep -Eq '^gpu-check: FAIL no (CUDA GPU|NCCL)' || { echo "no clear message"; exit 1; }
echo "ok"
