"""A small torch.distributed job for trying `torchrun --rdzv-backend=dgt` (docs/TORCHRUN_BACKEND.md):
every rank all-reduces rank + 1 once per step (gloo, CPU), --steps steps of --step-s seconds, and
checks the exact sum. Rank 0 prints one line per 10 steps and a final
``all-reduce exact: world W, N steps, pids unchanged``. Exits 1 on a wrong sum.

    torchrun --rdzv-backend=dgt --rdzv-endpoint=HOST:29400 --rdzv-id=demo --nnodes=2 \\
      --nproc-per-node=2 examples/torchrun_allreduce.py --steps 60
"""
import argparse
import os
import sys
import time

import torch
import torch.distributed as dist


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=60)
    ap.add_argument("--step-s", type=float, default=0.5)
    args = ap.parse_args()
    dist.init_process_group("gloo")
    rank, world = dist.get_rank(), dist.get_world_size()
    expected = world * (world + 1) / 2
    for step in range(args.steps):
        t = torch.tensor([rank + 1.0], dtype=torch.float64)
        dist.all_reduce(t)
        if t.item() != expected:
            print(f"rank {rank}: step {step}: sum {t.item()} != {expected}", flush=True)
            return 1
        if rank == 0 and step % 10 == 0:
            print(f"step {step}: sum {t.item():g} (pid {os.getpid()}, restart "
                  f"{os.environ.get('TORCHELASTIC_RESTART_COUNT')})", flush=True)
        time.sleep(args.step_s)
    if rank == 0:
        print(f"all-reduce exact: world {world}, {args.steps} steps, pid {os.getpid()}", flush=True)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
