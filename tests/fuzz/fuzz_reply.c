/* SPDX-License-Identifier: MIT */
/*
 * fuzz_reply.c - libFuzzer harness for libkvtier's side of the protocol: a
 * hostile tierd. The input is a script of client calls interleaved with the
 * replies the fake daemon gives to each request (records, fuzz_wire.h).
 * The library must never crash, leak memory, descriptors or mappings, hand
 * out a slot outside the pools it mapped, or return an insane count.
 *
 * Design note. No thread and no timeouts: the harness is linked with
 * -Wl,--wrap=connect,--wrap=sendmsg,--wrap=mmap,--wrap=munmap. connect() to
 * FZ_SOCKET becomes one end of a socketpair; every request the client sends
 * is read back at once from the other end, inside the wrapper, and answered
 * with the next record of the input before sendmsg returns, so the reply is
 * queued when the client goes to wait for it. Once the input is used up the
 * fake daemon shuts its end: the client sees tierd go away. The mmap wrappers
 * record where the pools were mapped (and the size of the file behind them),
 * which is what the slots are checked against. A daemon-side harness would
 * drive tierd's session code through the same socketpair and records, one
 * record per request.
 *
 * Script: a record answers HELLO, then op bytes follow, each one call (low
 * 4 bits), key count (bits 4-6) and a flag (bit 7); every request a call
 * sends takes the next record.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "fuzz_wire.h"
#include "kv_layout.h"
#include "kvt_wire.h"
#include "kvtier.h"
#include "t_fds.h"
#include "t_wire.h"

#define FZ_SOCKET "fuzz:tierd"  /* the path kvt_connect is given */
#define WARM_FILE (256u << 10)  /* bytes of the warm pool's memfd */
#define HOT_FILE (128u << 10)   /* bytes of the hot pool's memfd */
#define NKEYS 8                 /* most keys one call carries */
#define NS_MAX 4                /* namespaces kept open per run */
#define CALLS_MAX 64            /* calls per run */

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int __real_connect(int fd, const struct sockaddr *a, socklen_t len);
int __wrap_connect(int fd, const struct sockaddr *a, socklen_t len);
ssize_t __real_sendmsg(int fd, const struct msghdr *m, int flags);
ssize_t __wrap_sendmsg(int fd, const struct msghdr *m, int flags);
void *__real_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off);
int __real_munmap(void *addr, size_t len);
int __wrap_munmap(void *addr, size_t len);

enum { R_WARM, R_HOT };

/* A pool the client mapped during this run. */
struct region {
    uint8_t *p;    /* where, NULL: slot free */
    size_t len;    /* bytes mapped */
    size_t file;   /* bytes of the file behind it: touching beyond is SIGBUS */
    int tag;       /* R_WARM (mapped inside kvt_connect) or R_HOT */
};

static struct {
    int fds[4];          /* passed along by FZ_FD_*: -, warm memfd, hot memfd, pipe */
    int client;          /* the client's socket, -1 outside a run */
    int peer;            /* the fake daemon's end */
    uint32_t last_id;    /* the last request id seen */
    bool shut;           /* the fake daemon hung up */
    int map_tag;         /* tag of the next mapping */
    struct region reg[4];
    struct fz_in in;     /* the rest of the script */
    uint8_t msg[KVT_WIRE_MSG_MAX + 256];
} h = { .fds = { -1, -1, -1, -1 }, .client = -1, .peer = -1 };

/* ---- the fake daemon ---------------------------------------------------- */

static void setup(void)
{
    int pfd[2];

    if (h.fds[1] >= 0)
        return;
    h.fds[1] = memfd_create("fuzz-warm", MFD_CLOEXEC);
    h.fds[2] = memfd_create("fuzz-hot", MFD_CLOEXEC);
    CHECK(h.fds[1] >= 0 && h.fds[2] >= 0);
    CHECK(ftruncate(h.fds[1], WARM_FILE) == 0 && ftruncate(h.fds[2], HOT_FILE) == 0);
    CHECK(pipe2(pfd, O_CLOEXEC) == 0);
    h.fds[3] = pfd[0];
    close(pfd[1]);
    /* every reply is queued before the client waits for it, so a wait that
     * times out has nothing to wait for (a reply under another request id,
     * say): 1 ms, not 30 s. No busy-polling on shared cores either. */
    setenv("KVTIER_TIMEOUT_MS", "1", 1);
    setenv("KVTIER_SPIN_US", "0", 1);
}

int __wrap_connect(int fd, const struct sockaddr *a, socklen_t len)
{
    const struct sockaddr_un *u = (const void *)a;
    int sp[2];

    if (a->sa_family != AF_UNIX || strcmp(u->sun_path, FZ_SOCKET) != 0)
        return __real_connect(fd, a, len);
    CHECK(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sp) == 0);
    CHECK(dup3(sp[0], fd, O_CLOEXEC) == fd);
    close(sp[0]);
    h.client = fd;
    h.peer = sp[1];
    return 0;
}

/* The request the client just sent must be well-formed (the client's own
 * encoder is checked too); answer it with the next record. */
static void answer(void)
{
    static uint8_t req[KVT_WIRE_MSG_MAX + 64];
    struct kvt_wire_hdr q;
    struct fz_rec r;
    ssize_t n = recv(h.peer, req, sizeof(req), MSG_DONTWAIT);
    size_t len;

    CHECK(n >= (ssize_t)sizeof(q) && n <= (ssize_t)KVT_WIRE_MSG_MAX);
    memcpy(&q, req, sizeof(q));
    CHECK(q.magic == KVT_WIRE_MAGIC && q.version == KVT_WIRE_VERSION);
    CHECK(q.op >= KVT_OP_HELLO && q.op < KVT_OP_MAX_ && q.status == 0);
    CHECK(q.body_len == (size_t)n - sizeof(q) && q.req_id == h.last_id + 1);
    h.last_id = q.req_id;
    if (q.flags & KVT_WIRE_F_NOREPLY) {
        CHECK(q.op == KVT_OP_RELEASE);
        return;
    }
    if (h.shut)
        return;
    if (fz_next(&h.in, &r) < 0) {
        shutdown(h.peer, SHUT_WR); /* tierd went away */
        h.shut = true;
        return;
    }
    len = fz_build(&r, q.op, q.req_id, h.msg, sizeof(h.msg));
    if (r.mode & FZ_M_STALE) { /* the late answer to an older call: skipped */
        struct kvt_wire_hdr s;

        memcpy(&s, h.msg, sizeof(s) <= len ? sizeof(s) : 0);
        s.req_id = q.req_id - 1;
        memcpy(h.msg, &s, sizeof(s) <= len ? sizeof(s) : 0);
        t_wire_send_fd(h.peer, h.msg, len, NULL, 0, -1, MSG_DONTWAIT);
        s.req_id = q.req_id;
        memcpy(h.msg, &s, sizeof(s) <= len ? sizeof(s) : 0);
    }
    /* a full queue is the harness's to ignore */
    t_wire_send_fd(h.peer, h.msg, len, NULL, 0, h.fds[(r.mode & FZ_M_FD_MASK) >> FZ_M_FD_SHIFT],
                   MSG_DONTWAIT);
}

ssize_t __wrap_sendmsg(int fd, const struct msghdr *m, int flags)
{
    ssize_t r = __real_sendmsg(fd, m, flags);
    int e = errno;

    if (r >= 0 && fd == h.client && h.client >= 0)
        answer();
    errno = e;
    return r;
}

void *__wrap_mmap(void *addr, size_t len, int prot, int flags, int fd, off_t off)
{
    void *p = __real_mmap(addr, len, prot, flags, fd, off);
    int e = errno;
    struct stat st;

    if (p != MAP_FAILED && fd >= 0 && h.client >= 0 && fstat(fd, &st) == 0) {
        int i = 0;

        while (i < 4 && h.reg[i].p)
            i++;
        CHECK(i < 4); /* the client maps two pools at most */
        h.reg[i] = (struct region){ p, len, (size_t)st.st_size, h.map_tag };
    }
    errno = e;
    return p;
}

int __wrap_munmap(void *addr, size_t len)
{
    for (int i = 0; i < 4; i++)
        if (h.reg[i].p && h.reg[i].p == addr) {
            CHECK(h.reg[i].len == len);
            h.reg[i].p = NULL;
        }
    return __real_munmap(addr, len);
}

/* ---- checks -------------------------------------------------------------- */

static const struct region *region(int tag)
{
    for (int i = 0; i < 4; i++)
        if (h.reg[i].p && h.reg[i].tag == tag)
            return &h.reg[i];
    return NULL;
}

/* A slot must lie inside the pool it came from, and inside the file behind
 * it; the harness then touches every byte, as an engine would. */
static void check_slot(const void *s, uint64_t bytes, int tag, bool write)
{
    const struct region *r = region(tag);
    const uint8_t *p = s;
    size_t off;

    CHECK(r && p >= r->p && bytes <= r->len && (size_t)(p - r->p) <= r->len - bytes);
    off = (size_t)(p - r->p);
    CHECK(off + bytes <= r->file);
    if (write) {
        memset((void *)s, 0xa5, bytes);
    } else {
        volatile uint8_t sum = 0;

        for (uint64_t i = 0; i < bytes; i++)
            sum += p[i];
        (void)sum;
    }
}

/* A count answer: an error, or at most n. */
static void check_count(int rc, size_t n)
{
    CHECK(rc < 0 || (size_t)rc <= n);
}

/* ---- the calls ------------------------------------------------------------ */

struct run {
    kvt_client *c;
    kvt_ns *ns[NS_MAX];
    int nns;
    kvt_key keys[NKEYS];
    void *slots[NKEYS];
    uint8_t tiers[NKEYS];
};

static const uint64_t block_sizes[8] = {
    64, 4096, 1, 100, 8192, 65536, 1u << 20, KVT_BLOCK_MAX,
};

static void ns_open(struct run *t, unsigned n)
{
    kvt_model m = { .model_id = "fuzz/model", .dtype = "bf16", .layout = "vllm-flash",
                    .block_tokens = 16, .tp_size = 1, .block_bytes = block_sizes[n] };
    kvt_ns *ns = NULL;
    int rc = kvt_ns_open(t->c, &m, &ns);

    if (rc < 0)
        return;
    CHECK(rc == 0 && ns && kvt_ns_block_bytes(ns) == m.block_bytes);
    if (t->nns < NS_MAX)
        t->ns[t->nns++] = ns;
    else
        t->ns[NS_MAX - 1] = ns; /* still freed by kvt_close */
}

/* Lease n keys and read what came; tiers say which pool each slot is in. */
static void get_lease(kvt_ns *ns, unsigned n, unsigned flags)
{
    const void *slots[NKEYS];
    uint8_t tiers[NKEYS];
    kvt_key keys[NKEYS] = { { { 0 } } };
    kvt_lease l;
    int rc = kvt_get_lease_flags(ns, keys, n, flags, slots, tiers, &l);

    check_count(rc, n);
    if (rc <= 0) {
        CHECK(l.id == 0);
        return;
    }
    CHECK(l.id != 0 && l.n == (uint32_t)rc);
    for (int i = 0; i < rc; i++) {
        CHECK(tiers[i] == KVT_TIER_WARM || (tiers[i] == KVT_TIER_HOT && (flags & KVT_GET_HOT)));
        check_slot(slots[i], kvt_ns_block_bytes(ns), tiers[i] == KVT_TIER_HOT ? R_HOT : R_WARM,
                   false);
    }
    CHECK(kvt_release(ns, &l) <= 0 && l.id == 0);
}

static void reserve(struct run *t, kvt_ns *ns, unsigned n, bool parent, unsigned flags)
{
    int rc = kvt_put_reserve_flags(ns, parent ? &t->keys[NKEYS - 1] : NULL, t->keys, n,
                                   t->slots, flags);

    check_count(rc, n);
    if (rc < 0)
        return;
    for (unsigned i = 0; i < n; i++)
        if (t->slots[i])
            check_slot(t->slots[i], kvt_ns_block_bytes(ns), flags ? R_HOT : R_WARM, true);
}

/* The copying put and get: the library touches the slots itself. */
static void copy_calls(kvt_ns *ns, unsigned n, bool get)
{
    static uint8_t buf[NKEYS][8192];
    void *bufs[NKEYS];
    kvt_key keys[NKEYS] = { { { 1 } } };

    if (kvt_ns_block_bytes(ns) > sizeof(buf[0]))
        return;
    for (unsigned i = 0; i < NKEYS; i++)
        bufs[i] = buf[i];
    if (get)
        check_count(kvt_get(ns, keys, n, bufs), n);
    else
        check_count(kvt_put(ns, NULL, keys, n, (const void *const *)bufs), n);
}

/* Offload or restore through an engine cache in host memory: the CPU
 * gather and scatter write and read the slots the daemon named. The
 * layout's blocks are 64 bytes (block_sizes[0]); other namespaces get
 * KVT_EBLOCKSIZE before any request. */
static void offload(kvt_ns *ns, unsigned n, bool restore)
{
    static int16_t cache[2 * NKEYS * 16];
    static const int64_t ids[NKEYS] = { 0, 1, 2, 3, 4, 5, 6, 7 };
    struct kvk_layout l = {
        .n_layers = 1, .base = cache, .elem_bytes = 2, .block_tokens = 16, .kv_heads = 1,
        .head_dim = 1, .n_kv = 2, .num_blocks = NKEYS, .stride_kv = NKEYS * 16,
        .stride_block = 16, .stride_token = 1, .stride_head = 1, .stride_dim = 1,
    };
    kvt_key keys[NKEYS] = { { { 2 } } };

    if (restore)
        check_count(kvt_restore(ns, keys, n, &l, ids, NULL), n);
    else
        check_count(kvt_offload(ns, NULL, keys, n, &l, ids, NULL), n);
}

static void hot_attach(kvt_client *c)
{
    kvt_hot_info info;
    const struct region *r;
    int rc;

    h.map_tag = R_HOT;
    rc = kvt_hot_attach(c, &info);
    if (rc < 0)
        return;
    r = region(R_HOT);
    CHECK(rc == 0 && info.kind == KVT_HOT_EMULATED && r && info.base == r->p &&
          info.bytes == r->len);
}

static void admin(kvt_client *c, unsigned n, bool flag)
{
    kvt_ns_info info[NKEYS];
    kvt_key_story story[NKEYS];
    kvt_key key = { { 7 } };

    /* counts may exceed cap (the daemon's to say); any negative is an error */
    if (flag) {
        kvt_admin_namespaces(c, info, n);
        kvt_admin_why(c, &key, story, n);
    } else {
        CHECK(kvt_admin_flush(c) <= 0);
        kvt_admin_purge(c, n);
    }
}

/* One call of the script. */
static void call(struct run *t, uint8_t op)
{
    unsigned n = (op >> 4) & 7u;
    bool flag = op & 0x80u;
    kvt_ns *ns = t->nns ? t->ns[t->nns - 1] : NULL;
    kvt_stats st;
    int rc;

    if ((op & 15u) == 0) {
        ns_open(t, n);
        return;
    }
    if ((op & 15u) >= 12) {
        switch (op & 15u) {
        case 12:
            hot_attach(t->c);
            break;
        case 13:
            rc = kvt_stats_get(t->c, &st);
            CHECK(rc <= 0 && (rc < 0 || st.version == KVT_STATS_VERSION));
            break;
        default:
            admin(t->c, n, (op & 15u) == 14);
            break;
        }
        return;
    }
    if (!ns)
        return;
    switch (op & 15u) {
    case 1:
        rc = kvt_lookup(ns, t->keys, n, flag ? KVT_LOOKUP_PREFETCH : 0, t->tiers);
        check_count(rc, n);
        for (unsigned i = 0; rc >= 0 && i < n; i++)
            CHECK(t->tiers[i] < KVT_TIER_COUNT);
        break;
    case 2: reserve(t, ns, n, flag, 0); break;
    case 3:
        check_count(kvt_put_commit_flags(ns, t->keys, n, flag ? KVT_COMMIT_DURABLE : 0), n);
        break;
    case 4: check_count(kvt_put_abort(ns, t->keys, n), n); break;
    case 5: check_count(kvt_remove(ns, t->keys, n), n); break;
    case 6: get_lease(ns, n, 0); break;
    case 7:
        h.map_tag = R_HOT;
        CHECK(kvt_ns_set_hot(ns, flag ? KVT_GET_HOT | KVT_GET_PROMOTE : KVT_GET_HOT) <= 0);
        get_lease(ns, n, flag ? KVT_GET_HOT | KVT_GET_PROMOTE : KVT_GET_HOT);
        break;
    case 8: reserve(t, ns, n, flag, KVT_RESERVE_HOT); break;
    case 9: copy_calls(ns, n, flag); break;
    case 10: offload(ns, n, flag); break;
    default:
        kvt_ns_set_deadline(ns, flag ? 5 : 0);
        check_count(kvt_lookup(ns, t->keys, n, 0, NULL), n);
        break;
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct run t = { 0 };
    uint8_t op;
    int fd0, rc;

    setup();
    fd0 = t_fds_open();
    CHECK(fd0 >= 0);
    for (unsigned i = 0; i < NKEYS; i++)
        t.keys[i].b[0] = (uint8_t)i;
    h.in = (struct fz_in){ data, size };
    h.last_id = 0;
    h.shut = false;
    h.map_tag = R_WARM;
    rc = kvt_connect(FZ_SOCKET, &t.c);
    if (rc == 0) {
        const struct region *w = region(R_WARM);

        CHECK(w && w->len > 0);
        h.map_tag = R_HOT;
        for (int k = 0; k < CALLS_MAX && fz_u8(&h.in, &op) == 0; k++)
            call(&t, op);
        kvt_close(t.c);
    } else {
        CHECK(rc < 0 && !t.c);
    }
    if (h.peer >= 0)
        close(h.peer);
    h.peer = h.client = -1;
    for (int i = 0; i < 4; i++)
        CHECK(!h.reg[i].p); /* every pool unmapped */
    CHECK(t_fds_open() == fd0); /* every descriptor closed */
    return 0;
}
