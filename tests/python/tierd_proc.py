# SPDX-License-Identifier: MIT
"""A private tierd for the Python tests and the vLLM bench: its socket and
data folder in a temp dir of its own, started, stopped, restarted on the
same data. No pytest here: bench_vllm.py runs without it.

KVT_TEST_BIN names the folder with tierd (default: the checkout's build/).
"""
import os
import shutil
import signal
import subprocess
import tempfile
import time

SRC = os.path.abspath(os.path.join(os.path.dirname(__file__), "..", ".."))
BIN = os.environ.get("KVT_TEST_BIN") or os.path.join(SRC, "build")


class Tierd:
    """tierd --cold-bytes 64M --warm-bytes 64M ARGS... (a later flag wins),
    in a temp dir under parent (default: TMPDIR), up within start_s."""

    def __init__(self, *args, parent=None, start_s=10):
        self.dir = tempfile.mkdtemp(prefix="kvt-tierd-", dir=parent)
        self.sock = os.path.join(self.dir, "tierd.sock")
        self.args = list(args)
        self.start_s = start_s
        self.proc = None
        self.start()

    def start(self):
        import kvtier
        cmd = [os.path.join(BIN, "tierd"), "--socket", self.sock,
               "--data", os.path.join(self.dir, "data"), "--cold-bytes", "64M",
               "--warm-bytes", "64M"] + self.args
        err = None if os.environ.get("KVT_TEST_VERBOSE") else subprocess.DEVNULL
        self.proc = subprocess.Popen(cmd, stderr=err)
        deadline = time.monotonic() + self.start_s
        while time.monotonic() < deadline:
            try:
                kvtier.Client(self.sock).close()
                return
            except kvtier.KvtierError:
                if self.proc.poll() is not None:
                    rc, self.proc = self.proc.returncode, None
                    raise RuntimeError("tierd exited at start with status %d" % rc)
                time.sleep(0.01)
        self.proc.kill()
        self.proc.wait()
        self.proc = None
        raise RuntimeError("tierd did not accept connections within %g s" % self.start_s)

    def kill(self, sig=signal.SIGTERM):
        """Stop tierd by sig (SIGTERM: a clean stop), keeping its data folder
        for start() to run it on again. Returns its exit status (-sig when
        the signal killed it)."""
        if self.proc is None:
            return 0
        self.proc.send_signal(sig)
        try:
            rc = self.proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            rc = self.proc.wait()
        self.proc = None
        return rc

    def stop(self):
        """kill(), then remove the data folder."""
        rc = self.kill()
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc

    def stats(self):
        import kvtier
        with kvtier.Client(self.sock) as c:
            return c.stats()
