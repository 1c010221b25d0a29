#!/usr/bin/env bash
# The floor of server CPU per operation on loopback, beside the store bench's 2.x servers: the
# same load generator (store_bench --protocol 2, closed loop, one request outstanding per
# connection) against
#   dgt-2x       dgt's server (`dgt store serve`)
#   torch-2.13   torch 2.13's libuv TCPStore server (DGT_PYTHON2)
#   floor-epoll  bench/store/floor_server.cc: dgt's engine and parser behind a bare epoll loop
#   floor-uring  the same behind io_uring (multishot receive, replies batched per io_uring_enter)
# for set, get, add, cas, check and multi_get at 64 and 512 connections. Prints one JSON line per
# measurement, a table of server CPU us/op, and per point the cheapest server's share of torch
# 2.13's (the store target is 0.33x). Exits 2 when it cannot run.
#   bench/store/floor.sh [BUILD_DIR] [SECONDS_PER_POINT]
# Bounded: each point stops after SECONDS_PER_POINT (default 2) or 2,000,000 operations.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
secs=${2:-2}
python2=${DGT_PYTHON2:-/opt/dgt/peers-venv/bin/python}
for bin in store_bench floor_server dgt; do
  [[ -x $build/bin/$bin ]] || { echo "floor.sh: no $build/bin/$bin (build it first)" >&2; exit 2; }
done
"$python2" -c 'import torch' 2>/dev/null \
  || { echo "floor.sh: $python2 cannot import torch (DGT_PYTHON2)" >&2; exit 2; }
tmp=$(mktemp -d)
PID=
cleanup() {
  if [[ -n $PID ]]; then kill "$PID" 2>/dev/null || true; wait "$PID" 2>/dev/null || true; fi
  rm -rf "$tmp"
}
trap cleanup EXIT

# start CMD... : starts a server whose stdout says "listening on port N"; sets PORT, PID.
start() {
  : > "$tmp/out"
  "$@" > "$tmp/out" 2> "$tmp/err" &
  PID=$!
  PORT=
  for _ in $(seq 600); do
    PORT=$(sed -n 's/.*listening on port \([0-9]*\)$/\1/p' "$tmp/out")
    [[ -n $PORT ]] && return 0
    sleep 0.1
  done
  echo "floor.sh: $* did not start" >&2; cat "$tmp/err" >&2; exit 2
}

read -r l1 l5 l15 _ < /proc/loadavg
echo "{\"mode\": \"load\", \"loadavg_1_5_15\": [$l1, $l5, $l15]}"
results="$tmp/results.jsonl"
for server in dgt-2x torch-2.13 floor-epoll floor-uring; do
  case $server in
    dgt-2x) start "$build/bin/dgt" store serve --listen 127.0.0.1:0 ;;
    torch-2.13) start "$python2" bench/store/torch_store_server.py ;;
    floor-*) start "$build/bin/floor_server" "${server#floor-}" ;;
  esac
  for conns in 64 512; do
    for op in set get add cas check multi_get; do
      line=$("$build/bin/store_bench" --port "$PORT" --protocol 2 --mode ops --op "$op" \
        --conns "$conns" --seconds "$secs" --server-pid "$PID")
      echo "{\"server\": \"$server\", ${line#\{}" | tee -a "$results"
    done
  done
  kill "$PID"; wait "$PID" 2>/dev/null || true
  PID=
done

python3 - "$results" <<'EOF'
import json
import sys

rows = [json.loads(line) for line in open(sys.argv[1])]
servers = ["dgt-2x", "torch-2.13", "floor-epoll", "floor-uring"]
cpu = {(r["server"], r["op"], r["conns"]): r.get("server_cpu_us_per_op") for r in rows}
points = sorted({(r["op"], r["conns"]) for r in rows}, key=lambda p: (p[1], p[0]))
print("\nserver CPU us/op (store_bench --protocol 2, one request outstanding per connection)")
print("%-14s" % "op@conns" + "".join("%13s" % s for s in servers) + "   cheapest / torch-2.13")
for op, conns in points:
    values = [cpu.get((s, op, conns)) for s in servers]
    torch = values[1]
    known = [v for v in values if v]
    share = "%.2fx" % (min(known) / torch) if torch and known else "-"
    print("%-14s" % ("%s@%d" % (op, conns))
          + "".join("%13s" % ("%.2f" % v if v else "-") for v in values) + "   " + share)
EOF
