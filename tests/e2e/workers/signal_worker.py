"""E2E worker: report the signals it receives; optionally ignore SIGTERM or start a grandchild.

Usage: signal_worker.py --ready-dir DIR [--ignore-term] [--grandchild]

Writes DIR/rank<R> with "<pid> <grandchild pid or 0>" once its handlers are installed. On a
signal it prints "rank R got SIGNAME" (flushed). SIGUSR1/SIGUSR2 leave it running; the other
handled signals make it exit 0, except SIGTERM with --ignore-term (it then waits for SIGKILL).
Idles at most 60 s. Does not import torch, so it starts fast.
"""
import argparse
import os
import signal
import subprocess
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--ready-dir", required=True)
    parser.add_argument("--ignore-term", action="store_true")
    parser.add_argument("--grandchild", action="store_true")
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    stop = []

    def handler(signum, _frame):
        print(f"rank {rank} got {signal.Signals(signum).name}", flush=True)
        if signum in (signal.SIGUSR1, signal.SIGUSR2):
            return
        if signum == signal.SIGTERM and args.ignore_term:
            return
        stop.append(signum)

    for s in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1,
              signal.SIGUSR2):
        signal.signal(s, handler)
    child = 0
    if args.grandchild:
        child = subprocess.Popen(["sleep", "300"]).pid
    path = os.path.join(args.ready_dir, f"rank{rank}")
    with open(path + ".tmp", "w") as f:
        f.write(f"{os.getpid()} {child}")
    os.rename(path + ".tmp", path)
    deadline = time.monotonic() + 60
    while not stop and time.monotonic() < deadline:
        time.sleep(0.02)
    return 0


if __name__ == "__main__":
    sys.exit(main())
