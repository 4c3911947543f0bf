"""One rank of a torchrun job (env:// rendezvous), run by test_torchrun.py:

    torchrun --nproc_per_node 3 ... torchrun_worker.py

The default group is switchml; a second group over the same ranks is gloo.
Every collective runs on both, on the same inputs, and this rank compares
the results itself: it prints "OK rank R" when all agree (floats within
the switch's quantisation bound, everything else bit for bit) and ends
with a non-zero status naming the first difference otherwise.
"""
import os
import sys

import torch
import torch.distributed as dist

import switchml  # noqa: F401  (registers the backend)
from worker import inputs, reduce_scatter  # the backend tests' inputs and gloo reference

# Values per rank of the all_reduce inputs.
N = 1501

# float32 lands within a few units in the last place of the block's
# largest value; float16 and bfloat16 within one rounding of their own.
TOL = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}


def agree(what, got, want):
    if got.dtype != want.dtype or got.shape != want.shape:
        raise AssertionError("%s: switchml gave %s%s, gloo %s%s" % (what, got.dtype, tuple(got.shape), want.dtype,
                                                                    tuple(want.shape)))
    if got.dtype in TOL:
        err = (got.float() - want.float()).abs().max().item() if got.numel() else 0.0
        bound = TOL[got.dtype] * want.abs().max().float().item()
        if err > bound:
            raise AssertionError("%s: switchml differs from gloo by %g (bound %g)" % (what, err, bound))
    elif not torch.equal(got, want):
        raise AssertionError("%s: switchml gave %s, gloo %s" % (what, got, want))


def main():
    rank, world = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"])
    dist.init_process_group("switchml")  # env://, from torchrun
    gloo = dist.new_group(backend="gloo")
    if dist.get_backend() != "switchml":
        raise AssertionError("the default group's backend is %s, want switchml" % dist.get_backend())

    # all_reduce: SUM of each dtype, AVG of the floats (gloo divides).
    for dt in (torch.float32, torch.int32, torch.bfloat16):
        for avg in (False, True) if dt.is_floating_point else (False,):
            x = inputs(rank, dt, n=N)
            dist.all_reduce(x, op=dist.ReduceOp.AVG if avg else dist.ReduceOp.SUM)
            y = inputs(rank, dt, n=N).float() if dt == torch.bfloat16 else inputs(rank, dt, n=N)
            dist.all_reduce(y, group=gloo)
            if avg:
                y /= world
            agree("all_reduce %s of %s" % ("AVG" if avg else "SUM", dt), x, y.to(dt))

    # broadcast from every root, of a dtype the switch cannot sum.
    for root in range(world):
        b = torch.arange(9, dtype=torch.float64) * (rank + 1)
        c = b.clone()
        dist.broadcast(b, root)
        dist.broadcast(c, root, group=gloo)
        agree("broadcast from rank %d" % root, b, c)

    # all_gather (list) and all_gather_into_tensor (gloo: the list, joined).
    g = torch.arange(6, dtype=torch.int64).reshape(2, 3) * (rank + 1)
    got, want = [torch.empty_like(g) for _ in range(world)], [torch.empty_like(g) for _ in range(world)]
    dist.all_gather(got, g)
    dist.all_gather(want, g, group=gloo)
    for r in range(world):
        agree("all_gather slot %d" % r, got[r], want[r])
    h = inputs(rank, torch.float16, n=7)
    flat = torch.empty(7 * world, dtype=torch.float16)
    dist.all_gather_into_tensor(flat, h)
    parts = [torch.empty_like(h) for _ in range(world)]
    dist.all_gather(parts, h, group=gloo)
    if not torch.equal(flat, torch.cat(parts)):
        raise AssertionError("all_gather_into_tensor: switchml gave %s, gloo %s" % (flat, torch.cat(parts)))

    # reduce_scatter_tensor: SUM and AVG of float32, SUM of int32.
    for dt, avg in ((torch.float32, False), (torch.float32, True), (torch.int32, False), (torch.bfloat16, False)):
        full = inputs(rank, dt, n=world * 250)
        out, ref = torch.empty(250, dtype=dt), torch.empty(250, dtype=dt)
        dist.reduce_scatter_tensor(out, full, op=dist.ReduceOp.AVG if avg else dist.ReduceOp.SUM)
        reduce_scatter("gloo", world, ref, full, "avg" if avg else "sum", group=gloo)
        agree("reduce_scatter_tensor %s of %s" % ("AVG" if avg else "SUM", dt), out, ref)

    dist.barrier()
    dist.barrier(group=gloo)
    print("OK rank %d" % rank, flush=True)
    # Every rank is done with the switch before rank 0, which runs the
    # embedded one, ends.
    dist.barrier(group=gloo)
    dist.destroy_process_group()


if __name__ == "__main__":
    try:
        main()
    except Exception as e:
        print("FAILED rank %s: %s: %s" % (os.environ.get("RANK"), type(e).__name__, e), file=sys.stderr, flush=True)
        raise
