/* SPDX-License-Identifier: MIT */
/*
 * tier_evict_policy.c - warm's eviction policies: names, the keep policy's
 * ordering decisions (chains not kept leave first, a hit keeps a chain,
 * leaf-first under both), and its adaptation (a share below 1 only when late
 * reuse pays, and then more hits than LRU; LRU's hits when reuse is recent);
 * the reuse policy: LRU's order before it has learnt, what it learns (blocks
 * of a class never asked for again leave first), LRU's hits when reuse is
 * recent, leaf-first under it.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "t.h"
#include "tier.h"

/* Block bytes of the store made last: 1 MiB for the small pools (a pool
 * holds at least 16 of its largest blocks), 4 KiB for the long runs. */
static uint64_t blk = 1u << 20;

/* A warm-only store of exactly `slots` blocks of b bytes (evicting only
 * when full). */
static struct tier *store_of(enum tier_evict_policy p, uint64_t slots, uint64_t b)
{
    struct tier_cfg cfg = { .warm_bytes = slots * b, .high_wm = 1.0, .low_wm = 1.0,
                            .evict_policy = p };
    struct tier *t = NULL;

    blk = b;
    cr_assert_eq(tier_create(&cfg, &t), 0);
    cr_assert_eq(tier_pool_bytes(t), slots * b, "pool of %llu bytes",
                 (unsigned long long)tier_pool_bytes(t));
    return t;
}

static struct tier *store(enum tier_evict_policy p, uint64_t slots)
{
    return store_of(p, slots, 1u << 20);
}

static void check(const struct tier *t)
{
    char why[256];

    cr_assert_eq(tier_check(t, why, sizeof(why)), 0, "tier_check: %s", why);
}

/* Chain keys of seed: block i's key is keys_of(seed)[i]. */
static void keys_of(uint64_t seed, struct tier_key *k, size_t n)
{
    t_keys((kvt_key *)k, n, seed);
}

/* Whether a chain whose first new key is k is kept at a share of one half. */
static bool kept_at_half(const struct tier_key *k)
{
    uint32_t v;

    memcpy(&v, k->b, sizeof(v));
    return v < 0x80000000u;
}

/* The first seed from `from` whose first key is (or is not) kept at 0.5. */
static uint64_t seed_kept(uint64_t from, bool kept)
{
    struct tier_key k;

    for (;; from++) {
        keys_of(from, &k, 1);
        if (kept_at_half(&k) == kept)
            return from;
    }
}

/* Put blocks [from, n) of chain seed (blocks before from already there). */
static void put_from(struct tier *t, uint64_t seed, size_t from, size_t n)
{
    struct tier_key k[64];
    uint32_t ids[64];
    uint64_t offs[64];
    int rc;

    keys_of(seed, k, n);
    rc = tier_reserve(t_tns(t, 1, blk), 7, from ? &k[from - 1] : NULL, k + from, n - from,
                      ids, offs);
    cr_assert_eq(rc, (int)(n - from), "reserve: %d", rc);
    cr_assert_eq(tier_commit(t_tns(t, 1, blk), 7, k + from, n - from), n - from);
}

/* Look chain seed up, lease and release its hits, put the rest: one
 * request, as kvreplay makes it. Returns the hit blocks. */
static size_t request(struct tier *t, uint64_t seed, size_t n)
{
    struct tier_key k[64];
    uint32_t ids[64];
    uint64_t offs[64];
    size_t hit;
    int got = 0;

    keys_of(seed, k, n);
    hit = tier_lookup(t_tns(t, 1, blk), k, n, NULL);
    if (hit) {
        got = tier_get(&(struct tier_get_args){ .ns = t_tns(t, 1, blk), .keys = k, .n = hit,
            .ids = ids, .offs = offs });
        cr_assert_eq(got, (int)hit, "get: %d of %zu", got, hit);
        tier_release(t, ids, (size_t)got, false);
    }
    if ((size_t)got < n)
        put_from(t, seed, (size_t)got, n);
    tier_maintain(t);
    return (size_t)got;
}

/* How many of chain seed's n blocks are still there (its leading run). */
static size_t present(struct tier *t, uint64_t seed, size_t n)
{
    struct tier_key k[64];

    keys_of(seed, k, n);
    return tier_lookup(t_tns(t, 1, blk), k, n, NULL);
}

Test(tier_evict_policy, names_parse_both_ways_and_bad_ones_are_refused)
{
    enum tier_evict_policy p = TIER_EVICT_N;
    struct tier_cfg cfg = { .warm_bytes = 64u << 20, .evict_policy = TIER_EVICT_N };
    struct tier *t = NULL;

    cr_assert_eq(tier_evict_policy_parse("lru", &p), 0);
    cr_assert_eq(p, TIER_EVICT_LRU);
    cr_assert_eq(tier_evict_policy_parse("keep", &p), 0);
    cr_assert_eq(p, TIER_EVICT_KEEP);
    cr_assert_str_eq(tier_evict_policy_name(TIER_EVICT_KEEP), "keep");
    cr_assert_str_eq(tier_evict_policy_name(TIER_EVICT_LRU), "lru");
    cr_assert_eq(tier_evict_policy_parse("reuse", &p), 0);
    cr_assert_eq(p, TIER_EVICT_REUSE);
    cr_assert_str_eq(tier_evict_policy_name(TIER_EVICT_REUSE), "reuse");
    cr_assert_str_eq(tier_evict_policy_name(TIER_EVICT_N), "?");
    cr_assert_eq(tier_evict_policy_parse("LRU", &p), -EINVAL);
    cr_assert_eq(tier_evict_policy_parse("", &p), -EINVAL);
    cr_assert_eq(tier_evict_policy_parse(NULL, &p), -EINVAL);
    cr_assert_eq(tier_create(&cfg, &t), -EINVAL, "an unknown policy is refused");
    cfg.evict_policy = TIER_EVICT_KEEP;
    cr_assert_eq(tier_create(&cfg, &t), 0);
    cr_assert_eq(tier_evict_policy_of(t), TIER_EVICT_KEEP);
    cr_assert_float_eq(tier_keep_share(t), 1.0, 1e-9, "a new store keeps every chain");
    tier_destroy(t);
}

/* Keeping every chain (share 1, where keep starts) is LRU: after every
 * request, both stores hold the same leading run of every chain. */
Test(tier_evict_policy, keep_at_share_one_evicts_in_lrus_order)
{
    struct tier *l = store(TIER_EVICT_LRU, 64), *k = store(TIER_EVICT_KEEP, 64);
    size_t lost = 0;

    for (uint64_t i = 0; i < 60; i++) {
        uint64_t seed = 1000 + (i * 7) % 23; /* chains come back: hits refresh them */

        cr_assert_eq(request(l, seed, 6), request(k, seed, 6), "request %llu",
                     (unsigned long long)i);
        for (uint64_t c = 1000; c < 1023; c++) {
            size_t pl = present(l, c, 6);

            cr_assert_eq(pl, present(k, c, 6), "request %llu: chain %llu differs",
                         (unsigned long long)i, (unsigned long long)c);
            lost += i == 59 ? 6 - pl : 0;
        }
    }
    cr_assert_gt(lost, 60, "the pool filled and evicted (%zu blocks gone)", lost);
    check(l);
    check(k);
    tier_destroy(l);
    tier_destroy(k);
}

/* At a share of one half, a newer chain not kept leaves before an older
 * kept one, from its end back to its root; under LRU the older one goes. */
Test(tier_evict_policy, a_chain_not_kept_leaves_first_tail_to_root)
{
    uint64_t kept = seed_kept(1, true), not = seed_kept(1, false);
    struct tier *t = store(TIER_EVICT_KEEP, 16), *l = store(TIER_EVICT_LRU, 16);

    tier_keep_share_set(t, 0.5);
    cr_assert_float_eq(tier_keep_share(t), 0.5, 1e-9);
    for (int i = 0; i < 2; i++) {
        struct tier *x = i ? l : t;

        put_from(x, kept, 0, 8); /* older, kept */
        put_from(x, not, 0, 8);  /* newer, not kept */
        for (size_t b = 0; b < 4; b++) { /* no room: each block takes one's place */
            put_from(x, 5000, b, b + 1);
            if (x == t)
                cr_assert_eq(present(t, not, 8), 7 - b, "block %zu of the chain not kept "
                             "leaves %zu-th", 7 - b, b + 1);
            else
                cr_assert_eq(present(l, kept, 8), 7 - b, "LRU: the older chain's block "
                             "%zu leaves", 7 - b);
        }
        check(x);
    }
    cr_assert_eq(present(t, kept, 8), 8, "the older kept chain stays whole");
    cr_assert_eq(present(l, not, 8), 8, "LRU: the newer chain stays");
    tier_destroy(t);
    tier_destroy(l);
}

/* A hit keeps a chain that was not kept: it then outlives a newer chain
 * not kept. And new blocks under a hit prefix decide for themselves: a
 * kept (hit) prefix never leaves before the blocks under it. */
Test(tier_evict_policy, a_hit_keeps_a_chain_and_its_new_tail_decides_anew)
{
    uint64_t a = seed_kept(100, false), b = seed_kept(a + 1, false);
    struct tier *t = store(TIER_EVICT_KEEP, 16);

    tier_keep_share_set(t, 0.5);
    put_from(t, a, 0, 6);
    cr_assert_eq(request(t, a, 6), 6, "chain a is hit whole");
    put_from(t, b, 0, 6);           /* newer, not kept */
    put_from(t, 7000, 0, 8);        /* 20 blocks in 16 slots */
    check(t);
    cr_assert_eq(present(t, a, 6), 6, "the chain that was hit is kept");
    cr_assert_eq(present(t, b, 6), 2, "the newer chain not kept lost its tail");
    tier_destroy(t);
}

/* 40 chains of 5 blocks under one shared root in t: before each, the root
 * is hit (so kept, or in reuse's hit class), then gets a child chain of
 * its own (keys from seed on); tier_check after each. The root must stay
 * while any block under it does. */
static void chains_under_one_root(struct tier *t, uint64_t seed)
{
    struct tier_key root[1];
    uint32_t ids[1];
    uint64_t offs[1];

    keys_of(9, root, 1);
    cr_assert_eq(tier_reserve(t_tns(t, 1, blk), 7, NULL, root, 1, ids, offs), 1);
    cr_assert_eq(tier_commit(t_tns(t, 1, blk), 7, root, 1), 1);
    for (uint64_t c = 0; c < 40; c++) {
        struct tier_key k[5];
        uint32_t cid[5];
        uint64_t coff[5];
        int rc;

        cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(t, 1, blk), .keys = root,
            .n = 1, .ids = ids, .offs = offs }), 1, "chain %llu: root gone",
                     (unsigned long long)c);
        tier_release(t, ids, 1, false);
        keys_of(seed + c, k, 5);
        rc = tier_reserve(t_tns(t, 1, blk), 7, root, k, 5, cid, coff);
        cr_assert_eq(rc, 5, "reserve: %d", rc);
        cr_assert_eq(tier_commit(t_tns(t, 1, blk), 7, k, 5), 5);
        tier_maintain(t);
        check(t);
    }
}

/* Leaf-first under keep: chains not kept share a kept root; the root
 * stays while any block under it does, whatever the lists say. */
Test(tier_evict_policy, leaf_first_holds_under_keep)
{
    struct tier *t = store(TIER_EVICT_KEEP, 24);

    tier_keep_share_set(t, 0.05);
    chains_under_one_root(t, 20000);
    tier_destroy(t);
}

/* Traffic where each chain comes back once, `dist` chains later. */
static size_t replay(enum tier_evict_policy p, uint64_t slots, int chains, int dist,
                     double *share)
{
    struct tier *t = store_of(p, slots, 4096);
    size_t hits = 0;

    for (int i = 0; i < chains; i++) {
        hits += request(t, 50000 + (uint64_t)i, 4);
        if (i >= dist)
            hits += request(t, 50000 + (uint64_t)(i - dist), 4);
    }
    check(t);
    *share = tier_keep_share(t);
    tier_destroy(t);
    return hits;
}

/* Reuse that comes after warm would have dropped every chain: keep learns
 * to keep a share of them (from its ghosts) and finds what LRU cannot. */
Test(tier_evict_policy, late_reuse_teaches_keep_to_keep_a_share, .timeout = 120)
{
    double ls, ks;
    size_t lru = replay(TIER_EVICT_LRU, 1024, 12000, 400, &ls);
    size_t keep = replay(TIER_EVICT_KEEP, 1024, 12000, 400, &ks);

    cr_assert_lt(ks, 0.9, "keep's share: %g", ks);
    cr_assert_float_eq(ls, 1.0, 1e-9);
    cr_assert_gt(keep, lru + 2000, "hit blocks: keep %zu, lru %zu", keep, lru);
}

/* Reuse well within warm's reach: nothing to gain; keep stays LRU. */
Test(tier_evict_policy, recent_reuse_leaves_keep_at_lru, .timeout = 120)
{
    double ls, ks;
    size_t lru = replay(TIER_EVICT_LRU, 1024, 6000, 40, &ls);
    size_t keep = replay(TIER_EVICT_KEEP, 1024, 6000, 40, &ks);

    cr_assert_float_eq(ks, 1.0, 1e-9, "keep's share: %g", ks);
    cr_assert_eq(keep, lru, "hit blocks: keep %zu, lru %zu", keep, lru);
    cr_assert_eq(lru, (size_t)(6000 - 40) * 4, "every reuse hits: %zu", lru);
}

/* Before its first adaptation (a thousand blocks leaving warm) reuse knows
 * nothing of any class: every index is the same, and the older leaf
 * leaves, as under LRU. */
Test(tier_evict_policy, reuse_before_it_learns_evicts_in_lrus_order)
{
    struct tier *l = store(TIER_EVICT_LRU, 64), *r = store(TIER_EVICT_REUSE, 64);
    size_t lost = 0;

    for (uint64_t i = 0; i < 60; i++) {
        uint64_t seed = 1000 + (i * 7) % 23;

        cr_assert_eq(request(l, seed, 6), request(r, seed, 6), "request %llu",
                     (unsigned long long)i);
        for (uint64_t c = 1000; c < 1023; c++) {
            size_t pl = present(l, c, 6);

            cr_assert_eq(pl, present(r, c, 6), "request %llu: chain %llu differs",
                         (unsigned long long)i, (unsigned long long)c);
            lost += i == 59 ? 6 - pl : 0;
        }
        check(r);
    }
    cr_assert_gt(lost, 60, "the pool filled and evicted (%zu blocks gone)", lost);
    tier_destroy(l);
    tier_destroy(r);
}

/* Traffic where each chain of `put` blocks comes back once, `dist` chains
 * later, asking for its first `ask` blocks (its last block, the partial
 * one, is rewritten by the next turn and never asked for again). */
static size_t replay_turns(enum tier_evict_policy p, uint64_t slots, int chains, int dist,
                           size_t put, size_t ask)
{
    struct tier *t = store_of(p, slots, 4096);
    size_t hits = 0;

    for (int i = 0; i < chains; i++) {
        hits += request(t, 60000 + (uint64_t)i, put);
        if (i >= dist)
            hits += request(t, 60000 + (uint64_t)(i - dist), ask);
        if (i % 500 == 0)
            check(t);
    }
    check(t);
    tier_destroy(t);
    return hits;
}

/* 250 chains of 5 blocks between a chain and its second turn need 1,250
 * slots; warm has 1,024, so LRU drops every chain before it comes back.
 * reuse learns that tips and blocks that were hit are not asked for again
 * here, lets them go first (250 x 4 blocks fit), and finds most second
 * turns. */
Test(tier_evict_policy, reuse_learns_which_classes_come_back, .timeout = 120)
{
    size_t lru = replay_turns(TIER_EVICT_LRU, 1024, 8000, 250, 5, 4);
    size_t reuse = replay_turns(TIER_EVICT_REUSE, 1024, 8000, 250, 5, 4);
    size_t most = (size_t)(8000 - 250) * 4;

    cr_assert_gt(reuse, lru + most / 2, "hit blocks: reuse %zu, lru %zu (of %zu)", reuse, lru,
                 most);
    cr_assert_gt(reuse, most * 3 / 4, "reuse finds most second turns: %zu of %zu", reuse, most);
}

/* Reuse well within warm's reach: every second turn hits under both. */
Test(tier_evict_policy, recent_reuse_gives_reuse_lrus_hits, .timeout = 120)
{
    size_t lru = replay_turns(TIER_EVICT_LRU, 1024, 6000, 40, 5, 4);
    size_t reuse = replay_turns(TIER_EVICT_REUSE, 1024, 6000, 40, 5, 4);

    cr_assert_eq(lru, (size_t)(6000 - 40) * 4, "every reuse hits: %zu", lru);
    cr_assert_eq(reuse, lru, "hit blocks: reuse %zu, lru %zu", reuse, lru);
}

/* Leaf-first under reuse: chains under one shared root, which is hit each
 * time (its class is the hit one) while its children are tips; the root
 * stays while any block under it does. */
Test(tier_evict_policy, leaf_first_holds_under_reuse)
{
    struct tier *t = store(TIER_EVICT_REUSE, 24);

    chains_under_one_root(t, 30000);
    tier_destroy(t);
}

/* The same once reuse has learnt (the test above ends before its first
 * adaptation, so it sees LRU's one list): 1,100 one-block chains through
 * the 24 slots first, so that more than 1,024 blocks (tier_policy.c's
 * ADAPT_MIN) have left warm, then the chains under the root, whose
 * blocks now go on the lists of their classes. */
Test(tier_evict_policy, leaf_first_holds_under_reuse_once_it_has_learnt)
{
    struct tier *t = store(TIER_EVICT_REUSE, 24);

    for (uint64_t i = 0; i < 1100; i++)
        put_from(t, 40000 + i, 0, 1);
    check(t);
    chains_under_one_root(t, 30000);
    tier_destroy(t);
}


/* Once reuse has learnt, a parent whose last child left goes into its
 * class's list by its age, not to the list's tail: there it hid the older
 * leaves of its class from reuse's candidates (each list's oldest and
 * youngest), and a younger leaf left first. After the warm-up only tips
 * have a learnt index (0: never asked for again); every other class is
 * unknown (kept, index inf), so among them the oldest candidate leaves.
 * Chains O, M and Y (O the oldest) lose their tips M2, then O2, then Y2,
 * and the class of O1, M1 and Y1 (turn 1, a parent once, never hit) gets
 * them in that order; the other leaves are blocks put and hit later
 * (younger). A put into the full store must then take O1: with the tail
 * for a parent whose child left, the list ran M1, O1, Y1, its ends M1 and
 * Y1, and M1 left. */
Test(tier_evict_policy, a_parent_whose_child_left_takes_its_place_by_age_once_reuse_has_learnt)
{
    struct tier *t = store(TIER_EVICT_REUSE, 24);
    const uint64_t O = 71000, M = 71001, Y = 71002, F = 72000;
    struct tier_key k[2];
    uint32_t ids[1];
    uint64_t offs[1];

    for (uint64_t i = 0; i < 1100; i++) /* learn: over 1,024 tips leave */
        put_from(t, 40000 + i, 0, 1);
    put_from(t, O, 0, 2);
    put_from(t, M, 0, 2);
    put_from(t, Y, 0, 2);
    for (uint64_t f = 0; f < 18; f++) { /* the warm-up's tips leave, oldest first */
        put_from(t, F + f, 0, 1);
        cr_assert_eq(request(t, F + f, 1), 1, "filler %llu is hit", (unsigned long long)f);
    }
    cr_assert_eq(present(t, O, 2) + present(t, M, 2) + present(t, Y, 2), 6, "O, M, Y whole");
    for (int i = 0; i < 3; i++) { /* tips M2, O2, Y2 go: their parents become leaves */
        keys_of(i == 0 ? M : i == 1 ? O : Y, k, 2);
        cr_assert_eq(tier_remove(t_tns(t, 1, blk), &k[1], 1), 1);
    }
    for (uint64_t f = 18; f < 21; f++) { /* full again, no leaf left */
        put_from(t, F + f, 0, 1);
        cr_assert_eq(request(t, F + f, 1), 1);
    }
    check(t);
    cr_assert_eq(present(t, O, 2) + present(t, M, 2) + present(t, Y, 2), 3);
    keys_of(73000, k, 1); /* one more block: one leaf leaves */
    cr_assert_eq(tier_reserve(t_tns(t, 1, blk), 7, NULL, k, 1, ids, offs), 1);
    cr_assert_eq(tier_commit(t_tns(t, 1, blk), 7, k, 1), 1);
    check(t);
    cr_assert_eq(present(t, O, 2), 0, "the oldest leaf of the class, O1, left");
    cr_assert_eq(present(t, M, 2), 1, "M1, younger, stays (it left when O1 was hidden)");
    cr_assert_eq(present(t, Y, 2), 1, "Y1, the youngest, stays");
    for (uint64_t f = 0; f < 21; f++)
        cr_assert_eq(present(t, F + f, 1), 1, "filler %llu stays", (unsigned long long)f);
    tier_destroy(t);
}

/* Placing by age in a long list, where the walk from either end stops
 * after its bound (tier_chain.c's BY_AGE_STEPS, 256): once reuse has
 * learnt, 1,200 two-block chains lose their tips in a shuffled order, so
 * that each parent comes back into a list of up to 1,199 others, most far
 * from both ends. The list stays whole (tier_check walks its links) and
 * every parent is still there, on it. */
Test(tier_evict_policy, placing_by_age_keeps_a_long_list_whole, .timeout = 120)
{
    struct tier *t = store_of(TIER_EVICT_REUSE, 4096, 4096);
    struct tier_key k[2];

    for (uint64_t i = 0; i < 6200; i++) /* learn: over 2,048 tips leave */
        put_from(t, 90000 + i, 0, 1);
    for (uint64_t c = 0; c < 1200; c++)
        put_from(t, 100000 + c, 0, 2);
    check(t);
    for (uint64_t i = 0; i < 1200; i++) {
        keys_of(100000 + (i * 7919) % 1200, k, 2); /* 7919 is prime: each chain once */
        cr_assert_eq(tier_remove(t_tns(t, 1, blk), &k[1], 1), 1, "tip %llu",
                     (unsigned long long)i);
        if (i % 100 == 0)
            check(t);
    }
    check(t);
    for (uint64_t c = 0; c < 1200; c++)
        cr_assert_eq(present(t, 100000 + c, 2), 1, "chain %llu keeps its parent",
                     (unsigned long long)c);
    tier_destroy(t);
}

/* The walk itself: once reuse has learnt, 100 two-block chains lose their
 * tips in a shuffled order ((i x 37) mod 100), so each parent goes into the
 * middle of its class's list, which must then run oldest to youngest: each
 * put into the full store (everything else hit, so of a class kept longer)
 * takes the oldest parent left, one after another. Fails with the parent
 * at the tail, and with walks of 0 to 2 steps (review of the placement). */
Test(tier_evict_policy, parents_placed_in_a_shuffled_order_leave_oldest_first)
{
    const uint64_t N = 100, S = 224, C = 30000000, F = 40000000;
    struct tier *t = store(TIER_EVICT_REUSE, S);
    struct tier_key k[2];
    uint64_t f = 0;

    for (uint64_t i = 0; i < S + 1100; i++) /* learn: over 1,024 tips leave */
        put_from(t, 31000000 + i, 0, 1);
    for (uint64_t c = 0; c < N; c++)
        put_from(t, C + c, 0, 2);
    for (; f < S - 2 * N; f++) { /* the warm-up's last tips leave */
        put_from(t, F + f, 0, 1);
        cr_assert_eq(request(t, F + f, 1), 1);
    }
    for (uint64_t c = 0; c < N; c++)
        cr_assert_eq(present(t, C + c, 2), 2, "chain %llu whole", (unsigned long long)c);
    for (uint64_t i = 0; i < N; i++) { /* tips go, shuffled: parents placed by age */
        keys_of(C + (i * 37) % N, k, 2);
        cr_assert_eq(tier_remove(t_tns(t, 1, blk), &k[1], 1), 1);
    }
    for (uint64_t i = 0; i < N; i++, f++) { /* full again */
        put_from(t, F + f, 0, 1);
        cr_assert_eq(request(t, F + f, 1), 1);
    }
    check(t);
    for (uint64_t i = 0; i < N / 2; i++, f++) { /* each put: the oldest parent left leaves */
        put_from(t, F + f, 0, 1);
        cr_assert_eq(request(t, F + f, 1), 1);
        for (uint64_t c = 0; c < N; c++)
            cr_assert_eq(present(t, C + c, 2), c > i, "after %llu puts, parent %llu %s",
                         (unsigned long long)i + 1, (unsigned long long)c,
                         c > i ? "stays" : "left");
    }
    check(t);
    tier_destroy(t);
}

/* When the walk from the end nearer in age stops at its bound short of the
 * place, the other end is tried: 300 young parents and 60 old ones on one
 * class's list (relinked in age order, so each went to the tail), then one
 * of an age between, nearer in age to the young (a walk from the head,
 * past 300 leaves) but 60 leaves from the tail. It must go between them:
 * the 61st leaf to leave, after the 60 old parents. Reuse learns once,
 * after 4,096 blocks have left warm, and not again in the test. */
Test(tier_evict_policy, a_placement_past_one_ends_bound_is_found_from_the_other)
{
    const uint64_t S = 1024, OLD = 50000000, MID = 51000000, YOUNG = 52000000;
    struct tier_cfg cfg = { .warm_bytes = S * 4096, .high_wm = 1.0, .low_wm = 1.0,
                            .evict_policy = TIER_EVICT_REUSE, .evict_adapt_min = 4096 };
    struct tier *t = NULL;
    struct tier_key k[2];
    uint64_t f = 0;

    blk = 4096;
    cr_assert_eq(tier_create(&cfg, &t), 0);
    cr_assert_eq(tier_pool_bytes(t), S * blk, "the pool is what was asked");
    for (uint64_t i = 0; i < S + 4100; i++) /* learn: over 4,096 tips leave */
        put_from(t, 53000000 + i, 0, 1);
    for (uint64_t c = 0; c < 60; c++)
        put_from(t, OLD + c, 0, 2);
    put_from(t, 54000000, 0, 1); /* the clock: hit 5,000 times, ages the rest */
    for (int i = 0; i < 5000; i++)
        cr_assert_eq(request(t, 54000000, 1), 1);
    put_from(t, MID, 0, 2);
    for (uint64_t c = 0; c < 300; c++)
        put_from(t, YOUNG + c, 0, 2);
    cr_assert_eq(request(t, 54000000, 1), 1); /* the clock: younger than all of them now */
    for (; f < S - 1 - 2 * 361; f++) { /* the warm-up's tips all leave */
        put_from(t, 55000000 + f, 0, 1);
        cr_assert_eq(request(t, 55000000 + f, 1), 1);
    }
    for (uint64_t c = 0; c < 360; c++) { /* young from the youngest, then old: each to the tail */
        uint64_t seed = c < 300 ? YOUNG + 299 - c : OLD + 59 - (c - 300);

        keys_of(seed, k, 2);
        cr_assert_eq(tier_remove(t_tns(t, 1, blk), &k[1], 1), 1, "tip of %llu",
                     (unsigned long long)seed);
    }
    keys_of(MID, k, 2);
    cr_assert_eq(tier_remove(t_tns(t, 1, blk), &k[1], 1), 1);
    for (int i = 0; i < 361; i++, f++) { /* full again, of blocks hit */
        put_from(t, 55000000 + f, 0, 1);
        cr_assert_eq(request(t, 55000000 + f, 1), 1);
    }
    check(t);
    for (int i = 0; i < 61; i++, f++) { /* 61 puts: the 60 old parents, then MID's */
        put_from(t, 55000000 + f, 0, 1);
        cr_assert_eq(request(t, 55000000 + f, 1), 1);
        cr_assert_eq(present(t, MID, 2), i < 60 ? 1 : 0, "after %d puts MID's parent %s", i + 1,
                     i < 60 ? "stays" : "left");
    }
    for (uint64_t c = 0; c < 60; c++)
        cr_assert_eq(present(t, OLD + c, 2), 0, "old parent %llu left", (unsigned long long)c);
    for (uint64_t c = 0; c < 300; c++)
        cr_assert_eq(present(t, YOUNG + c, 2), 1, "young parent %llu stays",
                     (unsigned long long)c);
    check(t);
    tier_destroy(t);
}
