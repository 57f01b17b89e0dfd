/* SPDX-License-Identifier: MIT */
/*
 * kvt_model_size.c - what a model description (kvt_model.c's) costs: bytes
 * per token, per window and per state, a block's bytes per group and
 * tensor-parallel rank, and a namespace sized from it; the groups by kind
 * and the kinds' names. Arithmetic only, saturating at UINT64_MAX, so the
 * sizes of absurd configs never wrap.
 */
#include <errno.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_int.h"
#include "kvtier.h"

/* Bytes one token costs in one layer of g (every kind with per-token K/V). */
static uint64_t layer_token_bytes(const struct kvt_layer_group *g)
{
    return mul_sat(mul_sat((uint64_t)g->n_kv * g->kv_heads, g->head_dim), g->elem_bytes);
}

static int grows(const struct kvt_layer_group *g)
{
    return g->kind == KVT_LAYER_FULL || g->kind == KVT_LAYER_MLA || g->kind == KVT_LAYER_INDEX;
}

uint64_t kvt_layer_group_token_bytes(const struct kvt_layer_group *g)
{
    return g && grows(g) ? mul_sat(layer_token_bytes(g), g->layers) : 0;
}

uint64_t kvt_layer_group_fixed_bytes(const struct kvt_layer_group *g)
{
    if (!g)
        return 0;
    if (g->kind == KVT_LAYER_SLIDING)
        return mul_sat(mul_sat(layer_token_bytes(g), g->layers), g->window);
    if (g->kind == KVT_LAYER_STATE)
        return mul_sat(g->state_bytes, g->layers);
    return 0;
}

/* Sum of f over the groups of m of kind `kind` (-1: every kind). */
static uint64_t sum(const struct kvt_model_desc *m, int kind,
                    uint64_t (*f)(const struct kvt_layer_group *))
{
    uint64_t s = 0;

    for (uint32_t i = 0; m && i < m->n_groups && i < KVT_MODEL_GROUPS_MAX; i++)
        if (kind < 0 || m->group[i].kind == (enum kvt_layer_kind)kind)
            s = add_sat(s, f(&m->group[i]));
    return s;
}

uint64_t kvt_model_token_bytes(const struct kvt_model_desc *m)
{
    return sum(m, -1, kvt_layer_group_token_bytes);
}

uint64_t kvt_model_window_bytes(const struct kvt_model_desc *m)
{
    return sum(m, KVT_LAYER_SLIDING, kvt_layer_group_fixed_bytes);
}

uint64_t kvt_model_state_bytes(const struct kvt_model_desc *m)
{
    return sum(m, KVT_LAYER_STATE, kvt_layer_group_fixed_bytes);
}

uint64_t kvt_model_seq_bytes(const struct kvt_model_desc *m, uint64_t tokens)
{
    uint64_t s = add_sat(mul_sat(kvt_model_token_bytes(m), tokens), kvt_model_state_bytes(m));

    /* a sequence shorter than a window holds only its own tokens there */
    for (uint32_t i = 0; m && i < m->n_groups && i < KVT_MODEL_GROUPS_MAX; i++) {
        const struct kvt_layer_group *g = &m->group[i];

        if (g->kind == KVT_LAYER_SLIDING)
            s = add_sat(s, mul_sat(mul_sat(layer_token_bytes(g), g->layers),
                                   tokens < g->window ? tokens : g->window));
    }
    return s;
}

/* KV heads one of tp_size ranks holds, or 0 when they cannot be split. */
static uint32_t heads_per_rank(uint32_t heads, uint32_t tp_size)
{
    if (heads >= tp_size)
        return heads % tp_size ? 0 : heads / tp_size;
    return tp_size % heads ? 0 : 1; /* fewer heads than ranks: each rank keeps a copy */
}

uint64_t kvt_layer_group_block_bytes(const struct kvt_layer_group *gp, uint32_t block_tokens,
                                     uint32_t tp_size)
{
    struct kvt_layer_group g;
    uint64_t b;

    if (!gp || !block_tokens || !tp_size)
        return 0;
    g = *gp;
    if (g.kind == KVT_LAYER_STATE) {
        /* a state splits across ranks like its heads; an odd split keeps it whole */
        b = mul_sat(g.state_bytes, g.layers);
        return b == UINT64_MAX ? 0 : b % tp_size ? b : b / tp_size;
    }
    if (!g.n_kv)
        return 0;
    /* latents and indexer keys are one "head", replicated on every rank */
    if (g.kind != KVT_LAYER_MLA && g.kind != KVT_LAYER_INDEX &&
        !(g.kv_heads = heads_per_rank(g.kv_heads, tp_size)))
        return 0;
    b = mul_sat(mul_sat(layer_token_bytes(&g), g.layers), block_tokens);
    return b == UINT64_MAX ? 0 : b;
}

uint64_t kvt_model_block_bytes(const struct kvt_model_desc *m, uint32_t block_tokens,
                               uint32_t tp_size)
{
    uint64_t total = 0;

    if (!m || !block_tokens || !tp_size)
        return 0;
    for (uint32_t i = 0; i < m->n_groups && i < KVT_MODEL_GROUPS_MAX; i++) {
        uint64_t b;

        if (!m->group[i].n_kv)
            continue;
        b = kvt_layer_group_block_bytes(&m->group[i], block_tokens, tp_size);
        if (!b)
            return 0;
        total = add_sat(total, b);
    }
    return total == UINT64_MAX ? 0 : total;
}

int kvt_model_fill_ns(const struct kvt_model_desc *m, uint32_t block_tokens, kvt_model *ns)
{
    uint64_t b;

    if (!m || !ns)
        return -EINVAL;
    b = kvt_model_block_bytes(m, block_tokens, ns->tp_size ? ns->tp_size : 1);
    if (!b || b > KVT_BLOCK_MAX)
        return -EINVAL;
    ns->block_tokens = block_tokens;
    ns->block_bytes = b;
    ns->dtype = m->dtype;
    return 0;
}


const char *kvt_layer_kind_name(enum kvt_layer_kind kind)
{
    static const char *const names[KVT_LAYER_KINDS] = {
        [KVT_LAYER_FULL] = "full",       [KVT_LAYER_MLA] = "mla",
        [KVT_LAYER_INDEX] = "indexer",   [KVT_LAYER_SLIDING] = "sliding",
        [KVT_LAYER_STATE] = "state",     [KVT_LAYER_NONE] = "none",
    };

    return (unsigned)kind < KVT_LAYER_KINDS ? names[kind] : "?";
}

const struct kvt_layer_group *kvt_model_group(const struct kvt_model_desc *m,
                                              enum kvt_layer_kind kind)
{
    for (uint32_t i = 0; m && i < m->n_groups && i < KVT_MODEL_GROUPS_MAX; i++)
        if (m->group[i].kind == kind)
            return &m->group[i];
    return NULL;
}
