"""In-place recovery for PyTorch (DDP) trainers under `dgt-run --restart-policy rank`.

When one rank dies, dgt-run restarts only that process (`--recovery-mode replace`) or none
(`shrink`) and publishes the failure into the job's store (docs/RECOVERY.md, "What the agent
does"). This module is the trainer's side of that protocol, in pure Python over
torch.distributed, for scripts that would otherwise lose every process to a group restart:

    model, opt = Net(), torch.optim.SGD(...)
    with dgt.recovery.Trainer(model, opt) as t:     # joins the job's process group
        t.run(train_step, steps=1000)               # train_step(ddp_model, step)

- survivors learn of a failure from the store (a watcher thread waits for the next generation's
  `open` key, which the agent sets) or from the collective that fails on the dead peer;
- they leave that collective (NCCL: the process group is aborted; Gloo cannot be aborted in
  torch <= 2.13, so a survivor that sees the error destroys its group, which closes its sockets
  and fails the peers blocked on it, and `op_timeout` bounds the rest);
- every member builds a new default process group for the next generation, bootstrapped under
  `dgt/comm/<group>/g<G>/` on the job's store, with all ranks (replace) or without the failed
  ones (shrink, renumbered in original-rank order);
- the members agree on the step to resume from (the furthest a survivor reached) and that survivor
  broadcasts the model's tensors and the optimizer state, so a replacement resumes at the
  survivors' step with their exact parameters.

The keys are the C++ runtime's (dgt.keys), so the agent needs nothing Python-specific. Under
`dgt-run --hang-timeout` the Trainer reports progress after every step and marks its waits on the
peers (DDP's all-reduce, the join, recoveries) as such (dgt/progress_channel.py).

Thread-safety: a Trainer and its ElasticGroup belong to the training thread; the only other
thread is the group's watcher, which sets a flag (and, on NCCL, aborts the group).
"""
from __future__ import annotations

import dataclasses
import gc
import os
import sys
import threading
import time
import traceback
from datetime import timedelta
from typing import Any, Callable, List, Optional

from . import keys
from . import progress_channel as _progress
from . import standby as _standby

# A warm standby (`dgt-run --standby-workers`) waits here, with torch imported, until the agent
# hands it a failed rank's environment; in any other process this returns at once.
if _standby.wait_if_standby():
    # Now a rank: its own progress slot and stack file (hang detection).
    _progress._reset()
    _progress.install_stack_dump()

MODES = ("replace", "shrink", "off")

# Substrings of the errors a collective raises when a peer is gone (torch 1.13 raises plain
# RuntimeErrors; torch 2.x raises DistError subclasses, recognised by type).
_PEER_FAILURE_MARKERS = ("gloo", "nccl", "connection closed", "connection reset", "timed out",
                         "broken pipe", "read error", "write error", "process group")


class RecoveryError(RuntimeError):
    """Recovery could not be completed: the next generation did not form (formation_timeout
    passed, or join_attempts bootstraps failed), this rank was reported failed (shrink), no
    member holds state, or the recovery budget (`RecoveryOptions.max_recoveries`) is spent."""


@dataclasses.dataclass
class RecoveryOptions:
    """How a Trainer recovers. Times are seconds."""

    # "replace" (wait for the restarted rank), "shrink" (continue without it) or "off" (no
    # recovery: one process group per TORCHELASTIC_RESTART_COUNT, errors propagate, as under
    # torchrun). None: the agent's DGT_RECOVERY_MODE, which `--restart-policy rank` exports;
    # "off" when it is unset.
    mode: Optional[str] = None
    # The recovery keys' group; the agent publishes failures into "world" only.
    group: str = "world"
    # torch.distributed backend: "gloo" (tested on CPU) or "nccl" (untested on GPU).
    backend: str = "gloo"
    # Bound of every collective and of each generation's bootstrap (the process group timeout).
    # On Gloo this also bounds how long a survivor blocked on the dead peer may stay blocked
    # when no error reaches it.
    op_timeout: float = 30.0
    # Bound of connecting to the job's store and of each store call.
    store_timeout: float = 30.0
    # Shrink mode: how long to wait for the agent's failure report before falling back to the
    # members that announced themselves (`alive` keys).
    report_timeout: float = 5.0
    # How long one store wait of the watcher lasts before it is re-armed (torch 2.x clients log a
    # warning each time a wait times out, hence long). torch 1.x clients cannot cancel a wait
    # that timed out, so there the watcher polls every 20 ms and this only bounds each poll run.
    watch_period: float = 60.0
    # Bootstraps a join or a recovery tries before it gives up: a generation whose members all
    # announced themselves but whose process group did not form (each bounded by op_timeout).
    join_attempts: int = 5
    # Overall deadline of forming one generation (join or recovery): how long the members wait
    # for each other (a replacement's start and `import torch` included) and for the generations
    # that further failures open meanwhile. RecoveryError when it passes.
    formation_timeout: float = 600.0
    # Recoveries a Trainer performs before it raises RecoveryError (bounds a failure loop).
    max_recoveries: int = 100
    # When a generation forms after a failure and no member holds the training state (every
    # process that held it failed: nobody to copy it from): "restart" trains on from step 0 with
    # a warning on stderr (the progress is lost); "fail" raises RecoveryError instead, so that
    # the rank fails and a checkpoint-based restart (--restart-policy group, the job's own
    # resume) takes over.
    on_state_lost: str = "restart"


@dataclasses.dataclass
class JobEnv:
    """The part of dgt-run's worker environment (docs/ENVIRONMENT.md) that recovery needs."""

    rank: int
    world_size: int
    master_addr: str
    master_port: int
    restart_count: int = 0
    recovery_mode: Optional[str] = None

    @classmethod
    def from_environ(cls, environ=None) -> "JobEnv":
        """Reads RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT and
        DGT_RECOVERY_MODE. Raises ValueError naming a missing or malformed variable."""
        environ = os.environ if environ is None else environ

        def need(name, conv=str):
            if name not in environ:
                raise ValueError(f"{name} is not set (run the trainer under dgt-run)")
            try:
                return conv(environ[name])
            except ValueError:
                raise ValueError(f"{name} must be an integer, got {environ[name]!r}") from None

        env = cls(rank=need("RANK", int), world_size=need("WORLD_SIZE", int),
                  master_addr=need("MASTER_ADDR"), master_port=need("MASTER_PORT", int),
                  restart_count=int(environ.get("TORCHELASTIC_RESTART_COUNT", "0") or 0),
                  recovery_mode=environ.get("DGT_RECOVERY_MODE") or None)
        if not 0 <= env.rank < env.world_size:
            raise ValueError(f"RANK must be in [0, WORLD_SIZE={env.world_size}), got {env.rank}")
        return env


def _torch_major() -> int:
    import torch
    return int(torch.__version__.split(".")[0])


def connect_job_store(env: JobEnv, timeout_s: float):
    """A torch TCPStore client of the job's store (the agent's, at MASTER_ADDR:MASTER_PORT)."""
    import torch.distributed as dist
    return dist.TCPStore(host_name=env.master_addr, port=env.master_port, is_master=False,
                         timeout=timedelta(seconds=timeout_s))


# ----------------------------------------------------------------------------------------------
# Backends: what differs between Gloo and NCCL. `dist` is torch.distributed unless a test passes
# a fake.


class GlooBackend:
    """Gloo (CPU). torch 2.13's ProcessGroupGloo.abort() and shutdown() return without waking a
    collective blocked on a dead peer (measured), so nothing is aborted from the watcher: the
    survivors that see the peer's sockets close raise, destroy their group (closing their own
    sockets, which fails the ranks blocked on them) and the process group timeout bounds the
    rest."""

    name = "gloo"
    abort_on_notice = False

    def __init__(self, dist=None):
        if dist is None:
            import torch.distributed as dist
        self.dist = dist

    def init(self, store, rank: int, size: int, timeout_s: float, device=None):
        self.dist.init_process_group(self.name, store=store, rank=rank, world_size=size,
                                     timeout=timedelta(seconds=timeout_s))

    def abort(self):
        pass

    def destroy(self):
        if self.dist.is_initialized():
            self.dist.destroy_process_group()

    def can_shrink(self) -> bool:
        return False

    def shrink(self, exclude: List[int]) -> bool:
        return False


class NcclBackend(GlooBackend):
    """NCCL (GPU). UNTESTED ON A GPU: exercised only against a fake torch.distributed in
    tests/python. The watcher aborts the default group as soon as the next generation opens
    (ProcessGroupNCCL's abort fails the collectives blocked in NCCL on every survivor, even those
    that never talked to the dead rank). In shrink mode, where torch has
    torch.distributed.shrink_group (ncclCommShrink, NCCL >= 2.27), the group is not aborted but
    shrunk with SHRINK_ABORT (which ends its pending operations), falling back to a fresh
    bootstrap when that fails."""

    name = "nccl"
    abort_on_notice = True

    def __init__(self, dist=None, shrink_mode: bool = False):
        super().__init__(dist)
        self._shrink_mode = shrink_mode
        # With in-place shrink the communicator must survive the notice.
        self.abort_on_notice = not (shrink_mode and self.can_shrink())

    def init(self, store, rank: int, size: int, timeout_s: float, device=None):
        kwargs = {} if device is None else {"device_id": device}
        self.dist.init_process_group(self.name, store=store, rank=rank, world_size=size,
                                     timeout=timedelta(seconds=timeout_s), **kwargs)

    def abort(self):
        c10d = getattr(self.dist, "distributed_c10d", None)
        fn = getattr(c10d, "_abort_process_group", None) if c10d is not None else None
        if fn is not None and self.dist.is_initialized():
            fn()

    def can_shrink(self) -> bool:
        return hasattr(self.dist, "shrink_group")

    def shrink(self, exclude: List[int]) -> bool:
        """Shrinks the default group by `exclude` (its current ranks); True when it worked (the
        shrunk group is then the default one)."""
        if not self.can_shrink() or not self.dist.is_initialized():
            return False
        flags = getattr(getattr(self.dist, "distributed_c10d", None), "SHRINK_ABORT", 0x01)
        try:
            self.dist.shrink_group(list(exclude), shrink_flags=flags)
            return True
        except (RuntimeError, TypeError, ValueError) as e:
            print(f"dgt.recovery: in-place NCCL shrink failed ({e}); bootstrapping instead",
                  file=sys.stderr)
            return False


def make_backend(name: str, mode: str, dist=None):
    if name == "gloo":
        return GlooBackend(dist)
    if name == "nccl":
        return NcclBackend(dist, shrink_mode=(mode == "shrink"))
    raise ValueError(f"backend must be 'gloo' or 'nccl', got {name!r}")


# ----------------------------------------------------------------------------------------------


class ElasticGroup:
    """The default torch.distributed process group of one generation of the job, rebuilt in place
    after a failure (the Python counterpart of dgt::worker::ElasticGroup, same store keys).

    `connect` returns a new client of the job's store (called once for the calls, and once per
    generation by its watcher thread). Every wait is bounded by the options' timeouts."""

    def __init__(self, env: JobEnv, options: RecoveryOptions, connect: Callable[[], Any],
                 backend=None):
        self.env = env
        self.options = options
        self.mode = options.mode or env.recovery_mode or "off"
        if self.mode not in MODES:
            raise ValueError(f"recovery mode must be one of {', '.join(MODES)}, got "
                             f"{self.mode!r} (RecoveryOptions.mode or DGT_RECOVERY_MODE)")
        self.backend = backend or make_backend(options.backend, self.mode)
        self._connect = connect
        self.store = connect()
        self._poll = _torch_major() < 2  # torch 1.x clients cannot cancel a timed-out WAIT.
        self.device = None  # torch device of the NCCL group (device_id), None on Gloo.
        self.generation = -1
        self.left_ns = 0  # When the last build destroyed the previous group (time.time_ns()).
        self.members: List[int] = []
        self.is_replacement = False
        self._stop = threading.Event()  # The current watcher's.
        self._pending = threading.Event()
        self.noticed_ns = 0

    # -- queries --------------------------------------------------------------------------------
    @property
    def rank(self) -> int:
        """This process's rank in the current process group."""
        return self.members.index(self.env.rank)

    @property
    def size(self) -> int:
        return len(self.members)

    @property
    def pending(self) -> bool:
        """True once the watcher saw the next generation open (a failure was published)."""
        return self._pending.is_set()

    # -- protocol -------------------------------------------------------------------------------
    def join(self) -> int:
        """Joins the job: generation 0 on a fresh start; a replacement (its RANK joined before,
        per the `member/<rank>` key) opens the generation after its predecessor's and joins it.
        Mode "off" builds one group per TORCHELASTIC_RESTART_COUNT instead. Returns the
        generation. Raises RecoveryError when no generation forms in `join_attempts`."""
        everyone = list(range(self.env.world_size))
        if self.mode == "off":
            prefix = f"{keys.COMM_PREFIX}/{self.options.group}/attempt{self.env.restart_count}"
            self._init(prefix, everyone)
            self.generation, self.members = 0, everyone
            return 0
        group, rank = self.options.group, self.env.rank
        if keys.exists(self.store, [keys.member_key(group, rank)]):
            previous = keys.read_int(self.store, keys.member_key(group, rank))
            self.is_replacement = True
            target = keys.open_next_generation(
                self.store, group, previous,
                f"rank {rank} replaced (restart count {self.env.restart_count})")
        else:
            target = keys.read_int(self.store, keys.generation_key(group))
        return self._build_with_retries(target, everyone)

    def recover(self) -> int:
        """Leaves the current generation and builds the next one: every rank (replace) or the
        members minus the ranks reported failed (shrink). Returns the new generation."""
        if self.mode == "off":
            raise RecoveryError("recovery is off (no --restart-policy rank / DGT_RECOVERY_MODE)")
        start, group, rank = self.generation, self.options.group, self.env.rank
        if self.backend.abort_on_notice:
            self.backend.abort()
        target = keys.open_next_generation(self.store, group, start,
                                           f"rank {rank} left generation {start}")
        self.store.set(keys.alive_key(group, target, rank), "1")
        if self.mode == "shrink":
            members = self._shrink_members(target)
            if rank in members and self.backend.can_shrink():
                exclude = [i for i, m in enumerate(self.members) if m not in members]
                self._stop_watcher()
                if self.backend.shrink(exclude):
                    self._joined(target, members)
                    return target
        else:
            members = list(range(self.env.world_size))
        return self._build_with_retries(target, members)

    def close(self):
        """Stops the watcher and destroys the process group (idempotent)."""
        self._stop_watcher()
        self.backend.destroy()

    # -- internals ------------------------------------------------------------------------------
    def _shrink_members(self, target: int, base: Optional[List[int]] = None) -> List[int]:
        """`base` (default: the current members) minus the ranks reported failed in `target`."""
        group = self.options.group
        base = self.members if base is None else base
        key = keys.failed_key(group, target)
        if self._wait(self.store, key, self.options.report_timeout):
            failed = keys.parse_failed(self.store.get(key))
        else:  # No report: the members are those that announced themselves by now.
            failed = {m for m in base
                      if not keys.exists(self.store, [keys.alive_key(group, target, m)])}
            print(f"dgt.recovery: rank {self.env.rank}: no failure report for generation "
                  f"{target} in {self.options.report_timeout} s; shrinking by who joined",
                  file=sys.stderr)
        return [m for m in base if m not in failed]

    def _build_with_retries(self, target: int, members: List[int]) -> int:
        """Forms a generation with `members` and returns it. Every rank converges on the same
        one: the generation to form is the store's generation counter whenever it is ahead of
        `target` (the agent moves it when a rank dies, also during formation; a rank that moves
        it itself does so by COMPARE_SET from the generation that failed, so racing ranks land
        on the same value). Each rank records the generation in its `member` key (the agent
        opens the next one from it when the rank dies) and announces itself (`alive`), then
        waits until every member announced itself in that generation or the counter moves on;
        only then does it bootstrap the process group (op_timeout). Bounded by
        formation_timeout overall and by join_attempts failed bootstraps."""
        group, rank = self.options.group, self.env.rank
        deadline = time.monotonic() + self.options.formation_timeout
        failures, last = 0, None
        # Leave the old group first: destroying it closes its sockets, which fails the members
        # still blocked in a collective on this rank, so they come to the new generation at
        # once instead of at their op_timeout.
        self._stop_watcher()
        self.backend.destroy()
        self.left_ns = time.time_ns()
        while True:
            current = keys.read_int(self.store, keys.generation_key(group))
            if current > target:
                if self.mode == "shrink":
                    members = self._shrink_members(current, members)
                target = current
            if self.mode == "shrink":
                members = [m for m in members if m not in self._failed(target)]
            if rank not in members:
                raise RecoveryError(f"rank {rank} is not a member of generation {target} "
                                    f"(reported failed)")
            self.store.set(keys.member_key(group, rank), str(target))
            self.store.set(keys.alive_key(group, target, rank), "1")
            if not self._await_members(target, members, deadline):
                continue  # The counter moved on (or a member was reported failed): follow it.
            try:
                self._build(target, members)
                return target
            except RecoveryError:
                raise
            except Exception as e:  # The bootstrap timed out or a member vanished meanwhile.
                failures, last = failures + 1, e
                self._stop_watcher()
                self.backend.destroy()  # Whatever the failed bootstrap left.
                print(f"dgt.recovery: rank {rank}: generation {target} did not form "
                      f"({str(e).splitlines()[0][:200]}); trying the next", file=sys.stderr)
                if failures >= max(1, self.options.join_attempts):
                    raise RecoveryError(f"rank {rank}: no generation formed in {failures} "
                                        f"bootstraps (last: {last})") from None
                target = keys.open_next_generation(self.store, group, target,
                                                   f"rank {rank} retried")

    def _failed(self, target: int) -> set:
        key = keys.failed_key(self.options.group, target)
        return keys.parse_failed(self.store.get(key)) if keys.exists(self.store, [key]) else set()

    def _await_members(self, target: int, members: List[int], deadline: float) -> bool:
        """Waits until every member announced itself in `target` (True), or the generation
        counter moved beyond `target` or (shrink) a member was reported failed (False). Raises
        RecoveryError naming the missing ranks when `deadline` (time.monotonic()) passes."""
        group = self.options.group
        alive = [keys.alive_key(group, target, m) for m in members]
        logged = False
        started = time.monotonic()
        while True:
            if keys.exists(self.store, alive):
                return True
            if keys.read_int(self.store, keys.generation_key(group)) > target:
                return False
            if self.mode == "shrink" and self._failed(target) & set(members):
                return False
            now = time.monotonic()
            missing = [m for m in members
                       if not keys.exists(self.store, [keys.alive_key(group, target, m)])]
            if now >= deadline:
                raise RecoveryError(
                    f"rank {self.env.rank}: generation {target} did not form within "
                    f"formation_timeout={self.options.formation_timeout} s: ranks {missing} "
                    f"never joined it")
            if not logged and now - started >= min(self.options.op_timeout, 10.0):
                logged = True
                print(f"dgt.recovery: rank {self.env.rank}: generation {target}: waiting for "
                      f"ranks {missing} (at most {deadline - now:.0f} s more)", file=sys.stderr)
            time.sleep(min(0.05, max(0.0, deadline - now)))

    def failure_published(self, timeout_s: float) -> bool:
        """True when a failure of the current generation is in the store (the watcher saw the
        next generation open, or the generation counter is beyond the current generation),
        waiting up to `timeout_s` seconds for it."""
        key = keys.generation_key(self.options.group)
        deadline = time.monotonic() + timeout_s
        while True:
            if self.pending or keys.read_int(self.store, key) > self.generation:
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(0.02)

    def _build(self, target: int, members: List[int]):
        self._stop_watcher()
        if self.env.rank not in members:
            raise RecoveryError(f"rank {self.env.rank} is not a member of generation {target} "
                                f"(reported failed)")
        self.store.set(keys.member_key(self.options.group, self.env.rank), str(target))
        # Watch before bootstrapping: a member that dies while this generation forms opens the
        # next one (the bootstrap itself then ends at op_timeout).
        self._start_watcher(target + 1)
        self._init(keys.comm_prefix(self.options.group, target), members)
        self.generation, self.members = target, list(members)

    def _joined(self, target: int, members: List[int]):
        self.store.set(keys.member_key(self.options.group, self.env.rank), str(target))
        self.generation, self.members = target, list(members)
        self._start_watcher(target + 1)

    def _init(self, prefix: str, members: List[int]):
        import torch.distributed as dist
        self.backend.init(dist.PrefixStore(prefix, self.store), members.index(self.env.rank),
                          len(members), self.options.op_timeout, device=self.device)

    def _wait(self, store, key: str, timeout_s: float) -> bool:
        if not self._poll:
            return keys.wait_key(store, key, timeout_s)
        deadline = time.monotonic() + timeout_s
        while True:
            if keys.exists(store, [key]):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(min(0.02, timeout_s))

    def _start_watcher(self, nxt: int):
        """Watches for generation `nxt` to open, on its own store connection and thread. A
        stopped watcher is not joined: it ends when its current wait does (watch_period), and its
        stop event keeps it from touching the newer generation's flag meanwhile."""
        self._stop_watcher()
        stop, pending = threading.Event(), threading.Event()  # This watcher's own.
        self._stop, self._pending = stop, pending
        self.noticed_ns = 0
        key = keys.open_key(self.options.group, nxt)

        def watch():
            store = None
            while not stop.is_set():
                try:
                    if store is None:
                        store = self._connect()
                    seen = self._wait(store, key, self.options.watch_period)
                except Exception as e:  # The store is unreachable: say so, retry later.
                    if stop.is_set():
                        return
                    print(f"dgt.recovery: rank {self.env.rank}: watcher: {e}", file=sys.stderr)
                    store = None
                    stop.wait(self.options.watch_period)
                    continue
                if seen and not stop.is_set():
                    self.noticed_ns = time.time_ns()
                    pending.set()
                    if self.backend.abort_on_notice:
                        self.backend.abort()
                    return

        threading.Thread(target=watch, name=f"dgt-recovery-watch-g{nxt}", daemon=True).start()

    def _stop_watcher(self):
        self._stop.set()


# ----------------------------------------------------------------------------------------------


@dataclasses.dataclass
class RecoveryReport:
    """One recovery, as seen by this rank. Times are time.time_ns() (CLOCK_REALTIME)."""

    generation: int
    members: List[int]
    resume_step: int         # the step every member continues from
    source: Optional[int]    # the RANK whose state was broadcast (None: nobody needed it)
    replacement: bool        # this process is a replacement that received the state
    noticed_ns: int          # when this rank learned of the failure (watcher or error)
    left_ns: int             # the failed group is destroyed; the new one's bootstrap starts
    built_ns: int            # the new process group is up
    synced_ns: int           # the state is synced and the DDP wrapper rebuilt


class Trainer:
    """Runs a DDP training loop that survives the loss of ranks in place.

    `model` is the plain module (the Trainer wraps it in DistributedDataParallel over the current
    generation's group: use `trainer.model` in the step); `optimizer` its optimizer;
    `extra_state` an optional object with state_dict()/load_state_dict() (a data sampler, an LR
    scheduler, ...) that is handed to replacements with the rest. `ddp_kwargs` go to
    DistributedDataParallel (e.g. device_ids). `on_recovered(report)` is called after each
    recovery. `env`, `connect` and `backend` are seams for tests.

    Contract for the step function `train_step(model, step)`: its collectives (DDP's backward)
    come before it changes state (optimizer.step()), so a step that raises can be run again; it
    takes its data from `step` (and the rank), not from an iterator that a failed step advanced.
    """

    def __init__(self, model, optimizer, *, options: Optional[RecoveryOptions] = None,
                 extra_state=None, ddp_kwargs: Optional[dict] = None, device=None,
                 on_recovered: Optional[Callable[[RecoveryReport], None]] = None,
                 env: Optional[JobEnv] = None, connect=None, backend=None):
        self.module = model
        self.optimizer = optimizer
        self.extra_state = extra_state
        self.options = options or RecoveryOptions()
        if self.options.on_state_lost not in ("restart", "fail"):
            raise ValueError(f"RecoveryOptions.on_state_lost must be 'restart' or 'fail', got "
                             f"{self.options.on_state_lost!r}")
        self.ddp_kwargs = dict(ddp_kwargs or {})
        self.device = device
        self.on_recovered = on_recovered
        self.env = env or JobEnv.from_environ()
        self._connect = connect or (lambda: connect_job_store(self.env, self.options.store_timeout))
        self._backend = backend
        self.group: Optional[ElasticGroup] = None
        self.step = 0
        self.recoveries = 0
        self.last_recovery: Optional[RecoveryReport] = None
        self._ddp = None
        self._has_state = False

    # -- lifecycle ------------------------------------------------------------------------------
    def __enter__(self) -> "Trainer":
        self.start()
        return self

    def __exit__(self, *exc):
        self.close()
        return False

    def start(self):
        """Joins the job's process group (and, when joining after a failure, takes the state)."""
        self.group = ElasticGroup(self.env, self.options, self._connect, self._backend)
        self.group.device = self.device
        t0 = time.time_ns()
        with _progress.waiting():  # On the other ranks: not silence (hang detection).
            self.group.join()
            self._after_build(noticed_ns=t0)

    def close(self):
        self._ddp = None
        if self.group is not None:
            self.group.close()

    @property
    def model(self):
        """The DistributedDataParallel wrapper of the current generation (changes on recovery:
        fetch it again after a recovery rather than keeping it)."""
        return self._ddp

    @property
    def rank(self) -> int:
        return self.group.rank

    @property
    def world_size(self) -> int:
        return self.group.size

    @property
    def members(self) -> List[int]:
        """The RANKs (as dgt-run numbered them) in the current group, in group-rank order."""
        return list(self.group.members)

    # -- the loop -------------------------------------------------------------------------------
    def run(self, train_step: Callable[[Any, int], Any], steps: int) -> int:
        """Calls train_step(model, step) for step = self.step .. steps-1, recovering from peer
        failures (the failed step runs again, from the survivors' state), then agrees with the
        other members that everyone finished. Returns the number of steps done (`steps`).
        Errors that are not a peer failure propagate; RecoveryError when recovery fails."""
        while True:
            while self.step < steps:
                if self.group.pending:
                    self.recover()
                    continue
                failure = self._call(train_step, self._ddp, self.step)
                if failure is not None:
                    self.recover(cause=failure)
                    continue
                self.step += 1
                self._has_state = True
                _progress.progress()  # dgt-run's hang detection: one store into shared memory.
            # A member that failed in the last step must not be left alone.
            with _progress.waiting():
                failure = self._call(self._agree_finished, in_collective=True)
            if failure is None:
                return self.step
            self.recover(cause=failure)

    def _call(self, fn, *args, in_collective: bool = False) -> Optional[BaseException]:
        """fn(*args); returns the peer failure it raised (its frames cleared), None when it
        returned, and raises what is not a peer failure. `in_collective`: fn is one of the
        Trainer's own collectives."""
        try:
            fn(*args)
            return None
        except Exception as e:
            if not self._classify(e, in_collective):
                raise
            # The traceback's frames hold the DDP wrapper, which holds the process group: while
            # they live, destroying the group cannot close its sockets, and the peers blocked on
            # this rank would wait for their op_timeout instead of failing at once.
            traceback.clear_frames(e.__traceback__)
            return e.with_traceback(None)

    def recover(self, cause: Optional[BaseException] = None):
        """Builds the next generation and syncs the state; callers of a custom loop call it when
        a collective raised a peer failure (see is_peer_failure)."""
        if self.recoveries >= self.options.max_recoveries:
            raise RecoveryError(f"rank {self.env.rank}: {self.recoveries} recoveries done, "
                                f"max_recoveries={self.options.max_recoveries}") from cause
        noticed = self.group.noticed_ns or time.time_ns()
        self._ddp = None  # Drop the old group's last user before it is destroyed...
        gc.collect()      # ...including the reference cycles that DDP's hooks make.
        self.optimizer.zero_grad(set_to_none=True)
        with _progress.waiting():  # Waiting for the next generation is not silence.
            self.group.recover()
            self.recoveries += 1
            self._after_build(noticed_ns=noticed)

    def is_peer_failure(self, e: BaseException) -> bool:
        """Whether `e` is a peer failure (see _peer_failure_reason); logs the verdict."""
        return self._classify(e, in_collective=False)

    # -- internals ------------------------------------------------------------------------------
    def _classify(self, e: BaseException, in_collective: bool) -> bool:
        reason = self._peer_failure_reason(e, in_collective)
        what = f"{type(e).__name__}: {str(e).splitlines()[0][:300] if str(e) else ''}"
        rank = self.env.rank if getattr(self, "env", None) is not None else "?"
        if reason is None:
            print(f"dgt.recovery: rank {rank}: caught {what}; not a peer failure, raising it",
                  file=sys.stderr)
            return False
        print(f"dgt.recovery: rank {rank}: caught {what}; a peer failure ({reason}), recovering",
              file=sys.stderr)
        return True

    def _peer_failure_reason(self, e: BaseException, in_collective: bool) -> Optional[str]:
        """Why `e` is a peer failure, or None when it is not (docs/RECOVERY.md: only failures of
        the collective are): a torch.distributed backend or network error (DistBackendError,
        DistNetworkError, torch >= 2.1); a RuntimeError raised inside one of the Trainer's own
        collectives; or a RuntimeError that reads like a collective's (torch 1.13 raises plain
        RuntimeErrors) while a failure of this generation is published in the store, waiting up
        to report_timeout seconds for it. Anything else, whatever its message, is the user's."""
        if self.group is None or self.group.mode == "off" or isinstance(e, RecoveryError):
            return None
        import torch.distributed as dist
        for name in ("DistBackendError", "DistNetworkError"):
            cls = getattr(dist, name, None)
            if cls is not None and isinstance(e, cls):
                return f"torch.distributed.{name}"
        if not isinstance(e, RuntimeError):
            return None
        if in_collective:
            return "raised by a collective of the Trainer"
        text = str(e).lower()
        if not any(m in text for m in _PEER_FAILURE_MARKERS):
            return None
        if self.group.failure_published(self.options.report_timeout):
            return f"generation {self.group.generation} has a failure published in the store"
        return None

    def _agree_finished(self):
        import torch
        import torch.distributed as dist
        t = torch.ones(1, device=self.device)
        dist.all_reduce(t)

    def _after_build(self, noticed_ns: int):
        import torch.distributed as dist
        built = time.time_ns()
        gen = self.group.generation
        source, resume = None, self.step
        if gen > 0:  # Joining after a failure: someone may lack the state.
            source, resume = self._sync_state()
        self.step = resume
        self._has_state = True
        self._ddp = self._wrap()
        dist_ok = dist.is_initialized()
        synced = time.time_ns()
        if gen > 0 and dist_ok:
            self.last_recovery = RecoveryReport(
                generation=gen, members=list(self.group.members), resume_step=resume,
                source=source, replacement=self.group.is_replacement and self.recoveries == 0,
                noticed_ns=noticed_ns, left_ns=self.group.left_ns, built_ns=built,
                synced_ns=synced)
            if self.on_recovered is not None:
                self.on_recovered(self.last_recovery)

    def _wrap(self):
        from torch.nn.parallel import DistributedDataParallel as DDP
        kwargs = dict(self.ddp_kwargs)
        # Everything alive now (torch's modules, the model, ...) goes to the permanent generation,
        # so that recover()'s gc.collect() traverses only what was made since: the wrapper and
        # its cycles. A full collection of a process with torch 2.13 and DDP imported (~300k
        # objects) took 0.56 s on the loaded build machine, most of a survivor's 1.07 s from
        # the notice to leaving the failed group. (Cyclic garbage among the frozen objects is
        # never collected; objects made later are, as usual.)
        gc.freeze()
        hook = _progress.enabled()
        if hook:
            # A communication hook makes DDP copy each gradient into its bucket and divide it
            # there in a second pass (without one, the division is fused into the copy): 2-5 ms
            # a step for the 13 MB of gradients of bench/recovery/torch_trainer on this CPU.
            # Gradients that are views of the buckets need neither copy (unless ddp_kwargs says
            # otherwise).
            kwargs.setdefault("gradient_as_bucket_view", True)
        ddp = DDP(self.module, **kwargs)
        if hook:
            # Hang detection: time in DDP's all-reduce is waiting on the peers, not silence, so a
            # rank blocked on a hung peer is not taken for hung itself.
            ddp.register_comm_hook(None, _waiting_allreduce_hook)
        return ddp

    def _sync_state(self):
        """Agrees on the resume step (the furthest step a member holds) and broadcasts the state
        from the first member at that step. Returns (source RANK or None, resume step)."""
        import torch
        import torch.distributed as dist
        size = self.group.size
        mine = torch.tensor([self.step if self._has_state else -1], dtype=torch.int64,
                            device=self.device)
        gathered = [torch.zeros_like(mine) for _ in range(size)]
        dist.all_gather(gathered, mine)
        steps = [int(t.item()) for t in gathered]
        holders = [i for i, s in enumerate(steps) if s >= 0]
        if not holders:
            # Everyone is new: every process that held the state failed (here only after a
            # failure). DDP's own init sync makes the members agree, on step 0.
            what = (f"dgt.recovery: rank {self.env.rank}: generation {self.group.generation}: no "
                    f"member holds the training state (every process that held it failed)")
            if self.options.on_state_lost == "fail":
                raise RecoveryError(f"{what}; not restarting from step 0 "
                                    f"(RecoveryOptions.on_state_lost='fail')")
            print(f"{what}; restarting from step 0: the progress made so far is lost "
                  f"(RecoveryOptions(on_state_lost='fail') raises instead, for a "
                  f"checkpoint-based restart)", file=sys.stderr, flush=True)
            return None, 0
        # The member furthest ahead (the first of them): a survivor that completed the step in
        # flight when the peer died received the full all-reduce, so its state is the run's.
        src = max(holders, key=lambda i: (steps[i], -i))
        if len(holders) == size and len(set(steps)) == 1:
            return None, steps[0]  # Survivors in lockstep hold equal state (DDP's invariant).
        with torch.no_grad():
            for t in self.module.state_dict().values():
                if isinstance(t, torch.Tensor):
                    dist.broadcast(t, src)
        objs = [self.optimizer.state_dict(),
                self.extra_state.state_dict() if self.extra_state is not None else None]
        if self.group.rank != src:
            objs = [None, None]
        dist.broadcast_object_list(objs, src, device=self.device)
        if self.group.rank != src:
            self.optimizer.load_state_dict(objs[0])
            if self.extra_state is not None:
                self.extra_state.load_state_dict(objs[1])
        return self.group.members[src], steps[src]


def _waiting_allreduce_hook(state, bucket):
    """DDP's own all-reduce (torch's default_hooks.allreduce_hook: the bucket divided by the
    world size, then summed), marked as a wait on the peers until it completes or fails."""
    from torch.distributed.algorithms.ddp_comm_hooks import default_hooks
    _progress.wait_begin()
    try:
        fut = default_hooks.allreduce_hook(state, bucket)
    except BaseException:
        _progress.wait_end()
        raise

    def done(f):
        try:
            return f.value()
        finally:
            _progress.wait_end()
    return fut.then(done)


def run(train_step: Callable[[Any, int], Any], model, optimizer, steps: int, **kwargs) -> Trainer:
    """One call: `Trainer(model, optimizer, **kwargs)`, run(train_step, steps), closed. Returns
    the (closed) Trainer, whose `step`, `recoveries` and `last_recovery` say what happened."""
    with Trainer(model, optimizer, **kwargs) as t:
        t.run(train_step, steps)
    return t
