/* SPDX-License-Identifier: MIT */
/*
 * kvt_blocks.c - libkvtier's block calls: lookups and pins, put (reserve,
 * commit, abort), get (lease, release) and remove, each a keys request
 * (kvt_int.h) whose reply is checked before a pool offset becomes a pointer.
 * Moving blocks to and from an engine's paged cache is kvt_offload.c's.
 */
#include <errno.h>
#include <stdbool.h>
#include <string.h>
#include <unistd.h>

#include "kvt_int.h"
#include "kvt_wire.h"
#include "kvtier.h"

/* A pool offset from the daemon, checked before it becomes a pointer. */
static int slot_ptr(const kvt_ns *ns, uint64_t off, void **p)
{
    if (off > ns->c->pool_bytes || ns->block_bytes > ns->c->pool_bytes - off)
        return KVT_EPROTO;
    *p = ns->c->base + off;
    return 0;
}

/* The same for an offset into the hot pool. */
static int hot_slot_ptr(const kvt_ns *ns, uint64_t off, void **p)
{
    if (!ns->c->hot_kind || off > ns->c->hot_bytes || ns->block_bytes > ns->c->hot_bytes - off)
        return KVT_EPROTO;
    *p = ns->c->hot_base + off;
    return 0;
}

/* One batch of a lookup; with pin, a pinning one (pin->id 0: a new pin,
 * else extended). Checks the reply; *hits and *pinned from it. */
static int lookup_batch(kvt_ns *ns, const kvt_key *keys, size_t k, uint32_t wf, kvt_pin *pin,
                        uint32_t hold_ms, uint8_t *tiers, uint32_t *hits, uint32_t *pinned)
{
    struct kvt_wire_lookup_rep rep;
    struct kvt_wire_pin_rep pr = { 0 };
    size_t head = sizeof(rep) + (pin ? sizeof(pr) : 0);
    uint32_t blen;
    int rc = kvt_keys_rpc(ns, KVT_OP_LOOKUP, wf, NULL, pin ? &pin->id : NULL, hold_ms, keys, k,
                      &blen);

    if (rc < 0)
        return rc;
    if (blen != head + k)
        return kvt_fail(ns->c, KVT_EPROTO);
    memcpy(&rep, kvt_reply_body(ns->c), sizeof(rep));
    if (pin)
        memcpy(&pr, kvt_reply_body(ns->c) + sizeof(rep), sizeof(pr));
    if (rep.n != k || rep.hits > k || pr.pinned > rep.hits || (pr.pinned && !pr.pin_id) ||
        (pin && pin->id && pr.pinned && pr.pin_id != pin->id))
        return kvt_fail(ns->c, KVT_EPROTO);
    /* callers index arrays by tier: only KVT_TIER_* values get through */
    for (size_t i = 0; i < k; i++)
        if (kvt_reply_body(ns->c)[head + i] >= KVT_TIER_COUNT)
            return kvt_fail(ns->c, KVT_EPROTO);
    if (tiers)
        memcpy(tiers, kvt_reply_body(ns->c) + head, k);
    *hits = rep.hits;
    *pinned = pr.pinned;
    if (pin && pr.pinned) {
        pin->id = pr.pin_id;
        pin->n += pr.pinned;
        pin->hold_ms = pr.hold_ms;
    }
    return 0;
}

/* kvt_lookup, pinning the leading run into pin when pin is not NULL. */
static int lookup(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags, uint8_t *tiers,
                  kvt_pin *pin, uint32_t hold_ms)
{
    size_t hits = 0;
    bool leading = true;

    /* long chains go in batches; once the leading run ends only the tiers
     * of the rest are still wanted, and nothing more is pinned */
    for (size_t at = 0; at < n; at += KVT_BATCH_MAX) {
        size_t k = n - at < KVT_BATCH_MAX ? n - at : KVT_BATCH_MAX;
        uint32_t wf = (flags & 0xffu) << 8, h, pinned;
        int rc;

        if ((flags & KVT_LOOKUP_PREFETCH) && (ns->hot & KVT_GET_PROMOTE))
            wf |= KVT_WIRE_KF_PROMOTE;
        rc = lookup_batch(ns, keys + at, k, wf, leading ? pin : NULL, hold_ms,
                          tiers ? tiers + at : NULL, &h, &pinned);
        if (rc < 0)
            return rc;
        if (leading)
            hits += h;
        /* a pin cut short by the quota ends what the pin covers */
        if (pin && leading && pinned < h)
            pin = NULL;
        leading = leading && h == k;
        if (!leading && !tiers)
            break;
    }
    return (int)hits;
}

int kvt_lookup(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags, uint8_t *tiers)
{
    if (!ns || (n && !keys))
        return -EINVAL;
    if (ns->hy)
        return kvt_hybrid_lookup(ns, keys, n, flags, tiers);
    return lookup(ns, keys, n, flags, tiers, NULL, 0);
}

int kvt_lookup_pin(kvt_ns *ns, const kvt_key *keys, size_t n, uint32_t hold_ms, kvt_pin *pin,
                   uint8_t *tiers)
{
    int rc;

    if (!ns || !pin || (n && !keys) || hold_ms > KVT_PIN_MAX_MS)
        return -EINVAL;
    *pin = (kvt_pin){ 0 };
    if (ns->hy)
        return -EOPNOTSUPP; /* a hybrid handle's groups are pinned one by one */
    rc = lookup(ns, keys, n, 0, tiers, pin, hold_ms);
    if (rc < 0 && pin->id)
        kvt_unpin(ns->c, pin); /* a later batch failed: hold nothing */
    return rc;
}

/* A request of one id (a lease's, a pin's) that wants no reply. */
static int send_id(kvt_client *c, uint16_t op, uint64_t id)
{
    struct iovec iov[2] = { { 0 }, { &id, sizeof(id) } };

    return kvt_send_req(c, op, KVT_WIRE_F_NOREPLY, iov, 2);
}

/* Let go of what handle h (hsize bytes, its id at *id) holds: op (UNPIN,
 * RELEASE) for the id, then h zeroed, so that a second call does nothing.
 * A handle of id 0 holds nothing. */
static int drop_handle(kvt_client *c, uint16_t op, void *h, size_t hsize, const uint64_t *id)
{
    int rc;

    if (*id == 0)
        return 0;
    rc = send_id(c, op, *id);
    memset(h, 0, hsize);
    return rc;
}

int kvt_unpin(kvt_client *c, kvt_pin *pin)
{
    if (!c || !pin)
        return -EINVAL;
    _Static_assert(sizeof(struct kvt_wire_unpin_req) == sizeof(pin->id), "unpin_req is an id");
    return drop_handle(c, KVT_OP_UNPIN, pin, sizeof(*pin), &pin->id);
}

int kvt_put_reserve(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                    void **slots)
{
    return kvt_put_reserve_flags(ns, parent, keys, n, slots, 0);
}

int kvt_put_reserve_flags(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                          void **slots, unsigned flags)
{
    struct kvt_wire_count_rep rep;
    const uint8_t *offs;
    bool hot = flags & KVT_RESERVE_HOT;
    uint32_t blen;
    int rc;

    if (!ns || (n && !slots) || (flags & ~KVT_RESERVE_HOT))
        return -EINVAL;
    if (hot && !ns->c->hot_kind)
        return -EOPNOTSUPP; /* kvt_hot_attach first */
    /* -EAGAIN: warm is full of blocks on their way to disk and its mover is
     * making room; waiting milliseconds for it beats losing the block, so
     * the wait is here, bounded (KVT_PUT_WAIT_MS), with tierd serving others */
    for (unsigned waited_us = 0, step_us = 200;; waited_us += step_us, step_us *= 2) {
        rc = kvt_keys_rpc(ns, KVT_OP_PUT_RESERVE, hot ? KVT_WIRE_KF_HOT : 0, parent, NULL, 0, keys,
                      n, &blen);
        if (rc != -EAGAIN || waited_us >= KVT_PUT_WAIT_MS * 1000u)
            break;
        if (step_us > 20000)
            step_us = 20000;
        usleep(step_us);
    }
    if (rc < 0)
        return rc;
    memcpy(&rep, kvt_reply_body(ns->c), sizeof(rep) <= blen ? sizeof(rep) : 0);
    if (blen != sizeof(rep) + n * sizeof(uint64_t) || rep.n != n || rep.count > n)
        return kvt_fail(ns->c, KVT_EPROTO);
    offs = kvt_reply_body(ns->c) + sizeof(rep);
    for (size_t i = 0; i < n; i++) {
        uint64_t off;

        memcpy(&off, offs + i * sizeof(off), sizeof(off));
        slots[i] = NULL;
        if (off != KVT_WIRE_NO_SLOT &&
            (hot ? hot_slot_ptr(ns, off, &slots[i]) : slot_ptr(ns, off, &slots[i])) < 0)
            return kvt_fail(ns->c, KVT_EPROTO);
    }
    return (int)rep.count;
}

static int count_rpc(kvt_ns *ns, uint16_t op, const kvt_key *keys, size_t n, uint32_t flags)
{
    struct kvt_wire_count_rep rep;
    uint32_t blen;
    int rc;

    if (!ns)
        return -EINVAL;
    rc = kvt_keys_rpc(ns, op, flags, NULL, NULL, 0, keys, n, &blen);
    if (rc < 0)
        return rc;
    if (blen != sizeof(rep))
        return kvt_fail(ns->c, KVT_EPROTO);
    memcpy(&rep, kvt_reply_body(ns->c), sizeof(rep));
    /* a count of keys among n: more would be a lie, and past INT_MAX negative */
    if (rep.count > n)
        return kvt_fail(ns->c, KVT_EPROTO);
    return (int)rep.count;
}

int kvt_put_commit(kvt_ns *ns, const kvt_key *keys, size_t n)
{
    return count_rpc(ns, KVT_OP_PUT_COMMIT, keys, n, 0);
}

int kvt_put_commit_flags(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags)
{
    if (flags & ~KVT_COMMIT_DURABLE)
        return -EINVAL;
    return count_rpc(ns, KVT_OP_PUT_COMMIT, keys, n,
                     flags & KVT_COMMIT_DURABLE ? KVT_WIRE_KF_DURABLE : 0);
}

int kvt_put_commit_start(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags,
                         kvt_commit *cm)
{
    struct kvt_commit_slot *cs = NULL;
    int rc;

    if (!ns || !cm || (flags & ~KVT_COMMIT_DURABLE))
        return -EINVAL;
    *cm = (kvt_commit){ 0 };
    for (int i = 0; i < KVT_WIRE_COMMITS_MAX && !cs; i++)
        if (!ns->c->commits[i].req_id)
            cs = &ns->c->commits[i];
    if (!cs)
        return -EBUSY; /* as many started as tierd keeps waiting: wait for one */
    rc = kvt_keys_send(ns, KVT_OP_PUT_COMMIT, flags & KVT_COMMIT_DURABLE ? KVT_WIRE_KF_DURABLE : 0,
                       keys, n);
    if (rc < 0)
        return rc;
    *cs = (struct kvt_commit_slot){ .req_id = ns->c->req_id, .n = (uint32_t)n };
    *cm = (kvt_commit){ .id = cs->req_id, .n = (uint32_t)n, .client = ns->c->tag };
    return 0;
}

int kvt_put_commit_wait(kvt_ns *ns, kvt_commit *cm)
{
    struct kvt_commit_slot *cs = NULL;
    int rc;

    if (!ns || !cm || !cm->id || cm->client != ns->c->tag)
        return -EINVAL;
    for (int i = 0; i < KVT_WIRE_COMMITS_MAX && !cs; i++)
        if (ns->c->commits[i].req_id == cm->id)
            cs = &ns->c->commits[i];
    if (!cs)
        return -EINVAL; /* not started on this client, or waited for already */
    rc = kvt_commit_recv(ns->c, cs);
    if (rc == 0)
        rc = cs->rc;
    *cs = (struct kvt_commit_slot){ 0 };
    *cm = (kvt_commit){ 0 };
    return rc;
}

int kvt_put_abort(kvt_ns *ns, const kvt_key *keys, size_t n)
{
    return count_rpc(ns, KVT_OP_PUT_ABORT, keys, n, 0);
}

int kvt_remove(kvt_ns *ns, const kvt_key *keys, size_t n)
{
    return count_rpc(ns, KVT_OP_REMOVE, keys, n, 0);
}

int kvt_put(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
            const void *const *bufs)
{
    void *slots[KVT_BATCH_MAX];
    int rc;

    if (!ns || n > KVT_BATCH_MAX || (n && !bufs))
        return n > KVT_BATCH_MAX ? -E2BIG : -EINVAL;
    rc = kvt_put_reserve(ns, parent, keys, n, slots);
    if (rc <= 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (slots[i])
            memcpy(slots[i], bufs[i], ns->block_bytes);
    rc = kvt_put_commit(ns, keys, n);
    return rc;
}

int kvt_get_lease(kvt_ns *ns, const kvt_key *keys, size_t n, const void **slots,
                  kvt_lease *lease)
{
    return kvt_get_lease_flags(ns, keys, n, 0, slots, NULL, lease);
}

int kvt_get_lease_flags(kvt_ns *ns, const kvt_key *keys, size_t n, unsigned flags,
                        const void **slots, uint8_t *tiers, kvt_lease *lease)
{
    struct kvt_wire_get_rep rep;
    const uint8_t *offs, *tier;
    bool hot = flags & KVT_GET_HOT;
    uint32_t blen, wf = 0;
    int rc;

    if (!ns || !lease || (n && !slots) || (flags & ~(KVT_GET_HOT | KVT_GET_PROMOTE)))
        return -EINVAL;
    *lease = (kvt_lease){ 0 };
    if (flags && !ns->c->hot_kind)
        return -EOPNOTSUPP; /* kvt_hot_attach first */
    wf = (hot ? KVT_WIRE_KF_HOT : 0) | (flags & KVT_GET_PROMOTE ? KVT_WIRE_KF_PROMOTE : 0);
    rc = kvt_keys_rpc(ns, KVT_OP_GET, wf, NULL, NULL, 0, keys, n, &blen);
    if (rc < 0)
        return rc;
    memcpy(&rep, kvt_reply_body(ns->c), sizeof(rep) <= blen ? sizeof(rep) : 0);
    if (blen < sizeof(rep) || rep.hits > n ||
        blen != sizeof(rep) + rep.hits * (sizeof(uint64_t) + hot) ||
        (rep.hits > 0) != (rep.lease_id != 0))
        return kvt_fail(ns->c, KVT_EPROTO);
    offs = kvt_reply_body(ns->c) + sizeof(rep);
    tier = offs + rep.hits * sizeof(uint64_t);
    lease->id = rep.lease_id;
    lease->n = rep.hits;
    for (uint32_t i = 0; i < rep.hits; i++) {
        uint8_t where = hot ? tier[i] : KVT_TIER_WARM;
        uint64_t off;
        void *p;

        memcpy(&off, offs + i * sizeof(off), sizeof(off));
        if (where == KVT_TIER_HOT)
            rc = hot_slot_ptr(ns, off, &p);
        else
            rc = where == KVT_TIER_WARM ? slot_ptr(ns, off, &p) : KVT_EPROTO;
        if (rc < 0) {
            kvt_release(ns, lease); /* what the daemon leased goes back */
            return kvt_fail(ns->c, KVT_EPROTO);
        }
        slots[i] = p;
        if (tiers)
            tiers[i] = where;
    }
    return (int)rep.hits;
}

int kvt_release(kvt_ns *ns, kvt_lease *lease)
{
    if (!ns || !lease)
        return -EINVAL;
    _Static_assert(sizeof(struct kvt_wire_release_req) == sizeof(lease->id),
                   "release_req is an id");
    return drop_handle(ns->c, KVT_OP_RELEASE, lease, sizeof(*lease), &lease->id);
}

int kvt_get(kvt_ns *ns, const kvt_key *keys, size_t n, void *const *bufs)
{
    const void *slots[KVT_BATCH_MAX];
    kvt_lease lease;
    int rc;

    if (!ns || n > KVT_BATCH_MAX || (n && !bufs))
        return n > KVT_BATCH_MAX ? -E2BIG : -EINVAL;
    rc = kvt_get_lease(ns, keys, n, slots, &lease);
    if (rc <= 0)
        return rc;
    for (int i = 0; i < rc; i++)
        memcpy(bufs[i], slots[i], ns->block_bytes);
    kvt_release(ns, &lease);
    return rc;
}
