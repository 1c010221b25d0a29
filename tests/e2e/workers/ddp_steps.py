"""E2E worker: DistributedDataParallel steps on a tiny float64 model whose exact result the test
computes on its own (tests/e2e/test_launch.py, with fractions).

Every rank builds Linear(3, 1) in float64 with weights that depend on its RANK, so the job only
agrees if DDP broadcasts rank 0's parameters at construction. Each step, rank r trains on its own
batch (batch(r): two samples with integer features and targets), the loss is the batch's mean
squared error, DDP averages the gradients over the world (gloo all-reduce) and SGD with lr 1/32
applies them. Every value is a dyadic rational of few bits, so float64 holds it exactly whatever
the order of the all-reduce's sums: the test compares bit for bit.

Prints one JSON line when it is done: {"rank", "world_size", "weight", "bias", "torch", "env"}
(env: the launcher's variables it got).

--hold-file PATH: after init_process_group, print "rank R held" and wait (at most 120 s, then
exit 1) until PATH exists before training, so a test can kill a node while the job runs.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from worker_exit import exit_now

ENV_VARS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK", "GROUP_RANK",
            "GROUP_WORLD_SIZE", "ROLE_NAME", "ROLE_RANK", "ROLE_WORLD_SIZE", "MASTER_ADDR",
            "MASTER_PORT", "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID",
            "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
            "TORCH_NCCL_ASYNC_ERROR_HANDLING")
LR = 1 / 32


def batch(rank):
    """Rank `rank`'s samples: features (2 x 3) and targets (2 x 1), small integers."""
    x = [[rank + 1, 2, -rank], [1, -rank, 3]]
    y = [[rank - 1], [2]]
    return x, y


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--hold-file")
    args = ap.parse_args()
    torch.set_num_threads(1)
    env = {k: os.environ.get(k) for k in ENV_VARS}
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    model = torch.nn.Linear(3, 1).double()
    with torch.no_grad():
        # Different on every rank: DDP's constructor must replace them with rank 0's.
        model.weight.copy_(torch.tensor([[rank + 0.25, -0.5, 0.125]], dtype=torch.float64))
        model.bias.fill_(0.5 - rank)
    if args.hold_file:
        print(f"rank {rank} held", flush=True)
        deadline = time.monotonic() + 120
        while not os.path.exists(args.hold_file):
            if time.monotonic() > deadline:
                print(f"rank {rank}: {args.hold_file} did not appear within 120 s", flush=True)
                return 1
            time.sleep(0.05)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    x, y = (torch.tensor(v, dtype=torch.float64) for v in batch(rank))
    for _ in range(args.steps):
        opt.zero_grad()
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
    print(json.dumps({"rank": rank, "world_size": world,
                      "weight": model.weight.detach().flatten().tolist(),
                      "bias": model.bias.item(), "torch": torch.__version__.split("+")[0],
                      "env": env}), flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_now(main())
