#!/usr/bin/env python3
"""FSDP2 with bf16 mixed precision over the switch's 16-bit wire, against
gloo: the loss curves of the same model, seed and data (fsdp2_torchrun.py),
one torchrun job each:

    gloo fp32              float32 parameters and gradient reduction
    gloo bf16              MixedPrecisionPolicy(param_dtype=bfloat16, reduce_dtype=bfloat16)
    switchml bf16          the same over switchml: bfloat16 gradients travel at 16 bits a value
    switchml bf16 32-bit   the same with SWITCHML_WIRE_BITS=32 (bfloat16 at 32 bits), for comparison

    SWITCHML_LIBRARY=/tmp/libswitchml.so PYTHONPATH=python python examples/pytorch/fsdp2_bf16.py --workers 2 --steps 36

The metric: the absolute difference of two runs' losses at every step of
every rank (each rank trains on data of its own), its largest value and
its mean. It passes (exit 0) when switchml bf16 is as close to gloo bf16,
by both, as gloo bf16 is to gloo fp32, times --margin (1: no slack): the
switch's bf16 reduction moves the curve no further than bf16 itself does.
The figures, and what each switchml rank sent (packets sent once, bytes
with retransmissions), go to results/fsdp2-bf16-<workers>w.json and .md.
The runs are deterministic: the same command gives the same losses. torch
2.x (FSDP2).
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile
import uuid

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
BF16 = ["--mixed-precision", "--reduce-dtype", "bfloat16"]
RUNS = [  # name, backend, flags, environment
    ("gloo fp32", "gloo", [], {}),
    ("gloo bf16", "gloo", BF16, {}),
    ("switchml bf16", "switchml", BF16, {}),
    ("switchml bf16 32-bit", "switchml", BF16, {"SWITCHML_WIRE_BITS": "32"}),
]
# The comparisons: (run, reference). The first is the bar the second must meet.
BAR = ("gloo bf16", "gloo fp32")
CHECKED = ("switchml bf16", "gloo bf16")


def run(name, backend, flags, env, a, folder):
    """One torchrun job of fsdp2_torchrun.py; each rank's record."""
    prefix = os.path.join(folder, name.replace(" ", "-"))
    cmd = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", str(a.workers), "--nnodes", "1",
           "--max_restarts", "0", "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:0", "--rdzv_id",
           uuid.uuid4().hex, os.path.join(HERE, "fsdp2_torchrun.py"), "--backend", backend, "--steps", str(a.steps),
           "--seed", str(a.seed), "--losses", prefix] + flags
    e = dict(os.environ)
    e.pop("SWITCHML_WIRE_BITS", None)  # every run's width is its own
    e.setdefault("OMP_NUM_THREADS", "1")
    e.update(env)
    print("$", " ".join(["%s=%s" % kv for kv in env.items()] + cmd[1:]), flush=True)
    subprocess.run(cmd, check=True, env=e, stdout=subprocess.DEVNULL if a.quiet else None)
    ranks = []
    for r in range(a.workers):
        with open("%s.rank%d.json" % (prefix, r)) as f:
            ranks.append(json.load(f))
    return ranks


def difference(x, y):
    """The largest and the mean absolute difference of two runs' losses,
    over every step of every rank."""
    d = [abs(xr["losses"][k] - yr["losses"][k]) for xr, yr in zip(x, y) for k in yr["losses"]]
    return {"max_abs": max(d), "mean_abs": sum(d) / len(d), "points": len(d)}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=2)
    p.add_argument("--steps", type=int, default=36)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--margin", type=float, default=1.0,
                   help="switchml bf16 may be this many times further from gloo bf16 than gloo bf16 from gloo fp32")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("--quiet", action="store_true", help="keep the jobs' output off the console")
    a = p.parse_args()
    if int(torch.__version__.split(".")[0]) < 2:
        print("fsdp2_bf16.py: FSDP2 (fully_shard, MixedPrecisionPolicy) needs torch 2.x; this is torch %s"
              % torch.__version__, file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as d:
        runs = {name: run(name, backend, flags, env, a, d) for name, backend, flags, env in RUNS}
    diffs = {"%s vs %s" % pair: difference(runs[pair[0]], runs[pair[1]])
             for pair in (BAR, CHECKED, ("switchml bf16 32-bit", "gloo bf16"), ("switchml bf16", "gloo fp32"))}
    bar, got = diffs["%s vs %s" % BAR], diffs["%s vs %s" % CHECKED]
    ok = all(got[k] <= a.margin * bar[k] for k in ("max_abs", "mean_abs"))
    sent = {name: [r["sent"]["sent_bytes"] for r in ranks] for name, ranks in runs.items() if "sent" in ranks[0]}
    # Packets sent once, without retransmissions (which grow with the
    # load on the machine): what the protocol decides.
    once = {name: [r["sent"]["packets"] - r["sent"]["retransmits"] for r in ranks]
            for name, ranks in runs.items() if "sent" in ranks[0]}
    bits = {name: ranks[0]["wire_bits"]["bfloat16"] for name, ranks in runs.items() if "wire_bits" in ranks[0]}

    lines = ["| comparison | largest abs difference | mean abs difference |", "|---|---|---|"]
    lines += ["| %s | %.3g | %.3g |" % (k, v["max_abs"], v["mean_abs"]) for k, v in diffs.items()]
    lines += ["", "| run | bfloat16 wire bits | packets each rank sent once | bytes each rank sent, retransmissions "
              "included |", "|---|---|---|---|"]
    lines += ["| %s | %d | %s | %s |" % (name, bits[name], ", ".join("{:,}".format(n) for n in once[name]),
                                        ", ".join("{:,}".format(b) for b in sent[name])) for name in sent]
    names = [name for name, _, _, _ in RUNS]
    lines += ["", "| step | " + " | ".join("%s loss (mean of ranks)" % n for n in names) + " |",
              "|---|" + "---|" * len(names)]
    for k in sorted(runs[names[0]][0]["losses"], key=int):
        lines.append("| %s | %s |" % (k, " | ".join("%.6f" % (sum(r["losses"][k] for r in runs[n]) / a.workers)
                                                   for n in names)))
    verdict = ("%s: switchml bf16 vs gloo bf16 %.3g largest, %.3g mean; gloo bf16 vs gloo fp32 %.3g, %.3g "
               "(margin %g)") % (
        "pass" if ok else "FAIL", got["max_abs"], got["mean_abs"], bar["max_abs"], bar["mean_abs"], a.margin)
    table = "\n".join(lines)

    os.makedirs(a.out, exist_ok=True)
    name = "fsdp2-bf16-%dw" % a.workers
    with open(os.path.join(a.out, name + ".json"), "w") as f:
        json.dump({"command": " ".join([os.path.relpath(sys.argv[0])] + sys.argv[1:]), "torch": torch.__version__,
                   "workers": a.workers, "steps": a.steps, "seed": a.seed, "margin": a.margin, "pass": ok,
                   "differences": diffs, "wire_bits": bits, "packets_sent_once": once, "sent_bytes": sent,
                   "losses": {n: [r["losses"] for r in ranks] for n, ranks in runs.items()}}, f, indent=1)
    with open(os.path.join(a.out, name + ".md"), "w") as f:
        f.write(table + "\n\n" + verdict + "\n")
    print(table)
    print(verdict)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
