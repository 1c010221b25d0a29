"""E2E worker: one rank exits with a chosen code, the others keep running.

Usage: exit_code.py --fail-rank R --code C [--delay S]

Every rank prints ``rank X started``. The rank equal to R sleeps S seconds
(default 0.5) and exits with code C; every other rank idles for up to 60 s
in short sleeps and then exits 0 -- the launcher is expected to stop them
long before that. Does not import torch, so it starts fast.
"""

import argparse
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--fail-rank", type=int, required=True)
    parser.add_argument("--code", type=int, required=True)
    parser.add_argument("--delay", type=float, default=0.5)
    args = parser.parse_args()

    rank = int(os.environ.get("RANK", "0"))
    print(f"rank {rank} started", flush=True)

    if rank == args.fail_rank:
        time.sleep(args.delay)
        return args.code

    deadline = time.monotonic() + 60.0
    while time.monotonic() < deadline:
        time.sleep(0.1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
