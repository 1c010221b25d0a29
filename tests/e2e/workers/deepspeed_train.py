"""E2E worker: a DeepSpeed job under dgt-run (DeepSpeed on CPU: DS_ACCELERATOR=cpu, gloo).

Mode `train` (default): a 6 -> 2 linear model trained for --steps SGD steps with
`deepspeed.initialize` and ZeRO stage 1 (a torch optimizer passed in: DeepSpeed's own optimizers
need compiled ops, which the peers venv's DeepSpeed is built without). Each rank trains on its
own micro-batch, generated from the rank by exact formulas (`batch`), so the run's full batch is
the concatenation of every rank's micro-batch and test_deepspeed.py recomputes the trajectory in
plain Python. Prints one JSON line:

    {"rank": R, "local_rank_arg": N, "env": {...}, "zero_stage": 1, "optimizer": "...",
     "losses": [hex, ...], "params": [hex, ...]}

`losses` are the step losses averaged over every rank (all_reduce), `params` the weights and
biases after the last step, both as float.hex() so that ranks are compared bit for bit.

Mode `aml`: only `deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=True)`, for
a worker started without RANK/WORLD_SIZE/LOCAL_RANK/MASTER_ADDR, so DeepSpeed has to take them
from the OMPI_COMM_WORLD_* / AZ_BATCH_MASTER_NODE variables of `--distribution mpi`. Prints one
JSON line with what the worker started with (`before`), what DeepSpeed derived (`after`), the
process group's rank and size and an all_reduce of the ranks.
"""

import argparse
import json
import os
import sys
from worker_exit import exit_now

IN, OUT, MICRO = 6, 2, 4
ENV_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
            "CROSS_RANK", "CROSS_SIZE", "LOCAL_SIZE", "OMPI_COMM_WORLD_RANK",
            "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
            "AZ_BATCH_MASTER_NODE", "AZ_BATCHAI_MPI_MASTER_NODE", "AZUREML_EXPERIMENT_ID")


def batch(rank):
    """Rank `rank`'s micro-batch: MICRO inputs of IN values and their OUT targets, all exact in
    float32 (multiples of 1/32), from a fixed linear map. Kept in step with test_deepspeed.py."""
    xs = [[((rank * 5 + i * 3 + j * 7) % 13 - 6) / 8 for j in range(IN)] for i in range(MICRO)]
    w = [[((k * 3 + j * 5) % 7 - 3) / 4 for j in range(IN)] for k in range(OUT)]
    b = [0.5, -0.25]
    ys = [[sum(w[k][j] * x[j] for j in range(IN)) + b[k] for k in range(OUT)] for x in xs]
    return xs, ys


def initial_weights():
    """(weight OUTxIN, bias OUT): exact in float32."""
    return ([[((k + 2 * j) % 5 - 2) * 0.125 for j in range(IN)] for k in range(OUT)],
            [0.0] * OUT)


def skip_shm_comm_op(deepspeed):
    """DeepSpeed's CPU accelerator builds its shared-memory allreduce (deepspeed_shm_comm) when
    the first communication backend is made: a JIT g++ -O3 compile under TORCH_EXTENSIONS_DIR
    (the peers venv's DeepSpeed is installed without compiled ops, DS_BUILD_OPS=0), which had
    not finished after 2 minutes on the 2-core build machine. Marking the op incompatible (DeepSpeed keeps the
    probe's answers in this dict) leaves every collective to gloo."""
    deepspeed.ops.__compatible_ops__["deepspeed_shm_comm"] = False


def env_now():
    return {name: os.environ.get(name) for name in ENV_VARS}


def train(args):
    import deepspeed
    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    env = env_now()
    skip_shm_comm_op(deepspeed)
    deepspeed.init_distributed(dist_backend="gloo")
    rank, world = dist.get_rank(), dist.get_world_size()

    model = torch.nn.Linear(IN, OUT)
    w0, b0 = initial_weights()
    with torch.no_grad():
        model.weight.copy_(torch.tensor(w0))
        model.bias.copy_(torch.tensor(b0))
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    config = {
        "train_batch_size": MICRO * world,
        "train_micro_batch_size_per_gpu": MICRO,
        "gradient_accumulation_steps": 1,
        "zero_optimization": {"stage": 1},
        # A torch optimizer under ZeRO: DeepSpeed asks for this to be said explicitly.
        "zero_allow_untested_optimizer": True,
        "steps_per_print": 1000000,
    }
    # `args` carries --local_rank: DeepSpeed checks it against LOCAL_RANK.
    engine, ds_optimizer, _, _ = deepspeed.initialize(args=args, model=model, optimizer=optimizer,
                                                      config=config)
    xs, ys = batch(rank)
    x, y = torch.tensor(xs), torch.tensor(ys)
    losses = []
    for _ in range(args.steps):
        loss = torch.nn.functional.mse_loss(engine(x), y)
        engine.backward(loss)
        engine.step()
        mean = loss.detach().clone()
        dist.all_reduce(mean)
        losses.append((mean / world).item().hex())
    params = [v.hex() for p in (model.weight, model.bias) for v in p.detach().flatten().tolist()]
    print(json.dumps({"rank": rank, "local_rank_arg": args.local_rank, "env": env,
                      "zero_stage": engine.zero_optimization_stage(),
                      "optimizer": type(ds_optimizer).__name__, "losses": losses,
                      "params": params}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def aml(args):
    import deepspeed
    import torch
    import torch.distributed as dist

    # INFO shows which discovery branch DeepSpeed took ("Discovered AzureML settings ...").
    deepspeed.utils.logging.set_log_level_from_string("info")
    before = env_now()
    skip_shm_comm_op(deepspeed)
    deepspeed.init_distributed(dist_backend="gloo", auto_mpi_discovery=True)
    after = env_now()
    total = torch.tensor([dist.get_rank()])
    dist.all_reduce(total)
    print(json.dumps({"rank": dist.get_rank(), "world_size": dist.get_world_size(),
                      "sum": int(total.item()), "before": before, "after": after}), flush=True)
    dist.barrier()
    dist.destroy_process_group()
    return 0


def main():
    parser = argparse.ArgumentParser()
    # DeepSpeed's launcher appends --local_rank=N; dgt-run does with --pass-local-rank-arg.
    parser.add_argument("--local_rank", type=int, default=-1)
    parser.add_argument("--mode", choices=("train", "aml"), default="train")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--lr", type=float, default=0.25)
    args = parser.parse_args()
    return train(args) if args.mode == "train" else aml(args)


if __name__ == "__main__":
    exit_now(main())
