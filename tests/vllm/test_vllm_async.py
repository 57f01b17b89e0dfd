# SPDX-License-Identifier: MIT
"""The connector's asynchronous mode (issue 16, part 1) against vLLM's own
modules, without a forward pass: a hit is loaded beside the step and
reported through get_finished; saves run after wait_for_save has returned,
and a finished request's blocks are held (request_finished True) until
every save of it is done; a preempted request's saves end before the next
step may write into its freed blocks. Gates (jobs that block on an event)
hold the worker's threads where a test needs a transfer still running."""
import threading
import time
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

WAIT_S = 30


def pair(sock, kv, **extra):
    """An asynchronous scheduler and worker, the worker on cache kv."""
    return modules_pair(sock, kv, asynchronous=True, **extra)


def step(w, meta, finished=()):
    """One worker step as vLLM's model runner drives it: bind, preemptions,
    loads, saves, then what has finished. Returns (sending, recving,
    load errors)."""
    w.bind_connector_metadata(meta)
    w.handle_preemptions(meta)
    w.start_load_kv(None)
    w.wait_for_save()
    sending, recving = w.get_finished(set(finished))
    errs = w.get_block_ids_with_load_errors()
    w.clear_connector_metadata()
    return sending or set(), recving or set(), errs


def until(w, what, meta=None):
    """Steps (with empty metadata after the first) until what(sending,
    recving, errs) holds: its last (sending, recving, errs), summed."""
    total = [set(), set(), set()]
    deadline = time.monotonic() + WAIT_S
    meta = meta or vc.KvtierConnectorMetadata()
    while True:
        for t, got in zip(total, step(w, meta)):
            t.update(got)
        if what(*total):
            return total
        assert time.monotonic() < deadline, "no completion within %d s: %r" % (WAIT_S, total)
        meta = vc.KvtierConnectorMetadata()
        time.sleep(0.01)


def store(w, toks, ids):
    """Store the leading blocks of prompt toks in tierd from worker w's cache
    blocks ids, through its own connection once its loader is idle; returns
    the prompt's keys."""
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    w._loader.wait()
    w._tierd.ns[0].offload(keys[:len(ids)], w._layout, ids)
    return keys


def prefill(s, req, ids, **output):
    """req, a miss, gets engine blocks ids and is scheduled whole: that
    step's metadata (output: more of the SchedulerOutput's fields)."""
    assert s.get_num_new_matched_tokens(req, 0) == (0, False)   # no hit: not async
    s._kv_cache_manager = SimpleNamespace(get_block_ids=lambda rid: (ids,))
    s.update_state_after_alloc(req, Blocks(ids), 0)
    return s.build_connector_meta(SimpleNamespace(
        num_scheduled_tokens={req.request_id: req.num_tokens}, **output))


class Gate:
    """A job that holds a mover's thread until opened."""

    def __init__(self, mover, req_id):
        self.entered, self.go = threading.Event(), threading.Event()

        def job(tierd, stream):
            self.entered.set()
            self.go.wait(WAIT_S)
        mover.submit(req_id, job)
        assert self.entered.wait(WAIT_S)

    def open(self):
        self.go.set()


def fence_holds(w, meta, gate, req_id):
    """The step of meta on worker w: its handle_preemptions returns only once
    gate (holding req_id's save behind it) is opened and that save is done."""
    w.bind_connector_metadata(meta)
    done = threading.Event()
    t = threading.Thread(target=lambda: (w.handle_preemptions(meta), done.set()))
    t.start()
    assert not done.wait(0.3), "handle_preemptions returned with %s's save queued" % req_id
    gate.open()
    assert done.wait(WAIT_S)
    t.join()
    assert not w._saver.busy(req_id)
    w.clear_connector_metadata()


def test_async_round_trip(tierd):
    """A saves a prompt asynchronously, its finished request's blocks are
    held until the save is done; B's hit is asynchronous, loaded beside the
    step, reported once, byte for byte."""
    kv_a, kv_b = cpu_cache(16), cpu_cache(16, fill=0)
    sa, wa = pair(tierd.sock, kv_a)
    toks = prompt(5 * BS + 7, 31)
    req = vllm_request(toks, "a")
    ids_a = [9, 3, 12, 4, 1, 7]
    meta = prefill(sa, req, ids_a)
    assert len(meta.saves) == 1 and meta.finished == [] and meta.preempted == []
    # the save runs after the step: hold the saver so that it is still queued
    gate = Gate(wa._saver, "other")
    sending, recving, errs = step(wa, meta)
    assert (sending, recving, errs) == (set(), set(), set())
    assert wa._saver.busy("a"), "the save is behind the gate, the step went on"
    req.status = RequestStatus.FINISHED_STOPPED
    assert sa.request_finished(req, ids_a) == (True, None), "blocks held for the save"
    meta = sa.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    assert meta.finished == ["a"] and meta.saves == []
    sending, _, _ = step(wa, meta, finished={"a"})
    assert sending == set(), "reported before its save was done"
    gate.open()
    sending, _, _ = until(wa, lambda s, r, e: s)
    assert sending == {"a"}
    assert sa.build_connector_meta(SimpleNamespace(num_scheduled_tokens={})).finished == []

    sb, wb = pair(tierd.sock, kv_b)
    req_b = vllm_request(toks + [1, 2, 3], "b")
    assert sb.get_num_new_matched_tokens(req_b, BS) == (4 * BS, True)
    ids_b = [2, 5, 6, 8, 10, 11]
    sb.update_state_after_alloc(req_b, Blocks(ids_b), 4 * BS)
    sb._kv_cache_manager = SimpleNamespace(get_block_ids=lambda rid: (ids_b,))
    meta = sb.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    assert len(meta.loads) == 1 and meta.loads[0].block_ids == ids_b[1:5]
    sending, recving, errs = until(wb, lambda s, r, e: r, meta)
    assert (sending, recving, errs) == (set(), {"b"}, set())
    for name in kv_a:
        for blk_a, blk_b in zip(ids_a[1:5], ids_b[1:5]):
            assert torch.equal(kv_a[name][blk_a], kv_b[name][blk_b])
        assert not kv_b[name][ids_b[0]].any()        # the local block: untouched
    assert sb._tierd.client.stats()["leases_active"] == 0, "the loader released the pin"
    # reported once: the next steps have nothing
    assert step(wb, vc.KvtierConnectorMetadata()) == (set(), set(), set())
    # after the load, vLLM allocates the rest with nothing external
    sb.update_state_after_alloc(req_b, Blocks(ids_b), 0)
    req_b.status = RequestStatus.FINISHED_STOPPED
    assert sb.request_finished(req_b, ids_b) == (False, None), "no save: freed at once"
    for c in (sa, wa, sb, wb):
        c.shutdown()


def test_async_load_errors_come_with_the_completion(tierd):
    """Blocks kvtier no longer holds at the load are reported as load errors
    in the same step as the request's completion, no later (vLLM's
    contract), so vLLM recomputes them."""
    kv = cpu_cache(8)
    s, w = pair(tierd.sock, kv)
    toks = prompt(3 * BS + 1, 34)
    keys = store(w, toks, [0, 1])
    gate = Gate(w._loader, "other")
    meta = vc.KvtierConnectorMetadata(loads=[vc._Load("x", keys, [4, 5, 6])])
    assert step(w, meta) == (set(), set(), set()), "behind the gate: not done"
    gate.open()
    total = until(w, lambda snd, r, e: r)
    assert total == [set(), {"x"}, {6}]
    for c in (s, w):
        c.shutdown()


def test_async_tierd_away_is_a_failed_load_not_a_hang():
    """tierd gone between the lookup and the load: the load completes,
    failed, all its blocks reported, and saves are skipped; nothing
    waits."""
    from conftest import Tierd
    d = Tierd()
    kv = cpu_cache(8)
    s, w = pair(d.sock, kv, reconnect_ms=0)
    toks = prompt(3 * BS + 1, 35)
    keys = store(w, toks, [0, 1, 2])
    req = vllm_request(toks, "gone")
    assert s.get_num_new_matched_tokens(req, 0) == (3 * BS, True)
    s.update_state_after_alloc(req, Blocks([4, 5, 6, 7]), 3 * BS)
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    d.kill()
    meta.saves.append(vc._Save("r2", None, keys, [0, 1, 2]))
    total = until(w, lambda snd, r, e: r, meta)
    assert total[1:] == [{"gone"}, {4, 5, 6}]
    w._saver.wait()                       # the save was skipped, not stuck
    for c in (s, w):
        c.shutdown()
    d.stop()


def test_preempted_saves_end_before_the_next_step(tierd):
    """vLLM frees a preempted request's blocks at once: the scheduler names
    it in the metadata when it had saves handed out, and the worker's
    handle_preemptions returns only once those saves are done."""
    kv = cpu_cache(16)
    s, w = pair(tierd.sock, kv)
    toks = prompt(4 * BS + 3, 36)
    req = vllm_request(toks, "p")
    other = vllm_request(prompt(BS, 37), "q")
    s.get_num_new_matched_tokens(other, 0)
    meta = prefill(s, req, [1, 2, 3, 4, 5], preempted_req_ids={"q"})
    assert meta.preempted == ["q"]        # named; with no saves, nothing to wait for
    gate = Gate(w._saver, "p")            # p's save queues behind this
    step(w, meta)
    assert w._saver.busy("p")
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={},
                                                  preempted_req_ids={"p"}))
    assert meta.preempted == ["p"]
    fence_holds(w, meta, gate, "p")
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    assert w._tierd.ns[0].lookup(keys) == 4, "and the save itself was done"
    for c in (s, w):
        c.shutdown()


def test_waiting_for_its_load_is_not_held_again(tierd):
    """A request aborted while it waits for its load: vLLM keeps its blocks
    until the load is reported; the connector must not hold them as well
    (vLLM would free them twice)."""
    kv = cpu_cache(8)
    s, w = pair(tierd.sock, kv)
    toks = prompt(2 * BS + 1, 38)
    store(w, toks, [0, 1])
    req = vllm_request(toks, "w")
    assert s.get_num_new_matched_tokens(req, 0) == (2 * BS, True)
    s.update_state_after_alloc(req, Blocks([3, 4, 5]), 2 * BS)
    s._reqs["w"].saving = True            # as after a save before a preemption
    req.status = RequestStatus.FINISHED_ABORTED   # vLLM sets it before it calls in
    assert s.request_finished(req, [3, 4, 5]) == (False, None)
    for c in (s, w):
        c.shutdown()


def test_async_must_be_a_boolean(tierd):
    cfg, kcc = fake_config(tierd.sock, asynchronous="no"), fake_kv_cache_config()
    with pytest.raises(vc.KvtierConfigError, match='"async" is true or false'):
        vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc)


def test_a_save_in_flight_at_a_reset_is_purged_before_the_next_step(tierd):
    """vLLM's reset_prefix_cache(reset_connector=True) between two steps: a
    save the worker still has queued from the last step (old weights'
    blocks) lands after the scheduler's purge; the next step's metadata
    tells the worker, which waits for it and purges its namespace again
    before it computes anything with the new weights."""
    s, w = pair(tierd.sock, cpu_cache(8))
    toks = prompt(3 * BS + 1, 72)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    gate = Gate(w._saver, "earlier")          # the saver busy with an earlier save
    meta = prefill(s, vllm_request(toks, "a"), [0, 1, 2, 3])
    step(w, meta)                             # the save is queued behind the gate
    assert s.reset_cache() is True
    threading.Timer(0.2, gate.open).start()   # it lands while the next step waits
    step(w, s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={})))
    assert s._tierd.ns[0].lookup(keys) == 0, "old weights' blocks stored after the reset"
    # a later save (new weights) is kept, and a step with no new reset purges nothing
    meta = prefill(s, vllm_request(toks, "b"), [0, 1, 2, 3])
    step(w, meta)
    w._saver.wait()
    step(w, s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={})))
    assert s._tierd.ns[0].lookup(keys) == 3
    for c in (s, w):
        c.shutdown()


def test_a_reset_is_not_held_up_by_the_schedulers_own_pins(tierd):
    """A request looked up (its hit pinned) but not scheduled yet: its pins
    are the scheduler's own, released by the reset, which then purges at
    once rather than waiting for them to expire."""
    s, w = pair(tierd.sock, cpu_cache(8), pin_ms=60000)
    toks = prompt(3 * BS + 1, 73)
    store(w, toks, [0, 1, 2])
    assert s.get_num_new_matched_tokens(vllm_request(toks, "p"), 0) == (3 * BS, True)
    t = time.monotonic()
    assert s.reset_cache() is True
    assert time.monotonic() - t < 5, "the reset waited for its own pins"
    assert s._tierd.ns[0].lookup(kvtier.hash_prompt(toks, BS, seed="0")) == 0
    for c in (s, w):
        c.shutdown()
