"""PyTorch's own distributed tests (the collective and DDP tests of the
harness the torch wheel ships), three ranks, under gloo and under switchml
(torch_harness.py): switchml must fail no test unless gloo fails it with
the same error, and pass at least as many as gloo in each group, of the
tests the harness offers both (it keeps some from any backend but gloo:
torch_harness.py counts them apart). On Debian's torch 1.13
some DDP tests fail under gloo too (its DDP imports torch's sharded
tensors, which Python 3.11's dataclasses refuse): those are the
environment's, and the check leaves them to gloo's verdict."""
import importlib.util
import os
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import torch_harness  # noqa: E402


class TestTorchHarness(unittest.TestCase):
    def test_switchml_does_what_gloo_does(self):
        if importlib.util.find_spec("expecttest") is None:
            self.fail("torch's test utilities need the expecttest module, which %s lacks: pip install expecttest "
                      "(or pip install --target DIR expecttest and put DIR on PYTHONPATH, as scripts/test.sh "
                      "does for Debian's Python)" % sys.executable)
        res = torch_harness.run(sys.executable, world=3)
        table = torch_harness.markdown([res])
        print(table)
        totals = res["totals"]
        for group, _ in torch_harness.GROUPS:
            self.assertIn(group + " offered", totals, "the harness of torch %s offers no %s tests to both backends:\n%s"
                          % (res["torch"], group, table))
            self.assertGreater(totals[group + " offered"]["gloo"]["pass"], 0,
                               "gloo passes none of the %s tests: the harness did not run\n%s" % (group, table))
        broken = sorted(n for n, by in res["tests"].items()
                        if by["switchml"]["outcome"] == "fail" and (
                            by["gloo"]["outcome"] != "fail" or by["gloo"]["error"] != by["switchml"]["error"]))
        self.assertEqual(broken, [], "switchml fails tests that gloo does not fail with the same error:\n%s" % table)
        # The harness keeps some tests from any backend but gloo (gates
        # that name gloo alone, or GPU collectives): the counts compare
        # the tests it offers both.
        for group, _ in torch_harness.GROUPS:
            t = totals[group + " offered"]
            self.assertGreaterEqual(t["switchml"]["pass"], t["gloo"]["pass"],
                                    "switchml passes fewer %s tests than gloo:\n%s" % (group, table))


if __name__ == "__main__":
    unittest.main()
