"""A memory-backend dgt-rendezvous restarted while a job runs (docs/JOBS.md, "A restart
of the service"): two real dgt-agents on loopback run a 2-node x 2-process torch 2.13 gloo job;
dgt-rendezvous is SIGKILLed mid-job and started again on the same port. The daemons register
again listing the job with its StartJob, the service adopts it: the workers keep running (same
PIDs), the job ends `succeeded` with both nodes' exit code 0, and `dgt logs` gives each rank its
own output. The next job's id follows the adopted one; after a restart with nothing running the
ids start again at job-1, and the node moves the earlier job-1's dir aside (its uid differs)
instead of mixing two jobs' logs. The agents run as the current user (allow_root: the CI runs as
root), the job processes too."""
import getpass
import os
import re
import signal

from conftest import BIN, WORKERS
from jobs_helpers import dgt, logs, poll, show
from test_rendezvous_etcd import free_port

STEPS = 20


class Service:
    """dgt-rendezvous (memory backend, a submit token) on a fixed loopback port, restartable."""

    def __init__(self, spawn, tmp_path):
        self.spawn = spawn
        self.port = free_port()
        self.endpoint = f"127.0.0.1:{self.port}"
        self.token = tmp_path / "submit.token"
        self.token.write_text("restart-submit-token\n")
        self.token.chmod(0o600)
        self.starts = 0
        self.proc = None
        self.start()

    def start(self):
        self.starts += 1
        self.proc = self.spawn([BIN / "dgt-rendezvous", "--listen", self.endpoint,
                                "--submit-token-file", self.token], name=f"rdzv{self.starts}")
        assert poll(lambda: "listening on port" in self.proc.stdout or
                    self.proc.popen.poll() is not None, 20), logs(self.proc)
        assert self.proc.popen.poll() is None, logs(self.proc)

    def kill9(self):
        self.proc.popen.send_signal(signal.SIGKILL)
        self.proc.popen.wait(timeout=10)

    def wait_registered(self, nodes, timeout=20):
        assert poll(lambda: all(f"node '{n}' registered from" in logs(self.proc) for n in nodes),
                    timeout), logs(self.proc)

    def dgt(self, *args):
        return dgt(self.endpoint, *args, "--token-file", self.token)

    def show(self, job_id):
        return show(self.endpoint, job_id, "--token-file", self.token)

    def wait_state(self, job_id, states, timeout):
        info = poll(lambda: (i := self.show(job_id)) and i["state"] in states and i, timeout, 0.2)
        assert info, (job_id, self.show(job_id), logs(self.proc))
        return info

    def submit(self, path):
        out = self.dgt("submit", path)
        assert out.returncode == 0, out.stderr
        return out.stdout.strip()

    def log(self, job_id, rank):
        out = self.dgt("logs", job_id, "--rank", rank)
        assert out.returncode == 0, (job_id, rank, out.stderr)
        return out.stdout


def start_agents(spawn, service, tmp_path, names):
    """One dgt-agent per name (work dir <tmp_path>/<name>/jobs), registered; {name: process}."""
    agents = {}
    for n in names:
        (tmp_path / n).mkdir()
        (tmp_path / n / "agent.yaml").write_text(
            f"rendezvous_endpoints: ['{service.endpoint}']\nnode_name: {n}\n"
            f"advertise_address: 127.0.0.1\nrun_as_user: {getpass.getuser()}\nallow_root: true\n"
            f"work_dir: {tmp_path / n / 'jobs'}\ndgt_run: {BIN / 'dgt-run'}\nstop_grace_s: 5\n"
            "watchdog: false\n")
        agents[n] = spawn([BIN / "dgt-agent", "--config", tmp_path / n / "agent.yaml"],
                          name=f"agent-{n}")
    service.wait_registered(list(names))
    return agents


def submit_training(service, python2, tmp_path, steps, procs, extra=""):
    """Submits a 2-node job of jobs_restart_worker.py (`procs` per node, `steps` 1 s steps) and
    waits until every rank wrote its pid; returns the pid dir."""
    pids = tmp_path / "pids"
    pids.mkdir()
    job = tmp_path / "train.yaml"
    job.write_text(
        f"{extra}command: exec {python2} {WORKERS / 'jobs_restart_worker.py'} {pids} {steps}\n"
        "environment_variables: {GLOO_SOCKET_IFNAME: lo}\ninstance_count: 2\n"
        f"distribution: {{type: pytorch, process_count_per_instance: {procs}}}\n")
    assert service.submit(job) == "job-1"
    assert poll(lambda: all((pids / f"rank{r}.pid").exists() for r in range(2 * procs)), 60,
                0.2), (service.show("job-1"), logs(service.proc))
    return pids


def test_running_job_survives_a_service_restart(spawn, python2, tmp_path):
    service = Service(spawn, tmp_path)
    start_agents(spawn, service, tmp_path, ("n1", "n2"))
    work = {n: tmp_path / n / "jobs" for n in ("n1", "n2")}
    pids = submit_training(service, python2, tmp_path, STEPS, 2, "name: train\n")
    before = service.wait_state("job-1", {"running"}, 10)
    assert poll(lambda: all(n["first_rank"] >= 0 for n in service.show("job-1")["nodes"]), 10)
    worker_pids = {r: int((pids / f"rank{r}.pid").read_text()) for r in range(4)}
    uid = before["uid"]
    assert re.fullmatch(r"[0-9a-f]{32}", uid), before

    service.kill9()
    service.start()
    service.wait_registered(["n1", "n2"])
    adopted = service.show("job-1")
    assert adopted["state"] == "running", (adopted, logs(service.proc))
    assert adopted["uid"] == uid
    assert adopted["spec"]["name"] == "train"
    assert adopted["submitted_unix_s"] == before["submitted_unix_s"]
    assert adopted["started_unix_s"] == before["started_unix_s"] > 0
    assert adopted["reason"] in {f"adopted after a service restart (reported by node {n})"
                                 for n in ("n1", "n2")}, adopted
    assert sorted(n["node_name"] for n in adopted["nodes"]) == ["n1", "n2"]
    for pid in worker_pids.values():
        os.kill(pid, 0)  # Still there: raises ProcessLookupError otherwise.

    done = service.wait_state("job-1", {"succeeded", "failed", "cancelled"}, 60)
    assert done["state"] == "succeeded", (done, logs(service.proc))
    assert done["restarts"] == 0
    assert sorted((n["node_name"], n["exit_code"]) for n in done["nodes"]) == \
        [("n1", 0), ("n2", 0)]
    assert sorted(n["first_rank"] for n in done["nodes"]) == [0, 2]
    for r in range(4):
        lines = service.log("job-1", r).splitlines()
        assert lines == [f"rank {r} step {s} sum 10" for s in range(STEPS)] + \
            [f"rank {r} pid {worker_pids[r]} steps {STEPS} sum 10"], r

    # The next job's id follows the adopted one; its logs are its own.
    echo = tmp_path / "echo.yaml"
    echo.write_text("command: echo second rank $RANK\ninstance_count: 2\n"
                    "distribution: {process_count_per_instance: 2}\n")
    assert service.submit(echo) == "job-2"
    assert service.wait_state("job-2", {"succeeded", "failed"}, 30)["state"] == "succeeded"
    assert [service.log("job-2", r) for r in range(4)] == [f"second rank {r}\n" for r in range(4)]

    # A restart with nothing running forgets everything: ids start again at job-1. The nodes move
    # the earlier job-1's dir aside (another uid) rather than mixing the two jobs' logs.
    service.kill9()
    service.start()
    service.wait_registered(["n1", "n2"])
    assert service.show("job-1") is None
    echo.write_text(echo.read_text().replace("second", "third"))
    assert service.submit(echo) == "job-1"
    third = service.wait_state("job-1", {"succeeded", "failed"}, 30)
    assert third["state"] == "succeeded", third
    assert third["uid"] != uid
    assert [service.log("job-1", r) for r in range(4)] == [f"third rank {r}\n" for r in range(4)]
    for n in ("n1", "n2"):
        assert sorted(p.name for p in work[n].iterdir()) == ["job-1", f"job-1.{uid}.1", "job-2"]
        assert (work[n] / "job-1" / "job-uid").read_text() == third["uid"] + "\n"
        assert (work[n] / f"job-1.{uid}.1" / "job-uid").read_text() == uid + "\n"


def test_a_drained_nodes_part_goes_to_an_idle_node(spawn, python2, tmp_path):
    """SIGTERM to one dgt-agent mid-job drains it: its dgt-run stops (exit 143) while the run goes
    on. With a restart left the service starts that part on the idle third node (the run forms a
    new round with it) instead of leaving the job `running` for dgt-run's join timeout."""
    service = Service(spawn, tmp_path)
    agents = start_agents(spawn, service, tmp_path, ("n1", "n2", "n3"))
    submit_training(service, python2, tmp_path, 6, 1, "max_restarts: 1\n")
    assert sorted(n["node_name"] for n in service.show("job-1")["nodes"]) == ["n1", "n2"]

    agents["n2"].popen.send_signal(signal.SIGTERM)
    assert agents["n2"].popen.wait(timeout=30) == 0, logs(agents["n2"])
    moved = poll(lambda: (i := service.show("job-1")) and "replacing" in i["reason"] and i, 20, 0.1)
    assert moved, (service.show("job-1"), logs(service.proc))
    assert re.fullmatch(r"node n2: it drained: dgt-run exited with code 143: .*; "
                        r"replacing it \(restart 1 of 1\)", moved["reason"]), moved
    assert sorted(n["node_name"] for n in moved["nodes"]) == ["n1", "n3"]

    done = service.wait_state("job-1", {"succeeded", "failed", "cancelled"}, 90)
    assert done["state"] == "succeeded", (done, logs(service.proc))
    assert done["node_replacements"] == 1
    assert sorted((n["node_name"], n["exit_code"]) for n in done["nodes"]) == [("n1", 0), ("n3", 0)]
    for r in range(2):
        assert service.log("job-1", r).splitlines()[-1].startswith(f"rank {r} pid "), r


def test_a_spare_instance_takes_a_drained_nodes_part(spawn, python2, tmp_path):
    """A job with `spare_instances: 1` on three dgt-agents: two run it, the third waits in the run
    as a spare (`dgt job show`: node rank "spare"). SIGTERM to a running node's dgt-agent drains
    it (its dgt-run exits 143); the spare takes its node rank and ranks without a restart or a
    replacement, and the job succeeds with max_restarts 0."""
    service = Service(spawn, tmp_path)
    agents = start_agents(spawn, service, tmp_path, ("n1", "n2", "n3"))
    submit_training(service, python2, tmp_path, 8, 1, "spare_instances: 1\n")
    ranked = poll(lambda: (i := service.show("job-1")) and
                  sorted(n["node_rank"] for n in i["nodes"]) == [-1, 0, 1] and i, 20, 0.2)
    assert ranked, (service.show("job-1"), logs(service.proc))
    assert ranked["spec"]["spare_instances"] == 1
    by_rank = {n["node_rank"]: n["node_name"] for n in ranked["nodes"]}
    spare, lost = by_rank[-1], by_rank[1]
    listed = service.dgt("jobs")
    assert re.search(r"^job-1 +running +2\+1 x 1 ", listed.stdout, re.M), listed.stdout
    table = service.dgt("job", "show", "job-1").stdout
    assert re.search(rf"^  {spare} +spare +- +-$", table, re.M), table
    assert "spares 0 of 1 used" in table, table

    agents[lost].popen.send_signal(signal.SIGTERM)
    assert agents[lost].popen.wait(timeout=30) == 0, logs(agents[lost])
    taken = poll(lambda: (i := service.show("job-1")) and i["spares_used"] == 1 and i, 20, 0.1)
    assert taken, (service.show("job-1"), logs(service.proc))
    assert re.fullmatch(rf"node {lost}: it drained: dgt-run exited with code 143: .*; "
                        r"a spare takes its place \(spare 1 of 1 used\)", taken["reason"]), taken

    done = service.wait_state("job-1", {"succeeded", "failed", "cancelled"}, 90)
    assert done["state"] == "succeeded", (done, logs(service.proc))
    assert done["node_replacements"] == 0 and done["spares_used"] == 1, done
    nodes = {n["node_name"]: n for n in done["nodes"]}
    assert nodes[lost]["taken_by_spare"] is True and nodes[lost]["exit_code"] == 143, nodes
    assert nodes[spare]["exit_code"] == 0 and nodes[spare]["node_rank"] == 1, nodes
    assert nodes[by_rank[0]]["exit_code"] == 0 and nodes[by_rank[0]]["node_rank"] == 0, nodes
    assert "lost (a spare took its part)" in service.dgt("job", "show", "job-1").stdout
    for r in range(2):
        assert service.log("job-1", r).splitlines()[-1].startswith(f"rank {r} pid "), r
