"""TorchFT under dgt-run (docs/RECOVERY.md, "TorchFT under dgt-run"): torchft's Lighthouse on
loopback, one `dgt-run --standalone` agent per replica group, torchft 0.2.0's Manager,
DistributedDataParallel and Optimizer on Gloo (the peers venv's torch 2.13). The Manager of each
group keeps its keys in that group's dgt agent store (MASTER_ADDR:MASTER_PORT), and the
cross-group Gloo process group of each quorum is built through one group's agent store.
"""
import os
import re

import pytest

from conftest import BIN, WORKERS, dgt_env, exact_descent, records, wait_for

LIGHTHOUSE = "torchft_lighthouse"


def reference(groups, steps):
    """The parameters after `steps` committed steps (conftest.exact_descent): each step is the
    mean over the groups of their batches' mean squared error, from the worker's fixed initial
    parameters (tests/e2e/workers/torchft_ddp.py)."""
    def batches(step):
        return [([[g + 1, step % 3, -1], [1, -g, (step + g) % 2]], [g - step % 2, 1])
                for g in range(groups)]
    return exact_descent(batches, steps)


@pytest.fixture
def lighthouse(spawn, python2):
    """torchft's Lighthouse (the venv's torchft_lighthouse) on a free loopback port, quorum of
    both replica groups; a replica silent for 1 s is dead. Yields its http:// address."""
    exe = os.path.join(os.path.dirname(python2), LIGHTHOUSE)
    p = spawn([exe, "--bind", "127.0.0.1:0", "--min_replicas", "2", "--join_timeout_ms", "1000",
               "--heartbeat_timeout_ms", "1000"], name="lighthouse")
    found = []

    def listening():
        # It names its host, not the bound address: "Lighthouse listening on: http://HOST:PORT".
        m = re.search(r"Lighthouse listening on: http://\S+:(\d+)", p.stdout + p.stderr)
        assert p.popen.poll() is None, f"{LIGHTHOUSE} exited: {p.stderr}"
        found.extend(m.groups() if m else ())
        return bool(m)

    wait_for(listening, 30, f"{LIGHTHOUSE} to listen")
    yield f"http://127.0.0.1:{found[0]}"


def start_groups(spawn, python2, lighthouse, steps, max_restarts=0, kill=(0, 0)):
    """One `dgt-run --standalone --nproc-per-node=1` per replica group (0 and 1); kill = (group,
    step): that group's first worker SIGKILLs itself after committing that step."""
    return [
        spawn([BIN / "dgt-run", "--standalone", "--nproc-per-node=1",
               f"--max-restarts={max_restarts}", WORKERS / "torchft_ddp.py",
               f"--steps={steps}", "--timeout=20", "--hostname=127.0.0.1",
               f"--kill-self-at-step={kill[1] if g == kill[0] else 0}"],
              name=f"group{g}",
              env=dgt_env(DGT_PYTHON=python2, TORCHFT_LIGHTHOUSE=lighthouse,
                          REPLICA_GROUP_ID=g, NUM_REPLICA_GROUPS=2))
        for g in range(2)
    ]


def done_record(agent):
    done = [r for r in records(agent.stdout) if r["event"] == "done"]
    assert len(done) == 1, agent.stdout[-3000:]
    return done[0]


def test_two_replica_groups_commit_the_same_steps(spawn, python2, lighthouse):
    groups = start_groups(spawn, python2, lighthouse, steps=5)
    for a in groups:
        assert a.wait(timeout=90) == 0, a.stderr[-3000:] + a.stdout[-3000:]
    weight, bias = reference(groups=2, steps=5)
    for g, a in enumerate(groups):
        r = done_record(a)
        assert r["replica_group"] == g
        assert r["step"] == 5 and r["commits"] == 5
        assert r["weight"] == weight and r["bias"] == bias
        assert r["restart_count"] == 0
        assert r["env"] == {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1",
                            "TORCHFT_LIGHTHOUSE": lighthouse, "REPLICA_GROUP_ID": str(g),
                            "NUM_REPLICA_GROUPS": "2", "TORCHELASTIC_RESTART_COUNT": "0"}
        steps = [x["step"] for x in records(a.stdout) if x["event"] == "step"]
        assert steps == [1, 2, 3, 4, 5]
    # init_sync: at step 0 one group takes the other's state (the Lighthouse picks which).
    assert sorted(done_record(a)["heals"] for a in groups) == [[], [0]]


def test_killed_group_restarts_and_heals_from_its_peer(spawn, python2, lighthouse):
    # Group 0's worker is SIGKILLed after its 3rd committed step (by itself, between two steps:
    # see --kill-self-at-step); its dgt-run starts it again
    # (--max-restarts=1); the new process joins the next quorum through the Lighthouse, fetches
    # the current model and optimizer state from group 1 (torchft's live HTTP transfer) and
    # both groups go on to step 8. min_replica_size is 2, so no step commits without both groups
    # and the result is exactly the fault-free one.
    steps, kill_at = 8, 3
    groups = start_groups(spawn, python2, lighthouse, steps=steps, max_restarts=1,
                          kill=(0, kill_at))
    for a in groups:
        assert a.wait(timeout=120) == 0, a.stderr[-3000:] + a.stdout[-3000:]
    assert re.search(r"rank 0 \(local rank 0\) was killed by signal 9 \(SIGKILL\)",
                     groups[0].stderr), groups[0].stderr[-3000:]
    starts = [r for r in records(groups[0].stdout) if r["event"] == "start"]
    assert [s["restart_count"] for s in starts] == [0, 1]
    first_steps = [r["step"] for r in records(groups[0].stdout)
                   if r["event"] == "step" and r["pid"] == starts[0]["pid"]]
    assert first_steps == [1, 2, 3]
    weight, bias = reference(groups=2, steps=steps)
    killed, healthy = done_record(groups[0]), done_record(groups[1])
    for r in (killed, healthy):
        assert r["step"] == steps
        assert r["weight"] == weight and r["bias"] == bias
    assert killed["weight"] == healthy["weight"] and killed["bias"] == healthy["bias"]
    assert killed["restart_count"] == 1 and healthy["restart_count"] == 0
    # The replacement healed once, at a step the healthy group had reached (at least the one
    # committed before the kill), and committed only the remaining steps itself.
    assert len(killed["heals"]) == 1 and kill_at <= killed["heals"][0] < steps
    assert killed["commits"] == steps - killed["heals"][0]
    assert healthy["heals"] in ([], [0]) and healthy["commits"] == steps
