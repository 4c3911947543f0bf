#!/usr/bin/env python3
"""One rank of an allreduce benchmark through torch.distributed, over gloo
or over the switchml backend (the Python package in python/): the same
script with one string changed.

Every rank fills a float32 tensor with rank+1, waits at a barrier, times
dist.all_reduce, and checks that every element holds world*(world+1)/2.
Each rank prints one JSON object with the same keys as
`switchml allreduce --json` (tat_s, median_tat_s, goodput_gbps, verified,
cpu_user_s, cpu_sys_s for the whole process, and cpu_loop_user_s,
cpu_loop_sys_s: the CPU time of the warm-up and timed all_reduce calls
alone, as the Go commands report it).

    python3 torch_allreduce.py --rank R --world N --master-addr IP \
        --master-port P --elements E --iters K [--warmup W] [--ifname eth0] \
        [--backend gloo|switchml]

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
        x = torch.empty(a.elements, dtype=torch.float32)
        want = float(a.world * (a.world + 1) // 2)
        ok = True
        # CPU time of the all_reduce calls alone (fill, barrier and check left out).
        loop_user = loop_sys = 0.0
        for it in range(a.warmup + a.iters):
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
            if a.elements and not (bool((x == want).all())):
                ok = False
        rep["verified"] = ok
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
    return 1 if "error" in rep or not rep["verified"] else 0


if __name__ == "__main__":
    sys.exit(main())
