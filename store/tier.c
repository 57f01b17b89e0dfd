/* SPDX-License-Identifier: MIT */
/*
 * tier.c - the store: reservations, leases, prefix lookups and leaf-first
 * LRU eviction over the index (idx.c) and the warm pool (tier_ram.c).
 *
 * Design note: leaf-first LRU. Each entry names its parent (the block before
 * it in its chain) and counts its children. Only "leaves" can be evicted: an
 * entry that is committed, unleased and has no children. Those, and only
 * those, are linked into an LRU list of their size class (in_lru), so picking
 * a victim is O(1): the list's tail. Accessed blocks go to the head. When the
 * last child of a parent is evicted, the parent becomes a leaf and goes to
 * the *tail*: its subtree was the coldest thing in the pool, so the rest of
 * that chain should follow before anything warmer. A chain is thus evicted
 * from its end back towards its root, and a lookup never finds a child whose
 * parent is gone.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "idx.h"
#include "tier.h"
#include "tier_ram.h"

struct lru {
    uint32_t head, tail; /* most / least recently used leaf of a class */
};

struct tier {
    struct idx *idx;
    struct tier_ram *ram;
    struct lru lru[TIER_RAM_CLASSES];
    uint32_t clock;                   /* bumps on every access; entries keep a stamp */
    uint64_t high_bytes, low_bytes;   /* watermarks in slot bytes */
    const struct tier_cold_ops *cold; /* NULL: blocks evicted from warm are dropped */
    void *cold_ctx;
    struct tier_stats st;             /* counters; gauges filled in tier_stats_get */
};

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
    rc = tier_ram_open(&rc_cfg, &t->ram);
    if (rc < 0)
        goto out_idx;
    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        t->lru[c].head = t->lru[c].tail = TIER_NONE;
    t->high_bytes = (uint64_t)(hi * (double)tier_ram_bytes(t->ram));
    t->low_bytes = (uint64_t)(lo * (double)tier_ram_bytes(t->ram));
    t->cold = cfg->cold;
    t->cold_ctx = cfg->cold_ctx;
    *out = t;
    return 0;
out_idx:
    idx_destroy(t->idx);
out_free:
    free(t);
    return rc;
}

void tier_destroy(struct tier *t)
{
    if (!t)
        return;
    tier_ram_close(t->ram);
    idx_destroy(t->idx);
    free(t);
}

int tier_pool_fd(const struct tier *t) { return tier_ram_fd(t->ram); }
uint64_t tier_pool_bytes(const struct tier *t) { return tier_ram_bytes(t->ram); }
void *tier_pool_base(const struct tier *t) { return tier_ram_base(t->ram); }
uint64_t tier_block_max(const struct tier *t) { return tier_ram_seg_bytes(t->ram); }

/* ---- LRU of leaves ---------------------------------------------------- */

static void lru_unlink(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);
    struct lru *l = &t->lru[e->cls];

    if (e->prev != TIER_NONE)
        idx_at(t->idx, e->prev)->next = e->next;
    else
        l->head = e->next;
    if (e->next != TIER_NONE)
        idx_at(t->idx, e->next)->prev = e->prev;
    else
        l->tail = e->prev;
    e->prev = e->next = TIER_NONE;
    e->in_lru = 0;
}

static void lru_link(struct tier *t, uint32_t id, bool at_tail)
{
    struct idx_entry *e = idx_at(t->idx, id);
    struct lru *l = &t->lru[e->cls];

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
    e->in_lru = 1;
}

/* Put id into its LRU list exactly when it is an evictable leaf. */
static void settle(struct tier *t, uint32_t id, bool at_tail)
{
    struct idx_entry *e = idx_at(t->idx, id);
    bool leaf = e->state == IDX_COMMITTED && e->leases == 0 && e->nchild == 0;

    if (leaf && !e->in_lru)
        lru_link(t, id, at_tail);
    else if (!leaf && e->in_lru)
        lru_unlink(t, id);
}

/* A child of p went away. Ghosts (aborted reservations kept for their
 * children) disappear with their last child, which may free their parent. */
static void child_gone(struct tier *t, uint32_t p, bool at_tail)
{
    while (p != TIER_NONE) {
        struct idx_entry *e = idx_at(t->idx, p);
        uint32_t up = e->parent;

        e->nchild--;
        if (e->state != IDX_GHOST || e->nchild > 0) {
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
        settle(t, p, false); /* a parent is no longer a leaf */
    }
}

/* ---- eviction ------------------------------------------------------- */

/* The victim for the watermarks: the oldest leaf of any class.
 * O(classes). */
static uint32_t pick_victim(struct tier *t)
{
    uint32_t best = TIER_NONE, best_age = 0;

    for (int c = 0; c < TIER_RAM_CLASSES; c++) {
        uint32_t id = t->lru[c].tail, age;

        if (id == TIER_NONE)
            continue;
        age = t->clock - idx_at(t->idx, id)->stamp; /* wrap-safe difference */
        if (best == TIER_NONE || age > best_age) {
            best = id;
            best_age = age;
        }
    }
    return best;
}

/* Evict a committed, unleased block. A leaf goes for good; an interior
 * block (only free_segment evicts those) loses its slot but its entry stays
 * as a ghost (invisible, so lookups stop there) until its last child goes,
 * or comes back when its key is put again. */
static void evict(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint64_t slot = tier_ram_class_slot(t->ram, e->cls);
    uint32_t p = e->parent;

    if (e->in_lru)
        lru_unlink(t, id);
    if (t->cold && t->cold->demote(t->cold_ctx, e->ns, &e->key,
                                   (uint8_t *)tier_ram_base(t->ram) + e->off, slot) < 0)
        t->st.cold_errors++;
    tier_ram_free(t->ram, e->off);
    t->st.evictions[TIER_L_WARM]++;
    t->st.blocks[TIER_L_WARM]--;
    if (e->nchild > 0) {
        e->state = IDX_GHOST;
        return;
    }
    idx_delete(t->idx, id);
    child_gone(t, p, true);
}

/* Free a whole segment of another class for class cls: the one with the
 * fewest blocks among those whose blocks are all committed and unleased.
 * Evicting blocks of another class one by one in LRU order would rarely
 * empty a segment and could drain the pool for one slot; this evicts only
 * what gives a segment back, or nothing. O(slots in the pool): it runs only
 * when a size class has outgrown its segments and has no leaf of its own. */
static int free_segment(struct tier *t, int cls)
{
    uint32_t best = UINT32_MAX, best_live = UINT32_MAX;
    const uint32_t *tags;
    uint32_t nslots;

    for (uint32_t s = 0; s < tier_ram_nseg(t->ram); s++) {
        int c = tier_ram_seg_info(t->ram, s, &tags, &nslots);
        uint32_t live = 0;
        bool ok = c >= 0 && c != cls;

        for (uint32_t i = 0; ok && i < nslots; i++) {
            if (tags[i] == TIER_RAM_NOTAG)
                continue;
            ok = idx_at(t->idx, tags[i])->state == IDX_COMMITTED &&
                 idx_at(t->idx, tags[i])->leases == 0;
            live++;
        }
        if (ok && live < best_live) {
            best = s;
            best_live = live;
        }
    }
    if (best == UINT32_MAX)
        return -ENOSPC;
    tier_ram_seg_info(t->ram, best, &tags, &nslots);
    /* eviction clears each slot's tag; the array itself stays in place */
    for (uint32_t i = 0; i < nslots; i++)
        if (tags[i] != TIER_RAM_NOTAG)
            evict(t, tags[i]);
    return 0;
}

/* A slot of class cls for entry id: evict the class's own LRU leaves, else
 * free a segment of another class. */
static int alloc_slot(struct tier *t, int cls, uint32_t id, uint64_t *off)
{
    for (;;) {
        int rc = tier_ram_alloc(t->ram, cls, id, off);
        uint32_t v;

        if (rc != -ENOSPC)
            return rc;
        v = t->lru[cls].tail;
        if (v != TIER_NONE)
            evict(t, v);
        else if (free_segment(t, cls) < 0)
            return -ENOSPC; /* everything is leased, reserved or a parent */
    }
}

size_t tier_maintain(struct tier *t)
{
    size_t n = 0;

    if (tier_ram_used(t->ram) <= t->high_bytes)
        return 0;
    while (tier_ram_used(t->ram) > t->low_bytes) {
        uint32_t v = pick_victim(t);

        if (v == TIER_NONE)
            break;
        evict(t, v);
        n++;
    }
    return n;
}

/* ---- operations ----------------------------------------------------- */

size_t tier_lookup(struct tier *t, uint32_t ns, const struct tier_key *keys, size_t n,
                   uint8_t *tiers)
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
    t->st.hits[TIER_L_WARM] += hits;
    t->st.misses += n - hits;
    return hits;
}

/* Undo one reservation: the slot goes back; the entry too, unless children
 * still point at it (then it stays as an invisible ghost). */
static void drop_reserved(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint32_t p = e->parent;

    tier_ram_free(t->ram, e->off);
    t->st.reserved--;
    if (e->nchild > 0) {
        e->state = IDX_GHOST;
        return;
    }
    idx_delete(t->idx, id);
    child_gone(t, p, false);
}

/* Reserve one absent (or ghost) key under parent p. */
static int reserve_one(struct tier *t, uint32_t ns, int cls, uint32_t owner, uint32_t p,
                       const struct tier_key *key, uint32_t ghost, uint32_t *id_out,
                       uint64_t *off_out)
{
    uint32_t id = ghost;
    struct idx_entry *e;
    int rc;

    if (id == TIER_NONE) {
        rc = idx_insert(t->idx, ns, key, &id);
        if (rc < 0)
            return rc;
        /* linked before the slot is found, so eviction cannot take p */
        set_parent(t, id, p);
    }
    e = idx_at(t->idx, id);
    e->state = IDX_RESERVED;
    e->owner = owner;
    e->cls = (uint8_t)cls;
    e->level = TIER_L_WARM;
    rc = alloc_slot(t, cls, id, off_out);
    e = idx_at(t->idx, id);
    if (rc < 0) {
        uint32_t up = e->parent;

        e->state = IDX_GHOST;
        if (e->nchild == 0) {
            idx_delete(t->idx, id);
            child_gone(t, up, false);
        }
        return rc;
    }
    e->off = *off_out;
    t->st.reserved++;
    *id_out = id;
    return 0;
}

int tier_reserve(struct tier *t, uint32_t ns, uint64_t block_bytes, uint32_t owner,
                 const struct tier_key *parent, const struct tier_key *keys, size_t n,
                 uint32_t *ids, uint64_t *offs)
{
    uint64_t slot = tier_slot_bytes(block_bytes);
    uint32_t p = parent ? idx_find(t->idx, ns, parent) : TIER_NONE;
    size_t i, count = 0, dedup = 0;
    int cls, rc = 0;

    if (block_bytes == 0 || slot > tier_ram_seg_bytes(t->ram))
        return -EINVAL;
    cls = tier_ram_class(t->ram, slot);
    if (cls < 0)
        return cls;
    if (p != TIER_NONE && idx_at(t->idx, p)->state == IDX_GHOST)
        p = TIER_NONE;
    for (i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns, &keys[i]), ghost = TIER_NONE;

        ids[i] = TIER_NONE;
        offs[i] = UINT64_MAX;
        if (id != TIER_NONE && idx_at(t->idx, id)->state != IDX_GHOST) {
            dedup++; /* present or being written by someone: nothing to do */
            p = id;
            continue;
        }
        ghost = id;
        rc = reserve_one(t, ns, cls, owner, p, &keys[i], ghost, &ids[i], &offs[i]);
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
        return rc;
    }
    t->st.puts++;
    t->st.dedup_blocks += dedup;
    return (int)count;
}

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
        settle(t, id, false);
        t->st.reserved--;
        t->st.put_blocks++;
        t->st.blocks[TIER_L_WARM]++;
        t->st.bytes_in[TIER_L_WARM] += block_bytes;
        done++;
    }
    return done;
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

int tier_get(struct tier *t, uint32_t ns, uint64_t block_bytes, const struct tier_key *keys,
             size_t n, uint32_t *ids, uint64_t *offs)
{
    uint64_t slot = tier_slot_bytes(block_bytes);
    size_t i;

    for (i = 0; i < n; i++) {
        uint32_t id = idx_find(t->idx, ns, &keys[i]);
        struct idx_entry *e;

        if (id == TIER_NONE)
            break;
        e = idx_at(t->idx, id);
        if (e->state != IDX_COMMITTED)
            break;
        if (tier_ram_class_slot(t->ram, e->cls) != slot) {
            t->st.leases_active += i; /* tier_release takes them off again */
            tier_release(t, ids, i, false);
            return -EINVAL;
        }
        e->leases++;
        e->stamp = ++t->clock;
        if (e->in_lru)
            lru_unlink(t, id);
        ids[i] = id;
        offs[i] = e->off;
    }
    t->st.gets++;
    t->st.get_blocks += i;
    t->st.hits[TIER_L_WARM] += i;
    t->st.bytes_out[TIER_L_WARM] += i * block_bytes;
    t->st.misses += n - i;
    t->st.leases_active += i;
    return (int)i;
}

void tier_release(struct tier *t, const uint32_t *ids, size_t n, bool reclaimed)
{
    for (size_t i = 0; i < n; i++) {
        struct idx_entry *e = idx_at(t->idx, ids[i]);

        e->leases--;
        settle(t, ids[i], false);
    }
    t->st.leases_active -= n;
    if (reclaimed)
        t->st.reclaimed += n;
}

size_t tier_remove(struct tier *t, uint32_t ns, const struct tier_key *keys, size_t n)
{
    size_t done = 0;

    for (size_t i = n; i-- > 0;) {
        uint32_t id = idx_find(t->idx, ns, &keys[i]), p;
        struct idx_entry *e;

        if (id == TIER_NONE)
            continue;
        e = idx_at(t->idx, id);
        if (e->state != IDX_COMMITTED || e->leases || e->nchild)
            continue;
        p = e->parent;
        if (e->in_lru)
            lru_unlink(t, id);
        tier_ram_free(t->ram, e->off);
        idx_delete(t->idx, id);
        child_gone(t, p, true);
        t->st.blocks[TIER_L_WARM]--;
        t->st.removes++;
        done++;
    }
    return done;
}

void tier_stats_get(const struct tier *t, struct tier_stats *out)
{
    *out = t->st;
    out->bytes_used[TIER_L_WARM] = tier_ram_used(t->ram);
    out->bytes_capacity[TIER_L_WARM] = tier_ram_bytes(t->ram);
    out->index_entries = idx_count(t->idx);
    out->index_bytes = idx_mem_bytes(t->idx);
    out->memory_locked = tier_ram_locked(t->ram);
    out->huge_pages = tier_ram_huge(t->ram);
}

double tier_index_bytes_per_block(const struct tier *t)
{
    uint32_t n = idx_count(t->idx);

    return n ? (double)idx_mem_bytes(t->idx) / n : 0.0;
}

#define BAD(...) do { snprintf(why, cap, __VA_ARGS__); rc = -EUCLEAN; goto out; } while (0)

int tier_check(const struct tier *t, char *why, size_t cap)
{
    uint32_t lim = idx_id_limit(t->idx);
    uint32_t *kids = calloc(lim ? lim : 1, sizeof(*kids));
    uint64_t used = 0, nres = 0, ncom = 0, leases = 0, in_lru = 0;
    int rc = 0;

    if (!kids)
        return -ENOMEM;
    for (uint32_t id = 0; id < lim; id++) {
        const struct idx_entry *e = idx_at(t->idx, id);

        if (e->state == IDX_FREE || e->parent == TIER_NONE)
            continue;
        if (idx_at(t->idx, e->parent)->state == IDX_FREE)
            BAD("entry %u: parent %u is free", id, e->parent);
        kids[e->parent]++;
    }
    for (uint32_t id = 0; id < lim; id++) {
        const struct idx_entry *e = idx_at(t->idx, id);
        bool leaf = e->state == IDX_COMMITTED && e->leases == 0 && e->nchild == 0;

        if (e->state == IDX_FREE)
            continue;
        if (kids[id] != e->nchild)
            BAD("entry %u: nchild %u, %u children point at it", id, e->nchild, kids[id]);
        if (leaf != (bool)e->in_lru)
            BAD("entry %u: leaf %d but in_lru %d", id, leaf, e->in_lru);
        if (e->state == IDX_GHOST && e->nchild == 0)
            BAD("entry %u: ghost without children", id);
        if (e->leases && e->state != IDX_COMMITTED)
            BAD("entry %u: leased but state %d", id, e->state);
        if (idx_find(t->idx, e->ns, &e->key) != id)
            BAD("entry %u: not found under its own key", id);
        if (e->state == IDX_RESERVED || e->state == IDX_COMMITTED) {
            if (tier_ram_tag_at(t->ram, e->off) != id)
                BAD("entry %u: slot at %llu belongs to %u", id, (unsigned long long)e->off,
                    tier_ram_tag_at(t->ram, e->off));
            used += tier_ram_class_slot(t->ram, e->cls);
        }
        nres += e->state == IDX_RESERVED;
        ncom += e->state == IDX_COMMITTED;
        leases += e->leases;
        in_lru += e->in_lru;
    }
    if (used != tier_ram_used(t->ram))
        BAD("slot bytes: entries hold %llu, pool says %llu", (unsigned long long)used,
            (unsigned long long)tier_ram_used(t->ram));
    if (nres != t->st.reserved || ncom != t->st.blocks[TIER_L_WARM] ||
        leases != t->st.leases_active)
        BAD("counters: reserved %llu/%llu blocks %llu/%llu leases %llu/%llu",
            (unsigned long long)nres, (unsigned long long)t->st.reserved,
            (unsigned long long)ncom, (unsigned long long)t->st.blocks[TIER_L_WARM],
            (unsigned long long)leases, (unsigned long long)t->st.leases_active);
    for (int c = 0; c < TIER_RAM_CLASSES; c++) {
        uint32_t prev = TIER_NONE;

        for (uint32_t id = t->lru[c].head; id != TIER_NONE; id = idx_at(t->idx, id)->next) {
            const struct idx_entry *e = idx_at(t->idx, id);

            if (!in_lru--)
                BAD("LRU lists hold more entries than are marked (a loop?)");
            if (e->prev != prev || e->cls != c || !e->in_lru)
                BAD("LRU of class %d: bad link or member at %u", c, id);
            prev = id;
        }
        if (t->lru[c].tail != prev)
            BAD("LRU of class %d: tail %u, walk ends at %u", c, t->lru[c].tail, prev);
    }
    if (in_lru)
        BAD("%llu entries marked in_lru are on no list", (unsigned long long)in_lru);
out:
    free(kids);
    return rc;
}
