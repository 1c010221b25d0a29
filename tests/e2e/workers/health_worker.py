"""E2E worker for tests/e2e/test_health.py: a round whose WORLD_SIZE is --wait-world-size is
expected to change (a node leaves it), so its ranks all_reduce until the launcher stops them (at
most --max-seconds). Any other round runs workers/ddp_steps.py's exact DDP steps (--steps) and
prints its JSON result line. Each start prints {"event": "start", "env": {...}} first.
"""
import argparse
import json
import os
import sys
import time

import ddp_steps
import torch
import torch.distributed as dist
from worker_exit import exit_now


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--wait-world-size", type=int, default=-1)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--max-seconds", type=float, default=60)
    args = ap.parse_args()
    env = {k: os.environ.get(k) for k in ddp_steps.ENV_VARS}
    print(json.dumps({"event": "start", "pid": os.getpid(), "env": env}), flush=True)
    if int(os.environ["WORLD_SIZE"]) != args.wait_world_size:
        sys.argv = [sys.argv[0], f"--steps={args.steps}"]
        return ddp_steps.main()
    dist.init_process_group("gloo", init_method="env://")
    deadline = time.monotonic() + args.max_seconds
    while time.monotonic() < deadline:
        dist.all_reduce(torch.tensor([1], dtype=torch.int64))
        time.sleep(0.1)
    return 2  # The round was expected to change.


if __name__ == "__main__":
    exit_now(main())
