/* SPDX-License-Identifier: MIT */
/*
 * tier_slot.c - warm slots and segments: finding a slot for a block now
 * (a leaf leaves warm, or a segment of another size class is freed), and a
 * block leaving warm. It never waits for the disk: when only writes in
 * flight can make room it says -EAGAIN and asks the mover for room.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "tier_int.h"

/* Free id's warm slot now. With a cold copy the block stays (cold-only);
 * without one it is lost (dropped). id is committed, unleased, not moving. */
void tier_leave_warm(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);

    if (e->flags & (IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU))
        tier_lru_unlink(t, id);
    tier_pol_left(t, id, !(e->flags & IDX_F_COLD));
    if (t->cfg.on_evict)
        t->cfg.on_evict(t->cfg.evict_ctx, e->ns, &e->key, tier_slot_ptr(t, e), slot);
    /* on demotion: a block about to be lost goes to the remote tier (copied:
     * its slot is freed below) */
    if (!(e->flags & IDX_F_COLD) && t->remote &&
        t->cfg.remote_policy == TIER_REMOTE_ON_DEMOTION)
        tier_put_remote(t, id, false);
    tier_ram_free(t->ram, e->off);
    t->st.evictions[TIER_L_WARM]++;
    t->st.blocks[TIER_L_WARM]--;
    tier_warm_lose(t, id, true);
    if (!(idx_at(t->idx, id)->flags & IDX_F_COLD)) {
        t->st.dropped++;
        tier_remember(t, id, TIER_EV_DROPPED, TIER_L_WARM);
        tier_forget(t, id, true);
    } else {
        tier_settle(t, id, false); /* a disk-only leaf now: newest on the cold list */
    }
}

/* The disk-only leaf the disk evicts first: the least recently demoted
 * one that no durable commit still waiting vouches for (TIER_NONE: none).
 * The holds of commits answered go first: their waiters may wait again (a
 * get under the same pointer), and must not hold a block for them then.
 * At every call: a prune only when the oldest leaf was held let a stale
 * hold outlive walks that did not prune, until its waiter waited again and
 * made it look live (review of c56382b; the test
 * a_stale_hold_outlives_no_walk_for_a_victim). */
static uint32_t cold_victim(struct tier *t)
{
    uint32_t v = t->clru.tail;

    if (t->dholds)
        tier_dholds_prune(t);
    while (v != TIER_NONE && t->dholds && tier_dheld(t, v))
        v = idx_at(t->idx, v)->prev;
    return v;
}

/* Disk-only leaves past the oldest one a write looks at for its room. */
#define ROOM_LOOK 32

int tier_cold_make_room(struct tier *t, uint64_t len)
{
    uint32_t v = cold_victim(t), u = v;
    struct idx_entry *e;
    int rc;

    if (v == TIER_NONE)
        return -ENOSPC;
    e = idx_at(t->idx, v);
    /* Blocks of several sizes share the disk (namespaces, hybrid groups),
     * and first fit leaves holes between them: the oldest leaf's space may
     * open none this write fits, and evicting oldest first then took leaf
     * after leaf, each for nothing (the simulation's small disk, 32 and 48
     * KiB blocks). A younger leaf among the next few whose space fits goes
     * instead: one eviction for one write. With one size the oldest always
     * fits, so the order is LRU's as before. */
    if (!tier_cold_frees(t->cold, e->ns, &e->key, len)) {
        for (int i = 0; i < ROOM_LOOK && (u = idx_at(t->idx, u)->prev) != TIER_NONE; i++) {
            const struct idx_entry *ue = idx_at(t->idx, u);

            if (t->dholds && tier_dheld(t, u))
                continue; /* vouched for by a commit still waiting */
            if (tier_cold_frees(t->cold, ue->ns, &ue->key, len)) {
                v = u;
                break;
            }
        }
        e = idx_at(t->idx, v);
    }
    rc = tier_cold_remove(t->cold, e->ns, &e->key);
    if (rc < 0 && rc != -ENOENT)
        return rc;
    tier_lru_unlink(t, v);
    t->st.blocks[TIER_L_COLD]--;
    t->st.evictions[TIER_L_COLD]++;
    tier_remember(t, v, TIER_EV_EVICTED, TIER_L_COLD);
    tier_forget(t, v, true);
    return 0;
}

/* Dropping a block that is not on disk is allowed only when no tier below
 * can take it: no cold tier, a failed one, or a full one with nothing of its
 * own left to evict. Otherwise warm waits for its mover (a tiering store
 * demotes before it drops). */
static bool may_drop_dirty(struct tier *t)
{
    struct tier_cold_stats cs;

    if (!t->cold)
        return true;
    tier_cold_stats_get(t->cold, &cs);
    return cs.failed || (cold_victim(t) == TIER_NONE &&
                         cs.bytes_used + tier_ram_seg_bytes(t->ram) > cs.bytes_capacity);
}

/* inside[i] = the children of segment s's i-th block (class c) that are
 * in the segment too and have no copy on disk (they leave with it). */
static void count_inside(struct tier *t, uint32_t s, int c, const uint32_t *tags,
                         uint32_t nslots, uint32_t *inside)
{
    uint64_t seg = tier_ram_seg_bytes(t->ram);

    memset(inside, 0, nslots * sizeof(*inside));
    for (uint32_t i = 0; i < nslots; i++) {
        const struct idx_entry *e, *p;

        if (tags[i] == TIER_RAM_NOTAG)
            continue;
        e = idx_at(t->idx, tags[i]);
        if (e->parent == TIER_NONE)
            continue;
        p = idx_at(t->idx, e->parent);
        if (!(e->flags & IDX_F_COLD) && p->level == TIER_L_WARM &&
            p->state == IDX_COMMITTED && p->off / seg == s)
            inside[(p->off - (uint64_t)s * seg) / tier_ram_class_slot(t->ram, c)]++;
    }
}

/* Every block of segment s leaves warm, children first (highest slot last
 * written is not an order): a block goes only once no child of it is left
 * in the segment. */
static void empty_segment(struct tier *t, uint32_t s)
{
    const uint32_t *tags;
    uint32_t nslots;

    tier_ram_seg_info(t->ram, s, &tags, &nslots);
    for (bool again = true; again;) {
        again = false;
        for (uint32_t i = 0; i < nslots; i++) {
            const struct idx_entry *e;

            if (tags[i] == TIER_RAM_NOTAG)
                continue;
            e = idx_at(t->idx, tags[i]);
            if (!(e->flags & IDX_F_COLD) && e->nchild > 0) {
                again = true; /* its children in this segment go first */
                continue;
            }
            tier_leave_warm(t, tags[i]); /* clears the slot's tag; the array stays in place */
        }
    }
}

/* Free a whole segment of another class for class cls: the one with the
 * fewest blocks among those whose blocks are all committed, unleased and
 * not moving. Evicting blocks of another class one by one in LRU order
 * would rarely empty a segment and could drain the pool for one slot; this
 * frees only what gives a segment back, or nothing. O(slots in the pool):
 * it runs only when a size class has outgrown its segments and has no leaf
 * of its own. */
static int free_segment(struct tier *t, int cls)
{
    uint32_t best = UINT32_MAX, best_live = UINT32_MAX;
    const uint32_t *tags;
    uint32_t nslots, *inside = NULL, cap = 0;
    bool drop = may_drop_dirty(t);

    for (uint32_t s = 0; s < tier_ram_nseg(t->ram); s++) {
        int c = tier_ram_seg_info(t->ram, s, &tags, &nslots);
        uint32_t live = 0;
        bool ok = c >= 0 && c != cls;

        if (!ok)
            continue;
        /* children of each block inside this segment that go with it (no
         * copy on disk: they leave the index): a block without a copy on
         * disk may go only if all of its children go too */
        if (nslots > cap) {
            uint32_t *n = realloc(inside, nslots * sizeof(*n));

            if (!n) {
                free(inside);
                return -ENOMEM;
            }
            inside = n;
            cap = nslots;
        }
        count_inside(t, s, c, tags, nslots, inside);
        for (uint32_t i = 0; ok && i < nslots; i++) {
            const struct idx_entry *e;

            if (tags[i] == TIER_RAM_NOTAG)
                continue;
            e = idx_at(t->idx, tags[i]);
            /* what can leave: on disk already, or (when dropping is allowed)
             * a block whose every child leaves with it */
            ok = e->state == IDX_COMMITTED && e->level == TIER_L_WARM && e->leases == 0 &&
                 !(e->flags & IDX_F_MOVING) &&
                 ((e->flags & IDX_F_COLD) || (drop && e->nchild == inside[i]));
            live++;
        }
        if (ok && live < best_live) {
            best = s;
            best_live = live;
        }
    }
    free(inside);
    if (best == UINT32_MAX)
        return -ENOSPC;
    empty_segment(t, best);
    return 0;
}

/* The oldest block of class cls on disk too and free to leave warm, leaf
 * or not (its children stay wherever they are). O(slots of the class): only
 * when no leaf can go, e.g. a chain whose every block is clean and whose
 * tail is the parent of the put being made. */
static uint32_t clean_inner(struct tier *t, int cls)
{
    uint32_t best = TIER_NONE, age = 0;
    const uint32_t *tags;
    uint32_t nslots;

    for (uint32_t s = 0; s < tier_ram_nseg(t->ram); s++) {
        if (tier_ram_seg_info(t->ram, s, &tags, &nslots) != cls)
            continue;
        for (uint32_t i = 0; i < nslots; i++) {
            const struct idx_entry *e;
            uint32_t a;

            if (tags[i] == TIER_RAM_NOTAG)
                continue;
            e = idx_at(t->idx, tags[i]);
            if (e->state != IDX_COMMITTED || e->level != TIER_L_WARM || e->leases ||
                (e->flags & IDX_F_MOVING) || !(e->flags & IDX_F_COLD))
                continue;
            a = t->clock - e->stamp;
            if (best == TIER_NONE || a > age) {
                best = tags[i];
                age = a;
            }
        }
    }
    return best;
}

/* The oldest dirty leaf of class cls that nothing depends on. O(leaves of
 * the class): it runs only when the disk is full of what it cannot evict. */
uint32_t tier_dirty_droppable(struct tier *t, int cls)
{
    uint32_t v = tier_lru_tail(t, cls, TIER_LRU_DIRTY);

    /* the policy's choice, if nothing depends on it; else its lists in
     * order (under keep the leaves not kept first, under reuse the tips) */
    if (v != TIER_NONE && tier_droppable(idx_at(t->idx, v)))
        return v;
    for (int l = 0; l < tier_pol_nlists(t); l++)
        for (v = t->lru[cls][l][TIER_LRU_DIRTY].tail; v != TIER_NONE;
             v = idx_at(t->idx, v)->prev)
            if (tier_droppable(idx_at(t->idx, v)))
                return v;
    return TIER_NONE;
}

/* Start writing to disk (and keep in warm: clean, they can leave at once)
 * blocks of class cls that are not on disk and have children, which the
 * mover, writing leaves, never reaches: a chain being extended has no leaf
 * in warm. O(slots of the class), only when nothing else makes room.
 * Returns the writes started. */
static unsigned write_inner(struct tier *t, int cls)
{
    const uint32_t *tags;
    uint32_t nslots;
    unsigned n = 0;

    if (!t->cold)
        return 0;
    for (uint32_t s = 0; s < tier_ram_nseg(t->ram) && n < TIER_DEMOTE_INFLIGHT; s++) {
        if (tier_ram_seg_info(t->ram, s, &tags, &nslots) != cls)
            continue;
        for (uint32_t i = 0; i < nslots && n < TIER_DEMOTE_INFLIGHT; i++) {
            const struct idx_entry *e;

            if (tags[i] == TIER_RAM_NOTAG)
                continue;
            e = idx_at(t->idx, tags[i]);
            if (e->state != IDX_COMMITTED || e->level != TIER_L_WARM ||
                (e->flags & (IDX_F_COLD | IDX_F_MOVING)))
                continue;
            if (tier_demote_for(t, tags[i], false, tier_waiter(NULL)) < 0)
                return n;
            n++;
        }
    }
    return n;
}

/* Whether the warm mover can make room: writes to disk in flight, or
 * dirty leaves it can write, on a disk that works. */
static bool mover_can(struct tier *t)
{
    struct tier_cold_stats cs;

    if (!t->cold)
        return false;
    tier_cold_stats_get(t->cold, &cs);
    if (cs.failed)
        return false;
    if (t->demoting_bytes || t->hot_moving)
        return true;
    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        if (tier_lru_tail(t, c, TIER_LRU_DIRTY) != TIER_NONE)
            return true;
    return false;
}

/* A slot of class cls for entry id, now: the class's own LRU leaves leave
 * warm, else a segment of another class is freed. */
int tier_alloc_slot(struct tier *t, int cls, uint32_t id, uint64_t *off)
{
    for (;;) {
        int rc = tier_ram_alloc(t->ram, cls, id, off), verdict;
        uint32_t v;

        if (rc != -ENOSPC)
            return rc;
        /* leaving warm is free for a block on disk: a leaf, else any */
        v = tier_lru_tail(t, cls, TIER_LRU_CLEAN);
        if (v == TIER_NONE && (v = tier_admit_victim(t, cls, &verdict)) != TIER_NONE) {
            tier_admit_refuse(t, v, verdict); /* it would be dropped, not written, anyway */
            continue;
        }
        if (v == TIER_NONE && t->demoting_bytes > 0 && !may_drop_dirty(t)) {
            /* writes in flight free or clean slots soon: no O(pool) scans
             * for a caller that will retry */
            t->room_wanted = true;
            return -EAGAIN;
        }
        if (v == TIER_NONE)
            v = clean_inner(t, cls);
        if (v == TIER_NONE && may_drop_dirty(t))
            v = tier_dirty_droppable(t, cls); /* lost, but nothing below can take it */
        if (v != TIER_NONE) {
            tier_leave_warm(t, v);
            continue;
        }
        if (free_segment(t, cls) == 0)
            continue;
        /* full of blocks on their way to disk, or waiting to go: the mover
         * makes room, whatever the watermarks say; the caller retries */
        if (mover_can(t) || write_inner(t, cls) > 0) {
            t->room_wanted = true; /* the mover writes some at its next turn */
            return -EAGAIN;
        }
        return -ENOSPC; /* everything is leased, reserved or moving */
    }
}
