# SPDX-License-Identifier: MIT
"""The kvtier package as pip installs it (client/python/pyproject.toml), and
how it finds libkvtier: $KVTIER_LIB first (one that does not load is an
ImportError naming it), then libkvtier.so.0 on the loader's search path,
then the build/ of the checkout it sits in. Each case runs in a child
process started outside the checkout, with the environment it names."""
import os
import re
import shutil
import subprocess
import sys

import pytest

import kvtier
from conftest import BIN, SRC

SYSTEM_PYTHON = "/usr/bin/python3"

# what a child reports: the package it imported, the name or path
# kvtier.lib_path says it loaded libkvtier by, and the file mapped
PROBE = """
import kvtier
maps = {l.split()[-1] for l in open("/proc/self/maps") if "libkvtier" in l}
print(kvtier.__file__)
print(kvtier.lib_path)
print(" ".join(sorted(maps)))
"""


def child_env(**env_set):
    """os.environ without KVTIER_LIB, LD_LIBRARY_PATH and PYTHONPATH, plus
    env_set."""
    env = {k: v for k, v in os.environ.items()
           if k not in ("KVTIER_LIB", "LD_LIBRARY_PATH", "PYTHONPATH")}
    env.update(env_set)
    return env


def run_py(python, code, env, cwd, *args):
    return subprocess.run([python, "-c", code] + list(args), env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=60)


def probe(env, cwd):
    """(package file, lib_path, mapped libkvtier) of a child importing kvtier
    from this checkout."""
    env = dict(env, PYTHONPATH=os.path.join(SRC, "client", "python"))
    p = run_py(sys.executable, PROBE, env, cwd)
    assert p.returncode == 0, "the child failed:\n" + p.stderr
    return p.stdout.splitlines()[:3]


def built_lib():
    return os.path.realpath(os.path.join(BIN, kvtier.SONAME))


def test_version_is_the_library_version():
    mk = open(os.path.join(SRC, "Makefile")).read()
    want = re.search(r"^VERSION\s*:=\s*(\S+)", mk, re.M).group(1)
    assert kvtier.__version__ == want, "kvtier.__version__ %s, the Makefile's VERSION %s" \
        % (kvtier.__version__, want)
    assert kvtier.SONAME == "libkvtier.so." + want.split(".")[0]


def test_kvtier_lib_wins_then_the_loader_path(tmp_path):
    """A copy of libkvtier.so.0 on LD_LIBRARY_PATH stands for an installed
    one: KVTIER_LIB is taken over it, and it over the checkout's build/."""
    libdir = tmp_path / "lib"
    libdir.mkdir()
    shutil.copy(built_lib(), libdir / kvtier.SONAME)
    explicit = os.path.join(BIN, "libkvtier.so")
    _, path, mapped = probe(child_env(KVTIER_LIB=explicit, LD_LIBRARY_PATH=str(libdir)),
                            tmp_path)
    assert (path, mapped) == (explicit, built_lib())
    _, path, mapped = probe(child_env(LD_LIBRARY_PATH=str(libdir)), tmp_path)
    assert (path, mapped) == (kvtier.SONAME, str(libdir / kvtier.SONAME))


def test_the_checkout_build_comes_last(tmp_path):
    env = child_env()
    if run_py(sys.executable, "import ctypes; ctypes.CDLL(%r)" % kvtier.SONAME, env,
              tmp_path).returncode == 0:
        pytest.skip("%s is installed on this machine: it comes before the checkout's"
                    % kvtier.SONAME)
    checkout = os.path.join(SRC, "build", kvtier.SONAME)
    if not os.path.exists(checkout):
        pytest.skip("no %s in this checkout (KVT_TEST_BIN names another build)" % checkout)
    _, path, mapped = probe(env, tmp_path)
    assert (path, mapped) == (checkout, os.path.realpath(checkout))


@pytest.mark.parametrize("what", ["missing", "not a library"])
def test_a_bad_kvtier_lib_is_an_error_naming_it(tmp_path, what):
    bad = tmp_path / "libkvtier-bad.so"
    if what == "not a library":
        bad.write_text("not an ELF file\n")
    p = run_py(sys.executable, "import kvtier", dict(
        child_env(KVTIER_LIB=str(bad), LD_LIBRARY_PATH=BIN),
        PYTHONPATH=os.path.join(SRC, "client", "python")), tmp_path)
    assert p.returncode != 0, "a bad KVTIER_LIB must not fall back to another library"
    assert "ImportError: kvtier: KVTIER_LIB=%s does not load" % bad in p.stderr, p.stderr


# run in the venv: the installed package, its connector module and its
# metadata, then a put and a get through tierd (argv[1]: its socket)
PUT_GET = """
import importlib.metadata, importlib.util, sys
import kvtier
assert kvtier.__file__.startswith(sys.prefix + "/"), kvtier.__file__
conn = importlib.util.find_spec("kvtier.vllm_connector")
assert conn and conn.origin.startswith(sys.prefix + "/"), conn
assert importlib.metadata.version("kvtier") == kvtier.__version__
with kvtier.Client(sys.argv[1]) as c:
    ns = c.ns_open("pytest/pip-install", "bf16", "test", 16, 4096)
    keys = kvtier.hash_prompt(range(32), 16, seed="pip-install")
    blocks = [bytes([i]) * 4096 for i in (1, 2)]
    ns.put(keys, blocks)
    assert ns.get(keys) == blocks, "put/get through the installed package"
print(kvtier.lib_path)
"""


def test_pip_install_into_a_venv(tmp_path, tierd):
    """pip install --no-build-isolation --no-deps of client/python (offline:
    the venv sees the system's setuptools) into a fresh venv; then, from
    outside the checkout, KVTIER_LIB unset, libkvtier.so.0 found on
    LD_LIBRARY_PATH. The package is copied first, as pip builds in the
    folder it is given (build/, kvtier.egg-info)."""
    if not os.access(SYSTEM_PYTHON, os.X_OK) or any(subprocess.run(
            [SYSTEM_PYTHON] + args, capture_output=True).returncode != 0 for args in (
                ["-c", "import setuptools, venv"], ["-m", "pip", "--version"])):
        pytest.skip("%s has no venv, pip or setuptools" % SYSTEM_PYTHON)
    src = tmp_path / "python"
    shutil.copytree(os.path.join(SRC, "client", "python"), src,
                    ignore=shutil.ignore_patterns("__pycache__", "build", "*.egg-info"))
    venv = tmp_path / "venv"
    subprocess.run([SYSTEM_PYTHON, "-m", "venv", "--system-site-packages", "--without-pip",
                    str(venv)], check=True, timeout=60)
    py = str(venv / "bin" / "python")
    env = child_env(PIP_DISABLE_PIP_VERSION_CHECK="1", PIP_NO_INPUT="1")
    p = subprocess.run([py, "-m", "pip", "install", "--no-build-isolation", "--no-deps",
                        "--no-index", "-q", str(src)], env=env, cwd=tmp_path,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, "pip install failed:\n" + p.stdout + p.stderr
    p = run_py(py, PUT_GET, child_env(LD_LIBRARY_PATH=BIN), tmp_path, tierd.sock)
    assert p.returncode == 0, "the installed package failed:\n" + p.stderr
    assert p.stdout.split() == [kvtier.SONAME]
