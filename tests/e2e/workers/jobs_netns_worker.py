"""E2E worker of tests/e2e/test_jobs_netns.py, run by dgt-run (directly or for dgt-agent's jobs).

  allreduce       torch.distributed gloo all_reduce of rank + 1 over the job, then prints
                  "rank R world W local_rank L sum S" (S = W * (W + 1) / 2) and exits 0.
  hold SECONDS    the same all_reduce, prints "rank R holding", then sleeps SECONDS and prints
                  "rank R done" (cancel and kill -9 cases).
  tf_config       prints "rank R tf_config <TF_CONFIG>" (no TensorFlow needed) and exits: a job
                  over before the service's 1 s poll of its run still has its ranks.
"""
import os
import sys
import time

mode = sys.argv[1]
rank = int(os.environ["RANK"])
if mode == "tf_config":
    print(f"rank {rank} tf_config {os.environ['TF_CONFIG']}", flush=True)
    sys.exit(0)

import torch  # noqa: E402 (not needed by tf_config)
import torch.distributed as dist  # noqa: E402

dist.init_process_group("gloo")
world = dist.get_world_size()
t = torch.tensor([float(dist.get_rank() + 1)])
dist.all_reduce(t)
if mode == "allreduce":
    print(f"rank {rank} world {world} local_rank {os.environ['LOCAL_RANK']} sum {int(t.item())}",
          flush=True)
elif mode == "hold":
    print(f"rank {rank} holding", flush=True)
    time.sleep(float(sys.argv[2]))
    print(f"rank {rank} done", flush=True)
else:
    sys.exit(f"jobs_netns_worker.py: unknown mode {mode!r}")
dist.destroy_process_group()
