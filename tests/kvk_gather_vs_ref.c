/* SPDX-License-Identifier: MIT */
/*
 * kvk_gather_vs_ref.c - the CPU gather/scatter reference against an
 * independent index computation: every engine layout of kv_layout.h (and a
 * transposed one that forces element copies), elem sizes 1/2/4, odd head
 * dims, n = 1, 7 and 1024, unaligned bases, layouts mixed between gather
 * and scatter, and bad descriptors or ids that must write nothing.
 * The GPU twin is compared with this reference by tests/gpu/.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvk.h"
#include "t_kvk.h"

#define SEED 0x6b766b31ull /* fixed; each case derives its own and prints it */
#define MAX_LAYERS 4

/* One cache shape. misalign shifts every base (and the tier buffer) by
 * that many bytes; one_base puts all layers in one allocation. */
struct shape {
    enum t_kvk_kind kind;
    uint32_t layers, eb, bt, heads, hd;
    int64_t nb;
    bool one_base;
    size_t misalign;
};

/* A cache in test memory: the layout plus what backs it. */
struct cache {
    struct kvk_layout l;
    void *bases[MAX_LAYERS];  /* layer pointers handed to the layout */
    char *mem[MAX_LAYERS];    /* allocations: one, or one per layer */
    size_t mem_bytes;         /* bytes of each allocation */
    int n_mem;
};

/* The value of element (layer, kv, block, token, head, dim). */
static uint32_t pat(uint32_t layer, uint32_t kv, int64_t b, uint32_t t, uint32_t h, uint32_t d)
{
    uint64_t x = ((((((uint64_t)layer * 2 + kv) * 1000003 + (uint64_t)b) * 1009 + t) * 1013 +
                   h) * 4099) + d;

    return (uint32_t)t_kvk_mix(x);
}

static void put_elem(char *p, uint32_t v, uint32_t eb)
{
    for (uint32_t k = 0; k < eb; k++)
        p[k] = (char)(v >> (8 * k));
}

static uint32_t get_elem(const char *p, uint32_t eb)
{
    uint32_t v = 0;

    for (uint32_t k = 0; k < eb; k++)
        v |= (uint32_t)(uint8_t)p[k] << (8 * k);
    return v;
}

static uint32_t trunc_elem(uint32_t v, uint32_t eb)
{
    return eb == 4 ? v : v & ((1u << (8 * eb)) - 1);
}

static void layout_init(struct kvk_layout *l, const struct shape *s)
{
    *l = t_kvk_layout(s->kind, s->layers, s->eb, s->bt, s->heads, s->hd, s->nb);
}

/* Element offset in a layer, from the strides; the tests' own formula. */
static int64_t eng_off(const struct kvk_layout *l, uint32_t kv, int64_t b, uint32_t t,
                       uint32_t h, uint32_t d)
{
    return kv * l->stride_kv + b * l->stride_block + t * l->stride_token +
           h * l->stride_head + d * l->stride_dim;
}

/* Byte offset of an element in a tier block, as kv_layout.h documents. */
static size_t tier_off(const struct kvk_layout *l, uint32_t layer, uint32_t kv, uint32_t t,
                       uint32_t h, uint32_t d)
{
    return ((((((size_t)layer * l->n_kv + kv) * l->block_tokens + t) * l->kv_heads + h) *
              l->head_dim) + d) * l->elem_bytes;
}

static char *layer_of(const struct cache *c, uint32_t layer)
{
    return c->bases[layer];
}

/* Allocate a cache (zeroed, or filled with the pattern). Every layout here
 * is dense, so one layer spans n_kv * NB * BS * H * D elements. */
static void cache_init(struct cache *c, const struct shape *s, bool fill)
{
    struct kvk_layout *l = &c->l;
    size_t layer_bytes, pad = 64; /* one_base: a gap between layers */

    memset(c, 0, sizeof(*c));
    layout_init(l, s);
    layer_bytes = t_kvk_layer_bytes(l);
    if (s->one_base) {
        c->n_mem = 1;
        c->mem_bytes = s->layers * (layer_bytes + pad) + s->misalign;
        l->layer_stride = (int64_t)(layer_bytes + pad);
    } else {
        c->n_mem = (int)s->layers;
        c->mem_bytes = layer_bytes + s->misalign;
    }
    for (int i = 0; i < c->n_mem; i++) {
        c->mem[i] = calloc(1, c->mem_bytes);
        cr_assert_not_null(c->mem[i]);
    }
    for (uint32_t i = 0; i < s->layers; i++)
        c->bases[i] = s->one_base ? c->mem[0] + s->misalign + i * (layer_bytes + pad)
                                  : c->mem[i] + s->misalign;
    if (s->one_base)
        l->base = c->bases[0];
    else
        l->layer_base = c->bases;
    if (!fill)
        return;
    for (uint32_t y = 0; y < l->n_layers; y++)
        for (uint32_t kv = 0; kv < l->n_kv; kv++)
            for (int64_t b = 0; b < l->num_blocks; b++)
                for (uint32_t t = 0; t < l->block_tokens; t++)
                    for (uint32_t h = 0; h < l->kv_heads; h++)
                        for (uint32_t d = 0; d < l->head_dim; d++)
                            put_elem(layer_of(c, y) + eng_off(l, kv, b, t, h, d) * l->elem_bytes,
                                     pat(y, kv, b, t, h, d), l->elem_bytes);
}

static void cache_fini(struct cache *c)
{
    for (int i = 0; i < c->n_mem; i++)
        free(c->mem[i]);
}

static void pick_ids(int64_t *ids, size_t n, int64_t nb, uint64_t *rng)
{
    cr_assert_eq(t_kvk_pick_ids(ids, n, nb, rng), 0, "no memory for %lld ids", (long long)nb);
}

static void describe(char *buf, size_t cap, const struct shape *s, enum t_kvk_kind to, size_t n,
                     uint64_t seed)
{
    snprintf(buf, cap, "%s->%s L%u eb%u bt%u H%u D%u nb%lld n%zu%s mis%zu seed %#llx",
             t_kvk_kind_name[s->kind], t_kvk_kind_name[to], s->layers, s->eb, s->bt, s->heads,
             s->hd, (long long)s->nb, n, s->one_base ? " one-base" : "", s->misalign,
             (unsigned long long)seed);
}

/* Check gathered tier blocks element by element against the pattern. */
static void check_tier(const struct kvk_layout *l, char *const *blk, const int64_t *ids,
                       size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++)
        for (uint32_t y = 0; y < l->n_layers; y++)
            for (uint32_t kv = 0; kv < l->n_kv; kv++)
                for (uint32_t t = 0; t < l->block_tokens; t++)
                    for (uint32_t h = 0; h < l->kv_heads; h++)
                        for (uint32_t d = 0; d < l->head_dim; d++) {
                            uint32_t want = trunc_elem(pat(y, kv, ids[i], t, h, d),
                                                       l->elem_bytes);
                            uint32_t got = get_elem(blk[i] + tier_off(l, y, kv, t, h, d),
                                                    l->elem_bytes);

                            if (got != want)
                                cr_assert_fail("%s: tier block %zu (id %lld) layer %u kv %u "
                                               "token %u head %u dim %u: expected %#x, "
                                               "got %#x", what, i, (long long)ids[i], y, kv,
                                               t, h, d, want, got);
                        }
}

/*
 * One case: gather n random distinct blocks of a patterned cache of shape
 * s, check the tier blocks, scatter them at other random ids into a zeroed
 * cache of kind `to` (same shape), and compare that cache byte for byte
 * with the expected one (the source pages moved by the tests' own index
 * walk, everything else still zero, gaps and misalignment bytes included).
 */
static void run_case(const struct shape *s, enum t_kvk_kind to, size_t n, uint64_t seed)
{
    struct shape sd = *s;
    struct cache a, b, want;
    uint64_t rng = seed;
    int64_t *src_ids = malloc(n * sizeof(*src_ids)), *dst_ids = malloc(n * sizeof(*dst_ids));
    char **blk = malloc(n * sizeof(*blk)), *tier;
    char what[160];
    size_t bb;
    int rc;

    cr_assert(src_ids && dst_ids && blk);
    sd.kind = to;
    sd.one_base = !s->one_base; /* the other way of giving the layers */
    describe(what, sizeof(what), s, to, n, seed);
    cache_init(&a, s, true);
    cache_init(&b, &sd, false);
    cache_init(&want, &sd, false);
    pick_ids(src_ids, n, s->nb, &rng);
    pick_ids(dst_ids, n, s->nb, &rng);

    bb = kvk_block_bytes(&a.l);
    cr_assert_eq(bb, kvk_block_bytes(&b.l), "%s: block bytes differ", what);
    tier = malloc(n * bb + s->misalign);
    cr_assert_not_null(tier);
    memset(tier, 0xee, n * bb + s->misalign);
    for (size_t i = 0; i < n; i++)
        blk[i] = tier + s->misalign + i * bb;

    rc = kvk_gather_ref(&a.l, src_ids, n, (void *const *)blk);
    cr_assert_eq(rc, 0, "%s: gather returned %d", what, rc);
    check_tier(&a.l, blk, src_ids, n, what);

    rc = kvk_scatter_ref(&b.l, (const void *const *)blk, dst_ids, n);
    cr_assert_eq(rc, 0, "%s: scatter returned %d", what, rc);
    for (size_t i = 0; i < n; i++)
        for (uint32_t y = 0; y < a.l.n_layers; y++)
            for (uint32_t kv = 0; kv < a.l.n_kv; kv++)
                for (uint32_t t = 0; t < a.l.block_tokens; t++)
                    for (uint32_t h = 0; h < a.l.kv_heads; h++)
                        for (uint32_t d = 0; d < a.l.head_dim; d++)
                            memcpy(layer_of(&want, y) +
                                       eng_off(&want.l, kv, dst_ids[i], t, h, d) * s->eb,
                                   layer_of(&a, y) +
                                       eng_off(&a.l, kv, src_ids[i], t, h, d) * s->eb,
                                   s->eb);
    for (int m = 0; m < b.n_mem; m++)
        for (size_t k = 0; k < b.mem_bytes; k++)
            if (b.mem[m][k] != want.mem[m][k])
                cr_assert_fail("%s: scattered cache allocation %d byte %zu: expected %#x, "
                               "got %#x", what, m, k, (uint8_t)want.mem[m][k],
                               (uint8_t)b.mem[m][k]);
    /* bytes before the first tier block stay as they were */
    for (size_t k = 0; k < s->misalign; k++)
        cr_assert_eq((uint8_t)tier[k], 0xee, "%s: byte %zu before the tier blocks", what, k);

    free(tier);
    cache_fini(&a);
    cache_fini(&b);
    cache_fini(&want);
    free(blk);
    free(src_ids);
    free(dst_ids);
}

/* Every elem size and head dim of one kind, n = 1 and 7. */
static void run_kind(enum t_kvk_kind k)
{
    static const uint32_t dims[] = { 64, 80, 128 }, mla_dims[] = { 576, 64 };
    static const uint32_t ebs[] = { 1, 2, 4 };
    const uint32_t *hd = k == T_MLA ? mla_dims : dims;
    size_t nhd = k == T_MLA ? 2 : 3, c = 0;

    for (size_t e = 0; e < 3; e++)
        for (size_t i = 0; i < nhd; i++, c++) {
            struct shape s = { .kind = k, .layers = 3, .eb = ebs[e], .bt = 8, .heads = 2,
                               .hd = hd[i], .nb = 12, .one_base = c & 1 };

            run_case(&s, k, 1, t_kvk_mix(SEED + 100 * k + 2 * c));
            run_case(&s, k, 7, t_kvk_mix(SEED + 100 * k + 2 * c + 1));
        }
}

Test(kvk_gather_vs_ref, vllm_flash_layout)
{
    run_kind(T_VLLM);
}

Test(kvk_gather_vs_ref, flashinfer_layout)
{
    run_kind(T_FLASHINFER);
}

Test(kvk_gather_vs_ref, hnd_layout)
{
    run_kind(T_HND);
}

Test(kvk_gather_vs_ref, mla_layout)
{
    run_kind(T_MLA);
}

/* dim not innermost: the plan copies one element at a time */
Test(kvk_gather_vs_ref, transposed_layout_element_copies)
{
    run_kind(T_TRANSPOSED);
}

Test(kvk_gather_vs_ref, n1024_blocks)
{
    struct shape s = { .kind = T_VLLM, .layers = 2, .eb = 2, .bt = 4, .heads = 2, .hd = 64,
                       .nb = 1100 };

    run_case(&s, T_VLLM, 1024, t_kvk_mix(SEED + 1024));
    s.kind = T_HND, s.eb = 1, s.one_base = true;
    run_case(&s, T_HND, 1024, t_kvk_mix(SEED + 1025));
}

/* every base and the tier blocks offset by elem_bytes from malloc's alignment */
Test(kvk_gather_vs_ref, unaligned_bases)
{
    static const uint32_t ebs[] = { 1, 2, 4 };

    for (int k = T_VLLM; k <= T_TRANSPOSED; k++)
        for (size_t e = 0; e < 3; e++) {
            struct shape s = { .kind = k, .layers = 2, .eb = ebs[e], .bt = 4, .heads = 3,
                               .hd = k == T_MLA ? 576 : 80, .nb = 9, .one_base = e & 1,
                               .misalign = ebs[e] };

            run_case(&s, k, 7, t_kvk_mix(SEED + 300 + 10 * k + e));
        }
}

/* the tier format does not depend on the engine layout */
Test(kvk_gather_vs_ref, gather_one_layout_scatter_another)
{
    static const enum t_kvk_kind pairs[][2] = {
        { T_FLASHINFER, T_VLLM }, { T_HND, T_FLASHINFER }, { T_VLLM, T_HND },
        { T_TRANSPOSED, T_VLLM },
    };

    for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
        struct shape s = { .kind = pairs[i][0], .layers = 2, .eb = 2, .bt = 8, .heads = 2,
                           .hd = 128, .nb = 10 };

        run_case(&s, pairs[i][1], 7, t_kvk_mix(SEED + 400 + i));
    }
}

/* t_kvk_layout's strides are the ones kv_layout.h writes out for each kind
 * (NB 5, BS 4, H 3, D 7): kv, block, token, head, dim. */
Test(kvk_gather_vs_ref, layouts_have_the_strides_of_kv_layout_h)
{
    static const int64_t want[][5] = {
        { 5 * 4 * 3 * 7, 4 * 3 * 7, 3 * 7, 7, 1 },     /* vllm [2, NB, BS, H, D] */
        { 4 * 3 * 7, 2 * 4 * 3 * 7, 3 * 7, 7, 1 },     /* flashinfer [NB, 2, BS, H, D] */
        { 3 * 4 * 7, 2 * 3 * 4 * 7, 7, 4 * 7, 1 },     /* hnd [NB, 2, H, BS, D] */
        { 0, 4 * 7, 7, 0, 1 },                         /* mla [NB, BS, D] */
        { 7 * 4 * 3, 2 * 7 * 4 * 3, 3, 1, 4 * 3 },     /* transposed [NB, 2, D, BS, H] */
    };

    for (int k = T_VLLM; k <= T_TRANSPOSED; k++) {
        struct kvk_layout l = t_kvk_layout(k, 1, 2, 4, 3, 7, 5);
        const int64_t got[5] = { l.stride_kv, l.stride_block, l.stride_token, l.stride_head,
                                 l.stride_dim };

        for (int a = 0; a < 5; a++)
            cr_assert_eq(got[a], want[k][a], "%s stride %d: expected %lld, got %lld",
                         t_kvk_kind_name[k], a, (long long)want[k][a], (long long)got[a]);
    }
}

Test(kvk_gather_vs_ref, block_bytes)
{
    /* Llama-3-8B in vLLM: 32 layers, 16 tokens, 8 KV heads of 128, BF16 */
    struct shape s = { .kind = T_VLLM, .layers = 32, .eb = 2, .bt = 16, .heads = 8, .hd = 128,
                       .nb = 1000 };
    struct kvk_layout l;
    char dummy;

    layout_init(&l, &s);
    l.base = &dummy, l.layer_stride = 2 * 1000 * 16 * 8 * 128 * 2;
    cr_assert_eq(kvk_layout_check(&l), 0);
    cr_assert_eq(kvk_block_bytes(&l), 2u << 20, "expected 2 MiB, got %zu",
                 kvk_block_bytes(&l));
    /* DeepSeek-V3 MLA: 61 layers, 64 tokens, 576 latent, FP8 */
    s = (struct shape){ .kind = T_MLA, .layers = 61, .eb = 1, .bt = 64, .hd = 576, .nb = 10 };
    layout_init(&l, &s);
    l.base = &dummy, l.layer_stride = 10 * 64 * 576;
    cr_assert_eq(kvk_layout_check(&l), 0);
    cr_assert_eq(kvk_block_bytes(&l), 61u * 64 * 576);
}

Test(kvk_gather_vs_ref, zero_blocks_is_a_no_op)
{
    struct shape s = { .kind = T_VLLM, .layers = 1, .eb = 2, .bt = 4, .heads = 1, .hd = 64,
                       .nb = 2, .one_base = true };
    struct cache c;

    cache_init(&c, &s, false);
    cr_assert_eq(kvk_gather_ref(&c.l, NULL, 0, NULL), 0);
    cr_assert_eq(kvk_scatter_ref(&c.l, NULL, NULL, 0), 0);
    cache_fini(&c);
}

/*
 * Bad calls. `a` is a patterned cache with a good layout and `blk` tier
 * blocks filled with 0xa5; each bad call must return its error and leave
 * both unchanged (gather writes the tier blocks, scatter the cache).
 */
struct bad_rig {
    struct cache a;
    char *snap;        /* copy of a's allocation */
    char *tier;        /* 2 tier blocks, 0xa5 */
    char *blk[2];
    size_t bb;
};

static void rig_init(struct bad_rig *r)
{
    struct shape s = { .kind = T_VLLM, .layers = 2, .eb = 2, .bt = 4, .heads = 2, .hd = 64,
                       .nb = 8, .one_base = true };

    cache_init(&r->a, &s, true);
    r->snap = malloc(r->a.mem_bytes);
    r->bb = kvk_block_bytes(&r->a.l);
    r->tier = malloc(2 * r->bb);
    cr_assert(r->snap && r->tier);
    memcpy(r->snap, r->a.mem[0], r->a.mem_bytes);
    memset(r->tier, 0xa5, 2 * r->bb);
    r->blk[0] = r->tier, r->blk[1] = r->tier + r->bb;
}

static void rig_fini(struct bad_rig *r)
{
    cache_fini(&r->a);
    free(r->snap);
    free(r->tier);
}

/* Both directions with layout l and ids must fail with err, writing nothing. */
static void expect_refused(struct bad_rig *r, const struct kvk_layout *l, const int64_t *ids,
                           int err, const char *what)
{
    int rc = kvk_gather_ref(l, ids, 2, (void *const *)r->blk);

    cr_assert_eq(rc, err, "%s: gather: expected %d, got %d", what, err, rc);
    for (size_t k = 0; k < 2 * r->bb; k++)
        cr_assert_eq((uint8_t)r->tier[k], 0xa5, "%s: gather wrote tier byte %zu", what, k);
    /* scatter from tier blocks that hold other bytes, so a write would show */
    memset(r->tier, 0x5a, 2 * r->bb);
    rc = kvk_scatter_ref(l, (const void *const *)r->blk, ids, 2);
    cr_assert_eq(rc, err, "%s: scatter: expected %d, got %d", what, err, rc);
    cr_assert_eq(memcmp(r->a.mem[0], r->snap, r->a.mem_bytes), 0,
                 "%s: scatter wrote the cache", what);
    memset(r->tier, 0xa5, 2 * r->bb);
}

/* The bad edits of a good layout, by number; returns its name, or NULL
 * past the last. */
static const char *bad_edit(struct kvk_layout *l, int i)
{
    switch (i) {
    case 0: l->stride_dim = 0; return "stride_dim 0";
    case 1: l->stride_head = 0; return "stride_head 0";
    case 2: l->stride_token = 0; return "stride_token 0";
    case 3: l->stride_block = 0; return "stride_block 0";
    case 4: l->stride_kv = 0; return "stride_kv 0";
    case 5: l->stride_token = -l->stride_token; return "negative stride";
    case 6: l->stride_head = l->head_dim / 2; return "heads overlap";
    case 7: l->stride_block -= 1; return "blocks overlap by one element";
    case 8: l->stride_kv = l->stride_block; return "kv stride equals block stride";
    case 9: l->stride_token = l->stride_head; return "token stride equals head stride";
    case 10: l->elem_bytes = 3; return "elem_bytes 3";
    case 11: l->elem_bytes = 0; return "elem_bytes 0";
    case 12: l->elem_bytes = 8; return "elem_bytes 8";
    case 13: l->n_kv = 0; return "n_kv 0";
    case 14: l->n_kv = 3; return "n_kv 3";
    case 15: l->head_dim = 0; return "head_dim 0";
    case 16: l->kv_heads = 0; return "kv_heads 0";
    case 17: l->block_tokens = 0; return "block_tokens 0";
    case 18: l->num_blocks = 0; return "num_blocks 0";
    case 19: l->n_layers = 0; return "n_layers 0";
    case 20: /* the rig is vLLM: a layer spans 2 * stride_kv elements */
        l->layer_stride = (2 * l->stride_kv - 1) * l->elem_bytes;
        return "layers overlap by one element";
    case 21: l->layer_stride = 0; return "layer_stride 0";
    case 22: l->layer_stride += 1; return "layer_stride not a multiple of elem_bytes";
    case 23: l->base = NULL; return "no base";
    case 24: l->stride_kv = INT64_MAX / 2; return "offsets overflow int64";
    default: return NULL;
    }
}

Test(kvk_gather_vs_ref, bad_layouts_write_nothing)
{
    struct bad_rig r;
    const int64_t ids[2] = { 1, 6 };
    const char *what;
    struct kvk_layout l;

    rig_init(&r);
    cr_assert_eq(kvk_layout_check(&r.a.l), 0, "the rig's own layout must pass");
    for (int i = 0; l = r.a.l, (what = bad_edit(&l, i)); i++) {
        cr_assert_eq(kvk_layout_check(&l), -EINVAL, "%s: check accepted it", what);
        expect_refused(&r, &l, ids, -EINVAL, what);
    }
    cr_assert_eq(kvk_layout_check(NULL), -EINVAL);
    rig_fini(&r);
}

Test(kvk_gather_vs_ref, bad_ids_and_pointers_write_nothing)
{
    struct bad_rig r;
    const int64_t too_big[2] = { 1, 8 }, negative[2] = { -1, 2 }, huge[2] = { 0, INT64_MAX };
    const int64_t ok[2] = { 1, 6 };
    void *layers[2];
    struct kvk_layout l;
    char *one[2];

    rig_init(&r);
    expect_refused(&r, &r.a.l, too_big, -ERANGE, "id == num_blocks");
    expect_refused(&r, &r.a.l, negative, -ERANGE, "negative id");
    expect_refused(&r, &r.a.l, huge, -ERANGE, "id INT64_MAX");
    expect_refused(&r, &r.a.l, NULL, -EINVAL, "NULL ids");

    /* a NULL layer pointer passes kvk_layout_check (it reads no memory) but
     * not the call */
    l = r.a.l;
    layers[0] = r.a.bases[0], layers[1] = NULL;
    l.base = NULL, l.layer_base = layers;
    expect_refused(&r, &l, ok, -EINVAL, "NULL layer pointer");

    /* a NULL tier block among good ones */
    one[0] = r.blk[0], one[1] = NULL;
    cr_assert_eq(kvk_gather_ref(&r.a.l, ok, 2, (void *const *)one), -EINVAL);
    for (size_t k = 0; k < r.bb; k++)
        cr_assert_eq((uint8_t)r.tier[k], 0xa5, "NULL dst: gather wrote tier byte %zu", k);
    cr_assert_eq(kvk_scatter_ref(&r.a.l, (const void *const *)one, ok, 2), -EINVAL);
    cr_assert_eq(memcmp(r.a.mem[0], r.snap, r.a.mem_bytes), 0, "NULL src: scatter wrote");
    cr_assert_eq(kvk_gather_ref(&r.a.l, ok, 2, NULL), -EINVAL);
    rig_fini(&r);
}

/*
 * Bug (issue 13): kvk_plan_init multiplied stride_block by elem_bytes for a
 * one-block cache too, whose stride_block kv_layout.h lets hold anything
 * (an extent of 1 is never used): a signed overflow, which UBSan aborts on.
 * The plan of such a cache must not depend on it, and the block must still
 * go both ways.
 */
Test(kvk_gather_vs_ref, one_block_cache_with_any_block_stride)
{
    struct shape s = { .kind = T_VLLM, .layers = 2, .eb = 4, .bt = 4, .heads = 2, .hd = 8,
                       .nb = 1 };
    struct cache a, b;
    const int64_t id = 0;
    struct kvk_plan p;
    char *blk[1];
    size_t bb;

    cache_init(&a, &s, true);
    cache_init(&b, &s, false);
    a.l.stride_block = b.l.stride_block = INT64_MAX;
    cr_assert_eq(kvk_layout_check(&a.l), 0, "an unused stride_block must pass the check");
    kvk_plan_init(&p, &a.l);
    cr_assert_eq(p.block_stride, 0, "one block: expected block stride 0, got %lld",
                 (long long)p.block_stride);
    bb = kvk_block_bytes(&a.l);
    blk[0] = malloc(bb);
    cr_assert_not_null(blk[0]);
    cr_assert_eq(kvk_gather_ref(&a.l, &id, 1, (void *const *)blk), 0);
    check_tier(&a.l, blk, &id, 1, "one-block gather");
    cr_assert_eq(kvk_scatter_ref(&b.l, (const void *const *)blk, &id, 1), 0);
    for (uint32_t y = 0; y < s.layers; y++)
        cr_assert_eq(memcmp(a.mem[y], b.mem[y], a.mem_bytes), 0, "layer %u differs", y);
    free(blk[0]);
    cache_fini(&a);
    cache_fini(&b);
}

/*
 * Bug (issue 13): a scatter with a repeated block id moved two tier blocks
 * into one engine block (the GPU, in parallel, could leave parts of both).
 * The reference refuses it and writes nothing; a gather may repeat ids (it
 * only reads them twice). kvk_check_scatter_ids finds a repeat in a batch
 * above its stack copy too.
 */
Test(kvk_gather_vs_ref, scatter_refuses_repeated_ids)
{
    struct bad_rig r;
    const int64_t twice[2] = { 3, 3 };
    int64_t *many = malloc(3000 * sizeof(*many));
    struct kvk_layout big;

    rig_init(&r);
    cr_assert_eq(kvk_scatter_ref(&r.a.l, (const void *const *)r.blk, twice, 2), -EINVAL);
    cr_assert_eq(memcmp(r.a.mem[0], r.snap, r.a.mem_bytes), 0, "a refused scatter wrote");
    cr_assert_eq(kvk_gather_ref(&r.a.l, twice, 2, (void *const *)r.blk), 0);
    cr_assert_eq(memcmp(r.blk[0], r.blk[1], r.bb), 0, "one block gathered twice differs");
    /* out of range is still -ERANGE */
    cr_assert_eq(kvk_check_scatter_ids(&r.a.l, (const int64_t[]){ 8, 8 }, 2), -ERANGE);

    cr_assert_not_null(many);
    big = r.a.l;
    big.num_blocks = 3000;
    for (int64_t i = 0; i < 3000; i++)
        many[i] = 2999 - i;
    cr_assert_eq(kvk_check_scatter_ids(&big, many, 3000), 0);
    many[2999] = many[0]; /* the first and the last */
    cr_assert_eq(kvk_check_scatter_ids(&big, many, 3000), -EINVAL);
    free(many);
    rig_fini(&r);
}
