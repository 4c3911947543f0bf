"""The torchrun examples (examples/pytorch/ddp_torchrun.py and
fsdp2_torchrun.py) under gloo and under switchml, with only the backend
string changed and the process group bound to the CPU device: each trains,
saves a checkpoint, and a second job resumes from it; the losses of every
rank at every step must match gloo's. torch 2.x (device_id and FSDP2)."""
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import torch

from test_torchrun import torchrun_job

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "pytorch")
TORCH2 = int(torch.__version__.split(".")[0]) >= 2
# A guard against a hang of fsdp2_bf16.py's four jobs, never a measure of speed.
BF16_TIMEOUT = 1800


def run_job(script, world, args, cwd):
    """One torchrun job of an example; fails the test with its output if
    the job fails."""
    env = dict(os.environ)
    env.pop("SWITCHML_CONTROLLER", None)
    code, outp = torchrun_job(world, [os.path.join(EXAMPLES, script)] + args, env, cwd=cwd)
    if code != 0:
        raise AssertionError("%s exited with status %d:\n%s" % (" ".join([script] + args), code, outp[-8000:]))
    return outp


def read_ranks(prefix, world):
    out = []
    for r in range(world):
        with open("%s.rank%d.json" % (prefix, r)) as f:
            out.append(json.load(f))
    return out


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


class Example:
    """One example run as a job and then resumed by a second job, per
    backend, in a directory of its own; the result of each run is kept for
    the tests that compare them."""

    def __init__(self, script, world, first, second):
        self.script, self.world, self.first, self.second = script, world, first, second
        self.tmp = tempfile.TemporaryDirectory()

    def run(self, backend, extra, name):
        d = os.path.join(self.tmp.name, name)
        os.makedirs(d)
        runs = []
        for i, args in enumerate((self.first, self.second)):
            prefix = os.path.join(d, "losses%d" % i)
            run_job(self.script, self.world, args + extra + ["--backend", backend, "--losses", prefix], d)
            runs.append(read_ranks(prefix, self.world))
        return runs

    def close(self):
        self.tmp.cleanup()


def losses_by_rank(runs):
    """Each rank's losses by step (or epoch), both jobs together."""
    world = len(runs[0])
    out = []
    for r in range(world):
        merged = {}
        for run in runs:
            merged.update({int(k): v for k, v in run[r]["losses"].items()})
        out.append(merged)
    return out


@unittest.skipUnless(TORCH2, "init_process_group's device_id and FSDP2 need torch 2.x (this is torch %s)"
                     % torch.__version__)
class TestDDPExample(unittest.TestCase):
    world = 3

    def test_matches_gloo_and_resumes(self):
        ex = Example("ddp_torchrun.py", self.world, ["2", "1", "--snapshot-path", "snapshot.pt"],
                     ["4", "1", "--snapshot-path", "snapshot.pt"])
        try:
            got = {b: ex.run(b, [], b) for b in ("gloo", "switchml")}
        finally:
            ex.close()
        for b, runs in got.items():
            for r in range(self.world):
                self.assertEqual(runs[0][r]["resumed_at"], 0, "%s rank %d: the first job found a snapshot" % (b, r))
                self.assertEqual(runs[1][r]["resumed_at"], 2, "%s rank %d: the second job did not resume at epoch 2"
                                 % (b, r))
        g, s = losses_by_rank(got["gloo"]), losses_by_rank(got["switchml"])
        for r in range(self.world):
            self.assertEqual(sorted(s[r]), [0, 1, 2, 3])
            self.assertEqual(sorted(g[r]), sorted(s[r]))
            for e in g[r]:
                self.assertLessEqual(rel(s[r][e], g[r][e]), 1e-6, "rank %d epoch %d: switchml's loss %.9g, gloo's %.9g"
                                     % (r, e, s[r][e], g[r][e]))


@unittest.skipUnless(TORCH2, "FSDP2 (fully_shard) and init_process_group's device_id need torch 2.x (this is "
                     "torch %s)" % torch.__version__)
class TestFSDP2Example(unittest.TestCase):
    """fp32 losses within 1e-5 (relative) of gloo's, through both
    checkpoint paths; bf16 mixed precision, with float32 or bfloat16
    gradient reduction, as close to gloo's bf16 as gloo's bf16 is to its
    fp32."""

    def resumed(self, world, extra):
        """{backend: [first job's ranks, second job's ranks]}, steps 0-3 and
        4-7, with the checks that the second resumed from the first."""
        ex = Example("fsdp2_torchrun.py", world, ["--steps", "4", "--checkpoint-dir", "ckpt"],
                     ["--steps", "8", "--checkpoint-dir", "ckpt"])
        try:
            got = {b: ex.run(b, extra, b) for b in ("gloo", "switchml")}
        finally:
            ex.close()
        for b, runs in got.items():
            for r in range(world):
                first, second = runs[0][r], runs[1][r]
                self.assertIsNone(first["resumed_at"], "%s rank %d: the first job found a checkpoint" % (b, r))
                self.assertEqual(second["resumed_at"], 4, "%s rank %d: the second job did not resume at step 4" % (b, r))
                # The shards as loaded are the shards as saved, bit for bit.
                self.assertEqual(second["loaded_checksum"], first["saved_checksum"],
                                 "%s rank %d: the loaded shards differ from the saved ones" % (b, r))
        return got

    def assert_close(self, got, tol):
        g, s = losses_by_rank(got["gloo"]), losses_by_rank(got["switchml"])
        for r in range(len(g)):
            self.assertEqual(sorted(s[r]), list(range(8)))
            self.assertEqual(sorted(g[r]), list(range(8)))
            for step in g[r]:
                self.assertLessEqual(rel(s[r][step], g[r][step]), tol, "rank %d step %d: switchml's loss %.9g, "
                                     "gloo's %.9g" % (r, step, s[r][step], g[r][step]))

    def test_dcp_checkpoint(self):
        self.assert_close(self.resumed(2, ["--checkpoint", "dcp"]), 1e-5)

    def test_dtensor_checkpoint_with_explicit_prefetching(self):
        self.assert_close(self.resumed(3, ["--checkpoint", "dtensor", "--explicit-prefetching"]), 1e-5)

    def test_bf16_mixed_precision(self):
        got = self.resumed(2, ["--checkpoint", "dcp", "--mixed-precision"])
        # gloo's fp32 losses on the same data, from one job of 8 steps.
        with tempfile.TemporaryDirectory() as d:
            run_job("fsdp2_torchrun.py", 2, ["--steps", "8", "--backend", "gloo", "--losses", os.path.join(d, "l")], d)
            fp32 = losses_by_rank([read_ranks(os.path.join(d, "l"), 2)])
        g, s = losses_by_rank(got["gloo"]), losses_by_rank(got["switchml"])
        bound = max(rel(g[r][k], fp32[r][k]) for r in range(2) for k in g[r])
        self.assertGreater(bound, 0, "gloo's bf16 losses equal its fp32 ones: mixed precision did not apply")
        worst = max(rel(s[r][k], g[r][k]) for r in range(2) for k in g[r])
        self.assertLessEqual(worst, bound, "switchml's bf16 losses differ from gloo's by %.3g (relative), more than "
                             "gloo's bf16 from its fp32 (%.3g)" % (worst, bound))
        self.assertTrue(all(math.isfinite(v) for r in s for v in r.values()))

    def test_bf16_reduction_over_the_16_bit_wire(self):
        # FSDP2's bf16 mixed precision with bf16 gradient reduction,
        # through examples/pytorch/fsdp2_bf16.py (the command of its
        # results file, on fewer steps): switchml's bf16 gradients travel
        # at 16 bits, and its losses are as close to gloo's bf16 ones as
        # those are to gloo's fp32 ones (the script's exit status).
        env = dict(os.environ)
        env.pop("SWITCHML_CONTROLLER", None)
        env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
        with tempfile.TemporaryDirectory() as d:
            cmd = [sys.executable, os.path.join(EXAMPLES, "fsdp2_bf16.py"), "--workers", "2", "--steps", "24",
                   "--out", d, "--quiet"]
            try:
                p = subprocess.run(cmd, env=env, cwd=d, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   encoding="utf-8", errors="replace", timeout=BF16_TIMEOUT)
            except subprocess.TimeoutExpired as e:
                raise AssertionError("fsdp2_bf16.py did not end within %d s:\n%s" % (BF16_TIMEOUT, e.output)) from None
            self.assertEqual(p.returncode, 0, p.stdout[-8000:])
            with open(os.path.join(d, "fsdp2-bf16-2w.json")) as f:
                res = json.load(f)
        self.assertEqual(res["wire_bits"], {"switchml bf16": 16, "switchml bf16 32-bit": 32}, p.stdout[-8000:])
        bar = res["differences"]["gloo bf16 vs gloo fp32"]
        self.assertGreater(bar["max_abs"], 0, "gloo's bf16 losses equal its fp32 ones: mixed precision did not apply")
        # The gradients cross in half the packets, the parameters'
        # all-gathers (exact int32 sums of their bytes) in as many at either
        # width: the job's packets fall to about two thirds (0.66 in
        # results/fsdp2-bf16-2w.json).
        once = res["packets_sent_once"]
        for r, (p16, p32) in enumerate(zip(once["switchml bf16"], once["switchml bf16 32-bit"])):
            self.assertLessEqual(p16, 0.75 * p32, "rank %d sent %d packets once at 16 bits, %d at 32" % (r, p16, p32))


if __name__ == "__main__":
    unittest.main()
