/* SPDX-License-Identifier: MIT */
/*
 * sim_main.c - kvtsim: run the store's simulation from the command line.
 *
 *   kvtsim [--seed N] [--steps N] [--seeds N] [--seconds S] [--faults]
 *          [--evict-policy lru|keep|reuse] [--adapt-min N] [--cold-mib N]
 *
 * --seeds runs that many seeds from --seed on; --seconds keeps running new
 * seeds until the time is up (make soak). Prints one line per run and the
 * figures; exits 1 at the first failing seed (its trace on stderr).
 * --cold-mib sets the disk's size (default 12 MiB, a third of the blocks the
 * world can hold): a smaller one makes the disk's evictions, and so its
 * durable holds, far more frequent.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kvt_common.h"
#include "sim.h"

static int num(const char *opt, const char *s, unsigned long long *out)
{
    char *end;

    errno = 0;
    *out = s ? strtoull(s, &end, 10) : 0;
    if (!s || !*s || *s == '-' || errno || *end) {
        fprintf(stderr, "kvtsim: %s needs a number, got '%s'\n", opt, s ? s : "");
        return -1;
    }
    return 0;
}

int main(int argc, char **argv)
{
    /* keep and reuse adapt every 16 blocks leaving warm at least, so that their
     * learnt orders are what the checker sees (the store's 1,024 is reached
     * a few times a run in this small warm); 0: the store's */
    unsigned long long seed = 1, steps = 20000, seeds = 1, seconds = 0, adapt = 16, cold = 0;
    struct sim_opts o = { 0 };
    struct sim_result r, sum = { 0 };
    double t0 = cmn_now_s(), el;
    unsigned long long runs = 0;

    for (int i = 1; i < argc; i++) {
        const char *a = argv[i], *v = i + 1 < argc ? argv[i + 1] : NULL;
        int rc = 0;

        if (!strcmp(a, "--seed"))
            rc = num(a, v, &seed), i++;
        else if (!strcmp(a, "--steps"))
            rc = num(a, v, &steps), i++;
        else if (!strcmp(a, "--seeds"))
            rc = num(a, v, &seeds), i++;
        else if (!strcmp(a, "--seconds"))
            rc = num(a, v, &seconds), i++;
        else if (!strcmp(a, "--faults"))
            o.faults = true;
        else if (!strcmp(a, "--evict-policy") && v && tier_evict_policy_parse(v, &o.policy) == 0)
            i++;
        else if (!strcmp(a, "--adapt-min")) {
            rc = num(a, v, &adapt), i++;
            if (rc == 0 && adapt > UINT32_MAX) {
                fprintf(stderr, "kvtsim: --adapt-min %llu is over %u\n", adapt, UINT32_MAX);
                return 2;
            }
        }
        else if (!strcmp(a, "--cold-mib")) {
            rc = num(a, v, &cold), i++;
            if (rc == 0 && (cold < 1 || cold > 1024)) {
                fprintf(stderr, "kvtsim: --cold-mib %llu is not in 1..1024\n", cold);
                return 2;
            }
        }
        else {
            fprintf(stderr, "usage: kvtsim [--seed N] [--steps N] [--seeds N] [--seconds S] "
                            "[--faults] [--evict-policy lru|keep|reuse] [--adapt-min N] "
                            "[--cold-mib N]\n");
            return 2;
        }
        if (rc < 0)
            return 2;
    }
    o.steps = steps;
    o.adapt_min = (uint32_t)adapt;
    o.cold_bytes = cold << 20;
    for (unsigned long long s = seed;; s++) {
        int rc;

        if (seconds ? cmn_now_s() - t0 >= (double)seconds : runs >= seeds)
            break;
        o.seed = s;
        rc = sim_run(&o, &r);
        runs++;
        sum.steps += r.steps;
        sum.crashes += r.crashes;
        sum.acked_durable += r.acked_durable;
        sum.bytes_checked += r.bytes_checked;
        sum.pins_checked += r.pins_checked;
        sum.refused += r.refused;
        sum.over_budget += r.over_budget;
        sum.cold_evicted += r.cold_evicted;
        sum.dropped += r.dropped;
        sum.adaptations += r.adaptations;
        for (int k = 0; k < SIM_OP_N; k++)
            sum.ops[k] += r.ops[k];
        if (rc < 0) {
            printf("sim: seed %llu FAILED: %s\n", s, rc == -1 ? r.failure : strerror(-rc));
            return 1;
        }
    }
    el = cmn_now_s() - t0;
    printf("sim: %llu seeds, %llu steps in %.1f s (%.0f steps/s): %llu crashes, %llu durable "
           "acks checked, %llu pinned runs got, %.1f GiB of bytes checked\n", runs,
           (unsigned long long)sum.steps, el, (double)sum.steps / (el > 0 ? el : 1),
           (unsigned long long)sum.crashes, (unsigned long long)sum.acked_durable,
           (unsigned long long)sum.pins_checked, (double)sum.bytes_checked / (1u << 30));
    printf("sim: NVMe admission kept %llu blocks off the disk (no second touch), %llu past "
           "the write budget\n", (unsigned long long)sum.refused,
           (unsigned long long)sum.over_budget);
    printf("sim: the disk evicted %llu blocks to make room; warm dropped %llu (not counting "
           "admission's)\n", (unsigned long long)sum.cold_evicted,
           (unsigned long long)sum.dropped);
    if (o.policy != TIER_EVICT_LRU)
        printf("sim: %s adapted %llu times (every %u blocks leaving warm at least)\n",
               tier_evict_policy_name(o.policy), (unsigned long long)sum.adaptations,
               o.adapt_min ? o.adapt_min : 1024);
    printf("sim: operations:");
    for (int k = 0; k < SIM_OP_N; k++)
        printf(" %s %llu", sim_op_name(k), (unsigned long long)sum.ops[k]);
    printf("\n");
    return 0;
}
