# SPDX-License-Identifier: MIT
"""Fixtures for the vLLM tests (run by `make test-vllm` with build/venv-vllm's
python): the kvtier package from this checkout and a private tierd."""
import importlib.util
import os
import sys

import pytest

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KVT_TEST_BIN") or os.path.join(SRC, "build")
os.environ.setdefault("KVTIER_LIB", os.path.join(BIN, "libkvtier.so"))
# vLLM's block hashes are kvtier keys under this seed (the connector checks it)
os.environ.setdefault("PYTHONHASHSEED", "0")
sys.path.insert(0, os.path.join(SRC, "client", "python"))

# the private-tierd helper of the binding's tests
_spec = importlib.util.spec_from_file_location(
    "kvt_binding_conftest", os.path.join(SRC, "tests", "python", "conftest.py"))
_binding = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_binding)
Tierd = _binding.Tierd


@pytest.fixture(scope="module")
def tierd():
    d = Tierd("--warm-bytes", "256M")
    yield d
    assert d.stop() == 0, "tierd did not stop cleanly"
