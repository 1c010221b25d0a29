#!/usr/bin/env bash
# gpu-check: builds dgt-nccl-check and runs dgt's real NCCL path on this machine's GPUs (one rank
# per GPU): init at generation 0, a checked all-reduce, abort, re-init at generation 1, a second
# checked all-reduce, with timings. Output format: docs/PERFORMANCE.md, "GPU check".
#   scripts/gpu-check.sh [max_ranks]        (env: BUILD_DIR, default ./build-gpu)
# Exit status: 0 PASS; 1 a step failed; 2 no NCCL/CUDA headers, library or GPU here.
set -euo pipefail
cd "$(dirname "$0")/.."
BUILD_DIR=${BUILD_DIR:-build-gpu}
start=$(date +%s)
if [ ! -f /usr/local/cuda/include/nccl.h ] && [ -z "${NCCL_ROOT:-}" ]; then
  echo "gpu-check: FAIL no NCCL headers (looked in /usr/local/cuda/include and \$NCCL_ROOT)"
  exit 2
fi
if [ ! -f "$BUILD_DIR/build.ninja" ]; then
  cmake -S . -B "$BUILD_DIR" -G Ninja -DDGT_WITH_NCCL=ON -DDGT_BUILD_TESTS=OFF \
    -DDGT_BUILD_BENCHMARKS=OFF >/dev/null
fi
ninja -C "$BUILD_DIR" -j"$(nproc)" dgt-nccl-check >/dev/null
echo "gpu-check: build_s=$(( $(date +%s) - start ))"
export LD_LIBRARY_PATH="/usr/local/cuda/lib64:/usr/local/cuda/lib:${LD_LIBRARY_PATH:-}"
set +e
timeout 150 "$BUILD_DIR/bin/dgt-nccl-check" "$@"
rc=$?
set -e
if [ $rc -eq 124 ]; then echo "gpu-check: FAIL timed out after 150 s"; exit 1; fi
exit $rc
