"""A real PyTorch DDP trainer for the recovery anchors (bench/recovery/torch_trainer/run.py).

An MLP (--layers x Linear(--hidden, --hidden) with ReLU, float32, SGD with momentum) on synthetic
data that is a function of (step, rank), Gloo on CPU, one thread per rank. The same loop runs
under every anchor, with what each anchor asks of a training script:
  --mode ddp      torch.distributed + DistributedDataParallel, a checkpoint (model, optimizer,
                  step) every --ckpt-every steps written by rank 0 and loaded at start, as a
                  torchrun user keeps one; run by torchrun --max-restarts and dgt-run's group
                  restart alike.
  --mode torchft  torchft 0.2.0: Manager (per-step quorum through TORCHFT_LIGHTHOUSE), its
                  reconfigurable ProcessGroupGloo and Optimizer, the gradients averaged with one
                  manager.allreduce (--torchft-ddp: torchft's DistributedDataParallel, which
                  fails the survivors when a peer dies mid all-reduce); a restarted replica
                  group heals from a live peer, so no checkpoint is read.
  --mode nvrx     nvidia-resiliency-ext's in-process restart (inprocess.Wrapper around the
                  training function): the survivors re-enter it in the same process with a new
                  process group (the model stays in memory); rank 0 hosts the Wrapper's store.
  --mode dgt      dgt's in-place recovery for PyTorch (`dgt.recovery.Trainer`, python/dgt) under
                  `dgt-run --restart-policy rank`. Skipped (message, exit 0) when `import dgt`
                  fails. Under --standby-workers, a standby waits in `import dgt.recovery`
                  before the "start" event, which it prints once it took a rank.
Prints `EVENT <kind> key=value ... t_ns=<time.time_ns()>` lines (CLOCK_REALTIME, comparable
across processes): start (first line, before torch is imported), imported, ready (process group
and wrapper built), loaded (step=S the run resumes from), step (step=N after each completed
step; cpu_ns=time.process_time_ns(), CPU time of all the process's threads), done.
"""
import argparse
import os
import sys
import time

if os.environ.get("DGT_STANDBY") == "1":
    # A warm standby of `dgt-run --standby-workers` (the dgt-standby row): it waits here, torch
    # imported, until the agent hands it a failed rank's environment. From then on it is that
    # rank, so its "start" below is the moment it took the rank, not its process start.
    import dgt.recovery  # noqa: F401

T_START = time.time_ns()


def event(kind, **fields):
    fields.setdefault("t_ns", time.time_ns())
    print(f"EVENT {kind} " + " ".join(f"{k}={v}" for k, v in fields.items()), flush=True)


# A global rank: with torchft, the rank inside the replica group plus the group's offset.
RANK = (int(os.environ.get("REPLICA_GROUP_ID", "0")) * int(os.environ.get("WORLD_SIZE", "1"))
        + int(os.environ.get("RANK", "0")))
event("start", rank=RANK, pid=os.getpid(),
      restart=os.environ.get("TORCHELASTIC_RESTART_COUNT", "0"), t_ns=T_START)

import torch  # noqa: E402

event("imported", rank=RANK, torch=torch.__version__, python=sys.executable)


def make_model(args):
    torch.manual_seed(0)
    layers = []
    for _ in range(args.layers):
        layers += [torch.nn.Linear(args.hidden, args.hidden), torch.nn.ReLU()]
    return torch.nn.Sequential(*layers[:-1])


def make_optimizer(model):
    return torch.optim.SGD(model.parameters(), lr=1e-3, momentum=0.9)


def batch(args, step, rank):
    g = torch.Generator().manual_seed(step * 1009 + rank)
    return (torch.randn(args.batch, args.hidden, generator=g),
            torch.randn(args.batch, args.hidden, generator=g))


def train_step(args, ddp, optimizer, step, rank):
    optimizer.zero_grad()
    x, y = batch(args, step, rank)
    torch.nn.functional.mse_loss(ddp(x), y).backward()
    optimizer.step()


def ckpt_path(args):
    return os.path.join(args.ckpt_dir, "ckpt.pt")


def save_checkpoint(args, model, optimizer, step):
    tmp = ckpt_path(args) + ".tmp"
    torch.save({"model": model.state_dict(), "optim": optimizer.state_dict(), "step": step}, tmp)
    os.replace(tmp, ckpt_path(args))


def run_ddp(args):
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel

    dist.init_process_group("gloo")
    rank = dist.get_rank()
    model = make_model(args)
    optimizer = make_optimizer(model)
    ddp = DistributedDataParallel(model)
    event("ready", rank=rank)
    step = 0
    if args.ckpt_dir and os.path.exists(ckpt_path(args)):
        state = torch.load(ckpt_path(args))
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])
        step = state["step"]
    event("loaded", rank=rank, step=step)
    while step < args.steps:
        train_step(args, ddp, optimizer, step, rank)
        step += 1
        event("step", rank=rank, step=step, cpu_ns=time.process_time_ns())
        if args.ckpt_dir and rank == 0 and step % args.ckpt_every == 0:
            save_checkpoint(args, model, optimizer, step)
    dist.destroy_process_group()


def run_torchft(args):
    from datetime import timedelta

    from torchft import DistributedDataParallel, Manager, Optimizer, ProcessGroupGloo

    group = int(os.environ["REPLICA_GROUP_ID"])
    rank = RANK
    model = make_model(args)
    optimizer = make_optimizer(model)

    def load_state_dict(state):
        model.load_state_dict(state["model"])
        optimizer.load_state_dict(state["optim"])

    def state_dict():
        return {"model": model.state_dict(), "optim": optimizer.state_dict()}

    timeout = timedelta(seconds=args.timeout)
    manager = Manager(pg=ProcessGroupGloo(timeout=timeout), min_replica_size=1,
                      load_state_dict=load_state_dict, state_dict=state_dict,
                      replica_id=f"bench_{group}", hostname="127.0.0.1", timeout=timeout,
                      quorum_timeout=timeout, connect_timeout=timeout)
    opt = Optimizer(manager, optimizer)
    if args.torchft_ddp:
        # torchft's DDP wrapper: its comm hook fails the survivors with an AssertionError when a
        # peer dies inside the all-reduce (torchft 0.2.0; docs/RECOVERY.md).
        net = DistributedDataParallel(manager, model)
    else:
        net = model
    params = [p for p in model.parameters()]

    def average_gradients():
        # One all-reduce of the flattened gradients (as one DDP bucket would); a failure is
        # reported to the Manager by wait(), which makes should_commit() false.
        flat = torch.cat([p.grad.flatten() for p in params])
        manager.allreduce(flat).wait()
        offset = 0
        for p in params:
            p.grad.copy_(flat[offset:offset + p.numel()].view_as(p.grad))
            offset += p.numel()

    event("ready", rank=rank)
    loaded = False
    deadline = time.monotonic() + 20 * args.timeout
    while manager.current_step() < args.steps and time.monotonic() < deadline:
        step = manager.current_step()
        opt.zero_grad()  # starts the step's quorum
        x, y = batch(args, step, rank)
        torch.nn.functional.mse_loss(net(x), y).backward()
        if not args.torchft_ddp:
            average_gradients()
        opt.step()  # steps the optimizer only if should_commit()
        if not loaded:  # the first step's quorum is when a restarted group heals
            loaded = True
            event("loaded", rank=rank, step=manager.current_step() - 1)
        if manager.current_step() > step:
            event("step", rank=rank, step=manager.current_step(),
                  cpu_ns=time.process_time_ns())
    manager.shutdown(wait=False)


def run_nvrx(args):
    import torch.distributed as dist
    from nvidia_resiliency_ext import inprocess
    from torch.nn.parallel import DistributedDataParallel

    model = make_model(args)
    optimizer = make_optimizer(model)
    progress = {"step": 0}
    base_store = []

    # Every process builds the same wrapper; rank 0 hosts its TCPStore at MASTER_ADDR and
    # MASTER_PORT (the driver runs the ranks as bare processes, without a launcher).
    @inprocess.Wrapper(
        health_check=None, last_call_wait=timedelta_s(args.nvrx_last_call),
        heartbeat_interval=timedelta_s(0.5), heartbeat_timeout=timedelta_s(3),
        monitor_thread_interval=timedelta_s(0.1), monitor_process_interval=timedelta_s(0.1),
        progress_watchdog_interval=timedelta_s(0.1), soft_timeout=timedelta_s(20),
        hard_timeout=timedelta_s(25), barrier_timeout=timedelta_s(40),
        completion_timeout=timedelta_s(40))
    def train(call_wrapper: inprocess.CallWrapper = None):  # the annotation makes NVRx pass it
        rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
        if not base_store:
            base_store.append(dist.TCPStore(os.environ["MASTER_ADDR"],
                                            int(os.environ["MASTER_PORT"]) + 1, world,
                                            rank == 0, wait_for_workers=False))
        store = dist.PrefixStore(f"iter{call_wrapper.iteration}", base_store[0])
        dist.init_process_group("gloo", store=store, rank=rank, world_size=world)
        ddp = DistributedDataParallel(model)  # broadcasts rank 0's parameters
        step = torch.tensor([progress["step"]])
        dist.all_reduce(step, op=dist.ReduceOp.MIN)
        progress["step"] = int(step)
        event("ready", rank=rank, world=world, iteration=call_wrapper.iteration)
        event("loaded", rank=rank, step=progress["step"])
        while progress["step"] < args.steps:
            call_wrapper.ping()
            train_step(args, ddp, optimizer, progress["step"], rank)
            progress["step"] += 1
            event("step", rank=rank, step=progress["step"],
                  cpu_ns=time.process_time_ns())
        dist.destroy_process_group()

    train()


def timedelta_s(seconds):
    from datetime import timedelta
    return timedelta(seconds=seconds)


def run_dgt(args):
    try:
        import dgt.recovery
    except ImportError as e:
        event("skipped", rank=RANK, why=f"'import dgt.recovery' failed ({e})".replace(" ", "_"))
        print(f"dgt in-place row skipped: import dgt.recovery failed: {e}", file=sys.stderr,
              flush=True)
        return
    rank = RANK
    model = make_model(args)
    optimizer = make_optimizer(model)

    def body(ddp, step):
        train_step(args, ddp, optimizer, step, rank)
        event("step", rank=rank, step=step + 1, cpu_ns=time.process_time_ns())

    def on_recovered(r):  # survivors and replacement: state synced at r.resume_step
        event("ready", rank=rank)
        event("loaded", rank=rank, step=r.resume_step)

    with dgt.recovery.Trainer(model, optimizer, on_recovered=on_recovered) as t:
        event("ready", rank=rank)
        event("loaded", rank=rank, step=t.step)
        t.run(body, args.steps)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--mode", choices=("ddp", "torchft", "nvrx", "dgt"), default="ddp")
    ap.add_argument("--steps", type=int, default=200)
    ap.add_argument("--hidden", type=int, default=1024)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--ckpt-dir", default="", help="--mode ddp: where rank 0 keeps ckpt.pt")
    ap.add_argument("--ckpt-every", type=int, default=10)
    ap.add_argument("--timeout", type=float, default=30.0, help="torchft timeouts, seconds")
    ap.add_argument("--torchft-ddp", action="store_true",
                    help="--mode torchft: torchft's DistributedDataParallel instead of one "
                         "manager.allreduce of the gradients after backward()")
    ap.add_argument("--nvrx-last-call", type=float, default=1.0,
                    help="NVRx Wrapper last_call_wait, seconds (its default is 1)")
    args = ap.parse_args()
    torch.set_num_threads(1)
    {"ddp": run_ddp, "torchft": run_torchft, "nvrx": run_nvrx, "dgt": run_dgt}[args.mode](args)
    event("done", rank=RANK)
    return 0


if __name__ == "__main__":
    sys.exit(main())
