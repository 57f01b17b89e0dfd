/* SPDX-License-Identifier: MIT */
/*
 * tier.c - the store: reservations, leases, prefix lookups, leaf-first LRU
 * eviction, and the movers between warm (tier_ram.c) and cold (tier_cold.c),
 * over the in-memory index (idx.c).
 *
 * Design note: leaf-first LRU. Each entry names its parent (the block before
 * it in its chain), counts its children (nchild) and the children whose data
 * is in warm (nwarm). Only warm "leaves" can leave warm: committed, in warm,
 * unleased, not moving, with no child in warm. Those, and only those, are
 * linked into an LRU list of their size class (IDX_F_LRU), so picking a
 * victim is O(1): a list's tail. Accessed blocks go to the head. When the
 * last warm child of a parent leaves, the parent becomes a leaf and goes to
 * the *tail*: its subtree was the coldest thing in the pool, so the rest of
 * that chain should follow before anything warmer. A chain thus leaves warm
 * from its end back towards its root.
 *
 * Design note: warm and cold. A block is in warm (level WARM: a slot holds
 * it), on disk only (level COLD), or both (WARM with IDX_F_COLD). Leaving
 * warm, a block with a cold copy just gives its slot back; one without is
 * demoted (written to cold from its slot, which stays pinned until the write
 * is durable) by the background mover (tier_maintain), or dropped when there
 * is no cold tier or a slot is needed right now (a put never waits for a
 * disk write). A dropped block with children stays as an invisible ghost so
 * that its children's parent links remain valid. A get of a cold block
 * promotes it: a warm slot is taken, the cold copy read into it and
 * verified, and the getter's lease waits for that read (tier_get_async).
 *
 * Design note: the remote tier (tier_remote.c, a Redis Cluster). Writes
 * follow the policy: write-through on commit, or on demotion when the mover
 * takes a block out of warm. A write reads the warm slot from a worker
 * thread, so the block holds a lease meanwhile (remote_pins; it is not a
 * leaf, so nothing evicts or moves it); a block being dropped at once is
 * copied instead. A read from the remote never needs an index entry before
 * it lands: the store reserves the absent keys under its own owner id
 * (TIER_OWNER_REMOTE), the worker fills the slots, and the completion
 * commits the verified leading run like a client's put (tier_get_remote).
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

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

/* Each size class has two LRU lists of leaves: dirty (no cold copy: leaving
 * warm means a demotion, or a loss) and clean (on disk too: leaving warm is
 * free). A slot needed right now comes from a clean leaf first. */
enum { DIRTY = 0, CLEAN = 1 };

/* Who waits for a move: any number of getters and durable commits (a
 * second getter of a block being read joins the read, never misses). */
struct waiters {
    void **w;
    uint32_t n, cap;
};

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

/* A durable commit waiting for a key another client is still writing. */
struct dwait {
    uint32_t id;
    void *waiter;
    struct dwait *next;
};

/* A remote read or probe in flight (tier_get_remote, tier_lookup_remote). */
struct rop {
    struct tier *t;
    void *waiter;        /* who waits for it (NULL: nobody, or forgotten) */
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
    struct lru lru[TIER_RAM_CLASSES][2];
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
    struct tier_cfg cfg;              /* callbacks */
    struct tier_stats st;             /* counters; gauges filled in tier_stats_get */
};

/* Demotions in flight at most: enough to keep the disk busy, few enough
 * that the cold tier's queue never refuses (it has 32 slots by default). */
#define DEMOTE_INFLIGHT 24

uint64_t tier_slot_bytes(uint64_t block_bytes)
{
    return (block_bytes + TIER_RAM_PAGE - 1) & ~(uint64_t)(TIER_RAM_PAGE - 1);
}

int tier_create(const struct tier_cfg *cfg, struct tier **out)
{
    struct tier_ram_cfg rc_cfg = {
        .bytes = cfg->warm_bytes, .lock = cfg->lock_memory, .huge = cfg->huge_pages,
        .log = cfg->log, .log_ctx = cfg->log_ctx,
    };
    struct tier *t;
    double hi = cfg->high_wm > 0 ? cfg->high_wm : 0.95;
    double lo = cfg->low_wm > 0 ? cfg->low_wm : 0.85;
    int rc;

    if (cfg->warm_bytes == 0 || hi > 1.0 || lo > hi)
        return -EINVAL;
    t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    rc = idx_create(1024, &t->idx);
    if (rc < 0)
        goto out_free;
    rc = tier_why_create(cfg->why_events ? cfg->why_events : 65536, &t->why);
    if (rc < 0)
        goto out_idx;
    rc = tier_ram_open(&rc_cfg, &t->ram);
    if (rc < 0)
        goto out_idx;
    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        for (int k = 0; k < 2; k++)
            t->lru[c][k].head = t->lru[c][k].tail = TIER_NONE;
    t->clru.head = t->clru.tail = TIER_NONE;
    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        t->hlru[c].head = t->hlru[c].tail = TIER_NONE;
    if (cfg->hot) {
        struct tier_ram_cfg hc = { .bytes = tier_hot_bytes(cfg->hot), .no_memory = true };

        rc = tier_ram_open(&hc, &t->hram);
        if (rc < 0) {
            tier_ram_close(t->ram);
            goto out_idx;
        }
        t->hot = cfg->hot;
        t->hot_high = (uint64_t)(hi * (double)tier_ram_bytes(t->hram));
        t->hot_low = (uint64_t)(lo * (double)tier_ram_bytes(t->hram));
    }
    t->high_bytes = (uint64_t)(hi * (double)tier_ram_bytes(t->ram));
    t->low_bytes = (uint64_t)(lo * (double)tier_ram_bytes(t->ram));
    t->cold = cfg->cold;
    t->write_through = cfg->cold && cfg->write_through;
    t->remote = cfg->remote;
    t->cfg = *cfg;
    *out = t;
    return 0;
out_idx:
    tier_why_destroy(t->why);
    idx_destroy(t->idx);
out_free:
    free(t);
    return rc;
}

void tier_destroy(struct tier *t)
{
    if (!t)
        return;
    /* the caller closed the cold tier first (tier_cold_close runs or cancels
     * every callback), so nothing in flight can name t any more */
    while (t->moves) {
        struct move *m = t->moves;

        t->moves = m->next;
        free(m->ws.w);
        free(m->dws.w);
        free(m);
    }
    while (t->dwaits) {
        struct dwait *d = t->dwaits;

        t->dwaits = d->next;
        free(d);
    }
    while (t->rops) { /* none once the remote tier is closed first, as it must be */
        struct rop *o = t->rops;

        t->rops = o->next;
        free(o);
    }
    tier_ram_close(t->hram);
    tier_ram_close(t->ram);
    tier_why_destroy(t->why);
    idx_destroy(t->idx);
    free(t);
}

int tier_pool_fd(const struct tier *t) { return tier_ram_fd(t->ram); }
uint64_t tier_pool_bytes(const struct tier *t) { return tier_ram_bytes(t->ram); }
void *tier_pool_base(const struct tier *t) { return tier_ram_base(t->ram); }
uint64_t tier_block_max(const struct tier *t) { return tier_ram_seg_bytes(t->ram); }

static uint8_t *slot_ptr(const struct tier *t, const struct idx_entry *e)
{
    return (uint8_t *)tier_ram_base(t->ram) + e->off;
}

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* ms granularity is plenty; no syscall */
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* id's data is gone for reason ev (enum tier_event), from tier lvl. */
static void remember(struct tier *t, uint32_t id, uint8_t ev, uint8_t lvl)
{
    const struct idx_entry *e = idx_at(t->idx, id);

    tier_why_put(t->why, e->ns, &e->key, ev, lvl, now_ms());
}

/* ---- LRU of leaves ---------------------------------------------------- */

/* The list e is on (or would go on): the cold list, or its class's warm
 * list for blocks on disk or not. What decides it (level, cls, cold bit)
 * changes only while e is unlinked. */
static struct lru *list_of(struct tier *t, const struct idx_entry *e)
{
    if (e->flags & IDX_F_CLRU)
        return &t->clru;
    if (e->flags & IDX_F_HLRU)
        return &t->hlru[e->cls];
    return &t->lru[e->cls][e->flags & IDX_F_COLD ? CLEAN : DIRTY];
}

static void lru_unlink(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);
    struct lru *l = list_of(t, e);

    if (e->prev != TIER_NONE)
        idx_at(t->idx, e->prev)->next = e->next;
    else
        l->head = e->next;
    if (e->next != TIER_NONE)
        idx_at(t->idx, e->next)->prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = TIER_NONE;
    e->flags &= ~(IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU);
}

static void lru_link(struct tier *t, uint32_t id, bool at_tail, uint8_t which)
{
    struct idx_entry *e = idx_at(t->idx, id);
    struct lru *l;

    e->flags |= which;
    l = list_of(t, e);
    if (at_tail) {
        e->next = TIER_NONE;
        e->prev = l->tail;
        if (l->tail != TIER_NONE)
            idx_at(t->idx, l->tail)->next = id;
        else
            l->head = id;
        l->tail = id;
    } else {
        e->prev = TIER_NONE;
        e->next = l->head;
        if (l->head != TIER_NONE)
            idx_at(t->idx, l->head)->prev = id;
        else
            l->tail = id;
        l->head = id;
    }
}

/* In warm with no child in warm: it may leave warm (dropped, written to
 * disk, or freed when it is on disk already). Without a cold tier leaving
 * warm means a loss, so only a block with no child at all qualifies: a
 * block with a resident child anywhere is never dropped before that child. */
static bool warm_leaf(const struct tier *t, const struct idx_entry *e)
{
    return e->state == IDX_COMMITTED && e->level == TIER_L_WARM && e->leases == 0 &&
           e->nwarm == 0 && !(e->flags & IDX_F_MOVING) && (t->cold || e->nchild == 0);
}

/* Whether a warm block may be dropped (lost) now: nothing below it anywhere. */
static bool droppable(const struct idx_entry *e)
{
    return e->nchild == 0 && !(e->flags & IDX_F_COLD);
}

/* Where a block counts for its parent's leaf status: warm while its bytes
 * are on their way into a warm slot too (a promotion in flight), so making
 * room for the next block of a run never takes the one before it. */
static bool warm_res(const struct idx_entry *e)
{
    return e->state != IDX_GHOST &&
           (e->level == TIER_L_WARM || (e->flags & IDX_F_PROMOTING));
}

static bool hot_res(const struct idx_entry *e)
{
    return e->state != IDX_GHOST && e->level == TIER_L_HOT;
}

/* In hot with no child in hot: the hot mover may copy it down to warm. */
static bool hot_leaf(const struct idx_entry *e)
{
    return e->state == IDX_COMMITTED && e->level == TIER_L_HOT && e->leases == 0 &&
           e->nhot == 0 && !(e->flags & IDX_F_MOVING);
}

/* On disk only, and nothing depends on it: the cold tier may evict it. */
static bool cold_leaf(const struct idx_entry *e)
{
    return e->state == IDX_COMMITTED && e->level == TIER_L_COLD && (e->flags & IDX_F_COLD) &&
           e->leases == 0 && e->nchild == 0 && !(e->flags & IDX_F_MOVING);
}

/* Put id on the list it belongs to now: its class's warm list when it is a
 * warm leaf, the cold list when it is a cold leaf, none otherwise. */
static void settle(struct tier *t, uint32_t id, bool at_tail)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint8_t want = warm_leaf(t, e) ? IDX_F_LRU : cold_leaf(e) ? IDX_F_CLRU
                 : hot_leaf(e)  ? IDX_F_HLRU : 0;
    uint8_t have = e->flags & (IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU);

    if (want == have)
        return;
    if (have)
        lru_unlink(t, id);
    if (want)
        lru_link(t, id, at_tail, want);
}

/* A child of p went away. Ghosts disappear with their last child, which
 * may free their parent in turn. */
static void child_gone(struct tier *t, uint32_t p, bool at_tail)
{
    while (p != TIER_NONE) {
        struct idx_entry *e = idx_at(t->idx, p);
        uint32_t up = e->parent;

        e->nchild--;
        if (e->state != IDX_GHOST || e->nchild > 0 || e->leases > 0) {
            settle(t, p, at_tail);
            return;
        }
        idx_delete(t->idx, p);
        p = up;
    }
}

static void set_parent(struct tier *t, uint32_t id, uint32_t p)
{
    idx_at(t->idx, id)->parent = p;
    if (p != TIER_NONE) {
        idx_at(t->idx, p)->nchild++;
        settle(t, p, false); /* a parent is not a leaf */
    }
}

/* id's data moved to level lvl and/or its promotion started or ended: keep
 * its parent's nwarm / nhot (and so the parent's leaf status) right. */
static void set_res(struct tier *t, uint32_t id, uint8_t lvl, bool promoting, bool at_tail)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint32_t p = e->parent;
    int ow = warm_res(e), oh = hot_res(e);

    e->level = lvl;
    if (promoting)
        e->flags |= IDX_F_PROMOTING;
    else
        e->flags &= (uint16_t)~IDX_F_PROMOTING;
    if (p == TIER_NONE || (ow == warm_res(e) && oh == hot_res(e)))
        return;
    e = idx_at(t->idx, p);
    e->nwarm += (uint32_t)(warm_res(idx_at(t->idx, id)) - ow);
    e->nhot += (uint32_t)(hot_res(idx_at(t->idx, id)) - oh);
    settle(t, p, at_tail);
}

static void set_level(struct tier *t, uint32_t id, uint8_t lvl, bool at_tail)
{
    set_res(t, id, lvl, idx_at(t->idx, id)->flags & IDX_F_PROMOTING, at_tail);
}

static void warm_lose(struct tier *t, uint32_t id, bool at_tail)
{
    set_level(t, id, TIER_L_COLD, at_tail);
}

static void dwaits_fail(struct tier *t, uint32_t id, int rc);

/* An entry whose data is gone (in no tier): delete it, or keep it as a
 * ghost while children or leases still name it. */
static void forget(struct tier *t, uint32_t id, bool at_tail)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint32_t p = e->parent;

    if (t->dwaits) /* durable commits waiting for it: nothing to make durable */
        dwaits_fail(t, id, -ENODATA);
    e = idx_at(t->idx, id);
    e->level = TIER_L_NONE;
    e->flags &= (uint16_t)~IDX_F_COLD;
    if (e->nchild > 0 || e->leases > 0) {
        /* its children can be reached by no lookup now: the mover drops them */
        t->orphans |= e->nchild > 0;
        e->state = IDX_GHOST;
        return;
    }
    idx_delete(t->idx, id);
    child_gone(t, p, at_tail);
}

/* A ghost nothing names any more (no child, no lease) goes, and may free
 * its parent in turn. Returns whether id went. */
static bool drop_idle_ghost(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint32_t p = e->parent;

    if (e->state != IDX_GHOST || e->leases > 0 || e->nchild > 0)
        return false;
    idx_delete(t->idx, id);
    child_gone(t, p, false);
    return true;
}

/* ---- writes to the remote tier ---------------------------------------- */

static void maybe_hot_up(struct tier *t, uint32_t id);

static void on_remote_put(void *ctx, int rc)
{
    struct rput *p = ctx;
    struct tier *t = p->t;
    struct idx_entry *e = idx_at(t->idx, p->id);

    (void)rc; /* the remote tier counts its outcome */
    t->remote_pins--;
    t->remote_pinned -= p->bytes;
    e->leases--;
    if (!drop_idle_ghost(t, p->id)) {
        settle(t, p->id, p->at_tail);
        maybe_hot_up(t, p->id);
    }
    free(p);
}

/* Write id's block (committed, in warm) to the remote tier, when its
 * namespace uses it. pin: a worker reads the slot, so the block holds a
 * lease until the write is done; else (the slot is freed right after this)
 * the bytes are copied now. */
static void remote_put(struct tier *t, uint32_t id, bool pin)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);
    struct rput *p;

    if (!t->remote || !tier_remote_ns_on(t->remote, e->ns))
        return;
    if (!pin) {
        /* -EBUSY (the copies queued reached their bound) is counted there */
        if (tier_remote_put(t->remote, e->ns, &e->key, slot_ptr(t, e), slot, true, NULL,
                            NULL) == -ENOMEM)
            t->remote_skipped++;
        return;
    }
    /* bounded: blocks pinned by writes not finished hold at most a quarter
     * of warm, so a slow or dead cluster cannot fill the pool */
    p = t->remote_pinned + slot <= tier_ram_bytes(t->ram) / 4 ? malloc(sizeof(*p)) : NULL;
    if (!p) {
        t->remote_skipped++;
        return;
    }
    *p = (struct rput){ .t = t, .id = id, .bytes = slot,
                        .at_tail = t->cfg.remote_policy == TIER_REMOTE_ON_DEMOTION };
    if (tier_remote_put(t->remote, e->ns, &e->key, slot_ptr(t, e), slot, false, on_remote_put,
                        p) < 0) {
        free(p);
        t->remote_skipped++;
        return;
    }
    e->leases++;
    t->remote_pins++;
    t->remote_pinned += slot;
    settle(t, id, false);
}

/* ---- leaving warm ------------------------------------------------------ */

/* Make *best the older (by access stamp) of itself and list l's tail. */
static void older(const struct tier *t, const struct lru *l, uint32_t *best, uint32_t *age)
{
    uint32_t a;

    if (l->tail == TIER_NONE)
        return;
    a = t->clock - idx_at(t->idx, l->tail)->stamp; /* wrap-safe difference */
    if (*best == TIER_NONE || a > *age) {
        *best = l->tail;
        *age = a;
    }
}

/* The victim for warm's watermarks: the oldest warm leaf. O(classes). */
static uint32_t pick_victim(struct tier *t)
{
    uint32_t best = TIER_NONE, age = 0;

    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        for (int k = 0; k < 2; k++)
            older(t, &t->lru[c][k], &best, &age);
    return best;
}

/* The oldest warm leaf already on disk, of any class. O(classes). */
static uint32_t pick_clean(struct tier *t)
{
    uint32_t best = TIER_NONE, age = 0;

    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        older(t, &t->lru[c][CLEAN], &best, &age);
    return best;
}

/* The victim for hot's watermarks: the oldest hot leaf. O(classes). */
static uint32_t pick_hot_victim(struct tier *t)
{
    uint32_t best = TIER_NONE, age = 0;

    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        older(t, &t->hlru[c], &best, &age);
    return best;
}

/* Free id's warm slot now. With a cold copy the block stays (cold-only);
 * without one it is lost (dropped). id is committed, unleased, not moving. */
static void leave_warm(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);

    if (e->flags & (IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU))
        lru_unlink(t, id);
    if (t->cfg.on_evict)
        t->cfg.on_evict(t->cfg.evict_ctx, e->ns, &e->key, slot_ptr(t, e), slot);
    /* on demotion: a block about to be lost goes to the remote tier (copied:
     * its slot is freed below) */
    if (!(e->flags & IDX_F_COLD) && t->remote &&
        t->cfg.remote_policy == TIER_REMOTE_ON_DEMOTION)
        remote_put(t, id, false);
    tier_ram_free(t->ram, e->off);
    t->st.evictions[TIER_L_WARM]++;
    t->st.blocks[TIER_L_WARM]--;
    warm_lose(t, id, true);
    if (!(idx_at(t->idx, id)->flags & IDX_F_COLD)) {
        t->st.dropped++;
        remember(t, id, TIER_EV_DROPPED, TIER_L_WARM);
        forget(t, id, true);
    } else {
        settle(t, id, false); /* a disk-only leaf now: newest on the cold list */
    }
}

/* The disk is full: evict the least recently demoted disk-only leaf. */
static int cold_make_room(struct tier *t)
{
    uint32_t v = t->clru.tail;
    struct idx_entry *e;
    int rc;

    if (v == TIER_NONE)
        return -ENOSPC;
    e = idx_at(t->idx, v);
    rc = tier_cold_remove(t->cold, e->ns, &e->key);
    if (rc < 0 && rc != -ENOENT)
        return rc;
    lru_unlink(t, v);
    t->st.blocks[TIER_L_COLD]--;
    t->st.evictions[TIER_L_COLD]++;
    remember(t, v, TIER_EV_EVICTED, TIER_L_COLD);
    forget(t, v, true);
    return 0;
}

static void moves_add(struct tier *t, struct move *m)
{
    m->prev = NULL;
    m->next = t->moves;
    if (t->moves)
        t->moves->prev = m;
    t->moves = m;
}

static void moves_del(struct tier *t, struct move *m)
{
    if (m->prev)
        m->prev->next = m->next;
    else
        t->moves = m->next;
    if (m->next)
        m->next->prev = m->prev;
}

enum move_kind { MV_DEMOTE, MV_PROMOTE, MV_HOT_DOWN, MV_HOT_UP };

static enum move_kind kind_of(const struct move *m)
{
    return m->promote ? MV_PROMOTE : m->hot_down ? MV_HOT_DOWN : m->hot_up ? MV_HOT_UP
                                                                        : MV_DEMOTE;
}

/* id's move of one kind (a block may have a write to disk and a copy up in
 * flight at once, never two of one kind). */
static struct move *move_of(struct tier *t, uint32_t id, enum move_kind k)
{
    /* O(moves in flight): a few batches at most */
    for (struct move *m = t->moves; m; m = m->next)
        if (m->id == id && kind_of(m) == k)
            return m;
    return NULL;
}

/* Add w to ws (once). NULL waits for nothing. */
static int wait_add(struct waiters *ws, void *w)
{
    if (!w)
        return 0;
    for (uint32_t i = 0; i < ws->n; i++)
        if (ws->w[i] == w)
            return 0;
    if (ws->n == ws->cap) {
        uint32_t cap = ws->cap ? 2 * ws->cap : 2;
        void **n = realloc(ws->w, cap * sizeof(*n));

        if (!n)
            return -ENOMEM;
        ws->w = n;
        ws->cap = cap;
    }
    ws->w[ws->n++] = w;
    return 0;
}

static void wait_del(struct waiters *ws, void *w)
{
    for (uint32_t i = 0; i < ws->n; i++)
        if (ws->w[i] == w)
            ws->w[i--] = ws->w[--ws->n];
}

/* Tell every waiter of a move that has left the list of moves (so a
 * callback that forgets a waiter cannot change it under us), then free it. */
static void move_done(struct tier *t, struct move *m, int rc)
{
    for (uint32_t i = 0; i < m->ws.n; i++)
        if (t->cfg.ready && m->ws.w[i])
            t->cfg.ready(t->cfg.ready_ctx, m->ws.w[i], m->id, rc);
    for (uint32_t i = 0; i < m->dws.n; i++) /* (NULL: a detached durable commit's) */
        if (t->cfg.ready && m->dws.w[i])
            t->cfg.ready(t->cfg.ready_ctx, m->dws.w[i], m->id, rc);
    free(m->ws.w);
    free(m->dws.w);
    free(m);
}

static void orphan_check(struct tier *t, uint32_t id);

static void on_demoted(void *ctx, int rc)
{
    struct move *m = ctx;
    struct tier *t = m->t;
    struct idx_entry *e = idx_at(t->idx, m->id);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);

    moves_del(t, m);
    t->demoting_bytes -= slot;
    t->flush_inflight -= m->flush;
    e->flags &= (uint16_t)~IDX_F_DEMOTING;
    if (rc < 0) {
        t->st.cold_errors++; /* the mover's block is dropped below; others stay */
    } else {
        e->flags |= IDX_F_COLD;
        t->st.demotions++;
        t->st.blocks[TIER_L_COLD]++;
        t->st.bytes_in[TIER_L_COLD] += slot;
    }
    /* demoted by the mover: it leaves warm; written through or for a
     * durable commit: it stays. A mover's write that failed drops the
     * block (counted) if nothing below depends on it, as one refused at once
     * does: warm needs the room, and writing it again at once would spin on
     * a disk that keeps failing. */
    if (m->evict && e->leases == 0 && e->state == IDX_COMMITTED && e->nwarm == 0 &&
        !(e->flags & IDX_F_MOVING) && (rc == 0 || droppable(e)))
        leave_warm(t, m->id);
    else
        settle(t, m->id, false);
    orphan_check(t, m->id);
    move_done(t, m, rc);
}

/* Start writing id (committed, in warm, no cold copy) to cold. evict: leave
 * warm once durable (the mover); waiter: who is told when it is durable. */
static int demote_for(struct tier *t, uint32_t id, bool evict, void *waiter)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);
    struct move *m = calloc(1, sizeof(*m));
    const struct tier_key *parent = NULL;
    int rc;

    if (!m)
        return -ENOMEM;
    *m = (struct move){ .t = t, .id = id, .evict = evict };
    if (wait_add(&m->ws, waiter) < 0) {
        free(m);
        return -ENOMEM;
    }
    if (e->parent != TIER_NONE)
        parent = &idx_at(t->idx, e->parent)->key;
    /* a full disk makes room leaf-first; -ENOSPC only when nothing can go */
    while ((rc = tier_cold_put(t->cold, e->ns, &e->key, parent, slot_ptr(t, e), slot,
                               on_demoted, m)) == -ENOSPC &&
           cold_make_room(t) == 0) {
        e = idx_at(t->idx, id);
        parent = e->parent != TIER_NONE ? &idx_at(t->idx, e->parent)->key : NULL;
    }
    if (rc < 0) {
        free(m->ws.w);
        free(m);
        return rc;
    }
    e = idx_at(t->idx, id);
    e->flags |= IDX_F_DEMOTING; /* pins the slot until the write is durable */
    settle(t, id, false);
    t->demoting_bytes += slot;
    moves_add(t, m);
    /* on demotion: the mover's block goes to the remote tier as well */
    if (evict && t->remote && t->cfg.remote_policy == TIER_REMOTE_ON_DEMOTION)
        remote_put(t, id, true);
    return 0;
}

static int demote(struct tier *t, uint32_t id)
{
    return demote_for(t, id, true, NULL);
}

static void durable_after(struct tier *t, uint32_t id, struct waiters *dws, int rc);

static void on_hot_down(void *ctx, int rc)
{
    struct move *m = ctx;
    struct tier *t = m->t;
    struct idx_entry *e = idx_at(t->idx, m->id);
    uint64_t hslot = tier_ram_class_slot(t->hram, e->cls);
    struct waiters dws = m->dws;
    uint32_t id = m->id;

    moves_del(t, m);
    t->hot_moving -= hslot;
    e->flags &= (uint16_t)~IDX_F_HOTDOWN;
    if (rc == 0) {
        /* the block now lives in its warm slot; the device slot goes back,
         * unless readers hold it in place: then it is theirs until the last
         * one releases it (a slot returns only when nothing holds it) */
        if (e->hleases > 0) {
            e->hoff = e->off;
            e->hcls = e->cls;
            e->flags |= IDX_F_HOTKEPT;
        } else {
            tier_ram_free(t->hram, e->off);
        }
        e->off = m->warm_off;
        e->cls = m->warm_cls;
        t->st.evictions[TIER_L_HOT]++;
        t->st.blocks[TIER_L_HOT]--;
        t->st.blocks[TIER_L_WARM]++;
        t->st.bytes_in[TIER_L_WARM] += tier_ram_class_slot(t->ram, m->warm_cls);
        set_level(t, m->id, TIER_L_WARM, false);
    } else {
        tier_ram_free(t->ram, m->warm_off); /* stays in hot; tried again later */
        t->st.cold_errors++;
    }
    settle(t, m->id, false);
    orphan_check(t, m->id);
    m->dws = (struct waiters){ 0 };
    move_done(t, m, rc);
    /* durable commits that waited for the copy: now the write to disk */
    durable_after(t, id, &dws, rc);
    free(dws.w);
}

static int alloc_slot(struct tier *t, int cls, uint32_t id, uint64_t *off);

/* Start copying id (committed, in hot) down into a new warm slot. */
static int hot_down(struct tier *t, uint32_t id, void *waiter, uint64_t *warm_off)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint64_t slot = tier_ram_class_slot(t->hram, e->cls);
    int cls = tier_ram_class(t->ram, slot), rc;
    struct move *m;

    if (cls < 0)
        return cls;
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    *m = (struct move){ .t = t, .id = id, .hot_down = true, .warm_cls = (uint8_t)cls };
    if (wait_add(&m->ws, waiter) < 0) {
        free(m);
        return -ENOMEM;
    }
    rc = alloc_slot(t, cls, id, &m->warm_off);
    if (rc < 0)
        goto out_free;
    e = idx_at(t->idx, id);
    rc = tier_hot_copy_out(t->hot, (uint8_t *)tier_ram_base(t->ram) + m->warm_off, e->off, slot,
                           on_hot_down, m);
    if (rc < 0) {
        tier_ram_free(t->ram, m->warm_off);
        goto out_free;
    }
    e->flags |= IDX_F_HOTDOWN;
    settle(t, id, false);
    t->hot_moving += slot;
    moves_add(t, m);
    if (warm_off)
        *warm_off = m->warm_off;
    return 0;
out_free:
    free(m->ws.w);
    free(m);
    return rc;
}

/* Hot above its high watermark: copy leaf-first LRU blocks down to warm
 * until it would be at the low one (slots free as the copies land). */
static size_t hot_maintain(struct tier *t)
{
    size_t n = 0;

    if (!t->hot)
        return 0;
    /* hysteresis: once past the high mark, keep going (turn after turn, as
     * leaf after leaf becomes free to go) until the low mark is reached */
    if (tier_ram_used(t->hram) - t->hot_moving > t->hot_high)
        t->hot_draining = true;
    if (tier_ram_used(t->hram) - t->hot_moving <= t->hot_low)
        t->hot_draining = false;
    if (!t->hot_draining)
        return 0;
    while (tier_ram_used(t->hram) - t->hot_moving > t->hot_low && n < DEMOTE_INFLIGHT) {
        uint32_t v = pick_hot_victim(t);

        if (v == TIER_NONE)
            break;
        /* only into room warm has below its own high mark: pushing further
         * would make warm drop blocks it has not written to disk yet; its
         * mover makes room and this one goes on next turn */
        if (tier_ram_used(t->ram) + tier_ram_class_slot(t->hram, idx_at(t->idx, v)->cls) >
            t->high_bytes) {
            t->warm_draining = true; /* ask the warm mover for room */
            break;
        }
        if (hot_down(t, v, NULL, NULL) < 0)
            break;
        n++;
    }
    return n;
}

static void on_hot_up(void *ctx, int rc)
{
    struct move *m = ctx;
    struct tier *t = m->t;
    struct idx_entry *e = idx_at(t->idx, m->id);

    moves_del(t, m);
    e->flags &= (uint16_t)~IDX_F_HOTUP;
    /* the copy counts only if nobody read the warm slot meanwhile (a lease
     * or a write to disk holds its offset): then the hot copy is dropped */
    if (rc == 0 && e->state == IDX_COMMITTED && e->level == TIER_L_WARM && e->leases == 0 &&
        !(e->flags & IDX_F_MOVING)) {
        tier_ram_free(t->ram, e->off);
        e->off = m->hot_off;
        e->cls = m->hot_cls;
        e->flags &= ~IDX_F_WANTHOT;
        t->st.blocks[TIER_L_WARM]--;
        t->st.blocks[TIER_L_HOT]++;
        t->st.bytes_in[TIER_L_HOT] += tier_ram_class_slot(t->hram, m->hot_cls);
        t->st.hot_promotions++;
        set_level(t, m->id, TIER_L_HOT, false);
    } else {
        tier_ram_free(t->hram, m->hot_off);
        if (rc < 0)
            t->st.cold_errors++;
    }
    settle(t, m->id, false);
    orphan_check(t, m->id);
    move_done(t, m, rc);
}

/* Start copying id (committed, in warm, unleased, not moving) up into a hot
 * slot, for a getter that asked for it there. Only into room below hot's
 * high watermark: a promotion never makes hot push other blocks down. */
static int hot_up(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);
    int hcls = tier_ram_class(t->hram, slot), rc;
    struct move *m;

    if (hcls < 0)
        return hcls;
    if (tier_ram_used(t->hram) + tier_ram_class_slot(t->hram, hcls) > t->hot_high)
        return -ENOSPC;
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    *m = (struct move){ .t = t, .id = id, .hot_up = true, .hot_cls = (uint8_t)hcls };
    rc = tier_ram_alloc(t->hram, hcls, id, &m->hot_off);
    if (rc < 0)
        goto out_free;
    rc = tier_hot_copy_in(t->hot, m->hot_off, slot_ptr(t, e), slot, on_hot_up, m);
    if (rc < 0) {
        tier_ram_free(t->hram, m->hot_off);
        goto out_free;
    }
    e->flags |= IDX_F_HOTUP; /* pins the warm slot: it is the copy's source */
    settle(t, id, false);
    moves_add(t, m);
    return 0;
out_free:
    free(m);
    return rc;
}

/* A block a getter wants in hot, once it is free to move. */
static void maybe_hot_up(struct tier *t, uint32_t id)
{
    const struct idx_entry *e = idx_at(t->idx, id);

    if (t->hot && (e->flags & IDX_F_WANTHOT) && e->state == IDX_COMMITTED &&
        e->level == TIER_L_WARM && e->leases == 0 && !(e->flags & IDX_F_MOVING))
        hot_up(t, id); /* no room or no memory: it stays in warm, still wanted */
}

/* Free a whole segment of another class for class cls: the one with the
 * fewest blocks among those whose blocks are all committed, unleased and
 * not moving. Evicting blocks of another class one by one in LRU order
 * would rarely empty a segment and could drain the pool for one slot; this
 * frees only what gives a segment back, or nothing. O(slots in the pool):
 * it runs only when a size class has outgrown its segments and has no leaf
 * of its own. */
static bool may_drop_dirty(struct tier *t);

static int free_segment(struct tier *t, int cls)
{
    uint32_t best = UINT32_MAX, best_live = UINT32_MAX;
    const uint32_t *tags;
    uint32_t nslots, *inside = NULL, cap = 0;
    uint64_t seg = tier_ram_seg_bytes(t->ram);
    bool drop = may_drop_dirty(t);

    for (uint32_t s = 0; s < tier_ram_nseg(t->ram); s++) {
        int c = tier_ram_seg_info(t->ram, s, &tags, &nslots);
        uint32_t live = 0;
        bool ok = c >= 0 && c != cls;

        if (!ok)
            continue;
        /* children of each block inside this segment that go with it (no
         * copy on disk: they leave the index): a block without a copy on
         * disk may go only if all of its children go too */
        if (nslots > cap) {
            uint32_t *n = realloc(inside, nslots * sizeof(*n));

            if (!n) {
                free(inside);
                return -ENOMEM;
            }
            inside = n;
            cap = nslots;
        }
        memset(inside, 0, nslots * sizeof(*inside));
        for (uint32_t i = 0; i < nslots; i++) {
            const struct idx_entry *e, *p;

            if (tags[i] == TIER_RAM_NOTAG)
                continue;
            e = idx_at(t->idx, tags[i]);
            if (e->parent == TIER_NONE)
                continue;
            p = idx_at(t->idx, e->parent);
            if (!(e->flags & IDX_F_COLD) && p->level == TIER_L_WARM &&
                p->state == IDX_COMMITTED && p->off / seg == s)
                inside[(p->off - (uint64_t)s * seg) / tier_ram_class_slot(t->ram, c)]++;
        }
        for (uint32_t i = 0; ok && i < nslots; i++) {
            const struct idx_entry *e;

            if (tags[i] == TIER_RAM_NOTAG)
                continue;
            e = idx_at(t->idx, tags[i]);
            /* what can leave: on disk already, or (when dropping is allowed)
             * a block whose every child leaves with it */
            ok = e->state == IDX_COMMITTED && e->level == TIER_L_WARM && e->leases == 0 &&
                 !(e->flags & IDX_F_MOVING) &&
                 ((e->flags & IDX_F_COLD) || (drop && e->nchild == inside[i]));
            live++;
        }
        if (ok && live < best_live) {
            best = s;
            best_live = live;
        }
    }
    free(inside);
    if (best == UINT32_MAX)
        return -ENOSPC;
    tier_ram_seg_info(t->ram, best, &tags, &nslots);
    /* children first (highest slot last written is not an order): leave_warm
     * a block only once no child of it is left in the segment */
    for (bool again = true; again;) {
        again = false;
        for (uint32_t i = 0; i < nslots; i++) {
            const struct idx_entry *e;

            if (tags[i] == TIER_RAM_NOTAG)
                continue;
            e = idx_at(t->idx, tags[i]);
            if (!(e->flags & IDX_F_COLD) && e->nchild > 0) {
                again = true; /* its children in this segment go first */
                continue;
            }
            leave_warm(t, tags[i]); /* clears the slot's tag; the array stays in place */
        }
    }
    return 0;
}

/* Dropping a block that is not on disk is allowed only when no tier below
 * can take it: no cold tier, a failed one, or a full one with nothing of its
 * own left to evict. Otherwise warm waits for its mover (a tiering store
 * demotes before it drops). */
static bool may_drop_dirty(struct tier *t)
{
    struct tier_cold_stats cs;

    if (!t->cold)
        return true;
    tier_cold_stats_get(t->cold, &cs);
    return cs.failed || (t->clru.tail == TIER_NONE &&
                         cs.bytes_used + tier_ram_seg_bytes(t->ram) > cs.bytes_capacity);
}

/* The oldest block of class cls on disk too and free to leave warm, leaf
 * or not (its children stay wherever they are). O(slots of the class): only
 * when no leaf can go, e.g. a chain whose every block is clean and whose
 * tail is the parent of the put being made. */
static uint32_t clean_inner(struct tier *t, int cls)
{
    uint32_t best = TIER_NONE, age = 0;
    const uint32_t *tags;
    uint32_t nslots;

    for (uint32_t s = 0; s < tier_ram_nseg(t->ram); s++) {
        if (tier_ram_seg_info(t->ram, s, &tags, &nslots) != cls)
            continue;
        for (uint32_t i = 0; i < nslots; i++) {
            const struct idx_entry *e;
            uint32_t a;

            if (tags[i] == TIER_RAM_NOTAG)
                continue;
            e = idx_at(t->idx, tags[i]);
            if (e->state != IDX_COMMITTED || e->level != TIER_L_WARM || e->leases ||
                (e->flags & IDX_F_MOVING) || !(e->flags & IDX_F_COLD))
                continue;
            a = t->clock - e->stamp;
            if (best == TIER_NONE || a > age) {
                best = tags[i];
                age = a;
            }
        }
    }
    return best;
}

/* The oldest dirty leaf of class cls that nothing depends on. O(leaves of
 * the class): it runs only when the disk is full of what it cannot evict. */
static uint32_t dirty_droppable(struct tier *t, int cls)
{
    uint32_t v = t->lru[cls][DIRTY].tail;

    for (; v != TIER_NONE; v = idx_at(t->idx, v)->prev)
        if (droppable(idx_at(t->idx, v)))
            return v;
    return TIER_NONE;
}

/* Start writing to disk (and keep in warm: clean, they can leave at once)
 * blocks of class cls that are not on disk and have children, which the
 * mover, writing leaves, never reaches: a chain being extended has no leaf
 * in warm. O(slots of the class), only when nothing else makes room.
 * Returns the writes started. */
static unsigned write_inner(struct tier *t, int cls)
{
    const uint32_t *tags;
    uint32_t nslots;
    unsigned n = 0;

    if (!t->cold)
        return 0;
    for (uint32_t s = 0; s < tier_ram_nseg(t->ram) && n < DEMOTE_INFLIGHT; s++) {
        if (tier_ram_seg_info(t->ram, s, &tags, &nslots) != cls)
            continue;
        for (uint32_t i = 0; i < nslots && n < DEMOTE_INFLIGHT; i++) {
            const struct idx_entry *e;

            if (tags[i] == TIER_RAM_NOTAG)
                continue;
            e = idx_at(t->idx, tags[i]);
            if (e->state != IDX_COMMITTED || e->level != TIER_L_WARM ||
                (e->flags & (IDX_F_COLD | IDX_F_MOVING)))
                continue;
            if (demote_for(t, tags[i], false, NULL) < 0)
                return n;
            n++;
        }
    }
    return n;
}

/* Whether the warm mover can make room: writes to disk in flight, or
 * dirty leaves it can write, on a disk that works. */
static bool mover_can(struct tier *t)
{
    struct tier_cold_stats cs;

    if (!t->cold)
        return false;
    tier_cold_stats_get(t->cold, &cs);
    if (cs.failed)
        return false;
    if (t->demoting_bytes || t->hot_moving)
        return true;
    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        if (t->lru[c][DIRTY].tail != TIER_NONE)
            return true;
    return false;
}

/* A slot of class cls for entry id, now: the class's own LRU leaves leave
 * warm, else a segment of another class is freed. */
static int alloc_slot(struct tier *t, int cls, uint32_t id, uint64_t *off)
{
    for (;;) {
        int rc = tier_ram_alloc(t->ram, cls, id, off);
        uint32_t v;

        if (rc != -ENOSPC)
            return rc;
        /* leaving warm is free for a block on disk: a leaf, else any */
        v = t->lru[cls][CLEAN].tail;
        if (v == TIER_NONE && t->demoting_bytes > 0 && !may_drop_dirty(t)) {
            /* writes in flight free or clean slots soon: no O(pool) scans
             * for a caller that will retry */
            t->room_wanted = true;
            return -EAGAIN;
        }
        if (v == TIER_NONE)
            v = clean_inner(t, cls);
        if (v == TIER_NONE && may_drop_dirty(t))
            v = dirty_droppable(t, cls); /* lost, but nothing below can take it */
        if (v != TIER_NONE) {
            leave_warm(t, v);
            continue;
        }
        if (free_segment(t, cls) == 0)
            continue;
        /* full of blocks on their way to disk, or waiting to go: the mover
         * makes room, whatever the watermarks say; the caller retries */
        if (mover_can(t) || write_inner(t, cls) > 0) {
            t->room_wanted = true; /* the mover writes some at its next turn */
            return -EAGAIN;
        }
        return -ENOSPC; /* everything is leased, reserved or moving */
    }
}

/* Write the ancestors of id that have no cold copy yet, up to max of them:
 * a demoted leaf's parent becomes the next leaf, and leaving warm is free
 * for a block already on disk. A chain thus goes to disk in one sweep, in
 * sequence, instead of one block per turn of the mover. */
static unsigned demote_ancestors(struct tier *t, uint32_t id, unsigned max)
{
    unsigned n = 0;

    for (uint32_t p = idx_at(t->idx, id)->parent; p != TIER_NONE && n < max;
         p = idx_at(t->idx, p)->parent) {
        const struct idx_entry *e = idx_at(t->idx, p);

        if (e->state != IDX_COMMITTED || e->level != TIER_L_WARM ||
            (e->flags & (IDX_F_COLD | IDX_F_MOVING)))
            break;
        if (demote(t, p) < 0)
            break;
        n++;
    }
    return n;
}

/* An operator's flush, a slice per turn: write the dirty warm blocks of
 * the next ids to disk (they stay in warm), at most as many at once as the
 * mover, so requests keep flowing; their completions bring the next turn.
 * Done once every id was seen and its own writes are durable. */
static size_t flush_turn(struct tier *t)
{
    uint32_t lim = idx_id_limit(t->idx);
    size_t n = 0;

    while (t->flush_at < lim && t->flush_inflight < DEMOTE_INFLIGHT) {
        const struct idx_entry *e = idx_at(t->idx, t->flush_at);

        if (e->state == IDX_COMMITTED && e->level == TIER_L_WARM &&
            !(e->flags & (IDX_F_COLD | IDX_F_MOVING))) {
            int rc = demote_for(t, t->flush_at, false, NULL);

            if (rc == -EBUSY)
                break; /* the disk's queue is full: this id again next turn */
            if (rc == 0) {
                t->moves->flush = true; /* demote_for put its move first */
                t->flush_inflight++;
                n++;
            }
        }
        t->flush_at++;
    }
    if (t->flush_at >= lim && t->flush_inflight == 0)
        t->flushing = false;
    return n;
}

void tier_flush_begin(struct tier *t)
{
    if (!t->cold)
        return;
    t->flushing = true;
    t->flush_at = 0;
}

bool tier_flush_busy(const struct tier *t)
{
    return t->flushing;
}

static void sweep_orphans(struct tier *t);
static void dwaits_retry(struct tier *t);

size_t tier_maintain(struct tier *t)
{
    size_t n = hot_maintain(t);
    unsigned inflight = 0, wanted = 0;

    if (t->orphans)
        sweep_orphans(t);
    if (t->dwaits)
        dwaits_retry(t);
    if (t->flushing)
        n += flush_turn(t);
    /* group commit: once no write is in flight any more, the ones that
     * completed are made durable (a sync already in flight takes them next);
     * while writes are in flight a full batch starts its own sync */
    if (t->cold)
        tier_cold_flush_idle(t->cold);
    if (tier_ram_used(t->ram) - t->demoting_bytes > t->high_bytes)
        t->warm_draining = true;
    if (tier_ram_used(t->ram) - t->demoting_bytes <= t->low_bytes)
        t->warm_draining = false;
    if (t->room_wanted) {
        /* a put found warm full of blocks not on disk: write some of them
         * whatever the watermarks say (with --high-wm 1.0 they never would) */
        wanted = DEMOTE_INFLIGHT;
        t->room_wanted = false;
    }
    if (!t->warm_draining && !wanted)
        return n;
    while ((t->warm_draining && tier_ram_used(t->ram) - t->demoting_bytes > t->low_bytes) ||
           wanted > 0) {
        uint32_t v = pick_victim(t), clean;
        /* only a put's want drives it: written and kept (clean), so the put
         * takes exactly the room it needs; past the watermarks, written and
         * evicted */
        bool below = !t->warm_draining ||
                     tier_ram_used(t->ram) - t->demoting_bytes <= t->low_bytes;
        struct idx_entry *e;
        int rc;

        if (wanted)
            wanted--;
        if (v == TIER_NONE)
            break;
        e = idx_at(t->idx, v);
        if (e->flags & IDX_F_COLD || !t->cold) {
            leave_warm(t, v); /* on disk already, or (no cold tier) a childless leaf */
            n++;
            continue;
        }
        /* bounded: the rest waits for the next turn of the loop */
        if (inflight >= DEMOTE_INFLIGHT)
            break;
        rc = below ? demote_for(t, v, false, NULL) : demote(t, v);
        if (rc == -EBUSY)
            break;
        if (rc == -ENOSPC && (clean = pick_clean(t)) != TIER_NONE) {
            /* the disk is full of what it cannot evict: a block on disk
             * leaving warm loses nothing and may give the disk a leaf to
             * evict, so that goes before anything is dropped */
            leave_warm(t, clean);
            n++;
            continue;
        }
        if (rc < 0) {
            /* the disk is full of what it cannot evict, or failed: drop
             * what nothing depends on (this leaf, else the oldest other that
             * qualifies: the tail of some chain), else stop (tried again) */
            if (!droppable(idx_at(t->idx, v))) {
                v = TIER_NONE;
                for (int c = 0; c < TIER_RAM_CLASSES && v == TIER_NONE; c++)
                    v = dirty_droppable(t, c);
                if (v == TIER_NONE)
                    break;
            }
            leave_warm(t, v);
        } else {
            inflight++;
            inflight += demote_ancestors(t, v, DEMOTE_INFLIGHT - inflight);
        }
        n++;
    }
    return n;
}

/* ---- entering warm from cold ------------------------------------------- */

static void on_promoted(void *ctx, int rc)
{
    struct move *m = ctx;
    struct tier *t = m->t;
    struct idx_entry *e = idx_at(t->idx, m->id);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);

    moves_del(t, m);
    if (rc == 0) {
        t->st.promotions++;
        t->st.blocks[TIER_L_WARM]++;
        t->st.bytes_out[TIER_L_COLD] += slot;
        t->st.hits[TIER_L_COLD]++;
        set_res(t, m->id, TIER_L_WARM, false, false);
        settle(t, m->id, false);
        maybe_hot_up(t, m->id); /* a prefetch that asked for hot: nobody holds it */
    } else {
        t->st.cold_errors++;
        set_res(t, m->id, TIER_L_COLD, false, false);
        tier_ram_free(t->ram, e->off);
        /* -EIO: the record may still be readable later; otherwise it is gone */
        if (rc != -EIO || !tier_cold_has(t->cold, e->ns, &e->key)) {
            if (e->flags & IDX_F_COLD)
                t->st.blocks[TIER_L_COLD]--;
            remember(t, m->id, rc == -EBADMSG ? TIER_EV_CHECKSUM : TIER_EV_IO_ERROR,
                     TIER_L_COLD);
            forget(t, m->id, false);
        } else {
            settle(t, m->id, false);
        }
    }
    orphan_check(t, m->id);
    move_done(t, m, rc);
}

/* Start reading cold-only id into a new warm slot for blocks of slot bytes. */
static int promote(struct tier *t, uint32_t id, uint64_t slot, void *waiter)
{
    struct idx_entry *e;
    struct move *m;
    uint64_t off;
    int cls = tier_ram_class(t->ram, slot), rc;

    if (cls < 0)
        return cls;
    m = calloc(1, sizeof(*m));
    if (!m)
        return -ENOMEM;
    *m = (struct move){ .t = t, .id = id, .promote = true };
    if (wait_add(&m->ws, waiter) < 0) {
        free(m);
        return -ENOMEM;
    }
    if (idx_at(t->idx, id)->flags & (IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU))
        lru_unlink(t, id); /* before cls changes: it is not a cold leaf any more */
    /* counted in warm by its parent before the slot is found, so making room
     * cannot take the block before it in its chain */
    set_res(t, id, TIER_L_COLD, true, false);
    rc = alloc_slot(t, cls, id, &off);
    if (rc < 0)
        goto out_unmark;
    e = idx_at(t->idx, id);
    rc = tier_cold_get(t->cold, e->ns, &e->key, (uint8_t *)tier_ram_base(t->ram) + off, slot,
                       NULL, on_promoted, m);
    if (rc < 0) {
        tier_ram_free(t->ram, off);
        goto out_unmark;
    }
    e = idx_at(t->idx, id);
    e->cls = (uint8_t)cls;
    e->off = off;
    moves_add(t, m);
    return 0;
out_unmark:
    set_res(t, id, TIER_L_COLD, false, false);
    settle(t, id, false);
    free(m->ws.w);
    free(m);
    return rc;
}

bool tier_ready(const struct tier *t, uint32_t h)
{
    const struct idx_entry *e = idx_at(t->idx, TIER_LEASE_ID(h));

    if (h & TIER_LEASE_HOT)
        return true; /* the hot copy, in place: its slot is the lease's until released */
    return e->state == IDX_COMMITTED && e->level == TIER_L_WARM;
}

/* No callback names waiter any more. keep: the writes its durable commit
 * queued (behind a copy from hot, or for a full disk queue) still start,
 * for nobody (a NULL waiter); else they are dropped with it. */
static void waiter_leaves(struct tier *t, void *waiter, bool keep)
{
    for (struct move *m = t->moves; m; m = m->next) {
        wait_del(&m->ws, waiter); /* the move itself goes on regardless */
        if (!keep)
            wait_del(&m->dws, waiter);
        for (uint32_t i = 0; i < m->dws.n; i++)
            if (m->dws.w[i] == waiter)
                m->dws.w[i] = NULL;
    }
    for (struct dwait **pp = &t->dwaits; *pp;) {
        struct dwait *d = *pp;

        /* a wait for a key another client still writes goes with its
         * waiter, kept or not: that write is the other client's, and a
         * commit answered at its bound must leave nothing behind that the
         * next commit of the same keys would add to again */
        if (d->waiter == waiter && (!keep || idx_at(t->idx, d->id)->state != IDX_COMMITTED)) {
            *pp = d->next;
            free(d);
            continue;
        }
        if (d->waiter == waiter)
            d->waiter = NULL; /* a write queued for a full disk: it still starts */
        pp = &d->next;
    }
    for (struct rop *o = t->rops; o; o = o->next)
        if (o->waiter == waiter)
            o->waiter = NULL;
}

void tier_forget_waiter(struct tier *t, void *waiter)
{
    waiter_leaves(t, waiter, false);
}

void tier_detach_waiter(struct tier *t, void *waiter)
{
    waiter_leaves(t, waiter, true);
}

size_t tier_prefetch(struct tier *t, uint32_t ns, uint64_t block_bytes,
                     const struct tier_key *keys, size_t n, unsigned flags)
{
    size_t started = 0;

    if (!t->cold && !(flags & TIER_GET_PROMOTE))
        return 0;
    for (size_t i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns, &keys[i]);
        struct idx_entry *e;

        if (id == TIER_NONE || idx_at(t->idx, id)->state != IDX_COMMITTED)
            break;
        e = idx_at(t->idx, id);
        if ((flags & TIER_GET_PROMOTE) && t->hot && e->level != TIER_L_HOT) {
            e->flags |= IDX_F_WANTHOT;
            maybe_hot_up(t, id); /* in warm already: up now */
            e = idx_at(t->idx, id);
        }
        if (t->cold && e->level == TIER_L_COLD && !(e->flags & IDX_F_PROMOTING)) {
            if (promote(t, id, tier_slot_bytes(block_bytes), NULL) < 0)
                break;
            started++;
        }
    }
    return started;
}

/* Whether entry id (TIER_NONE: none) is committed and can take one more
 * lease: a count that would wrap would free a block still leased, so the
 * key is a miss instead. */
static bool leasable(const struct tier *t, uint32_t id)
{
    const struct idx_entry *e;

    if (id == TIER_NONE)
        return false;
    e = idx_at(t->idx, id);
    return e->state == IDX_COMMITTED && e->leases < UINT32_MAX;
}

size_t tier_pin(struct tier *t, uint32_t ns, uint64_t block_bytes, const struct tier_key *keys,
                size_t n, unsigned flags, uint32_t *ids)
{
    bool reading = t->cold != NULL;
    size_t i;

    for (i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns, &keys[i]);
        struct idx_entry *e;

        if (!leasable(t, id))
            break;
        e = idx_at(t->idx, id);
        if ((flags & TIER_GET_PROMOTE) && t->hot && e->level != TIER_L_HOT)
            e->flags |= IDX_F_WANTHOT; /* copied up once the pin is released */
        /* read ahead as a prefetch does; with no room for the read now the
         * block stays pinned on disk, and the get reads it */
        if (reading && e->level == TIER_L_COLD && !(e->flags & IDX_F_PROMOTING) &&
            promote(t, id, tier_slot_bytes(block_bytes), NULL) < 0)
            reading = false;
        /* held as a lease is: no tier evicts it, the disk included */
        e = idx_at(t->idx, id);
        e->leases++;
        e->stamp = ++t->clock;
        settle(t, id, false);
        ids[i] = id;
    }
    t->st.leases_active += i;
    t->st.pinned_blocks += i;
    return i;
}

/* ---- entering warm from the remote tier -------------------------------- */

static int reserve_one(struct tier *t, uint32_t ns, int cls, bool hot, uint32_t owner,
                       uint32_t p, const struct tier_key *key, uint32_t ghost,
                       uint32_t *id_out, uint64_t *off_out);

static struct rop *rop_new(struct tier *t, size_t n, void *waiter)
{
    struct rop *o = calloc(1, sizeof(*o) + n * (sizeof(uint32_t) + sizeof(void *) +
                                                sizeof(int)));

    if (!o)
        return NULL;
    o->t = t;
    o->waiter = waiter;
    o->bufs = (void **)(o + 1);
    o->res = (int *)(o->bufs + n);
    o->ids = (uint32_t *)(o->res + n);
    return o;
}

static void rops_add(struct tier *t, struct rop *o)
{
    o->prev = NULL;
    o->next = t->rops;
    if (t->rops)
        t->rops->prev = o;
    t->rops = o;
}

static void rops_del(struct tier *t, struct rop *o)
{
    if (o->prev)
        o->prev->next = o->next;
    else
        t->rops = o->next;
    if (o->next)
        o->next->prev = o->prev;
}

/* Give back a slot reserved for a remote read that found nothing: like an
 * aborted put, but nothing is remembered (the key was simply not there). */
static void drop_fetch(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);

    tier_ram_free(t->ram, e->off);
    t->st.reserved--;
    warm_lose(t, id, false);
    forget(t, id, false);
}

static void remote_done(struct tier *t, struct rop *o, int count)
{
    if (o->waiter && t->cfg.remote_done)
        t->cfg.remote_done(t->cfg.ready_ctx, o->waiter, count);
}

static void on_fetched(void *ctx, int rc)
{
    struct rop *o = ctx;
    struct tier *t = o->t;
    uint32_t m = 0;

    rops_del(t, o);
    while (rc == 0 && m < o->n && o->res[m] == 0)
        m++;
    /* the verified leading run becomes committed warm blocks; the rest
     * (behind a miss they could not be used) goes, children first */
    for (uint32_t i = 0; i < m; i++) {
        struct idx_entry *e = idx_at(t->idx, o->ids[i]);

        e->state = IDX_COMMITTED;
        e->stamp = ++t->clock;
        t->st.reserved--;
        t->st.blocks[TIER_L_WARM]++;
        t->st.bytes_in[TIER_L_WARM] += o->bytes;
        settle(t, o->ids[i], false);
    }
    for (uint32_t i = o->n; i-- > m;)
        drop_fetch(t, o->ids[i]);
    t->remote_hits += m; /* the blocks used: read and verified behind a miss do not count */
    remote_done(t, o, (int)m);
    free(o);
}

int tier_get_remote(struct tier *t, uint32_t ns, uint64_t block_bytes,
                    const struct tier_key *keys, size_t n, void *waiter)
{
    uint64_t slot = tier_slot_bytes(block_bytes), off;
    uint32_t p = TIER_NONE, k = 0;
    struct rop *o;
    size_t i;
    int cls, rc;

    if (!t->remote || !tier_remote_ns_on(t->remote, ns) || block_bytes == 0 ||
        slot > tier_ram_seg_bytes(t->ram) || (cls = tier_ram_class(t->ram, slot)) < 0)
        return 0;
    for (i = 0; i < n; i++) { /* the leading run here */
        uint32_t id = idx_find(t->idx, ns, &keys[i]);

        if (id == TIER_NONE || idx_at(t->idx, id)->state != IDX_COMMITTED)
            break;
        p = id;
    }
    if (i == n || !(o = rop_new(t, n - i, waiter)))
        return 0;
    o->bytes = block_bytes;
    /* absent keys from there, up to a quarter of warm: a long miss must not
     * evict the whole pool for blocks that may not be there */
    for (size_t j = i; j < n && (k + 1) * slot <= tier_ram_bytes(t->ram) / 4; j++) {
        uint32_t id = idx_find(t->idx, ns, &keys[j]);

        if (id != TIER_NONE &&
            (idx_at(t->idx, id)->state != IDX_GHOST || idx_at(t->idx, id)->leases > 0))
            break; /* present, being written (by a client or by us), or held */
        if (reserve_one(t, ns, cls, false, TIER_OWNER_REMOTE, p, &keys[j], id, &o->ids[k],
                        &off) < 0)
            break;
        o->bufs[k] = (uint8_t *)tier_ram_base(t->ram) + off;
        p = o->ids[k++];
    }
    rc = k ? tier_remote_get(t->remote, ns, keys + i, k, o->bufs, slot, o->res, on_fetched, o)
           : 0;
    if (rc < 0 || k == 0) {
        while (k-- > 0)
            drop_fetch(t, o->ids[k]);
        free(o);
        return rc;
    }
    o->n = k;
    rops_add(t, o);
    return (int)k;
}

static void on_probed(void *ctx, int rc)
{
    struct rop *o = ctx;
    struct tier *t = o->t;
    uint32_t m = 0;

    rops_del(t, o);
    while (rc == 0 && m < o->n && o->res[m] == 1)
        m++;
    remote_done(t, o, (int)m);
    free(o);
}

int tier_lookup_remote(struct tier *t, uint32_t ns, const struct tier_key *keys, size_t n,
                       void *waiter)
{
    struct rop *o;
    int rc;

    if (!t->remote || !tier_remote_ns_on(t->remote, ns) || n == 0)
        return 0;
    o = rop_new(t, n, waiter);
    if (!o)
        return -ENOMEM;
    o->probe = true;
    o->n = (uint32_t)n;
    rc = tier_remote_exists(t->remote, ns, keys, n, o->res, on_probed, o);
    if (rc < 0) {
        free(o);
        return rc;
    }
    rops_add(t, o);
    return (int)n;
}

int tier_event_fd(const struct tier *t)
{
    return t->cold ? tier_cold_event_fd(t->cold) : -1;
}

int tier_hot_fd(const struct tier *t)
{
    return t->hot ? tier_hot_event_fd(t->hot) : -1;
}

int tier_remote_fd(const struct tier *t)
{
    return t->remote ? tier_remote_event_fd(t->remote) : -1;
}

int tier_poll(struct tier *t, bool wait)
{
    int n = t->hot ? tier_hot_poll(t->hot, false) : 0, rc;

    if (n < 0)
        return n;
    if (t->remote) {
        /* waits on the remote only when nothing else is in flight */
        bool others = (t->cold && tier_cold_busy(t->cold)) ||
                      (t->hot && tier_hot_inflight(t->hot));

        rc = tier_remote_poll(t->remote, wait && n == 0 && !others);
        if (rc < 0)
            return rc;
        n += rc;
    }
    /* wait on whichever has work in flight: the disk first */
    if (t->cold && (tier_cold_busy(t->cold) || !wait || n > 0))
        rc = tier_cold_poll(t->cold, wait && n == 0);
    else if (t->hot)
        rc = tier_hot_poll(t->hot, wait && n == 0);
    else
        rc = 0;
    return rc < 0 ? rc : n + rc;
}

/* ---- operations ----------------------------------------------------- */

size_t tier_lookup(struct tier *t, uint32_t ns, const struct tier_key *keys, size_t n,
                   uint8_t *tiers)
{
    return tier_lookup_why(t, ns, keys, n, tiers, NULL);
}

/* Why key is a miss: its state now, else what last happened to it. */
static void miss_cause(struct tier *t, uint32_t ns, const struct tier_key *key, bool broken,
                       struct tier_misses *why, uint64_t now)
{
    uint32_t id = idx_find(t->idx, ns, key);
    uint8_t ev = TIER_EV_NONE, lvl;
    uint64_t at;

    if (id != TIER_NONE && idx_at(t->idx, id)->state == IDX_COMMITTED) {
        why->cause[broken ? TIER_MISS_BROKEN : TIER_EV_NONE]++;
        return;
    }
    if (id != TIER_NONE && idx_at(t->idx, id)->state == IDX_RESERVED) {
        why->cause[TIER_MISS_WRITING]++;
        return;
    }
    if (!tier_why_find(t->why, ns, key, &ev, &lvl, &at))
        ev = TIER_EV_NONE;
    why->cause[ev]++;
    if (ev == TIER_EV_DROPPED || ev == TIER_EV_EVICTED)
        why->evicted_age_ms += now - at;
}

size_t tier_lookup_why(struct tier *t, uint32_t ns, const struct tier_key *keys, size_t n,
                       uint8_t *tiers, struct tier_misses *why)
{
    size_t hits = 0, i;
    bool leading = true;

    for (i = 0; i < n; i++) {
        uint32_t id;
        uint8_t lvl = TIER_L_NONE;

        /* the bucket array is far larger than cache: fetch a few keys ahead */
        if (i + 4 < n)
            idx_prefetch(t->idx, ns, &keys[i + 4]);
        id = idx_find(t->idx, ns, &keys[i]);
        if (id != TIER_NONE && idx_at(t->idx, id)->state == IDX_COMMITTED)
            lvl = idx_at(t->idx, id)->level;
        if (tiers)
            tiers[i] = lvl;
        if (leading && lvl != TIER_L_NONE)
            hits++;
        else if (leading)
            leading = false;
        if (!leading && !tiers)
            break;
    }
    t->st.lookups++;
    t->st.lookup_keys += n;
    t->st.lookup_hits += hits;
    t->st.misses += n - hits;
    if (why && hits < n) {
        uint64_t now = now_ms();

        /* O(misses): only lookups that miss pay for their diagnosis */
        for (size_t j = hits; j < n; j++)
            miss_cause(t, ns, &keys[j], j > hits, why, now);
    }
    return hits;
}

void tier_miss_why(struct tier *t, uint32_t ns, const struct tier_key *keys, size_t n,
                   struct tier_misses *why)
{
    uint64_t now = n ? now_ms() : 0;

    for (size_t j = 0; j < n; j++)
        miss_cause(t, ns, &keys[j], j > 0, why, now);
}

void tier_story_get(struct tier *t, uint32_t ns, const struct tier_key *key,
                    struct tier_story *out)
{
    uint32_t id = idx_find(t->idx, ns, key);
    uint64_t at;

    *out = (struct tier_story){ 0 };
    if (id != TIER_NONE && idx_at(t->idx, id)->state == IDX_COMMITTED) {
        const struct idx_entry *e = idx_at(t->idx, id);

        out->present = true;
        out->level = e->level;
        out->on_disk = e->flags & IDX_F_COLD;
        out->leases = e->leases;
        out->chain_ok = e->parent == TIER_NONE ||
                        idx_at(t->idx, e->parent)->state == IDX_COMMITTED;
        return;
    }
    if (id != TIER_NONE && idx_at(t->idx, id)->state == IDX_RESERVED) {
        out->writing = true;
        return;
    }
    if (tier_why_find(t->why, ns, key, &out->event, &out->event_level, &at))
        out->event_age_ms = now_ms() - at;
}

/* Undo one reservation: the slot goes back; the entry too, unless children
 * still point at it (then it stays as an invisible ghost). */
static void drop_reserved(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);

    tier_ram_free(e->level == TIER_L_HOT ? t->hram : t->ram, e->off);
    t->st.reserved--;
    remember(t, id, TIER_EV_ABORTED, e->level);
    warm_lose(t, id, false);
    forget(t, id, false); /* and durable commits that deduplicated against it fail */
}

/* Whether a is id or below it (a chain cannot run through itself: a key
 * named as its own ancestor is bad input, and is not linked). O(depth). */
static bool descends(const struct tier *t, uint32_t a, uint32_t id)
{
    for (; a != TIER_NONE; a = idx_at(t->idx, a)->parent)
        if (a == id)
            return true;
    return false;
}

/* Reserve one absent (or ghost) key under parent p. */
static int reserve_one(struct tier *t, uint32_t ns, int cls, bool hot, uint32_t owner,
                       uint32_t p, const struct tier_key *key, uint32_t ghost,
                       uint32_t *id_out, uint64_t *off_out)
{
    uint32_t id = ghost;
    struct idx_entry *e;
    int rc;

    if (id == TIER_NONE) {
        rc = idx_insert(t->idx, ns, key, &id);
        if (rc < 0)
            return rc;
        set_parent(t, id, p);
    } else if (p != TIER_NONE && idx_at(t->idx, id)->parent != p && !descends(t, p, id)) {
        /* a ghost stood for the key with another parent or none (the
         * absent start of a chain put first, a block whose parent never
         * reached the disk): the block hangs under p now, or p could leave
         * before it and leaf-first would not hold (put with no parent, as
         * a sliding window's are, it keeps the link it had) */
        uint32_t old = idx_at(t->idx, id)->parent;

        /* linked under p first: a ghost p above old must not go with
         * old's chain (it would be freed, and id hang under a free entry) */
        set_parent(t, id, p);
        if (old != TIER_NONE)
            child_gone(t, old, false);
    }
    e = idx_at(t->idx, id);
    e->state = IDX_RESERVED;
    e->owner = owner;
    e->cls = (uint8_t)cls;
    /* counted in its tier before the slot is found, so eviction cannot take p;
     * a hot slot is never made by evicting (copies down are asynchronous) */
    set_level(t, id, hot ? TIER_L_HOT : TIER_L_WARM, false);
    rc = hot ? tier_ram_alloc(t->hram, cls, id, off_out) : alloc_slot(t, cls, id, off_out);
    if (rc < 0) {
        warm_lose(t, id, false);
        forget(t, id, false);
        return rc;
    }
    idx_at(t->idx, id)->off = *off_out;
    t->st.reserved++;
    *id_out = id;
    return 0;
}

static int reserve_in(struct tier *t, bool hot, uint32_t ns, uint64_t block_bytes,
                      uint32_t owner, const struct tier_key *parent,
                      const struct tier_key *keys, size_t n, uint32_t *ids, uint64_t *offs)
{
    struct tier_ram *pool = hot ? t->hram : t->ram;
    uint64_t slot = tier_slot_bytes(block_bytes);
    uint32_t p = parent ? idx_find(t->idx, ns, parent) : TIER_NONE, ghost_parent = TIER_NONE;
    size_t i, count = 0, dedup = 0;
    int cls, rc = 0;

    if (block_bytes == 0 || slot > tier_ram_seg_bytes(pool))
        return -EINVAL;
    cls = tier_ram_class(pool, slot);
    if (cls < 0)
        return cls;
    if (parent && p == TIER_NONE) {
        /* the parent is not stored: the chain hangs under a ghost for it,
         * so its blocks link up if the parent is put before they are
         * committed, and are swept as orphans (reachable by no lookup) if
         * not, instead of posing as a chain's root */
        rc = idx_insert(t->idx, ns, parent, &ghost_parent);
        if (rc < 0)
            return rc;
        idx_at(t->idx, ghost_parent)->state = IDX_GHOST;
        p = ghost_parent;
    }
    for (i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns, &keys[i]), ghost = TIER_NONE;

        ids[i] = TIER_NONE;
        offs[i] = UINT64_MAX;
        /* present (any tier), being written, or a lost block still leased by
         * a getter: nothing to write now */
        if (id != TIER_NONE && (idx_at(t->idx, id)->state != IDX_GHOST ||
                                idx_at(t->idx, id)->leases > 0)) {
            dedup++;
            p = id;
            continue;
        }
        ghost = id;
        rc = reserve_one(t, ns, cls, hot, owner, p, &keys[i], ghost, &ids[i], &offs[i]);
        if (rc < 0)
            break;
        p = ids[i];
        count++;
    }
    if (rc < 0) {
        /* all or nothing: children before parents */
        while (i-- > 0)
            if (ids[i] != TIER_NONE) {
                drop_reserved(t, ids[i]);
                ids[i] = TIER_NONE;
                offs[i] = UINT64_MAX;
            }
        if (ghost_parent != TIER_NONE)
            drop_idle_ghost(t, ghost_parent); /* (freed already if it was a key too) */
        return rc;
    }
    /* nothing hangs under it (all deduplicated); a key equal to the parent
     * is reserved in the ghost made for it, which is then no ghost */
    if (ghost_parent != TIER_NONE)
        drop_idle_ghost(t, ghost_parent);
    t->st.puts++;
    t->st.dedup_blocks += dedup;
    return (int)count;
}

int tier_reserve(struct tier *t, uint32_t ns, uint64_t block_bytes, uint32_t owner,
                 const struct tier_key *parent, const struct tier_key *keys, size_t n,
                 uint32_t *ids, uint64_t *offs)
{
    return reserve_in(t, false, ns, block_bytes, owner, parent, keys, n, ids, offs);
}

int tier_reserve_hot(struct tier *t, uint32_t ns, uint64_t block_bytes, uint32_t owner,
                     const struct tier_key *parent, const struct tier_key *keys, size_t n,
                     uint32_t *ids, uint64_t *offs)
{
    if (!t->hot)
        return -EOPNOTSUPP;
    return reserve_in(t, true, ns, block_bytes, owner, parent, keys, n, ids, offs);
}

static void dwaits_run(struct tier *t, uint32_t id);

size_t tier_commit(struct tier *t, uint32_t ns, uint64_t block_bytes, uint32_t owner,
                   const struct tier_key *keys, size_t n)
{
    size_t done = 0;

    for (size_t i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns, &keys[i]);
        struct idx_entry *e;

        if (id == TIER_NONE)
            continue;
        e = idx_at(t->idx, id);
        if (e->state != IDX_RESERVED || e->owner != owner)
            continue;
        e->state = IDX_COMMITTED;
        e->stamp = ++t->clock;
        t->st.reserved--;
        t->st.put_blocks++;
        t->st.blocks[e->level]++;
        t->st.bytes_in[e->level] += block_bytes;
        done++;
        /* write-through: on disk at once, so leaving warm later is free; a
         * full queue or disk leaves it to the background mover */
        if (e->level != TIER_L_WARM || !t->write_through || demote_for(t, id, false, NULL) < 0)
            settle(t, id, false);
        /* write-through to the remote tier, from warm (hot blocks stay on
         * the device; they are written if they come down and leave warm
         * under the on-demotion policy) */
        if (t->remote && t->cfg.remote_policy == TIER_REMOTE_WRITE_THROUGH &&
            idx_at(t->idx, id)->level == TIER_L_WARM)
            remote_put(t, id, true);
        orphan_check(t, id);
        if (t->dwaits)
            dwaits_run(t, id); /* durable commits that deduplicated against it */
    }
    return done;
}

/* Make committed id durable for waiter: 0 when it is already, 1 when waiter
 * now waits for a write (one ready callback for id will come), or an error
 * (-EBUSY: the disk's queue is full, try again after a poll). */
static int durable_one(struct tier *t, uint32_t id, void *waiter)
{
    struct idx_entry *e = idx_at(t->idx, id);
    struct move *m;
    int rc;

    if (e->flags & IDX_F_COLD)
        return 0;
    if (e->flags & IDX_F_DEMOTING) { /* a write to disk: join it */
        m = move_of(t, id, MV_DEMOTE);
        if (!m)
            return -EIO; /* the flag without its move: cannot happen */
        rc = wait_add(&m->ws, waiter);
        m->evict = false; /* a block someone made durable stays warm, as it would */
        return rc < 0 ? rc : 1;
    }
    if (!(e->flags & IDX_F_HOTDOWN) && e->level == TIER_L_HOT) {
        /* on the device: copied down first, then written */
        rc = hot_down(t, id, NULL, NULL);
        if (rc < 0)
            return rc;
        e = idx_at(t->idx, id);
    }
    if (e->flags & IDX_F_HOTDOWN) { /* a copy from hot to warm: wait for what follows it */
        m = move_of(t, id, MV_HOT_DOWN);
        if (!m)
            return -EIO;
        rc = wait_add(&m->dws, waiter);
        return rc < 0 ? rc : 1;
    }
    if (e->level != TIER_L_WARM)
        return -EIO; /* a committed block is in hot, warm or on disk */
    rc = demote_for(t, id, false, waiter);
    return rc < 0 ? rc : 1;
}

static int dwait_add(struct tier *t, uint32_t id, void *waiter)
{
    struct dwait *d;

    /* once per (waiter, id) among this waiter's latest, at the head of the
     * list (a commit's keys are added in one run): O(batch), not O(every
     * wait of every client); a duplicate elsewhere costs one callback more,
     * which finds its positions answered and does nothing */
    for (d = t->dwaits; d && d->waiter == waiter; d = d->next)
        if (d->id == id)
            return 0;
    d = malloc(sizeof(*d));
    if (!d)
        return -ENOMEM;
    *d = (struct dwait){ .id = id, .waiter = waiter, .next = t->dwaits };
    t->dwaits = d;
    return 0;
}

static void ready_cb(struct tier *t, void *waiter, uint32_t id, int rc)
{
    if (t->cfg.ready && waiter) /* NULL: a detached commit's write, told to nobody */
        t->cfg.ready(t->cfg.ready_ctx, waiter, id, rc);
}

/* After a hot-to-warm copy landed (rc): start the writes its durable
 * commits wait for, or tell them why not. */
static void durable_after(struct tier *t, uint32_t id, struct waiters *dws, int rc)
{
    for (uint32_t i = 0; i < dws->n; i++) {
        int r = rc;

        if (r == 0 && idx_at(t->idx, id)->state == IDX_COMMITTED)
            r = durable_one(t, id, dws->w[i]);
        if (r == -EBUSY && dwait_add(t, id, dws->w[i]) == 0)
            continue; /* the disk's queue is full: tier_maintain tries again */
        if (r != 1)
            ready_cb(t, dws->w[i], id, r > 0 ? 0 : r);
    }
}

/* id, which durable commits waited for, was committed: start their writes.
 * Its entries leave the list before any write starts: a write can evict a
 * block from the disk, and that block's own waits are failed (and freed)
 * from within, so nothing may hold a pointer into the list meanwhile. */
static void dwaits_run(struct tier *t, uint32_t id)
{
    struct dwait *mine = NULL, **pp = &t->dwaits;

    if (idx_at(t->idx, id)->state != IDX_COMMITTED)
        return;
    while (*pp) {
        struct dwait *d = *pp;

        if (d->id != id) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        d->next = mine;
        mine = d;
    }
    while (mine) {
        struct dwait *d = mine;
        int r = idx_at(t->idx, id)->state == IDX_COMMITTED ? durable_one(t, id, d->waiter)
                                                           : -ENODATA;

        mine = d->next;
        if (r == -EBUSY) { /* the disk's queue is full: back on the list for the next turn */
            d->next = t->dwaits;
            t->dwaits = d;
            continue;
        }
        if (r != 1)
            ready_cb(t, d->waiter, id, r);
        free(d);
    }
}

/* The waits tier_maintain tries again (their disk queue was full): every
 * committed id waited for, each once (ids gathered first: the list changes
 * under each run). O(waits^2) for the gathering: the list holds a few. */
static void dwaits_retry(struct tier *t)
{
    uint32_t lim = idx_id_limit(t->idx), n = 0, cap = 0, *ids;

    for (struct dwait *d = t->dwaits; d; d = d->next)
        cap++;
    ids = malloc(cap * sizeof(*ids));
    if (!ids)
        return; /* tried again at the next turn */
    for (struct dwait *d = t->dwaits; d; d = d->next) {
        bool seen = false;

        for (uint32_t i = 0; i < n && !seen; i++)
            seen = ids[i] == d->id;
        if (!seen && d->id < lim && idx_at(t->idx, d->id)->state == IDX_COMMITTED)
            ids[n++] = d->id;
    }
    for (uint32_t i = 0; i < n; i++)
        dwaits_run(t, ids[i]);
    free(ids);
}

/* id will never be committed (its reservation is gone): fail its waiters.
 * They leave the list before any is told: a waiter told may close, and
 * its close give back reservations that fail waits of this list from
 * within (no pointer into it may be held across a callback). */
static void dwaits_fail(struct tier *t, uint32_t id, int rc)
{
    struct dwait *mine = NULL, **pp = &t->dwaits;

    while (*pp) {
        struct dwait *d = *pp;

        if (d->id != id) {
            pp = &d->next;
            continue;
        }
        *pp = d->next;
        d->next = mine;
        mine = d;
    }
    while (mine) {
        struct dwait *d = mine;

        mine = d->next;
        ready_cb(t, d->waiter, id, rc);
        free(d);
    }
}

int tier_commit_durable(struct tier *t, uint32_t ns, uint64_t block_bytes, uint32_t owner,
                        const struct tier_key *keys, size_t n, void *waiter, uint32_t *ids,
                        uint32_t *pending)
{
    size_t done;
    int err = 0;

    *pending = 0;
    if (!t->cold)
        return -EOPNOTSUPP;
    done = tier_commit(t, ns, block_bytes, owner, keys, n);
    /* every key of the batch, whoever wrote it: a durable ack vouches for
     * each, so a key not stored (or not stored yet) is never skipped */
    for (size_t i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns, &keys[i]);
        int rc;

        if (id == TIER_NONE || idx_at(t->idx, id)->state == IDX_GHOST) {
            /* deduplicated at reserve against a block dropped (or a put
             * aborted) since: there is nothing to make durable */
            err = -ENODATA;
            continue;
        }
        if (idx_at(t->idx, id)->state == IDX_RESERVED) {
            /* another client is still writing it: wait for its commit */
            rc = dwait_add(t, id, waiter);
            if (rc < 0)
                return rc;
            ids[(*pending)++] = id;
            continue;
        }
        while ((rc = durable_one(t, id, waiter)) == -EBUSY)
            tier_cold_poll(t->cold, true);
        if (rc < 0)
            return rc;
        if (rc == 1)
            ids[(*pending)++] = id;
    }
    return err ? err : (int)done;
}

size_t tier_abort(struct tier *t, uint32_t ns, uint32_t owner, const struct tier_key *keys,
                  size_t n)
{
    size_t done = 0;

    for (size_t i = n; i-- > 0;) {
        uint32_t id = idx_find(t->idx, ns, &keys[i]);

        if (id == TIER_NONE || idx_at(t->idx, id)->state != IDX_RESERVED ||
            idx_at(t->idx, id)->owner != owner)
            continue;
        drop_reserved(t, id);
        done++;
    }
    return done;
}

size_t tier_abort_ids(struct tier *t, uint32_t owner, const uint32_t *ids, size_t n)
{
    size_t done = 0;

    /* ids may be stale (committed since, or reused): check state and owner;
     * TIER_NONE (a deduplicated key in a reserve's ids) is skipped */
    for (size_t i = n; i-- > 0;) {
        struct idx_entry *e;

        if (ids[i] == TIER_NONE)
            continue;
        e = idx_at(t->idx, ids[i]);
        if (e->state != IDX_RESERVED || e->owner != owner)
            continue;
        drop_reserved(t, ids[i]);
        t->st.reclaimed++;
        done++;
    }
    return done;
}

bool tier_reserved_by(const struct tier *t, uint32_t id, uint32_t owner)
{
    const struct idx_entry *e = idx_at(t->idx, id);

    return e->state == IDX_RESERVED && e->owner == owner;
}

int tier_get_ex(struct tier *t, uint32_t ns, uint64_t block_bytes, const struct tier_key *keys,
                size_t n, unsigned flags, uint32_t *ids, uint64_t *offs, uint8_t *tiers,
                void *waiter, uint32_t *pending)
{
    uint64_t slot = tier_slot_bytes(block_bytes), warm = 0, hot = 0;
    size_t i;

    if (pending)
        *pending = 0;
    for (i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns, &keys[i]);
        struct idx_entry *e;
        struct move *m;

        if (!leasable(t, id))
            break;
        e = idx_at(t->idx, id);
        if (tiers)
            tiers[i] = TIER_L_WARM;
        ids[i] = id;
        if (e->level == TIER_L_HOT && (flags & TIER_GET_HOT)) {
            /* the caller reads the device pool: leased where it is, even
             * while a copy down is in flight (the slot stays the lease's) */
            if (tier_ram_class_slot(t->hram, e->cls) != slot)
                goto out_inval;
            if (tiers)
                tiers[i] = TIER_L_HOT;
            hot++;
            e->hleases++;
            ids[i] = id | TIER_LEASE_HOT;
        } else if (e->level == TIER_L_WARM) {
            if (tier_ram_class_slot(t->ram, e->cls) != slot)
                goto out_inval;
            warm++;
        } else if (e->level == TIER_L_HOT) {
            /* clients read warm: a hot block is copied down for them (any
             * number join one copy) */
            uint64_t woff;

            if (!pending)
                break;
            m = (e->flags & IDX_F_HOTDOWN) ? move_of(t, id, MV_HOT_DOWN) : NULL;
            if (m) {
                if (wait_add(&m->ws, waiter) < 0)
                    break;
                woff = m->warm_off;
            } else if (hot_down(t, id, waiter, &woff) < 0) {
                break;
            }
            (*pending)++;
            hot++;
            e = idx_at(t->idx, id);
            e->leases++;
            e->stamp = ++t->clock;
            settle(t, id, false);
            offs[i] = woff;
            continue;
        } else if (!pending || !t->cold) {
            break; /* cold, and the caller cannot wait */
        } else if (e->flags & IDX_F_PROMOTING) {
            m = move_of(t, id, MV_PROMOTE); /* a read for another getter: join it */
            if (!m || wait_add(&m->ws, waiter) < 0)
                break;
            (*pending)++;
        } else {
            if (promote(t, id, slot, waiter) < 0)
                break;
            (*pending)++;
        }
        e = idx_at(t->idx, id);
        e->leases++;
        e->stamp = ++t->clock;
        if ((flags & TIER_GET_PROMOTE) && t->hot && e->level != TIER_L_HOT)
            e->flags |= IDX_F_WANTHOT; /* copied up once its leases are back */
        settle(t, id, false);
        offs[i] = e->off;
    }
    t->st.gets++;
    t->st.get_blocks += i;
    t->st.hits[TIER_L_WARM] += warm;
    t->st.hits[TIER_L_HOT] += hot;
    t->st.bytes_out[TIER_L_WARM] += i * block_bytes;
    t->st.misses += n - i;
    t->st.leases_active += i;
    return (int)i;
out_inval:
    t->st.leases_active += i; /* tier_release takes them off again */
    tier_release(t, ids, i, false);
    return -EINVAL;
}

int tier_get_async(struct tier *t, uint32_t ns, uint64_t block_bytes,
                   const struct tier_key *keys, size_t n, uint32_t *ids, uint64_t *offs,
                   void *waiter, uint32_t *pending)
{
    return tier_get_ex(t, ns, block_bytes, keys, n, 0, ids, offs, NULL, waiter, pending);
}

int tier_get(struct tier *t, uint32_t ns, uint64_t block_bytes, const struct tier_key *keys,
             size_t n, uint32_t *ids, uint64_t *offs)
{
    return tier_get_ex(t, ns, block_bytes, keys, n, 0, ids, offs, NULL, NULL, NULL);
}

void tier_release(struct tier *t, const uint32_t *ids, size_t n, bool reclaimed)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t id = TIER_LEASE_ID(ids[i]);
        struct idx_entry *e = idx_at(t->idx, id);

        e->leases--;
        if (ids[i] & TIER_LEASE_HOT) {
            e->hleases--;
            /* the last in-place reader of a hot copy the block has left */
            if (e->hleases == 0 && (e->flags & IDX_F_HOTKEPT)) {
                tier_ram_free(t->hram, e->hoff);
                e->flags &= (uint16_t)~IDX_F_HOTKEPT;
            }
        }
        if (drop_idle_ghost(t, id))
            continue; /* a block lost while leased (a failed promotion) goes now */
        settle(t, id, false);
        orphan_check(t, id);
        maybe_hot_up(t, id);
    }
    t->st.leases_active -= n;
    if (reclaimed)
        t->st.reclaimed += n;
}

/* Take committed, unpinned id out of every tier, the disk included, for
 * reason ev. false when its disk copy could not be deleted (it stays). */
static bool drop_block(struct tier *t, uint32_t id, uint8_t ev)
{
    struct idx_entry *e = idx_at(t->idx, id);

    if (e->flags & IDX_F_COLD) {
        if (tier_cold_remove(t->cold, e->ns, &e->key) < 0)
            return false; /* the durable copy stays: so does the entry */
        t->st.blocks[TIER_L_COLD]--;
    }
    e = idx_at(t->idx, id);
    if (e->flags & (IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU))
        lru_unlink(t, id);
    if (e->level == TIER_L_HOT) {
        tier_ram_free(t->hram, e->off);
        t->st.blocks[TIER_L_HOT]--;
        warm_lose(t, id, true);
    }
    if (e->level == TIER_L_WARM) {
        tier_ram_free(t->ram, e->off);
        t->st.blocks[TIER_L_WARM]--;
        warm_lose(t, id, true);
    }
    remember(t, id, ev, idx_at(t->idx, id)->level);
    forget(t, id, true);
    return true;
}

size_t tier_remove(struct tier *t, uint32_t ns, const struct tier_key *keys, size_t n)
{
    size_t done = 0;

    for (size_t i = n; i-- > 0;) {
        uint32_t id = idx_find(t->idx, ns, &keys[i]);
        struct idx_entry *e;

        if (id == TIER_NONE)
            continue;
        e = idx_at(t->idx, id);
        if (e->state != IDX_COMMITTED || e->leases || e->nchild ||
            (e->flags & IDX_F_MOVING))
            continue;
        if (!drop_block(t, id, TIER_EV_REMOVED))
            continue;
        t->st.removes++;
        done++;
    }
    return done;
}

/* A committed block whose parent is gone can be reached by no lookup. */
static void orphan_check(struct tier *t, uint32_t id)
{
    const struct idx_entry *e = idx_at(t->idx, id);

    if (e->state == IDX_COMMITTED && e->parent != TIER_NONE &&
        idx_at(t->idx, e->parent)->state == IDX_GHOST)
        t->orphans = true;
}

/* Drop every block in memory that no lookup can reach: a committed block
 * with a ghost somewhere above it (a parent lost: a failed read, a put
 * aborted under another client's, a put under a parent not stored) and no
 * copy on disk. A block on disk stays: a durable block must survive, and a
 * put of its lost prefix (an engine recomputing it) links it up again.
 * O(entries): each entry's reachability is found once, by a walk up that
 * stops at the first entry already known. Pinned ones (leased, moving) go
 * once they are free (their release or landing asks for another sweep). */
static void sweep_orphans(struct tier *t)
{
    enum { UNKNOWN = 0, REACHED = 1, CUT = 2 };
    uint32_t lim = idx_id_limit(t->idx), *path, depth;
    uint8_t *st;

    t->orphans = false;
    st = calloc(lim ? lim : 1, 1);
    path = malloc((lim ? lim : 1) * sizeof(*path));
    if (!st || !path) {
        t->orphans = true; /* tried again at the next turn */
        free(st);
        free(path);
        return;
    }
    for (uint32_t id = 0; id < lim; id++) {
        uint32_t p = id;
        uint8_t v;

        if (idx_at(t->idx, id)->state != IDX_COMMITTED || st[id])
            continue;
        depth = 0;
        /* up to the root, a ghost, or an entry already known */
        for (;;) {
            const struct idx_entry *e = idx_at(t->idx, p);

            if (st[p]) {
                v = st[p];
                break;
            }
            if (e->state == IDX_GHOST) {
                v = CUT;
                break;
            }
            path[depth++] = p;
            if (e->parent == TIER_NONE) {
                v = REACHED;
                break;
            }
            p = e->parent;
        }
        while (depth > 0)
            st[path[--depth]] = v;
    }
    for (uint32_t id = 0; id < lim; id++) {
        const struct idx_entry *e = idx_at(t->idx, id);

        /* entries freed by a drop below read as IDX_FREE when reached */
        if (st[id] != CUT || e->state != IDX_COMMITTED)
            continue;
        if (e->leases || (e->flags & (IDX_F_MOVING | IDX_F_COLD)))
            continue;
        drop_block(t, id, TIER_EV_DROPPED);
    }
    free(st);
    free(path);
}

int tier_purge_ns(struct tier *t, uint32_t ns)
{
    uint32_t lim = idx_id_limit(t->idx);
    int n = 0, rc;

    /* all or nothing: a block someone holds, writes or moves cannot go now */
    for (uint32_t id = 0; id < lim; id++) {
        const struct idx_entry *e = idx_at(t->idx, id);

        if (e->state != IDX_FREE && e->ns == ns &&
            (e->state == IDX_RESERVED || e->leases || (e->flags & IDX_F_MOVING)))
            return -EBUSY;
    }
    if (t->cold && (rc = tier_cold_remove_ns(t->cold, ns)) < 0)
        return rc; /* the disk copies stay: so does everything else */
    for (uint32_t id = 0; id < lim; id++) {
        struct idx_entry *e = idx_at(t->idx, id);

        /* ids freed by child_gone() below read as IDX_FREE when reached */
        if (e->state != IDX_COMMITTED || e->ns != ns)
            continue;
        if (e->flags & (IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU))
            lru_unlink(t, id);
        if (e->flags & IDX_F_COLD)
            t->st.blocks[TIER_L_COLD]--;
        if (e->level == TIER_L_HOT || e->level == TIER_L_WARM) {
            tier_ram_free(e->level == TIER_L_HOT ? t->hram : t->ram, e->off);
            t->st.blocks[e->level]--;
        }
        remember(t, id, TIER_EV_REMOVED, e->level);
        warm_lose(t, id, true);
        forget(t, id, true);
        t->st.removes++;
        n++;
    }
    return n;
}

/* ---- restart and shutdown ----------------------------------------------- */

struct load {
    struct tier *t;
    int n, err;
};

static int load_one(void *ctx, uint32_t ns, const struct tier_key *key,
                    const struct tier_key *parent, uint64_t len)
{
    struct load *l = ctx;
    struct idx_entry *e;
    uint32_t id;
    int rc;

    (void)parent; /* linked in a second pass, once every entry exists */
    (void)len;
    if (idx_find(l->t->idx, ns, key) != TIER_NONE)
        return 0;
    rc = idx_insert(l->t->idx, ns, key, &id);
    if (rc < 0)
        return rc;
    e = idx_at(l->t->idx, id);
    e->state = IDX_COMMITTED;
    e->level = TIER_L_COLD;
    e->flags = IDX_F_COLD;
    l->t->st.blocks[TIER_L_COLD]++;
    l->n++;
    return 0;
}

static int link_one(void *ctx, uint32_t ns, const struct tier_key *key,
                    const struct tier_key *parent, uint64_t len)
{
    struct load *l = ctx;
    uint32_t id = idx_find(l->t->idx, ns, key), p;

    (void)len;
    if (!parent || id == TIER_NONE || idx_at(l->t->idx, id)->parent != TIER_NONE)
        return 0;
    p = idx_find(l->t->idx, ns, parent);
    if (p == TIER_NONE) {
        /* its parent never reached the disk (a crash): a ghost stands for it,
         * so that a put of the parent key (the engine recomputing the lost
         * prefix) links this durable block up again */
        int rc = idx_insert(l->t->idx, ns, parent, &p);

        if (rc < 0)
            return rc;
        idx_at(l->t->idx, p)->state = IDX_GHOST;
        l->t->orphans = true;
    }
    if (p != id)
        set_parent(l->t, id, p);
    return 0;
}

int tier_load_cold(struct tier *t)
{
    struct load l = { .t = t };
    int rc;

    if (!t->cold)
        return 0;
    rc = tier_cold_scan(t->cold, load_one, &l);
    if (rc == 0)
        rc = tier_cold_scan(t->cold, link_one, &l);
    if (rc < 0)
        return rc;
    /* with every parent linked, the leaves go on the cold list */
    for (uint32_t id = 0; id < idx_id_limit(t->idx); id++)
        if (idx_at(t->idx, id)->state == IDX_COMMITTED)
            settle(t, id, false);
    return l.n;
}

int tier_flush_to_cold(struct tier *t)
{
    uint32_t lim = idx_id_limit(t->idx);
    int rc;

    if (!t->cold)
        return 0;
    /* copies up land first (they may move blocks to the device), then what
     * is on the device comes down to warm */
    while (t->hot && tier_hot_inflight(t->hot))
        if (tier_hot_poll(t->hot, true) < 0)
            break;
    for (uint32_t id = 0; t->hot && id < lim; id++) {
        struct idx_entry *e = idx_at(t->idx, id);

        if (e->state == IDX_COMMITTED && e->level == TIER_L_HOT &&
            !(e->flags & IDX_F_MOVING) && hot_down(t, id, NULL, NULL) < 0)
            break; /* warm is full of pinned blocks: these stay on the device */
    }
    while (t->hot && tier_hot_inflight(t->hot))
        if (tier_hot_poll(t->hot, true) < 0)
            break;
    for (uint32_t id = 0; id < lim; id++) {
        struct idx_entry *e = idx_at(t->idx, id);

        if (e->state != IDX_COMMITTED || e->level != TIER_L_WARM ||
            (e->flags & (IDX_F_COLD | IDX_F_MOVING)))
            continue;
        while ((rc = demote(t, id)) == -EBUSY)
            tier_cold_poll(t->cold, true);
        if (rc < 0)
            return rc;
    }
    return tier_cold_drain(t->cold);
}

/* ---- stats and checks --------------------------------------------------- */

void tier_stats_get(const struct tier *t, struct tier_stats *out)
{
    *out = t->st;
    out->bytes_used[TIER_L_WARM] = tier_ram_used(t->ram);
    out->bytes_capacity[TIER_L_WARM] = tier_ram_bytes(t->ram);
    out->index_entries = idx_count(t->idx);
    out->index_bytes = idx_mem_bytes(t->idx);
    out->memory_locked = tier_ram_locked(t->ram);
    out->huge_pages = tier_ram_huge(t->ram);
    if (t->hot) {
        out->bytes_used[TIER_L_HOT] = tier_ram_used(t->hram);
        out->bytes_capacity[TIER_L_HOT] = tier_ram_bytes(t->hram);
    }
    if (t->cold) {
        struct tier_cold_stats cs;

        tier_cold_stats_get(t->cold, &cs);
        out->bytes_used[TIER_L_COLD] = cs.bytes_used;
        out->bytes_capacity[TIER_L_COLD] = cs.bytes_capacity;
        out->checksum_errors = cs.checksum_errors;
        out->io_errors = cs.io_errors;
    }
    if (t->remote) {
        struct tier_remote_stats rs;

        tier_remote_stats_get(t->remote, &rs);
        out->remote_hits = t->remote_hits;
        out->remote_misses = rs.misses;
        out->remote_puts = rs.puts;
        out->remote_bytes_in = rs.bytes_in;
        out->remote_bytes_out = rs.bytes_out;
        out->remote_errors = rs.errors + t->remote_skipped;
        out->remote_checksum_errors = rs.checksum_errors;
        out->remote_probes = rs.probes;
        out->remote_probe_hits = rs.probe_hits;
        out->remote_redirects = rs.redirects;
    }
}

double tier_index_bytes_per_block(const struct tier *t)
{
    uint32_t n = idx_count(t->idx);

    return n ? (double)idx_mem_bytes(t->idx) / n : 0.0;
}

#define BAD(...) do { snprintf(why, cap, __VA_ARGS__); rc = -EUCLEAN; goto out; } while (0)

struct hold {
    uint64_t off;
    uint32_t id;
    uint8_t pool; /* 0 warm, 1 hot */
};

static int hold_cmp(const void *a, const void *b)
{
    const struct hold *x = a, *y = b;

    if (x->pool != y->pool)
        return x->pool < y->pool ? -1 : 1;
    return x->off < y->off ? -1 : x->off > y->off;
}

/* one holder of a slot, for the ownership check (room: 2 per entry + moves) */
#define HOLD(p, o, i)                                                            \
    do {                                                                         \
        if (nholds < holds_cap)                                                  \
            holds[nholds++] = (struct hold){ .off = (o), .id = (i), .pool = (p) }; \
    } while (0)

int tier_check(const struct tier *t, char *why, size_t cap)
{
    uint32_t lim = idx_id_limit(t->idx);
    size_t nmoves = 0, nholds = 0, holds_cap;
    struct hold *holds;
    uint32_t *kids = calloc(lim ? 3 * (size_t)lim : 1, sizeof(*kids)), *warm = kids + lim;
    uint32_t *hot = warm + lim;
    uint64_t used = 0, hused = 0, nres = 0, nwarm_blocks = 0, nhot_blocks = 0, leases = 0;
    uint64_t in_lru = 0;
    int rc = 0;

    for (const struct move *m = t->moves; m; m = m->next)
        nmoves++;
    holds_cap = 2 * (size_t)lim + 2 * nmoves + 1;
    holds = malloc(holds_cap * sizeof(*holds));
    if (!kids || !holds) {
        free(kids);
        free(holds);
        return -ENOMEM;
    }
    for (uint32_t id = 0; id < lim; id++) {
        const struct idx_entry *e = idx_at(t->idx, id);

        if (e->state == IDX_FREE || e->parent == TIER_NONE)
            continue;
        if (idx_at(t->idx, e->parent)->state == IDX_FREE)
            BAD("entry %u: parent %u is free", id, e->parent);
        kids[e->parent]++;
        warm[e->parent] += warm_res(e);
        hot[e->parent] += hot_res(e);
    }
    /* warm slots being filled from hot belong to their move until it lands */
    for (const struct move *m = t->moves; m; m = m->next) {
        if (m->hot_up) {
            /* and hot slots being filled from warm belong to theirs */
            if (tier_ram_tag_at(t->hram, m->hot_off) != m->id)
                BAD("move of %u: its hot slot belongs to %u", m->id,
                    tier_ram_tag_at(t->hram, m->hot_off));
            hused += tier_ram_class_slot(t->hram, m->hot_cls);
            HOLD(1, m->hot_off, m->id);
        }
        if (!m->hot_down)
            continue;
        if (tier_ram_tag_at(t->ram, m->warm_off) != m->id)
            BAD("move of %u: its warm slot belongs to %u", m->id,
                tier_ram_tag_at(t->ram, m->warm_off));
        used += tier_ram_class_slot(t->ram, m->warm_cls);
        HOLD(0, m->warm_off, m->id);
    }
    for (uint32_t id = 0; id < lim; id++) {
        const struct idx_entry *e = idx_at(t->idx, id);
        bool has_slot = (e->state == IDX_RESERVED || e->state == IDX_COMMITTED) &&
                        (e->level == TIER_L_WARM || (e->flags & IDX_F_PROMOTING));

        if (e->state == IDX_FREE)
            continue;
        if (kids[id] != e->nchild || warm[id] != e->nwarm || hot[id] != e->nhot)
            BAD("entry %u: nchild %u nwarm %u nhot %u, children say %u, %u and %u", id,
                e->nchild, e->nwarm, e->nhot, kids[id], warm[id], hot[id]);
        if (hot_leaf(e) != !!(e->flags & IDX_F_HLRU))
            BAD("entry %u: hot leaf %d but on a hot list %d", id, hot_leaf(e),
                !!(e->flags & IDX_F_HLRU));
        if (warm_leaf(t, e) != !!(e->flags & IDX_F_LRU))
            BAD("entry %u: leaf %d but in LRU %d", id, warm_leaf(t, e),
                !!(e->flags & IDX_F_LRU));
        if (e->hleases > e->leases)
            BAD("entry %u: %u leases in hot of %u in all", id, e->hleases, e->leases);
        if ((e->flags & IDX_F_HOTKEPT) && (e->hleases == 0 || e->level == TIER_L_HOT))
            BAD("entry %u: a kept hot slot with %u hot leases at level %u", id, e->hleases,
                e->level);
        if (e->flags & IDX_F_HOTKEPT) {
            if (tier_ram_tag_at(t->hram, e->hoff) != id)
                BAD("entry %u: its kept hot slot at %llu belongs to %u", id,
                    (unsigned long long)e->hoff, tier_ram_tag_at(t->hram, e->hoff));
            hused += tier_ram_class_slot(t->hram, e->hcls);
            HOLD(1, e->hoff, id);
        }
        if (cold_leaf(e) != !!(e->flags & IDX_F_CLRU))
            BAD("entry %u: cold leaf %d but on the cold list %d", id, cold_leaf(e),
                !!(e->flags & IDX_F_CLRU));
        if (e->state == IDX_GHOST && e->nchild == 0 && e->leases == 0)
            BAD("entry %u: ghost without children or leases", id);
        if (e->leases && e->state != IDX_COMMITTED && e->state != IDX_GHOST)
            BAD("entry %u: leased but state %d", id, e->state);
        if (e->state == IDX_COMMITTED && e->level == TIER_L_COLD && !(e->flags & IDX_F_COLD))
            BAD("entry %u: cold without a cold copy", id);
        if (idx_find(t->idx, e->ns, &e->key) != id)
            BAD("entry %u: not found under its own key", id);
        if ((e->state == IDX_RESERVED || e->state == IDX_COMMITTED) &&
            e->level == TIER_L_HOT) {
            if (tier_ram_tag_at(t->hram, e->off) != id)
                BAD("entry %u: hot slot at %llu belongs to %u", id, (unsigned long long)e->off,
                    tier_ram_tag_at(t->hram, e->off));
            hused += tier_ram_class_slot(t->hram, e->cls);
            HOLD(1, e->off, id);
            has_slot = false;
        }
        if (has_slot) {
            if (tier_ram_tag_at(t->ram, e->off) != id)
                BAD("entry %u: slot at %llu belongs to %u", id, (unsigned long long)e->off,
                    tier_ram_tag_at(t->ram, e->off));
            used += tier_ram_class_slot(t->ram, e->cls);
            HOLD(0, e->off, id);
        }
        nres += e->state == IDX_RESERVED;
        nwarm_blocks += e->state == IDX_COMMITTED && e->level == TIER_L_WARM;
        nhot_blocks += e->state == IDX_COMMITTED && e->level == TIER_L_HOT;
        leases += e->leases;
        in_lru += !!(e->flags & (IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU));
    }
    if (t->hot && hused != tier_ram_used(t->hram))
        BAD("hot slot bytes: entries hold %llu, pool says %llu", (unsigned long long)hused,
            (unsigned long long)tier_ram_used(t->hram));
    if (nhot_blocks != t->st.blocks[TIER_L_HOT])
        BAD("hot blocks %llu, counted %llu", (unsigned long long)nhot_blocks,
            (unsigned long long)t->st.blocks[TIER_L_HOT]);
    if (used != tier_ram_used(t->ram))
        BAD("slot bytes: entries hold %llu, pool says %llu", (unsigned long long)used,
            (unsigned long long)tier_ram_used(t->ram));
    /* remote writes hold leases of their own (remote_pins), not a getter's */
    if (nres != t->st.reserved || nwarm_blocks != t->st.blocks[TIER_L_WARM] ||
        leases != t->st.leases_active + t->remote_pins)
        BAD("counters: reserved %llu/%llu warm blocks %llu/%llu leases %llu/%llu",
            (unsigned long long)nres, (unsigned long long)t->st.reserved,
            (unsigned long long)nwarm_blocks, (unsigned long long)t->st.blocks[TIER_L_WARM],
            (unsigned long long)leases, (unsigned long long)t->st.leases_active);
    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        for (int k = 0; k < 2; k++) {
            uint32_t prev = TIER_NONE;

            for (uint32_t id = t->lru[c][k].head; id != TIER_NONE;
                 id = idx_at(t->idx, id)->next) {
                const struct idx_entry *e = idx_at(t->idx, id);

                if (!in_lru--)
                    BAD("LRU lists hold more entries than are marked (a loop?)");
                if (e->prev != prev || e->cls != c || !(e->flags & IDX_F_LRU) ||
                    !!(e->flags & IDX_F_COLD) != (k == CLEAN))
                    BAD("LRU %d/%d: bad link or member at %u", c, k, id);
                prev = id;
            }
            if (t->lru[c][k].tail != prev)
                BAD("LRU %d/%d: tail %u, walk ends at %u", c, k, t->lru[c][k].tail, prev);
        }
    {
        uint32_t prev = TIER_NONE;

        for (uint32_t id = t->clru.head; id != TIER_NONE; id = idx_at(t->idx, id)->next) {
            if (!in_lru--)
                BAD("LRU lists hold more entries than are marked (a loop?)");
            if (idx_at(t->idx, id)->prev != prev || !(idx_at(t->idx, id)->flags & IDX_F_CLRU))
                BAD("cold LRU: bad link or member at %u", id);
            prev = id;
        }
        if (t->clru.tail != prev)
            BAD("cold LRU: tail %u, walk ends at %u", t->clru.tail, prev);
    }
    for (int c = 0; c < TIER_RAM_CLASSES; c++) {
        uint32_t prev = TIER_NONE;

        for (uint32_t id = t->hlru[c].head; id != TIER_NONE; id = idx_at(t->idx, id)->next) {
            const struct idx_entry *e = idx_at(t->idx, id);

            if (!in_lru--)
                BAD("LRU lists hold more entries than are marked (a loop?)");
            if (e->prev != prev || e->cls != c || !(e->flags & IDX_F_HLRU))
                BAD("hot LRU %d: bad link or member at %u", c, id);
            prev = id;
        }
        if (t->hlru[c].tail != prev)
            BAD("hot LRU %d: tail %u, walk ends at %u", c, t->hlru[c].tail, prev);
    }
    if (in_lru)
        BAD("%llu entries marked in the LRU are on no list", (unsigned long long)in_lru);
    /* slot ownership: no slot of either pool has two holders (an entry, a
     * move filling it, a kept hot copy) */
    qsort(holds, nholds, sizeof(*holds), hold_cmp);
    for (size_t i = 1; i < nholds; i++)
        if (holds[i].pool == holds[i - 1].pool && holds[i].off == holds[i - 1].off)
            BAD("%s slot at %llu has two holders (%u and %u)", holds[i].pool ? "hot" : "warm",
                (unsigned long long)holds[i].off, holds[i - 1].id, holds[i].id);
    for (const struct dwait *d = t->dwaits; d; d = d->next)
        if (d->id >= lim || (idx_at(t->idx, d->id)->state != IDX_RESERVED &&
                             idx_at(t->idx, d->id)->state != IDX_COMMITTED))
            BAD("a durable commit waits for entry %u, which is neither reserved nor committed",
                d->id);
out:
    free(kids);
    free(holds);
    return rc;
}
