/* SPDX-License-Identifier: MIT */
/*
 * tier_admit.c - NVMe admission: which blocks leaving warm the mover writes
 * to cold (a second touch, tier_cfg.admit), and the write budget per window
 * every write to cold spends. It decides and counts; the mover
 * (tier_mover.c) and the slot finder (tier_slot.c) act on its verdicts.
 *
 * Design note. Why a second touch: on the bundled conversation trace only
 * 24% of the blocks put are ever asked for again, and a block read (or put
 * again) once is the one worth the drive's wear. Replayed (make
 * bench-admission), it cuts disk writes by 77% and even raises the hit rate
 * 3% with a cold tier as large as warm (one-shot blocks no longer push
 * reused ones off the disk); with one four times warm it still cuts 78%,
 * but loses 22% of the hit rate (a conversation's next turn comes after
 * its blocks left warm unread): that operator trades wear for hits with
 * TIER_ADMIT_ALL. The store already remembers what it dropped (tier_why.c),
 * so a block refused once and then put again is a second touch too.
 * A block with children on disk is always admitted: dropping it would cut
 * them off (a lookup stops at the first miss), and leaf-first eviction
 * refuses the chain's tail first, so what stays is still a usable prefix.
 */
#include "tier_int.h"

#define DAY_MS 86400000ull

static uint64_t clock_now(const struct tier *t)
{
    return t->cfg.clock_ms ? t->cfg.clock_ms(t->cfg.clock_ctx) : tier_now_ms();
}

/* The budget's window: a new one starts once the last has run its length
 * (a clock that went back starts one too). */
static void window_roll(struct tier *t)
{
    uint64_t now = clock_now(t), len = t->cfg.cold_budget_ms ? t->cfg.cold_budget_ms : DAY_MS;

    if (!t->budget_started || now < t->budget_start || now - t->budget_start >= len) {
        t->budget_started = true;
        t->budget_start = now;
        t->budget_used = 0;
    }
}

void tier_admit_spend(struct tier *t, uint64_t bytes)
{
    if (!t->cfg.cold_budget_bytes)
        return;
    window_roll(t);
    t->budget_used += bytes;
}

int tier_admit_verdict(struct tier *t, uint32_t id)
{
    const struct idx_entry *e = idx_at(t->idx, id);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);

    if (!tier_droppable(e))
        return TIER_ADMIT; /* children on disk (or a copy there) depend on it */
    if (t->write_through)
        return TIER_ADMIT; /* its write at commit found the disk's queue full: still owed */
    if (t->dwaits && tier_dwaited(t, id))
        return TIER_ADMIT; /* a durable commit's write, waiting for room in the disk's queue */
    if (t->cfg.admit == TIER_ADMIT_REUSED && !(e->flags & IDX_F_REUSED))
        return TIER_REFUSE_ONCE;
    if (t->cfg.cold_budget_bytes) {
        window_roll(t);
        if (t->budget_used + slot > t->cfg.cold_budget_bytes)
            return TIER_REFUSE_BUDGET;
    }
    return TIER_ADMIT;
}

void tier_admit_refuse(struct tier *t, uint32_t id, int verdict)
{
    if (verdict == TIER_REFUSE_BUDGET)
        t->st.cold_over_budget++;
    else
        t->st.cold_refused++;
    tier_leave_warm(t, id); /* dropped: counted there, and remembered for a re-put */
}

uint32_t tier_admit_victim(struct tier *t, int cls, int *verdict)
{
    uint32_t v = tier_lru_tail(t, cls, TIER_LRU_DIRTY);

    /* O(1): only the oldest leaf, the one the mover would take next */
    if (!t->cold || v == TIER_NONE || !tier_warm_leaf(t, idx_at(t->idx, v)))
        return TIER_NONE;
    *verdict = tier_admit_verdict(t, v);
    return *verdict == TIER_ADMIT ? TIER_NONE : v;
}

void tier_admit_seen(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint8_t ev, lvl;
    uint64_t at;

    if (t->cfg.admit != TIER_ADMIT_REUSED)
        return;
    /* dropped from warm or evicted from disk before: this put is its second touch */
    if (tier_why_find(t->why, e->ns, &e->key, &ev, &lvl, &at) &&
        (ev == TIER_EV_DROPPED || ev == TIER_EV_EVICTED))
        e->flags |= IDX_F_REUSED;
}
