"""Parts of the package that need no second process: the store
rendezvous's failures and loading the library."""
import datetime
import os
import subprocess
import sys
import unittest

import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from switchml import _pg  # noqa: E402


class Rendezvous(unittest.TestCase):
    def test_no_rank_0(self):
        # Nothing will ever name the job: the wait ends at its own bound,
        # with the reason.
        store = dist.PrefixStore("t1", dist.HashStore())
        with self.assertRaisesRegex(TimeoutError, "rank 0 named no job within 0.5 s"):
            _pg.ProcessGroupSwitchML._rendezvous(store, 1, 2, None, 0.5)

    def test_a_rank_missing(self):
        store = dist.PrefixStore("t2", dist.HashStore())
        with self.assertRaisesRegex(TimeoutError, "only 1 of 3 ranks arrived"):
            _pg.ProcessGroupSwitchML._rendezvous(store, 0, 3, "127.0.0.1:1", 0.5)

    def test_every_rank_follows_rank_0(self):
        store = dist.PrefixStore("t3", dist.HashStore())
        store.add("switchml/arrived", 1)  # rank 1 is there already
        addr, job, token = _pg.ProcessGroupSwitchML._rendezvous(store, 0, 2, "10.1.2.3:50051", 5)
        self.assertEqual(addr, "10.1.2.3:50051")
        got = _pg.ProcessGroupSwitchML._rendezvous(store, 1, 2, "elsewhere:1", 5)
        self.assertEqual(got, (addr, job, token))
        self.assertGreaterEqual(len(token), 32)

    def test_world_size_mismatch_reaches_rank_0(self):
        store = dist.PrefixStore("t4", dist.HashStore())
        store.set("switchml/job", "127.0.0.1:1 2 torch-x secret")
        with self.assertRaisesRegex(Exception, "rank 1 was started with world_size=3, rank 0 with 2"):
            _pg.ProcessGroupSwitchML._rendezvous(store, 1, 3, None, 5)
        # Rank 0, still waiting for its peers, learns the reason at once:
        # with a wait far longer than the test could last, only the
        # mismatch can end it, and JobMismatch (not TimeoutError) says so.
        with self.assertRaises(Exception) as cm:
            _pg.ProcessGroupSwitchML._rendezvous(store, 0, 2, "127.0.0.1:1", 600)
        self.assertEqual(type(cm.exception).__name__, "JobMismatch", cm.exception)
        self.assertIn("world sizes differ", str(cm.exception))


class Loading(unittest.TestCase):
    def test_import_warns_nothing(self):
        # torch 2.x warns when a backend is registered without its devices;
        # every warning is an error here.
        code = ("import torch.distributed as d, switchml\n"
                "caps = getattr(d.Backend, 'backend_capability', None)\n"
                "print('devices', caps.get('switchml') if caps is not None else 'none')\n")
        env = dict(os.environ, PYTHONPATH=os.path.dirname(HERE))
        out = subprocess.run([sys.executable, "-W", "error", "-c", code], env=env, capture_output=True, text=True,
                             timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stderr, "", out.stderr)
        # Where torch keeps backends' devices, switchml serves the CPU alone.
        self.assertIn(out.stdout.strip(), ("devices ['cpu']", "devices none"), out.stdout)

    def test_missing_library_says_how_to_build_it(self):
        code = ("import switchml, torch.distributed as d\n"
                "assert d.Backend.SWITCHML\n"  # registered without loading the library
                "try:\n"
                "    switchml.LocalSwitch()\n"
                "except ImportError as e:\n"
                "    print('ImportError:', e)\n")
        env = dict(os.environ, SWITCHML_LIBRARY="/nonexistent/libswitchml.so",
                   PYTHONPATH=os.path.dirname(HERE))
        out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertIn("no libswitchml.so at /nonexistent/libswitchml.so", out.stdout)
        self.assertIn("pip install ./python", out.stdout)


if __name__ == "__main__":
    unittest.main()
