"""Anchor for bench/rendezvous: torch 1.13's c10d dynamic rendezvous with N agents in one process.

Each agent is a DynamicRendezvousHandler over its own TCPStore client to one TCPStore server (the
layout torchrun uses with --rdzv-backend=c10d), in its own thread. Prints the time from the last
agent starting its rendezvous to every agent holding its rank, for each N, giving up on an N after
--bound seconds. Loopback only.

Usage: /usr/bin/python3 bench/rendezvous/torch_c10d.py --agents 10 50 100 --bound 120
"""
import argparse
import threading
import time
from datetime import timedelta

import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler


def run(n, bound):
    server = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=bound),
                           wait_for_workers=False)
    port = server.port
    run_id = f"bench{n}"
    done = []
    lock = threading.Lock()
    started = []

    def agent(i):
        store = dist.TCPStore("127.0.0.1", port, None, False, timedelta(seconds=bound))
        backend = C10dRendezvousBackend(store, run_id)
        params = RendezvousParameters(backend="c10d", endpoint=f"127.0.0.1:{port}",
                                      run_id=run_id, min_nodes=n, max_nodes=n,
                                      join_timeout=str(int(bound)), last_call_timeout="1")
        handler = create_handler(store, backend, params)
        with lock:
            started.append(time.monotonic())
        try:
            _, rank, world = handler.next_rendezvous()
        except Exception as e:  # Reported below; the run counts as not completed.
            print(f"agent {i}: {type(e).__name__}: {e}")
            return
        with lock:
            done.append((time.monotonic(), rank, world))

    threads = [threading.Thread(target=agent, args=(i,), daemon=True) for i in range(n)]
    t0 = time.monotonic()
    for t in threads:
        t.start()
    deadline = t0 + bound
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    with lock:
        if len(done) < n:
            print(f"torch c10d, {n} agents: only {len(done)} of {n} had a rank after {bound} s")
            return False
        last_start = max(started)
        last_done = max(d[0] for d in done)
        ranks = sorted(d[1] for d in done)
        assert ranks == list(range(n)), ranks
        print(f"torch c10d, {n} agents: last join -> every rank assigned: "
              f"{(last_done - last_start) * 1000:.0f} ms (total {(last_done - t0):.1f} s)")
    return True


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, nargs="+", default=[10, 50, 100])
    ap.add_argument("--bound", type=float, default=120.0)
    args = ap.parse_args()
    for n in args.agents:
        if not run(n, args.bound):
            break


if __name__ == "__main__":
    main()
