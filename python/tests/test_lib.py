"""The library's Python binding without torch: every integer it hands
over the C boundary is checked, since ctypes drops the bits of an int
that do not fit its C type without a word (a count of 2**64 + 4 would pass
as 4, an address of 2**64 as NULL)."""
import ctypes
import os
import re
import sys
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.dirname(HERE))

from switchml import _lib  # noqa: E402


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


if __name__ == "__main__":
    unittest.main()
