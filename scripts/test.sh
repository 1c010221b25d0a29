#!/usr/bin/env bash
# Installs the dependencies, builds dgt with its tests, and runs the whole suite: unit tests, then
# the end-to-end tests (real processes, Debian's PyTorch workers, loopback only).
set -euo pipefail
cd "$(dirname "$0")/.."
start=$(date +%s)
scripts/install-deps.sh
scripts/build.sh
source scripts/python-env.sh
echo "test: build done after $(( $(date +%s) - start )) s; DGT_PYTHON=$DGT_PYTHON"
cd "${DGT_BUILD_DIR:-build}"
ctest --output-on-failure -j "$(nproc)" -L unit
ctest --output-on-failure -L e2e
echo "test: all passed after $(( $(date +%s) - start )) s"
