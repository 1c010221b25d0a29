"""Drives the dgt torchrun handler's RendezvousHandler methods in-process, as torch's elastic agent
calls them (tests/e2e/test_torchrun_backend.py asserts the JSON line this prints). argv[1]: the
dgt-rendezvous endpoint. Three handlers (nodes a, b, c) of run "contract", --nnodes=2:3, come from
torch's own registry (the "torchrun.handlers" entry point). Every wait is bounded."""
import json
import sys
import threading
import time
from datetime import timedelta

from torch.distributed import TCPStore
from torch.distributed.elastic.rendezvous import RendezvousParameters
from torch.distributed.elastic.rendezvous.registry import get_rendezvous_handler


def handler(endpoint, name):
    return get_rendezvous_handler(RendezvousParameters(
        backend="dgt", endpoint=endpoint, run_id="contract", min_nodes=2, max_nodes=3,
        local_addr="127.0.0.1", node_id=name, last_call_timeout="1", connect_timeout="10",
        join_timeout="30", max_restarts="3", nproc_per_node="2"))


def together(handlers):
    """next_rendezvous on every handler at once; returns their RendezvousInfo in order."""
    infos = [None] * len(handlers)
    errors = []

    def call(i):
        try:
            infos[i] = handlers[i].next_rendezvous()
        except Exception as e:  # noqa: BLE001 (reported below)
            errors.append(repr(e))

    threads = [threading.Thread(target=call, args=(i,)) for i in range(len(handlers))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=60)
    assert not errors and all(infos), errors
    return infos


def until(predicate, timeout=20):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.05)
    raise AssertionError("timed out")


def main():
    endpoint = sys.argv[1]
    a, b = handler(endpoint, "a"), handler(endpoint, "b")
    got = {"backend": a.get_backend(), "run_id": a.get_run_id(),
           "use_agent_store": a.use_agent_store}
    ia, ib = together([a, b])
    got["round0"] = {"a": [ia.rank, ia.world_size], "b": [ib.rank, ib.world_size]}
    sa, sb = ia.bootstrap_store_info, ib.bootstrap_store_info
    got["round0_bootstrap_same"] = (sa.master_addr, sa.master_port) == (sb.master_addr,
                                                                         sb.master_port)
    got["round0_addr"] = sa.master_addr
    # Workers of both nodes meet in one store (MASTER_ADDR:MASTER_PORT, node rank 0's).
    w0 = TCPStore(sa.master_addr, sa.master_port, is_master=False, timeout=timedelta(seconds=10))
    w1 = TCPStore(sb.master_addr, sb.master_port, is_master=False, timeout=timedelta(seconds=10))
    w0.set("k", "from-a")
    got["store_shared"] = w1.get("k").decode()
    # Each agent's own namespace holds its ranks: [first global rank, world size, role ones].
    got["assigned"] = [json.loads(i.store.get(f"torchelastic/assigned_ranks/{i.rank}"))
                       for i in (ia, ib)]
    got["waiting_before"] = [a.num_nodes_waiting(), b.num_nodes_waiting()]

    c = handler(endpoint, "c")
    infos = {}
    tc = threading.Thread(target=lambda: infos.update(c=c.next_rendezvous()))
    tc.start()
    until(lambda: a.num_nodes_waiting() > 0 and b.num_nodes_waiting() > 0)
    got["waiting_after_join"] = [a.num_nodes_waiting(), b.num_nodes_waiting()]
    ia, ib = together([a, b])
    tc.join(timeout=30)
    ic = infos["c"]
    got["round1"] = {n: [i.rank, i.world_size] for n, i in (("a", ia), ("b", ib), ("c", ic))}
    got["round1_port_changed"] = ia.bootstrap_store_info.master_port != sa.master_port

    # b's workers failed: torchrun calls next_rendezvous again without a waiting node.
    tb = threading.Thread(target=lambda: infos.update(b=b.next_rendezvous()))
    tb.start()
    until(lambda: a.num_nodes_waiting() > 0 and c.num_nodes_waiting() > 0)
    got["waiting_after_failure"] = [a.num_nodes_waiting(), c.num_nodes_waiting()]
    ia, ic = together([a, c])
    tb.join(timeout=30)
    ib = infos["b"]
    got["round2"] = {n: [i.rank, i.world_size] for n, i in (("a", ia), ("b", ib), ("c", ic))}
    got["closed_before"] = [h.is_closed() for h in (a, b, c)]

    c.set_closed()
    got["c_closed"] = c.is_closed()
    try:
        c.next_rendezvous()
        got["c_next_after_close"] = "returned"
    except Exception as e:  # noqa: BLE001 (its type is the result)
        got["c_next_after_close"] = type(e).__name__
    got["shutdown"] = [a.shutdown(), b.shutdown()]
    print(json.dumps(got), flush=True)


if __name__ == "__main__":
    main()
