"""dgt-rendezvous --backend=etcd surviving etcd and replica failures, end to end
(docs/ETCD.md, docs/OPERATIONS.md "High availability").

Every test starts a real three-member etcd cluster (Debian's etcd 3.4) on free loopback ports with
its data in a temporary directory that is removed however the test ends, and runs a job of two
dgt-run agents x two PyTorch 2.13 workers (the peers venv, gloo) that all_reduce steps until the
test says stop (workers/ha_steps.py: one line per step with RANK and PID):
- the etcd leader SIGKILLed while the round forms, and the next leader while the job runs: the job
  completes (exit 0), ranks 0..3 each started once, every step of a rank from one PID, round 0;
- every etcd member stopped mid-job: a new join gets a clear UNAVAILABLE error, dgt-rendezvous
  stays up, the workers keep stepping with their PIDs, and the job completes when etcd is back;
- two replicas, agents with `--rdzv-endpoint A,B`: the leading replica SIGKILLed mid-job, the
  standby takes over, the job completes with the same workers and the agents log the switch;
- one replica in a network namespace, cut from etcd with iptables: it answers Session streams
  a standby's UNAVAILABLE within its lease TTL + 2 s, the other replica leads, and the job's ranks
  stay unique.
The etcd tests skip without etcd/etcdctl and the peers venv except under CI=true (fail); the
partition test needs root, ip and iptables.
"""
import ctypes
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

import pytest

from conftest import BIN, WORKERS, dgt_env, records, wait_for
from test_rendezvous_etcd import ETCD, ETCDCTL, free_port, need_etcd

WORKER = WORKERS / "ha_steps.py"
WORLD = 4

_libc = ctypes.CDLL("libc.so.6", use_errno=True)


def _die_with_parent():
    _libc.prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG: no etcd outlives the test process.


class EtcdCluster:
    """`members` etcd members on free loopback ports (fast elections: heartbeat 50 ms, election
    timeout 500 ms, as tests/etcd/etcd_cluster.h), data in a fresh temporary directory. Members
    die with the test process (PR_SET_PDEATHSIG); the directory is removed by close() and, should
    the test process die first (any signal, SIGKILL included), by a sweeper shell blocked on a pipe
    that only this process holds. `extra_hosts`: more addresses each member's client port listens
    on (a veth's host side, for the partition test). `hosts`: the address each member listens on
    for clients and peers (default 127.0.0.1); `wrap(i, args)`: the command line that runs member
    i (default: args itself; e.g. netns_lan.Lan.wrap, to start it in a namespace)."""

    def __init__(self, members=3, extra_hosts=(), hosts=None, wrap=None):
        self.dir = tempfile.mkdtemp(prefix="dgt-etcd-ha-")
        self.sweeper = subprocess.Popen(
            ["/bin/sh", "-c", 'exec >/dev/null 2>&1; cat; rm -rf "$0"', self.dir],
            stdin=subprocess.PIPE, start_new_session=True)
        ports = set()
        while len(ports) < 2 * members:
            ports.add(free_port())
        ports = sorted(ports)
        self.client_ports = ports[:members]
        self.peer_ports = ports[members:]
        self.extra_hosts = list(extra_hosts)
        self.hosts = list(hosts or ["127.0.0.1"] * members)
        self.wrap = wrap or (lambda i, args: args)
        self.endpoints = [f"{h}:{p}" for h, p in zip(self.hosts, self.client_ports)]
        self.procs = [None] * members
        for i in range(members):
            self.start(i)
        self.wait_healthy(30)

    def endpoints_on(self, host):
        return [f"{host}:{p}" for p in self.client_ports]

    def start(self, i):
        assert self.procs[i] is None or self.procs[i].poll() is not None
        cluster = ",".join(f"m{j}=http://{h}:{p}"
                           for j, (h, p) in enumerate(zip(self.hosts, self.peer_ports)))
        host = self.hosts[i]
        client_urls = ",".join(f"http://{h}:{self.client_ports[i]}"
                               for h in [host, *self.extra_hosts])
        log = open(os.path.join(self.dir, f"m{i}.log"), "ab")
        try:
            self.procs[i] = subprocess.Popen(
                self.wrap(i, [
                    ETCD, f"--name=m{i}", f"--data-dir={self.dir}/m{i}",
                    f"--listen-client-urls={client_urls}",
                    f"--advertise-client-urls=http://{host}:{self.client_ports[i]}",
                    f"--listen-peer-urls=http://{host}:{self.peer_ports[i]}",
                    f"--initial-advertise-peer-urls=http://{host}:{self.peer_ports[i]}",
                    f"--initial-cluster={cluster}", "--initial-cluster-token=dgt-etcd-ha",
                    "--initial-cluster-state=new", "--heartbeat-interval=50",
                    "--election-timeout=500", "--logger=zap", "--log-level=warn"]),
                stdout=log, stderr=log, stdin=subprocess.DEVNULL, preexec_fn=_die_with_parent)
        finally:
            log.close()

    def kill(self, i):
        p = self.procs[i]
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(timeout=10)

    def running(self, i):
        return self.procs[i] is not None and self.procs[i].poll() is None

    def member_status(self, i):
        """(member id, leader id) as member i reports them, or None when it does not answer."""
        r = subprocess.run([ETCDCTL, f"--endpoints={self.endpoints[i]}", "--dial-timeout=1s",
                            "--command-timeout=2s", "endpoint", "status", "-w", "json"],
                           capture_output=True, text=True, timeout=10,
                           env=dict(os.environ, ETCDCTL_API="3"))
        if r.returncode != 0:
            return None
        status = json.loads(r.stdout)[0]["Status"]
        # A member without a leader omits the field (protobuf's JSON leaves zero values out).
        return status["header"]["member_id"], status.get("leader", 0)

    def leader(self, timeout):
        """Index of the member that every running member names as leader (etcdctl endpoint
        status), within `timeout` seconds."""
        deadline = time.monotonic() + timeout
        seen = None
        while time.monotonic() < deadline:
            ids, leaders = {}, set()
            for i in range(len(self.procs)):
                if self.running(i):
                    s = self.member_status(i)
                    seen = s
                    if s is None:
                        leaders.add(None)
                    else:
                        ids[s[0]] = i
                        leaders.add(s[1])
            if len(leaders) == 1 and next(iter(leaders)) in ids:
                return ids[leaders.pop()]
            time.sleep(0.1)
        raise AssertionError(f"etcd members agree on no leader within {timeout} s (last: {seen}): "
                             + self.log_tails())

    def wait_healthy(self, timeout):
        """Every running member names one running leader and a write through each succeeds."""
        deadline = time.monotonic() + timeout
        self.leader(timeout)
        for i in range(len(self.procs)):
            while self.running(i):
                r = self.ctl(i, "put", "dgt-ha-health", str(i))
                if r.returncode == 0:
                    break
                assert time.monotonic() < deadline, f"member {i}: {r.stderr}"
                time.sleep(0.1)

    def ctl(self, i, *args):
        return subprocess.run([ETCDCTL, f"--endpoints={self.endpoints[i]}", "--dial-timeout=2s",
                               "--command-timeout=5s", *args], capture_output=True, text=True,
                              timeout=15, env=dict(os.environ, ETCDCTL_API="3"))

    def get_json(self, key):
        """The JSON value at `key`, read from any running member."""
        for i in range(len(self.procs)):
            if self.running(i):
                r = self.ctl(i, "get", key, "--print-value-only")
                if r.returncode == 0 and r.stdout.strip():
                    return json.loads(r.stdout)
        raise AssertionError(f"no running member has {key}")

    def log_tails(self):
        out = []
        for i in range(len(self.procs)):
            path = os.path.join(self.dir, f"m{i}.log")
            if os.path.exists(path):
                with open(path, errors="replace") as f:
                    out.append(f"m{i}: " + "".join(f.readlines()[-3:]))
        return "\n".join(out)

    def close(self):
        for i in range(len(self.procs)):
            self.kill(i)
        shutil.rmtree(self.dir, ignore_errors=True)
        self.sweeper.stdin.close()  # The sweeper finds nothing left and exits.
        self.sweeper.wait(timeout=10)


@pytest.fixture
def cluster_factory(python2):
    need_etcd()
    made = []

    def make(**kw):
        c = EtcdCluster(**kw)
        made.append(c)
        return c

    yield make
    for c in made:
        c.close()


@pytest.fixture
def etcd3(cluster_factory):
    return cluster_factory()


def start_replica(spawn, name, etcd_endpoints, prefix, *extra, host="127.0.0.1", netns=None):
    """A dgt-rendezvous --backend=etcd on a free port of `host` (in network namespace `netns`
    when given); returns (its Proc, "host:port")."""
    args = [BIN / "dgt-rendezvous", "--listen", f"{host}:0", "--backend=etcd",
            f"--etcd-endpoints={','.join(etcd_endpoints)}", f"--etcd-prefix={prefix}", *extra]
    if netns:
        args = ["ip", "netns", "exec", netns, *args]
    p = spawn(args, name=name)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = re.search(r"listening on port (\d+)", p.stdout)
        if m:
            return p, f"{host}:{m.group(1)}"
        assert p.popen.poll() is None, f"{name} exited: {p.stderr}"
        time.sleep(0.05)
    pytest.fail(f"{name} did not report its port within 20 s: {p.stderr}")


class Job:
    """Two dgt-run agents (node0, node1) x 2 ha_steps.py workers on torch 2.13."""

    def __init__(self, spawn, tmp_path, python2, run_id, endpoint, *extra):
        self.until = tmp_path / f"{run_id}.stop"
        self.agents = []
        self.spawn = spawn
        self.args = lambda i: [
            BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=2", f"--rdzv-endpoint={endpoint}",
            f"--rdzv-id={run_id}", f"--node-id=node{i}", "--local-addr=127.0.0.1",
            "--stop-timeout=3", *extra, WORKER, "--until-file", self.until, "--step-ms", "100"]
        self.env = dgt_env(DGT_PYTHON=python2, OMP_NUM_THREADS="1")

    def start_agent(self, i):
        self.agents.append(self.spawn(self.args(i), name=f"node{i}", env=self.env))
        return self.agents[-1]

    def start(self):
        for i in range(2):
            self.start_agent(i)

    def events(self):
        return [r for a in self.agents for r in records(a.stdout)]

    def steps(self):
        """{rank: highest step printed}."""
        top = {}
        for e in self.events():
            if e["event"] == "step":
                top[e["rank"]] = max(top.get(e["rank"], 0), e["step"])
        return top

    def wait_steps(self, at_least, timeout, what):
        wait_for(lambda: len(self.steps()) == WORLD and min(self.steps().values()) >= at_least,
                 timeout, what)

    def worker_pids(self):
        return {e["rank"]: e["pid"] for e in self.events() if e["event"] == "start"}

    def finish(self, timeout=60):
        """Tells the workers to stop, waits for both agents to exit 0 and checks the run: ranks
        0..3 each started once (no worker restarted), every step of a rank from that PID with
        the exact sum, steps 1..n once each, all ranks ending after the same step."""
        self.until.touch()
        for a in self.agents:
            assert a.wait(timeout=timeout) == 0, a.stderr[-4000:]
        ev = self.events()
        starts = [e for e in ev if e["event"] == "start"]
        assert sorted(e["rank"] for e in starts) == list(range(WORLD)), starts
        pid = {e["rank"]: e["pid"] for e in starts}
        assert len(set(pid.values())) == WORLD
        done = {e["rank"]: e for e in ev if e["event"] == "done"}
        assert sorted(done) == list(range(WORLD))
        assert len({d["steps"] for d in done.values()}) == 1
        for r in range(WORLD):
            mine = [e for e in ev if e["event"] == "step" and e["rank"] == r]
            assert [e["step"] for e in mine] == list(range(1, done[r]["steps"] + 1))
            assert {(e["pid"], e["world_size"], e["sum"]) for e in mine} == {(pid[r], WORLD, 6)}
            assert done[r]["pid"] == pid[r]
        return pid


def writer_of(cluster, key):
    """The replica instance that last wrote the run at `key` (its record's "writer" without the
    write count)."""
    return cluster.get_json(key)["writer"].rsplit(":", 1)[0]


def assert_run_record(cluster, key, run_id):
    """The run at `key` (record version 2, docs/ETCD.md) closed as succeeded at round 0, world
    size 4, and its node bucket holding node ranks 0 and 1."""
    value = cluster.get_json(key)
    assert value["version"] == 2
    run = value["run"]
    assert (run["run_id"], run["state"], run["finished"]["succeeded"]) == (run_id, "closed", True)
    assert run["round"] == 0  # No node was lost: the failures never started a new round.
    assert run["world_size"] == WORLD
    # One bucket (up to 32 nodes): [node_id, session, address, nproc, ..., node rank at 5, ...].
    assert sorted(n[5] for n in cluster.get_json(key + "\x1f0")["nodes"]) == [0, 1]
    return run


def test_etcd_leader_killed_while_the_round_forms_and_while_the_job_runs(
        spawn, tmp_path, etcd3, python2, capsys):
    rdzv, endpoint = start_replica(spawn, "rdzv", etcd3.endpoints, "/ha1/runs/")
    job = Job(spawn, tmp_path, python2, "ha1", endpoint)
    node0 = job.start_agent(0)
    wait_for(lambda: "run 'ha1': 1 node(s) joined (min 2, max 2)" in node0.stderr, 60,
             "node0 admitted to the forming round")
    first = etcd3.leader(10)
    etcd3.kill(first)  # The round forms: node1 joins while etcd elects a new leader.
    job.start_agent(1)
    job.wait_steps(3, 90, "every rank at step 3")
    pids = job.worker_pids()

    etcd3.start(first)
    etcd3.wait_healthy(30)
    second = etcd3.leader(10)
    before = job.steps()
    etcd3.kill(second)  # The job runs: its end is committed through the next leader.
    job.wait_steps(max(before.values()) + 3, 60, "3 more steps after the second kill")
    assert job.worker_pids() == pids
    stop = time.monotonic()
    assert job.finish() == pids
    with capsys.disabled():
        print(f"\netcd leaders m{first} (round forming) and m{second} (job running) SIGKILLed: "
              f"both agents exited 0 {time.monotonic() - stop:.1f} s after the stop file")
    assert_run_record(etcd3, "/ha1/runs/ha1", "ha1")
    assert rdzv.popen.poll() is None
    for a in job.agents:
        assert "lost the rendezvous service" not in a.stderr


SESSION_PROBE = r"""
import sys, grpc
def field(n, b): return bytes([n << 3 | 2, len(b)]) + b
def varint(n, v): return bytes([n << 3, v])
def read_varint(b, i):
    v = shift = 0
    while True:
        v |= (b[i] & 0x7F) << shift
        shift += 7
        i += 1
        if b[i - 1] < 0x80:
            return v, i
def fields(b):
    i, out = 0, {}
    while i < len(b):
        key, i = read_varint(b, i)
        if key & 7 == 0:
            out[key >> 3], i = read_varint(b, i)
        else:
            n, i = read_varint(b, i)
            out[key >> 3], i = b[i:i + n], i + n
    return out
# AgentMessage{join: JoinRequest{run_id, node_id, min_nodes 1, max_nodes 1, nproc_per_node 0}}:
# the leader refuses it (ServiceMessage.error, INVALID_ARGUMENT) and records nothing.
join = field(1, b"ha-probe") + field(2, b"probe") + varint(3, 1) + varint(4, 1)
with grpc.insecure_channel(sys.argv[1]) as ch:
    call = ch.stream_stream("/dgt.rendezvous.v1.Rendezvous/Session")
    try:
        for answer in call(iter([field(1, join)]), timeout=3):
            error = fields(answer).get(4)
            if error is None:
                print("MESSAGE", answer.hex())
            else:
                e = fields(error)
                print("REFUSED", e.get(1, 0), e.get(2, b"").decode())
            break
        else:
            print("OK")
    except grpc.RpcError as e:
        print(e.code().name, e.details())
"""


def session_answer(python2, endpoint):
    """How the replica at `endpoint` answers a Session stream that joins with 0 workers: the
    leader refuses the join ("REFUSED 3 --nproc-per-node must be >= 1, got 0": ServiceMessage
    error INVALID_ARGUMENT), a standby the stream ("UNAVAILABLE dgt-rendezvous replica ..."), a
    replica that does not answer in 3 s "DEADLINE_EXCEEDED ..."."""
    r = subprocess.run([python2, "-c", SESSION_PROBE, endpoint], capture_output=True, text=True,
                       timeout=20)
    assert r.returncode == 0, r.stderr
    return r.stdout.strip()


def leading(python2, endpoint):
    return session_answer(python2, endpoint) == "REFUSED 3 --nproc-per-node must be >= 1, got 0"


def test_every_etcd_member_stopped_mid_job_then_back(spawn, tmp_path, etcd3, python2, capsys):
    rdzv, endpoint = start_replica(spawn, "rdzv", etcd3.endpoints, "/ha2/runs/", "--replica-id=r1")
    job = Job(spawn, tmp_path, python2, "ha2", endpoint)
    job.start()
    job.wait_steps(3, 90, "every rank at step 3")
    pids = job.worker_pids()
    for i in range(3):
        etcd3.kill(i)
    stopped = time.monotonic()
    # The replica cannot renew its lease (2 s): it steps down, ending the agents' sessions.
    wait_for(lambda: "replica r1 lost its leadership" in rdzv.stderr, 15, "the step-down")
    stepped_down = time.monotonic() - stopped
    # A new join meanwhile is refused by the standby it became, with UNAVAILABLE.
    late = spawn([BIN / "dgt-run", "--nnodes=1", "--nproc-per-node=1",
                  f"--rdzv-endpoint={endpoint}", "--rdzv-id=ha2-late", "--node-id=late",
                  "--rdzv-connect-timeout=4", "--rdzv-conf=read_timeout=4", WORKER,
                  "--until-file", tmp_path / "never", "--max-seconds", "5"],
                 name="late", env=job.env)
    assert late.wait(timeout=30) == 69, late.stderr
    assert ("dgt-run: lost the rendezvous service at "
            f"{endpoint} (dgt-rendezvous replica r1 is a standby; no leader now)"
            ) in late.stderr, late.stderr
    assert late.stderr.rstrip().endswith(
        f"dgt-run: error: lost the rendezvous service at {endpoint} and could not reach it again "
        "within 4 s (--rdzv-conf read_timeout)"), late.stderr
    before = job.steps()
    time.sleep(1.0)
    after = job.steps()
    assert all(after[r] > before[r] for r in range(WORLD)), (before, after)  # Still stepping.
    for pid in pids.values():
        os.kill(pid, 0)  # Raises if a worker is gone.
    assert rdzv.popen.poll() is None, rdzv.stderr
    outage = time.monotonic() - stopped
    for i in range(3):
        etcd3.start(i)
    etcd3.wait_healthy(30)
    back = time.monotonic()
    for a in job.agents:
        wait_for(lambda: "back in run 'ha2'" in a.stderr, 40, "the agents' rejoin")
    rejoined = time.monotonic() - back
    assert job.finish() == pids
    assert_run_record(etcd3, "/ha2/runs/ha2", "ha2")
    assert rdzv.popen.poll() is None
    with capsys.disabled():
        print(f"\nevery etcd member stopped for {outage:.1f} s: the replica stepped down after "
              f"{stepped_down:.1f} s; agents back in the run {rejoined:.1f} s after etcd was "
              "healthy again")


def test_leading_replica_killed_mid_job_the_standby_takes_over(
        spawn, tmp_path, etcd3, python2, capsys):
    a, ep_a = start_replica(spawn, "rdzvA", etcd3.endpoints, "/ha3/runs/", "--replica-id=rA")
    wait_for(lambda: leading(python2, ep_a), 15, "replica rA to lead")
    b, ep_b = start_replica(spawn, "rdzvB", etcd3.endpoints, "/ha3/runs/", "--replica-id=rB")
    assert session_answer(python2, ep_b) == (
        f"UNAVAILABLE dgt-rendezvous replica rB is a standby; the leader is {ep_a}")
    job = Job(spawn, tmp_path, python2, "ha3", f"{ep_a},{ep_b}")
    job.start()
    job.wait_steps(3, 90, "every rank at step 3")
    pids = job.worker_pids()
    first_writer = writer_of(etcd3, "/ha3/runs/ha3")
    a.kill()
    killed = time.monotonic()
    for agent in job.agents:
        wait_for(lambda: "back in run 'ha3'" in agent.stderr, 30, "the agents' rejoin via rB")
    failover = time.monotonic() - killed
    assert leading(python2, ep_b)
    assert job.finish() == pids
    for agent in job.agents:
        assert (f"dgt-run: the rendezvous replica at {ep_b} took this node's session (the one at "
                f"{ep_a} was lost)") in agent.stderr, agent.stderr
    assert_run_record(etcd3, "/ha3/runs/ha3", "ha3")
    assert writer_of(etcd3, "/ha3/runs/ha3") != first_writer  # rB wrote the end.
    with capsys.disabled():
        print(f"\nleading replica SIGKILLed: both agents back in the run via the standby after "
              f"{failover:.2f} s")


@pytest.fixture
def veth_netns():
    """A network namespace with a veth to the host: host side 10.232.N.1, namespace side
    10.232.N.2; removed (with every process in it) at the end. Needs root, ip and iptables."""
    if os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables"):
        pytest.skip("needs root, iproute2 and iptables")
    n = os.getpid() % 200 + 20
    ns, host_if, ns_if = f"dgtR{n}", f"dgtRh{n}", f"dgtRn{n}"

    def sh(*args):
        subprocess.run(args, check=True, capture_output=True, timeout=30)

    subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
    subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=30)
    sh("ip", "netns", "add", ns)
    try:
        sh("ip", "-n", ns, "link", "set", "lo", "up")
        sh("ip", "link", "add", host_if, "type", "veth", "peer", "name", ns_if, "netns", ns)
        sh("ip", "addr", "add", f"10.232.{n}.1/24", "dev", host_if)
        sh("ip", "-n", ns, "addr", "add", f"10.232.{n}.2/24", "dev", ns_if)
        sh("ip", "link", "set", host_if, "up")
        sh("ip", "-n", ns, "link", "set", ns_if, "up")
        yield {"ns": ns, "host_ip": f"10.232.{n}.1", "ns_ip": f"10.232.{n}.2",
               "sh": lambda *a: sh("ip", "netns", "exec", ns, *a)}
    finally:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True, text=True,
                              timeout=30).stdout.split()
        for pid in pids:
            subprocess.run(["kill", "-9", pid], capture_output=True, timeout=30)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True, timeout=30)
        subprocess.run(["ip", "link", "del", host_if], capture_output=True, timeout=30)


def test_replica_partitioned_from_etcd_stops_serving_and_the_other_leads(
        spawn, tmp_path, veth_netns, cluster_factory, python2, capsys):
    host_ip, ns_ip = veth_netns["host_ip"], veth_netns["ns_ip"]
    etcd = cluster_factory(extra_hosts=[host_ip])
    lease_s = 2
    cut, ep_cut = start_replica(spawn, "rdzv_cut", etcd.endpoints_on(host_ip), "/ha4/runs/",
                                "--replica-id=rcut", f"--leader-lease-s={lease_s}",
                                host=ns_ip, netns=veth_netns["ns"])
    wait_for(lambda: leading(python2, ep_cut), 15, "replica rcut (in the namespace) to lead")
    other, ep_other = start_replica(spawn, "rdzv_other", etcd.endpoints, "/ha4/runs/",
                                    "--replica-id=rother", f"--leader-lease-s={lease_s}")
    assert session_answer(python2, ep_other) == (
        f"UNAVAILABLE dgt-rendezvous replica rother is a standby; the leader is {ep_cut}")
    job = Job(spawn, tmp_path, python2, "ha4", f"{ep_cut},{ep_other}")
    job.start()
    job.wait_steps(3, 90, "every rank at step 3")
    pids = job.worker_pids()

    first_writer = writer_of(etcd, "/ha4/runs/ha4")
    ports = ",".join(str(p) for p in etcd.client_ports)
    veth_netns["sh"]("iptables", "-A", "OUTPUT", "-d", host_ip, "-p", "tcp", "-m", "multiport",
                     "--dports", ports, "-j", "DROP")
    veth_netns["sh"]("iptables", "-A", "INPUT", "-s", host_ip, "-p", "tcp", "-m", "multiport",
                     "--sports", ports, "-j", "DROP")
    cut_at = time.monotonic()
    answers = []

    def cut_stands_by():
        answers.append(session_answer(python2, ep_cut))
        return answers[-1].startswith(
            "UNAVAILABLE dgt-rendezvous replica rcut is a standby; ")

    wait_for(cut_stands_by, lease_s + 2 + 3, "the cut replica to answer standby")
    stood_by = time.monotonic() - cut_at
    assert stood_by < lease_s + 2, (stood_by, answers)
    wait_for(lambda: leading(python2, ep_other), 10, "replica rother to lead")
    for agent in job.agents:
        wait_for(lambda: "back in run 'ha4'" in agent.stderr, 30, "the agents' rejoin via rother")
    assert job.finish() == pids
    for agent in job.agents:
        assert (f"dgt-run: the rendezvous replica at {ep_other} took this node's session (the one "
                f"at {ep_cut} was lost)") in agent.stderr, agent.stderr
    assert cut.popen.poll() is None, cut.stderr  # Cut off, not crashed.
    assert session_answer(python2, ep_cut).startswith(
        "UNAVAILABLE dgt-rendezvous replica rcut is a standby; ")
    assert_run_record(etcd, "/ha4/runs/ha4", "ha4")
    assert writer_of(etcd, "/ha4/runs/ha4") != first_writer  # rother wrote the end.
    with capsys.disabled():
        print(f"\nreplica cut from etcd: standby after {stood_by:.2f} s (lease {lease_s} s)")
