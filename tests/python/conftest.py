# SPDX-License-Identifier: MIT
"""pytest fixtures for the Python binding: a private tierd for the session.

KVT_TEST_BIN names the folder with tierd and libkvtier.so (default: the
checkout's build/); KVT_TEST_ATTACH=<socket> uses a tierd already running.
"""
import os
import sys

import pytest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KVT_TEST_BIN") or os.path.join(SRC, "build")
os.environ.setdefault("KVTIER_LIB", os.path.join(BIN, "libkvtier.so"))
sys.path.insert(0, os.path.join(SRC, "client", "python"))
sys.path.insert(0, os.path.join(SRC, "tests"))       # hash_ref.py
sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import kvtier  # noqa: E402
from tierd_proc import Tierd  # noqa: E402,F401 (the vLLM tests' conftest takes it from here)


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
