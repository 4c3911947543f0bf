"""Builds libswitchml.so from the Go checkout this directory sits in and
ships it inside the package; no binary is kept in the repository."""
import os
import shutil
import subprocess

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)


class BuildWithGo(build_py):
    def run(self):
        super().run()
        if not os.path.exists(os.path.join(CHECKOUT, "capi", "switchml.h")):
            raise SystemExit("switchml: %s is not a switchml-go checkout (no capi/switchml.h): install from the "
                             "python/ directory of a checkout, e.g. `pip install ./python`" % CHECKOUT)
        go = shutil.which("go") or "/usr/local/go/bin/go"
        if not os.path.exists(go):
            raise SystemExit("switchml: no Go toolchain on PATH (nor /usr/local/go/bin/go): the build runs "
                             "`go build -buildmode=c-shared`; install the Go version go.mod names")
        out = os.path.join(os.path.abspath(self.build_lib), "switchml", "libswitchml.so")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        subprocess.check_call([go, "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./capi"], cwd=CHECKOUT)
        # The header cgo writes beside the library is the build's, not the
        # interface: capi/switchml.h is.
        os.remove(os.path.splitext(out)[0] + ".h")


class PlatformDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithGo}, distclass=PlatformDistribution)
