"""A stand-in for the agent's `--restart-policy rank` in recovery tests and benchmarks.

It starts a `dgt store serve` store on loopback and N allreduce_trainer processes with the env
contract (RANK, WORLD_SIZE, MASTER_ADDR/PORT, TORCHELASTIC_RESTART_COUNT, ...), kills one with
SIGKILL, and then does what the agent does: starts a replacement with the same RANK and
TORCHELASTIC_RESTART_COUNT+1 (policy `rank`), reports the failure into the store (shrink mode:
`dgt recovery fail`), or kills and restarts every worker (policy `group`). Every wait has a
deadline; close() kills whatever is left.
"""
import os
import re
import signal
import subprocess
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DGT_BIN_DIR", REPO / "build" / "bin"))

EVENT = re.compile(r"^EVENT (\w+) (.*)$")


def popen_logged(args, out_dir, name, env=None):
    """Starts `args` in a session of its own (kill_session reaches its children), stdin from
    /dev/null, stdout and stderr into out_dir/<name>.out and .err (files, so nothing blocks on a
    full pipe)."""
    out = open(Path(out_dir) / f"{name}.out", "wb")
    err = open(Path(out_dir) / f"{name}.err", "wb")
    try:
        return subprocess.Popen(args, stdout=out, stderr=err, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
    finally:
        out.close()
        err.close()


def kill_session(popen):
    """SIGKILLs the process group of `popen` (started with start_new_session) if it still runs,
    and reaps it (10 s at most)."""
    if popen.poll() is None:
        try:
            os.killpg(popen.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        popen.wait(timeout=10)


def rendezvous_endpoint(proc, out_dir, timeout=10):
    """The "127.0.0.1:PORT" that dgt-rendezvous `proc`, started by popen_logged(..., out_dir,
    "rendezvous"), reports listening on, within `timeout` s."""
    deadline = time.monotonic() + timeout
    while True:
        m = re.search(r"listening on port (\d+)",
                      (Path(out_dir) / "rendezvous.out").read_text(errors="replace"))
        if m:
            return f"127.0.0.1:{m.group(1)}"
        assert proc.poll() is None, (Path(out_dir) / "rendezvous.err").read_text(errors="replace")
        assert time.monotonic() < deadline, "dgt-rendezvous did not report its port"
        time.sleep(0.02)


def parse_events(text):
    """[(kind, {key: value})] from a trainer's stdout."""
    out = []
    for line in text.splitlines():
        m = EVENT.match(line)
        if m:
            fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', m.group(2)))
            out.append((m.group(1), fields))
    return out


class Worker:
    def __init__(self, rank, restart_count, env, args, out_dir):
        self.rank = rank
        self.restart_count = restart_count
        name = f"rank{rank}.attempt{restart_count}"
        self.out_path = Path(out_dir) / f"{name}.out"
        self.err_path = Path(out_dir) / f"{name}.err"
        self.popen = popen_logged(args, out_dir, name, env)
        self.pid = self.popen.pid

    def events(self):
        return parse_events(self.out_path.read_text(errors="replace"))

    def stderr(self):
        return self.err_path.read_text(errors="replace")

    def kill9(self):
        if self.popen.poll() is None:
            os.kill(self.popen.pid, signal.SIGKILL)
        self.popen.wait(timeout=10)

    def close(self):
        kill_session(self.popen)


class Job:
    def __init__(self, out_dir, world=4, steps=300, step_ms=10, mode="replace"):
        self.out_dir = Path(out_dir)
        self.world = world
        self.steps = steps
        self.step_ms = step_ms
        self.mode = mode
        self.store = None
        self.port = None
        self.workers = {}   # rank -> current Worker
        self.retired = []   # killed or replaced Workers
        self.start_store()

    def start_store(self):
        if self.store is not None:
            self.store.kill()
            self.store.wait(timeout=10)
        self.store = subprocess.Popen([str(BIN / "dgt"), "store", "serve", "--listen",
                                       "127.0.0.1:0"], stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, stdin=subprocess.DEVNULL)
        line = self.store.stdout.readline().decode()
        m = re.search(r"port (\d+)", line)
        assert m, f"store did not start: {line!r}"
        self.port = int(m.group(1))

    def env(self, rank, restart_count):
        env = dict(os.environ)
        env.update({"RANK": str(rank), "LOCAL_RANK": str(rank), "WORLD_SIZE": str(self.world),
                    "LOCAL_WORLD_SIZE": str(self.world), "NODE_RANK": "0",
                    "GROUP_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                    "MASTER_PORT": str(self.port), "TORCHELASTIC_USE_AGENT_STORE": "True",
                    "TORCHELASTIC_RUN_ID": "recovery-test",
                    "TORCHELASTIC_RESTART_COUNT": str(restart_count),
                    "DGT_LOG_LEVEL": "warn"})
        return env

    def spawn(self, rank, restart_count=0):
        args = [str(BIN / "allreduce_trainer"), "--steps", str(self.steps), "--step-ms",
                str(self.step_ms), "--mode", self.mode, "--init-timeout", "30"]
        w = Worker(rank, restart_count, self.env(rank, restart_count), args, self.out_dir)
        self.workers[rank] = w
        return w

    def start(self):
        for r in range(self.world):
            self.spawn(r)

    def wait_for_step(self, rank, step, timeout=30):
        """Waits until `rank` has run `step` steps (it prints nothing per step, so this reads
        the store-free clock: step_ms per step) — bounded by `timeout`."""
        deadline = time.monotonic() + timeout
        w = self.workers[rank]
        while time.monotonic() < deadline:
            if any(k == "joined" for k, _ in w.events()):
                break
            time.sleep(0.02)
        else:
            raise AssertionError(f"rank {rank} did not join in {timeout} s: {w.stderr()}")
        time.sleep(step * self.step_ms / 1000.0)

    def kill_rank(self, rank):
        """SIGKILLs `rank`; returns the time of the kill (time.time_ns())."""
        w = self.workers[rank]
        t = time.time_ns()
        w.kill9()
        self.retired.append(w)
        return t

    def replace_rank(self, rank):
        """Policy `rank`: the same RANK again, TORCHELASTIC_RESTART_COUNT+1."""
        old = [w for w in self.retired if w.rank == rank][-1]
        return self.spawn(rank, old.restart_count + 1)

    def report_failure(self, rank):
        subprocess.run([str(BIN / "dgt"), "recovery", "fail", "--endpoint",
                        f"127.0.0.1:{self.port}", "--rank", str(rank), "--reason",
                        "SIGKILL (harness)"], check=True, timeout=20,
                       stdout=subprocess.DEVNULL)

    def restart_group(self, fresh_store=True):
        """Policy `group` (torchrun's): every worker killed and started again, attempt+1."""
        restart = max(w.restart_count for w in self.workers.values()) + 1
        for r, w in list(self.workers.items()):
            if w.popen.poll() is None:
                w.kill9()
            if w not in self.retired:
                self.retired.append(w)
        if fresh_store:
            self.start_store()
        for r in range(self.world):
            self.spawn(r, restart)

    def wait_all(self, timeout=60):
        deadline = time.monotonic() + timeout
        codes = {}
        for r, w in self.workers.items():
            left = max(0.1, deadline - time.monotonic())
            try:
                codes[r] = w.popen.wait(timeout=left)
            except subprocess.TimeoutExpired:
                codes[r] = None
        return codes

    def close(self):
        for w in list(self.workers.values()) + self.retired:
            w.close()
        if self.store is not None and self.store.poll() is None:
            self.store.kill()
            self.store.wait(timeout=10)


def descendants(pid):
    """Every process below `pid`, from /proc."""
    children = {}
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                stat = f.read()
        except OSError:
            continue
        ppid = int(stat[stat.rindex(")") + 2:].split()[1])
        children.setdefault(ppid, []).append(int(entry))
    out, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            out.append(child)
            todo.append(child)
    return out


def full_total(world, steps):
    """Sum over steps and ranks of (rank + 1) * 1000 + step."""
    return sum((r + 1) * 1000 + s for s in range(steps) for r in range(world))


RANK_EVENT = re.compile(r"^\[rank(\d+)\]: EVENT (\w+) (.*)$", re.M)


class DgtRunJob:
    """The real launcher: a dgt-rendezvous and `nodes` dgt-run agents with `nproc` ranks each,
    running allreduce_trainer (--no-python) on loopback. The agents apply `policy` (rank or
    group) and, with policy rank, `mode` (--recovery-mode replace or shrink); `nnodes`: another
    --nnodes than `nodes` (e.g. "1:2"). Every wait has a
    deadline; close() kills whatever is left (agents and their workers' sessions)."""

    def __init__(self, out_dir, run_id, policy="rank", mode="replace", nodes=2, nproc=2,
                 steps=300, step_ms=10, max_restarts=1, stop_timeout=5, extra=(), command=None,
                 env=None, nnodes=None):
        self.out_dir = Path(out_dir)
        self.run_id = run_id
        self.nodes = nodes
        self.nproc = nproc
        self.world = nodes * nproc
        self.steps = steps
        self.step_ms = step_ms
        self.env = dict(env or {})
        self.rdzv = self._popen([str(BIN / "dgt-rendezvous"), "--listen", "127.0.0.1:0"],
                                "rendezvous")
        self.endpoint = rendezvous_endpoint(self.rdzv, self.out_dir)
        args = [str(BIN / "dgt-run"), f"--nnodes={nnodes or nodes}", f"--nproc-per-node={nproc}",
                f"--rdzv-endpoint={self.endpoint}", f"--rdzv-id={run_id}",
                "--rdzv-conf=last_call_timeout=1", f"--stop-timeout={stop_timeout}",
                f"--restart-policy={policy}", f"--max-restarts={max_restarts}"]
        if policy == "rank":
            args.append(f"--recovery-mode={mode}")
        args += list(extra)
        # `command`: another worker command line (default: the C++ example trainer).
        args += ["--no-python"] + (list(command) if command else [
            str(BIN / "allreduce_trainer"), "--steps", str(steps), "--step-ms", str(step_ms),
            "--init-timeout", "30"])
        self.args = args
        self.agents = [self._popen(args[:1] + [f"--node-id=node-{i}"] + args[1:], f"node-{i}")
                       for i in range(nodes)]
        self.killed = set()  # Agents kill_node() ended.

    def add_agent(self):
        """Starts one more agent with the same flags (with --nnodes=N, a spare once N run);
        returns its index."""
        i = len(self.agents)
        self.agents.append(self._popen(self.args[:1] + [f"--node-id=node-{i}"] + self.args[1:],
                                       f"node-{i}"))
        return i

    def kill_node(self, i):
        """SIGKILLs agent `i` and every process below it at once (a lost host); returns the
        time of the kill (time.time_ns())."""
        agent = self.agents[i]
        pids = [agent.pid, *descendants(agent.pid)]
        t = time.time_ns()
        for pid in pids:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        agent.wait(timeout=10)
        self.killed.add(i)
        return t

    def _popen(self, args, name):
        env = dict(os.environ)
        env.pop("DGT_RECOVERY_MODE", None)
        env.update(self.env)
        return popen_logged(args, self.out_dir, name, env)

    def _read(self, name):
        return (self.out_dir / name).read_text(errors="replace")

    def stdout(self, node):
        return self._read(f"node-{node}.out")

    def stderr(self, node):
        return self._read(f"node-{node}.err")

    def events(self):
        """[(rank, kind, fields)] printed by the trainers (through the agents' consoles)."""
        out = []
        for i in range(len(self.agents)):
            for m in RANK_EVENT.finditer(self.stdout(i)):
                fields = dict(re.findall(r'(\w+)=("[^"]*"|\S+)', m.group(3)))
                out.append((int(m.group(1)), m.group(2), fields))
        return out

    def node_of(self, rank):
        for i in range(len(self.agents)):
            if re.search(rf"^\[rank{rank}\]: ", self.stdout(i), re.M):
                return i
        return None

    def wait_events(self, predicate, timeout, what):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ev = self.events()
            if predicate(ev):
                return ev
            for i, a in enumerate(self.agents):
                if i not in self.killed and a.poll() is not None:
                    raise AssertionError(f"agent node-{i} exited ({a.returncode}) while "
                                         f"waiting for {what}: {self.stderr(i)[-3000:]}")
            time.sleep(0.005)
        raise AssertionError(f"timed out after {timeout} s waiting for {what}")

    def joined_pids(self, timeout=90):
        """{rank: pid} of the first processes, once every rank joined."""
        ev = self.wait_events(
            lambda ev: len({r for r, k, _ in ev if k == "joined"}) == self.world, timeout,
            "every rank to join")
        pids = {}
        for r, k, f in ev:
            if k == "joined" and r not in pids:
                pids[r] = int(f["pid"])
        return pids

    def kill_pid(self, pid):
        """SIGKILLs one worker process; returns the time of the kill (time.time_ns())."""
        t = time.time_ns()
        os.kill(pid, signal.SIGKILL)
        return t

    def back_time(self, since_ns, count=None, timeout=120):
        """The latest time at which a rank finished its first collective after `since_ns`, once
        `count` ranks (default: the world) did."""
        count = count or self.world

        def ready(ev):
            return len({r for r, k, f in ev if k == "back" and int(f["t_ns"]) > since_ns}) >= count
        ev = self.wait_events(ready, timeout, "every rank back in a collective")
        return max(int(f["t_ns"]) for r, k, f in ev if k == "back" and int(f["t_ns"]) > since_ns)

    def wait(self, timeout=120):
        """Exit codes of the agents (None for one still running at the deadline)."""
        deadline = time.monotonic() + timeout
        codes = []
        for a in self.agents:
            try:
                codes.append(a.wait(timeout=max(0.1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                codes.append(None)
        return codes

    def close(self):
        for p in self.agents + [self.rdzv]:
            kill_session(p)


def last(ev, kind):
    """{rank: fields of its last `kind` event} from DgtRunJob.events()."""
    out = {}
    for r, k, f in ev:
        if k == kind:
            out[r] = f
    return out


def agents_ok(j, timeout=120):
    """Asserts that every agent of DgtRunJob `j` exits 0 within `timeout` s (the message: the end
    of each agent's log)."""
    codes = j.wait(timeout=timeout)
    assert codes == [0] * j.nodes, "\n".join(f"node-{i}: {j.stderr(i)[-3000:]}"
                                            for i in range(j.nodes))
