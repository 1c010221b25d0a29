"""Operating the rendezvous service: dgt status, bearer tokens, TLS, Prometheus metrics."""
import json
import os
import re
import signal
import socket
import subprocess
import time
import urllib.request

from conftest import BIN, WORKERS, records, wait_for

SCRIPT = WORKERS / "print_env.py"


def start_rendezvous(spawn, *args, name="rdzv"):
    p = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", *args], name=name)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = re.search(r"listening on port (\d+)", p.stdout)
        if m and ("--metrics-listen" not in args or "metrics on port" in p.stdout):
            return p, f"127.0.0.1:{m.group(1)}"
        assert p.popen.poll() is None, p.stderr
        time.sleep(0.05)
    raise AssertionError("dgt-rendezvous did not start")


def test_status_lists_runs_nodes_and_ranks(spawn, rendezvous):
    waiting = spawn([BIN / "dgt-run", "--nnodes=2", f"--rdzv-endpoint={rendezvous}",
                     "--rdzv-id=ops", "--node-id=node-a", "--join-timeout=30", SCRIPT])
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        out = subprocess.run([BIN / "dgt", "status", f"--rdzv-endpoint={rendezvous}", "--json"],
                             capture_output=True, text=True, timeout=20)
        if out.returncode == 0 and json.loads(out.stdout).get("runs"):
            break
        time.sleep(0.2)
    status = json.loads(out.stdout)
    assert len(status["runs"]) == 1
    run = status["runs"][0]
    assert run["run_id"] == "ops"
    assert run["state"] == "gathering"
    assert run["round"] == -1  # a number, not proto3 JSON's int64 string
    assert run["min_nodes"] == 2 and run["max_nodes"] == 2
    assert [n["node_id"] for n in run["nodes"]] == ["node-a"]
    assert run["nodes"][0]["node_rank"] == -1
    text = subprocess.run([BIN / "dgt", "status", f"--rdzv-endpoint={rendezvous}",
                           "--rdzv-id=ops"], capture_output=True, text=True, timeout=20)
    assert text.returncode == 0
    assert text.stdout.startswith("run ops: gathering, round -1, restarts 0, nodes 1 (min 2, "
                                  "max 2), world size 0\n")
    assert re.search(r"^  waiting\s+node-a\s+127\.0\.0\.1\s+1 \d+\.\d s ago$", text.stdout,
                     re.M), text.stdout
    missing = subprocess.run([BIN / "dgt", "status", f"--rdzv-endpoint={rendezvous}",
                              "--rdzv-id=nope"], capture_output=True, text=True, timeout=20)
    assert missing.returncode == 1
    assert missing.stderr.strip() == f"dgt status: run 'nope' is not known to {rendezvous}"
    assert waiting.popen.poll() is None


def test_bearer_token_is_required(spawn, tmp_path):
    token = tmp_path / "token"
    token.write_text("s3cret\n")
    _, endpoint = start_rendezvous(spawn, "--token-file", str(token))
    refused = spawn([BIN / "dgt-run", "--nnodes=1", f"--rdzv-endpoint={endpoint}",
                     "--rdzv-id=tok", SCRIPT], name="refused")
    assert refused.wait(timeout=30) == 77  # kExitNotAdmitted: refused, retrying will not help
    assert "missing or wrong bearer token" in refused.stderr.strip().splitlines()[-1]
    ok = spawn([BIN / "dgt-run", "--nnodes=1", f"--rdzv-endpoint={endpoint}", "--rdzv-id=tok",
                f"--rdzv-token-file={token}", SCRIPT], name="ok")
    assert ok.wait(timeout=60) == 0, ok.stderr
    status = subprocess.run([BIN / "dgt", "status", f"--rdzv-endpoint={endpoint}"],
                            capture_output=True, text=True, timeout=20)
    assert status.returncode == 77 and "missing or wrong bearer token" in status.stderr


def make_certs(d):
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, timeout=60)
    run("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "1", "-subj", "/CN=dgt-test-ca",
        "-keyout", str(d / "ca.key"), "-out", str(d / "ca.pem"))
    run("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1",
        "-keyout", str(d / "server.key"), "-out", str(d / "server.csr"))
    (d / "san.ext").write_text("subjectAltName=IP:127.0.0.1\n")
    run("x509", "-req", "-in", str(d / "server.csr"), "-CA", str(d / "ca.pem"), "-CAkey",
        str(d / "ca.key"), "-CAcreateserial", "-days", "1", "-extfile", str(d / "san.ext"),
        "-out", str(d / "server.pem"))


def test_tls_job_and_plaintext_client_refused(spawn, tmp_path):
    make_certs(tmp_path)
    _, endpoint = start_rendezvous(spawn, "--tls-cert", str(tmp_path / "server.pem"),
                                   "--tls-key", str(tmp_path / "server.key"))
    ok = spawn([BIN / "dgt-run", "--nnodes=1", f"--rdzv-endpoint={endpoint}", "--rdzv-id=tls",
                f"--rdzv-tls-ca={tmp_path / 'ca.pem'}", SCRIPT], name="tls")
    assert ok.wait(timeout=60) == 0, ok.stderr
    plain = spawn([BIN / "dgt-run", "--nnodes=1", f"--rdzv-endpoint={endpoint}",
                   "--rdzv-id=plain", "--rdzv-connect-timeout=2", SCRIPT], name="plain")
    assert plain.wait(timeout=30) == 77  # kExitNotAdmitted: TLS settings disagree
    # Something answered: not "is dgt-rendezvous running there?" but the flag that is missing.
    assert plain.stderr.strip().splitlines()[-1] == (
        f"dgt-run: error: the rendezvous service at {endpoint} closed the connection during the "
        "handshake: if it serves TLS, pass --rdzv-tls-ca (and --rdzv-tls-cert and --rdzv-tls-key "
        "for mutual TLS)")


def test_metrics_endpoint(spawn, tmp_path):
    p, endpoint = start_rendezvous(spawn, "--metrics-listen", "127.0.0.1:0")
    metrics_port = re.search(r"metrics on port (\d+)", p.stdout).group(1)
    job = spawn([BIN / "dgt-run", "--nnodes=1", f"--rdzv-endpoint={endpoint}", "--rdzv-id=m",
                 SCRIPT], name="job")
    assert job.wait(timeout=60) == 0, job.stderr
    body = urllib.request.urlopen(f"http://127.0.0.1:{metrics_port}/metrics", timeout=10).read()
    text = body.decode()
    assert "\ndgt_rendezvous_joins_total 1\n" in text
    assert "\ndgt_rendezvous_runs_succeeded_total 1\n" in text
    assert 'dgt_rendezvous_runs{state="closed"} 1' in text


def free_loopback_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_first_agent_hosts_the_rendezvous_c10d_style(spawn):
    # No dgt-rendezvous: --rdzv-endpoint names this host and nothing listens there, so the first
    # agent to bind the port hosts the service and the other joins it.
    endpoint = f"127.0.0.1:{free_loopback_port()}"
    agents = [spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=1",
                     f"--rdzv-endpoint={endpoint}", "--rdzv-id=hosted", f"--node-id=node-{i}",
                     "--rdzv-backend=c10d", WORKERS / "elastic_worker.py", "--steps", "3"],
                    name=f"node-{i}") for i in range(2)]
    for a in agents:
        assert a.wait(timeout=120) == 0, a.stderr
    hosting = f"hosting the rendezvous service on {endpoint}"
    assert sorted(hosting in a.stderr for a in agents) == [False, True]
    for a in agents:
        done = [r for r in records(a.stdout) if r["event"] == "done"]
        assert len(done) == 1, a.stdout
        assert done[0]["world_size"] == 2
        assert done[0]["env"]["GROUP_WORLD_SIZE"] == "2"


def test_kill_9_of_the_hosting_agent_stops_the_others(spawn):
    # c10d-style: the service (and node rank 0's store) die with the hosting agent; the other
    # agent is told by its assignment who hosts, stops its workers and fails at once instead of
    # keeping workers that wait on a dead store.
    endpoint = f"127.0.0.1:{free_loopback_port()}"
    agents = [spawn([BIN / "dgt-run", "--nnodes=2", "--nproc-per-node=1",
                     f"--rdzv-endpoint={endpoint}", "--rdzv-id=hosted-kill",
                     f"--node-id=node-{i}", "--stop-timeout=5", WORKERS / "flaky.py",
                     "--fail-rank=-1", "--hold=60"], name=f"node-{i}") for i in range(2)]
    wait_for(lambda: all(" start" in a.stdout for a in agents), 60, "both workers to start")
    hosting = f"hosting the rendezvous service on {endpoint}"
    host = 0 if hosting in agents[0].stderr else 1
    assert hosting in agents[host].stderr
    other = agents[1 - host]
    os.kill(agents[host].popen.pid, signal.SIGKILL)
    start = time.monotonic()
    assert other.wait(timeout=30) == 69  # kExitRendezvousUnavailable: the hosting node is gone
    assert time.monotonic() - start < 10
    assert (f"lost the rendezvous service at {endpoint} hosted by node 'node-{host}' "
            "(c10d-style), so that node is gone") in other.stderr, other.stderr


def test_is_host_1_where_a_service_already_listens_is_refused(spawn, rendezvous):
    p = spawn([BIN / "dgt-run", "--nnodes=2", f"--rdzv-endpoint={rendezvous}",
               "--rdzv-conf=is_host=1", SCRIPT])
    assert p.wait(timeout=30) == 1
    assert p.stderr.strip().splitlines()[-1] == (
        f"dgt-run: error: --rdzv-conf is_host=1, but {rendezvous} cannot be served here (not an "
        "address of this host, or the port is in use)")
