/* SPDX-License-Identifier: MIT */
/*
 * tier_mover.c - the cold mover: demotions from warm to cold (the
 * background mover between the watermarks, an operator's flush, a single
 * write), and promotions from cold back into warm.
 *
 * Design note: warm and cold. A block is in warm (level WARM: a slot holds
 * it), on disk only (level COLD), or both (WARM with IDX_F_COLD). Leaving
 * warm, a block with a cold copy just gives its slot back; one without is
 * demoted (written to cold from its slot, which stays pinned until the write
 * is durable) by the background mover (tier_maintain), or dropped when there
 * is no cold tier or a slot is needed right now (a put never waits for a
 * disk write). A dropped block with children stays as an invisible ghost so
 * that its children's parent links remain valid. A get of a cold block
 * promotes it: a warm slot is taken, the cold copy read into it and
 * verified, and the getter's lease waits for that read (tier_get with pending).
 */
#include <errno.h>
#include <stdlib.h>

#include "tier_int.h"

static void on_demoted(void *ctx, int rc)
{
    struct move *m = ctx;
    struct tier *t = m->t;
    struct idx_entry *e = tier_move_landed(m);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);

    t->demoting_bytes -= slot;
    t->flush_inflight -= m->flush;
    e->flags &= (uint16_t)~IDX_F_DEMOTING;
    if (rc < 0) {
        t->st.cold_errors++; /* the mover's block is dropped below; others stay */
    } else {
        e->flags |= IDX_F_COLD;
        t->st.demotions++;
        t->st.blocks[TIER_L_COLD]++;
        t->st.bytes_in[TIER_L_COLD] += slot;
    }
    /* demoted by the mover: it leaves warm; written through or for a
     * durable commit: it stays. A mover's write that failed drops the
     * block (counted) if nothing below depends on it, as one refused at once
     * does: warm needs the room, and writing it again at once would spin on
     * a disk that keeps failing. */
    if (m->evict && e->leases == 0 && e->state == IDX_COMMITTED && e->nwarm == 0 &&
        !(e->flags & IDX_F_MOVING) && (rc == 0 || tier_droppable(e)))
        tier_leave_warm(t, m->id);
    else
        tier_settle(t, m->id, false);
    tier_orphan_check(t, m->id);
    /* on disk for the durable commits that waited: held there until each
     * is answered, as a block on disk already is (a later write that makes
     * room must not evict it before the ack that vouches for it) */
    for (uint32_t i = 0; rc == 0 && i < m->ws.n; i++)
        if (tier_dhold_add(t, m->id, m->ws.w[i]) < 0)
            rc = -ENOMEM; /* not held: not vouched for */
    tier_move_done(t, m, rc);
}

/* Start writing id (committed, in warm, no cold copy) to cold. evict: leave
 * warm once durable (the mover); waiter: who is told when it is durable. */
int tier_demote_for(struct tier *t, uint32_t id, bool evict, struct waiter w)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);
    struct move *m = tier_move_new(&(struct move){ .t = t, .id = id, .evict = evict }, w);
    const struct tier_key *parent = NULL;
    struct dscope sc;
    int rc;

    if (!m)
        return -ENOMEM;
    tier_move_scope(t, m, &sc); /* making room on disk may tell others */
    if (e->parent != TIER_NONE)
        parent = &idx_at(t->idx, e->parent)->key;
    /* a full disk makes room leaf-first; -ENOSPC only when nothing can go */
    while ((rc = tier_cold_put(t->cold, e->ns, &e->key, parent, tier_slot_ptr(t, e),
                               slot, on_demoted, m)) == -ENOSPC &&
           tier_cold_make_room(t, slot) == 0) {
        e = idx_at(t->idx, id);
        parent = e->parent != TIER_NONE ? &idx_at(t->idx, e->parent)->key : NULL;
    }
    tier_dscope_pop(t, &sc);
    if (rc < 0) {
        free(m->ws.w);
        free(m);
        return rc;
    }
    tier_admit_spend(t, slot);
    e = idx_at(t->idx, id);
    e->flags |= IDX_F_DEMOTING; /* pins the slot until the write is durable */
    tier_settle(t, id, false);
    t->demoting_bytes += slot;
    tier_moves_add(t, m);
    /* on demotion: the mover's block goes to the remote tier as well */
    if (evict && t->remote && t->cfg.remote_policy == TIER_REMOTE_ON_DEMOTION)
        tier_put_remote(t, id, true);
    return 0;
}

int tier_demote(struct tier *t, uint32_t id)
{
    return tier_demote_for(t, id, true, tier_waiter(NULL));
}

/* Write the ancestors of id that have no cold copy yet, up to max of them:
 * a demoted leaf's parent becomes the next leaf, and leaving warm is free
 * for a block already on disk. A chain thus goes to disk in one sweep, in
 * sequence, instead of one block per turn of the mover. */
static unsigned demote_ancestors(struct tier *t, uint32_t id, unsigned max)
{
    unsigned n = 0;

    for (uint32_t p = idx_at(t->idx, id)->parent; p != TIER_NONE && n < max;
         p = idx_at(t->idx, p)->parent) {
        const struct idx_entry *e = idx_at(t->idx, p);

        if (e->state != IDX_COMMITTED || e->level != TIER_L_WARM ||
            (e->flags & (IDX_F_COLD | IDX_F_MOVING)))
            break;
        if (tier_demote(t, p) < 0)
            break;
        n++;
    }
    return n;
}

/* An operator's flush, a slice per turn: write the dirty warm blocks of
 * the next ids to disk (they stay in warm), at most as many at once as the
 * mover, so requests keep flowing; their completions bring the next turn.
 * Done once every id was seen and its own writes are durable. */
static size_t flush_turn(struct tier *t)
{
    uint32_t lim = idx_id_limit(t->idx);
    size_t n = 0;

    while (t->flush_at < lim && t->flush_inflight < TIER_DEMOTE_INFLIGHT) {
        const struct idx_entry *e = idx_at(t->idx, t->flush_at);

        if (e->state == IDX_COMMITTED && e->level == TIER_L_WARM &&
            !(e->flags & (IDX_F_COLD | IDX_F_MOVING))) {
            int rc = tier_demote_for(t, t->flush_at, false, tier_waiter(NULL));

            if (rc == -EBUSY)
                break; /* the disk's queue is full: this id again next turn */
            if (rc == 0) {
                t->moves->flush = true; /* demote_for put its move first */
                t->flush_inflight++;
                n++;
            }
        }
        t->flush_at++;
    }
    if (t->flush_at >= lim && t->flush_inflight == 0)
        t->flushing = false;
    return n;
}

void tier_flush_begin(struct tier *t)
{
    if (!t->cold)
        return;
    t->flushing = true;
    t->flush_at = 0;
}

bool tier_flush_busy(const struct tier *t)
{
    return t->flushing;
}

/* The disk is full of what it cannot evict, or failed: the block to drop
 * for room, one nothing depends on (v, else the oldest other that
 * qualifies: the tail of some chain), or TIER_NONE. */
static uint32_t drop_for_room(struct tier *t, uint32_t v)
{
    if (tier_droppable(idx_at(t->idx, v)))
        return v;
    v = TIER_NONE;
    for (int c = 0; c < TIER_RAM_CLASSES && v == TIER_NONE; c++)
        v = tier_dirty_droppable(t, c);
    return v;
}

/* One turn of the warm mover: leaf-first LRU blocks leave warm, written to
 * disk first when they have no copy there, while warm is draining towards
 * its low mark or a put wants room (wanted blocks). Returns the blocks
 * handled. */
static size_t warm_drain(struct tier *t, unsigned wanted)
{
    unsigned inflight = 0;
    size_t n = 0;

    while ((t->warm_draining && tier_ram_used(t->ram) - t->demoting_bytes > t->low_bytes) ||
           wanted > 0) {
        uint32_t v = tier_pick_victim(t), clean;
        /* only a put's want drives it: written and kept (clean), so the put
         * takes exactly the room it needs; past the watermarks, written and
         * evicted */
        bool below = !t->warm_draining ||
                     tier_ram_used(t->ram) - t->demoting_bytes <= t->low_bytes;
        struct idx_entry *e;
        int rc, verdict;

        if (wanted)
            wanted--;
        if (v == TIER_NONE)
            break;
        e = idx_at(t->idx, v);
        if (e->flags & IDX_F_COLD || !t->cold) {
            tier_leave_warm(t, v); /* on disk already, or (no cold tier) a childless leaf */
            n++;
            continue;
        }
        verdict = tier_admit_verdict(t, v);
        if (verdict != TIER_ADMIT) {
            tier_admit_refuse(t, v, verdict); /* not worth the disk's wear: dropped */
            n++;
            continue;
        }
        /* bounded: the rest waits for the next turn of the loop */
        if (inflight >= TIER_DEMOTE_INFLIGHT)
            break;
        rc = below ? tier_demote_for(t, v, false, tier_waiter(NULL)) : tier_demote(t, v);
        if (rc == -EBUSY)
            break;
        if (rc == -ENOSPC && (clean = tier_pick_clean(t)) != TIER_NONE) {
            /* the disk is full of what it cannot evict: a block on disk
             * leaving warm loses nothing and may give the disk a leaf to
             * evict, so that goes before anything is dropped */
            tier_leave_warm(t, clean);
            n++;
            continue;
        }
        if (rc < 0) {
            v = drop_for_room(t, v);
            if (v == TIER_NONE)
                break; /* nothing can go: tried again next turn */
            tier_leave_warm(t, v);
        } else {
            unsigned up = demote_ancestors(t, v, TIER_DEMOTE_INFLIGHT - inflight - 1);

            inflight += 1 + up;
            t->st.cold_admitted += 1 + up;
        }
        n++;
    }
    return n;
}

size_t tier_maintain(struct tier *t)
{
    size_t n = tier_hot_maintain(t);
    unsigned wanted = 0;

    if (t->orphans)
        tier_sweep_orphans(t);
    if (t->dwaits)
        tier_dwaits_retry(t);
    if (t->flushing)
        n += flush_turn(t);
    /* group commit: once no write is in flight any more, the ones that
     * completed are made durable (a sync already in flight takes them next);
     * while writes are in flight a full batch starts its own sync */
    if (t->cold)
        tier_cold_flush_idle(t->cold);
    if (tier_ram_used(t->ram) - t->demoting_bytes > t->high_bytes)
        t->warm_draining = true;
    if (tier_ram_used(t->ram) - t->demoting_bytes <= t->low_bytes)
        t->warm_draining = false;
    if (t->room_wanted) {
        /* a put found warm full of blocks not on disk: write some of them
         * whatever the watermarks say (with --high-wm 1.0 they never would) */
        wanted = TIER_DEMOTE_INFLIGHT;
        t->room_wanted = false;
    }
    if (!t->warm_draining && !wanted)
        return n;
    return n + warm_drain(t, wanted);
}

static void on_promoted(void *ctx, int rc)
{
    struct move *m = ctx;
    struct tier *t = m->t;
    struct idx_entry *e = tier_move_landed(m);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);

    if (rc == 0) {
        t->st.promotions++;
        t->st.blocks[TIER_L_WARM]++;
        t->st.bytes_out[TIER_L_COLD] += slot;
        t->st.hits[TIER_L_COLD]++;
        tier_set_res(t, m->id, TIER_L_WARM, false, false);
        tier_settle(t, m->id, false);
        tier_maybe_hot_up(t, m->id); /* a prefetch that asked for hot: nobody holds it */
    } else {
        t->st.cold_errors++;
        tier_set_res(t, m->id, TIER_L_COLD, false, false);
        tier_ram_free(t->ram, e->off);
        /* -EIO: the record may still be readable later; otherwise it is gone */
        if (rc != -EIO || !tier_cold_has(t->cold, e->ns, &e->key)) {
            if (e->flags & IDX_F_COLD)
                t->st.blocks[TIER_L_COLD]--;
            tier_remember(t, m->id, rc == -EBADMSG ? TIER_EV_CHECKSUM : TIER_EV_IO_ERROR,
                          TIER_L_COLD);
            tier_forget(t, m->id, false);
        } else {
            tier_settle(t, m->id, false);
        }
    }
    tier_orphan_check(t, m->id);
    tier_move_done(t, m, rc);
}

/* Start reading cold-only id into a new warm slot for blocks of slot bytes. */
int tier_promote(struct tier *t, uint32_t id, uint64_t slot, struct waiter w)
{
    struct idx_entry *e;
    struct move *m;
    struct dscope sc;
    uint64_t off;
    int cls = tier_ram_class(t->ram, slot), rc;

    if (cls < 0)
        return cls;
    m = tier_move_new(&(struct move){ .t = t, .id = id, .promote = true }, w);
    if (!m)
        return -ENOMEM;
    if (idx_at(t->idx, id)->flags & (IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU))
        tier_lru_unlink(t, id); /* before cls changes: it is not a cold leaf any more */
    /* counted in warm by its parent before the slot is found, so making room
     * cannot take the block before it in its chain */
    tier_set_res(t, id, TIER_L_COLD, true, false);
    tier_move_scope(t, m, &sc); /* making room in warm may tell others */
    rc = tier_alloc_slot(t, cls, id, &off);
    tier_dscope_pop(t, &sc);
    if (rc < 0)
        goto out_unmark;
    e = idx_at(t->idx, id);
    rc = tier_cold_get(t->cold, e->ns, &e->key, (uint8_t *)tier_ram_base(t->ram) + off, slot,
                       NULL, on_promoted, m);
    if (rc < 0) {
        tier_ram_free(t->ram, off);
        goto out_unmark;
    }
    e = idx_at(t->idx, id);
    e->cls = (uint8_t)cls;
    e->off = off;
    tier_moves_add(t, m);
    return 0;
out_unmark:
    tier_set_res(t, id, TIER_L_COLD, false, false);
    tier_settle(t, id, false);
    free(m->ws.w);
    free(m);
    return rc;
}
