"""A job as users start one: torchrun, three ranks on this host, env://
rendezvous, each rank comparing every collective of switchml against
gloo's on a second group (torchrun_worker.py)."""
import os
import signal
import subprocess
import sys
import tempfile
import unittest
import uuid

HERE = os.path.dirname(os.path.abspath(__file__))
WORKER = os.path.join(HERE, "torchrun_worker.py")
# A guard against a hang, never a measure of speed.
TIMEOUT = 300


def torchrun():
    """torchrun of the Python running the tests: the script a virtual
    environment's pip installed beside its python (torch 2.x from PyPI),
    else the module, which Debian's /usr/bin/python3 runs (torch 1.13)."""
    script = os.path.join(os.path.dirname(sys.executable), "torchrun")
    if sys.prefix != sys.base_prefix and os.access(script, os.X_OK):
        return [script]
    return [sys.executable, "-m", "torch.distributed.run"]


def std_workaround(log_dir):
    """The flags torchrun needs where its own defaults fail: torch 1.13's
    Std.from_str finds a value among the members it iterates, and Python
    3.11 iterates a flag's single bits alone, so the default "0" of
    --redirects and --tee (and "3") become None, and torchrun fails at start
    with "'NoneType' object has no attribute 'get'". Redirecting stdout to a
    log and teeing it back to the console (1) parses, and still shows
    every rank's output."""
    from torch.distributed.elastic.multiprocessing.api import Std
    if Std.from_str("0") is not None:
        return []
    return ["--redirects", "1", "--tee", "1", "--log_dir", log_dir]


def run_torchrun(world, **extra):
    """Runs the worker under torchrun; returns its exit status and output.
    The rendezvous store listens on a port the kernel picks (endpoint
    port 0), so that concurrent jobs never collide."""
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.pop("SWITCHML_CONTROLLER", None)
    env.setdefault("OMP_NUM_THREADS", "1")
    env.update(extra)
    logs = tempfile.TemporaryDirectory()
    cmd = torchrun() + ["--nproc_per_node", str(world), "--nnodes", "1", "--max_restarts", "0",
                        "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:0", "--rdzv_id", uuid.uuid4().hex
                        ] + std_workaround(logs.name) + [WORKER]
    p = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, encoding="utf-8",
                         errors="replace", start_new_session=True)
    try:
        outp, _ = p.communicate(timeout=TIMEOUT)
    except subprocess.TimeoutExpired:
        os.killpg(p.pid, signal.SIGKILL)
        outp, _ = p.communicate()
        raise AssertionError("torchrun did not end within %d s (%s); its output:\n%s" % (TIMEOUT, " ".join(cmd), outp))
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
        logs.cleanup()
    return p.returncode, outp


class Torchrun(unittest.TestCase):
    world = 3

    def test_collectives_match_gloo_with_the_embedded_switch(self):
        code, outp = run_torchrun(self.world)
        self.assertEqual(code, 0, "torchrun exited %d:\n%s" % (code, outp[-6000:]))
        for r in range(self.world):
            self.assertIn("OK rank %d" % r, outp, outp[-6000:])
        # torch 2.x warns at register_backend when it is not told the
        # devices: import switchml must not.
        self.assertNotIn("Device capability of switchml unspecified", outp, outp[-6000:])


if __name__ == "__main__":
    unittest.main()
