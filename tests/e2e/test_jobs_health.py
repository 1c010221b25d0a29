"""Node health checks of dgt-agent (docs/OPERATIONS.md "dgt-agent", docs/JOBS.md "The
scheduler's rules"): a real dgt-agent whose health check is `test -e FILE`, run every 0.5 s,
registers unhealthy while FILE is missing. `dgt nodes` shows it with the reason, and a submitted
job stays queued, its reason naming the node. Once FILE exists the node is healthy again and the
job runs there and succeeds. The agent runs as the current user (allow_root: the CI runs as
root)."""
import getpass
import re
import time

from conftest import BIN
from jobs_helpers import dgt, logs, poll, show
from test_rendezvous_etcd import free_port

# `dgt nodes` gives a reason at most this many columns.
REASON_COLUMNS = 100


def test_an_unhealthy_node_takes_no_job_until_its_check_passes(spawn, tmp_path):
    endpoint = f"127.0.0.1:{free_port()}"
    rdzv = spawn([BIN / "dgt-rendezvous", "--listen", endpoint, "--allow-unauthenticated-submit"],
                 name="rendezvous")
    assert poll(lambda: "listening on port" in rdzv.stdout or rdzv.popen.poll() is not None,
                20), logs(rdzv)
    assert rdzv.popen.poll() is None, logs(rdzv)

    flag = tmp_path / "healthy"
    check = f"test -e {flag}"
    (tmp_path / "agent.yaml").write_text(
        f"rendezvous_endpoints: ['{endpoint}']\nnode_name: n1\nadvertise_address: 127.0.0.1\n"
        f"run_as_user: {getpass.getuser()}\nallow_root: true\nwork_dir: {tmp_path / 'jobs'}\n"
        f"dgt_run: {BIN / 'dgt-run'}\nstop_grace_s: 5\nwatchdog: false\n"
        f"health_checks: ['{check}']\nhealth_interval_s: 0.5\nhealth_check_timeout_s: 10\n")
    agent = spawn([BIN / "dgt-agent", "--config", tmp_path / "agent.yaml"], name="agent-n1")
    assert poll(lambda: "node 'n1' registered from" in logs(rdzv), 20), logs(rdzv) + logs(agent)
    reason = f"health check '{check}' failed: exited with code 1: (no output)"
    assert f"node unhealthy, it takes no new job: {reason}" in logs(agent), logs(agent)

    # `dgt nodes`: registered, idle, unhealthy with the reason (cut to the column's width).
    shown = reason if len(reason) <= REASON_COLUMNS else reason[:REASON_COLUMNS - 3] + "..."
    nodes = dgt(endpoint, "nodes")
    assert nodes.returncode == 0, nodes.stderr
    lines = nodes.stdout.splitlines()
    assert lines[0] == ("NODE                     STATE     JOB          GPUS LABELS               "
                        "REGISTERED   HEALTH")
    assert len(lines) == 2, nodes.stdout
    assert re.fullmatch(r"n1 {23}idle {6}- {12}\d+ +- {20}\d+ s ago +unhealthy " +
                        re.escape(shown), lines[1]), lines[1]

    # A job stays queued, its reason naming the node and why; rounds go on, it stays so.
    job = tmp_path / "job.yaml"
    job.write_text("name: after-health\ncommand: echo healthy-run\ninstance_count: 1\n"
                   "distribution: {process_count_per_instance: 1}\n")
    sub = dgt(endpoint, "submit", job)
    assert (sub.returncode, sub.stdout) == (0, "job-1\n"), sub.stderr
    pending = f"needs 1 idle node; 0 match; 1 of 1 registered node is unhealthy (n1: {reason})"
    info = show(endpoint, "job-1")
    assert (info["state"], info["reason"]) == ("queued", pending)
    time.sleep(1.5)  # Three more rounds, each failing.
    info = show(endpoint, "job-1")
    assert (info["state"], info["reason"]) == ("queued", pending)
    listing = dgt(endpoint, "jobs")
    assert listing.stdout.splitlines()[1].endswith(" " + pending), listing.stdout

    # The check passes: healthy again, the job runs on n1 and succeeds.
    flag.touch()
    info = poll(lambda: (i := show(endpoint, "job-1")) and i["state"] == "succeeded" and i, 60,
                0.2)
    assert info, (show(endpoint, "job-1"), logs(rdzv), logs(agent))
    assert info["reason"] == ""
    assert info["nodes"] == [{"node_name": "n1", "node_rank": 0, "first_rank": 0, "exit_code": 0,
                             "taken_by_spare": False, "lost_without_ranks": False}]
    assert "node healthy again (its health checks passed)" in logs(agent), logs(agent)
    assert "jobs: node 'n1' is healthy again" in logs(rdzv), logs(rdzv)
    out = dgt(endpoint, "logs", "job-1", "--rank", "0")
    assert (out.returncode, out.stdout) == (0, "healthy-run\n"), out.stderr
    nodes = dgt(endpoint, "nodes")
    assert re.fullmatch(r"n1 {23}idle {6}- {12}\d+ +- {20}\d+ s ago +ok",
                        nodes.stdout.splitlines()[1]), nodes.stdout
