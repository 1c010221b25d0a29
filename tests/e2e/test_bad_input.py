"""Bad input to dgt-run and dgt-rendezvous: one clear line, a non-zero exit, bounded time."""
import re
import signal
import socket
import time

import pytest

from conftest import BIN, PYTHON, WORKERS, dgt_env, wait_for_port
from test_rendezvous_ops import make_certs, start_rendezvous

SCRIPT = str(WORKERS / "print_env.py")


@pytest.mark.parametrize("args,message", [
    (["--bogus", SCRIPT], "dgt-run: error: unknown flag '--bogus' (see dgt-run --help)"),
    (["--nproc-per-node=0", SCRIPT], "dgt-run: error: --nproc-per-node must be >= 1, got 0"),
    (["--nnodes=2", "--rdzv-endpoint=host:99999", SCRIPT],
     "dgt-run: error: --rdzv-endpoint: port must be 0..65535, got 'host:99999'"),
    (["--nnodes=2", "--rdzv-endpoint=[::1", SCRIPT],
     "dgt-run: error: --rdzv-endpoint: missing ']' after IPv6 address, got '[::1'"),
    (["--nnodes=2", "--rdzv-endpoint=127.0.0.1:1", "--rdzv-token-file=/nonexistent", SCRIPT],
     "dgt-run: error: --rdzv-token-file: token file: cannot read '/nonexistent' "
     "(No such file or directory)"),
    (["--nnodes=2", "--rdzv-endpoint=127.0.0.1:1", "--local-addr=not an address", SCRIPT],
     None),
    (["--nnodes=2", "--rdzv-endpoint=127.0.0.1:1", "--join-timeout=1e300", SCRIPT],
     "dgt-run: error: --join-timeout must be a number of seconds from 0.001 to 31536000 (a year), "
     "got '1e300'"),
    (["--nnodes=2", "--rdzv-endpoint=127.0.0.1:1", "--rdzv-conf=join_timeout=inf", SCRIPT],
     "dgt-run: error: --rdzv-conf join_timeout must be a number of seconds from 0.001 to "
     "31536000 (a year), got 'inf'"),
    # Aliases that disagree; a repeated flag takes its last value instead.
    (["--nnodes=1", "--instance-count=2", SCRIPT],
     "dgt-run: error: --nnodes=1 and --instance-count=2 disagree: --instance-count is an alias "
     "of --nnodes; give one"),
    (["--nproc-per-node=3", "--process-count-per-instance=2", SCRIPT],
     "dgt-run: error: --nproc-per-node=3 and --process-count-per-instance=2 disagree: "
     "--process-count-per-instance is an alias of --nproc-per-node; give one"),
    (["--join-timeout=2", "--rdzv-conf=join_timeout=5", SCRIPT],
     "dgt-run: error: --join-timeout=2 and --rdzv-conf join_timeout=5 disagree: both set the "
     "join timeout; give one"),
    # Multi-node with nothing but --nnodes: each node would be rank 0 on 127.0.0.1 (item 13).
    (["--nnodes=2", SCRIPT],
     "dgt-run: error: --nnodes=2 with --rdzv-backend=static needs --master-addr (the address of "
     "node rank 0, reachable from every node), or --rdzv-endpoint of dgt-rendezvous"),
    # Numbers and choices (item 17).
    (["--node-rank=-5", SCRIPT],
     "dgt-run: error: --node-rank must be an integer from 0 to 999999, got '-5'"),
    (["--start-method=foo", SCRIPT],
     "dgt-run: error: --start-method must be spawn, fork or forkserver, got 'foo'"),
    (["--master-port=abc", SCRIPT],
     "dgt-run: error: --master-port must be an integer from 1 to 65535, got 'abc'"),
    (["--stop-timeout=-1", SCRIPT],
     "dgt-run: error: --stop-timeout must be a number of seconds from 0 to 31536000 (a year), "
     "got '-1'"),
    # Item 18: an address this host does not own (TEST-NET-1), a join timeout inside the last call.
    (["--local-addr=192.0.2.7", SCRIPT],
     "dgt-run: error: --local-addr=192.0.2.7: 192.0.2.7 is not an address of this host"),
    (["--nnodes=1:2", "--rdzv-endpoint=127.0.0.1:1", "--join-timeout=5", SCRIPT],
     "dgt-run: error: --join-timeout=5 is shorter than --rdzv-conf last_call_timeout=30: with "
     "--nnodes=1:2 the round waits that long for more nodes once 1 joined, so it would time out; "
     "raise the one or lower the other"),
    (["--nnodes=2", "--rdzv-endpoint=127.0.0.1:1", "--rdzv-conf=is_host=1,is_host=0", SCRIPT],
     "dgt-run: error: --rdzv-conf: key 'is_host' is given twice"),
    (["--standalone", "does_not_exist.py"],
     "dgt-run: error: training script 'does_not_exist.py' does not exist"),
    # An empty value as its own argument, as "--flag=" (torchrun: invalid int value).
    (["--standalone", "--max-restarts", "", SCRIPT],
     "dgt-run: error: --max-restarts needs a value, got an empty one"),
    (["--standalone", "--master-port", "", SCRIPT],
     "dgt-run: error: --master-port needs a value, got an empty one"),
    # An empty item of --local-ranks-filter (torchrun: int('') fails).
    (["--standalone", "--local-ranks-filter", "0,,1", SCRIPT],
     "dgt-run: error: --local-ranks-filter must be local ranks like 0,2, got '0,,1'"),
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


@pytest.mark.parametrize("flag,named", [("--join-timeout=2", "--join-timeout"),
                                        ("--rdzv-conf=join_timeout=2", "--rdzv-conf join_timeout")])
def test_join_timeout_when_too_few_nodes(spawn, rendezvous, flag, named):
    start = time.monotonic()
    p = spawn([BIN / "dgt-run", "--nnodes=2", f"--rdzv-endpoint={rendezvous}",
               "--rdzv-id=lonely", flag, SCRIPT])
    assert p.wait(timeout=30) == 75  # kExitJoinTimeout
    assert time.monotonic() - start < 10
    # The message names the flag the user gave.
    assert p.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: rendezvous for run 'lonely' did not complete within 2 s "
        f"({named}): 1 of at least 2 node(s) joined")


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


def test_empty_numeric_pet_default_is_refused(spawn):
    # As torchrun 2.13, whose argparse converts PET_NODE_RANK="" with int() and fails.
    p = spawn([BIN / "dgt-run", "--standalone", SCRIPT], env=dgt_env(PET_NODE_RANK=""))
    assert p.wait(timeout=10) == 2
    assert p.stderr.strip().splitlines() == [
        "dgt-run: error: PET_NODE_RANK (the default of --node-rank) is set but empty: give a "
        "number or unset it"]


def test_ignored_flags_are_warned(spawn):
    p = spawn([BIN / "dgt-run", "--standalone", "--master-addr", "10.9.9.9",
               "--local-ranks-filter", "5", SCRIPT])
    assert p.wait(timeout=30) == 0, p.stderr
    warnings = [l.split("] ", 2)[-1] for l in p.stderr.splitlines() if "[warning]" in l]
    assert warnings == [
        "dgt-run: --master-addr=10.9.9.9 is ignored: it is used only with --rdzv-backend=static, "
        "--nnodes>1 and no --rdzv-endpoint (one node hosts its store on this host)",
        "dgt-run: --local-ranks-filter=5: no local rank 5 on this node (--nproc-per-node=1, local "
        "ranks 0..0); no worker output reaches the console"], p.stderr


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
    # One line naming the flag and the value, before gRPC's own multi-line dump; exit 1: the port
    # may be free on a retry (docs/EXIT_CODES.md, dgt-rendezvous).
    p = spawn([BIN / "dgt-rendezvous", "--listen", rendezvous])
    assert p.wait(timeout=20) == 1
    assert p.stderr.strip().splitlines() == [
        f"dgt-rendezvous: error: --listen '{rendezvous}': cannot listen there: Address already in "
        "use (another process serves that port)"]
    # The metrics port too, with the same code.
    m = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", "--metrics-listen", rendezvous])
    assert m.wait(timeout=20) == 1
    assert m.stderr.strip().splitlines() == [
        f"dgt-rendezvous: error: --metrics-listen '{rendezvous}': cannot listen there: Address "
        "already in use (another process serves that port)"]


def test_rendezvous_address_not_local_is_a_usage_error(spawn):
    # 192.0.2.1 (TEST-NET-1, RFC 5737) is on no interface of this host: no retry helps (exit 2).
    for flag, args in (("--listen", ["--listen", "192.0.2.1:0"]),
                       ("--metrics-listen", ["--listen", "127.0.0.1:0", "--metrics-listen",
                                             "192.0.2.1:0"])):
        p = spawn([BIN / "dgt-rendezvous", *args])
        assert p.wait(timeout=20) == 2
        assert p.stderr.strip().splitlines() == [
            f"dgt-rendezvous: error: {flag} '192.0.2.1:0': cannot listen there: Cannot assign "
            "requested address (not an address of this host; 0.0.0.0 or [::] for all)"]


def test_rendezvous_metrics_on_the_listen_port_is_refused(spawn):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    p = spawn([BIN / "dgt-rendezvous", "--listen", f"127.0.0.1:{port}", "--metrics-listen",
               f"0.0.0.0:{port}"])
    assert p.wait(timeout=20) == 2
    assert p.stderr.strip().splitlines() == [
        f"dgt-rendezvous: error: --metrics-listen '0.0.0.0:{port}' and --listen "
        f"'127.0.0.1:{port}' need different ports"]


@pytest.mark.parametrize("args,message", [
    (["--token-file", "/nonexistent"],
     "--token-file: token file: cannot read '/nonexistent' (No such file or directory)"),
    # A directory is named as one, not read as an empty token.
    (["--token-file", "/etc"], "--token-file: token file: '/etc' is a directory, not a file"),
    # TLS files that cannot be read say why, as token files do.
    (["--tls-cert", "/nonexistent/cert.pem", "--tls-key", "/nonexistent/key.pem"],
     "--tls-cert: cannot read '/nonexistent/cert.pem' (No such file or directory)"),
    (["--tls-client-ca", "/etc/passwd"],
     "--tls-client-ca '/etc/passwd' needs --tls-cert and --tls-key (mutual TLS is on top of the "
     "service's own TLS)"),
    (["--tls-cert", "/etc/passwd"], "--tls-cert '/etc/passwd' needs --tls-key (given together)"),
    (["--tls-key", "/etc/passwd"], "--tls-key '/etc/passwd' needs --tls-cert (given together)"),
])
def test_rendezvous_bad_files_name_the_flag(spawn, args, message):
    p = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", *args])
    assert p.wait(timeout=20) == 2
    assert p.stderr.strip().splitlines() == [f"dgt-rendezvous: error: {message}"]


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
        f"dgt-rendezvous: error: {dashed} must be an integer from 0 to 1000000, got '{value}'"]


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


@pytest.mark.parametrize("args,message", [
    # dgt store serve: no silent "off" or "default" for a bad limit (item 17).
    (["store", "serve", "--listen", "127.0.0.1:0", "--idle-timeout", "nan"],
     "dgt store serve: error: --idle-timeout must be a number of seconds from 0 to 31536000 "
     "(a year), got 'nan'"),
    (["store", "serve", "--listen", "127.0.0.1:0", "--max-value-bytes", "-5"],
     "dgt store serve: error: --max-value-bytes must be an integer from 1 to 4294967296, "
     "got '-5'"),
    (["store", "serve", "--listen", "127.0.0.1:0", "--max-connections", "99999999999999999999"],
     "dgt store serve: error: --max-connections must be an integer from 1 to 1048576, "
     "got '99999999999999999999'"),
    # A host name where the listener needs an IP literal: a usage error, not a failure (was 1).
    (["store", "serve", "--listen", "localhost:0"],
     "dgt store serve: error: store listen address must be an IP literal, got 'localhost'"),
    (["store", "serve", "--listen", "127.0.0.1:0", "--max-key-bytes", "0"],
     "dgt store serve: error: --max-key-bytes must be an integer from 1 to 1073741824, got '0'"),
    # Timeouts that overflowed the client's poll (item 11), and 0.
    *[(["store", cmd, *extra, "--endpoint", "127.0.0.1:1", "--timeout", t],
       f"dgt store {cmd}: error: --timeout must be a number of seconds from 0.001 to 31536000 "
       f"(a year), got '{t}'")
      for cmd, extra in (("get", ["K"]), ("set", ["K", "V"]), ("keys", []))
      for t in ("1e18", "1e20", "nan", "0")],
    # A repeated flag takes its last value (here a bad one, to see which was taken).
    (["store", "get", "K", "--endpoint", "127.0.0.1:1", "--timeout", "1", "--timeout", "nan"],
     "dgt store get: error: --timeout must be a number of seconds from 0.001 to 31536000 "
     "(a year), got 'nan'"),
    (["store", "add", "K", "99999999999999999999", "--endpoint", "127.0.0.1:1"],
     "dgt store add: error: DELTA must be a 64-bit signed integer, got '99999999999999999999'"),
    # A rank beyond int32 is named with the flag's range, not CLI11's "Could not convert".
    (["logs", "job-1", "--rank", "99999999999", "--rdzv-endpoint", "127.0.0.1:1"],
     "dgt logs: error: --rank must be an integer from 0 to 2147483647, got '99999999999'"),
    (["logs", "job-1", "--rank", "-1", "--rdzv-endpoint", "127.0.0.1:1"],
     "dgt logs: error: --rank must be an integer from 0 to 2147483647, got '-1'"),
    (["status", "--rdzv-endpoint", "127.0.0.1:1", "--timeout", "1e20"],
     "dgt status: error: --timeout must be a number of seconds from 0.001 to 31536000 (a year), "
     "got '1e20'"),
    (["status", "--rdzv-endpoint", "127.0.0.1:1", "--timeout", "nan"],
     "dgt status: error: --timeout must be a number of seconds from 0.001 to 31536000 (a year), "
     "got 'nan'"),
    (["bogus"],
     "dgt: error: unknown command 'dgt bogus' (commands: store, status, doctor, recovery, "
     "submit, jobs, job, logs, cancel, nodes; see dgt --help)"),
    (["store", "bogus"],
     "dgt: error: unknown command 'dgt store bogus' (commands: serve, get, set, add, wait, keys; "
     "see dgt store --help)"),
])
def test_dgt_usage_errors(spawn, args, message):
    p = spawn([BIN / "dgt", *args])
    assert p.wait(timeout=10) == 2
    assert p.stderr.strip().splitlines() == [message]


@pytest.mark.parametrize("args,message", [
    (["--join-timeout", "nan"],
     "--join-timeout must be a number of seconds from 0.001 to 31536000 (a year), got 'nan'"),
    (["--last-call-timeout", "0"],
     "--last-call-timeout must be a number of seconds from 0.001 to 31536000 (a year), got '0'"),
    # A member listed twice is refused, naming it.
    (["--backend=etcd", "--etcd-endpoints=127.0.0.1:2379,127.0.0.1:2380,127.0.0.1:2379"],
     "--etcd-endpoints: '127.0.0.1:2379' is listed twice in "
     "'127.0.0.1:2379,127.0.0.1:2380,127.0.0.1:2379'"),
    (["--keepalive-time-ms", "abc"],
     "--keepalive-time-ms must be an integer from 100 to 3600000, got 'abc'"),
    # Repeated: the last value counts.
    (["--join-timeout", "5", "--join_timeout", "-1"],
     "--join-timeout must be a number of seconds from 0.001 to 31536000 (a year), got '-1'"),
])
def test_rendezvous_bad_numbers(spawn, args, message):
    p = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", *args])
    assert p.wait(timeout=10) == 2
    assert p.stderr.strip().splitlines() == [f"dgt-rendezvous: error: {message}"]


@pytest.mark.parametrize("binary", ["dgt-run", "dgt-rendezvous", "dgt"])
def test_version(spawn, binary):
    # Every binary answers --version with its name and the one project version.
    p = spawn([BIN / binary, "--version"])
    assert p.wait(timeout=10) == 0, p.stderr
    assert p.stdout.strip().splitlines() == [f"{binary} 0.1.0"]
    assert p.stderr == ""


def test_tls_misconfiguration_is_named(spawn, tmp_path):
    make_certs(tmp_path)
    (tmp_path / "other").mkdir()
    make_certs(tmp_path / "other")
    # A key that is not the certificate's: once reported as "the address is in use".
    (tmp_path / "other.key").write_text((tmp_path / "ca.key").read_text())
    bad = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", "--tls-cert",
                 tmp_path / "server.pem", "--tls-key", tmp_path / "other.key"], name="badkey")
    assert bad.wait(timeout=10) == 2
    assert bad.stderr.strip().splitlines() == [
        f"dgt-rendezvous: error: --tls-key '{tmp_path / 'other.key'}' is not the private key of "
        f"--tls-cert '{tmp_path / 'server.pem'}'"]
    _, endpoint = start_rendezvous(spawn, "--tls-cert", str(tmp_path / "server.pem"),
                                   "--tls-key", str(tmp_path / "server.key"))
    cases = [
        ([], f"dgt-run: error: the rendezvous service at {endpoint} closed the connection during "
             "the handshake: if it serves TLS, pass --rdzv-tls-ca (and --rdzv-tls-cert and "
             "--rdzv-tls-key for mutual TLS)"),
        # The CA of another deployment.
        ([f"--rdzv-tls-ca={tmp_path / 'other' / 'ca.pem'}"],
         f"dgt-run: error: the rendezvous service at {endpoint} presented a certificate that "
         "--rdzv-tls-ca does not verify (signed by another CA, or not issued for this address)"),
    ]
    for i, (extra, message) in enumerate(cases):
        p = spawn([BIN / "dgt-run", "--nnodes=1", f"--rdzv-endpoint={endpoint}", "--rdzv-id=t",
                   "--rdzv-conf=is_host=0", "--rdzv-connect-timeout=1", *extra, SCRIPT],
                  name=f"agent{i}")
        assert p.wait(timeout=30) == 77  # kExitNotAdmitted: TLS settings disagree
        # One line of ours, none of gRPC's ("E1201 ... Handshake failed ...").
        assert p.stderr.strip().splitlines() == [message], p.stderr


@pytest.mark.parametrize("flags", [["--rdzv-tls-ca=/etc/hostname"],
                                   ["--rdzv-tls-cert=/etc/hostname", "--rdzv-tls-key=/etc/hostname"]])
def test_tls_file_that_is_not_pem_is_a_usage_error(spawn, flags):
    # Once: the whole connect timeout, then "cannot reach the rendezvous service" (exit 69).
    start = time.monotonic()
    p = spawn([BIN / "dgt-run", "--nnodes=1", "--rdzv-endpoint=127.0.0.1:1",
               "--rdzv-conf=is_host=0", "--rdzv-connect-timeout=30", *flags, SCRIPT])
    assert p.wait(timeout=20) == 2
    flag = flags[0].split("=")[0]
    assert p.stderr.strip().splitlines() == [
        f"dgt-run: error: {flag}: '/etc/hostname' holds no PEM certificate"]
    assert time.monotonic() - start < 5


def test_exec_failure_with_no_python_says_why(spawn, tmp_path):
    program = tmp_path / "not-a-program"
    program.write_bytes(b"\x00\x01\x02 neither ELF nor script\n")
    program.chmod(0o755)
    p = spawn([BIN / "dgt-run", "--standalone", "--no-python", program])
    assert p.wait(timeout=30) == 127  # The worker's exit status, as for a program not found.
    assert f"dgt-run: cannot execute '{program}' for local rank 0: Exec format error" in p.stderr


def start_torch_store(spawn):
    """torch 1.13's own TCPStore server (a 1.x store): returns its port."""
    server = spawn([PYTHON, WORKERS / "torch_store_server.py"], name="torch_store")
    return wait_for_port(server, r"torch store listening on port (\d+)", "torch's store")


def test_store_get_against_torch_1x_store_hints_protocol_v1(spawn):
    port = start_torch_store(spawn)
    p = spawn([BIN / "dgt", "store", "get", "K", "--endpoint", f"127.0.0.1:{port}", "--timeout",
               "1"], name="get")
    assert p.wait(timeout=20) == 1
    line = p.stderr.strip().splitlines()[-1]
    assert "no answer to the torch 2.x handshake (a torch 1.x store needs protocol v1)" in line
    assert line.endswith(" (pass --protocol v1)"), line


def test_dgt_status_of_a_service_that_is_down(spawn):
    # One line in our words and exit 69 (docs/EXIT_CODES.md), not gRPC's "failed to connect to
    # all addresses; last error: UNKNOWN: ipv4:..." with exit 1.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # Closed at the end of the block: nothing listens there.
    p = spawn([BIN / "dgt", "status", f"--rdzv-endpoint=127.0.0.1:{port}", "--timeout=1"])
    assert p.wait(timeout=10) == 69
    assert p.stderr.strip().splitlines() == [
        f"dgt status: error: cannot reach the rendezvous service at 127.0.0.1:{port} within 1s "
        "(is dgt-rendezvous running there? with TLS, pass --rdzv-tls-ca)"]


def test_dgt_status_defaults_to_dgt_rdzv_endpoint(spawn):
    # As the job commands: $DGT_RDZV_ENDPOINT, not 127.0.0.1:29400, when no flag names one.
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # Nothing listens there once the block ends.
    p = spawn([BIN / "dgt", "status", "--timeout=1"],
              env=dgt_env(DGT_RDZV_ENDPOINT=f"127.0.0.1:{port}"))
    assert p.wait(timeout=10) == 69
    assert p.stderr.strip().splitlines() == [
        f"dgt status: error: cannot reach the rendezvous service at 127.0.0.1:{port} within 1s "
        "(is dgt-rendezvous running there? with TLS, pass --rdzv-tls-ca)"]


def test_store_get_against_torch_1x_store_does_not_wait_the_whole_timeout(spawn):
    # The 2.x opening has its own 5 s deadline: the hint came only after --timeout (30 s).
    port = start_torch_store(spawn)
    start = time.monotonic()
    p = spawn([BIN / "dgt", "store", "get", "K", "--endpoint", f"127.0.0.1:{port}"], name="get")
    assert p.wait(timeout=25) == 1
    assert time.monotonic() - start < 15
    line = p.stderr.strip().splitlines()[-1]
    assert "no answer to the torch 2.x handshake (a torch 1.x store needs protocol v1)" in line
    assert line.endswith(" (pass --protocol v1)"), line
