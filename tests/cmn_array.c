/* SPDX-License-Identifier: MIT */
/*
 * cmn_array.c - common/array.c and common/log.c: an array grown by
 * cmn_grow keeps its elements, zeroes the new ones, doubles from its first
 * length, and is left untouched when the size would overflow;
 * cmn_pow2_fit's bounds; cmn_logf's line and its NULL log.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_common.h"

struct rec {
    uint64_t a;
    uint32_t b;
};

Test(cmn_array, grows_from_nothing_by_doubling)
{
    struct rec *v = NULL;
    size_t cap = 0;

    cr_assert_eq(CMN_GROW(&v, &cap, 1, 16), 0);
    cr_assert_not_null(v);
    cr_expect_eq(cap, 16, "first length: expected 16, got %zu", cap);
    cr_assert_eq(CMN_GROW(&v, &cap, 17, 16), 0);
    cr_expect_eq(cap, 32, "one doubling: expected 32, got %zu", cap);
    cr_assert_eq(CMN_GROW(&v, &cap, 200, 16), 0);
    cr_expect_eq(cap, 256, "to the first doubling that holds 200: expected 256, got %zu", cap);
    free(v);
}

Test(cmn_array, keeps_the_elements_and_zeroes_the_new)
{
    struct rec *v = NULL, *before;
    size_t cap = 0;

    cr_assert_eq(CMN_GROW(&v, &cap, 4, 4), 0);
    for (size_t i = 0; i < cap; i++)
        v[i] = (struct rec){ .a = 1000 + i, .b = (uint32_t)i };
    cr_assert_eq(CMN_GROW(&v, &cap, 5, 4), 0);
    cr_assert_eq(cap, 8);
    for (size_t i = 0; i < 4; i++)
        cr_expect(v[i].a == 1000 + i && v[i].b == i, "element %zu lost in the move", i);
    for (size_t i = 4; i < 8; i++)
        cr_expect(v[i].a == 0 && v[i].b == 0, "new element %zu not zeroed", i);
    /* room already: nothing moves, nothing is cleared */
    before = v;
    v[7].a = 77;
    cr_assert_eq(CMN_GROW(&v, &cap, 8, 4), 0);
    cr_expect_eq(v, before);
    cr_expect_eq(cap, 8);
    cr_expect_eq(v[7].a, 77, "an array with room must be left alone");
    free(v);
}

Test(cmn_array, overflow_is_refused_and_leaves_the_array)
{
    struct rec *v = NULL, *before;
    size_t cap = 0;

    cr_assert_eq(CMN_GROW(&v, &cap, 2, 2), 0);
    before = v;
    cr_expect_eq(CMN_GROW(&v, &cap, SIZE_MAX / sizeof(*v) + 1, 2), -ENOMEM);
    cr_expect_eq(CMN_GROW(&v, &cap, SIZE_MAX, 2), -ENOMEM);
    cr_expect_eq(v, before, "a refused growth must not move the array");
    cr_expect_eq(cap, 2, "a refused growth must not change its length: got %zu", cap);
    free(v);
}

Test(cmn_array, pow2_fit_within_its_bounds)
{
    cr_expect_eq(cmn_pow2_fit(0, 64, 1u << 30), 64);
    cr_expect_eq(cmn_pow2_fit(64, 64, 1u << 30), 64);
    cr_expect_eq(cmn_pow2_fit(65, 64, 1u << 30), 128);
    cr_expect_eq(cmn_pow2_fit(5000, 1024, 1u << 31), 8192);
    cr_expect_eq(cmn_pow2_fit(UINT32_MAX, 64, 1u << 30), 1u << 30, "capped at hi");
}

static void keep(void *ctx, const char *msg)
{
    strncpy(ctx, msg, 599);
}

Test(cmn_array, logf_formats_one_line_and_cuts_long_ones)
{
    char got[600] = "", big[700];

    cmn_logf(keep, got, "cold tier: %s at %d", "a fault", 42);
    cr_expect_str_eq(got, "cold tier: a fault at 42");
    memset(big, 'x', sizeof(big) - 1);
    big[sizeof(big) - 1] = '\0';
    cmn_logf(keep, got, "%s", big);
    cr_expect_eq(strlen(got), 511, "a long line is cut at 511 bytes, got %zu", strlen(got));
    cmn_logf(NULL, got, "%s", "nobody listens"); /* must not crash */
}
