"""bench/recovery's PyTorch trainer, for the torchrun anchors (and dgt-run with the same trainer).

Each step all-reduces (rank + 1) on Gloo and checks the sum exactly, then sleeps --step-ms (the
"compute"). Nothing is checkpointed: a restarted process starts again from step 0. Runs under
torch 1.13 and 2.13 (whichever interpreter the launcher starts). Writes its events, with
CLOCK_REALTIME nanoseconds, to <events-dir>/<pid>.events (one file per process, so the
launcher's output handling does not matter):
  start pid= main_ns=                 first thing, before `import torch`
  joined pid= rank= world= t_ns=      after init_process_group
  step pid= rank= step= t_ns=         after each completed all-reduce
Exit status 0 when every step summed exactly; a failed collective raises (non-zero).

Usage: python torch_trainer.py --events-dir DIR [--steps 150] [--step-ms 10]
"""
import os
import sys
import time

MAIN_NS = time.time_ns()


def main():
    import argparse
    ap = argparse.ArgumentParser()
    ap.add_argument("--events-dir", required=True)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--step-ms", type=float, default=10.0)
    a = ap.parse_args()
    pid = os.getpid()
    out = open(os.path.join(a.events_dir, f"{pid}.events"), "a", buffering=1)
    out.write(f"start pid={pid} main_ns={MAIN_NS}\n")

    from datetime import timedelta

    import torch
    import torch.distributed as dist

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://", timeout=timedelta(seconds=60))
    rank, world = dist.get_rank(), dist.get_world_size()
    out.write(f"joined pid={pid} rank={rank} world={world} t_ns={time.time_ns()}\n")
    expected = world * (world + 1) / 2
    t = torch.zeros(1)
    for step in range(1, a.steps + 1):
        t.fill_(rank + 1)
        dist.all_reduce(t)
        if t.item() != expected:
            out.write(f"wrong pid={pid} rank={rank} step={step} got={t.item()}\n")
            return 3
        out.write(f"step pid={pid} rank={rank} step={step} t_ns={time.time_ns()}\n")
        time.sleep(a.step_ms / 1000.0)
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
