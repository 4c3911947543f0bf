"""The library's Python binding without torch: every integer it hands
over the C boundary is checked, since ctypes drops the bits of an int
that do not fit its C type without a word (a count of 2**64 + 4 would pass
as 4, an address of 2**64 as NULL)."""
import ctypes
import math
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from switchml import _lib  # noqa: E402

from bounds import error_bound  # noqa: E402


class Lengths(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.switch = _lib.LocalSwitch()
        cls.session = _lib.Session(cls.switch.address, "py-lengths", 0, 1)
        cls.f32, _ = _lib.dtype("float32")

    @classmethod
    def tearDownClass(cls):
        cls.session.close()
        cls.switch.stop()

    def test_out_of_range_is_refused_and_nothing_reduced(self):
        x = (ctypes.c_float * 4)(1, 2, 3, 4)
        addr = ctypes.addressof(x)
        for what, args, kwargs, says in [
            ("a count beyond int64", (addr, 2**64 + 4, self.f32), {}, "count is 18446744073709551620"),
            ("2^62 float32 values, whose bytes wrap", (addr, 2**62, self.f32), {}, "count is 4611686018427387904"),
            ("an address beyond 64 bits", (2**64, 4, self.f32), {}, "address is 18446744073709551616"),
            ("a dtype beyond int32", (addr, 4, 2**32 + self.f32), {}, "dtype is 4294967296"),
            ("a timeout beyond what the library takes", (addr, 4, self.f32), {"timeout": 1e300}, "timeout of 1e+300 s"),
        ]:
            with self.subTest(what):
                with self.assertRaisesRegex(ValueError, re.escape(says)):
                    self.session.allreduce(*args, **kwargs)
        before = self.session.stats()
        self.session.allreduce(addr, 4, self.f32)
        self.assertEqual(list(x), [1, 2, 3, 4])
        self.assertEqual(self.session.stats()["elements"] - before["elements"], 4)
        self.assertEqual(before["allreduces"], 0, "a refused call reduced something")

    def test_config_beyond_int32_is_refused(self):
        for field, value in [("rank", 2**32), ("workers", 2**32 + 1), ("lanes", -2**31 - 1), ("window", 2**40)]:
            with self.subTest(field):
                kwargs = {"rank": 0, "workers": 1, field: value}
                with self.assertRaisesRegex(ValueError, "%s is %d" % (field, value)):
                    _lib.Session(self.switch.address, "py-config-" + field, **kwargs)
        with self.assertRaisesRegex(ValueError, re.escape("join_timeout of 1e+300 s")):
            _lib.Session(self.switch.address, "py-config-timeout", 0, 1, join_timeout=1e300)

    def test_broadcast_root_beyond_int32_is_refused(self):
        with self.assertRaisesRegex(ValueError, "root is 4294967296"):
            self.session.broadcast_bytes("b", 2**32, b"data")



class WireWidth(unittest.TestCase):
    """switchml_config.wire_bits through the binding: the width each dtype
    travels at, a float32 sum at 16 bits, and the widths refused."""

    @classmethod
    def setUpClass(cls):
        cls.switch = _lib.LocalSwitch()
        cls.codes = {name: _lib.dtype(name)[0] for name in ("float32", "float16", "bfloat16", "int32")}

    @classmethod
    def tearDownClass(cls):
        cls.switch.stop()

    def widths(self, session):
        return {name: session.wire_bits(code) for name, code in self.codes.items()}

    def test_default_and_16_bits(self):
        s = _lib.Session(self.switch.address, "py-wire-default", 0, 1)
        try:
            self.assertEqual(self.widths(s), {"float32": 32, "float16": 16, "bfloat16": 16, "int32": 32})
        finally:
            s.close()
        s = _lib.Session(self.switch.address, "py-wire-16", 0, 1, wire_bits=16)
        try:
            self.assertEqual(self.widths(s), {"float32": 16, "float16": 16, "bfloat16": 16, "int32": 32})
            # One rank's sum is its input, as 16-bit fixed point gives it
            # back: within the 16-bit bound, beyond the 32-bit one.
            vals = [math.sin(i) * 0.99 for i in range(5000)]
            x = (ctypes.c_float * len(vals))(*vals)
            exact = x[:]
            s.allreduce(ctypes.addressof(x), len(vals), self.codes["float32"])
            e = math.frexp(max(abs(v) for v in exact))[1]  # 2^e above every input
            worst = max(abs(a - b) for a, b in zip(x, exact))
            self.assertLessEqual(worst, error_bound(1, e, 16))
            self.assertGreater(worst, error_bound(1, e, 32), "float32 came back as from the 32-bit wire")
            self.assertEqual(s.stats()["elements"], len(vals))
        finally:
            s.close()
        s = _lib.Session(self.switch.address, "py-wire-32", 0, 1, wire_bits=32)
        try:
            self.assertEqual(self.widths(s), {"float32": 32, "float16": 32, "bfloat16": 32, "int32": 32})
        finally:
            s.close()

    def test_refused(self):
        with self.assertRaisesRegex(_lib.ConfigError, "WireBits = 8"):
            _lib.Session(self.switch.address, "py-wire-8", 0, 1, wire_bits=8)
        with self.assertRaisesRegex(ValueError, "wire_bits is 4294967312"):
            _lib.Session(self.switch.address, "py-wire-huge", 0, 1, wire_bits=2**32 + 16)

    def test_counters(self):
        s = _lib.Session(self.switch.address, "py-counters", 0, 1)
        try:
            x = (ctypes.c_int32 * 1000)(*range(1000))
            s.allreduce(ctypes.addressof(x), 1000, self.codes["int32"])
            st = s.stats()
            self.assertEqual(s.counter("packets"), st["packets"])
            self.assertEqual(s.counter("elements"), 1000)
            self.assertLessEqual(st["retransmits"], st["packets"])
            with self.assertRaisesRegex(ValueError, r'"bytes".*retransmits'):
                s.counter("bytes")
        finally:
            s.close()


if __name__ == "__main__":
    unittest.main()
