/* SPDX-License-Identifier: MIT */
/*
 * tier_trust.c - one regression test per wrong byte, false durable ack,
 * orphaned block and cut-short read that issue 13 found in the store, each
 * over the simulated disk (tier_nvme.h) so that the order of completions is
 * the test's. tests/sim/ finds the same bugs at random; these pin each down.
 * No per-test .timeout: every loop here is bounded, make test's --timeout
 * covers each test, and Criterion 2.4.1 leaks 48 bytes in its runner (the
 * LSan build fails) when one starts while a longer one runs (tier_nvme_io.c).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "t.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_hot.h"
#include "tier_nvme.h"

#define BLK (32u << 10)

struct rig {
    char dir[64];
    struct tier_cold *cold;
    struct tier_hot *hot;
    struct tier *t;
    int ready[4], failed[4]; /* callbacks per waiter (&waiter[i]) */
    char waiter[4];
    char why[256];
    void (*hook)(struct rig *r, int w); /* called as waiter[w] is told (NULL: none) */
};

static void on_ready(void *ctx, void *waiter, uint32_t id, int rc)
{
    struct rig *r = ctx;
    int w = (int)((char *)waiter - r->waiter);

    (void)id;
    cr_assert(w >= 0 && w < 4, "ready for an unknown waiter");
    if (rc == 0)
        r->ready[w]++;
    else
        r->failed[w]++;
    if (r->hook)
        r->hook(r, w);
}

static void rig_open(struct rig *r, uint64_t warm, double high, uint64_t cold_bytes)
{
    struct tier_cold_cfg cc = { .dir = r->dir, .bytes = cold_bytes, .qd = 16, .batch = 4,
                                .sim = true };
    struct tier_hot_cfg hc = { .kind = TIER_HOT_EMU, .bytes = 2u << 20 };
    struct tier_cfg tc = { .warm_bytes = warm, .high_wm = high, .low_wm = high < 0.6 ? high : 0.6,
                           .ready = on_ready, .ready_ctx = r };

    memset(r, 0, sizeof(*r));
    t_tmpdir("kvt-trust", r->dir, sizeof(r->dir));
    cr_assert_eq(tier_cold_open(&cc, &r->cold), 0);
    cr_assert_eq(tier_hot_open(&hc, &r->hot), 0);
    tc.cold = r->cold;
    tc.hot = r->hot;
    cr_assert_eq(tier_create(&tc, &r->t), 0);
}

static void check(struct rig *r)
{
    if (tier_check(r->t, r->why, sizeof(r->why)))
        cr_assert_fail("store inconsistent: %s", r->why);
}

/* Every queued disk request completes, every completion is delivered. */
static void pump(struct rig *r)
{
    t_store_settle(r->t, r->cold, r->hot);
}

/* The mover's turns, as tierd's loop runs them, until it rests. */
static void movers(struct rig *r)
{
    for (int guard = 0; guard < 1000; guard++) {
        size_t n = tier_maintain(r->t);

        pump(r);
        if (n == 0)
            return;
    }
}

static void rig_close(struct rig *r)
{
    t_store_close(r->t, r->cold, r->hot, r->dir);
}

/* Fill warm with other blocks, so that what is on disk leaves it. */
static void push_out(struct rig *r)
{
    struct tier_key f[160];
    uint32_t ids[8];
    uint64_t offs[8];

    t_keys((kvt_key *)f, 160, 44);
    for (int i = 0; i < 160; i += 8) {
        int rc;

        while ((rc = tier_reserve(t_tns(r->t, 1, BLK), 1, NULL, f + i, 8, ids, offs)) == -EAGAIN)
            movers(r);
        cr_assert_eq(rc, 8, "filler %d: %d", i, rc);
        tier_commit(t_tns(r->t, 1, BLK), 1, f + i, 8);
        movers(r);
    }
}

/* Put keys[0..n) (a chain under parent) in warm or hot, payload seed+i. */
static void put(struct rig *r, bool hot, const struct tier_key *parent, const struct tier_key *k,
                int n, uint64_t seed)
{
    uint32_t ids[64];
    uint64_t offs[64];
    int rc = (hot ? tier_reserve_hot : tier_reserve)(t_tns(r->t, 1, BLK), 1, parent, k,
                                                     (size_t)n, ids, offs);

    cr_assert_eq(rc, n, "reserve of %d: %d", n, rc);
    for (int i = 0; i < n; i++)
        t_fill((uint8_t *)(hot ? tier_hot_emu_base(r->hot) : tier_pool_base(r->t)) + offs[i],
               BLK, seed + (uint64_t)i);
    cr_assert_eq(tier_commit(t_tns(r->t, 1, BLK), 1, k, (size_t)n), (size_t)n);
}

/* Finding 1: a block leased in place in hot is copied down for a plain
 * getter; the hot slot went back to the pool while still leased, and the
 * next hot put wrote into it under the reader. */
Test(tier_trust, a_hot_lease_keeps_its_bytes_when_the_block_moves_down)
{
    struct rig r;
    struct tier_key k[2];
    uint32_t hh, wh, ids[1], pend;
    uint64_t hoff, woff, offs[1];
    uint8_t tier;

    rig_open(&r, 4u << 20, 0.8, 8u << 20);
    t_keys((kvt_key *)k, 2, 1);
    put(&r, true, NULL, &k[0], 1, 100);
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = &k[0],
        .n = 1, .flags = TIER_GET_HOT, .ids = &hh, .offs = &hoff, .tiers = &tier,
        .waiter = &r.waiter[0], .pending = &pend }), 1);
    cr_assert_eq(tier, TIER_L_HOT);
    /* a plain getter: the block is copied down to warm for it */
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = &k[0],
        .n = 1, .ids = &wh, .offs = &woff, .waiter = &r.waiter[1], .pending = &pend }),
                 1);
    cr_assert_eq(pend, 1);
    pump(&r);
    cr_assert_eq(r.ready[1], 1);
    cr_assert_eq(t_check((uint8_t *)tier_pool_base(r.t) + woff, BLK, 100), -1);
    check(&r);
    /* the next hot put must not get the slot the first reader still holds */
    cr_assert_eq(tier_reserve_hot(t_tns(r.t, 1, BLK), 1, NULL, &k[1], 1, ids, offs), 1);
    cr_assert_neq(offs[0], hoff, "a hot slot still leased was handed to a put");
    t_fill((uint8_t *)tier_hot_emu_base(r.hot) + offs[0], BLK, 200);
    cr_assert_eq(t_check((uint8_t *)tier_hot_emu_base(r.hot) + hoff, BLK, 100), -1,
                 "the hot lease's bytes changed under its reader");
    check(&r);
    tier_abort(t_tns_of(r.t, 1), 1, &k[1], 1);
    tier_release(r.t, &wh, 1, false);
    tier_release(r.t, &hh, 1, false); /* the kept hot slot goes back now */
    check(&r);
    rig_close(&r);
}

/* Finding 2: a durable commit of a key whose hot-to-warm copy was in flight
 * joined that copy (one "moving" flag for both directions) and was
 * acknowledged when it landed, nothing on disk. */
Test(tier_trust, a_durable_commit_during_a_copy_down_waits_for_the_disk)
{
    enum { N = 60 }; /* of 64 hot slots: past hot's high mark (0.8) */
    struct rig r;
    struct tier_key k[N];
    struct tier_story s;
    uint32_t ids[1], pend;
    int rc;

    rig_open(&r, 4u << 20, 0.8, 8u << 20);
    t_keys((kvt_key *)k, N, 2);
    for (int i = 0; i < N; i++)
        put(&r, true, NULL, &k[i], 1, 300 + (uint64_t)(i * 16));
    /* the hot mover starts copying the oldest down to warm */
    cr_assert_gt(tier_maintain(r.t), 0, "the hot mover copied nothing down");
    tier_story_get(t_tns_of(r.t, 1), &k[0], &s);
    cr_assert_eq(s.level, TIER_L_HOT, "the copy landed already");
    rc = tier_commit_durable(t_tns(r.t, 1, BLK), 2, &k[0], 1, &r.waiter[0], ids, &pend);
    cr_assert_eq(rc, 0, "durable commit: %d", rc);
    cr_assert_eq(pend, 1, "the durable commit must wait");
    /* the copies land; the disk has done nothing yet */
    tier_poll(r.t, false);
    cr_assert_eq(r.ready[0] + r.failed[0], 0,
                 "acknowledged durable when the copy to warm landed, before any disk write");
    pump(&r);
    cr_assert_eq(r.ready[0], 1, "never acknowledged");
    tier_story_get(t_tns_of(r.t, 1), &k[0], &s);
    cr_assert(s.present && s.on_disk, "acknowledged durable, not on disk");
    check(&r);
    rig_close(&r);
}

/* Issue 19: a durable commit of more blocks than the disk's queue holds
 * used to poll the disk inside the call until each write went in (tierd
 * answered nothing meanwhile, and on the simulated disk, which completes
 * only what the test says, it never returned). Now the writes that find no
 * room wait in the store and tier_maintain starts them as completions make
 * room; the commit is still acknowledged only once the disk did its work. */
Test(tier_trust, a_durable_commit_beyond_the_disks_queue_returns_and_waits_in_the_store)
{
    enum { N = 24 }; /* more than the disk's queue (16) */
    struct tier_nvme *io;
    struct rig r;
    struct tier_key k[N];
    struct tier_story s;
    uint32_t ids[N], pend;
    int rc;

    rig_open(&r, 4u << 20, 1.0, 8u << 20);
    io = tier_cold_io(r.cold);
    t_keys((kvt_key *)k, N, 19);
    put(&r, false, NULL, k, N, 1900);
    rc = tier_commit_durable(t_tns(r.t, 1, BLK), 2, k, N, &r.waiter[0], ids, &pend);
    cr_assert_eq(rc, 0, "durable commit: %d", rc);
    cr_assert_eq(pend, N, "every block is waited for");
    cr_assert_eq(tier_nvme_sim_queued(io), 16, "the disk's queue is full, the rest wait");
    check(&r);
    tier_maintain(r.t);
    tier_poll(r.t, false);
    cr_assert_eq(r.ready[0] + r.failed[0], 0, "told before the disk did anything");
    cr_assert_eq(tier_nvme_sim_queued(io), 16, "a turn with no completion starts nothing");
    /* the oldest request completes, turn after turn, as tierd's loop runs */
    for (int n = 0; n < 200 && r.ready[0] + r.failed[0] < N; n++) {
        if (tier_nvme_sim_queued(io))
            cr_assert_eq(tier_nvme_sim_complete(io, 0, 0), 0);
        cr_assert_geq(tier_poll(r.t, false), 0);
        tier_maintain(r.t);
        check(&r);
    }
    cr_assert_eq(r.ready[0], N, "%d of %d told durable (%d failed)", r.ready[0], N, r.failed[0]);
    for (int i = 0; i < N; i++) {
        tier_story_get(t_tns_of(r.t, 1), &k[i], &s);
        cr_assert(s.present && s.on_disk, "block %d acknowledged durable, not on disk", i);
    }
    rig_close(&r);
}

/* Finding 7: a hot get of [a block in hot, the next only on disk]: the hot
 * lease never reported ready, so tierd's get waited for it for ever. */
Test(tier_trust, a_hot_get_over_hot_and_disk_is_whole)
{
    struct rig r;
    struct tier_key k[2];
    uint32_t h[2], pend;
    uint64_t offs[2];
    uint8_t tiers[2];

    rig_open(&r, 4u << 20, 0.8, 8u << 20);
    t_keys((kvt_key *)k, 2, 3);
    put(&r, false, NULL, &k[0], 2, 400);
    cr_assert_eq(tier_flush_to_cold(r.t), 0);
    pump(&r);
    push_out(&r);
    /* k[0] up into hot, k[1] on disk only */
    {
        uint32_t id;
        uint64_t off;

        cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = &k[0],
            .n = 1, .flags = TIER_GET_PROMOTE, .ids = &id, .offs = &off,
            .waiter = &r.waiter[2], .pending = &pend }), 1);
        tier_release(r.t, &id, 1, false); /* copied up once released */
        pump(&r);
    }
    cr_assert_eq(tier_lookup(t_tns_of(r.t, 1), k, 2, tiers), 2);
    cr_assert_eq(tiers[0], TIER_L_HOT, "k[0] did not go up into hot");
    cr_assert_eq(tiers[1], TIER_L_COLD, "k[1] is still in warm: push out more");
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = k,
        .n = 2, .flags = TIER_GET_HOT, .ids = h, .offs = offs, .tiers = tiers,
        .waiter = &r.waiter[0], .pending = &pend }), 2);
    cr_assert_eq(tiers[0], TIER_L_HOT);
    cr_assert(tier_ready(r.t, h[0]), "the block leased in hot never reports ready");
    pump(&r);
    cr_assert(tier_ready(r.t, h[1]), "the second block never arrived");
    cr_assert_eq(t_check((uint8_t *)tier_hot_emu_base(r.hot) + offs[0], BLK, 400), -1);
    cr_assert_eq(t_check((uint8_t *)tier_pool_base(r.t) + offs[1], BLK, 401), -1);
    tier_release(r.t, h, 2, false);
    check(&r);
    rig_close(&r);
}

/* Finding 8: a second getter of a block already being read from disk for
 * another getter had its run stopped there. */
Test(tier_trust, a_second_getter_joins_a_read_in_flight)
{
    struct rig r;
    struct tier_key k[4];
    uint32_t a[4], b[4], pa, pb;
    uint64_t oa[4], ob[4];

    rig_open(&r, 4u << 20, 0.8, 8u << 20);
    t_keys((kvt_key *)k, 4, 4);
    put(&r, false, NULL, k, 4, 500);
    cr_assert_eq(tier_flush_to_cold(r.t), 0);
    pump(&r);
    push_out(&r);
    {
        uint8_t tiers[4];

        cr_assert_eq(tier_lookup(t_tns_of(r.t, 1), k, 4, tiers), 4);
        cr_assert_eq(tiers[0], TIER_L_COLD, "the chain is still in warm: fill more");
    }
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = k,
        .n = 4, .ids = a, .offs = oa, .waiter = &r.waiter[0], .pending = &pa }), 4);
    cr_assert_eq(pa, 4);
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = k,
        .n = 4, .ids = b, .offs = ob, .waiter = &r.waiter[1], .pending = &pb }), 4,
                 "the second getter's run was cut at a block being read for the first");
    cr_assert_eq(pb, 4);
    pump(&r);
    cr_assert_eq(r.ready[0], 4);
    cr_assert_eq(r.ready[1], 4, "the second getter was not told its blocks arrived");
    for (int i = 0; i < 4; i++) {
        cr_assert_eq(oa[i], ob[i]);
        cr_assert_eq(t_check((uint8_t *)tier_pool_base(r.t) + ob[i], BLK, 500 + (uint64_t)i), -1);
    }
    tier_release(r.t, a, 4, false);
    tier_release(r.t, b, 4, false);
    check(&r);
    rig_close(&r);
}

/* Finding 5: a chain longer than the store kept blocks whose head was gone
 * (reachable by no lookup). What is kept of a chain is a prefix. */
Test(tier_trust, a_chain_longer_than_the_store_keeps_a_prefix)
{
    enum { N = 1024, B = 8 };
    static struct tier_key k[N];
    struct rig r;
    uint32_t stored = 0;

    rig_open(&r, 4u << 20, 0.8, 8u << 20); /* 128 warm + about 250 disk blocks */
    t_keys((kvt_key *)k, N, 5);
    for (int i = 0; i < N; i += B) {
        uint32_t ids[B];
        uint64_t offs[B];
        int rc;

        for (int tries = 0;; tries++) {
            rc = tier_reserve(t_tns(r.t, 1, BLK), 1, i ? &k[i - 1] : NULL, k + i, B, ids, offs);
            if (rc != -EAGAIN)
                break;
            if (tries == 99) {
                struct tier_stats st;
                struct tier_cold_stats cs;

                tier_stats_get(r.t, &st);
                tier_cold_stats_get(r.cold, &cs);
                cr_log_error("cold %llu/%llu warm %llu/%llu blocks w %llu c %llu dropped %llu",
                             (unsigned long long)cs.bytes_used, (unsigned long long)cs.bytes_capacity,
                             (unsigned long long)st.bytes_used[TIER_L_WARM],
                             (unsigned long long)st.bytes_capacity[TIER_L_WARM],
                             (unsigned long long)st.blocks[TIER_L_WARM],
                             (unsigned long long)st.blocks[TIER_L_COLD],
                             (unsigned long long)st.dropped);
            }
            cr_assert_lt(tries, 100, "reserve at %d: -EAGAIN for ever (a mover that cannot "
                                     "make room must not ask the put to wait)", i);
            movers(&r);
        }
        cr_assert_eq(rc, B, "reserve at %d: %d", i, rc);
        for (int j = 0; j < B; j++)
            t_fill((uint8_t *)tier_pool_base(r.t) + offs[j], BLK, (uint64_t)(i + j));
        tier_commit(t_tns(r.t, 1, BLK), 1, k + i, B);
        movers(&r);
        check(&r);
    }
    for (int i = 0; i < N; i++) {
        struct tier_story s;

        tier_story_get(t_tns_of(r.t, 1), &k[i], &s);
        stored += s.present;
    }
    cr_assert_gt(stored, 0);
    cr_assert_eq(tier_lookup(t_tns_of(r.t, 1), k, N, NULL), stored,
                 "%u blocks stored, but a lookup reaches only the leading ones", stored);
    rig_close(&r);
}

/* Finding 6: blocks not yet on disk were dropped while the disk had room;
 * with --high-wm 1.0 the mover never ran, and puts dropped instead. */
Test(tier_trust, puts_beyond_warm_demote_and_drop_nothing_while_the_disk_has_room)
{
    enum { N = 240 };
    static struct tier_key k[N];
    struct tier_stats st;
    struct rig r;
    int eagain = 0;

    rig_open(&r, 4u << 20, 1.0, 32u << 20); /* 128 warm slots, room for N on disk */
    t_keys((kvt_key *)k, N, 6);
    for (int i = 0; i < N; i++) {
        uint32_t id;
        uint64_t off;
        int rc;

        while ((rc = tier_reserve(t_tns(r.t, 1, BLK), 1, NULL, &k[i], 1, &id, &off)) == -EAGAIN) {
            eagain++;
            tier_maintain(r.t); /* the loop's turn between requests */
            pump(&r);
        }
        cr_assert_eq(rc, 1, "put %d: %d", i, rc);
        t_fill((uint8_t *)tier_pool_base(r.t) + off, BLK, (uint64_t)i);
        tier_commit(t_tns(r.t, 1, BLK), 1, &k[i], 1);
        tier_poll(r.t, false);
        check(&r);
    }
    movers(&r);
    tier_stats_get(r.t, &st);
    cr_assert_eq(st.dropped, 0, "%llu blocks dropped while the disk had room",
                 (unsigned long long)st.dropped);
    cr_assert_gt(st.demotions, 0);
    cr_assert_gt(eagain, 0, "warm never filled");
    for (int i = 0; i < N; i++) {
        struct tier_story s;

        tier_story_get(t_tns_of(r.t, 1), &k[i], &s);
        cr_assert(s.present, "block %d lost", i);
    }
    rig_close(&r);
}

/* Review of issue 19: the waits for a full disk queue are said to
 * start oldest first. The disk's queue is full (commit X, 16 writes); then
 * three one-block durable commits A, B, C (waiters 1, 2, 3) wait in the
 * store. A turn with no completion refuses all three; then one slot frees
 * and the next turn starts one write: the oldest commit's, A's. That write
 * is failed on the simulated disk so that its waiter says whose it was. */
Test(tier_trust, a_waiting_durable_write_of_the_oldest_commit_starts_first)
{
    enum { N = 16 };
    struct tier_nvme *io;
    struct rig r;
    struct tier_key k[N + 3];
    uint32_t ids[N], pend;

    rig_open(&r, 4u << 20, 1.0, 8u << 20);
    io = tier_cold_io(r.cold);
    t_keys((kvt_key *)k, N + 3, 1901);
    put(&r, false, NULL, k, N + 3, 1900);
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, k, N, &r.waiter[0], ids, &pend), 0);
    cr_assert_eq(tier_nvme_sim_queued(io), 16, "the disk's queue is full");
    for (int i = 0; i < 3; i++) {
        cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &k[N + i], 1, &r.waiter[1 + i],
                                         ids, &pend), 0);
        cr_assert_eq(pend, 1);
    }
    cr_assert_eq(tier_nvme_sim_queued(io), 16);
    tier_maintain(r.t); /* no room: every wait refused (tierd runs this after every turn) */
    check(&r);
    cr_assert_eq(tier_nvme_sim_complete(io, 0, 0), 0); /* one of X's writes: one slot */
    cr_assert_geq(tier_poll(r.t, false), 0);
    tier_maintain(r.t);
    cr_assert_eq(tier_nvme_sim_queued(io), 16, "one waiting write started");
    cr_assert_eq(tier_nvme_sim_complete(io, 15, -EIO), 0); /* the write just started */
    cr_assert_geq(tier_poll(r.t, false), 0);
    cr_assert_eq(r.failed[1] + r.failed[2] + r.failed[3], 1);
    cr_assert_eq(r.failed[1], 1, "the write started was not the oldest commit's (A: %d, B: %d, "
                 "C: %d)", r.failed[1], r.failed[2], r.failed[3]);
    rig_close(&r);
}

/* Review of issue 19: a durable write that found the disk's queue
 * full waits in the store, and tier_maintain tries it after tier_poll has
 * given every slot a completion freed to the reads backlogged in the cold
 * tier. Reads that arrive after the durable commit keep the backlog
 * non-empty, so the commit's write never starts while they keep coming
 * (before issue 19 the commit polled the disk until its write went in). */
Test(tier_trust, a_waiting_durable_write_is_not_starved_by_later_reads)
{
    enum { CH = 8, NCH = 14, X = 16 };
    struct tier_nvme *io;
    struct rig r;
    struct tier_key p[NCH * CH], x[X], d;
    struct tier_story s;
    uint32_t ids[X], pend;
    size_t reads = 0;
    int turns = 0;

    rig_open(&r, 4u << 20, 0.3, 16u << 20);
    io = tier_cold_io(r.cold);
    t_keys((kvt_key *)p, NCH * CH, 1911);
    t_keys((kvt_key *)x, X, 1912);
    t_keys((kvt_key *)&d, 1, 1913);
    for (int c = 0; c < NCH; c++) { /* chains on disk, then out of warm */
        put(&r, false, NULL, &p[c * CH], CH, 1910 + (uint64_t)c * CH);
        cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 1, &p[c * CH], CH, &r.waiter[3],
                                         ids, &pend), 0);
        movers(&r);
    }
    movers(&r);
    cr_assert_eq(r.ready[3], NCH * CH);
    for (int i = 0; i < NCH * CH; i++) {
        tier_story_get(t_tns_of(r.t, 1), &p[i], &s);
        cr_assert(s.present && s.on_disk);
    }
    put(&r, false, NULL, x, X, 1920);
    put(&r, false, NULL, &d, 1, 1930);
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, x, X, &r.waiter[0], ids, &pend), 0);
    cr_assert_eq(tier_nvme_sim_queued(io), 16, "the disk's queue is full");
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &d, 1, &r.waiter[1], ids, &pend), 0);
    cr_assert_eq(pend, 1, "D's write waits in the store");
    /* tierd's loop: requests (a prefetch now and then), the disk, the mover */
    for (int c = 0; c < NCH; c++) {
        reads += tier_prefetch(t_tns(r.t, 1, BLK), &p[c * CH], CH, 0);
        for (int i = 0; i < CH; i++, turns++) {
            if (tier_nvme_sim_queued(io))
                cr_assert_eq(tier_nvme_sim_complete(io, 0, 0), 0);
            cr_assert_geq(tier_poll(r.t, false), 0);
            tier_maintain(r.t);
            check(&r);
        }
    }
    cr_log_info("%zu reads started, %d turns; X told %d/%d, D told %d (failed %d)",
                reads, turns, r.ready[0], r.failed[0], r.ready[1], r.failed[1]);
    cr_assert_eq(r.ready[0], X, "X's writes and syncs were done");
    cr_assert_eq(r.ready[1] + r.failed[1], 1, "after %d turns, the disk doing a request every "
                 "turn, D's write (queued before %zu later reads) is still not done",
                 turns, reads);
    rig_close(&r);
}

/* Fill warm with blocks not on disk until every one of keys[0..n) has
 * left it (clean leaves go first, and leaving is free for them): they are
 * disk-only then, the oldest first in the disk's eviction order. The
 * fillers are removed again. */
static void leave_warm(struct rig *r, const struct tier_key *keys, int n, uint64_t seed)
{
    enum { F = 200 };
    static struct tier_key f[F];
    struct tier_story s;
    size_t put_n = 0, rm;
    int j;

    t_keys((kvt_key *)f, F, seed);
    for (;;) {
        for (j = 0; j < n; j++) {
            tier_story_get(t_tns_of(r->t, 1), &keys[j], &s);
            if (s.level != TIER_L_COLD)
                break;
        }
        if (j == n)
            break;
        cr_assert_lt(put_n, F, "a block never left warm");
        put(r, false, NULL, &f[put_n], 1, seed * 1000 + put_n);
        put_n++;
    }
    /* the fillers go (none was written): warm has room, the disk as before */
    rm = tier_remove(t_tns(r->t, 1, BLK), f, put_n);
    cr_assert_eq(rm, put_n, "removed %zu of %zu fillers", rm, put_n);
}

/* A durable commit (by waiter[3]) of each of keys[0..n) in turn, answered,
 * then every one disk-only: the disk's first victims, in that order. */
static void on_disk_only(struct rig *r, const struct tier_key *keys, int n, uint64_t seed)
{
    uint32_t ids[1], pend;
    int before = r->ready[3];

    for (int i = 0; i < n; i++) {
        put(r, false, NULL, &keys[i], 1, seed + (uint64_t)i);
        cr_assert_eq(tier_commit_durable(t_tns(r->t, 1, BLK), 1, &keys[i], 1, &r->waiter[3], ids,
                                         &pend), 0);
        pump(r);
    }
    cr_assert_eq(r->ready[3] - before, n, "a setup block was not made durable");
    leave_warm(r, keys, n, seed + 77);
}

/* waiter[w] was answered durable for a batch including k: k is on disk. */
static void vouched(struct rig *r, int w, const struct tier_key *k, const char *what)
{
    struct tier_story s;

    check(r);
    tier_story_get(t_tns_of(r->t, 1), k, &s);
    cr_assert(s.present && s.on_disk, "acknowledged durable (%d) while %s, which it vouched "
              "for, was evicted from disk", r->ready[w], what);
}

static bool gone(struct rig *r, const struct tier_key *k)
{
    struct tier_story s;

    tier_story_get(t_tns_of(r->t, 1), k, &s);
    return !s.present;
}

/* A store whose disk holds two blocks, ac[0] and ac[1], both disk-only
 * (ac[0] the first victim), and a key other not stored yet. */
static void disk_full_of_two(struct rig *r, struct tier_key ac[2], struct tier_key *other,
                             uint64_t base)
{
    rig_open(r, 1u << 20, 1.0, 2 * BLK);
    t_keys((kvt_key *)ac, 2, base + 1);
    t_keys((kvt_key *)other, 1, base + 3);
    on_disk_only(r, ac, 2, base + 10);
}

/* waiter[0] commits [a, b] durably: pend of them waited for (why). */
static void commit_pair(struct rig *r, const struct tier_key *a, const struct tier_key *b,
                        uint32_t want, const char *why)
{
    struct tier_key batch[2] = { *a, *b };
    uint32_t ids[2], pend;
    int rc = tier_commit_durable(t_tns(r->t, 1, BLK), 2, batch, 2, &r->waiter[0], ids, &pend);

    cr_assert_geq(rc, 0, "durable commit: %d", rc);
    cr_assert_eq(pend, want, "%s", why);
}

/* Once the disk has run: waiter[0]'s commit of [a, b] was answered (n
 * answers in all), durable, both on disk, and victim left the disk. */
static void answered_holding(struct rig *r, int n, const struct tier_key *a,
                             const struct tier_key *b, const struct tier_key *victim)
{
    pump(r);
    cr_assert_eq(r->ready[0] + r->failed[0], n, "the last write never reported");
    vouched(r, 0, a, "the first key");
    vouched(r, 0, b, "the second key");
    cr_assert(gone(r, victim), "the disk evicted nothing: the test did not fill it");
    cr_assert_eq(r->ready[0], n, "a write failed (%d) although another block could leave the "
                 "disk", r->failed[0]);
}

/* Review of the reuse policy (store simulation, --evict-policy keep, seed
 * 33): a durable commit vouches for a block already on disk (nothing to
 * write, so nothing to wait for) and for one it writes; that write found
 * the disk full and evicted the oldest disk-only leaf, the very block
 * already vouched for, and the commit was acknowledged durable with it
 * gone. Now a block a durable commit vouches for stays on disk until the
 * commit is answered: the write evicts another block instead. */
Test(tier_trust, a_durable_commit_keeps_its_blocks_already_on_disk_until_it_is_answered)
{
    struct rig r;
    struct tier_key ac[2], b;

    disk_full_of_two(&r, ac, &b, 2000); /* a = ac[0] the first victim, then c */
    put(&r, false, NULL, &b, 1, 2030);
    /* a durable commit of [a (on disk), b (to write, the disk full)] */
    commit_pair(&r, &ac[0], &b, 1, "b's write is waited for");
    answered_holding(&r, 1, &ac[0], &b, &ac[1]);
    rig_close(&r);
}

/* Review of the durable hold: its commit's other key was in hot, so the
 * commit waited for the copy down; that copy's waiters leave the list of
 * moves before the write to disk starts, and the write, finding the disk
 * full, saw a commit that waited for nothing and evicted the block it
 * vouched for. The waits taken off the lists for a moment still count. */
Test(tier_trust, a_durable_hold_lasts_across_the_copy_down_of_its_other_key)
{
    struct rig r;
    struct tier_key ac[2], h;

    disk_full_of_two(&r, ac, &h, 2100);
    put(&r, true, NULL, &h, 1, 2130); /* in hot */
    commit_pair(&r, &ac[0], &h, 1, "h's copy down and write are waited for");
    answered_holding(&r, 1, &ac[0], &h, &ac[1]);
    rig_close(&r);
}

/* The same while the commit waits for a key another client still writes:
 * that client's commit runs the wait (off the list) and starts the write,
 * which found the disk full and evicted the held block. */
Test(tier_trust, a_durable_hold_lasts_across_the_wait_for_another_clients_key)
{
    struct rig r;
    struct tier_key ac[2], b;
    uint32_t ids[1];
    uint64_t off;

    disk_full_of_two(&r, ac, &b, 2200);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, BLK), 7, NULL, &b, 1, ids, &off), 1);
    t_fill((uint8_t *)tier_pool_base(r.t) + off, BLK, 2230);
    /* b reserved by client 7, not committed */
    commit_pair(&r, &ac[0], &b, 1, "b, another client's, is waited for");
    cr_assert_eq(tier_commit(t_tns(r.t, 1, BLK), 7, &b, 1), 1);
    answered_holding(&r, 1, &ac[0], &b, &ac[1]);
    rig_close(&r);
}

/* The same while a write's waiters are told, one by one, off the list of
 * moves: the first one's callback commits another block durably (a client
 * whose next request goes in as it is answered), and that write found the
 * disk full and evicted what the second one's commit vouched for. */
static struct rig *hook_rig;
static struct tier_key hook_key;

static void commit_in_callback(struct rig *r, int w)
{
    uint32_t ids[1], pend;

    if (w != 1 || hook_rig != r)
        return;
    hook_rig = NULL; /* once */
    put(r, false, NULL, &hook_key, 1, 2390);
    cr_assert_geq(tier_commit_durable(t_tns(r->t, 1, BLK), 3, &hook_key, 1, &r->waiter[2], ids,
                                      &pend), 0);
}

Test(tier_trust, a_durable_hold_lasts_while_its_moves_waiters_are_told)
{
    struct rig r;
    struct tier_key ac[2], b, batch[2];
    uint32_t ids[2], pend;
    int rc;

    rig_open(&r, 1u << 20, 1.0, 3 * BLK); /* a, c, and room for b */
    t_keys((kvt_key *)ac, 2, 2301);
    t_keys((kvt_key *)&b, 1, 2303);
    t_keys((kvt_key *)&hook_key, 1, 2304);
    on_disk_only(&r, ac, 2, 2310);
    put(&r, false, NULL, &b, 1, 2330);
    /* waiter 1 starts b's write; waiter 0 joins it, vouching for a too */
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &b, 1, &r.waiter[1], ids, &pend), 0);
    cr_assert_eq(pend, 1);
    batch[0] = ac[0];
    batch[1] = b;
    rc = tier_commit_durable(t_tns(r.t, 1, BLK), 2, batch, 2, &r.waiter[0], ids, &pend);
    cr_assert_geq(rc, 0, "durable commit: %d", rc);
    cr_assert_eq(pend, 1, "b's write is joined");
    r.hook = commit_in_callback;
    hook_rig = &r;
    pump(&r);
    cr_assert_null(hook_rig, "waiter 1 was never told");
    cr_assert_eq(r.ready[1], 1);
    cr_assert_eq(r.ready[0] + r.failed[0], 1, "b's write never reported to waiter 0");
    cr_assert_eq(r.ready[2] + r.failed[2], 1, "the write in the callback never reported");
    vouched(&r, 0, &ac[0], "a");
    cr_assert(gone(&r, &ac[1]), "the disk evicted nothing: the test did not fill it");
    rig_close(&r);
}

/* A block the commit wrote itself: written, then (the commit still waiting
 * for another client's key) out of warm, and the other key's write found
 * the disk full and evicted it before the commit was answered. A write for
 * a durable commit holds its block as one on disk already is. */
Test(tier_trust, a_block_a_durable_commit_wrote_stays_on_disk_until_it_is_answered)
{
    struct rig r;
    struct tier_key b, c, e;
    uint32_t ids[1];
    uint64_t off;

    rig_open(&r, 1u << 20, 1.0, 2 * BLK);
    t_keys((kvt_key *)&b, 1, 2401);
    t_keys((kvt_key *)&c, 1, 2402);
    t_keys((kvt_key *)&e, 1, 2403);
    put(&r, false, NULL, &b, 1, 2410);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, BLK), 7, NULL, &e, 1, ids, &off), 1);
    t_fill((uint8_t *)tier_pool_base(r.t) + off, BLK, 2430);
    /* b to write, e client 7's, not committed yet */
    commit_pair(&r, &b, &e, 2, "both are waited for");
    pump(&r);
    cr_assert_eq(r.ready[0], 1, "b's write was told");
    on_disk_only(&r, &c, 1, 2420); /* the disk full: b, then c */
    leave_warm(&r, &b, 1, 2440);
    cr_assert_eq(tier_commit(t_tns(r.t, 1, BLK), 7, &e, 1), 1);
    answered_holding(&r, 2, &b, &e, &c);
    rig_close(&r);
}

/* Review of the durable hold's cost: K durable commits (K waiters) of B
 * keys each, B-1 of them written at once (the disk full of disk-only
 * fillers: every write evicts one), the last key another client's, not
 * committed yet. Every block written is held until its commit is
 * answered, and each write that made room walked every hold, and for each
 * hold every wait in the store: O(holds x waits) a write, some 18 s for
 * these 4032 writes (0.7 s before the blocks written were held), now
 * O(holds + waits): 1.7 s. The time is logged, not asserted (a machine's
 * speed is no test); what is asserted is that every commit is answered and
 * every block it vouched for is on disk. */
#define HK_MAX 512
static int hk_ready[HK_MAX], hk_failed[HK_MAX], hk_rc;
static char hk_w[HK_MAX];

static void hk_on_ready(void *ctx, void *waiter, uint32_t id, int rc)
{
    int w = (int)((char *)waiter - hk_w);

    (void)ctx;
    (void)id;
    cr_assert(w >= 0 && w < HK_MAX);
    if (rc == 0)
        hk_ready[w]++;
    else
        hk_failed[w]++, hk_rc = rc;
}

static int env_int(const char *name, int dflt)
{
    const char *s = getenv(name);

    return s ? atoi(s) : dflt;
}

Test(tier_trust, many_waiting_durable_commits_on_a_full_disk_stay_cheap)
{
    const uint64_t blk = 4096;
    int K = env_int("HK_K", 64), B = env_int("HK_B", 64), N = K * (B - 1), NF = K * B;
    char dir[64];
    struct tier_cold *cold;
    struct tier *t;
    struct tier_ns *ns;
    struct tier_key *fk = calloc((size_t)NF, sizeof(*fk));
    struct tier_key *wk = calloc((size_t)K * B, sizeof(*wk));
    uint32_t *ids = calloc((size_t)K * B, sizeof(*ids)), pend;
    uint64_t *offs = calloc((size_t)K * B, sizeof(*offs)), slot;
    struct timespec t0, t1;
    double secs;
    int answered = 0;

    cr_assert(K <= HK_MAX && fk && wk && ids && offs);
    memset(hk_ready, 0, sizeof(hk_ready));
    memset(hk_failed, 0, sizeof(hk_failed));
    slot = tier_slot_bytes(blk);
    t_tmpdir("kvt-trust", dir, sizeof(dir));
    {
        struct tier_cold_cfg cc = { .dir = dir, .bytes = (uint64_t)NF * slot, .qd = 16,
                                    .batch = 4, .sim = true };
        struct tier_cfg tc = { .warm_bytes = ((uint64_t)K * B + 256) * slot,
                               .high_wm = 1.0, .low_wm = 0.6, .ready = hk_on_ready };

        cr_assert_eq(tier_cold_open(&cc, &cold), 0);
        tc.cold = cold;
        cr_assert_eq(tier_create(&tc, &t), 0);
    }
    ns = t_tns(t, 1, blk);
    /* the disk full of fillers, on disk and then out of warm */
    t_keys((kvt_key *)fk, (size_t)NF, 2501);
    for (int i = 0; i < NF; i += 64) {
        int n = NF - i < 64 ? NF - i : 64;

        cr_assert_eq(tier_reserve(ns, 1, NULL, fk + i, (size_t)n, ids, offs), n);
        cr_assert_eq(tier_commit(ns, 1, fk + i, (size_t)n), (size_t)n);
    }
    tier_flush_begin(t);
    for (int g = 0; g < 100000 && tier_flush_busy(t); g++) {
        tier_maintain(t);
        t_store_settle(t, cold, NULL);
    }
    cr_assert(!tier_flush_busy(t));
    {
        /* pushers, not on disk, until every filler left warm; then removed */
        struct tier_key *pk = calloc((size_t)N * 4 + 4096, sizeof(*pk));
        size_t np = 0;

        cr_assert(pk);
        t_keys((kvt_key *)pk, (size_t)N * 4 + 4096, 2503);
        for (;;) {
            int j;
            struct tier_story s;

            for (j = 0; j < NF; j++) {
                tier_story_get(t_tns_of(t, 1), &fk[j], &s);
                if (s.level != TIER_L_COLD)
                    break;
            }
            if (j == NF)
                break;
            cr_assert_lt(np + 64, (size_t)N * 4 + 4096, "fillers never left warm");
            cr_assert_eq(tier_reserve(ns, 1, NULL, pk + np, 64, ids, offs), 64);
            cr_assert_eq(tier_commit(ns, 1, pk + np, 64), 64);
            np += 64;
        }
        cr_assert_eq(tier_remove(ns, pk, np), np);
        free(pk);
    }
    /* the batches: B-1 keys of each put, the last reserved by client 7 */
    t_keys((kvt_key *)wk, (size_t)K * B, 2502);
    for (int k = 0; k < K; k++) {
        int rc;

        while ((rc = tier_reserve(ns, 1, NULL, wk + k * B, (size_t)(B - 1), ids, offs)) ==
               -EAGAIN) {
            tier_maintain(t);
            t_store_settle(t, cold, NULL);
        }
        cr_assert_eq(rc, B - 1, "reserve: %d", rc);
        cr_assert_eq(tier_commit(ns, 1, wk + k * B, (size_t)(B - 1)), (size_t)(B - 1));
        cr_assert_eq(tier_reserve(ns, 7, NULL, wk + k * B + B - 1, 1, ids, offs), 1);
    }
    {
        struct tier_stats st;

        tier_stats_get(t, &st);
        cr_log_info("before: %llu on disk, %llu in warm",
                    (unsigned long long)st.blocks[TIER_L_COLD],
                    (unsigned long long)st.blocks[TIER_L_WARM]);
    }
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (int k = 0; k < K; k++) {
        int rc = tier_commit_durable(ns, 1, wk + k * B, (size_t)B, &hk_w[k], ids, &pend);

        cr_assert_geq(rc, 0, "commit %d: %d", k, rc);
    }
    for (int g = 0; g < 100000; g++) {
        int told = 0;

        t_store_settle(t, cold, NULL);
        tier_maintain(t);
        for (int k = 0; k < K; k++)
            told += hk_ready[k] + hk_failed[k];
        if (told == N)
            break;
    }
    clock_gettime(CLOCK_MONOTONIC, &t1);
    secs = (double)(t1.tv_sec - t0.tv_sec) + (double)(t1.tv_nsec - t0.tv_nsec) / 1e9;
    for (int k = 0; k < K; k++)
        cr_assert_eq(tier_commit(ns, 7, wk + k * B + B - 1, 1), 1);
    for (int g = 0; g < 100000; g++) {
        int told = 0;

        t_store_settle(t, cold, NULL);
        tier_maintain(t);
        for (int k = 0; k < K; k++)
            told += hk_ready[k] + hk_failed[k];
        if (told == K * B)
            break;
    }
    for (int k = 0; k < K; k++) {
        answered += hk_ready[k] == B;
        cr_assert_eq(hk_failed[k], 0, "commit %d: %d failed (%d), %d ready", k, hk_failed[k],
                     hk_rc, hk_ready[k]);
    }
    cr_log_info("K=%d B=%d: %d blocks written on a full disk in %.3f s; %d answered", K, B, N,
                secs, answered);
    cr_assert_eq(answered, K);
    for (int i = 0; i < K * B; i++) {
        struct tier_story s;

        tier_story_get(t_tns_of(t, 1), &wk[i], &s);
        cr_assert(s.present && s.on_disk, "block %d of commit %d, acknowledged, not on disk",
                  i % B, i / B);
    }
    t_store_close(t, cold, NULL, dir);
    free(fk);
    free(wk);
    free(ids);
    free(offs);
}

/* Review of the victim-only hold check (29246d8): a hold of an answered
 * commit (its block written for it, then answered) stays until the next
 * durable commit unless a walk for a victim reaches that very block; its
 * waiter, reused for a get that waits for a read from disk, "still waits",
 * and the stale hold kept the block on disk: a later write found nothing
 * to evict (the old walk freed every stale hold it passed on its first
 * block). A hold lasts as long as its commit, not as its waiter's next
 * wait. */
Test(tier_trust, a_stale_hold_keeps_nothing_on_disk_once_its_waiter_reads)
{
    struct rig r;
    struct tier_key d[3], b, k, w1, w2, batch[2]; /* d: h (held), v, g */
    uint32_t ids[2], pend, gid, gpend = 0;
    uint64_t off, goff;
    int rc;

    rig_open(&r, 1u << 20, 1.0, 4 * BLK);
    t_keys((kvt_key *)d, 3, 2601);
    t_keys((kvt_key *)&b, 1, 2604);
    t_keys((kvt_key *)&k, 1, 2605);
    t_keys((kvt_key *)&w1, 1, 2606);
    t_keys((kvt_key *)&w2, 1, 2607);
    on_disk_only(&r, d, 3, 2610); /* h, v, g: h the first victim */
    /* waiter 1 vouches for h, and waits for k, client 7's */
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, BLK), 7, NULL, &k, 1, ids, &off), 1);
    t_fill((uint8_t *)tier_pool_base(r.t) + off, BLK, 2630);
    batch[0] = d[0];
    batch[1] = k;
    cr_assert_geq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, batch, 2, &r.waiter[1], ids, &pend),
                  0);
    cr_assert_eq(pend, 1, "k is waited for");
    /* waiter 0: b written for its commit, which is answered */
    put(&r, false, NULL, &b, 1, 2631);
    cr_assert_geq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &b, 1, &r.waiter[0], ids, &pend), 0);
    cr_assert_eq(pend, 1, "b is written");
    pump(&r);
    cr_assert_eq(r.ready[0], 1, "b's commit was answered");
    leave_warm(&r, &b, 1, 2640); /* the disk full: h, v, g, b */
    /* a write that makes room (a flush, no durable commit): h held, v goes */
    put(&r, false, NULL, &w1, 1, 2650);
    tier_flush_begin(r.t);
    movers(&r);
    cr_assert(gone(&r, &d[1]), "the flush's write evicted nothing");
    /* waiter 0 again, a get: it waits for g's read */
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = &d[2],
                                                   .n = 1, .ids = &gid, .offs = &goff,
                                                   .waiter = &r.waiter[0], .pending = &gpend }),
                 1);
    cr_assert_eq(gpend, 1, "g is read from disk");
    /* waiter 2 commits w2: the disk full, b (its commit answered) may go */
    put(&r, false, NULL, &w2, 1, 2660);
    rc = tier_commit_durable(t_tns(r.t, 1, BLK), 2, &w2, 1, &r.waiter[2], ids, &pend);
    cr_assert_geq(rc, 0, "w2's write found nothing to evict (%d): b is still held for a commit "
                  "answered", rc);
    pump(&r);
    cr_assert_eq(r.ready[2], 1, "w2's write failed (%d)", r.failed[2]);
    cr_assert(gone(&r, &b), "b, vouched for by nobody now, stayed");
    vouched(&r, 1, &d[0], "h");
    tier_release(r.t, &gid, 1, false);
    cr_assert_eq(tier_commit(t_tns(r.t, 1, BLK), 7, &k, 1), 1);
    pump(&r);
    rig_close(&r);
}

/* Review of the durable hold (stop 28): a loop that tells the waiters of a
 * move, or of a key that will never be committed, has them off the store's
 * lists, so a waiter forgotten from the callback of the one told before it
 * (a client closed as it is answered) was still called back: in an engine,
 * a callback into freed memory. Each forgets the other as it is told; the
 * other is never told after. */
static void forget_other(struct rig *r, int w)
{
    if ((w == 0 || w == 1) && hook_rig == r) {
        hook_rig = NULL; /* once */
        tier_forget_waiter(r->t, &r->waiter[1 - w]);
    }
}

/* Waiters 0 and 1 each commit [b] durably: one write, both its waiters. */
Test(tier_trust, a_waiter_forgotten_while_a_writes_waiters_are_told_is_not_told)
{
    struct rig r;
    struct tier_key b;
    uint32_t ids[1], pend;

    rig_open(&r, 1u << 20, 1.0, 4 * BLK);
    t_keys((kvt_key *)&b, 1, 2701);
    put(&r, false, NULL, &b, 1, 2710);
    for (int w = 0; w < 2; w++) {
        cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &b, 1, &r.waiter[w], ids, &pend),
                     0);
        cr_assert_eq(pend, 1, "waiter %d waits for b's write", w);
    }
    r.hook = forget_other;
    hook_rig = &r;
    pump(&r);
    cr_assert_null(hook_rig, "neither waiter was told");
    cr_assert_eq(r.ready[0] + r.failed[0] + r.ready[1] + r.failed[1], 1,
                 "told %d/%d and %d/%d: the waiter forgotten in the first one's callback was "
                 "called back", r.ready[0], r.failed[0], r.ready[1], r.failed[1]);
    vouched(&r, r.ready[0] ? 0 : 1, &b, "b");
    rig_close(&r);
}

/* Waiters 0 and 1 each wait for k, client 7's, which client 7 aborts. */
Test(tier_trust, a_waiter_forgotten_while_a_keys_failed_waits_are_told_is_not_told)
{
    struct rig r;
    struct tier_key k;
    uint32_t ids[1], pend;
    uint64_t off;

    rig_open(&r, 1u << 20, 1.0, 4 * BLK);
    t_keys((kvt_key *)&k, 1, 2801);
    cr_assert_eq(tier_reserve(t_tns(r.t, 1, BLK), 7, NULL, &k, 1, ids, &off), 1);
    for (int w = 0; w < 2; w++) {
        cr_assert_geq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &k, 1, &r.waiter[w], ids,
                                          &pend), 0);
        cr_assert_eq(pend, 1, "waiter %d waits for k, client 7's", w);
    }
    r.hook = forget_other;
    hook_rig = &r;
    cr_assert_eq(tier_abort(t_tns(r.t, 1, BLK), 7, &k, 1), 1);
    pump(&r);
    cr_assert_null(hook_rig, "neither waiter was told");
    cr_assert_eq(r.ready[0] + r.failed[0] + r.ready[1] + r.failed[1], 1,
                 "told %d/%d and %d/%d: the waiter forgotten in the first one's callback was "
                 "called back", r.ready[0], r.failed[0], r.ready[1], r.failed[1]);
    cr_assert_eq(r.ready[0] + r.ready[1], 0, "k was never stored: no commit of it is durable");
    check(&r);
    rig_close(&r);
}

/* Review of 3f9adf6: the loops' scopes do not cover the move that
 * tier_demote_for makes before its write goes in. Waiter 0 waits (disk
 * queue full) for x, which then gets onto disk and out of warm without the
 * wait being run; the disk is full. Waiter 2 commits y durably: y's move is
 * made with waiter 2 in it, the write finds the disk full and evicts x,
 * whose wait fails: waiter 0's callback forgets waiter 2 (a client closed as
 * another is answered). Waiter 2 was still called back when y landed. */
static void forget_2_when_0_told(struct rig *r, int w)
{
    if (w == 0 && hook_rig == r) {
        hook_rig = NULL; /* once */
        tier_forget_waiter(r->t, &r->waiter[2]);
    }
}

Test(tier_trust, a_waiter_forgotten_while_its_own_write_makes_room_is_not_told)
{
    enum { Q = 16 }; /* the disk's queue, and its size in blocks */
    static struct tier_key d[Q], f[Q - 1];
    struct rig r;
    struct tier_key x, y;
    struct tier_story s;
    uint32_t ids[Q], pend;

    rig_open(&r, 1u << 20, 1.0, Q * BLK);
    t_keys((kvt_key *)d, Q, 5701);
    t_keys((kvt_key *)f, Q - 1, 5702);
    t_keys((kvt_key *)&x, 1, 5703);
    t_keys((kvt_key *)&y, 1, 5704);
    put(&r, false, NULL, d, Q, 5710);
    put(&r, false, NULL, &x, 1, 5730);
    /* the queue full of d's writes: waiter 0's write of x waits in the store */
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 3, d, Q, &r.waiter[3], ids, &pend), 0);
    cr_assert_eq(pend, Q);
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &x, 1, &r.waiter[0], ids, &pend), 0);
    cr_assert_eq(pend, 1, "x waits (the disk's queue is full)");
    pump(&r); /* no tier_maintain: x's wait is not run */
    cr_assert_eq(r.ready[3], Q);
    cr_assert_eq(tier_remove(t_tns(r.t, 1, BLK), d, Q), (size_t)Q, "d leaves the disk");
    /* waiter 1 writes x (answered), and x leaves warm: disk-only */
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &x, 1, &r.waiter[1], ids, &pend), 0);
    cr_assert_eq(pend, 1);
    pump(&r);
    cr_assert_eq(r.ready[1], 1);
    leave_warm(&r, &x, 1, 5740);
    cr_assert_eq(r.ready[0] + r.failed[0], 0, "waiter 0 told already: the setup went wrong");
    /* the disk full: x and f (f stays in warm, so x is the only victim) */
    put(&r, false, NULL, f, Q - 1, 5750);
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 1, BLK), 3, f, Q - 1, &r.waiter[3], ids, &pend),
                 0);
    pump(&r);
    cr_assert_eq(r.ready[3], Q + Q - 1, "f was not written (%d failed)", r.failed[3]);
    tier_story_get(t_tns_of(r.t, 1), &x, &s);
    cr_assert(s.present && s.level == TIER_L_COLD, "x is not disk-only");
    /* waiter 2: y's write makes room, x goes, waiter 0's wait fails, and
     * waiter 0's callback forgets waiter 2 */
    put(&r, false, NULL, &y, 1, 5760);
    r.hook = forget_2_when_0_told;
    hook_rig = &r;
    cr_assert_geq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &y, 1, &r.waiter[2], ids, &pend), 0);
    cr_assert_null(hook_rig, "waiter 0 was not told as x left the disk: x was not the victim");
    cr_assert(gone(&r, &x), "x stayed on disk");
    pump(&r);
    cr_assert_eq(r.ready[2] + r.failed[2], 0,
                 "waiter 2, forgotten in waiter 0's callback during its own commit, was called "
                 "back (%d ready, %d failed) when y's write landed", r.ready[2], r.failed[2]);
    check(&r);
    rig_close(&r);
}

/* Warm full, over a full disk the store may evict nothing from: z on disk
 * (held for waiter 0) when on_disk, else in hot; d's writes in flight; v,
 * the oldest dirty leaf, which waiter 0's durable commit waits to write
 * (the disk's queue full); fillers. Warm's next slot drops v, and waiter
 * 0's callback then forgets waiter 2 (a client closed as another is
 * answered). */
static void warm_full_dropping_v(struct rig *r, const struct tier_key *z, bool on_disk,
                                 struct tier_key *v, uint64_t base)
{
    enum { Q = 16, SLOTS = 64 }; /* the disk's queue; warm's slots (one 2 MiB segment) */
    static struct tier_key d[Q], f[SLOTS - Q - 1];
    struct tier_key zv[2] = { *z };
    struct tier_story s;
    uint32_t ids[Q], pend;

    rig_open(r, (uint64_t)SLOTS * BLK, 1.0, (Q + on_disk) * BLK);
    t_keys((kvt_key *)d, Q, base + 1);
    t_keys((kvt_key *)f, SLOTS - Q - 1, base + 2);
    t_keys((kvt_key *)v, 1, base + 4);
    if (on_disk)
        on_disk_only(r, z, 1, base + 10);
    else
        put(r, true, NULL, z, 1, base + 10);
    put(r, false, NULL, d, Q, base + 20);
    cr_assert_eq(tier_commit_durable(t_tns(r->t, 1, BLK), 3, d, Q, &r->waiter[3], ids, &pend), 0);
    cr_assert_eq(pend, Q);
    put(r, false, NULL, v, 1, base + 30);
    zv[1] = *v;
    cr_assert_eq(tier_commit_durable(t_tns(r->t, 1, BLK), 2, on_disk ? zv : v, 1 + on_disk,
                                     &r->waiter[0], ids, &pend), 0);
    cr_assert_eq(pend, 1, "v waits (the disk's queue is full)");
    put(r, false, NULL, f, SLOTS - Q - 1, base + 40);
    tier_story_get(t_tns_of(r->t, 1), v, &s);
    cr_assert(s.present && s.level == TIER_L_WARM, "v left warm while it was filled");
    cr_assert_eq(r->ready[0] + r->failed[0], 0, "waiter 0 told already: the setup went wrong");
    r->hook = forget_2_when_0_told;
    hook_rig = r;
}

/* Waiter 2 gets z (pend: one block on its way), which made room in warm:
 * v was dropped and waiter 2 forgotten; it is not told when z lands. */
static void getter_forgotten_not_told(struct rig *r, const struct tier_key *z,
                                      const struct tier_key *v, const char *move)
{
    uint32_t zid, pend;
    uint64_t zoff;
    int rc = tier_get(&(struct tier_get_args){ .ns = t_tns(r->t, 1, BLK), .keys = z, .n = 1,
                                               .ids = &zid, .offs = &zoff,
                                               .waiter = &r->waiter[2], .pending = &pend });

    cr_assert_null(hook_rig, "waiter 0 was not told as z's %s made room (get: %d): v was not "
                   "dropped", move, rc);
    cr_assert_eq(rc, 1, "z's %s did not start: %d", move, rc);
    cr_assert_eq(pend, 1);
    cr_assert(gone(r, v), "v stayed");
    pump(r);
    cr_assert_eq(r->ready[2] + r->failed[2], 0,
                 "waiter 2, forgotten in waiter 0's callback during its own get, was called "
                 "back (%d ready, %d failed) when z's %s landed", r->ready[2], r->failed[2], move);
    tier_release(r->t, &zid, 1, false);
    check(r);
}

/* Review of 3f9adf6: a get of z makes room in warm for z's move before the
 * move is listed, and waiters told then may forget its getter. The read of
 * a block only on disk (tier_promote): */
Test(tier_trust, a_getter_forgotten_while_its_read_from_disk_makes_room_in_warm_is_not_told)
{
    struct rig r;
    struct tier_key z, v;

    t_keys((kvt_key *)&z, 1, 5803);
    warm_full_dropping_v(&r, &z, true, &v, 5800);
    getter_forgotten_not_told(&r, &z, &v, "read from disk");
    rig_close(&r);
}

/* The copy down of a block in hot for a warm reader (tier_hot_down): */
Test(tier_trust, a_getter_forgotten_while_its_copy_down_from_hot_makes_room_in_warm_is_not_told)
{
    struct rig r;
    struct tier_key z, v;

    t_keys((kvt_key *)&z, 1, 5903);
    warm_full_dropping_v(&r, &z, false, &v, 5900);
    getter_forgotten_not_told(&r, &z, &v, "copy down");
    rig_close(&r);
}

/* Review of c56382b, which pruned the holds of answered commits only when
 * the disk's oldest leaf was held: as
 * a_stale_hold_keeps_nothing_on_disk_once_its_waiter_reads, but the
 * flushes' victims (v, x) are held by nobody, so no walk pruned b's stale
 * hold, which looked live again once its waiter waited for a get: w2's
 * write found the disk full (-ENOSPC) with b, vouched for by nobody, on it. */
Test(tier_trust, a_stale_hold_outlives_no_walk_for_a_victim)
{
    struct rig r;
    struct tier_key d[3], b, w1[2], w2; /* d: v, x, g */
    uint32_t ids[2], pend, gid, gpend = 0;
    uint64_t goff;
    int rc;

    rig_open(&r, 1u << 20, 1.0, 4 * BLK);
    t_keys((kvt_key *)d, 3, 3601);
    t_keys((kvt_key *)&b, 1, 3604);
    t_keys((kvt_key *)w1, 2, 3606);
    t_keys((kvt_key *)&w2, 1, 3608);
    on_disk_only(&r, d, 3, 3610); /* v, x, g: v the first victim */
    put(&r, false, NULL, &b, 1, 3631);
    cr_assert_geq(tier_commit_durable(t_tns(r.t, 1, BLK), 2, &b, 1, &r.waiter[0], ids, &pend), 0);
    cr_assert_eq(pend, 1, "b is written");
    pump(&r);
    cr_assert_eq(r.ready[0], 1, "b's commit was answered");
    leave_warm(&r, &b, 1, 3640); /* the disk full: v, x, g, b */
    for (int i = 0; i < 2; i++) { /* two flushes: v then x go (neither held) */
        put(&r, false, NULL, &w1[i], 1, 3650 + i);
        tier_flush_begin(r.t);
        movers(&r);
    }
    cr_assert(gone(&r, &d[0]) && gone(&r, &d[1]), "the flushes evicted v and x");
    /* waiter 0 again, a get: it waits for g's read */
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = t_tns(r.t, 1, BLK), .keys = &d[2],
                                                   .n = 1, .ids = &gid, .offs = &goff,
                                                   .waiter = &r.waiter[0], .pending = &gpend }),
                 1);
    cr_assert_eq(gpend, 1, "g is read from disk");
    put(&r, false, NULL, &w2, 1, 3660);
    rc = tier_commit_durable(t_tns(r.t, 1, BLK), 2, &w2, 1, &r.waiter[2], ids, &pend);
    cr_assert_geq(rc, 0, "w2's commit: %d", rc);
    pump(&r);
    cr_assert_eq(r.ready[2], 1, "w2's write failed (%d ready, %d failed)", r.ready[2], r.failed[2]);
    cr_assert(gone(&r, &b), "b, vouched for by nobody now (its commit answered), stayed on disk");
    tier_release(r.t, &gid, 1, false);
    pump(&r);
    rig_close(&r);
}

/* Put one block k of ns (block bytes blk) in warm and make it durable. */
static void put_durable_ns(struct rig *r, uint32_t ns, uint64_t blk, const struct tier_key *k,
                           uint64_t seed)
{
    uint32_t ids[1], pend;
    uint64_t off;

    cr_assert_eq(tier_reserve(t_tns(r->t, ns, blk), 1, NULL, k, 1, ids, &off), 1);
    t_fill((uint8_t *)tier_pool_base(r->t) + off, blk, seed);
    cr_assert_eq(tier_commit(t_tns(r->t, ns, blk), 1, k, 1), 1u);
    cr_assert_eq(tier_commit_durable(t_tns(r->t, ns, blk), 1, k, 1, &r->waiter[3], ids, &pend),
                 0);
    pump(r);
}

/* Not a broken promise but blocks lost for nothing: blocks of two sizes
 * (32 and 48 KiB: two models, or a hybrid model's groups) fill the disk in
 * turn, a0 b0 a1 b1 a2 b2, and leave warm a's first: the disk's eviction
 * order is a0 a1 a2 b0 b1 b2. A 48 KiB write evicted all three a's, whose
 * 32 KiB holes it could not use, and then b0: four blocks for one. Now it
 * evicts b0 alone, the oldest block whose space fits it. */
Test(tier_trust, a_write_on_a_full_disk_of_two_sizes_evicts_one_block_it_fits_in)
{
    enum { F = 300 };
    const uint64_t A = 32u << 10, B = 48u << 10;
    static struct tier_key f[F];
    struct tier_key a[3], b[3], x;
    struct tier_stats st;
    struct tier_story s;
    struct rig r;
    uint32_t ids[1], pend;
    size_t nf = 0;
    int left;

    rig_open(&r, 4u << 20, 1.0, 3 * tier_slot_bytes(A) + 3 * tier_slot_bytes(B));
    t_keys((kvt_key *)a, 3, 6001);
    t_keys((kvt_key *)b, 3, 6002);
    t_keys((kvt_key *)&x, 1, 6003);
    t_keys((kvt_key *)f, F, 6004);
    for (int i = 0; i < 3; i++) {
        put_durable_ns(&r, 1, A, &a[i], 6010 + (uint64_t)i);
        put_durable_ns(&r, 2, B, &b[i], 6020 + (uint64_t)i);
    }
    cr_assert_eq(r.ready[3], 6, "the six blocks were not all made durable (%d failed)",
                 r.failed[3]);
    /* fillers push all six out of warm (leaving is free: they are on disk) */
    do {
        left = 0;
        for (int i = 0; i < 3; i++) {
            tier_story_get(t_tns_of(r.t, 1), &a[i], &s);
            left += s.level != TIER_L_COLD;
            tier_story_get(t_tns_of(r.t, 2), &b[i], &s);
            left += s.level != TIER_L_COLD;
        }
        if (left) {
            cr_assert_lt(nf, F, "%d blocks never left warm", left);
            put(&r, false, NULL, &f[nf], 1, 6100 + nf);
            nf++;
        }
    } while (left);
    cr_assert_eq(tier_remove(t_tns(r.t, 1, BLK), f, nf), nf);
    tier_stats_get(r.t, &st);
    cr_assert_eq(st.evictions[TIER_L_COLD], 0, "the disk evicted during the setup");
    /* x, 48 KiB, onto the full disk */
    cr_assert_eq(tier_reserve(t_tns(r.t, 2, B), 1, NULL, &x, 1, ids, &(uint64_t){ 0 }), 1);
    cr_assert_eq(tier_commit(t_tns(r.t, 2, B), 1, &x, 1), 1u);
    cr_assert_eq(tier_commit_durable(t_tns(r.t, 2, B), 2, &x, 1, &r.waiter[2], ids, &pend), 0);
    pump(&r);
    cr_assert_eq(r.ready[2], 1, "x was not made durable (%d failed)", r.failed[2]);
    tier_story_get(t_tns_of(r.t, 2), &b[0], &s);
    cr_assert(!s.present, "b0, the oldest block x fits in, is still on disk");
    tier_story_get(t_tns_of(r.t, 1), &a[0], &s);
    tier_stats_get(r.t, &st);
    cr_assert(s.present && s.on_disk && st.evictions[TIER_L_COLD] == 1,
              "the write evicted %llu blocks, a0 among them (%s): its 32 KiB could not hold "
              "x's 48", (unsigned long long)st.evictions[TIER_L_COLD],
              s.present ? "kept" : "gone");
    check(&r);
    rig_close(&r);
}
