/* SPDX-License-Identifier: MIT */
/*
 * kvload.c - a load test of tierd: many client processes at once, every
 * byte they get back checked against what was put.
 *
 * The parent forks --clients processes. Each loops over lookup, put (a
 * chain suffix under its parent key), get (lease, verify every block,
 * release) and remove, over a fixed set of prompts whose first blocks are
 * a system prompt shared by all, so processes keep meeting each other's
 * blocks. A block's bytes derive from its key: a header (magic, the key, an
 * XXH3 of the rest) and pseudo-random filler, so any wrong byte and any
 * block served under the wrong key is caught. Latencies go into per-process
 * log histograms in shared memory; the parent merges them and prints ops/s,
 * p50/p99/p999 per op and the errors by kind. It does not measure the
 * payload fill and check, only the calls into libkvtier.
 *
 * Fault modes: --kill-clients N kills N clients with SIGKILL at random
 * moments and starts replacements; clients treat a lost daemon as an outage
 * (counted, never a correctness error) and reconnect with a bounded
 * backoff; --durable-log records each acknowledged durable put, and
 * --check-durable later checks that every block recorded there is present
 * and byte-identical.
 *
 * The oracle modes check through tierd what the store's simulation
 * (tests/sim/) checks in-process: --hot puts a share of blocks straight into
 * hot slots and leases a share in place there (some asking for promotion),
 * and every lease is checked twice, when leased and right before release, so
 * a slot freed and rewritten under its reader is caught; durable puts go
 * through warm and mostly redo other clients' recent hot puts, so durable
 * commits race hot's mover. --prefetch makes a share of lookups prefetching,
 * most followed by a get of the same keys. --kill-tierd N kills the private
 * tierd under load N times; each time the clients are stopped, tierd starts
 * again on the same data and every block the durable log holds so far must
 * come back byte-identical before the clients go on (nothing is removed, so
 * the prompts in play drift through the key space to keep fresh blocks
 * coming). A private tierd must also end with nothing leased or reserved,
 * and stop cleanly.
 */
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <inttypes.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvt_common.h"
#include "kvtier.h"

#define HDR_MAGIC 0x6b766c6f61642131ull /* "kvload!1" in each block's header */
#define LOG_MAGIC 0x4b564c44u           /* a durable-log record */
#define LOG_HDR_MAGIC 0x4b564c48u       /* the durable log's first record */
#define MAX_CHAIN 64                    /* blocks per prompt, at most */
#define MAX_CLIENTS 4096
#define MAX_TIERD_KILLS 64
#define BLOCK_TOKENS 16

/* Operations timed, and the order of the report. */
enum { OP_LOOKUP, OP_PUT, OP_GET, OP_REMOVE, OP_N };
static const char *const op_name[OP_N] = { "lookup", "put", "get", "remove" };

/* Latency histogram: values below 16 ns exactly, above in 16 steps per
 * power of two (at most 6% wide), up to 2^40 ns (18 minutes). */
#define SUB_BITS 4
#define NBUCKET ((41 - SUB_BITS) * (1 << SUB_BITS) + (1 << SUB_BITS))

/* The oracle modes' counters (--hot, --prefetch, the checks before
 * release), one list: each slot's fields, their sums and their JSON names. */
#define ORACLE_COUNTERS(X)                                                                  \
    X(hot_gets, "gets that asked for hot blocks in place")                                 \
    X(hot_blocks, "blocks those leased in place in hot")                                   \
    X(promote_gets, "gets that asked for a copy up into hot")                              \
    X(hot_reserves, "puts reserved in hot")                                                \
    X(hot_full, "hot reserves refused -ENOSPC (hot full): reserved in warm")               \
    X(durable_hot_keys, "keys of durable puts that lay in hot just before")                \
    X(prefetch_lookups, "lookups with KVT_LOOKUP_PREFETCH")                                \
    X(prefetch_gets, "gets of the same keys right after one")                              \
    X(pin_lookups, "pinning lookups (--prefetch), each followed by a get and an unpin")    \
    X(pinned_blocks, "blocks they held")                                                   \
    X(pin_short, "gets of a pin with fewer blocks than it held in memory (also unexpected)") \
    X(rechecked_leases, "leases checked again right before release")                       \
    X(rechecked_blocks, "their blocks")                                                    \
    X(changed_under_lease, "blocks right when leased, wrong at release (also in wrong)")

/* The counts every mode keeps, one list: each slot's fields and their sums
 * (the reports print them by name). */
#define SUMMED_COUNTERS(X)                                                                  \
    X(hit_blocks, "blocks leased by gets")                                                 \
    X(verified, "of those, checked right")                                                 \
    X(wrong, "of those, a wrong byte or key: never allowed")                               \
    X(put_blocks, "blocks this slot wrote and committed")                                  \
    X(durable_blocks, "of those, acknowledged durable")                                    \
    X(unexpected, "calls that failed otherwise: never allowed")                            \
    X(enospc, "reserve or durable commit: pool or disk full")                              \
    X(eagain, "reserve: warm still full of blocks on their way to disk")                   \
    X(nodata, "durable commit: a key deduplicated against a block evicted (or a put "      \
              "aborted) since: put it again")                                              \
    X(busy, "durable commit raced another durable commit")                                 \
    X(refused, "connect refused by a limit (EUSERS, EMFILE)")                              \
    X(outage, "calls that failed because tierd went away")                                 \
    X(reconnects, "connections made again after an outage")                                \
    X(started, "processes run in this slot")

/* What one client slot counts; one writer (the process in the slot, or its
 * replacement after a kill), read by the parent at the end. A killed
 * process's counts stay. */
struct cstat {
    uint64_t ops[OP_N];           /* calls that succeeded */
    uint64_t hist[OP_N][NBUCKET]; /* their latencies, ns */
    uint64_t max_ns[OP_N];
    int64_t last_unexpected;      /* the last unexpected error code */
    uint64_t unexpected_op;       /* ... and its operation */
    uint64_t max_err_ns;          /* slowest failing call: how long to a clear error */
#define X(name, what) uint64_t name;
    SUMMED_COUNTERS(X)
    ORACLE_COUNTERS(X)
#undef X
} __attribute__((aligned(64)));

static struct {
    const char *socket;
    int clients;
    double seconds;
    uint64_t block_bytes;
    int prefixes;     /* prompts */
    int chain;        /* blocks per prompt */
    int shared;       /* leading blocks every prompt shares */
    int durable_every;/* every Nth put commits durably (0: never) */
    int kill_clients; /* SIGKILLs of random clients during the run */
    int kill_tierd;   /* SIGKILLs of the private tierd, each restarted and checked */
    unsigned hold_us; /* hold each lease and reservation this long */
    bool hot;         /* reserve and lease in tierd's hot tier too */
    bool prefetch;    /* prefetching lookups, then gets */
    int mix[OP_N];    /* weights of the operations */
    uint64_t seed;
    const char *durable_log;
    const char *check_durable;
    const char *tierd;    /* start a private tierd from this binary */
    char *const *tierd_args;
    bool json, bench, quiet;
} opt = {
    .clients = 64, .seconds = 60, .block_bytes = 64 << 10, .prefixes = 64, .chain = 16,
    .shared = 2, .mix = { 35, 30, 30, 5 }, .seed = 1,
};

static kvt_key *keys;       /* [prefixes][chain], computed before the fork */
static uint64_t *sums;      /* the XXH3 each block's filler must have */
static struct cstat *stats; /* [clients], shared with the children */
static int log_fd = -1;     /* the durable log, appended by the children */
static pid_t *pids;         /* [clients], the parent's; 0: slot empty */
static uint64_t *kill_at;   /* load clock (ns) of each --kill-clients kill */
static uint64_t *tkill_at;  /* ... of each --kill-tierd kill */
static uint64_t *run_end;   /* CLOCK_MONOTONIC ns the clients stop at, shared: the
                               parent moves it on by the time they spent stopped */

/* --hot: the last puts reserved in hot, shared by the clients, each one
 * (prompt << 32 | slot << 16 | start << 8 | end), 0 when empty. Three in
 * four durable puts redo one of another client's, in warm: their keys
 * deduplicate against blocks that are in hot and not on disk yet, so the
 * durable commit has to copy them down and write them while hot's mover
 * may be moving them too (the store once acknowledged such a commit when the
 * copy landed in warm, before any write). Only hints, so relaxed atomics: a
 * stale entry is still a valid put. */
#define RECENT_HOT 64
struct recent_hot {
    uint64_t next;            /* entries written so far */
    uint64_t put[RECENT_HOT]; /* ring, written at next % RECENT_HOT */
};
static struct recent_hot *recent;

/* ---- small helpers ---------------------------------------------------- */

static void sleep_us(uint64_t us)
{
    struct timespec ts = { .tv_sec = (time_t)(us / 1000000),
                           .tv_nsec = (long)(us % 1000000) * 1000 };

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* splitmix64: fast, seeded; keys, filler and choices */
static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int bucket(uint64_t v)
{
    int msb;

    if (v < (1u << SUB_BITS))
        return (int)v;
    msb = 63 - __builtin_clzll(v);
    if (msb > 40)
        return NBUCKET - 1;
    return (msb - SUB_BITS + 1) * (1 << SUB_BITS) +
           (int)((v >> (msb - SUB_BITS)) & ((1u << SUB_BITS) - 1));
}

/* The middle of bucket b, in ns. */
static double bucket_mid(int b)
{
    int msb, sub;
    double lo, w;

    if (b < (1 << SUB_BITS))
        return b;
    msb = b / (1 << SUB_BITS) + SUB_BITS - 1;
    sub = b % (1 << SUB_BITS);
    w = (double)(1ull << (msb - SUB_BITS));
    lo = (double)(1ull << msb) + sub * w;
    return lo + w / 2;
}

static void record(struct cstat *cs, int op, uint64_t ns)
{
    cs->ops[op]++;
    cs->hist[op][bucket(ns)]++;
    if (ns > cs->max_ns[op])
        cs->max_ns[op] = ns;
}

static kvt_key *key_at(int p, int i)
{
    return &keys[(size_t)p * (size_t)opt.chain + (size_t)i];
}

/* ---- the key space and the payload ------------------------------------ */

/* Filler of block (p, i): pseudo-random bytes seeded by its key. */
static void fill_body(uint8_t *b, size_t len, const kvt_key *k)
{
    uint64_t s;
    size_t i = 0;

    memcpy(&s, k->b, sizeof(s));
    for (; i + 8 <= len; i += 8) {
        uint64_t v = rnd(&s);

        memcpy(b + i, &v, 8);
    }
    for (; i < len; i++)
        b[i] = (uint8_t)rnd(&s);
}

/* Header: magic, key, XXH3 of the filler; 48 bytes. */
#define HDR_BYTES (8 + KVT_KEY_BYTES + 8)

static void fill_block(uint8_t *blk, int p, int i)
{
    const kvt_key *k = key_at(p, i);
    uint64_t m = HDR_MAGIC, sum = sums[(size_t)p * (size_t)opt.chain + (size_t)i];

    memcpy(blk, &m, 8);
    memcpy(blk + 8, k->b, KVT_KEY_BYTES);
    memcpy(blk + 8 + KVT_KEY_BYTES, &sum, 8);
    fill_body(blk + HDR_BYTES, opt.block_bytes - HDR_BYTES, k);
}

/* Is blk exactly block (p, i)? The filler's hash must equal the one
 * computed at start from the key alone, so a block that is consistent in
 * itself but another key's, or stale, fails too. */
static bool check_block(const uint8_t *blk, int p, int i)
{
    const kvt_key *k = key_at(p, i);
    uint64_t m, sum, want = sums[(size_t)p * (size_t)opt.chain + (size_t)i];

    memcpy(&m, blk, 8);
    memcpy(&sum, blk + 8 + KVT_KEY_BYTES, 8);
    return m == HDR_MAGIC && memcmp(blk + 8, k->b, KVT_KEY_BYTES) == 0 && sum == want &&
           XXH3_64bits(blk + HDR_BYTES, opt.block_bytes - HDR_BYTES) == want;
}

/* Keys of every prompt (vLLM-style chain hashes of synthetic tokens: the
 * first `shared` blocks are the same system prompt in every prompt) and
 * the filler hash of each block. */
static int make_keys(void)
{
    size_t nk = (size_t)opt.prefixes * (size_t)opt.chain;
    size_t ntok = (size_t)opt.chain * BLOCK_TOKENS;
    uint32_t *tok = malloc(ntok * sizeof(*tok));
    uint8_t *body = malloc(opt.block_bytes - HDR_BYTES);
    kvt_hash_opts ho = { .block_tokens = BLOCK_TOKENS, .seed = "kvload" };
    int rc = 0;

    keys = calloc(nk, sizeof(*keys));
    sums = calloc(nk, sizeof(*sums));
    if (!tok || !body || !keys || !sums) {
        rc = -ENOMEM;
        goto out;
    }
    for (int p = 0; p < opt.prefixes; p++) {
        uint64_t s = opt.seed * 1000003u + (uint64_t)p;
        uint64_t sys = opt.seed;
        ssize_t n;

        for (size_t t = 0; t < ntok; t++)
            tok[t] = (uint32_t)(t < (size_t)opt.shared * BLOCK_TOKENS ? rnd(&sys) : rnd(&s)) %
                     128000u;
        n = kvt_hash_prompt(&ho, tok, ntok, key_at(p, 0));
        if (n != opt.chain) {
            rc = n < 0 ? (int)n : -EIO;
            goto out;
        }
    }
    for (size_t i = 0; i < nk; i++) {
        fill_body(body, opt.block_bytes - HDR_BYTES, &keys[i]);
        sums[i] = XXH3_64bits(body, opt.block_bytes - HDR_BYTES);
    }
out:
    free(tok);
    free(body);
    return rc;
}

static kvt_model model(void)
{
    return (kvt_model){ .model_id = "kvload/synthetic", .dtype = "bf16", .layout = "kvload",
                        .block_tokens = BLOCK_TOKENS, .tp_size = 1,
                        .block_bytes = opt.block_bytes };
}

/* ---- one client process ----------------------------------------------- */

/* Errors that mean the daemon went away (or stopped answering): the client
 * reconnects. Anything else a call returns, beyond the allowed -ENOSPC,
 * -EAGAIN and (durable commits) -ENODATA and -EBUSY, is a correctness error. */
static bool is_outage(int rc)
{
    return rc == KVT_EDISCONNECTED || rc == -ETIMEDOUT || rc == -ECONNREFUSED ||
           rc == -ENOENT || rc == -ECONNRESET || rc == -EPIPE;
}

struct cl {
    struct cstat *cs;
    int slot;
    uint64_t rng;
    kvt_client *c;
    kvt_ns *ns;
    bool was_connected; /* a connect after this counts as a reconnect */
    uint64_t puts;      /* puts so far, for --durable-every */
};

static uint64_t end_ns(void)
{
    return __atomic_load_n(run_end, __ATOMIC_RELAXED); /* only a deadline: no order */
}

/* Connect, open the namespace and, with --hot, map the hot pool: on every
 * connection, since a restarted tierd has a new pool. Odd slots also make
 * their prefetching lookups ask for promotion into hot. */
static int open_session(struct cl *k)
{
    kvt_model m = model();
    int rc = kvt_connect(opt.socket, &k->c);

    if (rc < 0) {
        k->c = NULL;
        return rc;
    }
    rc = kvt_ns_open(k->c, &m, &k->ns);
    if (rc == 0 && opt.hot)
        rc = kvt_hot_attach(k->c, NULL);
    if (rc == 0 && opt.hot && (k->slot & 1))
        rc = kvt_ns_set_hot(k->ns, KVT_GET_PROMOTE);
    if (rc < 0) {
        kvt_close(k->c);
        k->c = NULL;
    }
    return rc;
}

/* Connect (again), with a backoff from 1 ms doubling to 100 ms, until the
 * run ends. Returns false when time ran out. */
static bool connect_retry(struct cl *k)
{
    uint64_t backoff = 1000;

    for (;;) {
        int rc = open_session(k);

        if (rc == 0) {
            k->cs->reconnects += k->was_connected;
            k->was_connected = true;
            return true;
        }
        if (rc == -EUSERS || rc == -EMFILE || rc == -ENFILE || rc == -EACCES)
            k->cs->refused++;
        else if (!is_outage(rc)) {
            k->cs->unexpected++;
            k->cs->last_unexpected = rc;
            k->cs->unexpected_op = OP_N;
        }
        if (cmn_now_ns() >= end_ns())
            return false;
        sleep_us(backoff);
        backoff = backoff * 2 > 100000 ? 100000 : backoff * 2;
    }
}

/* Classify a failed call. Returns true when the connection is gone. */
static bool failed(struct cl *k, int op, int rc, uint64_t ns, bool durable)
{
    if (ns > k->cs->max_err_ns)
        k->cs->max_err_ns = ns;
    if (is_outage(rc)) {
        k->cs->outage++;
        kvt_close(k->c);
        k->c = NULL;
        return true;
    }
    if (rc == -ENOSPC) {
        k->cs->enospc++;
    } else if (rc == -EAGAIN) {
        k->cs->eagain++;
    } else if (rc == -ENODATA && durable) {
        k->cs->nodata++; /* true and retryable: the key must be put again */
    } else if (rc == -EBUSY && durable) {
        k->cs->busy++; /* tier_commit_durable: another durable commit of a key */
    } else {
        k->cs->unexpected++;
        k->cs->last_unexpected = rc;
        k->cs->unexpected_op = (uint64_t)op;
    }
    return false;
}

static void log_durable(int p, int s, int l)
{
    uint32_t rec[4] = { LOG_MAGIC, (uint32_t)p, (uint32_t)s, (uint32_t)l };

    /* O_APPEND: one small write lands whole, between other processes' */
    if (log_fd >= 0 && write(log_fd, rec, sizeof(rec)) != (ssize_t)sizeof(rec))
        perror("kvload: durable log");
}

static int op_get(struct cl *k, int p, int l, int flags);
static void op_pin(struct cl *k, int p, int l);

/* A lookup of keys [0, l) of prompt p. With --prefetch half of them are an
 * engine's: a third pin (op_pin), the rest prefetch, and three in four of
 * those are followed at once by a get of the same keys. */
static void op_lookup(struct cl *k, int p, int l)
{
    bool pf = opt.prefetch && rnd(&k->rng) % 2 == 0;
    uint64_t t0, dt;
    int rc;

    if (pf && rnd(&k->rng) % 3 == 0) {
        op_pin(k, p, l);
        return;
    }
    t0 = cmn_now_ns();
    rc = kvt_lookup(k->ns, key_at(p, 0), (size_t)l, pf ? KVT_LOOKUP_PREFETCH : 0, NULL);
    dt = cmn_now_ns() - t0;

    if (rc < 0) {
        failed(k, OP_LOOKUP, rc, dt, false);
        return;
    }
    record(k->cs, OP_LOOKUP, dt);
    if (!pf)
        return;
    k->cs->prefetch_lookups++;
    if (rnd(&k->rng) % 4 != 0) {
        k->cs->prefetch_gets++;
        op_get(k, p, l, -1);
    }
}

/* --hot, before a durable put: count the keys of its batch that lie in hot
 * now. Those deduplicate, and the durable commit must copy them down and
 * write them while hot's mover may be moving them too; counted to show that
 * the run meets the case. A failure here shows again in the reserve. */
static void count_hot_keys(struct cl *k, int p, int s, int n)
{
    uint8_t tiers[MAX_CHAIN];

    if (kvt_lookup(k->ns, key_at(p, s), (size_t)n, 0, tiers) < 0)
        return;
    for (int i = 0; i < n; i++)
        k->cs->durable_hot_keys += tiers[i] == KVT_TIER_HOT;
}

static void recent_add(const struct cl *k, int p, int s, int l)
{
    uint64_t at = __atomic_fetch_add(&recent->next, 1, __ATOMIC_RELAXED) % RECENT_HOT;

    __atomic_store_n(&recent->put[at],
                     (uint64_t)p << 32 | (uint64_t)k->slot << 16 | (uint64_t)s << 8 | (uint64_t)l,
                     __ATOMIC_RELAXED);
}

/* Take a recent hot put of another client into *p, *s, *l; false when
 * none. Each is taken once: a second durable put of the same keys would
 * find them in warm and write them, hiding an ack given too early. */
static bool recent_pick(struct cl *k, int *p, int *s, int *l)
{
    uint64_t *at = &recent->put[rnd(&k->rng) % RECENT_HOT];
    uint64_t v = __atomic_load_n(at, __ATOMIC_RELAXED);

    if (!v || (int)(v >> 16 & 0xffff) == k->slot ||
        !__atomic_compare_exchange_n(at, &v, 0, false, __ATOMIC_RELAXED, __ATOMIC_RELAXED))
        return false;
    *p = (int)(v >> 32);
    *s = (int)(v >> 8 & 0xff);
    *l = (int)(v & 0xff);
    return true;
}

/* Reserve blocks [s, l) of prompt p. With --hot, half of the plain puts
 * reserve in hot, and in warm when hot has no room (-ENOSPC), as the header
 * says an engine should. Durable puts reserve in warm, as client/kvtier.h
 * asks (it says a durable commit of a hot reservation is refused). *hot:
 * the slots are in hot. */
static int reserve(struct cl *k, int p, int s, int l, bool durable, void **slots, bool *hot)
{
    const kvt_key *parent = s ? key_at(p, s - 1) : NULL;
    int rc;

    *hot = false;
    if (opt.hot && durable)
        count_hot_keys(k, p, s, l - s);
    if (opt.hot && !durable && rnd(&k->rng) % 2 == 0) {
        rc = kvt_put_reserve_flags(k->ns, parent, key_at(p, s), (size_t)(l - s), slots,
                                   KVT_RESERVE_HOT);
        if (rc != -ENOSPC) {
            k->cs->hot_reserves += rc >= 0;
            *hot = rc >= 0;
            return rc;
        }
        k->cs->hot_full++;
    }
    return kvt_put_reserve(k->ns, parent, key_at(p, s), (size_t)(l - s), slots);
}

/* Put blocks [s, l) of prompt p under the parent key s - 1: reserve, fill
 * the slots that are ours, commit (durably every --durable-every puts;
 * one put in 16 is aborted instead). With --hot, three in four durable
 * puts redo another client's recent hot put instead, where there is one. */
static void op_put(struct cl *k, int p, int l)
{
    int s = (int)(rnd(&k->rng) % (uint64_t)l), n, rc, mine = 0;
    bool durable = opt.durable_every && ++k->puts % (uint64_t)opt.durable_every == 0;
    bool abort_it = !durable && rnd(&k->rng) % 16 == 0, hot;
    void *slots[MAX_CHAIN];
    uint64_t t0, t_rpc;

    if (durable && opt.hot && rnd(&k->rng) % 4 != 0)
        recent_pick(k, &p, &s, &l);
    n = l - s;
    t0 = cmn_now_ns();
    rc = reserve(k, p, s, l, durable, slots, &hot);
    t_rpc = cmn_now_ns() - t0;
    if (rc < 0) {
        failed(k, OP_PUT, rc, t_rpc, false);
        return;
    }
    for (int i = 0; i < n; i++)
        if (slots[i]) {
            fill_block(slots[i], p, s + i);
            mine++;
        }
    if (opt.hold_us)
        sleep_us(opt.hold_us);
    t0 = cmn_now_ns();
    if (abort_it)
        rc = kvt_put_abort(k->ns, key_at(p, s), (size_t)n);
    else
        rc = kvt_put_commit_flags(k->ns, key_at(p, s), (size_t)n,
                                  durable ? KVT_COMMIT_DURABLE : 0);
    t_rpc += cmn_now_ns() - t0;
    if (rc < 0) {
        if (!failed(k, OP_PUT, rc, t_rpc, durable))
            kvt_put_abort(k->ns, key_at(p, s), (size_t)n); /* nothing left reserved */
        return;
    }
    record(k->cs, OP_PUT, t_rpc);
    if (abort_it)
        return;
    if (hot && mine)
        recent_add(k, p, s, l); /* blocks written in hot, not on disk yet */
    k->cs->put_blocks += (uint64_t)mine;
    if (durable) {
        k->cs->durable_blocks += (uint64_t)n;
        log_durable(p, s, l);
    }
}

/* Flags of a get with --hot: a third lease hot blocks in place, a sixth do
 * that and ask for a promotion, a sixth only ask for one; the rest plain. */
static unsigned get_flags(struct cl *k)
{
    uint64_t r;

    if (!opt.hot)
        return 0;
    r = rnd(&k->rng) % 6;
    return r < 2 ? KVT_GET_HOT
         : r < 3 ? KVT_GET_HOT | KVT_GET_PROMOTE
         : r < 4 ? KVT_GET_PROMOTE : 0;
}

static const char *tier_name(uint8_t t)
{
    return t == KVT_TIER_HOT ? "hot" : t == KVT_TIER_WARM ? "warm" : "?";
}

/* Check leased block i of prompt p; why says when ("" at the lease). */
static bool verify(struct cl *k, const void *blk, int p, int i, uint8_t tier, const char *why)
{
    char hex[2 * KVT_KEY_BYTES + 1];

    if (check_block(blk, p, i))
        return true;
    k->cs->wrong++;
    fprintf(stderr, "kvload: pid %d: WRONG BYTES in block %d of prompt %d (key %s, %s)%s\n",
            (int)getpid(), i, p, kvt_key_hex(key_at(p, i), hex), tier_name(tier), why);
    return false;
}

/* Right before release: every block that was right when leased must still
 * be. A change means tierd let the slot go while it was leased (a past bug:
 * a hot slot freed under a reader in place, then reused). */
static void recheck(struct cl *k, const void *const *slots, const uint8_t *tiers,
                    const bool *ok, int p, int n)
{
    k->cs->rechecked_leases++;
    for (int i = 0; i < n; i++) {
        if (!ok[i])
            continue; /* counted wrong once already */
        k->cs->rechecked_blocks++;
        if (!verify(k, slots[i], p, i, tiers[i], ": changed under its lease"))
            k->cs->changed_under_lease++;
    }
}

/* Lease the leading cached run of keys [0, l) of prompt p (flags: the get's,
 * -1: chosen at random), check every byte of every block, hold (--hold-us),
 * check again with --hold-us or --hot, release. Returns the blocks got, or
 * -1 when the get failed. */
static int op_get(struct cl *k, int p, int l, int flags_or_any)
{
    const void *slots[MAX_CHAIN];
    uint8_t tiers[MAX_CHAIN];
    bool ok[MAX_CHAIN];
    unsigned flags = flags_or_any < 0 ? get_flags(k) : (unsigned)flags_or_any;
    kvt_lease lease;
    uint64_t t0 = cmn_now_ns(), dt;
    int rc, hits;

    memset(tiers, KVT_TIER_WARM, sizeof(tiers)); /* where a plain lease's slots are */
    rc = flags ? kvt_get_lease_flags(k->ns, key_at(p, 0), (size_t)l, flags, slots, tiers,
                                     &lease)
               : kvt_get_lease(k->ns, key_at(p, 0), (size_t)l, slots, &lease);
    dt = cmn_now_ns() - t0;
    if (rc < 0) {
        failed(k, OP_GET, rc, dt, false);
        return -1;
    }
    record(k->cs, OP_GET, dt);
    hits = rc;
    k->cs->hit_blocks += (uint64_t)hits;
    k->cs->hot_gets += (flags & KVT_GET_HOT) != 0;
    k->cs->promote_gets += (flags & KVT_GET_PROMOTE) != 0;
    for (int i = 0; i < hits; i++) {
        k->cs->hot_blocks += tiers[i] == KVT_TIER_HOT;
        ok[i] = verify(k, slots[i], p, i, tiers[i], "");
        k->cs->verified += ok[i];
    }
    if (opt.hold_us)
        sleep_us(opt.hold_us);
    if (opt.hold_us || opt.hot)
        recheck(k, slots, tiers, ok, p, hits);
    rc = kvt_release(k->ns, &lease);
    if (rc < 0)
        failed(k, OP_GET, rc, 0, false);
    return hits;
}

/* A scheduler's pinning lookup, the wait until its load (--hold-us), the
 * load, the unpin: every pinned block that was in memory at the lookup is
 * got, whatever the other clients put meanwhile (a disk block pinned but
 * not read ahead for want of room may still miss its read). */
static void op_pin(struct cl *k, int p, int l)
{
    /* held well past the wait (--hold-us) and the get: a pin tierd expired
     * by design is no error */
    uint64_t hold_ms = 2000 + 2 * (uint64_t)opt.hold_us / 1000;
    uint8_t tiers[MAX_CHAIN];
    uint64_t t0 = cmn_now_ns(), dt, got_at;
    kvt_pin pin;
    int rc, mem = 0, got;

    if (hold_ms > KVT_PIN_MAX_MS)
        hold_ms = KVT_PIN_MAX_MS;
    rc = kvt_lookup_pin(k->ns, key_at(p, 0), (size_t)l, (uint32_t)hold_ms, &pin, tiers);
    got_at = cmn_now_ns();
    dt = got_at - t0;
    if (rc < 0) {
        failed(k, OP_LOOKUP, rc, dt, false);
        return;
    }
    record(k->cs, OP_LOOKUP, dt);
    k->cs->pin_lookups++;
    k->cs->pinned_blocks += pin.n;
    while (mem < (int)pin.n && (tiers[mem] == KVT_TIER_HOT || tiers[mem] == KVT_TIER_WARM))
        mem++;
    if (opt.hold_us)
        sleep_us(opt.hold_us);
    /* hot blocks in place: a plain get would need warm room to copy them */
    t0 = cmn_now_ns();
    got = op_get(k, p, l, opt.hot ? KVT_GET_HOT : 0);
    /* (a get sent after the hold, on a machine slow enough, may rightly miss) */
    if (got >= 0 && got < mem && t0 - got_at < (uint64_t)pin.hold_ms * 1000000ull) {
        k->cs->pin_short++;
        k->cs->unexpected++;
        k->cs->last_unexpected = -ENODATA;
        k->cs->unexpected_op = OP_GET;
        fprintf(stderr, "kvload: pid %d: a get of prompt %d found %d blocks, %d were pinned "
                        "in memory\n", (int)getpid(), p, got, mem);
    }
    if (k->c)
        kvt_unpin(k->c, &pin); /* (gone with the connection after an outage) */
}


static void op_remove(struct cl *k, int p, int l)
{
    uint64_t t0 = cmn_now_ns();
    int rc = kvt_remove(k->ns, key_at(p, 0), (size_t)l);
    uint64_t dt = cmn_now_ns() - t0;

    if (rc < 0)
        failed(k, OP_REMOVE, rc, dt, false);
    else
        record(k->cs, OP_REMOVE, dt);
}

/* A prompt: half the choices go to the first quarter of the prompts in
 * play, so some are hot and shared often. All are in play, except with
 * --kill-tierd: nothing is removed then, and the key space would be full and
 * long durable within seconds, so that the rest of the run met no fresh
 * block; so a quarter of the prompts are in play, a window that drifts from
 * the first to the last over the run (the load clock: it stands still while
 * the clients are stopped), as new conversations arrive. */
static int pick_prompt(struct cl *k)
{
    uint64_t run_ns = (uint64_t)(opt.seconds * 1e9), now = cmn_now_ns(), end = end_ns();
    uint64_t left = end > now ? end - now : 0;
    int n = opt.prefixes, base = 0, p;

    if (opt.kill_tierd && n >= 4) {
        n = opt.prefixes / 4;
        base = (int)((double)(opt.prefixes - n) * (1.0 - (double)left / (double)run_ns));
        base = base < 0 ? 0 : base;
    }
    p = (int)(rnd(&k->rng) % (uint64_t)n);
    if (rnd(&k->rng) & 1)
        p %= (n + 3) / 4;
    return base + p;
}

/* The loop of one client process until the run ends. */
static int client_main(int slot, uint64_t gen)
{
    struct cl k = { .cs = &stats[slot], .slot = slot,
                    .rng = opt.seed ^ ((uint64_t)slot << 32) ^ gen };
    int total = 0;

    for (int i = 0; i < OP_N; i++)
        total += opt.mix[i];
    k.cs->started++;
    while (cmn_now_ns() < end_ns()) {
        int p, l, r;

        if (!k.c && !connect_retry(&k))
            break;
        p = pick_prompt(&k);
        l = 1 + (int)(rnd(&k.rng) % (uint64_t)opt.chain);
        r = (int)(rnd(&k.rng) % (uint64_t)total);
        if ((r -= opt.mix[OP_LOOKUP]) < 0)
            op_lookup(&k, p, l);
        else if ((r -= opt.mix[OP_PUT]) < 0)
            op_put(&k, p, l);
        else if ((r -= opt.mix[OP_GET]) < 0)
            op_get(&k, p, l, -1);
        else
            op_remove(&k, p, l);
    }
    kvt_close(k.c);
    return 0;
}

/* ---- the durable log --------------------------------------------------- */

/* The log starts with the parameters of the key space, so that a check
 * (another kvload process) rebuilds the same keys. */
struct log_hdr {
    uint32_t magic, prefixes, chain, shared;
    uint64_t block_bytes, seed;
};

static int open_log(void)
{
    struct log_hdr h = { LOG_HDR_MAGIC, (uint32_t)opt.prefixes, (uint32_t)opt.chain,
                         (uint32_t)opt.shared, opt.block_bytes, opt.seed };

    log_fd = open(opt.durable_log, O_WRONLY | O_CREAT | O_TRUNC | O_APPEND | O_CLOEXEC, 0644);
    if (log_fd < 0 || write(log_fd, &h, sizeof(h)) != (ssize_t)sizeof(h)) {
        fprintf(stderr, "kvload: %s: %s\n", opt.durable_log, strerror(errno));
        return -1;
    }
    return 0;
}

/* What a check of the durable log found. */
struct dcheck {
    uint64_t checked; /* distinct blocks recorded, each checked once */
    uint64_t missing; /* ... not found */
    uint64_t wrong;   /* ... found with other bytes */
};

/* Open the durable log at path and read its header; NULL (said why) when
 * it is not one. */
static FILE *log_read_open(const char *path, struct log_hdr *h)
{
    FILE *f = fopen(path, "rb");

    if (!f || fread(h, sizeof(*h), 1, f) != 1 || h->magic != LOG_HDR_MAGIC || !h->chain ||
        h->chain > MAX_CHAIN || !h->prefixes || h->block_bytes <= HDR_BYTES) {
        fprintf(stderr, "kvload: %s: not a durable log\n", path);
        if (f)
            fclose(f);
        return NULL;
    }
    return f;
}

/* Get block i of prompt p alone (a durable block's parent need not have
 * been durable) and check it, into dc. Returns a negative error only when
 * the daemon went away: the check cannot go on. */
static int check_one(kvt_ns *ns, uint32_t p, uint32_t i, struct dcheck *dc)
{
    const void *slot;
    kvt_lease l;
    int rc = kvt_get_lease(ns, key_at((int)p, (int)i), 1, &slot, &l);

    if (rc != 1) {
        dc->missing++;
        fprintf(stderr, "kvload: durable block %u of prompt %u missing (%s)\n", i, p,
                rc < 0 ? kvt_strerror(rc) : "not found");
        return rc < 0 && is_outage(rc) ? rc : 0;
    }
    if (!check_block(slot, (int)p, (int)i)) {
        dc->wrong++;
        fprintf(stderr, "kvload: durable block %u of prompt %u: WRONG BYTES\n", i, p);
    }
    kvt_release(ns, &l);
    return 0;
}

/* Check every block recorded in the log f (read past its header) against
 * the tierd at opt.socket, each block once. Returns 0 with the counts in
 * dc, or a negative error when the check could not run to its end. */
static int check_records(FILE *f, struct dcheck *dc)
{
    uint8_t *seen = calloc((size_t)opt.prefixes * (size_t)opt.chain, 1);
    kvt_model m = model();
    kvt_client *c = NULL;
    kvt_ns *ns;
    uint32_t rec[4];
    int rc = -ENOMEM;

    memset(dc, 0, sizeof(*dc));
    if (!seen || (rc = kvt_connect(opt.socket, &c)) < 0 || (rc = kvt_ns_open(c, &m, &ns)) < 0)
        goto out;
    while (rc == 0 && fread(rec, sizeof(rec), 1, f) == 1) {
        if (rec[0] != LOG_MAGIC || rec[1] >= (uint32_t)opt.prefixes ||
            rec[3] > (uint32_t)opt.chain || rec[2] >= rec[3])
            continue; /* a torn record cannot be: the writer's appends are whole */
        for (uint32_t i = rec[2]; i < rec[3] && rc == 0; i++) {
            size_t at = (size_t)rec[1] * (size_t)opt.chain + i;

            if (seen[at])
                continue;
            seen[at] = 1;
            dc->checked++;
            rc = check_one(ns, rec[1], i, dc);
        }
    }
out:
    kvt_close(c);
    free(seen);
    return rc;
}

/* --check-durable: every block recorded in the log must be present and
 * right on the tierd at opt.socket. The key space is the log's. */
static int check_durable(void)
{
    struct log_hdr h;
    struct dcheck dc = { 0 };
    FILE *f = log_read_open(opt.check_durable, &h);
    int rc;

    if (!f)
        return 2;
    opt.prefixes = (int)h.prefixes;
    opt.chain = (int)h.chain;
    opt.shared = (int)h.shared;
    opt.block_bytes = h.block_bytes;
    opt.seed = h.seed;
    rc = make_keys();
    if (rc == 0)
        rc = check_records(f, &dc);
    fclose(f);
    free(keys);
    free(sums);
    if (rc < 0 && dc.checked == 0) { /* nothing checked: could not start */
        fprintf(stderr, "kvload: cannot check: %s\n", kvt_strerror(rc));
        return 2;
    }
    printf("kvload: durable check: %" PRIu64 " blocks recorded, %" PRIu64 " missing, %" PRIu64
           " wrong\n",
           dc.checked, dc.missing, dc.wrong);
    if (rc < 0)
        fprintf(stderr, "kvload: the durable check stopped early: %s\n", kvt_strerror(rc));
    return rc < 0 || dc.missing || dc.wrong ? 1 : 0;
}

/* The check after a --kill-tierd restart: this run's own log (its key
 * space is ours), as far as it is written. */
static int check_log_now(struct dcheck *dc)
{
    struct log_hdr h;
    FILE *f = log_read_open(opt.durable_log, &h);
    int rc;

    memset(dc, 0, sizeof(*dc));
    if (!f)
        return -EINVAL;
    rc = check_records(f, dc);
    fclose(f);
    return rc;
}

/* ---- a private tierd ----------------------------------------------------- */

static char tmpdir[96], tierd_sock[128];
static pid_t tierd_pid;

static void show_tierd_log(void)
{
    char cmd[160];

    snprintf(cmd, sizeof(cmd), "cat '%s/tierd.log' >&2", tmpdir);
    if (system(cmd) != 0)
        fprintf(stderr, "kvload: no tierd log\n");
}

/* cmn_tierd_wait's test of readiness: a client gets through HELLO. */
static int hello(const char *sock, void *arg)
{
    kvt_client *c;

    (void)arg;
    if (kvt_connect(sock, &c) != 0)
        return -1;
    kvt_close(c);
    return 0;
}

/* Start opt.tierd (again, after a kill) on the socket and data folder in
 * tmpdir, its log appended beside them, and wait until it accepts a
 * client: 60 s at most, as it may run under valgrind. Our --socket and
 * --data come last, so that they win over TIERD-ARGS, and so that BIN may
 * be a wrapper (valgrind) whose arguments name the real tierd. */
static int exec_tierd(void)
{
    char data[128], logp[128];
    const char *argv[64];
    int n = 0, rc;

    snprintf(data, sizeof(data), "%s/data", tmpdir);
    snprintf(logp, sizeof(logp), "%s/tierd.log", tmpdir); /* shown if it fails */
    argv[n++] = opt.tierd;
    for (int i = 0; opt.tierd_args && opt.tierd_args[i] && n < 59; i++)
        argv[n++] = opt.tierd_args[i];
    argv[n++] = "--socket";
    argv[n++] = tierd_sock;
    argv[n++] = "--data";
    argv[n++] = data;
    argv[n] = NULL;
    tierd_pid = cmn_spawn(argv, logp, 0);
    if (tierd_pid < 0) {
        rc = (int)tierd_pid;
        tierd_pid = 0;
        return rc;
    }
    rc = cmn_tierd_wait(tierd_pid, tierd_sock, hello, NULL, 60000, NULL);
    if (rc == -ECHILD)
        tierd_pid = 0;
    return rc;
}

static int start_tierd(void)
{
    int rc = cmn_tmpdir("kvload", tmpdir, sizeof(tmpdir));

    if (rc < 0) {
        tmpdir[0] = '\0';
        return rc;
    }
    snprintf(tierd_sock, sizeof(tierd_sock), "%s/tierd.sock", tmpdir);
    opt.socket = tierd_sock;
    return exec_tierd();
}

/* After the run, on a private tierd: once every client has gone (5 s at
 * most), nothing may stay leased or reserved. Returns the blocks still
 * held (0: none). */
static uint64_t held_after(void)
{
    kvt_client *c = NULL;
    kvt_stats st = { 0 };
    int rc = kvt_connect(opt.socket, &c);

    for (int i = 0; rc == 0 && i < 500; i++) {
        rc = kvt_stats_get(c, &st);
        if (rc == 0 && st.clients == 1 && st.leases_active == 0 && st.reserved == 0)
            break;
        sleep_us(10000);
    }
    kvt_close(c);
    if (rc < 0) {
        fprintf(stderr, "kvload: tierd's stats after the run: %s\n", kvt_strerror(rc));
        return 1;
    }
    if (st.leases_active || st.reserved)
        fprintf(stderr, "kvload: after the run, %u clients, %" PRIu64 " blocks leased, %" PRIu64
                " reserved (expected 1, 0, 0: slots leaked)\n",
                st.clients, st.leases_active, st.reserved);
    return st.leases_active + st.reserved;
}

/* Stop the private tierd (SIGTERM: a clean stop) and remove its folder;
 * its log is shown when asked or when the stop was not clean. Returns its
 * exit status (0: clean), or -1 when none ran. */
static int stop_tierd(bool show_log)
{
    int status = -1, rc;

    if (tierd_pid > 0) {
        kill(tierd_pid, SIGTERM);
        status = cmn_wait(tierd_pid);
        tierd_pid = 0;
        if (status != 0)
            fprintf(stderr, "kvload: tierd's stop was not clean: status %d\n", status);
    }
    if (tmpdir[0] && (show_log || status > 0))
        show_tierd_log();
    if (tmpdir[0]) {
        if ((rc = cmn_rmtree(tmpdir)) < 0)
            fprintf(stderr, "kvload: could not remove %s: %s\n", tmpdir, strerror(-rc));
        tmpdir[0] = '\0';
    }
    return status;
}

/* ---- the parent -------------------------------------------------------- */

static pid_t spawn(int slot, uint64_t gen)
{
    pid_t pid = fork();

    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the run */
        _exit(client_main(slot, gen));
    }
    return pid;
}

struct totals {
    struct cstat s;        /* summed over the slots */
    uint64_t hung;         /* processes still running well after the end: killed */
    uint64_t killed;       /* SIGKILLs sent by --kill-clients */
    uint64_t crashed;      /* processes that died by themselves */
    uint64_t tierd_kills;  /* SIGKILLs sent to tierd by --kill-tierd */
    uint64_t tierd_failed; /* tierd not back after a kill, its check cut short, or
                              tierd dead by itself */
    struct dcheck dur;     /* the durable checks after each restart, summed */
    struct dcheck each[MAX_TIERD_KILLS]; /* ... and each one */
    double kill_s[MAX_TIERD_KILLS];      /* when each kill came, s of load */
    uint64_t left_held;    /* blocks a private tierd still had leased or reserved once
                              every client had gone: slots leaked */
    int tierd_exit;        /* the private tierd's status at its stop (0: clean, -1: none) */
    double secs;           /* measured length of the run, stops excluded */
};

static void sum_stats(struct totals *t)
{
    struct cstat *o = &t->s;

    for (int c = 0; c < opt.clients; c++) {
        const struct cstat *x = &stats[c];

        for (int op = 0; op < OP_N; op++) {
            o->ops[op] += x->ops[op];
            for (int b = 0; b < NBUCKET; b++)
                o->hist[op][b] += x->hist[op][b];
            if (x->max_ns[op] > o->max_ns[op])
                o->max_ns[op] = x->max_ns[op];
        }
        if (x->unexpected) {
            o->last_unexpected = x->last_unexpected;
            o->unexpected_op = x->unexpected_op;
        }
        if (x->max_err_ns > o->max_err_ns)
            o->max_err_ns = x->max_err_ns;
#define X(name, what) o->name += x->name;
        SUMMED_COUNTERS(X)
        ORACLE_COUNTERS(X)
#undef X
    }
}

/* The latency (us) below which fraction q of op's calls fell. */
static double pct_us(const struct cstat *s, int op, double q)
{
    uint64_t want = (uint64_t)((double)s->ops[op] * q), seen = 0;

    if (!s->ops[op])
        return 0;
    for (int b = 0; b < NBUCKET; b++) {
        seen += s->hist[op][b];
        if (seen > want) /* the bucket's middle, never above the largest seen */
            return (bucket_mid(b) < (double)s->max_ns[op] ? bucket_mid(b)
                                                           : (double)s->max_ns[op]) / 1000.0;
    }
    return (double)s->max_ns[op] / 1000.0;
}

static uint64_t all_ops(const struct cstat *s)
{
    uint64_t n = 0;

    for (int op = 0; op < OP_N; op++)
        n += s->ops[op];
    return n;
}

/* Errors of the daemon itself: not back after a kill, dead by itself, a
 * stop that was not clean, or slots still held after the run. */
static uint64_t tierd_errors(const struct totals *t)
{
    return t->tierd_failed + (t->tierd_exit > 0) + t->left_held;
}

/* Correctness errors: wrong bytes (a change under a lease among them),
 * unexplained errors, hung or crashed processes, durable blocks missing or
 * wrong after a restart, tierd's own errors. Outages, refusals, -ENOSPC and
 * -EAGAIN are not. */
static uint64_t bad(const struct totals *t)
{
    return t->s.wrong + t->s.unexpected + t->hung + t->crashed + t->dur.missing +
           t->dur.wrong + tierd_errors(t);
}

/* n moments between 10% and 90% of a run of run_ns from t0, in order. */
static void schedule(uint64_t *at, int n, uint64_t t0, uint64_t run_ns, uint64_t *rng)
{
    for (int i = 0; i < n; i++)
        at[i] = t0 + run_ns / 10 + rnd(rng) % (run_ns * 8 / 10 + 1);
    for (int i = 1; i < n; i++)
        for (int j = i; j > 0 && at[j - 1] > at[j]; j--) {
            uint64_t x = at[j];

            at[j] = at[j - 1];
            at[j - 1] = x;
        }
}

static void signal_clients(int sig)
{
    for (int c = 0; c < opt.clients; c++)
        if (pids[c] > 0)
            kill(pids[c], sig);
}

/* One --kill-tierd: SIGKILL tierd under load, stop every client, start
 * tierd again on the same data and socket, check every block the durable
 * log holds so far (each must be there, byte-identical), let the clients go
 * on. A client stopped between its durable ack and its log record writes
 * the record later: a later check covers it, or none. Returns false when
 * tierd did not come back or could not be checked: the run then ends. */
static bool kill_tierd_once(struct totals *t, double at_s)
{
    struct dcheck dc = { 0 };
    int rc;

    kill(tierd_pid, SIGKILL);
    cmn_wait(tierd_pid);
    tierd_pid = 0;
    signal_clients(SIGSTOP);
    rc = exec_tierd();
    if (rc < 0)
        fprintf(stderr, "kvload: after tierd kill %" PRIu64 ": tierd did not start again: %s\n",
                t->tierd_kills + 1, rc == -ECHILD ? "it exited" : kvt_strerror(rc));
    else if ((rc = check_log_now(&dc)) < 0)
        fprintf(stderr, "kvload: after tierd kill %" PRIu64 ": the durable check stopped: %s\n",
                t->tierd_kills + 1, kvt_strerror(rc));
    if (rc < 0) {
        show_tierd_log();
        t->tierd_failed++;
    }
    t->kill_s[t->tierd_kills] = at_s;
    t->each[t->tierd_kills++] = dc;
    t->dur.checked += dc.checked;
    t->dur.missing += dc.missing;
    t->dur.wrong += dc.wrong;
    signal_clients(SIGCONT);
    return rc == 0;
}

/* A process of the run ended (waitpid status st): its slot is free. */
static void reaped(struct totals *t, pid_t w, int st, bool late)
{
    for (int c = 0; c < opt.clients; c++)
        if (pids[c] == w) {
            pids[c] = 0;
            if (!(WIFEXITED(st) && WEXITSTATUS(st) == 0) &&
                !(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL && late)) {
                fprintf(stderr, "kvload: client %d (pid %d) died: status %d\n", c, (int)w, st);
                t->crashed++;
            }
        }
}

/* --kill-clients: SIGKILL a random client and start another in its slot. */
static void kill_client(struct totals *t, uint64_t *rng, uint64_t *gen, int *live)
{
    int c = (int)(rnd(rng) % (uint64_t)opt.clients), st;

    if (pids[c] <= 0)
        return;
    kill(pids[c], SIGKILL);
    waitpid(pids[c], &st, 0);
    t->killed++;
    pids[c] = spawn(c, (*gen)++); /* the load goes on */
    if (pids[c] < 0)
        (*live)--;
}

static void set_end(uint64_t end)
{
    __atomic_store_n(run_end, end, __ATOMIC_RELAXED);
}

/* Run opt.clients processes for opt.seconds; fill t. Kills are scheduled
 * on the load clock, which stands still while the clients are stopped for
 * a check; the end moves on by as much. */
static int run_load(struct totals *t)
{
    size_t bytes = (size_t)opt.clients * sizeof(struct cstat);
    uint64_t t0 = cmn_now_ns(), run_ns = (uint64_t)(opt.seconds * 1e9), end = t0 + run_ns;
    uint64_t rng = opt.seed * 77 + 5, gen = 0, grace_ns, paused = 0;
    int live = 0, next_kill = 0, next_tkill = 0;
    const char *tmo = getenv("KVTIER_TIMEOUT_MS");

    memset(t, 0, sizeof(*t));
    /* globals, so that a child (which leaves by _exit) still reaches them */
    pids = calloc((size_t)opt.clients, sizeof(*pids));
    kill_at = calloc((size_t)opt.kill_clients + 1, sizeof(*kill_at));
    tkill_at = calloc((size_t)opt.kill_tierd + 1, sizeof(*tkill_at));
    stats = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    run_end = mmap(NULL, sizeof(*run_end), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                   -1, 0);
    recent = mmap(NULL, sizeof(*recent), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS,
                  -1, 0);
    if (stats == MAP_FAILED || run_end == MAP_FAILED || recent == MAP_FAILED || !pids ||
        !kill_at || !tkill_at) {
        fprintf(stderr, "kvload: out of memory\n");
        return -ENOMEM;
    }
    set_end(end);
    schedule(kill_at, opt.kill_clients, t0, run_ns, &rng);
    schedule(tkill_at, opt.kill_tierd, t0, run_ns, &rng);
    for (int c = 0; c < opt.clients; c++) {
        pids[c] = spawn(c, gen++);
        if (pids[c] < 0) {
            fprintf(stderr, "kvload: fork: %s\n", strerror(errno));
            opt.clients = c;
            break;
        }
        live++;
    }
    /* a call waits at most KVTIER_TIMEOUT_MS (default 30 s) for its reply:
     * a process still there that much (and 5 s) after the end is hung */
    grace_ns = ((tmo && atoi(tmo) > 0) ? (uint64_t)atoi(tmo) : 30000) * 1000000ull +
               5000000000ull;
    while (live > 0) {
        uint64_t now = cmn_now_ns(), clock = now - paused;
        int st;
        pid_t w;

        if (next_tkill < opt.kill_tierd && clock >= tkill_at[next_tkill] && now < end &&
            tierd_pid > 0) {
            next_tkill++;
            if (kill_tierd_once(t, (double)(clock - t0) / 1e9)) {
                paused += cmn_now_ns() - now;
                end += cmn_now_ns() - now;
            } else {
                end = cmn_now_ns(); /* no daemon to run against */
            }
            set_end(end);
            continue;
        }
        if (next_kill < opt.kill_clients && clock >= kill_at[next_kill] && now < end) {
            next_kill++;
            kill_client(t, &rng, &gen, &live);
            continue;
        }
        if (now > end + grace_ns) {
            for (int c = 0; c < opt.clients; c++)
                if (pids[c] > 0) {
                    fprintf(stderr, "kvload: client %d (pid %d) hung: killed\n", c,
                            (int)pids[c]);
                    kill(pids[c], SIGKILL);
                    t->hung++;
                }
        }
        w = waitpid(-1, &st, WNOHANG);
        if (w <= 0) {
            sleep_us(10000);
            continue;
        }
        if (w == tierd_pid) {
            fprintf(stderr, "kvload: tierd (pid %d) died by itself: status %d\n", (int)w, st);
            tierd_pid = 0;
            t->tierd_failed++;
            end = now;
            set_end(end);
            continue;
        }
        for (int c = 0; c < opt.clients; c++)
            live -= pids[c] == w;
        reaped(t, w, st, now > end + grace_ns);
    }
    t->secs = (double)(cmn_now_ns() - t0 - paused) / 1e9;
    if (t->secs > opt.seconds)
        t->secs = opt.seconds; /* processes stop at the end; the wait after is not load */
    sum_stats(t);
    munmap(stats, bytes);
    munmap(run_end, sizeof(*run_end));
    munmap(recent, sizeof(*recent));
    stats = NULL;
    run_end = NULL;
    recent = NULL;
    free(pids);
    free(kill_at);
    free(tkill_at);
    pids = NULL;
    kill_at = tkill_at = NULL;
    return 0;
}

/* Each kill's time and durable check: "2.9 s: 766" (text), or the JSON
 * objects {"at_s":2.9,"checked":766,"missing":0,"wrong":0}. */
static const char *kill_list(const struct totals *t, bool json, char *buf, size_t cap)
{
    size_t at = 0;

    buf[0] = '\0';
    for (uint64_t i = 0; i < t->tierd_kills && at < cap; i++) {
        const struct dcheck *d = &t->each[i];

        if (json)
            at += (size_t)snprintf(buf + at, cap - at,
                                   "%s{\"at_s\":%.2f,\"checked\":%" PRIu64 ",\"missing\":%"
                                   PRIu64 ",\"wrong\":%" PRIu64 "}",
                                   i ? "," : "", t->kill_s[i], d->checked, d->missing,
                                   d->wrong);
        else
            at += (size_t)snprintf(buf + at, cap - at, "%s%.1f s: %" PRIu64, i ? ", " : "",
                                   t->kill_s[i], d->checked);
    }
    return buf;
}

static void print_oracle_text(const struct totals *t)
{
    const struct cstat *s = &t->s;
    char each[MAX_TIERD_KILLS * 96];

    if (opt.hot || opt.prefetch || opt.hold_us)
        printf("  oracle: hot gets %" PRIu64 " (%" PRIu64 " blocks in place), promoting gets %"
               PRIu64 ", hot reserves %" PRIu64 " (%" PRIu64 " more fell back to warm), "
               "durable keys found in hot %" PRIu64 ", prefetching lookups %" PRIu64 " (%"
               PRIu64 " gets after), pinning lookups %" PRIu64 " (%" PRIu64 " blocks held, %"
               PRIu64 " gets short), leases checked again before release %" PRIu64 " (%"
               PRIu64 " blocks), changed under a lease %" PRIu64 "\n",
               s->hot_gets, s->hot_blocks, s->promote_gets, s->hot_reserves, s->hot_full,
               s->durable_hot_keys, s->prefetch_lookups, s->prefetch_gets, s->pin_lookups,
               s->pinned_blocks, s->pin_short, s->rechecked_leases, s->rechecked_blocks,
               s->changed_under_lease);
    if (opt.kill_tierd)
        printf("  tierd kills %" PRIu64 ", durable blocks checked after each (%s); missing %"
               PRIu64 ", wrong %" PRIu64 ", tierd errors %" PRIu64 " (must all be 0)\n",
               t->tierd_kills, kill_list(t, false, each, sizeof(each)), t->dur.missing,
               t->dur.wrong, tierd_errors(t));
}

static void print_text(const struct totals *t, const char *label)
{
    const struct cstat *s = &t->s;
    uint64_t n = all_ops(s);

    printf("kvload%s: %d clients, %.1f s, %" PRIu64 " KiB blocks, %d prompts x %d blocks "
           "(%d shared), durable every %d, kills %d, tierd kills %d%s%s\n",
           label, opt.clients, t->secs, opt.block_bytes >> 10, opt.prefixes, opt.chain,
           opt.shared, opt.durable_every, opt.kill_clients, opt.kill_tierd,
           opt.hot ? ", hot" : "", opt.prefetch ? ", prefetch" : "");
    printf("  ops %" PRIu64 " (%.0f ops/s)\n", n, (double)n / t->secs);
    printf("  %-7s %10s %10s %10s %10s %10s %10s\n", "op", "count", "ops/s", "p50 us",
           "p99 us", "p999 us", "max us");
    for (int op = 0; op < OP_N; op++)
        printf("  %-7s %10" PRIu64 " %10.0f %10.1f %10.1f %10.1f %10.1f\n", op_name[op],
               s->ops[op], (double)s->ops[op] / t->secs, pct_us(s, op, 0.5),
               pct_us(s, op, 0.99), pct_us(s, op, 0.999), (double)s->max_ns[op] / 1000.0);
    printf("  blocks: written %" PRIu64 ", acknowledged durable %" PRIu64 ", got %" PRIu64
           ", verified %" PRIu64
           ", wrong %" PRIu64 "\n",
           s->put_blocks, s->durable_blocks, s->hit_blocks, s->verified, s->wrong);
    print_oracle_text(t);
    printf("  errors: wrong_bytes %" PRIu64 " unexpected %" PRIu64 " hung %" PRIu64
           " crashed %" PRIu64 " tierd %" PRIu64 " (must all be 0)\n",
           s->wrong, s->unexpected, t->hung, t->crashed, tierd_errors(t));
    if (s->unexpected)
        printf("  last unexpected error: %s in %s\n", kvt_strerror((int)s->last_unexpected),
               s->unexpected_op < OP_N ? op_name[s->unexpected_op] : "connect");
    printf("  allowed: enospc %" PRIu64 " eagain %" PRIu64 " nodata %" PRIu64 " busy %" PRIu64
           " refused %" PRIu64
           " outage %" PRIu64 " reconnects %" PRIu64 " killed %" PRIu64
           " processes %" PRIu64 " slowest_error_ms %.1f\n",
           s->enospc, s->eagain, s->nodata, s->busy, s->refused, s->outage, s->reconnects,
           t->killed, s->started, (double)s->max_err_ns / 1e6);
    fflush(stdout);
}

/* The oracle's fields of the JSON object, each after a comma. */
static void print_oracle_json(const struct totals *t)
{
    char each[MAX_TIERD_KILLS * 96];

#define X(name, what) printf(",\"" #name "\":%" PRIu64, t->s.name);
    ORACLE_COUNTERS(X)
#undef X
    printf(",\"tierd_kills\":%" PRIu64 ",\"durable_checked\":%" PRIu64
           ",\"durable_missing\":%" PRIu64 ",\"durable_wrong\":%" PRIu64
           ",\"after_each_kill\":[%s],\"tierd_failed\":%" PRIu64 ",\"tierd_exit\":%d"
           ",\"left_held\":%" PRIu64,
           t->tierd_kills, t->dur.checked, t->dur.missing, t->dur.wrong,
           kill_list(t, true, each, sizeof(each)), t->tierd_failed, t->tierd_exit,
           t->left_held);
}

static void print_json(const struct totals *t)
{
    const struct cstat *s = &t->s;

    printf("{\"clients\":%d,\"seconds\":%.3f,\"block_bytes\":%" PRIu64 ",\"ops\":%" PRIu64
           ",\"ops_per_s\":%.1f,\"op\":{",
           opt.clients, t->secs, opt.block_bytes, all_ops(s), (double)all_ops(s) / t->secs);
    for (int op = 0; op < OP_N; op++)
        printf("%s\"%s\":{\"count\":%" PRIu64 ",\"p50_us\":%.1f,\"p99_us\":%.1f,"
               "\"p999_us\":%.1f,\"max_us\":%.1f}",
               op ? "," : "", op_name[op], s->ops[op], pct_us(s, op, 0.5), pct_us(s, op, 0.99),
               pct_us(s, op, 0.999), (double)s->max_ns[op] / 1000.0);
    printf("},\"put_blocks\":%" PRIu64 ",\"durable_blocks\":%" PRIu64 ",\"hit_blocks\":%" PRIu64
           ",\"verified\":%" PRIu64 ",\"wrong_bytes\":%" PRIu64 ",\"unexpected\":%" PRIu64
           ",\"last_unexpected\":%" PRId64 ",\"unexpected_op\":\"%s\",\"hung\":%" PRIu64
           ",\"crashed\":%" PRIu64 ",\"enospc\":%" PRIu64 ",\"eagain\":%" PRIu64
           ",\"nodata\":%" PRIu64
           ",\"busy\":%" PRIu64 ",\"refused\":%" PRIu64 ",\"outage\":%" PRIu64
           ",\"reconnects\":%" PRIu64 ",\"killed\":%" PRIu64 ",\"processes\":%" PRIu64
           ",\"slowest_error_ms\":%.1f",
           s->put_blocks, s->durable_blocks, s->hit_blocks, s->verified, s->wrong,
           s->unexpected, s->last_unexpected,
           !s->unexpected ? "none"
           : s->unexpected_op < OP_N ? op_name[s->unexpected_op] : "connect", t->hung,
           t->crashed, s->enospc, s->eagain, s->nodata, s->busy, s->refused, s->outage,
           s->reconnects, t->killed, s->started, (double)s->max_err_ns / 1e6);
    print_oracle_json(t);
    printf("}\n");
    fflush(stdout);
}

/* ---- main ----------------------------------------------------------------- */

static const char usage_text[] =
    "usage: kvload [--socket PATH | --tierd BIN [-- TIERD-ARGS...]] [options]\n"
    "       kvload --check-durable LOG [--socket PATH]\n"
    "  --clients N        client processes (64)\n"
    "  --seconds S        length of the run (60)\n"
    "  --block-bytes N    bytes per block, K/M suffix ok (64K, 1M)\n"
    "  --prefixes N       prompts (64), each --chain blocks (16), the first\n"
    "  --chain N          --shared (2) of them the same in every prompt\n"
    "  --shared N\n"
    "  --mix L,P,G,R      weights of lookup, put, get, remove (35,30,30,5)\n"
    "  --durable-every N  every Nth put of a client commits durably (0: never)\n"
    "  --durable-log F    record each acknowledged durable put in F\n"
    "  --kill-clients N   SIGKILL N random clients at random moments (replaced)\n"
    "  --hold-us N        hold each lease and reservation N us; leases are checked\n"
    "                     again before release\n"
    "  --hot              reserve and lease in tierd's hot tier too (tierd needs\n"
    "                     --hot-bytes); leases are checked again before release\n"
    "  --prefetch         prefetching lookups, most followed by a get\n"
    "  --kill-tierd N     SIGKILL the private tierd N times under load; each time\n"
    "                     restart it and check the durable log against it (needs\n"
    "                     --tierd, --durable-log and a remove weight of 0)\n"
    "  --seed N           key space and choices (1)\n"
    "  --json             one JSON object instead of the table\n"
    "  --bench            bench: lines; a 1-client baseline first, except with\n"
    "                     --hot, --prefetch or --kill-tierd (the oracle's lines)\n"
    "  --tierd BIN        start a private tierd (args after --) and stop it after;\n"
    "                     BIN may be a wrapper whose args name tierd (valgrind)\n"
    "exit status: 0 no correctness error, 1 wrong bytes (a block changed under\n"
    "its lease among them) / unexpected errors / hung or crashed clients /\n"
    "durable blocks missing or wrong / tierd not back after a kill, dead by\n"
    "itself or not stopping cleanly, 2 usage or setup.\n";

static int parse_args(int argc, char **argv)
{
    static const struct option lo[] = {
        { "socket", required_argument, NULL, 's' },
        { "clients", required_argument, NULL, 'c' },
        { "seconds", required_argument, NULL, 't' },
        { "block-bytes", required_argument, NULL, 'b' },
        { "prefixes", required_argument, NULL, 'p' },
        { "chain", required_argument, NULL, 'l' },
        { "shared", required_argument, NULL, 'S' },
        { "mix", required_argument, NULL, 'm' },
        { "durable-every", required_argument, NULL, 'd' },
        { "durable-log", required_argument, NULL, 'D' },
        { "check-durable", required_argument, NULL, 'C' },
        { "kill-clients", required_argument, NULL, 'k' },
        { "kill-tierd", required_argument, NULL, 'K' },
        { "hold-us", required_argument, NULL, 'H' },
        { "hot", no_argument, NULL, 'O' },
        { "prefetch", no_argument, NULL, 'P' },
        { "seed", required_argument, NULL, 'r' },
        { "json", no_argument, NULL, 'j' },
        { "bench", no_argument, NULL, 'B' },
        { "tierd", required_argument, NULL, 'T' },
        { "help", no_argument, NULL, 'h' },
        { NULL, 0, NULL, 0 },
    };
    int o;

    opt.socket = kvt_default_socket();
    while ((o = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (o) {
        case 's': opt.socket = optarg; break;
        case 'c': opt.clients = atoi(optarg); break;
        case 't': opt.seconds = atof(optarg); break;
        case 'b': {
            int rc = cmn_parse_size(optarg, &opt.block_bytes);

            if (rc < 0) {
                fprintf(stderr, "kvload: --block-bytes: bad size '%s': %s\n", optarg,
                        cmn_size_why(rc));
                return -1;
            }
            break;
        }
        case 'p': opt.prefixes = atoi(optarg); break;
        case 'l': opt.chain = atoi(optarg); break;
        case 'S': opt.shared = atoi(optarg); break;
        case 'm':
            if (sscanf(optarg, "%d,%d,%d,%d", &opt.mix[0], &opt.mix[1], &opt.mix[2],
                       &opt.mix[3]) != 4)
                return -1;
            break;
        case 'd': opt.durable_every = atoi(optarg); break;
        case 'D': opt.durable_log = optarg; break;
        case 'C': opt.check_durable = optarg; break;
        case 'k': opt.kill_clients = atoi(optarg); break;
        case 'K': opt.kill_tierd = atoi(optarg); break;
        case 'H': opt.hold_us = (unsigned)atoi(optarg); break;
        case 'O': opt.hot = true; break;
        case 'P': opt.prefetch = true; break;
        case 'r': opt.seed = strtoull(optarg, NULL, 10); break;
        case 'j': opt.json = true; break;
        case 'B': opt.bench = true; break;
        case 'T': opt.tierd = optarg; break;
        default: return -1;
        }
    }
    opt.tierd_args = argv + optind;
    if (optind < argc && !opt.tierd)
        return -1;
    if (opt.clients < 1 || opt.clients > MAX_CLIENTS || opt.seconds <= 0 ||
        opt.block_bytes < 64 || opt.block_bytes > KVT_BLOCK_MAX || opt.prefixes < 1 ||
        opt.chain < 1 || opt.chain > MAX_CHAIN || opt.shared < 0 || opt.shared > opt.chain ||
        opt.durable_every < 0 || opt.kill_clients < 0 || opt.kill_tierd < 0 ||
        opt.kill_tierd > MAX_TIERD_KILLS)
        return -1;
    for (int i = 0; i < OP_N; i++)
        if (opt.mix[i] < 0)
            return -1;
    return opt.mix[0] + opt.mix[1] + opt.mix[2] + opt.mix[3] > 0 ? 0 : -1;
}

/* --kill-tierd as asked cannot work: say why. */
static bool kill_tierd_refused(void)
{
    if (!opt.kill_tierd)
        return false;
    if (!opt.tierd || !opt.durable_log) {
        fputs("kvload: --kill-tierd needs --tierd (a private tierd to kill and start again) "
              "and --durable-log (what each restart is checked against)\n", stderr);
        return true;
    }
    if (opt.mix[OP_REMOVE]) {
        fputs("kvload: --kill-tierd needs a remove weight of 0 in --mix: a durable block "
              "removed later is rightly gone, and the check after a restart would call it "
              "missing\n", stderr);
        return true;
    }
    return false;
}

/* --hot needs a tierd with a hot tier: asked once here, so that one
 * without is a setup error, not a run of unexpected errors. */
static int probe_hot(void)
{
    kvt_client *c = NULL;
    int rc = kvt_connect(opt.socket, &c);

    if (rc == 0)
        rc = kvt_hot_attach(c, NULL);
    kvt_close(c);
    if (rc == -EOPNOTSUPP)
        fputs("kvload: --hot: tierd has no hot tier (start it with --hot-bytes SIZE)\n",
              stderr);
    else if (rc < 0)
        fprintf(stderr, "kvload: --hot: %s\n", kvt_strerror(rc));
    return rc;
}

/* An oracle run: its bench lines are its own, without a baseline. */
static bool oracle_run(void)
{
    return opt.hot || opt.prefetch || opt.kill_tierd;
}

/* The bench: lines. Speed targets are ratios against the one-client run
 * on the same daemon just before:
 *   load_N_vs_1_client_ops   aggregate ops/s of N clients over one client's:
 *                            >= 0.5, no collapse under contention (convoys,
 *                            thundering herds, lock-step eviction). Not >= 1:
 *                            where N processes share 2 CPUs with the daemon
 *                            and every one busy-polls for its replies, the
 *                            aggregate cannot grow past what one client with
 *                            the daemon already use;
 *   load_get_p999_vs_p50     tail of a get under load over its median: <= 50,
 *                            no client starved behind the others (the median
 *                            itself is mostly CPU scheduling when N
 *                            processes share few cores);
 * and the correctness counts, which must be 0. */
static void bench_one(const char *name, double v, const char *unit, const char *op, double t)
{
    bool met = op[0] == '>' ? v >= t : v <= t;

    printf("bench: %s %.2f %s target %s %g\n", name, v, unit, op, t);
    if (!met)
        printf("# %s: target missed (%.2f %s %g wanted)\n", name, v, op, t);
}

/* A count against its target: "==" (a correctness count, 0) or ">=". */
static void bench_count(const char *name, uint64_t v, const char *unit, const char *op,
                        uint64_t t)
{
    bool met = op[0] == '>' ? v >= t : v == t;

    printf("bench: %s %" PRIu64 " %s target %s %" PRIu64 "\n", name, v, unit, op, t);
    if (!met)
        printf("# %s: target missed (%" PRIu64 " %s %" PRIu64 " wanted)\n", name, v, op, t);
}

static void bench_lines(const struct totals *one, const struct totals *all)
{
    double r1 = (double)all_ops(&one->s) / one->secs;
    double rn = (double)all_ops(&all->s) / all->secs;
    double p50 = pct_us(&all->s, OP_GET, 0.5);
    char name[64];

    printf("# load: %d clients %.0f ops/s, 1 client %.0f ops/s\n", opt.clients, rn, r1);
    for (int op = 0; op < OP_N; op++)
        printf("# load %s: p50 %.1f us, p99 %.1f us, p999 %.1f us (1 client: %.1f / %.1f / "
               "%.1f us)\n",
               op_name[op], pct_us(&all->s, op, 0.5), pct_us(&all->s, op, 0.99),
               pct_us(&all->s, op, 0.999), pct_us(&one->s, op, 0.5), pct_us(&one->s, op, 0.99),
               pct_us(&one->s, op, 0.999));
    snprintf(name, sizeof(name), "load_%d_vs_1_client_ops", opt.clients);
    bench_one(name, r1 > 0 ? rn / r1 : 0, "ratio", ">=", 0.5);
    bench_one("load_get_p999_vs_p50", p50 > 0 ? pct_us(&all->s, OP_GET, 0.999) / p50 : 0,
              "ratio", "<=", 50);
    printf("bench: load_wrong_bytes %" PRIu64 " blocks target <= 0\n", all->s.wrong);
    printf("bench: load_errors %" PRIu64 " count target <= 0\n", bad(all) + bad(one));
    fflush(stdout);
}

/* The oracle run's bench: lines: that it checked something of each kind
 * (blocks got, blocks in hot in place, durable blocks after the kills), and
 * the correctness counts, which must be 0. */
static void bench_oracle(const struct totals *t)
{
    const struct cstat *s = &t->s;

    printf("# oracle: %.0f ops/s, %" PRIu64 " blocks verified (%" PRIu64 " in hot in place), "
           "%" PRIu64 " leases checked again, %" PRIu64 " durable blocks checked after %"
           PRIu64 " tierd kills\n",
           (double)all_ops(s) / t->secs, s->verified, s->hot_blocks, s->rechecked_leases,
           t->dur.checked, t->tierd_kills);
    bench_count("kvload_oracle_verified", s->verified, "blocks", ">=", 1);
    if (opt.hot)
        bench_count("kvload_oracle_hot_in_place", s->hot_blocks, "blocks", ">=", 1);
    if (opt.kill_tierd)
        bench_count("kvload_oracle_durable_checked", t->dur.checked, "blocks", ">=", 1);
    bench_count("kvload_oracle_wrong", s->wrong, "blocks", "==", 0);
    bench_count("kvload_oracle_durable_lost", t->dur.missing + t->dur.wrong, "blocks", "==", 0);
    bench_count("kvload_oracle_errors", s->unexpected + t->hung + t->crashed + tierd_errors(t),
                "count", "==", 0);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    struct totals one, all;
    int rc;

    if (parse_args(argc, argv) < 0) {
        fputs(usage_text, stderr);
        return 2;
    }
    if (opt.check_durable)
        return check_durable();
    if (kill_tierd_refused())
        return 2;
    signal(SIGPIPE, SIG_IGN);
    if (make_keys() < 0) {
        fprintf(stderr, "kvload: cannot build the key space\n");
        return 2;
    }
    if (opt.tierd && (rc = start_tierd()) < 0) {
        fprintf(stderr, "kvload: tierd %s did not start: %s\n", opt.tierd, strerror(-rc));
        stop_tierd(true);
        return 2;
    }
    if ((opt.hot && probe_hot() < 0) || (opt.durable_log && open_log() < 0)) {
        stop_tierd(false);
        return 2;
    }
    memset(&one, 0, sizeof(one));
    if (opt.bench && !oracle_run()) {
        /* the baseline: the same load from one process, on the same daemon,
         * for a sixth of the time (at least 5 s) */
        int n = opt.clients, k = opt.kill_clients;
        double secs = opt.seconds;

        opt.clients = 1;
        opt.kill_clients = 0;
        opt.seconds = secs / 6 > 5 ? secs / 6 : 5;
        rc = run_load(&one);
        if (rc == 0 && !opt.json)
            print_text(&one, " baseline");
        opt.clients = n;
        opt.kill_clients = k;
        opt.seconds = secs;
    }
    rc = run_load(&all);
    /* checked and stopped before the report: both are results of the run */
    if (rc == 0 && tierd_pid > 0)
        all.left_held = held_after();
    all.tierd_exit = stop_tierd(false);
    if (rc == 0) {
        if (opt.json)
            print_json(&all);
        else
            print_text(&all, "");
        if (opt.bench && oracle_run())
            bench_oracle(&all);
        else if (opt.bench)
            bench_lines(&one, &all);
    }
    free(keys);
    free(sums);
    if (log_fd >= 0)
        close(log_fd);
    if (rc < 0)
        return 2;
    return bad(&all) || (opt.bench && bad(&one)) ? 1 : 0;
}
