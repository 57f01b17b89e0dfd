/* SPDX-License-Identifier: MIT */
/*
 * kvt_hybrid_rules.c - hybrid models, group by group: what each rule keeps
 * and needs (full: every block; sliding: the window; state: the state after
 * the last block, every k-th), lookups on chains with holes in each group,
 * restores that move only what the prefix needs with each group's own
 * shape, and the bytes stored for the real configs in data/configs against
 * the naive all-layers-full figure.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kv_layout.h"
#include "t.h"

#define BS 16

/* ---- sizing on the real configs ---------------------------------------- */

/*
 * gpt-oss-120b: 18 full + 18 sliding layers (W 128), 8 KV heads x 64, BF16:
 * 2 x 8 x 64 x 2 = 2 KiB per layer and token. A 32K prefix is 2048 blocks
 * of 16: full keeps 2048 blocks x 18 layers, sliding only its window,
 * 128 / 16 = 8 blocks. Naive: 36 layers x 2048 blocks.
 *   stored = (2048 x 18 + 8 x 18) x 16 x 2 KiB; naive = 2048 x 36 x 16 x 2 KiB.
 */
Test(kvt_hybrid_rules, gpt_oss_keeps_the_window_of_its_sliding_layers)
{
    struct kvt_model_desc d = t_model_desc("gpt-oss-120b.json");
    kvt_hybrid_opts o = { .block_tokens = BS };
    uint64_t per_block_layer = (uint64_t)BS * 2048;

    cr_assert_eq(kvt_hybrid_stored_bytes(&d, &o, 1, 32768, 0),
                 (2048 * 18 + 8 * 18) * per_block_layer);
    cr_assert_eq(kvt_hybrid_naive_bytes(&d, BS, 1, 32768), 2048 * 36 * per_block_layer);
    /* keeping every sliding block stores what naive does */
    o.sliding_all = 1;
    cr_assert_eq(kvt_hybrid_stored_bytes(&d, &o, 1, 32768, 0), 2048 * 36 * per_block_layer);
    /* offloaded in batches of 64 blocks: the window at the end of each */
    o.sliding_all = 0;
    cr_assert_eq(kvt_hybrid_stored_bytes(&d, &o, 1, 32768, 64),
                 (2048 * 18 + 32 * 8 * 18) * per_block_layer);
    /* a partial last block is never stored */
    cr_assert_eq(kvt_hybrid_stored_bytes(&d, &o, 1, 32768 + 15, 0),
                 (2048 * 18 + 8 * 18) * per_block_layer);
}

/*
 * gemma-3-27b-it: 10 full + 52 sliding (W 1024), 16 KV heads x 128: 8 KiB
 * per layer and token. 1024 / 16 = 64 window blocks.
 *   stored / naive = (2048 x 10 + 64 x 52) / (2048 x 62) = 23808 / 126976.
 */
Test(kvt_hybrid_rules, gemma3_stores_far_less_than_naive)
{
    struct kvt_model_desc d = t_model_desc("gemma-3-27b-it.json");
    kvt_hybrid_opts o = { .block_tokens = BS };
    uint64_t pbl = (uint64_t)BS * 8192;

    cr_assert_eq(kvt_hybrid_stored_bytes(&d, &o, 1, 32768, 0), (2048 * 10 + 64 * 52) * pbl);
    cr_assert_eq(kvt_hybrid_naive_bytes(&d, BS, 1, 32768), 2048 * 62 * pbl);
}

/*
 * qwen3-next-80b-a3b: 12 full layers (2 KV heads x 256: 2 KiB per layer and
 * token) and 36 gated-delta-net layers with a fixed state. States every
 * 256 blocks of a 2048-block prefix: 8 of them (the last block is one).
 */
Test(kvt_hybrid_rules, qwen3_next_stores_states_every_kth_block)
{
    struct kvt_model_desc d = t_model_desc("qwen3-next-80b-a3b.json");
    const struct kvt_layer_group *st = kvt_model_group(&d, KVT_LAYER_STATE);
    kvt_hybrid_opts o = { .block_tokens = BS, .state_every = 256 };
    uint64_t pbl = (uint64_t)BS * 2048;

    cr_assert_not_null(st);
    cr_assert_eq(st->layers, 36);
    cr_assert_eq(kvt_hybrid_stored_bytes(&d, &o, 1, 32768, 0),
                 2048 * 12 * pbl + 8 * st->state_bytes * 36);
    cr_assert_eq(kvt_hybrid_naive_bytes(&d, BS, 1, 32768), 2048 * 48 * pbl);
    /* every block's state: 2048 of them */
    o.state_every = 1;
    cr_assert_eq(kvt_hybrid_stored_bytes(&d, &o, 1, 32768, 0),
                 2048 * 12 * pbl + 2048 * st->state_bytes * 36);
}

/* deepseek-v3: MLA on every layer: nothing to save, nothing wasted. */
Test(kvt_hybrid_rules, deepseek_mla_is_stored_as_is)
{
    struct kvt_model_desc d = t_model_desc("deepseek-v3.json");
    kvt_hybrid_opts o = { .block_tokens = BS };

    cr_assert_eq(kvt_hybrid_stored_bytes(&d, &o, 1, 32768, 0),
                 kvt_hybrid_naive_bytes(&d, BS, 1, 32768));
    cr_assert_eq(kvt_hybrid_stored_bytes(&d, &o, 1, 32768, 0),
                 2048 * kvt_model_block_bytes(&d, BS, 1));
}

/* ---- through tierd -------------------------------------------------------- */

/*
 * A hand-made model: full (2 layers, 2 heads x 8), sliding (2 layers, 4
 * heads x 16, W 32 tokens = 2 blocks: another shape, as Gemma 4's global and
 * local layers), a state (1 layer, 512 bytes) kept every 4 blocks; FP16.
 */
static struct kvt_model_desc handmade(void)
{
    struct kvt_model_desc d = { .dtype = "fp16", .elem_bytes = 2, .num_layers = 5,
                                .n_groups = 3 };

    d.group[0] = (struct kvt_layer_group){ .kind = KVT_LAYER_FULL, .name = "full_attention",
                                           .layers = 2, .kv_heads = 2, .head_dim = 8,
                                           .n_kv = 2, .elem_bytes = 2 };
    d.group[1] = (struct kvt_layer_group){ .kind = KVT_LAYER_SLIDING,
                                           .name = "sliding_attention", .layers = 2,
                                           .kv_heads = 4, .head_dim = 16, .n_kv = 2,
                                           .elem_bytes = 2, .window = 32 };
    d.group[2] = (struct kvt_layer_group){ .kind = KVT_LAYER_STATE, .name = "mamba2",
                                           .layers = 1, .state_bytes = 512 };
    return d;
}

enum { NB = 64, N = 12 };

/* A paged cache of one group (vLLM flash layout per layer). */
struct cache {
    uint32_t layers, heads, dim;
    void *layer[4];
    struct kvk_layout l;
};

static void cache_init(struct cache *c, uint32_t layers, uint32_t heads, uint32_t dim,
                       uint64_t seed)
{
    size_t page = (size_t)BS * heads * dim, bytes = 2 * NB * page * 2;

    *c = (struct cache){ .layers = layers, .heads = heads, .dim = dim };
    for (uint32_t i = 0; i < layers; i++) {
        c->layer[i] = calloc(1, bytes);
        cr_assert_not_null(c->layer[i]);
        if (seed)
            t_fill(c->layer[i], bytes, seed + i);
    }
    c->l = (struct kvk_layout){
        .n_layers = layers, .layer_base = c->layer, .elem_bytes = 2, .block_tokens = BS,
        .kv_heads = heads, .head_dim = dim, .n_kv = 2, .num_blocks = NB,
        .stride_kv = (int64_t)(NB * page), .stride_block = (int64_t)page,
        .stride_token = heads * dim, .stride_head = dim, .stride_dim = 1,
    };
}

static void cache_free(struct cache *c)
{
    for (uint32_t i = 0; i < c->layers; i++)
        free(c->layer[i]);
}

/* Page (layer, kv, block) of c equals that of o at block ob. */
static bool same_page(const struct cache *c, int64_t b, const struct cache *o, int64_t ob)
{
    size_t page = (size_t)BS * c->heads * c->dim * 2;

    for (uint32_t l = 0; l < c->layers; l++)
        for (int kv = 0; kv < 2; kv++)
            if (memcmp((uint8_t *)c->layer[l] + ((size_t)kv * NB + (size_t)b) * page,
                       (uint8_t *)o->layer[l] + ((size_t)kv * NB + (size_t)ob) * page, page))
                return false;
    return true;
}

struct world {
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    struct cache full, slide;
    uint8_t state[N][512];
    const void *states[N];
    int64_t ids[N];
    kvt_key k[N];
};

static void world_open(struct world *w, uint32_t sliding_all)
{
    struct kvt_model_desc d = handmade();
    kvt_model m = { .model_id = "test/hybrid", .layout = "vllm-flash", .tp_size = 1 };
    kvt_hybrid_opts o = { .block_tokens = BS, .state_every = 4, .sliding_all = sliding_all };

    t_tierd_start(&w->d, NULL);
    w->c = t_connect(&w->d);
    cr_assert_eq(kvt_ns_open_hybrid(w->c, &m, &d, &o, &w->ns), 0);
    cr_assert_eq(kvt_ns_groups(w->ns), 3);
    cache_init(&w->full, 2, 2, 8, 10);
    cache_init(&w->slide, 2, 4, 16, 20);
    t_keys(w->k, N, 31);
    for (int i = 0; i < N; i++) {
        w->ids[i] = (i * 5) % NB;
        t_fill(w->state[i], 512, 40 + (uint64_t)i);
        w->states[i] = w->state[i];
    }
}

static void world_offload(struct world *w, int want)
{
    kvt_group_io io[3] = {
        { .layout = &w->full.l, .block_ids = w->ids },
        { .layout = &w->slide.l, .block_ids = w->ids },
        { .states = w->states, .state_bytes = 512 },
    };

    cr_assert_eq(kvt_offload_hybrid(w->ns, NULL, w->k, N, io, NULL), want);
}

static void world_close(struct world *w)
{
    cache_free(&w->full);
    cache_free(&w->slide);
    kvt_close(w->c);
    t_tierd_stop(&w->d);
}

/* Which of the chain's keys group g holds, as a bitmask. */
static unsigned held(struct world *w, uint32_t g)
{
    uint8_t tiers[N];
    unsigned mask = 0;

    kvt_lookup(kvt_ns_group(w->ns, g), w->k, N, 0, tiers);
    for (int i = 0; i < N; i++)
        if (tiers[i] != KVT_TIER_NONE)
            mask |= 1u << i;
    return mask;
}

Test(kvt_hybrid_rules, each_group_keeps_what_its_rule_says)
{
    struct world w;

    world_open(&w, 0);
    /* 12 full + 2 sliding (the window of block 11) + 3 states (3, 7, 11) */
    world_offload(&w, 12 + 2 + 3);
    cr_assert_eq(held(&w, 0), 0xfffu);
    cr_assert_eq(held(&w, 1), 0xc00u, "sliding holds %#x", held(&w, 1));
    cr_assert_eq(held(&w, 2), 0x888u, "states at %#x", held(&w, 2));
    cr_assert_eq(kvt_lookup(w.ns, w.k, N, 0, NULL), 12);
    /* a shorter prompt of the same chain: the window of block 7 was never
     * kept, so nothing is restorable (the price of keeping windows only) */
    cr_assert_eq(kvt_lookup(w.ns, w.k, 8, 0, NULL), 0);
    /* plain block calls on the hybrid handle are refused */
    cr_assert_eq(kvt_remove(w.ns, w.k, 1), -EINVAL);
    world_close(&w);
}

/* What each group needs for a prefix, at the ends of the range too: a
 * window at the last block of a 2^32-block prefix is its last 2 blocks (the
 * prefix's length once wrapped to 0, and the window was all of it). */
Test(kvt_hybrid_rules, group_needs_names_each_rule_s_range)
{
    struct world w;
    uint32_t f, l;

    world_open(&w, 0);
    kvt_ns_group_needs(w.ns, 0, 11, &f, &l);
    cr_assert(f == 0 && l == 11, "full: [%u, %u]", f, l);
    kvt_ns_group_needs(w.ns, 1, 11, &f, &l);
    cr_assert(f == 10 && l == 11, "sliding: [%u, %u]", f, l);
    kvt_ns_group_needs(w.ns, 1, 0, &f, &l);
    cr_assert(f == 0 && l == 0, "sliding, a one-block prefix: [%u, %u]", f, l);
    kvt_ns_group_needs(w.ns, 2, 11, &f, &l);
    cr_assert(f == 11 && l == 11, "state: [%u, %u]", f, l);
    kvt_ns_group_needs(w.ns, 1, UINT32_MAX, &f, &l);
    cr_assert(f == UINT32_MAX - 1 && l == UINT32_MAX, "sliding at the end: [%u, %u]", f, l);
    kvt_ns_group_needs(w.ns, 3, 11, &f, &l);
    cr_assert(f > l, "no group 3, yet [%u, %u]", f, l);
    kvt_ns_group_needs(kvt_ns_group(w.ns, 0), 0, 11, &f, &l);
    cr_assert(f > l, "a plain namespace has no groups, yet [%u, %u]", f, l);
    world_close(&w);
}

Test(kvt_hybrid_rules, lookups_stop_where_any_group_has_a_hole)
{
    struct world w;

    world_open(&w, 1); /* every sliding block kept */
    world_offload(&w, 12 + 12 + 3);
    cr_assert_eq(kvt_lookup(w.ns, w.k, N, 0, NULL), 12);
    /* sliding loses block 11: prefixes ending at 11 break; states exist
     * after 3 and 7, whose windows (6-7) are there: 8 */
    cr_assert_eq(kvt_remove(kvt_ns_group(w.ns, 1), &w.k[11], 1), 1);
    cr_assert_eq(kvt_lookup(w.ns, w.k, N, 0, NULL), 8);
    /* the states after 11 and 7 go (the newest first: states chain among
     * themselves): back to the one after 3 */
    cr_assert_eq(kvt_remove(kvt_ns_group(w.ns, 2), &w.k[11], 1), 1);
    cr_assert_eq(kvt_lookup(w.ns, w.k, N, 0, NULL), 8);
    cr_assert_eq(kvt_remove(kvt_ns_group(w.ns, 2), &w.k[7], 1), 1);
    cr_assert_eq(kvt_lookup(w.ns, w.k, N, 0, NULL), 4);
    /* full loses 2..11 (from the end: a chain goes leaf-first): nothing */
    for (int i = N - 1; i >= 2; i--)
        cr_assert_eq(kvt_remove(kvt_ns_group(w.ns, 0), &w.k[i], 1), 1, "full %d", i);
    cr_assert_eq(kvt_lookup(w.ns, w.k, N, 0, NULL), 0);
    world_close(&w);
}

Test(kvt_hybrid_rules, restore_moves_only_what_the_prefix_needs_in_each_shape)
{
    struct world w;
    struct cache full2, slide2;
    uint8_t state_out[512];
    int64_t to[N];
    kvt_group_io io[3];

    world_open(&w, 0);
    world_offload(&w, 12 + 2 + 3);
    cache_init(&full2, 2, 2, 8, 0);
    cache_init(&slide2, 2, 4, 16, 0);
    for (int i = 0; i < N; i++)
        to[i] = 32 + i;
    io[0] = (kvt_group_io){ .layout = &full2.l, .block_ids = to };
    io[1] = (kvt_group_io){ .layout = &slide2.l, .block_ids = to };
    io[2] = (kvt_group_io){ .state_out = state_out, .state_bytes = sizeof(state_out) };
    cr_assert_eq(kvt_restore_hybrid(w.ns, w.k, N, io, NULL), 12);
    for (int i = 0; i < N; i++) {
        cr_assert(same_page(&full2, to[i], &w.full, w.ids[i]), "full block %d", i);
        /* sliding: only the window (10, 11) is written; the rest untouched */
        if (i >= 10)
            cr_assert(same_page(&slide2, to[i], &w.slide, w.ids[i]), "sliding block %d", i);
    }
    {
        static const uint8_t zero[BS * 4 * 16 * 2];
        size_t page = sizeof(zero);

        cr_assert_eq(memcmp((uint8_t *)slide2.layer[0] + (size_t)to[9] * page, zero, page), 0,
                     "a sliding block outside the window was written");
    }
    cr_assert_eq(t_check(state_out, 512, 40 + 11), -1, "not the state after block 11");
    /* bad io: a group without its layout */
    io[1].layout = NULL;
    cr_assert_eq(kvt_restore_hybrid(w.ns, w.k, N, io, NULL), -EINVAL);
    cache_free(&full2);
    cache_free(&slide2);
    world_close(&w);
}

/*
 * Bug (issue 13): DeepSeek-V3.2's indexer group was sized 128 x the KV
 * dtype, while vLLM stores each key as 128 FP8 bytes and a 4-byte scale:
 * its cache never matched the group's namespace and every offload was
 * refused (KVT_EBLOCKSIZE). Here both caches are shaped as vLLM allocates
 * them, all layers in one tensor each: MLA latents [61, blocks, 16, 576]
 * BF16, indexer keys [61, blocks, 16, 132] uint8. Two blocks go out and
 * come back into other engine blocks, byte for byte.
 */
Test(kvt_hybrid_rules, deepseek_v3_2_indexer_offloads_as_vllm_stores_it)
{
    enum { NBLK = 4, L = 61 };
    struct kvt_model_desc d = t_model_desc("deepseek-v3.2.json");
    kvt_model m = { .model_id = "test/deepseek-v3.2", .layout = "vllm-mla", .tp_size = 1 };
    kvt_hybrid_opts o = { .block_tokens = BS };
    const size_t page[2] = { (size_t)BS * 576 * 2, (size_t)BS * 132 };
    const uint32_t dim[2] = { 576, 132 }, eb[2] = { 2, 1 };
    const int64_t from[2] = { 0, 1 }, to[2] = { 2, 3 };
    struct t_tierd td;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key k[2];
    uint8_t *mem[2];
    struct kvk_layout lay[2];
    kvt_group_io io[2];

    t_tierd_start(&td, NULL);
    c = t_connect(&td);
    cr_assert_eq(kvt_ns_open_hybrid(c, &m, &d, &o, &ns), 0);
    cr_assert_eq(kvt_ns_groups(ns), 2);
    cr_assert_eq(kvt_ns_group_desc(ns, 1)->kind, KVT_LAYER_INDEX);
    for (int g = 0; g < 2; g++) {
        mem[g] = calloc(L * NBLK, page[g]);
        cr_assert_not_null(mem[g]);
        /* blocks 0 and 1 of every layer hold data; 2 and 3 are the restore's */
        for (int l = 0; l < L; l++)
            t_fill(mem[g] + (size_t)l * NBLK * page[g], 2 * page[g], 500 + 10 * g + l);
        lay[g] = (struct kvk_layout){
            .n_layers = L, .base = mem[g], .layer_stride = (int64_t)(NBLK * page[g]),
            .elem_bytes = eb[g], .block_tokens = BS, .kv_heads = 1, .head_dim = dim[g],
            .n_kv = 1, .num_blocks = NBLK, .stride_block = (int64_t)BS * dim[g],
            .stride_token = dim[g], .stride_dim = 1,
        };
        cr_assert_eq(kvk_block_bytes(&lay[g]), kvt_ns_block_bytes(kvt_ns_group(ns, g)),
                     "group %d: vLLM's cache gives %zu-byte blocks, the namespace %llu", g,
                     kvk_block_bytes(&lay[g]),
                     (unsigned long long)kvt_ns_block_bytes(kvt_ns_group(ns, g)));
        io[g] = (kvt_group_io){ .layout = &lay[g], .block_ids = from };
    }
    t_keys(k, 2, 61);
    cr_assert_eq(kvt_offload_hybrid(ns, NULL, k, 2, io, NULL), 4);
    io[0].block_ids = io[1].block_ids = to;
    cr_assert_eq(kvt_restore_hybrid(ns, k, 2, io, NULL), 2);
    for (int g = 0; g < 2; g++)
        for (int l = 0; l < L; l++) {
            uint8_t *layer = mem[g] + (size_t)l * NBLK * page[g];

            cr_assert_eq(memcmp(layer + 2 * page[g], layer, 2 * page[g]), 0,
                         "group %d layer %d: restored blocks differ", g, l);
        }
    free(mem[0]);
    free(mem[1]);
    kvt_close(c);
    t_tierd_stop(&td);
}

/*
 * Bug (issue 13): two groups of one kind and block size (vLLM splits
 * Gemma 3's sliding layers into several groups of one shape) opened one
 * namespace: the second group's offload was deduplicated against the
 * first's blocks, and its restore scattered the first group's bytes into
 * its layers. Each group keeps its own bytes now.
 */
Test(kvt_hybrid_rules, two_groups_of_one_kind_keep_their_own_bytes)
{
    struct kvt_model_desc d = handmade();
    kvt_model m = { .model_id = "test/two-sliding", .layout = "vllm-flash", .tp_size = 1 };
    kvt_hybrid_opts o = { .block_tokens = BS, .sliding_all = 1 };
    struct cache full, sa, sb, full2, sa2, sb2;
    struct t_tierd td;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key k[N];
    int64_t ids[N], to[N];
    kvt_group_io io[3];

    d.group[2] = d.group[1]; /* a second sliding group of the same shape */
    t_tierd_start(&td, NULL);
    c = t_connect(&td);
    cr_assert_eq(kvt_ns_open_hybrid(c, &m, &d, &o, &ns), 0);
    cr_assert_eq(kvt_ns_groups(ns), 3);
    cache_init(&full, 2, 2, 8, 10);
    cache_init(&sa, 2, 4, 16, 20);
    cache_init(&sb, 2, 4, 16, 30);
    cache_init(&full2, 2, 2, 8, 0);
    cache_init(&sa2, 2, 4, 16, 0);
    cache_init(&sb2, 2, 4, 16, 0);
    t_keys(k, N, 32);
    for (int i = 0; i < N; i++) {
        ids[i] = (i * 5) % NB;
        to[i] = 32 + i;
    }
    io[0] = (kvt_group_io){ .layout = &full.l, .block_ids = ids };
    io[1] = (kvt_group_io){ .layout = &sa.l, .block_ids = ids };
    io[2] = (kvt_group_io){ .layout = &sb.l, .block_ids = ids };
    cr_expect_eq(kvt_offload_hybrid(ns, NULL, k, N, io, NULL), 3 * N,
                 "every group stores its own blocks");
    io[0] = (kvt_group_io){ .layout = &full2.l, .block_ids = to };
    io[1] = (kvt_group_io){ .layout = &sa2.l, .block_ids = to };
    io[2] = (kvt_group_io){ .layout = &sb2.l, .block_ids = to };
    cr_assert_eq(kvt_restore_hybrid(ns, k, N, io, NULL), N);
    /* the window of the last block: 2 blocks of each sliding group */
    for (int i = N - 2; i < N; i++) {
        cr_assert(same_page(&sa2, to[i], &sa, ids[i]), "first sliding group, block %d", i);
        cr_assert(same_page(&sb2, to[i], &sb, ids[i]),
                  "second sliding group, block %d: not its own bytes", i);
    }
    cache_free(&full);
    cache_free(&sa);
    cache_free(&sb);
    cache_free(&full2);
    cache_free(&sa2);
    cache_free(&sb2);
    kvt_close(c);
    t_tierd_stop(&td);
}

/*
 * Bug (issue 13): a state group's object size is an estimate from the
 * config, and kvt_offload_hybrid / kvt_restore_hybrid copied exactly that
 * many bytes from and into the engine's state buffers whatever their real
 * size (the engine's SSM dtype and padding decide it): a larger buffer kept
 * a stale tail, a smaller one was over-read and written past. The engine
 * states its buffers' size; another than the group's is KVT_EBLOCKSIZE,
 * checked before any group moves a byte.
 */
Test(kvt_hybrid_rules, state_buffers_of_another_size_are_refused)
{
    struct world w;
    struct cache full2, slide2;
    static uint8_t big[N][1024];
    const void *bigs[N];
    uint8_t out[1024];
    int64_t to[N];
    kvt_group_io io[3];

    world_open(&w, 0);
    for (int i = 0; i < N; i++) {
        memcpy(big[i], w.state[i], 512);
        memset(big[i] + 512, 0x77, 512); /* the engine's state is 1 KiB */
        bigs[i] = big[i];
    }
    io[0] = (kvt_group_io){ .layout = &w.full.l, .block_ids = w.ids };
    io[1] = (kvt_group_io){ .layout = &w.slide.l, .block_ids = w.ids };
    io[2] = (kvt_group_io){ .states = bigs, .state_bytes = 1024 };
    cr_assert_eq(kvt_offload_hybrid(w.ns, NULL, w.k, N, io, NULL), KVT_EBLOCKSIZE);
    for (uint32_t g = 0; g < 3; g++)
        cr_assert_eq(held(&w, g), 0, "group %u stored something of a refused offload", g);
    io[2] = (kvt_group_io){ .states = w.states }; /* no size stated */
    cr_assert_eq(kvt_offload_hybrid(w.ns, NULL, w.k, N, io, NULL), KVT_EBLOCKSIZE);
    io[2].state_bytes = 512;
    cr_assert_eq(kvt_offload_hybrid(w.ns, NULL, w.k, N, io, NULL), 12 + 2 + 3);

    /* restore into a buffer of 256 bytes: refused, nothing written anywhere */
    cache_init(&full2, 2, 2, 8, 0);
    cache_init(&slide2, 2, 4, 16, 0);
    for (int i = 0; i < N; i++)
        to[i] = 32 + i;
    memset(out, 0xee, sizeof(out));
    io[0] = (kvt_group_io){ .layout = &full2.l, .block_ids = to };
    io[1] = (kvt_group_io){ .layout = &slide2.l, .block_ids = to };
    io[2] = (kvt_group_io){ .state_out = out, .state_bytes = 256 };
    cr_assert_eq(kvt_restore_hybrid(w.ns, w.k, N, io, NULL), KVT_EBLOCKSIZE);
    for (size_t i = 0; i < sizeof(out); i++)
        cr_assert_eq(out[i], 0xee, "byte %zu of the state buffer written", i);
    for (int i = 0; i < N; i++)
        cr_assert(!same_page(&full2, to[i], &w.full, w.ids[i]), "block %d restored", i);
    io[2].state_bytes = 512;
    cr_assert_eq(kvt_restore_hybrid(w.ns, w.k, N, io, NULL), 12);
    cr_assert_eq(t_check(out, 512, 40 + 11), -1, "not the state after block 11");
    cache_free(&full2);
    cache_free(&slide2);
    world_close(&w);
}
