#!/usr/bin/env bash
# Rendezvous benchmark: starts dgt-rendezvous on a free loopback port, runs N simulated agents
# against it (bench/rendezvous/rendezvous_bench.cc), prints the figures and the service's peak RSS.
# Usage: bench/rendezvous/run.sh [build_dir] [agents...]   (default: build 1000 10000)
# CHANNELS=N sets the TCP connections the agents share (default 100). Then runs the torch 1.13
# c10d anchor (bench/rendezvous/torch_c10d.py; SKIP_TORCH=1 skips it).
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD=${1:-build}
shift || true
COUNTS=("$@")
[ ${#COUNTS[@]} -gt 0 ] || COUNTS=(1000 10000)
for n in "${COUNTS[@]}"; do
  out=$(mktemp)
  # Every simulated agent connects from 127.0.0.1: lift the per-peer session limit (1,024).
  "$BUILD/bin/dgt-rendezvous" --listen 127.0.0.1:0 --max-sessions-per-peer 0 >"$out" 2>/dev/null &
  pid=$!
  for _ in $(seq 50); do grep -q "listening on port" "$out" && break; sleep 0.1; done
  port=$(grep -o 'port [0-9]*' "$out" | awk '{print $2}')
  echo "== $n agents"
  timeout 200 "$BUILD/bin/rendezvous_bench" --endpoint "127.0.0.1:$port" --agents "$n" \
    --channels "${CHANNELS:-100}" --timeout-s 150 || echo "(benchmark failed for $n agents)"
  echo "service peak RSS: $(grep VmHWM /proc/$pid/status | awk '{print $2, $3}')"
  kill "$pid"; wait "$pid" 2>/dev/null || true
  rm -f "$out"
done
# The anchor, in the same run: torch 1.13's c10d rendezvous with as many agents as it completes
# within the bound (TORCH_AGENTS, default "10 50 100"; each N gives up after 100 s).
if [ "${SKIP_TORCH:-0}" != 1 ]; then
  echo "== torch 1.13 c10d rendezvous"
  # One process per N: torch 1.13 aborts the whole process when a store connection fails.
  for n in ${TORCH_AGENTS:-10 50 100}; do
    timeout 150 "${DGT_PYTHON:-/usr/bin/python3}" bench/rendezvous/torch_c10d.py \
      --agents "$n" --bound 100 2>&1 | grep -v '^agent [0-9]*: ' ||
      echo "(torch c10d with $n agents did not complete)"
  done
fi
