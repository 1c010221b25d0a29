"""dgt-run under faults and bad input, and where worker logs go: the agent's own stop signal is
not taken for an outside one, a hostile error file cannot block the agent, redirected logs are
kept and each launch gets its own log directory, run ids stay inside --log-dir. Every wait is
bounded."""
import json
import os
import re
import signal
import subprocess
import time
from pathlib import Path

from conftest import BIN, REPO, WORKERS, dgt_env

DGT_RUN = BIN / "dgt-run"

# Rank 0 fails at once; the others would run for a while. The agent stops them with SIGTERM,
# often while some are still between fork and exec.
FAIL_AT_ONCE = 'if [ "$LOCAL_RANK" = 0 ]; then exit 3; fi; exec sleep 30'


def run(args, timeout, env=None, cwd=REPO):
    """Runs dgt-run to its end; returns the CompletedProcess (text)."""
    return subprocess.run([str(DGT_RUN), *map(str, args)], capture_output=True, text=True,
                          timeout=timeout, env=env or dgt_env(), cwd=cwd,
                          stdin=subprocess.DEVNULL, start_new_session=True)


def test_own_stop_signal_is_not_an_outside_one():
    # The stop signal for the group reached a worker between fork and exec, whose inherited
    # signal handler fed it into the agent's signal pipe: "stopped by SIGTERM", 143.
    bad = []
    for i in range(50):
        p = run(["--standalone", "--nproc-per-node=8", "--stop-timeout=5", "--no-python",
                 "/bin/sh", "-c", FAIL_AT_ONCE], timeout=30)
        if p.returncode != 3 or "stopped by" in p.stderr:
            bad.append((i, p.returncode, p.stderr[-400:]))
    assert bad == [], bad


def test_own_stop_signal_does_not_prevent_restarts():
    # With restarts the same race ended the run instead of restarting the group.
    bad = []
    for i in range(20):
        p = run(["--standalone", "--nproc-per-node=8", "--stop-timeout=5", "--max-restarts=2",
                 "--no-python", "/bin/sh", "-c", FAIL_AT_ONCE], timeout=60)
        rounds = re.findall(r"restart count (\d)", p.stderr)
        if p.returncode != 3 or rounds[-1:] != ["2"] or "stopped by" in p.stderr:
            bad.append((i, p.returncode, p.stderr[-400:]))
    assert bad == [], bad


def test_progress_bar_shows_before_its_newline(spawn, tmp_path):
    # tqdm-style: "\r" + the bar, no newline until the end. The worker waits (bounded) until the
    # test saw its first state on the console.
    go = tmp_path / "go"
    script = (f'printf "\\r 10%%|#"; i=0; while [ ! -e {go} ] && [ $i -lt 200 ]; do sleep 0.05; '
              'i=$((i+1)); done; printf "\\r100%%|##|\\n"')
    p = spawn([DGT_RUN, "--standalone", "--no-python", "/bin/sh", "-c", script])
    deadline = time.monotonic() + 10
    # Bytes: read_text() would turn the '\r' into a newline.
    while b"[rank0]:  10%|#\r" not in p.out_path.read_bytes():
        assert time.monotonic() < deadline, f"no bar on the console: {p.out_path.read_bytes()!r}"
        assert p.popen.poll() is None, p.stderr
        time.sleep(0.05)
    assert not go.exists()  # Shown while the worker still waited: before any newline.
    go.touch()
    assert p.wait(timeout=20) == 0, p.stderr
    assert p.out_path.read_bytes() == b"[rank0]:  10%|#\r[rank0]: 100%|##|\n"


def test_error_file_replaced_by_a_fifo_does_not_block_the_agent():
    p = run(["--standalone", "--no-python", "/bin/sh", "-c",
             'rm -f "$TORCHELASTIC_ERROR_FILE" && mkfifo "$TORCHELASTIC_ERROR_FILE" && exit 3'],
            timeout=30)
    assert p.returncode == 3, p.stderr
    assert "Root cause (first failure):\n  rank 0 (local rank 0)" in p.stderr
    assert p.stderr.splitlines()[-1].endswith(") exited with code 3"), p.stderr


def test_redirects_without_log_dir_are_kept_and_named(tmp_path):
    env = dgt_env(TMPDIR=tmp_path)
    p = run(["--standalone", "-r", "3", "--no-python", "/bin/sh", "-c", "echo out; echo err >&2"],
            timeout=30, env=env)
    assert p.returncode == 0, p.stderr
    dirs = list(tmp_path.glob("dgt-run-*"))
    assert len(dirs) == 1, dirs
    assert (f"dgt-run: worker logs in {dirs[0]} (no --log-dir: a temporary directory, kept)\n"
            in p.stderr), p.stderr
    assert (dirs[0] / "attempt_0" / "0" / "stdout.log").read_text() == "out\n"
    assert (dirs[0] / "attempt_0" / "0" / "stderr.log").read_text() == "err\n"
    assert "[rank0]" not in p.stdout + p.stderr
    # Without -r/-t the temporary directory holds only error files and goes away.
    q = run(["--standalone", "--no-python", "/bin/sh", "-c", "echo out"], timeout=30, env=env)
    assert q.returncode == 0, q.stderr
    assert q.stdout == "[rank0]: out\n"
    assert list(tmp_path.glob("dgt-run-*")) == dirs


def test_each_launch_gets_its_own_log_dir(tmp_path):
    logs = tmp_path / "logs"
    for launch in ("first", "second"):
        p = run(["--standalone", f"--log-dir={logs}", "--rdzv-id=same", "-r", "3", "--no-python",
                 "/bin/sh", "-c", f"echo {launch}"], timeout=30)
        assert p.returncode == 0, p.stderr
        m = re.search(r"dgt-run: worker logs and error files of run 'same' in (\S+)\n", p.stderr)
        assert m, p.stderr
        assert (Path(m.group(1)) / "attempt_0" / "0" / "stdout.log").read_text() == f"{launch}\n"
    runs = sorted(logs.iterdir())
    assert len(runs) == 2 and all(re.fullmatch(r"same_\w{6}", d.name) for d in runs), runs
    assert sorted((d / "attempt_0" / "0" / "stdout.log").read_text() for d in runs) == [
        "first\n", "second\n"]


def test_run_id_that_leaves_the_log_dir_is_refused(tmp_path):
    p = run(["--standalone", f"--log-dir={tmp_path / 'logs'}", "--rdzv-id=../escape",
             "--no-python", "/bin/true"], timeout=10)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "dgt-run: error: --rdzv-id must be a non-empty name without '/' or '..' (it also names "
        "the log directory), got '../escape'"]
    assert list(tmp_path.iterdir()) == []


def test_relative_log_dir_gives_absolute_paths(tmp_path):
    p = run(["--standalone", "--log-dir=logs", "--rdzv-id=rel", "--no-python", "/bin/sh", "-c",
             'echo "$TORCHELASTIC_ERROR_FILE"'], timeout=30, cwd=tmp_path)
    assert p.returncode == 0, p.stderr
    (run_dir,) = (tmp_path / "logs").glob("rel_*")
    assert p.stdout == f"[rank0]: {run_dir}/attempt_0/0/error.json\n"


def alive(pid):
    """True when pid exists and is not a zombie."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def test_redirected_logs_outlive_a_killed_agent(spawn, tmp_path):
    # The group watchdog removes a killed agent's temporary directory, but not one holding -r
    # logs: they are what the user needs after a crash.
    p = spawn([DGT_RUN, "--standalone", "-r", "3", "--no-python", "/bin/sh", "-c",
               "echo hello; exec sleep 30"], env=dgt_env(TMPDIR=tmp_path))
    deadline = time.monotonic() + 10
    while True:
        logs = list(tmp_path.glob("dgt-run-*/attempt_0/0/stdout.log"))
        if logs and logs[0].read_text() == "hello\n":
            break
        assert time.monotonic() < deadline and p.popen.poll() is None, p.stderr
        time.sleep(0.05)
    children = {int(c) for t in Path(f"/proc/{p.popen.pid}/task").iterdir()
                for c in (t / "children").read_text().split()}
    assert len(children) == 2, children  # The watchdog and the worker.
    os.kill(p.popen.pid, 9)
    p.wait(timeout=10)
    deadline = time.monotonic() + 10
    while any(alive(c) for c in children):
        assert time.monotonic() < deadline, "the watchdog did not act within 10 s"
        time.sleep(0.05)
    assert logs[0].read_text() == "hello\n"


def test_bad_log_dir_is_a_usage_error_before_joining():
    # Once found only after the round formed (exit 1), and followed by the embedded rendezvous'
    # shutdown line.
    p = run(["--standalone", "--log-dir=/proc/x", "--no-python", "/bin/true"], timeout=10)
    assert p.returncode == 2
    assert p.stderr.splitlines() == [
        "dgt-run: error: --log-dir '/proc/x': cannot create it: No such file or directory"]


def test_error_is_the_last_line_after_an_early_standalone_failure():
    # -r needs a log directory; TMPDIR=/proc gives none. The round has formed, so the embedded
    # rendezvous still holds this agent's session when the agent ends: its shutdown must not
    # log after the error (docs/EXIT_CODES.md: the last stderr line says which failure it was).
    for _ in range(5):
        p = run(["--standalone", "-r", "3", "--no-python", "/bin/true"], timeout=30,
                env=dgt_env(TMPDIR="/proc"))
        assert p.returncode == 1, p.stderr
        assert p.stderr.splitlines()[-1].startswith(
            "dgt-run: error: -r/-t: cannot create a log directory: create log directory "
            "/proc/dgt-run-"), p.stderr


def marked_processes(marker):
    """Pids of live processes whose environment holds `marker` (this test's workers)."""
    pids = []
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            if marker.encode() in (d / "environ").read_bytes() and alive(int(d.name)):
                pids.append(int(d.name))
        except OSError:
            pass
    return pids


def test_sigterm_during_a_big_spawn_takes_effect_promptly(spawn, tmp_path):
    # Workers are started in batches with the event loop turning between them: a SIGTERM during
    # the spawn of 500 workers stops the spawning (it was handled only after every worker had
    # started: 14 s for 3000).
    started = tmp_path / "started"
    started.write_text("")
    marker = f"DGT_SPAWN_TEST_{os.getpid()}_{time.monotonic_ns()}"
    p = spawn([DGT_RUN, "--standalone", "--nproc-per-node=500", "--no-python", "/bin/sh", "-c",
               f"echo x >> {started}; exec sleep 1000"], env=dgt_env(**{marker: "1"}))
    deadline = time.monotonic() + 20
    while started.read_text() == "":
        assert time.monotonic() < deadline and p.popen.poll() is None, p.stderr
        time.sleep(0.01)
    sent = time.monotonic()
    p.popen.send_signal(signal.SIGTERM)
    assert p.wait(timeout=20) == 143, p.stderr
    took = time.monotonic() - sent
    assert p.stderr.splitlines()[-1] == "dgt-run: error: stopped by SIGTERM", p.stderr
    assert took < 3, took
    assert started.read_text().count("x") < 500  # The spawning stopped.
    assert marked_processes(marker) == []


def test_error_file_named_in_the_summary_is_kept(tmp_path):
    # Without --log-dir or -r the temporary log directory goes away at exit (agent and watchdog),
    # but not when the failure summary names an error file in it: that path must still open.
    p = run(["--standalone", "--nproc-per-node=2", WORKERS / "record_fail.py"], timeout=60,
            env=dgt_env(TMPDIR=tmp_path))
    assert p.returncode == 1, p.stderr
    (run_dir,) = tmp_path.glob("dgt-run-*")
    error_file = run_dir / "attempt_0" / "1" / "error.json"
    assert f"    error file: {error_file}\n" in p.stderr, p.stderr
    assert (f"kept: {run_dir} (the temporary log directory, for the error file(s) named "
            "above)\n") in p.stderr, p.stderr
    assert "root cause from rank 1" in json.loads(error_file.read_text())["message"]["message"]
    assert p.stderr.splitlines()[-1].startswith("dgt-run: error: rank 1 (local rank 1"), p.stderr


def test_temporary_log_dir_without_named_error_file_is_removed(tmp_path):
    p = run(["--standalone", "--no-python", "/bin/sh", "-c", "exit 3"], timeout=30,
            env=dgt_env(TMPDIR=tmp_path))
    assert p.returncode == 3, p.stderr
    assert "kept:" not in p.stderr
    assert list(tmp_path.glob("dgt-run-*")) == []
