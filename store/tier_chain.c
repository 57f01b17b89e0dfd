/* SPDX-License-Identifier: MIT */
/*
 * tier_chain.c - chains and the LRU lists of leaves: parent links, child
 * counts, ghosts, and which list (if any) each entry is on.
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
 * from its end back towards its root. Under policy reuse, once it has
 * learnt, a leaf linked for the tail (such a parent; a victim put back after
 * its copy to the remote tier) goes where its age puts it in its class's
 * list instead (lru_link): reuse's candidates are each list's two ends.
 */
#include <errno.h>

#include "tier_int.h"

/* The list e is on: the cold list, a hot list, or the warm list of its
 * size class, the policy's list for it (set when it was linked) and
 * whether it is on disk. What decides it (level, cls, cold bit, the
 * policy's list) changes only while e is unlinked. */
static struct lru *list_of(struct tier *t, const struct idx_entry *e)
{
    if (e->flags & IDX_F_CLRU)
        return &t->clru;
    if (e->flags & IDX_F_HLRU)
        return &t->hlru[e->cls];
    return &t->lru[e->cls][e->pol & IDX_POL_LIST]
                  [e->flags & IDX_F_COLD ? TIER_LRU_CLEAN : TIER_LRU_DIRTY];
}

static uint32_t age_of(const struct tier *t, uint32_t id)
{
    return t->clock - idx_at(t->idx, id)->stamp; /* wrap-safe difference */
}

/* Make *best the older (by access stamp) of itself and list l's tail. */
static void older(const struct tier *t, const struct lru *l, uint32_t *best, uint32_t *age)
{
    uint32_t a;

    if (l->tail == TIER_NONE)
        return;
    a = age_of(t, l->tail);
    if (*best == TIER_NONE || a > *age) {
        *best = l->tail;
        *age = a;
    }
}

/* The warm leaf that leaves first among the size classes in cmask and the
 * lists TIER_LRU_DIRTY / CLEAN in kmask: under reuse the lowest index;
 * else the oldest tail of the first policy list that has one (under keep
 * the leaves not kept, then the kept; under lru, and reuse before it has
 * learnt, there is one list). A list's tail, not its oldest stamp: a
 * parent whose last child left goes to the tail, so a chain leaves whole. */
static uint32_t pick_leaf(const struct tier *t, uint32_t cmask, unsigned kmask)
{
    uint32_t best = TIER_NONE, age = 0;
    int nl = tier_pol_nlists(t);

    if (t->pol.kind == TIER_EVICT_REUSE && t->pol.learnt)
        return tier_reuse_pick(t, cmask, kmask);
    for (int l = 0; l < nl && best == TIER_NONE; l++)
        for (uint32_t m = cmask & t->pol.used; m; m &= m - 1)
            for (int k = 0; k < 2; k++)
                if (kmask & (1u << k))
                    older(t, &t->lru[__builtin_ctz(m)][l][k], &best, &age);
    return best;
}

uint32_t tier_lru_tail(const struct tier *t, int cls, int k)
{
    return pick_leaf(t, 1u << cls, 1u << k);
}

void tier_lru_unlink(struct tier *t, uint32_t id)
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

#define BY_AGE_STEPS 256 /* leaves a leaf placed by its age looks past, at most */

/* Find the place of a leaf of age a walking BY_AGE_STEPS leaves at most
 * from the head (to the first leaf older than a) or from the tail (to the
 * first not older): whether it was found, and then its neighbours. */
static bool walk_to_age(const struct tier *t, const struct lru *l, uint32_t a, bool from_head,
                        uint32_t *prev, uint32_t *next)
{
    uint32_t x = from_head ? l->head : l->tail;

    for (int i = 0; x != TIER_NONE && i < BY_AGE_STEPS; i++) {
        const struct idx_entry *e = idx_at(t->idx, x);

        if (from_head && age_of(t, x) > a) {
            *next = x;
            *prev = e->prev;
            return true;
        }
        if (!from_head && age_of(t, x) <= a) {
            *prev = x;
            *next = e->next;
            return true;
        }
        x = from_head ? e->next : e->prev;
    }
    return false;
}

/* Where a leaf of age a (not linked) goes in list l: *prev its younger
 * neighbour, *next its older (TIER_NONE: an end). The list runs from the
 * youngest (head) to the oldest (tail). The walk starts from the end
 * nearer in age and, if its BY_AGE_STEPS leaves do not reach the place,
 * tries the other end; when neither does (a list of more than twice that,
 * the place deep in its middle), the leaf goes BY_AGE_STEPS in from the
 * first end: the list stays whole, only not quite in order. */
static void place_by_age(const struct tier *t, const struct lru *l, uint32_t a,
                         uint32_t *prev, uint32_t *next)
{
    bool head_first;
    uint32_t x;

    if (l->tail == TIER_NONE || a >= age_of(t, l->tail)) {
        *prev = l->tail; /* the oldest, or the only one */
        *next = TIER_NONE;
        return;
    }
    if (a < age_of(t, l->head)) {
        *prev = TIER_NONE; /* the youngest */
        *next = l->head;
        return;
    }
    /* age(head) <= a < age(tail): the place is inside, and a walk that
     * finds no leaf on the far side of a within its steps stays inside */
    head_first = a - age_of(t, l->head) < age_of(t, l->tail) - a;
    if (walk_to_age(t, l, a, head_first, prev, next) ||
        walk_to_age(t, l, a, !head_first, prev, next))
        return;
    x = head_first ? l->head : l->tail;
    for (int i = 0; i < BY_AGE_STEPS; i++)
        x = head_first ? idx_at(t->idx, x)->next : idx_at(t->idx, x)->prev;
    *prev = head_first ? idx_at(t->idx, x)->prev : x;
    *next = head_first ? x : idx_at(t->idx, x)->next;
}

/* Link id into its list: at the head (a leaf just put or used, the
 * youngest) or the tail (a parent whose last child left: the oldest under
 * LRU's order, so a chain leaves whole). Under reuse once it has learnt, a
 * leaf for the tail goes where its age puts it instead: reuse takes the
 * oldest and the youngest of each class's list as its candidates, and a
 * young parent at a tail (its child, a tip, left young) hid the older
 * leaves of its class from them; placed by age, reuse never falls below
 * LRU on the bundled trace held at the capacity asked (README, "Eviction
 * policies"). */
static void lru_link(struct tier *t, uint32_t id, bool at_tail, uint8_t which)
{
    struct idx_entry *e = idx_at(t->idx, id);
    struct lru *l;

    if (which == IDX_F_LRU) { /* the policy's list, fixed while linked */
        e->pol = (uint8_t)((e->pol & ~IDX_POL_LIST) | tier_pol_list(t, e));
        t->pol.used |= 1u << e->cls;
    }
    e->flags |= which;
    l = list_of(t, e);
    if (at_tail && which == IDX_F_LRU && t->pol.kind == TIER_EVICT_REUSE && t->pol.learnt) {
        place_by_age(t, l, age_of(t, id), &e->prev, &e->next);
    } else {
        e->prev = at_tail ? l->tail : TIER_NONE;
        e->next = at_tail ? TIER_NONE : l->head;
    }
    if (e->prev != TIER_NONE)
        idx_at(t->idx, e->prev)->next = id;
    else
        l->head = id;
    if (e->next != TIER_NONE)
        idx_at(t->idx, e->next)->prev = id;
    else
        l->tail = id;
}

/* Put id on the list it belongs to now: its class's warm list when it is a
 * warm leaf, the cold list when it is a cold leaf, none otherwise. */
void tier_settle(struct tier *t, uint32_t id, bool at_tail)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint8_t want = tier_warm_leaf(t, e) ? IDX_F_LRU : tier_cold_leaf(e) ? IDX_F_CLRU
                 : tier_hot_leaf(e)  ? IDX_F_HLRU : 0;
    uint8_t have = e->flags & (IDX_F_LRU | IDX_F_CLRU | IDX_F_HLRU);

    if (want == have)
        return;
    if (have)
        tier_lru_unlink(t, id);
    if (want)
        lru_link(t, id, at_tail, want);
}

/* A child of p went away. Ghosts disappear with their last child, which
 * may free their parent in turn. */
void tier_child_gone(struct tier *t, uint32_t p, bool at_tail)
{
    while (p != TIER_NONE) {
        struct idx_entry *e = idx_at(t->idx, p);
        uint32_t up = e->parent;

        e->nchild--;
        if (e->state != IDX_GHOST || e->nchild > 0 || e->leases > 0) {
            tier_settle(t, p, at_tail);
            return;
        }
        idx_delete(t->idx, p);
        p = up;
    }
}

void tier_set_parent(struct tier *t, uint32_t id, uint32_t p)
{
    idx_at(t->idx, id)->parent = p;
    if (p != TIER_NONE) {
        idx_at(t->idx, p)->nchild++;
        tier_pol_parented(t, p);
        tier_settle(t, p, false); /* a parent is not a leaf */
    }
}

/* id's data moved to level lvl and/or its promotion started or ended: keep
 * its parent's nwarm / nhot (and so the parent's leaf status) right. */
void tier_set_res(struct tier *t, uint32_t id, uint8_t lvl, bool promoting, bool at_tail)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint32_t p = e->parent;
    int ow = tier_warm_res(e), oh = tier_hot_res(e);

    e->level = lvl;
    if (promoting)
        e->flags |= IDX_F_PROMOTING;
    else
        e->flags &= (uint16_t)~IDX_F_PROMOTING;
    if (p == TIER_NONE || (ow == tier_warm_res(e) && oh == tier_hot_res(e)))
        return;
    e = idx_at(t->idx, p);
    e->nwarm += (uint32_t)(tier_warm_res(idx_at(t->idx, id)) - ow);
    e->nhot += (uint32_t)(tier_hot_res(idx_at(t->idx, id)) - oh);
    tier_settle(t, p, at_tail);
}

void tier_set_level(struct tier *t, uint32_t id, uint8_t lvl, bool at_tail)
{
    tier_set_res(t, id, lvl, idx_at(t->idx, id)->flags & IDX_F_PROMOTING, at_tail);
}

void tier_warm_lose(struct tier *t, uint32_t id, bool at_tail)
{
    tier_set_level(t, id, TIER_L_COLD, at_tail);
}

/* An entry whose data is gone (in no tier): delete it, or keep it as a
 * ghost while children or leases still name it. */
void tier_forget(struct tier *t, uint32_t id, bool at_tail)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint32_t p = e->parent;

    if (t->dwaits) /* durable commits waiting for it: nothing to make durable */
        tier_dwaits_fail(t, id, -ENODATA);
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
    tier_child_gone(t, p, at_tail);
}

/* A ghost nothing names any more (no child, no lease) goes, and may free
 * its parent in turn. Returns whether id went. */
bool tier_drop_idle_ghost(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);
    uint32_t p = e->parent;

    if (e->state != IDX_GHOST || e->leases > 0 || e->nchild > 0)
        return false;
    idx_delete(t->idx, id);
    tier_child_gone(t, p, false);
    return true;
}

/* The victim for warm's watermarks, of any size class. */
uint32_t tier_pick_victim(const struct tier *t)
{
    return pick_leaf(t, UINT32_MAX, 1u << TIER_LRU_DIRTY | 1u << TIER_LRU_CLEAN);
}

/* The leaf already on disk that leaves first, of any size class. */
uint32_t tier_pick_clean(const struct tier *t)
{
    return pick_leaf(t, UINT32_MAX, 1u << TIER_LRU_CLEAN);
}

/* The victim for hot's watermarks: the oldest hot leaf. O(classes). */
uint32_t tier_pick_hot_victim(struct tier *t)
{
    uint32_t best = TIER_NONE, age = 0;

    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        older(t, &t->hlru[c], &best, &age);
    return best;
}
