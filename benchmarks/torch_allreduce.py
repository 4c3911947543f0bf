#!/usr/bin/env python3
"""One rank of a collective benchmark through torch.distributed, over gloo
or over the switchml backend (the Python package in python/): the same
script with one string changed.

--op picks the collective; S is the tensor of --elements values of --dtype
(float32 unless told; the full tensor of the call) for each:
  all_reduce      dist.all_reduce of S (the default)
  reduce_scatter  dist.reduce_scatter_tensor of S into S/world per rank
  all_gather      dist.all_gather_into_tensor of S/world per rank into S
so that every op moves the same tensor. Every rank fills its input, waits at
a barrier, times the call, and checks the result exactly: all_reduce fills
rank+1 and wants world*(world+1)/2 everywhere; reduce_scatter fills shard c
of its input with (rank+1)*(c+1) and wants (rank+1)*world*(world+1)/2; all_gather
fills rank+1 and wants shard r of the output to hold r+1. Sums must be
exact while every partial sum is an integer the type holds exactly (up to
2^24 in float32, 2^11 in float16, 2^8 in bfloat16), else within the
type's rounding of the partial sums; over switchml, where the values may
travel at 16 bits (a 16-bit type, or SWITCHML_WIRE_BITS=16), within the
16-bit wire's bound as well (tolerance()): with 8 ranks of bfloat16 that
is 0.17 of a sum of 36, below the 1 a missing rank would take away.
With --input FILE --inputs DIR (all_reduce only) the tensor is instead FILE
(raw little-endian float32, recorded gradients), and the check compares the
result with the sum of every rank's DIR/rank<r>.f32, within float32
rounding of a sum in any order.

Each rank prints one JSON object with the same keys as
`switchml allreduce --json` (tat_s, median_tat_s, goodput_gbps, verified,
cpu_user_s, cpu_sys_s for the whole process, and cpu_loop_user_s,
cpu_loop_sys_s: the CPU time of the warm-up and timed calls alone, as the
Go commands report it); over switchml, wire_bits: the width the values
travelled at as the library's counters show it (bytes sent per value
reduced: under 3, 16 bits; headers and retransmissions add to both widths
alike). With --count-bytes it adds what the interface
--ifname sent and received per timed call (net_*, from /proc/net/dev of
the rank's network namespace: frames with their headers, TCP's
acknowledgements and the barriers between the calls included), and, over
switchml, what the library sent per timed call (lib_sent_bytes,
lib_packets: SwitchML headers included, UDP, IP and Ethernet not).

    python3 torch_allreduce.py --rank R --world N --master-addr IP \
        --master-port P --elements E --iters K [--warmup W] [--ifname eth0] \
        [--dtype float32|float16|bfloat16|int32] [--backend gloo|switchml] [--op all_reduce|reduce_scatter|all_gather] \
        [--count-bytes] [--input FILE --inputs DIR] [--no-verify]

With --backend switchml, SWITCHML_CONTROLLER names the controller (else
rank 0 runs an embedded switch), and SWITCHML_WIRE_BITS the wire width the
backend is asked for.
"""
import argparse
import datetime
import json
import os
import resource
import sys
import time


OPS = ("all_reduce", "reduce_scatter", "all_gather")
DTYPES = ("float32", "float16", "bfloat16", "int32")
# Bits of each float type's significand: 2^-bits is its unit roundoff,
# and every integer up to 2^bits is exact in it.
SIGNIFICAND = {"float32": 24, "float16": 11, "bfloat16": 8}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--elements", type=int, default=1 << 20)
    p.add_argument("--dtype", choices=DTYPES, default="float32", help="element type of the tensor")
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--ifname", default="", help="interface Gloo binds (GLOO_SOCKET_IFNAME)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--backend", choices=["gloo", "switchml"], default="gloo")
    p.add_argument("--op", choices=OPS, default="all_reduce", help="the collective to time (see above)")
    p.add_argument("--count-bytes", action="store_true",
                   help="report the bytes --ifname sent and received per timed call (/proc/net/dev)")
    p.add_argument("--input", default="", help="this rank's tensor: a file of raw little-endian float32 values")
    p.add_argument("--inputs", default="", help="directory of every rank's file (rank<r>.f32), to check the sum")
    p.add_argument("--no-verify", action="store_true", help="do not check the result")
    a = p.parse_args()
    if a.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = a.ifname
    if a.op != "all_reduce" and (a.input or a.elements % a.world):
        p.error("--op %s: want --elements a multiple of --world, and no --input" % a.op)
    if a.count_bytes and not a.ifname:
        p.error("--count-bytes needs --ifname")
    if a.input and a.dtype != "float32":
        p.error("--input reads float32 files: want --dtype float32")

    import torch
    import torch.distributed as dist

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    system = "gloo"
    if a.backend == "switchml":
        import switchml  # noqa: F401  (registers the backend)
        system = "torch-switchml"
    rep = {"system": system, "torch": torch.__version__, "workers": a.world, "rank": a.rank, "op": a.op,
           "elements": a.elements, "dtype": a.dtype, "iters": a.iters, "tat_s": [],
           "median_tat_s": 0.0, "goodput_gbps": 0.0, "verified": False, "retransmits": 0}
    try:
        dist.init_process_group(a.backend, init_method="tcp://%s:%d" % (a.master_addr, a.master_port),
                                rank=a.rank, world_size=a.world, timeout=datetime.timedelta(minutes=10))
        check = None
        if a.input:
            orig = read_f32(torch, a.input)
            a.elements = rep["elements"] = orig.numel()
            if not a.no_verify:
                check = file_check(torch, a, a.inputs, a.world, a.elements)
        call, fill, want, tol = collective(torch, dist, a)
        ok = True
        counters = Counters(a) if a.count_bytes else None
        # CPU time of the calls alone (fill, barrier and check left out).
        loop_user = loop_sys = 0.0
        for it in range(a.warmup + a.iters):
            if it == a.warmup and counters:
                counters.start()
            if a.input:
                fill.copy_(orig)
            else:
                fill()
            dist.barrier()
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            out = call()
            dt = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            loop_user += ru1.ru_utime - ru0.ru_utime
            loop_sys += ru1.ru_stime - ru0.ru_stime
            if it >= a.warmup:
                rep["tat_s"].append(dt)
            if a.no_verify or not a.elements:
                pass
            elif check is not None:
                ok = ok and check(out)
            elif not close(out, want, tol):
                ok = False
        rep["verified"] = ok and not a.no_verify
        rep["cpu_loop_user_s"] = loop_user
        rep["cpu_loop_sys_s"] = loop_sys
        if a.backend == "switchml":
            rep.update(wire_bits())
        dist.barrier()
        if counters:
            rep.update(counters.per_call(a.iters))
        dist.destroy_process_group()
    except Exception as e:  # reported in the JSON, like the Go commands do
        rep["error"] = "%s: %s" % (type(e).__name__, e)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    rep["cpu_user_s"], rep["cpu_sys_s"] = ru.ru_utime, ru.ru_stime
    if rep["tat_s"]:
        s = sorted(rep["tat_s"])
        rep["median_tat_s"] = s[len(s) // 2]
        if rep["median_tat_s"] > 0:
            rep["goodput_gbps"] = a.elements * element_size(a.dtype) * 8 / rep["median_tat_s"] / 1e9
    json.dump(rep, sys.stdout)
    sys.stdout.write("\n")
    return 1 if "error" in rep or not (rep["verified"] or a.no_verify) else 0


def collective(torch, dist, a):
    """The op's timed call, the fill of its input before each call (a
    tensor to copy the --input file into, for all_reduce with --input),
    the result it must give, as a tensor of the output's shape, and how
    far from it an element may be (tolerance)."""
    n, world, rank = a.elements, a.world, a.rank
    dt = getattr(torch, a.dtype)
    total = world * (world + 1) // 2  # the sum of rank+1 over the ranks
    if a.op == "all_reduce":
        x = torch.empty(n, dtype=dt)

        def reduce():
            dist.all_reduce(x)
            return x
        return reduce, (x if a.input else lambda: x.fill_(rank + 1)), float(total), tolerance(a, world, total)
    shard = n // world
    if a.op == "reduce_scatter":
        # Shard c of every rank's input holds (rank+1)*(c+1): the sum
        # differs per shard, so a rank handed another's shard shows.
        x = torch.empty(world, shard, dtype=dt)
        scale = torch.arange(1, world + 1, dtype=dt).unsqueeze(1)
        y = torch.empty(shard, dtype=dt)

        def scatter():
            dist.reduce_scatter_tensor(y, x.view(-1))
            return y
        return scatter, lambda: torch.mul(scale.expand(world, shard), rank + 1, out=x), \
            float((rank + 1) * total), tolerance(a, world * world, (rank + 1) * total)
    x = torch.empty(shard, dtype=dt)
    y = torch.empty(world, shard, dtype=dt)

    def gather():
        dist.all_gather_into_tensor(y.view(-1), x)
        return y
    # A gather moves values, it sums none: exact.
    return gather, lambda: x.fill_(rank + 1), torch.arange(1, world + 1, dtype=dt).unsqueeze(1), 0.0


def element_size(dtype):
    return 2 if dtype in ("float16", "bfloat16") else 4


def wire16(a):
    """Whether the backend may carry this run's values at 16 bits: a
    16-bit float type unless SWITCHML_WIRE_BITS says 32, any float type
    when it says 16 (switchml.Config.WireBits)."""
    if a.backend != "switchml" or a.dtype == "int32":
        return False
    bits = os.environ.get("SWITCHML_WIRE_BITS", "")
    return bits == "16" or (element_size(a.dtype) == 2 and bits != "32")


def tolerance(a, biggest, magnitudes):
    """How far an element of a sum of integers may be from the exact sum,
    when every input is at most biggest in magnitude and their magnitudes
    add up to magnitudes. Every partial sum is an integer of at most
    magnitudes, exact in the type when that is below 2^p (p the bits of
    its significand: 24, 11, 8): then 0, else the rounding of up to world
    partial sums. When the values may travel at 16 bits, the 16-bit wire's
    bound is added (quant.ErrorBound16: the span n*2^E <= 2*world*biggest,
    up to one step of n/(2^15-1) of it lost per value), with the rounding
    of the result to the type, relative to its magnitude."""
    if a.dtype == "int32":
        return 0.0
    u = 2.0 ** -SIGNIFICAND[a.dtype]
    tol = 0.0 if magnitudes <= 2.0 ** SIGNIFICAND[a.dtype] else (a.world + 1) * u * magnitudes
    if wire16(a):
        span = a.world * 2 * biggest
        quant = span * a.world / (2 ** 15 - 1)
        tol += quant + u * (magnitudes + quant) + 2.0 ** -24 * span
    return tol


def close(out, want, tol):
    if tol == 0:
        return bool((out == want).all())
    return bool(((out.float() - want).abs() <= tol).all())


def wire_bits():
    """The wire width the library's counters show for this rank's session
    so far (see the module's doc), or nothing when they cannot tell."""
    group = dist_group()
    if group is None:
        return {}
    st = group.stats()
    if not st.get("elements"):
        return {}
    per_value = st["sent_bytes"] / st["elements"]
    return {"lib_bytes_per_value": per_value, "wire_bits": 16 if per_value < 3 else 32}


def dist_group():
    """The switchml process group of this process, or None."""
    import torch.distributed as dist
    group = dist.distributed_c10d._get_default_group()
    return group if hasattr(group, "stats") else None


class Counters:
    """What the rank's interface (and, over switchml, the library) counted
    from start() to per_call(): the timed calls with their fills, the
    barrier before each and the one after the last."""

    def __init__(self, a):
        self.ifname = a.ifname
        self.group = dist_group() if a.backend == "switchml" else None

    def read(self):
        net = net_dev(self.ifname)
        lib = self.group.stats() if self.group is not None else None
        return net, lib

    def start(self):
        self.net0, self.lib0 = self.read()

    def per_call(self, calls):
        net1, lib1 = self.read()
        out = {k: (net1[k] - self.net0[k]) / calls for k in net1}
        if lib1 is not None:
            out["lib_sent_bytes"] = (lib1["sent_bytes"] - self.lib0["sent_bytes"]) / calls
            out["lib_packets"] = (lib1["packets"] - self.lib0["packets"]) / calls
        return out


def net_dev(ifname):
    """The interface's counters in this network namespace: bytes and
    packets received and sent."""
    with open("/proc/net/dev") as f:
        for line in f:
            name, sep, rest = line.partition(":")
            if sep and name.strip() == ifname:
                v = [int(x) for x in rest.split()]
                return {"net_recv_bytes": v[0], "net_recv_packets": v[1], "net_sent_bytes": v[8], "net_sent_packets": v[9]}
    raise ValueError("no interface %s in /proc/net/dev" % ifname)


def read_f32(torch, path):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if len(data) % 4:
        raise ValueError("%s holds %d bytes, not a whole number of float32 values" % (path, len(data)))
    return torch.frombuffer(data, dtype=torch.float32)  # the machine is little-endian, as the files


def file_check(torch, a, inputs, world, elements):
    """The check of a result against the sum of every rank's file: within
    world float32 roundings of the sum of magnitudes, for a sum in any
    order, and the 16-bit wire's bound (tolerance) when the values may
    travel at 16 bits, taken with the largest value of all files."""
    want = torch.zeros(elements, dtype=torch.float32)
    mag = torch.zeros(elements, dtype=torch.float32)
    biggest = 0.0
    for r in range(world):
        v = read_f32(torch, os.path.join(inputs, "rank%d.f32" % r))
        if v.numel() != elements:
            raise ValueError("rank%d.f32 holds %d values, this rank's input %d" % (r, v.numel(), elements))
        want += v
        mag += v.abs()
        biggest = max(biggest, float(v.abs().max())) if v.numel() else biggest
    # Summed in float32 here too: this sum and the result each carry up to
    # world roundings, the comparison a few more.
    tol = mag * ((2 * world + 4) * 2.0 ** -24) + 1e-38
    if wire16(a):
        tol += tolerance(a, biggest, 0.0)
    return lambda x: bool(((x - want).abs() <= tol).all())


if __name__ == "__main__":
    sys.exit(main())
