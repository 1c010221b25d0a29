"""TensorFlow across nodes: dgt-run --distribution tensorflow with two agents on loopback.

Each node publishes its workers' host:port in the round's store and every node builds the same
TF_CONFIG from all of them (docs/ENVIRONMENT.md). A real MultiWorkerMirroredStrategy job (the
peers venv's tensorflow-cpu, `python2` fixture) trains a tiny Keras model across the two agents
and must end with the exact weights of the same steps computed here in rational numbers; a group
restart through dgt-rendezvous gives a new round with the same cluster spec on every node.

TensorFlow's gRPC server listens on every interface at the port TF_CONFIG names (it has no
option to bind one address); every address in these jobs is 127.0.0.1, so all traffic stays on
loopback.

ParameterServerStrategy is not run here: Keras 3 (TensorFlow 2.16 and later, 2.21 here) has no
ParameterServerStrategy support in fit(), and its ps and worker tasks only serve
(`tf.distribute.Server(...).join()` never returns), so such a job ends only when the launcher is
told to stop them; the ps TF_CONFIG (type "ps", the first global ranks) is checked below without
TensorFlow.
"""
import json
import re
import socket
import subprocess
from fractions import Fraction

from conftest import BIN, PYTHON, WORKERS, dgt_env

DGT_RUN = BIN / "dgt-run"
MWMS = WORKERS / "tf_mwms.py"


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def tf_records(text):
    return [json.loads(m) for m in re.findall(r"^\[rank\d+\]: (\{.*\})$", text, re.M)]


def expected_weights():
    """The weights after the job's steps, in exact rational arithmetic: full-batch SGD on the mean
    squared error over both workers' examples of each step (tf_mwms.py --solo prints them)."""
    d = json.loads(subprocess.run([PYTHON, MWMS, "--solo"], check=True, capture_output=True,
                                  text=True, timeout=30).stdout)
    lr = Fraction(d["lr"])
    w, b = [Fraction(0), Fraction(0)], Fraction(0)
    for step in d["batches"]:
        rows = [row for worker in step for row in worker]
        errors = [(w[0] * x[0] + w[1] * x[1] + b - y, x) for x, y in rows]
        grad_w = [sum(2 * e * x[i] for e, x in errors) / len(rows) for i in range(2)]
        grad_b = sum(2 * e for e, _ in errors) / len(rows)
        w = [w[i] - lr * grad_w[i] for i in range(2)]
        b -= lr * grad_b
    return [[float(v) for v in w], [float(b)]], (w, b)


def test_multi_worker_mirrored_strategy_across_two_static_nodes(spawn, python2):
    port = free_port()
    env = dgt_env(DGT_PYTHON=python2, TF_CPP_MIN_LOG_LEVEL=3, TF_ENABLE_ONEDNN_OPTS=0)
    nodes = [spawn([DGT_RUN, "--nnodes=2", "--rdzv-backend=static", f"--node-rank={r}",
                    "--master-addr=127.0.0.1", f"--master-port={port}", "--join-timeout=60",
                    "--distribution=tensorflow", "--nproc-per-node=1", MWMS],
                   name=f"node{r}", env=env) for r in (1, 0)]
    for n in nodes:
        assert n.wait(timeout=120) == 0, n.stderr
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
    weights, (w, b) = expected_weights()
    assert (w, b) == ([Fraction(1285, 4096), Fraction(-1475, 4096)], Fraction(865, 4096))
    assert recs[0]["weights"] == weights
    # Each node's agent logged the same cluster, published through node rank 0's store.
    line = f"TensorFlow cluster of round 0: {','.join(workers)}"
    assert all(line in n.stderr for n in nodes), [n.stderr for n in nodes]


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
