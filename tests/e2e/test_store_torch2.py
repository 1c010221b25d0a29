"""dgt's store against real torch 2.13 clients, with torch 2.13's own (libuv) server as the reference.

The torch 2.x interpreter is the peers venv (DGT_PYTHON2, made by scripts/install-deps.sh); the
`python2` fixture fails these tests under CI=true when it is missing and skips them otherwise.
workers/store_ops2.py drives every public method of torch 2.13's TCPStore (with the client's
use_libuv=True and False) against a fresh `dgt store serve` and a fresh torch 2.13 server at once;
both must print the same results and errors. Then a torch 1.13 client process (Debian's python3,
DGT_PYTHON) and a torch 2.13 client process share one dgt server. Jobs of 2.13 workers under
dgt-run (init_process_group through the agent store, DDP, group restarts, @record) are in
test_launch, test_supervision and test_elastic (the `torch_family` fixture).
"""
import json

import pytest

from conftest import BIN, PYTHON, WORKERS, wait_for_port

DGT = BIN / "dgt"


def dgt_store(spawn, name):
    p = spawn([DGT, "store", "serve", "--listen", "127.0.0.1:0"], name=name)
    return wait_for_port(p, r"dgt store listening on port (\d+)", "dgt store serve")


def last_json(proc, timeout=120):
    assert proc.wait(timeout=timeout) == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("use_libuv", [1, 0], ids=["client_libuv", "client_legacy"])
def test_every_method_matches_torch2_server(spawn, python2, use_libuv):
    torch_server = spawn([python2, WORKERS / "torch_store_server.py"], name="torch_store")
    dgt_port = dgt_store(spawn, "dgt_store")
    torch_port = wait_for_port(torch_server, r"torch store listening on port (\d+)",
                               "torch 2.13's TCPStore server")
    # Both scenarios at once: they are independent and each takes a few seconds of timeouts.
    ours = spawn([python2, WORKERS / "store_ops2.py", "127.0.0.1", dgt_port, use_libuv],
                 name="ops_dgt")
    theirs = spawn([python2, WORKERS / "store_ops2.py", "127.0.0.1", torch_port, use_libuv],
                   name="ops_torch")
    ours, theirs = last_json(ours), last_json(theirs)
    assert ours == theirs
    # The reference is what torch 2.13's semantics say, so equality is not vacuous.
    assert theirs["torch"] == "2.13.0"
    assert theirs["get"] == "value" and theirs["get_empty"] == "" and theirs["get_bin"] is True
    assert theirs["add_more"] == -3 and theirs["get_ctr"] == "-3" and theirs["add_preset"] == 42
    assert theirs["cas_hit"] == "v2" and theirs["cas_miss"] == "v2"
    assert theirs["cas_missing_empty_expected"] == "new"
    assert theirs["cas_missing_nonempty_expected"] == "old" and theirs["absent_stored"] is False
    assert theirs["check_present"] is True and theirs["check_some_missing"] is False
    assert theirs["wait_missing_timeout"] == ["DistStoreError",
                                              "wait timeout after 300ms, keys: /never"]
    assert theirs["after_wait_timeout"] == "v2"
    assert theirs["wait_woken"] is None and theirs["wait_woken_in_time"]
    assert theirs["num_keys"] == 8 and theirs["num_keys_after_delete"] == 7
    assert theirs["delete_present"] is True and theirs["delete_missing"] is False
    assert theirs["multi_get"] == ["a", "b"]
    assert theirs["multi_get_missing"] == ["DistStoreError",
                                           "wait timeout after 1000ms, keys: /m1, /nope"]
    assert theirs["after_append"] == ["ac", "x"]
    assert theirs["list_keys"] == ["app", "bin", "ctr", "empty", "forty", "late", "m1", "m2",
                                   "missing"]
    assert theirs["barrier_alone"] is None
    assert theirs["barrier_pair_a"] is None and theirs["barrier_pair_b"] is None
    assert theirs["barrier_count"] == "2" and theirs["barrier_again"] is None
    assert theirs["barrier_timeout"] == ["DistStoreError", "barrier timeout after 300ms, key: b3"]
    assert theirs["barrier_timeout_count"] == "1" and theirs["barrier_woken_by_set"] is None
    assert theirs["get_missing"] == ["DistStoreError",
                                     "wait timeout after 500ms, keys: /missing_for_get"]
    assert theirs["after_get_missing"] == "42" and theirs["after_get_missing_add"] == 43
    assert theirs["clone_get"] == "43"
    assert theirs["add_non_integer"][0] == "DistNetworkError"
    assert theirs["others_unaffected"] == "43"
    if use_libuv:
        assert theirs["queue_len"] == 2 and theirs["queue_check"] is True
        assert theirs["queue_pop"] == "i1" and theirs["queue_pop_nonblocking"] == "i2"
        assert theirs["queue_pop_empty_nonblocking"] == ["QueueEmptyError", "queue is empty"]
        # One push answers one of two blocked consumers; the second push the other.
        assert theirs["after_one_push"] == ["first"]
        assert theirs["after_two_pushes"] == ["first", "second"]
    else:
        refused = ["NotImplementedError", "queues not implemented on legacy TCPStore backend"]
        assert theirs["queue_push"] == refused and theirs["queue_pop"] == refused


def test_torch1_and_torch2_clients_share_one_dgt_server(spawn, python2):
    port = dgt_store(spawn, "dgt_store")
    v1 = spawn([PYTHON, WORKERS / "store_mixed.py", "127.0.0.1", port, "v1", "v2"], name="v1")
    v2 = spawn([python2, WORKERS / "store_mixed.py", "127.0.0.1", port, "v2", "v1"], name="v2")
    one, two = last_json(v1), last_json(v2)
    assert one["torch"].startswith("1.13") and two["torch"] == "2.13.0"
    # Same keys (both families' Python clients put "/" in front), same counter.
    assert one["get_other"] == "hello from v2" and two["get_other"] == "hello from v1"
    assert sorted([one["add"], two["add"]]) in ([1, 11], [10, 11])
    assert one["ctr"] == 11 and two["ctr"] == 11
    # The 1.x client reads what the 2.x-only methods wrote: APPEND and MULTI_SET values are
    # ordinary values; a 2.x queue is present for a 1.x WAIT.
    assert one["get_appended"] == "xy" and one["get_ms2"] == "two" and one["wait_queue"] is None
    # The 2.x client sees the 1.x client's keys in CHECK, MULTI_GET and LIST_KEYS.
    assert two["check_other"] is True
    assert two["multi_get_other"] == ["hello from v1", "one"]
    listed = [k for k in two["list_keys"] if not k.startswith("read/")]
    assert listed == ["appended", "done/v1", "done/v2", "from/v1", "from/v2", "ms/1", "ms/2",
                      "shared_ctr"]
    # One key space: both count the same 11 keys, "init/" (ADDed by both clients) included.
    assert one["num_keys"] == 11 and two["num_keys"] == 11
    keys = spawn([DGT, "store", "keys", "--endpoint", f"127.0.0.1:{port}"], name="keys")
    assert keys.wait(timeout=30) == 0, keys.stderr
    assert "init/" in keys.stdout.splitlines() and "/from/v1" in keys.stdout.splitlines()


@pytest.mark.parametrize("server", ["dgt", "torch2"])
def test_store_add_on_text_says_the_value_is_not_an_integer(spawn, python2, server):
    """ADD on a key holding text: both servers close that connection (torch's clients expect it);
    `dgt store add` then says why instead of "UNAVAILABLE: ... the server closed the connection".
    """
    if server == "dgt":
        port = dgt_store(spawn, "dgt_store")
    else:
        port = wait_for_port(spawn([python2, WORKERS / "torch_store_server.py"], name="torch_store"),
                             r"torch store listening on port (\d+)", "torch 2.13's TCPStore server")
    endpoint = ["--endpoint", f"127.0.0.1:{port}", "--timeout", "10"]
    s = spawn([DGT, "store", "set", "name", "hello", *endpoint], name="set")
    assert s.wait(timeout=30) == 0, s.stderr
    add = spawn([DGT, "store", "add", "name", "1", *endpoint], name="add")
    assert add.wait(timeout=30) == 1
    assert add.stderr.strip().splitlines() == [
        "dgt store add: error: the value of key 'name' is not a decimal integer ('hello'): ADD "
        "adds to a counter; the store refused it and closed the connection"]
    assert add.stdout == ""
    # Nothing changed, and the store serves on.
    get = spawn([DGT, "store", "get", "name", *endpoint], name="get")
    assert get.wait(timeout=30) == 0, get.stderr
    assert get.stdout.strip() == "hello"
    counter = spawn([DGT, "store", "add", "ctr", "5", *endpoint], name="add_ctr")
    assert counter.wait(timeout=30) == 0, counter.stderr
    assert counter.stdout.strip() == "5"
