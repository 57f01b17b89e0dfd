/* SPDX-License-Identifier: MIT */
/*
 * tier_durable.c - durable commits: every key of a batch made durable in
 * the cold tier, whoever wrote it, with the waits for a key another client
 * is still writing (dwaits) and for a copy down from hot.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tier_int.h"

/* Make committed id durable for waiter: 0 when it is already, 1 when waiter
 * now waits for a write (one ready callback for id will come), or an error
 * (-EBUSY: the disk's queue is full, try again after a poll). */
static int durable_one(struct tier *t, uint32_t id, struct waiter w)
{
    struct idx_entry *e = idx_at(t->idx, id);
    struct move *m;
    int rc;

    if (e->flags & IDX_F_COLD)
        return 0;
    if (e->flags & IDX_F_DEMOTING) { /* a write to disk: join it */
        m = tier_move_of(t, id, TIER_MV_DEMOTE);
        if (!m)
            return -EIO; /* the flag without its move: cannot happen */
        rc = tier_wait_add(&m->ws, w);
        m->evict = false; /* a block someone made durable stays warm, as it would */
        return rc < 0 ? rc : 1;
    }
    if (!(e->flags & IDX_F_HOTDOWN) && e->level == TIER_L_HOT) {
        /* on the device: copied down first, then written */
        rc = tier_hot_down(t, id, tier_waiter(NULL), NULL);
        if (rc < 0)
            return rc;
        e = idx_at(t->idx, id);
    }
    if (e->flags & IDX_F_HOTDOWN) { /* a copy from hot to warm: wait for what follows it */
        m = tier_move_of(t, id, TIER_MV_HOT_DOWN);
        if (!m)
            return -EIO;
        rc = tier_wait_add(&m->dws, w);
        return rc < 0 ? rc : 1;
    }
    if (e->level != TIER_L_WARM)
        return -EIO; /* a committed block is in hot, warm or on disk */
    rc = tier_demote_for(t, id, false, w);
    return rc < 0 ? rc : 1;
}

/* A wait (or hold) of w for id, at the head of *head. */
static int dwait_push(struct dwait **head, uint32_t id, struct waiter w)
{
    struct dwait *d = malloc(sizeof(*d));

    if (!d)
        return -ENOMEM;
    *d = (struct dwait){ .id = id, .waiter = w, .next = *head };
    *head = d;
    return 0;
}

static int dwait_add(struct tier *t, uint32_t id, struct waiter w)
{
    /* once per (waiter, id) among this waiter's latest, at the head of the
     * list (a commit's keys are added in one run): O(batch), not O(every
     * wait of every client); a duplicate elsewhere costs one callback more,
     * which finds its positions answered and does nothing */
    for (struct dwait *d = t->dwaits; d && tier_waiter_same(d->waiter, w); d = d->next)
        if (d->id == id)
            return 0;
    return dwait_push(&t->dwaits, id, w);
}

bool tier_dwaited(const struct tier *t, uint32_t id)
{
    for (const struct dwait *d = t->dwaits; d; d = d->next)
        if (d->id == id)
            return true;
    return false;
}

/* ---- holds: blocks on disk a durable commit vouches for ----------------- */

void tier_dscope_push(struct tier *t, struct dscope *s)
{
    s->up = t->dscopes;
    t->dscopes = s;
}

void tier_dscope_pop(struct tier *t, struct dscope *s)
{
    t->dscopes = s->up; /* (pushed last: scopes nest as the calls do) */
}

void tier_move_scope(struct tier *t, struct move *m, struct dscope *s)
{
    /* nobody joins a move off the list: its array stays where it is */
    *s = (struct dscope){ .w = m->ws.w, .n = m->ws.n };
    tier_dscope_push(t, s);
}

/* Every wait in the store, fn(ctx, w) for each until one returns true
 * (whether one did): a move's, a write owed, or a wait the store holds off
 * its lists for a moment (the commit being made, a move done whose waiters
 * are being told, waits being run: its scopes). still_waits and the prune
 * of holds both see exactly these, so that they never disagree. */
static bool waits_each(const struct tier *t, bool (*fn)(void *, struct waiter), void *ctx)
{
    for (const struct dscope *s = t->dscopes; s; s = s->up) {
        for (uint32_t i = 0; i < s->n; i++)
            if (fn(ctx, s->w[i]))
                return true;
        for (const struct dwait *d = s->d; d; d = d->next)
            if (fn(ctx, d->waiter))
                return true;
    }
    for (const struct move *m = t->moves; m; m = m->next) {
        for (uint32_t i = 0; i < m->ws.n; i++)
            if (fn(ctx, m->ws.w[i]))
                return true;
        for (uint32_t i = 0; i < m->dws.n; i++)
            if (fn(ctx, m->dws.w[i]))
                return true;
    }
    for (const struct dwait *d = t->dwaits; d; d = d->next)
        if (fn(ctx, d->waiter))
            return true;
    return false;
}

static bool is_waiter(void *ctx, struct waiter w)
{
    return tier_waiter_same(*(const struct waiter *)ctx, w);
}

/* Whether w still waits for anything in the store (waits_each). Its commit
 * is answered once it waits for nothing (the last callback comes after its
 * wait left every list and scope). O(moves in flight + waits). */
static bool still_waits(const struct tier *t, struct waiter w)
{
    return waits_each(t, is_waiter, &w);
}

/* Whether a commit not answered yet holds id, once tier_dholds_prune has
 * run (the disk's walk for a victim prunes first: every hold left is of a
 * commit that still waits). O(holds) a block the walk passes. */
bool tier_dheld(const struct tier *t, uint32_t id)
{
    for (const struct dwait *d = t->dholds; d; d = d->next)
        if (d->id == id)
            return true;
    return false;
}

bool tier_dheld_live(const struct tier *t, uint32_t id)
{
    for (const struct dwait *d = t->dholds; d; d = d->next)
        if (d->id == id && still_waits(t, d->waiter))
            return true;
    return false;
}

void tier_dholds_drop(struct tier *t, struct waiter w)
{
    for (struct dwait **pp = &t->dholds; *pp;) {
        struct dwait *d = *pp;

        if (tier_waiter_same(d->waiter, w)) {
            *pp = d->next;
            free(d);
        } else {
            pp = &d->next;
        }
    }
}

void tier_dholds_free(struct tier *t)
{
    while (t->dholds) {
        struct dwait *d = t->dholds;

        t->dholds = d->next;
        free(d);
    }
}

/* The waiters that still wait for something (still_waits of every one at
 * once): a set hashed on the waiter, open addressing, none the empty slot
 * (none never waits). */
struct wset {
    struct waiter *w;
    size_t mask;
};

static size_t wset_slot(const struct wset *s, struct waiter w)
{
    uint64_t h = (uint64_t)(uintptr_t)w.p * 0x9e3779b97f4a7c15ull ^
                 (uint64_t)(uintptr_t)w.req * 0xc2b2ae3d27d4eb4full;
    size_t i = (size_t)(h ^ h >> 29) & s->mask;

    while ((s->w[i].p || s->w[i].req) && !tier_waiter_same(s->w[i], w))
        i = (i + 1) & s->mask;
    return i;
}

static void wset_put(struct wset *s, struct waiter w)
{
    if (w.p || w.req)
        s->w[wset_slot(s, w)] = w;
}

static bool wset_has(const struct wset *s, struct waiter w)
{
    size_t i = wset_slot(s, w);

    return s->w[i].p || s->w[i].req;
}

static bool wset_put_one(void *ctx, struct waiter w)
{
    wset_put(ctx, w);
    return false;
}

static bool count_one(void *ctx, struct waiter w)
{
    (void)w;
    ++*(size_t *)ctx;
    return false;
}

/* Holds of commits already answered go: O(holds + waits) (the waiters
 * that still wait gathered first), or, without the memory for that,
 * O(holds x waits). Each durable commit call, and the disk's walk for a
 * victim before its first block: a hold left from an answered commit must
 * not outlive it there, since its waiter may wait again (a get's read from
 * disk, under the same pointer) and would keep the block on disk for a
 * commit that vouches for nothing now (review of 29246d8). */
void tier_dholds_prune(struct tier *t)
{
    struct wset s;
    size_t cap = 16, n = 0;

    if (!t->dholds)
        return;
    waits_each(t, count_one, &n);
    while (cap < 2 * n)
        cap *= 2;
    s.mask = cap - 1;
    s.w = calloc(cap, sizeof(*s.w));
    if (s.w)
        waits_each(t, wset_put_one, &s);
    for (struct dwait **pp = &t->dholds; *pp;) {
        struct dwait *d = *pp;

        if (s.w ? wset_has(&s, d->waiter) : still_waits(t, d->waiter)) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        free(d);
    }
    free(s.w);
}

/* Hold id, on disk, for w's commit (nobody's: nothing was promised). */
int tier_dhold_add(struct tier *t, uint32_t id, struct waiter w)
{
    if (!w.p && !w.req)
        return 0;
    return dwait_push(&t->dholds, id, w);
}

/* w is told that id is durable (r 0), or why not: a block on disk already
 * is held there until w's commit is answered. */
static void tell_durable(struct tier *t, struct waiter w, uint32_t id, int r)
{
    if (r == 0)
        r = tier_dhold_add(t, id, w);
    tier_notify(t, w, id, r);
}

/* After a hot-to-warm copy landed (rc): start the writes its durable
 * commits wait for, or tell them why not. */
void tier_durable_after(struct tier *t, uint32_t id, struct waiters *dws, int rc)
{
    for (uint32_t i = 0; i < dws->n; i++) {
        int r = rc;

        if (r == 0 && idx_at(t->idx, id)->state == IDX_COMMITTED)
            r = durable_one(t, id, dws->w[i]);
        if (r == -EBUSY && dwait_add(t, id, dws->w[i]) == 0)
            continue; /* the disk's queue is full: tier_maintain tries again */
        if (r != 1)
            tell_durable(t, dws->w[i], id, r);
    }
}

/* Takes id's waits off the list and returns them as a list of their own. */
static struct dwait *dwaits_take(struct tier *t, uint32_t id)
{
    struct dwait *mine = NULL, **pp = &t->dwaits;

    while (*pp) {
        struct dwait *d = *pp;

        if (d->id != id) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        d->next = mine;
        mine = d;
    }
    return mine;
}

/* id, which durable commits waited for, was committed: start their writes.
 * Its entries leave the list before any write starts: a write can evict a
 * block from the disk, and that block's own waits are failed (and freed)
 * from within, so nothing may hold a pointer into the list meanwhile. */
bool tier_dwaits_run(struct tier *t, uint32_t id)
{
    struct dscope sc = { 0 };
    struct dwait *mine;
    bool refused = false;

    if (idx_at(t->idx, id)->state != IDX_COMMITTED)
        return false;
    mine = dwaits_take(t, id);
    /* the waits taken still count (a write below may make room on disk,
     * and must not evict what their commits hold) */
    tier_dscope_push(t, &sc);
    while (mine) {
        struct dwait *d = mine;
        int r;

        sc.d = d;
        r = idx_at(t->idx, id)->state == IDX_COMMITTED ? durable_one(t, id, d->waiter) : -ENODATA;
        mine = d->next;
        sc.d = mine;
        if (r == -EBUSY) { /* the disk's queue is full: back on the list for the next turn,
                              at its far end, which tier_dwaits_retry takes first */
            struct dwait **tail = &t->dwaits;

            while (*tail)
                tail = &(*tail)->next;
            d->next = NULL;
            *tail = d;
            refused = true;
            continue;
        }
        if (r != 1)
            tell_durable(t, d->waiter, id, r);
        free(d);
    }
    tier_dscope_pop(t, &sc);
    return refused;
}

/* The waits tier_maintain tries again (their disk queue was full): every
 * committed id waited for, each once (ids gathered first: the list changes
 * under each run), from the list's far end: waits join at its head, and
 * one refused again goes back to the far end, so the oldest commits' writes
 * go first (an engine waits for its oldest commit first). O(waits^2) for
 * the gathering: the list holds a few batches. */
/* Whether id was in the set already (adding it): open addressing over a
 * power-of-two table, TIER_NONE the empty slot. */
static bool idset_add(uint32_t *set, size_t mask, uint32_t id)
{
    size_t i = (size_t)(((uint64_t)id * 0x9e3779b97f4a7c15ull) >> 32) & mask;

    while (set[i] != TIER_NONE && set[i] != id)
        i = (i + 1) & mask;
    if (set[i] == id)
        return true;
    set[i] = id;
    return false;
}

void tier_dwaits_retry(struct tier *t)
{
    uint32_t lim = idx_id_limit(t->idx), n = 0, *ids, *set;
    size_t cap = 0, mask = 1;

    for (struct dwait *d = t->dwaits; d; d = d->next)
        cap++;
    while (mask < 2 * cap)
        mask <<= 1;
    /* the distinct ids in list order, found through a set: a walk of the
     * ids so far for each wait made every turn O(waits^2) (43% of the holds
     * figure's time with 4,000 writes waiting for the disk's queue) */
    ids = malloc(cap * sizeof(*ids));
    set = malloc(mask * sizeof(*set));
    if (!ids || !set) {
        free(ids);
        free(set);
        return; /* tried again at the next turn */
    }
    memset(set, 0xff, mask * sizeof(*set)); /* TIER_NONE everywhere */
    mask--;
    for (struct dwait *d = t->dwaits; d; d = d->next)
        if (d->id < lim && idx_at(t->idx, d->id)->state == IDX_COMMITTED &&
            !idset_add(set, mask, d->id))
            ids[n++] = d->id;
    free(set);
    /* the first refused ends the pass: the queue is full for the rest too,
     * and trying them would put each back at the far end, reversing the
     * list (the newest commit first at the next turn; review of issue 19) */
    for (uint32_t i = n; i-- > 0;)
        if (tier_dwaits_run(t, ids[i]))
            break;
    free(ids);
}

/* id will never be committed (its reservation is gone): fail its waiters.
 * They leave the list before any is told: a waiter told may close, and
 * its close give back reservations that fail waits of this list from
 * within (no pointer into it may be held across a callback). */
void tier_dwaits_fail(struct tier *t, uint32_t id, int rc)
{
    struct dwait *mine = dwaits_take(t, id);
    struct dscope sc = { 0 }; /* those not told yet: one that leaves meanwhile is not */

    tier_dscope_push(t, &sc);
    while (mine) {
        struct dwait *d = mine;

        mine = d->next;
        sc.d = mine;
        tier_notify(t, d->waiter, id, rc);
        free(d);
    }
    tier_dscope_pop(t, &sc);
}

int tier_commit_durable(struct tier_ns *ns, uint32_t owner, const struct tier_key *keys,
                        size_t n, void *waiter, uint32_t *ids, uint32_t *pending)
{
    return tier_commit_durable_for(ns, owner, keys, n, tier_waiter(waiter), ids, pending);
}

int tier_commit_durable_for(struct tier_ns *ns, uint32_t owner,
                            const struct tier_key *keys, size_t n, struct waiter w,
                            uint32_t *ids, uint32_t *pending)
{
    struct tier *t = ns->t;
    struct dscope sc = { .w = &w, .n = 1 };
    size_t done;
    int err = 0, rc = 0;

    *pending = 0;
    if (!t->cold)
        return -EOPNOTSUPP;
    tier_dholds_prune(t);
    done = tier_commit(ns, owner, keys, n);
    /* a block already on disk is held there until the commit is answered:
     * a write of this batch (or any other) that finds the disk full evicts
     * the oldest disk-only leaf, and the ack vouches for every key (the
     * call itself counts as a wait, so a hold made here lasts until the
     * writes it starts are under way) */
    tier_dscope_push(t, &sc);
    /* every key of the batch, whoever wrote it: a durable ack vouches for
     * each, so a key not stored (or not stored yet) is never skipped */
    for (size_t i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns->id, &keys[i]);

        if (id == TIER_NONE || idx_at(t->idx, id)->state == IDX_GHOST) {
            /* deduplicated at reserve against a block dropped (or a put
             * aborted) since: there is nothing to make durable */
            err = -ENODATA;
            continue;
        }
        /* wait on the list: for another client still writing it (its
         * commit), or when the disk's queue is full (tier_maintain starts
         * the write once completions make room) rather than in a loop here,
         * so that tierd answers the engine's next reserve meanwhile (it used
         * to poll the disk until each write went in) */
        if (idx_at(t->idx, id)->state == IDX_RESERVED || (rc = durable_one(t, id, w)) == -EBUSY) {
            rc = dwait_add(t, id, w);
            if (rc < 0)
                break;
            ids[(*pending)++] = id;
            continue;
        }
        if (rc == 0)
            rc = tier_dhold_add(t, id, w);
        if (rc < 0)
            break;
        if (rc == 1)
            ids[(*pending)++] = id;
    }
    tier_dscope_pop(t, &sc);
    tier_dholds_prune(t); /* answered now (nothing to wait for): nothing held */
    if (rc < 0)
        return rc;
    return err ? err : (int)done;
}
