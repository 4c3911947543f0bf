#!/usr/bin/env python3
"""One rank of a profile replay over Gloo (torch.distributed).

Replays a compute profile written by `go run ./cmd/train --profile-out`:
sleeps for the forward pass, then for each unit's backward time from the
last unit down, and starts an asynchronous dist.all_reduce of a bucket as
soon as its gradients exist (buckets filled like DDP's, from the last unit
down, closed once they hold --bucket-elems values). The step ends when the
last allreduce is done and the update has been replayed. The buckets are
the ones trainers/profile.Profile.Buckets makes, so the Go backends and
Gloo move the same tensors in the same order. With --max-buffer-elems, a
bucket larger than that goes through one buffer of that size piece by
piece, on a communication thread that takes the buckets in order, as the
Go replayer does: gradients of hundreds of millions of values would not
fit in memory once per rank.

The buffers hold constants, or with --gradients DIR this rank's recorded
gradient DIR/rank<r>.f32 (raw little-endian float32, the buckets one after
the other, as the density command's --dump writes them; the Go replayer
checks them against the buckets first). The results are then checked,
every value of each bucket's last piece, against the sum of every rank's
file, within the bound the Go replayer allows (a float32 sum's roundings,
and SwitchML's for blocks of --packet-elements values).

Prints one JSON object: the inputs and every timed step's step_s,
compute_s, exposed_comm_s and comm_s.

    python3 replay_gloo.py --profile P.json --rank R --world N \
        --master-addr IP --master-port PORT [--bucket-elems E] \
        [--steps S] [--warmup W] [--ifname eth0] [--max-buffer-elems M] \
        [--gradients DIR] [--packet-elements K]
"""
import argparse
import datetime
import json
import os
import queue
import sys
import threading
import time


def buckets(prof, cap):
    out, cur, t = [], None, 0.0
    for u in reversed(prof["units"]):
        t += u["backward_s"]
        if cur is None:
            cur = {"elems": 0, "ready_s": 0.0}
        cur["elems"] += int(u["parameters"])
        cur["ready_s"] = t
        if cap <= 0 or cur["elems"] >= cap:
            out.append(cur)
            cur = None
    if cur is not None and cur["elems"] > 0:
        out.append(cur)
    return out


def block_exponents(m):
    """SwitchML's block exponent of each maximum magnitude: e with
    2^e > m, the IEEE exponent field minus 126 (-126 for zero and
    denormals)."""
    import numpy as np
    _, e = np.frexp(m.astype(np.float64))
    return np.where(m > 0, np.maximum(e, -126), -126)


def check_sum(got, off, world, k, gdir):
    """Checks got (numpy float32) against the sum of the first world
    ranks' recorded values from offset off on; returns an error or None."""
    import numpy as np
    paths = [os.path.join(gdir, "rank%d.f32" % r) for r in range(world)]
    k = max(1, k)
    chunk = max(1, (1 << 18) // k) * k
    n = len(got)
    for a in range(0, n, chunk):
        b = min(n, a + chunk)
        lo, hi = max(0, a - k), min(n, b + k)
        s = np.zeros(hi - lo, dtype=np.float64)
        m = np.zeros(hi - lo, dtype=np.float32)
        for p in paths:
            v = np.fromfile(p, dtype="<f4", count=hi - lo, offset=4 * (off + lo))
            if len(v) != hi - lo:
                return "%s holds fewer than %d values" % (p, off + hi)
            s += v
            m = np.maximum(m, np.abs(v))
        # Largest magnitude of each aligned block, with an empty block on
        # either side; a value's tolerance takes the largest exponent of its
        # block and its neighbours, which cover the block it travelled in.
        first = lo // k
        idx = np.arange(lo, hi) // k - first + 1
        bm = np.zeros(idx[-1] + 2, dtype=np.float32)
        np.maximum.at(bm, idx, m)
        e = block_exponents(bm)
        ex = np.maximum(np.maximum(e[:-2], e[1:-1]), e[2:])  # block j+1 at j
        el = ex[idx[a - lo:b - lo] - 1]
        span = world * np.ldexp(1.0, el)
        tol = span * (world / (2 * (2**31 - 1)) + 2.0**-24 + 2.0**-50) + world * world * np.ldexp(1.0, el - 24)
        want = s[a - lo:b - lo]
        g = got[a:b].astype(np.float64)
        bad = np.isnan(g) | (np.abs(g - want) > tol)
        if bad.any():
            i = int(np.argmax(bad))
            return "value %d after the allreduce is %g, the sum of the %d ranks' recorded values is %g (tolerance %.3g)" % (
                off + a + i, g[i], world, want[i], tol[i])
    return None


def sleep_until(t):
    d = t - time.perf_counter()
    if d > 0:
        time.sleep(d)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--profile", required=True)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--bucket-elems", type=int, default=25 * (1 << 20) // 4)
    p.add_argument("--steps", type=int, default=3)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--ifname", default="", help="interface Gloo binds (GLOO_SOCKET_IFNAME)")
    p.add_argument("--threads", type=int, default=1, help="torch intra-op threads")
    p.add_argument("--max-buffer-elems", type=int, default=0,
                   help="allreduce a bucket larger than this in pieces through one buffer of this many values (0 = whole buckets)")
    p.add_argument("--gradients", default="",
                   help="fill the buckets with this rank's recorded gradient DIR/rank<r>.f32 instead of constants")
    p.add_argument("--packet-elements", type=int, default=256,
                   help="the SwitchML block whose error bound the check of recorded gradients allows")
    a = p.parse_args()
    if a.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = a.ifname
    with open(a.profile) as f:
        prof = json.load(f)

    import torch
    import torch.distributed as dist

    torch.set_num_threads(max(1, a.threads))
    dist.init_process_group("gloo", init_method="tcp://%s:%d" % (a.master_addr, a.master_port),
                            rank=a.rank, world_size=a.world, timeout=datetime.timedelta(minutes=30))
    bs = buckets(prof, a.bucket_elems)
    cap = a.max_buffer_elems
    bufs = [torch.empty(min(b["elems"], cap) if cap > 0 else b["elems"], dtype=torch.float32) for b in bs]
    pieces = any(t.numel() < b["elems"] for t, b in zip(bufs, bs))
    compute = prof["forward_s"] + prof["backward_s"] + prof["update_s"]
    starts = [sum(b["elems"] for b in bs[:i]) for i in range(len(bs))]
    gfile = ""
    if a.gradients:
        import numpy as np
        gfile = os.path.join(a.gradients, "rank%d.f32" % a.rank)
        total = sum(b["elems"] for b in bs)
        if os.path.getsize(gfile) != 4 * total:
            sys.exit("replay_gloo: %s holds %d bytes, the profile's gradient %d" % (gfile, os.path.getsize(gfile), 4 * total))

    def fill(i, off=0):
        t = bufs[i][:min(bufs[i].numel(), bs[i]["elems"] - off)]
        if gfile:
            v = np.fromfile(gfile, dtype="<f4", count=t.numel(), offset=4 * (starts[i] + off))
            t.copy_(torch.from_numpy(v))
        else:
            t.fill_(float(a.rank + 1) / (1 + i))

    def reduce_in_pieces(i):
        n, size = bs[i]["elems"], bufs[i].numel()
        for off in range(0, n, size):
            if off > 0:
                fill(i, off)
            dist.all_reduce(bufs[i][:min(size, n - off)])

    steps = []
    for it in range(a.warmup + a.steps):
        for i in range(len(bufs)):
            fill(i)
        dist.barrier()
        start = time.perf_counter()
        bwd = start + prof["forward_s"]
        works, first = [], None
        ready, done = queue.Queue(), threading.Event()
        if pieces:
            def comm():
                for _ in bs:
                    reduce_in_pieces(ready.get())
                done.set()
            threading.Thread(target=comm, daemon=True).start()
        for i, b in enumerate(bs):
            sleep_until(bwd + b["ready_s"])
            if first is None:
                first = time.perf_counter()
            if pieces:
                ready.put(i)
            else:
                works.append(dist.all_reduce(bufs[i], async_op=True))
        sleep_until(bwd + prof["backward_s"])
        for w in works:
            w.wait()
        if pieces:
            done.wait()
        last = time.perf_counter()
        time.sleep(prof["update_s"])
        step = time.perf_counter() - start
        # The sum of rank+1 over ranks, scaled per bucket (of its last
        # piece when it went through its buffer in pieces); with recorded
        # gradients, after the last step, the sum of every rank's file.
        want = a.world * (a.world + 1) / 2
        for i, t in enumerate(bufs):
            if gfile:
                if it < a.warmup + a.steps - 1 or not t.numel():
                    continue
                n = bs[i]["elems"]
                last = (n - 1) // t.numel() * t.numel()
                err = check_sum(t[:n - last].numpy(), starts[i] + last, a.world, a.packet_elements, a.gradients)
                if err:
                    print("replay_gloo: bucket %d: %s" % (i, err), file=sys.stderr)
                    sys.exit(1)
            elif t.numel() and abs(float(t[0]) * (1 + i) - want) > 1e-3 * want:
                print("replay_gloo: bucket %d holds %g, want %g" % (i, float(t[0]), want / (1 + i)), file=sys.stderr)
                sys.exit(1)
        if it >= a.warmup:
            steps.append({"step_s": step, "compute_s": compute, "exposed_comm_s": max(0.0, step - compute),
                          "comm_s": last - first})
    dist.destroy_process_group()
    json.dump({"backend": "gloo", "model": prof["model"], "rank": a.rank, "workers": a.world,
               "torch": torch.__version__, "buckets": len(bs), "bucket_elems": a.bucket_elems,
               "gradients": a.gradients or None,
               "steps": steps}, sys.stdout)
    sys.stdout.write("\n")


if __name__ == "__main__":
    main()
