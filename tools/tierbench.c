/* SPDX-License-Identifier: MIT */
/*
 * tierbench.c - every performance figure of kvtier beside its target.
 *
 * Starts its own private tierd, one at a time (and a redis-server, and fio
 * on a file beside tierd's cold tier, for comparisons), moves blocks through
 * libkvtier, drives the in-process store and the key hash, and prints one
 * greppable line per figure:
 *     bench: <name> <value> <unit> target <op> <number>
 * plus context lines starting with '#'. Where the target is a ratio, the
 * baseline is measured in the same run, interleaved round by round, so that
 * machine noise hits both sides alike. A missed target is reported, not
 * fatal; the exit status is non-zero only when something could not be
 * measured (a daemon did not start, a call failed, a hash came out wrong).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <getopt.h>
#include <inttypes.h>
#include <limits.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <hiredis/hiredis.h>
#include <openssl/evp.h>

#include "kvtier.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_nvme.h"
#include "tier_remote.h"

#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)

/* ---- options and run-wide state --------------------------------------- */

enum {
    GRP_PUT = 0x1,    /* figures 1 and 2: put+get vs memcpy and redis */
    GRP_LOOKUP = 0x2, /* figure 3a: lookup through tierd */
    GRP_INPROC = 0x4, /* figures 3b and 5: in-process store */
    GRP_HASH = 0x8,   /* figure 4: prompt hashing */
    GRP_COLD = 0x10,  /* figure 6: cold-tier writes and reads vs fio */
    GRP_PREFETCH = 0x20, /* figure 7: get of a cold chain with / without prefetch */
    GRP_RESTART = 0x40,  /* figure 8: start-up over a cold index of 1 M blocks */
    GRP_HYBRID = 0x80,   /* figure 9: bytes per token of hybrid models, by layer group */
    GRP_REMOTE = 0x100,  /* figure 10: the remote tier vs redis-benchmark, Redis Cluster */
    GRP_ALL = 0x1ff,
};

static struct {
    unsigned groups;     /* GRP_* to run */
    bool redis;          /* run the redis comparison */
    int rounds;          /* timed rounds per figure; the median is reported */
    uint64_t round_ns;   /* minimum length of one timed round */
    int hash_runs;       /* timed runs of the hash figure */
    const char *pool_2m; /* --warm-bytes of the 2 MiB put/get tierd */
    const char *pool_64k;
    const char *pool_lookup;
    size_t lookup_blocks; /* blocks in the lookup index (1 M) */
    uint64_t cold_bytes;  /* bytes per round of the cold figures (512 MiB) */
    int cold_rounds;      /* rounds of the cold figures, tierd and fio interleaved */
    int prefetch_trials;  /* chains got with prefetch, and as many without */
    unsigned work_us;     /* simulated engine work between lookup and get */
    size_t restart_blocks; /* blocks in the cold index of the restart figure */
} opt = {
    .groups = GRP_ALL,
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

static char tmpdir[128]; /* private folder for sockets, data and logs */
static int n_targets;         /* figures reported (or that failed) */
static int n_met;             /* ... whose target was met */
static int n_errors;          /* failures that make the exit status non-zero */

/* Children to stop at exit or on a signal: tierd, redis-server, fio. At most
 * three live at once (the remote figure's cluster); a fixed array, scanned
 * linearly. */
#define MAX_CHILDREN 4
static volatile pid_t children[MAX_CHILDREN];

/* ---- small helpers ---------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}

/* splitmix64: a fast, fixed-seed generator for keys, tokens and payloads. */
static uint64_t rng_next(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static void rand_keys(uint64_t *s, kvt_key *k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        for (size_t j = 0; j < KVT_KEY_BYTES; j += 8) {
            uint64_t v = rng_next(s);
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
static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_double);
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* A buffer of `bytes` whose pages are already faulted in and hold
 * pseudo-random data (so nothing is a shared zero page). NULL on failure. */
static void *alloc_faulted(size_t bytes, uint64_t seed)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    uint64_t *w = p;
    for (size_t i = 0; i < bytes / 8; i++)
        w[i] = rng_next(&seed);
    return p;
}

static void free_faulted(void *p, size_t bytes)
{
    if (p)
        munmap(p, bytes);
}

/* Print one figure and count it. target is the number as printed; the
 * comparison uses its value. */
static void report(const char *name, double v, const char *vfmt, const char *unit,
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
    n_targets++;
    n_met += met;
}

/* A figure that could not be measured: counted as missed, and an error. */
static void report_fail(const char *name, const char *why, int err)
{
    if (err)
        printf("# %s: not measured: %s: %s (%d)\n", name, why, kvt_strerror(err), err);
    else
        printf("# %s: not measured: %s\n", name, why);
    fflush(stdout);
    n_targets++;
    n_errors++;
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
static pid_t spawn(char *const argv[], const char *log_path)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid < 0)
        return -errno;
    if (pid == 0) {
        int fd = open(log_path, O_WRONLY | O_CREAT | O_TRUNC, 0600);
        int nul = open("/dev/null", O_RDONLY);
        if (fd >= 0) {
            dup2(fd, STDOUT_FILENO);
            dup2(fd, STDERR_FILENO);
            close(fd);
        }
        if (nul >= 0) {
            dup2(nul, STDIN_FILENO);
            close(nul);
        }
        prctl(PR_SET_PDEATHSIG, SIGTERM);
        if (getppid() != parent)
            _exit(127);
        execvp(argv[0], argv);
        fprintf(stderr, "tierbench: exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    track_child(pid, true);
    return pid;
}

/* SIGTERM the child and reap it, SIGKILL after 10 s. Returns its wait
 * status, or -1 if it had to be killed. */
static int stop_child(pid_t pid)
{
    int st = 0;
    kill(pid, SIGTERM);
    for (int i = 0; i < 1000; i++) {
        pid_t r = waitpid(pid, &st, WNOHANG);
        if (r == pid || (r < 0 && errno != EINTR)) {
            track_child(pid, false);
            return st;
        }
        sleep_ms(10);
    }
    kill(pid, SIGKILL);
    waitpid(pid, &st, 0);
    track_child(pid, false);
    return -1;
}

/* True while the child runs; reaps it (status in *st) if it has exited. */
static bool child_alive(pid_t pid, int *st)
{
    pid_t r = waitpid(pid, st, WNOHANG);
    if (r == pid) {
        track_child(pid, false);
        return false;
    }
    return r == 0;
}

/* Print the last lines of a child's log as context. */
static void print_log_tail(const char *what, const char *path)
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

static int rm_entry(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)flag, (void)ftw;
    remove(path);
    return 0;
}

static void cleanup(void)
{
    for (int i = 0; i < MAX_CHILDREN; i++) {
        if (children[i] > 0)
            stop_child(children[i]);
    }
    if (tmpdir[0])
        nftw(tmpdir, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* ---- a private tierd ---------------------------------------------------- */

struct daemon {
    pid_t pid;
    char sock[PATH_MAX];
    char log[PATH_MAX];
    char data[PATH_MAX];
    double ready_s; /* from fork until kvt_connect succeeded */
    kvt_client *c;  /* connected client, owned */
};

/* Start $KVT_TEST_BIN/tierd with its own socket and data folder named by
 * tag (<tmpdir>/<tag>.data, kept between starts: a second start with the
 * same tag is a restart on the same data), plus the NULL-terminated extra
 * arguments, and connect to it, polling every 2 ms for up to timeout_s.
 * Returns 0 or a negative error; prints why. */
static int tierd_start_ex(struct daemon *d, const char *tag, const char *warm, bool no_mlock,
                          const char *const *extra, unsigned timeout_s)
{
    const char *bin_dir = getenv("KVT_TEST_BIN");
    char bin[PATH_MAX], args[256] = "";
    char *argv[24];
    int st = 0, r = -ENOENT, n = 0;

    memset(d, 0, sizeof(*d));
    snprintf(bin, sizeof(bin), "%s/tierd", bin_dir && *bin_dir ? bin_dir : "./build");
    snprintf(d->sock, sizeof(d->sock), "%s/%s.sock", tmpdir, tag);
    snprintf(d->log, sizeof(d->log), "%s/%s.log", tmpdir, tag);
    snprintf(d->data, sizeof(d->data), "%s/%s.data", tmpdir, tag);
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
    uint64_t t0 = now_ns();
    d->pid = spawn(argv, d->log);
    if (d->pid < 0)
        return (int)d->pid;

    while (now_ns() - t0 < timeout_s * 1000000000ull) {
        if (!child_alive(d->pid, &st)) {
            printf("# tierd (%s) exited during start-up, status 0x%x\n", tag, st);
            print_log_tail("tierd", d->log);
            d->pid = 0;
            return -ECHILD;
        }
        r = kvt_connect(d->sock, &d->c);
        if (r == 0) {
            d->ready_s = (double)(now_ns() - t0) / 1e9;
            printf("# tierd (%s): --warm-bytes %s%s%s, ready after %.0f ms\n", tag, warm,
                   no_mlock ? " --no-mlock" : "", args, d->ready_s * 1e3);
            return 0;
        }
        sleep_ms(2);
    }
    printf("# tierd (%s): no connection after %u s: %s\n", tag, timeout_s, kvt_strerror(r));
    print_log_tail("tierd", d->log);
    stop_child(d->pid);
    d->pid = 0;
    return r ? r : -ETIMEDOUT;
}

/* The figures that predate the cold tier measure the warm path: their
 * tierd keeps its cold tier (the default) but does not write the warm tier
 * to disk at stop (--no-flush), which for the lookup figure's 1 M warm
 * blocks would take longer than the 10 s a stop is given. */
static int tierd_start(struct daemon *d, const char *tag, const char *warm, bool no_mlock)
{
    static const char *const no_flush[] = { "--no-flush", NULL };
    return tierd_start_ex(d, tag, warm, no_mlock, no_flush, 10);
}

static void tierd_stop(struct daemon *d)
{
    kvt_close(d->c);
    d->c = NULL;
    if (d->pid > 0) {
        int st = stop_child(d->pid);
        if (st != 0) {
            printf("# warning: tierd did not stop cleanly on SIGTERM (status 0x%x)\n", st);
            print_log_tail("tierd", d->log);
        }
    }
    d->pid = 0;
}

static int ns_open(kvt_client *c, const char *model, uint64_t block_bytes, kvt_ns **ns)
{
    kvt_model m = {
        .model_id = model, .dtype = "bf16", .layout = "tierbench",
        .block_tokens = 16, .tp_rank = 0, .tp_size = 1, .block_bytes = block_bytes,
    };
    return kvt_ns_open(c, &m, ns);
}

/* ---- a private redis-server --------------------------------------------- */

struct redis_srv {
    pid_t pid;
    char log[PATH_MAX];
    redisContext *rc;
};

/* A TCP port on 127.0.0.1 that nothing listens on right now. */
static int free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port = -1;
    if (fd < 0)
        return -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

/* Ping once; true on PONG. */
static bool redis_ping(redisContext *rc)
{
    redisReply *rep = redisCommand(rc, "PING");
    bool ok = rep && rep->type == REDIS_REPLY_STATUS && strcmp(rep->str, "PONG") == 0;
    if (rep)
        freeReplyObject(rep);
    return ok;
}

static int redis_start(struct redis_srv *s)
{
    char port_s[16];
    int port = free_port(), st = 0;

    memset(s, 0, sizeof(*s));
    if (port < 0)
        return -EADDRNOTAVAIL;
    snprintf(port_s, sizeof(port_s), "%d", port);
    snprintf(s->log, sizeof(s->log), "%s/redis.log", tmpdir);
    char *argv[] = { "redis-server", "--port", port_s, "--bind", "127.0.0.1", "--save", "",
                     "--appendonly", "no", "--daemonize", "no", "--dir", tmpdir, NULL };
    s->pid = spawn(argv, s->log);
    if (s->pid < 0)
        return (int)s->pid;

    uint64_t t0 = now_ns();
    while (now_ns() - t0 < 10 * 1000000000ull) {
        if (!child_alive(s->pid, &st)) {
            printf("# redis-server exited during start-up, status 0x%x\n", st);
            print_log_tail("redis", s->log);
            s->pid = 0;
            return -ECHILD;
        }
        struct timeval tv = { .tv_sec = 1 };
        s->rc = redisConnectWithTimeout("127.0.0.1", port, tv);
        if (s->rc && !s->rc->err && redis_ping(s->rc)) {
            struct timeval none = { 0 };
            redisSetTimeout(s->rc, none); /* block as long as a big pipeline needs */
            printf("# redis-server on 127.0.0.1:%d, ready after %.0f ms\n", port,
                   (double)(now_ns() - t0) / 1e6);
            return 0;
        }
        if (s->rc)
            redisFree(s->rc);
        s->rc = NULL;
        sleep_ms(20);
    }
    printf("# redis-server: no PONG after 10 s\n");
    print_log_tail("redis", s->log);
    stop_child(s->pid);
    s->pid = 0;
    return -ETIMEDOUT;
}

static void redis_stop(struct redis_srv *s)
{
    if (s->rc)
        redisFree(s->rc);
    s->rc = NULL;
    if (s->pid > 0)
        stop_child(s->pid);
    s->pid = 0;
}

/* ---- timed rounds ------------------------------------------------------- */

/* One unit of work; returns 0 or a negative error. */
typedef int (*iter_fn)(void *arg);

/* Run fn until at least opt.round_ns have passed; returns the seconds per
 * call through *per_iter, or fn's error. */
static int timed_round(iter_fn fn, void *arg, double *per_iter)
{
    uint64_t t0 = now_ns(), t, n = 0;
    do {
        int r = fn(arg);
        if (r < 0)
            return r;
        n++;
        t = now_ns();
    } while (t - t0 < opt.round_ns);
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
static pid_t echo_open(size_t rep_bytes, int *sock)
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

static void echo_close(int sock, pid_t pid)
{
    close(sock); /* the child's recv() returns 0 and it exits */
    waitpid(pid, NULL, 0);
}

/* Mean microseconds of a 64-byte request / 64-byte reply round trip. */
static int bare_rtt_us(double *us)
{
    char msg[64] = { 0 };
    int sock, r = 0;
    pid_t pid = echo_open(sizeof(msg), &sock);
    if (pid < 0)
        return (int)pid;
    uint64_t t0 = 0;
    for (int i = -100; i < 5000 && r == 0; i++) {
        if (i == 0)
            t0 = now_ns();
        if (send(sock, msg, sizeof(msg), 0) != sizeof(msg) ||
            recv(sock, msg, sizeof(msg), 0) != sizeof(msg))
            r = -EIO;
    }
    *us = (double)(now_ns() - t0) / 1e3 / 5000;
    echo_close(sock, pid);
    return r;
}

/* ---- figures 1 and 2: put + get of batches ------------------------------ */

#define PG_BATCH 64

/*
 * Like for like: every contender takes its bytes from the same caller-owned,
 * pre-faulted source buffers and leaves them in the same caller-owned,
 * pre-faulted destination buffers.
 *   memcpy:  src -> tmp -> dst, tmp being a pre-faulted staging area;
 *   kvtier:  kvt_put(src) into pool slots, kvt_get() into dst, kvt_remove()
 *            (fresh keys every batch, so nothing is deduplicated);
 *   redis:   64 pipelined SETs from src, 64 pipelined GETs copied into dst.
 */
struct pg {
    size_t bs;        /* block bytes */
    void *src_mem, *dst_mem, *tmp_mem; /* PG_BATCH * bs each */
    void *src[PG_BATCH], *dst[PG_BATCH], *tmp[PG_BATCH];
    kvt_ns *ns;
    uint64_t key_seed; /* fresh keys for every kvtier batch */
    kvt_key keys[PG_BATCH];
    redisContext *rc;  /* NULL: no redis contender */
    const char *what;  /* the call that failed, for the report */
};

static int pg_memcpy(void *arg)
{
    struct pg *p = arg;
    for (int i = 0; i < PG_BATCH; i++)
        memcpy(p->tmp[i], p->src[i], p->bs);
    for (int i = 0; i < PG_BATCH; i++)
        memcpy(p->dst[i], p->tmp[i], p->bs);
    return 0;
}

/* Map a short count to an error so that the round stops. */
static int want(struct pg *p, const char *what, int r, int n)
{
    if (r == n)
        return 0;
    p->what = what;
    return r < 0 ? r : -EIO;
}

static int pg_kvtier(void *arg)
{
    struct pg *p = arg;
    int r;

    rand_keys(&p->key_seed, p->keys, PG_BATCH);
    r = kvt_put(p->ns, NULL, p->keys, PG_BATCH, (const void *const *)p->src);
    if ((r = want(p, "kvt_put", r, PG_BATCH)) < 0)
        return r;
    r = kvt_get(p->ns, p->keys, PG_BATCH, p->dst);
    if ((r = want(p, "kvt_get", r, PG_BATCH)) < 0)
        return r;
    r = kvt_remove(p->ns, p->keys, PG_BATCH);
    return want(p, "kvt_remove", r, PG_BATCH);
}

static int pg_redis(void *arg)
{
    struct pg *p = arg;
    char key[PG_BATCH][16];
    size_t klen[PG_BATCH];
    int err = 0;

    for (int i = 0; i < PG_BATCH; i++) {
        klen[i] = (size_t)snprintf(key[i], sizeof(key[i]), "tb:%d", i);
        const char *argv[3] = { "SET", key[i], p->src[i] };
        size_t len[3] = { 3, klen[i], p->bs };
        if (redisAppendCommandArgv(p->rc, 3, argv, len) != REDIS_OK)
            goto out_conn;
    }
    for (int i = 0; i < PG_BATCH; i++) {
        redisReply *rep;
        if (redisGetReply(p->rc, (void **)&rep) != REDIS_OK)
            goto out_conn;
        if (rep->type != REDIS_REPLY_STATUS)
            err = -EIO;
        freeReplyObject(rep);
    }
    for (int i = 0; i < PG_BATCH; i++) {
        const char *argv[2] = { "GET", key[i] };
        size_t len[2] = { 3, klen[i] };
        if (redisAppendCommandArgv(p->rc, 2, argv, len) != REDIS_OK)
            goto out_conn;
    }
    for (int i = 0; i < PG_BATCH; i++) {
        redisReply *rep;
        if (redisGetReply(p->rc, (void **)&rep) != REDIS_OK)
            goto out_conn;
        if (rep->type == REDIS_REPLY_STRING && rep->len == p->bs)
            memcpy(p->dst[i], rep->str, p->bs);
        else
            err = -EIO;
        freeReplyObject(rep);
    }
    if (err)
        p->what = "redis SET/GET reply";
    return err;
out_conn:
    p->what = p->rc->errstr[0] ? p->rc->errstr : "redis connection";
    return -EIO;
}

static void pg_free(struct pg *p)
{
    size_t bytes = PG_BATCH * p->bs;
    free_faulted(p->src_mem, bytes);
    free_faulted(p->dst_mem, bytes);
    free_faulted(p->tmp_mem, bytes);
}

static int pg_init(struct pg *p, size_t bs)
{
    size_t bytes = PG_BATCH * bs;
    memset(p, 0, sizeof(*p));
    p->bs = bs;
    p->key_seed = 0x6b767469657262ull ^ bs; /* fixed: runs are repeatable */
    p->src_mem = alloc_faulted(bytes, 1);
    p->dst_mem = alloc_faulted(bytes, 2);
    p->tmp_mem = alloc_faulted(bytes, 3);
    if (!p->src_mem || !p->dst_mem || !p->tmp_mem) {
        pg_free(p);
        return -ENOMEM;
    }
    for (int i = 0; i < PG_BATCH; i++) {
        p->src[i] = (char *)p->src_mem + (size_t)i * bs;
        p->dst[i] = (char *)p->dst_mem + (size_t)i * bs;
        p->tmp[i] = (char *)p->tmp_mem + (size_t)i * bs;
    }
    return 0;
}

/*
 * Warm-up: write every slot of the pool once, so that neither this process's
 * page tables nor the pool's pages fault during the timed rounds, whatever
 * order the store hands slots out in. We put 1.25 pool-fulls of fresh
 * blocks (the store evicts the oldest past its high watermark), check one
 * batch's bytes on the way, then remove whatever is left.
 */
static int pg_warm(struct pg *p, kvt_client *c)
{
    kvt_stats st = { 0 };
    uint64_t cap = 0;
    int r;

    if (kvt_stats_get(c, &st) == 0)
        cap = st.tier[KVT_TIER_WARM].bytes_capacity;
    if (cap == 0)
        cap = GIB;
    size_t batches = (size_t)(cap / (PG_BATCH * p->bs) * 5 / 4 + 1);
    kvt_key *keys = malloc(batches * PG_BATCH * sizeof(*keys));
    if (!keys)
        return -ENOMEM;
    rand_keys(&p->key_seed, keys, batches * PG_BATCH);

    for (size_t b = 0; b < batches; b++) {
        r = kvt_put(p->ns, NULL, keys + b * PG_BATCH, PG_BATCH, (const void *const *)p->src);
        if (r < 0) {
            p->what = "kvt_put (warm-up)";
            goto out;
        }
    }
    /* the last batch is surely still resident: read it back and check it */
    memset(p->dst_mem, 0, PG_BATCH * p->bs);
    r = kvt_get(p->ns, keys + (batches - 1) * PG_BATCH, PG_BATCH, p->dst);
    if ((r = want(p, "kvt_get (warm-up)", r, PG_BATCH)) < 0)
        goto out;
    if (memcmp(p->src_mem, p->dst_mem, PG_BATCH * p->bs) != 0) {
        p->what = "kvt_get returned other bytes than kvt_put stored";
        r = -EIO;
        goto out;
    }
    for (size_t b = batches; b-- > 0;) {
        r = kvt_remove(p->ns, keys + b * PG_BATCH, PG_BATCH);
        if (r < 0) {
            p->what = "kvt_remove (warm-up)";
            goto out;
        }
    }
    printf("# warm-up: %zu batches (%.0f MiB) through a %.0f MiB pool, data checked\n", batches,
           (double)(batches * PG_BATCH * p->bs) / MIB, (double)cap / MIB);
    r = 0;
out:
    free(keys);
    return r;
}

/*
 * Where a kvtier batch spends its time, for the context lines: the same
 * put / get / remove as pg_kvtier, each call timed on its own, plus the
 * memcpy share, over one round. Medians are not needed for a breakdown;
 * means over a round are printed.
 */
static int pg_breakdown(struct pg *p)
{
    uint64_t t_put = 0, t_get = 0, t_rm = 0, t_mc = 0, n = 0, t0 = now_ns(), a, b;
    int r;

    while (now_ns() - t0 < opt.round_ns) {
        rand_keys(&p->key_seed, p->keys, PG_BATCH);
        a = now_ns();
        r = kvt_put(p->ns, NULL, p->keys, PG_BATCH, (const void *const *)p->src);
        b = now_ns();
        t_put += b - a;
        if ((r = want(p, "kvt_put", r, PG_BATCH)) < 0)
            return r;
        r = kvt_get(p->ns, p->keys, PG_BATCH, p->dst);
        a = now_ns();
        t_get += a - b;
        if ((r = want(p, "kvt_get", r, PG_BATCH)) < 0)
            return r;
        r = kvt_remove(p->ns, p->keys, PG_BATCH);
        b = now_ns();
        t_rm += b - a;
        if ((r = want(p, "kvt_remove", r, PG_BATCH)) < 0)
            return r;
        pg_memcpy(p);
        t_mc += now_ns() - b;
        n++;
    }
    printf("# per batch: kvt_put %.1f us, kvt_get %.1f us, kvt_remove %.1f us; "
           "memcpy src->tmp->dst %.1f us\n", (double)t_put / 1e3 / (double)n,
           (double)t_get / 1e3 / (double)n, (double)t_rm / 1e3 / (double)n,
           (double)t_mc / 1e3 / (double)n);
    return 0;
}

struct pg_result {
    double memcpy_gbs, kvtier_gbs, redis_gbs; /* medians, GB/s of block bytes */
    double vs_memcpy, vs_redis;               /* medians of per-round ratios */
};

/* Interleave rounds of memcpy, kvtier and (when p->rc) redis. */
static int pg_measure(struct pg *p, struct pg_result *res)
{
    double t_mc[64], t_kv[64], t_rd[64], r_mc[64], r_rd[64];
    double bytes = (double)(PG_BATCH * p->bs);
    int n = opt.rounds, r;

    /* one untimed pass of each, so caches and lazy set-up are out of the way */
    if ((r = pg_memcpy(p)) < 0 || (r = pg_kvtier(p)) < 0 || (p->rc && (r = pg_redis(p)) < 0))
        return r;
    for (int i = 0; i < n; i++) {
        if ((r = timed_round(pg_memcpy, p, &t_mc[i])) < 0 ||
            (r = timed_round(pg_kvtier, p, &t_kv[i])) < 0)
            return r;
        r_mc[i] = t_mc[i] / t_kv[i];
        if (p->rc) {
            if ((r = timed_round(pg_redis, p, &t_rd[i])) < 0)
                return r;
            r_rd[i] = t_rd[i] / t_kv[i];
        }
    }
    res->memcpy_gbs = bytes / median(t_mc, n) / 1e9;
    res->kvtier_gbs = bytes / median(t_kv, n) / 1e9;
    res->vs_memcpy = median(r_mc, n);
    if (p->rc) {
        res->redis_gbs = bytes / median(t_rd, n) / 1e9;
        res->vs_redis = median(r_rd, n);
    }
    return 0;
}

/* Figure 1 for one block size, and figure 2 when with_redis. */
static void bench_put_get(size_t bs, const char *pool, bool with_redis)
{
    char name[64], rname[] = "put_get_2MiB_vs_redis", tag[32];
    const char *target = bs >= 2 * MIB ? "0.8" : "0.6";
    struct daemon d;
    struct redis_srv rs = { 0 };
    struct pg p;
    struct pg_result res = { 0 };
    int r;

    snprintf(name, sizeof(name), "put_get_%zu%s_vs_memcpy",
             (size_t)(bs >= MIB ? bs / MIB : bs / 1024), bs >= MIB ? "MiB" : "KiB");
    snprintf(tag, sizeof(tag), "pg%zuk", bs / 1024);
    printf("# --- %s: batches of %d blocks of %zu KiB, put then get (median of %d rounds)\n",
           name, PG_BATCH, bs / 1024, opt.rounds);
    fflush(stdout);
    if ((r = pg_init(&p, bs)) < 0) {
        report_fail(name, "buffers", r);
        if (with_redis)
            report_fail(rname, "buffers", r);
        return;
    }
    if ((r = tierd_start(&d, tag, pool, false)) < 0) {
        report_fail(name, "tierd did not start", r);
        if (with_redis)
            report_fail(rname, "tierd did not start", r);
        goto out_free;
    }
    if ((r = ns_open(d.c, bs >= MIB ? "tierbench/put-get-2m" : "tierbench/put-get-64k", bs,
                     &p.ns)) < 0) {
        p.what = "kvt_ns_open";
        goto out_fail;
    }
    if ((r = pg_warm(&p, d.c)) < 0)
        goto out_fail;
    if (with_redis) {
        if ((r = redis_start(&rs)) < 0) {
            report_fail(rname, "redis-server did not start", r);
            with_redis = false;
        } else {
            p.rc = rs.rc;
        }
    }
    if ((r = pg_measure(&p, &res)) < 0)
        goto out_fail;

    printf("# memcpy src->tmp->dst: %.2f GB/s   kvtier put+get: %.2f GB/s (block bytes/s)\n",
           res.memcpy_gbs, res.kvtier_gbs);
    if ((r = pg_breakdown(&p)) < 0)
        printf("# per-call breakdown failed: %s: %s\n", p.what, kvt_strerror(r));
    double rtt;
    if (bare_rtt_us(&rtt) == 0)
        printf("# bare request/reply between two processes here: %.1f us; a kvtier batch "
               "makes 4 (reserve, commit, get, remove)\n", rtt);
    report(name, res.vs_memcpy, "%.2f", "ratio", ">=", target);
    if (with_redis) {
        printf("# redis pipelined SET+GET: %.2f GB/s   kvtier: %.2f GB/s\n", res.redis_gbs,
               res.kvtier_gbs);
        report(rname, res.vs_redis, "%.2f", "ratio", ">=", "3");
    }
    goto out_stop;

out_fail:
    report_fail(name, p.what ? p.what : "put/get", r);
    if (with_redis)
        report_fail(rname, p.what ? p.what : "put/get", r);
out_stop:
    redis_stop(&rs);
    tierd_stop(&d);
out_free:
    pg_free(&p);
}

/* ---- figure 3: lookups of 1000-key chains over 1 M blocks --------------- */

#define CHAIN 1000

/* A plain open-addressing table over the same keys: the baseline a lookup
 * is judged against. Slots hold key index + 1 (0: empty); load 0.5. */
struct oa {
    uint32_t *slot;
    uint64_t mask;
    const kvt_key *keys;
};

static uint64_t key_word(const kvt_key *k)
{
    uint64_t h;
    memcpy(&h, k->b, 8); /* keys are uniformly random: any 8 bytes hash well */
    return h;
}

static int oa_build(struct oa *o, const kvt_key *keys, size_t n)
{
    size_t cap = 1;
    while (cap < 2 * n)
        cap <<= 1;
    o->slot = calloc(cap, sizeof(*o->slot));
    if (!o->slot)
        return -ENOMEM;
    o->mask = cap - 1;
    o->keys = keys;
    for (size_t i = 0; i < n; i++) {
        uint64_t s = key_word(&keys[i]) & o->mask;
        while (o->slot[s])
            s = (s + 1) & o->mask;
        o->slot[s] = (uint32_t)i + 1;
    }
    return 0;
}

/* Leading keys of k[0..n) present in the table. */
static size_t oa_lookup(const struct oa *o, const kvt_key *k, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        uint64_t s = key_word(&k[i]) & o->mask;
        for (;;) {
            uint32_t e = o->slot[s];
            if (e == 0)
                return i;
            if (memcmp(o->keys[e - 1].b, k[i].b, KVT_KEY_BYTES) == 0)
                break;
            s = (s + 1) & o->mask;
        }
    }
    return n;
}

/* What one timed lookup call needs: the chains and where to look them up. */
struct lk {
    const kvt_key *keys;  /* all keys; chain c is keys[c*CHAIN ...] */
    const struct tier_key *tkeys;
    size_t chains;        /* full chains present */
    uint64_t seed;        /* picks the chain of each call */
    kvt_ns *ns;           /* client lookups */
    struct tier *t;       /* in-process lookups */
    const struct oa *oa;  /* baseline lookups */
    int sock;             /* transport baseline: our end of a socketpair */
    char *msg;            /* transport baseline: request buffer */
};

static size_t pick_chain(struct lk *l)
{
    return (size_t)(rng_next(&l->seed) % l->chains);
}

static int lk_client(void *arg)
{
    struct lk *l = arg;
    int r = kvt_lookup(l->ns, l->keys + pick_chain(l) * CHAIN, CHAIN, 0, NULL);
    return r == CHAIN ? 0 : r < 0 ? r : -ENOENT;
}

static int lk_inproc(void *arg)
{
    struct lk *l = arg;
    size_t r = tier_lookup(l->t, 1, l->tkeys + pick_chain(l) * CHAIN, CHAIN, NULL);
    return r == CHAIN ? 0 : -ENOENT;
}

static int lk_oa(void *arg)
{
    struct lk *l = arg;
    return oa_lookup(l->oa, l->keys + pick_chain(l) * CHAIN, CHAIN) == CHAIN ? 0 : -ENOENT;
}

/* Transport baseline: a lookup-sized request (header + 1000 keys) to an echo
 * process over SOCK_SEQPACKET, and a lookup-sized reply (1000 tier bytes). */
#define LK_REQ_BYTES (48 + CHAIN * KVT_KEY_BYTES)
#define LK_REP_BYTES (32 + CHAIN)

static int lk_sock(void *arg)
{
    struct lk *l = arg;
    char rep[LK_REP_BYTES];
    memcpy(l->msg + 48, l->keys + pick_chain(l) * CHAIN, CHAIN * KVT_KEY_BYTES);
    if (send(l->sock, l->msg, LK_REQ_BYTES, 0) != LK_REQ_BYTES)
        return -errno;
    if (recv(l->sock, rep, sizeof(rep), 0) != LK_REP_BYTES)
        return -EIO;
    return 0;
}

/* Keys per second: the median over opt.rounds rounds of fn. */
static int lk_rate(iter_fn fn, struct lk *l, double *keys_per_s)
{
    double t[64];
    int r;
    for (int i = 0; i < 50; i++) { /* warm caches and branch predictors */
        if ((r = fn(l)) < 0)
            return r;
    }
    for (int i = 0; i < opt.rounds; i++) {
        if ((r = timed_round(fn, l, &t[i])) < 0)
            return r;
    }
    *keys_per_s = CHAIN / median(t, opt.rounds);
    return 0;
}

/* The round trip floor of a lookup: the same bytes through a socketpair. */
static int sock_floor(struct lk *l, double *keys_per_s)
{
    pid_t pid = echo_open(LK_REP_BYTES, &l->sock);
    int r;
    if (pid < 0)
        return (int)pid;
    l->msg = calloc(1, LK_REQ_BYTES);
    r = l->msg ? lk_rate(lk_sock, l, keys_per_s) : -ENOMEM;
    free(l->msg);
    l->msg = NULL;
    echo_close(l->sock, pid);
    return r;
}

/* Figure 3a: kvt_lookup through tierd over 1 M blocks. */
static void bench_lookup_client(const kvt_key *keys, size_t nkeys, const struct oa *oa)
{
    const char *name = "lookup_client_keys_per_s";
    struct daemon d;
    struct lk l = { .keys = keys, .chains = nkeys / CHAIN, .seed = 7, .oa = oa };
    void **slots = malloc(CHAIN * sizeof(*slots));
    double rate, base, floor_rate;
    const char *what = "";
    int r;

    printf("# --- %s: kvt_lookup of %d-key chains, index of %zu blocks of 4 KiB\n", name,
           CHAIN, nkeys);
    fflush(stdout);
    if (!slots) {
        report_fail(name, "malloc", -ENOMEM);
        return;
    }
    if ((r = tierd_start(&d, "lookup", opt.pool_lookup, true)) < 0) {
        report_fail(name, "tierd did not start", r);
        free(slots);
        return;
    }
    what = "kvt_ns_open";
    if ((r = ns_open(d.c, "tierbench/lookup", 4096, &l.ns)) < 0)
        goto out_fail;

    /* fill: reserve + commit, chain by chain, without writing the slots */
    uint64_t t0 = now_ns();
    for (size_t at = 0; at < nkeys; at += CHAIN) {
        size_t n = nkeys - at < CHAIN ? nkeys - at : CHAIN;
        what = "kvt_put_reserve (fill)";
        r = kvt_put_reserve(l.ns, NULL, keys + at, n, slots);
        if (r != (int)n)
            goto out_short;
        what = "kvt_put_commit (fill)";
        r = kvt_put_commit(l.ns, keys + at, n);
        if (r != (int)n)
            goto out_short;
    }
    printf("# fill through the client: %.0f keys/s (reserve + commit, batches of %d)\n",
           (double)nkeys / ((double)(now_ns() - t0) / 1e9), CHAIN);

    kvt_stats st;
    if (kvt_stats_get(d.c, &st) == 0)
        printf("# tierd index: %" PRIu64 " entries, %" PRIu64 " bytes (%.1f bytes/entry)\n",
               st.index_entries, st.index_bytes,
               st.index_entries ? (double)st.index_bytes / (double)st.index_entries : 0.0);

    what = "kvt_lookup";
    if ((r = lk_rate(lk_client, &l, &rate)) < 0)
        goto out_fail;
    what = "baseline";
    if ((r = lk_rate(lk_oa, &l, &base)) < 0 || (r = sock_floor(&l, &floor_rate)) < 0)
        goto out_fail;
    printf("# same-run baselines: open-addressing probe loop %.0f keys/s; "
           "seqpacket round trip of the same bytes %.0f keys/s\n", base, floor_rate);
    printf("# kvtier client lookup = %.2f x probe loop, %.2f x bare round trip\n", rate / base,
           rate / floor_rate);
    report(name, rate, "%.0f", "keys/s", ">=", "2000000");
    goto out;

out_short:
    if (r >= 0) {
        printf("# %s: %d of the batch\n", what, r);
        r = -EIO;
    }
out_fail:
    report_fail(name, what, r);
out:
    tierd_stop(&d);
    free(slots);
}

/* Figures 3b and 5: the in-process store with 1 M blocks. */
static void bench_inproc(const kvt_key *keys, size_t nkeys, const struct oa *oa)
{
    const char *name = "lookup_inproc_keys_per_s", *iname = "index_bytes_per_block";
    struct tier_cfg cfg = {
        .warm_bytes = (uint64_t)(nkeys + nkeys / 4) * 4096, /* sparse; 4 KiB a block */
        .high_wm = 0.95, .low_wm = 0.85, .lock_memory = false, .huge_pages = false,
    };
    struct tier *t = NULL;
    struct tier_key *tk = malloc(nkeys * sizeof(*tk));
    uint32_t *ids = malloc(CHAIN * sizeof(*ids));
    uint64_t *offs = malloc(CHAIN * sizeof(*offs));
    struct lk l = { .keys = keys, .chains = nkeys / CHAIN, .seed = 11, .oa = oa };
    const char *what = "malloc";
    double rate, base;
    int r = -ENOMEM;

    printf("# --- %s: tier_lookup of %d-key chains, in-process store of %zu blocks\n", name,
           CHAIN, nkeys);
    fflush(stdout);
    if (!tk || !ids || !offs)
        goto out_fail;
    for (size_t i = 0; i < nkeys; i++)
        memcpy(tk[i].b, keys[i].b, TIER_KEY_BYTES);
    l.tkeys = tk;
    what = "tier_create";
    if ((r = tier_create(&cfg, &t)) < 0)
        goto out_fail;
    l.t = t;

    uint64_t t0 = now_ns();
    for (size_t at = 0; at < nkeys; at += CHAIN) {
        size_t n = nkeys - at < CHAIN ? nkeys - at : CHAIN;
        what = "tier_reserve (fill)";
        r = tier_reserve(t, 1, 4096, 1, NULL, tk + at, n, ids, offs);
        if (r != (int)n)
            goto out_short;
        what = "tier_commit (fill)";
        r = (int)tier_commit(t, 1, 4096, 1, tk + at, n);
        if (r != (int)n)
            goto out_short;
    }
    printf("# fill in-process: %.0f keys/s (reserve + commit, batches of %d)\n",
           (double)nkeys / ((double)(now_ns() - t0) / 1e9), CHAIN);

    what = "tier_lookup";
    if ((r = lk_rate(lk_inproc, &l, &rate)) < 0)
        goto out_fail;
    what = "baseline";
    if ((r = lk_rate(lk_oa, &l, &base)) < 0)
        goto out_fail;
    printf("# same-run baseline: open-addressing probe loop %.0f keys/s "
           "(tier_lookup = %.2f x baseline)\n", base, rate / base);
    report(name, rate, "%.0f", "keys/s", ">=", "10000000");

    struct tier_stats ts;
    tier_stats_get(t, &ts);
    printf("# index: %" PRIu64 " entries, %" PRIu64 " bytes; baseline table %zu bytes/key "
           "(slots only) + 32 key bytes\n", ts.index_entries, ts.index_bytes,
           (size_t)((oa->mask + 1) * sizeof(uint32_t) / nkeys));
    report(iname, tier_index_bytes_per_block(t), "%.1f", "bytes", "<=", "128");
    goto out;

out_short:
    if (r >= 0) {
        printf("# %s: %d of the batch\n", what, r);
        r = -EIO;
    }
out_fail:
    report_fail(name, what, r);
    report_fail(iname, what, r);
out:
    tier_destroy(t);
    free(tk);
    free(ids);
    free(offs);
}

static void bench_lookups(unsigned groups)
{
    size_t nkeys = opt.lookup_blocks;
    kvt_key *keys = malloc(nkeys * sizeof(*keys));
    struct oa oa = { 0 };
    uint64_t seed = 0x6c6f6f6b7570ull;

    if (keys)
        rand_keys(&seed, keys, nkeys);
    if (!keys || oa_build(&oa, keys, nkeys) < 0) {
        if (groups & GRP_LOOKUP)
            report_fail("lookup_client_keys_per_s", "malloc", -ENOMEM);
        if (groups & GRP_INPROC) {
            report_fail("lookup_inproc_keys_per_s", "malloc", -ENOMEM);
            report_fail("index_bytes_per_block", "malloc", -ENOMEM);
        }
        free(keys);
        return;
    }
    /* one big store at a time: the daemon's is gone before ours is made */
    if (groups & GRP_LOOKUP)
        bench_lookup_client(keys, nkeys, &oa);
    if (groups & GRP_INPROC)
        bench_inproc(keys, nkeys, &oa);
    free(oa.slot);
    free(keys);
}

/* ---- figure 4: hashing a prompt ------------------------------------------ */

#define H_TOKENS 131072
#define H_BLOCK 16
#define H_KEYS (H_TOKENS / H_BLOCK)

/* Canonical CBOR of an unsigned integer (major type 0). */
static size_t cbor_uint(uint8_t *o, uint32_t v)
{
    if (v < 24) {
        o[0] = (uint8_t)v;
        return 1;
    }
    if (v <= 0xff) {
        o[0] = 0x18, o[1] = (uint8_t)v;
        return 2;
    }
    if (v <= 0xffff) {
        o[0] = 0x19, o[1] = (uint8_t)(v >> 8), o[2] = (uint8_t)v;
        return 3;
    }
    o[0] = 0x1a, o[1] = (uint8_t)(v >> 24), o[2] = (uint8_t)(v >> 16);
    o[3] = (uint8_t)(v >> 8), o[4] = (uint8_t)v;
    return 5;
}

/* vLLM's block encoding: [parent bytes(32), [16 uints], null]. The worst
 * case is 1 + 34 + 1 + 16 * 5 + 1 = 117 bytes. */
#define H_ENC_MAX 128

static size_t cbor_block(uint8_t *o, const uint8_t parent[32], const uint32_t *tok)
{
    size_t n = 0;
    o[n++] = 0x83; /* array(3) */
    o[n++] = 0x58; /* bytes, 1-byte length */
    o[n++] = 0x20; /* 32 */
    memcpy(o + n, parent, 32);
    n += 32;
    o[n++] = 0x80 | H_BLOCK; /* array(16) */
    for (int i = 0; i < H_BLOCK; i++)
        n += cbor_uint(o + n, tok[i]);
    o[n++] = 0xf6; /* null: no extra keys */
    return n;
}

struct hb {
    const uint32_t *tokens;
    kvt_key *keys;          /* kvt_hash_prompt's output */
    uint8_t *enc;           /* H_KEYS encodings of H_ENC_MAX bytes each */
    size_t len[H_KEYS];     /* bytes of each encoding */
    uint8_t out[H_KEYS][32];
    EVP_MD_CTX *ctx;
    EVP_MD *md;
};

static int hb_raw(struct hb *h)
{
    for (size_t i = 0; i < H_KEYS; i++) {
        if (EVP_DigestInit_ex(h->ctx, h->md, NULL) != 1 ||
            EVP_DigestUpdate(h->ctx, h->enc + i * H_ENC_MAX, h->len[i]) != 1 ||
            EVP_DigestFinal_ex(h->ctx, h->out[i], NULL) != 1)
            return -EIO;
    }
    return 0;
}

static int hb_kvt(struct hb *h)
{
    kvt_hash_opts o = { .block_tokens = H_BLOCK, .seed = "0" };
    ssize_t n = kvt_hash_prompt(&o, h->tokens, H_TOKENS, h->keys);
    return n == H_KEYS ? 0 : n < 0 ? (int)n : -EIO;
}

/*
 * Build the encodings tierbench expects (the chain computed here with
 * CBOR + SHA-256 of its own) and compare kvt_hash_prompt's keys with them:
 * a fast hash of the wrong bytes would be no figure at all.
 */
static int hb_prepare(struct hb *h)
{
    static const uint8_t seed_cbor[] = { 0x61, '0' }; /* CBOR text "0" */
    uint8_t parent[32];
    kvt_key none;
    int r;

    if (EVP_Digest(seed_cbor, sizeof(seed_cbor), parent, NULL, h->md, NULL) != 1)
        return -EIO;
    if ((r = kvt_none_hash("0", &none)) < 0)
        return r;
    if (memcmp(none.b, parent, 32) != 0) {
        printf("# ERROR: kvt_none_hash(\"0\") is not SHA-256(CBOR(\"0\"))\n");
        return -EIO;
    }
    for (size_t i = 0; i < H_KEYS; i++) {
        uint8_t *e = h->enc + i * H_ENC_MAX;
        h->len[i] = cbor_block(e, parent, h->tokens + i * H_BLOCK);
        if (EVP_Digest(e, h->len[i], parent, NULL, h->md, NULL) != 1)
            return -EIO;
        memcpy(h->out[i], parent, 32);
    }
    if ((r = hb_kvt(h)) < 0)
        return r;
    for (size_t i = 0; i < H_KEYS; i++) {
        if (memcmp(h->keys[i].b, h->out[i], 32) != 0) {
            char a[65], b[65];
            kvt_key mine;
            memcpy(mine.b, h->out[i], 32);
            printf("# ERROR: kvt_hash_prompt key %zu is %s, expected %s\n", i,
                   kvt_key_hex(&h->keys[i], a), kvt_key_hex(&mine, b));
            return -EIO;
        }
    }
    return 0;
}

/* Median seconds of opt.hash_runs calls of fn. */
static int hb_time(int (*fn)(struct hb *), struct hb *h, double *secs)
{
    double t[256];
    int runs = opt.hash_runs < 256 ? opt.hash_runs : 256, r;
    if ((r = fn(h)) < 0) /* warm */
        return r;
    for (int i = 0; i < runs; i++) {
        uint64_t t0 = now_ns();
        if ((r = fn(h)) < 0)
            return r;
        t[i] = (double)(now_ns() - t0) / 1e9;
    }
    *secs = median(t, runs);
    return 0;
}

static void bench_hash(void)
{
    const char *name = "hash_131072_tokens_ms", *rname = "hash_vs_raw_sha256";
    struct hb *h = calloc(1, sizeof(*h));
    uint32_t *tokens = malloc(H_TOKENS * sizeof(*tokens));
    cpu_set_t old, one;
    bool pinned = false;
    const char *what = "malloc";
    double t_kvt, t_raw;
    uint64_t seed = 42;
    size_t total = 0;
    int r = -ENOMEM;

    printf("# --- %s: kvt_hash_prompt of %d random tokens (< 128000, seed 42), block %d, "
           "median of %d runs on one core\n", name, H_TOKENS, H_BLOCK, opt.hash_runs);
    fflush(stdout);
    if (!h || !tokens)
        goto out_fail;
    h->keys = malloc(H_KEYS * sizeof(*h->keys));
    h->enc = malloc((size_t)H_KEYS * H_ENC_MAX);
    h->ctx = EVP_MD_CTX_new();
    h->md = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (!h->keys || !h->enc || !h->ctx || !h->md)
        goto out_fail;
    for (size_t i = 0; i < H_TOKENS; i++)
        tokens[i] = (uint32_t)(rng_next(&seed) % 128000);
    h->tokens = tokens;

    /* one core: stay on the CPU we are on for the timed part */
    if (sched_getaffinity(0, sizeof(old), &old) == 0) {
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
        pinned = sched_setaffinity(0, sizeof(one), &one) == 0;
    }
    what = "correctness check against tierbench's own CBOR + SHA-256";
    if ((r = hb_prepare(h)) < 0)
        goto out_fail;
    for (size_t i = 0; i < H_KEYS; i++)
        total += h->len[i];
    what = "kvt_hash_prompt";
    if ((r = hb_time(hb_kvt, h, &t_kvt)) < 0)
        goto out_fail;
    what = "EVP SHA-256";
    if ((r = hb_time(hb_raw, h, &t_raw)) < 0)
        goto out_fail;
    /* once more, so that drift between the two is visible in the context line */
    double t_kvt2;
    if ((r = hb_time(hb_kvt, h, &t_kvt2)) < 0)
        goto out_fail;
    t_kvt = t_kvt < t_kvt2 ? t_kvt : t_kvt2;

    printf("# keys checked against tierbench's own CBOR + SHA-256 chain: all %d equal\n",
           H_KEYS);
    printf("# raw EVP SHA-256 over %d buffers, %zu bytes in all (%.1f per block): %.3f ms; "
           "kvt_hash_prompt: %.3f ms (%.3f ms in a second pass)\n", H_KEYS, total,
           (double)total / H_KEYS, t_raw * 1e3, t_kvt * 1e3, t_kvt2 * 1e3);
    report(name, t_kvt * 1e3, "%.3f", "ms", "<=", "3");
    report(rname, t_raw / t_kvt, "%.2f", "ratio", ">=", "0.5");
    goto out;

out_fail:
    report_fail(name, what, r);
    report_fail(rname, what, r);
out:
    if (pinned)
        sched_setaffinity(0, sizeof(old), &old);
    if (h) {
        EVP_MD_free(h->md);
        EVP_MD_CTX_free(h->ctx);
        free(h->keys);
        free(h->enc);
    }
    free(h);
    free(tokens);
}

/* ---- helpers for the cold-tier figures ------------------------------------ */

static void rm_tree(const char *path)
{
    nftw(path, rm_entry, 16, FTW_DEPTH | FTW_PHYS);
}

/* Run argv to completion (output into log_path), waiting up to timeout_s.
 * Returns its exit status (0..255), or a negative error. */
static int run_wait(char *const argv[], const char *log_path, unsigned timeout_s)
{
    pid_t pid = spawn(argv, log_path);
    uint64_t t0 = now_ns();
    int st = 0;

    if (pid < 0)
        return (int)pid;
    while (child_alive(pid, &st)) {
        if (now_ns() - t0 > timeout_s * 1000000000ull) {
            printf("# %s: still running after %u s: stopped\n", argv[0], timeout_s);
            stop_child(pid);
            return -ETIMEDOUT;
        }
        sleep_ms(5);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -EINTR;
}

/* Read a whole (small) file into a NUL-terminated malloc'ed string. */
static char *slurp(const char *path)
{
    int fd = open(path, O_RDONLY);
    struct stat sb;
    char *buf = NULL;

    if (fd < 0)
        return NULL;
    if (fstat(fd, &sb) == 0 && sb.st_size < (64 << 20) && (buf = malloc((size_t)sb.st_size + 1))) {
        ssize_t n = pread(fd, buf, (size_t)sb.st_size, 0);
        if (n < 0) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = '\0';
        }
    }
    close(fd);
    return buf;
}

/* Print, as context, the first line of a log that contains needle (tierd's
 * lines name tierd already). */
static void print_log_line(const char *path, const char *needle)
{
    char *buf = slurp(path);
    char *p = buf ? strstr(buf, needle) : NULL;

    if (p) {
        while (p > buf && p[-1] != '\n')
            p--;
        char *e = strchr(p, '\n');
        if (e)
            *e = '\0';
        printf("# %s\n", p);
    }
    free(buf);
}

/* In fio's JSON, the number of field inside the object "dir" : { ... } (the
 * first such object: the first job's). The fields tierbench reads come
 * before any nested object, so the first match after the brace is the
 * object's own. A strstr walk, not a JSON parser: enough for fio's fixed
 * output format. */
static int json_field(const char *json, const char *dir, const char *field, double *out)
{
    char pat[64], fpat[64];

    snprintf(pat, sizeof(pat), "\"%s\"", dir);
    snprintf(fpat, sizeof(fpat), "\"%s\"", field);
    for (const char *p = strstr(json, pat); p; p = strstr(p + 1, pat)) {
        const char *q = p + strlen(pat), *end_obj;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
            q++;
        if (*q++ != ':')
            continue;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
            q++;
        if (*q != '{')
            continue;
        const char *f = strstr(q, fpat);
        end_obj = strchr(q + 1, '}'); /* the first closing brace: a nested object's, at worst */
        if (!f || (end_obj && f > end_obj))
            return -EPROTO;
        f += strlen(fpat);
        while (*f == ' ' || *f == ':')
            f++;
        char *e;
        double v = strtod(f, &e);
        if (e == f)
            return -EPROTO;
        *out = v;
        return 0;
    }
    return -EPROTO;
}

/* One fio run on <tmpdir>/fio.dat, the same shape as tierd's cold I/O. */
struct fio_job {
    const char *rw;  /* "write" or "read" */
    size_t bs;
    uint64_t size;
    unsigned qd;
    bool fdatasync;  /* --fdatasync=qd: a sync after every qd writes */
    bool lockstep;   /* submit qd, wait for all qd, repeat */
};

static char fio_cmd[1024]; /* the command line of the last fio run */

/* Bytes per second that fio reports for the job (its "bw_bytes"), and when
 * syncs is not NULL the number of fdatasyncs it issued. */
static int fio_run(const struct fio_job *j, double *bw, double *syncs)
{
    char file[PATH_MAX], out[PATH_MAX], log[PATH_MAX], a_file[PATH_MAX + 16],
        a_out[PATH_MAX + 16], a_size[48], a_bs[48], a_qd[32], a_rw[32], a_sync[32], a_b1[48],
        a_b2[48];
    char *argv[24];
    int n = 0, r;
    double io = 0, err = -1;

    snprintf(file, sizeof(file), "%s/fio.dat", tmpdir);
    snprintf(out, sizeof(out), "%s/fio.json", tmpdir);
    snprintf(log, sizeof(log), "%s/fio.log", tmpdir);
    snprintf(a_file, sizeof(a_file), "--filename=%s", file);
    snprintf(a_out, sizeof(a_out), "--output=%s", out);
    snprintf(a_size, sizeof(a_size), "--size=%" PRIu64, j->size);
    snprintf(a_bs, sizeof(a_bs), "--bs=%zu", j->bs);
    snprintf(a_qd, sizeof(a_qd), "--iodepth=%u", j->qd);
    snprintf(a_rw, sizeof(a_rw), "--rw=%s", j->rw);
    snprintf(a_sync, sizeof(a_sync), "--fdatasync=%u", j->qd);
    snprintf(a_b1, sizeof(a_b1), "--iodepth_batch_submit=%u", j->qd);
    snprintf(a_b2, sizeof(a_b2), "--iodepth_batch_complete_min=%u", j->qd);
    argv[n++] = "fio";
    argv[n++] = "--name=tierbench";
    argv[n++] = a_file;
    argv[n++] = a_size;
    argv[n++] = a_bs;
    argv[n++] = a_qd;
    argv[n++] = "--ioengine=io_uring";
    argv[n++] = "--direct=1";
    argv[n++] = a_rw;
    if (j->fdatasync) {
        argv[n++] = a_sync;
        argv[n++] = "--end_fsync=1"; /* the last writes durable too, as tierd's are */
    }
    if (j->lockstep) {
        argv[n++] = a_b1;
        argv[n++] = a_b2;
    }
    argv[n++] = "--output-format=json";
    argv[n++] = a_out;
    argv[n] = NULL;
    fio_cmd[0] = '\0';
    for (int i = 0; i < n && strlen(fio_cmd) + strlen(argv[i]) + 2 < sizeof(fio_cmd); i++)
        snprintf(fio_cmd + strlen(fio_cmd), sizeof(fio_cmd) - strlen(fio_cmd), "%s%s",
                 i ? " " : "", argv[i]);

    unlink(out);
    r = run_wait(argv, log, 300);
    if (r != 0) {
        printf("# fio exited with %d%s\n", r, r == 127 ? " (not installed? mk/deps.sh bench "
                                                         "installs Debian's fio)" : "");
        print_log_tail("fio", log);
        return r < 0 ? r : r == 127 ? -ENOENT : -ECHILD;
    }
    char *json = slurp(out);
    if (!json)
        return -EIO;
    r = json_field(json, j->rw, "bw_bytes", bw);
    if (r == 0)
        r = json_field(json, j->rw, "io_bytes", &io);
    if (r == 0 && syncs && json_field(json, "sync", "N", syncs) < 0)
        *syncs = -1;
    /* "error" is a plain field of the job object: the first one is the job's */
    const char *e = strstr(json, "\"error\"");
    if (e && (e = strchr(e, ':')))
        err = strtod(e + 1, NULL);
    free(json);
    if (r < 0 || err != 0 || io != (double)j->size || *bw <= 0) {
        printf("# fio: unexpected output in %s (error %.0f, io_bytes %.0f of %" PRIu64 ")\n",
               out, err, io, j->size);
        return r < 0 ? r : -EIO;
    }
    return 0;
}

static const char *size_label(size_t bs, char *buf, size_t cap)
{
    if (bs >= MIB)
        snprintf(buf, cap, "%zuMiB", (size_t)(bs / MIB));
    else
        snprintf(buf, cap, "%zuKiB", bs / 1024);
    return buf;
}

/* ---- figure 6: cold-tier writes and reads vs fio -------------------------- */

#define CQD 32    /* blocks per batch = tierd --cold-qd = fio --iodepth */
#define CW_WARM 4 /* untimed batches put (and got) before the timed rounds */

struct cold {
    size_t bs;
    size_t per_round;    /* blocks per round */
    int rounds;
    uint8_t *src;        /* CQD source blocks (pattern), pre-faulted */
    kvt_key *keys;       /* rounds * per_round fresh keys */
    kvt_ns *ns;
    const char *what;    /* the call that failed */
    uint64_t fill_ns;    /* time spent filling slots, all write rounds */
    uint64_t short_gets; /* gets answered with fewer blocks than asked, asked again */
    uint64_t get_calls;
};

/* A block's first 8 bytes: which block it is, so that a read can tell. */
static uint64_t stamp_of(size_t bs, size_t g)
{
    return 0x6b76746965720000ull ^ ((uint64_t)bs << 20) ^ (uint64_t)g;
}

/* Fill slot (block g) from source block j: pattern + stamp. */
static void fill_block(void *slot, const uint8_t *src, size_t bs, size_t g)
{
    uint64_t st = stamp_of(bs, g);
    memcpy((uint8_t *)slot + 8, src + 8, bs - 8);
    memcpy(slot, &st, 8);
}

/* 0 when slot holds block g (stamp; the whole block when full). */
static int check_block(const void *slot, const uint8_t *src, size_t bs, size_t g, bool full)
{
    uint64_t st;
    memcpy(&st, slot, 8);
    if (st != stamp_of(bs, g))
        return -EBADMSG;
    if (full && memcmp((const uint8_t *)slot + 8, src + 8, bs - 8) != 0)
        return -EBADMSG;
    return 0;
}

/* Map a short count to an error. */
static int want_n(const char **what_out, const char *what, int r, int n)
{
    if (r == n)
        return 0;
    *what_out = what;
    return r < 0 ? r : -EIO;
}

/* Put keys[0..n) (blocks g0...) as one durable batch: reserve, fill,
 * commit with KVT_COMMIT_DURABLE (returns once written, synced, indexed). */
static int put_durable(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                       const uint8_t *src, size_t nsrc, size_t bs, size_t g0, const char **what,
                       uint64_t *fill_ns)
{
    void *slots[KVT_BATCH_MAX];
    int r = kvt_put_reserve(ns, parent, keys, n, slots);

    if ((r = want_n(what, "kvt_put_reserve", r, (int)n)) < 0)
        return r;
    uint64_t a = now_ns();
    for (size_t j = 0; j < n; j++) {
        if (!slots[j]) {
            *what = "kvt_put_reserve: a fresh key came back deduplicated";
            return -EIO;
        }
        fill_block(slots[j], src + (j % nsrc) * bs, bs, g0 + j);
    }
    if (fill_ns)
        *fill_ns += now_ns() - a;
    r = kvt_put_commit_flags(ns, keys, n, KVT_COMMIT_DURABLE);
    return want_n(what, "kvt_put_commit_flags(KVT_COMMIT_DURABLE)", r, (int)n);
}

/* Lease all of keys[0..n), asking again after a short answer (tierd answers
 * a get with the leading run it could start reads for); leases[] gets one
 * lease per call. Returns the number of leases, or an error (0 hits for a
 * key that was put is an error). */
static int get_all(kvt_ns *ns, const kvt_key *keys, size_t n, const void **slots,
                   kvt_lease *leases, const char **what, uint64_t *calls, uint64_t *shorts)
{
    size_t done = 0;
    int nl = 0;

    while (done < n) {
        int r = kvt_get_lease(ns, keys + done, n - done, slots + done, &leases[nl]);
        (*calls)++;
        if (r <= 0) {
            *what = r < 0 ? "kvt_get_lease" : "kvt_get_lease: 0 hits for blocks put before";
            for (int i = 0; i < nl; i++)
                kvt_release(ns, &leases[i]);
            return r < 0 ? r : -ENOENT;
        }
        if ((size_t)r < n - done)
            (*shorts)++;
        nl++;
        done += (size_t)r;
    }
    return nl;
}

static int cold_put_round(struct cold *c, int round, double *secs)
{
    size_t g0 = (size_t)round * c->per_round;
    uint64_t t0 = now_ns();
    int r;

    for (size_t at = 0; at < c->per_round; at += CQD) {
        size_t n = c->per_round - at < CQD ? c->per_round - at : CQD;
        if ((r = put_durable(c->ns, NULL, c->keys + g0 + at, n, c->src, CQD, c->bs, g0 + at,
                             &c->what, &c->fill_ns)) < 0)
            return r;
    }
    *secs = (double)(now_ns() - t0) / 1e9;
    return 0;
}

static int cold_get_round(struct cold *c, int round, double *secs)
{
    const void *slots[CQD];
    kvt_lease leases[CQD];
    size_t g0 = (size_t)round * c->per_round;
    uint64_t t0 = now_ns();
    int nl;

    for (size_t at = 0; at < c->per_round; at += CQD) {
        size_t n = c->per_round - at < CQD ? c->per_round - at : CQD;
        nl = get_all(c->ns, c->keys + g0 + at, n, slots, leases, &c->what, &c->get_calls,
                     &c->short_gets);
        if (nl < 0)
            return nl;
        int bad = 0;
        for (size_t j = 0; j < n && !bad; j++)
            bad = check_block(slots[j], c->src + (j % CQD) * c->bs, c->bs, g0 + at + j,
                              at == 0); /* whole blocks in the first batch of a round */
        for (int i = 0; i < nl; i++)
            kvt_release(c->ns, &leases[i]);
        if (bad) {
            c->what = "a block read back from disk holds other bytes than were put";
            return -EBADMSG;
        }
    }
    *secs = (double)(now_ns() - t0) / 1e9;
    return 0;
}

/*
 * The disk work of tierd's pattern and nothing else, through the store's
 * own I/O layer in-process (no daemon, no client, no index, no checksums):
 * batches of CQD blocks, all in flight at once, waiting for the whole batch;
 * for writes then one fdatasync, waited for. On a preallocated file beside
 * tierd's. Bytes per second of writes then reads of size bytes.
 */
static void nvme_count(void *ctx, int64_t res)
{
    int *left = ctx;
    if (res < 0)
        left[1] = (int)res;
    left[0]--;
}

static int nvme_wait(struct tier_nvme *io, int *left)
{
    tier_nvme_submit(io);
    while (left[0] > 0) {
        int r = tier_nvme_reap(io, 1);
        if (r < 0)
            return r;
    }
    return left[1];
}

static int nvme_floor(size_t bs, uint64_t size, uint8_t *wbufs, uint8_t *rbufs, double *w_bps,
                      double *r_bps)
{
    char path[PATH_MAX];
    struct tier_nvme_cfg cfg = { .path = path, .bytes = size, .qd = CQD };
    struct tier_nvme *io = NULL;
    int r;

    snprintf(path, sizeof(path), "%s/floor.dat", tmpdir);
    unlink(path);
    if ((r = tier_nvme_open(&cfg, &io)) < 0)
        return r;
    if (!tier_nvme_direct(io)) {
        r = -EOPNOTSUPP;
        goto out;
    }
    for (int pass = 0; pass < 2; pass++) {
        uint64_t t0 = now_ns();
        for (uint64_t off = 0; off + bs <= size; off += CQD * bs) {
            int left[2] = { 0, 0 };
            for (size_t j = 0; j < CQD && off + (j + 1) * bs <= size; j++) {
                r = pass ? tier_nvme_read(io, off + j * bs, rbufs + j * bs, bs, nvme_count, left)
                         : tier_nvme_write(io, off + j * bs, wbufs + j * bs, bs, nvme_count, left);
                if (r < 0)
                    goto out;
                left[0]++;
            }
            if ((r = nvme_wait(io, left)) < 0)
                goto out;
            if (pass == 0) {
                left[0] = 1;
                if ((r = tier_nvme_sync(io, nvme_count, left)) < 0 || (r = nvme_wait(io, left)) < 0)
                    goto out;
            }
        }
        *(pass ? r_bps : w_bps) = (double)(size / bs * bs) / ((double)(now_ns() - t0) / 1e9);
    }
    r = 0;
out:
    tier_nvme_close(io);
    unlink(path);
    return r;
}

/* Write then read one block size: tierd and fio interleaved round by round
 * (which of the two goes first alternates), medians of per-round ratios. */
static void bench_cold(size_t bs)
{
    char lbl[32], wname[64], rname[64], tag[32], cold_sz[32], fio_file[PATH_MAX];
    const char *extra[] = { "--cold-bytes", cold_sz, "--cold-qd", "32", NULL };
    struct cold c = { .bs = bs, .rounds = opt.cold_rounds };
    struct daemon d = { 0 };
    double tw[64], fw[64], rw[64], tr[64], fr[64], rr[64], lk[64], flw[64], flr[64];
    double fio_nosync = 0, fio_syncs = 0;
    bool floor_ok = true;
    uint8_t *dst = NULL;
    kvt_stats s0, s1;
    int r, n = opt.cold_rounds;
    bool wrote = false;

    size_label(bs, lbl, sizeof(lbl));
    snprintf(wname, sizeof(wname), "cold_write_%s_vs_fio", lbl);
    snprintf(rname, sizeof(rname), "cold_read_%s_vs_fio", lbl);
    snprintf(tag, sizeof(tag), "cold%zuk", bs / 1024);
    snprintf(fio_file, sizeof(fio_file), "%s/fio.dat", tmpdir);
    c.per_round = (size_t)(opt.cold_bytes / bs);
    /* every round writes fresh keys into fresh (preallocated, never written) space */
    snprintf(cold_sz, sizeof(cold_sz), "%" PRIu64 "M",
             (uint64_t)((n * opt.cold_bytes + CW_WARM * CQD * bs) / MIB + 256));
    struct fio_job fj = { .rw = "write", .bs = bs, .size = (uint64_t)c.per_round * bs,
                          .qd = CQD, .fdatasync = true };

    printf("# --- %s, %s: %d rounds of %zu blocks of %zu KiB (%.0f MiB); tierd: batches of "
           "%d, each reserved, filled and put with KVT_COMMIT_DURABLE, then (after a restart) "
           "got back from disk; fio: --bs %zu --iodepth %d --direct=1 io_uring on a file beside "
           "tierd's\n", wname, rname, n, c.per_round, bs / 1024, (double)fj.size / MIB, CQD,
           bs, CQD);
    fflush(stdout);
    c.src = alloc_faulted(CQD * bs, 0xc01d ^ bs);
    dst = alloc_faulted(CQD * bs, 0xd57 ^ bs);
    c.keys = malloc(((size_t)n * c.per_round + CW_WARM * CQD) * sizeof(*c.keys));
    if (!c.src || !dst || !c.keys || c.per_round == 0) {
        r = -ENOMEM;
        c.what = "buffers";
        goto out_fail;
    }
    uint64_t seed = 0x636f6c64ull ^ bs;
    rand_keys(&seed, c.keys, (size_t)n * c.per_round + CW_WARM * CQD);
    const kvt_key *wkeys = c.keys + (size_t)n * c.per_round; /* untimed warm-up batches */

    /* context: fio without the syncs; the pattern's disk work alone */
    unlink(fio_file);
    fj.fdatasync = false;
    if ((r = fio_run(&fj, &fio_nosync, NULL)) < 0) {
        c.what = "fio --rw=write";
        goto out_fail;
    }
    fj.fdatasync = true;

    c.what = "tierd did not start";
    if ((r = tierd_start_ex(&d, tag, "256M", false, extra, 30)) < 0)
        goto out_fail;
    c.what = "kvt_ns_open";
    if ((r = ns_open(d.c, "tierbench/cold", bs, &c.ns)) < 0)
        goto out_fail;
    for (size_t b = 0; b < CW_WARM; b++) {
        size_t g = (size_t)n * c.per_round + b * CQD;
        if ((r = put_durable(c.ns, NULL, wkeys + b * CQD, CQD, c.src, CQD, bs, g, &c.what,
                             NULL)) < 0)
            goto out_fail;
    }
    c.what = "kvt_stats_get";
    if ((r = kvt_stats_get(d.c, &s0)) < 0)
        goto out_fail;
    for (int i = 0; i < n; i++) {
        double fbw = 0, secs = 0, ns_ = 0;
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (i % 2 == 0)) {
                unlink(fio_file); /* like tierd's space: preallocated, never written */
                if ((r = fio_run(&fj, &fbw, &ns_)) < 0) {
                    c.what = "fio --rw=write --fdatasync";
                    goto out_fail;
                }
                if (i == 0)
                    printf("# %s\n", fio_cmd);
                fio_syncs += ns_;
            } else if ((r = cold_put_round(&c, i, &secs)) < 0) {
                goto out_fail;
            }
        }
        fw[i] = fbw;
        tw[i] = (double)fj.size / secs;
        rw[i] = tw[i] / fw[i];
        /* context, every round: the pattern's disk work alone */
        if (floor_ok && (r = nvme_floor(bs, fj.size, c.src, dst, &flw[i], &flr[i])) < 0) {
            printf("# in-process tier_nvme baseline failed: %s\n", strerror(-r));
            floor_ok = false;
        }
    }
    c.what = "kvt_stats_get";
    if ((r = kvt_stats_get(d.c, &s1)) < 0)
        goto out_fail;
    wrote = true;
    printf("# write rounds, MB/s tierd / fio:");
    for (int i = 0; i < n; i++)
        printf(" %.0f/%.0f", tw[i] / 1e6, fw[i] / 1e6);
    double t_all = 0;
    for (int i = 0; i < n; i++)
        t_all += (double)fj.size / tw[i];
    double fill_share = (double)c.fill_ns / 1e9 / t_all;
    printf("\n# tierd: %" PRIu64 " blocks made durable, %" PRIu64 " dropped, %" PRIu64
           " cold blocks, %" PRIu64 " I/O errors; the client's filling of the slots (memcpy, "
           "not overlapped with the disk) took %.0f%% of the time: commits alone %.0f MB/s\n",
           s1.demotions - s0.demotions, s1.dropped - s0.dropped, s1.tier[KVT_TIER_COLD].blocks,
           s1.io_errors, 100 * fill_share,
           (double)n * (double)fj.size / (t_all * (1 - fill_share)) / 1e6);
    printf("# fio without --fdatasync: %.0f MB/s. fio --fdatasync=%d issued %.0f fdatasyncs "
           "for %zu writes a round, queued among its writes (not a barrier: its writes go on "
           "while they run; --end_fsync=1 makes its last writes durable too); a durable batch "
           "in tierd is a barrier: %d writes, fdatasync, LMDB commit (synced), reply, and only "
           "then the next batch\n", fio_nosync / 1e6, CQD, fio_syncs / n, c.per_round, CQD);
    if (floor_ok)
        printf("# that barrier pattern's disk work alone (in-process tier_nvme: %d writes, wait, "
               "fdatasync, wait; every round): %.0f MB/s median; tierd's puts %.0f MB/s, %.2f of "
               "it\n", CQD, median(flw, n) / 1e6, median(tw, n) / 1e6,
               median(tw, n) / median(flw, n));
    report(wname, median(rw, n), "%.2f", "ratio", ">=", "0.85");

    /* reads: restart, so that every block is only on disk */
    tierd_stop(&d);
    c.ns = NULL;
    c.what = "tierd did not restart";
    if ((r = tierd_start_ex(&d, tag, "256M", false, extra, 30)) < 0)
        goto out_fail_read;
    print_log_line(d.log, "cold tier");
    c.what = "kvt_ns_open";
    if ((r = ns_open(d.c, "tierbench/cold", bs, &c.ns)) < 0)
        goto out_fail_read;
    for (size_t b = 0; b < CW_WARM; b++) {
        const void *slots[CQD];
        kvt_lease leases[CQD];
        int nl = get_all(c.ns, wkeys + b * CQD, CQD, slots, leases, &c.what, &c.get_calls,
                         &c.short_gets);
        if ((r = nl) < 0)
            goto out_fail_read;
        for (int i = 0; i < nl; i++)
            kvt_release(c.ns, &leases[i]);
    }
    c.get_calls = c.short_gets = 0;
    c.what = "kvt_stats_get";
    if ((r = kvt_stats_get(d.c, &s0)) < 0)
        goto out_fail_read;
    fj.rw = "read";
    fj.fdatasync = false;
    for (int i = 0; i < n; i++) {
        double fbw = 0, secs = 0;
        for (int k = 0; k < 2; k++) {
            if ((k == 0) == (i % 2 == 0)) {
                if ((r = fio_run(&fj, &fbw, NULL)) < 0) {
                    c.what = "fio --rw=read";
                    goto out_fail_read;
                }
                if (i == 0)
                    printf("# %s\n", fio_cmd);
            } else if ((r = cold_get_round(&c, i, &secs)) < 0) {
                goto out_fail_read;
            }
        }
        fr[i] = fbw;
        tr[i] = (double)fj.size / secs;
        rr[i] = tr[i] / fr[i];
        /* context, every round: fio in tierd's lockstep */
        fj.lockstep = true;
        r = fio_run(&fj, &lk[i], NULL);
        fj.lockstep = false;
        if (r == 0 && i == 0)
            printf("# %s\n", fio_cmd);
        if (r < 0) {
            c.what = "fio --rw=read (lockstep)";
            goto out_fail_read;
        }
    }
    c.what = "kvt_stats_get";
    if ((r = kvt_stats_get(d.c, &s1)) < 0)
        goto out_fail_read;
    printf("# read rounds, MB/s tierd / fio:");
    for (int i = 0; i < n; i++)
        printf(" %.0f/%.0f", tr[i] / 1e6, fr[i] / 1e6);
    printf("\n# tierd: %" PRIu64 " blocks promoted from disk for %zu got (all checked: stamps; "
           "whole blocks in one batch a round); %" PRIu64 " get calls, %" PRIu64
           " answered short and asked again\n", s1.promotions - s0.promotions,
           (size_t)n * c.per_round, c.get_calls, c.short_gets);
    if (s1.promotions - s0.promotions < (uint64_t)n * c.per_round)
        printf("# note: some blocks were not read from disk (served from warm)\n");
    printf("# queue depth: a get of %d blocks starts %d reads at once and is answered when "
           "the last lands (and is checksummed); the next get starts after that, so the queue "
           "drains to 0 at the end of every batch, while fio keeps %d in flight. The same "
           "lockstep in fio (--iodepth_batch_submit=%d --iodepth_batch_complete_min=%d): "
           "%.0f MB/s", CQD, CQD, CQD, CQD, CQD, median(lk, n) / 1e6);
    if (floor_ok)
        printf("; in-process tier_nvme: %.0f MB/s", median(flr, n) / 1e6);
    printf("; tierd's gets %.0f MB/s; fio %.0f MB/s (medians over the rounds). So one "
           "client's gets keep fewer than %d reads in flight on average; what that costs is "
           "the gap between the lockstep baselines and fio (on a noisy disk, compare the "
           "per-round figures)\n",
           median(tr, n) / 1e6, median(fr, n) / 1e6, CQD);
    report(rname, median(rr, n), "%.2f", "ratio", ">=", "0.85");
    goto out;

out_fail:
    if (!wrote)
        report_fail(wname, c.what, r);
out_fail_read:
    report_fail(rname, c.what, r);
out:
    tierd_stop(&d);
    if (d.data[0])
        rm_tree(d.data);
    unlink(fio_file);
    free_faulted(c.src, CQD * bs);
    free_faulted(dst, CQD * bs);
    free(c.keys);
}

/* ---- figure 7: prefetch ----------------------------------------------------- */

#define PF_CHAIN 64
#define PF_BS (256 * 1024)

static void spin_us(unsigned us)
{
    uint64_t t0 = now_ns();
    while (now_ns() - t0 < us * 1000ull) {
    }
}

/*
 * Chains of 64 blocks of 256 KiB, put durably, then tierd restarts so that
 * they are only on disk. Each trial takes a fresh chain: kvt_lookup (with
 * or without KVT_LOOKUP_PREFETCH), ~2 ms of busy "engine work", then the
 * timed get of all 64 blocks. With and without alternate, trial by trial.
 */
static void bench_prefetch(void)
{
    const char *name = "prefetch_get_64_chain_speedup";
    const char *extra[] = { "--cold-bytes", "2G", "--cold-qd", "32", NULL };
    int trials = opt.prefetch_trials, nchains = 2 * trials, r = -ENOMEM;
    uint8_t *src = alloc_faulted(CQD * PF_BS, 0x7066);
    kvt_key *keys = malloc((size_t)nchains * PF_CHAIN * sizeof(*keys));
    const void **slots = malloc(PF_CHAIN * sizeof(*slots));
    kvt_lease *leases = malloc(PF_CHAIN * sizeof(*leases));
    double t[2][64];
    uint64_t calls[2] = { 0 }, shorts[2] = { 0 };
    const char *what = "buffers";
    struct daemon d = { 0 };
    kvt_ns *ns = NULL;
    uint64_t seed = 0x707265666574ull;

    printf("# --- %s: get of a %d-block chain of %d KiB blocks only on disk, with and without "
           "a kvt_lookup(KVT_LOOKUP_PREFETCH) %u us of busy work before; %d trials each, "
           "alternating\n", name, PF_CHAIN, PF_BS / 1024, opt.work_us, trials);
    fflush(stdout);
    if (!src || !keys || !slots || !leases)
        goto out_fail;
    rand_keys(&seed, keys, (size_t)nchains * PF_CHAIN);
    what = "tierd did not start";
    if ((r = tierd_start_ex(&d, "prefetch", "256M", false, extra, 30)) < 0)
        goto out_fail;
    what = "kvt_ns_open";
    if ((r = ns_open(d.c, "tierbench/prefetch", PF_BS, &ns)) < 0)
        goto out_fail;
    for (int ch = 0; ch < nchains; ch++) {
        /* a chain in durable batches of CQD (keys[i]'s parent is keys[i - 1]):
         * a durable commit of more blocks than --cold-qd can hang (see the
         * report of this figure) */
        for (size_t at = 0; at < PF_CHAIN; at += CQD) {
            const kvt_key *k = keys + (size_t)ch * PF_CHAIN + at;
            if ((r = put_durable(ns, at ? k - 1 : NULL, k, CQD, src, CQD, PF_BS,
                                 (size_t)ch * PF_CHAIN + at, &what, NULL)) < 0)
                goto out_fail;
        }
    }
    tierd_stop(&d);
    ns = NULL;
    what = "tierd did not restart";
    if ((r = tierd_start_ex(&d, "prefetch", "256M", false, extra, 30)) < 0)
        goto out_fail;
    print_log_line(d.log, "cold tier");
    what = "kvt_ns_open";
    if ((r = ns_open(d.c, "tierbench/prefetch", PF_BS, &ns)) < 0)
        goto out_fail;

    for (int ch = 0; ch < nchains; ch++) {
        int with = ch % 2, k = ch / 2, nl;
        const kvt_key *chain = keys + (size_t)ch * PF_CHAIN;

        r = kvt_lookup(ns, chain, PF_CHAIN, with ? KVT_LOOKUP_PREFETCH : 0, NULL);
        if ((r = want_n(&what, "kvt_lookup", r, PF_CHAIN)) < 0)
            goto out_fail;
        spin_us(opt.work_us);
        uint64_t t0 = now_ns();
        nl = get_all(ns, chain, PF_CHAIN, slots, leases, &what, &calls[with], &shorts[with]);
        t[with][k] = (double)(now_ns() - t0) / 1e9;
        if ((r = nl) < 0)
            goto out_fail;
        for (int j = 0; j < PF_CHAIN && r >= 0; j++)
            if (check_block(slots[j], src + (size_t)(j % CQD) * PF_BS, PF_BS,
                            (size_t)ch * PF_CHAIN + j, j == 0) < 0)
                r = -EBADMSG;
        for (int i = 0; i < nl; i++)
            kvt_release(ns, &leases[i]);
        if (r < 0) {
            what = "a block read back from disk holds other bytes than were put";
            goto out_fail;
        }
    }
    double t_without = median(t[0], trials), t_with = median(t[1], trials);
    printf("# get of the chain without prefetch: %.2f ms (median; %.1f get calls a chain)\n",
           t_without * 1e3, (double)calls[0] / trials);
    printf("# get of the chain %u us after a prefetching lookup: %.2f ms (median; %.1f get "
           "calls a chain)\n", opt.work_us, t_with * 1e3, (double)calls[1] / trials);
    if (shorts[0] + shorts[1])
        printf("# tierd answered %" PRIu64 " of %" PRIu64 " gets short: with --cold-qd %d, a "
               "get (or a prefetch) starts at most %d reads, and a get stops its leading run "
               "at the first block whose read cannot start; the rest are reported as misses "
               "although they are on disk, so the client asks again\n",
               shorts[0] + shorts[1], calls[0] + calls[1], CQD, CQD);
    report(name, t_without / t_with, "%.2f", "ratio", ">=", "1");
    goto out;

out_fail:
    report_fail(name, what, r);
out:
    tierd_stop(&d);
    if (d.data[0])
        rm_tree(d.data);
    free_faulted(src, CQD * PF_BS);
    free(keys);
    free(slots);
    free(leases);
}

/* ---- figure 8: restart over a big cold index ------------------------------- */

struct rs_ctx {
    uint64_t done, errors;
    int first_err;
};

static void rs_cb(void *ctx, int rc)
{
    struct rs_ctx *x = ctx;
    x->done++;
    if (rc < 0 && x->errors++ == 0)
        x->first_err = rc;
}

static void rs_log(void *ctx, const char *msg)
{
    (void)ctx;
    printf("# store: %s\n", msg);
}

#define RS_CHAIN 64 /* blocks per chain: parents are recorded, as tierd would */
#define RS_PAGES 64 /* distinct 4 KiB payloads, reused (they never change) */

/*
 * Build <tmpdir>/restart.data with the store library: n blocks of 4 KiB in
 * ns 1, chains of RS_CHAIN, one durable commit per 4096 blocks. If the first
 * 100,000 say the whole would take over a minute, stop at 250,000.
 */
static int rs_build(const char *dir, uint64_t file_bytes, size_t *n, double *secs)
{
    struct tier_cold_cfg cfg = { .dir = dir, .bytes = file_bytes, .qd = 32, .batch = 4096,
                                 .log = rs_log };
    struct tier_cold *tc = NULL;
    struct tier_cold_stats cs;
    struct rs_ctx x = { 0 };
    struct tier_key key, prev;
    uint64_t seed = 0x7265737461ull, t0 = now_ns();
    uint8_t *pages = NULL;
    int r;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    if (posix_memalign((void **)&pages, 4096, RS_PAGES * 4096) != 0)
        return -ENOMEM;
    for (size_t i = 0; i < RS_PAGES * 4096 / 8; i++) {
        uint64_t v = rng_next(&seed);
        memcpy(pages + i * 8, &v, 8);
    }
    if ((r = tier_cold_open(&cfg, &tc)) < 0) {
        printf("# tier_cold_open %s: %s\n", dir, strerror(-r));
        goto out;
    }
    for (size_t i = 0; i < *n; i++) {
        for (size_t j = 0; j < TIER_KEY_BYTES; j += 8) {
            uint64_t v = rng_next(&seed);
            memcpy(key.b + j, &v, 8);
        }
        while ((r = tier_cold_put(tc, 1, &key, i % RS_CHAIN ? &prev : NULL,
                                  pages + (i % RS_PAGES) * 4096, 4096, rs_cb, &x)) == -EBUSY) {
            if ((r = tier_cold_poll(tc, true)) < 0)
                break;
        }
        if (r < 0) {
            printf("# tier_cold_put of block %zu: %s\n", i, strerror(-r));
            goto out;
        }
        prev = key;
        if (i + 1 == 100000 && *n > 250000) {
            double el = (double)(now_ns() - t0) / 1e9, proj = el * (double)*n / 100000;
            if (proj > 60) {
                printf("# building %zu blocks would take about %.0f s (100000 took %.1f s): "
                       "building and measuring 250000 instead\n", *n, proj, el);
                *n = 250000;
            }
        }
    }
    if ((r = tier_cold_drain(tc)) < 0) {
        printf("# tier_cold_drain: %s\n", strerror(-r));
        goto out;
    }
    tier_cold_stats_get(tc, &cs);
    if (x.errors || x.done != *n || cs.blocks != *n) {
        printf("# build: %" PRIu64 " of %zu puts completed, %" PRIu64 " failed (first: %s), "
               "%" PRIu64 " in the index\n", x.done, *n, x.errors, strerror(-x.first_err),
               cs.blocks);
        r = -EIO;
        goto out;
    }
    *secs = (double)(now_ns() - t0) / 1e9;
    printf("# built with tier_cold_put: %zu blocks of 4 KiB in ns 1 (chains of %d) in %.1f s, "
           "%" PRIu64 " durable commits\n", *n, RS_CHAIN, *secs, cs.commits);
    r = 0;
out:
    tier_cold_close(tc);
    free(pages);
    return r;
}

/* Drop a file's pages from the page cache (it is clean: LMDB synced it). */
static int drop_cache(const char *path)
{
    int fd = open(path, O_RDONLY), r;
    if (fd < 0)
        return -errno;
    r = -posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
    close(fd);
    return r;
}

static void bench_restart(void)
{
    const char *name = "cold_restart_1M_blocks_s";
    char dir[PATH_MAX], mdb[PATH_MAX + 32], cold_sz[32];
    const char *extra[] = { "--cold-bytes", cold_sz, "--no-flush", NULL };
    size_t n = opt.restart_blocks;
    uint64_t file_bytes = (uint64_t)n * 4096 + 64 * MIB;
    const char *what = "";
    struct daemon d = { 0 };
    struct stat sb;
    double build_s = 0, ready[3];
    int r;

    printf("# --- %s: tierd start-up (fork until kvt_connect succeeds) on a data folder whose "
           "cold index holds %zu blocks\n", name, n);
    fflush(stdout);
    snprintf(dir, sizeof(dir), "%s/restart.data", tmpdir);
    snprintf(cold_sz, sizeof(cold_sz), "%" PRIu64 "M", (uint64_t)(file_bytes / MIB));
    what = "building the data folder with tier_cold_put";
    if ((r = rs_build(dir, file_bytes, &n, &build_s)) < 0)
        goto out_fail;
    snprintf(mdb, sizeof(mdb), "%s/cold.lmdb/data.mdb", dir);
    if (stat(mdb, &sb) == 0)
        printf("# cold index: %s, %.0f MiB\n", mdb, (double)sb.st_size / MIB);

    /* run 0: the index dropped from the page cache first (as after a
     * reboot); runs 1 and 2: with the index cached (as after a restart) */
    for (int i = 0; i < 3; i++) {
        kvt_stats st;
        if (i == 0 && (r = drop_cache(mdb)) < 0)
            printf("# posix_fadvise(DONTNEED) %s: %s\n", mdb, strerror(-r));
        what = "tierd did not start";
        if ((r = tierd_start_ex(&d, "restart", "256M", true, extra, 120)) < 0)
            goto out_fail;
        ready[i] = d.ready_s;
        print_log_line(d.log, "cold tier");
        what = "kvt_stats_get";
        if ((r = kvt_stats_get(d.c, &st)) < 0)
            goto out_fail;
        if (st.tier[KVT_TIER_COLD].blocks != n || st.index_entries < n) {
            printf("# tierd has %" PRIu64 " cold blocks, %" PRIu64 " index entries; %zu were "
                   "built\n", st.tier[KVT_TIER_COLD].blocks, st.index_entries, n);
            what = "tierd did not index every block";
            r = -EIO;
            goto out_fail;
        }
        tierd_stop(&d);
    }
    printf("# start-up: %.2f s with the index out of the page cache, %.2f s and %.2f s with "
           "it cached (--warm-bytes 256M --no-mlock: the pool costs little); the figure is "
           "the first\n", ready[0], ready[1], ready[2]);
    if (n != opt.restart_blocks)
        printf("# NOTE: measured with %zu blocks, not %zu (the build would have taken over a "
               "minute); nothing is scaled\n", n, opt.restart_blocks);
    else if (n != 1000000)
        printf("# NOTE: measured with %zu blocks (--restart-blocks), not 1000000; nothing is "
               "scaled\n", n);
    report(name, ready[0], "%.2f", "s", "<=", "2");
    goto out;

out_fail:
    report_fail(name, what, r);
out:
    tierd_stop(&d);
    rm_tree(dir);
}

/* ---- figure 10: the remote tier on a 3-master Redis Cluster ------------- */

/*
 * The remote tier (store/tier_remote.c) pushes and pulls 2 MiB blocks
 * through its own API, in-process: puts are one job per block, gets one
 * job per 16 keys (a get request's batch), all submitted at once, so its
 * workers pipeline them per node. The baseline is redis-benchmark's own
 * figure for the same value size on the same cluster (--cluster, -P 16,
 * as many connections as our workers hold: 2 per node), as requests per
 * second times the value size. The ratios are medians of interleaved
 * rounds; the target is >= 0.8 each.
 */

#define RB_NODES 3

struct rb_cluster {
    pid_t pid[RB_NODES];
    int port[RB_NODES];
    char seeds[96];
};

static bool rb_ping(int port)
{
    struct timeval tv = { .tv_sec = 1 };
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    bool ok = rc && !rc->err && redis_ping(rc);

    if (rc)
        redisFree(rc);
    return ok;
}

static bool rb_state_ok(int port)
{
    struct timeval tv = { .tv_sec = 1 };
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *rep = rc && !rc->err ? redisCommand(rc, "CLUSTER INFO") : NULL;
    bool ok = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "cluster_state:ok");

    if (rep)
        freeReplyObject(rep);
    if (rc)
        redisFree(rc);
    return ok;
}

static void rb_cluster_stop(struct rb_cluster *c)
{
    for (int i = 0; i < RB_NODES; i++)
        if (c->pid[i] > 0)
            stop_child(c->pid[i]);
    memset(c->pid, 0, sizeof(c->pid));
}

/* Three redis-servers in cluster mode, joined by redis-cli --cluster create. */
static int rb_cluster_start(struct rb_cluster *c)
{
    char cmd[512], log[PATH_MAX + 32];
    uint64_t t0 = now_ns();

    memset(c, 0, sizeof(*c));
    for (int i = 0; i < RB_NODES; i++) {
        char port_s[16], conf[PATH_MAX + 32];
        int p;

        /* the cluster bus listens on port + 10000 */
        do
            p = free_port();
        while (p > 0 && p > 55000);
        if (p < 0)
            return -EADDRNOTAVAIL;
        c->port[i] = p;
        snprintf(port_s, sizeof(port_s), "%d", p);
        snprintf(conf, sizeof(conf), "%s/nodes-%d.conf", tmpdir, p);
        snprintf(log, sizeof(log), "%s/redis-%d.log", tmpdir, p);
        char *argv[] = { "redis-server", "--port", port_s, "--bind", "127.0.0.1",
                         "--cluster-enabled", "yes", "--cluster-config-file", conf, "--save", "",
                         "--appendonly", "no", "--daemonize", "no", "--dir", tmpdir, NULL };
        c->pid[i] = spawn(argv, log);
        if (c->pid[i] < 0)
            goto fail;
    }
    for (int i = 0; i < RB_NODES; i++)
        while (!rb_ping(c->port[i])) {
            if (now_ns() - t0 > 10 * 1000000000ull)
                goto fail;
            sleep_ms(20);
        }
    snprintf(cmd, sizeof(cmd), "redis-cli --cluster create 127.0.0.1:%d 127.0.0.1:%d "
             "127.0.0.1:%d --cluster-replicas 0 --cluster-yes >%s/cluster-create.log 2>&1",
             c->port[0], c->port[1], c->port[2], tmpdir);
    if (system(cmd) != 0)
        goto fail;
    for (int i = 0; i < RB_NODES; i++)
        while (!rb_state_ok(c->port[i])) {
            if (now_ns() - t0 > 30 * 1000000000ull)
                goto fail;
            sleep_ms(50);
        }
    snprintf(c->seeds, sizeof(c->seeds), "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", c->port[0],
             c->port[1], c->port[2]);
    printf("# redis cluster of %d masters on %s, ready after %.0f ms\n", RB_NODES, c->seeds,
           (double)(now_ns() - t0) / 1e6);
    return 0;
fail:
    printf("# redis cluster did not come up (logs in %s)\n", tmpdir);
    rb_cluster_stop(c);
    return -ECHILD;
}

/* redis-benchmark's SET and GET rates (requests/s) for values of bytes. */
static int rb_redis_benchmark(const struct rb_cluster *c, size_t bytes, int n, int clients,
                              double *set_rps, double *get_rps)
{
    char cmd[512], line[512];
    FILE *f;

    *set_rps = *get_rps = 0;
    /* -r 64: a small keyspace, so that the GETs find values (a miss would
     * be a tiny reply, and flatter redis) */
    snprintf(cmd, sizeof(cmd), "redis-benchmark -h 127.0.0.1 -p %d --cluster -d %zu -P 16 "
             "-c %d -r 64 -t set,get -n %d -q --csv 2>/dev/null", c->port[0], bytes, clients,
             n);
    f = popen(cmd, "r");
    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        char test[16];
        double rps;

        if (sscanf(line, "\"%15[^\"]\",\"%lf\"", test, &rps) != 2)
            continue;
        if (strcmp(test, "SET") == 0)
            *set_rps = rps;
        else if (strcmp(test, "GET") == 0)
            *get_rps = rps;
    }
    if (pclose(f) != 0 || *set_rps <= 0 || *get_rps <= 0)
        return -EIO;
    return 0;
}

static void rb_done(void *ctx, int rc)
{
    (void)rc;
    (*(unsigned *)ctx)++;
}

/* One round through the remote tier: n blocks of bs bytes put, or got in
 * jobs of 16 keys (verified on arrival). Returns seconds, or < 0. */
static double rb_round(struct tier_remote *r, bool put, const kvt_key *keys, size_t n,
                       uint8_t *src, uint8_t **dst, size_t bs, int *res)
{
    unsigned jobs = 0, done = 0;
    uint64_t t0 = now_ns();

    for (size_t i = 0; i < n; i += put ? 1 : 16) {
        size_t k = put ? 1 : (n - i < 16 ? n - i : 16);
        int rc = put ? tier_remote_put(r, 1, (const struct tier_key *)&keys[i], src, bs, false,
                                       rb_done, &done)
                     : tier_remote_get(r, 1, (const struct tier_key *)&keys[i], k,
                                       (void *const *)&dst[i], bs, &res[i], rb_done, &done);
        if (rc < 0)
            return rc;
        jobs++;
    }
    while (done < jobs)
        if (tier_remote_poll(r, true) < 0)
            return -EIO;
    for (size_t i = 0; !put && i < n; i++)
        if (res[i] != 0)
            return -ENOENT;
    return (double)(now_ns() - t0) / 1e9;
}

static void bench_remote(void)
{
    enum { N = 192, ROUNDS = 5 };
    const size_t bs = 2 * MIB;
    const struct tier_remote_ns_desc bench_ns = {
        .tenant = "tierbench", .model_id = "tierbench/remote", .dtype = "", .layout = "",
        .block_tokens = 16, .block_bytes = bs, .tp_size = 1,
    };
    struct rb_cluster c;
    struct tier_remote *r = NULL;
    struct tier_remote_stats st;
    kvt_key keys[N];
    uint8_t *src = NULL, *dstmem = NULL, *dst[N];
    int res[N], rc;
    double put_ratio[ROUNDS], get_ratio[ROUNDS], put_gbs[ROUNDS], get_gbs[ROUNDS];
    double rset[ROUNDS], rget[ROUNDS];
    uint64_t seed = 4242;

    if (system("command -v redis-benchmark >/dev/null && command -v redis-cli >/dev/null") != 0) {
        report_fail("remote_put_2MiB_vs_redis_benchmark", "redis-benchmark or redis-cli missing "
                    "(mk/deps.sh bench)", 0);
        report_fail("remote_get_2MiB_vs_redis_benchmark", "redis-benchmark missing", 0);
        return;
    }
    if ((rc = rb_cluster_start(&c)) < 0) {
        report_fail("remote_put_2MiB_vs_redis_benchmark", "no redis cluster", rc);
        report_fail("remote_get_2MiB_vs_redis_benchmark", "no redis cluster", rc);
        return;
    }
    src = alloc_faulted(bs, 7);
    dstmem = alloc_faulted(N * bs, 8);
    {
        struct tier_remote_cfg cfg = { .seeds = c.seeds, .timeout_ms = 2000 };

        rc = src && dstmem ? tier_remote_open(&cfg, &r) : -ENOMEM;
    }
    if (rc < 0 || (rc = tier_remote_ns_add(r, 1, &bench_ns)) < 0)
        goto fail;
    rand_keys(&seed, keys, N);
    for (int i = 0; i < N; i++)
        dst[i] = dstmem + (size_t)i * bs;
    /* warm-up: connections, slot maps, the servers' memory */
    if ((rc = (int)rb_round(r, true, keys, N, src, dst, bs, res)) < 0 ||
        (rc = (int)rb_round(r, false, keys, N, src, dst, bs, res)) < 0)
        goto fail;
    for (int i = 0; i < ROUNDS; i++) {
        double tp = rb_round(r, true, keys, N, src, dst, bs, res), tg;

        tg = tp < 0 ? tp : rb_round(r, false, keys, N, src, dst, bs, res);
        if (tp < 0 || tg < 0) {
            rc = (int)(tp < 0 ? tp : tg);
            goto fail;
        }
        rc = rb_redis_benchmark(&c, bs, N * 2, 2 * RB_NODES, &rset[i], &rget[i]);
        if (rc < 0)
            goto fail;
        put_gbs[i] = (double)N * (double)bs / tp / 1e9;
        get_gbs[i] = (double)N * (double)bs / tg / 1e9;
        put_ratio[i] = put_gbs[i] / (rset[i] * (double)bs / 1e9);
        get_ratio[i] = get_gbs[i] / (rget[i] * (double)bs / 1e9);
        printf("# round %d: remote tier put %.2f GB/s get %.2f GB/s; redis-benchmark SET "
               "%.2f GB/s GET %.2f GB/s\n", i, put_gbs[i], get_gbs[i],
               rset[i] * (double)bs / 1e9, rget[i] * (double)bs / 1e9);
    }
    tier_remote_stats_get(r, &st);
    printf("# remote tier: %llu puts, %llu hits, %llu errors, %llu checksum errors, "
           "%llu redirects; medians: put %.2f GB/s, get %.2f GB/s\n",
           (unsigned long long)st.puts, (unsigned long long)st.hits,
           (unsigned long long)st.errors, (unsigned long long)st.checksum_errors,
           (unsigned long long)st.redirects, median(put_gbs, ROUNDS), median(get_gbs, ROUNDS));
    report("remote_put_2MiB_vs_redis_benchmark", median(put_ratio, ROUNDS), "%.2f", "ratio",
           ">=", "0.8");
    report("remote_get_2MiB_vs_redis_benchmark", median(get_ratio, ROUNDS), "%.2f", "ratio",
           ">=", "0.8");
    goto out;
fail:
    report_fail("remote_put_2MiB_vs_redis_benchmark", "remote tier round", rc);
    report_fail("remote_get_2MiB_vs_redis_benchmark", "remote tier round", rc);
out:
    tier_remote_close(r);
    free_faulted(src, bs);
    free_faulted(dstmem, N * bs);
    rb_cluster_stop(&c);
}

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tierbench [options]\n"
            "  --only LIST       comma-separated groups: put, lookup, inproc, hash, cold,\n"
            "                    prefetch, restart, hybrid, remote (default all)\n"
            "  --no-redis        skip the redis-server comparison\n"
            "  --rounds N        timed rounds per figure, median reported (default 7)\n"
            "  --round-ms MS     minimum length of a timed round (default 100)\n"
            "  --hash-runs N     timed runs of the hash figure (default 25)\n"
            "  --pool-2m SIZE    tierd --warm-bytes for 2 MiB put/get (default 1G)\n"
            "  --pool-64k SIZE   tierd --warm-bytes for 64 KiB put/get (default 256M)\n"
            "  --pool-lookup SIZE tierd --warm-bytes for the lookup figure (default 5G)\n"
            "  --cold-mib N      MiB per round of the cold write/read figures (default 512)\n"
            "  --cold-rounds N   rounds of the cold figures (default 8)\n"
            "  --prefetch-trials N  chains got with prefetch, and as many without (default 15)\n"
            "  --work-us N       busy work between the prefetching lookup and the get (2000)\n"
            "  --restart-blocks N  blocks in the cold index of the restart figure (1000000)\n"
            "fio (Debian's fio package) is the baseline of the cold figures.\n"
            "tierd is $KVT_TEST_BIN/tierd (default ./build/tierd).\n");
}

static int parse_groups(const char *s, unsigned *out)
{
    static const struct { const char *name; unsigned g; } tab[] = {
        { "put", GRP_PUT }, { "lookup", GRP_LOOKUP }, { "inproc", GRP_INPROC },
        { "hash", GRP_HASH }, { "cold", GRP_COLD }, { "prefetch", GRP_PREFETCH },
        { "restart", GRP_RESTART }, { "hybrid", GRP_HYBRID }, { "remote", GRP_REMOTE },
        { "all", GRP_ALL },
    };
    char buf[128];
    *out = 0;
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *sv, *w = strtok_r(buf, ",", &sv); w; w = strtok_r(NULL, ",", &sv)) {
        size_t i = 0;
        while (i < sizeof(tab) / sizeof(tab[0]) && strcmp(tab[i].name, w) != 0)
            i++;
        if (i == sizeof(tab) / sizeof(tab[0]))
            return -EINVAL;
        *out |= tab[i].g;
    }
    return *out ? 0 : -EINVAL;
}

static int parse_args(int argc, char **argv)
{
    static const struct option lo[] = {
        { "only", required_argument, NULL, 'o' },   { "no-redis", no_argument, NULL, 'R' },
        { "rounds", required_argument, NULL, 'r' }, { "round-ms", required_argument, NULL, 'm' },
        { "hash-runs", required_argument, NULL, 'H' },
        { "pool-2m", required_argument, NULL, '2' }, { "pool-64k", required_argument, NULL, '6' },
        { "pool-lookup", required_argument, NULL, 'L' }, { "help", no_argument, NULL, 'h' },
        { "cold-mib", required_argument, NULL, 'c' },
        { "cold-rounds", required_argument, NULL, 'C' },
        { "prefetch-trials", required_argument, NULL, 'P' },
        { "work-us", required_argument, NULL, 'w' },
        { "restart-blocks", required_argument, NULL, 'B' },
        { NULL, 0, NULL, 0 },
    };
    int c;
    while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
        switch (c) {
        case 'o':
            if (parse_groups(optarg, &opt.groups) < 0)
                return -EINVAL;
            break;
        case 'R':
            opt.redis = false;
            break;
        case 'r':
            opt.rounds = atoi(optarg);
            if (opt.rounds < 1 || opt.rounds > 64)
                return -EINVAL;
            break;
        case 'm':
            if (atoi(optarg) < 1)
                return -EINVAL;
            opt.round_ns = (uint64_t)atoi(optarg) * 1000000ull;
            break;
        case 'H':
            opt.hash_runs = atoi(optarg);
            if (opt.hash_runs < 1 || opt.hash_runs > 256)
                return -EINVAL;
            break;
        case '2':
            opt.pool_2m = optarg;
            break;
        case '6':
            opt.pool_64k = optarg;
            break;
        case 'L':
            opt.pool_lookup = optarg;
            break;
        case 'c':
            if (atoi(optarg) < 2 || atoi(optarg) > 64 * 1024)
                return -EINVAL;
            opt.cold_bytes = (uint64_t)atoi(optarg) * MIB;
            break;
        case 'C':
            opt.cold_rounds = atoi(optarg);
            if (opt.cold_rounds < 1 || opt.cold_rounds > 64)
                return -EINVAL;
            break;
        case 'P':
            opt.prefetch_trials = atoi(optarg);
            if (opt.prefetch_trials < 1 || opt.prefetch_trials > 64)
                return -EINVAL;
            break;
        case 'w':
            if (atoi(optarg) < 0)
                return -EINVAL;
            opt.work_us = (unsigned)atoi(optarg);
            break;
        case 'B':
            if (atol(optarg) < 1000 || atol(optarg) > 100000000)
                return -EINVAL;
            opt.restart_blocks = (size_t)atol(optarg);
            break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            return -EINVAL;
        }
    }
    return optind == argc ? 0 : -EINVAL;
}

/* Figure 9: what kvtier stores per cached token of a 32K-token prefix of
 * each hybrid model, group by group under its rule (sliding: the window;
 * state: every 256th block's), against storing every layer with a cache as
 * full attention. The bytes come from the same code kvt_offload_hybrid
 * applies (kvt_hybrid_stored_bytes); the models from data/configs. */
static void bench_hybrid(void)
{
    static const struct {
        const char *file;
        const char *target; /* stored / naive */
    } m[] = {
        { "gpt-oss-120b", "0.55" },   /* half its layers slide over 128 tokens */
        { "gemma-3-27b-it", "0.25" }, /* five sliding layers in six */
        { "qwen3-next-80b-a3b", "0.5" },
        { "nemotron-h-56b", "0.7" },  /* Mamba-2 states are large: every 256th kept */
        { "deepseek-v3", "1.0" },     /* MLA on every layer: nothing to save, nothing wasted */
    };
    const char *src = getenv("KVT_TEST_SRC");
    kvt_hybrid_opts o = { .block_tokens = 16, .state_every = 256 };

    printf("# --- hybrid models: bytes stored per token of a 32768-token prefix, blocks of "
           "16 tokens, one batch, tp 1\n");
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        struct kvt_model_desc d;
        char path[512], err[256], name[96];
        uint64_t st, nv;
        int rc;

        snprintf(path, sizeof(path), "%s/data/configs/%s.json", src && *src ? src : ".",
                 m[i].file);
        snprintf(name, sizeof(name), "hybrid_%s_32k_stored_vs_naive", m[i].file);
        rc = kvt_model_parse_file(path, &d, err, sizeof(err));
        if (rc < 0) {
            printf("# %s\n", err);
            report_fail(name, "config", rc);
            continue;
        }
        st = kvt_hybrid_stored_bytes(&d, &o, 1, 32768, 0);
        nv = kvt_hybrid_naive_bytes(&d, 16, 1, 32768);
        printf("# %s: kvtier %.1f KiB/token, naive %.1f KiB/token\n", m[i].file,
               (double)st / 32768 / 1024, (double)nv / 32768 / 1024);
        report(name, nv ? (double)st / (double)nv : 0, "%.3f", "ratio", "<=", m[i].target);
    }
}

int main(int argc, char **argv)
{
    const char *td = getenv("TMPDIR");
    uint64_t t0 = now_ns();

    if (parse_args(argc, argv) < 0) {
        usage(stderr);
        return 2;
    }
    /* sockets live in here: keep the path short (sun_path is 108 bytes) */
    if (!td || !*td || strlen(td) > 60)
        td = "/tmp";
    snprintf(tmpdir, sizeof(tmpdir), "%s/tierbench.XXXXXX", td);
    if (!mkdtemp(tmpdir)) {
        fprintf(stderr, "tierbench: mkdtemp %s: %s\n", tmpdir, strerror(errno));
        return 1;
    }
    atexit(cleanup);
    signal(SIGINT, on_signal);
    signal(SIGTERM, on_signal);
    signal(SIGHUP, on_signal);
    signal(SIGPIPE, SIG_IGN);
    setvbuf(stdout, NULL, _IOLBF, 0);

    printf("# tierbench: %ld CPUs online; rounds %d x >= %" PRIu64 " ms; temp dir %s\n",
           sysconf(_SC_NPROCESSORS_ONLN), opt.rounds, opt.round_ns / 1000000, tmpdir);
    if (opt.groups & GRP_PUT) {
        bench_put_get(2 * MIB, opt.pool_2m, opt.redis);
        bench_put_get(64 * 1024, opt.pool_64k, false);
    }
    if (opt.groups & (GRP_LOOKUP | GRP_INPROC))
        bench_lookups(opt.groups);
    if (opt.groups & GRP_HASH)
        bench_hash();
    if (opt.groups & GRP_COLD) {
        bench_cold(2 * MIB);
        bench_cold(256 * 1024);
    }
    if (opt.groups & GRP_PREFETCH)
        bench_prefetch();
    if (opt.groups & GRP_RESTART)
        bench_restart();
    if (opt.groups & GRP_HYBRID)
        bench_hybrid();
    if (opt.groups & GRP_REMOTE)
        bench_remote();

    printf("# tierbench took %.1f s%s\n", (double)(now_ns() - t0) / 1e9,
           n_errors ? "; some figures could not be measured" : "");
    printf("# %d of %d targets met\n", n_met, n_targets);
    return n_errors ? 1 : 0;
}
