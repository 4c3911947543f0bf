#!/usr/bin/env python3
"""PyTorch's own distributed tests, under gloo and under switchml, side by
side: the collective tests (all_reduce*, broadcast*, all_gather*,
reduce_scatter*, barrier*) and the DDP tests of
torch/testing/_internal/distributed/distributed_test.py, the harness the
torch wheel ships, driven as PyTorch's test/distributed/test_distributed_spawn.py
drives it (torch_harness_suite.py), with the switchml backend registered.

    python3 python/tests/torch_harness.py [--python PY ...] [--markdown FILE] [--json FILE]

For each Python (each torch) and each backend it runs the suite once, over
every test of the subset that this torch's harness has, and writes a table:
per test, each backend's outcome (pass, skip or fail), and the totals. It
needs libswitchml.so (SWITCHML_LIBRARY, as the other tests) and, in each
Python, the `expecttest` module torch's test utilities import
(`pip install expecttest`; PYTHONPATH reaches one installed with --target).

The ranks start by fork from the suite's process (--start fork, the way
torch 1.x's test_distributed_fork.py ran the same harness), which has
imported torch and the harness but never started a backend: every test
still runs in new processes, one per rank. --start spawn is
test_distributed_spawn.py's own way, in which every rank of every test
imports torch and the harness again: the outcomes are the same, and it
costs about ten times the CPU.
"""
import argparse
import ast
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
SUITE = os.path.join(HERE, "torch_harness_suite.py")
BACKENDS = ("gloo", "switchml")

# The subset: groups of tests by name, in the order of the table.
GROUPS = (
    ("collectives", re.compile(r"^test_(all_reduce|broadcast|all_gather|reduce_scatter|barrier)")),
    ("DDP", re.compile(r"ddp|DistributedDataParallel", re.IGNORECASE)),
)
# A guard against a hang of a whole suite, never a measure of speed: the
# harness bounds each test itself (DISTRIBUTED_TESTS_DEFAULT_TIMEOUT, set
# below).
SUITE_TIMEOUT = 3600
TEST_TIMEOUT = 120


# Skips by a gate of the harness that switchml cannot be declared past: a
# literal {"gloo"} or BACKEND != "gloo" (the gate names gloo alone), or the
# "gpu" feature (a backend of GPU collectives; the backend declares CPU
# only). The tests behind them are not offered to switchml, and the
# comparison leaves them out (the table counts them).
GATE_SET = re.compile(r"to be one of (\{[^}]*\})")


def gate_of(outcome, gpu_backends):
    if outcome["outcome"] != "skip":
        return None
    reason = outcome.get("reason", "")
    if "Only gloo backend supports" in reason:
        return "gloo"
    m = GATE_SET.search(reason)
    if not m:
        return None
    try:
        backends = ast.literal_eval(m.group(1))
    except (ValueError, SyntaxError):
        return None
    if backends == {"gloo"}:
        return "gloo"
    if sorted(backends) == gpu_backends:
        return "gpu"
    return None


def group_of(name):
    for group, pattern in GROUPS:
        if pattern.search(name):
            return group
    return None


def suite_env(backend, world, start, temp_dir):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("SWITCHML_CONTROLLER", None)
    env.update({
        "BACKEND": backend,
        "WORLD_SIZE": str(world),
        "TEMP_DIR": temp_dir,
        "SWITCHML_HARNESS_START": start,
        "PYTORCH_PRINT_REPRO_ON_FAILURE": "0",
        "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(TEST_TIMEOUT),
        "OMP_NUM_THREADS": env.get("OMP_NUM_THREADS", "1"),
    })
    return env


def run_suite(python, backend, world, start, tests, log):
    """Runs the harness's tests under one backend; returns {name: outcome}."""
    with tempfile.TemporaryDirectory() as tmp:
        out = os.path.join(tmp, "outcomes.json")
        cmd = [python, SUITE, "--out", out] + (["--list"] if tests is None else list(tests))
        with open(log, "a") as f:
            f.write("\n==== %s %s\n" % (backend, " ".join(cmd[:4])))
            f.flush()
            p = subprocess.run(cmd, env=suite_env(backend, world, start, tmp), stdout=f, stderr=subprocess.STDOUT,
                               timeout=SUITE_TIMEOUT)
        if p.returncode != 0 or not os.path.exists(out):
            raise RuntimeError("the harness under %s (%s) exited with status %d: see %s" % (
                backend, python, p.returncode, log))
        with open(out) as f:
            return json.load(f)


def torch_version(python):
    return subprocess.run([python, "-c", "import torch; print(torch.__version__)"], check=True,
                          capture_output=True, text=True).stdout.strip()


def run(python, world=3, start="fork", backends=BACKENDS, log=os.devnull, only=None):
    """The subset for one Python: {"torch", "tests": {name: {backend:
    outcome}}, "totals": {group: {backend: {pass, skip, fail}}}}."""
    names = run_suite(python, backends[0], world, "fork", None, log)
    tests = [n for n in names if group_of(n) and (only is None or only.search(n))]
    res = {"torch": torch_version(python), "python": python, "world_size": world, "start": start,
           "backends": list(backends), "tests": {n: {} for n in tests}}
    for b in backends:
        suite = run_suite(python, b, world, start, tests, log)
        for n in tests:
            o = suite["outcomes"].get(n, {"outcome": "fail", "error": "no outcome recorded"})
            if b != "gloo" and gate_of(o, suite["gpu_backends"]):
                o["gate"] = gate_of(o, suite["gpu_backends"])
            res["tests"][n][b] = o
    res["totals"] = totals(res)
    return res


def offered(by):
    """Whether the harness offers the test to every backend compared."""
    return not any("gate" in o for o in by.values())


def totals(res):
    """{group: {backend: {pass, skip, fail}}}, for every test of the group
    and (group + " offered") for those the harness offers every backend."""
    out = {}
    for n, by in res["tests"].items():
        for g in (group_of(n), "all"):
            for key in [g] + ([g + " offered"] if offered(by) else []):
                for b in res["backends"]:
                    t = out.setdefault(key, {}).setdefault(b, {"pass": 0, "skip": 0, "fail": 0})
                    t[by[b]["outcome"]] += 1
    return out


def cell(o):
    return o["outcome"]


def sorted_sets(text):
    """A reason with the sets it prints in sorted order: Python prints a
    set of strings in an order that changes from run to run."""
    def one(m):
        try:
            return "{%s}" % ", ".join(repr(x) for x in sorted(ast.literal_eval(m.group(1))))
        except (ValueError, SyntaxError, TypeError):
            return m.group(1)
    return GATE_SET.sub(lambda m: "to be one of " + one(m), text)


def note(by, backends):
    """Why the backends differ on a test: the skip reason or the error of
    the one that did not pass."""
    if len({by[b]["outcome"] for b in backends}) == 1:
        return ""
    parts = []
    for b in backends:
        o = by[b]
        if o["outcome"] == "skip":
            parts.append("%s skips: %s" % (b, sorted_sets(o.get("reason", ""))))
            if "gate" in o:
                parts[-1] += " (not offered: a gate switchml cannot pass)"
        elif o["outcome"] == "fail":
            parts.append("%s fails: %s" % (b, o.get("error", "")))
    return "; ".join(parts).replace("|", "/").replace("\n", " ")[:200]


def markdown(results):
    lines = ["# PyTorch's distributed tests under gloo and switchml", "",
             "Written by `python/tests/torch_harness.py` (see python/README.md, Tests): the collective and DDP",
             "tests of the harness each torch wheel ships, per backend, ranks started by %s." % (
                 ", ".join(sorted({r["start"] for r in results}))), ""]
    for res in results:
        bs = res["backends"]
        lines.append("## torch %s, %d ranks" % (res["torch"], res["world_size"]))
        lines.append("")
        lines.append("| group | tests | " + " | ".join("%s pass / skip / fail" % b for b in bs) + " |")
        lines.append("|---|---|" + "---|" * len(bs))
        for g in [g for g, _ in GROUPS] + ["all"]:
            for key, label in ((g, g), (g + " offered", "%s, offered to every backend" % g)):
                if key in res["totals"]:
                    t = res["totals"][key]
                    lines.append("| %s | %d | " % (label, sum(t[bs[0]].values())) + " | ".join(
                        "%d / %d / %d" % (t[b]["pass"], t[b]["skip"], t[b]["fail"]) for b in bs) + " |")
        gated = {}
        for n, by in res["tests"].items():
            for b in bs:
                if "gate" in by[b]:
                    gated.setdefault((b, by[b]["gate"]), []).append(by["gloo"]["outcome"] == "pass")
        if gated:
            lines.append("")
            lines.append("Not offered: " + "; ".join(
                "%d test%s to %s, by gates %s (gloo passes %d of them)" % (
                    len(v), "" if len(v) == 1 else "s", b,
                    "that name gloo alone" if gate == "gloo" else "for backends of GPU collectives",
                    sum(v)) for (b, gate), v in sorted(gated.items())) + ".")
        lines.append("")
        lines.append("| test | group | " + " | ".join(bs) + " | where they differ |")
        lines.append("|---|---|" + "---|" * len(bs) + "---|")
        for n in sorted(res["tests"], key=lambda n: ([g for g, _ in GROUPS].index(group_of(n)), n)):
            by = res["tests"][n]
            lines.append("| %s | %s | " % (n, group_of(n)) + " | ".join(cell(by[b]) for b in bs) + " | %s |" % note(by, bs))
        lines.append("")
    return "\n".join(lines)


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--python", action="append", help="a Python with torch to run the harness in (repeat for "
                                                     "several torches); default: this one")
    p.add_argument("--world-size", type=int, default=3)
    p.add_argument("--start", choices=["fork", "spawn"], default="fork")
    p.add_argument("--backends", default=",".join(BACKENDS))
    p.add_argument("--only", help="a regular expression: run only the tests of the subset it matches")
    p.add_argument("--json", help="write the outcomes here")
    p.add_argument("--markdown", help="write the table here (default: print it)")
    p.add_argument("--log", default=os.devnull, help="the harness's own output goes here")
    a = p.parse_args()
    only = re.compile(a.only) if a.only else None
    results = [run(py, a.world_size, a.start, tuple(a.backends.split(",")), a.log, only)
               for py in (a.python or [sys.executable])]
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    table = markdown(results)
    if a.markdown:
        with open(a.markdown, "w") as f:
            f.write(table)
    else:
        print(table)


if __name__ == "__main__":
    main()
