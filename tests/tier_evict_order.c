/* SPDX-License-Identifier: MIT */
/*
 * tier_evict_order.c - the store's eviction: leaf-first LRU (a chain goes
 * from its end back to its root, a shared root after all its children),
 * leases never evicted, watermarks, access refreshing, dedup, aborts.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "t.h"
#include "tier.h"

#define MIB (1u << 20)

/* The eviction observer of these tests: which keys left warm, in order. */
struct sink {
    struct tier_key keys[256];
    int n;
};

static void record(void *ctx, uint32_t ns, const struct tier_key *key, const void *data,
                   uint64_t len)
{
    struct sink *s = ctx;

    (void)ns;
    (void)data;
    cr_assert_eq(len, MIB, "demoted length %llu", (unsigned long long)len);
    if (s->n < 256)
        s->keys[s->n++] = *key;
}

/* A 32 MiB pool (32 slots of 1 MiB) with the given watermarks. */
static struct tier *store(struct sink *s, double hi, double lo)
{
    struct tier_cfg cfg = { .warm_bytes = 32 * MIB, .high_wm = hi, .low_wm = lo,
                            .on_evict = record, .evict_ctx = s };
    struct tier *t = NULL;

    cr_assert_eq(tier_create(&cfg, &t), 0);
    return t;
}

/* Reserve and commit a chain of n keys from seed; the slots get a pattern. */
static void put(struct tier *t, uint64_t seed, size_t n, const struct tier_key *parent)
{
    struct tier_key k[64];
    uint32_t ids[64];
    uint64_t offs[64];
    int rc;

    t_keys((kvt_key *)k, n, seed);
    rc = tier_reserve(t_tns(t, 1, MIB), 7, parent, k, n, ids, offs);
    cr_assert_geq(rc, 0, "reserve: %d", rc);
    for (size_t i = 0; i < n; i++)
        if (offs[i] != UINT64_MAX)
            t_fill((uint8_t *)tier_pool_base(t) + offs[i], MIB, seed * 100 + i);
    cr_assert_eq(tier_commit(t_tns(t, 1, MIB), 7, k, n), (size_t)rc);
}

/* A test's store and one batch of up to 64 keys with their reservation. */
struct batch {
    struct sink s;
    struct tier *t;
    struct tier_key k[64];
    uint32_t ids[64];
    uint64_t offs[64];
    struct tier_stats st;
};

/* store(hi, lo) with n keys of seed in b->k; the reservation is the test's */
static struct tier *batch_open(struct batch *b, double hi, double lo, size_t n, uint64_t seed)
{
    b->s.n = 0;
    b->t = store(&b->s, hi, lo);
    t_keys((kvt_key *)b->k, n, seed);
    return b->t;
}

static size_t present(struct tier *t, uint64_t seed, size_t n)
{
    struct tier_key k[64];

    t_keys((kvt_key *)k, n, seed);
    return tier_lookup(t_tns_of(t, 1), k, n, NULL);
}

static bool is_key(const struct tier_key *k, uint64_t seed, size_t i)
{
    struct tier_key all[64];

    t_keys((kvt_key *)all, i + 1, seed);
    return memcmp(k, &all[i], sizeof(*k)) == 0;
}

Test(tier_evict_order, chain_goes_leaf_first_from_its_end_to_its_root)
{
    struct sink s = { .n = 0 };
    struct tier *t = store(&s, 0.5, 0.25);
    struct tier_stats st;

    put(t, 1, 8, NULL); /* chain A, older */
    put(t, 2, 9, NULL); /* chain B: 17 MiB in all, above the 16 MiB mark */
    cr_assert_eq(tier_maintain(t), 9, "down to 8 MiB: 9 blocks out");
    cr_assert_eq(s.n, 9);
    for (int i = 0; i < 8; i++)
        cr_assert(is_key(&s.keys[i], 1, (size_t)(7 - i)),
                  "eviction %d: expected A[%d] (chain end first)", i, 7 - i);
    cr_assert(is_key(&s.keys[8], 2, 8), "then B's leaf");
    cr_assert_eq(present(t, 1, 8), 0);
    cr_assert_eq(present(t, 2, 9), 8, "B keeps its first 8 blocks, a usable prefix");
    tier_stats_get(t, &st);
    cr_assert_eq(st.evictions[TIER_L_WARM], 9);
    cr_assert_eq(st.blocks[TIER_L_WARM], 8);
    cr_assert_eq(st.bytes_used[TIER_L_WARM], 8ull * MIB);
    cr_assert_eq(tier_maintain(t), 0, "below the high watermark nothing moves");
    tier_destroy(t);
}

Test(tier_evict_order, shared_root_goes_after_all_its_children)
{
    struct sink s = { .n = 0 };
    struct tier *t = store(&s, 0.5, 0.01);
    struct tier_key root[1];

    t_keys((kvt_key *)root, 1, 10);
    put(t, 10, 1, NULL);       /* the shared system prompt */
    put(t, 11, 9, root);       /* two conversations under it */
    put(t, 12, 9, root);
    cr_assert_eq(tier_maintain(t), 19, "everything goes (low mark ~0)");
    cr_assert(is_key(&s.keys[18], 10, 0), "the root is evicted last");
    tier_destroy(t);
}

Test(tier_evict_order, access_moves_a_chain_to_the_hot_end)
{
    struct batch b;
    struct tier *t = batch_open(&b, 0.5, 0.25, 8, 1);

    put(t, 1, 8, NULL);
    put(t, 2, 9, NULL);
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(t, 1, MIB), .keys = b.k,
        .n = 8, .ids = b.ids, .offs = b.offs }), 8);
    tier_release(t, b.ids, 8, false); /* A is now the most recent */
    cr_assert_eq(tier_maintain(t), 9);
    cr_assert_eq(present(t, 1, 8), 8, "A was used last and stays");
    cr_assert_eq(present(t, 2, 9), 0, "B goes");
    tier_destroy(t);
}

Test(tier_evict_order, leased_blocks_are_never_evicted)
{
    struct sink s = { .n = 0 };
    struct tier *t = store(&s, 0.99, 0.9);
    struct tier_key a[16], b[32];
    uint32_t ids[32];
    uint64_t offs[32], lease_off[16];
    struct tier_stats st;

    put(t, 1, 16, NULL);
    t_keys((kvt_key *)a, 16, 1);
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(t, 1, MIB), .keys = a,
        .n = 16, .ids = ids, .offs = lease_off }), 16);
    /* 16 more fit; the 17th needs a victim, and only leased blocks exist */
    t_keys((kvt_key *)b, 17, 2);
    cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 8, NULL, b, 16, ids + 16, offs), 16);
    cr_assert_eq(tier_commit(t_tns(t, 1, MIB), 8, b, 16), 16);
    tier_lookup(t_tns_of(t, 1), b, 16, NULL);
    {
        uint32_t id1;
        uint64_t off1;

        /* b's leaf is evictable: the 17th evicts it, never a leased A block */
        cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 8, NULL, &b[16], 1, &id1, &off1), 1);
        cr_assert_eq(s.n, 1);
        cr_assert(is_key(&s.keys[0], 2, 15));
        cr_assert_eq(tier_abort(t_tns_of(t, 1), 8, &b[16], 1), 1);
    }
    /* lease all of B too: now nothing can go */
    {
        uint32_t bid[15], id1;
        uint64_t boff[15], off[2];
        struct tier_key c[2];

        cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(t, 1, MIB), .keys = b,
            .n = 15, .ids = bid, .offs = boff }), 15);
        t_keys((kvt_key *)c, 2, 3);
        cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 9, NULL, c, 1, &id1, off), 1, "one free slot");
        cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 9, NULL, c + 1, 1, &id1, off), -ENOSPC,
                     "every block leased or reserved: the put must fail");
        tier_release(t, bid, 15, false);
    }
    for (int i = 0; i < 16; i++) {
        long bad = t_check((uint8_t *)tier_pool_base(t) + lease_off[i], MIB, 100 + (uint64_t)i);

        cr_assert_eq(bad, -1, "leased block %d changed at byte %ld", i, bad);
    }
    tier_release(t, ids, 16, false);
    tier_stats_get(t, &st);
    cr_assert_eq(st.leases_active, 0);
    tier_destroy(t);
}

Test(tier_evict_order, reserve_is_all_or_nothing_and_dedups)
{
    struct batch b;
    struct tier *t = batch_open(&b, 0.99, 0.9, 40, 5);
    struct tier_key *k = b.k;

    cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 1, NULL, k, 40, b.ids, b.offs), -ENOSPC,
                 "40 blocks cannot fit 32 slots");
    tier_stats_get(t, &b.st);
    cr_assert_eq(b.st.reserved, 0, "a failed batch leaves nothing reserved");
    cr_assert_eq(b.st.bytes_used[TIER_L_WARM], 0);
    cr_assert_eq(b.st.index_entries, 0);
    cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 1, NULL, k, 4, b.ids, b.offs), 4);
    cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 2, NULL, k, 6, b.ids, b.offs), 2,
                 "4 in flight are deduplicated, 2 new");
    cr_assert_eq(b.ids[0], TIER_NONE);
    cr_assert_eq(b.offs[3], UINT64_MAX);
    cr_assert_neq(b.offs[4], UINT64_MAX);
    cr_assert_eq(tier_commit(t_tns(t, 1, MIB), 2, k, 6), 2, "owner 2 commits only its own");
    cr_assert_eq(tier_lookup(t_tns_of(t, 1), k, 6, NULL), 0, "k[0..4) still uncommitted");
    cr_assert_eq(tier_commit(t_tns(t, 1, MIB), 1, k, 6), 4);
    cr_assert_eq(tier_lookup(t_tns_of(t, 1), k, 6, NULL), 6);
    tier_destroy(t);
}

Test(tier_evict_order, aborted_parent_with_children_leaks_nothing)
{
    struct batch b;
    struct tier *t = batch_open(&b, 0.99, 0.9, 2, 9);
    struct tier_key *k = b.k;

    cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 1, NULL, k, 2, b.ids, b.offs), 2);
    cr_assert_eq(tier_commit(t_tns(t, 1, MIB), 1, &k[1], 1), 1);
    cr_assert_eq(tier_abort(t_tns_of(t, 1), 1, k, 2), 1, "only the reserved parent is aborted");
    cr_assert_eq(tier_lookup(t_tns_of(t, 1), k, 2, NULL), 0, "the chain has lost its head");
    tier_stats_get(t, &b.st);
    cr_assert_eq(b.st.bytes_used[TIER_L_WARM], MIB, "the parent's slot went back");
    /* re-reserving the parent revives it */
    cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 1, NULL, k, 1, b.ids, b.offs), 1);
    cr_assert_eq(tier_commit(t_tns(t, 1, MIB), 1, k, 1), 1);
    cr_assert_eq(tier_lookup(t_tns_of(t, 1), k, 2, NULL), 2);
    cr_assert_eq(tier_remove(t_tns_of(t, 1), k, 2), 2, "removal goes leaf-first through the batch");
    tier_stats_get(t, &b.st);
    cr_assert_eq(b.st.bytes_used[TIER_L_WARM], 0);
    cr_assert_eq(b.st.index_entries, 0, "no ghost left behind");
    tier_destroy(t);
}

Test(tier_evict_order, reclaim_by_ids_drops_only_the_owners_reservations)
{
    struct batch b;
    struct tier *t = batch_open(&b, 0.99, 0.9, 4, 11);

    cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 5, NULL, b.k, 4, b.ids, b.offs), 4);
    cr_assert_eq(tier_commit(t_tns(t, 1, MIB), 5, b.k, 2), 2);
    cr_assert_eq(tier_abort_ids(t, 6, b.ids, 4), 0, "another owner reclaims nothing");
    cr_assert_eq(tier_abort_ids(t, 5, b.ids, 4), 2, "committed ids are stale, skipped");
    tier_stats_get(t, &b.st);
    cr_assert_eq(b.st.reserved, 0);
    cr_assert_eq(b.st.reclaimed, 2);
    cr_assert_eq(b.st.bytes_used[TIER_L_WARM], 2ull * MIB);
    cr_assert_eq(tier_lookup(t_tns_of(t, 1), b.k, 4, NULL), 2);
    tier_destroy(t);
}

/* Bug found in review: a reservation of a second block size, with no
 * segment free, evicted nearly the whole pool one LRU block at a time (and
 * could still fail). Now it empties exactly one segment, or evicts nothing. */
Test(tier_evict_order, another_block_size_frees_one_segment_not_the_pool)
{
    struct tier_cfg cfg = { .warm_bytes = 32 * MIB, .high_wm = 1.0, .low_wm = 1.0 };
    struct tier *t = NULL;
    enum { BLK = 4096, N = 8192 };
    static struct tier_key k[N];
    static uint32_t ids[N];
    static uint64_t offs[N];
    struct tier_key big;
    struct tier_stats st;
    uint32_t id;
    uint64_t off;

    cr_assert_eq(tier_create(&cfg, &t), 0);
    t_keys((kvt_key *)k, N, 21);
    for (int i = 0; i < N; i += 1024) {
        cr_assert_eq(tier_reserve(t_tns(t, 1, BLK), 1, NULL, k + i, 1024, ids + i, offs + i), 1024);
        cr_assert_eq(tier_commit(t_tns(t, 1, BLK), 1, k + i, 1024), 1024);
    }
    /* read one block of each 2 MiB segment (512 blocks) so LRU order and
     * segment order differ */
    for (int i = 0; i < N; i += 512) {
        cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(t, 1, BLK), .keys = &k[i + 7],
            .n = 1, .ids = &id, .offs = &off }), 1);
        tier_release(t, &id, 1, false);
    }
    t_keys((kvt_key *)&big, 1, 22);
    cr_assert_eq(tier_reserve(t_tns(t, 2, 2 * BLK), 1, NULL, &big, 1, &id, &off), 1);
    tier_stats_get(t, &st);
    cr_assert_leq(st.evictions[TIER_L_WARM], 512, "evicted %llu blocks for one slot",
                  (unsigned long long)st.evictions[TIER_L_WARM]);
    cr_assert_eq(tier_abort(t_tns_of(t, 2), 1, &big, 1), 1);

    /* with a lease in every segment nothing can be freed: fail, evict nothing */
    for (int i = 0; i < N; i += 512)
        tier_get(&(struct tier_get_args){ .ns = t_tns(t, 1, BLK), .keys = &k[i + 9], .n = 1,
            .ids = &ids[i], .offs = &offs[i] });
    {
        uint64_t before;

        t_keys((kvt_key *)&big, 1, 23);
        tier_stats_get(t, &st);
        before = st.evictions[TIER_L_WARM];
        /* fill the freed segment first, so no segment is free */
        for (int j = 0; j < 256; j++) {
            struct tier_key x;

            t_keys((kvt_key *)&x, 1, 1000 + (uint64_t)j);
            cr_assert_eq(tier_reserve(t_tns(t, 2, 2 * BLK), 1, NULL, &x, 1, &id, &off), 1);
        }
        cr_assert_eq(tier_reserve(t_tns(t, 2, 2 * BLK), 1, NULL, &big, 1, &id, &off), -ENOSPC);
        tier_stats_get(t, &st);
        cr_assert_eq(st.evictions[TIER_L_WARM], before, "a failing reserve evicted blocks");
    }
    tier_destroy(t);
}

/* The oldest warm leaf leaves first whatever its size class, under every
 * policy (keep at share 1, and reuse before it has learnt, are LRU): X
 * (1 MiB blocks) is put, then Y (512 KiB blocks, another size class), then
 * X is read, so Y is the oldest leaf, and a chain of 15 blocks of X's size
 * takes warm past its high mark. Going down to the low mark (12.8 MiB of
 * 16.5) takes Y, X and the chain's last three blocks. (adf17b9 looked only
 * at the first size class with a leaf: X and four of the chain left, and Y,
 * older than all of them, stayed.) */
Test(tier_evict_order, the_oldest_leaf_of_any_size_class_leaves_first)
{
    for (int p = 0; p < TIER_EVICT_N; p++) {
        struct tier_cfg cfg = { .warm_bytes = 32 * MIB, .high_wm = 0.5, .low_wm = 0.4,
                                .evict_policy = (enum tier_evict_policy)p };
        const char *name = tier_evict_policy_name((enum tier_evict_policy)p);
        struct tier *t = NULL;
        struct tier_key x, y, c[15];
        uint32_t ids[15];
        uint64_t offs[15];
        char why[256];

        cr_assert_eq(tier_create(&cfg, &t), 0);
        t_keys((kvt_key *)&x, 1, 31);
        t_keys((kvt_key *)&y, 1, 32);
        t_keys((kvt_key *)c, 15, 33);
        cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 7, NULL, &x, 1, ids, offs), 1);
        cr_assert_eq(tier_commit(t_tns(t, 1, MIB), 7, &x, 1), 1);
        cr_assert_eq(tier_reserve(t_tns(t, 2, MIB / 2), 7, NULL, &y, 1, ids, offs), 1);
        cr_assert_eq(tier_commit(t_tns(t, 2, MIB / 2), 7, &y, 1), 1);
        cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(t, 1, MIB), .keys = &x,
            .n = 1, .ids = ids, .offs = offs }), 1);
        tier_release(t, ids, 1, false);
        cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 7, NULL, c, 15, ids, offs), 15);
        cr_assert_eq(tier_commit(t_tns(t, 1, MIB), 7, c, 15), 15);
        cr_assert_eq(tier_maintain(t), 5, "%s: down to the low mark, 5 blocks out", name);
        cr_assert_eq(tier_lookup(t_tns_of(t, 2), &y, 1, NULL), 0,
                     "%s: Y, the oldest leaf (of the other size class), left", name);
        cr_assert_eq(tier_lookup(t_tns_of(t, 1), &x, 1, NULL), 0, "%s: then X", name);
        cr_assert_eq(tier_lookup(t_tns_of(t, 1), c, 15, NULL), 12,
                     "%s: then the chain's last 3 blocks", name);
        cr_assert_eq(tier_check(t, why, sizeof(why)), 0, "%s: tier_check: %s", name, why);
        tier_destroy(t);
    }
}
