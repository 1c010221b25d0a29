"""E2E worker for TF_CONFIG across nodes (no TensorFlow needed): binds the address TF_CONFIG gives
its own task (type and index) on loopback, as TensorFlow's server would, and prints one JSON line
{"rank", "attempt", "tf_config", "bound"}. Rank --fail-rank exits 3 on attempt 0, 2 s after printing
(the other ranks have printed by then), so that --max-restarts gives the job a new round."""
import argparse
import json
import os
import socket
import sys
import time

parser = argparse.ArgumentParser()
parser.add_argument("--fail-rank", type=int, default=-1)
args = parser.parse_args()
rank = int(os.environ["RANK"])
attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
config = json.loads(os.environ["TF_CONFIG"])
task = config["task"]
host, port = config["cluster"][task["type"]][task["index"]].rsplit(":", 1)
with socket.socket() as s:
    s.bind((host, int(port)))  # Free for this worker: the agent released its reservation.
    bound = s.getsockname() == (host, int(port))
print(json.dumps({"rank": rank, "attempt": attempt, "tf_config": config, "bound": bound}),
      flush=True)
if rank == args.fail_rank and attempt == 0:
    time.sleep(2)
    sys.exit(3)
