"""E2E client: drives every operation of torch 1.13's Python TCPStore client against a server.

Usage: store_ops.py HOST PORT
Runs a fixed scenario with `TCPStore(host, port, world_size=1, is_master=False, timeout)` clients
(several at once, a wait woken by another client, timeouts) and prints one JSON object mapping
each step to its result, so the same script run against dgt's server and against torch's own
server must print the same thing. Exceptions are recorded as [type, message].
"""
import json
import sys
import threading
import time
from datetime import timedelta

import torch.distributed as dist


def result(fn):
    try:
        v = fn()
        return v.decode("latin-1") if isinstance(v, bytes) else v
    except Exception as e:  # noqa: BLE001 — the error itself is the observable.
        return [type(e).__name__, str(e)]


def client(host, port, seconds=10):
    return dist.TCPStore(host, port, 1, False, timedelta(seconds=seconds))


def main():
    host, port = sys.argv[1], int(sys.argv[2])
    out = {}
    a = client(host, port)
    b = client(host, port)

    # set / get, including an empty and a binary value.
    a.set("key", "value")
    out["get"] = result(lambda: a.get("key"))
    a.set("empty", "")
    out["get_empty"] = result(lambda: a.get("empty"))
    a.set("bin", bytes(range(256)))
    out["get_bin"] = result(lambda: a.get("bin") == bytes(range(256)))
    out["get_from_other_client"] = result(lambda: b.get("key"))

    # add: from zero, negative, on a value set as text.
    out["add_new"] = result(lambda: a.add("ctr", 7))
    out["add_more"] = result(lambda: b.add("ctr", -10))
    out["get_ctr"] = result(lambda: a.get("ctr"))
    a.set("forty", "40")
    out["add_preset"] = result(lambda: a.add("forty", 2))

    # compare_set: hit, miss, missing key with empty / non-empty expected.
    out["cas_hit"] = result(lambda: a.compare_set("key", "value", "v2"))
    out["cas_miss"] = result(lambda: a.compare_set("key", "nope", "v3"))
    out["cas_missing_empty_expected"] = result(lambda: a.compare_set("missing", "", "new"))
    out["cas_missing_nonempty_expected"] = result(lambda: a.compare_set("absent", "old", "x"))
    out["absent_stored"] = result(lambda: a.num_keys())

    # wait: present keys, default and explicit timeouts.
    out["wait_present"] = result(lambda: a.wait(["key", "ctr"]))
    out["wait_present_timeout"] = result(lambda: a.wait(["key"], timedelta(seconds=2)))
    t0 = time.monotonic()
    out["wait_missing_timeout"] = result(lambda: b.wait(["never"], timedelta(milliseconds=300)))
    out["wait_missing_took_lt_3s"] = time.monotonic() - t0 < 3

    # A wait woken by another client.
    def later():
        time.sleep(0.3)
        c = client(host, port)
        c.set("late", "1")
    t = threading.Thread(target=later)
    t.start()
    t0 = time.monotonic()
    out["wait_woken"] = result(lambda: a.wait(["late"], timedelta(seconds=10)))
    took = time.monotonic() - t0
    out["wait_woken_in_time"] = 0.2 < took < 5
    t.join()

    # num_keys, delete_key.
    out["num_keys"] = result(lambda: a.num_keys())
    out["delete_present"] = result(lambda: a.delete_key("key"))
    out["delete_missing"] = result(lambda: a.delete_key("key"))
    out["num_keys_after_delete"] = result(lambda: a.num_keys())

    # set_timeout, then get of a missing key: the client WAITs first, so it times out.
    c = client(host, port)
    c.set_timeout(timedelta(milliseconds=500))
    out["timeout_after_set_timeout"] = str(c.timeout)
    t0 = time.monotonic()
    out["get_missing"] = result(lambda: c.get("missing_for_get"))
    out["get_missing_took_lt_3s"] = time.monotonic() - t0 < 3

    # A get() that timed out, then further calls on that client. torch 1.x has no CANCEL_WAIT:
    # the WAIT stays pending on the server, and its STOP_WAITING comes when the key appears,
    # between the replies to later requests (torch's own client then misreads one reply: the
    # reference below records it). Round trips on `w` (num_keys) order its SETs before the next
    # step.
    e = client(host, port)
    e.set_timeout(timedelta(milliseconds=300))
    w = client(host, port)
    out["abandoned_get"] = result(lambda: e.get("slow"))
    e.set("mine", "m")
    out["abandoned_then_get"] = result(lambda: e.get("mine"))
    out["abandoned_then_add"] = result(lambda: e.add("ectr", 1))
    out["abandoned_get_again"] = result(lambda: e.get("slow"))
    w.set("slow", "s")
    w.num_keys()
    out["abandoned_after_set"] = [result(lambda: e.get("slow")) for _ in range(2)]
    out["abandoned_mine_again"] = result(lambda: e.get("mine"))
    # The client's own ADD of the key its abandoned wait was for: ADD's reply comes first.
    f = client(host, port)
    f.set_timeout(timedelta(milliseconds=300))
    out["own_add_get"] = result(lambda: f.get("own"))
    out["own_add"] = result(lambda: f.add("own", 5))
    out["own_add_after"] = [result(lambda: f.get("own")) for _ in range(2)]

    # Several clients at once: each adds to a counter and sets its own key; all wait for all.
    n = 6
    clients = [client(host, port) for _ in range(n)]
    errors = []

    def worker(i):
        try:
            clients[i].add("crowd", 1)
            clients[i].set(f"crowd/{i}", str(i))
            clients[i].wait([f"crowd/{j}" for j in range(n)], timedelta(seconds=10))
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))
    threads = [threading.Thread(target=worker, args=(i,)) for i in range(n)]
    for th in threads:
        th.start()
    for th in threads:
        th.join(timeout=20)
    out["crowd_errors"] = errors
    out["crowd_count"] = result(lambda: a.get("crowd"))
    out["crowd_values"] = [result(lambda i=i: a.get(f"crowd/{i}")) for i in range(n)]

    # add on a non-integer value fails on both servers (they close that client's connection).
    d = client(host, port)
    d.set("text", "abc")
    r = result(lambda: d.add("text", 1))
    out["add_non_integer_fails"] = isinstance(r, list) and r[0] == "RuntimeError"
    out["others_unaffected"] = result(lambda: a.get("forty"))

    print(json.dumps(out, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
