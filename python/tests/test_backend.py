"""The switchml backend against gloo on the same inputs, its refusals, and
DDP. Every scenario runs as separate processes (tests/worker.py), one per
rank, as torch.distributed jobs do."""
import os
import socket
import subprocess
import sys
import tempfile
import time
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "worker.py")
TIMEOUT = 180


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env(**extra):
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE)] + [p for p in [e.get("PYTHONPATH")] if p])
    e.pop("SWITCHML_CONTROLLER", None)
    e.update(extra)
    return e


def run_ranks(scenario, backend, world, worlds=None, **extra):
    """Runs the ranks of a scenario; returns each rank's (status, output,
    saved result or None)."""
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        procs = []
        for r in range(world):
            path = os.path.join(d, "%d.pt" % r)
            w = worlds[r] if worlds else world
            procs.append((path, subprocess.Popen(
                [sys.executable, WORKER, scenario, backend, str(r), str(w), str(port), path],
                env=env(**extra), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)))
        res = []
        for path, p in procs:
            try:
                outp, _ = p.communicate(timeout=TIMEOUT)
            except subprocess.TimeoutExpired:
                for _, q in procs:
                    q.kill()
                raise AssertionError("%s on %s did not finish within %d s" % (scenario, backend, TIMEOUT))
            res.append((p.returncode, outp, torch.load(path) if os.path.exists(path) else None))
        return res


def results(scenario, backend, world):
    res = run_ranks(scenario, backend, world)
    for r, (code, outp, _) in enumerate(res):
        if code != 0:
            raise AssertionError("%s on %s, rank %d exited %d:\n%s" % (scenario, backend, r, code, outp[-3000:]))
    return [saved for _, _, saved in res]


class SharedMemory(unittest.TestCase):
    def test_ranks_on_the_embedded_switchs_shared_memory(self):
        # SWITCHML_TRANSPORT=shm: rank 0's embedded switch gets an inbox,
        # and every rank's lanes write into it.
        world = 3
        res = run_ranks("transport", "switchml", world, SWITCHML_TRANSPORT="shm", SWITCHML_LANES="1",
                        SWITCHML_WINDOW="256")
        sys.path.insert(0, HERE)
        try:
            import worker
        finally:
            sys.path.remove(HERE)
        for r, (code, outp, saved) in enumerate(res):
            self.assertEqual(code, 0, "rank %d:\n%s" % (r, outp[-3000:]))
            self.assertEqual(saved["transport"], "shm", "rank %d" % r)
            for dt in (torch.float32, torch.int32):
                want = sum(worker.inputs(k, dt) for k in range(world))
                got = saved["sum", dt]
                if dt == torch.int32:
                    self.assertTrue(torch.equal(got, want), "int32 sums differ at rank %d" % r)
                else:
                    err = (got - want).abs().max().item()
                    self.assertLessEqual(err, 1e-5 * want.abs().max().item(), "float32 at rank %d" % r)


class Sparse(unittest.TestCase):
    def test_sparse_sums_match_gloo(self):
        # SWITCHML_SPARSE=1: an embedding gradient and a mostly zero int32
        # tensor, summed over the block-sparse mode, against gloo.
        world = 3
        res = run_ranks("sparse", "switchml", world, SWITCHML_SPARSE="1")
        for r, (code, outp, _) in enumerate(res):
            self.assertEqual(code, 0, "rank %d:\n%s" % (r, outp[-3000:]))
        want = results("sparse", "gloo", world)
        for r, (_, _, got) in enumerate(res):
            self.assertTrue(torch.equal(got["ints"], want[r]["ints"]), "int32 sums differ at rank %d" % r)
            err = (got["grad"] - want[r]["grad"]).abs().max().item()
            self.assertLessEqual(err, 1e-5 * want[r]["grad"].abs().max().item(), "gradient at rank %d" % r)
            self.assertGreater(want[r]["grad"].abs().max().item(), 0)

    def test_ranks_must_agree(self):
        # Rank 0 sets SWITCHML_SPARSE=1, the others do not: the job must
        # not form, and a rank says why.
        res = run_ranks("sparse_mismatch", "switchml", 2)
        outs = "".join(outp for _, outp, _ in res)
        self.assertTrue(all(code != 0 for code, _, _ in res), outs[-3000:])
        self.assertIn("sparse", outs)


class OpsAgainstGloo(unittest.TestCase):
    world = 3

    @classmethod
    def setUpClass(cls):
        cls.sml = results("ops", "switchml", cls.world)
        cls.gloo = results("ops", "gloo", cls.world)

    def test_sum_and_avg(self):
        # The switch sums block-scaled 32-bit fixed point: float32 lands
        # within a few units in the last place of the block's largest
        # value; float16 and bfloat16 within one rounding of their own.
        tol = {torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 1e-2}
        for rank in range(self.world):
            got, want = self.sml[rank], self.gloo[rank]
            for key, w in want.items():
                if not (isinstance(key, tuple) and key[0] in ("sum", "avg")):
                    continue
                g = got[key]
                self.assertEqual(g.dtype, w.dtype, key)
                if w.dtype == torch.int32:
                    self.assertTrue(torch.equal(g, w), "int32 sums differ at rank %d" % rank)
                    continue
                scale = w.abs().max().float()
                err = (g.float() - w.float()).abs().max()
                self.assertLessEqual(err.item(), tol[w.dtype] * scale.item(), "%s rank %d" % (key, rank))
            err2d = (got["sum2d"] - want["sum2d"]).abs().max().item()
            self.assertLessEqual(err2d, 1e-5 * want["sum2d"].abs().max().item())
            self.assertEqual(got["empty"].numel(), 0)

    def test_unreachable_controller_falls_back_to_the_ring(self):
        # SWITCHML_FALLBACK=ring with every rank's ring address: the ranks
        # meet without the controller and run the same collectives over
        # the Go ring; int32 sums are exact, the others as gloo's.
        peers = ",".join("127.0.0.1:%d" % free_port() for _ in range(self.world))
        res = run_ranks("ops", "switchml", self.world, SWITCHML_CONTROLLER="127.0.0.1:1", SWITCHML_CONNECT_TIMEOUT="1",
                        SWITCHML_FALLBACK="ring", SWITCHML_FALLBACK_PEERS=peers)
        for rank, (code, outp, got) in enumerate(res):
            self.assertEqual(code, 0, outp[-3000:])
            self.assertIn("runs over the ring instead of the switch", outp)
            for key, w in self.gloo[rank].items():
                if isinstance(key, tuple) and key[0] == "sum" and w.dtype in (torch.int32, torch.float32):
                    g = got[key]
                    if w.dtype == torch.int32:
                        self.assertTrue(torch.equal(g, w), "int32 sums differ at rank %d" % rank)
                    else:
                        self.assertLessEqual((g - w).abs().max().item(), 1e-5 * w.abs().max().item(), "%s rank %d" % (key, rank))

    def test_ranks_agree(self):
        # Every rank gets the same bits: the switch multicasts one sum.
        for key, v in self.sml[0].items():
            if isinstance(key, tuple) and key[0] in ("sum", "avg"):
                for r in range(1, self.world):
                    self.assertTrue(torch.equal(self.sml[r][key], v), "%s differs between rank 0 and %d" % (key, r))

    def test_broadcast_and_allgather_exact(self):
        for rank in range(self.world):
            got, want = self.sml[rank], self.gloo[rank]
            for root in range(self.world):
                self.assertTrue(torch.equal(got["bcast", root], want["bcast", root]), "broadcast from %d" % root)
                self.assertTrue(torch.equal(got["bcast", root], torch.arange(7, dtype=torch.float64) * (root + 1)))
            for g, w in zip(got["params"], want["params"]):
                self.assertTrue(torch.equal(g, w), "parameters: %s, gloo %s" % (g, w))
            self.assertTrue(torch.equal(got["bcast_u8"], torch.arange(5, dtype=torch.uint8) + 10 * (self.world - 1)))
            self.assertEqual(len(got["gather"]), self.world)
            for r, t in enumerate(got["gather"]):
                self.assertTrue(torch.equal(t, want["gather"][r]), "allgather slot %d" % r)
            self.assertTrue(torch.equal(got["gather_flat"], want["gather_flat"]))
            self.assertEqual(got["live"], 0, "Work objects left alive after every collective was waited for")


class Refusals(unittest.TestCase):
    def test_bad_calls_raise_and_the_group_stays_usable(self):
        outs = results("errors", "switchml", 2)
        for rank, out in enumerate(outs):
            expect = {
                "noncontiguous": ("ValueError", "not contiguous"),
                "meta": ("ValueError", "device meta"),
                "bcast_meta": ("ValueError", "device meta"),
                "float64": ("TypeError", "float64"),
                "complex": ("TypeError", "float64"),
                "max": ("NotImplementedError", "MAX"),
                "product": ("NotImplementedError", "PRODUCT"),
                "avg_int": ("TypeError", "AVG"),
                "reduce": ("NotImplementedError", "reduce"),
                "reduce_scatter": ("NotImplementedError", "reduce_scatter"),
                "all_to_all": ("NotImplementedError", "all_to_all"),
                "send": ("NotImplementedError", "send"),
            }
            for key, (cls, words) in expect.items():
                self.assertIsNotNone(out[key], "%s raised nothing on rank %d" % (key, rank))
                self.assertEqual(out[key][0], cls, "%s: %s" % (key, out[key][1]))
                self.assertIn(words, out[key][1], key)
            self.assertTrue(torch.equal(out["after"], torch.full((5,), 3.0)))
            self.assertTrue(torch.equal(out["complex64"], torch.full((3,), complex(1, 2), dtype=torch.complex64)))

    def test_unreachable_controller(self):
        t0 = time.monotonic()
        res = run_ranks("ops", "switchml", 1, SWITCHML_CONTROLLER="127.0.0.1:1", SWITCHML_CONNECT_TIMEOUT="2")
        code, outp, _ = res[0]
        self.assertNotEqual(code, 0)
        self.assertIn("ControllerUnreachable", outp)
        self.assertIn("no controller answers at 127.0.0.1:1", outp)
        self.assertLess(time.monotonic() - t0, 60)

    def test_bad_input_on_one_rank_ends_the_job_for_all(self):
        t0 = time.monotonic()
        outs = results("abort", "switchml", 2)
        self.assertLess(time.monotonic() - t0, 60)
        cls, msg = outs[0]["error"]
        self.assertIn("not finite", msg)
        self.assertIn("123", msg)
        cls, msg = outs[1]["error"]
        self.assertEqual(cls, "JobAborted", msg)
        self.assertIn("rank 0", msg)

    def test_ctrl_c_on_one_rank_ends_the_job_for_all(self):
        res = run_ranks("interrupt", "switchml", 3)
        code, outp, _ = res[1]
        self.assertNotEqual(code, 0)
        self.assertIn("KeyboardInterrupt", outp)
        for r in (0, 2):
            code, outp, saved = res[r]
            self.assertEqual(code, 0, outp[-3000:])
            cls, msg = saved["error"]
            self.assertEqual(cls, "JobAborted", msg)
            self.assertRegex(msg, "rank 1:? closed its session")

    def test_mismatched_world_sizes(self):
        res = run_ranks("ops", "switchml", 2, worlds=[2, 3])
        for code, outp, _ in res:
            self.assertNotEqual(code, 0)
            self.assertIn("world sizes differ: rank 1 was started with world_size=3, rank 0 with 2", outp)


class DDP(unittest.TestCase):
    def test_ddp_matches_gloo(self):
        sml = results("ddp", "switchml", 2)
        gloo = results("ddp", "gloo", 2)
        for r in range(2):
            for p, q in zip(sml[r]["params"], gloo[r]["params"]):
                self.assertLess((p - q).abs().max().item(), 1e-4)
            for p, q in zip(sml[r]["params"], sml[0]["params"]):
                self.assertTrue(torch.equal(p, q), "ranks hold different parameters")
        # The losses fell: the model learned through the switch.
        self.assertLess(sml[0]["losses"][-1], sml[0]["losses"][0])
        # DDP's reducer held its Work objects only through C++; the group
        # let each go once its future was taken and done.
        self.assertEqual(sml[0]["live"], 0)


if __name__ == "__main__":
    unittest.main()
