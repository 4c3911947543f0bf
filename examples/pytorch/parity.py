#!/usr/bin/env python3
"""Trains the same model with the same seed over switchml and over gloo
(train.py, one run each) and writes the test accuracy per epoch of both,
side by side, as JSON and as a Markdown table.

    python3 parity.py --workers 4 --epochs 5 [--out results]

It fails (exit 1) when the two differ by more than --tolerance points
(0.5) at any epoch.
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--workers", type=int, default=4)
    p.add_argument("--epochs", type=int, default=5)
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--tolerance", type=float, default=0.5, help="largest accuracy gap allowed, in points")
    p.add_argument("--out", default=os.path.join(HERE, "results"))
    p.add_argument("train_args", nargs="*", help="more flags for train.py, after --")
    a = p.parse_args()
    os.makedirs(a.out, exist_ok=True)
    runs = {}
    with tempfile.TemporaryDirectory() as d:
        for backend in ("switchml", "gloo"):
            path = os.path.join(d, backend + ".json")
            cmd = [sys.executable, os.path.join(HERE, "train.py"), "--backend", backend, "--workers", str(a.workers),
                   "--epochs", str(a.epochs), "--seed", str(a.seed), "--json", path] + a.train_args
            print("$", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)
            with open(path) as f:
                runs[backend] = json.load(f)
    rows, worst = [], 0.0
    for s, g in zip(runs["switchml"]["epochs"], runs["gloo"]["epochs"]):
        gap = s["test_accuracy"] - g["test_accuracy"]
        worst = max(worst, abs(gap))
        rows.append("| %d | %.2f%% | %.2f%% | %+.2f | %.4f | %.4f | %.1f s | %.1f s |" % (
            s["epoch"], s["test_accuracy"], g["test_accuracy"], gap, s["train_loss"], g["train_loss"],
            s["train_seconds"], g["train_seconds"]))
    table = "\n".join([
        "| epoch | switchml accuracy | gloo accuracy | difference (points) | switchml train loss | gloo train loss "
        "| switchml epoch time | gloo epoch time |",
        "|---|---|---|---|---|---|---|---|"] + rows)
    name = "parity-%dw" % a.workers
    with open(os.path.join(a.out, name + ".json"), "w") as f:
        json.dump({"command": " ".join([os.path.basename(sys.argv[0])] + sys.argv[1:]), "runs": runs,
                   "largest_gap_points": worst}, f, indent=1)
    with open(os.path.join(a.out, name + ".md"), "w") as f:
        f.write(table + "\n")
    print(table)
    print("largest gap: %.2f points (tolerance %.2f)" % (worst, a.tolerance))
    return 0 if worst <= a.tolerance else 1


if __name__ == "__main__":
    sys.exit(main())
