"""E2E worker: print its argv and every launcher variable as one JSON line, then write
"out <rank>" to stdout and "err <rank>" to stderr."""
import json
import os
import sys

NAMES = ("RANK", "LOCAL_RANK", "WORLD_SIZE", "ROLE_NAME", "TF_CONFIG", "OMPI_COMM_WORLD_RANK",
         "OMPI_COMM_WORLD_SIZE", "OMPI_COMM_WORLD_LOCAL_RANK", "OMPI_COMM_WORLD_LOCAL_SIZE",
         "AZ_BATCH_MASTER_NODE", "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_ERROR_FILE",
         "TORCHELASTIC_RUN_ID", "OMP_NUM_THREADS")
print(json.dumps({"argv": sys.argv[1:], "env": {n: os.environ.get(n) for n in NAMES}}),
      flush=True)
print(f"out {os.environ['RANK']}", flush=True)
print(f"err {os.environ['RANK']}", file=sys.stderr, flush=True)
