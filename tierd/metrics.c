/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - the metrics page's HTTP server, through libmicrohttpd (the
 * only file that sees microhttpd.h): the bearer token, the snapshot the
 * event loop takes for each scrape, and the latency histograms. The page's
 * text is metrics_page.c.
 *
 * Design note. Why a thread and a snapshot: printing costs O(namespaces)
 * (0.22 s and 10.6 MB for 4096 namespaces when it ran on the loop, every
 * client stalled meanwhile), copying the counters costs a memcpy. So MHD
 * runs in a thread of its own (epoll), and the loop does only what needs
 * its data: at a scrape the server's thread bumps `asked` and signals an
 * eventfd; the loop, in on_ask, copies the counters into m->snap (each
 * store's tier_stats and the namespaces' stats structs, no text), sets
 * done = asked and wakes the server, which prints the page from the copy.
 * The snapshot has one user at a time by construction: the loop writes it
 * only while asked > done, the server reads it only once done == asked,
 * and only the server (one thread: no MHD thread pool) moves asked, after
 * it has read. Nothing of tierd's, store or sessions, is read from the
 * server's thread. --metrics-max-namespaces bounds the page and what the
 * snapshot holds (the namespaces past it are only added up).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "kvt_common.h"
#include "ev.h"
#include "metrics.h"
#include "metrics_int.h"
#include "tenant.h"
#include "tierd.h"

/* One epoll thread serves every connection, so a stalled one costs an fd
 * and a few KiB, never a turn: 256 leave room past a flood of 200, and 2 s
 * of silence drops one (a scraper sends its whole request at once). */
#define CONN_MAX 256u
#define CONN_IDLE_S 2u
/* How long a scrape waits for the loop's snapshot before a 503. */
#define SNAP_WAIT_MS 5000

struct metrics {
    struct tierd *d;          /* loop thread only (on_ask) */
    struct MHD_Daemon *mhd;   /* its thread runs on_request */
    struct ev_loop *loop;     /* NULL until attached; loop thread only */
    int ask_fd;               /* eventfd: the server asks the loop for a snapshot */
    uint32_t max_ns;          /* namespaces with series of their own */
    bool no_model_ids;        /* the snapshot holds no descriptor, the page no model */
    bool verbose;             /* -v: MHD's messages after start too */
    atomic_bool quiet;        /* MHD's messages only with -v once started: a peer that
                                 hangs up early is not worth a log line */
    size_t token_len;         /* 0: no token asked for */
    char token[METRICS_TOKEN_MAX + 1]; /* the bearer token, NUL-terminated; wiped at close */
    uint64_t unauthorized;    /* requests refused for the token; server thread only */

    pthread_mutex_t lock;     /* guards asked, done, attached, closing */
    pthread_cond_t filled;    /* done moved, or closing (CLOCK_MONOTONIC) */
    uint64_t asked;           /* snapshots the server asked for; server moves it */
    uint64_t done;            /* the one the loop last took; loop moves it */
    bool attached;            /* the loop answers */
    bool closing;             /* metrics_close began: nobody will answer */
    struct metrics_snap snap; /* loop writes while asked > done, server reads once
                                 done == asked (design note) */
    struct metrics_hist lat[KVT_OP_MAX_]; /* per opcode; loop thread only */
};

/* ---- latency ----------------------------------------------------------- */

uint64_t metrics_req_start(const struct metrics *m)
{
    return m ? cmn_now_ns() : 0;
}

void metrics_req_done(struct metrics *m, uint16_t op, uint64_t t0)
{
    uint64_t dt;
    struct metrics_hist *h;
    size_t i = 0;

    if (!m || !t0 || op == 0 || op >= KVT_OP_MAX_)
        return;
    dt = cmn_now_ns() - t0;
    h = &m->lat[op];
    while (i < METRICS_NBUCKET && dt > metrics_bucket[i].ns) /* linear: 21 bounds */
        i++;
    h->n[i]++;
    h->count++;
    h->sum_ns += dt;
}

/* ---- the snapshot (loop thread) ------------------------------------------ */

/* Add a namespace's counters to a sum: every field of the struct is a
 * uint64_t counter (checked by size below, the rest by reading tierd.h). */
static void stats_add(struct tierd_ns_stats *sum, const struct tierd_ns_stats *st)
{
    uint64_t a[sizeof(*sum) / sizeof(uint64_t)], b[sizeof(a) / sizeof(a[0])];

    _Static_assert(sizeof(*sum) % sizeof(uint64_t) == 0, "tierd_ns_stats: uint64_t only");
    memcpy(a, sum, sizeof(a));
    memcpy(b, st, sizeof(b));
    for (size_t i = 0; i < sizeof(a) / sizeof(a[0]); i++)
        a[i] += b[i];
    memcpy(sum, a, sizeof(a));
}

/* Copy what the page shows into m->snap: the daemon's counters, each
 * store's, the latency histograms, and the first max_ns namespaces'
 * descriptors and counters; each tenant's other namespaces are added up
 * into one series. O(namespaces), no formatting and no allocation. */
static void fill(struct metrics *m)
{
    const struct tierd *d = m->d;
    struct metrics_snap *s = &m->snap;
    uint32_t shown = 0;

    s->up_ms = tierd_now_ms() - d->start_ms;
    s->clients = d->clients;
    s->proto_errors = d->proto_errors;
    s->refused = d->refused;
    s->get_deadline_misses = d->get_deadline_misses;
    s->durable_wait_timeouts = d->durable_wait_timeouts;
    s->pins_expired = d->pins_expired;
    s->remote = d->remote.seeds[0] != 0;
    s->ntenants = d->ntenants;
    s->nns = 0;
    for (uint32_t k = 0; k < d->ntenants; k++) {
        const struct tenant *tn = &d->tenants[k];
        struct metrics_snap_tenant *st = &s->t[k];
        struct metrics_snap_ns rest = { .tenant = k, .id = 0 };

        snprintf(st->name, sizeof(st->name), "%s", tn->name);
        st->hot = tn->hot != NULL;
        st->cold = tn->cold != NULL;
        st->remote = tn->remote != NULL;
        st->clients = tn->clients;
        st->nns = tn->nns;
        st->nsummed = 0;
        tier_stats_get(tn->store, &st->st);
        for (uint32_t i = 0; i < tn->ns_cap; i++) {
            const struct tierd_ns *ns = &tn->ns[i];
            struct metrics_snap_ns *e;

            if (!ns->open)
                continue;
            if (shown == m->max_ns) {
                stats_add(&rest.st, &ns->st);
                st->nsummed++;
                continue;
            }
            e = &s->ns[s->nns++];
            *e = (struct metrics_snap_ns){ .tenant = k, .id = i + 1, .st = ns->st };
            if (!m->no_model_ids)
                e->d = ns->d;
            shown++;
        }
        if (st->nsummed)
            s->ns[s->nns++] = rest; /* room: max_ns + ntenants entries */
    }
    memcpy(s->lat, m->lat, sizeof(s->lat));
}

/* The server's eventfd: take the snapshot asked for, if any. */
static void on_ask(struct ev_loop *l, int fd, uint32_t events, void *ctx)
{
    struct metrics *m = ctx;
    uint64_t n;

    (void)l;
    (void)events;
    if (read(fd, &n, sizeof(n)) < 0 && errno != EAGAIN)
        return;
    pthread_mutex_lock(&m->lock);
    if (m->asked > m->done && !m->closing) {
        fill(m);
        m->done = m->asked;
        pthread_cond_signal(&m->filled);
    }
    pthread_mutex_unlock(&m->lock);
}

/* ---- the server's side (MHD's thread) ------------------------------------ */

/* Ask the loop for a snapshot and wait for it: 0 (m->snap is the server's
 * to read until it asks again), -EAGAIN (not attached yet, or closing), or
 * -ETIMEDOUT (the loop did not answer within SNAP_WAIT_MS). */
static int snapshot(struct metrics *m)
{
    struct timespec until;
    uint64_t one = 1, want;
    int rc = 0;

    clock_gettime(CLOCK_MONOTONIC, &until);
    until.tv_sec += SNAP_WAIT_MS / 1000;
    pthread_mutex_lock(&m->lock);
    if (!m->attached || m->closing) {
        pthread_mutex_unlock(&m->lock);
        return -EAGAIN;
    }
    want = ++m->asked;
    if (write(m->ask_fd, &one, sizeof(one)) < 0 && errno != EAGAIN)
        rc = -errno; /* EAGAIN: the counter is full, so the loop has been told */
    while (rc == 0 && m->done < want && !m->closing)
        rc = -pthread_cond_timedwait(&m->filled, &m->lock, &until);
    if (m->done >= want)
        rc = 0;
    else if (rc == 0)
        rc = -EAGAIN; /* closing */
    pthread_mutex_unlock(&m->lock);
    return rc;
}

/* Whether the request carries the token (or none is asked for). The scheme
 * is case-insensitive (RFC 7235). Every byte of the token is compared, with
 * no early exit, so the time taken depends on its length alone; the branch
 * on n only tells the sender the length of what it sent. */
static bool authorized(const struct metrics *m, struct MHD_Connection *c)
{
    const char *h;
    volatile unsigned char diff;
    size_t n;

    if (!m->token_len)
        return true;
    h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (!h || strncasecmp(h, "Bearer ", 7) != 0)
        return false;
    h += 7;
    h += strspn(h, " \t");
    n = strcspn(h, " \t");
    if (h[n + strspn(h + n, " \t")]) /* a second word: not a bearer token */
        return false;
    diff = n != m->token_len;
    for (size_t i = 0; i < m->token_len; i++)
        diff |= (unsigned char)(m->token[i] ^ (i < n ? h[i] : 0));
    return diff == 0;
}

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, const char *type,
                              char *body, size_t len, bool must_free)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret;

    if (!r) {
        if (must_free)
            free(body);
        return MHD_NO; /* MHD closes the connection */
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    if (status == MHD_HTTP_UNAUTHORIZED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

#define ANSWER_TEXT(c, status, text) \
    answer(c, status, "text/plain", text, sizeof(text) - 1, false)

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_len, void **req_ctx)
{
    static char unauthorized[] = "unauthorized: this page needs its bearer token\n";
    static char not_found[] = "not found: the metrics are at /metrics\n";
    static char not_allowed[] = "method not allowed\n";
    static char no_memory[] = "out of memory\n";
    static char starting[] = "tierd is starting or stopping\n";
    static char busy[] = "tierd's event loop did not answer in time\n";
    static int seen; /* marks a request whose headers came */
    struct metrics *m = cls;
    char *text;
    size_t len;
    int rc;

    (void)version;
    (void)upload;
    /* answer once the whole request is in (the first call has only the
     * headers): a reply queued before that costs the connection its
     * keep-alive, and a scraper its reuse of it */
    if (!*req_ctx) {
        *req_ctx = &seen;
        return MHD_YES;
    }
    if (*upload_len) { /* a body we do not want */
        *upload_len = 0;
        return MHD_YES;
    }
    /* before anything else: without the token, not even which paths exist */
    if (!authorized(m, c)) {
        m->unauthorized++;
        return ANSWER_TEXT(c, MHD_HTTP_UNAUTHORIZED, unauthorized);
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return ANSWER_TEXT(c, MHD_HTTP_METHOD_NOT_ALLOWED, not_allowed);
    if (strcmp(url, "/metrics") != 0)
        return ANSWER_TEXT(c, MHD_HTTP_NOT_FOUND, not_found);
    rc = snapshot(m);
    if (rc < 0)
        return ANSWER_TEXT(c, MHD_HTTP_SERVICE_UNAVAILABLE, rc == -EAGAIN ? starting : busy);
    m->snap.unauthorized = m->unauthorized;
    if (metrics_page(&m->snap, m->no_model_ids, &text, &len) < 0)
        return ANSWER_TEXT(c, MHD_HTTP_INTERNAL_SERVER_ERROR, no_memory);
    return answer(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", text, len, true);
}

static void mhd_log(void *ctx, const char *fmt, va_list ap)
{
    const struct metrics *m = ctx;
    char msg[256];
    size_t n;

    if (atomic_load(&m->quiet) && !m->verbose)
        return;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    n = strlen(msg);
    while (n && msg[n - 1] == '\n') /* MHD ends its messages with one */
        msg[--n] = 0;
    tierd_log("metrics: %s", msg);
}

/* ---- lifecycle ------------------------------------------------------------ */

/* Read the bearer token of path into m->token. 0, or -errno / -EINVAL with
 * the reason in err. */
static int read_token(struct metrics *m, const char *path, char *err, size_t cap)
{
    char buf[METRICS_TOKEN_MAX + 3]; /* the token, "\r\n", one byte to tell it too long */
    struct stat sb;
    size_t n = 0;
    ssize_t r;
    int fd, rc = 0;

    /* O_NONBLOCK: a FIFO must not hang the start (it is refused below) */
    fd = open(path, O_RDONLY | O_CLOEXEC | O_NOCTTY | O_NONBLOCK);
    if (fd < 0) {
        rc = -errno;
        snprintf(err, cap, "--metrics-token-file %s: %s", path, strerror(-rc));
        return rc;
    }
    if (fstat(fd, &sb) < 0) {
        rc = -errno;
        snprintf(err, cap, "--metrics-token-file %s: %s", path, strerror(-rc));
    } else if (!S_ISREG(sb.st_mode)) {
        rc = -EINVAL;
        snprintf(err, cap, "--metrics-token-file %s: not a regular file", path);
    } else if (sb.st_mode & (S_IRWXG | S_IRWXO)) {
        rc = -EINVAL;
        snprintf(err, cap, "--metrics-token-file %s: mode %04o gives group or others "
                 "access to a secret (chmod 600 it)", path, (unsigned)(sb.st_mode & 07777));
    }
    while (rc == 0 && n < sizeof(buf) && (r = read(fd, buf + n, sizeof(buf) - n)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            snprintf(err, cap, "--metrics-token-file %s: %s", path, strerror(-rc));
        } else {
            n += (size_t)r;
        }
    }
    close(fd);
    if (rc == 0 && n && buf[n - 1] == '\n') /* one trailing newline, as editors leave */
        n -= n > 1 && buf[n - 2] == '\r' ? 2 : 1;
    if (rc == 0 && n == 0) {
        rc = -EINVAL;
        snprintf(err, cap, "--metrics-token-file %s: is empty", path);
    } else if (rc == 0 && n > METRICS_TOKEN_MAX) {
        rc = -EINVAL;
        snprintf(err, cap, "--metrics-token-file %s: longer than %d bytes", path,
                 METRICS_TOKEN_MAX);
    }
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (buf[i] <= ' ' || buf[i] > '~') {
            rc = -EINVAL;
            snprintf(err, cap, "--metrics-token-file %s: byte %zu is not a visible ASCII "
                     "character (a token is one word on one line)", path, i + 1);
        }
    if (rc == 0) {
        memcpy(m->token, buf, n);
        m->token[n] = 0;
        m->token_len = n;
    }
    explicit_bzero(buf, sizeof(buf));
    return rc;
}

static int listen_tcp(const char *addr, uint16_t port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    int one = 1, rc, fd;

    if (inet_pton(AF_INET, addr, &a.sin_addr) != 1)
        return -EINVAL;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* a restart may bind while old connections sit in TIME_WAIT; a port
     * another process listens on is still refused */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    /* a backlog as deep as the connection limit: a flood past the limit
     * queues in the kernel rather than drops a scraper's SYN */
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, (int)CONN_MAX) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

/* Start MHD in its thread on our listening socket lfd. */
static int start_server(struct metrics *m, int lfd)
{
    m->mhd = MHD_start_daemon(MHD_USE_EPOLL_INTERNAL_THREAD | MHD_USE_ERROR_LOG, 0, NULL, NULL,
                              on_request, m, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m,
                              MHD_OPTION_LISTEN_SOCKET, lfd,
                              MHD_OPTION_CONNECTION_LIMIT, CONN_MAX,
                              MHD_OPTION_CONNECTION_TIMEOUT, CONN_IDLE_S, MHD_OPTION_END);
    return m->mhd ? 0 : -EIO;
}

int metrics_open(struct tierd *d, const struct metrics_cfg *cfg, char *err, size_t cap,
                 struct metrics **out)
{
    struct metrics *m = calloc(1, sizeof(*m));
    pthread_condattr_t ca;
    int rc = 0, lfd;

    if (!m) {
        snprintf(err, cap, "--metrics-port %u: %s", cfg->port, strerror(ENOMEM));
        return -ENOMEM;
    }
    if (cfg->max_ns > METRICS_MAX_NS_LIMIT) {
        snprintf(err, cap, "--metrics-max-namespaces %u: at most %d", cfg->max_ns,
                 METRICS_MAX_NS_LIMIT);
        free(m);
        return -EINVAL;
    }
    m->d = d;
    m->max_ns = cfg->max_ns;
    m->no_model_ids = cfg->no_model_ids;
    m->verbose = d->verbose;
    m->ask_fd = -1;
    if (cfg->token_file && (rc = read_token(m, cfg->token_file, err, cap)) < 0)
        goto out_free;
    /* room for max_ns namespaces and each tenant's summed others */
    m->snap.ns = calloc((size_t)cfg->max_ns + d->ntenants, sizeof(*m->snap.ns));
    if (!m->snap.ns)
        rc = -ENOMEM;
    else if ((m->ask_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
        rc = -errno;
    if (rc < 0) {
        snprintf(err, cap, "--metrics-port %u: %s", cfg->port, strerror(-rc));
        goto out_free;
    }
    pthread_mutex_init(&m->lock, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&m->filled, &ca);
    pthread_condattr_destroy(&ca);
    /* our own socket, so that a port in use is told apart from MHD's other
     * failures (it reports none of them by errno) */
    lfd = listen_tcp(cfg->addr, cfg->port);
    if (lfd < 0) {
        rc = lfd;
        snprintf(err, cap, "--metrics-port %u: %s", cfg->port,
                 rc == -EADDRINUSE ? "address in use" : strerror(-rc));
        goto out_sync;
    }
    rc = start_server(m, lfd);
    if (rc < 0) {
        /* lfd is left open: whether MHD closed it on failure is not
         * documented, and tierd exits next */
        snprintf(err, cap, "--metrics-port %u: libmicrohttpd would not start", cfg->port);
        goto out_sync;
    }
    atomic_store(&m->quiet, true);
    *out = m;
    return 0;

out_sync:
    pthread_cond_destroy(&m->filled);
    pthread_mutex_destroy(&m->lock);
out_free:
    if (m->ask_fd >= 0)
        close(m->ask_fd);
    free(m->snap.ns);
    explicit_bzero(m->token, sizeof(m->token));
    free(m);
    return rc;
}

int metrics_attach(struct metrics *m, struct ev_loop *l)
{
    int rc = ev_add(l, m->ask_fd, on_ask, m);

    if (rc < 0)
        return rc;
    m->loop = l;
    pthread_mutex_lock(&m->lock);
    m->attached = true;
    pthread_mutex_unlock(&m->lock);
    return 0;
}

void metrics_close(struct metrics *m)
{
    if (!m)
        return;
    /* a scrape waiting for a snapshot gives up now, not at SNAP_WAIT_MS */
    pthread_mutex_lock(&m->lock);
    m->closing = true;
    pthread_cond_broadcast(&m->filled);
    pthread_mutex_unlock(&m->lock);
    MHD_stop_daemon(m->mhd); /* joins its thread; closes the listening socket, connections */
    if (m->loop)
        ev_del(m->loop, m->ask_fd);
    close(m->ask_fd);
    pthread_cond_destroy(&m->filled);
    pthread_mutex_destroy(&m->lock);
    free(m->snap.ns);
    explicit_bzero(m->token, sizeof(m->token));
    free(m);
}
