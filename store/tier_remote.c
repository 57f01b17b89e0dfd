/* SPDX-License-Identifier: MIT */
/*
 * tier_remote.c - the remote tier of tier_remote.h, the caller's side: a
 * Redis Cluster client whose worker threads (tier_remote_worker.c) do the
 * talking; here jobs are built and queued, completions delivered, and
 * namespaces and counters kept. The formats (key names, value headers,
 * slots) are tier_remote_fmt.c's.
 *
 * Design note: threads. The caller (tierd's loop) only builds jobs and
 * queues them; workers take batches of jobs (reads before writes, so a
 * lookup is not stuck behind a burst of write-through puts), route each key
 * to its node, and pipeline per node: every node's commands are written
 * first, then every node's replies read, so the nodes work in parallel.
 * Finished jobs go back through a mutex-guarded list and an eventfd, and
 * their callbacks run on the caller's thread in tier_remote_poll(), so the
 * store above stays single-threaded (the pattern of tier_hot.c).
 *
 */
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

#include "kvt_common.h"
#include "tier_remote_int.h"

/* The seed list ("host:port" separated by commas or spaces) into r->seeds;
 * -EINVAL when one is malformed, too long or too many, or none is given. */
static int copy_seeds(struct tier_remote *r, const char *s)
{
    while (*s) {
        size_t len = strcspn(s, ", "), hlen;
        int port;

        if (len) {
            if (r->nseeds == REMOTE_NODES_MAX || len >= sizeof(r->seeds[0]) ||
                remote_parse_addr(s, len, &hlen, &port) < 0)
                return -EINVAL;
            memcpy(r->seeds[r->nseeds], s, len);
            r->seeds[r->nseeds++][len] = 0;
        }
        s += len;
        s += strspn(s, ", ");
    }
    return r->nseeds ? 0 : -EINVAL;
}

int tier_remote_open(const struct tier_remote_cfg *cfg, struct tier_remote **out)
{
    struct tier_remote *r;
    int rc = 0;

    if (!cfg->seeds || !*cfg->seeds)
        return -EINVAL;
    r = calloc(1, sizeof(*r));
    if (!r)
        return -ENOMEM;
    r->cfg = *cfg;
    if (!r->cfg.timeout_ms)
        r->cfg.timeout_ms = 100;
    if (!r->cfg.workers)
        r->cfg.workers = 2;
    if (!r->cfg.max_queued_bytes)
        r->cfg.max_queued_bytes = 256ull << 20;
    r->cfg.seeds = NULL; /* not kept: copied */
    if (copy_seeds(r, cfg->seeds) < 0) {
        free(r);
        return -EINVAL;
    }
    r->rq.tail = &r->rq.head;
    r->wq.tail = &r->wq.head;
    r->done.tail = &r->done.head;
    pthread_mutex_init(&r->lock, NULL);
    pthread_cond_init(&r->cond, NULL);
    r->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    r->w = calloc(r->cfg.workers, sizeof(*r->w));
    if (r->efd < 0 || !r->w) {
        rc = r->efd < 0 ? -errno : -ENOMEM;
        goto out_free;
    }
    for (unsigned i = 0; i < r->cfg.workers; i++) {
        struct worker *w = &r->w[i];

        w->r = r;
        memset(w->slots, REMOTE_NO_NODE, sizeof(w->slots));
        for (unsigned k = 0; k < r->nseeds; k++) {
            size_t hlen;
            int port;

            remote_parse_addr(r->seeds[k], strlen(r->seeds[k]), &hlen, &port);
            remote_node_of(w, r->seeds[k], hlen, port);
        }
        rc = -pthread_create(&w->thread, NULL, remote_worker_main, w);
        if (rc < 0)
            break;
        w->started = true;
        r->nw++;
    }
    if (r->nw == r->cfg.workers) {
        *out = r;
        return 0;
    }
    tier_remote_close(r);
    return rc;
out_free:
    if (r->efd >= 0)
        close(r->efd);
    free(r->w);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
    return rc;
}

void tier_remote_close(struct tier_remote *r)
{
    if (!r)
        return;
    pthread_mutex_lock(&r->lock);
    r->stop = true;
    pthread_cond_broadcast(&r->cond);
    pthread_mutex_unlock(&r->lock);
    for (unsigned i = 0; i < r->nw; i++)
        pthread_join(r->w[i].thread, NULL);
    /* the workers drained the queues: deliver what is left */
    while (r->inflight)
        if (tier_remote_poll(r, false) <= 0)
            break;
    close(r->efd);
    free(r->w);
    free(r->ns);
    pthread_cond_destroy(&r->cond);
    pthread_mutex_destroy(&r->lock);
    free(r);
}

int tier_remote_event_fd(const struct tier_remote *r) { return r->efd; }
unsigned tier_remote_inflight(const struct tier_remote *r) { return r->inflight; }

int tier_remote_ns_add(struct tier_remote *r, uint32_t ns, const struct tier_remote_ns_desc *desc)
{
    uint8_t id[TIER_REMOTE_NS_ID_BYTES];
    int rc;

    if (ns == 0 || ns >= (1u << 24))
        return -EINVAL;
    if ((rc = tier_remote_ns_id(desc, id)) < 0)
        return rc;
    if ((rc = CMN_GROW(&r->ns, &r->nscap, (size_t)ns + 1, 64)) < 0)
        return rc;
    r->ns[ns].on = true;
    memcpy(r->ns[ns].id, id, sizeof(id));
    return 0;
}

bool tier_remote_ns_on(const struct tier_remote *r, uint32_t ns)
{
    return r && ns < r->nscap && r->ns[ns].on;
}

static struct job *job_new(struct tier_remote *r, int op, uint32_t ns,
                           const struct tier_key *keys, size_t n, uint64_t len,
                           tier_remote_cb cb, void *ctx)
{
    struct job *j;

    if (!tier_remote_ns_on(r, ns))
        return NULL;
    j = calloc(1, sizeof(*j) + n * sizeof(struct item));
    if (!j)
        return NULL;
    *j = (struct job){ .op = op, .n = (uint32_t)n, .len = len, .cb = cb, .ctx = ctx };
    for (size_t i = 0; i < n; i++) {
        struct item *it = &j->items[i];
        static const char *const verb[] = { [REMOTE_OP_GET] = "GET",
                                            [REMOTE_OP_EXISTS] = "EXISTS" };

        it->job = j;
        it->ask = it->tgt = -1;
        it->klen = (uint8_t)tier_remote_key(it->key, r->ns[ns].id, &keys[i]);
        it->slot = (uint16_t)tier_remote_slot(it->key, it->klen);
        if (op != REMOTE_OP_PUT) {
            char cmd[sizeof(it->cmd)];
            int len_cmd = snprintf(cmd, sizeof(cmd), "*2\r\n$%zu\r\n%s\r\n$%u\r\n%s\r\n",
                                   strlen(verb[op]), verb[op], (unsigned)it->klen, it->key);

            memcpy(it->cmd, cmd, (size_t)len_cmd);
            it->cmdlen = (uint16_t)len_cmd;
        }
    }
    return j;
}

static void enqueue(struct tier_remote *r, struct job *j)
{
    struct jq *q = j->op == REMOTE_OP_PUT ? &r->wq : &r->rq;

    pthread_mutex_lock(&r->lock);
    *q->tail = j;
    q->tail = &j->next;
    pthread_cond_signal(&r->cond);
    pthread_mutex_unlock(&r->lock);
    r->inflight++;
}

int tier_remote_put(struct tier_remote *r, uint32_t ns, const struct tier_key *key,
                    const void *buf, uint64_t len, bool copy, tier_remote_cb cb, void *ctx)
{
    struct job *j;

    if (!tier_remote_ns_on(r, ns))
        return -ENOENT;
    if (copy && r->st.queued_bytes + len > r->cfg.max_queued_bytes) {
        r->st.errors++; /* not written: counted like a failed write */
        return -EBUSY;
    }
    j = job_new(r, REMOTE_OP_PUT, ns, key, 1, len, cb, ctx);
    if (!j)
        return -ENOMEM;
    j->src = buf;
    if (copy) {
        j->own = malloc(len ? len : 1);
        if (!j->own) {
            free(j);
            return -ENOMEM;
        }
        memcpy(j->own, buf, len);
        j->src = j->own;
        r->st.queued_bytes += len;
    }
    enqueue(r, j);
    return 0;
}

int tier_remote_get(struct tier_remote *r, uint32_t ns, const struct tier_key *keys,
                    size_t n, void *const *bufs, uint64_t len, int *res, tier_remote_cb cb,
                    void *ctx)
{
    struct job *j;

    if (n == 0)
        return -EINVAL;
    if (!tier_remote_ns_on(r, ns))
        return -ENOENT;
    j = job_new(r, REMOTE_OP_GET, ns, keys, n, len, cb, ctx);
    if (!j)
        return -ENOMEM;
    j->res = res;
    for (size_t i = 0; i < n; i++)
        j->items[i].dst = bufs[i];
    enqueue(r, j);
    return 0;
}

int tier_remote_exists(struct tier_remote *r, uint32_t ns, const struct tier_key *keys,
                       size_t n, int *res, tier_remote_cb cb, void *ctx)
{
    struct job *j;

    if (n == 0)
        return -EINVAL;
    if (!tier_remote_ns_on(r, ns))
        return -ENOENT;
    j = job_new(r, REMOTE_OP_EXISTS, ns, keys, n, 0, cb, ctx);
    if (!j)
        return -ENOMEM;
    j->res = res;
    enqueue(r, j);
    return 0;
}

/* Count a finished job's outcomes. */
static void account(struct tier_remote *r, const struct job *j)
{
    struct tier_remote_stats *st = &r->st;

    for (uint32_t i = 0; i < j->n; i++) {
        int res = j->items[i].res;

        switch (j->op) {
        case REMOTE_OP_PUT:
            st->puts += res == 0;
            st->bytes_in += res == 0 ? j->len : 0;
            st->errors += res != 0;
            break;
        case REMOTE_OP_GET:
            st->hits += res == 0;
            st->bytes_out += res == 0 ? j->len : 0;
            st->misses += res == -ENOENT;
            st->checksum_errors += res == -EBADMSG;
            st->errors += res == -EIO || res == -ENOMEM;
            break;
        case REMOTE_OP_EXISTS:
            st->probes++;
            st->probe_hits += res == 1;
            st->errors += res < 0;
            break;
        }
    }
}

int tier_remote_poll(struct tier_remote *r, bool wait)
{
    struct job *list;
    uint64_t n;
    int ran = 0;

    if (wait && r->inflight) {
        struct pollfd p = { .fd = r->efd, .events = POLLIN };

        while (poll(&p, 1, -1) < 0)
            if (errno != EINTR)
                return -errno;
    }
    if (read(r->efd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        return -errno;
    pthread_mutex_lock(&r->lock);
    list = r->done.head;
    r->done.head = NULL;
    r->done.tail = &r->done.head;
    pthread_mutex_unlock(&r->lock);
    while (list) {
        struct job *j = list;

        list = j->next;
        r->inflight--;
        account(r, j);
        if (j->res)
            for (uint32_t i = 0; i < j->n; i++)
                j->res[i] = j->items[i].res;
        if (j->own) {
            r->st.queued_bytes -= j->len;
            free(j->own);
        }
        if (j->cb)
            j->cb(j->ctx, 0);
        free(j);
        ran++;
    }
    return ran;
}

void tier_remote_stats_get(const struct tier_remote *r, struct tier_remote_stats *out)
{
    *out = r->st;
    out->redirects = atomic_load(&((struct tier_remote *)r)->redirects);
    out->slot_maps = atomic_load(&((struct tier_remote *)r)->slot_maps);
}
