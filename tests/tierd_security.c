/* SPDX-License-Identifier: MIT */
/*
 * tierd_security.c - the attacks of a local user who may connect as some
 * uid, each tried against a real tierd and shown to fail: crashing tierd by
 * resizing the pools it maps, holding every connection slot (unadmitted or
 * admitted), growing tierd without bound through leases, learning of other
 * tenants from STATS and ids, and leading root's writes elsewhere through a
 * data folder prepared beforehand. Clients of other uids are forked
 * children that setuid, so most tests need root (CI runs as root).
 *
 * The remote tier's namespace identity and the metrics page have their own
 * tests (tierd_remote.c, tierd_metrics_sec.c).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "kvt_wire.h"
#include "t.h"
#include "t_wire.h"

#ifndef F_SEAL_FUTURE_WRITE
#define F_SEAL_FUTURE_WRITE 0x0010
#endif

#define BLK (64u << 10)
#define ALICE T_ALICE
#define BOB T_BOB
#define STRANGER T_STRANGER
#define config_two t_config_two

static void need_root(void)
{
    if (geteuid() != 0)
        cr_skip_test("needs root to run clients as other uids (CI runs as root)");
}

/* ---- a hostile client's own socket ------------------------------------ */

#define sock_open t_wire_connect

/* Send request op with body, without waiting for the reply: 0, or -errno. */
static int sock_send(int fd, uint16_t op, const void *body, uint32_t len)
{
    struct kvt_wire_hdr h = t_wire_hdr(op, 7, 0, len);
    ssize_t r = t_wire_send2(fd, &h, sizeof(h), body, len);

    return r < 0 ? (int)r : 0;
}

/* Send request op with body, wait for its reply (5 s at most): its status
 * (KVT_EDISCONNECTED when tierd closed), the reply's body into body, a
 * passed descriptor into *pass_fd (else -1). */
static int sock_call(int fd, uint16_t op, const void *body, uint32_t len, void *rep, size_t cap,
                     int *pass_fd)
{
    struct kvt_wire_hdr h;
    ssize_t r;

    if (pass_fd)
        *pass_fd = -1;
    if (sock_send(fd, op, body, len) < 0)
        return KVT_EDISCONNECTED;
    r = t_wire_recv(fd, &h, rep, cap, pass_fd, 5000);
    if (r == -ETIMEDOUT)
        return -ETIMEDOUT;
    if (r < (ssize_t)sizeof(h))
        return KVT_EDISCONNECTED;
    return h.status;
}

/* Whether tierd hung up fd within ms (its HELLO deadline, a refusal). */
static bool hung_up_within(int fd, int ms)
{
    struct pollfd p = { .fd = fd, .events = POLLIN };
    char b[64];

    return poll(&p, 1, ms) == 1 && recv(fd, b, sizeof(b), MSG_DONTWAIT) == 0;
}

/* ---- the pools: a client cannot resize them under tierd --------------- */

/* What a hostile client tries on a pool it was passed: cut it to nothing,
 * grow it, seal it against the writable mappings of its tenant's next
 * clients. Returns how many of the three succeeded. */
static int attack_pool(int pool, const char *what)
{
    struct stat st;
    int won = 0;

    cr_assert_eq(fstat(pool, &st), 0);
    if (ftruncate(pool, st.st_size * 2) == 0) {
        cr_log_error("%s: a client doubled the pool", what);
        won++;
    }
    if (fcntl(pool, F_ADD_SEALS, F_SEAL_FUTURE_WRITE) == 0) {
        cr_log_error("%s: a client sealed the pool against writers", what);
        won++;
    }
    if (ftruncate(pool, 0) == 0) { /* last: what crashed tierd */
        cr_log_error("%s: a client cut the pool to 0 bytes", what);
        won++;
    } else {
        cr_expect_eq(errno, EPERM, "%s: ftruncate: %s", what, strerror(errno));
    }
    return won;
}

Test(tierd_security, a_client_cannot_resize_or_seal_the_pools_and_tierd_survives_it)
{
    static const char *const args[] = { "--warm-bytes", "32M", "--hot-bytes", "8M",
                                        "--no-mlock", NULL };
    struct kvt_wire_hello_req hello = { .pid = (uint32_t)getpid() };
    struct kvt_wire_hello_rep rep;
    struct t_tierd d;
    static uint8_t buf[8][BLK];
    void *slots[8], *dst[8];
    kvt_client *c;
    kvt_ns *ns;
    kvt_key k[8];
    kvt_hot_info hinfo;
    int fd, warm, hot, won;

    t_tierd_start(&d, args);
    fd = sock_open(d.sock);
    cr_assert_geq(fd, 0);
    cr_assert_eq(sock_call(fd, KVT_OP_HELLO, &hello, sizeof(hello), &rep, sizeof(rep), &warm), 0);
    cr_assert_geq(warm, 0, "HELLO passed no pool");
    cr_assert_eq(sock_call(fd, KVT_OP_HOT_ATTACH, NULL, 0, NULL, 0, &hot), 0);
    cr_assert_geq(hot, 0, "HOT_ATTACH passed no (emulated) pool");
    won = attack_pool(warm, "warm pool") + attack_pool(hot, "hot pool");

    /* what the cut pool would have crashed: a durable commit checksums its
     * blocks in the warm pool, a hot put copies down from the hot pool */
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    t_keys(k, 8, 1);
    for (int i = 0; i < 8; i++) {
        t_fill(buf[i], BLK, 10 + (uint64_t)i);
        dst[i] = buf[i];
    }
    cr_assert_eq(kvt_put_reserve(ns, NULL, k, 4, slots), 4);
    for (int i = 0; i < 4; i++)
        memcpy(slots[i], buf[i], BLK);
    cr_assert_eq(kvt_put_commit_flags(ns, k, 4, KVT_COMMIT_DURABLE), 4);
    cr_assert_eq(kvt_hot_attach(c, &hinfo), 0);
    cr_assert_eq(kvt_put_reserve_flags(ns, &k[3], k + 4, 4, slots, KVT_RESERVE_HOT), 4);
    for (int i = 0; i < 4; i++)
        memcpy(slots[i], buf[4 + i], BLK);
    cr_assert_eq(kvt_put_commit_flags(ns, k + 4, 4, KVT_COMMIT_DURABLE), 4);
    memset(buf, 0, sizeof(buf));
    cr_assert_eq(kvt_get(ns, k, 8, dst), 8);
    for (int i = 0; i < 8; i++)
        cr_assert_eq(t_check(buf[i], BLK, 10 + (uint64_t)i), -1, "block %d is wrong", i);
    kvt_close(c);
    close(warm);
    close(hot);
    close(fd);
    cr_assert_eq(won, 0, "a client resized or sealed a pool tierd maps (%d attacks won)", won);
    t_tierd_stop(&d); /* exit status 0: it did not die of SIGBUS */
}

/* ---- connection slots ------------------------------------------------- */

#define FLOOD 200

/* A uid no tenant admits opens FLOOD connections and says nothing on them;
 * it reports on pipe *arg once they are all open, then how many tierd hung
 * up within 5 s (it must hang up every one: refused at accept, or at its
 * HELLO deadline). */
static int stranger_floods(const char *sock, void *arg)
{
    int *pipe_fds = arg, fds[FLOOD], open_n = 0, closed = 0;
    char go;

    for (int i = 0; i < FLOOD; i++)
        if ((fds[i] = sock_open(sock)) >= 0)
            open_n++;
    if (write(pipe_fds[1], &open_n, sizeof(open_n)) != sizeof(open_n))
        return 20;
    if (read(pipe_fds[0], &go, 1) != 1)
        return 21;
    for (int i = 0; i < FLOOD; i++)
        if (fds[i] >= 0 && hung_up_within(fds[i], 5000))
            closed++;
    return closed == open_n ? 0 : 22;
}

Test(tierd_security, an_idle_flood_of_unadmitted_peers_leaves_every_tenant_served)
{
    const char *cfg;
    struct t_tierd d;
    int up[2], down[2], io[2], opened = 0, st, lines = 0;
    char line[512];
    pid_t pid;
    FILE *log;

    need_root();
    cfg = t_config(config_two);
    t_tierd_start(&d, (const char *const[]){ "--config", cfg, "--max-clients", "32",
                                             "--handshake-timeout-ms", "400", NULL });
    cr_assert_eq(chmod(d.dir, 0755), 0); /* the other uids must reach the socket */
    cr_assert_eq(pipe(up), 0);
    cr_assert_eq(pipe(down), 0);
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        io[0] = down[0];
        io[1] = up[1];
        if (setgroups(0, NULL) < 0 || setgid(STRANGER) < 0 || setuid(STRANGER) < 0)
            _exit(100);
        _exit(stranger_floods(d.sock, io));
    }
    cr_assert_eq(read(up[0], &opened, sizeof(opened)), sizeof(opened));
    cr_assert_gt(opened, 32, "the flood opened only %d connections", opened);
    /* while the FLOOD idle connections are open: both tenants connect */
    st = t_as_user(BOB, t_user_puts, d.sock, NULL);
    cr_assert_eq(st, 0, "bob during the flood: exit %d%s", st,
                 st == 9 ? " (-EUSERS: the flood holds the client slots)" : "");
    {
        kvt_client *c = t_connect(&d); /* root: alice */

        kvt_close(c);
    }
    cr_assert_eq(write(down[1], "g", 1), 1);
    st = t_wait(pid);
    cr_assert_eq(st, 0, "the stranger's connections were not all hung up (exit %d)", st);
    /* and the log did not get a line per refusal */
    log = fopen(d.log, "r");
    cr_assert_not_null(log);
    while (fgets(line, sizeof(line), log))
        lines += strstr(line, "refused") != NULL;
    fclose(log);
    cr_assert_leq(lines, 10, "%d log lines of refusals for %d refused connections", lines, opened);
    cr_assert_geq(lines, 1, "the refusals were not logged at all");
    t_tierd_stop(&d);
    unlink(cfg);
}

/* Bob opens connections until refused; returns how many he got (exit
 * status), 200 + errno when the refusal was not -EUSERS. */
static int bob_connects_all(const char *sock, void *arg)
{
    kvt_client *c[16];
    int n = 0, rc = 0;

    (void)arg;
    while (n < 16 && (rc = kvt_connect(sock, &c[n])) == 0)
        n++;
    if (n < 16 && rc != -EUSERS)
        return 200 + (-rc & 0x3f);
    for (int i = 0; i < n; i++)
        kvt_close(c[i]);
    return n;
}

Test(tierd_security, a_tenant_has_its_share_of_the_connections_and_no_more)
{
    static const char *const conf =
        "[tenant.alice]\n"
        "uids = 0, 40001\n"
        "warm_bytes = 8M\n"
        "[tenant.bob]\n"
        "uids = 40002\n"
        "warm_bytes = 8M\n"
        "max_clients = 3\n";
    const char *cfg;
    struct t_tierd d;
    kvt_client *c[8];
    int n = 0, rc = 0, st;

    need_root();
    cfg = t_config(conf);
    t_tierd_start(&d, (const char *const[]){ "--config", cfg, "--max-clients", "8", NULL });
    cr_assert_eq(chmod(d.dir, 0755), 0);
    /* alice: an even share of --max-clients 8 between two tenants */
    while (n < 8 && (rc = kvt_connect(d.sock, &c[n])) == 0)
        n++;
    cr_assert_eq(n, 4, "alice got %d connections of 8, her share is 4", n);
    cr_assert_eq(rc, -EUSERS, "her 5th: %d (%s)", rc, kvt_strerror(rc));
    cr_assert(strstr(kvt_strerror(rc), "max_clients"), "%s", kvt_strerror(rc));
    /* bob, while alice holds hers: his own max_clients */
    st = t_as_user(BOB, bob_connects_all, d.sock, NULL);
    cr_assert_eq(st, 3, "bob got %d connections, his max_clients is 3", st);
    for (int i = 0; i < n; i++)
        kvt_close(c[i]);
    t_tierd_stop(&d);
    /* fewer clients than tenants: some tenant could never connect */
    {
        char dir[256], err[4096];

        t_tmpdir("kvt-test", dir, sizeof(dir));
        st = t_tierd_exit(dir, (const char *const[]){ "--config", cfg, "--max-clients", "1",
                                                      NULL },
                          err, sizeof(err));
        cr_expect_eq(st, EX_CONFIG, "exit %d: %s", st, err);
        cr_expect(strstr(err, "2 tenants but --max-clients 1"), "%s", err);
        t_rmtree(dir);
    }
    unlink(cfg);
}

Test(tierd_security, an_admitted_peer_that_never_says_hello_is_hung_up)
{
    struct t_tierd d;
    kvt_client *c;
    kvt_key k[1];
    int fd;

    t_tierd_start(&d, (const char *const[]){ "--handshake-timeout-ms", "300", NULL });
    fd = sock_open(d.sock);
    cr_assert_geq(fd, 0);
    cr_assert(hung_up_within(fd, 10000), "an idle connection outlived its HELLO deadline");
    close(fd);
    c = t_connect(&d); /* one that says HELLO at once is served, and stays */
    usleep(600 * 1000);
    t_keys(k, 1, 5);
    cr_assert_eq(kvt_lookup(t_ns(c, BLK), k, 1, 0, NULL), 0);
    kvt_close(c);
    t_tierd_stop(&d);
}

/* ---- a session closed by another's closing ----------------------------- */

/* A session on a raw socket: HELLO and the namespace of t_ns(BLK-sized
 * 4 KiB blocks); its namespace id in *ns. */
static int raw_session(const char *sock, uint32_t *ns)
{
    struct kvt_wire_hello_req hello = { .pid = 1 };
    struct kvt_wire_ns_req r = { .block_bytes = 4096, .block_tokens = 16, .tp_size = 1 };
    struct kvt_wire_ns_rep rep = { 0 };
    int fd = sock_open(sock), pool = -1;

    cr_assert_geq(fd, 0);
    cr_assert_eq(sock_call(fd, KVT_OP_HELLO, &hello, sizeof(hello), NULL, 0, &pool), 0);
    close(pool);
    strcpy(r.model_id, "test/model");
    strcpy(r.dtype, "bf16");
    strcpy(r.layout, "test");
    cr_assert_eq(sock_call(fd, KVT_OP_NS_OPEN, &r, sizeof(r), &rep, sizeof(rep), NULL), 0);
    *ns = rep.ns_id;
    return fd;
}

/* A keys request for n keys of seed (t_keys), blocks of 4 KiB, into buf:
 * its length. */
static uint32_t keys_req(uint8_t *buf, uint32_t ns, uint32_t flags, uint32_t n, uint64_t seed)
{
    struct kvt_wire_keys_req r = { .ns_id = ns, .n = n, .block_bytes = 4096, .flags = flags };

    memcpy(buf, &r, sizeof(r));
    t_keys((kvt_key *)(buf + sizeof(r)), n, seed);
    return (uint32_t)(sizeof(r) + n * sizeof(kvt_key));
}

static uint32_t one_key(uint8_t *buf, uint32_t ns, uint32_t flags, uint64_t seed)
{
    return keys_req(buf, ns, flags, 1, seed);
}

/* fd's session reserves the key of seed. */
static void reserve_key(int fd, uint32_t ns, uint64_t seed)
{
    uint8_t body[256];
    uint32_t len = one_key(body, ns, 0, seed);

    cr_assert_eq(sock_call(fd, KVT_OP_PUT_RESERVE, body, len, NULL, 0, NULL), 0);
}

/* fd's session asks for a durable commit of the key of seed, which another
 * session reserved: it waits (its reply is not read here). */
static void commit_key_waiting(int fd, uint32_t ns, uint64_t seed)
{
    uint8_t body[256];
    uint32_t len = one_key(body, ns, KVT_WIRE_KF_DURABLE, seed);

    cr_assert_eq(sock_send(fd, KVT_OP_PUT_COMMIT, body, len), 0);
    usleep(50 * 1000);
}

/* A answers its durable commit late (it waits on C's key) and is closed
 * because it reads nothing; closing gives back A's own reservation, which B's
 * durable commit waits on; B's reply fails too and B closes from inside A's
 * close, while the deadline walk holds B as its next (a use after free,
 * seen under ASan, before sessions were freed only after each turn). */
Test(tierd_security, a_session_closed_inside_another_ones_close_is_not_used_after_it)
{
    struct t_tierd d;
    uint32_t na, nb, nc;
    kvt_client *c;
    kvt_stats st;
    int a, b, cc;

    t_tierd_start(&d, (const char *const[]){ "--durable-wait-ms", "300", NULL });
    cc = raw_session(d.sock, &nc);
    b = raw_session(d.sock, &nb);
    a = raw_session(d.sock, &na);
    reserve_key(cc, nc, 2);
    reserve_key(a, na, 1);
    commit_key_waiting(a, na, 2); /* A waits for C */
    commit_key_waiting(b, nb, 1); /* B waits for A */
    cr_assert_eq(shutdown(a, SHUT_RD), 0); /* neither reads its reply: tierd gets EPIPE */
    cr_assert_eq(shutdown(b, SHUT_RD), 0);
    usleep(1000 * 1000);
    c = t_connect(&d); /* served, and only C and this one are left */
    cr_assert_eq(kvt_stats_get(c, &st), 0);
    cr_assert_eq(st.clients, 2, "%u clients: A and B should be gone", st.clients);
    kvt_close(c);
    close(a);
    close(b);
    close(cc);
    t_tierd_stop(&d); /* exit 0: under ASan, no use after free */
}

/* The same inside the store: S hangs up, which fails W's durable commit
 * waiting on S's key; W reads nothing, so its reply fails and it closes
 * from within, failing V's wait on W's key, which the store's loop over its
 * waits pointed into (a use after free in dwaits_fail, under ASan). */
Test(tierd_security, a_wait_failed_from_within_another_failed_wait_is_not_used_after_it)
{
    struct t_tierd d;
    uint32_t ns_s, ns_w, ns_v;
    int s, w, v;

    t_tierd_start(&d, (const char *const[]){ "--durable-wait-ms", "5000", NULL });
    s = raw_session(d.sock, &ns_s);
    w = raw_session(d.sock, &ns_w);
    v = raw_session(d.sock, &ns_v);
    reserve_key(s, ns_s, 1);        /* S reserves X */
    reserve_key(w, ns_w, 2);        /* W reserves Z */
    commit_key_waiting(w, ns_w, 1); /* W waits for X */
    commit_key_waiting(v, ns_v, 2); /* V waits for Z */
    cr_assert_eq(shutdown(w, SHUT_RD), 0);
    close(s);
    /* V is told: Z will never be stored */
    cr_assert_eq(sock_call(v, KVT_OP_STATS, NULL, 0, NULL, 0, NULL), -ENODATA,
                 "V's durable commit of a key whose writer went");
    close(w);
    close(v);
    t_tierd_stop(&d); /* exit 0: under ASan, no use after free */
}

/* ---- lease memory ----------------------------------------------------- */

static uint64_t rss_kib(pid_t pid);

/* Y's durable commits of 1,024 keys X reserved and never commits, each
 * answered -EAGAIN at its bound, over and over: each left 1,024 waits in
 * the store, which the next walked again (memory without bound, and the
 * one thread every tenant shares stalled). */
Test(tierd_security, durable_commits_that_time_out_leave_nothing_behind)
{
    static _Alignas(8) uint8_t body[KVT_WIRE_MSG_MAX];
    struct t_tierd d;
    uint64_t before, after, bound;
    uint32_t nx, ny, len;
    int x, y, rc;

#ifdef __SANITIZE_ADDRESS__
    {
        /* ASan keeps what is freed in quarantine: tierd's memory would grow
         * whether or not it frees its waits, unless freed memory is reused */
        char opts[512];
        const char *was = getenv("ASAN_OPTIONS");

        snprintf(opts, sizeof(opts), "%s%squarantine_size_mb=0:thread_local_quarantine_size_kb=0",
                 was ? was : "", was && *was ? ":" : "");
        setenv("ASAN_OPTIONS", opts, 1);
    }
#endif
    /* memcheck holds freed blocks back too (20 MB of them by default) */
    setenv("VALGRIND_OPTS", "--freelist-vol=1000000", 1);
    t_tierd_start(&d, (const char *const[]){ "--durable-wait-ms", "1", NULL });
    x = raw_session(d.sock, &nx);
    y = raw_session(d.sock, &ny);
    len = keys_req(body, nx, 0, 1024, 5);
    cr_assert_eq(sock_call(x, KVT_OP_PUT_RESERVE, body, len, NULL, 0, NULL), 0);
    len = keys_req(body, ny, KVT_WIRE_KF_DURABLE, 1024, 5);
    cr_assert_eq(sock_call(y, KVT_OP_PUT_COMMIT, body, len, NULL, 0, NULL), -EAGAIN);
    before = rss_kib(d.pid);
    for (int i = 0; i < 400; i++) {
        rc = sock_call(y, KVT_OP_PUT_COMMIT, body, len, NULL, 0, NULL);
        cr_assert_eq(rc, -EAGAIN, "commit %d: %d (%s)", i, rc, kvt_strerror(rc));
    }
    after = rss_kib(d.pid);
    /* unbounded: 400 x 1,024 waits of 24 bytes and more, about 13 MiB (and
     * some 30 MiB under memcheck, whose own bookkeeping grows a little even
     * with a short freelist) */
    bound = getenv("KVT_TEST_VALGRIND") ? 12u << 10 : 3u << 10;
    /* (unsigned: a resident size that shrank is fine, not a wrapped growth) */
    cr_assert(after < before || after - before < bound, "tierd grew by %llu KiB over 400 commits",
              (unsigned long long)(after - before));
    close(x);
    close(y);
    t_tierd_stop(&d);
}

/* Pinning lookups of a namespace of 1-byte blocks, 1,024 references to one
 * block at a time: the pin budget counted block bytes (1 each), so pins
 * could take 4 bytes of tierd per reference up to the budget in bytes. */
Test(tierd_security, pins_of_tiny_blocks_are_bounded_by_the_slots_they_hold)
{
    static kvt_key k[KVT_BATCH_MAX];
    uint8_t one = 7;
    const void *src[1] = { &one };
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_pin pin;
    uint64_t total = 0;

    t_tierd_start(&d, (const char *const[]){ "--warm-bytes", "32M", "--no-mlock", NULL });
    c = t_connect(&d);
    ns = t_ns(c, 1);
    t_keys(k, 1, 9);
    for (int i = 1; i < KVT_BATCH_MAX; i++)
        k[i] = k[0];
    cr_assert_eq(kvt_put(ns, NULL, k, 1, src), 1);
    for (int i = 0; i < 4096; i++) {
        int rc = kvt_lookup_pin(ns, k, KVT_BATCH_MAX, 0, &pin, NULL);

        cr_assert_geq(rc, 0, "pinning lookup %d: %s", i, kvt_strerror(rc));
        if (pin.n == 0)
            break; /* the budget is spent: a plain lookup */
        total += pin.n;
    }
    /* a quarter of 32 MiB of warm, a 4 KiB page each: 2,048 at most */
    cr_assert_leq(total, 2048, "%llu pinned references to one 1-byte block",
                  (unsigned long long)total);
    cr_assert_gt(total, 0);
    kvt_close(c);
    t_tierd_stop(&d);
}

static uint64_t rss_kib(pid_t pid)
{
    char path[64], line[256];
    uint64_t kib = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    cr_assert_not_null(f);
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %lu kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

#define LEASERS 6
#define TINY 4096u

/* One session leases the same 1,024 blocks over and over without releasing
 * (each get's ids cost tierd 4 KiB) until refused; returns the leases it
 * got, or -1 when a get failed with something other than -EBUSY. */
static int lease_until_refused(kvt_client *c, const kvt_key *k)
{
    static const void *slots[KVT_BATCH_MAX];
    kvt_ns *ns = t_ns(c, TINY);
    kvt_lease l;
    int n = 0, rc;

    while (n < 4096) {
        rc = kvt_get_lease(ns, k, KVT_BATCH_MAX, slots, &l);
        if (rc == -EBUSY)
            return n;
        if (rc != KVT_BATCH_MAX)
            return -1;
        n++;
    }
    return n;
}

Test(tierd_security, leases_taken_over_and_over_are_bounded_by_the_tenant)
{
    static kvt_key k[KVT_BATCH_MAX];
    static uint8_t blk[TINY];
    static const void *src[KVT_BATCH_MAX];
    struct t_tierd d;
    kvt_client *c[LEASERS], *w;
    uint64_t before, after;
    int total = 0;

    /* 32 MiB of warm: a tenant's leases may take 4 MiB of tierd (the floor) */
    t_tierd_start(&d, (const char *const[]){ "--warm-bytes", "32M", "--no-mlock", NULL });
    w = t_connect(&d);
    t_keys(k, KVT_BATCH_MAX, 3);
    for (int i = 0; i < KVT_BATCH_MAX; i++)
        src[i] = blk;
    cr_assert_eq(kvt_put(t_ns(w, TINY), NULL, k, KVT_BATCH_MAX, src), KVT_BATCH_MAX);
    before = rss_kib(d.pid);
    for (int i = 0; i < LEASERS; i++) {
        int n;

        c[i] = t_connect(&d);
        n = lease_until_refused(c[i], k);
        cr_assert_geq(n, 0, "session %d: a get failed other than -EBUSY", i);
        total += n;
    }
    after = rss_kib(d.pid);
    /* unbounded, LEASERS x 4096 leases x 4 KiB of ids = 96 MiB */
    cr_assert_lt(total, 1100, "%d leases of 1,024 blocks: the tenant's 4 MiB are not a bound",
                 total);
    cr_assert_lt(after - before, 24u << 10, "tierd grew by %llu KiB for %d leases",
                 (unsigned long long)(after - before), total);
    /* given back, they are taken again */
    kvt_close(c[0]);
    {
        kvt_client *again = t_connect(&d);

        cr_assert_gt(lease_until_refused(again, k), 0);
        kvt_close(again);
    }
    for (int i = 1; i < LEASERS; i++)
        kvt_close(c[i]);
    kvt_close(w);
    t_tierd_stop(&d);
}

/* ---- what one tenant may learn of another ----------------------------- */

/* Bob is busy: sessions, leases, a malformed message. */
static int bob_busy(const char *sock, void *arg)
{
    struct kvt_wire_hello_req hello = { .pid = 1 };
    uint8_t blk[BLK];
    const void *src[1] = { blk };
    void *dst[1] = { blk };
    kvt_key k[1];
    int fd;

    (void)arg;
    for (int i = 0; i < 5; i++) {
        kvt_client *c;
        kvt_ns *ns;

        if (kvt_connect(sock, &c))
            return 30;
        ns = t_ns(c, BLK);
        t_keys(k, 1, 40 + (uint64_t)i);
        memset(blk, i, sizeof(blk));
        if (kvt_put(ns, NULL, k, 1, src) != 1 || kvt_get(ns, k, 1, dst) != 1)
            return 31;
        kvt_close(c);
    }
    fd = sock_open(sock);
    if (fd < 0 || sock_call(fd, KVT_OP_HELLO, &hello, sizeof(hello), NULL, 0, NULL) != 0)
        return 32;
    if (sock_call(fd, 999, NULL, 0, NULL, 0, NULL) != KVT_EPROTO)
        return 33; /* an unknown op: a protocol error */
    close(fd);
    return 0;
}

/* The session id HELLO tells, on a fresh connection. */
static uint64_t session_id(const char *sock)
{
    struct kvt_wire_hello_req hello = { .pid = 1 };
    struct kvt_wire_hello_rep rep = { 0 };
    int fd = sock_open(sock), pool;

    cr_assert_geq(fd, 0);
    cr_assert_eq(sock_call(fd, KVT_OP_HELLO, &hello, sizeof(hello), &rep, sizeof(rep), &pool),
                 0);
    close(pool);
    close(fd);
    return rep.session_id;
}

Test(tierd_security, stats_and_ids_tell_a_tenant_nothing_of_another)
{
    const char *cfg;
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_stats st;
    kvt_key k[1];
    kvt_lease l1, l2;
    const void *slot[1];
    uint8_t blk[BLK] = { 0 };
    const void *src[1] = { blk };
    uint64_t ids[8], id1;
    int seq = 0, rc;

    need_root();
    cfg = t_config(config_two);
    t_tierd_start(&d, (const char *const[]){ "--config", cfg, NULL });
    cr_assert_eq(chmod(d.dir, 0755), 0);
    c = t_connect(&d); /* alice */
    ns = t_ns(c, BLK);
    t_keys(k, 1, 1);
    cr_assert_eq(kvt_put(ns, NULL, k, 1, src), 1);
    cr_assert_eq(kvt_get_lease(ns, k, 1, slot, &l1), 1);
    id1 = l1.id;
    cr_assert_eq(kvt_release(ns, &l1), 0);
    rc = t_as_user(BOB, bob_busy, d.sock, NULL);
    cr_assert_eq(rc, 0, "bob: exit %d", rc);
    /* her next lease follows her last, whatever bob leased in between */
    cr_assert_eq(kvt_get_lease(ns, k, 1, slot, &l2), 1);
    cr_assert_eq(l2.id, id1 + 1, "alice's lease ids moved by %lld: they count bob's",
                 (long long)(l2.id - id1));
    cr_assert_eq(kvt_release(ns, &l2), 0);
    cr_assert_eq(kvt_stats_get(c, &st), 0);
    cr_assert_eq(st.proto_errors, 0, "alice's STATS count bob's protocol errors: %llu",
                 (unsigned long long)st.proto_errors);
    cr_assert_eq(st.clients, 1);
    /* session ids are no sequence that counts other sessions */
    for (int i = 0; i < 8; i++)
        ids[i] = session_id(d.sock);
    for (int i = 1; i < 8; i++)
        seq += ids[i] == ids[i - 1] + 1;
    cr_assert_lt(seq, 2, "session ids are a sequence (%llu, %llu, ...)",
                 (unsigned long long)ids[0], (unsigned long long)ids[1]);
    kvt_close(c);
    t_tierd_stop(&d);
    unlink(cfg);
}

/* ---- a data folder made beforehand ------------------------------------ */

/* Run tierd on data until it exits: its exit status (124: it ran), its
 * stderr in err. */
static int tierd_on(const char *dir, const char *data, char *err, size_t cap)
{
    return t_tierd_exit(dir, (const char *const[]){ "--data", data, "--cold-bytes", "16M",
                                                    "--warm-bytes", "8M", NULL },
                        err, cap);
}

/* tierd on data, with its socket at sock, stops at start (exit 73) saying
 * it refuses the socket, and why. */
static void socket_refused(const char *dir, const char *data, const char *sock, const char *why)
{
    char err[4096];
    int st = t_tierd_exit(dir, (const char *const[]){ "--data", data, "--socket", sock,
                                                      "--cold-bytes", "16M", "--warm-bytes",
                                                      "8M", NULL },
                          err, sizeof(err));

    cr_expect_eq(st, EX_CANTCREAT, "socket %s: exit %d: %s", sock, st, err);
    cr_expect(strstr(err, "refusing socket") && strstr(err, why), "socket %s: %s", sock, err);
}

Test(tierd_security, a_data_folder_another_user_could_have_prepared_is_refused)
{
    char base[64], run[64] = "/tmp/kvt-srun-XXXXXX", data[128], link[256], victim[128];
    char err[4096];
    struct stat sb;
    int st, fd;

    need_root();
    t_tmpdir("kvt-sec", base, sizeof(base));
    cr_assert_not_null(mkdtemp(run)); /* its socket */
    snprintf(data, sizeof(data), "%s/data", base);
    snprintf(victim, sizeof(victim), "%s/victim", base);
    fd = open(victim, O_WRONLY | O_CREAT | O_TRUNC, 0600);
    cr_assert_eq(write(fd, "root's", 6), 6);
    close(fd);

    /* a folder another user made */
    cr_assert_eq(mkdir(data, 0700), 0);
    cr_assert_eq(chown(data, STRANGER, STRANGER), 0);
    st = tierd_on(run, data, err, sizeof(err));
    cr_expect_eq(st, EX_CANTCREAT, "exit %d: %s", st, err);
    cr_expect(strstr(err, "belongs to uid 40003"), "%s", err);

    /* ours, but anyone may write in it */
    cr_assert_eq(chown(data, 0, 0), 0);
    cr_assert_eq(chmod(data, 0777), 0);
    st = tierd_on(run, data, err, sizeof(err));
    cr_expect_eq(st, EX_CANTCREAT, "exit %d: %s", st, err);
    cr_expect(strstr(err, "writable by every user"), "%s", err);

    /* ours, but below a folder another user may write in */
    cr_assert_eq(chmod(data, 0700), 0);
    cr_assert_eq(chmod(base, 0777), 0);
    st = tierd_on(run, data, err, sizeof(err));
    cr_expect_eq(st, EX_CANTCREAT, "exit %d: %s", st, err);
    cr_expect(strstr(err, base) && strstr(err, "writable by every user"), "%s", err);
    cr_assert_eq(chmod(base, 0700), 0);

    /* ours, reached through a link in a folder another user owns (who may
     * point it elsewhere at any time) */
    snprintf(link, sizeof(link), "%s/evil", base);
    cr_assert_eq(mkdir(link, 0755), 0);
    cr_assert_eq(chown(link, STRANGER, STRANGER), 0);
    snprintf(link, sizeof(link), "%s/evil/to-data", base);
    cr_assert_eq(symlink(data, link), 0);
    {
        char via[300];

        snprintf(via, sizeof(via), "%s/", link); /* a trailing slash follows links too */
        st = t_tierd_exit(run, (const char *const[]){ "--data", via, "--cold-bytes", "16M",
                                                      "--warm-bytes", "8M", NULL },
                          err, sizeof(err));
    }
    cr_expect_eq(st, EX_CANTCREAT, "exit %d: %s", st, err);
    cr_expect(strstr(err, "evil belongs to uid 40003"), "%s", err);

    /* a link another user owns, in a sticky folder anyone may write: theirs
     * to re-point at any time */
    snprintf(link, sizeof(link), "%s/sticky", base);
    cr_assert_eq(mkdir(link, 0755), 0);
    cr_assert_eq(chmod(link, 01777), 0);
    snprintf(link, sizeof(link), "%s/sticky/to-data", base);
    cr_assert_eq(symlink(data, link), 0);
    cr_assert_eq(lchown(link, STRANGER, STRANGER), 0);
    st = tierd_on(run, link, err, sizeof(err));
    cr_expect_eq(st, EX_CANTCREAT, "exit %d: %s", st, err);
    cr_expect(strstr(err, "symbolic link of uid 40003"), "%s", err);
    /* the sticky folder itself, named so that the walk ends in it by ".." */
    snprintf(link, sizeof(link), "%s/sticky/x", base);
    cr_assert_eq(mkdir(link, 0700), 0);
    snprintf(link, sizeof(link), "%s/sticky/x/..", base);
    st = tierd_on(run, link, err, sizeof(err));
    cr_expect_eq(st, EX_CANTCREAT, "exit %d: %s", st, err);
    cr_expect(strstr(err, "writable by every user"), "%s", err);
    /* a socket right in it: anyone could take its name while tierd is down */
    snprintf(link, sizeof(link), "%s/sticky/tierd.sock", base);
    socket_refused(run, data, link, "writable by every user");
    /* a socket in a folder another user owns: they could put theirs in its
     * place and serve bytes of their own to every engine */
    snprintf(link, sizeof(link), "%s/evil/tierd.sock", base);
    socket_refused(run, data, link, "belongs to uid 40003");

    /* links planted where tierd's files will be, before the mode was fixed */
    static const char *const files[] = { "tierd.lock", "cold.data", "cold.lmdb/data.mdb",
                                         "cold.lmdb/lock.mdb", "cold.lmdb" };
    for (size_t i = 0; i < sizeof(files) / sizeof(files[0]); i++) {
        t_rmtree(data);
        cr_assert_eq(mkdir(data, 0700), 0);
        if (strchr(files[i], '/')) {
            snprintf(link, sizeof(link), "%s/cold.lmdb", data);
            cr_assert_eq(mkdir(link, 0700), 0);
        }
        snprintf(link, sizeof(link), "%s/%s", data, files[i]);
        cr_assert_eq(symlink(victim, link), 0);
        st = tierd_on(run, data, err, sizeof(err));
        cr_expect_neq(st, 0, "%s a link: tierd ran (exit %d)", files[i], st);
        cr_expect_neq(st, 124, "%s a link: tierd ran", files[i]);
        cr_expect(strstr(err, "symbolic link"), "%s a link: %s", files[i], err);
        cr_assert_eq(stat(victim, &sb), 0);
        cr_expect_eq(sb.st_size, 6, "%s a link: root's file is now %lld bytes", files[i],
                     (long long)sb.st_size);
    }
    t_rmtree(base);
    t_rmtree(run);
}
