"""E2E worker that records its PID and env, then waits for a flag file.

Usage: wait_flag.py FLAG_PREFIX SECONDS. Prints {"event": "start", "pid", "env": {...}} with
RANK, LOCAL_RANK, WORLD_SIZE, GROUP_RANK, MASTER_ADDR, MASTER_PORT and
TORCHELASTIC_RESTART_COUNT, then waits for the file FLAG_PREFIX.<GROUP_RANK> (this node's flag)
for at most SECONDS (exit 3 if it never appears), and prints {"event": "done", "pid"}.
"""
import json
import os
import sys
import time

KEYS = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "GROUP_RANK", "MASTER_ADDR", "MASTER_PORT",
        "TORCHELASTIC_RESTART_COUNT")
print(json.dumps({"event": "start", "pid": os.getpid(),
                  "env": {k: os.environ.get(k) for k in KEYS}}), flush=True)
flag = f"{sys.argv[1]}.{os.environ['GROUP_RANK']}"
deadline = time.monotonic() + float(sys.argv[2])
while not os.path.exists(flag):
    if time.monotonic() > deadline:
        print(json.dumps({"event": "timeout", "pid": os.getpid()}), flush=True)
        sys.exit(3)
    time.sleep(0.05)
print(json.dumps({"event": "done", "pid": os.getpid()}), flush=True)
