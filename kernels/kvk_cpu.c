/* SPDX-License-Identifier: MIT */
/*
 * kvk_cpu.c - CPU reference of the kernels in kvk.cu: same arguments,
 * same results, used where there is no GPU and as the tests' oracle.
 */
#include <errno.h>
#include <string.h>

#include "kvk.h"

int kvk_copy_blocks_ref(void *const *dst, const void *const *src, size_t n, size_t bytes)
{
    if (n && (!dst || !src))
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        memcpy(dst[i], src[i], bytes);
    return 0;
}
