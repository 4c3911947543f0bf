"""Builds libswitchml.so from the Go checkout this directory sits in and
ships it inside the package; no binary is kept in the repository.

The build is cached: a library built from the same Go sources by the same
toolchain is reused (~/.cache/switchml/libswitchml/KEY, KEY a hash of
every non-standard package ./capi builds from, of go.mod and go.sum and of
`go version` and `go env`), so that installing again, into another venv or
after a change to the Python code, takes seconds rather than minutes.
SWITCHML_BUILD_CACHE names another folder; SWITCHML_BUILD_CACHE=off
builds every time."""
import hashlib
import json
import os
import shutil
import subprocess
import tempfile

from setuptools import setup
from setuptools.command.build_py import build_py
from setuptools.dist import Distribution

HERE = os.path.dirname(os.path.abspath(__file__))
CHECKOUT = os.path.dirname(HERE)


def _go():
    go = shutil.which("go") or "/usr/local/go/bin/go"
    if not os.path.exists(go):
        raise SystemExit("switchml: no Go toolchain on PATH (nor /usr/local/go/bin/go): the build runs "
                         "`go build -buildmode=c-shared`; install the Go version go.mod names")
    return go


def _cache_dir():
    where = os.environ.get("SWITCHML_BUILD_CACHE", "")
    if where.lower() in ("off", "0", "no"):
        return None
    return where or os.path.join(os.path.expanduser("~"), ".cache", "switchml", "libswitchml")


def _source_key(go):
    """A hash of what the library is built from: the files of every
    non-standard package ./capi depends on (itself included), go.mod,
    go.sum, and the toolchain and its settings."""
    h = hashlib.sha256()
    env = subprocess.check_output([go, "env", "-json"], cwd=CHECKOUT)
    settings = json.loads(env)
    for k in ("GOVERSION", "GOOS", "GOARCH", "GOAMD64", "GOARM64", "CC", "CGO_ENABLED", "CGO_CFLAGS",
              "CGO_LDFLAGS", "GOFLAGS", "GOEXPERIMENT"):
        h.update(("%s=%s\n" % (k, settings.get(k, ""))).encode())
    listing = subprocess.check_output(
        [go, "list", "-deps", "-f",
         "{{if not .Standard}}{{.Dir}}\t{{join .GoFiles \" \"}} {{join .CgoFiles \" \"}} {{join .HFiles \" \"}} "
         "{{join .CFiles \" \"}} {{join .EmbedFiles \" \"}}{{end}}", "./capi"], cwd=CHECKOUT).decode()
    files = [os.path.join(CHECKOUT, "go.mod"), os.path.join(CHECKOUT, "go.sum")]
    for line in listing.splitlines():
        if not line.strip():
            continue
        d, _, names = line.partition("\t")
        files += [os.path.join(d, n) for n in names.split()]
    for f in sorted(set(files)):
        if os.path.exists(f):
            h.update(f.encode() + b"\0")
            with open(f, "rb") as fh:
                h.update(hashlib.sha256(fh.read()).digest())
    return h.hexdigest()[:32]


def _build(go, out):
    subprocess.check_call([go, "build", "-buildmode=c-shared", "-trimpath", "-o", out, "./capi"], cwd=CHECKOUT)
    # The header cgo writes beside the library is the build's, not the
    # interface: capi/switchml.h is.
    os.remove(os.path.splitext(out)[0] + ".h")


class BuildWithGo(build_py):
    def run(self):
        super().run()
        if not os.path.exists(os.path.join(CHECKOUT, "capi", "switchml.h")):
            raise SystemExit("switchml: %s is not a switchml-go checkout (no capi/switchml.h): install from the "
                             "python/ directory of a checkout, e.g. `pip install ./python`" % CHECKOUT)
        go = _go()
        out = os.path.join(os.path.abspath(self.build_lib), "switchml", "libswitchml.so")
        os.makedirs(os.path.dirname(out), exist_ok=True)
        cache = _cache_dir()
        if cache is None:
            _build(go, out)
            return
        cached = os.path.join(cache, _source_key(go), "libswitchml.so")
        if os.path.exists(cached):
            print("switchml: reusing %s (built from the same sources)" % cached)
        else:
            os.makedirs(os.path.dirname(cached), exist_ok=True)
            # Built under a temporary name and renamed once complete: a
            # build cut short never passes for a cached one.
            tmp = tempfile.mkdtemp(prefix="build-", dir=os.path.dirname(cached))
            try:
                _build(go, os.path.join(tmp, "libswitchml.so"))
                os.replace(os.path.join(tmp, "libswitchml.so"), cached)
            finally:
                shutil.rmtree(tmp, ignore_errors=True)
        shutil.copyfile(cached, out)


class PlatformDistribution(Distribution):
    """The wheel holds a native library: tag it for this platform."""

    def has_ext_modules(self):
        return True


setup(cmdclass={"build_py": BuildWithGo}, distclass=PlatformDistribution)
