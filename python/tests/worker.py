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

import switchml  # registers the backend

TORCH_MAJOR = int(torch.__version__.split(".")[0])
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

    catch("meta", lambda: dist.all_reduce(torch.empty(3, device="meta")))
    # torch hands complex tensors over as real views: complex64 arrives
    # as float32 (and is summed by the switch).
    c = torch.full((3,), complex(rank, 1), dtype=torch.complex64)
    dist.all_reduce(c)
    out["complex64"] = c
    catch("avg_int", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int32), op=dist.ReduceOp.AVG))
    catch("avg_int64", lambda: dist.all_reduce(torch.ones(3, dtype=torch.int64), op=dist.ReduceOp.AVG))
    catch("reduce_scatter_size", lambda: dist.reduce_scatter_tensor(torch.ones(2), torch.ones(2 * world + 1)))
    catch("bcast_meta", lambda: dist.broadcast(torch.empty(3, device="meta"), 0))
    catch("reduce_meta", lambda: dist.reduce(torch.empty(3, device="meta"), 0))
    # A barrier only rank 0 enters, with a timeout of its own: it ends
    # then, as gloo's does from torch 2.0 (1.13's gloo keeps the group's).
    if rank == 0 and TORCH_MAJOR >= 2:
        o = dist.BarrierOptions()
        o.timeout = datetime.timedelta(seconds=1)
        catch("barrier_timeout", lambda: dist.distributed_c10d._get_default_group().barrier(o).wait())
    x = torch.full((5,), float(rank + 1))
    dist.all_reduce(x)
    out["after"] = x
    return out


def attempt(fn):
    """What fn returns, or ("raised", the exception's class name): gloo's
    refusals must be switchml's too."""
    try:
        return fn()
    except Exception as e:  # recorded for the test to judge
        return ("raised", type(e).__name__)


def delegated(backend, rank, world):
    """Every call the switch does not carry, on inputs that differ by
    rank: the results must be gloo's, bit for bit."""
    out = {}
    g = torch.Generator().manual_seed(77 + rank)
    f32 = lambda: torch.randn(257, generator=g)  # noqa: E731
    i64 = lambda: torch.randint(-(1 << 40), 1 << 40, (33,), generator=g, dtype=torch.int64)  # noqa: E731
    op = dist.ReduceOp

    def reduced(key, t, **kw):
        out[key] = attempt(lambda: dist.all_reduce(t, **kw) or t)

    for name in ("MAX", "MIN", "PRODUCT"):
        reduced(("allreduce", name), f32(), op=getattr(op, name))
    for name in ("BAND", "BOR", "BXOR"):
        reduced(("allreduce", name), i64(), op=getattr(op, name))
    reduced(("allreduce", "int64"), i64())
    reduced(("allreduce", "float64"), f32().double())
    reduced(("allreduce", "uint8"), torch.arange(10, dtype=torch.uint8) * (rank + 1))
    reduced(("allreduce", "bool"), torch.tensor([rank == 0, False, True]))
    reduced(("allreduce", "noncontiguous"), f32().narrow(0, 0, 256).reshape(16, 16).t())
    reduced(("allreduce", "int64 MAX"), i64(), op=op.MAX)
    t = torch.arange(6, dtype=torch.float64) * (rank + 1)
    out["reduce"] = attempt(lambda: dist.reduce(t, 1) or t)
    x = torch.full((4,), float(rank + 1))
    outs = [torch.empty(4) for _ in range(world)] if rank == 2 else None
    out["gather"] = attempt(lambda: dist.gather(x, outs, dst=2) or outs)
    s = torch.empty(3, dtype=torch.int64)
    ins = [torch.arange(3, dtype=torch.int64) + 10 * r for r in range(world)] if rank == 0 else None
    out["scatter"] = attempt(lambda: dist.scatter(s, ins, src=0) or s)
    a_in = [torch.full((2,), float(rank * 10 + r)) for r in range(world)]
    a_out = [torch.empty(2) for _ in range(world)]
    out["all_to_all"] = attempt(lambda: dist.all_to_all(a_out, a_in) or a_out)
    # all_to_all_single with uneven splits: rank r sends r+1+k values to rank k.
    in_splits = [rank + 1 + k for k in range(world)]
    out_splits = [r + 1 + rank for r in range(world)]
    flat_in = torch.arange(sum(in_splits), dtype=torch.float32) + 100 * rank
    flat_out = torch.empty(sum(out_splits))
    out["all_to_all_single"] = attempt(lambda: dist.all_to_all_single(flat_out, flat_in, out_splits, in_splits) or flat_out)
    # A ring of sends and receives, blocking and not.
    nxt, prv = (rank + 1) % world, (rank - 1) % world
    r1 = torch.empty(5)
    if rank % 2 == 0:
        dist.send(torch.full((5,), float(rank)), nxt)
        dist.recv(r1, prv)
    else:
        dist.recv(r1, prv)
        dist.send(torch.full((5,), float(rank)), nxt)
    out["send_recv"] = r1
    r2 = torch.empty(3, dtype=torch.int64)
    works = [dist.isend(torch.full((3,), rank, dtype=torch.int64), nxt), dist.irecv(r2, prv)]
    for w in works:
        w.wait()
    out["isend_irecv"] = r2
    r3 = torch.empty(4)
    ops = [dist.P2POp(dist.isend, torch.full((4,), rank + 0.5), nxt), dist.P2POp(dist.irecv, r3, prv)]
    for w in dist.batch_isend_irecv(ops):
        w.wait()
    out["batch_isend_irecv"] = r3
    # Rank 0 receives from any source: the others send it their rank.
    if rank == 0:
        got = []
        for _ in range(world - 1):
            r = torch.empty(1)
            src = dist.recv(r)
            got.append((src, r.item()))
        out["recv_anysource"] = sorted(got)
    else:
        dist.send(torch.full((1,), float(rank)), 0)
        out["recv_anysource"] = None
    c = [f32(), i64()]
    out["allreduce_coalesced"] = attempt(lambda: dist.all_reduce_coalesced(c) or c)
    gc_out = [[torch.empty(2), torch.empty(3, dtype=torch.int64)] for _ in range(world)]
    gc_in = [torch.full((2,), float(rank)), torch.full((3,), rank, dtype=torch.int64)]
    out["allgather_coalesced"] = attempt(lambda: dist.all_gather_coalesced(gc_out, gc_in) or gc_out)
    # reduce_scatter with uneven splits (rank r keeps r + 2 values) and with MAX.
    ru_in = [torch.arange(r + 2, dtype=torch.float32) * (rank + 1) + r for r in range(world)]
    ru_out = torch.empty(rank + 2)
    out["reduce_scatter_uneven"] = attempt(lambda: dist.reduce_scatter(ru_out, ru_in) or ru_out)
    rm_in = [torch.full((3,), float((rank * 7 + r) % 5)) for r in range(world)]
    rm_out = torch.empty(3)
    out["reduce_scatter_max"] = attempt(lambda: dist.reduce_scatter(rm_out, rm_in, op=op.MAX) or rm_out)
    # Object collectives: pickles through uint8 tensors.
    objs = [None] * world
    out["all_gather_object"] = attempt(lambda: dist.all_gather_object(objs, {"rank": rank, "x": [rank] * rank}) or objs)
    bl = [{"from": rank}, "two"] if rank == 1 else [None, None]
    out["broadcast_object_list"] = attempt(lambda: dist.broadcast_object_list(bl, src=1) or bl)
    go = [None] * world if rank == 0 else None
    out["gather_object"] = attempt(lambda: dist.gather_object(("r", rank), go, dst=0) or go)
    so = [None]
    out["scatter_object_list"] = attempt(
        lambda: dist.scatter_object_list(so, [("s", r) for r in range(world)] if rank == 2 else None, src=2) or so)
    pg = dist.distributed_c10d._get_default_group()
    out["monitored_barrier"] = attempt(lambda: pg.monitored_barrier(datetime.timedelta(seconds=60),
                                                                    wait_all_ranks=True))
    x = torch.full((3,), float(rank + 1))
    dist.all_reduce(x)
    out["after"] = x
    if backend != "gloo":
        out["delegated"] = pg.delegated()
        out["traffic"] = pg.traffic()
    return out


def order(backend, rank, world):
    """Calls of the switch (SUM) and of gloo (MAX, int64 SUM) on one
    tensor, queued without waiting and alternating: each reads what the
    call before wrote, so any reordering changes the result. gloo's own
    worker threads may run queued calls at once, so its reference waits
    for each call before the next."""
    x = (torch.arange(6, dtype=torch.int32) + 1) * (rank + 1)
    y = torch.arange(4, dtype=torch.int64) * (rank + 2)
    history = []
    for i in range(50):
        first, second = (dist.ReduceOp.SUM, dist.ReduceOp.MAX) if i % 2 == 0 else (dist.ReduceOp.MAX, dist.ReduceOp.SUM)
        works = []
        for t, o in ((x, first), (y, dist.ReduceOp.SUM), (x, second)):
            works.append(dist.all_reduce(t, op=o, async_op=True))
            if backend == "gloo":
                works[-1].wait()
        for w in works:
            w.wait()
        history.append(x.clone())
        # The ranks differ again, by a step that differs by round, and
        # the values stay small.
        x.remainder_(997).add_(rank * (i + 1))
        y.remainder_(1 << 20).add_(rank + i)
    # Blocking calls, alternating, with values that differ every time.
    z = torch.zeros(5, dtype=torch.int32)
    for i in range(50):
        z.add_(rank * 3 + i)
        dist.all_reduce(z, op=dist.ReduceOp.MAX if i % 2 else dist.ReduceOp.SUM)
        z.remainder_(10007)
    out = {"history": history, "y": y, "z": z}
    if backend != "gloo":
        pg = dist.distributed_c10d._get_default_group()
        out["delegated"], out["traffic"] = pg.delegated(), pg.traffic()
    return out


def checkpoint(backend, rank, world):
    """torch 2.x's helpers on a group made with device_id=cpu:0: a tensor
    rank 0 holds, scattered to shards by distribute_tensor, saved with
    DCP (torch.distributed.checkpoint) and loaded back into zeros."""
    import torch.distributed.checkpoint as dcp
    from torch.distributed.device_mesh import init_device_mesh
    try:
        from torch.distributed.tensor import Shard, distribute_tensor
    except ImportError:  # the first 2.x releases keep it under _tensor
        from torch.distributed._tensor import Shard, distribute_tensor

    mesh = init_device_mesh("cpu", (world,))
    full = torch.arange(world * 4 * 3, dtype=torch.float32).reshape(world * 4, 3)
    src = full.clone() if rank == 0 else torch.zeros_like(full)
    shards = distribute_tensor(src, mesh, [Shard(0)])
    out = {"shard": shards.to_local().clone()}
    where = os.path.join(OUT_DIR, "checkpoint")
    dcp.save({"w": shards, "step": torch.tensor(7)}, checkpoint_id=where)
    back = {"w": distribute_tensor(torch.zeros_like(full), mesh, [Shard(0)]), "step": torch.tensor(0)}
    dcp.load(back, checkpoint_id=where)
    out["loaded"] = back["w"].to_local().clone()
    out["full"] = back["w"].full_tensor()
    out["step"] = back["step"].item()
    pg = dist.distributed_c10d._get_default_group()
    out["bound"] = str(pg.bound_device_id)
    if backend != "gloo":
        out["delegated"] = pg.delegated()
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


# The values of each call of the wire16 scenario: enough packets that the
# exponent round (one window per lane) is a small share of them.
WIRE16_N = 1 << 20


def wire16(backend, rank, world):
    """float32, bfloat16 and float16 sums of WIRE16_N values on the default
    group, and float32 on a group made with Options(wire_bits=16): each
    sum, the width it travelled at, and what the library sent for it."""
    g16 = dist.new_group(backend="switchml", pg_options=switchml.Options(wire_bits=16))
    out = {}
    for group, dtypes in ((None, (torch.float32, torch.bfloat16, torch.float16)), (g16, (torch.float32,))):
        pg = group or dist.distributed_c10d._get_default_group()
        name = "default" if group is None else "wire16"
        for dt in dtypes:
            x = inputs(rank, dt, n=WIRE16_N)
            before = pg.stats()
            dist.all_reduce(x, group=group)
            after = pg.stats()
            out[name, "sum", dt] = x
            out[name, "sent", dt] = {k: after[k] - before[k] for k in after}
            out[name, "bits", dt] = pg.wire_bits(dt)
    return out


def wire16_mismatch(backend, rank, world):
    """Never reached: rank 0 asks for 16-bit float32 (pg_options), the
    others do not."""
    raise AssertionError("the job formed although its ranks disagree on the wire width")


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


def ignored_sigint(backend, rank, world):
    """Rank 1 ignores SIGINT, as a job a shell starts in the background
    does: the SIGINT the test sends it once it says READY must leave its
    job alone, and the allreduce after it sums."""
    dist.barrier()
    if rank == 1:
        print("READY", flush=True)
        sys.stdin.readline()
    x = torch.full((1000,), float(rank + 1))
    dist.all_reduce(x)
    return {"sum": x[0].item()}


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


def ddp(backend, rank, world, hook=None):
    """A few steps of DDP on a small model; every rank gets other data.
    With hook, one of DDP's compression hooks, which casts each gradient
    bucket to a 16-bit type before the allreduce. The parameters, the
    losses, and what the allreduces handed the group."""
    model = small_model()
    net = torch.nn.parallel.DistributedDataParallel(model)
    if hook is not None:
        net.register_comm_hook(None, hook)
    before = traffic().get("allreduce", (0, 0))
    losses = train(net, rank, 10)
    after = traffic().get("allreduce", (0, 0))
    values = sum(p.numel() for p in model.parameters())
    return {"params": [p.detach().clone() for p in model.parameters()], "losses": losses, "live": live_works(),
            "allreduce": (after[0] - before[0], after[1] - before[1]), "values": values}


def ddp_bf16(backend, rank, world):
    """ddp with bf16_compress_hook."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import bf16_compress_hook
    return ddp(backend, rank, world, bf16_compress_hook)


def ddp_fp16(backend, rank, world):
    """ddp with fp16_compress_hook."""
    from torch.distributed.algorithms.ddp_comm_hooks.default_hooks import fp16_compress_hook
    return ddp(backend, rank, world, fp16_compress_hook)


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
# The scenarios whose group is made with init_process_group(device_id=cpu:0).
DEVICE_ID = {"checkpoint"}
# The directory every rank's result goes to (shared by the ranks).
OUT_DIR = None
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
    global OUT_DIR
    OUT_DIR = os.path.dirname(path)
    if scenario == "ignored_sigint" and rank == 1:
        signal.signal(signal.SIGINT, signal.SIG_IGN)
    elif scenario == "interrupt":
        # Ctrl-C as at a terminal: a shell starts a background job, and so
        # this process, with SIGINT ignored, which the backend respects.
        signal.signal(signal.SIGINT, signal.default_int_handler)
    extra = {"device_id": torch.device("cpu:0")} if scenario in DEVICE_ID else {}
    if scenario == "wire16_mismatch" and rank == 0:
        extra["pg_options"] = switchml.Options(wire_bits=16)
    dist.init_process_group(backend, store=store(rank, world, timeout), rank=rank, world_size=world, timeout=timeout,
                            **extra)
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
