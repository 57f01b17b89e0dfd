/* SPDX-License-Identifier: MIT */
/*
 * harness.c - what every tierbench figure uses (bench.h): the options'
 * defaults, the report lines and their counts, tracked children (stopped
 * at exit or on a signal), a private tierd and redis-server, timed rounds
 * and the transport floor.
 */
#include <signal.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "bench.h"

struct bench_opts bench_opt = {
    .groups = BENCH_GRP_ALL,
    .redis = true,
    .rounds = 7,
    .round_ns = 100 * 1000 * 1000,
    .hash_runs = 25,
    .pool_2m = "1G",
    .pool_64k = "256M",
    .pool_lookup = "5G",
    .lookup_blocks = 1u << 20,
    .cold_bytes = 512 * MIB,
    .cold_rounds = 8,
    .prefetch_trials = 15,
    .work_us = 2000,
    .restart_blocks = 1000000,
};

char bench_tmpdir[128];
static int bench_n_targets; /* figures reported (or that failed) */
static int bench_n_met;     /* ... whose target was met */
static int bench_n_errors;  /* failures that make the exit status non-zero */

/* Children to stop at exit or on a signal: tierd, redis-server, fio. At most
 * three live at once (the remote figure's cluster); a fixed array, scanned
 * linearly. */
#define MAX_CHILDREN 4
static volatile pid_t children[MAX_CHILDREN];
/* ---- small helpers ---------------------------------------------------- */

/* splitmix64: a fast, fixed-seed generator for keys, tokens and payloads. */
uint64_t bench_rng(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void bench_rand_keys(uint64_t *s, kvt_key *k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < KVT_KEY_BYTES; j += 8) {
            uint64_t v = bench_rng(s);
            memcpy(k[i].b + j, &v, 8);
        }
    }
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* Median of v[0..n); sorts v in place. */
double bench_median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A buffer of `bytes` whose pages are already faulted in and hold
 * pseudo-random data (so nothing is a shared zero page). NULL on failure. */
void *bench_alloc_faulted(size_t bytes, uint64_t seed)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint64_t *w = p;
    for (size_t i = 0; i < bytes / 8; i++)
        w[i] = bench_rng(&seed);
    return p;
}

void bench_free_faulted(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

/* Print one figure and count it. target is the number as printed; the
 * comparison uses its value. */
void bench_report(const char *name, double v, const char *vfmt, const char *unit,
                   const char *op, const char *target)
{
    char val[64];
    double t = strtod(target, NULL);
    bool met = op[0] == '>' ? v >= t : v <= t;

    snprintf(val, sizeof(val), vfmt, v);
    printf("bench: %s %s %s target %s %s\n", name, val, unit, op, target);
    if (!met)
        printf("# %s: target missed (%s %s %s wanted)\n", name, val, op, target);
    fflush(stdout);
    bench_n_targets++;
    bench_n_met += met;
}

static void fail_with(const char *name, const char *why, int err, const char *msg)
{
    if (err)
        printf("# %s: not measured: %s: %s (%d)\n", name, why, msg, err);
    else
        printf("# %s: not measured: %s\n", name, why);
    fflush(stdout);
    bench_n_targets++;
    bench_n_errors++;
}

/* A figure that could not be measured: counted as missed, and an error. */
void bench_fail(const char *name, const char *why, int err)
{
    fail_with(name, why, err, kvt_strerror(err));
}

void bench_fail_sys(const char *name, const char *why, int err)
{
    fail_with(name, why, err, err < 0 ? strerror(-err) : "unknown error");
}

/* ---- child processes -------------------------------------------------- */

static void track_child(pid_t pid, bool add)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (add ? children[i] == 0 : children[i] == pid) {
            children[i] = add ? pid : 0;
            return;
        }
    }
}

/* Fork and exec argv with stdout and stderr into log_path. The child gets
 * SIGTERM if tierbench dies first. Returns the pid or a negative errno. */
pid_t bench_spawn(char *const argv[], const char *log_path)
{
    pid_t pid = cmn_spawn((const char *const *)argv, log_path,
                          CMN_SPAWN_STDOUT | CMN_SPAWN_TRUNCATE | CMN_SPAWN_NULL_STDIN |
                              CMN_SPAWN_TERM);

    if (pid > 0)
        track_child(pid, true);
    return pid;
}

/* SIGTERM the child and reap it, SIGKILL after 10 s. Returns its wait
 * status, or -1 if it had to be killed. */
int bench_stop_child(pid_t pid)
{
    int st = 0;
    kill(pid, SIGTERM);
    for (int i = 0; i < 1000; i++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) {
            track_child(pid, false);
            return st;
        }
        cmn_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    track_child(pid, false);
    return -1;
}

/* True while the child runs; reaps it (status in *st) if it has exited. */
bool bench_child_alive(pid_t pid, int *st)
{
    pid_t r = waitpid(pid, st, WNOHANG);
    if (r == pid) {
        track_child(pid, false);
        return false;
    }
    return r == 0;
}

/* Print the last lines of a child's log as context. */
void bench_log_tail(const char *what, const char *path)
{
    char buf[2048];
    int fd = open(path, O_RDONLY);
    if (fd < 0)
        return;
    off_t end = lseek(fd, 0, SEEK_END);
    off_t from = end > (off_t)sizeof(buf) - 1 ? end - (off_t)sizeof(buf) + 1 : 0;
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, from);
    close(fd);
    if (n <= 0)
        return;
    buf[n] = '\0';
    for (char *line = strtok(buf, "\n"); line; line = strtok(NULL, "\n"))
        printf("# %s: %s\n", what, line);
}

static void kill_children(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] > 0)
            kill(children[i], SIGTERM);
    }
}

static void on_signal(int sig)
{
    kill_children();
    _exit(128 + sig);
}

static void cleanup(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] > 0)
            bench_stop_child(children[i]);
    }
    if (bench_tmpdir[0])
        cmn_rmtree(bench_tmpdir);
}

/* ---- a private tierd ---------------------------------------------------- */

/* Start $KVT_TEST_BIN/tierd with its own socket and data folder named by
 * tag (<tmpdir>/<tag>.data, kept between starts: a second start with the
 * same tag is a restart on the same data), plus the NULL-terminated extra
 * arguments, and connect to it, polling every 2 ms for up to timeout_s.
 * Returns 0 or a negative error; prints why. */
int bench_tierd_start_ex(struct bench_tierd *d, const char *tag, const char *warm, bool no_mlock,
                          const char *const *extra, unsigned timeout_s)
{
    const char *bin_dir = getenv("KVT_TEST_BIN");
    char bin[PATH_MAX], args[256] = "";
    char *argv[24];
    int st = 0, r = -ENOENT, n = 0;

    memset(d, 0, sizeof(*d));
    snprintf(bin, sizeof(bin), "%s/tierd", bin_dir && *bin_dir ? bin_dir : "./build");
    snprintf(d->sock, sizeof(d->sock), "%s/%s.sock", bench_tmpdir, tag);
    snprintf(d->log, sizeof(d->log), "%s/%s.log", bench_tmpdir, tag);
    snprintf(d->data, sizeof(d->data), "%s/%s.data", bench_tmpdir, tag);
    if (access(bin, X_OK) < 0) {
        r = -errno;
        printf("# tierd: %s: %s\n", bin, strerror(errno));
        return r;
    }
    if (mkdir(d->data, 0700) < 0 && errno != EEXIST)
        return -errno;

    argv[n++] = bin;
    argv[n++] = "--socket";
    argv[n++] = d->sock;
    argv[n++] = "--data";
    argv[n++] = d->data;
    argv[n++] = "--warm-bytes";
    argv[n++] = (char *)warm;
    if (no_mlock)
        argv[n++] = "--no-mlock";
    for (int i = 0; extra && extra[i] && n < (int)(sizeof(argv) / sizeof(argv[0])) - 1; i++) {
        argv[n++] = (char *)extra[i];
        snprintf(args + strlen(args), sizeof(args) - strlen(args), " %s", extra[i]);
    }
    argv[n] = NULL;
    uint64_t t0 = cmn_now_ns();
    d->pid = bench_spawn(argv, d->log);
    if (d->pid < 0)
        return (int)d->pid;

    while (cmn_now_ns() - t0 < timeout_s * 1000000000ull) {
        if (!bench_child_alive(d->pid, &st)) {
            printf("# tierd (%s) exited during start-up, status 0x%x\n", tag, st);
            bench_log_tail("tierd", d->log);
            d->pid = 0;
            return -ECHILD;
        }
        r = kvt_connect(d->sock, &d->c);
        if (r == 0) {
            d->ready_s = (double)(cmn_now_ns() - t0) / 1e9;
            printf("# tierd (%s): --warm-bytes %s%s%s, ready after %.0f ms\n", tag, warm,
                   no_mlock ? " --no-mlock" : "", args, d->ready_s * 1e3);
            return 0;
        }
        cmn_sleep_ms(2);
    }
    printf("# tierd (%s): no connection after %u s: %s\n", tag, timeout_s, kvt_strerror(r));
    bench_log_tail("tierd", d->log);
    bench_stop_child(d->pid);
    d->pid = 0;
    return r ? r : -ETIMEDOUT;
}

/* The figures that predate the cold tier measure the warm path: their
 * tierd keeps its cold tier (the default) but does not write the warm tier
 * to disk at stop (--no-flush), which for the lookup figure's 1 M warm
 * blocks would take longer than the 10 s a stop is given. */
int bench_tierd_start(struct bench_tierd *d, const char *tag, const char *warm, bool no_mlock)
{
    static const char *const no_flush[] = { "--no-flush", NULL };
    return bench_tierd_start_ex(d, tag, warm, no_mlock, no_flush, 10);
}

void bench_tierd_stop(struct bench_tierd *d)
{
    kvt_close(d->c);
    d->c = NULL;
    if (d->pid > 0) {
        int st = bench_stop_child(d->pid);
        if (st != 0) {
            printf("# warning: tierd did not stop cleanly on SIGTERM (status 0x%x)\n", st);
            bench_log_tail("tierd", d->log);
        }
    }
    d->pid = 0;
}

int bench_ns_open(kvt_client *c, const char *model, uint64_t block_bytes, kvt_ns **ns)
{
    kvt_model m = {
        .model_id = model, .dtype = "bf16", .layout = "tierbench",
        .block_tokens = 16, .tp_rank = 0, .tp_size = 1, .block_bytes = block_bytes,
    };
    return kvt_ns_open(c, &m, ns);
}

/* ---- a private redis-server --------------------------------------------- */

/* Ping once; true on PONG. */
bool bench_redis_ping(redisContext *rc)
{
    redisReply *rep = redisCommand(rc, "PING");
    bool ok = rep && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;
    if (rep)
        freeReplyObject(rep);
    return ok;
}

int bench_redis_start(struct bench_redis *s)
{
    char port_s[16];
    int port = cmn_free_port(), st = 0;

    memset(s, 0, sizeof(*s));
    if (port < 0)
        return -EADDRNOTAVAIL;
    snprintf(port_s, sizeof(port_s), "%d", port);
    snprintf(s->log, sizeof(s->log), "%s/redis.log", bench_tmpdir);
    char *argv[] = { "redis-server", "--port", port_s, "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--daemonize", "no", "--dir", bench_tmpdir, NULL };
    s->pid = bench_spawn(argv, s->log);
    if (s->pid < 0)
        return (int)s->pid;

    uint64_t t0 = cmn_now_ns();
    while (cmn_now_ns() - t0 < 10 * 1000000000ull) {
        if (!bench_child_alive(s->pid, &st)) {
            printf("# redis-server exited during start-up, status 0x%x\n", st);
            bench_log_tail("redis", s->log);
            s->pid = 0;
            return -ECHILD;
        }
        struct timeval tv = { .tv_sec = 1 };
        s->rc = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (s->rc && !s->rc->err && bench_redis_ping(s->rc)) {
            struct timeval none = { 0 };
            redisSetTimeout(s->rc, none); /* block as long as a big pipeline needs */
            printf("# redis-server on 127.0.0.1:%d, ready after %.0f ms\n", port,
                   (double)(cmn_now_ns() - t0) / 1e6);
            return 0;
        }
        if (s->rc)
            redisFree(s->rc);
        s->rc = NULL;
        cmn_sleep_ms(20);
    }
    printf("# redis-server: no PONG after 10 s\n");
    bench_log_tail("redis", s->log);
    bench_stop_child(s->pid);
    s->pid = 0;
    return -ETIMEDOUT;
}

void bench_redis_stop(struct bench_redis *s)
{
    if (s->rc)
        redisFree(s->rc);
    s->rc = NULL;
    if (s->pid > 0)
        bench_stop_child(s->pid);
    s->pid = 0;
}

/* ---- timed rounds ------------------------------------------------------- */

typedef int (*bench_iter_fn)(void *arg);

/* Run fn until at least bench_opt.round_ns have passed; returns the seconds per
 * call through *per_iter, or fn's error. */
int bench_timed_round(bench_iter_fn fn, void *arg, double *per_iter)
{
    uint64_t t0 = cmn_now_ns(), t, n = 0;
    do {
        int r = fn(arg);
        if (r < 0)
            return r;
        n++;
        t = cmn_now_ns();
    } while (t - t0 < bench_opt.round_ns);
    *per_iter = (double)(t - t0) / 1e9 / (double)n;
    return 0;
}

/* ---- the transport floor ------------------------------------------------ */

/*
 * An echo process at the other end of a SOCK_SEQPACKET socketpair: it answers
 * every message with rep_bytes bytes. It measures what any request/reply
 * between two processes costs on this machine (on a VM, waking a process on
 * another vCPU can cost tens of microseconds), so that kvtier's figures can
 * be judged against it. Returns the child's pid, *sock our end.
 */
pid_t bench_echo_open(size_t rep_bytes, int *sock)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv) < 0)
        return -errno;
    pid_t pid = fork();
    if (pid < 0) {
        int r = -errno;
        close(sv[0]);
        close(sv[1]);
        return r;
    }
    if (pid == 0) {
        static char buf[64 * 1024];
        close(sv[0]);
        memset(buf, 2, sizeof(buf)); /* the reply: "warm" for every key, as tierd would */
        while (recv(sv[1], buf + 1, sizeof(buf) - 1, 0) > 0) {
            if (send(sv[1], buf, rep_bytes, 0) < 0)
                break;
        }
        _exit(0);
    }
    close(sv[1]);
    *sock = sv[0];
    return pid;
}

void bench_echo_close(int sock, pid_t pid)
{
    close(sock); /* the child's recv() returns 0 and it exits */
    waitpid(pid, NULL, 0);
}

int bench_setup(void)
{
    const char *td = getenv("TMPDIR");
    char *saved = td && strlen(td) > 60 ? strdup(td) : NULL;
    int rc;

    /* sockets live in here: keep the path short (sun_path is 108 bytes) */
    if (saved)
        setenv("TMPDIR", "/tmp", 1);
    rc = cmn_tmpdir("tierbench", bench_tmpdir, sizeof(bench_tmpdir));
    if (saved) {
        setenv("TMPDIR", saved, 1); /* tierd and fio see the caller's */
        free(saved);
    }
    if (rc < 0) {
        bench_tmpdir[0] = '\0';
        return rc;
    }
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    signal(SIGPIPE, SIG_IGN);
    return 0;
}

int bench_finish(uint64_t t0_ns)
{
    printf("# tierbench took %.1f s%s\n", (double)(cmn_now_ns() - t0_ns) / 1e9,
           bench_n_errors ? "; some figures could not be measured" : "");
    printf("# %d of %d targets met\n", bench_n_met, bench_n_targets);
    return bench_n_errors ? 1 : 0;
}
