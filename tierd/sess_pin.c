/* SPDX-License-Identifier: MIT */
/*
 * sess_pin.c - the pins of a session: a pinning lookup's hold on blocks
 * (tier_pin), made or grown within the tenant's pin budget, found by id
 * from any session of the tenant (UNPIN), dropped when they expire or
 * their session goes.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "sess_int.h"
#include "tenant.h"
#include "tier.h"
#include "tierd.h"

/* Pins a client may hold at once (an engine's scheduler: one per request
 * and rank in flight). The blocks of all the pins of a tenant's clients
 * hold at most a quarter of its warm tier, so pins never crowd out the puts
 * they wait for. */
#define SESS_PINS_MAX 4096
#define PIN_QUOTA_SHARE 4

/* Release pin i of s (the last pin takes its place). */
static void pin_drop(struct sess *s, size_t i)
{
    struct pin *p = &s->pins[i];

    tier_release(s->t->store, p->ids, p->n, false);
    s->t->pinned_bytes -= p->bytes;
    free(p->ids);
    *p = s->pins[--s->npin];
}

/* The session holding pin id, if it is of tenant t; *at: the pin's index. */
static struct sess *pin_owner(const struct tenant *t, uint64_t id, size_t *at)
{
    for (struct sess *o = sess_all; o; o = o->next) {
        if (o->id != (uint32_t)(id >> 32) || o->t != t)
            continue;
        for (size_t i = 0; i < o->npin; i++)
            if (o->pins[i].id == id) {
                *at = i;
                return o;
            }
        return NULL;
    }
    return NULL;
}

/* The pin a pinning lookup grows: the client's own pin_id (only while it
 * holds), or a new one at s->npin, not counted in npin yet. 0 and *at, or
 * the error. */
static int pin_slot(struct sess *s, uint64_t pin_id, size_t *at)
{
    *at = s->npin;
    if (pin_id)
        return pin_owner(s->t, pin_id, at) == s ? 0 : -ENOENT;
    if (s->npin == SESS_PINS_MAX)
        return -EBUSY;
    if (CMN_GROW(&s->pins, &s->pin_cap, s->npin + 1, 4) < 0)
        return -ENOMEM;
    s->pins[*at] = (struct pin){ .id = (uint64_t)s->id << 32 | ++s->pin_seq };
    return 0;
}

int sess_pin_run(struct sess *s, const struct kreq *k, uint32_t local,
                   struct kvt_wire_pin_rep *out)
{
    uint64_t quota = s->t->warm_bytes / PIN_QUOTA_SHARE, hold = k->deadline_ms;
    uint64_t used = s->t->pinned_bytes;
    /* a pinned block costs the slot it holds (a page at least), so that
     * blocks of a byte cannot pin without bound (each pin id is 4 bytes of
     * tierd's memory) */
    uint64_t cost = tier_slot_bytes(tier_ns_block_bytes(k->ns));
    uint64_t room = quota > used ? (quota - used) / cost : 0;
    size_t at;
    struct pin *p;
    uint32_t want = local < room ? local : (uint32_t)room, got;
    int rc;

    if (!hold)
        hold = KVT_WIRE_PIN_DEFAULT_MS;
    if (hold > KVT_WIRE_PIN_MAX_MS)
        return -EINVAL;
    rc = pin_slot(s, k->pin_id, &at);
    if (rc < 0)
        return rc;
    p = &s->pins[at];
    if (want && p->n + want > p->cap) {
        uint32_t *ids = realloc(p->ids, (p->n + want) * sizeof(*ids));

        if (!ids)
            return -ENOMEM; /* a new pin is not counted yet: nothing to undo */
        p->ids = ids;
        p->cap = p->n + want;
    }
    /* (nothing to pin: a new pin has no ids array yet) */
    got = !want ? 0
                : (uint32_t)tier_pin(k->ns, k->keys, want,
                                     k->flags & KVT_WIRE_KF_PROMOTE ? TIER_GET_PROMOTE : 0,
                                     p->ids + p->n);
    p->n += got;
    p->bytes += (uint64_t)got * cost;
    s->t->pinned_bytes += (uint64_t)got * cost;
    p->expire_ms = tierd_now_ms() + hold;
    *out = (struct kvt_wire_pin_rep){ .hold_ms = (uint32_t)hold };
    if (at == s->npin && p->n == 0) {
        free(p->ids); /* nothing held: no pin */
        return 0;
    }
    if (at == s->npin)
        s->npin++;
    sess_arm_timer(p->expire_ms);
    out->pin_id = p->id;
    out->pinned = got;
    return 0;
}


int sess_op_unpin(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct kvt_wire_unpin_req r;
    struct sess *o;
    size_t at;

    if (h->body_len != sizeof(r))
        return sess_reply_err(s, h, KVT_EPROTO);
    memcpy(&r, body, sizeof(r));
    o = pin_owner(s->t, r.pin_id, &at);
    if (!o)
        return sess_reply_err(s, h, -ENOENT); /* expired, released, or no pin of this tenant */
    pin_drop(o, at);
    return sess_reply(s, h, 0, NULL, 0, NULL, 0, -1);
}

uint64_t sess_pin_expire(struct sess *s, uint64_t now, uint64_t next)
{
    for (size_t i = 0; i < s->npin && !s->closed;) {
        if (s->pins[i].expire_ms <= now) {
            s->d->pins_expired++;
            pin_drop(s, i); /* the last pin moved into i */
            continue;
        }
        next = sess_earliest(next, s->pins[i].expire_ms);
        i++;
    }
    return next;
}

size_t sess_pin_reclaim(struct sess *s)
{
    size_t back = 0;

    for (size_t i = 0; i < s->npin; i++) {
        tier_release(s->t->store, s->pins[i].ids, s->pins[i].n, true);
        s->t->pinned_bytes -= s->pins[i].bytes;
        back += s->pins[i].n;
    }
    return back;
}

void sess_pin_free(struct sess *s)
{
    for (size_t i = 0; i < s->npin; i++)
        free(s->pins[i].ids);
    free(s->pins);
}
