"""Worker for the elastic rendezvous tests (no launcher logic of its own).

Every start prints one JSON line with the env it got. Then:
- WORLD_SIZE == --wait-world-size: keeps running all_reduces (up to --max-seconds) until the
  launcher stops it — a round that is expected to change;
- otherwise: --steps all_reduces of the ranks, each checked against the exact sum, then exit 0.
--fail-rank R --fail-code C makes rank R exit with C once, in attempt 0 (TORCHELASTIC_RESTART_COUNT
== 0), after the first all_reduce.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from worker_exit import exit_now


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--wait-world-size", type=int, default=-1)
    ap.add_argument("--steps", type=int, default=5)
    ap.add_argument("--max-seconds", type=float, default=60)
    ap.add_argument("--fail-rank", type=int, default=-1)
    ap.add_argument("--fail-code", type=int, default=3)
    args = ap.parse_args()
    env = {k: os.environ.get(k) for k in (
        "RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR",
        "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
        "TORCHELASTIC_USE_AGENT_STORE")}
    print(json.dumps({"event": "start", "pid": os.getpid(), "env": env}), flush=True)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    expected = world * (world - 1) // 2
    deadline = time.monotonic() + args.max_seconds
    step = 0
    while True:
        t = torch.tensor([rank], dtype=torch.int64)
        dist.all_reduce(t)
        if int(t.item()) != expected:
            print(f"rank {rank}: all_reduce gave {int(t.item())}, expected {expected}",
                  file=sys.stderr, flush=True)
            sys.exit(1)
        step += 1
        if rank == args.fail_rank and os.environ.get("TORCHELASTIC_RESTART_COUNT") == "0":
            # os._exit, not sys.exit: torch 1.13 tearing down a live Gloo process group at
            # interpreter exit can abort ("terminate called without an active exception"),
            # which would turn the exit code into 134.
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(args.fail_code)
        if world == args.wait_world_size:
            if time.monotonic() > deadline:
                sys.exit(2)
            time.sleep(0.1)
            continue
        if step >= args.steps:
            break
    print(json.dumps({"event": "done", "rank": rank, "world_size": world, "steps": step,
                      "sum": expected, "torch": torch.__version__.split("+")[0], "env": env}),
          flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    exit_now(main())
