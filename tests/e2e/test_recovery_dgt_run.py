"""In-place recovery under the real launcher: a dgt-rendezvous and 2 dgt-run agents x 2 ranks of
examples/allreduce_trainer on Gloo (loopback). A kill -9 of one rank mid-run:
  - `--restart-policy rank`: only that rank is restarted (same RANK, TORCHELASTIC_RESTART_COUNT
    1) and the agent publishes the failure into the job's store; the other three processes keep
    their PIDs and every rank ends with the exact total;
  - `--restart-policy group` (torchrun's): a new rendezvous round restarts all four;
  - `--recovery-mode shrink`: no restart; the three survivors finish with the exact total.
"""
import re
import sys
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recovery_harness import agents_ok, full_total, last  # noqa: E402

WORLD = 4
STEPS = 300


@pytest.fixture
def job(dgt_run_job):
    return lambda run_id, **kw: dgt_run_job(run_id, steps=STEPS, **kw)


def kill_mid_run(j, rank):
    """Waits for every rank, lets ~60 steps run, SIGKILLs `rank`; returns the first PIDs."""
    pids = j.joined_pids()
    assert sorted(pids) == list(range(WORLD))
    time.sleep(0.6)
    assert not [1 for _, k, _ in j.events() if k == "done"], "the job ended before the kill"
    j.kill_pid(pids[rank])
    return pids


def test_rank_policy_restarts_only_the_dead_rank(job):
    j = job("recovery-rank", policy="rank", mode="replace")
    pids = kill_mid_run(j, 2)
    agents_ok(j)
    ev = j.events()
    done = last(ev, "done")
    assert sorted(done) == [0, 1, 2, 3]
    for r in (0, 1, 3):
        assert done[r]["pid"] == str(pids[r])  # The same process finished the job.
        assert done[r]["recoveries"] == "1"
    assert done[2]["pid"] != str(pids[2])
    for r in range(WORLD):
        assert done[r]["total"] == str(full_total(WORLD, STEPS))
        assert done[r]["steps"] == str(STEPS)
        assert done[r]["members"] == "0,1,2,3"
        assert done[r]["generation"] == "1"
    # Rank 2's second process is the replacement, started once, with the next restart count.
    joined2 = [f for r, k, f in ev if r == 2 and k == "joined"]
    assert len(joined2) == 2
    assert joined2[1]["replacement"] == "1" and joined2[1]["generation"] == "1"
    assert len([1 for r, k, _ in ev if k == "joined"]) == 5  # Nobody else started twice.
    assert int(last(ev, "synced")[2]["resume"]) > 0           # It got the survivors' state.
    n = j.node_of(2)
    err = j.stderr(n)
    assert re.search(rf"restarted rank 2 \(local rank 0\) as pid {done[2]['pid']} with "
                     r"TORCHELASTIC_RESTART_COUNT=1 \(1 of --max-restarts=1\)", err), err
    assert "published the failure of rank 2: recovery generation 1" in err, err
    other = j.stderr(1 - n)
    assert "restarted" not in other and "round 1" not in other, other


def test_rank_policy_two_failures_on_two_nodes_converge(job):
    """Issue 6's livelock: two ranks of different nodes die ~20 ms apart, so one survivor may be
    bootstrapping generation 1 with a member that died after publishing its address when its
    agent opens generation 2. That bootstrap must be abandoned at once (not after 5 x
    --init-timeout) and every rank must meet in the newest generation."""
    j = job("recovery-two", policy="rank", mode="replace")
    pids = j.joined_pids()
    assert sorted(pids) == list(range(WORLD))
    time.sleep(0.6)
    assert not [1 for _, k, _ in j.events() if k == "done"], "the job ended before the kills"
    first = next(r for r in range(WORLD) if j.node_of(r) == 0)
    second = next(r for r in range(WORLD) if j.node_of(r) == 1)
    t0 = time.monotonic()
    j.kill_pid(pids[first])
    time.sleep(0.02)
    j.kill_pid(pids[second])
    agents_ok(j)
    # Far below one --init-timeout (30 s): nobody waited out a generation that lost a member.
    assert time.monotonic() - t0 < 20
    ev = j.events()
    done = last(ev, "done")
    assert sorted(done) == [0, 1, 2, 3]
    generations = {done[r]["generation"] for r in range(WORLD)}
    assert len(generations) == 1 and int(generations.pop()) >= 1
    for r in range(WORLD):
        assert done[r]["total"] == str(full_total(WORLD, STEPS))
        assert done[r]["steps"] == str(STEPS)
        assert done[r]["members"] == "0,1,2,3"
        if r in (first, second):
            assert done[r]["pid"] != str(pids[r])
        else:
            assert done[r]["pid"] == str(pids[r])  # The same process finished the job.
    assert len([1 for r, k, _ in ev if k == "joined"]) == 6  # Two replacements, nobody else.


def test_group_policy_restarts_every_rank_in_a_new_round(job):
    j = job("recovery-group", policy="group")
    pids = kill_mid_run(j, 2)
    agents_ok(j)
    ev = j.events()
    done = last(ev, "done")
    assert sorted(done) == [0, 1, 2, 3]
    for r in range(WORLD):
        assert done[r]["pid"] != str(pids[r])  # Everyone was restarted.
        assert done[r]["recoveries"] == "0"    # Fresh processes: nothing to recover.
        assert done[r]["total"] == str(full_total(WORLD, STEPS))
        assert done[r]["members"] == "0,1,2,3"
    assert len([1 for r, k, _ in ev if k == "joined"]) == 8
    for i in range(2):
        assert "restarted 2 worker(s) with TORCHELASTIC_RESTART_COUNT=1" in j.stderr(i), \
            j.stderr(i)
        assert "published the failure" not in j.stderr(i)


def test_shrink_mode_finishes_with_three_ranks(job):
    j = job("recovery-shrink", policy="rank", mode="shrink")
    pids = kill_mid_run(j, 1)
    agents_ok(j)
    ev = j.events()
    done = last(ev, "done")
    assert sorted(done) == [0, 2, 3]
    resume = {r: int(f["resume"]) for r, f in last(ev, "synced").items()}
    assert sorted(resume) == [0, 2, 3] and len(set(resume.values())) == 1
    k = resume[0]
    assert 0 < k < STEPS
    expected = full_total(WORLD, k) + sum((m + 1) * 1000 + s for s in range(k, STEPS)
                                          for m in (0, 2, 3))
    for r in (0, 2, 3):
        assert done[r]["pid"] == str(pids[r])
        assert done[r]["members"] == "0,2,3"
        assert done[r]["total"] == str(expected)
        assert done[r]["steps"] == str(STEPS)
    assert len([1 for r, k, _ in ev if k == "joined"]) == 4  # No replacement.
    err = j.stderr(j.node_of(1))
    assert "continuing without it (--recovery-mode=shrink, 1 of --max-restarts=1)" in err, err
    assert "published the failure of rank 1: recovery generation 1" in err, err
