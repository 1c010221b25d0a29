"""DeepSpeed 0.19 jobs under dgt-run: 2 agents x 2 workers on loopback, the peers venv's
DeepSpeed (built without compiled ops) on its CPU accelerator (DS_ACCELERATOR=cpu) over gloo.

1. ZeRO stage 1 training through `deepspeed.initialize`, with `--pass-local-rank-arg` (the
   `--local_rank=N` that DeepSpeed's own launcher appends and its engine checks against
   LOCAL_RANK): every rank prints the same losses and weights bit for bit, the losses fall, and
   they match a plain-Python recomputation of the same full-batch SGD.
2. Azure ML's MPI form (`--distribution mpi`): the workers start without RANK, WORLD_SIZE,
   LOCAL_RANK and MASTER_ADDR, so `deepspeed.init_distributed(auto_mpi_discovery=True)` has to
   derive them from the OMPI_COMM_WORLD_* and AZ_BATCH_MASTER_NODE variables dgt sets. With
   AZUREML_EXPERIMENT_ID set (as Azure ML does) DeepSpeed takes its Azure ML branch
   (patch_aml_env_for_torch_nccl_backend, multi-node case); without it, it would take
   mpi_discovery, which needs mpi4py and a real MPI launch.
"""
import json
import re

from conftest import BIN, WORKERS, dgt_env

SCRIPT = WORKERS / "deepspeed_train.py"
IN, OUT, MICRO, WORLD = 6, 2, 4, 4
STEPS, LR = 6, 0.25


def batch(rank):
    """The worker's micro-batch of rank `rank` (workers/deepspeed_train.py, same formulas)."""
    xs = [[((rank * 5 + i * 3 + j * 7) % 13 - 6) / 8 for j in range(IN)] for i in range(MICRO)]
    w = [[((k * 3 + j * 5) % 7 - 3) / 4 for j in range(IN)] for k in range(OUT)]
    b = [0.5, -0.25]
    ys = [[sum(w[k][j] * x[j] for j in range(IN)) + b[k] for k in range(OUT)] for x in xs]
    return xs, ys


def reference():
    """Losses and final (weights, biases) of full-batch SGD on mean squared error, in doubles:
    what averaging every rank's gradient computes, without DeepSpeed or torch."""
    w = [[((k + 2 * j) % 5 - 2) * 0.125 for j in range(IN)] for k in range(OUT)]
    b = [0.0] * OUT
    xs, ys = [], []
    for r in range(WORLD):
        bx, by = batch(r)
        xs += bx
        ys += by
    n = len(xs) * OUT
    losses = []
    for _ in range(STEPS):
        err = [[sum(w[k][j] * x[j] for j in range(IN)) + b[k] - y[k] for k in range(OUT)]
               for x, y in zip(xs, ys)]
        losses.append(sum(e * e for row in err for e in row) / n)
        gw = [[2 / n * sum(e[k] * x[j] for e, x in zip(err, xs)) for j in range(IN)]
              for k in range(OUT)]
        gb = [2 / n * sum(e[k] for e in err) for k in range(OUT)]
        w = [[w[k][j] - LR * gw[k][j] for j in range(IN)] for k in range(OUT)]
        b = [b[k] - LR * gb[k] for k in range(OUT)]
    return losses, [v for row in w for v in row] + b


def run_two_agents(spawn, rendezvous, run_id, args, env):
    agents = [spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=2",
                     f"--rdzv-endpoint={rendezvous}", f"--rdzv-id={run_id}", *args],
                    name=f"{run_id}{i}", env=env) for i in range(2)]
    for a in agents:
        assert a.wait(timeout=150) == 0, a.stdout[-3000:] + a.stderr[-3000:]
    out = {}
    for node, a in enumerate(agents):
        for rank, line in re.findall(r"^\[rank(\d+)\]: (\{.*\})$", a.stdout, re.M):
            out[int(rank)] = dict(json.loads(line), agent=node)
    assert sorted(out) == [0, 1, 2, 3], [a.stdout[-2000:] for a in agents]
    return out, agents


def test_zero1_training_loss_identical_on_every_rank(spawn, rendezvous, python2, tmp_path):
    # TORCH_EXTENSIONS_DIR: should DeepSpeed JIT-build an op after all, not in ~/.cache.
    env = dgt_env(DGT_PYTHON=python2, DS_ACCELERATOR="cpu", TORCH_EXTENSIONS_DIR=tmp_path / "ext")
    recs, _ = run_two_agents(spawn, rendezvous, "e2e-deepspeed",
                             ["--pass-local-rank-arg", SCRIPT, f"--steps={STEPS}", f"--lr={LR}"],
                             env)
    node_of_agent = {}
    for rank, r in recs.items():
        assert r["rank"] == rank
        assert r["local_rank_arg"] == rank % 2  # --local_rank=N, and DeepSpeed agreed with it.
        e = r["env"]
        assert (e["RANK"], e["LOCAL_RANK"], e["WORLD_SIZE"]) == (str(rank), str(rank % 2), "4")
        assert (e["CROSS_RANK"], e["CROSS_SIZE"], e["LOCAL_SIZE"]) == (str(rank // 2), "2", "2")
        assert e["OMPI_COMM_WORLD_RANK"] is None  # Not the mpi distribution.
        node_of_agent.setdefault(r["agent"], set()).add(rank // 2)
        assert r["zero_stage"] == 1
        assert r["optimizer"] == "DeepSpeedZeroOptimizer"
    assert sorted(node_of_agent.values(), key=min) == [{0}, {1}]  # One node rank per agent.

    # Bit for bit the same on every rank (float.hex).
    assert len({tuple(r["losses"]) for r in recs.values()}) == 1, recs
    assert len({tuple(r["params"]) for r in recs.values()}) == 1, recs
    losses = [float.fromhex(h) for h in recs[0]["losses"]]
    params = [float.fromhex(h) for h in recs[0]["params"]]
    assert len(losses) == STEPS and len(params) == IN * OUT + OUT
    assert all(a > b for a, b in zip(losses, losses[1:])), losses
    assert losses[-1] < losses[0] / 2, losses

    # float32 on 4 ranks against doubles in one process: agreement to float32 rounding (measured:
    # 8e-8 relative on the losses, 3e-8 on the weights).
    ref_losses, ref_params = reference()
    for got, want in zip(losses, ref_losses):
        assert abs(got - want) <= 1e-6 * want, (losses, ref_losses)
    for got, want in zip(params, ref_params):
        assert abs(got - want) <= 1e-6, (params, ref_params)


def test_azure_ml_mpi_variables_are_enough_for_init_distributed(spawn, rendezvous, python2,
                                                                tmp_path):
    # The worker is `env -u ... python`: it starts without the torchrun-style variables that
    # dgt also sets under --distribution mpi, keeping MASTER_PORT (DeepSpeed ignores the port of
    # AZ_BATCH_MASTER_NODE and keeps MASTER_PORT when set, else uses 6105).
    stripped = ["RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR"]
    worker = ["env", *[f"-u{v}" for v in stripped], python2, "-u", SCRIPT, "--mode=aml"]
    env = dgt_env(DS_ACCELERATOR="cpu", AZUREML_EXPERIMENT_ID="dgt-e2e",
                  TORCH_EXTENSIONS_DIR=tmp_path / "ext")
    recs, agents = run_two_agents(spawn, rendezvous, "e2e-deepspeed-aml",
                                  ["--distribution=mpi", "--no-python", *worker], env)
    ports = set()
    for rank, r in recs.items():
        before, after = r["before"], r["after"]
        assert [before[v] for v in stripped] == [None] * 4
        assert before["OMPI_COMM_WORLD_RANK"] == str(rank)
        assert before["OMPI_COMM_WORLD_SIZE"] == "4"
        assert before["OMPI_COMM_WORLD_LOCAL_RANK"] == str(rank % 2)
        assert before["OMPI_COMM_WORLD_LOCAL_SIZE"] == "2"
        assert before["AZ_BATCH_MASTER_NODE"] == f"127.0.0.1:{before['MASTER_PORT']}"
        assert before["AZ_BATCHAI_MPI_MASTER_NODE"] == "127.0.0.1"
        # What DeepSpeed derived, and the process group it built from that.
        assert (after["RANK"], after["WORLD_SIZE"], after["LOCAL_RANK"]) == (str(rank), "4",
                                                                             str(rank % 2))
        assert (after["MASTER_ADDR"], after["MASTER_PORT"]) == ("127.0.0.1", before["MASTER_PORT"])
        assert (r["world_size"], r["sum"]) == (4, 6)
        assert r["agent"] == rank // 2
        ports.add(before["MASTER_PORT"])
    assert len(ports) == 1  # Node rank 0's agent store, for both nodes.
    # DeepSpeed's Azure ML branch (not mpi_discovery) found them: it logs this line per rank.
    found = re.findall(r"Discovered AzureML settings of world_rank=(\d), local_rank=(\d), "
                       r"world_size=4, master_addr=127\.0\.0\.1, master_port=(\d+)$",
                       agents[0].stdout + agents[1].stdout, re.M)
    port = ports.pop()
    assert sorted(found) == [("0", "0", port), ("1", "1", port), ("2", "0", port),
                             ("3", "1", port)], found
