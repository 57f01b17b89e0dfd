/* SPDX-License-Identifier: MIT */
/*
 * tier_move.c - the moves in flight between tiers (a callback's context in
 * the cold and hot tiers) and who waits for them; a waiter that leaves.
 */
#include <errno.h>
#include <stdlib.h>

#include "tier_int.h"

void tier_moves_add(struct tier *t, struct move *m) { TIER_LIST_ADD(t->moves, m); }

struct idx_entry *tier_move_landed(struct move *m)
{
    TIER_LIST_DEL(m->t->moves, m);
    return idx_at(m->t->idx, m->id);
}

static enum move_kind kind_of(const struct move *m)
{
    return m->promote ? TIER_MV_PROMOTE : m->hot_down ? TIER_MV_HOT_DOWN
         : m->hot_up  ? TIER_MV_HOT_UP  : TIER_MV_DEMOTE;
}

/* id's move of one kind (a block may have a write to disk and a copy up in
 * flight at once, never two of one kind). */
struct move *tier_move_of(struct tier *t, uint32_t id, enum move_kind k)
{
    /* O(moves in flight): a few batches at most */
    for (struct move *m = t->moves; m; m = m->next)
        if (m->id == id && kind_of(m) == k)
            return m;
    return NULL;
}

/* Add w to ws (once). None waits for nothing. */
int tier_wait_add(struct waiters *ws, struct waiter w)
{
    if (!w.p && !w.req)
        return 0;
    for (uint32_t i = 0; i < ws->n; i++)
        if (tier_waiter_same(ws->w[i], w))
            return 0;
    if (ws->n == ws->cap) {
        uint32_t cap = ws->cap ? 2 * ws->cap : 2;
        struct waiter *n = realloc(ws->w, cap * sizeof(*n));

        if (!n)
            return -ENOMEM;
        ws->w = n;
        ws->cap = cap;
    }
    ws->w[ws->n++] = w;
    return 0;
}

static void wait_del(struct waiters *ws, struct waiter w)
{
    for (uint32_t i = 0; i < ws->n; i++)
        if (tier_waiter_same(ws->w[i], w))
            ws->w[i--] = ws->w[--ws->n];
}

struct move *tier_move_new(const struct move *init, struct waiter w)
{
    struct move *m = calloc(1, sizeof(*m));

    if (!m)
        return NULL;
    *m = *init;
    if (tier_wait_add(&m->ws, w) < 0) {
        free(m);
        return NULL;
    }
    return m;
}

void tier_notify(struct tier *t, struct waiter w, uint32_t id, int rc)
{
    if (w.req)
        tier_req_landed(w.req, id, rc); /* the store's own request: no trip out */
    else if (w.p && t->cfg.ready) /* (none: a detached durable commit's) */
        t->cfg.ready(t->cfg.ready_ctx, w.p, id, rc);
}

/* Tell every waiter of a move that has left the list of moves (so a
 * callback that forgets a waiter cannot change it under us), then free it. */
void tier_move_done(struct tier *t, struct move *m, int rc)
{
    /* those not told yet still wait: what a callback does (a write that
     * makes room on disk) leaves their commits' durable holds in place */
    struct dscope ws = { .w = m->ws.w, .n = m->ws.n }, dws = { .w = m->dws.w, .n = m->dws.n };

    tier_dscope_push(t, &ws);
    tier_dscope_push(t, &dws);
    for (uint32_t i = 0; i < m->ws.n; i++) {
        ws.w = m->ws.w + i + 1;
        ws.n = m->ws.n - i - 1;
        tier_notify(t, m->ws.w[i], m->id, rc);
    }
    for (uint32_t i = 0; i < m->dws.n; i++) {
        dws.w = m->dws.w + i + 1;
        dws.n = m->dws.n - i - 1;
        tier_notify(t, m->dws.w[i], m->id, rc);
    }
    tier_dscope_pop(t, &dws);
    tier_dscope_pop(t, &ws);
    free(m->ws.w);
    free(m->dws.w);
    free(m);
}

/* No callback names w any more. keep: the writes its durable commit
 * queued (behind a copy from hot, or for a full disk queue) still start,
 * for nobody (no waiter); else they are dropped with it. */
void tier_waiter_leaves(struct tier *t, struct waiter w, bool keep)
{
    for (struct move *m = t->moves; m; m = m->next) {
        wait_del(&m->ws, w); /* the move itself goes on regardless */
        if (!keep)
            wait_del(&m->dws, w);
        for (uint32_t i = 0; i < m->dws.n; i++)
            if (tier_waiter_same(m->dws.w[i], w))
                m->dws.w[i] = tier_waiter(NULL);
    }
    for (struct dwait **pp = &t->dwaits; *pp;) {
        struct dwait *d = *pp;

        /* a wait for a key another client still writes goes with its
         * waiter, kept or not: that write is the other client's, and a
         * commit answered at its bound must leave nothing behind that the
         * next commit of the same keys would add to again */
        if (tier_waiter_same(d->waiter, w) &&
            (!keep || idx_at(t->idx, d->id)->state != IDX_COMMITTED)) {
            *pp = d->next;
            free(d);
            continue;
        }
        if (tier_waiter_same(d->waiter, w))
            d->waiter = tier_waiter(NULL); /* a write queued for a full disk: it still starts */
        pp = &d->next;
    }
    for (struct rop *o = t->rops; o; o = o->next)
        if (tier_waiter_same(o->waiter, w))
            o->waiter = tier_waiter(NULL);
    /* waits a loop has off the lists while it tells them (a move done, the
     * waits of a key run or failed): a waiter that leaves from a callback
     * of that loop is not told after it. None, kept or not: what such a
     * wait does next (a write) then goes on for nobody, as a kept one's */
    for (struct dscope *s = t->dscopes; s; s = s->up) {
        for (uint32_t i = 0; i < s->n; i++)
            if (tier_waiter_same(s->w[i], w))
                s->w[i] = tier_waiter(NULL);
        for (struct dwait *d = s->d; d; d = d->next)
            if (tier_waiter_same(d->waiter, w))
                d->waiter = tier_waiter(NULL);
    }
    tier_dholds_drop(t, w); /* its commit is answered (or nobody's): nothing held for it */
}

void tier_forget_waiter(struct tier *t, void *waiter)
{
    tier_waiter_leaves(t, tier_waiter(waiter), false);
}

void tier_detach_waiter(struct tier *t, void *waiter)
{
    tier_waiter_leaves(t, tier_waiter(waiter), true);
}
