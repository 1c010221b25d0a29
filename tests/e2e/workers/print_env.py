"""E2E worker: print the launcher-provided environment as one JSON line.

Prints ``{"RANK": ..., "LOCAL_RANK": ..., ...}`` with every variable the
launcher is expected to set (missing ones as null) and exits 0. Does not
import torch, so it starts fast.
"""

import json
import os

ENV_VARS = (
    "RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "NODE_RANK",
    "GROUP_RANK", "GROUP_WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT",
    "TORCHELASTIC_USE_AGENT_STORE", "TORCHELASTIC_RUN_ID",
    "TORCHELASTIC_RESTART_COUNT", "TORCHELASTIC_MAX_RESTARTS",
)

if __name__ == "__main__":
    print(json.dumps({name: os.environ.get(name) for name in ENV_VARS}),
          flush=True)
