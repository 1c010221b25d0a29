"""Worker of the chaos soak (bench/chaos/soak.py), run by dgt-run for each `dgt submit`ted job.

Trains tests/e2e/workers/ddp_steps.py's model: DDP over gloo, rank r on ddp_steps.batch(r), SGD
with lr 1/32 from the weights that rank 0 broadcasts, for --steps steps (--step-s seconds of sleep
after each, so that faults land mid-training). The parameters are exact in float64 whatever the
order of the all-reduce's sums, so every rank of every correct run ends with the same digest:
sha256 of json.dumps([w0, w1, w2, b]).

Appends JSON lines to $DGT_SOAK_DIR/ranks/<job id>.jsonl (one write each, O_APPEND):
  {"event": "start", "job", "attempt", "round", "rank", "pid", "t"}  before init_process_group
  {"event": "twice", ...}  another live process holds this (job, attempt, round, rank)
  {"event": "done", ..., "digest"}  after the last step
attempt is TORCHELASTIC_RESTART_COUNT, round MASTER_ADDR:MASTER_PORT (each rendezvous round has a
store of its own). The "twice" check is an exclusive flock per (job, attempt, round, rank), held
for the process's life: the kernel drops it when the process dies, even by SIGKILL.
"""
import argparse
import fcntl
import hashlib
import json
import os
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "tests" / "e2e" / "workers"))

import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
from ddp_steps import LR, batch  # noqa: E402
from torch.nn.parallel import DistributedDataParallel  # noqa: E402
from worker_exit import exit_now  # noqa: E402


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--step-s", type=float, default=0.0)
    args = ap.parse_args()
    out = Path(os.environ["DGT_SOAK_DIR"]) / "ranks"
    job = os.environ["TORCHELASTIC_RUN_ID"]
    attempt = int(os.environ["TORCHELASTIC_RESTART_COUNT"])
    round_ = f"{os.environ['MASTER_ADDR']}:{os.environ['MASTER_PORT']}"
    rank = int(os.environ["RANK"])
    base = {"job": job, "attempt": attempt, "round": round_, "rank": rank, "pid": os.getpid()}
    fd = os.open(out / f"{job}.jsonl", os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def record(event, **extra):
        line = json.dumps({"event": event, **base, "t": time.time(), **extra}) + "\n"
        os.write(fd, line.encode())

    record("start")
    lock = os.open(out / f"{job}.{attempt}.{round_.replace(':', '_')}.{rank}.lock",
                   os.O_WRONLY | os.O_CREAT, 0o644)
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        record("twice")

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="env://")
    model = torch.nn.Linear(3, 1).double()
    with torch.no_grad():
        # Different on every rank: DDP's constructor must replace them with rank 0's.
        model.weight.copy_(torch.tensor([[rank + 0.25, -0.5, 0.125]], dtype=torch.float64))
        model.bias.fill_(0.5 - rank)
    ddp = DistributedDataParallel(model)
    opt = torch.optim.SGD(ddp.parameters(), lr=LR)
    x, y = (torch.tensor(v, dtype=torch.float64) for v in batch(rank))
    for _ in range(args.steps):
        opt.zero_grad()
        loss = ((ddp(x) - y) ** 2).mean()
        loss.backward()
        opt.step()
        time.sleep(args.step_s)
    params = [*model.weight.detach().flatten().tolist(), model.bias.item()]
    record("done", digest=hashlib.sha256(json.dumps(params).encode()).hexdigest())
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    exit_now(main())
