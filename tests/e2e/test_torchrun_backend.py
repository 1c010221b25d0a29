"""torch 2.13's real torchrun with --rdzv-backend=dgt against dgt-rendezvous (docs/TORCHRUN_BACKEND.md).

The dgt Python package is pip-installed (offline, --no-deps, --no-build-isolation) into a fresh
venv whose only other packages are the torch 2.x peers venv's (a .pth file), as a user would
install it; torchrun finds the backend through the "torchrun.handlers" entry point. Then:
- the handler's contract, method by method, driven in-process (workers/torchrun_handler_contract.py);
- 2 torchrun agents x 2 workers, DDP with exact parameters and an exact all-reduce;
- a worker crash: torchrun's restart makes a new dgt round and the job finishes;
- a third agent joining an --nnodes=2:3 run: a scale-up round of 6 workers;
- kill -9 of the leading dgt-rendezvous replica (two --backend=etcd replicas) mid-run: the job
  goes on with the same 4 worker processes;
- the service unreachable at start: one line naming the endpoints, no traceback;
- a mixed fleet (a dgt-run agent and a torchrun agent in one run), in both orders;
- TLS and the bearer token through --rdzv-conf.
"""
import json
import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from conftest import BIN, REPO, WORKERS, exact_descent, wait_for
from test_rendezvous_etcd import etcd, free_port  # noqa: F401 (etcd: a fixture)
from test_rendezvous_ops import make_certs, start_rendezvous
from test_rendezvous_replicas import leads, start_replica


def ddp_reference(world, steps):
    """workers/torchrun_ddp.py's parameters after `steps` DDP steps with `world` ranks."""
    batches = [([[r + 1, 2, -r], [1, -r, 3]], [r - 1, 2]) for r in range(world)]
    return exact_descent(lambda step: batches, steps)


@pytest.fixture(scope="module")
def venv(python2, tmp_path_factory):
    """A fresh venv with `pip install ./python` (the sources copied first, so the build leaves
    nothing in the checkout); returns its python."""
    root = tmp_path_factory.mktemp("torchrun-venv")
    shutil.copytree(REPO / "python", root / "src" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copytree(REPO / "proto", root / "src" / "proto")
    subprocess.run([python2, "-m", "venv", root / "venv"], check=True, timeout=120)
    py = root / "venv" / "bin" / "python"
    paths = subprocess.run([python2, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                           capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    mine = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True, timeout=60).stdout.strip()
    Path(mine, "peers.pth").write_text(paths + "\n")
    r = subprocess.run([py, "-m", "pip", "install", "--no-deps", "--no-build-isolation",
                        "--no-index", "-q", root / "src" / "python"],
                       capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stdout + r.stderr
    return str(py)


def test_pip_install_registers_dgt_with_torchrun(venv):
    r = subprocess.run([venv, "-c", (
        "from importlib.metadata import entry_points\n"
        "from torch.distributed.elastic.rendezvous import registry\n"
        "from torch.distributed.elastic.rendezvous.api import rendezvous_handler_registry as r\n"
        "print([e.value for e in entry_points(group='torchrun.handlers') if e.name == 'dgt'])\n"
        "print(r._registry['dgt'].__module__)\n")], capture_output=True, text=True, timeout=120,
        cwd="/")
    assert r.returncode == 0, r.stderr
    assert r.stdout.splitlines() == ["['dgt.torchrun:handler_creator']", "dgt.torchrun"]


def test_handler_contract(venv, rendezvous, tmp_path):
    r = subprocess.run([venv, WORKERS / "torchrun_handler_contract.py", rendezvous],
                       capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert r.returncode == 0, r.stdout + r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got["backend"] == "dgt"
    assert got["run_id"] == "contract"
    assert got["use_agent_store"] is True
    # Round 0: two nodes, ranks by node id; one store at node rank 0's address and port.
    assert got["round0"] == {"a": [0, 2], "b": [1, 2]}
    assert got["round0_bootstrap_same"] is True and got["round0_addr"] == "127.0.0.1"
    assert got["store_shared"] == "from-a"
    assert got["assigned"] == [[0, 4, 0, 4], [2, 4, 2, 4]]
    assert got["waiting_before"] == [0, 0]
    # A third node arrives: both members see it waiting, then all three form round 1; the
    # members keep their node ranks.
    assert got["waiting_after_join"] == [1, 1]
    assert got["round1"] == {"a": [0, 3], "b": [1, 3], "c": [2, 3]}
    assert got["round1_port_changed"] is True
    # Node b restarts after a failure: a and c are told, round 2 has the same three nodes.
    assert got["waiting_after_failure"] == [1, 1]
    assert got["round2"] == {"a": [0, 3], "b": [1, 3], "c": [2, 3]}
    assert got["closed_before"] == [False, False, False]
    # set_closed on c: closed there, next_rendezvous raises RendezvousClosedError.
    assert got["c_closed"] is True
    assert got["c_next_after_close"] == "DgtClosedError"
    # a and b shut down with success: the run ends; shutdown returns True.
    assert got["shutdown"] == [True, True]


def torchrun(spawn, venv, endpoint, run_id, name, out, nnodes="2", extra_conf="", args=(),
             torchrun_args=()):
    conf = f"node_id={name},connect_timeout=30{extra_conf}"
    return spawn([venv, "-m", "torch.distributed.run", "--rdzv-backend=dgt",
                  f"--rdzv-endpoint={endpoint}", f"--rdzv-id={run_id}", f"--nnodes={nnodes}",
                  "--nproc-per-node=2", "--monitor-interval=0.2", "--local-addr=127.0.0.1",
                  f"--rdzv-conf={conf}", *torchrun_args,
                  WORKERS / "torchrun_ddp.py", "--out", out, *args],
                 name=name, env=dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="INFO",
                                     PYTHONFAULTHANDLER="1"))


def records(out):
    recs = []
    for p in sorted(Path(out).glob("*.jsonl")):
        recs += [json.loads(line) for line in p.read_text().splitlines() if line.strip()]
    return recs


def events(out, kind):
    return [r for r in records(out) if r["event"] == kind]


def check_done(out, world, steps, idle_steps=0):
    """Every rank of a `world`-rank round finished with DDP's exact parameters (a world of 2**k
    ranks keeps them dyadic; otherwise every rank holds the same ones) and exact sums."""
    done = sorted(events(out, "done"), key=lambda r: r["rank"])
    assert [r["rank"] for r in done] == list(range(world)), done
    if world & (world - 1) == 0:
        weight, bias = ddp_reference(world, steps)
    else:
        weight, bias = done[0]["weight"], done[0]["bias"]
    for r in done:
        assert r["world_size"] == world
        assert (r["weight"], r["bias"]) == (weight, bias)
        assert r["sums"] == [world * (world + 1) / 2] * (steps + idle_steps)
        assert r["group_rank"] == r["rank"] // 2
    assert len({r["master_port"] for r in done}) == 1
    return done


def test_two_agents_ddp_exact(spawn, venv, rendezvous, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    agents = [torchrun(spawn, venv, rendezvous, "tr-ddp", n, out, args=["--steps=4"],
                       torchrun_args=["--max-restarts=1"]) for n in ("node-a", "node-b")]
    for a in agents:
        assert a.wait(timeout=90) == 0, a.stderr[-3000:]
    check_done(out, world=4, steps=4)
    assert len(events(out, "start")) == 4
    assert all(r["restart_count"] == 0 for r in events(out, "start"))


def test_worker_crash_restarts_in_a_new_round(spawn, venv, rendezvous, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    flag = tmp_path / "crashed"
    agents = [torchrun(spawn, venv, rendezvous, "tr-crash", n, out,
                       args=["--steps=4", "--crash-rank=3", f"--crash-flag={flag}"],
                       torchrun_args=["--max-restarts=2"]) for n in ("node-a", "node-b")]
    for a in agents:
        assert a.wait(timeout=120) == 0, a.stderr[-3000:]
    assert len(events(out, "crash")) == 1 and events(out, "crash")[0]["rank"] == 3
    done = check_done(out, world=4, steps=4)
    starts = events(out, "start")
    # Every rank started twice: once in round 0 and once in the restart round, whose store is
    # a fresh one (another port).
    assert sorted(r["rank"] for r in starts) == [0, 0, 1, 1, 2, 2, 3, 3]
    first_port = {r["master_port"] for r in starts} - {done[0]["master_port"]}
    assert len(first_port) == 1
    # torchrun counts restarts per agent: node-b's workers crashed (node-a's may have failed
    # on the lost peer too, or followed the new round without counting it).
    assert [r["restart_count"] for r in done[2:]] == [1, 1]
    assert "restart after failure" in agents[1].stderr


def test_third_agent_scales_up(spawn, venv, rendezvous, tmp_path):
    out = tmp_path / "out"
    out.mkdir()
    common = dict(nnodes="2:3", extra_conf=",last_call_timeout=1",
                  args=["--steps=4", "--idle-steps=20", "--step-sleep=0.25"])
    agents = [torchrun(spawn, venv, rendezvous, "tr-scale", n, out, **common)
              for n in ("node-a", "node-b")]
    wait_for(lambda: len(events(out, "start")) == 4, 60, "4 workers of round 0")
    assert {r["world_size"] for r in events(out, "start")} == {4}
    agents.append(torchrun(spawn, venv, rendezvous, "tr-scale", "node-c", out, **common))
    for a in agents:
        assert a.wait(timeout=120) == 0, a.stderr[-3000:]
    done = check_done(out, world=6, steps=4, idle_steps=20)
    assert {r["group_rank"] for r in done} == {0, 1, 2}
    assert sorted(r["world_size"] for r in events(out, "start")) == [4] * 4 + [6] * 6
    assert "scale-up" in agents[0].stderr


def test_kill_of_the_leading_replica_keeps_the_job(spawn, venv, etcd, tmp_path):  # noqa: F811
    r1, port1, metrics1 = start_replica(spawn, etcd, "r1")
    assert wait_for_value(lambda: leads(metrics1), 1, 10), r1.stderr
    r2, port2, metrics2 = start_replica(spawn, etcd, "r2")
    assert wait_for_value(lambda: leads(metrics2), 0, 10), r2.stderr
    out = tmp_path / "out"
    out.mkdir()
    endpoints = f"127.0.0.1:{port1},127.0.0.1:{port2}"
    agents = [torchrun(spawn, venv, endpoints, "tr-ha", n, out,
                       args=["--steps=4", "--idle-steps=36", "--step-sleep=0.25"])
              for n in ("node-a", "node-b")]
    wait_for(lambda: len(events(out, "start")) == 4, 60, "4 workers")
    time.sleep(1)
    r1.popen.send_signal(signal.SIGKILL)
    assert wait_for_value(lambda: leads(metrics2), 1, 10), r2.stderr
    for a in agents:
        assert a.wait(timeout=120) == 0, a.stderr[-3000:]
    check_done(out, world=4, steps=4, idle_steps=36)
    starts = events(out, "start")
    # No worker restarted: the same 4 processes ran the whole job.
    assert len(starts) == 4
    assert sorted(r["pid"] for r in starts) == sorted(r["pid"] for r in events(out, "done"))
    for a in agents:
        assert "reconnected to 127.0.0.1:%d" % port2 in a.stderr, a.stderr[-3000:]


def wait_for_value(get, value, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if get() == value:
            return True
        time.sleep(0.05)
    return False


def test_unreachable_service_at_start_names_the_endpoints(spawn, venv, tmp_path):
    p1, p2 = free_port(), free_port()
    endpoints = f"127.0.0.1:{p1},127.0.0.1:{p2}"
    start = time.monotonic()
    a = spawn([venv, "-m", "torch.distributed.run", "--rdzv-backend=dgt",
               f"--rdzv-endpoint={endpoints}", "--rdzv-id=tr-none", "--nnodes=2",
               "--nproc-per-node=2", "--rdzv-conf=connect_timeout=2",
               WORKERS / "torchrun_ddp.py", "--out", tmp_path], name="alone")
    assert a.wait(timeout=60) == 1, a.stderr
    assert time.monotonic() - start < 30
    lines = [l for l in a.stderr.splitlines() if l.startswith("torchrun: error:")]
    assert len(lines) == 1, a.stderr
    assert lines[0].startswith(
        f"torchrun: error: cannot reach any of the 2 rendezvous replicas at 127.0.0.1:{p1}, "
        f"127.0.0.1:{p2} within 2s (--rdzv-conf connect_timeout): 127.0.0.1:{p1}: UNAVAILABLE"), \
        lines[0]
    assert "Traceback" not in a.stderr, a.stderr


@pytest.mark.parametrize("endpoint,conf,line", [
    ("127.0.0.1:1", "read_timeout=soon",
     "torchrun: error: --rdzv-conf read_timeout must be a number of seconds from 0.1 to "
     "31536000 (a year), got 'soon'"),
    # gRPC takes it as a C int: too large a value must not kill the session thread (a hang).
    ("127.0.0.1:1", "keepalive_time_ms=2147483648",
     "torchrun: error: --rdzv-conf keepalive_time_ms must be an integer from 500 to 3600000, "
     "got '2147483648'"),
    ("http://127.0.0.1:1", "read_timeout=5",
     "torchrun: error: --rdzv-endpoint: a URL scheme is not taken, write host:port, "
     "got 'http://127.0.0.1:1' (item 1 of 'http://127.0.0.1:1')"),
])
def test_bad_rdzv_conf_is_one_line(spawn, venv, tmp_path, endpoint, conf, line):
    a = spawn([venv, "-m", "torch.distributed.run", "--rdzv-backend=dgt",
               f"--rdzv-endpoint={endpoint}", "--rdzv-id=tr-bad", "--nnodes=1",
               "--nproc-per-node=1", f"--rdzv-conf={conf}",
               WORKERS / "torchrun_ddp.py", "--out", tmp_path], name="bad")
    assert a.wait(timeout=60) == 1, a.stderr
    assert line in a.stderr.splitlines(), a.stderr
    assert "Traceback" not in a.stderr, a.stderr


@pytest.mark.parametrize("dgt_run_node", ["node-a", "node-b"])
def test_mixed_fleet_dgt_run_and_torchrun(spawn, venv, rendezvous, tmp_path, dgt_run_node):
    # One node is a dgt-run agent, the other a torchrun agent; node ids sort "node-a" first, so
    # each kind is node rank 0 (hosting the store) once.
    out = tmp_path / "out"
    out.mkdir()
    steps = 4
    agents = []
    for name in ("node-a", "node-b"):
        if name == dgt_run_node:
            agents.append(spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=2",
                                 f"--rdzv-endpoint={rendezvous}", "--rdzv-id=tr-mixed",
                                 f"--node-id={name}", "--local-addr=127.0.0.1",
                                 WORKERS / "torchrun_ddp.py", "--out", out, f"--steps={steps}"],
                                name=name, env=dict(os.environ, DGT_PYTHON=venv,
                                                    OMP_NUM_THREADS="1",
                                                    PYTHONFAULTHANDLER="1")))
        else:
            agents.append(torchrun(spawn, venv, rendezvous, "tr-mixed", name, out,
                                   args=[f"--steps={steps}"]))
    # Every agent's output on a failure: a worker's end on one node often starts on the other.
    # Workers run with PYTHONFAULTHANDLER=1, so one ended by a signal shows its Python stacks.
    codes = [a.wait(timeout=120) for a in agents]
    assert codes == [0, 0], "\n".join(a.stderr[-3000:] for a in agents)
    check_done(out, world=4, steps=steps)
    assert len(events(out, "start")) == 4


def test_tls_and_token_through_rdzv_conf(spawn, venv, tmp_path):
    make_certs(tmp_path)
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    _, endpoint = start_rendezvous(spawn, "--tls-cert", tmp_path / "server.pem", "--tls-key",
                                   tmp_path / "server.key", "--token-file", token)
    out = tmp_path / "out"
    out.mkdir()
    tls = f",tls_ca={tmp_path / 'ca.pem'}"
    ok = torchrun(spawn, venv, endpoint, "tr-tls", "node-a", out, nnodes="1",
                  extra_conf=f"{tls},token_file={token}", args=["--steps=2"])
    assert ok.wait(timeout=90) == 0, ok.stderr[-3000:]
    check_done(out, world=2, steps=2)
    # Without the token the service refuses the agent: one line, without retrying the replicas
    # (that path ends in "cannot reach ... within 30s").
    bad = torchrun(spawn, venv, endpoint, "tr-tls-bad", "node-b", out, nnodes="1",
                   extra_conf=tls, args=["--steps=2"])
    assert bad.wait(timeout=90) == 1, bad.stderr[-3000:]
    lines = [l for l in bad.stderr.splitlines() if l.startswith("torchrun: error:")]
    assert len(lines) == 1 and lines[0].startswith(
        f"torchrun: error: the dgt rendezvous service at {endpoint} refused this agent: "
        "UNAUTHENTICATED: "), bad.stderr[-3000:]
    assert lines[0].endswith("(--rdzv-conf token_file, tls_*)")
    assert "Traceback" not in bad.stderr


def test_service_lost_past_read_timeout_stops_the_workers(spawn, venv, tmp_path):
    rdzv, endpoint = start_rendezvous(spawn, name="lone-rdzv")
    out = tmp_path / "out"
    out.mkdir()
    a = torchrun(spawn, venv, endpoint, "tr-lost", "node-a", out, nnodes="1",
                 extra_conf=",read_timeout=3",
                 args=["--steps=2", "--idle-steps=200", "--step-sleep=0.25"])
    wait_for(lambda: len(events(out, "start")) == 2, 60, "2 workers")
    rdzv.popen.send_signal(signal.SIGKILL)
    assert a.wait(timeout=60) == 1, a.stderr[-3000:]
    assert events(out, "done") == []  # torchrun stopped the workers.
    lines = [l for l in a.stderr.splitlines() if l.startswith("torchrun: error:")]
    assert len(lines) == 1 and lines[0].startswith(
        f"torchrun: error: lost the dgt rendezvous service and could not reach it again at "
        f"{endpoint} within 3s (--rdzv-conf read_timeout); last answers: {endpoint}: "
        "UNAVAILABLE"), a.stderr[-3000:]
    assert "Traceback" not in a.stderr
