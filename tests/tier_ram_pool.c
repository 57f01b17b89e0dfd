/* SPDX-License-Identifier: MIT */
/*
 * tier_ram_pool.c - the warm pool: 4 KiB-aligned slots, several size
 * classes sharing segments, segments returned when empty, -ENOSPC when full.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "tier_ram.h"

static struct tier_ram *open_pool(uint64_t bytes)
{
    struct tier_ram_cfg cfg = { .bytes = bytes };
    struct tier_ram *r = NULL;

    cr_assert_eq(tier_ram_open(&cfg, &r), 0);
    return r;
}

Test(tier_ram_pool, slots_are_aligned_distinct_and_writable)
{
    struct tier_ram *r = open_pool(32u << 20);
    int c = tier_ram_class(r, 12288);
    uint64_t off[64];

    cr_assert_geq(c, 0);
    for (int i = 0; i < 64; i++) {
        cr_assert_eq(tier_ram_alloc(r, c, 1, &off[i]), 0);
        cr_assert_eq(off[i] % 4096, 0, "slot %d at %llu is not 4 KiB aligned", i,
                     (unsigned long long)off[i]);
        cr_assert_leq(off[i] + 12288, tier_ram_bytes(r));
        memset((uint8_t *)tier_ram_base(r) + off[i], i, 12288);
    }
    for (int i = 0; i < 64; i++) {
        const uint8_t *p = (uint8_t *)tier_ram_base(r) + off[i];

        cr_assert_eq(p[0], i, "slot %d overlaps another", i);
        cr_assert_eq(p[12287], i, "slot %d overlaps another", i);
    }
    cr_assert_eq(tier_ram_used(r), 64ull * 12288);
    for (int i = 0; i < 64; i++)
        tier_ram_free(r, off[i]);
    cr_assert_eq(tier_ram_used(r), 0);
    tier_ram_close(r);
}

Test(tier_ram_pool, bad_classes_are_refused)
{
    struct tier_ram *r = open_pool(32u << 20);

    cr_assert_eq(tier_ram_class(r, 0), -EINVAL);
    cr_assert_eq(tier_ram_class(r, 4095), -EINVAL, "a slot must be a 4 KiB multiple");
    cr_assert_eq(tier_ram_class(r, tier_ram_seg_bytes(r) + 4096), -EINVAL);
    cr_assert_eq(tier_ram_class(r, 8192), tier_ram_class(r, 8192), "one class per size");
    tier_ram_close(r);
}

Test(tier_ram_pool, full_pool_then_empty_segments_go_to_other_classes)
{
    struct tier_ram *r = open_pool(32u << 20);
    uint64_t seg = tier_ram_seg_bytes(r);
    int big = tier_ram_class(r, seg); /* one slot per segment */
    int small = tier_ram_class(r, 4096);
    uint64_t nseg = tier_ram_bytes(r) / seg, off[64], x;

    cr_assert_leq(nseg, 64);
    for (uint64_t i = 0; i < nseg; i++)
        cr_assert_eq(tier_ram_alloc(r, big, 1, &off[i]), 0);
    cr_assert_eq(tier_ram_alloc(r, big, 1, &x), -ENOSPC, "pool should be full");
    cr_assert_eq(tier_ram_alloc(r, small, 1, &x), -ENOSPC, "no segment left for another class");
    tier_ram_free(r, off[0]);
    cr_assert_eq(tier_ram_alloc(r, small, 1, &x), 0, "an emptied segment serves another class");
    cr_assert_eq(x / seg, off[0] / seg, "the small slot should come from the freed segment");
    cr_assert_eq(tier_ram_alloc(r, big, 1, &x), -ENOSPC);
    tier_ram_close(r);
}

/* Bug found in review: size classes were never given back, so a 33rd block
 * size failed for ever even with an empty pool. */
Test(tier_ram_pool, classes_without_segments_are_recycled)
{
    struct tier_ram *r = open_pool(32u << 20);
    uint64_t off;

    for (uint64_t k = 1; k <= 3 * TIER_RAM_CLASSES; k++) {
        int c = tier_ram_class(r, k * 4096);

        cr_assert_geq(c, 0, "size %llu: no class (%d)", (unsigned long long)(k * 4096), c);
        cr_assert_eq(tier_ram_alloc(r, c, 1, &off), 0);
        tier_ram_free(r, off);
    }
    cr_assert_eq(tier_ram_used(r), 0);
    tier_ram_close(r);
}
