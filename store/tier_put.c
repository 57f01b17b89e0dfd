/* SPDX-License-Identifier: MIT */
/*
 * tier_put.c - the write side: reservations (slots for a client to fill),
 * commits that publish them, and aborts. Durable commits build on it in
 * tier_durable.c.
 */
#include <errno.h>

#include "tier_int.h"

/* Undo one reservation: the slot goes back; the entry too, unless children
 * still point at it (then it stays as an invisible ghost). */
static void drop_reserved(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);

    tier_ram_free(e->level == TIER_L_HOT ? t->hram : t->ram, e->off);
    t->st.reserved--;
    tier_remember(t, id, TIER_EV_ABORTED, e->level);
    tier_warm_lose(t, id, false);
    tier_forget(t, id, false); /* and durable commits that deduplicated against it fail */
}

/* Whether a is id or below it (a chain cannot run through itself: a key
 * named as its own ancestor is bad input, and is not linked). O(depth). */
static bool descends(const struct tier *t, uint32_t a, uint32_t id)
{
    for (; a != TIER_NONE; a = idx_at(t->idx, a)->parent)
        if (a == id)
            return true;
    return false;
}

/* Reserve one absent (or ghost) key under parent p. */
int tier_reserve_one(struct tier_ns *ns, int cls, bool hot, uint32_t owner, uint32_t p,
                     const struct tier_key *key, uint32_t ghost, uint32_t *id_out,
                     uint64_t *off_out)
{
    struct tier *t = ns->t;
    uint32_t id = ghost;
    struct idx_entry *e;
    int rc;

    if (id == TIER_NONE) {
        rc = idx_insert(t->idx, ns->id, key, &id);
        if (rc < 0)
            return rc;
        tier_set_parent(t, id, p);
    } else if (p != TIER_NONE && idx_at(t->idx, id)->parent != p && !descends(t, p, id)) {
        /* a ghost stood for the key with another parent or none (the
         * absent start of a chain put first, a block whose parent never
         * reached the disk): the block hangs under p now, or p could leave
         * before it and leaf-first would not hold (put with no parent, as
         * a sliding window's are, it keeps the link it had) */
        uint32_t old = idx_at(t->idx, id)->parent;

        /* linked under p first: a ghost p above old must not go with
         * old's chain (it would be freed, and id hang under a free entry) */
        tier_set_parent(t, id, p);
        if (old != TIER_NONE)
            tier_child_gone(t, old, false);
    }
    e = idx_at(t->idx, id);
    e->state = IDX_RESERVED;
    e->owner = owner;
    e->cls = (uint8_t)cls;
    /* counted in its tier before the slot is found, so eviction cannot take p;
     * a hot slot is never made by evicting (copies down are asynchronous) */
    tier_set_level(t, id, hot ? TIER_L_HOT : TIER_L_WARM, false);
    rc = hot ? tier_ram_alloc(t->hram, cls, id, off_out) : tier_alloc_slot(t, cls, id, off_out);
    if (rc < 0) {
        tier_warm_lose(t, id, false);
        tier_forget(t, id, false);
        return rc;
    }
    idx_at(t->idx, id)->off = *off_out;
    t->st.reserved++;
    *id_out = id;
    return 0;
}

static int reserve_in(struct tier_ns *ns, bool hot, uint32_t owner,
                      const struct tier_key *parent, const struct tier_key *keys, size_t n,
                      uint32_t *ids, uint64_t *offs)
{
    struct tier *t = ns->t;
    struct tier_ram *pool = hot ? t->hram : t->ram;
    uint32_t p = parent ? idx_find(t->idx, ns->id, parent) : TIER_NONE;
    uint32_t ghost_parent = TIER_NONE;
    size_t i, count = 0, dedup = 0;
    int cls, rc = 0;

    /* warm takes every namespace's blocks (tier_ns_open checked); the hot
     * pool's segments may be smaller */
    if (ns->slot > tier_ram_seg_bytes(pool))
        return -EINVAL;
    cls = tier_ram_class(pool, ns->slot);
    if (cls < 0)
        return cls;
    if (parent && p == TIER_NONE) {
        /* the parent is not stored: the chain hangs under a ghost for it,
         * so its blocks link up if the parent is put before they are
         * committed, and are swept as orphans (reachable by no lookup) if
         * not, instead of posing as a chain's root */
        rc = idx_insert(t->idx, ns->id, parent, &ghost_parent);
        if (rc < 0)
            return rc;
        idx_at(t->idx, ghost_parent)->state = IDX_GHOST;
        p = ghost_parent;
    }
    for (i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns->id, &keys[i]), ghost = TIER_NONE;

        ids[i] = TIER_NONE;
        offs[i] = UINT64_MAX;
        /* present (any tier), being written, or a lost block still leased by
         * a getter: nothing to write now */
        if (id != TIER_NONE && (idx_at(t->idx, id)->state != IDX_GHOST ||
                                idx_at(t->idx, id)->leases > 0)) {
            dedup++;
            if (idx_at(t->idx, id)->state != IDX_GHOST)
                idx_at(t->idx, id)->flags |= IDX_F_REUSED; /* put again: a second touch */
            p = id;
            continue;
        }
        ghost = id;
        rc = tier_reserve_one(ns, cls, hot, owner, p, &keys[i], ghost, &ids[i], &offs[i]);
        if (rc < 0)
            break;
        tier_admit_seen(t, ids[i]);
        p = ids[i];
        count++;
    }
    if (rc < 0) {
        /* all or nothing: children before parents */
        while (i-- > 0)
            if (ids[i] != TIER_NONE) {
                drop_reserved(t, ids[i]);
                ids[i] = TIER_NONE;
                offs[i] = UINT64_MAX;
            }
        if (ghost_parent != TIER_NONE)
            tier_drop_idle_ghost(t, ghost_parent); /* (freed already if it was a key too) */
        return rc;
    }
    /* nothing hangs under it (all deduplicated); a key equal to the parent
     * is reserved in the ghost made for it, which is then no ghost */
    if (ghost_parent != TIER_NONE)
        tier_drop_idle_ghost(t, ghost_parent);
    t->st.puts++;
    t->st.dedup_blocks += dedup;
    return (int)count;
}

int tier_reserve(struct tier_ns *ns, uint32_t owner, const struct tier_key *parent,
                 const struct tier_key *keys, size_t n, uint32_t *ids, uint64_t *offs)
{
    return reserve_in(ns, false, owner, parent, keys, n, ids, offs);
}

int tier_reserve_hot(struct tier_ns *ns, uint32_t owner, const struct tier_key *parent,
                     const struct tier_key *keys, size_t n, uint32_t *ids, uint64_t *offs)
{
    if (!ns->t->hot)
        return -EOPNOTSUPP;
    return reserve_in(ns, true, owner, parent, keys, n, ids, offs);
}

size_t tier_commit(struct tier_ns *ns, uint32_t owner, const struct tier_key *keys, size_t n)
{
    struct tier *t = ns->t;
    size_t done = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns->id, &keys[i]);
        struct idx_entry *e;

        if (id == TIER_NONE)
            continue;
        e = idx_at(t->idx, id);
        if (e->state != IDX_RESERVED || e->owner != owner)
            continue;
        e->state = IDX_COMMITTED;
        e->stamp = ++t->clock;
        tier_pol_commit(t, id); /* kept or not, before it goes on a list */
        t->st.reserved--;
        t->st.put_blocks++;
        t->st.blocks[e->level]++;
        t->st.bytes_in[e->level] += ns->block_bytes;
        done++;
        /* write-through: on disk at once, so leaving warm later is free; a
         * full queue or disk leaves it to the background mover */
        if (e->level != TIER_L_WARM || !t->write_through ||
            tier_demote_for(t, id, false, tier_waiter(NULL)) < 0)
            tier_settle(t, id, false);
        /* write-through to the remote tier, from warm (hot blocks stay on
         * the device; they are written if they come down and leave warm
         * under the on-demotion policy) */
        if (t->remote && t->cfg.remote_policy == TIER_REMOTE_WRITE_THROUGH &&
            idx_at(t->idx, id)->level == TIER_L_WARM)
            tier_put_remote(t, id, true);
        tier_orphan_check(t, id);
        if (t->dwaits)
            tier_dwaits_run(t, id); /* durable commits that deduplicated against it */
    }
    return done;
}

size_t tier_abort(struct tier_ns *ns, uint32_t owner, const struct tier_key *keys, size_t n)
{
    struct tier *t = ns->t;
    size_t done = 0;

    for (size_t i = n; i-- > 0;) {
        uint32_t id = idx_find(t->idx, ns->id, &keys[i]);

        if (id == TIER_NONE || idx_at(t->idx, id)->state != IDX_RESERVED ||
            idx_at(t->idx, id)->owner != owner)
            continue;
        drop_reserved(t, id);
        done++;
    }
    return done;
}

size_t tier_abort_ids(struct tier *t, uint32_t owner, const uint32_t *ids, size_t n)
{
    size_t done = 0;

    /* ids may be stale (committed since, or reused): check state and owner;
     * TIER_NONE (a deduplicated key in a reserve's ids) is skipped */
    for (size_t i = n; i-- > 0;) {
        struct idx_entry *e;

        if (ids[i] == TIER_NONE)
            continue;
        e = idx_at(t->idx, ids[i]);
        if (e->state != IDX_RESERVED || e->owner != owner)
            continue;
        drop_reserved(t, ids[i]);
        t->st.reclaimed++;
        done++;
    }
    return done;
}

bool tier_reserved_by(const struct tier *t, uint32_t id, uint32_t owner)
{
    const struct idx_entry *e = idx_at(t->idx, id);

    return e->state == IDX_RESERVED && e->owner == owner;
}
