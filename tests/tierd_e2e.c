/* SPDX-License-Identifier: MIT */
/*
 * tierd_e2e.c - the whole path across processes: a private tierd, engine
 * processes that put, look up and get through libkvtier, a client killed
 * while holding leases, and eight processes at once.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"

#define BLK (64u << 10)

static const char *const small_pool[] = { "--warm-bytes", "64M", NULL };

/* Child: put the chain of n (<= 64) blocks of seed, exit 0 on success. */
static int put_chain(const char *sock, uint64_t seed, size_t n)
{
    kvt_client *c;
    kvt_ns *ns;
    kvt_key keys[64];
    void *slots[64];
    int rc;
    kvt_model m = t_model(BLK);

    if (kvt_connect(sock, &c) || kvt_ns_open(c, &m, &ns))
        return 10;
    t_keys(keys, n, seed);
    rc = kvt_put_reserve(ns, NULL, keys, n, slots);
    if (rc != (int)n)
        return 11;
    for (size_t i = 0; i < n; i++)
        t_fill(slots[i], BLK, seed * 1000 + i);
    if (kvt_put_commit(ns, keys, n) != (int)n)
        return 12;
    kvt_close(c);
    return 0;
}

/* Put the chain from another process (a client of its own), and wait for it. */
static void put_from_child(const char *sock, uint64_t seed, size_t n)
{
    pid_t p = fork();

    cr_assert_geq(p, 0);
    if (p == 0)
        _exit(put_chain(sock, seed, n));
    cr_assert_eq(t_wait(p), 0, "the child putting chain %llu failed", (unsigned long long)seed);
}

Test(tierd_e2e, chain_put_by_one_process_is_served_to_another)
{
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key keys[64];
    const void *slots[64];
    uint8_t tiers[64];
    kvt_lease lease;
    int hits;

    t_tierd_start(&d, small_pool);
    put_from_child(d.sock, 7, 64); /* process A */

    /* process B: this one (a separate process from A) */
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    t_keys(keys, 64, 7);
    hits = kvt_lookup(ns, keys, 64, 0, tiers);
    cr_assert_eq(hits, 64, "lookup: expected 64 leading hits, got %d", hits);
    for (int i = 0; i < 64; i++)
        cr_assert_eq(tiers[i], KVT_TIER_WARM, "key %d: tier %d, expected warm", i, tiers[i]);
    hits = kvt_get_lease(ns, keys, 64, slots, &lease);
    cr_assert_eq(hits, 64, "get: expected 64 blocks, got %d", hits);
    for (int i = 0; i < 64; i++) {
        long bad = t_check(slots[i], BLK, 7 * 1000 + (uint64_t)i);

        cr_assert_eq(bad, -1, "block %d: wrong byte at offset %ld", i, bad);
    }
    cr_assert_eq(kvt_release(ns, &lease), 0);

    /* a chain with a hole: the leading run stops at the hole */
    {
        kvt_key probe[3] = { keys[0], keys[1], keys[2] };

        probe[1].b[0] ^= 1;
        hits = kvt_lookup(ns, probe, 3, 0, tiers);
        cr_assert_eq(hits, 1, "lookup over a hole: expected 1, got %d", hits);
        cr_assert_eq(tiers[1], KVT_TIER_NONE);
        cr_assert_eq(tiers[2], KVT_TIER_WARM, "a key after the hole is still reported");
    }
    kvt_close(c);
    t_tierd_stop(&d);
}

Test(tierd_e2e, sigkilled_client_has_its_leases_and_reservations_reclaimed)
{
    struct t_tierd d;
    int pfd[2];
    pid_t v;
    kvt_client *c;
    kvt_ns *ns;
    kvt_stats st;
    char ok;

    t_tierd_start(&d, small_pool);
    put_from_child(d.sock, 3, 32);
    cr_assert_eq(pipe(pfd), 0);
    v = fork();
    if (v == 0) {
        /* the victim: lease the chain, reserve 8 more, then wait to die */
        kvt_client *vc;
        kvt_ns *vns;
        kvt_key keys[40];
        const void *slots[32];
        void *wslots[8];
        kvt_lease lease;

        vc = NULL;
        if (kvt_connect(d.sock, &vc))
            _exit(1);
        kvt_model m = t_model(BLK);
        if (kvt_ns_open(vc, &m, &vns))
            _exit(2);
        t_keys(keys, 32, 3);
        t_keys(keys + 32, 8, 4);
        if (kvt_get_lease(vns, keys, 32, slots, &lease) != 32)
            _exit(3);
        if (kvt_put_reserve(vns, &keys[31], keys + 32, 8, wslots) != 8)
            _exit(4);
        if (write(pfd[1], "x", 1) != 1)
            _exit(5);
        pause();
        _exit(0);
    }
    close(pfd[1]);
    cr_assert_eq(read(pfd[0], &ok, 1), 1, "victim did not reach its leases");
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    cr_assert_eq(kvt_stats_get(c, &st), 0);
    cr_assert_eq(st.leases_active, 32, "leases before the kill: %llu",
                 (unsigned long long)st.leases_active);
    cr_assert_eq(st.reserved, 8);
    kill(v, SIGKILL);
    cr_assert_eq(t_wait(v), 128 + SIGKILL);
    /* the daemon sees the EOF on its next loop turn; poll briefly */
    for (int i = 0; i < 200; i++) {
        cr_assert_eq(kvt_stats_get(c, &st), 0);
        if (st.leases_active == 0 && st.reserved == 0)
            break;
        usleep(10000);
    }
    cr_assert_eq(st.leases_active, 0, "leases left after SIGKILL: %llu",
                 (unsigned long long)st.leases_active);
    cr_assert_eq(st.reserved, 0, "reservations left after SIGKILL: %llu",
                 (unsigned long long)st.reserved);
    cr_assert_eq(st.reclaimed, 40, "reclaimed: expected 40, got %llu",
                 (unsigned long long)st.reclaimed);
    cr_assert_eq(st.tier[KVT_TIER_WARM].blocks, 32, "committed blocks survive");
    cr_assert_eq(st.tier[KVT_TIER_WARM].bytes_used, 32ull * BLK,
                 "no slot leaked: %llu bytes used", (unsigned long long)st.tier[2].bytes_used);
    /* the leased blocks are evictable again: removable now */
    {
        kvt_key keys[32];

        t_keys(keys, 32, 3);
        cr_assert_eq(kvt_remove(ns, keys, 32), 32);
    }
    kvt_close(c);
    t_tierd_stop(&d);
}

/* Child of the concurrency test: rounds of put / lookup / get / verify on
 * its own chains and on a chain shared by all. */
static int worker(const char *sock, int w)
{
    enum { N = 16, ROUNDS = 40 };
    kvt_client *c;
    kvt_ns *ns;
    kvt_key keys[N];
    static uint8_t buf[N][BLK];
    const void *src[N];
    void *dst[N];
    kvt_model m = t_model(BLK);

    if (kvt_connect(sock, &c) || kvt_ns_open(c, &m, &ns))
        return 10;
    for (int r = 0; r < ROUNDS; r++) {
        /* odd rounds: the shared chain (seed 999), even: a private one */
        uint64_t seed = (r & 1) ? 999 : (uint64_t)(w * 1000 + r);
        int rc;

        t_keys(keys, N, seed);
        for (int i = 0; i < N; i++) {
            t_fill(buf[i], BLK, seed * 100 + (uint64_t)i);
            src[i] = buf[i];
            dst[i] = buf[i];
        }
        rc = kvt_put(ns, NULL, keys, N, src);
        if (rc < 0)
            return 11;
        /* on the shared chain another worker may still be writing blocks
         * our put deduplicated: they appear when it commits (bounded wait) */
        for (int tries = 0;; tries++) {
            memset(buf, 0, sizeof(buf));
            rc = kvt_get(ns, keys, N, dst);
            if (rc == N || !(r & 1) || rc < 0 || tries == 2000)
                break;
            usleep(1000);
        }
        if (rc != N)
            return 12;
        for (int i = 0; i < N; i++)
            if (t_check(buf[i], BLK, seed * 100 + (uint64_t)i) != -1)
                return 13;
        if (kvt_lookup(ns, keys, N, 0, NULL) != N)
            return 14;
    }
    kvt_close(c);
    return 0;
}

Test(tierd_e2e, eight_processes_put_and_get_concurrently)
{
    struct t_tierd d;
    pid_t p[8];
    kvt_client *c;
    kvt_stats st;
    static const char *const args[] = { "--warm-bytes", "512M", NULL };

    t_tierd_start(&d, args);
    for (int w = 0; w < 8; w++) {
        p[w] = fork();
        if (p[w] == 0)
            _exit(worker(d.sock, w));
    }
    for (int w = 0; w < 8; w++) {
        int st_w = t_wait(p[w]);

        cr_assert_eq(st_w, 0, "worker %d failed with status %d (10 connect, 11 put, "
                              "12 get, 13 wrong bytes, 14 lookup)", w, st_w);
    }
    c = t_connect(&d);
    cr_assert_eq(kvt_stats_get(c, &st), 0);
    cr_assert_eq(st.leases_active, 0);
    cr_assert_eq(st.reserved, 0);
    cr_assert_eq(st.proto_errors, 0);
    /* 8 x 20 private chains of 16, plus one shared chain of 16 */
    cr_assert_eq(st.tier[KVT_TIER_WARM].blocks, 8 * 20 * 16 + 16, "blocks: %llu",
                 (unsigned long long)st.tier[KVT_TIER_WARM].blocks);
    cr_assert_geq(st.dedup_blocks, 8 * 20 * 16 - 16, "the shared chain was deduplicated");
    kvt_close(c);
    t_tierd_stop(&d);
}

Test(tierd_e2e, unreachable_daemon_is_a_clear_error)
{
    kvt_client *c = NULL;
    int rc = kvt_connect("/tmp/kvt-no-such-dir/tierd.sock", &c);

    cr_assert_eq(rc, -ENOENT, "expected -ENOENT, got %d (%s)", rc, kvt_strerror(rc));
    cr_assert_null(c);
    cr_assert(strstr(kvt_strerror(rc), "not running") != NULL);
}
