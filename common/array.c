/* SPDX-License-Identifier: MIT */
/*
 * array.c - growing an array by doubling, and sizing a table to a power of
 * two: the two loops that the store, tierd and the tools each wrote again
 * (kvt_common.h has the contracts). Allocation only; no element is read.
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_common.h"

int cmn_grow(void *arrp, size_t *cap, size_t need, size_t size, size_t first)
{
    size_t n = *cap ? *cap : (first ? first : 1);
    void *arr, *p;

    if (need <= *cap)
        return 0;
    while (n < need) {
        if (n > SIZE_MAX / 2)
            return -ENOMEM;
        n *= 2;
    }
    if (n > SIZE_MAX / size)
        return -ENOMEM;
    /* arrp is the address of the caller's T *: read and written as bytes, so
     * any element type goes through one function without a cast per caller */
    memcpy(&arr, arrp, sizeof(arr));
    p = realloc(arr, n * size);
    if (!p)
        return -ENOMEM;
    memset((char *)p + *cap * size, 0, (n - *cap) * size);
    memcpy(arrp, &p, sizeof(p));
    *cap = n;
    return 0;
}

uint32_t cmn_pow2_fit(uint32_t want, uint32_t lo, uint32_t hi)
{
    uint32_t n = lo;

    while (n < want && n < hi)
        n <<= 1;
    return n;
}
