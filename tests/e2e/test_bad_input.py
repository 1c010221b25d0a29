"""Bad input to dgt-run and dgt-rendezvous: one clear line, a non-zero exit, bounded time."""
import re
import signal
import time

import pytest

from conftest import BIN, WORKERS

SCRIPT = str(WORKERS / "print_env.py")


@pytest.mark.parametrize("args,message", [
    (["--bogus", SCRIPT], "dgt-run: error: unknown flag '--bogus' (see dgt-run --help)"),
    (["--nproc-per-node=0", SCRIPT], "dgt-run: error: --nproc-per-node must be >= 1, got 0"),
    (["--nnodes=2", "--rdzv-endpoint=host:99999", SCRIPT],
     "dgt-run: error: --rdzv-endpoint: port must be 1..65535, got 'host:99999'"),
    (["--nnodes=2", "--rdzv-endpoint=[::1", SCRIPT],
     "dgt-run: error: --rdzv-endpoint: missing ']' after IPv6 address, got '[::1'"),
    (["--nnodes=2", "--rdzv-endpoint=127.0.0.1:1", "--rdzv-token-file=/nonexistent", SCRIPT],
     "dgt-run: error: --rdzv-token-file: token file: cannot read '/nonexistent'"),
    (["--nnodes=2", "--rdzv-endpoint=127.0.0.1:1", "--local-addr=not an address", SCRIPT],
     None),
    (["--nnodes=2", "--rdzv-endpoint=127.0.0.1:1", "--join-timeout=1e300", SCRIPT],
     "dgt-run: error: --join-timeout must be at most 31536000 seconds (a year), got 1e+300"),
    (["--nnodes=2", "--rdzv-endpoint=127.0.0.1:1", "--rdzv-conf=join_timeout=inf", SCRIPT],
     "dgt-run: error: --rdzv-conf join_timeout must be a number of seconds > 0 and <= 31536000, "
     "got 'inf'"),
    (["--nnodes=2", "--rdzv-endpoint=127.0.0.1:1", "--rdzv-conf=is_host=1,is_host=0", SCRIPT],
     "dgt-run: error: --rdzv-conf: key 'is_host' is given twice"),
    (["--standalone", "does_not_exist.py"],
     "dgt-run: error: training script 'does_not_exist.py' does not exist"),
])
def test_usage_errors(spawn, args, message):
    p = spawn([BIN / "dgt-run", *args])
    assert p.wait(timeout=10) == 2
    lines = p.stderr.strip().splitlines()
    if message is None:
        assert len(lines) == 1 and lines[0].startswith("dgt-run: error: --local-addr: "), lines
    else:
        assert lines == [message]


def test_endpoint_where_nothing_listens(spawn):
    start = time.monotonic()
    # is_host=0: else this agent would host the service itself (the endpoint is this host's).
    p = spawn([BIN / "dgt-run", "--nnodes=2", "--rdzv-endpoint=127.0.0.1:1",
               "--rdzv-conf=is_host=0", "--rdzv-connect-timeout=2", SCRIPT])
    assert p.wait(timeout=30) == 69  # kExitRendezvousUnavailable
    assert time.monotonic() - start < 10
    assert p.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: cannot reach the rendezvous service at 127.0.0.1:1 within 2s "
        "(is dgt-rendezvous running there? see --rdzv-connect-timeout)")


def test_join_timeout_when_too_few_nodes(spawn, rendezvous):
    start = time.monotonic()
    p = spawn([BIN / "dgt-run", "--nnodes=2", f"--rdzv-endpoint={rendezvous}",
               "--rdzv-id=lonely", "--join-timeout=2", SCRIPT])
    assert p.wait(timeout=30) == 75  # kExitJoinTimeout
    assert time.monotonic() - start < 10
    assert p.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: rendezvous for run 'lonely' did not complete within 2 s "
        "(--join-timeout): 1 of at least 2 node(s) joined")


def test_conflicting_join_is_refused(spawn, rendezvous):
    first = spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=1",
                   f"--rdzv-endpoint={rendezvous}", "--rdzv-id=conflict", "--join-timeout=20",
                   SCRIPT], name="first")
    time.sleep(0.5)
    second = spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=2",
                    f"--rdzv-endpoint={rendezvous}", "--rdzv-id=conflict", SCRIPT],
                   name="second")
    assert second.wait(timeout=20) == 77  # kExitNotAdmitted
    assert second.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: the rendezvous service refused this node: run 'conflict' uses "
        "--nnodes=2 --nproc-per-node=1; this node asked for --nnodes=2 --nproc-per-node=2")
    assert first.popen.poll() is None  # The waiting node is untouched.


def test_rendezvous_bad_listen_address(spawn):
    p = spawn([BIN / "dgt-rendezvous", "--listen", "256.1.1.1:0"])
    assert p.wait(timeout=20) == 2
    assert p.stderr.strip().splitlines()[-1].startswith(
        "dgt-rendezvous: error: --listen: cannot resolve host '256.1.1.1'"), p.stderr
    for listen, message in (("127.0.0.1:70000", "--listen: port must be 0..65535, got "
                             "'127.0.0.1:70000'"),
                            ("127.0.0.1:", "--listen: empty port, got '127.0.0.1:'")):
        q = spawn([BIN / "dgt-rendezvous", "--listen", listen])
        assert q.wait(timeout=20) == 2
        assert q.stderr.strip().splitlines()[-1] == f"dgt-rendezvous: error: {message}"


def test_rendezvous_port_in_use_is_refused(spawn, rendezvous):
    p = spawn([BIN / "dgt-rendezvous", "--listen", rendezvous])
    assert p.wait(timeout=20) == 1
    assert p.stderr.strip().splitlines()[-1] == (
        f"dgt-rendezvous: error: rendezvous cannot listen on {rendezvous}: the address is in use "
        "or not local")


def test_missing_program_with_no_python(spawn):
    p = spawn([BIN / "dgt-run", "--standalone", "--nproc-per-node=2", "--no-python",
               "no-such-program-dgt"])
    assert p.wait(timeout=20) == 127
    assert [l for l in p.stderr.splitlines() if l.startswith("dgt-run: error:")] == [
        "dgt-run: error: cannot start workers: 'no-such-program-dgt' was not found in PATH"]


@pytest.mark.parametrize("flag,value", [
    ("--max-waiting-nodes-per-run", "2147483647"),
    ("--max_waiting_nodes_per_run", "xyz"),
    ("--max-sessions-per-peer", "-1"),
    ("--max_sessions_per_peer", "1.5"),
])
def test_rendezvous_bad_count_flags(spawn, flag, value):
    p = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", f"{flag}={value}"])
    assert p.wait(timeout=20) == 2
    dashed = flag.replace("_", "-")
    assert p.stderr.strip().splitlines() == [
        f"dgt-rendezvous: error: {dashed}: must be an integer from 0 to 1000000, got '{value}'"]


def test_rendezvous_largest_limits_still_admit_nodes(spawn):
    # The largest values the flags take (underscore spellings, as torchrun's) must not refuse
    # every join (MAX + waiting once wrapped around in 32 bits).
    r = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0",
               "--max_waiting_nodes_per_run=1000000", "--max_sessions_per_peer=1000000"],
              name="rendezvous")
    deadline = time.monotonic() + 10
    port = None
    while port is None and time.monotonic() < deadline:
        m = re.search(r"listening on port (\d+)", r.stdout)
        if m:
            port = m.group(1)
            break
        assert r.popen.poll() is None, r.stderr
        time.sleep(0.05)
    assert port is not None
    p = spawn([BIN / "dgt-run", "--nnodes=1", f"--rdzv-endpoint=127.0.0.1:{port}",
               "--rdzv-conf=is_host=0", "--rdzv-id=lim", SCRIPT])
    assert p.wait(timeout=30) == 0, p.stderr


def test_unknown_rdzv_conf_key_is_a_usage_error(spawn):
    p = spawn([BIN / "dgt-run", "--standalone", "--rdzv-conf=join_timout=5", SCRIPT])
    assert p.wait(timeout=10) == 2
    assert p.stderr.strip().splitlines() == [
        "dgt-run: error: --rdzv-conf: unknown key 'join_timout' (known: join_timeout, "
        "last_call_timeout, close_timeout, read_timeout, timeout, keep_alive_interval, "
        "keep_alive_max_attempt, is_host)"]


@pytest.mark.parametrize("value,ok", [("TRUE", True), ("f", True), ("Yes", True),
                                      ("maybe", False)])
def test_is_host_spellings(spawn, value, ok):
    p = spawn([BIN / "dgt-run", "--standalone", f"--rdzv-conf=is_host={value}", SCRIPT])
    if ok:
        assert p.wait(timeout=30) == 0, p.stderr
    else:
        assert p.wait(timeout=10) == 2
        assert p.stderr.strip().splitlines() == [
            "dgt-run: error: --rdzv-conf is_host must be true or false (1/0, t/f, yes/no, y/n; "
            f"any case), got '{value}'"]


def test_sigterm_while_connecting_ends_at_once(spawn):
    # Connecting to the rendezvous blocks before the event loop runs: a SIGTERM (scancel, Ctrl-C)
    # then takes its default action instead of waiting out --rdzv-connect-timeout.
    p = spawn([BIN / "dgt-run", "--nnodes=2", "--rdzv-endpoint=127.0.0.1:1",
               "--rdzv-conf=is_host=0", "--rdzv-connect-timeout=30", SCRIPT])
    time.sleep(1)
    assert p.popen.poll() is None
    start = time.monotonic()
    p.popen.send_signal(signal.SIGTERM)
    assert p.wait(timeout=10) == -signal.SIGTERM
    assert time.monotonic() - start < 5
