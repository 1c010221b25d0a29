"""A worker for dgt-run's hang detection (tests/e2e/test_hang.py): reports progress with
dgt.progress() every 10 ms for --steps steps, printing `LAST rank=R n=N t_ns=T` after each report,
then exits 0; the rank named by --hang-rank instead stops reporting after --hang-after reports (0:
before its first one) and sleeps in stuck_in_here() until it is killed.
"""
import argparse
import os
import time

import dgt


def stuck_in_here():
    while True:
        time.sleep(0.05)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--hang-rank", type=int, default=-1)
    p.add_argument("--hang-after", type=int, default=20)
    args = p.parse_args()
    rank = int(os.environ["RANK"])
    for n in range(1, args.steps + 1):
        if rank == args.hang_rank and n > args.hang_after:
            stuck_in_here()
        time.sleep(0.01)
        dgt.progress()
        print(f"LAST rank={rank} n={n} t_ns={time.time_ns()}", flush=True)


if __name__ == "__main__":
    main()
