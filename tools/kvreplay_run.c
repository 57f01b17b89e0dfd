/* SPDX-License-Identifier: MIT */
/*
 * kvreplay_run.c - replay a loaded trace three ways: through an in-process
 * store (tier.h, the same index and leaf-first LRU code tierd runs), through
 * a running tierd (libkvtier: real puts and verified gets), and against an
 * unbounded cache (the ceiling of every capacity curve).
 *
 * Each request is served as an engine would: look its chain up, take the
 * leading cached run (the prefix hit), then put the blocks from the first
 * miss on (they were just prefilled). Blocks after the first miss that are
 * still cached are deduplicated by the put, never counted as hits: an
 * engine cannot use a cached block whose prefix it has to recompute.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvreplay.h"
#include "kvt_common.h"
#include "tier_cold.h"
#include "tier_ram.h"
#include "kvtier.h"

#define NS 1    /* the one namespace of an in-process replay */
#define OWNER 1 /* the one client of an in-process replay */

/* Count request r's hits: the first `hit` blocks, by tier (tiers NULL: all
 * warm). Token shares follow kvr_tokens_of, block by block, so the partial
 * last block of a prompt adds only its own tokens. */
void kvr_count_hits(struct kvr_result *res, const struct kvr_req *r, uint64_t hit,
                       const uint8_t *tiers, uint32_t block_tokens)
{
    res->requests++;
    res->blocks += r->nblk;
    res->tokens += r->input_len;
    res->hit_blocks += hit;
    res->hit_tokens += kvr_tokens_of(r, hit, block_tokens);
    for (uint64_t i = 0; i < hit; i++) {
        uint8_t lvl = tiers ? tiers[i] : TIER_L_WARM;

        if (lvl >= TIER_L_N)
            lvl = TIER_L_NONE;
        res->tier_blocks[lvl]++;
        res->tier_tokens[lvl] +=
            kvr_tokens_of(r, i + 1, block_tokens) - kvr_tokens_of(r, i, block_tokens);
    }
}

/* ---- in-process ---------------------------------------------------------- */

/* An in-process replay: the store, the request that drives its gets
 * through their waits for the disk, scratch for the longest chain, and the
 * trace's clock (the store's: its write budget's window is trace time). */
struct sreplay {
    struct tier *t;
    struct tier_ns *ns;      /* the replay's one namespace (NS, the trace's block size) */
    struct tier_cold *cold;  /* the store's (NULL: no cold tier) */
    struct tier_req *req;
    uint64_t now_ms;         /* the current request's time on the trace's clock */
    uint32_t *ids;
    uint8_t *tiers;
    int got;                 /* the get's outcome, from on_get */
    bool done;
};

static void on_get(void *user, const struct tier_req_res *r)
{
    struct sreplay *s = user;

    s->got = r->rc;
    if (r->rc > 0)
        memcpy(s->ids, r->ids, (size_t)r->rc * sizeof(*s->ids));
    s->done = true;
}

static uint64_t trace_clock(void *ctx)
{
    return ((const struct sreplay *)ctx)->now_ms;
}

/* Let the mover and the disk finish: tier_maintain, then every completion,
 * until nothing is in flight. Each request thus finds the disk done with
 * the one before (the trace's pace is far below the disk's), and a replay
 * gives the same figures every time. 0 or a poll error. */
static int settle(struct sreplay *s)
{
    for (;;) {
        int rc;

        tier_maintain(s->t);
        if (!s->cold || !tier_cold_busy(s->cold))
            return 0;
        rc = tier_poll(s->t, true);
        if (rc < 0)
            return rc;
    }
}

/* Lease the leading `hit` blocks (those on disk are read back into warm),
 * then release them. Returns the blocks got or an error. */
static int store_get(struct sreplay *s, const struct tier_key *keys, size_t hit)
{
    struct tier_req_args a = { .op = TIER_REQ_GET, .ns = s->ns, .keys = keys,
                               .n = (uint32_t)hit };
    int rc;

    s->done = false;
    rc = tier_req_submit(s->req, &a);
    if (rc < 0)
        return rc;
    while (!s->done) {
        if (!s->cold || !tier_cold_busy(s->cold))
            return -EIO; /* waits for nothing in flight: a store bug, said as one */
        rc = tier_poll(s->t, true);
        if (rc < 0)
            return rc;
    }
    if (s->got > 0)
        tier_release(s->t, s->ids, (size_t)s->got, false);
    return s->got;
}

/* One request through the store, as tierd would see it from an engine:
 * lookup, get + release of the hits (what moves them up the LRU), reserve +
 * commit of the rest. tier_maintain() runs after each call, as tierd's
 * idle hook does between messages, and the disk's work lands before the
 * next call (settle). Returns 0 or a store error. */
static int store_request(struct sreplay *s, const struct kvr_trace *tr, const struct kvr_req *r,
                         const struct kvr_run_opts *o, uint64_t *offs, struct kvr_result *res)
{
    const struct tier_key *keys = tr->keys + r->first;
    size_t n = r->nblk, hit;
    struct tier_stats st;
    int got = 0, rc;

    tier_stats_get(s->t, &st);
    if (st.blocks[TIER_L_WARM] > res->held_max)
        res->held_max = st.blocks[TIER_L_WARM];
    hit = tier_lookup(s->ns, keys, n, s->tiers);
    if ((rc = settle(s)) < 0)
        return rc;
    if (hit > 0) {
        got = store_get(s, keys, hit);
        if (got < 0)
            return got;
        if ((rc = settle(s)) < 0)
            return rc;
    }
    kvr_count_hits(res, r, (uint64_t)got, s->tiers, o->block_tokens);
    if ((size_t)got == n)
        return settle(s);
    /* -EAGAIN: warm is full of blocks on their way to disk; they land */
    for (int tries = 0; (rc = tier_reserve(s->ns, OWNER, got ? &keys[got - 1] : NULL,
                                           keys + got, n - (size_t)got, s->ids, offs)) ==
                            -EAGAIN && tries < 64; tries++) {
        int sr = settle(s);

        if (sr < 0)
            return sr;
    }
    if (rc == -ENOSPC || rc == -EAGAIN) {
        res->refused += n - (size_t)got; /* an engine would just not cache them */
        return settle(s);
    }
    if (rc < 0)
        return rc;
    if ((rc = settle(s)) < 0)
        return rc;
    res->stored += tier_commit(s->ns, OWNER, keys + got, n - (size_t)got);
    return settle(s);
}

/* The cold tier's folder: a fresh one under o->cold_dir (NULL: $TMPDIR or
 * /tmp), removed after the replay. 0 or -errno. */
static int cold_folder(const struct kvr_run_opts *o, char *buf, size_t cap)
{
    if (!o->cold_dir)
        return cmn_tmpdir("kvreplay-cold", buf, cap);
    if ((size_t)snprintf(buf, cap, "%s/kvreplay-cold-XXXXXX", o->cold_dir) >= cap)
        return -ENAMETOOLONG;
    return mkdtemp(buf) ? 0 : -errno;
}

uint64_t kvr_cold_bytes(const struct kvr_run_opts *o, uint64_t capacity)
{
    uint64_t c = o->cold_bytes ? o->cold_bytes : (uint64_t)(o->cold_ratio * (double)capacity);

    return c & ~(uint64_t)(TIER_RAM_PAGE - 1); /* the data file is whole pages */
}

/* The store's watermarks, scaled so that it holds what was asked, not the
 * pool: tier_create rounds the pool up to whole segments (5,000 blocks of
 * 64 KiB ask 312.5M, the pool has 16 segments of 20M = 320M, 5,120 slots),
 * and a capacity curve compares capacities as asked. */
static void scale_wm(const struct kvr_run_opts *o, uint64_t capacity, uint64_t pool,
                     struct tier_cfg *cfg)
{
    double f = pool > capacity ? (double)capacity / (double)pool : 1.0;

    cfg->high_wm = o->high_wm * f;
    cfg->low_wm = o->low_wm * f;
}

/* The store's memory of what it dropped: long enough to see a re-put (a
 * second touch) of any block since it left, warm and cold: twice the blocks
 * both hold, at least tierd's 65,536. */
static uint32_t why_events(const struct kvr_run_opts *o, uint64_t capacity, uint64_t cold)
{
    uint64_t n = 2 * ((capacity + cold) / tier_slot_bytes(o->block_bytes));

    return n < 65536 ? 65536 : n > (1u << 24) ? 1u << 24 : (uint32_t)n;
}

/* Open the store for one capacity: a first one to learn the pool's size,
 * then the one replayed, its watermarks scaled (scale_wm) and, with a cold
 * tier, its data file in dir. */
static int open_store(const struct kvr_run_opts *o, uint64_t capacity, const char *dir,
                      uint32_t maxblk, struct sreplay *s, struct kvr_result *res)
{
    struct tier_cold_cfg cc = { .dir = dir, .bytes = res->cold_capacity };
    struct tier_open_cfg oc = {
        .store = { .warm_bytes = capacity, .high_wm = o->high_wm, .low_wm = o->low_wm,
                   .admit = o->admit, .evict_policy = o->evict,
                   .clock_ms = trace_clock, .clock_ctx = s,
                   .why_events = why_events(o, capacity, res->cold_capacity) },
        .cold = res->cold_capacity ? &cc : NULL,
    };
    struct tier *probe;
    int rc = tier_create(&oc.store, &probe);

    if (rc < 0)
        return rc;
    res->pool_bytes = tier_pool_bytes(probe);
    tier_destroy(probe);
    scale_wm(o, capacity, res->pool_bytes, &oc.store);
    if (o->cold_dwpd > 0) /* drive writes per day, a day of the trace's clock */
        oc.store.cold_budget_bytes = (uint64_t)(o->cold_dwpd * (double)res->cold_capacity);
    rc = tier_open(&oc, &s->t, NULL);
    if (rc < 0)
        return rc;
    s->cold = tier_cold_of(s->t);
    return tier_req_create(s->t, maxblk, on_get, s, &s->req);
}

int kvr_run_store(const struct kvr_trace *tr, const struct kvr_run_opts *o, uint64_t capacity,
                  struct kvr_result *res, char *err, size_t errcap)
{
    size_t nmax = tr->max_blk ? tr->max_blk : 1;
    struct sreplay s = { .ids = malloc(nmax * sizeof(*s.ids)), .tiers = malloc(nmax) };
    uint64_t *offs = malloc(nmax * sizeof(*offs)), slot = tier_slot_bytes(o->block_bytes);
    char a[32], b[32], c[32], why[256], dir[4096] = "";
    struct tier_stats st;
    double t0;
    int rc;

    memset(res, 0, sizeof(*res));
    res->capacity = capacity;
    res->admit = o->admit;
    res->cold_capacity = kvr_cold_bytes(o, capacity);
    if (!s.ids || !offs || !s.tiers) {
        rc = -ENOMEM;
        snprintf(err, errcap, "out of memory");
        goto out_free;
    }
    if (res->cold_capacity && res->cold_capacity < (1u << 20)) {
        rc = -EINVAL;
        snprintf(err, errcap, "capacity %s: a cold tier of %s: at least 1M",
                 kvr_size_str(capacity, a, sizeof(a)),
                 kvr_size_str(res->cold_capacity, b, sizeof(b)));
        goto out_free;
    }
    if (res->cold_capacity && (rc = cold_folder(o, dir, sizeof(dir))) < 0) {
        snprintf(err, errcap, "a folder for the cold tier in %s: %s",
                 o->cold_dir ? o->cold_dir : "$TMPDIR", strerror(-rc));
        dir[0] = '\0';
        goto out_free;
    }
    rc = open_store(o, capacity, dir, (uint32_t)nmax, &s, res);
    if (rc < 0) {
        snprintf(err, errcap, "capacity %s: cannot create the store%s: %s",
                 kvr_size_str(capacity, a, sizeof(a)), dir[0] ? " (or its cold tier)" : "",
                 strerror(-rc));
        goto out_close;
    }
    if (slot > tier_block_max(s.t)) {
        /* tierd has the same limit: its largest slot is a sixteenth of the
         * pool, at most 64 MiB */
        rc = -EFBIG;
        snprintf(err, errcap, "capacity %s: its largest slot is %s, smaller than a block of "
                 "%s (the pool must hold 16 blocks; no block may exceed 64M)",
                 kvr_size_str(capacity, a, sizeof(a)),
                 kvr_size_str(tier_block_max(s.t), b, sizeof(b)),
                 kvr_size_str(o->block_bytes, c, sizeof(c)));
        goto out_close;
    }
    rc = tier_ns_open(s.t, NS, o->block_bytes, &s.ns); /* (its size fits: checked above) */
    if (rc < 0) {
        snprintf(err, errcap, "capacity %s: cannot open the namespace: %s",
                 kvr_size_str(capacity, a, sizeof(a)), strerror(-rc));
        goto out_close;
    }
    res->slots = res->pool_bytes / tier_block_max(s.t) * (tier_block_max(s.t) / slot);
    res->asked_blocks = capacity / slot;
    res->ram_bytes = capacity;
    t0 = cmn_now_s();
    for (size_t i = 0; i < tr->nreq; i++) {
        s.now_ms = tr->req[i].ts_ms;
        rc = store_request(&s, tr, &tr->req[i], o, offs, res);
        if (rc < 0) {
            snprintf(err, errcap, "capacity %s: request %zu: store error: %s",
                     kvr_size_str(capacity, a, sizeof(a)), i + 1, strerror(-rc));
            goto out_close;
        }
    }
    res->seconds = cmn_now_s() - t0;
    tier_stats_get(s.t, &st);
    res->evicted = st.evictions[TIER_L_WARM];
    res->admitted = st.cold_admitted;
    res->cold_refused = st.cold_refused;
    res->over_budget = st.cold_over_budget;
    if (s.cold) {
        struct tier_cold_stats cs;

        tier_cold_stats_get(s.cold, &cs);
        res->disk_bytes = cs.bytes_written;
    }
    /* the replay leans on the store's invariants; a broken one is a bug to
     * report, not a number to print */
    rc = tier_check(s.t, why, sizeof(why));
    if (rc < 0)
        snprintf(err, errcap, "capacity %s: store invariant broken: %s",
                 kvr_size_str(capacity, a, sizeof(a)), why);
out_close:
    tier_req_destroy(s.req);
    tier_close(s.t);
out_free:
    if (dir[0] && cmn_rmtree(dir) < 0 && rc == 0) {
        rc = -EIO;
        snprintf(err, errcap, "could not remove the cold tier's folder %s", dir);
    }
    free(s.ids);
    free(offs);
    free(s.tiers);
    return rc;
}

/* ---- unbounded ------------------------------------------------------------ */

/* An open-addressing set of key indices into tr->keys. Keys are SHA-256
 * outputs, so their first 8 bytes are already a good hash. Sized for every
 * key of the trace at load factor <= 1/2: no growth, no deletion. */
struct keyset {
    size_t *slot; /* index into keys, or SIZE_MAX when empty */
    size_t mask;
    const struct tier_key *keys;
};

static size_t *keyset_find(struct keyset *s, const struct tier_key *k)
{
    uint64_t h;
    size_t i;

    memcpy(&h, k->b, sizeof(h));
    for (i = (size_t)h & s->mask;; i = (i + 1) & s->mask)
        if (s->slot[i] == SIZE_MAX ||
            memcmp(s->keys[s->slot[i]].b, k->b, TIER_KEY_BYTES) == 0)
            return &s->slot[i];
}

int kvr_run_unbounded(struct kvr_trace *tr, const struct kvr_run_opts *o,
                      struct kvr_result *res)
{
    struct keyset s = { .keys = tr->keys };
    size_t cap = 16;
    double t0 = cmn_now_s();

    memset(res, 0, sizeof(*res));
    while (cap < 2 * tr->nkeys)
        cap *= 2;
    s.slot = malloc(cap * sizeof(*s.slot));
    if (!s.slot)
        return -ENOMEM;
    memset(s.slot, 0xff, cap * sizeof(*s.slot)); /* SIZE_MAX everywhere */
    s.mask = cap - 1;
    tr->distinct = 0;
    for (size_t i = 0; i < tr->nreq; i++) {
        const struct kvr_req *r = &tr->req[i];
        uint64_t hit = 0;

        while (hit < r->nblk && *keyset_find(&s, &tr->keys[r->first + hit]) != SIZE_MAX)
            hit++;
        kvr_count_hits(res, r, hit, NULL, o->block_tokens);
        for (uint64_t j = hit; j < r->nblk; j++) {
            size_t *p = keyset_find(&s, &tr->keys[r->first + j]);

            if (*p == SIZE_MAX) {
                *p = r->first + j;
                tr->distinct++;
                res->stored++;
            }
        }
    }
    free(s.slot);
    res->seconds = cmn_now_s() - t0;
    res->capacity = tr->distinct * o->block_bytes;
    res->pool_bytes = res->capacity;
    res->slots = res->asked_blocks = res->held_max = tr->distinct;
    res->ram_bytes = res->capacity;
    res->policy = "";
    return 0;
}

/* ---- payloads ---------------------------------------------------------------- */

/* Word j of a key's payload: distinct per key (seeded by its first 8
 * bytes) and per position (so shifted or swapped data shows). */
static uint64_t word_at(uint64_t seed, uint64_t j)
{
    uint64_t z = seed + (j + 1) * 0x9e3779b97f4a7c15ull;

    return z ^ (z >> 31);
}

static uint64_t seed_of(const struct tier_key *key)
{
    uint64_t s;

    memcpy(&s, key->b, sizeof(s));
    return s;
}

void kvr_fill(void *buf, uint64_t len, const struct tier_key *key)
{
    uint64_t s = seed_of(key), j, w;
    uint8_t *p = buf;

    for (j = 0; (j + 1) * 8 <= len; j++) {
        w = word_at(s, j);
        memcpy(p + j * 8, &w, 8);
    }
    w = word_at(s, j);
    memcpy(p + j * 8, &w, len - j * 8); /* the tail, when len is not a multiple of 8 */
}

long kvr_check(const void *buf, uint64_t len, const struct tier_key *key)
{
    uint64_t s = seed_of(key), j, w;
    const uint8_t *p = buf;

    for (j = 0; (j + 1) * 8 <= len; j++) {
        w = word_at(s, j);
        if (memcmp(p + j * 8, &w, 8) != 0)
            goto find_byte;
    }
    w = word_at(s, j);
    if (memcmp(p + j * 8, &w, len - j * 8) == 0)
        return -1;
find_byte:
    for (uint64_t k = 0; k < 8 && j * 8 + k < len; k++)
        if (p[j * 8 + k] != ((const uint8_t *)&w)[k])
            return (long)(j * 8 + k);
    return (long)(j * 8);
}

/* ---- against tierd --------------------------------------------------------- */

/* Scratch of a tierd replay, sized for the longest chain. */
struct cscratch {
    kvt_key *keys;
    uint8_t *tiers;
    const void **rslots;
    void **wslots;
};

/* Wait until request r's time on the trace's clock, scaled by speed. */
static void pace(const struct kvr_trace *tr, const struct kvr_req *r, double speed, double t0,
                 struct kvr_result *res)
{
    double due, late;

    if (speed <= 0)
        return;
    due = (double)(r->ts_ms >= tr->req[0].ts_ms ? r->ts_ms - tr->req[0].ts_ms : 0) / 1e3 /
          speed;
    late = cmn_now_s() - t0 - due;
    if (late < 0) {
        struct timespec ts = { .tv_sec = (time_t)-late,
                               .tv_nsec = (long)((-late - (double)(time_t)-late) * 1e9) };

        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
    } else if (late * 1e3 > res->max_late_ms) {
        res->max_late_ms = late * 1e3;
    }
}

/* Lease and verify the leading `hit` blocks; returns how many were leased,
 * or a negative error. */
static int client_get(kvt_ns *ns, struct cscratch *s, size_t hit, uint64_t bb, size_t reqno,
                      struct kvr_result *res, char *err, size_t errcap)
{
    size_t got = 0;

    while (got < hit) {
        size_t chunk = hit - got < KVT_BATCH_MAX ? hit - got : KVT_BATCH_MAX;
        kvt_lease lease;
        int g = kvt_get_lease(ns, s->keys + got, chunk, s->rslots, &lease);

        if (g < 0)
            return g;
        for (int i = 0; i < g; i++) {
            struct tier_key k;
            long off;

            memcpy(k.b, s->keys[got + (size_t)i].b, TIER_KEY_BYTES);
            off = kvr_check(s->rslots[i], bb, &k);
            if (off >= 0 && res->verify_errors++ == 0)
                snprintf(err, errcap, "request %zu, block %zu: wrong byte at offset %ld",
                         reqno, got + (size_t)i, off);
        }
        kvt_release(ns, &lease);
        got += (size_t)g;
        if ((size_t)g < chunk)
            break;
    }
    return (int)got;
}

/* Put blocks [from, n) of the chain; counts stored and refused blocks. */
static int client_put(kvt_ns *ns, struct cscratch *s, size_t from, size_t n, uint64_t bb,
                      struct kvr_result *res)
{
    for (size_t i = from; i < n;) {
        size_t chunk = n - i < KVT_BATCH_MAX ? n - i : KVT_BATCH_MAX;
        int rc = kvt_put_reserve(ns, i ? &s->keys[i - 1] : NULL, s->keys + i, chunk,
                                 s->wslots);

        if (rc == -ENOSPC) {
            res->refused += n - i;
            return 0;
        }
        if (rc < 0)
            return rc;
        for (size_t j = 0; j < chunk; j++) {
            struct tier_key k;

            if (!s->wslots[j])
                continue; /* already stored or being stored */
            memcpy(k.b, s->keys[i + j].b, TIER_KEY_BYTES);
            kvr_fill(s->wslots[j], bb, &k);
        }
        rc = kvt_put_commit(ns, s->keys + i, chunk);
        if (rc < 0)
            return rc;
        res->stored += (uint64_t)rc;
        i += chunk;
    }
    return 0;
}

static int client_replay(kvt_ns *ns, const struct kvr_trace *tr, const struct kvr_run_opts *o,
                         struct cscratch *s, struct kvr_result *res, char *err, size_t errcap)
{
    double t0 = cmn_now_s();

    for (size_t q = 0; q < tr->nreq; q++) {
        const struct kvr_req *r = &tr->req[q];
        int hit, got, rc;

        pace(tr, r, o->speed, t0, res);
        for (uint32_t i = 0; i < r->nblk; i++)
            memcpy(s->keys[i].b, tr->keys[r->first + i].b, KVT_KEY_BYTES);
        hit = kvt_lookup(ns, s->keys, r->nblk, 0, s->tiers);
        if (hit < 0) {
            snprintf(err, errcap, "request %zu: lookup: %s", q + 1, kvt_strerror(hit));
            return hit;
        }
        got = client_get(ns, s, (size_t)hit, o->block_bytes, q + 1, res, err, errcap);
        if (got < 0) {
            snprintf(err, errcap, "request %zu: get: %s", q + 1, kvt_strerror(got));
            return got;
        }
        /* evicted (or late from disk) between lookup and get: the engine
         * gets only what it could read, and that is the hit */
        if (got < hit)
            res->short_gets++;
        kvr_count_hits(res, r, (uint64_t)got, s->tiers, o->block_tokens);
        rc = client_put(ns, s, (size_t)got, r->nblk, o->block_bytes, res);
        if (rc < 0) {
            snprintf(err, errcap, "request %zu: put: %s", q + 1, kvt_strerror(rc));
            return rc;
        }
    }
    res->seconds = cmn_now_s() - t0;
    return 0;
}

int kvr_run_tierd(const struct kvr_trace *tr, const struct kvr_run_opts *o,
                  struct kvr_result *res, char *err, size_t errcap)
{
    kvt_model m = {
        .model_id = o->model_id ? o->model_id : "kvreplay", .dtype = "bf16",
        .layout = "kvreplay", .block_tokens = o->block_tokens, .tp_rank = 0, .tp_size = 1,
        .block_bytes = o->block_bytes,
    };
    const char *path = o->socket ? o->socket : kvt_default_socket();
    size_t nmax = tr->max_blk ? tr->max_blk : 1;
    struct cscratch s = {
        .keys = malloc(nmax * sizeof(kvt_key)), .tiers = malloc(nmax),
        .rslots = malloc(KVT_BATCH_MAX * sizeof(void *)),
        .wslots = malloc(KVT_BATCH_MAX * sizeof(void *)),
    };
    kvt_client *c = NULL;
    kvt_ns *ns;
    kvt_stats st;
    char verr[256] = "";
    int rc;

    memset(res, 0, sizeof(*res));
    if (!s.keys || !s.tiers || !s.rslots || !s.wslots) {
        rc = -ENOMEM;
        snprintf(err, errcap, "out of memory");
        goto out_free;
    }
    rc = kvt_connect(path, &c);
    if (rc < 0) {
        snprintf(err, errcap, "cannot reach tierd at %s: %s", path, kvt_strerror(rc));
        goto out_free;
    }
    rc = kvt_ns_open(c, &m, &ns);
    if (rc < 0) {
        snprintf(err, errcap, "namespace for blocks of %llu bytes: %s%s",
                 (unsigned long long)o->block_bytes, kvt_strerror(rc),
                 rc == -EFBIG ? " (tierd's largest block is a sixteenth of --warm-bytes, at "
                                "most 64M: give it more, or use a smaller --block-bytes)" : "");
        goto out_close;
    }
    rc = kvt_stats_get(c, &st);
    if (rc < 0) {
        snprintf(err, errcap, "stats: %s", kvt_strerror(rc));
        goto out_close;
    }
    rc = client_replay(ns, tr, o, &s, res, verr, sizeof(verr));
    if (rc < 0) {
        snprintf(err, errcap, "%s", verr);
        goto out_close;
    }
    /* what the operator pays for: tierd's configured RAM and disk */
    res->pool_bytes = st.tier[KVT_TIER_WARM].bytes_capacity;
    res->ram_bytes = st.tier[KVT_TIER_WARM].bytes_capacity; /* hot is GPU memory: not priced */
    res->nvme_bytes = st.tier[KVT_TIER_COLD].bytes_capacity;
    res->slots = res->pool_bytes / tier_slot_bytes(o->block_bytes); /* at most */
    if (res->verify_errors)
        snprintf(err, errcap, "%llu blocks read back with wrong bytes; first: %s",
                 (unsigned long long)res->verify_errors, verr);
out_close:
    kvt_close(c);
out_free:
    free(s.keys);
    free(s.tiers);
    free(s.rslots);
    free(s.wslots);
    return rc;
}
