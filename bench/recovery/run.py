#!/usr/bin/env python3
"""Recovery benchmark: time from a rank's death (SIGKILL) to every rank back in a collective,
in-place (policy `rank`: one replacement, survivors keep their process) versus a group restart
(policy `group`: every worker killed and started again), same job, one run each per round.

A 4-rank examples/allreduce_trainer job on Gloo over loopback. "Back" is the latest
CLOCK_REALTIME at which a rank finished its first collective after the failure (the trainer
prints it).
  --launcher dgt-run (default): the real launcher, a dgt-rendezvous and --nodes dgt-run agents x
      --nproc ranks (default 2 x 2); `--restart-policy rank` versus `--restart-policy group`
      (whose restart is a new rendezvous round on every node).
  --launcher harness: tests/e2e/recovery_harness.py plays the agent against `dgt store serve`
      and restarts at once (no agent, no rendezvous).
    bench/recovery/run.py [--launcher dgt-run|harness] [--rounds 5]
"""
import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e"))
from recovery_harness import DgtRunJob, Job  # noqa: E402


def back_time(job, since_ns, timeout=60):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        backs = {}
        for r, w in job.workers.items():
            for kind, f in w.events():
                if kind == "back" and int(f["t_ns"]) > since_ns:
                    backs[r] = int(f["t_ns"])
        if len(backs) == job.world:
            return max(backs.values())
        time.sleep(0.005)
    raise RuntimeError("not every rank came back in time")


def one(mode, out_dir, world, steps):
    job = Job(out_dir, world=world, steps=steps, step_ms=10, mode="replace")
    try:
        job.start()
        job.wait_for_step(2, 50)
        t0 = job.kill_rank(2)
        if mode == "in-place":
            job.replace_rank(2)
        else:
            job.restart_group(fresh_store=True)
        t1 = back_time(job, t0)
        codes = job.wait_all(timeout=120)
        assert all(c == 0 for c in codes.values()), codes
        # Steps done again: progress at the failure minus the step the job resumed from.
        redone = 0
        if mode == "in-place":
            for r in (0, 1, 3):
                ev = job.workers[r].events()
                failed = [int(f["step"]) for k, f in ev if k == "failure"]
                resumed = [int(f["resume"]) for k, f in ev if k == "synced"]
                redone = max(redone, failed[0] - resumed[0])
        else:
            # No checkpoint: every rank starts from step 0; progress at the kill is estimated
            # from the killed rank's clock (joined -> kill, step_ms per step, lower bound).
            joined = [int(f["t_ns"]) for k, f in job.retired[0].events() if k == "joined"][0]
            redone = int((t0 - joined) / 1e6 / job.step_ms)
        return (t1 - t0) / 1e6, redone
    finally:
        job.close()


def one_dgt_run(mode, out_dir, nodes, nproc, steps):
    policy = "group" if mode == "group" else "rank"
    job = DgtRunJob(out_dir, f"bench-{mode}", policy=policy,
                    mode="shrink" if mode == "shrink" else "replace", nodes=nodes, nproc=nproc,
                    steps=steps, step_ms=10)
    try:
        pids = job.joined_pids()
        time.sleep(0.5)
        victim = job.world // 2
        t0 = job.kill_pid(pids[victim])
        members = job.world - 1 if mode == "shrink" else job.world
        t1 = job.back_time(t0, count=members)
        codes = job.wait(timeout=120)
        assert codes == [0] * nodes, [job.stderr(i)[-2000:] for i in range(nodes)]
        done = {}
        for r, k, f in job.events():
            if k == "done":
                done[r] = f
        assert len(done) == members, done
        assert len({f["total"] for f in done.values()}) == 1, done  # Exact: checked per step.
        redone = 0
        if mode != "group":
            ev = job.events()
            for r in pids:
                if r == victim:
                    continue
                failed = [int(f["step"]) for rr, k, f in ev if rr == r and k == "failure"]
                resumed = [int(f["resume"]) for rr, k, f in ev if rr == r and k == "synced"]
                redone = max(redone, failed[0] - resumed[0])
        else:
            joined = [int(f["t_ns"]) for r, k, f in job.events() if r == victim and k == "joined"]
            redone = int((t0 - joined[0]) / 1e6 / job.step_ms)
        return (t1 - t0) / 1e6, redone
    finally:
        job.close()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--world", type=int, default=4)
    ap.add_argument("--steps", type=int, default=150)
    ap.add_argument("--launcher", choices=["dgt-run", "harness"], default="dgt-run")
    ap.add_argument("--nodes", type=int, default=2, help="dgt-run agents (--launcher dgt-run)")
    ap.add_argument("--nproc", type=int, default=2, help="ranks per agent (--launcher dgt-run)")
    a = ap.parse_args()
    if a.launcher == "dgt-run":
        a.world = a.nodes * a.nproc
    modes = ["in-place", "group"] + (["shrink"] if a.launcher == "dgt-run" else [])
    res = {m: [] for m in modes}
    lost = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.rounds):
            for mode in res:
                sub = Path(d) / f"{mode}-{i}"
                sub.mkdir()
                if a.launcher == "dgt-run":
                    ms, redone = one_dgt_run(mode, sub, a.nodes, a.nproc, a.steps)
                else:
                    ms, redone = one(mode, sub, a.world, a.steps)
                res[mode].append(ms)
                lost[mode].append(redone)
    layout = f" ({a.nodes} agents x {a.nproc})" if a.launcher == "dgt-run" else ""
    print(f"recovery bench: launcher={a.launcher}{layout} world={a.world} rounds={a.rounds} "
          "(ms from SIGKILL to all ranks back in a collective)")
    print("| policy | median ms | min ms | max ms | steps redone (median) | back at the failed "
          "step, ms (derived: median + redone x 10 ms) |")
    print("| --- | --- | --- | --- | --- | --- |")
    for mode, v in res.items():
        redone = statistics.median(lost[mode])
        print(f"| {mode} | {statistics.median(v):.1f} | {min(v):.1f} | {max(v):.1f} | "
              f"{redone:g} | {statistics.median(v) + redone * 10:.0f} |")
    ratio = statistics.median(res["group"]) / statistics.median(res["in-place"])
    print(f"group / in-place (medians): {ratio:.2f}x")
    derived = [statistics.median(res[m]) + statistics.median(lost[m]) * 10 for m in modes]
    print(f"group / in-place (back at the failed step, derived): {derived[1] / derived[0]:.2f}x")


if __name__ == "__main__":
    main()
