/* SPDX-License-Identifier: MIT */
/*
 * tier_hot_mover.c - the hot mover: copies from the device pool down into
 * warm (hot past its watermarks, a warm reader, a durable commit) and up
 * from warm into hot for a getter that asked (TIER_GET_PROMOTE).
 */
#include <errno.h>
#include <stdlib.h>

#include "tier_int.h"

static void on_hot_down(void *ctx, int rc)
{
    struct move *m = ctx;
    struct tier *t = m->t;
    struct idx_entry *e = tier_move_landed(m);
    uint64_t hslot = tier_ram_class_slot(t->hram, e->cls);
    struct waiters dws = m->dws;
    struct dscope sc = { .w = dws.w, .n = dws.n };
    uint32_t id = m->id;

    t->hot_moving -= hslot;
    e->flags &= (uint16_t)~IDX_F_HOTDOWN;
    if (rc == 0) {
        /* the block now lives in its warm slot; the device slot goes back,
         * unless readers hold it in place: then it is theirs until the last
         * one releases it (a slot returns only when nothing holds it) */
        if (e->hleases > 0) {
            e->hoff = e->off;
            e->hcls = e->cls;
            e->flags |= IDX_F_HOTKEPT;
        } else {
            tier_ram_free(t->hram, e->off);
        }
        e->off = m->warm_off;
        e->cls = m->warm_cls;
        t->st.evictions[TIER_L_HOT]++;
        t->st.blocks[TIER_L_HOT]--;
        t->st.blocks[TIER_L_WARM]++;
        t->st.bytes_in[TIER_L_WARM] += tier_ram_class_slot(t->ram, m->warm_cls);
        tier_set_level(t, m->id, TIER_L_WARM, false);
    } else {
        tier_ram_free(t->ram, m->warm_off); /* stays in hot; tried again later */
        t->st.cold_errors++;
    }
    tier_settle(t, m->id, false);
    tier_orphan_check(t, m->id);
    m->dws = (struct waiters){ 0 };
    /* durable commits that waited for the copy: now the write to disk. They
     * are off the list of moves meanwhile, and still wait (their holds on
     * disk last: a write below may make room) */
    tier_dscope_push(t, &sc);
    tier_move_done(t, m, rc);
    tier_durable_after(t, id, &dws, rc);
    tier_dscope_pop(t, &sc);
    free(dws.w);
}

/* The class in pool to for id's slot size (*slot gets it) in pool from:
 * a copy between hot and warm keeps the size. */
static int class_across(struct tier *t, uint32_t id, const struct tier_ram *from,
                        struct tier_ram *to, uint64_t *slot)
{
    *slot = tier_ram_class_slot(from, idx_at(t->idx, id)->cls);
    return tier_ram_class(to, *slot);
}

/* Start copying id (committed, in hot) down into a new warm slot. */
int tier_hot_down(struct tier *t, uint32_t id, struct waiter w, uint64_t *warm_off)
{
    uint64_t slot;
    int cls = class_across(t, id, t->hram, t->ram, &slot), rc;
    struct idx_entry *e;
    struct move *m;
    struct dscope sc;

    if (cls < 0)
        return cls;
    m = tier_move_new(&(struct move){ .t = t, .id = id, .hot_down = true, .warm_cls = (uint8_t)cls },
                      w);
    if (!m)
        return -ENOMEM;
    tier_move_scope(t, m, &sc); /* making room in warm may tell others */
    rc = tier_alloc_slot(t, cls, id, &m->warm_off);
    tier_dscope_pop(t, &sc);
    if (rc < 0)
        goto out_free;
    e = idx_at(t->idx, id);
    rc = tier_hot_copy_out(t->hot, (uint8_t *)tier_ram_base(t->ram) + m->warm_off, e->off, slot,
                           on_hot_down, m);
    if (rc < 0) {
        tier_ram_free(t->ram, m->warm_off);
        goto out_free;
    }
    e->flags |= IDX_F_HOTDOWN;
    tier_settle(t, id, false);
    t->hot_moving += slot;
    tier_moves_add(t, m);
    if (warm_off)
        *warm_off = m->warm_off;
    return 0;
out_free:
    free(m->ws.w);
    free(m);
    return rc;
}

/* Hot above its high watermark: copy leaf-first LRU blocks down to warm
 * until it would be at the low one (slots free as the copies land). */
size_t tier_hot_maintain(struct tier *t)
{
    size_t n = 0;

    if (!t->hot)
        return 0;
    /* hysteresis: once past the high mark, keep going (turn after turn, as
     * leaf after leaf becomes free to go) until the low mark is reached */
    if (tier_ram_used(t->hram) - t->hot_moving > t->hot_high)
        t->hot_draining = true;
    if (tier_ram_used(t->hram) - t->hot_moving <= t->hot_low)
        t->hot_draining = false;
    if (!t->hot_draining)
        return 0;
    while (tier_ram_used(t->hram) - t->hot_moving > t->hot_low && n < TIER_DEMOTE_INFLIGHT) {
        uint32_t v = tier_pick_hot_victim(t);

        if (v == TIER_NONE)
            break;
        /* only into room warm has below its own high mark: pushing further
         * would make warm drop blocks it has not written to disk yet; its
         * mover makes room and this one goes on next turn */
        if (tier_ram_used(t->ram) + tier_ram_class_slot(t->hram, idx_at(t->idx, v)->cls) >
            t->high_bytes) {
            t->warm_draining = true; /* ask the warm mover for room */
            break;
        }
        if (tier_hot_down(t, v, tier_waiter(NULL), NULL) < 0)
            break;
        n++;
    }
    return n;
}

static void on_hot_up(void *ctx, int rc)
{
    struct move *m = ctx;
    struct tier *t = m->t;
    struct idx_entry *e = tier_move_landed(m);

    e->flags &= (uint16_t)~IDX_F_HOTUP;
    /* the copy counts only if nobody read the warm slot meanwhile (a lease
     * or a write to disk holds its offset): then the hot copy is dropped */
    if (rc == 0 && e->state == IDX_COMMITTED && e->level == TIER_L_WARM && e->leases == 0 &&
        !(e->flags & IDX_F_MOVING)) {
        tier_ram_free(t->ram, e->off);
        e->off = m->hot_off;
        e->cls = m->hot_cls;
        e->flags &= ~IDX_F_WANTHOT;
        t->st.blocks[TIER_L_WARM]--;
        t->st.blocks[TIER_L_HOT]++;
        t->st.bytes_in[TIER_L_HOT] += tier_ram_class_slot(t->hram, m->hot_cls);
        t->st.hot_promotions++;
        tier_set_level(t, m->id, TIER_L_HOT, false);
    } else {
        tier_ram_free(t->hram, m->hot_off);
        if (rc < 0)
            t->st.cold_errors++;
    }
    tier_settle(t, m->id, false);
    tier_orphan_check(t, m->id);
    tier_move_done(t, m, rc);
}

/* Start copying id (committed, in warm, unleased, not moving) up into a hot
 * slot, for a getter that asked for it there. Only into room below hot's
 * high watermark: a promotion never makes hot push other blocks down. */
static int hot_up(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint64_t slot;
    int hcls = class_across(t, id, t->ram, t->hram, &slot), rc;
    struct move *m;

    if (hcls < 0)
        return hcls;
    if (tier_ram_used(t->hram) + tier_ram_class_slot(t->hram, hcls) > t->hot_high)
        return -ENOSPC;
    m = tier_move_new(&(struct move){ .t = t, .id = id, .hot_up = true, .hot_cls = (uint8_t)hcls },
                      tier_waiter(NULL));
    if (!m)
        return -ENOMEM;
    rc = tier_ram_alloc(t->hram, hcls, id, &m->hot_off);
    if (rc < 0)
        goto out_free;
    rc = tier_hot_copy_in(t->hot, m->hot_off, tier_slot_ptr(t, e), slot, on_hot_up, m);
    if (rc < 0) {
        tier_ram_free(t->hram, m->hot_off);
        goto out_free;
    }
    e->flags |= IDX_F_HOTUP; /* pins the warm slot: it is the copy's source */
    tier_settle(t, id, false);
    tier_moves_add(t, m);
    return 0;
out_free:
    free(m);
    return rc;
}

/* A block a getter wants in hot, once it is free to move. */
void tier_maybe_hot_up(struct tier *t, uint32_t id)
{
    const struct idx_entry *e = idx_at(t->idx, id);

    if (t->hot && (e->flags & IDX_F_WANTHOT) && e->state == IDX_COMMITTED &&
        e->level == TIER_L_WARM && e->leases == 0 && !(e->flags & IDX_F_MOVING))
        hot_up(t, id); /* no room or no memory: it stays in warm, still wanted */
}
