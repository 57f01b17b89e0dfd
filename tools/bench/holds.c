/* SPDX-License-Identifier: MIT */
/*
 * holds.c - figure 5b: what a durable commit's hold costs on a full disk.
 *
 * A durable commit holds every block it vouches for on disk until it is
 * answered, so a write that has to make room skips held blocks. K commits
 * of B blocks wait at once (the last key of each is another client's, not
 * committed yet), and their K x (B - 1) writes run on a simulated disk
 * (no device time: the store's own work is what is measured), once on a
 * disk with room for all of them and once on a disk full of disk-only
 * blocks, where every write evicts one past every hold. The figure is the
 * full disk's time over the roomy one's, same run: 6.6-7.6 here (1.3-1.4 s
 * against 0.18-0.20 s); a walk that looked at every hold for every wait
 * (review of the hold) made it 64.
 * Every commit must be answered durable, every block vouched for on disk,
 * or the figure is not measured.
 */
#include <sys/stat.h>
#include <time.h>

#include "bench.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_nvme.h"

#define HK 64            /* commits waiting at once */
#define HB 64            /* keys of each */
#define HBLK 4096u       /* block bytes */
#define HROUNDS 3        /* of each disk, interleaved; the medians count */

static int told[HK], failed[HK];
static char waiter[HK];

static void on_ready(void *ctx, void *w, uint32_t id, int rc)
{
    int k = (int)((char *)w - waiter);

    (void)ctx;
    (void)id;
    if (k < 0 || k >= HK)
        return;
    if (rc == 0)
        told[k]++;
    else
        failed[k]++;
}

/* Every disk request done and every completion delivered. */
static int settle(struct tier *t, struct tier_cold *c)
{
    struct tier_nvme *io = tier_cold_io(c);

    for (int guard = 0; guard < 100000; guard++) {
        tier_cold_flush(c);
        while (tier_nvme_sim_queued(io))
            tier_nvme_sim_complete(io, 0, 0);
        tier_poll(t, false);
        tier_maintain(t);
        if (!tier_nvme_sim_queued(io) && !tier_cold_busy(c))
            return 0;
    }
    return -ETIMEDOUT;
}

static int answered(int want)
{
    int n = 0;

    for (int k = 0; k < HK; k++)
        n += told[k] + failed[k];
    return n >= want;
}

static int put(struct tier_ns *ns, uint32_t owner, const struct tier_key *k, size_t n)
{
    uint32_t ids[HB];
    uint64_t offs[HB];
    int r = tier_reserve(ns, owner, NULL, k, n, ids, offs);

    if (r != (int)n)
        return r < 0 ? r : -ENOSPC;
    return tier_commit(ns, owner, k, n) == n ? 0 : -EIO;
}

/* One round: *secs for the K commits' writes; 0 or -errno (what failed). */
static int round_once(bool full, uint64_t seed, double *secs, const char **what)
{
    const int nf = HK * HB, nw = HK * (HB - 1);
    uint64_t slot = tier_slot_bytes(HBLK);
    char dir[sizeof(bench_tmpdir) + 32];
    struct tier_cold_cfg cc = { .dir = dir, .qd = 16, .batch = 4, .sim = true,
                                .bytes = (uint64_t)(full ? nf : nf + HK * HB + 64) * slot };
    struct tier_cfg tc = { .warm_bytes = ((uint64_t)HK * HB + 256) * slot, .high_wm = 1.0,
                           .low_wm = 0.6, .ready = on_ready, .lock_memory = false,
                           .huge_pages = false };
    struct tier_cold *cold = NULL;
    struct tier *t = NULL;
    struct tier_ns *ns;
    struct tier_key *fk = calloc((size_t)nf * 5 + HK * HB, sizeof(*fk));
    struct tier_key *pk = fk + nf, *wk = fk + nf * 5;
    uint32_t ids[HB], pend;
    uint64_t offs[HB];
    size_t np = 0;
    int r = -ENOMEM;

    memset(told, 0, sizeof(told));
    memset(failed, 0, sizeof(failed));
    *what = "malloc";
    if (!fk)
        return r;
    bench_rand_keys(&seed, (kvt_key *)fk, (size_t)nf * 5 + HK * HB);
    snprintf(dir, sizeof(dir), "%s/holds-%d", bench_tmpdir, full);
    mkdir(dir, 0700);
    *what = "tier_cold_open";
    if ((r = tier_cold_open(&cc, &cold)) < 0)
        goto out;
    tc.cold = cold;
    *what = "tier_create";
    if ((r = tier_create(&tc, &t)) < 0)
        goto out;
    *what = "tier_ns_open";
    if ((r = tier_ns_open(t, 1, HBLK, &ns)) < 0)
        goto out;
    /* the disk holds the fillers, which then leave warm: disk-only */
    *what = "the fillers";
    for (int i = 0; i < nf; i += HB)
        if ((r = put(ns, 1, fk + i, HB)) < 0)
            goto out;
    tier_flush_begin(t);
    for (int g = 0; g < 100000 && tier_flush_busy(t); g++)
        if ((r = settle(t, cold)) < 0)
            goto out;
    for (;;) {
        struct tier_story s;
        int j;

        for (j = 0; j < nf; j++) {
            tier_story_get(ns, &fk[j], &s);
            if (s.level != TIER_L_COLD)
                break;
        }
        if (j == nf)
            break;
        r = -ENOSPC;
        if (np + HB > (size_t)nf * 4 || (r = put(ns, 1, pk + np, HB)) < 0)
            goto out;
        np += HB;
    }
    if (tier_remove(ns, pk, np) != np) {
        r = -EIO;
        goto out;
    }
    /* the batches: B - 1 keys of each committed, the last client 7's */
    *what = "the batches";
    for (int k = 0; k < HK; k++) {
        if ((r = put(ns, 1, wk + k * HB, HB - 1)) < 0)
            goto out;
        if ((r = tier_reserve(ns, 7, NULL, wk + k * HB + HB - 1, 1, ids, offs)) != 1) {
            r = r < 0 ? r : -ENOSPC;
            goto out;
        }
    }
    uint64_t t0 = cmn_now_ns();
    *what = "tier_commit_durable";
    for (int k = 0; k < HK; k++)
        if ((r = tier_commit_durable(ns, 1, wk + k * HB, HB, &waiter[k], ids, &pend)) < 0)
            goto out;
    *what = "the writes";
    for (int g = 0; g < 100000 && !answered(nw); g++)
        if ((r = settle(t, cold)) < 0)
            goto out;
    *secs = (double)(cmn_now_ns() - t0) / 1e9;
    r = -EIO;
    if (!answered(nw))
        goto out;
    *what = "client 7's commit";
    for (int k = 0; k < HK; k++)
        if (tier_commit(ns, 7, wk + k * HB + HB - 1, 1) != 1)
            goto out;
    for (int g = 0; g < 100000 && !answered(HK * HB); g++)
        if ((r = settle(t, cold)) < 0)
            goto out;
    /* every commit answered durable, every block it vouched for on disk */
    *what = "a commit not answered durable";
    r = -EIO;
    for (int k = 0; k < HK; k++)
        if (told[k] != HB || failed[k])
            goto out;
    *what = "a block vouched for not on disk";
    for (int i = 0; i < HK * HB; i++) {
        struct tier_story s;

        tier_story_get(ns, &wk[i], &s);
        if (!s.present || !s.on_disk)
            goto out;
    }
    r = 0;
out:
    if (t)
        settle(t, cold);
    tier_cold_close(cold); /* first: it runs or cancels every callback naming t */
    tier_destroy(t);
    cmn_rmtree(dir);
    free(fk);
    return r;
}

void bench_holds(void)
{
    const char *name = "durable_holds_full_disk_vs_room", *what = "";
    double full[HROUNDS], room[HROUNDS];
    int r = 0;

    printf("# --- %s: %d durable commits of %d x %u B blocks waiting at once, their writes "
           "on a simulated disk full of disk-only blocks vs one with room\n", name, HK, HB, HBLK);
    for (int i = 0; i < HROUNDS && r == 0; i++)
        if ((r = round_once(false, 0x686f6c64ull + (uint64_t)i, &room[i], &what)) == 0)
            r = round_once(true, 0x686f6c64ull + (uint64_t)i, &full[i], &what);
    if (r < 0) {
        bench_fail(name, what, r);
        return;
    }
    double f = bench_median(full, HROUNDS), m = bench_median(room, HROUNDS);

    printf("# full disk %.3f s, disk with room %.3f s (medians of %d)\n", f, m, HROUNDS);
        /* each write's walk for a victim prunes first, O(holds + waits): several
     * times the roomy disk by design. 16 catches the O(holds x waits) walk
     * (64); it was 8 until the roomy disk lost its own O(waits^2) retry
     * (0.63 -> 0.19 s), which moved the same full disk from 2.7 to 7 */
    bench_report(name, f / m, "%.2f", "x", "<=", "16");
}
