/* SPDX-License-Identifier: MIT */
/*
 * tierd_hot.c - the hot tier through tierd, as engines use it: the pool
 * shared with clients (CUDA IPC on a GPU; here the emulated pool, mapped the
 * same way), blocks written into hot slots by one process and read in place
 * by another, blocks copied up into hot for a getter that asked (from warm
 * and from disk), offload and restore through hot, and the refusals.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "kv_layout.h"
#include "t.h"

#define BLK (64u << 10)
static const char *const hot_args[] = { "--hot-bytes", "16M", NULL };

/* Until lookup reports every key of keys[0..n) in tier `want` (tierd moves
 * blocks between requests): true, or false after about 5 s. */
static bool wait_tier(kvt_ns *ns, const kvt_key *keys, size_t n, uint8_t want)
{
    uint8_t tiers[64];

    for (int spin = 0; spin < 500; spin++) {
        size_t in = 0;

        cr_assert_eq(kvt_lookup(ns, keys, n, 0, tiers), (int)n, "a key went missing");
        for (size_t i = 0; i < n; i++)
            in += tiers[i] == want;
        if (in == n)
            return true;
        usleep(10000);
    }
    return false;
}

/* Lease keys[0..n) reading hot in place; check each block's bytes and where
 * it was; release. */
static void get_check(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags, uint64_t seed,
                      uint8_t want_tier)
{
    const void *slots[64];
    uint8_t tiers[64];
    kvt_lease l;

    cr_assert_eq(kvt_get_lease_flags(ns, keys, n, flags, slots, tiers, &l), (int)n);
    for (size_t i = 0; i < n; i++) {
        long bad = t_check(slots[i], BLK, seed + i);

        cr_assert_eq(bad, -1, "block %zu: wrong byte at %ld", i, bad);
        if (want_tier)
            cr_assert_eq(tiers[i], want_tier, "block %zu in tier %u, not %u", i, tiers[i],
                         want_tier);
    }
    cr_assert_eq(kvt_release(ns, &l), 0);
}

Test(tierd_hot, refused_without_a_hot_tier)
{
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key k[2];
    void *slots[2];
    const void *ro[2];
    kvt_lease l;

    t_keys(k, 2, 1);
    t_tierd_start(&d, NULL);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    cr_assert_eq(kvt_hot_attach(c, NULL), -EOPNOTSUPP);
    cr_assert_eq(kvt_ns_set_hot(ns, KVT_GET_HOT), -EOPNOTSUPP);
    cr_assert_eq(kvt_put_reserve_flags(ns, NULL, k, 2, slots, KVT_RESERVE_HOT), -EOPNOTSUPP);
    cr_assert_eq(kvt_get_lease_flags(ns, k, 2, KVT_GET_HOT, ro, NULL, &l), -EOPNOTSUPP);
    cr_assert_eq(kvt_put_reserve_flags(ns, NULL, k, 2, slots, 0x80), -EINVAL);
    cr_assert_eq(kvt_ns_set_hot(ns, 0x80), -EINVAL);
    /* the connection is fine afterwards */
    cr_assert_eq(kvt_lookup(ns, k, 2, 0, NULL), 0);
    kvt_close(c);
    t_tierd_stop(&d);
}

Test(tierd_hot, written_in_hot_read_in_place_by_another_process)
{
    struct t_tierd d;
    kvt_key k[16];
    kvt_client *c, *plain;
    kvt_ns *ns, *pns;
    kvt_hot_info hi;
    kvt_stats st;
    pid_t w;

    t_keys(k, 16, 7);
    t_tierd_start(&d, hot_args);
    w = fork();
    if (w == 0) {
        void *slots[16];
        kvt_client *wc;
        kvt_ns *wns;

        if (kvt_connect(d.sock, &wc))
            _exit(10);
        wns = t_ns(wc, BLK);
        if (kvt_hot_attach(wc, NULL) ||
            kvt_put_reserve_flags(wns, NULL, k, 16, slots, KVT_RESERVE_HOT) != 16)
            _exit(11);
        for (int i = 0; i < 16; i++)
            t_fill(slots[i], BLK, 100 + (uint64_t)i);
        _exit(kvt_put_commit(wns, k, 16) == 16 ? 0 : 12);
    }
    cr_assert_eq(t_wait(w), 0, "the writer failed");
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    cr_assert(wait_tier(ns, k, 16, KVT_TIER_HOT), "written blocks are not in hot");
    cr_assert_eq(kvt_hot_attach(c, &hi), 0);
    cr_assert_eq(hi.kind, KVT_HOT_EMULATED);
    cr_assert_geq(hi.bytes, 16u << 20);
    {
        const void *slots[16];
        kvt_lease l;

        /* in place: the slots are in the hot pool mapping */
        cr_assert_eq(kvt_get_lease_flags(ns, k, 16, KVT_GET_HOT, slots, NULL, &l), 16);
        for (int i = 0; i < 16; i++)
            cr_assert((const uint8_t *)slots[i] >= (const uint8_t *)hi.base &&
                          (const uint8_t *)slots[i] + BLK <= (const uint8_t *)hi.base + hi.bytes,
                      "block %d is not in the hot pool", i);
        kvt_release(ns, &l);
    }
    get_check(ns, k, 16, KVT_GET_HOT, 100, KVT_TIER_HOT);
    /* a client that does not map hot gets the same bytes through warm */
    plain = t_connect(&d);
    pns = t_ns(plain, BLK);
    {
        static uint8_t buf[16][BLK];
        void *bufs[16];

        for (int i = 0; i < 16; i++)
            bufs[i] = buf[i];
        cr_assert_eq(kvt_get(pns, k, 16, bufs), 16);
        for (int i = 0; i < 16; i++)
            cr_assert_eq(t_check(buf[i], BLK, 100 + (uint64_t)i), -1, "block %d via warm", i);
    }
    cr_assert_eq(kvt_stats_get(c, &st), 0);
    cr_assert_eq(st.version, KVT_STATS_VERSION);
    cr_assert_geq(st.tier[KVT_TIER_HOT].hits, 32);
    kvt_close(plain);
    kvt_close(c);
    t_tierd_stop(&d);
}

/* Start d with hot_args, connect, and kvt_put n (<= 12) blocks under k
 * (payloads t_fill'ed from seed0 + i): the namespace, its client in *c. */
static kvt_ns *start_put(struct t_tierd *d, kvt_client **c, const kvt_key *k, int n,
                         uint64_t seed0)
{
    static uint8_t buf[12][BLK];
    const void *bufs[12];
    kvt_ns *ns;

    for (int i = 0; i < n; i++) {
        t_fill(buf[i], BLK, seed0 + (uint64_t)i);
        bufs[i] = buf[i];
    }
    t_tierd_start(d, hot_args);
    *c = t_connect(d);
    ns = t_ns(*c, BLK);
    cr_assert_eq(kvt_put(ns, NULL, k, (size_t)n, bufs), n);
    return ns;
}

Test(tierd_hot, a_getter_that_asks_gets_blocks_copied_up_from_warm)
{
    struct t_tierd d;
    kvt_key k[12];
    kvt_client *c;
    kvt_ns *ns;
    kvt_stats st;

    t_keys(k, 12, 8);
    ns = start_put(&d, &c, k, 12, 200);
    cr_assert(wait_tier(ns, k, 12, KVT_TIER_WARM));
    cr_assert_eq(kvt_hot_attach(c, NULL), 0);
    /* read from warm (where they are), asking for hot afterwards */
    get_check(ns, k, 12, KVT_GET_HOT | KVT_GET_PROMOTE, 200, KVT_TIER_WARM);
    cr_assert(wait_tier(ns, k, 12, KVT_TIER_HOT), "blocks were not copied up");
    get_check(ns, k, 12, KVT_GET_HOT, 200, KVT_TIER_HOT);
    cr_assert_eq(kvt_stats_get(c, &st), 0);
    cr_assert_eq(st.hot_promotions, 12);
    cr_assert_eq(st.tier[KVT_TIER_HOT].blocks, 12);
    cr_assert_eq(st.tier[KVT_TIER_WARM].blocks, 0, "the warm copies were not given back");
    kvt_close(c);
    t_tierd_stop(&d);
}

Test(tierd_hot, a_prefetch_that_asks_brings_disk_blocks_up_to_hot)
{
    struct t_tierd d;
    kvt_key k[10];
    kvt_client *c;
    kvt_ns *ns;

    t_keys(k, 10, 9);
    ns = start_put(&d, &c, k, 10, 300);
    kvt_close(c);
    /* a clean stop writes warm to disk; after the restart they are cold */
    cr_assert_eq(t_tierd_kill(&d, SIGTERM), 0);
    t_tierd_restart(&d, hot_args);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    cr_assert(wait_tier(ns, k, 10, KVT_TIER_COLD));
    cr_assert_eq(kvt_ns_set_hot(ns, KVT_GET_HOT | KVT_GET_PROMOTE), 0);
    cr_assert_eq(kvt_lookup(ns, k, 10, KVT_LOOKUP_PREFETCH, NULL), 10);
    cr_assert(wait_tier(ns, k, 10, KVT_TIER_HOT), "disk blocks did not reach hot");
    get_check(ns, k, 10, KVT_GET_HOT, 300, KVT_TIER_HOT);
    kvt_close(c);
    t_tierd_stop(&d);
}

/* vLLM flash-attn layout per layer, in host memory */
enum { LAYERS = 2, BS = 16, H = 2, D = 64, NB = 64, ELEM = 2 };
#define PAGE_ELEMS ((size_t)BS * H * D)
#define LAYER_BYTES ((size_t)2 * NB * PAGE_ELEMS * ELEM)
#define TIER_BLOCK ((uint64_t)LAYERS * 2 * PAGE_ELEMS * ELEM)

static void cache_init(struct t_cache *c, uint64_t seed)
{
    t_cache_init(c, LAYERS, NB, BS, H, D, ELEM, seed);
}


Test(tierd_hot, offload_and_restore_go_through_hot)
{
    struct t_tierd d;
    struct t_cache src, dst;
    kvt_key k[32];
    int64_t sid[32], did[32];
    uint8_t tiers[32];
    kvt_client *a, *b;
    kvt_ns *na, *nb;
    kvt_stats st;

    t_keys(k, 32, 10);
    for (int i = 0; i < 32; i++) {
        sid[i] = (i * 7) % 32;
        did[i] = 32 + (i * 5) % 32;
    }
    t_tierd_start(&d, hot_args);
    cache_init(&src, 400);
    cache_init(&dst, 0);
    a = t_connect(&d);
    na = t_ns(a, TIER_BLOCK);
    cr_assert_eq(kvt_ns_set_hot(na, KVT_GET_HOT), 0);
    cr_assert_eq(kvt_offload(na, NULL, k, 32, &src.l, sid, NULL), 32);
    cr_assert_eq(kvt_lookup(na, k, 32, 0, tiers), 32);
    for (int i = 0; i < 32; i++)
        cr_assert_eq(tiers[i], KVT_TIER_HOT, "block %d offloaded to tier %u", i, tiers[i]);
    b = t_connect(&d);
    nb = t_ns(b, TIER_BLOCK);
    cr_assert_eq(kvt_ns_set_hot(nb, KVT_GET_HOT), 0);
    cr_assert_eq(kvt_restore(nb, k, 32, &dst.l, did, NULL), 32);
    for (int i = 0; i < 32; i++)
        for (int layer = 0; layer < LAYERS; layer++)
            for (int kv = 0; kv < 2; kv++)
                cr_assert_eq(memcmp(t_cache_page(&dst, layer, kv, did[i]),
                                    t_cache_page(&src, layer, kv, sid[i]), PAGE_ELEMS * ELEM),
                             0,
                             "block %d layer %d kv %d differs", i, layer, kv);
    cr_assert_eq(kvt_stats_get(b, &st), 0);
    cr_assert_geq(st.tier[KVT_TIER_HOT].hits, 32, "the restore did not read hot");
    cr_assert_eq(st.tier[KVT_TIER_WARM].blocks, 0, "blocks went through warm");
    kvt_close(b);
    kvt_close(a);
    for (int i = 0; i < LAYERS; i++) {
        free(src.layer[i]);
        free(dst.layer[i]);
    }
    t_tierd_stop(&d);
}
