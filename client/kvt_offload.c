/* SPDX-License-Identifier: MIT */
/*
 * kvt_offload.c - blocks between an engine's paged cache and tierd's pools:
 * offload gathers an engine's blocks into reserved slots and commits them,
 * restore scatters leased slots back. The CPU reference moves a cache in
 * host memory; kvt_gpu.c moves one on a device stream.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>

#include "kv_layout.h"
#include "kvk.h"
#include "kvt_int.h"
#include "kvtier.h"

/* The checks of offload and restore before anything moves; a restore's ids
 * must be distinct (two blocks cannot be restored into one engine block). */
static int layout_ok(const kvt_ns *ns, const struct kvk_layout *l, const int64_t *ids, size_t n,
                     void *stream, bool scatter)
{
    int rc;

    if (!ns || !l || (n && !ids))
        return -EINVAL;
    if (stream && !kvt_gpu_built())
        return -EOPNOTSUPP; /* device caches need the CUDA build's kernels */
    rc = kvk_layout_check(l);
    if (rc < 0)
        return rc;
    if (kvk_block_bytes(l) != ns->block_bytes)
        return KVT_EBLOCKSIZE;
    return scatter ? kvk_check_scatter_ids(l, ids, n) : kvk_check_ids(l, ids, n);
}

/* Gather (offload) or scatter (restore) m blocks: the CPU reference for a
 * cache in host memory, the CUDA kernels for one on a device stream. */
static int move_blocks(kvt_ns *ns, bool gather, const struct kvk_layout *l, const int64_t *ids,
                       size_t m, void *const *slots, const uint8_t *tiers, void *stream)
{
    if (stream)
        return kvt_gpu_move(&ns->c->gpu, ns->c->base, ns->c->pool_bytes, gather, l, ids, m,
                            slots, tiers, stream);
    return gather ? kvk_gather_ref(l, ids, m, slots)
                  : kvk_scatter_ref(l, (const void *const *)slots, ids, m);
}

/* Whether offload and restore go through hot for this call: the namespace
 * asked for it, and the pool is the same kind of memory as the cache (the
 * kernels read and write one kind per call). */
static bool use_hot(const kvt_ns *ns, void *stream)
{
    uint32_t k = ns->c->hot_kind;

    return (ns->hot & (KVT_GET_HOT | KVT_GET_PROMOTE)) &&
           (stream ? k == KVT_HOT_CUDA : k == KVT_HOT_EMULATED);
}

int kvt_offload(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                const struct kvk_layout *layout, const int64_t *block_ids, void *stream)
{
    void *slots[KVT_BATCH_MAX];
    int64_t ids[KVT_BATCH_MAX];
    uint8_t tiers[KVT_BATCH_MAX];
    uint8_t where = KVT_TIER_WARM;
    size_t m = 0;
    int rc = layout_ok(ns, layout, block_ids, n, stream, false);

    if (rc < 0)
        return rc;
    if (n > KVT_BATCH_MAX)
        return -E2BIG;
    rc = -ENOSPC;
    if (use_hot(ns, stream) && (ns->hot & KVT_GET_HOT)) {
        rc = kvt_put_reserve_flags(ns, parent, keys, n, slots, KVT_RESERVE_HOT);
        where = KVT_TIER_HOT;
    }
    if (rc == -ENOSPC) { /* hot is full (its mover makes room): warm this time */
        rc = kvt_put_reserve(ns, parent, keys, n, slots);
        where = KVT_TIER_WARM;
    }
    if (rc <= 0)
        return rc;
    memset(tiers, where, n);
    /* only the blocks that got a slot: the others are stored already */
    for (size_t i = 0; i < n; i++)
        if (slots[i]) {
            slots[m] = slots[i];
            ids[m++] = block_ids[i];
        }
    rc = move_blocks(ns, true, layout, ids, m, slots, tiers, stream);
    if (rc < 0) {
        kvt_put_abort(ns, keys, n);
        return rc;
    }
    return kvt_put_commit(ns, keys, n);
}

int kvt_restore(kvt_ns *ns, const kvt_key *keys, size_t n, const struct kvk_layout *layout,
                const int64_t *block_ids, void *stream)
{
    const void *slots[KVT_BATCH_MAX];
    uint8_t tiers[KVT_BATCH_MAX];
    kvt_lease lease;
    int rc = layout_ok(ns, layout, block_ids, n, stream, true), hits;

    if (rc < 0)
        return rc;
    if (n > KVT_BATCH_MAX)
        return -E2BIG;
    hits = kvt_get_lease_flags(ns, keys, n, use_hot(ns, stream) ? ns->hot : 0, slots, tiers,
                               &lease);
    if (hits <= 0)
        return hits;
    rc = move_blocks(ns, false, layout, block_ids, (size_t)hits, (void *const *)slots, tiers,
                     stream);
    kvt_release(ns, &lease);
    return rc < 0 ? rc : hits;
}
