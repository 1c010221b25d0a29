#!/usr/bin/env bash
# Store benchmark: the same load generator (store_bench) against dgt's server (`dgt store serve`)
# and both torch anchors, in one run, on loopback, one server after the other:
#   dgt        with the torch 1.x protocol   | torch 1.13's TCPStore server (Debian's python3)
#   dgt        with the torch 2.x protocol   | torch 2.13's libuv TCPStore server (DGT_PYTHON2)
# Prints one JSON line per measurement, tagged with the server, then a summary table and the
# verdict per target (docs/PERFORMANCE.md).
#   bench/store/run.sh [BUILD_DIR] [SECONDS_PER_POINT] [pin]
# Bounded: every point stops after SECONDS_PER_POINT (default 3) or 2,000,000 operations.
# `pin` runs each server on CPU 0 and the load generator on CPU 1 (taskset), for every server
# alike; without it the scheduler places them. The load average is printed before each server.
# DGT_BENCH_IDLE_CONNS (default 10000; 0 skips) sets the idle-connections point, which takes
# torch 1.13's server about a minute to open. DGT_PYTHON (default /usr/bin/python3, torch 1.13)
# and DGT_PYTHON2 (default /opt/dgt/peers-venv/bin/python, torch 2.13) run the anchors.
set -euo pipefail
source "$(dirname "$0")/../netns.sh"
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
python2=${DGT_PYTHON2:-/opt/dgt/peers-venv/bin/python}
for py in "$python" "$python2"; do
  if ! "$py" -c 'import torch' 2>/dev/null; then
    echo "run.sh: $py cannot import torch (DGT_PYTHON / DGT_PYTHON2; scripts/install-deps.sh makes the peers venv)" >&2
    exit 2
  fi
done
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
  : > "$tmp/$name.out"  # Exists before the server opens it, for the polling below.
  "$@" > "$tmp/$name.out" 2> "$tmp/$name.err" &
  PID=$!
  pids+=("$PID")
  PORT=
  for _ in $(seq 600); do
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

# server label : wire protocol the generator speaks to it.
for entry in dgt-1x:1 torch-1.13:1 dgt-2x:2 torch-2.13:2; do
  server=${entry%%:*}
  proto=${entry##*:}
  read -r l1 l5 l15 _ < /proc/loadavg
  echo "{\"server\": \"$server\", \"mode\": \"load\", \"pinned\": $([[ $pin == pin ]] && echo true || echo false), \"loadavg_1_5_15\": [$l1, $l5, $l15]}" | tee -a "$results"
  case $server in
    dgt-*) start "$server" "${server_cpu[@]}" "$build/bin/dgt" store serve --listen 127.0.0.1:0 ;;
    torch-1.13) start "$server" "${server_cpu[@]}" "$python" bench/store/torch_store_server.py ;;
    torch-2.13) start "$server" "${server_cpu[@]}" "$python2" bench/store/torch_store_server.py ;;
  esac
  grep -h 'listening on port' "$tmp/$server.out" >&2
  for conns in 8 64 512; do
    for op in set get add cas; do
      measure "$server" --protocol "$proto" --mode ops --op "$op" --conns "$conns" --seconds "$secs" \
        --server-pid "$PID"
    done
  done
  # Extra row, not a target figure: 16 SETs and one CHECK per round trip (SET has no reply, so a
  # torch client doing consecutive sets pipelines them like this).
  measure "$server" --protocol "$proto" --mode ops --op set --pipeline 16 --conns 64 \
    --seconds "$secs" --server-pid "$PID"
  measure "$server" --protocol "$proto" --mode fanout --waiters 512 --rounds 20
  idle_conns=${DGT_BENCH_IDLE_CONNS:-10000}
  if (( idle_conns > 0 )); then
    measure "$server" --protocol "$proto" --mode idle --conns "$idle_conns" --server-pid "$PID"
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
pairs = [("dgt-1x", "torch-1.13"), ("dgt-2x", "torch-2.13")]
print("\nops/s (p50/p99 us) per server, same generator; dgt-1x / dgt-2x: dgt's server spoken to in "
      "the torch 1.x / 2.x protocol")
print("op   conns | dgt-1x                    torch-1.13                ratio"
      " | dgt-2x                    torch-2.13                ratio"
      " | server CPU us/op dgt-1x/torch-1.13 dgt-2x/torch-2.13")
points = [(op, c) for c in (8, 64, 512) for op in ("set", "get", "add", "cas")]
points.append(("set-pipelined-16", 64))
def cell(r):
    return f"{r['ops_per_s']:9.0f} ({r['p50_us']:6.0f}/{r['p99_us']:6.0f})"
for op, conns in points:
    line = f"{op:4} {conns:5} |"
    cpu = []
    for d, t in pairs:
        dr, tr = ops[(d, op, conns)], ops[(t, op, conns)]
        line += f" {cell(dr)}   {cell(tr)}   {dr['ops_per_s'] / tr['ops_per_s']:5.2f}x |"
        cpu.append(f"{dr['server_cpu_us_per_op']:6.2f} / {tr['server_cpu_us_per_op']:6.2f}")
    print(line + "   " + "   ".join(cpu))
print("generator CPU us/op at 64 connections (bounds what any server can show here):",
      ", ".join(f"{op} " + " / ".join(f"{ops[(s, op, 64)]['gen_cpu_us_per_op']:.2f}"
                                       for p in pairs for s in p)
                for op in ("set", "get", "add", "cas")),
      "(dgt-1x / torch-1.13 / dgt-2x / torch-2.13)")
fan = {r["server"]: r for r in rows if r["mode"] == "fanout"}
for s, r in fan.items():
    print(f"fan-out {s:10}: 512 waiters p50 {r['p50_us']:.0f} us, p99 {r['p99_us']:.0f} us, "
          f"last waiter p50 {r['last_waiter_p50_us']:.0f} us")
idle = {r["server"]: r for r in rows if r["mode"] == "idle"}
for s, r in idle.items():
    print(f"idle    {s:10}: {r['held']} connections held, "
          f"{r['kib_per_conn']:.2f} KiB RSS per connection, {r['sample_answered']} of sample answered")

# Verdict per target (docs/PERFORMANCE.md), against the newest anchor (torch 2.13's libuv server,
# both spoken to in the 2.x protocol) and, for reference, against torch 1.13 (1.x protocol).
print("\nverdict per target (newest anchor: torch 2.13 libuv; dgt-2x against it):")
for op in ("set", "get", "add", "cas"):
    r2 = ops[("dgt-2x", op, 64)]["ops_per_s"] / ops[("torch-2.13", op, 64)]["ops_per_s"]
    r1 = ops[("dgt-1x", op, 64)]["ops_per_s"] / ops[("torch-1.13", op, 64)]["ops_per_s"]
    print(f"  >= 3x torch's ops/s at 64 connections, {op}: {r2:.2f}x torch 2.13 "
          f"({'met' if r2 >= 3 else 'NOT MET'}); {r1:.2f}x torch 1.13 "
          f"({'met' if r1 >= 3 else 'NOT MET'})")
if "dgt-2x" in fan:
    p99 = fan["dgt-2x"]["p99_us"] / 1000
    t2 = fan.get("torch-2.13", {}).get("p99_us", float("nan")) / 1000
    print(f"  fan-out to 512 waiters under 5 ms p99: dgt {p99:.1f} ms "
          f"({'met' if p99 < 5 else 'NOT MET'}); torch 2.13 {t2:.1f} ms")
if "dgt-2x" in idle:
    kib = idle["dgt-2x"]["kib_per_conn"]
    t2 = idle.get("torch-2.13", {}).get("kib_per_conn", float("nan"))
    print(f"  <= 16 KiB per idle connection: dgt {kib:.2f} KiB "
          f"({'met' if kib <= 16 else 'NOT MET'}); torch 2.13 {t2:.2f} KiB")
behind = []
for op, conns in points:
    d, t = ops[("dgt-2x", op, conns)], ops[("torch-2.13", op, conns)]
    if d["ops_per_s"] <= t["ops_per_s"]:
        behind.append(f"{op}@{conns} ({d['ops_per_s'] / t['ops_per_s']:.2f}x)")
if "dgt-2x" in fan and "torch-2.13" in fan and fan["dgt-2x"]["p99_us"] >= fan["torch-2.13"]["p99_us"]:
    behind.append("fan-out p99")
if "dgt-2x" in idle and "torch-2.13" in idle and \
        idle["dgt-2x"]["kib_per_conn"] >= idle["torch-2.13"]["kib_per_conn"]:
    behind.append("idle KiB per connection")
print("  dgt ahead of torch 2.13 on every row: " +
      ("yes" if not behind else "NO, behind or equal on: " + ", ".join(behind)))
PY
