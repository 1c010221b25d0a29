#!/usr/bin/env bash
# Store benchmark: the same load generator (store_bench) against dgt's server (`dgt store serve`)
# and both torch anchors, in one run, on loopback, one server after the other:
#   dgt        with the torch 1.x protocol   | torch 1.13's TCPStore server (Debian's python3)
#   dgt        with the torch 2.x protocol   | torch 2.13's libuv TCPStore server (DGT_PYTHON2)
# Prints one JSON line per measurement, tagged with the server, then a summary table, one verdict
# line per target (docs/PERFORMANCE.md), and exits 1 when a figure of dgt's is worse than the one
# documented in bench/store/documented.json by more than its tolerance (2 when the bench cannot
# run).
#   bench/store/run.sh [BUILD_DIR] [SECONDS_PER_POINT] [pin]
# Bounded: every ops point stops after SECONDS_PER_POINT (default 3) or 2,000,000 operations; the
# fan-outs after 20 and 5 rounds; each bootstrap after DGT_BENCH_BOOT_DEADLINE seconds (30).
# The 2.x servers (dgt-2x, torch-2.13) also run: check and multi_get at 64 and 512 connections;
# one SET waking 16,384 waiters; and the bootstrap of DGT_BENCH_BOOT_CLIENTS clients (default
# 100,000: VALIDATE/PING, ADD on a barrier counter, WAIT on the release key) on a fresh server,
# and, when the server's RLIMIT_NOFILE is below that, again at the most clients it allows.
# `pin` runs each server on CPU 0 and the load generator on CPU 1 (taskset), for every server
# alike; without it the scheduler places them. The load average is printed before each server.
# DGT_BENCH_IDLE_CONNS (default 10000; 0 skips) sets the idle-connections point, which takes
# torch 1.13's server about a minute to open; it runs first on each server, before anything else
# has grown the server's heap. DGT_BENCH_FANOUT_BIG (default 16384; 0 skips) sets the big fan-out.
# DGT_BENCH_BOOT_CLIENTS=0 skips the bootstrap. DGT_PYTHON (default /usr/bin/python3, torch 1.13)
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

# serve SERVER : starts SERVER (a label of the loop below) with its stdout in $tmp/SERVER.out.
serve() {
  case $1 in
    dgt-*) start "$1" "${server_cpu[@]}" "$build/bin/dgt" store serve --listen 127.0.0.1:0 ;;
    torch-1.13) start "$1" "${server_cpu[@]}" "$python" bench/store/torch_store_server.py ;;
    torch-2.13) start "$1" "${server_cpu[@]}" "$python2" bench/store/torch_store_server.py ;;
  esac
  grep -h 'listening on port' "$tmp/$1.out" >&2
}

stop() {
  kill "$PID"; wait "$PID" 2>/dev/null || true
}

# bootstrap SERVER : the N-client bootstrap on a fresh server; then, when N did not fit under
# the server's RLIMIT_NOFILE, again on a fresh server with the most clients that limit allows.
bootstrap() {
  local server=$1 clients=${DGT_BENCH_BOOT_CLIENTS:-100000} limit
  (( clients > 0 )) || return 0
  local deadline=${DGT_BENCH_BOOT_DEADLINE:-30}
  serve "$server"
  measure "$server" --protocol 2 --mode bootstrap --clients "$clients" --deadline "$deadline" \
    --server-pid "$PID"
  limit=$(sed -n 's/^Max open files *\([0-9]*\).*/\1/p' "/proc/$PID/limits")
  stop
  if [[ -n $limit ]] && (( limit - 100 < clients )); then
    serve "$server"
    measure "$server" --protocol 2 --mode bootstrap --clients $(( (limit - 100) / 1000 * 1000 )) \
      --deadline "$deadline" --server-pid "$PID"
    stop
  fi
}

# server label : wire protocol the generator speaks to it.
for entry in dgt-1x:1 torch-1.13:1 dgt-2x:2 torch-2.13:2; do
  server=${entry%%:*}
  proto=${entry##*:}
  read -r l1 l5 l15 _ < /proc/loadavg
  echo "{\"server\": \"$server\", \"mode\": \"load\", \"pinned\": $([[ $pin == pin ]] && echo true || echo false), \"loadavg_1_5_15\": [$l1, $l5, $l15]}" | tee -a "$results"
  serve "$server"
  idle_conns=${DGT_BENCH_IDLE_CONNS:-10000}
  if (( idle_conns > 0 )); then
    measure "$server" --protocol "$proto" --mode idle --conns "$idle_conns" --server-pid "$PID"
  fi
  ops=(set get add cas)
  if [[ $proto == 2 ]]; then ops+=(check multi_get); fi
  for conns in 8 64 512; do
    for op in "${ops[@]}"; do
      if [[ $conns == 8 && ($op == check || $op == multi_get) ]]; then continue; fi
      measure "$server" --protocol "$proto" --mode ops --op "$op" --conns "$conns" --seconds "$secs" \
        --server-pid "$PID"
    done
  done
  # Extra row, not a target figure: 16 SETs and one CHECK per round trip (SET has no reply, so a
  # torch client doing consecutive sets pipelines them like this).
  measure "$server" --protocol "$proto" --mode ops --op set --pipeline 16 --conns 64 \
    --seconds "$secs" --server-pid "$PID"
  measure "$server" --protocol "$proto" --mode fanout --waiters 512 --rounds 20
  big=${DGT_BENCH_FANOUT_BIG:-16384}
  if [[ $proto == 2 ]] && (( big > 0 )); then
    measure "$server" --protocol "$proto" --mode fanout --waiters "$big" --rounds 5
  fi
  stop
  if [[ $proto == 2 ]]; then bootstrap "$server"; fi
done

"$python" - "$results" bench/store/documented.json <<'PY'
import json, math, sys
rows = [json.loads(l) for l in open(sys.argv[1])]
documented = json.load(open(sys.argv[2]))
nan = float("nan")
for r in rows:
    if r["mode"] == "load":
        print(f"load average before {r['server']}: {r['loadavg_1_5_15']} (pinned: {r['pinned']})")
ops = {(r["server"], r["op"], r["conns"]): r for r in rows if r["mode"] == "ops"}
pairs = [("dgt-1x", "torch-1.13"), ("dgt-2x", "torch-2.13")]
print("\nops/s (p50/p99 us) per server, same generator; dgt-1x / dgt-2x: dgt's server spoken to in "
      "the torch 1.x / 2.x protocol")
print("op               conns | dgt-1x                    torch-1.13                ratio"
      " | dgt-2x                    torch-2.13                ratio"
      " | server CPU us/op dgt-1x/torch-1.13 dgt-2x/torch-2.13")
points = [(op, c) for c in (8, 64, 512) for op in ("set", "get", "add", "cas", "check", "multi_get")
          if not (c == 8 and op in ("check", "multi_get"))]
points.append(("set-pipelined-16", 64))
def cell(r):
    return f"{r['ops_per_s']:9.0f} ({r['p50_us']:6.0f}/{r['p99_us']:6.0f})" if r else " " * 25
for op, conns in points:
    line = f"{op:16} {conns:5} |"
    cpu = []
    for d, t in pairs:
        dr, tr = ops.get((d, op, conns)), ops.get((t, op, conns))
        ratio = f"{dr['ops_per_s'] / tr['ops_per_s']:5.2f}x" if dr and tr else "     -"
        line += f" {cell(dr)}   {cell(tr)}   {ratio} |"
        cpu.append(f"{dr['server_cpu_us_per_op']:6.2f} / {tr['server_cpu_us_per_op']:6.2f}"
                   if dr and tr else "     - /      -")
    print(line + "   " + "   ".join(cpu))
print("generator CPU us/op at 64 connections (bounds what any server can show here):",
      ", ".join(f"{op} " + " / ".join(f"{ops[(s, op, 64)]['gen_cpu_us_per_op']:.2f}"
                                       for p in pairs for s in p)
                for op in ("set", "get", "add", "cas")),
      "(dgt-1x / torch-1.13 / dgt-2x / torch-2.13)")
fan = {(r["server"], r["waiters"]): r for r in rows if r["mode"] == "fanout"}
for (s, n), r in sorted(fan.items(), key=lambda kv: (kv[0][1], kv[0][0])):
    print(f"fan-out {s:10}: {n} waiters p50 {r['p50_us'] / 1000:.1f} ms, p99 "
          f"{r['p99_us'] / 1000:.1f} ms; last waiter p50 {r['last_waiter_p50_us'] / 1000:.1f} ms, "
          f"p99 {r['last_waiter_p99_us'] / 1000:.1f} ms ({r['rounds']} rounds)")
idle = {r["server"]: r for r in rows if r["mode"] == "idle"}
for s, r in idle.items():
    print(f"idle    {s:10}: {r['held']} connections held, "
          f"{r['kib_per_conn']:.2f} KiB RSS per connection, {r['sample_answered']} of sample answered")
boot = {}
for r in rows:
    if r["mode"] == "bootstrap":
        boot.setdefault(r["server"], []).append(r)
def boot_text(r):
    head = (f"{r['clients']} clients ({r['procs']} processes, {r['sources']} source addresses): ")
    if r["ok"]:
        return head + (f"{r['seconds']:.2f} s first connect to last release, server RSS "
                       f"{r['server_rss_before_kib'] / 1024:.0f} -> {r['server_rss_peak_kib'] / 1024:.0f} MiB "
                       f"({r['kib_per_conn']:.2f} KiB per connection)")
    return head + (f"FAILED in {r['deadline_s']:.0f} s: {r['connected']} connected, {r['released']} "
                   f"released, {r['failed']} failed (first: {r['first_error'] or 'none'}); server "
                   f"RLIMIT_NOFILE {r['server_max_open_files']}, RSS peak "
                   f"{r['server_rss_peak_kib'] / 1024:.0f} MiB")
for s, rs in boot.items():
    for r in rs:
        print(f"bootstrap {s:10}: {boot_text(r)}")

def ok(b):
    return "met" if b else "NOT MET"
print("\nverdict per target (newest anchor: torch 2.13 libuv; dgt-2x against it):")
cpu_points = [(op, c) for c in (64, 512) for op in ("set", "get", "add", "cas", "check", "multi_get")]
ratios = {}
for op, c in cpu_points:
    d, t = ops.get(("dgt-2x", op, c)), ops.get(("torch-2.13", op, c))
    if d and t and t["server_cpu_us_per_op"] > 0:
        ratios[f"{op}@{c}"] = d["server_cpu_us_per_op"] / t["server_cpu_us_per_op"]
worst = max(ratios.values()) if ratios else nan
print(f"  server CPU per op <= 0.33x torch 2.13 (64 and 512 connections): worst {worst:.2f}x "
      f"({ok(worst <= 0.33)}); " + ", ".join(f"{k} {v:.2f}x" for k, v in ratios.items()))
f512d, f512t = fan.get(("dgt-2x", 512)), fan.get(("torch-2.13", 512))
r512 = f512d["last_waiter_p99_us"] / f512t["last_waiter_p99_us"] if f512d and f512t else nan
if f512d:
    print(f"  fan-out to 512, last waiter p99 <= 0.5x torch 2.13: dgt "
          f"{f512d['last_waiter_p99_us'] / 1000:.1f} ms, torch 2.13 "
          f"{(f512t or {}).get('last_waiter_p99_us', nan) / 1000:.1f} ms, {r512:.2f}x ({ok(r512 <= 0.5)})")
    print(f"  fan-out to 512 waiters, p99 < 5 ms: dgt {f512d['p99_us'] / 1000:.1f} ms "
          f"({ok(f512d['p99_us'] < 5000)}); torch 2.13 {(f512t or {}).get('p99_us', nan) / 1000:.1f} ms")
big = [(n, r) for (s, n), r in fan.items() if s == "dgt-2x" and n > 512]
for n, r in big:
    t = fan.get(("torch-2.13", n), {})
    ms = r["last_waiter_p99_us"] / 1000
    print(f"  fan-out to {n} waiters, SET to last reply <= 100 ms: dgt {ms:.1f} ms "
          f"({ok(ms <= 100)}); torch 2.13 {t.get('last_waiter_p99_us', nan) / 1000:.1f} ms")
if "dgt-2x" in idle:
    kib = idle["dgt-2x"]["kib_per_conn"]
    t2 = idle.get("torch-2.13", {}).get("kib_per_conn", nan)
    print(f"  <= 1 KiB per idle connection: dgt {kib:.2f} KiB at {idle['dgt-2x']['held']} "
          f"connections ({ok(kib <= 1)}); torch 2.13 {t2:.2f} KiB")
    print(f"  <= 16 KiB per idle connection: dgt {kib:.2f} KiB ({ok(kib <= 16)})")
for s in ("dgt-2x", "torch-2.13"):
    rs = boot.get(s, [])
    if not rs:
        continue
    first = rs[0]
    met = first["ok"] and first["clients"] >= 100000 and first["seconds"] <= 10
    line = f"  100,000-client bootstrap <= 10 s, {s}: "
    line += (f"{first['seconds']:.2f} s" if first["ok"] else "failed") + f" at {first['clients']}"
    if s == "dgt-2x":
        line += f" ({ok(met)})"
    if len(rs) > 1:
        fit = rs[1]
        line += (f"; at {fit['clients']} (this machine's RLIMIT_NOFILE): "
                 + (f"{fit['seconds']:.2f} s" if fit["ok"] else "failed"))
    print(line)
for op in ("set", "get", "add", "cas"):
    r2 = ops[("dgt-2x", op, 64)]["ops_per_s"] / ops[("torch-2.13", op, 64)]["ops_per_s"]
    print(f"  >= 3x torch's ops/s at 64 connections, {op}: {r2:.2f}x torch 2.13 ({ok(r2 >= 3)})")

# Figures worse than documented (bench/store/documented.json) by more than their tolerance.
figures = {
    "idle_kib_per_conn": idle.get("dgt-2x", {}).get("kib_per_conn"),
    "server_cpu_ratio_worst": worst if ratios else None,
    "fanout_512_last_waiter_p99_ratio": r512 if f512d and f512t else None,
}
for n, r in big:
    figures[f"fanout_{n}_last_waiter_p99_ms"] = r["last_waiter_p99_us"] / 1000
for r in boot.get("dgt-2x", []):
    if r["ok"]:
        figures[f"bootstrap_{r['clients']}_seconds"] = r["seconds"]
worse = []
for name, doc in documented["figures"].items():
    got = figures.get(name)
    if got is None or (isinstance(got, float) and math.isnan(got)):
        continue
    if got > doc["value"] * doc["tolerance"]:
        worse.append(f"{name} {got:.3g} (documented {doc['value']}, tolerance x{doc['tolerance']})")
print("  dgt's figures against docs/PERFORMANCE.md: " +
      ("none worse than documented" if not worse else "WORSE: " + "; ".join(worse)))
sys.exit(1 if worse else 0)
PY
