/* SPDX-License-Identifier: MIT */
/*
 * remote.c - figure 10: the remote tier on a 3-master Redis Cluster,
 * against redis-benchmark on the same cluster.
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
#include "tier_remote.h"

/* ---- figure 10: the remote tier on a 3-master Redis Cluster ------------- */

/*
 * The remote tier (store/tier_remote.c) pushes and pulls 2 MiB blocks
 * through its own API, in-process: puts are one job per block, gets one
 * job per 16 keys (a get request's batch), all submitted at once, so its
 * workers pipeline them per node. The baseline is redis-benchmark's own
 * figure for the same value size on the same cluster (--cluster, -P 16,
 * as many connections as our workers hold: 2 per node), as requests per
 * second times the value size. The ratios are medians of interleaved
 * rounds; the target is >= 0.8 each.
 */

#define RB_NODES 3

struct rb_cluster {
    pid_t pid[RB_NODES];
    int port[RB_NODES];
    char seeds[96];
};

static bool rb_ping(int port)
{
    struct timeval tv = { .tv_sec = 1 };
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    bool ok = rc && !rc->err && bench_redis_ping(rc);

    if (rc)
        redisFree(rc);
    return ok;
}

static bool rb_state_ok(int port)
{
    struct timeval tv = { .tv_sec = 1 };
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *rep = rc && !rc->err ? redisCommand(rc, "CLUSTER INFO") : NULL;
    bool ok = rep && rep->type == REDIS_REPLY_STRING && strstr(rep->str, "cluster_state:ok");

    if (rep)
        freeReplyObject(rep);
    if (rc)
        redisFree(rc);
    return ok;
}

static void rb_cluster_stop(struct rb_cluster *c)
{
    for (int i = 0; i < RB_NODES; i++)
        if (c->pid[i] > 0)
            bench_stop_child(c->pid[i]);
    memset(c->pid, 0, sizeof(c->pid));
}

/* Whether ok(port) holds for every node before secs from t0 (ns), asking
 * each every poll_ms. */
static bool all_nodes(const struct rb_cluster *c, bool (*ok)(int port), uint64_t t0,
                      unsigned secs, unsigned poll_ms)
{
    for (int i = 0; i < RB_NODES; i++)
        while (!ok(c->port[i])) {
            if (cmn_now_ns() - t0 > secs * 1000000000ull)
                return false;
            cmn_sleep_ms(poll_ms);
        }
    return true;
}

/* Three redis-servers in cluster mode, joined by redis-cli --cluster create. */
static int rb_cluster_start(struct rb_cluster *c)
{
    char cmd[512], log[PATH_MAX + 32];
    uint64_t t0 = cmn_now_ns();

    memset(c, 0, sizeof(*c));
    for (int i = 0; i < RB_NODES; i++) {
        char port_s[16], conf[PATH_MAX + 32];
        int p;

        /* the cluster bus listens on port + 10000 */
        do
            p = cmn_free_port();
        while (p > 0 && p > 55000);
        if (p < 0)
            return -EADDRNOTAVAIL;
        c->port[i] = p;
        snprintf(port_s, sizeof(port_s), "%d", p);
        snprintf(conf, sizeof(conf), "%s/nodes-%d.conf", bench_tmpdir, p);
        snprintf(log, sizeof(log), "%s/redis-%d.log", bench_tmpdir, p);
        char *argv[] = { "redis-server", "--port", port_s, "--bind", "127.0.0.1",
                         "--cluster-enabled", "yes", "--cluster-config-file", conf, "--save", "",
                         "--appendonly", "no", "--daemonize", "no", "--dir", bench_tmpdir, NULL };
        c->pid[i] = bench_spawn(argv, log);
        if (c->pid[i] < 0)
            goto fail;
    }
    if (!all_nodes(c, rb_ping, t0, 10, 20))
        goto fail;
    snprintf(cmd, sizeof(cmd), "redis-cli --cluster create 127.0.0.1:%d 127.0.0.1:%d "
             "127.0.0.1:%d --cluster-replicas 0 --cluster-yes >%s/cluster-create.log 2>&1",
             c->port[0], c->port[1], c->port[2], bench_tmpdir);
    if (system(cmd) != 0)
        goto fail;
    if (!all_nodes(c, rb_state_ok, t0, 30, 50))
        goto fail;
    snprintf(c->seeds, sizeof(c->seeds), "127.0.0.1:%d,127.0.0.1:%d,127.0.0.1:%d", c->port[0],
             c->port[1], c->port[2]);
    printf("# redis cluster of %d masters on %s, ready after %.0f ms\n", RB_NODES, c->seeds,
           (double)(cmn_now_ns() - t0) / 1e6);
    return 0;
fail:
    printf("# redis cluster did not come up (logs in %s)\n", bench_tmpdir);
    rb_cluster_stop(c);
    return -ECHILD;
}

/* redis-benchmark's SET and GET rates (requests/s) for values of bytes. */
static int rb_redis_benchmark(const struct rb_cluster *c, size_t bytes, int n, int clients,
                              double *set_rps, double *get_rps)
{
    char cmd[512], line[512];
    FILE *f;

    *set_rps = *get_rps = 0;
    /* -r 64: a small keyspace, so that the GETs find values (a miss would
     * be a tiny reply, and flatter redis) */
    snprintf(cmd, sizeof(cmd), "redis-benchmark -h 127.0.0.1 -p %d --cluster -d %zu -P 16 "
             "-c %d -r 64 -t set,get -n %d -q --csv 2>/dev/null", c->port[0], bytes, clients,
             n);
    f = popen(cmd, "r");
    if (!f)
        return -errno;
    while (fgets(line, sizeof(line), f)) {
        char test[16];
        double rps;

        if (sscanf(line, "\"%15[^\"]\",\"%lf\"", test, &rps) != 2)
            continue;
        if (strcmp(test, "SET") == 0)
            *set_rps = rps;
        else if (strcmp(test, "GET") == 0)
            *get_rps = rps;
    }
    if (pclose(f) != 0 || *set_rps <= 0 || *get_rps <= 0)
        return -EIO;
    return 0;
}

static void rb_done(void *ctx, int rc)
{
    (void)rc;
    (*(unsigned *)ctx)++;
}

/* One round through the remote tier: n blocks of bs bytes put, or got in
 * jobs of 16 keys (verified on arrival). Returns seconds, or < 0. */
static double rb_round(struct tier_remote *r, bool put, const kvt_key *keys, size_t n,
                       uint8_t *src, uint8_t **dst, size_t bs, int *res)
{
    unsigned jobs = 0, done = 0;
    uint64_t t0 = cmn_now_ns();

    for (size_t i = 0; i < n; i += put ? 1 : 16) {
        size_t k = put ? 1 : (n - i < 16 ? n - i : 16);
        int rc = put ? tier_remote_put(r, 1, (const struct tier_key *)&keys[i], src, bs, false,
                                       rb_done, &done)
                     : tier_remote_get(r, 1, (const struct tier_key *)&keys[i], k,
                                       (void *const *)&dst[i], bs, &res[i], rb_done, &done);
        if (rc < 0)
            return rc;
        jobs++;
    }
    while (done < jobs)
        if (tier_remote_poll(r, true) < 0)
            return -EIO;
    for (size_t i = 0; !put && i < n; i++)
        if (res[i] != 0)
            return -ENOENT;
    return (double)(cmn_now_ns() - t0) / 1e9;
}

void bench_remote(void)
{
    enum { N = 192, ROUNDS = 5 };
    const size_t bs = 2 * MIB;
    const struct tier_remote_ns_desc bench_ns = {
        .tenant = "tierbench", .model_id = "tierbench/remote", .dtype = "", .layout = "",
        .block_tokens = 16, .block_bytes = bs, .tp_size = 1,
    };
    struct rb_cluster c;
    struct tier_remote *r = NULL;
    struct tier_remote_stats st;
    kvt_key keys[N];
    uint8_t *src = NULL, *dstmem = NULL, *dst[N];
    int res[N], rc;
    double put_ratio[ROUNDS], get_ratio[ROUNDS], put_gbs[ROUNDS], get_gbs[ROUNDS];
    double rset[ROUNDS], rget[ROUNDS];
    uint64_t seed = 4242;

    if (system("command -v redis-benchmark >/dev/null && command -v redis-cli >/dev/null") != 0) {
        bench_fail("remote_put_2MiB_vs_redis_benchmark", "redis-benchmark or redis-cli missing "
                    "(mk/deps.sh bench)", 0);
        bench_fail("remote_get_2MiB_vs_redis_benchmark", "redis-benchmark missing", 0);
        return;
    }
    if ((rc = rb_cluster_start(&c)) < 0) {
        bench_fail("remote_put_2MiB_vs_redis_benchmark", "no redis cluster", rc);
        bench_fail("remote_get_2MiB_vs_redis_benchmark", "no redis cluster", rc);
        return;
    }
    src = bench_alloc_faulted(bs, 7);
    dstmem = bench_alloc_faulted(N * bs, 8);
    {
        struct tier_remote_cfg cfg = { .seeds = c.seeds, .timeout_ms = 2000 };

        rc = src && dstmem ? tier_remote_open(&cfg, &r) : -ENOMEM;
    }
    if (rc < 0 || (rc = tier_remote_ns_add(r, 1, &bench_ns)) < 0)
        goto fail;
    bench_rand_keys(&seed, keys, N);
    for (int i = 0; i < N; i++)
        dst[i] = dstmem + (size_t)i * bs;
    /* warm-up: connections, slot maps, the servers' memory */
    if ((rc = (int)rb_round(r, true, keys, N, src, dst, bs, res)) < 0 ||
        (rc = (int)rb_round(r, false, keys, N, src, dst, bs, res)) < 0)
        goto fail;
    for (int i = 0; i < ROUNDS; i++) {
        double tp = rb_round(r, true, keys, N, src, dst, bs, res), tg;

        tg = tp < 0 ? tp : rb_round(r, false, keys, N, src, dst, bs, res);
        if (tp < 0 || tg < 0) {
            rc = (int)(tp < 0 ? tp : tg);
            goto fail;
        }
        rc = rb_redis_benchmark(&c, bs, N * 2, 2 * RB_NODES, &rset[i], &rget[i]);
        if (rc < 0)
            goto fail;
        put_gbs[i] = (double)N * (double)bs / tp / 1e9;
        get_gbs[i] = (double)N * (double)bs / tg / 1e9;
        put_ratio[i] = put_gbs[i] / (rset[i] * (double)bs / 1e9);
        get_ratio[i] = get_gbs[i] / (rget[i] * (double)bs / 1e9);
        printf("# round %d: remote tier put %.2f GB/s get %.2f GB/s; redis-benchmark SET "
               "%.2f GB/s GET %.2f GB/s\n", i, put_gbs[i], get_gbs[i],
               rset[i] * (double)bs / 1e9, rget[i] * (double)bs / 1e9);
    }
    tier_remote_stats_get(r, &st);
    printf("# remote tier: %llu puts, %llu hits, %llu errors, %llu checksum errors, "
           "%llu redirects; medians: put %.2f GB/s, get %.2f GB/s\n",
           (unsigned long long)st.puts, (unsigned long long)st.hits,
           (unsigned long long)st.errors, (unsigned long long)st.checksum_errors,
           (unsigned long long)st.redirects, bench_median(put_gbs, ROUNDS),
           bench_median(get_gbs, ROUNDS));
    bench_report("remote_put_2MiB_vs_redis_benchmark", bench_median(put_ratio, ROUNDS), "%.2f",
                 "ratio", ">=", "0.8");
    bench_report("remote_get_2MiB_vs_redis_benchmark", bench_median(get_ratio, ROUNDS), "%.2f",
                 "ratio", ">=", "0.8");
    goto out;
fail:
    bench_fail("remote_put_2MiB_vs_redis_benchmark", "remote tier round", rc);
    bench_fail("remote_get_2MiB_vs_redis_benchmark", "remote tier round", rc);
out:
    tier_remote_close(r);
    bench_free_faulted(src, bs);
    bench_free_faulted(dstmem, N * bs);
    rb_cluster_stop(&c);
}
