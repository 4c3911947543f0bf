#!/usr/bin/env python3
"""What the Python layer adds to an allreduce: per-call times of the same
sum through dist.all_reduce on the switchml backend and straight through
the library's ctypes binding (switchml.Session), on one switch.

    python3 overhead.py [--workers 2] [--sizes 1,1024,262144,16777216] [--calls 50]

Ranks are processes on this host; rank 0 runs the embedded switch. For
each size (float32 values) every rank makes --calls timed calls each
way, after a barrier, and rank 0 prints the median per call.
"""
import argparse
import datetime
import socket
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def median(xs):
    xs = sorted(xs)
    return xs[len(xs) // 2]


def rank_main(rank, a, port):
    import switchml
    from switchml import _lib
    torch.set_num_threads(1)
    dist.init_process_group("switchml", rank=rank, world_size=a.workers, init_method="tcp://127.0.0.1:%d" % port,
                            timeout=datetime.timedelta(minutes=5))
    pg = dist.distributed_c10d._get_default_group()
    # A second job on the same switch, driven through ctypes alone.
    job = "overhead-%d" % port
    sess = switchml.Session(pg.controller, job, rank, a.workers)
    rows = []
    for n in a.sizes:
        x = torch.ones(n)
        times = {"torch": [], "ctypes": []}
        for way in ("torch", "ctypes"):
            for i in range(a.calls + 2):
                x.fill_(1.0)
                sess.barrier("%s-%d-%d" % (way, n, i))
                t0 = time.perf_counter()
                if way == "torch":
                    dist.all_reduce(x)
                else:
                    sess.allreduce(x.data_ptr(), n, _lib.FLOAT32)
                dt = time.perf_counter() - t0
                if i >= 2:  # two warm-up calls
                    times[way].append(dt)
                if x[0].item() != a.workers:
                    raise SystemExit("rank %d: sum %g, want %d" % (rank, x[0].item(), a.workers))
        rows.append((n, median(times["torch"]), median(times["ctypes"])))
    sess.close()
    if rank == 0:
        print("| float32 values | dist.all_reduce (ms) | Session.allreduce via ctypes (ms) | difference (ms) |")
        print("|---|---|---|---|")
        for n, t, c in rows:
            print("| %d | %.3f | %.3f | %+.3f |" % (n, t * 1e3, c * 1e3, (t - c) * 1e3))
    dist.barrier()
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--sizes", default="1,1024,262144,16777216")
    p.add_argument("--calls", type=int, default=50)
    a = p.parse_args()
    a.sizes = [int(s) for s in a.sizes.split(",")]
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    mp.spawn(rank_main, args=(a, port), nprocs=a.workers, join=True)


if __name__ == "__main__":
    main()
