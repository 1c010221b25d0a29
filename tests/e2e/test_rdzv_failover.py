"""dgt-run with several rendezvous replicas (--rdzv-endpoint A,B): a dead first
endpoint is skipped, a standby's answer (UNAVAILABLE with a NotLeader) moves the agent to the next
one at once, and a replica killed mid-job hands the session to the next one: the agents rejoin
with their assignment and the job completes with the same worker processes.

The replicas here are memory-backend dgt-rendezvous processes, which share nothing: B re-creates
the run from the agents' rejoins, as a restarted service does (docs/RENDEZVOUS.md). Real replicas
share their runs through etcd (docs/ETCD.md)."""
import re
import socket
import time

from conftest import BIN, WORKERS, records, wait_for

WAIT_FLAG = str(WORKERS / "wait_flag.py")
STUB = BIN.parent / "tests" / "rdzv_standby_stub"


def free_loopback_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_listening(spawn, args, name):
    """Starts a server that prints "listening on port N"; returns (proc, "127.0.0.1:N")."""
    p = spawn(args, name=name)
    wait_for(lambda: re.search(r"listening on port (\d+)", p.stdout) or p.popen.poll() is not None,
             10, f"{name} to listen")
    assert p.popen.poll() is None, p.stderr
    port = re.search(r"listening on port (\d+)", p.stdout).group(1)
    return p, f"127.0.0.1:{port}"


def replica(spawn, name):
    return start_listening(spawn, [BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0"], name)


def agents(spawn, endpoints, run_id, nodes, nproc, flag, conf="read_timeout=20"):
    return [spawn([BIN / "dgt-run", f"--rdzv-endpoint={endpoints}", f"--rdzv-id={run_id}",
                   f"--node-id=node-{i}", f"--nnodes={nodes}", f"--nproc-per-node={nproc}",
                   f"--rdzv-conf={conf}", WAIT_FLAG, str(flag), "60"], name=f"node-{i}")
            for i in range(nodes)]


def events(proc, event):
    return [r for r in records(proc.stdout) if r["event"] == event]


def test_a_dead_first_endpoint_is_skipped(spawn, tmp_path):
    # Nothing listens on the first endpoint (and the agents, with several endpoints, never host
    # the rendezvous there): the job runs on B.
    _, b = replica(spawn, "rdzv-b")
    dead = f"127.0.0.1:{free_loopback_port()}"
    flag = tmp_path / "go"
    for node in range(2):
        (tmp_path / f"go.{node}").touch()
    nodes = agents(spawn, f"{dead},{b}", "dead-first", 2, 1, flag)
    for i, n in enumerate(nodes):
        assert n.wait(timeout=60) == 0, n.stderr
        assert f"dgt-run: node node-{i} (127.0.0.1) joining run 'dead-first' at {b} (" in n.stderr
        assert "hosting" not in n.stderr.lower(), n.stderr
    ranks = sorted(int(r["env"]["RANK"]) for n in nodes for r in events(n, "start"))
    assert ranks == [0, 1]


def test_no_replica_reachable_and_one_replica_named_twice(spawn, tmp_path):
    dead = [f"127.0.0.1:{free_loopback_port()}" for _ in range(2)]
    p = spawn([BIN / "dgt-run", f"--rdzv-endpoint={','.join(dead)}", "--nnodes=2",
               "--rdzv-connect-timeout=2", WAIT_FLAG, str(tmp_path / "go"), "5"], name="none")
    assert p.wait(timeout=30) == 69  # kExitRendezvousUnavailable
    assert p.stderr.strip().splitlines()[-1] == (
        f"dgt-run: error: cannot reach any of the 2 rendezvous replicas at {dead[0]}, {dead[1]} "
        "within 2s (is dgt-rendezvous running there? see --rdzv-connect-timeout)")
    port = dead[0].split(":")[1]
    p = spawn([BIN / "dgt-run", f"--rdzv-endpoint=localhost:{port},127.0.0.1:{port}",
               "--nnodes=2", WAIT_FLAG, str(tmp_path / "go"), "5"], name="twice")
    assert p.wait(timeout=30) == 2  # kExitUsage
    assert p.stderr.strip().splitlines()[-1] == (
        f"dgt-run: error: --rdzv-endpoint=localhost:{port},127.0.0.1:{port}: localhost:{port} and "
        f"127.0.0.1:{port} are both 127.0.0.1:{port}; list each replica once")


def test_a_standby_is_skipped_at_once(spawn, tmp_path):
    assert STUB.exists(), f"{STUB} is not built"
    stub, standby = start_listening(spawn, [STUB, "127.0.0.1:0"], "standby")
    _, b = replica(spawn, "rdzv-b")
    (tmp_path / "go.0").touch()
    started = time.monotonic()
    (node,) = agents(spawn, f"{standby},{b}", "standby-first", 1, 1, tmp_path / "go")
    assert node.wait(timeout=60) == 0, node.stderr
    assert stub.stdout.count("refused a session") == 1, stub.stdout
    assert (f"dgt-run: the rendezvous replica at {standby} is a standby (dgt-rendezvous "
            f"replica stub is a standby; no leader now); trying {b}\n") in node.stderr, node.stderr
    # Its first session: "connected", not "reconnected".
    assert f"dgt-run: connected to the rendezvous service at {b}; joining run 'standby-first'\n" \
        in node.stderr, node.stderr
    assert "reconnected" not in node.stderr, node.stderr
    assert len(events(node, "done")) == 1
    # No backoff, no connect timeout: the standby's answer moved the agent on at once.
    assert time.monotonic() - started < 30


def test_job_survives_the_loss_of_its_replica(spawn, tmp_path):
    # 2 agents x 2 workers on A; node 0's workers finish (its report goes to A), then A is killed
    # with node 1's workers still running: both agents rejoin on B, node 0 sends its report again
    # (A may have died before counting it), node 1's workers finish, and the job succeeds with
    # the workers it started with.
    a_proc, a = replica(spawn, "rdzv-a")
    _, b = replica(spawn, "rdzv-b")
    flag = tmp_path / "go"
    nodes = agents(spawn, f"{a},{b}", "failover", 2, 2, flag)
    wait_for(lambda: all(len(events(n, "start")) == 2 for n in nodes), 60, "every worker to start")
    before = [sorted(r["pid"] for r in events(n, "start")) for n in nodes]
    (tmp_path / "go.0").touch()
    wait_for(lambda: len(events(nodes[0], "done")) == 2, 20, "node 0's workers to finish")
    time.sleep(1)  # Node 0's report reaches A.
    assert all(n.popen.poll() is None for n in nodes)
    killed = time.monotonic()
    a_proc.popen.kill()
    a_proc.popen.wait(timeout=10)
    wait_for(lambda: all("back in run 'failover' at round 0" in n.stderr for n in nodes), 20,
             "both agents to rejoin on B")
    failover_s = time.monotonic() - killed
    print(f"failover: both agents back in the run on B {failover_s:.2f} s after A was killed")
    (tmp_path / "go.1").touch()
    for i, n in enumerate(nodes):
        assert n.wait(timeout=30) == 0, n.stderr
        assert (f"dgt-run: the rendezvous replica at {b} took this node's session (the one at {a} "
                f"was lost)\n") in n.stderr, n.stderr
        assert f"dgt-run: lost the rendezvous replica at {a} (" in n.stderr, n.stderr
        starts = events(n, "start")
        assert sorted(r["pid"] for r in starts) == before[i]  # No worker was restarted.
        assert sorted(r["pid"] for r in events(n, "done")) == before[i]
        assert {r["env"]["GROUP_RANK"] for r in starts} == {str(i)}
        assert {r["env"]["WORLD_SIZE"] for r in starts} == {"4"}
        assert {r["env"]["TORCHELASTIC_RESTART_COUNT"] for r in starts} == {"0"}
    assert (f"dgt-run: sending this node's report of round 0 again to {b}\n"
            in nodes[0].stderr), nodes[0].stderr
    ranks = sorted(int(r["env"]["RANK"]) for n in nodes for r in events(n, "start"))
    assert ranks == [0, 1, 2, 3]
    assert failover_s < 10


def test_replica_lost_just_before_the_workers_end(spawn, tmp_path):
    # The leader died just before the workers ended. Every done mark says success,
    # but a node must not leave on them at once: the replica taking over (B, started late here)
    # fails a run whose nodes do not all rejoin it. Both nodes rejoin B, send their report again,
    # and B ends the run as succeeded.
    a_proc, a = replica(spawn, "rdzv-a")
    b_port = free_loopback_port()
    b = f"127.0.0.1:{b_port}"
    flag = tmp_path / "go"
    nodes = agents(spawn, f"{a},{b}", "late-loss", 2, 2, flag)
    wait_for(lambda: all(len(events(n, "start")) == 2 for n in nodes), 60, "every worker to start")
    killed = time.monotonic()
    a_proc.popen.kill()
    a_proc.popen.wait(timeout=10)
    for node in range(2):
        (tmp_path / f"go.{node}").touch()
    wait_for(lambda: all(len(events(n, "done")) == 2 for n in nodes), 10, "every worker to end")
    time.sleep(1)  # The done marks are all there: the nodes used to leave on them here.
    assert [n.popen.poll() for n in nodes] == [None, None], [n.stderr for n in nodes]
    replica_b = spawn([BIN / "dgt-rendezvous", "--listen", b], name="rdzv-b")
    for n in nodes:
        assert n.wait(timeout=15) == 0, n.stderr
        assert f"dgt-run: sending this node's report of round 0 again to {b}\n" in n.stderr, \
            n.stderr
        assert "as the done marks in the round's store say" not in n.stderr, n.stderr
    took = time.monotonic() - killed
    print(f"both nodes done {took:.2f} s after their replica was killed")
    assert took < 15
    assert "rendezvous: run succeeded: all 2 nodes succeeded" in replica_b.stderr, replica_b.stderr


def test_only_standbys_answer(spawn, tmp_path):
    # No replica leads (two standbys): exit 69 after --rdzv-connect-timeout naming each answer,
    # not 75 after --join-timeout; one log line per replica, not two per pass.
    assert STUB.exists(), f"{STUB} is not built"
    stubs = [start_listening(spawn, [STUB, "127.0.0.1:0"], f"standby-{i}") for i in range(2)]
    a, b = (endpoint for _, endpoint in stubs)
    started = time.monotonic()
    p = spawn([BIN / "dgt-run", f"--rdzv-endpoint={a},{b}", "--rdzv-id=no-leader", "--nnodes=1",
               "--rdzv-connect-timeout=3", WAIT_FLAG, str(tmp_path / "go"), "5"], name="agent")
    assert p.wait(timeout=30) == 69, p.stderr  # kExitRendezvousUnavailable
    took = time.monotonic() - started
    answer = "dgt-rendezvous replica stub is a standby; no leader now"
    assert p.stderr.strip().splitlines()[-1] == (
        f"dgt-run: error: no rendezvous replica of 2 took the session within 3s: every one that "
        f"answered is a standby ({a}: {answer}; {b}: {answer}); is the leader's address in "
        "--rdzv-endpoint? see --rdzv-connect-timeout"), p.stderr
    assert p.stderr.count("dgt-run: the rendezvous replica at ") == 2, p.stderr
    # A standby refuses the session: the agent never says it is connected to one.
    assert "connected to the rendezvous service" not in p.stderr, p.stderr
    # Each pass reached both stubs (every 100..200 ms): many refusals, two log lines.
    assert all(stub.stdout.count("refused a session") >= 3 for stub, _ in stubs)
    assert 3 <= took < 15
