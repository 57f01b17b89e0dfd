/* SPDX-License-Identifier: MIT */
/*
 * tier_cold_durable.c - the cold tier on a real file system: round trip
 * through io_uring and LMDB, restart, replacement, removal, a full file,
 * corruption caught by the checksum, and SIGKILL at random points: every
 * acknowledged block comes back byte-identical and nothing served is wrong.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"
#include "tier_cold.h"

#define BLK (64u << 10)

struct dir {
    char path[64];
};

static void mkdir_tmp(struct dir *d)
{
    t_tmpdir("kvt-cold", d->path, sizeof(d->path));
}

static void rm_tmp(struct dir *d)
{
    t_rmtree(d->path);
}

static struct tier_cold *open_cold(const struct dir *d, uint64_t bytes, uint32_t batch)
{
    struct tier_cold_cfg cfg = { .dir = d->path, .bytes = bytes, .qd = 16, .batch = batch };
    struct tier_cold *c = NULL;
    int rc = tier_cold_open(&cfg, &c);

    cr_assert_eq(rc, 0, "tier_cold_open(%s): %s", d->path, strerror(-rc));
    return c;
}

static void *block(void)
{
    void *p = NULL;

    cr_assert_eq(posix_memalign(&p, 4096, BLK), 0);
    return p;
}

/* Completion results land here: one int per request, starting at 1 (none). */
static void done(void *ctx, int rc)
{
    *(int *)ctx = rc;
}

static struct tier_key key_of(uint64_t i)
{
    struct tier_key k;

    t_keys((kvt_key *)&k, 1, 5000 + i);
    return k;
}

/* Put block i (payload seed i) and wait until it is durable. */
static int put_sync(struct tier_cold *c, uint64_t i, void *buf)
{
    struct tier_key k = key_of(i);
    int res = 1, rc;

    t_fill(buf, BLK, i);
    rc = tier_cold_put(c, 1, &k, NULL, buf, BLK, done, &res);
    if (rc < 0)
        return rc;
    cr_assert_eq(tier_cold_drain(c), 0);
    return res;
}

/* Read block i; 0 with verified bytes equal to payload `seed`, or the error. */
static int get_sync(struct tier_cold *c, uint64_t i, uint64_t seed, void *buf)
{
    struct tier_key k = key_of(i);
    int res = 1, rc;

    memset(buf, 0, BLK);
    rc = tier_cold_get(c, 1, &k, buf, BLK, NULL, done, &res);
    if (rc < 0)
        return rc;
    while (res == 1)
        cr_assert_geq(tier_cold_poll(c, true), 0);
    if (res == 0) {
        long bad = t_check(buf, BLK, seed);

        cr_assert_eq(bad, -1, "block %llu: verified read but wrong byte at %ld",
                     (unsigned long long)i, bad);
    }
    return res;
}

/* Blocks of the round trip: block i's parent is block i - 1. */
static int parent_ok(void *ctx, uint32_t ns, const struct tier_key *key,
                     const struct tier_key *parent, uint64_t len)
{
    (void)ctx;
    cr_assert_eq(ns, 1);
    cr_assert_eq(len, BLK);
    for (uint64_t i = 0; i < 100; i++) {
        struct tier_key k = key_of(i), p = key_of(i - 1);

        if (memcmp(&k, key, sizeof(k)))
            continue;
        if (i == 0)
            cr_assert_null(parent);
        else
            cr_assert(parent && memcmp(parent, &p, sizeof(p)) == 0, "block %llu: parent lost",
                      (unsigned long long)i);
        return 0;
    }
    return 0;
}

Test(tier_cold_durable, roundtrip_batches_and_restart)
{
    struct dir d;
    struct tier_cold *c;
    struct tier_cold_stats st;
    enum { N = 100 };
    void *bufs[N], *rd = block();
    int res[N];

    mkdir_tmp(&d);
    c = open_cold(&d, 64u << 20, 8);
    for (int i = 0; i < N; i++) {
        struct tier_key k = key_of((uint64_t)i), prev = key_of((uint64_t)i - 1);
        int rc;

        bufs[i] = block();
        t_fill(bufs[i], BLK, (uint64_t)i);
        res[i] = 1;
        while ((rc = tier_cold_put(c, 1, &k, i ? &prev : NULL, bufs[i], BLK, done,
                                   &res[i])) == -EBUSY)
            tier_cold_poll(c, true);
        cr_assert_eq(rc, 0, "put %d: %s", i, strerror(-rc));
    }
    cr_assert_eq(tier_cold_drain(c), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(res[i], 0, "put %d completed with %d", i, res[i]);
    tier_cold_stats_get(c, &st);
    cr_assert_eq(st.blocks, N);
    cr_assert_eq(st.writes, N);
    cr_assert_eq(st.bytes_used, (uint64_t)N * BLK);
    cr_assert_leq(st.commits, N / 8 + 1, "commits are batched: %llu for %d blocks",
                  (unsigned long long)st.commits, N);
    cr_assert(st.direct, "O_DIRECT expected on /tmp (ext4)");
    for (int i = 0; i < N; i++)
        cr_assert_eq(get_sync(c, (uint64_t)i, (uint64_t)i, rd), 0);
    tier_cold_close(c);

    /* restart: every block is served at once, with its chain parent; new
     * space does not overlap */
    c = open_cold(&d, 64u << 20, 8);
    cr_assert_eq(tier_cold_scan(c, parent_ok, NULL), 0);
    tier_cold_stats_get(c, &st);
    cr_assert_eq(st.blocks, N, "records after restart: %llu", (unsigned long long)st.blocks);
    cr_assert_eq(st.bytes_used, (uint64_t)N * BLK);
    cr_assert_eq(put_sync(c, 1000, bufs[0]), 0);
    for (int i = 0; i < N; i++)
        cr_assert_eq(get_sync(c, (uint64_t)i, (uint64_t)i, rd), 0, "block %d after restart", i);
    cr_assert_eq(get_sync(c, 1000, 1000, rd), 0);
    tier_cold_close(c);
    for (int i = 0; i < N; i++)
        free(bufs[i]);
    free(rd);
    rm_tmp(&d);
}

Test(tier_cold_durable, replace_remove_and_full_file)
{
    struct dir d;
    struct tier_cold *c;
    struct tier_cold_stats st;
    void *buf = block(), *rd = block();
    struct tier_key k = key_of(1);
    int res = 1;

    mkdir_tmp(&d);
    c = open_cold(&d, 16 * BLK, 4); /* room for 16 blocks */
    cr_assert_eq(put_sync(c, 1, buf), 0);
    /* the same key again with other bytes: the new copy wins, the old space
     * is freed once the new record is durable */
    t_fill(buf, BLK, 77);
    cr_assert_eq(tier_cold_put(c, 1, &k, NULL, buf, BLK, done, &res), 0);
    cr_assert_eq(tier_cold_drain(c), 0);
    cr_assert_eq(res, 0);
    cr_assert_eq(get_sync(c, 1, 77, rd), 0);
    tier_cold_stats_get(c, &st);
    cr_assert_eq(st.blocks, 1);
    cr_assert_eq(st.bytes_used, BLK, "the replaced copy's space went back");

    for (uint64_t i = 2; i <= 16; i++)
        cr_assert_eq(put_sync(c, i, buf), 0, "block %llu", (unsigned long long)i);
    cr_assert_eq(put_sync(c, 17, buf), -ENOSPC, "a full file refuses cleanly");
    cr_assert_eq(tier_cold_remove(c, 1, &k), 0);
    cr_assert_eq(tier_cold_remove(c, 1, &k), -ENOENT);
    cr_assert_eq(put_sync(c, 17, buf), 0, "removed space is reused");
    cr_assert_eq(get_sync(c, 1, 77, rd), -ENOENT);
    cr_assert_eq(get_sync(c, 17, 17, rd), 0);
    cr_assert_eq(get_sync(c, 16, 16, rd), 0, "nothing else was disturbed");
    tier_cold_close(c);
    free(buf);
    free(rd);
    rm_tmp(&d);
}

Test(tier_cold_durable, flipped_bytes_are_a_counted_miss_never_served)
{
    struct dir d;
    struct tier_cold *c;
    struct tier_cold_stats st;
    void *buf = block(), *rd = block();
    char path[128];
    int fd;

    mkdir_tmp(&d);
    c = open_cold(&d, 64 * BLK, 4);
    for (uint64_t i = 0; i < 4; i++)
        cr_assert_eq(put_sync(c, i, buf), 0);
    tier_cold_close(c);
    /* behind the tier's back: flip one byte in every block's data */
    snprintf(path, sizeof(path), "%s/cold.data", d.path);
    fd = open(path, O_RDWR);
    cr_assert_geq(fd, 0);
    for (uint64_t i = 0; i < 4; i++) {
        uint8_t b;
        off_t at = (off_t)(i * BLK + 1234);

        cr_assert_eq(pread(fd, &b, 1, at), 1);
        b ^= 0x40;
        cr_assert_eq(pwrite(fd, &b, 1, at), 1);
    }
    fsync(fd);
    close(fd);
    c = open_cold(&d, 64 * BLK, 4);
    for (uint64_t i = 0; i < 4; i++) {
        int rc = get_sync(c, i, i, rd);

        cr_assert_eq(rc, -EBADMSG, "block %llu: expected a checksum miss, got %d",
                     (unsigned long long)i, rc);
        cr_assert_eq(get_sync(c, i, i, rd), -ENOENT, "the bad record is dropped");
    }
    tier_cold_stats_get(c, &st);
    cr_assert_eq(st.checksum_errors, 4);
    cr_assert_eq(st.blocks, 0);
    cr_assert_eq(st.bytes_used, 0);
    tier_cold_close(c);
    free(buf);
    free(rd);
    rm_tmp(&d);
}

Test(tier_cold_durable, namespace_ids_are_stable_across_restarts)
{
    struct dir d;
    struct tier_cold *c;
    uint32_t a, b, a2, b2;

    mkdir_tmp(&d);
    c = open_cold(&d, 16 * BLK, 4);
    cr_assert_eq(tier_cold_ns_id(c, "model-a|bf16|16", 15, &a), 0);
    cr_assert_eq(tier_cold_ns_id(c, "model-b|bf16|16", 15, &b), 0);
    cr_assert_neq(a, b);
    cr_assert_eq(tier_cold_ns_id(c, "", 0, &a2), -EINVAL);
    tier_cold_close(c);
    c = open_cold(&d, 16 * BLK, 4);
    cr_assert_eq(tier_cold_ns_id(c, "model-b|bf16|16", 15, &b2), 0);
    cr_assert_eq(tier_cold_ns_id(c, "model-a|bf16|16", 15, &a2), 0);
    cr_assert_eq(a2, a, "same descriptor, same id after a restart");
    cr_assert_eq(b2, b);
    tier_cold_close(c);
    rm_tmp(&d);
}

/* The child of the crash test: put blocks for ever, writing the number of
 * each block to the pipe once its put is acknowledged (durable). */
struct ack {
    int fd;
    uint64_t i;
};

static void acked(void *ctx, int rc)
{
    struct ack *a = ctx;

    if (rc == 0 && t_ack_send(a->fd, a->i) != 0)
        _exit(3);
    free(a);
}

static void crash_child(const char *dir, int fd)
{
    struct tier_cold_cfg cfg = { .dir = dir, .bytes = 4096 * BLK, .qd = 16, .batch = 8 };
    struct tier_cold *c;
    static uint8_t *bufs[64];

    if (tier_cold_open(&cfg, &c) < 0)
        _exit(2);
    for (int j = 0; j < 64; j++)
        if (posix_memalign((void **)&bufs[j], 4096, BLK))
            _exit(2);
    for (uint64_t i = 0; i < 4000; i++) {
        struct tier_key k = key_of(i);
        struct ack *a = malloc(sizeof(*a));
        uint8_t *b = bufs[i % 64];

        /* a buffer is reused only after 64 more puts: drain keeps it safe */
        if (i % 64 == 0 && i)
            tier_cold_drain(c);
        t_fill(b, BLK, i);
        *a = (struct ack){ fd, i };
        while (tier_cold_put(c, 1, &k, NULL, b, BLK, acked, a) == -EBUSY)
            tier_cold_poll(c, true);
        tier_cold_poll(c, false);
    }
    tier_cold_drain(c);
    _exit(0);
}

static int check_one(void *ctx, uint32_t ns, const struct tier_key *key,
                     const struct tier_key *parent, uint64_t len)
{
    int *n = ctx;

    (void)ns;
    (void)key;
    cr_assert_null(parent, "the crash test puts no parents");
    cr_assert_eq(len, BLK);
    (*n)++;
    return 0;
}

Test(tier_cold_durable, sigkill_keeps_every_acknowledged_block)
{
    static const int kill_after[] = { 1, 9, 40, 150, 333 };

    for (size_t kp = 0; kp < sizeof(kill_after) / sizeof(kill_after[0]); kp++) {
        struct dir d;
        struct t_acks a;
        int records = 0;
        static uint8_t ackd[4000];
        uint64_t i, nack;
        struct tier_cold *c;
        void *rd = block();

        mkdir_tmp(&d);
        memset(ackd, 0, sizeof(ackd));
        t_acks_open(&a, crash_child, d.path);
        nack = (uint64_t)t_acks_read(&a, ackd, sizeof(ackd), kill_after[kp]);
        kill(a.pid, SIGKILL);
        /* acks already in the pipe were acknowledged before the kill */
        t_acks_read(&a, ackd, sizeof(ackd), -1);
        t_acks_close(&a);

        c = open_cold(&d, 4096 * BLK, 8);
        for (i = 0; i < 4000; i++) {
            int rc;

            /* unacknowledged blocks may or may not be there, but whatever is
             * served must be the right bytes (get_sync checks them) */
            rc = get_sync(c, i, i, rd); /* verified bytes equal, or a miss */
            if (ackd[i])
                cr_assert_eq(rc, 0, "kill point %d: acknowledged block %llu lost (%d)",
                             kill_after[kp], (unsigned long long)i, rc);
            else
                cr_assert(rc == 0 || rc == -ENOENT, "block %llu: %d", (unsigned long long)i,
                          rc);
        }
        tier_cold_scan(c, check_one, &records);
        cr_assert_geq((uint64_t)records, nack);
        tier_cold_close(c);
        free(rd);
        rm_tmp(&d);
    }
}
