/* SPDX-License-Identifier: MIT */
/*
 * tier_movers.c - warm and cold together in the store: blocks demoted when
 * warm fills, promoted back on get with verified bytes, served from cold
 * after a restart, flipped bytes on disk never served, and random sequences
 * with tier_check() after every step.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_hot.h"

#define BLK (256u << 10)
#define N 100

struct rig {
    char dir[64];
    struct tier_hot *hot;  /* NULL unless the test wants a hot tier */
    struct tier_cold *cold;
    struct tier *t;
    int ready, failed;     /* promotions reported to the waiter */
    char why[256];
};

static void on_ready(void *ctx, void *waiter, uint32_t id, int rc)
{
    struct rig *r = ctx;

    (void)id;
    cr_assert_eq(waiter, r, "ready for an unknown waiter");
    if (rc == 0)
        r->ready++;
    else
        r->failed++;
}

static uint64_t cold_bytes = 64u << 20; /* a test may shrink the disk */
static bool with_hot;                   /* a test may add an emulated hot tier */

static void rig_open(struct rig *r, bool fresh, bool write_through)
{
    struct tier_cold_cfg cc = { .dir = r->dir, .bytes = cold_bytes, .qd = 32, .batch = 8 };
    struct tier_cfg tc = { .warm_bytes = 8u << 20, .high_wm = 0.75, .low_wm = 0.5,
                           .ready = on_ready, .ready_ctx = r, .write_through = write_through };
    int rc;

    if (fresh) {
        t_tmpdir("kvt-movers", r->dir, sizeof(r->dir));
    }
    rc = tier_cold_open(&cc, &r->cold);
    cr_assert_eq(rc, 0, "cold open: %s", strerror(-rc));
    tc.cold = r->cold;
    r->hot = NULL;
    if (with_hot) {
        struct tier_hot_cfg hc = { .kind = TIER_HOT_EMU, .bytes = 8u << 20 };

        cr_assert_eq(tier_hot_open(&hc, &r->hot), 0);
        tc.hot = r->hot;
    }
    cr_assert_eq(tier_create(&tc, &r->t), 0);
}

static void rig_close(struct rig *r, bool flush)
{
    if (flush)
        cr_assert_eq(tier_flush_to_cold(r->t), 0);
    tier_cold_close(r->cold); /* every callback lands while the store lives */
    tier_hot_close(r->hot);
    tier_destroy(r->t);
}

static void rig_rm(struct rig *r)
{
    t_rmtree(r->dir);
}

static void check(struct rig *r)
{
    if (tier_check(r->t, r->why, sizeof(r->why)))
        cr_assert_fail("store inconsistent: %s", r->why);
}

/* Put N blocks as chains of 10, letting the mover run between batches. */
static void put_all(struct rig *r, struct tier_key *k)
{
    t_keys((kvt_key *)k, N, 31);
    for (int c = 0; c < N; c += 10) {
        uint32_t ids[10];
        uint64_t offs[10];

        cr_assert_eq(tier_reserve(t_tns(r->t, 1, BLK), 1, NULL, k + c, 10, ids, offs), 10);
        for (int i = 0; i < 10; i++)
            t_fill((uint8_t *)tier_pool_base(r->t) + offs[i], BLK, (uint64_t)(c + i));
        cr_assert_eq(tier_commit(t_tns(r->t, 1, BLK), 1, k + c, 10), 10);
        /* what tierd's loop does between requests: run the mover, and
         * deliver completions; a burst larger than warm's headroom must wait
         * for the disk, as an engine would see -ENOSPC otherwise */
        do {
            tier_maintain(r->t);
            tier_cold_flush(r->cold);
            tier_poll(r->t, tier_cold_busy(r->cold) > 0);
            check(r);
        } while (tier_cold_busy(r->cold));
    }
    /* let every demotion land */
    while (tier_cold_busy(r->cold)) {
        tier_cold_flush(r->cold);
        tier_poll(r->t, true);
        tier_maintain(r->t);
    }
    check(r);
}

/* Get the chain of 10 at c, waiting for promotions; verify every byte.
 * Returns the blocks verified (the leading run). */
/* The mover's turns that tierd's loop runs between requests, until the
 * disk is idle: room in warm is made by writing blocks, never by dropping. */
static void mover_turns(struct rig *r)
{
    do {
        tier_maintain(r->t);
        tier_cold_flush(r->cold);
        tier_poll(r->t, tier_cold_busy(r->cold) > 0);
    } while (tier_cold_busy(r->cold));
}

static int get_chain(struct rig *r, const struct tier_key *k, int c)
{
    uint32_t ids[10], pending;
    uint64_t offs[10];
    int hits, want;

    r->ready = r->failed = 0;
    hits = tier_get(&(struct tier_get_args){ .ns = t_tns(r->t, 1, BLK), .keys = k + c,
        .n = 10, .ids = ids, .offs = offs, .waiter = r, .pending = &pending });
    cr_assert_geq(hits, 0);
    while (r->ready + r->failed < (int)pending)
        cr_assert_geq(tier_poll(r->t, true), 0);
    check(r);
    want = r->failed ? 0 : hits; /* a failed promotion: trust nothing here */
    for (int i = 0; i < want; i++) {
        long bad = t_check((uint8_t *)tier_pool_base(r->t) + offs[i], BLK, (uint64_t)(c + i));

        cr_assert_eq(bad, -1, "block %d: wrong byte at %ld", c + i, bad);
    }
    tier_release(r->t, ids, (size_t)hits, false);
    check(r);
    return want;
}

Test(tier_movers, blocks_beyond_warm_are_demoted_and_come_back)
{
    struct rig r;
    struct tier_key k[N];
    struct tier_stats st;
    uint8_t tiers[N];

    rig_open(&r, true, false);
    put_all(&r, k);
    tier_stats_get(r.t, &st);
    cr_assert_gt(st.demotions, 0, "nothing was demoted");
    cr_assert_eq(st.dropped, 0, "a block was dropped although cold had room");
    cr_assert_leq(st.bytes_used[TIER_L_WARM], (uint64_t)(0.75 * (8u << 20)));
    cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k, N, tiers), N, "every block is still a hit");
    cr_assert_eq(tiers[0], TIER_L_COLD, "the oldest chain went to cold");
    cr_assert_eq(tiers[N - 1], TIER_L_WARM, "the newest stayed in warm");
    for (int c = 0; c < N; c += 10)
        cr_assert_eq(get_chain(&r, k, c), 10, "chain %d", c);
    tier_stats_get(r.t, &st);
    cr_assert_gt(st.promotions, 0);
    cr_assert_eq(st.checksum_errors, 0);
    rig_close(&r, false);
    rig_rm(&r);
}

Test(tier_movers, restart_serves_everything_from_cold)
{
    struct rig r;
    struct tier_key k[N];
    uint8_t tiers[N];

    rig_open(&r, true, false);
    put_all(&r, k);
    rig_close(&r, true); /* clean stop: warm is flushed to cold */
    rig_open(&r, false, false);
    cr_assert_eq(tier_load_cold(r.t), N);
    check(&r);
    cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k, N, tiers), N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(tiers[i], TIER_L_COLD);
    /* a prefetch starts the reads; the get then joins them */
    cr_assert_eq(tier_prefetch(t_tns(r.t, 1, BLK), k, 10, 0), 10);
    for (int c = 0; c < N; c += 10)
        cr_assert_eq(get_chain(&r, k, c), 10, "chain %d after restart", c);
    rig_close(&r, false);
    rig_rm(&r);
}

/* A get whose keys are a block on disk, then one on disk at another size
 * (put while namespace 1 was open at that size, before a restart: the only
 * way a namespace's blocks can differ in size): the disk's read has started
 * for the caller when the second key is found wrong, and a wait cannot be
 * taken back, so the answer is the leading run (its read lands, its bytes
 * right), and only a get that starts no wait is -EINVAL. It was -EINVAL
 * with the read still going: a ready callback for a get answered as
 * failed, to a lease already released. */
Test(tier_movers, a_wrong_size_after_a_disk_read_ends_the_run_before_it)
{
    struct rig r;
    struct tier_key k[N], small;
    uint32_t ids[2], pending;
    uint64_t offs[2];
    struct tier_key both[2];

    rig_open(&r, true, false);
    put_all(&r, k);
    rig_close(&r, true);
    rig_open(&r, false, false);
    cr_assert_eq(tier_load_cold(r.t), N);
    t_keys((kvt_key *)&small, 1, 77);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, 64u << 10), 1, NULL, &small, 1, ids, offs), 1);
    cr_assert_eq(tier_commit(t_tns(r.t, 1, 64u << 10), 1, &small, 1), 1);
    rig_close(&r, true);
    rig_open(&r, false, false);
    cr_assert_eq(tier_load_cold(r.t), N + 1);
    both[0] = k[0];
    both[1] = small;
    r.ready = r.failed = 0;
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = both,
        .n = 2, .ids = ids, .offs = offs, .waiter = &r, .pending = &pending }), 1,
                 "the run before the block of another size");
    cr_assert_eq(pending, 1);
    while (r.ready + r.failed < 1)
        cr_assert_geq(tier_poll(r.t, true), 0);
    cr_assert_eq(r.failed, 0);
    cr_assert_eq(t_check((uint8_t *)tier_pool_base(r.t) + offs[0], BLK, 0), -1);
    check(&r);
    tier_release(r.t, ids, 1, false);
    /* now warm, nothing to wait for: the wrong size is an error */
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = both,
        .n = 2, .ids = ids, .offs = offs, .waiter = &r, .pending = &pending }), -EINVAL);
    check(&r);
    rig_close(&r, false);
    rig_rm(&r);
}

/* A get that waited got its block: none failed, the lease id at warm
 * offset off holds len bytes of t_fill's pattern seed; the lease goes back
 * and the store checks out. */
static void got_right(struct rig *r, uint32_t id, uint64_t off, uint64_t len, uint64_t seed)
{
    cr_assert_eq(r->failed, 0);
    cr_assert_eq(t_check((uint8_t *)tier_pool_base(r->t) + off, len, seed), -1);
    tier_release(r->t, &id, 1, false);
    check(r);
}

/* Drive the disk until the waiter has heard of `want` blocks. */
static void wait_ready(struct rig *r, int want)
{
    while (r->ready + r->failed < want)
        cr_assert_geq(tier_poll(r->t, true), 0);
}

/* A block is never handed out as another size. On disk from a run that
 * opened its namespace at another size: -EINVAL before any wait (its read
 * would fill a slot of the asked size with fewer bytes, and its entry take
 * that class). In the same run a namespace has one size, so neither a read
 * in flight nor a block in hot (which a warm reader would have copied
 * down) can be asked for as another: the open is refused (-EEXIST). Each
 * block is then got at its own size, its bytes right. */
Test(tier_movers, a_block_is_never_got_as_another_size_from_disk_or_hot)
{
    const uint32_t small = 64u << 10;
    struct rig r;
    struct tier_key k, h;
    struct tier_ns *other;
    uint32_t id, id2, pending;
    uint64_t off, off2;

    rig_open(&r, true, false);
    t_keys((kvt_key *)&k, 1, 5);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, small), 1, NULL, &k, 1, &id, &off), 1);
    t_fill((uint8_t *)tier_pool_base(r.t) + off, small, 9);
    cr_assert_eq(tier_commit(t_tns(r.t, 1, small), 1, &k, 1), 1);
    rig_close(&r, true);
    rig_open(&r, false, false);
    cr_assert_eq(tier_load_cold(r.t), 1);
    r.ready = r.failed = 0;
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = &k, .n = 1,
        .ids = &id2, .offs = &off2, .waiter = &r, .pending = &pending }), -EINVAL,
                 "a block on disk got as another size");
    cr_assert_eq(pending, 0);
    check(&r);
    rig_close(&r, false);
    rig_open(&r, false, false);
    cr_assert_eq(tier_load_cold(r.t), 1);
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, small), .keys = &k,
        .n = 1, .ids = &id, .offs = &off, .waiter = &r, .pending = &pending }), 1);
    cr_assert_eq(pending, 1);
    /* its read in flight: its namespace cannot be had at another size */
    cr_assert_eq(tier_ns_open(r.t, 1, BLK, &other), -EEXIST,
                 "a read in flight could be joined at another size");
    wait_ready(&r, 1);
    got_right(&r, id, off, small, 9);
    rig_close(&r, false);
    rig_rm(&r);

    with_hot = true;
    rig_open(&r, true, false);
    t_keys((kvt_key *)&h, 1, 6);
    cr_assert_eq(tier_reserve_hot(t_tns(r.t, 1, small), 1, NULL, &h, 1, &id, &off), 1);
    t_fill((uint8_t *)tier_hot_emu_base(r.hot) + off, small, 11);
    cr_assert_eq(tier_commit(t_tns(r.t, 1, small), 1, &h, 1), 1);
    r.ready = r.failed = 0;
    cr_assert_eq(tier_ns_open(r.t, 1, BLK, &other), -EEXIST,
                 "a hot block could be copied down as another size");
    check(&r);
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, small), .keys = &h,
        .n = 1, .ids = &id, .offs = &off, .waiter = &r, .pending = &pending }), 1);
    wait_ready(&r, (int)pending);
    got_right(&r, id, off, small, 11);
    rig_close(&r, false);
    rig_rm(&r);
    with_hot = false;
}

Test(tier_movers, purge_removes_a_namespace_from_every_tier_and_the_disk)
{
    struct rig r;
    struct tier_key k[N], other[10];
    struct tier_stats st;
    uint32_t ids[10];
    uint64_t offs[10];
    struct tier_cold_stats cs;
    int rc;

    rig_open(&r, true, false);
    put_all(&r, k); /* namespace 1: on disk and in warm */
    t_keys((kvt_key *)other, 10, 77);
    cr_assert_eq(tier_reserve(t_tns(r.t, 2, BLK), 1, NULL, other, 10, ids, offs), 10);
    for (int i = 0; i < 10; i++)
        t_fill((uint8_t *)tier_pool_base(r.t) + offs[i], BLK, 500 + (uint64_t)i);
    cr_assert_eq(tier_commit(t_tns(r.t, 2, BLK), 1, other, 10), 10);
    /* a lease of namespace 1 holds the purge off, all or nothing */
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = k + 90,
        .n = 1, .ids = ids, .offs = offs }), 1);
    cr_assert_eq(tier_purge_ns(t_tns(r.t, 1, BLK)), -EBUSY);
    cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k, N, NULL), N,
                 "a refused purge removed something");
    tier_release(r.t, ids, 1, false);
    rc = tier_purge_ns(t_tns(r.t, 1, BLK));
    cr_assert_eq(rc, N, "purged %d", rc);
    check(&r);
    cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k, 1, NULL), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k + i, 1, NULL), 0, "key %d survived", i);
    tier_stats_get(r.t, &st);
    cr_assert_eq(st.blocks[TIER_L_COLD], 0);
    cr_assert_eq(st.blocks[TIER_L_WARM], 10, "only namespace 2 stays");
    tier_cold_stats_get(r.cold, &cs);
    cr_assert_eq(cs.blocks, 0, "records left on disk");
    cr_assert_eq(cs.bytes_used, 0, "disk space not given back");
    /* after a restart, namespace 1 is gone from disk; 2 comes back */
    rig_close(&r, true);
    rig_open(&r, false, false);
    cr_assert_eq(tier_load_cold(r.t), 10);
    cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k, N, NULL), 0);
    cr_assert_eq(tier_lookup(t_tns(r.t, 2, BLK), other, 10, NULL), 10);
    rig_close(&r, false);
    rig_rm(&r);
}

Test(tier_movers, a_flush_makes_warm_durable_without_evicting_it)
{
    struct rig r;
    struct tier_key k[20];
    struct tier_stats st;
    uint32_t ids[20];
    uint64_t offs[20];
    uint8_t tiers[20];
    int turns = 0;

    rig_open(&r, true, false);
    t_keys((kvt_key *)k, 20, 88);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, BLK), 1, NULL, k, 20, ids, offs), 20);
    cr_assert_eq(tier_commit(t_tns(r.t, 1, BLK), 1, k, 20), 20);
    tier_maintain(r.t);
    tier_stats_get(r.t, &st);
    cr_assert_eq(st.demotions, 0, "below the high mark nothing moves by itself");
    tier_flush_begin(r.t);
    cr_assert(tier_flush_busy(r.t));
    while (tier_flush_busy(r.t)) {
        tier_maintain(r.t);
        tier_cold_flush(r.cold);
        tier_poll(r.t, tier_cold_busy(r.cold) > 0);
        check(&r);
        cr_assert_lt(++turns, 10000, "the flush never ends");
    }
    tier_stats_get(r.t, &st);
    cr_assert_eq(st.demotions, 20);
    cr_assert_eq(st.blocks[TIER_L_COLD], 20);
    cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k, 20, tiers), 20);
    for (int i = 0; i < 20; i++)
        cr_assert_eq(tiers[i], TIER_L_WARM, "block %d left warm", i);
    /* durable: a crash now (no flush at close) loses nothing */
    rig_close(&r, false);
    rig_open(&r, false, false);
    cr_assert_eq(tier_load_cold(r.t), 20);
    rig_close(&r, false);
    rig_rm(&r);
}

Test(tier_movers, flipped_bytes_on_disk_are_misses_never_served)
{
    struct rig r;
    struct tier_key k[N];
    struct tier_stats st;
    char path[128];
    int fd;

    rig_open(&r, true, true); /* write-through: every block on disk */
    put_all(&r, k);
    rig_close(&r, true);
    snprintf(path, sizeof(path), "%s/cold.data", r.dir);
    fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    for (off_t at = 777; at < (off_t)N * BLK; at += BLK) {
        uint8_t b;

        cr_assert_eq(pread(fd, &b, 1, at), 1);
        b ^= 1;
        cr_assert_eq(pwrite(fd, &b, 1, at), 1);
    }
    close(fd);
    rig_open(&r, false, false);
    cr_assert_eq(tier_load_cold(r.t), N);
    for (int c = 0; c < N; c += 10)
        cr_assert_eq(get_chain(&r, k, c), 0, "chain %d: corrupt blocks must not be served", c);
    tier_stats_get(r.t, &st);
    cr_assert_geq(st.checksum_errors, N / 10, "checksum errors: %llu",
                  (unsigned long long)st.checksum_errors);
    cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k, 1, NULL), 0,
                 "a corrupt block is no longer a hit");
    rig_close(&r, false);
    rig_rm(&r);
}

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* The random runs' step: a run of n (1..8) of the 64 keys from the
 * returned index, cut at the end. */
static size_t pick_run(uint64_t *s, size_t *n)
{
    size_t at = rnd(s) % 64;

    *n = 1 + rnd(s) % 8;
    if (at + *n > 64)
        *n = 64 - at;
    return at;
}

/* The leases a random run holds: up to 32 gets of up to 8 blocks. */
struct leases {
    uint32_t ids[32][8];
    int n[32];   /* blocks of each */
    int count;
};

/* A full table drops a random lease (released, the last moved into its
 * place); else the slot for the next one. */
static uint32_t *lease_slot(struct leases *l, struct tier *t, uint64_t *s)
{
    int j;

    if (l->count < 32)
        return l->ids[l->count];
    j = (int)(rnd(s) % 32);
    tier_release(t, l->ids[j], (size_t)l->n[j], false);
    memcpy(l->ids[j], l->ids[--l->count], sizeof(l->ids[j]));
    l->n[j] = l->n[l->count];
    return NULL;
}

static void leases_release(struct leases *l, struct tier *t)
{
    while (l->count > 0) {
        l->count--;
        tier_release(t, l->ids[l->count], (size_t)l->n[l->count], false);
    }
}

/* A random run's fresh rig (write-through or not), its 64 keys of seed
 * and an empty lease table. */
static void run_open(struct rig *r, bool write_through, struct tier_key *k, struct leases *l,
                     uint64_t seed)
{
    rig_open(r, true, write_through);
    t_keys((kvt_key *)k, 64, seed);
    l->count = 0;
}

/* tier_check after each step of a seed's run. */
static void step_check(struct rig *r, uint64_t seed, int step)
{
    if (tier_check(r->t, r->why, sizeof(r->why)))
        cr_assert_fail("seed %llu step %d: %s", (unsigned long long)seed, step, r->why);
}

Test(tier_movers, random_operations_with_cold_keep_every_invariant)
{
    uint64_t cold_evictions = 0;

    for (uint64_t seed = 1; seed <= 4; seed++) {
        struct rig r;
        struct tier_key k[64];
        static struct leases ls;
        uint64_t s = seed * 7919;

        /* seeds 3 and 4 on a disk of 12 blocks: cold evictions too */
        cold_bytes = seed > 2 ? 12 * BLK : 64u << 20;
        run_open(&r, seed % 2 == 0, k, &ls, seed);
        for (int step = 0; step < 3000; step++) {
            size_t n, at = pick_run(&s, &n);
            uint32_t ids[8], pending, *lease;
            uint64_t offs[8];

            switch (rnd(&s) % 6) {
            case 0: case 1: {
                int rc = tier_reserve(t_tns(r.t, 1, BLK), 1, at ? &k[at - 1] : NULL, k + at, n, ids,
                                      offs);

                if (rc > 0)
                    tier_commit(t_tns(r.t, 1, BLK), 1, k + at, n);
                break;
            }
            case 2:
                if ((lease = lease_slot(&ls, r.t, &s))) {
                    int h = tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK),
                        .keys = k + at, .n = n, .ids = lease, .offs = offs, .waiter = &r,
                        .pending = &pending });

                    if (h > 0)
                        ls.n[ls.count++] = h;
                }
                break;
            case 3:
                tier_maintain(r.t);
                break;
            case 4: /* deliver completions, sometimes waiting for one */
                tier_cold_flush(r.cold);
                tier_poll(r.t, rnd(&s) % 2 && tier_cold_busy(r.cold));
                break;
            case 5:
                if (rnd(&s) % 4 == 0)
                    tier_remove(t_tns(r.t, 1, BLK), k + at, n);
                else
                    tier_prefetch(t_tns(r.t, 1, BLK), k + at, n, 0);
                break;
            }
            step_check(&r, seed, step);
        }
        leases_release(&ls, r.t);
        {
            struct tier_stats st;

            /* let what is in flight land, then: the sequence must have
             * reached the movers */
            while (tier_cold_busy(r.cold)) {
                tier_cold_flush(r.cold);
                tier_poll(r.t, true);
            }
            tier_stats_get(r.t, &st);
            cr_assert_gt(st.demotions, 0, "seed %llu: no demotion", (unsigned long long)seed);
            /* (on the 12-block disk, whether a disk-only block is asked for
             * before it is evicted depends on timing: seeds 1-2 check this) */
            if (seed <= 2)
                cr_assert_gt(st.promotions, 0, "seed %llu: no promotion",
                             (unsigned long long)seed);
            /* (whether the small disk ever holds a leaf it may evict
             * depends on the sequence: one 64-block chain keeps most of its
             * disk blocks parents; seeds 3 and 4 together must) */
            cold_evictions += seed > 2 ? st.evictions[TIER_L_COLD] : 0;
        }
        tier_forget_waiter(r.t, &r);
        rig_close(&r, false);
        rig_rm(&r);
    }
    cold_bytes = 64u << 20;
    cr_assert_gt(cold_evictions, 0, "seeds 3-4: the small disk never evicted");
}

Test(tier_movers, a_full_disk_evicts_its_oldest_leaves_first)
{
    struct rig r;
    struct tier_key k[N];
    struct tier_stats st;
    uint8_t tiers[N];

    cold_bytes = 24 * BLK; /* the disk holds 24 of the 100 blocks */
    rig_open(&r, true, false);
    put_all(&r, k);
    tier_stats_get(r.t, &st);
    cr_assert_gt(st.evictions[TIER_L_COLD], 0, "the disk never evicted");
    cr_assert_eq(st.dropped, 0, "blocks were dropped although disk leaves could go");
    cr_assert_leq(st.bytes_used[TIER_L_COLD], 24ull * BLK);
    /* the newest chains are whole; the oldest went first */
    cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k + 90, 10, tiers), 10);
    cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k, 10, NULL), 0,
                 "the oldest chain should be gone");
    for (int c = 0; c < N; c += 10) {
        uint8_t t10[10];
        size_t hits = tier_lookup(t_tns(r.t, 1, BLK), k + c, 10, t10);

        /* whatever is left of a chain is a prefix: leaf-first on disk too */
        for (size_t i = hits; i < 10; i++)
            cr_assert_eq(t10[i], TIER_L_NONE, "chain %d: block %zu left after a hole", c, i);
        if (hits)
            cr_assert_eq(get_chain(&r, k, c), (int)hits);
    }
    rig_close(&r, false);
    rig_rm(&r);
    cold_bytes = 64u << 20;
}

/* Bug found in review: a durable commit of a key deduplicated against
 * another client's reservation was acknowledged although nothing of it was
 * on disk (or anywhere, once that client aborted); once the other client's
 * reservation was gone it returned -EAGAIN for ever. Now it waits for the
 * other writer: its commit starts the write, its abort fails the wait. */
static void dedup_durable(bool other_commits)
{
    struct rig r;
    struct tier_key k;
    uint32_t id, ids[1], pending;
    uint64_t off;

    rig_open(&r, true, false);
    t_keys((kvt_key *)&k, 1, 99);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, BLK), 1, NULL, &k, 1, &id, &off), 1);
    t_fill((uint8_t *)tier_pool_base(r.t) + off, BLK, 99);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, BLK), 2, NULL, &k, 1, &id, &off), 0, "deduplicated");
    r.ready = r.failed = 0;
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &k, 1, &r, ids, &pending), 0);
    cr_assert_eq(pending, 1, "the other writer's key is waited for");
    check(&r);
    if (other_commits)
        cr_assert_eq(tier_commit(t_tns(r.t, 1, BLK), 1, &k, 1), 1);
    else
        cr_assert_eq(tier_abort(t_tns(r.t, 1, BLK), 1, &k, 1), 1);
    while (r.ready + r.failed < 1) {
        tier_cold_flush(r.cold);
        cr_assert_geq(tier_poll(r.t, true), 0);
    }
    check(&r);
    if (other_commits) {
        struct tier_story s;

        cr_assert_eq(r.ready, 1, "the wait ended with an error");
        tier_story_get(t_tns(r.t, 1, BLK), &k, &s);
        cr_assert(s.present && s.on_disk, "acknowledged durable, not on disk");
    } else {
        cr_assert_eq(r.failed, 1, "an aborted key was acknowledged durable");
        /* and asking again tells the truth: nothing is stored, put it again */
        cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &k, 1, &r, ids, &pending),
                     -ENODATA);
        cr_assert_eq(pending, 0);
    }
    rig_close(&r, false);
    rig_rm(&r);
}

Test(tier_movers, durable_commit_waits_for_the_other_writer_and_is_durable)
{
    dedup_durable(true);
}

Test(tier_movers, durable_commit_of_a_key_whose_writer_aborted_fails_with_enodata)
{
    dedup_durable(false);
}

/* Busy: copies or disk work in flight. */
static bool busy(struct rig *r)
{
    return tier_cold_busy(r->cold) || (r->hot && tier_hot_inflight(r->hot));
}

Test(tier_movers, hot_blocks_go_down_to_warm_and_cold_and_come_back)
{
    struct rig r;
    struct tier_key k[N];
    struct tier_stats st;
    uint8_t tiers[N];
    int seen[TIER_L_N] = { 0 };

    with_hot = true;
    rig_open(&r, true, false);
    t_keys((kvt_key *)k, N, 31);
    /* an engine offloads device to device: chains of 10 straight into hot */
    for (int c = 0; c < N; c += 10) {
        uint32_t ids[10];
        uint64_t offs[10];

        int rc = tier_reserve_hot(t_tns(r.t, 1, BLK), 1, NULL, k + c, 10, ids, offs);

        if (rc != 10) {
            tier_stats_get(r.t, &st);
            cr_assert_fail("chain %d: reserve_hot %d; hot %llu/%llu blocks %llu, warm %llu, "
                           "cold %llu, dropped %llu", c, rc,
                           (unsigned long long)st.bytes_used[TIER_L_HOT] / BLK,
                           (unsigned long long)st.bytes_capacity[TIER_L_HOT] / BLK,
                           (unsigned long long)st.blocks[TIER_L_HOT],
                           (unsigned long long)st.bytes_used[TIER_L_WARM] / BLK,
                           (unsigned long long)st.blocks[TIER_L_COLD],
                           (unsigned long long)st.dropped);
        }
        for (int i = 0; i < 10; i++)
            t_fill((uint8_t *)tier_hot_emu_base(r.hot) + offs[i], BLK, (uint64_t)(c + i));
        cr_assert_eq(tier_commit(t_tns(r.t, 1, BLK), 1, k + c, 10), 10);
        /* the mover's turns, as tierd's loop runs them (a turn after every
         * batch of completions), until a turn with nothing in flight moves
         * nothing */
        for (;;) {
            size_t moved = tier_maintain(r.t);

            tier_cold_flush(r.cold);
            if (!moved && !busy(&r))
                break;
            tier_poll(r.t, busy(&r));
            check(&r);
        }
    }
    tier_stats_get(r.t, &st);
    cr_assert_gt(st.evictions[TIER_L_HOT], 0, "nothing left hot");
    cr_assert_gt(st.demotions, 0, "nothing reached the disk");
    cr_assert_eq(st.dropped, 0);
    cr_assert_leq(st.bytes_used[TIER_L_HOT], (uint64_t)(0.75 * (8u << 20)));
    cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k, N, tiers), N, "every block is still a hit");
    for (int i = 0; i < N; i++)
        seen[tiers[i]]++;
    cr_assert_gt(seen[TIER_L_HOT], 0, "newest blocks stay hot");
    cr_assert_gt(seen[TIER_L_COLD], 0, "oldest blocks are on disk");
    /* a get reads from warm: hot blocks are copied down, cold ones read up
     * (into room the mover makes by writing blocks, not by dropping them) */
    for (int c = 0; c < N; c += 10) {
        mover_turns(&r);
        cr_assert_eq(get_chain(&r, k, c), 10, "chain %d", c);
    }
    tier_stats_get(r.t, &st);
    cr_assert_eq(st.dropped, 0, "blocks were dropped while the disk had room");
    rig_close(&r, false);
    rig_rm(&r);
    with_hot = false;
}

/* Every byte a getter is handed is the block's own: in hot (leased in
 * place), or in warm once it is there. */
static void check_leased(struct rig *r, const struct tier_key *k, size_t at, int h,
                         const uint32_t *ids, const uint64_t *offs, const uint8_t *tiers)
{
    for (int i = 0; i < h; i++) {
        const uint8_t *p;
        long bad;

        if (tiers[i] == TIER_L_HOT)
            p = (const uint8_t *)tier_hot_emu_base(r->hot) + offs[i];
        else if (tier_ready(r->t, ids[i]))
            p = (const uint8_t *)tier_pool_base(r->t) + offs[i];
        else
            continue; /* still on its way from disk or from hot */
        bad = t_check(p, BLK, (uint64_t)(at + (size_t)i));
        cr_assert_eq(bad, -1, "key %zu (%s): wrong byte at %ld", at + (size_t)i,
                     tiers[i] == TIER_L_HOT ? "hot" : "warm", bad);
    }
    (void)k;
}

Test(tier_movers, random_operations_with_hot_keep_every_invariant)
{
    uint64_t hot_promotions = 0, hot_hits = 0;

    with_hot = true;
    for (uint64_t seed = 11; seed <= 13; seed++) {
        struct rig r;
        struct tier_key k[64];
        static struct leases ls;
        uint64_t s = seed * 104729;

        cold_bytes = seed == 13 ? 12 * BLK : 64u << 20;
        run_open(&r, false, k, &ls, seed);
        for (int step = 0; step < 3000; step++) {
            size_t n, at = pick_run(&s, &n);
            uint32_t ids[8], pending, *lease;
            uint64_t offs[8];
            bool into_hot;
            int rc;

            switch (rnd(&s) % 7) {
            case 0: case 1: /* into hot or into warm */
                into_hot = rnd(&s) % 2;
                if (into_hot)
                    rc = tier_reserve_hot(t_tns(r.t, 1, BLK), 1, at ? &k[at - 1] : NULL, k + at, n,
                                          ids, offs);
                else
                    rc = tier_reserve(t_tns(r.t, 1, BLK), 1, at ? &k[at - 1] : NULL, k + at, n, ids,
                                      offs);
                for (int i = 0; rc > 0 && i < (int)n; i++) {
                    uint8_t *base = into_hot ? (uint8_t *)tier_hot_emu_base(r.hot)
                                              : (uint8_t *)tier_pool_base(r.t);

                    if (ids[i] != TIER_NONE)
                        t_fill(base + offs[i], BLK, (uint64_t)(at + (size_t)i));
                }
                if (rc > 0)
                    tier_commit(t_tns(r.t, 1, BLK), 1, k + at, n);
                else if (rc == 0)
                    tier_abort(t_tns(r.t, 1, BLK), 1, k + at, n);
                break;
            case 2:
                if ((lease = lease_slot(&ls, r.t, &s))) {
                    /* readers of hot in place, or of warm; some ask for hot */
                    unsigned fl = (unsigned)(rnd(&s) % 4);
                    uint8_t tiers[8];
                    int h = tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK),
                        .keys = k + at, .n = n, .flags = fl, .ids = lease, .offs = offs,
                        .tiers = tiers, .waiter = &r, .pending = &pending });

                    if (h > 0) {
                        check_leased(&r, k, at, h, lease, offs, tiers);
                        ls.n[ls.count++] = h;
                    }
                }
                break;
            case 3:
                tier_maintain(r.t);
                break;
            case 4:
                tier_cold_flush(r.cold);
                tier_poll(r.t, rnd(&s) % 2 && busy(&r));
                break;
            case 5:
                tier_remove(t_tns(r.t, 1, BLK), k + at, n);
                break;
            case 6:
                tier_prefetch(t_tns(r.t, 1, BLK), k + at, n, rnd(&s) % 2 ? TIER_GET_PROMOTE : 0);
                break;
            }
            step_check(&r, seed, step);
        }
        {
            struct tier_stats st;

            tier_stats_get(r.t, &st);
            cr_assert_gt(st.evictions[TIER_L_HOT], 0, "seed %llu: nothing left hot",
                         (unsigned long long)seed);
            hot_promotions += st.hot_promotions;
            hot_hits += st.hits[TIER_L_HOT];
        }
        leases_release(&ls, r.t);
        tier_forget_waiter(r.t, &r);
        rig_close(&r, false);
        rig_rm(&r);
    }
    cold_bytes = 64u << 20;
    with_hot = false;
    cr_assert_gt(hot_promotions, 0, "no block was copied up into hot");
    cr_assert_gt(hot_hits, 0, "no block was read from hot");
}
