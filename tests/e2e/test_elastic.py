"""Elastic rounds end to end: real dgt-rendezvous, real dgt-run agents, real PyTorch workers.

A kill -9 of one agent of a --nnodes=2:3 job gives the survivors a new round of two nodes in
which node rank 0 keeps rank 0 and the job completes; a worker failure with --max-restarts
restarts every node's workers in a new round; a late node scales a running job up. A survivor
left below MIN after a loss exits 75 (join timeout) once the join timeout passes.
"""
import signal
import time

from conftest import BIN, WORKERS, records, wait_for

WORKER = WORKERS / "elastic_worker.py"


def agent(spawn, rendezvous, run_id, node_id, nnodes, extra=(), worker_args=(), env=None):
    return spawn([BIN / "dgt-run", f"--nnodes={nnodes}", "--nproc-per-node=1",
                  f"--rdzv-endpoint={rendezvous}", f"--rdzv-id={run_id}",
                  f"--node-id={node_id}", "--rdzv-conf=last_call_timeout=1",
                  "--stop-timeout=5", *extra, WORKER, *worker_args], name=node_id, env=env)


def test_kill9_of_one_agent_gives_survivors_a_new_round(spawn, rendezvous, torch_family):
    # A new round without a restart: the restart count stays 0, so only a new store per round
    # keeps torch 1.13 workers (prefix /worker/attempt_0 again) and 2.x workers (no prefix) off
    # round 0's keys.
    args = ["--wait-world-size", "3", "--steps", "5"]
    agents = {n: agent(spawn, rendezvous, "elastic-kill", n, "2:3", worker_args=args,
                       env=torch_family.env())
              for n in ("node-a", "node-b", "node-c")}
    wait_for(lambda: all(any(r["event"] == "start" and r["env"]["WORLD_SIZE"] == "3"
                             for r in records(a.stdout)) for a in agents.values()),
             120, "three nodes in round 0")
    first = {n: [r for r in records(a.stdout) if r["event"] == "start"][0]["env"]
             for n, a in agents.items()}
    assert [first[n]["GROUP_RANK"] for n in ("node-a", "node-b", "node-c")] == ["0", "1", "2"]
    killed_at = time.monotonic()
    agents["node-b"].popen.send_signal(signal.SIGKILL)
    for n in ("node-a", "node-c"):
        assert agents[n].wait(timeout=120) == 0, agents[n].stderr
    elapsed = time.monotonic() - killed_at
    done = {n: [r for r in records(agents[n].stdout) if r["event"] == "done"] for n in
            ("node-a", "node-c")}
    for n in ("node-a", "node-c"):
        assert len(done[n]) == 1, agents[n].stdout
        assert done[n][0]["world_size"] == 2
        assert done[n][0]["sum"] == 1
        assert done[n][0]["env"]["TORCHELASTIC_RESTART_COUNT"] == "0"  # Not a restart.
        assert done[n][0]["torch"].startswith(torch_family.version + ".")
        assert done[n][0]["env"]["MASTER_PORT"] != first[n]["MASTER_PORT"]  # A new store.
    # Node rank 0 survived and kept rank 0; node-c (rank 2) moved into node-b's gap.
    assert done["node-a"][0]["env"]["GROUP_RANK"] == "0"
    assert done["node-c"][0]["env"]["GROUP_RANK"] == "1"
    assert done["node-a"][0]["env"]["MASTER_ADDR"] == first["node-a"]["MASTER_ADDR"]
    assert "round 1 (node lost: node node-b" in agents["node-a"].stderr
    assert elapsed < 60


def test_survivor_left_below_min_after_a_loss_exits_75(spawn, rendezvous):
    # --nnodes=2: a kill -9 of one agent leaves the other below MIN. After the join timeout the
    # run ends as a join timeout (75, which schedulers retry), not as a failure of the job (1).
    sleeper = WORKERS / "sleep_by_rank.py"
    agents = [spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=1",
                     f"--rdzv-endpoint={rendezvous}", "--rdzv-id=below-min",
                     f"--node-id=node-{i}", "--rdzv-conf=last_call_timeout=1,join_timeout=3",
                     "--stop-timeout=5", sleeper, "60,60"], name=f"node-{i}")
              for i in range(2)]
    wait_for(lambda: all("run 'below-min' round 0 (initial)" in a.stderr for a in agents), 60,
             "round 0 on both nodes")
    agents[1].popen.send_signal(signal.SIGKILL)
    assert agents[0].wait(timeout=60) == 75, agents[0].stderr  # kExitJoinTimeout
    # The service's end of the run, or the agent's own wait for a new round: both 3 s after the
    # loss, both a join timeout.
    assert agents[0].stderr.strip().splitlines()[-1] in (
        "dgt-run: error: run failed: run 'below-min' had only 1 of at least 2 nodes for 3s after "
        "losing nodes",
        "dgt-run: error: run 'below-min' got no new round within 3 s after its workers were "
        "stopped")


def test_worker_failure_restarts_every_node_in_a_new_round(spawn, rendezvous, torch_family):
    args = ["--fail-rank", "1", "--fail-code", "3", "--steps", "3"]
    agents = [agent(spawn, rendezvous, "elastic-restart", f"node-{i}", "2",
                    extra=["--max-restarts=2"], worker_args=args, env=torch_family.env())
              for i in range(2)]
    for a in agents:
        assert a.wait(timeout=180) == 0, a.stderr
    for a in agents:
        starts = [r for r in records(a.stdout) if r["event"] == "start"]
        assert [s["env"]["TORCHELASTIC_RESTART_COUNT"] for s in starts] == ["0", "1"]
        assert [s["env"]["TORCHELASTIC_MAX_RESTARTS"] for s in starts] == ["2", "2"]
        assert [s["env"]["TORCHELASTIC_USE_AGENT_STORE"] for s in starts] == ["True", "True"]
        done = [r for r in records(a.stdout) if r["event"] == "done"]
        assert len(done) == 1 and done[0]["world_size"] == 2 and done[0]["sum"] == 1
        assert done[0]["env"]["TORCHELASTIC_RESTART_COUNT"] == "1"
        assert done[0]["torch"].startswith(torch_family.version + ".")


def test_failure_after_the_last_restart_fails_every_node(spawn, rendezvous):
    args = ["--fail-rank", "1", "--fail-code", "4"]
    agents = [agent(spawn, rendezvous, "elastic-norestart", f"node-{i}", "2",
                    worker_args=args) for i in range(2)]
    assert [a.wait(timeout=120) for a in agents] == [4, 4]


def test_late_node_scales_the_job_up(spawn, rendezvous):
    args = ["--wait-world-size", "1", "--steps", "3"]
    first = agent(spawn, rendezvous, "elastic-scale", "node-a", "1:2", worker_args=args)
    wait_for(lambda: any(r["event"] == "start" for r in records(first.stdout)), 120,
             "the first node's workers")
    second = agent(spawn, rendezvous, "elastic-scale", "node-b", "1:2", worker_args=args)
    for a in (first, second):
        assert a.wait(timeout=120) == 0, a.stderr
    for a, rank in ((first, "0"), (second, "1")):
        done = [r for r in records(a.stdout) if r["event"] == "done"]
        assert len(done) == 1 and done[0]["world_size"] == 2
        assert done[0]["env"]["GROUP_RANK"] == rank
    assert "round 1 (scale-up)" in first.stderr


def test_sigterm_after_own_workers_finished_exits_at_once(spawn, rendezvous):
    # Rank 0's worker is done in 0.2 s, rank 1's runs 20 s: SIGTERM to rank 0's agent (a
    # scheduler's cancel) ends it at once instead of waiting for the other node or the finish
    # timeout.
    sleeper = WORKERS / "sleep_by_rank.py"
    agents = [spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=1",
                     f"--rdzv-endpoint={rendezvous}", "--rdzv-id=sigterm-done",
                     f"--node-id=node-{i}", sleeper, "0.2,20"], name=f"node-{i}")
              for i in range(2)]
    wait_for(lambda: any("rank 0 done" in a.stdout for a in agents), 60, "rank 0 to finish")
    done, other = agents if "rank 0 done" in agents[0].stdout else agents[::-1]
    time.sleep(0.5)
    assert done.popen.poll() is None  # Waiting for the run's outcome.
    start = time.monotonic()
    done.popen.send_signal(signal.SIGTERM)
    assert done.wait(timeout=10) == 128 + signal.SIGTERM
    assert time.monotonic() - start < 5
    assert done.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: stopped by SIGTERM after this node's workers exited, before the run's "
        "outcome was known")
    other.popen.send_signal(signal.SIGTERM)
    other.wait(timeout=30)
