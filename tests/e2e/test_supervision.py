"""dgt-run supervision end to end: signals, stop grace, kill -9 of the agent, restarts, the
failure summary, distributions' env, logs. Real processes; every wait is bounded."""
import json
import os
import re
import signal
import time
from pathlib import Path

import pytest

from conftest import BIN, WORKERS, dgt_env, wait_for

DGT_RUN = BIN / "dgt-run"




def ready_pids(ready_dir, n, proc):
    """{rank: (worker pid, grandchild pid)} once all n workers wrote their ready files."""
    def ready():
        assert proc.popen.poll() is None, proc.stderr
        return len(list(ready_dir.glob("rank[0-9]"))) == n
    wait_for(ready, 30, f"{n} workers ready")
    out = {}
    for f in ready_dir.glob("rank[0-9]"):
        pid, child = f.read_text().split()
        out[int(f.name[4:])] = (int(pid), int(child))
    return out


def alive(pid):
    """True when pid exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGQUIT])
def test_stop_signal_is_forwarded(spawn, tmp_path, sig):
    ready = tmp_path / "ready"
    ready.mkdir()
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", WORKERS / "signal_worker.py",
               "--ready-dir", ready])
    pids = ready_pids(ready, 2, p)
    os.kill(p.popen.pid, sig)
    assert p.wait(timeout=20) == 128 + sig, p.stderr
    for r in range(2):
        assert f"[rank{r}]: rank {r} got {sig.name}" in p.stdout, p.stdout
    assert not any(alive(pid) for pid, _ in pids.values())


@pytest.mark.parametrize("sig", [signal.SIGUSR1, signal.SIGUSR2])
def test_notify_signal_is_forwarded_without_stopping(spawn, tmp_path, sig):
    ready = tmp_path / "ready"
    ready.mkdir()
    # Listed explicitly: torchrun 2.13's default (dgt-run's too) is SIGTERM,SIGINT,SIGHUP,SIGQUIT.
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2",
               "--signals-to-handle=SIGTERM,SIGINT,SIGHUP,SIGQUIT,SIGUSR1,SIGUSR2",
               WORKERS / "signal_worker.py", "--ready-dir", ready])
    pids = ready_pids(ready, 2, p)
    os.kill(p.popen.pid, sig)
    wait_for(lambda: all(f"[rank{r}]: rank {r} got {sig.name}" in p.stdout for r in range(2)),
             10, f"both ranks to report {sig.name}")
    time.sleep(0.3)
    assert p.popen.poll() is None
    assert all(alive(pid) for pid, _ in pids.values())
    os.kill(p.popen.pid, signal.SIGTERM)
    assert p.wait(timeout=20) == 128 + signal.SIGTERM


def test_notify_signal_not_listed_is_not_forwarded(spawn, tmp_path):
    """torchrun 2.13's default --signals-to-handle leaves SIGUSR1 out: it is not forwarded and
    has its default effect on dgt-run (the end), and the workers go with it."""
    ready = tmp_path / "ready"
    ready.mkdir()
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", WORKERS / "signal_worker.py",
               "--ready-dir", ready])
    pids = ready_pids(ready, 2, p)
    os.kill(p.popen.pid, signal.SIGUSR1)
    assert p.wait(timeout=20) == -signal.SIGUSR1
    wait_for(lambda: not any(alive(pid) for pid, _ in pids.values()), 10, "the workers to end")
    assert "got SIGUSR1" not in p.stdout, p.stdout


# --shutdown-timeout is torchrun 2.13's name of --stop-timeout.
@pytest.mark.parametrize("grace_flag", ["--stop-timeout=1", "--shutdown-timeout=1"])
def test_stop_grace_then_sigkill(spawn, tmp_path, grace_flag):
    ready = tmp_path / "ready"
    ready.mkdir()
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", grace_flag,
               WORKERS / "signal_worker.py", "--ready-dir", ready, "--ignore-term"])
    pids = ready_pids(ready, 2, p)
    start = time.monotonic()
    os.kill(p.popen.pid, signal.SIGTERM)
    assert p.wait(timeout=20) == 128 + signal.SIGTERM
    elapsed = time.monotonic() - start
    assert 0.9 <= elapsed < 5, elapsed
    assert "did not stop" in p.stderr and "sending SIGKILL" in p.stderr, p.stderr
    assert not any(alive(pid) for pid, _ in pids.values())


def test_kill_9_of_the_agent_leaves_nothing(spawn, tmp_path):
    ready = tmp_path / "ready"
    ready.mkdir()
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", WORKERS / "signal_worker.py",
               "--ready-dir", ready, "--grandchild"], env=dgt_env(TMPDIR=tmpdir))
    pids = ready_pids(ready, 2, p)
    everything = [pid for pair in pids.values() for pid in pair]
    assert all(alive(pid) for pid in everything)
    assert len(list(tmpdir.glob("dgt-run-*"))) == 1  # the agent's temporary log directory
    os.kill(p.popen.pid, signal.SIGKILL)
    p.wait(timeout=10)
    wait_for(lambda: not any(alive(pid) for pid in everything), 10,
             "workers and grandchildren to die")
    # Their process groups empty out (once init has reaped the orphans).
    groups = ",".join(str(pid) for pid, _ in pids.values())
    wait_for(lambda: os.popen(f"pgrep -g {groups}").read().strip() == "", 10,
             "the workers' process groups to be empty")
    # The watchdog removed the temporary log directory the killed agent could not.
    wait_for(lambda: list(tmpdir.glob("dgt-run-*")) == [], 10, "the agent's temp dir removed")


def starts(text):
    return [tuple(map(int, m)) for m in
            re.findall(r"^\[rank\d\]: rank (\d) attempt (\d) pid (\d+) start$", text, re.M)]


def test_group_restart_up_to_max_restarts(spawn):
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", "--max-restarts=2",
               WORKERS / "flaky.py", "--fail-rank", "1", "--fails", "2"])
    assert p.wait(timeout=60) == 0, p.stderr
    s = starts(p.stdout)
    assert sorted((r, a) for r, a, _ in s) == [(0, 0), (0, 1), (0, 2), (1, 0), (1, 1), (1, 2)]
    assert len({pid for _, _, pid in s}) == 6  # Every attempt is a new process.
    # Group restarts are rendezvous rounds (the embedded service with --standalone).
    assert re.search(r"round 2 \(restart after failure: .*\): node rank 0 of 1, .*restart count 2",
                     p.stderr), p.stderr


def test_group_restart_exhausted(spawn, tmp_path):
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", "--max-restarts=1",
               f"--log-dir={tmp_path / 'logs'}", "--rdzv-id=exhaust",
               WORKERS / "flaky.py", "--fail-rank", "1", "--fails", "5", "--hold", "30"])
    assert p.wait(timeout=60) == 3, p.stderr
    assert sorted((r, a) for r, a, _ in starts(p.stdout)) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert "Root cause (first failure):\n  rank 1 (local rank 1), host 127.0.0.1 (node rank 0)" \
        in p.stderr, p.stderr
    assert re.search(r"attempt 1\n    exit code 3 at \d{4}-\d\d-\d\dT", p.stderr), p.stderr
    assert "rank 1 failing on purpose" in p.stderr
    # One directory for this launch, <log_dir>/<run_id>_<unique> (torchrun 2.x layout).
    runs = list((tmp_path / "logs").glob("exhaust_*"))
    assert len(runs) == 1, runs
    assert (runs[0] / "attempt_1" / "0").is_dir()


def test_rank_restart_keeps_the_other_pids(spawn, torch_family):
    # Ranks 0 and 2 wait, as torch TCPStore clients of each family, for the agent's restart key.
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=3", "--restart-policy=rank",
               "--max-restarts=1", WORKERS / "flaky.py", "--fail-rank", "1", "--fails", "1",
               "--wait-restart-key"], env=torch_family.env())
    assert p.wait(timeout=90) == 0, p.stderr
    s = starts(p.stdout)
    assert sorted((r, a) for r, a, _ in s) == [(0, 0), (1, 0), (1, 1), (2, 0)]
    done = re.findall(r"^\[rank\d\]: rank (\d) attempt (\d) pid (\d+) done$", p.stdout, re.M)
    done = {int(r): (int(a), int(pid)) for r, a, pid in done}
    first = {r: pid for r, a, pid in s if a == 0}
    assert done[0] == (0, first[0]) and done[2] == (0, first[2])  # Same processes.
    assert done[1][0] == 1 and done[1][1] != first[1]  # A new rank 1, restart count 1.
    for r in (0, 2):
        assert f"[rank{r}]: rank {r} saw restart 1" in p.stdout


def test_rank_policy_summary_names_the_rank_restarted_before_the_failure(spawn):
    # Rank 1 fails and is restarted in place; rank 0 then fails (as a torch.distributed worker
    # does when its peer is replaced): the summary shows both, and a note on trainers that
    # cannot rebuild their communicator.
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", "--restart-policy=rank",
               "--max-restarts=1", WORKERS / "flaky.py", "--fail-rank", "1", "--fails", "1",
               "--wait-restart-key", "--exit-after-restart", "4"])
    assert p.wait(timeout=90) == 4, p.stderr
    err = p.stderr
    root = err.index("Root cause (first failure):\n  rank 0 (local rank 0)")
    earlier = err.index("Restarted in place before that (--restart-policy rank):\n"
                        "  rank 1 (local rank 1)")
    assert root < earlier
    assert "    exit code 3 at " in err[earlier:]
    assert ("  note: a worker that cannot rebuild its communicator around a replaced peer "
            "(torch.distributed process groups cannot) fails when one is restarted; use "
            "--restart-policy group for such trainers, or one that rebuilds it: Python's "
            "dgt.recovery (Trainer) or dgt::worker::ElasticGroup (docs/RECOVERY.md)\n") in err


def test_record_error_file_in_summary(spawn, tmp_path, torch_family):
    # torch's @record (each family's own) writes the exception to TORCHELASTIC_ERROR_FILE; the
    # root-cause summary shows its message and traceback. (TMPDIR: the temporary log directory
    # is kept for the error file.)
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", WORKERS / "record_fail.py"],
              env=torch_family.env(TMPDIR=tmp_path))
    assert p.wait(timeout=60) == 1, p.stderr
    err = p.stderr
    m = re.search(r"^Root cause \(first failure\):\n"
                  r"  rank 1 \(local rank 1\), host 127\.0\.0\.1 \(node rank 0\), "
                  r"pid \d+, attempt 0\n"
                  r"    exit code 1 at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z\n"
                  r"    error file: (" + re.escape(str(tmp_path)) + r"/dgt-run-\w+/attempt_0/1/"
                  r"error\.json)\n"
                  r"    message: ValueError: root cause from rank 1\n"
                  r"    traceback:\n      Traceback \(most recent call last\):\n", err, re.M)
    assert m, err
    assert '        File "' + str(WORKERS / "record_fail.py") + '", line 11, in main\n' \
        '          raise ValueError("root cause from rank 1")\n' \
        '      ValueError: root cause from rank 1\n' in err, err
    # The file is torch's own writing: the format dgt reads (agent/workers/error_file.h).
    with open(m.group(1)) as f:
        written = json.load(f)
    assert written["message"]["message"] == "ValueError: root cause from rank 1"
    assert sorted(written["message"]["extraInfo"]) == ["py_callstack", "timestamp"]
    assert written["message"]["extraInfo"]["py_callstack"].endswith(
        "ValueError: root cause from rank 1\n")


def env_records(text):
    return {int(m.group(1)): json.loads(m.group(2)) for m in
            re.finditer(r"^\[rank(\d)\]: (\{.*\})$", text, re.M)}


def test_tf_config(spawn):
    p = spawn([DGT_RUN, "--standalone", "--distribution=tensorflow", "--worker-count=2",
               "--parameter-server-count=1", "--tf-chief", WORKERS / "env_dump.py"])
    assert p.wait(timeout=30) == 0, p.stderr
    recs = env_records(p.stdout)
    assert sorted(recs) == [0, 1, 2, 3]
    configs = [json.loads(recs[r]["env"]["TF_CONFIG"]) for r in range(4)]
    cluster = configs[0]["cluster"]
    assert sorted(cluster) == ["chief", "ps", "worker"]
    addrs = cluster["ps"] + cluster["chief"] + cluster["worker"]
    assert len(addrs) == 4 and len(set(addrs)) == 4
    assert all(re.match(r"^127\.0\.0\.1:\d+$", a) for a in addrs)
    assert [c["task"] for c in configs] == [
        {"type": "ps", "index": 0}, {"type": "chief", "index": 0},
        {"type": "worker", "index": 0}, {"type": "worker", "index": 1}]
    assert all(c["cluster"] == cluster and c["environment"] == "cloud" for c in configs)


def test_mpi_env_and_local_rank_arg(spawn):
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", "--distribution=mpi",
               "--pass-local-rank-arg", WORKERS / "env_dump.py", "x"])
    assert p.wait(timeout=30) == 0, p.stderr
    recs = env_records(p.stdout)
    for r in range(2):
        env = recs[r]["env"]
        assert env["OMPI_COMM_WORLD_RANK"] == str(r)
        assert env["OMPI_COMM_WORLD_SIZE"] == "2"
        assert env["OMPI_COMM_WORLD_LOCAL_RANK"] == str(r)
        assert env["OMPI_COMM_WORLD_LOCAL_SIZE"] == "2"
        assert env["AZ_BATCH_MASTER_NODE"] == f"127.0.0.1:{env['MASTER_PORT']}"
        assert recs[r]["argv"] == ["x", f"--local_rank={r}"]
        assert env["TORCHELASTIC_ERROR_FILE"].endswith(f"/attempt_0/{r}/error.json")


def test_pet_defaults(spawn):
    p = spawn([DGT_RUN, WORKERS / "env_dump.py"],
              env=dgt_env(PET_NPROC_PER_NODE=3, PET_STANDALONE=1, PET_ROLE="trainer"))
    assert p.wait(timeout=30) == 0, p.stderr
    recs = env_records(p.stdout)
    assert sorted(recs) == [0, 1, 2]
    assert all(r["env"]["ROLE_NAME"] == "trainer" and r["env"]["WORLD_SIZE"] == "3"
               for r in recs.values())


def test_two_standalone_jobs_at_once(spawn):
    jobs = [spawn([DGT_RUN, "--standalone", "--nproc-per-node=2",
                   WORKERS / "allreduce_check.py"], name=f"job{i}") for i in range(2)]
    for j in jobs:
        assert j.wait(timeout=120) == 0, j.stderr
    ports = [{json.loads(m)["env"]["MASTER_PORT"] for m in
              re.findall(r"^\[rank\d\]: (\{.*\})$", j.stdout, re.M)} for j in jobs]
    assert len(ports[0]) == 1 and len(ports[1]) == 1 and ports[0] != ports[1]


def test_local_ranks_filter(spawn):
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=3", "--local-ranks-filter=1",
               WORKERS / "env_dump.py"])
    assert p.wait(timeout=30) == 0, p.stderr
    assert re.findall(r"^\[rank(\d)\]", p.stdout, re.M) == ["1", "1"]
    assert re.findall(r"^\[rank(\d)\]", p.stderr, re.M) == ["1"]


def test_redirect_and_tee_files(spawn, tmp_path):
    logs = tmp_path / "logs"
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", f"--log-dir={logs}",
               "--rdzv-id=files", "-r", "0:3", "-t", "1:2", WORKERS / "env_dump.py"])
    assert p.wait(timeout=30) == 0, p.stderr
    runs = list(logs.glob("files_*"))  # <log_dir>/<run_id>_<unique>, named at start.
    assert len(runs) == 1, runs
    assert f"dgt-run: worker logs and error files of run 'files' in {runs[0]}\n" in p.stderr
    d0 = runs[0] / "attempt_0" / "0"
    d1 = runs[0] / "attempt_0" / "1"
    # Rank 0: both streams redirected to files only.
    assert "out 0\n" in (d0 / "stdout.log").read_text()
    assert (d0 / "stderr.log").read_text() == "err 0\n"
    assert "[rank0]" not in p.stdout and "[rank0]" not in p.stderr
    # Rank 1: stderr teed (file and console), stdout only on the console.
    assert (d1 / "stderr.log").read_text() == "err 1\n"
    assert not (d1 / "stdout.log").exists()
    assert "[rank1]: err 1" in p.stderr and "[rank1]: out 1" in p.stdout


def test_json_agent_log(spawn):
    p = spawn([DGT_RUN, "--standalone", "--log-format=json", WORKERS / "env_dump.py"])
    assert p.wait(timeout=30) == 0, p.stderr
    lines = [l for l in p.stderr.splitlines() if not l.startswith("[rank")]
    assert lines
    for line in lines:
        rec = json.loads(line)
        assert list(rec) == ["time", "level", "msg"]
        assert re.match(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{3}Z$", rec["time"])


def test_json_agent_log_failure_summary_is_one_record(spawn):
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", "--log-format=json",
               WORKERS / "exit_code.py", "--fail-rank", "1", "--code", "3"])
    assert p.wait(timeout=30) == 3, p.stderr
    recs = [json.loads(l) for l in p.stderr.splitlines() if not l.startswith("[rank")]
    final = [r for r in recs if "Root cause (first failure):" in r["msg"]]
    assert len(final) == 1 and final[0]["level"] == "error"
    assert final[0]["msg"].endswith("exited with code 3")
    assert "\n  rank 1 (local rank 1), host 127.0.0.1" in final[0]["msg"]


def test_torchrun_command_line_runs_unchanged(spawn, tmp_path):
    port = free_port()
    p = spawn([DGT_RUN, "--nnodes=1", "--nproc_per_node=2", "--rdzv_backend=static",
               "--max_restarts=0", "--monitor_interval=5", "--start_method=spawn",
               "--role=default", f"--log_dir={tmp_path / 'logs'}", "-r", "1", "-t", "1",
               "--rdzv_conf=timeout=900", "--master_addr=127.0.0.1", f"--master_port={port}",
               "--node_rank=0", WORKERS / "allreduce_check.py"])
    assert p.wait(timeout=120) == 0, p.stderr
    logs = list((tmp_path / "logs").glob("*/attempt_0/*/stdout.log"))
    assert len(logs) == 2
    for log in logs:
        rec = json.loads(log.read_text().splitlines()[-1])
        assert rec["sum"] == 1 and rec["env"]["MASTER_PORT"] == str(port)


def test_module_and_run_path(spawn):
    env = dgt_env(PYTHONPATH=WORKERS)
    p = spawn([DGT_RUN, "--standalone", "-m", "env_dump", "a"], env=env, name="module")
    assert p.wait(timeout=30) == 0, p.stderr
    assert env_records(p.stdout)[0]["argv"] == ["a"]
    q = spawn([DGT_RUN, "--standalone", "--run-path", WORKERS / "env_dump.py", "b"],
              name="run_path")
    assert q.wait(timeout=30) == 0, q.stderr
    assert env_records(q.stdout)[0]["argv"] == ["b"]


def free_port():
    import socket
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_signal_death_exit_status_and_other_failures(spawn):
    # Rank 1 dies of SIGSEGV first; rank 2 exits 4 on its own a little later.
    script = ('if [ "$RANK" = 1 ]; then sleep 0.3; kill -SEGV $$; fi; '
              'if [ "$RANK" = 2 ]; then trap "exit 4" TERM; sleep 0.6; exit 4; fi; '
              'sleep 30')
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=3", "--no-python", "/bin/sh", "-c",
               script])
    assert p.wait(timeout=30) == 128 + signal.SIGSEGV, p.stderr
    err = p.stderr
    root = err.index("Root cause (first failure):\n  rank 1 (local rank 1)")
    assert "signal 11 (SIGSEGV) at " in err[root:], err
    others = err.index("Other failures:\n  rank 2 (local rank 2)")
    assert others > root and "exit code 4 at " in err[others:], err


def static_agents(spawn, script_args, port):
    # Node rank 1 first: it waits for node rank 0's store.
    return [spawn([DGT_RUN, "--nnodes=2", "--nproc_per_node=2", f"--node_rank={n}",
                   "--master_addr=127.0.0.1", f"--master_port={port}", "--rdzv_id=static",
                   *script_args], name=f"node{n}") for n in (1, 0)]


def test_static_backend_two_nodes(spawn):
    # init_process_group(env://) on the store node rank 0's agent hosts at --master-port.
    port = free_port()
    agents = static_agents(spawn, [WORKERS / "allreduce_check.py"], port)
    for a in agents:
        assert a.wait(timeout=120) == 0, a.stderr
    recs = [json.loads(m) for a in agents
            for m in re.findall(r"^\[rank\d\]: (\{.*\})$", a.stdout, re.M)]
    assert sorted(r["rank"] for r in recs) == [0, 1, 2, 3]
    for r in recs:
        assert r["env"]["TORCHELASTIC_USE_AGENT_STORE"] == "True"
        assert r["sum"] == 6
        assert r["env"]["MASTER_PORT"] == str(port)
        assert r["env"]["NODE_RANK"] == str(r["rank"] // 2)
        assert r["env"]["TORCHELASTIC_RUN_ID"] == "static"
    # Node rank 1 (agents[0]) does not claim the run's outcome; node rank 0 does.
    assert agents[0].stderr.strip().splitlines()[-1] == (
        "dgt-run: done: this node's workers succeeded (node rank 1); node rank 0 reports the "
        "run's outcome")
    assert "dgt-run: run 'static' succeeded" in agents[1].stderr


def test_static_backend_failure_stops_the_other_node(spawn):
    port = free_port()
    agents = static_agents(spawn, [WORKERS / "exit_code.py", "--fail-rank", "3", "--code", "5"],
                           port)
    codes = [a.wait(timeout=60) for a in agents]
    assert codes == [5, 5], [a.stderr for a in agents]
    assert "rank 3 (local rank 1 on node rank 1" in agents[1].stderr


def test_workers_inherit_only_stdio(spawn):
    # The agent's store socket, its rendezvous connection and the watchdog pipe stay out of the
    # workers (as with Python's close_fds=True): a worker's child outliving the agent must not
    # keep the store port open.
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=2", WORKERS / "fd_list.py"])
    assert p.wait(timeout=60) == 0, p.stderr
    assert sorted(re.findall(r"^\[rank\d\]: fds (.*)$", p.stdout, re.M)) == ["0 1 2", "0 1 2"]


def static_node(spawn, nnodes, rank, port, join_timeout, command):
    return spawn([DGT_RUN, f"--nnodes={nnodes}", "--rdzv-backend=static", f"--node-rank={rank}",
                  "--master-addr=127.0.0.1", f"--master-port={port}",
                  f"--join-timeout={join_timeout}", "--no-python", *command], name=f"node{rank}")


def static_pair_started(spawn, port, node0_cmd, node1_cmd):
    """Starts node ranks 1 and 0 of a static 2-node run (--join-timeout 60) and waits until both
    workers printed "started". Returns (node0, node1)."""
    node1 = static_node(spawn, 2, 1, port, 60, node1_cmd)
    node0 = static_node(spawn, 2, 0, port, 60, node0_cmd)
    wait_for(lambda: "started" in node0.stdout and "started" in node1.stdout, 30,
             "both nodes' workers")
    return node0, node1


def test_static_node_rank_0_alone_fails_naming_the_missing_node(spawn):
    port = free_port()
    start = time.monotonic()
    p = static_node(spawn, 2, 0, port, 2, ["/bin/true"])
    assert p.wait(timeout=30) == 1, p.stderr
    assert time.monotonic() - start < 15
    assert [l for l in p.stderr.splitlines() if "error" in l] == [
        "dgt-run: error: static rendezvous: node rank 1 never joined within the finish timeout "
        "of 2s (--join-timeout)"], p.stderr
    assert "succeeded" not in p.stderr


def test_static_node_rank_0_tells_unfinished_from_never_joined(spawn):
    port = free_port()
    # Node rank 1 joins and runs long; node rank 2 never starts.
    slow = static_node(spawn, 3, 1, port, 3, ["/bin/sh", "-c", "echo started; sleep 60"])
    p = static_node(spawn, 3, 0, port, 3, ["/bin/true"])
    assert p.wait(timeout=30) == 1, p.stderr
    assert [l for l in p.stderr.splitlines() if "error" in l] == [
        "dgt-run: error: static rendezvous: node rank 2 never joined; node rank 1 joined but did "
        "not finish within the finish timeout of 3s (--join-timeout)"], p.stderr
    assert "started" in slow.stdout


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_static_node_rank_0_stops_waiting_on_a_signal(spawn, sig):
    port = free_port()
    p = static_node(spawn, 2, 0, port, 60, ["/bin/sh", "-c", "echo finished"])
    wait_for(lambda: "finished" in p.stdout, 20, "the worker's output")
    time.sleep(1)  # The worker has ended; node rank 0 waits for node rank 1.
    assert p.popen.poll() is None, p.stderr
    start = time.monotonic()
    p.popen.send_signal(sig)
    assert p.wait(timeout=10) == 128 + sig, p.stderr
    assert time.monotonic() - start < 5
    name = signal.Signals(sig).name
    assert p.stderr.splitlines()[-1] == (
        f"dgt-run: error: stopped by {name} after this node's workers exited, before the run's "
        "outcome was known"), p.stderr


def test_static_kill_9_of_node_rank_0_fails_the_other_node(spawn):
    # Node rank 0's agent hosts the store; killed, nobody would report the run's outcome. Node
    # rank 1 notices its store connection break, tries to reconnect (bounded), stops its workers
    # and exits 69 (kExitRendezvousUnavailable) naming node rank 0 and its address.
    port = free_port()
    cmd = ["/bin/sh", "-c", "echo started; sleep 60"]
    node0, node1 = static_pair_started(spawn, port, cmd,
                                       cmd)
    start = time.monotonic()
    os.kill(node0.popen.pid, signal.SIGKILL)
    assert node1.wait(timeout=30) == 69, node1.stderr
    assert time.monotonic() - start < 15
    lost = f"lost node rank 0 (store host 127.0.0.1:{port}): its store closed the connection"
    last = node1.stderr.strip().splitlines()[-1]
    assert last.startswith(f"dgt-run: error: run failed: {lost}"), node1.stderr
    assert "could not be reached again within 3s" in last, node1.stderr
    assert "succeeded" not in node1.stderr


def test_static_node_rank_0_fails_when_a_peer_is_stopped_after_its_own_workers_finished(spawn):
    # Node rank 0's workers are done and it waits for node rank 1, which is then SIGTERM'd: node
    # rank 0 must not report success.
    port = free_port()
    node1 = static_node(spawn, 2, 1, port, 60, ["/bin/sh", "-c", "echo started; sleep 60"])
    node0 = static_node(spawn, 2, 0, port, 60, ["/bin/sh", "-c", "echo finished"])
    wait_for(lambda: "finished" in node0.stdout and "started" in node1.stdout, 30,
             "node rank 0's worker done, node rank 1's running")
    time.sleep(0.5)  # Node rank 0's worker has exited; node rank 0 waits for node rank 1.
    assert node0.popen.poll() is None, node0.stderr
    node1.popen.send_signal(signal.SIGTERM)
    assert node1.wait(timeout=30) == 128 + signal.SIGTERM, node1.stderr
    # Node rank 0 was not signalled itself: 1 (the run failed on another node), naming it.
    assert node0.wait(timeout=30) == 1, node0.stderr
    assert node0.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: run failed: node rank 1 did not succeed (exit status 1); reported "
        "failure: node rank 1 was stopped by SIGTERM"), node0.stderr
    assert "succeeded" not in node0.stderr


def test_static_sigterm_to_node_rank_0_fails_the_other_node_with_1_naming_it(spawn):
    # A scheduler on node rank 1 must not take node rank 0's SIGTERM for its own preemption.
    port = free_port()
    cmd = ["/bin/sh", "-c", "echo started; sleep 60"]
    node0, node1 = static_pair_started(spawn, port, cmd,
                                       cmd)
    node0.popen.send_signal(signal.SIGTERM)
    assert node0.wait(timeout=30) == 128 + signal.SIGTERM, node0.stderr
    assert node1.wait(timeout=30) == 1, node1.stderr
    assert node1.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: run failed: node rank 0 was stopped by SIGTERM"), node1.stderr


def test_static_node_rank_1_without_node_rank_0_exits_69(spawn):
    port = free_port()
    p = spawn([DGT_RUN, "--nnodes=2", "--node-rank=1", "--master-addr=127.0.0.1",
               f"--master-port={port}", "--rdzv-connect-timeout=1", "--nproc-per-node=1",
               "--no-python", "true"], name="node1")
    assert p.wait(timeout=30) == 69, p.stderr  # kExitRendezvousUnavailable.
    last = p.stderr.strip().splitlines()[-1]
    assert last.startswith(
        f"dgt-run: error: static rendezvous: cannot reach the store at 127.0.0.1:{port}"), last
    assert last.endswith("(is node rank 0 running? see --rdzv-connect-timeout)"), last


@pytest.mark.parametrize("node0_cmd", [["echo started; sleep 60"], ["echo started"]],
                         ids=["node0-running", "node0-finished"])
def test_static_kill_9_of_node_rank_1_fails_node_rank_0_promptly(spawn, node0_cmd):
    # Node rank 1's agent dies: node rank 0 must not wait --join-timeout (60 s here, 600 s by
    # default) but notice within seconds, stop its own workers if they still run (not train on
    # a dead world) and exit 69 naming node rank 1.
    port = free_port()
    node0, node1 = static_pair_started(spawn, port, ["/bin/sh", "-c", *node0_cmd],
                                       ["/bin/sh", "-c", "echo started; sleep 60"])
    time.sleep(1.5)  # Node rank 1's heartbeats are seen (only a precondition; bounded).
    start = time.monotonic()
    os.kill(node1.popen.pid, signal.SIGKILL)
    assert node0.wait(timeout=30) == 69, node0.stderr
    assert time.monotonic() - start < 15, node0.stderr
    assert node0.stderr.strip().splitlines()[-1] == (
        "dgt-run: error: run failed: lost node rank 1 (its agent stopped updating its liveness "
        "key in node rank 0's store for 5s: it was killed or cannot reach node rank 0)"), \
        node0.stderr
    assert "succeeded" not in node0.stderr


def test_static_second_agent_with_the_same_node_rank_is_refused(spawn):
    # A second --node-rank=1 agent (or node rank 1 restarted mid-run) was admitted; both ran
    # RANK 1 and node rank 0 reported success. The node rank is claimed in node rank 0's store.
    port = free_port()
    node0, node1 = static_pair_started(spawn, port, ["/bin/sh", "-c", "echo started; sleep 4"],
                                       ["/bin/sh", "-c", "echo started; sleep 4"])
    again = spawn([DGT_RUN, "--nnodes=2", "--rdzv-backend=static", "--node-rank=1",
                   "--master-addr=127.0.0.1", f"--master-port={port}", "--no-python",
                   "/bin/sh", "-c", "echo SECOND; sleep 4"], name="again")
    assert again.wait(timeout=30) == 77, again.stderr  # kExitNotAdmitted.
    last = again.stderr.strip().splitlines()[-1]
    assert last.startswith("dgt-run: error: static rendezvous: node rank 1 of run 'none' is "
                           "already held by another agent ("), last
    assert last.endswith("); two agents with one --node-rank would run the same ranks twice"), last
    assert "SECOND" not in again.stdout
    assert [node0.wait(timeout=30), node1.wait(timeout=30)] == [0, 0], [node0.stderr, node1.stderr]

def test_static_rank_restart_stays_on_its_node(spawn):
    # --max-restarts with --restart-policy=rank is local to a node: the static form keeps it
    # (a group restart there is refused up front, exit 2).
    port = free_port()
    flaky = [WORKERS / "flaky.py", "--fail-rank=1", "--hold=1"]
    nodes = [spawn([DGT_RUN, "--nnodes=2", f"--node-rank={n}", "--master-addr=127.0.0.1",
                    f"--master-port={port}", "--nproc-per-node=1", "--max-restarts=1",
                    "--restart-policy=rank", *flaky], name=f"node{n}") for n in (1, 0)]
    assert [p.wait(timeout=60) for p in nodes] == [0, 0], [p.stderr for p in nodes]
    assert "rank 1 attempt 1" in nodes[0].stdout and "done" in nodes[0].stdout
    assert "dgt-run: run 'none' succeeded" in nodes[1].stderr
    group = spawn([DGT_RUN, "--nnodes=2", "--node-rank=1", "--master-addr=127.0.0.1",
                   f"--master-port={port}", "--max-restarts=1", *flaky], name="group")
    assert group.wait(timeout=30) == 2, group.stderr
    assert "--max-restarts=1 with --restart-policy=group needs a rendezvous service" in \
        group.stderr
