"""E2E worker: sleeps the RANK-th of its comma-separated seconds, prints "rank R done", exits 0."""
import os
import sys
import time

rank = int(os.environ["RANK"])
time.sleep(float(sys.argv[1].split(",")[rank]))
print(f"rank {rank} done", flush=True)
