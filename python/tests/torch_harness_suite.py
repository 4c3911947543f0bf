"""PyTorch's own distributed tests (torch/testing/_internal/distributed/
distributed_test.py, shipped in the torch wheel), driven as PyTorch's
test/distributed/test_distributed_spawn.py drives them, with the switchml
backend registered. torch_harness.py runs this module once per backend and
reads what it writes; run alone:

    BACKEND=switchml WORLD_SIZE=3 python torch_harness_suite.py --out results.json test_all_reduce_sum ...

The environment is the harness's: BACKEND, WORLD_SIZE, and TEMP_DIR (a
directory the harness's setUp replaces with one of its own per test). Every
test spawns WORLD_SIZE processes ("spawn" start method), each of which
imports this module again as its main module: so the class below and the
registration of the backend (import switchml) happen at import, never under
__main__.
"""
import argparse
import json
import os
import sys
import unittest

import torch
import torch.distributed as dist

if "BACKEND" not in os.environ or "WORLD_SIZE" not in os.environ or "TEMP_DIR" not in os.environ:
    raise RuntimeError("torch_harness_suite: the harness needs BACKEND (gloo or switchml), WORLD_SIZE (2 or more) "
                       "and TEMP_DIR (an existing directory) in the environment: run it through torch_harness.py")

import switchml  # noqa: E402,F401  (registers the backend, in every spawned rank too)

# What the backend tells the harness it does (DDP, subgroups, ...), before
# the harness's decorators read it at import.
if os.environ["BACKEND"] == "switchml" and hasattr(switchml, "declare_test_features"):
    switchml.declare_test_features()

from torch.testing._internal.common_distributed import DistTestCases  # noqa: E402

from torch.testing._internal.distributed.distributed_test import (  # noqa: E402
    DistributedTest,
    TestDistBackend,
)


class TestDistBackendWithSpawn(TestDistBackend, DistributedTest._DistTestBase):
    """One test of the harness: setUp spawns the ranks, the test method
    (wrapped by MultiProcessTestCase) joins them and turns their exit codes
    into pass, skip or failure."""

    def setUp(self):
        super().setUp()
        if os.environ.get("SWITCHML_HARNESS_START", "spawn") == "fork":
            # test_distributed_fork.py's way (torch 1.x): the ranks fork
            # from this process, which has imported torch and the harness
            # but never started a backend, instead of importing them again.
            self._start_processes(torch.multiprocessing.get_context("fork").Process)
        else:
            self._spawn_processes()


def all_tests():
    return sorted(n for n in dir(DistributedTest._DistTestBase) if n.startswith("test_"))


class Recorder(unittest.TextTestResult):
    """The outcome of each test, by name: pass, skip (with the reason) or
    fail (with the error's last line)."""

    def __init__(self, *a, **k):
        super().__init__(*a, **k)
        self.outcomes = {}

    def _name(self, test):
        return test.id().rsplit(".", 1)[-1]

    def addSuccess(self, test):
        super().addSuccess(test)
        self.outcomes[self._name(test)] = {"outcome": "pass"}

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self.outcomes[self._name(test)] = {"outcome": "skip", "reason": str(reason)}

    def _fail(self, test, err):
        text = self._exc_info_to_string(err, test)
        last = [ln for ln in text.strip().splitlines() if ln.strip()]
        self.outcomes[self._name(test)] = {"outcome": "fail", "error": last[-1] if last else "", "detail": text[-4000:]}

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._fail(test, err)

    def addError(self, test, err):
        super().addError(test, err)
        self._fail(test, err)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self.outcomes[self._name(test)] = {"outcome": "pass", "note": "expected failure"}

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self.outcomes[self._name(test)] = {"outcome": "fail", "error": "unexpected success"}


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--out", required=True, help="write {test name: outcome} here as JSON")
    p.add_argument("--list", action="store_true", help="write the names of every test of the harness instead")
    p.add_argument("tests", nargs="*")
    a = p.parse_args()
    names = all_tests()
    if a.list:
        with open(a.out, "w") as f:
            json.dump(names, f)
        return 0
    unknown = [t for t in a.tests if t not in names]
    if unknown:
        sys.exit("torch_harness_suite: no such tests in this torch's harness: %s" % ", ".join(unknown))
    suite = unittest.TestSuite(TestDistBackendWithSpawn(t) for t in a.tests)
    runner = unittest.TextTestRunner(resultclass=Recorder, verbosity=2, stream=sys.stderr)
    res = runner.run(suite)
    with open(a.out, "w") as f:
        json.dump({"backend": dist.Backend(os.environ["BACKEND"]), "outcomes": res.outcomes,
                   "gpu_backends": sorted(DistTestCases.backend_feature["gpu"])}, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
