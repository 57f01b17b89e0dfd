/* SPDX-License-Identifier: MIT */
/*
 * put_get.c - figures 1 and 2: put + get of batches of 2 MiB and 64 KiB
 * blocks through tierd, against memcpy and a redis-server.
 */
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "bench.h"

/* ---- figures 1 and 2: put + get of batches ------------------------------ */

#define PG_BATCH 64

/*
 * Like for like: every contender takes its bytes from the same caller-owned,
 * pre-faulted source buffers and leaves them in the same caller-owned,
 * pre-faulted destination buffers.
 *   memcpy:  src -> tmp -> dst, tmp being a pre-faulted staging area;
 *   kvtier:  kvt_put(src) into pool slots, kvt_get() into dst, kvt_remove()
 *            (fresh keys every batch, so nothing is deduplicated);
 *   redis:   64 pipelined SETs from src, 64 pipelined GETs copied into dst.
 */
struct pg {
    size_t bs;        /* block bytes */
    void *src_mem, *dst_mem, *tmp_mem; /* PG_BATCH * bs each */
    void *src[PG_BATCH], *dst[PG_BATCH], *tmp[PG_BATCH];
    kvt_ns *ns;
    uint64_t key_seed; /* fresh keys for every kvtier batch */
    kvt_key keys[PG_BATCH];
    redisContext *rc;  /* NULL: no redis contender */
    const char *what;  /* the call that failed, for the report */
};

static int pg_memcpy(void *arg)
{
    struct pg *p = arg;
    for (int i = 0; i < PG_BATCH; i++)
        memcpy(p->tmp[i], p->src[i], p->bs);
    for (int i = 0; i < PG_BATCH; i++)
        memcpy(p->dst[i], p->tmp[i], p->bs);
    return 0;
}

/* Map a short count to an error so that the round stops. */
static int want(struct pg *p, const char *what, int r, int n)
{
    if (r == n)
        return 0;
    p->what = what;
    return r < 0 ? r : -EIO;
}

static int pg_kvtier(void *arg)
{
    struct pg *p = arg;
    int r;

    bench_rand_keys(&p->key_seed, p->keys, PG_BATCH);
    r = kvt_put(p->ns, NULL, p->keys, PG_BATCH, (const void *const *)p->src);
    if ((r = want(p, "kvt_put", r, PG_BATCH)) < 0)
        return r;
    r = kvt_get(p->ns, p->keys, PG_BATCH, p->dst);
    if ((r = want(p, "kvt_get", r, PG_BATCH)) < 0)
        return r;
    r = kvt_remove(p->ns, p->keys, PG_BATCH);
    return want(p, "kvt_remove", r, PG_BATCH);
}

/* One pipelined round of PG_BATCH SETs of src (set) or GETs into dst:
 * append them all, then read every reply. 0; 1 when a reply was not the
 * one expected (the rest still read); -EIO when the connection failed,
 * said in p->what. */
static int pg_redis_round(struct pg *p, char (*key)[16], const size_t *klen, bool set)
{
    int bad = 0;

    for (int i = 0; i < PG_BATCH; i++) {
        const char *argv[3] = { set ? "SET" : "GET", key[i], p->src[i] };
        size_t len[3] = { 3, klen[i], p->bs };

        if (redisAppendCommandArgv(p->rc, set ? 3 : 2, argv, len) != REDIS_OK)
            goto out_conn;
    }
    for (int i = 0; i < PG_BATCH; i++) {
        redisReply *rep;

        if (redisGetReply(p->rc, (void **)&rep) != REDIS_OK)
            goto out_conn;
        if (set)
            bad |= rep->type != REDIS_REPLY_STATUS;
        else if (rep->type == REDIS_REPLY_STRING && rep->len == p->bs)
            memcpy(p->dst[i], rep->str, p->bs);
        else
            bad = 1;
        freeReplyObject(rep);
    }
    return bad;
out_conn:
    p->what = p->rc->errstr[0] ? p->rc->errstr : "redis connection";
    return -EIO;
}

static int pg_redis(void *arg)
{
    struct pg *p = arg;
    char key[PG_BATCH][16];
    size_t klen[PG_BATCH];
    int set, get;

    for (int i = 0; i < PG_BATCH; i++)
        klen[i] = (size_t)snprintf(key[i], sizeof(key[i]), "tb:%d", i);
    if ((set = pg_redis_round(p, key, klen, true)) < 0)
        return set;
    if ((get = pg_redis_round(p, key, klen, false)) < 0)
        return get;
    if (set || get) {
        p->what = "redis SET/GET reply";
        return -EIO;
    }
    return 0;
}

static void pg_free(struct pg *p)
{
    size_t bytes = PG_BATCH * p->bs;
    bench_free_faulted(p->src_mem, bytes);
    bench_free_faulted(p->dst_mem, bytes);
    bench_free_faulted(p->tmp_mem, bytes);
}

static int pg_init(struct pg *p, size_t bs)
{
    size_t bytes = PG_BATCH * bs;
    memset(p, 0, sizeof(*p));
    p->bs = bs;
    p->key_seed = 0x6b767469657262ull ^ bs; /* fixed: runs are repeatable */
    p->src_mem = bench_alloc_faulted(bytes, 1);
    p->dst_mem = bench_alloc_faulted(bytes, 2);
    p->tmp_mem = bench_alloc_faulted(bytes, 3);
    if (!p->src_mem || !p->dst_mem || !p->tmp_mem) {
        pg_free(p);
        return -ENOMEM;
    }
    for (int i = 0; i < PG_BATCH; i++) {
        p->src[i] = (char *)p->src_mem + (size_t)i * bs;
        p->dst[i] = (char *)p->dst_mem + (size_t)i * bs;
        p->tmp[i] = (char *)p->tmp_mem + (size_t)i * bs;
    }
    return 0;
}

/*
 * Warm-up: write every slot of the pool once, so that neither this process's
 * page tables nor the pool's pages fault during the timed rounds, whatever
 * order the store hands slots out in. We put 1.25 pool-fulls of fresh
 * blocks (the store evicts the oldest past its high watermark), check one
 * batch's bytes on the way, then remove whatever is left.
 */
static int pg_warm(struct pg *p, kvt_client *c)
{
    kvt_stats st = { 0 };
    uint64_t cap = 0;
    int r;

    if (kvt_stats_get(c, &st) == 0)
        cap = st.tier[KVT_TIER_WARM].bytes_capacity;
    if (cap == 0)
        cap = GIB;
    size_t batches = (size_t)(cap / (PG_BATCH * p->bs) * 5 / 4 + 1);
    kvt_key *keys = malloc(batches * PG_BATCH * sizeof(*keys));
    if (!keys)
        return -ENOMEM;
    bench_rand_keys(&p->key_seed, keys, batches * PG_BATCH);

    for (size_t b = 0; b < batches; b++) {
        r = kvt_put(p->ns, NULL, keys + b * PG_BATCH, PG_BATCH, (const void *const *)p->src);
        if (r < 0) {
            p->what = "kvt_put (warm-up)";
            goto out;
        }
    }
    /* the last batch is surely still resident: read it back and check it */
    memset(p->dst_mem, 0, PG_BATCH * p->bs);
    r = kvt_get(p->ns, keys + (batches - 1) * PG_BATCH, PG_BATCH, p->dst);
    if ((r = want(p, "kvt_get (warm-up)", r, PG_BATCH)) < 0)
        goto out;
    if (memcmp(p->src_mem, p->dst_mem, PG_BATCH * p->bs) != 0) {
        p->what = "kvt_get returned other bytes than kvt_put stored";
        r = -EIO;
        goto out;
    }
    for (size_t b = batches; b-- > 0;) {
        r = kvt_remove(p->ns, keys + b * PG_BATCH, PG_BATCH);
        if (r < 0) {
            p->what = "kvt_remove (warm-up)";
            goto out;
        }
    }
    printf("# warm-up: %zu batches (%.0f MiB) through a %.0f MiB pool, data checked\n", batches,
           (double)(batches * PG_BATCH * p->bs) / MIB, (double)cap / MIB);
    r = 0;
out:
    free(keys);
    return r;
}

/*
 * Where a kvtier batch spends its time, for the context lines: the same
 * put / get / remove as pg_kvtier, each call timed on its own, plus the
 * memcpy share, over one round. Medians are not needed for a breakdown;
 * means over a round are printed.
 */
static int pg_breakdown(struct pg *p)
{
    uint64_t t_put = 0, t_get = 0, t_rm = 0, t_mc = 0, n = 0, t0 = cmn_now_ns(), a, b;
    int r;

    while (cmn_now_ns() - t0 < bench_opt.round_ns) {
        bench_rand_keys(&p->key_seed, p->keys, PG_BATCH);
        a = cmn_now_ns();
        r = kvt_put(p->ns, NULL, p->keys, PG_BATCH, (const void *const *)p->src);
        b = cmn_now_ns();
        t_put += b - a;
        if ((r = want(p, "kvt_put", r, PG_BATCH)) < 0)
            return r;
        r = kvt_get(p->ns, p->keys, PG_BATCH, p->dst);
        a = cmn_now_ns();
        t_get += a - b;
        if ((r = want(p, "kvt_get", r, PG_BATCH)) < 0)
            return r;
        r = kvt_remove(p->ns, p->keys, PG_BATCH);
        b = cmn_now_ns();
        t_rm += b - a;
        if ((r = want(p, "kvt_remove", r, PG_BATCH)) < 0)
            return r;
        pg_memcpy(p);
        t_mc += cmn_now_ns() - b;
        n++;
    }
    printf("# per batch: kvt_put %.1f us, kvt_get %.1f us, kvt_remove %.1f us; "
           "memcpy src->tmp->dst %.1f us\n", (double)t_put / 1e3 / (double)n,
           (double)t_get / 1e3 / (double)n, (double)t_rm / 1e3 / (double)n,
           (double)t_mc / 1e3 / (double)n);
    return 0;
}

struct pg_result {
    double memcpy_gbs, kvtier_gbs, redis_gbs; /* medians, GB/s of block bytes */
    double vs_memcpy, vs_redis;               /* medians of per-round ratios */
};

/* Interleave rounds of memcpy, kvtier and (when p->rc) redis. */
static int pg_measure(struct pg *p, struct pg_result *res)
{
    double t_mc[64], t_kv[64], t_rd[64], r_mc[64], r_rd[64];
    double bytes = (double)(PG_BATCH * p->bs);
    int n = bench_opt.rounds, r;

    /* one untimed pass of each, so caches and lazy set-up are out of the way */
    if ((r = pg_memcpy(p)) < 0 || (r = pg_kvtier(p)) < 0 || (p->rc && (r = pg_redis(p)) < 0))
        return r;
    for (int i = 0; i < n; i++) {
        if ((r = bench_timed_round(pg_memcpy, p, &t_mc[i])) < 0 ||
            (r = bench_timed_round(pg_kvtier, p, &t_kv[i])) < 0)
            return r;
        r_mc[i] = t_mc[i] / t_kv[i];
        if (p->rc) {
            if ((r = bench_timed_round(pg_redis, p, &t_rd[i])) < 0)
                return r;
            r_rd[i] = t_rd[i] / t_kv[i];
        }
    }
    res->memcpy_gbs = bytes / bench_median(t_mc, n) / 1e9;
    res->kvtier_gbs = bytes / bench_median(t_kv, n) / 1e9;
    res->vs_memcpy = bench_median(r_mc, n);
    if (p->rc) {
        res->redis_gbs = bytes / bench_median(t_rd, n) / 1e9;
        res->vs_redis = bench_median(r_rd, n);
    }
    return 0;
}

/* Mean microseconds of a 64-byte request / 64-byte reply round trip. */
static int bare_rtt_us(double *us)
{
    char msg[64] = { 0 };
    int sock, r = 0;
    pid_t pid = bench_echo_open(sizeof(msg), &sock);
    if (pid < 0)
        return (int)pid;
    uint64_t t0 = 0;
    for (int i = -100; i < 5000 && r == 0; i++) {
        if (i == 0)
            t0 = cmn_now_ns();
        if (send(sock, msg, sizeof(msg), 0) != sizeof(msg) ||
            recv(sock, msg, sizeof(msg), 0) != sizeof(msg))
            r = -EIO;
    }
    *us = (double)(cmn_now_ns() - t0) / 1e3 / 5000;
    bench_echo_close(sock, pid);
    return r;
}

/* Figure 1 for one block size, and figure 2 when with_redis. */
void bench_put_get(size_t bs, const char *pool, bool with_redis)
{
    char name[64], rname[] = "put_get_2MiB_vs_redis", tag[32];
    const char *target = bs >= 2 * MIB ? "0.8" : "0.6";
    struct bench_tierd d;
    struct bench_redis rs = { 0 };
    struct pg p;
    struct pg_result res = { 0 };
    int r;

    snprintf(name, sizeof(name), "put_get_%zu%s_vs_memcpy",
             (size_t)(bs >= MIB ? bs / MIB : bs / 1024), bs >= MIB ? "MiB" : "KiB");
    snprintf(tag, sizeof(tag), "pg%zuk", bs / 1024);
    printf("# --- %s: batches of %d blocks of %zu KiB, put then get (median of %d rounds)\n",
           name, PG_BATCH, bs / 1024, bench_opt.rounds);
    fflush(stdout);
    if ((r = pg_init(&p, bs)) < 0) {
        bench_fail(name, "buffers", r);
        if (with_redis)
            bench_fail(rname, "buffers", r);
        return;
    }
    if ((r = bench_tierd_start(&d, tag, pool, false)) < 0) {
        bench_fail(name, "tierd did not start", r);
        if (with_redis)
            bench_fail(rname, "tierd did not start", r);
        goto out_free;
    }
    if ((r = bench_ns_open(d.c, bs >= MIB ? "tierbench/put-get-2m" : "tierbench/put-get-64k", bs,
                     &p.ns)) < 0) {
        p.what = "kvt_ns_open";
        goto out_fail;
    }
    if ((r = pg_warm(&p, d.c)) < 0)
        goto out_fail;
    if (with_redis) {
        if ((r = bench_redis_start(&rs)) < 0) {
            bench_fail(rname, "redis-server did not start", r);
            with_redis = false;
        } else {
            p.rc = rs.rc;
        }
    }
    if ((r = pg_measure(&p, &res)) < 0)
        goto out_fail;

    printf("# memcpy src->tmp->dst: %.2f GB/s   kvtier put+get: %.2f GB/s (block bytes/s)\n",
           res.memcpy_gbs, res.kvtier_gbs);
    if ((r = pg_breakdown(&p)) < 0)
        printf("# per-call breakdown failed: %s: %s\n", p.what, kvt_strerror(r));
    double rtt;
    if (bare_rtt_us(&rtt) == 0)
        printf("# bare request/reply between two processes here: %.1f us; a kvtier batch "
               "makes 4 (reserve, commit, get, remove)\n", rtt);
    bench_report(name, res.vs_memcpy, "%.2f", "ratio", ">=", target);
    if (with_redis) {
        printf("# redis pipelined SET+GET: %.2f GB/s   kvtier: %.2f GB/s\n", res.redis_gbs,
               res.kvtier_gbs);
        bench_report(rname, res.vs_redis, "%.2f", "ratio", ">=", "3");
    }
    goto out_stop;

out_fail:
    bench_fail(name, p.what ? p.what : "put/get", r);
    if (with_redis)
        bench_fail(rname, p.what ? p.what : "put/get", r);
out_stop:
    bench_redis_stop(&rs);
    bench_tierd_stop(&d);
out_free:
    pg_free(&p);
}
