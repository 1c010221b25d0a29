"""The installed .deb's files on three hosts in network namespaces this test creates (and removes).

The .deb is built from the build tree (cpack; or $DGT_DEB names one) and extracted into a scratch
root (dpkg-deb -x); every dgt binary below runs from that root. Namespace 3 (10.232.<n>.3, a
bridge the other two hang off by veths) runs dgt-rendezvous; namespaces 1 and 2 (.1, .2) are two
GPU-less nodes. A throwaway system user (removed at the end) runs the workers: PyTorch 2.13 from
the peers venv (the `python2` fixture), gloo over the veths.

- dgt-run from the .deb: a 2-node x 2-process job across the namespaces, each rank's log line.
- dgt-agent from the .deb (skipped while the build makes none or its dgt-rendezvous serves no
  jobs; fails under CI=true): two daemons, confined to the capability bounding set of the packaged
  dgt-agent.service (setpriv --bounding-set, no-new-privs), with a nodes' token and a submit
  token as docs/OPERATIONS.md sets them up, take `dgt submit`ted jobs: a 2x2 PyTorch job's logs
  through `dgt logs --rank N`, a tensorflow job's one TF_CONFIG, cancel (every worker gone within
  the grace), kill -9 of a daemon mid-job (its workers die with it; with max_restarts 0 the job
  fails naming the node and the other node's workers are cancelled), a daemon restarted (SIGTERM
  drain) takes the
  next job, the packaged examples/job.yaml queues with its reason.
- `systemd-analyze verify` on the packaged units.

Needs root, iproute2, dpkg-deb, cpack, useradd and setpriv; skipped with the reason otherwise, and
failed instead under CI=true (CI runs as root: a test that cannot run there is broken).
Everything it starts lives in its namespaces, which are removed (with the veths, the user and the
scratch directory) on any exit of the module.
"""
import json
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time
from pathlib import Path

import pytest

from conftest import BIN, REPO, Proc, wait_for

WORKER = REPO / "tests" / "e2e" / "workers" / "jobs_netns_worker.py"
BUILD = Path(os.environ.get("DGT_BUILD_DIR", BIN.parent))
TOOLS = ("ip", "dpkg-deb", "cpack", "useradd", "userdel", "setpriv", "pgrep", "systemd-analyze")


def unit_bounding_set(unit):
    """setpriv's --bounding-set for the packaged unit's CapabilityBoundingSet= (one line)."""
    caps = re.findall(r"^CapabilityBoundingSet=(.*)$", unit.read_text(), re.M)
    assert len(caps) == 1, f"{unit}: CapabilityBoundingSet= lines {caps}"
    assert re.search(r"^NoNewPrivileges=yes$", unit.read_text(), re.M), unit
    return ",".join(["-all"] + [f"+{c.lower().removeprefix('cap_')}" for c in caps[0].split()])


def _cannot_run():
    if os.geteuid() != 0:
        return "needs root (network namespaces, a throwaway user)"
    missing = [t for t in TOOLS if not shutil.which(t)]
    if missing:
        return f"needs {', '.join(missing)}"
    if not os.environ.get("DGT_DEB") and not (BUILD / "CPackConfig.cmake").is_file():
        return f"no {BUILD / 'CPackConfig.cmake'} to build the .deb from (set DGT_BUILD_DIR)"
    return None


def _skip_or_fail(why):
    if os.environ.get("CI") == "true":
        pytest.fail(f"test_jobs_netns cannot run under CI: {why}")
    pytest.skip(why)


def sh(*args, timeout=60, check=True):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise AssertionError(f"{' '.join(map(str, args))}: exit {r.returncode}: {r.stderr}")
    return r


class Hosts:
    """The scratch root, the namespaces and the throwaway user; close() removes them all."""

    def __init__(self, python2):
        self.n = os.getpid() % 200 + 20
        self.base = Path(tempfile.mkdtemp(prefix="dgt-jobs-netns-"))
        self.base.chmod(0o755)  # The job user runs binaries and the worker from here.
        self.out = self.base / "out"
        self.out.mkdir()
        self.python2 = python2
        self.ns = {k: f"dgtj{k}-{self.n}" for k in (1, 2, 3)}
        self.ip = {k: f"10.232.{self.n}.{k}" for k in (1, 2, 3)}
        self.user = f"dgtjob{self.n}"
        self.procs = []

    def setup(self):
        deb = os.environ.get("DGT_DEB")
        if not deb:
            sh("cpack", "--config", BUILD / "CPackConfig.cmake", "-B", self.base / "deb",
               timeout=300)
            debs = sorted((self.base / "deb").glob("dgt_*.deb"))
            assert len(debs) == 1, f"cpack made {debs}"
            deb = debs[0]
        self.root = self.base / "root"
        sh("dpkg-deb", "-x", deb, self.root)
        self.bin = self.root / "usr" / "bin"
        self.code = self.base / "code"
        self.code.mkdir()
        shutil.copy(WORKER, self.code / WORKER.name)
        for d in (self.code, self.code / WORKER.name):
            d.chmod(0o755)
        # The job user: a system user with no login, home in the scratch directory.
        home = self.base / "home"
        sh("useradd", "--system", "--user-group", "--home-dir", home, "--no-create-home",
           "--shell", "/usr/sbin/nologin", self.user)
        self.user_made = True
        home.mkdir()
        shutil.chown(home, self.user, self.user)
        self.uid = int(sh("id", "-u", self.user).stdout)
        # Three namespaces; 3 holds a bridge that 1 and 2 reach by a veth named dgt0.
        for k, ns in self.ns.items():
            sh("ip", "netns", "del", ns, check=False)
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
        ns3 = self.ns[3]
        # No STP: the ports forward as soon as they are up.
        sh("ip", "-n", ns3, "link", "add", "br0", "type", "bridge", "stp_state", "0",
           "forward_delay", "0")
        sh("ip", "-n", ns3, "addr", "add", f"{self.ip[3]}/24", "dev", "br0")
        sh("ip", "-n", ns3, "link", "set", "br0", "up")
        for k in (1, 2):
            sh("ip", "link", "add", "dgt0", "netns", self.ns[k], "type", "veth", "peer", "name",
               f"p{k}", "netns", ns3)
            sh("ip", "-n", self.ns[k], "addr", "add", f"{self.ip[k]}/24", "dev", "dgt0")
            sh("ip", "-n", self.ns[k], "link", "set", "dgt0", "up")
            sh("ip", "-n", ns3, "link", "set", f"p{k}", "master", "br0")
            sh("ip", "-n", ns3, "link", "set", f"p{k}", "up")

    def close(self):
        for p in self.procs:
            p.kill()
        for ns in self.ns.values():
            pids = sh("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), signal.SIGKILL)
                except ProcessLookupError:
                    pass
        for ns in self.ns.values():
            sh("ip", "netns", "del", ns, check=False)
        if getattr(self, "user_made", False):
            sh("pkill", "-KILL", "-u", self.user, check=False)
            sh("userdel", self.user, check=False)
            sh("groupdel", self.user, check=False)
        shutil.rmtree(self.base, ignore_errors=True)

    def env(self, **extra):
        env = {"PATH": "/usr/bin:/bin", "LANG": "C.UTF-8", "HOME": str(self.base / "home"),
               "DGT_PYTHON": self.python2, "GLOO_SOCKET_IFNAME": "dgt0"}
        env.update(extra)
        return env

    def spawn(self, k, args, name, as_user=False, caps=None, env=None):
        """Starts `args` in namespace k (as the job user, or root confined to `caps`)."""
        pre = ["ip", "netns", "exec", self.ns[k]]
        if as_user:
            pre += ["setpriv", f"--reuid={self.user}", f"--regid={self.user}", "--clear-groups"]
        elif caps:
            pre += ["setpriv", f"--bounding-set={caps}", "--inh-caps=-all", "--no-new-privs"]
        p = Proc(pre + [str(a) for a in args], self.out, name, env=env or self.env())
        self.procs.append(p)
        return p

    def user_pids(self, k=None):
        """PIDs of the job user's processes (in namespace k only, when given)."""
        pids = set(sh("pgrep", "-u", str(self.uid), check=False).stdout.split())
        if k is not None:
            pids &= set(sh("ip", "netns", "pids", self.ns[k], check=False).stdout.split())
        return pids

    def rendezvous(self, *extra):
        p = self.spawn(3, [self.bin / "dgt-rendezvous", "--listen", f"{self.ip[3]}:0", *extra],
                       f"rendezvous{len(self.procs)}")
        wait_for(lambda: "listening on port" in p.stdout or p.popen.poll() is not None, 15,
                 "dgt-rendezvous to listen")
        m = re.search(r"listening on port (\d+)", p.stdout)
        assert m, f"dgt-rendezvous: {p.stderr}"
        return p, f"{self.ip[3]}:{m.group(1)}"


@pytest.fixture(scope="module")
def hosts(python2):
    why = _cannot_run()
    if why:
        _skip_or_fail(why)
    h = Hosts(python2)
    try:
        h.setup()
        yield h
    finally:
        h.close()


def expected_line(rank):
    return f"rank {rank} world 4 local_rank {rank % 2} sum 10"


def test_units_verify(hosts):
    units = sorted((hosts.root / "usr/lib/systemd/system").glob("*.service"))
    with_agent = (hosts.bin / "dgt-agent").exists()
    assert [u.name for u in units] == \
        ["dgt-agent.service"] * with_agent + ["dgt-rendezvous.service"]
    for unit in units:
        text = unit.read_text().replace("/usr/bin/", f"{hosts.root}/usr/bin/")
        copy = hosts.out / unit.name
        copy.write_text(text)
        r = subprocess.run(["systemd-analyze", "verify", str(copy)], capture_output=True,
                           text=True, timeout=60,
                           env={**os.environ, "MANPATH": str(hosts.root / "usr/share/man")})
        assert (r.returncode, r.stdout + r.stderr) == (0, ""), unit.name


def test_dgt_run_job_across_namespaces(hosts):
    """dgt-run and dgt-rendezvous of the .deb: 2 nodes x 2 processes as the job user."""
    _, endpoint = hosts.rendezvous()
    nodes = {}
    for k in (1, 2):
        logs = hosts.base / f"run{k}"
        logs.mkdir()
        shutil.chown(logs, hosts.user, hosts.user)
        nodes[k] = (logs, hosts.spawn(k, [
            hosts.bin / "dgt-run", "--nnodes=2", "--nproc-per-node=2", "--rdzv-backend=dgt",
            f"--rdzv-endpoint={endpoint}", "--rdzv-id=netns-run", f"--node-id=node{k}",
            f"--local-addr={hosts.ip[k]}", f"--log-dir={logs}", "--redirects=3",
            hosts.code / WORKER.name, "allreduce"], f"dgt-run{k}", as_user=True))
    lines = {}
    for k, (logs, p) in nodes.items():
        assert p.wait(timeout=120) == 0, p.stderr
        for f in logs.glob("netns-run_*/attempt_0/*/stdout.log"):
            lines[(k, int(f.parent.name))] = f.read_text()
    assert sorted(lines) == [(1, 0), (1, 1), (2, 0), (2, 1)]
    for (_, local_rank), text in lines.items():
        rank = int(text.split()[1])
        assert text == expected_line(rank) + "\n" and rank % 2 == local_rank
    assert sorted(int(t.split()[1]) for t in lines.values()) == [0, 1, 2, 3]
    assert hosts.user_pids() == set()


# --- dgt-agent and the jobs service, from the .deb.

class Fleet:
    """dgt-rendezvous serving jobs in namespace 3 and a dgt-agent in namespaces 1 and 2."""

    def __init__(self, hosts):
        self.h = hosts
        self.token = hosts.base / "submit.token"
        self.token.write_text("netns-submit-token\n")
        self.token.chmod(0o600)
        # The nodes' token, as docs/OPERATIONS.md sets it up: root's, readable by the job user's
        # group (the daemon passes it to dgt-run, which runs as that user).
        self.node_token = hosts.base / "node.token"
        self.node_token.write_text("netns-node-token\n")
        shutil.chown(self.node_token, "root", hosts.user)
        self.node_token.chmod(0o640)
        _, self.endpoint = hosts.rendezvous("--submit-token-file", self.token, "--token-file",
                                            self.node_token)
        self.agents = {}
        # The daemons keep only what dgt-agent.service leaves them (and no new privileges).
        self.caps = unit_bounding_set(hosts.root / "usr/lib/systemd/system/dgt-agent.service")
        for k in (1, 2):
            work = hosts.base / f"node{k}" / "jobs"
            work.mkdir(parents=True)
            work.parent.chmod(0o755)
            shutil.chown(work, hosts.user, hosts.user)
            work.chmod(0o750)
            cfg = hosts.base / f"node{k}" / "agent.yaml"
            cfg.write_text(
                f"rendezvous_endpoints: [\"{self.endpoint}\"]\n"
                f"node_name: node{k}\n"
                f"advertise_address: {hosts.ip[k]}\n"
                f"labels: {{netns: \"node{k}\"}}\n"
                f"run_as_user: {hosts.user}\n"
                f"work_dir: {work}\n"
                f"token_file: {self.node_token}\n"
                f"stop_grace_s: 5\n"
                f"watchdog: false\n")
            self.start_agent(k)
        self.wait_nodes_idle({"node1", "node2"})

    def start_agent(self, k):
        cfg = self.h.base / f"node{k}" / "agent.yaml"
        self.agents[k] = self.h.spawn(k, [self.h.bin / "dgt-agent", "--config", cfg],
                                      f"agent{k}-{len(self.h.procs)}", caps=self.caps)

    def dgt(self, *args, check=True, timeout=30):
        r = sh("ip", "netns", "exec", self.h.ns[3], self.h.bin / "dgt", *args,
               "--rdzv-endpoint", self.endpoint, "--token-file", self.token, timeout=timeout,
               check=False)
        if check:
            assert r.returncode == 0, f"dgt {' '.join(map(str, args))}: {r.stderr}"
        return r

    def nodes(self):
        out = self.dgt("nodes").stdout
        return {line.split()[0]: line for line in out.splitlines()[1:] if line.strip()}

    def wait_nodes_idle(self, names, timeout=30):
        wait_for(lambda: all(n in self.nodes() and " idle" in self.nodes()[n] for n in names),
                 timeout, f"nodes {sorted(names)} registered and idle")

    def submit(self, spec):
        path = self.h.base / f"job{time.monotonic_ns()}.yaml"
        path.write_text(json.dumps(spec))  # JSON is YAML.
        job_id = self.dgt("submit", path).stdout.strip()
        assert re.fullmatch(r"[a-z0-9-]{1,64}", job_id), job_id
        return job_id

    def show(self, job_id):
        return json.loads(self.dgt("job", "show", job_id, "--json").stdout)

    def wait_state(self, job_id, states, timeout):
        """`dgt job show --json` once the job's state is one of `states` (within `timeout` s)."""
        deadline = time.monotonic() + timeout
        while True:
            info = self.show(job_id)
            if info.get("state") in states:
                return info
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out after {timeout} s waiting for {job_id} to reach "
                                     f"{sorted(states)}; last: {info}")
            time.sleep(0.3)

    def log(self, job_id, rank, stream="stdout", check=True):
        """The rank's log; with check=False "" while there is none yet (no round formed)."""
        r = self.dgt("logs", job_id, "--rank", str(rank), "--stream", stream, check=check)
        return r.stdout if r.returncode == 0 else ""

    def wait_holding(self, job_id, ranks, timeout=90):
        wait_for(lambda: all("holding" in self.log(job_id, r, check=False) for r in range(ranks)),
                 timeout, f"ranks 0..{ranks - 1} of {job_id} holding")

    def spec(self, mode, *args, nodes=2, procs=2, **extra):
        s = {"name": f"netns-{mode}",
             "command": f"exec {self.h.python2} {self.h.code / WORKER.name} {mode} "
                        + " ".join(map(str, args)),
             "code_dir": str(self.h.code),
             "environment_variables": {"GLOO_SOCKET_IFNAME": "dgt0"},
             "instance_count": nodes,
             "distribution": {"type": "pytorch", "process_count_per_instance": procs}}
        s.update(extra)
        return s


@pytest.fixture(scope="module")
def fleet(hosts):
    if not (hosts.bin / "dgt-agent").exists():
        _skip_or_fail("the .deb has no dgt-agent (this build does not make it)")
    usage = sh(hosts.bin / "dgt-rendezvous", "--help").stdout
    if "--submit-token-file" not in usage:
        _skip_or_fail("the .deb's dgt-rendezvous serves no jobs (no --submit-token-file)")
    return Fleet(hosts)


def test_submitted_pytorch_job_logs_per_rank(fleet):
    job = fleet.submit(fleet.spec("allreduce"))
    info = fleet.wait_state(job, {"succeeded", "failed", "cancelled"}, 120)
    assert info["state"] == "succeeded", info
    for rank in range(4):
        assert fleet.log(job, rank) == expected_line(rank) + "\n"
    assert fleet.h.user_pids() == set()


def test_tensorflow_job_sees_one_tf_config(fleet):
    spec = fleet.spec("tf_config", distribution={"type": "tensorflow",
                                                 "process_count_per_instance": 2,
                                                 "worker_count": 4})
    job = fleet.submit(spec)
    info = fleet.wait_state(job, {"succeeded", "failed", "cancelled"}, 90)
    assert info["state"] == "succeeded", info
    configs = []
    for rank in range(4):
        prefix, _, config = fleet.log(job, rank).partition(" tf_config ")
        assert prefix == f"rank {rank}"
        configs.append(json.loads(config))
    clusters = [c["cluster"] for c in configs]
    assert all(c == clusters[0] for c in clusters), clusters
    assert len(clusters[0]["worker"]) == 4
    assert sorted((c["task"]["type"], c["task"]["index"]) for c in configs) == \
        [("worker", i) for i in range(4)]
    hosts_seen = {a.rsplit(":", 1)[0] for a in clusters[0]["worker"]}
    assert hosts_seen == {fleet.h.ip[1], fleet.h.ip[2]}


def test_cancel_stops_every_worker_within_grace(fleet):
    job = fleet.submit(fleet.spec("hold", 600))
    fleet.wait_state(job, {"running"}, 60)
    fleet.wait_holding(job, 4)
    assert len(fleet.h.user_pids(1)) >= 3 and len(fleet.h.user_pids(2)) >= 3
    grace = 5
    cancelled_at = time.monotonic()
    fleet.dgt("cancel", job, "--grace", str(grace))
    wait_for(lambda: not fleet.h.user_pids(), grace + 5, "every process of the job to end")
    print(f"jobs_netns: cancel ended every worker in {time.monotonic() - cancelled_at:.2f} s")
    info = fleet.wait_state(job, {"cancelled"}, 15)
    assert info["state"] == "cancelled"


def test_kill9_of_a_daemon_mid_job(fleet):
    """kill -9 of node2's daemon: its workers die with it (PR_SET_PDEATHSIG). Restarted, it
    registers again without the job (or not within the service's 10 s grace): with max_restarts 0
    the job fails at once naming node2, and node1's workers get CancelJob (docs/JOBS.md)."""
    job = fleet.submit(fleet.spec("hold", 600, procs=1, max_restarts=0))
    fleet.wait_state(job, {"running"}, 60)
    fleet.wait_holding(job, 2)
    killed_at = time.monotonic()
    fleet.agents[2].popen.send_signal(signal.SIGKILL)  # ip netns exec execs: this is the daemon.
    fleet.agents[2].popen.wait(timeout=10)
    wait_for(lambda: not fleet.h.user_pids(2), 15, "node2's workers to die with their daemon")
    fleet.start_agent(2)
    info = fleet.wait_state(job, {"succeeded", "failed", "cancelled"}, 30)
    print(f"jobs_netns: kill -9 of a daemon: {info['state']} after "
          f"{time.monotonic() - killed_at:.1f} s: {info['reason']!r}")
    assert info["state"] == "failed", info
    assert info["reason"] in {
        "node node2: its daemon was lost mid-job (it registered again without the job); "
        "max_restarts 0",
        "node node2: its daemon was lost mid-job (no re-registration within 10 s); "
        "max_restarts 0"}, info
    assert info.get("restarts", 0) == 0
    wait_for(lambda: not fleet.h.user_pids(), 15, "node1's workers to end on CancelJob")
    fleet.wait_nodes_idle({"node1", "node2"})


def test_kill9_with_a_restart_left_starts_the_node_again(fleet):
    """The same with max_restarts 1: the restarted daemon gets the job again (same job id); its
    dgt-run joins the run's next round with node1's (a round of "nodes rejoined", not a restart
    of the run), and the workers of both nodes all_reduce again."""
    job = fleet.submit(fleet.spec("hold", 600, procs=1, max_restarts=1))
    fleet.wait_state(job, {"running"}, 60)
    fleet.wait_holding(job, 2)
    fleet.agents[2].popen.send_signal(signal.SIGKILL)
    fleet.agents[2].popen.wait(timeout=10)
    wait_for(lambda: not fleet.h.user_pids(2), 15, "node2's workers to die with their daemon")
    fleet.start_agent(2)
    lost = "node node2: its daemon was lost mid-job"
    wait_for(lambda: "replacing" in fleet.show(job).get("reason", ""), 30, "node2's replacement")
    info = fleet.show(job)
    assert info["state"] == "running", info
    assert info["reason"] in {
        f"{lost} (it registered again without the job); replacing it (restart 1 of 1)",
        f"{lost} (no re-registration within 10 s); replacing it (restart 1 of 1)"}, info
    # The replacement counts against max_restarts (the run's own restart count stays 0).
    assert info["node_replacements"] == 1 and info["restarts"] == 0, info
    # The new round's all_reduce spans both nodes. Each rank's log keeps both rounds: node1's
    # worker of the new round appends to the same attempt_0 file (same restart count), node2's
    # new launch directory follows its first one.
    try:
        twice = [f"rank {r} holding\n" * 2 for r in (0, 1)]
        seen = []

        def both_twice():
            seen[:] = [fleet.log(job, r, check=False) for r in (0, 1)]
            return seen == twice
        try:
            wait_for(both_twice, 90, "both ranks holding in the new round")
        except AssertionError as e:
            raise AssertionError(f"{e}: the logs of ranks 0 and 1 are {seen}") from None
        assert fleet.show(job)["state"] == "running"
    finally:
        fleet.dgt("cancel", job, "--grace", "2", check=False)
    assert fleet.wait_state(job, {"cancelled"}, 30)["state"] == "cancelled"
    wait_for(lambda: not fleet.h.user_pids(), 15, "every worker to end on cancel")
    fleet.wait_nodes_idle({"node1", "node2"})


def test_restarted_daemon_takes_the_next_job(fleet):
    agent = fleet.agents[1]
    agent.popen.send_signal(signal.SIGTERM)
    assert agent.popen.wait(timeout=30) == 0, agent.stderr
    wait_for(lambda: "node1" not in fleet.nodes(), 15, "node1 deregistered")
    fleet.start_agent(1)
    fleet.wait_nodes_idle({"node1", "node2"})
    job = fleet.submit(fleet.spec("allreduce", node_labels={"netns": "node1"}, nodes=1, procs=2))
    info = fleet.wait_state(job, {"succeeded", "failed", "cancelled"}, 90)
    assert info["state"] == "succeeded", info
    assert [n.get("node_name", n.get("nodeName")) for n in info["nodes"]] == ["node1"]
    assert [fleet.log(job, r) for r in range(2)] == \
        [f"rank {r} world 2 local_rank {r} sum 3\n" for r in range(2)]


def test_packaged_example_job_is_valid(fleet):
    """The .deb's examples/job.yaml is a valid job: queued (no node has its labels), saying
    why, then cancelled (a queued job blocks the ones behind it)."""
    example = fleet.h.root / "usr/share/dgt/examples/job.yaml"
    job = fleet.dgt("submit", example).stdout.strip()
    info = fleet.show(job)
    assert info["state"] == "queued" and info["spec"]["instance_count"] == 2, info
    assert "pool" in info["reason"], info
    assert fleet.show(job)["spec"]["distribution"]["process_count_per_instance"] == 2
    fleet.dgt("cancel", job)
    assert fleet.wait_state(job, {"cancelled"}, 10)["state"] == "cancelled"
