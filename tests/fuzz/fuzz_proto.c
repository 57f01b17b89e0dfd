/* SPDX-License-Identifier: MIT */
/*
 * fuzz_proto.c - libFuzzer harness for tierd's side of the protocol: the
 * session code (tierd/sess.c, tenant.c) and the store behind it, in this
 * process, facing a hostile client.
 *
 * Each input is one client: it connects to a real listening socket (the
 * session is made by sess_on_accept, as in tierd), says HELLO and opens a
 * namespace properly, then sends the input's records (fuzz_wire.h: framed
 * requests of any op and body, or raw messages) one by one, each followed by
 * one turn of tierd's event loop; replies are read and dropped. The pools
 * tierd passes (the warm pool at HELLO, the hot pool at HOT_ATTACH) are
 * kept, and a record's descriptor bits attack them first: cut to nothing
 * (which must fail: the pools are sealed), grown (likewise), holes punched
 * in them, or the pool passed back to tierd and closed mid-request. Then it
 * hangs up and the loop turns once more.
 * Checked after every input: the store's invariants hold (tier_check), the
 * session is gone, and everything it held (leases, reservations, and its
 * tenant's count of lease and pin bytes) is back.
 * The store lives across inputs, like a daemon serving client after client.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "ev.h"
#include "fuzz_wire.h"
#include "sess.h"
#include "t_wire.h"
#include "tenant.h"
#include "tier.h"
#include "tier_hot.h"
#include "tierd.h"

static struct tierd d = { .listen_fd = -1, .handshake_ms = 1000 };
static struct tenant *tn;
static struct sockaddr_un addr = { .sun_family = AF_UNIX };
static socklen_t addr_len;
static int kick_fd = -1; /* written before each turn: the loop always has an event */

static void on_kick(struct ev_loop *l, int fd, uint32_t events, void *ctx)
{
    uint64_t v;

    (void)l;
    (void)events;
    (void)ctx;
    if (read(fd, &v, sizeof(v)) < 0)
        return;
}

/* The hot tier's copies (a get of a hot block is copied down for it). */
static void on_hot(struct ev_loop *l, int fd, uint32_t events, void *ctx)
{
    (void)l;
    (void)fd;
    (void)events;
    (void)ctx;
    sess_expire();
    tier_poll(tn->store, false);
}

/* One turn of the loop: whatever is ready, then the mover, as tierd. */
static void stop_after_turn(void *ctx)
{
    struct tierd *x = ctx;

    tier_maintain(tn->store);
    sess_flush_check(x);
    sess_reap();
    ev_stop(x->loop);
}

static void turn(void)
{
    uint64_t one = 1;

    if (write(kick_fd, &one, sizeof(one)) < 0)
        abort();
    ev_run(d.loop, stop_after_turn, &d);
}

static void setup(void)
{
    struct tenant_defaults def = { .data = "/nonexistent", .warm_bytes = 32u << 20,
                                   .no_cold = true, .hot_bytes = 8u << 20 };
    struct tier_hot_cfg hc = { .kind = TIER_HOT_EMU, .bytes = 8u << 20 };
    struct tier_cfg tc = { .warm_bytes = 32u << 20, .high_wm = 0.9, .low_wm = 0.7,
                           .ready = sess_on_ready, .ready_ctx = &d };
    char err[256];

    tierd_quiet = true; /* refusals are expected by the thousand */
    d.uid = geteuid();
    d.max_clients = 64;
    d.start_ms = tierd_now_ms();
    if (tenant_config(&d, NULL, &def, err, sizeof(err)) < 0)
        abort();
    tn = &d.tenants[0];
    if (tier_hot_open(&hc, &tn->hot) < 0)
        abort();
    tc.hot = tn->hot;
    if (tier_create(&tc, &tn->store) < 0 || ev_loop_create(&d.loop) < 0)
        abort();
    /* an abstract socket: nothing on disk to clean up */
    snprintf(addr.sun_path + 1, sizeof(addr.sun_path) - 1, "kvt-fuzz-proto-%d", (int)getpid());
    addr_len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 +
                           strlen(addr.sun_path + 1));
    d.listen_fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    kick_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (d.listen_fd < 0 || kick_fd < 0 ||
        bind(d.listen_fd, (struct sockaddr *)&addr, addr_len) < 0 ||
        listen(d.listen_fd, 16) < 0 || ev_add(d.loop, d.listen_fd, sess_on_accept, &d) < 0 ||
        ev_add(d.loop, kick_fd, on_kick, NULL) < 0 ||
        ev_add(d.loop, tier_hot_fd(tn->store), on_hot, NULL) < 0 || sess_init(&d) < 0)
        abort();
}

/* The pools this input's client was passed: warm (HELLO), hot
 * (HOT_ATTACH); -1 until then. */
static int pools[2] = { -1, -1 };

/* Read and drop every reply waiting; the first pool of each kind passed is
 * kept, other descriptors closed. */
static void drain(int c)
{
    struct kvt_wire_hdr h;
    int fd;

    while (t_wire_recv(c, &h, NULL, 0, &fd, 0) > 0) {
        if (fd < 0)
            continue;
        if (pools[0] < 0)
            pools[0] = fd;
        else if (pools[1] < 0)
            pools[1] = fd;
        else
            close(fd);
    }
}

/* What a hostile client does to a pool it holds before a request (the
 * record's FZ_FD_* bits; its bytes place a hole). The
 * pool is sealed: resizing must fail, else the daemon could fault on it.
 * Returns the descriptor to pass along with the request, or -1. */
static int attack(const struct fz_rec *r)
{
    int which = (int)(r->len & 1), fd = pools[which], kind; /* odd length: hot */
    struct stat st;
    uint64_t off = 0;

    kind = (int)((r->mode & FZ_M_FD_MASK) >> FZ_M_FD_SHIFT);
    if (fd < 0 || kind == FZ_FD_NONE || fstat(fd, &st) < 0)
        return -1;
    for (size_t i = 1; i < r->len && i < 5; i++)
        off = off << 8 | r->buf[i];
    switch (kind) {
    case FZ_FD_A:
        if (ftruncate(fd, 0) == 0 || ftruncate(fd, st.st_size + 4096) == 0) {
            fprintf(stderr, "fuzz_proto: a client resized a pool tierd maps\n");
            __builtin_trap();
        }
        return -1;
    case FZ_FD_B: /* zeroes what it covers: the tenant's own blocks, nothing more */
        fallocate(fd, FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE,
                  (off_t)((off % (uint64_t)st.st_size) & ~4095ull), 65536);
        return -1;
    default: /* FZ_FD_C: handed back with the request (tierd hangs up), then closed */
        pools[which] = -1;
        return fd;
    }
}

/* A framed request with a well-formed header. */
static void request(int c, uint16_t op, uint32_t id, const void *body, size_t len)
{
    static uint8_t msg[sizeof(struct kvt_wire_hdr) + 512];
    struct kvt_wire_hdr h = { .magic = KVT_WIRE_MAGIC, .version = KVT_WIRE_VERSION, .op = op,
                              .req_id = id, .body_len = (uint32_t)len };

    memcpy(msg, &h, sizeof(h));
    memcpy(msg + sizeof(h), body, len);
    t_wire_send_fd(c, msg, sizeof(h) + len, NULL, 0, -1, MSG_DONTWAIT);
    turn();
    drain(c);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    static uint8_t msg[KVT_WIRE_MSG_MAX + 1024];
    struct kvt_wire_hello_req hello = { .pid = 1 };
    struct kvt_wire_ns_req ns = { .block_bytes = 65536, .block_tokens = 16, .tp_size = 1 };
    struct fz_in in = { data, size };
    struct fz_rec r;
    struct tier_stats st;
    char why[256];
    uint32_t id = 1;
    int c;

    if (!d.loop)
        setup();
    strcpy(ns.model_id, "fuzz/model");
    c = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (c < 0 || connect(c, (struct sockaddr *)&addr, addr_len) < 0)
        abort();
    turn(); /* accepted */
    request(c, KVT_OP_HELLO, id++, &hello, sizeof(hello));
    request(c, KVT_OP_NS_OPEN, id++, &ns, sizeof(ns)); /* namespace 1, blocks of 64 KiB */
    while (fz_next(&in, &r) == 0) {
        /* a rotating op when the record names none: every handler gets its turn */
        size_t len = fz_build(&r, (uint16_t)(1 + id % (KVT_OP_MAX_ - 1)), id, msg, sizeof(msg));

        int pass = attack(&r);

        id++;
        t_wire_send_fd(c, msg, len, NULL, 0, pass, MSG_DONTWAIT);
        if (pass >= 0)
            close(pass);
        turn();
        drain(c);
    }
    close(c);
    for (int i = 0; i < 2; i++)
        if (pools[i] >= 0) {
            close(pools[i]);
            pools[i] = -1;
        }
    turn(); /* the session sees the hang-up and gives everything back */
    if (d.clients != 0 || tn->clients != 0)
        __builtin_trap(); /* a session outlived its client */
    if (tn->lease_bytes || tn->pinned_bytes) {
        fprintf(stderr, "fuzz_proto: the tenant still counts %llu bytes of leases, %llu of "
                "pins, for a gone client\n", (unsigned long long)tn->lease_bytes,
                (unsigned long long)tn->pinned_bytes);
        __builtin_trap();
    }
    if (tier_check(tn->store, why, sizeof(why)) != 0) {
        fprintf(stderr, "fuzz_proto: store inconsistent: %s\n", why);
        __builtin_trap();
    }
    tier_stats_get(tn->store, &st);
    if (st.leases_active || st.reserved) {
        fprintf(stderr, "fuzz_proto: %llu leases, %llu reservations left by a gone client\n",
                (unsigned long long)st.leases_active, (unsigned long long)st.reserved);
        __builtin_trap();
    }
    return 0;
}
