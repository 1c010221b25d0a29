"""dgt-run end to end: real processes, real PyTorch workers (1.13 and, where torch is the
subject, 2.13 too: the `torch_family` fixture), the agent-hosted store."""
import json
import re
import time

from conftest import BIN, REPO, WORKERS, exact_descent


def json_lines(text):
    """Worker JSON lines from dgt-run's console output ("[rankN]: {...}")."""
    out = []
    for line in text.splitlines():
        m = re.match(r"^\[rank(\d+)\]: (\{.*\})$", line)
        if m:
            record = json.loads(m.group(2))
            assert record["rank"] == int(m.group(1)), line
            out.append(record)
    return out


def test_standalone_digits_reaches_accuracy(spawn):
    p = spawn([BIN / "dgt-run", "--standalone", "--nproc-per-node=4",
               REPO / "examples" / "train_digits.py"], name="digits")
    assert p.wait(timeout=240) == 0, p.stderr
    lines = re.findall(r"^\[rank0\]: test accuracy: ([0-9.]+)$", p.stdout, re.M)
    assert len(lines) == 1, p.stdout
    assert float(lines[0]) >= 0.90
    starts = re.findall(r"^\[rank(\d)\]: rank (\d)/4 local_rank (\d): starting$", p.stdout, re.M)
    assert sorted(starts) == [(str(r), str(r), str(r)) for r in range(4)]


def test_two_agents_all_reduce(spawn, rendezvous):
    agents = [
        spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=2",
               f"--rdzv-endpoint={rendezvous}", "--rdzv-id=e2e-allreduce", "--max-restarts=2",
               WORKERS / "allreduce_check.py"], name=f"agent{i}")
        for i in range(2)
    ]
    for a in agents:
        assert a.wait(timeout=120) == 0, a.stderr
    recs = [r for a in agents for r in json_lines(a.stdout)]
    assert sorted(r["rank"] for r in recs) == [0, 1, 2, 3]
    for r in recs:
        assert r["world_size"] == 4
        assert r["sum"] == 6
        assert r["ranks"] == [0, 1, 2, 3]
        env = r["env"]
        assert env["RANK"] == str(r["rank"])
        assert env["LOCAL_RANK"] == str(r["rank"] % 2)
        assert env["WORLD_SIZE"] == "4"
        assert env["LOCAL_WORLD_SIZE"] == "2"
        assert env["NODE_RANK"] == str(r["rank"] // 2)
        assert env["GROUP_RANK"] == str(r["rank"] // 2)
        assert env["GROUP_WORLD_SIZE"] == "2"
        assert env["MASTER_ADDR"] == "127.0.0.1"
        assert env["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        assert env["TORCHELASTIC_RUN_ID"] == "e2e-allreduce"
        assert env["TORCHELASTIC_RESTART_COUNT"] == "0"
        assert env["TORCHELASTIC_MAX_RESTARTS"] == "2"
    # One store for the whole job: node rank 0's.
    assert len({r["env"]["MASTER_PORT"] for r in recs}) == 1
    # Each agent ran one node's ranks: {0,1} and {2,3}.
    per_agent = sorted(sorted(r["rank"] for r in json_lines(a.stdout)) for a in agents)
    assert per_agent == [[0, 1], [2, 3]]


def ddp_batch(rank):
    """workers/ddp_steps.py's batch(rank): the input data, repeated here on purpose."""
    return [[rank + 1, 2, -rank], [1, -rank, 3]], [[rank - 1], [2]]


def ddp_reference(world, steps):
    """The parameters that workers/ddp_steps.py's DDP job must end with (conftest.exact_descent):
    every step, the mean over ranks of their batches' mean squared error, from rank 0's initial
    parameters (DDP broadcasts them)."""
    batches = [(x, [t for (t,) in y]) for x, y in map(ddp_batch, range(world))]
    return exact_descent(lambda step: batches, steps)


def test_ddp_steps_exact_across_two_agents(spawn, rendezvous, torch_family):
    # 2 agents x 2 workers of each torch family: torchrun's env contract, init_process_group
    # ("gloo", env://) as a client of node rank 0's agent store (TORCHELASTIC_USE_AGENT_STORE),
    # DDP training steps; all four ranks end with the exact reference parameters. (Group
    # restarts with each family: test_elastic.)
    agents = [
        spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=2",
               f"--rdzv-endpoint={rendezvous}", "--rdzv-id=e2e-ddp", "--max-restarts=3",
               WORKERS / "ddp_steps.py", "--steps=4"], name=f"agent{i}", env=torch_family.env())
        for i in range(2)
    ]
    for a in agents:
        assert a.wait(timeout=120) == 0, a.stderr
    done = json_lines(agents[0].stdout) + json_lines(agents[1].stdout)
    assert sorted(r["rank"] for r in done) == [0, 1, 2, 3]
    weight, bias = ddp_reference(world=4, steps=4)
    for r in done:
        assert r["torch"].startswith(torch_family.version + ".")
        assert r["world_size"] == 4
        assert r["weight"] == weight and r["bias"] == bias
        rank, node = r["rank"], r["rank"] // 2
        assert r["env"] == {
            "RANK": str(rank), "LOCAL_RANK": str(rank % 2), "WORLD_SIZE": "4",
            "LOCAL_WORLD_SIZE": "2", "NODE_RANK": str(node), "GROUP_RANK": str(node),
            "GROUP_WORLD_SIZE": "2", "ROLE_NAME": "default", "ROLE_RANK": str(rank),
            "ROLE_WORLD_SIZE": "4", "MASTER_ADDR": "127.0.0.1",
            "MASTER_PORT": done[0]["env"]["MASTER_PORT"], "TORCHELASTIC_USE_AGENT_STORE": "True",
            "TORCHELASTIC_RUN_ID": "e2e-ddp", "TORCHELASTIC_RESTART_COUNT": "0",
            "TORCHELASTIC_MAX_RESTARTS": "3", "TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}


def test_worker_exit_code_is_reported(spawn):
    start = time.monotonic()
    p = spawn([BIN / "dgt-run", "--standalone", "--nproc-per-node=3",
               WORKERS / "exit_code.py", "--fail-rank", "1", "--code", "3"], name="fail")
    rc = p.wait(timeout=60)
    assert rc == 3, p.stderr
    assert time.monotonic() - start < 20  # The others were stopped, not waited for (60 s).
    final = [l for l in p.stderr.splitlines() if l.startswith("dgt-run: error:")][-1]
    assert re.match(r"^dgt-run: error: rank 1 \(local rank 1 on node rank 0, 127\.0\.0\.1, "
                    r"pid \d+\) exited with code 3$", final), p.stderr
    assert sorted(re.findall(r"^\[rank(\d)\]: rank \d started$", p.stdout, re.M)) == ["0", "1", "2"]


def test_failure_on_one_node_stops_the_other(spawn, rendezvous):
    agents = [
        spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=2",
               f"--rdzv-endpoint={rendezvous}", "--rdzv-id=e2e-fail",
               WORKERS / "exit_code.py", "--fail-rank", "3", "--code", "3"], name=f"agent{i}")
        for i in range(2)
    ]
    codes = [a.wait(timeout=60) for a in agents]
    assert codes == [3, 3], [a.stderr for a in agents]
    text = agents[0].stderr + agents[1].stderr
    assert "rank 3 (local rank 1) exited with code 3" in text


def test_agent_exports_nccl_network_discovery(spawn):
    """No RDMA device here: NCCL_IB_DISABLE=1, and the interface routing to MASTER_ADDR."""
    p = spawn([BIN / "dgt-run", "--standalone", "--nproc-per-node=1", "--no-python", "/usr/bin/env"],
              name="env")
    assert p.wait(timeout=60) == 0, p.stderr
    env = dict(line[len("[rank0]: "):].split("=", 1) for line in p.stdout.splitlines()
               if line.startswith("[rank0]: ") and "=" in line)
    assert env["NCCL_IB_DISABLE"] == "1"
    assert env["NCCL_SOCKET_IFNAME"] == "=lo"  # MASTER_ADDR is 127.0.0.1.
    assert "network discovery: 0 RDMA device(s); exporting NCCL_IB_DISABLE=1" in p.stderr


def test_user_set_nccl_variables_are_kept(spawn):
    from conftest import dgt_env
    p = spawn([BIN / "dgt-run", "--standalone", "--nproc-per-node=1", "--no-python", "/usr/bin/env"],
              name="env", env=dgt_env(NCCL_SOCKET_IFNAME="eth9", NCCL_IB_DISABLE="0"))
    assert p.wait(timeout=60) == 0, p.stderr
    env = dict(line[len("[rank0]: "):].split("=", 1) for line in p.stdout.splitlines()
               if line.startswith("[rank0]: ") and "=" in line)
    assert env["NCCL_SOCKET_IFNAME"] == "eth9"
    assert env["NCCL_IB_DISABLE"] == "0"
