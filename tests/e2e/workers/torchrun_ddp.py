"""E2E worker for torchrun --rdzv-backend=dgt (tests/e2e/test_torchrun_backend.py): --steps of
workers/ddp_steps.py's exact DDP steps (batch(rank), lr 1/32, float64), then --idle-steps without
DDP; every step ends with one all-reduce of rank + 1 (an exact sum) and --step-sleep seconds, so
that a test can act mid-run.

Appends JSON lines to --out/<pid>.jsonl: {"event": "start", ...} once the process group is up,
and {"event": "done", "weight", "bias", "sums", ...} at the end; both carry rank, world_size,
pid, and the launcher's GROUP_RANK, MASTER_PORT and TORCHELASTIC_RESTART_COUNT.

--crash-rank R --crash-flag FILE: rank R exits with code 3 after its first step when FILE does
not exist yet (it creates FILE first), so exactly one worker crashes once in the whole job.
"""
import argparse
import json
import os
import sys
import time
from pathlib import Path

import torch
import torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel
from worker_exit import exit_now

LR = 1 / 32


def batch(rank):
    x = [[rank + 1, 2, -rank], [1, -rank, 3]]
    y = [[rank - 1], [2]]
    return x, y


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--idle-steps", type=int, default=0)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--out", required=True)
    ap.add_argument("--crash-rank", type=int, default=-1)
    ap.add_argument("--crash-flag", default="")
    args = ap.parse_args()
    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    rank, world = dist.get_rank(), dist.get_world_size()
    out = Path(args.out) / f"{os.getpid()}.jsonl"
    common = {"rank": rank, "world_size": world, "pid": os.getpid(),
              "group_rank": int(os.environ["GROUP_RANK"]),
              "master_port": int(os.environ["MASTER_PORT"]),
              "restart_count": int(os.environ["TORCHELASTIC_RESTART_COUNT"])}

    def record(event, **kw):
        with open(out, "a", encoding="utf-8") as f:
            f.write(json.dumps({"event": event, **common, **kw}) + "\n")

    record("start")
    model = torch.nn.Linear(3, 1).double()
    with torch.no_grad():
        model.weight.copy_(torch.tensor([[rank + 0.25, -0.5, 0.125]], dtype=torch.float64))
        model.bias.fill_(0.5 - rank)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    x, y = (torch.tensor(v, dtype=torch.float64) for v in batch(rank))
    sums = []
    for step in range(args.steps + args.idle_steps):
        if step < args.steps:
            opt.zero_grad()
            loss = ((ddp(x) - y) ** 2).mean()
            loss.backward()
            opt.step()
        t = torch.tensor([rank + 1.0], dtype=torch.float64)
        dist.all_reduce(t)
        sums.append(t.item())
        if rank == args.crash_rank and step == 0 and args.crash_flag:
            flag = Path(args.crash_flag)
            if not flag.exists():
                flag.write_text(str(os.getpid()))
                record("crash")
                os._exit(3)
        time.sleep(args.step_sleep)
    record("done", weight=model.weight.detach().flatten().tolist(), bias=model.bias.item(),
           sums=sums)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_now(main())
