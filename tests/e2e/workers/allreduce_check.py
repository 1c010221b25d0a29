"""E2E worker: check that the launcher's env agrees with torch.distributed.

Joins a gloo process group via ``init_method="env://"``, verifies that the
group's world size and rank match WORLD_SIZE / RANK, all-reduces each rank's
id (SUM) and all-gathers the ranks, then prints exactly one JSON line:

    {"rank": R, "local_rank": L, "world_size": W, "node_rank": N,
     "sum": S, "ranks": [...], "torch": "X.Y.Z", "env": {...}}

Exits 0 on success, 1 (with a message on stderr) on any mismatch.
"""

import json
import os
import sys

import torch
import torch.distributed as dist
from worker_exit import exit_now

ENV_VARS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK",
    "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
)


def fail(message: str) -> None:
    print(f"allreduce_check: error: {message}", file=sys.stderr, flush=True)
    sys.exit(1)


def main() -> int:
    torch.set_num_threads(1)
    env = {name: os.environ.get(name) for name in ENV_VARS}
    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    node_rank_env = os.environ.get("NODE_RANK", os.environ.get("GROUP_RANK"))
    node_rank = int(node_rank_env) if node_rank_env is not None else None

    dist.init_process_group("gloo", init_method="env://")

    if dist.get_world_size() != world_size:
        fail(f"dist world size {dist.get_world_size()} != "
             f"WORLD_SIZE {world_size}")
    if dist.get_rank() != rank:
        fail(f"dist rank {dist.get_rank()} != RANK {rank}")

    total = torch.tensor([rank], dtype=torch.int64)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)
    expected_sum = world_size * (world_size - 1) // 2
    if total.item() != expected_sum:
        fail(f"all_reduce sum {total.item()} != expected {expected_sum}")

    gathered = [torch.zeros(1, dtype=torch.int64) for _ in range(world_size)]
    dist.all_gather(gathered, torch.tensor([rank], dtype=torch.int64))
    ranks = sorted(int(t.item()) for t in gathered)
    if ranks != list(range(world_size)):
        fail(f"all_gather ranks {ranks} != {list(range(world_size))}")

    dist.barrier()
    dist.destroy_process_group()

    print(json.dumps({
        "rank": rank,
        "local_rank": local_rank,
        "world_size": world_size,
        "node_rank": node_rank,
        "sum": int(total.item()),
        "ranks": ranks,
        "torch": torch.__version__.split("+")[0],
        "env": env,
    }), flush=True)
    return 0


if __name__ == "__main__":
    exit_now(main())
