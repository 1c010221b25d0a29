"""Distributed data-parallel training of a small MLP on scikit-learn's digits.

A real (if tiny) DistributedDataParallel job for exercising the ``dgt``
launcher: every rank trains on its shard of the 8x8 handwritten-digits
training split (gloo backend, CPU only), gradients are all-reduced by DDP,
and rank 0 reports the accuracy on a held-out test split.

Run it with the launcher::

    dgt-run --standalone --nproc-per-node=4 examples/train_digits.py

or without one, by starting each process by hand with MASTER_ADDR,
MASTER_PORT, WORLD_SIZE, RANK and LOCAL_RANK set in its environment.

Rank 0 prints exactly one line ``test accuracy: 0.XXXX``; the script exits
with code 1 if that accuracy is below 0.90.
"""

import argparse
import os
import sys

import torch
import torch.distributed as dist
from sklearn.datasets import load_digits
from sklearn.model_selection import train_test_split
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from torch.utils.data import DataLoader, TensorDataset
from torch.utils.data.distributed import DistributedSampler

MIN_ACCURACY = 0.90


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=32,
                        help="per-rank batch size")
    parser.add_argument("--lr", type=float, default=3e-3)
    # Accepted (and ignored) so launchers that pass it don't break us.
    parser.add_argument("--local-rank", "--local_rank", type=int, default=None)
    return parser.parse_args()


def load_data():
    """Deterministic 80/20 stratified split, features scaled to [0, 1]."""
    digits = load_digits()
    x = torch.tensor(digits.data, dtype=torch.float32) / 16.0
    y = torch.tensor(digits.target, dtype=torch.int64)
    x_train, x_test, y_train, y_test = train_test_split(
        x, y, test_size=0.2, random_state=0, stratify=y)
    return TensorDataset(x_train, y_train), (x_test, y_test)


def main() -> int:
    args = parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(0)  # identical initial weights on every rank

    rank = int(os.environ["RANK"])
    world_size = int(os.environ["WORLD_SIZE"])
    local_rank = int(os.environ.get("LOCAL_RANK", "0"))
    print(f"rank {rank}/{world_size} local_rank {local_rank}: starting",
          flush=True)

    dist.init_process_group(backend="gloo", init_method="env://")

    train_set, (x_test, y_test) = load_data()
    sampler = DistributedSampler(train_set, shuffle=True, seed=0)
    loader = DataLoader(train_set, batch_size=args.batch_size, sampler=sampler)

    model = DistributedDataParallel(nn.Sequential(
        nn.Linear(64, 128), nn.ReLU(), nn.Linear(128, 10)))
    optimizer = torch.optim.Adam(model.parameters(), lr=args.lr)
    loss_fn = nn.CrossEntropyLoss()

    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        model.train()
        for xb, yb in loader:
            optimizer.zero_grad()
            loss_fn(model(xb), yb).backward()
            optimizer.step()

    status = 0
    if rank == 0:
        model.eval()
        with torch.no_grad():
            predicted = model.module(x_test).argmax(dim=1)
        accuracy = (predicted == y_test).float().mean().item()
        print(f"test accuracy: {accuracy:.4f}", flush=True)
        if accuracy < MIN_ACCURACY:
            print(f"error: test accuracy {accuracy:.4f} is below "
                  f"{MIN_ACCURACY:.2f}", file=sys.stderr, flush=True)
            status = 1

    dist.destroy_process_group()
    return status


if __name__ == "__main__":
    sys.exit(main())
