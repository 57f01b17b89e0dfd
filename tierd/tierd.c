/* SPDX-License-Identifier: MIT */
/*
 * tierd.c - the daemon: command line, data folder lock, the listening
 * socket, signals, each tenant's store opened and closed, and the event
 * loop. The tenants and their namespaces are tenant.c's, the clients
 * sess*.c's.
 *
 * Usage: tierd [options]; `tierd --help` lists them (usage() below, and
 * man/tierd.8). Exit codes follow sysexits.h.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <getopt.h>
#include <limits.h>
#include <stddef.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/signalfd.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sysexits.h>
#include <systemd/sd-daemon.h>
#include <unistd.h>

#include "ev.h"
#include "metrics.h"
#include "sess.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_hot.h"
#include "tier_remote.h"
#include "tenant.h"
#include "tierd.h"

#define DEFAULT_DATA "/var/lib/kvtier"
/* warm's eviction policy unless --evict-policy says: lru, since with a cold
 * tier below warm (tierd's usual set-up) reuse finds fewer hits in all than
 * LRU, its gains being warm-only (README, "Eviction policies") */
#define DEFAULT_EVICT TIER_EVICT_LRU

/* ---- start-up -------------------------------------------------------- */

struct opts {
    const char *socket, *data, *config;
    uint64_t warm_bytes;
    double high_wm, low_wm;
    int evict_policy;         /* enum tier_evict_policy */
    bool no_mlock, no_huge, verbose;
    uint32_t max_clients;
    int busy_poll_us;
    uint64_t cold_bytes;
    uint64_t hot_bytes;
    int hot_device;
    uint32_t cold_qd;
    bool no_cold, write_through, no_flush;
    int cold_admit;           /* enum tier_admit */
    double cold_dwpd;         /* cold write budget in drive writes per day (0: unlimited) */
    uint16_t metrics_port;    /* 0: no metrics page */
    const char *metrics_addr; /* IPv4 address it binds */
    const char *metrics_token_file; /* NULL: no bearer token asked for */
    bool metrics_no_model_ids;
    uint32_t metrics_max_ns;  /* namespaces with series of their own */
    /* the remote tier: given on the command line (these win over [remote]) */
    const char *remote_seeds, *remote_ns;
    uint32_t remote_timeout_ms; /* 0: not given */
    uint32_t durable_wait_ms;
    uint32_t handshake_ms;
    int remote_policy;          /* -1: not given */
};

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tierd [options]\n"
            "  --socket PATH      listening socket (env KVTIER_SOCKET; default %s)\n"
            "  --data DIR         data folder (env KVTIER_DATA; default %s)\n"
            "  --config FILE      tenants: who may connect, each with its own pools and\n"
            "                     quotas (INI; see the README). Default: one tenant for\n"
            "                     our own uid and root, sized by the options below\n"
            "  --warm-bytes SIZE  warm tier (pinned RAM) size, K/M/G/T suffix (default 1G)\n"
            "  --high-wm F        evict when warm is fuller than F (default 0.95)\n"
            "  --low-wm F         ... down to F (default 0.85)\n"
            "  --evict-policy P   which warm blocks leave first, leaf-first always: lru,\n"
            "                     keep (keeps a learnt share of new chains longer when\n"
            "                     that finds more reuses) or reuse (a learnt reuse index\n"
            "                     per class of block; default %s)\n"
            "  --no-mlock         do not pin the warm pool\n"
            "  --no-hugepages     do not try huge pages\n"
            "  --max-clients N    refuse connections beyond N (default 1024); each tenant\n"
            "                     an even share unless its config says max_clients\n"
            "  --handshake-timeout-ms N  close a connection that sends no HELLO within N ms\n"
            "                     (default 5000; 0: never)\n"
            "  --durable-wait-ms N  a durable commit not done after N ms (a block another\n"
            "                     client never finishes, a disk slower than that) is\n"
            "                     answered -EAGAIN, its writes going on (default 10000;\n"
            "                     0: no bound)\n"
            "  --busy-poll-us N   poll without sleeping N us after activity (default 200; 0: off)\n"
            "  --cold-bytes SIZE  cold tier file in the data folder, preallocated (default 4G)\n"
            "  --cold-qd N        reads and writes the cold tier keeps in flight (default 32;\n"
            "                     its io_uring has 2 slots more, kept for its syncs)\n"
            "  --no-cold          no cold tier: blocks evicted from warm are dropped\n"
            "  --write-through    copy every block to cold when committed\n"
            "  --no-flush         at a clean stop, do not write warm blocks to cold\n"
            "  --cold-admit M     which blocks leaving warm are written to cold:\n"
            "                     all (default) or second-touch (those read or put\n"
            "                     again since their put)\n"
            "  --cold-dwpd F      cold write budget: F drive writes per day (F x each\n"
            "                     tenant's cold bytes per 24 h); past it blocks leaving\n"
            "                     warm are dropped. Default: unlimited\n"
            "  --hot-bytes SIZE   hot tier in GPU memory (emulated in RAM without a GPU);\n"
            "                     0 (default): no hot tier\n"
            "  --hot-device N     CUDA device of the hot tier (default 0)\n"
            "  --metrics-port N   serve Prometheus metrics at http://127.0.0.1:N/metrics\n"
            "                     (default: off)\n"
            "  --metrics-addr A   IPv4 address of the metrics page (default 127.0.0.1)\n"
            "  --metrics-token-file F  the page answers only requests with the header\n"
            "                     'Authorization: Bearer <F's one line>' (F: mode 0600)\n"
            "  --metrics-no-model-ids  label namespaces by tenant and id, never by model\n"
            "  --metrics-max-namespaces N  namespaces with series of their own (default\n"
            "                     %d); each tenant's others are summed, ns=\"other\"\n"
            "  --remote-seeds L   remote tier: Redis Cluster nodes host:port[,host:port...]\n"
            "                     shared by the tierd of every node (default: off)\n"
            "  --remote-policy P  write-through (default: every committed block) or\n"
            "                     on-demotion (blocks leaving warm)\n"
            "  --remote-timeout-ms N  per network operation (default 100)\n"
            "  --remote-namespaces S  all (default), or the model ids starting with S\n"
            "  -v, --verbose      log sessions and namespaces\n",
            KVT_DEFAULT_SOCKET, DEFAULT_DATA, tier_evict_policy_name(DEFAULT_EVICT),
            METRICS_MAX_NS_DEFAULT);
}

/* A size option (cmn_parse_size's grammar) of at least min bytes into
 * *out; -1, with the reason on stderr, when it is not one. */
static int size_opt(const char *name, const char *arg, uint64_t min, uint64_t *out)
{
    int rc = cmn_parse_size(arg, out);

    if (rc < 0) {
        fprintf(stderr, "tierd: %s: bad size '%s': %s\n", name, arg, cmn_size_why(rc));
        return -1;
    }
    if (*out < min) {
        fprintf(stderr, "tierd: %s: bad size '%s' (%s)\n", name, arg,
                min == 1 ? "it may not be 0" : "at least 1M");
        return -1;
    }
    return 0;
}

static double parse_frac(const char *s)
{
    char *end;
    double v = strtod(s, &end);

    return (*end || end == s || !(v > 0 && v <= 1)) ? -1 : v; /* NaN fails both */
}

/* A whole number in [min, max] for option opt (cmn_parse_uint): 0, or -1
 * after saying what is wrong. */
static int num_opt(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    if (cmn_parse_uint(s, min, max, out) < 0) {
        fprintf(stderr, "tierd: %s: want %llu..%llu, got '%s'\n", opt, (unsigned long long)min,
                (unsigned long long)max, s);
        return -1;
    }
    return 0;
}

/* How an option's argument is read, and so the type of its field. */
enum opt_kind {
    O_STR,    /* const char *: the argument as it is */
    O_FLAG,   /* bool: no argument, set */
    O_SIZE,   /* uint64_t: size_opt, at least min */
    O_U32,    /* uint32_t: num_opt in [min, max] */
    O_INT,    /* int: the same */
    O_U16,    /* uint16_t: the same */
    O_FRAC,   /* double: a fraction in (0, 1] */
    O_IPV4,   /* const char *: an IPv4 address */
    O_POLICY, /* int: the remote tier's policy (enum tier_remote_policy) */
    O_ADMIT,  /* int: the cold tier's admission (enum tier_admit) */
    O_DWPD,   /* double: a positive number */
    O_EVICT,  /* int: warm's eviction policy (enum tier_evict_policy) */
    O_HELP,   /* no field: print the usage and exit */
};

#define AT(field) offsetof(struct opts, field)

/* The options: one row each, read by set_opt into the field at `at` (a
 * table, as usage() is one too; a new option is one row). */
static const struct opt_def {
    const char *name;
    char short_name;    /* -v, -h; 0: none */
    enum opt_kind kind;
    size_t at;          /* its field in struct opts */
    uint64_t min, max;  /* numbers: the bounds; sizes: the least (and no most) */
} opt_defs[] = {
    { "socket", 0, O_STR, AT(socket), 0, 0 },
    { "config", 0, O_STR, AT(config), 0, 0 },
    { "data", 0, O_STR, AT(data), 0, 0 },
    { "warm-bytes", 0, O_SIZE, AT(warm_bytes), 1, 0 },
    { "high-wm", 0, O_FRAC, AT(high_wm), 0, 0 },
    { "low-wm", 0, O_FRAC, AT(low_wm), 0, 0 },
    { "evict-policy", 0, O_EVICT, AT(evict_policy), 0, 0 },
    { "no-mlock", 0, O_FLAG, AT(no_mlock), 0, 0 },
    { "no-hugepages", 0, O_FLAG, AT(no_huge), 0, 0 },
    { "max-clients", 0, O_U32, AT(max_clients), 1, 1000000 },
    /* ms: 0 (none) to an hour */
    { "durable-wait-ms", 0, O_U32, AT(durable_wait_ms), 0, 3600000 },
    { "handshake-timeout-ms", 0, O_U32, AT(handshake_ms), 0, 3600000 },
    { "busy-poll-us", 0, O_INT, AT(busy_poll_us), 0, 100000 },
    { "cold-bytes", 0, O_SIZE, AT(cold_bytes), 1u << 20, 0 },
    { "cold-qd", 0, O_U32, AT(cold_qd), 4, 4096 },
    { "no-cold", 0, O_FLAG, AT(no_cold), 0, 0 },
    { "write-through", 0, O_FLAG, AT(write_through), 0, 0 },
    { "no-flush", 0, O_FLAG, AT(no_flush), 0, 0 },
    { "cold-admit", 0, O_ADMIT, AT(cold_admit), 0, 0 },
    { "cold-dwpd", 0, O_DWPD, AT(cold_dwpd), 0, 0 },
    { "hot-bytes", 0, O_SIZE, AT(hot_bytes), 0, 0 },
    { "hot-device", 0, O_INT, AT(hot_device), 0, 1024 },
    { "metrics-port", 0, O_U16, AT(metrics_port), 1, 65535 },
    { "metrics-addr", 0, O_IPV4, AT(metrics_addr), 0, 0 },
    { "metrics-token-file", 0, O_STR, AT(metrics_token_file), 0, 0 },
    { "metrics-no-model-ids", 0, O_FLAG, AT(metrics_no_model_ids), 0, 0 },
    { "metrics-max-namespaces", 0, O_U32, AT(metrics_max_ns), 0, METRICS_MAX_NS_LIMIT },
    { "remote-seeds", 0, O_STR, AT(remote_seeds), 0, 0 },
    { "remote-policy", 0, O_POLICY, AT(remote_policy), 0, 0 },
    { "remote-timeout-ms", 0, O_U32, AT(remote_timeout_ms), 1, 60000 },
    { "remote-namespaces", 0, O_STR, AT(remote_ns), 0, 0 },
    { "verbose", 'v', O_FLAG, AT(verbose), 0, 0 },
    { "help", 'h', O_HELP, 0, 0, 0 },
};

#define NOPTS (sizeof(opt_defs) / sizeof(opt_defs[0]))
#define OPT_VAL 256 /* getopt_long's value of opt_defs[i]: OPT_VAL + i, past any char */

/* Read option d's argument arg into its field of o: 0, or -1 after saying
 * what is wrong. */
static int set_opt(const struct opt_def *d, const char *arg, struct opts *o)
{
    void *f = (char *)o + d->at;
    char name[64];
    uint64_t v;

    snprintf(name, sizeof(name), "--%s", d->name);
    switch (d->kind) {
    case O_STR: *(const char **)f = arg; return 0;
    case O_FLAG: *(bool *)f = true; return 0;
    case O_HELP: usage(stdout); exit(EX_OK);
    case O_SIZE:
        if (size_opt(name, arg, d->min, &v) < 0)
            return -1;
        *(uint64_t *)f = v;
        return 0;
    case O_U32: case O_INT: case O_U16:
        if (num_opt(name, arg, d->min, d->max, &v) < 0)
            return -1;
        if (d->kind == O_U32)
            *(uint32_t *)f = (uint32_t)v;
        else if (d->kind == O_INT)
            *(int *)f = (int)v;
        else
            *(uint16_t *)f = (uint16_t)v;
        return 0;
    case O_FRAC:
        if ((*(double *)f = parse_frac(arg)) < 0) {
            fprintf(stderr, "tierd: %s: want a fraction in (0, 1], got '%s'\n", name, arg);
            return -1;
        }
        return 0;
    case O_IPV4: {
        struct in_addr a;

        if (inet_pton(AF_INET, arg, &a) != 1) {
            fprintf(stderr, "tierd: %s: want an IPv4 address, got '%s'\n", name, arg);
            return -1;
        }
        *(const char **)f = arg;
        return 0;
    }
    case O_ADMIT:
        if (strcmp(arg, "all") != 0 && strcmp(arg, "second-touch") != 0) {
            fprintf(stderr, "tierd: %s: want second-touch or all, got '%s'\n", name, arg);
            return -1;
        }
        *(int *)f = strcmp(arg, "all") == 0 ? TIER_ADMIT_ALL : TIER_ADMIT_REUSED;
        return 0;
    case O_DWPD: {
        char *end;
        double dw = strtod(arg, &end);

        if (end == arg || *end || !(dw > 0 && dw <= 1e6)) { /* NaN fails too */
            fprintf(stderr, "tierd: %s: want drive writes per day, a number in (0, 1e6], "
                            "got '%s'\n", name, arg);
            return -1;
        }
        *(double *)f = dw;
        return 0;
    }
    case O_POLICY: {
        enum tier_remote_policy pol;

        if (tierd_parse_policy(arg, &pol) < 0) {
            fprintf(stderr, "tierd: %s: want write-through or on-demotion, got '%s'\n", name,
                    arg);
            return -1;
        }
        *(int *)f = (int)pol;
        return 0;
    }
    case O_EVICT: {
        enum tier_evict_policy ep;

        if (tier_evict_policy_parse(arg, &ep) < 0) {
            fprintf(stderr, "tierd: %s: want lru, keep or reuse, got '%s'\n", name, arg);
            return -1;
        }
        *(int *)f = (int)ep;
        return 0;
    }
    }
    return -1;
}

/* The row of what getopt_long returned (OPT_VAL + its index, or its short
 * name), or NULL for an option that is none of ours. */
static const struct opt_def *opt_of(int c)
{
    for (size_t i = 0; i < NOPTS; i++)
        if (c == OPT_VAL + (int)i || (opt_defs[i].short_name && c == opt_defs[i].short_name))
            return &opt_defs[i];
    return NULL;
}

static int parse_opts(int argc, char **argv, struct opts *o)
{
    struct option lo[NOPTS + 1];
    int c;

    for (size_t i = 0; i < NOPTS; i++) {
        bool arg = opt_defs[i].kind != O_FLAG && opt_defs[i].kind != O_HELP;

        lo[i] = (struct option){ opt_defs[i].name, arg ? required_argument : no_argument, NULL,
                                 OPT_VAL + (int)i };
    }
    lo[NOPTS] = (struct option){ 0 };
    *o = (struct opts){
        .socket = getenv("KVTIER_SOCKET"), .data = getenv("KVTIER_DATA"),
        .warm_bytes = 1ull << 30, .high_wm = 0.95, .low_wm = 0.85, .max_clients = 1024,
        .busy_poll_us = 200, .cold_bytes = 4ull << 30, .cold_qd = 32, .durable_wait_ms = 10000,
        .handshake_ms = 5000,
        /* hits first: second-touch loses 22% of hits at cold 4x warm (README, NVMe admission) */
        .cold_admit = TIER_ADMIT_ALL,
        .metrics_addr = "127.0.0.1", .metrics_max_ns = METRICS_MAX_NS_DEFAULT,
        .remote_policy = -1,
        .evict_policy = DEFAULT_EVICT,
    };
    if (!o->socket || !*o->socket)
        o->socket = KVT_DEFAULT_SOCKET;
    if (!o->data || !*o->data)
        o->data = DEFAULT_DATA;
    while ((c = getopt_long(argc, argv, "vh", lo, NULL)) != -1) {
        const struct opt_def *d = opt_of(c);

        if (!d) {
            usage(stderr);
            return -1;
        }
        if (set_opt(d, optarg, o) < 0)
            return -1;
    }
    if (optind < argc) {
        fprintf(stderr, "tierd: unexpected argument '%s'\n", argv[optind]);
        return -1;
    }
    if (o->low_wm > o->high_wm) {
        fprintf(stderr, "tierd: --low-wm (%g) must not exceed --high-wm (%g)\n", o->low_wm,
                o->high_wm);
        return -1;
    }
    return 0;
}

/* mkdir -p with mode for the missing components. */
static int mkdirs(const char *path, mode_t mode)
{
    char buf[PATH_MAX];
    size_t n = strlen(path);

    if (n == 0 || n >= sizeof(buf))
        return -ENAMETOOLONG;
    memcpy(buf, path, n + 1);
    for (char *p = buf + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = 0;
        if (mkdir(buf, mode) < 0 && errno != EEXIST)
            return -errno;
        *p = '/';
    }
    if (mkdir(buf, mode) < 0 && errno != EEXIST)
        return -errno;
    return 0;
}

/* Make folder dir (mkdir -p) and check that tierd may keep files there
 * (tierd_dir_safe: a folder someone else prepared could lead root's
 * writes elsewhere by a link). 0, or -1 after saying why. */
static int safe_folder(const char *dir, const char *what)
{
    char why[PATH_MAX + 128];
    int rc = mkdirs(dir, 0700);

    if (rc < 0) {
        tierd_log("cannot create %s %s: %s", what, dir, strerror(-rc));
        return -1;
    }
    if (tierd_dir_safe(dir, TIERD_DIR_OURS, why, sizeof(why)) < 0) {
        tierd_log("refusing %s %s: %s", what, dir, why);
        return -1;
    }
    return 0;
}

/* One daemon per data folder: an exclusive flock held for our lifetime.
 * The fd, or minus a sysexits code after saying why. */
static int lock_data(const char *dir)
{
    char path[PATH_MAX];
    int fd;

    if (safe_folder(dir, "data folder") < 0)
        return -EX_CANTCREAT;
    snprintf(path, sizeof(path), "%s/tierd.lock", dir);
    fd = open(path, O_RDWR | O_CREAT | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0) {
        fprintf(stderr, "tierd: cannot open %s: %s\n", path,
                errno == ELOOP ? "it is a symbolic link" : strerror(errno));
        return -EX_CANTCREAT;
    }
    if (flock(fd, LOCK_EX | LOCK_NB) < 0) {
        fprintf(stderr, "tierd: data folder %s is in use by another tierd\n", dir);
        close(fd);
        return -EX_TEMPFAIL;
    }
    return fd;
}

/* The listening socket at path: its fd, -1 on errors (logged), -2 when
 * its folder cannot be trusted. */
static int listen_on(const char *path)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    char dir[PATH_MAX], why[PATH_MAX + 128];
    char *slash;
    int fd;

    if (strlen(path) >= sizeof(a.sun_path)) {
        fprintf(stderr, "tierd: socket path too long (max %zu): %s\n", sizeof(a.sun_path) - 1,
                path);
        return -1;
    }
    strcpy(a.sun_path, path);
    snprintf(dir, sizeof(dir), "%s", path);
    slash = strrchr(dir, '/');
    if (slash && slash != dir) {
        *slash = 0;
        mkdirs(dir, 0755);
    } else {
        snprintf(dir, sizeof(dir), "%s", slash ? "/" : ".");
    }
    /* a folder another user may write would let them put their own socket
     * in place of ours, and serve every tenant's engine bytes of their own */
    if (tierd_dir_safe(dir, TIERD_DIR_TRUSTED, why, sizeof(why)) < 0) {
        tierd_log("refusing socket %s: %s", path, why);
        return -2;
    }
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* a socket file left by a crashed daemon answers nothing: replace it; a
     * live one answers, and we must not steal its path */
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) == 0 || errno == EAGAIN) {
        fprintf(stderr, "tierd: another tierd is listening on %s\n", path);
        close(fd);
        return -1;
    }
    close(fd);
    unlink(path);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    {
        mode_t old = umask(0077); /* the socket admits only our own uid (and root) */
        int rc = bind(fd, (struct sockaddr *)&a, sizeof(a));

        umask(old);
        if (rc < 0 || listen(fd, 128) < 0) {
            fprintf(stderr, "tierd: cannot listen on %s: %s\n", path, strerror(errno));
            close(fd);
            return -1;
        }
    }
    return fd;
}

static void on_signal(struct ev_loop *l, int fd, uint32_t events, void *ctx)
{
    struct signalfd_siginfo si;

    (void)events;
    (void)ctx;
    if (read(fd, &si, sizeof(si)) == sizeof(si))
        tierd_log("signal %u: stopping", si.ssi_signo);
    ev_stop(l);
}

static void store_log(void *ctx, const char *msg)
{
    (void)ctx;
    tierd_log("%s", msg);
}

/* Why tier_open failed for tenant t (part, rc), logged; its sysexits code. */
static int open_failed(struct tierd *d, struct tenant *t, enum tier_part part, int rc)
{
    switch (part) {
    case TIER_PART_COLD:
        tierd_log("tenant %s: cannot open the cold tier in %s (%llu bytes): %s", t->name,
                  t->dir, (unsigned long long)t->cold_bytes,
                  rc == -ELOOP ? "a file of it is a symbolic link or not a regular file"
                               : strerror(-rc));
        return rc == -ENOSPC ? EX_CANTCREAT : EX_OSERR;
    case TIER_PART_REMOTE:
        tierd_log("tenant %s: remote tier on %s: %s", t->name, d->remote.seeds,
                  rc == -EINVAL ? "want host:port[,host:port...]" : strerror(-rc));
        return rc == -EINVAL ? EX_CONFIG : EX_OSERR;
    case TIER_PART_HOT:
        tierd_log("tenant %s: cannot open the hot tier (%llu bytes): %s", t->name,
                  (unsigned long long)t->hot_bytes, strerror(-rc));
        return EX_OSERR;
    case TIER_PART_WARM:
        break;
    }
    tierd_log("tenant %s: cannot create the warm tier (%llu bytes): %s", t->name,
              (unsigned long long)t->warm_bytes, strerror(-rc));
    return EX_OSERR;
}

/* Say what tenant t's tiers are, once open; index what its disk holds. 0,
 * or a sysexits code after logging why. */
static int tenant_ready(struct tierd *d, struct tenant *t)
{
    struct tier_stats st;
    int rc;

    if (t->remote)
        tierd_log("tenant %s: remote tier on Redis Cluster %s (%s, timeout %u ms, "
                  "namespaces: %s%s)", t->name, d->remote.seeds,
                  d->remote.policy == TIER_REMOTE_ON_DEMOTION ? "on-demotion" : "write-through",
                  d->remote.timeout_ms ? d->remote.timeout_ms : 100,
                  d->remote.ns_prefix[0] ? "model ids starting with " : "all",
                  d->remote.ns_prefix);
    /* the pool travels by SCM_RIGHTS to the tenant's clients only; no one
     * else may open it by path (/proc/<pid>/fd) */
    if (fchmod(tier_pool_fd(t->store), 0600) < 0)
        tierd_log("tenant %s: cannot restrict the warm pool's mode: %s", t->name,
                  strerror(errno));
    if (t->hot) {
        /* copies between the device and the warm pool are DMA once pinned */
        rc = tier_hot_register_host(t->hot, tier_pool_base(t->store),
                                    tier_pool_bytes(t->store));
        tierd_log("tenant %s: hot tier %llu MiB (%s)%s", t->name,
                  (unsigned long long)(tier_hot_bytes(t->hot) >> 20),
                  tier_hot_kind(t->hot) == TIER_HOT_CUDA ? "CUDA" : "emulated in RAM",
                  rc < 0 ? "; the warm pool could not be registered for DMA" : "");
    }
    if (t->cold) {
        uint64_t t0 = tierd_now_ms();
        struct tier_cold_stats cs;

        rc = tier_load_cold(t->store);
        if (rc < 0) {
            tierd_log("tenant %s: cannot index the cold tier: %s", t->name, strerror(-rc));
            return EX_OSERR;
        }
        tier_cold_stats_get(t->cold, &cs);
        tierd_log("tenant %s: cold tier %llu MiB (%s), %d blocks served from disk, indexed "
                  "in %llu ms", t->name, (unsigned long long)(cs.bytes_capacity >> 20),
                  cs.direct ? "O_DIRECT" : "buffered", rc,
                  (unsigned long long)(tierd_now_ms() - t0));
    }
    tier_stats_get(t->store, &st);
    tierd_log("tenant %s: warm tier %llu MiB (%s%s, evicting by %s), data %s", t->name,
              (unsigned long long)(tier_pool_bytes(t->store) >> 20),
              st.memory_locked ? "pinned" : "not pinned", st.huge_pages ? ", huge pages" : "",
              tier_evict_policy_name(tier_evict_policy_of(t->store)), t->dir);
    return 0;
}

/* Open tenant t's store with its tiers (tier_open): cold (its own folder),
 * remote, hot, warm; index what its disk holds. 0, or a sysexits code after
 * logging why (what was opened is closed by close_tenant). */
static int open_tenant(struct tierd *d, struct tenant *t, const struct opts *o)
{
    /* each tenant its own remote workers and connections: its completions
     * land in its own store */
    struct tier_cold_cfg cc = { .dir = t->dir, .bytes = t->cold_bytes, .qd = o->cold_qd,
                                .log = store_log };
    struct tier_remote_cfg rc_cfg = { .seeds = d->remote.seeds,
                                      .timeout_ms = d->remote.timeout_ms, .log = store_log };
    struct tier_hot_cfg hc = { .kind = TIER_HOT_AUTO, .bytes = t->hot_bytes,
                               .device = o->hot_device, .log = store_log };
    struct tier_open_cfg oc = {
        .store = { .warm_bytes = t->warm_bytes, .high_wm = o->high_wm, .low_wm = o->low_wm,
                   .lock_memory = !o->no_mlock, .log = store_log,
                   .write_through = o->write_through,
                   .admit = (enum tier_admit)o->cold_admit,
                   /* DWPD is a share of the drive per day: of this tenant's cold file */
                   .cold_budget_bytes = (uint64_t)(o->cold_dwpd * (double)t->cold_bytes),
                   .evict_policy = (enum tier_evict_policy)o->evict_policy },
        .cold = t->cold_bytes ? &cc : NULL,
        .remote = d->remote.seeds[0] ? &rc_cfg : NULL,
        .hot = t->hot_bytes ? &hc : NULL,
    };
    enum tier_part part;
    int rc;

    /* no hugetlb pool for clients of other users: a hole one punches in it
     * (fallocate, which no seal forbids short of forbidding writes) could
     * leave no free huge page for our next touch of it, and SIGBUS would
     * take tierd down for every tenant; a page pool refaults instead */
    oc.store.huge_pages = !o->no_huge && !tenant_foreign(d, t);
    if (oc.remote)
        oc.store.remote_policy = d->remote.policy;
    if (oc.cold && safe_folder(t->dir, "the cold tier's folder") < 0)
        return EX_CANTCREAT;
    rc = tier_open(&oc, &t->store, &part);
    if (rc < 0)
        return open_failed(d, t, part, rc);
    /* borrowed from the store, which owns them */
    t->cold = tier_cold_of(t->store);
    t->remote = tier_remote_of(t->store);
    t->hot = tier_hot_of(t->store);
    return tenant_ready(d, t);
}

/* Close what open_tenant opened: the store closes its tiers in the order
 * their callbacks need (tier_close). */
static void close_tenant(struct tenant *t)
{
    tier_close(t->store);
    t->store = NULL;
    t->cold = NULL;
    t->remote = NULL;
    t->hot = NULL;
}

/* Who may reach the socket: only us (0600), a configured group (0660), or
 * everyone when tenants admit other users (0666: SO_PEERCRED decides). */
static int socket_mode(struct tierd *d, const char *path)
{
    if (d->socket_gid != (gid_t)-1) {
        if (chown(path, (uid_t)-1, d->socket_gid) < 0 || chmod(path, 0660) < 0)
            return -errno;
        tierd_log("socket %s: mode 0660, group %u", path, (unsigned)d->socket_gid);
    } else if (tenant_shared(d)) {
        if (chmod(path, 0666) < 0)
            return -errno;
        tierd_log("socket %s: open to every user; tenants admit peers by uid/gid", path);
    }
    return 0;
}

/* The tenants (tenant_config: --config, or the one default tenant), and
 * the remote tier: the command line over the config file's [remote].
 * EX_OK, or a sysexits code after logging why (the tenants are the
 * caller's to free either way). */
static int configure(struct tierd *d, const struct opts *o)
{
    struct tenant_defaults def = { .data = o->data, .warm_bytes = o->warm_bytes,
                                   .cold_bytes = o->cold_bytes, .hot_bytes = o->hot_bytes,
                                   .no_cold = o->no_cold };
    char err[512];
    int rc = tenant_config(d, o->config, &def, err, sizeof(err));

    if (rc < 0) {
        tierd_log("--config %s", err);
        return rc == -EINVAL ? EX_CONFIG : rc == -ENOMEM ? EX_OSERR : EX_NOINPUT;
    }
    if (o->remote_seeds && snprintf(d->remote.seeds, sizeof(d->remote.seeds), "%s",
                                    o->remote_seeds) >= (int)sizeof(d->remote.seeds)) {
        tierd_log("--remote-seeds: list too long");
        return EX_USAGE;
    }
    if (o->remote_timeout_ms)
        d->remote.timeout_ms = o->remote_timeout_ms;
    if (o->remote_policy >= 0)
        d->remote.policy = (enum tier_remote_policy)o->remote_policy;
    if (o->remote_ns && tierd_parse_ns_filter(o->remote_ns, &d->remote) < 0) {
        tierd_log("--remote-namespaces: prefix too long");
        return EX_USAGE;
    }
    return EX_OK;
}

/* The metrics page, when asked for: bound before the tiers open, so that a
 * port in use stops tierd at once. EX_OK, or a sysexits code after logging
 * why. */
static int open_metrics(struct tierd *d, const struct opts *o)
{
    struct metrics_cfg mc = { .addr = o->metrics_addr, .port = o->metrics_port,
                              .token_file = o->metrics_token_file,
                              .no_model_ids = o->metrics_no_model_ids,
                              .max_ns = o->metrics_max_ns };
    char err[512];
    int rc;

    if (!o->metrics_port)
        return EX_OK;
    rc = metrics_open(d, &mc, err, sizeof(err), &d->metrics);
    if (rc < 0) {
        tierd_log("%s", err);
        return rc == -EADDRINUSE ? EX_TEMPFAIL : rc == -EINVAL ? EX_CONFIG
               : rc == -ENOENT ? EX_NOINPUT : EX_OSERR;
    }
    return EX_OK;
}

/* The event loop and what it watches: the socket, the signals in sigs,
 * each tenant's completions, the metrics page; then the sessions. EX_OK,
 * or EX_OSERR after logging why (what was made is the caller's to close). */
static int watch(struct tierd *d, const sigset_t *sigs)
{
    int rc = 0;

    d->sig_fd = signalfd(-1, sigs, SFD_CLOEXEC | SFD_NONBLOCK);
    if (d->sig_fd < 0 || ev_loop_create(&d->loop) < 0 ||
        ev_add(d->loop, d->listen_fd, sess_on_accept, d) < 0 ||
        ev_add(d->loop, d->sig_fd, on_signal, d) < 0)
        rc = -1;
    for (uint32_t i = 0; rc >= 0 && i < d->ntenants; i++) {
        struct tenant *t = &d->tenants[i];

        if ((t->cold && ev_add(d->loop, tier_event_fd(t->store), tierd_on_tiers, t) < 0) ||
            (t->hot && ev_add(d->loop, tier_hot_fd(t->store), tierd_on_tiers, t) < 0) ||
            (t->remote && ev_add(d->loop, tier_remote_fd(t->store), tierd_on_tiers, t) < 0))
            rc = -1;
    }
    if (rc < 0 || (d->metrics && metrics_attach(d->metrics, d->loop) < 0) || sess_init(d) < 0) {
        tierd_log("cannot set up the event loop: %s", strerror(errno));
        return EX_OSERR;
    }
    return EX_OK;
}

/* A clean stop: the sessions closed, the socket gone, each tenant's warm
 * tier written to cold (unless --no-flush). */
static void stop(struct tierd *d, const struct opts *o)
{
    sess_close_all(d);
    unlink(o->socket);
    for (uint32_t i = 0; i < d->ntenants && !o->no_flush; i++) {
        struct tenant *t = &d->tenants[i];
        int rc;

        if (!t->cold)
            continue;
        rc = tier_flush_to_cold(t->store);
        tierd_log("tenant %s: warm tier written to cold%s%s", t->name, rc < 0 ? ": " : "",
                  rc < 0 ? strerror(-rc) : "");
    }
    tierd_log("stopped");
}

int main(int argc, char **argv)
{
    struct tierd d = { .listen_fd = -1, .sig_fd = -1, .lock_fd = -1 };
    struct opts o;
    sigset_t sigs;
    int rc, ex;

    if (parse_opts(argc, argv, &o) < 0)
        return EX_USAGE;
    d.uid = geteuid();
    d.max_clients = o.max_clients;
    d.durable_wait_ms = o.durable_wait_ms;
    d.handshake_ms = o.handshake_ms;
    d.verbose = o.verbose;
    d.start_ms = tierd_now_ms();
    signal(SIGPIPE, SIG_IGN);
    sigemptyset(&sigs);
    sigaddset(&sigs, SIGINT);
    sigaddset(&sigs, SIGTERM);
    sigprocmask(SIG_BLOCK, &sigs, NULL);

    if ((ex = configure(&d, &o)) != EX_OK)
        goto out_tenants;
    d.lock_fd = lock_data(o.data);
    if (d.lock_fd < 0) {
        ex = -d.lock_fd;
        goto out_tenants;
    }
    if ((ex = open_metrics(&d, &o)) != EX_OK)
        goto out_lock;
    for (uint32_t i = 0; i < d.ntenants && ex == EX_OK; i++)
        ex = open_tenant(&d, &d.tenants[i], &o);
    if (ex != EX_OK)
        goto out_store;
    d.listen_fd = listen_on(o.socket);
    if (d.listen_fd < 0) {
        ex = d.listen_fd == -2 ? EX_CANTCREAT : EX_TEMPFAIL;
        goto out_store;
    }
    rc = socket_mode(&d, o.socket);
    if (rc < 0) {
        tierd_log("cannot set the socket's owner or mode: %s", strerror(-rc));
        ex = EX_OSERR;
        goto out_loop;
    }
    if ((ex = watch(&d, &sigs)) != EX_OK)
        goto out_loop;
    ev_set_spin(d.loop, o.busy_poll_us);
    tierd_log("listening on %s (%u tenant%s)", o.socket, d.ntenants, d.ntenants > 1 ? "s" : "");
    sd_notify(0, "READY=1"); /* Type=notify under systemd: clients may come (else a no-op) */
    if (d.metrics)
        tierd_log("metrics at http://%s:%u/metrics", o.metrics_addr, o.metrics_port);
    rc = ev_run(d.loop, tierd_turn_end, &d);
    if (rc < 0) {
        tierd_log("event loop failed: %s", strerror(-rc));
        ex = EX_OSERR;
    }
    stop(&d, &o);
out_loop:
    metrics_close(d.metrics); /* unwatches its fds: before the loop goes */
    d.metrics = NULL;
    ev_loop_destroy(d.loop);
    if (d.sig_fd >= 0)
        close(d.sig_fd);
    if (d.listen_fd >= 0)
        close(d.listen_fd);
out_store:
    for (uint32_t i = 0; i < d.ntenants; i++)
        close_tenant(&d.tenants[i]);
out_lock:
    metrics_close(d.metrics); /* when start-up failed before the loop */
    close(d.lock_fd);
out_tenants:
    tenant_free_all(&d);
    return ex;
}
