# SPDX-License-Identifier: MIT
"""The connector against vLLM's scheduler contract where the asynchronous
and hybrid modes could break it (each test drives the connector's two
sides with vLLM's own scheduler code where it matters, and fails on the
connector before its fix): a request aborted while its resumed load runs is
freed once; a sliding-only model's failed load goes back whole; a plain
model's failed load is not offered again; a preempted request aborted
before the next step still has its saves waited for; a producer never
loads; a connector cache reset reported done leaves no old block served."""
import threading
from types import SimpleNamespace

import torch

import kvtier
from kvtier import vllm_connector as vc
from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.v1.core.sched.scheduler import Scheduler
from vllm.v1.core.single_type_kv_cache_manager import SlidingWindowManager
from vllm.v1.kv_cache_interface import SlidingWindowSpec
from vllm.v1.request import RequestStatus

from test_vllm_modules import BS, Blocks, cpu_cache, fake_config, fake_kv_cache_config, \
    prompt, vllm_request, none_hash  # noqa: F401 (none_hash: the module's autouse fixture)
from test_vllm_async import Gate, pair, prefill, step, store, until


def stored(tierd, n, seed):
    """An asynchronous scheduler and worker, and a prompt of n blocks and a
    token whose n blocks are in tierd (from the worker's blocks 0..n-1)."""
    s, w = pair(tierd.sock, cpu_cache(8))
    toks = prompt(n * BS + 1, seed)
    store(w, toks, list(range(n)))
    return s, w, toks


class FakeSched:
    """Just enough state for vLLM's finish_requests / _free_request /
    _update_from_kv_xfer_finished, which are vLLM's own code."""
    finish_requests = Scheduler.finish_requests
    _free_request = Scheduler._free_request
    _free_blocks = Scheduler._free_blocks
    _free_request_blocks = Scheduler._free_request_blocks
    _request_blocks_can_be_freed = Scheduler._request_blocks_can_be_freed
    _connector_finished = Scheduler._connector_finished
    _update_from_kv_xfer_finished = Scheduler._update_from_kv_xfer_finished

    def __init__(self, connector, cfg):
        self.connector, self.vllm_config = connector, cfg
        self.requests, self.running = {}, []
        rm = SimpleNamespace(remove_requests=lambda reqs: None)
        self.waiting = self.kv_holding_waiting = rm
        self.deferred_waiting = set()
        self.finished_recving_kv_req_ids, self.failed_recving_kv_req_ids = set(), set()
        self.aux_output_connector = self.ec_connector = None
        self._inflight_prefills = set()
        self.encoder_cache_manager = SimpleNamespace(free=lambda r: None)
        self.finished_req_ids, self.finished_req_ids_dict = set(), None
        self.defer_block_free = False
        self.freed = []
        self.kv_cache_manager = SimpleNamespace(
            finalize_partial_tail_offloads=lambda r: [],
            remove_skipped_blocks=lambda **k: None,
            get_block_ids_for_computed_tokens=lambda **k: ([3, 4, 5],),
            free=lambda r: self.freed.append(r.request_id))
        self.num_waiting_for_streaming_input = 0

    def _set_kv_fetch_stage(self, *a):
        pass


def test_abort_while_a_resumed_load_runs_frees_once(tierd):
    s, w, toks = stored(tierd, 2, 81)
    req = vllm_request(toks, "w")
    sched = FakeSched(s, SimpleNamespace(kv_transfer_config=s._kv_transfer_config))
    sched.requests["w"] = req
    # earlier life: it ran and had a save handed out, then was preempted
    s._reqs["w"] = vc._ReqState(req, saving=True, saved_blocks=2)
    # resumed: an asynchronous hit
    assert s.get_num_new_matched_tokens(req, 0) == (2 * BS, True)
    s.update_state_after_alloc(req, Blocks([3, 4, 5]), 2 * BS)
    req.status = RequestStatus.WAITING_FOR_REMOTE_KVS
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    # the client disconnects while the load is queued/running
    sched.finish_requests("w", RequestStatus.FINISHED_ABORTED)
    assert "w" in sched.requests, "vLLM holds the blocks for the load"
    assert s._finished == [], "held by the connector as well: freed twice"
    sending, recving, _ = until(w, lambda snd, r, e: r, meta)
    meta2 = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    assert meta2.finished == []
    snd2, _, _ = step(w, meta2)
    sending |= snd2
    assert (recving, sending) == ({"w"}, set())
    out = SimpleNamespace(finished_recving=recving, finished_sending=sending,
                          failed_recving=set(), invalid_block_ids=set())
    try:
        sched._update_from_kv_xfer_finished(out)
        err = None
    except AssertionError as e:
        err = e
    print("vLLM's _update_from_kv_xfer_finished:", repr(err), "freed:", sched.freed)
    for c in (s, w):
        c.shutdown()
    assert err is None, "vLLM's scheduler asserted: the engine dies"
    assert sched.freed == ["w"] and "w" not in sched.requests


WINDOW, H, D = 2 * BS, 2, 32


def sliding_only():
    sw = SlidingWindowSpec(block_size=BS, num_kv_heads=H, head_size=D, dtype=torch.float32,
                           sliding_window=WINDOW)
    return SimpleNamespace(kv_cache_groups=[
        SimpleNamespace(layer_names=["layers.0.attn", "layers.1.attn"], kv_cache_spec=sw)])


def test_sliding_only_failed_load_goes_back_whole(tierd):
    cfg, kcc = fake_config(tierd.sock, asynchronous=True), sliding_only()
    s = vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc)
    w = vc.KvtierConnector(cfg, KVConnectorRole.WORKER, kcc)
    kv = {n: torch.zeros(32, H, BS, 2 * D) for n in ("layers.0.attn", "layers.1.attn")}
    w.register_kv_caches(kv)
    assert s._hybrid and len(s._groups) == 1
    toks = prompt(8 * BS + 3, 91)
    req = vllm_request(toks, "s")
    # pretend the lookup hit 8 blocks (kvtier then loses them before the load)
    st = s._reqs.setdefault("s", vc._ReqState(req))
    st.local_tokens, st.hit_blocks = 0, 8
    # vLLM's null padding for 8*BS computed tokens (vLLM's own arithmetic)
    mgr = SlidingWindowManager.__new__(SlidingWindowManager)
    mgr.sliding_window, mgr.block_size, mgr.extra_retained_tokens = WINDOW, BS, 0
    skipped = mgr.get_num_skipped_tokens(8 * BS) // BS
    ids = [0] * skipped + list(range(10, 10 + 9 - skipped))
    print("vLLM's sliding block table for the hit:", ids)
    s.update_state_after_alloc(req, Blocks(ids), 8 * BS)
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    _, recving, errs = until(w, lambda snd, r, e: r, meta)   # nothing in tierd: fails
    res = w.get_transfer_results(set())
    # block ids cannot say "recompute from 0 over the window's null blocks":
    # the whole request goes back (vLLM restarts it from token 0)
    assert (recving, errs, res.failed_recving) == ({"s"}, set(), {"s"})
    for c in (s, w):
        c.shutdown()


def test_failed_plain_load_is_not_offered_again(tierd):
    s, w, toks = stored(tierd, 3, 95)
    req = vllm_request(toks, "L")
    rounds = []
    for _ in range(3):
        hit = s.get_num_new_matched_tokens(req, 0)
        if hit[0] == 0:
            rounds.append((hit, []))
            break
        s.update_state_after_alloc(req, Blocks([4, 5, 6, 7]), hit[0])
        meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
        # a worker-side failure that repeats (stand-in: the restore raises)
        orig = w._tierd.ns[0].restore
        w._tierd.ns[0].restore = lambda *a, **k: (_ for _ in ()).throw(
            kvtier.KvtierError(-5, "restore: EIO"))
        _, recving, errs = until(w, lambda snd, r, e: r, meta)
        w._tierd.ns[0].restore = orig
        s.update_connector_output(SimpleNamespace(failed_recving=None, invalid_block_ids=errs,
                                                  finished_recving=recving))
        rounds.append((hit, sorted(errs)))
    print("rounds (hit offered, blocks failed):", rounds)
    for c in (s, w):
        c.shutdown()
    assert rounds[1][0] == (0, False), "the same failing hit is offered again and again"


def test_preempted_then_aborted_saves_are_waited_for(tierd):
    kv = cpu_cache(16)
    s, w = pair(tierd.sock, kv)
    toks = prompt(4 * BS + 3, 97)
    req = vllm_request(toks, "p")
    ids = [1, 2, 3, 4, 5]
    meta = prefill(s, req, ids, preempted_req_ids=set())
    assert len(meta.saves) == 1
    gate = Gate(w._saver, "other")          # p's save is still running after the step
    step(w, meta)
    assert w._saver.busy("p")
    # reset_prefix_cache preempts p (blocks freed now), then the client aborts it
    req.status = RequestStatus.FINISHED_ABORTED
    print("request_finished ->", s.request_finished(req, ids))
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={},
                                                  preempted_req_ids={"p"}))
    print("next metadata: preempted", meta.preempted, "finished", meta.finished)
    w.bind_connector_metadata(meta)
    done = threading.Event()
    t = threading.Thread(target=lambda: (w.handle_preemptions(meta), done.set()))
    t.start()
    waited = not done.wait(0.5)
    print("handle_preemptions waited for p's save:", waited,
          "p's save still running:", w._saver.busy("p"))
    gate.open()
    t.join(30)
    w.clear_connector_metadata()
    for c in (s, w):
        c.shutdown()
    assert waited, "the forward may now overwrite blocks p's save is reading"


def test_a_producer_never_loads(tierd):
    """vLLM keeps a freed block from reuse while an earlier step may still
    write it (async scheduling, pipeline parallelism) only for consumer
    roles: a kv_producer connector saves but never offers a hit."""
    toks = prompt(3 * BS + 1, 96)
    s0, w0 = pair(tierd.sock, cpu_cache(8))
    store(w0, toks, [0, 1, 2])
    assert s0.get_num_new_matched_tokens(vllm_request(toks, "c"), 0) == (3 * BS, True)
    cfg = fake_config(tierd.sock, asynchronous=True)
    cfg.kv_transfer_config = KVTransferConfig(
        kv_connector="KvtierConnector", kv_connector_module_path="kvtier.vllm_connector",
        kv_role="kv_producer", kv_connector_extra_config={"socket": tierd.sock})
    s = vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, fake_kv_cache_config())
    assert s.get_num_new_matched_tokens(vllm_request(toks, "p"), 0) == (0, False)
    for c in (s, s0, w0):
        c.shutdown()


def test_reset_cache_done_serves_no_old_block(tierd):
    s, w, toks = stored(tierd, 3, 99)
    fake = SimpleNamespace(connector=s, log_stats=False)
    ok = Scheduler.reset_connector_cache(fake)
    hit = s.get_num_new_matched_tokens(vllm_request(toks, "after-reset"), 0)
    print("reset_cache() ->", s.reset_cache(), "; vLLM's reset_connector_cache ->", ok,
          "; hit after the reset:", hit)
    s.request_finished(vllm_request(toks, "after-reset"), [])
    for c in (s, w):
        c.shutdown()
    assert not (ok and hit[0]), "reset reported done, old-weight KV still served"
    assert ok and hit == (0, False), "the reset purged the model's blocks and said so"
