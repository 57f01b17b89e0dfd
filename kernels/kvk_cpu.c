/* SPDX-License-Identifier: MIT */
/*
 * kvk_cpu.c - CPU reference of the kernels in kvk.cu: same arguments,
 * same results, used where there is no GPU and as the tests' oracle; and
 * the layout helpers of kv_layout.h, which both sides share.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "kvk.h"

size_t kvk_block_bytes(const struct kvk_layout *l)
{
    return (size_t)l->n_layers * l->n_kv * l->block_tokens * l->kv_heads * l->head_dim *
           l->elem_bytes;
}

/* One dimension of the cache for the overlap test: stride in elements. */
struct dim {
    int64_t stride, ext;
};

/*
 * Overlap test. Sorted by stride, a layout is injective when each stride is
 * at least the span (highest offset + 1) of all the smaller dimensions
 * together: then the smaller ones fill at most one stride's worth, and the
 * mixed-radix address decomposes uniquely. Extent-1 dimensions never move
 * the address and are left out. At most 6 dimensions: insertion sort.
 */
static int check_injective(struct dim *d, int nd, int64_t elem_bytes)
{
    int64_t span = 1, ext_off;

    for (int i = 1; i < nd; i++) {
        struct dim t = d[i];
        int j = i;

        for (; j > 0 && d[j - 1].stride > t.stride; j--)
            d[j] = d[j - 1];
        d[j] = t;
    }
    for (int i = 0; i < nd; i++) {
        if (d[i].stride < span)
            return -EINVAL;
        if (__builtin_mul_overflow(d[i].ext - 1, d[i].stride, &ext_off) ||
            __builtin_add_overflow(span, ext_off, &span))
            return -EINVAL;
    }
    /* the highest byte offset must fit an int64 too */
    return __builtin_mul_overflow(span, elem_bytes, &span) ? -EINVAL : 0;
}

int kvk_layout_check(const struct kvk_layout *l)
{
    struct dim d[6];
    int nd = 0;

    if (!l || !l->n_layers || !l->block_tokens || !l->kv_heads || !l->head_dim ||
        l->num_blocks <= 0 || (l->n_kv != 1 && l->n_kv != 2))
        return -EINVAL;
    if (l->elem_bytes != 1 && l->elem_bytes != 2 && l->elem_bytes != 4)
        return -EINVAL;
    if (l->stride_kv < 0 || l->stride_block < 0 || l->stride_token < 0 ||
        l->stride_head < 0 || l->stride_dim < 0)
        return -EINVAL;

    const struct dim all[5] = {
        { l->stride_kv, l->n_kv },          { l->stride_block, l->num_blocks },
        { l->stride_token, l->block_tokens }, { l->stride_head, l->kv_heads },
        { l->stride_dim, l->head_dim },
    };
    for (int i = 0; i < 5; i++) {
        if (all[i].ext == 1)
            continue;
        if (all[i].stride == 0)
            return -EINVAL;
        d[nd++] = all[i];
    }

    /* layer_base may be a device array here: its entries are checked by
     * the reference calls only */
    if (!l->layer_base) {
        if (!l->base)
            return -EINVAL;
        if (l->n_layers > 1) {
            /* one allocation: layers must not overlap each other either */
            if (l->layer_stride <= 0 || l->layer_stride % l->elem_bytes)
                return -EINVAL;
            d[nd++] = (struct dim){ l->layer_stride / l->elem_bytes, l->n_layers };
        }
    }
    return check_injective(d, nd, l->elem_bytes);
}

int kvk_check_ids(const struct kvk_layout *l, const int64_t *block_ids, size_t n)
{
    if (n && !block_ids)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (block_ids[i] < 0 || block_ids[i] >= l->num_blocks)
            return -ERANGE;
    return 0;
}

static int cmp_id(const void *a, const void *b)
{
    int64_t x = *(const int64_t *)a, y = *(const int64_t *)b;

    return (x > y) - (x < y);
}

int kvk_check_scatter_ids(const struct kvk_layout *l, const int64_t *block_ids, size_t n)
{
    int64_t stack[1024], *s = stack;
    int rc = kvk_check_ids(l, block_ids, n);

    if (rc || n < 2)
        return rc;
    /* sort a copy, O(n log n): a batch (KVT_BATCH_MAX) needs no allocation */
    if (n > sizeof(stack) / sizeof(stack[0]) && !(s = malloc(n * sizeof(*s))))
        return -ENOMEM;
    memcpy(s, block_ids, n * sizeof(*s));
    qsort(s, n, sizeof(*s), cmp_id);
    for (size_t i = 1; i < n && rc == 0; i++)
        if (s[i] == s[i - 1])
            rc = -EINVAL;
    if (s != stack)
        free(s);
    return rc;
}

/*
 * The plan: walk the tier order from the innermost dim out (dim, head,
 * token, kv) and merge while the engine's stride equals the run so far, so
 * a dense head becomes one memcpy of head_dim elements, and a whole
 * FlashInfer K or V page one memcpy. What is left are the outer dims.
 */
void kvk_plan_init(struct kvk_plan *p, const struct kvk_layout *l)
{
    const int64_t ext[4] = { l->head_dim, l->kv_heads, l->block_tokens, l->n_kv };
    const int64_t str[4] = { l->stride_dim, l->stride_head, l->stride_token, l->stride_kv };
    int64_t run = 1;
    int i = 0;

    memset(p, 0, sizeof(*p));
    for (; i < 4 && (ext[i] == 1 || str[i] == run); i++)
        run *= ext[i];
    p->run_bytes = (size_t)run * l->elem_bytes;
    p->runs = 1;
    for (; i < 4; i++) {
        if (ext[i] == 1)
            continue;
        p->ext[p->n_outer] = (uint32_t)ext[i];
        p->stride[p->n_outer++] = str[i] * l->elem_bytes;
        p->runs *= (size_t)ext[i];
    }
    p->layer_bytes = p->runs * p->run_bytes;
    /* with one block, stride_block is never used and may hold anything
     * (kv_layout.h): multiplying it could overflow; the only id is 0 */
    p->block_stride = l->num_blocks > 1 ? l->stride_block * l->elem_bytes : 0;
}

/* Everything a call checks before it writes a byte (scatter: distinct ids). */
static int check_call(const struct kvk_layout *l, const int64_t *block_ids, size_t n,
                      const void *const *blocks, bool to_tier)
{
    int rc = kvk_layout_check(l);

    if (rc)
        return rc;
    if (l->layer_base)
        for (uint32_t i = 0; i < l->n_layers; i++)
            if (!l->layer_base[i])
                return -EINVAL;
    if (n && !blocks)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (!blocks[i])
            return -EINVAL;
    return to_tier ? kvk_check_ids(l, block_ids, n) : kvk_check_scatter_ids(l, block_ids, n);
}

static char *layer_ptr(const struct kvk_layout *l, uint32_t layer)
{
    if (l->layer_base)
        return l->layer_base[layer];
    return (char *)l->base + (int64_t)layer * l->layer_stride;
}

/* Move one layer's part between an engine block and a tier block; the
 * outer dims advance like an odometer, innermost first. */
static void move(const struct kvk_plan *p, char *eng, char *tier, bool to_tier)
{
    uint32_t idx[4] = { 0 };
    int64_t off = 0;

    for (size_t r = 0; r < p->runs; r++) {
        if (to_tier)
            memcpy(tier + r * p->run_bytes, eng + off, p->run_bytes);
        else
            memcpy(eng + off, tier + r * p->run_bytes, p->run_bytes);
        for (uint32_t k = 0; k < p->n_outer; k++) {
            off += p->stride[k];
            if (++idx[k] < p->ext[k])
                break;
            off -= p->stride[k] * p->ext[k];
            idx[k] = 0;
        }
    }
}

static int gather_scatter(const struct kvk_layout *l, const int64_t *block_ids, size_t n,
                          void *const *blocks, bool to_tier)
{
    struct kvk_plan p;
    int rc = check_call(l, block_ids, n, (const void *const *)blocks, to_tier);

    if (rc)
        return rc;
    kvk_plan_init(&p, l);
    for (size_t i = 0; i < n; i++) {
        char *tier = blocks[i];

        for (uint32_t layer = 0; layer < l->n_layers; layer++) {
            char *eng = layer_ptr(l, layer) + block_ids[i] * p.block_stride;

            move(&p, eng, tier + layer * p.layer_bytes, to_tier);
        }
    }
    return 0;
}

int kvk_gather_ref(const struct kvk_layout *l, const int64_t *block_ids, size_t n,
                   void *const *dst)
{
    return gather_scatter(l, block_ids, n, dst, true);
}

int kvk_scatter_ref(const struct kvk_layout *l, const void *const *src,
                    const int64_t *block_ids, size_t n)
{
    /* scatter only reads the tier blocks; the shared walker takes them as
     * void * for both directions */
    return gather_scatter(l, block_ids, n, (void *const *)src, false);
}
