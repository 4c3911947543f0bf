"""Allreduces tensors with torch.distributed's gloo backend, as bfloat16 and
as float32, for precision's test of its model of Gloo's ring.

    python gloo_ring.py IN OUT RANKS PORT SIZE...

IN holds RANKS rows of sum(SIZE) little-endian float32 values, row r being
rank r's values: for each SIZE in turn, every rank allreduces its next SIZE
values rounded to bfloat16, then the same values as float32. Rank 0 writes
OUT: for each SIZE, the bfloat16 sum (uint16 bits, little-endian), then the
float32 sum. Every rank checks that it holds the same sums as rank 0.
"""
import os
import sys

import numpy as np
import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def worker(rank, ranks, port, inp, out, sizes):
    # Without LOCAL_WORLD_SIZE Gloo runs its ring over TCP, as across hosts.
    os.environ.pop("LOCAL_WORLD_SIZE", None)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=ranks)
    total = sum(sizes)
    row = np.fromfile(inp, dtype="<f4", count=total, offset=4 * total * rank)
    results = []
    off = 0
    for size in sizes:
        x = torch.from_numpy(row[off:off + size].copy())
        off += size
        b = x.to(torch.bfloat16)
        dist.all_reduce(b)
        dist.all_reduce(x)
        results.append(b.view(torch.int16).numpy().astype("<i2").tobytes() + x.numpy().astype("<f4").tobytes())
    blob = b"".join(results)
    mine = torch.frombuffer(bytearray(blob), dtype=torch.uint8)
    first = mine.clone()
    dist.broadcast(first, 0)
    if not torch.equal(first, mine):
        raise SystemExit(f"rank {rank}: the sums differ from rank 0's")
    if rank == 0:
        with open(out, "wb") as f:
            f.write(blob)
    dist.destroy_process_group()


def main():
    inp, out, ranks, port = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    sizes = [int(s) for s in sys.argv[5:]]
    mp.spawn(worker, args=(ranks, port, inp, out, sizes), nprocs=ranks)


if __name__ == "__main__":
    main()
