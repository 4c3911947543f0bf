"""A job as users start one: torchrun, three ranks on this host, env://
rendezvous, each rank comparing every collective of switchml against
gloo's on a second group (torchrun_worker.py)."""
import os
import signal
import socket
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


def torchrun_job(world, script, env, cwd=None):
    """Runs script (and its arguments) under torchrun with world ranks and
    env; returns its exit status and output. The rendezvous store listens
    on a port the kernel picks (endpoint port 0), so that concurrent jobs
    never collide; a job that outlives TIMEOUT is killed and fails the
    test."""
    env = dict(env)
    env["PYTHONPATH"] = os.pathsep.join([os.path.dirname(HERE)] + [p for p in [env.get("PYTHONPATH")] if p])
    env.setdefault("OMP_NUM_THREADS", "1")
    logs = tempfile.TemporaryDirectory()
    cmd = torchrun() + ["--nproc_per_node", str(world), "--nnodes", "1", "--max_restarts", "0",
                        "--rdzv_backend", "c10d", "--rdzv_endpoint", "127.0.0.1:0", "--rdzv_id", uuid.uuid4().hex
                        ] + std_workaround(logs.name) + list(script)
    p = subprocess.Popen(cmd, cwd=cwd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, encoding="utf-8",
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


def run_torchrun(world, **extra):
    """Runs the worker under torchrun; returns its exit status and output."""
    env = dict(os.environ)
    env.pop("SWITCHML_CONTROLLER", None)
    env.pop("SWITCHML_BINARY", None)
    env.update(extra)
    return torchrun_job(world, [WORKER], env)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Controller:
    """A switchml switch and controller on loopback, as
    docs/operations.md starts them, from the binary SWITCHML_BINARY names;
    ready once `switchml wait` says the controller serves."""

    def __init__(self, binary):
        dataplane, p4rt = "127.0.0.1:%d" % free_port(), "127.0.0.1:%d" % free_port()
        self.address = "127.0.0.1:%d" % free_port()
        self._log = tempfile.TemporaryFile(mode="w+", encoding="utf-8", errors="replace")
        self.procs = []
        try:
            for args in (["switch", "--dataplane", dataplane, "--p4rt", p4rt],
                         ["controller", "--target", p4rt, "--listen", self.address, "--dataplane", dataplane]):
                self.procs.append(subprocess.Popen([binary] + args, stdout=self._log, stderr=subprocess.STDOUT))
            wait = subprocess.run([binary, "wait", "--controller", self.address, "--timeout", "%ds" % TIMEOUT],
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, encoding="utf-8", errors="replace",
                                  timeout=TIMEOUT + 30)
            if wait.returncode != 0:
                raise AssertionError("the controller at %s did not start serving: %s\n%s" % (
                    self.address, wait.stdout, self.output()))
        except BaseException:
            self.close()
            raise

    def output(self):
        self._log.flush()
        self._log.seek(0)
        return "--- switch and controller ---\n" + self._log.read()[-4000:]

    def close(self):
        for p in self.procs:
            if p.poll() is None:
                p.terminate()
        for p in self.procs:
            try:
                p.wait(timeout=30)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        self._log.close()


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

    @unittest.skipUnless(os.environ.get("SWITCHML_BINARY"), "SWITCHML_BINARY names no switchml binary (go build -o "
                         "switchml ./cmd/switchml; scripts/test.sh builds one)")
    def test_collectives_match_gloo_through_a_controller(self):
        ctl = Controller(os.environ["SWITCHML_BINARY"])
        try:
            code, outp = run_torchrun(self.world, SWITCHML_CONTROLLER=ctl.address)
            self.assertEqual(code, 0, "torchrun exited %d:\n%s\n%s" % (code, outp[-6000:], ctl.output()))
            for r in range(self.world):
                self.assertIn("OK rank %d" % r, outp, outp[-6000:])
            # The job ran on this controller: it logged the job's ranks.
            self.assertIn("torch-", ctl.output(), ctl.output())
        finally:
            ctl.close()


if __name__ == "__main__":
    unittest.main()
