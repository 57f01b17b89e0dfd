/* SPDX-License-Identifier: MIT */
/*
 * tier_faults.c - injected I/O faults (KVTIER_FAULTS, tier_nvme_fault_set):
 * the grammar, each kind at the io_uring layer (failed and short reads,
 * writes and syncs), then what the layers above make of them: a failed or
 * short cold read is a counted miss, never wrong bytes; a failed write keeps
 * the block in warm (or drops it, counted); a failed sync fails its batch and
 * turns the cold tier read-only (sticky); tierd answers durable puts with
 * -EIO and keeps serving.
 *
 * Every test runs in both flavours. The injector exists only in KVT_FAULTS
 * builds (build-san/); in the release build each test asserts instead that
 * the switch is inert: KVTIER_FAULTS changes nothing and the API refuses.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvt_common.h"
#include "t.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_nvme.h"

/* ---- the io_uring layer ------------------------------------------------- */

#define SBLK (64u << 10) /* nvme-level test block */

struct logrec {
    int calls;
    char all[4096]; /* every message, one per line (truncated) */
};

static void on_log(void *ctx, const char *msg)
{
    struct logrec *lr = ctx;
    size_t at = strlen(lr->all);

    lr->calls++;
    snprintf(lr->all + at, sizeof(lr->all) - at, "%s\n", msg);
}

static char g_dir[128], g_path[192];

static void fx_fini(void)
{
    if (!g_dir[0])
        return;
    unlink(g_path);
    rmdir(g_dir);
}

static void fx_dir(void)
{
    t_tmpdir("kvt-faults", g_dir, sizeof(g_dir));
    snprintf(g_path, sizeof(g_path), "%s/cold.dat", g_dir);
}

/* Open g_path with KVTIER_FAULTS = spec (NULL: unset); returns the rc. */
static int try_open(const char *spec, struct logrec *lr, struct tier_nvme **n)
{
    struct tier_nvme_cfg cfg = { .path = g_path, .bytes = 64ull * SBLK, .qd = 32,
                                 .log = on_log, .log_ctx = lr };

    if (spec)
        setenv(TIER_NVME_FAULTS_ENV, spec, 1);
    else
        unsetenv(TIER_NVME_FAULTS_ENV);
    *n = NULL;
    return tier_nvme_open(&cfg, n);
}

static struct tier_nvme *open_plain(void)
{
    struct logrec lr = { 0 };
    struct tier_nvme *n;
    int rc = try_open(NULL, &lr, &n);

    cr_assert_eq(rc, 0, "tier_nvme_open: %s", strerror(-rc));
    return n;
}

/* Queue nb reads or writes of SBLK at blocks first.. (in order), drain. */
static void io_blocks(struct tier_nvme *n, bool wr, int first, int nb, uint8_t **bufs,
                      struct t_io *io)
{
    memset(io, 0, (size_t)nb * sizeof(*io));
    for (int i = 0; i < nb; i++) {
        uint64_t off = (uint64_t)(first + i) * SBLK;
        int rc = wr ? tier_nvme_write(n, off, bufs[i], SBLK, t_io_done, &io[i])
                    : tier_nvme_read(n, off, bufs[i], SBLK, t_io_done, &io[i]);

        cr_assert_eq(rc, 0, "queue %d: %s", i, strerror(-rc));
    }
    t_nvme_drain(n);
    for (int i = 0; i < nb; i++)
        cr_assert_eq(io[i].calls, 1, "request %d: callback ran %d times", i, io[i].calls);
}

static int64_t sync_res(struct tier_nvme *n)
{
    struct t_io io = { 0 };

    cr_assert_eq(tier_nvme_sync(n, t_io_done, &io), 0);
    t_nvme_drain(n);
    cr_assert_eq(io.calls, 1);
    return io.res;
}

/* Write nb blocks of payload seed+i at blocks first.., with no faults. */
static void seed_blocks(struct tier_nvme *n, int first, int nb, uint64_t seed)
{
    uint8_t *b[16];
    struct t_io io[16];

    for (int i = 0; i < nb; i++) {
        b[i] = t_abuf(SBLK);
        t_fill(b[i], SBLK, seed + (uint64_t)i);
    }
    io_blocks(n, true, first, nb, b, io);
    for (int i = 0; i < nb; i++) {
        cr_assert_eq(io[i].res, SBLK, "seeding write %d: %lld", i, (long long)io[i].res);
        free(b[i]);
    }
    cr_assert_eq(sync_res(n), 0);
}

static bool inj; /* the injector is compiled in (KVT_FAULTS) */

static void fx_init(void)
{
    inj = tier_nvme_faults_available();
    cr_log_info("fault injector %s", inj ? "present (KVT_FAULTS)" : "absent (release)");
}

Test(tier_faults, bad_specs_fail_open_with_einval_and_say_why, .init = fx_init, .fini = fx_fini)
{
    static const char *const bad[] = {
        "read", "read:", "reed:eio", "read:eio:", "read:eek", "read:eio:every=0",
        "read:eio:every=x", "read:eio:every=-1", "read:eio:every= 2", "read:eio:after=",
        "read:eio:p=0", "read:eio:p=1.5", "read:eio:p=", "read:eio:p=nan", "fsync:short",
        "read:eio:once:once", "read:eio,,write:eio", "read:eio,", ",read:eio",
        "read:eio:sometimes", "read:eio every=2", "READ:EIO",
    };
    static const char *const good[] = {
        "read:eio", "read:eio:every=3,write:short:after=10,fsync:eio:once",
        "read:short:p=0.5:seed=42", "write:enospc:after=0:every=1", "fsync:enospc:once",
        "read:eio:p=1", "write:eio:once:after=7:every=2:p=0.25:seed=0",
    };
    char many[1024] = "", huge[600];
    struct tier_nvme *n;
    struct stat st;

    fx_dir();
    for (int i = 0; i < 17; i++)
        strcat(many, i ? ",read:eio" : "read:eio"); /* one rule too many */
    memset(huge, 'x', sizeof(huge) - 1);
    huge[sizeof(huge) - 1] = '\0';
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]) + 2; i++) {
        const char *spec = i < sizeof(bad) / sizeof(bad[0]) ? bad[i]
                           : i == sizeof(bad) / sizeof(bad[0]) ? many : huge;
        struct logrec lr = { 0 };
        int rc = try_open(spec, &lr, &n);

        if (inj) {
            cr_assert_eq(rc, -EINVAL, "spec \"%.40s\": open gave %d, expected -EINVAL", spec, rc);
            cr_assert_null(n);
            cr_assert_not_null(strstr(lr.all, TIER_NVME_FAULTS_ENV),
                               "spec \"%.40s\": the log does not say what was wrong: %s", spec,
                               lr.all);
            cr_assert_neq(stat(g_path, &st), 0, "a refused open left its data file behind");
        } else {
            /* release: the variable is ignored (and the log says so) */
            cr_assert_eq(rc, 0, "release build, spec \"%.40s\": open gave %s", spec,
                         strerror(-rc));
            cr_assert_not_null(strstr(lr.all, "ignored"), "no line says it is ignored: %s",
                               lr.all);
            tier_nvme_close(n);
            unlink(g_path);
        }
    }
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        struct logrec lr = { 0 };
        int rc = try_open(good[i], &lr, &n);

        cr_assert_eq(rc, 0, "spec \"%s\": %s", good[i], strerror(-rc));
        cr_assert_not_null(strstr(lr.all, inj ? "fault injection on" : "ignored"),
                           "spec \"%s\": log %s", good[i], lr.all);
        tier_nvme_close(n);
    }
    /* unset and empty: no faults, nothing logged about them */
    for (int i = 0; i < 2; i++) {
        struct logrec lr = { 0 };

        cr_assert_eq(try_open(i ? "" : NULL, &lr, &n), 0);
        cr_assert_null(strstr(lr.all, TIER_NVME_FAULTS_ENV), "log: %s", lr.all);
        tier_nvme_close(n);
    }
    /* the API takes the same grammar */
    n = open_plain();
    cr_assert_eq(tier_nvme_fault_set(n, "read:eek"), inj ? -EINVAL : -EOPNOTSUPP);
    cr_assert_eq(tier_nvme_fault_set(n, "read:eio:every=2"), inj ? 0 : -EOPNOTSUPP);
    cr_assert_eq(tier_nvme_fault_set(n, NULL), inj ? 0 : -EOPNOTSUPP);
    tier_nvme_close(n);
}

Test(tier_faults, eio_and_enospc_follow_every_after_and_once, .init = fx_init, .fini = fx_fini)
{
    uint8_t *b[12];
    struct t_io io[12];
    struct tier_nvme *n;

    fx_dir();
    n = open_plain();
    seed_blocks(n, 0, 12, 100);
    /* reads: the 3rd, 6th, 9th, 12th fail; their buffers stay untouched */
    cr_assert_eq(tier_nvme_fault_set(n, "read:eio:every=3"), inj ? 0 : -EOPNOTSUPP);
    for (int i = 0; i < 12; i++)
        b[i] = t_abuf(SBLK);
    io_blocks(n, false, 0, 12, b, io);
    for (int i = 0; i < 12; i++) {
        bool fail = inj && (i + 1) % 3 == 0;

        cr_assert_eq(io[i].res, fail ? -EIO : (int64_t)SBLK, "read %d: got %lld", i + 1,
                     (long long)io[i].res);
        if (fail) {
            for (size_t j = 0; j < SBLK; j++)
                cr_assert_eq(b[i][j], 0xa5, "read %d failed but wrote its buffer", i + 1);
        } else {
            cr_assert_eq(t_check(b[i], SBLK, 100 + (uint64_t)i), -1, "read %d", i + 1);
        }
    }
    cr_assert_eq(tier_nvme_faults_injected(n), inj ? 4u : 0u);

    /* writes: only the 3rd fails (after=2, once); then every 2nd is ENOSPC */
    tier_nvme_fault_set(n, "write:eio:after=2:once");
    for (int i = 0; i < 5; i++)
        t_fill(b[i], SBLK, 200 + (uint64_t)i);
    io_blocks(n, true, 20, 5, b, io);
    for (int i = 0; i < 5; i++)
        cr_assert_eq(io[i].res, inj && i == 2 ? -EIO : (int64_t)SBLK, "write %d: %lld", i + 1,
                     (long long)io[i].res);
    tier_nvme_fault_set(n, "write:enospc:every=2");
    io_blocks(n, true, 30, 4, b, io);
    for (int i = 0; i < 4; i++)
        cr_assert_eq(io[i].res, inj && i % 2 ? -ENOSPC : (int64_t)SBLK, "write %d: %lld",
                     i + 1, (long long)io[i].res);

    /* syncs: the first fails, the next ones do not */
    tier_nvme_fault_set(n, "fsync:eio:once");
    cr_assert_eq(sync_res(n), inj ? -EIO : 0);
    cr_assert_eq(sync_res(n), 0);
    cr_assert_eq(sync_res(n), 0);
    /* cleared: all good again */
    tier_nvme_fault_set(n, NULL);
    io_blocks(n, false, 0, 12, b, io);
    for (int i = 0; i < 12; i++) {
        cr_assert_eq(io[i].res, SBLK);
        cr_assert_eq(t_check(b[i], SBLK, 100 + (uint64_t)i), -1, "read %d", i + 1);
    }
    cr_assert_eq(tier_nvme_faults_injected(n), inj ? 4u + 1 + 2 + 1 : 0u);
    for (int i = 0; i < 12; i++)
        free(b[i]);
    tier_nvme_close(n);
}

Test(tier_faults, short_transfers_are_finished_or_fail_without_progress, .init = fx_init,
     .fini = fx_fini)
{
    uint8_t *b[8], *src = t_abuf(SBLK), *dst = t_abuf(SBLK);
    struct t_io io[8];
    struct tier_nvme *n;

    fx_dir();
    n = open_plain();
    /* every 2nd submission short: the remainders go on, callers see nothing */
    tier_nvme_fault_set(n, "write:short:every=2,read:short:every=2");
    for (int i = 0; i < 8; i++) {
        b[i] = t_abuf(SBLK);
        t_fill(b[i], SBLK, 300 + (uint64_t)i);
    }
    io_blocks(n, true, 0, 8, b, io);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(io[i].res, SBLK, "write %d: %lld", i, (long long)io[i].res);
        memset(b[i], 0, SBLK);
    }
    cr_assert_eq(sync_res(n), 0);
    io_blocks(n, false, 0, 8, b, io);
    for (int i = 0; i < 8; i++) {
        cr_assert_eq(io[i].res, SBLK, "read %d: %lld", i, (long long)io[i].res);
        cr_assert_eq(t_check(b[i], SBLK, 300 + (uint64_t)i), -1, "block %d", i);
    }
    cr_assert(inj ? tier_nvme_faults_injected(n) >= 8 : tier_nvme_faults_injected(n) == 0,
              "injected %llu", (unsigned long long)tier_nvme_faults_injected(n));

    /* every submission short: 32, 16, 8 and 4 KiB land, then half of the
     * last page is nothing: -EIO, with exactly 60 KiB transferred */
    tier_nvme_fault_set(n, "read:short");
    io_blocks(n, false, 3, 1, &dst, io);
    cr_assert_eq(io[0].res, inj ? -EIO : (int64_t)SBLK, "read: %lld", (long long)io[0].res);
    t_fill(src, SBLK, 303);
    cr_assert_eq(memcmp(dst, src, inj ? SBLK - 4096 : SBLK), 0, "the pieces that landed");
    for (size_t j = SBLK - 4096; inj && j < SBLK; j++)
        cr_assert_eq(dst[j], 0xa5, "byte %zu was read although its piece failed", j);
    /* the same for a write: its last page never reaches the file */
    tier_nvme_fault_set(n, "write:short");
    t_fill(src, SBLK, 310);
    io_blocks(n, true, 10, 1, &src, io);
    cr_assert_eq(io[0].res, inj ? -EIO : (int64_t)SBLK, "write: %lld", (long long)io[0].res);
    tier_nvme_fault_set(n, NULL);
    memset(dst, 0xa5, SBLK);
    io_blocks(n, false, 10, 1, &dst, io);
    cr_assert_eq(io[0].res, SBLK);
    cr_assert_eq(memcmp(dst, src, SBLK - 4096), 0, "the pieces written");
    cr_assert_eq(memcmp(dst + SBLK - 4096, src + SBLK - 4096, 4096) != 0, inj,
                 "the last page %s written", inj ? "was" : "was not");
    for (int i = 0; i < 8; i++)
        free(b[i]);
    free(src);
    free(dst);
    tier_nvme_close(n);
}

/* The outcome of 200 reads of one page under spec, as a bit pattern. */
static void pattern(struct tier_nvme *n, const char *spec, uint8_t *out)
{
    uint8_t *b = t_abuf(4096);
    struct t_io io = { 0 };

    tier_nvme_fault_set(n, spec);
    for (int i = 0; i < 200; i++) {
        io = (struct t_io){ 0 };
        cr_assert_eq(tier_nvme_read(n, 0, b, 4096, t_io_done, &io), 0);
        t_nvme_drain(n);
        out[i] = io.res < 0;
    }
    free(b);
}

Test(tier_faults, a_probability_replays_with_its_seed, .init = fx_init, .fini = fx_fini)
{
    uint8_t a[200], b[200], c[200];
    struct tier_nvme *n;
    int hits = 0;

    fx_dir();
    n = open_plain();
    pattern(n, "read:eio:p=0.3:seed=7", a);
    pattern(n, "read:eio:p=0.3:seed=7", b);
    pattern(n, "read:eio:p=0.3:seed=8", c);
    for (int i = 0; i < 200; i++)
        hits += a[i];
    cr_assert_eq(memcmp(a, b, sizeof(a)), 0, "the same seed gave another sequence");
    if (inj) {
        cr_assert(hits >= 30 && hits <= 90, "p=0.3 failed %d of 200 reads", hits);
        cr_assert_neq(memcmp(a, c, sizeof(a)), 0, "seeds 7 and 8 gave the same sequence");
    } else {
        cr_assert_eq(hits, 0);
    }
    tier_nvme_close(n);
}

/* ---- the store above it (a copy of tier_movers.c's rig) ------------------ */

#define BLK (256u << 10)
#define N 100

struct rig {
    char dir[64];
    struct tier_cold *cold;
    struct tier *t;
    int ready, failed;         /* completions reported to the waiter */
    uint32_t failed_ids[1024]; /* ids whose move failed, in order */
    int nfailed_ids;
    struct logrec log;
    char why[256];
};

static void on_ready(void *ctx, void *waiter, uint32_t id, int rc)
{
    struct rig *r = ctx;

    cr_assert_eq(waiter, r, "ready for an unknown waiter");
    if (rc == 0) {
        r->ready++;
        return;
    }
    r->failed++;
    if (r->nfailed_ids < 1024)
        r->failed_ids[r->nfailed_ids++] = id;
}

/* Open the store over a cold tier opened with KVTIER_FAULTS = spec. */
static void rig_open(struct rig *r, const char *spec)
{
    struct tier_cold_cfg cc = { .dir = r->dir, .bytes = 64u << 20, .qd = 32, .batch = 8,
                                .log = on_log, .log_ctx = &r->log };
    struct tier_cfg tc = { .warm_bytes = 8u << 20, .high_wm = 0.75, .low_wm = 0.5,
                           .ready = on_ready, .ready_ctx = r };
    int rc;

    memset(r, 0, sizeof(*r));
    t_tmpdir("kvt-faults", r->dir, sizeof(r->dir));
    setenv(TIER_NVME_FAULTS_ENV, spec, 1);
    rc = tier_cold_open(&cc, &r->cold);
    cr_assert_eq(rc, 0, "cold open with %s=%s: %s", TIER_NVME_FAULTS_ENV, spec, strerror(-rc));
    unsetenv(TIER_NVME_FAULTS_ENV);
    tc.cold = r->cold;
    cr_assert_eq(tier_create(&tc, &r->t), 0);
}

static void rig_close(struct rig *r)
{
    tier_cold_close(r->cold); /* every callback lands while the store lives */
    tier_destroy(r->t);
    t_rmtree(r->dir);
}

static void check(struct rig *r)
{
    if (tier_check(r->t, r->why, sizeof(r->why)))
        cr_assert_fail("store inconsistent: %s", r->why);
}

static uint64_t seed_of(int c, int i)
{
    return (uint64_t)c * 1000 + (uint64_t)i;
}

static void chain_keys(struct tier_key *k, int c, int nb)
{
    t_keys((kvt_key *)k, (size_t)nb, 7000 + (uint64_t)c);
}

/* What tierd's loop does between requests, until the disk is idle
 * (bounded: failed demotions are tried again, but each turn ends). */
static void settle(struct rig *r)
{
    for (int turn = 0; turn < 10000; turn++) {
        tier_maintain(r->t);
        tier_cold_flush(r->cold);
        cr_assert_geq(tier_poll(r->t, tier_cold_busy(r->cold) > 0), 0);
        check(r);
        if (!tier_cold_busy(r->cold))
            return;
    }
    cr_assert_fail("the cold tier never went idle");
}

/* Put chain c of nb blocks (not durable); the mover runs after it. Returns
 * the number reserved (0 when warm has no room now). */
static int put_chain(struct rig *r, int c, int nb)
{
    struct tier_key k[16];
    uint32_t ids[16];
    uint64_t offs[16];
    int rc;

    chain_keys(k, c, nb);
    rc = tier_reserve(t_tns(r->t, 1, BLK), 1, NULL, k, (size_t)nb, ids, offs);
    if (rc == -ENOSPC)
        return 0;
    cr_assert_geq(rc, 0, "reserve: %s", strerror(-rc));
    for (int i = 0; i < nb; i++)
        if (offs[i] != UINT64_MAX)
            t_fill((uint8_t *)tier_pool_base(r->t) + offs[i], BLK, seed_of(c, i));
    tier_commit(t_tns(r->t, 1, BLK), 1, k, (size_t)nb);
    settle(r);
    return rc;
}

static bool failed_id(const struct rig *r, uint32_t id)
{
    for (int i = 0; i < r->nfailed_ids; i++)
        if (r->failed_ids[i] == id)
            return true;
    return false;
}

/* Get chain c as tierd does: lease the leading run, wait for its reads,
 * serve it up to the first failed one, and check every byte served.
 * Returns the blocks served. */
static int get_chain(struct rig *r, int c, int nb)
{
    struct tier_key k[16];
    uint32_t ids[16], pending;
    uint64_t offs[16];
    int hits, served = 0;

    chain_keys(k, c, nb);
    r->ready = r->failed = r->nfailed_ids = 0;
    hits = tier_get(&(struct tier_get_args){ .ns = t_tns(r->t, 1, BLK), .keys = k,
        .n = (size_t)nb, .ids = ids, .offs = offs, .waiter = r, .pending = &pending });
    cr_assert_geq(hits, 0);
    while (r->ready + r->failed < (int)pending)
        cr_assert_geq(tier_poll(r->t, true), 0);
    check(r);
    while (served < hits && !failed_id(r, ids[served])) {
        long bad;

        cr_assert(tier_ready(r->t, ids[served]), "chain %d block %d: served but not in warm",
                  c, served);
        bad = t_check((uint8_t *)tier_pool_base(r->t) + offs[served], BLK, seed_of(c, served));
        cr_assert_eq(bad, -1, "chain %d block %d: wrong byte at %ld", c, served, bad);
        served++;
    }
    tier_release(r->t, ids, (size_t)hits, false);
    check(r);
    return served;
}

/* 10 chains of 10 blocks: 25 MiB through an 8 MiB warm tier. */
static void put_all(struct rig *r)
{
    for (int c = 0; c < 10; c++)
        cr_assert_eq(put_chain(r, c, 10), 10, "chain %d", c);
}

static void stats(struct rig *r, struct tier_stats *st, struct tier_cold_stats *cs)
{
    tier_stats_get(r->t, st);
    tier_cold_stats_get(r->cold, cs);
}

Test(tier_faults, failed_cold_reads_are_misses_never_wrong_bytes, .init = fx_init)
{
    struct tier_stats st;
    struct tier_cold_stats cs;
    struct rig r;
    int first_try = 0;

    rig_open(&r, "read:eio:every=3");
    put_all(&r);
    stats(&r, &st, &cs);
    cr_assert_gt(st.demotions, 20, "too little went to disk: %llu",
                 (unsigned long long)st.demotions);
    /* a failed read is a miss for that get; the block stays on disk, so
     * asking again (the next reads succeed) finally serves all of it */
    for (int c = 0; c < 10; c++) {
        int got = get_chain(&r, c, 10), tries = 1;

        first_try += got == 10;
        while (got < 10 && tries++ < 12)
            got = get_chain(&r, c, 10);
        cr_assert_eq(got, 10, "chain %d: %d blocks after %d gets", c, got, tries);
    }
    stats(&r, &st, &cs);
    cr_assert_eq(st.checksum_errors, 0);
    cr_assert_eq(st.dropped, 0, "no block was lost");
    if (inj) {
        cr_assert_gt(st.io_errors, 0, "no I/O error was counted");
        cr_assert_eq(st.cold_errors, st.io_errors, "each failed read is a failed promotion");
        cr_assert_lt(first_try, 10, "every chain came back at once despite the faults");
    } else {
        cr_assert_eq(st.io_errors, 0);
        cr_assert_eq(first_try, 10);
    }
    cr_assert(!cs.failed, "failed reads must not fail the tier");
    rig_close(&r);
}

Test(tier_faults, short_transfers_are_invisible_to_the_store, .init = fx_init)
{
    struct tier_stats st;
    struct tier_cold_stats cs;
    struct rig r;

    rig_open(&r, "read:short:every=2,write:short:every=3");
    put_all(&r);
    for (int c = 0; c < 10; c++)
        cr_assert_eq(get_chain(&r, c, 10), 10, "chain %d", c);
    stats(&r, &st, &cs);
    cr_assert_gt(st.promotions, 20);
    cr_assert_eq(st.io_errors + st.checksum_errors + st.cold_errors + st.dropped, 0,
                 "io %llu checksum %llu cold %llu dropped %llu",
                 (unsigned long long)st.io_errors, (unsigned long long)st.checksum_errors,
                 (unsigned long long)st.cold_errors, (unsigned long long)st.dropped);
    rig_close(&r);
}

Test(tier_faults, reads_that_stay_short_are_misses, .init = fx_init)
{
    struct tier_stats st;
    struct tier_cold_stats cs;
    uint8_t tiers[10];
    struct tier_key k[10];
    struct rig r;

    /* each piece half as long as the last: no read ever completes */
    rig_open(&r, "read:short");
    put_all(&r);
    for (int c = 0; c < 10; c++) {
        int got = get_chain(&r, c, 10), lead;

        chain_keys(k, c, 10);
        lead = (int)tier_lookup(t_tns_of(r.t, 1), k, 10, tiers);
        cr_assert_eq(lead, 10, "chain %d: a failed read lost blocks (%d left)", c, lead);
        for (int i = 0; inj && i < got; i++)
            cr_assert_neq(tiers[i], TIER_L_COLD, "chain %d block %d served from cold", c, i);
        if (!inj)
            cr_assert_eq(got, 10);
        else if (tiers[0] == TIER_L_COLD)
            cr_assert_eq(got, 0, "chain %d: a cold block was served", c);
    }
    stats(&r, &st, &cs);
    cr_assert_eq(st.checksum_errors, 0, "half-read blocks were checksummed: they must not be");
    if (inj) {
        cr_assert_gt(st.io_errors, 0);
        cr_assert_eq(st.promotions, 0, "a read completed although every piece was short");
    } else {
        cr_assert_eq(st.io_errors, 0);
    }
    rig_close(&r);
}

Test(tier_faults, failed_writes_keep_blocks_in_warm_or_drop_them_counted, .init = fx_init)
{
    struct tier_stats st;
    struct tier_cold_stats cs;
    struct tier_key k[10];
    uint8_t tiers[10];
    struct rig r;
    int present = 0;

    rig_open(&r, "write:eio:every=2");
    put_all(&r);
    stats(&r, &st, &cs);
    if (inj) {
        cr_assert_gt(cs.io_errors, 0);
        cr_assert_geq(st.cold_errors, cs.io_errors, "each failed write fails its demotion");
        cr_assert_gt(st.demotions, 0, "every other write succeeds");
        cr_assert(!cs.failed, "a failed write must not fail the tier");
    } else {
        cr_assert_eq(st.cold_errors + cs.io_errors + st.dropped, 0);
    }
    /* whatever is still present is served with its own bytes */
    for (int c = 0; c < 10; c++) {
        int lead;

        chain_keys(k, c, 10);
        lead = (int)tier_lookup(t_tns_of(r.t, 1), k, 10, tiers);
        for (int i = 0; i < 10; i++)
            present += tiers[i] != TIER_L_NONE; /* a dropped parent may leave children */
        cr_assert_eq(get_chain(&r, c, 10), lead, "chain %d", c);
    }
    stats(&r, &st, &cs);
    cr_assert_eq(st.io_errors, cs.io_errors);
    cr_assert_eq((uint64_t)present + st.dropped, (uint64_t)N,
                 "present %d + dropped %llu: blocks vanished uncounted", present,
                 (unsigned long long)st.dropped);
    rig_close(&r);
}

/* Bug found by these tests: a demotion whose write failed put its block
 * back on the mover's list, and the next turn wrote it again at once, so a
 * disk that failed every write kept tierd at 100% CPU (16,000 failed writes
 * a second). The mover now drops such a block (counted) as it does one the
 * disk refuses outright. */
Test(tier_faults, a_disk_that_fails_every_write_costs_blocks_not_a_spinning_mover, .init = fx_init)
{
    struct tier_stats st;
    struct tier_cold_stats cs;
    uint64_t before;
    struct rig r;

    rig_open(&r, "write:eio");
    put_all(&r);
    stats(&r, &st, &cs);
    before = cs.io_errors;
    /* turns of an idle loop: nothing new to write, so nothing is written */
    for (int turn = 0; turn < 200; turn++) {
        tier_maintain(r.t);
        tier_cold_flush(r.cold);
        cr_assert_geq(tier_poll(r.t, false), 0);
    }
    settle(&r);
    stats(&r, &st, &cs);
    cr_assert_eq(cs.io_errors, before, "idle turns wrote %llu more failing blocks",
                 (unsigned long long)(cs.io_errors - before));
    if (inj) {
        cr_assert_gt(st.dropped, 0);
        cr_assert_leq(cs.io_errors, (uint64_t)N, "%llu failed writes for %d blocks",
                      (unsigned long long)cs.io_errors, N);
        cr_assert_eq(st.demotions, 0);
    } else {
        cr_assert_eq(cs.io_errors + st.dropped, 0);
    }
    rig_close(&r);
}

/* Commit chain c (nb blocks) durably; wait for every write. Returns the
 * store's rc; *failed gets the writes reported failed. */
static int commit_durable(struct rig *r, int c, int nb, int *failed)
{
    struct tier_key k[16];
    uint32_t ids[16], rids[16], pending;
    uint64_t offs[16];
    int rc;

    chain_keys(k, c, nb);
    cr_assert_eq(tier_reserve(t_tns(r->t, 1, BLK), 1, NULL, k, (size_t)nb, rids, offs), nb);
    for (int i = 0; i < nb; i++)
        t_fill((uint8_t *)tier_pool_base(r->t) + offs[i], BLK, seed_of(c, i));
    r->ready = r->failed = r->nfailed_ids = 0;
    rc = tier_commit_durable(t_tns(r->t, 1, BLK), 1, k, (size_t)nb, r, ids, &pending);
    while (r->ready + r->failed < (int)pending) {
        tier_cold_flush_idle(r->cold); /* as tierd: one sync once the writes landed */
        cr_assert_geq(tier_poll(r->t, true), 0);
    }
    check(r);
    *failed = r->failed;
    return rc;
}

Test(tier_faults, a_failed_write_fails_its_durable_commit_and_the_block_stays, .init = fx_init)
{
    struct tier_story story;
    struct tier_key k[4];
    struct rig r;
    int failed, rc;

    rig_open(&r, "write:eio:after=1:once");
    rc = commit_durable(&r, 0, 4, &failed);
    cr_assert_eq(rc, 4, "commit: %d", rc);
    cr_assert_eq(failed, inj ? 1 : 0, "writes reported failed: %d", failed);
    chain_keys(k, 0, 4);
    for (int i = 0; i < 4; i++) {
        tier_story_get(t_tns_of(r.t, 1), &k[i], &story);
        cr_assert(story.present && story.level == TIER_L_WARM, "block %d", i);
        cr_assert_eq(story.on_disk, !(inj && i == 1), "block %d on disk: %d", i,
                     story.on_disk);
    }
    cr_assert_eq(get_chain(&r, 0, 4), 4, "the block that failed to write is still served");
    /* a write is not sticky: the next durable commit works */
    cr_assert_eq(commit_durable(&r, 1, 4, &failed), 4);
    cr_assert_eq(failed, 0);
    rig_close(&r);
}

static void on_cold(void *ctx, int rc)
{
    *(int *)ctx = rc;
}

Test(tier_faults, a_failed_sync_fails_its_batch_and_the_tier_stays_read_only, .init = fx_init)
{
    struct tier_cold_stats cs;
    struct tier_stats st;
    struct tier_key k[4];
    uint8_t *b = t_abuf(BLK);
    struct rig r;
    int failed, rc, res;

    rig_open(&r, "fsync:eio:after=1:once");
    cr_assert_eq(commit_durable(&r, 0, 4, &failed), 4);
    cr_assert_eq(failed, 0, "the first sync is not faulted");
    /* the second sync fails: every write of its batch fails */
    rc = commit_durable(&r, 1, 4, &failed);
    cr_assert_eq(rc, 4);
    cr_assert_eq(failed, inj ? 4 : 0, "writes of the failed batch: %d failed", failed);
    tier_cold_stats_get(r.cold, &cs);
    cr_assert_eq(cs.failed, inj, "the cold tier %s failed", cs.failed ? "is" : "is not");
    /* sticky: what reached the disk is unknown, so no write is taken any
     * more, although the injector itself fires only once */
    rc = commit_durable(&r, 2, 4, &failed);
    cr_assert_eq(rc, inj ? -EIO : 4, "a durable commit after the failure: %d", rc);
    cr_assert_eq(failed, 0);
    chain_keys(k, 3, 1); /* a key of its own, straight to the cold tier */
    cr_assert_eq(tier_cold_put(r.cold, 1, &k[0], NULL, b, BLK, on_cold, &res),
                 inj ? -EIO : 0);
    settle(&r);
    /* reads go on: chain 0 is on disk and reads back right */
    chain_keys(k, 0, 4);
    for (int i = 0; i < 4; i++) {
        res = 1;
        cr_assert_eq(tier_cold_get(r.cold, 1, &k[i], b, BLK, NULL, on_cold, &res), 0);
        while (res == 1)
            cr_assert_geq(tier_cold_poll(r.cold, true), 0);
        cr_assert_eq(res, 0, "cold read of block %d after the failure: %d", i, res);
        cr_assert_eq(t_check(b, BLK, seed_of(0, i)), -1, "block %d", i);
    }
    /* and every committed block is still served from warm */
    for (int c = 0; c < 3; c++)
        cr_assert_eq(get_chain(&r, c, 4), 4, "chain %d", c);
    /* the mover cannot write any more: blocks leaving warm are dropped, counted */
    for (int c = 10; c < 20; c++)
        put_chain(&r, c, 10);
    stats(&r, &st, &cs);
    if (inj) {
        cr_assert_gt(st.dropped, 0, "blocks leaving warm after the failure: dropped");
        cr_assert_geq(cs.io_errors, 1);
    } else {
        cr_assert_eq(st.dropped + cs.io_errors, 0);
    }
    free(b);
    rig_close(&r);
}

/* Random puts and gets under random faults of every kind, tier_check after
 * each step, every served byte checked. The seed is fixed and printed. */
Test(tier_faults, random_faults_never_serve_wrong_bytes, .init = fx_init)
{
    const uint64_t seed = 20261201;
    uint64_t s = seed;
    struct tier_stats st;
    struct tier_cold_stats cs;
    struct rig r;
    int served = 0;

    cr_log_info("random_faults seed %llu", (unsigned long long)seed);
    rig_open(&r, "read:eio:p=0.15:seed=3,read:short:p=0.3:seed=4,write:eio:p=0.1:seed=5,"
                 "write:short:p=0.3:seed=6,fsync:eio:after=40:once");
    for (int step = 0; step < 300; step++) {
        int c;

        s = s * 6364136223846793005ull + 1442695040888963407ull;
        c = (int)((s >> 33) % 40);
        if ((s >> 20) % 3 == 0)
            put_chain(&r, c, 4);
        else
            served += get_chain(&r, c, 4);
    }
    stats(&r, &st, &cs);
    cr_log_info("served %d, demotions %llu, promotions %llu, io errors %llu, dropped %llu",
                served, (unsigned long long)st.demotions, (unsigned long long)st.promotions,
                (unsigned long long)st.io_errors, (unsigned long long)st.dropped);
    cr_assert_gt(served, 0);
    cr_assert_eq(st.checksum_errors, 0);
    cr_assert(inj ? st.io_errors > 0 : st.io_errors == 0, "io errors %llu (seed %llu)",
              (unsigned long long)st.io_errors, (unsigned long long)seed);
    rig_close(&r);
}

/* ---- through tierd --------------------------------------------------------- */

#define DBLK (1u << 20)
#define CHAIN 8

static uint8_t dbuf[CHAIN][DBLK];

static int d_put_chain(kvt_ns *ns, int c, unsigned flags)
{
    return t_put_seeded(ns, 9100 + (uint64_t)c, CHAIN, DBLK, seed_of(c, 0), flags);
}

/* Get chain c; every byte of every block served is checked. */
static int d_get_chain(kvt_ns *ns, int c)
{
    void *dst[CHAIN];
    int hits;

    for (int i = 0; i < CHAIN; i++)
        dst[i] = dbuf[i];
    hits = t_get_seeded(ns, 9100 + (uint64_t)c, CHAIN, DBLK, seed_of(c, 0), dst);
    cr_assert_geq(hits, 0, "get of chain %d: %s", c, kvt_strerror(hits));
    return hits;
}

Test(tier_faults, tierd_turns_read_faults_into_misses_and_keeps_serving, .init = fx_init)
{
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_stats st;
    int short_gets = 0;

    setenv(TIER_NVME_FAULTS_ENV, "read:eio:every=2", 1); /* inherited by tierd */
    t_tierd_start(&d, t_small_warm);
    c = t_connect(&d);
    ns = t_ns(c, DBLK);
    for (int ch = 0; ch < 3; ch++)
        cr_assert_eq(d_put_chain(ns, ch, KVT_COMMIT_DURABLE), CHAIN, "chain %d", ch);
    kvt_close(c);
    cr_assert_eq(t_tierd_kill(&d, SIGTERM), 0);
    t_tierd_restart(&d, t_small_warm); /* every block on disk only; faults still on */
    c = t_connect(&d);
    ns = t_ns(c, DBLK);
    for (int ch = 0; ch < 3; ch++) {
        int hits = d_get_chain(ns, ch), tries = 1;

        short_gets += hits < CHAIN;
        /* each get reads the rest again: every other read fails, so each
         * try serves more of the chain */
        while (hits < CHAIN && tries++ < 2 * CHAIN)
            hits = d_get_chain(ns, ch);
        cr_assert_eq(hits, CHAIN, "chain %d: %d blocks after %d gets", ch, hits, tries);
    }
    cr_assert_eq(kvt_stats_get(c, &st), 0, "tierd stopped answering");
    cr_assert_eq(st.checksum_errors, 0);
    if (inj) {
        cr_assert_eq(short_gets, 3, "a chain came back whole despite failed reads");
        cr_assert_gt(st.io_errors, 0, "stats show no I/O error");
    } else {
        cr_assert_eq(short_gets, 0);
        cr_assert_eq(st.io_errors, 0);
    }
    kvt_close(c);
    t_tierd_stop(&d);
}

Test(tier_faults, tierd_answers_durable_puts_with_eio_after_a_failed_sync, .init = fx_init)
{
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_stats st;
    int want = inj ? -EIO : CHAIN;
    /* room for every chain: nothing leaves warm (it would be dropped) */
    static const char *const args[] = { "--warm-bytes", "64M", "--cold-bytes", "64M", NULL };

    setenv(TIER_NVME_FAULTS_ENV, "fsync:eio:once", 1);
    t_tierd_start(&d, args);
    c = t_connect(&d);
    ns = t_ns(c, DBLK);
    cr_assert_eq(d_put_chain(ns, 0, KVT_COMMIT_DURABLE), want, "the first durable put");
    /* committed though not durable: served from warm */
    cr_assert_eq(d_get_chain(ns, 0), CHAIN);
    /* sticky: durable puts keep failing; plain ones work */
    cr_assert_eq(d_put_chain(ns, 1, KVT_COMMIT_DURABLE), want, "a later durable put");
    cr_assert_eq(d_put_chain(ns, 2, 0), CHAIN);
    for (int ch = 0; ch < 3; ch++)
        cr_assert_eq(d_get_chain(ns, ch), CHAIN, "chain %d", ch);
    cr_assert_eq(kvt_stats_get(c, &st), 0, "tierd stopped answering");
    cr_assert(inj ? st.io_errors >= 1 : st.io_errors == 0, "io errors %llu",
              (unsigned long long)st.io_errors);
    kvt_close(c);
    t_tierd_stop(&d); /* a clean stop although its flush to disk fails */
}

/* The index's sync fails after the batch's data sync and index commit: the
 * durable put is answered -EIO, never 0, and its records are taken back,
 * so that after a kill nothing it wrote is served as if it had been told. */
Test(tier_faults, tierd_answers_durable_puts_with_eio_after_a_failed_index_sync, .init = fx_init)
{
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    static const char *const args[] = { "--warm-bytes", "64M", "--cold-bytes", "64M", NULL };

    setenv(TIER_NVME_FAULTS_ENV, "isync:eio:once", 1);
    t_tierd_start(&d, args);
    c = t_connect(&d);
    ns = t_ns(c, DBLK);
    cr_assert_eq(d_put_chain(ns, 0, KVT_COMMIT_DURABLE), inj ? -EIO : CHAIN,
                 "a durable put whose index sync failed");
    cr_assert_eq(d_get_chain(ns, 0), CHAIN, "committed though not durable: served from warm");
    kvt_close(c);
    cr_assert_eq(t_tierd_kill(&d, SIGKILL), 128 + SIGKILL);
    unsetenv(TIER_NVME_FAULTS_ENV);
    t_tierd_restart(&d, args);
    c = t_connect(&d);
    ns = t_ns(c, DBLK);
    cr_assert_eq(d_get_chain(ns, 0), inj ? 0 : CHAIN, "after the kill, from disk");
    kvt_close(c);
    t_tierd_stop(&d);
}

Test(tier_faults, tierd_refuses_to_start_with_a_bad_spec, .init = fx_init)
{
    char bin[512], sock[400], data[400], errf[400], log[4096] = "";
    struct t_tierd d;
    FILE *f;
    pid_t p;
    int st;

    setenv(TIER_NVME_FAULTS_ENV, "read:sometimes", 1);
    if (!inj) {
        /* release: the variable is ignored, tierd starts and serves */
        kvt_client *c;
        kvt_stats s;

        t_tierd_start(&d, NULL);
        c = t_connect(&d);
        cr_assert_eq(kvt_stats_get(c, &s), 0);
        kvt_close(c);
        t_tierd_stop(&d);
        return;
    }
    t_tmpdir("kvt-faults", d.dir, sizeof(d.dir));
    snprintf(sock, sizeof(sock), "%s/s", d.dir);
    snprintf(data, sizeof(data), "%s/data", d.dir);
    snprintf(errf, sizeof(errf), "%s/stderr", d.dir);
    t_bin("tierd", bin, sizeof(bin));
    p = fork();
    cr_assert_geq(p, 0);
    if (p == 0) {
        int fd = open(errf, O_WRONLY | O_CREAT | O_TRUNC, 0600);

        dup2(fd, 2);
        execl(bin, "tierd", "--socket", sock, "--data", data, "--cold-bytes", "64M",
              (char *)NULL);
        _exit(127);
    }
    /* bounded: a tierd without the injector (KVT_TEST_BIN a release
     * build beside this sanitizer one) ignores the variable and serves */
    st = cmn_wait_ms(p, 30000);
    f = fopen(errf, "r");
    cr_assert_not_null(f);
    log[fread(log, 1, sizeof(log) - 1, f)] = '\0';
    fclose(f);
    t_rmtree(d.dir);
    cr_assert_neq(st, -ETIMEDOUT, "tierd with a bad %s still ran after 30 s: is %s a build "
                  "with the fault injector (build-san)?", TIER_NVME_FAULTS_ENV, bin);
    cr_assert_eq(st, 71, "tierd with a bad %s: exit %d, expected 71 (EX_OSERR)",
                 TIER_NVME_FAULTS_ENV, st);
    cr_assert_not_null(strstr(log, "unknown kind 'sometimes'"), "stderr: %s", log);
}
