/* SPDX-License-Identifier: MIT */
/*
 * tier_ns.c - the store's namespace object (tier_ns_open): found by id,
 * the same object for the same id and size, refused for another size or
 * one the pool cannot hold, still open (and usable) after a purge, and
 * after a restart the way back to the blocks on disk: the same bytes at
 * its size, never at another.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "t.h"
#include "tier.h"
#include "tier_cold.h"

#define BLK (64u << 10)
#define N 4

struct rig {
    char dir[64];
    struct tier *t;
    struct tier_req *req;    /* the gets, driven by the store through the disk's wait */
    struct tier_req_res res; /* its answer (ids, offs copied: valid after the call) */
    uint32_t ids[N];
    uint64_t offs[N];
    int calls;
};

static void on_done(void *user, const struct tier_req_res *res)
{
    struct rig *r = user;

    r->res = *res;
    if (res->op == TIER_REQ_GET && res->rc > 0) {
        memcpy(r->ids, res->ids, (size_t)res->rc * sizeof(*r->ids));
        memcpy(r->offs, res->offs, (size_t)res->rc * sizeof(*r->offs));
    }
    r->calls++;
}

/* The store over a disk in r->dir (fresh: a new folder). */
static void rig_open(struct rig *r, bool fresh)
{
    struct tier_cold_cfg cc = { .dir = r->dir, .bytes = 16u << 20 };
    struct tier_open_cfg oc = { .store = { .warm_bytes = 4u << 20 }, .cold = &cc };

    if (fresh)
        t_tmpdir("kvt-ns", r->dir, sizeof(r->dir));
    cr_assert_eq(tier_open(&oc, &r->t, NULL), 0);
    cr_assert_eq(tier_req_create(r->t, N, on_done, r, &r->req), 0);
}

static void rig_close(struct rig *r)
{
    tier_req_destroy(r->req);
    tier_close(r->t);
}

static void check(const struct rig *r)
{
    char why[256];

    cr_assert_eq(tier_check(r->t, why, sizeof(why)), 0, "%s", why);
}

/* keys[0..N) of seed put in ns as one chain, filled with seed + i. */
static void put_chain(struct rig *r, struct tier_ns *ns, struct tier_key *k, uint64_t seed)
{
    uint64_t bb = tier_ns_block_bytes(ns), offs[N];
    uint32_t ids[N];

    t_keys((kvt_key *)k, N, seed);
    cr_assert_eq(tier_reserve(ns, 1, NULL, k, N, ids, offs), N);
    for (int i = 0; i < N; i++)
        t_fill((uint8_t *)tier_pool_base(r->t) + offs[i], bb, seed + (uint64_t)i);
    cr_assert_eq(tier_commit(ns, 1, k, N), N);
}

/* Get k[0..N) of ns through the request (the store waits for the disk),
 * check each block's bytes against seed + i, release. */
static void get_chain(struct rig *r, struct tier_ns *ns, const struct tier_key *k,
                      uint64_t seed)
{
    struct tier_req_args a = { .op = TIER_REQ_GET, .ns = ns, .keys = k, .n = N };
    uint64_t bb = tier_ns_block_bytes(ns);

    r->calls = 0;
    cr_assert_eq(tier_req_submit(r->req, &a), 0);
    for (int guard = 0; r->calls == 0; guard++) {
        cr_assert_lt(guard, 10000, "the get never ended");
        cr_assert_geq(tier_poll(r->t, true), 0);
    }
    cr_assert_eq(r->res.rc, N, "got %d of %d blocks", r->res.rc, N);
    for (int i = 0; i < N; i++) {
        long bad = t_check((uint8_t *)tier_pool_base(r->t) + r->offs[i], bb, seed + (uint64_t)i);

        cr_assert_eq(bad, -1, "block %d: wrong byte at %ld", i, bad);
    }
    tier_release(r->t, r->ids, N, false);
}

/* A chain of N blocks of seed put in namespace 1 (BLK) and flushed to
 * disk, then the store closed and opened again over that disk, indexed. */
static void restart_with_chain(struct rig *r, struct tier_key *k, uint64_t seed)
{
    rig_open(r, true);
    put_chain(r, t_tns(r->t, 1, BLK), k, seed);
    cr_assert_eq(tier_flush_to_cold(r->t), 0);
    rig_close(r);
    rig_open(r, false);
    cr_assert_eq(tier_load_cold(r->t), N);
}

Test(tier_ns, is_found_by_id_and_the_same_object_for_the_same_size)
{
    struct tier *t;
    struct tier_ns *a, *a2, *b;

    cr_assert_eq(tier_create(&(struct tier_cfg){ .warm_bytes = 4u << 20 }, &t), 0);
    cr_assert_null(tier_ns_find(t, 1), "a new store has no namespace");
    cr_assert_eq(tier_ns_open(t, 1, BLK, &a), 0);
    cr_assert_eq(tier_ns_open(t, 1, BLK, &a2), 0);
    cr_assert_eq(a2, a, "opened again: another object");
    cr_assert_eq(tier_ns_find(t, 1), a);
    cr_assert_eq(tier_ns_id(a), 1);
    cr_assert_eq(tier_ns_block_bytes(a), BLK);
    cr_assert_eq(tier_ns_store(a), t);
    cr_assert_eq(tier_ns_open(t, 7, 3 * BLK, &b), 0);
    cr_assert_neq(b, a);
    cr_assert_eq(tier_ns_find(t, 7), b);
    cr_assert_eq(tier_ns_find(t, 1), a, "a second namespace moved the first");
    cr_assert_null(tier_ns_find(t, 2));
    /* many more: the array under them grows, the objects stay where they are */
    for (uint32_t id = 100; id < 200; id++) {
        struct tier_ns *x;

        cr_assert_eq(tier_ns_open(t, id, 4096, &x), 0);
    }
    cr_assert_eq(tier_ns_find(t, 1), a);
    cr_assert_eq(tier_ns_block_bytes(a), BLK);
    cr_assert_eq(tier_ns_block_bytes(tier_ns_find(t, 150)), 4096);
    tier_destroy(t); /* frees them all: valgrind and ASan see no leak */
}

Test(tier_ns, refuses_another_size_and_one_the_pool_cannot_hold)
{
    struct tier *t;
    struct tier_ns *a, *x = NULL;

    cr_assert_eq(tier_create(&(struct tier_cfg){ .warm_bytes = 4u << 20 }, &t), 0);
    cr_assert_eq(tier_ns_open(t, 1, BLK, &a), 0);
    cr_assert_eq(tier_ns_open(t, 1, 2 * BLK, &x), -EEXIST);
    /* the same slot, another block size: the byte counters would lie */
    cr_assert_eq(tier_ns_open(t, 1, BLK - 1, &x), -EEXIST);
    cr_assert_null(x, "a refused open set its out-parameter");
    cr_assert_eq(tier_ns_block_bytes(tier_ns_find(t, 1)), BLK, "a refused open changed it");
    cr_assert_eq(tier_ns_open(t, 2, 0, &x), -EINVAL);
    cr_assert_eq(tier_ns_open(t, 2, tier_block_max(t) + 1, &x), -EINVAL);
    /* review finding: a size whose slot wraps past 2^64 to 0 was opened */
    cr_assert_eq(tier_ns_open(t, 2, UINT64_MAX, &x), -EINVAL);
    cr_assert_null(tier_ns_find(t, 2), "a refused open left a namespace");
    cr_assert_eq(tier_ns_open(t, 2, tier_block_max(t), &x), 0, "the largest block refused");
    tier_destroy(t);
}

Test(tier_ns, stays_open_and_usable_after_a_purge)
{
    struct rig r;
    struct tier_ns *a, *b;
    struct tier_key ka[N], kb[N];

    rig_open(&r, true);
    a = t_tns(r.t, 1, BLK);
    b = t_tns(r.t, 2, 2 * BLK);
    put_chain(&r, a, ka, 10);
    put_chain(&r, b, kb, 20);
    cr_assert_eq(tier_purge_ns(a), N);
    cr_assert_eq(tier_lookup(a, ka, N, NULL), 0, "purged blocks still found");
    cr_assert_eq(tier_lookup(b, kb, N, NULL), N, "the purge took another namespace's");
    cr_assert_eq(tier_ns_find(r.t, 1), a, "the purge closed the namespace");
    check(&r);
    /* the same handle puts and gets again */
    put_chain(&r, a, ka, 30);
    get_chain(&r, a, ka, 30);
    get_chain(&r, b, kb, 20);
    check(&r);
    rig_close(&r);
    t_rmtree(r.dir);
}

Test(tier_ns, after_a_restart_the_disk_is_reached_once_the_namespace_is_open)
{
    struct rig r;
    struct tier_key k[N];
    uint8_t lvl[N];

    restart_with_chain(&r, k, 40);
    cr_assert_null(tier_ns_find(r.t, 1), "indexing the disk opened a namespace");
    check(&r);
    cr_assert_eq(tier_lookup(t_tns(r.t, 1, BLK), k, N, lvl), N);
    for (int i = 0; i < N; i++)
        cr_assert_eq(lvl[i], TIER_L_COLD, "key %d at level %u", i, lvl[i]);
    get_chain(&r, tier_ns_find(r.t, 1), k, 40);
    check(&r);
    rig_close(&r);
    t_rmtree(r.dir);
}

Test(tier_ns, opened_at_another_size_after_a_restart_the_disk_is_never_served)
{
    struct rig r;
    struct tier_key k[N];
    struct tier_stats st;
    struct tier_ns *wrong;
    uint32_t ids[N], pending = 99;
    uint64_t offs[N];

    restart_with_chain(&r, k, 50);
    wrong = t_tns(r.t, 1, 2 * BLK);
    cr_assert_eq(tier_get(&(struct tier_get_args){ .ns = wrong, .keys = k, .n = N, .ids = ids,
        .offs = offs, .pending = &pending }), -EINVAL, "a block on disk got at another size");
    cr_assert_eq(pending, 0);
    /* nor through a request, tierd's way */
    r.calls = 0;
    cr_assert_eq(tier_req_submit(r.req, &(struct tier_req_args){ .op = TIER_REQ_GET,
        .ns = wrong, .keys = k, .n = N }), 0);
    cr_assert_eq(r.calls, 1, "a refused get waited");
    cr_assert_eq(r.res.rc, -EINVAL, "a request got %d blocks at another size", r.res.rc);
    cr_assert_eq(tier_prefetch(wrong, k, N, 0), 0, "a read started at another size");
    tier_stats_get(r.t, &st);
    cr_assert_eq(st.leases_active, 0, "a refused get left leases");
    check(&r);
    rig_close(&r);

    /* the disk was left as it was: at its own size, the same bytes */
    rig_open(&r, false);
    cr_assert_eq(tier_load_cold(r.t), N);
    get_chain(&r, t_tns(r.t, 1, BLK), k, 50);
    check(&r);
    rig_close(&r);
    t_rmtree(r.dir);
}

static void no_call(void *user, const struct tier_req_res *res)
{
    (void)user, (void)res;
    cr_assert_fail("a refused request was answered");
}

Test(tier_ns, a_request_naming_another_stores_namespace_is_refused)
{
    struct tier *t1, *t2;
    struct tier_req *r;
    struct tier_key k;
    struct tier_req_args a = { .op = TIER_REQ_LOOKUP, .keys = &k, .n = 1 };

    t_keys((kvt_key *)&k, 1, 60);
    cr_assert_eq(tier_create(&(struct tier_cfg){ .warm_bytes = 4u << 20 }, &t1), 0);
    cr_assert_eq(tier_create(&(struct tier_cfg){ .warm_bytes = 4u << 20 }, &t2), 0);
    cr_assert_eq(tier_req_create(t1, 4, no_call, NULL, &r), 0);
    cr_assert_eq(tier_req_submit(r, &a), -EINVAL, "a request with no namespace");
    a.ns = t_tns(t2, 1, BLK);
    cr_assert_eq(tier_req_submit(r, &a), -EINVAL, "another store's namespace");
    cr_assert_not(tier_req_busy(r));
    tier_req_destroy(r);
    tier_destroy(t2);
    tier_destroy(t1);
}
