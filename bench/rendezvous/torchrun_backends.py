"""torchrun 2.x with --rdzv-backend=dgt against --rdzv-backend=c10d, N real torchrun agents on
loopback (one worker each), in one run (docs/PERFORMANCE.md, "torchrun backends").

For each N and backend: N `python -m torch.distributed.run --nnodes=N-1:N --nproc-per-node=1`
agents start at once (--nnodes=1:1 for N = 1; a run id per N; --rdzv-conf last_call_timeout=1
for both); the figures are
- first: seconds from launching the agents to the first worker started (of any round: when the
  agents' starts spread past the last call, a round of N-1 forms first);
- all: to the last worker of the round of all N started (bounded by --start-bound);
- kill: the last agent and its worker are killed with SIGKILL (as a lost node), then the seconds
  to the first and the last worker of the survivors' next round (world N-1), bounded by --bound
  ("none" past it). N = 1 has no kill.
Workers ("sleep", --agents) are plain Python (no torch import): they write when they start, then
sleep. Workers "gloo" (--gloo-agents) import torch, join a gloo process group, write, then
all-reduce every 0.1 s, so that a lost peer fails them (what makes c10d's agents start a new
round: they do not watch for a lost agent themselves). The c10d
store is hosted by agent 0 (--rdzv-conf is_host=1, the others 0), which is never the one killed.
dgt: one dgt-rendezvous (--bin) on loopback.

The dgt package is pip-installed (offline) into a temporary venv over the interpreter's
site-packages, as tests/e2e/test_torchrun_backend.py does.

Usage: $DGT_PYTHON2 bench/rendezvous/torchrun_backends.py --bin build/bin --agents 1 8 64 \
         --gloo-agents 4 8
"""
import argparse
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import sysconfig
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
WORKER = r'''
import json, os, sys, time
def started():
    out = os.path.join(sys.argv[1], f"{os.getpid()}.json")
    with open(out, "w") as f:
        json.dump({"t": time.time(), "world": int(os.environ["WORLD_SIZE"]),
                   "group_rank": int(os.environ["GROUP_RANK"])}, f)
if sys.argv[3] == "sleep":
    started()
    time.sleep(float(sys.argv[2]))
else:  # gloo: an all-reduce every 0.1 s; a lost peer fails it, and the worker exits 1.
    import torch, torch.distributed as dist
    dist.init_process_group("gloo")
    started()
    end = time.monotonic() + float(sys.argv[2])
    while time.monotonic() < end:
        dist.all_reduce(torch.ones(1))
        time.sleep(0.1)
'''


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def make_venv(tmp):
    shutil.copytree(REPO / "python", tmp / "src" / "python",
                    ignore=shutil.ignore_patterns("build", "*.egg-info", "__pycache__"))
    shutil.copytree(REPO / "proto", tmp / "src" / "proto")
    subprocess.run([sys.executable, "-m", "venv", tmp / "venv"], check=True, timeout=120)
    py = tmp / "venv" / "bin" / "python"
    mine = subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          capture_output=True, text=True, check=True).stdout.strip()
    Path(mine, "peers.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([py, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                    "--no-index", tmp / "src" / "python"], check=True, timeout=300)
    return str(py)


def start_rendezvous(bindir, tmp):
    log = open(tmp / "rdzv.out", "w+")
    p = subprocess.Popen([str(Path(bindir) / "dgt-rendezvous"), "--listen", "127.0.0.1:0"],
                         stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline:
        m = re.search(r"listening on port (\d+)", (tmp / "rdzv.out").read_text())
        if m:
            return p, f"127.0.0.1:{m.group(1)}"
        time.sleep(0.05)
    raise SystemExit("dgt-rendezvous did not report its port within 20 s")


def starts(out):
    recs = []
    for f in Path(out).glob("*.json"):
        try:
            recs.append(json.loads(f.read_text()))
        except ValueError:
            pass  # Being written.
    return recs


def wait_starts(out, world, count, deadline, after=0.0):
    """The sorted start times of `count` workers of a `world`-worker round started after `after`
    (time.time()), or None at `deadline` (time.monotonic())."""
    while time.monotonic() < deadline:
        got = [r for r in starts(out) if r["world"] == world and r["t"] > after]
        if len(got) >= count:
            return sorted(r["t"] for r in got)
        time.sleep(0.02)
    return None


def run_one(py, backend, endpoint, n, tmp, bound, workers, start_bound):
    out = tmp / f"{backend}-{n}-{workers}"
    out.mkdir()
    worker = tmp / "worker.py"
    worker.write_text(WORKER)
    env = dict(os.environ, OMP_NUM_THREADS="1", LOGLEVEL="WARNING")
    procs = []
    t0 = time.time()
    for i in range(n):
        conf = "last_call_timeout=1,join_timeout=120"
        if backend == "dgt":
            conf += f",node_id=n{i:03d}"
        else:
            conf += f",is_host={int(i == 0)}"  # Agent 0 hosts the store; it is never killed.
        procs.append(subprocess.Popen(
            [py, "-m", "torch.distributed.run", f"--rdzv-backend={backend}",
             f"--rdzv-endpoint={endpoint}", f"--rdzv-id={backend}-{n}-{workers}",
             f"--nnodes={max(1, n - 1)}:{n}",
             "--nproc-per-node=1", "--max-restarts=3", "--local-addr=127.0.0.1",
             f"--rdzv-conf={conf}", "--no-python", sys.executable, str(worker), str(out), "600", workers],
            stdout=subprocess.DEVNULL, stderr=open(out / f"agent{i}.err", "w"), env=env,
            start_new_session=True))
    row = {"backend": backend, "agents": n, "workers": workers}
    try:
        full = wait_starts(out, n, n, time.monotonic() + start_bound)
        any_start = [r["t"] for r in starts(out)]
        row["first"] = min(any_start) - t0 if any_start else None
        row["all"] = None if full is None else full[-1] - t0
        if full is None:
            return row
        if n == 1:
            return row
        time.sleep(1.0)
        t_kill = time.time()
        kill_node(procs[-1].pid)
        again = wait_starts(out, n - 1, n - 1, time.monotonic() + bound, after=t_kill)
        row["kill_first"] = None if again is None else again[0] - t_kill
        row["kill_all"] = None if again is None else again[-1] - t_kill
        return row
    finally:
        for p in procs:
            try:
                kill_node(p.pid)
            except Exception:  # noqa: BLE001 (gone already)
                pass
            p.wait(timeout=30)


def kill_node(pid):
    """SIGKILL to an agent and its workers (torchrun starts them in sessions of their own)."""
    import psutil
    victims = psutil.Process(pid).children(recursive=True)
    os.killpg(pid, signal.SIGKILL)
    for v in victims:
        try:
            v.kill()
        except psutil.NoSuchProcess:
            pass


def fmt(v):
    return "none" if v is None else f"{v:.2f}"


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bin", default=str(REPO / "build" / "bin"))
    ap.add_argument("--agents", type=int, nargs="+", default=[1, 8, 32, 64])
    ap.add_argument("--gloo-agents", type=int, nargs="*", default=[4, 8])
    ap.add_argument("--bound", type=float, default=30.0)
    ap.add_argument("--start-bound", type=float, default=240.0)
    ap.add_argument("--keep", default="", help="an empty directory for the logs, kept")
    args = ap.parse_args()
    if any(not 1 <= n <= 64 for n in args.agents + args.gloo_agents):
        raise SystemExit(f"--agents, --gloo-agents: each N must be 1..64, got "
                         f"{args.agents} {args.gloo_agents}")
    with tempfile.TemporaryDirectory(prefix="dgt-bench-torchrun-") as d:
        tmp = Path(args.keep) if args.keep else Path(d)
        py = make_venv(tmp)
        rdzv, endpoint = start_rendezvous(args.bin, tmp)
        rows = []
        try:
            runs = [(n, "sleep") for n in args.agents] + [(n, "gloo") for n in args.gloo_agents]
            for n, workers in runs:
                for backend in ("dgt", "c10d"):
                    ep = endpoint if backend == "dgt" else f"127.0.0.1:{free_port()}"
                    row = run_one(py, backend, ep, n, tmp, args.bound, workers, args.start_bound)
                    rows.append(row)
                    print(json.dumps(row), flush=True)
        finally:
            os.killpg(rdzv.pid, signal.SIGKILL)
            rdzv.wait(timeout=30)
    print("| agents | workers | backend | first worker, s | all N workers, s | kill -9 -> first of "
          "next round, s | -> all, s |")
    print("| ---: | --- | --- | ---: | ---: | ---: | ---: |")
    for r in rows:
        print(f"| {r['agents']} | {r['workers']} | {r['backend']} | {fmt(r.get('first'))} "
              f"| {fmt(r.get('all'))} "
              f"| {fmt(r.get('kill_first')) if r['agents'] > 1 else '-'} "
              f"| {fmt(r.get('kill_all')) if r['agents'] > 1 else '-'} |")


if __name__ == "__main__":
    main()
