"""TensorFlow across nodes: dgt-run --distribution tensorflow with two agents on loopback.

Each node publishes its workers' host:port in the round's store and every node builds the same
TF_CONFIG from all of them (docs/ENVIRONMENT.md). Real TensorFlow jobs (the peers venv's
tensorflow-cpu 2.21, `python2` fixture) across two static agents: MultiWorkerMirroredStrategy
with a tiny Keras model, and ParameterServerStrategy with a ps, a chief and two workers; each must
end with the exact values of the same steps computed here in rational numbers. A group restart
through dgt-rendezvous gives a new round with the same cluster spec on every node.

TensorFlow's gRPC server listens on every interface at the port TF_CONFIG names (it has no
option to bind one address); every address in these jobs is 127.0.0.1, so all traffic stays on
loopback.
"""
import json
import re
import socket
import subprocess
from fractions import Fraction

from conftest import BIN, PYTHON, WORKERS, dgt_env

DGT_RUN = BIN / "dgt-run"
MWMS = WORKERS / "tf_mwms.py"
PS = WORKERS / "tf_ps.py"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tf_records(text):
    return [json.loads(m) for m in re.findall(r"^\[rank\d+\]: (\{.*\})$", text, re.M)]


def exact_sgd(worker_script):
    """The linear model's weights and bias after the job's steps, in exact rational arithmetic:
    full-batch SGD on the mean squared error over each step's rows, from zero (the script's
    --solo prints the rows of each step: for MWMS both workers' rows)."""
    d = json.loads(subprocess.run([PYTHON, worker_script, "--solo"], check=True,
                                  capture_output=True, text=True, timeout=30).stdout)
    lr = Fraction(d["lr"])
    w, b = [Fraction(0), Fraction(0)], Fraction(0)
    for step in d["batches"]:
        errors = [(w[0] * x[0] + w[1] * x[1] + b - y, x) for x, y in step]
        grad_w = [sum(2 * e * x[i] for e, x in errors) / len(step) for i in range(2)]
        grad_b = sum(2 * e for e, _ in errors) / len(step)
        w = [w[i] - lr * grad_w[i] for i in range(2)]
        b -= lr * grad_b
    return w, b


def static_pair(spawn, python2, extra):
    """Node ranks 1 and 0 of a static two-node TensorFlow job; returns them once both exited 0."""
    port = free_port()
    env = dgt_env(DGT_PYTHON=python2, TF_CPP_MIN_LOG_LEVEL=3, TF_ENABLE_ONEDNN_OPTS=0)
    nodes = [spawn([DGT_RUN, "--nnodes=2", "--rdzv-backend=static", f"--node-rank={r}",
                    "--master-addr=127.0.0.1", f"--master-port={port}", "--join-timeout=60",
                    "--distribution=tensorflow", *extra], name=f"node{r}", env=env)
             for r in (1, 0)]
    for n in nodes:
        assert n.wait(timeout=120) == 0, n.stderr
    return nodes


def test_multi_worker_mirrored_strategy_across_two_static_nodes(spawn, python2):
    nodes = static_pair(spawn, python2, ["--nproc-per-node=1", MWMS])
    recs = sorted((r for n in nodes for r in tf_records(n.stdout)), key=lambda r: r["rank"])
    assert [r["rank"] for r in recs] == [0, 1], [n.stdout for n in nodes]
    workers = recs[0]["tf_config"]["cluster"]["worker"]
    assert len(workers) == 2 and len(set(workers)) == 2
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", a) for a in workers), workers
    for r in recs:
        assert r["tf_config"] == {"cluster": {"worker": workers},
                                  "task": {"type": "worker", "index": r["rank"]},
                                  "environment": "cloud"}
        assert r["replicas"] == 2
    # Both workers hold the same float32 bytes, and those are the exact result of the steps.
    assert recs[0]["raw"] == recs[1]["raw"]
    w, b = exact_sgd(MWMS)
    assert (w, b) == ([Fraction(1285, 4096), Fraction(-1475, 4096)], Fraction(865, 4096))
    assert recs[0]["weights"] == [[float(w[0]), float(w[1])], [float(b)]]
    # Each node's agent logged the same cluster, published through node rank 0's store.
    line = f"TensorFlow cluster of round 0: {','.join(workers)}"
    assert all(line in n.stderr for n in nodes), [n.stderr for n in nodes]


def test_parameter_server_strategy_across_two_static_nodes(spawn, python2, tmp_path):
    # 2 nodes x 2 processes: global rank 0 is the ps, 1 the chief (the coordinator), 2 and 3 the
    # workers; the chief's end (a file in tmp_path) ends the ps and the workers.
    nodes = static_pair(spawn, python2, ["--nproc-per-node=2", "--parameter-server-count=1",
                                         "--tf-chief", PS, tmp_path])
    recs = sorted((r for n in nodes for r in tf_records(n.stdout)), key=lambda r: r["rank"])
    assert [r["rank"] for r in recs] == [0, 1, 2, 3], [n.stdout for n in nodes]
    cluster = recs[0]["tf_config"]["cluster"]
    assert list(cluster) == ["ps", "chief", "worker"]
    addrs = cluster["ps"] + cluster["chief"] + cluster["worker"]
    assert len(addrs) == 4 and len(set(addrs)) == 4
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", a) for a in addrs), addrs
    tasks = [{"type": "ps", "index": 0}, {"type": "chief", "index": 0},
             {"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    assert [r["tf_config"] for r in recs] == [
        {"cluster": cluster, "task": t, "environment": "cloud"} for t in tasks]
    chief = recs[1]
    assert chief["devices"] == ["/job:ps/replica:0/task:0/device:CPU:0"] * 2
    w, b = exact_sgd(PS)
    assert (w, b) == ([Fraction(-355, 4096), Fraction(-1027, 4096)], Fraction(39, 128))
    assert chief["weights"] == [[float(w[0]), float(w[1])], [float(b)]]


def test_tf_config_across_nodes_survives_a_group_restart(spawn, rendezvous):
    # 2 nodes x 2 processes: global rank 0 is the ps, 1 the chief, 2 and 3 the workers. Rank 3
    # fails once: the group restart is a new round, whose addresses are published again.
    nodes = [spawn([DGT_RUN, "--nnodes=2", "--nproc-per-node=2", f"--rdzv-endpoint={rendezvous}",
                    "--rdzv-id=tf-restart", f"--node-id=node-{i}",
                    "--rdzv-conf=last_call_timeout=1", "--stop-timeout=5", "--max-restarts=1",
                    "--distribution=tensorflow", "--parameter-server-count=1", "--tf-chief",
                    WORKERS / "tf_config_check.py", "--fail-rank=3"], name=f"node-{i}")
             for i in range(2)]
    for n in nodes:
        assert n.wait(timeout=60) == 0, n.stderr
    recs = {(r["attempt"], r["rank"]): r for n in nodes for r in tf_records(n.stdout)}
    assert sorted(recs) == [(a, r) for a in (0, 1) for r in range(4)], recs
    assert all(r["bound"] for r in recs.values())
    cluster = recs[(0, 0)]["tf_config"]["cluster"]
    assert list(cluster) == ["ps", "chief", "worker"]
    addrs = cluster["ps"] + cluster["chief"] + cluster["worker"]
    assert len(addrs) == 4 and len(set(addrs)) == 4
    assert all(re.fullmatch(r"127\.0\.0\.1:\d+", a) for a in addrs), addrs
    tasks = [{"type": "ps", "index": 0}, {"type": "chief", "index": 0},
             {"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    for attempt in (0, 1):
        for rank in range(4):
            # The same spec on every node and in both rounds (each node keeps its ports).
            assert recs[(attempt, rank)]["tf_config"] == {
                "cluster": cluster, "task": tasks[rank], "environment": "cloud"}
    for n in nodes:
        for rnd in (0, 1):
            assert f"TensorFlow cluster of round {rnd}: {','.join(addrs)}" in n.stderr, n.stderr


def test_a_node_missing_from_the_exchange_ends_the_agent_with_75(spawn):
    # Node rank 0 of a static two-node TensorFlow job alone: no worker starts without the whole
    # cluster spec, and the wait ends at --join-timeout naming the node rank that is missing.
    port = free_port()
    p = spawn([DGT_RUN, "--nnodes=2", "--rdzv-backend=static", "--node-rank=0",
               "--master-addr=127.0.0.1", f"--master-port={port}", "--join-timeout=2",
               "--distribution=tensorflow", "--nproc-per-node=1", "--no-python", "/bin/echo",
               "started"])
    assert p.wait(timeout=30) == 75, p.stderr
    assert p.stdout == ""
    assert p.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: TF_CONFIG: node rank(s) 1 did not publish their TensorFlow addresses in "
        f"the round's store at 127.0.0.1:{port} within 2 s (--join-timeout): is every node "
        "started with --distribution tensorflow?")


def test_nodes_with_different_roles_are_refused_on_both(spawn):
    # Node rank 0 with a ps and a chief, node rank 1 with a chief only: they would build different
    # clusters ({ps,chief,worker x2} and {chief,worker x3}); both refuse with 77, no worker starts.
    port = free_port()
    common = ["--nnodes=2", "--rdzv-backend=static", "--master-addr=127.0.0.1",
              f"--master-port={port}", "--join-timeout=20", "--nproc-per-node=2",
              "--distribution", "tensorflow", "--tf-chief", "--no-python", "/bin/echo", "started"]
    nodes = [spawn([DGT_RUN, "--node-rank=0", "--parameter-server-count", "1", *common],
                   name="node-0"),
             spawn([DGT_RUN, "--node-rank=1", *common], name="node-1")]
    values = {0: "--parameter-server-count=1", 1: "--parameter-server-count=0"}
    for rank, n in enumerate(nodes):
        assert n.wait(timeout=40) == 77, n.stderr
        assert "started" not in n.stdout
        other = 1 - rank
        assert n.stderr.strip().splitlines()[-1] == (
            f"dgt-run: error: TF_CONFIG: node rank {other} was started with {values[other]}, "
            f"this node (node rank {rank}) with {values[rank]}; the nodes would build different "
            "TensorFlow clusters: give every node the same --parameter-server-count, --tf-chief, "
            "--worker-count and --nproc-per-node")
