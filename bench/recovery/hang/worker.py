"""The hung-rank bench's worker (bench/recovery/hang/run.py): reports progress every --step-ms,
printing `LAST rank=R n=N pid=P t_ns=T` after each report (time.time_ns(), CLOCK_REALTIME), and
rank --hang-rank stops reporting after --hang-after reports and sleeps until killed.
  --mode dgt   dgt.progress() (dgt-run --hang-timeout)
  --mode nvrx  NVRx's RankMonitorClient.send_heartbeat() (ft_launcher's rank heartbeat)
"""
import argparse
import os
import time


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("dgt", "nvrx"), required=True)
    p.add_argument("--steps", type=int, default=100000)
    p.add_argument("--step-ms", type=float, default=10)
    p.add_argument("--hang-rank", type=int, default=1)
    p.add_argument("--hang-after", type=int, default=50)
    args = p.parse_args()
    rank = int(os.environ["RANK"])
    if args.mode == "dgt":
        import dgt
        report = dgt.progress
    else:
        from nvidia_resiliency_ext.fault_tolerance import RankMonitorClient
        client = RankMonitorClient()
        client.init_workload_monitoring()
        report = client.send_heartbeat
    for n in range(1, args.steps + 1):
        time.sleep(args.step_ms / 1000)
        report()
        print(f"LAST rank={rank} n={n} pid={os.getpid()} t_ns={time.time_ns()}", flush=True)
        if rank == args.hang_rank and n == args.hang_after:
            while True:
                time.sleep(1)


if __name__ == "__main__":
    main()
