"""Unit tests of the dgt Python package (python/dgt), without an agent: the recovery keys against a
real torch TCPStore on loopback, ElasticGroup's protocol over a recording backend, the NCCL
backend over a fake torch.distributed (no GPU here), and one multi-process Gloo recovery in which
the test plays the agent (SIGKILL, failure publication, replacement).

Run with the peers venv (torch 2.x): `python -m unittest discover -s tests/python` (ctest
python_dgt_unit). Every wait is bounded.
"""
import os
import re
import signal
import subprocess
import sys
import threading
import time
import unittest
from datetime import timedelta
from pathlib import Path
from types import SimpleNamespace

REPO = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(REPO / "python"))

import torch.distributed as dist  # noqa: E402

from dgt import keys  # noqa: E402
from dgt import recovery  # noqa: E402


def master_store():
    return dist.TCPStore("127.0.0.1", 0, is_master=True, wait_for_workers=False,
                         timeout=timedelta(seconds=10))


def client(port):
    return dist.TCPStore("127.0.0.1", port, is_master=False, timeout=timedelta(seconds=10))


class RecordingBackend(recovery.GlooBackend):
    """Records what ElasticGroup asks of a backend; init writes a probe key through the store it
    was given, so the test sees the bootstrap prefix."""

    def __init__(self):
        super().__init__(dist=SimpleNamespace(is_initialized=lambda: False))
        self.calls = []

    def init(self, store, rank, size, timeout_s, device=None):
        store.set("probe", f"{rank}/{size}")
        self.calls.append(("init", rank, size, timeout_s))

    def destroy(self):
        self.calls.append(("destroy",))


def env(rank, world, port, restart=0, mode=None):
    return recovery.JobEnv(rank=rank, world_size=world, master_addr="127.0.0.1",
                           master_port=port, restart_count=restart, recovery_mode=mode)


class KeysTest(unittest.TestCase):
    def setUp(self):
        self.master = master_store()
        self.store = client(self.master.port)

    def test_key_names_match_the_cpp_runtime(self):
        self.assertEqual(keys.generation_key("world"), "dgt/recovery/world/generation")
        self.assertEqual(keys.open_key("world", 3), "dgt/recovery/world/g3/open")
        self.assertEqual(keys.failed_key("world", 3), "dgt/recovery/world/g3/failed")
        self.assertEqual(keys.alive_key("world", 3, 7), "dgt/recovery/world/g3/alive/7")
        self.assertEqual(keys.member_key("world", 7), "dgt/recovery/world/member/7")
        self.assertEqual(keys.comm_prefix("world", 3), "dgt/comm/world/g3")

    def test_racing_openers_from_the_same_generation_agree(self):
        self.assertEqual(keys.open_next_generation(self.store, "world", 0, "a"), 1)
        self.assertEqual(keys.open_next_generation(self.store, "world", 0, "b"), 1)
        self.assertEqual(self.store.get(keys.generation_key("world")), b"1")
        self.assertEqual(self.store.get(keys.open_key("world", 1)), b"b")
        # Someone further ahead: the caller lands on the current generation.
        self.assertEqual(keys.open_next_generation(self.store, "world", 1, "c"), 2)
        self.assertEqual(keys.open_next_generation(self.store, "world", 0, "late"), 2)

    def test_publish_rank_failure_opens_after_the_ranks_generation(self):
        self.store.set(keys.member_key("world", 2), "3")
        self.store.set(keys.generation_key("world"), "3")
        self.assertEqual(keys.publish_rank_failure(self.store, "world", 2, "SIGKILL"), 4)
        self.assertEqual(self.store.get(keys.failed_key("world", 4)), b"2,")
        self.assertEqual(self.store.get(keys.open_key("world", 4)), b"SIGKILL")
        self.assertEqual(keys.parse_failed(b"2,0,"), {0, 2})

    def test_non_numeric_generation_is_named(self):
        self.store.set(keys.generation_key("world"), "x")
        with self.assertRaisesRegex(RuntimeError,
                                    "store key dgt/recovery/world/generation holds 'x'"):
            keys.open_next_generation(self.store, "world", 0, "r")

    def test_wait_key_is_bounded(self):
        t0 = time.monotonic()
        self.assertFalse(keys.wait_key(self.store, "absent", 0.3))
        self.assertGreaterEqual(time.monotonic() - t0, 0.25)
        threading.Timer(0.2, lambda: client(self.master.port).set("later", "1")).start()
        self.assertTrue(keys.wait_key(self.store, "later", 10))


class JobEnvTest(unittest.TestCase):
    def test_reads_the_env_contract(self):
        e = recovery.JobEnv.from_environ({"RANK": "3", "WORLD_SIZE": "4", "MASTER_ADDR": "h",
                                          "MASTER_PORT": "29500",
                                          "TORCHELASTIC_RESTART_COUNT": "2",
                                          "DGT_RECOVERY_MODE": "shrink"})
        self.assertEqual(e, recovery.JobEnv(3, 4, "h", 29500, 2, "shrink"))

    def test_errors_name_the_variable_and_value(self):
        base = {"RANK": "0", "WORLD_SIZE": "2", "MASTER_ADDR": "h", "MASTER_PORT": "1"}
        with self.assertRaisesRegex(ValueError, r"^RANK is not set \(run the trainer under"):
            recovery.JobEnv.from_environ({k: v for k, v in base.items() if k != "RANK"})
        with self.assertRaisesRegex(ValueError, r"^MASTER_PORT must be an integer, got 'x'$"):
            recovery.JobEnv.from_environ({**base, "MASTER_PORT": "x"})
        with self.assertRaisesRegex(ValueError, r"^RANK must be in \[0, WORLD_SIZE=2\), got 2$"):
            recovery.JobEnv.from_environ({**base, "RANK": "2"})


class ElasticGroupTest(unittest.TestCase):
    def setUp(self):
        self.master = master_store()
        self.port = self.master.port
        self.groups = []

    def tearDown(self):
        for g in self.groups:
            g._stop_watcher()

    def group(self, rank, world=4, mode="replace", restart=0, backend=None, alive_in=(0, 1, 2),
              **opts):
        """A group of `rank`; the other ranks count as announced in the generations `alive_in`
        (a generation forms only once all its members announced themselves)."""
        for gen in alive_in:
            for r in range(world):
                if r != rank:
                    self.master.set(keys.alive_key("world", gen, r), "1")
        opts.setdefault("formation_timeout", 5.0)
        options = recovery.RecoveryOptions(mode=mode, report_timeout=0.3, watch_period=0.2,
                                           **opts)
        g = recovery.ElasticGroup(env(rank, world, self.port, restart), options,
                                  lambda: client(self.port), backend or RecordingBackend())
        self.groups.append(g)
        return g

    def test_fresh_join_builds_generation_zero_under_its_prefix(self):
        g = self.group(1)
        self.assertEqual(g.join(), 0)
        self.assertEqual(g.backend.calls, [("destroy",), ("init", 1, 4, 30.0)])
        self.assertEqual(self.master.get("dgt/comm/world/g0/probe"), b"1/4")
        self.assertEqual(self.master.get(keys.member_key("world", 1)), b"0")
        self.assertFalse(g.is_replacement)
        self.assertEqual((g.rank, g.size, g.members), (1, 4, [0, 1, 2, 3]))

    def test_replacement_opens_the_generation_after_its_predecessors(self):
        self.master.set(keys.member_key("world", 2), "0")
        g = self.group(2, restart=1)
        self.assertEqual(g.join(), 1)
        self.assertTrue(g.is_replacement)
        self.assertEqual(self.master.get(keys.open_key("world", 1)),
                         b"rank 2 replaced (restart count 1)")
        self.assertEqual(self.master.get("dgt/comm/world/g1/probe"), b"2/4")

    def test_watcher_flags_the_next_generation_and_recover_rebuilds_everyone(self):
        g = self.group(0)
        g.join()
        self.assertFalse(g.pending)
        keys.publish_rank_failure(client(self.port), "world", 3, "SIGKILL")
        deadline = time.monotonic() + 5
        while not g.pending and time.monotonic() < deadline:
            time.sleep(0.01)
        self.assertTrue(g.pending)
        self.assertGreater(g.noticed_ns, 0)
        self.assertEqual(g.recover(), 1)
        self.assertEqual(g.members, [0, 1, 2, 3])
        self.assertEqual(self.master.get("dgt/comm/world/g1/probe"), b"0/4")
        self.assertFalse(g.pending)  # The new generation's watcher starts clean.

    def test_shrink_drops_the_reported_rank_and_renumbers(self):
        g = self.group(3, mode="shrink")
        g.join()
        keys.publish_rank_failure(client(self.port), "world", 1, "SIGKILL")
        self.assertEqual(g.recover(), 1)
        self.assertEqual(g.members, [0, 2, 3])
        self.assertEqual((g.rank, g.size), (2, 3))
        self.assertEqual(self.master.get("dgt/comm/world/g1/probe"), b"2/3")

    def test_shrink_without_a_report_keeps_who_announced_itself(self):
        g = self.group(0, world=3, mode="shrink", alive_in=(0,))
        g.join()
        self.master.set(keys.alive_key("world", 1, 2), "1")  # Rank 2 made it; rank 1 did not.
        self.assertEqual(g.recover(), 1)
        self.assertEqual(g.members, [0, 2])

    def test_a_rank_reported_failed_does_not_rejoin(self):
        g = self.group(1, mode="shrink")
        g.join()
        keys.publish_rank_failure(client(self.port), "world", 1, "hung")
        with self.assertRaisesRegex(recovery.RecoveryError,
                                    "rank 1 is not a member of generation 1"):
            g.recover()

    def test_a_generation_that_does_not_form_moves_to_the_next(self):
        backend = RecordingBackend()
        fails = [True]

        def init(store, rank, size, timeout_s, device=None):
            backend.calls.append(("init", rank, size))
            if fails.pop() if fails else False:
                raise RuntimeError("Connect timeout")

        backend.init = init
        g = self.group(0, backend=backend)
        self.assertEqual(g.join(), 1)
        self.assertEqual(self.master.get(keys.open_key("world", 1)), b"rank 0 retried")

    def test_bad_mode_is_named(self):
        with self.assertRaisesRegex(ValueError, "recovery mode must be one of replace, shrink, "
                                                "off, got 'grow'"):
            self.group(0, mode="grow")
        with self.assertRaisesRegex(ValueError, "backend must be 'gloo' or 'nccl', got 'mpi'"):
            recovery.make_backend("mpi", "replace")

    def test_off_mode_uses_one_group_per_restart_count(self):
        g = self.group(0, mode="off", restart=2)
        self.assertEqual(g.join(), 0)
        self.assertEqual(self.master.get("dgt/comm/world/attempt2/probe"), b"0/4")
        with self.assertRaisesRegex(recovery.RecoveryError, "recovery is off"):
            g.recover()


class BarrierBackend(RecordingBackend):
    """A bootstrap like Gloo's: every member writes its key under the generation's prefix and
    waits for all the others, failing after `timeout_s` (the process group timeout)."""

    def init(self, store, rank, size, timeout_s, device=None):
        store.set(f"in/{rank}", "1")
        store.wait([f"in/{r}" for r in range(size)], timedelta(seconds=timeout_s))
        self.calls.append(("init", rank, size))


class FormationTest(unittest.TestCase):
    """Generations that form only once slow replacements arrive, and a failure during formation
    (replace mode never settled when replacements took longer than op_timeout to start or
    two ranks died at once)."""

    def setUp(self):
        self.master = master_store()
        self.port = self.master.port
        self.groups = []

    def tearDown(self):
        for g in self.groups:
            g._stop_watcher()

    def group(self, rank, restart=0):
        options = recovery.RecoveryOptions(mode="replace", op_timeout=0.4, watch_period=0.2,
                                           join_attempts=3, formation_timeout=20)
        g = recovery.ElasticGroup(env(rank, 4, self.port, restart), options,
                                  lambda: client(self.port), BarrierBackend())
        self.groups.append(g)
        return g

    def in_threads(self, calls):
        """Runs each (delay_s, fn) in its own thread; returns each fn's result or exception."""
        results = [None] * len(calls)

        def run(i, delay, fn):
            time.sleep(delay)
            try:
                results[i] = fn()
            except Exception as e:  # noqa: BLE001 - the test compares it.
                results[i] = e

        threads = [threading.Thread(target=run, args=(i, d, f)) for i, (d, f) in enumerate(calls)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(timeout=30)
        self.assertFalse(any(t.is_alive() for t in threads))
        return results

    def start_world(self):
        gs = [self.group(r) for r in range(4)]
        self.assertEqual(self.in_threads([(0, g.join) for g in gs]), [0, 0, 0, 0])
        return gs

    def test_two_ranks_dead_and_replacements_slower_than_op_timeout(self):
        gs = self.start_world()
        keys.publish_rank_failure(client(self.port), "world", 1, "SIGKILL")
        keys.publish_rank_failure(client(self.port), "world", 2, "SIGKILL")
        r1, r2 = self.group(1, restart=1), self.group(2, restart=1)
        # The replacements start 6 and 8 op_timeouts (and 2 join_attempts' worth) later.
        got = self.in_threads([(0, gs[0].recover), (0, gs[3].recover), (2.4, r1.join),
                               (3.2, r2.join)])
        self.assertEqual(got, [1, 1, 1, 1])
        for g in (gs[0], gs[3], r1, r2):
            self.assertEqual(g.members, [0, 1, 2, 3])
            self.assertEqual(g.generation, 1)
        self.assertEqual(self.master.get(keys.generation_key("world")), b"1")

    def test_a_failure_during_formation_moves_everyone_to_the_same_next_generation(self):
        gs = self.start_world()
        keys.publish_rank_failure(client(self.port), "world", 1, "SIGKILL")
        first = self.group(1, restart=1)

        def first_replacement_dies():
            # It announces itself in generation 1 but dies before the others arrive...
            self.master.set(keys.member_key("world", 1), "1")
            self.master.set(keys.alive_key("world", 1, 1), "1")
            first._stop_watcher()
            # ...so the agent publishes its failure from generation 1: generation 2 opens.
            return keys.publish_rank_failure(client(self.port), "world", 1, "SIGKILL again")

        second = self.group(1, restart=2)
        got = self.in_threads([(0, gs[0].recover), (0.3, gs[2].recover), (0.6, gs[3].recover),
                               (0.2, first_replacement_dies), (1.5, second.join)])
        self.assertEqual(got, [2, 2, 2, 2, 2])
        for g in (gs[0], gs[2], gs[3], second):
            self.assertEqual((g.generation, g.members), (2, [0, 1, 2, 3]))

    def test_formation_is_bounded_and_names_the_missing_ranks(self):
        gs = self.start_world()
        keys.publish_rank_failure(client(self.port), "world", 2, "SIGKILL")
        gs[0].options.formation_timeout = 0.5
        t0 = time.monotonic()
        with self.assertRaisesRegex(recovery.RecoveryError,
                                    r"rank 0: generation 1 did not form within "
                                    r"formation_timeout=0.5 s: ranks \[1, 2, 3\] never joined"):
            gs[0].recover()
        self.assertLess(time.monotonic() - t0, 3)


class FakeDist:
    """The part of torch.distributed the NCCL backend calls, recording the calls."""

    def __init__(self, with_shrink=True, shrink_error=None):
        self.calls = []
        self.initialized = True
        c10d = SimpleNamespace(SHRINK_ABORT=0x01,
                               _abort_process_group=lambda: self.calls.append(("abort",)))
        self.distributed_c10d = c10d
        if with_shrink:
            def shrink_group(exclude, shrink_flags=0):
                self.calls.append(("shrink", exclude, shrink_flags))
                if shrink_error:
                    raise shrink_error
            self.shrink_group = shrink_group

    def is_initialized(self):
        return self.initialized

    def init_process_group(self, backend, **kw):
        self.calls.append(("init", backend, kw["rank"], kw["world_size"], kw.get("device_id")))

    def destroy_process_group(self):
        self.calls.append(("destroy",))


class NcclBackendTest(unittest.TestCase):
    """The NCCL code paths, over a fake torch.distributed: UNTESTED ON A GPU."""

    def test_replace_mode_aborts_on_notice(self):
        d = FakeDist()
        b = recovery.make_backend("nccl", "replace", dist=d)
        self.assertTrue(b.abort_on_notice)
        b.abort()
        b.init(None, 1, 4, 5.0, device="cuda:1")
        self.assertEqual(d.calls, [("abort",), ("init", "nccl", 1, 4, "cuda:1")])

    def test_shrink_mode_keeps_the_communicator_and_shrinks_it(self):
        d = FakeDist()
        b = recovery.make_backend("nccl", "shrink", dist=d)
        self.assertFalse(b.abort_on_notice)
        self.assertTrue(b.shrink([1]))
        self.assertEqual(d.calls, [("shrink", [1], 0x01)])

    def test_failed_shrink_falls_back(self):
        d = FakeDist(shrink_error=RuntimeError("ncclCommShrink: unhandled system error"))
        b = recovery.make_backend("nccl", "shrink", dist=d)
        self.assertFalse(b.shrink([1]))

    def test_without_shrink_group_shrink_mode_aborts_and_bootstraps(self):
        b = recovery.make_backend("nccl", "shrink", dist=FakeDist(with_shrink=False))
        self.assertTrue(b.abort_on_notice)
        self.assertFalse(b.can_shrink())

    def test_group_recovers_by_shrinking_in_place(self):
        master = master_store()
        port = master.port
        d = FakeDist()
        options = recovery.RecoveryOptions(mode="shrink", backend="nccl", report_timeout=1,
                                           formation_timeout=5, watch_period=0.2)
        for r in range(3):
            master.set(keys.alive_key("world", 0, r), "1")
        g = recovery.ElasticGroup(env(3, 4, port), options, lambda: client(port),
                                  recovery.make_backend("nccl", "shrink", dist=d))
        try:
            g.join()
            keys.publish_rank_failure(client(port), "world", 1, "SIGKILL")
            self.assertEqual(g.recover(), 1)
            self.assertEqual(g.members, [0, 2, 3])
            # No new bootstrap: generation 0's communicator, shrunk by its rank 1.
            self.assertEqual(d.calls, [("destroy",), ("init", "nccl", 3, 4, None),
                                       ("shrink", [1], 0x01)])
            self.assertEqual(master.get(keys.member_key("world", 3)), b"1")
        finally:
            g._stop_watcher()


class PeerFailureTest(unittest.TestCase):
    def test_classification(self):
        t = recovery.Trainer.__new__(recovery.Trainer)
        published = []
        t.group = SimpleNamespace(mode="replace", generation=0,
                                  failure_published=lambda s: published.append(s) or bool(
                                      t.published))
        t.env = SimpleNamespace(rank=0)
        t.options = recovery.RecoveryOptions(report_timeout=0.25)
        t.published = False
        gloo = RuntimeError("[gloo/transport/tcp/pair.cc:598] Connection closed by peer")
        self.assertTrue(t.is_peer_failure(dist.DistBackendError("anything")))
        self.assertEqual(published, [])  # Recognised by type, no store look-up.
        # A message like a collective's is not enough: a failure must be published too.
        self.assertFalse(t.is_peer_failure(gloo))
        self.assertFalse(t.is_peer_failure(RuntimeError("request to feature server timed out")))
        self.assertEqual(published, [0.25, 0.25])
        self.assertFalse(t.is_peer_failure(RuntimeError("mat1 and mat2 shapes cannot be "
                                                        "multiplied")))
        self.assertFalse(t.is_peer_failure(ValueError("gloo")))
        self.assertTrue(t._classify(RuntimeError("anything"), in_collective=True))
        self.assertFalse(t._classify(ValueError("anything"), in_collective=True))
        t.published = True  # A failure was published: the collective-like error is its symptom.
        self.assertTrue(t.is_peer_failure(gloo))
        self.assertFalse(t.is_peer_failure(RuntimeError("mat1 and mat2")))
        t.group.mode = "off"
        self.assertFalse(t.is_peer_failure(dist.DistBackendError("x")))


WORKER = r"""
import os, sys, time, torch
sys.path.insert(0, sys.argv[1])
import dgt.recovery
steps, kill_at = int(sys.argv[2]), int(sys.argv[3])
rank = int(os.environ["RANK"])
torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=2.0 ** -6, momentum=0.5)
def step(ddp, s):
    opt.zero_grad()
    x = torch.full((2, 4), float(4 * (s % 5) + 4 * rank))
    ddp(x).sum().backward()
    opt.step()
    print(f"STEP {s + 1}", flush=True)
    if rank == 1 and s + 1 == kill_at and os.environ["TORCHELASTIC_RESTART_COUNT"] == "0":
        time.sleep(30)  # The test kills it here.
    time.sleep(0.01)
with dgt.recovery.Trainer(model, opt, options=dgt.recovery.RecoveryOptions(op_timeout=20)) as t:
    print(f"JOINED gen={t.group.generation} replacement={int(t.group.is_replacement)} "
          f"step={t.step}", flush=True)
    t.run(step, steps)
    print("DONE steps=%d recoveries=%d params=%s" % (t.step, t.recoveries,
          ",".join(repr(v) for p in model.parameters() for v in p.detach().flatten().tolist())),
          flush=True)
"""


ONE_RANK = r"""
import os, sys, time, datetime, torch
import torch.distributed as dist
sys.path.insert(0, sys.argv[1])
import dgt.recovery
from dgt import keys
case = sys.argv[2]
# The job's store: the test's (argv[3]) or, without one, this process's own.
port = int(sys.argv[3]) if len(sys.argv) > 3 else 0
master = dist.TCPStore("127.0.0.1", port, is_master=port == 0, wait_for_workers=False,
                       timeout=datetime.timedelta(seconds=10))
os.environ.update(RANK="0", WORLD_SIZE="1", MASTER_ADDR="127.0.0.1",
                  MASTER_PORT=str(master.port), DGT_RECOVERY_MODE="replace")
torch.manual_seed(0)
model = torch.nn.Linear(4, 4)
opt = torch.optim.SGD(model.parameters(), lr=0.01)
raised = []
def step(ddp, s):
    opt.zero_grad()
    ddp(torch.ones(2, 4)).sum().backward()
    opt.step()
    if case == "user-error" and s == 2 and not raised:
        raised.append(s)
        raise RuntimeError("request to feature server timed out")
    if case == "torch1" and s == 2 and not raised:
        raised.append(s)  # What a peer's failure looks like to this rank: generation 1 opens.
        keys.open_next_generation(master, "world", 0, "a peer died")
        time.sleep(0.5)
options = dgt.recovery.RecoveryOptions(report_timeout=0.5, op_timeout=10)
with dgt.recovery.Trainer(model, opt, options=options) as t:
    t.run(step, 5)
print(f"DONE step={t.step} recoveries={t.recoveries} generation={t.group.generation} "
      f"exists={keys.exists(master, [keys.member_key('world', 0)])},"
      f"{keys.exists(master, ['nope'])}", flush=True)
"""


def run_one_rank(python, case, *port):
    return subprocess.run([python, "-c", ONE_RANK, str(REPO / "python"), case, *map(str, port)],
                          capture_output=True, text=True, timeout=90,
                          env={**os.environ, "OMP_NUM_THREADS": "1"})


class OneRankTest(unittest.TestCase):
    def test_a_user_error_that_reads_like_a_timeout_propagates(self):
        master = master_store()  # Outlives the rank, as the agent's store does.
        r = run_one_rank(sys.executable, "user-error", master.port)
        self.assertEqual(r.returncode, 1, r.stdout + r.stderr)
        self.assertNotIn("DONE", r.stdout)
        self.assertIn("Traceback (most recent call last)", r.stderr)
        self.assertIn("RuntimeError: request to feature server timed out", r.stderr)
        self.assertIn("dgt.recovery: rank 0: caught RuntimeError: request to feature server "
                      "timed out; not a peer failure, raising it", r.stderr)

    @unittest.skipUnless(os.access("/usr/bin/python3", os.X_OK), "no /usr/bin/python3")
    def test_torch_1_13_joins_watches_and_recovers(self):
        probe = subprocess.run(["/usr/bin/python3", "-c", "import importlib.metadata as m; "
                                "print(m.version('torch'))"],
                               capture_output=True, text=True, timeout=60)
        if probe.returncode != 0 or not probe.stdout.startswith("1."):
            self.skipTest(f"/usr/bin/python3 has no torch 1.x ({probe.stdout.strip()})")
        r = run_one_rank("/usr/bin/python3", "torch1")
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("DONE step=5 recoveries=1 generation=1 exists=True,False", r.stdout)


class TwoProcessRecoveryTest(unittest.TestCase):
    """Two Gloo ranks; rank 1 is SIGKILLed after step 5 and replaced by the test (playing the
    agent). The replacement must take rank 0's state: both end with equal parameters, after
    exactly 12 steps, rank 0 in its first process."""

    def test_replacement_takes_the_survivors_state(self):
        master = master_store()
        out = Path(os.environ.get("TMPDIR", "/tmp")) / f"dgt-unit-{os.getpid()}"
        out.mkdir(exist_ok=True)
        procs, files = [], []

        def spawn(rank, restart):
            e = dict(os.environ, RANK=str(rank), WORLD_SIZE="2", MASTER_ADDR="127.0.0.1",
                     MASTER_PORT=str(master.port), TORCHELASTIC_RESTART_COUNT=str(restart),
                     DGT_RECOVERY_MODE="replace", OMP_NUM_THREADS="1")
            f = open(out / f"r{rank}.{restart}.out", "w+")
            files.append(f)
            p = subprocess.Popen([sys.executable, "-c", WORKER, str(REPO / "python"), "12", "5"],
                                 stdout=f, stderr=subprocess.STDOUT, env=e)
            procs.append(p)
            return p, f

        def read(f):
            f.flush()
            return Path(f.name).read_text()

        try:
            (p0, f0), (p1, f1) = spawn(0, 0), spawn(1, 0)
            deadline = time.monotonic() + 90
            while "STEP 5" not in read(f1):
                self.assertLess(time.monotonic(), deadline, read(f1))
                self.assertIsNone(p1.poll(), read(f1))
                time.sleep(0.05)
            p1.send_signal(signal.SIGKILL)
            p1.wait(timeout=10)
            keys.publish_rank_failure(client(master.port), "world", 1, "SIGKILL (test)")
            p2, f2 = spawn(1, 1)
            self.assertEqual(p0.wait(timeout=120), 0, read(f0))
            self.assertEqual(p2.wait(timeout=60), 0, read(f2))
            done0 = re.search(r"DONE steps=(\d+) recoveries=(\d+) params=(\S+)", read(f0))
            done2 = re.search(r"DONE steps=(\d+) recoveries=(\d+) params=(\S+)", read(f2))
            self.assertEqual(done0.group(1, 2), ("12", "1"), read(f0))
            self.assertEqual(done2.group(1, 2), ("12", "0"), read(f2))
            self.assertEqual(done0.group(3), done2.group(3))
            self.assertRegex(read(f2), r"JOINED gen=1 replacement=1 step=[56]\b")
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
                    p.wait(timeout=10)
            for f in files:
                f.close()



class StateLostTest(unittest.TestCase):
    """After a failure, a generation in which no member holds the state (every holder died)
    restarts from step 0 with a warning, or raises with on_state_lost='fail'."""

    def trainer(self, on_state_lost="restart"):
        t = recovery.Trainer.__new__(recovery.Trainer)
        t.group = SimpleNamespace(size=2, rank=0, generation=3, members=[0, 1])
        t.env = SimpleNamespace(rank=0)
        t.options = recovery.RecoveryOptions(on_state_lost=on_state_lost)
        t.step, t._has_state, t.device = 0, False, None
        return t

    @staticmethod
    def nobody_holds_state(out, tensor):
        for o in out:
            o.fill_(-1)

    def test_restart_warns_that_progress_is_lost(self):
        import contextlib
        import io
        from unittest import mock
        err = io.StringIO()
        with mock.patch.object(dist, "all_gather", self.nobody_holds_state), \
                contextlib.redirect_stderr(err):
            self.assertEqual(self.trainer()._sync_state(), (None, 0))
        self.assertEqual(err.getvalue(),
                         "dgt.recovery: rank 0: generation 3: no member holds the training state "
                         "(every process that held it failed); restarting from step 0: the "
                         "progress made so far is lost (RecoveryOptions(on_state_lost='fail') "
                         "raises instead, for a checkpoint-based restart)\n")

    def test_fail_raises(self):
        from unittest import mock
        with mock.patch.object(dist, "all_gather", self.nobody_holds_state):
            with self.assertRaises(recovery.RecoveryError) as cm:
                self.trainer("fail")._sync_state()
        self.assertEqual(str(cm.exception),
                         "dgt.recovery: rank 0: generation 3: no member holds the training state "
                         "(every process that held it failed); not restarting from step 0 "
                         "(RecoveryOptions.on_state_lost='fail')")

    def test_bad_value_is_named(self):
        with self.assertRaisesRegex(ValueError, "on_state_lost must be 'restart' or 'fail', got "
                                    "'ignore'"):
            recovery.Trainer(None, None, options=recovery.RecoveryOptions(on_state_lost="ignore"),
                             env=SimpleNamespace(rank=0))


class HeapFreezeTest(unittest.TestCase):
    def test_the_heap_is_frozen_before_each_ddp_wrapper(self):
        """recover()'s gc.collect() must not traverse torch's ~300k objects (0.56 s measured):
        _wrap freezes everything alive before building the wrapper, whose cycles stay young."""
        import gc
        import torch.nn.parallel as parallel
        seen = {}

        class FakeDDP:
            def __init__(self, module, **kwargs):
                seen.update(frozen=gc.get_freeze_count(), module=module, kwargs=kwargs)

        real = parallel.DistributedDataParallel
        gc.unfreeze()
        parallel.DistributedDataParallel = FakeDDP
        try:
            module = object()
            wrapper = recovery.Trainer._wrap(SimpleNamespace(ddp_kwargs={"find_unused": 1},
                                                             module=module))
        finally:
            parallel.DistributedDataParallel = real
            gc.unfreeze()
        self.assertIsInstance(wrapper, FakeDDP)
        self.assertIs(seen["module"], module)
        self.assertEqual(seen["kwargs"], {"find_unused": 1})
        self.assertGreater(seen["frozen"], 50_000)  # torch's modules, at least.


if __name__ == "__main__":
    unittest.main()


def tearDownModule():
    """Stopped watchers end within their watch_period (0.2 s here); a daemon thread still inside
    a TCPStore wait while the interpreter exits aborts it (exit code 134), so wait for them."""
    for t in threading.enumerate():
        if t.name.startswith("dgt-recovery-watch-"):
            t.join(timeout=5)
