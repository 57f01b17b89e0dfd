/* SPDX-License-Identifier: MIT */
/*
 * tier_hot_cuda.c - the hot tier's CUDA backend: a device pool from one
 * cudaMalloc, copies with cudaMemcpyAsync on the backend's own stream, and
 * completions through a stream callback that queues them for tier_hot_poll.
 * The warm pool is registered with cudaHostRegister so that copies between
 * it and the device are DMA, not staged. Compiled only with KVT_HAVE_CUDA
 * (the Makefile sets it when the CUDA toolkit is present); checked on a
 * machine with a GPU by tests/gpu/run.sh.
 */
#ifdef KVT_HAVE_CUDA
#include <cuda_runtime.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tier_hot_int.h"

struct hot_cuda {
    int device;
    uint8_t *pool;          /* device memory */
    cudaStream_t stream;    /* all copies, in order */
    struct hot_done *done;  /* where completions go */
    void *registered;       /* host range registered, to unregister */
};

static int cuda_err(cudaError_t e)
{
    return e == cudaSuccess ? 0 : e == cudaErrorMemoryAllocation ? -ENOMEM : -EIO;
}

/* Runs on CUDA's callback thread: no CUDA calls here, only the queue. */
static void CUDART_CB on_copied(cudaStream_t stream, cudaError_t status, void *data)
{
    struct hot_op *op = data;

    (void)stream;
    hot_done_push(op->q, op, status == cudaSuccess ? 0 : -EIO);
}

int hot_cuda_open(int device, uint64_t bytes, struct hot_done *q, void **ctx, char *why,
                  size_t why_len)
{
    struct hot_cuda *c;
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);

    if (e != cudaSuccess || n <= device || device < 0) {
        snprintf(why, why_len, "%s", e != cudaSuccess ? cudaGetErrorString(e)
                                                      : "no device with that ordinal");
        return -ENODEV;
    }
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    c->device = device;
    c->done = q;
    e = cudaSetDevice(device);
    if (e == cudaSuccess)
        e = cudaMalloc((void **)&c->pool, bytes);
    if (e == cudaSuccess)
        e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        snprintf(why, why_len, "%s", cudaGetErrorString(e));
        if (c->pool)
            cudaFree(c->pool);
        free(c);
        return cuda_err(e);
    }
    *ctx = c;
    return 0;
}

void hot_cuda_close(void *ctx)
{
    struct hot_cuda *c = ctx;

    cudaStreamSynchronize(c->stream);
    cudaStreamDestroy(c->stream);
    if (c->registered)
        cudaHostUnregister(c->registered);
    cudaFree(c->pool);
    free(c);
}

int hot_cuda_register(void *ctx, void *base, uint64_t len)
{
    struct hot_cuda *c = ctx;
    cudaError_t e = cudaHostRegister(base, len, cudaHostRegisterDefault);

    if (e != cudaSuccess)
        return cuda_err(e);
    c->registered = base;
    return 0;
}

int hot_cuda_export(void *ctx, int *device, uint8_t *ipc)
{
    struct hot_cuda *c = ctx;
    cudaIpcMemHandle_t hd;
    cudaError_t e = cudaIpcGetMemHandle(&hd, c->pool);

    _Static_assert(sizeof(hd) == TIER_HOT_IPC_BYTES, "CUDA IPC handle size");
    if (e != cudaSuccess)
        return cuda_err(e);
    memcpy(ipc, &hd, sizeof(hd));
    *device = c->device;
    return 0;
}

int hot_cuda_copy(void *ctx, bool to_device, uint64_t dev_off, void *host, uint64_t len,
                  struct hot_op *op)
{
    struct hot_cuda *c = ctx;
    cudaError_t e;

    if (to_device)
        e = cudaMemcpyAsync(c->pool + dev_off, host, len, cudaMemcpyHostToDevice, c->stream);
    else
        e = cudaMemcpyAsync(host, c->pool + dev_off, len, cudaMemcpyDeviceToHost, c->stream);
    if (e != cudaSuccess)
        return cuda_err(e);
    op->q = c->done;
    /* cudaStreamAddCallback, unlike cudaLaunchHostFunc, reports the stream's
     * error status to the callback: a failed copy becomes -EIO, not silence */
    e = cudaStreamAddCallback(c->stream, on_copied, op, 0);
    if (e != cudaSuccess) {
        cudaStreamSynchronize(c->stream);
        return cuda_err(e);
    }
    return 0;
}
#endif /* KVT_HAVE_CUDA */
