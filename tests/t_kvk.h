/* SPDX-License-Identifier: MIT */
/*
 * t_kvk.h - what the gather/scatter checks share, in C (kvk_gather_vs_ref.c)
 * and CUDA C++ (gpu/kvk_check.cu, built alone by nvcc, so header-only): the
 * engine layouts of kv_layout.h as descriptors, a splitmix64 hash and random
 * distinct block ids. Nothing here calls a kernel or the reference.
 */
#ifndef T_KVK_H
#define T_KVK_H

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvk.h"

/* The engine layouts, and one more whose dim is not innermost. */
enum t_kvk_kind { T_VLLM, T_FLASHINFER, T_HND, T_MLA, T_TRANSPOSED };
static const char *const t_kvk_kind_name[] = { "vllm", "flashinfer", "hnd", "mla",
                                               "transposed" };

/* splitmix64's finaliser: the same 64 bits for x on every platform. */
static inline uint64_t t_kvk_mix(uint64_t x)
{
    x += 0x9e3779b97f4a7c15ull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

/*
 * A dense layout of kind k (bases left NULL): the shape given, kv_heads 1
 * and n_kv 1 for MLA, each stride the product of the extents inside it in
 * the tensor order kv_layout.h writes for the kind, outermost first:
 *   vllm [2, NB, BS, H, D]  flashinfer [NB, 2, BS, H, D]  hnd [NB, 2, H, BS, D]
 *   mla [NB, BS, D] (stride_kv and stride_head 0)  transposed [NB, 2, D, BS, H]
 */
static inline struct kvk_layout t_kvk_layout(enum t_kvk_kind k, uint32_t layers, uint32_t eb,
                                             uint32_t bt, uint32_t heads, uint32_t hd,
                                             int64_t nb)
{
    /* axes: 0 kv, 1 block, 2 token, 3 head, 4 dim; -1 ends a shorter order */
    static const int order[][5] = {
        { 0, 1, 2, 3, 4 }, { 1, 0, 2, 3, 4 }, { 1, 0, 3, 2, 4 }, { 1, 2, 4, -1, -1 },
        { 1, 0, 4, 2, 3 },
    };
    struct kvk_layout l;
    int64_t ext[5], *stride[5], s = 1;

    memset(&l, 0, sizeof(l));
    l.n_layers = layers;
    l.elem_bytes = eb;
    l.block_tokens = bt;
    l.kv_heads = k == T_MLA ? 1 : heads;
    l.head_dim = hd;
    l.n_kv = k == T_MLA ? 1 : 2;
    l.num_blocks = nb;
    ext[0] = l.n_kv, ext[1] = nb, ext[2] = bt, ext[3] = l.kv_heads, ext[4] = hd;
    stride[0] = &l.stride_kv, stride[1] = &l.stride_block, stride[2] = &l.stride_token;
    stride[3] = &l.stride_head, stride[4] = &l.stride_dim;
    for (int i = 4; i >= 0; i--)
        if (order[k][i] >= 0) {
            *stride[order[k][i]] = s;
            s *= ext[order[k][i]];
        }
    return l;
}

/* Bytes of one layer's tensor of a dense layout. */
static inline size_t t_kvk_layer_bytes(const struct kvk_layout *l)
{
    return (size_t)l->n_kv * (size_t)l->num_blocks * l->block_tokens * l->kv_heads *
           l->head_dim * l->elem_bytes;
}

/* n distinct ids in [0, nb) by a partial Fisher-Yates shuffle, drawing
 * t_kvk_mix((*rng)++): 0, or -ENOMEM (ids untouched). */
static inline int t_kvk_pick_ids(int64_t *ids, size_t n, int64_t nb, uint64_t *rng)
{
    int64_t *all = (int64_t *)malloc((size_t)nb * sizeof(*all));

    if (!all)
        return -ENOMEM;
    for (int64_t i = 0; i < nb; i++)
        all[i] = i;
    for (size_t i = 0; i < n; i++) {
        size_t j = i + t_kvk_mix((*rng)++) % (size_t)(nb - (int64_t)i);
        int64_t t = all[i];

        all[i] = all[j], all[j] = t;
        ids[i] = all[i];
    }
    free(all);
    return 0;
}

#endif /* T_KVK_H */
