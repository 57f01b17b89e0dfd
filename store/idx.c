/* SPDX-License-Identifier: MIT */
/*
 * idx.c - chained hash index over an array of entries.
 *
 * Keys are SHA-256 outputs, already uniform, so the bucket is taken from
 * the key's first 8 bytes mixed with the namespace id; no further hashing.
 * Buckets hold the head id of a singly linked chain through idx_entry.hnext.
 * The table doubles when entries outnumber buckets (load factor <= 1), and
 * the entry array doubles when full; freed entries go on a free list
 * threaded through hnext. Memory per entry: sizeof(idx_entry) plus about
 * 4-8 bytes of bucket.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "idx.h"
#include "kvt_common.h"

struct idx {
    struct idx_entry *ent; /* must stay first: idx_at() reads it (idx.h) */
    uint32_t cap;          /* entries allocated */
    uint32_t used;         /* high-water mark of ids handed out */
    uint32_t count;        /* live entries */
    uint32_t free_head;    /* free list through hnext */
    uint32_t *bucket;      /* head id per bucket, TIER_NONE when empty */
    uint32_t mask;         /* buckets - 1 (a power of two) */
};

static inline uint32_t slot_of(const struct idx *x, uint32_t ns, const struct tier_key *key)
{
    uint64_t h;

    memcpy(&h, key->b, sizeof(h));
    h ^= (uint64_t)ns * 0x9e3779b97f4a7c15ull;
    h ^= h >> 29;
    return (uint32_t)h & x->mask;
}

static inline int same(const struct idx_entry *e, uint32_t ns, const struct tier_key *key)
{
    return e->ns == ns && memcmp(e->key.b, key->b, TIER_KEY_BYTES) == 0;
}

static uint32_t *new_buckets(uint32_t n)
{
    uint32_t *b = malloc((size_t)n * sizeof(*b));

    if (b)
        memset(b, 0xff, (size_t)n * sizeof(*b)); /* TIER_NONE everywhere */
    return b;
}

int idx_create(uint32_t cap_hint, struct idx **out)
{
    struct idx *x = calloc(1, sizeof(*x));
    uint32_t n = cmn_pow2_fit(cap_hint, 1024, 1u << 31);

    if (!x)
        return -ENOMEM;
    x->ent = malloc((size_t)n * sizeof(*x->ent));
    x->bucket = new_buckets(n);
    if (!x->ent || !x->bucket) {
        idx_destroy(x);
        return -ENOMEM;
    }
    x->cap = n;
    x->mask = n - 1;
    x->free_head = TIER_NONE;
    *out = x;
    return 0;
}

void idx_destroy(struct idx *x)
{
    if (!x)
        return;
    free(x->ent);
    free(x->bucket);
    free(x);
}

uint32_t idx_find(const struct idx *x, uint32_t ns, const struct tier_key *key)
{
    uint32_t id = x->bucket[slot_of(x, ns, key)];

    while (id != TIER_NONE && !same(&x->ent[id], ns, key))
        id = x->ent[id].hnext;
    return id;
}

void idx_prefetch(const struct idx *x, uint32_t ns, const struct tier_key *key)
{
    __builtin_prefetch(&x->bucket[slot_of(x, ns, key)]);
}

/* Double the bucket array and relink every live entry. O(count), amortised. */
static int grow_buckets(struct idx *x)
{
    uint32_t n = (x->mask + 1) * 2;
    uint32_t *b = new_buckets(n);

    if (!b)
        return -ENOMEM;
    free(x->bucket);
    x->bucket = b;
    x->mask = n - 1;
    for (uint32_t id = 0; id < x->used; id++) {
        struct idx_entry *e = &x->ent[id];
        uint32_t s;

        if (e->state == IDX_FREE)
            continue;
        s = slot_of(x, e->ns, &e->key);
        e->hnext = b[s];
        b[s] = id;
    }
    return 0;
}

static int grow_entries(struct idx *x)
{
    uint32_t n;
    struct idx_entry *e;

    if (x->cap >= TIER_NONE / 2)
        return -ENOSPC;
    n = x->cap * 2;
    e = realloc(x->ent, (size_t)n * sizeof(*e));
    if (!e)
        return -ENOMEM;
    x->ent = e;
    x->cap = n;
    return 0;
}

int idx_insert(struct idx *x, uint32_t ns, const struct tier_key *key, uint32_t *id_out)
{
    struct idx_entry *e;
    uint32_t id, s;
    int rc;

    if (x->count >= x->mask + 1 && (rc = grow_buckets(x)) < 0)
        return rc;
    if (x->free_head != TIER_NONE) {
        id = x->free_head;
        x->free_head = x->ent[id].hnext;
    } else {
        if (x->used == x->cap && (rc = grow_entries(x)) < 0)
            return rc;
        id = x->used++;
    }
    e = &x->ent[id];
    memset(e, 0, sizeof(*e));
    e->key = *key;
    e->ns = ns;
    e->prev = e->next = e->parent = TIER_NONE;
    e->state = IDX_RESERVED; /* not IDX_FREE: the caller sets the real state */
    s = slot_of(x, ns, key);
    e->hnext = x->bucket[s];
    x->bucket[s] = id;
    x->count++;
    *id_out = id;
    return 0;
}

void idx_delete(struct idx *x, uint32_t id)
{
    struct idx_entry *e = &x->ent[id];
    uint32_t *link = &x->bucket[slot_of(x, e->ns, &e->key)];

    /* chains are ~1 long at load factor <= 1: the walk is O(1) expected */
    while (*link != id)
        link = &x->ent[*link].hnext;
    *link = e->hnext;
    e->state = IDX_FREE;
    e->hnext = x->free_head;
    x->free_head = id;
    x->count--;
}

uint32_t idx_count(const struct idx *x)
{
    return x->count;
}

uint32_t idx_id_limit(const struct idx *x)
{
    return x->used;
}

size_t idx_mem_bytes(const struct idx *x)
{
    return sizeof(*x) + (size_t)x->cap * sizeof(*x->ent) + ((size_t)x->mask + 1) * sizeof(uint32_t);
}
