#!/usr/bin/env bash
# gpu-check: builds dgt-nccl-check and runs dgt's real NCCL path on this machine's GPUs (one rank
# per GPU): init at generation 0, a checked all-reduce, abort, re-init at generation 1, a second
# checked all-reduce, with timings. Then dgt.recovery's NCCL path: the example DDP
# trainer under dgt-run --restart-policy rank on 2 GPUs, rank 1 SIGKILLed at step 50, every rank
# ending with the same parameters; skipped (not failed) without a CUDA build of torch in
# $DGT_GPU_PYTHON (default python3) or with fewer than 2 GPUs. Output format: docs/PERFORMANCE.md,
# "GPU check".
#   scripts/gpu-check.sh [max_ranks]        (env: BUILD_DIR, default ./build-gpu; DGT_GPU_PYTHON)
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
[ $rc -eq 0 ] || exit $rc

# dgt.recovery on NCCL: needs dgt-run (built here if missing) and a CUDA torch with 2 GPUs.
py=${DGT_GPU_PYTHON:-python3}
why=$("$py" -c 'import sys, torch
n = torch.cuda.device_count() if torch.cuda.is_available() else 0
sys.exit(0) if n >= 2 else print(f"torch {torch.__version__}, {n} CUDA device(s)")' 2>&1 | tail -1 || true)
if [ -n "$why" ]; then
  echo "gpu-check: SKIP dgt.recovery NCCL: needs a CUDA build of torch and >= 2 GPUs ($why)"
  exit 0
fi
ninja -C "$BUILD_DIR" -j"$(nproc)" dgt-run >/dev/null
log=$(mktemp)
set +e
PYTHONPATH=python timeout 300 "$BUILD_DIR/bin/dgt-run" --standalone --nproc-per-node=2 \
  --restart-policy=rank --max-restarts=1 --no-python "$py" \
  examples/pytorch_ddp_recovery/train.py --backend nccl --steps 200 --crash-at-step 50 \
  --crash-rank 1 >"$log" 2>&1
rc=$?
set -e
digests=$(grep -o 'EVENT done .*digest=[0-9a-f]*' "$log" | sed 's/.*digest=//' | sort -u)
done_ranks=$(grep -c 'EVENT done' "$log" || true)
if [ $rc -eq 0 ] && [ "$done_ranks" -eq 2 ] && [ "$(echo "$digests" | wc -l)" -eq 1 ] &&
   grep -q 'EVENT synced rank=1 .*replacement=1' "$log"; then
  echo "gpu-check: dgt.recovery nccl PASS $(grep -o 'EVENT synced rank=0 [^t]*' "$log" | head -1)"
  rm -f "$log"
  exit 0
fi
echo "gpu-check: FAIL dgt.recovery nccl rc=$rc done_ranks=$done_ranks digests=$(echo $digests)"
tail -20 "$log"
exit 1
