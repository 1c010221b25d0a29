"""dgt's store against real torch 1.13 clients, with torch's own TCPStore server as the reference.

`dgt store serve` runs on a free loopback port. The same client script (workers/store_ops.py)
runs against it and against torch 1.13's own server and must print the same results. Then two
gloo workers of each torch family (1.13 and 2.13) run init_process_group(env://) with
TORCHELASTIC_USE_AGENT_STORE=True against dgt's store, and the operator commands (`dgt store
get|set|add|wait|keys`) are checked, including the 1.x client against torch's own server.
"""
import json
import re
import signal
import socket
import struct
import time

import pytest

from conftest import BIN, PYTHON, WORKERS, dgt_env, wait_for_port

DGT = BIN / "dgt"



@pytest.fixture
def dgt_store(spawn):
    p = spawn([DGT, "store", "serve", "--listen", "127.0.0.1:0"], name="dgt_store")
    port = wait_for_port(p, r"dgt store listening on port (\d+)", "dgt store serve")
    yield port, p


@pytest.fixture
def torch_store(spawn):
    p = spawn([PYTHON, WORKERS / "torch_store_server.py"], name="torch_store")
    yield wait_for_port(p, r"torch store listening on port (\d+)", "torch's TCPStore server")


def run_ops(spawn, port, name):
    p = spawn([PYTHON, WORKERS / "store_ops.py", "127.0.0.1", port], name=name)
    assert p.wait(timeout=120) == 0, p.stderr
    return json.loads(p.stdout.strip().splitlines()[-1])


def test_every_client_op_matches_torch_server(spawn, dgt_store, torch_store):
    ours = run_ops(spawn, dgt_store[0], "ops_dgt")
    theirs = run_ops(spawn, torch_store, "ops_torch")
    assert ours == theirs
    # And the reference itself is what torch's semantics say (so equality is not vacuous).
    assert theirs["get"] == "value"
    assert theirs["add_more"] == -3 and theirs["get_ctr"] == "-3"
    assert theirs["cas_hit"] == "v2" and theirs["cas_miss"] == "v2"
    assert theirs["cas_missing_empty_expected"] == "new"
    assert theirs["cas_missing_nonempty_expected"] == "old"
    assert theirs["wait_missing_timeout"] == ["RuntimeError", "Socket Timeout"]
    assert theirs["get_missing"] == ["RuntimeError", "Socket Timeout"]
    assert theirs["wait_woken"] is None and theirs["wait_woken_in_time"]
    assert theirs["delete_present"] is True and theirs["delete_missing"] is False
    assert theirs["crowd_errors"] == [] and theirs["crowd_count"] == "6"
    assert theirs["add_non_integer_fails"] and theirs["others_unaffected"] == "42"
    # A timed-out get() leaves the connection usable on both servers (dgt used to close it).
    timeout = ["RuntimeError", "Socket Timeout"]
    assert theirs["abandoned_get"] == timeout and theirs["abandoned_then_get"] == "m"
    assert theirs["abandoned_then_add"] == 1 and theirs["abandoned_get_again"] == timeout
    # The abandoned waits' one STOP_WAITING arrives before the next WAIT's reply: torch 1.13's
    # client reads the stale byte as that reply and the GET's reply one byte off (it times out);
    # the stream is in step again after that.
    assert theirs["abandoned_after_set"] == [timeout, "s"]
    assert theirs["abandoned_mine_again"] == "m"
    assert theirs["own_add_get"] == timeout and theirs["own_add"] == 5
    assert theirs["own_add_after"] == [timeout, "5"]


def raw_get_missing(port):
    """A 1.x GET of a missing key on a raw socket: returns the bytes read before EOF."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as s:
        key = b"/nowhere"
        s.sendall(b"\x02" + struct.pack("<Q", len(key)) + key)
        data = b""
        while True:
            chunk = s.recv(64)
            if not chunk:
                return data
            data += chunk


def test_raw_get_of_missing_key_closes_like_torch(dgt_store, torch_store):
    assert raw_get_missing(torch_store) == b""
    assert raw_get_missing(dgt_store[0]) == b""
    # dgt says why in its log.
    deadline = time.monotonic() + 5
    while "GET of missing key '/nowhere'" not in dgt_store[1].stderr:
        assert time.monotonic() < deadline, dgt_store[1].stderr
        time.sleep(0.05)


# The keys each family's init_process_group leaves in the agent's store: 1.13 as recorded in
# shared/fixtures/torch-1.13-tcpstore (prefix /worker/attempt_<restart count>, a store-based
# barrier); 2.13 puts no attempt prefix on them (it expects a fresh store per restart) and names
# the device in gloo's prefix.
AGENT_STORE_KEYS = {
    "1.13": ["//worker/attempt_0/default_pg/0/0/0", "//worker/attempt_0/default_pg/0/0/1",
             "//worker/attempt_0/default_pg/0/0/rank_0", "//worker/attempt_0/default_pg/0/0/rank_1",
             "//worker/attempt_0/default_pg/0/SEQ_NUM_STORE_KEY",
             "//worker/attempt_0/default_pg/store_based_barrier_key:1", "init/"],
    "2.13": ["/default_pg/0//cpu//0/0", "/default_pg/0//cpu//0/1", "init/"],
}


def test_init_process_group_with_agent_store(spawn, dgt_store, torch_family):
    port = dgt_store[0]
    workers = []
    for rank in range(2):
        env = torch_family.env(RANK=rank, LOCAL_RANK=rank, WORLD_SIZE=2, LOCAL_WORLD_SIZE=2,
                               MASTER_ADDR="127.0.0.1", MASTER_PORT=port,
                               TORCHELASTIC_USE_AGENT_STORE="True", TORCHELASTIC_RESTART_COUNT=0,
                               TORCHELASTIC_RUN_ID="store-e2e")
        workers.append(spawn([torch_family.python, WORKERS / "allreduce_check.py"],
                             name=f"w{rank}", env=env))
    for rank, w in enumerate(workers):
        assert w.wait(timeout=120) == 0, w.stderr
        out = json.loads(w.stdout.strip().splitlines()[-1])
        assert out["rank"] == rank and out["sum"] == 1 and out["ranks"] == [0, 1]
        assert out["torch"].startswith(torch_family.version + ".")
    keys = spawn([DGT, "store", "keys", "--endpoint", f"127.0.0.1:{port}"], name="keys")
    assert keys.wait(timeout=30) == 0, keys.stderr
    assert sorted(keys.stdout.splitlines()) == AGENT_STORE_KEYS[torch_family.version]


def dgt_cli(spawn, *args, name="cli", timeout=30):
    p = spawn([DGT, "store", *map(str, args)], name=name)
    rc = p.wait(timeout=timeout)
    return rc, p.stdout, p.stderr


def test_operator_commands(spawn, dgt_store):
    ep = f"127.0.0.1:{dgt_store[0]}"
    assert dgt_cli(spawn, "set", "greeting", "hello", "--endpoint", ep)[0] == 0
    assert dgt_cli(spawn, "get", "greeting", "--endpoint", ep)[:2] == (0, "hello\n")
    assert dgt_cli(spawn, "add", "n", "5", "--endpoint", ep)[:2] == (0, "5\n")
    assert dgt_cli(spawn, "add", "n", "--endpoint", ep)[:2] == (0, "6\n")
    assert dgt_cli(spawn, "wait", "greeting", "n", "--endpoint", ep)[0] == 0
    rc, _, err = dgt_cli(spawn, "wait", "absent", "--endpoint", ep, "--timeout", "0.3")
    assert rc == 3
    assert err.strip() == f"dgt store wait: DEADLINE_EXCEEDED: store {ep}: wait timed out"
    assert dgt_cli(spawn, "keys", "--endpoint", ep)[:2] == (0, "greeting\nn\n")
    assert dgt_cli(spawn, "keys", "--protocol", "v1", "--endpoint", ep)[:2] == (0, "2\n")


def test_v1_operator_commands_against_torch_server(spawn, torch_store):
    ep = f"127.0.0.1:{torch_store}"
    assert dgt_cli(spawn, "set", "/k", "v", "--protocol", "v1", "--endpoint", ep)[0] == 0
    assert dgt_cli(spawn, "get", "/k", "--protocol", "v1", "--endpoint", ep)[:2] == (0, "v\n")
    assert dgt_cli(spawn, "add", "/c", "3", "--protocol", "v1", "--endpoint", ep)[:2] == (0, "3\n")
    rc, _, _ = dgt_cli(spawn, "wait", "/none", "--protocol", "v1", "--endpoint", ep,
                       "--timeout", "0.3")
    assert rc == 3


def test_endpoint_where_nothing_listens(spawn):
    start = time.monotonic()
    rc, _, err = dgt_cli(spawn, "get", "k", "--endpoint", "127.0.0.1:1", "--timeout", "0.5")
    assert rc == 1
    assert time.monotonic() - start < 5
    assert err.startswith("dgt store get: store 127.0.0.1:1: no connection within 500ms")


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_serve_stops_cleanly_on_signal(dgt_store, sig):
    port, p = dgt_store
    with socket.create_connection(("127.0.0.1", port), timeout=5):
        p.popen.send_signal(sig)
        assert p.wait(timeout=10) == 0


def test_serve_usage_errors(spawn, dgt_store):
    rc, _, err = dgt_cli(spawn, "serve", "--listen", "not-an-ip:1")
    assert rc == 2  # A usage error (was 1); a port in use below stays 1.
    assert err.strip() == ("dgt store serve: error: store listen address must be an IP literal, "
                           "got 'not-an-ip'")
    rc, _, err = dgt_cli(spawn, "serve", "--listen", f"127.0.0.1:{dgt_store[0]}")
    assert rc == 1
    assert "Address already in use" in err
