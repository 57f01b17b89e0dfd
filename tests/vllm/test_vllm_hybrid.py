# SPDX-License-Identifier: MIT
"""The connector with a hybrid model (issue 16, part 2) against vLLM's own
modules, without a forward pass: a KV cache config of a sliding-window
group and a full-attention group, as vLLM's hybrid allocator makes for
Gemma 2 and gpt-oss. Its blocks go through the C hybrid API: every block of
the full group, the window of the sliding one; a load fills exactly the
blocks vLLM gave it (never its null block), and a failed one goes back to
vLLM whole (failed_recving), after which that request is a miss. Then a
recurrent-state group (a MambaSpec, as vLLM makes for Qwen3-Next's linear
attention) beside a full one: a save keeps only the state of a step that
ends on a block boundary, a load copies the hit's last state into the
block vLLM gives that position."""
from types import SimpleNamespace

import torch

import kvtier
from kvtier import vllm_connector as vc

from vllm.distributed.kv_transfer.kv_connector.v1.base import KVConnectorRole, supports_hma
from vllm.v1.core.kv_cache_manager import KVCacheManager
from vllm.v1.kv_cache_interface import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, \
    SlidingWindowSpec

from test_vllm_modules import BS, Blocks, fake_config, prompt, vllm_request, \
    none_hash  # noqa: F401 (none_hash: the module's autouse fixture)
from test_vllm_async import step, until
from test_vllm_modules import pair as modules_pair

WINDOW = 2 * BS                   # 2 blocks
H, D = 2, 32


def hybrid_config():
    sw = SlidingWindowSpec(block_size=BS, num_kv_heads=H, head_size=D, dtype=torch.float32,
                           sliding_window=WINDOW)
    full = FullAttentionSpec(block_size=BS, num_kv_heads=H, head_size=D, dtype=torch.float32)
    return SimpleNamespace(kv_cache_groups=[
        SimpleNamespace(layer_names=["layers.0.attn", "layers.2.attn"], kv_cache_spec=sw),
        SimpleNamespace(layer_names=["layers.1.attn", "layers.3.attn"], kv_cache_spec=full)])


def cache(nb, fill=None, seed=5):
    g = torch.Generator().manual_seed(seed)
    return {"layers.%d.attn" % i:
            (torch.randn(nb, H, BS, 2 * D, generator=g) if fill is None
             else torch.full((nb, H, BS, 2 * D), float(fill))) for i in range(4)}


def pair(sock, kv):
    return modules_pair(sock, kv, hybrid_config(), asynchronous=True)


def manager(ids):
    return SimpleNamespace(get_block_ids=lambda rid: tuple(ids))


def save_prompt(sock, toks, kv, ids):
    """Instance A prefills toks in one step and saves it; returns its pair."""
    s, w = pair(sock, kv)
    req = vllm_request(toks, "a")
    assert s.get_num_new_matched_tokens(req, 0) == (0, False)
    s._kv_cache_manager = manager(ids)
    s.update_state_after_alloc(req, Blocks(ids[0]), 0)
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"a": len(toks)}))
    assert len(meta.saves) == 1 and meta.saves[0].group_ids == [list(g[:6]) for g in ids]
    step(w, meta)
    w.handle_preemptions(vc.KvtierConnectorMetadata())     # the next step: saves done
    return s, w


def lapse_pins(s, meta):
    """The pins of meta's loads lapse, as when they expire or the tenant's
    pin budget held none: what they held may go before the load."""
    for ld in meta.loads:
        s._tierd.unpin(ld.pins)
        ld.pins = [[] for _ in ld.pins]


class GroupBlocks(Blocks):
    def __init__(self, groups):
        self.groups = groups

    def get_block_ids(self):
        return tuple(list(g) for g in self.groups)


def test_hybrid_is_hma_and_names_its_groups(tierd):
    assert supports_hma(vc.KvtierConnector)
    d = vc.namespace_desc(fake_config(tierd.sock), hybrid_config(), 0)
    assert d["layout"] == "vllm:hybrid:2G"
    assert [(g["kind"], g["layers"], g.get("window")) for g in d["groups"]] == \
        [("sliding", 2, WINDOW), ("full", 2, None)]
    assert d["block_bytes"] == [2 * 2 * BS * H * D * 4] * 2


def test_hybrid_round_trip_by_group_rules(tierd):
    kv_a, kv_b = cache(16), cache(16, fill=0)
    toks = prompt(6 * BS + 5, 61)
    ids_a = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14]]
    sa, wa = save_prompt(tierd.sock, toks, kv_a, ids_a)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    ns = wa._tierd.ns[0]
    assert isinstance(ns, kvtier.HybridNamespace)
    # the sliding group keeps the windows of the save's last two blocks, the
    # full all
    assert [ns.group(g).lookup(keys[i:6]) for g, i in ((0, 3), (1, 0))] == [3, 6]
    assert ns.group(0).lookup(keys[:3]) == 0
    assert ns.lookup(keys) == 6

    # instance B: 6 blocks hit; vLLM gives the sliding group null blocks (0)
    # before the window, and block 15 of the sliding group is local already
    sb, wb = pair(tierd.sock, kv_b)
    req = vllm_request(toks, "b")
    assert sb.get_num_new_matched_tokens(req, BS) == (5 * BS, True)
    ids_b = [[0, 0, 0, 0, 2, 3, 4], [15, 5, 6, 7, 8, 9, 10]]
    sb.update_state_after_alloc(req, GroupBlocks(ids_b), 5 * BS)
    meta = sb.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    ld = meta.loads[0]
    assert (ld.first, len(ld.keys), ld.group_ids) == (1, 6, [g[:6] for g in ids_b])
    sending, recving, errs = until(wb, lambda s, r, e: r, meta)
    assert (recving, errs) == ({"b"}, set())
    for name, (g, src, dst) in {"layers.0.attn": (0, ids_a[0], ids_b[0]),
                                "layers.2.attn": (0, ids_a[0], ids_b[0]),
                                "layers.1.attn": (1, ids_a[1], ids_b[1]),
                                "layers.3.attn": (1, ids_a[1], ids_b[1])}.items():
        for pos in range(6):
            if dst[pos] == 0 or (g == 1 and pos == 0):
                continue
            assert torch.equal(kv_b[name][dst[pos]], kv_a[name][src[pos]]), (name, pos)
        assert not kv_b[name][0].any(), "the null block was written"
    assert not kv_b["layers.1.attn"][15].any(), "the local block was written"
    for c in (sa, wa, sb, wb):
        c.shutdown()


def test_hybrid_hit_is_held_group_by_group_until_its_load():
    """A hybrid hit is pinned in each group, the blocks that group's rule
    needs for the prefix (the full group all, the sliding group its
    window): a flood of four times warm (no disk) evicts a prompt saved
    alongside but not the hit, which loads byte for byte; the load releases
    every pin. (Unpinned, it could be evicted before its load.)"""
    from conftest import Tierd
    d = Tierd("--warm-bytes", "8M", "--no-cold")
    kv_a, kv_b = cache(16), cache(16, fill=0)
    toks, other = prompt(6 * BS + 5, 71), prompt(6 * BS + 5, 72)
    ids_a = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14]]
    sa, wa = save_prompt(d.sock, toks, kv_a, ids_a)
    so, wo = save_prompt(d.sock, other, kv_a, ids_a)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    okeys = kvtier.hash_prompt(other, BS, seed="0")
    sb, wb = pair(d.sock, kv_b)
    req = vllm_request(toks, "b")
    assert sb.get_num_new_matched_tokens(req, 0) == (6 * BS, True)
    ns = sb._tierd.ns[0]
    needs = [ns.group_needs(g, 5) for g in range(ns.groups)]
    assert needs[1] == (0, 5), "the full group needs every block"
    held = sum(last - first + 1 for first, last in needs)
    assert sb._tierd.client.stats()["leases_active"] == held, "the hit is pinned by group"
    # asked again (not scheduled yet): pinned once, not twice
    assert sb.get_num_new_matched_tokens(req, 0) == (6 * BS, True)
    assert sb._tierd.client.stats()["leases_active"] == held
    flood = wb._tierd.ns[0].group(1)
    for i in range(512):          # 16 MiB of other prompts' blocks
        fk = kvtier.hash_prompt(prompt(BS, 2000 + i), BS, seed="0")
        flood.put(fk, [bytes(flood.block_bytes)])
    assert wb._tierd.ns[0].lookup(okeys) < 6, "the flood should evict what is not pinned"
    ids_b = [[0, 0, 0, 0, 2, 3, 4], [15, 5, 6, 7, 8, 9, 10]]
    sb.update_state_after_alloc(req, GroupBlocks(ids_b), 6 * BS)
    meta = sb.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    sending, recving, errs = until(wb, lambda s, r, e: r, meta)
    assert (recving, errs, wb._failed_recving) == ({"b"}, set(), set())
    for name in kv_b:
        g = 0 if name in ("layers.0.attn", "layers.2.attn") else 1
        first = needs[g][0]
        for pos in range(first, 6):
            assert torch.equal(kv_b[name][ids_b[g][pos]], kv_a[name][ids_a[g][pos]]), (name, pos)
    assert sb._tierd.client.stats()["leases_active"] == 0, "the load released every pin"
    for c in (sa, wa, so, wo, sb, wb):
        c.shutdown()
    assert d.stop() == 0


def test_hybrid_at_tp2_each_rank_saves_and_loads_its_own_shard(tierd, monkeypatch):
    """tensor_parallel_size 2: vLLM's specs hold one rank's heads (2 here),
    kvtier's groups the model's (4), so each rank's namespace takes its
    blocks (it refused them as the wrong size when given the rank's
    heads). The hit is pinned per rank, group by group, and each rank's
    worker loads its own shard, byte for byte, releasing its own pins."""
    toks = prompt(6 * BS + 5, 85)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    ids_a = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14]]
    ids_b = [[0, 0, 0, 0, 2, 3, 4], [15, 5, 6, 7, 8, 9, 10]]
    src, dst, workers = [], [], []
    for rank in (0, 1):
        monkeypatch.setattr(vc, "_worker_ranks", lambda rank=rank: (rank, 0))
        kv = cache(16, seed=5 + rank)
        s, w = modules_pair(tierd.sock, kv, hybrid_config(), asynchronous=True, tp=2)
        assert s.get_num_new_matched_tokens(vllm_request(toks, "a"), 0) == (0, False)
        s._kv_cache_manager = manager(ids_a)
        s.update_state_after_alloc(vllm_request(toks, "a"), Blocks(ids_a[0]), 0)
        step(w, s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"a": len(toks)})))
        w.handle_preemptions(vc.KvtierConnectorMetadata())
        src.append(kv)
        workers.append((s, w))
    sb = None
    for rank in (0, 1):
        monkeypatch.setattr(vc, "_worker_ranks", lambda rank=rank: (rank, 0))
        kv = cache(16, fill=0)
        s, w = modules_pair(tierd.sock, kv, hybrid_config(), asynchronous=True, tp=2)
        sb = sb or s
        dst.append((kv, w))
        workers.append((s, w))
    assert [ns.lookup(keys) for ns in sb._tierd.ns] == [6, 6]
    req = vllm_request(toks, "b")
    assert sb.get_num_new_matched_tokens(req, 0) == (6 * BS, True)
    pins = sb._reqs["b"].pins
    assert len(pins) == 2 and all(len(p) == 2 and all(p) for p in pins), pins
    sb.update_state_after_alloc(req, GroupBlocks(ids_b), 6 * BS)
    meta = sb.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    for rank, (kv, w) in enumerate(dst):
        sending, recving, errs = until(w, lambda s, r, e: r, meta)
        assert (recving, errs, w._failed_recving) == ({"b"}, set(), set())
        for name in kv:
            g = 0 if name in ("layers.0.attn", "layers.2.attn") else 1
            for pos in range(4 if g == 0 else 0, 6):
                assert torch.equal(kv[name][ids_b[g][pos]], src[rank][name][ids_a[g][pos]]), \
                    (rank, name, pos)
    assert sb._tierd.client.stats()["leases_active"] == 0, "each rank released its pins"
    for s, w in workers:
        s.shutdown()
        w.shutdown()


def test_hybrid_pins_only_what_the_load_reads():
    """A hit with a local prefix pins none of what vLLM holds (the load
    starts after it), and a hit the local prefix covers pins nothing."""
    from conftest import Tierd
    d = Tierd("--warm-bytes", "64M")
    toks = prompt(6 * BS + 5, 86)
    sa, wa = save_prompt(d.sock, toks, cache(16), [[1, 2, 3, 4, 5, 6, 7],
                                                   [8, 9, 10, 11, 12, 13, 14]])
    sb, wb = pair(d.sock, cache(16, fill=0))
    req = vllm_request(toks, "b")
    assert sb.get_num_new_matched_tokens(req, 3 * BS) == (3 * BS, True)
    # full group: blocks 3-5 (not 0-2, vLLM's); sliding: its window, 4-5
    assert sb._tierd.client.stats()["leases_active"] == 3 + 2
    assert sb.get_num_new_matched_tokens(req, 6 * BS) == (0, False)
    assert sb._tierd.client.stats()["leases_active"] == 0, "pinned for nobody"
    for c in (sa, wa, sb, wb):
        c.shutdown()
    assert d.stop() == 0


def test_hybrid_same_prompt_again_hits_all_but_its_last_block(tierd):
    """A prompt that ends on a block boundary, asked again: vLLM computes
    its last token itself, so it asks for one block less than was saved,
    and that shorter prefix's window must be there too."""
    kv_a = cache(16)
    toks = prompt(6 * BS, 64)
    sa, wa = save_prompt(tierd.sock, toks, kv_a, [[1, 2, 3, 4, 5, 6], [8, 9, 10, 11, 12, 13]])
    sb, wb = pair(tierd.sock, cache(16, fill=0))
    assert sb.get_num_new_matched_tokens(vllm_request(toks, "again"), 0) == (5 * BS, True)
    for c in (sa, wa, sb, wb):
        c.shutdown()


def test_hybrid_resave_of_a_local_hit_keeps_to_the_blocks_vllm_holds(tierd):
    """vLLM's own cache holds all of a prompt's full blocks and kvtier none
    (evicted, or tierd restarted empty): the connector saves them from
    vLLM's blocks, of which vLLM has freed the sliding ones before the
    window of the prompt's end. The second-last block's window would read
    one of those: the save is then one batch, and all of it is stored
    (vLLM's own KVCacheManager gives the block ids)."""
    kcc = hybrid_config()
    m = KVCacheManager(KVCacheConfig(num_blocks=16, kv_cache_tensors=[], kv_cache_groups=[
        KVCacheGroupSpec(g.layer_names, g.kv_cache_spec) for g in kcc.kv_cache_groups]),
        max_model_len=4096, scheduler_block_size=BS, hash_block_size=BS)
    toks = prompt(5 * BS + 3, 90)
    a = vllm_request(toks, "a")
    blocks, n, _ = m.get_computed_blocks(a)
    m.allocate_slots(a, len(toks), n, blocks)
    a.num_computed_tokens = len(toks)
    m.free(a)                          # its blocks stay in vLLM's prefix cache
    s, w = pair(tierd.sock, cache(16, seed=3))
    b = vllm_request(toks, "b")
    blocks, local, _ = m.get_computed_blocks(b)
    assert local == 5 * BS
    assert s.get_num_new_matched_tokens(b, local) == (0, False)
    m.allocate_slots(b, len(toks) - local, local, blocks)
    s._kv_cache_manager = m
    s.update_state_after_alloc(b, m.get_blocks("b"), 0)
    b.num_computed_tokens = local
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"b": len(toks) - local}))
    assert 0 in meta.saves[0].group_ids[0], "vLLM freed sliding blocks the save must not read"
    step(w, meta)
    w._saver.wait()
    s2, w2 = pair(tierd.sock, cache(16, fill=0))
    assert s2.get_num_new_matched_tokens(vllm_request(toks, "c"), 0) == (5 * BS, True)
    for c in (s, w, s2, w2):
        c.shutdown()


def test_hybrid_failed_load_goes_back_whole_and_is_not_offered_again(tierd):
    kv_a, kv_b = cache(16, seed=7), cache(16, fill=0)
    toks = prompt(6 * BS + 5, 62)
    ids = [[1, 2, 3, 4, 5, 6, 7], [8, 9, 10, 11, 12, 13, 14]]
    sa, wa = save_prompt(tierd.sock, toks, kv_a, ids)
    sb, wb = pair(tierd.sock, kv_b)
    req = vllm_request(toks, "f")
    assert sb.get_num_new_matched_tokens(req, 0) == (6 * BS, True)
    sb.update_state_after_alloc(req, GroupBlocks([[0, 0, 0, 0, 2, 3, 4],
                                                  [5, 6, 7, 8, 9, 10, 11]]), 6 * BS)
    meta = sb.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    wb._loader.wait()
    lapse_pins(sb, meta)
    assert wa._tierd.ns[0].group(0).remove(keys[5:6]) == 1   # the window's last block
    wb.bind_connector_metadata(meta)
    wb.start_load_kv(None)
    wb._loader.wait()
    res = wb.get_transfer_results(set())
    assert (res.finished_recving, res.failed_recving) == ({"f"}, {"f"})
    assert wb.get_block_ids_with_load_errors() == set(), \
        "block-level errors kill vLLM with several groups"
    wb.clear_connector_metadata()
    sb.update_connector_output(SimpleNamespace(failed_recving={"f"}, invalid_block_ids=set()))
    assert sb.get_num_new_matched_tokens(req, 0) == (0, False), "offered again: a loop"
    for c in (sa, wa, sb, wb):
        c.shutdown()


def test_hybrid_save_never_reads_a_freed_block(tierd):
    """A sliding block vLLM has already freed (its null block in the table)
    where the save would read: nothing of it is stored."""
    kv = cache(16, seed=9)
    s, w = pair(tierd.sock, kv)
    toks = prompt(4 * BS + 1, 63)
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    sv = vc._Save("n", None, keys, [5, 6, 7, 8], group_ids=[[1, 2, 0, 4], [5, 6, 7, 8]])
    step(w, vc.KvtierConnectorMetadata(saves=[sv]))
    w._saver.wait()
    ns = w._tierd.ns[0]
    assert [ns.group(g).lookup(keys) for g in (0, 1)] == [0, 0]
    for c in (s, w):
        c.shutdown()


# ---- a state group (Mamba, linear attention) beside a full one ------------

CONV, SSM = (96, 3), (1, 16, 16)            # one layer's states, as vLLM shapes them
STATE = (96 * 3 + 16 * 16) * 2              # their bytes (bfloat16)
PAGE = STATE + 64                           # vLLM's page of one layer: states, padding


def state_config(mode="align"):
    """Qwen3-Next's groups as vLLM makes them: linear-attention layers (a
    MambaSpec group, listed first) and full-attention ones."""
    from vllm.v1.kv_cache_interface import MambaSpec
    st = MambaSpec(block_size=BS, shapes=(CONV, SSM), dtypes=(torch.bfloat16,) * 2,
                   page_size_padded=PAGE, mamba_cache_mode=mode)
    full = FullAttentionSpec(block_size=BS, num_kv_heads=H, head_size=D, dtype=torch.float32)
    return SimpleNamespace(kv_cache_groups=[
        SimpleNamespace(layer_names=["layers.0.linear_attn", "layers.2.linear_attn"],
                        kv_cache_spec=st),
        SimpleNamespace(layer_names=["layers.1.attn", "layers.3.attn"], kv_cache_spec=full)])


def state_cache(nb, fill=None, seed=5):
    """Per-layer tensors as vLLM hands them to a connector: [nb, H, BS, 2D]
    for attention; for a state layer a [nb, 1, 1, PAGE] int8 view of its
    pages (MambaBase.bind_kv_cache reads its states from each page's start),
    here a block stride wider than the page, as where groups share memory."""
    g = torch.Generator().manual_seed(seed)
    kv = {}
    for i in (1, 3):
        kv["layers.%d.attn" % i] = (torch.randn(nb, H, BS, 2 * D, generator=g) if fill is None
                                    else torch.full((nb, H, BS, 2 * D), float(fill)))
    for i in (0, 2):
        raw = (torch.randint(-128, 128, (nb, 1, 1, PAGE + 32), generator=g, dtype=torch.int8)
               if fill is None else torch.full((nb, 1, 1, PAGE + 32), fill, dtype=torch.int8))
        kv["layers.%d.linear_attn" % i] = raw[..., :PAGE]
    return kv


def state_pair(sock, kv, mode="align"):
    return modules_pair(sock, kv, state_config(mode), asynchronous=True)


def state_save(sock, toks, kv, ids, n_sched):
    """Instance A computes toks[:n_sched] in one step and saves it."""
    s, w = state_pair(sock, kv)
    req = vllm_request(toks, "a")
    assert s.get_num_new_matched_tokens(req, 0) == (0, False)
    s._kv_cache_manager = manager(ids)
    s.update_state_after_alloc(req, Blocks(ids[0]), 0)
    meta = s.build_connector_meta(SimpleNamespace(num_scheduled_tokens={"a": n_sched}))
    step(w, meta)
    w.handle_preemptions(vc.KvtierConnectorMetadata())
    return s, w, meta


def test_state_group_namespace_sizes_the_real_state(tierd):
    d = vc.namespace_desc(fake_config(tierd.sock), state_config(), 0)
    assert [(g["kind"], g["layers"]) for g in d["groups"]] == [("state", 2), ("full", 2)]
    # the states' bytes, not vLLM's padded page
    assert d["block_bytes"] == [2 * STATE, 2 * 2 * BS * H * D * 4]
    assert d["dtype"] == "fp32", "the namespace's dtype is the attention's"
    assert b"states=96x3:bfloat16,1x16x16:bfloat16" in d["variant"]


def test_state_round_trip_restores_the_hit_s_last_state(tierd):
    kv_a, kv_b = state_cache(16), state_cache(16, fill=0)
    toks = prompt(4 * BS + 7, 71)
    ids_a = [[9, 10, 11, 12, 13], [1, 2, 3, 4, 5]]
    # a chunk of exactly 4 blocks: vLLM keeps the state after it in block 12
    sa, wa, meta = state_save(tierd.sock, toks, kv_a, ids_a, 4 * BS)
    assert meta.saves[0].state_at == 3
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    ns = wa._tierd.ns[0]
    assert [ns.group(g).lookup(keys[i:4]) for g, i in ((0, 3), (1, 0))] == [1, 4]
    assert ns.group(0).lookup(keys[:3]) == 0, "only the step's last state is exact"
    assert ns.lookup(keys) == 4

    sb, wb = state_pair(tierd.sock, kv_b)
    req = vllm_request(toks, "b")
    assert sb.get_num_new_matched_tokens(req, BS) == (3 * BS, True)
    ids_b = [[0, 0, 0, 6, 7], [8, 2, 3, 4, 5]]   # the state's slot: block 6
    sb.update_state_after_alloc(req, GroupBlocks(ids_b), 3 * BS)
    meta = sb.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    sending, recving, errs = until(wb, lambda s, r, e: r, meta)
    assert (recving, errs) == ({"b"}, set())
    assert wb.get_transfer_results(set()).failed_recving == set()
    for name in ("layers.0.linear_attn", "layers.2.linear_attn"):
        a, b = kv_a[name][:, 0, 0], kv_b[name][:, 0, 0]
        assert torch.equal(b[6, :STATE], a[12, :STATE]), name
        assert not b[6, STATE:].any(), "the page's padding was written"
        assert not b[[0, 7]].any(), "a block other than the state's was written"
    for name in ("layers.1.attn", "layers.3.attn"):
        for pos in range(1, 4):
            assert torch.equal(kv_b[name][ids_b[1][pos]], kv_a[name][ids_a[1][pos]]), name
        assert not kv_b[name][8].any(), "the local block was written"
    for c in (sa, wa, sb, wb):
        c.shutdown()


def test_state_model_prefill_chunks_end_on_the_cache_s_blocks(tierd):
    """vLLM's CPU build hands its scheduler a cache config whose block size
    is its default (128), not the KV cache's (a state's page wide): its
    "align" split then ends prefill chunks where no block ends, and no
    state is ever saved. The first lookup sets it to the cache's."""
    cfg = fake_config(tierd.sock, asynchronous=True)
    s = vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, state_config())
    cfg.cache_config.block_size = BS // 2   # as vLLM leaves it after the handshake
    s.get_num_new_matched_tokens(vllm_request(prompt(4 * BS + 7, 73), "a"), 0)
    assert cfg.cache_config.block_size == BS
    s.shutdown()
    # a model with no state: vLLM's own block size is left alone
    cfg = fake_config(tierd.sock, asynchronous=True)
    s = vc.KvtierConnector(cfg, KVConnectorRole.SCHEDULER, hybrid_config())
    cfg.cache_config.block_size = BS // 2
    s.get_num_new_matched_tokens(vllm_request(prompt(4 * BS + 7, 74), "a"), 0)
    assert cfg.cache_config.block_size == BS // 2
    s.shutdown()


def test_no_state_is_saved_off_a_block_boundary(tierd):
    """A step that ends inside a block leaves no block's state exact: its
    full blocks are stored, no state, and no prefix is restorable."""
    kv = state_cache(16, seed=8)
    toks = prompt(4 * BS + 7, 72)
    sa, wa, meta = state_save(tierd.sock, toks, kv, [[9, 10, 11, 12, 13], [1, 2, 3, 4, 5]],
                              4 * BS + 7)
    assert meta.saves[0].state_at is None
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    ns = wa._tierd.ns[0]
    assert (ns.group(0).lookup(keys), ns.group(1).lookup(keys), ns.lookup(keys)) == (0, 4, 0)
    for c in (sa, wa):
        c.shutdown()


def test_state_load_that_fails_goes_back_whole(tierd):
    kv_a, kv_b = state_cache(16, seed=9), state_cache(16, fill=0)
    toks = prompt(4 * BS + 7, 73)
    sa, wa, _ = state_save(tierd.sock, toks, kv_a, [[9, 10, 11, 12, 13], [1, 2, 3, 4, 5]],
                           4 * BS)
    sb, wb = state_pair(tierd.sock, kv_b)
    req = vllm_request(toks, "f")
    assert sb.get_num_new_matched_tokens(req, 0) == (4 * BS, True)
    sb.update_state_after_alloc(req, GroupBlocks([[0, 0, 0, 6, 7], [1, 2, 3, 4, 5]]), 4 * BS)
    meta = sb.build_connector_meta(SimpleNamespace(num_scheduled_tokens={}))
    keys = kvtier.hash_prompt(toks, BS, seed="0")
    lapse_pins(sb, meta)
    assert wa._tierd.ns[0].group(0).remove(keys[3:4]) == 1     # the state
    wb.bind_connector_metadata(meta)
    wb.start_load_kv(None)
    wb._loader.wait()
    res = wb.get_transfer_results(set())
    assert (res.finished_recving, res.failed_recving) == ({"f"}, {"f"})
    wb.clear_connector_metadata()
    sb.update_connector_output(SimpleNamespace(failed_recving={"f"}, invalid_block_ids=set()))
    assert sb.get_num_new_matched_tokens(req, 0) == (0, False)
    for c in (sa, wa, sb, wb):
        c.shutdown()
