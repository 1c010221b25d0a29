"""E2E client: every public method of torch 2.x's Python TCPStore client against a server.

Usage: store_ops2.py HOST PORT USE_LIBUV(0|1)
Runs a fixed scenario with `TCPStore(host, port, world_size=1, is_master=False, timeout,
use_libuv=...)` clients (several at once, waits and barriers across clients, blocked queue
consumers, timeouts and the calls after them) and prints one JSON object mapping each step to its
result, so the same script run against dgt's server and torch 2.x's own must print the same.
Exceptions are recorded as [type, message].
"""
import json
import sys
import threading
import time
from datetime import timedelta

import torch
import torch.distributed as dist


def result(fn):
    try:
        v = fn()
        if isinstance(v, bytes):
            return v.decode("latin-1")
        if isinstance(v, list):
            return [x.decode("latin-1") if isinstance(x, bytes) else x for x in v]
        return v
    except Exception as e:  # noqa: BLE001 — the error itself is the observable.
        return [type(e).__name__, str(e)]


def main():
    host, port, libuv = sys.argv[1], int(sys.argv[2]), sys.argv[3] == "1"

    def client(seconds=10):
        return dist.TCPStore(host, port, 1, False, timedelta(seconds=seconds), use_libuv=libuv)

    out = {"torch": torch.__version__.split("+")[0]}
    a, b = client(), client()

    # set / get, including an empty and a binary value, and from another client.
    a.set("key", "value")
    out["get"] = result(lambda: a.get("key"))
    a.set("empty", "")
    out["get_empty"] = result(lambda: a.get("empty"))
    a.set("bin", bytes(range(256)))
    out["get_bin"] = result(lambda: a.get("bin") == bytes(range(256)))
    out["get_from_other_client"] = result(lambda: b.get("key"))

    # add: from zero, negative, on a value set as text; on a non-integer on its own client below.
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
    out["absent_stored"] = result(lambda: a.check(["absent"]))

    # check.
    out["check_present"] = result(lambda: a.check(["key", "ctr"]))
    out["check_some_missing"] = result(lambda: a.check(["key", "nokey"]))

    # wait: present keys without and with a timeout, a missing key timing out, then the client
    # still works; a wait woken by another client.
    out["wait_present"] = result(lambda: a.wait(["key", "ctr"]))
    out["wait_present_timeout"] = result(lambda: a.wait(["key"], timedelta(seconds=2)))
    t0 = time.monotonic()
    out["wait_missing_timeout"] = result(lambda: b.wait(["never"], timedelta(milliseconds=300)))
    out["wait_missing_took_lt_3s"] = time.monotonic() - t0 < 3
    out["after_wait_timeout"] = result(lambda: b.get("key"))

    def later(key, value):
        time.sleep(0.3)
        client().set(key, value)
    t = threading.Thread(target=later, args=("late", "1"))
    t.start()
    t0 = time.monotonic()
    out["wait_woken"] = result(lambda: a.wait(["late"], timedelta(seconds=10)))
    out["wait_woken_in_time"] = 0.2 < time.monotonic() - t0 < 5
    t.join()

    # num_keys, delete_key.
    out["num_keys"] = result(lambda: a.num_keys())
    out["delete_present"] = result(lambda: a.delete_key("key"))
    out["delete_missing"] = result(lambda: a.delete_key("key"))
    out["num_keys_after_delete"] = result(lambda: a.num_keys())

    # multi_set / multi_get (a missing key inside multi_get waits, so it times out), append.
    out["multi_set"] = result(lambda: a.multi_set(["m1", "m2"], ["a", "b"]))
    out["multi_get"] = result(lambda: b.multi_get(["m1", "m2"]))
    c = client(seconds=1)
    out["multi_get_missing"] = result(lambda: c.multi_get(["m1", "nope"]))
    out["append_existing"] = result(lambda: a.append("m1", "c"))
    out["append_new"] = result(lambda: a.append("app", "x"))
    out["after_append"] = result(lambda: a.multi_get(["m1", "app"]))

    # Queues (the use_libuv=False client refuses them itself).
    out["queue_len_missing"] = result(lambda: a.queue_len("q"))
    out["queue_push"] = result(lambda: a.queue_push("q", "i1"))
    out["queue_push_2"] = result(lambda: a.queue_push("q", "i2"))  # Same client: ordered.
    out["queue_len"] = result(lambda: a.queue_len("q"))
    out["queue_check"] = result(lambda: a.check(["q"]))
    out["queue_pop"] = result(lambda: a.queue_pop("q"))
    out["queue_pop_nonblocking"] = result(lambda: b.queue_pop("q", block=False))
    out["queue_pop_empty_nonblocking"] = result(lambda: a.queue_pop("q", block=False))
    out["queue_len_empty"] = result(lambda: a.queue_len("q"))
    # Two consumers blocked on one queue, one push: one is answered, the other stays blocked
    # until the second push.
    popped = []
    consumers = [client(), client()]
    threads = [threading.Thread(target=lambda s=s: popped.append(result(lambda: s.queue_pop("wq"))))
               for s in consumers]
    for th in threads:
        th.start()
    time.sleep(0.3)
    out["blocked_push_1"] = result(lambda: a.queue_push("wq", "first"))
    time.sleep(0.5)
    out["after_one_push"] = sorted(map(str, popped))
    out["blocked_push_2"] = result(lambda: a.queue_push("wq", "second"))
    for th in threads:
        th.join(timeout=15)
    out["after_two_pushes"] = sorted(map(str, popped))

    # list_keys (the client strips the leading "/" and drops keys without it, like init/).
    out["list_keys"] = result(lambda: sorted(a.list_keys()))

    # barrier: alone, across two clients, a timeout (its arrival stays), reuse past world size.
    out["barrier_alone"] = result(lambda: a.barrier("b1", 1))
    got = {}
    t = threading.Thread(target=lambda: got.update(b=result(lambda: b.barrier("b2", 2))))
    t.start()
    time.sleep(0.3)
    out["barrier_pair_a"] = result(lambda: a.barrier("b2", 2))
    t.join(timeout=15)
    out["barrier_pair_b"] = got.get("b", "not released")
    out["barrier_count"] = result(lambda: a.get("b2"))
    out["barrier_again"] = result(lambda: a.barrier("b2", 2))
    out["barrier_timeout"] = result(lambda: a.barrier("b3", 2, timedelta(milliseconds=300)))
    out["barrier_timeout_count"] = result(lambda: a.get("b3"))
    t = threading.Thread(target=lambda: got.update(c=result(lambda: b.barrier("b4", 5))))
    t.start()
    time.sleep(0.3)
    a.set("b4", "9")  # A set of the barrier's key wakes its waiters.
    t.join(timeout=15)
    out["barrier_woken_by_set"] = got.get("c", "not released")

    # set_timeout, then get of a missing key times out, then the same client still works.
    d = client()
    d.set_timeout(timedelta(milliseconds=500))
    out["timeout_after_set_timeout"] = str(d.timeout)
    t0 = time.monotonic()
    out["get_missing"] = result(lambda: d.get("missing_for_get"))
    out["get_missing_took_lt_3s"] = time.monotonic() - t0 < 3
    out["after_get_missing"] = result(lambda: d.get("forty"))
    out["after_get_missing_add"] = result(lambda: d.add("forty", 1))
    out["after_get_missing_num_keys"] = result(lambda: d.num_keys())

    # clone: a second connection to the same store.
    e = result(lambda: a.clone())
    out["clone_get"] = result(lambda: e.get("forty")) if not isinstance(e, list) else e

    # add on a non-integer value fails on both servers, which drop that client's connection.
    f = client()
    f.set("text", "abc")
    out["add_non_integer"] = result(lambda: f.add("text", 1))
    out["others_unaffected"] = result(lambda: a.get("forty"))

    print(json.dumps(out, sort_keys=True), flush=True)


if __name__ == "__main__":
    main()
