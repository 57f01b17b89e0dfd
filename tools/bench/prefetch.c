/* SPDX-License-Identifier: MIT */
/*
 * prefetch.c - figure 7: getting a cold chain with and without prefetch
 * during simulated engine work.
 */
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "bench.h"

/* ---- figure 7: prefetch ----------------------------------------------------- */

#define PF_CHAIN 64
#define PF_BS (256 * 1024)

static void spin_us(unsigned us)
{
    uint64_t t0 = cmn_now_ns();
    while (cmn_now_ns() - t0 < us * 1000ull) {
    }
}

/*
 * Chains of 64 blocks of 256 KiB, put durably, then tierd restarts so that
 * they are only on disk. Each trial takes a fresh chain: kvt_lookup (with
 * or without KVT_LOOKUP_PREFETCH), ~2 ms of busy "engine work", then the
 * timed get of all 64 blocks. With and without alternate, trial by trial.
 */
void bench_prefetch(void)
{
    const char *name = "prefetch_get_64_chain_speedup";
    const char *extra[] = { "--cold-bytes", "2G", "--cold-qd", "32", NULL };
    int trials = bench_opt.prefetch_trials, nchains = 2 * trials, r = -ENOMEM;
    uint8_t *src = bench_alloc_faulted(CQD * PF_BS, 0x7066);
    kvt_key *keys = malloc((size_t)nchains * PF_CHAIN * sizeof(*keys));
    const void **slots = malloc(PF_CHAIN * sizeof(*slots));
    kvt_lease *leases = malloc(PF_CHAIN * sizeof(*leases));
    double t[2][64];
    uint64_t calls[2] = { 0 }, shorts[2] = { 0 };
    const char *what = "buffers";
    struct bench_tierd d = { 0 };
    kvt_ns *ns = NULL;
    uint64_t seed = 0x707265666574ull;

    printf("# --- %s: get of a %d-block chain of %d KiB blocks only on disk, with and without "
           "a kvt_lookup(KVT_LOOKUP_PREFETCH) %u us of busy work before; %d trials each, "
           "alternating\n", name, PF_CHAIN, PF_BS / 1024, bench_opt.work_us, trials);
    fflush(stdout);
    if (!src || !keys || !slots || !leases)
        goto out_fail;
    bench_rand_keys(&seed, keys, (size_t)nchains * PF_CHAIN);
    what = "tierd did not start";
    if ((r = bench_tierd_start_ex(&d, "prefetch", "256M", false, extra, 30)) < 0)
        goto out_fail;
    what = "kvt_ns_open";
    if ((r = bench_ns_open(d.c, "tierbench/prefetch", PF_BS, &ns)) < 0)
        goto out_fail;
    for (int ch = 0; ch < nchains; ch++) {
        /* a chain in durable batches of CQD (keys[i]'s parent is keys[i - 1]):
         * a durable commit of more blocks than --cold-qd can hang (see the
         * report of this figure) */
        for (size_t at = 0; at < PF_CHAIN; at += CQD) {
            const kvt_key *k = keys + (size_t)ch * PF_CHAIN + at;
            if ((r = bench_put_durable(ns, at ? k - 1 : NULL, k, CQD, src, CQD, PF_BS,
                                 (size_t)ch * PF_CHAIN + at, &what, NULL)) < 0)
                goto out_fail;
        }
    }
    bench_tierd_stop(&d);
    ns = NULL;
    what = "tierd did not restart";
    if ((r = bench_tierd_start_ex(&d, "prefetch", "256M", false, extra, 30)) < 0)
        goto out_fail;
    bench_log_line(d.log, "cold tier");
    what = "kvt_ns_open";
    if ((r = bench_ns_open(d.c, "tierbench/prefetch", PF_BS, &ns)) < 0)
        goto out_fail;

    for (int ch = 0; ch < nchains; ch++) {
        int with = ch % 2, k = ch / 2, nl;
        const kvt_key *chain = keys + (size_t)ch * PF_CHAIN;

        r = kvt_lookup(ns, chain, PF_CHAIN, with ? KVT_LOOKUP_PREFETCH : 0, NULL);
        if ((r = bench_want_n(&what, "kvt_lookup", r, PF_CHAIN)) < 0)
            goto out_fail;
        spin_us(bench_opt.work_us);
        uint64_t t0 = cmn_now_ns();
        nl = bench_get_all(ns, chain, PF_CHAIN, slots, leases, &what, &calls[with], &shorts[with]);
        t[with][k] = (double)(cmn_now_ns() - t0) / 1e9;
        if ((r = nl) < 0)
            goto out_fail;
        for (int j = 0; j < PF_CHAIN && r >= 0; j++)
            if (bench_check_block(slots[j], src + (size_t)(j % CQD) * PF_BS, PF_BS,
                            (size_t)ch * PF_CHAIN + j, j == 0) < 0)
                r = -EBADMSG;
        for (int i = 0; i < nl; i++)
            kvt_release(ns, &leases[i]);
        if (r < 0) {
            what = "a block read back from disk holds other bytes than were put";
            goto out_fail;
        }
    }
    double t_without = bench_median(t[0], trials), t_with = bench_median(t[1], trials);
    printf("# get of the chain without prefetch: %.2f ms (median; %.1f get calls a chain)\n",
           t_without * 1e3, (double)calls[0] / trials);
    printf("# get of the chain %u us after a prefetching lookup: %.2f ms (median; %.1f get "
           "calls a chain)\n", bench_opt.work_us, t_with * 1e3, (double)calls[1] / trials);
    if (shorts[0] + shorts[1])
        printf("# tierd answered %" PRIu64 " of %" PRIu64 " gets short: with --cold-qd %d, a "
               "get (or a prefetch) starts at most %d reads, and a get stops its leading run "
               "at the first block whose read cannot start; the rest are reported as misses "
               "although they are on disk, so the client asks again\n",
               shorts[0] + shorts[1], calls[0] + calls[1], CQD, CQD);
    bench_report(name, t_without / t_with, "%.2f", "ratio", ">=", "1");
    goto out;

out_fail:
    bench_fail(name, what, r);
out:
    bench_tierd_stop(&d);
    if (d.data[0])
        cmn_rmtree(d.data);
    bench_free_faulted(src, CQD * PF_BS);
    free(keys);
    free(slots);
    free(leases);
}
