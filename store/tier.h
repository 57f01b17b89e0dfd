/* SPDX-License-Identifier: MIT */
/*
 * tier.h - the block store: index + warm tier + eviction, as one library.
 *
 * Holds KV blocks keyed by (namespace id, 32-byte key) in a shared-memory
 * warm pool, with reservations (put), leases (get), prefix lookups and
 * leaf-first LRU eviction between watermarks. Evicted blocks go through a
 * cold-tier interface (a no-op sink until the NVMe tier exists).
 * It knows nothing of sockets, sessions or threads: tierd calls it from one
 * thread, and names the owner of each reservation with an opaque id.
 */
#ifndef TIER_H
#define TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TIER_KEY_BYTES 32
#define TIER_NONE UINT32_MAX /* "no entry" for entry ids */

struct tier_key {
    uint8_t b[TIER_KEY_BYTES];
};

/* Where a block lives; values equal the public KVT_TIER_* codes. */
enum tier_level { TIER_L_NONE = 0, TIER_L_HOT = 1, TIER_L_WARM = 2, TIER_L_COLD = 3, TIER_L_N = 4 };

/* The tier below warm. demote() is called for each block evicted from warm,
 * before its slot is reused; data is valid only during the call. Returning
 * an error does not keep the block (warm must make room); it is counted. */
struct tier_cold_ops {
    int (*demote)(void *ctx, uint32_t ns, const struct tier_key *key, const void *data,
                  uint64_t len);
};

struct tier_cfg {
    uint64_t warm_bytes;     /* warm pool size; rounded up to the segment size */
    double high_wm;          /* evict when occupancy exceeds this fraction (0.95) */
    double low_wm;           /* ... down to this fraction (0.85) */
    bool lock_memory;        /* mlock the pool (warns and goes on unpinned if refused) */
    bool huge_pages;         /* try MFD_HUGETLB, then transparent huge pages */
    const struct tier_cold_ops *cold; /* NULL: the no-op sink */
    void *cold_ctx;
    void (*log)(void *ctx, const char *msg); /* warnings; NULL: silent */
    void *log_ctx;
};

struct tier_stats {
    uint64_t lookups, lookup_keys, lookup_hits, misses;
    uint64_t puts, put_blocks, dedup_blocks, gets, get_blocks, removes;
    uint64_t leases_active, reserved, reclaimed, cold_errors;
    uint64_t hits[TIER_L_N], bytes_in[TIER_L_N], bytes_out[TIER_L_N];
    uint64_t evictions[TIER_L_N], blocks[TIER_L_N], bytes_used[TIER_L_N];
    uint64_t bytes_capacity[TIER_L_N];
    uint64_t index_entries, index_bytes;
    bool memory_locked, huge_pages;
};

struct tier;

/* Create the store and its warm pool. Errors: -EINVAL (bad cfg), -ENOMEM,
 * or the errno of memfd_create/ftruncate/mmap. */
int tier_create(const struct tier_cfg *cfg, struct tier **out);
void tier_destroy(struct tier *t); /* NULL ok; leases and reservations die with it */

/* The warm pool: a memfd of tier_pool_bytes() bytes that clients map
 * MAP_SHARED; block offsets below are offsets into it. The fd stays owned by
 * the store. */
int tier_pool_fd(const struct tier *t);
uint64_t tier_pool_bytes(const struct tier *t);
void *tier_pool_base(const struct tier *t);
/* The slot size used for blocks of block_bytes (rounded to 4 KiB). */
uint64_t tier_slot_bytes(uint64_t block_bytes);
/* The largest block the warm pool can hold (one segment). */
uint64_t tier_block_max(const struct tier *t);

/* Prefix lookup: the number of leading keys present (committed) in ns.
 * tiers (NULL or n entries) gets each key's level. Counts hits/misses. */
size_t tier_lookup(struct tier *t, uint32_t ns, const struct tier_key *keys, size_t n,
                   uint8_t *tiers);

/* Reserve slots for keys[0..n) of ns, blocks of block_bytes, owned by
 * `owner` until committed or aborted. parent (NULL: none) is the key before
 * keys[0], for leaf-first eviction. For each key, ids[i] gets the new entry
 * id and offs[i] its pool offset, or TIER_NONE / UINT64_MAX where the key is
 * already present or reserved (dedup). Evicts if needed. All or nothing.
 * Returns the number reserved, -ENOSPC if the pool cannot make room (or all
 * TIER_RAM_CLASSES size classes are in use), -ENOMEM, or -EINVAL
 * (block_bytes 0 or larger than a segment). */
int tier_reserve(struct tier *t, uint32_t ns, uint64_t block_bytes, uint32_t owner,
                 const struct tier_key *parent, const struct tier_key *keys, size_t n,
                 uint32_t *ids, uint64_t *offs);

/* Commit (publish) the keys of ns reserved by owner among keys[0..n), in
 * order; others are skipped. block_bytes is the namespace's block size (for
 * the byte counters). Returns the number committed. */
size_t tier_commit(struct tier *t, uint32_t ns, uint64_t block_bytes, uint32_t owner,
                   const struct tier_key *keys, size_t n);

/* Drop reservations of owner: among keys (abort) or by entry ids (reclaim
 * after a client died; ids that are no longer owner's reservations, and
 * TIER_NONE, are ignored). Return the number dropped. */
size_t tier_abort(struct tier *t, uint32_t ns, uint32_t owner, const struct tier_key *keys,
                  size_t n);
size_t tier_abort_ids(struct tier *t, uint32_t owner, const uint32_t *ids, size_t n);

/* Whether entry id is still a reservation held by owner (for callers that
 * keep lists of reserved ids and prune them). */
bool tier_reserved_by(const struct tier *t, uint32_t id, uint32_t owner);

/* Lease the leading present keys: ids[i], offs[i] for i < the returned
 * count; each lease pins its block until tier_release(). block_bytes must
 * match the stored blocks' (-EINVAL otherwise). */
int tier_get(struct tier *t, uint32_t ns, uint64_t block_bytes, const struct tier_key *keys,
             size_t n, uint32_t *ids, uint64_t *offs);
/* Drop one lease on each id (from tier_get). reclaimed: count them as
 * reclaimed from a dead client. */
void tier_release(struct tier *t, const uint32_t *ids, size_t n, bool reclaimed);

/* Remove keys from the last to the first; keys with leases or resident
 * children stay. Returns the number removed. */
size_t tier_remove(struct tier *t, uint32_t ns, const struct tier_key *keys, size_t n);

/* Evict leaf-first LRU blocks until occupancy is at or below the low
 * watermark, if it is above the high one. Returns blocks evicted. */
size_t tier_maintain(struct tier *t);

void tier_stats_get(const struct tier *t, struct tier_stats *out);

/* Check every invariant of the store (parent/child counts, LRU membership
 * and links, slot ownership, counters) in O(entries). 0, or -EUCLEAN with a
 * description of the first violation in why. For tests and debugging. */
int tier_check(const struct tier *t, char *why, size_t cap);

/* Bytes of index memory per resident block, for the benchmark. */
double tier_index_bytes_per_block(const struct tier *t);

#endif /* TIER_H */
