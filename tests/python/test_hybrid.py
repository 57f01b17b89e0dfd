# SPDX-License-Identifier: MIT
"""The binding's hybrid namespaces (Client.ns_open_hybrid, the C hybrid API)
against a private tierd: a full-attention group, a sliding-window group and
a recurrent-state group, offloaded from numpy caches and restored into
others; each group moves what its rule says and nothing else."""
import ctypes

import numpy as np
import pytest

import kvtier

BS, H, D = 16, 2, 8
WINDOW = 40                    # tokens: a prefix's next token needs 3 blocks of it
STATE = 256                    # bytes of one recurrent state
SEED = 20261201


def groups():
    return [{"kind": "full", "layers": 2, "kv_heads": H, "head_dim": D, "n_kv": 2,
             "elem_bytes": 4},
            {"kind": "sliding", "layers": 1, "kv_heads": H, "head_dim": D, "n_kv": 2,
             "elem_bytes": 4, "window": WINDOW},
            {"kind": "state", "layers": 1, "state_bytes": STATE}]


def flash(layers, nb, rng=None):
    if rng is None:
        return [np.zeros((2, nb, BS, H, D), np.float32) for _ in range(layers)]
    return [rng.standard_normal((2, nb, BS, H, D)).astype(np.float32) for _ in range(layers)]


def states(n, rng):
    return [np.frombuffer(rng.bytes(STATE), np.uint8).copy() for _ in range(n)]


def addr(a):
    return a.ctypes.data


def test_hybrid_offload_restore_by_group_rules(client, request):
    rng = np.random.default_rng(SEED)
    model = "hybrid/" + request.node.name
    ns = client.ns_open_hybrid(model, "fp32", "vllm-hybrid", groups(), BS, state_every=3)
    assert ns.groups == 3
    n, nb = 6, 8
    full, slide, st = flash(2, nb, rng), flash(1, nb, rng), states(n, rng)
    keys = kvtier.hash_prompt(range(n * BS), BS)
    ids_f, ids_s = [7, 2, 5, 0, 3, 6], [1, 4, 6, 7, 0, 2]
    io = [kvtier.GroupIO(kvtier.Layout.from_tensors(full), ids_f),
          kvtier.GroupIO(kvtier.Layout.from_tensors(slide), ids_s),
          kvtier.GroupIO(states=[addr(s) for s in st], state_bytes=STATE)]
    # full: 6 blocks; sliding: the window of the last block, 3; state: after
    # every third block, 2
    assert ns.offload_groups(keys, io) == 6 + 3 + 2
    assert ns.lookup(keys) == 6
    # a prefix the sliding group cannot restore (its window is not stored),
    # nor the state group (no state after block 3)
    assert ns.lookup(keys[:4]) == 0
    assert [ns.group(g).lookup(keys) for g in range(3)] == [6, 0, 0]

    dfull, dslide = flash(2, nb), flash(1, nb)
    out = np.zeros(STATE, np.uint8)
    dids_f, dids_s = [1, 3, 5, 7, 0, 2], [6, 4, 2, 0, 1, 3]
    dio = [kvtier.GroupIO(kvtier.Layout.from_tensors(dfull), dids_f),
           kvtier.GroupIO(kvtier.Layout.from_tensors(dslide), dids_s),
           kvtier.GroupIO(state_out=addr(out), state_bytes=STATE)]
    assert ns.restore_groups(keys, dio) == 6
    for l in range(2):
        for a, b in zip(ids_f, dids_f):
            np.testing.assert_array_equal(dfull[l][:, b], full[l][:, a])
    for i, (a, b) in enumerate(zip(ids_s, dids_s)):
        if i >= 3:             # the window: restored
            np.testing.assert_array_equal(dslide[0][:, b], slide[0][:, a])
        else:                  # before it: never written
            assert not dslide[0][:, b].any()
    np.testing.assert_array_equal(out, st[-1])


def test_hybrid_refuses_wrong_io(client, request):
    rng = np.random.default_rng(SEED + 1)
    ns = client.ns_open_hybrid("hybrid/" + request.node.name, "fp32", "vllm-hybrid",
                               groups(), BS)
    keys = kvtier.hash_prompt(range(2 * BS), BS)
    full, slide, st = flash(2, 4, rng), flash(1, 4, rng), states(2, rng)
    good = [kvtier.GroupIO(kvtier.Layout.from_tensors(full), [0, 1]),
            kvtier.GroupIO(kvtier.Layout.from_tensors(slide), [0, 1]),
            kvtier.GroupIO(states=[addr(s) for s in st], state_bytes=STATE)]
    with pytest.raises(ValueError, match="2 group ios for 3 groups"):
        ns.offload_groups(keys, good[:2])
    with pytest.raises(ValueError, match="1 block ids for 2 keys"):
        ns.offload_groups(keys, [kvtier.GroupIO(good[0].layout, [0])] + good[1:])
    # a state of another size than the group's: refused, nothing stored
    bad = good[:2] + [kvtier.GroupIO(states=[addr(s) for s in st], state_bytes=STATE - 8)]
    with pytest.raises(kvtier.KvtierError):
        ns.offload_groups(keys, bad)
    # the full group's layout in the sliding group's place: another block size
    with pytest.raises(kvtier.KvtierError):
        ns.offload_groups(keys, [good[0], good[0], good[2]])
    assert [ns.group(g).lookup(keys) for g in range(3)] == [0, 0, 0]
    # plain block calls are refused on the hybrid handle
    with pytest.raises(kvtier.KvtierError):
        ns.offload(keys, good[0].layout, [0, 1])
    with pytest.raises(ValueError, match="unknown layer group kind"):
        client.ns_open_hybrid("hybrid/x", "fp32", "l", [{"kind": "ssm"}], BS)


def test_hybrid_group_order_is_identity(client, request):
    """Two groups of one kind and shape (vLLM's several sliding groups) are
    separate namespaces: blocks of one are never found in the other."""
    rng = np.random.default_rng(SEED + 2)
    g = groups()[1]
    ns = client.ns_open_hybrid("hybrid/" + request.node.name, "fp32", "vllm-hybrid",
                               [g, dict(g)], BS)
    keys = kvtier.hash_prompt(range(3 * BS), BS)
    a, b = flash(1, 4, rng), flash(1, 4, rng)
    io = [kvtier.GroupIO(kvtier.Layout.from_tensors(a), [0, 1, 2]),
          kvtier.GroupIO(kvtier.Layout.from_tensors(b), [0, 1, 2])]
    assert ns.offload_groups(keys, io) == 6
    da, db = flash(1, 4), flash(1, 4)
    assert ns.restore_groups(keys, [kvtier.GroupIO(kvtier.Layout.from_tensors(da), [0, 1, 2]),
                                    kvtier.GroupIO(kvtier.Layout.from_tensors(db), [0, 1, 2])]) == 3
    np.testing.assert_array_equal(da[0][:, :3], a[0][:, :3])
    np.testing.assert_array_equal(db[0][:, :3], b[0][:, :3])
    assert not np.array_equal(da[0][:, :3], db[0][:, :3])
