# SPDX-License-Identifier: MIT
"""The connector as pip installs it: `pip install ./client/python` (here
--target, with vLLM's venv's pip and setuptools, offline), then vLLM's own
connector factory loads KvtierConnector by kv_connector_module_path from
the installed copy, outside the checkout, KVTIER_LIB unset and
libkvtier.so.0 on LD_LIBRARY_PATH."""
import os
import shutil
import subprocess
import sys

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KVT_TEST_BIN") or os.path.join(SRC, "build")

LOAD = """
import sys
from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
cls = KVConnectorFactory.get_connector_class(KVTransferConfig(
    kv_connector="KvtierConnector", kv_connector_module_path="kvtier.vllm_connector",
    kv_role="kv_both"))
import kvtier
assert kvtier.__file__.startswith(sys.argv[1] + "/"), kvtier.__file__
print(cls.__module__, cls.__name__, kvtier.lib_path)
"""


def test_pip_installed_connector_loads_in_vllm(tmp_path):
    src = tmp_path / "python"          # pip builds in the folder it is given
    shutil.copytree(os.path.join(SRC, "client", "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    target = tmp_path / "site"
    env = {k: v for k, v in os.environ.items()
           if k not in ("KVTIER_LIB", "LD_LIBRARY_PATH", "PYTHONPATH")}
    p = subprocess.run([sys.executable, "-m", "pip", "install", "--no-build-isolation",
                        "--no-deps", "--no-index", "--disable-pip-version-check", "-q",
                        "--target", str(target), str(src)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, "pip install failed:\n" + p.stdout + p.stderr
    env.update(PYTHONPATH=str(target), LD_LIBRARY_PATH=BIN, VLLM_TARGET_DEVICE="cpu")
    p = subprocess.run([sys.executable, "-c", LOAD, str(target)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=300)
    assert p.returncode == 0, "vLLM could not load the installed connector:\n" + p.stderr
    print("\n  " + p.stdout.strip().splitlines()[-1])
    assert p.stdout.split()[-3:] == ["kvtier.vllm_connector", "KvtierConnector",
                                     "libkvtier.so.0"]
