"""In-place recovery of a real PyTorch DDP trainer (torch 2.x, Gloo, CPU) with the `dgt` Python
package: a dgt-rendezvous and 2 dgt-run agents x 2 ranks of examples/pytorch_ddp_recovery/train.py
on loopback, `--restart-policy rank`.
  - replace: ranks 1 and 2 (one per node) SIGKILLed at once, op_timeout shorter than the
    replacements' start; the agents restart them, they take the survivors' state and all 4
    ranks finish in generation 1 with bit-identical parameters equal to a one-process reference
    of the same steps; the survivors keep their PIDs;
  - shrink: rank 1 SIGKILLed, no restart; the 3 survivors finish, with parameters equal to
    the reference that averages over 4 ranks before the resume step and over the 3 survivors
    after it;
  - fork server (dgt-run's default): rank 1 SIGKILLed once both agents' fork servers are
    ready; the replacement is forked by its node's server (python -m dgt.forkserver, torch
    imported), takes a survivor's state, exact parameters;
  - standby: --standby-workers=1; rank 1 is replaced by its node's warm standby (the PID that was
    waiting before the kill), then rank 2 by a fresh spawn after its node's standby was killed
    (none ready); exact parameters.
Each test prints the time from the SIGKILL to every rank back at the step reached before it.
"""
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recovery_harness import DgtRunJob, agents_ok, last  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "pytorch_ddp_recovery" / "train.py"
WORLD = 4
STEPS = 150

# The reference: the example's model, data, loss and optimizer in one process, no DDP and no
# dgt; the gradient of each step is the mean over that step's members of each rank's gradient.
REFERENCE = r"""
import sys
sys.path.insert(0, sys.argv[1])
import train as T
# Each further argument: "steps:k:before:after" -> one digest line.
for spec in sys.argv[2:]:
    steps, k, before, after = spec.split(":")
    steps, k = int(steps), int(k)
    before = [int(r) for r in before.split(",")]
    after = [int(r) for r in after.split(",")]
    model = T.make_model()
    opt = T.make_optimizer(model)
    for s in range(steps):
        members = before if s < k else after
        total = None
        for r in members:
            model.zero_grad()
            T.loss_fn(model, *T.batch(s, r)).backward()
            g = [p.grad.clone() for p in model.parameters()]
            total = g if total is None else [a + b for a, b in zip(total, g)]
        for p, g in zip(model.parameters(), total):
            p.grad = g / len(members)
        opt.step()
    print(T.digest(model))
"""


def reference_digests(python, *runs):
    """The reference's digest for each (steps, k, members before step k, members from k on), in
    one process (importing torch once)."""
    specs = [f"{steps}:{k}:{','.join(map(str, a))}:{','.join(map(str, b))}"
             for steps, k, a, b in runs]
    r = subprocess.run([python, "-c", REFERENCE, str(EXAMPLE.parent)] + specs,
                       capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": str(REPO / "python")})
    assert r.returncode == 0, r.stderr
    out = r.stdout.split()
    assert len(out) == len(runs), r.stdout
    return out


@pytest.fixture
def job(dgt_run_job, python2):
    def make(run_id, mode):
        return dgt_run_job(run_id, policy="rank", mode=mode, steps=STEPS,
                           command=[python2, str(EXAMPLE), "--steps", str(STEPS), "--step-ms",
                                    "10", "--op-timeout", "20"],
                           env={"PYTHONPATH": str(REPO / "python"), "OMP_NUM_THREADS": "1"})
    return make


def kill_mid_run(j, rank, at_step=40):
    """Waits until `rank` completed `at_step` steps and SIGKILLs it; returns (first PIDs, the
    kill's time.time_ns(), the highest step any rank had completed before the kill)."""
    pids = j.joined_pids(timeout=90)
    assert sorted(pids) == list(range(WORLD))
    j.wait_events(lambda ev: any(r == rank and k == "step" and int(f["step"]) >= at_step
                                 for r, k, f in ev), 60, f"rank {rank} at step {at_step}")
    kill_ns = j.kill_pid(pids[rank])
    time.sleep(0.2)  # Events printed before the kill may still be on their way to the console.
    before = [int(f["step"]) for r, k, f in j.events()
              if k == "step" and int(f["t_ns"]) < kill_ns]
    assert not [1 for _, k, _ in j.events() if k == "done"], "the job ended before the kill"
    return pids, kill_ns, max(before)


def back_ms(ev, ranks, kill_ns, pre):
    """Milliseconds from the kill until every rank in `ranks` completed step `pre` (or a later
    one) in the recovered group: a step that a survivor finished after the kill but before it
    recovered (with the dead rank's data already in hand) does not count."""
    synced = {r: int(f["synced_ns"]) for r, f in last(ev, "synced").items()}
    back = []
    for rank in ranks:
        since = max(kill_ns, synced[rank])
        t = [int(f["t_ns"]) for r, k, f in ev
             if r == rank and k == "step" and int(f["t_ns"]) > since and int(f["step"]) >= pre]
        assert t, f"rank {rank} never got back to step {pre}"
        back.append(min(t))
    return (max(back) - kill_ns) / 1e6


def check_replaced(python2, done, pids, survivors, replaced, steps):
    """Replace mode's end: every rank finished `steps` steps in generation 1 with all 4 members
    and the one-process reference's digest; the survivors kept their processes (one recovery
    each), the replaced ranks are new processes that joined once."""
    assert sorted(done) == list(range(WORLD))
    for r in survivors:
        assert done[r]["pid"] == str(pids[r])  # The survivors were not restarted.
        assert done[r]["recoveries"] == "1"
    for r in replaced:
        assert done[r]["pid"] != str(pids[r]) and done[r]["recoveries"] == "0"
    for r in range(WORLD):
        assert done[r]["steps"] == str(steps)
        assert done[r]["members"] == "0,1,2,3"
        assert done[r]["generation"] == "1"
    [expected] = reference_digests(python2, (steps, steps, range(WORLD), range(WORLD)))
    assert {done[r]["digest"] for r in range(WORLD)} == {expected}


def test_shrink_continues_with_three_ranks_and_exact_parameters(job, python2, capsys):
    j = job("torch-shrink", "shrink")
    pids, kill_ns, pre = kill_mid_run(j, 1)
    agents_ok(j)
    ev = j.events()
    done = last(ev, "done")
    assert sorted(done) == [0, 2, 3]
    synced = last(ev, "synced")
    assert sorted(synced) == [0, 2, 3]
    resume = {int(f["resume"]) for f in synced.values()}
    assert len(resume) == 1
    k = resume.pop()
    assert pre - 1 <= k <= pre + 1, (pre, k)
    for r in (0, 2, 3):
        assert done[r]["pid"] == str(pids[r])
        assert done[r]["members"] == "0,2,3"
        assert done[r]["steps"] == str(STEPS)
        assert synced[r]["members"] == "0,2,3"
    assert len([1 for _, k, _ in ev if k == "joined"]) == 4  # No replacement.
    expected, four_ranks = reference_digests(python2, (STEPS, k, range(WORLD), [0, 2, 3]),
                                             (STEPS, STEPS, range(WORLD), range(WORLD)))
    assert {done[r]["digest"] for r in (0, 2, 3)} == {expected}
    assert expected != four_ranks  # The digest tells the runs apart.
    ms = back_ms(ev, (0, 2, 3), kill_ns, pre)
    with capsys.disabled():
        print(f"\nshrink: SIGKILL of rank 1 at step {pre} -> the 3 survivors back at step {pre}: "
              f"{ms:.0f} ms (resumed at step {k})")
    err = j.stderr(j.node_of(1))
    assert "continuing without it (--recovery-mode=shrink, 1 of --max-restarts=1)" in err, err


def test_replace_two_ranks_at_once_resume_from_a_survivor_with_exact_parameters(
        tmp_path, python2, capsys):
    """Ranks 1 and 2 (one on each node) SIGKILLed within 50 ms, op_timeout (2 s) shorter than a
    replacement's start (Python + torch import, 3-10 s here; a repro of survivors that gave
    up on their own timeouts and never met the replacements). Every rank forms generation 1
    once both replacements arrive; they take a survivor's state; the survivors keep their PIDs;
    all end with the parameters of a one-process reference."""
    j = DgtRunJob(tmp_path, "torch-replace-two", policy="rank", mode="replace", steps=STEPS,
                  max_restarts=3, extra=["--fork-server=off"],  # Slow, fresh replacements.
                  command=[python2, str(EXAMPLE), "--steps", str(STEPS), "--step-ms", "10",
                           "--op-timeout", "2"],
                  env={"PYTHONPATH": str(REPO / "python"), "OMP_NUM_THREADS": "1"})
    try:
        pids = j.joined_pids(timeout=90)
        assert sorted(pids) == list(range(WORLD))
        assert j.node_of(1) != j.node_of(2)
        j.wait_events(lambda ev: any(r == 1 and k == "step" and int(f["step"]) >= 20
                                     for r, k, f in ev), 60, "rank 1 at step 20")
        kill_ns = j.kill_pid(pids[1])
        j.kill_pid(pids[2])
        assert time.time_ns() - kill_ns < 50_000_000
        time.sleep(0.2)  # Events printed before the kill may still be on their way.
        pre = max(int(f["step"]) for r, k, f in j.events()
                  if k == "step" and int(f["t_ns"]) < kill_ns)
        agents_ok(j)
        ev = j.events()
        done = last(ev, "done")
        check_replaced(python2, done, pids, (0, 3), (1, 2), STEPS)
        assert len([1 for _, k, _ in ev if k == "joined"]) == 6  # Only ranks 1 and 2 twice.
        synced = last(ev, "synced")
        assert sorted(synced) == [0, 1, 2, 3]
        resume = {int(f["resume"]) for f in synced.values()}
        assert len(resume) == 1
        k = resume.pop()
        # The furthest survivor's step: the step in flight at the kill may be lost, or
        # completed after it by a survivor that had all the dead ranks' data.
        assert pre - 1 <= k <= pre + 1, (pre, k)
        for r in (1, 2):
            assert synced[r]["replacement"] == "1" and synced[r]["source"] in ("0", "3")
        ms = back_ms(ev, range(WORLD), kill_ns, pre)
        with capsys.disabled():  # Shown in CI logs, too.
            print(f"\nreplace: SIGKILL of ranks 1 and 2 at step {pre} -> all 4 ranks back at "
                  f"step {pre}: {ms:.0f} ms (resumed at step {k})")
        for r in (1, 2):
            err = j.stderr(j.node_of(r))
            assert f"published the failure of rank {r}: recovery generation 1" in err, err
        for i in range(2):
            assert "RecoveryError" not in j.stderr(i), j.stderr(i)[-3000:]
    finally:
        j.close()


FORK_SERVER_READY = re.compile(r"dgt-run: fork server pid (\d+) is ready")


def test_replace_through_the_fork_server_with_exact_parameters(tmp_path, python2, capsys):
    """Rank 1 SIGKILLed once both agents logged their fork server ready: the agent forks the
    replacement from it (a child of the server, not of the agent), it takes a survivor's state,
    and all 4 ranks end in generation 1 with the parameters of a one-process reference."""
    j = DgtRunJob(tmp_path, "torch-fork", policy="rank", mode="replace", steps=STEPS,
                  max_restarts=1,
                  command=[python2, str(EXAMPLE), "--steps", str(STEPS), "--step-ms", "10",
                           "--op-timeout", "20"],
                  env={"PYTHONPATH": str(REPO / "python"), "OMP_NUM_THREADS": "1"})
    try:
        deadline = time.monotonic() + 120
        while not all(FORK_SERVER_READY.search(j.stderr(i)) for i in range(2)):
            assert time.monotonic() < deadline, "fork servers never ready"
            time.sleep(0.05)
        pids, kill_ns, pre = kill_mid_run(j, 1)
        n1 = j.node_of(1)
        [server] = [int(p) for p in FORK_SERVER_READY.findall(j.stderr(n1))]
        assert server not in pids.values()
        ev = j.wait_events(lambda ev: sum(1 for r, k, f in ev if r == 1 and k == "joined") == 2,
                           60, "rank 1's replacement to join")
        [_, joined] = [f for r, k, f in ev if r == 1 and k == "joined"]
        forked = int(joined["pid"])
        assert forked not in pids.values() and joined["replacement"] == "1"
        err = j.stderr(n1)
        assert (f"restarted rank 1 (attempt 1) as pid {forked}, forked by the fork server"
                in err), err
        with open(f"/proc/{forked}/stat") as f:  # The server's child, not the agent's.
            assert int(f.read().rsplit(")", 1)[1].split()[1]) == server
        agents_ok(j)
        ev = j.events()
        ms = back_ms(ev, range(WORLD), kill_ns, pre)
        done = last(ev, "done")
        assert sorted(done) == [0, 1, 2, 3]
        assert done[1]["pid"] == str(forked)
        for r in (0, 2, 3):
            assert done[r]["pid"] == str(pids[r]) and done[r]["recoveries"] == "1"
        for r in range(WORLD):
            assert done[r]["steps"] == str(STEPS)
            assert done[r]["generation"] == "1"
            assert done[r]["members"] == "0,1,2,3"
        [expected] = reference_digests(python2, (STEPS, STEPS, range(WORLD), range(WORLD)))
        assert {done[r]["digest"] for r in range(WORLD)} == {expected}
        assert last(ev, "synced")[1]["replacement"] == "1"
        with capsys.disabled():
            print(f"\nfork server: SIGKILL of rank 1 at step {pre} -> all 4 ranks back at step "
                  f"{pre}: {ms:.0f} ms")
        for i in range(2):
            assert "RecoveryError" not in j.stderr(i), j.stderr(i)[-3000:]
    finally:
        j.close()


STANDBY_READY = re.compile(r"dgt-run: standby pid (\d+) is ready")


def ready_standbys(j, node):
    return [int(p) for p in STANDBY_READY.findall(j.stderr(node))]


def test_replace_from_warm_standby_then_fallback_spawn_with_exact_parameters(
        tmp_path, python2, capsys):
    """--standby-workers=1: each agent keeps one process of the trainer waiting in
    `import dgt.recovery` (torch imported). Rank 1 SIGKILLed: the replacement is its node's
    standby (same PID as before the kill), back at the pre-kill step. Then rank 2's node loses its
    standby and rank 2 at once: no standby is ready, the agent spawns a fresh process. All 4 ranks
    finish in generation 2 with the parameters of a one-process reference."""
    steps = 300
    j = DgtRunJob(tmp_path, "torch-standby", policy="rank", mode="replace", steps=steps,
                  max_restarts=2, extra=["--standby-workers=1"],
                  command=[python2, str(EXAMPLE), "--steps", str(steps), "--step-ms", "10",
                           "--op-timeout", "20"],
                  env={"PYTHONPATH": str(REPO / "python"), "OMP_NUM_THREADS": "1"})
    try:
        pids = j.joined_pids(timeout=90)
        assert sorted(pids) == list(range(WORLD))
        n1, n2 = j.node_of(1), j.node_of(2)
        assert n1 != n2
        deadline = time.monotonic() + 90
        while not (ready_standbys(j, 0) and ready_standbys(j, 1)):
            assert time.monotonic() < deadline, "standbys never ready"
            time.sleep(0.05)
        [standby1] = ready_standbys(j, n1)
        [standby2] = ready_standbys(j, n2)
        assert standby1 not in pids.values() and standby2 not in pids.values()

        # 1. Rank 1 dies; its node's standby takes its place.
        j.wait_events(lambda ev: any(r == 1 and k == "step" and int(f["step"]) >= 20
                                     for r, k, f in ev), 60, "rank 1 at step 20")
        kill_ns = j.kill_pid(pids[1])
        time.sleep(0.2)
        pre = max(int(f["step"]) for r, k, f in j.events()
                  if k == "step" and int(f["t_ns"]) < kill_ns)
        ev = j.wait_events(lambda ev: sum(1 for r, k, f in ev if r == 1 and k == "joined") == 2,
                           60, "rank 1's replacement to join")
        joined1 = [f for r, k, f in ev if r == 1 and k == "joined"]
        assert joined1[1]["pid"] == str(standby1)
        assert joined1[1]["replacement"] == "1"

        def all_back(ev):
            synced = last(ev, "synced")
            return len(synced) == WORLD and all(
                any(r == rank and k == "step" and int(f["step"]) >= pre
                    and int(f["t_ns"]) > max(kill_ns, int(synced[rank]["synced_ns"]))
                    for r, k, f in ev) for rank in range(WORLD))
        ev = j.wait_events(all_back, 60, f"every rank back at step {pre}")
        ms = back_ms(ev, range(WORLD), kill_ns, pre)
        err1 = j.stderr(n1)
        assert f"standby pid {standby1} takes rank 1 (local rank 1)" in err1, err1
        assert f"restarted rank 1 (local rank 1) as pid {standby1}" in err1, err1

        # 2. Rank 2's node: its standby dies, then rank 2; no standby is ready.
        resume = int(last(ev, "synced")[2]["resume"])
        j.wait_events(lambda ev: any(r == 2 and k == "step" and int(f["step"]) >= resume + 20
                                     for r, k, f in ev), 60, "rank 2 20 steps after recovery")
        os.kill(standby2, signal.SIGKILL)
        deadline = time.monotonic() + 30
        while f"standby pid {standby2} was killed by signal 9" not in j.stderr(n2):
            assert time.monotonic() < deadline, "the agent did not see its standby die"
            time.sleep(0.01)
        j.kill_pid(pids[2])
        agents_ok(j)
        ev = j.events()
        joined2 = [f for r, k, f in ev if r == 2 and k == "joined"]
        assert len(joined2) == 2
        fresh = int(joined2[1]["pid"])
        assert fresh not in (pids[2], standby2) and fresh not in ready_standbys(j, n2)
        err2 = j.stderr(n2)
        assert "rank 2: no standby is ready; starting a fresh process" in err2, err2
        assert f"restarted rank 2 (local rank 0) as pid {fresh}" in err2, err2

        done = last(ev, "done")
        assert sorted(done) == [0, 1, 2, 3]
        assert done[1]["pid"] == str(standby1) and done[2]["pid"] == str(fresh)
        for r in (0, 3):
            assert done[r]["pid"] == str(pids[r]) and done[r]["recoveries"] == "2"
        for r in range(WORLD):
            assert done[r]["steps"] == str(steps)
            assert done[r]["generation"] == "2"
            assert done[r]["members"] == "0,1,2,3"
        [expected] = reference_digests(python2, (steps, steps, range(WORLD), range(WORLD)))
        assert {done[r]["digest"] for r in range(WORLD)} == {expected}
        with capsys.disabled():
            print(f"\nstandby: SIGKILL of rank 1 at step {pre} -> all 4 ranks back at step "
                  f"{pre}: {ms:.0f} ms")
        for i in range(2):
            assert "RecoveryError" not in j.stderr(i), j.stderr(i)[-3000:]
    finally:
        j.close()


@pytest.mark.parametrize("helper", ["fork-server", "standbys"])
def test_whole_node_lost_the_spare_replaces_its_ranks_in_place(tmp_path, python2, capsys, helper):
    """--nnodes=2 with a third agent waiting as a hot spare, which warms up its fork server (the
    default) or --standby-workers=2 while it waits. kill -9 of node rank 1's agent and workers:
    the spare takes node rank 1 in an in-place round (the same MASTER_ADDR:MASTER_PORT),
    publishes the failures of ranks 2 and 3 and starts them as replacements from its warm
    processes; node rank 0's workers go on (same PIDs) and give them their state; all 4 ranks
    end in generation 1 with the parameters of a one-process reference."""
    steps = 1500  # Long enough for the spare's fork server to import torch first.
    ready = FORK_SERVER_READY if helper == "fork-server" else STANDBY_READY
    j = DgtRunJob(tmp_path, "torch-spare", policy="rank", mode="replace", steps=steps,
                  max_restarts=1,
                  extra=["--standby-workers=2"] if helper == "standbys" else [],
                  command=[python2, str(EXAMPLE), "--steps", str(steps), "--step-ms", "10",
                           "--op-timeout", "20"],
                  env={"PYTHONPATH": str(REPO / "python"), "OMP_NUM_THREADS": "1"})
    try:
        pids = j.joined_pids(timeout=90)
        assert sorted(pids) == list(range(WORLD))
        assert [j.node_of(r) for r in range(WORLD)] == [0, 0, 1, 1]
        spare = j.add_agent()
        deadline = time.monotonic() + 120
        # The spare warms up its fork server or standbys while it waits (torch imported).
        while len(ready.findall(j.stderr(spare))) < (1 if helper == "fork-server" else 2):
            assert time.monotonic() < deadline, j.stderr(spare)
            time.sleep(0.05)
        warm = [int(p) for p in ready.findall(j.stderr(spare))]
        assert "this node waits as a hot spare" in j.stderr(spare)
        what = "its fork server" if helper == "fork-server" else "2 standby worker(s)"
        assert f"this spare warms up {what} for the ranks it may take" in j.stderr(spare)
        at = max(int(f["step"]) for r, k, f in j.events() if k == "step") + 5
        j.wait_events(lambda ev: any(r == 2 and k == "step" and int(f["step"]) >= at
                                     for r, k, f in ev), 60, f"rank 2 at step {at}")
        kill_ns = j.kill_node(1)
        time.sleep(0.2)  # Events printed before the kill may still be on their way.
        pre = max(int(f["step"]) for r, k, f in j.events()
                  if k == "step" and int(f["t_ns"]) < kill_ns)
        codes = j.wait(timeout=120)
        assert codes[0] == 0 and codes[spare] == 0, (codes, j.stderr(0)[-3000:],
                                                     j.stderr(spare)[-3000:])
        ev = j.events()
        done = last(ev, "done")
        check_replaced(python2, done, pids, (0, 1), (2, 3), steps)
        assert {j.node_of(r) for r in (2, 3)} <= {1, spare}
        synced = last(ev, "synced")
        for r in (2, 3):
            assert synced[r]["replacement"] == "1" and synced[r]["source"] in ("0", "1")
        reason = ("node lost: node node-1 (127.0.0.1) was lost (in place: the survivors keep "
                  "their workers)")
        survivor, taken = j.stderr(0), j.stderr(spare)
        assert (f"run 'torch-spare' moves to round 1 ({reason}); this node's workers go on"
                in survivor), survivor
        assert (f"run 'torch-spare' round 1 ({reason}): node rank 0 of 2, ranks 0..1 of world "
                f"size 4; the workers go on") in survivor, survivor
        assert (f"run 'torch-spare' round 1 ({reason}): node rank 1 of 2, ranks 2..3 of world "
                f"size 4") in taken, taken
        assert "published the failures of ranks 2..3" in taken, taken
        assert "restarted 2 worker(s) with TORCHELASTIC_RESTART_COUNT=1" in taken, taken
        for r in (2, 3):  # From the spare's warm processes: torch was imported already.
            if helper == "fork-server":
                assert (f"restarted rank {r} (attempt 1) as pid {done[r]['pid']}, forked by the "
                        f"fork server") in taken, taken
            else:
                assert int(done[r]["pid"]) in warm
                assert (f"standby pid {done[r]['pid']} takes rank {r} (local rank {r - 2})"
                        in taken), taken
        ms = back_ms(ev, range(WORLD), kill_ns, pre)
        with capsys.disabled():
            print(f"\nspare in place ({helper}): kill -9 of node rank 1 at step {pre} -> all 4 "
                  f"ranks back at step {pre}: {ms:.0f} ms")
        for i in (0, spare):
            assert "RecoveryError" not in j.stderr(i), j.stderr(i)[-3000:]
    finally:
        j.close()


def test_node_rank_zero_keeps_its_rank_through_an_ordinary_round_with_its_fork_server(
        tmp_path, python2):
    """--nnodes=1:2, no spare: kill -9 of node rank 1 once node rank 0's fork server is ready. Node
    rank 0 goes on alone in round 1 (an ordinary round: its workers and fork server restart) and
    ends 0 with the parameters of a one-rank run. A repro of an agent that blocked for good in
    waitpid on its new, live fork server: Asio completed the new server's exit wait with the
    readiness of a descriptor closed in the same event batch (6 of 9 runs)."""
    steps = 600
    j = DgtRunJob(tmp_path, "torch-r0", policy="rank", mode="replace", steps=steps, nnodes="1:2",
                  max_restarts=1,
                  command=[python2, str(EXAMPLE), "--steps", str(steps), "--step-ms", "10",
                           "--op-timeout", "20"],
                  env={"PYTHONPATH": str(REPO / "python"), "OMP_NUM_THREADS": "1"})
    try:
        pids = j.joined_pids(timeout=90)
        assert sorted(pids) == [0, 1, 2, 3]
        deadline = time.monotonic() + 120
        while not FORK_SERVER_READY.search(j.stderr(0)):
            assert time.monotonic() < deadline, j.stderr(0)
            time.sleep(0.05)
        j.kill_node(1)
        codes = j.wait(timeout=120)
        assert codes[0] == 0, (codes, j.stderr(0)[-3000:])
        err = j.stderr(0)
        assert ("round 1 (node lost: node node-1 (127.0.0.1) was lost): node rank 0 of 1, ranks "
                "0..1 of world size 2") in err, err
        done = last(j.events(), "done")
        assert sorted(done) == [0, 1]
        [expected] = reference_digests(python2, (steps, steps, [0, 1], [0, 1]))
        assert {done[r]["digest"] for r in (0, 1)} == {expected}
        for r in (0, 1):
            assert done[r]["steps"] == str(steps) and done[r]["pid"] != str(pids[r])
    finally:
        j.close()
