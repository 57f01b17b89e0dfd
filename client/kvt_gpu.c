/* SPDX-License-Identifier: MIT */
/*
 * kvt_gpu.c - libkvtier's one door to the CUDA runtime: the hot pool's IPC
 * handle opened and closed, and blocks moved between a device cache and
 * pool slots by the gather/scatter kernels. Only this file includes
 * cuda_runtime.h; built without CUDA (KVT_HAVE_CUDA unset) the same calls
 * answer -EOPNOTSUPP, so the rest of libkvtier has no #ifdef.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvk.h"
#include "kvt_int.h"
#include "kvt_wire.h"
#include "kvtier.h"

#ifdef KVT_HAVE_CUDA
#include <cuda_runtime.h>

#define GPU_LAYERS_MAX 1024

_Static_assert(sizeof(((struct kvt_wire_hot_rep *)0)->ipc) == sizeof(cudaIpcMemHandle_t),
               "CUDA IPC handle size");

struct kvt_gpu {
    void *pool;    /* the warm pool, registered for DMA (cudaHostRegister) */
    void *scratch; /* device: ids, slot pointers, layer bases */
};

bool kvt_gpu_built(void)
{
    return true;
}

int kvt_gpu_ipc_open(const void *handle, size_t len, int device, void **base)
{
    cudaIpcMemHandle_t hd;
    void *p = NULL;
    int cur = 0;
    cudaError_t e;

    if (len != sizeof(hd))
        return -EINVAL;
    memcpy(&hd, handle, sizeof(hd));
    if (cudaGetDevice(&cur) != cudaSuccess || cudaSetDevice(device) != cudaSuccess)
        return -ENODEV;
    e = cudaIpcOpenMemHandle(&p, hd, cudaIpcMemLazyEnablePeerAccess);
    cudaSetDevice(cur); /* the caller's current device is left as it was */
    if (e != cudaSuccess)
        return -EIO;
    *base = p;
    return 0;
}

void kvt_gpu_ipc_close(void *base)
{
    cudaIpcCloseMemHandle(base);
}

/* The pool registered and the scratch buffer allocated, once per client. */
static int gpu_ready(struct kvt_gpu **gp, void *pool, uint64_t pool_bytes)
{
    size_t bytes = KVT_BATCH_MAX * (sizeof(int64_t) + sizeof(void *)) +
                   GPU_LAYERS_MAX * sizeof(void *);
    struct kvt_gpu *g;

    if (*gp)
        return 0;
    if (!(g = calloc(1, sizeof(*g))))
        return -ENOMEM;
    if (cudaHostRegister(pool, pool_bytes, cudaHostRegisterDefault) != cudaSuccess) {
        free(g);
        return -EIO;
    }
    if (cudaMalloc(&g->scratch, bytes) != cudaSuccess) {
        cudaHostUnregister(pool);
        free(g);
        return -ENOMEM;
    }
    g->pool = pool;
    *gp = g;
    return 0;
}

int kvt_gpu_move(struct kvt_gpu **gp, void *pool, uint64_t pool_bytes, bool gather,
                 const struct kvk_layout *l, const int64_t *ids, size_t m, void *const *slots,
                 const uint8_t *tiers, void *stream)
{
    cudaStream_t st = stream;
    struct kvk_layout dl;
    int64_t *d_ids;
    void **d_ptrs, **d_bases;
    void *dev[KVT_BATCH_MAX];
    int rc;

    if (l->n_layers > GPU_LAYERS_MAX)
        return -E2BIG;
    if ((rc = gpu_ready(gp, pool, pool_bytes)) < 0)
        return rc;
    d_ids = (*gp)->scratch;
    d_ptrs = (void **)(d_ids + KVT_BATCH_MAX);
    d_bases = d_ptrs + KVT_BATCH_MAX;
    /* hot slots are device memory already (the pool opened by CUDA IPC);
     * warm ones are reached through their pinned mapping */
    for (size_t i = 0; i < m; i++)
        if (tiers && tiers[i] == KVT_TIER_HOT)
            dev[i] = slots[i];
        else if (cudaHostGetDevicePointer(&dev[i], slots[i], 0) != cudaSuccess)
            return -EIO;
    if (cudaMemcpyAsync(d_ids, ids, m * sizeof(*ids), cudaMemcpyHostToDevice, st) ||
        cudaMemcpyAsync(d_ptrs, dev, m * sizeof(*dev), cudaMemcpyHostToDevice, st))
        return -EIO;
    rc = kvk_layout_upload(l, d_bases, &dl, st);
    if (rc == 0)
        rc = gather ? kvk_gather(&dl, d_ids, m, d_ptrs, st)
                    : kvk_scatter(&dl, (const void *const *)d_ptrs, d_ids, m, st);
    /* the host arrays above live on this stack frame: wait for the stream */
    if (cudaStreamSynchronize(st) != cudaSuccess && rc == 0)
        rc = -EIO;
    return rc;
}

void kvt_gpu_free(struct kvt_gpu *g)
{
    if (!g)
        return;
    cudaFree(g->scratch);
    cudaHostUnregister(g->pool);
    free(g);
}

#else /* no CUDA in this build: device pools and device caches are refused */

bool kvt_gpu_built(void)
{
    return false;
}

int kvt_gpu_ipc_open(const void *handle, size_t len, int device, void **base)
{
    (void)handle, (void)len, (void)device, (void)base;
    return -EOPNOTSUPP; /* a device pool needs a CUDA build of libkvtier */
}

void kvt_gpu_ipc_close(void *base)
{
    (void)base;
}

int kvt_gpu_move(struct kvt_gpu **gp, void *pool, uint64_t pool_bytes, bool gather,
                 const struct kvk_layout *l, const int64_t *ids, size_t m, void *const *slots,
                 const uint8_t *tiers, void *stream)
{
    (void)gp, (void)pool, (void)pool_bytes, (void)gather, (void)l, (void)ids, (void)m;
    (void)slots, (void)tiers, (void)stream;
    return -EOPNOTSUPP; /* device caches need the CUDA build's kernels */
}

void kvt_gpu_free(struct kvt_gpu *g)
{
    (void)g;
}

#endif
