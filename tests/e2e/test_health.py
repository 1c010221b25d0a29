"""Node health checks end to end (docs/RECOVERY.md "Node health checks"): a real dgt-rendezvous,
real dgt-run agents on loopback and torch 2.13 DDP workers.

A node whose --health-check fails before the join exits 71 naming the check and its output, and
the others run without it; a node whose check starts failing mid-run (a flag file the test
creates) leaves, and the survivors finish in a new round with the exact DDP parameters; a check
that hangs is killed at --health-check-timeout; a check that prints 1 MB leaves only its last
4 KiB in the reason.
"""
import json
import re
import time

from conftest import BIN, WORKERS, dgt_env, exact_descent, wait_for

WORKER = WORKERS / "health_worker.py"
UNHEALTHY = 71  # docs/EXIT_CODES.md


def ddp_reference(world, steps):
    """workers/ddp_steps.py's exact parameters for `world` ranks (its batch(rank) repeated)."""
    batches = [([[r + 1, 2, -r], [1, -r, 3]], [r - 1, 2]) for r in range(world)]
    return exact_descent(lambda step: batches, steps)


def lines(text, event=None):
    out = []
    for m in re.findall(r"^\[rank\d+\]: (\{.*\})$", text, re.M):
        rec = json.loads(m)
        if event is None or rec.get("event") == event:
            out.append(rec)
    return out


def results(text):
    return [r for r in lines(text) if "weight" in r]


def agent(spawn, rendezvous, run_id, node_id, python2, extra=(), worker_args=()):
    return spawn([BIN / "dgt-run", "--nnodes=2:3", "--nproc-per-node=1",
                  f"--rdzv-endpoint={rendezvous}", f"--rdzv-id={run_id}",
                  f"--node-id={node_id}", "--rdzv-conf=last_call_timeout=1",
                  "--stop-timeout=5", *extra, WORKER, *worker_args],
                 name=node_id, env=dgt_env(DGT_PYTHON=python2))


def last_line(text):
    return text.rstrip("\n").rsplit("\n", 1)[-1]


def test_check_failing_before_join_does_not_join(spawn, rendezvous, python2, tmp_path):
    check = "echo 'GPU 3: 12 uncorrectable ECC errors' >&2; exit 1"
    bad = agent(spawn, rendezvous, "health-pre", "node-bad", python2,
                extra=["--health-check", "true", "--health-check", check])
    assert bad.wait(timeout=30) == UNHEALTHY, bad.stderr
    assert last_line(bad.stderr) == (
        f"dgt-run: error: health check '{check}' failed: exited with code 1: GPU 3: 12 "
        "uncorrectable ECC errors; node 'node-bad' does not join run 'health-pre'")
    assert "joining run" not in bad.stderr
    good = [agent(spawn, rendezvous, "health-pre", f"node-{i}", python2,
                  extra=["--health-check", "true"], worker_args=["--steps=4"])
            for i in range(2)]
    for a in good:
        assert a.wait(timeout=120) == 0, a.stderr
    done = results(good[0].stdout) + results(good[1].stdout)
    weight, bias = ddp_reference(world=2, steps=4)
    assert sorted(r["rank"] for r in done) == [0, 1]
    for r in done:
        assert r["world_size"] == 2
        assert r["torch"].startswith("2.")
        assert r["weight"] == weight and r["bias"] == bias


def test_check_failing_mid_run_leaves_the_run(spawn, rendezvous, python2, tmp_path):
    flag = tmp_path / "sick"
    check = f"if [ -e {flag} ]; then echo 'NIC mlx5_1 flapping'; exit 2; fi"
    args = ["--wait-world-size=3", "--steps=4"]
    agents = {n: agent(spawn, rendezvous, "health-mid", n, python2, worker_args=args,
                       extra=["--health-check", check, "--health-interval=0.5"]
                       if n == "node-c" else [])
              for n in ("node-a", "node-b", "node-c")}
    wait_for(lambda: all(any(r["env"]["WORLD_SIZE"] == "3" for r in lines(a.stdout, "start"))
                         for a in agents.values()), 120, "three nodes in round 0")
    first_pids = {n: lines(a.stdout, "start")[0]["pid"] for n, a in agents.items()}
    flag.write_text("")
    flagged_at = time.monotonic()
    assert agents["node-c"].wait(timeout=60) == UNHEALTHY, agents["node-c"].stderr
    left_after = time.monotonic() - flagged_at
    assert last_line(agents["node-c"].stderr) == (
        f"dgt-run: error: health check '{check}' failed: exited with code 2: NIC mlx5_1 "
        "flapping")
    assert ("this node leaves the run: stopping its workers (SIGKILL after 5 s)"
            in agents["node-c"].stderr)
    assert left_after < 10  # Seen within an interval (0.5 s), workers stopped within 5 s.
    assert results(agents["node-c"].stdout) == []
    for n in ("node-a", "node-b"):
        assert agents[n].wait(timeout=120) == 0, agents[n].stderr
    done = results(agents["node-a"].stdout) + results(agents["node-b"].stdout)
    weight, bias = ddp_reference(world=2, steps=4)
    assert sorted(r["rank"] for r in done) == [0, 1]
    for r in done:
        assert r["world_size"] == 2
        assert r["env"]["TORCHELASTIC_RESTART_COUNT"] == "0"  # A new round, not a restart.
        assert r["weight"] == weight and r["bias"] == bias
    # The survivors' new round names node-c as lost, and started new workers.
    assert "(node lost: node node-c" in agents["node-a"].stderr
    for n in ("node-a", "node-b"):
        starts = lines(agents[n].stdout, "start")
        assert [s["env"]["WORLD_SIZE"] for s in starts] == ["3", "2"]
        assert starts[0]["pid"] == first_pids[n]


def test_check_that_hangs_is_killed_at_its_timeout(spawn, tmp_path):
    started = time.monotonic()
    p = spawn([BIN / "dgt-run", "--standalone", "--nproc-per-node=1", "--no-python",
               "--node-id=hang", "--health-check", "echo probing; sleep 300",
               "--health-check-timeout=1",
               "/bin/true"], name="hang")
    assert p.wait(timeout=30) == UNHEALTHY, p.stderr
    assert time.monotonic() - started < 10
    assert last_line(p.stderr) == (
        "dgt-run: error: health check 'echo probing; sleep 300' failed: did not finish within "
        "1 s (--health-check-timeout); killed: probing; node 'hang' does not join run 'none'")


def test_check_printing_one_megabyte_keeps_the_last_4k(spawn, tmp_path):
    check = "head -c 1048576 /dev/zero | tr '\\0' x; echo; echo the real reason; exit 3"
    p = spawn([BIN / "dgt-run", "--standalone", "--nproc-per-node=1", "--no-python",
               "--node-id=big", "--health-check", check, "/bin/true"], name="big")
    assert p.wait(timeout=60) == UNHEALTHY, p.stderr
    err = p.stderr
    assert len(err) < 8192, len(err)
    # The reason is the output's last 4096 bytes, less the final newline: 4079 x's, then a line.
    tail = "x" * 4079 + "\nthe real reason"
    assert err.endswith(
        f"dgt-run: error: health check '{check}' failed: exited with code 3: [output cut: the "
        f"last 4096 of 1048593 bytes] {tail}; node 'big' does not join run 'none'\n")
