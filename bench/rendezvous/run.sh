#!/usr/bin/env bash
# Rendezvous benchmark: starts dgt-rendezvous on a free loopback port, runs N simulated agents
# against it (bench/rendezvous/rendezvous_bench.cc), prints the figures and the service's peak RSS.
# Usage: bench/rendezvous/run.sh [build_dir] [agents...]   (default: build 1000 10000 25000)
# Each N runs once per backend in BACKENDS (default "memory etcd"): etcd is a fresh three-member
# etcd on loopback (/usr/bin/etcd or $DGT_ETCD_BIN; heartbeat 50 ms, election 500 ms; data in a
# temporary directory under /tmp, removed after) with `dgt-rendezvous --backend=etcd`; its rows add
# what etcd served per round (Txn and Range requests, bytes received, WAL fsyncs, from the members'
# /metrics) and the verdict "etcd within 2x of memory for a 1,000-node round". Then
# the failover run (failover_run below; SKIP_FAILOVER=1 skips it).
# CHANNELS=N sets the TCP connections the agents share (default 100). Then, in the same run, the
# anchors (bench/rendezvous/torch_c10d.py; SKIP_TORCH=1 skips them): torch 1.13's c10d rendezvous
# (DGT_PYTHON, default /usr/bin/python3) with TORCH1_AGENTS (default "10 50 100") agents, and
# torch 2.13's (DGT_PYTHON2, default /opt/dgt/peers-venv/bin/python) with TORCH2_AGENTS (default
# "10 100 1000 10000"); each family stops at the first N that does not complete within
# TORCH_BOUND seconds (default 100) and prints it. Last, a summary per N and the verdict per
# target (docs/PERFORMANCE.md). Runs in a loopback-only network namespace (bench/netns.sh;
# DGT_BENCH_NETNS=0 to run without).
set -euo pipefail
source "$(dirname "$0")/../netns.sh"
cd "$(dirname "$0")/../.."
ulimit -n "$(ulimit -Hn)"
BUILD=${1:-build}
shift || true
COUNTS=("$@")
[ ${#COUNTS[@]} -gt 0 ] || COUNTS=(1000 10000 25000)
# etcd's --max-request-bytes, and dgt-rendezvous' --etcd-max-request-bytes to match: etcd's
# default of 1.5 MiB holds a round of about 12,000 nodes like the bench's; 8 MiB holds 25,000.
ETCD_REQUEST_LIMIT=${ETCD_REQUEST_LIMIT:-8388608}  # not ETCD_*: etcd reads those itself
log=$(mktemp)
trap 'rm -f "$log"' EXIT

free_port() { "${DGT_PYTHON:-/usr/bin/python3}" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1",0)); print(s.getsockname()[1])'; }

# A fresh three-member etcd on loopback (Debian's etcd, $DGT_ETCD_BIN to override), data in a
# temporary directory; sets ETCD_ENDPOINTS (HOST:PORT,...), ETCD_URLS, ETCD_PIDS, ETCD_DIR.
etcd_start() {
  local etcd=${DGT_ETCD_BIN:-/usr/bin/etcd} cluster="" i
  ETCD_DIR=$(mktemp -d /tmp/dgt-bench-etcd.XXXXXX)
  ETCD_ENDPOINTS=""; ETCD_URLS=(); ETCD_PIDS=()
  local cports=() pports=()
  for i in 0 1 2; do cports+=("$(free_port)"); pports+=("$(free_port)"); done
  for i in 0 1 2; do cluster+="${cluster:+,}m$i=http://127.0.0.1:${pports[$i]}"; done
  for i in 0 1 2; do
    "$etcd" --name "m$i" --data-dir "$ETCD_DIR/m$i" \
      --listen-client-urls "http://127.0.0.1:${cports[$i]}" \
      --advertise-client-urls "http://127.0.0.1:${cports[$i]}" \
      --listen-peer-urls "http://127.0.0.1:${pports[$i]}" \
      --initial-advertise-peer-urls "http://127.0.0.1:${pports[$i]}" \
      --initial-cluster "$cluster" --initial-cluster-token dgt-bench --initial-cluster-state new \
      --heartbeat-interval "${ETCD_HEARTBEAT_MS:-50}" --election-timeout "${ETCD_ELECTION_MS:-500}" \
      --max-request-bytes "$ETCD_REQUEST_LIMIT" --logger zap --log-level error >"$ETCD_DIR/m$i.log" 2>&1 &
    ETCD_PIDS+=($!)
    ETCD_ENDPOINTS+="${ETCD_ENDPOINTS:+,}127.0.0.1:${cports[$i]}"
    ETCD_URLS+=("http://127.0.0.1:${cports[$i]}")
  done
  for _ in $(seq 100); do
    curl -sf "${ETCD_URLS[0]}/health" 2>/dev/null | grep -q '"health":"true"' && return 0
    sleep 0.1
  done
  echo "etcd did not become healthy within 10 s (logs in $ETCD_DIR)"; return 1
}

etcd_stop() {
  local p
  for p in "${ETCD_PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
  for p in "${ETCD_PIDS[@]}"; do wait "$p" 2>/dev/null || true; done
  rm -rf "$ETCD_DIR"
}

# etcd's counters so far, summed over the members (from each member's /metrics): KV requests
# served (grpc_server_handled_total of etcdserverpb.KV, every code: Txn, Range), bytes received
# from clients (etcd_network_client_grpc_received_bytes_total), and the WAL fsyncs (count and
# seconds, etcd_disk_wal_fsync_duration_seconds): "txn range bytes fsyncs fsync_s".
etcd_counters() {
  local u
  for u in "${ETCD_URLS[@]}"; do curl -sf "$u/metrics" || true; done | awk '
    /^grpc_server_handled_total/ && /grpc_service="etcdserverpb.KV"/ {
      m = $0; sub(/.*grpc_method="/, "", m); sub(/".*/, "", m); n[m] += $NF }
    /^etcd_network_client_grpc_received_bytes_total/ { bytes += $NF }
    /^etcd_disk_wal_fsync_duration_seconds_count/ { fc += $NF }
    /^etcd_disk_wal_fsync_duration_seconds_sum/ { fs += $NF }
    END { printf "%d %d %d %d %.6f\n", n["Txn"], n["Range"], bytes, fc, fs }'
}

# What the etcd counters moved by between two etcd_counters readings, as one line.
etcd_delta() {
  local t0 r0 b0 f0 s0 t1 r1 b1 f1 s1
  read -r t0 r0 b0 f0 s0 <<<"$1"; read -r t1 r1 b1 f1 s1 <<<"$2"
  awk -v t=$((t1 - t0)) -v r=$((r1 - r0)) -v b=$((b1 - b0)) -v f=$((f1 - f0)) -v s0="$s0" -v s1="$s1" \
    'BEGIN { printf "%d Txn, %d Range, %.1f KiB sent to etcd, %d WAL fsyncs (mean %.2f ms)\n",
             t, r, b / 1024, f, (f > 0 ? (s1 - s0) * 1000 / f : 0) }'
}

dgt_runs() {
  for n in "${COUNTS[@]}"; do
    for backend in ${BACKENDS:-memory etcd}; do
      [ "$backend" = none ] && continue  # BACKENDS=none: only the failover run.
      local out pid port bench_out bpid before mid after
      out=$(mktemp); bench_out=$(mktemp)
      local extra=()
      if [ "$backend" = etcd ]; then
        etcd_start || { echo "== $n agents, backend etcd"; echo "(etcd failed to start)"; continue; }
        extra=(--backend etcd --etcd-endpoints "$ETCD_ENDPOINTS"
               --etcd-max-request-bytes "$ETCD_REQUEST_LIMIT")
      fi
      # Every simulated agent connects from 127.0.0.1: lift the per-peer session limit (1,024).
      "$BUILD/bin/dgt-rendezvous" --listen 127.0.0.1:0 --max-sessions-per-peer 0 "${extra[@]}" \
        >"$out" 2>&1 &
      pid=$!
      for _ in $(seq 100); do grep -q "listening on port" "$out" && break; sleep 0.1; done
      port=$(grep -o 'listening on port [0-9]*' "$out" | awk '{print $4}')
      echo "== $n agents, backend $backend"
      [ "$backend" = etcd ] && before=$(etcd_counters)
      timeout 300 "$BUILD/bin/rendezvous_bench" --endpoint "127.0.0.1:$port" --agents "$n" \
        --channels "${CHANNELS:-100}" --timeout-s "${BENCH_TIMEOUT_S:-240}" --between-rounds-s 1 \
        >"$bench_out" 2>&1 &
      bpid=$!
      if [ "$backend" = etcd ]; then
        # The etcd requests of round 0 (every join): read while the bench waits between rounds.
        for _ in $(seq $(( ${BENCH_TIMEOUT_S:-240} * 20 ))); do
          grep -q -e "round 0 assigned" -e FAILED "$bench_out" && break
          kill -0 "$bpid" 2>/dev/null || break
          sleep 0.05
        done
        mid=$(etcd_counters)
      fi
      wait "$bpid" || echo "(benchmark failed for $n agents, backend $backend)"
      grep -v "round 0 assigned" "$bench_out"
      echo "service peak RSS: $(grep VmHWM /proc/$pid/status | awk '{print $2, $3}')"
      if [ "$backend" = etcd ]; then
        sleep 0.5  # The last commits of round 1.
        after=$(etcd_counters)
        echo "etcd, round 0 (every join): $(etcd_delta "$before" "$mid")"
        echo "etcd, loss -> round 1: $(etcd_delta "$mid" "$after")"
        grep -m3 -e "error" "$out" | cut -c1-400 || true
      fi
      kill "$pid"; wait "$pid" 2>/dev/null || true
      [ "$backend" = etcd ] && etcd_stop
      rm -f "$out" "$bench_out"
    done
  done
}

# The anchors, in the same run: torch's c10d rendezvous with as many agents as it completes
# within the bound, one process per N (torch 1.13 aborts the whole process when a store connection
# fails); the first N that does not complete ends that family's list.
torch_runs() {
  local bound=${TORCH_BOUND:-100}
  for family in 1.13 2.13; do
    local py counts
    if [ "$family" = 1.13 ]; then
      py=${DGT_PYTHON:-/usr/bin/python3}; counts=${TORCH1_AGENTS:-10 50 100}
    else
      py=${DGT_PYTHON2:-/opt/dgt/peers-venv/bin/python}; counts=${TORCH2_AGENTS:-10 100 1000 10000}
    fi
    echo "== torch $family c10d rendezvous ($py; bound $bound s per N)"
    for n in $counts; do
      local rc
      set +o pipefail
      timeout $((bound + 60)) "$py" bench/rendezvous/torch_c10d.py --agents "$n" --bound "$bound" \
        2>&1 | { grep -v -e '^agent [0-9]*: ' -e 'hostname of the client socket cannot be retrieved' || true; }
      rc=${PIPESTATUS[0]}
      set -o pipefail
      if [ "$rc" != 0 ]; then
        [ "$rc" = 124 ] && echo "torch $family c10d, $n agents: EXCEEDS THE BOUND (killed after $((bound + 60)) s)"
        [ "$rc" != 3 ] && [ "$rc" != 124 ] && echo "torch $family c10d, $n agents: FAILED: exited $rc"
        echo "torch $family c10d: larger N not tried"
        break
      fi
    done
  done
}

# Failover: two `dgt-rendezvous --backend=etcd` replicas on one etcd (leader lease
# FAILOVER_LEASE_S, default 1 s, with etcd's heartbeat 50 ms / election 500 ms), FAILOVER_AGENTS
# (default 1000) simulated agents given both endpoints; the leader is SIGKILLed once round 0 is
# assigned and the bench times until every agent is back in its round on the other replica.
failover_run() {
  local n=${FAILOVER_AGENTS:-1000}
  echo "== failover: $n agents, two replicas on etcd"
  if ! "$BUILD/bin/dgt-rendezvous" --help 2>&1 | grep -q -- --leader-lease-s; then
    echo "(not run: this dgt-rendezvous has no --leader-lease-s: replicas are not built)"; return 0
  fi
  etcd_start || { echo "(etcd failed to start)"; return 0; }
  local outs=() pids=() ports=() r
  for r in a b; do
    local out
    out=$(mktemp)
    "$BUILD/bin/dgt-rendezvous" --listen 127.0.0.1:0 --max-sessions-per-peer 0 --backend etcd \
      --etcd-endpoints "$ETCD_ENDPOINTS" --replica-id "r$r" \
      --leader-lease-s "${FAILOVER_LEASE_S:-1}" >"$out" 2>&1 &
    pids+=($!); outs+=("$out")
    for _ in $(seq 100); do grep -q "listening on port" "$out" && break; sleep 0.1; done
    ports+=("$(grep -o 'listening on port [0-9]*' "$out" | awk '{print $4}')")
    sleep 0.5  # The first replica campaigns first.
  done
  timeout 120 "$BUILD/bin/rendezvous_bench" --failover --agents "$n" --channels "${CHANNELS:-100}" \
    --endpoint "127.0.0.1:${ports[0]},127.0.0.1:${ports[1]}" --kill-pids "${pids[0]},${pids[1]}" \
    --timeout-s 60 || echo "(failover benchmark failed)"
  for r in 0 1; do
    grep -m3 -i -e "leader" -e "error" "${outs[$r]}" | cut -c1-300 | sed "s/^/  replica r$r: /" || true
    kill "${pids[$r]}" 2>/dev/null || true; wait "${pids[$r]}" 2>/dev/null || true
    rm -f "${outs[$r]}"
  done
  etcd_stop
}

dgt_runs 2>&1 | tee -a "$log"
if [ "${SKIP_FAILOVER:-0}" != 1 ]; then failover_run 2>&1 | tee -a "$log"; fi
if [ "${SKIP_TORCH:-0}" != 1 ]; then torch_runs 2>&1 | tee -a "$log"; fi

"${DGT_PYTHON:-/usr/bin/python3}" - "$log" <<'PY'
import re, sys
text = open(sys.argv[1]).read()
dgt, etcd = {}, {}
for block in re.split(r"^== (?=\d+ agents)", text, flags=re.M)[1:]:
    n = int(block.split()[0])
    backend = re.match(r"\d+ agents, backend (\w+)", block)
    backend = backend.group(1) if backend else "memory"
    r = {}
    m = re.search(r"last join -> every assignment delivered: ([\d.]+) ms", block)
    if m:
        r["assign_ms"] = float(m.group(1))
    m = re.search(r"agent lost -> survivor has its new round: p50 ([\d.]+) ms, p99 ([\d.]+) ms", block)
    if m:
        r["lost_p99_ms"] = float(m.group(2))
    m = re.search(r"service peak RSS: (\d+) kB", block)
    if m:
        r["rss_mib"] = int(m.group(1)) / 1024
    m = re.search(r"^etcd, round 0 \(every join\): (\d+) Txn.*?([\d.]+) KiB sent", block, re.M)
    if m:
        r["txn0"], r["kib0"] = int(m.group(1)), float(m.group(2))
    m = re.search(r"^etcd, loss -> round 1: (\d+) Txn", block, re.M)
    if m:
        r["txn1"] = int(m.group(1))
    (etcd if backend == "etcd" else dgt)[n] = r
torch = {"1.13": {}, "2.13": {}}
for m in re.finditer(r"^torch (\d+\.\d+)\S* c10d, (\d+) agents: (.*)$", text, flags=re.M):
    fam, n, rest = m.group(1), int(m.group(2)), m.group(3)
    t = re.search(r"every rank assigned: (\d+) ms", rest)
    torch[fam][n] = float(t.group(1)) if t else rest.split(":")[0]  # "EXCEEDS THE BOUND"/"FAILED"
ns = sorted(set(dgt) | set(torch["1.13"]) | set(torch["2.13"]))
def cell(v):
    return "-" if v is None else (f"{v:.0f} ms" if isinstance(v, float) else v)
if etcd:
    print("\nsummary: --backend=etcd (3-member etcd on loopback) next to memory, per N (one run each)")
    print(f"{'agents':>7} | {'memory':>9} | {'etcd':>9} | {'etcd/mem':>8} | {'etcd loss p99':>13} | "
          f"{'RSS mem/etcd MiB':>16} | etcd Txn: round 0, loss; KiB sent in round 0")
    for n in sorted(etcd):
        m, e = dgt.get(n, {}), etcd[n]
        ratio = (f"{e['assign_ms'] / m['assign_ms']:.1f}x"
                 if "assign_ms" in e and m.get("assign_ms") else "-")
        print(f"{n:7} | {cell(m.get('assign_ms')):>9} | {cell(e.get('assign_ms')):>9} | {ratio:>8} | "
              f"{cell(e.get('lost_p99_ms')):>13} | "
              f"{m.get('rss_mib', 0):7.0f} /{e.get('rss_mib', 0):6.0f} | "
              f"{e.get('txn0', '-')}, {e.get('txn1', '-')}; {e.get('kib0', 0):.0f}")
print("\nsummary: last join -> every assignment delivered, per N (one run each)")
print(f"{'agents':>7} | {'dgt':>10} | {'torch 1.13 c10d':>18} | {'torch 2.13 c10d':>18}")
for n in ns:
    d = dgt.get(n, {}).get("assign_ms")
    print(f"{n:7} | {cell(d):>10} | {cell(torch['1.13'].get(n)):>18} | "
          f"{cell(torch['2.13'].get(n)):>18}")
print("\nverdict per target (newest anchor: torch 2.13 c10d):")
big = dgt.get(10000, {})
if "assign_ms" in big:
    print(f"  10,000 nodes assigned in under 2 s: {big['assign_ms']:.0f} ms "
          f"({'met' if big['assign_ms'] < 2000 else 'NOT MET'})")
if "rss_mib" in big:
    mb = big["rss_mib"] * 1.048576
    print(f"  under 200 MB at 10,000: {big['rss_mib']:.0f} MiB = {mb:.0f} MB "
          f"({'met' if mb < 200 else 'NOT MET'})")
huge = dgt.get(25000, {})
if "assign_ms" in huge:
    print(f"  25,000 nodes in one round in under 1 s after the last join: {huge['assign_ms']:.0f} ms "
          f"({'met' if huge['assign_ms'] < 1000 else 'NOT MET'})")
if "rss_mib" in huge:
    mb = huge["rss_mib"] * 1.048576
    print(f"  under 250 MB at 25,000: {huge['rss_mib']:.0f} MiB = {mb:.0f} MB "
          f"({'met' if mb < 250 else 'NOT MET'})")
lost = [(n, r["lost_p99_ms"]) for n, r in sorted(dgt.items())
        if "lost_p99_ms" in r and n <= 10000]
if lost:
    worst = max(v for _, v in lost)
    print("  killed agent noticed by all survivors in under 1 s (up to 10,000): p99 " +
          ", ".join(f"{v:.0f} ms at {n}" for n, v in lost) +
          f" ({'met' if worst < 1000 else 'NOT MET'})")
e1, m1 = etcd.get(1000, {}), dgt.get(1000, {})
if "assign_ms" in e1 and m1.get("assign_ms"):
    ratio = e1["assign_ms"] / m1["assign_ms"]
    print(f"  etcd backend within 2x of memory for a 1,000-node round: {e1['assign_ms']:.0f} ms vs "
          f"{m1['assign_ms']:.0f} ms = {ratio:.1f}x ({'met' if ratio <= 2 else 'NOT MET'})")
elif 1000 in etcd:
    print("  etcd backend within 2x of memory for a 1,000-node round: NOT MET (the etcd run failed)")
m = re.search(r"replica killed -> every agent back in its round: ([\d.]+) ms", text)
if m:
    ms = float(m.group(1))
    print(f"  replica failover noticed and resumed by every agent in under 2 s: {ms:.0f} ms "
          f"({'met' if ms < 2000 else 'NOT MET'})")
elif "== failover" in text:
    print("  replica failover in under 2 s: NOT MEASURED (see the failover block)")
rows = []
for n in ns:
    d, t = dgt.get(n, {}).get("assign_ms"), torch["2.13"].get(n)
    if d is None or t is None:
        continue
    rows.append((n, d, t))
behind = [f"{n} ({d:.0f} ms vs {t:.0f} ms)" for n, d, t in rows if isinstance(t, float) and d >= t]
compared = ", ".join(f"{n}: dgt {d:.0f} ms vs {cell(t)}" for n, d, t in rows)
if rows:
    print(f"  dgt ahead of torch 2.13 on every N both ran ({compared}): " +
          ("yes" if not behind else "NO, behind on " + ", ".join(behind)))
else:
    print("  dgt ahead of torch 2.13: no N measured for both (run dgt at the N torch completed)")
PY
