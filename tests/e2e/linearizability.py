"""A linearizability checker for histories of job records (docs/RELIABILITY.md, "Linearizability
of the etcd backends"): Wing & Gong's search, one key at a time (P-compositionality: a history is
linearizable when each key's sub-history is, as each job record is an object of its own).

A history is a list of `Op`s: what a client invoked and what it got back, with the real times of
the invocation and of the answer. An op whose outcome is unknown (a timeout, a service that went
away mid-call) has status "info": it may have taken effect at any time after its invocation, or
never. Every "ok" op (and every "fail" op whose answer says what state the record was in) must
take effect at one instant between its invocation and its answer, in an order that the record's
sequential model accepts.

The model of one job record (no node runs jobs in this test, so only clients change it):
  state None (no such job) -> "queued" (submit) -> "cancelled" (cancel)
  submit ok:                 None -> "queued"
  cancel ok:                 "queued" -> "cancelled"
  cancel fail "finished":    the record is "cancelled" (unchanged)
  cancel fail "not_found":   no record (unchanged)
  read ok V:                 the record is V ("queued", "cancelled", or None for no such job)

Run records (run joins: each Assignment a node received is an "ok" op between the node's join
and the assignment's arrival) are checked as two kinds of keys:
  assign V on "RUN/ROUND/rank K":  write-once: node V holds node rank K in that round (again V:
                                   a rejoin answered with the same assignment; another node: no)
  assign V on "RUN/ROUND/NODE":    write-once: the node's rank in that round is V
  round V on "RUN/round":          the run's round is V, never below one seen before (a register
                                   that only grows, read by every assignment)
"""
from __future__ import annotations

import dataclasses
import math
import sys


@dataclasses.dataclass
class Op:
    client: int
    kind: str        # "submit", "cancel", "read"; run records: "assign", "round"
    key: str | None  # the job id (a submit's comes with its answer), or a run record's key
    invoke: float    # seconds, the clock of the test process
    complete: float  # math.inf while (or when) the outcome is unknown
    status: str      # "ok", "fail" (a definite refusal), "info" (unknown outcome)
    value: object = None  # read: the state read; cancel fail: "finished" or "not_found"

    def describe(self):
        end = "?" if self.complete == math.inf else f"{self.complete:.3f}"
        return (f"client {self.client} {self.kind}({self.key}) {self.status} {self.value!r} "
                f"[{self.invoke:.3f}, {end}]")


class Undecided(Exception):
    pass


def step(state, op):
    """The model: the next state when `op` takes effect in `state`, or a reason it cannot."""
    if op.kind == "submit":
        if op.status == "info":
            return "queued" if state is None else ("no", "a second create")
        return "queued" if state is None else ("no", f"submit of an existing job ({state})")
    if op.kind == "cancel":
        if op.status in ("ok", "info"):
            if state == "queued":
                return "cancelled"
            return ("no", f"cancel of a job that is {state}")
        if op.value == "finished":
            return state if state == "cancelled" else ("no", f"'already finished' while {state}")
        if op.value == "not_found":
            return state if state is None else ("no", f"'no job' while {state}")
        return ("no", f"unknown cancel answer {op.value!r}")
    if op.kind == "read":
        return state if state == op.value else ("no", f"read {op.value!r} while {state}")
    if op.kind == "assign":
        return op.value if state in (None, op.value) else ("no", f"{op.value} while {state}")
    if op.kind == "round":
        if state is None or op.value >= state:
            return op.value
        return ("no", f"round {op.value} after round {state}")
    return ("no", f"unknown op {op.kind}")


def check_key(ops, initial=None, budget=200_000):
    """Wing & Gong over one key's ops. Returns None when linearizable, else a text naming the
    longest prefix found and the ops that could not follow it (or saying that the search gave
    up after `budget` states: undecided counts as a violation)."""
    ops = sorted(ops, key=lambda o: o.invoke)
    n = len(ops)
    must_left = sum(1 for o in ops if o.status != "info")
    seen = set()
    best = []
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 2 * n + 200))

    def search(done, state, order, must_left):
        nonlocal best
        if must_left == 0:
            return True
        memo = (done, state)
        if memo in seen:
            return False
        seen.add(memo)
        if len(seen) > budget:
            raise Undecided
        if len(order) > len(best):
            best = list(order)
        # Candidates: ops not yet taken that were invoked before every pending op's answer. Ops
        # are in invocation order and answer after their invocation, so the scan stops at the
        # first op invoked after the earliest answer seen so far.
        lowest = (~done & (done + 1)).bit_length() - 1  # The first op not taken.
        horizon = math.inf
        candidates = []
        for i in range(lowest, n):
            if ops[i].invoke > horizon:
                break
            if done >> i & 1:
                continue
            horizon = min(horizon, ops[i].complete)
            candidates.append(i)
        # Earliest answer first: the op that must take effect soonest (for a register that only
        # grows, the lowest value; a history that is linearizable then rarely backtracks).
        candidates.sort(key=lambda i: ops[i].complete)
        for i in candidates:
            if ops[i].invoke > horizon:
                continue
            nxt = step(state, ops[i])
            if isinstance(nxt, tuple):
                continue
            order.append(i)
            if search(done | 1 << i, nxt, order, must_left - (ops[i].status != "info")):
                return True
            order.pop()
        return False

    try:
        if search(0, initial, [], must_left):
            return None
        lines = ["linearized prefix:"]
    except Undecided:
        lines = [f"undecided after {budget} states; the longest prefix linearized:"]
    taken = set(best)
    lines += [f"  {ops[i].describe()}" for i in best]
    lines.append("cannot follow it:" if lines[0].startswith("linearized") else "not taken:")
    lines += [f"  {o.describe()}" for i, o in enumerate(ops) if i not in taken]
    return "\n".join(lines)


def check(history):
    """Checks a whole history. Returns (violations, summary): violations is a list of texts
    (empty: linearizable, no acknowledged job lost, no job id handed out twice, no node rank of
    a round held by two nodes, no round of a run going back)."""
    violations = []
    by_key = {}
    submitted = {}
    for op in history:
        if op.key is None:
            continue  # A submit whose answer never came: no key to check.
        by_key.setdefault(op.key, []).append(op)
        if op.kind == "submit" and op.status == "ok":
            if op.key in submitted:
                violations.append(f"job id {op.key} handed out twice: "
                                  f"{submitted[op.key].describe()} and {op.describe()}")
            submitted[op.key] = op
    runs = set()
    for key in sorted(by_key):
        run_record = by_key[key][0].kind in ("assign", "round")
        if run_record:
            runs.add(key.split("/")[0])
        why = check_key(by_key[key])
        if why is not None:
            what = "run record" if run_record else "job"
            violations.append(f"{what} {key} is not a linearizable register:\n{why}")
    counts = {}
    for op in history:
        counts[(op.kind, op.status)] = counts.get((op.kind, op.status), 0) + 1
    summary = ", ".join(f"{k}/{s} {c}" for (k, s), c in sorted(counts.items()))
    jobs = sum(1 for ops in by_key.values() if ops[0].kind not in ("assign", "round"))
    on = f"{jobs} jobs" + (f" and {len(runs)} runs" if runs else "")
    return violations, f"{len(history)} ops on {on}: {summary}"
