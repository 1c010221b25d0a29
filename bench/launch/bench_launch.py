"""Launch benchmark: dgt-run vs torchrun vs bare processes, same short PyTorch job with 4 workers
on one node; then a worker crash under --max-restarts=1 (exit of the crashed worker to the start
of its replacement, measured at the first line of the replacement's script). Each torch family
runs in the same invocation, interleaved: 1.13 (Debian's /usr/bin/python3 and /usr/bin/torchrun)
and 2.13 (DGT_PYTHON2, default /opt/dgt/peers-venv/bin/python, its `-m torch.distributed.run`);
the workers of bare processes, dgt-run and torchrun of one family run that family's Python and
torch. Prints figures and the verdict per target; not a timed test. Loopback only (a loopback-only
network namespace, bench/netns.py); every run has a deadline.

Usage: /usr/bin/python3 bench/launch/bench_launch.py [--bin build/bin] [--reps 3]
           [--families 1.13,2.13]
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
sys.path.insert(0, str(HERE.parent))
import netns  # noqa: E402

SCRIPT = HERE / "allreduce.py"
PY2 = os.environ.get("DGT_PYTHON2", "/opt/dgt/peers-venv/bin/python")
# Per torch family: the workers' interpreter, and torchrun's command up to the launch flags.
# torchrun 1.13 under Python 3.11 needs -r 1 -t 1 (REFERENCE.md §8); 2.13 runs with its defaults.
FAMILIES = {
    "1.13": {"python": "/usr/bin/python3",
             "torchrun": lambda log_dir: ["/usr/bin/torchrun", "-r", "1", "-t", "1",
                                          "--log_dir", log_dir]},
    "2.13": {"python": PY2,
             "torchrun": lambda log_dir: [PY2, "-m", "torch.distributed.run",
                                          "--log_dir", log_dir]},
}
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


def bare(py):
    port = free_port()
    start = time.monotonic()
    procs = []
    err = tempfile.TemporaryFile(mode="w+")  # Shown only when a worker fails.
    for r in range(NPROC):
        env = dict(os.environ, RANK=str(r), LOCAL_RANK=str(r), WORLD_SIZE=str(NPROC),
                   LOCAL_WORLD_SIZE=str(NPROC), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                   OMP_NUM_THREADS="1")
        procs.append(subprocess.Popen([py, "-u", str(SCRIPT)], env=env,
                                      stdout=subprocess.DEVNULL, stderr=err))
    for p in procs:
        if p.wait(timeout=DEADLINE_S) != 0:
            err.seek(0)
            raise RuntimeError(f"bare worker failed: {err.read()[-2000:]}")
    err.close()
    return time.monotonic() - start, 0.0, ""


def dgt(py, bin_dir, extra=(), script_args=()):
    env = dict(os.environ, DGT_PYTHON=py)
    return run_measured([str(bin_dir / "dgt-run"), "--standalone", f"--nproc-per-node={NPROC}",
                         *extra, str(SCRIPT), *script_args], env=env)


def torchrun(family, log_dir, extra=(), script_args=()):
    return run_measured([*FAMILIES[family]["torchrun"](log_dir), "--standalone",
                         f"--nproc_per_node={NPROC}", *extra, str(SCRIPT), *script_args])


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


def med(v):
    return statistics.median(v) if v else float("nan")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--bin", default=str(HERE.parents[1] / "build" / "bin"))
    parser.add_argument("--reps", type=int, default=3)
    parser.add_argument("--families", default="1.13,2.13",
                        help="torch families to run, comma-separated (newest last)")
    args = parser.parse_args()
    netns.enter()
    families = args.families.split(",")
    for fam in families:
        if fam not in FAMILIES:
            parser.error(f"--families: unknown family {fam!r} (known: {', '.join(FAMILIES)})")
        py = FAMILIES[fam]["python"]
        if subprocess.run([py, "-c", "import torch"], capture_output=True).returncode != 0:
            parser.error(f"torch {fam}: {py} cannot import torch (DGT_PYTHON2 / "
                         "scripts/install-deps.sh)")
    newest = families[-1]
    bin_dir = Path(args.bin)
    logs = tempfile.mkdtemp(prefix="bench-launch-")
    kinds = ("bare", "dgt-run", "torchrun")
    results = {(f, k): [] for f in families for k in kinds}
    rss = {(f, k): [] for f in families for k in ("dgt-run", "torchrun")}
    for _ in range(args.reps):  # Interleaved, so drift hits every launcher and family alike.
        for fam in families:
            py = FAMILIES[fam]["python"]
            results[(fam, "bare")].append(bare(py)[0])
            t, m, _ = dgt(py, bin_dir)
            results[(fam, "dgt-run")].append(t)
            rss[(fam, "dgt-run")].append(m)
            t, m, _ = torchrun(fam, logs)
            results[(fam, "torchrun")].append(t)
            rss[(fam, "torchrun")].append(m)
    print(f"launch, {NPROC} workers, one node, median of {args.reps} (min..max), seconds; "
          "columns: torch family of the workers and of torchrun")
    print(f"  {'':22s}" + "".join(f" {'torch ' + f:>22s}" for f in families))
    for k in kinds:
        cells = []
        for f in families:
            v = results[(f, k)]
            cells.append(f"{med(v):.2f} ({min(v):.2f}..{max(v):.2f})")
        print(f"  {k + (' ' + '/'.join(families) if k == 'torchrun' else ''):22s}" +
              "".join(f" {c:>22s}" for c in cells))
    ratio = {f: {"bare": med(results[(f, "dgt-run")]) / med(results[(f, "bare")]),
                 "torchrun": med(results[(f, "dgt-run")]) / med(results[(f, "torchrun")])}
             for f in families}
    print(f"  {'dgt/bare':22s}" + "".join(f" {ratio[f]['bare']:22.3f}" for f in families))
    print(f"  {'dgt/torchrun':22s}" + "".join(f" {ratio[f]['torchrun']:22.3f}" for f in families))
    print("  launcher peak RSS (VmHWM), MiB: " + ", ".join(
        f"dgt-run ({f} workers) {max(rss[(f, 'dgt-run')]):.1f}, torchrun {f} "
        f"{max(rss[(f, 'torchrun')]):.1f}" for f in families))

    crash = {}

    def summary(samples):
        first = [a for a, _ in samples]
        agent = [b for _, b in samples if b is not None]
        line = f"{med(first):5.0f}  ({min(first):.0f}..{max(first):.0f})"
        if agent:
            line += f"; agent restart logged after {med(agent):.0f} ms"
        return line, med(first), (med(agent) if agent else None)

    samples = {}
    for _ in range(args.reps):  # Interleaved as above.
        for fam in families:
            py = FAMILIES[fam]["python"]
            for policy in ("group", "rank"):
                samples.setdefault((fam, f"dgt-run --restart-policy={policy}"), []).append(
                    restart_latency(lambda a, policy=policy, py=py: dgt(
                        py, bin_dir, ["--max-restarts=1", "--log-format=json",
                                      f"--restart-policy={policy}"], a),
                        () if policy == "group" else ("--no-torch",)))
            samples.setdefault((fam, f"torchrun {fam} --monitor_interval=0.1"), []).append(
                restart_latency(lambda a, fam=fam: torchrun(
                    fam, logs, ["--max_restarts=1", "--monitor_interval=0.1"], a)))
    print("crashed worker exit -> replacement's first line, ms, median (min..max):")
    for (fam, name), v in samples.items():
        line, first, agent = summary(v)
        crash[(fam, name.split(" ")[0] if name.startswith("torchrun") else name)] = (first, agent)
        print(f"  [{fam} workers] {name:36s} {line}")

    # Verdict per target (docs/PERFORMANCE.md); "newest" is the last family, torch 2.13 by default.
    n = newest
    print(f"\nverdict per target (newest anchor: torchrun {n}, {n} workers; medians):")
    for f in families:
        print(f"  dgt-run/bare <= 1.05, {f} workers: {ratio[f]['bare']:.3f} "
              f"({'met' if ratio[f]['bare'] <= 1.05 else 'NOT MET'})")
    for f in families:
        print(f"  dgt-run/torchrun {f} <= 0.5: {ratio[f]['torchrun']:.3f} "
              f"({'met' if ratio[f]['torchrun'] <= 0.5 else 'NOT MET'})")
    rss_dgt = max(max(rss[(f, "dgt-run")]) for f in families)
    print(f"  launcher RSS < 30 MB: dgt-run {rss_dgt * 1.048576:.1f} MB "
          f"({'met' if rss_dgt * 1.048576 < 30 else 'NOT MET'})")
    agents = [(k, v[1]) for k, v in crash.items() if v[1] is not None and k[0] == n]
    for (fam, name), ms in agents:
        print(f"  worker exit -> replacement started < 50 ms, {name}: agent {ms:.0f} ms "
              f"({'met' if ms < 50 else 'NOT MET'})")
    rows = [("launch time", med(results[(n, "dgt-run")]), med(results[(n, "torchrun")])),
            ("launcher RSS", max(rss[(n, "dgt-run")]), max(rss[(n, "torchrun")])),
            ("crash -> replacement's first line (group restart)",
             crash[(n, "dgt-run --restart-policy=group")][0], crash[(n, "torchrun")][0])]
    behind = [name for name, d, t in rows if not d < t]
    print(f"  dgt ahead of torchrun {n} on every row (launch time, launcher RSS, crash -> "
          "replacement): " + ("yes" if not behind else "NO, behind on " + ", ".join(behind)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
