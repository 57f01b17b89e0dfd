# SPDX-License-Identifier: MIT
"""kvtier against vLLM's own modules, without a forward pass: vLLM's block
hashes as kvtier keys (under PYTHONHASHSEED and under vLLM's default seed),
the connector's start checks, its scheduler side on vLLM Request objects,
its worker side on a KV cache shaped as vLLM's CPU backend makes it, and
both with tierd killed and restarted."""
import logging
import random
import signal
import time
from types import SimpleNamespace

import pytest
import torch

import kvtier
from kvtier import vllm_connector as vc

from vllm.config import CacheConfig, KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole
from vllm.sampling_params import SamplingParams
from vllm.utils.hashing import sha256_cbor
from vllm.v1.core import kv_cache_utils as kcu
from vllm.v1.kv_cache_interface import FullAttentionSpec
from vllm.v1.request import Request

BS = 32
SEED = 11


@pytest.fixture(scope="module", autouse=True)
def none_hash():
    assert kcu.os.environ["PYTHONHASHSEED"] == "0"
    kcu.init_none_hash(sha256_cbor)


def vllm_request(tokens, req_id="r", salt=None, lora=None):
    return Request(req_id, list(tokens), SamplingParams(max_tokens=4), None,
                   cache_salt=salt, lora_request=lora,
                   block_hasher=kcu.get_request_block_hasher(BS, sha256_cbor))


def prompt(n, seed=SEED):
    r = random.Random(seed)
    return [r.randrange(0, 32000) for _ in range(n)]


def test_vllm_block_hashes_are_kvtier_keys():
    assert bytes(kcu.NONE_HASH) == kvtier.none_hash("0")
    for n in (31, 32, 100, 512):
        toks = prompt(n, n)
        req = vllm_request(toks)
        assert [bytes(h) for h in req.block_hashes] == kvtier.hash_prompt(toks, BS, seed="0")


def test_salted_hashes_are_kvtier_keys():
    """vLLM 0.32 tags its extra keys (("cache_salt", salt), ("lora", name,
    path), ("mm", id, offset)): kvt_hash_prompt's default form, so a C
    engine sharing salted prompts with vLLM finds its blocks; the untagged
    form of earlier vLLM differs."""
    toks = prompt(64)
    req = vllm_request(toks, salt="s1")
    keys = [bytes(h) for h in req.block_hashes]
    tagged = sha256_cbor((kcu.NONE_HASH, tuple(toks[:BS]), (("cache_salt", "s1"),)))
    assert keys[0] == tagged
    assert keys == kvtier.hash_prompt(toks, BS, seed="0", cache_salt="s1")
    assert keys[0] != kvtier.hash_prompt(toks, BS, seed="0", cache_salt="s1",
                                         extra_format=kvtier.EXTRA_UNTAGGED)[0]
    # unsalted blocks after the first still chain from the salted one
    assert keys[1] == kvtier.hash_prompt(toks[BS:], BS, seed="0", parent=keys[0],
                                         start_token=BS)[0]


def test_lora_hashes_are_kvtier_keys():
    """A LoRA adapter: vLLM hashes its name and path on every block, as
    kvt_hash_prompt with lora_name and lora_path; salt and LoRA together
    too."""
    from vllm.lora.request import LoRARequest

    toks = prompt(96)
    lora = LoRARequest("sql", 1, "/adapters/sql")
    keys = [bytes(h) for h in vllm_request(toks, lora=lora).block_hashes]
    assert keys == kvtier.hash_prompt(toks, BS, seed="0", lora_name="sql",
                                      lora_path="/adapters/sql")
    keys = [bytes(h) for h in vllm_request(toks, salt="t", lora=lora).block_hashes]
    assert keys == kvtier.hash_prompt(toks, BS, seed="0", cache_salt="t", lora_name="sql",
                                      lora_path="/adapters/sql")


def fake_config(socket, algo="sha256_cbor", tp=1, block=BS, cache_dtype="auto",
                asynchronous=False, device=None, **extra):
    """A vLLM config as the connector reads it; synchronous unless asked
    (these tests call the worker's steps by hand; test_vllm_async.py drives
    the asynchronous mode). device: vLLM's device type ("cpu": its CPU
    build, test_vllm_host_async.py); None gives a config without one, which
    the connector treats as a device cache's."""
    extra["async"] = asynchronous
    cache = CacheConfig(block_size=block, prefix_caching_hash_algo=algo,
                        cache_dtype=cache_dtype)
    more = {} if device is None else {"device_config": SimpleNamespace(device_type=device)}
    return SimpleNamespace(
        **more,
        cache_config=cache,
        kv_transfer_config=KVTransferConfig(kv_connector="KvtierConnector",
                                            kv_connector_module_path="kvtier.vllm_connector",
                                            kv_role="kv_both",
                                            kv_connector_extra_config=dict(socket=socket,
                                                                           **extra)),
        model_config=SimpleNamespace(model="test/tiny-llama", revision=None),
        parallel_config=SimpleNamespace(tensor_parallel_size=tp,
                                        decode_context_parallel_size=1))


def fake_kv_cache_config(layers=2, heads=2, head=32, dtype=torch.float32):
    spec = FullAttentionSpec(block_size=BS, num_kv_heads=heads, head_size=head, dtype=dtype)
    group = SimpleNamespace(layer_names=["model.layers.%d.self_attn.attn" % i
                                         for i in range(layers)], kv_cache_spec=spec)
    return SimpleNamespace(kv_cache_groups=[group])


def pair(sock, kv, kcc=None, **extra):
    """A scheduler and a worker on tierd sock (synchronous unless
    asynchronous=True) for KV cache config kcc (default
    fake_kv_cache_config()), the worker on cache kv."""
    cfg, kcc = fake_config(sock, **extra), kcc or fake_kv_cache_config()
    s = vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc)
    w = vc.KvtierConnector(cfg, KVConnectorRole.WORKER, kcc)
    w.register_kv_caches(kv)
    return s, w


def test_refuses_other_hash_algo_and_a_random_seed(tierd, monkeypatch):
    kcc = fake_kv_cache_config()
    with pytest.raises(vc.KvtierConfigError, match="sha256_cbor"):
        vc.KvtierConnector(fake_config(tierd.sock, algo="sha256"), KVConnectorRole.SCHEDULER,
                           kcc)
    # a vLLM without a default seed (before 0.32) hashes with a random one
    # when PYTHONHASHSEED is unset
    monkeypatch.delenv("PYTHONHASHSEED")
    monkeypatch.delattr(kcu, "DEFAULT_NONE_HASH_SEED")
    with pytest.raises(vc.KvtierConfigError, match="PYTHONHASHSEED"):
        vc.KvtierConnector(fake_config(tierd.sock), KVConnectorRole.SCHEDULER, kcc)


@pytest.fixture
def kvtier_log():
    """The connector's log messages (its logger is vLLM's "vllm.kvtier")."""
    lines = []
    h = logging.Handler()
    h.emit = lambda rec: lines.append(rec.getMessage())
    lg = logging.getLogger("vllm.kvtier")
    level = lg.level
    lg.setLevel(logging.INFO)     # what vLLM shows; under pytest "vllm" may be quieter
    lg.addHandler(h)
    yield lines
    lg.removeHandler(h)
    lg.setLevel(level)


@pytest.fixture
def default_seed():
    """vLLM as it runs without PYTHONHASHSEED: NONE_HASH from its default seed."""
    with pytest.MonkeyPatch.context() as mp:
        mp.delenv("PYTHONHASHSEED")
        kcu.init_none_hash(sha256_cbor)
        yield mp
    kcu.init_none_hash(sha256_cbor)      # PYTHONHASHSEED=0 again


def test_default_seed_without_pythonhashseed(tierd, default_seed, kvtier_log):
    """PYTHONHASHSEED unset (issue 16): vLLM 0.32 seeds NONE_HASH with
    "vllm-none-hash"; the connector starts, logs that seed, and vLLM's block
    hashes are kvt_hash_prompt's keys under it."""
    assert kcu.DEFAULT_NONE_HASH_SEED == "vllm-none-hash"
    assert bytes(kcu.NONE_HASH) == kvtier.none_hash("vllm-none-hash")
    cfg, kcc = fake_config(tierd.sock), fake_kv_cache_config()
    s = vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc)
    w = vc.KvtierConnector(cfg, KVConnectorRole.WORKER, kcc)
    said = [m for m in kvtier_log if "seeded with 'vllm-none-hash' (vLLM's default)" in m]
    assert len(said) == 2, "each side logs its seed; the log was %r" % kvtier_log
    toks = prompt(3 * BS + 5, 31)
    req = vllm_request(toks, "default-seed")
    keys = [bytes(h) for h in req.block_hashes]
    assert keys == kvtier.hash_prompt(toks, BS, seed="vllm-none-hash")
    assert keys[0] != kvtier.hash_prompt(toks, BS, seed="0")[0]
    # blocks a C engine put under that seed are vLLM's hits
    w.register_kv_caches(cpu_cache(4))
    w._tierd.ns[0].offload(kvtier.hash_prompt(toks, BS, seed="vllm-none-hash"), w._layout,
                           [0, 1, 2])
    assert s.get_num_new_matched_tokens(req, 0) == (3 * BS, False)
    assert not [m for m in kvtier_log if "NONE_HASH" in m]
    # a PYTHONHASHSEED that this vLLM did not hash with is said at the first lookup
    default_seed.setenv("PYTHONHASHSEED", "1")
    s1 = vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc)
    assert any("seeded with '1' (PYTHONHASHSEED)" in m for m in kvtier_log)
    s1.get_num_new_matched_tokens(vllm_request(toks, "seed-1"), 0)
    assert any("NONE_HASH is not that of seed '1'" in m for m in kvtier_log)
    for c in (s, w, s1):
        c.shutdown()


def test_failed_loads_are_recomputed_not_failed(tierd):
    """vLLM fails a request whose load fails unless its kv_load_failure_policy
    is "recompute": the connector sets that, as kvtier's blocks can always
    be computed again, unless told "fail"."""
    kcc = fake_kv_cache_config()
    cfg = fake_config(tierd.sock)
    assert cfg.kv_transfer_config.kv_load_failure_policy == "fail"    # vLLM's default
    vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc).shutdown()
    assert cfg.kv_transfer_config.kv_load_failure_policy == "recompute"
    cfg = fake_config(tierd.sock, load_failure_policy="fail")
    vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc).shutdown()
    assert cfg.kv_transfer_config.kv_load_failure_policy == "fail"
    with pytest.raises(vc.KvtierConfigError, match="load_failure_policy"):
        vc.KvtierConnector(fake_config(tierd.sock, load_failure_policy="retry"),
                           KVConnectorRole.SCHEDULER, kcc)


def test_refuses_unaligned_state_groups_and_mixed_block_sizes(tierd):
    """Recurrent-state groups (Mamba, linear attention) only where vLLM keeps
    a state per block (mamba_cache_mode "align"; without prefix caching it
    keeps one per request, "none"), and groups must share a block size (a
    hash covers one run of tokens)."""
    from vllm.v1.kv_cache_interface import MambaSpec
    kcc = fake_kv_cache_config()
    mamba = MambaSpec(block_size=BS, shapes=((3, 64),), dtypes=(torch.float32,))
    kcc.kv_cache_groups.append(SimpleNamespace(layer_names=["m"], kv_cache_spec=mamba))
    with pytest.raises(vc.KvtierConfigError, match="mamba_cache_mode \"align\""):
        vc.KvtierConnector(fake_config(tierd.sock), KVConnectorRole.SCHEDULER, kcc)
    kcc = fake_kv_cache_config()
    other = FullAttentionSpec(block_size=2 * BS, num_kv_heads=2, head_size=32,
                              dtype=torch.float32)
    kcc.kv_cache_groups.append(SimpleNamespace(layer_names=["x"], kv_cache_spec=other))
    with pytest.raises(vc.KvtierConfigError, match="several block sizes"):
        vc.KvtierConnector(fake_config(tierd.sock), KVConnectorRole.SCHEDULER, kcc)


def test_namespace_follows_model_config(tierd):
    kcc = fake_kv_cache_config()
    a = vc.namespace_desc(fake_config(tierd.sock), kcc, 0)
    assert a == {"model_id": "test/tiny-llama", "dtype": "fp32", "layout": "vllm:2Lx2Hx32D",
                 "block_tokens": BS, "tp_rank": 0, "tp_size": 1, "pp_rank": 0, "pp_size": 1,
                 "variant": None, "block_bytes": 2 * 2 * BS * 2 * 32 * 4}
    b = vc.namespace_desc(fake_config(tierd.sock, tp=2), kcc, 1)
    assert (b["tp_rank"], b["tp_size"]) == (1, 2)
    c = vc.namespace_desc(fake_config(tierd.sock), fake_kv_cache_config(dtype=torch.bfloat16), 0)
    assert c["dtype"] == "bf16" and c["block_bytes"] == a["block_bytes"] // 2


def test_fp8_caches_name_their_format(tierd):
    """vLLM allocates FP8 caches as uint8 and names the format in cache_dtype
    (issue 13): each format gets its own dtype, E4M3 the platform's, and an
    instance calculating its scales gets a namespace of its own."""
    from vllm.platforms import current_platform
    e4m3 = {"float8_e4m3fn": "fp8_e4m3", "float8_e4m3fnuz": "fp8_e4m3fnuz"}[
        str(current_platform.fp8_dtype()).rsplit(".", 1)[-1]]
    kcc = fake_kv_cache_config(dtype=torch.uint8)
    for cache_dtype, want in (("fp8", e4m3), ("fp8_e4m3", e4m3), ("fp8_e5m2", "fp8_e5m2")):
        d = vc.namespace_desc(fake_config(tierd.sock, cache_dtype=cache_dtype), kcc, 0)
        assert (d["dtype"], d["block_bytes"], d["variant"]) == (want, 2 * 2 * BS * 2 * 32, None)
    d = vc.namespace_desc(fake_config(tierd.sock),
                          fake_kv_cache_config(dtype=torch.float8_e5m2), 0)
    assert d["dtype"] == "fp8_e5m2"
    cfg = fake_config(tierd.sock, cache_dtype="fp8_e5m2")
    cfg.cache_config.calculate_kv_scales = True
    d = vc.namespace_desc(cfg, kcc, 0)
    assert d["variant"] == ("kv_scales=calculated engine=%s"
                            % cfg.kv_transfer_config.engine_id).encode()


class Blocks:
    """Stands in for vLLM's KVCacheBlocks (one group)."""

    def __init__(self, ids):
        self.ids = ids

    def get_block_ids(self):
        return (list(self.ids),)


def cpu_cache(num_blocks, layers=2, heads=2, head=32, fill=None):
    """Per-layer tensors as vLLM's CPU backend allocates them:
    [num_blocks, kv_heads, block_size, 2 * head_size]."""
    g = torch.Generator().manual_seed(SEED)
    return {"model.layers.%d.self_attn.attn" % i:
            (torch.randn(num_blocks, heads, BS, 2 * head, generator=g) if fill is None
             else torch.full((num_blocks, heads, BS, 2 * head), float(fill)))
            for i in range(layers)}


def test_cpu_layout_splits_k_and_v():
    kv = cpu_cache(4, layers=1)
    t = next(iter(kv.values()))
    lay = vc.layout_for_tensors([t], BS, 2, 32)
    c = lay.c
    assert (c.stride_block, c.stride_head, c.stride_kv, c.stride_token, c.stride_dim) == \
        (2 * BS * 2 * 32, BS * 2 * 32, BS * 32, 32, 1)
    # vLLM's CPU kernel sees [B, H, 2*T, D]: rows 0..T-1 are K, T..2T-1 are V
    view = t.view(4, 2, 2 * BS, 32)
    b, h, tok, d = 3, 1, 5, 7
    flat = t.view(-1)
    assert flat[b * c.stride_block + h * c.stride_head + tok * c.stride_token + d] == \
        view[b, h, tok, d]
    assert flat[b * c.stride_block + c.stride_kv + h * c.stride_head + tok * c.stride_token
                + d] == view[b, h, BS + tok, d]
    with pytest.raises(vc.KvtierConfigError, match="unknown KV cache shape"):
        vc.layout_for_tensors([torch.zeros(4, 3, BS, 64)], BS, 2, 32)


def test_scheduler_and_worker_round_trip(tierd):
    """Scheduler side on vLLM Requests, worker side on a CPU-shaped cache:
    instance A saves a prompt's blocks, instance B finds them, loads them
    into other engine blocks, and they arrive byte for byte."""
    cfg, kcc = fake_config(tierd.sock), fake_kv_cache_config()
    toks = prompt(5 * BS + 7, 3)

    # instance A: nothing cached; a 167-token prefill saves its 5 full blocks
    sa = vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc)
    wa = vc.KvtierConnector(cfg, KVConnectorRole.WORKER, kcc)
    kv_a = cpu_cache(16)
    wa.register_kv_caches(kv_a)
    req = vllm_request(toks, "a")
    assert sa.get_num_new_matched_tokens(req, 0) == (0, False)
    ids_a = [9, 3, 12, 4, 1, 7]
    sa._kv_cache_manager = SimpleNamespace(get_block_ids=lambda rid: (ids_a,))
    sa.update_state_after_alloc(req, Blocks(ids_a), 0)
    meta = sa.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"a": len(toks)}))
    assert meta.loads == [] and len(meta.saves) == 1
    assert meta.saves[0].block_ids == ids_a[:5] and meta.saves[0].parent is None
    assert meta.saves[0].keys == list(req.block_hashes)
    wa.bind_connector_metadata(meta)
    wa.wait_for_save()
    wa.clear_connector_metadata()
    # nothing more to save for this request; it finishes synchronously
    req.num_computed_tokens = len(toks)
    meta = sa.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"a": 1}))
    assert meta.saves == []
    assert sa.request_finished(req, ids_a) == (False, None)
    assert wa.get_finished({"a"}) == (None, None)

    # instance B: the same prompt plus more finds 5 blocks; one block is
    # already in its local cache, so 4 are loaded
    sb = vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc)
    wb = vc.KvtierConnector(cfg, KVConnectorRole.WORKER, kcc)
    kv_b = cpu_cache(16, fill=0)
    wb.register_kv_caches(kv_b)
    req_b = vllm_request(toks + [1, 2, 3], "b")
    assert sb.get_num_new_matched_tokens(req_b, BS) == (4 * BS, False)
    ids_b = [2, 5, 6, 8, 10, 11]
    sb.update_state_after_alloc(req_b, Blocks(ids_b), 4 * BS)
    sb._kv_cache_manager = SimpleNamespace(get_block_ids=lambda rid: (ids_b,))
    meta = sb.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"b": 10}))
    assert len(meta.loads) == 1 and meta.loads[0].block_ids == ids_b[1:5]
    assert meta.saves == []      # the 10 new tokens fill no block
    wb.bind_connector_metadata(meta)
    wb.start_load_kv(None)
    for name in kv_a:
        wb.wait_for_layer_load(name)
    assert wb.get_block_ids_with_load_errors() == set()
    for name in kv_a:
        for blk_a, blk_b in zip(ids_a[1:5], ids_b[1:5]):
            assert torch.equal(kv_a[name][blk_a], kv_b[name][blk_b])
        assert not kv_b[name][ids_b[0]].any()        # the local block: untouched

    # a whole-prompt hit leaves the last token to vLLM: 5 full blocks of a
    # 160-token prompt give 4 blocks
    req_c = vllm_request(toks[:5 * BS], "c")
    assert sb.get_num_new_matched_tokens(req_c, 0) == (4 * BS, False)
    for c in (sa, wa, sb, wb):
        c.shutdown()


def test_evicted_between_lookup_and_load_is_reported(tierd):
    cfg, kcc = fake_config(tierd.sock), fake_kv_cache_config()
    toks = prompt(3 * BS + 1, 4)
    w = vc.KvtierConnector(cfg, KVConnectorRole.WORKER, kcc)
    kv = cpu_cache(8)
    w.register_kv_caches(kv)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    w._tierd.ns[0].offload(keys[:2], w._layout, [0, 1])
    meta = vc.KvtierConnectorMetadata(loads=[vc._Load("x", keys, [4, 5, 6])])
    w.bind_connector_metadata(meta)
    w.start_load_kv(None)
    assert w.get_block_ids_with_load_errors() == {6}
    assert w.get_block_ids_with_load_errors() == set()
    w.shutdown()


def test_tierd_gone_is_a_miss_not_a_failure():
    from conftest import Tierd
    d = Tierd()
    s, w = pair(d.sock, cpu_cache(4))
    assert d.stop() == 0
    req = vllm_request(prompt(3 * BS, 5), "gone")
    assert s.get_num_new_matched_tokens(req, 0) == (0, False)
    keys = [bytes(h) for h in req.block_hashes]
    w.bind_connector_metadata(vc.KvtierConnectorMetadata(
        loads=[vc._Load("gone", keys[:2], [1, 2])],
        saves=[vc._Save("gone", None, keys, [0, 1, 2])]))
    w.start_load_kv(None)
    w.wait_for_save()
    assert w.get_block_ids_with_load_errors() == {1, 2}
    # a connector may start while no tierd runs: vLLM serves without kvtier
    s2 = vc.KvtierConnector(fake_config(d.sock), KVConnectorRole.SCHEDULER,
                            fake_kv_cache_config())
    assert s2.get_num_new_matched_tokens(req, 0) == (0, False)
    for c in (s, w, s2):
        c.shutdown()


def load_step(s, w, req, ids, n_sched):
    """One step of request req on connectors s (scheduler) and w (worker):
    the lookup, the allocation of engine blocks ids, the worker's load and
    save. Returns (tokens vLLM is told of, the blocks that failed to load)."""
    ext, _ = s.get_num_new_matched_tokens(req, 0)
    s.update_state_after_alloc(req, Blocks(ids), ext)
    s._kv_cache_manager = SimpleNamespace(get_block_ids=lambda rid: (ids,))
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={
        req.request_id: n_sched}))
    w.bind_connector_metadata(meta)
    w.start_load_kv(None)
    w.wait_for_save()
    w.clear_connector_metadata()
    return ext, w.get_block_ids_with_load_errors()


def test_tierd_killed_and_restarted():
    """tierd killed between a lookup and its load: the load fails (reported,
    vLLM recomputes), later lookups are misses while it is away; started
    again on its data folder: the connectors connect again and the blocks
    come back from disk, byte for byte. Restarted between two calls: the
    next lookup reconnects at once, without a miss."""
    from conftest import Tierd
    d = Tierd()
    kv = cpu_cache(8)
    s, w = pair(d.sock, kv, reconnect_ms=50)
    toks = prompt(4 * BS + 1, 41)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    w._tierd.ns[0].offload(keys, w._layout, [0, 1, 2, 3])
    w._tierd.client.flush()               # on disk, to survive the kill
    req = vllm_request(toks, "k1")
    assert s.get_num_new_matched_tokens(req, 0) == (4 * BS, False)
    assert d.kill(signal.SIGKILL) == -signal.SIGKILL
    s.update_state_after_alloc(req, Blocks([4, 5, 6, 7, 0]), 4 * BS)
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"k1": 1}))
    w.bind_connector_metadata(meta)
    w.start_load_kv(None)
    assert w.get_block_ids_with_load_errors() == {4, 5, 6, 7}
    assert w._tierd.client is None and s._tierd.client is not None  # s has not noticed
    s.request_finished(req, [])
    ext, errs = load_step(s, w, vllm_request(toks, "k2"), [4, 5, 6, 7, 0], 4 * BS + 1)
    assert (ext, errs) == (0, set()), "tierd away: a miss, nothing to load"
    assert s._tierd.client is None

    d.start()
    time.sleep(0.1)                       # past reconnect_ms
    kv2 = cpu_cache(8, fill=0)
    w.register_kv_caches(kv2)
    ext, errs = load_step(s, w, vllm_request(toks, "k3"), [4, 5, 6, 7, 0], 1)
    assert (ext, errs) == (4 * BS, set())
    for name in kv:
        for src, dst in zip([0, 1, 2, 3], [4, 5, 6, 7]):
            assert torch.equal(kv[name][src], kv2[name][dst])
    st = s._tierd.client.stats()
    assert st["tier"]["cold"]["hits"] >= 4, "the blocks came back from disk: %r" % st["tier"]

    assert d.kill(signal.SIGTERM) == 0    # and again, with no call while it is away
    d.start()
    ext, errs = load_step(s, w, vllm_request(toks, "k4"), [4, 5, 6, 7, 0], 1)
    assert (ext, errs) == (4 * BS, set())
    for c in (s, w):
        c.shutdown()
    assert d.stop() == 0


def test_a_block_that_failed_to_load_is_saved_again(tierd):
    """vLLM recomputes from the first block that failed to load (it resets
    the request's computed tokens there); the connector then saves those
    blocks again as they become full, so that kvtier holds them again."""
    s, w = pair(tierd.sock, cpu_cache(8))
    toks = prompt(4 * BS + 1, 51)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    w._tierd.ns[0].offload(keys, w._layout, [0, 1, 2, 3])
    req = vllm_request(toks, "again")
    ids = [4, 5, 6, 7, 0]
    assert s.get_num_new_matched_tokens(req, 0) == (4 * BS, False)
    s.update_state_after_alloc(req, Blocks(ids), 4 * BS)
    s._kv_cache_manager = SimpleNamespace(get_block_ids=lambda rid: (ids,))
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"again": 1}))
    assert len(meta.loads) == 1 and meta.saves == []
    # block 6 (the third) failed: vLLM computes from token 2 * BS again
    s.update_connector_output(SimpleNamespace(invalid_block_ids={6}))
    req.num_computed_tokens = 2 * BS
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"again": 2 * BS + 1}))
    assert meta.loads == [] and len(meta.saves) == 1
    sv = meta.saves[0]
    assert (sv.parent, sv.keys, sv.block_ids) == (keys[1], keys[2:4], [6, 7])
    for c in (s, w):
        c.shutdown()


def test_a_hit_is_held_until_its_load(tmp_path):
    """The window between lookup and load (issue 13): the scheduler counts a
    hit, other requests flood kvtier (four times its warm tier, no disk),
    and the worker still loads every block it was told of, byte for byte;
    then the pin is gone. A prompt saved alongside, not looked up, is
    evicted by the same flood."""
    from conftest import Tierd
    d = Tierd("--warm-bytes", "8M", "--no-cold")
    cfg, kcc = fake_config(d.sock), fake_kv_cache_config()
    toks, other = prompt(5 * BS + 7, 21), prompt(5 * BS + 7, 22)
    s = vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, kcc)
    w = vc.KvtierConnector(cfg, KVConnectorRole.WORKER, kcc)
    kv_src, kv = cpu_cache(8), cpu_cache(8, fill=0)
    w.register_kv_caches(kv_src)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    okeys = kvtier.hash_prompt(other, BS, seed="0")
    w._tierd.ns[0].offload(keys, w._layout, [0, 1, 2, 3, 4])
    w._tierd.ns[0].offload(okeys, w._layout, [0, 1, 2, 3, 4])
    req = vllm_request(toks, "pinned")
    assert s.get_num_new_matched_tokens(req, 0) == (5 * BS, False)
    leased = s._tierd.client.stats()["leases_active"]
    assert leased == 5, "the hit is pinned"
    # asked again (not scheduled yet): pinned once, not twice
    assert s.get_num_new_matched_tokens(req, 0) == (5 * BS, False)
    assert s._tierd.client.stats()["leases_active"] == 5
    flood = w._tierd.ns[0]
    for i in range(512):          # 16 MiB of other prompts' blocks
        fk = kvtier.hash_prompt(prompt(BS, 1000 + i), BS, seed="0")
        flood.put(fk, [bytes(flood.block_bytes)])
    assert flood.lookup(okeys) < 5, "the flood should evict what is not pinned"
    ids = [3, 5, 6, 1, 7, 0]
    s.update_state_after_alloc(req, Blocks(ids), 5 * BS)
    s._kv_cache_manager = SimpleNamespace(get_block_ids=lambda rid: (ids,))
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"pinned": 7}))
    w.register_kv_caches(kv)
    w.bind_connector_metadata(meta)
    w.start_load_kv(None)
    assert w.get_block_ids_with_load_errors() == set()
    for name in kv:
        for src, dst in zip([0, 1, 2, 3, 4], ids[:5]):
            assert torch.equal(kv_src[name][src], kv[name][dst])
    assert s._tierd.client.stats()["leases_active"] == 0, "the worker's load released the pin"
    # a hit vLLM does not load is released by the scheduler at once
    req2 = vllm_request(toks, "unloaded")
    assert s.get_num_new_matched_tokens(req2, 0) == (5 * BS, False)
    s.update_state_after_alloc(req2, Blocks(ids), 0)
    assert s._tierd.client.stats()["leases_active"] == 0
    for c in (s, w):
        c.shutdown()
    assert d.stop() == 0


def test_hung_tierd_costs_a_lookup_its_timeout_not_30_s():
    """tierd stopped (SIGSTOP), not gone: the scheduler's lookup is a miss
    after lookup_timeout_ms, and the lookups that follow do not try it
    again until the doubled wait has passed; once it answers, hits again."""
    from conftest import Tierd
    d = Tierd()
    s, w = pair(d.sock, cpu_cache(8), lookup_timeout_ms=300, reconnect_ms=200)
    toks = prompt(3 * BS + 1, 61)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    w._tierd.ns[0].offload(keys[:3], w._layout, [0, 1, 2])
    d.proc.send_signal(signal.SIGSTOP)
    try:
        t = time.monotonic()
        assert s.get_num_new_matched_tokens(vllm_request(toks, "h1"), 0) == (0, False)
        first = time.monotonic() - t
        t = time.monotonic()
        for i in range(5):      # within the wait: no new try, no new stall
            assert s.get_num_new_matched_tokens(vllm_request(toks, "h%d" % (i + 2)), 0) == \
                (0, False)
        after = time.monotonic() - t
    finally:
        d.proc.send_signal(signal.SIGCONT)
    assert first < 5, "a hung tierd held the lookup %.1f s" % first
    assert after < 0.25, "lookups within the wait tried the hung tierd (%.2f s)" % after
    deadline = time.monotonic() + 10
    while s.get_num_new_matched_tokens(vllm_request(toks, "back"), 0) != (3 * BS, False):
        assert time.monotonic() < deadline, "no hit after tierd answered again"
        time.sleep(0.1)
    for c in (s, w):
        c.shutdown()
    assert d.stop() == 0


def test_reset_cache_purges_the_models_blocks(tierd):
    """vLLM's reset_prefix_cache(reset_connector=True) after a weight
    update: the model's blocks, computed with the old weights, are gone
    from tierd (reset_cache True); another model's stay."""
    s, w = pair(tierd.sock, cpu_cache(8))
    other = fake_config(tierd.sock)
    other.model_config = SimpleNamespace(model="test/another-model", revision=None)
    wo = vc.KvtierConnector(other, KVConnectorRole.WORKER, fake_kv_cache_config())
    wo.register_kv_caches(cpu_cache(8))
    toks = prompt(3 * BS + 1, 62)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    for c in (w, wo):
        assert c._tierd.ns[0].offload(keys[:3], c._layout, [0, 1, 2]) == 3
    assert s.get_num_new_matched_tokens(vllm_request(toks, "r1"), 0) == (3 * BS, False)
    s._tierd.unpin(s._reqs["r1"].pins)
    assert s.reset_cache() is True
    assert s.get_num_new_matched_tokens(vllm_request(toks, "r2"), 0) == (0, False)
    assert w._tierd.ns[0].lookup(keys) == 0
    assert wo._tierd.ns[0].lookup(keys) == 3, "another model's blocks were purged"
    # a pin held on the model's blocks keeps them busy: the reset waits for
    # it, then (still held) says it failed
    assert w._tierd.ns[0].offload(keys[:3], w._layout, [0, 1, 2]) == 3
    _, pin, _ = w._tierd.ns[0].lookup_pin(keys[:3], 5000)
    s.RESET_TIMEOUT_S = 0.3
    assert s.reset_cache() is False
    w._tierd.client.unpin(pin)
    assert s.reset_cache() is True
    for c in (s, w, wo):
        c.shutdown()


def test_a_reset_is_not_bound_by_the_lookup_timeout(tierd):
    """The scheduler's calls are bounded by lookup_timeout_ms; a purge of a
    large namespace takes longer than a lookup and must not time out."""
    s, w = pair(tierd.sock, cpu_cache(64))
    s._tierd.timeout_ms = 1             # connected first: only the reset meets the bound
    s._tierd.client.set_timeout(1)
    for i in range(40):                 # 40 chains of 8 blocks
        keys = kvtier.hash_prompt(prompt(8 * BS + 1, 200 + i), BS, seed="0")
        assert w._tierd.ns[0].offload(keys[:8], w._layout, list(range(8 * (i % 8),
                                                                      8 * (i % 8) + 8))) == 8
    assert s.reset_cache() is True
    assert s._tierd.client is not None, "the reset's purge timed out the connection"
    for c in (s, w):
        c.shutdown()
