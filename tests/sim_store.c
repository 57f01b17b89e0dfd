/* SPDX-License-Identifier: MIT */
/*
 * sim_store.c - the store's deterministic simulation (tests/sim/) inside the
 * suite: fixed seeds, a fixed number of steps each (a budget of well under a
 * minute here; fewer steps under the sanitizers and memcheck, which are
 * slower). A failure names its seed and step; `make sim SEED=... STEPS=...`
 * replays it with the trace.
 */
#include <criterion/criterion.h>
#include <stdlib.h>

#include "sim.h"

static uint64_t steps_for(uint64_t plain)
{
    if (getenv("KVT_TEST_VALGRIND"))
        return plain / 20;
#if defined(__SANITIZE_ADDRESS__)
    return plain / 4;
#else
    return plain;
#endif
}

static void run_seeds_on(uint64_t first, int n, bool faults, enum tier_evict_policy p,
                         uint64_t cold_bytes)
{
    for (int i = 0; i < n; i++) {
        /* keep and reuse adapt often: their learnt orders under the checker */
        struct sim_opts o = { .seed = first + (uint64_t)i, .steps = steps_for(20000),
                              .faults = faults, .policy = p, .adapt_min = 16,
                              .cold_bytes = cold_bytes };
        struct sim_result r;
        int rc = sim_run(&o, &r);

        cr_assert_geq(rc, -1, "seed %llu: the world could not be set up: %d",
                      (unsigned long long)o.seed, rc);
        cr_assert_eq(rc, 0, "seed %llu%s: %s (replay: make sim SEED=%llu STEPS=%llu%s "
                     "COLD_MIB=%llu)", (unsigned long long)o.seed, faults ? " with faults" : "",
                     r.failure, (unsigned long long)o.seed, (unsigned long long)r.steps + 1,
                     faults ? " FAULTS=1" : "",
                     (unsigned long long)(cold_bytes ? cold_bytes >> 20 : 12));
        if (o.steps >= 10000) { /* (memcheck's short runs may see none) */
            cr_assert_gt(r.crashes, 0, "seed %llu: no crash in %llu steps",
                     (unsigned long long)o.seed, (unsigned long long)r.steps);
            cr_assert_gt(r.pins_checked, 0, "seed %llu: no pinned run was got",
                         (unsigned long long)o.seed);
            if (p != TIER_EVICT_LRU)
                cr_assert_gt(r.adaptations, 20, "seed %llu: %s adapted %llu times only",
                             (unsigned long long)o.seed, tier_evict_policy_name(p),
                             (unsigned long long)r.adaptations);
        }
    }
}

static void run_seeds_with(uint64_t first, int n, bool faults, enum tier_evict_policy p)
{
    run_seeds_on(first, n, faults, p, 0);
}

static void run_seeds(uint64_t first, int n, bool faults)
{
    run_seeds_with(first, n, faults, TIER_EVICT_LRU);
}

/* Three runs of two seeds each, so that -j2 runs them side by side. */
Test(sim_store, seeds_1_2, .timeout = 600)
{
    run_seeds(1, 2, false);
}

Test(sim_store, seeds_3_4_with_disk_faults, .timeout = 600)
{
    run_seeds(3, 2, true);
}

Test(sim_store, seeds_5_6, .timeout = 600)
{
    run_seeds(5, 2, false);
}

/* The keep policy (both of its lists in play: it starts at a share of 0.5). */
Test(sim_store, keep_seeds_1_2, .timeout = 600)
{
    run_seeds_with(1, 2, false, TIER_EVICT_KEEP);
}

/* Seed 3 with faults failed the orphan-age check under both policies: an
 * orphan's demotion waited past 250 steps for a data sync that backlogged
 * reads kept out of the disk queue (fixed by the syncs' reserved slots,
 * tier_cold.c; tier_cold_pipeline/a_sync_is_not_starved_by_backlogged_reads). */
Test(sim_store, keep_seeds_3_4_with_disk_faults, .timeout = 600)
{
    run_seeds_with(3, 2, true, TIER_EVICT_KEEP);
}

/* The reuse policy: learnt classes on seven lists per size class, under
 * the checker at every step, with and without disk faults. */
Test(sim_store, reuse_seeds_1_2, .timeout = 600)
{
    run_seeds_with(1, 2, false, TIER_EVICT_REUSE);
}

Test(sim_store, reuse_seeds_3_4_with_disk_faults, .timeout = 600)
{
    run_seeds_with(3, 2, true, TIER_EVICT_REUSE);
}

/* A disk of 3 MiB (a tenth of the blocks): its evictions and durable holds
 * at almost every write, and fragmented room (kvtsim --cold-mib 3). */
Test(sim_store, small_disk_seeds_5_6_with_disk_faults, .timeout = 600)
{
    run_seeds_on(5, 2, true, TIER_EVICT_LRU, 3u << 20);
}
