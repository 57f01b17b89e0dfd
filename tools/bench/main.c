/* SPDX-License-Identifier: MIT */
/*
 * main.c - tierbench: every performance figure of kvtier beside its target.
 *
 * Starts its own private tierd, one at a time (and a redis-server, and fio
 * on a file beside tierd's cold tier, for comparisons), moves blocks through
 * libkvtier, drives the in-process store and the key hash, and prints one
 * greppable line per figure:
 *     bench: <name> <value> <unit> target <op> <number>
 * plus context lines starting with '#'. Where the target is a ratio, the
 * baseline is measured in the same run, interleaved round by round, so that
 * machine noise hits both sides alike. A missed target is reported, not
 * fatal; the exit status is non-zero only when something could not be
 * measured (a daemon did not start, a call failed, a hash came out wrong).
 * One file per figure (bench.h lists them); the harness is harness.c.
 */

#include "bench.h"

/* ---- main ---------------------------------------------------------------- */

static void usage(FILE *f)
{
    fprintf(f,
            "usage: tierbench [options]\n"
            "  --only LIST       comma-separated groups: put, lookup, inproc, hash, cold,\n"
            "                    prefetch, restart, hybrid, remote (default all)\n"
            "  --no-redis        skip the redis-server comparison\n"
            "  --rounds N        timed rounds per figure, median reported (default 7)\n"
            "  --round-ms MS     minimum length of a timed round (default 100)\n"
            "  --hash-runs N     timed runs of the hash figure (default 25)\n"
            "  --pool-2m SIZE    tierd --warm-bytes for 2 MiB put/get (default 1G)\n"
            "  --pool-64k SIZE   tierd --warm-bytes for 64 KiB put/get (default 256M)\n"
            "  --pool-lookup SIZE tierd --warm-bytes for the lookup figure (default 5G)\n"
            "  --cold-mib N      MiB per round of the cold write/read figures (default 512)\n"
            "  --cold-rounds N   rounds of the cold figures (default 8)\n"
            "  --prefetch-trials N  chains got with prefetch, and as many without (default 15)\n"
            "  --work-us N       busy work between the prefetching lookup and the get (2000)\n"
            "  --restart-blocks N  blocks in the cold index of the restart figure (1000000)\n"
            "fio (Debian's fio package) is the baseline of the cold figures.\n"
            "tierd is $KVT_TEST_BIN/tierd (default ./build/tierd).\n");
}

static int parse_groups(const char *s, unsigned *out)
{
    static const struct { const char *name; unsigned g; } tab[] = {
        { "put", BENCH_GRP_PUT }, { "lookup", BENCH_GRP_LOOKUP }, { "inproc", BENCH_GRP_INPROC },
        { "hash", BENCH_GRP_HASH }, { "cold", BENCH_GRP_COLD }, { "prefetch", BENCH_GRP_PREFETCH },
        { "restart", BENCH_GRP_RESTART }, { "hybrid", BENCH_GRP_HYBRID },
        { "remote", BENCH_GRP_REMOTE }, { "all", BENCH_GRP_ALL },
    };
    char buf[128];
    *out = 0;
    snprintf(buf, sizeof(buf), "%s", s);
    for (char *sv, *w = strtok_r(buf, ",", &sv); w; w = strtok_r(NULL, ",", &sv)) {
        size_t i = 0;
        while (i < sizeof(tab) / sizeof(tab[0]) && strcmp(tab[i].name, w) != 0)
            i++;
        if (i == sizeof(tab) / sizeof(tab[0]))
            return -EINVAL;
        *out |= tab[i].g;
    }
    return *out ? 0 : -EINVAL;
}

/* A number of an option in [lo, hi]. */
#define NUM(name, key, lo, hi) { name, key, CMN_OPT_UINT, lo, hi, 0, 0, false }
/* A tierd --warm-bytes (checked here, passed on as written). */
#define POOL(name, key) { name, key, CMN_OPT_SIZE, 1, 0, 0, 0, false }

static int parse_args(int argc, char **argv)
{
    static const struct cmn_opt tab[] = {
        { "only", 'o', CMN_OPT_TEXT, 0, 0, 0, 0, false },
        { "no-redis", 'R', CMN_OPT_FLAG, 0, 0, 0, 0, false },
        { "help", 'h', CMN_OPT_FLAG, 0, 0, 0, 0, true },
        NUM("rounds", 'r', 1, 64),          NUM("round-ms", 'm', 1, 3600000),
        NUM("hash-runs", 'H', 1, 256),      NUM("cold-mib", 'c', 2, 64 * 1024),
        NUM("cold-rounds", 'C', 1, 64),     NUM("prefetch-trials", 'P', 1, 64),
        NUM("work-us", 'w', 0, 60000000),   NUM("restart-blocks", 'B', 1000, 100000000),
        POOL("pool-2m", '2'),               POOL("pool-64k", '6'),
        POOL("pool-lookup", 'L'),
        { NULL },
    };
    struct cmn_opts p;
    int c;

    cmn_opts_init(&p, tab);
    while ((c = cmn_opts_next(&p, argc, argv)) != -1) {
        uint64_t v = p.u;

        switch (c) {
        case 'o':
            if (parse_groups(p.arg, &bench_opt.groups) < 0) {
                fprintf(stderr, "tierbench: --only '%s': not a list of groups\n", p.arg);
                return -EINVAL;
            }
            break;
        case 'R': bench_opt.redis = false; break;
        case 'r': bench_opt.rounds = (int)v; break;
        case 'm': bench_opt.round_ns = v * 1000000ull; break;
        case 'H': bench_opt.hash_runs = (int)v; break;
        case 'c': bench_opt.cold_bytes = v * MIB; break;
        case 'C': bench_opt.cold_rounds = (int)v; break;
        case 'P': bench_opt.prefetch_trials = (int)v; break;
        case 'w': bench_opt.work_us = (unsigned)v; break;
        case 'B': bench_opt.restart_blocks = (size_t)v; break;
        case '2': bench_opt.pool_2m = p.arg; break;
        case '6': bench_opt.pool_64k = p.arg; break;
        case 'L': bench_opt.pool_lookup = p.arg; break;
        case 'h':
            usage(stdout);
            exit(0);
        default:
            fprintf(stderr, "tierbench: %s\n", p.err);
            return -EINVAL;
        }
    }
    if (optind == argc)
        return 0;
    fprintf(stderr, "tierbench: unexpected argument '%s'\n", argv[optind]);
    return -EINVAL;
}

int main(int argc, char **argv)
{
    uint64_t t0 = cmn_now_ns();
    int rc;

    if (parse_args(argc, argv) < 0) {
        usage(stderr);
        return 2;
    }
    if ((rc = bench_setup()) < 0) {
        fprintf(stderr, "tierbench: a temp folder: %s\n", strerror(-rc));
        return 1;
    }
    setvbuf(stdout, NULL, _IOLBF, 0);

    printf("# tierbench: %ld CPUs online; rounds %d x >= %" PRIu64 " ms; temp dir %s\n",
           sysconf(_SC_NPROCESSORS_ONLN), bench_opt.rounds, bench_opt.round_ns / 1000000,
           bench_tmpdir);
    if (bench_opt.groups & BENCH_GRP_PUT) {
        bench_put_get(2 * MIB, bench_opt.pool_2m, bench_opt.redis);
        bench_put_get(64 * 1024, bench_opt.pool_64k, false);
    }
    if (bench_opt.groups & (BENCH_GRP_LOOKUP | BENCH_GRP_INPROC))
        bench_lookups(bench_opt.groups);
    if (bench_opt.groups & BENCH_GRP_INPROC)
        bench_holds();
    if (bench_opt.groups & BENCH_GRP_HASH)
        bench_hash();
    if (bench_opt.groups & BENCH_GRP_COLD) {
        bench_cold(2 * MIB);
        bench_cold(256 * 1024);
    }
    if (bench_opt.groups & BENCH_GRP_PREFETCH)
        bench_prefetch();
    if (bench_opt.groups & BENCH_GRP_RESTART)
        bench_restart();
    if (bench_opt.groups & BENCH_GRP_HYBRID)
        bench_hybrid();
    if (bench_opt.groups & BENCH_GRP_REMOTE)
        bench_remote();

    return bench_finish(t0);
}
