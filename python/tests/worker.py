"""One rank of a test scenario, run by the tests as a subprocess:

    python3 worker.py SCENARIO BACKEND RANK WORLD OUT

Rank 0 serves the job's TCP store on a port of the kernel's choosing and
prints "STORE <port>"; every other rank reads that port from its first
line of stdin. Each saves what the scenario produced to OUT (torch.save of
a dict); a failure ends it with a traceback and a non-zero status. Rank 0
then waits for its stdin to close (see main).
"""
import datetime
import os
import signal
import sys
import threading
import time

import torch
import torch.distributed as dist

import switchml  # noqa: F401  (registers the backend)

DTYPES = [torch.float32, torch.float16, torch.bfloat16, torch.int32]


def inputs(rank, dtype, n=3001):
    """The same inputs on every backend: seeded by the rank alone."""
    g = torch.Generator().manual_seed(1000 + rank)
    if dtype == torch.int32:
        return torch.randint(-1000, 1000, (n,), generator=g, dtype=torch.int32)
    return (torch.randn(n, generator=g) * 4).to(dtype)


def ops(backend, rank, world):
    out = {}
    for dt in DTYPES:
        # gloo sums no bfloat16: its reference sum is taken in float32
        # and rounded once.
        ref = backend == "gloo" and dt == torch.bfloat16
        x = inputs(rank, dt).float() if ref else inputs(rank, dt)
        dist.all_reduce(x)
        out["sum", dt] = x.to(dt)
        if dt.is_floating_point:
            y = inputs(rank, dt).float() if ref else inputs(rank, dt)
            if backend == "gloo":  # gloo has no AVG: the reference divides
                dist.all_reduce(y)
                y /= world
            else:
                dist.all_reduce(y, op=dist.ReduceOp.AVG)
            out["avg", dt] = y.to(dt)
    # A 2-D tensor, an async call and a zero-element tensor.
    m = inputs(rank, torch.float32).narrow(0, 0, 3000).reshape(30, 100).contiguous()
    dist.all_reduce(m, async_op=True).wait()
    out["sum2d"] = m
    e = torch.empty(0)
    dist.all_reduce(e)
    out["empty"] = e
    # Broadcast of dtypes the switch cannot sum and of odd byte counts.
    for root in range(world):
        b = torch.arange(7, dtype=torch.float64) * (root + 1) if rank == root else torch.zeros(7, dtype=torch.float64)
        dist.broadcast(b, root)
        out["bcast", root] = b
    u = torch.arange(5, dtype=torch.uint8) + 10 * rank
    dist.broadcast(u, world - 1)
    out["bcast_u8"] = u
    # Parameters are written in place, as gloo does, autograd or not.
    w = torch.nn.Parameter(torch.full((3,), float(rank + 1)))
    dist.broadcast(w, 1)
    v = torch.nn.Parameter(torch.full((3,), float(rank + 1)))
    if backend == "gloo":
        dist.all_reduce(v)
        with torch.no_grad():
            v /= world
    else:
        dist.all_reduce(v, op=dist.ReduceOp.AVG)
    out["params"] = (w.detach().clone(), v.detach().clone())
    g = torch.arange(6, dtype=torch.int64).reshape(2, 3) * (rank + 1)
    gl = [torch.empty_like(g) for _ in range(world)]
    dist.all_gather(gl, g)
    out["gather"] = gl
    h = torch.full((3,), float(rank), dtype=torch.float16)
    flat = torch.empty(3 * world, dtype=torch.float16)
    if backend == "gloo":  # gloo has no all_gather_into_tensor
        parts = [torch.empty_like(h) for _ in range(world)]
        dist.all_gather(parts, h)
        flat = torch.cat(parts)
    else:
        dist.all_gather_into_tensor(flat, h)
    out["gather_flat"] = flat
    # reduce_scatter: SUM of every dtype the switch sums, AVG of floats,
    # the tensor and the list forms, and the coalesced form torch 2.x's
    # coalescing manager calls.
    for dt in DTYPES:
        for op in ("sum", "avg") if dt.is_floating_point else ("sum",):
            full = inputs(rank, dt, n=3 * world * 100)
            shard = torch.empty(3 * 100, dtype=dt)
            reduce_scatter(backend, world, shard, full, op)
            out["rs", op, dt] = shard
    ins = [inputs(rank, torch.float32, n=4 * world + r) for r in range(world)]
    ins = [t.narrow(0, 0, 4) for t in ins]
    o = torch.empty(4)
    if backend == "gloo":
        reduce_scatter(backend, world, o, torch.cat(ins), "sum")
    else:
        dist.reduce_scatter(o, ins)
    out["rs_list"] = o
    pairs = [(torch.empty(5 + k, dtype=torch.int32), torch.arange(world * (5 + k), dtype=torch.int32) * (rank + k + 1))
             for k in range(2)]
    if backend == "gloo":
        for o, i in pairs:
            reduce_scatter(backend, world, o, i, "sum")
    else:
        pg = dist.distributed_c10d._get_default_group()
        pg.reduce_scatter_tensor_coalesced([o for o, _ in pairs], [i for _, i in pairs],
                                           torch._C._distributed_c10d.ReduceScatterOptions()).wait()
    out["rs_coalesced"] = [o for o, _ in pairs]
    g2 = [(torch.full((2 + k,), rank * 10 + k, dtype=torch.int64), torch.empty((2 + k) * world, dtype=torch.int64))
          for k in range(2)]
    if backend == "gloo":
        for i, o in g2:
            parts = [torch.empty_like(i) for _ in range(world)]
            dist.all_gather(parts, i)
            o.copy_(torch.cat(parts))
    else:
        pg = dist.distributed_c10d._get_default_group()
        pg.allgather_into_tensor_coalesced([o for _, o in g2], [i for i, _ in g2], torch._C._distributed_c10d.AllgatherOptions()).wait()
    out["gather_coalesced"] = [o for _, o in g2]
    if backend != "gloo":
        # The traffic model of the README: what one call hands the switch.
        pg = dist.distributed_c10d._get_default_group()
        out["wire"] = {}
        before = pg.traffic()
        for kind, call in (("reduce_scatter", lambda: dist.reduce_scatter_tensor(torch.empty(1000),
                                                                                 torch.ones(1000 * world))),
                           ("allgather", lambda: dist.all_gather_into_tensor(torch.empty(1000 * world),
                                                                             torch.ones(1000)))):
            wire = pg.stats()
            call()
            after = pg.stats()
            out["wire"][kind] = {k: after[k] - wire[k] for k in after}
        after = pg.traffic()
        out["traffic"] = {k: (after[k][0] - before.get(k, (0, 0))[0], after[k][1] - before.get(k, (0, 0))[1])
                          for k in ("reduce_scatter", "allgather")}
    dist.barrier()
    out["live"] = live_works()
    return out


def reduce_scatter(backend, world, output, inp, op, group=None):
    """reduce_scatter_tensor of inp into output: through the backend, or
    for the gloo reference with gloo's own reduce_scatter_tensor where the
    installed torch has it, else an allreduce of which this rank keeps its
    shard. gloo has no AVG (the reference divides) nor bfloat16 (its
    reference sums in float32 and rounds once)."""
    if backend != "gloo":
        dist.reduce_scatter_tensor(output, inp, op=dist.ReduceOp.AVG if op == "avg" else dist.ReduceOp.SUM,
                                   group=group)
        return
    rank, n = dist.get_rank(group), output.numel()
    x = inp.float() if inp.dtype == torch.bfloat16 else inp.clone()
    o = torch.empty(n, dtype=x.dtype)
    try:
        dist.reduce_scatter_tensor(o, x, group=group)
    except (RuntimeError, NotImplementedError) as e:  # torch 1.13's gloo has none
        if "does not support" not in str(e) and "not supported" not in str(e) and "not implemented" not in str(e):
            raise
        dist.all_reduce(x, group=group)
        o = x.narrow(0, rank * n, n).clone()
    if op == "avg":
        o /= world
    output.copy_(o.to(output.dtype))


def errors(backend, rank, world):
    """What each bad call raises; the group must stay usable after all."""
    out = {}

    def catch(key, fn):
        try:
            fn()
            out[key] = None
        except Exception as e:  # recorded for the test to judge
            out[key] = (type(e).__name__, str(e))

    t = torch.ones(4, 4)
    catch("noncontiguous", lambda: dist.all_reduce(t.t()))
    catch("meta", lambda: dist.all_reduce(torch.empty(3, device="meta")))
    catch("float64", lambda: dist.all_reduce(torch.ones(3, dtype=torch.float64)))
    # torch hands complex tensors over as real views: complex128 arrives
    # as float64, complex64 as float32 (and is summed).
    catch("complex", lambda: dist.all_reduce(torch.ones(3, dtype=torch.complex128)))
    c = torch.full((3,), complex(rank, 1), dtype=torch.complex64)
    dist.all_reduce(c)
    out["complex64"] = c
    catch("max", lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.MAX))
    catch("product", lambda: dist.all_reduce(torch.ones(3), op=dist.ReduceOp.PRODUCT))
    catch("avg_int", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.AVG))
    catch("reduce", lambda: dist.reduce(torch.ones(3), 0))
    catch("reduce_scatter", lambda: dist.reduce_scatter(torch.ones(1), [torch.ones(1)] * world, op=dist.ReduceOp.MAX))
    catch("reduce_scatter_size", lambda: dist.reduce_scatter_tensor(torch.ones(2), torch.ones(2 * world + 1)))
    catch("all_to_all", lambda: dist.all_to_all([torch.ones(1)] * world, [torch.ones(1)] * world))
    catch("send", lambda: dist.send(torch.ones(1), (rank + 1) % world))
    catch("bcast_meta", lambda: dist.broadcast(torch.empty(3, device="meta"), 0))
    x = torch.full((5,), float(rank + 1))
    dist.all_reduce(x)
    out["after"] = x
    return out


def transport(backend, rank, world):
    """Sums over the switch, and what the lanes moved them through."""
    out = {}
    for dt in (torch.float32, torch.int32):
        x = inputs(rank, dt)
        dist.all_reduce(x)
        out["sum", dt] = x
    out["transport"] = dist.distributed_c10d._get_default_group()._session.transport()
    return out


def sparse(backend, rank, world):
    """The gradient of an embedding table, which few rows of each rank's
    batch touch, and an int32 tensor with mostly zero blocks."""
    torch.manual_seed(7)
    emb = torch.nn.Embedding(5000, 32)
    g = torch.Generator().manual_seed(50 + rank)
    ids = torch.randint(0, 5000, (40,), generator=g)
    emb(ids).pow(2).sum().backward()
    grad = emb.weight.grad.contiguous()
    dist.all_reduce(grad)
    x = torch.zeros(100000, dtype=torch.int32)
    x[rank * 3000:rank * 3000 + 700] = torch.arange(700, dtype=torch.int32) - rank
    dist.all_reduce(x)
    return {"grad": grad, "ints": x}


def sparse_mismatch(backend, rank, world):
    """Never reached: rank 0 joins sparse, the others dense."""
    raise AssertionError("the job formed although its ranks disagree on SWITCHML_SPARSE")


def live_works():
    """Work objects the switchml group still keeps alive (0 once every
    collective has completed and been waited for)."""
    pg = dist.distributed_c10d._get_default_group()
    return len(pg._live) if hasattr(pg, "_live") else 0


def abort(backend, rank, world):
    """Rank 0 hands the switch a NaN; every rank must learn it and none
    may hang."""
    # Every rank past init_process_group first: rank 0's bad input fails at
    # once, and rank 0 also serves the TCP store that a slower rank may
    # still be polling in init's own barrier.
    dist.barrier()
    x = torch.ones(1000)
    if rank == 0:
        x[123] = float("nan")
    try:
        dist.all_reduce(x)
        return {"error": None}
    except Exception as e:  # recorded for the test to judge
        return {"error": (type(e).__name__, str(e))}


def interrupt(backend, rank, world):
    """Rank 1 gets a SIGINT (Ctrl-C) in the middle of an allreduce. Ranks 1
    and 2 start it and print INSIDE once a packet of theirs has reached the
    switch; rank 0 calls only once the test writes a line to its stdin,
    after rank 1 has ended, so the call cannot complete before that. The
    test sends the SIGINT once both said INSIDE. Rank 1 must end with
    KeyboardInterrupt, ranks 2 and 0 fail naming rank 1."""
    dist.barrier()
    x = torch.ones(200_000)
    try:
        if rank == 0:
            sys.stdin.readline()
            dist.all_reduce(x)
        else:
            session = dist.distributed_c10d._get_default_group()._session
            # With SWITCHML_TRANSPORT=shm and one lane, the session's
            # transport turns "shm" once the lane has written a packet
            # into the switch's inbox: the call is then on the switch.
            if session.transport() != "udp":
                raise AssertionError("transport is %r before the allreduce: want SWITCHML_TRANSPORT=shm, "
                                     "SWITCHML_LANES=1 and no allreduce before" % session.transport())
            work = dist.all_reduce(x, async_op=True)
            while session.transport() != "shm":
                if work.is_completed():
                    raise AssertionError("the allreduce completed without rank 0")
                time.sleep(0.01)
            if rank == 1 and os.environ.get("WORKER_SIGINT_ON_THREAD"):
                # The SIGINT goes to a thread other than the main one, as
                # the kernel may hand a process's signal to any of its
                # threads: Python's handler then runs only once the main
                # thread, waiting below, looks for it.
                def sigint_on_this_thread():
                    sys.stdin.readline()
                    signal.pthread_kill(threading.get_ident(), signal.SIGINT)

                threading.Thread(target=sigint_on_this_thread, daemon=True).start()
            print("INSIDE", flush=True)
            work.wait()
        return {"error": None}
    except KeyboardInterrupt:
        raise
    except Exception as e:  # recorded for the test to judge
        return {"error": (type(e).__name__, str(e))}


def small_model():
    """The model the DDP and FSDP tests train: the same on every rank."""
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(20, 32), torch.nn.ReLU(), torch.nn.Linear(32, 4))


def train(net, rank, steps):
    """steps of SGD on net, each rank on data of its own; the losses."""
    opt = torch.optim.SGD(net.parameters(), lr=0.05)
    g = torch.Generator().manual_seed(rank)
    losses = []
    for _ in range(steps):
        x, y = torch.randn(16, 20, generator=g), torch.randint(0, 4, (16,), generator=g)
        opt.zero_grad()
        loss = torch.nn.functional.cross_entropy(net(x), y)
        loss.backward()
        opt.step()
        losses.append(loss.item())
    return losses


def ddp(backend, rank, world):
    """A few steps of DDP on a small model; every rank gets other data."""
    model = small_model()
    losses = train(torch.nn.parallel.DistributedDataParallel(model), rank, 10)
    return {"params": [p.detach().clone() for p in model.parameters()], "losses": losses, "live": live_works()}


def fsdp(backend, rank, world):
    """A few steps of FSDP (fully_shard, torch 2.x) on a CPU DeviceMesh:
    each layer's parameters sharded across the ranks, gathered for the
    forward and backward passes (all_gather_into_tensor), their gradients
    reduced to the shards (reduce_scatter_tensor)."""
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.fsdp import fully_shard

    model = small_model()
    mesh = init_device_mesh("cpu", (world,))
    for layer in model:
        if isinstance(layer, torch.nn.Linear):
            fully_shard(layer, mesh=mesh)
    fully_shard(model, mesh=mesh)
    losses = train(model, rank, 5)
    return {"losses": losses, "live": live_works(), "traffic": traffic()}


def traffic():
    """What every switchml group of this process handed the switch, by
    kind of collective: {kind: (calls, bytes)} (empty on gloo)."""
    from switchml import _pg
    total = {}
    for pg in list(_pg._groups):
        for kind, (calls, nbytes) in pg.traffic().items():
            c, b = total.get(kind, (0, 0))
            total[kind] = (c + calls, b + nbytes)
    return total


# How long a collective may take, and the ranks may wait for each other
# to start: only a guard, far beyond what a loaded machine needs. In the
# interrupt scenario longer than the test's own guard, so that only the
# job's end can end the calls held up there.
TIMEOUTS = {"interrupt": 600}
TIMEOUT = 120


def store(rank, world, timeout):
    """The job's TCP store, served by rank 0. A port chosen before rank 0
    starts could be taken by the time it listens (on a busy machine, by
    any connection made meanwhile): rank 0 binds one the kernel picks and
    says which, and the test hands it to the other ranks."""
    if rank == 0:
        s = dist.TCPStore("127.0.0.1", 0, world, True, timeout, wait_for_workers=False)
        print("STORE %d" % s.port, flush=True)
        return s
    return dist.TCPStore("127.0.0.1", int(sys.stdin.readline()), world, False, timeout)


def main():
    scenario, backend, rank, world, path = sys.argv[1:6]
    rank, world = int(rank), int(world)
    if scenario == "sparse_mismatch" and rank == 0:
        os.environ["SWITCHML_SPARSE"] = "1"
    timeout = datetime.timedelta(seconds=TIMEOUTS.get(scenario, TIMEOUT))
    dist.init_process_group(backend, store=store(rank, world, timeout), rank=rank, world_size=world, timeout=timeout)
    out = globals()[scenario](backend, rank, world)
    torch.save(out, path)
    dist.destroy_process_group()
    if rank == 0:
        # Rank 0 serves the TCP store and the embedded switch and
        # controller, which stop when it ends: it stays until the test
        # closes its stdin, once every other rank has ended, so that a
        # rank still waiting for its last results, its last answer or its
        # job's end is not cut off.
        sys.stdin.read()


if __name__ == "__main__":
    main()
