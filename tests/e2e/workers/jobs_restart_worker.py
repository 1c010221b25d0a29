"""E2E worker of tests/e2e/test_jobs_restart.py, run by dgt-run for dgt-agent's jobs.

  jobs_restart_worker.py PID_DIR STEPS
Writes its pid to PID_DIR/rank<R>.pid, then does STEPS torch.distributed gloo all_reduces of
rank + 1 over the job, 1 s apart ("rank R step S sum X"), and at the end prints
"rank R pid P steps STEPS sum X" (X = W * (W + 1) / 2) and exits 0.
"""
import os
import sys
import time

import torch
import torch.distributed as dist
from worker_exit import exit_now

pid_dir, steps = sys.argv[1], int(sys.argv[2])
rank = int(os.environ["RANK"])
dist.init_process_group("gloo")
with open(os.path.join(pid_dir, f"rank{rank}.pid.tmp"), "w") as f:
    f.write(f"{os.getpid()}\n")
os.rename(os.path.join(pid_dir, f"rank{rank}.pid.tmp"), os.path.join(pid_dir, f"rank{rank}.pid"))
total = 0
for step in range(steps):
    t = torch.tensor([float(dist.get_rank() + 1)])
    dist.all_reduce(t)
    total = int(t.item())
    print(f"rank {rank} step {step} sum {total}", flush=True)
    time.sleep(1)
print(f"rank {rank} pid {os.getpid()} steps {steps} sum {total}", flush=True)
dist.destroy_process_group()
exit_now(0)
