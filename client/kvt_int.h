/* SPDX-License-Identifier: MIT */
/*
 * kvt_int.h - what libkvtier's own files share and engines never see:
 * the hybrid namespaces of kvt_hybrid.c ride on kvt_client.c's handles,
 * and kvt_gpu.c holds everything that touches the CUDA runtime.
 */
#ifndef KVT_INT_H
#define KVT_INT_H

#include <stdbool.h>

#include "kvtier.h"

struct kvt_hybrid;

/* kvt_client.c: a namespace handle with no daemon namespace of its own,
 * standing for the groups of hy (owned by it from now on, freed with the
 * client). NULL when out of memory (hy is then the caller's). */
kvt_ns *kvt_ns_new_hybrid(kvt_client *c, struct kvt_hybrid *hy);
/* The hybrid state of ns, or NULL for a plain namespace. */
struct kvt_hybrid *kvt_ns_hybrid(const kvt_ns *ns);

/* kvt_hash.c: SHA-256 of the concatenation of parts[0..n) (lens[i] bytes
 * each) into out. Returns 0, -ENOMEM or -EIO. */
int kvt_sha256_parts(const void *const *parts, const size_t *lens, size_t n, kvt_key *out);

/* kvt_hybrid.c */
void kvt_hybrid_free(struct kvt_hybrid *hy);
void kvt_hybrid_set_deadline(struct kvt_hybrid *hy, uint32_t ms);
int kvt_hybrid_lookup(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags,
                      uint8_t *tiers);

/* kvt_gpu.c: the CUDA runtime, behind one file. Without CUDA in the build,
 * kvt_gpu_built is false and the rest answers -EOPNOTSUPP. */
struct kvt_gpu; /* a client's device state: the pool registered, a scratch buffer */
bool kvt_gpu_built(void);
/* Open a hot pool's CUDA IPC handle (len bytes) on device: 0 with *base,
 * -EINVAL (a handle of the wrong size), -ENODEV, -EIO. The caller's current
 * device is left as it was. */
int kvt_gpu_ipc_open(const void *handle, size_t len, int device, void **base);
void kvt_gpu_ipc_close(void *base);
/* Gather (engine -> slots) or scatter m blocks between the device cache of
 * l and pool slots on stream, and wait for it. *g is made on first use
 * (pool[0..pool_bytes) registered for DMA, a scratch buffer allocated) and
 * freed by kvt_gpu_free. tiers[i] == KVT_TIER_HOT: slot i is device memory
 * already. ids were checked on the host. 0, -E2BIG, -ENOMEM, -EIO. */
int kvt_gpu_move(struct kvt_gpu **g, void *pool, uint64_t pool_bytes, bool gather,
                 const struct kvk_layout *l, const int64_t *ids, size_t m, void *const *slots,
                 const uint8_t *tiers, void *stream);
/* Unregister the pool and free the scratch; NULL is fine. */
void kvt_gpu_free(struct kvt_gpu *g);

#endif /* KVT_INT_H */
