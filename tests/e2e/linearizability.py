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
"""
from __future__ import annotations

import dataclasses
import math


@dataclasses.dataclass
class Op:
    client: int
    kind: str        # "submit", "cancel", "read"
    key: str | None  # the job id (a submit's comes with its answer)
    invoke: float    # seconds, the clock of the test process
    complete: float  # math.inf while (or when) the outcome is unknown
    status: str      # "ok", "fail" (a definite refusal), "info" (unknown outcome)
    value: object = None  # read: the state read; cancel fail: "finished" or "not_found"

    def describe(self):
        end = "?" if self.complete == math.inf else f"{self.complete:.3f}"
        return (f"client {self.client} {self.kind}({self.key}) {self.status} {self.value!r} "
                f"[{self.invoke:.3f}, {end}]")


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
    return ("no", f"unknown op {op.kind}")


def check_key(ops, initial=None):
    """Wing & Gong over one key's ops. Returns None when linearizable, else a text naming the
    longest prefix found and the ops that could not follow it."""
    ops = sorted(ops, key=lambda o: o.invoke)
    must = [i for i, o in enumerate(ops) if o.status != "info"]
    n = len(ops)
    seen = set()
    best = []

    def search(done, state, order):
        nonlocal best
        if all(done >> i & 1 for i in must):
            return True
        memo = (done, state)
        if memo in seen:
            return False
        seen.add(memo)
        if len(order) > len(best):
            best = list(order)
        # Candidates: ops not yet taken that were invoked before every pending op's answer.
        horizon = min(ops[i].complete for i in range(n) if not done >> i & 1)
        for i in range(n):
            if done >> i & 1 or ops[i].invoke > horizon:
                continue
            nxt = step(state, ops[i])
            if isinstance(nxt, tuple):
                continue
            order.append(i)
            if search(done | 1 << i, nxt, order):
                return True
            order.pop()
        return False

    if search(0, initial, []):
        return None
    taken = set(best)
    lines = ["linearized prefix:"] + [f"  {ops[i].describe()}" for i in best]
    lines.append("cannot follow it:")
    lines += [f"  {o.describe()}" for i, o in enumerate(ops) if i not in taken]
    return "\n".join(lines)


def check(history):
    """Checks a whole history. Returns (violations, summary): violations is a list of texts
    (empty: linearizable, no acknowledged job lost, no job id handed out twice)."""
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
    for key in sorted(by_key):
        why = check_key(by_key[key])
        if why is not None:
            violations.append(f"job {key} is not a linearizable register:\n{why}")
    counts = {}
    for op in history:
        counts[(op.kind, op.status)] = counts.get((op.kind, op.status), 0) + 1
    summary = ", ".join(f"{k}/{s} {c}" for (k, s), c in sorted(counts.items()))
    return violations, f"{len(history)} ops on {len(by_key)} jobs: {summary}"
