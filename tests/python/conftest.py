# SPDX-License-Identifier: MIT
"""pytest fixtures for the Python binding: a private tierd for the session.

KVT_TEST_BIN names the folder with tierd and libkvtier.so (default: the
checkout's build/); KVT_TEST_ATTACH=<socket> uses a tierd already running.
"""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time

import pytest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KVT_TEST_BIN") or os.path.join(SRC, "build")
os.environ.setdefault("KVTIER_LIB", os.path.join(BIN, "libkvtier.so"))
sys.path.insert(0, os.path.join(SRC, "client", "python"))
sys.path.insert(0, os.path.join(SRC, "tests"))       # hash_ref.py

import kvtier  # noqa: E402


class Tierd:
    """A tierd of our own: socket and data folder in a temp dir."""

    def __init__(self, *args):
        self.dir = tempfile.mkdtemp(prefix="kvt-pytest-")
        self.sock = os.path.join(self.dir, "tierd.sock")
        self.args = list(args)
        self.proc = None
        self.start()

    def start(self):
        cmd = [os.path.join(BIN, "tierd"), "--socket", self.sock,
               "--data", os.path.join(self.dir, "data"), "--cold-bytes", "64M",
               "--warm-bytes", "64M"] + self.args
        err = None if os.environ.get("KVT_TEST_VERBOSE") else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stderr=err)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            try:
                kvtier.Client(self.sock).close()
                return
            except kvtier.KvtierError:
                if self.proc.poll() is not None:
                    raise RuntimeError("tierd exited at start with status %d"
                                       % self.proc.returncode)
                time.sleep(0.01)
        self.proc.kill()
        raise RuntimeError("tierd did not accept connections within 10 s")

    def kill(self, sig=signal.SIGTERM):
        """Stop tierd by sig (SIGTERM: a clean stop), keeping its data folder
        for start() to run it on again. Returns its exit status (-sig when
        the signal killed it)."""
        if self.proc is None:
            return 0
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc

    def stop(self):
        rc = self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


@pytest.fixture(scope="session")
def tierd():
    attach = os.environ.get("KVT_TEST_ATTACH")
    if attach:
        class Outside:
            sock = attach
        yield Outside()
        return
    d = Tierd()
    yield d
    rc = d.stop()
    assert rc == 0, "tierd exit status: expected 0 (clean stop), got %d" % rc


@pytest.fixture
def client(tierd):
    c = kvtier.Client(tierd.sock)
    yield c
    c.close()


_ns_seq = [0]


@pytest.fixture
def ns_factory(client, request):
    """Open a namespace private to the calling test (its own model id)."""
    def make(block_bytes, block_tokens=16, suffix=""):
        _ns_seq[0] += 1
        mid = "pytest/%s/%d%s" % (request.node.name[:80], _ns_seq[0], suffix)
        return client.ns_open(mid, "bf16", "test", block_tokens, block_bytes)
    return make
