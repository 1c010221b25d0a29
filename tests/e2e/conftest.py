"""Shared fixtures for dgt's end-to-end tests: real binaries, real PyTorch workers, loopback only.

Binaries come from $DGT_BIN_DIR (default: build/bin). Workers run with $DGT_PYTHON (default:
/usr/bin/python3, Debian's interpreter with python3-torch 1.13); tests that take the
`torch_family` fixture run once more with $DGT_PYTHON2 (the peers venv's torch 2.13). Every
process a test starts has a deadline and is killed at the end of the test.
"""
import json
import os
import re
import subprocess
import time
from fractions import Fraction
from pathlib import Path

import pytest

from recovery_harness import DgtRunJob, kill_session

REPO = Path(__file__).resolve().parents[2]
BIN = Path(os.environ.get("DGT_BIN_DIR", REPO / "build" / "bin"))
WORKERS = REPO / "tests" / "e2e" / "workers"
PYTHON = os.environ.get("DGT_PYTHON", "/usr/bin/python3")


def dgt_env(**extra):
    env = dict(os.environ)
    env["DGT_PYTHON"] = PYTHON
    env.update({k: str(v) for k, v in extra.items()})
    return env


class Proc:
    """A started process whose output goes to files, so nothing blocks on a full pipe."""

    def __init__(self, args, tmp_path, name, env=None):
        self.args = [str(a) for a in args]
        self.out_path = tmp_path / f"{name}.out"
        self.err_path = tmp_path / f"{name}.err"
        self._out = open(self.out_path, "wb")
        self._err = open(self.err_path, "wb")
        self.popen = subprocess.Popen(self.args, stdout=self._out, stderr=self._err,
                                      stdin=subprocess.DEVNULL, env=env or dgt_env(),
                                      cwd=REPO, start_new_session=True)

    def wait(self, timeout):
        try:
            return self.popen.wait(timeout=timeout)
        finally:
            self._out.flush()
            self._err.flush()

    @property
    def stdout(self):
        return self.out_path.read_text(errors="replace")

    @property
    def stderr(self):
        return self.err_path.read_text(errors="replace")

    def kill(self):
        kill_session(self.popen)
        self._out.close()
        self._err.close()


def wait_for(predicate, timeout, what):
    """Polls `predicate` every 0.1 s; fails the test after `timeout` seconds."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def records(text):
    """The JSON lines workers printed, from dgt-run's console output ("[rankN]: {...}")."""
    return [json.loads(m) for m in re.findall(r"^\[rank\d+\]: (\{.*\})$", text, re.M)]


@pytest.fixture
def spawn(tmp_path):
    procs = []

    def _spawn(args, name=None, env=None):
        p = Proc(args, tmp_path, name or f"proc{len(procs)}", env=env)
        procs.append(p)
        return p

    yield _spawn
    for p in procs:
        p.kill()


@pytest.fixture
def rendezvous(spawn):
    """A dgt-rendezvous on a free loopback port; yields its "127.0.0.1:port" endpoint."""
    p = spawn([BIN / "dgt-rendezvous", "--listen", "127.0.0.1:0"], name="rendezvous")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        m = re.search(r"listening on port (\d+)", p.stdout)
        if m:
            yield f"127.0.0.1:{m.group(1)}"
            return
        assert p.popen.poll() is None, f"dgt-rendezvous exited: {p.stderr}"
        time.sleep(0.05)
    pytest.fail("dgt-rendezvous did not report its port within 10 s")


# The torch 2.x peers (scripts/install-deps.sh's venv, exported by scripts/python-env.sh).
PYTHON2 = os.environ.get("DGT_PYTHON2", "/opt/dgt/peers-venv/bin/python")


@pytest.fixture(scope="session")
def python2():
    """DGT_PYTHON2 when it has torch 2.x installed. Otherwise the test fails under CI=true (CI always
    installs the peers, so a missing venv is a broken install, never a silent skip) and is
    skipped with the reason elsewhere."""
    why = None
    if not os.access(PYTHON2, os.X_OK):
        why = f"{PYTHON2} does not exist"
    else:
        # The installed version, not `import torch` (5 s here, once per test file under ctest);
        # a torch that does not import fails the tests that use it anyway.
        r = subprocess.run([PYTHON2, "-c",
                            "import importlib.metadata as m; print(m.version('torch'))"],
                           capture_output=True, text=True, timeout=120)
        if r.returncode != 0 or not r.stdout.startswith("2."):
            why = f"{PYTHON2} has no torch 2.x: {(r.stdout + r.stderr).strip()[-300:]}"
    if why:
        msg = (f"torch 2.x peers venv unusable ({why}); run scripts/install-deps.sh "
               "or set DGT_PYTHON2")
        if os.environ.get("CI") == "true":
            pytest.fail(msg)
        pytest.skip(msg)
    return PYTHON2


class TorchFamily:
    """One PyTorch family for a test's workers: `version` ("1.13" or "2.13") and `python`, the
    interpreter that imports it; env() is dgt_env() with DGT_PYTHON, which dgt-run runs worker
    scripts with, set to that interpreter."""

    def __init__(self, version, python):
        self.version = version
        self.python = python

    def env(self, **extra):
        return dgt_env(DGT_PYTHON=self.python, **extra)


@pytest.fixture(params=["1.13", "2.13"])
def torch_family(request):
    """Runs the test once per PyTorch family: "1.13" is DGT_PYTHON (Debian's python3-torch),
    "2.13" the peers venv (the `python2` fixture: it fails under CI=true when the venv is
    missing, and skips elsewhere).

    Taken by the tests whose subject is torch's own side of the launcher contract:
    - test_launch: DDP steps with exact parameters, 2 agents x 2 workers, init_process_group
      over the agent store, torchrun's env contract;
    - test_supervision: @record error files in the summary, torch TCPStore clients waiting for
      the agent's restart key;
    - test_elastic: a new round after kill -9 of an agent, restart counts of a group restart;
    - test_store_torch: init_process_group against `dgt store serve` (each family's keys).
    The rest stays on 1.13 alone (CI time: four 2.13 workers take about twice as long to start
    as 1.13's), because torch is incidental there or covered above: the digits example (the
    slowest test) and the all_reduce env test (test_launch: the DDP test does both for each
    family); the static backend's job (the same store server as above); signals, logs, exit
    codes, the failure summary, two jobs' ports and torchrun's flags (test_supervision,
    test_launch, test_faults_and_logs: their workers do not import torch or only provide a
    failure); scale-up and the last failed restart (test_elastic: the launcher's decisions);
    rendezvous faults, c10d-style hosting and keepalive (test_rendezvous_faults,
    test_rendezvous_ops, test_netns: the store as a shared counter, an all_reduce as load).
    test_store_torch's client conformance and test_bad_input's torch server are 1.x on purpose
    (test_store_torch2 has 2.x); test_recovery* and test_worker_cli run no torch.
    """
    if request.param == "1.13":
        return TorchFamily("1.13", PYTHON)
    return TorchFamily("2.13", request.getfixturevalue("python2"))


def wait_for_port(proc, pattern, what, timeout=60):
    """Returns the port that `proc` printed on stdout (group 1 of `pattern`), within `timeout` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        m = re.search(pattern, proc.stdout)
        if m:
            return int(m.group(1))
        assert proc.popen.poll() is None, f"{what} exited: {proc.stderr}"
        time.sleep(0.05)
    pytest.fail(f"{what} did not report its port within {timeout} s")


@pytest.fixture
def dgt_run_job(tmp_path):
    """make(run_id, **kw) starts recovery_harness.DgtRunJob(tmp_path, run_id, **kw) (a
    dgt-rendezvous and its dgt-run agents); every job made is closed at the end of the test."""
    jobs = []

    def make(run_id, **kw):
        j = DgtRunJob(tmp_path, run_id, **kw)
        jobs.append(j)
        return j

    yield make
    for j in jobs:
        j.close()


def exact_descent(batches, steps):
    """The parameters (weights [w0, w1, w2], bias) that the test workers' linear model ends with
    after `steps` steps of gradient descent (lr 1/32) from w = [1/4, -1/2, 1/8], b = 1/2 on the
    mean over the members of their batches' mean squared error, i.e. what DDP's averaged
    gradients compute; exact, with fractions and no torch. batches(step) gives one (x, y) per
    member: x rows of 3 inputs, y one target per row.

    Asserts that the result is exact in float64 (few-bit dyadic rationals), so the workers'
    values compare bit for bit whatever order the all-reduce summed in."""
    w = [Fraction(1, 4), Fraction(-1, 2), Fraction(1, 8)]
    b = Fraction(1, 2)
    for step in range(steps):
        members = batches(step)
        gw, gb = [Fraction(0)] * 3, Fraction(0)
        for x, y in members:
            for xi, yi in zip(x, y):
                e = sum(wj * xj for wj, xj in zip(w, xi)) + b - yi
                scale = Fraction(2, len(x) * len(members))
                gw = [g + scale * e * xj for g, xj in zip(gw, xi)]
                gb += scale * e
        w = [wj - Fraction(1, 32) * g for wj, g in zip(w, gw)]
        b -= Fraction(1, 32) * gb
    for v in (*w, b):
        assert v.denominator & (v.denominator - 1) == 0 and abs(v.numerator) < 2**53, v
        assert Fraction(float(v)) == v
    return [float(v) for v in w], float(b)
