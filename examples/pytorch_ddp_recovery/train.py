"""A PyTorch DDP trainer that survives the loss of a rank in place (dgt.recovery).

    PYTHONPATH=python dgt-run --nnodes=2 --nproc-per-node=2 --rdzv-endpoint=HOST:PORT \
        --rdzv-id=job --restart-policy=rank --max-restarts=3 [--recovery-mode=shrink] \
        --no-python python3 examples/pytorch_ddp_recovery/train.py --steps 300

Add `--standby-workers=1` (replace mode) to keep one warm process per node waiting in
`import dgt.recovery` below, with torch imported, to take a failed rank's place.

The dgt-specific lines are marked `# dgt`; without them this is a plain DDP script. The data of
step s on rank r is a function of (s, r), so a step that runs again (after a recovery) sees the
same batch. The model and data are chosen so that every gradient is an integer multiple of 12
(and the bias's of 3): DDP's average over 4 or 3 ranks is then exact in float32, whatever order
the all-reduce sums in, so a run's parameters can be compared bit for bit with a one-process
reference (tests/e2e/test_recovery_torch.py does).

`--backend nccl` trains on one GPU per local rank (cuda:LOCAL_RANK; scripts/gpu-check.sh runs it
that way when the machine has a CUDA build of torch and two GPUs). `--crash-at-step S
--crash-rank R` makes rank R SIGKILL itself when it reaches step S the first time (restart count
0): a failure for scripts that have no other way to kill a rank at a known step. `--hang-at-step S
--hang-rank R` makes rank R sleep forever at step S instead (a hang for `dgt-run --hang-timeout`).

It prints `EVENT <kind> key=value ...` lines: joined, step (per completed step, with t_ns =
time.time_ns()), synced (after each recovery) and done (with a sha256 of the parameters).
"""
import argparse
import hashlib
import os
import signal
import sys
import time

import torch

import dgt.recovery  # dgt

DIM = 64
BATCH = 8


def make_model():
    torch.manual_seed(0)
    return torch.nn.Linear(DIM, DIM)


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=2.0 ** -10, momentum=0.5)


def batch(step, rank, device=None):
    """The inputs of `step` on `rank`: x in 12*[-3, 3], c in 3*[-2, 2] (integers)."""
    g = torch.Generator().manual_seed(step * 1000 + rank)
    x = 12.0 * torch.randint(-3, 4, (BATCH, DIM), generator=g).float()
    c = 3.0 * torch.randint(-2, 3, (BATCH, DIM), generator=g).float()
    return x.to(device), c.to(device)


def loss_fn(model, x, c):
    return (model(x) * c).sum()


def digest(model):
    h = hashlib.sha256()
    for t in model.state_dict().values():
        h.update(repr(t.detach().flatten().tolist()).encode())  # float repr is exact
    return h.hexdigest()


def event(kind, **fields):
    print(f"EVENT {kind} " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


def main():
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--steps", type=int, default=300)
    p.add_argument("--step-ms", type=float, default=0.0, help="sleep per step (simulated work)")
    p.add_argument("--op-timeout", type=float, default=30.0)
    p.add_argument("--backend", choices=("gloo", "nccl"), default="gloo")
    p.add_argument("--crash-at-step", type=int, default=-1,
                   help="with --crash-rank: that rank SIGKILLs itself at this step (first run)")
    p.add_argument("--crash-rank", type=int, default=-1)
    p.add_argument("--hang-at-step", type=int, default=-1,
                   help="with --hang-rank: that rank hangs (sleeps forever) at this step (first "
                        "run), before its all-reduce: a rank for dgt-run --hang-timeout to find")
    p.add_argument("--hang-rank", type=int, default=-1)
    args = p.parse_args()
    rank = int(os.environ["RANK"])
    first_run = os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0"
    device = None
    if args.backend == "nccl":
        if not torch.cuda.is_available():
            sys.exit(f"train.py: --backend nccl needs CUDA: torch {torch.__version__} has no CUDA "
                     "device here (torch.cuda.is_available() is False)")
        device = torch.device("cuda", int(os.environ["LOCAL_RANK"]))
        torch.cuda.set_device(device)

    model = make_model().to(device)
    optimizer = make_optimizer(model)

    def train_step(ddp, step):                                  # dgt: the loop body, as a function
        if first_run and rank == args.crash_rank and step == args.crash_at_step:
            os.kill(os.getpid(), signal.SIGKILL)
        if first_run and rank == args.hang_rank and step == args.hang_at_step:
            while True:
                time.sleep(0.05)
        optimizer.zero_grad()
        x, c = batch(step, rank, device)
        loss_fn(ddp, x, c).backward()                           # DDP's all-reduce
        optimizer.step()
        if args.step_ms:
            time.sleep(args.step_ms / 1000.0)
        event("step", rank=rank, step=step + 1, t_ns=time.time_ns())

    def on_recovered(r):                                        # dgt (optional): report
        event("synced", rank=rank, generation=r.generation, resume=r.resume_step,
              members=",".join(map(str, r.members)), source=r.source,
              replacement=int(r.replacement), noticed_ns=r.noticed_ns, left_ns=r.left_ns,
              built_ns=r.built_ns,
              synced_ns=r.synced_ns)

    options = dgt.recovery.RecoveryOptions(op_timeout=args.op_timeout,        # dgt
                                           backend=args.backend)
    ddp_kwargs = None if device is None else {"device_ids": [device.index]}
    with dgt.recovery.Trainer(model, optimizer, options=options,              # dgt
                              on_recovered=on_recovered, device=device,
                              ddp_kwargs=ddp_kwargs) as t:                    # dgt
        event("joined", rank=rank, pid=os.getpid(), generation=t.group.generation,
              replacement=int(t.group.is_replacement), step=t.step)
        t.run(train_step, args.steps)                                         # dgt
        event("done", rank=rank, pid=os.getpid(), steps=t.step, recoveries=t.recoveries,
              generation=t.group.generation, members=",".join(map(str, t.members)),
              digest=digest(model))
    return 0


if __name__ == "__main__":
    sys.exit(main())
