/* SPDX-License-Identifier: MIT */
/*
 * tier_nvme_io.c - the cold tier's I/O layer against real files: round trips
 * through io_uring with O_DIRECT (/tmp, ext4) and the buffered fallback
 * (tmpfs, ramfs), request checks, -EBUSY at qd, the eventfd, short
 * transfers, durability across close/reopen, -ENOSPC at preallocation.
 *
 * No per-test .timeout: every wait here is bounded or is a bug, and make
 * test's --timeout covers each test. Criterion 2.4.1 (Debian 12) leaks 48
 * bytes in the runner, failing the LSan build, when a test with a shorter
 * .timeout starts while one with a longer .timeout runs (tier_invariants,
 * tier_cold use 120 and sort before this suite).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include "t.h"
#include "tier_nvme.h"

#define BLK (256u << 10) /* test block: 256 KiB */

struct logrec {
    int calls;       /* messages logged */
    int odirect;     /* of those, how many mention O_DIRECT */
    char last[512];  /* the latest one mentioning O_DIRECT */
};

static void on_log(void *ctx, const char *msg)
{
    struct logrec *lr = ctx;

    lr->calls++;
    if (strstr(msg, "O_DIRECT")) {
        lr->odirect++;
        snprintf(lr->last, sizeof(lr->last), "%s", msg);
    }
}

/* Per test (Criterion forks one process per test): a temp folder, the data
 * file in it, and whether a file system is mounted there. fx_fini runs even
 * after a failed assertion, so mounts and files never outlive the test. */
static char g_dir[128];
static char g_path[192];
static bool g_mounted;

static void fx_dir(const char *parent)
{
    snprintf(g_dir, sizeof(g_dir), "%s/kvt-nvme-XXXXXX", parent);
    cr_assert_not_null(mkdtemp(g_dir), "mkdtemp under %s: %s", parent, strerror(errno));
    snprintf(g_path, sizeof(g_path), "%s/cold.dat", g_dir);
}

static void fx_fini(void)
{
    if (!g_dir[0])
        return;
    unlink(g_path);
    if (g_mounted && umount2(g_dir, 0) < 0)
        umount2(g_dir, MNT_DETACH);
    rmdir(g_dir);
}

/* Mount a fresh file system on g_dir, or skip the test when we may not.
 * A skip ends the test process without running .fini: clean up first. */
static void fx_mount(const char *type, const char *opts)
{
    char why[256];

    if (geteuid() != 0)
        snprintf(why, sizeof(why), "needs root to mount a %s (running as uid %d)", type,
                 (int)geteuid());
    else if (mount(type, g_dir, type, 0, opts) < 0)
        snprintf(why, sizeof(why), "cannot mount %s on %s: %s (no CAP_SYS_ADMIN here?)",
                 type, g_dir, strerror(errno));
    else {
        g_mounted = true;
        return;
    }
    fx_fini();
    cr_skip("%s", why);
}

/* The O_DIRECT fallback was logged, once and alone. */
static void expect_one_odirect_line(const struct logrec *lr)
{
    cr_assert_eq(lr->calls, 1, "one log line expected, got %d", lr->calls);
    cr_assert_eq(lr->odirect, 1, "the log line should mention O_DIRECT");
}

static struct tier_nvme *open_nvme(uint64_t bytes, uint32_t qd, bool no_direct,
                                   struct logrec *lr)
{
    struct tier_nvme_cfg cfg = { .path = g_path, .bytes = bytes, .qd = qd,
                                 .no_direct = no_direct, .log = on_log, .log_ctx = lr };
    struct tier_nvme *n = NULL;
    int rc = tier_nvme_open(&cfg, &n);

    cr_assert_eq(rc, 0, "tier_nvme_open(%s, %llu bytes): %s", g_path,
                 (unsigned long long)bytes, strerror(-rc));
    return n;
}

/* fx_dir(parent), then open_nvme there. */
static struct tier_nvme *open_in(const char *parent, uint64_t bytes, uint32_t qd, bool no_direct,
                                 struct logrec *lr)
{
    fx_dir(parent);
    return open_nvme(bytes, qd, no_direct, lr);
}

/* Queue a read or write; while the table is full, submit and reap one
 * completion, as tierd would. Returns how many times it met -EBUSY. */
static int queue_io(struct tier_nvme *n, bool wr, uint64_t off, void *buf, uint64_t len,
                    struct t_io *io)
{
    int busy = 0, rc;

    for (;;) {
        rc = wr ? tier_nvme_write(n, off, buf, len, t_io_done, io)
                : tier_nvme_read(n, off, buf, len, t_io_done, io);
        if (rc != -EBUSY)
            break;
        busy++;
        cr_assert_gt(tier_nvme_inflight(n), 0, "-EBUSY with nothing in flight");
        cr_assert_eq(tier_nvme_submit(n), 0);
        rc = tier_nvme_reap(n, 1);
        cr_assert_geq(rc, 1, "reap(1) with a full table gave %d", rc);
    }
    cr_assert_eq(rc, 0, "%s at %llu: %s", wr ? "write" : "read", (unsigned long long)off,
                 strerror(-rc));
    return busy;
}

static void check_done(const struct t_io *io, int nio, int64_t want, const char *what)
{
    for (int i = 0; i < nio; i++) {
        cr_assert_eq(io[i].calls, 1, "%s %d: callback ran %d times, expected once", what, i,
                     io[i].calls);
        cr_assert_eq(io[i].res, want, "%s %d: callback got %lld, expected %lld", what, i,
                     (long long)io[i].res, (long long)want);
    }
}

static void sync_now(struct tier_nvme *n)
{
    struct t_io io = { 0 };

    cr_assert_eq(tier_nvme_sync(n, t_io_done, &io), 0);
    t_nvme_drain(n);
    check_done(&io, 1, 0, "sync");
}

/* Write nblk blocks of blk bytes (block i at slot (i * 37) % nblk, so
 * offsets are distinct and not in order), sync, read them back into fresh
 * buffers and compare. Returns how often the table was full. */
static int roundtrip(struct tier_nvme *n, int nblk, uint32_t blk, uint64_t seed)
{
    uint8_t **src = calloc((size_t)nblk, sizeof(*src));
    uint8_t **dst = calloc((size_t)nblk, sizeof(*dst));
    struct t_io *wio = calloc((size_t)nblk, sizeof(*wio));
    struct t_io *rio = calloc((size_t)nblk, sizeof(*rio));
    int busy = 0;

    cr_assert(src && dst && wio && rio);
    for (int i = 0; i < nblk; i++) {
        uint64_t off = (uint64_t)((i * 37) % nblk) * blk;

        src[i] = t_abuf(blk);
        t_fill(src[i], blk, seed + (uint64_t)i);
        busy += queue_io(n, true, off, src[i], blk, &wio[i]);
    }
    t_nvme_drain(n);
    check_done(wio, nblk, blk, "write");
    sync_now(n);
    for (int i = 0; i < nblk; i++) {
        uint64_t off = (uint64_t)((i * 37) % nblk) * blk;

        dst[i] = t_abuf(blk);
        busy += queue_io(n, false, off, dst[i], blk, &rio[i]);
    }
    t_nvme_drain(n);
    check_done(rio, nblk, blk, "read");
    for (int i = 0; i < nblk; i++) {
        long bad = t_check(dst[i], blk, seed + (uint64_t)i);

        cr_assert_eq(bad, -1, "block %d read back wrong from byte %ld", i, bad);
        free(src[i]);
        free(dst[i]);
    }
    free(src);
    free(dst);
    free(wio);
    free(rio);
    return busy;
}

Test(tier_nvme_io, roundtrip_64_blocks_at_qd_8_with_o_direct, .fini = fx_fini)
{
    struct logrec lr = { 0 };
    struct tier_nvme *n;
    int busy;

    n = open_in("/tmp", 64ull * BLK, 8, false, &lr);
    cr_assert(tier_nvme_direct(n), "O_DIRECT should work on /tmp (ext4); log: %s", lr.last);
    cr_assert_eq(lr.calls, 0, "nothing to log on ext4, got: %s", lr.last);
    cr_assert_eq(tier_nvme_bytes(n), 64ull * BLK);
    busy = roundtrip(n, 64, BLK, 1000);
    cr_assert_gt(busy, 0, "64 requests at qd 8 should have met -EBUSY");
    tier_nvme_close(n);
}

/* Linux >= 6.6 accepts O_DIRECT on tmpfs (served from the page cache);
 * older kernels refuse it with EINVAL. Either way the file works, and the
 * fallback, when taken, is logged once. The refusal itself is covered on
 * ramfs below, and the forced fallback by no_direct. */
Test(tier_nvme_io, tmpfs_works_with_or_without_o_direct, .fini = fx_fini)
{
    struct logrec lr = { 0 };
    struct tier_nvme *n;

    n = open_in("/dev/shm", 16ull * BLK, 8, false, &lr);
    if (tier_nvme_direct(n)) {
        cr_log_info("this kernel accepts O_DIRECT on tmpfs; no fallback to check here");
        cr_assert_eq(lr.calls, 0, "nothing to log, got: %s", lr.last);
    } else {
        expect_one_odirect_line(&lr);
    }
    roundtrip(n, 16, BLK, 2000);
    tier_nvme_close(n);
}

Test(tier_nvme_io, no_direct_on_tmpfs_uses_buffered_io_and_logs_once, .fini = fx_fini)
{
    struct logrec lr = { 0 };
    struct tier_nvme *n;

    n = open_in("/dev/shm", 16ull * BLK, 8, true, &lr);
    cr_assert_not(tier_nvme_direct(n));
    expect_one_odirect_line(&lr);
    roundtrip(n, 16, BLK, 3000);
    cr_assert_eq(lr.calls, 1, "I/O must not log");
    tier_nvme_close(n);
}

/* ramfs refuses O_DIRECT at open (EINVAL) on every kernel, and has no
 * fallocate: the file is used sparse, and both are logged. */
Test(tier_nvme_io, ramfs_refuses_o_direct_and_falls_back_to_buffered, .fini = fx_fini)
{
    struct logrec lr = { 0 };
    struct tier_nvme *n;

    fx_dir("/tmp");
    fx_mount("ramfs", "mode=0700");
    n = open_nvme(16ull * BLK, 8, false, &lr);
    cr_assert_not(tier_nvme_direct(n));
    cr_assert_eq(lr.odirect, 1, "one log line about O_DIRECT expected, got %d", lr.odirect);
    cr_assert(strstr(lr.last, "not supported") && strstr(lr.last, g_path),
              "the line should say O_DIRECT is not supported on the path: %s", lr.last);
    roundtrip(n, 16, BLK, 4000);
    tier_nvme_close(n);
}

Test(tier_nvme_io, bad_requests_are_einval_and_a_full_table_is_ebusy, .fini = fx_fini)
{
    const uint64_t size = 1u << 20;
    struct logrec lr = { 0 };
    struct t_io io[3] = { 0 };
    struct tier_nvme *n;
    uint8_t *buf = t_abuf(2 * 8192);

    n = open_in("/tmp", size, 2, false, &lr);
    cr_assert_eq(tier_nvme_write(n, 512, buf, 4096, t_io_done, io), -EINVAL, "misaligned offset");
    cr_assert_eq(tier_nvme_read(n, 0, buf, 4096 + 512, t_io_done, io), -EINVAL,
                 "misaligned length");
    cr_assert_eq(tier_nvme_write(n, 0, buf + 512, 4096, t_io_done, io), -EINVAL,
                 "misaligned buffer");
    cr_assert_eq(tier_nvme_read(n, 0, buf, 0, t_io_done, io), -EINVAL, "zero length");
    cr_assert_eq(tier_nvme_write(n, size - 4096, buf, 8192, t_io_done, io), -EINVAL,
                 "runs past the end");
    cr_assert_eq(tier_nvme_read(n, size, buf, 4096, t_io_done, io), -EINVAL, "starts at the end");
    cr_assert_eq(tier_nvme_read(n, UINT64_MAX - 4095, buf, 8192, t_io_done, io), -EINVAL,
                 "off + len wraps around");
    cr_assert_eq(tier_nvme_read(n, 4096, buf, UINT64_MAX - 4095, t_io_done, io), -EINVAL,
                 "huge length");
    cr_assert_eq(tier_nvme_inflight(n), 0, "refused requests must not take a slot");

    /* qd 2: two queued (not even submitted) fill the table */
    t_fill(buf, 8192, 5000);
    cr_assert_eq(tier_nvme_write(n, 0, buf, 4096, t_io_done, &io[0]), 0);
    cr_assert_eq(tier_nvme_write(n, size - 4096, buf + 4096, 4096, t_io_done, &io[1]), 0);
    cr_assert_eq(tier_nvme_inflight(n), 2);
    cr_assert_eq(tier_nvme_write(n, 8192, buf, 4096, t_io_done, &io[2]), -EBUSY);
    cr_assert_eq(tier_nvme_read(n, 8192, buf, 4096, t_io_done, &io[2]), -EBUSY);
    cr_assert_eq(tier_nvme_sync(n, t_io_done, &io[2]), -EBUSY);
    cr_assert_eq(tier_nvme_submit(n), 0);
    cr_assert_eq(tier_nvme_reap(n, 2), 2, "reap(2) should wait for both");
    check_done(io, 2, 4096, "write");
    cr_assert_eq(io[2].calls, 0, "a refused request must never call back");
    cr_assert_eq(tier_nvme_inflight(n), 0);
    cr_assert_eq(tier_nvme_reap(n, 0), 0, "nothing left to reap");
    tier_nvme_close(n);
    free(buf);
}

/* What was written before close (even requests never reaped: close waits
 * for them and runs their callbacks) is there after reopening; a reopen
 * with a smaller size keeps the larger file. */
Test(tier_nvme_io, data_survives_close_and_reopen, .fini = fx_fini)
{
    const uint64_t size = 16ull * BLK;
    struct logrec lr = { 0 };
    struct t_io wio[16] = { 0 }, rio[16] = { 0 };
    uint8_t *src[16], *dst[16];
    struct tier_nvme *n;
    struct stat st;

    n = open_in("/tmp", size, 32, false, &lr);
    for (int i = 0; i < 16; i++) {
        src[i] = t_abuf(BLK);
        t_fill(src[i], BLK, 6000 + (uint64_t)i);
        cr_assert_eq(tier_nvme_write(n, (uint64_t)i * BLK, src[i], BLK, t_io_done, &wio[i]), 0);
    }
    tier_nvme_close(n); /* neither submitted nor reaped */
    check_done(wio, 16, BLK, "write before close");
    cr_assert_eq(stat(g_path, &st), 0);
    cr_assert_eq(st.st_mode & 0777, 0600, "data file mode %o, expected 0600",
                 (unsigned)(st.st_mode & 0777));
    cr_assert_eq((uint64_t)st.st_size, size);

    n = open_nvme(size / 4, 8, false, &lr);
    cr_assert_eq(tier_nvme_bytes(n), size, "a larger existing file is kept whole");
    cr_assert_eq(stat(g_path, &st), 0);
    cr_assert_eq((uint64_t)st.st_size, size, "reopen must not truncate");
    for (int i = 0; i < 16; i++) {
        dst[i] = t_abuf(BLK);
        queue_io(n, false, (uint64_t)i * BLK, dst[i], BLK, &rio[i]);
    }
    t_nvme_drain(n);
    check_done(rio, 16, BLK, "read after reopen");
    for (int i = 0; i < 16; i++) {
        long bad = t_check(dst[i], BLK, 6000 + (uint64_t)i);

        cr_assert_eq(bad, -1, "block %d wrong after reopen from byte %ld", i, bad);
        free(src[i]);
        free(dst[i]);
    }
    tier_nvme_close(n);
}

Test(tier_nvme_io, eventfd_becomes_readable_and_reap_0_runs_the_callback, .fini = fx_fini)
{
    struct logrec lr = { 0 };
    struct t_io io = { 0 };
    struct tier_nvme *n;
    uint8_t *buf = t_abuf(BLK);
    struct pollfd p;

    n = open_in("/tmp", 4ull * BLK, 8, false, &lr);
    p = (struct pollfd){ .fd = tier_nvme_event_fd(n), .events = POLLIN };
    cr_assert_geq(p.fd, 0);
    cr_assert_eq(poll(&p, 1, 0), 0, "eventfd readable before any I/O");
    t_fill(buf, BLK, 7000);
    cr_assert_eq(tier_nvme_write(n, BLK, buf, BLK, t_io_done, &io), 0);
    cr_assert_eq(tier_nvme_submit(n), 0);
    cr_assert_eq(poll(&p, 1, 5000), 1, "eventfd not readable 5 s after a write");
    cr_assert(p.revents & POLLIN);
    cr_assert_eq(io.calls, 0, "callbacks run only from reap");
    cr_assert_eq(tier_nvme_reap(n, 0), 1);
    check_done(&io, 1, BLK, "write");
    cr_assert_eq(poll(&p, 1, 0), 0, "reap should drain the eventfd");
    tier_nvme_close(n);
    free(buf);
}

/* A callback that queues the next request (what tier_cold.c does: write,
 * then read back or sync) from inside reap. */
struct chain {
    struct tier_nvme *n;
    uint8_t *dst;
    struct t_io wr, rd;
    int rd_rc;   /* what queueing the read returned inside the callback */
};

static void on_write_then_read(void *ctx, int64_t res)
{
    struct chain *c = ctx;

    t_io_done(&c->wr, res);
    c->rd_rc = tier_nvme_read(c->n, 0, c->dst, BLK, t_io_done, &c->rd);
}

Test(tier_nvme_io, callback_can_queue_the_next_request, .fini = fx_fini)
{
    struct logrec lr = { 0 };
    struct chain c = { 0 };
    uint8_t *src = t_abuf(BLK);

    c.n = open_in("/tmp", 4ull * BLK, 1, false, &lr); /* qd 1: the read reuses the write's slot */
    c.dst = t_abuf(BLK);
    t_fill(src, BLK, 8000);
    cr_assert_eq(tier_nvme_write(c.n, 0, src, BLK, on_write_then_read, &c), 0);
    t_nvme_drain(c.n);
    check_done(&c.wr, 1, BLK, "write");
    cr_assert_eq(c.rd_rc, 0, "queueing from the callback failed: %s (slot not freed first?)",
                 strerror(-c.rd_rc));
    check_done(&c.rd, 1, BLK, "read queued from the callback");
    cr_assert_eq(t_check(c.dst, BLK, 8000), -1);
    tier_nvme_close(c.n);
    free(src);
    free(c.dst);
}

/* Short transfers: RLIMIT_FSIZE cuts a write that crosses it short (Linux
 * writes up to the limit and returns the count), which is the only way to
 * get one from a healthy disk. Raised again before reaping, the remainder
 * must go through and the callback see the full length. */
Test(tier_nvme_io, short_write_is_completed_by_reap, .fini = fx_fini)
{
    struct logrec lr = { 0 };
    struct t_io wio = { 0 }, rio = { 0 };
    uint8_t *src = t_abuf(BLK), *dst = t_abuf(BLK);
    struct rlimit old, lim;
    struct tier_nvme *n;
    struct pollfd p;

    signal(SIGXFSZ, SIG_IGN);
    n = open_in("/tmp", 4ull * BLK, 8, false, &lr);
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &old), 0);
    lim = (struct rlimit){ .rlim_cur = BLK + 64 * 1024, .rlim_max = old.rlim_max };
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    t_fill(src, BLK, 9000);
    cr_assert_eq(tier_nvme_write(n, BLK, src, BLK, t_io_done, &wio), 0);
    cr_assert_eq(tier_nvme_submit(n), 0);
    p = (struct pollfd){ .fd = tier_nvme_event_fd(n), .events = POLLIN };
    cr_assert_eq(poll(&p, 1, 5000), 1, "no completion within 5 s");
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &old), 0);
    t_nvme_drain(n);
    check_done(&wio, 1, BLK, "write cut short by RLIMIT_FSIZE");
    cr_assert_eq(tier_nvme_read(n, BLK, dst, BLK, t_io_done, &rio), 0);
    t_nvme_drain(n);
    check_done(&rio, 1, BLK, "read");
    cr_assert_eq(t_check(dst, BLK, 9000), -1, "the remainder was not written");
    tier_nvme_close(n);
    free(src);
    free(dst);
}

/* The same with the limit left in place: the remainder fails, and the
 * callback gets that error, not the short count. */
Test(tier_nvme_io, error_after_a_short_write_reaches_the_callback, .fini = fx_fini)
{
    struct logrec lr = { 0 };
    struct t_io wio = { 0 };
    uint8_t *src = t_abuf(BLK);
    struct rlimit lim;
    struct tier_nvme *n;

    signal(SIGXFSZ, SIG_IGN);
    n = open_in("/tmp", 4ull * BLK, 8, false, &lr);
    cr_assert_eq(getrlimit(RLIMIT_FSIZE, &lim), 0);
    lim.rlim_cur = BLK + 64 * 1024;
    cr_assert_eq(setrlimit(RLIMIT_FSIZE, &lim), 0);
    t_fill(src, BLK, 9500);
    cr_assert_eq(tier_nvme_write(n, BLK, src, BLK, t_io_done, &wio), 0);
    t_nvme_drain(n);
    check_done(&wio, 1, -EFBIG, "write past RLIMIT_FSIZE");
    tier_nvme_close(n);
    free(src);
}

static uint64_t free_bytes(const char *dir)
{
    struct statvfs sv;

    cr_assert_eq(statvfs(dir, &sv), 0);
    return (uint64_t)sv.f_bfree * sv.f_frsize;
}

static int count_entries(const char *dir)
{
    DIR *d = opendir(dir);
    struct dirent *e;
    int cnt = 0;

    cr_assert_not_null(d);
    while ((e = readdir(d)))
        if (strcmp(e->d_name, ".") && strcmp(e->d_name, ".."))
            cnt++;
    closedir(d);
    return cnt;
}

Test(tier_nvme_io, preallocation_over_free_space_is_enospc_and_leaves_nothing, .fini = fx_fini)
{
    struct tier_nvme_cfg cfg = { .bytes = 64u << 20, .qd = 8 };
    struct tier_nvme *n = NULL;
    uint8_t old[8192], back[8192];
    uint64_t before;
    struct stat st;
    int fd, rc;

    fx_dir("/tmp");
    fx_mount("tmpfs", "size=16m,mode=0700");
    cfg.path = g_path;
    before = free_bytes(g_dir);

    /* a new file: -ENOSPC, and no file left */
    rc = tier_nvme_open(&cfg, &n);
    cr_assert_eq(rc, -ENOSPC, "open of 64 MiB on a 16 MiB tmpfs gave %d (%s)", rc,
                 strerror(-rc));
    cr_assert_null(n);
    cr_assert_eq(count_entries(g_dir), 0, "a file was left behind");
    cr_assert_eq(free_bytes(g_dir), before, "space still taken after -ENOSPC");

    /* an existing file: -ENOSPC, and it keeps its size and bytes */
    t_fill(old, sizeof(old), 10000);
    fd = open(g_path, O_RDWR | O_CREAT | O_CLOEXEC, 0600);
    cr_assert_geq(fd, 0);
    cr_assert_eq(write(fd, old, sizeof(old)), (ssize_t)sizeof(old));
    before = free_bytes(g_dir);
    rc = tier_nvme_open(&cfg, &n);
    cr_assert_eq(rc, -ENOSPC, "open over an existing file gave %d (%s)", rc, strerror(-rc));
    cr_assert_eq(fstat(fd, &st), 0);
    cr_assert_eq(st.st_size, (off_t)sizeof(old), "existing file resized to %lld",
                 (long long)st.st_size);
    cr_assert_eq(pread(fd, back, sizeof(back), 0), (ssize_t)sizeof(back));
    cr_assert_eq(memcmp(old, back, sizeof(old)), 0, "existing file's bytes changed");
    cr_assert_eq(free_bytes(g_dir), before, "space still taken after -ENOSPC");
    close(fd);

    /* and a size that fits still opens there */
    cfg.bytes = 8u << 20;
    cr_assert_eq(tier_nvme_open(&cfg, &n), 0);
    cr_assert_eq(tier_nvme_bytes(n), 8u << 20);
    tier_nvme_close(n);
}
