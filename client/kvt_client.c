/* SPDX-License-Identifier: MIT */
/*
 * kvt_client.c - libkvtier's connection to tierd: the socket, HELLO and the
 * warm pool's mapping, the hot pool's attach, and the request/reply pairs
 * over a SOCK_SEQPACKET socket that every other call is made of (kvt_int.h).
 *
 * Every call is synchronous except release, which is sent without asking
 * for a reply (the daemon handles messages in order, so a later call sees
 * its effect), and a started commit (kvt_put_commit_start), whose reply is
 * kept in its slot when it comes while another call waits. Replies are
 * matched by request id; a reply that arrives after its call timed out is
 * skipped. Once the connection fails the client is
 * dead for good (sticky): every call returns KVT_EDISCONNECTED.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kvt_int.h"
#include "kvt_wire.h"
#include "kvtier.h"

static _Atomic uint64_t next_tag = 1; /* kvt_client.tag */

const char *kvt_default_socket(void)
{
    const char *s = getenv("KVTIER_SOCKET");

    return s && *s ? s : KVT_DEFAULT_SOCKET;
}

/* ---- messages -------------------------------------------------------- */

int kvt_send_req(kvt_client *c, uint16_t op, uint32_t flags, struct iovec *iov, int niov)
{
    struct kvt_wire_hdr h = {
        .magic = KVT_WIRE_MAGIC, .version = KVT_WIRE_VERSION, .op = op, .flags = flags,
    };
    struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)niov };
    size_t len = 0;

    if (c->dead)
        return KVT_EDISCONNECTED;
    if (++c->req_id == 0) /* 0 marks a free commit slot: never an id */
        ++c->req_id;
    h.req_id = c->req_id;
    for (int i = 1; i < niov; i++)
        len += iov[i].iov_len;
    h.body_len = (uint32_t)len;
    iov[0].iov_base = &h;
    iov[0].iov_len = sizeof(h);
    while (sendmsg(c->fd, &m, MSG_NOSIGNAL) < 0) {
        if (errno == EINTR)
            continue;
        return kvt_fail(c, errno == EMSGSIZE ? -EMSGSIZE : KVT_EDISCONNECTED);
    }
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* Try to receive without sleeping for up to spin_us. A reply to a small
 * request comes back within tens of microseconds; sleeping in poll() and
 * being woken on another CPU costs about as much again, which is what an
 * engine moving batches of 64 KiB blocks would feel. -1/EAGAIN: go sleep. */
static ssize_t spin_recv(kvt_client *c, struct msghdr *m)
{
    uint64_t end = c->spin_us > 0 ? now_ns() + (uint64_t)c->spin_us * 1000u : 0;

    for (;;) {
        ssize_t r = recvmsg(c->fd, m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);

        if (r >= 0 || errno != EAGAIN || now_ns() >= end)
            return r;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#elif defined(__aarch64__)
        __asm__ __volatile__("yield");
#endif
    }
}

static void close_fd(int fd)
{
    if (fd >= 0)
        close(fd);
}

/* A started commit's reply (h, its body in c->rbuf) into its slot cs:
 * the count or the error. A count above the keys sent breaks the protocol. */
static int keep_commit(kvt_client *c, struct kvt_commit_slot *cs, const struct kvt_wire_hdr *h)
{
    struct kvt_wire_count_rep rep;

    if (h->version != KVT_WIRE_VERSION || h->op != KVT_OP_PUT_COMMIT || h->status > 0)
        return kvt_fail(c, KVT_EPROTO);
    cs->done = true;
    if (h->status < 0) {
        cs->rc = h->status;
        return 0;
    }
    if (h->body_len != sizeof(rep))
        return kvt_fail(c, KVT_EPROTO);
    memcpy(&rep, kvt_reply_body(c), sizeof(rep));
    if (rep.count > cs->n)
        return kvt_fail(c, KVT_EPROTO);
    cs->rc = (int)rep.count;
    return 0;
}

/* The started commit request id names, or NULL. */
static struct kvt_commit_slot *commit_of(kvt_client *c, uint32_t id)
{
    for (int i = 0; i < KVT_WIRE_COMMITS_MAX; i++)
        if (c->commits[i].req_id == id && id && !c->commits[i].done)
            return &c->commits[i];
    return NULL;
}

/* Wait for the reply to request want; its body lands in c->rbuf after the
 * header. fd_out (may be NULL) receives a passed descriptor. Replies to
 * started commits go to their slots on the way. Returns the reply's status
 * (0 or negative) and the body length in *blen. */
static int recv_id(kvt_client *c, uint32_t want, uint16_t op, uint32_t *blen, int *fd_out)
{
    for (;;) {
        int got;
        union {
            char buf[CMSG_SPACE(sizeof(int))];
            struct cmsghdr align;
        } cm;
        struct iovec iov = { c->rbuf, sizeof(c->rbuf) };
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.buf,
                            .msg_controllen = sizeof(cm.buf) };
        struct pollfd p = { .fd = c->fd, .events = POLLIN };
        struct kvt_wire_hdr h;
        ssize_t r = spin_recv(c, &m);

        if (r < 0 && errno == EAGAIN) {
            int pr = poll(&p, 1, c->timeout_ms);

            if (pr < 0 && errno == EINTR)
                continue;
            if (pr == 0)
                return kvt_fail(c, -ETIMEDOUT); /* a daemon that stopped answering */
            r = recvmsg(c->fd, &m, MSG_CMSG_CLOEXEC);
        }
        if (r < 0 && errno == EINTR)
            continue;
        /* a descriptor may come with any message, even an empty or a bad
         * one: taken first, so that every path below closes or keeps it */
        got = -1;
        if (r >= 0 && m.msg_controllen > 0) {
            struct cmsghdr *ch = CMSG_FIRSTHDR(&m);

            if (ch && ch->cmsg_level == SOL_SOCKET && ch->cmsg_type == SCM_RIGHTS &&
                ch->cmsg_len >= CMSG_LEN(sizeof(int)))
                memcpy(&got, CMSG_DATA(ch), sizeof(got));
        }
        if (r <= 0) {
            close_fd(got);
            return kvt_fail(c, KVT_EDISCONNECTED);
        }
        if ((size_t)r < sizeof(h) || r > (ssize_t)KVT_WIRE_MSG_MAX || (m.msg_flags & MSG_TRUNC)) {
            close_fd(got);
            return kvt_fail(c, KVT_EPROTO);
        }
        memcpy(&h, c->rbuf, sizeof(h));
        if (h.magic != KVT_WIRE_MAGIC || h.body_len != (size_t)r - sizeof(h)) {
            close_fd(got);
            return kvt_fail(c, KVT_EPROTO);
        }
        if (h.req_id != want) {
            struct kvt_commit_slot *cs = commit_of(c, h.req_id);

            close_fd(got); /* a started commit's, or the late answer to a call that
                              timed out: not this call's */
            if (cs && keep_commit(c, cs, &h) < 0)
                return KVT_EPROTO;
            continue;
        }
        /* only the answer to this call may hand over a descriptor */
        if (fd_out && *fd_out < 0)
            *fd_out = got;
        else
            close_fd(got);
        if (h.version != KVT_WIRE_VERSION || h.op != op)
            return kvt_fail(c, h.status == KVT_EVERSION ? KVT_EVERSION : KVT_EPROTO);
        *blen = h.body_len;
        if (h.status > 0)
            return kvt_fail(c, KVT_EPROTO); /* statuses are 0 or negative */
        return h.status;
    }
}

static int recv_rep(kvt_client *c, uint16_t op, uint32_t *blen, int *fd_out)
{
    return recv_id(c, c->req_id, op, blen, fd_out);
}

int kvt_commit_recv(kvt_client *c, struct kvt_commit_slot *cs)
{
    struct kvt_wire_hdr h;
    uint32_t blen;
    int rc;

    if (cs->done)
        return 0;
    if (c->dead)
        return KVT_EDISCONNECTED;
    rc = recv_id(c, cs->req_id, KVT_OP_PUT_COMMIT, &blen, NULL);
    if (c->dead)
        return rc < 0 ? rc : KVT_EDISCONNECTED; /* the connection failed, not the commit */
    memcpy(&h, c->rbuf, sizeof(h)); /* recv_id checked the framing */
    return keep_commit(c, cs, &h);
}

int kvt_rpc(kvt_client *c, uint16_t op, const void *req, size_t len, uint32_t *blen,
            int *fd_out)
{
    struct iovec iov[2] = { { 0 }, { (void *)req, len } };
    int rc = kvt_send_req(c, op, 0, iov, len ? 2 : 1);

    return rc < 0 ? rc : recv_rep(c, op, blen, fd_out);
}

int kvt_keys_send(kvt_ns *ns, uint16_t op, uint32_t flags, const kvt_key *keys, size_t n)
{
    struct kvt_wire_keys_req r = {
        .ns_id = ns->id, .n = (uint32_t)n, .block_bytes = ns->block_bytes, .flags = flags,
    };
    struct iovec iov[3] = { { 0 }, { &r, sizeof(r) }, { (void *)keys, n * KVT_KEY_BYTES } };

    if (n > KVT_BATCH_MAX)
        return -E2BIG;
    if ((n > 0 && !keys) || ns->hy)
        return -EINVAL; /* a hybrid handle's blocks live in its groups' namespaces */
    return kvt_send_req(ns->c, op, 0, iov, 3);
}

int kvt_keys_rpc(kvt_ns *ns, uint16_t op, uint32_t flags, const kvt_key *parent,
                 const uint64_t *pin_id, uint32_t hold_ms, const kvt_key *keys, size_t n,
                 uint32_t *blen)
{
    struct kvt_wire_keys_req r = {
        .ns_id = ns->id, .n = (uint32_t)n, .block_bytes = ns->block_bytes, .flags = flags,
        .deadline_ms = op == KVT_OP_GET ? ns->deadline_ms : pin_id ? hold_ms : 0,
    };
    struct iovec iov[5];
    int niov = 0, rc;

    if (n > KVT_BATCH_MAX)
        return -E2BIG;
    if ((n > 0 && !keys) || ns->hy)
        return -EINVAL; /* a hybrid handle's blocks live in its groups' namespaces */
    iov[niov++] = (struct iovec){ 0 }; /* the header, filled by kvt_send_req */
    iov[niov++] = (struct iovec){ &r, sizeof(r) };
    if (parent) {
        r.flags |= KVT_WIRE_KF_PARENT;
        iov[niov++] = (struct iovec){ (void *)parent, KVT_KEY_BYTES };
    }
    if (pin_id) {
        r.flags |= KVT_WIRE_KF_PIN;
        iov[niov++] = (struct iovec){ (void *)pin_id, sizeof(*pin_id) };
    }
    iov[niov++] = (struct iovec){ (void *)keys, n * KVT_KEY_BYTES };
    rc = kvt_send_req(ns->c, op, 0, iov, niov);
    if (rc < 0)
        return rc;
    return recv_rep(ns->c, op, blen, NULL);
}

/* ---- connection ------------------------------------------------------ */

/* A pool's memfd must hold all the bytes the daemon announced: a slot past
 * the end of the file would map, and then fault (SIGBUS) in the engine. */
static int pool_fits(int fd, uint64_t bytes)
{
    struct stat st;

    if (fstat(fd, &st) < 0)
        return -errno;
    return bytes > 0 && bytes <= (uint64_t)st.st_size ? 0 : KVT_EPROTO;
}

static int hello(kvt_client *c)
{
    struct kvt_wire_hello_req req = { .pid = (uint32_t)getpid() };
    struct kvt_wire_hello_rep rep;
    uint32_t blen;
    int fd = -1, rc = kvt_rpc(c, KVT_OP_HELLO, &req, sizeof(req), &blen, &fd);

    if (rc == 0 && (blen != sizeof(rep) || fd < 0))
        rc = KVT_EPROTO;
    if (rc < 0)
        goto out_close;
    memcpy(&rep, kvt_reply_body(c), sizeof(rep));
    rc = pool_fits(fd, rep.pool_bytes);
    if (rc < 0)
        goto out_close;
    c->base = mmap(NULL, rep.pool_bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (c->base == MAP_FAILED) {
        rc = -errno;
        c->base = NULL;
        goto out_close;
    }
    c->pool_bytes = rep.pool_bytes;
    rc = 0;
out_close:
    if (fd >= 0)
        close(fd); /* the mapping keeps the pool alive */
    return rc;
}

/* The reply bound a client starts with: $KVTIER_TIMEOUT_MS, else 30 s */
static int env_timeout_ms(void)
{
    const char *tmo = getenv("KVTIER_TIMEOUT_MS");

    return tmo && atoi(tmo) > 0 ? atoi(tmo) : 30000;
}

void kvt_set_timeout(kvt_client *c, uint32_t ms)
{
    if (c)
        c->timeout_ms = ms ? (int)(ms < INT_MAX ? ms : INT_MAX) : env_timeout_ms();
}

int kvt_connect(const char *path, kvt_client **out)
{
    return kvt_connect_timeout(path, 0, out);
}

int kvt_connect_timeout(const char *path, uint32_t timeout_ms, kvt_client **out)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    const char *spin = getenv("KVTIER_SPIN_US");
    kvt_client *c;
    int rc;

    if (!out)
        return -EINVAL;
    if (!path)
        path = kvt_default_socket();
    if (strlen(path) >= sizeof(a.sun_path))
        return -ENAMETOOLONG;
    strcpy(a.sun_path, path);
    c = calloc(1, sizeof(*c));
    if (!c)
        return -ENOMEM;
    /* request ids start alike in every client: a commit handle also names its client */
    c->tag = atomic_fetch_add(&next_tag, 1);
    kvt_set_timeout(c, timeout_ms);
    c->spin_us = spin && *spin ? atoi(spin) : 50;
    /* non-blocking for the connect alone: a daemon that stopped accepting
     * with its listen queue full would hold a blocking connect forever
     * (the reply bound starts only after it); a Unix socket's connect then
     * fails at once with EAGAIN (never EINPROGRESS) */
    c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (c->fd < 0) {
        rc = -errno;
        goto out_free;
    }
    if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
        fcntl(c->fd, F_SETFL, fcntl(c->fd, F_GETFL) & ~O_NONBLOCK) < 0) {
        /* a full queue: tierd is not answering, as a reply past its bound */
        rc = errno == EAGAIN ? -ETIMEDOUT : -errno;
        goto out_close;
    }
    rc = hello(c);
    if (rc < 0)
        goto out_close;
    *out = c;
    return 0;
out_close:
    close(c->fd);
out_free:
    free(c);
    return rc;
}

void kvt_close(kvt_client *c)
{
    if (!c)
        return;
    while (c->ns) {
        kvt_ns *n = c->ns;

        c->ns = n->next;
        kvt_hybrid_free(n->hy);
        free(n);
    }
    kvt_gpu_free(c->gpu);
    if (c->hot_kind == KVT_HOT_EMULATED)
        munmap(c->hot_base, c->hot_bytes);
    if (c->hot_kind == KVT_HOT_CUDA)
        kvt_gpu_ipc_close(c->hot_base);
    if (c->base)
        munmap(c->base, c->pool_bytes);
    close(c->fd);
    free(c);
}

/* ---- the hot tier ----------------------------------------------------- */

int kvt_hot_attach(kvt_client *c, kvt_hot_info *info)
{
    struct kvt_wire_hot_rep rep;
    uint32_t blen;
    int fd = -1, rc;

    if (!c)
        return -EINVAL;
    if (!c->hot_kind) {
        rc = kvt_rpc(c, KVT_OP_HOT_ATTACH, NULL, 0, &blen, &fd);
        if (rc < 0)
            goto out;
        memcpy(&rep, kvt_reply_body(c), sizeof(rep) <= blen ? sizeof(rep) : 0);
        if (blen != sizeof(rep) || rep.bytes == 0 ||
            (rep.kind == KVT_HOT_EMULATED) != (fd >= 0) ||
            (rep.kind != KVT_HOT_EMULATED && rep.kind != KVT_HOT_CUDA)) {
            rc = kvt_fail(c, KVT_EPROTO);
            goto out;
        }
        if (rep.kind == KVT_HOT_EMULATED) {
            void *p;

            if ((rc = pool_fits(fd, rep.bytes)) < 0) {
                rc = kvt_fail(c, rc);
                goto out;
            }
            p = mmap(NULL, rep.bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);

            if (p == MAP_FAILED) {
                rc = -errno;
                goto out;
            }
            c->hot_base = p;
        } else {
            void *p;

            if ((rc = kvt_gpu_ipc_open(rep.ipc, sizeof(rep.ipc), rep.device, &p)) < 0)
                goto out;
            c->hot_base = p;
        }
        c->hot_bytes = rep.bytes;
        c->hot_device = rep.device;
        c->hot_kind = rep.kind;
    }
    if (info)
        *info = (kvt_hot_info){ .kind = c->hot_kind, .device = c->hot_device,
                                .bytes = c->hot_bytes, .base = c->hot_base };
    rc = 0;
out:
    if (fd >= 0)
        close(fd); /* the mapping keeps the pool alive */
    return rc;
}
