"""Helpers shared by the jobs e2e tests on loopback (test_jobs_replicas.py, test_jobs_restart.py):
the `dgt` CLI against a jobs service, `dgt job show --json`, polling with a deadline."""
import json
import subprocess
import time

from conftest import BIN


def poll(predicate, timeout, interval=0.05):
    """`predicate()`'s first truthy value within `timeout` seconds, else None."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    return None


def logs(proc):
    """A conftest.Proc's stdout and stderr so far."""
    return proc.stdout + proc.stderr


def dgt(endpoints, *args, timeout=30):
    """`dgt ARGS --rdzv-endpoint=ENDPOINTS` (a CompletedProcess with text output)."""
    return subprocess.run([BIN / "dgt", *[str(a) for a in args], f"--rdzv-endpoint={endpoints}"],
                          capture_output=True, text=True, timeout=timeout)


def show(endpoints, job_id, *args):
    """`dgt job show JOB_ID --json` as a dict; None when it failed (no service, unknown job)."""
    out = dgt(endpoints, "job", "show", job_id, "--json", *args)
    return json.loads(out.stdout) if out.returncode == 0 else None
