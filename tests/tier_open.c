/* SPDX-License-Identifier: MIT */
/*
 * tier_open.c - the store opened in one call with the tiers it owns
 * (tier_open / tier_close): what it opened is what tier_cold_of and
 * tier_hot_of name, a clean close leaves the disk servable after a reopen,
 * and a failed open says which part failed and leaves no fd behind.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"
#include "t_fds.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_hot.h"
#include "tier_remote.h"

#define BLK (64u << 10)

/* File descriptors this process holds now. */
static int fds_open(void)
{
    int n = t_fds_open();

    cr_assert_geq(n, 0, "/proc/self/fd: %s", strerror(-n));
    return n;
}

Test(tier_open, owns_its_tiers_and_a_reopen_serves_the_disk)
{
    char dir[] = "/tmp/kvt-open-XXXXXX";
    struct tier_cold_cfg cc = { .dir = dir, .bytes = 16u << 20 };
    struct tier_hot_cfg hc = { .kind = TIER_HOT_EMU, .bytes = 4u << 20 };
    struct tier_open_cfg oc = { .store = { .warm_bytes = 4u << 20 }, .cold = &cc, .hot = &hc };
    struct tier_key k[3];
    uint32_t ids[3];
    uint64_t offs[3];
    uint8_t lvl[3];
    struct tier *t;
    enum tier_part part = 0;

    cr_assert_not_null(mkdtemp(dir));
    t_keys((kvt_key *)k, 3, 7);
    cr_assert_eq(tier_open(&oc, &t, &part), 0);
    cr_assert_not_null(tier_cold_of(t));
    cr_assert_not_null(tier_hot_of(t));
    cr_assert_null(tier_remote_of(t), "no remote tier was asked for");
    cr_assert_eq(tier_hot_fd(t), tier_hot_event_fd(tier_hot_of(t)));
    cr_assert_eq(tier_event_fd(t), tier_cold_event_fd(tier_cold_of(t)));
    cr_assert_eq(tier_reserve(t_tns(t, 1, BLK), 1, NULL, k, 3, ids, offs), 3);
    for (int i = 0; i < 3; i++)
        t_fill((uint8_t *)tier_pool_base(t) + offs[i], BLK, (uint64_t)i);
    cr_assert_eq(tier_commit(t_tns(t, 1, BLK), 1, k, 3), 3);
    cr_assert_eq(tier_flush_to_cold(t), 0);
    tier_close(t);

    /* the disk was left whole: a new store indexes and serves it */
    cr_assert_eq(tier_open(&oc, &t, NULL), 0);
    cr_assert_eq(tier_load_cold(t), 3);
    cr_assert_eq(tier_lookup(t_tns(t, 1, BLK), k, 3, lvl), 3);
    for (int i = 0; i < 3; i++)
        cr_expect_eq(lvl[i], TIER_L_COLD, "key %d at level %u", i, lvl[i]);
    cr_assert_eq(tier_check(t, (char[256]){ 0 }, 256), 0);
    tier_close(t);
    tier_close(NULL);
    t_rmtree(dir);
}

Test(tier_open, a_failed_open_says_which_part_and_closes_the_rest)
{
    char dir[] = "/tmp/kvt-open-XXXXXX";
    struct tier_cold_cfg cc = { .dir = dir, .bytes = 16u << 20 };
    struct tier_hot_cfg emu = { .kind = TIER_HOT_EMU, .bytes = 4u << 20 };
    struct tier_hot_cfg cuda = { .kind = TIER_HOT_CUDA, .bytes = 4u << 20 };
    struct tier_remote_cfg bad = { .seeds = "no-port-here" };
    struct {
        struct tier_open_cfg oc;
        int rc;
        enum tier_part part;
    } cases[] = {
        /* the cold tier opens, then the remote one refuses its seeds */
        { { .store = { .warm_bytes = 4u << 20 }, .cold = &cc, .remote = &bad },
          -EINVAL, TIER_PART_REMOTE },
        /* cold and hot open, then the warm pool cannot be made */
        { { .store = { .warm_bytes = 0 }, .cold = &cc, .hot = &emu }, -EINVAL,
          TIER_PART_WARM },
    };
    struct tier_hot *probe = NULL;
    struct tier *t = NULL;
    int hrc;

    cr_assert_not_null(mkdtemp(dir));
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        enum tier_part part = 0;
        int before = fds_open();

        cr_expect_eq(tier_open(&cases[i].oc, &t, &part), cases[i].rc, "case %zu", i);
        cr_expect_eq(part, cases[i].part, "case %zu: part %d", i, part);
        cr_expect_null(t, "case %zu: no store handed out", i);
        cr_expect_eq(fds_open(), before, "case %zu: fds left open", i);
    }
    /* a CUDA hot tier where none can open (no GPU here): this part, nothing else */
    hrc = tier_hot_open(&cuda, &probe);
    if (hrc == 0) {
        tier_hot_close(probe); /* a GPU here: no failure to see */
    } else {
        struct tier_open_cfg oc = { .store = { .warm_bytes = 4u << 20 }, .cold = &cc,
                                    .hot = &cuda };
        enum tier_part part = 0;
        int before = fds_open();

        cr_expect_eq(tier_open(&oc, &t, &part), hrc);
        cr_expect_eq(part, TIER_PART_HOT);
        cr_expect_null(t, "no store handed out");
        cr_expect_eq(fds_open(), before, "fds left open");
    }
    t_rmtree(dir);
}
