"""Rendezvous under faults and bad input: duplicate node ids, nodes never admitted, run ids used
again, and the rendezvous service lost (and restarted) while a job runs. Exit statuses are those
of agent/exit_codes.h: 69 rendezvous unavailable, 77 not admitted."""
import re
import time

from conftest import BIN, WORKERS, wait_for

SLEEP = str(WORKERS / "sleep_by_rank.py")


def agent(spawn, endpoint, run_id, node_id, *args, name=None):
    return spawn([BIN / "dgt-run", f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}",
                  f"--node-id={node_id}", "--rdzv-conf=is_host=0", *args], name=name or node_id)


def test_second_agent_with_the_same_node_id_is_refused(spawn, rendezvous):
    # Replacing the first agent's session used to leave both agents running RANK 0.
    first = agent(spawn, rendezvous, "dup", "node-x", "--nnodes=1", SLEEP, "3", name="first")
    wait_for(lambda: "node rank 0 of 1" in first.stderr, 30, "the first agent's round")
    second = agent(spawn, rendezvous, "dup", "node-x", "--nnodes=1", SLEEP, "0", name="second")
    assert second.wait(timeout=20) == 77  # kExitNotAdmitted
    assert second.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: the rendezvous service refused this node: node id 'node-x' is already in "
        "run 'dup' from 127.0.0.1 (its agent is connected); a second agent with the same "
        "--node-id is refused")
    assert "rank 0 done" not in second.stdout
    assert first.wait(timeout=30) == 0, first.stderr
    assert first.stdout.count("rank 0 done") == 1
    assert "replaced" not in first.stderr


def test_agent_waiting_beyond_max_is_not_admitted(spawn, rendezvous):
    # A node that never ran a worker of the run must not report its success.
    running = agent(spawn, rendezvous, "full", "node-a", "--nnodes=1", SLEEP, "3", name="a")
    wait_for(lambda: "node rank 0 of 1" in running.stderr, 30, "the run's round")
    late = agent(spawn, rendezvous, "full", "node-b", "--nnodes=1", SLEEP, "0", name="b")
    assert running.wait(timeout=30) == 0, running.stderr
    assert late.wait(timeout=20) == 77  # kExitNotAdmitted
    assert late.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: the rendezvous service refused this node: run 'full' ended (succeeded: "
        "all 1 nodes succeeded) before node 'node-b' was admitted to it")
    assert "rank 0 done" not in late.stdout
    assert "run 'full' succeeded" not in late.stderr


def test_a_run_id_is_free_again_once_its_agents_left(spawn, rendezvous):
    # Two jobs in a row on one long-lived service, with one fixed id and with torchrun's default
    # id ("none"): the second job of each runs instead of being refused for an hour.
    for run_args in (["--rdzv-id=fixed"], []):
        for job in range(2):
            args = [BIN / "dgt-run", f"--rdzv-endpoint={rendezvous}", "--rdzv-conf=is_host=0",
                    "--nnodes=1", *run_args, SLEEP, "0"]
            p = spawn(args, name=f"job{job}{''.join(run_args)}")
            assert p.wait(timeout=30) == 0, p.stderr
            assert "rank 0 done" in p.stdout
