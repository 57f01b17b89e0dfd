/* SPDX-License-Identifier: MIT */
/*
 * tier_drop.c - taking blocks out of every tier: a client's remove, an
 * operator's purge of a namespace, and the sweep of orphans (blocks no
 * lookup can reach since a block above them was lost).
 */
#include <errno.h>
#include <stdlib.h>

#include "tier_int.h"

/* Take committed, unpinned id out of every tier, the disk included, for
 * reason ev. false when its disk copy could not be deleted (it stays). */
static bool drop_block(struct tier *t, uint32_t id, uint8_t ev)
{
    struct idx_entry *e = idx_at(t->idx, id);

    if (e->flags & IDX_F_COLD) {
        if (tier_cold_remove(t->cold, e->ns, &e->key) < 0)
            return false; /* the durable copy stays: so does the entry */
        t->st.blocks[TIER_L_COLD]--;
    }
    e = idx_at(t->idx, id);
    if (e->flags & (IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU))
        tier_lru_unlink(t, id);
    if (e->level == TIER_L_HOT) {
        tier_ram_free(t->hram, e->off);
        t->st.blocks[TIER_L_HOT]--;
        tier_warm_lose(t, id, true);
    }
    if (e->level == TIER_L_WARM) {
        tier_ram_free(t->ram, e->off);
        t->st.blocks[TIER_L_WARM]--;
        tier_warm_lose(t, id, true);
    }
    tier_remember(t, id, ev, idx_at(t->idx, id)->level);
    tier_forget(t, id, true);
    return true;
}

size_t tier_remove(struct tier_ns *ns, const struct tier_key *keys, size_t n)
{
    struct tier *t = ns->t;
    size_t done = 0;

    for (size_t i = n; i-- > 0;) {
        uint32_t id = idx_find(t->idx, ns->id, &keys[i]);
        struct idx_entry *e;

        if (id == TIER_NONE)
            continue;
        e = idx_at(t->idx, id);
        if (e->state != IDX_COMMITTED || e->leases || e->nchild ||
            (e->flags & IDX_F_MOVING))
            continue;
        if (!drop_block(t, id, TIER_EV_REMOVED))
            continue;
        t->st.removes++;
        done++;
    }
    return done;
}

/* A committed block whose parent is gone can be reached by no lookup. */
void tier_orphan_check(struct tier *t, uint32_t id)
{
    const struct idx_entry *e = idx_at(t->idx, id);

    if (e->state == IDX_COMMITTED && e->parent != TIER_NONE &&
        idx_at(t->idx, e->parent)->state == IDX_GHOST)
        t->orphans = true;
}

/* Drop every block in memory that no lookup can reach: a committed block
 * with a ghost somewhere above it (a parent lost: a failed read, a put
 * aborted under another client's, a put under a parent not stored) and no
 * copy on disk. A block on disk stays: a durable block must survive, and a
 * put of its lost prefix (an engine recomputing it) links it up again.
 * O(entries): each entry's reachability is found once, by a walk up that
 * stops at the first entry already known. Pinned ones (leased, moving) go
 * once they are free (their release or landing asks for another sweep). */
void tier_sweep_orphans(struct tier *t)
{
    enum { UNKNOWN = 0, REACHED = 1, CUT = 2 };
    uint32_t lim = idx_id_limit(t->idx), *path, depth;
    uint8_t *st;

    t->orphans = false;
    st = calloc(lim ? lim : 1, 1);
    path = malloc((lim ? lim : 1) * sizeof(*path));
    if (!st || !path) {
        t->orphans = true; /* tried again at the next turn */
        free(st);
        free(path);
        return;
    }
    for (uint32_t id = 0; id < lim; id++) {
        uint32_t p = id;
        uint8_t v;

        if (idx_at(t->idx, id)->state != IDX_COMMITTED || st[id])
            continue;
        depth = 0;
        /* up to the root, a ghost, or an entry already known */
        for (;;) {
            const struct idx_entry *e = idx_at(t->idx, p);

            if (st[p]) {
                v = st[p];
                break;
            }
            if (e->state == IDX_GHOST) {
                v = CUT;
                break;
            }
            path[depth++] = p;
            if (e->parent == TIER_NONE) {
                v = REACHED;
                break;
            }
            p = e->parent;
        }
        while (depth > 0)
            st[path[--depth]] = v;
    }
    for (uint32_t id = 0; id < lim; id++) {
        const struct idx_entry *e = idx_at(t->idx, id);

        /* entries freed by a drop below read as IDX_FREE when reached */
        if (st[id] != CUT || e->state != IDX_COMMITTED)
            continue;
        if (e->leases || (e->flags & (IDX_F_MOVING | IDX_F_COLD)))
            continue;
        drop_block(t, id, TIER_EV_DROPPED);
    }
    free(st);
    free(path);
}

int tier_purge_ns(struct tier_ns *tns)
{
    struct tier *t = tns->t;
    uint32_t lim = idx_id_limit(t->idx), ns = tns->id;
    int n = 0, rc;

    /* the namespace object stays: its callers' handles name it still */
    /* all or nothing: a block someone holds, writes or moves cannot go now */
    for (uint32_t id = 0; id < lim; id++) {
        const struct idx_entry *e = idx_at(t->idx, id);

        if (e->state != IDX_FREE && e->ns == ns &&
            (e->state == IDX_RESERVED || e->leases || (e->flags & IDX_F_MOVING)))
            return -EBUSY;
    }
    if (t->cold && (rc = tier_cold_remove_ns(t->cold, ns)) < 0)
        return rc; /* the disk copies stay: so does everything else */
    for (uint32_t id = 0; id < lim; id++) {
        struct idx_entry *e = idx_at(t->idx, id);

        /* ids freed by tier_child_gone() below read as IDX_FREE when reached */
        if (e->state != IDX_COMMITTED || e->ns != ns)
            continue;
        if (e->flags & (IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU))
            tier_lru_unlink(t, id);
        if (e->flags & IDX_F_COLD)
            t->st.blocks[TIER_L_COLD]--;
        if (e->level == TIER_L_HOT || e->level == TIER_L_WARM) {
            tier_ram_free(e->level == TIER_L_HOT ? t->hram : t->ram, e->off);
            t->st.blocks[e->level]--;
        }
        tier_remember(t, id, TIER_EV_REMOVED, e->level);
        tier_warm_lose(t, id, true);
        tier_forget(t, id, true);
        t->st.removes++;
        n++;
    }
    return n;
}
