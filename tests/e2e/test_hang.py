"""dgt-run's hang detection (docs/RECOVERY.md "Hang detection"): --hang-timeout and
--first-progress-timeout on real workers.
  - a Python rank that stops reporting (dgt.progress()) is killed after --hang-timeout: its
    stacks, with the function it hangs in, are in the log and in the failure summary, and the
    failure takes the restart policy's path (group, no restarts left: exit 137); one that hangs
    before its first report is killed after --first-progress-timeout, with its stacks too;
  - a worker that never reports (a non-Python one) is killed after --first-progress-timeout,
    with the note that it left no stacks; without that flag it runs to its end;
  - the C++ example trainer (dgt::worker::Progress), --restart-policy rank: a SIGSTOPped rank is
    replaced in place, the survivors keep their PIDs and every step's sum is exact;
  - torch 2.13 DDP with dgt.recovery, 2 agents x 2 ranks, --restart-policy rank: a SIGSTOPped
    rank, and one whose step loops forever (its stacks naming train_step), are detected, killed
    and replaced in place; the survivors (blocked in the all-reduce on it) keep their PIDs, and
    every rank ends with the parameters of a one-process reference.
Each test prints the time from the hung rank's last report to its detection.
"""
import os
import re
import signal
import sys
import time
from pathlib import Path


sys.path.insert(0, str(Path(__file__).resolve().parent))
from conftest import BIN, PYTHON, WORKERS, Proc, dgt_env  # noqa: E402
from recovery_harness import DgtRunJob, agents_ok, last  # noqa: E402
from test_recovery_torch import (EXAMPLE, REPO, WORLD, back_ms,  # noqa: E402
                                 reference_digests)

HUNG = re.compile(r"dgt-run: rank (\d+) \(local rank (\d+), pid (\d+)\) hung: (.*?); (.*) "
                  r"\(detected_ns=(\d+)\)")
PY_ENV = {"PYTHONPATH": str(REPO / "python")}


def last_reports(stdout):
    """{rank: (n, t_ns)} of each rank's last `LAST` line."""
    out = {}
    for m in re.finditer(r"^\[rank(\d+)\]: LAST rank=\d+ n=(\d+) t_ns=(\d+)$", stdout, re.M):
        out[int(m.group(1))] = (int(m.group(2)), int(m.group(3)))
    return out


def test_python_rank_that_stops_reporting_is_killed_with_its_stacks(tmp_path, capsys):
    p = Proc([BIN / "dgt-run", "--standalone", "--nproc-per-node=2", "--hang-timeout=1",
              "--no-python", PYTHON, WORKERS / "hang_worker.py", "--steps", "3000",
              "--hang-rank", "1", "--hang-after", "20"], tmp_path, "run",
             env=dgt_env(**PY_ENV))
    try:
        assert p.wait(timeout=120) == 137, p.stderr[-3000:]
    finally:
        p.kill()
    err = p.stderr
    [hung] = HUNG.findall(err)
    rank, local, pid, reason, action, detected_ns = hung
    assert (rank, local, action) == ("1", "1", "writing its stacks, then SIGKILL")
    m = re.fullmatch(r"no progress report for (\d\.\d) s \(--hang-timeout=1\), after 20 reports",
                     reason)
    assert m and 1.0 <= float(m.group(1)) <= 1.1, reason
    n, last_ns = last_reports(p.stdout)[1]
    assert n == 20
    ms = (int(detected_ns) - last_ns) / 1e6
    assert 1000 < ms < 1000 + 200, ms
    # The summary: the root cause is the hung rank, with its stacks (faulthandler's dump of
    # every thread, the function it hangs in named).
    summary = err[err.index("Root cause (first failure):"):]
    assert f"  rank 1 (local rank 1), host " in summary
    assert f"pid {pid}, attempt 0\n    signal 9 (SIGKILL) at " in summary
    assert f"    hung: {reason}\n    stacks (" in summary
    stacks = summary[summary.index("    stacks ("):]
    assert re.search(r"stacks \(\S+/attempt_0/1/stacks\.txt\):\n      (Current thread|Thread) "
                     r"0x[0-9a-f]+ \(most recent call first\):\n", stacks), stacks
    assert re.search(r'File ".*hang_worker\.py", line \d+ in stuck_in_here\n', stacks), stacks
    assert re.search(r'File ".*hang_worker\.py", line \d+ in main\n', stacks), stacks
    assert "dgt-run: stacks of rank 1 (pid " in err  # Logged at the kill as well.
    # The temporary log directory stays for the stack file the summary names.
    stacks_file = re.search(r"    stacks \((\S+)\):", summary).group(1)
    assert f"\nkept: {stacks_file[:-len('/attempt_0/1/stacks.txt')]} (the temporary log " in err
    assert "in stuck_in_here" in Path(stacks_file).read_text()
    with capsys.disabled():
        print(f"\nhang: rank 1's last report -> detected: {ms:.0f} ms (--hang-timeout=1)")


def test_python_rank_behind_a_shell_wrapper_gives_its_stacks(tmp_path):
    # `--no-python sh -c 'python ...'` (how dgt-agent runs a job's command): the Python process
    # that registered the stack dump is the worker's child. The dump's signal goes to it, not to
    # the shell (which has no handler and would die of it).
    script = (f"{PYTHON} {WORKERS / 'hang_worker.py'} --steps 3000 --hang-rank 1 "
              f"--hang-after 20; echo wrapper-saw-$?")
    p = Proc([BIN / "dgt-run", "--standalone", "--nproc-per-node=2", "--hang-timeout=1",
              "--no-python", "/bin/sh", "-c", script], tmp_path, "run", env=dgt_env(**PY_ENV))
    try:
        assert p.wait(timeout=120) == 137, p.stderr[-3000:]
    finally:
        p.kill()
    err = p.stderr
    [hung] = HUNG.findall(err)
    assert (hung[0], hung[1], hung[4]) == ("1", "1", "writing its stacks, then SIGKILL")
    summary = err[err.index("Root cause (first failure):"):]
    assert "signal 9 (SIGKILL) at " in summary
    assert "signal 40" not in err and "SIG?" not in err
    assert re.search(r'File ".*hang_worker\.py", line \d+ in stuck_in_here\n', summary), summary


def test_python_rank_that_hangs_before_its_first_report_is_killed_with_its_stacks(tmp_path):
    """A hang in the first step: only --first-progress-timeout covers it."""
    p = Proc([BIN / "dgt-run", "--standalone", "--nproc-per-node=2", "--hang-timeout=0.5",
              "--first-progress-timeout=1.5", "--no-python", PYTHON, WORKERS / "hang_worker.py",
              "--steps", "3000", "--hang-rank", "0", "--hang-after", "0"], tmp_path, "run",
             env=dgt_env(**PY_ENV))
    try:
        assert p.wait(timeout=120) == 137, p.stderr[-3000:]
    finally:
        p.kill()
    err = p.stderr
    [hung] = HUNG.findall(err)
    assert hung[0:2] == ("0", "0") and hung[4] == "writing its stacks, then SIGKILL"
    assert re.fullmatch(r"no progress report since its start, silent for 1\.[56] s "
                        r"\(--first-progress-timeout=1\.5\)", hung[3]), hung[3]
    assert 0 not in last_reports(p.stdout)  # Rank 0 never reported; rank 1 did all along.
    summary = err[err.index("Root cause (first failure):"):]
    assert "  rank 0 (local rank 0), host " in summary
    assert re.search(r'File ".*hang_worker\.py", line \d+ in stuck_in_here\n', summary), summary


def test_worker_that_never_reports_is_killed_after_the_first_progress_timeout(tmp_path):
    p = Proc([BIN / "dgt-run", "--standalone", "--nproc-per-node=1",
              "--first-progress-timeout=0.5", "--hang-timeout=0.2", "--no-python", "sleep", "60"],
             tmp_path, "run")
    try:
        assert p.wait(timeout=60) == 137, p.stderr[-3000:]
    finally:
        p.kill()
    err = p.stderr
    [hung] = HUNG.findall(err)
    assert hung[0:2] == ("0", "0")
    assert re.fullmatch(r"no progress report since its start, silent for 0\.[56] s "
                        r"\(--first-progress-timeout=0\.5\)", hung[3]), hung[3]
    assert ("    no stacks: the worker did not register dgt's stack dump (a non-Python worker, "
            "or one that does not import dgt)\n") in err


def test_without_first_progress_timeout_a_silent_worker_runs_to_its_end(tmp_path):
    p = Proc([BIN / "dgt-run", "--standalone", "--nproc-per-node=1", "--hang-timeout=0.2",
              "--no-python", "sleep", "1.5"], tmp_path, "run")
    try:
        assert p.wait(timeout=60) == 0, p.stderr[-3000:]
    finally:
        p.kill()
    assert "hung" not in p.stderr


def test_sigstopped_cpp_rank_is_detected_and_replaced_in_place(tmp_path):
    """examples/allreduce_trainer (dgt::worker::Progress, ProgressWaiting around its waits on
    the peers): the stopped rank is replaced, the survivors keep their PIDs, every sum exact."""
    p = Proc([BIN / "dgt-run", "--standalone", "--nproc-per-node=3", "--restart-policy=rank",
              "--max-restarts=1", "--hang-timeout=1", "--no-python", BIN / "allreduce_trainer",
              "--steps", "500", "--step-ms", "10", "--init-timeout", "30"], tmp_path, "run")
    try:
        joined = re.compile(r"^\[rank(\d)\]: EVENT joined rank=\d pid=(\d+) ", re.M)
        deadline = time.monotonic() + 60
        while len(set(joined.findall(p.stdout))) < 3:
            assert time.monotonic() < deadline and p.popen.poll() is None, p.stderr[-3000:]
            time.sleep(0.02)
        pids = {int(r): int(pid) for r, pid in joined.findall(p.stdout)}
        deadline = time.monotonic() + 60
        while not re.search(r"^\[rank1\]: EVENT step rank=1 pid=\d+ generation=0 step=50 ",
                            p.stdout, re.M):
            assert time.monotonic() < deadline and p.popen.poll() is None, p.stderr[-3000:]
            time.sleep(0.02)
        os.kill(pids[1], signal.SIGSTOP)
        assert p.wait(timeout=120) == 0, p.stderr[-3000:]  # 3 would be a wrong sum.
    finally:
        p.kill()
    [hung] = HUNG.findall(p.stderr)
    assert hung[0:3] == ("1", "1", str(pids[1]))
    assert re.fullmatch(r"no progress report for 1\.[01] s \(--hang-timeout=1\), after \d+ "
                        r"reports \(stopped: SIGSTOP\)", hung[3]), hung[3]
    back = dict(re.findall(r"^\[rank\d\]: EVENT back rank=(\d) pid=(\d+) generation=1 ",
                           p.stdout, re.M))
    assert back.keys() == {"0", "1", "2"}
    assert back["0"] == str(pids[0]) and back["2"] == str(pids[2]) and back["1"] != str(pids[1])
    for r in range(3):
        assert re.search(rf"^\[rank{r}\]: EVENT step rank={r} pid=\d+ generation=1 step=500 ",
                         p.stdout, re.M)


def test_sigstopped_ddp_rank_is_detected_and_replaced_in_place(tmp_path, python2, capsys):
    steps = 200
    j = DgtRunJob(tmp_path, "torch-hang", policy="rank", mode="replace", steps=steps,
                  max_restarts=1, extra=["--hang-timeout=2"],
                  command=[python2, str(EXAMPLE), "--steps", str(steps), "--step-ms", "10",
                           "--op-timeout", "30"],
                  env={**PY_ENV, "OMP_NUM_THREADS": "1"})
    try:
        pids = j.joined_pids(timeout=90)
        assert sorted(pids) == list(range(WORLD))
        j.wait_events(lambda ev: any(r == 1 and k == "step" and int(f["step"]) >= 40
                                     for r, k, f in ev), 60, "rank 1 at step 40")
        stop_ns = time.time_ns()
        os.kill(pids[1], signal.SIGSTOP)
        agents_ok(j)
        ev = j.events()
        node = j.node_of(1)
        err = j.stderr(node)
        [hung] = HUNG.findall(err)
        rank, local, pid, reason, action, detected_ns = hung
        assert (rank, pid, action) == ("1", str(pids[1]), "it is stopped, no stacks; SIGKILL")
        m = re.fullmatch(r"no progress report for (\d\.\d) s \(--hang-timeout=2\), after (\d+) "
                         r"reports \(stopped: SIGSTOP\)", reason)
        assert m and 2.0 <= float(m.group(1)) <= 2.1, reason
        # Rank 1's last completed step before the stop: its last report.
        last_step = max((int(f["t_ns"]), int(f["step"])) for r, k, f in ev
                        if r == 1 and k == "step" and int(f["t_ns"]) < stop_ns)
        # Its reports count its steps; a stop between a step's EVENT line and its report leaves
        # one step unreported.
        assert int(m.group(2)) in (last_step[1], last_step[1] - 1), (reason, last_step)
        ms = (int(detected_ns) - last_step[0]) / 1e6
        assert 2000 < ms < 2000 + 200, ms
        # Only the stopped rank was hung: the survivors blocked on it waited in the all-reduce.
        assert "hung" not in j.stderr(1 - node)
        done = last(ev, "done")
        assert sorted(done) == [0, 1, 2, 3]
        for r in (0, 2, 3):
            assert done[r]["pid"] == str(pids[r]) and done[r]["recoveries"] == "1"
        assert done[1]["pid"] != str(pids[1])
        for r in range(WORLD):
            assert done[r]["steps"] == str(steps)
            assert done[r]["members"] == "0,1,2,3"
            assert done[r]["generation"] == "1"
        [expected] = reference_digests(python2, (steps, steps, range(WORLD), range(WORLD)))
        assert {done[r]["digest"] for r in range(WORLD)} == {expected}
        assert f"restarted rank 1 (local rank {local}) as pid {done[1]['pid']}" in err, err
        pre = last_step[1]
        back = back_ms(ev, range(WORLD), stop_ns, pre)
        with capsys.disabled():
            print(f"\nhang: SIGSTOP of rank 1 after step {pre} -> detected {ms:.0f} ms after its "
                  f"last report (--hang-timeout=2); all 4 ranks back at step {pre} {back:.0f} ms "
                  f"after the stop")
    finally:
        j.close()


def test_ddp_rank_hung_in_its_step_is_replaced_and_its_peers_kept(tmp_path, python2, capsys):
    """A running hang (the step's Python loops forever before its all-reduce) while the other
    ranks wait in DDP's all-reduce on it: only the hung rank is killed, with its stacks naming
    train_step; it is replaced in place and the parameters are the reference's."""
    steps = 120
    j = DgtRunJob(tmp_path, "torch-hang-step", policy="rank", mode="replace", steps=steps,
                  max_restarts=1, extra=["--hang-timeout=2"],
                  command=[python2, str(EXAMPLE), "--steps", str(steps), "--step-ms", "10",
                           "--op-timeout", "30", "--hang-at-step", "30", "--hang-rank", "2"],
                  env={**PY_ENV, "OMP_NUM_THREADS": "1"})
    try:
        pids = j.joined_pids(timeout=90)
        agents_ok(j)
        ev = j.events()
        node = j.node_of(2)
        err = j.stderr(node)
        [hung] = HUNG.findall(err)
        rank, local, pid, reason, action, detected_ns = hung
        assert (rank, pid, action) == ("2", str(pids[2]), "writing its stacks, then SIGKILL")
        assert re.fullmatch(r"no progress report for 2\.[01] s \(--hang-timeout=2\), after 30 "
                            r"reports", reason), reason
        last_ns = max(int(f["t_ns"]) for r, k, f in ev
                      if r == 2 and k == "step" and f["step"] == "30")
        ms = (int(detected_ns) - last_ns) / 1e6
        assert 2000 < ms < 2000 + 200, ms
        stacks = err[err.index(f"dgt-run: stacks of rank 2 (pid {pid}, "):]
        assert re.search(r'File ".*train\.py", line \d+ in train_step\n', stacks), stacks[:3000]
        assert "hung" not in j.stderr(1 - node)
        assert err.count(" hung: ") == 1
        done = last(ev, "done")
        assert sorted(done) == [0, 1, 2, 3]
        for r in (0, 1, 3):
            assert done[r]["pid"] == str(pids[r]) and done[r]["recoveries"] == "1"
        assert done[2]["pid"] != str(pids[2])
        [expected] = reference_digests(python2, (steps, steps, range(WORLD), range(WORLD)))
        assert {done[r]["digest"] for r in range(WORLD)} == {expected}
        with capsys.disabled():
            print(f"\nhang: rank 2 hung in its step 31 -> detected {ms:.0f} ms after its last "
                  f"report (--hang-timeout=2)")
    finally:
        j.close()
