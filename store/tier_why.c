/* SPDX-License-Identifier: MIT */
/*
 * tier_why.c - miss attribution: the bounded event memory of tier_why.h,
 * and the store's answers built on it (why keys missed, one key's story).
 *
 * Slots are probed linearly over PROBE entries from the key's home slot. A
 * put finds the key's own slot, else an empty one, else evicts the oldest
 * event of the window: O(PROBE) whatever the load, and a key's event is
 * always found within the window it was put in.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_common.h"
#include "tier_int.h"
#include "tier_why.h"

#define PROBE 8

struct ev {
    struct tier_key key;
    uint32_t ns;
    uint8_t used, event, level, pad;
    uint64_t at_ms;
};
_Static_assert(sizeof(struct ev) == 48, "48 bytes per remembered event");

struct tier_why {
    uint32_t mask;  /* capacity - 1 */
    uint32_t count;
    struct ev ev[]; /* the table, in the same allocation (it never grows) */
};

int tier_why_create(uint32_t events, struct tier_why **out)
{
    uint32_t cap = cmn_pow2_fit(events, 64, 1u << 30);
    struct tier_why *w = calloc(1, sizeof(*w) + (size_t)cap * sizeof(w->ev[0]));

    if (!w)
        return -ENOMEM;
    w->mask = cap - 1;
    *out = w;
    return 0;
}

void tier_why_destroy(struct tier_why *w)
{
    free(w);
}

/* Keys are SHA-256 outputs: their first bytes are already uniform. */
static uint32_t home(const struct tier_why *w, uint32_t ns, const struct tier_key *key)
{
    uint32_t h;

    memcpy(&h, key->b, sizeof(h));
    return (h ^ (ns * 0x9e3779b1u)) & w->mask;
}

static bool same(const struct ev *e, uint32_t ns, const struct tier_key *key)
{
    return e->used && e->ns == ns && memcmp(e->key.b, key->b, TIER_KEY_BYTES) == 0;
}

void tier_why_put(struct tier_why *w, uint32_t ns, const struct tier_key *key, uint8_t ev,
                  uint8_t lvl, uint64_t now_ms)
{
    uint32_t at = home(w, ns, key), pick = UINT32_MAX;

    for (uint32_t i = 0; i < PROBE; i++) {
        uint32_t s = (at + i) & w->mask;
        struct ev *e = &w->ev[s];

        if (same(e, ns, key)) {
            pick = s;
            break;
        }
        if (!e->used) {
            if (pick == UINT32_MAX || w->ev[pick].used)
                pick = s; /* the first empty slot, unless the key is further on */
        } else if (pick == UINT32_MAX || (w->ev[pick].used && e->at_ms < w->ev[pick].at_ms)) {
            pick = s;
        }
    }
    if (!w->ev[pick].used)
        w->count++;
    w->ev[pick] = (struct ev){ .key = *key, .ns = ns, .used = 1, .event = ev, .level = lvl,
                               .at_ms = now_ms };
}

bool tier_why_find(const struct tier_why *w, uint32_t ns, const struct tier_key *key,
                   uint8_t *ev, uint8_t *lvl, uint64_t *at_ms)
{
    uint32_t at = home(w, ns, key);

    for (uint32_t i = 0; i < PROBE; i++) {
        const struct ev *e = &w->ev[(at + i) & w->mask];

        if (same(e, ns, key)) {
            *ev = e->event;
            *lvl = e->level;
            *at_ms = e->at_ms;
            return true;
        }
    }
    return false;
}

uint32_t tier_why_count(const struct tier_why *w) { return w->count; }
uint32_t tier_why_capacity(const struct tier_why *w) { return w->mask + 1; }

/* ---- the store's miss causes (tier.h) ---------------------------------- */

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

void tier_miss_why(struct tier_ns *ns, const struct tier_key *keys, size_t n,
                   struct tier_misses *why)
{
    uint64_t now = n ? tier_now_ms() : 0;

    for (size_t j = 0; j < n; j++)
        miss_cause(ns->t, ns->id, &keys[j], j > 0, why, now);
}

void tier_story_get(struct tier_ns *tns, const struct tier_key *key, struct tier_story *out)
{
    struct tier *t = tns->t;
    uint32_t ns = tns->id, id = idx_find(t->idx, ns, key);
    uint64_t at;

    *out = (struct tier_story){ 0 };
    if (id != TIER_NONE && idx_at(t->idx, id)->state == IDX_COMMITTED) {
        const struct idx_entry *e = idx_at(t->idx, id);

        out->present = true;
        out->level = e->level;
        out->on_disk = e->flags & IDX_F_COLD;
        out->leases = e->leases;
        out->moving = e->flags & IDX_F_MOVING;
        out->held = tier_dheld_live(t, id);
        out->chain_ok = e->parent == TIER_NONE ||
                        idx_at(t->idx, e->parent)->state == IDX_COMMITTED;
        return;
    }
    if (id != TIER_NONE && idx_at(t->idx, id)->state == IDX_RESERVED) {
        out->writing = true;
        return;
    }
    if (tier_why_find(t->why, ns, key, &out->event, &out->event_level, &at))
        out->event_age_ms = tier_now_ms() - at;
}
