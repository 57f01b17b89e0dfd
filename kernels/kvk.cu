// SPDX-License-Identifier: MIT
/*
 * kvk.cu - GPU twins of kvk_cpu.c: a batched block copy, and paged-KV
 * gather/scatter for all layers and n blocks in one launch. 16-byte vector
 * copies where both sides and every stride allow, narrower ones otherwise.
 * Built by `make kernels` when nvcc exists; checked against the CPU
 * reference on a machine with a GPU.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <limits.h>
#include <stdint.h>

#include "kvk.h"

/* Everything a gather/scatter launch needs, passed by value. */
struct gs_args {
    struct kvk_plan p;      /* runs and outer dims, from kvk_plan_init */
    void *const *layer_base; /* device array of n_layers pointers, or NULL */
    char *base;             /* layer 0 when layer_base is NULL */
    int64_t layer_stride;   /* bytes, when layer_base is NULL */
    int64_t num_blocks;     /* ids outside [0, num_blocks) are skipped */
    const int64_t *ids;     /* device array of n ids */
    void *const *blocks;    /* device array of n tier block pointers */
    uint32_t n;             /* tier blocks (grid x) */
};

/*
 * Design note. One thread block moves one layer's part of one tier block
 * (grid: x = tier block, y = layer). That part is dense on the tier side,
 * so it is cut into units of sizeof(T) bytes, consecutive threads take
 * consecutive units (coalesced on the tier side, and on the engine side
 * within a run), and each unit finds its engine offset by decomposing its
 * run index over the outer dims (at most 4 divisions). The unit index I is
 * 32 bits where the part allows and 64 bits otherwise: a 32-bit index
 * within one stride of 2^32 wraps and the loop never ends (a byte-wise part
 * near 4 GiB), and a 64-bit division costs several 32-bit ones, so parts
 * that fit keep the fast one.
 */
template <typename T, typename I>
__device__ static void copy_units(const struct kvk_plan &p, char *eng, char *tier,
                                  bool to_tier)
{
    const I per_run = (I)(p.run_bytes / sizeof(T));
    const I total = (I)p.runs * per_run;

    for (I u = threadIdx.x; u < total; u += blockDim.x) {
        I r = u / per_run, k = u - r * per_run;
        int64_t off = 0;

        for (uint32_t d = 0; d < p.n_outer; d++) {
            I q = r / p.ext[d];

            off += (int64_t)(r - q * p.ext[d]) * p.stride[d];
            r = q;
        }
        T *e = (T *)(eng + off) + k;
        T *t = (T *)tier + u;

        if (to_tier)
            *t = *e;
        else
            *e = *t;
    }
}

template <typename T>
__device__ static void copy_part(const struct kvk_plan &p, char *eng, char *tier, bool to_tier)
{
    /* the loop's u + blockDim.x must stay below 2^32 for a 32-bit index */
    if (p.layer_bytes / sizeof(T) <= (size_t)UINT32_MAX - blockDim.x)
        copy_units<T, uint32_t>(p, eng, tier, to_tier);
    else
        copy_units<T, uint64_t>(p, eng, tier, to_tier);
}

/* Whether a tier block after block i scatters to the same engine block
 * (called by every thread of the block; the answer is the block's). */
__device__ static bool scattered_later(const int64_t *ids, uint32_t n, uint32_t i)
{
    int later = 0;

    for (uint32_t j = i + 1 + threadIdx.x; j < n; j += blockDim.x)
        later |= ids[j] == ids[i];
    return __syncthreads_or(later) != 0;
}

__global__ static void gather_scatter(struct gs_args a, bool to_tier)
{
    const int64_t id = a.ids[blockIdx.x];
    const uint32_t layer = blockIdx.y;

    if (id < 0 || id >= a.num_blocks)
        return; /* the host should have checked; never write out of bounds */
    /* a repeated destination: only its last tier block is written, as two
     * thread blocks writing one engine block at once would mix their bytes
     * (the host should have refused it: kvk_check_scatter_ids) */
    if (!to_tier && scattered_later(a.ids, a.n, blockIdx.x))
        return;

    char *lb = a.layer_base ? (char *)a.layer_base[layer]
                            : a.base + (int64_t)layer * a.layer_stride;
    char *eng = lb + id * a.p.block_stride;
    char *tier = (char *)a.blocks[blockIdx.x] + layer * a.p.layer_bytes;
    uintptr_t al = (uintptr_t)eng | (uintptr_t)tier | a.p.run_bytes;

    /* every run starts aligned only if every outer stride is aligned too */
    for (uint32_t d = 0; d < a.p.n_outer; d++)
        al |= (uintptr_t)a.p.stride[d];
    if ((al & 15) == 0)
        copy_part<uint4>(a.p, eng, tier, to_tier);
    else if ((al & 3) == 0)
        copy_part<uint32_t>(a.p, eng, tier, to_tier);
    else if ((al & 1) == 0)
        copy_part<uint16_t>(a.p, eng, tier, to_tier);
    else
        copy_part<uint8_t>(a.p, eng, tier, to_tier);
}

static int launch(const struct kvk_layout *l, const int64_t *ids, size_t n,
                  void *const *blocks, bool to_tier, cudaStream_t stream)
{
    struct gs_args a;
    int rc = kvk_layout_check(l);

    if (rc)
        return rc;
    if (n == 0)
        return 0;
    if (!ids || !blocks || n > INT_MAX || l->n_layers > 65535)
        return -EINVAL;
    kvk_plan_init(&a.p, l);
    a.layer_base = l->layer_base;
    a.base = (char *)l->base;
    a.layer_stride = l->layer_stride;
    a.num_blocks = l->num_blocks;
    a.ids = ids;
    a.blocks = blocks;
    a.n = (uint32_t)n;
    gather_scatter<<<dim3((unsigned)n, l->n_layers), 256, 0, stream>>>(a, to_tier);
    return cudaGetLastError() == cudaSuccess ? 0 : -EIO;
}

extern "C" int kvk_gather(const struct kvk_layout *l, const int64_t *block_ids, size_t n,
                          void *const *dst, cudaStream_t stream)
{
    return launch(l, block_ids, n, dst, true, stream);
}

extern "C" int kvk_scatter(const struct kvk_layout *l, const void *const *src,
                           const int64_t *block_ids, size_t n, cudaStream_t stream)
{
    /* the kernel only reads the tier blocks when scattering */
    return launch(l, block_ids, n, (void *const *)src, false, stream);
}

extern "C" int kvk_layout_upload(const struct kvk_layout *host, void **dev_bases,
                                 struct kvk_layout *out, cudaStream_t stream)
{
    int rc = kvk_layout_check(host);

    if (rc)
        return rc;
    if (!out)
        return -EINVAL;
    *out = *host;
    if (!host->layer_base)
        return 0;
    if (!dev_bases)
        return -EINVAL;
    if (cudaMemcpyAsync(dev_bases, host->layer_base, host->n_layers * sizeof(void *),
                        cudaMemcpyHostToDevice, stream) != cudaSuccess)
        return -EIO;
    out->layer_base = dev_bases;
    return 0;
}
