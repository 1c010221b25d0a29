"""In-place recovery end to end on CPU (Gloo): 4 ranks of examples/allreduce_trainer against a
`dgt store serve` store, with recovery_harness.Job playing the agent's restart policy."""
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))
from recovery_harness import Job, full_total  # noqa: E402

WORLD = 4
STEPS = 300


@pytest.fixture
def job(tmp_path, request):
    jobs = []

    def make(**kw):
        j = Job(tmp_path, world=WORLD, steps=STEPS, **kw)
        jobs.append(j)
        return j

    yield make
    for j in jobs:
        j.close()


def done_events(job):
    out = {}
    for r, w in job.workers.items():
        ev = [f for k, f in w.events() if k == "done"]
        assert ev, f"rank {r} (pid {w.pid}) did not finish: {w.stderr()[-2000:]}"
        out[r] = ev[-1]
    return out


def test_kill_one_rank_replace_in_place(job):
    j = job(mode="replace")
    j.start()
    survivors = {r: j.workers[r].pid for r in (0, 1, 3)}
    j.wait_for_step(2, 80)
    j.kill_rank(2)
    j.replace_rank(2)
    codes = j.wait_all(timeout=90)
    assert codes == {0: 0, 1: 0, 2: 0, 3: 0}, {r: w.stderr()[-2000:] for r, w in j.workers.items()}
    done = done_events(j)
    for r, pid in survivors.items():
        assert j.workers[r].pid == pid                   # Not restarted.
        assert done[r]["pid"] == str(pid)                # The same process finished the job.
        assert done[r]["recoveries"] == "1"
    assert j.workers[2].restart_count == 1
    for r in range(WORLD):
        assert done[r]["total"] == str(full_total(WORLD, STEPS))
        assert done[r]["steps"] == str(STEPS)
        assert done[r]["members"] == "0,1,2,3"
        assert done[r]["generation"] == "1"
    replacement = dict(j.workers[2].events())
    assert replacement["joined"]["replacement"] == "1"
    assert int(replacement["synced"]["resume"]) > 0      # It got the survivors' state.


def test_kill_one_rank_shrink(job):
    j = job(mode="shrink")
    j.start()
    j.wait_for_step(1, 80)
    j.kill_rank(1)
    j.report_failure(1)
    del j.workers[1]
    codes = j.wait_all(timeout=90)
    assert codes == {0: 0, 2: 0, 3: 0}, {r: w.stderr()[-2000:] for r, w in j.workers.items()}
    done = done_events(j)
    resume = {r: int(dict(w.events())["synced"]["resume"]) for r, w in j.workers.items()}
    assert len(set(resume.values())) == 1
    k = resume[0]
    expected = full_total(WORLD, k) + sum((m + 1) * 1000 + s for s in range(k, STEPS)
                                          for m in (0, 2, 3))
    for r in (0, 2, 3):
        assert done[r]["members"] == "0,2,3"
        assert done[r]["total"] == str(expected)
        assert done[r]["steps"] == str(STEPS)


def test_kill_one_rank_group_restart(job):
    j = job(mode="replace")
    j.start()
    first_pids = {r: w.pid for r, w in j.workers.items()}
    j.wait_for_step(2, 80)
    j.kill_rank(2)
    j.restart_group(fresh_store=True)
    codes = j.wait_all(timeout=90)
    assert codes == {0: 0, 1: 0, 2: 0, 3: 0}, {r: w.stderr()[-2000:] for r, w in j.workers.items()}
    done = done_events(j)
    for r in range(WORLD):
        assert j.workers[r].pid != first_pids[r]         # Everyone was restarted.
        assert done[r]["total"] == str(full_total(WORLD, STEPS))
        assert done[r]["recoveries"] == "0"


def test_two_ranks_killed_one_after_the_other(job):
    j = job(mode="replace")
    j.start()
    survivors = {r: j.workers[r].pid for r in (0, 3)}
    j.wait_for_step(2, 60)
    j.kill_rank(2)
    j.replace_rank(2)
    j.wait_for_step(1, 30)
    j.kill_rank(1)
    j.replace_rank(1)
    codes = j.wait_all(timeout=120)
    assert codes == {0: 0, 1: 0, 2: 0, 3: 0}, {r: w.stderr()[-2000:] for r, w in j.workers.items()}
    done = done_events(j)
    for r, pid in survivors.items():
        assert j.workers[r].pid == pid
        assert done[r]["pid"] == str(pid)
    for r in range(WORLD):
        assert done[r]["total"] == str(full_total(WORLD, STEPS))
        assert done[r]["members"] == "0,1,2,3"
        assert done[r]["generation"] == "2"          # Two recoveries, one after the other.
