/* SPDX-License-Identifier: MIT */
/*
 * tier_why.c - miss attribution: the bounded event memory (tier_why.c) and
 * the store's answers built on it: why each missed key of a lookup missed
 * (evicted, removed, aborted, being written, behind a missing block, never
 * stored) and one key's story.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "t.h"
#include "tier.h"
#include "tier_why.h"

#define MIB (1u << 20)

Test(tier_why, remembers_the_last_event_of_each_key)
{
    struct tier_why *w;
    struct tier_key k[3];
    uint8_t ev, lvl;
    uint64_t at;

    t_keys((kvt_key *)k, 3, 1);
    cr_assert_eq(tier_why_create(100, &w), 0);
    cr_assert_eq(tier_why_capacity(w), 128);
    cr_assert_not(tier_why_find(w, 1, &k[0], &ev, &lvl, &at));
    tier_why_put(w, 1, &k[0], TIER_EV_DROPPED, TIER_L_WARM, 10);
    tier_why_put(w, 2, &k[0], TIER_EV_REMOVED, TIER_L_COLD, 11); /* other namespace */
    tier_why_put(w, 1, &k[0], TIER_EV_EVICTED, TIER_L_COLD, 12); /* replaces */
    cr_assert(tier_why_find(w, 1, &k[0], &ev, &lvl, &at));
    cr_assert_eq(ev, TIER_EV_EVICTED);
    cr_assert_eq(lvl, TIER_L_COLD);
    cr_assert_eq(at, 12);
    cr_assert(tier_why_find(w, 2, &k[0], &ev, &lvl, &at));
    cr_assert_eq(ev, TIER_EV_REMOVED);
    cr_assert_not(tier_why_find(w, 1, &k[1], &ev, &lvl, &at));
    cr_assert_eq(tier_why_count(w), 2);
    tier_why_destroy(w);
}

Test(tier_why, stays_bounded_and_forgets_the_oldest)
{
    static struct tier_key k[4096];
    struct tier_why *w;
    uint8_t ev, lvl;
    uint64_t at;
    int recent = 0, old = 0;

    t_keys((kvt_key *)k, 4096, 2);
    cr_assert_eq(tier_why_create(256, &w), 0);
    for (int i = 0; i < 4096; i++)
        tier_why_put(w, 1, &k[i], TIER_EV_DROPPED, TIER_L_WARM, (uint64_t)i);
    cr_assert_leq(tier_why_count(w), tier_why_capacity(w));
    cr_assert_geq(tier_why_count(w), tier_why_capacity(w) * 3 / 4, "the table is barely used");
    for (int i = 0; i < 256; i++)
        old += tier_why_find(w, 1, &k[i], &ev, &lvl, &at);
    for (int i = 4096 - 64; i < 4096; i++)
        recent += tier_why_find(w, 1, &k[i], &ev, &lvl, &at);
    /* the newest events survive (each evicts the oldest of its window) */
    cr_assert_eq(recent, 64, "only %d of the 64 newest events kept", recent);
    cr_assert_lt(old, 16, "%d of the 256 oldest events kept", old);
    tier_why_destroy(w);
}

/* A 16 MiB store without a cold tier: evicted blocks are lost. */
static struct tier *store(void)
{
    struct tier_cfg cfg = { .warm_bytes = 16 * MIB, .high_wm = 0.9, .low_wm = 0.5 };
    struct tier *t = NULL;

    cr_assert_eq(tier_create(&cfg, &t), 0);
    return t;
}

static void put(struct tier *t, const struct tier_key *k, size_t n, const struct tier_key *parent)
{
    uint32_t ids[16];
    uint64_t offs[16];

    cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 7, parent, k, n, ids, offs), (int)n);
    cr_assert_eq(tier_commit(t_tns(t, 1, MIB), 7, k, n), n);
}

Test(tier_why, each_missed_key_gets_its_cause)
{
    struct tier *t = store();
    struct tier_key a[8], b[2], c[2], d[2], other[12];
    struct tier_misses m = { 0 };
    struct tier_story st;
    uint32_t ids[2];
    uint64_t offs[2];

    t_keys((kvt_key *)a, 8, 10);
    t_keys((kvt_key *)b, 2, 11);
    t_keys((kvt_key *)c, 2, 12);
    t_keys((kvt_key *)d, 2, 13);
    t_keys((kvt_key *)other, 12, 14);
    put(t, a, 8, NULL);
    /* a[5..7] removed by a client */
    cr_assert_eq(tier_remove(t_tns_of(t, 1), a + 5, 3), 3);
    /* b: reserved and aborted; c: reserved, still being written */
    cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 7, NULL, b, 2, ids, offs), 2);
    cr_assert_eq(tier_abort(t_tns_of(t, 1), 7, b, 2), 2);
    cr_assert_eq(tier_reserve(t_tns(t, 1, MIB), 8, NULL, c, 2, ids, offs), 2);
    /* a[0..4] hit; a[5..7] removed; then b (aborted), c (writing), d (never) */
    {
        struct tier_key chain[15];

        memcpy(chain, a, sizeof(a));
        memcpy(chain + 8, b, sizeof(b));
        memcpy(chain + 10, c, sizeof(c));
        memcpy(chain + 12, d, sizeof(d));
        chain[14] = a[1]; /* present, but behind the misses: a broken chain */
        cr_assert_eq(tier_lookup_why(t_tns_of(t, 1), chain, 15, NULL, &m), 5);
    }
    cr_assert_eq(m.cause[TIER_EV_REMOVED], 3);
    cr_assert_eq(m.cause[TIER_EV_ABORTED], 2);
    cr_assert_eq(m.cause[TIER_MISS_WRITING], 2);
    cr_assert_eq(m.cause[TIER_EV_NONE], 2);
    cr_assert_eq(m.cause[TIER_MISS_BROKEN], 1);
    /* eviction: fill the pool with another chain until a[0..4] are dropped */
    put(t, other, 12, NULL);
    cr_assert_gt(tier_maintain(t), 0);
    memset(&m, 0, sizeof(m));
    cr_assert_eq(tier_lookup_why(t_tns_of(t, 1), a, 5, NULL, &m), 0, "a was not evicted");
    cr_assert_eq(m.cause[TIER_EV_DROPPED], 5);
    cr_assert_lt(m.evicted_age_ms, 5 * 60000u, "ages are since the eviction");
    /* stories */
    tier_story_get(t_tns_of(t, 1), &a[0], &st);
    cr_assert_not(st.present);
    cr_assert_eq(st.event, TIER_EV_DROPPED);
    cr_assert_eq(st.event_level, TIER_L_WARM);
    tier_story_get(t_tns_of(t, 1), &other[0], &st); /* the chain's root stays longest */
    cr_assert(st.present);
    cr_assert_eq(st.level, TIER_L_WARM);
    cr_assert(st.chain_ok);
    tier_story_get(t_tns_of(t, 1), &c[0], &st);
    cr_assert(st.writing);
    tier_story_get(t_tns_of(t, 1), &d[0], &st);
    cr_assert_not(st.present);
    cr_assert_eq(st.event, TIER_EV_NONE);
    tier_story_get(t_tns(t, 2, MIB), &other[0], &st); /* another namespace knows nothing */
    cr_assert_not(st.present);
    cr_assert_eq(st.event, TIER_EV_NONE);
    tier_destroy(t);
}
