/* SPDX-License-Identifier: MIT */
/*
 * kvt_offload_e2e.c - an engine's paged cache through tierd: one process
 * offloads 64 blocks of a vLLM-layout cache, another restores them into
 * other block ids of its own cache, page for page identical; descriptors
 * that do not fit the namespace or ids out of range change nothing.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kv_layout.h"
#include "t.h"

enum { LAYERS = 4, BS = 16, H = 2, D = 64, NB = 128, ELEM = 2 };
#define LAYER_BYTES ((size_t)2 * NB * BS * H * D * ELEM)
#define PAGE_ELEMS ((size_t)BS * H * D)
#define TIER_BLOCK ((uint64_t)LAYERS * 2 * BS * H * D * ELEM)

/* vLLM flash-attn per layer: [2, num_blocks, block_size, kv_heads, head_dim] */
static void cache_init(struct t_cache *c, bool fill)
{
    t_cache_init(c, LAYERS, NB, BS, H, D, ELEM, fill ? 100 : 0);
}


static kvt_ns *ns_for(kvt_client *c)
{
    return t_ns(c, TIER_BLOCK);
}

/* n keys of seed, then a private tierd, a client of it (*cl) and the
 * namespace of the test's tier blocks, returned. */
static kvt_ns *start_ns(struct t_tierd *d, kvt_client **cl, kvt_key *keys, size_t n,
                        uint64_t seed)
{
    t_keys(keys, n, seed);
    t_tierd_start(d, NULL);
    *cl = t_connect(d);
    return ns_for(*cl);
}

Test(kvt_offload_e2e, another_process_restores_the_same_pages)
{
    struct t_tierd d;
    kvt_key keys[64];
    int64_t src_ids[64], dst_ids[64];
    pid_t a;

    t_keys(keys, 64, 2024);
    for (int i = 0; i < 64; i++) {
        src_ids[i] = (i * 37) % 64;      /* scattered engine blocks */
        dst_ids[i] = 64 + (i * 11) % 64; /* other blocks on restore */
    }
    t_tierd_start(&d, NULL);
    a = fork();
    if (a == 0) {
        struct t_cache c;
        kvt_client *cl;

        cache_init(&c, true);
        if (kvt_connect(d.sock, &cl))
            _exit(10);
        _exit(kvt_offload(ns_for(cl), NULL, keys, 64, &c.l, src_ids, NULL) == 64 ? 0 : 11);
    }
    cr_assert_eq(t_wait(a), 0, "the offloading process failed");
    {
        struct t_cache src, dst;
        kvt_client *cl = t_connect(&d);
        kvt_ns *ns = ns_for(cl);

        cache_init(&src, true); /* what process A had */
        cache_init(&dst, false);
        cr_assert_eq(kvt_restore(ns, keys, 64, &dst.l, dst_ids, NULL), 64);
        for (int i = 0; i < 64; i++)
            for (int l = 0; l < LAYERS; l++)
                for (int kv = 0; kv < 2; kv++)
                    cr_assert_eq(memcmp(t_cache_page(&dst, l, kv, dst_ids[i]),
                                        t_cache_page(&src, l, kv, src_ids[i]),
                                        PAGE_ELEMS * ELEM), 0,
                                 "block %d layer %d %s: wrong bytes", i, l, kv ? "V" : "K");
        /* nothing else was written: block 0..63 of the new cache stay zero */
        for (int l = 0; l < LAYERS; l++)
            for (size_t b = 0; b < (size_t)64 * PAGE_ELEMS * ELEM; b++)
                if (((const uint8_t *)dst.layer[l])[b])
                    cr_assert_fail("layer %d: byte %zu of an untouched block written", l, b);
        t_cache_free(&src);
        t_cache_free(&dst);
        kvt_close(cl);
    }
    t_tierd_stop(&d);
}

Test(kvt_offload_e2e, descriptors_that_do_not_fit_change_nothing)
{
    struct t_tierd d;
    struct t_cache c;
    kvt_client *cl;
    kvt_ns *ns;
    kvt_key keys[4];
    int64_t ids[4] = { 1, 2, 3, NB }; /* the last is out of range */
    kvt_stats st;

    ns = start_ns(&d, &cl, keys, 4, 77);
    cache_init(&c, true);
    cr_assert_eq(kvt_offload(ns, NULL, keys, 4, &c.l, ids, NULL), -ERANGE);
    cr_assert_eq(kvt_lookup(ns, keys, 4, 0, NULL), 0, "nothing stored");
    ids[3] = -1;
    cr_assert_eq(kvt_restore(ns, keys, 4, &c.l, ids, NULL), -ERANGE);
    ids[3] = 4;
    c.l.head_dim = 32; /* half the namespace's block */
    cr_assert_eq(kvt_offload(ns, NULL, keys, 4, &c.l, ids, NULL), KVT_EBLOCKSIZE);
    c.l.head_dim = D;
    c.l.stride_head = 0; /* heads on top of each other */
    cr_assert_eq(kvt_offload(ns, NULL, keys, 4, &c.l, ids, NULL), -EINVAL);
    c.l.stride_head = D;
#ifndef KVT_HAVE_CUDA
    cr_assert_eq(kvt_offload(ns, NULL, keys, 4, &c.l, ids, (void *)1), -EOPNOTSUPP,
                 "a CUDA stream needs the CUDA build");
#endif
    cr_assert_eq(kvt_stats_get(cl, &st), 0);
    cr_assert_eq(st.reserved, 0);
    cr_assert_eq(st.tier[KVT_TIER_WARM].blocks, 0);
    cr_assert_eq(kvt_offload(ns, NULL, keys, 4, &c.l, ids, NULL), 4, "the fixed call works");
    t_cache_free(&c);
    kvt_close(cl);
    t_tierd_stop(&d);
}

/*
 * Bug (issue 13): a restore into repeated engine block ids scattered two
 * tier blocks into one engine block (on the GPU, in parallel: a mix of
 * both). It is refused before anything is leased or written.
 */
Test(kvt_offload_e2e, restore_into_a_repeated_block_id_is_refused)
{
    struct t_tierd d;
    struct t_cache src, dst;
    kvt_client *cl;
    kvt_ns *ns;
    kvt_key keys[3];
    const int64_t src_ids[3] = { 1, 2, 3 }, dst_ids[3] = { 7, 9, 7 };
    kvt_stats st;

    ns = start_ns(&d, &cl, keys, 3, 78);
    cache_init(&src, true);
    cache_init(&dst, false);
    cr_assert_eq(kvt_offload(ns, NULL, keys, 3, &src.l, src_ids, NULL), 3);
    cr_assert_eq(kvt_restore(ns, keys, 3, &dst.l, dst_ids, NULL), -EINVAL);
    for (int l = 0; l < LAYERS; l++)
        for (size_t b = 0; b < LAYER_BYTES; b++)
            if (((const uint8_t *)dst.layer[l])[b])
                cr_assert_fail("layer %d: byte %zu written by a refused restore", l, b);
    cr_assert_eq(kvt_stats_get(cl, &st), 0);
    cr_assert_eq(st.leases_active, 0, "a refused restore holds no lease");
    t_cache_free(&src);
    t_cache_free(&dst);
    kvt_close(cl);
    t_tierd_stop(&d);
}
