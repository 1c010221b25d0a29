"""Benchmark worker: a short PyTorch job (gloo init over env://, one all_reduce, teardown).

With --no-torch it exits 0 right after the crash logic (for --restart-policy rank, where
torch 1.13's env:// init would put the replacement under another store prefix).
With --crash-once, local rank 1 of attempt 0 records the time and exits 1; every process
records its start time first thing, so the bench can measure exit-to-replacement latency.
"""
import os
import sys
import time

START = time.time()
if "--crash-once" in sys.argv:
    mark_dir = sys.argv[sys.argv.index("--crash-once") + 1]
    rank = os.environ["RANK"]
    attempt = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0")
    with open(os.path.join(mark_dir, f"start_{rank}_{attempt}"), "w") as f:
        f.write(repr(START))
    if rank == "1" and attempt == "0":
        t = time.time()
        with open(os.path.join(mark_dir, "crash"), "w") as f:
            f.write(repr(t))
        os._exit(1)

if "--no-torch" in sys.argv:
    sys.exit(0)

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402

torch.set_num_threads(1)
dist.init_process_group("gloo", init_method="env://")
t = torch.ones(1)
dist.all_reduce(t)
assert t.item() == dist.get_world_size()
dist.destroy_process_group()
