/* SPDX-License-Identifier: MIT */
/*
 * cold.c - figure 6: cold-tier durable writes and reads through tierd,
 * against fio with the same shape on the same file system.
 */
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "bench.h"
#include "tier_nvme.h"

/* ---- figure 6: cold-tier writes and reads vs fio -------------------------- */

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
    bool fio_err;        /* the error is fio's (bench_fail_sys), not tierd's */
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
int bench_check_block(const void *slot, const uint8_t *src, size_t bs, size_t g, bool full)
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
int bench_want_n(const char **what_out, const char *what, int r, int n)
{
    if (r == n)
        return 0;
    *what_out = what;
    return r < 0 ? r : -EIO;
}

/* Reserve keys[0..n) (blocks g0...) and fill their slots. */
static int reserve_fill(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                        const uint8_t *src, size_t nsrc, size_t bs, size_t g0, const char **what,
                        uint64_t *fill_ns)
{
    void *slots[KVT_BATCH_MAX];
    int r = kvt_put_reserve(ns, parent, keys, n, slots);

    if ((r = bench_want_n(what, "kvt_put_reserve", r, (int)n)) < 0)
        return r;
    uint64_t a = cmn_now_ns();
    for (size_t j = 0; j < n; j++) {
        if (!slots[j]) {
            *what = "kvt_put_reserve: a fresh key came back deduplicated";
            return -EIO;
        }
        fill_block(slots[j], src + (j % nsrc) * bs, bs, g0 + j);
    }
    if (fill_ns)
        *fill_ns += cmn_now_ns() - a;
    return 0;
}

/* Put keys[0..n) (blocks g0...) as one durable batch: reserve, fill,
 * commit with KVT_COMMIT_DURABLE (returns once written, synced, indexed). */
int bench_put_durable(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                       const uint8_t *src, size_t nsrc, size_t bs, size_t g0, const char **what,
                       uint64_t *fill_ns)
{
    int r = reserve_fill(ns, parent, keys, n, src, nsrc, bs, g0, what, fill_ns);

    if (r < 0)
        return r;
    r = kvt_put_commit_flags(ns, keys, n, KVT_COMMIT_DURABLE);
    return bench_want_n(what, "kvt_put_commit_flags(KVT_COMMIT_DURABLE)", r, (int)n);
}

/* Lease all of keys[0..n), asking again after a short answer (tierd answers
 * a get with the leading run it could start reads for); leases[] gets one
 * lease per call. Returns the number of leases, or an error (0 hits for a
 * key that was put is an error). */
int bench_get_all(kvt_ns *ns, const kvt_key *keys, size_t n, const void **slots,
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

/* One round of durable batches, pipelined as an engine would: batch k+1
 * is reserved and filled while batches k, k-1, ... (KVT_COMMITS_MAX of
 * them) commit (kvt_put_commit_start), and the oldest is waited for only
 * when KVT_COMMITS_MAX are started. */
static int cold_put_round(struct cold *c, int round, double *secs)
{
    size_t g0 = (size_t)round * c->per_round;
    kvt_commit cm[KVT_COMMITS_MAX];
    int head = 0, live = 0, r = 0;
    uint64_t t0 = cmn_now_ns();

    for (size_t at = 0; at < c->per_round && r == 0; at += CQD) {
        size_t n = c->per_round - at < CQD ? c->per_round - at : CQD;

        if ((r = reserve_fill(c->ns, NULL, c->keys + g0 + at, n, c->src, CQD, c->bs, g0 + at,
                              &c->what, &c->fill_ns)) < 0)
            break;
        if (live == KVT_COMMITS_MAX) {
            size_t want = cm[head].n;

            r = bench_want_n(&c->what, "kvt_put_commit_wait", kvt_put_commit_wait(c->ns, &cm[head]),
                             (int)want);
            head = (head + 1) % KVT_COMMITS_MAX;
            live--;
            if (r < 0)
                break;
        }
        r = kvt_put_commit_start(c->ns, c->keys + g0 + at, n, KVT_COMMIT_DURABLE,
                                 &cm[(head + live) % KVT_COMMITS_MAX]);
        if (r < 0) {
            c->what = "kvt_put_commit_start(KVT_COMMIT_DURABLE)";
            break;
        }
        live++;
    }
    /* every started commit is waited for, after an error too */
    for (; live > 0; live--, head = (head + 1) % KVT_COMMITS_MAX) {
        size_t want = cm[head].n;
        const char *what = NULL;
        int w = bench_want_n(&what, "kvt_put_commit_wait", kvt_put_commit_wait(c->ns, &cm[head]),
                             (int)want);

        if (r == 0 && w < 0) { /* the first error is the one told */
            r = w;
            c->what = what;
        }
    }
    if (r < 0)
        return r;
    *secs = (double)(cmn_now_ns() - t0) / 1e9;
    return 0;
}

static int cold_get_round(struct cold *c, int round, double *secs)
{
    const void *slots[CQD];
    kvt_lease leases[CQD];
    size_t g0 = (size_t)round * c->per_round;
    uint64_t t0 = cmn_now_ns();
    int nl;

    for (size_t at = 0; at < c->per_round; at += CQD) {
        size_t n = c->per_round - at < CQD ? c->per_round - at : CQD;
        nl = bench_get_all(c->ns, c->keys + g0 + at, n, slots, leases, &c->what, &c->get_calls,
                     &c->short_gets);
        if (nl < 0)
            return nl;
        int bad = 0;
        for (size_t j = 0; j < n && !bad; j++)
            bad = bench_check_block(slots[j], c->src + (j % CQD) * c->bs, c->bs, g0 + at + j,
                              at == 0); /* whole blocks in the first batch of a round */
        for (int i = 0; i < nl; i++)
            kvt_release(c->ns, &leases[i]);
        if (bad) {
            c->what = "a block read back from disk holds other bytes than were put";
            return -EBADMSG;
        }
    }
    *secs = (double)(cmn_now_ns() - t0) / 1e9;
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

    snprintf(path, sizeof(path), "%s/floor.dat", bench_tmpdir);
    unlink(path);
    if ((r = tier_nvme_open(&cfg, &io)) < 0)
        return r;
    if (!tier_nvme_direct(io)) {
        r = -EOPNOTSUPP;
        goto out;
    }
    for (int pass = 0; pass < 2; pass++) {
        uint64_t t0 = cmn_now_ns();
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
        *(pass ? r_bps : w_bps) = (double)(size / bs * bs) / ((double)(cmn_now_ns() - t0) / 1e9);
    }
    r = 0;
out:
    tier_nvme_close(io);
    unlink(path);
    return r;
}

/* Write then read one block size: tierd and fio interleaved round by round
 * (which of the two goes first alternates), medians of per-round ratios. */
void bench_cold(size_t bs)
{
    char lbl[32], wname[64], rname[64], tag[32], cold_sz[32], warm_sz[32], fio_file[PATH_MAX];
    const char *extra[] = { "--cold-bytes", cold_sz, "--cold-qd", "32", NULL };
    struct cold c = { .bs = bs, .rounds = bench_opt.cold_rounds };
    struct bench_tierd d = { 0 };
    double tw[64], fw[64], rw[64], tr[64], fr[64], rr[64], lk[64], flw[64], flr[64];
    double fio_nosync = 0, fio_syncs = 0;
    bool floor_ok = true;
    uint8_t *dst = NULL;
    kvt_stats s0, s1;
    int r, n = bench_opt.cold_rounds;
    bool wrote = false;

    bench_size_label(bs, lbl, sizeof(lbl));
    snprintf(wname, sizeof(wname), "cold_write_%s_vs_fio", lbl);
    snprintf(rname, sizeof(rname), "cold_read_%s_vs_fio", lbl);
    snprintf(tag, sizeof(tag), "cold%zuk", bs / 1024);
    snprintf(fio_file, sizeof(fio_file), "%s/fio.dat", bench_tmpdir);
    c.per_round = (size_t)(bench_opt.cold_bytes / bs);
    /* every round writes fresh keys into fresh (preallocated, never written) space */
    snprintf(cold_sz, sizeof(cold_sz), "%" PRIu64 "M",
             (uint64_t)((n * bench_opt.cold_bytes + CW_WARM * CQD * bs) / MIB + 256));
    /* warm holds the pipeline: the batches committing, the one being filled
     * and one more (else the next reserve waits for the oldest commit) */
    uint64_t warm = (uint64_t)(KVT_COMMITS_MAX + 2) * CQD * bs;
    warm = warm > 256 * MIB ? warm : 256 * MIB;
    snprintf(warm_sz, sizeof(warm_sz), "%" PRIu64 "M", (uint64_t)(warm / MIB));
    struct bench_fio_job fj = { .rw = "write", .bs = bs, .size = (uint64_t)c.per_round * bs,
                          .qd = CQD, .fdatasync = true };

    printf("# --- %s, %s: %d rounds of %zu blocks of %zu KiB (%.0f MiB); tierd: batches of "
           "%d, each reserved and filled while the last %d commit with KVT_COMMIT_DURABLE "
           "(kvt_put_commit_start, then kvt_put_commit_wait), then (after a restart) "
           "got back from disk; fio: --bs %zu --iodepth %d --direct=1 io_uring on a file beside "
           "tierd's\n", wname, rname, n, c.per_round, bs / 1024, (double)fj.size / MIB, CQD,
           KVT_COMMITS_MAX, bs, CQD);
    fflush(stdout);
    c.src = bench_alloc_faulted(CQD * bs, 0xc01d ^ bs);
    dst = bench_alloc_faulted(CQD * bs, 0xd57 ^ bs);
    c.keys = malloc(((size_t)n * c.per_round + CW_WARM * CQD) * sizeof(*c.keys));
    if (!c.src || !dst || !c.keys || c.per_round == 0) {
        r = -ENOMEM;
        c.what = "buffers";
        goto out_fail;
    }
    uint64_t seed = 0x636f6c64ull ^ bs;
    bench_rand_keys(&seed, c.keys, (size_t)n * c.per_round + CW_WARM * CQD);
    const kvt_key *wkeys = c.keys + (size_t)n * c.per_round; /* untimed warm-up batches */

    /* context: fio without the syncs; the pattern's disk work alone */
    unlink(fio_file);
    fj.fdatasync = false;
    if ((r = bench_fio_run(&fj, &fio_nosync, NULL)) < 0) {
        c.what = "fio --rw=write";
        c.fio_err = true;
        goto out_fail;
    }
    fj.fdatasync = true;

    c.what = "tierd did not start";
    if ((r = bench_tierd_start_ex(&d, tag, warm_sz, false, extra, 30)) < 0)
        goto out_fail;
    c.what = "kvt_ns_open";
    if ((r = bench_ns_open(d.c, "tierbench/cold", bs, &c.ns)) < 0)
        goto out_fail;
    for (size_t b = 0; b < CW_WARM; b++) {
        size_t g = (size_t)n * c.per_round + b * CQD;
        if ((r = bench_put_durable(c.ns, NULL, wkeys + b * CQD, CQD, c.src, CQD, bs, g, &c.what,
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
                if ((r = bench_fio_run(&fj, &fbw, &ns_)) < 0) {
                    c.what = "fio --rw=write --fdatasync";
                    c.fio_err = true;
                    goto out_fail;
                }
                if (i == 0)
                    printf("# %s\n", bench_fio_cmd);
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
           "overlapped with the commits before it) took %.0f%% of the time; the rate without "
           "it, were it not overlapped: %.0f MB/s\n",
           s1.demotions - s0.demotions, s1.dropped - s0.dropped, s1.tier[KVT_TIER_COLD].blocks,
           s1.io_errors, 100 * fill_share,
           (double)n * (double)fj.size / (t_all * (1 - fill_share)) / 1e6);
    printf("# fio without --fdatasync: %.0f MB/s. fio --fdatasync=%d issued %.0f fdatasyncs "
           "for %zu writes a round, queued among its writes (not a barrier: its writes go on "
           "while they run; --end_fsync=1 makes its last writes durable too); a durable batch "
           "in tierd: %d writes, fdatasync (of every write done by then: one for several "
           "batches when the disk is behind), LMDB commit (its pages synced; the next "
           "group's fdatasync runs meanwhile), a sync of the index queued (or the next "
           "commit), reply; the next batches' writes go on meanwhile, queued in tierd while "
           "the disk's queue is full\n", fio_nosync / 1e6, CQD, fio_syncs / n, c.per_round, CQD);
    if (floor_ok)
        printf("# a barrier pattern's disk work alone (in-process tier_nvme: %d writes, wait, "
               "fdatasync, wait; every round): %.0f MB/s median; tierd's puts %.0f MB/s, %.2f of "
               "it\n", CQD, bench_median(flw, n) / 1e6, bench_median(tw, n) / 1e6,
               bench_median(tw, n) / bench_median(flw, n));
    bench_report(wname, bench_median(rw, n), "%.2f", "ratio", ">=", "0.9");

    /* reads: restart, so that every block is only on disk */
    bench_tierd_stop(&d);
    c.ns = NULL;
    c.what = "tierd did not restart";
    if ((r = bench_tierd_start_ex(&d, tag, warm_sz, false, extra, 30)) < 0)
        goto out_fail_read;
    bench_log_line(d.log, "cold tier");
    c.what = "kvt_ns_open";
    if ((r = bench_ns_open(d.c, "tierbench/cold", bs, &c.ns)) < 0)
        goto out_fail_read;
    for (size_t b = 0; b < CW_WARM; b++) {
        const void *slots[CQD];
        kvt_lease leases[CQD];
        int nl = bench_get_all(c.ns, wkeys + b * CQD, CQD, slots, leases, &c.what, &c.get_calls,
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
                if ((r = bench_fio_run(&fj, &fbw, NULL)) < 0) {
                    c.what = "fio --rw=read";
                    c.fio_err = true;
                    goto out_fail_read;
                }
                if (i == 0)
                    printf("# %s\n", bench_fio_cmd);
            } else if ((r = cold_get_round(&c, i, &secs)) < 0) {
                goto out_fail_read;
            }
        }
        fr[i] = fbw;
        tr[i] = (double)fj.size / secs;
        rr[i] = tr[i] / fr[i];
        /* context, every round: fio in tierd's lockstep */
        fj.lockstep = true;
        r = bench_fio_run(&fj, &lk[i], NULL);
        fj.lockstep = false;
        if (r == 0 && i == 0)
            printf("# %s\n", bench_fio_cmd);
        if (r < 0) {
            c.what = "fio --rw=read (lockstep)";
            c.fio_err = true;
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
           "%.0f MB/s", CQD, CQD, CQD, CQD, CQD, bench_median(lk, n) / 1e6);
    if (floor_ok)
        printf("; in-process tier_nvme: %.0f MB/s", bench_median(flr, n) / 1e6);
    printf("; tierd's gets %.0f MB/s; fio %.0f MB/s (medians over the rounds). So one "
           "client's gets keep fewer than %d reads in flight on average; what that costs is "
           "the gap between the lockstep baselines and fio (on a noisy disk, compare the "
           "per-round figures)\n",
           bench_median(tr, n) / 1e6, bench_median(fr, n) / 1e6, CQD);
    bench_report(rname, bench_median(rr, n), "%.2f", "ratio", ">=", "0.85");
    goto out;

out_fail:
    if (!wrote)
        (c.fio_err ? bench_fail_sys : bench_fail)(wname, c.what, r);
out_fail_read:
    (c.fio_err ? bench_fail_sys : bench_fail)(rname, c.what, r);
out:
    bench_tierd_stop(&d);
    if (d.data[0])
        cmn_rmtree(d.data);
    unlink(fio_file);
    bench_free_faulted(c.src, CQD * bs);
    bench_free_faulted(dst, CQD * bs);
    free(c.keys);
}
