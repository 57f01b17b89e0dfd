/* SPDX-License-Identifier: MIT */
/*
 * tier_restart.c - restart and shutdown: the cold tier indexed at start
 * (served at once), and the warm tier written to disk at a clean stop.
 */
#include <errno.h>

#include "tier_int.h"

struct load {
    struct tier *t;
    int n, err;
};

static int load_one(void *ctx, uint32_t ns, const struct tier_key *key,
                    const struct tier_key *parent, uint64_t len)
{
    struct load *l = ctx;
    struct idx_entry *e;
    uint32_t id;
    int rc;

    (void)parent; /* linked in a second pass, once every entry exists */
    (void)len;
    if (idx_find(l->t->idx, ns, key) != TIER_NONE)
        return 0;
    rc = idx_insert(l->t->idx, ns, key, &id);
    if (rc < 0)
        return rc;
    e = idx_at(l->t->idx, id);
    e->state = IDX_COMMITTED;
    e->level = TIER_L_COLD;
    e->flags = IDX_F_COLD;
    l->t->st.blocks[TIER_L_COLD]++;
    l->n++;
    return 0;
}

static int link_one(void *ctx, uint32_t ns, const struct tier_key *key,
                    const struct tier_key *parent, uint64_t len)
{
    struct load *l = ctx;
    uint32_t id = idx_find(l->t->idx, ns, key), p;

    (void)len;
    if (!parent || id == TIER_NONE || idx_at(l->t->idx, id)->parent != TIER_NONE)
        return 0;
    p = idx_find(l->t->idx, ns, parent);
    if (p == TIER_NONE) {
        /* its parent never reached the disk (a crash): a ghost stands for it,
         * so that a put of the parent key (the engine recomputing the lost
         * prefix) links this durable block up again */
        int rc = idx_insert(l->t->idx, ns, parent, &p);

        if (rc < 0)
            return rc;
        idx_at(l->t->idx, p)->state = IDX_GHOST;
        l->t->orphans = true;
    }
    if (p != id)
        tier_set_parent(l->t, id, p);
    return 0;
}

int tier_load_cold(struct tier *t)
{
    struct load l = { .t = t };
    int rc;

    if (!t->cold)
        return 0;
    rc = tier_cold_scan(t->cold, load_one, &l);
    if (rc == 0)
        rc = tier_cold_scan(t->cold, link_one, &l);
    if (rc < 0)
        return rc;
    /* with every parent linked, the leaves go on the cold list */
    for (uint32_t id = 0; id < idx_id_limit(t->idx); id++)
        if (idx_at(t->idx, id)->state == IDX_COMMITTED)
            tier_settle(t, id, false);
    return l.n;
}

int tier_flush_to_cold(struct tier *t)
{
    uint32_t lim = idx_id_limit(t->idx);
    int rc;

    if (!t->cold)
        return 0;
    /* copies up land first (they may move blocks to the device), then what
     * is on the device comes down to warm */
    while (t->hot && tier_hot_inflight(t->hot))
        if (tier_hot_poll(t->hot, true) < 0)
            break;
    for (uint32_t id = 0; t->hot && id < lim; id++) {
        struct idx_entry *e = idx_at(t->idx, id);

        if (e->state == IDX_COMMITTED && e->level == TIER_L_HOT &&
            !(e->flags & IDX_F_MOVING) && tier_hot_down(t, id, tier_waiter(NULL), NULL) < 0)
            break; /* warm is full of pinned blocks: these stay on the device */
    }
    while (t->hot && tier_hot_inflight(t->hot))
        if (tier_hot_poll(t->hot, true) < 0)
            break;
    for (uint32_t id = 0; id < lim; id++) {
        struct idx_entry *e = idx_at(t->idx, id);

        if (e->state != IDX_COMMITTED || e->level != TIER_L_WARM ||
            (e->flags & (IDX_F_COLD | IDX_F_MOVING)))
            continue;
        while ((rc = tier_demote(t, id)) == -EBUSY)
            tier_cold_poll(t->cold, true);
        if (rc < 0)
            return rc;
    }
    return tier_cold_drain(t->cold);
}
