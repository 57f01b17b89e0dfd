/* SPDX-License-Identifier: MIT */
/*
 * kvk.h - movers between an engine's paged KV cache and tier blocks:
 * gather (engine pages -> contiguous tier blocks) and scatter (back).
 * Each *_ref function in kvk_cpu.c is the CPU reference
 * with the exact semantics its CUDA twin in kvk.cu implements on a stream.
 * Layouts and the tier block format are in kv_layout.h. Uses nothing else of
 * kvtier, and needs no CUDA header: a stream is a `struct CUstream_st *`,
 * which is what cudaStream_t is.
 */
#ifndef KVK_H
#define KVK_H

#include <stddef.h>
#include <stdint.h>

#include "kv_layout.h"

#ifdef __cplusplus
extern "C" {
#endif

struct CUstream_st; /* cudaStream_t without cuda_runtime.h */

/* Gather engine blocks block_ids[0..n) of every layer into n tier blocks:
 * dst[i] receives block block_ids[i] in the tier format of kv_layout.h,
 * kvk_block_bytes(l) bytes. Ids may repeat. The tier blocks must not
 * overlap each other or the cache. Everything is checked before any byte is
 * written: returns 0; -EINVAL for a bad layout (kvk_layout_check), a NULL
 * layer_base[i], NULL arrays with n > 0 or a NULL dst[i]; -ERANGE for an id outside
 * [0, num_blocks). Nothing is kept after return. */
int kvk_gather_ref(const struct kvk_layout *l, const int64_t *block_ids, size_t n,
                   void *const *dst);

/* Scatter n tier blocks into the engine's pages: src[i] (tier format,
 * kvk_block_bytes(l) bytes) goes to block block_ids[i] of every layer.
 * Ids must be distinct (kvk_check_scatter_ids): a repeated id is -EINVAL.
 * Other errors and checks as kvk_gather_ref; on error the cache is
 * untouched. */
int kvk_scatter_ref(const struct kvk_layout *l, const void *const *src,
                    const int64_t *block_ids, size_t n);

/*
 * CUDA twins (kvk.cu; only in builds that link the CUDA objects).
 *
 * Same arguments and tier format as the references, plus the stream the work
 * is queued on; they return once the launch is queued. Memory rules:
 *  - l itself is read on the host at the call and may be freed after it;
 *  - l->layer_base, when not NULL, must be a device-accessible array of
 *    n_layers device pointers (kvk_layout_upload builds one), and base /
 *    the layer pointers must be device memory;
 *  - block_ids and dst / src are device-accessible arrays of n entries;
 *    dst[i] / src[i] point to device or mapped pinned host memory;
 *  - all of them must stay valid until the stream reaches the work.
 * The layout is checked on the host (-EINVAL as the references). The ids
 * are on the device and cannot be checked before the launch without a
 * sync: check them on the host copy with kvk_check_ids() (gather) or
 * kvk_check_scatter_ids() (scatter) first. The kernels still skip any
 * block whose id is out of range, so a bad id never writes outside the
 * cache or its tier block, and a scatter with a repeated id writes only
 * the last tier block given for it (what the reference would refuse), so
 * an engine block never holds parts of two; neither is reported.
 * Returns 0, -EINVAL, or -EIO when the launch fails (cudaGetLastError).
 */
int kvk_gather(const struct kvk_layout *l, const int64_t *block_ids, size_t n,
               void *const *dst, struct CUstream_st *stream);
int kvk_scatter(const struct kvk_layout *l, const void *const *src,
                const int64_t *block_ids, size_t n, struct CUstream_st *stream);

/* Make a device copy of a host layout: queue a copy of host->layer_base
 * (n_layers pointers, already device pointers) into dev_bases, a device
 * array of at least n_layers entries the caller allocated once at startup,
 * and set *out to *host with layer_base = dev_bases. When host->layer_base
 * is NULL, *out = *host and nothing is copied. host->layer_base must stay
 * valid until the stream reaches the copy (use pinned memory, or sync).
 * Returns 0, -EINVAL (bad layout or NULL dev_bases) or -EIO. */
int kvk_layout_upload(const struct kvk_layout *host, void **dev_bases,
                      struct kvk_layout *out, struct CUstream_st *stream);

/*
 * Copy plan, shared by the reference and the CUDA twin (not for engines).
 * A tier block's part for one layer is a sequence of equal runs, each
 * contiguous on both sides (the innermost dims merged while the engine's
 * strides allow); runs follow each other densely in the tier block and
 * are placed in the engine block by up to 4 outer dims.
 */
struct kvk_plan {
    size_t run_bytes;       /* bytes copied at once, >= elem_bytes */
    size_t runs;            /* runs per layer part */
    size_t layer_bytes;     /* runs * run_bytes: one layer's part of a tier block */
    uint32_t n_outer;       /* outer dims used, 0..4 */
    uint32_t ext[4];        /* their extents, innermost first */
    int64_t stride[4];      /* their engine strides, bytes */
    int64_t block_stride;   /* bytes between engine blocks */
};

/* Build the plan of a layout that passed kvk_layout_check(). */
void kvk_plan_init(struct kvk_plan *p, const struct kvk_layout *l);

#ifdef __cplusplus
}
#endif
#endif /* KVK_H */
