/* SPDX-License-Identifier: MIT */
/*
 * sess_data.c - a session's data operations: lookup, reserve, commit
 * (and the durable commit), abort, get, release, remove; what a session
 * holds for them (reservations, leases; its pins are sess_pin.c's) and
 * gives back; the requests a session may have waiting (one get or lookup,
 * and durable commits in their own slots). A get, a lookup or a durable
 * commit is submitted to the store once
 * (tier_req_submit), which drives it through its waits for the remote tier
 * and the disk and calls back once (req_done): here it is only framed into
 * a reply.
 *
 * Every request reaching here passed sess.c's framing checks; its content
 * (counts, namespace, block size, flags) is checked here (parse_keys)
 * before the store sees it.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "metrics.h"
#include "sess.h"
#include "sess_int.h"
#include "tenant.h"
#include "tier.h"
#include "tierd.h"

/* Leases one session may hold at once: an engine that forgets to release
 * gets -EBUSY instead of growing the daemon without bound. */
#define SESS_LEASES_MAX 4096

/* One request at a time (single thread): static buffers for the store's
 * answers (a reserve, a lookup behind a waiting request) and the get reply. */
static uint32_t ids_buf[KVT_BATCH_MAX];
static uint64_t offs_buf[KVT_BATCH_MAX];
static uint8_t tiers_buf[KVT_BATCH_MAX];
static _Alignas(8) uint8_t get_buf[KVT_BATCH_MAX * (sizeof(uint64_t) + 1)];

/* ---- metrics: per-namespace counters, request latency ------------------ */

/* ns_id passed parse_keys: it names an open namespace of ours */
static struct tierd_ns_stats *ns_stats(struct sess *s, uint32_t ns_id)
{
    return &s->t->ns[ns_id - 1].st;
}

static void count_lookup(struct sess *s, uint32_t ns_id, uint32_t n, uint32_t hits,
                         const struct tier_misses *why)
{
    struct tierd_ns_stats *st = ns_stats(s, ns_id);

    for (int c = 0; c < TIER_MISS_N; c++)
        st->why.cause[c] += why->cause[c];
    st->why.evicted_age_ms += why->evicted_age_ms;

    st->lookups++;
    st->lookup_keys += n;
    st->hit_keys += hits;
    st->miss_keys += n - hits;
    st->hit_tokens += (uint64_t)hits * s->t->ns[ns_id - 1].d.block_tokens;
}

static void count_blocks(struct sess *s, uint32_t ns_id, uint32_t n, bool put)
{
    struct tierd_ns_stats *st = ns_stats(s, ns_id);
    uint64_t bytes = (uint64_t)n * s->t->ns[ns_id - 1].d.block_bytes;

    if (put) {
        st->put_blocks += n;
        st->bytes_in += bytes;
    } else {
        st->get_blocks += n;
        st->bytes_out += bytes;
    }
}

/* A deferred reply is going out now: its request's latency. */
static void pend_done(struct sess *s, struct pending *p)
{
    metrics_req_done(s->d->metrics, p->hdr.op, p->t0_ns);
    p->t0_ns = 0;
}

/* ---- bookkeeping: reservations and leases ------------------------------ */

/* What a lease of n blocks costs tierd: its entry, its ids and malloc's
 * overhead; all of a tenant's leases together stay within its lease_bytes. */
static uint64_t lease_cost(uint32_t n)
{
    return sizeof(struct lease) + (uint64_t)n * sizeof(uint32_t) + 16;
}

static int remember_resv(struct sess *s, const uint32_t *ids, size_t n)
{
    if (s->nresv + n > s->resv_cap) {
        size_t cap = s->resv_cap ? s->resv_cap : 64;
        uint32_t *r;

        while (cap < s->nresv + n)
            cap *= 2;
        r = realloc(s->resv, cap * sizeof(*r));
        if (!r)
            return -ENOMEM;
        s->resv = r;
        s->resv_cap = cap;
    }
    for (size_t i = 0; i < n; i++)
        if (ids[i] != TIER_NONE)
            s->resv[s->nresv++] = ids[i];
    return 0;
}

/* Drop ids that are no longer our reservations. O(outstanding), which is
 * about one batch for a well-behaved client. */
static void prune_resv(struct sess *s)
{
    size_t k = 0;

    /* amortised: only once the list doubled since the last prune, so a
     * client committing a big reservation a few keys at a time stays linear */
    if (s->nresv < 2 * s->resv_live)
        return;

    for (size_t i = 0; i < s->nresv; i++)
        if (tier_reserved_by(s->t->store, s->resv[i], s->id))
            s->resv[k++] = s->resv[i];
    s->nresv = k;
    s->resv_live = k > 32 ? k : 32;
}

/* A lease for the n blocks of ids, or NULL with *err: -EBUSY (this
 * session's lease count, or its tenant's lease memory) or -ENOMEM. */
static struct lease *new_lease(struct sess *s, const uint32_t *ids, uint32_t n, int *err)
{
    uint64_t cost = lease_cost(n);
    struct lease *l;

    *err = -EBUSY;
    if (s->nlease >= SESS_LEASES_MAX || s->t->lease_bytes + cost > s->t->lease_bytes_max)
        return NULL;
    *err = -ENOMEM;
    if (s->nlease == s->lease_cap) {
        size_t cap = s->lease_cap ? s->lease_cap * 2 : 8;

        l = realloc(s->lease, cap * sizeof(*l));
        if (!l)
            return NULL;
        s->lease = l;
        s->lease_cap = cap;
    }
    l = &s->lease[s->nlease];
    l->ids = malloc((size_t)n * sizeof(uint32_t));
    if (!l->ids)
        return NULL;
    memcpy(l->ids, ids, (size_t)n * sizeof(uint32_t));
    l->n = n;
    l->id = ++s->lease_seq ? s->lease_seq : ++s->lease_seq; /* never 0 */
    s->nlease++;
    s->t->lease_bytes += cost;
    return l;
}

/* A get's reply: a lease on the first hits blocks of ids (none for 0
 * hits), offs[hits], and for a client reading hot slots tiers[hits] (where
 * each offset points). Without a lease the blocks go back, and the error is
 * the reply. */
static int reply_get(struct sess *s, const struct kvt_wire_hdr *req, uint32_t ns_id,
                     const uint32_t *ids, uint32_t hits, const uint64_t *offs,
                     const uint8_t *tiers)
{
    struct kvt_wire_get_rep rep = { .hits = hits };
    size_t olen = (size_t)hits * sizeof(uint64_t);

    if (hits > 0) {
        int err;
        struct lease *l = new_lease(s, ids, hits, &err);

        if (!l) {
            tier_release(s->t->store, ids, hits, false);
            return sess_reply_err(s, req, err);
        }
        rep.lease_id = l->id;
    }
    count_blocks(s, ns_id, hits, false);
    memcpy(get_buf, offs, olen);
    if (tiers)
        memcpy(get_buf + olen, tiers, hits);
    return sess_reply(s, req, 0, &rep, sizeof(rep), get_buf, olen + (tiers ? hits : 0), -1);
}

/* ---- keys requests: decoding, lookups ---------------------------------- */

/* Decode and check a keys request. 0 or the error to reply with. */
static int parse_keys(struct sess *s, const uint8_t *body, uint32_t len, struct kreq *k)
{
    struct kvt_wire_keys_req r;
    const struct tierd_ns *ns;
    size_t want;

    if (len < sizeof(r))
        return KVT_EPROTO;
    memcpy(&r, body, sizeof(r));
    if (r.n > KVT_BATCH_MAX)
        return -E2BIG;
    want = sizeof(r) + (r.flags & KVT_WIRE_KF_PARENT ? KVT_KEY_BYTES : 0) +
           (r.flags & KVT_WIRE_KF_PIN ? sizeof(uint64_t) : 0) + (size_t)r.n * KVT_KEY_BYTES;
    if (len != want)
        return KVT_EPROTO;
    ns = tenant_ns_get(s->t, r.ns_id);
    if (!ns)
        return KVT_ENONS;
    if (r.block_bytes != ns->d.block_bytes)
        return KVT_EBLOCKSIZE;
    k->ns_id = r.ns_id;
    k->ns = ns->store_ns;
    k->n = r.n;
    k->flags = r.flags;
    k->deadline_ms = r.deadline_ms;
    body += sizeof(r);
    k->parent = NULL;
    if (r.flags & KVT_WIRE_KF_PARENT) {
        k->parent = (const struct tier_key *)body;
        body += KVT_KEY_BYTES;
    }
    k->pin_id = 0;
    if (r.flags & KVT_WIRE_KF_PIN) {
        memcpy(&k->pin_id, body, sizeof(k->pin_id));
        body += sizeof(k->pin_id);
    }
    k->keys = (const struct tier_key *)body;
    return 0;
}

/* A lookup's answer: hits keys in a leading run, remote_hits of them on
 * the remote tier (tiers: each key's tier). */
static int lookup_done(struct sess *s, const struct kvt_wire_hdr *h, const struct kreq *k,
                       uint32_t hits, uint32_t remote_hits, const uint8_t *tiers)
{
    struct kvt_wire_lookup_rep rep = { .n = k->n, .hits = hits };
    struct tier_misses why = { 0 };

    /* why the keys after the run missed: no counters, the lookup counted */
    tier_miss_why(k->ns, k->keys + hits, k->n - hits, &why);
    count_lookup(s, k->ns_id, k->n, hits, &why);
    if (k->flags & KVT_WIRE_KF_PIN) {
        struct {
            struct kvt_wire_lookup_rep l;
            struct kvt_wire_pin_rep p;
        } both = { .l = rep };
        /* the remote's run is not in the store yet: pinned are the local hits */
        int rc = sess_pin_run(s, k, hits - remote_hits, &both.p);

        if (rc < 0)
            return sess_reply_err(s, h, rc);
        if (remote_hits)
            tier_get_remote(k->ns, k->keys, hits, NULL);
        return sess_reply(s, h, 0, &both, sizeof(both), tiers, k->n, -1);
    }
    if ((k->flags >> 8) & KVT_LOOKUP_PREFETCH) {
        tier_prefetch(k->ns, k->keys, hits,
                      k->flags & KVT_WIRE_KF_PROMOTE ? TIER_GET_PROMOTE : 0);
        if (remote_hits) /* and start reading the remote's run into warm */
            tier_get_remote(k->ns, k->keys, hits, NULL);
    }
    return sess_reply(s, h, 0, &rep, sizeof(rep), tiers, k->n, -1);
}

/* ---- gets and lookups: the store's requests ---------------------------
 *
 * With a remote tier, a LOOKUP whose local leading run stops early asks the
 * cluster about the keys after it (one pipelined probe), and a GET asks it
 * for the blocks after it (read into warm slots); either waits at most for
 * the remote's bound (or the get's own deadline), and a get then for the
 * disk at most for its deadline. The store drives all of it (tier_req_*)
 * and calls req_done once: the lookup with the remote run added, the get
 * with its leases.
 */

/* How long a request waits for the remote tier: a few of its timeouts
 * (its workers may have a batch ahead), then it is answered without. */
static uint64_t remote_wait_ms(const struct tierd *d)
{
    return 3 * (uint64_t)(d->remote.timeout_ms ? d->remote.timeout_ms : 100) + 20;
}

/* The store's one call for s's request waiting in p: the reply. */
static void answer(struct sess *s, struct pending *p, const struct tier_req_res *res)
{
    struct kreq k = p->req;
    int rc;

    if (s->closed || p->kind != SESS_PEND_REQ) {
        /* (cancelled requests are never answered); a get's leases are
         * ours from here, answered or not */
        if (res->op == TIER_REQ_GET && res->rc > 0)
            tier_release(s->t->store, res->ids, (size_t)res->rc, s->closed);
        return;
    }
    p->kind = SESS_PEND_NONE;
    pend_done(s, p); /* (a request answered inside its submit has no t0 yet) */
    k.keys = res->keys;
    if (res->op == TIER_REQ_COMMIT) {
        struct kvt_wire_count_rep cnt = { .count = (uint32_t)res->rc };

        if (res->late)
            s->d->durable_wait_timeouts++;
        rc = res->err ? sess_reply_err(s, &p->hdr, res->err)
                      : sess_reply(s, &p->hdr, 0, &cnt, sizeof(cnt), NULL, 0, -1);
    } else if (res->op == TIER_REQ_LOOKUP) {
        rc = lookup_done(s, &p->hdr, &k, (uint32_t)res->rc, res->remote, res->tiers);
    } else if (res->rc < 0) {
        rc = sess_reply_err(s, &p->hdr, res->rc);
    } else {
        if (res->late) {
            s->d->get_deadline_misses++;
            s->t->deadline_misses++;
            ns_stats(s, k.ns_id)->deadline_misses++;
        }
        rc = reply_get(s, &p->hdr, k.ns_id, res->ids, (uint32_t)res->rc, res->offs,
                       k.flags & KVT_WIRE_KF_HOT ? res->tiers : NULL);
    }
    if (rc < 0 && s->submitting)
        s->submit_rc = rc; /* answered inside submit: on_read drops the client */
    else if (rc < 0)
        sess_close(s); /* the client stopped reading */
}

static void req_done(void *user, const struct tier_req_res *res)
{
    struct sess *s = user;

    answer(s, &s->pend, res);
}

static void commit_req_done(void *user, const struct tier_req_res *res)
{
    struct commit_slot *cs = user;

    answer(cs->s, &cs->pend, res);
}

/* Hand the get, lookup or durable commit k of h to the store, waiting in
 * p with the request *rq (made on first use, calling done with user):
 * answered by answer(), now or once its waits end. */
static int submit_in(struct sess *s, struct pending *p, struct tier_req **rq, tier_req_fn done,
                     void *user, const struct kvt_wire_hdr *h, const struct kreq *k)
{
    struct tier_req_args a = {
        .op = h->op == KVT_OP_GET ? TIER_REQ_GET
            : h->op == KVT_OP_LOOKUP ? TIER_REQ_LOOKUP : TIER_REQ_COMMIT,
        .ns = k->ns, .keys = k->keys, .n = k->n,
        .flags = (k->flags & KVT_WIRE_KF_HOT ? TIER_GET_HOT : 0) |
                 (k->flags & KVT_WIRE_KF_PROMOTE ? TIER_GET_PROMOTE : 0),
        .owner = s->id,
        /* a durable commit's is bounded: a key another client reserved and
         * never finishes would hold it (and its client) for ever */
        .deadline_ms = h->op == KVT_OP_GET ? k->deadline_ms
                     : h->op == KVT_OP_LOOKUP ? 0 : s->d->durable_wait_ms,
    };
    uint64_t wait_ms = remote_wait_ms(s->d);
    uint32_t hits;
    int rc;

    if (p->kind != SESS_PEND_NONE) {
        /* a lookup behind a waiting request (a get or a commit refused
         * that already): answered at once from the local tiers, without
         * the remote's */
        hits = (uint32_t)tier_lookup(k->ns, k->keys, k->n, tiers_buf);
        return lookup_done(s, h, k, hits, 0, tiers_buf);
    }
    if (!*rq && (rc = tier_req_create(s->t->store, KVT_BATCH_MAX, done, user, rq)) < 0)
        return sess_reply_err(s, h, rc);
    /* (a pinning lookup's deadline_ms is how long its pin holds) */
    if (k->deadline_ms && k->deadline_ms < wait_ms && !(k->flags & KVT_WIRE_KF_PIN))
        wait_ms = k->deadline_ms;
    a.remote_ms = s->t->remote && a.op != TIER_REQ_COMMIT ? (uint32_t)wait_ms : 0;
    *p = (struct pending){ .kind = SESS_PEND_REQ, .hdr = *h, .req = *k };
    s->submitting = true;
    s->submit_rc = 0;
    rc = tier_req_submit(*rq, &a); /* (idle, n checked: it does not refuse) */
    s->submitting = false;
    if (rc < 0) {
        p->kind = SESS_PEND_NONE;
        return sess_reply_err(s, h, rc);
    }
    if (s->submit_rc < 0)
        return s->submit_rc;
    if (p->kind == SESS_PEND_REQ) {
        s->armed = p;
        if (tier_req_bound(*rq))
            sess_arm_timer(tier_req_bound(*rq));
    }
    return 0;
}

static int submit(struct sess *s, const struct kvt_wire_hdr *h, const struct kreq *k)
{
    return submit_in(s, &s->pend, &s->req, req_done, s, h, k);
}

/* ---- the operations ---------------------------------------------------- */

static int do_reserve(struct sess *s, const struct kvt_wire_hdr *h, const struct kreq *k)
{
    struct kvt_wire_count_rep cnt = { .n = k->n };
    int rc = (k->flags & KVT_WIRE_KF_HOT ? tier_reserve_hot : tier_reserve)(
        k->ns, s->id, k->parent, k->keys, k->n, ids_buf, offs_buf);

    if (rc < 0)
        return sess_reply_err(s, h, rc);
    if (remember_resv(s, ids_buf, k->n) < 0) {
        tier_abort_ids(s->t->store, s->id, ids_buf, k->n);
        return sess_reply_err(s, h, -ENOMEM);
    }
    cnt.count = (uint32_t)rc;
    return sess_reply(s, h, 0, &cnt, sizeof(cnt), offs_buf, k->n * sizeof(uint64_t), -1);
}

/* A durable commit: the store answers once every block of the batch is on
 * disk, or at the durable-wait bound with -EAGAIN (req_done), in the first
 * free commit slot; -EBUSY when the client already has every slot waiting. */
static int commit_durable(struct sess *s, const struct kvt_wire_hdr *h, const struct kreq *k)
{
    struct commit_slot *cs = NULL;
    int rc;

    for (int i = 0; i < KVT_WIRE_COMMITS_MAX && !cs; i++)
        if (s->commit[i].pend.kind == SESS_PEND_NONE)
            cs = &s->commit[i];
    if (!cs)
        return sess_reply_err(s, h, -EBUSY);
    cs->s = s;
    rc = submit_in(s, &cs->pend, &cs->req, commit_req_done, cs, h, k);
    prune_resv(s);
    if (cs->req) /* (none: it could not be made, and nothing was committed) */
        count_blocks(s, k->ns_id, tier_req_committed(cs->req), true);
    return rc;
}

static int do_commit(struct sess *s, const struct kvt_wire_hdr *h, const struct kreq *k)
{
    struct kvt_wire_count_rep cnt = { 0 };

    if (k->flags & KVT_WIRE_KF_DURABLE)
        return commit_durable(s, h, k);
    cnt.count = (uint32_t)tier_commit(k->ns, s->id, k->keys, k->n);
    count_blocks(s, k->ns_id, cnt.count, true);
    prune_resv(s);
    return sess_reply(s, h, 0, &cnt, sizeof(cnt), NULL, 0, -1);
}

/* A get: the store leases the leading run, reading first what the remote
 * tier holds and waiting for blocks on their way from disk (submit). */
static int do_get(struct sess *s, const struct kvt_wire_hdr *h, const struct kreq *k)
{
    if (s->nlease >= SESS_LEASES_MAX ||
        s->t->lease_bytes + lease_cost(k->n) > s->t->lease_bytes_max)
        return sess_reply_err(s, h, -EBUSY); /* refused before anything is read */
    if (s->pend.kind != SESS_PEND_NONE)
        return sess_reply_err(s, h, -EBUSY); /* one get at a time per client */
    return submit(s, h, k);
}

int sess_op_keys(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct kvt_wire_count_rep cnt = { 0 };
    struct kreq k;
    int rc = parse_keys(s, body, h->body_len, &k);

    if (rc < 0)
        return sess_reply_err(s, h, rc);
    /* hot slots only for a client that mapped the hot pool */
    if ((k.flags & (KVT_WIRE_KF_HOT | KVT_WIRE_KF_PROMOTE)) && !s->hot)
        return sess_reply_err(s, h, KVT_EPROTO);
    if ((k.flags & KVT_WIRE_KF_PIN) && h->op != KVT_OP_LOOKUP)
        return sess_reply_err(s, h, KVT_EPROTO); /* only lookups pin */
    switch (h->op) {
    case KVT_OP_LOOKUP:
        return submit(s, h, &k);
    case KVT_OP_PUT_RESERVE:
        return do_reserve(s, h, &k);
    case KVT_OP_PUT_COMMIT:
        return do_commit(s, h, &k);
    case KVT_OP_PUT_ABORT:
        cnt.count = (uint32_t)tier_abort(k.ns, s->id, k.keys, k.n);
        prune_resv(s);
        return sess_reply(s, h, 0, &cnt, sizeof(cnt), NULL, 0, -1);
    case KVT_OP_REMOVE:
        cnt.count = (uint32_t)tier_remove(k.ns, k.keys, k.n);
        return sess_reply(s, h, 0, &cnt, sizeof(cnt), NULL, 0, -1);
    case KVT_OP_GET:
        return do_get(s, h, &k);
    }
    return sess_reply_err(s, h, KVT_EPROTO);
}

int sess_op_release(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct kvt_wire_release_req r;

    if (h->body_len != sizeof(r))
        return sess_reply_err(s, h, KVT_EPROTO);
    memcpy(&r, body, sizeof(r));
    for (size_t i = 0; i < s->nlease; i++) {
        if (s->lease[i].id != r.lease_id)
            continue;
        tier_release(s->t->store, s->lease[i].ids, s->lease[i].n, false);
        free(s->lease[i].ids);
        s->t->lease_bytes -= lease_cost(s->lease[i].n);
        s->lease[i] = s->lease[--s->nlease];
        return sess_reply(s, h, 0, NULL, 0, NULL, 0, -1);
    }
    sess_count_proto_error(s); /* a lease that is not ours: counted, even unanswered */
    return sess_reply_err(s, h, -ENOENT);
}

/* ---- deadlines and reclaim --------------------------------------------- */

uint64_t sess_data_expire(struct sess *s, uint64_t now, uint64_t next)
{
    next = sess_pin_expire(s, now, next);
    if (s->closed)
        return next;
    /* (each answered by answer(), whose failed reply may close s: checked
     * before the next) */
    for (int i = 0; i < KVT_WIRE_COMMITS_MAX && !s->closed; i++)
        if (s->commit[i].pend.kind == SESS_PEND_REQ)
            next = sess_earliest(next, tier_req_expire(s->commit[i].req, now));
    if (s->closed || s->pend.kind != SESS_PEND_REQ)
        return next;
    return sess_earliest(next, tier_req_expire(s->req, now));
}

size_t sess_data_reclaim(struct sess *s)
{
    struct tier *store = s->t ? s->t->store : NULL;
    size_t back = 0;

    if (s->req) /* a get's leases, if it waits for the disk */
        back += tier_req_cancel(s->req);
    s->pend.kind = SESS_PEND_NONE;
    for (int i = 0; i < KVT_WIRE_COMMITS_MAX; i++) {
        if (s->commit[i].req)
            tier_req_cancel(s->commit[i].req); /* (a commit holds no leases) */
        s->commit[i].pend.kind = SESS_PEND_NONE;
    }
    for (size_t i = 0; i < s->nlease; i++) {
        tier_release(store, s->lease[i].ids, s->lease[i].n, true);
        back += s->lease[i].n;
        s->t->lease_bytes -= lease_cost(s->lease[i].n); /* (leases only in a tenant) */
    }
    back += sess_pin_reclaim(s);
    if (store)
        back += tier_abort_ids(store, s->id, s->resv, s->nresv);
    return back;
}

void sess_data_free(struct sess *s)
{
    tier_req_destroy(s->req);
    for (int i = 0; i < KVT_WIRE_COMMITS_MAX; i++)
        tier_req_destroy(s->commit[i].req);
    for (size_t i = 0; i < s->nlease; i++)
        free(s->lease[i].ids);
    free(s->lease);
    sess_pin_free(s);
    free(s->resv);
}
