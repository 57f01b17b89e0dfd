/* SPDX-License-Identifier: MIT */
/*
 * kvk.h - movers between an engine's KV memory and tier blocks.
 *
 * For now one primitive: a batched block copy (n blocks of `bytes` each,
 * from src[i] to dst[i]), the building block of gather/scatter. The CPU
 * reference (kvk_cpu.c) has the exact semantics the CUDA twin (kvk.cu)
 * implements on a stream. Uses nothing else of kvtier.
 */
#ifndef KVK_H
#define KVK_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Copy n blocks of bytes each: dst[i] <- src[i]. Blocks must not overlap.
 * Returns 0, or -EINVAL for NULL arrays with n > 0. */
int kvk_copy_blocks_ref(void *const *dst, const void *const *src, size_t n, size_t bytes);

#ifdef __cplusplus
}
#endif
#endif /* KVK_H */
