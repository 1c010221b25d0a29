"""torchrun 2.13 command-line parity of dgt-run.

The option list comes from torchrun 2.13 itself: the peers venv's python imports
torch.distributed.run and walks its argparse parser, so a flag a later torchrun adds fails here
until dgt-run accepts it. Every process has a deadline.
"""
import json
import os
import re
import subprocess

import pytest

from conftest import BIN, PYTHON, WORKERS, dgt_env

DGT_RUN = BIN / "dgt-run"
SCRIPT = str(WORKERS / "parity_worker.py")

# Prints [option strings, nargs, default, choices] of every optional argument of torchrun's parser.
LIST_OPTIONS = r"""
import json
from torch.distributed.run import get_args_parser
out = []
for a in get_args_parser()._actions:
    if a.option_strings:
        d = a.default if isinstance(a.default, (str, int, float, type(None))) else None
        out.append([a.option_strings, a.nargs, d, list(a.choices) if a.choices else None])
print(json.dumps(out))
"""

# A value for the options whose torchrun default is empty or None (dgt-run refuses an empty one).
VALUES = {
    "--rdzv-endpoint": "localhost:29400",
    "--rdzv-conf": "join_timeout=5",
    "--log-dir": "/tmp",
    "--local-ranks-filter": "0",
    "--duplicate-stdout-filters": "loss",
    "--duplicate-stderr-filters": "warn",
    "--master-port": "29500",
    "--local-addr": "127.0.0.1",
    "--logs-specs": "custom",
    "--shutdown-timeout": "5",
}

# dgt-run's answer when every flag before it parsed: this error comes first in its checks.
SENTINEL = "--nproc-per-node=0"
SENTINEL_ERROR = "dgt-run: error: --nproc-per-node must be >= 1, got 0\n"


@pytest.fixture(scope="module")
def torchrun_options(python2):
    r = subprocess.run([python2, "-c", LIST_OPTIONS], capture_output=True, text=True, timeout=180)
    assert r.returncode == 0, r.stderr
    options = json.loads(r.stdout)
    assert ["--virtual-local-rank", "--virtual_local_rank"] in [o[0] for o in options]
    return options


def run(args, env=None, timeout=30):
    return subprocess.run([str(DGT_RUN)] + [str(a) for a in args], capture_output=True, text=True,
                          timeout=timeout, env=env or dgt_env(), stdin=subprocess.DEVNULL)


def test_help_lists_every_torchrun_option(torchrun_options):
    r = run(["--help"])
    assert r.returncode == 0, r.stderr
    listed = set(re.findall(r"(?<![\w-])(--?[A-Za-z][\w-]*)", r.stdout))
    missing = [s for strings, _, _, _ in torchrun_options for s in strings if s not in listed]
    assert missing == [], missing


def test_every_torchrun_option_parses_in_both_spellings(torchrun_options):
    """Each option string of torchrun 2.13, with a value it accepts when it takes one, followed by
    a flag dgt-run refuses: reaching that refusal means the option and its value were taken (an
    unknown option would have become the script; a flag taking a value would have eaten the
    sentinel)."""
    checked = 0
    for strings, nargs, default, choices in torchrun_options:
        if "--help" in strings:
            continue
        long_name = next(s for s in strings if s.startswith("--"))
        if nargs == 0:
            value = []
        elif choices:
            value = [choices[0]]
        elif long_name in VALUES:
            value = [VALUES[long_name]]
        else:
            assert default not in (None, ""), f"new torchrun option {long_name}: add a value"
            value = [str(default)]
        for s in strings:
            r = run([s] + value + [SENTINEL, SCRIPT])
            assert (r.returncode, r.stderr) == (2, SENTINEL_ERROR), (s, value, r.stderr)
            checked += 1
    assert checked == 57  # torchrun 2.13: 33 options (-h aside) with 57 option strings.


@pytest.mark.parametrize("args,message", [
    (["--numa-binding=node", SCRIPT],
     "dgt-run: error: --numa-binding=node is not supported on this host: dgt-run does not bind "
     "workers to NUMA nodes (torchrun 2.13 runs each worker under numactl); start the script "
     "through numactl yourself (--no-python with a wrapper), or leave the flag out\n"),
    (["--numa_binding", "gpu", SCRIPT],
     "dgt-run: error: --numa-binding must be one of node, socket, exclusive, core-complex (as "
     "torchrun 2.13), got 'gpu'\n"),
    (["--event-log-handler=file", SCRIPT],
     "dgt-run: error: --event-log-handler must be one of console, dynamic_rendezvous, null (the "
     "handlers torchrun 2.13 registers), got 'file'\n"),
    (["--nnodes=2", "--rdzv-endpoint=127.0.0.1:0", SCRIPT],
     "dgt-run: error: --rdzv-endpoint=127.0.0.1:0: port 0 (a free port) is for a single node, but "
     "--nnodes=2; give the port every node connects to\n"),
    (["--shutdown-timeout=soon", SCRIPT],
     "dgt-run: error: --shutdown-timeout must be a number of seconds from 0 to 31536000 (a year), "
     "got 'soon'\n"),
    (["--rdzv-endpoint=192.0.2.7:0", SCRIPT],
     "dgt-run: error: --rdzv-endpoint=192.0.2.7:0: port 0 asks for a free port here, but "
     "192.0.2.7 is not an address of this host\n"),
])
def test_bad_values_are_usage_errors(args, message):
    r = run(args)
    assert r.returncode == 2, r.stderr
    assert r.stderr.endswith(message), r.stderr
    assert "rendezvous on the free port" not in r.stderr


def test_torchrun_2_features_in_one_job(tmp_path):
    """--rdzv-endpoint localhost:0, "--" before the script (and the script's own "--"),
    --virtual-local-rank, PYTHON_EXEC, TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE, -t with
    --duplicate-stdout-filters/--duplicate-stderr-filters, --shutdown-timeout,
    --event-log-handler and --logs-specs, in one 2-worker job."""
    interpreter = tmp_path / "python-exec.sh"
    interpreter.write_text(f'#!/bin/sh\nPARITY_INTERPRETER=1 exec {PYTHON} "$@"\n')
    interpreter.chmod(0o755)
    env = dgt_env(PYTHON_EXEC=interpreter, CUDA_VISIBLE_DEVICES="3,5",
                  TORCHELASTIC_LOG_LINE_PREFIX_TEMPLATE="<${role_name}:${rank}/${local_rank}> ")
    logs = tmp_path / "logs"
    r = run(["--rdzv-backend=c10d", "--rdzv-endpoint=localhost:0", "--rdzv-id=parity",
             "--nproc-per-node=2", "--role=trainer", "--virtual-local-rank", "--log-dir", logs,
             "-t", "0:3,1:1", "--duplicate-stdout-filters", "loss,,x,acc",
             "--duplicate_stderr_filters=warn", "--shutdown-timeout=5",
             "--event-log-handler=console", "--logs-specs=custom",
             "--", SCRIPT, "a", "--", "b"], env=env, timeout=90)
    assert r.returncode == 0, r.stderr
    assert re.search(r"--rdzv-endpoint=localhost:0: rendezvous on the free port "
                     r"127\.0\.0\.1:\d+\n", r.stderr), r.stderr
    assert "--logs-specs=custom is ignored" in r.stderr
    records = {}
    for line in r.stdout.splitlines():
        m = re.match(r"^<trainer:(\d)/(\d)> (\{.*\})$", line)
        if m:
            record = json.loads(m.group(3))
            assert record["rank"] == int(m.group(1)) == int(m.group(2)), line
            records[record["rank"]] = record
    assert sorted(records) == [0, 1], r.stdout
    for rank, rec in records.items():
        assert rec["argv"] == ["a", "--", "b"]
        assert rec["LOCAL_RANK"] == "0"
        assert rec["CUDA_VISIBLE_DEVICES"] == ["3", "5"][rank]
        assert rec["PARITY_INTERPRETER"] == "1"
        assert rec["TORCHELASTIC_RUN_ID"] == "parity"
        assert rec["MASTER_ADDR"] == "127.0.0.1"
        assert rec["TORCHELASTIC_SIGNALS_TO_HANDLE"] == "SIGTERM,SIGINT,SIGHUP,SIGQUIT"
        assert f"<trainer:{rank}/{rank}> noise" in r.stdout.splitlines()
    [run_dir] = list(logs.iterdir())
    attempt = run_dir / "attempt_0"
    # Tee'd streams only, as torchrun: rank 0 tees both, rank 1 stdout only.
    assert sorted(attempt.joinpath("filtered_stdout.log").read_text().splitlines()) == [
        "<trainer:0/0> acc 0", "<trainer:0/0> loss,x=0", "<trainer:1/1> acc 1",
        "<trainer:1/1> loss,x=1"]
    assert attempt.joinpath("filtered_stderr.log").read_text() == "<trainer:0/0> warn 0\n"
    assert attempt.joinpath("0", "stderr.log").read_text() == "warn 0\nquiet\n"
    assert not attempt.joinpath("1", "stderr.log").exists()
