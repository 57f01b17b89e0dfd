/* SPDX-License-Identifier: MIT */
/*
 * fuzz_config.c - libFuzzer harness for kvt_model_parse_json(): any bytes as
 * a model's config.json. A failure must come with a message; a success must
 * give a description whose groups add up and whose sizes agree with the
 * formulas of kvtier.h, recomputed here in 128-bit arithmetic.
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>

#include "kvtier.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

typedef unsigned __int128 u128;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* Saturate at UINT64_MAX, as the library's sizes do. Factors are kept at or
 * below UINT64_MAX, so a product of two never wraps 128 bits. */
static u128 cap(u128 v)
{
    return v > UINT64_MAX ? UINT64_MAX : v;
}

static u128 mul(u128 a, u128 b)
{
    return cap(cap(a) * cap(b));
}

/* Bytes of one token in one layer of g. */
static u128 layer_token(const struct kvt_layer_group *g)
{
    return mul(mul(mul(g->n_kv, g->kv_heads), g->head_dim), g->elem_bytes);
}

static int grows(const struct kvt_layer_group *g)
{
    return g->kind == KVT_LAYER_FULL || g->kind == KVT_LAYER_MLA || g->kind == KVT_LAYER_INDEX;
}

/* kvt_model_seq_bytes() by its contract. */
static uint64_t seq_bytes(const struct kvt_model_desc *m, uint64_t tokens)
{
    u128 s = 0;

    for (uint32_t i = 0; i < m->n_groups; i++) {
        const struct kvt_layer_group *g = &m->group[i];

        if (grows(g))
            s = cap(s + mul(mul(layer_token(g), g->layers), tokens));
        else if (g->kind == KVT_LAYER_SLIDING)
            s = cap(s + mul(mul(layer_token(g), g->layers),
                            tokens < g->window ? tokens : g->window));
        else if (g->kind == KVT_LAYER_STATE)
            s = cap(s + mul(g->state_bytes, g->layers));
    }
    return (uint64_t)s;
}

/* kvt_model_block_bytes() by its contract: 0 when a group's KV heads do
 * not split over tp ranks, no group has per-token K/V, or it overflows. */
static uint64_t block_bytes(const struct kvt_model_desc *m, uint32_t bt, uint32_t tp)
{
    u128 s = 0;

    for (uint32_t i = 0; i < m->n_groups; i++) {
        struct kvt_layer_group g = m->group[i];

        if (!g.n_kv)
            continue;
        if (g.kind != KVT_LAYER_MLA && g.kind != KVT_LAYER_INDEX) {
            if (g.kv_heads >= tp)
                g.kv_heads = g.kv_heads % tp ? 0 : g.kv_heads / tp;
            else
                g.kv_heads = tp % g.kv_heads ? 0 : 1;
            if (!g.kv_heads)
                return 0;
        }
        s = cap(s + mul(mul(layer_token(&g), g.layers), bt));
    }
    return s >= UINT64_MAX ? 0 : (uint64_t)s;
}

static void check_groups(const struct kvt_model_desc *m)
{
    uint64_t layers = 0;
    int prev = -1;

    CHECK(m->n_groups >= 1 && m->n_groups <= KVT_MODEL_GROUPS_MAX);
    CHECK(m->num_layers >= 1);
    for (uint32_t i = 0; i < m->n_groups; i++) {
        const struct kvt_layer_group *g = &m->group[i];
        int kv = g->kind == KVT_LAYER_FULL || g->kind == KVT_LAYER_SLIDING ? 2
                 : g->kind == KVT_LAYER_MLA || g->kind == KVT_LAYER_INDEX ? 1 : 0;

        /* in kind order, at most one group per kind */
        CHECK((int)g->kind > prev && g->kind < KVT_LAYER_KINDS);
        prev = (int)g->kind;
        CHECK(g->name && g->layers >= 1 && g->n_kv == (uint32_t)kv);
        /* the indexer's keys are FP8 bytes and scales in any KV dtype */
        CHECK(g->elem_bytes == (!kv ? 0 : g->kind == KVT_LAYER_INDEX ? 1 : m->elem_bytes));
        CHECK(!kv || (g->kv_heads >= 1 && g->head_dim >= 1));
        CHECK(kv || (g->kv_heads == 0 && g->head_dim == 0));
        CHECK((g->window > 0) == (g->kind == KVT_LAYER_SLIDING));
        CHECK(g->kind == KVT_LAYER_STATE || g->state_bytes == 0);
        if (g->kind == KVT_LAYER_INDEX) {
            const struct kvt_layer_group *mla = kvt_model_group(m, KVT_LAYER_MLA);

            CHECK(mla && mla->layers == g->layers); /* keys in the MLA layers */
        } else {
            layers += g->layers;
        }
        CHECK(kvt_model_group(m, g->kind) == g);
    }
    /* every layer in exactly one group */
    CHECK(layers == m->num_layers);
}

static void check_sizes(const struct kvt_model_desc *m)
{
    static const uint64_t tokens[] = {
        0, 1, 2, 15, 16, 127, 128, 4095, 4096, 131072, 1ull << 32, 1ull << 48, UINT64_MAX,
    };
    static const uint32_t bts[] = { 1, 16, 512 }, tps[] = { 1, 2, 3, 8 };
    uint64_t prev = 0, tok = kvt_model_token_bytes(m);
    u128 per_tok = 0;

    CHECK(kvt_model_state_bytes(m) == kvt_model_seq_bytes(m, 0));
    for (size_t i = 0; i < sizeof(tokens) / sizeof(tokens[0]); i++) {
        uint64_t s = kvt_model_seq_bytes(m, tokens[i]);

        CHECK(s == seq_bytes(m, tokens[i]));
        CHECK(s >= prev); /* monotone in tokens */
        prev = s;
    }
    for (uint32_t i = 0; i < m->n_groups; i++) {
        const struct kvt_layer_group *g = &m->group[i];

        CHECK(kvt_layer_group_token_bytes(g) == (grows(g) ? mul(layer_token(g), g->layers) : 0));
        if (g->n_kv)
            per_tok = cap(per_tok + mul(layer_token(g), g->layers));
    }
    /* a whole-model block is every per-token layer (sliding ones included) */
    CHECK(per_tok >= tok);
    for (size_t b = 0; b < 3; b++)
        for (size_t t = 0; t < 4; t++) {
            uint64_t bb = kvt_model_block_bytes(m, bts[b], tps[t]);
            kvt_model ns = { .tp_size = tps[t] };
            int rc;

            CHECK(bb == block_bytes(m, bts[b], tps[t]));
            if (tps[t] == 1)
                CHECK(bb == 0 || bb == mul(per_tok, bts[b]));
            rc = kvt_model_fill_ns(m, bts[b], &ns);
            CHECK(rc == ((bb && bb <= KVT_BLOCK_MAX) ? 0 : -EINVAL));
            CHECK(rc || (ns.block_bytes == bb && ns.block_tokens == bts[b] &&
                         ns.dtype == m->dtype));
        }
}

static void check_dtype(const struct kvt_model_desc *m)
{
    static const struct { const char *name; uint32_t bytes; } tab[] = {
        {"bf16", 2}, {"fp16", 2}, {"fp32", 4}, {"fp8_e4m3", 1}, {"fp8_e5m2", 1},
        {"fp8_e4m3fnuz", 1}, {"fp8_e5m2fnuz", 1},
    };
    const size_t ntab = sizeof(tab) / sizeof(tab[0]);
    struct kvt_model_desc c = *m;
    size_t i;

    CHECK(memchr(m->model_type, 0, sizeof(m->model_type)));
    CHECK(memchr(m->config_dtype, 0, sizeof(m->config_dtype)));
    for (i = 0; i < ntab; i++)
        if (strcmp(m->dtype, tab[i].name) == 0)
            break;
    CHECK(i < ntab && m->elem_bytes == tab[i].bytes);
    /* a dtype change scales every per-token size but the indexer's (FP8
     * bytes and scales in any dtype), and nothing else */
    CHECK(kvt_model_set_dtype(&c, "fp32") == 0 && c.elem_bytes == 4);
    CHECK(kvt_model_state_bytes(&c) == kvt_model_state_bytes(m));
    for (uint32_t g = 0; g < m->n_groups; g++) {
        u128 was = kvt_layer_group_token_bytes(&m->group[g]);
        u128 now = kvt_layer_group_token_bytes(&c.group[g]);

        if (m->group[g].kind == KVT_LAYER_INDEX)
            CHECK(now == was && c.group[g].elem_bytes == 1);
        else
            CHECK(now == UINT64_MAX || now * m->elem_bytes == was * 4);
    }
    check_groups(&c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct kvt_model_desc m;
    char err[160];
    int rc = kvt_model_parse_json((const char *)data, size, &m, err, sizeof(err));

    if (rc < 0) {
        /* a one-line message saying why */
        CHECK(rc == -EINVAL || rc == -ENOMEM);
        CHECK(memchr(err, 0, sizeof(err)) && err[0] && !strchr(err, '\n'));
        return 0;
    }
    CHECK(rc == 0);
    check_groups(&m);
    check_dtype(&m);
    check_sizes(&m);
    return 0;
}
