/* SPDX-License-Identifier: MIT */
/*
 * tier_remote.c - the remote tier's formats and its failure path, without
 * a cluster: CRC16 and key slots as the Redis Cluster spec defines them
 * (hash tags included), cluster keys, the value header and its checks,
 * and a store whose remote tier is down: reads become misses, nothing is
 * left reserved, every invariant holds.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "t.h"
#include "tier.h"
#include "tier_remote.h"

Test(remote_unit, crc16_is_the_cluster_specs)
{
    /* the spec's test vector: CRC16-CCITT XMODEM of "123456789" */
    cr_assert_eq(tier_remote_crc16("123456789", 9), 0x31C3, "got 0x%04X",
                 tier_remote_crc16("123456789", 9));
    cr_assert_eq(tier_remote_crc16("", 0), 0);
}

Test(remote_unit, slots_follow_hash_tags)
{
    /* expected values from redis-server 7's CLUSTER KEYSLOT */
    static const struct {
        const char *key;
        unsigned slot;
    } v[] = {
        { "123456789", 12739 },      /* 0x31C3 */
        { "foo", 12182 },
        { "bar", 5061 },
        { "{user1000}.following", 3443 },
        { "foo{}{bar}", 8363 },      /* an empty tag: the whole key */
        { "foo{{bar}}zap", 4015 },   /* the tag is "{bar" */
        { "foo{bar}{zap}", 5061 },   /* the first tag only: "bar" */
    };

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        cr_assert_eq(tier_remote_slot(v[i].key, strlen(v[i].key)), v[i].slot,
                     "slot of '%s': expected %u, got %u", v[i].key, v[i].slot,
                     tier_remote_slot(v[i].key, strlen(v[i].key)));
    cr_assert_eq(tier_remote_slot("{user1000}.followers", 20),
                 tier_remote_slot("{user1000}.following", 20), "a tag puts keys together");
}

Test(remote_unit, keys_keep_namespaces_apart)
{
    struct tier_key k;
    char a[TIER_REMOTE_KEY_MAX], b[TIER_REMOTE_KEY_MAX], c[TIER_REMOTE_KEY_MAX];
    uint64_t h1 = tier_remote_ns_hash("tenant=a model=m"), h2 = tier_remote_ns_hash(
                                                              "tenant=b model=m");
    size_t la, lb;

    t_keys((kvt_key *)&k, 1, 5);
    la = tier_remote_key(a, h1, &k);
    lb = tier_remote_key(b, h2, &k);
    cr_assert_eq(la, 4 + 16 + 1 + 64, "key length %zu", la);
    cr_assert_eq(la, lb);
    cr_assert_neq(strcmp(a, b), 0, "two tenants share a key");
    cr_assert_eq(strncmp(a, "kvt:", 4), 0);
    cr_assert_null(strchr(a, '{'), "a hash tag would pin a namespace to one slot");
    k.b[31] ^= 1;
    tier_remote_key(c, h1, &k);
    cr_assert_neq(strcmp(a, c), 0);
}

Test(remote_unit, value_header_round_trip_and_rejections)
{
    enum { LEN = 8192 };
    uint8_t *v = malloc(TIER_REMOTE_HDR_BYTES + LEN);
    const char *key = "kvt:0123456789abcdef:00", *other = "kvt:0123456789abcdef:01";

    cr_assert_not_null(v);
    t_fill(v + TIER_REMOTE_HDR_BYTES, LEN, 77);
    tier_remote_hdr_make(v, key, strlen(key), v + TIER_REMOTE_HDR_BYTES, LEN);
    cr_assert_eq(tier_remote_value_check(v, TIER_REMOTE_HDR_BYTES + LEN, key, strlen(key), LEN),
                 0, "a value as written must pass");
    /* under another key, of another length, truncated, or with one bit off */
    cr_assert_eq(tier_remote_value_check(v, TIER_REMOTE_HDR_BYTES + LEN, other, strlen(other),
                                         LEN), -EBADMSG);
    cr_assert_eq(tier_remote_value_check(v, TIER_REMOTE_HDR_BYTES + LEN, key, strlen(key),
                                         LEN - 4096), -EBADMSG);
    cr_assert_eq(tier_remote_value_check(v, TIER_REMOTE_HDR_BYTES + LEN - 1, key, strlen(key),
                                         LEN), -EBADMSG);
    cr_assert_eq(tier_remote_value_check(v, 7, key, strlen(key), LEN), -EBADMSG);
    v[TIER_REMOTE_HDR_BYTES + 1000] ^= 0x10;
    cr_assert_eq(tier_remote_value_check(v, TIER_REMOTE_HDR_BYTES + LEN, key, strlen(key), LEN),
                 -EBADMSG, "a flipped payload bit must be caught");
    v[TIER_REMOTE_HDR_BYTES + 1000] ^= 0x10;
    v[0] ^= 1; /* the magic */
    cr_assert_eq(tier_remote_value_check(v, TIER_REMOTE_HDR_BYTES + LEN, key, strlen(key), LEN),
                 -EBADMSG);
    free(v);
}

Test(remote_unit, open_refuses_bad_seeds)
{
    struct tier_remote *r = NULL;
    const char *bad[] = { "", "localhost", "127.0.0.1:", "127.0.0.1:0", "127.0.0.1:70000",
                          ":7000", "127.0.0.1:70x" };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct tier_remote_cfg cfg = { .seeds = bad[i] };

        cr_assert_eq(tier_remote_open(&cfg, &r), -EINVAL, "seeds '%s' accepted", bad[i]);
    }
}

/* A loopback port nobody listens on. */
static int dead_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM, 0), port;

    cr_assert(fd >= 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    port = ntohs(a.sin_port);
    close(fd); /* bound, never listened: connecting is refused */
    return port;
}

static int done_count = -1;

static void on_done(void *ctx, void *waiter, int count)
{
    (void)ctx;
    cr_assert_eq(waiter, &done_count);
    done_count = count;
}

/* A store whose cluster does not answer: a read of absent keys takes
 * slots, gets -EIO from the remote, gives everything back (a miss); writes
 * are counted as errors; the store stays consistent throughout. */
Test(remote_unit, a_down_cluster_is_a_miss)
{
    char seeds[64], why[256];
    struct tier_remote *r;
    struct tier *t;
    struct tier_stats st;
    struct tier_key k[4];
    uint32_t ids[4];
    uint64_t offs[4];
    struct tier_remote_cfg rc = { .seeds = seeds, .timeout_ms = 200, .workers = 1 };
    struct tier_cfg cfg = { .warm_bytes = 64 << 20, .remote_done = on_done };

    snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", dead_port());
    cr_assert_eq(tier_remote_open(&rc, &r), 0);
    cr_assert_eq(tier_remote_ns_add(r, 1, "tenant=t model=m"), 0);
    cfg.remote = r;
    cr_assert_eq(tier_create(&cfg, &t), 0);
    t_keys((kvt_key *)k, 4, 11);

    /* write-through of two committed blocks */
    cr_assert_eq(tier_reserve(t, 1, 65536, 7, NULL, k, 2, ids, offs), 2);
    cr_assert_eq(tier_commit(t, 1, 65536, 7, k, 2), 2);
    cr_assert_eq(tier_check(t, why, sizeof(why)), 0, "%s", why);
    /* a read of the two absent keys after them */
    cr_assert_eq(tier_get_remote(t, 1, 65536, k, 4, &done_count), 2);
    cr_assert_eq(tier_check(t, why, sizeof(why)), 0, "%s", why);
    tier_stats_get(t, &st);
    cr_assert_eq(st.reserved, 2, "the read holds two slots");
    while (done_count < 0 || tier_remote_inflight(r))
        cr_assert_geq(tier_poll(t, true), 0);
    cr_assert_eq(done_count, 0, "a down cluster found %d blocks", done_count);
    tier_stats_get(t, &st);
    cr_assert_eq(st.reserved, 0, "slots left reserved");
    cr_assert_eq(st.leases_active, 0);
    cr_assert_eq(st.remote_hits, 0);
    cr_assert_geq(st.remote_errors, 4, "2 writes + 2 reads failed, counted %llu",
                  (unsigned long long)st.remote_errors);
    cr_assert_eq(tier_check(t, why, sizeof(why)), 0, "%s", why);
    /* the written blocks are free to go again (their pins are back) */
    cr_assert_eq(tier_remove(t, 1, k, 2), 2);
    /* a namespace not on the remote tier never asks it */
    cr_assert_eq(tier_get_remote(t, 2, 65536, k, 4, &done_count), 0);
    cr_assert_eq(tier_lookup_remote(t, 2, k, 4, &done_count), 0);
    tier_remote_close(r);
    tier_destroy(t);
}
