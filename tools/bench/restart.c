/* SPDX-License-Identifier: MIT */
/*
 * restart.c - figure 8: tierd's start-up over a cold index of 1 M blocks.
 */
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "bench.h"
#include "tier.h"
#include "tier_cold.h"
#include "idx_cold.h"

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
    uint64_t seed = 0x7265737461ull, t0 = cmn_now_ns();
    uint8_t *pages = NULL;
    int r;

    if (mkdir(dir, 0700) < 0 && errno != EEXIST)
        return -errno;
    if (posix_memalign((void **)&pages, 4096, RS_PAGES * 4096) != 0)
        return -ENOMEM;
    for (size_t i = 0; i < RS_PAGES * 4096 / 8; i++) {
        uint64_t v = bench_rng(&seed);
        memcpy(pages + i * 8, &v, 8);
    }
    if ((r = tier_cold_open(&cfg, &tc)) < 0) {
        printf("# tier_cold_open %s: %s\n", dir, strerror(-r));
        goto out;
    }
    for (size_t i = 0; i < *n; i++) {
        for (size_t j = 0; j < TIER_KEY_BYTES; j += 8) {
            uint64_t v = bench_rng(&seed);
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
            double el = (double)(cmn_now_ns() - t0) / 1e9, proj = el * (double)*n / 100000;
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
    *secs = (double)(cmn_now_ns() - t0) / 1e9;
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

void bench_restart(void)
{
    const char *name = "cold_restart_1M_blocks_s";
    char dir[PATH_MAX], mdb[PATH_MAX + 32], cold_sz[32];
    const char *extra[] = { "--cold-bytes", cold_sz, "--no-flush", NULL };
    size_t n = bench_opt.restart_blocks;
    uint64_t file_bytes = (uint64_t)n * 4096 + 64 * MIB;
    const char *what = "";
    struct bench_tierd d = { 0 };
    struct stat sb;
    double build_s = 0, ready[3];
    int r;

    printf("# --- %s: tierd start-up (fork until kvt_connect succeeds) on a data folder whose "
           "cold index holds %zu blocks\n", name, n);
    fflush(stdout);
    snprintf(dir, sizeof(dir), "%s/restart.data", bench_tmpdir);
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
        if ((r = bench_tierd_start_ex(&d, "restart", "256M", true, extra, 120)) < 0)
            goto out_fail;
        ready[i] = d.ready_s;
        bench_log_line(d.log, "cold tier");
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
        bench_tierd_stop(&d);
    }
    printf("# start-up: %.2f s with the index out of the page cache, %.2f s and %.2f s with "
           "it cached (--warm-bytes 256M --no-mlock: the pool costs little); the figure is "
           "the first\n", ready[0], ready[1], ready[2]);
    if (n != bench_opt.restart_blocks)
        printf("# NOTE: measured with %zu blocks, not %zu (the build would have taken over a "
               "minute); nothing is scaled\n", n, bench_opt.restart_blocks);
    else if (n != 1000000)
        printf("# NOTE: measured with %zu blocks (--restart-blocks), not 1000000; nothing is "
               "scaled\n", n);
    bench_report(name, ready[0], "%.2f", "s", "<=", "2");
    goto out;

out_fail:
    bench_fail(name, what, r);
out:
    bench_tierd_stop(&d);
    cmn_rmtree(dir);
}
