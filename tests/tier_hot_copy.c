/* SPDX-License-Identifier: MIT */
/*
 * tier_hot_copy.c - the hot tier's device interface: copies in and out of
 * the device pool come back byte-identical, completions arrive through the
 * eventfd and tier_hot_poll, bad ranges are refused, and without a GPU the
 * automatic choice emulates the device and says so.
 * KVT_TEST_HOT=cuda runs the same checks on the CUDA backend (tests/gpu/).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"
#include "tier_hot.h"

#define BLK (256u << 10)

static int logged;

static void count_log(void *ctx, const char *msg)
{
    (void)ctx;
    (void)msg;
    logged++;
}

static enum tier_hot_kind wanted(void)
{
    const char *k = getenv("KVT_TEST_HOT");

    return k && strcmp(k, "cuda") == 0 ? TIER_HOT_CUDA : TIER_HOT_EMU;
}

static void done(void *ctx, int rc)
{
    int *n = ctx;

    cr_assert_eq(rc, 0, "copy failed: %d", rc);
    (*n)++;
}

Test(tier_hot_copy, copies_round_trip_through_the_device)
{
    struct tier_hot_cfg cfg = { .kind = wanted(), .bytes = 64u << 20 };
    struct tier_hot *h = NULL;
    uint8_t *src = NULL, *dst = NULL;
    int n = 0, rc = tier_hot_open(&cfg, &h);
    struct pollfd p;

    cr_assert_eq(rc, 0, "tier_hot_open: %d", rc);
    cr_assert_eq(tier_hot_kind(h), cfg.kind);
    cr_assert_eq(posix_memalign((void **)&src, 4096, 32 * BLK), 0);
    cr_assert_eq(posix_memalign((void **)&dst, 4096, 32 * BLK), 0);
    cr_assert_eq(tier_hot_register_host(h, src, 32 * BLK), 0);
    for (int i = 0; i < 32; i++)
        t_fill(src + (size_t)i * BLK, BLK, (uint64_t)i);
    /* in at scattered device offsets, out in reverse order */
    for (int i = 0; i < 32; i++)
        cr_assert_eq(tier_hot_copy_in(h, (uint64_t)((i * 7) % 32) * BLK, src + (size_t)i * BLK,
                                      BLK, done, &n), 0);
    p = (struct pollfd){ .fd = tier_hot_event_fd(h), .events = POLLIN };
    cr_assert_eq(poll(&p, 1, 5000), 1, "no completion signalled within 5 s");
    while (n < 32)
        cr_assert_geq(tier_hot_poll(h, true), 0);
    cr_assert_eq(tier_hot_inflight(h), 0);
    memset(dst, 0, 32 * BLK);
    for (int i = 31; i >= 0; i--)
        cr_assert_eq(tier_hot_copy_out(h, dst + (size_t)i * BLK,
                                       (uint64_t)((i * 7) % 32) * BLK, BLK, done, &n), 0);
    while (n < 64)
        cr_assert_geq(tier_hot_poll(h, true), 0);
    for (int i = 0; i < 32; i++) {
        long bad = t_check(dst + (size_t)i * BLK, BLK, (uint64_t)i);

        cr_assert_eq(bad, -1, "block %d: wrong byte at %ld after the device", i, bad);
    }
    tier_hot_close(h);
    free(src);
    free(dst);
}

Test(tier_hot_copy, ranges_outside_the_pool_are_refused)
{
    struct tier_hot_cfg cfg = { .kind = wanted(), .bytes = 3u << 20 };
    struct tier_hot *h = NULL;
    static uint8_t buf[4096];

    cr_assert_eq(tier_hot_open(&cfg, &h), 0);
    cr_assert_eq(tier_hot_bytes(h), 4u << 20, "pools are whole 2 MiB pages");
    cr_assert_eq(tier_hot_copy_in(h, (4u << 20) - 4095, buf, 4096, NULL, NULL), -EINVAL);
    cr_assert_eq(tier_hot_copy_out(h, buf, UINT64_MAX - 10, 4096, NULL, NULL), -EINVAL);
    cr_assert_eq(tier_hot_copy_in(h, 0, buf, 0, NULL, NULL), -EINVAL);
    cr_assert_eq(tier_hot_copy_in(h, 0, NULL, 4096, NULL, NULL), -EINVAL);
    cr_assert_eq(tier_hot_inflight(h), 0);
    tier_hot_close(h);
}

Test(tier_hot_copy, without_a_gpu_auto_emulates_and_says_so)
{
    struct tier_hot_cfg cfg = { .kind = TIER_HOT_AUTO, .bytes = 2u << 20, .log = count_log };
    struct tier_hot *h = NULL;

    if (wanted() == TIER_HOT_CUDA)
        cr_skip_test("a GPU is present: nothing is emulated");
    logged = 0;
    cr_assert_eq(tier_hot_open(&cfg, &h), 0);
    cr_assert_eq(tier_hot_kind(h), TIER_HOT_EMU);
    cr_assert_eq(logged, 1, "the fallback to emulation is logged once");
    tier_hot_close(h);
    cfg.kind = TIER_HOT_CUDA;
    cr_assert_eq(tier_hot_open(&cfg, &h), -ENODEV, "asking for CUDA without a GPU fails");
}
