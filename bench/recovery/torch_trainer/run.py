#!/usr/bin/env python3
"""Recovery anchors on one real PyTorch DDP trainer (bench/recovery/torch_trainer/trainer.py):
the time from SIGKILL of one rank to every rank back at the step reached before the kill, with a
timeline per milestone, and each anchor's cost per healthy step against a plain DDP loop.

Rows (2 ranks on Gloo/CPU each, torch 2.13 from the peers venv):
  plain        dgt-run --standalone, --mode ddp without checkpoints, no fault: the baseline step
  torchrun     python -m torch.distributed.run --standalone --max-restarts=1 (group restart,
               checkpoint every --ckpt-every steps, reloaded at start), with
               TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: with torch 2.13's default (the rendezvous
               store shared with the workers, one server for every round, no per-attempt prefix)
               the restarted ranks may read the previous attempt's Gloo addresses, and init then
               fails ("Gloo connectFullMesh failed ... Connection refused"; 2 of 5 runs here;
               --torchrun-shared-store keeps the default)
  dgt-group    dgt-run --standalone --max-restarts=1 (group restart, same checkpoint)
  torchft      torchft_lighthouse + one dgt-run --standalone --nproc-per-node=1 per replica group
               (2 groups), per-step quorum; the killed group is restarted by its dgt-run and heals
               from the live peer
  nvrx-inproc  nvidia-resiliency-ext in-process restart (inprocess.Wrapper), 2 bare processes: the
               survivor re-enters the wrapped function with a new process group; nothing starts
               the killed rank again, so "every rank" is the survivors
  nvrx-ft      ft_launcher --standalone --max-restarts=1 (NVRx's torchrun-based launcher)
  dgt-inplace  dgt-run --standalone --restart-policy=rank --fork-server=off
               (dgt.recovery.Trainer, python/dgt): the replacement is a fresh process; skipped
               with the reason when `import dgt.recovery` fails
  dgt-fork     dgt-inplace with --fork-server=on (dgt-run's default): the replacement is forked
               by the node's fork server (python -m dgt.forkserver, torch imported); the kill
               waits for the agent's "fork server pid N is ready"
  dgt-hang     dgt-inplace with --hang-timeout=60: progress reports every step and the DDP
               communication hook that marks all-reduces as waits (docs/RECOVERY.md "Hang
               detection"); the kill is a crash, as in dgt-inplace
  dgt-standby  dgt-inplace with --standby-workers=1: the replacement is a warm standby that
               waited in `import dgt.recovery` with torch imported (its "started" is when it took
               the rank); the kill waits for the agent's "standby pid N is ready"
Lost-node rows: 2 nodes x 1 rank and a third agent that joins once they train (a hot spare);
the kill is of node b, rank 1's whole node (its agent and worker, every process below it):
  dgt-spare       dgt-rendezvous + dgt-run --nnodes=2 --restart-policy=rank per node: the spare
                  warms up its fork server while it waits (the kill waits for its "fork server
                  pid N is ready"), takes node rank 1 in an in-place round and forks rank 1's
                  replacement; rank 0's process goes on
  torchrun-spare  torchrun 2.13, --nnodes=2 --rdzv-backend=c10d (node a hosts the store,
                  is_host=1) --max-restarts=1, TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: the spare
                  waits beyond --nnodes (torch's redundancy list); rank 0 fails on the lost peer,
                  node a restarts its worker and the spare joins the next round (group restart,
                  checkpoint reload); the kill waits 5 s after the spare started
  nvrx-spare      torchrun-spare with NVRx's ft_launcher (0.4.1: the newest release the package
                  index reachable here offers; 0.5-0.7 have no distribution there)
Milestones, ms after the SIGKILL (latest rank unless named "first"): a replacement process
started (first), every replacement started, torch imported, process group ready, state loaded
(checkpoint / heal / in-place sync), back at the pre-failure step. The cost per healthy step is
the mean step interval before the kill (checkpoints included) against the plain rows' mean.
Memory (dgt rows), PSS from /proc/PID/smaps_rollup in MB: the idle helper before the kill (the
fork server, or the standby), the replacement once every rank is back, and both together (what
the node pays beyond its ranks: a fork server's child shares its pages copy-on-write).

Caveat for a loaded machine: the kernel's autogroup scheduling (sched_autogroup_enabled=1 on
Debian) shares CPU fairly between sessions. torchrun and ft_launcher start each worker in its
own session (setsid), dgt-run keeps its workers in its own session (own process groups only),
so when other sessions load the machine, dgt-run's workers get one session's share between
them: two concurrent `import torch` took ~7-8 s under dgt-run (and as two bare processes of one
session) against ~4 s under torchrun here, with the same CPU time (1.1 s each). On an idle or
dedicated machine there is no difference.
The default --kill-step (45) lies between two checkpoints (every 10), so a group restart redoes
5 steps.

    source scripts/python-env.sh
    bench/recovery/torch_trainer/run.py [--rows torchrun,dgt-group,...] [--kill-step 45]
Each row is bounded (--row-timeout, 90 s); the whole run is about 3-4 min here.

--overhead measures each row's cost per healthy step instead, which the ~45 steps before a kill
cannot show (two plain rows of one run differed by 5-18 % here): no kill, no checkpoint (no
--ckpt-dir: checkpoint writes are outside the timed window; their cost is the kill table's),
rows plain, dgt-inplace, dgt-standby, dgt-hang, torchrun, torchft, nvrx-inproc by default
(start_row's launches; --rows picks others, plain is always added). --rounds (3) rounds of every row, each
round in a rotated order, so each row runs next to the same round's plain. Each run skips
--warmup (20) steps (and, for dgt-standby, every step before the agent logged its standby ready:
the standby's `import torch` competes with the ranks meanwhile), takes --steps (300) step
intervals per rank, then is stopped (Launch.stop: every descendant). Two tables, wall time per
step and CPU time per step (each step EVENT's cpu_ns, time.process_time of the rank's process):
per row the median per round, their median, and the per-round ratio against that round's plain
as median [min, max]; the verdict is "< 1 %" only when [min, max] lies within (-1 %, 1 %) (a
row that reads cheaper than plain shows noise, not a gain), "measurable: X %" when the min is
above 1 %, else "not shown at this noise". The load average before and after is printed.

    nice -n 19 bench/recovery/torch_trainer/run.py --overhead [--steps 300] [--rounds 3]
"""
import argparse
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
HERE = Path(__file__).resolve().parent
TRAINER = HERE / "trainer.py"
PY2 = os.environ.get("DGT_PYTHON2", "/opt/dgt/peers-venv/bin/python")
BIN = Path(os.environ.get("DGT_BIN_DIR", REPO / "build" / "bin"))
EVENT = re.compile(r"EVENT (\w+) (.*)$")
T_NS = re.compile(r"\d{19}")  # time.time_ns(), 19 digits until 2286
ROWS = ("plain", "torchrun", "dgt-group", "torchft", "nvrx-inproc", "nvrx-ft", "dgt-inplace",
        "dgt-fork", "dgt-standby", "dgt-hang", "dgt-spare", "torchrun-spare", "nvrx-spare")
NODE_ROWS = ("dgt-spare", "torchrun-spare", "nvrx-spare")
DGT_INPLACE_ROWS = ("dgt-inplace", "dgt-fork", "dgt-standby", "dgt-hang")
# The agent's line naming a row's idle helper, once it is ready.
HELPER_READY = {"dgt-fork": re.compile(r"fork server pid (\d+) is ready"),
                "dgt-standby": re.compile(r"standby pid (\d+) is ready")}
# The plain baseline runs first and last: the mean of both is the reference step, and their
# difference shows how much the machine's load moved during the run. The lost-node rows run when
# named (--rows).
DEFAULT_ROWS = tuple(r for r in ROWS if r not in NODE_ROWS) + ("plain",)
MILESTONES = (("first replacement started", "start", "first"),
              ("every replacement started", "start", "all"),
              ("torch imported", "imported", "all"),
              ("process group ready", "ready", "all"),
              ("state loaded", "loaded", "all"))


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Launch:
    """One launcher process (its own session), output to a file that is parsed for EVENT lines."""

    def __init__(self, name, args, out_dir, env):
        self.name = name
        self.path = out_dir / f"{name}.log"
        self._f = open(self.path, "wb")
        self.popen = subprocess.Popen([str(a) for a in args], stdout=self._f,
                                      stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                                      env=env, cwd=REPO, start_new_session=True)

    def text(self):
        return self.path.read_text(errors="replace")

    def events(self):
        out = []
        for line in self.text().splitlines():
            m = EVENT.search(line)
            if m:
                f = dict(kv.split("=", 1) for kv in m.group(2).split() if "=" in kv)
                out.append((m.group(1), f))
        return out

    def descendants(self):
        """Every process below the launcher (via /proc/<pid>/task/<tid>/children), collected
        before anything is killed: torchrun 2.x and ft_launcher start each worker in its own
        session, so killing the launcher's process group alone left its workers running (and
        spinning at --steps=1000000) for hours after the bench."""
        found, todo = [], [self.popen.pid]
        while todo:
            pid = todo.pop()
            for tasks in Path(f"/proc/{pid}/task").glob("*/children"):
                try:
                    kids = [int(c) for c in tasks.read_text().split()]
                except OSError:
                    continue
                found += kids
                todo += kids
        return found

    def stop(self, timeout=10):
        if self.popen.poll() is None:
            below = self.descendants()
            try:
                os.killpg(self.popen.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
            for pid in below:
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
        try:
            self.popen.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            pass
        self._f.close()


def env_with(**extra):
    env = dict(os.environ)
    env["DGT_PYTHON"] = PY2
    # ft_launcher runs its workers with the `python3` of PATH: the venv's, as for the others.
    env["PATH"] = os.pathsep.join([str(Path(PY2).parent), env.get("PATH", "")])
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO / "python"),
                                                      env.get("PYTHONPATH", "")]))
    env.update({k: str(v) for k, v in extra.items()})
    return env


def trainer_args(args, mode, ckpt_dir=None, steps=None):
    # Rows with a kill are stopped by the driver once every rank is back; their step budget only
    # keeps the survivors training (torchft's healthy group must still be there to heal from).
    a = [TRAINER, f"--mode={mode}", f"--steps={steps or 1_000_000}", f"--hidden={args.hidden}",
         f"--layers={args.layers}", f"--batch={args.batch}", f"--ckpt-every={args.ckpt_every}"]
    return a + ([f"--ckpt-dir={ckpt_dir}"] if ckpt_dir else [])


def node_agent(row, args, out_dir, name, ctx):
    """One node (one rank) of a lost-node row: node-a, node-b or the spare node-c. `ctx`: the
    row's "endpoint" (dgt-rendezvous), "port" (torchrun's c10d store) and "ckpt"."""
    if row == "dgt-spare":
        return Launch(name, [BIN / "dgt-run", f"--node-id={name}", "--nnodes=2",
                             "--nproc-per-node=1", f"--rdzv-endpoint={ctx['endpoint']}",
                             "--rdzv-id=bench", "--rdzv-conf=last_call_timeout=1",
                             "--restart-policy=rank", "--max-restarts=1",
                             *trainer_args(args, "dgt")], out_dir, env_with())
    host = 1 if name == "node-a" else 0
    launcher = ([Path(PY2).parent / "ft_launcher"] if row == "nvrx-spare"
                else [PY2, "-m", "torch.distributed.run"])
    return Launch(name, [*launcher, "--nnodes=2", "--nproc-per-node=1",
                         "--rdzv-backend=c10d", f"--rdzv-endpoint=127.0.0.1:{ctx['port']}",
                         "--rdzv-id=bench", f"--rdzv-conf=is_host={host}", "--max-restarts=1",
                         "--monitor-interval=0.1", *trainer_args(args, "ddp", ctx["ckpt"])],
                  out_dir, env_with(TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1))


def start_row(row, args, out_dir):
    """Starts the row's processes; returns (launches, kill_rank, surviving ranks expected back).
    A lost-node row's context for its spare (node_agent) is left in args.node_ctx."""
    # --overhead: no checkpoint (no --ckpt-dir), and every row trains until the driver stops it.
    overhead = getattr(args, "overhead", False)
    ckpt = None if overhead else out_dir / "ckpt"
    if ckpt:
        ckpt.mkdir()
    world = 2
    if row in NODE_ROWS:
        ctx, launches = {"ckpt": ckpt}, []
        if row == "dgt-spare":
            rdzv = Launch("rendezvous", [BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0"],
                          out_dir, env_with())
            launches.append(rdzv)
            m = wait_until(lambda: re.search(r"listening on port (\d+)", rdzv.text()), 10,
                           "dgt-rendezvous's port", [rdzv])
            ctx["endpoint"] = f"127.0.0.1:{m.group(1)}"
        else:
            ctx["port"] = free_port()
        launches += [node_agent(row, args, out_dir, n, ctx) for n in ("node-a", "node-b")]
        args.node_ctx = ctx
        return launches, 1, {0, 1}
    if row == "plain":
        return [Launch(row, [BIN / "dgt-run", "--standalone", "--nproc-per-node=2",
                             *trainer_args(args, "ddp", steps=None if overhead else
                                           args.plain_steps)],
                       out_dir, env_with())], None, {0, 1}
    if row == "torchrun":
        # TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1: see the module docstring.
        env = env_with() if args.torchrun_shared_store else env_with(
            TORCH_DISABLE_SHARE_RDZV_TCP_STORE=1)
        return [Launch(row, [PY2, "-m", "torch.distributed.run", "--standalone",
                             "--nproc-per-node=2", "--max-restarts=1", "--monitor-interval=0.1",
                             *trainer_args(args, "ddp", ckpt)], out_dir, env)], 1, {0, 1}
    if row == "dgt-group":
        return [Launch(row, [BIN / "dgt-run", "--standalone", "--nproc-per-node=2",
                             "--max-restarts=1", *trainer_args(args, "ddp", ckpt)],
                       out_dir, env_with())], 1, {0, 1}
    if row in ("dgt-inplace", "dgt-fork", "dgt-hang"):
        hang = ["--hang-timeout=60"] if row == "dgt-hang" else []
        fork = "on" if row == "dgt-fork" else "off"
        return [Launch(row, [BIN / "dgt-run", "--standalone", "--nproc-per-node=2",
                             "--restart-policy=rank", "--max-restarts=1", *hang,
                             f"--fork-server={fork}", *trainer_args(args, "dgt")], out_dir,
                       env_with())], 1, {0, 1}
    if row == "dgt-standby":
        return [Launch(row, [BIN / "dgt-run", "--standalone", "--nproc-per-node=2",
                             "--restart-policy=rank", "--max-restarts=1", "--standby-workers=1",
                             *trainer_args(args, "dgt")], out_dir, env_with())], 1, {0, 1}
    if row == "nvrx-ft":
        return [Launch(row, [Path(PY2).parent / "ft_launcher", "--standalone",
                             "--nproc-per-node=2", "--max-restarts=1", "--monitor-interval=0.1",
                             *trainer_args(args, "ddp", ckpt)], out_dir, env_with())], 1, {0, 1}
    if row == "nvrx-inproc":
        port = free_port()
        return [Launch(f"{row}{r}", [PY2, "-u", *trainer_args(args, "nvrx")], out_dir,
                       env_with(RANK=r, LOCAL_RANK=r, WORLD_SIZE=world, LOCAL_WORLD_SIZE=world,
                                MASTER_ADDR="127.0.0.1", MASTER_PORT=port))
                for r in range(world)], 1, set(range(world)) if overhead else {0}
    if row == "torchft":
        port = free_port()
        lh = Launch("lighthouse", [Path(PY2).parent / "torchft_lighthouse", "--bind",
                                   f"127.0.0.1:{port}", "--min_replicas", "1",
                                   "--join_timeout_ms", "1000", "--heartbeat_timeout_ms", "1000"],
                    out_dir, env_with())
        groups = [Launch(f"{row}{g}", [BIN / "dgt-run", "--standalone", "--nproc-per-node=1",
                                       "--max-restarts=1", *trainer_args(args, "torchft")],
                         out_dir, env_with(TORCHFT_LIGHTHOUSE=f"http://127.0.0.1:{port}",
                                           REPLICA_GROUP_ID=g, NUM_REPLICA_GROUPS=world))
                  for g in range(world)]
        return [lh, *groups], 1, {0, 1}
    raise ValueError(row)


def pss_mb(pid):
    """The process's proportional set size in MB (/proc/PID/smaps_rollup); None when gone."""
    try:
        with open(f"/proc/{pid}/smaps_rollup") as f:
            for line in f:
                if line.startswith("Pss:"):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return None


def all_events(launches):
    """(kind, fields) of every EVENT line with a time. A worker's stderr shares the log with its
    stdout, so a warning may continue an EVENT line without a newline (`t_ns=123[rank1]:[W...`):
    t_ns is its leading digits."""
    ev = []
    for la in launches:
        for k, f in la.events():
            t = T_NS.match(f.get("t_ns", ""))
            if t:
                ev.append((k, {**f, "t_ns": int(t.group(0)), "rank": int(f.get("rank", -1))}))
    return ev


def wait_until(pred, timeout, what, launches):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        v = pred()
        if v:
            return v
        if all(la.popen.poll() is not None for la in launches):
            v = pred()  # the last lines may have come with the exit
            if v:
                return v
            raise TimeoutError(f"every process exited before {what}")
        time.sleep(0.02)
    raise TimeoutError(f"timed out after {timeout:.0f} s waiting for {what}")


def step_times(ev, rank, before_ns=None):
    return [f["t_ns"] for k, f in ev
            if k == "step" and f["rank"] == rank and (before_ns is None or f["t_ns"] < before_ns)]


def run_row(row, args, out_dir):
    launches, kill_rank, expected = start_row(row, args, out_dir)
    result = {"row": row}
    try:
        if row in DGT_INPLACE_ROWS:
            skipped = wait_until(lambda: [f for k, f in all_events(launches) if k == "skipped"]
                                 or [f for k, f in all_events(launches) if k == "step"],
                                 args.row_timeout, "dgt-inplace to start", launches)
            if "why" in skipped[0]:
                result["skipped"] = skipped[0]["why"].replace("_", " ")
                return result
        if row in NODE_ROWS:
            # The spare joins once the run trains (not a node of its first round).
            wait_until(lambda: [1 for k, f in all_events(launches) if k == "step"],
                       args.row_timeout, "the first step", launches)
            spare = node_agent(row, args, out_dir, "node-c", args.node_ctx)
            launches.append(spare)
            if row == "dgt-spare":
                wait_until(lambda: HELPER_READY["dgt-fork"].search(spare.text()),
                           args.row_timeout, "the spare's fork server", launches)
            else:
                time.sleep(5)  # torchrun's spare logs nothing when it waits.
        if kill_rank is None:
            deadline = time.monotonic() + args.row_timeout
            while (time.monotonic() < deadline
                   and any(la.popen.poll() is None for la in launches)):
                time.sleep(0.05)
            ev = all_events(launches)
        else:
            def at_kill_step():
                ev = all_events(launches)
                mine = [f for k, f in ev if k == "step" and f["rank"] == kill_rank]
                if row in HELPER_READY and not HELPER_READY[row].search(launches[0].text()):
                    return None  # The row measures a replacement by a ready helper.
                return ev if mine and int(mine[-1]["step"]) >= args.kill_step else None

            ev = wait_until(at_kill_step, args.row_timeout, f"rank {kill_rank} at step "
                            f"{args.kill_step}", launches)
            pid = int([f for k, f in ev if k == "start" and f["rank"] == kill_rank][-1]["pid"])
            helper = HELPER_READY.get(row)
            helper_pid = int(helper.search(launches[0].text()).group(1)) if helper else None
            if helper_pid:
                result["helper_pss_mb"] = pss_mb(helper_pid)
            t_kill = time.time_ns()
            if row in NODE_ROWS:
                [node_b] = [la for la in launches if la.name == "node-b"]
                node_b.stop()  # The whole node: its agent and every process below it.
            else:
                os.kill(pid, signal.SIGKILL)
            ev = all_events(launches)
            pre = max(int(f["step"]) for k, f in ev if k == "step" and f["t_ns"] < t_kill)
            result.update(t_kill=t_kill, pre_step=pre)

            def back():
                ev = all_events(launches)
                got = {f["rank"] for k, f in ev
                       if k == "step" and f["t_ns"] > t_kill and int(f["step"]) >= pre}
                return ev if expected <= got else None

            ev = wait_until(back, args.row_timeout, f"{row}: every rank back at step {pre}",
                            launches)
            result["timeline"] = timeline(ev, t_kill, pre, expected)
            if row in DGT_INPLACE_ROWS:
                new = [f for k, f in ev if k == "start" and f["rank"] == kill_rank][-1]
                result["replacement_pss_mb"] = pss_mb(int(new["pid"]))
                if row == "dgt-fork" and helper_pid:
                    result["helper_after_pss_mb"] = pss_mb(helper_pid)
        wrong = {f.get("torch") for k, f in ev if k == "imported"} - {None}
        wrong = {v for v in wrong if not v.startswith("2.")}
        if wrong:
            result["error"] = f"workers ran torch {sorted(wrong)}, not the venv's 2.x"
            return result
        # Healthy-step cost: mean step interval over the steps before the kill (or all of them),
        # skipping the first 5 (warm-up).
        intervals = []
        for r in expected:
            ts = step_times(ev, r, result.get("t_kill"))[5:]
            intervals += [(b - a) / 1e6 for a, b in zip(ts, ts[1:])]
        result["step_ms"] = statistics.mean(intervals) if intervals else float("nan")
        result["step_median_ms"] = statistics.median(intervals) if intervals else float("nan")
        return result
    except TimeoutError as e:
        tail = "\n".join(la.name + ": " + la.text()[-1500:] for la in launches)
        result["error"] = f"{e}\n{tail}"
        return result
    finally:
        for la in launches:
            la.stop()


def timeline(ev, t_kill, pre, expected):
    """ms after the kill at which each milestone was reached (latest of the expected ranks; the
    first for "first replacement started"); None when the row does not pass through it."""
    out = {}
    for name, kind, which in MILESTONES:
        per_rank = {}
        for k, f in ev:
            if k == kind and f["t_ns"] > t_kill and f["rank"] in expected:
                per_rank.setdefault(f["rank"], f["t_ns"])
        if not per_rank:
            out[name] = None
        elif which == "first":
            out[name] = (min(per_rank.values()) - t_kill) / 1e6
        else:  # the last of the ranks that pass through it (replacements, or re-entries)
            out[name] = (max(per_rank.values()) - t_kill) / 1e6
    backs = {}
    for k, f in ev:
        if k == "step" and f["t_ns"] > t_kill and int(f["step"]) >= pre and f["rank"] in expected:
            backs.setdefault(f["rank"], f["t_ns"])
    out["back at pre-failure step"] = (max(backs.values()) - t_kill) / 1e6
    loaded = [int(f["step"]) for k, f in ev if k == "loaded" and f["t_ns"] > t_kill]
    out["resumed from step"] = min(loaded) if loaded else None
    return out


OVERHEAD_ROWS = ("plain", "dgt-inplace", "dgt-standby", "dgt-hang", "torchrun", "torchft",
                 "nvrx-inproc")
STANDBY_READY = re.compile(r"standby pid \d+ is ready")


def overhead_row(row, args, out_dir):
    """One healthy run of `row` (start_row's launch, no checkpoint, no kill): waits until every
    rank has args.steps step intervals after the warm-up (the first args.warmup steps, and for
    dgt-standby everything before the agent logged its standby ready: the standby's own
    `import torch` competes with the ranks for the CPU meanwhile), then stops the row. Returns
    {"row", "intervals": [ms, ...] of every rank, "pre_ready_intervals" (dgt-standby)} or with
    "error"/"skipped"."""
    launches, _, expected = start_row(row, args, out_dir)
    result = {"row": row}
    t_ready = [0 if row != "dgt-standby" else None]

    def window(ev, r, field="t_ns"):
        ts = [(int(f["step"]), f["t_ns"], int(f.get(field, 0))) for k, f in ev
              if k == "step" and f["rank"] == r]
        return [v for s, t, v in ts if s > args.warmup and t > (t_ready[0] or 0)]

    def enough():
        if t_ready[0] is None and STANDBY_READY.search(launches[0].text()):
            t_ready[0] = time.time_ns()  # within the 20 ms poll of when the agent logged it
        ev = all_events(launches)
        skipped = [f for k, f in ev if k == "skipped"]
        if skipped:
            return ev
        if t_ready[0] is None:
            return None
        return ev if all(len(window(ev, r)) > args.steps for r in expected) else None

    try:
        ev = wait_until(enough, args.row_timeout, f"{args.steps} healthy steps of every rank",
                        launches)
        skipped = [f for k, f in ev if k == "skipped"]
        if skipped:
            result["skipped"] = skipped[0].get("why", "?").replace("_", " ")
            return result
        wrong = {f.get("torch") for k, f in ev if k == "imported"} - {None}
        wrong = {v for v in wrong if not v.startswith("2.")}
        if wrong:
            result["error"] = f"workers ran torch {sorted(wrong)}, not the venv's 2.x"
            return result
        result["intervals"], result["cpu"] = [], []
        for r in sorted(expected):
            ts = window(ev, r)[:args.steps + 1]
            result["intervals"] += [(b - a) / 1e6 for a, b in zip(ts, ts[1:])]
            cs = window(ev, r, "cpu_ns")[:args.steps + 1]
            result["cpu"] += [(b - a) / 1e6 for a, b in zip(cs, cs[1:])]
        if row == "dgt-standby":
            pre = []
            for r in sorted(expected):
                ts = [f["t_ns"] for k, f in ev if k == "step" and f["rank"] == r
                      and int(f["step"]) > args.warmup and f["t_ns"] <= t_ready[0]]
                pre += [(b - a) / 1e6 for a, b in zip(ts, ts[1:])]
            result["pre_ready_intervals"] = pre
        return result
    except TimeoutError as e:
        tail = "\n".join(la.name + ": " + la.text()[-1500:] for la in launches)
        result["error"] = f"{e}\n{tail}"
        return result
    finally:
        for la in launches:
            la.stop()


def overhead_verdict(lo, hi, mid, limit=1.0):
    """The verdict on a per-step cost whose interval (percent) is [lo, hi] and median `mid`:
    "< limit %" only when the interval lies within (-limit, limit). Every row runs the plain
    row's trainer plus its own work, so an interval below -limit (a run 6 % "cheaper" than
    plain in all four rounds here) says the rounds' noise is larger than the interval shows."""
    if -limit < lo and hi < limit:
        return f"< {limit:g} %"
    if lo > limit:
        return f"measurable: {mid:.1f} %"
    return "not shown at this noise"


def overhead_table(rows, runs, key):
    """Per row: the median of `key` ([ms, ...]) in each round, their median, and the per-round
    ratio against the same round's plain as median [min, max] with its verdict."""
    print(f"{'row':13} {'median per round, ms':30} {'median':>8}  "
          f"{'vs plain per round, %':26} {'median [min, max] %':22} verdict (< 1 %)")

    def med(r):
        return statistics.median(r[key]) if r.get(key) else None

    plain_meds = [med(r) for r in runs["plain"]]
    for row in rows:
        meds = [med(r) for r in runs[row]]
        cells = " ".join("-" if m is None else f"{m:.2f}" for m in meds)
        good = [m for m in meds if m is not None]
        overall = f"{statistics.median(good):8.2f}" if good else f"{'-':>8}"
        ratios = [(m / p - 1) * 100 for m, p in zip(meds, plain_meds)
                  if m is not None and p is not None]
        if row == "plain":
            spread = (f"spread of plain's rounds {(max(good) / min(good) - 1) * 100:.1f} %"
                      if len(good) > 1 else "")
            print(f"{row:13} {cells:30} {overall}  {'(baseline)':26} {'':22} {spread}")
        elif ratios:
            lo, hi, mid = min(ratios), max(ratios), statistics.median(ratios)
            per = " ".join(f"{x:+.1f}" for x in ratios)
            iv = f"{mid:+.1f} [{lo:+.1f}, {hi:+.1f}]"
            print(f"{row:13} {cells:30} {overall}  {per:26} {iv:22} "
                  f"{overhead_verdict(lo, hi, mid)}")
        else:
            print(f"{row:13} {cells:30} {overall}  {'-':26} {'-':22} no data")


def main_overhead(args, rows):
    """--overhead: args.rounds rounds of every row, each round in a rotated order, so that every
    row's run lies next to a plain run of the same round; prints per row the median step of each
    round, their median, and the per-round ratio against plain as median [min, max]."""
    if "plain" not in rows:
        rows = ["plain"] + rows
    out = Path(tempfile.mkdtemp(prefix="dgt-recovery-overhead-"))
    load_before = Path("/proc/loadavg").read_text().strip()
    t0 = time.monotonic()
    runs = {r: [] for r in rows}  # row -> per round: result dict
    for k in range(args.rounds):
        order = rows[k % len(rows):] + rows[:k % len(rows)]
        for row in order:
            d = out / f"{k}-{row}"
            d.mkdir()
            r = overhead_row(row, args, d)
            runs[row].append(r)
            status = r.get("error", r.get("skipped", "ok")).splitlines()[0]
            med = (f", median step {statistics.median(r['intervals']):.2f} ms"
                   if r.get("intervals") else "")
            print(f"# round {k + 1}/{args.rounds} {row}: {status}{med} "
                  f"({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    load_after = Path("/proc/loadavg").read_text().strip()
    print(f"\nCost per healthy step, no kill, no checkpoint: {args.rounds} rounds of "
          f"{', '.join(rows)} in rotating order; per run {args.steps} step intervals per rank "
          f"after {args.warmup} warm-up steps; 2 ranks, Gloo/CPU, MLP {args.layers}x"
          f"{args.hidden}, batch {args.batch}")
    print(f"load before: {load_before}\nload after:  {load_after}")
    failed = any("error" in r for rs in runs.values() for r in rs)
    print("\nWall time per step (what the user waits for):")
    overhead_table(rows, runs, "intervals")
    print("\nCPU time per step (time.process_time of each rank, every thread; less sensitive to "
          "other load than wall time, blind to waiting):")
    overhead_table(rows, runs, "cpu")
    for row in rows:
        for k, r in enumerate(runs[row]):
            if "skipped" in r:
                print(f"{row} round {k + 1}: skipped: {r['skipped']}")
            if "error" in r:
                print(f"{row} round {k + 1}: FAILED: {r['error']}")
    pre = [statistics.median(r["pre_ready_intervals"]) for r in runs.get("dgt-standby", [])
           if len(r.get("pre_ready_intervals", [])) > 1]
    if pre:
        print("dgt-standby before its standby was ready (excluded above: the standby imports "
              "torch meanwhile), median step per round, ms: "
              + " ".join(f"{m:.2f}" for m in pre))
    print(f"logs: {out}" if args.keep else "")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return 1 if failed else 0


def fmt(v):
    return "-" if v is None else f"{v:.0f}"


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", default=",".join(DEFAULT_ROWS),
                    help=f"comma-separated, of {ROWS} (a row may repeat)")
    ap.add_argument("--plain-steps", type=int, default=60, help="steps of the plain row")
    ap.add_argument("--kill-step", type=int, default=45,
                    help="SIGKILL rank 1 once it has completed this step")
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--hidden", type=int, default=896)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--row-timeout", type=float, default=90.0)
    ap.add_argument("--keep", action="store_true", help="keep the logs' directory")
    ap.add_argument("--torchrun-shared-store", action="store_true",
                    help="run the torchrun row with its default shared rendezvous store")
    ap.add_argument("--overhead", action="store_true",
                    help="measure each row's cost per healthy step (no kill, no checkpoint) "
                         "in --rounds interleaved rounds, instead of the recovery")
    ap.add_argument("--steps", type=int, default=300,
                    help="--overhead: step intervals per rank and run")
    ap.add_argument("--warmup", type=int, default=20,
                    help="--overhead: steps skipped at the start of each run")
    ap.add_argument("--rounds", type=int, default=3, help="--overhead: rounds of every row")
    args = ap.parse_args()
    if args.overhead and args.rows == ",".join(DEFAULT_ROWS):
        args.rows = ",".join(OVERHEAD_ROWS)
    rows = args.rows.split(",")
    for r in rows:
        if r not in ROWS:
            ap.error(f"--rows: unknown row {r!r}; rows are {','.join(ROWS)}")
    if args.overhead:
        if args.steps < 2 or args.rounds < 1 or args.warmup < 0:
            ap.error(f"--overhead needs --steps >= 2, --rounds >= 1 and --warmup >= 0, got "
                     f"{args.steps}, {args.rounds} and {args.warmup}")
        return main_overhead(args, list(dict.fromkeys(rows)))
    out = Path(tempfile.mkdtemp(prefix="dgt-recovery-torch-"))
    results = []
    t0 = time.monotonic()
    for i, row in enumerate(rows):
        d = out / f"{i}-{row}"
        d.mkdir()
        r = run_row(row, args, d)
        results.append(r)
        status = r.get("error", r.get("skipped", "ok")).splitlines()[0]
        print(f"# {row}: {status} ({time.monotonic() - t0:.0f} s)", file=sys.stderr, flush=True)
    plains = [r["step_ms"] for r in results if r["row"] == "plain" and "step_ms" in r]
    plain = statistics.mean(plains) if plains else None
    names = [m[0] for m in MILESTONES] + ["back at pre-failure step"]
    print(f"\nRecovery from SIGKILL of rank 1 at step {args.kill_step}, 2 ranks, Gloo/CPU, "
          f"MLP {args.layers}x{args.hidden}, batch {args.batch}, checkpoint every "
          f"{args.ckpt_every} steps (torchrun, dgt-group, nvrx-ft)")
    print("ms after the SIGKILL:")
    if any(r["row"] in NODE_ROWS for r in results):
        print("lost-node rows (2 nodes x 1 rank and a spare): the kill is of node b, rank 1's "
              "agent and worker, once the spare is ready")
    w = max([13] + [len(r["row"]) + 2 for r in results])  # Column width.
    print(f"{'milestone':28}" + "".join(f"{r['row']:>{w}}" for r in results))
    for n in names + ["resumed from step"]:
        cells = []
        for r in results:
            tl = r.get("timeline")
            cells.append(fmt(tl.get(n)) if tl else ("skip" if "skipped" in r else
                                                    ("fail" if "error" in r else "-")))
        print(f"{n:28}" + "".join(f"{c:>{w}}" for c in cells))
    print(f"{'healthy step, mean ms':28}"
          + "".join(f"{r.get('step_ms', float('nan')):>{w}.1f}" for r in results))
    print(f"{'healthy step, median ms':28}"
          + "".join(f"{r.get('step_median_ms', float('nan')):>{w}.1f}" for r in results))
    if plain:
        print(f"{'cost per step vs plain':28}" + "".join(
            f"{(r['step_ms'] - plain) / plain * 100:>{w - 1}.1f}%" if "step_ms" in r
            else f"{'-':>{w}}" for r in results))
    mem = [r for r in results if r["row"] in DGT_INPLACE_ROWS and "replacement_pss_mb" in r]
    if mem:
        print("\nMemory per node beyond the ranks, PSS in MB:")
        print(f"{'':28}" + "".join(f"{r['row']:>{w}}" for r in mem))
        print(f"{'idle helper before the kill':28}" + "".join(
            f"{fmt(r.get('helper_pss_mb')):>13}" for r in mem))
        print(f"{'helper after the recovery':28}" + "".join(
            f"{fmt(r.get('helper_after_pss_mb')):>13}" for r in mem))
        print(f"{'replacement rank':28}" + "".join(
            f"{fmt(r.get('replacement_pss_mb')):>13}" for r in mem))
    for r in results:
        if "skipped" in r:
            print(f"{r['row']}: skipped: {r['skipped']}")
        if "error" in r:
            print(f"{r['row']}: FAILED: {r['error']}")
    print(f"logs: {out}" if args.keep else "")
    if not args.keep:
        shutil.rmtree(out, ignore_errors=True)
    return 1 if any("error" in r for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
