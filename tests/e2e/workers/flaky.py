"""E2E worker for restarts: rank --fail-rank exits 3 while its restart count is below --fails.

Prints "rank R attempt A pid P start" and, on success, "rank R attempt A pid P done". With
--wait-restart-key, the other ranks wait (at most 60 s) until the agent publishes
dgt/restart/<fail-rank> in the job's store and print "rank R saw restart <value>".
"""
import argparse
import os
import sys
import time


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--fail-rank", type=int, default=1)
    parser.add_argument("--fails", type=int, default=1)
    parser.add_argument("--wait-restart-key", action="store_true")
    parser.add_argument("--hold", type=float, default=0.0)
    parser.add_argument("--first-hold", type=float, default=None,
                        help="seconds to hold on attempt 0 instead of --hold")
    parser.add_argument("--fail-after", type=float, default=0.3,
                        help="seconds before the failing rank exits 3")
    parser.add_argument("--exit-after-restart", type=int, default=0,
                        help="with --wait-restart-key: exit with this code once the key is seen")
    args = parser.parse_args()
    rank = int(os.environ["RANK"])
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    print(f"rank {rank} attempt {attempt} pid {os.getpid()} start", flush=True)
    if rank == args.fail_rank and attempt < args.fails:
        time.sleep(args.fail_after)
        print(f"rank {rank} failing on purpose", file=sys.stderr, flush=True)
        return 3
    if args.wait_restart_key and rank != args.fail_rank:
        from datetime import timedelta
        import torch.distributed as dist
        store = dist.TCPStore(os.environ["MASTER_ADDR"], int(os.environ["MASTER_PORT"]),
                              is_master=False, timeout=timedelta(seconds=60))
        key = f"dgt/restart/{args.fail_rank}"
        store.wait([key], timedelta(seconds=60))
        print(f"rank {rank} saw restart {store.get(key).decode()}", flush=True)
        if args.exit_after_restart:
            return args.exit_after_restart
    time.sleep(args.first_hold if attempt == 0 and args.first_hold is not None else args.hold)
    print(f"rank {rank} attempt {attempt} pid {os.getpid()} done", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
