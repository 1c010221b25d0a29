"""Two hosts in network namespaces this test creates (and removes): a silently cut node.

Host A (10.231.<n>.1) runs dgt-rendezvous and one agent; host B (10.231.<n>.2) runs the other
agent of a --nnodes=1:2 job. iptables DROP on B cuts it without FIN or RST; the service notices
through gRPC keepalive (1 s pings, 2 s timeout) and gives A a new round of one node, whose job
then completes. Needs root, ip and iptables; skipped otherwise.
"""
import os
import re
import shutil
import subprocess
import time

import pytest

from conftest import BIN, WORKERS, dgt_env, records, wait_for

WORKER = WORKERS / "elastic_worker.py"

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not shutil.which("ip") or not shutil.which("iptables"),
    reason="needs root, iproute2 and iptables")


def sh(*args):
    subprocess.run(args, check=True, capture_output=True, timeout=30)


@pytest.fixture
def two_hosts():
    n = os.getpid() % 200 + 20
    a, b = f"dgtA{n}", f"dgtB{n}"
    subnet = f"10.231.{n}"
    for ns in (a, b):
        subprocess.run(["ip", "netns", "del", ns], capture_output=True)
        sh("ip", "netns", "add", ns)
        sh("ip", "-n", ns, "link", "set", "lo", "up")
    sh("ip", "link", "add", f"va{n}", "netns", a, "type", "veth", "peer", "name", f"vb{n}",
       "netns", b)
    sh("ip", "-n", a, "addr", "add", f"{subnet}.1/24", "dev", f"va{n}")
    sh("ip", "-n", b, "addr", "add", f"{subnet}.2/24", "dev", f"vb{n}")
    sh("ip", "-n", a, "link", "set", f"va{n}", "up")
    sh("ip", "-n", b, "link", "set", f"vb{n}", "up")
    try:
        yield {"a": (a, f"{subnet}.1", f"va{n}"), "b": (b, f"{subnet}.2", f"vb{n}")}
    finally:
        for ns in (a, b):
            subprocess.run(["ip", "netns", "pids", ns], capture_output=True)
            pids = subprocess.run(["ip", "netns", "pids", ns], capture_output=True,
                                  text=True).stdout.split()
            for pid in pids:
                subprocess.run(["kill", "-9", pid], capture_output=True)
            subprocess.run(["ip", "netns", "del", ns], capture_output=True)






def test_silently_cut_node_is_noticed_by_keepalive(spawn, two_hosts):
    ns_a, ip_a, if_a = two_hosts["a"]
    ns_b, ip_b, if_b = two_hosts["b"]
    rdzv = spawn(["ip", "netns", "exec", ns_a, BIN / "dgt-rendezvous", "--listen", f"{ip_a}:0"],
                 name="rdzv")
    wait_for(lambda: "listening on port" in rdzv.stdout, 10, "dgt-rendezvous")
    port = re.search(r"listening on port (\d+)", rdzv.stdout).group(1)

    def agent(ns, ifname, node_id):
        env = dgt_env(GLOO_SOCKET_IFNAME=ifname)
        return spawn(["ip", "netns", "exec", ns, BIN / "dgt-run", "--nnodes=1:2",
                      "--nproc-per-node=1", f"--rdzv-endpoint={ip_a}:{port}",
                      "--rdzv-id=netns", f"--node-id={node_id}",
                      "--rdzv-conf=last_call_timeout=30", "--stop-timeout=3", WORKER,
                      "--wait-world-size", "2", "--steps", "3"], name=node_id, env=env)

    a = agent(ns_a, if_a, "node-a")
    b = agent(ns_b, if_b, "node-b")
    wait_for(lambda: all(any(r.get("env", {}).get("WORLD_SIZE") == "2"
                             for r in records(p.stdout)) for p in (a, b)),
             120, "a round of two nodes across the namespaces")
    start = [r for r in records(b.stdout) if r["event"] == "start"][0]
    assert start["env"]["MASTER_ADDR"] == ip_a  # Node rank 0's routable address.

    cut_at = time.monotonic()
    for chain in ("INPUT", "OUTPUT"):
        sh("ip", "netns", "exec", ns_b, "iptables", "-A", chain, "-j", "DROP")
    wait_for(lambda: "round 1 (node lost: node node-b" in a.stderr, 30,
             "the service to notice the cut node and start a new round")
    noticed = time.monotonic() - cut_at
    print(f"netns: cut noticed and new round started after {noticed:.2f} s")
    assert a.wait(timeout=120) == 0, a.stderr
    done = [r for r in records(a.stdout) if r["event"] == "done"]
    assert len(done) == 1 and done[0]["world_size"] == 1
    # gRPC keepalive: 1 s between pings, 2 s to answer; allow for scheduling on a busy machine.
    assert noticed < 8, f"cut noticed after {noticed:.1f} s"
