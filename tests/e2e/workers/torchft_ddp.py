"""E2E worker: one rank of a TorchFT replica group, run by dgt-run (one agent per replica group).

TorchFT's own pieces, as its train_ddp example uses them: a reconfigurable Gloo process group
(torchft.process_group.ProcessGroupGloo), a Manager (quorum through the Lighthouse in
TORCHFT_LIGHTHOUSE every step, the replica group's own store at MASTER_ADDR:MASTER_PORT, i.e.
dgt's agent store), torchft's DistributedDataParallel (gradients averaged across replica groups
through the Manager) and Optimizer (torchft.optim.OptimizerWrapper: the optimizer steps only
when every group's should_commit agrees).

The model is Linear(3, 1) in float64 starting from fixed parameters; step s of replica group g
trains on batch(g, s), two samples with small integer features and targets, and SGD with lr
1/32 applies the gradient averaged over the participating groups. Every value is a dyadic
rational of few bits, so float64 holds it exactly (tests/e2e/test_torchft.py computes the same
with fractions). The batch depends on the Manager's step, not on a local counter, so a replica
group restarted by dgt-run that heals from a peer trains on the same batches as if it had never
died.

Prints JSON lines: {"event": "start", "pid", "replica_group", "rank", "restart_count"} once,
{"event": "step", "step", "pid"} after each committed step, and at the end {"event": "done",
"replica_group", "step", "weight", "bias", "commits", "heals" (the steps at which it took a
peer's state), "restart_count", "env"}.
--kill-self-at-step N makes the first incarnation SIGKILL itself
right after committing step N.
"""
import argparse
import json
import os
import signal
import socket
import sys
import time
from datetime import timedelta

import torch
from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo
from worker_exit import exit_now

LR = 1 / 32
ENV_VARS = ("RANK", "WORLD_SIZE", "MASTER_ADDR", "TORCHFT_LIGHTHOUSE", "REPLICA_GROUP_ID",
            "NUM_REPLICA_GROUPS", "TORCHELASTIC_RESTART_COUNT")


def batch(group, step):
    """Replica group `group`'s samples at step `step`: features (2 x 3), targets (2 x 1)."""
    x = [[group + 1, step % 3, -1], [1, -group, (step + group) % 2]]
    y = [[group - step % 2], [1]]
    return x, y


def emit(**record):
    print(json.dumps(record), flush=True)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, default=5, help="committed steps to reach")
    ap.add_argument("--kill-self-at-step", type=int, default=0,
                    help="first incarnation only: SIGKILL itself once this step is committed")
    ap.add_argument("--hostname", default=socket.gethostname(),
                    help="address at which the other groups reach this group's Manager server")
    ap.add_argument("--timeout", type=float, default=30.0,
                    help="seconds for TorchFT's collectives, quorum and connections")
    args = ap.parse_args()
    torch.set_num_threads(1)
    group = int(os.environ["REPLICA_GROUP_ID"])
    num_groups = int(os.environ["NUM_REPLICA_GROUPS"])
    restart_count = int(os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"))
    emit(event="start", pid=os.getpid(), replica_group=group, rank=int(os.environ["RANK"]),
         restart_count=restart_count)

    model = torch.nn.Linear(3, 1).double()
    with torch.no_grad():
        # Every group starts from the same parameters (the Manager's init_sync would also copy
        # them); a group that heals gets the current ones from a peer instead.
        model.weight.copy_(torch.tensor([[0.25, -0.5, 0.125]], dtype=torch.float64))
        model.bias.fill_(0.5)
    sgd = torch.optim.SGD(model.parameters(), lr=LR)
    loads = []
    heals = []  # the steps at which this group took a peer's state

    def load_state_dict(state):
        loads.append(True)
        model.load_state_dict(state["model"])
        sgd.load_state_dict(state["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": sgd.state_dict()}

    timeout = timedelta(seconds=args.timeout)
    pg = ProcessGroupGloo(timeout=timeout)
    manager = Manager(pg=pg, min_replica_size=num_groups, load_state_dict=load_state_dict,
                      state_dict=state_dict, replica_id=f"dgt_e2e_{group}", hostname=args.hostname,
                      timeout=timeout,
                      quorum_timeout=timeout, connect_timeout=timeout,
                      # The quorum (and a heal) completes inside zero_grad(), so the step read
                      # after it is the one this step commits, on a healed group too.
                      use_async_quorum=False)
    ddp = DistributedDataParallel(manager, model)
    opt = Optimizer(manager, sgd)
    commits = 0
    deadline = time.monotonic() + 10 * args.timeout
    while manager.current_step() < args.steps:
        if time.monotonic() > deadline:
            print(f"no progress past step {manager.current_step()} within "
                  f"{10 * args.timeout} s", file=sys.stderr, flush=True)
            return 3
        before = len(loads)
        opt.zero_grad()  # the step's quorum; a group that is behind heals from a peer here
        step = manager.current_step()
        if len(loads) > before:
            heals.append(step)
        x, y = (torch.tensor(v, dtype=torch.float64) for v in batch(group, step))
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()  # applies the averaged gradient only if every group's should_commit agrees
        if manager.current_step() > step:
            commits += 1
            emit(event="step", step=manager.current_step(), pid=os.getpid())
            if restart_count == 0 and manager.current_step() == args.kill_self_at_step:
                # Between two steps, so the peer never waits on this process inside an
                # all-reduce: torchft 0.2.0's DistributedDataParallel fails the survivor there
                # (AssertionError in its comm hook, docs/RECOVERY.md).
                os.kill(os.getpid(), signal.SIGKILL)
    emit(event="done", replica_group=group, step=manager.current_step(),
         weight=model.weight.detach().flatten().tolist(), bias=model.bias.item(),
         commits=commits, heals=heals, restart_count=restart_count,
         env={k: os.environ.get(k) for k in ENV_VARS})
    manager.shutdown(wait=False)
    return 0


if __name__ == "__main__":
    exit_now(main())
