#!/usr/bin/env python3
"""Recovery benchmark: time from a rank's death (SIGKILL) to every rank back in a collective,
in-place (policy `rank`: one replacement, survivors keep their process) versus a group restart
(policy `group`: every worker killed and started again), same job, one run each per round.

A 4-rank examples/allreduce_trainer job on Gloo over loopback. Two measured quantities, both
from the trainers' CLOCK_REALTIME EVENT lines:
  - back in a collective: the latest time at which a member finished its first collective after
    the failure (EVENT back);
  - back at the pre-failure step: the time at which every member had completed, after its
    recovery, the highest step any rank had completed before the kill (EVENT step; the trainer
    checkpoints nothing, so a group restart redoes every step).
With --launcher dgt-run it also prints the recovery's timeline (agent log line "recovery timeline
of rank", trainers' EVENT timeline/failure/synced lines): when each milestone was reached, ms
after the kill, latest rank, median over the rounds.
  --launcher dgt-run (default): the real launcher, a dgt-rendezvous and --nodes dgt-run agents x
      --nproc ranks (default 2 x 2); `--restart-policy rank` versus `--restart-policy group`
      (whose restart is a new rendezvous round on every node).
  --launcher harness: tests/e2e/recovery_harness.py plays the agent against `dgt store serve`
      and restarts at once (no agent, no rendezvous).
    bench/recovery/run.py [--launcher dgt-run|harness] [--rounds 5] [--kill-after 0.5]
With --launcher dgt-run the medians of the milestones in BOUNDS are checked against their bounds
(printed with the timeline): one past its bound prints "REGRESSION: ..." naming the policy, the
milestone, the median and the bound, and the bench exits 1 (--no-check: report only).
"""
import argparse
import re
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e"))
from recovery_harness import DgtRunJob, Job  # noqa: E402

# Median ms after the SIGKILL, per milestone, for every policy (--launcher dgt-run). Measured on
# the 2-core shared dev machine (docs/PERFORMANCE.md): communicator built ~10-25 ms, back in a
# collective ~20-60 ms; the bounds leave room for a loaded machine and still catch a fixed wait
# such as the 200 ms watcher join that once sat between "bootstrap started" and "built".
BOUNDS = {
    "all: communicator built": 100.0,
    "all: back in a collective": 150.0,
}


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


def back_at_prefailure_step(events, since_ns, members):
    """Measured, not derived: (H, ms) where H is the highest step any rank had completed before
    the kill (SIGKILL at since_ns) and ms the time from the kill until every member of the job
    after it had completed step H again, counting only steps done after its recovery (a process
    started after the kill, or a survivor in a later generation than before the kill).

    events: [(rank, kind, fields)] with the trainer's `EVENT step` lines."""
    steps = [(r, f) for r, k, f in events if k == "step"]
    before = [(r, f) for r, f in steps if int(f["t_ns"]) < since_ns]
    high = max(int(f["step"]) for _, f in before)
    gen_before = {}  # pid -> generation of its last step before the kill
    for _, f in before:
        gen_before[f["pid"]] = max(gen_before.get(f["pid"], -1), int(f["generation"]))
    reached = {}
    for r, f in steps:
        t = int(f["t_ns"])
        if r not in members or t <= since_ns or int(f["step"]) < high:
            continue
        pid = f["pid"]
        if pid in gen_before and int(f["generation"]) <= gen_before[pid]:
            continue  # Finished in the old generation, before noticing the failure.
        reached[r] = min(reached.get(r, t), t)
    if set(reached) != set(members):
        raise RuntimeError(f"members {sorted(set(members) - set(reached))} never got back to "
                           f"step {high}")
    return high, (max(reached.values()) - since_ns) / 1e6


AGENT_TIMELINE = re.compile(r"recovery timeline of rank (\d+): exit_seen_ns=(\d+) "
                            r"publish_start_ns=(\d+) published_ns=(\d+) "
                            r"replacement_started_ns=(\d+)")


def timeline(job, since_ns, victim_pid):
    """Milestones of one recovery, ms after the kill (latest over the ranks concerned)."""
    out = {}
    for i in range(job.nodes):
        m = AGENT_TIMELINE.search(job.stderr(i))
        if m:
            names = ["agent: exit seen", "agent: publish start", "agent: failure published",
                     "agent: replacement forked"]
            for name, v in zip(names, m.groups()[1:]):
                out[name] = (int(v) - since_ns) / 1e6
    ev = job.events()
    old_pids = {f["pid"] for r, k, f in ev if k == "joined" and int(f["t_ns"]) < since_ns}
    old_pids.discard(str(victim_pid))

    def latest(name, values):
        values = [v for v in values if v > since_ns]
        if values:
            out[name] = (max(values) - since_ns) / 1e6

    after = [(r, k, f) for r, k, f in ev if k in ("timeline", "failure", "synced", "back")]
    tl_old = [f for r, k, f in after if k == "timeline" and f["pid"] in old_pids]
    tl_new = [f for r, k, f in after if k == "timeline" and f["pid"] not in old_pids]
    latest("survivors: watcher woke", [int(f["noticed_ns"]) for f in tl_old])
    latest("survivors: collective aborted",
           [int(f["t_ns"]) for r, k, f in after if k == "failure" and f["pid"] in old_pids])
    latest("new process: main()", [int(f["main_ns"]) for f in tl_new])
    latest("new process: store connected", [int(f["connected_ns"]) for f in tl_new])
    tl = [f for f in tl_old + tl_new if int(f["built_ns"]) > since_ns]
    latest("all: generation known", [int(f["opened_ns"]) for f in tl])
    latest("all: bootstrap started", [int(f["bootstrap_ns"]) for f in tl])
    latest("all: communicator built", [int(f["built_ns"]) for f in tl])
    latest("all: state synced", [int(f["t_ns"]) for r, k, f in after if k == "synced"])
    latest("all: back in a collective", [int(f["t_ns"]) for r, k, f in after if k == "back"])
    return out


def one_dgt_run(mode, out_dir, nodes, nproc, steps, kill_after):
    policy = "group" if mode == "group" else "rank"
    job = DgtRunJob(out_dir, f"bench-{mode}", policy=policy,
                    mode="shrink" if mode == "shrink" else "replace", nodes=nodes, nproc=nproc,
                    steps=steps, step_ms=10)
    try:
        pids = job.joined_pids()
        time.sleep(kill_after)
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
        _, prefail_ms = back_at_prefailure_step(job.events(), t0, set(done))
        steps = timeline(job, t0, pids[victim])
        steps["all: back at the pre-failure step"] = prefail_ms
        return (t1 - t0) / 1e6, redone, prefail_ms, steps
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
    ap.add_argument("--kill-after", type=float, default=0.5,
                    help="seconds after every rank joined to SIGKILL one (--launcher dgt-run)")
    ap.add_argument("--no-check", action="store_true",
                    help="report only: do not fail when a milestone's median passes its bound")
    a = ap.parse_args()
    if a.launcher == "dgt-run":
        a.world = a.nodes * a.nproc
    modes = ["in-place", "group"] + (["shrink"] if a.launcher == "dgt-run" else [])
    res = {m: [] for m in modes}
    lost = {m: [] for m in modes}
    prefail = {m: [] for m in modes}
    steps = {m: [] for m in modes}
    with tempfile.TemporaryDirectory() as d:
        for i in range(a.rounds):
            for mode in res:
                sub = Path(d) / f"{mode}-{i}"
                sub.mkdir()
                if a.launcher == "dgt-run":
                    ms, redone, pf, tl = one_dgt_run(mode, sub, a.nodes, a.nproc, a.steps,
                                                     a.kill_after)
                    prefail[mode].append(pf)
                    steps[mode].append(tl)
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
    print(f"group / in-place (back in a collective, medians): {ratio:.2f}x")
    if a.launcher == "dgt-run":
        print()
        print("measured: ms from SIGKILL until every member completed the highest step any rank "
              "had completed before the kill (EVENT step lines)")
        print("| policy | median ms | min ms | max ms |")
        print("| --- | --- | --- | --- |")
        for mode, v in prefail.items():
            print(f"| {mode} | {statistics.median(v):.1f} | {min(v):.1f} | {max(v):.1f} |")
        ratio = statistics.median(prefail["group"]) / statistics.median(prefail["in-place"])
        print(f"group / in-place (back at the pre-failure step, measured, medians): "
              f"{ratio:.2f}x")
        print()
        print("timeline: median ms after the SIGKILL at which each milestone was reached "
              "(latest rank)")
        names = []
        for mode in modes:
            for tl in steps[mode]:
                names += [n for n in tl if n not in names]

        def order(n):  # By the first policy that reached the milestone.
            for i, m in enumerate(modes):
                v = [tl[n] for tl in steps[m] if n in tl]
                if v:
                    return (i, statistics.median(v))
        names.sort(key=order)
        print("| milestone | " + " | ".join(modes) + " | bound (every policy) |")
        print("| --- |" + " --- |" * len(modes) + " --- |")
        regressions = []
        for n in names:
            cells = []
            for mode in modes:
                v = [tl[n] for tl in steps[mode] if n in tl]
                cells.append(f"{statistics.median(v):.1f}" if v else "-")
                if v and n in BOUNDS and statistics.median(v) > BOUNDS[n]:
                    regressions.append(f"REGRESSION: {mode}: '{n}' median "
                                       f"{statistics.median(v):.1f} ms > bound {BOUNDS[n]:g} ms")
            bound = f"{BOUNDS[n]:g}" if n in BOUNDS else ""
            print(f"| {n} | " + " | ".join(cells) + f" | {bound} |")
        for n in BOUNDS:
            for mode in modes:
                if not any(n in tl for tl in steps[mode]):
                    regressions.append(f"REGRESSION: {mode}: '{n}' was never reached")
        if regressions:
            print()
            for line in regressions:
                print(line)
            if not a.no_check:
                sys.exit(1)
    else:
        derived = [statistics.median(res[m]) + statistics.median(lost[m]) * 10 for m in modes]
        print(f"group / in-place (back at the failed step, derived): "
              f"{derived[1] / derived[0]:.2f}x")


if __name__ == "__main__":
    main()
