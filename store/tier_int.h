/* SPDX-License-Identifier: MIT */
/*
 * tier_int.h - the store's internals, shared by its files and never
 * installed: struct tier, the moves in flight, the entry predicates, and the
 * calls the store's files make into one another. Callers use tier.h.
 *
 * The files, one job each:
 *   tier.c              tier_open/tier_close, pools, poll, counters
 *   tier_chain.c        chains (parents, children, ghosts) and the LRU lists of leaves
 *   tier_policy.c       the eviction policy: which new chains are kept, learnt online
 *   tier_reuse.c        policy reuse: classes of blocks, their learnt reuse index
 *   tier_slot.c         warm slots and segments: room for a block now, a block leaving warm
 *   tier_move.c         moves in flight and their waiters
 *   tier_mover.c        the cold mover: demotion, flush, tier_maintain, promotion
 *   tier_admit.c        NVMe admission: which blocks leaving warm are written, the budget
 *   tier_hot_mover.c    copies between hot and warm
 *   tier_remote_moves.c writes to, reads from and probes of the remote tier
 *   tier_ns.c           namespaces: the objects for (id, block size)
 *   tier_get.c          lookups, prefetch, pins, leases
 *   tier_req.c          gets and lookups the store drives through their remote and disk waits
 *   tier_put.c          reservations, commits, aborts
 *   tier_durable.c      durable commits
 *   tier_drop.c         remove, purge, the orphan sweep
 *   tier_restart.c      indexing the disk at start, flushing warm at a clean stop
 *   tier_why.c          miss attribution: remembered events and causes
 *   tier_check.c        the invariant checker
 * One thread calls the store (tier.h), so nothing here takes a lock.
 */
#ifndef TIER_INT_H
#define TIER_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "idx.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_hot.h"
#include "tier_ram.h"
#include "tier_remote.h"
#include "tier_why.h"

struct lru {
    uint32_t head, tail; /* most / least recently used leaf of a list */
};

/* A namespace (tier.h): every block of id in this store is block_bytes in
 * a slot of slot bytes. The index keys blocks by id alone (entries carry
 * the id, not this), so blocks indexed from disk before the namespace is
 * opened are reached through it once it is. */
struct tier_ns {
    struct tier *t;       /* the store that owns it (frees it in tier_destroy) */
    uint32_t id;          /* the index's namespace id */
    uint64_t block_bytes; /* of every block (the byte counters) */
    uint64_t slot;        /* tier_slot_bytes(block_bytes): its slots' size */
};

/* The eviction policy's state (tier_policy.c, tier_reuse.c). Ages are in
 * clock ticks. */
#define TIER_POL_NB 128  /* age buckets: four per power of two */
#define TIER_POL_LISTS 7 /* warm lists per size class: lru uses 1, keep 2, reuse 7 */
struct tier_pol {
    enum tier_evict_policy kind;
    double share;                /* of new chains kept (1: all, as LRU) */
    uint32_t keep_below;         /* share as a bound on a key's first 32 bits */
    double hist[TIER_POL_NB];    /* first reuses by age (hits, and misses of dropped
                                    blocks found in ghosts), decayed */
    double vage;                 /* mean age of kept blocks leaving warm (0: none yet) */
    uint32_t left;               /* blocks that left warm since the last adaptation */
    uint64_t adaptations;        /* since the store was made */
    uint64_t *ghosts;            /* dropped blocks: key tag, reuse's class and turn, stamp */
    uint32_t gmask;              /* ghosts' slots - 1 (0: no table yet) */
    uint32_t used;               /* size classes that ever had a warm leaf (a bit each) */
    bool learnt;                 /* reuse: adapted once (until then it is LRU) */
    /* policy reuse, per class of block (tier_reuse.c) */
    double reuses[TIER_POL_LISTS][TIER_POL_NB]; /* reuses by age, decayed */
    double entered[TIER_POL_LISTS];             /* blocks that entered it, decayed */
    float index[TIER_POL_LISTS][TIER_POL_NB];   /* reuses per slot-tick still to
                                                   earn at an age (inf: unknown) */
};

/* Each size class has two LRU lists of leaves: dirty (no cold copy: leaving
 * warm means a demotion, or a loss) and clean (on disk too: leaving warm is
 * free). A slot needed right now comes from a clean leaf first. */
enum { TIER_LRU_DIRTY = 0, TIER_LRU_CLEAN = 1 };

/* One who waits for a move or a remote read: a caller's waiter (p, told
 * through cfg.ready or cfg.remote_done), or a request the store drives
 * itself (req, told inside the store: tier_req.c). One of the two is set;
 * both NULL: nobody (a detached durable commit's write). */
struct waiter {
    void *p;
    struct tier_req *req;
};

/* Who waits for a move: any number of getters and durable commits (a
 * second getter of a block being read joins the read, never misses). */
struct waiters {
    struct waiter *w;
    uint32_t n, cap;
};

/* The lists of work in flight (moves, remote ops) are doubly linked through
 * each element's prev and next, head the first element (NULL: empty):
 * O(1) to add, at the head, and to take out from anywhere. */
#define TIER_LIST_ADD(head, o)                                                             \
    do {                                                                                   \
        (o)->prev = NULL;                                                                  \
        (o)->next = (head);                                                                \
        if (head)                                                                          \
            (head)->prev = (o);                                                            \
        (head) = (o);                                                                      \
    } while (0)
#define TIER_LIST_DEL(head, o)                                                             \
    do {                                                                                   \
        if ((o)->prev)                                                                     \
            (o)->prev->next = (o)->next;                                                   \
        else                                                                               \
            (head) = (o)->next;                                                            \
        if ((o)->next)                                                                     \
            (o)->next->prev = (o)->prev;                                                   \
    } while (0)

/* A block moving between tiers (a cold or hot tier callback's context). */
struct move {
    struct tier *t;
    uint32_t id;
    bool promote;        /* cold -> warm; else warm -> cold */
    bool evict;          /* demotion by the mover: leave warm once durable */
    bool hot_down;       /* hot -> warm: the copy into warm_off */
    bool hot_up;         /* warm -> hot: the copy into hot_off */
    bool flush;          /* warm -> cold for an operator's flush */
    uint8_t warm_cls;    /* hot_down: class of the warm slot */
    uint8_t hot_cls;     /* hot_up: class of the hot slot */
    uint64_t warm_off;   /* hot_down: the warm slot being filled */
    uint64_t hot_off;    /* hot_up: the hot slot being filled */
    struct waiters ws;   /* who waits for it */
    struct waiters dws;  /* hot_down: durable commits, waiting for the write that follows */
    struct move *prev, *next; /* moves in flight (tier_forget_waiter) */
};

enum move_kind { TIER_MV_DEMOTE, TIER_MV_PROMOTE, TIER_MV_HOT_DOWN, TIER_MV_HOT_UP };

/* A durable commit waiting for a key another client is still writing. */
struct dwait {
    uint32_t id;
    struct waiter waiter;
    struct dwait *next;
};

/* Waits the store has taken off its lists for a moment (a move done whose
 * waiters are being told, waits being run, the commit call itself): they
 * still count as waits, so a durable hold of their commit lasts through
 * it. On the caller's stack, pushed and popped in turn (tier_dscope_*).
 * A waiter that leaves meanwhile becomes none in them (tier_waiter_leaves):
 * the loop that holds them is never to call it back. */
struct dscope {
    struct waiter *w; /* w[0..n) */
    uint32_t n;
    struct dwait *d;  /* and the list from d */
    struct dscope *up;
};

/* A remote read or probe in flight (tier_get_remote, tier_lookup_remote). */
struct rop {
    struct tier *t;
    struct waiter waiter; /* who waits for it (none: nobody, or forgotten) */
    bool probe;          /* EXISTS, else a read into reserved slots */
    uint32_t n;          /* keys */
    uint64_t bytes;      /* read: block bytes (counters) */
    uint32_t *ids;       /* read: the reserved entries, in chain order */
    void **bufs;         /* read: their slots */
    int *res;            /* per key, filled by the remote tier */
    struct rop *prev, *next; /* in flight (tier_forget_waiter) */
};

/* A remote write holding a lease on its block (see the design note). */
struct rput {
    struct tier *t;
    uint32_t id;
    uint64_t bytes;      /* slot bytes pinned */
    bool at_tail;        /* back on the LRU's cold end when done (on-demotion) */
};

struct tier {
    struct idx *idx;
    struct tier_ram *ram;
    /* warm leaves by size class, the policy's list (IDX_POL_LIST) and
     * TIER_LRU_DIRTY / CLEAN */
    struct lru lru[TIER_RAM_CLASSES][TIER_POL_LISTS][2];
    struct tier_pol pol;              /* the eviction policy (tier_policy.c) */
    struct lru clru;                  /* disk-only leaves, for a full disk */
    struct tier_hot *hot;             /* NULL: no tier above warm */
    struct tier_ram *hram;            /* slots of the hot pool (offsets only) */
    struct lru hlru[TIER_RAM_CLASSES]; /* hot leaves per class */
    uint64_t hot_high, hot_low;       /* hot watermarks in slot bytes */
    uint64_t hot_moving;              /* hot slot bytes whose copy to warm is in flight */
    bool hot_draining;                /* passed the high mark, not yet at the low one */
    bool warm_draining;               /* the same for warm (or hot is waiting for room) */
    uint32_t clock;                   /* bumps on every access; entries keep a stamp */
    uint64_t high_bytes, low_bytes;   /* watermarks in slot bytes */
    uint64_t demoting_bytes;          /* slot bytes whose demotion is in flight */
    struct tier_cold *cold;           /* NULL: no tier below warm */
    bool write_through;
    struct move *moves;               /* moves in flight */
    struct dwait *dwaits;             /* durable commits waiting for others' writes */
    struct dwait *dholds;             /* blocks already on disk that a durable commit
                                         vouches for: kept there until it is answered */
    struct dscope *dscopes;           /* durable waits off the lists for a moment */
    bool orphans;                     /* blocks may be unreachable: tier_maintain sweeps */
    bool room_wanted;                 /* a put found no room: the mover writes some now */
    struct tier_why *why;             /* what happened to blocks that are gone */
    bool flushing;                    /* tier_flush_begin: writing warm to disk */
    uint32_t flush_at;                /* ... the next entry id to look at */
    uint32_t flush_inflight;          /* ... its writes not durable yet */
    struct tier_remote *remote;       /* NULL: no remote tier */
    struct rop *rops;                 /* remote reads and probes in flight */
    uint64_t remote_pins;             /* leases held by remote writes */
    uint64_t remote_pinned;           /* ... their slot bytes */
    uint64_t remote_skipped;          /* writes not started: the remote fell behind */
    uint64_t remote_hits;             /* blocks read from the remote tier and committed */
    bool budget_started;              /* the cold write budget's window has begun */
    uint64_t budget_start;            /* ... at this cfg.clock_ms time */
    uint64_t budget_used;             /* bytes written to cold in it */
    bool owns_tiers;                  /* tier_open: cold, remote and hot are ours to close */
    struct tier_ns **nss;             /* namespaces open, each its own allocation */
    size_t nns, nss_cap;              /* ... how many, and room in nss */
    struct tier_cfg cfg;              /* callbacks */
    struct tier_stats st;             /* counters; gauges filled in tier_stats_get */
};

/* Demotions in flight at most: enough to keep the disk busy, few enough
 * that the cold tier's queue never refuses (it has 32 slots by default). */
#define TIER_DEMOTE_INFLIGHT 24

static inline uint8_t *tier_slot_ptr(const struct tier *t, const struct idx_entry *e)
{
    return (uint8_t *)tier_ram_base(t->ram) + e->off;
}

/* In warm with no child in warm: it may leave warm (dropped, written to
 * disk, or freed when it is on disk already). Without a cold tier leaving
 * warm means a loss, so only a block with no child at all qualifies: a
 * block with a resident child anywhere is never dropped before that child. */
static inline bool tier_warm_leaf(const struct tier *t, const struct idx_entry *e)
{
    return e->state == IDX_COMMITTED && e->level == TIER_L_WARM && e->leases == 0 &&
           e->nwarm == 0 && !(e->flags & IDX_F_MOVING) && (t->cold || e->nchild == 0);
}

/* Whether a warm block may be dropped (lost) now: nothing below it anywhere. */
static inline bool tier_droppable(const struct idx_entry *e)
{
    return e->nchild == 0 && !(e->flags & IDX_F_COLD);
}

/* Where a block counts for its parent's leaf status: warm while its bytes
 * are on their way into a warm slot too (a promotion in flight), so making
 * room for the next block of a run never takes the one before it. */
static inline bool tier_warm_res(const struct idx_entry *e)
{
    return e->state != IDX_GHOST &&
           (e->level == TIER_L_WARM || (e->flags & IDX_F_PROMOTING));
}

static inline bool tier_hot_res(const struct idx_entry *e)
{
    return e->state != IDX_GHOST && e->level == TIER_L_HOT;
}

/* In hot with no child in hot: the hot mover may copy it down to warm. */
static inline bool tier_hot_leaf(const struct idx_entry *e)
{
    return e->state == IDX_COMMITTED && e->level == TIER_L_HOT && e->leases == 0 &&
           e->nhot == 0 && !(e->flags & IDX_F_MOVING);
}

/* On disk only, and nothing depends on it: the cold tier may evict it. */
static inline bool tier_cold_leaf(const struct idx_entry *e)
{
    return e->state == IDX_COMMITTED && e->level == TIER_L_COLD && (e->flags & IDX_F_COLD) &&
           e->leases == 0 && e->nchild == 0 && !(e->flags & IDX_F_MOVING);
}

/* ---- tier.c ---- */
uint64_t tier_now_ms(void); /* CLOCK_MONOTONIC_COARSE, in ms */
/* id's data is gone for reason ev (enum tier_event), from tier lvl. */
void tier_remember(struct tier *t, uint32_t id, uint8_t ev, uint8_t lvl);

/* ---- tier_chain.c: chains and LRU lists (at_tail: the cold end) ---- */
void tier_lru_unlink(struct tier *t, uint32_t id);
/* Put id on the list it belongs to now (a warm, cold or hot leaf), or none. */
void tier_settle(struct tier *t, uint32_t id, bool at_tail);
/* A child of p went away; ghosts go with their last child, up the chain. */
void tier_child_gone(struct tier *t, uint32_t p, bool at_tail);
void tier_set_parent(struct tier *t, uint32_t id, uint32_t p);
/* id's data moved to level lvl and/or its promotion started or ended: its
 * parent's nwarm / nhot follow. */
void tier_set_res(struct tier *t, uint32_t id, uint8_t lvl, bool promoting, bool at_tail);
void tier_set_level(struct tier *t, uint32_t id, uint8_t lvl, bool at_tail);
void tier_warm_lose(struct tier *t, uint32_t id, bool at_tail); /* level COLD */
/* id's data is in no tier: delete it, or keep a ghost while named. */
void tier_forget(struct tier *t, uint32_t id, bool at_tail);
/* A ghost with no child and no lease goes; returns whether it went. */
bool tier_drop_idle_ghost(struct tier *t, uint32_t id);
/* The warm leaf that leaves first (the policy's choice); the same among
 * those on disk too; the oldest hot leaf (TIER_NONE: none). O(classes in
 * use x the policy's lists). */
uint32_t tier_pick_victim(const struct tier *t);
uint32_t tier_pick_clean(const struct tier *t);
uint32_t tier_pick_hot_victim(struct tier *t);

/* The leaf of size class cls's warm lists k that leaves first. */
uint32_t tier_lru_tail(const struct tier *t, int cls, int k);

/* ---- tier_policy.c: the eviction policy ---- */
int tier_pol_init(struct tier *t, enum tier_evict_policy kind);
void tier_pol_fini(struct tier *t);
/* id was just committed (unlinked): decide whether its chain is kept. */
void tier_pol_commit(struct tier *t, uint32_t id);
/* id is being leased (before its stamp moves; unlinks it): a reuse. */
void tier_pol_touch(struct tier *t, uint32_t id);
/* id is leaving warm (unlinked); lost: no copy stays anywhere. */
void tier_pol_left(struct tier *t, uint32_t id, bool lost);
/* A child is being put under p (tier_set_parent). */
void tier_pol_parented(struct tier *t, uint32_t p);
/* The warm list an unlinked warm leaf goes on (of its size class). */
int tier_pol_list(struct tier *t, const struct idx_entry *e);
/* How many of the lists the policy uses (lists 0 to n - 1, leaving first
 * from list 0 under lru and keep). */
int tier_pol_nlists(const struct tier *t);
/* The slot's 64-bit ghost word for e (NULL: no table), its tag in *tag. */
uint64_t *tier_pol_ghost(struct tier *t, const struct idx_entry *e, uint32_t *tag);
/* Size the ghost table for warm's blocks now. */
void tier_pol_ghosts_fit(struct tier *t);
/* Age buckets, four per power of two: ages 0-2 exactly, then x = age + 1
 * in [2^m, 2^(m+1)) split in quarters; tier_bucket_top: the largest age. */
static inline int tier_age_bucket(uint32_t age)
{
    uint64_t x = (uint64_t)age + 1;
    int m = 63 - __builtin_clzll(x);

    if (m < 2)
        return (int)x - 1;
    return 4 * m + (int)((x >> (m - 2)) & 3) - 5;
}

static inline double tier_bucket_top(int b)
{
    int m = (b + 5) / 4, q = (b + 5) % 4;

    if (b < 3)
        return b;
    return (double)((uint64_t)(5 + q) << (m - 2)) - 2;
}

/* ---- tier_reuse.c: policy reuse ---- */
void tier_reuse_commit(struct tier *t, struct idx_entry *e, struct idx_entry *parent);
void tier_reuse_touch(struct tier *t, struct idx_entry *e);
void tier_reuse_parented(struct tier *t, struct idx_entry *p);
void tier_reuse_left(struct tier *t, struct idx_entry *e, bool lost);
void tier_reuse_adapt(struct tier *t);
/* e's class now (its list when it is linked next). */
int tier_reuse_class(const struct idx_entry *e);
/* The leaf that leaves first among the size classes in cmask, lists
 * TIER_LRU_DIRTY / CLEAN in kmask: the lowest index of any class's oldest
 * and youngest leaves. */
uint32_t tier_reuse_pick(const struct tier *t, uint32_t cmask, unsigned kmask);

/* ---- tier_slot.c: slots and segments ---- */
/* Free id's warm slot now (committed, unleased, not moving): cold-only with
 * a copy on disk, else dropped. */
void tier_leave_warm(struct tier *t, uint32_t id);
/* The disk has no room for a write of len bytes: evict its least recently
 * demoted leaf, or a younger one whose space would fit the write where the
 * oldest's would not (blocks of other sizes). -ENOSPC: none. */
int tier_cold_make_room(struct tier *t, uint64_t len);
/* The oldest dirty leaf of class cls that nothing depends on, or TIER_NONE. */
uint32_t tier_dirty_droppable(struct tier *t, int cls);
/* A warm slot of class cls for entry id, now. -EAGAIN: the mover is asked
 * for room (retry after a completion); -ENOSPC: nothing can go. */
int tier_alloc_slot(struct tier *t, int cls, uint32_t id, uint64_t *off);

/* ---- tier_move.c: moves in flight ---- */
void tier_moves_add(struct tier *t, struct move *m);
/* A move's callback begins here: m leaves the moves in flight before the
 * callback changes anything (tier_move_of no longer finds it, a waiter that
 * leaves no longer edits it). Returns its block's entry. */
struct idx_entry *tier_move_landed(struct move *m);
/* id's move of kind k in flight, or NULL. O(moves in flight). */
struct move *tier_move_of(struct tier *t, uint32_t id, enum move_kind k);
/* A caller's waiter p as a struct waiter (NULL: nobody). */
static inline struct waiter tier_waiter(void *p)
{
    return (struct waiter){ .p = p };
}
static inline bool tier_waiter_same(struct waiter a, struct waiter b)
{
    return a.p == b.p && a.req == b.req;
}
int tier_wait_add(struct waiters *ws, struct waiter w); /* once; none waits for nothing */
/* A new move, a copy of init, waited for by w (none: nobody); NULL: no memory. */
struct move *tier_move_new(const struct move *init, struct waiter w);
/* Tell a move's waiters (it has left the list) its outcome, then free it. */
void tier_move_done(struct tier *t, struct move *m, int rc);
/* Tell w that block id's move ended with rc (a caller's waiter through
 * cfg.ready, a request of the store's inside it). */
void tier_notify(struct tier *t, struct waiter w, uint32_t id, int rc);
/* No callback names w any more (keep: as tier_detach_waiter). */
void tier_waiter_leaves(struct tier *t, struct waiter w, bool keep);

/* ---- tier_mover.c: the cold mover ---- */
/* Start writing id (committed, in warm, no cold copy) to cold. evict: leave
 * warm once durable; waiter: told when durable. -EBUSY: the disk's queue is
 * full. */
int tier_demote_for(struct tier *t, uint32_t id, bool evict, struct waiter w);
int tier_demote(struct tier *t, uint32_t id); /* the mover's: evict, nobody told */
/* Start reading cold-only id into a new warm slot of slot bytes. */
int tier_promote(struct tier *t, uint32_t id, uint64_t slot, struct waiter w);

/* ---- tier_admit.c: NVMe admission ---- */
enum { TIER_ADMIT = 0, TIER_REFUSE_ONCE = 1, TIER_REFUSE_BUDGET = 2 };
/* Whether warm leaf id (committed, no copy on disk) is written to cold as
 * it leaves warm: TIER_ADMIT, or why not. */
int tier_admit_verdict(struct tier *t, uint32_t id);
/* Drop refused id from warm (tier_leave_warm), counted by verdict. */
void tier_admit_refuse(struct tier *t, uint32_t id, int verdict);
/* The oldest dirty leaf of class cls if admission refuses it (*verdict
 * says why), else TIER_NONE: a slot wanted now need not wait for a write. */
uint32_t tier_admit_victim(struct tier *t, int cls, int *verdict);
/* A write of bytes to cold started: the budget's window pays for it. */
void tier_admit_spend(struct tier *t, uint64_t bytes);
/* id was just reserved: a key the store dropped or evicted before is put
 * again, a second touch (IDX_F_REUSED). */
void tier_admit_seen(struct tier *t, uint32_t id);

/* ---- tier_hot_mover.c ---- */
/* Start copying id (committed, in hot) down into a new warm slot (its
 * offset in *warm_off, NULL: not wanted). */
int tier_hot_down(struct tier *t, uint32_t id, struct waiter w, uint64_t *warm_off);
size_t tier_hot_maintain(struct tier *t); /* hot past its watermarks: copies down */
void tier_maybe_hot_up(struct tier *t, uint32_t id); /* wanted in hot and free to go up */

/* ---- tier_remote_moves.c ---- */
/* Write id's warm block to the remote tier when its namespace uses it; pin:
 * leased until written, else copied at once. */
void tier_put_remote(struct tier *t, uint32_t id, bool pin);

/* The remote tier's read (tier_get_remote) and probe (tier_lookup_remote),
 * waited for by w: what tier.h's calls do for a caller's waiter. */
int tier_remote_read(struct tier_ns *ns, const struct tier_key *keys, size_t n,
                     struct waiter w);
int tier_remote_probe(struct tier_ns *ns, const struct tier_key *keys, size_t n,
                      struct waiter w);

/* ---- tier_ns.c ---- */
void tier_ns_free_all(struct tier *t); /* tier_destroy's: every namespace goes */

/* ---- tier_get.c ---- */
/* tier_get for a waiter of either kind (a->waiter is not used; a->pending
 * NULL: nothing below warm is waited for, as there). */
int tier_get_for(const struct tier_get_args *a, struct waiter w);

/* ---- tier_req.c: requests the store drives ---- */
/* A block request r waits for landed (rc 0) or was lost; the remote tier
 * answered r (count: tier_remote_fn's). */
void tier_req_landed(struct tier_req *r, uint32_t id, int rc);
void tier_req_remote(struct tier_req *r, int count);

/* ---- tier_put.c ---- */
/* Reserve one absent (or ghost) key of ns under parent p, in hot or warm
 * (cls: the class of ns's slots in that pool). */
int tier_reserve_one(struct tier_ns *ns, int cls, bool hot, uint32_t owner, uint32_t p,
                     const struct tier_key *key, uint32_t ghost, uint32_t *id_out,
                     uint64_t *off_out);

/* ---- tier_durable.c: what durable commits wait for ---- */
/* tier_commit_durable for a waiter of either kind. */
int tier_commit_durable_for(struct tier_ns *ns, uint32_t owner,
                            const struct tier_key *keys, size_t n, struct waiter w,
                            uint32_t *ids, uint32_t *pending);
/* A hot-to-warm copy landed (rc): start the writes dws wait for. */
void tier_durable_after(struct tier *t, uint32_t id, struct waiters *dws, int rc);
bool tier_dwaits_run(struct tier *t, uint32_t id);  /* id was committed: true when a
                                                      write was refused (queue full) */
void tier_dwaits_retry(struct tier *t);             /* queues were full: again */
void tier_dwaits_fail(struct tier *t, uint32_t id, int rc); /* id will never commit */
/* Whether a durable commit waits for id (its write owed: the disk's queue
 * was full, or another client still writes it). O(waits). */
bool tier_dwaited(const struct tier *t, uint32_t id);
/* Whether a durable commit not yet answered vouches for id, on disk (there
 * when it was committed, or written for it): the disk must not evict it.
 * Exact once tier_dholds_prune has run, as the disk's walk for a victim
 * does before it. O(holds). */
bool tier_dheld(const struct tier *t, uint32_t id);
/* Every hold whose commit has no wait left in the store goes (each durable
 * commit call, and before the disk's walk for a victim). O(holds + waits). */
void tier_dholds_prune(struct tier *t);
void tier_dholds_drop(struct tier *t, struct waiter w); /* w's commit was answered */
int tier_dhold_add(struct tier *t, uint32_t id, struct waiter w); /* id is on disk for w */
/* Whether a durable commit that still waits holds id on disk: O(holds x
 * waits), for tier_story (tier_dheld is the disk's, after a prune). */
bool tier_dheld_live(const struct tier *t, uint32_t id);
void tier_dscope_push(struct tier *t, struct dscope *s);
/* A move being started is on no list until tier_moves_add: what its start
 * does first (making room in warm or on disk) may tell other waiters, whose
 * callbacks may make its own waiter leave. Its waiters in a scope meanwhile
 * (popped with tier_dscope_pop before it is listed or freed). */
void tier_move_scope(struct tier *t, struct move *m, struct dscope *s);
void tier_dscope_pop(struct tier *t, struct dscope *s);
void tier_dholds_free(struct tier *t);

/* ---- tier_drop.c ---- */
/* Note that id may be an orphan (its parent a ghost): the mover sweeps. */
void tier_orphan_check(struct tier *t, uint32_t id);
void tier_sweep_orphans(struct tier *t);

#endif /* TIER_INT_H */
