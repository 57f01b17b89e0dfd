/* SPDX-License-Identifier: MIT */
/*
 * tier_cold_pipeline.c - the cold tier's pipelined commits, step by step on
 * the simulated disk (tier_nvme.h): a put is told durable only once its
 * bytes were synced and its index transaction too (its own index sync, or
 * the next batch's commit); a failed index sync fails its batch and leaves
 * no record behind; a crash before the data sync leaves no record, and
 * every record a crash leaves reads back with the bytes that were put; a
 * sync keeps its slots in a disk queue that reads fill.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"
#include "tier_cold.h"
#include "tier_nvme.h"

#define BLK (16u << 10)
#define BATCH 4

struct fx {
    char dir[64];
    struct tier_cold *c;
    struct tier_nvme *io;
    void *buf[2 * BATCH];
    int res[2 * BATCH]; /* 1: not told yet */
};

static void open_sim(struct fx *f)
{
    struct tier_cold_cfg cfg = { .dir = f->dir, .bytes = 4u << 20, .qd = 16, .batch = BATCH,
                                 .sim = true };
    int rc = tier_cold_open(&cfg, &f->c);

    cr_assert_eq(rc, 0, "tier_cold_open(%s): %s", f->dir, strerror(-rc));
    f->io = tier_cold_io(f->c);
}

static void fx_open(struct fx *f)
{
    memset(f, 0, sizeof(*f));
    t_tmpdir("kvt-pipe", f->dir, sizeof(f->dir));
    for (int i = 0; i < 2 * BATCH; i++) {
        cr_assert_eq(posix_memalign(&f->buf[i], 4096, BLK), 0);
        t_fill(f->buf[i], BLK, 700 + (uint64_t)i);
        f->res[i] = 1;
    }
    open_sim(f);
}

static void fx_close(struct fx *f)
{
    tier_cold_close(f->c);
    for (int i = 0; i < 2 * BATCH; i++)
        free(f->buf[i]);
    t_rmtree(f->dir);
}

static void told(void *ctx, int rc)
{
    *(int *)ctx = rc;
}

static struct tier_key key_of(int i)
{
    struct tier_key k;

    t_keys((kvt_key *)&k, 1, 7700 + (uint64_t)i);
    return k;
}

/* Queue the puts of blocks [first, first + BATCH). */
static void put_batch(struct fx *f, int first)
{
    for (int i = first; i < first + BATCH; i++) {
        struct tier_key k = key_of(i);

        cr_assert_eq(tier_cold_put(f->c, 1, &k, NULL, f->buf[i], BLK, told, &f->res[i]), 0);
    }
}

/* Complete the k-th queued request of the simulated disk (err 0: it does
 * its work), then run the callbacks that brings. */
static void step(struct fx *f, unsigned k, int err)
{
    cr_assert_eq(tier_nvme_sim_complete(f->io, k, err), 0, "no request %u queued", k);
    cr_assert_geq(tier_cold_poll(f->c, false), 0);
}

/* Expect blocks [first, first + BATCH) told rc (1: not told yet). */
static void expect_told(const struct fx *f, int first, int rc, const char *when)
{
    for (int i = first; i < first + BATCH; i++)
        cr_assert_eq(f->res[i], rc, "%s: block %d told %d, expected %d", when, i, f->res[i], rc);
}

/* Write batch `first` and sync its data: from k_first on, the queue holds
 * its BATCH writes, and then its data sync. Its index transaction commits
 * when the sync lands. */
static void write_and_sync(struct fx *f, int first, unsigned k_first)
{
    put_batch(f, first);
    cr_assert_eq(tier_nvme_sim_queued(f->io), k_first + BATCH);
    for (int i = 0; i < BATCH; i++)
        step(f, k_first, 0);
    expect_told(f, first, 1, "written, not synced");
    cr_assert_eq(tier_nvme_sim_queued(f->io), k_first + 1, "the batch's data sync is queued");
    step(f, k_first, 0); /* the data sync: the index commits */
}

Test(tier_cold_pipeline, an_ack_waits_for_the_index_sync_after_the_data_sync)
{
    struct fx f;
    struct tier_key k = key_of(0);

    fx_open(&f);
    write_and_sync(&f, 0, 0);
    /* indexed, not yet durable: its sync of the index is queued, nobody told */
    cr_assert(tier_cold_has(f.c, 1, &k), "the record is committed once the data is synced");
    expect_told(&f, 0, 1, "indexed, the index not synced");
    cr_assert_eq(tier_nvme_sim_queued(f.io), 1, "the index's sync is queued");
    cr_assert_eq(tier_cold_busy(f.c), BATCH, "puts not told are work in flight");
    step(&f, 0, 0);
    expect_told(&f, 0, 0, "after the index sync");
    cr_assert_eq(tier_cold_busy(f.c), 0);
    fx_close(&f);
}

Test(tier_cold_pipeline, the_next_batchs_commit_makes_the_last_one_durable)
{
    struct tier_cold_stats st;
    struct fx f;

    fx_open(&f);
    write_and_sync(&f, 0, 0); /* batch A indexed; queue: A's index sync */
    /* batch B written and synced while A's index sync waits: B's commit
     * syncs the index's file first, which makes A durable */
    write_and_sync(&f, BATCH, 1);
    expect_told(&f, 0, 0, "A, after B's commit");
    expect_told(&f, BATCH, 1, "B, its own transaction not synced");
    cr_assert_eq(tier_nvme_sim_queued(f.io), 1, "only A's index sync is queued");
    step(&f, 0, 0); /* A's index sync: queued before B's commit, it vouches for A only */
    expect_told(&f, BATCH, 1, "B, after an index sync queued before its commit");
    cr_assert_eq(tier_nvme_sim_queued(f.io), 1, "B's index sync is queued");
    step(&f, 0, 0);
    expect_told(&f, BATCH, 0, "B, after its index sync");
    tier_cold_stats_get(f.c, &st);
    cr_assert_eq(st.commits, 2);
    cr_assert_eq(st.blocks, 2 * BATCH);
    cr_assert(!st.failed);
    fx_close(&f);
}

Test(tier_cold_pipeline, a_failed_index_sync_fails_its_batch_and_leaves_no_record)
{
    struct tier_cold_stats st;
    struct fx f;
    int res = 1;
    struct tier_key k = key_of(0);

    fx_open(&f);
    write_and_sync(&f, 0, 0);
    cr_assert(tier_cold_has(f.c, 1, &k));
    step(&f, 0, -EIO); /* the index's sync fails: what it holds on disk is unknown */
    expect_told(&f, 0, -EIO, "after a failed index sync");
    for (int i = 0; i < BATCH; i++) {
        struct tier_key ki = key_of(i);

        cr_assert(!tier_cold_has(f.c, 1, &ki), "block %d failed, yet its record stays", i);
    }
    tier_cold_stats_get(f.c, &st);
    cr_assert(st.failed, "a failed sync makes the tier read-only");
    cr_assert_eq(st.blocks, 0);
    cr_assert_eq(tier_cold_put(f.c, 1, &k, NULL, f.buf[0], BLK, told, &res), -EIO);
    tier_cold_close(f.c);
    /* a restart finds none of them either */
    open_sim(&f);
    tier_cold_stats_get(f.c, &st);
    cr_assert_eq(st.blocks, 0, "records after the restart: %llu", (unsigned long long)st.blocks);
    fx_close(&f);
}

/* A failed index sync of puts that replace durable copies: the records go
 * (unknown on disk), and so does the space of both copies; it used to
 * keep the old copies' space with no record pointing at it. */
Test(tier_cold_pipeline, a_failed_index_sync_of_replacements_frees_both_copies)
{
    struct tier_cold_stats st;
    struct fx f;

    fx_open(&f);
    write_and_sync(&f, 0, 0);
    step(&f, 0, 0); /* its index sync: durable */
    expect_told(&f, 0, 0, "the first copies");
    for (int i = 0; i < BATCH; i++) { /* the same keys again, other bytes */
        struct tier_key k = key_of(i);

        cr_assert_eq(tier_cold_put(f.c, 1, &k, NULL, f.buf[BATCH + i], BLK, told,
                                   &f.res[BATCH + i]), 0);
    }
    for (int i = 0; i < BATCH + 1; i++)
        step(&f, 0, 0); /* the writes, then the data sync: the replacements commit */
    step(&f, 0, -EIO);  /* their index sync fails */
    expect_told(&f, BATCH, -EIO, "the replacements");
    tier_cold_stats_get(f.c, &st);
    cr_assert_eq(st.blocks, 0);
    cr_assert_eq(st.bytes_used, 0, "%llu bytes held with no record",
                 (unsigned long long)st.bytes_used);
    fx_close(&f);
}

/* Batch A written and its data sync queued, then batch B written while
 * that sync runs; A's sync lands: B's data sync is queued before A's index
 * commit (the two overlap), then A's index sync. Queue: [B's data sync,
 * A's index sync]; nobody told. */
static void overlap(struct fx *f)
{
    put_batch(f, 0);
    for (int i = 0; i < BATCH; i++)
        step(f, 0, 0);
    cr_assert_eq(tier_nvme_sim_queued(f->io), 1, "A's data sync is queued");
    put_batch(f, BATCH);
    for (int i = 0; i < BATCH; i++)
        step(f, 1, 0); /* B's writes land behind A's sync: B waits for the next */
    step(f, 0, 0);     /* A's data sync */
    cr_assert_eq(tier_nvme_sim_queued(f->io), 2, "B's data sync and A's index sync");
    expect_told(f, 0, 1, "A, indexed, its index not synced");
    expect_told(f, BATCH, 1, "B, written, its data sync queued");
    for (int i = 0; i < 2 * BATCH; i++) {
        struct tier_key k = key_of(i);

        cr_assert_eq(tier_cold_has(f->c, 1, &k), i < BATCH,
                     "block %d: a record only once its data is synced", i);
    }
}

/* The next group's data sync runs beside this group's index commit and
 * sync; each ack waits for its own syncs, and a failed one fails every
 * put it covers, none told durable before. */
Test(tier_cold_pipeline, a_data_sync_beside_an_index_commit_acks_nothing_early)
{
    struct tier_cold_stats st;
    struct fx f;

    fx_open(&f);
    overlap(&f);
    step(&f, 1, 0); /* A's index sync */
    expect_told(&f, 0, 0, "A, after its index sync");
    expect_told(&f, BATCH, 1, "B, its data sync still queued");
    step(&f, 0, -EIO); /* B's data sync fails */
    expect_told(&f, BATCH, -EIO, "B, after its failed data sync");
    for (int i = BATCH; i < 2 * BATCH; i++) {
        struct tier_key k = key_of(i);

        cr_assert(!tier_cold_has(f.c, 1, &k), "block %d indexed after a failed data sync", i);
    }
    tier_cold_stats_get(f.c, &st);
    cr_assert(st.failed);
    cr_assert_eq(st.blocks, BATCH, "A's records stay: their bytes and index were synced");
    fx_close(&f);
}

Test(tier_cold_pipeline, a_failed_index_sync_fails_the_batch_whose_data_sync_ran_beside_it)
{
    struct fx f;

    fx_open(&f);
    overlap(&f);
    step(&f, 1, -EIO); /* A's index sync fails: the tier turns read-only */
    expect_told(&f, 0, -EIO, "A, after its failed index sync");
    expect_told(&f, BATCH, 1, "B, its data sync still queued");
    step(&f, 0, 0); /* B's data sync lands, after the failure: never vouched for */
    expect_told(&f, BATCH, -EIO, "B, synced after the tier failed");
    for (int i = 0; i < 2 * BATCH; i++) {
        struct tier_key k = key_of(i);

        cr_assert(!tier_cold_has(f.c, 1, &k), "block %d failed, yet its record stays", i);
    }
    cr_assert_eq(tier_nvme_sim_queued(f.io), 0);
    fx_close(&f);
}

/* B's data sync lands before A's index sync: B's commit syncs the index
 * first, which makes A durable; B waits for an index sync of its own (A's,
 * queued before B's commit, vouches for A only). */
Test(tier_cold_pipeline, the_overlapped_batch_waits_for_an_index_sync_after_its_commit)
{
    struct fx f;

    fx_open(&f);
    overlap(&f);
    step(&f, 0, 0); /* B's data sync: B indexed */
    for (int i = BATCH; i < 2 * BATCH; i++) {
        struct tier_key k = key_of(i);

        cr_assert(tier_cold_has(f.c, 1, &k), "block %d: B's data sync was not queued first, "
                                             "beside A's index commit", i);
    }
    expect_told(&f, 0, 0, "A, after B's commit");
    expect_told(&f, BATCH, 1, "B, its transaction not synced");
    cr_assert_eq(tier_nvme_sim_queued(f.io), 1, "A's index sync");
    step(&f, 0, 0);
    expect_told(&f, BATCH, 1, "B, after an index sync queued before its commit");
    cr_assert_eq(tier_nvme_sim_queued(f.io), 1, "B's index sync is queued");
    step(&f, 0, -EIO); /* and fails */
    expect_told(&f, BATCH, -EIO, "B, after its failed index sync");
    expect_told(&f, 0, 0, "A stays acknowledged");
    fx_close(&f);
}

/* Every record of the index read back: its bytes must be block i's. */
static void expect_records_right(struct fx *f, int n, int *found)
{
    void *rd = NULL;

    cr_assert_eq(posix_memalign(&rd, 4096, BLK), 0);
    *found = 0;
    for (int i = 0; i < n; i++) {
        struct tier_key k = key_of(i);
        int res = 1, rc;

        if (!tier_cold_has(f->c, 1, &k))
            continue;
        (*found)++;
        rc = tier_cold_get(f->c, 1, &k, rd, BLK, NULL, told, &res);
        cr_assert_eq(rc, 0, "get of block %d: %s", i, strerror(-rc));
        while (res == 1)
            cr_assert_geq(tier_cold_poll(f->c, true), 0);
        cr_assert_eq(res, 0, "block %d's record points at bytes that were not written (%d)", i,
                     res);
        cr_assert_eq(t_check(rd, BLK, 700 + (uint64_t)i), -1, "block %d read back wrong", i);
    }
    free(rd);
}

Test(tier_cold_pipeline, a_crash_between_the_data_write_and_its_sync_leaves_no_record)
{
    struct fx f;
    int found;

    fx_open(&f);
    put_batch(&f, 0);
    put_batch(&f, BATCH);
    for (int i = 0; i < 2 * BATCH; i++)
        step(&f, 0, 0); /* every write lands in the drive's cache; a data sync queued */
    tier_nvme_sim_crash(f.io, 12345); /* some of the cached writes reach the medium */
    tier_cold_close(f.c);
    for (int i = 0; i < 2 * BATCH; i++)
        cr_assert_neq(f.res[i], 0, "block %d told durable with its data never synced", i);
    open_sim(&f);
    expect_records_right(&f, 2 * BATCH, &found);
    cr_assert_eq(found, 0, "%d records after a crash before any data sync", found);
    fx_close(&f);
}

Test(tier_cold_pipeline, a_crash_after_the_index_commit_leaves_only_right_bytes)
{
    struct fx f;
    int found;

    fx_open(&f);
    write_and_sync(&f, 0, 0);        /* A: synced and indexed, its index sync queued */
    put_batch(&f, BATCH);            /* B: written into the cache, never synced */
    for (int i = 0; i < BATCH; i++)
        step(&f, 1, 0);
    tier_nvme_sim_crash(f.io, 777);
    tier_cold_close(f.c);
    expect_told(&f, BATCH, -EIO, "B, unsynced at the crash");
    open_sim(&f);
    /* A's records may be back (their bytes were synced first), B's never */
    expect_records_right(&f, 2 * BATCH, &found);
    for (int i = BATCH; i < 2 * BATCH; i++) {
        struct tier_key k = key_of(i);

        cr_assert(!tier_cold_has(f.c, 1, &k), "block %d indexed, its data never synced", i);
    }
    fx_close(&f);
}

/* A steady stream of reads of block 0, each re-issued once it is done, so
 * that the ring stays full and a backlog waits behind it. */
#define READERS 32 /* twice the queue depth */

struct readers {
    void *buf[READERS];
    int res[READERS]; /* 1: in flight */
};

static void read_again(struct fx *f, struct readers *r, int i)
{
    struct tier_key k = key_of(0);
    int rc;

    r->res[i] = 1;
    rc = tier_cold_get(f->c, 1, &k, r->buf[i], BLK, NULL, told, &r->res[i]);
    cr_assert_eq(rc, 0, "get %d of block 0: %s", i, strerror(-rc));
}

/* The bug: tier_cold_poll fed backlogged reads into every ring slot a
 * completion freed, then tried the sync it owed, refused -EBUSY turn after
 * turn as long as reads kept coming: a written batch was never synced, its
 * puts never told (the simulation's seed 3 with faults: orphans held in warm
 * by demotions waiting on that sync). */
Test(tier_cold_pipeline, a_sync_is_not_starved_by_backlogged_reads)
{
    struct readers r;
    struct fx f;
    unsigned qd, queued;

    fx_open(&f);
    qd = tier_nvme_qd(f.io);
    cr_assert_eq(qd, 16 + 2, "the ring: %u slots, expected the 16 asked for and the syncs' 2", qd);
    write_and_sync(&f, 0, 0);
    step(&f, 0, 0); /* batch A durable: block 0 can be read */
    expect_told(&f, 0, 0, "A, after its index sync");
    /* half of batch B written: a flush, not a full batch, starts its sync */
    for (int i = BATCH; i < BATCH + 2; i++) {
        struct tier_key k = key_of(i);

        cr_assert_eq(tier_cold_put(f.c, 1, &k, NULL, f.buf[i], BLK, told, &f.res[i]), 0);
    }
    step(&f, 0, 0);
    step(&f, 0, 0);
    for (int i = 0; i < READERS; i++) {
        cr_assert_eq(posix_memalign(&r.buf[i], 4096, BLK), 0);
        read_again(&f, &r, i);
    }
    queued = tier_nvme_sim_queued(f.io);
    cr_assert_eq(queued, qd - 2, "reads in the ring: %u of %u, expected all but the syncs' 2",
                 queued, qd);
    tier_cold_flush(f.c);
    cr_assert_eq(tier_nvme_sim_queued(f.io), qd - 1, "the flush's data sync is queued");
    /* the oldest request completes, turn after turn, and every read done
     * is asked again: B must be told durable within a few rounds of the ring */
    for (unsigned n = 0; n < 4 * qd && f.res[BATCH] == 1; n++) {
        step(&f, 0, 0);
        for (int i = 0; i < READERS; i++) {
            if (r.res[i] == 1)
                continue;
            cr_assert_eq(r.res[i], 0, "read %d of block 0 failed: %d", i, r.res[i]);
            cr_assert_eq(t_check(r.buf[i], BLK, 700), -1, "read %d of block 0 wrong", i);
            read_again(&f, &r, i);
        }
        cr_assert_leq(tier_nvme_sim_queued(f.io), qd);
    }
    for (int i = BATCH; i < BATCH + 2; i++)
        cr_assert_eq(f.res[i], 0, "block %d: told %d after %u completions under reads, "
                                  "expected durable (0)", i, f.res[i], 4 * qd);
    tier_cold_drain(f.c); /* the reads still in flight land before their buffers go */
    for (int i = 0; i < READERS; i++)
        free(r.buf[i]);
    fx_close(&f);
}

/* cachestat(2) (Linux 6.5): the pages of a file written but not yet on
 * disk; -errno when it cannot tell. */
static long dirty_pages(const char *path)
{
    struct { uint64_t off, len; } range = { 0, 0 };
    struct { uint64_t cache, dirty, writeback, evicted, recently_evicted; } st = { 0 };
    int fd = open(path, O_RDONLY);
    long rc;

    if (fd < 0)
        return -errno;
    rc = syscall(451, fd, &range, &st, 0);
    close(fd);
    return rc < 0 ? -errno : (long)st.dirty;
}

/* A daemon killed between a batch's index commit and its index sync
 * leaves the transaction in the page cache only: a power cut then would
 * roll it back. A restart must make what it vouches for durable before it
 * serves it (its scan marks each record on disk, and a durable commit of
 * such a key is acknowledged at once); it used to read the record and
 * leave it unsynced. */
Test(tier_cold_pipeline, a_restart_makes_the_index_it_finds_durable_first)
{
    struct fx f;
    struct tier_key k = key_of(0);
    char mdb[96];
    pid_t pid;
    int st;

    fx_open(&f);
    tier_cold_close(f.c);
    snprintf(mdb, sizeof(mdb), "%s/cold.lmdb/data.mdb", f.dir);
    if (dirty_pages(mdb) == -ENOSYS)
        cr_skip_test("cachestat(2) is not in this kernel: dirty pages cannot be counted");
    pid = fork();
    cr_assert_geq(pid, 0);
    if (pid == 0) {
        open_sim(&f);
        write_and_sync(&f, 0, 0); /* indexed, its index sync queued, nobody told */
        _exit(tier_cold_has(f.c, 1, &k) && f.res[0] == 1 ? 0 : 3); /* killed here */
    }
    cr_assert_eq(waitpid(pid, &st, 0), pid);
    cr_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0, "the child's batch: status %d", st);
    open_sim(&f); /* the restart */
    cr_assert(tier_cold_has(f.c, 1, &k), "the killed daemon's record is there");
    cr_assert_eq(dirty_pages(mdb), 0, "the restart serves an index not on disk");
    fx_close(&f);
}
