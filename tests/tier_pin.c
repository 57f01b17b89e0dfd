/* SPDX-License-Identifier: MIT */
/*
 * tier_pin.c - the store's side of a pinning lookup (tier_pin): the blocks
 * a lookup found stay, in warm and on disk, under a flood of puts that
 * evicts everything else, until the pin is released; then they go like any
 * other. Each test also shows that a chain not pinned, placed the same way,
 * is evicted by the same flood, so the pin is what kept the other.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_nvme.h"

#define BLK (64u << 10)
#define RUN 8

struct store {
    char dir[64];
    struct tier_cold *cold; /* NULL: warm only */
    struct tier *t;
    uint64_t next;          /* seed of the next filler block */
};

static void store_open(struct store *s, uint64_t cold_bytes)
{
    struct tier_cfg tc = { .warm_bytes = 4u << 20, .high_wm = 0.9, .low_wm = 0.7 };

    memset(s, 0, sizeof(*s));
    s->next = 1000;
    if (cold_bytes) {
        struct tier_cold_cfg cc = { .bytes = cold_bytes, .qd = 8, .batch = 4, .sim = true };

        t_tmpdir("kvt-pin", s->dir, sizeof(s->dir));
        cc.dir = s->dir;
        cr_assert_eq(tier_cold_open(&cc, &s->cold), 0);
        tc.cold = s->cold;
    }
    cr_assert_eq(tier_create(&tc, &s->t), 0);
}

static void settle(struct store *s)
{
    char why[256];

    tier_maintain(s->t); /* the movers: write to disk, make room */
    if (s->cold)
        t_store_settle(s->t, s->cold, NULL);
    cr_assert_eq(tier_check(s->t, why, sizeof(why)), 0, "store inconsistent: %s", why);
}

static void store_close(struct store *s)
{
    if (s->cold)
        t_store_close(s->t, s->cold, NULL, s->dir);
    else
        tier_destroy(s->t);
}

/* Put and commit keys[0..n) as one chain, block i filled from seed + i;
 * a put that finds warm full of blocks on their way to disk waits for the
 * disk, as a client does. */
static void put_chain(struct store *s, const struct tier_key *keys, size_t n, uint64_t seed)
{
    uint32_t ids[RUN];
    uint64_t offs[RUN];
    int rc;

    for (int tries = 0; (rc = tier_reserve(t_tns(s->t, 1, BLK), 1, NULL, keys, n, ids, offs)) ==
                        -EAGAIN && tries < 100; tries++)
        settle(s);
    cr_assert_eq(rc, (int)n, "reserve: %d", rc);
    for (size_t i = 0; i < n; i++)
        t_fill((uint8_t *)tier_pool_base(s->t) + offs[i], BLK, seed + i);
    cr_assert_eq(tier_commit(t_tns(s->t, 1, BLK), 1, keys, n), n);
}

/* n blocks of nobody's chain: what pushes the others out. */
static void flood(struct store *s, int n)
{
    for (int i = 0; i < n; i++) {
        struct tier_key k;

        t_keys((kvt_key *)&k, 1, s->next);
        put_chain(s, &k, 1, s->next++);
        if (i % 16 == 15)
            settle(s);
    }
    settle(s);
}

/* How many of keys[0..n) are in tier lvl. */
static int in_tier(struct store *s, const struct tier_key *keys, size_t n, uint8_t lvl)
{
    uint8_t tiers[RUN];
    int c = 0;

    tier_lookup(t_tns_of(s->t, 1), keys, n, tiers);
    for (size_t i = 0; i < n; i++)
        c += tiers[i] == lvl;
    return c;
}

/* Lease the run and check every byte of it; returns the hits. */
static int get_check(struct store *s, const struct tier_key *keys, size_t n, uint64_t seed)
{
    uint32_t ids[RUN], pending = 0;
    uint64_t offs[RUN];
    int got = tier_get(&(struct tier_get_args){ .ns = t_tns(s->t, 1, BLK), .keys = keys,
        .n = n, .ids = ids, .offs = offs, .pending = &pending });

    cr_assert_geq(got, 0);
    settle(s); /* reads of cold blocks land */
    for (int i = 0; i < got; i++)
        cr_assert_eq(t_check((uint8_t *)tier_pool_base(s->t) + offs[i], BLK, seed + (size_t)i),
                     -1, "block %d of the run came back wrong", i);
    tier_release(s->t, ids, (size_t)got, false);
    return got;
}

Test(tier_pin, pinned_blocks_stay_in_warm_under_a_flood_of_puts)
{
    struct store s;
    struct tier_key a[RUN], b[RUN];
    uint32_t pins[RUN];
    struct tier_stats st;

    store_open(&s, 0);
    t_keys((kvt_key *)a, RUN, 1);
    t_keys((kvt_key *)b, RUN, 2);
    put_chain(&s, a, RUN, 100);
    put_chain(&s, b, RUN, 200);
    cr_assert_eq(tier_pin(t_tns(s.t, 1, BLK), a, RUN, 0, pins), RUN);
    tier_stats_get(s.t, &st);
    cr_assert_eq(st.leases_active, RUN, "a pin is held as leases are");
    flood(&s, 256); /* four times the warm tier */
    cr_assert_eq(tier_lookup(t_tns_of(s.t, 1), b, RUN, NULL), 0,
                 "the flood should evict what is not pinned");
    cr_assert_eq(get_check(&s, a, RUN, 100), RUN, "a pinned block was evicted");
    tier_release(s.t, pins, RUN, false);
    flood(&s, 256);
    cr_assert_eq(tier_lookup(t_tns_of(s.t, 1), a, RUN, NULL), 0,
                 "released, the run is evicted as any");
    tier_stats_get(s.t, &st);
    cr_assert_eq(st.leases_active, 0);
    store_close(&s);
}

Test(tier_pin, pinned_blocks_on_disk_are_read_back_and_outlive_disk_eviction)
{
    struct store s;
    struct tier_key a[RUN], b[RUN];
    uint32_t pins[RUN];
    int guard = 0;

    store_open(&s, 8u << 20); /* disk for 128 blocks: the flood evicts from it too */
    t_keys((kvt_key *)a, RUN, 3);
    t_keys((kvt_key *)b, RUN, 4);
    put_chain(&s, a, RUN, 300);
    put_chain(&s, b, RUN, 400);
    settle(&s);
    /* until both runs are on disk only */
    while ((in_tier(&s, a, RUN, TIER_L_COLD) < RUN || in_tier(&s, b, RUN, TIER_L_COLD) < RUN) &&
           guard++ < 64)
        flood(&s, 4);
    cr_assert_eq(in_tier(&s, a, RUN, TIER_L_COLD), RUN, "the run never left warm for disk");
    cr_assert_eq(tier_pin(t_tns(s.t, 1, BLK), a, RUN, 0, pins), RUN);
    settle(&s);
    cr_assert_eq(in_tier(&s, a, RUN, TIER_L_WARM), RUN, "a pin reads its disk blocks back");
    flood(&s, 512); /* four times the disk */
    cr_assert_lt(tier_lookup(t_tns_of(s.t, 1), b, RUN, NULL), RUN,
                 "the flood should evict from disk what is not pinned");
    cr_assert_eq(get_check(&s, a, RUN, 300), RUN, "a pinned block was evicted");
    tier_release(s.t, pins, RUN, false);
    flood(&s, 512);
    cr_assert_lt(tier_lookup(t_tns_of(s.t, 1), a, RUN, NULL), RUN,
                 "released, the run is evicted as any");
    store_close(&s);
}

/* A pin of a chain whose blocks are absent after the first stops there,
 * like the lookup: nothing after a miss is held. */
Test(tier_pin, a_pin_holds_only_the_leading_run)
{
    struct store s;
    struct tier_key a[RUN];
    uint32_t pins[RUN];

    store_open(&s, 0);
    t_keys((kvt_key *)a, RUN, 5);
    put_chain(&s, a, 3, 500);
    put_chain(&s, a + 4, RUN - 4, 504);
    cr_assert_eq(tier_pin(t_tns(s.t, 1, BLK), a, RUN, 0, pins), 3);
    settle(&s);
    tier_release(s.t, pins, 3, false);
    settle(&s);
    store_close(&s);
}
