/* SPDX-License-Identifier: MIT */
/*
 * t.c - shared test helpers (see t.h).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <time.h>

#include "tier.h"
#include "tier_cold.h"
#include "tier_hot.h"
#include "tier_nvme.h"
#include <unistd.h>

#include "kvt_common.h"
#include "t.h"

const char *t_bin(const char *name, char *buf, size_t cap)
{
    const char *dir = getenv("KVT_TEST_BIN");

    snprintf(buf, cap, "%s/%s", dir && *dir ? dir : "build", name);
    return buf;
}

int t_memcheck_argv(const char **argv, char *supp, size_t cap)
{
    const char *src = getenv("KVT_TEST_SRC");
    int n = 0;

    if (!getenv("KVT_TEST_VALGRIND"))
        return 0;
    snprintf(supp, cap, "--suppressions=%s/tests/valgrind.supp", src ? src : ".");
    argv[n++] = "/usr/bin/valgrind";
    argv[n++] = "-q";
    argv[n++] = "--leak-check=full";
    argv[n++] = "--errors-for-leak-kinds=definite,indirect";
    argv[n++] = "--error-exitcode=9";
    argv[n++] = supp;
    return n;
}

/* An unlinked temp file's whole contents, NUL-terminated (malloc'd). */
static char *slurp_tmp(int fd)
{
    off_t n = lseek(fd, 0, SEEK_END);
    char *buf;

    cr_assert(n >= 0, "lseek: %s", strerror(errno));
    buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(pread(fd, buf, (size_t)n, 0), (ssize_t)n, "reading a captured stream");
    buf[n] = '\0';
    close(fd);
    return buf;
}

static int tmp_stream(void)
{
    char path[512];
    int fd = cmn_tmpfile("kvt-run", path, sizeof(path));

    cr_assert_geq(fd, 0, "a temp file for a captured stream: %s", strerror(-fd));
    unlink(path);
    return fd;
}

void t_tmpdir(const char *tag, char *buf, size_t cap)
{
    int rc = cmn_tmpdir(tag, buf, cap);

    cr_assert_eq(rc, 0, "a temp folder %s-XXXXXX: %s", tag, strerror(-rc));
}

void t_rmtree(const char *path)
{
    int rc = cmn_rmtree(path);

    cr_assert_eq(rc, 0, "removing %s: %s", path, strerror(-rc));
}

int t_sh(const char *cmd, char **out)
{
    FILE *p = popen(cmd, "r");
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    int st;

    cr_assert(p && buf, "popen %s", cmd);
    for (size_t n; (n = fread(buf + len, 1, cap - len - 1, p)) > 0;)
        if ((len += n) + 1 == cap)
            cr_assert_not_null(buf = realloc(buf, cap *= 2));
    buf[len] = '\0';
    st = pclose(p);
    *out = buf;
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

char *t_sh_ok(const char *cmd)
{
    char *out;
    int rc = t_sh(cmd, &out);

    cr_assert_eq(rc, 0, "%s: exit %d:\n%s", cmd, rc, out);
    return out;
}

char *t_sh_okf(const char *fmt, ...)
{
    char *cmd, *out;
    va_list ap;
    int n;

    va_start(ap, fmt);
    n = vasprintf(&cmd, fmt, ap);
    va_end(ap);
    cr_assert_geq(n, 0, "vasprintf: %s", strerror(errno));
    out = t_sh_ok(cmd);
    free(cmd);
    return out;
}

const char *const *t_prog_argv(struct t_argv *a, const char *prog, const char *const *args,
                               int memcheck)
{
    int n = memcheck ? t_memcheck_argv(a->argv, a->supp, sizeof(a->supp)) : 0;

    a->argv[n++] = t_bin(prog, a->bin, sizeof(a->bin));
    for (int i = 0; args[i] && n < 79; i++)
        a->argv[n++] = args[i];
    a->argv[n] = NULL;
    return a->argv;
}

int t_run(const char *prog, const char *const *args, int memcheck, char **out, char **err)
{
    struct t_argv a;
    const char *const *argv = t_prog_argv(&a, prog, args, memcheck);
    int fo = tmp_stream(), fe = tmp_stream(), st;
    pid_t pid;

    pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        if (dup2(fo, 1) < 0 || dup2(fe, 2) < 0)
            _exit(126);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    st = t_wait(pid);
    if (out)
        *out = slurp_tmp(fo);
    else
        close(fo);
    if (err)
        *err = slurp_tmp(fe);
    else
        close(fe);
    return st;
}

static void start_in(struct t_tierd *d, const char *const *args);

/* The argv of a test's tierd into argv[32]: under memcheck with
 * KVT_TEST_VALGRIND=1 (any error or leak makes it exit 9), on sock and
 * data, a small cold tier unless extra says otherwise (a later option
 * wins), then extra (NULL-terminated, may be NULL). bin and supp hold
 * strings argv points at. */
static void tierd_argv(const char **argv, char *bin, size_t bin_cap, char *supp, size_t supp_cap,
                       const char *sock, const char *data, const char *const *extra)
{
    int n = t_memcheck_argv(argv, supp, supp_cap);

    argv[n++] = t_bin("tierd", bin, bin_cap);
    argv[n++] = "--socket";
    argv[n++] = sock;
    argv[n++] = "--data";
    argv[n++] = data;
    argv[n++] = "--cold-bytes";
    argv[n++] = "64M";
    for (int i = 0; extra && extra[i] && n < 31; i++)
        argv[n++] = extra[i];
    argv[n] = NULL;
}

void t_tierd_start(struct t_tierd *d, const char *const *args)
{
    const char *attach = getenv("KVT_TEST_ATTACH");

    memset(d, 0, sizeof(*d));
    if (attach && *attach) {
        snprintf(d->sock, sizeof(d->sock), "%s", attach);
        return;
    }
    t_tmpdir("kvt-test", d->dir, sizeof(d->dir));
    start_in(d, args);
}

const char *const t_small_warm[] = { "--warm-bytes", "32M", "--high-wm", "0.75",
                                     "--low-wm", "0.5", "--cold-bytes", "256M", NULL };

void t_tierd_restart(struct t_tierd *d, const char *const *args)
{
    cr_assert_eq(d->pid, 0, "restart of a tierd that still runs");
    start_in(d, args);
}

int t_tierd_kill(struct t_tierd *d, int sig)
{
    int st;

    kill(d->pid, sig);
    st = t_wait(d->pid);
    d->pid = 0;
    return st;
}

/* cmn_tierd_wait's test of readiness: a client gets through HELLO. */
static int hello(const char *sock, void *arg)
{
    kvt_client *c;

    (void)arg;
    if (kvt_connect(sock, &c) != 0)
        return -1;
    kvt_close(c);
    return 0;
}

static void start_in(struct t_tierd *d, const char *const *args)
{
    char bin[512], data[300], supp[600];
    const char *argv[32];
    int rc, st = 0, secs = getenv("KVT_TEST_VALGRIND") ? 60 : 30;

    snprintf(d->sock, sizeof(d->sock), "%s/tierd.sock", d->dir);
    snprintf(data, sizeof(data), "%s/data", d->dir);
    tierd_argv(argv, bin, sizeof(bin), supp, sizeof(supp), d->sock, data, args);
    snprintf(d->log, sizeof(d->log), "%s/tierd.log", d->dir);
    /* dies with the test (a test that dies or times out leaves no daemon);
     * ready within 30 s (60 s under valgrind): a loaded machine, shared
     * with other builds, can take more than 10 s to start one */
    d->pid = cmn_spawn(argv, getenv("KVT_TEST_VERBOSE") ? NULL : d->log, 0);
    cr_assert(d->pid > 0, "spawning %s: %s", argv[0], strerror(-d->pid));
    rc = cmn_tierd_wait(d->pid, d->sock, hello, NULL, (unsigned)secs * 1000, &st);
    if (rc == -ECHILD) {
        d->pid = 0;
        cr_assert_fail("tierd (%s) exited at start with status %d", argv[0], st);
    }
    if (rc < 0) {
        kill(d->pid, SIGKILL);
        t_wait(d->pid);
        d->pid = 0;
        cr_assert_fail("tierd did not accept connections within %d s", secs);
    }
}

void t_acks_open(struct t_acks *a, void (*fn)(const char *arg, int wfd), const char *arg)
{
    int p[2];

    cr_assert_eq(pipe(p), 0, "pipe: %s", strerror(errno));
    a->pid = fork();
    cr_assert(a->pid >= 0, "fork: %s", strerror(errno));
    if (a->pid == 0) {
        close(p[0]);
        fn(arg, p[1]);
        _exit(0);
    }
    close(p[1]);
    a->rfd = p[0];
}

int t_ack_send(int wfd, uint64_t i)
{
    return write(wfd, &i, sizeof(i)) == sizeof(i) ? 0 : -1;
}

long t_acks_read(struct t_acks *a, uint8_t *acked, size_t cap, long max)
{
    long n = 0;
    uint64_t i;

    while ((max < 0 || n < max) && read(a->rfd, &i, sizeof(i)) == sizeof(i)) {
        cr_assert_lt(i, cap, "ack of %llu, past the %zu the test checks", (unsigned long long)i,
                     cap);
        acked[i] = 1;
        n++;
    }
    return n;
}

void t_acks_close(struct t_acks *a)
{
    close(a->rfd);
    t_wait(a->pid);
}

int t_wait(pid_t pid)
{
    int st = cmn_wait(pid);

    return st < 0 ? -1 : st;
}

void t_tierd_stop(struct t_tierd *d)
{
    int st, rc;

    if (d->pid <= 0)
        return;
    kill(d->pid, SIGTERM);
    st = t_wait(d->pid);
    d->pid = 0;
    if ((rc = cmn_rmtree(d->dir)) < 0)
        fprintf(stderr, "t: could not remove %s: %s\n", d->dir, strerror(-rc));
    cr_assert_eq(st, 0, "tierd exit status: expected 0 (clean stop), got %d", st);
}

kvt_client *t_connect(const struct t_tierd *d)
{
    kvt_client *c = NULL;
    int rc = kvt_connect(d->sock, &c);

    cr_assert_eq(rc, 0, "kvt_connect(%s): %s", d->sock, kvt_strerror(rc));
    return c;
}

kvt_model t_model(uint64_t block_bytes)
{
    return (kvt_model){
        .model_id = "test/model", .dtype = "bf16", .layout = "test",
        .block_tokens = 16, .tp_rank = 0, .tp_size = 1, .block_bytes = block_bytes,
    };
}

kvt_ns *t_ns(kvt_client *c, uint64_t block_bytes)
{
    kvt_model m = t_model(block_bytes);
    kvt_ns *ns = NULL;
    int rc = kvt_ns_open(c, &m, &ns);

    cr_assert_eq(rc, 0, "kvt_ns_open: %s", kvt_strerror(rc));
    return ns;
}

/* splitmix64: a small, well-mixed generator for deterministic test data */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

void t_keys(kvt_key *k, size_t n, uint64_t seed)
{
    uint64_t s = seed * 0x100000001b3ull + 17;

    for (size_t i = 0; i < n; i++)
        for (size_t j = 0; j < KVT_KEY_BYTES; j += 8) {
            uint64_t v = mix(&s);

            memcpy(k[i].b + j, &v, 8);
        }
}

void t_fill(void *buf, size_t len, uint64_t seed)
{
    uint64_t s = seed ^ (len * 0x9e37ull);
    uint8_t *p = buf;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        uint64_t v = mix(&s);

        memcpy(p + i, &v, 8);
    }
    for (; i < len; i++)
        p[i] = (uint8_t)mix(&s);
}

long t_check(const void *buf, size_t len, uint64_t seed)
{
    uint64_t s = seed ^ (len * 0x9e37ull);
    const uint8_t *p = buf;
    size_t i = 0;

    for (; i + 8 <= len; i += 8) {
        uint64_t v = mix(&s);

        if (memcmp(p + i, &v, 8) != 0)
            return (long)i;
    }
    for (; i < len; i++)
        if (p[i] != (uint8_t)mix(&s))
            return (long)i;
    return -1;
}

void t_cache_init(struct t_cache *c, uint32_t layers, uint32_t nb, uint32_t bs, uint32_t h,
                  uint32_t d, uint32_t elem, uint64_t seed)
{
    size_t page_elems = (size_t)bs * h * d;

    cr_assert_leq(layers, T_CACHE_LAYERS_MAX);
    memset(c, 0, sizeof(*c));
    c->page_bytes = page_elems * elem;
    c->layer_bytes = 2 * (size_t)nb * c->page_bytes;
    for (uint32_t i = 0; i < layers; i++) {
        c->layer[i] = calloc(1, c->layer_bytes);
        cr_assert_not_null(c->layer[i]);
        if (seed)
            t_fill(c->layer[i], c->layer_bytes, seed + i);
    }
    c->l = (struct kvk_layout){
        .n_layers = layers, .layer_base = c->layer, .elem_bytes = elem, .block_tokens = bs,
        .kv_heads = h, .head_dim = d, .n_kv = 2, .num_blocks = nb,
        .stride_kv = (int64_t)nb * (int64_t)page_elems, .stride_block = (int64_t)page_elems,
        .stride_token = (int64_t)h * d, .stride_head = d, .stride_dim = 1,
    };
}

void t_cache_free(struct t_cache *c)
{
    for (int i = 0; i < T_CACHE_LAYERS_MAX; i++)
        free(c->layer[i]);
    memset(c, 0, sizeof(*c));
}

const uint8_t *t_cache_page(const struct t_cache *c, int layer, int kv, int64_t block)
{
    return (const uint8_t *)c->layer[layer] +
           ((size_t)kv * c->l.num_blocks + (size_t)block) * c->page_bytes;
}

void *t_abuf(size_t len)
{
    void *p = NULL;

    cr_assert_eq(posix_memalign(&p, 4096, len), 0);
    memset(p, 0xa5, len);
    return p;
}

void t_io_done(void *ctx, int64_t res)
{
    struct t_io *io = ctx;

    io->calls++;
    io->res = res;
}

void t_nvme_drain(struct tier_nvme *n)
{
    cr_assert_eq(tier_nvme_submit(n), 0);
    while (tier_nvme_inflight(n) > 0) {
        int rc = tier_nvme_reap(n, 1);

        cr_assert_geq(rc, 0, "reap: %s", strerror(-rc));
    }
}

int t_put_chain(kvt_ns *ns, const kvt_key *k, size_t n, size_t blk, uint64_t seed0,
                unsigned flags)
{
    void *slots[KVT_BATCH_MAX];
    int rc;

    cr_assert_leq(n, KVT_BATCH_MAX);
    rc = kvt_put_reserve(ns, NULL, k, n, slots);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        if (slots[i])
            t_fill(slots[i], blk, seed0 + i);
    return kvt_put_commit_flags(ns, k, n, flags);
}

int t_get_chain(kvt_ns *ns, const kvt_key *k, size_t n, size_t blk, uint64_t seed0,
                void *const *bufs)
{
    int hits;

    for (size_t i = 0; i < n; i++)
        memset(bufs[i], 0x5a, blk);
    hits = kvt_get(ns, k, n, bufs);
    for (int i = 0; i < hits; i++) {
        long bad = t_check(bufs[i], blk, seed0 + (uint64_t)i);

        cr_assert_eq(bad, -1, "block %d of %zu: wrong byte at %ld", i, n, bad);
    }
    return hits;
}

int t_put_seeded(kvt_ns *ns, uint64_t key_seed, size_t n, size_t blk, uint64_t seed0,
                 unsigned flags)
{
    kvt_key k[KVT_BATCH_MAX];

    cr_assert_leq(n, KVT_BATCH_MAX);
    t_keys(k, n, key_seed);
    return t_put_chain(ns, k, n, blk, seed0, flags);
}

int t_get_seeded(kvt_ns *ns, uint64_t key_seed, size_t n, size_t blk, uint64_t seed0,
                 void *const *bufs)
{
    kvt_key k[KVT_BATCH_MAX];

    cr_assert_leq(n, KVT_BATCH_MAX);
    t_keys(k, n, key_seed);
    return t_get_chain(ns, k, n, blk, seed0, bufs);
}

struct tier_ns *t_tns(struct tier *t, uint32_t id, uint64_t block_bytes)
{
    struct tier_ns *ns = NULL;
    int rc = tier_ns_open(t, id, block_bytes, &ns);

    cr_assert_eq(rc, 0, "tier_ns_open(%u, %llu): %d", id, (unsigned long long)block_bytes, rc);
    return ns;
}

struct tier_ns *t_tns_of(struct tier *t, uint32_t id)
{
    struct tier_ns *ns = tier_ns_find(t, id);

    cr_assert(ns, "namespace %u is not open", id);
    return ns;
}

void t_store_settle(struct tier *t, struct tier_cold *c, struct tier_hot *h)
{
    struct tier_nvme *io = tier_cold_io(c);

    for (int guard = 0; guard < 1000; guard++) {
        tier_cold_flush(c);
        while (tier_nvme_sim_queued(io))
            tier_nvme_sim_complete(io, 0, 0);
        tier_poll(t, false);
        if (!tier_nvme_sim_queued(io) && !tier_cold_busy(c) && (!h || !tier_hot_inflight(h)))
            return;
    }
    cr_assert_fail("the simulated disk never went idle");
}

void t_store_close(struct tier *t, struct tier_cold *c, struct tier_hot *h, const char *dir)
{
    t_store_settle(t, c, h);
    tier_hot_close(h);
    tier_cold_close(c);
    tier_destroy(t);
    t_rmtree(dir);
}

struct kvt_model_desc t_model_desc(const char *name)
{
    struct kvt_model_desc d;
    char path[512], err[256];
    const char *src = getenv("KVT_TEST_SRC");

    snprintf(path, sizeof(path), "%s/data/configs/%s", src ? src : ".", name);
    cr_assert_eq(kvt_model_parse_file(path, &d, err, sizeof(err)), 0, "%s: %s", name, err);
    return d;
}

const char *const t_config_two =
    "[tenant.alice]\n"
    "uids = 0, 40001      ; root runs the test itself\n"
    "warm_bytes = 8M\n"
    "[tenant.bob]\n"
    "uids = 40002\n"
    "warm_bytes = 8M\n";

const char *t_config(const char *text)
{
    static char path[512];
    int fd = cmn_tmpfile("kvt-tenants", path, sizeof(path));

    cr_assert_geq(fd, 0, "a temp file for a config: %s", strerror(-fd));
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
    chmod(path, 0644);
    return path;
}

int t_as_user(uid_t uid, int (*fn)(const char *sock, void *arg), const char *sock, void *arg)
{
    pid_t pid = fork();

    cr_assert_geq(pid, 0);
    if (pid == 0) {
        if (setgroups(0, NULL) < 0 || setgid(uid) < 0 || setuid(uid) < 0)
            _exit(100);
        _exit(fn(sock, arg));
    }
    return t_wait(pid);
}

int t_put_get4(kvt_ns *ns, const kvt_key *k, uint8_t *buf, size_t blk, uint64_t seed0)
{
    const void *src[4];
    void *dst[4];
    int rc = 0;

    for (int i = 0; i < 4; i++) {
        t_fill(buf + i * blk, blk, seed0 + (uint64_t)i);
        src[i] = buf + i * blk;
        dst[i] = buf + i * blk;
    }
    if (kvt_put(ns, NULL, k, 4, src) != 4)
        rc = 1;
    memset(buf, 0, 4 * blk);
    if (!rc && kvt_get(ns, k, 4, dst) != 4)
        rc = 2;
    for (int i = 0; i < 4 && !rc; i++)
        if (t_check(buf + i * blk, blk, seed0 + (uint64_t)i) != -1)
            rc = 3;
    return rc;
}

int t_user_puts(const char *sock, void *arg)
{
    static uint8_t buf[4 * T_USER_BLK];
    kvt_key k[4];
    kvt_client *c;
    int rc;

    (void)arg;
    if ((rc = kvt_connect(sock, &c)) != 0)
        return rc == -EUSERS ? 9 : 10;
    t_keys(k, 4, 1);
    if ((rc = t_put_get4(t_ns(c, T_USER_BLK), k, buf, T_USER_BLK, 100)) != 0)
        return 10 + rc;
    kvt_close(c);
    return 0;
}

int t_tierd_exit(const char *dir, const char *const *extra, char *err, size_t cap)
{
    char bin[512], sock[300], data[300], supp[600];
    const char *argv[32];
    int pfd[2], left = getenv("KVT_TEST_VALGRIND") ? 60000 : 10000;
    size_t len = 0;
    pid_t pid;

    snprintf(sock, sizeof(sock), "%s/tierd.sock", dir);
    snprintf(data, sizeof(data), "%s/data", dir);
    tierd_argv(argv, bin, sizeof(bin), supp, sizeof(supp), sock, data, extra);
    cr_assert_eq(pipe(pfd), 0);
    pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, SIGKILL);
        dup2(pfd[1], 2);
        close(pfd[0]);
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    close(pfd[1]);
    /* until it closes stderr (it exited), or the bound: then it is killed */
    for (;;) {
        struct pollfd p = { .fd = pfd[0], .events = POLLIN };
        ssize_t r;

        if (poll(&p, 1, left > 100 ? 100 : left) == 0) {
            if ((left -= 100) > 0)
                continue;
            kill(pid, SIGKILL);
            t_wait(pid);
            err[len] = 0;
            close(pfd[0]);
            return 124;
        }
        r = read(pfd[0], err + len, cap - len - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            break;
        len += (size_t)r;
        if (len + 1 >= cap) {
            char drop[256];

            while (read(pfd[0], drop, sizeof(drop)) > 0)
                ;
            break;
        }
    }
    err[len] = 0;
    close(pfd[0]);
    return t_wait(pid);
}
