"""Anchor for bench/rendezvous: torch's c10d dynamic rendezvous with N agents in one process, run by
the interpreter of the torch release under test (Debian's python3: 1.13; DGT_PYTHON2: 2.13).

Each agent is a DynamicRendezvousHandler over its own TCPStore client to one TCPStore server (the
layout torchrun uses with --rdzv-backend=c10d), in its own thread. Prints the time from the last
agent starting its rendezvous to every agent holding its rank, for each N, giving up on an N after
--bound seconds (the first N that does not complete within it ends the run: "exceeds the bound").
torch 2.x's server is the libuv TCPStore (its default, as torchrun 2.x uses it). Loopback only.

Usage: /usr/bin/python3 bench/rendezvous/torch_c10d.py --agents 10 50 100 --bound 120
       /opt/dgt/peers-venv/bin/python bench/rendezvous/torch_c10d.py --agents 10 100 1000
"""
import argparse
import os
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.c10d_rendezvous_backend import C10dRendezvousBackend
from torch.distributed.elastic.rendezvous.dynamic_rendezvous import create_handler


def give_up():
    """Ends the process at once: the agents still blocked in the store would otherwise fail one by
    one (with a C++ backtrace each) as the server goes away, and torch may abort on exit."""
    sys.stdout.flush()
    os._exit(3)


def run(n, bound):
    server = dist.TCPStore("127.0.0.1", 0, None, True, timedelta(seconds=bound),
                           wait_for_workers=False)
    port = server.port
    run_id = f"bench{n}"
    done = []
    lock = threading.Lock()
    started = []
    errors = []

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
            info = handler.next_rendezvous()
            # torch 1.x returns (store, rank, world_size); 2.x a RendezvousInfo.
            if isinstance(info, tuple):
                _, rank, world = info
            else:
                rank, world = info.rank, info.world_size
        except Exception as e:  # Reported below; the run counts as not completed.
            print(f"agent {i}: {type(e).__name__}: {e}")
            with lock:
                errors.append(f"{type(e).__name__}: {e}")
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
        if errors and all(e.startswith("RendezvousTimeoutError") for e in errors):
            print(f"torch {torch.__version__} c10d, {n} agents: EXCEEDS THE BOUND: {len(errors)} "
                  f"agents reached the join timeout ({bound:g} s), {len(done)} had a rank")
            give_up()
        if errors:
            print(f"torch {torch.__version__} c10d, {n} agents: FAILED: {len(errors)} agents "
                  f"raised, first: {errors[0]}")
            give_up()
        if len(done) < n:
            print(f"torch {torch.__version__} c10d, {n} agents: EXCEEDS THE BOUND: only "
                  f"{len(done)} of {n} had a rank after {bound:g} s")
            give_up()
        last_start = max(started)
        last_done = max(d[0] for d in done)
        ranks = sorted(d[1] for d in done)
        assert ranks == list(range(n)), ranks
        print(f"torch {torch.__version__} c10d, {n} agents: last join -> every rank assigned: "
              f"{(last_done - last_start) * 1000:.0f} ms (total {(last_done - t0):.1f} s)")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--agents", type=int, nargs="+", default=[10, 50, 100])
    ap.add_argument("--bound", type=float, default=120.0)
    args = ap.parse_args()
    for n in args.agents:
        run(n, args.bound)  # Exits with status 3 when N does not complete: larger N not tried.
    return 0


if __name__ == "__main__":
    sys.exit(main())
