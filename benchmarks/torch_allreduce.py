#!/usr/bin/env python3
"""One rank of an allreduce benchmark through torch.distributed, over gloo
or over the switchml backend (the Python package in python/): the same
script with one string changed.

Every rank fills a float32 tensor with rank+1, waits at a barrier, times
dist.all_reduce, and checks that every element holds world*(world+1)/2.
With --input FILE --inputs DIR the tensor is instead FILE (raw
little-endian float32, recorded gradients), and the check compares the
result with the sum of every rank's DIR/rank<r>.f32, within float32
rounding of a sum in any order.
Each rank prints one JSON object with the same keys as
`switchml allreduce --json` (tat_s, median_tat_s, goodput_gbps, verified,
cpu_user_s, cpu_sys_s for the whole process, and cpu_loop_user_s,
cpu_loop_sys_s: the CPU time of the warm-up and timed all_reduce calls
alone, as the Go commands report it).

    python3 torch_allreduce.py --rank R --world N --master-addr IP \
        --master-port P --elements E --iters K [--warmup W] [--ifname eth0] \
        [--backend gloo|switchml] [--input FILE --inputs DIR] [--no-verify]

With --backend switchml, SWITCHML_CONTROLLER names the controller (else
rank 0 runs an embedded switch).
"""
import argparse
import datetime
import json
import os
import resource
import sys
import time


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rank", type=int, required=True)
    p.add_argument("--world", type=int, required=True)
    p.add_argument("--master-addr", default="127.0.0.1")
    p.add_argument("--master-port", type=int, default=29500)
    p.add_argument("--elements", type=int, default=1 << 20)
    p.add_argument("--iters", type=int, default=5)
    p.add_argument("--warmup", type=int, default=1)
    p.add_argument("--ifname", default="", help="interface Gloo binds (GLOO_SOCKET_IFNAME)")
    p.add_argument("--threads", type=int, default=0, help="torch intra-op threads (0: torch's default)")
    p.add_argument("--backend", choices=["gloo", "switchml"], default="gloo")
    p.add_argument("--input", default="", help="this rank's tensor: a file of raw little-endian float32 values")
    p.add_argument("--inputs", default="", help="directory of every rank's file (rank<r>.f32), to check the sum")
    p.add_argument("--no-verify", action="store_true", help="do not check the result")
    a = p.parse_args()
    if a.ifname:
        os.environ["GLOO_SOCKET_IFNAME"] = a.ifname

    import torch
    import torch.distributed as dist

    if a.threads > 0:
        torch.set_num_threads(a.threads)
    system = "gloo"
    if a.backend == "switchml":
        import switchml  # noqa: F401  (registers the backend)
        system = "torch-switchml"
    rep = {"system": system, "torch": torch.__version__, "workers": a.world, "rank": a.rank,
           "elements": a.elements, "dtype": "float32", "iters": a.iters, "tat_s": [],
           "median_tat_s": 0.0, "goodput_gbps": 0.0, "verified": False, "retransmits": 0}
    try:
        dist.init_process_group(a.backend, init_method="tcp://%s:%d" % (a.master_addr, a.master_port),
                                rank=a.rank, world_size=a.world, timeout=datetime.timedelta(minutes=10))
        check = None
        if a.input:
            orig = read_f32(torch, a.input)
            a.elements = rep["elements"] = orig.numel()
            if not a.no_verify:
                check = file_check(torch, a.inputs, a.world, a.elements)
        x = torch.empty(a.elements, dtype=torch.float32)
        want = float(a.world * (a.world + 1) // 2)
        ok = True
        # CPU time of the all_reduce calls alone (fill, barrier and check left out).
        loop_user = loop_sys = 0.0
        for it in range(a.warmup + a.iters):
            if a.input:
                x.copy_(orig)
            else:
                x.fill_(float(a.rank + 1))
            dist.barrier()
            ru0 = resource.getrusage(resource.RUSAGE_SELF)
            t0 = time.perf_counter()
            dist.all_reduce(x)
            dt = time.perf_counter() - t0
            ru1 = resource.getrusage(resource.RUSAGE_SELF)
            loop_user += ru1.ru_utime - ru0.ru_utime
            loop_sys += ru1.ru_stime - ru0.ru_stime
            if it >= a.warmup:
                rep["tat_s"].append(dt)
            if a.no_verify or not a.elements:
                pass
            elif check is not None:
                ok = ok and check(x)
            elif not bool((x == want).all()):
                ok = False
        rep["verified"] = ok and not a.no_verify
        rep["cpu_loop_user_s"] = loop_user
        rep["cpu_loop_sys_s"] = loop_sys
        dist.barrier()
        dist.destroy_process_group()
    except Exception as e:  # reported in the JSON, like the Go commands do
        rep["error"] = "%s: %s" % (type(e).__name__, e)
    ru = resource.getrusage(resource.RUSAGE_SELF)
    rep["cpu_user_s"], rep["cpu_sys_s"] = ru.ru_utime, ru.ru_stime
    if rep["tat_s"]:
        s = sorted(rep["tat_s"])
        rep["median_tat_s"] = s[len(s) // 2]
        if rep["median_tat_s"] > 0:
            rep["goodput_gbps"] = a.elements * 4 * 8 / rep["median_tat_s"] / 1e9
    json.dump(rep, sys.stdout)
    sys.stdout.write("\n")
    return 1 if "error" in rep or not (rep["verified"] or a.no_verify) else 0


def read_f32(torch, path):
    with open(path, "rb") as f:
        data = bytearray(f.read())
    if len(data) % 4:
        raise ValueError("%s holds %d bytes, not a whole number of float32 values" % (path, len(data)))
    return torch.frombuffer(data, dtype=torch.float32)  # the machine is little-endian, as the files


def file_check(torch, inputs, world, elements):
    """The check of a result against the sum of every rank's file: within
    world float32 roundings of the sum of magnitudes, for a sum in any
    order."""
    want = torch.zeros(elements, dtype=torch.float32)
    mag = torch.zeros(elements, dtype=torch.float32)
    for r in range(world):
        v = read_f32(torch, os.path.join(inputs, "rank%d.f32" % r))
        if v.numel() != elements:
            raise ValueError("rank%d.f32 holds %d values, this rank's input %d" % (r, v.numel(), elements))
        want += v
        mag += v.abs()
    # Summed in float32 here too: this sum and the result each carry up to
    # world roundings, the comparison a few more.
    tol = mag * ((2 * world + 4) * 2.0 ** -24) + 1e-38
    return lambda x: bool(((x - want).abs() <= tol).all())


if __name__ == "__main__":
    sys.exit(main())
