"""dgt-run waits for node rank 0's DNS name, as in a Kubernetes Indexed Job whose headless Service
publishes index 0's record only once that pod runs.

The test creates a network namespace (removed at the end) whose resolver is a dnsmasq it starts
on 127.0.0.1:53 (`ip netns exec` bind-mounts /etc/netns/NAME/resolv.conf). Each "pod" runs in its
own UTS and mount namespace with hostname train-<index> and an /etc/hosts holding only its own
name, as the kubelet writes it. Node rank 1 starts first and must wait; index 0's name is added to
dnsmasq's --hostsdir after 12 s. Needs root, ip, unshare and dnsmasq; skipped otherwise.
"""
import datetime
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import BIN, WORKERS, dgt_env, records, wait_for

DNSMASQ = shutil.which("dnsmasq") or "/usr/sbin/dnsmasq"
DOMAIN = "train.dgt.test"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("unshare")
    or not os.access(DNSMASQ, os.X_OK),
    reason="needs root, iproute2, unshare and dnsmasq")


@pytest.fixture
def dns_netns(tmp_path):
    """A network namespace whose resolver is a dnsmasq serving the names under DOMAIN from a
    --hostsdir the test writes to. Yields (namespace, hostsdir)."""
    ns = f"dgtDns{os.getpid() % 10000}"
    subprocess.run(["ip", "netns", "del", ns], capture_output=True)
    subprocess.run(["ip", "netns", "add", ns], check=True, timeout=30)
    etc = f"/etc/netns/{ns}"
    os.makedirs(etc, exist_ok=True)
    with open(f"{etc}/resolv.conf", "w") as f:
        f.write(f"nameserver 127.0.0.1\nsearch {DOMAIN}\noptions timeout:1 attempts:1\n")
    hostsdir = tmp_path / "hostsdir"
    hostsdir.mkdir()
    dnsmasq = None
    try:
        subprocess.run(["ip", "-n", ns, "link", "set", "lo", "up"], check=True, timeout=30)
        dnsmasq = subprocess.Popen(
            ["ip", "netns", "exec", ns, DNSMASQ, "--keep-in-foreground", "--no-resolv",
             "--no-hosts", "--no-negcache", "--listen-address=127.0.0.1", "--bind-interfaces",
             "--port=53", f"--local=/{DOMAIN}/", f"--hostsdir={hostsdir}", "--user=root",
             f"--pid-file={tmp_path}/dnsmasq.pid", "--log-facility=-", "--log-queries"],
            stdout=open(tmp_path / "dnsmasq.out", "wb"), stderr=subprocess.STDOUT,
            start_new_session=True)
        wait_for(lambda: subprocess.run(
            ["ip", "netns", "exec", ns, "getent", "hosts", "localhost"],
            capture_output=True).returncode == 0 or dnsmasq.poll() is not None, 10, "dnsmasq")
        assert dnsmasq.poll() is None, (tmp_path / "dnsmasq.out").read_text()
        yield ns, hostsdir
    finally:
        pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                              text=True).stdout.split()
        for pid in pids:
            subprocess.run(["kill", "-9", pid], capture_output=True)
        if dnsmasq is not None:
            dnsmasq.wait(timeout=10)
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        shutil.rmtree(etc, ignore_errors=True)


def pod(spawn, tmp_path, ns, index, args, env):
    """dgt-run as pod `index` of an Indexed Job: hostname train-<index>, an /etc/hosts with only
    its own name, JOB_COMPLETION_INDEX set."""
    hosts = tmp_path / f"hosts{index}"
    hosts.write_text(f"127.0.0.1 localhost\n"
                     f"127.0.0.1 train-{index}.{DOMAIN} train-{index}\n")
    script = (f'mount --bind {hosts} /etc/hosts && hostname train-{index} && '
              f'exec "$@"')
    cmd = ["ip", "netns", "exec", ns, "unshare", "--uts", "--mount", "sh", "-c", script, "sh",
           BIN / "dgt-run", *args]
    return spawn(cmd, name=f"pod{index}",
                 env=dgt_env(JOB_COMPLETION_INDEX=index, GLOO_SOCKET_IFNAME="lo", **env))


def test_index_zero_name_appears_late(spawn, tmp_path, dns_netns):
    ns, hostsdir = dns_netns
    args = ["--nnodes=2", "--nproc-per-node=1", "--join-timeout=60", "--stop-timeout=3",
            WORKERS / "allreduce_check.py"]
    # Without its own record in DNS, node rank 1 cannot find index 0 yet.
    one = pod(spawn, tmp_path, ns, 1, args, {})
    zero = pod(spawn, tmp_path, ns, 0, args, {})
    wait_for(lambda: "to resolve (10 s of 60 s" in one.stderr, 40,
             "node rank 1's first 'waiting' line")
    assert one.popen.poll() is None, one.stderr
    time.sleep(2)
    published = datetime.datetime.now()
    (hostsdir / "train-0").write_text(f"127.0.0.1 train-0.{DOMAIN}\n")

    assert one.wait(120) == 0, one.stderr
    assert zero.wait(60) == 0, zero.stderr
    master = f"train-0.{DOMAIN}"
    assert (f"dgt-run: settings: nnodes=2 (--nnodes), node-rank=1 (JOB_COMPLETION_INDEX), "
            f"master-addr={master} (the pod's DNS name, index 0)") in one.stderr
    waits = re.findall(r"dgt-run: waiting for node rank 0's name \(--master-addr\) "
                       r"'([^']+)' to resolve \((\d+) s of 60 s, --join-timeout\): ", one.stderr)
    assert waits[0] == (master, "10"), one.stderr
    assert [int(s) for _, s in waits] == list(range(10, 10 * len(waits) + 1, 10))
    # Node rank 0 found its own name in its /etc/hosts at once.
    assert "waiting for" not in zero.stderr
    # Node rank 1 went on within a few lookups (one a second) of the name's appearance.
    found = re.search(r"^\[([0-9-]+ [0-9:.]+)\] \[info\] dgt-run: static rendezvous: node rank 1 "
                      r"of 2, store at 127\.0\.0\.1:29500$", one.stderr, re.M)
    assert found, one.stderr
    went_on = datetime.datetime.strptime(found.group(1), "%Y-%m-%d %H:%M:%S.%f")
    assert datetime.timedelta(0) <= went_on - published < datetime.timedelta(seconds=5), (
        went_on, published)
    for p, rank in ((zero, 0), (one, 1)):
        (r,) = records(p.stdout)
        assert r["rank"] == rank and r["world_size"] == 2 and r["sum"] == 1
        assert r["ranks"] == [0, 1]
        assert r["env"]["MASTER_ADDR"] == "127.0.0.1"
        assert r["env"]["NODE_RANK"] == str(rank)
    queries = (tmp_path / "dnsmasq.out").read_text()
    assert f"query[A] {master}" in queries


def test_name_that_never_appears_ends_at_the_join_timeout(spawn, tmp_path, dns_netns):
    ns, _ = dns_netns
    one = pod(spawn, tmp_path, ns, 1, ["--nnodes=2", "--join-timeout=3",
                                       WORKERS / "allreduce_check.py"], {})
    assert one.wait(60) == 69, one.stderr
    last = one.stderr.strip().splitlines()[-1]
    assert last.startswith(f"dgt-run: error: node rank 0's name (--master-addr) "
                           f"'train-0.{DOMAIN}' did not resolve within 3 s (--join-timeout): "), last
