#!/usr/bin/env bash
# Configures (once) and builds dgt with Ninja into build/ (binaries in build/bin/).
# Usage: scripts/build.sh [extra cmake -D options]
# DGT_BUILD_TARGETS="dgt-run dgt" builds only those targets (and what they link), not everything.
# Warnings are errors here (DGT_WERROR=ON, as CI builds); DGT_WERROR=OFF in the environment
# turns that off. A plain `cmake` configure of the project leaves it off.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${DGT_BUILD_DIR:-build}
WERROR=${DGT_WERROR:-ON}
# Reconfigure as well when the cache predates the option or holds another value of it.
if [ ! -f "$BUILD_DIR/build.ninja" ] || [ $# -gt 0 ] ||
  ! grep -q "^DGT_WERROR:BOOL=$WERROR\$" "$BUILD_DIR/CMakeCache.txt"; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDGT_WERROR="$WERROR" "$@"
fi
targets=()
for t in ${DGT_BUILD_TARGETS:-}; do targets+=(--target "$t"); done
cmake --build "$BUILD_DIR" -j "$(nproc)" "${targets[@]}"
