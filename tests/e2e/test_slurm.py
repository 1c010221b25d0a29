"""dgt-run under a real Slurm (tests/e2e/slurm_cluster.py: munged, slurmctld and two slurmd in
network and UTS namespaces this test creates): `srun -N2 dgt-run` with no rendezvous flags runs a
torch 2.13 DDP job across both nodes, a failing rank fails the job with the worker's code, and
scancel (during the rendezvous and mid-run) leaves no process behind. Needs root and Debian's
slurm-wlm and munge; skipped otherwise.
"""
import os
import re
import time

import pytest

import slurm_cluster
from conftest import BIN, PYTHON, PYTHON2, REPO, WORKERS, records, wait_for
from test_launch import ddp_reference

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or bool(slurm_cluster.missing()),
    reason=f"needs root and {', '.join(slurm_cluster.missing()) or 'Slurm'}")


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    c = slurm_cluster.Cluster(tmp_path_factory.mktemp("slurm"))
    try:
        c.start()
        yield c
    finally:
        c.stop()


def job_env(cluster, **extra):
    # Workers: the peers venv's torch 2.13; gloo on the node's own interface.
    return cluster.env(DGT_PYTHON=PYTHON2, GLOO_SOCKET_IFNAME="eth0", **extra)


def wait_state(cluster, job_id, states, timeout):
    found = {}
    def done():
        found.update(cluster.job(job_id))
        return found.get("JobState") in states
    wait_for(done, timeout, f"job {job_id} in {states} (now {found.get('JobState')})")
    return found


def processes_with(marker, program=None):
    """The pids whose command line contains `marker` (and whose argv[0] is `program`)."""
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit() or int(pid) == os.getpid():
            continue
        try:
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if marker.encode() in b" ".join(argv) and (program is None or
                                                  argv[0] == str(program).encode()):
            pids.append(int(pid))
    return pids


def alive(pid):
    """Whether `pid` is a process that has not exited (a zombie has)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def test_srun_two_nodes_ddp_without_flags(cluster):
    r = cluster.client(["srun", "-N2", "--ntasks-per-node=1", BIN / "dgt-run",
                        "--nproc-per-node=2", WORKERS / "ddp_steps.py", "--steps=4"],
                       env=job_env(cluster), timeout=180, check=False)
    assert r.returncode == 0, r.stdout + r.stderr + cluster.logs()
    done = records(r.stdout)
    assert sorted(d["rank"] for d in done) == [0, 1, 2, 3]
    run_id = done[0]["env"]["TORCHELASTIC_RUN_ID"]
    job_id, step = run_id.split(".")
    assert step == "0"
    weight, bias = ddp_reference(world=4, steps=4)
    for d in done:
        assert d["torch"].startswith("2.13.")
        assert d["world_size"] == 4
        assert d["weight"] == weight and d["bias"] == bias
        node = d["rank"] // 2
        assert d["env"]["NODE_RANK"] == str(node)
        # node1, the first host of SLURM_STEP_NODELIST, resolved.
        assert d["env"]["MASTER_ADDR"] == f"{cluster.subnet}.2"
        assert d["env"]["MASTER_PORT"] == str(15000 + int(job_id) % 10000)
        assert d["env"]["TORCHELASTIC_RUN_ID"] == run_id
    for node in (0, 1):
        assert (f"dgt-run: settings: nnodes=2 (SLURM_STEP_NUM_NODES), node-rank={node} "
                f"(SLURM_NODEID), master-addr=node1 (SLURM_STEP_NODELIST (its first host)), "
                f"master-port={15000 + int(job_id) % 10000} (SLURM_JOB_ID), rdzv-id={run_id} "
                f"(SLURM_JOB_ID.SLURM_STEP_ID), nproc-per-node=2 (--nproc-per-node)") in r.stderr
    assert cluster.job(job_id)["JobState"] == "COMPLETED"


def test_several_tasks_per_node_refused(cluster):
    r = cluster.client(["srun", "-N1", "--ntasks-per-node=2", BIN / "dgt-run",
                        WORKERS / "ddp_steps.py"], env=job_env(cluster), timeout=60, check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count(
        "dgt-run: error: srun started 2 tasks on this node (SLURM_STEP_TASKS_PER_NODE=2), so 2 "
        "dgt-run agents would each start their own workers; dgt-run starts a node's workers "
        "itself: run one task per node, e.g. srun --ntasks-per-node=1 dgt-run "
        "--nproc-per-node=2 train.py") == 2, r.stderr


def test_failing_rank_fails_the_job_with_its_code(cluster, tmp_path):
    script = tmp_path / "fail.sh"
    script.write_text(f"#!/bin/sh\nexec srun --ntasks-per-node=1 {BIN}/dgt-run "
                      f"--nproc-per-node=2 {WORKERS}/exit_code.py --fail-rank 3 --code 7\n")
    out = tmp_path / "fail.out"
    r = cluster.client(["sbatch", "-N2", "-o", out, script], env=job_env(cluster))
    job_id = re.search(r"Submitted batch job (\d+)", r.stdout).group(1)
    job = wait_state(cluster, job_id, {"FAILED", "COMPLETED", "CANCELLED"}, 90)
    assert job["JobState"] == "FAILED", out.read_text()
    assert job["ExitCode"] == "7:0", out.read_text()
    text = out.read_text()
    assert "rank 3" in text and "exited with code 7" in text, text


def test_scancel_during_rendezvous_and_mid_run_leaves_nothing(cluster, tmp_path):
    ready = tmp_path / "ready"
    ready.mkdir()
    # --nnodes=3 contradicts SLURM_STEP_NUM_NODES=2: the flag wins, so the job waits in the
    # rendezvous (hosted c10d-style by node1's agent) for a third node that never comes.
    script = tmp_path / "wait.sh"
    script.write_text(f"#!/bin/sh\nexec srun --ntasks-per-node=1 {BIN}/dgt-run --nnodes=3 "
                      f"--rdzv-backend=c10d --rdzv-endpoint=node1:29400 --stop-timeout=3 "
                      f"{WORKERS}/signal_worker.py --ready-dir {ready}\n")
    out = tmp_path / "wait.out"
    r = cluster.client(["sbatch", "-N2", "-o", out, script], env=job_env(cluster))
    job_id = re.search(r"Submitted batch job (\d+)", r.stdout).group(1)
    wait_state(cluster, job_id, {"RUNNING"}, 30)
    # Each agent and its process-group watchdog.
    wait_for(lambda: len(processes_with(str(ready), BIN / "dgt-run")) == 4, 30,
             "two dgt-run agents")
    wait_for(lambda: out.read_text().count(
        "dgt-run: settings: nnodes=3 (--nnodes; SLURM_STEP_NUM_NODES gives 2, not used), "
        f"rdzv-id={job_id}.0 (SLURM_JOB_ID.SLURM_STEP_ID)") == 2, 20, "both agents' settings")
    time.sleep(2)
    assert not list(ready.iterdir())  # no worker started: still in the rendezvous
    cluster.client(["scancel", job_id])
    wait_state(cluster, job_id, {"CANCELLED"}, 30)
    wait_for(lambda: not processes_with(str(ready)), 20, "no process of the cancelled job")

    # Mid-run: SIGUSR1 (sbatch --signal=USR1@60) reaches every worker and the job goes on.
    script = tmp_path / "run.sh"
    script.write_text(f"#!/bin/sh\nexec srun --ntasks-per-node=1 {BIN}/dgt-run "
                      f"--nproc-per-node=2 --stop-timeout=3 "
                      f"--signals-to-handle=SIGTERM,SIGINT,SIGUSR1 "
                      f"{WORKERS}/signal_worker.py --ready-dir {ready} --grandchild\n")
    out = tmp_path / "run.out"
    r = cluster.client(["sbatch", "-N2", "-o", out, script], env=job_env(cluster))
    job_id = re.search(r"Submitted batch job (\d+)", r.stdout).group(1)
    wait_for(lambda: len(list(ready.glob("rank?"))) == 4, 60, "four workers ready")
    cluster.client(["scancel", "--signal=USR1", job_id])
    wait_for(lambda: all(f"rank {i} got SIGUSR1" in out.read_text() for i in range(4)), 20,
             "SIGUSR1 at every worker")
    time.sleep(1)
    assert cluster.job(job_id)["JobState"] == "RUNNING"
    grandchildren = [int(f.read_text().split()[1]) for f in ready.glob("rank?")]
    assert all(p > 0 for p in grandchildren)
    cluster.client(["scancel", job_id])
    wait_state(cluster, job_id, {"CANCELLED"}, 30)
    wait_for(lambda: not processes_with(str(ready)), 20, "no process of the cancelled job")
    wait_for(lambda: not any(alive(p) for p in grandchildren), 20,
             "the workers' children gone")


def test_documented_sbatch_example_runs(cluster, tmp_path):
    # docs/SCHEDULERS.md's example as it is, from the repository root, with dgt-run on PATH.
    repo = REPO
    out = tmp_path / "digits.out"
    env = cluster.env(PATH=f"{BIN}:{os.environ['PATH']}", DGT_PYTHON=PYTHON,
                      GLOO_SOCKET_IFNAME="eth0")
    r = cluster.client(["sbatch", f"--chdir={repo}", "-o", out,
                        repo / "examples" / "slurm" / "digits.sbatch"], env=env)
    job_id = re.search(r"Submitted batch job (\d+)", r.stdout).group(1)
    job = wait_state(cluster, job_id, {"COMPLETED", "FAILED", "CANCELLED"}, 180)
    text = out.read_text()
    assert job["JobState"] == "COMPLETED", text
    assert re.search(r"^\[rank0\]: test accuracy: 0\.9\d{3}$", text, re.M), text


def test_missing_node_id_and_bad_node_list_under_srun(cluster):
    r = cluster.client(["srun", "-N2", "--ntasks-per-node=1", "env", "-u", "SLURM_NODEID",
                        BIN / "dgt-run", WORKERS / "ddp_steps.py"], env=job_env(cluster),
                       timeout=60, check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert len(re.findall(
        r"^dgt-run: error: SLURM_NODEID is not set, but SLURM_JOB_ID=\d+ and "
        r"SLURM_STEP_NUM_NODES=2: start dgt-run under srun with one task per node \(srun "
        r"--ntasks-per-node=1 dgt-run \.\.\.\), or pass --node-rank$", r.stderr, re.M)) == 2, \
        r.stderr
    r = cluster.client(["srun", "-N2", "--ntasks-per-node=1", "env", "SLURM_STEP_NODELIST=n[1-",
                        BIN / "dgt-run", WORKERS / "ddp_steps.py"], env=job_env(cluster),
                       timeout=60, check=False)
    assert r.returncode == 2, r.stdout + r.stderr
    assert r.stderr.count("dgt-run: error: SLURM_STEP_NODELIST='n[1-' is not a Slurm hostlist: "
                          "'[' without ']'\n") == 2, r.stderr
