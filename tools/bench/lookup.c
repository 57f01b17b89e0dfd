/* SPDX-License-Identifier: MIT */
/*
 * lookup.c - figures 3 and 5: lookups of 1000-key chains over 1 M blocks,
 * through tierd and in-process, against an open-addressing table and the
 * socket floor.
 */
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "bench.h"
#include "tier.h"

/* ---- figure 3: lookups of 1000-key chains over 1 M blocks --------------- */

#define CHAIN 1000

/* A plain open-addressing table over the same keys: the baseline a lookup
 * is judged against. Slots hold key index + 1 (0: empty); load 0.5. */
struct oa {
    uint32_t *slot;
    uint64_t mask;
    const kvt_key *keys;
};

static uint64_t key_word(const kvt_key *k)
{
    uint64_t h;
    memcpy(&h, k->b, 8); /* keys are uniformly random: any 8 bytes hash well */
    return h;
}

static int oa_build(struct oa *o, const kvt_key *keys, size_t n)
{
    size_t cap = 1;
    while (cap < 2 * n)
        cap <<= 1;
    o->slot = calloc(cap, sizeof(*o->slot));
    if (!o->slot)
        return -ENOMEM;
    o->mask = cap - 1;
    o->keys = keys;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = key_word(&keys[i]) & o->mask;
        while (o->slot[s])
            s = (s + 1) & o->mask;
        o->slot[s] = (uint32_t)i + 1;
    }
    return 0;
}

/* Leading keys of k[0..n) present in the table. */
static size_t oa_lookup(const struct oa *o, const kvt_key *k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t s = key_word(&k[i]) & o->mask;
        for (;;) {
            uint32_t e = o->slot[s];
            if (e == 0)
                return i;
            if (memcmp(o->keys[e - 1].b, k[i].b, KVT_KEY_BYTES) == 0)
                break;
            s = (s + 1) & o->mask;
        }
    }
    return n;
}

/* What one timed lookup call needs: the chains and where to look them up. */
struct lk {
    const kvt_key *keys;  /* all keys; chain c is keys[c*CHAIN ...] */
    const struct tier_key *tkeys;
    size_t chains;        /* full chains present */
    uint64_t seed;        /* picks the chain of each call */
    kvt_ns *ns;           /* client lookups */
    struct tier *t;       /* in-process lookups */
    struct tier_ns *tns;  /* ... in its namespace 1, of 4 KiB blocks */
    const struct oa *oa;  /* baseline lookups */
    int sock;             /* transport baseline: our end of a socketpair */
    char *msg;            /* transport baseline: request buffer */
};

static size_t pick_chain(struct lk *l)
{
    return (size_t)(bench_rng(&l->seed) % l->chains);
}

static int lk_client(void *arg)
{
    struct lk *l = arg;
    int r = kvt_lookup(l->ns, l->keys + pick_chain(l) * CHAIN, CHAIN, 0, NULL);
    return r == CHAIN ? 0 : r < 0 ? r : -ENOENT;
}

static int lk_inproc(void *arg)
{
    struct lk *l = arg;
    size_t r = tier_lookup(l->tns, l->tkeys + pick_chain(l) * CHAIN, CHAIN, NULL);
    return r == CHAIN ? 0 : -ENOENT;
}

static int lk_oa(void *arg)
{
    struct lk *l = arg;
    return oa_lookup(l->oa, l->keys + pick_chain(l) * CHAIN, CHAIN) == CHAIN ? 0 : -ENOENT;
}

/* Transport baseline: a lookup-sized request (header + 1000 keys) to an echo
 * process over SOCK_SEQPACKET, and a lookup-sized reply (1000 tier bytes). */
#define LK_REQ_BYTES (48 + CHAIN * KVT_KEY_BYTES)
#define LK_REP_BYTES (32 + CHAIN)

static int lk_sock(void *arg)
{
    struct lk *l = arg;
    char rep[LK_REP_BYTES];
    memcpy(l->msg + 48, l->keys + pick_chain(l) * CHAIN, CHAIN * KVT_KEY_BYTES);
    if (send(l->sock, l->msg, LK_REQ_BYTES, 0) != LK_REQ_BYTES)
        return -errno;
    if (recv(l->sock, rep, sizeof(rep), 0) != LK_REP_BYTES)
        return -EIO;
    return 0;
}

/* Keys per second: the median over bench_opt.rounds rounds of fn. */
static int lk_rate(bench_iter_fn fn, struct lk *l, double *keys_per_s)
{
    double t[64];
    int r;
    for (int i = 0; i < 50; i++) { /* warm caches and branch predictors */
        if ((r = fn(l)) < 0)
            return r;
    }
    for (int i = 0; i < bench_opt.rounds; i++) {
        if ((r = bench_timed_round(fn, l, &t[i])) < 0)
            return r;
    }
    *keys_per_s = CHAIN / bench_median(t, bench_opt.rounds);
    return 0;
}

/* The round trip floor of a lookup: the same bytes through a socketpair. */
static int sock_floor(struct lk *l, double *keys_per_s)
{
    pid_t pid = bench_echo_open(LK_REP_BYTES, &l->sock);
    int r;
    if (pid < 0)
        return (int)pid;
    l->msg = calloc(1, LK_REQ_BYTES);
    r = l->msg ? lk_rate(lk_sock, l, keys_per_s) : -ENOMEM;
    free(l->msg);
    l->msg = NULL;
    bench_echo_close(l->sock, pid);
    return r;
}

/* A batch answered short (r >= 0: how many it got) is an -EIO, said so. */
static int short_batch(const char *what, int r)
{
    if (r >= 0) {
        printf("# %s: %d of the batch\n", what, r);
        r = -EIO;
    }
    return r;
}

/* Figure 3a: kvt_lookup through tierd over 1 M blocks. */
static void bench_lookup_client(const kvt_key *keys, size_t nkeys, const struct oa *oa)
{
    const char *name = "lookup_client_keys_per_s";
    struct bench_tierd d;
    struct lk l = { .keys = keys, .chains = nkeys / CHAIN, .seed = 7, .oa = oa };
    void **slots = malloc(CHAIN * sizeof(*slots));
    double rate, base, floor_rate = 0;
    const char *what = "";
    int r;

    printf("# --- %s: kvt_lookup of %d-key chains, index of %zu blocks of 4 KiB\n", name,
           CHAIN, nkeys);
    fflush(stdout);
    if (!slots) {
        bench_fail(name, "malloc", -ENOMEM);
        return;
    }
    if ((r = bench_tierd_start(&d, "lookup", bench_opt.pool_lookup, true)) < 0) {
        bench_fail(name, "tierd did not start", r);
        free(slots);
        return;
    }
    what = "kvt_ns_open";
    if ((r = bench_ns_open(d.c, "tierbench/lookup", 4096, &l.ns)) < 0)
        goto out_fail;

    /* fill: reserve + commit, chain by chain, without writing the slots */
    uint64_t t0 = cmn_now_ns();
    for (size_t at = 0; at < nkeys; at += CHAIN) {
        size_t n = nkeys - at < CHAIN ? nkeys - at : CHAIN;
        what = "kvt_put_reserve (fill)";
        r = kvt_put_reserve(l.ns, NULL, keys + at, n, slots);
        if (r != (int)n)
            goto out_short;
        what = "kvt_put_commit (fill)";
        r = kvt_put_commit(l.ns, keys + at, n);
        if (r != (int)n)
            goto out_short;
    }
    printf("# fill through the client: %.0f keys/s (reserve + commit, batches of %d)\n",
           (double)nkeys / ((double)(cmn_now_ns() - t0) / 1e9), CHAIN);

    kvt_stats st;
    if (kvt_stats_get(d.c, &st) == 0)
        printf("# tierd index: %" PRIu64 " entries, %" PRIu64 " bytes (%.1f bytes/entry)\n",
               st.index_entries, st.index_bytes,
               st.index_entries ? (double)st.index_bytes / (double)st.index_entries : 0.0);

    what = "kvt_lookup";
    if ((r = lk_rate(lk_client, &l, &rate)) < 0)
        goto out_fail;
    what = "baseline";
    if ((r = lk_rate(lk_oa, &l, &base)) < 0 || (r = sock_floor(&l, &floor_rate)) < 0)
        goto out_fail;
    printf("# same-run baselines: open-addressing probe loop %.0f keys/s; "
           "seqpacket round trip of the same bytes %.0f keys/s\n", base, floor_rate);
    printf("# kvtier client lookup = %.2f x probe loop, %.2f x bare round trip\n", rate / base,
           rate / floor_rate);
    bench_report(name, rate, "%.0f", "keys/s", ">=", "2000000");
    goto out;

out_short:
    r = short_batch(what, r);
out_fail:
    bench_fail(name, what, r);
out:
    bench_tierd_stop(&d);
    free(slots);
}

/* Figures 3b and 5: the in-process store with 1 M blocks. */
static void bench_inproc(const kvt_key *keys, size_t nkeys, const struct oa *oa)
{
    const char *name = "lookup_inproc_keys_per_s", *iname = "index_bytes_per_block";
    struct tier_cfg cfg = {
        .warm_bytes = (uint64_t)(nkeys + nkeys / 4) * 4096, /* sparse; 4 KiB a block */
        .high_wm = 0.95, .low_wm = 0.85, .lock_memory = false, .huge_pages = false,
    };
    struct tier *t = NULL;
    struct tier_key *tk = malloc(nkeys * sizeof(*tk));
    uint32_t *ids = malloc(CHAIN * sizeof(*ids));
    uint64_t *offs = malloc(CHAIN * sizeof(*offs));
    struct lk l = { .keys = keys, .chains = nkeys / CHAIN, .seed = 11, .oa = oa };
    const char *what = "malloc";
    double rate, base;
    int r = -ENOMEM;

    printf("# --- %s: tier_lookup of %d-key chains, in-process store of %zu blocks\n", name,
           CHAIN, nkeys);
    fflush(stdout);
    if (!tk || !ids || !offs)
        goto out_fail;
    for (size_t i = 0; i < nkeys; i++)
        memcpy(tk[i].b, keys[i].b, TIER_KEY_BYTES);
    l.tkeys = tk;
    what = "tier_create";
    if ((r = tier_create(&cfg, &t)) < 0)
        goto out_fail;
    l.t = t;
    what = "tier_ns_open";
    if ((r = tier_ns_open(t, 1, 4096, &l.tns)) < 0)
        goto out_fail;

    uint64_t t0 = cmn_now_ns();
    for (size_t at = 0; at < nkeys; at += CHAIN) {
        size_t n = nkeys - at < CHAIN ? nkeys - at : CHAIN;
        what = "tier_reserve (fill)";
        r = tier_reserve(l.tns, 1, NULL, tk + at, n, ids, offs);
        if (r != (int)n)
            goto out_short;
        what = "tier_commit (fill)";
        r = (int)tier_commit(l.tns, 1, tk + at, n);
        if (r != (int)n)
            goto out_short;
    }
    printf("# fill in-process: %.0f keys/s (reserve + commit, batches of %d)\n",
           (double)nkeys / ((double)(cmn_now_ns() - t0) / 1e9), CHAIN);

    what = "tier_lookup";
    if ((r = lk_rate(lk_inproc, &l, &rate)) < 0)
        goto out_fail;
    what = "baseline";
    if ((r = lk_rate(lk_oa, &l, &base)) < 0)
        goto out_fail;
    printf("# same-run baseline: open-addressing probe loop %.0f keys/s "
           "(tier_lookup = %.2f x baseline)\n", base, rate / base);
    bench_report(name, rate, "%.0f", "keys/s", ">=", "10000000");

    struct tier_stats ts;
    tier_stats_get(t, &ts);
    printf("# index: %" PRIu64 " entries, %" PRIu64 " bytes; baseline table %zu bytes/key "
           "(slots only) + 32 key bytes\n", ts.index_entries, ts.index_bytes,
           (size_t)((oa->mask + 1) * sizeof(uint32_t) / nkeys));
    bench_report(iname, tier_index_bytes_per_block(t), "%.1f", "bytes", "<=", "128");
    goto out;

out_short:
    r = short_batch(what, r);
out_fail:
    bench_fail(name, what, r);
    bench_fail(iname, what, r);
out:
    tier_destroy(t);
    free(tk);
    free(ids);
    free(offs);
}

void bench_lookups(unsigned groups)
{
    size_t nkeys = bench_opt.lookup_blocks;
    kvt_key *keys = malloc(nkeys * sizeof(*keys));
    struct oa oa = { 0 };
    uint64_t seed = 0x6c6f6f6b7570ull;

    if (keys)
        bench_rand_keys(&seed, keys, nkeys);
    if (!keys || oa_build(&oa, keys, nkeys) < 0) {
        if (groups & BENCH_GRP_LOOKUP)
            bench_fail("lookup_client_keys_per_s", "malloc", -ENOMEM);
        if (groups & BENCH_GRP_INPROC) {
            bench_fail("lookup_inproc_keys_per_s", "malloc", -ENOMEM);
            bench_fail("index_bytes_per_block", "malloc", -ENOMEM);
        }
        free(keys);
        return;
    }
    /* one big store at a time: the daemon's is gone before ours is made */
    if (groups & BENCH_GRP_LOOKUP)
        bench_lookup_client(keys, nkeys, &oa);
    if (groups & BENCH_GRP_INPROC)
        bench_inproc(keys, nkeys, &oa);
    free(oa.slot);
    free(keys);
}
