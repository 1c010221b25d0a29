"""Jobs on node daemons (docs/JOBS.md): dgt-rendezvous' Jobs service with `dgt submit /
jobs / job show / logs / cancel / nodes`, and a fake node daemon (build/tests/fake_node_daemon,
the daemon's side of Jobs.Register: python has no gRPC here). The fake daemon runs the job with a
real dgt-run, so the job's ranks come from the real rendezvous run (run id = job id)."""
import base64
import json
import re
import signal
import subprocess
import time

import pytest

from conftest import BIN, wait_for
from jobs_helpers import dgt
from test_rendezvous_etcd import etcd, etcdctl, free_port  # noqa: F401 (the etcd fixture)

FAKE_DAEMON = BIN.parent / "tests" / "fake_node_daemon"


def start_rendezvous(spawn, *flags):
    p = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0", *flags], name="rendezvous")
    wait_for(lambda: re.search(r"listening on port (\d+)", p.stdout) or p.popen.poll() is not None,
             10, "dgt-rendezvous to report its port")
    m = re.search(r"listening on port (\d+)", p.stdout)
    assert m, p.stderr
    return f"127.0.0.1:{m.group(1)}", p


def show(endpoint, job_id):
    out = dgt(endpoint, "job", "show", job_id, "--json")
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


class FakeDaemon:
    """fake_node_daemon: what the service sends is read from its stdout file, one JSON a line."""

    def __init__(self, tmp_path, endpoint, name, labels=(), index=0):
        self.out_path = tmp_path / f"daemon{index}-{name}.out"
        self._out = open(self.out_path, "wb")
        args = [FAKE_DAEMON, "--endpoint", endpoint, "--name", name]
        for label in labels:
            args += ["--label", label]
        self.popen = subprocess.Popen([str(a) for a in args], stdin=subprocess.PIPE,
                                      stdout=self._out, stderr=subprocess.STDOUT)

    def messages(self):
        return [json.loads(line) for line in self.out_path.read_text().splitlines()
                if line.startswith("{")]

    def wait_message(self, key, count=1, timeout=20):
        wait_for(lambda: len([m for m in self.messages() if key in m]) >= count, timeout,
                 f"message '{key}' #{count} from the service: {self.messages()}")
        return [m for m in self.messages() if key in m][count - 1][key]

    def send(self, message):
        self.popen.stdin.write((json.dumps(message) + "\n").encode())
        self.popen.stdin.flush()

    def close(self):
        if self.popen.poll() is None:
            self.popen.kill()
        self.popen.wait(timeout=10)
        self._out.close()


@pytest.fixture
def daemons(tmp_path):
    started = []

    def make(endpoint, name, labels=()):
        d = FakeDaemon(tmp_path, endpoint, name, labels, index=len(started))
        started.append(d)
        return d

    yield make
    for d in started:
        d.close()


def test_submit_queue_start_show_logs_cancel(spawn, daemons, tmp_path):
    endpoint, _ = start_rendezvous(spawn, "--allow-unauthenticated-submit")
    job = tmp_path / "job.yaml"
    job.write_text("name: hello\n"
                   "command: echo rank $RANK of $WORLD_SIZE\n"
                   "instance_count: 1\n"
                   "distribution: {process_count_per_instance: 2}\n"
                   "environment_variables: {GREETING: hi}\n"
                   "node_labels: {pool: a}\n")
    sub = dgt(endpoint, "submit", job)
    assert sub.returncode == 0, sub.stderr
    assert sub.stdout == "job-1\n"
    info = show(endpoint, "job-1")
    assert info["state"] == "queued"
    assert info["reason"] == "needs 1 idle node with labels {pool=a}; 0 match"

    # A node without the label does not take it; one with it does, and gets the exact spec.
    other = daemons(endpoint, "b-other", ["pool=b"])
    assert other.wait_message("registered") == {"node_name": "b-other"}
    a = daemons(endpoint, "a", ["pool=a"])
    assert a.wait_message("registered") == {"node_name": "a"}
    start = a.wait_message("start")
    started = start.pop("started_unix_s")  # When it was placed: JobInfo.started_unix_s.
    assert start == {
        "job_id": "job-1",
        "rdzv_endpoint": endpoint,
        "spec": {"name": "hello", "command": "echo rank $RANK of $WORLD_SIZE",
                 "instance_count": 1, "distribution": {"process_count_per_instance": 2},
                 "environment_variables": {"GREETING": "hi"}, "node_labels": {"pool": "a"}},
        # What a restarted service adopts the job from (NodeHello.running_jobs).
        "uid": info["uid"],
        "job_nodes": ["a"],
        "submitted_unix_s": info["submitted_unix_s"],
    }
    assert re.fullmatch(r"[0-9a-f]{32}", info["uid"]), info
    assert "start" not in str(other.messages())
    # A second daemon with a registered name is refused.
    dup = daemons(endpoint, "a", ["pool=a"])
    dup.popen.stdin.close()
    wait_for(lambda: dup.messages(), 20, "the duplicate daemon's stream to end")
    assert dup.messages() == [{"status": 6, "message": "node 'a' is already registered (another "
                                                       "daemon holds the name)"}]
    assert show(endpoint, "job-1")["state"] == "starting"
    nodes = dgt(endpoint, "nodes")
    assert nodes.returncode == 0, nodes.stderr
    assert re.search(r"^a\s+busy\s+job-1\s+0\s+pool=a\s", nodes.stdout, re.M), nodes.stdout
    assert re.search(r"^b-other\s+idle\s+-\s+0\s+pool=b\s", nodes.stdout, re.M), nodes.stdout

    # The daemon's part, as dgt-agent does it: dgt-run for the job's run (run id = job id).
    run = spawn([BIN / "dgt-run", "--nnodes=1", "--nproc-per-node=2",
                 f"--rdzv-endpoint={start['rdzv_endpoint']}", "--rdzv-id=job-1", "--node-id=a",
                 "--no-python", "--", "/bin/sh", "-c", start["spec"]["command"]], name="dgt-run")
    a.send({"update": {"job_id": "job-1", "event": "started"}})
    assert run.wait(60) == 0, run.stderr
    # The exit is reported at once: the service reads the run's ranks then (and once after the job
    # ended), not only on its 1 s poll, so a job this short has them.
    a.send({"update": {"job_id": "job-1", "event": "exited", "exit_code": 0}})
    wait_for(lambda: show(endpoint, "job-1")["state"] == "succeeded", 10, "job-1 to succeed")
    info = show(endpoint, "job-1")
    assert info["nodes"] == [{"node_name": "a", "node_rank": 0, "first_rank": 0, "exit_code": 0,
                             "taken_by_spare": False, "lost_without_ranks": False}]
    assert info["restarts"] == 0 and info["reason"] == ""
    assert info["finished_unix_s"] >= info["started_unix_s"] >= info["submitted_unix_s"] > 0
    assert info["started_unix_s"] == started
    text = dgt(endpoint, "job", "show", "job-1")
    assert text.stdout.splitlines()[0] == "job job-1 (hello): succeeded"
    assert re.search(r"^  a\s+0\s+0-1\s+0$", text.stdout, re.M), text.stdout

    # Logs: the service asks the node holding rank 1 (local rank 1) and forwards its answer.
    logs = subprocess.Popen([BIN / "dgt", "logs", "job-1", "--rank", "1",
                             f"--rdzv-endpoint={endpoint}"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    try:
        read = a.wait_message("read_log")
        assert {k: v for k, v in read.items() if k != "request_id"} == {
            "job_id": "job-1", "local_rank": 1, "stream": "stdout", "max_bytes": "1048576"}
        a.send({"log": {"request_id": read["request_id"],
                        "data": base64.b64encode(b"rank 1 of 2\n").decode(), "next_offset": 12,
                        "eof": True}})
        out, err = logs.communicate(timeout=20)
    finally:
        if logs.poll() is None:
            logs.kill()
    assert logs.returncode == 0, err
    assert out == "rank 1 of 2\n"
    unknown_rank = dgt(endpoint, "logs", "job-1", "--rank", "5")
    assert unknown_rank.returncode == 1
    assert unknown_rank.stderr == "dgt logs: error: job 'job-1' has no rank 5 (ranks: 0 to 1)\n"

    # Cancel a running job: the node gets CancelJob with the grace; the job is cancelled.
    job2 = tmp_path / "sleep.yaml"
    job2.write_text("command: sleep 600\ninstance_count: 1\n")
    assert dgt(endpoint, "submit", job2).stdout == "job-2\n"
    assert a.wait_message("start", count=2)["job_id"] == "job-2"
    a.send({"update": {"job_id": "job-2", "event": "started"}})
    wait_for(lambda: show(endpoint, "job-2")["state"] == "running", 10, "job-2 to run")
    cancel = dgt(endpoint, "cancel", "job-2", "--grace", "2")
    assert cancel.returncode == 0, cancel.stderr
    assert cancel.stdout == "job-2: cancelled\n"
    assert a.wait_message("cancel") == {"job_id": "job-2", "grace_s": 2}
    a.send({"update": {"job_id": "job-2", "event": "exited", "exit_code": 143}})
    wait_for(lambda: show(endpoint, "job-2")["finished_unix_s"] > 0, 10, "job-2 to finish")
    info = show(endpoint, "job-2")
    assert info["state"] == "cancelled" and info["reason"] == "cancelled"
    assert info["nodes"][0]["exit_code"] == 143
    again = dgt(endpoint, "cancel", "job-2")
    assert again.returncode == 1
    assert again.stderr == "dgt cancel: error: job 'job-2' already finished: cancelled\n"
    missing = dgt(endpoint, "job", "show", "job-9")
    assert (missing.returncode, missing.stderr) == (1, "dgt job show: error: no job 'job-9'\n")
    listing = dgt(endpoint, "jobs")
    assert [line.split()[:2] for line in listing.stdout.splitlines()[1:]] == [
        ["job-1", "succeeded"], ["job-2", "cancelled"]]

    # A broken stream deregisters the node.
    a.close()
    wait_for(lambda: "a " not in dgt(endpoint, "nodes").stdout, 10, "node a to deregister")


def test_logs_follow_waits_for_the_rank_and_outlives_a_service_restart(spawn, daemons, tmp_path):
    """`dgt logs --follow` before the job's ranks are known waits (the job ending ends it), and a
    service that stops is retried for --timeout: one back on the same port answers."""
    port = free_port()
    endpoint = f"127.0.0.1:{port}"
    flags = ("--listen", endpoint, "--allow-unauthenticated-submit")
    rdzv = spawn([BIN / "dgt-rendezvous", *flags], name="rendezvous1")
    wait_for(lambda: "listening on port" in rdzv.stdout or rdzv.popen.poll() is not None, 10,
             "dgt-rendezvous to listen")
    queued = tmp_path / "queued.yaml"
    queued.write_text("command: 'true'\ninstance_count: 1\nnode_labels: {pool: none}\n")
    assert dgt(endpoint, "submit", queued).stdout == "job-1\n"
    now = dgt(endpoint, "logs", "job-1")
    assert (now.returncode, now.stderr) == (
        1, "dgt logs: error: job 'job-1' has no rank 0 (it has not started)\n")

    def follow(job_id, *args):
        return subprocess.Popen([BIN / "dgt", "logs", job_id, "--follow", *args,
                                 f"--rdzv-endpoint={endpoint}"], stdout=subprocess.PIPE,
                                stderr=subprocess.PIPE, text=True)

    waiting = follow("job-1")
    try:
        time.sleep(1.5)
        assert waiting.poll() is None  # Still waiting for the job to start.
        assert dgt(endpoint, "cancel", "job-1").returncode == 0
        out, err = waiting.communicate(timeout=20)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert (waiting.returncode, out, err) == (
        1, "", "dgt logs: error: job 'job-1' has no rank 0 (it never started)\n")

    # job-2 runs on node a; its ranks stay unknown (no dgt-run here): --follow waits. The service
    # stops (SIGTERM) and comes back on the same port within --timeout (memory backend: without
    # job-2): the follow's next read gets the new service's answer.
    a = daemons(endpoint, "a")
    running = tmp_path / "running.yaml"
    running.write_text("command: sleep 600\ninstance_count: 1\n")
    assert dgt(endpoint, "submit", running).stdout == "job-2\n"
    assert a.wait_message("start")["job_id"] == "job-2"
    a.send({"update": {"job_id": "job-2", "event": "started"}})
    waiting = follow("job-2", "--timeout", "20")
    try:
        time.sleep(1)
        rdzv.popen.send_signal(signal.SIGTERM)
        rdzv.popen.wait(timeout=10)
        time.sleep(1)
        assert waiting.poll() is None  # Retrying.
        rdzv = spawn([BIN / "dgt-rendezvous", *flags], name="rendezvous2")
        out, err = waiting.communicate(timeout=30)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert (waiting.returncode, out, err) == (1, "", "dgt logs: error: no job 'job-2'\n")

    # Stopped for good: --follow gives up after --timeout with 69, naming the service.
    assert dgt(endpoint, "submit", running).stdout == "job-1\n"
    waiting = follow("job-1", "--timeout", "2")
    try:
        time.sleep(1)
        rdzv.popen.send_signal(signal.SIGTERM)
        rdzv.popen.wait(timeout=10)
        out, err = waiting.communicate(timeout=30)
    finally:
        if waiting.poll() is None:
            waiting.kill()
    assert waiting.returncode == 69, err
    assert err.startswith(
        f"dgt logs: error: no jobs service answered at {endpoint} within 2s: "), err


def test_spec_errors_and_submit_tokens(spawn, tmp_path):
    bad = tmp_path / "bad.yaml"
    cases = {
        "command: x\ninstance_count: 2\ndistribution: {process_count_per_instance: 0}\n":
            "distribution.process_count_per_instance: must be >= 1, got 0",
        "command: x\ninstance_count: 0\n": "instance_count: must be >= 1, got 0",
        "instance_count: 1\n": "command: required (the shell command every worker process runs)",
        "command: x\ninstance_count: 1\ndistrbution: {}\n":
            "distrbution: unknown key (known: name, command, code_dir, environment_variables, "
            "instance_count, distribution, max_restarts, restart_policy, node_labels, "
            "spare_instances)",
        "command: x\ninstance_count: two\n": "instance_count: must be an integer, got 'two'",
        # One past int32: the key's own range.
        "command: x\ninstance_count: 2147483648\n":
            "instance_count: must be >= 1 and <= 100000, got 2147483648",
        # YAML's "\0" is a NUL byte: refused, naming the key (it would cut the command short).
        'command: "echo \\0 nul"\ninstance_count: 1\n':
            "command: must not contain a NUL byte (found at byte 5)",
        'command: x\ninstance_count: 1\nenvironment_variables: {SEED: "7\\0"}\n':
            "environment_variables.SEED: must not contain a NUL byte (found at byte 1)",
    }
    # Saved as UTF-16 (with its byte-order mark): named, not decoded into nonsense.
    utf16 = tmp_path / "utf16.yaml"
    utf16.write_bytes("command: x\ninstance_count: 1\n".encode("utf-16"))
    out = dgt("127.0.0.1:1", "submit", utf16)
    assert (out.returncode, out.stdout) == (2, "")
    assert out.stderr == (f"dgt submit: error: {utf16}: not UTF-8: the file starts with a UTF-16 "
                          "little-endian byte-order mark (FF FE); save it as UTF-8\n")
    # A raw NUL byte (yaml-cpp would read "\0n" as a newline) and Latin-1 text (protobuf cannot
    # send it) are refused by line and column before anything is sent.
    for data, error in (
            (b"command: echo raw\0nul\ninstance_count: 1\n",
             "line 1, column 18 (byte 17): a NUL byte; a job file must not contain one"),
            (b"command: echo caf\xe9\ninstance_count: 1\n",
             "not UTF-8: byte 0xE9 at line 1, column 18 (byte 17); a job file must be UTF-8")):
        bad.write_bytes(data)
        out = dgt("127.0.0.1:1", "submit", bad)
        assert (out.returncode, out.stdout) == (2, ""), data
        assert out.stderr == f"dgt submit: error: {bad}: {error}\n"
    for text, error in cases.items():
        bad.write_text(text)
        # Validated before any service is asked: no service listens on port 1.
        out = dgt("127.0.0.1:1", "submit", bad)
        assert (out.returncode, out.stdout) == (2, ""), text
        assert out.stderr == f"dgt submit: error: {bad}: {error}\n"
    missing = dgt("127.0.0.1:1", "submit", tmp_path / "nope.yaml")
    assert missing.returncode == 2
    assert missing.stderr.startswith(f"dgt submit: error: cannot read the job file "
                                     f"{tmp_path / 'nope.yaml'}: ")
    # A directory is refused by name; /dev/zero is read up to 1 MiB, not until memory runs out.
    for path, error in ((tmp_path, f"{tmp_path}: is a directory, not a job file"),
                        ("/dev/zero",
                         "/dev/zero: larger than 1048576 bytes, the limit of a job file")):
        out = dgt("127.0.0.1:1", "submit", path)
        assert (out.returncode, out.stdout, out.stderr) == (2, "", f"dgt submit: error: {error}\n")

    good = tmp_path / "good.yaml"
    good.write_text("command: 'true'\ninstance_count: 1\n")
    # Without --submit-token-file (and without --allow-unauthenticated-submit) submission is off.
    off, _ = start_rendezvous(spawn)
    out = dgt(off, "submit", good)
    assert out.returncode == 77
    assert out.stderr == (f"dgt submit: error: the jobs service at {off} refused: job submission "
                          "is off: start dgt-rendezvous with --submit-token-file\n")
    assert dgt(off, "jobs").stdout == "no jobs\n"  # Reads need no token then.

    token = tmp_path / "submit.token"
    token.write_text("s3cret\n")
    wrong = tmp_path / "wrong.token"
    wrong.write_text("nope\n")
    guarded, _ = start_rendezvous(spawn, "--submit-token-file", token)
    for args in ([], ["--token-file", wrong]):
        out = dgt(guarded, "submit", good, *args)
        assert out.returncode == 77
        assert out.stderr == (f"dgt submit: error: the jobs service at {guarded} refused: "
                              "missing or wrong submit token\n")
    assert dgt(guarded, "jobs").returncode == 77
    out = dgt(guarded, "submit", good, "--token-file", token)
    assert (out.returncode, out.stdout) == (0, "job-1\n"), out.stderr
    listing = dgt(guarded, "jobs", "--token-file", token)
    assert listing.stdout.splitlines()[1].split()[:2] == ["job-1", "queued"]
    # Unreachable: exit 69.
    out = dgt("127.0.0.1:1", "jobs", "--timeout", "2")
    assert out.returncode == 69
    assert out.stderr.startswith("dgt jobs: error: no jobs service answered at 127.0.0.1:1 "
                                 "within 2s")


def test_queue_survives_a_restart_with_etcd(spawn, etcd, tmp_path):  # noqa: F811
    flags = ["--backend=etcd", f"--etcd-endpoints={etcd}", "--allow-unauthenticated-submit"]
    endpoint, first = start_rendezvous(spawn, *flags)
    job = tmp_path / "job.yaml"
    job.write_text("command: 'true'\ninstance_count: 2\n")
    assert dgt(endpoint, "submit", job).stdout == "job-1\n"
    record = etcdctl(etcd, "get", "/dgt/jobs/job/job-1", "--print-value-only")
    assert record.returncode == 0, record.stderr
    value = json.loads(record.stdout)
    assert value["version"] == 1
    assert value["job"]["job_id"] == "job-1" and value["job"]["state"] == "queued"
    first.popen.terminate()
    assert first.wait(20) == 0
    endpoint, _ = start_rendezvous(spawn, *flags)
    info = show(endpoint, "job-1")
    assert info["state"] == "queued"
    assert info["reason"] == "needs 2 idle nodes; 0 match"
    assert dgt(endpoint, "submit", job).stdout == "job-2\n"
