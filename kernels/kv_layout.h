/* SPDX-License-Identifier: MIT */
/*
 * kv_layout.h - how an engine's paged KV cache sits in memory, and the fixed
 * format of a tier block. Plain data: the movers in kvk.h read a layout, they
 * never own or allocate anything it points to. No CUDA types here.
 */
#ifndef KV_LAYOUT_H
#define KV_LAYOUT_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/*
 * Engine cache
 * ------------
 * Per layer, the cache is a strided tensor indexed by (kv, block, token,
 * head, dim). The element (l, kv, b, t, h, d) lives at byte address
 *
 *     layer_base(l) + elem_bytes * (kv * stride_kv + b * stride_block +
 *                                   t * stride_token + h * stride_head +
 *                                   d * stride_dim)
 *
 * where layer_base(l) is layer_base[l], or base + l * layer_stride (bytes)
 * when layer_base is NULL. Strides count elements, not bytes, and are never
 * negative. A stride whose extent is 1 (stride_kv with n_kv 1, stride_block
 * with num_blocks 1, ...) is never used and may be 0.
 *
 * Examples (E = elem_bytes, NB = num_blocks, BS = block_tokens,
 * H = kv_heads, D = head_dim):
 *
 *   vLLM flash-attn, one tensor per layer [2, NB, BS, H, D]:
 *     n_kv 2, stride_kv NB*BS*H*D, stride_block BS*H*D, stride_token H*D,
 *     stride_head D, stride_dim 1; layer_base = the layers' data pointers.
 *
 *   FlashInfer (NHD) [NB, 2, BS, H, D]:
 *     n_kv 2, stride_block 2*BS*H*D, stride_kv BS*H*D, stride_token H*D,
 *     stride_head D, stride_dim 1.
 *
 *   HND [NB, 2, H, BS, D]:
 *     n_kv 2, stride_block 2*H*BS*D, stride_kv H*BS*D, stride_head BS*D,
 *     stride_token D, stride_dim 1.
 *
 *   MLA [NB, BS, kv_lora_rank + qk_rope_head_dim] (one latent, no V):
 *     n_kv 1, kv_heads 1, head_dim = kv_lora_rank + qk_rope_head_dim (576 for
 *     DeepSeek-V3), stride_block BS*D, stride_token D, stride_dim 1;
 *     stride_kv and stride_head may be 0.
 *
 *   All layers in one allocation [L, ...]: layer_base NULL, base = the
 *   allocation, layer_stride = bytes of one layer's tensor.
 *
 * Tier block
 * ----------
 * One tier block holds one engine block of every layer, densely packed,
 * elem_bytes per element, in this order (outermost first):
 *
 *     layer, kv (K then V; only one for MLA), token, head, dim
 *
 * so element (l, kv, t, h, d) is at byte
 *
 *     E * ((((l * n_kv + kv) * BS + t) * H + h) * D + d)
 *
 * and the block is kvk_block_bytes() bytes. The format does not depend on
 * the engine's layout: a block gathered from a FlashInfer cache scatters
 * into a vLLM cache of the same shape.
 */
struct kvk_layout {
    uint32_t n_layers;        /* layers in the cache, >= 1 */
    void *const *layer_base;  /* n_layers layer pointers (borrowed), or NULL */
    void *base;               /* layer 0 when layer_base is NULL */
    int64_t layer_stride;     /* bytes between layers when layer_base is NULL */
    uint32_t elem_bytes;      /* 1 (FP8), 2 (BF16/FP16) or 4 (FP32) */
    uint32_t block_tokens;    /* tokens per engine block (BS) */
    uint32_t kv_heads;        /* KV heads (H), 1 for MLA */
    uint32_t head_dim;        /* elements per head (D); the latent size for MLA */
    uint32_t n_kv;            /* 2 (K and V) or 1 (MLA) */
    int64_t num_blocks;       /* engine blocks per layer; ids are 0..num_blocks-1 */
    int64_t stride_kv;        /* elements between K and V */
    int64_t stride_block;     /* elements between engine blocks */
    int64_t stride_token;     /* elements between tokens of a block */
    int64_t stride_head;      /* elements between heads */
    int64_t stride_dim;       /* elements between dims, usually 1 */
};

/* Bytes of one tier block: n_layers * n_kv * block_tokens * kv_heads *
 * head_dim * elem_bytes. No checks: call kvk_layout_check() first. */
size_t kvk_block_bytes(const struct kvk_layout *l);

/* Check a layout without reading any memory it points to (layer_base may
 * be a device array; the CPU calls check its entries). Returns 0, or
 * -EINVAL when: l is NULL; a count is 0 (n_layers, block_tokens, kv_heads,
 * head_dim, num_blocks) or n_kv is not 1 or 2; elem_bytes is not 1, 2 or 4;
 * a stride of an extent above 1 is 0 or any stride is negative; both base
 * and layer_base are NULL; layer_stride is not a
 * positive multiple of elem_bytes (with more than one layer); or two
 * different elements of the cache (any kv, block, token, head, dim, and
 * layer when one base is used) would share an address, or a byte offset
 * overflows int64. The overlap test sorts the dimensions by stride and asks
 * each stride to be at least the span of all smaller ones: every layout
 * above passes, a few exotic interleavings that are still injective do not.
 * Block ids are checked per call (kvk_check_ids, -ERANGE). */
int kvk_layout_check(const struct kvk_layout *l);

/* Check n block ids (host memory) against l: 0 <= id < num_blocks.
 * Returns 0, -EINVAL for a NULL array with n > 0, or -ERANGE. */
int kvk_check_ids(const struct kvk_layout *l, const int64_t *block_ids, size_t n);

/* kvk_check_ids for the destination ids of a scatter, which must also be
 * distinct: two tier blocks scattered into one engine block would leave it
 * holding parts of both. Returns 0, -EINVAL (NULL array, or an id that
 * repeats), -ERANGE, or -ENOMEM (n above 1024 needs a sorted copy). */
int kvk_check_scatter_ids(const struct kvk_layout *l, const int64_t *block_ids, size_t n);

#ifdef __cplusplus
}
#endif
#endif /* KV_LAYOUT_H */
