"""Jobs on two dgt-rendezvous --backend=etcd replicas (docs/JOBS.md, "Replicas"):
one real dgt-agent with both endpoints runs a job with a real dgt-run; the leader is SIGKILLed
while the job runs -> the other replica leads, the daemon registers there listing the job, and the
job completes there: `dgt job show` from the new leader says succeeded with the node's exit code
0. Before that, `dgt submit` given only the standby exits 69 naming the leader. Skips without
Debian's etcd except under CI=true (test_rendezvous_etcd.need_etcd)."""
import getpass
import re
import time

from conftest import BIN
from jobs_helpers import dgt, logs, show
from jobs_helpers import poll as wait_for
from test_rendezvous_etcd import etcd, free_port  # noqa: F401 (etcd: a fixture)

LEASE_S = 2


def test_a_job_completes_when_the_leader_is_killed(spawn, etcd, tmp_path):  # noqa: F811
    ports = [free_port(), free_port()]
    endpoints = ",".join(f"127.0.0.1:{p}" for p in ports)
    replicas = []
    for i, port in enumerate(ports):
        proc = spawn([BIN / "dgt-rendezvous", "--listen", f"127.0.0.1:{port}", "--backend=etcd",
                      f"--etcd-endpoints={etcd}", f"--replica-id=r{i + 1}",
                      f"--leader-lease-s={LEASE_S}", "--allow-unauthenticated-submit",
                      f"--advertise-endpoint={endpoints}"], name=f"r{i + 1}")
        assert wait_for(lambda: "listening on port" in proc.stdout or proc.popen.poll() is not None,
                        20), proc.stderr
        assert proc.popen.poll() is None, proc.stderr
        replicas.append(proc)
        if i == 0:  # r1 leads: the standby starts after it won.
            assert wait_for(lambda: "r1 leads" in logs(proc), 10), logs(proc)
    (tmp_path / "agent.yaml").write_text(
        f"rendezvous_endpoints: [{', '.join(repr(e) for e in endpoints.split(','))}]\n"
        f"node_name: n1\nrun_as_user: {getpass.getuser()}\nallow_root: true\n"
        f"work_dir: {tmp_path / 'jobs'}\ndgt_run: {BIN / 'dgt-run'}\nstop_grace_s: 5\n")
    agent = spawn([BIN / "dgt-agent", "--config", tmp_path / "agent.yaml"], name="agent")
    assert wait_for(lambda: "registered from" in logs(replicas[0]), 20), logs(agent)

    job = tmp_path / "job.yaml"
    job.write_text("command: sleep 8\ninstance_count: 1\n")
    # Only the standby listed: it answers at once, so the message says so and names the leader.
    standby = f"127.0.0.1:{ports[1]}"
    refused = dgt(standby, "submit", job)
    assert (refused.returncode, refused.stdout, refused.stderr) == (69, "", (
        f"dgt submit: error: no leading jobs service at {standby}: the last one asked is a "
        f"standby (dgt-rendezvous replica r2 is a standby; the leader is 127.0.0.1:{ports[0]}); "
        "is the leader's address in --rdzv-endpoint?\n")), refused.stderr
    submitted = dgt(endpoints, "submit", job)
    assert (submitted.returncode, submitted.stdout) == (0, "job-1\n"), submitted.stderr
    running = wait_for(lambda: (show(endpoints, "job-1") or {}).get("state") == "running", 30)
    assert running, (logs(replicas[0]), logs(agent))

    replicas[0].popen.kill()  # SIGKILL mid-job: its lease ends after the TTL.
    killed = time.monotonic()
    assert wait_for(lambda: "r2 leads" in logs(replicas[1]), LEASE_S + 3), logs(replicas[1])
    assert wait_for(lambda: "node 'n1' registered from" in logs(replicas[1]), 20), logs(agent)
    print(f"r2 led and n1 re-registered {time.monotonic() - killed:.2f} s after the kill")
    info = show(endpoints, "job-1")
    assert info["state"] == "running", info
    done = wait_for(lambda: (show(endpoints, "job-1") or {}).get("state") in
                    ("succeeded", "failed", "cancelled") and show(endpoints, "job-1"), 40)
    assert done, (logs(replicas[1]), logs(agent))
    assert done["state"] == "succeeded", (done, logs(replicas[1]), logs(agent))
    assert [(n["node_name"], n["exit_code"]) for n in done["nodes"]] == [("n1", 0)]
    listed = dgt(endpoints, "jobs")
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^job-1\s+succeeded", listed.stdout, re.M), listed.stdout
