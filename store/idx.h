/* SPDX-License-Identifier: MIT */
/*
 * idx.h - the in-memory block index: (namespace, key) -> entry.
 *
 * A chained hash table over a growable array of fixed-size entries, so that
 * an entry is named by a 32-bit id and costs well under 128 bytes. It only
 * finds, inserts and deletes; the meaning of the fields (LRU links, leases,
 * children) belongs to the store (tier_chain.c and its neighbours). Not
 * thread-safe: one caller at a time.
 */
#ifndef IDX_H
#define IDX_H

#include <stddef.h>
#include <stdint.h>

#include "tier_key.h"

/* GHOST: an aborted reservation, or an interior block evicted to free a
 * segment, kept only because children still name it as
 * their parent; it has no slot, is invisible, and goes when its last child
 * does (or comes back if the key is reserved again). */
enum idx_state { IDX_FREE = 0, IDX_RESERVED = 1, IDX_COMMITTED = 2, IDX_GHOST = 3 };

/* One block. Ids (uint32_t) index the entry array; TIER_NONE is "none".
 * Ids stay below 2^31 (the array stops growing there), so the store may
 * tag the top bit of a handle (TIER_LEASE_HOT). */
struct idx_entry {
    struct tier_key key; /* block hash */
    uint32_t ns;         /* namespace id */
    uint32_t hnext;      /* next id in the hash chain, or in the free list */
    uint32_t prev, next; /* LRU list links (tier_chain.c), TIER_NONE at the ends */
    uint32_t parent;     /* id of the block before this one in its chain */
    uint32_t nchild;     /* entries whose parent is this one */
    uint32_t leases;     /* outstanding gets (all of them) */
    uint32_t owner;      /* reserving client while IDX_RESERVED */
    uint64_t off;        /* offset of the slot in the warm pool (the hot one when level HOT) */
    uint64_t hoff;       /* a hot slot kept for in-place leases after the block came
                            down to warm (IDX_F_HOTKEPT) */
    uint32_t stamp;      /* tier clock at the last access (wraps; compare by difference) */
    uint32_t nwarm;      /* children whose data is in warm (level WARM) */
    uint32_t nhot;       /* children whose data is in hot (level HOT) */
    uint32_t hleases;    /* of the leases, those holding the hot copy in place
                            (TIER_GET_HOT) */
    uint8_t cls;         /* size class of the slot (of the hot pool when level HOT) */
    uint8_t hcls;        /* size class of hoff */
    uint8_t level;       /* enum tier_level: HOT (a device slot holds the data), WARM
                            (a warm slot does) or COLD (disk only) */
    uint8_t state;       /* enum idx_state */
    uint8_t pol;         /* the eviction policy's: its warm list (IDX_POL_LIST, set
                            when it is linked), and reuse's turn and had-child bit */
    uint16_t flags;      /* IDX_F_* */
};

#define IDX_F_LRU 0x1u       /* linked into its class's warm LRU list */
#define IDX_F_COLD 0x2u      /* a durable copy is in the cold tier */
#define IDX_F_DEMOTING 0x4u  /* its warm slot is being written to cold */
#define IDX_F_PROMOTING 0x8u /* its slot is being read from cold */
#define IDX_F_CLRU 0x10u     /* linked into the cold LRU list (disk-only leaves) */
#define IDX_F_HLRU 0x20u     /* linked into its class's hot LRU list */
#define IDX_F_HOTUP 0x40u    /* its warm slot is being copied up into a hot slot */
#define IDX_F_WANTHOT 0x80u  /* a getter asked for it in hot: copy it up when unleased */
#define IDX_F_HOTDOWN 0x100u /* its hot slot is being copied down into a warm slot */
#define IDX_F_HOTKEPT 0x200u /* hoff: a hot slot still held by in-place leases */
#define IDX_F_REUSED 0x400u  /* read or put again since its put: admitted to cold */
#define IDX_F_HIT 0x800u     /* leased at least once since it was committed (policy keep) */
#define IDX_F_KEEP 0x1000u   /* policy keep: kept (its class's list, not the leave-first one) */
#define IDX_POL_LIST 0x7u    /* pol: the warm list it is on, of its size class */
#define IDX_POL_TURN 0x18u   /* pol, policy reuse: its chain's turn, 1 to 3 */
#define IDX_POL_TURN_SHIFT 3
#define IDX_POL_PARENT 0x20u /* pol, policy reuse: a child was put under it once */
/* A move holds the slot: not evicted, removed or moved again meanwhile. One
 * flag per direction, so that a move in one direction is never mistaken for
 * one in another (a durable commit joins a write to disk, never a copy from
 * hot to warm). */
#define IDX_F_MOVING (IDX_F_DEMOTING | IDX_F_PROMOTING | IDX_F_HOTUP | IDX_F_HOTDOWN)
_Static_assert(sizeof(struct idx_entry) <= 104, "an index entry stays within 104 bytes");

struct idx;

/* Create an index sized for about cap_hint entries (it grows). */
int idx_create(uint32_t cap_hint, struct idx **out);
void idx_destroy(struct idx *x); /* NULL ok */

/* The id of (ns, key), or TIER_NONE. O(1) expected. */
uint32_t idx_find(const struct idx *x, uint32_t ns, const struct tier_key *key);

/* Start prefetching the bucket of (ns, key) for a later idx_find. */
void idx_prefetch(const struct idx *x, uint32_t ns, const struct tier_key *key);

/* Insert (ns, key), which must be absent; the new entry is zeroed but for
 * key, ns and links set to TIER_NONE. May move the entry array: pointers from
 * idx_at() are invalid afterwards (ids stay valid). -ENOMEM, -ENOSPC (2^32-1
 * entries). */
int idx_insert(struct idx *x, uint32_t ns, const struct tier_key *key, uint32_t *id);

/* Delete entry id; its id may be reused by the next insert. */
void idx_delete(struct idx *x, uint32_t id);

/* The entry of a live id; valid until the next idx_insert. */
static inline struct idx_entry *idx_at(const struct idx *x, uint32_t id);

uint32_t idx_count(const struct idx *x);
/* Ids in use are below this (for whole-index walks). */
uint32_t idx_id_limit(const struct idx *x);
/* Bytes of memory the index holds (entry array + buckets). */
size_t idx_mem_bytes(const struct idx *x);

/* ---- inline ---- */
struct idx_view {
    struct idx_entry *ent;
};
static inline struct idx_entry *idx_at(const struct idx *x, uint32_t id)
{
    return &((const struct idx_view *)x)->ent[id];
}

#endif /* IDX_H */
