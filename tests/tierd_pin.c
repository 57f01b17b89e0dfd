/* SPDX-License-Identifier: MIT */
/*
 * tierd_pin.c - pinning lookups through tierd, as an engine uses them: its
 * scheduler looks a prompt up and pins the hit, other clients flood the
 * cache meanwhile, and its worker (another client) gets every pinned block,
 * byte for byte, then unpins. Also: a pin expires by itself, pins stay
 * within the client's quota and count, a chain longer than one batch is
 * pinned whole, and a pin is released when its client goes.
 *
 * No per-test .timeout (see tier_nvme_io.c: Criterion 2.4.1 leaks in the
 * runner then); make test's --timeout bounds each test.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t.h"

#define BLK (64u << 10)
#define RUN 16

/* tierd: 8 MiB of warm (pins: a quarter, 32 blocks) and no disk, so that a
 * flood evicts for good */
static const char *const warm_only[] = { "--warm-bytes", "8M", "--no-cold", NULL };

static void put_run(kvt_ns *ns, const kvt_key *keys, size_t n, uint64_t seed)
{
    void *slots[KVT_BATCH_MAX];

    cr_assert_eq(kvt_put_reserve(ns, NULL, keys, n, slots), (int)n);
    for (size_t i = 0; i < n; i++)
        t_fill(slots[i], kvt_ns_block_bytes(ns), seed + i);
    cr_assert_eq(kvt_put_commit(ns, keys, n), (int)n);
}

/* n one-block prompts of nobody: four times the warm tier at 512. */
static void flood(kvt_ns *ns, int n, uint64_t seed)
{
    for (int i = 0; i < n; i++) {
        kvt_key k;

        t_keys(&k, 1, seed + (uint64_t)i);
        put_run(ns, &k, 1, seed + (uint64_t)i);
    }
}

static uint64_t leased(kvt_client *c)
{
    kvt_stats st;

    cr_assert_eq(kvt_stats_get(c, &st), 0);
    return st.leases_active;
}

/* Wait (3 s at most) until want blocks are leased or pinned. */
static void leased_becomes(kvt_client *c, uint64_t want, const char *what)
{
    uint64_t now = leased(c);

    for (int i = 0; i < 300 && now != want; i++) {
        usleep(10000);
        now = leased(c);
    }
    cr_assert_eq(now, want, "%s: %llu blocks leased or pinned, not %llu", what,
                 (unsigned long long)now, (unsigned long long)want);
}

Test(tierd_pin, a_pinned_hit_arrives_whole_after_a_flood)
{
    struct t_tierd d;
    kvt_client *sched, *other, *worker;
    kvt_ns *ns_s, *ns_o, *ns_w;
    kvt_key a[RUN], b[RUN];
    const void *slots[RUN];
    kvt_lease l;
    kvt_pin pin;

    t_tierd_start(&d, warm_only);
    sched = t_connect(&d);
    other = t_connect(&d);
    worker = t_connect(&d);
    ns_s = t_ns(sched, BLK);
    ns_o = t_ns(other, BLK);
    ns_w = t_ns(worker, BLK);
    t_keys(a, RUN, 1);
    t_keys(b, RUN, 2);
    put_run(ns_o, a, RUN, 100);
    put_run(ns_o, b, RUN, 200);
    cr_assert_eq(kvt_lookup_pin(ns_s, a, RUN, 5000, &pin, NULL), RUN);
    cr_assert_eq(pin.n, RUN);
    cr_assert_neq(pin.id, 0);
    cr_assert_eq(pin.hold_ms, 5000);
    cr_assert_eq(kvt_lookup(ns_s, b, RUN, 0, NULL), RUN); /* the same hit, not pinned */
    flood(ns_o, 512, 1000);
    cr_assert_lt(kvt_lookup(ns_s, b, RUN, 0, NULL), RUN, "the flood should evict b");
    /* the worker, another client, loads all of a, right, and unpins it */
    cr_assert_eq(kvt_get_lease(ns_w, a, RUN, slots, &l), RUN, "a pinned block was evicted");
    for (int i = 0; i < RUN; i++)
        cr_assert_eq(t_check(slots[i], BLK, 100 + (uint64_t)i), -1, "block %d is wrong", i);
    cr_assert_eq(kvt_release(ns_w, &l), 0);
    cr_assert_eq(kvt_unpin(worker, &pin), 0);
    cr_assert_eq(pin.id, 0, "the pin is zeroed");
    leased_becomes(sched, 0, "after the unpin");
    flood(ns_o, 512, 5000);
    cr_assert_lt(kvt_lookup(ns_s, a, RUN, 0, NULL), RUN, "unpinned, a goes like any");
    kvt_close(worker);
    kvt_close(other);
    kvt_close(sched);
    t_tierd_stop(&d);
}

Test(tierd_pin, a_pin_expires_and_a_gone_client_s_pins_go)
{
    struct t_tierd d;
    kvt_client *c, *c2;
    kvt_ns *ns, *ns2;
    kvt_key a[RUN];
    kvt_pin pin, late;

    t_tierd_start(&d, warm_only);
    c = t_connect(&d);
    c2 = t_connect(&d);
    ns = t_ns(c, BLK);
    ns2 = t_ns(c2, BLK);
    t_keys(a, RUN, 3);
    put_run(ns, a, RUN, 300);
    cr_assert_eq(kvt_lookup_pin(ns, a, RUN, 200, &pin, NULL), RUN);
    cr_assert_eq(leased(c), RUN);
    leased_becomes(c, 0, "a pin of 200 ms, later");
    late = pin;
    cr_assert_eq(kvt_unpin(c, &late), 0, "unpinning an expired pin is a no-op");
    /* a client's pins go with it */
    cr_assert_eq(kvt_lookup_pin(ns2, a, RUN, 0, &pin, NULL), RUN);
    cr_assert_eq(pin.hold_ms, 10000, "0 asks for the default hold");
    cr_assert_eq(leased(c), RUN);
    kvt_close(c2);
    leased_becomes(c, 0, "the pinning client gone");
    cr_assert_eq(kvt_lookup_pin(ns, a, RUN, KVT_PIN_MAX_MS + 1, &pin, NULL), -EINVAL);
    kvt_close(c);
    t_tierd_stop(&d);
}

/* The pins of all of a tenant's clients hold a quarter of its warm tier at
 * most: four schedulers cannot pin all of warm between them. */
Test(tierd_pin, pins_stay_within_the_tenant_s_budget)
{
    struct t_tierd d;
    kvt_client *c, *c2;
    kvt_ns *ns, *ns2;
    kvt_key a[RUN], b[RUN], x[RUN];
    kvt_pin pa, pb, px;

    t_tierd_start(&d, warm_only);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    t_keys(a, RUN, 4);
    t_keys(b, RUN, 5);
    t_keys(x, RUN, 6);
    put_run(ns, a, RUN, 400);
    put_run(ns, b, RUN, 500);
    put_run(ns, x, RUN, 600);
    c2 = t_connect(&d);
    ns2 = t_ns(c2, BLK);
    /* a budget of 32 blocks: a and b (two clients) take it all, x is a hit
     * but not held, for either */
    cr_assert_eq(kvt_lookup_pin(ns, a, RUN, 0, &pa, NULL), RUN);
    cr_assert_eq(kvt_lookup_pin(ns2, b, RUN, 0, &pb, NULL), RUN);
    cr_assert_eq(kvt_lookup_pin(ns2, x, RUN, 0, &px, NULL), RUN);
    cr_assert_eq(px.n, 0, "over the tenant's budget nothing more is pinned");
    cr_assert_eq(px.id, 0);
    cr_assert_eq(kvt_lookup_pin(ns, x, RUN, 0, &px, NULL), RUN);
    cr_assert_eq(px.n, 0, "the budget is the tenant's, not the client's");
    cr_assert_eq(kvt_unpin(c, &pa), 0);
    cr_assert_eq(kvt_lookup_pin(ns, x, 4, 0, &px, NULL), 4);
    cr_assert_eq(px.n, 4, "room again once a pin is released");
    cr_assert_eq(kvt_unpin(c, &pb), 0);
    cr_assert_eq(kvt_unpin(c, &px), 0);
    leased_becomes(c, 0, "every pin released");
    kvt_close(c2);
    kvt_close(c);
    t_tierd_stop(&d);
}

/* A prompt longer than one batch (KVT_BATCH_MAX keys): one pin, extended
 * batch by batch, holds it all. And a client holds 4096 pins at most,
 * however small. */
Test(tierd_pin, a_long_chain_is_pinned_whole_and_pins_are_counted)
{
    static const char *const big[] = { "--warm-bytes", "64M", "--no-cold", NULL };
    enum { N = KVT_BATCH_MAX + 300, SMALL = 4096 };
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key *k = calloc(N, sizeof(*k));
    static kvt_pin many[4096];
    kvt_pin pin;
    int i, rc = 1;

    cr_assert_not_null(k);
    t_tierd_start(&d, big);
    c = t_connect(&d);
    ns = t_ns(c, SMALL);
    t_keys(k, N, 7);
    put_run(ns, k, KVT_BATCH_MAX, 700);
    cr_assert_eq(kvt_put_reserve(ns, &k[KVT_BATCH_MAX - 1], k + KVT_BATCH_MAX, N - KVT_BATCH_MAX,
                                 (void *[KVT_BATCH_MAX]){ 0 }),
                 N - KVT_BATCH_MAX);
    cr_assert_eq(kvt_put_commit(ns, k + KVT_BATCH_MAX, N - KVT_BATCH_MAX), N - KVT_BATCH_MAX);
    cr_assert_eq(kvt_lookup_pin(ns, k, N, 0, &pin, NULL), N);
    cr_assert_eq(pin.n, N, "every batch extends the one pin");
    cr_assert_eq(leased(c), N);
    cr_assert_eq(kvt_unpin(c, &pin), 0);
    leased_becomes(c, 0, "one unpin for the whole chain");
    for (i = 0; i < 4096 && rc == 1; i++) {
        rc = kvt_lookup_pin(ns, k, 1, 0, &many[i], NULL);
        cr_assert_eq(many[i].n, 1);
    }
    cr_assert_eq(rc, 1, "pin %d: %s", i, kvt_strerror(rc));
    cr_assert_eq(kvt_lookup_pin(ns, k, 1, 0, &pin, NULL), -EBUSY);
    for (i = 0; i < 4096; i++)
        cr_assert_eq(kvt_unpin(c, &many[i]), 0);
    leased_becomes(c, 0, "every pin released");
    kvt_close(c);
    t_tierd_stop(&d);
    free(k);
}
