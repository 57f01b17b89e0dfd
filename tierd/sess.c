/* SPDX-License-Identifier: MIT */
/*
 * sess.c - one session per connected client.
 *
 * Each readable event drains up to a few messages. A message is checked in
 * two stages: framing (size, magic, version, body length), whose failure
 * means the peer cannot be trusted to stay in sync and costs it the
 * connection; then content (opcode, counts, namespace, block size), whose
 * failure gets an error reply and leaves the connection up. The store sees
 * only requests that passed both.
 *
 * A session remembers what it holds in the store: the ids it reserved and
 * its leases. When the client goes (close, crash, kill -9: the kernel closes
 * the socket either way) both are given back.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <fcntl.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <sys/uio.h>
#include <unistd.h>

#include "ev.h"
#include "metrics.h"
#include "sess.h"
#include "tier.h"
#include "tier_hot.h"
#include "tier_remote.h"
#include "tenant.h"
#include "tierd.h"

struct lease {
    uint64_t id;   /* as told to the client: from the session's random start */
    uint32_t n;    /* blocks */
    uint32_t *ids; /* store entry ids, owned */
};

/* A pinning lookup's hold on blocks (tier_pin), for a get by any session of
 * the tenant: an engine's scheduler looks up and pins, its workers load. */
struct pin {
    uint64_t id;        /* the owner's session id << 32 | a count: found from the id */
    uint64_t expire_ms; /* CLOCK_MONOTONIC ms */
    uint64_t bytes;     /* counted in its tenant's pin budget */
    uint32_t n, cap;
    uint32_t *ids;      /* store entry ids, owned */
};

/* Pins a client may hold at once (an engine's scheduler: one per request
 * and rank in flight). The blocks of all the pins of a tenant's clients
 * hold at most a quarter of its warm tier, so pins never crowd out the puts
 * they wait for. */
#define SESS_PINS_MAX 4096
#define PIN_QUOTA_SHARE 4

/* A get waiting for blocks on their way from disk, or a durable commit
 * waiting for its writes. A client has at most one request outstanding, so
 * one per session. */
struct pending {
    bool active;
    bool commit;             /* a durable commit (else a get) */
    bool armed;              /* commit: the store call returned, waiting is known */
    uint32_t count;          /* commit: blocks committed */
    int err;                 /* commit: first write error */
    struct kvt_wire_hdr hdr; /* the request being answered */
    uint32_t n;              /* blocks leased for it */
    uint32_t waiting;        /* of those, still on their way */
    uint32_t fail_at;        /* first block lost (n: none) */
    uint64_t deadline_ms;    /* CLOCK_MONOTONIC ms; 0: none */
    bool hot;                /* get: the client reads hot slots (tiers follow offs) */
    uint32_t *ids;           /* KVT_BATCH_MAX each, allocated on first use */
    uint64_t *offs;
    uint8_t *ready;
    uint8_t *tiers;
    uint32_t ns_id;          /* get: its namespace (for the metrics) */
    uint64_t t0_ns;          /* when the request came (metrics_req_start; 0: none) */
    /* a get or lookup waiting for the remote tier (remote_wait) */
    bool remote;             /* the remote tier is asked; answered by finish_remote */
    uint32_t base;           /* lookup: the local leading hits before the keys asked */
    uint8_t *body;           /* the request's body, kept until then (KVT_WIRE_MSG_MAX) */
};

struct sess {
    struct tierd *d;
    struct tenant *t;          /* by SO_PEERCRED; NULL: refused at its first message */
    int fd;
    uint32_t id;               /* owner id in the store: random, unique among sessions */
    uid_t uid;                 /* SO_PEERCRED at accept */
    pid_t pid;
    bool hello;                /* HELLO done: the pool is mapped */
    bool hot;                  /* HOT_ATTACH done: it may be handed hot slots */
    int refuse;                /* != 0: over a limit; its first message is answered
                                  with this error, then it is closed (not counted
                                  in d->clients) */
    uint32_t *resv;            /* ids reserved; pruned after commit/abort */
    size_t nresv, resv_cap;
    size_t resv_live;          /* ids left after the last prune (>= 32) */
    struct lease *lease;       /* outstanding leases; linear search, few per client */
    size_t nlease, lease_cap;
    struct pin *pins;          /* pinning lookups' holds; linear search, few per client */
    size_t npin, pin_cap;
    uint64_t lease_seq;        /* lease ids, from a random start: they tell nothing
                                  of other sessions, and name no lease after a
                                  restart */
    uint64_t hs_deadline_ms;   /* closed if no HELLO came by then (0: HELLO done) */
    uint32_t pin_seq;          /* from a random start: a pin id from before a
                                  restart names no pin of the new tierd */
    struct pending pend;       /* a get waiting for the disk (or the remote tier) */
    bool remote_tried;         /* re-running a request the remote tier answered */
    bool flush_wait;           /* a FLUSH waits for the store's flush to end */
    struct kvt_wire_hdr flush_hdr;
    uint64_t flush_t0;         /* its arrival, for the latency metrics */
    struct sess *prev, *next;  /* all sessions (for shutdown); next stays as it was
                                  when the session closed */
    bool closed;               /* sess_close() done: nothing more for it */
    struct sess *dead_next;    /* closed sessions, until sess_reap() */
};

static struct sess *all_sessions;
static struct sess *graveyard; /* closed, freed by sess_reap() */
/* Out of fds, accept() fails and leaves the listening socket readable: the
 * loop would spin. A spare fd (of /dev/null) is given up to accept one more
 * connection, which is told -EMFILE; while that one is out, the listening
 * socket is taken off the loop, and put back when any session closes. */
static int spare_fd = -1;
static bool listen_paused;
static int refusing;            /* sessions waiting to be told they are refused */
static uint64_t refusal_log_ms; /* the last refusal logged ... */
static uint32_t refusals_quiet; /* ... and those not logged since (one line a second) */
static int timer_fd = -1;       /* fires at the earliest get deadline */
static uint64_t timer_at_ms;    /* when it is armed for (0: disarmed) */

/* One request and one reply at a time (single thread): static buffers. */
static _Alignas(16) uint8_t rbuf[KVT_WIRE_MSG_MAX + 64];
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
static void pend_done(struct sess *s)
{
    metrics_req_done(s->d->metrics, s->pend.hdr.op, s->pend.t0_ns);
    s->pend.t0_ns = 0;
}

/* ---- lifecycle ------------------------------------------------------- */

/* What a lease of n blocks costs tierd: its entry, its ids and malloc's
 * overhead; all of a tenant's leases together stay within its lease_bytes. */
static uint64_t lease_cost(uint32_t n)
{
    return sizeof(struct lease) + (uint64_t)n * sizeof(uint32_t) + 16;
}

/* Close s: give back everything it holds in the store at once, and free
 * its memory only at the next sess_reap(). Re-entrant: giving back its
 * reservations can fail another session's durable commit, whose reply can
 * fail and close that one from inside this call, while a caller up the
 * stack (expire's walk, on_read) still holds both; closed sessions stay
 * valid memory, marked closed, their next pointers intact. */
static void sess_close(struct sess *s)
{
    struct tierd *d = s->d;
    struct tier *store = s->t ? s->t->store : NULL;
    size_t back = 0;

    if (s->closed)
        return;
    s->closed = true;
    /* off every list first, so that what the give-backs below set off
     * never reaches it */
    if (s->prev)
        s->prev->next = s->next;
    else
        all_sessions = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->dead_next = graveyard;
    graveyard = s;
    if (store)
        tier_forget_waiter(store, s);
    if (s->pend.active && !s->pend.commit) { /* a get's leases */
        tier_release(store, s->pend.ids, s->pend.n, true);
        back += s->pend.n;
    }
    s->pend.active = false;
    s->flush_wait = false;
    for (size_t i = 0; i < s->nlease; i++) {
        tier_release(store, s->lease[i].ids, s->lease[i].n, true);
        back += s->lease[i].n;
        s->t->lease_bytes -= lease_cost(s->lease[i].n); /* (leases only in a tenant) */
    }
    for (size_t i = 0; i < s->npin; i++) {
        tier_release(store, s->pins[i].ids, s->pins[i].n, true);
        s->t->pinned_bytes -= s->pins[i].bytes;
        back += s->pins[i].n;
    }
    if (store)
        back += tier_abort_ids(store, s->id, s->resv, s->nresv);
    if (back && d->verbose)
        tierd_log("session %u (pid %d) gone: reclaimed %zu leased/reserved blocks", s->id,
                  (int)s->pid, back);
    ev_del(d->loop, s->fd);
    close(s->fd);
    s->fd = -1;
    if (spare_fd < 0)
        spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (listen_paused && ev_add(d->loop, d->listen_fd, sess_on_accept, d) == 0)
        listen_paused = false;
    if (s->refuse)
        refusing--;
    else
        d->clients--;
    if (s->t)
        s->t->clients--;
}

void sess_reap(void)
{
    while (graveyard) {
        struct sess *s = graveyard;

        graveyard = s->dead_next;
        /* a store loop that held a copy of its waiters may have named it
         * again after its close: no pointer to it outlives it */
        if (s->t)
            tier_forget_waiter(s->t->store, s);
        free(s->pend.ids);
        free(s->pend.offs);
        free(s->pend.ready);
        free(s->pend.tiers);
        free(s->pend.body);
        for (size_t i = 0; i < s->nlease; i++)
            free(s->lease[i].ids);
        for (size_t i = 0; i < s->npin; i++)
            free(s->pins[i].ids);
        free(s->lease);
        free(s->pins);
        free(s->resv);
        free(s);
    }
}

void sess_close_all(struct tierd *d)
{
    while (all_sessions)
        sess_close(all_sessions);
    sess_reap();
    if (timer_fd >= 0) {
        ev_del(d->loop, timer_fd);
        close(timer_fd);
        timer_fd = -1;
    }
    if (spare_fd >= 0)
        close(spare_fd);
    spare_fd = -1;
}

/* ---- replies --------------------------------------------------------- */

/* Send one reply: header + up to two body parts. A client that does not
 * read its replies fills the socket buffer; it is dropped (return -1). */
static int reply(struct sess *s, const struct kvt_wire_hdr *req, int status, const void *a,
                 size_t alen, const void *b, size_t blen, int pass_fd)
{
    struct kvt_wire_hdr h = {
        .magic = KVT_WIRE_MAGIC, .version = KVT_WIRE_VERSION, .op = req->op,
        .req_id = req->req_id, .status = status, .body_len = (uint32_t)(alen + blen),
    };
    struct iovec iov[3] = { { &h, sizeof(h) }, { (void *)a, alen }, { (void *)b, blen } };
    union {
        char buf[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct msghdr m = { .msg_iov = iov, .msg_iovlen = 3 };

    if (req->flags & KVT_WIRE_F_NOREPLY)
        return 0;
    if (pass_fd >= 0) {
        struct cmsghdr *c;

        memset(&cm, 0, sizeof(cm));
        m.msg_control = cm.buf;
        m.msg_controllen = sizeof(cm.buf);
        c = CMSG_FIRSTHDR(&m);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &pass_fd, sizeof(int));
    }
    if (sendmsg(s->fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) < 0)
        return -1;
    return 0;
}

/* A malformed message: counted for the operator (the metrics page) and for
 * the tenant's own STATS (never another tenant's). */
static void count_proto_error(struct sess *s)
{
    s->d->proto_errors++;
    if (s->t)
        s->t->proto_errors++;
}

static int reply_err(struct sess *s, const struct kvt_wire_hdr *req, int status)
{
    if (status == KVT_EPROTO)
        count_proto_error(s); /* every malformed message is counted, once */
    return reply(s, req, status, NULL, 0, NULL, 0, -1);
}

/* A get's reply: the lease, offs[hits], and for a client reading hot
 * slots tiers[hits] (where each offset points). */
static int reply_get(struct sess *s, const struct kvt_wire_hdr *req,
                     const struct kvt_wire_get_rep *rep, const uint64_t *offs,
                     const uint8_t *tiers)
{
    size_t olen = (size_t)rep->hits * sizeof(uint64_t);

    memcpy(get_buf, offs, olen);
    if (tiers)
        memcpy(get_buf + olen, tiers, rep->hits);
    return reply(s, req, 0, rep, sizeof(*rep), get_buf, olen + (tiers ? rep->hits : 0), -1);
}

/* ---- bookkeeping ------------------------------------------------------ */

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

/* Leases one session may hold at once: an engine that forgets to release
 * gets -EBUSY instead of growing the daemon without bound. */
#define SESS_LEASES_MAX 4096


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

/* ---- gets that wait for the disk -------------------------------------- */

static void arm_timer(uint64_t at_ms)
{
    struct itimerspec it = { 0 };

    if (timer_fd < 0 || (timer_at_ms && timer_at_ms <= at_ms))
        return;
    it.it_value.tv_sec = (time_t)(at_ms / 1000);
    it.it_value.tv_nsec = (long)(at_ms % 1000) * 1000000;
    timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &it, NULL);
    timer_at_ms = at_ms;
}

/* Answer the waiting get with its leading run of blocks that are in warm:
 * up to the first lost one, and at a deadline up to the first still on its
 * way. The leases on the rest go back; their reads go on and land in warm
 * for next time. */
static int finish_get(struct sess *s)
{
    struct pending *p = &s->pend;
    struct kvt_wire_get_rep rep = { 0 };
    uint32_t hits = 0;
    struct lease *l;

    while (hits < p->fail_at && p->ready[hits])
        hits++;
    p->active = false;
    pend_done(s);
    /* reads still in flight (a deadline passed) are nobody's now: another
     * client's get may join them instead of missing */
    tier_forget_waiter(s->t->store, s);
    tier_release(s->t->store, p->ids + hits, p->n - hits, false);
    if (hits > 0) {
        int err;

        l = new_lease(s, p->ids, hits, &err);
        if (!l) {
            tier_release(s->t->store, p->ids, hits, false);
            return reply_err(s, &p->hdr, err);
        }
        rep.lease_id = l->id;
    }
    rep.hits = hits;
    count_blocks(s, p->ns_id, hits, false);
    return reply_get(s, &p->hdr, &rep, p->offs, p->hot ? p->tiers : NULL);
}

/* Answer a durable commit once every write landed. */
static int finish_commit(struct sess *s)
{
    struct pending *p = &s->pend;
    struct kvt_wire_count_rep cnt = { .count = p->count };

    p->active = false;
    pend_done(s);
    if (p->err)
        return reply_err(s, &p->hdr, p->err);
    return reply(s, &p->hdr, 0, &cnt, sizeof(cnt), NULL, 0, -1);
}

static int pend_alloc(struct pending *p)
{
    if (!p->ids) {
        p->ids = malloc(KVT_BATCH_MAX * sizeof(*p->ids));
        p->offs = malloc(KVT_BATCH_MAX * sizeof(*p->offs));
        p->ready = malloc(KVT_BATCH_MAX);
        p->tiers = malloc(KVT_BATCH_MAX);
    }
    return p->ids && p->offs && p->ready && p->tiers ? 0 : -ENOMEM;
}

static int wait_for_disk(struct sess *s, const struct kvt_wire_hdr *h, uint32_t n,
                         uint32_t pending, uint32_t deadline_ms, bool hot)
{
    struct pending *p = &s->pend;

    if (pend_alloc(p) < 0) {
        tier_release(s->t->store, ids_buf, n, false);
        return reply_err(s, h, -ENOMEM);
    }
    p->active = true;
    p->commit = false;
    p->hdr = *h;
    p->n = n;
    p->waiting = pending;
    p->fail_at = n;
    p->hot = hot;
    memcpy(p->ids, ids_buf, n * sizeof(*p->ids));
    memcpy(p->offs, offs_buf, n * sizeof(*p->offs));
    memcpy(p->tiers, tiers_buf, n);
    for (uint32_t i = 0; i < n; i++)
        p->ready[i] = tier_ready(s->t->store, ids_buf[i]);
    p->deadline_ms = deadline_ms ? tierd_now_ms() + deadline_ms : 0;
    if (p->deadline_ms)
        arm_timer(p->deadline_ms);
    return 0;
}

void sess_on_ready(void *ctx, void *waiter, uint32_t id, int rc)
{
    struct sess *s = waiter;
    struct pending *p = &s->pend;

    (void)ctx;
    bool counted = !p->commit || p->armed; /* else counted when the store returns */
    bool hit = false;

    if (s->closed || !p->active || p->remote)
        return; /* answered at its deadline; the block simply landed in warm */
    /* a key may stand more than once in a request: every position waits */
    for (uint32_t i = 0; i < p->n; i++) {
        if (p->ids[i] != id || p->ready[i])
            continue;
        p->ready[i] = 1;
        hit = true;
        if (rc < 0 && i < p->fail_at)
            p->fail_at = i;
        if (rc < 0 && !p->err)
            p->err = rc;
        if (counted)
            p->waiting--;
    }
    if (hit && counted && p->waiting == 0 &&
        (p->commit ? finish_commit(s) : finish_get(s)) < 0)
        sess_close(s); /* the client stopped reading */
}

/* ---- gets and lookups that wait for the remote tier --------------------
 *
 * With a remote tier, a LOOKUP whose local leading run stops early asks the
 * cluster about the keys after it (one pipelined probe), and a GET asks it
 * for the blocks after it (read into warm slots); either waits, like a get
 * waits for the disk, at most for the remote's bound (or the get's own
 * deadline), then is answered: the lookup with the remote run added, the
 * get by running it again on the local tiers, which now hold those blocks.
 */

/* a keys request, decoded (parse_keys) */
struct kreq {
    uint32_t ns_id;
    uint32_t n;
    uint32_t flags;
    uint32_t deadline_ms;
    uint64_t block_bytes;
    const struct tier_key *parent; /* NULL: none */
    uint64_t pin_id;               /* KVT_WIRE_KF_PIN: the pin to extend (0: a new one) */
    const struct tier_key *keys;
};

static int do_keys(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body);
static int parse_keys(struct sess *s, const uint8_t *body, uint32_t len, struct kreq *k);
static int lookup_done(struct sess *s, const struct kvt_wire_hdr *h, const struct kreq *k,
                       uint32_t hits, uint32_t remote_hits);

/* How long a request waits for the remote tier: a few of its timeouts
 * (its workers may have a batch ahead), then it is answered without. */
static uint64_t remote_wait_ms(const struct tierd *d)
{
    return 3 * (uint64_t)(d->remote.timeout_ms ? d->remote.timeout_ms : 100) + 20;
}

/* Answer the request that waited for the remote tier; count: the keys it
 * found (0 at the deadline). */
static int finish_remote(struct sess *s, int count)
{
    struct pending *p = &s->pend;
    struct kvt_wire_hdr h = p->hdr;
    uint64_t t0 = p->t0_ns;
    int rc;

    p->active = p->remote = false;
    p->t0_ns = 0;
    /* a late answer must not be taken for the next request's */
    tier_forget_waiter(s->t->store, s);
    s->remote_tried = true;
    if (h.op == KVT_OP_LOOKUP) {
        struct kreq k;

        rc = parse_keys(s, p->body, h.body_len, &k); /* checked when it came: 0 */
        if (rc == 0) {
            memcpy(tiers_buf, p->tiers, k.n);
            for (uint32_t i = p->base; i < p->base + (uint32_t)count && i < k.n; i++)
                tiers_buf[i] = TIER_L_COLD; /* on the remote: a get waits for it, as for disk */
            rc = lookup_done(s, &h, &k, p->base + (uint32_t)count, (uint32_t)count);
        } else {
            rc = reply_err(s, &h, rc);
        }
    } else {
        rc = do_keys(s, &h, p->body); /* the get again, on the local tiers now */
    }
    s->remote_tried = false;
    if (s->pend.active)
        s->pend.t0_ns = t0; /* waits again (for the disk): its latency is taken then */
    else
        metrics_req_done(s->d->metrics, h.op, t0);
    return rc;
}

void sess_on_remote(void *ctx, void *waiter, int count)
{
    struct sess *s = waiter;

    (void)ctx;
    if (s->closed || !s->pend.active || !s->pend.remote)
        return; /* answered at its deadline; what was read stays in warm */
    if (finish_remote(s, count) < 0)
        sess_close(s); /* the client stopped reading */
}

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
    for (struct sess *o = all_sessions; o; o = o->next) {
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

/* Answer every get whose deadline passed and release every pin that
 * expired, re-arm for the next. O(sessions + pins) per expiry. */
static void expire(uint64_t now)
{
    uint64_t next = 0;
    struct sess *s, *nx;

    timer_at_ms = 0;
    for (s = all_sessions; s; s = nx) {
        nx = s->next; /* valid even if closed meanwhile (sess_close) */
        if (s->closed)
            continue;
        if (s->hs_deadline_ms && s->hs_deadline_ms <= now) {
            /* no HELLO in time: an idle connection holds no slot for long */
            if (s->d->verbose && !s->refuse)
                tierd_log("session %u (pid %d): no HELLO within %u ms, closing", s->id,
                          (int)s->pid, s->d->handshake_ms);
            sess_close(s);
            continue;
        }
        if (s->hs_deadline_ms && (!next || s->hs_deadline_ms < next))
            next = s->hs_deadline_ms;
        for (size_t i = 0; i < s->npin && !s->closed;) {
            if (s->pins[i].expire_ms <= now) {
                s->d->pins_expired++;
                pin_drop(s, i); /* the last pin moved into i */
                continue;
            }
            if (!next || s->pins[i].expire_ms < next)
                next = s->pins[i].expire_ms;
            i++;
        }
        if (s->closed || !s->pend.active || !s->pend.deadline_ms)
            continue;
        if (s->pend.deadline_ms <= now && s->pend.commit) {
            /* the writes go on (queued ones too); this commit is told to
             * retry, unless it already has a truer error, and waits no more */
            tier_detach_waiter(s->t->store, s);
            if (!s->pend.err)
                s->pend.err = -EAGAIN;
            s->d->durable_wait_timeouts++;
            if (finish_commit(s) < 0)
                sess_close(s);
        } else if (s->pend.deadline_ms <= now && s->pend.remote) {
            /* the remote tier is late: answer from the local tiers (what it
             * reads still lands in warm, for next time) */
            if (finish_remote(s, 0) < 0)
                sess_close(s);
        } else if (s->pend.deadline_ms <= now) {
            s->d->get_deadline_misses++;
            s->t->deadline_misses++;
            ns_stats(s, s->pend.ns_id)->deadline_misses++;
            if (finish_get(s) < 0)
                sess_close(s);
        } else if (!next || s->pend.deadline_ms < next) {
            next = s->pend.deadline_ms;
        }
    }
    if (next)
        arm_timer(next);
}

static void on_timer(struct ev_loop *l, int fd, uint32_t events, void *ctx)
{
    uint64_t ticks;

    (void)l;
    (void)events;
    (void)ctx;
    if (read(fd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
        return;
    expire(tierd_now_ms());
}

void sess_expire(void)
{
    uint64_t now;

    if (!timer_at_ms || (now = tierd_now_ms()) < timer_at_ms)
        return;
    expire(now);
}

int sess_init(struct tierd *d)
{
    spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (timer_fd < 0)
        return -errno;
    return ev_add(d->loop, timer_fd, on_timer, d);
}

/* ---- requests --------------------------------------------------------- */

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
    k->n = r.n;
    k->flags = r.flags;
    k->deadline_ms = r.deadline_ms;
    k->block_bytes = r.block_bytes;
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

static int do_hello(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct kvt_wire_hello_rep rep = {
        .pool_bytes = tier_pool_bytes(s->t->store), .session_id = s->id,
        .max_batch = KVT_BATCH_MAX, .page_bytes = 4096,
    };

    if (h->body_len != sizeof(struct kvt_wire_hello_req))
        return reply_err(s, h, KVT_EPROTO);
    (void)body;
    s->hello = true;
    s->hs_deadline_ms = 0;
    return reply(s, h, 0, &rep, sizeof(rep), NULL, 0, tier_pool_fd(s->t->store));
}

static int do_hot_attach(struct sess *s, const struct kvt_wire_hdr *h)
{
    struct kvt_wire_hot_rep rep = { 0 };
    struct tier_hot_export ex;
    int rc;

    if (h->body_len)
        return reply_err(s, h, KVT_EPROTO);
    if (!s->t->hot)
        return reply_err(s, h, -EOPNOTSUPP);
    rc = tier_hot_export(s->t->hot, &ex);
    if (rc < 0)
        return reply_err(s, h, rc);
    _Static_assert(sizeof(rep.ipc) == TIER_HOT_IPC_BYTES, "IPC handle size");
    rep.kind = ex.kind == TIER_HOT_CUDA ? KVT_HOT_CUDA : KVT_HOT_EMULATED;
    rep.device = ex.device;
    rep.bytes = ex.bytes;
    memcpy(rep.ipc, ex.ipc, sizeof(rep.ipc));
    /* one tenant per daemon for now: every client may map the pool (the
     * tenants issue restricts it to the pool's own tenant) */
    s->hot = true;
    return reply(s, h, 0, &rep, sizeof(rep), NULL, 0, ex.kind == TIER_HOT_EMU ? ex.fd : -1);
}

/* ---- operators --------------------------------------------------------- */

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

static int do_ns_list(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    static kvt_ns_info info[KVT_WIRE_MSG_MAX / sizeof(kvt_ns_info)];
    struct kvt_wire_ns_list_req req;
    struct kvt_wire_ns_list_rep rep = { 0 };
    uint32_t id;

    if (h->body_len != sizeof(req))
        return reply_err(s, h, KVT_EPROTO);
    memcpy(&req, body, sizeof(req));
    if (req.start == 0 || req.max == 0)
        return reply_err(s, h, -EINVAL);
    for (id = req.start; id <= s->t->ns_cap; id++) {
        if (!tenant_ns_get(s->t, id))
            continue; /* a hole, or another tenant's */
        if (rep.n == req.max || rep.n == sizeof(info) / sizeof(info[0]) - 1) {
            rep.next = id;
            break;
        }
        ns_info(s->t, id, &info[rep.n++]);
    }
    return reply(s, h, 0, &rep, sizeof(rep), info, rep.n * sizeof(info[0]), -1);
}

static int do_why(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    static kvt_key_story story[KVT_WIRE_MSG_MAX / sizeof(kvt_key_story) - 1];
    struct kvt_wire_why_rep rep = { 0 };
    struct tier_key key;

    if (h->body_len != KVT_KEY_BYTES)
        return reply_err(s, h, KVT_EPROTO);
    memcpy(key.b, body, KVT_KEY_BYTES);
    /* O(namespaces): an operator's question, not an engine's */
    for (uint32_t id = 1; id <= s->t->ns_cap && rep.n < sizeof(story) / sizeof(story[0]);
         id++) {
        struct tier_story t;

        if (!tenant_ns_get(s->t, id))
            continue;
        tier_story_get(s->t->store, id, &key, &t);
        if (!t.present && !t.writing && t.event == TIER_EV_NONE)
            continue;
        story[rep.n++] = (kvt_key_story){
            .ns_id = id, .present = t.present, .writing = t.writing, .tier = t.level,
            .on_disk = t.on_disk, .chain_ok = t.chain_ok, .event = t.event,
            .event_tier = t.event_level, .leases = t.leases, .event_age_ms = t.event_age_ms,
        };
    }
    return reply(s, h, 0, &rep, sizeof(rep), story, rep.n * sizeof(story[0]), -1);
}

static int do_flush(struct sess *s, const struct kvt_wire_hdr *h)
{
    if (h->body_len)
        return reply_err(s, h, KVT_EPROTO);
    if (!s->t->cold)
        return reply_err(s, h, -EOPNOTSUPP);
    if (s->flush_wait)
        return reply_err(s, h, -EBUSY);
    /* answered from sess_flush_check() once the store's flush has ended */
    tier_flush_begin(s->t->store);
    s->flush_wait = true;
    s->flush_hdr = *h;
    return 0;
}

void sess_flush_check(struct tierd *d)
{
    struct sess *s, *nx;

    for (s = all_sessions; s; s = nx) {
        nx = s->next; /* valid even if closed meanwhile (sess_close) */
        if (s->closed || !s->flush_wait || tier_flush_busy(s->t->store))
            continue;
        s->flush_wait = false;
        if (s->flush_t0)
            metrics_req_done(d->metrics, KVT_OP_FLUSH, s->flush_t0);
        s->flush_t0 = 0;
        if (reply(s, &s->flush_hdr, 0, NULL, 0, NULL, 0, -1) < 0)
            sess_close(s);
    }
}

static int do_purge(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct kvt_wire_purge_req req;
    struct kvt_wire_count_rep cnt = { 0 };
    int rc;

    if (h->body_len != sizeof(req))
        return reply_err(s, h, KVT_EPROTO);
    memcpy(&req, body, sizeof(req));
    if (!tenant_ns_get(s->t, req.ns_id))
        return reply_err(s, h, KVT_ENONS);
    rc = tier_purge_ns(s->t->store, req.ns_id);
    if (rc < 0)
        return reply_err(s, h, rc);
    tierd_log("namespace %u (%s) purged: %d blocks removed", req.ns_id,
              s->t->ns[req.ns_id - 1].d.model_id, rc);
    cnt.count = (uint32_t)rc;
    return reply(s, h, 0, &cnt, sizeof(cnt), NULL, 0, -1);
}

static int do_ns_open(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct kvt_wire_ns_req req;
    struct kvt_wire_ns_rep rep = { 0 };
    int rc;

    if (h->body_len != sizeof(req))
        return reply_err(s, h, KVT_EPROTO);
    memcpy(&req, body, sizeof(req));
    if (req.block_bytes > tier_block_max(s->t->store))
        return reply_err(s, h, -EFBIG);
    rc = tenant_ns_open(s->t, &req, &rep.ns_id);
    if (rc < 0)
        return reply_err(s, h, rc);
    rep.block_bytes = req.block_bytes;
    rep.slot_bytes = tier_slot_bytes(req.block_bytes);
    return reply(s, h, 0, &rep, sizeof(rep), NULL, 0, -1);
}

static int commit_durable(struct sess *s, const struct kvt_wire_hdr *h, const struct kreq *k)
{
    struct pending *p = &s->pend;
    uint32_t ready = 0;
    int rc;

    if (p->active)
        return reply_err(s, h, -EBUSY);
    if (pend_alloc(p) < 0)
        return reply_err(s, h, -ENOMEM);
    /* pending before the writes start: when the ring is full the store
     * waits for completions, and writes of this very batch may land (and be
     * reported here) before it returns */
    *p = (struct pending){ .active = true, .commit = true, .hdr = *h, .ids = p->ids,
                           .offs = p->offs, .ready = p->ready, .tiers = p->tiers,
                           .body = p->body };
    memset(p->ready, 0, KVT_BATCH_MAX);
    rc = tier_commit_durable(s->t->store, k->ns_id, k->block_bytes, s->id, k->keys, k->n, s,
                             p->ids, &p->n);
    prune_resv(s);
    if (rc < 0 && !p->err)
        p->err = rc;
    p->count = rc < 0 ? 0 : (uint32_t)rc;
    count_blocks(s, k->ns_id, p->count, true);
    for (uint32_t i = 0; i < p->n; i++)
        ready += p->ready[i];
    p->waiting = p->n - ready;
    p->armed = true;
    if (p->waiting == 0)
        return finish_commit(s);
    /* bounded: a key another client reserved and never finishes would hold
     * this commit (and its client) for ever */
    if (s->d->durable_wait_ms) {
        p->deadline_ms = tierd_now_ms() + s->d->durable_wait_ms;
        arm_timer(p->deadline_ms);
    }
    return 0;
}

/* Pin the first `local` keys of a pinning lookup, as far as the tenant's
 * pin budget goes: a new pin, or k->pin_id extended (a longer chain's next
 * batch), held k->deadline_ms from now. 0 and *out, or the error. */
static int pin_run(struct sess *s, const struct kreq *k, uint32_t local,
                   struct kvt_wire_pin_rep *out)
{
    uint64_t quota = s->t->warm_bytes / PIN_QUOTA_SHARE, hold = k->deadline_ms;
    uint64_t used = s->t->pinned_bytes;
    /* a pinned block costs the slot it holds (a page at least), so that
     * blocks of a byte cannot pin without bound (each pin id is 4 bytes of
     * tierd's memory) */
    uint64_t cost = tier_slot_bytes(k->block_bytes);
    uint64_t room = quota > used ? (quota - used) / cost : 0;
    size_t at = s->npin;
    struct pin *p;
    uint32_t want = local < room ? local : (uint32_t)room, got;

    if (!hold)
        hold = KVT_WIRE_PIN_DEFAULT_MS;
    if (hold > KVT_WIRE_PIN_MAX_MS)
        return -EINVAL;
    if (k->pin_id) {
        /* only the client's own pin grows, and only while it holds */
        if (pin_owner(s->t, k->pin_id, &at) != s)
            return -ENOENT;
    } else {
        if (s->npin == SESS_PINS_MAX)
            return -EBUSY;
        if (s->npin == s->pin_cap) {
            size_t cap = s->pin_cap ? s->pin_cap * 2 : 4;
            struct pin *np = realloc(s->pins, cap * sizeof(*np));

            if (!np)
                return -ENOMEM;
            s->pins = np;
            s->pin_cap = cap;
        }
        s->pins[at] = (struct pin){ .id = (uint64_t)s->id << 32 | ++s->pin_seq };
    }
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
                : (uint32_t)tier_pin(s->t->store, k->ns_id, k->block_bytes, k->keys, want,
                                     k->flags & KVT_WIRE_KF_PROMOTE ? TIER_GET_PROMOTE : 0,
                                     p->ids + p->n);
    p->n += got;
    p->bytes += (uint64_t)got * cost;
    s->t->pinned_bytes += (uint64_t)got * cost;
    p->expire_ms = tierd_now_ms() + hold;
    if (at == s->npin && p->n == 0) {
        free(p->ids); /* nothing held: no pin */
        *out = (struct kvt_wire_pin_rep){ .hold_ms = (uint32_t)hold };
        return 0;
    }
    if (at == s->npin)
        s->npin++;
    arm_timer(p->expire_ms);
    *out = (struct kvt_wire_pin_rep){ .pin_id = p->id, .pinned = got,
                                      .hold_ms = (uint32_t)hold };
    return 0;
}

/* A lookup's answer: hits keys in a leading run, remote_hits of them on
 * the remote tier (tiers_buf holds each key's tier). */
static int lookup_done(struct sess *s, const struct kvt_wire_hdr *h, const struct kreq *k,
                       uint32_t hits, uint32_t remote_hits)
{
    struct tier *t = s->t->store;
    struct kvt_wire_lookup_rep rep = { .n = k->n, .hits = hits };
    struct tier_misses why = { 0 };

    /* why the keys after the run missed: no counters, the lookup counted */
    tier_miss_why(t, k->ns_id, k->keys + hits, k->n - hits, &why);
    count_lookup(s, k->ns_id, k->n, hits, &why);
    if (k->flags & KVT_WIRE_KF_PIN) {
        struct {
            struct kvt_wire_lookup_rep l;
            struct kvt_wire_pin_rep p;
        } both = { .l = rep };
        /* the remote's run is not in the store yet: pinned are the local hits */
        int rc = pin_run(s, k, hits - remote_hits, &both.p);

        if (rc < 0)
            return reply_err(s, h, rc);
        if (remote_hits)
            tier_get_remote(t, k->ns_id, k->block_bytes, k->keys, hits, NULL);
        return reply(s, h, 0, &both, sizeof(both), tiers_buf, k->n, -1);
    }
    if ((k->flags >> 8) & KVT_LOOKUP_PREFETCH) {
        tier_prefetch(t, k->ns_id, k->block_bytes, k->keys, hits,
                      k->flags & KVT_WIRE_KF_PROMOTE ? TIER_GET_PROMOTE : 0);
        if (remote_hits) /* and start reading the remote's run into warm */
            tier_get_remote(t, k->ns_id, k->block_bytes, k->keys, hits, NULL);
    }
    return reply(s, h, 0, &rep, sizeof(rep), tiers_buf, k->n, -1);
}

/* Ask the remote tier for what a get or lookup misses here, and wait for
 * it (see above): 1 when waiting, 0 to answer now (no remote tier for the
 * namespace, nothing to ask, a request already waiting, no memory). */
static int remote_wait(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body,
                       const struct kreq *k, uint32_t hits)
{
    struct pending *p = &s->pend;
    uint64_t wait_ms = remote_wait_ms(s->d);
    int rc;

    if (s->remote_tried || p->active || !s->t->remote ||
        !tier_remote_ns_on(s->t->remote, k->ns_id) || pend_alloc(p) < 0 ||
        (!p->body && !(p->body = malloc(KVT_WIRE_MSG_MAX))))
        return 0;
    if (h->op == KVT_OP_LOOKUP)
        rc = tier_lookup_remote(s->t->store, k->ns_id, k->keys + hits, k->n - hits, s);
    else
        rc = tier_get_remote(s->t->store, k->ns_id, k->block_bytes, k->keys, k->n, s);
    if (rc <= 0)
        return 0;
    p->active = p->remote = true;
    p->commit = false;
    p->hdr = *h;
    p->n = 0; /* nothing leased while waiting */
    p->base = hits;
    p->ns_id = k->ns_id;
    memcpy(p->body, body, h->body_len);
    memcpy(p->tiers, tiers_buf, k->n);
    /* (a pinning lookup's deadline_ms is how long its pin holds) */
    if (k->deadline_ms && k->deadline_ms < wait_ms && !(k->flags & KVT_WIRE_KF_PIN))
        wait_ms = k->deadline_ms;
    p->deadline_ms = tierd_now_ms() + wait_ms;
    arm_timer(p->deadline_ms);
    return 1;
}

static int do_keys(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct tier *t = s->t->store;
    struct kvt_wire_count_rep cnt = { 0 };
    struct kreq k;
    int rc = parse_keys(s, body, h->body_len, &k);

    if (rc < 0)
        return reply_err(s, h, rc);
    /* hot slots only for a client that mapped the hot pool */
    if ((k.flags & (KVT_WIRE_KF_HOT | KVT_WIRE_KF_PROMOTE)) && !s->hot)
        return reply_err(s, h, KVT_EPROTO);
    if ((k.flags & KVT_WIRE_KF_PIN) && h->op != KVT_OP_LOOKUP)
        return reply_err(s, h, KVT_EPROTO); /* only lookups pin */
    switch (h->op) {
    case KVT_OP_LOOKUP: {
        uint32_t hits = (uint32_t)tier_lookup(t, k.ns_id, k.keys, k.n, tiers_buf);

        if (hits < k.n && remote_wait(s, h, body, &k, hits))
            return 0; /* answered by finish_remote */
        return lookup_done(s, h, &k, hits, 0);
    }
    case KVT_OP_PUT_RESERVE:
        rc = (k.flags & KVT_WIRE_KF_HOT ? tier_reserve_hot : tier_reserve)(
            t, k.ns_id, k.block_bytes, s->id, k.parent, k.keys, k.n, ids_buf, offs_buf);
        if (rc < 0)
            return reply_err(s, h, rc);
        if (remember_resv(s, ids_buf, k.n) < 0) {
            tier_abort_ids(t, s->id, ids_buf, k.n);
            return reply_err(s, h, -ENOMEM);
        }
        cnt.n = k.n;
        cnt.count = (uint32_t)rc;
        return reply(s, h, 0, &cnt, sizeof(cnt), offs_buf, k.n * sizeof(uint64_t), -1);
    case KVT_OP_PUT_COMMIT:
        if (k.flags & KVT_WIRE_KF_DURABLE)
            return commit_durable(s, h, &k);
        cnt.count = (uint32_t)tier_commit(t, k.ns_id, k.block_bytes, s->id, k.keys, k.n);
        count_blocks(s, k.ns_id, cnt.count, true);
        prune_resv(s);
        return reply(s, h, 0, &cnt, sizeof(cnt), NULL, 0, -1);
    case KVT_OP_PUT_ABORT:
        cnt.count = (uint32_t)tier_abort(t, k.ns_id, s->id, k.keys, k.n);
        prune_resv(s);
        return reply(s, h, 0, &cnt, sizeof(cnt), NULL, 0, -1);
    case KVT_OP_REMOVE:
        cnt.count = (uint32_t)tier_remove(t, k.ns_id, k.keys, k.n);
        return reply(s, h, 0, &cnt, sizeof(cnt), NULL, 0, -1);
    case KVT_OP_GET: {
        struct kvt_wire_get_rep rep = { 0 };
        struct lease *l;

        if (s->nlease >= SESS_LEASES_MAX ||
            s->t->lease_bytes + lease_cost(k.n) > s->t->lease_bytes_max)
            return reply_err(s, h, -EBUSY); /* refused before anything is read */
        uint32_t pending;
        bool hot = k.flags & KVT_WIRE_KF_HOT;

        if (s->pend.active)
            return reply_err(s, h, -EBUSY); /* one get at a time per client */
        if (remote_wait(s, h, body, &k, 0))
            return 0; /* answered by finish_remote */
        rc = tier_get_ex(t, k.ns_id, k.block_bytes, k.keys, k.n,
                         (hot ? TIER_GET_HOT : 0) |
                             (k.flags & KVT_WIRE_KF_PROMOTE ? TIER_GET_PROMOTE : 0),
                         ids_buf, offs_buf, tiers_buf, s, &pending);
        if (rc < 0)
            return reply_err(s, h, rc);
        if (pending > 0) {
            s->pend.ns_id = k.ns_id;
            return wait_for_disk(s, h, (uint32_t)rc, pending, k.deadline_ms, hot);
        }
        if (rc > 0) {
            int err;

            l = new_lease(s, ids_buf, (uint32_t)rc, &err);
            if (!l) {
                tier_release(t, ids_buf, (size_t)rc, false);
                return reply_err(s, h, err);
            }
            rep.lease_id = l->id;
        }
        rep.hits = (uint32_t)rc;
        count_blocks(s, k.ns_id, rep.hits, false);
        return reply_get(s, h, &rep, offs_buf, hot ? tiers_buf : NULL);
    }
    }
    return reply_err(s, h, KVT_EPROTO);
}

static int do_release(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct kvt_wire_release_req r;

    if (h->body_len != sizeof(r))
        return reply_err(s, h, KVT_EPROTO);
    memcpy(&r, body, sizeof(r));
    for (size_t i = 0; i < s->nlease; i++) {
        if (s->lease[i].id != r.lease_id)
            continue;
        tier_release(s->t->store, s->lease[i].ids, s->lease[i].n, false);
        free(s->lease[i].ids);
        s->t->lease_bytes -= lease_cost(s->lease[i].n);
        s->lease[i] = s->lease[--s->nlease];
        return reply(s, h, 0, NULL, 0, NULL, 0, -1);
    }
    count_proto_error(s); /* a lease that is not ours: counted, even unanswered */
    return reply_err(s, h, -ENOENT);
}

static int do_unpin(struct sess *s, const struct kvt_wire_hdr *h, const uint8_t *body)
{
    struct kvt_wire_unpin_req r;
    struct sess *o;
    size_t at;

    if (h->body_len != sizeof(r))
        return reply_err(s, h, KVT_EPROTO);
    memcpy(&r, body, sizeof(r));
    o = pin_owner(s->t, r.pin_id, &at);
    if (!o)
        return reply_err(s, h, -ENOENT); /* expired, released, or no pin of this tenant */
    pin_drop(o, at);
    return reply(s, h, 0, NULL, 0, NULL, 0, -1);
}

/* The reply's counters come from kvtier.h's list: a STORE one is the same
 * field of the store's counters, the TIERS entry the per-tier array, and
 * the TIERD ones are tierd's own (set in do_stats). */
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
    KVT_STATS_LIST(STAT)
}

static int do_stats(struct sess *s, const struct kvt_wire_hdr *h)
{
    struct tier_stats ts;
    kvt_stats st = { .version = KVT_STATS_VERSION };

    tier_stats_get(s->t->store, &ts);
    stats_from_store(&st, &ts);
    st.clients = s->t->clients; /* of its own tenant: others are none of its business */
    st.namespaces = s->t->nns;
    st.uptime_ms = tierd_now_ms() - s->d->start_ms;
    st.proto_errors = s->t->proto_errors; /* its own: another's say what it does */
    st.deadline_misses = s->t->deadline_misses;
    return reply(s, h, 0, &st, sizeof(st), NULL, 0, -1);
}

/* Handle one received message of len bytes in rbuf. -1: drop the session. */
static int handle(struct sess *s, size_t len)
{
    struct kvt_wire_hdr h;
    const uint8_t *body = rbuf + sizeof(h);

    if (len < sizeof(h))
        return -1;
    memcpy(&h, rbuf, sizeof(h));
    if (h.magic != KVT_WIRE_MAGIC || h.body_len != len - sizeof(h))
        return -1;
    if (h.version != KVT_WIRE_VERSION) {
        h.flags = 0;
        reply_err(s, &h, KVT_EVERSION);
        return -1;
    }
    if (s->refuse) {
        h.flags = 0;
        reply_err(s, &h, s->refuse);
        return -1;
    }
    if (h.op == KVT_OP_HELLO)
        return do_hello(s, &h, body);
    if (!s->hello)
        return reply_err(s, &h, KVT_EPROTO);
    switch (h.op) {
    case KVT_OP_NS_OPEN:
        return do_ns_open(s, &h, body);
    case KVT_OP_LOOKUP:
    case KVT_OP_PUT_RESERVE:
    case KVT_OP_PUT_COMMIT:
    case KVT_OP_PUT_ABORT:
    case KVT_OP_GET:
    case KVT_OP_REMOVE:
        return do_keys(s, &h, body);
    case KVT_OP_RELEASE:
        return do_release(s, &h, body);
    case KVT_OP_UNPIN:
        return do_unpin(s, &h, body);
    case KVT_OP_STATS:
        return h.body_len ? reply_err(s, &h, KVT_EPROTO) : do_stats(s, &h);
    case KVT_OP_HOT_ATTACH:
        return do_hot_attach(s, &h);
    case KVT_OP_NS_LIST:
        return do_ns_list(s, &h, body);
    case KVT_OP_WHY:
        return do_why(s, &h, body);
    case KVT_OP_FLUSH:
        return do_flush(s, &h);
    case KVT_OP_PURGE:
        return do_purge(s, &h, body);
    }
    return reply_err(s, &h, KVT_EPROTO);
}

/* handle(), timed for the metrics: the latency is taken now, or when the
 * deferred reply goes (finish_get, finish_commit) if the request waits. */
static int handle_timed(struct sess *s, size_t len)
{
    uint64_t t0 = metrics_req_start(s->d->metrics);
    bool waiting = s->pend.active, flushing = s->flush_wait;
    struct kvt_wire_hdr h;
    int rc = handle(s, len);

    if (rc < 0 || !t0)
        return rc;
    if (!waiting && s->pend.active) {
        s->pend.t0_ns = t0;
    } else if (!flushing && s->flush_wait) {
        s->flush_t0 = t0;
    } else {
        memcpy(&h, rbuf, sizeof(h)); /* handle() checked the framing */
        metrics_req_done(s->d->metrics, h.op, t0);
    }
    return rc;
}

static void on_read(struct ev_loop *l, int fd, uint32_t events, void *ctx)
{
    struct sess *s = ctx;

    (void)l;
    (void)fd;
    (void)events;
    /* a few messages per wakeup, so one busy client cannot starve others */
    for (int i = 0; i < 32 && !s->closed; i++) {
        struct msghdr m = { 0 };
        struct iovec iov = { rbuf, KVT_WIRE_MSG_MAX + 1 };
        ssize_t r;

        m.msg_iov = &iov;
        m.msg_iovlen = 1;
        r = recvmsg(s->fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (r < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (r <= 0) { /* EOF: the client closed or died */
            sess_close(s);
            return;
        }
        /* the buffer holds one byte more than the limit, so that a message
         * over the limit is seen as such even when it fits the buffer */
        if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || r > (ssize_t)KVT_WIRE_MSG_MAX ||
            handle_timed(s, (size_t)r) < 0) {
            if (s->closed)
                return; /* closed meanwhile, from a store callback */
            if (!s->refuse)
                count_proto_error(s); /* a refused peer was told why */
            if (s->d->verbose && !s->refuse)
                tierd_log("session %u (pid %d): malformed message, closing", s->id,
                          (int)s->pid);
            sess_close(s);
            return;
        }
    }
}

/* accept4() failed with EMFILE/ENFILE (which it says even when nothing is
 * pending): give up the spare fd to take a pending connection anyway, so
 * that it can be told -EMFILE. With the spare already out, stop listening
 * until a session closes: a readable socket that cannot be accepted would
 * spin the level-triggered loop. Returns the fd, or -1. */
static int accept_spare(struct ev_loop *l, int lfd)
{
    int fd;

    if (spare_fd >= 0) {
        close(spare_fd);
        spare_fd = -1;
        fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd >= 0)
            return fd; /* the spare is out until this session closes */
        spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
        if (errno == EAGAIN || errno == EWOULDBLOCK)
            return -1; /* nothing was pending */
    }
    if (!listen_paused) {
        tierd_log("out of file descriptors: new clients wait until one leaves "
                  "(raise ulimit -n)");
        ev_del(l, lfd);
        listen_paused = true;
    }
    return -1;
}

/* Close a connection not taken on, and take the spare back if it was it. */
static void drop(int fd)
{
    close(fd);
    if (spare_fd < 0)
        spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/* Log a refusal, at most one line a second: a flood of peers must not
 * flood the log too. */
static void log_refusal(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

static void log_refusal(const char *fmt, ...)
{
    uint64_t now = tierd_now_ms();
    char msg[256];
    va_list ap;

    if (refusal_log_ms && now - refusal_log_ms < 1000) {
        refusals_quiet++;
        return;
    }
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (refusals_quiet)
        tierd_log("%s (and %u more refusals not logged)", msg, refusals_quiet);
    else
        tierd_log("%s", msg);
    refusal_log_ms = now;
    refusals_quiet = 0;
}

/* A session id: random, so that it tells a client nothing of the sessions
 * before it; unique among the sessions open, never an id the store keeps
 * for itself. */
static uint32_t new_sess_id(void)
{
    static uint64_t fallback; /* before the kernel's pool is ready, at boot */

    for (;;) {
        uint32_t id;
        struct sess *o = all_sessions;

        if (getrandom(&id, sizeof(id), GRND_NONBLOCK) != sizeof(id))
            id = (uint32_t)((tierd_now_ms() ^ ++fallback << 20) * 0x9E3779B97F4A7C15ull >> 32);
        if (id == 0 || id >= TIER_OWNER_REMOTE)
            continue;
        while (o && o->id != id)
            o = o->next;
        if (!o)
            return id;
    }
}

/* Why a peer with these credentials may not have a session now (0: it
 * may); t is its tenant (NULL: none admits it). */
static int admit(struct tierd *d, const struct tenant *t, const struct ucred *cr)
{
    if (!t) {
        d->refused++;
        log_refusal("refused pid %d, uid %d: no tenant admits it", (int)cr->pid, (int)cr->uid);
        return -EACCES;
    }
    if (d->clients >= d->max_clients) {
        log_refusal("refused pid %d: %u clients already (--max-clients)", (int)cr->pid,
                    d->clients);
        return -EUSERS;
    }
    if (t->clients >= t->max_clients) {
        log_refusal("refused pid %d: tenant %s has %u clients already (its max_clients)",
                    (int)cr->pid, t->name, t->clients);
        return -EUSERS;
    }
    return 0;
}

void sess_on_accept(struct ev_loop *l, int lfd, uint32_t events, void *ctx)
{
    struct tierd *d = ctx;

    (void)events;
    /* a few at a time, as messages are: a flood of connections must not
     * keep the loop from the clients it serves (the socket stays readable,
     * the next turn takes the rest) */
    for (int round = 0; round < 32; round++) {
        int fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        struct ucred cr;
        socklen_t cl = sizeof(cr);
        struct tenant *t = NULL;
        struct sess *s;
        int refuse = 0;

        if (fd < 0 && (errno == EMFILE || errno == ENFILE)) {
            fd = accept_spare(l, lfd);
            refuse = -EMFILE;
        }
        if (fd < 0)
            return; /* EAGAIN: the next event retries */
        if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cr, &cl) < 0) {
            drop(fd);
            continue;
        }
        /* admission at accept (SO_PEERCRED is known now): a peer no tenant
         * admits, or over a limit, never counts as a client */
        if (!refuse) {
            t = tenant_for(d, cr.uid, cr.gid);
            refuse = admit(d, t, &cr);
        }
        /* a refused peer is told why at its first message (HELLO, sent at
         * once by kvt_connect) rather than seeing a hang-up; a few at a
         * time and each for the handshake deadline at most, so that
         * refusals cannot pile up */
        if (refuse && refusing >= 16) {
            drop(fd);
            continue;
        }
        s = calloc(1, sizeof(*s));
        if (!s || ev_add(l, fd, on_read, s) < 0) {
            free(s);
            drop(fd);
            continue;
        }
        s->d = d;
        s->fd = fd;
        s->id = new_sess_id();
        if (getrandom(&s->pin_seq, sizeof(s->pin_seq), GRND_NONBLOCK) != sizeof(s->pin_seq))
            s->pin_seq = (uint32_t)tierd_now_ms(); /* (no entropy yet at boot) */
        if (getrandom(&s->lease_seq, sizeof(s->lease_seq), GRND_NONBLOCK) !=
            sizeof(s->lease_seq))
            s->lease_seq = tierd_now_ms() << 20; /* (no entropy yet at boot) */
        s->uid = cr.uid;
        s->pid = cr.pid;
        s->refuse = refuse;
        if (d->handshake_ms) {
            s->hs_deadline_ms = tierd_now_ms() + d->handshake_ms;
            arm_timer(s->hs_deadline_ms);
        }
        s->next = all_sessions;
        if (all_sessions)
            all_sessions->prev = s;
        all_sessions = s;
        if (refuse) {
            refusing++;
            continue;
        }
        s->t = t;
        t->clients++;
        d->clients++;
        if (d->verbose)
            tierd_log("session %u: pid %d uid %d connected, tenant %s", s->id, (int)cr.pid,
                      (int)cr.uid, t->name);
    }
}
