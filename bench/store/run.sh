#!/usr/bin/env bash
# Store benchmark: the same load generator (store_bench, torch 1.x protocol) against dgt's server
# (`dgt store serve`) and torch 1.13's own TCPStore server, in one run, on loopback. Prints one
# JSON line per measurement, tagged with the server, and a summary table at the end.
#   bench/store/run.sh [BUILD_DIR] [SECONDS_PER_POINT] [pin]
# Bounded: every point stops after SECONDS_PER_POINT (default 3) or 2,000,000 operations.
# `pin` runs each server on CPU 0 and the load generator on CPU 1 (taskset), for both servers
# alike; without it the scheduler places them. The load average is printed before each server.
# DGT_BENCH_IDLE_CONNS (default 10000; 0 skips) sets the idle-connections point, which takes
# torch's server about a minute to open.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
secs=${2:-3}
pin=${3:-}
server_cpu=()
gen_cpu=()
if [[ $pin == pin ]]; then
  server_cpu=(taskset -c 0)
  gen_cpu=(taskset -c 1)
elif [[ -n $pin ]]; then
  echo "run.sh: third argument must be 'pin' or absent" >&2; exit 2
fi
python=${DGT_PYTHON:-/usr/bin/python3}
bench="$build/bin/store_bench"
tmp=$(mktemp -d)
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; wait "$p" 2>/dev/null || true; done
  rm -rf "$tmp"
}
trap cleanup EXIT
ulimit -n "$(ulimit -Hn)"

# start NAME CMD... : starts a server whose stdout says "listening on port N"; sets PORT, PID.
start() {
  local name=$1; shift
  "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" &
  PID=$!
  pids+=("$PID")
  PORT=
  for _ in $(seq 300); do
    PORT=$(sed -n 's/.*listening on port \([0-9]*\)$/\1/p' "$tmp/$name.out")
    [[ -n $PORT ]] && return 0
    sleep 0.1
  done
  echo "run.sh: $name did not start" >&2; cat "$tmp/$name.err" >&2; exit 1
}

results="$tmp/results.jsonl"
measure() {  # measure SERVER ARGS...
  local server=$1; shift
  local line
  line=$("${gen_cpu[@]}" "$bench" --port "$PORT" "$@")
  echo "{\"server\": \"$server\", ${line#\{}" | tee -a "$results"
}

for server in dgt torch; do
  read -r l1 l5 l15 _ < /proc/loadavg
  echo "{\"server\": \"$server\", \"mode\": \"load\", \"pinned\": $([[ $pin == pin ]] && echo true || echo false), \"loadavg_1_5_15\": [$l1, $l5, $l15]}" | tee -a "$results"
  if [[ $server == dgt ]]; then
    start dgt "${server_cpu[@]}" "$build/bin/dgt" store serve --listen 127.0.0.1:0
  else
    start torch "${server_cpu[@]}" "$python" tests/e2e/workers/torch_store_server.py
  fi
  for conns in 8 64 512; do
    for op in set get add cas; do
      measure "$server" --mode ops --op "$op" --conns "$conns" --seconds "$secs" --server-pid "$PID"
    done
  done
  # Extra row, not a target figure: 16 SETs and one CHECK per round trip (SET has no reply, so a
  # torch 1.x client doing consecutive sets pipelines them like this).
  measure "$server" --mode ops --op set --pipeline 16 --conns 64 --seconds "$secs" --server-pid "$PID"
  measure "$server" --mode fanout --waiters 512 --rounds 20
  idle_conns=${DGT_BENCH_IDLE_CONNS:-10000}
  if (( idle_conns > 0 )); then
    measure "$server" --mode idle --conns "$idle_conns" --server-pid "$PID"
  fi
  kill "$PID"; wait "$PID" 2>/dev/null || true
done

"$python" - "$results" <<'PY'
import json, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
for r in rows:
    if r["mode"] == "load":
        print(f"load average before {r['server']}: {r['loadavg_1_5_15']} (pinned: {r['pinned']})")
ops = {(r["server"], r["op"], r["conns"]): r for r in rows if r["mode"] == "ops"}
print("\nop   conns   dgt ops/s (p50/p99 us)        torch ops/s (p50/p99 us)      ratio"
      "   server CPU us/op dgt/torch   generator CPU us/op dgt/torch")
points = [(op, c) for c in (8, 64, 512) for op in ("set", "get", "add", "cas")]
points.append(("set-pipelined-16", 64))
for op, conns in points:
    d, t = ops[("dgt", op, conns)], ops[("torch", op, conns)]
    print(f"{op:4} {conns:5}   {d['ops_per_s']:9.0f} ({d['p50_us']:6.0f}/{d['p99_us']:6.0f})"
          f"   {t['ops_per_s']:9.0f} ({t['p50_us']:6.0f}/{t['p99_us']:6.0f})"
          f"   {d['ops_per_s'] / t['ops_per_s']:5.2f}x"
          f"   {d['server_cpu_us_per_op']:6.2f} / {t['server_cpu_us_per_op']:6.2f}"
          f"   {d['gen_cpu_us_per_op']:6.2f} / {t['gen_cpu_us_per_op']:6.2f}")
for r in rows:
    if r["mode"] == "fanout":
        print(f"fan-out {r['server']:5}: 512 waiters p50 {r['p50_us']:.0f} us, p99 {r['p99_us']:.0f} us, "
              f"last waiter p50 {r['last_waiter_p50_us']:.0f} us")
for r in rows:
    if r["mode"] == "idle":
        print(f"idle    {r['server']:5}: {r['held']} connections held, "
              f"{r['kib_per_conn']:.2f} KiB RSS per connection, {r['sample_answered']} of sample answered")
PY
