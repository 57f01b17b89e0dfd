/* SPDX-License-Identifier: MIT */
/*
 * kvt_int.h - what libkvtier's own files share and engines never see:
 * the hybrid namespaces of kvt_hybrid.c ride on kvt_client.c's handles.
 */
#ifndef KVT_INT_H
#define KVT_INT_H

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

#endif /* KVT_INT_H */
