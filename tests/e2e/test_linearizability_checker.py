"""The checker of tests/e2e/linearizability.py on hand-made histories: it accepts the
linearizable ones and names what breaks in the others (so that a pass of
test_etcd_linearizability.py means something)."""
import math

from linearizability import Op, check, check_key

INF = math.inf


def test_sequential_submit_cancel_read_is_linearizable():
    h = [Op(0, "submit", "job-1", 0.0, 1.0, "ok"),
         Op(0, "read", "job-1", 1.1, 1.2, "ok", "queued"),
         Op(1, "cancel", "job-1", 1.3, 1.4, "ok"),
         Op(1, "read", "job-1", 1.5, 1.6, "ok", "cancelled"),
         Op(0, "cancel", "job-1", 1.7, 1.8, "fail", "finished")]
    assert check(h) == ([], "5 ops on 1 jobs: cancel/fail 1, cancel/ok 1, read/ok 2, submit/ok 1")


def test_concurrent_read_may_see_either_side_of_a_cancel():
    base = [Op(0, "submit", "job-1", 0.0, 1.0, "ok"), Op(1, "cancel", "job-1", 2.0, 3.0, "ok")]
    for seen in ("queued", "cancelled"):
        assert check_key(base + [Op(2, "read", "job-1", 2.5, 2.6, "ok", seen)]) is None


def test_a_stale_read_after_a_cancel_completed_is_not_linearizable():
    h = [Op(0, "submit", "job-1", 0.0, 1.0, "ok"),
         Op(1, "cancel", "job-1", 2.0, 3.0, "ok"),
         Op(2, "read", "job-1", 3.5, 3.6, "ok", "queued")]
    why = check_key(h)
    assert why == ("linearized prefix:\n"
                   "  client 0 submit(job-1) ok None [0.000, 1.000]\n"
                   "  client 1 cancel(job-1) ok None [2.000, 3.000]\n"
                   "cannot follow it:\n"
                   "  client 2 read(job-1) ok 'queued' [3.500, 3.600]")


def test_an_acknowledged_job_that_is_gone_is_reported():
    h = [Op(0, "submit", "job-1", 0.0, 1.0, "ok"),
         Op(1, "read", "job-1", 2.0, 2.1, "ok", None)]
    violations, _ = check(h)
    assert len(violations) == 1
    assert violations[0].startswith("job job-1 is not a linearizable register:")


def test_one_id_handed_out_twice_is_reported():
    h = [Op(0, "submit", "job-3", 0.0, 1.0, "ok"), Op(1, "submit", "job-3", 0.5, 1.5, "ok")]
    violations, _ = check(h)
    assert violations[0] == ("job id job-3 handed out twice: "
                             "client 0 submit(job-3) ok None [0.000, 1.000] and "
                             "client 1 submit(job-3) ok None [0.500, 1.500]")
    assert violations[1].startswith("job job-3 is not a linearizable register:")


def test_a_cancel_of_unknown_outcome_may_or_may_not_have_happened():
    submit = Op(0, "submit", "job-1", 0.0, 1.0, "ok")
    cancel = Op(1, "cancel", "job-1", 2.0, INF, "info")
    assert check_key([submit, cancel, Op(2, "read", "job-1", 5.0, 5.1, "ok", "queued")]) is None
    assert check_key([submit, cancel, Op(2, "read", "job-1", 5.0, 5.1, "ok", "cancelled")]) is None
    # But not both, in that order: once cancelled, a job stays cancelled.
    assert check_key([submit, cancel, Op(2, "read", "job-1", 5.0, 5.1, "ok", "cancelled"),
                      Op(2, "read", "job-1", 6.0, 6.1, "ok", "queued")]) is not None


def test_already_finished_needs_a_cancel_before_it():
    h = [Op(0, "submit", "job-1", 0.0, 1.0, "ok"),
         Op(1, "cancel", "job-1", 2.0, 3.0, "fail", "finished")]
    assert check_key(h) is not None
    h.append(Op(2, "cancel", "job-1", 1.5, 2.5, "ok"))  # Overlaps: it may come first.
    assert check_key(h) is None


def test_one_node_rank_of_a_round_held_by_two_nodes_is_reported():
    h = [Op(0, "assign", "run-0/3/rank 1", 0.0, 1.0, "ok", "c0-1"),
         Op(1, "assign", "run-0/3/rank 1", 0.5, 1.5, "ok", "c1-4")]
    violations, summary = check(h)
    assert violations == ["run record run-0/3/rank 1 is not a linearizable register:\n"
                          "linearized prefix:\n"
                          "  client 0 assign(run-0/3/rank 1) ok 'c0-1' [0.000, 1.000]\n"
                          "cannot follow it:\n"
                          "  client 1 assign(run-0/3/rank 1) ok 'c1-4' [0.500, 1.500]"]
    assert summary == "2 ops on 0 jobs and 1 runs: assign/ok 2"


def test_a_rejoin_answered_with_the_same_assignment_is_linearizable():
    h = [Op(0, "assign", "run-0/3/rank 1", 0.0, 1.0, "ok", "c0-1"),
         Op(0, "assign", "run-0/3/rank 1", 0.0, 6.0, "ok", "c0-1")]
    assert check(h)[0] == []


def test_a_round_seen_after_a_later_one_completed_is_reported():
    h = [Op(0, "round", "run-1/round", 0.0, 1.0, "ok", 4),
         Op(1, "round", "run-1/round", 2.0, 3.0, "ok", 3)]
    why = check_key(h)
    assert why == ("linearized prefix:\n"
                   "  client 0 round(run-1/round) ok 4 [0.000, 1.000]\n"
                   "cannot follow it:\n"
                   "  client 1 round(run-1/round) ok 3 [2.000, 3.000]")
    # Overlapping, the lower round may have come first.
    h[1] = Op(1, "round", "run-1/round", 0.5, 3.0, "ok", 3)
    assert check_key(h) is None


def test_a_search_over_its_budget_is_reported_undecided():
    h = [Op(0, "round", "run-1/round", 0.0, 1.0, "ok", 4),
         Op(1, "round", "run-1/round", 2.0, 3.0, "ok", 3)]
    assert check_key(h, budget=1).startswith(
        "undecided after 1 states; the longest prefix linearized:\n")
