/* SPDX-License-Identifier: MIT */
/*
 * tier_invariants.c - random sequences of every store operation (reserve
 * with and without parents and duplicates, two block sizes, commit, abort,
 * get, release, remove, watermark eviction, a dying owner's reclaim) in a
 * small pool, with tier_check() after every step. Fixed seeds, printed on
 * failure; KVT_TEST_SEED replays one.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"
#include "tier.h"

#define NKEYS 96
#define NOWN 3

struct held {
    uint32_t ids[8];
    int n;
};

static uint64_t rnd(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

/* A store of warm only, created as cfg asks (the test fails if it cannot be). */
static struct tier *open_store(struct tier_cfg cfg)
{
    struct tier *t = NULL;

    cr_assert_eq(tier_create(&cfg, &t), 0);
    return t;
}

static void run(uint64_t seed, int steps)
{
    struct tier *t =
        open_store((struct tier_cfg){ .warm_bytes = 8u << 20, .high_wm = 0.9, .low_wm = 0.6 });
    struct tier_key keys[NKEYS];
    static struct held lease[64];
    static uint32_t resv[NOWN][4096];
    int nlease = 0, nresv[NOWN] = { 0 };
    uint64_t s = seed | 1;
    char why[256];

    t_keys((kvt_key *)keys, NKEYS, seed);
    for (int step = 0; step < steps; step++) {
        int op = (int)(rnd(&s) % 8), own = (int)(rnd(&s) % NOWN);
        /* two namespaces, two block sizes: 256 KiB and 384 KiB */
        uint32_t ns = 1 + (uint32_t)(rnd(&s) % 2);
        uint64_t bytes = ns == 1 ? 256u << 10 : 384u << 10;
        size_t at = rnd(&s) % NKEYS, n = 1 + rnd(&s) % 8;
        uint32_t ids[8];
        uint64_t offs[8];

        if (at + n > NKEYS)
            n = NKEYS - at;
        switch (op) {
        case 0: case 1: { /* reserve a chain piece, under its parent half the time */
            const struct tier_key *parent = at > 0 && rnd(&s) % 2 ? &keys[at - 1] : NULL;
            int rc = tier_reserve(t_tns(t, ns, bytes), (uint32_t)own + 1, parent, keys + at, n, ids,
                                  offs);

            cr_assert(rc >= 0 || rc == -ENOSPC, "seed %llu step %d: reserve %d",
                      (unsigned long long)seed, step, rc);
            for (size_t i = 0; rc > 0 && i < n && nresv[own] < 4096; i++)
                if (ids[i] != TIER_NONE)
                    resv[own][nresv[own]++] = ids[i];
            if (rc > 0 && rnd(&s) % 4) /* mostly the writer commits at once */
                tier_commit(t_tns(t, ns, bytes), (uint32_t)own + 1, keys + at, n);
            break;
        }
        case 2: case 3:
            tier_commit(t_tns(t, ns, bytes), (uint32_t)own + 1, keys + at, n);
            break;
        case 4:
            tier_abort(t_tns_of(t, ns), (uint32_t)own + 1, keys + at, n);
            break;
        case 5: { /* get, or release an older lease */
            if (nlease < 64 && rnd(&s) % 2) {
                int rc = tier_get(&(struct tier_get_args){ .ns = t_tns(t, ns, bytes),
                    .keys = keys + at, .n = n, .ids = lease[nlease].ids, .offs = offs });

                if (rc > 0)
                    lease[nlease++].n = rc;
            } else if (nlease > 0) {
                int k = (int)(rnd(&s) % (uint64_t)nlease);

                tier_release(t, lease[k].ids, (size_t)lease[k].n, false);
                lease[k] = lease[--nlease];
            }
            break;
        }
        case 6:
            if (rnd(&s) % 2)
                tier_remove(t_tns_of(t, ns), keys + at, n);
            else
                tier_maintain(t);
            break;
        case 7: /* the owner dies: its reservations are reclaimed by id */
            tier_abort_ids(t, (uint32_t)own + 1, resv[own], (size_t)nresv[own]);
            nresv[own] = 0;
            break;
        }
        if (tier_check(t, why, sizeof(why)) != 0)
            cr_assert_fail("seed %llu step %d op %d: %s", (unsigned long long)seed, step, op,
                           why);
    }
    {
        struct tier_stats st;

        /* the sequence must have reached the interesting paths */
        tier_stats_get(t, &st);
        cr_assert_gt(st.evictions[TIER_L_WARM], 0, "seed %llu: no eviction happened",
                     (unsigned long long)seed);
        cr_assert_gt(st.get_blocks, 0);
        cr_assert_gt(st.put_blocks, 0);
    }
    tier_destroy(t);
}

Test(tier_invariants, random_operations_keep_every_invariant)
{
    const char *env = getenv("KVT_TEST_SEED");

    if (env && *env) {
        run(strtoull(env, NULL, 10), 20000);
        return;
    }
    for (uint64_t seed = 1; seed <= 8; seed++)
        run(seed, 4000);
}

/* tier_check must pass; what it found is the failure's message. */
static void check_ok(struct tier *t)
{
    char why[256];
    int rc = tier_check(t, why, sizeof(why));

    cr_assert_eq(rc, 0, "%s", why);
}

Test(tier_invariants, check_catches_a_broken_counter)
{
    struct tier *t = open_store((struct tier_cfg){ .warm_bytes = 8u << 20 });
    struct tier_key k[2];
    uint32_t ids[2];
    uint64_t offs[2];
    char why[256];

    /* the checker must be able to fail: a leaked lease breaks the counters */
    t_keys((kvt_key *)k, 2, 3);
    cr_assert_eq(tier_reserve(t_tns(t, 1, 4096), 1, NULL, k, 2, ids, offs), 2);
    cr_assert_eq(tier_commit(t_tns(t, 1, 4096), 1, k, 2), 2);
    check_ok(t);
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(t, 1, 4096), .keys = k,
        .n = 2, .ids = ids, .offs = offs }), 2);
    tier_release(t, ids, 1, false);
    tier_release(t, ids, 1, false); /* released twice, the other never */
    cr_assert_eq(tier_check(t, why, sizeof(why)), -EUCLEAN);
    tier_destroy(t);
}

/* Found by fuzz_proto: a put whose parent is absent and whose first key is
 * that same parent reserved the key in the ghost made for the parent, and
 * the ghost's cleanup then deleted the reserved entry: its slot was held by
 * nothing, and the block could never be committed or reached. */
Test(tier_invariants, a_key_equal_to_its_absent_parent_keeps_its_entry)
{
    struct tier *t = open_store((struct tier_cfg){ .warm_bytes = 8u << 20 });
    struct tier_key k[2];
    uint32_t ids[2];
    uint64_t offs[2];

    t_keys((kvt_key *)k, 1, 5);
    k[1] = k[0]; /* the key twice, under itself */
    cr_assert_eq(tier_reserve(t_tns(t, 1, 65536), 1, &k[0], k, 2, ids, offs), 1);
    check_ok(t);
    cr_assert_eq(tier_commit(t_tns(t, 1, 65536), 1, k, 1), 1);
    cr_assert_eq(tier_lookup(t_tns_of(t, 1), k, 1, NULL), 1);
    check_ok(t);
    tier_destroy(t);
}

/* Found by the simulation once pins changed its schedule: a put of a key
 * that a ghost stood for (here the absent parent of a block put first)
 * reused the ghost and kept its link (none), so the block's real parent
 * counted as a leaf and was evicted before it, leaving it and its child
 * unreachable. Leaf-first: a parent never leaves before its children. */
Test(tier_invariants, a_ghost_put_under_its_parent_hangs_under_it)
{
    /* no watermarks: each put makes room for itself, one oldest leaf at a time */
    struct tier *t =
        open_store((struct tier_cfg){ .warm_bytes = 4u << 20, .high_wm = 1.0, .low_wm = 1.0 });
    struct tier_ns *ns = t_tns(t, 1, 65536);
    struct tier_key k[3], f; /* P, K, C */
    uint32_t ids[1];
    uint64_t offs[1];

    t_keys((kvt_key *)k, 3, 11);
    cr_assert_eq(tier_reserve(ns, 1, NULL, &k[0], 1, ids, offs), 1);
    cr_assert_eq(tier_reserve(ns, 1, &k[1], &k[2], 1, ids, offs), 1); /* K: a ghost */
    cr_assert_eq(tier_reserve(ns, 1, &k[0], &k[1], 1, ids, offs), 1); /* K under P */
    cr_assert_eq(tier_commit(ns, 1, k, 3), 3);
    for (uint64_t i = 0; i < 128; i++) {
        uint8_t tiers[3];

        t_keys((kvt_key *)&f, 1, 1000 + i);
        cr_assert_eq(tier_reserve(ns, 1, NULL, &f, 1, ids, offs), 1);
        cr_assert_eq(tier_commit(ns, 1, &f, 1), 1);
        tier_lookup(ns, k, 3, tiers);
        if (tiers[0] == TIER_L_NONE)
            cr_assert(tiers[1] == TIER_L_NONE && tiers[2] == TIER_L_NONE,
                      "P was evicted after %llu puts while K (%u) or C (%u) stays",
                      (unsigned long long)i, tiers[1], tiers[2]);
        check_ok(t);
    }
    tier_destroy(t);
}

/* Found by review: re-linking a reused ghost under a new parent p that was
 * itself a ghost above the ghost's old parent freed p (the old chain's
 * ghosts went, p with them), and the block hung under a free entry; a key
 * inserted there later made a cycle, and the orphan sweep ran past its
 * buffer (a client of any tenant could crash tierd). */
Test(tier_invariants, a_ghost_relinked_above_its_old_chain_keeps_its_parent)
{
    struct tier *t = open_store((struct tier_cfg){ .warm_bytes = 8u << 20 });
    struct tier_key k[6]; /* B, Z, G0, G1, N0, N1 */
    uint32_t ids[2];
    uint64_t offs[2];

    t_keys((kvt_key *)k, 6, 77);
    /* Z under an absent B (a ghost); then B under G0 and G0 under G1, each
     * aborted: ghosts G1 <- G0 <- B <- Z */
    cr_assert_eq(tier_reserve(t_tns(t, 1, 65536), 1, &k[0], &k[1], 1, ids, offs), 1);
    cr_assert_eq(tier_commit(t_tns(t, 1, 65536), 1, &k[1], 1), 1);
    cr_assert_eq(tier_reserve(t_tns(t, 1, 65536), 2, &k[2], &k[0], 1, ids, offs), 1);
    cr_assert_eq(tier_abort(t_tns_of(t, 1), 2, &k[0], 1), 1);
    cr_assert_eq(tier_reserve(t_tns(t, 1, 65536), 2, &k[3], &k[2], 1, ids, offs), 1);
    cr_assert_eq(tier_abort(t_tns_of(t, 1), 2, &k[2], 1), 1);
    check_ok(t);
    /* B straight under G1: G0 goes, G1 must stay (B hangs under it) */
    cr_assert_eq(tier_reserve(t_tns(t, 1, 65536), 2, &k[3], &k[0], 1, ids, offs), 1);
    check_ok(t);
    cr_assert_eq(tier_commit(t_tns(t, 1, 65536), 2, &k[0], 1), 1);
    /* new keys take whatever entries were freed */
    cr_assert_eq(tier_reserve(t_tns(t, 1, 65536), 3, &k[0], &k[4], 2, ids, offs), 2);
    cr_assert_eq(tier_commit(t_tns(t, 1, 65536), 3, &k[4], 2), 2);
    check_ok(t);
    tier_maintain(t);
    check_ok(t);
    tier_destroy(t);
}
