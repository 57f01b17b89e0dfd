# SPDX-License-Identifier: MIT
"""The Python binding (client/python/kvtier) against a private tierd."""
import errno
import hashlib
import json
import os
import random
import signal
import time

import cbor2
import numpy as np
import pytest

import hash_ref
import kvtier

SEED = 20240607   # fixed; printed by the tests that use it


def ref_keys(tokens, block=16, seed="0", salt=None, lora=None, mm=(), lora_path=None,
             fmt="tagged"):
    case = {"seed": seed, "block": block, "salt": salt, "lora": lora, "lora_path": lora_path,
            "format": fmt, "mm": [list(m) for m in mm], "tokens": list(tokens)}
    return [bytes.fromhex(h) for h in hash_ref.case_keys(case)]


def test_none_hash_is_sha256_of_cbor_seed():
    for seed in ("0", "1234", ""):
        assert kvtier.none_hash(seed) == hashlib.sha256(cbor2.dumps(seed)).digest()


@pytest.mark.parametrize("block", [1, 16, 32])
def test_hash_prompt_matches_reference(block):
    rng = random.Random(SEED + block)
    for n in (0, block - 1, block, 5 * block + 3, 300):
        toks = [rng.randrange(0, 1 << 31) for _ in range(n)]
        got = kvtier.hash_prompt(toks, block_tokens=block, seed="0")
        assert got == ref_keys(toks, block), "seed %d, block %d, n %d" % (SEED, block, n)
        assert len(got) == n // block


def test_hash_prompt_extras_and_continuation():
    toks = list(range(100, 180))
    mm = [("img-a", 3, 20), ("img-b", 40, 8)]
    got = kvtier.hash_prompt(toks, 16, seed="42", cache_salt="salty", lora_name="ad", mm=mm,
                             lora_path="/a/ad")
    assert got == ref_keys(toks, 16, "42", "salty", "ad", mm, lora_path="/a/ad")
    # the extra keys of earlier vLLM: bare strings, no path
    old = kvtier.hash_prompt(toks, 16, seed="42", cache_salt="salty", lora_name="ad", mm=mm,
                             extra_format=kvtier.EXTRA_UNTAGGED)
    assert old == ref_keys(toks, 16, "42", "salty", "ad", mm, fmt="untagged")
    assert old[0] != got[0]
    # a tagged LoRA needs its path, as vLLM hashes it
    with pytest.raises(kvtier.KvtierError):
        kvtier.hash_prompt(toks, 16, seed="42", lora_name="ad")
    # a salt changes every key of the chain
    plain = kvtier.hash_prompt(toks, 16, seed="42")
    assert all(a != b for a, b in zip(got, plain))
    # continuing from the second block gives the rest of the chain
    rest = kvtier.hash_prompt(toks[32:], 16, seed="42", parent=plain[1], start_token=32)
    assert rest == plain[2:]


def test_bad_arguments():
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.hash_prompt([1, 2, 3], block_tokens=0)
    assert e.value.code == -errno.EINVAL
    with pytest.raises(ValueError):
        kvtier.Layout.from_tensors([np.zeros((2, 3, 4))], dims="kbthd")


def test_connect_error(tmp_path):
    with pytest.raises(kvtier.KvtierError) as e:
        kvtier.Client(str(tmp_path / "no.sock"))
    assert e.value.code in (-errno.ENOENT, -errno.ECONNREFUSED)
    assert "no.sock" in str(e.value)


def test_put_get_lookup(ns_factory):
    ns = ns_factory(4096)
    assert ns.block_bytes == 4096
    keys = kvtier.hash_prompt(range(16 * 6), 16)
    blocks = [bytes([i]) * 4096 for i in range(6)]
    assert ns.lookup(keys) == 0
    assert ns.put(keys[:4], blocks[:4]) == 4
    hit, tiers = ns.lookup(keys, tiers=True)
    assert hit == 4
    assert tiers[:4] == [kvtier.TIER_WARM] * 4 and tiers[4:] == [kvtier.TIER_NONE] * 2
    assert ns.get(keys) == blocks[:4]
    # a put of stored keys stores nothing new
    assert ns.put(keys[:4], blocks[:4]) == 0
    with pytest.raises(ValueError):
        ns.put(keys[:1], [b"short"])


def test_started_durable_commits_overlap(ns_factory):
    ns = ns_factory(8192)
    keys = [kvtier.hash_prompt(range(b * 100, b * 100 + 16 * 4), 16) for b in range(5)]
    started = []
    for b in range(4):
        r = ns.reserve(keys[b])
        for i, v in enumerate(r.views):
            v[:] = bytes([0x10 * b + i]) * 8192
        started.append(r.commit_start())
    with pytest.raises(kvtier.KvtierError) as e:
        ns.commit_start(keys[4])          # four started and not waited for: the limit
    assert e.value.code == -errno.EBUSY
    assert [ns.commit_wait(cm) for cm in reversed(started)] == [4, 4, 4, 4]
    with pytest.raises(kvtier.KvtierError):
        ns.commit_wait(started[0])        # waited for already
    for b in range(4):
        hit, tiers = ns.lookup(keys[b], tiers=True)
        assert hit == 4
        assert ns.get(keys[b]) == [bytes([0x10 * b + i]) * 8192 for i in range(4)]


def test_zero_copy_reserve_and_lease(ns_factory):
    ns = ns_factory(8192)
    keys = kvtier.hash_prompt(range(1000, 1000 + 16 * 3), 16)
    with ns.reserve(keys) as r:
        assert r.reserved == 3
        for i, v in enumerate(r.views):
            assert v.nbytes == 8192 and not v.readonly
            v[:] = bytes([0x40 + i]) * 8192
        # reserved keys stay invisible until commit
        assert ns.lookup(keys) == 0
    assert ns.lookup(keys) == 3
    with ns.lease(keys + kvtier.hash_prompt(range(7, 7 + 16), 16)) as le:
        assert len(le) == 3
        for i, v in enumerate(le.views):
            assert v.readonly and v.tobytes() == bytes([0x40 + i]) * 8192
            with pytest.raises(TypeError):
                v[0] = 1
    # deduplicated: nothing to write a second time
    r = ns.reserve(keys)
    assert r.reserved == 0 and r.views == [None, None, None]
    r.commit()


def test_abort_and_remove(ns_factory):
    ns = ns_factory(4096)
    keys = kvtier.hash_prompt(range(500, 564), 16)
    r = ns.reserve(keys)
    assert r.reserved == 4
    assert r.abort() == 4
    assert ns.lookup(keys) == 0
    with pytest.raises(RuntimeError):
        with ns.reserve(keys) as r:
            r.views[0][:4] = b"abcd"
            raise RuntimeError("writer failed")
    assert ns.lookup(keys) == 0          # aborted by the with-block
    ns.put(keys, [bytes(4096)] * 4)
    assert ns.remove(keys[2:]) == 2
    assert ns.lookup(keys) == 2


def test_namespaces_are_separate(ns_factory):
    a, b = ns_factory(4096), ns_factory(4096)
    keys = kvtier.hash_prompt(range(64), 16)
    a.put(keys, [bytes(4096)] * 4)
    assert a.lookup(keys) == 4 and b.lookup(keys) == 0


def test_pipeline_stage_and_variant_keep_namespaces_apart(client):
    """ns_open passes the pipeline stage and a variant (issue 13): stages and
    different variants never share, equal descriptors do."""
    keys = kvtier.hash_prompt(range(32), 16)

    def ns(**kw):
        return client.ns_open("pytest/pp-variant", "fp8_e4m3", "test", 16, 4096, **kw)
    s0, s1 = ns(pp_rank=0, pp_size=2), ns(pp_rank=1, pp_size=2)
    s0.put(keys, [bytes(4096)] * 2)
    assert s0.lookup(keys) == 2 and s1.lookup(keys) == 0
    assert ns(pp_rank=0, pp_size=2).lookup(keys) == 2
    assert ns().lookup(keys) == 0
    va, vb = ns(variant=b"k=0.5 v=0.25"), ns(variant=b"k=0.5 v=0.5")
    va.put(keys, [bytes(4096)] * 2)
    assert vb.lookup(keys) == 0 and ns(variant=b"k=0.5 v=0.25").lookup(keys) == 2
    with pytest.raises(kvtier.KvtierError) as e:
        ns(pp_rank=2, pp_size=2)
    assert e.value.code == -errno.EINVAL


def test_block_size_mismatch(client, ns_factory):
    ns = ns_factory(4096)
    keys = kvtier.hash_prompt(range(32), 16)
    cache = [np.zeros((2, 4, 16, 2, 8), np.float32)]      # 2*16*2*8*4 = 2048 bytes
    lay = kvtier.Layout.from_tensors(cache)
    assert lay.block_bytes == 2048
    with pytest.raises(kvtier.KvtierError) as e:
        ns.offload(keys, lay, [0, 1])
    assert e.value.code == -4100          # KVT_EBLOCKSIZE


def _flash_cache(layers, nb, bs, h, d, dtype, rng):
    """vLLM flash-attn layout: one [2, NB, BS, H, D] tensor per layer."""
    return [rng.standard_normal((2, nb, bs, h, d)).astype(dtype) for _ in range(layers)]


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
def test_offload_restore_flash_layout(ns_factory, dtype):
    rng = np.random.default_rng(SEED)
    L, NB, BS, H, D = 3, 10, 16, 2, 8
    src = _flash_cache(L, NB, BS, H, D, dtype, rng)
    lay = kvtier.Layout.from_tensors(src)
    ns = ns_factory(lay.block_bytes)
    keys = kvtier.hash_prompt(range(3 * BS), BS)
    assert ns.offload(keys, lay, [7, 2, 5]) == 3
    assert ns.offload(keys, lay, [7, 2, 5]) == 0            # already stored
    # the tier block format: layer, K then V, token, head, dim, densely packed
    with ns.lease(keys[:1]) as le:
        want = b"".join(src[l][kv, 7].tobytes() for l in range(L) for kv in range(2))
        assert le.views[0].tobytes() == want
    dst = [np.zeros_like(t) for t in src]
    dlay = kvtier.Layout.from_tensors(dst)
    assert ns.restore(keys + kvtier.hash_prompt(range(99, 99 + BS), BS), dlay,
                      [0, 1, 9, 3]) == 3
    for l in range(L):
        np.testing.assert_array_equal(dst[l][:, 0], src[l][:, 7])
        np.testing.assert_array_equal(dst[l][:, 1], src[l][:, 2])
        np.testing.assert_array_equal(dst[l][:, 9], src[l][:, 5])
        assert not dst[l][:, 3].any()


def test_offload_restore_across_layouts(ns_factory):
    """Gathered from an HND view of one allocation, scattered into flash."""
    rng = np.random.default_rng(SEED + 1)
    L, NB, BS, H, D = 2, 6, 16, 4, 8
    big = rng.standard_normal((L, NB, 2, H, BS, D)).astype(np.float32)
    layers = [big[l] for l in range(L)]                 # [NB, 2, H, BS, D]
    lay = kvtier.Layout.from_tensors(layers, dims="bkhtd")
    ns = ns_factory(lay.block_bytes)
    keys = kvtier.hash_prompt(range(2 * BS), BS)
    assert ns.offload(keys, lay, [4, 1]) == 2
    flash = [np.zeros((2, NB, BS, H, D), np.float32) for _ in range(L)]
    assert ns.restore(keys, kvtier.Layout.from_tensors(flash), [0, 5]) == 2
    for l in range(L):
        # flash[kv, b, t, h, d] == big[l, b', kv, h, t, d]
        np.testing.assert_array_equal(flash[l][:, 0], big[l, 4].transpose(0, 2, 1, 3))
        np.testing.assert_array_equal(flash[l][:, 5], big[l, 1].transpose(0, 2, 1, 3))


def test_offload_bad_block_id(ns_factory):
    cache = [np.zeros((2, 4, 16, 1, 8), np.float32)]
    lay = kvtier.Layout.from_tensors(cache)
    ns = ns_factory(lay.block_bytes)
    keys = kvtier.hash_prompt(range(16), 16)
    with pytest.raises(kvtier.KvtierError) as e:
        ns.offload(keys, lay, [4])
    assert e.value.code == -errno.ERANGE
    assert ns.lookup(keys) == 0


def test_stats_and_namespaces(client, ns_factory):
    ns = ns_factory(4096, suffix="-stats")
    keys = kvtier.hash_prompt(range(48), 16)
    before = client.stats()
    ns.put(keys, [bytes(4096)] * 3)
    ns.lookup(keys)
    after = client.stats()
    assert after["version"] >= 3
    assert after["put_blocks"] - before["put_blocks"] == 3
    assert after["lookup_hits"] - before["lookup_hits"] >= 3
    assert after["tier"]["warm"]["blocks"] >= 3
    mine = [n for n in client.namespaces() if n["model_id"].endswith("-stats")]
    assert len(mine) == 1
    assert mine[0]["put_blocks"] == 3 and mine[0]["hit_keys"] == 3
    assert mine[0]["block_bytes"] == 4096 and mine[0]["dtype"] == "bf16"


def test_closed_client(tierd):
    c = kvtier.Client(tierd.sock)
    ns = c.ns_open("pytest/closed", "bf16", "test", 16, 4096)
    c.close()
    c.close()
    with pytest.raises(ValueError):
        ns.lookup(kvtier.hash_prompt(range(16), 16))


_AFTER_CLOSE = r'''
import ctypes
import sys
import kvtier

c = kvtier.Client(sys.argv[1])
ns = c.ns_open("pytest/after-close", "bf16", "test", 16, 4096)
keys = kvtier.hash_prompt(range(48), 16)
ns.put(keys[:1], [bytes([7]) * 4096])
le = ns.lease(keys[:1])
view = le.views[0]
res = ns.reserve(keys[1:2])
wview = res.views[0]
# what else may read a view's memory: a slice, a view of a view, a ctypes
# array on it; close refuses while one lives, and the client keeps working
for make in (() if sys.argv[2] == "plain" else
             (lambda: view[8:24], lambda: memoryview(view),
              lambda: (ctypes.c_uint8 * 16).from_buffer(wview))):
    other = make()
    try:
        c.close()
        print("closed under %r" % (other,))
        sys.exit(1)
    except BufferError:
        pass
    assert ns.lookup(keys[:1]) == 1, "a refused close must leave the client working"
    assert view[0] == 7
    del other
c.close()
for what, use in (("lease view", lambda: view[0]), ("its bytes", lambda: view.tobytes()),
                  ("reservation view", lambda: wview.__setitem__(0, 1))):
    try:
        use()
        print("%s usable after close" % what)
        sys.exit(1)
    except ValueError:
        pass
le.release()                   # the connection took the lease: nothing to do
assert res.abort() == 0
print("OK")
'''


@pytest.mark.parametrize("mode", ["plain", "shared"])
def test_views_raise_after_close(tierd, tmp_path, mode):
    """Bug (issue 13): a Lease's or Reservation's memoryview used after
    Client.close() read an unmapped pool (SIGSEGV) or another mapping. Close
    releases every view it handed out, and refuses, the client still open,
    while a slice or a buffer made from one lives. Run in a child, so that
    a segfault fails this test instead of ending pytest."""
    import subprocess
    import sys
    script = tmp_path / "after_close.py"
    script.write_text(_AFTER_CLOSE)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(sys.path))
    p = subprocess.run([sys.executable, str(script), tierd.sock, mode], env=env,
                       capture_output=True, text=True, timeout=60)
    assert p.returncode == 0 and p.stdout.strip() == "OK", \
        "exit %d (%s), stdout %r, stderr %r" % (p.returncode,
                                               "SIGSEGV" if p.returncode == -11 else "status",
                                               p.stdout, p.stderr[-2000:])


def test_model_from_config(tmp_path):
    cfg = {"model_type": "llama", "hidden_size": 64, "num_attention_heads": 4,
           "num_key_value_heads": 2, "num_hidden_layers": 2, "torch_dtype": "float32",
           "max_position_embeddings": 1024, "intermediate_size": 128, "vocab_size": 1000}
    p = tmp_path / "config.json"
    p.write_text(json.dumps(cfg))
    m = kvtier.model_from_config(str(p))
    assert (m.model_type, m.dtype, m.num_layers) == ("llama", "fp32", 2)
    assert m.groups[0]["kind"] == "full" and m.groups[0]["kv_heads"] == 2
    assert m.groups[0]["head_dim"] == 16
    # 2 layers x K,V x 16 tokens x 2 heads x 16 dims x 4 bytes
    assert m.block_bytes(16) == 2 * 2 * 16 * 2 * 16 * 4
    m.set_dtype("bf16")
    assert m.block_bytes(16) == 2 * 2 * 16 * 2 * 16 * 2
    p.write_text("{")
    with pytest.raises(kvtier.KvtierError):
        kvtier.model_from_config(str(p))


def test_offload_restore_past_batch_max(ns_factory):
    """Chains longer than KVT_BATCH_MAX go in batches, each chained to the last."""
    n = kvtier.BATCH_MAX + 300
    src = [np.arange(2 * (n + 8) * 8, dtype=np.float32).reshape(2, n + 8, 1, 1, 8)]
    lay = kvtier.Layout.from_tensors(src)
    ns = ns_factory(lay.block_bytes, block_tokens=1)
    keys = kvtier.hash_prompt(range(n), 1)
    assert ns.offload(keys, lay, range(n)) == n
    assert ns.lookup(keys) == n
    dst = [np.zeros_like(src[0])]
    assert ns.restore(keys, kvtier.Layout.from_tensors(dst), [i + 8 for i in range(n)]) == n
    np.testing.assert_array_equal(dst[0][:, 8:], src[0][:, :n])
    ns.remove(keys[n - 10:])
    assert ns.restore(keys, kvtier.Layout.from_tensors(dst), range(n)) == n - 10


def test_lookup_pin_and_unpin_by_another_client(tierd, ns_factory, client):
    ns = ns_factory(4096)
    keys = kvtier.hash_prompt(range(16 * 5), 16)
    assert ns.put(keys[:3], [bytes([i]) * 4096 for i in range(3)]) == 3
    base = client.stats()["leases_active"]
    hits, pin_id, pinned = ns.lookup_pin(keys, hold_ms=5000)
    assert (hits, pinned) == (3, 3) and pin_id != 0
    assert client.stats()["leases_active"] == base + 3
    # the worker's client, not the one that pinned, releases it
    with kvtier.Client(tierd.sock) as other:
        other.unpin(pin_id)
        other.stats()          # after the unpin, on the same connection
    assert client.stats()["leases_active"] == base
    client.unpin(pin_id)       # released already: a no-op
    assert ns.lookup_pin(keys[3:]) == (0, 0, 0)
    with pytest.raises(kvtier.KvtierError):
        ns.lookup_pin(keys, hold_ms=kvtier.PIN_MAX_MS + 1)


def test_namespace_id_names_it_for_purge(client, ns_factory):
    ns = ns_factory(4096, suffix="-purge")
    other = ns_factory(4096, suffix="-kept")
    keys = kvtier.hash_prompt(range(48), 16)
    assert ns.put(keys, [bytes([7]) * 4096] * 3) == 3
    assert other.put(keys, [bytes([8]) * 4096] * 3) == 3
    mine = [n["id"] for n in client.namespaces() if n["model_id"].endswith("-purge")]
    assert mine == [ns.id] and ns.id != other.id
    assert client.purge(ns.id) == 3
    assert ns.lookup(keys) == 0
    assert other.lookup(keys) == 3          # another namespace keeps its blocks
    with pytest.raises(kvtier.KvtierError):
        client.purge(0xfffffff0)            # no such namespace


def test_set_timeout_bounds_a_hung_daemon(tmp_path):
    from tierd_proc import Tierd
    d = Tierd(parent=str(tmp_path))
    try:
        c = kvtier.Client(d.sock)
        ns = c.ns_open("pytest/timeout", "bf16", "test", 16, 4096)
        keys = kvtier.hash_prompt(range(32), 16)
        assert ns.lookup(keys) == 0
        for bad in (-1, 2**32, 2**32 + 50, 1.5, True):
            with pytest.raises(ValueError):
                c.set_timeout(bad)              # refused, not wrapped into another bound
        with pytest.raises(ValueError):
            kvtier.Client(d.sock, timeout_ms=2**32)
        c.set_timeout(300)
        d.proc.send_signal(signal.SIGSTOP)
        try:
            t = time.monotonic()
            with pytest.raises(kvtier.KvtierError) as e:
                ns.lookup(keys)
            took = time.monotonic() - t
        finally:
            d.proc.send_signal(signal.SIGCONT)
        assert e.value.code == -errno.ETIMEDOUT
        assert took < 10, "the 300 ms bound held the call %.1f s" % took
        with pytest.raises(kvtier.KvtierError):
            ns.lookup(keys)                  # closed for use after a timeout
        c.close()
        with kvtier.Client(d.sock) as c2:   # the daemon itself is fine
            c2.set_timeout(0)
            assert c2.ns_open("pytest/timeout", "bf16", "test", 16, 4096).lookup(keys) == 0
        # bounded from the handshake on: a connect to a hung daemon
        d.proc.send_signal(signal.SIGSTOP)
        try:
            t = time.monotonic()
            with pytest.raises(kvtier.KvtierError) as e:
                kvtier.Client(d.sock, timeout_ms=300)
            took = time.monotonic() - t
        finally:
            d.proc.send_signal(signal.SIGCONT)
        assert e.value.code == -errno.ETIMEDOUT and took < 10
    finally:
        assert d.stop() == 0


def test_connect_to_a_daemon_not_accepting_is_bounded(tmp_path):
    """tierd stopped until its queue of connections is full (each try that
    timed out stays queued): a connect then fails at once with ETIMEDOUT
    ("did not answer in time") instead of blocking until tierd runs."""
    from tierd_proc import Tierd
    d = Tierd(parent=str(tmp_path))
    d.proc.send_signal(signal.SIGSTOP)
    try:
        codes, quick, t = [], 0, time.monotonic()
        while quick < 3 and len(codes) < 2000 and time.monotonic() - t < 60:
            t1 = time.monotonic()
            try:
                kvtier.Client(d.sock, timeout_ms=50).close()
            except kvtier.KvtierError as e:
                codes.append(e.code)
                quick += time.monotonic() - t1 < 0.025   # refused, not waited for
        took = time.monotonic() - t
    finally:
        d.proc.send_signal(signal.SIGCONT)
    assert quick == 3, "no connect failed at once in %d tries (%.1f s)" % (len(codes), took)
    assert set(codes) == {-errno.ETIMEDOUT}, set(codes)
    deadline = time.monotonic() + 20
    while True:                                  # it serves once it has caught up
        try:
            with kvtier.Client(d.sock) as c:
                c.stats()
            break
        except kvtier.KvtierError as e:
            assert e.code == -errno.ETIMEDOUT and time.monotonic() < deadline, e
            time.sleep(0.1)
    assert d.stop() == 0
