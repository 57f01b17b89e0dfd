/* SPDX-License-Identifier: MIT */
/*
 * sess_admin.c - a session's requests that move no block: the handshake
 * (HELLO, HOT_ATTACH), opening and listing namespaces, the counters
 * (STATS), a key's story (WHY), FLUSH (answered once the store's flush has
 * ended) and PURGE. Each sees its own tenant only.
 */
#include <errno.h>
#include <string.h>

#include "metrics.h"
#include "sess.h"
#include "sess_int.h"
#include "tenant.h"
#include "tier.h"
#include "tier_hot.h"
#include "tierd.h"

int sess_op_hello(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct kvt_wire_hello_rep rep = {
        .pool_bytes = tier_pool_bytes(s->t->store), .session_id = s->id,
        .max_batch = KVT_BATCH_MAX, .page_bytes = 4096,
    };

    if (h->body_len != sizeof(struct kvt_wire_hello_req))
        return sess_reply_err(s, h, KVT_EPROTO);
    (void)body;
    s->hello = true;
    s->hs_deadline_ms = 0;
    return sess_reply(s, h, 0, &rep, sizeof(rep), NULL, 0, tier_pool_fd(s->t->store));
}

int sess_op_hot_attach(struct sess *s, const struct kvt_wire_hdr *h)
{
    struct kvt_wire_hot_rep rep = { 0 };
    struct tier_hot_export ex;
    int rc;

    if (h->body_len)
        return sess_reply_err(s, h, KVT_EPROTO);
    if (!s->t->hot)
        return sess_reply_err(s, h, -EOPNOTSUPP);
    rc = tier_hot_export(s->t->hot, &ex);
    if (rc < 0)
        return sess_reply_err(s, h, rc);
    _Static_assert(sizeof(rep.ipc) == TIER_HOT_IPC_BYTES, "IPC handle size");
    rep.kind = ex.kind == TIER_HOT_CUDA ? KVT_HOT_CUDA : KVT_HOT_EMULATED;
    rep.device = ex.device;
    rep.bytes = ex.bytes;
    memcpy(rep.ipc, ex.ipc, sizeof(rep.ipc));
    /* one tenant per daemon for now: every client may map the pool (the
     * tenants issue restricts it to the pool's own tenant) */
    s->hot = true;
    return sess_reply(s, h, 0, &rep, sizeof(rep), NULL, 0,
                      ex.kind == TIER_HOT_EMU ? ex.fd : -1);
}

/* ---- namespaces -------------------------------------------------------- */

int sess_op_ns_open(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct kvt_wire_ns_req req;
    struct kvt_wire_ns_rep rep = { 0 };
    int rc;

    if (h->body_len != sizeof(req))
        return sess_reply_err(s, h, KVT_EPROTO);
    memcpy(&req, body, sizeof(req));
    if (req.block_bytes > tier_block_max(s->t->store))
        return sess_reply_err(s, h, -EFBIG);
    rc = tenant_ns_open(s->t, &req, &rep.ns_id);
    if (rc < 0)
        return sess_reply_err(s, h, rc);
    rep.block_bytes = req.block_bytes;
    rep.slot_bytes = tier_slot_bytes(req.block_bytes);
    return sess_reply(s, h, 0, &rep, sizeof(rep), NULL, 0, -1);
}

static void ns_info(const struct tenant *t, uint32_t id, kvt_ns_info *o)
{
    const struct tierd_ns *ns = &t->ns[id - 1];
    const struct tierd_ns_stats *st = &ns->st;

    _Static_assert((int)KVT_MISS_CAUSES == (int)TIER_MISS_N &&
                       (int)KVT_MISS_DROPPED == (int)TIER_EV_DROPPED &&
                       (int)KVT_MISS_ABORTED == (int)TIER_EV_ABORTED &&
                       (int)KVT_MISS_WRITING == (int)TIER_MISS_WRITING &&
                       (int)KVT_MISS_BROKEN == (int)TIER_MISS_BROKEN,
                   "the public miss causes are the store's");
    *o = (kvt_ns_info){
        .id = id, .block_tokens = ns->d.block_tokens, .tp_rank = ns->d.tp_rank,
        .tp_size = ns->d.tp_size, .block_bytes = ns->d.block_bytes,
        .lookups = st->lookups, .lookup_keys = st->lookup_keys, .hit_keys = st->hit_keys,
        .hit_tokens = st->hit_tokens, .put_blocks = st->put_blocks,
        .get_blocks = st->get_blocks, .bytes_in = st->bytes_in, .bytes_out = st->bytes_out,
        .evicted_age_ms = st->why.evicted_age_ms, .deadline_misses = st->deadline_misses,
    };
    memcpy(o->model_id, ns->d.model_id, sizeof(o->model_id));
    memcpy(o->dtype, ns->d.dtype, sizeof(o->dtype));
    memcpy(o->layout, ns->d.layout, sizeof(o->layout));
    /* the wire strings are NUL-padded within their fields, and no longer */
    o->model_id[sizeof(o->model_id) - 1] = o->dtype[sizeof(o->dtype) - 1] =
        o->layout[sizeof(o->layout) - 1] = '\0';
    for (int c = 0; c < TIER_MISS_N; c++)
        o->misses[c] = st->why.cause[c];
}

int sess_op_ns_list(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    static kvt_ns_info info[KVT_WIRE_MSG_MAX / sizeof(kvt_ns_info)];
    struct kvt_wire_ns_list_req req;
    struct kvt_wire_ns_list_rep rep = { 0 };
    uint32_t id;

    if (h->body_len != sizeof(req))
        return sess_reply_err(s, h, KVT_EPROTO);
    memcpy(&req, body, sizeof(req));
    if (req.start == 0 || req.max == 0)
        return sess_reply_err(s, h, -EINVAL);
    for (id = req.start; id <= s->t->ns_cap; id++) {
        if (!tenant_ns_get(s->t, id))
            continue; /* a hole, or another tenant's */
        if (rep.n == req.max || rep.n == sizeof(info) / sizeof(info[0]) - 1) {
            rep.next = id;
            break;
        }
        ns_info(s->t, id, &info[rep.n++]);
    }
    return sess_reply(s, h, 0, &rep, sizeof(rep), info, rep.n * sizeof(info[0]), -1);
}

/* ---- counters ---------------------------------------------------------- */

/* The reply's counters come from kvt_stats_list.h's list: a STORE one is the same
 * field of the store's counters, the TIERS entry the per-tier array, and
 * the TIERD ones are tierd's own (set in sess_op_stats). */
#define STAT_TIER(name, type, metric, help, remote) st->tier[i].name = ts->name[i];
#define STAT_STORE(name) st->name = ts->name;
#define STAT_TIERD(name)
#define STAT_TIERS(name)                                                                   \
    for (int i = 0; i < KVT_TIER_COUNT; i++) {                                             \
        KVT_TIER_STATS_LIST(STAT_TIER)                                                     \
    }
#define STAT(src, name, type, metric, help) STAT_##src(name)

static void stats_from_store(kvt_stats *st, const struct tier_stats *ts)
{
    _Static_assert((int)TIER_L_N == (int)KVT_TIER_COUNT, "the store's per-tier arrays");
    KVT_STATS_LIST(STAT)
}

int sess_op_stats(struct sess *s, const struct kvt_wire_hdr *h)
{
    struct tier_stats ts;
    kvt_stats st = { .version = KVT_STATS_VERSION };

    if (h->body_len)
        return sess_reply_err(s, h, KVT_EPROTO);
    tier_stats_get(s->t->store, &ts);
    stats_from_store(&st, &ts);
    st.clients = s->t->clients; /* of its own tenant: others are none of its business */
    st.namespaces = s->t->nns;
    st.uptime_ms = tierd_now_ms() - s->d->start_ms;
    st.proto_errors = s->t->proto_errors; /* its own: another's say what it does */
    st.deadline_misses = s->t->deadline_misses;
    return sess_reply(s, h, 0, &st, sizeof(st), NULL, 0, -1);
}

/* ---- operators --------------------------------------------------------- */

int sess_op_why(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    static kvt_key_story story[KVT_WIRE_MSG_MAX / sizeof(kvt_key_story) - 1];
    struct kvt_wire_why_rep rep = { 0 };
    struct tier_key key;

    if (h->body_len != KVT_KEY_BYTES)
        return sess_reply_err(s, h, KVT_EPROTO);
    memcpy(key.b, body, KVT_KEY_BYTES);
    /* O(namespaces): an operator's question, not an engine's */
    for (uint32_t id = 1; id <= s->t->ns_cap && rep.n < sizeof(story) / sizeof(story[0]);
         id++) {
        struct tier_story t;
        struct tierd_ns *ns = tenant_ns_get(s->t, id);

        if (!ns)
            continue;
        tier_story_get(ns->store_ns, &key, &t);
        if (!t.present && !t.writing && t.event == TIER_EV_NONE)
            continue;
        story[rep.n++] = (kvt_key_story){
            .ns_id = id, .present = t.present, .writing = t.writing, .tier = t.level,
            .on_disk = t.on_disk, .chain_ok = t.chain_ok, .event = t.event,
            .event_tier = t.event_level, .leases = t.leases, .event_age_ms = t.event_age_ms,
        };
    }
    return sess_reply(s, h, 0, &rep, sizeof(rep), story, rep.n * sizeof(story[0]), -1);
}

int sess_op_flush(struct sess *s, const struct kvt_wire_hdr *h)
{
    if (h->body_len)
        return sess_reply_err(s, h, KVT_EPROTO);
    if (!s->t->cold)
        return sess_reply_err(s, h, -EOPNOTSUPP);
    if (s->flush_wait)
        return sess_reply_err(s, h, -EBUSY);
    /* answered from sess_flush_check() once the store's flush has ended */
    tier_flush_begin(s->t->store);
    s->flush_wait = true;
    s->flush_hdr = *h;
    return 0;
}

void sess_flush_check(struct tierd *d)
{
    struct sess *s, *nx;

    for (s = sess_all; s; s = nx) {
        nx = s->next; /* valid even if closed meanwhile (sess_close) */
        if (s->closed || !s->flush_wait || tier_flush_busy(s->t->store))
            continue;
        s->flush_wait = false;
        if (s->flush_t0)
            metrics_req_done(d->metrics, KVT_OP_FLUSH, s->flush_t0);
        s->flush_t0 = 0;
        if (sess_reply(s, &s->flush_hdr, 0, NULL, 0, NULL, 0, -1) < 0)
            sess_close(s);
    }
}

int sess_op_purge(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct kvt_wire_purge_req req;
    struct kvt_wire_count_rep cnt = { 0 };
    struct tierd_ns *ns;
    int rc;

    if (h->body_len != sizeof(req))
        return sess_reply_err(s, h, KVT_EPROTO);
    memcpy(&req, body, sizeof(req));
    ns = tenant_ns_get(s->t, req.ns_id);
    if (!ns)
        return sess_reply_err(s, h, KVT_ENONS);
    rc = tier_purge_ns(ns->store_ns);
    if (rc < 0)
        return sess_reply_err(s, h, rc);
    tierd_log("namespace %u (%s) purged: %d blocks removed", req.ns_id, ns->d.model_id, rc);
    cnt.count = (uint32_t)rc;
    return sess_reply(s, h, 0, &cnt, sizeof(cnt), NULL, 0, -1);
}
