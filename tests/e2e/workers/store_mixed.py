"""E2E client for a torch 1.x and a torch 2.x client process on one dgt store at once.

Usage: store_mixed.py HOST PORT ME OTHER   (ME/OTHER: "v1" or "v2", the family of this process
and of its peer). Writes its own keys, then waits for the peer's "done/OTHER", then reads what the
peer wrote and prints one JSON object. Only methods torch 1.13 has are used on the shared keys; a
2.x process also writes with the 2.x-only methods (append, multi_set, queue_push) so that the 1.x
peer shows what it sees of them.
"""
import json
import sys
from datetime import timedelta

import torch
import torch.distributed as dist


def result(fn):
    try:
        v = fn()
        if isinstance(v, list):
            return [x.decode("latin-1") if isinstance(x, bytes) else x for x in v]
        return v.decode("latin-1") if isinstance(v, bytes) else v
    except Exception as e:  # noqa: BLE001 — the error itself is the observable.
        return [type(e).__name__, str(e)]


def main():
    host, port, me, other = sys.argv[1], int(sys.argv[2]), sys.argv[3], sys.argv[4]
    s = dist.TCPStore(host, port, 1, False, timedelta(seconds=20))
    out = {"torch": torch.__version__.split("+")[0]}
    s.set(f"from/{me}", f"hello from {me}")
    out["add"] = s.add("shared_ctr", 1 if me == "v1" else 10)
    if me == "v2":
        s.append("appended", "x")
        s.append("appended", "y")
        s.multi_set(["ms/1", "ms/2"], ["one", "two"])
        s.queue_push("queue", "item")
    s.set(f"done/{me}", "1")
    out["wait_other"] = result(lambda: s.wait([f"done/{other}"], timedelta(seconds=20)))
    out["get_other"] = result(lambda: s.get(f"from/{other}"))
    out["ctr"] = result(lambda: s.add("shared_ctr", 0))
    if me == "v1":  # torch 1.13's Python TCPStore has no check, list_keys, multi_get.
        out["get_appended"] = result(lambda: s.get("appended"))
        out["get_ms2"] = result(lambda: s.get("ms/2"))
        # A queue counts as present for WAIT, but it holds no value.
        out["wait_queue"] = result(lambda: s.wait(["queue"], timedelta(seconds=2)))
    else:
        out["check_other"] = result(lambda: s.check([f"from/{other}"]))
        out["list_keys"] = result(lambda: sorted(s.list_keys()))
        out["multi_get_other"] = result(lambda: s.multi_get([f"from/{other}", "ms/1"]))
    # Both sides are done reading before anyone counts keys (num_keys includes "init/").
    s.set(f"read/{me}", "1")
    s.wait([f"read/{other}"], timedelta(seconds=20))
    out["num_keys"] = result(lambda: s.num_keys())
    print(json.dumps(out, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
