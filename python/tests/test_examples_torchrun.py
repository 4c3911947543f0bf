"""The torchrun examples (examples/pytorch/ddp_torchrun.py and
fsdp2_torchrun.py) under gloo and under switchml, with only the backend
string changed and the process group bound to the CPU device: each trains,
saves a checkpoint, and a second job resumes from it; the losses of every
rank at every step must match gloo's. torch 2.x (device_id and FSDP2)."""
import json
import math
import os
import tempfile
import unittest

import torch

from test_torchrun import torchrun_job

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLES = os.path.join(os.path.dirname(os.path.dirname(HERE)), "examples", "pytorch")
TORCH2 = int(torch.__version__.split(".")[0]) >= 2


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
    checkpoint paths; bf16 mixed precision as close to gloo's bf16 as
    gloo's bf16 is to its fp32."""

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


if __name__ == "__main__":
    unittest.main()
