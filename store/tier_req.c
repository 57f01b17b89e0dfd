/* SPDX-License-Identifier: MIT */
/*
 * tier_req.c - gets, lookups and durable commits the store drives to their
 * end (tier.h, "requests"): through the wait for the remote tier, then the
 * wait for the disk, to one call of the caller's done. It knows nothing of
 * who asked: a callback and a user pointer.
 *
 * Design note: a request is a waiter of the store's own (struct waiter's
 * req), so the remote tier's answer and each block landing reach it here
 * from tier_poll, with no trip out to the caller and back: the get goes on
 * from the local tiers right away, and only its outcome leaves the store.
 * The stages, in order:
 *   REMOTE  a read (get) or probe (lookup) of the remote tier, bounded by
 *           remote_ms; its answer, or the bound, ends it;
 *   DISK    a get's leases on blocks on their way into warm, bounded by
 *           deadline_ms from when it began; the last landing, or the bound
 *           (late), ends it;
 *   COMMIT  a durable commit's writes (tier_commit_durable), bounded by
 *           deadline_ms; the last landing, or the bound (late: the writes
 *           go on, told to nobody), ends it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tier_int.h"

enum stage { REQ_IDLE, REQ_REMOTE, REQ_DISK, REQ_COMMIT };

struct tier_req {
    struct tier *t;
    tier_req_fn done;
    void *user;
    uint32_t cap;           /* keys at most */
    enum stage stage;
    struct tier_req_args a; /* the request; a.keys: its copy once it waits */
    uint64_t bound_ms;      /* CLOCK_MONOTONIC ms the stage ends by (0: none) */
    uint32_t base;          /* lookup: the local leading hits */
    uint32_t leased;        /* DISK: blocks leased (ids[0..leased)); COMMIT: written */
    uint32_t waiting;       /* ... of those, still on their way */
    uint32_t fail_at;       /* DISK: the first lost (leased: none) */
    uint32_t committed;     /* COMMIT: the blocks committed */
    int err;                /* COMMIT: the first error */
    bool armed;             /* COMMIT: the store call returned, waiting is known */
    struct tier_key *keys;  /* cap each: the copy of the keys */
    uint32_t *ids;
    uint64_t *offs;
    uint8_t *ready;         /* per position of ids[]: DISK its block is where offs[]
                               says, COMMIT it is durable (or failed) */
    uint8_t *tiers;
};

/* The caller's clock (tier.h: CLOCK_MONOTONIC), not the store's coarse one:
 * a bound read on a clock that lags would fire the caller's timer early. */
static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static struct waiter me(struct tier_req *r)
{
    return (struct waiter){ .req = r };
}

int tier_req_create(struct tier *t, uint32_t cap, tier_req_fn done, void *user,
                    struct tier_req **out)
{
    struct tier_req *r;

    if (cap == 0 || !done)
        return -EINVAL;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    *r = (struct tier_req){ .t = t, .done = done, .user = user, .cap = cap };
    r->keys = malloc(cap * sizeof(*r->keys));
    r->ids = malloc(cap * sizeof(*r->ids));
    r->offs = malloc(cap * sizeof(*r->offs));
    r->ready = malloc(cap);
    r->tiers = malloc(cap);
    if (!r->keys || !r->ids || !r->offs || !r->ready || !r->tiers) {
        tier_req_destroy(r);
        return -ENOMEM;
    }
    *out = r;
    return 0;
}

void tier_req_destroy(struct tier_req *r)
{
    if (!r)
        return;
    tier_req_cancel(r);
    /* a loop of the store that held a copy of its waiters may have named
     * it after its cancel: no pointer to it outlives it */
    tier_waiter_leaves(r->t, me(r), false);
    free(r->keys);
    free(r->ids);
    free(r->offs);
    free(r->ready);
    free(r->tiers);
    free(r);
}

bool tier_req_busy(const struct tier_req *r)
{
    return r->stage != REQ_IDLE;
}

uint32_t tier_req_committed(const struct tier_req *r)
{
    return r->committed;
}

uint64_t tier_req_bound(const struct tier_req *r)
{
    return r->stage == REQ_IDLE ? 0 : r->bound_ms;
}

/* r's one call: it is idle first, so that done may submit into it again,
 * or cancel it (its caller went) without effect. */
static void finish(struct tier_req *r, int rc, uint32_t remote, bool late)
{
    struct tier_req_res res = {
        .op = r->a.op, .rc = rc, .err = r->err, .n = r->a.n, .remote = remote, .late = late,
        .ids = r->ids, .offs = r->offs, .tiers = r->tiers, .keys = r->a.keys,
    };

    r->stage = REQ_IDLE;
    r->done(r->user, &res);
}

/* The request waits: the caller's keys are its own once submit returns. */
static void keep_keys(struct tier_req *r)
{
    if (r->a.keys != r->keys) {
        memcpy(r->keys, r->a.keys, r->a.n * sizeof(*r->keys));
        r->a.keys = r->keys;
    }
}

/* ---- the get ----------------------------------------------------------- */

/* Done with the leading run of blocks in place: up to the first lost one,
 * and at the bound up to the first still on its way. The leases on the
 * rest go back; their reads go on and land in warm for next time. */
static void get_done(struct tier_req *r, bool late)
{
    uint32_t hits = 0;

    while (hits < r->fail_at && r->ready[hits])
        hits++;
    /* reads still in flight (the bound passed) tell nobody now */
    tier_waiter_leaves(r->t, me(r), false);
    tier_release(r->t, r->ids + hits, r->leased - hits, false);
    finish(r, (int)hits, 0, late);
}

/* The get from the local tiers: done now, or it waits for the disk. */
static void get_local(struct tier_req *r)
{
    uint32_t pending;
    struct tier_get_args ga = {
        .ns = r->a.ns, .keys = r->a.keys, .n = r->a.n, .flags = r->a.flags, .ids = r->ids,
        .offs = r->offs, .tiers = r->tiers, .pending = &pending,
    };
    int rc = tier_get_for(&ga, me(r));

    if (rc < 0 || pending == 0) {
        finish(r, rc, 0, false);
        return;
    }
    keep_keys(r);
    r->stage = REQ_DISK;
    r->leased = (uint32_t)rc;
    r->waiting = pending;
    r->fail_at = (uint32_t)rc;
    for (uint32_t i = 0; i < r->leased; i++)
        r->ready[i] = tier_ready(r->t, r->ids[i]);
    r->bound_ms = r->a.deadline_ms ? now_ms() + r->a.deadline_ms : 0;
}

/* Mark ready every position of ids[0..leased) holding id and not ready
 * yet (a key may stand more than once in a request: every position
 * waits). Returns how many; *first: the first of them. */
static uint32_t mark(struct tier_req *r, uint32_t id, uint32_t *first)
{
    uint32_t hit = 0;

    for (uint32_t i = 0; i < r->leased; i++) {
        if (r->ids[i] != id || r->ready[i])
            continue;
        if (!hit++)
            *first = i;
        r->ready[i] = 1;
    }
    return hit;
}

static void commit_done(struct tier_req *r, bool late);

void tier_req_landed(struct tier_req *r, uint32_t id, int rc)
{
    uint32_t first = 0, hit;

    /* (idle: done at its bound; the block simply landed, or was written) */
    if (r->stage != REQ_DISK && r->stage != REQ_COMMIT)
        return;
    hit = mark(r, id, &first);
    if (!hit)
        return;
    if (r->stage == REQ_COMMIT) {
        if (rc < 0 && !r->err)
            r->err = rc;
        /* until the store call returned, blocks are only marked:
         * commit_start counts them */
        if (r->armed && (r->waiting -= hit) == 0)
            commit_done(r, false);
        return;
    }
    if (rc < 0 && first < r->fail_at)
        r->fail_at = first;
    r->waiting -= hit;
    if (r->waiting == 0)
        get_done(r, false);
}

/* ---- the durable commit ------------------------------------------------ */

/* Done: at the bound the writes go on (queued ones too), this commit is
 * told to retry unless it has a truer error, and waits no more. */
static void commit_done(struct tier_req *r, bool late)
{
    if (late) {
        tier_waiter_leaves(r->t, me(r), true);
        if (!r->err)
            r->err = -EAGAIN;
    }
    finish(r, (int)r->committed, 0, late);
}

/* Commit, then wait for every key of the batch to be durable. The stage is
 * set before the writes start: when the disk's queue is full the store
 * waits for completions, and writes of this very batch may land (and be
 * marked here) before the call returns. */
static void commit_start(struct tier_req *r)
{
    uint32_t ready = 0;
    int rc;

    r->stage = REQ_COMMIT;
    r->armed = false;
    r->leased = 0;
    r->committed = 0;
    memset(r->ready, 0, r->a.n);
    rc = tier_commit_durable_for(r->a.ns, r->a.owner, r->a.keys, r->a.n, me(r), r->ids,
                                 &r->leased);
    if (rc < 0 && !r->err)
        r->err = rc;
    r->committed = rc < 0 ? 0 : (uint32_t)rc;
    for (uint32_t i = 0; i < r->leased; i++)
        ready += r->ready[i];
    r->waiting = r->leased - ready;
    r->armed = true;
    if (r->waiting == 0) {
        commit_done(r, false);
        return;
    }
    keep_keys(r);
    r->bound_ms = r->a.deadline_ms ? now_ms() + r->a.deadline_ms : 0;
}

/* ---- the remote tier's wait --------------------------------------------- */

/* Ask the remote tier what the request misses here (hits: the lookup's
 * local run): whether it waits for the answer now. */
static bool ask_remote(struct tier_req *r, uint32_t hits)
{
    const struct tier_req_args *a = &r->a;
    int rc;

    if (!a->remote_ms || !r->t->remote || !tier_remote_ns_on(r->t->remote, a->ns->id))
        return false;
    keep_keys(r);
    if (a->op == TIER_REQ_LOOKUP)
        rc = tier_remote_probe(a->ns, r->keys + hits, a->n - hits, me(r));
    else
        rc = tier_remote_read(a->ns, r->keys, a->n, me(r));
    if (rc <= 0)
        return false;
    r->stage = REQ_REMOTE;
    r->base = hits;
    r->bound_ms = now_ms() + a->remote_ms;
    return true;
}

/* The remote tier answered (count: its leading run of keys, 0 at the
 * bound). A lookup is done with that run added, a get goes on from the
 * local tiers, which now hold what was read. */
static void remote_over(struct tier_req *r, int count)
{
    /* a late answer must not be taken for the next stage's */
    tier_waiter_leaves(r->t, me(r), false);
    if (r->a.op == TIER_REQ_GET) {
        get_local(r);
        return;
    }
    for (uint32_t i = r->base; i < r->base + (uint32_t)count && i < r->a.n; i++)
        r->tiers[i] = TIER_L_COLD; /* on the remote: a get waits for it, as for disk */
    finish(r, (int)(r->base + (uint32_t)count), (uint32_t)count, false);
}

void tier_req_remote(struct tier_req *r, int count)
{
    if (r->stage == REQ_REMOTE)
        remote_over(r, count);
    /* else: answered at its bound; what was read stays in warm */
}

/* ---- submit, bounds, cancel ---------------------------------------------- */

int tier_req_submit(struct tier_req *r, const struct tier_req_args *a)
{
    if (r->stage != REQ_IDLE)
        return -EBUSY;
    if (a->n > r->cap)
        return -E2BIG;
    if ((a->op != TIER_REQ_GET && a->op != TIER_REQ_LOOKUP && a->op != TIER_REQ_COMMIT) ||
        !a->ns || a->ns->t != r->t)
        return -EINVAL; /* (a namespace of another store would index the wrong one) */
    r->a = *a;
    r->err = 0;
    if (a->op == TIER_REQ_COMMIT) {
        commit_start(r);
        return 0;
    }
    if (a->op == TIER_REQ_LOOKUP) {
        uint32_t hits = (uint32_t)tier_lookup(a->ns, a->keys, a->n, r->tiers);

        if (hits == a->n || !ask_remote(r, hits))
            finish(r, (int)hits, 0, false);
        return 0;
    }
    if (!ask_remote(r, 0))
        get_local(r);
    return 0;
}

uint64_t tier_req_expire(struct tier_req *r, uint64_t now)
{
    if (r->stage == REQ_IDLE || !r->bound_ms || r->bound_ms > now)
        return tier_req_bound(r);
    if (r->stage == REQ_REMOTE)
        remote_over(r, 0); /* the remote tier is late: go on without it */
    else if (r->stage == REQ_COMMIT)
        commit_done(r, true);
    else
        get_done(r, true);
    return tier_req_bound(r);
}

size_t tier_req_cancel(struct tier_req *r)
{
    size_t back = 0;

    if (r->stage == REQ_IDLE)
        return 0;
    tier_waiter_leaves(r->t, me(r), false);
    if (r->stage == REQ_DISK) {
        tier_release(r->t, r->ids, r->leased, true);
        back = r->leased;
    }
    r->stage = REQ_IDLE;
    return back;
}
