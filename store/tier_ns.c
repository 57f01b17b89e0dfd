/* SPDX-License-Identifier: MIT */
/*
 * tier_ns.c - the store's namespaces: one object per (id, block size),
 * made by tier_ns_open, found by id, freed with the store. The blocks
 * themselves are indexed by id (idx.c); this only says which size every
 * block of an id has in this store, so that no call carries it apart.
 * The remote tier keeps its own table of ids (tier_remote_ns_add): it sits
 * below the store and names a namespace on the cluster by its caller's
 * descriptor (tenant, model), which the store never sees.
 */
#include <errno.h>
#include <stdlib.h>

#include "kvt_common.h"
#include "tier_int.h"

struct tier_ns *tier_ns_find(const struct tier *t, uint32_t id)
{
    /* linear: namespaces are opened once each and few (tierd: at most
     * 4096 per tenant), and callers keep the pointer */
    for (size_t i = 0; i < t->nns; i++)
        if (t->nss[i]->id == id)
            return t->nss[i];
    return NULL;
}

int tier_ns_open(struct tier *t, uint32_t id, uint64_t block_bytes, struct tier_ns **out)
{
    struct tier_ns *ns = tier_ns_find(t, id);

    /* the size itself first: a slot rounded up from near 2^64 wraps to 0 */
    if (block_bytes == 0 || block_bytes > tier_block_max(t) ||
        tier_slot_bytes(block_bytes) > tier_block_max(t))
        return -EINVAL;
    if (ns) {
        /* one size per id: a block is never asked for as another size */
        if (ns->block_bytes != block_bytes)
            return -EEXIST;
        *out = ns;
        return 0;
    }
    if (CMN_GROW(&t->nss, &t->nss_cap, t->nns + 1, 8) < 0)
        return -ENOMEM;
    ns = malloc(sizeof(*ns));
    if (!ns)
        return -ENOMEM;
    /* its own allocation: the pointer callers keep survives the array's growth */
    *ns = (struct tier_ns){ .t = t, .id = id, .block_bytes = block_bytes,
                            .slot = tier_slot_bytes(block_bytes) };
    t->nss[t->nns++] = ns;
    *out = ns;
    return 0;
}

uint32_t tier_ns_id(const struct tier_ns *ns) { return ns->id; }
uint64_t tier_ns_block_bytes(const struct tier_ns *ns) { return ns->block_bytes; }
struct tier *tier_ns_store(const struct tier_ns *ns) { return ns->t; }

void tier_ns_free_all(struct tier *t)
{
    for (size_t i = 0; i < t->nns; i++)
        free(t->nss[i]);
    free(t->nss);
    t->nss = NULL;
    t->nns = t->nss_cap = 0;
}
