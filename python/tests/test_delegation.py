"""What the switch does not carry goes through the gloo group the backend
makes beside it: every such call answers as gloo does on the same inputs,
in order with the switch's calls; and torch 2.x's helpers that ask a group
for its device (init_process_group's device_id, DCP, distribute_tensor)
find it. Each scenario runs as one process per rank (tests/worker.py)."""
import importlib
import inspect
import os
import sys
import unittest

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
sys.path.insert(0, os.path.dirname(HERE))
from test_backend import results, show  # noqa: E402

WORLD = 3


def same(a, b):
    """a and b hold the same values, bit for bit and of the same dtypes,
    through lists, tuples and dicts."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and torch.equal(a, b)
    if isinstance(a, (list, tuple)):
        return type(a) is type(b) and len(a) == len(b) and all(same(x, y) for x, y in zip(a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    return a == b


class DelegatedCalls(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.res = results("delegated", "switchml", WORLD)
        cls.sml = [saved for _, _, saved in cls.res]
        cls.gloo = [saved for _, _, saved in results("delegated", "gloo", WORLD)]

    def test_results_are_gloos(self):
        out = show(self.res)
        for rank in range(WORLD):
            got, want = self.sml[rank], self.gloo[rank]
            for key, w in want.items():
                g = got[key]
                if key == "reduce_scatter_uneven" and isinstance(w, tuple) and w[0] == "raised":
                    # torch 1.13's gloo has no reduce_scatter: the switch's
                    # answer must be the sum (rank r keeps r + 2 values).
                    w = torch.arange(rank + 2, dtype=torch.float32) * sum(k + 1 for k in range(WORLD)) + WORLD * rank
                self.assertTrue(same(g, w), "%s at rank %d: %s, gloo %s%s" % (key, rank, g, w, out))
            # Rank 0 heard from every other rank, each naming itself.
            if rank == 0:
                self.assertEqual(got["recv_anysource"], [(r, float(r)) for r in range(1, WORLD)], out)
            # A switch call after all of them still sums.
            self.assertTrue(torch.equal(got["after"], torch.full((3,), float(sum(range(1, WORLD + 1))))), out)

    def test_counters_say_what_went_through_gloo(self):
        out = show(self.res)
        for rank in range(WORLD):
            d = self.sml[rank]["delegated"]
            # MAX, MIN, PRODUCT, BAND, BOR, BXOR, int64, float64, uint8,
            # bool, a non-contiguous tensor, int64 MAX; and the pickled
            # sizes of all_gather_object travel as int64 sums.
            self.assertGreaterEqual(d.get("allreduce", (0, 0))[0], 12, "rank %d: %s%s" % (rank, d, out))
            for kind in ("reduce", "gather", "scatter", "alltoall", "alltoall_base", "send", "recv",
                         "monitored_barrier"):
                self.assertIn(kind, d, "rank %d: %s%s" % (rank, d, out))
            if rank == 0:
                self.assertEqual(d.get("recv_anysource", (0, 0))[0], WORLD - 1, "%s%s" % (d, out))
            # reduce_scatter with MAX went through gloo, the uneven SUM
            # through the switch.
            self.assertEqual(d.get("reduce_scatter", (0, 0))[0], 1, "rank %d: %s%s" % (rank, d, out))
            t = self.sml[rank]["traffic"]
            self.assertEqual(t.get("reduce_scatter", (0, 0))[0], 1, "rank %d: %s%s" % (rank, t, out))
            # The object collectives' bytes crossed the switch as
            # broadcasts and all-gathers of uint8.
            self.assertGreaterEqual(t.get("broadcast", (0, 0))[0], 2, "rank %d: %s%s" % (rank, t, out))
            self.assertGreaterEqual(t.get("allgather", (0, 0))[0], 2, "rank %d: %s%s" % (rank, t, out))

    def test_each_kind_is_logged_once(self):
        for rank, (_, outp, _) in enumerate(self.res):
            for line in ("switchml: allreduce with ReduceOp.MAX goes through gloo",
                         "switchml: allreduce of int64 (a dtype the switch does not sum) goes through gloo",
                         "switchml: send (point to point) goes through gloo"):
                self.assertEqual(outp.count(line), 1, "rank %d: %r%s" % (rank, line, show(self.res)))


class Order(unittest.TestCase):
    def test_switch_and_gloo_calls_stay_in_order(self):
        # 50 rounds of SUM (switch), int64 SUM and MAX (gloo) queued on one
        # tensor without waiting, then 50 blocking rounds alternating SUM
        # and MAX: gloo's reference waits for every call.
        res = results("order", "switchml", WORLD)
        out = show(res)
        want = [saved for _, _, saved in results("order", "gloo", WORLD)]
        for rank, (_, _, got) in enumerate(res):
            for i, (g, w) in enumerate(zip(got["history"], want[rank]["history"])):
                self.assertTrue(torch.equal(g, w), "round %d at rank %d: %s, gloo %s%s" % (i, rank, g, w, out))
            self.assertEqual(len(got["history"]), 50, out)
            self.assertTrue(torch.equal(got["y"], want[rank]["y"]), out)
            self.assertTrue(torch.equal(got["z"], want[rank]["z"]), "%s, gloo %s%s" % (got["z"], want[rank]["z"], out))
            # 50 MAX + 50 int64 SUM queued, 25 MAX blocking.
            self.assertEqual(got["delegated"]["allreduce"][0], 125, out)
            self.assertEqual(got["traffic"]["allreduce"][0], 75, out)


def _checkpoint_missing():
    """Why this torch cannot run the checkpoint scenario, or None."""
    try:
        importlib.import_module("torch.distributed.checkpoint")
        importlib.import_module("torch.distributed.device_mesh")
    except ImportError as e:
        return "torch %s has no DCP on a DeviceMesh (%s): torch 2.x" % (torch.__version__, e)
    if "device_id" not in inspect.signature(dist.init_process_group).parameters:
        return "torch %s's init_process_group takes no device_id" % torch.__version__
    return None


class Checkpoint(unittest.TestCase):
    @unittest.skipIf(_checkpoint_missing(), _checkpoint_missing())
    def test_device_id_dcp_and_distribute_tensor(self):
        res = results("checkpoint", "switchml", WORLD)
        out = show(res)
        full = torch.arange(WORLD * 4 * 3, dtype=torch.float32).reshape(WORLD * 4, 3)
        for rank, (_, _, got) in enumerate(res):
            mine = full[rank * 4:(rank + 1) * 4]
            self.assertTrue(torch.equal(got["shard"], mine), "rank %d: %s%s" % (rank, got["shard"], out))
            self.assertTrue(torch.equal(got["loaded"], mine), "rank %d: %s%s" % (rank, got["loaded"], out))
            self.assertTrue(torch.equal(got["full"], full), "rank %d%s" % (rank, out))
            self.assertEqual(got["step"], 7, out)
            self.assertEqual(got["bound"], "cpu:0", out)
            self.assertIn("scatter", got["delegated"], out)


class TestFeatures(unittest.TestCase):
    def test_the_harness_learns_the_backends_features(self):
        try:
            from torch.testing._internal.common_distributed import DistTestCases
        except ImportError as e:
            self.skipTest("torch %s has no distributed test harness (%s)" % (torch.__version__, e))
        import switchml
        switchml.declare_test_features()
        for feature in ("ddp", "subgroup", "plugin"):
            self.assertIn("switchml", DistTestCases.backend_feature[feature])
        self.assertNotIn("switchml", DistTestCases.backend_feature.get("gpu", set()))
        for name, backends in DistTestCases.skip_collective.items():
            self.assertNotIn("switchml", backends, name)


if __name__ == "__main__":
    unittest.main()
