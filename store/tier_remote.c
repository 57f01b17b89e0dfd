/* SPDX-License-Identifier: MIT */
/*
 * tier_remote.c - the remote tier of tier_remote.h: a Redis Cluster client
 * with its own worker threads, hiredis behind this one file.
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
 * Design note: names. A namespace is named on the cluster by a SHA-256 over
 * its fields (tier_remote_ns_id), never by a fast hash of a string: most of
 * those fields are a client's text, and a client who could make its name
 * collide with another tenant's (XXH3-64 falls to chosen input, issue 14)
 * would read that tenant's blocks and plant its own. The encoding is
 * length-prefixed so that no two descriptors share one, and a key carries
 * 128 bits of the digest: finding a descriptor for a given id is a 2^128
 * search.
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
#include <openssl/evp.h>
#include <xxhash.h>

#include "tier_remote.h"

#define NODES_MAX 64          /* cluster masters a worker can know */
#define NO_NODE 0xFFu         /* slot map: no owner known */
#define TRIES 4               /* routing attempts per key (redirects included) */
#define DOWN_MS 1000          /* a failed node is not tried again for this long */
#define MAP_EVERY_MS 100      /* slot map reads at most this often */
#define BATCH_ITEMS 1024      /* keys a worker takes at once ... */
#define BATCH_BYTES (64u << 20) /* ... and payload bytes */
#define VALUE_MAGIC 0x5254564Bu /* "KVTR" little-endian */
#define VALUE_VERSION 1

enum { OP_PUT = 1, OP_GET = 2, OP_EXISTS = 3 };

/* A key's state in its worker's batch. Only IT_SENT keys are on the wire,
 * so a round sends, and reads the replies of, exactly the keys it routed:
 * a key finished in an earlier round (a verified hit, a miss) is never sent
 * or read again, whatever a redirect of another key on its node does. */
enum { IT_TODO, IT_SENT, IT_DONE };

/* One key of a job. */
struct item {
    struct job *job;
    char key[TIER_REMOTE_KEY_MAX];
    uint8_t klen;
    uint16_t slot;
    int16_t ask;           /* ASK target for the next try (-1: none) */
    int16_t tgt;           /* node of its last send (worker) */
    uint8_t tries;
    uint8_t state;         /* IT_*: unfinished (to send, or sent this round) or done */
    int res;               /* outcome (see tier_remote_get / _exists) */
    void *dst;             /* GET: the caller's buffer */
    uint16_t cmdlen;
    char cmd[200];         /* the command; PUT: up to the payload (head + value header) */
};

/* The longest command head, "*3\r\n$3\r\nSET\r\n$<klen>\r\n<key>\r\n$<20 digits>\r\n"
 * (under 48 bytes besides the key), and a PUT's value header fit in cmd. */
_Static_assert(sizeof(((struct item *)0)->cmd) >=
               48 + TIER_REMOTE_KEY_MAX + TIER_REMOTE_HDR_BYTES, "item.cmd too small");

/* One call (put, get, exists). */
struct job {
    int op;
    uint32_t n;
    uint64_t len;          /* PUT/GET: payload bytes per key */
    const uint8_t *src;    /* PUT: the payload (the caller's, or own) */
    uint8_t *own;          /* PUT with copy: ours, freed at completion */
    int *res;              /* GET/EXISTS: the caller's results */
    tier_remote_cb cb;
    void *ctx;
    struct job *next;
    struct item items[];
};

struct node {
    char host[64];
    int port;
    redisContext *c;       /* NULL: not connected */
    uint64_t down_until;   /* CLOCK_MONOTONIC ms; not tried before */
};

struct worker {
    struct tier_remote *r;
    pthread_t thread;
    bool started;
    struct node node[NODES_MAX];
    unsigned nnodes;
    uint8_t slots[TIER_REMOTE_SLOTS]; /* slot -> node index, NO_NODE: unknown */
    uint64_t map_at;       /* ms of the last slot map read (0: never) */
    bool map_stale;        /* a MOVED or a failure: read it again */
    uint64_t log_at;       /* ms of the last warning (rate limit) */
};

struct jq {
    struct job *head, **tail;
};

/* A namespace added (tier_remote_ns_add). */
struct rns {
    bool on;                     /* added: uses the remote tier */
    uint8_t id[TIER_REMOTE_NS_ID_BYTES]; /* tier_remote_ns_id of its descriptor */
};

struct tier_remote {
    struct tier_remote_cfg cfg;
    char seeds[NODES_MAX][72];   /* "host:port" as given */
    unsigned nseeds;
    pthread_mutex_t lock;        /* guards the three queues and stop */
    pthread_cond_t cond;         /* work queued, or stop */
    struct jq rq, wq, done;      /* reads, writes, finished */
    bool stop;
    int efd;                     /* written once per finished batch */
    struct worker *w;
    unsigned nw;
    /* caller's thread only */
    unsigned inflight;
    struct rns *ns;              /* ns id -> its namespace on the cluster */
    uint32_t nscap;
    struct tier_remote_stats st;
    /* counted by workers */
    _Atomic uint64_t redirects, slot_maps;
};

static uint64_t now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* ---- formats ----------------------------------------------------------- */

uint16_t tier_remote_crc16(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint16_t crc = 0;

    /* bitwise: keys are short, and this runs once per key at submit */
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned tier_remote_slot(const void *key, size_t len)
{
    const char *k = key, *open = memchr(k, '{', len);

    if (open) {
        size_t from = (size_t)(open - k) + 1;
        const char *close = memchr(k + from, '}', len - from);

        if (close && close > k + from)
            return tier_remote_crc16(k + from, (size_t)(close - (k + from))) %
                   TIER_REMOTE_SLOTS;
    }
    return tier_remote_crc16(k, len) % TIER_REMOTE_SLOTS;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int tier_remote_ns_id(const struct tier_remote_ns_desc *desc,
                      uint8_t out[TIER_REMOTE_NS_ID_BYTES])
{
    static const char tag[] = "kvtier remote namespace 1";
    const char *str[] = { tag, desc->tenant, desc->model_id, desc->dtype, desc->layout };
    uint8_t ints[20], len[4];
    EVP_MD_CTX *ctx;
    bool ok;

    for (size_t i = 0; i < sizeof(str) / sizeof(str[0]); i++)
        if (!str[i] || strlen(str[i]) > UINT32_MAX)
            return -EINVAL;
    put32(ints, desc->block_tokens);
    put64(ints + 4, desc->block_bytes);
    put32(ints + 12, desc->tp_rank);
    put32(ints + 16, desc->tp_size);
    ctx = EVP_MD_CTX_new();
    if (!ctx)
        return -ENOMEM;
    /* OpenSSL fails here only for want of memory */
    ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    for (size_t i = 0; ok && i < sizeof(str) / sizeof(str[0]); i++) {
        put32(len, (uint32_t)strlen(str[i]));
        ok = EVP_DigestUpdate(ctx, len, sizeof(len)) == 1 &&
             EVP_DigestUpdate(ctx, str[i], strlen(str[i])) == 1;
    }
    ok = ok && EVP_DigestUpdate(ctx, ints, sizeof(ints)) == 1 &&
         EVP_DigestFinal_ex(ctx, out, NULL) == 1;
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -ENOMEM;
}

static void hex_of(char *out, const uint8_t *b, size_t n)
{
    static const char hex[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
}

size_t tier_remote_key(char *out, const uint8_t ns_id[TIER_REMOTE_NS_ID_BYTES],
                       const struct tier_key *key)
{
    /* no hash tag: a block's slot comes from its whole key, so a
     * namespace's blocks spread over every master instead of one slot */
    size_t n = 0;

    memcpy(out, "kvt:", 4);
    n += 4;
    hex_of(out + n, ns_id, TIER_REMOTE_NS_KEY_BYTES);
    n += 2 * TIER_REMOTE_NS_KEY_BYTES;
    out[n++] = ':';
    hex_of(out + n, key->b, TIER_KEY_BYTES);
    n += 2 * TIER_KEY_BYTES;
    out[n] = 0;
    return n;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Header: magic u32, version u16, header bytes u16, payload bytes u64,
 * XXH3-64 of the payload, XXH3-64 of the key (a value copied under another
 * key is wrong too). Little-endian, whatever the host. The key's XXH3 checks
 * against misplacement, not a security boundary (anyone can compute it):
 * what keeps tenants apart is the SHA-256 namespace id inside the key. */
void tier_remote_hdr_make(uint8_t hdr[TIER_REMOTE_HDR_BYTES], const char *rkey, size_t klen,
                          const void *payload, uint64_t len)
{
    put64(hdr, (uint64_t)VALUE_MAGIC | (uint64_t)VALUE_VERSION << 32 |
                   (uint64_t)TIER_REMOTE_HDR_BYTES << 48);
    put64(hdr + 8, len);
    put64(hdr + 16, XXH3_64bits(payload, len));
    put64(hdr + 24, XXH3_64bits(rkey, klen));
}

int tier_remote_value_check(const void *val, size_t vlen, const char *rkey, size_t klen,
                            uint64_t want_len)
{
    const uint8_t *v = val;

    if (vlen != TIER_REMOTE_HDR_BYTES + want_len ||
        get64(v) != ((uint64_t)VALUE_MAGIC | (uint64_t)VALUE_VERSION << 32 |
                     (uint64_t)TIER_REMOTE_HDR_BYTES << 48) ||
        get64(v + 8) != want_len || get64(v + 24) != XXH3_64bits(rkey, klen) ||
        get64(v + 16) != XXH3_64bits(v + TIER_REMOTE_HDR_BYTES, want_len))
        return -EBADMSG;
    return 0;
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
static int node_of(struct worker *w, const char *host, size_t hlen, int port)
{
    for (unsigned i = 0; i < w->nnodes; i++)
        if (w->node[i].port == port && strlen(w->node[i].host) == hlen &&
            memcmp(w->node[i].host, host, hlen) == 0)
            return (int)i;
    if (w->nnodes == NODES_MAX || hlen == 0 || hlen >= sizeof(w->node[0].host))
        return -1;
    memcpy(w->node[w->nnodes].host, host, hlen);
    w->node[w->nnodes].host[hlen] = 0;
    w->node[w->nnodes].port = port;
    return (int)w->nnodes++;
}

/* "host:port" (the last ':' splits, so "::1:7000" works too). */
static int parse_addr(const char *s, size_t len, size_t *hlen, int *port)
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
    memset(map, NO_NODE, TIER_REMOTE_SLOTS);
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
            owner = hlen ? node_of(w, m->element[0]->str, hlen, (int)m->element[1]->integer)
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
        if (it->job->op == OP_PUT) {
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
    if (!addr || parse_addr(addr + 1, strlen(addr + 1), &hlen, &port) < 0)
        return -1;
    return node_of(w, addr + 1, hlen, port);
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
    case OP_PUT:
        finish(it, rp->type == REDIS_REPLY_STATUS ? 0 : -EIO);
        break;
    case OP_EXISTS:
        finish(it, rp->type == REDIS_REPLY_INTEGER ? rp->integer > 0 : -EIO);
        break;
    case OP_GET:
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
    bool used[NODES_MAX];

    for (size_t i = 0; i < nv; i++)
        if (v[i]->job->op == OP_PUT)
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
            if (it->tgt == NO_NODE || !node_conn(w, it->tgt)) {
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

static void *worker_main(void *arg)
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

/* ---- the caller's side ----------------------------------------------------- */

int tier_remote_open(const struct tier_remote_cfg *cfg, struct tier_remote **out)
{
    struct tier_remote *r;
    const char *s;
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
    r->cfg.seeds = NULL; /* not kept: copied below */
    for (s = cfg->seeds; *s;) {
        size_t len = strcspn(s, ", "), hlen;
        int port;

        if (len) {
            if (r->nseeds == NODES_MAX || len >= sizeof(r->seeds[0]) ||
                parse_addr(s, len, &hlen, &port) < 0) {
                free(r);
                return -EINVAL;
            }
            memcpy(r->seeds[r->nseeds], s, len);
            r->seeds[r->nseeds++][len] = 0;
        }
        s += len;
        s += strspn(s, ", ");
    }
    if (!r->nseeds) {
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
        memset(w->slots, NO_NODE, sizeof(w->slots));
        for (unsigned k = 0; k < r->nseeds; k++) {
            size_t hlen;
            int port;

            parse_addr(r->seeds[k], strlen(r->seeds[k]), &hlen, &port);
            node_of(w, r->seeds[k], hlen, port);
        }
        rc = -pthread_create(&w->thread, NULL, worker_main, w);
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
    if (ns >= r->nscap) {
        uint32_t cap = r->nscap ? r->nscap : 64;
        struct rns *p;

        while (cap <= ns)
            cap *= 2;
        p = realloc(r->ns, cap * sizeof(*p));
        if (!p)
            return -ENOMEM;
        memset(p + r->nscap, 0, (cap - r->nscap) * sizeof(*p));
        r->ns = p;
        r->nscap = cap;
    }
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
        static const char *const verb[] = { [OP_GET] = "GET", [OP_EXISTS] = "EXISTS" };

        it->job = j;
        it->ask = it->tgt = -1;
        it->klen = (uint8_t)tier_remote_key(it->key, r->ns[ns].id, &keys[i]);
        it->slot = (uint16_t)tier_remote_slot(it->key, it->klen);
        if (op != OP_PUT) {
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
    struct jq *q = j->op == OP_PUT ? &r->wq : &r->rq;

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
    j = job_new(r, OP_PUT, ns, key, 1, len, cb, ctx);
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
    j = job_new(r, OP_GET, ns, keys, n, len, cb, ctx);
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
    j = job_new(r, OP_EXISTS, ns, keys, n, 0, cb, ctx);
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
        case OP_PUT:
            st->puts += res == 0;
            st->bytes_in += res == 0 ? j->len : 0;
            st->errors += res != 0;
            break;
        case OP_GET:
            st->hits += res == 0;
            st->bytes_out += res == 0 ? j->len : 0;
            st->misses += res == -ENOENT;
            st->checksum_errors += res == -EBADMSG;
            st->errors += res == -EIO || res == -ENOMEM;
            break;
        case OP_EXISTS:
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
