/* SPDX-License-Identifier: MIT */
/*
 * tier_remote_worker.c - the remote tier's worker threads: each takes
 * batches of jobs, routes every key to its node and pipelines per node.
 * hiredis is seen here only.
 *
 * Design note: routing. Each worker keeps its own node table, connections
 * (one blocking hiredis context per node: with N workers, a pool of N
 * connections per node) and slot map, so workers share nothing but the
 * queues. The map comes from CLUSTER SLOTS at the first job and again
 * after a MOVED or a failed node (at most every 100 ms); MOVED also fixes
 * the one slot at once; ASK sends ASKING and the command to the node named,
 * for that try only. A key gets 4 tries, and a round sends only the keys
 * still unfinished (each key carries its state): a redirect of one key
 * never sends its finished neighbours again. A node that fails (refused,
 * reset, timeout) is closed and marked down for a second: its keys fail at
 * once meanwhile (misses, never a wait), then it is tried again.
 *
 * Design note: bytes. A put's value is written with sendmsg straight from
 * the caller's buffer (a pinned warm slot, or our copy): the command's
 * head and the 32-byte value header, the payload, CRLF; hiredis's output
 * buffer is never used for values (it would copy them twice). Replies are
 * read by hiredis's reader; a GET's value is verified, then copied into its
 * destination slot.
 */
#include <assert.h>
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "tier_remote_int.h"

#define TRIES 4               /* routing attempts per key (redirects included) */
#define DOWN_MS 1000          /* a failed node is not tried again for this long */
#define MAP_EVERY_MS 100      /* slot map reads at most this often */
#define BATCH_ITEMS 1024      /* keys a worker takes at once ... */
#define BATCH_BYTES (64u << 20) /* ... and payload bytes */

/* A key's state in its worker's batch. Only IT_SENT keys are on the wire,
 * so a round sends, and reads the replies of, exactly the keys it routed:
 * a key finished in an earlier round (a verified hit, a miss) is never sent
 * or read again, whatever a redirect of another key on its node does. */
enum { IT_TODO, IT_SENT, IT_DONE };

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- the worker: nodes, slot map ---------------------------------------- */

static void wlog(struct worker *w, bool limit, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static void wlog(struct worker *w, bool limit, const char *fmt, ...)
{
    char msg[300];
    va_list ap;
    uint64_t now = now_ms();

    if (!w->r->cfg.log || (limit && w->log_at && now - w->log_at < 5000))
        return; /* a down cluster must not flood the log: one line per 5 s */
    if (limit)
        w->log_at = now;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    w->r->cfg.log(w->r->cfg.log_ctx, msg);
}

/* The index of node host:port, added when new; -1 when the table is full. */
int remote_node_of(struct worker *w, const char *host, size_t hlen, int port)
{
    for (unsigned i = 0; i < w->nnodes; i++)
        if (w->node[i].port == port && strlen(w->node[i].host) == hlen &&
            memcmp(w->node[i].host, host, hlen) == 0)
            return (int)i;
    if (w->nnodes == REMOTE_NODES_MAX || hlen == 0 || hlen >= sizeof(w->node[0].host))
        return -1;
    memcpy(w->node[w->nnodes].host, host, hlen);
    w->node[w->nnodes].host[hlen] = 0;
    w->node[w->nnodes].port = port;
    return (int)w->nnodes++;
}

/* "host:port" (the last ':' splits, so "::1:7000" works too). */
int remote_parse_addr(const char *s, size_t len, size_t *hlen, int *port)
{
    const char *colon = NULL;
    long p = 0;

    for (size_t i = 0; i < len; i++)
        if (s[i] == ':')
            colon = s + i;
    if (!colon || colon == s || colon + 1 == s + len)
        return -EINVAL;
    for (const char *c = colon + 1; c < s + len; c++) {
        if (*c < '0' || *c > '9' || p > 65535)
            return -EINVAL;
        p = p * 10 + (*c - '0');
    }
    if (p < 1 || p > 65535)
        return -EINVAL;
    *hlen = (size_t)(colon - s);
    *port = (int)p;
    return 0;
}

static void node_fail(struct worker *w, int k, const char *reason)
{
    struct node *nd = &w->node[k];
    char why[128];

    snprintf(why, sizeof(why), "%s", reason); /* reason may be the context's errstr */
    if (nd->c)
        redisFree(nd->c);
    nd->c = NULL;
    nd->down_until = now_ms() + DOWN_MS;
    w->map_stale = true;
    wlog(w, true, "remote tier: node %s:%d: %s (its keys are misses for %d ms)", nd->host,
         nd->port, why, DOWN_MS);
}

/* A connection to node k, or NULL (down: its keys fail at once). */
static redisContext *node_conn(struct worker *w, int k)
{
    struct node *nd = &w->node[k];
    uint32_t ms = w->r->cfg.timeout_ms;
    struct timeval tv = { .tv_sec = ms / 1000, .tv_usec = (long)(ms % 1000) * 1000 };
    char why[160];

    if (nd->c)
        return nd->c;
    if (nd->down_until && now_ms() < nd->down_until)
        return NULL;
    nd->c = redisConnectWithTimeout(nd->host, nd->port, tv);
    if (!nd->c || nd->c->err || redisSetTimeout(nd->c, tv) != REDIS_OK) {
        snprintf(why, sizeof(why), "cannot connect: %s", nd->c ? nd->c->errstr : "no memory");
        node_fail(w, k, why);
        return NULL;
    }
    nd->down_until = 0;
    return nd->c;
}

/* Read the slot map from node k into map. 0, or -1 (the node failed). */
static int read_map(struct worker *w, int k, uint8_t *map)
{
    redisContext *c = node_conn(w, k);
    redisReply *rp;
    int rc = -1;

    if (!c)
        return -1;
    rp = redisCommand(c, "CLUSTER SLOTS");
    if (!rp) {
        node_fail(w, k, c->errstr);
        return -1;
    }
    memset(map, REMOTE_NO_NODE, TIER_REMOTE_SLOTS);
    if (rp->type == REDIS_REPLY_ERROR && strstr(rp->str, "cluster support disabled")) {
        /* a plain redis-server (no cluster mode): it holds every slot */
        memset(map, k, TIER_REMOTE_SLOTS);
        rc = 0;
    } else if (rp->type == REDIS_REPLY_ARRAY) {
        for (size_t i = 0; i < rp->elements; i++) {
            const redisReply *e = rp->element[i], *m;
            size_t hlen;
            int owner;

            if (e->type != REDIS_REPLY_ARRAY || e->elements < 3 ||
                e->element[0]->type != REDIS_REPLY_INTEGER ||
                e->element[1]->type != REDIS_REPLY_INTEGER)
                continue;
            m = e->element[2];
            if (m->type != REDIS_REPLY_ARRAY || m->elements < 2 ||
                m->element[0]->type != REDIS_REPLY_STRING ||
                m->element[1]->type != REDIS_REPLY_INTEGER)
                continue;
            hlen = m->element[0]->len;
            /* an empty address means "the node you asked" */
            owner = hlen ? remote_node_of(w, m->element[0]->str, hlen, (int)m->element[1]->integer)
                         : k;
            if (owner < 0)
                continue;
            for (long long s = e->element[0]->integer;
                 s <= e->element[1]->integer && s < TIER_REMOTE_SLOTS; s++)
                if (s >= 0)
                    map[s] = (uint8_t)owner;
        }
        rc = 0;
    }
    freeReplyObject(rp);
    return rc;
}

/* Refresh the slot map from any node that answers (known nodes, then the
 * seeds), at most every MAP_EVERY_MS. */
static void refresh_map(struct worker *w)
{
    uint64_t now = now_ms();
    uint8_t map[TIER_REMOTE_SLOTS];

    if (w->map_at && now - w->map_at < MAP_EVERY_MS)
        return;
    w->map_at = now;
    for (unsigned i = 0; i < w->nnodes; i++) {
        if (read_map(w, (int)i, map) == 0) {
            memcpy(w->slots, map, sizeof(map));
            w->map_stale = false;
            atomic_fetch_add(&w->r->slot_maps, 1);
            return;
        }
    }
    wlog(w, true, "remote tier: no cluster node answers CLUSTER SLOTS");
}

/* ---- the worker: one batch ----------------------------------------------- */

/* Whether item it was sent to node k in this round (and waits for its reply). */
static bool on_wire(const struct item *it, int k)
{
    return it->state == IT_SENT && it->tgt == k;
}

/* Send every item of this round bound for node k, in order. 0 or -errno. */
static int send_node(struct worker *w, int k, struct item **v, size_t nv)
{
    static const char asking[] = "*1\r\n$6\r\nASKING\r\n";
    struct iovec iov[256];
    int cnt = 0, fd = w->node[k].c->fd;

    for (size_t i = 0; i <= nv; i++) {
        struct item *it = i < nv ? v[i] : NULL;

        if (it && !on_wire(it, k))
            continue;
        /* flush when the array is full (an item takes up to 4) or at the end */
        if (!it || cnt > (int)(sizeof(iov) / sizeof(iov[0])) - 4) {
            int at = 0;

            while (at < cnt) {
                struct msghdr m = { .msg_iov = iov + at, .msg_iovlen = (size_t)(cnt - at) };
                ssize_t n = sendmsg(fd, &m, MSG_NOSIGNAL);

                if (n < 0 && errno == EINTR)
                    continue;
                if (n < 0)
                    return errno == EAGAIN ? -ETIMEDOUT : -errno;
                while (at < cnt && (size_t)n >= iov[at].iov_len)
                    n -= (ssize_t)iov[at++].iov_len;
                if (at < cnt) {
                    iov[at].iov_base = (uint8_t *)iov[at].iov_base + n;
                    iov[at].iov_len -= (size_t)n;
                }
            }
            cnt = 0;
            if (!it)
                break;
        }
        if (it->ask >= 0)
            iov[cnt++] = (struct iovec){ (void *)asking, sizeof(asking) - 1 };
        iov[cnt++] = (struct iovec){ it->cmd, it->cmdlen };
        if (it->job->op == REMOTE_OP_PUT) {
            iov[cnt++] = (struct iovec){ (void *)it->job->src, it->job->len };
            iov[cnt++] = (struct iovec){ (void *)"\r\n", 2 };
        }
    }
    return 0;
}

/* An item's outcome, once: a finished item is never sent again. */
static void finish(struct item *it, int res)
{
    assert(it->state != IT_DONE);
    it->state = IT_DONE;
    it->res = res;
}

/* "MOVED 3999 127.0.0.1:6381" / "ASK ...": the node named, or -1. */
static int redirect_node(struct worker *w, const char *s, unsigned *slot)
{
    const char *sp = strchr(s, ' '), *addr;
    size_t hlen;
    int port;

    if (!sp)
        return -1;
    *slot = (unsigned)strtoul(sp + 1, NULL, 10) % TIER_REMOTE_SLOTS;
    addr = strchr(sp + 1, ' ');
    if (!addr || remote_parse_addr(addr + 1, strlen(addr + 1), &hlen, &port) < 0)
        return -1;
    return remote_node_of(w, addr + 1, hlen, port);
}

/* Handle one reply to item it. */
static void on_reply(struct worker *w, struct item *it, const redisReply *rp)
{
    const struct job *j = it->job;
    unsigned slot;
    int k;

    if (rp->type == REDIS_REPLY_ERROR) {
        bool moved = strncmp(rp->str, "MOVED ", 6) == 0, ask = strncmp(rp->str, "ASK ", 4) == 0;

        it->tries++;
        if (moved || ask) {
            k = redirect_node(w, rp->str, &slot);
            atomic_fetch_add(&w->r->redirects, 1);
            if (k < 0) {
                finish(it, -EIO);
            } else if (moved) {
                w->slots[slot] = (uint8_t)k; /* now; the whole map follows */
                w->map_stale = true;
            } else {
                it->ask = (int16_t)k;
            }
        } else if (strncmp(rp->str, "TRYAGAIN", 8) != 0) {
            finish(it, -EIO); /* CLUSTERDOWN, OOM, ...: a miss */
        }
        if (it->state != IT_DONE) {
            if (it->tries >= TRIES)
                finish(it, -EIO);
            else
                it->state = IT_TODO; /* redirected or TRYAGAIN: the next round sends it */
        }
        return;
    }
    switch (j->op) {
    case REMOTE_OP_PUT:
        finish(it, rp->type == REDIS_REPLY_STATUS ? 0 : -EIO);
        break;
    case REMOTE_OP_EXISTS:
        finish(it, rp->type == REDIS_REPLY_INTEGER ? rp->integer > 0 : -EIO);
        break;
    case REMOTE_OP_GET:
        if (rp->type == REDIS_REPLY_NIL) {
            finish(it, -ENOENT);
        } else if (rp->type != REDIS_REPLY_STRING) {
            finish(it, -EIO);
        } else if (tier_remote_value_check(rp->str, rp->len, it->key, it->klen, j->len) < 0) {
            finish(it, -EBADMSG);
        } else {
            memcpy(it->dst, rp->str + TIER_REMOTE_HDR_BYTES, j->len);
            finish(it, 0);
        }
        break;
    }
}

/* Read the replies of node k's items, in the order they were sent. */
static void read_node(struct worker *w, int k, struct item **v, size_t nv)
{
    for (size_t i = 0; i < nv; i++) {
        struct item *it = v[i];
        redisReply *rp = NULL;
        bool asked = it->ask >= 0;

        if (!on_wire(it, k))
            continue;
        it->ask = -1; /* an ASK holds for one try */
        if (asked) {
            /* ASKING's own reply: +OK */
            if (redisGetReply(w->node[k].c, (void **)&rp) != REDIS_OK)
                goto failed;
            freeReplyObject(rp);
            rp = NULL;
        }
        if (redisGetReply(w->node[k].c, (void **)&rp) != REDIS_OK)
            goto failed;
        on_reply(w, it, rp);
        freeReplyObject(rp);
        continue;
failed:
        /* the connection is gone or timed out: this key and the rest
         * bound for k fail (their replies cannot be matched any more) */
        node_fail(w, k, w->node[k].c->errstr[0] ? w->node[k].c->errstr : "read failed");
        for (; i < nv; i++)
            if (on_wire(v[i], k))
                finish(v[i], -EIO);
        return;
    }
}

/* Put items: the command head and the value header, now that we are on a
 * worker (the checksum of a 2 MiB block is worth keeping off the loop). */
static void prepare_put(struct item *it)
{
    const struct job *j = it->job;
    char head[sizeof(it->cmd)];
    int n = snprintf(head, sizeof(head), "*3\r\n$3\r\nSET\r\n$%u\r\n%s\r\n$%llu\r\n",
                     (unsigned)it->klen, it->key,
                     (unsigned long long)(j->len + TIER_REMOTE_HDR_BYTES));

    memcpy(it->cmd, head, (size_t)n);

    tier_remote_hdr_make((uint8_t *)it->cmd + n, it->key, it->klen, j->src, j->len);
    it->cmdlen = (uint16_t)(n + TIER_REMOTE_HDR_BYTES);
}

static void run_batch(struct worker *w, struct item **v, size_t nv)
{
    bool used[REMOTE_NODES_MAX];

    for (size_t i = 0; i < nv; i++)
        if (v[i]->job->op == REMOTE_OP_PUT)
            prepare_put(v[i]);
    if (!w->map_at || w->map_stale)
        refresh_map(w);
    for (int round = 0; round < TRIES + 1; round++) {
        bool any = false;

        memset(used, 0, sizeof(used));
        for (size_t i = 0; i < nv; i++) {
            struct item *it = v[i];

            if (it->state != IT_TODO)
                continue;
            it->tgt = it->ask >= 0 ? it->ask : w->slots[it->slot];
            if (it->tgt == REMOTE_NO_NODE || !node_conn(w, it->tgt)) {
                finish(it, -EIO); /* no owner known, or its node is down */
                continue;
            }
            it->state = IT_SENT;
            used[it->tgt] = any = true;
        }
        if (!any)
            break;
        /* all nodes' commands first, then all replies: the nodes overlap */
        for (int k = 0; k < (int)w->nnodes; k++) {
            int rc;

            if (!used[k])
                continue;
            rc = send_node(w, k, v, nv);
            if (rc < 0) {
                node_fail(w, k, strerror(-rc));
                used[k] = false;
                for (size_t i = 0; i < nv; i++)
                    if (on_wire(v[i], k))
                        finish(v[i], -EIO);
            }
        }
        /* every IT_SENT item leaves its node's read done or back to IT_TODO */
        for (int k = 0; k < (int)w->nnodes; k++)
            if (used[k])
                read_node(w, k, v, nv);
        if (w->map_stale)
            refresh_map(w);
    }
    for (size_t i = 0; i < nv; i++)
        if (v[i]->state != IT_DONE)
            finish(v[i], -EIO);
}

/* Take a batch: reads first, then writes, up to the limits (one job at
 * least). Called under the lock. */
static struct job *take(struct tier_remote *r, size_t *items)
{
    struct job *batch = NULL, **bt = &batch;
    uint64_t bytes = 0;

    *items = 0;
    for (int q = 0; q < 2; q++) {
        struct jq *jq = q ? &r->wq : &r->rq;

        while (jq->head && (*items == 0 || (*items + jq->head->n <= BATCH_ITEMS &&
                                            bytes + jq->head->len * jq->head->n <=
                                                BATCH_BYTES))) {
            struct job *j = jq->head;

            jq->head = j->next;
            if (!jq->head)
                jq->tail = &jq->head;
            j->next = NULL;
            *bt = j;
            bt = &j->next;
            *items += j->n;
            bytes += j->len * j->n;
        }
    }
    return batch;
}

void *remote_worker_main(void *arg)
{
    struct worker *w = arg;
    struct tier_remote *r = w->r;
    struct item **v = NULL;
    size_t vcap = 0;

    for (;;) {
        struct job *batch, *last;
        size_t nitems, nv = 0;
        uint64_t one = 1;

        pthread_mutex_lock(&r->lock);
        while (!r->rq.head && !r->wq.head && !r->stop)
            pthread_cond_wait(&r->cond, &r->lock);
        batch = take(r, &nitems);
        pthread_mutex_unlock(&r->lock);
        if (!batch)
            break; /* stopping, and the queues are empty */
        if (nitems > vcap) {
            struct item **nvp = realloc(v, nitems * sizeof(*v));

            if (nvp) {
                v = nvp;
                vcap = nitems;
            }
        }
        for (struct job *j = batch; j; j = j->next)
            for (uint32_t i = 0; i < j->n; i++) {
                if (nv < vcap)
                    v[nv++] = &j->items[i];
                else
                    finish(&j->items[i], -ENOMEM);
            }
        run_batch(w, v, nv);
        for (last = batch; last->next; last = last->next)
            ;
        pthread_mutex_lock(&r->lock);
        *r->done.tail = batch;
        r->done.tail = &last->next;
        pthread_mutex_unlock(&r->lock);
        /* a full eventfd counter is impossible here (2^64 - 2 batches) */
        if (write(r->efd, &one, sizeof(one)) < 0)
            continue;
    }
    for (unsigned k = 0; k < w->nnodes; k++)
        if (w->node[k].c)
            redisFree(w->node[k].c);
    free(v);
    return NULL;
}

