/* SPDX-License-Identifier: MIT */
/*
 * tier_remote_moves.c - the store's side of the remote tier (tier_remote.c
 * speaks to the Redis Cluster): writes of warm blocks to it, reads into
 * reserved warm slots, and probes.
 *
 * Design note: writes follow the policy: write-through on commit, or on
 * demotion when the mover takes a block out of warm. A write reads the warm
 * slot from a worker thread, so the block holds a lease meanwhile
 * (remote_pins; it is not a leaf, so nothing evicts or moves it); a block
 * being dropped at once is copied instead. A read from the remote never
 * needs an index entry before it lands: the store reserves the absent keys
 * under its own owner id (TIER_OWNER_REMOTE), the worker fills the slots,
 * and the completion commits the verified leading run like a client's put
 * (tier_get_remote).
 */
#include <errno.h>
#include <stdlib.h>

#include "tier_int.h"

static void on_remote_put(void *ctx, int rc)
{
    struct rput *p = ctx;
    struct tier *t = p->t;
    struct idx_entry *e = idx_at(t->idx, p->id);

    (void)rc; /* the remote tier counts its outcome */
    t->remote_pins--;
    t->remote_pinned -= p->bytes;
    e->leases--;
    if (!tier_drop_idle_ghost(t, p->id)) {
        tier_settle(t, p->id, p->at_tail);
        tier_maybe_hot_up(t, p->id);
    }
    free(p);
}

/* Write id's block (committed, in warm) to the remote tier, when its
 * namespace uses it. pin: a worker reads the slot, so the block holds a
 * lease until the write is done; else (the slot is freed right after this)
 * the bytes are copied now. */
void tier_put_remote(struct tier *t, uint32_t id, bool pin)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);
    struct rput *p;

    if (!t->remote || !tier_remote_ns_on(t->remote, e->ns))
        return;
    if (!pin) {
        /* -EBUSY (the copies queued reached their bound) is counted there */
        if (tier_remote_put(t->remote, e->ns, &e->key, tier_slot_ptr(t, e), slot, true,
                            NULL, NULL) == -ENOMEM)
            t->remote_skipped++;
        return;
    }
    /* bounded: blocks pinned by writes not finished hold at most a quarter
     * of warm, so a slow or dead cluster cannot fill the pool */
    p = t->remote_pinned + slot <= tier_ram_bytes(t->ram) / 4 ? malloc(sizeof(*p)) : NULL;
    if (!p) {
        t->remote_skipped++;
        return;
    }
    *p = (struct rput){ .t = t, .id = id, .bytes = slot,
                        .at_tail = t->cfg.remote_policy == TIER_REMOTE_ON_DEMOTION };
    if (tier_remote_put(t->remote, e->ns, &e->key, tier_slot_ptr(t, e), slot, false,
                        on_remote_put, p) < 0) {
        free(p);
        t->remote_skipped++;
        return;
    }
    e->leases++;
    t->remote_pins++;
    t->remote_pinned += slot;
    tier_settle(t, id, false);
}

static struct rop *rop_new(struct tier *t, size_t n, struct waiter w)
{
    struct rop *o = calloc(1, sizeof(*o) + n * (sizeof(uint32_t) + sizeof(void *) +
                                                sizeof(int)));

    if (!o)
        return NULL;
    o->t = t;
    o->waiter = w;
    o->bufs = (void **)(o + 1);
    o->res = (int *)(o->bufs + n);
    o->ids = (uint32_t *)(o->res + n);
    return o;
}

/* Give back a slot reserved for a remote read that found nothing: like an
 * aborted put, but nothing is remembered (the key was simply not there). */
static void drop_fetch(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);

    tier_ram_free(t->ram, e->off);
    t->st.reserved--;
    tier_warm_lose(t, id, false);
    tier_forget(t, id, false);
}

static void remote_done(struct tier *t, struct rop *o, int count)
{
    if (o->waiter.req)
        tier_req_remote(o->waiter.req, count); /* the store's own request: no trip out */
    else if (o->waiter.p && t->cfg.remote_done)
        t->cfg.remote_done(t->cfg.ready_ctx, o->waiter.p, count);
}

/* o's answer came (rc: the whole op's): o leaves the ops in flight. The
 * leading run of its keys whose result is good (a read: 0, verified; a
 * probe: 1, present), none when the op failed. */
static uint32_t rop_landed(struct rop *o, int rc, int good)
{
    uint32_t m = 0;

    TIER_LIST_DEL(o->t->rops, o);
    while (rc == 0 && m < o->n && o->res[m] == good)
        m++;
    return m;
}

static void on_fetched(void *ctx, int rc)
{
    struct rop *o = ctx;
    struct tier *t = o->t;
    uint32_t m = rop_landed(o, rc, 0);
    struct dscope sc = { .w = &o->waiter, .n = 1 }; /* off the ops in flight: a slot
                                                      given back may tell others */

    /* the verified leading run becomes committed warm blocks; the rest
     * (behind a miss they could not be used) goes, children first */
    for (uint32_t i = 0; i < m; i++) {
        struct idx_entry *e = idx_at(t->idx, o->ids[i]);

        e->state = IDX_COMMITTED;
        e->stamp = ++t->clock;
        t->st.reserved--;
        t->st.blocks[TIER_L_WARM]++;
        t->st.bytes_in[TIER_L_WARM] += o->bytes;
        tier_settle(t, o->ids[i], false);
    }
    tier_dscope_push(t, &sc);
    for (uint32_t i = o->n; i-- > m;)
        drop_fetch(t, o->ids[i]);
    tier_dscope_pop(t, &sc);
    t->remote_hits += m; /* the blocks used: read and verified behind a miss do not count */
    remote_done(t, o, (int)m);
    free(o);
}

int tier_get_remote(struct tier_ns *ns, const struct tier_key *keys, size_t n, void *waiter)
{
    return tier_remote_read(ns, keys, n, tier_waiter(waiter));
}

int tier_remote_read(struct tier_ns *ns, const struct tier_key *keys, size_t n,
                     struct waiter w)
{
    struct tier *t = ns->t;
    uint64_t slot = ns->slot, off;
    uint32_t p = TIER_NONE, k = 0;
    struct rop *o;
    size_t i;
    int cls, rc;

    if (!t->remote || !tier_remote_ns_on(t->remote, ns->id) ||
        (cls = tier_ram_class(t->ram, slot)) < 0)
        return 0;
    for (i = 0; i < n; i++) { /* the leading run here */
        uint32_t id = idx_find(t->idx, ns->id, &keys[i]);

        if (id == TIER_NONE || idx_at(t->idx, id)->state != IDX_COMMITTED)
            break;
        p = id;
    }
    if (i == n || !(o = rop_new(t, n - i, w)))
        return 0;
    o->bytes = ns->block_bytes;
    /* absent keys from there, up to a quarter of warm: a long miss must not
     * evict the whole pool for blocks that may not be there */
    for (size_t j = i; j < n && (k + 1) * slot <= tier_ram_bytes(t->ram) / 4; j++) {
        uint32_t id = idx_find(t->idx, ns->id, &keys[j]);

        if (id != TIER_NONE &&
            (idx_at(t->idx, id)->state != IDX_GHOST || idx_at(t->idx, id)->leases > 0))
            break; /* present, being written (by a client or by us), or held */
        if (tier_reserve_one(ns, cls, false, TIER_OWNER_REMOTE, p, &keys[j], id,
                             &o->ids[k], &off) < 0)
            break;
        o->bufs[k] = (uint8_t *)tier_ram_base(t->ram) + off;
        p = o->ids[k++];
    }
    rc = k ? tier_remote_get(t->remote, ns->id, keys + i, k, o->bufs, slot, o->res, on_fetched,
                             o)
           : 0;
    if (rc < 0 || k == 0) {
        while (k-- > 0)
            drop_fetch(t, o->ids[k]);
        free(o);
        return rc;
    }
    o->n = k;
    TIER_LIST_ADD(t->rops, o);
    return (int)k;
}

static void on_probed(void *ctx, int rc)
{
    struct rop *o = ctx;

    remote_done(o->t, o, (int)rop_landed(o, rc, 1));
    free(o);
}

int tier_lookup_remote(struct tier_ns *ns, const struct tier_key *keys, size_t n,
                       void *waiter)
{
    return tier_remote_probe(ns, keys, n, tier_waiter(waiter));
}

int tier_remote_probe(struct tier_ns *ns, const struct tier_key *keys, size_t n,
                      struct waiter w)
{
    struct tier *t = ns->t;
    struct rop *o;
    int rc;

    if (!t->remote || !tier_remote_ns_on(t->remote, ns->id) || n == 0)
        return 0;
    o = rop_new(t, n, w);
    if (!o)
        return -ENOMEM;
    o->probe = true;
    o->n = (uint32_t)n;
    rc = tier_remote_exists(t->remote, ns->id, keys, n, o->res, on_probed, o);
    if (rc < 0) {
        free(o);
        return rc;
    }
    TIER_LIST_ADD(t->rops, o);
    return (int)n;
}
