"""ctypes binding of libswitchml (capi/switchml.h).

The library is loaded on first use, not at import, so that a process may
import switchml and still fork before it touches the Go runtime (which
does not survive a fork). ctypes releases the GIL for the length of every
call, so a blocking allreduce leaves other Python threads running.
"""
import ctypes
import os
import threading

ABI_VERSION = 7

# switchml_status
OK = 0
ERR_INVALID = 1
ERR_CONFIG = 2
ERR_HANDLE = 3
ERR_UNREACHABLE = 4
ERR_MISMATCH = 5
ERR_TIMEOUT = 6
ERR_ABORTED = 7
ERR_CLOSED = 8
ERR_OTHER = 9

_ERR_LEN = 4096


class SwitchMLError(RuntimeError):
    """A failed library call: `status` is the switchml_status code,
    `status_name` its name, the message the library's own."""

    def __init__(self, status, status_name, message):
        super().__init__(message)
        self.status = status
        self.status_name = status_name


class ControllerUnreachable(SwitchMLError):
    """No controller answered at the address."""


class JobMismatch(SwitchMLError):
    """The ranks disagree about the job (world size, sizes)."""


class SwitchMLTimeout(SwitchMLError, TimeoutError):
    """A deadline passed, or the switch stopped answering."""


class JobAborted(SwitchMLError):
    """The controller ended the job: a rank died, failed or left."""


class ConfigError(SwitchMLError, ValueError):
    """The library refused a setting; the message names each one."""


_CLASSES = {
    ERR_CONFIG: ConfigError,
    ERR_UNREACHABLE: ControllerUnreachable,
    ERR_MISMATCH: JobMismatch,
    ERR_TIMEOUT: SwitchMLTimeout,
    ERR_ABORTED: JobAborted,
}


class _Config(ctypes.Structure):
    _fields_ = [
        ("controller", ctypes.c_char_p),
        ("job", ctypes.c_char_p),
        ("rank", ctypes.c_int32),
        ("workers", ctypes.c_int32),
        ("bind", ctypes.c_char_p),
        ("token", ctypes.c_char_p),
        ("lanes", ctypes.c_int32),
        ("window", ctypes.c_int32),
        ("packet_elements", ctypes.c_int32),
        ("join_timeout_ms", ctypes.c_int64),
        ("give_up_ms", ctypes.c_int64),
        ("extended", ctypes.c_int32),
        ("fallback", ctypes.c_char_p),
        ("fallback_on_loss", ctypes.c_int32),
        ("fallback_listen", ctypes.c_char_p),
        ("fallback_peers", ctypes.c_char_p),
        ("transport", ctypes.c_char_p),
        ("sparse", ctypes.c_int32),
        ("wire_bits", ctypes.c_int32),
    ]


_lock = threading.Lock()
_lib = None


def library_path():
    """Where the library is loaded from: $SWITCHML_LIBRARY, else the copy
    that `pip install` built into the package."""
    return os.environ.get("SWITCHML_LIBRARY") or os.path.join(os.path.dirname(__file__), "libswitchml.so")


def lib():
    global _lib
    with _lock:
        if _lib is not None:
            return _lib
        path = library_path()
        if not os.path.exists(path):
            raise ImportError(
                "switchml: no libswitchml.so at %s: install the package with `pip install ./python` from the "
                "switchml-go checkout (it runs `go build -buildmode=c-shared`), or build it yourself with "
                "`go build -buildmode=c-shared -o libswitchml.so ./capi` and set SWITCHML_LIBRARY to its path" % path)
        l = ctypes.CDLL(path)
        i64, i32, ptr, buf, size = ctypes.c_int64, ctypes.c_int32, ctypes.c_void_p, ctypes.c_char_p, ctypes.c_size_t
        sigs = {
            "switchml_abi_version": [],
            "switchml_join": [ctypes.POINTER(_Config), ctypes.POINTER(i64), buf, size],
            "switchml_allreduce": [i64, ptr, i64, ctypes.c_int, i64, buf, size],
            "switchml_dtype_lookup": [buf, ctypes.POINTER(i32), ctypes.POINTER(i32), buf, size],
            "switchml_barrier": [i64, buf, i64, buf, size],
            "switchml_broadcast": [i64, buf, i32, ptr, i64, i64, buf, size],
            "switchml_close": [i64, buf, size],
            "switchml_local_start": [ctypes.POINTER(i64), buf, size, buf, size],
            "switchml_local_start_transport": [buf, ctypes.POINTER(i64), buf, size, buf, size],
            "switchml_transport": [i64, buf, size, buf, size],
            "switchml_local_stop": [i64, buf, size],
            "switchml_fallback": [i64, ctypes.POINTER(i32), buf, size, buf, size],
            "switchml_stats": [i64] + [ctypes.POINTER(ctypes.c_uint64)] * 4 + [buf, size],
            "switchml_counter": [i64, buf, ctypes.POINTER(ctypes.c_uint64), buf, size],
            "switchml_wire_bits": [i64, ctypes.c_int, ctypes.POINTER(i32), buf, size],
        }
        # The version first: an older library lacks the newer functions.
        l.switchml_abi_version.argtypes, l.switchml_abi_version.restype = [], ctypes.c_int
        if l.switchml_abi_version() != ABI_VERSION:
            raise ImportError("switchml: %s has C ABI version %d, this package speaks %d: rebuild the library from "
                              "the same checkout as the package" % (path, l.switchml_abi_version(), ABI_VERSION))
        for name, args in sigs.items():
            f = getattr(l, name)
            f.argtypes, f.restype = args, ctypes.c_int
        l.switchml_status_name.argtypes, l.switchml_status_name.restype = [ctypes.c_int], ctypes.c_char_p
        _lib = l
        return l


def call(fn, *args):
    """Calls fn(*args, err, err_len) and raises the library's error."""
    err = ctypes.create_string_buffer(_ERR_LEN)
    st = fn(*args, err, _ERR_LEN)
    if st == OK:
        return
    msg = err.value.decode(errors="replace")
    if st == ERR_INVALID:
        raise ValueError(msg)
    raise _CLASSES.get(st, SwitchMLError)(st, lib().switchml_status_name(st).decode(), msg)


_dtypes = {}


def dtype(name):
    """The library's code (for Session.allreduce) and value size in bytes
    of the element type called name ("float32", "int32": PyTorch's
    names). An unknown name raises ValueError listing the known ones."""
    with _lock:
        found = _dtypes.get(name)
    if found is None:
        code, size = ctypes.c_int32(0), ctypes.c_int32(0)
        call(lib().switchml_dtype_lookup, name.encode(), ctypes.byref(code), ctypes.byref(size))
        found = (code.value, size.value)
        with _lock:
            _dtypes[name] = found
    return found


# ctypes converts a Python int to a C integer by dropping the bits that do
# not fit, without a word: 2**64 + 4 passes as 4, and an address of 2**64
# as NULL. Every integer handed to the library goes through _int first.
_INT32 = (-(1 << 31), (1 << 31) - 1)
_INT64 = (-(1 << 63), (1 << 63) - 1)
_UINT64 = (0, (1 << 64) - 1)
# The most milliseconds the library takes (what a Go time.Duration holds).
_MAX_MS = ((1 << 63) - 1) // 1000000


def _int(name, value, bounds):
    """value, an int within bounds (inclusive), or ValueError naming it."""
    if isinstance(value, bool) or not isinstance(value, int):
        try:
            v = value.__index__()  # numpy integers, torch sizes
        except (AttributeError, TypeError):
            raise TypeError("switchml: %s is %r: want an int" % (name, value)) from None
    else:
        v = value
    lo, hi = bounds
    if not lo <= v <= hi:
        raise ValueError("switchml: %s is %d: want %d..%d" % (name, v, lo, hi))
    return v


def _ms(seconds, name="timeout"):
    """seconds (None: the library's own bounds) as milliseconds, at least 1."""
    if seconds is None:
        return 0
    ms = seconds * 1000
    if not ms < _MAX_MS + 1:  # also NaN
        raise ValueError("switchml: %s of %r s: want at most %d s" % (name, seconds, _MAX_MS // 1000))
    return max(1, int(ms))


class Session:
    """One rank's membership in a SwitchML job (switchml.Join).

    All ranks must make the same calls in the same order. A Session may be
    shared by threads; its calls run one after another.
    """

    def __init__(self, controller, job, rank, workers, *, bind=None, token=None, lanes=0, window=0,
                 packet_elements=0, join_timeout=None, give_up=None, extended=False, fallback=None,
                 fallback_on_loss=False, fallback_listen=None, fallback_peers=None, transport=None,
                 sparse=False, wire_bits=0):
        enc = lambda s: s.encode() if s else None  # noqa: E731
        if isinstance(fallback_peers, (list, tuple)):
            fallback_peers = ",".join(fallback_peers)
        rank, workers, lanes, window, packet_elements, wire_bits = (
            _int(n, v, _INT32) for n, v in (("rank", rank), ("workers", workers), ("lanes", lanes),
                                            ("window", window), ("packet_elements", packet_elements),
                                            ("wire_bits", wire_bits)))
        cfg = _Config(enc(controller), enc(job), rank, workers, enc(bind), enc(token), lanes, window,
                      packet_elements, _ms(join_timeout, "join_timeout"), _ms(give_up, "give_up"), 1 if extended else 0,
                      enc(fallback), 1 if fallback_on_loss else 0, enc(fallback_listen), enc(fallback_peers),
                      enc(transport), 1 if sparse else 0, wire_bits)
        h = ctypes.c_int64(0)
        l = lib()
        call(l.switchml_join, ctypes.byref(cfg), ctypes.byref(h))
        self.handle = h.value
        self.rank, self.workers = rank, workers

    def allreduce(self, address, count, dtype, timeout=None):
        """Sums count values of dtype at address (memory the caller keeps
        alive for the call) across all ranks, in place. An argument
        beyond its C type (count: int64, address: 64 bits), or a count
        whose bytes run past the address space, raises ValueError, and
        nothing is sent."""
        address = None if address is None else _int("address", address, _UINT64)
        call(lib().switchml_allreduce, self.handle, address, _int("count", count, _INT64),
             _int("dtype", dtype, _INT32), _ms(timeout))

    def fallback(self):
        """Why the session runs over the ring fallback, or None while it
        runs on the switch."""
        on = ctypes.c_int32(0)
        why = ctypes.create_string_buffer(1024)
        call(lib().switchml_fallback, self.handle, ctypes.byref(on), why, len(why))
        return why.value.decode() if on.value else None

    def transport(self):
        """What the lanes move packets through: "udp", "shm" or "afxdp". A
        lane counts as "shm" once it has written into the switch's inbox,
        so ask after an allreduce."""
        out = ctypes.create_string_buffer(16)
        call(lib().switchml_transport, self.handle, out, len(out))
        return out.value.decode()

    def stats(self):
        """The session's counters so far (switchml.Stats): completed
        allreduce calls, packets sent, the bytes of those packets
        (SwitchML headers included), values reduced, and how many of the
        packets were retransmissions (packets - retransmits were sent
        once: what the protocol decides, whatever the load)."""
        v = [ctypes.c_uint64(0) for _ in range(4)]
        call(lib().switchml_stats, self.handle, *[ctypes.byref(x) for x in v])
        out = dict(zip(("allreduces", "packets", "sent_bytes", "elements"), (x.value for x in v)))
        out["retransmits"] = self.counter("retransmits")
        return out

    def counter(self, name):
        """One of the session's counters by name ("packets",
        "retransmits", "timeouts", "sent_bytes", ...: switchml_counter in
        switchml.h). An unknown name raises ValueError listing them."""
        v = ctypes.c_uint64(0)
        call(lib().switchml_counter, self.handle, name.encode(), ctypes.byref(v))
        return v.value

    def wire_bits(self, dtype):
        """The width in bits, 16 or 32, at which values of dtype (the
        library's code, _lib.dtype(name)[0]) travel in this session."""
        bits = ctypes.c_int32(0)
        call(lib().switchml_wire_bits, self.handle, _int("dtype", dtype, _INT32), ctypes.byref(bits))
        return bits.value

    def barrier(self, name, timeout=None):
        call(lib().switchml_barrier, self.handle, name.encode(), _ms(timeout))

    def broadcast_bytes(self, name, root, data, timeout=None):
        """Returns root's bytes on every rank, through the controller (small
        data). data is root's payload on root, a buffer of the same size
        elsewhere (bytes or bytearray)."""
        b = ctypes.create_string_buffer(bytes(data), len(data))
        call(lib().switchml_broadcast, self.handle, name.encode(), _int("root", root, _INT32), ctypes.cast(b, ctypes.c_void_p),
             len(data), _ms(timeout))
        return b.raw

    def close(self):
        h, self.handle = self.handle, 0
        if h:
            call(lib().switchml_close, h)


class LocalSwitch:
    """A software switch and controller running inside this process, on
    loopback (p4/local). `address` is the controller's host:port.
    transport "shm" gives the switch a shared-memory inbox as well, for
    sessions on this host made with transport="shm"."""

    def __init__(self, transport=None):
        h = ctypes.c_int64(0)
        addr = ctypes.create_string_buffer(256)
        l = lib()
        call(l.switchml_local_start_transport, transport.encode() if transport else None, ctypes.byref(h), addr,
             len(addr))
        self.handle, self.address = h.value, addr.value.decode()

    def stop(self):
        h, self.handle = self.handle, 0
        if h:
            call(lib().switchml_local_stop, h)
