"""Two real dgt-rendezvous --backend=etcd replicas on one --etcd-prefix (docs/ETCD.md, "Replicas"):
exactly one leads (the dgt_rendezvous_leader gauge, and the leader key names its --replica-id and
--advertise-address); the leader SIGKILLed (no lease revoked) -> the standby leads within
--leader-lease-s + 1 s; a replica stopped with SIGTERM gives its key up at once. Bad replica
flags exit 2. Skips without Debian's etcd except under CI=true (test_rendezvous_etcd.need_etcd)."""
import json
import re
import socket
import subprocess
import time
import urllib.request

import pytest

from conftest import BIN
from test_rendezvous_etcd import etcd, etcdctl, free_port  # noqa: F401 (etcd: a fixture)

LEASE_S = 2


def start_replica(spawn, etcd_endpoint, replica_id):
    """A replica with its metrics endpoint; returns (proc, grpc port, metrics port)."""
    proc = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", "--backend=etcd",
                  f"--etcd-endpoints={etcd_endpoint}", "--etcd-prefix=/ha/runs/",
                  f"--replica-id={replica_id}", f"--leader-lease-s={LEASE_S}",
                  "--metrics-listen=127.0.0.1:0"], name=replica_id)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        port = re.search(r"listening on port (\d+)", proc.stdout)
        metrics = re.search(r"metrics on port (\d+)", proc.stdout)
        if port and metrics:
            return proc, int(port.group(1)), int(metrics.group(1))
        assert proc.popen.poll() is None, proc.stderr
        time.sleep(0.05)
    pytest.fail(f"{replica_id} did not report its ports within 20 s: {proc.stderr}")


def leads(metrics_port):
    """The replica's dgt_rendezvous_leader gauge (None when it does not answer)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=2) as r:
            text = r.read().decode()
    except OSError:
        return None
    m = re.search(r"^dgt_rendezvous_leader (\d)$", text, re.M)
    return int(m.group(1)) if m else None


def wait_for(predicate, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def leader_key(etcd_endpoint):
    read = etcdctl(etcd_endpoint, "get", "/ha/runs.leader", "--print-value-only")
    assert read.returncode == 0, read.stderr
    return json.loads(read.stdout) if read.stdout.strip() else None


def test_one_leader_and_the_standby_takes_over_when_it_is_killed(spawn, etcd):  # noqa: F811
    r1, port1, metrics1 = start_replica(spawn, etcd, "r1")
    assert wait_for(lambda: leads(metrics1) == 1, 10), r1.stderr
    r2, port2, metrics2 = start_replica(spawn, etcd, "r2")
    assert wait_for(lambda: leads(metrics2) == 0, 10), r2.stderr
    time.sleep(0.5)
    assert (leads(metrics1), leads(metrics2)) == (1, 0)
    assert leader_key(etcd) == {"replica": "r1", "address": f"127.0.0.1:{port1}"}

    r1.popen.kill()  # SIGKILL: its lease is not revoked; etcd ends it after the TTL.
    killed = time.monotonic()
    assert wait_for(lambda: leads(metrics2) == 1, LEASE_S + 1), r2.stderr
    took = time.monotonic() - killed
    print(f"standby led {took:.2f} s after the leader was killed (lease {LEASE_S} s)")
    assert leader_key(etcd) == {"replica": "r2", "address": f"127.0.0.1:{port2}"}

    # A replica stopped in order gives the key up at once (a standby need not wait for the TTL).
    r3, port3, metrics3 = start_replica(spawn, etcd, "r3")
    assert wait_for(lambda: leads(metrics3) == 0, 10), r3.stderr
    r2.popen.terminate()
    stopped = time.monotonic()
    assert wait_for(lambda: leads(metrics3) == 1, LEASE_S), r3.stderr
    print(f"standby led {time.monotonic() - stopped:.2f} s after the leader's SIGTERM")
    assert r2.wait(timeout=20) == 0, r2.stderr


@pytest.mark.parametrize("args,message", [
    (["--leader-lease-s=0"], "--leader-lease-s must be an integer from 1 to 3600, got '0'"),
    (["--advertise-address=10.0.0.1"], "--advertise-address: a port is required, got '10.0.0.1'"),
    (["--advertise-address=10.0.0.1:0"],
     "--advertise-address '10.0.0.1:0': needs a port in 1..65535"),
    (["--advertise-address=a b:1"],
     "--advertise-address 'a b:1': 'a b' is not a host name or IP address"),
])
def test_bad_replica_flags_exit_2_naming_the_flag_and_value(args, message):
    p = subprocess.run([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", "--backend=etcd",
                        f"--etcd-endpoints=127.0.0.1:{free_port()}", *args],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == f"dgt-rendezvous: error: {message}"


@pytest.mark.parametrize("flag", ["--replica-id=r1", "--advertise-address=10.0.0.1:29400",
                                  "--leader-lease-s=5", "--etcd-prefix=/x/runs/"])
def test_replica_flags_need_the_etcd_backend(flag):
    name, value = flag.split("=", 1)
    p = subprocess.run([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", flag],
                       capture_output=True, text=True, timeout=20)
    assert p.returncode == 2, p.stderr
    assert p.stderr.strip() == (f"dgt-rendezvous: error: {name} '{value}' needs --backend=etcd "
                                "(the backend is memory)")


def start(spawn, etcd_endpoint, name, *args):
    proc = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", "--backend=etcd",
                  f"--etcd-endpoints={etcd_endpoint}", f"--leader-lease-s={LEASE_S}", *args],
                 name=name)
    assert wait_for(lambda: re.search(r"listening on port (\d+)", proc.stdout)
                    or proc.popen.poll() is not None, 20), proc.stderr
    assert proc.popen.poll() is None, proc.stderr
    return proc, int(re.search(r"listening on port (\d+)", proc.stdout).group(1))


def dgt_status(*endpoints):
    return subprocess.run([BIN / "dgt", "status", f"--rdzv-endpoint={','.join(endpoints)}",
                           "--timeout=5"], capture_output=True, text=True, timeout=30)


def test_prefix_defaults_standby_log_and_status_of_a_list(spawn, etcd):  # noqa: F811
    # No trailing '/' on the prefix: the same place as with one; the default id and address take
    # the bound port.
    r1, port1 = start(spawn, etcd, "r1", "--etcd-prefix=/qa/runs")
    r1_id = f"{socket.gethostname()}:{port1}"
    assert wait_for(lambda: f"replica {r1_id} leads" in r1.stderr, 10), r1.stderr
    # The jobs service names the replica by the same default (it said "replica  leads").
    assert wait_for(lambda: f"jobs: replica {r1_id} leads:" in r1.stderr, 10), r1.stderr
    read = etcdctl(etcd, "get", "/qa/runs.leader", "--print-value-only")
    assert json.loads(read.stdout) == {"replica": r1_id, "address": f"127.0.0.1:{port1}"}
    r2, port2 = start(spawn, etcd, "r2", "--etcd-prefix=/qa/runs/", "--replica-id=r2")
    standby = (f"rendezvous: replica r2 is a standby; the leader is {r1_id} at "
               f"127.0.0.1:{port1}")
    assert wait_for(lambda: standby in r2.stderr, 10), r2.stderr
    time.sleep(3 * LEASE_S)  # Campaigns every TTL: still one line.
    assert r2.stderr.count("is a standby") == 1, r2.stderr
    assert "lost its leadership" not in r1.stderr + r2.stderr
    # dgt status takes the list and says who answered; the leader is preferred.
    both = dgt_status(f"127.0.0.1:{port2}", f"127.0.0.1:{port1}")
    assert both.returncode == 0, both.stderr
    assert both.stdout == f"replica {r1_id} at 127.0.0.1:{port1}: the leader\nno runs\n"
    one = dgt_status(f"127.0.0.1:{port2}")
    assert one.returncode == 0, one.stderr
    assert one.stdout == (f"replica r2 at 127.0.0.1:{port2}: a standby (leader: "
                          f"127.0.0.1:{port1}; its runs may lag the leader's)\nno runs\n")
    # A third replica under the leader's id is told so.
    r3, _ = start(spawn, etcd, "r3", "--etcd-prefix=/qa/runs/", f"--replica-id={r1_id}")
    assert wait_for(lambda: "another replica runs with the same --replica-id" in r3.stderr, 10), \
        r3.stderr
    assert (f"rendezvous: replica {r1_id}: the leader key /qa/runs.leader names this replica's "
            f"id, under another lease (leader address 127.0.0.1:{port1}): another replica runs "
            "with the same --replica-id; give each replica its own") in r3.stderr
