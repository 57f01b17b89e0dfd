# SPDX-License-Identifier: MIT
"""The asynchronous mode on a host cache (vLLM's CPU build): a hit held in
tierd's RAM is loaded in the step (a memory copy by the CPU that runs the
model: on a thread it would overlap nothing and cost the request a step),
a hit on disk goes to the loader thread, and saves are fenced before the
next forward pass, so a finished request's blocks are freed at once."""
import signal
from types import SimpleNamespace

import pytest
import torch

import kvtier
from kvtier import vllm_connector as vc

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.request import RequestStatus

from test_vllm_modules import BS, Blocks, cpu_cache, fake_config, fake_kv_cache_config, \
    prompt, vllm_request, none_hash  # noqa: F401 (none_hash: the module's autouse fixture)
from test_vllm_modules import pair as modules_pair
from test_vllm_async import Gate, fence_holds, prefill, step, until


def host_pair(sock, kv, **extra):
    """An asynchronous scheduler and worker of vLLM's CPU build."""
    return modules_pair(sock, kv, asynchronous=True, device="cpu", **extra)


def test_a_finished_requests_blocks_are_freed_at_once_behind_the_fence(tierd):
    """A's save is still queued when A finishes: its blocks are freed at
    once (request_finished False), and the next step's handle_preemptions,
    which vLLM calls before anything of that step writes KV, returns only
    once the save is done; blocks reused after it do not change what was
    stored."""
    kv_a, kv_b = cpu_cache(16), cpu_cache(16, fill=0)
    sa, wa = host_pair(tierd.sock, kv_a)
    toks = prompt(5 * BS + 7, 91)
    req = vllm_request(toks, "a")
    ids_a = [9, 3, 12, 4, 1, 7]
    want = {n: t[ids_a].clone() for n, t in kv_a.items()}
    meta = prefill(sa, req, ids_a)
    assert len(meta.saves) == 1
    # the step, with A's save queued behind a job that holds the saver
    wa.bind_connector_metadata(meta)
    wa.handle_preemptions(meta)
    wa.start_load_kv(None)
    gate = Gate(wa._saver, "other")
    wa.wait_for_save()
    assert wa.get_finished(set()) == (None, None)
    wa.clear_connector_metadata()
    assert wa._saver.busy("a")
    req.status = RequestStatus.FINISHED_STOPPED
    assert sa.request_finished(req, ids_a) == (False, None), "fenced: freed at once"
    meta = sa.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    assert meta.finished == []
    fence_holds(wa, meta, gate, "a")
    for tns in kv_a.values():                # vLLM reuses A's blocks
        tns[ids_a] = -1.0

    sb, wb = host_pair(tierd.sock, kv_b)
    req_b = vllm_request(toks + [1, 2, 3], "b")
    assert sb.get_num_new_matched_tokens(req_b, BS) == (4 * BS, False), \
        "a hit in tierd's RAM is loaded in the step"
    ids_b = [2, 5, 6, 8, 10, 11]
    sb.update_state_after_alloc(req_b, Blocks(ids_b), 4 * BS)
    sb._kv_cache_manager = SimpleNamespace(get_block_ids=lambda rid: (ids_b,))
    meta = sb.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"b": 4}))
    assert len(meta.loads) == 1 and not meta.loads[0].on_thread
    # one step, and the blocks are there: nothing is reported, nothing waits
    assert step(wb, meta) == (set(), set(), set())
    for name in kv_a:
        for i, blk_b in enumerate(ids_b[1:5], start=1):
            assert torch.equal(want[name][i], kv_b[name][blk_b])
        assert not kv_b[name][ids_b[0]].any()        # the local block: untouched
    assert not wb._loader.busy("b") and wb._loader.collect() == []
    assert sb._tierd.client.stats()["leases_active"] == 0, "the load released the pin"
    req_b.status = RequestStatus.FINISHED_STOPPED
    assert sb.request_finished(req_b, ids_b) == (False, None)
    for c in (sa, wa, sb, wb):
        c.shutdown()


def test_a_hit_on_disk_is_loaded_on_the_thread():
    """Blocks only on disk (tierd restarted, warm empty): the load waits on
    the disk, not on this CPU, so it goes to the loader thread and the
    request waits for it (vLLM's WAITING_FOR_REMOTE_KVS), byte for byte."""
    from conftest import Tierd
    d = Tierd()
    kv, kv2 = cpu_cache(8), cpu_cache(8, fill=0)
    s, w = host_pair(d.sock, kv, reconnect_ms=50)
    toks = prompt(4 * BS + 1, 92)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    w._tierd.ns[0].offload(keys, w._layout, [0, 1, 2, 3])
    w._tierd.client.flush()
    for c in (s, w):
        c.shutdown()
    assert d.kill(signal.SIGTERM) == 0
    d.start()
    s, w = host_pair(d.sock, kv2)
    req = vllm_request(toks, "c")
    assert s.get_num_new_matched_tokens(req, 0) == (4 * BS, True), "on disk: on the thread"
    s.update_state_after_alloc(req, Blocks([4, 5, 6, 7, 0]), 4 * BS)
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    assert meta.loads[0].on_thread
    assert until(w, lambda snd, r, e: r, meta) == [set(), {"c"}, set()]
    for name in kv:
        for src, dst in zip([0, 1, 2, 3], [4, 5, 6, 7]):
            assert torch.equal(kv[name][src], kv2[name][dst])
    for c in (s, w):
        c.shutdown()
    assert d.stop() == 0


def test_async_loads_always_sends_a_ram_hit_to_the_thread(tierd):
    kv = cpu_cache(8)
    s, w = host_pair(tierd.sock, kv, async_loads="always")
    toks = prompt(3 * BS + 1, 93)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    w._tierd.ns[0].offload(keys, w._layout, [0, 1, 2])
    assert s.get_num_new_matched_tokens(vllm_request(toks, "x"), 0) == (3 * BS, True)
    for c in (s, w):
        c.shutdown()


def test_a_device_cache_holds_a_finished_requests_blocks_for_its_saves(tierd):
    """Without the fence (a CUDA cache: the config's device is not "cpu"),
    request_finished still holds the blocks while a save is out."""
    cfg, kcc = fake_config(tierd.sock, asynchronous=True, device="cuda"), fake_kv_cache_config()
    s = vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc)
    assert not s._fenced and not s._loads_auto
    req = vllm_request(prompt(2 * BS + 1, 94), "g")
    s.get_num_new_matched_tokens(req, 0)
    s._kv_cache_manager = SimpleNamespace(get_block_ids=lambda rid: ([1, 2, 3],))
    s.update_state_after_alloc(req, Blocks([1, 2, 3]), 0)
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"g": 2 * BS + 1}))
    assert len(meta.saves) == 1
    req.status = RequestStatus.FINISHED_STOPPED
    assert s.request_finished(req, [1, 2, 3]) == (True, None)
    s.shutdown()


def test_async_loads_must_be_auto_or_always(tierd):
    cfg = fake_config(tierd.sock, asynchronous=True, device="cpu", async_loads="never")
    with pytest.raises(vc.KvtierConfigError, match='"async_loads" is "auto" or "always"'):
        vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, fake_kv_cache_config())
