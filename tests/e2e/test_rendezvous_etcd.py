"""dgt-rendezvous keeping its run state in etcd v3 (--backend=etcd, docs/ETCD.md): one replica
serves a real job (2 dgt-run agents x 1 PyTorch worker) over a one-member etcd the test starts
on free loopback ports, and the run's record is in etcd afterwards; bad --backend /
--etcd-endpoints values are refused with exit 2. The etcd tests skip without Debian's etcd
(etcd-server, etcd-client) except under CI=true, where they fail."""
import json
import os
import shutil
import socket
import subprocess
import time

import pytest

from conftest import BIN, WORKERS, records

ETCD = os.environ.get("DGT_ETCD_BIN") or shutil.which("etcd") or "/usr/bin/etcd"
ETCDCTL = shutil.which("etcdctl") or "/usr/bin/etcdctl"


def need_etcd():
    if os.access(ETCD, os.X_OK) and os.access(ETCDCTL, os.X_OK):
        return
    if os.environ.get("CI") == "true":
        pytest.fail("no etcd/etcdctl under CI=true; scripts/install-deps.sh installs them")
    pytest.skip("no etcd/etcdctl: install etcd-server and etcd-client (scripts/install-deps.sh)")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def etcdctl(endpoint, *args):
    return subprocess.run([ETCDCTL, f"--endpoints={endpoint}", "--dial-timeout=2s",
                           "--command-timeout=5s", *args],
                          capture_output=True, text=True, timeout=15,
                          env=dict(os.environ, ETCDCTL_API="3"))


@pytest.fixture
def etcd(spawn, tmp_path):
    """A one-member etcd on free loopback ports, data in tmp_path; yields "127.0.0.1:port"."""
    need_etcd()
    client, peer = free_port(), free_port()
    spawn([ETCD, "--name=m0", f"--data-dir={tmp_path / 'etcd'}",
           f"--listen-client-urls=http://127.0.0.1:{client}",
           f"--advertise-client-urls=http://127.0.0.1:{client}",
           f"--listen-peer-urls=http://127.0.0.1:{peer}",
           f"--initial-advertise-peer-urls=http://127.0.0.1:{peer}",
           f"--initial-cluster=m0=http://127.0.0.1:{peer}"], name="etcd")
    endpoint = f"127.0.0.1:{client}"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        if etcdctl(endpoint, "endpoint", "health").returncode == 0:
            yield endpoint
            return
        time.sleep(0.2)
    pytest.fail(f"etcd at {endpoint} not healthy within 20 s: {(tmp_path / 'etcd.err').read_text()}")


def test_one_replica_serves_a_job_with_its_run_state_in_etcd(spawn, etcd):
    rdzv = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", "--backend=etcd",
                  f"--etcd-endpoints={etcd}", "--etcd-prefix=/e2e/runs/"], name="rdzv")
    deadline = time.monotonic() + 20
    port = None
    while port is None and time.monotonic() < deadline:
        for line in rdzv.stdout.splitlines():
            if line.startswith("dgt-rendezvous listening on port "):
                port = int(line.rsplit(" ", 1)[1])
        assert rdzv.popen.poll() is None, rdzv.stderr
        time.sleep(0.05)
    assert port is not None, "dgt-rendezvous did not report its port within 20 s"
    agents = [spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=1",
                     f"--rdzv-endpoint=127.0.0.1:{port}", "--rdzv-id=etcdjob",
                     WORKERS / "allreduce_check.py"], name=f"agent{i}") for i in range(2)]
    for agent in agents:
        assert agent.wait(timeout=90) == 0, agent.stderr
    got = sorted((r for a in agents for r in records(a.stdout)), key=lambda r: r["rank"])
    assert [(r["rank"], r["world_size"], r["sum"]) for r in got] == [(0, 2, 1), (1, 2, 1)]

    read = etcdctl(etcd, "get", "/e2e/runs/etcdjob", "--print-value-only")
    assert read.returncode == 0, read.stderr
    value = json.loads(read.stdout)
    assert value["version"] == 2
    assert value["buckets"] == 1  # One node bucket per 32 nodes of --nnodes' maximum.
    run = value["run"]
    assert run["run_id"] == "etcdjob"
    assert run["state"] == "closed"
    assert run["finished"]["succeeded"] is True
    assert run["round"] == 0
    assert run["world_size"] == 2
    assert "nodes" not in run  # In the bucket key: [node_id, session, address, nproc, ...].
    bucket = etcdctl(etcd, "get", "/e2e/runs/etcdjob\x1f0", "--print-value-only")
    assert bucket.returncode == 0, bucket.stderr
    assert sorted(n[5] for n in json.loads(bucket.stdout)["nodes"]) == [0, 1]
    # The run key and its one node bucket under the prefix, and the replicas' leader key beside
    # it (docs/ETCD.md). 0x1f is whitespace to str.split: split lines.
    keys = etcdctl(etcd, "get", "/e2e/", "--prefix", "--keys-only")
    assert [k for k in keys.stdout.splitlines() if k] == [
        "/e2e/runs.leader", "/e2e/runs/etcdjob", "/e2e/runs/etcdjob\x1f0"]


@pytest.mark.parametrize("args,message", [
    (["--backend=disk"], "--backend: 'disk' is not one of memory, etcd"),
    (["--backend=etcd"], "--backend=etcd needs --etcd-endpoints=HOST:PORT,..."),
    (["--backend=etcd", "--etcd-endpoints=127.0.0.1:2379,nohost"],
     "--etcd-endpoints: 'nohost' is not HOST:PORT (in '127.0.0.1:2379,nohost')"),
    (["--backend=etcd", "--etcd-endpoints=http://127.0.0.1:2379"],
     "--etcd-endpoints: 'http://127.0.0.1:2379' is a URL; give HOST:PORT without a scheme "
     "(in 'http://127.0.0.1:2379')"),
    (["--backend=etcd", "--etcd-endpoints=h:0"],
     "--etcd-endpoints: 'h:0' is not HOST:PORT (in 'h:0')"),
    (["--etcd-endpoints=h:1"], "--etcd-endpoints 'h:1' needs --backend=etcd (the backend is memory)"),
])
def test_bad_backend_flags_exit_2_naming_the_flag_and_value(args, message):
    p = subprocess.run([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", *args],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2
    assert p.stderr.strip() == f"dgt-rendezvous: error: {message}"


def test_unreachable_etcd_exits_1_naming_the_endpoint():
    port = free_port()  # Nothing listens there.
    start = time.monotonic()
    p = subprocess.run([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", "--backend=etcd",
                        f"--etcd-endpoints=127.0.0.1:{port}"],
                       capture_output=True, text=True, timeout=30)
    assert p.returncode == 1
    assert p.stderr.strip().startswith(
        "dgt-rendezvous: error: etcd backend: reading the runs under '/dgt/runs/': etcd get "
        f"prefix: no member answered within 5s (127.0.0.1:{port}: "), p.stderr
    assert time.monotonic() - start < 15
