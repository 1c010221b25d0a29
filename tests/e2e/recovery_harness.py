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
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.popen = subprocess.Popen(args, stdout=self._out, stderr=self._err,
                                      stdin=subprocess.DEVNULL, env=env,
                                      start_new_session=True)
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
        if self.popen.poll() is None:
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            self.popen.wait(timeout=10)
        self._out.close()
        self._err.close()


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


def full_total(world, steps):
    """Sum over steps and ranks of (rank + 1) * 1000 + step."""
    return sum((r + 1) * 1000 + s for s in range(steps) for r in range(world))
