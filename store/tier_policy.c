/* SPDX-License-Identifier: MIT */
/*
 * tier_policy.c - the eviction policy: which new chains warm keeps, learnt
 * online. It only decides an entry's keep flag; the lists and the leaf-first
 * order stay tier_chain.c's, so no policy can drop a block before its children.
 *
 * Design note: adaptive selective retention ("keep"). Reuse in KV traces
 * comes late: on the bundled trace a conversation's next turn arrives 50 to
 * 2,000 requests after the last one, rarely sooner. A warm tier too small to
 * hold every chain that long gains nothing from holding every chain briefly.
 * Keeping a share s of new chains (chosen by their key's hash: chains are
 * alike as far as cheap features can tell) s times longer finds
 * s * F(T / s) of the reuses instead of F(T), F being the share of blocks
 * first reused within an age. The store learns F from what it sees: the age
 * of each block's first hit, and the age of each miss on a block it dropped
 * (remembered in a small table of "ghosts": key tag and stamp). Every so
 * often it picks the s that maximises F(T / s) / (T / s) over the ages seen,
 * T being how long a kept block stays in warm now; when nothing beats
 * keeping all chains by 10 %, s creeps back to 1, which is LRU. Blocks that
 * were hit are always kept. Chains not kept go on the leave-first lists.
 */
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "tier_int.h"

#define GHOSTS_MIN 1024u        /* slots of the ghost table at least ... */
#define GHOSTS_MAX (1u << 22)   /* ... and at most (32 MiB) */
#define GHOSTS_PER_BLOCK 8u     /* ghost slots per warm block: ages up to ~8 warms */
#define ADAPT_MIN 1024u         /* blocks leaving warm between adaptations, at least */
#define SHARE_MIN 0.05          /* never keep fewer than this share of new chains */
#define GAIN_MIN 1.1            /* a share below 1 must find 10 % more reuses per space */
#define DECAY 0.7               /* the histogram's weight kept at each adaptation */

static const char *const names[TIER_EVICT_N] = { "lru", "keep", "reuse" };

int tier_evict_policy_parse(const char *s, enum tier_evict_policy *out)
{
    for (int i = 0; i < TIER_EVICT_N; i++)
        if (s && strcmp(s, names[i]) == 0) {
            *out = (enum tier_evict_policy)i;
            return 0;
        }
    return -EINVAL;
}

const char *tier_evict_policy_name(enum tier_evict_policy p)
{
    return (unsigned)p < TIER_EVICT_N ? names[p] : "?";
}

int tier_pol_init(struct tier *t, enum tier_evict_policy kind)
{
    if ((unsigned)kind >= TIER_EVICT_N)
        return -EINVAL;
    memset(&t->pol, 0, sizeof(t->pol));
    t->pol.kind = kind;
    t->pol.share = 1.0;
    t->pol.keep_below = UINT32_MAX;
    for (int c = 0; c < TIER_POL_LISTS; c++)
        for (int b = 0; b < TIER_POL_NB; b++)
            t->pol.index[c][b] = INFINITY; /* nothing known yet: kept */
    return 0;
}

void tier_pol_fini(struct tier *t)
{
    free(t->pol.ghosts);
    t->pol.ghosts = NULL;
}

double tier_keep_share(const struct tier *t)
{
    return t->pol.share;
}

uint64_t tier_pol_adaptations(const struct tier *t)
{
    return t->pol.adaptations;
}

static void set_share(struct tier_pol *p, double share)
{
    p->share = share < SHARE_MIN ? SHARE_MIN : share > 1 ? 1 : share;
    p->keep_below = p->share >= 1 ? UINT32_MAX : (uint32_t)(p->share * 4294967296.0);
}

void tier_keep_share_set(struct tier *t, double share)
{
    set_share(&t->pol, share);
}

enum tier_evict_policy tier_evict_policy_of(const struct tier *t)
{
    return t->pol.kind;
}

static uint32_t key32(const struct tier_key *k, unsigned at)
{
    uint32_t v;

    memcpy(&v, k->b + at, sizeof(v)); /* keys are SHA-256: any 4 bytes are uniform */
    return v;
}

/* A ghost word is tag << 32 | stamp; the tag's low 6 bits hold reuse's
 * class and turn, and bit 0 is set (0 is an empty slot). */
uint64_t *tier_pol_ghost(struct tier *t, const struct idx_entry *e, uint32_t *tag)
{
    if (!t->pol.ghosts)
        return NULL;
    *tag = ((key32(&e->key, 8) ^ e->ns) & ~0x3fu) | 1;
    return &t->pol.ghosts[(key32(&e->key, 4) ^ e->ns * 2654435761u) & t->pol.gmask];
}

/* Size the ghost table for warm's blocks now; a resized table starts empty
 * (statistics only: losing ghosts delays learning, nothing else). */
void tier_pol_ghosts_fit(struct tier *t)
{
    uint64_t want = (uint64_t)t->st.blocks[TIER_L_WARM] * GHOSTS_PER_BLOCK;
    uint32_t n = GHOSTS_MIN;
    uint64_t *g;

    while (n < want && n < GHOSTS_MAX)
        n <<= 1;
    if (t->pol.ghosts && n <= t->pol.gmask + 1)
        return;
    g = calloc(n, sizeof(*g));
    if (!g)
        return; /* keep the old table (or none): learning goes on with less */
    free(t->pol.ghosts);
    t->pol.ghosts = g;
    t->pol.gmask = n - 1;
}

/* Choose the share of new chains to keep from the reuse ages seen. */
static void adapt(struct tier *t)
{
    struct tier_pol *p = &t->pol;
    double tl = p->share * p->vage; /* how long warm would hold every chain */
    double cum = 0, mass = 0, base = -1, best = 0, best_t = 0;

    for (int b = 0; b < TIER_POL_NB; b++)
        mass += p->hist[b];
    if (p->vage > 0 && mass >= 32) {
        for (int b = 0; b < TIER_POL_NB; b++) {
            double top = tier_bucket_top(b) + 1, e;

            cum += p->hist[b];
            e = cum / top; /* reuses found per unit of space, keeping blocks to this age */
            if (top < tl) {
                base = e;
                continue;
            }
            if (base < 0)
                base = e;
            if (e > best) {
                best = e;
                best_t = top;
            }
        }
        if (best > base * GAIN_MIN && best_t > 0)
            set_share(p, tl / best_t);
        else
            set_share(p, p->share * 1.1); /* back towards LRU while nothing pays more */
    }
    for (int b = 0; b < TIER_POL_NB; b++)
        p->hist[b] *= DECAY;
}

void tier_pol_commit(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id), *pe;
    bool keep;

    pe = e->parent != TIER_NONE ? idx_at(t->idx, e->parent) : NULL;
    if (t->pol.kind == TIER_EVICT_REUSE)
        tier_reuse_commit(t, e, pe && pe->state == IDX_COMMITTED ? pe : NULL);
    if (t->pol.kind != TIER_EVICT_KEEP)
        return;
    { /* dropped before, never reused: this is its first reuse */
        uint32_t tag;
        uint64_t *g = tier_pol_ghost(t, e, &tag);

        if (g && *g >> 32 == tag) {
            t->pol.hist[tier_age_bucket(t->clock - (uint32_t)*g)] += 1;
            *g = 0;
        }
    }
    /* a chain's new blocks share one decision: that of the first block
     * after what was there (a hit prefix, or nothing) */
    if (pe && pe->state == IDX_COMMITTED && !(pe->flags & IDX_F_HIT))
        keep = pe->flags & IDX_F_KEEP;
    else
        keep = t->pol.keep_below == UINT32_MAX || key32(&e->key, 0) < t->pol.keep_below;
    e->flags &= (uint16_t)~(IDX_F_KEEP | IDX_F_HIT);
    if (keep)
        e->flags |= IDX_F_KEEP;
}

void tier_pol_touch(struct tier *t, uint32_t id)
{
    struct idx_entry *e = idx_at(t->idx, id);

    if (t->pol.kind == TIER_EVICT_REUSE)
        tier_reuse_touch(t, e);
    if (t->pol.kind != TIER_EVICT_KEEP)
        return;
    if (e->flags & IDX_F_LRU) /* its list follows the flag: off it while that changes */
        tier_lru_unlink(t, id);
    if (!(e->flags & IDX_F_HIT))
        t->pol.hist[tier_age_bucket(t->clock - e->stamp)] += 1;
    e->flags |= IDX_F_HIT | IDX_F_KEEP; /* a block that was hit is kept */
}

void tier_pol_left(struct tier *t, uint32_t id, bool lost)
{
    struct tier_pol *p = &t->pol;
    struct idx_entry *e = idx_at(t->idx, id);
    uint32_t every, least;

    if (p->kind == TIER_EVICT_LRU)
        return;
    if (p->kind == TIER_EVICT_REUSE)
        tier_reuse_left(t, e, lost);
    if (p->kind == TIER_EVICT_KEEP && (e->flags & IDX_F_KEEP)) {
        double a = (double)(t->clock - e->stamp);

        p->vage = p->vage > 0 ? 0.999 * p->vage + 0.001 * a : a;
    }
    if (p->kind == TIER_EVICT_KEEP && lost && !(e->flags & IDX_F_HIT)) {
        uint32_t tag;
        uint64_t *g;

        if (!p->ghosts)
            tier_pol_ghosts_fit(t);
        if ((g = tier_pol_ghost(t, e, &tag)))
            *g = (uint64_t)tag << 32 | e->stamp;
    }
    every = t->st.blocks[TIER_L_WARM] / 2;
    least = t->cfg.evict_adapt_min ? t->cfg.evict_adapt_min : ADAPT_MIN;
    if (++p->left >= (every > least ? every : least)) {
        p->left = 0;
        p->adaptations++;
        if (p->kind == TIER_EVICT_REUSE)
            tier_reuse_adapt(t);
        else
            adapt(t);
        tier_pol_ghosts_fit(t);
    }
}

void tier_pol_parented(struct tier *t, uint32_t p)
{
    if (t->pol.kind == TIER_EVICT_REUSE)
        tier_reuse_parented(t, idx_at(t->idx, p));
}

/* Under keep the leaves not kept (list 0) leave before the kept (list 1);
 * under reuse a leaf's list is its class. */
int tier_pol_list(struct tier *t, const struct idx_entry *e)
{
    switch (t->pol.kind) {
    case TIER_EVICT_KEEP:
        return e->flags & IDX_F_KEEP ? 1 : 0;
    case TIER_EVICT_REUSE: /* one list, as LRU, until it knows the classes */
        return t->pol.learnt ? tier_reuse_class(e) : 0;
    default:
        return 0;
    }
}

int tier_pol_nlists(const struct tier *t)
{
    return t->pol.kind == TIER_EVICT_REUSE ? TIER_POL_LISTS
         : t->pol.kind == TIER_EVICT_KEEP  ? 2 : 1;
}
