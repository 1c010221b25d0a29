"""The chaos soak (docs/RELIABILITY.md, "The chaos soak"); bench/chaos/run.sh runs it.

A fleet in network namespaces that the soak creates: three etcd members and two dgt-rendezvous
--backend=etcd replicas (jobs service on) in the soak's own namespace (the hub, `unshare -n`,
bench/netns.py), and four dgt-agent daemons, each in a namespace of its own that a veth joins to a
bridge in the hub. A stream of `dgt submit`ted jobs (torch 2.13 DDP, 2 nodes x 2 processes,
bench/chaos/soak_worker.py) runs on them, at most two at a time, while a nemesis injects a fault
every 5-20 s: kill -9 or SIGSTOP (then SIGCONT) of a replica, an agent, a job's dgt-run, a worker
or an etcd member; a partition of one node (iptables in its namespace) for 2-10 s; a replica
restart (SIGTERM). A killed replica, agent or etcd member is started again 1-3 s later, as systemd
would; dgt-run and the workers are the agents' to restart.

At the end it heals everything, waits for every job (each has a deadline), drains the agents and
reports: jobs submitted, succeeded with the right digest, failed with a reason that matches a
fault injected in the job's lifetime, and the must-be-0 lines: failed without a fault, orphan
processes, ranks run twice, wrong results, jobs lost, jobs stuck past their timeout, services that
exited on their own. Exit 1 when one of those is not 0, 2 on bad flags or a missing tool.

Every loop is bounded in count and time and every wait has a deadline. The namespaces, their
iptables rules, the processes and the temporary directory are removed on any exit: by the
`finally` on a normal end, SIGINT, SIGTERM or SIGHUP, and by a sweeper shell (blocked on a pipe
only this process holds) should this process die by SIGKILL.
"""
import argparse
import hashlib
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
WORKER = HERE / "soak_worker.py"
NODES = 4
REPLICAS = 2
ETCD_MEMBERS = 3
LEASE_S = 2
IN_FLIGHT = 2  # Jobs running or queued at once: 2 jobs x 2 nodes fill the 4 nodes.
STEPS = 8  # exact_descent stays exact in float64 up to 8 steps.
STEP_S = 1.0
MAX_RESTARTS = (2, 0)  # Jobs take these in turn: most faults end a job with none.
JOB_TIMEOUT_S = 300  # From submission to a terminal state.
ORPHAN_GRACE_S = 45  # After a job ended, none of its processes may be left after this.
CALL_TIMEOUT_S = 5  # dgt --timeout.
STOP_GRACE_S = 5  # agent.yaml stop_grace_s.
MARKER_VAR = "DGT_SOAK_MARKER"
TERMINAL = ("succeeded", "failed", "cancelled")


def parse_args(argv):
    ap = argparse.ArgumentParser(prog="run.sh", description=__doc__.split("\n\n")[0])
    length = ap.add_mutually_exclusive_group(required=True)
    length.add_argument("--minutes", help="how long faults are injected (whole minutes > 0)")
    length.add_argument("--seconds", help="the same in seconds (short runs, tests)")
    ap.add_argument("--seed", help="replays this fault schedule (a whole number)")
    ap.add_argument("--build", default=str(REPO / "build"), help="build dir (default ./build)")
    args = ap.parse_args(argv)
    flag, text = ("--minutes", args.minutes) if args.minutes is not None else \
        ("--seconds", args.seconds)
    if not re.fullmatch(r"[0-9]+", text) or int(text) == 0:
        ap.error(f"{flag} must be a whole number above 0, got '{text}'")
    args.duration_s = int(text) * (60 if flag == "--minutes" else 1)
    if args.seed is not None and not re.fullmatch(r"[0-9]+", args.seed):
        ap.error(f"--seed must be a whole number, got '{args.seed}'")
    args.seed = int(args.seed) if args.seed is not None else int(time.time())
    bin_dir = Path(args.build) / "bin"
    for b in ("dgt", "dgt-rendezvous", "dgt-agent", "dgt-run"):
        if not os.access(bin_dir / b, os.X_OK):
            ap.error(f"no {bin_dir / b} (build first, or pass --build DIR)")
    args.bin = bin_dir.resolve()
    return args


def cannot_run():
    """Why the soak cannot run here, or None."""
    if os.geteuid() != 0:
        return "needs root (network namespaces, iptables)"
    missing = [t for t in ("ip", "iptables", "etcd", "etcdctl", "unshare") if not shutil.which(t)]
    if missing:
        return f"needs {', '.join(missing)}"
    python2 = os.environ.get("DGT_PYTHON2", "/opt/dgt/peers-venv/bin/python")
    if not os.access(python2, os.X_OK):
        return f"needs torch 2.x at {python2} (DGT_PYTHON2; scripts/install-deps.sh)"
    return None


def sh(*args, check=True, timeout=30):
    r = subprocess.run([str(a) for a in args], capture_output=True, text=True, timeout=timeout)
    if check and r.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, args))}: exit {r.returncode}: {r.stderr}")
    return r


# --- /proc: the soak's processes.

def proc_info(pid):
    """(cmdline, environ, ppid) of `pid`, or None once it is gone."""
    try:
        base = f"/proc/{pid}"
        with open(f"{base}/cmdline", "rb") as f:
            cmd = f.read().split(b"\0")
        with open(f"{base}/environ", "rb") as f:
            env = f.read().split(b"\0")
        with open(f"{base}/stat") as f:
            ppid = int(f.read().rsplit(")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
    return ([c.decode(errors="replace") for c in cmd if c],
            dict(e.decode(errors="replace").partition("=")[::2] for e in env if b"=" in e), ppid)


EXCLUDE = {os.getpid()}  # The soak's own processes and their children: the sweeper.


def soak_processes(marker, scratch, exclude=()):
    """{pid: (cmdline, environ, ppid)} of every process with the marker in its environment or the
    scratch directory in its command line, but EXCLUDE, `exclude` and their children."""
    found = {}
    skip = EXCLUDE | set(exclude)
    for name in os.listdir("/proc"):
        if not name.isdigit() or int(name) in skip:
            continue
        info = proc_info(int(name))
        if info and info[2] not in skip and (
                info[1].get(MARKER_VAR) == marker or any(scratch in c for c in info[0])):
            found[int(name)] = info
    return found


def job_of(cmd, env):
    """The job id of a worker (its TORCHELASTIC_RUN_ID) or a dgt-run (its --rdzv-id)."""
    return env.get("TORCHELASTIC_RUN_ID") or next(
        (c.split("=", 1)[1] for c in cmd if c.startswith("--rdzv-id=")), None)


def node_of(pid, procs):
    """The --node-id of the dgt-run that is `pid` or its nearest ancestor, or None."""
    for _ in range(8):
        info = procs.get(pid) or proc_info(pid)
        if info is None:
            return None
        for c in info[0]:
            if c.startswith("--node-id="):
                return c.split("=", 1)[1]
        pid = info[2]
    return None


# --- The fleet.

class Fleet:
    """The hub's bridge, the node namespaces, etcd, the replicas and the agents."""

    def __init__(self, args, scratch, marker):
        self.args = args
        self.bin = args.bin
        self.scratch = scratch
        self.marker = marker
        self.n = os.getpid() % 200 + 20
        self.ns = {k: f"dgtsoak{k}-{os.getpid()}" for k in range(1, NODES + 1)}
        self.hub_ip = f"10.234.{self.n}.254"
        self.ip = {k: f"10.234.{self.n}.{k}" for k in self.ns}
        self.replica_ports = []
        self.replicas = [None] * REPLICAS
        self.agents = {}
        self.cluster = None
        self.starts = {}
        self.partitioned = set()

    # Each start is logged to its own files, so a restarted process's output is kept.
    def _spawn(self, args, name):
        self.starts[name] = self.starts.get(name, 0) + 1
        log = self.scratch / "logs" / f"{name}.{self.starts[name]}"
        out = open(f"{log}.out", "wb")
        err = open(f"{log}.err", "wb")
        try:
            return subprocess.Popen([str(a) for a in args], stdout=out, stderr=err,
                                    stdin=subprocess.DEVNULL, start_new_session=True)
        finally:
            out.close()
            err.close()

    def log_text(self, name, start=None):
        start = start or self.starts.get(name, 0)
        text = ""
        for s in ("out", "err"):
            p = self.scratch / "logs" / f"{name}.{start}.{s}"
            if p.exists():
                text += p.read_text(errors="replace")
        return text

    def setup_network(self):
        sh("ip", "link", "set", "lo", "up")
        sh("ip", "link", "add", "br0", "type", "bridge", "stp_state", "0", "forward_delay", "0")
        sh("ip", "addr", "add", f"{self.hub_ip}/24", "dev", "br0")
        sh("ip", "link", "set", "br0", "up")
        for k, ns in self.ns.items():
            sh("ip", "netns", "add", ns)
            sh("ip", "-n", ns, "link", "set", "lo", "up")
            sh("ip", "link", "add", "dgt0", "netns", ns, "type", "veth", "peer", "name", f"p{k}")
            sh("ip", "-n", ns, "addr", "add", f"{self.ip[k]}/24", "dev", "dgt0")
            sh("ip", "-n", ns, "link", "set", "dgt0", "up")
            sh("ip", "link", "set", f"p{k}", "master", "br0")
            sh("ip", "link", "set", f"p{k}", "up")

    def start_etcd(self):
        from test_etcd_ha import EtcdCluster
        self.cluster = EtcdCluster(ETCD_MEMBERS)

    @property
    def endpoints(self):
        return ",".join(f"{self.hub_ip}:{p}" for p in self.replica_ports)

    def start_replica(self, i):
        self.replicas[i] = self._spawn(
            [self.bin / "dgt-rendezvous", "--listen", f"{self.hub_ip}:{self.replica_ports[i]}",
             "--backend=etcd", f"--etcd-endpoints={','.join(self.cluster.endpoints)}",
             f"--replica-id=r{i + 1}", f"--leader-lease-s={LEASE_S}",
             "--allow-unauthenticated-submit", f"--advertise-endpoint={self.endpoints}"],
            f"r{i + 1}")

    def start_replicas(self):
        from test_rendezvous_etcd import free_port
        self.replica_ports = [free_port() for _ in range(REPLICAS)]
        self.start_replica(0)
        wait(lambda: "r1 leads" in self.log_text("r1"), 30, "r1 to lead")
        for i in range(1, REPLICAS):
            self.start_replica(i)
            wait(lambda: "standby" in self.log_text(f"r{i + 1}"), 30, f"r{i + 1} to stand by")

    def write_agent_config(self, k):
        work = self.scratch / f"node{k}" / "jobs"
        work.mkdir(parents=True)
        cfg = self.scratch / f"node{k}" / "agent.yaml"
        cfg.write_text(
            f"rendezvous_endpoints: {json.dumps(self.endpoints.split(','))}\n"
            f"node_name: node{k}\n"
            f"advertise_address: {self.ip[k]}\n"
            f"run_as_user: root\nallow_root: true\n"
            f"work_dir: {work}\n"
            f"dgt_run: {self.bin / 'dgt-run'}\n"
            f"stop_grace_s: {STOP_GRACE_S}\n"
            f"watchdog: false\n")

    def start_agent(self, k):
        cfg = self.scratch / f"node{k}" / "agent.yaml"
        # ip netns exec execs: the Popen is the daemon itself.
        self.agents[k] = self._spawn(["ip", "netns", "exec", self.ns[k],
                                      self.bin / "dgt-agent", "--config", cfg], f"node{k}")

    def start_agents(self):
        for k in self.ns:
            self.write_agent_config(k)
            self.start_agent(k)
        wait(lambda: all(f"node{k}" in self.idle_nodes() for k in self.ns), 60,
             "every node registered and idle")

    def dgt(self, *args, timeout=3 * CALL_TIMEOUT_S):
        """`dgt ARGS` against both replicas; None when it did not end within `timeout`."""
        try:
            return subprocess.run([self.bin / "dgt", *map(str, args),
                                   f"--rdzv-endpoint={self.endpoints}",
                                   f"--timeout={CALL_TIMEOUT_S}"],
                                  capture_output=True, text=True, timeout=timeout)
        except subprocess.TimeoutExpired:
            return None

    def idle_nodes(self):
        r = self.dgt("nodes")
        if r is None or r.returncode != 0:
            return set()
        return {line.split()[0] for line in r.stdout.splitlines()[1:]
                if line.strip() and " idle" in line}

    def partition(self, k):
        self.partitioned.add(k)
        for chain, flag in (("INPUT", "-i"), ("OUTPUT", "-o")):
            sh("ip", "netns", "exec", self.ns[k], "iptables", "-I", chain, flag, "dgt0", "-j",
               "DROP")

    def heal(self, k):
        sh("ip", "netns", "exec", self.ns[k], "iptables", "-F")
        self.partitioned.discard(k)


def wait(predicate, timeout, what):
    """Polls `predicate` every 0.2 s; raises after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.2)
    raise RuntimeError(f"timed out after {timeout} s waiting for {what}")


def stop(popen, grace):
    """SIGTERM, then SIGKILL after `grace` s; returns the exit status."""
    if popen.poll() is None:
        popen.send_signal(signal.SIGTERM)
        try:
            return popen.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            popen.kill()
    return popen.wait(timeout=10)


# --- Jobs.

class Job:
    def __init__(self, job_id, submitted):
        self.id = job_id
        self.submitted = submitted
        self.ended = None
        self.state = "queued"
        self.reason = ""
        self.nodes = set()
        self.info = None
        self.orphans_checked = False


class Jobs:
    """Submits jobs while the soak runs (at most IN_FLIGHT unfinished) and follows each."""

    def __init__(self, fleet, job_files):
        self.fleet = fleet
        self.job_files = job_files  # Submitted in turn.
        self.jobs = {}
        self.submit_failures = []  # (time, exit code, stderr): the outcome is unknown.
        self.orphans = {}  # pid: what it is.
        self.submits = 0
        self.lock = threading.Lock()

    def unfinished(self):
        with self.lock:
            return [j for j in self.jobs.values() if j.state not in TERMINAL]

    def submit(self):
        t = time.monotonic()
        job_file = self.job_files[self.submits % len(self.job_files)]
        self.submits += 1
        r = self.fleet.dgt("submit", job_file)
        if r is not None and r.returncode == 0:
            job = Job(r.stdout.strip(), t)
            job.max_restarts = json.loads(job_file.read_text())["max_restarts"]
            with self.lock:
                self.jobs[job.id] = job
        else:
            self.submit_failures.append(
                (t, None if r is None else r.returncode, "" if r is None else r.stderr.strip()))

    def poll(self, job):
        r = self.fleet.dgt("job", "show", job.id, "--json")
        if r is None or r.returncode != 0:
            if r is not None and f"no job '{job.id}'" in r.stderr:
                job.missing = True
            return
        info = json.loads(r.stdout)
        job.missing = False
        job.info = info
        job.nodes |= {n.get("node_name", "") for n in info.get("nodes", [])}
        job.reason = info.get("reason", "")
        if info["state"] in TERMINAL and job.state not in TERMINAL:
            job.ended = time.monotonic()
        job.state = info["state"]

    def check_orphans(self, ended_jobs):
        """Records the processes of `ended_jobs` (ids) that are still alive."""
        procs = soak_processes(self.fleet.marker, str(self.fleet.scratch))
        for pid, (cmd, env, _) in procs.items():
            job = job_of(cmd, env)
            if job in ended_jobs and pid not in self.orphans:
                self.orphans[pid] = f"pid {pid} of {job}, ended: {' '.join(cmd)[:200]}"

    def follow(self, until, stop_event):
        """Submits until `until`, and follows the jobs, until stop_event is set. Checks each
        ended job's processes once ORPHAN_GRACE_S after its end."""
        while not stop_event.is_set():
            for job in self.unfinished():
                self.poll(job)
            with self.lock:
                due = {j.id for j in self.jobs.values() if j.ended and not j.orphans_checked
                       and time.monotonic() > j.ended + ORPHAN_GRACE_S}
                for j in due:
                    self.jobs[j].orphans_checked = True
            if due:
                self.check_orphans(due)
            if time.monotonic() < until and len(self.unfinished()) < IN_FLIGHT:
                self.submit()
            stop_event.wait(0.5)


# --- The nemesis.

class Nemesis:
    """One fault at a time, 5-20 s apart; each healed before the next (the schedule comes from
    the seed; which pid a "worker" or "dgt-run" fault hits is the n-th of the ones alive)."""

    KINDS = ["kill replica", "stop replica", "restart replica", "kill agent", "stop agent",
             "kill dgt-run", "stop dgt-run", "kill worker", "stop worker", "kill etcd",
             "stop etcd", "partition node"]

    def __init__(self, rng, fleet):
        self.rng = rng
        self.fleet = fleet
        self.faults = []  # dicts: kind, target, node, start, end, note
        self.exited = []  # Services that exited on their own (then started again).

    def targets(self, kind):
        """Pids (with their node) of the job processes a "dgt-run" or "worker" fault may hit."""
        procs = soak_processes(self.fleet.marker, str(self.fleet.scratch))
        out = []
        for pid, (cmd, env, _) in sorted(procs.items()):
            is_run = bool(cmd) and cmd[0].endswith("/dgt-run")
            is_worker = any(c.endswith("soak_worker.py") for c in cmd)
            if (kind.endswith("dgt-run") and is_run) or (kind.endswith("worker") and is_worker):
                out.append((pid, node_of(pid, procs), job_of(cmd, env)))
        return out

    def run(self, until):
        while time.monotonic() < until:
            supervise(self.fleet, self.exited)
            time.sleep(self.rng.uniform(5, 20))
            supervise(self.fleet, self.exited)
            if time.monotonic() >= until:
                break
            kind = self.rng.choice(self.KINDS)
            pick = self.rng.random()
            hold = self.rng.uniform(2, 10) if kind == "partition node" else \
                self.rng.uniform(1, 5) if kind.startswith("stop") else self.rng.uniform(1, 3)
            self.inject(kind, pick, hold)

    def inject(self, kind, pick, hold):
        f = self.fleet
        fault = {"kind": kind, "start": time.monotonic(), "node": None, "target": None,
                 "job": None, "hold": round(hold, 1)}
        sig = signal.SIGKILL if kind.startswith("kill") else signal.SIGSTOP
        if kind.endswith("replica"):
            i = int(pick * REPLICAS)
            fault["target"] = f"r{i + 1}"
            popen = f.replicas[i]
            if kind == "restart replica":
                fault["exit"] = stop(popen, 15)
                f.start_replica(i)
            else:
                self._hit(popen.pid, sig, hold)
                popen.wait(timeout=10) if sig == signal.SIGKILL else None
                if sig == signal.SIGKILL:
                    f.start_replica(i)
        elif kind.endswith("agent"):
            k = 1 + int(pick * NODES)
            fault["target"] = fault["node"] = f"node{k}"
            self._hit(f.agents[k].pid, sig, hold)
            if sig == signal.SIGKILL:
                f.agents[k].wait(timeout=10)
                f.start_agent(k)
        elif kind.endswith("etcd"):
            i = int(pick * ETCD_MEMBERS)
            fault["target"] = f"etcd m{i}"
            if sig == signal.SIGKILL:
                f.cluster.kill(i)
                time.sleep(hold)
                f.cluster.start(i)
            else:
                self._hit(f.cluster.procs[i].pid, sig, hold)
        elif kind == "partition node":
            k = 1 + int(pick * NODES)
            fault["target"] = fault["node"] = f"node{k}"
            f.partition(k)
            time.sleep(hold)
            f.heal(k)
        else:  # dgt-run or worker: the n-th alive, if any.
            alive = self.targets(kind)
            if not alive:
                fault["target"] = "none alive"
            else:
                pid, node, job = alive[int(pick * len(alive))]
                fault.update(target=f"pid {pid}", node=node, job=job)
                self._hit(pid, sig, hold)
        fault["end"] = time.monotonic()
        self.faults.append(fault)
        print(f"soak: {fault['start'] - T0:7.1f} s {kind} {fault['target']}"
              f"{' (' + fault['node'] + ')' if fault['node'] else ''}"
              f"{' for ' + str(fault['hold']) + ' s' if kind[:4] in ('stop', 'part') else ''}",
              flush=True)

    @staticmethod
    def _hit(pid, sig, hold):
        """kill -9 (then the hold, as the delay before a restart) or SIGSTOP for `hold` s."""
        try:
            os.kill(pid, sig)
        except ProcessLookupError:
            return
        time.sleep(hold)
        if sig == signal.SIGSTOP:
            try:
                os.kill(pid, signal.SIGCONT)
            except ProcessLookupError:
                pass


def supervise(fleet, exited):
    """Starts again a replica, agent or etcd member that exited on its own (as systemd would),
    noting it in `exited`: the nemesis restarts what it kills itself."""
    for i, p in enumerate(fleet.replicas):
        if p.poll() is not None:
            exited.append(f"r{i + 1} exited {p.returncode}: {fleet.log_text(f'r{i + 1}')[-500:]}")
            fleet.start_replica(i)
    for k, p in fleet.agents.items():
        if p.poll() is not None:
            exited.append(f"node{k}'s agent exited {p.returncode}: "
                          f"{fleet.log_text(f'node{k}')[-500:]}")
            fleet.start_agent(k)
    for i in range(ETCD_MEMBERS):
        if not fleet.cluster.running(i):
            exited.append(f"etcd m{i} exited {fleet.cluster.procs[i].returncode}")
            fleet.cluster.start(i)


# --- The checks.

# A failed job's reason and the faults that explain it. A reason that names a node is explained
# by a fault on that node (its agent, dgt-run, workers or network) in the job's lifetime; one
# that names no node by any fault then (a replica or etcd fault can end a run: dgt-run loses
# the service).
def explaining_faults(job, faults):
    end = job.ended or time.monotonic()
    during = [f for f in faults if f["start"] <= end and f["end"] >= job.submitted]
    named = set(re.findall(r"\bnode(\d+)\b", job.reason))
    if named:
        return [f for f in during if f["node"] in {f"node{n}" for n in named}
                or (f["job"] == job.id)]
    return during


def expected_digest():
    """sha256 of json.dumps([w0, w1, w2, b]) after STEPS steps, from conftest.exact_descent."""
    from conftest import WORKERS, exact_descent
    sys.path.insert(0, str(WORKERS))
    from ddp_steps import batch
    batches = [(x, [t for (t,) in y]) for x, y in map(batch, range(4))]
    w, b = exact_descent(lambda step: batches, STEPS)
    return hashlib.sha256(json.dumps([*w, b]).encode()).hexdigest()


def rank_records(scratch, job_id):
    path = scratch / "ranks" / f"{job_id}.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


T0 = time.monotonic()


def main(argv):
    args = parse_args(argv)
    why = cannot_run()
    if why:
        print(f"run.sh: {why}", file=sys.stderr)
        return 2
    sys.path.insert(0, str(REPO / "bench"))
    import netns
    netns.enter()
    if not os.environ.get("DGT_BENCH_IN_NETNS"):
        print("run.sh: needs a network namespace of its own (unshare -n)", file=sys.stderr)
        return 2
    os.environ["DGT_BIN_DIR"] = str(args.bin)
    sys.path.insert(0, str(REPO / "tests" / "e2e"))
    sys.path.insert(0, str(HERE))

    marker = uuid.uuid4().hex
    scratch = Path(tempfile.mkdtemp(prefix="dgt-soak-"))
    for d in ("logs", "ranks"):
        (scratch / d).mkdir()
    os.environ[MARKER_VAR] = marker  # Everything the soak starts inherits it.
    fleet = Fleet(args, scratch, marker)
    # The sweeper: should this process die by SIGKILL, its end closes the pipe and the sweeper
    # removes what is left. It runs without the marker (so it does not kill itself).
    sweep = (f'cat >/dev/null; for ns in {" ".join(fleet.ns.values())}; do '
             'for p in $(ip netns pids $ns 2>/dev/null); do kill -9 $p; done; '
             'ip netns del $ns 2>/dev/null; done; '
             f'for e in /proc/[0-9]*/environ; do grep -qa "{MARKER_VAR}={marker}" $e 2>/dev/null '
             '&& p=${e%/environ} && kill -9 ${p#/proc/} 2>/dev/null; done; '
             f'rm -rf "{scratch}"')
    sweeper = subprocess.Popen(["env", "-u", MARKER_VAR, "sh", "-c", sweep],
                               stdin=subprocess.PIPE, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, start_new_session=True)
    EXCLUDE.add(sweeper.pid)

    def on_signal(signum, _frame):
        raise SystemExit(128 + signum)

    for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(s, on_signal)
    print(f"soak: seed {args.seed} (--seed {args.seed} replays the fault schedule), "
          f"{args.duration_s} s of faults; scratch {scratch}", flush=True)
    stop_event = threading.Event()
    try:
        return run(args, fleet, scratch, stop_event)
    except SystemExit as e:
        print(f"soak: stopped by signal {e.code - 128}; cleaning up", file=sys.stderr, flush=True)
        return e.code
    except RuntimeError as e:  # The fleet did not come up (wait()'s deadline).
        print(f"soak: error: {e}", file=sys.stderr)
        for name in sorted(fleet.starts):
            print(f"--- {name}: {fleet.log_text(name)[-1500:]}", file=sys.stderr)
        return 1
    finally:
        stop_event.set()
        cleanup(fleet, sweeper)


def run(args, fleet, scratch, stop_event):
    digest = expected_digest()
    fleet.setup_network()
    fleet.start_etcd()
    fleet.start_replicas()
    fleet.start_agents()
    python2 = os.environ.get("DGT_PYTHON2", "/opt/dgt/peers-venv/bin/python")
    job_files = [scratch / f"job-r{r}.yaml" for r in MAX_RESTARTS]
    for job_file, restarts in zip(job_files, MAX_RESTARTS):
        job_file.write_text(json.dumps({
            "name": f"soak-r{restarts}",
            "command": f"exec {python2} {WORKER} --steps {STEPS} --step-s {STEP_S}",
            "environment_variables": {"GLOO_SOCKET_IFNAME": "dgt0", MARKER_VAR: fleet.marker,
                                      "DGT_SOAK_DIR": str(scratch)},
            "instance_count": 2,
            "distribution": {"type": "pytorch", "process_count_per_instance": 2},
            "max_restarts": restarts}))
    print(f"soak: fleet up after {time.monotonic() - T0:.1f} s: etcd x{ETCD_MEMBERS}, "
          f"replicas {fleet.endpoints}, {NODES} agents; expected digest {digest[:16]}",
          flush=True)

    rng = random.Random(args.seed)
    nemesis = Nemesis(rng, fleet)
    jobs = Jobs(fleet, job_files)
    until = time.monotonic() + args.duration_s
    follower = threading.Thread(target=jobs.follow, args=(until, stop_event), daemon=True)
    follower.start()
    # The nemesis runs on this thread: the etcd members it starts again die with the thread that
    # started them (PR_SET_PDEATHSIG).
    nemesis.run(until)

    # Healed (each fault healed itself); every service must still run.
    supervise(fleet, nemesis.exited)
    # Every job to its end, each within its deadline.
    deadline = max([j.submitted for j in jobs.jobs.values()] + [time.monotonic()]) + JOB_TIMEOUT_S
    while jobs.unfinished() and time.monotonic() < deadline:
        if all(time.monotonic() > j.submitted + JOB_TIMEOUT_S for j in jobs.unfinished()):
            break
        time.sleep(1)
    stop_event.set()
    follower.join(timeout=60)
    stuck = [j for j in jobs.jobs.values() if j.state not in TERMINAL]
    for j in stuck:
        fleet.dgt("cancel", j.id, "--grace", "2")
    # The jobs that the service knows: one we did not learn of (a submit with no answer) counts
    # apart; a job we learnt of that the service does not know is lost.
    listed = fleet.dgt("jobs")
    known = set()
    if listed is not None and listed.returncode == 0:
        known = {line.split()[0] for line in listed.stdout.splitlines()[1:] if line.strip()}
    for j in jobs.jobs.values():
        jobs.poll(j)
    lost = [j for j in jobs.jobs.values() if getattr(j, "missing", False)
            or (listed is not None and listed.returncode == 0 and j.id not in known)]
    unknown = sorted(known - set(jobs.jobs), key=lambda s: (len(s), s))

    # Orphans: a job's processes past ORPHAN_GRACE_S after its end; then, once the agents have
    # drained and the replicas stopped, any process of the soak's at all.
    wait_until = max([j.ended or 0 for j in jobs.jobs.values()] + [0]) + ORPHAN_GRACE_S
    while time.monotonic() < wait_until:
        time.sleep(1)
    jobs.check_orphans({j.id for j in jobs.jobs.values() if j.state in TERMINAL})
    orphans = list(jobs.orphans.values())
    exited = []
    for k, p in fleet.agents.items():
        if stop(p, 30) != 0:
            exited.append(f"node{k}'s agent: SIGTERM exit {p.returncode}")
    for i, p in enumerate(fleet.replicas):
        stop(p, 15)
    seen = {o.split()[1] for o in orphans}
    etcd_pids = {p.pid for p in fleet.cluster.procs if p is not None} | {fleet.cluster.sweeper.pid}
    left = {}
    for _ in range(10):  # The drained processes' exits may take a moment to be reaped.
        left = soak_processes(fleet.marker, str(scratch), etcd_pids)
        if not left:
            break
        time.sleep(0.5)
    orphans += [f"pid {pid} after the drain: {' '.join(cmd)[:200]}"
                for pid, (cmd, _, _) in left.items() if str(pid) not in seen]

    # The results.
    twice, wrong, good, failed_ok, failed_unexplained = [], [], [], [], []
    for j in sorted(jobs.jobs.values(), key=lambda j: j.submitted):
        recs = rank_records(scratch, j.id)
        twice += [r for r in recs if r["event"] == "twice"]
        done = [r for r in recs if r["event"] == "done"]
        bad = [r for r in done if r["digest"] != digest]
        if bad:
            wrong.append(f"{j.id}: {len(bad)} rank(s) ended with another digest: {bad[:2]}")
        if j.state == "succeeded":
            if {r["rank"] for r in done if r["digest"] == digest} != {0, 1, 2, 3}:
                wrong.append(f"{j.id}: succeeded, but ranks done with the right digest are "
                             f"{sorted({r['rank'] for r in done if r['digest'] == digest})}")
            elif not bad:
                good.append(j)
        elif j.state == "failed":
            why = explaining_faults(j, nemesis.faults)
            (failed_ok if why else failed_unexplained).append((j, why))

    kinds = {}
    for f in nemesis.faults:
        kinds[f["kind"]] = kinds.get(f["kind"], 0) + 1
    states = {}
    for j in jobs.jobs.values():
        key = f"max_restarts {j.max_restarts} {j.state}"
        states[key] = states.get(key, 0) + 1
    load = os.getloadavg()
    print(f"\nsoak: seed {args.seed}, {args.duration_s} s of faults, "
          f"{time.monotonic() - T0:.0f} s in all; load average {load[0]:.2f} {load[1]:.2f} "
          f"{load[2]:.2f}")
    print(f"jobs submitted: {len(jobs.jobs)} ("
          + ", ".join(f"{k} {v}" for k, v in sorted(states.items())) + ")")
    if jobs.submit_failures or unknown:
        print(f"submits without an answer: {len(jobs.submit_failures)} "
              f"(jobs the service lists that no answer named: {unknown})")
    print(f"succeeded with the right digest: {len(good)}")
    print(f"failed with a reason that matches an injected fault: {len(failed_ok)}")
    for j, why in failed_ok:
        print(f"  {j.id}: {j.reason[:160]!r} <- {why[-1]['kind']} {why[-1]['target']}")
    print(f"faults: {len(nemesis.faults)} (" + ", ".join(
        f"{k} {v}" for k, v in sorted(kinds.items())) + ")")
    must = [
        ("failed without a fault", [f"{j.id}: {j.reason!r}" for j, _ in failed_unexplained]),
        ("orphan processes", orphans),
        ("ranks run twice", [json.dumps(r) for r in twice]),
        ("wrong results", wrong),
        ("jobs lost", [j.id for j in lost]),
        ("jobs stuck past their timeout", [f"{j.id}: {j.state} {j.reason!r}" for j in stuck]),
        ("services that exited on their own", nemesis.exited + exited),
    ]
    for name, items in must:
        print(f"{name}: {len(items)}")
        for item in items[:10]:
            print(f"  {item}")
    if any(items for _, items in must):
        print("soak: FAILED; the faults with their times (s from the start):")
        for f in nemesis.faults:
            print(f"  {f['start'] - T0:7.1f}-{f['end'] - T0:7.1f} {f['kind']} {f['target']} "
                  f"node={f['node']} job={f['job']}")
        keep = Path(tempfile.mkdtemp(prefix="dgt-soak-failed-"))
        shutil.copytree(scratch / "logs", keep / "logs")
        shutil.copytree(scratch / "ranks", keep / "ranks")
        for k in fleet.ns:
            shutil.copytree(scratch / f"node{k}" / "jobs", keep / f"node{k}",
                            ignore_dangling_symlinks=True)
        print(f"soak: logs kept in {keep}")
        return 1
    return 0


def cleanup(fleet, sweeper):
    """Stops whatever is left and lets the sweeper remove the namespaces and the scratch dir."""
    for k in list(fleet.partitioned):
        fleet.heal(k)
    for p in [*fleet.agents.values(), *fleet.replicas]:
        if p is not None and p.poll() is None:
            p.kill()
            p.wait(timeout=10)
    if fleet.cluster is not None:
        fleet.cluster.close()
    sweeper.stdin.close()
    try:
        sweeper.wait(timeout=60)
    except subprocess.TimeoutExpired:
        sweeper.kill()
    for name in ("br0",):
        sh("ip", "link", "del", name, check=False)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
