/* SPDX-License-Identifier: MIT */
/*
 * sess.c - one session per connected client: its life (admission at
 * accept, close, reclaim), the framing of its messages, the replies, the
 * dispatch to the operations (sess_data.c: lookups, puts, gets, pins;
 * sess_admin.c: handshake, namespaces, operators), and the one timer that
 * serves every deadline.
 *
 * Each readable event drains up to a few messages. A message is checked in
 * two stages: framing (size, magic, version, body length), whose failure
 * means the peer cannot be trusted to stay in sync and costs it the
 * connection; then content (opcode, counts, namespace, block size), whose
 * failure gets an error reply and leaves the connection up. The store sees
 * only requests that passed both.
 *
 * A session remembers what it holds in the store: the ids it reserved, its
 * leases and its pins. When the client goes (close, crash, kill -9: the
 * kernel closes the socket either way) all are given back.
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
#include "sess_int.h"
#include "tier.h"
#include "tenant.h"
#include "tierd.h"

struct sess *sess_all;
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

/* One request at a time (single thread): a static buffer. */
static _Alignas(16) uint8_t rbuf[KVT_WIRE_MSG_MAX + 64];

/* ---- lifecycle ------------------------------------------------------- */

/* Close s: give back everything it holds in the store at once, and free
 * its memory only at the next sess_reap(). Re-entrant: giving back its
 * reservations can fail another session's durable commit, whose reply can
 * fail and close that one from inside this call, while a caller up the
 * stack (expire's walk, on_read) still holds both; closed sessions stay
 * valid memory, marked closed, their next pointers intact. */
void sess_close(struct sess *s)
{
    struct tierd *d = s->d;
    size_t back;

    if (s->closed)
        return;
    s->closed = true;
    /* off every list first, so that what the give-backs below set off
     * never reaches it */
    if (s->prev)
        s->prev->next = s->next;
    else
        sess_all = s->next;
    if (s->next)
        s->next->prev = s->prev;
    s->dead_next = graveyard;
    graveyard = s;
    s->flush_wait = false;
    back = sess_data_reclaim(s);
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
        sess_data_free(s); /* its request too: no store pointer to it outlives it */
        free(s);
    }
}

void sess_close_all(struct tierd *d)
{
    while (sess_all)
        sess_close(sess_all);
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

/* A client that does not read its replies fills the socket buffer; it is
 * dropped (return -1). */
int sess_reply(struct sess *s, const struct kvt_wire_hdr *req, int status, const void *a,
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
void sess_count_proto_error(struct sess *s)
{
    s->d->proto_errors++;
    if (s->t)
        s->t->proto_errors++;
}

int sess_reply_err(struct sess *s, const struct kvt_wire_hdr *req, int status)
{
    if (status == KVT_EPROTO)
        sess_count_proto_error(s); /* every malformed message is counted, once */
    return sess_reply(s, req, status, NULL, 0, NULL, 0, -1);
}

/* ---- the timer: deadlines of handshakes, pins and waiting requests ---- */

void sess_arm_timer(uint64_t at_ms)
{
    struct itimerspec it = { 0 };

    if (timer_fd < 0 || (timer_at_ms && timer_at_ms <= at_ms))
        return;
    it.it_value.tv_sec = (time_t)(at_ms / 1000);
    it.it_value.tv_nsec = (long)(at_ms % 1000) * 1000000;
    timerfd_settime(timer_fd, TFD_TIMER_ABSTIME, &it, NULL);
    timer_at_ms = at_ms;
}

/* Close every session that sent no HELLO in time, release every pin that
 * expired, answer every request whose deadline passed; re-arm for the
 * next. O(sessions + pins) per expiry. */
static void expire(uint64_t now)
{
    uint64_t next = 0;
    struct sess *s, *nx;

    timer_at_ms = 0;
    for (s = sess_all; s; s = nx) {
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
        next = sess_earliest(next, s->hs_deadline_ms);
        next = sess_data_expire(s, now, next);
    }
    if (next)
        sess_arm_timer(next);
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

/* ---- messages: framing, dispatch ---------------------------------------- */

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
        sess_reply_err(s, &h, KVT_EVERSION);
        return -1;
    }
    if (h.op == KVT_OP_HELLO)
        return sess_op_hello(s, &h, body);
    if (!s->hello)
        return sess_reply_err(s, &h, KVT_EPROTO);
    switch (h.op) {
    case KVT_OP_NS_OPEN:
        return sess_op_ns_open(s, &h, body);
    case KVT_OP_LOOKUP:
    case KVT_OP_PUT_RESERVE:
    case KVT_OP_PUT_COMMIT:
    case KVT_OP_PUT_ABORT:
    case KVT_OP_GET:
    case KVT_OP_REMOVE:
        return sess_op_keys(s, &h, body);
    case KVT_OP_RELEASE:
        return sess_op_release(s, &h, body);
    case KVT_OP_UNPIN:
        return sess_op_unpin(s, &h, body);
    case KVT_OP_STATS:
        return sess_op_stats(s, &h);
    case KVT_OP_HOT_ATTACH:
        return sess_op_hot_attach(s, &h);
    case KVT_OP_NS_LIST:
        return sess_op_ns_list(s, &h, body);
    case KVT_OP_WHY:
        return sess_op_why(s, &h, body);
    case KVT_OP_FLUSH:
        return sess_op_flush(s, &h);
    case KVT_OP_PURGE:
        return sess_op_purge(s, &h, body);
    }
    return sess_reply_err(s, &h, KVT_EPROTO);
}

/* handle(), timed for the metrics: the latency is taken now, or when the
 * deferred reply goes (req_done) if the request waits. */
static int handle_timed(struct sess *s, size_t len)
{
    uint64_t t0 = metrics_req_start(s->d->metrics);
    bool flushing = s->flush_wait;
    struct kvt_wire_hdr h;
    int rc;

    s->armed = NULL;
    rc = handle(s, len);
    if (rc < 0 || !t0)
        return rc;
    if (s->armed && s->armed->kind != SESS_PEND_NONE) {
        s->armed->t0_ns = t0;
    } else if (!flushing && s->flush_wait) {
        s->flush_t0 = t0;
    } else {
        memcpy(&h, rbuf, sizeof(h)); /* handle() checked the framing */
        metrics_req_done(s->d->metrics, h.op, t0);
    }
    return rc;
}

/* A refused peer's message, of len bytes in rbuf: the first is answered with
 * why it was refused, whatever it asked; the session then stays, dropping
 * what else comes, until the peer closes or its handshake deadline passes
 * (expire). Linux's SEQPACKET recv looks at the queue, then at the hang-up:
 * a close just after the reply can land between the two and read as EOF
 * with the reply still queued; and a close with messages unread resets the
 * peer, whose recv then fails before it reads what is queued. -1: drop it
 * now (a malformed first message, a failed reply). */
static int refused(struct sess *s, size_t len)
{
    struct kvt_wire_hdr h;

    if (s->told)
        return 0;
    if (len < sizeof(h))
        return -1;
    memcpy(&h, rbuf, sizeof(h));
    if (h.magic != KVT_WIRE_MAGIC || h.body_len != len - sizeof(h))
        return -1;
    h.flags = 0;
    s->told = true;
    /* left open till the peer closes: a close (or shutdown) now can make its recv see EOF first */
    return sess_reply_err(s, &h, h.version != KVT_WIRE_VERSION ? KVT_EVERSION : s->refuse);
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
        if (s->refuse) {
            if (refused(s, (size_t)r) < 0) {
                sess_close(s);
                return;
            }
            continue;
        }
        /* the buffer holds one byte more than the limit, so that a message
         * over the limit is seen as such even when it fits the buffer */
        if ((m.msg_flags & (MSG_TRUNC | MSG_CTRUNC)) || r > (ssize_t)KVT_WIRE_MSG_MAX ||
            handle_timed(s, (size_t)r) < 0) {
            if (s->closed)
                return; /* closed meanwhile, from a store callback */
            sess_count_proto_error(s);
            if (s->d->verbose)
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
        struct sess *o = sess_all;

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

/* A session for the connection fd of a peer with credentials cr, on l and
 * the session list; refuse != 0: it is told so at its first message, else it
 * is a client of tenant t. NULL (fd dropped): out of memory. */
static struct sess *sess_new(struct tierd *d, struct ev_loop *l, int fd,
                             const struct ucred *cr, struct tenant *t, int refuse)
{
    struct sess *s = calloc(1, sizeof(*s));

    if (!s || ev_add(l, fd, on_read, s) < 0) {
        free(s);
        drop(fd);
        return NULL;
    }
    s->d = d;
    s->fd = fd;
    s->id = new_sess_id();
    if (getrandom(&s->pin_seq, sizeof(s->pin_seq), GRND_NONBLOCK) != sizeof(s->pin_seq))
        s->pin_seq = (uint32_t)tierd_now_ms(); /* (no entropy yet at boot) */
    if (getrandom(&s->lease_seq, sizeof(s->lease_seq), GRND_NONBLOCK) != sizeof(s->lease_seq))
        s->lease_seq = tierd_now_ms() << 20; /* (no entropy yet at boot) */
    s->uid = cr->uid;
    s->pid = cr->pid;
    s->refuse = refuse;
    if (d->handshake_ms) {
        s->hs_deadline_ms = tierd_now_ms() + d->handshake_ms;
        sess_arm_timer(s->hs_deadline_ms);
    }
    s->next = sess_all;
    if (sess_all)
        sess_all->prev = s;
    sess_all = s;
    if (refuse) {
        refusing++;
        return s;
    }
    s->t = t;
    t->clients++;
    d->clients++;
    if (d->verbose)
        tierd_log("session %u: pid %d uid %d connected, tenant %s", s->id, (int)cr->pid,
                  (int)cr->uid, t->name);
    return s;
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
        sess_new(d, l, fd, &cr, t, refuse);
    }
}
