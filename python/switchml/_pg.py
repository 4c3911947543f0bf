"""The "switchml" torch.distributed backend: a ProcessGroup written in
Python over the library's ctypes binding.

torch (1.13 and 2.x) lets a Python class derive from
torch.distributed.ProcessGroup (pybind11 trampolines PyProcessGroup and
PyWork): C++ callers such as DistributedDataParallel's reducer reach the
Python methods, and a Python Work's get_future() hands them a
torch.futures.Future. Collectives run in call order on one thread per
group, so the caller (the autograd engine during DDP's backward pass) goes
on while the switch sums.

The two torches name some methods differently (1.13's _allgather_base and
_reduce_scatter_base are 2.x's all_gather_single and
reduce_scatter_single, after allgather_into_tensor_coalesced and
reduce_scatter_tensor_coalesced came all_gather_single_coalesced and
reduce_scatter_single_coalesced): the group answers to every name.
"""
import atexit
import datetime
import logging
import os
import queue
import secrets
import signal
import socket
import threading
import time
import weakref

import torch
import torch.distributed as dist

from . import _lib
from ._options import Options, check_wire_bits

BACKEND = "switchml"

# How long a rank tries to reach the controller before it gives up (the
# controller may still be starting, but a wrong address must not hang),
# and how long the ranks wait for each other, whatever the group's timeout.
CONNECT_TIMEOUT = 30.0
JOIN_TIMEOUT = 120.0

# torch 1.13 keeps AllgatherOptions in the C extension only.
_AllgatherOptions = getattr(dist, "AllgatherOptions", None) or torch._C._distributed_c10d.AllgatherOptions

_JOB_KEY = "switchml/job"
_ARRIVED_KEY = "switchml/arrived"
_FAILURES_KEY = "switchml/failures"
_FAILED_KEY = "switchml/failed"


def _mismatch(msg):
    return _lib.JobMismatch(_lib.ERR_MISMATCH, "SWITCHML_ERR_MISMATCH", msg)


def _number(name, parse=int):
    v = os.environ.get(name, "")
    try:
        return parse(v) if v else None
    except ValueError:
        raise ValueError("switchml: %s=%r: want a number" % (name, v)) from None


def _session_settings(options=None):
    """The library's settings from the environment (unset: its defaults),
    under those of options (a switchml.Options, the group's pg_options)."""
    number = _number
    wire = number("SWITCHML_WIRE_BITS")
    s = {"lanes": number("SWITCHML_LANES"), "window": number("SWITCHML_WINDOW"),
         "wire_bits": None if wire is None else check_wire_bits(wire, "SWITCHML_WIRE_BITS"),
         "packet_elements": number("SWITCHML_PACKET_ELEMENTS"), "give_up": number("SWITCHML_GIVE_UP", float),
         "bind": os.environ.get("SWITCHML_BIND") or None,
         "transport": os.environ.get("SWITCHML_TRANSPORT") or None,
         "extended": os.environ.get("SWITCHML_EXTENDED", "") not in ("", "0"),
         "sparse": os.environ.get("SWITCHML_SPARSE", "") not in ("", "0"),
         "fallback": os.environ.get("SWITCHML_FALLBACK") or None,
         "fallback_on_loss": os.environ.get("SWITCHML_FALLBACK_ON_LOSS", "") not in ("", "0"),
         "fallback_listen": os.environ.get("SWITCHML_FALLBACK_LISTEN") or None,
         "fallback_peers": os.environ.get("SWITCHML_FALLBACK_PEERS") or None}
    if options is not None:
        if not isinstance(options, Options):
            raise TypeError("switchml: pg_options is a %s: pass switchml.Options(...) (or None)"
                            % type(options).__name__)
        s.update(options.settings())
    return {k: v for k, v in s.items() if v is not None}


def check_tensor(t, what="tensor"):
    """The tensors the backend takes: dense, contiguous and on the CPU.
    Anything else is refused rather than copied."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("switchml: %s is a %s, not a torch.Tensor" % (what, type(t).__name__))
    if t.device.type != "cpu":
        raise ValueError("switchml: %s is on device %s: the switchml backend reduces CPU tensors only; "
                         "move it with .cpu() (or use nccl for GPU tensors)" % (what, t.device))
    if t.layout != torch.strided:
        raise ValueError("switchml: %s has layout %s: only dense (strided) tensors are supported" % (what, t.layout))
    if not t.is_contiguous():
        raise ValueError("switchml: %s of shape %s is not contiguous (strides %s): pass .contiguous() of it "
                         "(the backend never copies a tensor silently)" % (what, tuple(t.shape), t.stride()))


def _dtype_code(t, what="tensor"):
    """The library's code of t's dtype, found by its name: the library
    says which types it sums."""
    name = str(t.dtype).replace("torch.", "")
    try:
        code, size = _lib.dtype(name)
    except ValueError as e:
        raise TypeError("switchml: %s has dtype %s, which the switch cannot sum (%s)" % (what, name, e)) from None
    if size != t.element_size():
        raise TypeError("switchml: %s has dtype %s of %d-byte values, but the library's %s has %d: rebuild the "
                        "library and the package from one checkout" % (what, name, t.element_size(), name, size))
    return code


def _check_reducible(t, what="tensor"):
    check_tensor(t, what)
    _dtype_code(t, what)


def _check_cpu(t, what="tensor"):
    """The refusal gloo's CPU path would make less clearly: a tensor that
    is not a torch.Tensor or not on the CPU."""
    if not isinstance(t, torch.Tensor):
        raise TypeError("switchml: %s is a %s, not a torch.Tensor" % (what, type(t).__name__))
    if t.device.type != "cpu":
        raise ValueError("switchml: %s is on device %s: the switchml backend reduces CPU tensors only; "
                         "move it with .cpu() (or use nccl for GPU tensors)" % (what, t.device))


def _dtype_name(t):
    return str(t.dtype).replace("torch.", "")


def _switch_dtypes():
    """The dtypes the library sums, by torch's name (asked once)."""
    global _SUMMED
    if _SUMMED is None:
        found = set()
        for name in ("float32", "float16", "bfloat16", "int32", "int64", "float64", "int8", "uint8", "int16", "bool"):
            try:
                _lib.dtype(name)
                found.add(name)
            except ValueError:
                pass
        _SUMMED = found
    return _SUMMED


_SUMMED = None


def _not_for_switch(t, sums=False):
    """Why the switch cannot carry t (None if it can): not dense, not
    contiguous, or (for a sum) a dtype the library does not sum. Byte
    collectives (broadcast, allgather) carry any dtype."""
    if t.layout != torch.strided:
        return "of a %s tensor" % str(t.layout).replace("torch.", "")
    if not t.is_contiguous():
        return "of a non-contiguous tensor"
    if sums and _dtype_name(t) not in _switch_dtypes():
        return "of %s (a dtype the switch does not sum)" % _dtype_name(t)
    return None


def _first_reason(tensors, sums=False):
    for t in tensors:
        why = _not_for_switch(t, sums)
        if why:
            return why
    return None


_log = logging.getLogger("switchml")


def _op_name(op):
    for name in ("SUM", "AVG", "PRODUCT", "MIN", "MAX", "BAND", "BOR", "BXOR", "PREMUL_SUM"):
        if hasattr(dist.ReduceOp, name) and op == getattr(dist.ReduceOp, name):
            return name
    return str(op)


class _LiveWorks:
    """Keeps Work objects alive until their caller is done with them.

    In torch 1.13 the C++ side holds a Python Work through its C++ base
    alone: once no Python reference is left, the Python object goes, and
    C++ calls to wait() or getFuture() reach the base class, whose wait()
    never returns. C++ callers (DDP's reducer, parameter broadcast and
    checks) keep no Python reference, so the group does: each Work stays
    here until it has completed and been claimed, by wait() or by
    get_future() (whose future C++ holds on its own)."""

    def __init__(self):
        self._lock = threading.Lock()
        self._works = {}

    def add(self, w):
        with self._lock:
            self._works[id(w)] = w

    def _release_if_done(self, w):
        with self._lock:
            if w._completed and w._claimed:
                self._works.pop(id(w), None)

    def completed(self, w):
        w._completed = True
        self._release_if_done(w)

    def claimed(self, w):
        w._claimed = True
        self._release_if_done(w)

    def __len__(self):
        with self._lock:
            return len(self._works)


# How often a thread blocked on a collective looks for a signal handler to
# run: see _Work.wait.
_SIGNAL_POLL_S = 0.1


class _Work(dist.Work):
    """A collective in flight. Its future completes with the result
    tensors, or with the library's exception."""

    def __init__(self, future, live):
        super().__init__()
        self._future = future
        self._live = live
        self._completed = self._claimed = False
        # Set once the future completed: a wait on it lets signal handlers
        # run (Ctrl-C), where the future's own wait would not.
        self._done = threading.Event()
        live.add(self)

    def wait(self, timeout=None):
        try:
            # Timed waits, one after another: a signal the kernel hands
            # to another thread (the library's or torch's) sets Python's
            # flag without waking this one, whose handler (Ctrl-C) runs
            # only between waits.
            while not self._done.wait(_SIGNAL_POLL_S):
                pass
            self._future.wait()
        finally:
            self._live.claimed(self)
        return True

    def is_completed(self):
        return self._future.done()

    def is_success(self):
        if not self._future.done():
            raise RuntimeError("switchml: is_success() on a collective still in flight: wait() for it first")
        try:
            self._future.value()
            return True
        except Exception:
            return False

    def exception(self):
        try:
            self._future.value()
        except Exception as e:
            return e
        return None

    def result(self):
        return self._future.value()

    def get_future(self):
        self._live.claimed(self)
        return self._future

    def synchronize(self):
        pass

    def _source_rank(self):
        """The rank a recv from any source got its tensor from (gloo's
        answer, once the recv has completed)."""
        source = getattr(self, "_source", None)
        if source is None:
            raise RuntimeError("switchml: _source_rank() of a call that is not a completed recv from any source")
        return source._source_rank()


class _Later:
    """What a delegated point-to-point call hands the worker thread back:
    gloo's Work, which the waiter thread waits for (the worker goes on,
    so that a send and the matching recv never wait on each other)."""

    def __init__(self, gloo_work, result):
        self.gloo_work = gloo_work
        self.result = result


class _LocalSwitch:
    """The embedded switch rank 0 runs when no controller is named: one per
    process, shared by its groups, stopped at exit."""

    lock = threading.Lock()
    switch = None

    @classmethod
    def address(cls):
        with cls.lock:
            if cls.switch is None:
                cls.switch = _lib.LocalSwitch(os.environ.get("SWITCHML_TRANSPORT") or None)
            return cls.switch.address


_groups = weakref.WeakSet()


# The handlers of SIGINT and SIGTERM that were there before the first
# group, chained from _on_signal.
_previous_handlers = {}


def _hook_signals():
    """On the first group made in the main thread, chains _on_signal in
    front of the SIGINT and SIGTERM handlers."""
    if threading.current_thread() is not threading.main_thread():
        return
    for sig in (signal.SIGINT, signal.SIGTERM):
        if sig in _previous_handlers:
            continue
        prev = signal.getsignal(sig)
        if prev is None or prev == signal.SIG_IGN:
            # Installed outside Python: leave it alone. Ignored (a job
            # started in the background by a shell, or under nohup):
            # the process asked not to be stopped by it, so it must not
            # end the job either.
            continue
        _previous_handlers[sig] = prev
        signal.signal(sig, _on_signal)


def _on_signal(signum, frame):
    """Ctrl-C or SIGTERM: every group leaves its job now, ending the
    collective in flight, so that the other ranks fail at once naming this
    rank instead of waiting for it; then the handler that was there before
    runs (KeyboardInterrupt for SIGINT, by default)."""
    for g in list(_groups):
        g._interrupt()
    prev = _previous_handlers.get(signum)
    if callable(prev):
        return prev(signum, frame)
    signal.signal(signum, signal.SIG_DFL)
    os.kill(os.getpid(), signum)
    return None


@atexit.register
def _shutdown():
    for g in list(_groups):
        g.shutdown()
    with _LocalSwitch.lock:
        if _LocalSwitch.switch is not None:
            _LocalSwitch.switch.stop()
            _LocalSwitch.switch = None


def _wait_reachable(address, deadline):
    host, _, port = address.rpartition(":")
    if not host or not port.isdigit():
        raise ValueError("switchml: controller address %r: want host:port (SWITCHML_CONTROLLER)" % address)
    host = host.strip("[]")
    last = None
    while True:
        try:
            socket.create_connection((host, int(port)), timeout=min(5.0, max(0.1, deadline - time.monotonic()))).close()
            return
        except OSError as e:
            last = e
        if time.monotonic() >= deadline:
            raise _lib.ControllerUnreachable(
                _lib.ERR_UNREACHABLE, "SWITCHML_ERR_UNREACHABLE",
                "switchml: no controller answers at %s (%s): start one (`switchml controller ...`) or fix "
                "SWITCHML_CONTROLLER; unset it to have rank 0 run an embedded switch" % (address, last))
        time.sleep(0.2)


class ProcessGroupSwitchML(dist.ProcessGroup):
    """A process group whose collectives run through a SwitchML switch.

    Rank 0 names the job (and a token that keeps others out of it) and
    shares them through the store; with no SWITCHML_CONTROLLER it also
    starts an embedded switch and shares its address the same way.
    options (switchml.Options, init_process_group's pg_options) take
    precedence over the environment's settings.
    """

    def __init__(self, store, rank, size, timeout=datetime.timedelta(minutes=30), controller=None, options=None):
        settings = _session_settings(options)  # refused before anything waits
        super().__init__(rank, size)
        self._timeout_s = timeout.total_seconds() if timeout else None
        self._closed = False
        self._ops = 0
        self._ops_lock = threading.Lock()
        self._traffic = {}
        self._queue = queue.Queue()
        self._live = _LiveWorks()
        join_timeout = _number("SWITCHML_JOIN_TIMEOUT", float) or JOIN_TIMEOUT
        join_timeout = min(join_timeout, self._timeout_s or join_timeout)
        connect_timeout = _number("SWITCHML_CONNECT_TIMEOUT", float) or CONNECT_TIMEOUT
        self.controller, job, token = self._rendezvous(store, rank, size, controller, join_timeout)
        self._delegated = {}
        self._delegated_said = set()
        self._gloo = self._make_gloo(store, rank, size, timeout)
        try:
            _wait_reachable(self.controller, time.monotonic() + connect_timeout)
        except _lib.ControllerUnreachable:
            # With the ring fallback and every rank's ring address, the
            # ranks meet without the controller.
            if not (settings.get("fallback") and settings.get("fallback_peers")):
                raise
        self._session = _lib.Session(self.controller, job, rank, size, token=token, join_timeout=join_timeout,
                                     **settings)
        self._later = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="switchml-pg-%s" % job, daemon=True)
        self._thread.start()
        self._waiter = threading.Thread(target=self._wait_later, name="switchml-p2p-%s" % job, daemon=True)
        self._waiter.start()
        _register_cpu_backend(self)
        _groups.add(self)
        _hook_signals()

    @staticmethod
    def _make_gloo(store, rank, size, timeout):
        """The gloo group that carries what the switch does not: made from
        the same store (under a prefix of its own), rank and size."""
        timeout = timeout or datetime.timedelta(minutes=30)
        try:
            return dist.ProcessGroupGloo(dist.PrefixStore("switchml-gloo/", store), rank, size, timeout)
        except Exception as e:
            raise RuntimeError("switchml: could not form the gloo group that carries the calls the switch does not "
                               "(%s): check that the ranks reach each other (GLOO_SOCKET_IFNAME names the interface)"
                               % e) from e

    @staticmethod
    def _rendezvous(store, rank, size, controller, timeout_s):
        """Rank 0 names the controller, the job and its token; every rank
        checks that it was started with rank 0's world size and waits
        until all have arrived, so that a rank started wrong fails every
        rank at once with the reason, instead of leaving them waiting
        for a join that cannot complete."""
        controller = controller or os.environ.get("SWITCHML_CONTROLLER", "")

        def fail(msg, make=RuntimeError):
            store.set(_FAILED_KEY, msg)
            store.add(_FAILURES_KEY, 1)
            raise make(msg)

        if rank == 0:
            try:
                if not controller:
                    controller = _LocalSwitch.address()
            except Exception as e:
                fail("switchml: rank 0 could not start the embedded switch: %s" % e)
            store.set(_JOB_KEY, "%s %d %s %s" % (controller, size, "torch-" + secrets.token_hex(6), secrets.token_hex(16)))
        deadline = time.monotonic() + timeout_s
        try:
            store.wait([_JOB_KEY], datetime.timedelta(seconds=timeout_s))
        except RuntimeError as e:
            raise TimeoutError("switchml: rank 0 named no job within %g s (%s): is rank 0 running?" % (timeout_s, e)) from None
        value = store.get(_JOB_KEY).decode()
        addr, size0, job, token = value.split(" ")
        if int(size0) != size:
            fail("switchml: world sizes differ: rank %d was started with world_size=%d, rank 0 with %d: start "
                 "every rank with the same world size" % (rank, size, int(size0)), _mismatch)
        store.add(_ARRIVED_KEY, 1)
        while True:
            if store.add(_FAILURES_KEY, 0) > 0:
                msg = store.get(_FAILED_KEY).decode()
                raise (_mismatch if "world sizes differ" in msg else RuntimeError)(msg)
            arrived = store.add(_ARRIVED_KEY, 0)
            if arrived >= size:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("switchml: only %d of %d ranks arrived within %g s: start every rank (and "
                                   "check world_size)" % (arrived, size, timeout_s))
            time.sleep(0.05)
        # Every rank follows rank 0's controller: the job lives where
        # rank 0 registered it.
        return addr, job, token

    def getBackendName(self):
        return BACKEND

    # torch 2.x names every group (init_process_group and new_group call
    # _set_group_name) and looks groups up by that name (functional
    # collectives, DeviceMesh, FSDP). Its ProcessGroup keeps the name on
    # the C++ backends it holds, and a Python group holds none: the name
    # lives here instead. 1.13 never asks.

    def setGroupName(self, name):
        self._group_name = name

    def getGroupName(self):
        name = getattr(self, "_group_name", None)
        if name is None:
            raise RuntimeError("switchml: this process group has no name yet: torch names it when "
                               "init_process_group or new_group has made it")
        return name

    @property
    def group_name(self):
        return self.getGroupName()

    def setGroupDesc(self, desc):
        self._group_desc = desc

    def getGroupDesc(self):
        return getattr(self, "_group_desc", "")

    @property
    def group_desc(self):
        return self.getGroupDesc()

    def _get_backend_name(self):
        return BACKEND

    def name(self):
        return BACKEND

    # --- the worker thread ---

    def _run(self):
        while True:
            item = self._queue.get()
            if item is None:
                return
            fn, work = item
            try:
                # In place, as gloo writes them: a Parameter's data
                # changes without autograd taking note.
                with torch.no_grad():
                    res, err = fn(), None
            except BaseException as e:  # handed to the waiter, never lost
                res, err = None, e
            if isinstance(res, _Later):
                self._later.put((res, work))
                continue
            self._complete(work, res, err)

    def _wait_later(self):
        """Completes delegated point-to-point calls, in the order they
        were issued, as gloo completes them."""
        while True:
            item = self._later.get()
            if item is None:
                return
            later, work = item
            try:
                later.gloo_work.wait()
                work._source = later.gloo_work
                res, err = later.result, None
            except BaseException as e:  # handed to the waiter, never lost
                res, err = None, e
            self._complete(work, res, err)

    def _complete(self, work, res, err):
        # Marked before the future completes, so that a waiter who
        # wakes up finds the Work's bookkeeping done.
        self._live.completed(work)
        if err is not None:
            work._future.set_exception(err)
        else:
            work._future.set_result(res)
        work._done.set()

    def _submit(self, fn):
        if self._closed:
            raise RuntimeError("switchml: the process group is shut down")
        w = _Work(torch.futures.Future(), self._live)
        self._queue.put((fn, w))
        return w

    def _name(self, what):
        with self._ops_lock:
            self._ops += 1
            return "%s-%d" % (what, self._ops)

    def shutdown(self):
        """Leaves the job once queued collectives are done. Called at exit;
        call it to leave earlier."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        self._thread.join()
        # Point-to-point calls still in flight end with gloo's own
        # timeouts; the waiter is given a moment, not waited for.
        self._later.put(None)
        self._waiter.join(timeout=5)
        try:
            self._session.close()
        except _lib.SwitchMLError:
            pass  # peers or the switch gone already: nothing left to leave
        # The gloo group goes now, while the interpreter still runs and
        # this thread can join its threads, not in the interpreter's
        # teardown, where a gloo group still holding threads aborts the
        # process (terminate called without an active exception).
        self._gloo = None

    def _interrupt(self):
        """Leaves the job at once, from a signal handler: the collective in
        flight ends (the job ends for every rank, naming this one), and
        those queued fail."""
        if self._closed:
            return
        self._closed = True
        self._queue.put(None)
        try:
            self._session.close()
        except _lib.SwitchMLError:
            pass

    def __del__(self):
        try:
            self.shutdown()
        except Exception:
            pass

    # --- collectives ---

    def _reduce_into(self, t, kind):
        if t.numel():
            self._count(kind, t)
            self._session.allreduce(t.data_ptr(), t.numel(), _dtype_code(t), self._timeout_s)

    def _sum_bytes(self, buf, kind):
        """Sums an int32 tensor exactly: the transport of the byte-level
        collectives, where all but one rank contribute zeros."""
        if buf.numel():
            self._count(kind, buf)
            self._session.allreduce(buf.data_ptr(), buf.numel(), _dtype_code(buf), self._timeout_s)

    def _count(self, kind, t):
        with self._ops_lock:
            calls, nbytes = self._traffic.get(kind, (0, 0))
            self._traffic[kind] = (calls + 1, nbytes + t.numel() * t.element_size())

    def traffic(self):
        """What this rank's collectives handed the switch so far, by kind
        ("allreduce", "broadcast", "allgather", "reduce_scatter"): a dict
        of (calls, bytes). Each byte counted is sent to the switch and the
        switch sends a byte back (the sum, to every rank): the traffic
        model of the README. What went on the wire, headers and
        retransmissions included, is the library's count: stats()."""
        with self._ops_lock:
            return dict(self._traffic)

    def stats(self):
        """The library's counters of this rank's session (Session.stats):
        allreduces, packets and bytes sent, values reduced, retransmissions."""
        return self._session.stats()

    def wire_bits(self, dtype):
        """The width in bits, 16 or 32, at which tensors of dtype (a
        torch.dtype the switch sums) travel in this group: 16 for float16
        and bfloat16, 32 for float32 and int32, unless the group's
        wire_bits (Options, SWITCHML_WIRE_BITS) says otherwise."""
        return self._session.wire_bits(_dtype_code(torch.empty(0, dtype=dtype), "a tensor of %s" % dtype))

    def delegated(self):
        """What this rank handed the gloo group instead of the switch so
        far, by call ("allreduce", "reduce", "send", ...): a dict of
        (calls, bytes of the tensors given). The first call of each kind
        and reason is logged ("switchml: <call> <why> goes through gloo")."""
        with self._ops_lock:
            return dict(self._delegated)

    # --- what goes through gloo ---

    def _to_gloo(self, call, why, issue, result, tensors=(), p2p=False):
        """Hands a call to the gloo group. issue(gloo) makes gloo's call;
        it runs on the worker thread, in submission order with the
        switch's calls, so every rank issues gloo's calls in the same
        order relative to the switch's. A collective is waited for there
        too, so that the calls after it see its result; a point-to-point
        call is waited for on the waiter thread, so that a send and the
        recv that matches it never wait on each other. result (or what
        result() returns, once gloo is done) is the Work's value."""
        nbytes = sum(t.numel() * t.element_size() for t in tensors if isinstance(t, torch.Tensor))
        with self._ops_lock:
            calls, total = self._delegated.get(call, (0, 0))
            self._delegated[call] = (calls + 1, total + nbytes)
            say = (call, why) not in self._delegated_said
            self._delegated_said.add((call, why))
        if say:
            _log.warning("switchml: %s %s goes through gloo", call, why)

        def run():
            w = issue(self._gloo)
            if p2p:
                return _Later(w, result)
            w.wait()
            return result() if callable(result) else result
        return self._submit(run)

    @staticmethod
    def _reduce_op(opts):
        """The ReduceOp that opts asks for (an options object, the op
        itself as ProcessGroup.allreduce(tensors, op) takes it, or None:
        SUM)."""
        if opts is None:
            return dist.ReduceOp.SUM
        if hasattr(opts, "reduceOp"):
            return opts.reduceOp
        return opts

    @staticmethod
    def _options(make, opts, op=None):
        """gloo's options for a call: a fresh make() (with opts' timeout
        and, if given, the reduction op), or opts itself."""
        if opts is not None and op is None and isinstance(opts, make):
            return opts
        o = make()
        if opts is not None and hasattr(opts, "timeout"):
            o.timeout = opts.timeout
        if op is not None:
            o.reduceOp = op
        return o

    @staticmethod
    def _check_avg(name, t, what):
        if name == "AVG" and not t.is_floating_point():
            raise TypeError("switchml: %s AVG of a %s tensor: averages need a floating dtype; use SUM and divide "
                            "yourself" % (what, _dtype_name(t)))

    def _reduction(self, opts, tensors, what):
        """(op name, why the switch cannot sum tensors or None). AVG needs
        floating tensors wherever it runs."""
        name = _op_name(self._reduce_op(opts))
        for t in tensors:
            self._check_avg(name, t, what)
        if name not in ("SUM", "AVG"):
            return name, "with ReduceOp.%s" % name
        return name, _first_reason(tensors, sums=True)

    def _gloo_reduction(self, call, why, name, opts, make, issue, outputs, tensors):
        """A SUM, AVG or other reduction through gloo: AVG as gloo's SUM
        divided by the world size (gloo has no AVG before torch 2.x)."""
        if name == "AVG":
            o = self._options(make, opts, dist.ReduceOp.SUM)
            size = self.size()

            def result():
                for t in outputs:
                    t.div_(size)
                return list(outputs)
        else:
            o = opts if isinstance(opts, make) else self._options(make, None, self._reduce_op(opts))
            result = list(outputs)
        return self._to_gloo(call, why, lambda g: issue(g, o), result, tensors)

    # --- what goes through the switch ---

    def allreduce(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        for i, t in enumerate(tensors):
            _check_cpu(t, "tensor %d of allreduce" % i)
        name, why = self._reduction(opts, tensors, "allreduce")
        if why:
            return self._gloo_reduction("allreduce", why, name, opts, dist.AllreduceOptions,
                                        lambda g, o: g.allreduce(tensors, o), tensors, tensors)
        for i, t in enumerate(tensors):
            _check_reducible(t, "tensor %d of allreduce" % i)
        size = self.size()

        def run():
            for t in tensors:
                self._reduce_into(t, "allreduce")
                if name == "AVG":
                    t.div_(size)
            return tensors
        return self._submit(run)

    def broadcast(self, tensors, opts=None):
        if isinstance(tensors, torch.Tensor):
            tensors = [tensors]
        root = opts.rootRank if opts is not None else 0
        if not 0 <= root < self.size():
            raise ValueError("switchml: broadcast root %d is not a rank of this %d-rank group" % (root, self.size()))
        for i, t in enumerate(tensors):
            _check_cpu(t, "tensor %d of broadcast" % i)
        why = "from one of several tensors per rank" if opts is not None and opts.rootTensor != 0 else \
            _first_reason(tensors)
        if why:
            o = opts if opts is not None else dist.BroadcastOptions()
            return self._to_gloo("broadcast", why, lambda g: g.broadcast(tensors, o), tensors, tensors)
        me = self.rank()

        def run():
            # Any dtype travels as its bytes, summed exactly as int32 with
            # zeros from every rank but the root.
            for t in tensors:
                flat = t.reshape(-1).view(torch.uint8)
                buf = torch.zeros((flat.numel() + 3) // 4, dtype=torch.int32)
                if me == root:
                    buf.view(torch.uint8)[:flat.numel()].copy_(flat)
                self._sum_bytes(buf, "broadcast")
                if me != root:
                    flat.copy_(buf.view(torch.uint8)[:flat.numel()])
            return tensors
        return self._submit(run)

    def allgather(self, output_lists, input_tensors, opts=None):
        for i, t in enumerate(input_tensors):
            _check_cpu(t, "allgather input %d" % i)
        for outs in output_lists:
            for i, o in enumerate(outs):
                _check_cpu(o, "allgather output %d" % i)
        why = "of several tensors per rank" if len(input_tensors) != 1 or len(output_lists) != 1 else \
            _first_reason(list(input_tensors) + [o for outs in output_lists for o in outs])
        if why:
            o = opts if opts is not None else _AllgatherOptions()
            return self._to_gloo("allgather", why, lambda g: g.allgather(output_lists, input_tensors, o),
                                 output_lists, input_tensors)
        inp, outs = input_tensors[0], output_lists[0]
        if len(outs) != self.size():
            raise ValueError("switchml: allgather needs %d output tensors (one per rank), got %d" % (self.size(), len(outs)))
        for i, o in enumerate(outs):
            if o.dtype != inp.dtype or o.numel() != inp.numel():
                raise ValueError("switchml: allgather output %d is %s[%d], the input %s[%d]: they must match"
                                 % (i, o.dtype, o.numel(), inp.dtype, inp.numel()))
        return self._submit(lambda: self._gather(inp, outs) and output_lists)

    def _allgather_base(self, output, inp, opts=None):
        _check_cpu(inp, "allgather input")
        _check_cpu(output, "allgather output")
        why = _first_reason([output, inp])
        if why:
            o = opts if opts is not None else _AllgatherOptions()
            return self._to_gloo("allgather_into_tensor", why, lambda g: g._allgather_base(output, inp, o),
                                 [output], [inp])
        if output.dtype != inp.dtype or output.numel() != inp.numel() * self.size():
            raise ValueError("switchml: allgather output is %s[%d], want %s[%d] (world size times the input)"
                             % (output.dtype, output.numel(), inp.dtype, inp.numel() * self.size()))
        outs = list(output.reshape(-1).chunk(self.size())) if inp.numel() else [output] * self.size()
        return self._submit(lambda: self._gather(inp, outs) and [output])

    # torch 2.x calls it all_gather_single (after _allgather_base).
    all_gather_single = _allgather_base

    def allgather_into_tensor_coalesced(self, outputs, inputs, opts=None):
        if len(outputs) != len(inputs):
            raise ValueError("switchml: allgather of %d inputs into %d outputs: they must pair up"
                             % (len(inputs), len(outputs)))
        for i, (out, inp) in enumerate(zip(outputs, inputs)):
            _check_cpu(inp, "allgather input %d" % i)
            _check_cpu(out, "allgather output %d" % i)
        why = _first_reason(list(outputs) + list(inputs))
        if why:
            o = opts if opts is not None else _AllgatherOptions()
            return self._to_gloo("allgather_into_tensor_coalesced", why,
                                 lambda g: g.allgather_into_tensor_coalesced(outputs, inputs, o), list(outputs), inputs)
        pairs = []
        for i, (out, inp) in enumerate(zip(outputs, inputs)):
            if out.dtype != inp.dtype or out.numel() != inp.numel() * self.size():
                raise ValueError("switchml: allgather output %d is %s[%d], want %s[%d] (world size times the input)"
                                 % (i, out.dtype, out.numel(), inp.dtype, inp.numel() * self.size()))
            pairs.append((inp, list(out.reshape(-1).chunk(self.size())) if inp.numel() else [out] * self.size()))

        def run():
            for inp, outs in pairs:
                self._gather(inp, outs)
            return list(outputs)
        return self._submit(run)

    all_gather_single_coalesced = allgather_into_tensor_coalesced

    def _gather(self, inp, outs):
        # Each rank writes its bytes into its own stretch of a zeroed
        # buffer; one exact int32 sum then gives every rank all of them.
        nbytes = inp.numel() * inp.element_size()
        stride = (nbytes + 3) // 4
        buf = torch.zeros(stride * self.size(), dtype=torch.int32)
        raw = buf.view(torch.uint8)
        me = self.rank()
        raw[me * stride * 4:me * stride * 4 + nbytes].copy_(inp.reshape(-1).view(torch.uint8))
        self._sum_bytes(buf, "allgather")
        for r, o in enumerate(outs):
            if nbytes:
                o.reshape(-1).view(torch.uint8).copy_(raw[r * stride * 4:r * stride * 4 + nbytes])
        return True

    # --- reduce_scatter: an allreduce of the whole input, of which each
    # rank keeps its own shard (the switch multicasts every sum to every
    # rank: a rank sends and receives the whole input) ---

    def _check_reduce_scatter(self, output, inp, what):
        if output.dtype != inp.dtype or inp.numel() != output.numel() * self.size():
            raise ValueError("switchml: %s output is %s[%d], the input %s[%d]: the input must be world size (%d) "
                             "times the output, of the same dtype" % (what, output.dtype, output.numel(), inp.dtype,
                                                                       inp.numel(), self.size()))

    def _reduce_shard(self, output, inp, name, scratch=False, offset=None):
        """Sums inp across the ranks (a copy of it, unless it is scratch
        the caller made) and writes this rank's stretch of the sum (at
        offset; by default the rank's n-th of it), divided by the world
        size for AVG, to output."""
        n = output.numel()
        if not n:
            return
        buf = inp.reshape(-1) if scratch else inp.reshape(-1).clone()
        self._reduce_into(buf, "reduce_scatter")
        shard = buf.narrow(0, self.rank() * n if offset is None else offset, n)
        if name == "AVG":
            shard.div_(self.size())
        output.reshape(-1).copy_(shard)

    def reduce_scatter_single(self, output, inp, opts=None):
        _check_cpu(inp, "reduce_scatter_tensor input")
        _check_cpu(output, "reduce_scatter_tensor output")
        name, why = self._reduction(opts, [inp, output], "reduce_scatter_tensor")
        if why:
            return self._gloo_reduction("reduce_scatter_tensor", why, name, opts, dist.ReduceScatterOptions,
                                        lambda g, o: g._reduce_scatter_base(output, inp, o), [output], [inp])
        self._check_reduce_scatter(output, inp, "reduce_scatter_tensor")
        return self._submit(lambda: self._reduce_shard(output, inp, name) or [output])

    # torch 1.13 and the first 2.x releases call it _reduce_scatter_base.
    _reduce_scatter_base = reduce_scatter_single

    def reduce_scatter_tensor_coalesced(self, outputs, inputs, opts=None):
        if len(outputs) != len(inputs):
            raise ValueError("switchml: reduce_scatter of %d inputs into %d outputs: they must pair up"
                             % (len(inputs), len(outputs)))
        for i, (out, inp) in enumerate(zip(outputs, inputs)):
            _check_cpu(inp, "reduce_scatter_tensor input %d" % i)
            _check_cpu(out, "reduce_scatter_tensor output %d" % i)
        name, why = self._reduction(opts, list(outputs) + list(inputs), "reduce_scatter_tensor")
        if why:
            return self._gloo_reduction("reduce_scatter_tensor_coalesced", why, name, opts, dist.ReduceScatterOptions,
                                        lambda g, o: g.reduce_scatter_tensor_coalesced(outputs, inputs, o),
                                        list(outputs), inputs)
        for i, (out, inp) in enumerate(zip(outputs, inputs)):
            self._check_reduce_scatter(out, inp, "reduce_scatter_tensor (pair %d)" % i)

        def run():
            for out, inp in zip(outputs, inputs):
                self._reduce_shard(out, inp, name)
            return list(outputs)
        return self._submit(run)

    reduce_scatter_single_coalesced = reduce_scatter_tensor_coalesced

    def reduce_scatter(self, output_tensors, input_lists, opts=None):
        for i, t in enumerate(output_tensors):
            _check_cpu(t, "reduce_scatter output %d" % i)
        for ins in input_lists:
            for i, t in enumerate(ins):
                _check_cpu(t, "reduce_scatter input %d" % i)
        everything = list(output_tensors) + [t for ins in input_lists for t in ins]
        name, why = self._reduction(opts, everything, "reduce_scatter")
        if not why and (len(output_tensors) != 1 or len(input_lists) != 1):
            why = "of several tensors per rank"
        if why:
            return self._gloo_reduction("reduce_scatter", why, name, opts, dist.ReduceScatterOptions,
                                        lambda g, o: g.reduce_scatter(output_tensors, input_lists, o),
                                        output_tensors, everything[len(output_tensors):])
        out, ins = output_tensors[0], input_lists[0]
        if len(ins) != self.size():
            raise ValueError("switchml: reduce_scatter needs %d input tensors (one per rank), got %d"
                             % (self.size(), len(ins)))
        for i, t in enumerate(ins):
            if t.dtype != out.dtype:
                raise ValueError("switchml: reduce_scatter input %d is %s, the output %s: they must match"
                                 % (i, t.dtype, out.dtype))
        me = self.rank()
        if ins[me].numel() != out.numel():
            raise ValueError("switchml: reduce_scatter input %d (this rank's) has %d elements, the output %d: they "
                             "must match" % (me, ins[me].numel(), out.numel()))
        # Uneven inputs (each rank's share of its own size) are summed
        # whole; each rank keeps its stretch.
        offset = sum(t.numel() for t in ins[:me])

        def run():
            if out.numel():
                self._reduce_shard(out, torch.cat([t.reshape(-1) for t in ins]), name, scratch=True, offset=offset)
            return output_tensors
        return self._submit(run)

    def barrier(self, opts=None):
        # A barrier with a timeout of its own is gloo's, which ends at that
        # timeout naming the wait, as torch's users expect. Any other is
        # the job's own, as every other switch call: it holds when a rank
        # leaves right after it, where gloo's connections, torn down by the
        # first rank to exit, can abort a rank still finishing its gloo
        # barrier.
        if opts is not None and opts.timeout >= datetime.timedelta(0):
            return self._to_gloo("barrier", "(with a timeout of its own)", lambda g: g.barrier(opts), [], [])
        name = self._name("barrier")
        return self._submit(lambda: self._session.barrier(name, self._timeout_s) or [])

    # --- what the switch has no call for: gloo's ---

    def reduce(self, tensors, opts=None):
        for i, t in enumerate(tensors):
            _check_cpu(t, "tensor %d of reduce" % i)
        o = opts if opts is not None else dist.ReduceOptions()
        return self._to_gloo("reduce", "(to one rank)", lambda g: g.reduce(tensors, o), tensors, tensors)

    def gather(self, output_lists, input_tensors, opts=None):
        for i, t in enumerate(input_tensors):
            _check_cpu(t, "gather input %d" % i)
        o = opts if opts is not None else dist.GatherOptions()
        return self._to_gloo("gather", "(to one rank)", lambda g: g.gather(output_lists, input_tensors, o),
                             output_lists, input_tensors)

    def scatter(self, output_tensors, input_lists, opts=None):
        for i, t in enumerate(output_tensors):
            _check_cpu(t, "scatter output %d" % i)
        o = opts if opts is not None else dist.ScatterOptions()
        return self._to_gloo("scatter", "(from one rank)", lambda g: g.scatter(output_tensors, input_lists, o),
                             output_tensors, [t for ins in input_lists for t in ins])

    def alltoall(self, output_tensors, input_tensors, opts=None):
        o = opts if opts is not None else dist.AllToAllOptions()
        return self._to_gloo("alltoall", "(each rank its own data for each)",
                             lambda g: g.alltoall(output_tensors, input_tensors, o), output_tensors, input_tensors)

    def alltoall_base(self, output, inp, output_split_sizes, input_split_sizes, opts=None):
        _check_cpu(inp, "all_to_all_single input")
        o = opts if opts is not None else dist.AllToAllOptions()
        return self._to_gloo("alltoall_base", "(each rank its own data for each)",
                             lambda g: g.alltoall_base(output, inp, output_split_sizes, input_split_sizes, o),
                             [output], [inp])

    def allreduce_coalesced(self, tensors, opts=None):
        for i, t in enumerate(tensors):
            _check_cpu(t, "tensor %d of allreduce_coalesced" % i)
        o = opts if opts is not None else dist.AllreduceCoalescedOptions()
        return self._to_gloo("allreduce_coalesced", "(one call for a list)", lambda g: g.allreduce_coalesced(tensors, o),
                             tensors, tensors)

    def allgather_coalesced(self, output_lists, input_tensors, opts=None):
        for i, t in enumerate(input_tensors):
            _check_cpu(t, "allgather_coalesced input %d" % i)
        o = opts if opts is not None else _AllgatherOptions()
        return self._to_gloo("allgather_coalesced", "(one call for a list)",
                             lambda g: g.allgather_coalesced(output_lists, input_tensors, o), output_lists, input_tensors)

    def send(self, tensors, dst, tag=0):
        for i, t in enumerate(tensors):
            _check_cpu(t, "tensor %d of send" % i)
        return self._to_gloo("send", "(point to point)", lambda g: g.send(tensors, dst, tag), tensors, tensors, p2p=True)

    def recv(self, tensors, src, tag=0):
        for i, t in enumerate(tensors):
            _check_cpu(t, "tensor %d of recv" % i)
        return self._to_gloo("recv", "(point to point)", lambda g: g.recv(tensors, src, tag), tensors, tensors, p2p=True)

    def recv_anysource(self, tensors, tag=0):
        for i, t in enumerate(tensors):
            _check_cpu(t, "tensor %d of recv" % i)
        return self._to_gloo("recv_anysource", "(point to point)", lambda g: g.recv_anysource(tensors, tag), tensors,
                             tensors, p2p=True)

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        """gloo's monitored_barrier, in order with the other calls: it
        returns once every rank has come, or raises naming those that
        did not (synchronous, as gloo's)."""
        args = (timeout,) if timeout is not None else ()
        self._to_gloo("monitored_barrier", "(ranks checked one by one)",
                      lambda g: _Done(g.monitored_barrier(*args, wait_all_ranks=wait_all_ranks)), []).wait()


class _Done:
    """A call gloo made synchronously, as a Work that is done."""

    def __init__(self, value):
        self.value = value

    def wait(self):
        return True


# The calls a torch.distributed Backend answers, forwarded by the one the
# group registers for the CPU (see _register_cpu_backend).
_FORWARDED = ("allreduce", "broadcast", "allgather", "_allgather_base", "allgather_into_tensor_coalesced",
              "allgather_coalesced", "allreduce_coalesced", "reduce_scatter", "_reduce_scatter_base",
              "reduce_scatter_tensor_coalesced", "barrier", "reduce", "gather", "scatter", "alltoall",
              "alltoall_base", "send", "recv", "recv_anysource", "monitored_barrier")


def _register_cpu_backend(pg):
    """Registers, on torch 2.x, a Backend for the CPU device with the
    group, as torch does for the backends it makes itself: torch's helpers
    (init_process_group's device_id, DCP, DTensor, batch_isend_irecv) ask
    a group for the Backend of a device and fail without one ("No backend
    type associated with device type cpu", "Default device not found").
    The Backend forwards every call to the group, so that nothing goes
    around its order. torch 1.13 has no such registry."""
    if not hasattr(pg, "_register_backend") or not hasattr(torch._C._distributed_c10d, "Backend"):
        return
    backend = _CpuBackend.make(pg)
    backend_type = dist.ProcessGroup.BackendType.CUSTOM
    pg._register_backend(torch.device("cpu"), backend_type, backend)
    if hasattr(pg, "_set_default_backend"):
        pg._set_default_backend(backend_type)


class _CpuBackend:
    cls = None

    @classmethod
    def make(cls, pg):
        if cls.cls is None:
            base = torch._C._distributed_c10d.Backend

            def init(self, group):
                base.__init__(self, group.rank(), group.size())
                self._group = weakref.ref(group)

            def forward(name):
                def call(self, *args, **kwargs):
                    group = self._group()
                    if group is None:
                        raise RuntimeError("switchml: the process group of this backend is gone")
                    return getattr(group, name)(*args, **kwargs)
                call.__name__ = name
                return call

            attrs = {"__init__": init, "__doc__": "The switchml group's Backend for the CPU device: it forwards "
                     "every call to the group.",
                     # torch reads these as attributes; the C++ base would
                     # look them up here again, without end.
                     "supports_splitting": property(lambda self: False),
                     "supports_coalescing": property(lambda self: False),
                     "getBackendName": lambda self: BACKEND,
                     "shutdown": lambda self: None,
                     "abort": lambda self: None}
            for name in _FORWARDED:
                attrs[name] = forward(name)
            cls.cls = type("SwitchMLCpuBackend", (base,), attrs)
        return cls.cls(pg)


def create(store, rank, size, timeout):
    """The creator torch.distributed calls for init_process_group("switchml")."""
    return ProcessGroupSwitchML(store, rank, size, timeout)


def create_extended(opts, backend_options=None):
    """The creator torch calls when the backend is registered with
    extended_api=True: the same group, with init_process_group's (or
    new_group's) pg_options, a switchml.Options, and on torch 2.x the
    device that init_process_group(device_id=...) bound to the group torch
    made first (the one this group replaces), as torch's own backends keep
    it."""
    pg = ProcessGroupSwitchML(opts.store, opts.group_rank, opts.group_size, opts.timeout, options=backend_options)
    bound = getattr(getattr(opts, "process_group", None), "bound_device_id", None)
    if bound is not None:
        pg.bound_device_id = bound
    return pg

