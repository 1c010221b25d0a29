"""Worker for the etcd HA tests (tests/e2e/test_etcd_ha.py): gloo all_reduce steps until the
test says stop, each step on one line, so the test sees every rank and PID that ran.

Prints one JSON line at start ({"event": "start", "rank", "pid", "world_size"}), one per step
({"event": "step", "rank", "pid", "step", "world_size", "sum"}: the all_reduce (SUM) of every
rank's RANK, checked against W*(W-1)/2) and one at the end ({"event": "done", "rank", "pid",
"steps"}). Steps run every --step-ms milliseconds until --until-file exists on some rank (the
ranks agree on it in the same all_reduce, so all stop after the same step) and at least
--min-steps ran. Exit 0; 1 on a wrong sum; 2 when --max-seconds pass without the file.
"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
from worker_exit import exit_now


def emit(**fields):
    print(json.dumps(fields), flush=True)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--until-file", required=True)
    ap.add_argument("--min-steps", type=int, default=3)
    ap.add_argument("--step-ms", type=int, default=100)
    ap.add_argument("--max-seconds", type=float, default=120)
    args = ap.parse_args()
    torch.set_num_threads(1)
    pid = os.getpid()
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    emit(event="start", rank=rank, pid=pid, world_size=world)
    dist.init_process_group("gloo", init_method="env://")
    if (dist.get_rank(), dist.get_world_size()) != (rank, world):
        print(f"ha_steps: dist rank/world {dist.get_rank()}/{dist.get_world_size()} != "
              f"RANK/WORLD_SIZE {rank}/{world}", file=sys.stderr, flush=True)
        return 1
    expected = world * (world - 1) // 2
    deadline = time.monotonic() + args.max_seconds
    step = 0
    while True:
        t = torch.tensor([rank, 1 if os.path.exists(args.until_file) else 0], dtype=torch.int64)
        dist.all_reduce(t)
        step += 1
        if int(t[0]) != expected:
            print(f"ha_steps: rank {rank} step {step}: all_reduce gave {int(t[0])}, expected "
                  f"{expected}", file=sys.stderr, flush=True)
            return 1
        emit(event="step", rank=rank, pid=pid, step=step, world_size=world, sum=int(t[0]))
        if int(t[1]) > 0 and step >= args.min_steps:
            break
        if time.monotonic() > deadline:
            print(f"ha_steps: rank {rank}: {args.until_file} did not appear within "
                  f"{args.max_seconds} s", file=sys.stderr, flush=True)
            return 2
        time.sleep(args.step_ms / 1000.0)
    emit(event="done", rank=rank, pid=pid, steps=step)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_now(main())
