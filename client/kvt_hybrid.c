/* SPDX-License-Identifier: MIT */
/*
 * kvt_hybrid.c - hybrid models: a namespace per layer group, each group
 * stored by its own rule (kvtier.h, "hybrid models").
 *
 * Design note: the rules live here, in the client, on top of plain
 * namespaces. tierd stores each group's objects like any others (keyed by
 * namespace and block hash, sized for the group), so groups are evicted
 * and moved independently with no new daemon code; what a prefix needs
 * from each group, and so what a lookup can promise, is decided where the
 * model description is: the same code that sizes the cache (kvt_model.c,
 * kvt_model_size.c).
 */
#include <errno.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_layout.h"
#include "kvt_int.h"
#include "kvtier.h"

#define GROUP_ID_BYTES 64 /* a group's part of its namespace's variant (36 used) */

struct kvt_hybrid {
    kvt_hybrid_opts o;
    uint32_t ngroups;
    struct kvt_layer_group g[KVT_MODEL_GROUPS_MAX];
    uint32_t win[KVT_MODEL_GROUPS_MAX]; /* sliding: blocks a prefix end needs */
    kvt_ns *ns[KVT_MODEL_GROUPS_MAX];   /* the groups' namespaces (the client's) */
};

static bool whole(enum kvt_layer_kind k)
{
    return k == KVT_LAYER_FULL || k == KVT_LAYER_MLA || k == KVT_LAYER_INDEX;
}

/* Blocks of the window a prefix end needs: ceil(W / B), at least 1. */
static uint32_t window_blocks(const struct kvt_layer_group *g, uint32_t block_tokens)
{
    uint32_t w = (g->window + block_tokens - 1) / block_tokens;

    return w ? w : 1;
}

void kvt_hybrid_free(struct kvt_hybrid *hy)
{
    free(hy); /* the groups' handles are the client's, freed with it */
}

void kvt_hybrid_set_deadline(struct kvt_hybrid *hy, uint32_t ms)
{
    for (uint32_t k = 0; k < hy->ngroups; k++)
        kvt_ns_set_deadline(hy->ns[k], ms);
}

/*
 * A group's identity, the start of its namespace's variant (then the
 * caller's): its index in desc and its shape, little-endian. The kind and
 * the block size alone do not tell two groups apart: vLLM splits Gemma 3's
 * sliding layers into several groups of one shape, whose blocks differ.
 */
static void group_id(uint8_t id[GROUP_ID_BYTES], uint32_t index, const struct kvt_layer_group *g)
{
    uint8_t *p = id;

    memset(id, 0, GROUP_ID_BYTES);
    p = put_le(p, index, 4);
    p = put_le(p, (uint32_t)g->kind, 4);
    p = put_le(p, g->layers, 4);
    p = put_le(p, g->kv_heads, 4);
    p = put_le(p, g->head_dim, 4);
    p = put_le(p, g->n_kv, 4);
    p = put_le(p, g->elem_bytes, 4);
    p = put_le(p, g->window, 4);
    put_le(p, g->state_bytes, 8);
}

int kvt_ns_open_hybrid(kvt_client *c, const kvt_model *m, const struct kvt_model_desc *desc,
                       const kvt_hybrid_opts *o, kvt_ns **out)
{
    struct kvt_hybrid *hy;
    uint8_t *variant;
    uint32_t tp;
    int rc = 0;

    if (!c || !m || !desc || !o || !out || !o->block_tokens || !m->layout ||
        desc->n_groups > KVT_MODEL_GROUPS_MAX ||
        m->variant_len > KVT_VARIANT_MAX - GROUP_ID_BYTES || (m->variant_len && !m->variant))
        return -EINVAL;
    hy = calloc(1, sizeof(*hy));
    variant = malloc(GROUP_ID_BYTES + m->variant_len);
    if (!hy || !variant) {
        free(hy);
        free(variant);
        return -ENOMEM;
    }
    if (m->variant_len)
        memcpy(variant + GROUP_ID_BYTES, m->variant, m->variant_len);
    hy->o = *o;
    if (!hy->o.state_every)
        hy->o.state_every = 1;
    tp = m->tp_size ? m->tp_size : 1;
    for (uint32_t i = 0; i < desc->n_groups && rc == 0; i++) {
        const struct kvt_layer_group *g = &desc->group[i];
        kvt_model sub = *m;
        char layout[32];
        uint32_t k = hy->ngroups;

        if (g->kind == KVT_LAYER_NONE)
            continue; /* no cache, nothing stored */
        /* the group is part of the namespace's identity: its own descriptor */
        if ((size_t)snprintf(layout, sizeof(layout), "%s|%s", m->layout,
                             kvt_layer_kind_name(g->kind)) >= sizeof(layout)) {
            rc = -EINVAL;
            break;
        }
        sub.layout = layout;
        group_id(variant, i, g);
        sub.variant = variant;
        sub.variant_len = GROUP_ID_BYTES + m->variant_len;
        sub.dtype = m->dtype ? m->dtype : desc->dtype;
        sub.tp_size = tp;
        sub.block_tokens = o->block_tokens;
        sub.block_bytes = kvt_layer_group_block_bytes(g, o->block_tokens, tp);
        if (!sub.block_bytes || sub.block_bytes > KVT_BLOCK_MAX) {
            rc = -EINVAL;
            break;
        }
        rc = kvt_ns_open(c, &sub, &hy->ns[k]);
        hy->g[k] = *g;
        hy->win[k] = g->kind == KVT_LAYER_SLIDING ? window_blocks(g, o->block_tokens) : 0;
        hy->ngroups++;
    }
    free(variant);
    if (rc == 0 && hy->ngroups == 0)
        rc = -EINVAL;
    if (rc == 0 && !(*out = kvt_ns_new_hybrid(c, hy)))
        rc = -ENOMEM;
    if (rc < 0)
        free(hy);
    return rc;
}

uint32_t kvt_ns_groups(const kvt_ns *ns)
{
    const struct kvt_hybrid *hy = ns ? kvt_ns_hybrid(ns) : NULL;

    return hy ? hy->ngroups : 0;
}

kvt_ns *kvt_ns_group(kvt_ns *ns, uint32_t g)
{
    struct kvt_hybrid *hy = ns ? kvt_ns_hybrid(ns) : NULL;

    return hy && g < hy->ngroups ? hy->ns[g] : NULL;
}

const struct kvt_layer_group *kvt_ns_group_desc(const kvt_ns *ns, uint32_t g)
{
    const struct kvt_hybrid *hy = ns ? kvt_ns_hybrid(ns) : NULL;

    return hy && g < hy->ngroups ? &hy->g[g] : NULL;
}

/* What group k needs for a prefix ending at block `end`. */
static void needs(const struct kvt_hybrid *hy, uint32_t k, uint32_t end, uint32_t *first,
                  uint32_t *last)
{
    *last = end;
    if (whole(hy->g[k].kind))
        *first = 0;
    else if (hy->g[k].kind == KVT_LAYER_SLIDING) /* kept or not, only the window counts */
        *first = (uint64_t)end + 1 >= hy->win[k] ? (uint32_t)((uint64_t)end + 1 - hy->win[k]) : 0;
    else
        *first = end; /* a state: the one after the last block */
}

void kvt_ns_group_needs(const kvt_ns *ns, uint32_t g, uint32_t end, uint32_t *first,
                        uint32_t *last)
{
    const struct kvt_hybrid *hy = ns ? kvt_ns_hybrid(ns) : NULL;

    if (!first || !last)
        return;
    if (!hy || g >= hy->ngroups) {
        *first = 1, *last = 0; /* nothing */
        return;
    }
    needs(hy, g, end, first, last);
}

/* ---- lookup ------------------------------------------------------------ */

/*
 * The longest prefix m (blocks) of keys that every group can restore: for
 * each group, run[i] = how many blocks end at i all present; the prefix
 * ending at i is restorable by group k when its needed range [first, i] is
 * inside that run. O(n x groups) after one lookup per group.
 */
int kvt_hybrid_lookup(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags,
                      uint8_t *tiers)
{
    struct kvt_hybrid *hy = kvt_ns_hybrid(ns);
    uint8_t *lv = NULL;
    uint32_t *run = NULL;
    size_t best = 0;
    int rc = 0;

    if (n == 0)
        return 0;
    if (n > UINT32_MAX - 1)
        return -E2BIG;
    lv = malloc(n * hy->ngroups);
    run = malloc(n * hy->ngroups * sizeof(*run));
    if (!lv || !run) {
        rc = -ENOMEM;
        goto out;
    }
    for (uint32_t k = 0; k < hy->ngroups && rc >= 0; k++) {
        uint8_t *t = lv + (size_t)k * n;
        uint32_t *r = run + (size_t)k * n;

        rc = kvt_lookup(hy->ns[k], keys, n, 0, t);
        for (size_t i = 0; rc >= 0 && i < n; i++)
            r[i] = t[i] == KVT_TIER_NONE ? 0 : (i ? r[i - 1] : 0) + 1;
    }
    if (rc < 0)
        goto out;
    for (size_t m = n; m > 0 && !best; m--) {
        bool ok = true;

        for (uint32_t k = 0; k < hy->ngroups && ok; k++) {
            uint32_t first, last;

            needs(hy, k, (uint32_t)(m - 1), &first, &last);
            ok = run[(size_t)k * n + last] >= last - first + 1;
        }
        if (ok)
            best = m;
    }
    if (tiers) /* the first group's tiers: the one every block of a prefix needs, mostly */
        memcpy(tiers, lv, n);
    if (best && (flags & KVT_LOOKUP_PREFETCH)) {
        /* start the disk reads of what a restore of that prefix will take */
        for (uint32_t k = 0; k < hy->ngroups; k++) {
            uint32_t first, last;

            needs(hy, k, (uint32_t)(best - 1), &first, &last);
            kvt_lookup(hy->ns[k], keys + first, last - first + 1, KVT_LOOKUP_PREFETCH, NULL);
        }
    }
    rc = (int)(best > INT32_MAX ? INT32_MAX : best);
out:
    free(lv);
    free(run);
    return rc;
}

/* ---- offload and restore ------------------------------------------------ */

/* Which positions of a batch of n blocks group k keeps: a contiguous range
 * [*from, n) for KV groups; for a state group, keep[i] for each i. */
static void keep_range(const struct kvt_hybrid *hy, uint32_t k, size_t n, size_t *from)
{
    if (hy->g[k].kind == KVT_LAYER_SLIDING && !hy->o.sliding_all)
        *from = n > hy->win[k] ? n - hy->win[k] : 0;
    else
        *from = 0;
}

static bool keep_state(const struct kvt_hybrid *hy, size_t i, size_t n)
{
    return i + 1 == n || (i + 1) % hy->o.state_every == 0;
}

/* Every group's io, checked before anything of any group moves. A state
 * is copied by the group's object size (an estimate from the config), so
 * a buffer of another size would be over-read or keep a stale tail: the
 * engine states its size and a mismatch is refused like a KV cache's. */
static int io_ok(const struct kvt_hybrid *hy, const kvt_group_io *io, bool offload)
{
    for (uint32_t k = 0; k < hy->ngroups; k++) {
        uint64_t want = kvt_ns_block_bytes(hy->ns[k]);
        int rc;

        if (hy->g[k].kind == KVT_LAYER_STATE) {
            if (offload ? !io[k].states : !io[k].state_out)
                return -EINVAL;
            if (io[k].state_bytes != want)
                return KVT_EBLOCKSIZE;
            continue;
        }
        if (!io[k].layout || !io[k].block_ids)
            return -EINVAL;
        if ((rc = kvk_layout_check(io[k].layout)) < 0)
            return rc;
        if (kvk_block_bytes(io[k].layout) != want)
            return KVT_EBLOCKSIZE;
    }
    return 0;
}

/* The checks of offload_hybrid and restore_hybrid before anything moves:
 * ns is a hybrid handle (*hy), the batch fits one request, and every
 * group's io is right (io_ok). 0, -EINVAL, -E2BIG or io_ok's error. */
static int batch_ok(kvt_ns *ns, const kvt_key *keys, size_t n, const kvt_group_io *io,
                    bool offload, struct kvt_hybrid **hy)
{
    *hy = ns ? kvt_ns_hybrid(ns) : NULL;
    if (!*hy || !io || (n && !keys))
        return -EINVAL;
    if (n > KVT_BATCH_MAX)
        return -E2BIG;
    return io_ok(*hy, io, offload);
}

int kvt_offload_hybrid(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                       const kvt_group_io *io, void *stream)
{
    struct kvt_hybrid *hy;
    int stored = 0, rc;

    if ((rc = batch_ok(ns, keys, n, io, true, &hy)) < 0)
        return rc;
    for (uint32_t k = 0; k < hy->ngroups; k++) {
        if (hy->g[k].kind == KVT_LAYER_STATE) {
            const void *bufs[KVT_BATCH_MAX];
            kvt_key sel[KVT_BATCH_MAX];
            size_t m = 0;

            for (size_t i = 0; i < n; i++)
                if (keep_state(hy, i, n) && io[k].states[i]) {
                    sel[m] = keys[i];
                    bufs[m++] = io[k].states[i];
                }
            /* states chain among themselves: the newest goes first */
            rc = m ? kvt_put(hy->ns[k], NULL, sel, m, bufs) : 0;
        } else {
            size_t from;

            keep_range(hy, k, n, &from);
            /* a window that starts inside the batch hangs under nothing
             * stored (the block before it is never kept): it starts a chain
             * of its own, or tierd would sweep it as an orphan */
            rc = kvt_offload(hy->ns[k], from ? NULL : parent, keys + from,
                             n - from, io[k].layout, io[k].block_ids + from, stream);
        }
        if (rc < 0)
            return rc;
        stored += rc;
    }
    return stored;
}

int kvt_restore_hybrid(kvt_ns *ns, const kvt_key *keys, size_t n, const kvt_group_io *io,
                       void *stream)
{
    struct kvt_hybrid *hy;
    int m;

    if ((m = batch_ok(ns, keys, n, io, false, &hy)) < 0)
        return m;
    m = kvt_hybrid_lookup(ns, keys, n, 0, NULL);
    if (m <= 0)
        return m;
    for (uint32_t k = 0; k < hy->ngroups; k++) {
        uint32_t first, last;
        int rc;

        needs(hy, k, (uint32_t)m - 1, &first, &last);
        if (hy->g[k].kind == KVT_LAYER_STATE) {
            void *dst[1] = { io[k].state_out };

            rc = kvt_get(hy->ns[k], &keys[last], 1, dst);
        } else {
            rc = kvt_restore(hy->ns[k], keys + first, last - first + 1, io[k].layout,
                             io[k].block_ids + first, stream);
        }
        if (rc < 0)
            return rc;
        /* evicted since the lookup: nothing restored is to be trusted; the
         * engine recomputes (a miss, never a half-restored prefix) */
        if ((uint32_t)rc != last - first + 1)
            return 0;
    }
    return m;
}

/* ---- sizing -------------------------------------------------------------- */

uint64_t kvt_hybrid_stored_bytes(const struct kvt_model_desc *d, const kvt_hybrid_opts *o,
                                 uint32_t tp_size, uint64_t tokens, uint64_t batch_blocks)
{
    struct kvt_hybrid hy = { .o = *o };
    uint64_t nb, total = 0;

    if (!d || !o || !o->block_tokens)
        return 0;
    if (!hy.o.state_every)
        hy.o.state_every = 1;
    nb = tokens / o->block_tokens; /* only full blocks are stored */
    if (!batch_blocks || batch_blocks > nb)
        batch_blocks = nb ? nb : 1;
    for (uint32_t i = 0; i < d->n_groups && i < KVT_MODEL_GROUPS_MAX; i++) {
        const struct kvt_layer_group *g = &d->group[i];
        uint64_t gb = kvt_layer_group_block_bytes(g, o->block_tokens, tp_size ? tp_size : 1);
        uint64_t objs = 0;

        if (g->kind == KVT_LAYER_NONE || !gb)
            continue;
        hy.g[0] = *g;
        hy.win[0] = g->kind == KVT_LAYER_SLIDING ? window_blocks(g, o->block_tokens) : 0;
        /* the batches offload_hybrid would see, with its rules */
        for (uint64_t at = 0; at < nb; at += batch_blocks) {
            size_t n = (size_t)(nb - at < batch_blocks ? nb - at : batch_blocks), from;

            if (g->kind == KVT_LAYER_STATE) {
                for (size_t j = 0; j < n; j++)
                    objs += keep_state(&hy, j, n);
                continue;
            }
            keep_range(&hy, 0, n, &from);
            objs += n - from;
        }
        total += objs * gb;
    }
    return total;
}

uint64_t kvt_hybrid_naive_bytes(const struct kvt_model_desc *d, uint32_t block_tokens,
                                uint32_t tp_size, uint64_t tokens)
{
    const struct kvt_layer_group *attn = NULL;
    struct kvt_layer_group one;
    uint32_t layers = 0;

    if (!d || !block_tokens)
        return 0;
    /* the attention shape: full layers', else sliding ones', else MLA's */
    for (int pass = 0; pass < 3 && !attn; pass++)
        for (uint32_t i = 0; i < d->n_groups && i < KVT_MODEL_GROUPS_MAX && !attn; i++)
            if (d->group[i].kind == (pass == 0   ? KVT_LAYER_FULL
                                     : pass == 1 ? KVT_LAYER_SLIDING
                                                 : KVT_LAYER_MLA))
                attn = &d->group[i];
    if (!attn)
        return 0;
    for (uint32_t i = 0; i < d->n_groups && i < KVT_MODEL_GROUPS_MAX; i++)
        if (d->group[i].kind != KVT_LAYER_NONE && d->group[i].kind != KVT_LAYER_INDEX)
            layers += d->group[i].layers; /* indexer keys share the MLA layers */
    one = *attn;
    one.kind = attn->kind == KVT_LAYER_MLA ? KVT_LAYER_MLA : KVT_LAYER_FULL;
    one.layers = layers;
    return kvt_layer_group_block_bytes(&one, block_tokens, tp_size ? tp_size : 1) *
           (tokens / block_tokens);
}
