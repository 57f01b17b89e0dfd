# SPDX-License-Identifier: MIT
"""KvtierConnector with a fault a test arms, for tests/vllm/test_e2e.py:
tierd killed between the scheduler's lookup and the worker's load, inside
a real vLLM step (a file, $KVT_TEST_FAULT_DIR/kill-before-load, holds the
pid to kill; the first load after it appears kills it, once)."""
import os
import signal
import time

from kvtier.vllm_connector import KvtierConnector


def _dead(pid):
    """Whether pid has exited (a zombie counts: its sockets are closed)."""
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] in ("Z", "X")
    except FileNotFoundError:
        return True


class FaultyKvtierConnector(KvtierConnector):
    def start_load_kv(self, forward_context, **kwargs):
        arm = os.path.join(os.environ["KVT_TEST_FAULT_DIR"], "kill-before-load")
        if (self.has_connector_metadata() and self._get_connector_metadata().loads
                and os.path.exists(arm)):
            pid = int(open(arm).read())
            os.remove(arm)
            os.kill(pid, signal.SIGKILL)
            deadline = time.monotonic() + 10
            while not _dead(pid) and time.monotonic() < deadline:
                time.sleep(0.01)
        super().start_load_kv(forward_context, **kwargs)
