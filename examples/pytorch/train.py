#!/usr/bin/env python3
"""Data-parallel training of a small CNN on Fashion-MNIST with
DistributedDataParallel, over the switchml backend or gloo.

    python3 train.py --backend switchml --workers 4 --epochs 5 [--json out.json]

It starts --workers processes on this host (torch.multiprocessing), each a
rank of one job. Every rank trains on its own share of each epoch's shuffle
(the same for every backend, from --seed); after each epoch the ranks
evaluate their share of the test set and sum the counts. With the switchml
backend and no SWITCHML_CONTROLLER, rank 0 runs the switch in its process.

The data are Debian's dataset-fashion-mnist package (the gzip IDX files
under /usr/share/datasets/fashion-mnist; --data for another directory).
"""
import argparse
import datetime
import gzip
import json
import os
import socket
import struct
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn as nn
import torch.nn.functional as F

DATA = "/usr/share/datasets/fashion-mnist"


def read_idx(path):
    """An IDX file (gzip'd or not) as a uint8 tensor of its shape."""
    opener = gzip.open if os.path.exists(path + ".gz") else open
    with opener(path + ".gz" if opener is gzip.open else path, "rb") as f:
        raw = f.read()
    zero, dtype, dims = struct.unpack(">HBB", raw[:4])
    if zero != 0 or dtype != 0x08:
        raise ValueError("%s: not an IDX file of unsigned bytes" % path)
    shape = struct.unpack(">" + "I" * dims, raw[4:4 + 4 * dims])
    return torch.frombuffer(bytearray(raw[4 + 4 * dims:]), dtype=torch.uint8).reshape(shape)


def load(data, split):
    prefix = "train" if split == "train" else "t10k"
    try:
        x = read_idx(os.path.join(data, prefix + "-images-idx3-ubyte"))
        y = read_idx(os.path.join(data, prefix + "-labels-idx1-ubyte"))
    except FileNotFoundError as e:
        sys.exit("no Fashion-MNIST at %s (%s): apt-get install dataset-fashion-mnist, or pass --data" % (data, e))
    # Scaled to [0, 1] and centred on the training set's mean and spread.
    return ((x.float() / 255 - 0.2860) / 0.3530).unsqueeze(1), y.long()


class CNN(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 16, 5, padding=2)
        self.conv2 = nn.Conv2d(16, 32, 5, padding=2)
        self.fc1 = nn.Linear(32 * 7 * 7, 128)
        self.fc2 = nn.Linear(128, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


def rank_main(rank, a, port, out):
    torch.set_num_threads(a.threads)
    if a.backend == "switchml":
        import switchml  # noqa: F401  (registers the backend)
    dist.init_process_group(a.backend, rank=rank, world_size=a.workers, init_method="tcp://127.0.0.1:%d" % port,
                            timeout=datetime.timedelta(minutes=5))
    world = a.workers
    xtr, ytr = load(a.data, "train")
    xte, yte = load(a.data, "test")
    if a.limit:
        xtr, ytr = xtr[:a.limit], ytr[:a.limit]
    torch.manual_seed(a.seed)
    model = CNN()
    net = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.SGD(net.parameters(), lr=a.lr, momentum=0.9)
    epochs = []
    for epoch in range(1, a.epochs + 1):
        t0 = time.perf_counter()
        net.train()
        # One shuffle for all ranks and backends; rank r takes every
        # world-th example of it, and all ranks take the same count.
        order = torch.randperm(len(xtr), generator=torch.Generator().manual_seed(a.seed * 1000 + epoch))
        mine = order[rank:len(order) - len(order) % world:world]
        loss_sum, steps = 0.0, 0
        for i in range(0, len(mine), a.batch_size):
            idx = mine[i:i + a.batch_size]
            opt.zero_grad()
            loss = F.cross_entropy(net(xtr[idx]), ytr[idx])
            loss.backward()
            opt.step()
            loss_sum, steps = loss_sum + loss.item(), steps + 1
        train_s = time.perf_counter() - t0
        net.eval()
        with torch.no_grad():
            share = slice(rank * len(xte) // world, (rank + 1) * len(xte) // world)
            correct = (model(xte[share]).argmax(1) == yte[share]).sum()
        counts = torch.tensor([int(correct), share.stop - share.start, int(loss_sum * 1000), steps], dtype=torch.int32)
        dist.all_reduce(counts)
        acc = 100.0 * counts[0].item() / counts[1].item()
        rec = {"epoch": epoch, "test_accuracy": acc, "train_loss": counts[2].item() / 1000 / counts[3].item(),
               "train_seconds": train_s}
        epochs.append(rec)
        if rank == 0:
            print("%s epoch %d: test accuracy %.2f%%, train loss %.4f, %.1f s" % (
                a.backend, epoch, acc, rec["train_loss"], train_s), flush=True)
    if rank == 0 and out:
        with open(out, "w") as f:
            json.dump({"backend": a.backend, "workers": world, "seed": a.seed, "batch_size": a.batch_size,
                       "lr": a.lr, "epochs": epochs, "torch": torch.__version__}, f, indent=1)
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=["switchml", "gloo"], default="switchml")
    p.add_argument("--workers", type=int, default=2, help="processes (ranks), 2 to 4 on one host")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=64, help="per rank")
    p.add_argument("--lr", type=float, default=0.02)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank")
    p.add_argument("--limit", type=int, default=0, help="train on the first N examples only (0: all 60000)")
    p.add_argument("--data", default=DATA)
    p.add_argument("--json", default="", help="write the per-epoch results here")
    a = p.parse_args()
    if a.workers < 1:
        p.error("--workers must be at least 1")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(a, port, a.json), nprocs=a.workers, join=True)


if __name__ == "__main__":
    main()
