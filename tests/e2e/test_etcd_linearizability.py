"""The job records and run records of two dgt-rendezvous --backend=etcd replicas are linearizable
registers under faults (docs/RELIABILITY.md, "Linearizability of the etcd backends").

A real three-member etcd cluster (Debian's etcd, test_etcd_ha.EtcdCluster) and two replicas
(2 s leader lease), each etcd member and each replica in a network namespace of its own
(netns_lan.Lan; as root with ip and iptables, else all on loopback and no partitions). Four
clients run `dgt submit`, `dgt cancel` and `dgt job show --json` against both replicas
(`--rdzv-endpoint A,B`) and record each call's invocation and answer with real times. Two more
clients (run_join_client.py) join short-lived nodes to three runs (min 1, max 2 nodes) through
the Session stream and record every assignment (run, round, node rank, node) with the times of
the node's join and of the assignment's arrival. Meanwhile a nemesis injects a random fault 2-5 s
after the last one healed: kill -9 of a replica (started again 1-3 s later) or of an etcd member
(restarted 1-3 s later), SIGSTOP of a replica or of an etcd member for 1-5 s (then SIGCONT), a
replica cut from every etcd member or an etcd member cut from the other two for 2-10 s (iptables
DROP in its namespace, then flushed). After DGT_CHAOS_SECONDS (default 120) every fault is healed
and every acknowledged job is read once more. tests/e2e/linearizability.py then checks the
history: each job record a linearizable register (Wing & Gong, one key at a time), no
acknowledged job lost, no job id handed out twice, no node rank of a round held by two nodes
(nor two ranks by one node), no run's round going back. A deposed leader that wrote (no fence)
would break these. No node runs jobs here: a job stays queued until cancelled.

Skips without etcd/etcdctl or the peers venv (grpcio, for the run joins) except under CI=true
(test_rendezvous_etcd.need_etcd, conftest.python2). `bench/chaos/etcd.sh --minutes N` runs it
longer.
"""
import json
import math
import os
import random
import signal
import subprocess
import threading
import time

import netns_lan
from conftest import BIN, REPO
from jobs_helpers import dgt, logs
from jobs_helpers import poll as wait_for
from linearizability import Op, check
from test_etcd_ha import EtcdCluster
from test_rendezvous_etcd import free_port, need_etcd

SECONDS = float(os.environ.get("DGT_CHAOS_SECONDS", "120"))
CLIENTS = 4
RUN_CLIENTS = 2  # Threads of run_join_client.py.
RUNS = 3
RUN_CLIENTS_BASE = 2 * CLIENTS  # Client numbers of the run joins (after the final readers).
LEASE_S = 2
CALL_TIMEOUT_S = 5  # dgt --timeout per call.
SEED = int(os.environ.get("DGT_CHAOS_SEED", str(int(time.time()))))


class Replicas:
    """Two dgt-rendezvous --backend=etcd on fixed ports, restartable; on `hosts` (default
    loopback), each started through `wrap(i, args)` (default: args itself)."""

    def __init__(self, spawn, etcd_endpoints, hosts=("127.0.0.1", "127.0.0.1"), wrap=None):
        self.spawn = spawn
        self.etcd = ",".join(etcd_endpoints)
        self.ports = [free_port(), free_port()]
        self.hosts = list(hosts)
        self.wrap = wrap or (lambda i, args: args)
        self.endpoints = ",".join(f"{h}:{p}" for h, p in zip(self.hosts, self.ports))
        self.procs = [None, None]
        self.starts = [0, 0]

    def start(self, i):
        self.starts[i] += 1
        self.procs[i] = self.spawn(self.wrap(i, [
            BIN / "dgt-rendezvous", "--listen", f"{self.hosts[i]}:{self.ports[i]}",
            "--backend=etcd", f"--etcd-endpoints={self.etcd}", f"--replica-id=r{i + 1}",
            f"--leader-lease-s={LEASE_S}", "--allow-unauthenticated-submit"]),
            name=f"r{i + 1}.{self.starts[i]}")

    def running(self, i):
        return self.procs[i] is not None and self.procs[i].popen.poll() is None

    def pid(self, i):
        return self.procs[i].popen.pid

    def leader_first(self):
        """The endpoints with the one whose log last said it leads first: a standby answers
        `dgt job show` from etcd, reading every job record (jobs_service.cc, GetJob)."""
        last = [-1, -1]
        for i, p in enumerate(self.procs):
            if p is not None:
                text = logs(p)
                last[i] = text.rfind(" leads: ") - text.rfind(" is a standby")
        order = [1, 0] if last[1] > last[0] else [0, 1]
        return ",".join(f"{self.hosts[i]}:{self.ports[i]}" for i in order)

    def logs(self):
        return "\n".join(f"--- r{i + 1}: {logs(p)[-3000:]}" for i, p in enumerate(self.procs) if p)


class History:
    def __init__(self):
        self.ops = []
        self.lock = threading.Lock()
        self.keys = []

    def add(self, op):
        with self.lock:
            self.ops.append(op)
            if op.kind == "submit" and op.status == "ok":
                self.keys.append(op.key)

    def some_key(self, rng):
        with self.lock:
            return rng.choice(self.keys) if self.keys else None


def call(endpoints, *args):
    """A `dgt` call with its real invocation and answer times; None for the answer when it did
    not end within its bound."""
    invoke = time.monotonic()
    try:
        out = dgt(endpoints, *args, f"--timeout={CALL_TIMEOUT_S}", timeout=3 * CALL_TIMEOUT_S)
    except Exception:  # noqa: BLE001 (subprocess.TimeoutExpired: the outcome is unknown)
        return invoke, math.inf, None
    return invoke, time.monotonic(), out


def submit(client, endpoints, job_file, history):
    invoke, complete, out = call(endpoints, "submit", job_file)
    if out is not None and out.returncode == 0:
        history.add(Op(client, "submit", out.stdout.strip(), invoke, complete, "ok"))
    # Any other answer: the job may exist under an id nobody learnt; nothing to check.


def cancel(client, endpoints, key, history):
    invoke, complete, out = call(endpoints, "cancel", key)
    if out is not None and out.returncode == 0:
        history.add(Op(client, "cancel", key, invoke, complete, "ok"))
    elif out is not None and out.returncode == 1 and "already finished" in out.stderr:
        history.add(Op(client, "cancel", key, invoke, complete, "fail", "finished"))
    elif out is not None and out.returncode == 1 and f"no job '{key}'" in out.stderr:
        history.add(Op(client, "cancel", key, invoke, complete, "fail", "not_found"))
    else:
        history.add(Op(client, "cancel", key, invoke, math.inf, "info"))


def read(client, endpoints, key, history):
    """Records the read's answer; False when it got none."""
    invoke, complete, out = call(endpoints, "job", "show", key, "--json")
    if out is not None and out.returncode == 0:
        state = json.loads(out.stdout)["state"]
        history.add(Op(client, "read", key, invoke, complete, "ok", state))
    elif out is not None and out.returncode == 1 and f"no job '{key}'" in out.stderr:
        history.add(Op(client, "read", key, invoke, complete, "ok", None))
    else:
        return False  # A read that failed otherwise changed nothing: not recorded.
    return True


class Nemesis:
    """A random fault on the replicas or the etcd members 2-5 s after the last one healed, each
    healed in 1-5 s (a kill or a SIGSTOP) or 2-10 s (a partition, with `lan`)."""

    def __init__(self, rng, replicas, cluster, lan):
        self.rng = rng
        self.replicas = replicas
        self.cluster = cluster
        self.lan = lan
        self.kinds = ["kill replica", "stop replica", "kill etcd", "stop etcd"]
        if lan is not None:
            # A SIGSTOP of the leading replica past its lease is what lets a deposed leader
            # write (what the fence stops): twice as likely, so that partitions do not thin it.
            self.kinds += ["stop replica", "partition replica", "partition etcd"]
        self.faults = {}
        self.log = []

    def run(self, until):
        while time.monotonic() < until:
            time.sleep(self.rng.uniform(2, 5))
            if time.monotonic() >= until:
                break
            kind = self.rng.choice(self.kinds)
            target = self.rng.randrange(2 if "replica" in kind else 3)
            if kind.startswith("partition"):
                hold = self.rng.uniform(2, 10)
            elif kind.startswith("stop"):
                hold = self.rng.uniform(1, 5)
            else:
                hold = self.rng.uniform(1, 3)
            self.faults[kind] = self.faults.get(kind, 0) + 1
            self.log.append(f"{time.monotonic():.3f} {kind} {target} for {hold:.1f} s")
            if kind == "kill replica":
                self.replicas.procs[target].popen.kill()
                self.replicas.procs[target].popen.wait(timeout=10)
                time.sleep(hold)
                self.replicas.start(target)
            elif kind == "stop replica":
                pid = self.replicas.pid(target)
                os.kill(pid, signal.SIGSTOP)
                time.sleep(hold)
                os.kill(pid, signal.SIGCONT)
            elif kind == "kill etcd":
                self.cluster.kill(target)
                time.sleep(hold)
                self.cluster.start(target)
            elif kind == "stop etcd":
                pid = self.cluster.procs[target].pid
                os.kill(pid, signal.SIGSTOP)
                time.sleep(hold)
                os.kill(pid, signal.SIGCONT)
            else:
                members = [f"m{i}" for i in range(3)]
                if kind == "partition replica":  # Cut from every etcd member.
                    name, others = f"r{target + 1}", members
                else:  # An etcd member cut from the other two; the replicas still reach it.
                    name, others = members[target], members[:target] + members[target + 1:]
                self.lan.cut(name, others)
                try:
                    time.sleep(hold)
                finally:
                    self.lan.heal(name)


def client_loop(client, rng, endpoints, job_file, history, until):
    while time.monotonic() < until:
        r = rng.random()
        key = history.some_key(rng)
        if r < 0.3 or key is None:
            submit(client, endpoints, job_file, history)
        elif r < 0.55:
            cancel(client, endpoints, key, history)
        else:
            read(client, endpoints, key, history)


def test_job_and_run_records_are_linearizable_under_faults(spawn, tmp_path, python2):
    need_etcd()
    lan = None
    if netns_lan.available():
        lan = netns_lan.Lan("dgtL", ["m0", "m1", "m2", "r1", "r2"])
    else:
        print("no partitions: network namespaces need root, ip and iptables")
    try:
        if lan is None:
            cluster = EtcdCluster(3)
        else:
            cluster = EtcdCluster(3, hosts=[lan.ip[f"m{i}"] for i in range(3)],
                                  wrap=lambda i, args: lan.wrap(f"m{i}", args))
        try:
            run_chaos(spawn, tmp_path, python2, cluster, lan)
        finally:
            cluster.close()
    finally:
        if lan is not None:
            lan.close()


def run_join_stubs(python2, tmp_path):
    """The rendezvous protocol's Python stubs for run_join_client.py, made by grpc_tools.protoc
    (the peers venv's grpcio-tools) under tmp_path/stubs."""
    stubs = tmp_path / "stubs"
    stubs.mkdir()
    r = subprocess.run([python2, "-m", "grpc_tools.protoc", f"-I{REPO / 'proto'}",
                        f"--python_out={stubs}", f"--grpc_python_out={stubs}",
                        "dgt/rendezvous/v1/rendezvous.proto"],
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stderr
    for d in ("dgt", "dgt/rendezvous", "dgt/rendezvous/v1"):
        (stubs / d / "__init__.py").touch()  # Ahead of any installed `dgt` package.
    return stubs


def run_ops(text):
    """The ops of run_join_client.py's assignments, its refusals, and its nodes' ends counted."""
    ops, refusals, ends = [], [], {}
    for line in text.splitlines():
        r = json.loads(line)
        if "refused" in r:
            refusals.append(r)
            continue
        if "end" in r:
            ends[r["end"]] = ends.get(r["end"], 0) + 1
            continue
        c, run, rnd = RUN_CLIENTS_BASE + r["client"], r["run"], r["round"]
        span = (r["invoke"], r["complete"], "ok")
        ops.append(Op(c, "assign", f"{run}/{rnd}/rank {r['node_rank']}", *span, r["node"]))
        ops.append(Op(c, "assign", f"{run}/{rnd}/{r['node']}", *span, r["node_rank"]))
        ops.append(Op(c, "round", f"{run}/round", *span, rnd))
    return ops, refusals, ends


def run_chaos(spawn, tmp_path, python2, cluster, lan):
    rng = random.Random(SEED)
    print(f"seed {SEED} (DGT_CHAOS_SEED), {SECONDS:.0f} s")
    began = time.monotonic()
    stubs = run_join_stubs(python2, tmp_path)
    if lan is None:
        replicas = Replicas(spawn, cluster.endpoints)
    else:
        replicas = Replicas(spawn, cluster.endpoints, hosts=[lan.ip["r1"], lan.ip["r2"]],
                            wrap=lambda i, args: lan.wrap(f"r{i + 1}", args))
    replicas.start(0)
    assert wait_for(lambda: "r1 leads" in logs(replicas.procs[0]), 20), replicas.logs()
    replicas.start(1)
    assert wait_for(lambda: "standby" in logs(replicas.procs[1]), 20), replicas.logs()
    job_file = tmp_path / "job.yaml"
    job_file.write_text("command: sleep 1\ninstance_count: 1\n")

    history = History()
    started = time.monotonic()
    until = started + SECONDS
    nemesis = Nemesis(random.Random(rng.random()), replicas, cluster, lan)
    joins = spawn([python2, REPO / "tests" / "e2e" / "run_join_client.py", "--stubs", stubs,
                   "--endpoints", replicas.endpoints, "--clients", RUN_CLIENTS, "--runs", RUNS,
                   "--seconds", SECONDS, "--seed", int(rng.random() * 2**31)], name="joins")
    threads = [threading.Thread(
        target=client_loop,
        args=(c, random.Random(rng.random()), replicas.endpoints, job_file, history, until))
        for c in range(CLIENTS)]
    for t in threads:
        t.start()
    # The nemesis runs on this thread: the etcd members it starts again die with the thread that
    # started them (PR_SET_PDEATHSIG), so not with a thread of their own.
    nemesis.run(until)
    for t in threads:
        t.join(timeout=120)
        assert not t.is_alive(), "a client did not end within its bound"
    # Its nodes end within their join and rejoin bounds (10 s, 8 s) and their stay (3 s).
    assert joins.wait(timeout=60) == 0, joins.stderr[-3000:]

    drained = time.monotonic()
    # Healed (the nemesis ends each fault itself): every replica and member up, a leader.
    for i in range(2):
        if not replicas.running(i):
            replicas.start(i)
    for i in range(3):
        assert cluster.running(i), f"etcd member m{i} exited on its own: {cluster.log_tails()}"
    cluster.wait_healthy(60)
    # Every acknowledged job read once more, until an answer comes, by clients of their own.
    keys = list(history.keys)
    late = []
    endpoints = replicas.leader_first()

    def read_again(client):
        while keys:
            try:
                key = keys.pop()
            except IndexError:
                return
            deadline = time.monotonic() + 30
            while not read(client, endpoints, key, history):
                if time.monotonic() > deadline:
                    late.append(key)
                    return

    readers = [threading.Thread(target=read_again, args=(CLIENTS + c,))
               for c in range(CLIENTS)]
    for t in readers:
        t.start()
    for t in readers:
        t.join(timeout=120)
        assert not t.is_alive(), "a final read did not end within its bound"
    assert not late, f"no answer for {late} within 30 s after healing"

    reread = time.monotonic()
    runs, refusals, ends = run_ops(joins.stdout)
    violations, summary = check(history.ops + runs)
    print(f"set-up {started - began:.1f} s, calls ended {drained - until:.1f} s after the "
          f"chaos, final reads {reread - drained:.1f} s, check {time.monotonic() - reread:.1f} s")
    print(summary)
    print(f"run joins: {len(runs) // 3} assignments, {len(refusals)} refusals, nodes ended: "
          + ", ".join(f"{k} {v}" for k, v in sorted(ends.items()))
          + "".join(f"\n  {r}" for r in refusals[:5]))
    print("faults: " + ", ".join(f"{k} {v}" for k, v in sorted(nemesis.faults.items())))
    assert sum(nemesis.faults.values()) >= SECONDS / 12, nemesis.log
    assert len(history.keys) >= 10, (summary, replicas.logs())
    assert len(runs) // 3 >= 10, (summary, joins.stderr[-3000:], replicas.logs())
    assert not violations, ("\n\n".join(violations[:5]) + "\n\nfaults:\n" +
                            "\n".join(nemesis.log) + "\n" + replicas.logs())
