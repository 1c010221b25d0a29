"""E2E worker for torchrun 2.13 command-line parity: no torch, starts fast.

Prints one JSON line with its arguments and the variables the parity flags change, then
"loss,x=<rank>" and "acc <rank>" and "noise" on stdout and "warn <rank>" and "quiet" on stderr.
"""

import json
import os
import sys

if __name__ == "__main__":
    rank = os.environ["RANK"]
    print(json.dumps({
        "rank": int(rank),
        "argv": sys.argv[1:],
        "LOCAL_RANK": os.environ.get("LOCAL_RANK"),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "PARITY_INTERPRETER": os.environ.get("PARITY_INTERPRETER"),
        "TORCHELASTIC_RUN_ID": os.environ.get("TORCHELASTIC_RUN_ID"),
        "MASTER_ADDR": os.environ.get("MASTER_ADDR"),
        "TORCHELASTIC_SIGNALS_TO_HANDLE": os.environ.get("TORCHELASTIC_SIGNALS_TO_HANDLE"),
    }), flush=True)
    print(f"loss,x={rank}", flush=True)
    print(f"acc {rank}", flush=True)
    print("noise", flush=True)
    print(f"warn {rank}", file=sys.stderr, flush=True)
    print("quiet", file=sys.stderr, flush=True)
