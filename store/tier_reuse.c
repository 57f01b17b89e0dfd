/* SPDX-License-Identifier: MIT */
/*
 * tier_reuse.c - policy reuse: each warm leaf is in a class, each class
 * learns at which ages its blocks are asked for again, and the leaf that
 * can still earn the fewest reuses per slot it holds leaves first.
 *
 * Design note. On KV traces a block's chance of being asked for again
 * depends on what kind of block it is more than on its age: a chain's last
 * block is almost never reused (the next turn rewrites it), a conversation
 * that came back comes back again more often (bundled trace: 31 % of first
 * turns get a second, 42 % of those a third, 51 % a fourth), and reuse comes
 * late (50 to 2,000 requests). So the classes are: 0, a tip (a block that
 * never had a child and was never hit); then by the chain's turn t (1 to 3:
 * a chain extended under its own hit prefix, or a dropped chain asked for
 * again, is one turn further) and whether the block was hit,
 * 1 + hit * 3 + t - 1. Each class counts the blocks that entered it and the
 * reuses by age: hits, and misses on dropped blocks it remembers as ghosts.
 * From those, at each adaptation, its index at age a is the most reuses
 * per slot-tick a block of that age can still earn, over every horizon
 * (Gittins-like). Only the oldest and youngest leaf of each class's list
 * are candidates, so a victim costs O(classes in use), and the youngest
 * leaves only when clearly worth less. tools/polsim.py models the same
 * policy; kvreplay --policy reuse measures this one.
 */
#include <math.h>

#include "tier_int.h"

#define TURNS 3       /* turns told apart: 1, 2, 3 or more */
#define PRIVATE 3     /* a prefix with more children is shared (a system
                         prompt): what goes under it starts turn 1 */
#define MARGIN 0.9    /* the youngest leaf leaves only below 0.9 x the oldest's index */
#define DECAY 0.9     /* the counts' weight kept at each adaptation */
#define ENTERED_MIN 8 /* a class with fewer blocks seen is kept (index inf) */

static int turn_of(const struct idx_entry *e)
{
    int turn = (e->pol & IDX_POL_TURN) >> IDX_POL_TURN_SHIFT;

    return turn ? turn : 1;
}

static void set_turn(struct idx_entry *e, int turn)
{
    turn = turn < 1 ? 1 : turn > TURNS ? TURNS : turn;
    e->pol = (uint8_t)((e->pol & ~IDX_POL_TURN) | (turn << IDX_POL_TURN_SHIFT));
}

int tier_reuse_class(const struct idx_entry *e)
{
    bool hit = e->flags & IDX_F_HIT;

    if (!hit && !(e->pol & IDX_POL_PARENT))
        return 0;
    return 1 + (hit ? TURNS : 0) + turn_of(e) - 1;
}

static void enter(struct tier *t, const struct idx_entry *e, double n)
{
    double *x = &t->pol.entered[tier_reuse_class(e)];

    *x += n;
    if (*x < 0) /* an entry counted before the last decays */
        *x = 0;
}

static void reused(struct tier *t, int cls, uint32_t stamp)
{
    t->pol.reuses[cls][tier_age_bucket(t->clock - stamp)] += 1;
}

void tier_reuse_commit(struct tier *t, struct idx_entry *e, struct idx_entry *parent)
{
    uint32_t tag;
    uint64_t *g = tier_pol_ghost(t, e, &tag);
    /* under a private prefix the chain's turn goes on; e counts itself in nchild */
    int turn = parent && parent->nchild <= PRIVATE ? turn_of(parent) : 1;

    if (g && (*g >> 32 & ~0x3fu) == (tag & ~0x3fu)) {
        /* dropped before and asked for again: a reuse of its class, and
         * a chain that came back is one turn further */
        uint32_t gt = (uint32_t)(*g >> 32);
        int gturn = (int)(gt >> 1 & 3);

        reused(t, (int)(gt >> 3 & 7) % TIER_POL_LISTS, (uint32_t)*g);
        if (gturn + 1 > turn)
            turn = gturn + 1;
        *g = 0;
    }
    e->flags &= (uint16_t)~(IDX_F_KEEP | IDX_F_HIT);
    set_turn(e, turn);
    enter(t, e, 1);
}

void tier_reuse_touch(struct tier *t, struct idx_entry *e)
{
    reused(t, tier_reuse_class(e), e->stamp);
    set_turn(e, turn_of(e) + 1);
    e->flags |= IDX_F_HIT;
    enter(t, e, 1);
}

void tier_reuse_parented(struct tier *t, struct idx_entry *p)
{
    if (p->pol & IDX_POL_PARENT)
        return;
    /* a committed tip was counted as one: it is not (a reserved parent is
     * counted at its commit, as what it is by then) */
    if (p->state == IDX_COMMITTED)
        enter(t, p, -1);
    p->pol |= IDX_POL_PARENT;
    if (p->state == IDX_COMMITTED)
        enter(t, p, 1);
}

void tier_reuse_left(struct tier *t, struct idx_entry *e, bool lost)
{
    uint32_t tag;
    uint64_t *g;

    if (!lost) /* on disk: a later hit there is a touch */
        return;
    if (!t->pol.ghosts)
        tier_pol_ghosts_fit(t);
    if ((g = tier_pol_ghost(t, e, &tag)))
        *g = (uint64_t)(tag | (uint32_t)tier_reuse_class(e) << 3 |
                        (uint32_t)turn_of(e) << 1) << 32 | e->stamp;
}

/* index[c][b]: the most reuses per slot-tick a block of class c that
 * reached age bucket b unreused can still earn, over every horizon b2 >= b:
 * (F(b2) - F(b - 1)) / (slot-ticks it holds from b to b2, shrinking as
 * blocks are reused and leave), F being the class's share of blocks reused
 * by an age. O(classes x buckets^2) per adaptation. */
void tier_reuse_adapt(struct tier *t)
{
    struct tier_pol *p = &t->pol;

    for (int c = 0; c < TIER_POL_LISTS; c++) {
        double n = p->entered[c], F[TIER_POL_NB], cum = 0;

        for (int b = 0; b < TIER_POL_NB; b++) {
            cum += p->reuses[c][b];
            F[b] = n > 0 && cum < n ? cum / n : 1.0;
        }
        for (int b = 0; b < TIER_POL_NB; b++) {
            double f0 = b ? F[b - 1] : 0, best = 0, space = 0;

            if (n < ENTERED_MIN) {
                p->index[c][b] = INFINITY; /* nothing known yet: kept */
                continue;
            }
            for (int b2 = b; b2 < TIER_POL_NB; b2++) {
                double width = tier_bucket_top(b2) - (b2 ? tier_bucket_top(b2 - 1) : -1);

                space += width * (1 - (b2 ? F[b2 - 1] : 0));
                if (space > 0 && (F[b2] - f0) / space > best)
                    best = (F[b2] - f0) / space;
            }
            p->index[c][b] = (float)best;
        }
        for (int b = 0; b < TIER_POL_NB; b++)
            p->reuses[c][b] *= DECAY;
        p->entered[c] *= DECAY;
    }
    p->learnt = true;
}

/* Make (*best, *bv, *ba) the candidate that leaves first of itself and
 * leaf id of class c (young: the youngest of its list): the lower index,
 * then the older. */
static void candidate(const struct tier *t, int c, uint32_t id, bool young, uint32_t *best,
                      double *bv, uint32_t *ba)
{
    uint32_t age = t->clock - idx_at(t->idx, id)->stamp; /* wrap-safe difference */
    double v = t->pol.index[c][tier_age_bucket(age)];

    if (young)
        v /= MARGIN;
    if (*best == TIER_NONE || v < *bv || (v == *bv && age > *ba)) {
        *best = id;
        *bv = v;
        *ba = age;
    }
}

uint32_t tier_reuse_pick(const struct tier *t, uint32_t cmask, unsigned kmask)
{
    uint32_t best = TIER_NONE, ba = 0;
    double bv = 0;

    for (uint32_t m = cmask & t->pol.used; m; m &= m - 1) {
        int cls = __builtin_ctz(m);

        for (int c = 0; c < TIER_POL_LISTS; c++)
            for (int k = 0; k < 2; k++) {
                const struct lru *l = &t->lru[cls][c][k];

                if (!(kmask & (1u << k)) || l->tail == TIER_NONE)
                    continue;
                candidate(t, c, l->tail, false, &best, &bv, &ba);
                if (l->head != l->tail)
                    candidate(t, c, l->head, true, &best, &bv, &ba);
            }
    }
    return best;
}
