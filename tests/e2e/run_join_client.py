"""Run joins for tests/e2e/test_etcd_linearizability.py, through dgt-rendezvous's Session
stream (min 1, max 2 nodes a run, one worker a node). A service forgets a run once none of its
nodes is connected, and a later join starts it again at round 0 (round_state.cc), so each of
`--runs` runs has a keeper: a node that joins first and stays until the other nodes are done.
`--clients` threads join short-lived nodes to a run whose keeper is in; each stays 0.5-3 s after
its first assignment, then leaves (it closes the stream, as a node that dies). Every node whose
stream breaks after an assignment rejoins with it (JoinRequest.rejoin), as dgt-run's agents do,
trying the replicas in turn for up to 8 s. A keeper that cannot get back in retires its run id:
the next keeper starts a run of a new id. Node rank 0 answers each assignment with a StoreReady
(a port nobody listens on: no worker runs).

Prints one JSON line per assignment received: client, run, node, round, node_rank, the
monotonic time the node first sent its join ("invoke") and the time the assignment arrived
("complete"); one line per refusal (an Error: code and message); one line per node's end
("left", "refused" or "timeout"). CLOCK_MONOTONIC is the
system's, so the times compare with the test process's. Runs with the peers venv's Python
(grpcio) and the stubs that `grpc_tools.protoc` made under --stubs.

Usage: run_join_client.py --stubs DIR --endpoints A,B --clients N --runs R --seconds S --seed X
"""
import argparse
import json
import queue
import random
import sys
import threading
import time

JOIN_WAIT_S = 10  # A join's bound for its first assignment.
REJOIN_S = 8  # How long a node whose stream broke tries to get back in.
CALL_S = 30  # Every stream's own deadline, past the node's leave time (a keeper's: the end).

out_lock = threading.Lock()


def emit(record):
    with out_lock:
        print(json.dumps(record), flush=True)


class Node:
    """One node's life in one run. `leave_at`: when a keeper leaves (None: 0.5-3 s after the
    first assignment)."""

    def __init__(self, pb, stub_for, endpoints, client, run, node, rng, leave_at=None):
        self.pb = pb
        self.stub_for = stub_for
        self.endpoints = endpoints
        self.client = client
        self.run = run
        self.node = node
        self.rng = rng
        self.invoke = None
        self.assignment = None  # The current one, sent again on a rejoin.
        self.assignments = 0
        self.leave_at = leave_at
        self.leaving = False  # Set by leave(): stay no longer.
        self._end = None  # Ends the open stream.
        self._lock = threading.Lock()

    def join_request(self):
        join = self.pb.JoinRequest(run_id=self.run, node_id=self.node, min_nodes=1, max_nodes=2,
                                   nproc_per_node=1, address="127.0.0.1", store_port=1,
                                   last_call_timeout_s=0.3, join_timeout_s=600)
        if self.assignment is not None:
            join.rejoin.CopyFrom(self.assignment)
        return self.pb.AgentMessage(join=join)

    def stream(self, endpoint, deadline):
        """One Session on `endpoint`: until `deadline` (monotonic) without an assignment, then
        until the node leaves. Returns "left", "refused", "timeout" (no assignment by the
        deadline) or "broken"."""
        outgoing = queue.Queue()
        outgoing.put(self.join_request())

        def requests():
            while True:
                m = outgoing.get()
                if m is None:
                    return
                yield m

        # A rejoin reads the run's round while the service takes it: its own time bounds what it
        # sees. A first join may have been taken on an earlier attempt: that attempt's time.
        invoke = time.monotonic() if self.assignment is not None else self.invoke
        # A deadline that ends the stream while the node stays would read as a lost node.
        last = max(deadline, self.leave_at or deadline)
        call = self.stub_for(endpoint).Session(requests(),
                                               timeout=last - time.monotonic() + CALL_S)
        timer = None
        assigned = False

        def end():
            outgoing.put(None)
            call.cancel()

        with self._lock:
            self._end = end
            if self.leaving:
                end()

        def arm(at):
            nonlocal timer
            if timer is not None:
                timer.cancel()
            timer = threading.Timer(max(0.0, at - time.monotonic()), end)
            timer.daemon = True
            timer.start()

        arm(deadline)
        try:
            for msg in call:
                kind = msg.WhichOneof("kind")
                if kind == "assignment":
                    a = msg.assignment
                    now = time.monotonic()
                    emit({"client": self.client, "run": self.run, "node": self.node,
                          "round": a.round, "node_rank": a.node_rank, "invoke": invoke,
                          "complete": now})
                    self.assignment = a
                    self.assignments += 1
                    assigned = True
                    if a.node_rank == 0:
                        outgoing.put(self.pb.AgentMessage(
                            store_ready=self.pb.StoreReady(store_port=2 + a.round % 60000)))
                    with self._lock:
                        if self.leaving:
                            self.leave_at = now
                        elif self.leave_at is None or self.leave_at < now:
                            self.leave_at = now + self.rng.uniform(0.5, 3)
                    arm(self.leave_at)
                    self.on_assigned()
                elif kind == "error":
                    emit({"client": self.client, "run": self.run, "node": self.node,
                          "refused": msg.error.code, "message": msg.error.message})
                    return "refused"
            return "broken"
        except Exception:  # noqa: BLE001 (grpc.RpcError: cancelled by us, or the stream broke)
            now = time.monotonic()
            if assigned and now >= self.leave_at:
                return "left"
            if not assigned and now >= deadline:
                return "timeout"
            return "broken"
        finally:
            if timer is not None:
                timer.cancel()
            outgoing.put(None)

    def live(self):
        """Joins, stays, leaves; after a break, tries the next replica (a rejoin once it had an
        assignment) within JOIN_WAIT_S for the first assignment, REJOIN_S for a rejoin."""
        self.invoke = time.monotonic()
        deadline = self.invoke + JOIN_WAIT_S
        i = self.rng.randrange(len(self.endpoints))
        while time.monotonic() < deadline:
            before = self.assignments
            end = self.stream(self.endpoints[i % len(self.endpoints)], deadline)
            if end in ("left", "refused", "timeout") or self.leaving:
                end = "left" if self.leaving and end == "broken" else end
                emit({"client": self.client, "run": self.run, "node": self.node, "end": end})
                return end
            i += 1
            if self.assignments > before:  # It was in: REJOIN_S from the break to get back.
                deadline = time.monotonic() + REJOIN_S
                self.on_break()
            time.sleep(self.rng.uniform(0.05, 0.2))
        emit({"client": self.client, "run": self.run, "node": self.node, "end": "timeout"})
        return "timeout"

    def leave(self):
        """Ends the node's stay now (from another thread)."""
        with self._lock:
            self.leaving = True
            self.leave_at = time.monotonic()
            if self._end is not None:
                self._end()

    def on_assigned(self):
        pass

    def on_break(self):
        pass


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--stubs", required=True)
    ap.add_argument("--endpoints", required=True)
    ap.add_argument("--clients", type=int, required=True)
    ap.add_argument("--runs", type=int, required=True)
    ap.add_argument("--seconds", type=float, required=True)
    ap.add_argument("--seed", type=int, required=True)
    args = ap.parse_args()
    sys.path.insert(0, args.stubs)
    import grpc
    from dgt.rendezvous.v1 import rendezvous_pb2 as pb
    from dgt.rendezvous.v1 import rendezvous_pb2_grpc as pb_grpc

    endpoints = args.endpoints.split(",")
    channels = {e: grpc.insecure_channel(e) for e in endpoints}
    stubs = {e: pb_grpc.RendezvousStub(c) for e, c in channels.items()}
    until = time.monotonic() + args.seconds
    rng = random.Random(args.seed)

    lock = threading.Lock()
    ready = {}  # Guarded by `lock`: run index -> run id, while its keeper is in.

    class Keeper(Node):
        """Opens its run to other nodes while it holds an assignment."""

        def __init__(self, k, *a, **kw):
            super().__init__(*a, **kw)
            self.k = k

        def on_assigned(self):
            with lock:
                ready[self.k] = self.run

        def on_break(self):
            with lock:
                ready.pop(self.k, None)

    keepers = {}  # Guarded by `lock`: run index -> its keeper now.
    # A keeper stays until every other node is done: a run left without nodes is forgotten, and
    # a node still joining it would start it again at round 0. Bound: the other nodes' joins,
    # stays and rejoins.
    keeper_bound = until + JOIN_WAIT_S + 3 + 2 * REJOIN_S

    def keeper_loop(k, crng):
        gen = 0
        while time.monotonic() < until:
            gen += 1
            keeper = Keeper(k, pb, stubs.get, endpoints, args.clients + k, f"run-{k}.{gen}",
                            f"keeper{k}.{gen}", crng, leave_at=keeper_bound)
            with lock:
                keepers[k] = keeper
            keeper.live()
            with lock:
                ready.pop(k, None)

    def client_loop(c, crng):
        n = 0
        while time.monotonic() < until:
            with lock:
                runs = sorted(ready.values())
            if not runs:
                time.sleep(0.1)
                continue
            n += 1
            Node(pb, stubs.get, endpoints, c, crng.choice(runs), f"c{c}-{n}", crng).live()

    threads = [threading.Thread(target=keeper_loop, args=(k, random.Random(rng.random())))
               for k in range(args.runs)]
    threads += [threading.Thread(target=client_loop, args=(c, random.Random(rng.random())))
                for c in range(args.clients)]
    for t in threads:
        t.start()
    for t in threads[args.runs:]:
        t.join()
    with lock:
        ready.clear()
        for keeper in keepers.values():
            keeper.leave()
    for t in threads[:args.runs]:
        t.join()
    for c in channels.values():
        c.close()


if __name__ == "__main__":
    main()
