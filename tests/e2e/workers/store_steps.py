"""E2E worker that works through the job's store for a while.

Usage: store_steps.py SECONDS_BY_RANK (comma-separated, indexed by RANK).
RANK r adds 1 to "progress" every 0.2 s for its seconds, then sets steps/<r>; the last rank then
waits for every steps/<k> and reads the progress count, which proves the store outlived the other
ranks. Prints JSON lines {"event": "start"|"done", "rank", "pid", ...}.
"""
import json
import os
import sys
import time
from datetime import timedelta

import torch.distributed as dist

rank = int(os.environ["RANK"])
world = int(os.environ["WORLD_SIZE"])
seconds = float(sys.argv[1].split(",")[rank])
store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]), world, False,
                      timedelta(seconds=30))
print(json.dumps({"event": "start", "rank": rank, "pid": os.getpid()}), flush=True)
steps = 0
end = time.monotonic() + seconds
while time.monotonic() < end:
    store.add("progress", 1)
    steps += 1
    time.sleep(0.2)
store.set(f"steps/{rank}", str(steps))
out = {"event": "done", "rank": rank, "pid": os.getpid(), "steps": steps}
if rank == world - 1:
    store.wait([f"steps/{k}" for k in range(world)])
    out["all_steps"] = sum(int(store.get(f"steps/{k}")) for k in range(world))
    out["progress"] = store.add("progress", 0)
print(json.dumps(out), flush=True)
