/* SPDX-License-Identifier: MIT */
/*
 * tierd_load.c - tierd under load and faults, driven by tools/kvload: many
 * client processes with every byte they get checked; clients killed with
 * SIGKILL at random moments (their leases and reservations come back);
 * tierd killed with SIGKILL under load (clients get a clear error in
 * bounded time, reconnect after the restart, and every acknowledged durable
 * block is there, byte-identical); and resource limits: clients over
 * --max-clients, tierd out of file descriptors, a memlock limit that
 * refuses the pool, a cold tier too small for the load. And the store's
 * oracle through tierd: hot reserves and leases in place, every lease
 * checked again before release, prefetching lookups, durable commits
 * racing hot's mover, tierd killed and every durable block checked after
 * each restart.
 *
 * Under KVT_TEST_VALGRIND the runs are shorter and fewer processes, and the
 * short run's kvload runs under memcheck too.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <linux/capability.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <dirent.h>
#include <unistd.h>

#include "t.h"
#include "t_wire.h"

#define BLK (64u << 10)

static bool under_valgrind(void)
{
    return getenv("KVT_TEST_VALGRIND") != NULL;
}

/* under_vg under valgrind, else plain: a slower run gets smaller figures */
static const char *vg_or(const char *under_vg, const char *plain)
{
    return under_valgrind() ? under_vg : plain;
}

/* How long a client waits for a reply before it calls the daemon gone. */
static const char *timeout_ms(void)
{
    return under_valgrind() ? "20000" : "5000";
}

/* Start kvload in its own process group (so that a test can stop all its
 * processes at once), stdout to out. args: NULL-terminated. memcheck:
 * run it under valgrind when the suite runs there. */
static pid_t kvload_start(const char *out, const char *const *args, bool memcheck)
{
    struct t_argv a;
    const char *const *argv = t_prog_argv(&a, "kvload", args, memcheck);
    pid_t pid;

    pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        int fd = open(out, O_WRONLY | O_CREAT | O_TRUNC, 0644);

        setpgid(0, 0);
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (fd < 0 || dup2(fd, 1) < 0)
            _exit(126);
        setenv("KVTIER_TIMEOUT_MS", timeout_ms(), 1);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    setpgid(pid, pid); /* also here: no race with a kill of the group */
    return pid;
}

/* Run kvload to its end; returns its exit status. */
static int kvload_run(const char *out, const char *const *args, bool memcheck)
{
    return t_wait(kvload_start(out, args, memcheck));
}

static json_t *load_json(const char *path)
{
    json_error_t e;
    json_t *j = json_load_file(path, 0, &e);

    cr_assert_not_null(j, "kvload output %s: %s (line %d)", path, e.text, e.line);
    return j;
}

static long long jint(json_t *j, const char *k)
{
    json_t *v = json_object_get(j, k);

    cr_assert(json_is_integer(v), "kvload output has no integer \"%s\"", k);
    return json_integer_value(v);
}

/* The run had no correctness error: no wrong byte, no unexplained error,
 * no hung or crashed client; and it did check blocks. */
static void assert_clean(json_t *j)
{
    cr_assert_eq(jint(j, "wrong_bytes"), 0, "wrong bytes in %lld blocks", jint(j, "wrong_bytes"));
    cr_assert_eq(jint(j, "unexpected"), 0, "%lld unexpected errors, last %lld (%s)",
                 jint(j, "unexpected"), jint(j, "last_unexpected"),
                 kvt_strerror((int)jint(j, "last_unexpected")));
    cr_assert_eq(jint(j, "hung"), 0, "clients hung");
    cr_assert_eq(jint(j, "crashed"), 0, "clients crashed");
    cr_assert_gt(jint(j, "verified"), 0, "no block was got and checked");
    cr_assert_gt(jint(j, "put_blocks"), 0, "no block was put");
}

/* Wait (5 s at most) until every other client has gone and nothing is
 * leased or reserved; fail with the counts otherwise. */
static kvt_stats settled(kvt_client *c)
{
    kvt_stats st;

    for (int i = 0; i < 500; i++) {
        cr_assert_eq(kvt_stats_get(c, &st), 0);
        if (st.clients == 1 && st.leases_active == 0 && st.reserved == 0)
            return st;
        usleep(10000);
    }
    cr_assert_fail("after the run: %u clients, %llu blocks leased, %llu reserved "
                   "(expected 1, 0, 0: slots leaked)",
                   st.clients, (unsigned long long)st.leases_active,
                   (unsigned long long)st.reserved);
    return st;
}

/* One block put and got back right: the daemon serves. */
static void assert_serves(kvt_client *c, uint64_t seed)
{
    kvt_ns *ns = t_ns(c, BLK);
    kvt_key k;
    void *slot;
    const void *got;
    kvt_lease l;

    t_keys(&k, 1, seed);
    cr_assert_eq(kvt_put_reserve(ns, NULL, &k, 1, &slot), 1, "the daemon does not serve");
    t_fill(slot, BLK, seed);
    cr_assert_eq(kvt_put_commit(ns, &k, 1), 1);
    cr_assert_eq(kvt_get_lease(ns, &k, 1, &got, &l), 1);
    cr_assert_eq(t_check(got, BLK, seed), -1, "the block came back wrong");
    cr_assert_eq(kvt_release(ns, &l), 0);
}

/* After a run: a client of d waits until it is the only one and nothing
 * is leased or reserved (settled), then, with seed != 0, checks that the
 * daemon serves (assert_serves). The settled counters. */
static kvt_stats settled_on(const struct t_tierd *d, uint64_t seed)
{
    kvt_client *c = t_connect(d);
    kvt_stats st = settled(c);

    if (seed)
        assert_serves(c, seed);
    kvt_close(c);
    return st;
}

static void path_in(char *buf, size_t cap, const struct t_tierd *d, const char *name)
{
    snprintf(buf, cap, "%s/%s", d->dir, name);
}

/* Start d (t_tierd_start with targs), then kvload on its socket with args
 * (NULL-terminated, --socket and --json added here), its report in d's
 * folder: it must exit 0 (no correctness error) and report no wrong byte,
 * no leak, no unexpected error (assert_clean). The report, which the
 * caller frees; d runs on. */
static json_t *clean_load(struct t_tierd *d, const char *const *targs, const char *const *args,
                          bool memcheck)
{
    const char *argv[32] = { "--socket", d->sock, "--json" };
    char out[400];
    json_t *j;
    int n = 3, rc;

    t_tierd_start(d, targs);
    for (int i = 0; args[i] && n < 31; i++)
        argv[n++] = args[i];
    argv[n] = NULL;
    path_in(out, sizeof(out), d, "kvload.json");
    rc = kvload_run(out, argv, memcheck);
    cr_assert_eq(rc, 0, "kvload exit status %d (1: correctness errors; see its output)", rc);
    j = load_json(out);
    assert_clean(j);
    return j;
}

/* (a) A short load: every byte right, and no slot left behind. */
Test(tierd_load, short_run_checks_every_byte_and_leaks_no_slot)
{
    static const char *const targs[] = { "--warm-bytes", "16M", "--cold-bytes", "256M", NULL };
    struct t_tierd d;
    kvt_stats st;
    json_t *j;

    /* 64 prompts x 8 blocks of 64 KiB: twice the warm tier, so blocks move
     * to disk and back while they are shared */
    j = clean_load(&d, targs,
                   (const char *const[]){ "--clients", vg_or("4", "16"),
                                          "--seconds", vg_or("3", "5"), "--prefixes", "64",
                                          "--chain", "8", NULL },
                   true);
    cr_assert_gt(json_integer_value(json_object_get(json_object_get(json_object_get(j, "op"),
                                                                    "get"), "count")), 0);
    cr_log_info("load: %lld ops, %.0f ops/s, %lld blocks verified",
                jint(j, "ops"), json_real_value(json_object_get(j, "ops_per_s")),
                jint(j, "verified"));
    json_decref(j);
    st = settled_on(&d, 0);
    cr_assert_gt(st.demotions + st.dropped, 0, "the load should have pushed blocks out of warm");
    t_tierd_stop(&d);
}

/* (b) Clients killed with SIGKILL at random moments, while holding leases
 * and reservations: the daemon reclaims them all and goes on serving. */
Test(tierd_load, sigkilled_clients_leave_no_lease_or_reservation)
{
    static const char *const targs[] = { "--warm-bytes", "32M", NULL };
    struct t_tierd d;
    json_t *j;

    /* each lease and reservation is held a while (far longer than a
     * request takes, also under valgrind or ASan on a loaded machine), so
     * nearly every kill lands on a client that holds something: at 500 us
     * all 8 kills missed once under ASan beside two other jobs */
    j = clean_load(&d, targs,
                   (const char *const[]){ "--clients", vg_or("4", "12"),
                                          "--seconds", vg_or("4", "5"), "--prefixes", "16",
                                          "--chain", "8", "--kill-clients", "8",
                                          "--hold-us", vg_or("50000", "20000"), NULL },
                   false);
    cr_assert_eq(jint(j, "killed"), 8, "expected 8 clients killed, got %lld", jint(j, "killed"));
    json_decref(j);
    cr_assert_gt(settled_on(&d, 77).reclaimed, 0,
                 "no lease or reservation was reclaimed from 8 killed clients");
    t_tierd_stop(&d);
}

static off_t file_size(const char *path)
{
    struct stat sb;

    return stat(path, &sb) == 0 ? sb.st_size : 0;
}

/* (c) tierd killed with SIGKILL under load: clients see a clear error at
 * once (not a hang), the daemon restarts on the same folder while they
 * are stopped, every block acknowledged durable before the kill is on disk
 * and byte-identical, and then the clients reconnect and carry on. */
Test(tierd_load, sigkilled_tierd_keeps_durable_blocks_and_clients_reconnect)
{
    static const char *const targs[] = { "--warm-bytes", "32M", "--cold-bytes", "1G", NULL };
    struct t_tierd d;
    char out[400], dlog[400], chk[400];
    const char *clients = under_valgrind() ? "4" : "12";
    const char *secs = under_valgrind() ? "25" : "8";
    json_t *j;
    pid_t pid;
    unsigned long recorded = 0;
    FILE *f;
    int rc;

    t_tierd_start(&d, targs);
    path_in(out, sizeof(out), &d, "kvload.json");
    path_in(dlog, sizeof(dlog), &d, "durable.log");
    path_in(chk, sizeof(chk), &d, "check.txt");
    /* no removes: a durable block must stay until the check */
    pid = kvload_start(out, (const char *const[]){ "--socket", d.sock, "--clients", clients,
                                                   "--seconds", secs, "--prefixes", "32",
                                                   "--chain", "8", "--mix", "35,35,30,0",
                                                   "--durable-every", "3", "--durable-log",
                                                   dlog, "--json", NULL },
                       false);
    /* kill once some durable puts are acknowledged (32-byte header, 16 per
     * record), but well before the end */
    for (int i = 0; i < 1000 && file_size(dlog) < 32 + 16 * 20; i++)
        usleep(10000);
    cr_assert_geq(file_size(dlog), 32 + 16 * 20, "no durable put was acknowledged in 10 s");
    cr_assert_eq(t_tierd_kill(&d, SIGKILL), 128 + SIGKILL);
    usleep(300000); /* the clients see it, and retry to connect */
    cr_assert_eq(kill(-pid, SIGSTOP), 0);
    t_tierd_restart(&d, targs);
    rc = kvload_run(chk, (const char *const[]){ "--socket", d.sock, "--check-durable", dlog,
                                                NULL },
                    true);
    f = fopen(chk, "r");
    cr_assert(f && fscanf(f, "kvload: durable check: %lu blocks recorded", &recorded) == 1,
              "no result from the durable check");
    fclose(f);
    cr_assert_eq(rc, 0, "durable blocks missing or wrong after the restart (of %lu; "
                        "kvload's stderr says which)", recorded);
    cr_assert_gt(recorded, 0);
    cr_log_info("load: %lu durable blocks present and right after kill -9", recorded);
    cr_assert_eq(kill(-pid, SIGCONT), 0);
    rc = t_wait(pid);
    cr_assert_eq(rc, 0, "kvload exit status %d", rc);
    j = load_json(out);
    assert_clean(j);
    cr_assert_gt(jint(j, "outage"), 0, "no client noticed that tierd died");
    cr_assert_gt(jint(j, "reconnects"), 0, "no client reconnected");
    cr_assert_lt(json_real_value(json_object_get(j, "slowest_error_ms")),
                 atof(timeout_ms()) + 1000, "a client waited too long for its error");
    json_decref(j);
    settled_on(&d, 0);
    t_tierd_stop(&d);
}

/* (d) Over --max-clients, a client is told -EUSERS (not a hang-up), and
 * the ones admitted keep being served; once one leaves, another gets in. */
Test(tierd_load, clients_over_the_limit_get_eusers)
{
    static const char *const targs[] = { "--max-clients", "4", NULL };
    struct t_tierd d;
    kvt_client *c[4], *extra = NULL;
    kvt_stats st;
    int rc = 0;

    t_tierd_start(&d, targs);
    for (int i = 0; i < 4; i++)
        c[i] = t_connect(&d);
    for (int i = 0; i < 2; i++) {
        rc = kvt_connect(d.sock, &extra);
        cr_assert_eq(rc, -EUSERS, "client %d over the limit: expected -EUSERS, got %d (%s)",
                     5 + i, rc, kvt_strerror(rc));
    }
    cr_assert_eq(kvt_stats_get(c[0], &st), 0);
    cr_assert_eq(st.clients, 4, "clients: %u", st.clients);
    assert_serves(c[1], 5);
    kvt_close(c[3]);
    for (int i = 0; i < 200; i++) { /* tierd sees the close on its next turn */
        rc = kvt_connect(d.sock, &extra);
        if (rc == 0)
            break;
        usleep(10000);
    }
    cr_assert_eq(rc, 0, "a client still refused after one left: %s", kvt_strerror(rc));
    assert_serves(extra, 6);
    kvt_close(extra);
    for (int i = 0; i < 3; i++)
        kvt_close(c[i]);
    t_tierd_stop(&d);
}

/* The lowest fd number pid does not use (the next one it would get). */
static int low_free_fd(pid_t pid)
{
    static bool used[1024];
    char path[64];
    DIR *dir;
    struct dirent *e;
    int lo = 0;

    memset(used, 0, sizeof(used));
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    dir = opendir(path);
    cr_assert_not_null(dir, "%s: %s", path, strerror(errno));
    while ((e = readdir(dir))) {
        int fd = atoi(e->d_name);

        if (e->d_name[0] != '.' && fd < 1024)
            used[fd] = true;
    }
    closedir(dir);
    while (lo < 1024 && used[lo])
        lo++;
    return lo;
}

/* CPU time pid has used, in clock ticks. */
static long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024], *p;
    unsigned long ut = 0, stt = 0;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    cr_assert_not_null(f);
    cr_assert_not_null(fgets(buf, sizeof(buf), f));
    fclose(f);
    p = strrchr(buf, ')'); /* the name may hold spaces */
    cr_assert_not_null(p);
    /* after ")": state ppid pgrp session tty tpgid flags minflt cminflt
     * majflt cmajflt utime stime */
    cr_assert_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
                        &stt), 2);
    return (long)(ut + stt);
}

/* A connection that never says HELLO. */
static int raw_connect(const char *sock)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);

    cr_assert_geq(fd, 0);
    cr_assert_lt(strlen(sock), sizeof(a.sun_path));
    memcpy(a.sun_path, sock, strlen(sock) + 1);
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "connect: %s",
                 strerror(errno));
    return fd;
}

/* Send a HELLO with request id req_id on a raw connection, without waiting. */
static void raw_hello(int fd, uint32_t req_id)
{
    struct kvt_wire_hello_req req = { .pid = (uint32_t)getpid() };
    struct kvt_wire_hdr h = t_wire_hdr(KVT_OP_HELLO, req_id, 0, sizeof(req));
    ssize_t r = t_wire_send2(fd, &h, sizeof(h), &req, sizeof(req));

    cr_assert_eq(r, (ssize_t)(sizeof(h) + sizeof(req)), "HELLO not sent: %s",
                 strerror((int)-r));
}

/* The reply on a raw connection to the refused HELLO req_id: it must be
 * there (not a hang-up, not a reset) and say -EUSERS. */
static void assert_told_eusers(int fd, uint32_t req_id, const char *who)
{
    struct kvt_wire_hdr h;
    ssize_t r = t_wire_recv(fd, &h, NULL, 0, NULL, 5000);

    cr_assert_gt(r, 0, "%s: no reply to its HELLO but %s", who,
                 r == 0 ? "a hang-up" : strerror((int)-r));
    cr_assert(h.op == KVT_OP_HELLO && h.req_id == req_id && h.status == -EUSERS,
              "%s: reply op %u id %u status %d, expected HELLO %u -EUSERS", who, h.op,
              h.req_id, h.status, req_id);
}

/* Nothing has come on fd, neither a message nor a hang-up, by the end of
 * a round trip on c: tierd, one thread, answered c after it was done with
 * everything fd's peer had sent before. */
static void assert_still_open(int fd, kvt_client *c, const char *who)
{
    struct pollfd p = { .fd = fd, .events = POLLIN | POLLRDHUP };
    kvt_stats st;

    cr_assert_eq(kvt_stats_get(c, &st), 0);
    cr_assert_eq(poll(&p, 1, 0), 0, "%s: tierd %s before the client closed", who,
                 p.revents & (POLLHUP | POLLRDHUP) ? "hung up" : "sent more");
}

/* (d) A refused client reads its -EUSERS, and tierd hangs up only after
 * the client does: with a close right after the reply, the client's recv
 * could see the hang-up before the reply (kvt_connect's KVT_EDISCONNECTED
 * in 1 to 3 of 10,000 refusals on a 2-CPU machine). */
Test(tierd_load, a_refused_client_is_not_hung_up_before_it_closes)
{
    static const char *const targs[] = { "--max-clients", "1", NULL };
    struct t_tierd d;
    kvt_client *c, *extra = NULL;
    int fd, rc;

    t_tierd_start(&d, targs);
    c = t_connect(&d);
    fd = raw_connect(d.sock);
    raw_hello(fd, 5);
    assert_told_eusers(fd, 5, "the refused client");
    assert_still_open(fd, c, "the refused client");
    close(fd);
    /* its slot among the refused comes back: the next one is told too */
    rc = kvt_connect(d.sock, &extra);
    cr_assert_eq(rc, -EUSERS, "the next refused client: %d (%s)", rc, kvt_strerror(rc));
    kvt_close(c);
    t_tierd_stop(&d);
}

/* (d) A refused client that sends more before it reads still reads its
 * -EUSERS: what it sent after the HELLO is read and dropped (not answered),
 * not left unread in a socket closed after the reply, which resets a client
 * that has not read yet (its recv fails before it reads what is queued). */
Test(tierd_load, a_refused_client_that_sends_twice_still_reads_eusers)
{
    static const char *const targs[] = { "--max-clients", "1", NULL };
    struct kvt_wire_hdr st = t_wire_hdr(KVT_OP_STATS, 6, 0, 0);
    struct t_tierd d;
    kvt_client *c;
    int fd;

    t_tierd_start(&d, targs);
    c = t_connect(&d);
    /* both messages are queued before tierd takes the connection */
    cr_assert_eq(kill(d.pid, SIGSTOP), 0);
    fd = raw_connect(d.sock);
    raw_hello(fd, 5);
    cr_assert_eq(t_wire_send2(fd, &st, sizeof(st), NULL, 0), (ssize_t)sizeof(st));
    cr_assert_eq(kill(d.pid, SIGCONT), 0);
    assert_told_eusers(fd, 5, "the refused client that sent twice");
    assert_still_open(fd, c, "the refused client that sent twice"); /* no reply to its STATS */
    close(fd);
    kvt_close(c);
    t_tierd_stop(&d);
}

/* (d) Refused clients that were told and stay connected cannot pile up:
 * 16 at most, and each is hung up at its handshake deadline; beyond the
 * 16 a new one is dropped without a word. Once they are gone, a client is
 * told -EUSERS again. */
Test(tierd_load, told_refused_clients_that_stay_are_bounded_and_hung_up)
{
    const char *const targs[] = { "--max-clients", "1", "--handshake-timeout-ms",
                                  vg_or("20000", "3000"), NULL };
    struct t_tierd d;
    kvt_client *c, *extra = NULL;
    struct kvt_wire_hello_req hello = { .pid = (uint32_t)getpid() };
    struct kvt_wire_hdr h;
    int fd[16], over, rc;
    ssize_t r;

    t_tierd_start(&d, targs);
    c = t_connect(&d);
    for (int i = 0; i < 16; i++) {
        fd[i] = raw_connect(d.sock);
        raw_hello(fd[i], 100 + (uint32_t)i);
        assert_told_eusers(fd[i], 100 + (uint32_t)i, "a refused client that stays");
    }
    assert_still_open(fd[15], c, "the 16th refused client");
    /* the 17th: hung up (reset, its HELLO unread), or its HELLO not sent */
    over = raw_connect(d.sock);
    h = t_wire_hdr(KVT_OP_HELLO, 117, 0, sizeof(hello));
    r = t_wire_send2(over, &h, sizeof(h), &hello, sizeof(hello));
    if (r > 0)
        r = t_wire_recv(over, &h, NULL, 0, NULL, 5000);
    cr_assert(r == 0 || r == -ECONNRESET || r == -EPIPE,
              "a 17th refused client while 16 stay: %zd (%s), expected a hang-up", r,
              r > 0 ? "answered" : strerror((int)-r));
    close(over);
    for (int i = 0; i < 16; i++) {
        struct pollfd p = { .fd = fd[i], .events = POLLIN };
        char b[64];

        cr_assert(poll(&p, 1, 30000) == 1 && recv(fd[i], b, sizeof(b), MSG_DONTWAIT) == 0,
                  "refused client %d not hung up after its handshake deadline", i);
        close(fd[i]);
    }
    rc = kvt_connect(d.sock, &extra);
    cr_assert_eq(rc, -EUSERS, "a refused client after they left: %d (%s)", rc,
                 kvt_strerror(rc));
    kvt_close(c);
    t_tierd_stop(&d);
}

/* (d) tierd out of file descriptors: a new client is told -EMFILE, tierd
 * does not spin on its listening socket, the clients it has keep being
 * served, and new ones get in once fds are free again. */
Test(tierd_load, tierd_out_of_fds_refuses_clearly_and_does_not_spin)
{
    struct t_tierd d;
    kvt_client *first, *more[32];
    int nmore = 0, rc = 0, raw[8];
    struct rlimit rl;
    long t0;

    t_tierd_start(&d, NULL);
    first = t_connect(&d);
    assert_serves(first, 1);
    /* room for 3 more connections (fds are handed out lowest first) */
    cr_assert_eq(prlimit(d.pid, RLIMIT_NOFILE, NULL, &rl), 0);
    rl.rlim_cur = (rlim_t)low_free_fd(d.pid) + 3;
    cr_assert_eq(prlimit(d.pid, RLIMIT_NOFILE, &rl, NULL), 0, "prlimit: %s", strerror(errno));
    while (nmore < 32) {
        rc = kvt_connect(d.sock, &more[nmore]);
        if (rc < 0)
            break;
        nmore++;
    }
    cr_assert_eq(rc, -EMFILE, "the client past the fd limit: expected -EMFILE, got %d (%s)", rc,
                 kvt_strerror(rc));
    cr_assert_geq(nmore, 1, "no connection fit under the limit");
    /* connections that never speak keep the spare fd and the backlog
     * busy: tierd must sleep, not spin on a socket it cannot accept */
    for (int i = 0; i < 8; i++)
        raw[i] = raw_connect(d.sock);
    usleep(200000);
    t0 = cpu_ticks(d.pid);
    usleep(1000000);
    cr_assert_lt(cpu_ticks(d.pid) - t0, sysconf(_SC_CLK_TCK) / 4,
                 "tierd used %ld ticks of CPU in 1 s with pending connections it cannot take",
                 cpu_ticks(d.pid) - t0);
    assert_serves(first, 2);
    for (int i = 0; i < 8; i++)
        close(raw[i]);
    for (int i = 0; i < nmore; i++)
        kvt_close(more[i]);
    nmore = 0;
    for (int i = 0; i < 300; i++) {
        rc = kvt_connect(d.sock, &more[0]);
        if (rc == 0)
            break;
        usleep(10000);
    }
    cr_assert_eq(rc, 0, "no client gets in after fds are free again: %s", kvt_strerror(rc));
    assert_serves(more[0], 3);
    kvt_close(more[0]);
    kvt_close(first);
    t_tierd_stop(&d);
}

/* (d) A memlock limit too small for the warm pool (and no CAP_IPC_LOCK):
 * tierd says so and serves unpinned. */
Test(tierd_load, tierd_under_a_tiny_memlock_limit_runs_unpinned)
{
    static const char *const targs[] = { "--warm-bytes", "16M", NULL };
    struct rlimit rl = { 64 << 10, 64 << 10 };
    struct t_tierd d;
    char logpath[] = "/tmp/kvt-memlock-XXXXXX", buf[8192];
    int lfd, saved;
    ssize_t n;
    kvt_client *c;

    /* root passes any memlock limit with CAP_IPC_LOCK: take it out of the
     * bounding set, so that tierd (exec'd from here) does not get it */
    if (prctl(PR_CAPBSET_DROP, CAP_IPC_LOCK, 0, 0, 0) < 0 && errno != EPERM)
        cr_assert_fail("PR_CAPBSET_DROP: %s", strerror(errno));
    cr_assert_eq(setrlimit(RLIMIT_MEMLOCK, &rl), 0, "setrlimit: %s", strerror(errno));
    /* tierd's log (its stderr) into a file */
    lfd = mkstemp(logpath);
    cr_assert_geq(lfd, 0);
    saved = dup(2);
    setenv("KVT_TEST_VERBOSE", "1", 1);
    dup2(lfd, 2);
    t_tierd_start(&d, targs);
    dup2(saved, 2);
    close(saved);
    c = t_connect(&d);
    assert_serves(c, 9);
    kvt_close(c);
    t_tierd_stop(&d);
    n = pread(lfd, buf, sizeof(buf) - 1, 0);
    close(lfd);
    unlink(logpath);
    cr_assert_gt(n, 0, "tierd logged nothing");
    buf[n] = '\0';
#ifdef __SANITIZE_ADDRESS__
    /* ASan's runtime makes mlock() a no-op that succeeds: the sanitizer
     * tierd cannot be refused, only seen to serve */
    cr_log_info("memlock: not checked under ASan (mlock is intercepted)");
#else
    cr_assert_not_null(strstr(buf, "not pinned"), "tierd did not say the pool is unpinned:\n%s",
                       buf);
#endif
}

/* (d) A cold tier far smaller than the load's durable puts: they get
 * -ENOSPC (counted, allowed), nothing comes back wrong, nothing crashes. */
Test(tierd_load, full_cold_tier_costs_durable_puts_not_the_daemon)
{
    static const char *const targs[] = { "--warm-bytes", "16M", "--cold-bytes", "4M", NULL };
    struct t_tierd d;
    json_t *j;

    j = clean_load(&d, targs,
                   (const char *const[]){ "--clients", vg_or("4", "8"), "--seconds", "3",
                                          "--prefixes", "32", "--chain", "8",
                                          "--durable-every", "2", NULL },
                   false);
    cr_log_info("load: full cold tier: %lld -ENOSPC, %lld durable blocks",
                jint(j, "enospc"), jint(j, "durable_blocks"));
    json_decref(j);
    settled_on(&d, 4);
    t_tierd_stop(&d);
}

/* kvload's "--tierd BIN --" and the start of TIERD-ARGS, into argv: BIN is
 * tierd, or under KVT_TEST_VALGRIND valgrind with its options and tierd
 * (kvload puts --socket and --data last, so they reach tierd). The caller
 * adds tierd's own options. Returns the count written. */
static int tierd_argv(const char **argv, char *bin, size_t cap, char *supp, size_t scap)
{
    const char *vg[8];
    int n = 0, nvg = t_memcheck_argv(vg, supp, scap);

    t_bin("tierd", bin, cap);
    argv[n++] = "--tierd";
    argv[n++] = nvg ? vg[0] : bin;
    argv[n++] = "--";
    for (int i = 1; i < nvg; i++)
        argv[n++] = vg[i];
    if (nvg)
        argv[n++] = bin;
    return n;
}

/* (e) The store's oracle through tierd (kvload --hot --prefetch
 * --kill-tierd): blocks reserved in hot and leased in place there, each
 * lease checked again right before release (nothing may change under a
 * lease), prefetching lookups followed by gets, durable commits of keys
 * that lie in other clients' hot blocks (racing hot's mover), and tierd
 * killed twice under load: each time restarted on its data with the
 * clients stopped, and every block acknowledged durable so far checked.
 * Warm is small, so blocks keep moving between hot, warm and disk. */
Test(tierd_load, oracle_through_tierd_hot_prefetch_and_tierd_kills)
{
    /* 256 prompts x 8 blocks of 64 KiB: 128 MiB, 8 times warm, so blocks
     * keep moving between hot, warm and disk; all of it fits the cold tier,
     * so no durable block is evicted before a check. No removes: a durable
     * block removed later would be rightly gone. */
    static const char *const kv[] = { "--prefixes", "256", "--chain", "8", "--hot",
                                      "--prefetch", "--durable-every", "3", "--kill-tierd", "2",
                                      "--mix", "35,35,30,0", "--json", NULL };
    static const char *const targs[] = { "--warm-bytes", "16M", "--hot-bytes", "8M",
                                         "--cold-bytes", "256M", NULL };
    char dir[256], out[320], dlog[320], bin[512], supp[600];
    const char *args[48];
    json_t *j;
    int n = 0, rc;

    t_tmpdir("kvt-oracle", dir, sizeof(dir));
    snprintf(out, sizeof(out), "%s/kvload.json", dir);
    snprintf(dlog, sizeof(dlog), "%s/durable.log", dir);
    args[n++] = "--clients";
    args[n++] = under_valgrind() ? "3" : "8";
    args[n++] = "--seconds";
    args[n++] = under_valgrind() ? "6" : "10";
    args[n++] = "--durable-log";
    args[n++] = dlog;
    for (int i = 0; kv[i]; i++)
        args[n++] = kv[i];
    n += tierd_argv(args + n, bin, sizeof(bin), supp, sizeof(supp));
    for (int i = 0; targs[i]; i++)
        args[n++] = targs[i];
    args[n] = NULL;
    rc = kvload_run(out, args, true);
    j = load_json(out);
    assert_clean(j);
    cr_assert_gt(jint(j, "hot_gets"), 0, "no get asked for hot blocks in place");
    cr_assert_gt(jint(j, "hot_blocks"), 0, "no block was leased in place in hot");
    cr_assert_gt(jint(j, "hot_reserves"), 0, "no put reserved in hot");
    cr_assert_gt(jint(j, "durable_hot_keys"), 0, "no durable put met a block in hot");
    cr_assert_gt(jint(j, "prefetch_lookups"), 0, "no prefetching lookup");
    cr_assert_gt(jint(j, "rechecked_leases"), 0, "no lease was checked again before release");
    cr_assert_eq(jint(j, "changed_under_lease"), 0, "%lld blocks changed under their lease",
                 jint(j, "changed_under_lease"));
    cr_assert_eq(jint(j, "tierd_kills"), 2, "expected 2 tierd kills, got %lld",
                 jint(j, "tierd_kills"));
    cr_assert_eq(jint(j, "tierd_failed"), 0, "tierd did not come back after a kill");
    cr_assert_gt(jint(j, "durable_checked"), 0, "no durable block was checked after a kill");
    cr_assert_eq(jint(j, "durable_missing") + jint(j, "durable_wrong"), 0,
                 "after the restarts, of %lld durable blocks, %lld missing and %lld wrong",
                 jint(j, "durable_checked"), jint(j, "durable_missing"),
                 jint(j, "durable_wrong"));
    cr_assert_gt(jint(j, "reconnects"), 0, "no client reconnected after a kill");
    cr_assert_eq(jint(j, "left_held"), 0, "%lld blocks still leased or reserved after the run",
                 jint(j, "left_held"));
    cr_assert_eq(jint(j, "tierd_exit"), 0, "tierd's stop: status %lld", jint(j, "tierd_exit"));
    cr_assert_eq(rc, 0, "kvload exit status %d (1: correctness errors; see its stderr)", rc);
    cr_log_info("oracle: %lld ops, %.0f ops/s, %lld blocks verified (%lld in hot in place), "
                "%lld durable blocks checked after 2 tierd kills",
                jint(j, "ops"), json_real_value(json_object_get(j, "ops_per_s")),
                jint(j, "verified"), jint(j, "hot_blocks"), jint(j, "durable_checked"));
    json_decref(j);
    t_rmtree(dir);
}
