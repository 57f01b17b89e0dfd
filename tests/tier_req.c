/* SPDX-License-Identifier: MIT */
/*
 * tier_req.c - the store's requests (tier_req_*): a get that waits for the
 * remote tier and then for the disk reaches its caller in exactly one
 * call, with the right bytes, and no per-block or remote callback leaves
 * the store on the way; a lookup likewise; a bound that passes in either
 * wait ends it once; a request cancelled while the remote tier reads
 * leaves nothing behind (no call, no slot reserved, no leak under ASan and
 * valgrind); a durable commit is answered once its writes are on disk, or
 * once at its bound behind another writer. The remote tier is a cluster
 * that is down (a refused port): its reads fail, which is all these waits
 * need.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include "kvt_common.h"
#include "t.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_remote.h"

#define BLK (64u << 10)
#define ON_DISK 4 /* blocks put, then only on disk */
#define N 6       /* keys asked: those, then two that are nowhere */

/* Per-block and remote callbacks: none may reach the caller of a request. */
static void no_ready(void *ctx, void *waiter, uint32_t id, int rc)
{
    (void)ctx;
    (void)id;
    (void)rc;
    cr_assert_fail("a per-block callback left the store (waiter %p)", waiter);
}

static void no_remote(void *ctx, void *waiter, int count)
{
    (void)ctx;
    (void)count;
    cr_assert_fail("a remote callback left the store (waiter %p)", waiter);
}

struct rig {
    char dir[256], seeds[64];
    kvt_key k[N];
    struct tier *t;
    struct tier_cold *cold;
    struct tier_remote *remote;
    struct tier_req *r;
    int calls;                /* done calls */
    struct tier_req_res res;  /* the last one's, scalars only */
    uint32_t ids[N];          /* its leases */
    uint64_t offs[N];
    uint8_t tiers[N];
};

static void on_done(void *user, const struct tier_req_res *res)
{
    struct rig *g = user;
    uint32_t n = res->op == TIER_REQ_GET && res->rc > 0 ? (uint32_t)res->rc : 0;

    g->calls++;
    g->res = *res;
    memcpy(g->ids, res->ids, n * sizeof(*g->ids));
    memcpy(g->offs, res->offs, n * sizeof(*g->offs));
    memcpy(g->tiers, res->tiers, res->op == TIER_REQ_LOOKUP ? res->n : n);
}

static void open_cold(struct rig *g)
{
    struct tier_cold_cfg cc = { .dir = g->dir, .bytes = 16u << 20, .qd = 32, .batch = 8 };

    cr_assert_eq(tier_cold_open(&cc, &g->cold), 0);
}

/* ON_DISK blocks of keys k, put, made durable, and the store closed: the
 * store opened next over that disk has them on disk only. */
static void put_to_disk(struct rig *g)
{
    struct tier_cfg tc = { .warm_bytes = 8u << 20, .ready = no_ready };
    uint32_t ids[ON_DISK];
    uint64_t offs[ON_DISK];
    struct tier *t;

    open_cold(g);
    tc.cold = g->cold;
    cr_assert_eq(tier_create(&tc, &t), 0);
    cr_assert_eq(tier_reserve(t_tns(t, 1, BLK), 7, NULL, (struct tier_key *)g->k, ON_DISK, ids,
                              offs), ON_DISK);
    for (int i = 0; i < ON_DISK; i++)
        t_fill((uint8_t *)tier_pool_base(t) + offs[i], BLK, 100 + (uint64_t)i);
    cr_assert_eq(tier_commit(t_tns(t, 1, BLK), 7, (struct tier_key *)g->k, ON_DISK), ON_DISK);
    cr_assert_eq(tier_flush_to_cold(t), 0);
    tier_cold_close(g->cold);
    tier_destroy(t);
}

/* The store under test: the disk of put_to_disk (with), a remote tier
 * that is down, a request of N keys. */
static void rig_open(struct rig *g, bool with_disk)
{
    struct tier_remote_cfg rc = { .seeds = g->seeds, .timeout_ms = 200, .workers = 1 };
    struct tier_remote_ns_desc d = { .tenant = "t", .model_id = "m", .dtype = "bf16",
                                     .layout = "test", .block_tokens = 16,
                                     .block_bytes = BLK, .tp_rank = 0, .tp_size = 1 };
    struct tier_cfg tc = { .warm_bytes = 8u << 20, .ready = no_ready, .remote_done = no_remote };

    memset(g, 0, sizeof(*g));
    t_keys(g->k, N, 4242);
    t_tmpdir("kvt-req", g->dir, sizeof(g->dir));
    if (with_disk) {
        put_to_disk(g);
        open_cold(g);
        tc.cold = g->cold;
    }
    /* a port nothing is bound to: connecting is refused */
    snprintf(g->seeds, sizeof(g->seeds), "127.0.0.1:%d", cmn_free_port());
    cr_assert_eq(tier_remote_open(&rc, &g->remote), 0);
    cr_assert_eq(tier_remote_ns_add(g->remote, 1, &d), 0);
    tc.remote = g->remote;
    cr_assert_eq(tier_create(&tc, &g->t), 0);
    if (with_disk)
        cr_assert_eq(tier_load_cold(g->t), ON_DISK);
    cr_assert_eq(tier_req_create(g->t, N, on_done, g, &g->r), 0);
}

/* Everything given back, every invariant whole; then closed in order. */
static void rig_close(struct rig *g)
{
    struct tier_stats st;
    char why[256];

    for (int guard = 0; tier_remote_inflight(g->remote) || (g->cold && tier_cold_busy(g->cold));
         guard++) {
        cr_assert_lt(guard, 10000, "the store never settled");
        if (g->cold)
            tier_cold_flush(g->cold); /* a batch's sync, now */
        cr_assert_geq(tier_poll(g->t, true), 0);
    }
    tier_stats_get(g->t, &st);
    cr_assert_eq(st.reserved, 0, "%llu slots left reserved", (unsigned long long)st.reserved);
    cr_assert_eq(st.leases_active, 0, "%llu leases left", (unsigned long long)st.leases_active);
    cr_assert_eq(tier_check(g->t, why, sizeof(why)), 0, "%s", why);
    tier_req_destroy(g->r);
    tier_cold_close(g->cold);
    tier_remote_close(g->remote);
    tier_destroy(g->t);
    t_rmtree(g->dir);
}

/* Poll until the request's one call came (or fail). */
static void wait_done(struct rig *g)
{
    for (int guard = 0; g->calls == 0; guard++) {
        int rc;

        if (g->cold)
            tier_cold_flush(g->cold); /* a batch's sync, now */
        rc = tier_poll(g->t, true);

        cr_assert_lt(guard, 10000, "the request never ended");
        cr_assert_geq(rc, 0, "poll: %s", strerror(-rc));
    }
}

/* rig_open, then a get of the N keys submitted, with these bounds. */
static void start_get(struct rig *g, bool with_disk, uint32_t remote_ms, uint32_t deadline_ms)
{
    struct tier_req_args a = { .op = TIER_REQ_GET, .n = N, .remote_ms = remote_ms,
                               .deadline_ms = deadline_ms };

    rig_open(g, with_disk);
    a.ns = t_tns(g->t, 1, BLK);
    a.keys = (const struct tier_key *)g->k;
    cr_assert_eq(tier_req_submit(g->r, &a), 0);
    cr_assert_eq(tier_req_submit(g->r, &a), -EBUSY, "a second request into a busy one");
}

Test(tier_req, a_get_through_the_remote_and_the_disk_is_answered_once)
{
    struct rig g;

    /* the two keys nowhere here go to the remote tier: it waits */
    start_get(&g, true, 60000, 0);
    cr_assert(tier_req_busy(g.r), "a get that asks the remote tier was answered at once");
    cr_assert_eq(g.calls, 0);
    wait_done(&g);
    /* the remote answered (nothing: it is down), the store went on to the
     * disk by itself, and only then called */
    cr_assert_eq(g.res.rc, ON_DISK, "expected the %d blocks on disk, got %d", ON_DISK,
                 g.res.rc);
    cr_assert_not(g.res.late);
    cr_assert_not(tier_req_busy(g.r));
    for (int i = 0; i < ON_DISK; i++) {
        long bad = t_check((uint8_t *)tier_pool_base(g.t) + g.offs[i], BLK, 100 + (uint64_t)i);

        cr_assert_eq(g.tiers[i], TIER_L_WARM);
        cr_assert_eq(bad, -1, "block %d: wrong byte at %ld", i, bad);
    }
    /* and never again, whatever else lands */
    for (int i = 0; i < 20; i++)
        cr_assert_geq(tier_poll(g.t, false), 0);
    cr_assert_eq(g.calls, 1, "%d calls for one request", g.calls);
    tier_release(g.t, g.ids, (size_t)g.res.rc, false);
    rig_close(&g);
}

Test(tier_req, a_lookup_through_the_remote_is_answered_once)
{
    struct rig g;
    struct tier_req_args a = { .op = TIER_REQ_LOOKUP, .n = N, .remote_ms = 60000 };

    rig_open(&g, true);
    a.ns = t_tns(g.t, 1, BLK);
    a.keys = (const struct tier_key *)g.k;
    cr_assert_eq(tier_req_submit(g.r, &a), 0);
    cr_assert(tier_req_busy(g.r), "a lookup that asks the remote tier was answered at once");
    wait_done(&g);
    cr_assert_eq(g.res.op, TIER_REQ_LOOKUP);
    cr_assert_eq(g.res.rc, ON_DISK, "hits: expected %d, got %d", ON_DISK, g.res.rc);
    cr_assert_eq(g.res.remote, 0, "a down cluster held %u keys", g.res.remote);
    for (int i = 0; i < N; i++)
        cr_assert_eq(g.tiers[i], i < ON_DISK ? TIER_L_COLD : TIER_L_NONE, "key %d: level %u", i,
                     g.tiers[i]);
    cr_assert_eq(g.calls, 1);
    rig_close(&g);
}

Test(tier_req, a_bound_ends_each_wait_once)
{
    struct rig g;

    /* the remote's bound passes before it answers (nothing polled): the get
     * goes on from the disk, whose own bound then passes too */
    start_get(&g, true, 1, 1);
    cr_assert(tier_req_bound(g.r) != 0);
    cmn_sleep_ms(3);
    tier_req_expire(g.r, cmn_now_ms());
    cr_assert_eq(g.calls, 0, "the remote's bound ended the get");
    cr_assert(tier_req_busy(g.r), "the disk's wait did not follow the remote's");
    cmn_sleep_ms(3);
    cr_assert_eq(tier_req_expire(g.r, cmn_now_ms()), 0, "a bound left after the last wait");
    cr_assert_eq(g.calls, 1);
    cr_assert(g.res.late, "a get answered at its bound is late");
    cr_assert_eq(g.res.rc, 0, "blocks still on their way were handed out: %d", g.res.rc);
    /* the reads go on and land in warm, for the next get; nobody is told */
    rig_close(&g);
    cr_assert_eq(g.calls, 1, "%d calls for one request", g.calls);
}

Test(tier_req, a_request_cancelled_while_the_remote_reads_leaves_nothing)
{
    struct rig g;
    struct tier_stats st;

    start_get(&g, false, 60000, 0);
    cr_assert(tier_req_busy(g.r));
    tier_stats_get(g.t, &st);
    cr_assert_eq(st.reserved, N, "the read holds a slot per key (%llu)",
                 (unsigned long long)st.reserved);
    cr_assert_eq(tier_req_cancel(g.r), 0, "nothing was leased");
    cr_assert_not(tier_req_busy(g.r));
    /* its caller goes: the read's answer reaches nobody, its slots go back */
    tier_req_destroy(g.r);
    g.r = NULL;
    rig_close(&g);
    cr_assert_eq(g.calls, 0, "a cancelled request was answered");
}

/* A durable commit of n fresh keys (seed): reserved by owner, filled, then
 * submitted with a bound; *keys gets them. */
static void start_commit(struct rig *g, kvt_key *keys, uint32_t n, uint32_t owner,
                         uint32_t deadline_ms)
{
    struct tier_req_args a = { .op = TIER_REQ_COMMIT, .ns = t_tns(g->t, 1, BLK),
                               .keys = (const struct tier_key *)keys, .n = n,
                               .owner = owner, .deadline_ms = deadline_ms };

    cr_assert_eq(tier_req_submit(g->r, &a), 0);
}

static void reserve(struct rig *g, const kvt_key *keys, uint32_t n, uint32_t owner)
{
    uint32_t ids[N];
    uint64_t offs[N];

    cr_assert_eq(tier_reserve(t_tns(g->t, 1, BLK), owner, NULL, (const struct tier_key *)keys, n,
                              ids, offs), (int)n);
    for (uint32_t i = 0; i < n; i++)
        t_fill((uint8_t *)tier_pool_base(g->t) + offs[i], BLK, 500 + (uint64_t)i);
}

Test(tier_req, a_durable_commit_is_answered_once_its_writes_landed)
{
    struct rig g;
    kvt_key k[3];
    struct tier_story story;

    rig_open(&g, true);
    t_keys(k, 3, 9191);
    reserve(&g, k, 3, 7);
    start_commit(&g, k, 3, 7, 0);
    cr_assert(tier_req_busy(g.r), "a durable commit answered before its writes");
    cr_assert_eq(tier_req_committed(g.r), 3);
    wait_done(&g);
    cr_assert_eq(g.res.op, TIER_REQ_COMMIT);
    cr_assert_eq(g.res.err, 0, "%s", strerror(-g.res.err));
    cr_assert_eq(g.res.rc, 3);
    cr_assert_not(g.res.late);
    /* acknowledged: every block is on disk */
    for (int i = 0; i < 3; i++) {
        tier_story_get(t_tns_of(g.t, 1), (const struct tier_key *)&k[i], &story);
        cr_assert(story.present && story.on_disk, "block %d acknowledged, not on disk", i);
    }
    for (int i = 0; i < 20; i++)
        cr_assert_geq(tier_poll(g.t, false), 0);
    cr_assert_eq(g.calls, 1, "%d calls for one commit", g.calls);
    rig_close(&g);
}

Test(tier_req, a_durable_commit_behind_another_writer_ends_at_its_bound)
{
    struct rig g;
    kvt_key k[2];

    rig_open(&g, true);
    t_keys(k, 2, 9292);
    reserve(&g, k, 1, 7);     /* ours */
    reserve(&g, k + 1, 1, 8); /* another client's, never committed */
    start_commit(&g, k, 2, 7, 1);
    cr_assert(tier_req_busy(g.r));
    cmn_sleep_ms(3);
    cr_assert_eq(tier_req_expire(g.r, cmn_now_ms()), 0);
    cr_assert_eq(g.calls, 1);
    cr_assert(g.res.late);
    cr_assert_eq(g.res.err, -EAGAIN, "a commit past its bound: %s", strerror(-g.res.err));
    cr_assert_eq(g.res.rc, 1, "ours was committed");
    /* the other writer gives up: nothing is told to the commit that left */
    cr_assert_eq(tier_abort(t_tns_of(g.t, 1), 8, (const struct tier_key *)(k + 1), 1), 1);
    rig_close(&g);
    cr_assert_eq(g.calls, 1, "%d calls for one commit", g.calls);
}
