"""Launch benchmark: dgt-run vs Debian's torchrun (1.13) vs bare processes, same short PyTorch
job with 4 workers on one node; then a worker crash under --max-restarts=1 (exit of the crashed
worker to the start of its replacement, measured at the first line of the replacement's script).
Prints figures; not a timed test. Loopback only; every run has a deadline.

Usage: /usr/bin/python3 bench/launch/bench_launch.py [--bin build/bin] [--reps 3]
"""
import argparse
import datetime
import json
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SCRIPT = HERE / "allreduce.py"
PY = "/usr/bin/python3"
NPROC = 4
DEADLINE_S = 180


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_measured(args, env=None):
    """Runs args to completion; returns (seconds, peak RSS of the launcher in MiB, stderr)."""
    start = time.monotonic()
    p = subprocess.Popen(args, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                         text=True)
    peak = 0
    deadline = start + DEADLINE_S
    while p.poll() is None and time.monotonic() < deadline:
        try:
            for line in Path(f"/proc/{p.pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    peak = max(peak, int(line.split()[1]))
        except (FileNotFoundError, ProcessLookupError):
            pass
        time.sleep(0.01)
    if p.poll() is None:
        p.kill()
    rc = p.wait(timeout=10)
    elapsed = time.monotonic() - start
    err = p.stderr.read()
    if rc != 0:
        raise RuntimeError(f"{args[0]} exited {rc}: {err[-2000:]}")
    return elapsed, peak / 1024.0, err


def bare():
    port = free_port()
    start = time.monotonic()
    procs = []
    for r in range(NPROC):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(NPROC),
                   LOCAL_WORLD_SIZE=str(NPROC), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([PY, "-u", str(SCRIPT)], env=env,
                                      stdout=subprocess.DEVNULL))
    for p in procs:
        if p.wait(timeout=DEADLINE_S) != 0:
            raise RuntimeError("bare worker failed")
    return time.monotonic() - start, 0.0, ""


def dgt(bin_dir, extra=(), script_args=()):
    env = dict(os.environ, DGT_PYTHON=PY)
    return run_measured([str(bin_dir / "dgt-run"), "--standalone", f"--nproc-per-node={NPROC}",
                         *extra, str(SCRIPT), *script_args], env=env)


def torchrun(log_dir, extra=(), script_args=()):
    return run_measured(["/usr/bin/torchrun", "-r", "1", "-t", "1", "--log_dir", log_dir,
                         "--standalone", f"--nproc_per_node={NPROC}", *extra, str(SCRIPT),
                         *script_args])


def restart_latency(launch, extra_args=()):
    """(crash -> replacement's first line, crash -> agent logged the restart or None), in ms."""
    with tempfile.TemporaryDirectory() as marks:
        _, _, err = launch(("--crash-once", marks, *extra_args))
        crash = float(Path(marks, "crash").read_text())
        start = float(Path(marks, "start_1_1").read_text())
        agent = None
        for line in err.splitlines():
            if line.startswith("{") and '"msg":"dgt-run: restarted' in line:
                rec = json.loads(line)
                t = datetime.datetime.strptime(rec["time"], "%Y-%m-%dT%H:%M:%S.%fZ")
                agent = (t.replace(tzinfo=datetime.timezone.utc).timestamp() - crash) * 1000.0
        return (start - crash) * 1000.0, agent


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=str(HERE.parents[1] / "build" / "bin"))
    parser.add_argument("--reps", type=int, default=3)
    args = parser.parse_args()
    bin_dir = Path(args.bin)
    logs = tempfile.mkdtemp(prefix="bench-launch-")
    results = {"bare": [], "dgt-run": [], "torchrun": []}
    rss = {"dgt-run": [], "torchrun": []}
    for _ in range(args.reps):  # Interleaved, so drift hits all three alike.
        results["bare"].append(bare()[0])
        t, m, _ = dgt(bin_dir)
        results["dgt-run"].append(t)
        rss["dgt-run"].append(m)
        t, m, _ = torchrun(logs)
        results["torchrun"].append(t)
        rss["torchrun"].append(m)
    med = {k: statistics.median(v) for k, v in results.items()}
    print(f"launch, {NPROC} workers, median of {args.reps} (min..max), seconds:")
    for k, v in results.items():
        print(f"  {k:9s} {med[k]:.2f}  ({min(v):.2f}..{max(v):.2f})")
    print(f"  dgt/bare = {med['dgt-run'] / med['bare']:.3f}   "
          f"dgt/torchrun = {med['dgt-run'] / med['torchrun']:.3f}")
    print(f"  launcher peak RSS (VmHWM): dgt-run {max(rss['dgt-run']):.1f} MiB, "
          f"torchrun {max(rss['torchrun']):.1f} MiB")
    def show(name, samples):
        first = [a for a, _ in samples]
        line = (f"  {name:34s} {statistics.median(first):5.0f}  "
                f"({min(first):.0f}..{max(first):.0f})")
        agent = [b for _, b in samples if b is not None]
        if agent:
            line += f"; agent restart logged after {statistics.median(agent):.0f} ms"
        print(line)

    print("crashed worker exit -> replacement's first line, ms, median (min..max):")
    for policy in ("group", "rank"):
        show(f"dgt-run --restart-policy={policy}",
             [restart_latency(lambda a: dgt(bin_dir, ["--max-restarts=1", "--log-format=json",
                                                      f"--restart-policy={policy}"], a),
                             () if policy == "group" else ("--no-torch",))
              for _ in range(args.reps)])
    show("torchrun --monitor_interval=0.1",
         [restart_latency(lambda a: torchrun(logs, ["--max_restarts=1",
                                                    "--monitor_interval=0.1"], a))
          for _ in range(args.reps)])
    return 0


if __name__ == "__main__":
    sys.exit(main())
