/* SPDX-License-Identifier: MIT */
/*
 * tierd_bad_input.c - hostile input against a private tierd.
 *
 * Messages are built by hand and sent on a raw SOCK_SEQPACKET socket: bad
 * framing (the daemon must close the connection), bad content (it must
 * answer with the exact error and stay up), a pool whose every block is
 * leased, a client that sends garbage and vanishes, and libkvtier's own
 * argument checks. After each attack a fresh libkvtier client must still
 * find and read, byte for byte, a chain committed before it.
 * Not covered here: the happy path (tierd_e2e.c).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "kvt_wire.h"
#include "t.h"
#include "t_wire.h"

#define BLK (64u << 10)        /* block bytes of the default pre-attack chain */
#define MIB (1u << 20)
#define CHAIN 16               /* its length */
#define CHAIN_SEED 4242u       /* its keys; block i holds t_fill(CHAIN_SEED * 1000 + i) */
#define GARBAGE_SEED 0x6b7674u /* the vanishing client's random messages */
#define RECV_MS 5000           /* longest wait for an answer on a raw socket */
#define HDR T_WIRE_HDR

/* 64 MiB pool in 16 segments of 4 MiB (tier_ram.c: pool / 16, 2..64 MiB),
 * so the largest block a namespace may declare is 4 MiB. */
static const char *const pool64[] = { "--warm-bytes", "64M", "--no-mlock", NULL };
#define POOL64_SLOT_MAX (4ull << 20)

/* One test's world: its daemon, and the client that put the chain before
 * the attack (kept connected: it must be served afterwards too). */
static struct {
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    uint64_t blk;          /* block bytes of the chain */
    int n;                 /* its length, <= CHAIN */
    kvt_key chain[CHAIN];
    uint64_t proto0;       /* proto_errors once the chain was in */
    bool disk_ok;          /* the chain may have gone to disk (room was needed) */
} F;

static uint32_t next_req = 100; /* request ids on raw sockets */
static char fake_dir[32];       /* the stand-in daemon's folder, when one was made */
static pid_t fake_pid;          /* and its process, until reaped */

/* A raw message under construction: one batch of keys and a margin. */
static _Alignas(16) uint8_t msg[KVT_WIRE_MSG_MAX + 8192];

static uint64_t chain_fill_seed(int i)
{
    return (uint64_t)CHAIN_SEED * 1000 + (uint64_t)i;
}

static kvt_stats stats_of(kvt_client *c)
{
    kvt_stats st;
    int rc = kvt_stats_get(c, &st);

    cr_assert_eq(rc, 0, "kvt_stats_get: %s", kvt_strerror(rc));
    return st;
}

/* Start tierd, and put the pre-attack chain: n blocks of blk bytes. */
static void fx_start(const char *const *args, uint64_t blk, int n)
{
    const void *src[CHAIN];
    uint8_t *buf = malloc((size_t)n * blk);
    int rc;

    cr_assert_not_null(buf);
    t_tierd_start(&F.d, args);
    F.c = t_connect(&F.d);
    F.ns = t_ns(F.c, blk);
    F.blk = blk;
    F.n = n;
    t_keys(F.chain, (size_t)n, CHAIN_SEED);
    for (int i = 0; i < n; i++) {
        t_fill(buf + (size_t)i * blk, blk, chain_fill_seed(i));
        src[i] = buf + (size_t)i * blk;
    }
    rc = kvt_put(F.ns, NULL, F.chain, (size_t)n, src);
    free(buf);
    cr_assert_eq(rc, n, "pre-attack put (seed %u): expected %d blocks stored, got %d (%s)",
                 CHAIN_SEED, n, rc, rc < 0 ? kvt_strerror(rc) : "");
    F.proto0 = stats_of(F.c).proto_errors;
}

/* Runs after every test, failed or not: no daemon outlives its test. */
static void fx_fini(void)
{
    kvt_close(F.c);
    F.c = NULL;
    if (fake_pid > 0) {
        kill(fake_pid, SIGKILL);
        t_wait(fake_pid);
    }
    if (fake_dir[0]) {
        char sock[64];

        snprintf(sock, sizeof(sock), "%s/fake.sock", fake_dir);
        unlink(sock);
        rmdir(fake_dir);
    }
    t_tierd_stop(&F.d);
}

/* The daemon still serves others: a fresh client finds the whole pre-attack
 * chain and reads it back byte-identical, the client connected before the
 * attack still works, and nothing is left reserved or leased. Returns the
 * daemon's counters as seen at the end. */
static kvt_stats check_served(const char *after)
{
    kvt_client *c = t_connect(&F.d);
    kvt_ns *ns = t_ns(c, F.blk);
    uint8_t tiers[CHAIN];
    void *dst[CHAIN];
    uint8_t *buf = malloc((size_t)F.n * F.blk);
    kvt_stats st;
    int hits;

    cr_assert_not_null(buf);
    hits = kvt_lookup(ns, F.chain, (size_t)F.n, 0, tiers);
    cr_assert_eq(hits, F.n, "after %s: lookup of the pre-attack chain found %d of %d blocks",
                 after, hits, F.n);
    for (int i = 0; i < F.n; i++) {
        cr_assert(tiers[i] == KVT_TIER_WARM || (F.disk_ok && tiers[i] == KVT_TIER_COLD),
                  "after %s: block %d in tier %d, expected warm%s", after, i, tiers[i],
                  F.disk_ok ? " or cold" : "");
        dst[i] = buf + (size_t)i * F.blk;
    }
    memset(buf, 0, (size_t)F.n * F.blk);
    hits = kvt_get(ns, F.chain, (size_t)F.n, dst);
    cr_assert_eq(hits, F.n, "after %s: get of the pre-attack chain: %d of %d (%s)", after,
                 hits, F.n, hits < 0 ? kvt_strerror(hits) : "");
    for (int i = 0; i < F.n; i++) {
        long bad = t_check(dst[i], F.blk, chain_fill_seed(i));

        cr_assert_eq(bad, -1, "after %s: block %d (seed %llu) differs at byte %ld", after, i,
                     (unsigned long long)chain_fill_seed(i), bad);
    }
    free(buf);
    st = stats_of(c);
    kvt_close(c);
    hits = kvt_lookup(F.ns, F.chain, (size_t)F.n, 0, NULL);
    cr_assert_eq(hits, F.n, "after %s: the client connected before it got %d (%s)", after,
                 hits, hits < 0 ? kvt_strerror(hits) : "hits");
    cr_assert_eq(st.reserved, 0, "after %s: %llu blocks still reserved", after,
                 (unsigned long long)st.reserved);
    cr_assert_eq(st.leases_active, 0, "after %s: %llu blocks still leased", after,
                 (unsigned long long)st.leases_active);
    return st;
}

static void expect_proto_errors(const kvt_stats *st, uint64_t grew, const char *after)
{
    cr_assert_eq(st->proto_errors - F.proto0, grew,
                 "after %s: proto_errors grew by %llu, expected %llu", after,
                 (unsigned long long)(st->proto_errors - F.proto0), (unsigned long long)grew);
}

/* check_served(after), then expect_proto_errors(grew, what) on its counters. */
static void check_served_counting(const char *after, uint64_t grew, const char *what)
{
    kvt_stats st = check_served(after);

    expect_proto_errors(&st, grew, what);
}

/* ---- raw sockets ------------------------------------------------------ */

static int raw_open(void)
{
    int fd = t_wire_connect(F.d.sock);

    cr_assert(fd >= 0, "connect %s: %s", F.d.sock, strerror(-fd));
    return fd;
}

#define hdr_of t_wire_hdr

/* Send one message made of a then b, exactly as given. */
static void raw_send2(int fd, const void *a, size_t alen, const void *b, size_t blen)
{
    ssize_t r = t_wire_send2(fd, a, alen, b, blen);

    cr_assert_eq(r, (ssize_t)(alen + blen), "sendmsg of %zu bytes: %zd (%s)", alen + blen, r,
                 r < 0 ? strerror((int)-r) : "short");
}

/* A well-framed request; returns its request id. */
static uint32_t raw_req(int fd, uint16_t op, uint32_t flags, const void *body, size_t blen)
{
    struct kvt_wire_hdr h = hdr_of(op, ++next_req, flags, blen);

    raw_send2(fd, &h, sizeof(h), body, blen);
    return h.req_id;
}

/* Receive one message: its length, 0 when the daemon closed the connection,
 * or -errno. The header goes to *h, up to cap body bytes to body. A passed
 * descriptor (the pool, with HELLO) is closed. Fails after RECV_MS. */
static ssize_t raw_recv(int fd, struct kvt_wire_hdr *h, void *body, size_t cap)
{
    ssize_t r = t_wire_recv(fd, h, body, cap, NULL, RECV_MS);

    cr_assert_neq(r, -ETIMEDOUT, "tierd neither answered nor closed within %d ms", RECV_MS);
    return r;
}

/* Expect the reply to req_id with this status; returns its body length. */
static size_t expect_reply(int fd, uint16_t op, uint32_t req_id, int status, void *body,
                           size_t cap, const char *what)
{
    struct kvt_wire_hdr h;
    ssize_t r = raw_recv(fd, &h, body, cap);

    cr_assert(r >= (ssize_t)HDR, "%s: expected a reply, got recv %zd (%s)", what, r,
              r == 0 ? "connection closed" : r < 0 ? strerror((int)-r) : "short message");
    cr_assert_eq(h.magic, KVT_WIRE_MAGIC, "%s: reply magic %#x", what, h.magic);
    cr_assert_eq(h.version, KVT_WIRE_VERSION, "%s: reply version %u", what, h.version);
    cr_assert_eq(h.body_len, (uint32_t)((size_t)r - HDR), "%s: reply body_len %u for %zd bytes",
                 what, h.body_len, r);
    cr_assert_eq(h.req_id, req_id, "%s: reply to request %u, expected %u", what, h.req_id,
                 req_id);
    cr_assert_eq(h.op, op, "%s: reply op %u, expected %u", what, h.op, op);
    cr_assert_eq(h.status, status, "%s: status %d (%s), expected %d (%s)", what, h.status,
                 kvt_strerror(h.status), status, kvt_strerror(status));
    return h.body_len;
}

/* Expect the daemon to have closed fd's connection (recv 0); closes fd. */
static void expect_closed(int fd, const char *what)
{
    struct kvt_wire_hdr h;
    ssize_t r = raw_recv(fd, &h, NULL, 0);

    cr_assert_eq(r, 0, "%s: expected tierd to close the connection (recv 0), got %zd "
                       "(op %u, status %d)", what, r, h.op, h.status);
    close(fd);
}

/* raw_send2, then expect_closed(fd, what): a message tierd must answer
 * by closing the connection. */
static void raw_send_closes(int fd, const void *a, size_t alen, const void *b, size_t blen,
                            const char *what)
{
    raw_send2(fd, a, alen, b, blen);
    expect_closed(fd, what);
}

static void raw_hello(int fd)
{
    struct kvt_wire_hello_req req = { .pid = (uint32_t)getpid() };
    struct kvt_wire_hello_rep rep;
    uint32_t id = raw_req(fd, KVT_OP_HELLO, 0, &req, sizeof(req));

    cr_assert_eq(expect_reply(fd, KVT_OP_HELLO, id, 0, &rep, sizeof(rep), "HELLO"),
                 sizeof(rep));
}

static int raw_open_hello(void)
{
    int fd = raw_open();

    raw_hello(fd);
    return fd;
}

/* The descriptor t_ns() uses: a raw client sending it joins that namespace. */
static struct kvt_wire_ns_req test_model(uint64_t block_bytes)
{
    struct kvt_wire_ns_req r = { .block_bytes = block_bytes, .block_tokens = 16, .tp_size = 1 };

    strcpy(r.model_id, "test/model");
    strcpy(r.dtype, "bf16");
    strcpy(r.layout, "test");
    return r;
}

/* NS_OPEN expecting status; the namespace id on success, else 0. */
static uint32_t raw_ns_open(int fd, const struct kvt_wire_ns_req *r, int status, const char *what)
{
    struct kvt_wire_ns_rep rep = { 0 };
    uint32_t id = raw_req(fd, KVT_OP_NS_OPEN, 0, r, sizeof(*r));
    size_t blen = expect_reply(fd, KVT_OP_NS_OPEN, id, status, &rep, sizeof(rep), what);

    if (status == 0)
        cr_assert_eq(blen, sizeof(rep), "%s: ns reply of %zu bytes", what, blen);
    else
        cr_assert_eq(blen, 0, "%s: error reply with a %zu-byte body", what, blen);
    return status == 0 ? rep.ns_id : 0;
}

/* A keys request body in msg: it claims n keys and carries nkeys of them
 * (plus parent when given). Returns the body length. */
static size_t keys_body(uint32_t ns_id, uint32_t n, uint64_t block_bytes, uint32_t flags,
                        const kvt_key *parent, const kvt_key *keys, size_t nkeys)
{
    struct kvt_wire_keys_req r = { .ns_id = ns_id, .n = n, .block_bytes = block_bytes,
                                   .flags = flags };
    size_t len = sizeof(r);

    if (parent)
        r.flags |= KVT_WIRE_KF_PARENT;
    memcpy(msg, &r, sizeof(r));
    if (parent) {
        memcpy(msg + len, parent, KVT_KEY_BYTES);
        len += KVT_KEY_BYTES;
    }
    cr_assert(len + nkeys * KVT_KEY_BYTES <= sizeof(msg));
    if (nkeys)
        memcpy(msg + len, keys, nkeys * KVT_KEY_BYTES);
    return len + nkeys * KVT_KEY_BYTES;
}

/* Send a keys request and expect an error reply with no body. */
static void keys_expect(int fd, uint16_t op, size_t blen, int status, const char *what)
{
    uint32_t id = raw_req(fd, op, 0, msg, blen);

    cr_assert_eq(expect_reply(fd, op, id, status, NULL, 0, what), 0,
                 "%s: error reply with a body", what);
}

/* A valid LOOKUP of the pre-attack chain on a raw socket: the connection
 * still works and the daemon still has the chain. */
static void raw_lookup_chain(int fd, uint32_t ns_id, const char *what)
{
    struct {
        struct kvt_wire_lookup_rep rep;
        uint8_t tiers[CHAIN];
    } r;
    size_t blen = keys_body(ns_id, (uint32_t)F.n, F.blk, 0, NULL, F.chain, (size_t)F.n);
    uint32_t id = raw_req(fd, KVT_OP_LOOKUP, 0, msg, blen);

    blen = expect_reply(fd, KVT_OP_LOOKUP, id, 0, &r, sizeof(r), what);
    cr_assert_eq(blen, sizeof(r.rep) + (size_t)F.n, "%s: lookup reply of %zu bytes", what, blen);
    cr_assert_eq(r.rep.hits, (uint32_t)F.n, "%s: lookup hits %u, expected %d", what, r.rep.hits,
                 F.n);
}

static kvt_stats raw_stats(int fd, const char *what)
{
    kvt_stats st;
    uint32_t id = raw_req(fd, KVT_OP_STATS, 0, NULL, 0);

    cr_assert_eq(expect_reply(fd, KVT_OP_STATS, id, 0, &st, sizeof(st), what), sizeof(st),
                 "%s: stats reply size", what);
    return st;
}

/* The socket goes on working after what: STATS, NS_OPEN and a LOOKUP of
 * the fixture's chain each answer. Returns the STATS reply. */
static kvt_stats raw_still_serves(int fd, const char *after)
{
    struct kvt_wire_ns_req model = test_model(F.blk);
    char what[128];
    uint32_t ns_id;
    kvt_stats st;

    snprintf(what, sizeof(what), "STATS after %s", after);
    st = raw_stats(fd, what);
    snprintf(what, sizeof(what), "NS_OPEN after %s", after);
    ns_id = raw_ns_open(fd, &model, 0, what);
    snprintf(what, sizeof(what), "LOOKUP after %s", after);
    raw_lookup_chain(fd, ns_id, what);
    return st;
}

/* A raw client past HELLO that joined the fixture's namespace (opened
 * through libkvtier with F.blk) by NS_OPEN (what names the step): the
 * socket, and the namespace id in *ns_id. */
static int raw_join(uint32_t *ns_id, const char *what)
{
    struct kvt_wire_ns_req model = test_model(F.blk);
    int fd = raw_open_hello();

    *ns_id = raw_ns_open(fd, &model, 0, what);
    return fd;
}

/* The STATS reply (what: "STATS after <after>") of a raw client, which is
 * then closed. */
static kvt_stats raw_stats_closed(int fd, const char *after)
{
    char what[128];
    kvt_stats st;

    snprintf(what, sizeof(what), "STATS after %s", after);
    st = raw_stats(fd, what);
    close(fd);
    return st;
}

/* ---- framing: the connection is closed -------------------------------- */

Test(tierd_bad_input, message_shorter_than_header_closes_connection, .fini = fx_fini)
{
    struct kvt_wire_hdr h = hdr_of(KVT_OP_STATS, 1, 0, 0);
    static const size_t lens[] = { 1, 10, HDR - 1 };
    kvt_stats st;
    int fd;

    fx_start(pool64, BLK, CHAIN);
    for (size_t i = 0; i < sizeof(lens) / sizeof(lens[0]); i++) {
        char what[64];

        snprintf(what, sizeof(what), "a %zu-byte message", lens[i]);
        fd = i == 0 ? raw_open() : raw_open_hello(); /* before and after HELLO */
        raw_send_closes(fd, &h, lens[i], NULL, 0, what);
    }
    st = check_served("messages shorter than the header");
    expect_proto_errors(&st, 3, "three short messages");

    /* an empty message reads like EOF on SOCK_SEQPACKET: closed too */
    fd = raw_open_hello();
    raw_send_closes(fd, &h, 0, NULL, 0, "an empty message");
    check_served("an empty message");
}

Test(tierd_bad_input, wrong_magic_closes_connection, .fini = fx_fini)
{
    static const uint32_t magics[] = { 0, KVT_WIRE_MAGIC ^ 1u, 0x4b565431u /* byte-swapped */ };

    fx_start(pool64, BLK, CHAIN);
    for (size_t i = 0; i < sizeof(magics) / sizeof(magics[0]); i++) {
        struct kvt_wire_hdr h = hdr_of(KVT_OP_STATS, 7, 0, 0);
        int fd = raw_open_hello();
        char what[64];

        h.magic = magics[i];
        snprintf(what, sizeof(what), "magic %#x", magics[i]);
        raw_send_closes(fd, &h, sizeof(h), NULL, 0, what);
    }
    check_served_counting("wrong magic", 3, "three wrong magics");
}

Test(tierd_bad_input, body_len_not_matching_message_closes_connection, .fini = fx_fini)
{
    static const struct {
        uint32_t claimed; /* body_len in the header */
        size_t sent;      /* body bytes actually sent */
    } cases[] = { { 8, 0 }, { 0, 8 }, { UINT32_MAX, 0 }, { 100, 99 }, { 99, 100 } };
    uint8_t body[128] = { 0 };

    fx_start(pool64, BLK, CHAIN);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kvt_wire_hdr h = hdr_of(KVT_OP_STATS, 9, 0, 0);
        int fd = raw_open_hello();
        char what[96];

        h.body_len = cases[i].claimed;
        snprintf(what, sizeof(what), "body_len %u with %zu body bytes", cases[i].claimed,
                 cases[i].sent);
        raw_send_closes(fd, &h, sizeof(h), body, cases[i].sent, what);
    }
    check_served_counting("body_len mismatches", 5, "five body_len mismatches");
}

Test(tierd_bad_input, message_over_max_is_truncated_and_closes_connection, .fini = fx_fini)
{
    static const size_t sizes[] = { KVT_WIRE_MSG_MAX + 4096, 2 * KVT_WIRE_MSG_MAX };

    fx_start(pool64, BLK, CHAIN);
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        /* well framed but for its size: body_len agrees with the bytes sent */
        static uint8_t big[2 * KVT_WIRE_MSG_MAX];
        struct kvt_wire_hdr h = hdr_of(KVT_OP_STATS, 11, 0, sizes[i] - HDR);
        int fd = raw_open_hello();
        char what[64];

        snprintf(what, sizeof(what), "a %zu-byte message", sizes[i]);
        raw_send_closes(fd, &h, sizeof(h), big, sizes[i] - HDR, what);
    }
    check_served_counting("oversized messages", 2, "two oversized messages");
}

/* KVT_WIRE_MSG_MAX is the largest message either side sends, so one byte
 * more is a framing error like any larger message. (sess.c receives into
 * KVT_WIRE_MSG_MAX + 1 bytes, so exactly one byte over is not truncated.) */
Test(tierd_bad_input, message_of_max_plus_one_bytes_closes_connection, .fini = fx_fini)
{
    static uint8_t body[KVT_WIRE_MSG_MAX + 1 - HDR];
    struct kvt_wire_hdr h = hdr_of(KVT_OP_STATS, 12, 0, sizeof(body));
    int fd;

    fx_start(pool64, BLK, CHAIN);
    fd = raw_open_hello();
    raw_send_closes(fd, &h, sizeof(h), body, sizeof(body),
                    "a message of KVT_WIRE_MSG_MAX + 1 bytes");
    check_served_counting("a message of KVT_WIRE_MSG_MAX + 1 bytes", 1,
                          "one oversized message");
}

Test(tierd_bad_input, passed_descriptor_closes_connection, .fini = fx_fini)
{
    struct kvt_wire_hdr h = hdr_of(KVT_OP_STATS, 13, 0, 0);
    int p[2], fd;
    ssize_t r;

    fx_start(pool64, BLK, CHAIN);
    fd = raw_open_hello();
    cr_assert_eq(pipe(p), 0);
    r = t_wire_send_fd(fd, &h, sizeof(h), NULL, 0, p[0], 0);
    cr_assert_eq(r, (ssize_t)sizeof(h), "sendmsg: %s", strerror(r < 0 ? (int)-r : 0));
    expect_closed(fd, "a STATS request carrying a descriptor");
    close(p[0]);
    close(p[1]);
    check_served_counting("a passed descriptor", 1, "one passed descriptor");
}

Test(tierd_bad_input, wrong_version_gets_eversion_then_close, .fini = fx_fini)
{
    static const struct {
        uint16_t version;
        uint32_t flags;
        bool hello; /* HELLO (the right version) first */
    } cases[] = { { KVT_WIRE_VERSION + 1, 0, true }, { 0, 0, false },
                  { 0xffff, KVT_WIRE_F_NOREPLY, true } /* answered all the same */ };

    fx_start(pool64, BLK, CHAIN);
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        struct kvt_wire_hdr h = hdr_of(KVT_OP_HELLO, 0, cases[i].flags, 0);
        struct kvt_wire_hello_req req = { .pid = 1 };
        int fd = cases[i].hello ? raw_open_hello() : raw_open();
        char what[64];

        h.version = cases[i].version;
        h.req_id = ++next_req;
        h.body_len = sizeof(req);
        snprintf(what, sizeof(what), "version %u", cases[i].version);
        raw_send2(fd, &h, sizeof(h), &req, sizeof(req));
        cr_assert_eq(expect_reply(fd, KVT_OP_HELLO, h.req_id, KVT_EVERSION, NULL, 0, what), 0);
        expect_closed(fd, what);
    }
    check_served_counting("wrong versions", 3, "three wrong versions");
}

/* ---- content: an error reply, the connection stays up ------------------- */

/* A KVT_EPROTO reply says "malformed message" (kvtier.h), which is what
 * proto_errors counts, whether or not the connection survives it. */
Test(tierd_bad_input, request_before_hello_gets_eproto, .fini = fx_fini)
{
    size_t blen;
    uint32_t id;
    int fd;

    fx_start(pool64, BLK, CHAIN);
    fd = raw_open();
    id = raw_req(fd, KVT_OP_STATS, 0, NULL, 0);
    cr_assert_eq(expect_reply(fd, KVT_OP_STATS, id, KVT_EPROTO, NULL, 0, "STATS before HELLO"),
                 0);
    blen = keys_body(1, (uint32_t)F.n, F.blk, 0, NULL, F.chain, (size_t)F.n);
    keys_expect(fd, KVT_OP_LOOKUP, blen, KVT_EPROTO, "LOOKUP before HELLO");
    /* the connection is still usable once it says HELLO */
    raw_hello(fd);
    raw_still_serves(fd, "a late HELLO");
    close(fd);
    check_served_counting("requests before HELLO", 2, "two requests before HELLO");
}

Test(tierd_bad_input, unknown_opcode_gets_eproto_and_connection_stays_up, .fini = fx_fini)
{
    static const uint16_t ops[] = { 0, KVT_OP_MAX_, 0xffff };
    uint8_t body[8] = { 0 };
    kvt_stats st;
    int fd;

    fx_start(pool64, BLK, CHAIN);
    fd = raw_open_hello();
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        char what[64];
        uint32_t id = raw_req(fd, ops[i], 0, body, i * 4);

        snprintf(what, sizeof(what), "opcode %u", ops[i]);
        cr_assert_eq(expect_reply(fd, ops[i], id, KVT_EPROTO, NULL, 0, what), 0);
    }
    /* the same socket goes on working, and already sees the count */
    st = raw_still_serves(fd, "unknown opcodes");
    expect_proto_errors(&st, 3, "three unknown opcodes (raw STATS)");
    close(fd);
    check_served_counting("unknown opcodes", 3, "three unknown opcodes");
}

Test(tierd_bad_input, keys_request_over_batch_max_gets_e2big, .fini = fx_fini)
{
    static const uint16_t ops[] = { KVT_OP_LOOKUP, KVT_OP_PUT_RESERVE, KVT_OP_GET,
                                    KVT_OP_REMOVE };
    static kvt_key keys[KVT_BATCH_MAX + 1];
    uint32_t ns_id;
    size_t blen;
    kvt_stats st;
    int fd;

    fx_start(pool64, BLK, CHAIN);
    t_keys(keys, KVT_BATCH_MAX + 1, 91);
    fd = raw_join(&ns_id, "NS_OPEN");
    for (size_t i = 0; i < sizeof(ops) / sizeof(ops[0]); i++) {
        char what[64];

        /* a body that really holds the n keys it claims */
        snprintf(what, sizeof(what), "op %u with %d keys", ops[i], KVT_BATCH_MAX + 1);
        blen = keys_body(ns_id, KVT_BATCH_MAX + 1, BLK, 0, NULL, keys, KVT_BATCH_MAX + 1);
        keys_expect(fd, ops[i], blen, -E2BIG, what);
    }
    blen = keys_body(ns_id, UINT32_MAX, BLK, 0, NULL, keys, 1);
    keys_expect(fd, KVT_OP_LOOKUP, blen, -E2BIG, "LOOKUP claiming 2^32-1 keys");
    raw_lookup_chain(fd, ns_id, "LOOKUP after -E2BIG");
    st = raw_stats_closed(fd, "-E2BIG");
    cr_assert_eq(st.reserved, 0, "a refused PUT_RESERVE reserved %llu blocks",
                 (unsigned long long)st.reserved);
    check_served("batches over KVT_BATCH_MAX");
}

/* As before HELLO: KVT_EPROTO replies are malformed messages, counted. */
Test(tierd_bad_input, keys_count_not_matching_body_gets_eproto, .fini = fx_fini)
{
    kvt_key parent;
    uint32_t ns_id;
    size_t blen;
    kvt_stats st;
    int fd;

    fx_start(pool64, BLK, CHAIN);
    t_keys(&parent, 1, 92);
    fd = raw_join(&ns_id, "NS_OPEN");
    blen = keys_body(ns_id, 4, BLK, 0, NULL, F.chain, 3);
    keys_expect(fd, KVT_OP_LOOKUP, blen, KVT_EPROTO, "LOOKUP of n=4 carrying 3 keys");
    blen = keys_body(ns_id, 4, BLK, 0, NULL, F.chain, 5);
    keys_expect(fd, KVT_OP_GET, blen, KVT_EPROTO, "GET of n=4 carrying 5 keys");
    /* the parent flag without the parent: one key short */
    blen = keys_body(ns_id, 2, BLK, 0, NULL, F.chain, 2);
    ((struct kvt_wire_keys_req *)msg)->flags |= KVT_WIRE_KF_PARENT;
    keys_expect(fd, KVT_OP_PUT_RESERVE, blen, KVT_EPROTO, "PUT_RESERVE flagged with a parent "
                                                          "it lacks");
    /* a parent that is not flagged: one key too many */
    blen = keys_body(ns_id, 2, BLK, 0, &parent, F.chain, 2);
    ((struct kvt_wire_keys_req *)msg)->flags &= ~KVT_WIRE_KF_PARENT;
    keys_expect(fd, KVT_OP_PUT_RESERVE, blen, KVT_EPROTO, "PUT_RESERVE with an unflagged "
                                                          "parent");
    /* shorter than struct kvt_wire_keys_req itself */
    keys_body(ns_id, 0, BLK, 0, NULL, NULL, 0);
    keys_expect(fd, KVT_OP_REMOVE, 8, KVT_EPROTO, "REMOVE with an 8-byte body");
    raw_lookup_chain(fd, ns_id, "LOOKUP after count mismatches");
    st = raw_stats_closed(fd, "count mismatches");
    cr_assert_eq(st.reserved, 0, "a refused PUT_RESERVE reserved %llu blocks",
                 (unsigned long long)st.reserved);
    check_served_counting("keys counts not matching the body", 5,
                          "five keys requests answered KVT_EPROTO");
}

Test(tierd_bad_input, keys_request_for_unknown_namespace_gets_enons, .fini = fx_fini)
{
    static const uint32_t ids[] = { 0, 2 /* one past the only namespace */, 0x7fffffffu,
                                    UINT32_MAX };
    static const uint16_t ops[] = { KVT_OP_LOOKUP, KVT_OP_PUT_RESERVE, KVT_OP_PUT_COMMIT,
                                    KVT_OP_PUT_ABORT, KVT_OP_GET, KVT_OP_REMOVE };
    kvt_stats st;
    int fd;

    fx_start(pool64, BLK, CHAIN);
    cr_assert_eq(stats_of(F.c).namespaces, 1, "the fixture opens exactly one namespace");
    fd = raw_open_hello();
    for (size_t i = 0; i < sizeof(ids) / sizeof(ids[0]); i++)
        for (size_t j = 0; j < sizeof(ops) / sizeof(ops[0]); j++) {
            size_t blen = keys_body(ids[i], 2, BLK, 0, NULL, F.chain, 2);
            char what[64];

            snprintf(what, sizeof(what), "op %u on namespace %u", ops[j], ids[i]);
            keys_expect(fd, ops[j], blen, KVT_ENONS, what);
        }
    st = raw_stats_closed(fd, "unknown namespaces");
    cr_assert_eq(st.reserved, 0);
    cr_assert_eq(st.tier[KVT_TIER_WARM].blocks, (uint64_t)F.n, "warm blocks %llu",
                 (unsigned long long)st.tier[KVT_TIER_WARM].blocks);
    check_served("unknown namespaces");
}

Test(tierd_bad_input, keys_request_with_other_block_size_gets_eblocksize, .fini = fx_fini)
{
    /* the namespace was opened through libkvtier with BLK; the raw client
     * joins it with the same descriptor and then lies about the size */
    static const uint64_t sizes[] = { BLK + 1, BLK - 1, 0, 2 * BLK, UINT64_MAX };
    struct {
        struct kvt_wire_get_rep rep;
        uint64_t offs[CHAIN];
    } g;
    struct kvt_wire_release_req rel;
    uint32_t ns_id, id;
    size_t blen;
    int fd;

    fx_start(pool64, BLK, CHAIN);
    fd = raw_join(&ns_id, "NS_OPEN joining the libkvtier namespace");
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char what[80];

        snprintf(what, sizeof(what), "GET with block_bytes %llu", (unsigned long long)sizes[i]);
        blen = keys_body(ns_id, (uint32_t)F.n, sizes[i], 0, NULL, F.chain, (size_t)F.n);
        keys_expect(fd, KVT_OP_GET, blen, KVT_EBLOCKSIZE, what);
        snprintf(what, sizeof(what), "PUT_RESERVE with block_bytes %llu",
                 (unsigned long long)sizes[i]);
        keys_expect(fd, KVT_OP_PUT_RESERVE, blen, KVT_EBLOCKSIZE, what);
    }
    /* the right size still works on the same socket: lease, then release */
    blen = keys_body(ns_id, (uint32_t)F.n, BLK, 0, NULL, F.chain, (size_t)F.n);
    id = raw_req(fd, KVT_OP_GET, 0, msg, blen);
    blen = expect_reply(fd, KVT_OP_GET, id, 0, &g, sizeof(g), "GET with the right size");
    cr_assert_eq(g.rep.hits, (uint32_t)F.n, "GET hits %u", g.rep.hits);
    cr_assert_eq(blen, sizeof(g.rep) + (size_t)F.n * sizeof(uint64_t));
    rel.lease_id = g.rep.lease_id;
    id = raw_req(fd, KVT_OP_RELEASE, 0, &rel, sizeof(rel));
    cr_assert_eq(expect_reply(fd, KVT_OP_RELEASE, id, 0, NULL, 0, "RELEASE"), 0);
    cr_assert_eq(raw_stats_closed(fd, "block size mismatches").reserved, 0);
    check_served("block size mismatches");
}

Test(tierd_bad_input, hot_requests_without_attach_or_hot_tier_are_refused, .fini = fx_fini)
{
    static const char *const with_hot[] = { "--warm-bytes", "64M", "--no-mlock",
                                            "--hot-bytes", "8M", NULL };
    struct kvt_wire_hot_rep hot;
    uint32_t ns_id, id;
    size_t blen;
    kvt_stats st;
    int fd;

    fx_start(with_hot, BLK, CHAIN);
    fd = raw_join(&ns_id, "NS_OPEN");
    /* hot slots before the pool is mapped: refused, the connection stays */
    blen = keys_body(ns_id, 2, BLK, KVT_WIRE_KF_HOT, NULL, F.chain, 2);
    keys_expect(fd, KVT_OP_PUT_RESERVE, blen, KVT_EPROTO, "PUT_RESERVE into hot unattached");
    keys_expect(fd, KVT_OP_GET, blen, KVT_EPROTO, "GET of hot unattached");
    blen = keys_body(ns_id, 2, BLK, KVT_WIRE_KF_PROMOTE | (KVT_LOOKUP_PREFETCH << 8), NULL,
                     F.chain, 2);
    keys_expect(fd, KVT_OP_LOOKUP, blen, KVT_EPROTO, "prefetch into hot unattached");
    /* HOT_ATTACH carries no body */
    id = raw_req(fd, KVT_OP_HOT_ATTACH, 0, msg, 8);
    expect_reply(fd, KVT_OP_HOT_ATTACH, id, KVT_EPROTO, NULL, 0, "HOT_ATTACH with a body");
    id = raw_req(fd, KVT_OP_HOT_ATTACH, 0, NULL, 0);
    cr_assert_eq(expect_reply(fd, KVT_OP_HOT_ATTACH, id, 0, &hot, sizeof(hot), "HOT_ATTACH"),
                 sizeof(hot));
    cr_assert_eq(hot.kind, KVT_HOT_EMULATED);
    cr_assert_geq(hot.bytes, 8u << 20);
    st = raw_stats_closed(fd, "hot requests");
    cr_assert_eq(st.reserved, 0);
    cr_assert_eq(st.leases_active, 0);
    check_served("hot requests");
}

Test(tierd_bad_input, hot_attach_without_hot_tier_gets_eopnotsupp, .fini = fx_fini)
{
    uint32_t id;
    int fd;

    fx_start(pool64, BLK, CHAIN);
    fd = raw_open_hello();
    id = raw_req(fd, KVT_OP_HOT_ATTACH, 0, NULL, 0);
    expect_reply(fd, KVT_OP_HOT_ATTACH, id, -EOPNOTSUPP, NULL, 0, "HOT_ATTACH, no hot tier");
    close(fd);
    check_served("hot attach without a hot tier");
}

/* A peer that sends and never reads: its replies fill its socket, tierd
 * drops it instead of blocking on it, and serves everyone else meanwhile. */
Test(tierd_bad_input, a_client_that_never_reads_its_replies_is_dropped, .fini = fx_fini)
{
    struct kvt_wire_hdr h;
    uint64_t t0;
    int fd, sent = 0, err = 0;

    fx_start(pool64, BLK, CHAIN);
    fd = raw_open_hello();
    t0 = (uint64_t)time(NULL);
    for (;;) {
        struct iovec iov = { &h, sizeof(h) };
        struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1 };

        h = hdr_of(KVT_OP_STATS, ++next_req, 0, 0);
        if (sendmsg(fd, &m, MSG_NOSIGNAL | MSG_DONTWAIT) < 0) {
            err = errno;
            if (err != EAGAIN)
                break; /* dropped: EPIPE or ECONNRESET */
            usleep(1000); /* our own buffer is full: tierd has more to read */
        } else {
            sent++;
        }
        /* every so often, someone else is served all the while */
        if (sent % 500 == 0)
            cr_assert_eq(stats_of(F.c).proto_errors, F.proto0, "the other client");
        cr_assert_lt((uint64_t)time(NULL) - t0, 30, "not dropped after %d requests", sent);
    }
    cr_assert(err == EPIPE || err == ECONNRESET, "send failed with %s", strerror(err));
    cr_assert_gt(sent, 100, "dropped after only %d requests", sent);
    close(fd);
    check_served("a client that never reads");
}

Test(tierd_bad_input, operator_requests_with_bad_bodies_are_refused, .fini = fx_fini)
{
    struct kvt_wire_ns_list_req list = { .start = 0, .max = 4 };
    struct kvt_wire_purge_req purge = { .ns_id = 77 };
    struct {
        struct kvt_wire_ns_list_rep rep;
        kvt_ns_info info[2];
    } nl;
    uint32_t id;
    int fd;

    fx_start(pool64, BLK, CHAIN);
    fd = raw_open_hello();
    id = raw_req(fd, KVT_OP_NS_LIST, 0, &list, sizeof(list) - 1);
    expect_reply(fd, KVT_OP_NS_LIST, id, KVT_EPROTO, NULL, 0, "NS_LIST short");
    id = raw_req(fd, KVT_OP_NS_LIST, 0, &list, sizeof(list));
    expect_reply(fd, KVT_OP_NS_LIST, id, -EINVAL, NULL, 0, "NS_LIST from id 0");
    list.start = 1;
    list.max = 2;
    id = raw_req(fd, KVT_OP_NS_LIST, 0, &list, sizeof(list));
    cr_assert_eq(expect_reply(fd, KVT_OP_NS_LIST, id, 0, &nl, sizeof(nl), "NS_LIST"),
                 sizeof(nl.rep) + sizeof(kvt_ns_info));
    cr_assert_eq(nl.rep.n, 1);
    cr_assert_eq(nl.rep.next, 0);
    cr_assert_eq(nl.info[0].put_blocks, (uint64_t)F.n);
    id = raw_req(fd, KVT_OP_WHY, 0, msg, KVT_KEY_BYTES + 1);
    expect_reply(fd, KVT_OP_WHY, id, KVT_EPROTO, NULL, 0, "WHY with 33 bytes");
    id = raw_req(fd, KVT_OP_FLUSH, 0, msg, 4);
    expect_reply(fd, KVT_OP_FLUSH, id, KVT_EPROTO, NULL, 0, "FLUSH with a body");
    id = raw_req(fd, KVT_OP_PURGE, 0, &purge, sizeof(purge));
    expect_reply(fd, KVT_OP_PURGE, id, KVT_ENONS, NULL, 0, "PURGE of an unknown namespace");
    memcpy(msg, &purge, sizeof(purge));
    id = raw_req(fd, KVT_OP_PURGE, 0, msg, sizeof(purge) + 1);
    expect_reply(fd, KVT_OP_PURGE, id, KVT_EPROTO, NULL, 0, "PURGE too long");
    close(fd);
    check_served("operator requests");
}

/* ---- namespaces ------------------------------------------------------- */

Test(tierd_bad_input, ns_open_with_bad_descriptor_gets_einval, .fini = fx_fini)
{
    struct kvt_wire_ns_req r;
    kvt_stats st;
    int fd;

    fx_start(pool64, BLK, CHAIN);
    fd = raw_open_hello();
#define NS_EINVAL(what, edit)                                                                  \
    do {                                                                                       \
        r = test_model(BLK);                                                                   \
        edit;                                                                                  \
        raw_ns_open(fd, &r, -EINVAL, what);                                                    \
    } while (0)
    NS_EINVAL("model_id without a NUL", memset(r.model_id, 'm', sizeof(r.model_id)));
    NS_EINVAL("empty model_id", memset(r.model_id, 0, sizeof(r.model_id)));
    NS_EINVAL("dtype without a NUL", memset(r.dtype, 'd', sizeof(r.dtype)));
    NS_EINVAL("layout without a NUL", memset(r.layout, 'l', sizeof(r.layout)));
    NS_EINVAL("block_bytes 0", r.block_bytes = 0);
    NS_EINVAL("block_tokens 0", r.block_tokens = 0);
    NS_EINVAL("tp_rank == tp_size", (r.tp_rank = 1, r.tp_size = 1));
    NS_EINVAL("tp_rank > tp_size", (r.tp_rank = 5, r.tp_size = 2));
    NS_EINVAL("tp_size 0", (r.tp_rank = 0, r.tp_size = 0));
#undef NS_EINVAL
    /* a boundary that is fine: 127 bytes of model_id and its NUL */
    r = test_model(BLK);
    memset(r.model_id, 'm', sizeof(r.model_id) - 1);
    cr_assert_neq(raw_ns_open(fd, &r, 0, "a 127-byte model_id"), 0);
    st = raw_stats_closed(fd, "bad descriptors");
    cr_assert_eq(st.namespaces, 2, "namespaces: %u, expected the fixture's and the 127-byte one",
                 st.namespaces);
    check_served("bad namespace descriptors");
}

Test(tierd_bad_input, ns_open_with_block_over_largest_slot_gets_efbig, .fini = fx_fini)
{
    static const uint64_t sizes[] = { POOL64_SLOT_MAX + 1, KVT_BLOCK_MAX, UINT64_MAX };
    struct kvt_wire_ns_req r;
    kvt_model m = { .model_id = "test/big", .dtype = "bf16", .layout = "test",
                    .block_tokens = 16, .tp_size = 1, .block_bytes = POOL64_SLOT_MAX + 1 };
    kvt_key key;
    kvt_ns *ns = NULL;
    uint8_t *buf;
    int fd, rc;

    fx_start(pool64, BLK, CHAIN);
    fd = raw_open_hello();
    for (size_t i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        char what[80];

        r = test_model(sizes[i]);
        snprintf(what, sizeof(what), "NS_OPEN of %llu-byte blocks", (unsigned long long)sizes[i]);
        raw_ns_open(fd, &r, -EFBIG, what);
    }
    close(fd);
    /* through libkvtier: within KVT_BLOCK_MAX, so the daemon decides */
    rc = kvt_ns_open(F.c, &m, &ns);
    cr_assert_eq(rc, -EFBIG, "kvt_ns_open of %llu-byte blocks: %d (%s), expected -EFBIG",
                 (unsigned long long)m.block_bytes, rc, kvt_strerror(rc));
    /* the largest slot itself is fine, and a block of it round-trips */
    m.block_bytes = POOL64_SLOT_MAX;
    rc = kvt_ns_open(F.c, &m, &ns);
    cr_assert_eq(rc, 0, "kvt_ns_open of %llu-byte blocks: %s", (unsigned long long)m.block_bytes,
                 kvt_strerror(rc));
    buf = malloc(POOL64_SLOT_MAX);
    cr_assert_not_null(buf);
    t_keys(&key, 1, 93);
    t_fill(buf, POOL64_SLOT_MAX, 93);
    rc = kvt_put(ns, NULL, &key, 1, (const void *const *)&buf);
    cr_assert_eq(rc, 1, "put of one largest block: %d (%s)", rc, kvt_strerror(rc));
    memset(buf, 0, POOL64_SLOT_MAX);
    rc = kvt_get(ns, &key, 1, (void *const *)&buf);
    cr_assert_eq(rc, 1, "get of one largest block: %d (%s)", rc, kvt_strerror(rc));
    cr_assert_eq(t_check(buf, POOL64_SLOT_MAX, 93), -1, "the largest block came back wrong");
    free(buf);
    check_served("blocks over the largest slot");
}

/* A stand-in for tierd on its own socket: answers HELLO with a small memfd
 * as the pool, then, once told through ctl that the parent is done with bad
 * descriptors, checks that nothing arrived meanwhile and says so on ctl;
 * then answers one valid NS_OPEN (the control: a call that should reach it does). Exit 0 when
 * all held, 1 when a bad descriptor reached the "daemon", 2+ otherwise. */
static int fake_tierd(int lfd, int ctl)
{
    static uint8_t buf[KVT_WIRE_MSG_MAX];
    struct kvt_wire_hdr h;
    struct kvt_wire_ns_req req;
    struct kvt_wire_hello_rep hrep = { .pool_bytes = MIB, .session_id = 1,
                                       .max_batch = KVT_BATCH_MAX, .page_bytes = 4096 };
    struct kvt_wire_ns_rep nrep = { .ns_id = 7 };
    int fd, pool;
    ssize_t r;
    char x;

    alarm(20); /* never outlive a stuck parent */
    fd = accept(lfd, NULL, NULL);
    if (fd < 0 || recv(fd, buf, sizeof(buf), 0) < (ssize_t)HDR)
        return 2;
    memcpy(&h, buf, sizeof(h));
    if (h.op != KVT_OP_HELLO)
        return 3;
    pool = memfd_create("fake-pool", MFD_CLOEXEC);
    if (pool < 0 || ftruncate(pool, MIB) < 0)
        return 4;
    h.body_len = sizeof(hrep);
    if (t_wire_send_fd(fd, &h, sizeof(h), &hrep, sizeof(hrep), pool, 0) < 0)
        return 5;
    if (read(ctl, &x, 1) != 1)
        return 6;
    r = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
    if (r >= 0)
        return 1; /* a message (or a close) where there should be nothing */
    if (errno != EAGAIN || write(ctl, "y", 1) != 1)
        return 7;
    r = recv(fd, buf, sizeof(buf), 0);
    if (r != (ssize_t)(HDR + sizeof(req)))
        return 8;
    memcpy(&h, buf, sizeof(h));
    memcpy(&req, buf + HDR, sizeof(req));
    if (h.op != KVT_OP_NS_OPEN || strnlen(req.model_id, sizeof(req.model_id)) != 127)
        return 9;
    h.body_len = sizeof(nrep);
    nrep.block_bytes = req.block_bytes;
    nrep.slot_bytes = req.block_bytes;
    if (t_wire_send2(fd, &h, sizeof(h), &nrep, sizeof(nrep)) < 0)
        return 10;
    return recv(fd, buf, sizeof(buf), 0) == 0 ? 0 : 11; /* the client's close */
}

Test(tierd_bad_input, client_ns_open_with_bad_descriptor_is_einval_without_daemon, .fini = fx_fini)
{
    char long_id[200], sock[64];
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    const kvt_model good = { .model_id = "test/model", .dtype = "bf16", .layout = "test",
                             .block_tokens = 16, .tp_size = 1, .block_bytes = BLK };
    kvt_model m;
    kvt_client *c = NULL;
    kvt_ns *ns = NULL;
    int lfd, ctl[2], rc, st;
    char ack;
    pid_t pid;

    t_tmpdir("kvt-fake", fake_dir, sizeof(fake_dir));
    snprintf(sock, sizeof(sock), "%s/fake.sock", fake_dir);
    /* a call that does reach the stand-in gets no answer: fail fast */
    setenv("KVTIER_TIMEOUT_MS", "2000", 1);
    snprintf(a.sun_path, sizeof(a.sun_path), "%s", sock);
    lfd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    cr_assert(lfd >= 0);
    cr_assert_eq(bind(lfd, (struct sockaddr *)&a, sizeof(a)), 0, "bind: %s", strerror(errno));
    cr_assert_eq(listen(lfd, 4), 0);
    cr_assert_eq(socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, ctl), 0);
    fake_pid = pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0)
        _exit(fake_tierd(lfd, ctl[0]));
    rc = kvt_connect(sock, &c);
    cr_assert_eq(rc, 0, "kvt_connect to the stand-in: %s", kvt_strerror(rc));

    memset(long_id, 'm', sizeof(long_id));
    long_id[sizeof(long_id) - 1] = 0;
#define CLIENT_EINVAL(what, cl, edit, outp)                                                    \
    do {                                                                                       \
        m = good;                                                                              \
        edit;                                                                                  \
        rc = kvt_ns_open(cl, &m, outp);                                                        \
        cr_assert_eq(rc, -EINVAL, "kvt_ns_open with %s: %d (%s), expected -EINVAL", what, rc,   \
                     kvt_strerror(rc));                                                        \
    } while (0)
    CLIENT_EINVAL("NULL model_id", c, m.model_id = NULL, &ns);
    CLIENT_EINVAL("empty model_id", c, m.model_id = "", &ns);
    CLIENT_EINVAL("a 128-byte model_id", c, (long_id[128] = 0, m.model_id = long_id), &ns);
    CLIENT_EINVAL("a 16-byte dtype", c, m.dtype = "0123456789abcdef", &ns);
    CLIENT_EINVAL("a 32-byte layout", c, m.layout = "0123456789abcdef0123456789abcdef", &ns);
    CLIENT_EINVAL("block_tokens 0", c, m.block_tokens = 0, &ns);
    CLIENT_EINVAL("block_bytes 0", c, m.block_bytes = 0, &ns);
    CLIENT_EINVAL("block_bytes over KVT_BLOCK_MAX", c, m.block_bytes = KVT_BLOCK_MAX + 1, &ns);
    CLIENT_EINVAL("tp_size 0", c, (m.tp_rank = 0, m.tp_size = 0), &ns);
    CLIENT_EINVAL("tp_rank == tp_size", c, (m.tp_rank = 2, m.tp_size = 2), &ns);
    CLIENT_EINVAL("a NULL client", NULL, (void)0, &ns);
    CLIENT_EINVAL("a NULL out", c, (void)0, NULL);
#undef CLIENT_EINVAL
    rc = kvt_ns_open(c, NULL, &ns);
    cr_assert_eq(rc, -EINVAL, "kvt_ns_open with a NULL model: %d", rc);
    cr_assert_null(ns, "a refused kvt_ns_open set *out");

    /* the stand-in now checks nothing came, then serves one valid open */
    cr_assert_eq(write(ctl[1], "x", 1), 1);
    m = good;
    long_id[127] = 0;
    m.model_id = long_id;
    rc = read(ctl[1], &ack, 1) == 1 ? kvt_ns_open(c, &m, &ns) : -EPIPE;
    kvt_close(c);
    st = t_wait(pid);
    fake_pid = 0;
    close(lfd);
    close(ctl[0]);
    close(ctl[1]);
    cr_assert_eq(st, 0, "stand-in tierd: status %d (1: a bad descriptor was sent to the "
                        "daemon; 2+: stand-in failure)", st);
    cr_assert_eq(rc, 0, "the valid control kvt_ns_open: %s", kvt_strerror(rc));
}

/* ---- leases and a full pool ---------------------------------------------- */

Test(tierd_bad_input, release_of_foreign_lease_gets_enoent, .fini = fx_fini)
{
    struct kvt_wire_ns_req model = test_model(BLK);
    struct {
        struct kvt_wire_get_rep rep;
        uint64_t offs[4];
    } g;
    struct kvt_wire_release_req rel;
    const void *slots[CHAIN];
    kvt_lease la;
    kvt_stats st;
    uint32_t ns_id, id;
    size_t blen;
    int fd, hits;

    fx_start(pool64, BLK, CHAIN);
    hits = kvt_get_lease(F.ns, F.chain, (size_t)F.n, slots, &la);
    cr_assert_eq(hits, F.n, "the owner's lease: %d", hits);
    fd = raw_open_hello();
    {
        const uint64_t foreign[] = { la.id, 0, la.id + 1000, UINT64_MAX };

        for (size_t i = 0; i < sizeof(foreign) / sizeof(foreign[0]); i++) {
            char what[80];

            snprintf(what, sizeof(what), "RELEASE of lease %llu (not ours)",
                     (unsigned long long)foreign[i]);
            rel.lease_id = foreign[i];
            id = raw_req(fd, KVT_OP_RELEASE, 0, &rel, sizeof(rel));
            cr_assert_eq(expect_reply(fd, KVT_OP_RELEASE, id, -ENOENT, NULL, 0, what), 0);
        }
    }
    /* unanswered, as libkvtier sends it: no reply comes, the next one is STATS's */
    rel.lease_id = la.id;
    raw_req(fd, KVT_OP_RELEASE, KVT_WIRE_F_NOREPLY, &rel, sizeof(rel));
    st = raw_stats(fd, "STATS after an unanswered foreign RELEASE");
    cr_assert_eq(st.leases_active, (uint64_t)F.n, "the owner's lease lost blocks: %llu leased",
                 (unsigned long long)st.leases_active);
    expect_proto_errors(&st, 5, "five foreign RELEASEs");
    /* its own lease it may release, once */
    ns_id = raw_ns_open(fd, &model, 0, "NS_OPEN");
    blen = keys_body(ns_id, 4, BLK, 0, NULL, F.chain, 4);
    id = raw_req(fd, KVT_OP_GET, 0, msg, blen);
    expect_reply(fd, KVT_OP_GET, id, 0, &g, sizeof(g), "GET of 4");
    cr_assert_eq(g.rep.hits, 4);
    cr_assert_neq(g.rep.lease_id, 0);
    rel.lease_id = g.rep.lease_id;
    id = raw_req(fd, KVT_OP_RELEASE, 0, &rel, sizeof(rel));
    cr_assert_eq(expect_reply(fd, KVT_OP_RELEASE, id, 0, NULL, 0, "RELEASE of its own lease"), 0);
    id = raw_req(fd, KVT_OP_RELEASE, 0, &rel, sizeof(rel));
    expect_reply(fd, KVT_OP_RELEASE, id, -ENOENT, NULL, 0, "a second RELEASE of that lease");
    close(fd);
    /* the owner's lease is intact: its slots still hold the chain */
    for (int i = 0; i < F.n; i++)
        cr_assert_eq(t_check(slots[i], BLK, chain_fill_seed(i)), -1, "leased block %d changed",
                     i);
    cr_assert_eq(kvt_release(F.ns, &la), 0);
    stats_of(F.c); /* a round trip on F.c: the release was handled */
    check_served_counting("foreign RELEASEs", 6, "six foreign RELEASEs");
}

/* 32 MiB pool = 32 slots of 1 MiB. --high-wm 1 turns off background
 * eviction, which would otherwise drop a just-committed block before the
 * second client can lease it; eviction on demand (in reserve) stays. */
Test(tierd_bad_input, full_pool_of_leased_blocks_gets_enospc_all_or_nothing, .fini = fx_fini)
{
    static const char *const pool32[] = { "--warm-bytes", "32M", "--no-mlock", "--high-wm", "1",
                                          NULL };
    enum { P = 8, SLOTS = 32, FILL = SLOTS - P };
    kvt_key fill[FILL], batch[4];
    kvt_lease lease[1 + FILL];
    const void *rslots[P];
    void *wslots[4];
    const void *src[4];
    kvt_client *b;
    kvt_ns *nsb;
    kvt_stats st;
    uint8_t *buf;
    int rc;

    fx_start(pool32, MIB, P);
    buf = malloc(4 * (size_t)MIB);
    cr_assert_not_null(buf);
    t_keys(fill, FILL, 94);
    t_keys(batch, 4, 95);
    b = t_connect(&F.d);
    nsb = t_ns(b, MIB);
    rc = kvt_get_lease(nsb, F.chain, P, rslots, &lease[0]);
    cr_assert_eq(rc, P, "lease of the pre-attack chain: %d", rc);
    /* one block at a time, each leased by b as soon as it is committed */
    for (int i = 0; i < FILL; i++) {
        if (i == FILL - 2) {
            /* two slots left: a batch of 4 cannot fit, all or nothing */
            rc = kvt_put_reserve(F.ns, NULL, batch, 4, wslots);
            cr_assert_eq(rc, -ENOSPC, "reserve of 4 with 2 slots free and all else leased: %d "
                                      "(%s), expected -ENOSPC", rc, kvt_strerror(rc));
            st = stats_of(F.c);
            cr_assert_eq(st.reserved, 0, "after a refused batch: %llu blocks stay reserved",
                         (unsigned long long)st.reserved);
            cr_assert_eq(st.tier[KVT_TIER_WARM].bytes_used, (uint64_t)(SLOTS - 2) * MIB,
                         "after a refused batch: %llu bytes used, expected %llu",
                         (unsigned long long)st.tier[KVT_TIER_WARM].bytes_used,
                         (unsigned long long)(SLOTS - 2) * MIB);
            cr_assert_eq(st.index_entries, (uint64_t)(SLOTS - 2), "index entries: %llu",
                         (unsigned long long)st.index_entries);
            cr_assert_eq(kvt_lookup(F.ns, batch, 4, 0, NULL), 0, "a refused key is visible");
        }
        t_fill(buf, MIB, 94000 + (uint64_t)i);
        src[0] = buf;
        rc = kvt_put(F.ns, NULL, &fill[i], 1, src);
        cr_assert_eq(rc, 1, "put of filler %d: %d (%s)", i, rc, kvt_strerror(rc));
        rc = kvt_get_lease(nsb, &fill[i], 1, rslots, &lease[1 + i]);
        cr_assert_eq(rc, 1, "lease of filler %d: %d", i, rc);
    }
    st = stats_of(F.c);
    cr_assert_eq(st.tier[KVT_TIER_WARM].bytes_used, (uint64_t)SLOTS * MIB, "pool not full: %llu",
                 (unsigned long long)st.tier[KVT_TIER_WARM].bytes_used);
    cr_assert_eq(st.leases_active, (uint64_t)SLOTS);
    /* full, every block leased: even one block cannot be placed */
    rc = kvt_put_reserve(F.ns, NULL, batch, 1, wslots);
    cr_assert_eq(rc, -ENOSPC, "reserve of 1 in a full leased pool: %d (%s)", rc,
                 kvt_strerror(rc));
    src[0] = buf;
    rc = kvt_put(F.ns, &F.chain[P - 1], batch, 1, src);
    cr_assert_eq(rc, -ENOSPC, "kvt_put in a full leased pool: %d (%s)", rc, kvt_strerror(rc));
    st = stats_of(F.c);
    cr_assert_eq(st.reserved, 0, "%llu blocks stay reserved", (unsigned long long)st.reserved);
    cr_assert_eq(st.tier[KVT_TIER_WARM].evictions, 0, "a leased block was evicted");
    cr_assert_eq(st.tier[KVT_TIER_WARM].blocks, (uint64_t)SLOTS);
    /* release the fillers, then the chain (most recent: evicted last) */
    for (int i = 0; i < FILL; i++)
        cr_assert_eq(kvt_release(nsb, &lease[1 + i]), 0);
    cr_assert_eq(kvt_release(nsb, &lease[0]), 0);
    stats_of(b); /* the releases were handled */
    for (int i = 0; i < 4; i++) {
        t_fill(buf + (size_t)i * MIB, MIB, 95000 + (uint64_t)i);
        src[i] = buf + (size_t)i * MIB;
    }
    rc = kvt_put(F.ns, NULL, batch, 4, src);
    cr_assert_eq(rc, 4, "put of 4 after the leases went: %d (%s), eviction should make room",
                 rc, kvt_strerror(rc));
    st = stats_of(F.c);
    /* room is made by writing blocks to disk and then letting clean ones go;
     * a retry of the all-or-nothing reserve that still finds too little
     * gives back what it took, so a slow daemon may let more clean blocks go
     * than the 4 it needs (free: they are on disk). Nothing is lost. */
    cr_assert_geq(st.tier[KVT_TIER_WARM].evictions, 4, "evictions: %llu, expected 4 or more",
                  (unsigned long long)st.tier[KVT_TIER_WARM].evictions);
    cr_assert_eq(st.dropped, 0, "%llu blocks dropped although the disk had room",
                 (unsigned long long)st.dropped);
    cr_assert(st.tier[KVT_TIER_WARM].bytes_used >= 4ull * MIB, "%llu bytes used",
              (unsigned long long)st.tier[KVT_TIER_WARM].bytes_used);
    memset(buf, 0, 4 * (size_t)MIB);
    {
        void *dst[4] = { buf, buf + MIB, buf + 2 * (size_t)MIB, buf + 3 * (size_t)MIB };

        cr_assert_eq(kvt_get(nsb, batch, 4, dst), 4);
        for (int i = 0; i < 4; i++)
            cr_assert_eq(t_check(dst[i], MIB, 95000 + (uint64_t)i), -1, "new block %d wrong", i);
    }
    kvt_close(b);
    free(buf);
    /* room was made by writing the least recently used blocks (the chain,
     * leased first) to disk and letting them go: served from there */
    F.disk_ok = true;
    check_served("a full pool of leased blocks");
}

/* ---- a client that sends garbage and vanishes ----------------------------- */

static uint64_t rnd(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

#define FD_SCAN 1024

static bool is_seqpacket(int fd)
{
    int type = 0;
    socklen_t len = sizeof(type);

    return getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) == 0 && type == SOCK_SEQPACKET;
}

/* The child: connect and reserve 4 blocks under the chain's leaf through
 * libkvtier, then write random messages on that connection and exit without
 * closing anything. Exit 0 when it got that far. */
static int garbage_child(const char *sock)
{
    bool before[FD_SCAN];
    kvt_client *c;
    kvt_ns *ns;
    kvt_key keys[4];
    void *slots[4];
    uint64_t s = GARBAGE_SEED;
    int fd = -1;
    kvt_model m = t_model(BLK);

    /* libkvtier's socket is opaque: find it as the one new SEQPACKET fd */
    for (int i = 0; i < FD_SCAN; i++)
        before[i] = is_seqpacket(i);
    if (kvt_connect(sock, &c) || kvt_ns_open(c, &m, &ns))
        return 10;
    t_keys(keys, 4, GARBAGE_SEED);
    if (kvt_put_reserve(ns, &F.chain[CHAIN - 1], keys, 4, slots) != 4)
        return 11;
    for (int i = 0; i < 4; i++)
        t_fill(slots[i], BLK, GARBAGE_SEED + (uint64_t)i);
    for (int i = 0; i < FD_SCAN && fd < 0; i++)
        if (!before[i] && is_seqpacket(i))
            fd = i;
    if (fd < 0)
        return 12;
    for (int i = 0; i < 32; i++) {
        size_t len = 1 + rnd(&s) % 512;

        for (size_t j = 0; j < len; j += 8) {
            uint64_t v = rnd(&s);

            memcpy(msg + j, &v, 8);
        }
        /* the daemon drops us at the first one: later sends may fail */
        (void)send(fd, msg, len, MSG_NOSIGNAL | MSG_DONTWAIT);
    }
    _exit(0);
}

Test(tierd_bad_input, garbage_then_vanish_has_reservations_reclaimed, .fini = fx_fini)
{
    kvt_stats st0, st;
    pid_t pid;
    int rc;

    fx_start(pool64, BLK, CHAIN);
    st0 = stats_of(F.c);
    pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0)
        _exit(garbage_child(F.d.sock));
    rc = t_wait(pid);
    cr_assert_eq(rc, 0, "garbage child: status %d (10 connect, 11 reserve, 12 no socket)", rc);
    /* the daemon sees the garbage, then the EOF, on its next turns */
    for (int i = 0; i < 200; i++) {
        st = stats_of(F.c);
        if (st.reserved == 0 && st.clients == 1)
            break;
        usleep(10000);
    }
    cr_assert_eq(st.reserved, 0, "reservations left by the vanished client: %llu",
                 (unsigned long long)st.reserved);
    cr_assert_eq(st.clients, 1, "clients: %u, expected only the fixture's", st.clients);
    cr_assert_eq(st.reclaimed - st0.reclaimed, 4, "reclaimed: %llu, expected 4",
                 (unsigned long long)(st.reclaimed - st0.reclaimed));
    cr_assert_eq(st.tier[KVT_TIER_WARM].bytes_used, (uint64_t)CHAIN * BLK,
                 "bytes used: %llu, expected the chain's %llu",
                 (unsigned long long)st.tier[KVT_TIER_WARM].bytes_used,
                 (unsigned long long)CHAIN * BLK);
    cr_assert_eq(st.tier[KVT_TIER_WARM].blocks, (uint64_t)CHAIN);
    cr_assert_eq(st.index_entries, (uint64_t)CHAIN, "index entries: %llu (a ghost left?)",
                 (unsigned long long)st.index_entries);
    {
        kvt_key keys[4];

        t_keys(keys, 4, GARBAGE_SEED);
        cr_assert_eq(kvt_lookup(F.ns, keys, 4, 0, NULL), 0, "an uncommitted block is visible");
    }
    st = check_served("garbage from a vanished client");
    expect_proto_errors(&st, 1, "a client's garbage (closed at its first message)");
    /* the chain's leaf lost its reserved children: evictable, so removable */
    cr_assert_eq(kvt_remove(F.ns, F.chain, CHAIN), CHAIN, "the chain is not removable");
}

/* ---- libkvtier's own checks ----------------------------------------------- */

/* A libkvtier call that must return want (an error code, named in the
 * message as written). */
#define EXPECT_RC(call, want)                                                                  \
    do {                                                                                       \
        int rc_ = (call);                                                                      \
        cr_assert_eq(rc_, want, "%s: %d (%s), expected %s", #call, rc_, kvt_strerror(rc_),     \
                     #want);                                                                   \
    } while (0)

/* Counters that move when a request reaches the daemon. */
static uint64_t requests_seen(const kvt_stats *st)
{
    return st->lookups + st->puts + st->gets + st->removes + st->proto_errors + st->misses;
}

Test(tierd_bad_input, client_null_arguments_are_einval, .fini = fx_fini)
{
    const void *cslots[1];
    void *slots[1], *bufs[1];
    const void *cbufs[1];
    uint8_t one[BLK];
    kvt_lease lease = { 0 };
    kvt_stats st0, st;
    const kvt_key *k = F.chain;

    fx_start(pool64, BLK, CHAIN);
    bufs[0] = one;
    cbufs[0] = one;
    st0 = stats_of(F.c);
    EXPECT_RC(kvt_lookup(NULL, k, 1, 0, NULL), -EINVAL);
    EXPECT_RC(kvt_lookup(F.ns, NULL, 1, 0, NULL), -EINVAL);
    EXPECT_RC(kvt_put_reserve(NULL, NULL, k, 1, slots), -EINVAL);
    EXPECT_RC(kvt_put_reserve(F.ns, NULL, NULL, 1, slots), -EINVAL);
    EXPECT_RC(kvt_put_reserve(F.ns, NULL, k, 1, NULL), -EINVAL);
    EXPECT_RC(kvt_get_lease(NULL, k, 1, cslots, &lease), -EINVAL);
    EXPECT_RC(kvt_get_lease(F.ns, NULL, 1, cslots, &lease), -EINVAL);
    EXPECT_RC(kvt_get_lease(F.ns, k, 1, NULL, &lease), -EINVAL);
    EXPECT_RC(kvt_get_lease(F.ns, k, 1, cslots, NULL), -EINVAL);
    EXPECT_RC(kvt_put(NULL, NULL, k, 1, cbufs), -EINVAL);
    EXPECT_RC(kvt_put(F.ns, NULL, NULL, 1, cbufs), -EINVAL);
    EXPECT_RC(kvt_put(F.ns, NULL, k, 1, NULL), -EINVAL);
    EXPECT_RC(kvt_get(NULL, k, 1, bufs), -EINVAL);
    EXPECT_RC(kvt_get(F.ns, NULL, 1, bufs), -EINVAL);
    EXPECT_RC(kvt_get(F.ns, k, 1, NULL), -EINVAL);
    EXPECT_RC(kvt_put_commit(NULL, k, 1), -EINVAL);
    EXPECT_RC(kvt_put_commit(F.ns, NULL, 1), -EINVAL);
    EXPECT_RC(kvt_put_abort(NULL, k, 1), -EINVAL);
    EXPECT_RC(kvt_remove(NULL, k, 1), -EINVAL);
    EXPECT_RC(kvt_remove(F.ns, NULL, 1), -EINVAL);
    EXPECT_RC(kvt_release(NULL, &lease), -EINVAL);
    EXPECT_RC(kvt_release(F.ns, NULL), -EINVAL);
    EXPECT_RC(kvt_stats_get(NULL, &st), -EINVAL);
    EXPECT_RC(kvt_stats_get(F.c, NULL), -EINVAL);
    /* none of it reached the daemon, and the client is not marked dead */
    st = stats_of(F.c);
    cr_assert_eq(requests_seen(&st), requests_seen(&st0),
                 "refused calls reached the daemon (lookups %llu->%llu, puts %llu->%llu, "
                 "gets %llu->%llu)", (unsigned long long)st0.lookups,
                 (unsigned long long)st.lookups, (unsigned long long)st0.puts,
                 (unsigned long long)st.puts, (unsigned long long)st0.gets,
                 (unsigned long long)st.gets);
    cr_assert_eq(kvt_lookup(F.ns, F.chain, CHAIN, 0, NULL), CHAIN, "client unusable afterwards");
    check_served("NULL arguments");
}

Test(tierd_bad_input, client_batch_over_max_is_e2big, .fini = fx_fini)
{
    enum { N = KVT_BATCH_MAX + 1 };
    static kvt_key keys[N];
    static void *slots[N], *bufs[N];
    static const void *cslots[N], *cbufs[N];
    static uint8_t page[4096];
    kvt_lease lease;
    kvt_stats st0, st;
    kvt_ns *ns4k;
    int rc;

    fx_start(pool64, BLK, CHAIN);
    ns4k = t_ns(F.c, 4096);
    t_keys(keys, N, 96);
    for (int i = 0; i < N; i++) {
        bufs[i] = page;
        cbufs[i] = page;
    }
    st0 = stats_of(F.c);
    EXPECT_RC(kvt_put_reserve(ns4k, NULL, keys, N, slots), -E2BIG);
    EXPECT_RC(kvt_put(ns4k, NULL, keys, N, cbufs), -E2BIG);
    EXPECT_RC(kvt_get_lease(ns4k, keys, N, cslots, &lease), -E2BIG);
    EXPECT_RC(kvt_get(ns4k, keys, N, bufs), -E2BIG);
    EXPECT_RC(kvt_put_commit(ns4k, keys, N), -E2BIG);
    EXPECT_RC(kvt_put_abort(ns4k, keys, N), -E2BIG);
    EXPECT_RC(kvt_remove(ns4k, keys, N), -E2BIG);
    st = stats_of(F.c);
    cr_assert_eq(requests_seen(&st), requests_seen(&st0), "refused batches reached the daemon");
    /* exactly KVT_BATCH_MAX is fine */
    rc = kvt_put_reserve(ns4k, NULL, keys, KVT_BATCH_MAX, slots);
    cr_assert_eq(rc, KVT_BATCH_MAX, "reserve of KVT_BATCH_MAX: %d (%s)", rc, kvt_strerror(rc));
    rc = kvt_put_abort(ns4k, keys, KVT_BATCH_MAX);
    cr_assert_eq(rc, KVT_BATCH_MAX, "abort of KVT_BATCH_MAX: %d (%s)", rc, kvt_strerror(rc));
    rc = kvt_get_lease(ns4k, keys, KVT_BATCH_MAX, cslots, &lease);
    cr_assert_eq(rc, 0, "lease of KVT_BATCH_MAX absent keys: %d (%s)", rc, kvt_strerror(rc));
    check_served("batches over KVT_BATCH_MAX (client side)");
}

Test(tierd_bad_input, client_lookup_of_3000_keys_is_split_and_counts_the_leading_run,
     .fini = fx_fini)
{
    enum { N = 3000, PRESENT = 2100, PG = 4096 };
    static kvt_key keys[N], probe[N];
    static uint8_t tiers[N];
    static const void *src[KVT_BATCH_MAX];
    static void *dst[64];
    uint8_t *buf = malloc((size_t)PRESENT * PG);
    kvt_ns *ns4k;
    int rc;

    cr_assert_not_null(buf);
    fx_start(pool64, BLK, CHAIN);
    ns4k = t_ns(F.c, PG);
    t_keys(keys, N, 97);
    for (int i = 0; i < PRESENT; i++)
        t_fill(buf + (size_t)i * PG, PG, 97000 + (uint64_t)i);
    /* one chain of 2100 blocks, put in batches of at most KVT_BATCH_MAX */
    for (int at = 0; at < PRESENT; at += KVT_BATCH_MAX) {
        int n = PRESENT - at < KVT_BATCH_MAX ? PRESENT - at : KVT_BATCH_MAX;

        for (int i = 0; i < n; i++)
            src[i] = buf + (size_t)(at + i) * PG;
        rc = kvt_put(ns4k, at ? &keys[at - 1] : NULL, keys + at, (size_t)n, src);
        cr_assert_eq(rc, n, "put of keys %d..%d: %d (%s)", at, at + n, rc, kvt_strerror(rc));
    }
    memset(tiers, 0xee, sizeof(tiers));
    rc = kvt_lookup(ns4k, keys, N, 0, tiers);
    cr_assert_eq(rc, PRESENT, "lookup of %d keys (%d present): %d", N, PRESENT, rc);
    for (int i = 0; i < N; i++)
        cr_assert_eq(tiers[i], i < PRESENT ? KVT_TIER_WARM : KVT_TIER_NONE,
                     "tiers[%d] = %d", i, tiers[i]);
    rc = kvt_lookup(ns4k, keys, N, 0, NULL);
    cr_assert_eq(rc, PRESENT, "lookup of %d keys without tiers: %d", N, rc);
    rc = kvt_lookup(ns4k, keys, 2 * KVT_BATCH_MAX, 0, NULL);
    cr_assert_eq(rc, 2 * KVT_BATCH_MAX, "lookup of exactly two batches: %d", rc);
    /* holes: in the second batch, and right on a batch boundary */
    {
        static const int holes[] = { 1500, KVT_BATCH_MAX, KVT_BATCH_MAX - 1, 0, PRESENT - 1 };

        for (size_t h = 0; h < sizeof(holes) / sizeof(holes[0]); h++) {
            memcpy(probe, keys, sizeof(keys));
            probe[holes[h]].b[0] ^= 1;
            rc = kvt_lookup(ns4k, probe, N, 0, tiers);
            cr_assert_eq(rc, holes[h], "lookup with a hole at %d: %d", holes[h], rc);
            cr_assert_eq(tiers[holes[h]], KVT_TIER_NONE);
            if (holes[h] + 1 < PRESENT)
                cr_assert_eq(tiers[PRESENT - 1], KVT_TIER_WARM, "a key after the hole at %d",
                             holes[h]);
            rc = kvt_lookup(ns4k, probe, N, 0, NULL);
            cr_assert_eq(rc, holes[h], "lookup without tiers, hole at %d: %d", holes[h], rc);
        }
    }
    /* the blocks around the first batch boundary read back right */
    for (int i = 0; i < 64; i++)
        dst[i] = buf + (size_t)i * PG;
    memset(buf, 0, 64 * PG);
    rc = kvt_get(ns4k, keys + KVT_BATCH_MAX - 32, 64, dst);
    cr_assert_eq(rc, 64, "get across the batch boundary: %d", rc);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(t_check(dst[i], PG, 97000 + (uint64_t)(KVT_BATCH_MAX - 32 + i)), -1,
                     "block %d wrong", KVT_BATCH_MAX - 32 + i);
    free(buf);
    check_served("a 3000-key lookup");
}

Test(tierd_bad_input, watermarks_outside_zero_to_one_nan_included_are_refused)
{
    const char *vals[] = { "nan", "-nan", "0", "1.5", "inf", "0.5x" };
    char dir[256], err[4096];

    t_tmpdir("kvt-test", dir, sizeof(dir));
    for (size_t i = 0; i < sizeof(vals) / sizeof(vals[0]); i++) {
        const char *args[] = { "--low-wm", vals[i], NULL };
        int st = t_tierd_exit(dir, args, err, sizeof(err));

        cr_expect_eq(st, 64, "--low-wm %s: expected exit 64 (EX_USAGE), got %d: %s", vals[i],
                     st, err);
        cr_expect(strstr(err, "want a fraction in (0, 1]"), "--low-wm %s: %s", vals[i], err);
    }
    t_rmtree(dir);
}

/* The eviction policy: lru unless --evict-policy says, the log names the
 * one in force, and a name tierd does not know is refused, saying which it
 * knows. */
Test(tierd_bad_input, the_eviction_policy_is_lru_unless_told_and_a_bad_one_is_refused)
{
    const char *pols[] = { NULL, "lru", "keep", "reuse" };
    const char *want[] = { "evicting by lru", "evicting by lru", "evicting by keep",
                           "evicting by reuse" };
    const char *bad[] = { "LRU", "", "fifo" };
    char dir[256], err[4096];

    for (size_t i = 0; i < sizeof(pols) / sizeof(pols[0]); i++) {
        const char *args[] = { "--evict-policy", pols[i], NULL };
        struct t_tierd d;
        char line[512];
        bool found = false;
        FILE *log;

        t_tierd_start(&d, pols[i] ? args : NULL); /* it logs its tiers before it listens */
        log = fopen(d.log, "r");
        cr_assert_not_null(log, "%s (KVT_TEST_VERBOSE sends tierd's log elsewhere)", d.log);
        while (fgets(line, sizeof(line), log))
            found |= strstr(line, "warm tier") && strstr(line, want[i]);
        fclose(log);
        cr_expect(found, "--evict-policy %s: no \"%s\" in %s", pols[i] ? pols[i] : "(none)",
                  want[i], d.log);
        t_tierd_stop(&d);
    }
    t_tmpdir("kvt-test", dir, sizeof(dir));
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        const char *args[] = { "--evict-policy", bad[i], NULL };
        int st = t_tierd_exit(dir, args, err, sizeof(err));

        cr_expect_eq(st, 64, "--evict-policy '%s': expected exit 64 (EX_USAGE), got %d: %s",
                     bad[i], st, err);
        cr_expect(strstr(err, "want lru, keep or reuse"), "--evict-policy '%s': %s", bad[i], err);
    }
    t_rmtree(dir);
}
