/* SPDX-License-Identifier: MIT */
/*
 * tier_review.c - regression tests for what the adversarial review of the
 * store's trust fixes (issue 13) found: a use-after-free among durable
 * commits' waits, waits left with nothing in flight, a segment that could
 * never be freed (a loop for ever), and a chain that could not be extended
 * while the disk had room. Each failed (or hung, or tripped ASan) before its
 * fix.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_hot.h"
#include "tier_nvme.h"

struct cb {
    void *w;
    uint32_t id;
    int rc;
};

struct rig {
    char dir[64];
    struct tier_cold *cold;
    struct tier_hot *hot;
    struct tier *t;
    struct cb cbs[256];
    int ncb;
};

static void on_ready(void *ctx, void *w, uint32_t id, int rc)
{
    struct rig *r = ctx;

    cr_assert_lt(r->ncb, 256);
    r->cbs[r->ncb++] = (struct cb){ w, id, rc };
}

static int cbs_of(const struct rig *r, const void *w)
{
    int n = 0;

    for (int i = 0; i < r->ncb; i++)
        n += r->cbs[i].w == w;
    return n;
}

static void rig_open(struct rig *r, uint64_t warm, uint64_t cold, uint32_t qd, uint64_t hot,
                     double hi, double lo)
{
    struct tier_cfg tc = { .warm_bytes = warm, .high_wm = hi, .low_wm = lo, .ready = on_ready,
                           .ready_ctx = r };
    struct tier_cold_cfg cc = { .bytes = cold, .qd = qd, .batch = 4, .sim = true };

    memset(r, 0, sizeof(*r));
    t_tmpdir("kvt-review", r->dir, sizeof(r->dir));
    cc.dir = r->dir;
    cr_assert_eq(tier_cold_open(&cc, &r->cold), 0);
    tc.cold = r->cold;
    if (hot) {
        struct tier_hot_cfg hc = { .kind = TIER_HOT_EMU, .bytes = hot };

        cr_assert_eq(tier_hot_open(&hc, &r->hot), 0);
        tc.hot = r->hot;
    }
    cr_assert_eq(tier_create(&tc, &r->t), 0);
}

static void check(struct rig *r)
{
    char why[256];

    if (tier_check(r->t, why, sizeof(why)))
        cr_assert_fail("store inconsistent: %s", why);
}

static void disk_all(struct rig *r)
{
    t_store_settle(r->t, r->cold, r->hot);
}

static void rig_close(struct rig *r)
{
    t_store_close(r->t, r->cold, r->hot, r->dir);
}

static struct tier_key K(int a, int b)
{
    struct tier_key k = { { 0 } };

    memcpy(k.b, &a, 4);
    memcpy(k.b + 4, &b, 4);
    k.b[31] = 0x5a;
    return k;
}

#define BLK (256u << 10)

static void put1(struct rig *r, uint32_t owner, struct tier_key k)
{
    uint32_t id;
    uint64_t off;

    cr_assert_eq(tier_reserve(t_tns(r->t, 1, BLK), owner, NULL, &k, 1, &id, &off), 1);
    memset((uint8_t *)tier_pool_base(r->t) + off, (int)owner, BLK);
}

/* A block's durable waits started (their queue full: kept for later) while
 * making room on disk evicted a block whose own waits were in the same list:
 * the list was walked through a freed node (ASan: heap-use-after-free). */
Test(tier_review, durable_waits_survive_a_disk_eviction_while_they_start)
{
    static char A, C, D;
    struct rig r;
    struct tier_key W = K(1, 1), V = K(1, 2), X = K(1, 3), F1 = K(2, 1), F2 = K(2, 2);
    struct tier_key ka[3] = { X, V, W }, f[2] = { F1, F2 }, wv[2] = { W, V };
    uint32_t ids[8], pend;
    uint64_t offs[8];

    rig_open(&r, 2u << 20, 4 * BLK, 2, 0, 1.0, 1.0); /* 8 warm slots, 4 on disk, qd 2 */
    put1(&r, 2, W);
    put1(&r, 2, V);
    put1(&r, 2, X);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, BLK), 1, NULL, ka, 3, ids, offs), 0,
                 "all deduplicated");
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 1, ka, 3, &A, ids, &pend), 0);
    cr_assert_eq(pend, 3, "A waits for its three keys");
    put1(&r, 4, F1);
    put1(&r, 4, F2);
    cr_assert_geq(tier_commit_durable(t_tns(r.t, 1, BLK), 4, f, 2, &D, ids, &pend), 0);
    cr_assert_eq(tier_commit(t_tns(r.t, 1, BLK), 2, wv, 2), 2);
    check(&r);
    disk_all(&r);
    tier_maintain(r.t);
    disk_all(&r);
    cr_assert_geq(tier_commit_durable(t_tns(r.t, 1, BLK), 3, &V, 1, &C, ids, &pend), 0);
    disk_all(&r);
    {
        struct tier_key pin[3] = { F1, F2, W };

        for (int i = 0; i < 3; i++)
            cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK),
                .keys = &pin[i], .n = 1, .ids = ids, .offs = offs }), 1);
    }
    for (int g = 0; g < 8; g++) {
        struct tier_story s;

        tier_story_get(t_tns_of(r.t, 1), &V, &s);
        if (s.level == TIER_L_COLD)
            break;
        put1(&r, 5, K(3, g));
    }
    check(&r);
    cr_assert_eq(tier_commit(t_tns(r.t, 1, BLK), 2, &X, 1), 1);
    check(&r);
    tier_maintain(r.t);
    disk_all(&r);
    cr_assert_eq(cbs_of(&r, &A), 3, "A waited for 3 keys and was told of %d", cbs_of(&r, &A));
    rig_close(&r);
}

/* The waits of one durable commit were retried one id per mover turn; when
 * the retry started no write, the rest had nothing in flight to bring the
 * next turn (tierd turns only on events), and the commit hung. */
Test(tier_review, durable_waits_are_all_retried_in_one_turn)
{
    static char A, D, E;
    struct rig r;
    struct tier_key V1 = K(1, 1), V2 = K(1, 2), F1 = K(2, 1), F2 = K(2, 2), F3 = K(2, 3);
    struct tier_key va[2] = { V1, V2 }, f[2] = { F1, F2 };
    uint32_t ids[8], pend;
    uint64_t offs[8];

    rig_open(&r, 2u << 20, 3 * BLK, 2, 0, 1.0, 1.0);
    put1(&r, 2, V1);
    put1(&r, 2, V2);
    tier_reserve(t_tns(r.t, 1, BLK), 1, NULL, va, 2, ids, offs);
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 1, va, 2, &A, ids, &pend), 0);
    cr_assert_eq(pend, 2);
    put1(&r, 4, F1);
    put1(&r, 4, F2);
    cr_assert_geq(tier_commit_durable(t_tns(r.t, 1, BLK), 4, f, 2, &D, ids, &pend), 0);
    cr_assert_eq(tier_commit(t_tns(r.t, 1, BLK), 2, va, 2), 2); /* their writes: queue full */
    disk_all(&r);
    put1(&r, 5, F3);
    cr_assert_geq(tier_commit_durable(t_tns(r.t, 1, BLK), 5, &F3, 1, &E, ids, &pend), 0);
    disk_all(&r);
    tier_maintain(r.t); /* one turn of tierd's loop */
    disk_all(&r);
    cr_assert_eq(cbs_of(&r, &A), 2, "after a turn and with nothing in flight, A was told of "
                                    "%d of its 2 keys", cbs_of(&r, &A));
    check(&r);
    rig_close(&r);
}

/* free_segment mapped a parent's offset to a slot with seg / nslots, not the
 * slot size (48 KiB slots: 42 in 2 MiB), so a block whose child lived
 * elsewhere was taken as one whose children all go, and its children-first
 * loop waited for ever. */
Test(tier_review, freeing_a_segment_of_odd_sized_slots_ends, .timeout = 20)
{
    enum { A_BLK = 48u << 10, B_BLK = 64u << 10 };
    static char w;
    struct rig r;
    uint32_t ids[64], pend;
    uint64_t offs[64];
    struct tier_key q = K(1, 0), c = K(1, 1), p = K(2, 0), x = K(2, 1), b[40];
    struct tier_nvme *io;
    int rc;

    rig_open(&r, 4u << 20, 64u << 20, 16, 4u << 20, 1.0, 1.0);
    io = tier_cold_io(r.cold);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, A_BLK), 1, NULL, &q, 1, ids, offs), 1);
    tier_commit(t_tns(r.t, 1, A_BLK), 1, &q, 1);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, A_BLK), 1, NULL, &p, 1, ids, offs), 1);
    tier_commit_durable(t_tns(r.t, 1, A_BLK), 1, &p, 1, &w, ids, &pend);
    disk_all(&r);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, A_BLK), 1, &p, &x, 1, ids, offs), 1);
    tier_commit(t_tns(r.t, 1, A_BLK), 1, &x, 1);
    cr_assert_eq(tier_reserve_hot(t_tns(r.t, 1, A_BLK), 1, &q, &c, 1, ids, offs), 1);
    tier_commit(t_tns(r.t, 1, A_BLK), 1, &c, 1);
    for (int i = 0; i < 33; i++)
        b[i] = K(3, i);
    cr_assert_eq(tier_reserve(t_tns(r.t, 2, B_BLK), 2, NULL, b, 32, ids, offs), 32);
    tier_commit(t_tns(r.t, 2, B_BLK), 2, b, 32);
    /* the disk fails: a sync answered -EIO, so dirty blocks may be dropped */
    tier_commit_durable(t_tns(r.t, 2, B_BLK), 2, b, 1, &w, ids, &pend);
    while (tier_nvme_sim_queued(io))
        tier_nvme_sim_complete(io, 0, 0);
    tier_poll(r.t, false);
    tier_cold_flush(r.cold);
    while (tier_nvme_sim_queued(io))
        tier_nvme_sim_complete(io, 0, -EIO);
    tier_poll(r.t, false);
    for (int i = 0; i < 32; i++)
        tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 2, B_BLK), .keys = &b[i], .n = 1,
            .ids = ids, .offs = offs });
    check(&r);
    rc = tier_reserve(t_tns(r.t, 2, B_BLK), 3, NULL, &b[32], 1, ids, offs);
    cr_assert(rc == 1 || rc == -ENOSPC, "reserve: %d", rc);
    check(&r);
    /* (the leases die with the store) */
    rig_close(&r);
}

/* Extending a chain reserves its children under its last block, so no block
 * of the chain not yet on disk was a leaf the mover would write: the put was
 * refused -ENOSPC ("full of leased or reserved blocks") for ever, nothing
 * leased and the disk empty. */
Test(tier_review, a_chain_of_blocks_not_on_disk_can_be_extended)
{
    enum { FIRST = 58, MORE = 8, MIB = 1u << 20 };
    static struct tier_key k[FIRST + MORE];
    struct rig r;
    uint32_t ids[FIRST + MORE];
    uint64_t offs[FIRST + MORE];
    int rc = 0;

    rig_open(&r, 64u << 20, 1u << 30, 16, 0, 0.95, 0.85);
    for (int i = 0; i < FIRST + MORE; i++)
        k[i] = K(1, i);
    for (int c = 0; c < FIRST; c += 2) {
        cr_assert_eq(tier_reserve(t_tns(r.t, 1, MIB), 1, c ? &k[c - 1] : NULL, k + c, 2, ids,
                                  offs), 2);
        tier_commit(t_tns(r.t, 1, MIB), 1, k + c, 2);
        tier_maintain(r.t);
        disk_all(&r);
    }
    for (int tries = 0; tries < 5; tries++) {
        rc = tier_reserve(t_tns(r.t, 1, MIB), 1, &k[FIRST - 1], k + FIRST, MORE, ids, offs);
        if (rc >= 0)
            break;
        cr_assert_eq(rc, -EAGAIN, "reserve under the chain: %d (%s)", rc, strerror(-rc));
        for (int j = 0; j < 10; j++) {
            tier_maintain(r.t);
            disk_all(&r);
        }
    }
    cr_assert_eq(rc, MORE, "the chain could not be extended: %d", rc);
    check(&r);
    tier_abort(t_tns_of(r.t, 1), 1, k + FIRST, MORE);
    rig_close(&r);
}

/* Found by the simulation once pins changed its schedule: the disk full of
 * blocks still in warm too (so none it could evict), the mover dropped the
 * oldest blocks not on disk, though a block on disk leaving warm loses
 * nothing and gives the disk a leaf to evict for them. */
Test(tier_review, blocks_on_disk_leave_warm_before_any_is_dropped)
{
    static char A;
    struct rig r;
    struct tier_key d[4] = { K(1, 1), K(1, 2), K(1, 3), K(1, 4) };
    struct tier_key a[4] = { K(2, 1), K(2, 2), K(2, 3), K(2, 4) };
    struct tier_stats st;
    uint32_t ids[4], pend;

    rig_open(&r, 2u << 20, 4 * BLK, 4, 0, 0.9, 0.5); /* 8 warm slots, 4 on disk */
    for (int i = 0; i < 3; i++) { /* the oldest: not on disk */
        put1(&r, 1, d[i]);
        cr_assert_eq(tier_commit(t_tns(r.t, 1, BLK), 1, &d[i], 1), 1);
    }
    for (int i = 0; i < 4; i++) /* then four that fill the disk, and stay in warm */
        put1(&r, 2, a[i]);
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, a, 4, &A, ids, &pend), 4);
    disk_all(&r);
    cr_assert_eq(cbs_of(&r, &A), 4, "the four are durable");
    put1(&r, 1, d[3]); /* warm over its high watermark */
    cr_assert_eq(tier_commit(t_tns(r.t, 1, BLK), 1, &d[3], 1), 1);
    tier_maintain(r.t);
    disk_all(&r);
    check(&r);
    tier_stats_get(r.t, &st);
    cr_assert_eq(st.dropped, 0, "%llu blocks dropped while blocks on disk could leave warm",
                 (unsigned long long)st.dropped);
    cr_assert_gt(st.evictions[TIER_L_COLD], 0, "the disk made room");
    rig_close(&r);
}
