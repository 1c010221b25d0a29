"""Bad input to dgt-run and dgt-rendezvous: one clear line, a non-zero exit, bounded time."""
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
    assert p.wait(timeout=30) == 1
    assert time.monotonic() - start < 10
    assert p.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: cannot reach the rendezvous service at 127.0.0.1:1 within 2s "
        "(is dgt-rendezvous running there? see --rdzv-connect-timeout)")


def test_join_timeout_when_too_few_nodes(spawn, rendezvous):
    start = time.monotonic()
    p = spawn([BIN / "dgt-run", "--nnodes=2", f"--rdzv-endpoint={rendezvous}",
               "--rdzv-id=lonely", "--join-timeout=2", SCRIPT])
    assert p.wait(timeout=30) == 1
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
    assert second.wait(timeout=20) == 1
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
