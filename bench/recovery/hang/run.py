#!/usr/bin/env python3
"""Hung-rank detection: the time from a hung rank's last progress report to its process being
gone (killed by the launcher), dgt against NVRx's rank heartbeat with the same timeout.

One node, 2 ranks of bench/recovery/hang/worker.py (no torch: the launchers' detection alone).
Both report every 10 ms; rank 1 stops after 50 reports and sleeps. The bench polls the rank's
/proc entry every millisecond; "gone" is the first poll that finds it missing or a zombie.
Rows, each --rounds (5) times per timeout in --timeouts (default 1,5 seconds):
  dgt          dgt-run --standalone --nproc-per-node=2 --hang-timeout=T (dgt.progress()); the
               agent writes the rank's stacks before the kill (faulthandler, ~10-30 ms)
  nvrx         ft_launcher --standalone --nproc-per-node=2
               --ft-param-rank_heartbeat_timeout=T (RankMonitorClient.send_heartbeat(), NVRx
               0.4.1 as pinned in scripts/peers-requirements.txt) with its default
               --ft-param-workload_check_interval (5 s)
  nvrx-fast    the same with --ft-param-workload_check_interval=0.05
Prints per row and timeout the median and max of (gone - last report) - T in ms: the latency
beyond the timeout (dgt's target: within 200 ms).

--micro prints the cost of one report instead: dgt.progress() (Python, with a slot and without
one) and dgt::worker::Progress() (C++, build/bin/progress_bench), in ns per call.

    source scripts/python-env.sh
    bench/recovery/hang/run.py [--rounds 5] [--timeouts 1,5] [--rows dgt,nvrx,nvrx-fast]
    bench/recovery/hang/run.py --micro
"""
import argparse
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[2]
BIN = Path(os.environ.get("DGT_BIN_DIR", REPO / "build" / "bin"))
PY2 = os.environ.get("DGT_PYTHON2", "/opt/dgt/peers-venv/bin/python")
LAST = re.compile(r"LAST rank=(\d+) n=(\d+) pid=(\d+) t_ns=(\d+)")


def gone(pid):
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return True
    return text[text.rindex(")") + 2] in "ZX"


def one(row, timeout, out_dir):
    worker = [str(HERE / "worker.py"), "--mode", "dgt" if row == "dgt" else "nvrx"]
    if row == "dgt":
        cmd = [str(BIN / "dgt-run"), "--standalone", "--nproc-per-node=2",
               f"--hang-timeout={timeout}", "--no-python", PY2, *worker]
    else:
        cmd = [str(Path(PY2).parent / "ft_launcher"), "--standalone", "--nproc-per-node=2",
               "--max-restarts=0", f"--ft-param-rank_heartbeat_timeout={timeout}",
               "--ft-param-initial_rank_heartbeat_timeout=60"]
        if row == "nvrx-fast":
            cmd.append("--ft-param-workload_check_interval=0.05")
        cmd += worker
    env = dict(os.environ, PYTHONPATH=str(REPO / "python"), PYTHONUNBUFFERED="1")
    out = open(out_dir / "out.txt", "wb+")
    p = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                         env=env, start_new_session=True)
    try:
        deadline = time.monotonic() + 60 + 2 * timeout
        pid, t_gone = None, None
        while time.monotonic() < deadline:
            text = (out_dir / "out.txt").read_text(errors="replace")
            if pid is None:
                m = [x for x in LAST.findall(text) if x[0] == "1"]
                if m:
                    pid = int(m[0][2])
            elif gone(pid):
                t_gone = time.time_ns()
                break
            time.sleep(0.001)
        assert t_gone is not None, f"{row}: rank 1 not gone in time:\n{text[-2000:]}"
        time.sleep(0.05)
        last = max(int(x[3]) for x in LAST.findall((out_dir / "out.txt").read_text(
            errors="replace")) if x[0] == "1")
        return (t_gone - last) / 1e6 - timeout * 1000
    finally:
        try:
            os.killpg(p.pid, 9)
        except ProcessLookupError:
            pass
        p.wait(timeout=30)
        out.close()


MICRO = r"""
import os, sys, tempfile, timeit
sys.path.insert(0, sys.argv[1])
with tempfile.NamedTemporaryFile() as f:
    f.write(b"\0" * 64)
    f.flush()
    if sys.argv[2] == "slot":
        os.environ.update(DGT_PROGRESS_FILE=f.name, DGT_PROGRESS_SLOT="0")
    import dgt
    assert dgt.progress_channel.enabled() == (sys.argv[2] == "slot")
    n = 2_000_000
    best = min(timeit.repeat(dgt.progress, number=n, repeat=5))
    print(f"{best / n * 1e9:.0f}")
"""


# What hang detection adds to a DDP step: a one-process Gloo group, the torch_trainer bench's
# model (MLP 4x896, batch 32), forward and backward with DDP as a user builds it (plain) against
# DDP as dgt.recovery.Trainer builds it under --hang-timeout (the communication hook that marks
# all-reduces as waits, gradients as bucket views), and the hook alone; the rows alternate, 20
# rounds of 30 steps each, median of the per-round means.
HOOK = r"""
import os, statistics, sys, tempfile, time
sys.path.insert(0, sys.argv[1])
import torch, torch.distributed as dist
from torch.nn.parallel import DistributedDataParallel as DDP
torch.set_num_threads(1)
with tempfile.NamedTemporaryFile() as f:
    f.write(b"\0" * 64)
    f.flush()
    os.environ.update(DGT_PROGRESS_FILE=f.name, DGT_PROGRESS_SLOT="0")
    from dgt import recovery
    store = dist.TCPStore("127.0.0.1", 0, 1, True)
    dist.init_process_group("gloo", store=store, rank=0, world_size=1)
    def model():
        torch.manual_seed(0)
        return torch.nn.Sequential(*[m for _ in range(4)
                                     for m in (torch.nn.Linear(896, 896), torch.nn.ReLU())])
    rows = {"plain": DDP(model()), "trainer": DDP(model(), gradient_as_bucket_view=True),
            "hook only": DDP(model())}
    for name in ("trainer", "hook only"):
        rows[name].register_comm_hook(None, recovery._waiting_allreduce_hook)
    x = torch.randn(32, 896)
    def step(m):
        t = time.perf_counter_ns()
        m(x).sum().backward()
        return time.perf_counter_ns() - t
    for m in rows.values():
        for _ in range(20):
            step(m)
    means = {k: [] for k in rows}
    for _ in range(20):
        for k, m in rows.items():
            means[k].append(statistics.mean(step(m) for _ in range(30)))
    for k, v in means.items():
        print(f"{k}={statistics.median(v) / 1e6:.2f}")
"""


def micro():
    for what in ("slot", "none"):
        r = subprocess.run([PY2, "-c", MICRO, str(REPO / "python"), what], capture_output=True,
                           text=True, timeout=300, check=True)
        label = "with dgt-run's slot" if what == "slot" else "without a slot (no-op)"
        print(f"dgt.progress() {label}: {r.stdout.strip()} ns per call (best of 5 x 2M)")
    r = subprocess.run([str(BIN / "progress_bench")], capture_output=True, text=True,
                       timeout=300, check=True)
    print(r.stdout.strip())
    r = subprocess.run([PY2, "-c", HOOK, str(REPO / "python")], capture_output=True,
                       text=True, timeout=600, check=True,
                       env=dict(os.environ, OMP_NUM_THREADS="1"))
    ms = dict(line.split("=") for line in r.stdout.splitlines())
    print("DDP step (MLP 4x896, batch 32, one Gloo rank), ms: " +
          ", ".join(f"{k} {v}" for k, v in ms.items()) +
          f"; trainer vs plain {100 * (float(ms['trainer']) / float(ms['plain']) - 1):+.1f} %")


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--timeouts", default="1,5")
    ap.add_argument("--rows", default="dgt,nvrx,nvrx-fast")
    ap.add_argument("--micro", action="store_true", help="ns per progress report instead")
    args = ap.parse_args()
    if args.micro:
        micro()
        return 0
    rows = args.rows.split(",")
    timeouts = [float(t) for t in args.timeouts.split(",")]
    results = {}
    with tempfile.TemporaryDirectory() as d:
        for r in range(args.rounds):
            for timeout in timeouts:
                for row in rows:
                    ms = one(row, timeout, Path(d))
                    results.setdefault((row, timeout), []).append(ms)
                    print(f"round {r + 1} {row} T={timeout:g}: +{ms:.0f} ms", flush=True)
    print("\nrow        timeout  beyond the timeout, ms: median  max   (last report -> gone)")
    for (row, timeout), v in sorted(results.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        print(f"{row:10} {timeout:6g} s  {statistics.median(v):8.0f} {max(v):6.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
