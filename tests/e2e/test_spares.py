"""Hot spare nodes end to end: a real dgt-rendezvous, dgt-run agents on loopback, torch 2.13 DDP
workers (workers/ddp_steps.py) whose parameters are compared bit for bit with the exact reference.

A run of --nnodes=2 holds every further agent as a spare. A kill -9 of a whole node (its agent
and its workers) gives the lost node rank to one spare: WORLD_SIZE and the rank layout stay, and
the job ends with the parameters of a run without the failure; so does a node that leaves after
its health check fails mid-run (exit 71). Of two spares exactly one takes the place and the other
stays a spare until the run ends (exit 0 for the run's success, saying it was not needed). A spare
killed while it takes over is replaced by the next spare.
"""
import os
import re
import signal
import subprocess
import time

from conftest import BIN, WORKERS, dgt_env, records, wait_for
from recovery_harness import descendants
from test_launch import ddp_reference

STEPS = 4


def agent(spawn, rendezvous, python2, node_id, hold, nproc, run_id="spares", extra=()):
    return spawn([BIN / "dgt-run", "--nnodes=2", f"--nproc-per-node={nproc}",
                  f"--rdzv-endpoint={rendezvous}", f"--rdzv-id={run_id}",
                  f"--node-id={node_id}", "--stop-timeout=5", *extra, WORKERS / "ddp_steps.py",
                  f"--steps={STEPS}", f"--hold-file={hold}"],
                 name=node_id, env=dgt_env(DGT_PYTHON=python2))


def kill_node(proc):
    """SIGKILLs a node at once: its agent and every process below it. Returns the workers' pids."""
    workers = descendants(proc.popen.pid)
    for pid in [proc.popen.pid, *workers]:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert proc.wait(timeout=10) == -signal.SIGKILL
    return workers


def gone(pid):
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ")[1].startswith("Z")  # Reaped by init soon.
    except OSError:
        return True


def held(proc, ranks):
    return all(f"rank {r} held" in proc.stdout for r in ranks)


def round_line(proc, node_rank, nproc):
    first = node_rank * nproc
    return (f"node rank {node_rank} of 2, ranks {first}..{first + nproc - 1} of world size "
            f"{2 * nproc}")


def status_text(rendezvous, run_id="spares"):
    out = subprocess.run([BIN / "dgt", "status", f"--rdzv-endpoint={rendezvous}",
                          f"--rdzv-id={run_id}"], capture_output=True, text=True, timeout=20)
    assert out.returncode == 0, out.stderr
    return out.stdout


def check_result(survivor, spare, nproc):
    """Both nodes ended with the exact parameters of a run of 2 x nproc ranks without a failure;
    the spare ran node rank 1's ranks."""
    weight, bias = ddp_reference(world=2 * nproc, steps=STEPS)
    done = {"survivor": records(survivor.stdout), "spare": records(spare.stdout)}
    assert sorted(r["rank"] for r in done["survivor"]) == list(range(nproc))
    assert sorted(r["rank"] for r in done["spare"]) == list(range(nproc, 2 * nproc))
    port = done["survivor"][0]["env"]["MASTER_PORT"]
    for who, recs in done.items():
        for r in recs:
            assert r["world_size"] == 2 * nproc
            assert r["weight"] == weight and r["bias"] == bias, (who, r)
            assert r["torch"].startswith("2.13.")
            env = r["env"]
            assert env["NODE_RANK"] == env["GROUP_RANK"] == ("0" if who == "survivor" else "1")
            assert env["WORLD_SIZE"] == str(2 * nproc)
            assert env["MASTER_ADDR"] == "127.0.0.1" and env["MASTER_PORT"] == port
            assert env["TORCHELASTIC_RESTART_COUNT"] == "0"  # A spare's round is not a restart.


def test_kill9_of_a_whole_node_gives_its_node_rank_to_the_spare(spawn, rendezvous, python2,
                                                                 tmp_path):
    hold = tmp_path / "go"
    a = agent(spawn, rendezvous, python2, "node-a", hold, 2)
    b = agent(spawn, rendezvous, python2, "node-b", hold, 2)
    wait_for(lambda: held(a, (0, 1)) and held(b, (2, 3)), 120, "round 0's four ranks")
    c = agent(spawn, rendezvous, python2, "node-c", hold, 2)
    wait_for(lambda: "this node waits as a hot spare" in c.stderr, 30, "node-c to wait as a spare")
    assert re.search(r"^  spare\s+node-c\s+127\.0\.0\.1\s+2 ", status_text(rendezvous), re.M)

    workers = kill_node(b)
    assert len(workers) >= 2
    wait_for(lambda: round_line(c, 1, 2) in c.stderr, 60, "node-c to take node rank 1")
    hold.touch()
    assert a.wait(timeout=120) == 0, a.stderr
    assert c.wait(timeout=60) == 0, c.stderr
    assert all(gone(pid) for pid in workers)
    check_result(a, c, 2)
    assert "round 1 (node lost: node node-b (127.0.0.1) was lost): " + round_line(a, 0, 2) in (
        a.stderr)
    assert "run 'spares' round 1 (node lost: node node-b (127.0.0.1) was lost): " + round_line(
        c, 1, 2) in c.stderr


def test_two_spares_racing_for_one_lost_node(spawn, rendezvous, python2, tmp_path):
    hold = tmp_path / "go"
    a = agent(spawn, rendezvous, python2, "node-a", hold, 1)
    b = agent(spawn, rendezvous, python2, "node-b", hold, 1)
    wait_for(lambda: held(a, (0,)) and held(b, (1,)), 120, "round 0's two ranks")
    spares = {n: agent(spawn, rendezvous, python2, n, hold, 1) for n in ("node-c", "node-d")}
    wait_for(lambda: all("this node waits as a hot spare" in s.stderr for s in spares.values()),
             30, "two spares")
    kill_node(b)
    wait_for(lambda: any(round_line(s, 1, 1) in s.stderr for s in spares.values()), 60,
             "a spare to take node rank 1")
    time.sleep(1)  # Room for a second (wrong) assignment to show.
    took = [n for n, s in spares.items() if "round 1 (" in s.stderr]
    assert took == ["node-c"]  # The first spare in node-id order, and only that one.
    text = status_text(rendezvous)
    assert re.search(r"^  1\s+node-c\s", text, re.M), text
    assert re.search(r"^  spare\s+node-d\s", text, re.M), text
    hold.touch()
    assert a.wait(timeout=120) == 0, a.stderr
    assert spares["node-c"].wait(timeout=60) == 0, spares["node-c"].stderr
    check_result(a, spares["node-c"], 1)
    d = spares["node-d"]
    # The run it stood by for succeeded: 0, or a Slurm step would count it as failed.
    assert d.wait(timeout=30) == 0, d.stderr
    assert d.stderr.strip().splitlines()[-1] == (
        "dgt-run: done: run 'spares' succeeded (all 2 nodes succeeded) without node 'node-d': it "
        "waited as a spare and was not needed")
    assert "held" not in d.stdout


def test_spare_killed_while_taking_over_is_replaced_by_the_next(spawn, rendezvous, python2,
                                                                tmp_path):
    hold = tmp_path / "go"
    a = agent(spawn, rendezvous, python2, "node-a", hold, 1)
    b = agent(spawn, rendezvous, python2, "node-b", hold, 1)
    wait_for(lambda: held(a, (0,)) and held(b, (1,)), 120, "round 0's two ranks")
    c = agent(spawn, rendezvous, python2, "node-c", hold, 1)
    d = agent(spawn, rendezvous, python2, "node-d", hold, 1)
    wait_for(lambda: all("this node waits as a hot spare" in s.stderr for s in (c, d)), 30,
             "two spares")
    kill_node(b)
    wait_for(lambda: round_line(c, 1, 1) in c.stderr, 60, "node-c to take node rank 1")
    kill_node(c)  # Before its workers trained a step (they wait for the hold file).
    wait_for(lambda: round_line(d, 1, 1) in d.stderr, 60, "node-d to take node rank 1")
    hold.touch()
    assert a.wait(timeout=120) == 0, a.stderr
    assert d.wait(timeout=60) == 0, d.stderr
    check_result(a, d, 1)
    assert "round 2 (node lost: node node-c (127.0.0.1) was lost): " + round_line(a, 0, 1) in (
        a.stderr)


def test_spare_frozen_while_taking_over_rejoins_the_run_that_waits_for_it(spawn, rendezvous,
                                                                          python2, tmp_path):
    hold = tmp_path / "go"
    a = agent(spawn, rendezvous, python2, "node-a", hold, 1)
    b = agent(spawn, rendezvous, python2, "node-b", hold, 1)
    wait_for(lambda: held(a, (0,)) and held(b, (1,)), 120, "round 0's two ranks")
    c = agent(spawn, rendezvous, python2, "node-c", hold, 1)
    wait_for(lambda: "this node waits as a hot spare" in c.stderr, 30, "node-c to wait as a spare")
    os.kill(c.popen.pid, signal.SIGSTOP)  # Frozen: it is given node rank 1 and cannot answer.
    try:
        kill_node(b)
        wait_for(lambda: re.search(r"^run spares: gathering", status_text(rendezvous), re.M), 60,
                 "the run to lose the frozen spare and wait for nodes")
    finally:
        os.kill(c.popen.pid, signal.SIGCONT)
    # Its rejoin with round 1 is taken as a fresh join of the waiting run: round 2.
    wait_for(lambda: "round 2 (" in c.stderr and round_line(c, 1, 1) in c.stderr, 60,
             "node-c to be in round 2")
    hold.touch()
    assert a.wait(timeout=120) == 0, a.stderr + "\n---- node-c:\n" + c.stderr
    assert c.wait(timeout=60) == 0, c.stderr
    check_result(a, c, 1)
    assert "round 2 (" in a.stderr


def test_node_failing_a_health_check_mid_run_is_replaced_by_the_spare(spawn, rendezvous, python2,
                                                                      tmp_path):
    hold, sick = tmp_path / "go", tmp_path / "sick"
    check = f"if [ -e {sick} ]; then echo 'GPU 1: fallen off the bus'; exit 1; fi"
    a = agent(spawn, rendezvous, python2, "node-a", hold, 2)
    b = agent(spawn, rendezvous, python2, "node-b", hold, 2,
              extra=["--health-check", check, "--health-interval=0.5"])
    wait_for(lambda: held(a, (0, 1)) and held(b, (2, 3)), 120, "round 0's four ranks")
    c = agent(spawn, rendezvous, python2, "node-c", hold, 2)
    wait_for(lambda: "this node waits as a hot spare" in c.stderr, 30, "node-c to wait as a spare")
    sick.touch()
    assert b.wait(timeout=60) == 71, b.stderr  # docs/EXIT_CODES.md: a health check failed.
    assert b.stderr.strip().splitlines()[-1] == (
        f"dgt-run: error: health check '{check}' failed: exited with code 1: GPU 1: fallen off "
        "the bus")
    wait_for(lambda: round_line(c, 1, 2) in c.stderr, 60, "node-c to take node rank 1")
    hold.touch()
    assert a.wait(timeout=120) == 0, a.stderr
    assert c.wait(timeout=60) == 0, c.stderr
    check_result(a, c, 2)
    assert records(b.stdout) == []  # node-b's workers were stopped before they finished.
