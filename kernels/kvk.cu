// SPDX-License-Identifier: MIT
/*
 * kvk.cu - GPU twin of kvk_cpu.c: a batched block copy, one thread block per
 * tier block, 16-byte vector loads where both sides are aligned. Built by
 * `make kernels` when nvcc exists; checked against the CPU reference on a
 * machine with a GPU.
 */
#include <cuda_runtime.h>
#include <stdint.h>

#include "kvk.h"

__global__ static void copy_blocks(void *const *dst, const void *const *src, size_t bytes)
{
    const uint8_t *s = (const uint8_t *)src[blockIdx.x];
    uint8_t *d = (uint8_t *)dst[blockIdx.x];

    if ((((uintptr_t)s | (uintptr_t)d | bytes) & 15) == 0) {
        const uint4 *s4 = (const uint4 *)s;
        uint4 *d4 = (uint4 *)d;

        for (size_t i = threadIdx.x; i < bytes / 16; i += blockDim.x)
            d4[i] = s4[i];
        return;
    }
    for (size_t i = threadIdx.x; i < bytes; i += blockDim.x)
        d[i] = s[i];
}

/* dst and src are device arrays of n device pointers. */
extern "C" int kvk_copy_blocks(void *const *dst, const void *const *src, size_t n,
                               size_t bytes, cudaStream_t stream)
{
    if (n == 0)
        return 0;
    copy_blocks<<<(unsigned)n, 256, 0, stream>>>(dst, src, bytes);
    return cudaGetLastError() == cudaSuccess ? 0 : -5;
}
