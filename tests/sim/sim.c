/* SPDX-License-Identifier: MIT */
/*
 * sim.c - the store under a deterministic simulation, checked against a
 * reference model after every step.
 *
 * Design note: the world. One store (store/tier.c) with a small warm pool,
 * an emulated hot tier and a cold tier on the simulated disk (tier_nvme.h:
 * requests wait until the schedule completes them, in any order, and a crash
 * keeps only what a sync made durable), two namespaces of different block
 * sizes, and four virtual clients. Capacities are a fraction of the keys
 * used, so eviction never rests. Every choice comes from one splitmix64
 * stream seeded by the caller: a seed replays a run exactly.
 *
 * Design note: the model. For each key, the version last committed (a
 * payload is derived from key and version, so any slot can be checked
 * against what it must hold), whether the store may hold it now (a key the
 * store reported absent may come back only through a new commit), and
 * whether a durable commit of that version was acknowledged. For each
 * client, the bytes of every slot it holds (leases and filled reservations),
 * hashed when first verified. After every step:
 *  - tier_check() holds (counts, lists, slot ownership);
 *  - every held slot still holds its bytes, and no slot is held for two
 *    different blocks;
 *  - a key the store calls present is one the model allows, an acknowledged
 *    durable key that is present has its copy on disk, and an acknowledged
 *    commit had every key of its batch on disk when it was acknowledged (a
 *    key stored as the commit returned, and not put anew, may be missing
 *    then only after a removal, a purge or a disk fault: the store holds
 *    what a waiting commit vouches for);
 *  - a block with no path from its chain's root (an orphan) does not stay;
 *  - a get that follows a lookup, with room to spare, gets what it found;
 *  - a put with nothing held and room on disk is not refused for lack of room,
 *    and no block is dropped while the disk has room, but for those NVMe
 *    admission refuses (no second touch, or past the write budget: on);
 * and after a crash, every acknowledged durable key that was present comes
 * back with its bytes, and nothing comes back that was gone.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvt_common.h"
#include "sim.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_hot.h"
#include "tier_nvme.h"

#define NNS 2          /* namespaces */
#define NCHAIN 16      /* chains per namespace */
#define LEN 24         /* blocks per chain */
#define NCLIENT 4
#define NLEASE 3       /* lease batches a client holds at most */
#define MAXB 8         /* blocks per reservation */
#define WARM_BYTES (8u << 20)
#define HOT_BYTES (4u << 20)
#define COLD_BYTES (12u << 20)
#define ORPHAN_STEPS 250 /* an unleased orphan must be gone within this many steps */
#define TRACE 48         /* steps kept for a failure's report */

static const uint64_t ns_blk[NNS] = { 32u << 10, 48u << 10 };

struct held {      /* one leased or reserved position */
    uint64_t xx;   /* XXH3 of its bytes once verified (0: not yet) */
};

struct resv {
    bool on, hot, filled;
    int ns, c, first, n;
    uint32_t ids[MAXB];
    uint64_t offs[MAXB];
    uint32_t ver[MAXB];
    uint64_t xx[MAXB];
};

struct lease {
    bool on, pending;
    int ns, c, n;       /* positions 0..n-1 of chain c */
    int fail_at;        /* first position lost (n: none) */
    bool hot_ok;        /* GET_HOT */
    uint32_t h[LEN];    /* store handles */
    uint64_t offs[LEN];
    uint8_t tiers[LEN];
    uint8_t ready[LEN];
    uint32_t ver[LEN];  /* the version the model says it must show */
    uint64_t xx[LEN];
};

struct pin {        /* a pinning lookup's hold (tier_pin) */
    bool on;
    bool excused;       /* removed, purged or a disk fault since: may be gone */
    int ns, c, n;       /* positions 0..n-1 of chain c */
    uint32_t ids[LEN];
    bool mem[LEN];      /* in memory (hot or warm) when pinned: stays there */
};

struct client {
    uint32_t owner;
    struct resv r;
    struct pin pin;
    struct lease l[NLEASE];
    int waiting;        /* -1: nothing; 0..NLEASE-1: a get's lease; NLEASE: a durable commit */
    bool dcall;         /* inside tier_commit_durable: callbacks counted, not finished */
    uint32_t dgot, dwant;
    int derr;
    int dns, dc, dfirst, dn;
    uint32_t dver[MAXB];  /* the versions the durable commit vouches for */
    uint32_t dgone[MAXB]; /* ... and each key's `gone` count then */
    bool dvouch[MAXB];    /* stored (or being written) as the commit returned */
    bool dexcused;        /* a removal, purge or disk fault since may take its blocks */
};

struct mkey {
    uint32_t ver;        /* last committed version (0: none) */
    bool may;            /* the store may hold it */
    bool durable;        /* an acknowledged durable commit of ver */
    bool was;            /* crash: present before it */
    bool seen;           /* present at the last check (the step before) */
    bool held;           /* present or being written at the last check */
    bool rooted;         /* every block before it present at the last check */
    uint32_t gone;       /* times it went from present or written to neither */
    uint64_t orphan_at;  /* step + 1 since which it is an unleased orphan (0: not) */
};

struct world {
    const struct sim_opts *o;
    struct sim_result *res;
    uint64_t rng, step;
    char dir[64];
    struct tier_cold *cold;
    struct tier_hot *hot;
    struct tier *t;
    struct tier_ns *ns[NNS]; /* the store's namespaces: ids ns_id(i), ns_blk[i] bytes */
    bool crashing;       /* callbacks during a crash's teardown are nobody's */
    struct client *acting; /* the client whose step runs (NULL: none) */
    uint32_t gver;
    struct client cl[NCLIENT];
    struct mkey m[NNS][NCHAIN][LEN];
    uint8_t *buf;        /* scratch of the largest block */
    bool faulted;        /* a fault was injected this step */
    uint64_t fault_at;   /* step + 1 of the last fault injected (0: none) */
    char trace[TRACE][160];
    int watch[3];        /* SIM_WATCH=ns/c/p: print that key's changes (debugging) */
    bool trace_all;      /* SIM_TRACE set: print every step */
    bool wpresent;
    uint8_t wlevel;
    char why[400];
    bool failed;
};

static const char *const op_names[] = {
#define SIM_NAME(n) #n,
    SIM_OPS(SIM_NAME)
#undef SIM_NAME
};

const char *sim_op_name(int op)
{
    return op >= 0 && op < SIM_OP_N ? op_names[op] : "?";
}

/* ---- randomness, keys, payloads ----------------------------------------- */

static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static uint32_t rnd(struct world *w, uint32_t n) /* [0, n) */
{
    return n ? (uint32_t)(mix(&w->rng) % n) : 0;
}

static bool chance(struct world *w, unsigned pct)
{
    return rnd(w, 100) < pct;
}

static struct tier_key key_of(int ns, int c, int p)
{
    struct tier_key k;
    uint64_t s = ((uint64_t)ns << 32) | ((uint64_t)c << 16) | (uint64_t)p;

    for (int i = 0; i < 4; i++) {
        uint64_t v = mix(&s);

        memcpy(k.b + 8 * i, &v, 8);
    }
    return k;
}

static uint64_t pay_seed(int ns, int c, int p, uint32_t ver)
{
    return ((uint64_t)ver << 32) ^ ((uint64_t)ns << 24) ^ ((uint64_t)c << 12) ^ (uint64_t)p;
}

static void pay_fill(uint8_t *b, uint64_t len, uint64_t seed)
{
    uint64_t s = seed;

    for (uint64_t i = 0; i < len; i += 8) {
        uint64_t v = mix(&s);

        memcpy(b + i, &v, 8);
    }
}

/* ---- reporting ------------------------------------------------------------ */

static void note(struct world *w, const char *fmt, ...)
{
    va_list ap;
    char *line = w->trace[w->step % TRACE];
    int k = snprintf(line, sizeof(w->trace[0]), "%6llu ", (unsigned long long)w->step);

    va_start(ap, fmt);
    vsnprintf(line + k, sizeof(w->trace[0]) - (size_t)k, fmt, ap);
    va_end(ap);
    if (w->trace_all) /* SIM_TRACE=1: every step as it runs (debugging) */
        fprintf(stderr, "%s\n", line);
}

static void fail(struct world *w, const char *fmt, ...)
{
    va_list ap;

    if (w->failed)
        return;
    w->failed = true;
    va_start(ap, fmt);
    vsnprintf(w->why, sizeof(w->why), fmt, ap);
    va_end(ap);
    snprintf(w->res->failure, sizeof(w->res->failure), "step %llu: %s",
             (unsigned long long)w->step, w->why);
}

/* ---- the world ------------------------------------------------------------ */

static void on_ready(void *ctx, void *waiter, uint32_t id, int rc);

static void say(void *ctx, const char *msg)
{
    struct world *w = ctx;

    if (getenv("SIM_LOG"))
        fprintf(stderr, "sim: step %llu: %s\n", (unsigned long long)w->step, msg);
}

/* The world's clock for the store's write budget: STEP_MS per step. */
static int ns_id(int ns)
{
    return ns + 1;
}

#define STEP_MS 10
static uint64_t sim_clock(void *ctx)
{
    return ((const struct world *)ctx)->step * STEP_MS;
}

static int world_open(struct world *w)
{
    uint64_t cold = w->o->cold_bytes ? w->o->cold_bytes : COLD_BYTES;
    struct tier_cold_cfg cc = { .dir = w->dir, .bytes = cold, .qd = 16, .batch = 4,
                                .sim = true, .log = say, .log_ctx = w };
    struct tier_hot_cfg hc = { .kind = TIER_HOT_EMU, .bytes = HOT_BYTES };
    struct tier_cfg tc = { .warm_bytes = WARM_BYTES, .high_wm = 0.8, .low_wm = 0.6,
                           .ready = on_ready, .ready_ctx = w, .why_events = 65536,
                           .log = say, .log_ctx = w,
                           /* NVMe admission at second touch (tierd's default is
                            * all: this is the case with more to get wrong); even
                            * seeds also spend a write budget of 1/24 of the disk
                            * per 200 steps of the world's clock, and every third
                            * seed writes every block through at its commit */
                           .admit = TIER_ADMIT_REUSED, .clock_ms = sim_clock, .clock_ctx = w,
                           .cold_budget_bytes = w->o->seed % 2 ? 0 : cold / 24,
                           .cold_budget_ms = 200 * STEP_MS,
                           .write_through = w->o->seed % 3 == 0 };
    /* opened as tierd opens its store: one call that owns the tiers */
    struct tier_open_cfg oc = { .store = tc, .cold = &cc, .hot = &hc };
    int rc;

    oc.store.evict_policy = w->o->policy;
    oc.store.evict_adapt_min = w->o->adapt_min;
    rc = tier_open(&oc, &w->t, NULL);
    if (rc < 0)
        return rc;
    w->cold = tier_cold_of(w->t);
    w->hot = tier_hot_of(w->t);
    if (w->o->policy == TIER_EVICT_KEEP)
        tier_keep_share_set(w->t, 0.5);
    rc = tier_load_cold(w->t);
    if (rc < 0)
        goto out_tier;
    /* opened after the disk is indexed, as tierd does: what was on disk
     * under these ids is theirs again */
    for (int i = 0; i < NNS; i++)
        if ((rc = tier_ns_open(w->t, (uint32_t)ns_id(i), ns_blk[i], &w->ns[i])) < 0)
            goto out_tier;
    return 0;
out_tier:
    tier_close(w->t);
    w->t = NULL;
    return rc;
}

/* Teardown: every move in flight lands first (each may start another, in
 * the other tier), then tier_close closes the devices and the store. */
static void world_close(struct world *w)
{
    if (!w->t)
        return;
    for (int guard = 0; guard < 100000; guard++) {
        if (!tier_cold_busy(w->cold) && !tier_hot_inflight(w->hot) &&
            tier_nvme_sim_queued(tier_cold_io(w->cold)) == 0)
            break;
        tier_cold_flush(w->cold);
        tier_poll(w->t, true);
    }
    w->res->adaptations += tier_pol_adaptations(w->t);
    tier_close(w->t);
    w->t = NULL;
}

static uint8_t *slot_at(struct world *w, uint8_t tier, uint64_t off)
{
    return tier == TIER_L_HOT ? (uint8_t *)tier_hot_emu_base(w->hot) + off
                              : (uint8_t *)tier_pool_base(w->t) + off;
}

static struct client *client_of(struct world *w, void *waiter)
{
    for (int i = 0; i < NCLIENT; i++)
        if (waiter == &w->cl[i])
            return &w->cl[i];
    return NULL;
}

/* ---- checking bytes -------------------------------------------------------- */

/* Whether the block at p (len bytes) is key (ns, c, i) at version ver:
 * compared in full the first time (its hash kept in *xx), by hash after. */
static bool bytes_ok(struct world *w, const uint8_t *p, uint64_t len, int ns, int c, int i,
                     uint32_t ver, uint64_t *xx)
{
    uint64_t h = XXH3_64bits(p, len);

    w->res->bytes_checked += len;
    if (*xx)
        return h == *xx;
    pay_fill(w->buf, len, pay_seed(ns, c, i, ver));
    if (memcmp(p, w->buf, len) != 0)
        return false;
    *xx = h ? h : 1;
    return true;
}

static void ack_durable(struct world *w, struct client *cl);

static void finish_get(struct world *w, struct client *cl, struct lease *l)
{
    (void)w;
    l->pending = false;
    cl->waiting = -1;
}

static void on_ready_one(struct world *w, struct client *cl, uint32_t id, int rc);
static void op_give_up(struct world *w, struct client *cl);
static void client_die(struct world *w, struct client *cl, bool store_alive);

/* Now and then the callback of one client is where another stops waiting:
 * it gives up its get, or dies (an engine closing a connection as another
 * is answered). Neither the client called back nor the one whose step runs:
 * the model of each is mid-step. The store must never call either back. */
static void on_ready(void *ctx, void *waiter, uint32_t id, int rc)
{
    struct world *w = ctx;
    struct client *cl = client_of(w, waiter), *o;

    on_ready_one(w, cl, id, rc);
    if (w->crashing || w->failed || !chance(w, 4))
        return;
    o = &w->cl[rnd(w, NCLIENT)];
    if (o == cl || o == w->acting || o->waiting < 0)
        return;
    if (o->waiting < NLEASE && chance(w, 50)) {
        note(w, "client %u gives up in client %u's callback", o->owner, cl ? cl->owner : 0);
        op_give_up(w, o);
    } else {
        note(w, "client %u dies in client %u's callback", o->owner, cl ? cl->owner : 0);
        client_die(w, o, true);
    }
}

static void on_ready_one(struct world *w, struct client *cl, uint32_t id, int rc)
{

    if (w->crashing)
        return;
    if (!cl || cl->waiting < 0) {
        fail(w, "a ready callback for a waiter that waits for nothing (id %u, rc %d)", id, rc);
        return;
    }
    if (cl->waiting == NLEASE) {
        cl->dgot++;
        if (rc < 0 && cl->derr == 0)
            cl->derr = rc;
        if (!cl->dcall && cl->dgot == cl->dwant)
            ack_durable(w, cl);
        else if (!cl->dcall && cl->dgot > cl->dwant)
            fail(w, "client %u: more write completions (%u) than writes (%u)", cl->owner,
                 cl->dgot, cl->dwant);
        return;
    }
    {
        struct lease *l = &cl->l[cl->waiting];
        bool hit = false, left = false;

        for (int i = 0; i < l->n; i++) {
            if (l->h[i] != id || l->ready[i])
                continue;
            hit = true;
            l->ready[i] = 1;
            if (rc < 0) {
                if (i < l->fail_at)
                    l->fail_at = i;
                continue;
            }
            if (!bytes_ok(w, slot_at(w, l->tiers[i], l->offs[i]), ns_blk[l->ns], l->ns, l->c,
                          i, l->ver[i], &l->xx[i]))
                fail(w, "client %u: block %d/%d/%d handed over with the wrong bytes "
                        "(version %u) after its move landed", cl->owner, l->ns, l->c, i,
                     l->ver[i]);
        }
        if (!hit)
            fail(w, "client %u: a ready callback for id %u it does not wait for", cl->owner,
                 id);
        for (int i = 0; i < l->n; i++)
            left |= !l->ready[i];
        if (!left)
            finish_get(w, cl, l);
    }
}

/* ---- the model's view of the store ------------------------------------------ */

static void story(struct world *w, int ns, int c, int p, struct tier_story *s)
{
    struct tier_key k = key_of(ns, c, p);

    tier_story_get(w->ns[ns], &k, s);
}

/* A durable commit's answer: every key of its batch on disk now. */
static void ack_durable(struct world *w, struct client *cl)
{
    cl->waiting = -1;
    if (cl->derr < 0)
        return; /* not acknowledged: nothing promised */
    for (int i = cl->dfirst; i < cl->dfirst + cl->dn; i++) {
        struct tier_story s;
        struct mkey *m = &w->m[cl->dns][cl->dc][i];

        story(w, cl->dns, cl->dc, i, &s);
        /* still written by the other client it was deduplicated against
         * (and not gone and written again since): nothing of it is on disk */
        if (s.writing && m->gone == cl->dgone[i - cl->dfirst]) {
            fail(w, "client %u: durable commit of %d/%d/%d..%d acknowledged while block %d is "
                    "still being written by another client", cl->owner, cl->dns, cl->dc,
                 cl->dfirst, cl->dfirst + cl->dn - 1, i);
            return;
        }
        if (m->ver != cl->dver[i - cl->dfirst])
            continue; /* put anew since the commit: the ack is for the rest */
        if (!m->may && (cl->dexcused || !cl->dvouch[i - cl->dfirst]))
            continue; /* removed, purged or a disk fault since, or gone before it was
                         vouched for: nothing promised */
        if (!s.present || !s.on_disk) {
            fail(w, "client %u: durable commit of %d/%d/%d..%d acknowledged, but block %d is "
                    "%s", cl->owner, cl->dns, cl->dc, cl->dfirst, cl->dfirst + cl->dn - 1, i,
                 s.present ? "not on disk" : "absent");
            return;
        }
        m->durable = true;
        w->res->acked_durable++;
    }
}

/* Held slots: no two different blocks share one. */
struct hold {
    uint8_t pool;
    uint64_t off;
    uint64_t who; /* (ns, c, p, ver) */
};

static int hold_cmp(const void *a, const void *b)
{
    const struct hold *x = a, *y = b;

    if (x->pool != y->pool)
        return x->pool < y->pool ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

static void check_holds(struct world *w)
{
    struct hold hs[NCLIENT * (NLEASE * LEN + MAXB)];
    size_t n = 0;

    for (int ci = 0; ci < NCLIENT; ci++) {
        struct client *cl = &w->cl[ci];

        for (int li = 0; li < NLEASE; li++) {
            struct lease *l = &cl->l[li];

            for (int i = 0; l->on && i < l->n && i < l->fail_at; i++) {
                if (!l->ready[i])
                    continue;
                if (!bytes_ok(w, slot_at(w, l->tiers[i], l->offs[i]), ns_blk[l->ns], l->ns,
                              l->c, i, l->ver[i], &l->xx[i])) {
                    fail(w, "client %u: leased block %d/%d/%d (version %u, %s slot %llu) "
                            "does not hold its bytes", cl->owner, l->ns, l->c, i, l->ver[i],
                         l->tiers[i] == TIER_L_HOT ? "hot" : "warm",
                         (unsigned long long)l->offs[i]);
                    return;
                }
                w->res->leases_checked++;
                hs[n++] = (struct hold){ l->tiers[i] == TIER_L_HOT, l->offs[i],
                                         pay_seed(l->ns, l->c, i, l->ver[i]) };
            }
        }
        for (int i = 0; cl->r.on && i < cl->r.n; i++) {
            struct resv *r = &cl->r;

            if (r->ids[i] == TIER_NONE)
                continue;
            if (r->filled && XXH3_64bits(slot_at(w, r->hot ? TIER_L_HOT : TIER_L_WARM,
                                                 r->offs[i]), ns_blk[r->ns]) != r->xx[i]) {
                fail(w, "client %u: reserved slot of %d/%d/%d changed under its writer",
                     cl->owner, r->ns, r->c, r->first + i);
                return;
            }
            hs[n++] = (struct hold){ r->hot, r->offs[i],
                                     pay_seed(r->ns, r->c, r->first + i, r->ver[i]) };
        }
    }
    qsort(hs, n, sizeof(hs[0]), hold_cmp);
    for (size_t i = 1; i < n; i++)
        if (hs[i].pool == hs[i - 1].pool && hs[i].off == hs[i - 1].off &&
            hs[i].who != hs[i - 1].who) {
            fail(w, "%s slot %llu is held for two different blocks", hs[i].pool ? "hot" : "warm",
                 (unsigned long long)hs[i].off);
            return;
        }
}

/* Every key against the model: presence, durability, orphans. */
static void check_keys(struct world *w)
{
    for (int ns = 0; ns < NNS; ns++)
        for (int c = 0; c < NCHAIN; c++) {
            bool prev = true; /* the root's "parent" is always there */
            bool pwriting = false; /* the block before is being written (a child waits) */
            bool rooted = true;

            for (int p = 0; p < LEN; p++) {
                struct mkey *m = &w->m[ns][c][p];
                struct tier_story s;

                story(w, ns, c, p, &s);
                if (w->watch[0] && w->watch[0] - 1 == ns && w->watch[1] == c &&
                    w->watch[2] == p && (s.present != w->wpresent || s.level != w->wlevel)) {
                    fprintf(stderr, "watch %d/%d/%d at step %llu: present %d level %u disk %d "
                                    "event %u\n", ns, c, p, (unsigned long long)w->step,
                            s.present, s.level, s.on_disk, s.event);
                    w->wpresent = s.present;
                    w->wlevel = s.level;
                }
                if (s.present && !m->may) {
                    fail(w, "block %d/%d/%d is present, but it was gone and never committed "
                            "again (version %u)", ns, c, p, m->ver);
                    return;
                }
                /* leaf-first in every tier: a block is never dropped while its
                 * child stays (unless it was an orphan itself, swept) */
                if (!s.present && m->seen && s.event == TIER_EV_DROPPED && p + 1 < LEN &&
                    w->m[ns][c][p + 1].seen && m->rooted) {
                    struct tier_story cs;

                    story(w, ns, c, p + 1, &cs);
                    if (cs.present) {
                        fail(w, "block %d/%d/%d was dropped while its child %d stays (level "
                                "%u): leaf-first broken", ns, c, p, p + 1, cs.level);
                        return;
                    }
                }
                if (!s.present) {
                    m->may = false;
                    m->durable = false; /* evicted: durability promised nothing more */
                }
                if (s.present && m->durable && !s.on_disk) {
                    fail(w, "block %d/%d/%d was acknowledged durable, but is present with no "
                            "copy on disk", ns, c, p);
                    return;
                }
                /* (on disk it may stay: a put of its prefix links it again;
                 * leased or moving, the sweep leaves it until it is free, and
                 * a write behind 30 random completions can take 250 steps) */
                if (s.present && !prev && s.leases == 0 && !s.moving && !pwriting &&
                    !s.on_disk) {
                    if (!m->orphan_at)
                        m->orphan_at = w->step + 1;
                    else if (w->step + 1 - m->orphan_at > ORPHAN_STEPS) {
                        struct tier_story ps;

                        story(w, ns, c, p - 1, &ps);
                        fail(w, "block %d/%d/%d (level %u, on disk %d, linked %s) is an "
                                "orphan (block %d before it is gone: event %u from level %u) "
                                "and has stayed for %d steps", ns, c, p, s.level, s.on_disk,
                             s.chain_ok ? "as a root" : "to a lost parent", p - 1, ps.event,
                             ps.event_level, ORPHAN_STEPS);
                        return;
                    }
                } else {
                    m->orphan_at = 0;
                }
                prev = s.present;
                m->rooted = rooted;
                rooted = rooted && s.present;
                pwriting = s.writing;
                m->seen = s.present;
                if (m->held && !s.present && !s.writing)
                    m->gone++;
                m->held = s.present || s.writing;
            }
        }
}

/* A pinned block stays in the store (some tier) until its pin goes, unless
 * it was removed or purged, or a disk fault may have cost its read. */
static void check_pins(struct world *w)
{
    for (int ci = 0; ci < NCLIENT; ci++) {
        struct pin *pn = &w->cl[ci].pin;
        struct tier_story s;

        if (!pn->on || pn->excused)
            continue;
        for (int p = 0; p < pn->n; p++) {
            story(w, pn->ns, pn->c, p, &s);
            if (!s.present) {
                fail(w, "block %d/%d/%d left the store while client %u pins it (event %u "
                        "from level %u)", pn->ns, pn->c, p, w->cl[ci].owner, s.event,
                     s.event_level);
                return;
            }
            if (pn->mem[p] && s.level == TIER_L_COLD) {
                fail(w, "block %d/%d/%d left memory for the disk while client %u pins it",
                     pn->ns, pn->c, p, w->cl[ci].owner);
                return;
            }
        }
    }
}

static void check_all(struct world *w)
{
    char why[256];

    if (w->failed)
        return;
    if (tier_check(w->t, why, sizeof(why)) < 0) {
        fail(w, "tier_check: %s", why);
        return;
    }
    check_holds(w);
    if (!w->failed)
        check_pins(w);
    if (!w->failed)
        check_keys(w);
}

/* ---- operations ------------------------------------------------------------------ */

static void keys_of(int ns, int c, int first, int n, struct tier_key *k)
{
    for (int i = 0; i < n; i++)
        k[i] = key_of(ns, c, first + i);
}

/* Slots held by the simulated clients, and whether any is on the disk's way. */
static unsigned held_slots(struct world *w)
{
    unsigned n = 0;

    for (int ci = 0; ci < NCLIENT; ci++) {
        struct client *cl = &w->cl[ci];

        for (int li = 0; li < NLEASE; li++)
            n += cl->l[li].on ? (unsigned)cl->l[li].n : 0;
        n += cl->r.on ? (unsigned)cl->r.n : 0;
        n += cl->pin.on ? (unsigned)cl->pin.n : 0;
    }
    return n;
}

/* Whether the disk holds a block it could evict to make room: on disk only,
 * unleased, not being read, not held for a durable commit, with no block
 * after it in its chain (the store's cold leaves, tier_cold_leaf, less those
 * cold_victim skips). Each one found is marked in mark (when given); with
 * only, a block counts only if only marks it too. */
static bool disk_evictable(struct world *w, const bool (*only)[NCHAIN][LEN],
                           bool (*mark)[NCHAIN][LEN])
{
    bool any = false;

    if (mark)
        memset(mark, 0, sizeof(bool[NNS][NCHAIN][LEN]));
    for (int ns = 0; ns < NNS; ns++)
        for (int c = 0; c < NCHAIN; c++)
            for (int p = 0; p < LEN; p++) {
                struct tier_story s, n;

                if (only && !only[ns][c][p])
                    continue;
                story(w, ns, c, p, &s);
                if (!s.present || s.level != TIER_L_COLD || s.leases || s.moving || s.held)
                    continue;
                if (p + 1 < LEN)
                    story(w, ns, c, p + 1, &n);
                if (p + 1 == LEN || (!n.present && !n.writing)) {
                    if (!mark)
                        return true;
                    mark[ns][c][p] = any = true;
                }
            }
    return any;
}

/* Bytes of warm held by blocks with no copy on disk yet. */
static uint64_t dirty_bytes(struct world *w)
{
    uint64_t b = 0;

    for (int ns = 0; ns < NNS; ns++)
        for (int c = 0; c < NCHAIN; c++)
            for (int p = 0; p < LEN; p++) {
                struct tier_story s;

                story(w, ns, c, p, &s);
                if (s.present && s.level != TIER_L_COLD && !s.on_disk)
                    b += ns_blk[ns];
            }
    return b;
}

/* Whether a warm slot for a block of ns can be had now (a probe: reserved,
 * then aborted; its key is none of the model's). Full of blocks on their
 * way to disk, or of segments of the other size, it cannot. */
static bool slot_free(struct world *w, int ns)
{
    struct tier_key k = key_of(ns, 255, 255);
    uint32_t id;
    uint64_t off;
    int rc = tier_reserve(w->ns[ns], 999, NULL, &k, 1, &id, &off);

    if (rc > 0)
        tier_abort(w->ns[ns], 999, &k, 1);
    return rc > 0;
}

static int prefix_hits(struct world *w, int ns, int c)
{
    struct tier_key k[LEN];

    keys_of(ns, c, 0, LEN, k);
    return (int)tier_lookup(w->ns[ns], k, LEN, NULL);
}

static void op_reserve(struct world *w, struct client *cl, bool hot)
{
    struct resv *r = &cl->r;
    struct tier_key k[MAXB], parent;
    int ns = (int)rnd(w, NNS), c = (int)rnd(w, NCHAIN), h = prefix_hits(w, ns, c), rc;
    struct tier_stats st;
    struct tier_cold_stats cs;
    unsigned held = held_slots(w);

    if (r->on || h >= LEN)
        return;
    r->ns = ns;
    r->c = c;
    /* mostly extend the chain where it ends; sometimes rewrite part of it (dedup) */
    r->first = chance(w, 20) ? (int)rnd(w, (uint32_t)h + 1) : h;
    r->n = 1 + (int)rnd(w, MAXB);
    if (r->first + r->n > LEN)
        r->n = LEN - r->first;
    r->hot = hot;
    keys_of(ns, c, r->first, r->n, k);
    if (r->first > 0)
        parent = key_of(ns, c, r->first - 1);
    rc = (hot ? tier_reserve_hot : tier_reserve)(w->ns[ns], cl->owner,
                                                 r->first > 0 ? &parent : NULL, k,
                                                 (size_t)r->n, r->ids, r->offs);
    note(w, "client %u reserve%s %d/%d/%d+%d -> %d", cl->owner, hot ? "_hot" : "", ns, c,
         r->first, r->n, rc);
    if (rc < 0) {
        tier_stats_get(w->t, &st);
        tier_cold_stats_get(w->cold, &cs);
        /* a put with nothing held anywhere, into a disk with room, is never
         * refused for lack of room: blocks can always be moved down */
        if (rc == -ENOSPC && !hot && held == 0 && !cs.failed &&
            cs.bytes_used + 4 * (uint64_t)MAXB * ns_blk[1] < cs.bytes_capacity)
            fail(w, "reserve of %d blocks refused with -ENOSPC although no block is leased "
                    "or reserved and the disk has room (%llu of %llu bytes used)", r->n,
                 (unsigned long long)cs.bytes_used, (unsigned long long)cs.bytes_capacity);
        return;
    }
    r->on = true;
    r->filled = false;
    for (int i = 0; i < r->n; i++)
        r->ver[i] = r->ids[i] == TIER_NONE ? 0 : ++w->gver;
}

static void op_fill(struct world *w, struct client *cl)
{
    struct resv *r = &cl->r;

    if (!r->on || r->filled)
        return;
    for (int i = 0; i < r->n; i++) {
        uint8_t *p;

        if (r->ids[i] == TIER_NONE)
            continue;
        p = slot_at(w, r->hot ? TIER_L_HOT : TIER_L_WARM, r->offs[i]);
        pay_fill(p, ns_blk[r->ns], pay_seed(r->ns, r->c, r->first + i, r->ver[i]));
        r->xx[i] = XXH3_64bits(p, ns_blk[r->ns]);
    }
    r->filled = true;
    note(w, "client %u fill %d/%d/%d+%d", cl->owner, r->ns, r->c, r->first, r->n);
}

/* The keys of a reservation just committed: the model's version. */
static void committed(struct world *w, struct resv *r)
{
    for (int i = 0; i < r->n; i++) {
        struct mkey *m = &w->m[r->ns][r->c][r->first + i];

        if (r->ids[i] == TIER_NONE)
            continue;
        m->ver = r->ver[i];
        m->may = true;
        m->durable = false;
    }
    r->on = false;
}

static void op_commit(struct world *w, struct client *cl, bool durable)
{
    struct resv *r = &cl->r;
    struct tier_key k[MAXB];
    uint32_t ids[MAXB * LEN], pend = 0;
    int rc;

    if (!r->on || !r->filled || (durable && cl->waiting >= 0))
        return;
    keys_of(r->ns, r->c, r->first, r->n, k);
    if (!durable) {
        size_t n = tier_commit(w->ns[r->ns], cl->owner, k, (size_t)r->n);

        note(w, "client %u commit %d/%d/%d+%d -> %zu", cl->owner, r->ns, r->c, r->first, r->n,
             n);
        committed(w, r);
        return;
    }
    cl->waiting = NLEASE;
    cl->dcall = true;
    cl->dgot = 0;
    cl->derr = 0;
    cl->dns = r->ns;
    cl->dc = r->c;
    cl->dfirst = r->first;
    cl->dn = r->n;
    committed(w, r); /* the model's versions first: acks check them */
    for (int i = 0; i < r->n; i++) {
        cl->dver[i] = w->m[r->ns][r->c][r->first + i].ver;
        cl->dgone[i] = w->m[r->ns][r->c][r->first + i].gone;
    }
    rc = tier_commit_durable(w->ns[r->ns], cl->owner, k, (size_t)r->n, cl, ids, &pend);
    note(w, "client %u commit_durable %d/%d/%d+%d -> %d (%u pending)", cl->owner, r->ns, r->c,
         r->first, r->n, rc, pend);
    cl->dcall = false;
    cl->dexcused = false;
    for (int i = 0; rc >= 0 && i < r->n && !w->failed; i++) {
        struct tier_story s;

        story(w, r->ns, r->c, r->first + i, &s);
        /* from here until the answer, only a removal, a purge or a disk
         * fault may take it: the store holds what a durable commit vouches for */
        cl->dvouch[i] = s.present || s.writing;
        if (!s.present && !s.writing) /* writing: another client's, waited for */
            fail(w, "client %u: durable commit of %d/%d/%d+%d succeeded, but block %d is not "
                    "stored", cl->owner, r->ns, r->c, r->first, r->n, r->first + i);
    }
    if (rc < 0) {
        /* refused: what started still lands, and reports, but acks nothing */
        if (cl->derr == 0)
            cl->derr = rc;
    }
    cl->dwant = pend;
    if (cl->dgot > cl->dwant)
        fail(w, "client %u: more write completions (%u) than writes (%u)", cl->owner, cl->dgot,
             cl->dwant);
    else if (cl->dgot == cl->dwant)
        ack_durable(w, cl);
}

static void op_abort(struct world *w, struct client *cl)
{
    struct resv *r = &cl->r;
    struct tier_key k[MAXB];

    if (!r->on)
        return;
    keys_of(r->ns, r->c, r->first, r->n, k);
    note(w, "client %u abort %d/%d/%d+%d -> %zu", cl->owner, r->ns, r->c, r->first, r->n,
         tier_abort(w->ns[r->ns], cl->owner, k, (size_t)r->n));
    r->on = false;
}

static void release_lease(struct world *w, struct lease *l, bool reclaimed)
{
    if (l->on && l->n > 0)
        tier_release(w->t, l->h, (size_t)l->n, reclaimed);
    l->on = false;
}

/* Drive the disk and the hot tier until nothing is queued: every move lands. */
static void settle_all(struct world *w)
{
    for (int guard = 0; guard < 10000; guard++) {
        struct tier_nvme *io = tier_cold_io(w->cold);

        tier_cold_flush(w->cold);
        if (tier_nvme_sim_queued(io) == 0 && !tier_hot_inflight(w->hot)) {
            tier_poll(w->t, false);
            if (tier_nvme_sim_queued(io) == 0 && !tier_hot_inflight(w->hot) &&
                !tier_cold_busy(w->cold))
                return;
        }
        while (tier_nvme_sim_queued(io) > 0)
            tier_nvme_sim_complete(io, 0, 0);
        tier_poll(w->t, false);
    }
    fail(w, "the disk and the hot tier did not settle in 10000 rounds");
}

/* A get of the leading run of chain c (flags TIER_GET_*). expect >= 0: a
 * lookup just found that many, and nothing should cut the get short. */
static int get_run(struct world *w, struct client *cl, int ns, int c, int n, unsigned flags,
                   int expect)
{
    struct tier_key k[LEN];
    struct lease *l = NULL;
    uint32_t pend = 0, notready = 0;
    int li, rc;

    for (li = 0; li < NLEASE; li++)
        if (!cl->l[li].on) {
            l = &cl->l[li];
            break;
        }
    if (!l || cl->waiting >= 0)
        return -1;
    memset(l, 0, sizeof(*l));
    keys_of(ns, c, 0, n, k);
    l->ns = ns;
    l->c = c;
    l->hot_ok = flags & TIER_GET_HOT;
    cl->waiting = li;
    rc = tier_get(&(struct tier_get_args){ .ns = w->ns[ns], .keys = k, .n = (size_t)n,
        .flags = flags, .ids = l->h, .offs = l->offs, .tiers = l->tiers, .waiter = cl,
        .pending = &pend });
    note(w, "client %u get%s%s %d/%d/0+%d -> %d (%u pending)%s", cl->owner,
         flags & TIER_GET_HOT ? " hot" : "", flags & TIER_GET_PROMOTE ? " promote" : "", ns, c,
         n, rc, pend, expect >= 0 ? " after a lookup" : "");
    if (rc < 0) {
        cl->waiting = -1;
        if (rc != -EINVAL)
            fail(w, "get failed with %d", rc);
        return -1;
    }
    l->on = true;
    l->n = rc;
    l->fail_at = rc;
    l->pending = true;
    for (int i = 0; i < rc; i++) {
        struct mkey *m = &w->m[ns][c][i];

        l->ver[i] = m->ver;
        if (!m->may || m->ver == 0) {
            fail(w, "get handed out block %d/%d/%d, which the model says is gone", ns, c, i);
            return -1;
        }
        if (l->tiers[i] == TIER_L_HOT && !(flags & TIER_GET_HOT)) {
            fail(w, "a plain get was handed a hot slot for %d/%d/%d", ns, c, i);
            return -1;
        }
        if (!tier_ready(w->t, l->h[i])) {
            notready++;
            continue;
        }
        l->ready[i] = 1;
        if (!bytes_ok(w, slot_at(w, l->tiers[i], l->offs[i]), ns_blk[ns], ns, c, i, l->ver[i],
                      &l->xx[i])) {
            fail(w, "get handed out block %d/%d/%d with the wrong bytes (version %u, %s)", ns,
                 c, i, l->ver[i], l->tiers[i] == TIER_L_HOT ? "hot" : "warm");
            return -1;
        }
    }
    if (notready != pend) {
        fail(w, "get of %d/%d: %u leased blocks are not ready, but %u are pending (a lease "
                "that never becomes ready)", ns, c, notready, pend);
        return -1;
    }
    if (pend == 0)
        finish_get(w, cl, l);
    /* with room to spare, a get right after a lookup gets what the lookup
     * found (no room: warm held by clients, or full of blocks not yet on disk,
     * which a read from disk may not push out) */
    if (expect >= 0 && rc < expect && !w->faulted &&
        held_slots(w) + (unsigned)expect <= WARM_BYTES / ns_blk[1] / 3 &&
        dirty_bytes(w) < WARM_BYTES / 2 && slot_free(w, ns))
    {
        struct tier_story s;

        story(w, ns, c, rc, &s);
        fail(w, "get of %d/%d cut short: the lookup just found %d blocks, the get leased %d "
                "(the next: present %d level %u on disk %d leases %u)", ns, c, expect, rc,
             s.present, s.level, s.on_disk, s.leases);
    }
    return rc;
}

static void op_get(struct world *w, struct client *cl, unsigned flags)
{
    int ns = (int)rnd(w, NNS), c = (int)rnd(w, NCHAIN);

    get_run(w, cl, ns, c, 1 + (int)rnd(w, LEN), flags, -1);
}

/* A lookup (with prefetch, sometimes), the disk maybe, then a get of what it found. */
static void op_lookup_get(struct world *w, struct client *cl)
{
    int ns = (int)rnd(w, NNS), c = (int)rnd(w, NCHAIN);
    struct tier_key k[LEN];
    unsigned flags = chance(w, 30) ? TIER_GET_HOT : 0;
    int h, expect;

    if (cl->waiting >= 0)
        return;
    keys_of(ns, c, 0, LEN, k);
    h = (int)tier_lookup(w->ns[ns], k, LEN, NULL);
    if (chance(w, 60))
        tier_prefetch(w->ns[ns], k, (size_t)h, chance(w, 30) ? TIER_GET_PROMOTE : 0);
    note(w, "client %u lookup %d/%d -> %d", cl->owner, ns, c, h);
    expect = h;
    if (chance(w, 50)) {
        settle_all(w);
        /* the settle ran the movers: a full disk may have evicted the
         * chain's tail since (seed 36, 6 MiB, faults: leaves 3 then 2), so
         * the get owes only the run still present (read without touching
         * recency, which would change the schedule) */
        for (expect = 0; expect < h; expect++) {
            struct tier_story s;

            story(w, ns, c, expect, &s);
            if (s.present)
                continue;
            /* and only for a reason a settle may have: evicted, dropped,
             * or read back bad (review of df56bd3: a block forgotten with
             * no event was excused too) */
            if (s.event != TIER_EV_EVICTED && s.event != TIER_EV_DROPPED &&
                s.event != TIER_EV_CHECKSUM && s.event != TIER_EV_IO_ERROR) {
                fail(w, "block %d/%d/%d, found by the lookup, went absent in a settle of "
                        "the disk (event %u)", ns, c, expect, s.event);
                return;
            }
            break;
        }
    }
    if (h > 0)
        get_run(w, cl, ns, c, h, flags, expect);
}

static void op_prefetch(struct world *w)
{
    int ns = (int)rnd(w, NNS), c = (int)rnd(w, NCHAIN);
    struct tier_key k[LEN];
    int h;

    keys_of(ns, c, 0, LEN, k);
    h = (int)tier_lookup(w->ns[ns], k, LEN, NULL);
    note(w, "prefetch %d/%d (%d hits) -> %zu reads", ns, c, h,
         tier_prefetch(w->ns[ns], k, (size_t)h, chance(w, 30) ? TIER_GET_PROMOTE : 0));
}

static void unpin(struct world *w, struct client *cl)
{
    if (cl->pin.on)
        tier_release(w->t, cl->pin.ids, (size_t)cl->pin.n, false);
    cl->pin.on = false;
}

/* A scheduler's pinning lookup: the leading run held (its disk blocks read
 * into warm) until unpinned; one pin per client, the last replaced. */
static void op_pin(struct world *w, struct client *cl)
{
    struct pin *pn = &cl->pin;
    struct tier_key k[LEN];

    unpin(w, cl);
    memset(pn, 0, sizeof(*pn));
    pn->ns = (int)rnd(w, NNS);
    pn->c = (int)rnd(w, NCHAIN);
    keys_of(pn->ns, pn->c, 0, LEN, k);
    pn->n = (int)tier_pin(w->ns[pn->ns], k, LEN, chance(w, 30) ? TIER_GET_PROMOTE : 0, pn->ids);
    pn->on = pn->n > 0;
    for (int p = 0; p < pn->n; p++) {
        struct tier_story s;

        story(w, pn->ns, pn->c, p, &s);
        pn->mem[p] = s.level == TIER_L_HOT || s.level == TIER_L_WARM;
    }
    note(w, "client %u pin %d/%d -> %d", cl->owner, pn->ns, pn->c, pn->n);
}

static void op_unpin(struct world *w, struct client *cl)
{
    if (!cl->pin.on)
        return;
    note(w, "client %u unpin %d/%d", cl->owner, cl->pin.ns, cl->pin.c);
    unpin(w, cl);
}

/* A worker's get of what some client pinned: every pinned block in memory
 * (warm, or hot read in place) is leased, whatever happened since. */
static void op_pin_get(struct world *w, struct client *cl)
{
    struct pin *pn = &w->cl[rnd(w, NCLIENT)].pin;
    struct tier_key k[LEN];
    uint8_t tiers[LEN];
    int inmem = 0, rc;

    if (!pn->on || cl->waiting >= 0)
        return;
    keys_of(pn->ns, pn->c, 0, pn->n, k);
    tier_lookup(w->ns[pn->ns], k, (size_t)pn->n, tiers);
    while (inmem < pn->n && (tiers[inmem] == TIER_L_WARM || tiers[inmem] == TIER_L_HOT))
        inmem++;
    rc = get_run(w, cl, pn->ns, pn->c, pn->n, TIER_GET_HOT, -1);
    if (w->failed || rc < 0)
        return;
    if (rc < inmem && !pn->excused) {
        fail(w, "get of pinned %d/%d leased %d blocks, but %d pinned ones are in memory",
             pn->ns, pn->c, rc, inmem);
        return;
    }
    w->res->pins_checked++;
}

/* Pins, and durable commits waiting for their answer, whose blocks a
 * removal, a purge or a disk fault may take (ns, c < 0: any). */
static void excuse_pins(struct world *w, int ns, int c)
{
    for (int ci = 0; ci < NCLIENT; ci++) {
        struct client *cl = &w->cl[ci];
        struct pin *pn = &cl->pin;

        if (pn->on && (ns < 0 || (pn->ns == ns && (c < 0 || pn->c == c))))
            pn->excused = true;
        if (cl->waiting == NLEASE && (ns < 0 || (cl->dns == ns && (c < 0 || cl->dc == c))))
            cl->dexcused = true;
    }
}

/* A waiting get's deadline: keep the ready leading run, give back the rest. */
static void op_give_up(struct world *w, struct client *cl)
{
    struct lease *l;
    int hits = 0;

    if (cl->waiting < 0 || cl->waiting == NLEASE)
        return;
    l = &cl->l[cl->waiting];
    tier_forget_waiter(w->t, cl);
    while (hits < l->fail_at && l->ready[hits])
        hits++;
    if (l->n > hits)
        tier_release(w->t, l->h + hits, (size_t)(l->n - hits), false);
    l->n = hits;
    l->fail_at = hits;
    finish_get(w, cl, l);
    note(w, "client %u gives up waiting: keeps %d", cl->owner, hits);
}

static void op_release(struct world *w, struct client *cl)
{
    int li = (int)rnd(w, NLEASE);
    struct lease *l = &cl->l[li];

    if (!l->on || cl->waiting == li)
        return;
    check_holds(w); /* the bytes held to the last moment */
    release_lease(w, l, false);
    note(w, "client %u release lease %d", cl->owner, li);
}

static void op_remove(struct world *w)
{
    int ns = (int)rnd(w, NNS), c = (int)rnd(w, NCHAIN), first = (int)rnd(w, LEN);
    struct tier_key k[LEN];

    keys_of(ns, c, first, LEN - first, k);
    excuse_pins(w, ns, c);
    note(w, "remove %d/%d/%d.. -> %zu", ns, c, first,
         tier_remove(w->ns[ns], k, (size_t)(LEN - first)));
}

static void op_purge(struct world *w)
{
    int ns = (int)rnd(w, NNS);

    excuse_pins(w, ns, -1);
    note(w, "purge ns %d -> %d", ns, tier_purge_ns(w->ns[ns]));
}

/* A client dies: everything it held is reclaimed, its waits forgotten. */
static void client_die(struct world *w, struct client *cl, bool store_alive)
{
    if (store_alive) {
        tier_forget_waiter(w->t, cl);
        if (cl->r.on)
            tier_abort_ids(w->t, cl->owner, cl->r.ids, (size_t)cl->r.n);
        for (int li = 0; li < NLEASE; li++)
            release_lease(w, &cl->l[li], true);
        unpin(w, cl);
    }
    memset(&cl->r, 0, sizeof(cl->r));
    memset(&cl->pin, 0, sizeof(cl->pin));
    memset(cl->l, 0, sizeof(cl->l));
    cl->waiting = -1;
    cl->dcall = false;
}

static void op_disk(struct world *w, bool fault)
{
    struct tier_nvme *io = tier_cold_io(w->cold);
    unsigned q = tier_nvme_sim_queued(io), k = rnd(w, q + 1);

    if (q == 0) {
        tier_cold_flush(w->cold);
        return;
    }
    /* a few completions at once, in random order */
    for (unsigned j = 0; j < 1 + rnd(w, 4) && tier_nvme_sim_queued(io) > 0; j++) {
        k = rnd(w, tier_nvme_sim_queued(io));
        tier_nvme_sim_complete(io, k, fault && j == 0 ? -EIO : 0);
    }
    w->faulted |= fault;
    if (fault) {
        w->fault_at = w->step + 1;
        excuse_pins(w, -1, -1); /* a pinned block's read may have failed */
    }
    note(w, "disk: %u queued, completed some%s", q, fault ? " (the first with -EIO)" : "");
}

/* Power loss and restart: memory gone, the disk as its syncs left it. */
static void op_crash(struct world *w)
{
    for (int ns = 0; ns < NNS; ns++)
        for (int c = 0; c < NCHAIN; c++)
            for (int p = 0; p < LEN; p++) {
                struct tier_story s;

                story(w, ns, c, p, &s);
                w->m[ns][c][p].was = s.present;
            }
    char cmd[256], saved[256];

    tier_nvme_sim_crash(tier_cold_io(w->cold), mix(&w->rng));
    /* the index as the crash leaves it: the teardown below runs code a dead
     * process would not (callbacks that would evict, remove, commit), so
     * whatever it does to LMDB is undone; the data file it cannot touch (the
     * simulated disk refuses everything once crashed) */
    snprintf(cmd, sizeof(cmd), "cp -a '%s/cold.lmdb' '%s/crash.lmdb'", w->dir, w->dir);
    if (system(cmd) != 0) {
        fail(w, "could not save the index at the crash");
        return;
    }
    w->crashing = true;
    world_close(w);
    w->crashing = false;
    snprintf(cmd, sizeof(cmd), "%s/cold.lmdb", w->dir);
    snprintf(saved, sizeof(saved), "%s/crash.lmdb", w->dir);
    if (cmn_rmtree(cmd) != 0 || rename(saved, cmd) != 0) {
        fail(w, "could not restore the index of the crash");
        return;
    }
    for (int i = 0; i < NCLIENT; i++)
        client_die(w, &w->cl[i], false);
    w->res->crashes++;
    if (world_open(w) < 0) {
        fail(w, "the store did not reopen after a crash");
        return;
    }
    note(w, "crash and restart");
    for (int ns = 0; ns < NNS; ns++)
        for (int c = 0; c < NCHAIN; c++)
            for (int p = 0; p < LEN; p++) {
                struct mkey *m = &w->m[ns][c][p];
                struct tier_story s;

                story(w, ns, c, p, &s);
                if (s.present && !m->was) {
                    fail(w, "after the restart block %d/%d/%d is back, but it was gone before "
                            "the crash", ns, c, p);
                    return;
                }
                /* what a restart must serve: every block acknowledged durable
                 * (and not evicted since), whether its chain is whole or not */
                if (m->durable && m->was && !s.present) {
                    struct tier_key k = key_of(ns, c, p);

                    fail(w, "block %d/%d/%d was acknowledged durable and is lost after the "
                            "crash (in the disk's index: %d; event %u)", ns,
                         c, p, tier_cold_has(w->cold, (uint32_t)ns_id(ns), &k), s.event);
                    return;
                }
                if (!s.present)
                    m->may = false;
            }
    /* every block back holds its bytes: read each run through a get */
    for (int ns = 0; ns < NNS && !w->failed; ns++)
        for (int c = 0; c < NCHAIN && !w->failed; c++) {
            struct client *cl = &w->cl[0];

            get_run(w, cl, ns, c, LEN, 0, -1);
            settle_all(w);
            if (cl->waiting >= 0)
                fail(w, "a get after the restart never finished");
            for (int li = 0; li < NLEASE; li++)
                release_lease(w, &cl->l[li], false);
        }
}

/* ---- the schedule ------------------------------------------------------------------ */

struct weight {
    int op;
    unsigned w;
};

static const struct weight weights[] = {
    { SIM_RESERVE, 12 },  { SIM_RESERVE_HOT, 5 }, { SIM_FILL, 14 },      { SIM_COMMIT, 8 },
    { SIM_COMMIT_DURABLE, 6 }, { SIM_ABORT, 1 },  { SIM_GET, 6 },        { SIM_GET_HOT, 4 },
    { SIM_GET_PROMOTE, 2 }, { SIM_LOOKUP_GET, 5 }, { SIM_PREFETCH, 3 },  { SIM_GIVE_UP, 1 },
    { SIM_RELEASE, 12 },  { SIM_REMOVE, 1 },      { SIM_PURGE, 0 },      { SIM_FLUSH, 1 },
    { SIM_DIE, 0 },       { SIM_MAINTAIN, 10 },   { SIM_DISK, 16 },      { SIM_DISK_FAULT, 0 },
    { SIM_POLL, 8 },      { SIM_CRASH, 0 },       { SIM_PIN, 3 },        { SIM_UNPIN, 2 },
    { SIM_PIN_GET, 3 },
};

/* Rare operations by their own odds per step (in 10000): they reset much. */
static int rare_op(struct world *w)
{
    uint32_t x = rnd(w, 10000);

    if (x < 15)
        return SIM_CRASH;
    if (x < 45)
        return SIM_DIE;
    if (x < 50)
        return SIM_PURGE;
    if (w->o->faults && x < 90)
        return SIM_DISK_FAULT;
    return -1;
}

static int pick_op(struct world *w)
{
    unsigned total = 0, x;
    int op = rare_op(w);

    if (op >= 0)
        return op;
    for (size_t i = 0; i < sizeof(weights) / sizeof(weights[0]); i++)
        total += weights[i].w;
    x = rnd(w, total);
    for (size_t i = 0; i < sizeof(weights) / sizeof(weights[0]); i++) {
        if (x < weights[i].w)
            return weights[i].op;
        x -= weights[i].w;
    }
    return SIM_POLL;
}

static void run_op(struct world *w, int op)
{
    struct client *cl = &w->cl[rnd(w, NCLIENT)];
    struct tier_stats before, after;
    struct tier_cold_stats cs0, cs1;
    /* the disk's evictable blocks at the start of the step */
    bool evictable0, ev0[NNS][NCHAIN][LEN];

    w->acting = cl;
    tier_stats_get(w->t, &before);
    tier_cold_stats_get(w->cold, &cs0);
    /* the disk could make room at the start of the step, with a block it
     * still holds, still evictable, at the step's end. Not any block at the
     * end: one step (a maintain's drain) may evict every leaf the disk had
     * and then drop, and a dirty block dropped makes its parent, on disk, a
     * new leaf, which the store could not have evicted before the drop */
    evictable0 = op != SIM_CRASH && disk_evictable(w, NULL, ev0);
    switch (op) {
    case SIM_RESERVE: op_reserve(w, cl, false); break;
    case SIM_RESERVE_HOT: op_reserve(w, cl, true); break;
    case SIM_FILL: op_fill(w, cl); break;
    case SIM_COMMIT: op_commit(w, cl, false); break;
    case SIM_COMMIT_DURABLE: op_commit(w, cl, true); break;
    case SIM_ABORT: op_abort(w, cl); break;
    case SIM_GET: op_get(w, cl, 0); break;
    case SIM_GET_HOT: op_get(w, cl, TIER_GET_HOT); break;
    case SIM_GET_PROMOTE: op_get(w, cl, TIER_GET_PROMOTE | (chance(w, 50) ? TIER_GET_HOT : 0));
        break;
    case SIM_LOOKUP_GET: op_lookup_get(w, cl); break;
    case SIM_PREFETCH: op_prefetch(w); break;
    case SIM_GIVE_UP: op_give_up(w, cl); break;
    case SIM_RELEASE: op_release(w, cl); break;
    case SIM_REMOVE: op_remove(w); break;
    case SIM_PURGE: op_purge(w); break;
    case SIM_FLUSH: tier_flush_begin(w->t); note(w, "flush begins"); break;
    case SIM_DIE:
        note(w, "client %u dies", cl->owner);
        client_die(w, cl, true);
        break;
    case SIM_MAINTAIN: note(w, "maintain -> %zu", tier_maintain(w->t)); break;
    case SIM_DISK: op_disk(w, false); break;
    case SIM_DISK_FAULT: op_disk(w, true); break;
    case SIM_POLL: note(w, "poll -> %d", tier_poll(w->t, false)); break;
    case SIM_CRASH: w->res->ops[op]++; op_crash(w); return;
    case SIM_PIN: op_pin(w, cl); break;
    case SIM_UNPIN: op_unpin(w, cl); break;
    case SIM_PIN_GET: op_pin_get(w, cl); break;
    }
    w->res->ops[op]++;
    if (w->failed)
        return;
    /* nothing is dropped while the disk has room (and works) */
    tier_stats_get(w->t, &after);
    tier_cold_stats_get(w->cold, &cs1);
    /* the simulated disk never flips a bit: a checksum error is a wrong byte
     * written (a slot changed under its write) or read */
    if (cs1.checksum_errors > cs0.checksum_errors)
        fail(w, "a read from disk failed its checksum: wrong bytes were written or read");
    /* (a failed write drops its block later, when its completion lands) */
    w->res->refused += after.cold_refused - before.cold_refused;
    w->res->over_budget += after.cold_over_budget - before.cold_over_budget;
    if (op != SIM_CRASH) { /* (a restart's store counts from 0) */
        w->res->cold_evicted += after.evictions[TIER_L_COLD] - before.evictions[TIER_L_COLD];
        w->res->dropped += (after.dropped - after.cold_refused - after.cold_over_budget) -
                           (before.dropped - before.cold_refused - before.cold_over_budget);
    }
    /* (blocks admission refused are dropped by design: not counted here) */
    if (after.dropped - after.cold_refused - after.cold_over_budget >
            before.dropped - before.cold_refused - before.cold_over_budget &&
        !w->faulted && !cs1.failed &&
        !(w->fault_at && w->step + 1 - w->fault_at < 500) &&
        (cs1.bytes_used + cs1.bytes_capacity / 4 < cs1.bytes_capacity ||
         (evictable0 && disk_evictable(w, (const bool (*)[NCHAIN][LEN])ev0, NULL))))
        fail(w, "%llu blocks dropped while the disk had room (%llu of %llu bytes used)",
             (unsigned long long)(after.dropped - before.dropped -
                                  (after.cold_refused - before.cold_refused) -
                                  (after.cold_over_budget - before.cold_over_budget)),
             (unsigned long long)cs1.bytes_used, (unsigned long long)cs1.bytes_capacity);
}

static void dump_trace(struct world *w)
{
    FILE *f = w->o->log ? w->o->log : stderr;
    uint64_t from = w->step >= TRACE ? w->step - TRACE + 1 : 0;

    if (w->o->quiet)
        return;
    fprintf(f, "sim: seed %llu failed at step %llu: %s\n", (unsigned long long)w->o->seed,
            (unsigned long long)w->step, w->why);
    fprintf(f, "sim: the last steps (replay: make sim SEED=%llu STEPS=%llu%s",
            (unsigned long long)w->o->seed,
            (unsigned long long)w->step + 1, w->o->faults ? " FAULTS=1" : "");
    if (w->o->cold_bytes)
        fprintf(f, " COLD_MIB=%llu", (unsigned long long)(w->o->cold_bytes >> 20));
    fprintf(f, "):\n");
    for (uint64_t s = from; s <= w->step; s++)
        if (w->trace[s % TRACE][0])
            fprintf(f, "  %s\n", w->trace[s % TRACE]);
}

int sim_run(const struct sim_opts *o, struct sim_result *r)
{
    struct world *w = calloc(1, sizeof(*w));
    int rc;

    if (!w)
        return -ENOMEM;
    memset(r, 0, sizeof(*r));
    w->o = o;
    w->res = r;
    w->rng = o->seed * 0x2545f4914f6cdd1dull + 1;
    w->buf = malloc(ns_blk[NNS - 1]);
    /* tmpfs where there is one: LMDB's syncs are free there, and the
     * simulated disk decides what a crash keeps anyway */
    snprintf(w->dir, sizeof(w->dir), "%s/kvt-sim-XXXXXX",
             access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp");
    if (!w->buf || !mkdtemp(w->dir)) {
        rc = -errno;
        free(w->buf);
        free(w);
        return rc ? rc : -ENOMEM;
    }
    if (getenv("SIM_WATCH") &&
        sscanf(getenv("SIM_WATCH"), "%d/%d/%d", &w->watch[0], &w->watch[1], &w->watch[2]) == 3)
        w->watch[0]++;
    w->trace_all = getenv("SIM_TRACE") != NULL;
    for (int i = 0; i < NCLIENT; i++) {
        w->cl[i].owner = (uint32_t)i + 1;
        w->cl[i].waiting = -1;
    }
    rc = world_open(w);
    if (rc < 0)
        goto out;
    for (w->step = 0; w->step < o->steps && !w->failed; w->step++) {
        w->faulted = false;
        w->trace[w->step % TRACE][0] = '\0';
        run_op(w, pick_op(w));
        if (!w->failed)
            check_all(w);
    }
    if (!w->failed) {
        /* the end: every client lets go, every move lands, nothing is left held */
        struct tier_stats st;

        for (int i = 0; i < NCLIENT; i++)
            client_die(w, &w->cl[i], true);
        settle_all(w);
        check_all(w);
        tier_stats_get(w->t, &st);
        if (!w->failed && (st.leases_active || st.reserved))
            fail(w, "at the end, with every client gone, %llu leases and %llu reservations "
                    "remain", (unsigned long long)st.leases_active,
                 (unsigned long long)st.reserved);
    }
    r->steps = w->step;
    rc = w->failed ? -1 : 0;
    if (w->failed)
        dump_trace(w);
    w->crashing = true;
    world_close(w);
out:
    if (cmn_rmtree(w->dir) != 0)
        rc = rc ? rc : -EIO;
    free(w->buf);
    free(w);
    return rc;
}
