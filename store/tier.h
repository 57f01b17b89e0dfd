/* SPDX-License-Identifier: MIT */
/*
 * tier.h - the block store's API: KV blocks keyed by (namespace, 32-byte
 * key) in up to four tiers: hot (a device pool, tier_hot.h) above warm (a
 * shared-memory pool that clients map), cold (NVMe, tier_cold.h) and remote
 * (a Redis Cluster, tier_remote.h) below. It offers reservations and
 * commits (put, durable or not), leases (get), prefix lookups with their
 * miss causes, pins and prefetch, removal, gets and lookups it drives
 * through their waits for the remote tier and the disk to one callback
 * (tier_req_*), and moves blocks between the tiers leaf-first between
 * watermarks. A slot goes back to its pool only when nothing holds it: its
 * index entry, a lease, a move in flight or a reservation.
 * It knows nothing of sockets or sessions: tierd calls it from one thread
 * (the hot and remote tiers' workers report through the poll calls below),
 * and names the owner of each reservation with an opaque id. The caller
 * opens the tiers other than warm and hands them over in struct tier_cfg.
 * A namespace is an object of the store (struct tier_ns: an id and the one
 * block size of its blocks); every call on blocks names one, and the store
 * and the block size follow from it.
 */
#ifndef TIER_H
#define TIER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_stats_list.h" /* KVT_STATS_LIST: the counters (a header of lists only) */
#include "tier_key.h"       /* tier_key, TIER_NONE, tier_level, tier_event */

struct tier_cold;   /* tier_cold.h */
struct tier_hot;    /* tier_hot.h */
struct tier_remote; /* tier_remote.h */

/* When blocks are written to the remote tier (a Redis Cluster shared by
 * every node's tierd). */
enum tier_remote_policy {
    TIER_REMOTE_WRITE_THROUGH = 0, /* every block committed into warm */
    TIER_REMOTE_ON_DEMOTION = 1,   /* a block leaving warm: written to cold by the mover,
                                      or dropped without a copy on disk */
};

/* The owner id of the store's own reservations (blocks on their way from
 * the remote tier); callers never use it for a client. */
#define TIER_OWNER_REMOTE (UINT32_MAX - 1)

/* Called from tier_poll() when a remote read (tier_get_remote) or probe
 * (tier_lookup_remote) that `waiter` waits for has finished: count is the
 * length of the leading run of its keys now committed in warm (read) or
 * present on the remote tier (probe); 0 when none, or on errors. */
typedef void (*tier_remote_fn)(void *ctx, void *waiter, int count);

/* Called from tier_poll() when a move `waiter` waits for has finished: a
 * promotion (tier_get with pending): rc 0, entry id holds verified bytes in its
 * warm slot, or negative (-EBADMSG, -EIO, -ENOENT: the block is lost; the
 * waiter's lease on it must still be released); a durable commit
 * (tier_commit_durable): rc 0, id is durable on disk, or the write's error. */
typedef void (*tier_ready_fn)(void *ctx, void *waiter, uint32_t id, int rc);

/* Which blocks the mover writes to cold as they leave warm (tier_cfg.admit):
 * an SSD's writes are its wear, and a block never read again is wear spent
 * for nothing. Durable commits, write-through, an operator's flush, and a
 * block that something below depends on (a child on disk) are written
 * whatever admission says. */
enum tier_admit {
    TIER_ADMIT_ALL = 0,    /* every block leaving warm */
    TIER_ADMIT_REUSED = 1, /* a second touch: blocks read (leased) since they were put,
                              or put again (deduplicated, or put again after the store
                              dropped them, as its memory of events says); the others
                              are dropped, counted in cold_refused */
};
/* Which warm leaf leaves first (store/tier_policy.c). Both are leaf-first:
 * a block never leaves before its children. */
enum tier_evict_policy {
    TIER_EVICT_LRU = 0,   /* least recently used */
    TIER_EVICT_KEEP = 1,  /* adaptive selective retention: when the reuse ages
                             seen (hits, and misses of blocks it dropped) say
                             that keeping a share of new chains for longer
                             finds more hits than keeping all of them briefly,
                             the rest leave first (LRU otherwise) */
    TIER_EVICT_REUSE = 2, /* a learnt reuse index per class of block (its chain's
                             turn, whether it was hit, a chain's last block):
                             the leaf that can still earn the fewest reuses
                             per slot leaves first */
    TIER_EVICT_N
};
/* The policy named s ("lru", "keep", "reuse"): 0 and *out, or -EINVAL. */
int tier_evict_policy_parse(const char *s, enum tier_evict_policy *out);
const char *tier_evict_policy_name(enum tier_evict_policy p); /* static string */

struct tier_cfg {
    uint64_t warm_bytes;     /* warm pool size; rounded up to the segment size */
    double high_wm;          /* demote/evict when occupancy exceeds this fraction (0.95) */
    double low_wm;           /* ... down to this fraction (0.85) */
    bool lock_memory;        /* mlock the pool (warns and goes on unpinned if refused) */
    bool huge_pages;         /* try MFD_HUGETLB, then transparent huge pages */
    struct tier_cold *cold;  /* the tier below warm (caller-owned; NULL: evicted
                                blocks are dropped) */
    struct tier_hot *hot;    /* the tier above warm (caller-owned; NULL: none) */
    bool write_through;      /* with cold: copy each block to cold when committed, so
                                that a warm eviction never waits to demote */
    tier_ready_fn ready;     /* completions for a caller's own waiter (tier_get,
                                tier_commit_durable with cold); a tier_req needs none */
    void *ready_ctx;
    /* observer: a block left warm (demoted or dropped); data valid during the call */
    void (*on_evict)(void *ctx, uint32_t ns, const struct tier_key *key, const void *data,
                     uint64_t len);
    void *evict_ctx;
    void (*log)(void *ctx, const char *msg); /* warnings; NULL: silent */
    void *log_ctx;
    uint32_t why_events;     /* events remembered for miss attribution (0: 65536) */
    /* the remote tier (caller-owned; NULL: none). Only namespaces added to it
     * (tier_remote_ns_add) use it. Its completions for a caller's own waiter
     * (tier_get_remote, tier_lookup_remote) call remote_done with ready_ctx;
     * a tier_req needs none. */
    struct tier_remote *remote;
    enum tier_remote_policy remote_policy;
    tier_remote_fn remote_done;
    /* NVMe admission (with cold): which blocks leaving warm are written, and
     * the bytes every write to cold may take per window (0: unlimited); a
     * block admission would write but the window's budget cannot pay for is
     * dropped (cold_over_budget). Writes that are never refused (durable
     * commits, flushes, a block with children on disk) spend the budget too,
     * and may take it past its end. */
    enum tier_admit admit;
    uint64_t cold_budget_bytes;
    uint64_t cold_budget_ms;                /* the window (0: a day, 86,400,000 ms) */
    uint64_t (*clock_ms)(void *ctx);        /* the window's clock (NULL: CLOCK_MONOTONIC) */
    void *clock_ctx;
    enum tier_evict_policy evict_policy; /* warm's eviction order (0: LRU) */
    uint32_t evict_adapt_min; /* keep and reuse adapt every half a warm's worth of blocks
                                 leaving it, at least this many (0: 1,024); a small value
                                 is for tests: the store simulation's warm is too small to
                                 adapt often otherwise */
};

/* Why keys missed, by cause: an event above (index = enum tier_event;
 * TIER_EV_NONE: never stored or forgotten), or one of these. */
enum {
    TIER_MISS_WRITING = TIER_EV_N,  /* being written by a client, not committed yet */
    TIER_MISS_BROKEN = TIER_EV_N + 1, /* present, but a block before it in the chain is not */
    TIER_MISS_N = TIER_EV_N + 2,
};

struct tier_misses {
    uint64_t cause[TIER_MISS_N];
    uint64_t evicted_age_ms; /* sum over DROPPED and EVICTED misses of the time since */
};

/* One key's story (tierctl why). */
struct tier_story {
    bool present;         /* committed: level says where */
    bool writing;         /* reserved by a client, not committed yet */
    uint8_t level;        /* TIER_L_* when present */
    bool on_disk;         /* present with a durable copy */
    bool chain_ok;        /* present and its parent (if known) present too */
    uint32_t leases;      /* getters holding it now */
    bool moving;          /* present, its bytes being copied between tiers (to or from
                             disk, to or from hot) */
    bool held;            /* present, and held on disk for a durable commit not
                             answered yet (the disk evicts other blocks first) */
    uint8_t event;        /* absent: enum tier_event (TIER_EV_NONE: nothing known) */
    uint8_t event_level;  /* the tier it left */
    uint64_t event_age_ms;
};

/* The store's counters: every STORE and TIERS entry of kvt_stats_list.h's
 * KVT_STATS_LIST (tierd copies them into kvt_stats by name), the per-tier
 * ones as arrays indexed by TIER_L_*, then the store's own figures, which
 * are not on the wire. remote_hits counts the blocks read back into warm,
 * verified and used (in the leading run of their request); remote_errors
 * includes writes skipped because the remote tier fell behind. */
#define TIER_STATS_TIER_(name, type, metric, help, remote) uint64_t name[TIER_L_N];
#define TIER_STATS_STORE_(name) uint64_t name;
#define TIER_STATS_TIERD_(name)
#define TIER_STATS_TIERS_(name) KVT_TIER_STATS_LIST(TIER_STATS_TIER_)
#define TIER_STATS_FIELD_(src, name, type, metric, help) TIER_STATS_##src##_(name)

struct tier_stats {
    KVT_STATS_LIST(TIER_STATS_FIELD_)
    uint64_t pinned_blocks;  /* blocks pinned by pinning lookups, ever */
    uint64_t cold_errors;    /* demotions or promotions that failed */
    bool memory_locked, huge_pages; /* the warm pool's */
};

struct tier;

struct tier_cold_cfg;   /* tier_cold.h */
struct tier_hot_cfg;    /* tier_hot.h */
struct tier_remote_cfg; /* tier_remote.h */

/* The store with the tiers it owns, in one call. */
struct tier_open_cfg {
    struct tier_cfg store;                /* warm, watermarks, callbacks; its cold, hot and
                                             remote are ignored: tier_open sets them */
    const struct tier_cold_cfg *cold;     /* NULL: no cold tier */
    const struct tier_remote_cfg *remote; /* NULL: no remote tier */
    const struct tier_hot_cfg *hot;       /* NULL: no hot tier */
};

/* What tier_open could not open (*failed). */
enum tier_part { TIER_PART_COLD = 1, TIER_PART_REMOTE, TIER_PART_HOT, TIER_PART_WARM };

/* Open the tiers cfg names (cold, remote, hot), then the store over them,
 * which owns them from then on: tier_close closes them in the order their
 * callbacks need. On an error whatever was opened is closed again, and
 * *failed (NULL: not wanted) says which part failed, with the errors of
 * tier_cold_open, tier_remote_open, tier_hot_open or tier_create. */
int tier_open(const struct tier_open_cfg *cfg, struct tier **out, enum tier_part *failed);
/* Close a store from tier_open and its tiers: the cold tier first (its
 * close runs or cancels every callback, and those name the store), then
 * the remote one (cold's callbacks may queue remote writes), then hot (the
 * remote's callbacks may start copies up), then the store. NULL ok. */
void tier_close(struct tier *t);
/* The tiers of a store (NULL: none), borrowed: valid until tier_close. */
struct tier_cold *tier_cold_of(const struct tier *t);
struct tier_hot *tier_hot_of(const struct tier *t);
struct tier_remote *tier_remote_of(const struct tier *t);

/* Create the store and its warm pool over tiers the caller opened and
 * closes (cold first, then remote and hot, then tier_destroy: see
 * tier_close). Errors: -EINVAL (bad cfg), -ENOMEM, or the errno of
 * memfd_create/ftruncate/mmap. */
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

/* ---- namespaces ----------------------------------------------------------
 *
 * A namespace of a store: an id (the index's, and the cold index's on disk:
 * tierd takes it from tier_cold_ns_id when it has a cold tier, so that it
 * names the same model after a restart) and the size of every block in
 * it. The store owns it:
 * it stays valid, and open, until tier_close / tier_destroy (a purge
 * empties it, and it stays open); nobody else frees it. Blocks the store
 * indexed from disk at start (tier_load_cold) carry only their id: they
 * are reached once their namespace is opened, and one written at another
 * size is never served as this one (the cold tier checks each record's
 * length: tier_get's -EINVAL).
 */
struct tier_ns;

/* Open namespace id of t with blocks of block_bytes, or find it open:
 * *out gets the store's object. Idempotent for the same id and size.
 * 0; -EEXIST when id is open with another block size; -EINVAL when
 * block_bytes is 0 or its slot over tier_block_max(t); -ENOMEM. */
int tier_ns_open(struct tier *t, uint32_t id, uint64_t block_bytes, struct tier_ns **out);
/* Namespace id of t if open, else NULL (borrowed, as tier_ns_open's).
 * O(namespaces open): callers keep the pointer. */
struct tier_ns *tier_ns_find(const struct tier *t, uint32_t id);
uint32_t tier_ns_id(const struct tier_ns *ns);
uint64_t tier_ns_block_bytes(const struct tier_ns *ns);
struct tier *tier_ns_store(const struct tier_ns *ns); /* the store it belongs to */

/* Prefix lookup: the number of leading keys present (committed) in ns.
 * tiers (NULL or n entries) gets each key's level. Counts hits/misses. */
size_t tier_lookup(struct tier_ns *ns, const struct tier_key *keys, size_t n, uint8_t *tiers);
/* tier_lookup that also adds to *why the cause of each missed key (every
 * key after the leading run): what last happened to it, or that it is
 * present behind a missing block (a broken chain). */
size_t tier_lookup_why(struct tier_ns *ns, const struct tier_key *keys, size_t n,
                       uint8_t *tiers, struct tier_misses *why);

/* Add to *why the cause of each miss among keys[0..n) (keys[0] missing,
 * the others behind it), as tier_lookup_why does, without counting a
 * lookup (for callers that count one themselves: tierd's remote lookups). */
void tier_miss_why(struct tier_ns *ns, const struct tier_key *keys, size_t n,
                   struct tier_misses *why);

/* What the store knows of (ns, key) now. */
void tier_story_get(struct tier_ns *ns, const struct tier_key *key, struct tier_story *out);

/* Reserve slots for keys[0..n) of ns (blocks of its size), owned by
 * `owner` until committed or aborted. parent (NULL: none) is the key before
 * keys[0], for leaf-first eviction. For each key, ids[i] gets the new entry
 * id and offs[i] its pool offset, or TIER_NONE / UINT64_MAX where the key is
 * already present or reserved (dedup). Evicts if needed: blocks already on
 * disk leave warm; blocks that are not are never dropped while the cold tier
 * can take them (a tiering store demotes before it drops). All or nothing.
 * Returns the number reserved; -EAGAIN when warm is full of blocks on their
 * way to disk (the mover is asked to make room: retry once a completion
 * landed); -ENOSPC if the pool cannot make room (everything is leased,
 * reserved or moving, or all TIER_RAM_CLASSES size classes are in use);
 * or -ENOMEM. */
int tier_reserve(struct tier_ns *ns, uint32_t owner, const struct tier_key *parent,
                 const struct tier_key *keys, size_t n, uint32_t *ids, uint64_t *offs);

/* Commit as tier_commit, then make every key of the batch durable in the
 * cold tier, whoever wrote it: ids[0..*pending) (room for n) are the blocks
 * waited for, each reported to waiter by the ready callback when durable
 * (rc 0) or not (a write error; -ENODATA: the other writer of a deduplicated
 * key aborted). A block in hot is copied down and written; a key another
 * client is still writing is waited for; a write the disk's queue has no
 * room for waits in the store, started by a later tier_maintain() (the
 * caller keeps calling it, as tierd does after every turn), so this never
 * waits for the disk. Returns the number committed,
 * -EOPNOTSUPP without a cold tier, -ENODATA when a key of the batch is not
 * stored (deduplicated at reserve against a block that was dropped or
 * aborted since: put it again), or the error that kept a write from
 * starting (-ENOSPC, -EIO, -ENOMEM). On an error, writes already started
 * still report to waiter. */
int tier_commit_durable(struct tier_ns *ns, uint32_t owner, const struct tier_key *keys,
                        size_t n, void *waiter, uint32_t *ids, uint32_t *pending);

/* tier_reserve in the hot tier: offs are offsets in the device pool, where
 * the engine writes the blocks (device to device); tier_commit publishes
 * them. -ENOSPC when the hot pool is full (its mover makes room in the
 * background), -EOPNOTSUPP without a hot tier, -EINVAL when ns's blocks
 * are larger than a segment of the hot pool. */
int tier_reserve_hot(struct tier_ns *ns, uint32_t owner, const struct tier_key *parent,
                     const struct tier_key *keys, size_t n, uint32_t *ids, uint64_t *offs);

/* Commit (publish) the keys of ns reserved by owner among keys[0..n), in
 * order; others are skipped. Returns the number committed. */
size_t tier_commit(struct tier_ns *ns, uint32_t owner, const struct tier_key *keys, size_t n);

/* Drop reservations of owner: among keys (abort) or by entry ids (reclaim
 * after a client died; ids that are no longer owner's reservations, and
 * TIER_NONE, are ignored). Return the number dropped. */
size_t tier_abort(struct tier_ns *ns, uint32_t owner, const struct tier_key *keys, size_t n);
size_t tier_abort_ids(struct tier *t, uint32_t owner, const uint32_t *ids, size_t n);

/* Whether entry id is still a reservation held by owner (for callers that
 * keep lists of reserved ids and prune them). */
bool tier_reserved_by(const struct tier *t, uint32_t id, uint32_t owner);

/* Flags of tier_get and tier_prefetch. */
#define TIER_GET_HOT 0x1u     /* the caller reads the hot pool: blocks in hot are leased
                                 in place (offs in the hot pool, tiers[i] TIER_L_HOT)
                                 instead of being copied down to warm for it */
#define TIER_GET_PROMOTE 0x2u /* copy the blocks up into hot once their leases are
                                 back (and a cold one once it is read), where hot has
                                 room below its high watermark */

/* A get: what it asks, and where its answer goes (arrays of n entries, the
 * caller's). */
struct tier_get_args {
    struct tier_ns *ns;          /* the namespace (and the store) of keys */
    const struct tier_key *keys;
    size_t n;
    unsigned flags;              /* TIER_GET_* */
    uint32_t *ids;               /* lease handles */
    uint64_t *offs;              /* where each leased block is (the pool tiers[] names) */
    uint8_t *tiers;              /* NULL, or TIER_L_HOT / TIER_L_WARM per leased block */
    void *waiter;                /* told of each block on its way (the ready callback) */
    uint32_t *pending;           /* NULL: the caller cannot wait, and the run stops at a
                                    block not in warm (or hot, with TIER_GET_HOT); else
                                    gets the count of blocks on their way */
};

/* Lease the leading present keys: ids[i], offs[i] for i < the returned
 * count; each lease pins its block until tier_release(). ids are lease
 * handles: the entry id, with TIER_LEASE_HOT set on a lease of the hot copy
 * in place (TIER_GET_HOT), which pins that hot slot until released even if
 * the block moves meanwhile. With pending, blocks only on disk (or in hot,
 * for a warm reader) are leased too: each starts (or joins) a read or copy
 * into a fresh warm slot, and counts in *pending; its offs[i] is valid once
 * the ready callback reported it for waiter (any number of getters may wait
 * for one move). The run stops at a key absent or that cannot be moved now.
 * Returns the run's length (pending included), or -EINVAL for a block
 * stored at another size than ns's (one on disk from before a restart:
 * after a wait has started for the caller, the run before it instead). */
#define TIER_LEASE_HOT 0x80000000u
#define TIER_LEASE_ID(h) ((h) & ~TIER_LEASE_HOT)
int tier_get(const struct tier_get_args *a);

/* Start promoting the cold blocks of the leading run of keys (lookup's
 * prefetch): a later get finds them in warm or joins the read. With
 * TIER_GET_PROMOTE, the run's blocks also go on up into hot (warm ones at
 * once, cold ones once read). Returns the number of reads started. */
size_t tier_prefetch(struct tier_ns *ns, const struct tier_key *keys, size_t n, unsigned flags);

/* Pin the leading run of keys (a pinning lookup): each block is held as a
 * leased one is, evicted from no tier (the disk included), until
 * tier_release(ids, count). Cold blocks are read into warm as by
 * tier_prefetch (flags alike); one that finds no room stays pinned on disk.
 * ids: room for n. Returns the number pinned. */
size_t tier_pin(struct tier_ns *ns, const struct tier_key *keys, size_t n, unsigned flags,
                uint32_t *ids);

/* Whether the block of lease handle h holds its bytes where the lease
 * points now (in hot, in place, or in warm: not still on its way). */
bool tier_ready(const struct tier *t, uint32_t h);

/* The waiter is gone (its client died): no ready (or remote_done) callback
 * will name it. */
void tier_forget_waiter(struct tier *t, void *waiter);
/* Stop telling waiter of anything, as tier_forget_waiter, but what it
 * started goes on: writes a durable commit queued (behind a copy from hot,
 * or for a full disk queue) still start, told to nobody. For a commit that
 * stops waiting while its client stays. */
void tier_detach_waiter(struct tier *t, void *waiter);

/* The cold tier's event fd for an epoll loop (-1 without a cold tier), and
 * the call that delivers its completions (demotions land, promotions call
 * the ready callback). wait: block until at least one completes. */
int tier_event_fd(const struct tier *t);
int tier_hot_fd(const struct tier *t); /* the hot tier's (-1 without one) */
int tier_remote_fd(const struct tier *t); /* the remote tier's (-1 without one) */
int tier_poll(struct tier *t, bool wait);

/* Start reading from the remote tier the keys that follow the leading run
 * of keys[0..n) present here: each absent key, up to the first one that is
 * not (or that finds no slot), gets a warm slot reserved under
 * TIER_OWNER_REMOTE, and one pipelined read fills them. When it lands, the
 * leading run of verified blocks is committed (a normal warm block from
 * then on), the rest given back, and remote_done tells waiter (NULL:
 * nobody; e.g. a prefetch) how many. Returns the keys being read (0: none
 * to read, no remote tier, or ns not on it), or the remote's error. */
int tier_get_remote(struct tier_ns *ns, const struct tier_key *keys, size_t n, void *waiter);

/* Ask the remote tier which of keys[0..n) of ns it holds; remote_done
 * tells waiter the length of the leading run present. Returns n when
 * asked, 0 without a remote tier (or ns not on it), or an error. */
int tier_lookup_remote(struct tier_ns *ns, const struct tier_key *keys, size_t n,
                       void *waiter);

/* ---- requests the store drives to their end ----------------------------
 *
 * A get or a lookup that may wait: first for the remote tier (a get for
 * the blocks that miss here, read into warm; a lookup for whether it holds
 * the keys after the local run), then, a get, for the disk (blocks on
 * their way into warm); or a durable commit, which waits for its writes
 * (tier_commit_durable). The caller submits it once; the store drives every
 * wait and calls done once with the result: from tier_req_submit itself
 * when nothing is to be waited for, else from tier_poll when the last wait
 * ends, or from tier_req_expire at a bound. A caller keeps one request per
 * context that has one request at a time (a client session) and submits
 * into it again and again: a waiting request allocates nothing.
 */
struct tier_req;

enum tier_req_op { TIER_REQ_GET = 1, TIER_REQ_LOOKUP = 2, TIER_REQ_COMMIT = 3 };

struct tier_req_args {
    enum tier_req_op op;
    struct tier_ns *ns;          /* a namespace of the request's store */
    const struct tier_key *keys; /* n keys, borrowed for the call (copied to wait) */
    uint32_t n;                  /* at most the request's cap */
    unsigned flags;              /* get: TIER_GET_* */
    uint32_t owner;              /* commit: whose reservations are committed */
    uint32_t remote_ms;          /* get, lookup: the wait for the remote tier, at most
                                    (0: not asked) */
    uint32_t deadline_ms;        /* get, commit: the wait for the disk, at most, from when
                                    it starts (0: no bound) */
};

/* A request's outcome, valid during the done call only. */
struct tier_req_res {
    enum tier_req_op op;
    int rc;                      /* get: blocks leased, a leading run (>= 0), or an error
                                    (-EINVAL: tier_get's); lookup: the leading hits, the
                                    remote's too;
                                    commit: the blocks committed (0 on an error of
                                    the call's) */
    int err;                     /* commit: its first error (0: every block durable), the
                                    call's or a write's; -EAGAIN when its bound passed */
    uint32_t n;                  /* keys asked */
    uint32_t remote;             /* lookup: of the hits, those found on the remote tier
                                    (their tiers[] say TIER_L_COLD: a get waits for them) */
    bool late;                   /* get: its disk bound passed with blocks still on their
                                    way (the run stops at the first of them); commit: with
                                    writes not landed (they go on, told to nobody) */
    const uint32_t *ids;         /* get: rc lease handles, the caller's from now on (it
                                    tier_release()s them) */
    const uint64_t *offs;        /* get: their offsets (in the pool tiers[] names) */
    const uint8_t *tiers;        /* get: rc entries, TIER_L_HOT or TIER_L_WARM; lookup: n
                                    entries, each key's level */
    const struct tier_key *keys; /* the n keys asked */
};

typedef void (*tier_req_fn)(void *user, const struct tier_req_res *res);

/* A request of t for up to cap keys, whose results go to done(user, ...).
 * 0, or -EINVAL (cap 0), -ENOMEM. Destroy it before t (NULL ok): one in
 * flight is cancelled first (tier_req_cancel). */
int tier_req_create(struct tier *t, uint32_t cap, tier_req_fn done, void *user,
                    struct tier_req **out);
void tier_req_destroy(struct tier_req *r);

/* Start r on a (see above): 0, and done is called exactly once, perhaps
 * before this returns; or, with no call, -EBUSY (r is in flight), -E2BIG
 * (n over cap), -EINVAL (an unknown op, or a->ns not of r's store). */
int tier_req_submit(struct tier_req *r, const struct tier_req_args *a);

/* When r's wait now under way ends at the latest (CLOCK_MONOTONIC ms; 0:
 * no bound, or nothing waits). A wait that follows (the disk after the
 * remote tier) always ends later. */
uint64_t tier_req_bound(const struct tier_req *r);
/* At now_ms (CLOCK_MONOTONIC ms): end r's wait if its bound passed (the
 * remote tier's: the get goes on from the local tiers, the lookup is done
 * without it; the disk's: done with the blocks in warm by then, late; the
 * reads go on, for the next get). Returns tier_req_bound() after. */
uint64_t tier_req_expire(struct tier_req *r, uint64_t now_ms);
/* Whether r is in flight (submitted, done not called yet). */
bool tier_req_busy(const struct tier_req *r);
/* The blocks r's last commit committed, known once submit returned (its
 * count in tier_commit_durable's return; 0 on its error). */
uint32_t tier_req_committed(const struct tier_req *r);
/* Stop r with no call (its caller goes): the leases of a get waiting for
 * the disk go back, counted as reclaimed; reads and writes started go on,
 * a commit's writes not started yet (behind a copy from hot, a full disk
 * queue, another writer) are dropped. Returns the blocks given back. */
size_t tier_req_cancel(struct tier_req *r);

/* At start: index every block of the cold tier (as cold-only entries, with
 * their chain parents, under their namespace ids: reached through each
 * namespace once opened) so that it is served at once. A block whose parent
 * never reached the disk hangs under a ghost for that parent's key: a lookup
 * reaches it again once the parent is put again. Returns the count. */
int tier_load_cold(struct tier *t);

/* At a clean stop: demote every warm block that has no cold copy yet and
 * wait until all are durable. 0 or the first error. */
int tier_flush_to_cold(struct tier *t);
/* Drop one lease on each handle (from tier_get). reclaimed: count them as
 * reclaimed from a dead client. */
void tier_release(struct tier *t, const uint32_t *ids, size_t n, bool reclaimed);

/* Remove keys from the last to the first; keys with leases or resident
 * children stay. Returns the number removed. */
size_t tier_remove(struct tier_ns *ns, const struct tier_key *keys, size_t n);

/* Remove every block of namespace ns from every tier, the disk included
 * (an operator's purge, e.g. after a model's weights changed under the
 * same name). All or nothing: -EBUSY while any block of ns is leased,
 * reserved or moving; the cold tier's error if the disk copies could not
 * be deleted. Returns the number removed. ns stays open, empty. */
int tier_purge_ns(struct tier_ns *ns);

/* An operator's flush: from now on, tier_maintain() also writes every
 * warm block with no copy on disk to the cold tier (they stay in warm),
 * a slice per call, until tier_flush_busy() turns false: every block that
 * was warm and dirty when it began is durable then (or failed, counted in
 * io_errors). Hot blocks are written once they come down. No-op without
 * a cold tier. */
void tier_flush_begin(struct tier *t);
bool tier_flush_busy(const struct tier *t);

/* Background demotion: when warm is above the high watermark, move
 * leaf-first LRU blocks out until it would be at the low one: blocks with a
 * cold copy are dropped from warm at once, others are written to cold
 * (asynchronously; their slots free when durable) or, without a cold tier,
 * dropped. Also starts the writes durable commits left waiting for room in
 * the disk's queue, the oldest first. Returns the blocks handled. */
size_t tier_maintain(struct tier *t);

void tier_stats_get(const struct tier *t, struct tier_stats *out);

/* Check every invariant of the store (parent/child counts, LRU membership
 * and links, slot ownership, each slot of its namespace's size, counters)
 * in O(entries x namespaces). 0, or -EUCLEAN with a description of the
 * first violation in why. For tests and debugging. */
int tier_check(const struct tier *t, char *why, size_t cap);

/* Bytes of index memory per resident block, for the benchmark. */
double tier_index_bytes_per_block(const struct tier *t);

/* The eviction policy's state: the share of new chains it keeps now (1.0
 * under LRU, or while keeping every chain pays best), and the policy. */
double tier_keep_share(const struct tier *t);
enum tier_evict_policy tier_evict_policy_of(const struct tier *t);
/* How many times keep or reuse adapted since the store was made (0 under lru). */
uint64_t tier_pol_adaptations(const struct tier *t);
/* Policy keep: keep this share of new chains (clamped to [0.05, 1]) until
 * the policy's next adaptation. For tests and experiments. */
void tier_keep_share_set(struct tier *t, double share);

#endif /* TIER_H */
