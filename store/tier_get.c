/* SPDX-License-Identifier: MIT */
/*
 * tier_get.c - the read side: prefix lookups, prefetch, pins, leases (get)
 * and their release. A lease pins its block in its tier until released; a
 * get of a block below warm waits for its copy up (tier_mover.c,
 * tier_hot_mover.c).
 */
#include <errno.h>

#include "tier_int.h"

size_t tier_lookup(struct tier_ns *ns, const struct tier_key *keys, size_t n, uint8_t *tiers)
{
    return tier_lookup_why(ns, keys, n, tiers, NULL);
}

size_t tier_lookup_why(struct tier_ns *ns, const struct tier_key *keys, size_t n,
                       uint8_t *tiers, struct tier_misses *why)
{
    struct tier *t = ns->t;
    struct idx *ix = t->idx;
    const uint32_t nsid = ns->id; /* in registers: the calls below could alias *ns */
    size_t hits = 0, i;
    bool leading = true;

    for (i = 0; i < n; i++) {
        uint32_t id;
        uint8_t lvl = TIER_L_NONE;

        /* the bucket array is far larger than cache: fetch a few keys ahead */
        if (i + 4 < n)
            idx_prefetch(ix, nsid, &keys[i + 4]);
        id = idx_find(ix, nsid, &keys[i]);
        if (id != TIER_NONE && idx_at(ix, id)->state == IDX_COMMITTED)
            lvl = idx_at(ix, id)->level;
        if (tiers)
            tiers[i] = lvl;
        if (leading && lvl != TIER_L_NONE)
            hits++;
        else if (leading)
            leading = false;
        if (!leading && !tiers)
            break;
    }
    t->st.lookups++;
    t->st.lookup_keys += n;
    t->st.lookup_hits += hits;
    t->st.misses += n - hits;
    /* O(misses): only lookups that miss pay for their diagnosis */
    if (why && hits < n)
        tier_miss_why(ns, keys + hits, n - hits, why);
    return hits;
}

bool tier_ready(const struct tier *t, uint32_t h)
{
    const struct idx_entry *e = idx_at(t->idx, TIER_LEASE_ID(h));

    if (h & TIER_LEASE_HOT)
        return true; /* the hot copy, in place: its slot is the lease's until released */
    return e->state == IDX_COMMITTED && e->level == TIER_L_WARM;
}

size_t tier_prefetch(struct tier_ns *ns, const struct tier_key *keys, size_t n, unsigned flags)
{
    struct tier *t = ns->t;
    size_t started = 0;

    if (!t->cold && !(flags & TIER_GET_PROMOTE))
        return 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns->id, &keys[i]);
        struct idx_entry *e;

        if (id == TIER_NONE || idx_at(t->idx, id)->state != IDX_COMMITTED)
            break;
        e = idx_at(t->idx, id);
        if ((flags & TIER_GET_PROMOTE) && t->hot && e->level != TIER_L_HOT) {
            e->flags |= IDX_F_WANTHOT;
            tier_maybe_hot_up(t, id); /* in warm already: up now */
            e = idx_at(t->idx, id);
        }
        if (t->cold && e->level == TIER_L_COLD && !(e->flags & IDX_F_PROMOTING)) {
            if (tier_promote(t, id, ns->slot, tier_waiter(NULL)) < 0)
                break;
            started++;
        }
    }
    return started;
}

/* One more lease on id (leasable said it can take one): a hit for the
 * eviction policy, the newest stamp, and off the LRU lists (a leased block
 * is no leaf). Its entry, fetched afresh: a read started for it (promote,
 * copy down) may have moved the index's array. */
static struct idx_entry *lease(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);

    tier_pol_touch(t, id);
    e->leases++;
    e->stamp = ++t->clock;
    tier_settle(t, id, false);
    return e;
}

/* key's entry (*id gets its id) if it is committed and can take one more
 * lease, else NULL: a count that would wrap would free a block still
 * leased, so the key is a miss instead. */
static struct idx_entry *leasable(struct tier *t, uint32_t ns, const struct tier_key *key,
                                  uint32_t *id)
{
    struct idx_entry *e;

    *id = idx_find(t->idx, ns, key);
    if (*id == TIER_NONE)
        return NULL;
    e = idx_at(t->idx, *id);
    return e->state == IDX_COMMITTED && e->leases < UINT32_MAX ? e : NULL;
}

size_t tier_pin(struct tier_ns *ns, const struct tier_key *keys, size_t n, unsigned flags,
                uint32_t *ids)
{
    struct tier *t = ns->t;
    bool reading = t->cold != NULL;
    size_t i;

    for (i = 0; i < n; i++) {
        uint32_t id;
        struct idx_entry *e = leasable(t, ns->id, &keys[i], &id);

        if (!e)
            break;
        if ((flags & TIER_GET_PROMOTE) && t->hot && e->level != TIER_L_HOT)
            e->flags |= IDX_F_WANTHOT; /* copied up once the pin is released */
        /* read ahead as a prefetch does; with no room for the read now the
         * block stays pinned on disk, and the get reads it */
        if (reading && e->level == TIER_L_COLD && !(e->flags & IDX_F_PROMOTING) &&
            tier_promote(t, id, ns->slot, tier_waiter(NULL)) < 0)
            reading = false;
        /* held as a lease is: no tier evicts it, the disk included */
        lease(t, id);
        ids[i] = id;
    }
    t->st.leases_active += i;
    t->st.pinned_blocks += i;
    return i;
}

/* A warm reader's lease on a block in hot: it is copied down for the
 * reader (any number join one copy); *woff gets the warm slot. */
static int lease_hot_down(struct tier *t, uint32_t id, struct waiter w, uint64_t *woff)
{
    struct idx_entry *e = idx_at(t->idx, id);
    struct move *m = (e->flags & IDX_F_HOTDOWN) ? tier_move_of(t, id, TIER_MV_HOT_DOWN) : NULL;

    if (!m)
        return tier_hot_down(t, id, w, woff);
    if (tier_wait_add(&m->ws, w) < 0)
        return -ENOMEM;
    *woff = m->warm_off;
    return 0;
}

/* A lease on a block only on disk: its read into warm starts, or a read
 * for another getter is joined; -EINVAL when the block is another size
 * (its record on disk: tier_cold_get). */
static int lease_cold(struct tier *t, uint32_t id, uint64_t slot, struct waiter w)
{
    struct move *m;

    if (!(idx_at(t->idx, id)->flags & IDX_F_PROMOTING))
        return tier_promote(t, id, slot, w);
    /* a read in flight is always at its namespace's one size (tier_ns_open);
     * checked all the same, as the warm and hot slots are in tier_get_for:
     * a block is never leased as another size */
    if (tier_ram_class_slot(t->ram, idx_at(t->idx, id)->cls) != slot)
        return -EINVAL;
    m = tier_move_of(t, id, TIER_MV_PROMOTE); /* a read for another getter: join it */
    return m ? tier_wait_add(&m->ws, w) : -ENOENT;
}

int tier_get(const struct tier_get_args *a)
{
    return tier_get_for(a, tier_waiter(a->waiter));
}

int tier_get_for(const struct tier_get_args *a, struct waiter w)
{
    struct tier *t = a->ns->t;
    const struct tier_key *keys = a->keys;
    size_t n = a->n, i;
    unsigned flags = a->flags;
    uint32_t *ids = a->ids, *pending = a->pending;
    uint64_t *offs = a->offs, slot = a->ns->slot, warm = 0, hot = 0;
    uint8_t *tiers = a->tiers;

    if (pending)
        *pending = 0;
    for (i = 0; i < n; i++) {
        uint32_t id;
        struct idx_entry *e = leasable(t, a->ns->id, &keys[i], &id);

        if (!e)
            break;
        if (tiers)
            tiers[i] = TIER_L_WARM;
        ids[i] = id;
        if (e->level == TIER_L_HOT && (flags & TIER_GET_HOT)) {
            /* the caller reads the device pool: leased where it is, even
             * while a copy down is in flight (the slot stays the lease's) */
            if (tier_ram_class_slot(t->hram, e->cls) != slot)
                goto wrong_size;
            if (tiers)
                tiers[i] = TIER_L_HOT;
            hot++;
            e->hleases++;
            ids[i] = id | TIER_LEASE_HOT;
        } else if (e->level == TIER_L_WARM) {
            if (tier_ram_class_slot(t->ram, e->cls) != slot)
                goto wrong_size;
            warm++;
        } else if (e->level == TIER_L_HOT) {
            /* clients read warm: a hot block is copied down for them (any
             * number join one copy) */
            uint64_t woff;

            if (tier_ram_class_slot(t->hram, e->cls) != slot)
                goto wrong_size;
            if (!pending || lease_hot_down(t, id, w, &woff) < 0)
                break;
            (*pending)++;
            hot++;
            lease(t, id);
            offs[i] = woff;
            continue;
        } else if (!pending || !t->cold) {
            break; /* cold, and the caller cannot wait */
        } else {
            int rc = lease_cold(t, id, slot, w);

            if (rc == -EINVAL)
                goto wrong_size; /* stored at another size (tier_cold_get) */
            if (rc < 0)
                break;
            (*pending)++;
        }
        e = lease(t, id);
        if ((flags & TIER_GET_PROMOTE) && t->hot && e->level != TIER_L_HOT)
            e->flags |= IDX_F_WANTHOT; /* copied up once its leases are back */
        offs[i] = e->off;
    }
    goto out;
wrong_size:
    /* a block of another size: -EINVAL, unless a read for the caller is in
     * flight already; its answer is then the leading run before this key,
     * as a wait cannot be taken back (the next get of it is the -EINVAL) */
    if (!pending || *pending == 0)
        goto out_inval;
out:
    t->st.gets++;
    t->st.get_blocks += i;
    t->st.hits[TIER_L_WARM] += warm;
    t->st.hits[TIER_L_HOT] += hot;
    t->st.bytes_out[TIER_L_WARM] += i * a->ns->block_bytes;
    t->st.misses += n - i;
    t->st.leases_active += i;
    return (int)i;
out_inval:
    t->st.leases_active += i; /* tier_release takes them off again */
    tier_release(t, ids, i, false);
    return -EINVAL;
}

void tier_release(struct tier *t, const uint32_t *ids, size_t n, bool reclaimed)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t id = TIER_LEASE_ID(ids[i]);
        struct idx_entry *e = idx_at(t->idx, id);

        e->leases--;
        e->flags |= IDX_F_REUSED; /* read: a touch after its put, for admission */
        if (ids[i] & TIER_LEASE_HOT) {
            e->hleases--;
            /* the last in-place reader of a hot copy the block has left */
            if (e->hleases == 0 && (e->flags & IDX_F_HOTKEPT)) {
                tier_ram_free(t->hram, e->hoff);
                e->flags &= (uint16_t)~IDX_F_HOTKEPT;
            }
        }
        if (tier_drop_idle_ghost(t, id))
            continue; /* a block lost while leased (a failed promotion) goes now */
        tier_settle(t, id, false);
        tier_orphan_check(t, id);
        tier_maybe_hot_up(t, id);
    }
    t->st.leases_active -= n;
    if (reclaimed)
        t->st.reclaimed += n;
}
