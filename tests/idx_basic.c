/* SPDX-License-Identifier: MIT */
/*
 * idx_basic.c - the in-memory index: insert/find/delete across growth,
 * namespaces kept apart, ids reused, memory per entry.
 */
#include <criterion/criterion.h>
#include <string.h>

#include "idx.h"
#include "t.h"

static struct tier_key key_of(uint64_t seed)
{
    struct tier_key k;

    t_keys((kvt_key *)&k, 1, seed);
    return k;
}

Test(idx_basic, insert_find_delete_across_growth)
{
    enum { N = 200000 };
    struct idx *x;
    static uint32_t ids[N];

    cr_assert_eq(idx_create(16, &x), 0);
    for (uint32_t i = 0; i < N; i++) {
        struct tier_key k = key_of(i);

        cr_assert_eq(idx_find(x, 1, &k), TIER_NONE);
        cr_assert_eq(idx_insert(x, 1, &k, &ids[i]), 0);
        idx_at(x, ids[i])->state = IDX_COMMITTED;
    }
    cr_assert_eq(idx_count(x), N);
    for (uint32_t i = 0; i < N; i++) {
        struct tier_key k = key_of(i);
        uint32_t id = idx_find(x, 1, &k);

        cr_assert_eq(id, ids[i], "key %u: found id %u, expected %u", i, id, ids[i]);
        cr_assert_eq(memcmp(idx_at(x, id)->key.b, k.b, 32), 0);
    }
    /* delete every other one; the rest stay findable */
    for (uint32_t i = 0; i < N; i += 2)
        idx_delete(x, ids[i]);
    cr_assert_eq(idx_count(x), N / 2);
    for (uint32_t i = 0; i < N; i++) {
        struct tier_key k = key_of(i);

        if (i % 2)
            cr_assert_eq(idx_find(x, 1, &k), ids[i]);
        else
            cr_assert_eq(idx_find(x, 1, &k), TIER_NONE, "deleted key %u still found", i);
    }
    /* freed ids are reused before the array grows */
    {
        size_t before = idx_mem_bytes(x);
        struct tier_key k = key_of(N + 1);
        uint32_t id;

        cr_assert_eq(idx_insert(x, 1, &k, &id), 0);
        cr_assert_lt(id, N, "a freed id was not reused");
        cr_assert_eq(idx_mem_bytes(x), before);
    }
    idx_destroy(x);
}

Test(idx_basic, namespaces_keep_equal_keys_apart)
{
    struct idx *x;
    struct tier_key k = key_of(42);
    uint32_t a, b;

    cr_assert_eq(idx_create(0, &x), 0);
    cr_assert_eq(idx_insert(x, 1, &k, &a), 0);
    cr_assert_eq(idx_find(x, 2, &k), TIER_NONE, "a key of ns 1 leaked into ns 2");
    cr_assert_eq(idx_insert(x, 2, &k, &b), 0);
    cr_assert_neq(a, b);
    cr_assert_eq(idx_find(x, 1, &k), a);
    cr_assert_eq(idx_find(x, 2, &k), b);
    idx_delete(x, a);
    cr_assert_eq(idx_find(x, 1, &k), TIER_NONE);
    cr_assert_eq(idx_find(x, 2, &k), b);
    idx_destroy(x);
}

Test(idx_basic, memory_per_entry_within_budget)
{
    enum { N = 1 << 16 };
    struct idx *x;

    cr_assert_leq(sizeof(struct idx_entry), 128);
    cr_assert_eq(idx_create(N, &x), 0);
    for (uint32_t i = 0; i < N; i++) {
        struct tier_key k = key_of(i);
        uint32_t id;

        cr_assert_eq(idx_insert(x, 1, &k, &id), 0);
    }
    cr_assert_leq((double)idx_mem_bytes(x) / N, 128.0, "index bytes per entry: %.1f",
                  (double)idx_mem_bytes(x) / N);
    idx_destroy(x);
}
