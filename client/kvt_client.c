/* SPDX-License-Identifier: MIT */
/*
 * kvt_client.c - libkvtier's connection to tierd: HELLO and the pool
 * mapping, namespaces, and the block calls of kvtier.h as request/reply
 * pairs over a SOCK_SEQPACKET socket.
 *
 * Every call is synchronous except release, which is sent without asking
 * for a reply (the daemon handles messages in order, so a later call sees
 * its effect). Replies are matched by request id; a reply that arrives after
 * its call timed out is skipped. Once the connection fails the client is
 * dead for good (sticky): every call returns KVT_EDISCONNECTED.
 */
#include <errno.h>
#include <poll.h>
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

#include "kv_layout.h"
#include "kvk.h"
#include "kvt_int.h"
#include "kvt_wire.h"
#include "kvtier.h"

struct kvt_ns {
    struct kvt_hybrid *hy; /* a hybrid model's handle: its groups (kvt_hybrid.c) */
    kvt_client *c;
    uint32_t id;          /* the daemon's namespace id */
    uint64_t block_bytes;
    uint32_t deadline_ms; /* for gets; 0: wait */
    unsigned hot;         /* KVT_GET_HOT / KVT_GET_PROMOTE for offload and restore */
    struct kvt_ns *next;  /* the client's list, freed by kvt_close */
};

struct kvt_client {
    int fd;
    bool dead;            /* sticky: the connection failed */
    int timeout_ms;       /* per reply; $KVTIER_TIMEOUT_MS, default 30 s */
    int spin_us;          /* busy-poll for a reply this long before sleeping */
    uint32_t req_id;
    uint8_t *base;        /* the warm pool, mapped shared */
    uint64_t pool_bytes;
    uint8_t *hot_base;    /* the hot pool, once attached (device memory for CUDA) */
    uint64_t hot_bytes;
    uint32_t hot_kind;    /* KVT_HOT_*, 0 until attached */
    int32_t hot_device;
    struct kvt_ns *ns;
    struct kvt_gpu *gpu;  /* device state for device caches (kvt_gpu.c), made on use */
    _Alignas(16) uint8_t rbuf[KVT_WIRE_MSG_MAX + 64]; /* last reply */
};

const char *kvt_default_socket(void)
{
    const char *s = getenv("KVTIER_SOCKET");

    return s && *s ? s : KVT_DEFAULT_SOCKET;
}

/* ---- messages -------------------------------------------------------- */

static int fail(kvt_client *c, int err)
{
    c->dead = true;
    return err;
}

static int send_req(kvt_client *c, uint16_t op, uint32_t flags, struct iovec *iov, int niov)
{
    struct kvt_wire_hdr h = {
        .magic = KVT_WIRE_MAGIC, .version = KVT_WIRE_VERSION, .op = op,
        .req_id = ++c->req_id, .flags = flags,
    };
    struct msghdr m = { .msg_iov = iov, .msg_iovlen = (size_t)niov };
    size_t len = 0;

    if (c->dead)
        return KVT_EDISCONNECTED;
    for (int i = 1; i < niov; i++)
        len += iov[i].iov_len;
    h.body_len = (uint32_t)len;
    iov[0].iov_base = &h;
    iov[0].iov_len = sizeof(h);
    while (sendmsg(c->fd, &m, MSG_NOSIGNAL) < 0) {
        if (errno == EINTR)
            continue;
        return fail(c, errno == EMSGSIZE ? -EMSGSIZE : KVT_EDISCONNECTED);
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

/* Wait for the reply to the last request; its body lands in c->rbuf after
 * the header. fd_out (may be NULL) receives a passed descriptor. Returns the
 * reply's status (0 or negative) and the body length in *blen. */
static void close_fd(int fd)
{
    if (fd >= 0)
        close(fd);
}

static int recv_rep(kvt_client *c, uint16_t op, uint32_t *blen, int *fd_out)
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
                return fail(c, -ETIMEDOUT); /* a daemon that stopped answering */
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
            return fail(c, KVT_EDISCONNECTED);
        }
        if ((size_t)r < sizeof(h) || r > (ssize_t)KVT_WIRE_MSG_MAX || (m.msg_flags & MSG_TRUNC)) {
            close_fd(got);
            return fail(c, KVT_EPROTO);
        }
        memcpy(&h, c->rbuf, sizeof(h));
        if (h.magic != KVT_WIRE_MAGIC || h.body_len != (size_t)r - sizeof(h)) {
            close_fd(got);
            return fail(c, KVT_EPROTO);
        }
        if (h.req_id != c->req_id) {
            close_fd(got); /* the late answer to a call that timed out: not ours */
            continue;
        }
        /* only the answer to this call may hand over a descriptor */
        if (fd_out && *fd_out < 0)
            *fd_out = got;
        else
            close_fd(got);
        if (h.version != KVT_WIRE_VERSION || h.op != op)
            return fail(c, h.status == KVT_EVERSION ? KVT_EVERSION : KVT_EPROTO);
        *blen = h.body_len;
        if (h.status > 0)
            return fail(c, KVT_EPROTO); /* statuses are 0 or negative */
        return h.status;
    }
}

static const uint8_t *body(const kvt_client *c)
{
    return c->rbuf + sizeof(struct kvt_wire_hdr);
}

/* A keys request: header, kvt_wire_keys_req, optional parent, optional pin
 * id (a pinning lookup's, held hold_ms), keys. */
static int keys_rpc(kvt_ns *ns, uint16_t op, uint32_t flags, const kvt_key *parent,
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
    iov[niov++] = (struct iovec){ 0 }; /* the header, filled by send_req */
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
    rc = send_req(ns->c, op, 0, iov, niov);
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

/* One request of op with a body of len bytes (may be 0), and its reply:
 * recv_rep's return, the reply's body in c->rbuf (*blen bytes), a passed
 * descriptor in *fd_out when it is not NULL. */
static int rpc(kvt_client *c, uint16_t op, const void *req, size_t len, uint32_t *blen,
               int *fd_out)
{
    struct iovec iov[2] = { { 0 }, { (void *)req, len } };
    int rc = send_req(c, op, 0, iov, len ? 2 : 1);

    return rc < 0 ? rc : recv_rep(c, op, blen, fd_out);
}

static int hello(kvt_client *c)
{
    struct kvt_wire_hello_req req = { .pid = (uint32_t)getpid() };
    struct kvt_wire_hello_rep rep;
    uint32_t blen;
    int fd = -1, rc = rpc(c, KVT_OP_HELLO, &req, sizeof(req), &blen, &fd);

    if (rc == 0 && (blen != sizeof(rep) || fd < 0))
        rc = KVT_EPROTO;
    if (rc < 0)
        goto out_close;
    memcpy(&rep, body(c), sizeof(rep));
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

int kvt_connect(const char *path, kvt_client **out)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    const char *tmo = getenv("KVTIER_TIMEOUT_MS");
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
    c->timeout_ms = tmo && atoi(tmo) > 0 ? atoi(tmo) : 30000;
    c->spin_us = spin && *spin ? atoi(spin) : 50;
    c->fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (c->fd < 0) {
        rc = -errno;
        goto out_free;
    }
    if (connect(c->fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        rc = -errno;
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

static void put_str(char *dst, size_t cap, const char *s)
{
    if (s)
        memcpy(dst, s, strlen(s) + 1 <= cap ? strlen(s) + 1 : 0);
}

static void le32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

/*
 * Design note: tierd keys a namespace by the bytes of its descriptor
 * (tierd/tenant.c) and has no field for a pipeline stage or an engine's
 * variant (KV scales and the like). Rather than widen the daemon's
 * descriptor, the client folds them into it: with a stage (pp_size above
 * 1), a variant, or a '#' in the caller's layout, the layout on the wire
 * is the layout's start (at most LAYOUT_KEPT bytes, cut between UTF-8
 * characters), '#', and hex digits of a SHA-256 over the whole identity
 * (layout, stage, variant) to fill the field: 12 digits (48 bits) at
 * least, the odds of two of a tenant's few namespaces meeting beyond any
 * concern. A descriptor with none of them travels as it always did, so its
 * namespace, and its blocks on disk, stay the same.
 */
#define LAYOUT_HEX_MIN 12
#define LAYOUT_KEPT (KVT_WIRE_LAYOUT_MAX - 2 - LAYOUT_HEX_MIN)

static int wire_layout(const kvt_model *m, uint32_t pp_size, char *out)
{
    static const char tag[] = "kvtier namespace 1"; /* the encoding's version, NUL too */
    static const char digits[] = "0123456789abcdef";
    const char *layout = m->layout ? m->layout : "";
    size_t len = strlen(layout), kept = len < LAYOUT_KEPT ? len : LAYOUT_KEPT, nhex;
    uint8_t stage[16];
    const void *parts[4] = { tag, layout, stage, m->variant };
    size_t lens[4] = { sizeof(tag), len + 1, sizeof(stage), m->variant_len };
    kvt_key h;
    int rc;

    if (pp_size == 1 && m->variant_len == 0 && !strchr(layout, '#')) {
        memcpy(out, layout, len + 1);
        return 0;
    }
    le32(stage, m->pp_rank);
    le32(stage + 4, pp_size);
    le32(stage + 8, (uint32_t)m->variant_len);
    le32(stage + 12, (uint32_t)((uint64_t)m->variant_len >> 32));
    if ((rc = kvt_sha256_parts(parts, lens, m->variant_len ? 4 : 3, &h)) < 0)
        return rc;
    while (kept > 0 && kept < len && ((uint8_t)layout[kept] & 0xc0) == 0x80)
        kept--; /* never half a character: tierctl prints the layout */
    memcpy(out, layout, kept);
    out[kept] = '#';
    nhex = KVT_WIRE_LAYOUT_MAX - 2 - kept;
    for (size_t i = 0; i < nhex; i++)
        out[kept + 1 + i] = digits[(h.b[i / 2] >> (i % 2 ? 0 : 4)) & 0xf];
    out[kept + 1 + nhex] = '\0';
    return 0;
}

int kvt_ns_open(kvt_client *c, const kvt_model *m, kvt_ns **out)
{
    struct kvt_wire_ns_req req = { 0 };
    struct kvt_wire_ns_rep rep;
    uint32_t blen, pp_size;
    kvt_ns *ns;
    int rc;

    if (!c || !m || !out || !m->model_id || !*m->model_id ||
        strlen(m->model_id) >= KVT_WIRE_MODEL_ID_MAX ||
        (m->dtype && strlen(m->dtype) >= KVT_WIRE_DTYPE_MAX) ||
        (m->layout && strlen(m->layout) >= KVT_WIRE_LAYOUT_MAX) || m->block_tokens == 0 ||
        m->block_bytes == 0 || m->block_bytes > KVT_BLOCK_MAX || m->tp_size == 0 ||
        m->tp_rank >= m->tp_size)
        return -EINVAL;
    pp_size = m->pp_size ? m->pp_size : 1;
    if (m->pp_rank >= pp_size || m->variant_len > KVT_VARIANT_MAX ||
        (m->variant_len && !m->variant))
        return -EINVAL;
    req.block_bytes = m->block_bytes;
    req.block_tokens = m->block_tokens;
    req.tp_rank = m->tp_rank;
    req.tp_size = m->tp_size;
    put_str(req.model_id, sizeof(req.model_id), m->model_id);
    put_str(req.dtype, sizeof(req.dtype), m->dtype);
    if ((rc = wire_layout(m, pp_size, req.layout)) < 0)
        return rc;
    rc = rpc(c, KVT_OP_NS_OPEN, &req, sizeof(req), &blen, NULL);
    if (rc < 0)
        return rc;
    if (blen != sizeof(rep))
        return fail(c, KVT_EPROTO);
    memcpy(&rep, body(c), sizeof(rep));
    ns = calloc(1, sizeof(*ns));
    if (!ns)
        return -ENOMEM;
    ns->c = c;
    ns->id = rep.ns_id;
    ns->block_bytes = m->block_bytes;
    ns->next = c->ns;
    c->ns = ns;
    *out = ns;
    return 0;
}

uint64_t kvt_ns_block_bytes(const kvt_ns *ns)
{
    return ns->block_bytes;
}

kvt_ns *kvt_ns_new_hybrid(kvt_client *c, struct kvt_hybrid *hy)
{
    kvt_ns *ns = calloc(1, sizeof(*ns));

    if (!ns)
        return NULL;
    ns->c = c;
    ns->hy = hy;
    ns->next = c->ns;
    c->ns = ns;
    return ns;
}

struct kvt_hybrid *kvt_ns_hybrid(const kvt_ns *ns)
{
    return ns->hy;
}

void kvt_ns_set_deadline(kvt_ns *ns, uint32_t ms)
{
    ns->deadline_ms = ms;
    if (ns->hy)
        kvt_hybrid_set_deadline(ns->hy, ms);
}

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

/* ---- the hot tier ----------------------------------------------------- */

int kvt_hot_attach(kvt_client *c, kvt_hot_info *info)
{
    struct kvt_wire_hot_rep rep;
    uint32_t blen;
    int fd = -1, rc;

    if (!c)
        return -EINVAL;
    if (!c->hot_kind) {
        rc = rpc(c, KVT_OP_HOT_ATTACH, NULL, 0, &blen, &fd);
        if (rc < 0)
            goto out;
        memcpy(&rep, body(c), sizeof(rep) <= blen ? sizeof(rep) : 0);
        if (blen != sizeof(rep) || rep.bytes == 0 ||
            (rep.kind == KVT_HOT_EMULATED) != (fd >= 0) ||
            (rep.kind != KVT_HOT_EMULATED && rep.kind != KVT_HOT_CUDA)) {
            rc = fail(c, KVT_EPROTO);
            goto out;
        }
        if (rep.kind == KVT_HOT_EMULATED) {
            void *p;

            if ((rc = pool_fits(fd, rep.bytes)) < 0) {
                rc = fail(c, rc);
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

int kvt_ns_set_hot(kvt_ns *ns, unsigned flags)
{
    int rc;

    if (!ns || (flags & ~(KVT_GET_HOT | KVT_GET_PROMOTE)))
        return -EINVAL;
    if (flags && (rc = kvt_hot_attach(ns->c, NULL)) < 0)
        return rc;
    ns->hot = flags;
    return 0;
}

/* ---- blocks ---------------------------------------------------------- */

/* One batch of a lookup; with pin, a pinning one (pin->id 0: a new pin,
 * else extended). Checks the reply; *hits and *pinned from it. */
static int lookup_batch(kvt_ns *ns, const kvt_key *keys, size_t k, uint32_t wf, kvt_pin *pin,
                        uint32_t hold_ms, uint8_t *tiers, uint32_t *hits, uint32_t *pinned)
{
    struct kvt_wire_lookup_rep rep;
    struct kvt_wire_pin_rep pr = { 0 };
    size_t head = sizeof(rep) + (pin ? sizeof(pr) : 0);
    uint32_t blen;
    int rc = keys_rpc(ns, KVT_OP_LOOKUP, wf, NULL, pin ? &pin->id : NULL, hold_ms, keys, k,
                      &blen);

    if (rc < 0)
        return rc;
    if (blen != head + k)
        return fail(ns->c, KVT_EPROTO);
    memcpy(&rep, body(ns->c), sizeof(rep));
    if (pin)
        memcpy(&pr, body(ns->c) + sizeof(rep), sizeof(pr));
    if (rep.n != k || rep.hits > k || pr.pinned > rep.hits || (pr.pinned && !pr.pin_id) ||
        (pin && pin->id && pr.pinned && pr.pin_id != pin->id))
        return fail(ns->c, KVT_EPROTO);
    /* callers index arrays by tier: only KVT_TIER_* values get through */
    for (size_t i = 0; i < k; i++)
        if (body(ns->c)[head + i] >= KVT_TIER_COUNT)
            return fail(ns->c, KVT_EPROTO);
    if (tiers)
        memcpy(tiers, body(ns->c) + head, k);
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

    return send_req(c, op, KVT_WIRE_F_NOREPLY, iov, 2);
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
        rc = keys_rpc(ns, KVT_OP_PUT_RESERVE, hot ? KVT_WIRE_KF_HOT : 0, parent, NULL, 0, keys,
                      n, &blen);
        if (rc != -EAGAIN || waited_us >= KVT_PUT_WAIT_MS * 1000u)
            break;
        if (step_us > 20000)
            step_us = 20000;
        usleep(step_us);
    }
    if (rc < 0)
        return rc;
    memcpy(&rep, body(ns->c), sizeof(rep) <= blen ? sizeof(rep) : 0);
    if (blen != sizeof(rep) + n * sizeof(uint64_t) || rep.n != n || rep.count > n)
        return fail(ns->c, KVT_EPROTO);
    offs = body(ns->c) + sizeof(rep);
    for (size_t i = 0; i < n; i++) {
        uint64_t off;

        memcpy(&off, offs + i * sizeof(off), sizeof(off));
        slots[i] = NULL;
        if (off != KVT_WIRE_NO_SLOT &&
            (hot ? hot_slot_ptr(ns, off, &slots[i]) : slot_ptr(ns, off, &slots[i])) < 0)
            return fail(ns->c, KVT_EPROTO);
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
    rc = keys_rpc(ns, op, flags, NULL, NULL, 0, keys, n, &blen);
    if (rc < 0)
        return rc;
    if (blen != sizeof(rep))
        return fail(ns->c, KVT_EPROTO);
    memcpy(&rep, body(ns->c), sizeof(rep));
    /* a count of keys among n: more would be a lie, and past INT_MAX negative */
    if (rep.count > n)
        return fail(ns->c, KVT_EPROTO);
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
    rc = keys_rpc(ns, KVT_OP_GET, wf, NULL, NULL, 0, keys, n, &blen);
    if (rc < 0)
        return rc;
    memcpy(&rep, body(ns->c), sizeof(rep) <= blen ? sizeof(rep) : 0);
    if (blen < sizeof(rep) || rep.hits > n ||
        blen != sizeof(rep) + rep.hits * (sizeof(uint64_t) + hot) ||
        (rep.hits > 0) != (rep.lease_id != 0))
        return fail(ns->c, KVT_EPROTO);
    offs = body(ns->c) + sizeof(rep);
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
            return fail(ns->c, KVT_EPROTO);
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

int kvt_stats_get(kvt_client *c, kvt_stats *out)
{
    uint32_t blen;
    int rc;

    if (!c || !out)
        return -EINVAL;
    rc = rpc(c, KVT_OP_STATS, NULL, 0, &blen, NULL);
    if (rc < 0)
        return rc;
    if (blen != sizeof(*out))
        return fail(c, KVT_EPROTO);
    memcpy(out, body(c), sizeof(*out));
    return out->version == KVT_STATS_VERSION ? 0 : KVT_EVERSION;
}

/* ---- operators -------------------------------------------------------- */

const char *kvt_miss_cause_name(int cause)
{
    static const char *const name[KVT_MISS_CAUSES] = {
        "never", "dropped", "evicted", "checksum", "io_error", "removed", "aborted",
        "writing", "broken_chain",
    };

    return cause >= 0 && cause < KVT_MISS_CAUSES ? name[cause] : "?";
}

/* One request with a small body; the reply's body lands in c->rbuf. */
static int admin_rpc(kvt_client *c, uint16_t op, const void *req, size_t len, uint32_t *blen)
{
    return c ? rpc(c, op, req, len, blen, NULL) : -EINVAL;
}

int kvt_admin_namespaces(kvt_client *c, kvt_ns_info *out, size_t cap)
{
    /* as many as fit one reply; then ask again from where it stopped */
    struct kvt_wire_ns_list_req req = {
        .start = 1,
        .max = (KVT_WIRE_MSG_MAX - sizeof(struct kvt_wire_ns_list_rep)) / sizeof(kvt_ns_info),
    };
    size_t count = 0;

    if (!c || (cap && !out))
        return -EINVAL;
    do {
        struct kvt_wire_ns_list_rep rep;
        uint32_t blen;
        int rc = admin_rpc(c, KVT_OP_NS_LIST, &req, sizeof(req), &blen);

        if (rc < 0)
            return rc;
        memcpy(&rep, body(c), sizeof(rep) <= blen ? sizeof(rep) : 0);
        if (blen < sizeof(rep) || rep.n > req.max ||
            blen != sizeof(rep) + rep.n * sizeof(kvt_ns_info) ||
            (rep.next && rep.next <= req.start))
            return fail(c, KVT_EPROTO);
        for (uint32_t i = 0; i < rep.n; i++, count++)
            if (count < cap)
                memcpy(&out[count], body(c) + sizeof(rep) + i * sizeof(kvt_ns_info),
                       sizeof(kvt_ns_info));
        req.start = rep.next;
    } while (req.start);
    return count > INT32_MAX ? INT32_MAX : (int)count;
}

int kvt_admin_why(kvt_client *c, const kvt_key *key, kvt_key_story *out, size_t cap)
{
    struct kvt_wire_why_rep rep;
    uint32_t blen;
    int rc;

    if (!c || !key || (cap && !out))
        return -EINVAL;
    rc = admin_rpc(c, KVT_OP_WHY, key, KVT_KEY_BYTES, &blen);
    if (rc < 0)
        return rc;
    memcpy(&rep, body(c), sizeof(rep) <= blen ? sizeof(rep) : 0);
    if (blen < sizeof(rep) || blen != sizeof(rep) + (size_t)rep.n * sizeof(kvt_key_story))
        return fail(c, KVT_EPROTO);
    for (uint32_t i = 0; i < rep.n && i < cap; i++)
        memcpy(&out[i], body(c) + sizeof(rep) + i * sizeof(kvt_key_story),
               sizeof(kvt_key_story));
    return (int)rep.n;
}

int kvt_admin_flush(kvt_client *c)
{
    uint32_t blen;
    int rc = admin_rpc(c, KVT_OP_FLUSH, NULL, 0, &blen);

    if (rc == 0 && blen != 0)
        return fail(c, KVT_EPROTO);
    return rc;
}

int kvt_admin_purge(kvt_client *c, uint32_t ns_id)
{
    struct kvt_wire_purge_req req = { .ns_id = ns_id };
    struct kvt_wire_count_rep rep;
    uint32_t blen;
    int rc = admin_rpc(c, KVT_OP_PURGE, &req, sizeof(req), &blen);

    if (rc < 0)
        return rc;
    if (blen != sizeof(rep))
        return fail(c, KVT_EPROTO);
    memcpy(&rep, body(c), sizeof(rep));
    return rep.count > INT32_MAX ? INT32_MAX : (int)rep.count;
}

const char *kvt_strerror(int err)
{
    switch (err) {
    case 0: return "success";
    case KVT_EPROTO: return "malformed or truncated message";
    case KVT_EVERSION: return "client and tierd speak different protocol versions";
    case KVT_ENONS: return "unknown namespace";
    case KVT_EBLOCKSIZE: return "block size differs from the namespace's";
    case KVT_EDISCONNECTED: return "tierd closed the connection";
    case -EBUSY: return "busy: too many leases held (by this client, or by its tenant: its "
                        "lease_bytes), or the same kind of request still running: release "
                        "some leases, or wait for it";
    case -EACCES: return "permission denied: the socket's mode or group keeps this user out, "
                         "or no tenant of tierd admits it (its uid/gid)";
    case -EUSERS: return "tierd has as many clients as it takes (--max-clients, or the "
                         "tenant's max_clients)";
    case -ENOSPC: return "no room: the warm pool is full of leased or reserved blocks";
    case -EAGAIN: return "no room yet: the warm pool is full of blocks still being written "
                         "to disk; retry shortly";
    case -ENODATA: return "a block of the batch is not stored (deduplicated against a put "
                          "that was aborted or evicted since): put it again";
    case -E2BIG: return "batch too large (more than KVT_BATCH_MAX keys)";
    case -EFBIG: return "block larger than the warm pool's largest slot";
    case -ENOENT: return "tierd is not running at that socket path (no such file)";
    case -ECONNREFUSED: return "tierd is not running (connection refused)";
    case -ETIMEDOUT: return "tierd did not answer in time";
    }
    if (err < 0 && err > -4096)
        return strerror(-err);
    return "unknown error";
}

/* ---- offload and restore ------------------------------------------------ */

/* The checks of offload and restore before anything moves; a restore's ids
 * must be distinct (two blocks cannot be restored into one engine block). */
static int layout_ok(const kvt_ns *ns, const struct kvk_layout *l, const int64_t *ids, size_t n,
                     void *stream, bool scatter)
{
    int rc;

    if (!ns || !l || (n && !ids))
        return -EINVAL;
    if (stream && !kvt_gpu_built())
        return -EOPNOTSUPP; /* device caches need the CUDA build's kernels */
    rc = kvk_layout_check(l);
    if (rc < 0)
        return rc;
    if (kvk_block_bytes(l) != ns->block_bytes)
        return KVT_EBLOCKSIZE;
    return scatter ? kvk_check_scatter_ids(l, ids, n) : kvk_check_ids(l, ids, n);
}

/* Gather (offload) or scatter (restore) m blocks: the CPU reference for a
 * cache in host memory, the CUDA kernels for one on a device stream. */
static int move_blocks(kvt_ns *ns, bool gather, const struct kvk_layout *l, const int64_t *ids,
                       size_t m, void *const *slots, const uint8_t *tiers, void *stream)
{
    if (stream)
        return kvt_gpu_move(&ns->c->gpu, ns->c->base, ns->c->pool_bytes, gather, l, ids, m,
                            slots, tiers, stream);
    return gather ? kvk_gather_ref(l, ids, m, slots)
                  : kvk_scatter_ref(l, (const void *const *)slots, ids, m);
}

/* Whether offload and restore go through hot for this call: the namespace
 * asked for it, and the pool is the same kind of memory as the cache (the
 * kernels read and write one kind per call). */
static bool use_hot(const kvt_ns *ns, void *stream)
{
    uint32_t k = ns->c->hot_kind;

    return (ns->hot & (KVT_GET_HOT | KVT_GET_PROMOTE)) &&
           (stream ? k == KVT_HOT_CUDA : k == KVT_HOT_EMULATED);
}

int kvt_offload(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                const struct kvk_layout *layout, const int64_t *block_ids, void *stream)
{
    void *slots[KVT_BATCH_MAX];
    int64_t ids[KVT_BATCH_MAX];
    uint8_t tiers[KVT_BATCH_MAX];
    uint8_t where = KVT_TIER_WARM;
    size_t m = 0;
    int rc = layout_ok(ns, layout, block_ids, n, stream, false);

    if (rc < 0)
        return rc;
    if (n > KVT_BATCH_MAX)
        return -E2BIG;
    rc = -ENOSPC;
    if (use_hot(ns, stream) && (ns->hot & KVT_GET_HOT)) {
        rc = kvt_put_reserve_flags(ns, parent, keys, n, slots, KVT_RESERVE_HOT);
        where = KVT_TIER_HOT;
    }
    if (rc == -ENOSPC) { /* hot is full (its mover makes room): warm this time */
        rc = kvt_put_reserve(ns, parent, keys, n, slots);
        where = KVT_TIER_WARM;
    }
    if (rc <= 0)
        return rc;
    memset(tiers, where, n);
    /* only the blocks that got a slot: the others are stored already */
    for (size_t i = 0; i < n; i++)
        if (slots[i]) {
            slots[m] = slots[i];
            ids[m++] = block_ids[i];
        }
    rc = move_blocks(ns, true, layout, ids, m, slots, tiers, stream);
    if (rc < 0) {
        kvt_put_abort(ns, keys, n);
        return rc;
    }
    return kvt_put_commit(ns, keys, n);
}

int kvt_restore(kvt_ns *ns, const kvt_key *keys, size_t n, const struct kvk_layout *layout,
                const int64_t *block_ids, void *stream)
{
    const void *slots[KVT_BATCH_MAX];
    uint8_t tiers[KVT_BATCH_MAX];
    kvt_lease lease;
    int rc = layout_ok(ns, layout, block_ids, n, stream, true), hits;

    if (rc < 0)
        return rc;
    if (n > KVT_BATCH_MAX)
        return -E2BIG;
    hits = kvt_get_lease_flags(ns, keys, n, use_hot(ns, stream) ? ns->hot : 0, slots, tiers,
                               &lease);
    if (hits <= 0)
        return hits;
    rc = move_blocks(ns, false, layout, block_ids, (size_t)hits, (void *const *)slots, tiers,
                     stream);
    kvt_release(ns, &lease);
    return rc < 0 ? rc : hits;
}
