/* SPDX-License-Identifier: MIT */
/*
 * tier_admission.c - NVMe admission in the store: a block leaving warm is
 * written to cold only after a second touch (a read, a put again, or a put
 * after the store dropped it), within a write budget per window of an
 * injected clock; durable commits are written whatever admission says; the
 * counters say what was admitted and refused. A real cold tier in a temp
 * folder, 1 MiB blocks, each its own chain (all leaves).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <string.h>

#include "t.h"
#include "tier.h"
#include "tier_cold.h"

#define MIB (1u << 20)

static char dir[64];

static void mk(void)
{
    t_tmpdir("kvt-admit", dir, sizeof(dir));
}

static void rm(void)
{
    t_rmtree(dir);
}

/* no suite timeout (the run's --timeout bounds each test): with one here,
 * Criterion 2.4's runner leaks 48 bytes when this suite runs beside
 * sim_store's, and LeakSanitizer fails the whole ASan run at its exit */
TestSuite(tier_admission, .init = mk, .fini = rm);

struct world {
    struct tier *t;
    struct tier_cold *cold;
    uint64_t now_ms;     /* the store's clock */
    int ready, ready_bad; /* durable completions seen, and those with rc != 0 */
};

static uint64_t clock_of(void *ctx)
{
    return ((struct world *)ctx)->now_ms;
}

static void on_ready(void *ctx, void *waiter, uint32_t id, int rc)
{
    struct world *w = ctx;

    (void)waiter;
    (void)id;
    w->ready++;
    w->ready_bad += rc != 0;
}

static bool write_through; /* a test may copy every block to cold at commit */
static uint32_t cold_qd;   /* and shrink the disk's queue (0: the default) */

/* A 32 MiB warm pool draining from 16 MiB to 8 MiB over a 64 MiB cold tier. */
static void open_world(struct world *w, enum tier_admit admit, uint64_t budget)
{
    struct tier_cold_cfg cc = { .dir = dir, .bytes = 64 * MIB, .qd = cold_qd };
    struct tier_open_cfg oc = {
        .store = { .warm_bytes = 32 * MIB, .high_wm = 0.5, .low_wm = 0.25, .admit = admit,
                   .write_through = write_through,
                   .cold_budget_bytes = budget, .cold_budget_ms = 1000, .clock_ms = clock_of,
                   .clock_ctx = w, .ready = on_ready, .ready_ctx = w },
        .cold = &cc,
    };
    int rc;

    memset(w, 0, sizeof(*w));
    oc.store.clock_ctx = oc.store.ready_ctx = w;
    rc = tier_open(&oc, &w->t, NULL);
    cr_assert_eq(rc, 0, "tier_open: %s", strerror(-rc));
    w->cold = tier_cold_of(w->t);
}

static struct tier_key key(uint64_t i)
{
    struct tier_key k;

    t_keys((kvt_key *)&k, 1, 9000 + i);
    return k;
}

/* Put block i (a chain of one). */
static void put(struct world *w, uint64_t i)
{
    struct tier_key k = key(i);
    uint32_t id;
    uint64_t off;
    int rc = tier_reserve(t_tns(w->t, 1, MIB), 7, NULL, &k, 1, &id, &off);

    cr_assert_geq(rc, 0, "reserve %llu: %d", (unsigned long long)i, rc);
    if (rc == 1)
        t_fill((uint8_t *)tier_pool_base(w->t) + off, MIB, i);
    cr_assert_eq(tier_commit(t_tns(w->t, 1, MIB), 7, &k, 1), (size_t)rc);
}

/* Read block i once (lease and release): a touch. */
static void touch(struct world *w, uint64_t i)
{
    struct tier_key k = key(i);
    uint32_t id;
    uint64_t off;

    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(w->t, 1, MIB), .keys = &k,
        .n = 1, .ids = &id, .offs = &off }), 1, "get %llu", (unsigned long long)i);
    tier_release(w->t, &id, 1, false);
}

/* The mover's turns and the disk's completions until nothing is in flight. */
static void settle(struct world *w)
{
    for (int guard = 0; guard < 10000; guard++) {
        tier_maintain(w->t);
        if (!tier_cold_busy(w->cold))
            return;
        cr_assert_geq(tier_poll(w->t, true), 0);
    }
    cr_assert_fail("the disk never went idle");
}

static bool on_disk(struct world *w, uint64_t i)
{
    struct tier_key k = key(i);

    return tier_cold_has(w->cold, 1, &k);
}

static bool present(struct world *w, uint64_t i)
{
    struct tier_key k = key(i);

    return tier_lookup(t_tns_of(w->t, 1), &k, 1, NULL) == 1;
}

/*
 * Blocks 0..3 are read right after their put, 4..16 never. Block 16 takes
 * warm past 16 MiB: the 9 oldest leave (0..3 first, then 4..8). Only the
 * four read ones are written; the five one-shot blocks are dropped.
 */
Test(tier_admission, second_touch_admitted_one_shot_refused)
{
    struct world w;
    struct tier_stats st;

    open_world(&w, TIER_ADMIT_REUSED, 0);
    for (uint64_t i = 0; i < 4; i++) {
        put(&w, i);
        touch(&w, i);
    }
    for (uint64_t i = 4; i <= 16; i++)
        put(&w, i);
    settle(&w);
    for (uint64_t i = 0; i < 4; i++)
        cr_expect(on_disk(&w, i) && present(&w, i), "read block %llu is not on disk",
                  (unsigned long long)i);
    for (uint64_t i = 4; i <= 8; i++)
        cr_expect(!on_disk(&w, i) && !present(&w, i), "one-shot block %llu was kept",
                  (unsigned long long)i);
    for (uint64_t i = 9; i <= 16; i++)
        cr_expect(present(&w, i) && !on_disk(&w, i), "block %llu should still be in warm only",
                  (unsigned long long)i);
    tier_stats_get(w.t, &st);
    cr_expect_eq(st.cold_admitted, 4, "admitted: expected 4, got %llu",
                 (unsigned long long)st.cold_admitted);
    cr_expect_eq(st.cold_refused, 5, "refused: expected 5, got %llu",
                 (unsigned long long)st.cold_refused);
    cr_expect_eq(st.cold_over_budget, 0);
    cr_expect_eq(st.demotions, 4);
    cr_expect_eq(st.dropped, 5, "refused blocks are dropped, and counted so");
    {
        char why[256];

        cr_assert_eq(tier_check(w.t, why, sizeof(why)), 0, "%s", why);
    }
    tier_close(w.t);
}

/* Admission off: the same story writes all nine. */
Test(tier_admission, admit_all_writes_every_block_leaving_warm)
{
    struct world w;
    struct tier_stats st;

    open_world(&w, TIER_ADMIT_ALL, 0);
    for (uint64_t i = 0; i <= 16; i++)
        put(&w, i);
    settle(&w);
    for (uint64_t i = 0; i <= 8; i++)
        cr_expect(on_disk(&w, i), "block %llu is not on disk", (unsigned long long)i);
    tier_stats_get(w.t, &st);
    cr_expect_eq(st.cold_admitted, 9);
    cr_expect_eq(st.cold_refused, 0);
    cr_expect_eq(st.dropped, 0);
    tier_close(w.t);
}

/*
 * A put again is a second touch: block 0 put twice (the second put is
 * deduplicated) is written when it leaves warm; block 1, put once, is
 * dropped, and once put again after that (the store remembers the drop)
 * it is written the next time.
 */
Test(tier_admission, put_again_is_a_second_touch)
{
    struct world w;
    struct tier_stats st;

    open_world(&w, TIER_ADMIT_REUSED, 0);
    put(&w, 0);
    put(&w, 0); /* dedup */
    put(&w, 1);
    for (uint64_t i = 100; i < 115; i++)
        put(&w, i); /* 17 blocks: 0, 1 and 7 more leave */
    settle(&w);
    cr_expect(on_disk(&w, 0), "block 0, put twice, was not written");
    cr_expect(!present(&w, 1), "block 1, put once, was kept");
    put(&w, 1); /* after its drop: a second touch */
    for (uint64_t i = 200; i < 210; i++)
        put(&w, i);
    settle(&w);
    cr_expect(on_disk(&w, 1), "block 1, put again after its drop, was not written");
    tier_stats_get(w.t, &st);
    cr_expect_eq(st.cold_admitted, 2, "admitted: expected 2, got %llu",
                 (unsigned long long)st.cold_admitted);
    tier_close(w.t);
}

/*
 * A budget of 3 MiB per 1,000 ms of the injected clock: of the nine
 * blocks leaving warm (every one admitted), three are written and six
 * dropped past the budget; once the window has passed, the next three are
 * written again.
 */
Test(tier_admission, budget_refuses_past_it_and_resets_by_window)
{
    struct world w;
    struct tier_stats st;

    open_world(&w, TIER_ADMIT_ALL, 3 * MIB);
    w.now_ms = 5000;
    for (uint64_t i = 0; i <= 16; i++)
        put(&w, i);
    settle(&w);
    for (uint64_t i = 0; i < 3; i++)
        cr_expect(on_disk(&w, i), "block %llu (within the budget) is not on disk",
                  (unsigned long long)i);
    for (uint64_t i = 3; i <= 8; i++)
        cr_expect(!on_disk(&w, i) && !present(&w, i), "block %llu: written past the budget",
                  (unsigned long long)i);
    tier_stats_get(w.t, &st);
    cr_expect_eq(st.cold_admitted, 3);
    cr_expect_eq(st.cold_over_budget, 6, "over budget: expected 6, got %llu",
                 (unsigned long long)st.cold_over_budget);
    /* the same window: still spent */
    w.now_ms = 5999;
    for (uint64_t i = 100; i < 9 + 100; i++)
        put(&w, i);
    settle(&w);
    tier_stats_get(w.t, &st);
    cr_expect_eq(st.cold_admitted, 3, "written within a spent window");
    /* a new window */
    w.now_ms = 6000;
    for (uint64_t i = 200; i < 9 + 200; i++)
        put(&w, i);
    settle(&w);
    tier_stats_get(w.t, &st);
    cr_expect_eq(st.cold_admitted, 6, "after the window: expected 6 admitted, got %llu",
                 (unsigned long long)st.cold_admitted);
    {
        char why[256];

        cr_assert_eq(tier_check(w.t, why, sizeof(why)), 0, "%s", why);
    }
    tier_close(w.t);
}

/*
 * A durable commit is written whatever admission and the budget say:
 * second touch on, a budget of one block already spent, four blocks never
 * read, committed durable: all four are acknowledged durable and on disk.
 */
Test(tier_admission, durable_puts_are_always_written)
{
    struct world w;
    struct tier_key k[4];
    uint32_t ids[4], pending = 0;
    uint64_t offs[4];
    int rc;

    open_world(&w, TIER_ADMIT_REUSED, MIB);
    put(&w, 50);
    touch(&w, 50);
    cr_assert_eq(tier_commit_durable(t_tns(w.t, 1, MIB), 7, (struct tier_key[]){ key(50) }, 1, &w,
                                     ids, &pending), 0);
    settle(&w); /* the budget's one block is spent */
    cr_assert_eq(w.ready, (int)pending);
    w.ready = 0;
    for (int i = 0; i < 4; i++)
        k[i] = key(60 + (uint64_t)i);
    rc = tier_reserve(t_tns(w.t, 1, MIB), 7, NULL, k, 4, ids, offs);
    cr_assert_eq(rc, 4);
    for (int i = 0; i < 4; i++)
        t_fill((uint8_t *)tier_pool_base(w.t) + offs[i], MIB, 60 + (uint64_t)i);
    rc = tier_commit_durable(t_tns(w.t, 1, MIB), 7, k, 4, &w, ids, &pending);
    cr_assert_eq(rc, 4, "durable commit: %d", rc);
    cr_assert_eq(pending, 4);
    settle(&w);
    cr_expect_eq(w.ready, 4, "durable acks: expected 4, got %d", w.ready);
    cr_expect_eq(w.ready_bad, 0, "a durable write was refused");
    for (int i = 0; i < 4; i++)
        cr_expect(on_disk(&w, 60 + (uint64_t)i), "durable block %d is not on disk", i);
    tier_close(w.t);
}

/* Write-through copies each block to cold at its commit; one whose write
 * found the disk's queue full is left to the mover, which wrote it under
 * `all` but, under second-touch, refused the unread block and dropped it
 * from every tier. Written whatever admission says, as every write-through
 * block: none lost, none refused. */
Test(tier_admission, write_through_blocks_are_written_whatever_admission_says)
{
    struct world w;
    struct tier_stats st;
    char why[256];

    write_through = true;
    cold_qd = 4; /* 28 commits between two polls: most find the queue full */
    open_world(&w, TIER_ADMIT_REUSED, 0);
    for (uint64_t i = 0; i < 28; i++)
        put(&w, i);
    settle(&w);
    tier_stats_get(w.t, &st);
    for (uint64_t i = 0; i < 28; i++)
        cr_assert(on_disk(&w, i) || present(&w, i), "write-through block %llu lost",
                  (unsigned long long)i);
    cr_assert_eq(st.cold_refused, 0, "write-through blocks refused: %llu",
                 (unsigned long long)st.cold_refused);
    cr_assert_eq(tier_check(w.t, why, sizeof(why)), 0, "%s", why);
    tier_close(w.t);
    write_through = false;
    cold_qd = 0;
}
