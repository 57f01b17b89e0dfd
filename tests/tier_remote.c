/* SPDX-License-Identifier: MIT */
/*
 * tier_remote.c - the remote tier's formats and its failure path, without
 * a cluster: CRC16 and key slots as the Redis Cluster spec defines them
 * (hash tags included), cluster keys, the value header and its checks,
 * and a store whose remote tier is down: reads become misses, nothing is
 * left reserved, every invariant holds. Then, on a real 3-master cluster
 * (t_cluster.h; skipped without redis-server), a MOVED or ASK in the middle
 * of a batch: only the redirected command goes out again (INFO
 * commandstats counts what each master ran).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <netinet/in.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "t.h"
#include "t_cluster.h"
#include "tier.h"
#include "tier_cold.h"
#include "tier_remote.h"

Test(tier_remote, crc16_is_the_cluster_specs)
{
    /* the spec's test vector: CRC16-CCITT XMODEM of "123456789" */
    cr_assert_eq(tier_remote_crc16("123456789", 9), 0x31C3, "got 0x%04X",
                 tier_remote_crc16("123456789", 9));
    cr_assert_eq(tier_remote_crc16("", 0), 0);
}

Test(tier_remote, slots_follow_hash_tags)
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

/* A test descriptor (tenant t, model m) and its namespace id. */
static struct tier_remote_ns_desc desc_of(const char *tenant, const char *model)
{
    return (struct tier_remote_ns_desc){ .tenant = tenant, .model_id = model, .dtype = "bf16",
                                         .layout = "test", .block_tokens = 16,
                                         .block_bytes = 65536, .tp_rank = 0, .tp_size = 1 };
}

static void id_of(const struct tier_remote_ns_desc *d, uint8_t id[TIER_REMOTE_NS_ID_BYTES])
{
    cr_assert_eq(tier_remote_ns_id(d, id), 0);
}

Test(tier_remote, keys_keep_namespaces_apart)
{
    struct tier_key k;
    char a[TIER_REMOTE_KEY_MAX], b[TIER_REMOTE_KEY_MAX], c[TIER_REMOTE_KEY_MAX];
    struct tier_remote_ns_desc da = desc_of("a", "m"), db = desc_of("b", "m");
    uint8_t h1[TIER_REMOTE_NS_ID_BYTES], h2[TIER_REMOTE_NS_ID_BYTES];
    size_t la, lb;

    id_of(&da, h1);
    id_of(&db, h2);
    t_keys((kvt_key *)&k, 1, 5);
    la = tier_remote_key(a, h1, &k);
    lb = tier_remote_key(b, h2, &k);
    cr_assert_eq(la, 4 + 32 + 1 + 64, "key length %zu", la);
    cr_assert_eq(la, TIER_REMOTE_KEY_MAX - 1);
    cr_assert_eq(strlen(a), la);
    cr_assert_eq(la, lb);
    cr_assert_neq(strcmp(a, b), 0, "two tenants share a key");
    cr_assert_eq(strncmp(a, "kvt:", 4), 0);
    cr_assert_null(strchr(a, '{'), "a hash tag would pin a namespace to one slot");
    k.b[31] ^= 1;
    tier_remote_key(c, h1, &k);
    cr_assert_neq(strcmp(a, c), 0);
}

/* tier_remote.h's encoding, built here by hand: each string a u32 length
 * then its bytes, each integer fixed-width; all little-endian. */
static size_t enc_le(uint8_t *p, uint64_t v, int bytes)
{
    for (int i = 0; i < bytes; i++)
        p[i] = (uint8_t)(v >> (8 * i));
    return (size_t)bytes;
}

static size_t enc_str(uint8_t *p, const char *s)
{
    size_t n = enc_le(p, strlen(s), 4);

    memcpy(p + n, s, strlen(s));
    return n + strlen(s);
}

Test(tier_remote, ns_id_is_sha256_of_its_length_prefixed_fields)
{
    static const char hex[] = "0123456789abcdef";
    struct tier_remote_ns_desc d = { .tenant = "alice", .model_id = "meta-llama/Llama-3.1-8B",
                                     .dtype = "fp8_e4m3", .layout = "nhd#0123", .block_tokens = 16,
                                     .block_bytes = 0x123456789ull, .tp_rank = 3, .tp_size = 8 };
    uint8_t enc[512], want[SHA256_DIGEST_LENGTH], got[TIER_REMOTE_NS_ID_BYTES];
    char rkey[TIER_REMOTE_KEY_MAX], prefix[64];
    struct tier_key k;
    size_t n = 0;

    n += enc_str(enc + n, "kvtier remote namespace 1");
    n += enc_str(enc + n, d.tenant);
    n += enc_str(enc + n, d.model_id);
    n += enc_str(enc + n, d.dtype);
    n += enc_str(enc + n, d.layout);
    n += enc_le(enc + n, d.block_tokens, 4);
    n += enc_le(enc + n, d.block_bytes, 8);
    n += enc_le(enc + n, d.tp_rank, 4);
    n += enc_le(enc + n, d.tp_size, 4);
    SHA256(enc, n, want);
    cr_assert_eq(tier_remote_ns_id(&d, got), 0);
    cr_assert_arr_eq(got, want, sizeof(want), "not SHA-256 of the documented encoding");
    /* the cluster key carries the first 128 bits of it */
    memcpy(prefix, "kvt:", 4);
    for (int i = 0; i < TIER_REMOTE_NS_KEY_BYTES; i++) {
        prefix[4 + 2 * i] = hex[want[i] >> 4];
        prefix[5 + 2 * i] = hex[want[i] & 15];
    }
    prefix[4 + 2 * TIER_REMOTE_NS_KEY_BYTES] = ':';
    prefix[5 + 2 * TIER_REMOTE_NS_KEY_BYTES] = 0;
    t_keys((kvt_key *)&k, 1, 3);
    tier_remote_key(rkey, got, &k);
    cr_assert_eq(strncmp(rkey, prefix, strlen(prefix)), 0, "key %s, want prefix %s", rkey,
                 prefix);
    d.dtype = NULL;
    cr_assert_eq(tier_remote_ns_id(&d, got), -EINVAL);
}

/* Every field counts, and no two ways of cutting the same text into fields
 * meet (the name format before issue 14 gave the pairs marked "old" the
 * very same string). */
Test(tier_remote, ns_ids_differ_in_each_field_and_at_each_boundary)
{
    /* tenant, model id, dtype, layout, block tokens, block bytes, tp rank, tp size */
    static const struct tier_remote_ns_desc v[] = {
        { "alice", "m", "bf16", "test", 16, 65536, 0, 1 },
        { "alicf", "m", "bf16", "test", 16, 65536, 0, 1 },
        { "alice", "n", "bf16", "test", 16, 65536, 0, 1 },
        { "alice", "m", "fp16", "test", 16, 65536, 0, 1 },
        { "alice", "m", "bf16", "hnd", 16, 65536, 0, 1 },
        { "alice", "m", "bf16", "test", 32, 65536, 0, 1 },
        { "alice", "m", "bf16", "test", 16, 65537, 0, 1 },
        { "alice", "m", "bf16", "test", 16, 65536, 1, 2 },
        { "alice", "m", "bf16", "test", 16, 65536, 0, 2 },
        /* model "a b" + dtype "c", model "a" + dtype "b c" */
        { "t", "a b", "c", "test", 16, 65536, 0, 1 },
        { "t", "a", "b c", "test", 16, 65536, 0, 1 },
        /* tenant against model: "ab" + "c", "a" + "bc" */
        { "ab", "c", "bf16", "test", 16, 65536, 0, 1 },
        { "a", "bc", "bf16", "test", 16, 65536, 0, 1 },
        /* old: "model=a dtype=b dtype=c" both */
        { "t", "a dtype=b", "c", "test", 16, 65536, 0, 1 },
        { "t", "a", "b dtype=c", "test", 16, 65536, 0, 1 },
        /* an empty field moved: dtype "" + layout "x", dtype "x" + layout "" */
        { "t", "m", "", "x", 16, 65536, 0, 1 },
        { "t", "m", "x", "", 16, 65536, 0, 1 },
    };
    enum { N = sizeof(v) / sizeof(v[0]) };
    uint8_t id[N][TIER_REMOTE_NS_ID_BYTES], again[TIER_REMOTE_NS_ID_BYTES];
    const int n = N;

    for (int i = 0; i < n; i++)
        id_of(&v[i], id[i]);
    for (int i = 0; i < n; i++)
        for (int j = i + 1; j < n; j++)
            cr_assert_neq(memcmp(id[i], id[j], sizeof(id[i])), 0,
                          "descriptors %d and %d share an id", i, j);
    /* and the same descriptor always gets the same one */
    id_of(&v[0], again);
    cr_assert_arr_eq(id[0], again, sizeof(again));
}

Test(tier_remote, value_header_round_trip_and_rejections)
{
    enum { LEN = 8192 };
    uint8_t *v = malloc(TIER_REMOTE_HDR_BYTES + LEN);
    const char *key = "kvt:0123456789abcdef0123456789abcdef:00";
    const char *other = "kvt:0123456789abcdef0123456789abcdef:01";

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

Test(tier_remote, open_refuses_bad_seeds)
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
Test(tier_remote, a_down_cluster_is_a_miss)
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
    struct tier_remote_ns_desc d = desc_of("t", "m");

    snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", dead_port());
    cr_assert_eq(tier_remote_open(&rc, &r), 0);
    cr_assert_eq(tier_remote_ns_add(r, 1, &d), 0);
    cfg.remote = r;
    cr_assert_eq(tier_create(&cfg, &t), 0);
    t_keys((kvt_key *)k, 4, 11);

    /* write-through of two committed blocks */
    cr_assert_eq(tier_reserve(t_tns(t, 1, 65536), 7, NULL, k, 2, ids, offs), 2);
    cr_assert_eq(tier_commit(t_tns(t, 1, 65536), 7, k, 2), 2);
    cr_assert_eq(tier_check(t, why, sizeof(why)), 0, "%s", why);
    /* a read of the two absent keys after them */
    cr_assert_eq(tier_get_remote(t_tns(t, 1, 65536), k, 4, &done_count), 2);
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
    cr_assert_eq(tier_remove(t_tns_of(t, 1), k, 2), 2);
    /* a namespace not on the remote tier never asks it */
    cr_assert_eq(tier_get_remote(t_tns(t, 2, 65536), k, 4, &done_count), 0);
    cr_assert_eq(tier_lookup_remote(t_tns_of(t, 2), k, 4, &done_count), 0);
    tier_remote_close(r);
    tier_destroy(t);
}

/* ---- on a real cluster: a redirect in the middle of a batch ------------- */

#define RBLK 4096
#define RN 24

static bool slow(void) { return getenv("KVT_TEST_VALGRIND") != NULL; }

/* One field ("calls", "rejected_calls") of command name's line in INFO
 * commandstats on port; 0 when it has not run since CONFIG RESETSTAT. */
static long cmdstat(int port, const char *name, const char *field)
{
    redisReply *r = t_cluster_cmd(port, "INFO commandstats");
    char line[64], pat[64];
    const char *at, *end, *f;
    long v = 0;

    cr_assert(r && r->type == REDIS_REPLY_STRING, "INFO commandstats on %d", port);
    snprintf(line, sizeof(line), "cmdstat_%s:", name);
    at = strstr(r->str, line);
    if (at) {
        end = strchr(at, '\n');
        end = end ? end : at + strlen(at);
        /* ":calls=" is the line's first field, ",rejected_calls=" a later one */
        snprintf(pat, sizeof(pat), "%c%s=", strcmp(field, "calls") ? ',' : ':', field);
        f = strstr(at, pat);
        cr_assert(f && f < end, "no %s in '%.*s'", field, (int)(end - at), at);
        v = strtol(f + strlen(pat), NULL, 10);
    }
    freeReplyObject(r);
    return v;
}

/* The index of the master that holds rkey (EXISTS answers an integer there
 * and MOVED everywhere else), or -1. */
static int owner_of(const struct t_cluster *cl, const char *rkey)
{
    for (int i = 0; i < T_CLUSTER_NODES; i++) {
        redisReply *r = t_cluster_cmd(cl->port[i], "EXISTS %s", rkey);
        bool here = r && r->type == REDIS_REPLY_INTEGER && r->integer == 1;

        if (r)
            freeReplyObject(r);
        if (here)
            return i;
    }
    return -1;
}

static void on_remote(void *ctx, int rc)
{
    cr_assert_eq(rc, 0);
    (*(int *)ctx)++;
}

/* Wait (bounded) for every call on r to complete. */
static void drain(struct tier_remote *r)
{
    while (tier_remote_inflight(r))
        cr_assert_geq(tier_remote_poll(r, true), 0);
}

/* Every command of a batch is sent once, and one MOVED or ASK sends only
 * its own key again (the bug: the next round re-sent the finished commands
 * of the node it went to). RN keys written, the slot of one of them
 * (on master A) handed to master B, which holds others of the batch too:
 * with moved, finished (SETSLOT NODE: a MOVED for a stale map); else left
 * migrating (the key moved, its slot not: an ASK). Then one GET of all RN:
 * every one a verified hit with the right bytes, and over the three masters
 * exactly RN GETs executed, one rejected (the redirect), and ASKING once
 * for an ASK. */
static void redirect_mid_batch(bool moved)
{
    static uint8_t in[RN][RBLK], out[RN][RBLK];
    struct t_cluster cl;
    struct tier_remote *r;
    struct tier_remote_stats st;
    struct tier_key k[RN];
    char rkey[RN][TIER_REMOTE_KEY_MAX], id_a[64], id_b[64];
    void *dst[RN];
    int owner[RN], res[RN], done = 0, a, b, on_b = 0, slot;
    long calls = 0, rejected = 0, asking = 0;
    struct tier_remote_ns_desc ns_desc = desc_of("t", "redirect");
    uint8_t ns_id[TIER_REMOTE_NS_ID_BYTES];
    struct tier_remote_cfg rc = { .workers = 1, .timeout_ms = slow() ? 3000 : 500 };
    redisReply *rp;

    t_cluster_start(&cl);
    rc.seeds = cl.seeds;
    /* one worker: the slot map it reads at its first job is the stale one */
    cr_assert_eq(tier_remote_open(&rc, &r), 0);
    cr_assert_eq(tier_remote_ns_add(r, 1, &ns_desc), 0);
    id_of(&ns_desc, ns_id);
    t_keys((kvt_key *)k, RN, 4242);
    for (int i = 0; i < RN; i++) {
        t_fill(in[i], RBLK, 500 + (uint64_t)i);
        cr_assert_eq(tier_remote_put(r, 1, &k[i], in[i], RBLK, false, on_remote, &done), 0);
        tier_remote_key(rkey[i], ns_id, &k[i]);
        dst[i] = out[i];
        res[i] = 1;
    }
    drain(r);
    tier_remote_stats_get(r, &st);
    cr_assert_eq(st.puts, RN, "puts %llu of %d", (unsigned long long)st.puts, RN);

    /* key 0's slot goes from its master A to B = the next one */
    for (int i = 0; i < RN; i++) {
        owner[i] = owner_of(&cl, rkey[i]);
        cr_assert_geq(owner[i], 0, "key %d is on no master", i);
    }
    a = owner[0];
    b = (a + 1) % T_CLUSTER_NODES;
    for (int i = 1; i < RN; i++)
        on_b += owner[i] == b;
    cr_assert_gt(on_b, 0, "no other key of the batch on master %d (pick another seed)", b);
    slot = (int)tier_remote_slot(rkey[0], strlen(rkey[0]));
    t_cluster_node_id(cl.port[a], id_a, sizeof(id_a));
    t_cluster_node_id(cl.port[b], id_b, sizeof(id_b));
    rp = t_cluster_cmd(cl.port[b], "CLUSTER SETSLOT %d IMPORTING %s", slot, id_a);
    cr_assert(rp && rp->type == REDIS_REPLY_STATUS, "IMPORTING: %s", rp ? rp->str : "-");
    freeReplyObject(rp);
    rp = t_cluster_cmd(cl.port[a], "CLUSTER SETSLOT %d MIGRATING %s", slot, id_b);
    cr_assert(rp && rp->type == REDIS_REPLY_STATUS, "MIGRATING: %s", rp ? rp->str : "-");
    freeReplyObject(rp);
    rp = t_cluster_cmd(cl.port[a], "MIGRATE 127.0.0.1 %d %s 0 5000", cl.port[b], rkey[0]);
    cr_assert(rp && rp->type == REDIS_REPLY_STATUS, "MIGRATE: %s", rp ? rp->str : "-");
    freeReplyObject(rp);
    if (moved)
        /* the destination first, as redis-cli --cluster does; every master
         * told, so that the worker's next slot map read agrees */
        for (int i = 0; i < T_CLUSTER_NODES; i++) {
            int n = (b + i) % T_CLUSTER_NODES;

            rp = t_cluster_cmd(cl.port[n], "CLUSTER SETSLOT %d NODE %s", slot, id_b);
            cr_assert(rp && rp->type == REDIS_REPLY_STATUS, "NODE on %d: %s", n,
                      rp ? rp->str : "-");
            freeReplyObject(rp);
        }
    for (int i = 0; i < T_CLUSTER_NODES; i++) {
        rp = t_cluster_cmd(cl.port[i], "CONFIG RESETSTAT");
        cr_assert(rp && rp->type == REDIS_REPLY_STATUS);
        freeReplyObject(rp);
    }

    done = 0;
    cr_assert_eq(tier_remote_get(r, 1, k, RN, dst, RBLK, res, on_remote, &done), 0);
    drain(r);
    cr_assert_eq(done, 1);
    for (int i = 0; i < RN; i++) {
        long bad = t_check(out[i], RBLK, 500 + (uint64_t)i);

        cr_assert_eq(res[i], 0, "key %d (master %d%s): %s", i, owner[i], i ? "" : ", moved",
                     strerror(-res[i]));
        cr_assert_eq(bad, -1, "key %d: wrong byte at %ld", i, bad);
    }
    tier_remote_stats_get(r, &st);
    cr_assert_eq(st.hits, RN, "hits %llu of %d", (unsigned long long)st.hits, RN);
    cr_assert_eq(st.bytes_out, (uint64_t)RN * RBLK);
    cr_assert_eq(st.redirects, 1, "redirects %llu", (unsigned long long)st.redirects);
    for (int i = 0; i < T_CLUSTER_NODES; i++) {
        calls += cmdstat(cl.port[i], "get", "calls");
        rejected += cmdstat(cl.port[i], "get", "rejected_calls");
        asking += cmdstat(cl.port[i], "asking", "calls");
    }
    cr_assert_eq(calls, RN, "%ld GETs ran for %d keys (%d of them on master %d): finished "
                 "commands were sent again", calls, RN, on_b + 1, b);
    cr_assert_eq(rejected, 1, "%ld GETs redirected, 1 expected", rejected);
    cr_assert_eq(asking, moved ? 0 : 1, "ASKING sent %ld times", asking);

    tier_remote_close(r);
    t_cluster_stop(&cl);
}

Test(tier_remote, a_moved_key_resends_only_itself)
{
    redirect_mid_batch(true);
}

Test(tier_remote, an_asked_key_resends_only_itself)
{
    redirect_mid_batch(false);
}

/* Review of 3f9adf6: a remote read's op leaves the ops in flight
 * before its slots go back; a slot given back fails the durable commits
 * that waited for its key (reserved by the read), and a callback there that
 * forgets the read's waiter (a client closed as another is answered) does
 * not reach the op any more: the read's waiter was still told. Waiter a
 * commits k durably while the read holds k; a's callback forgets g. */

static char rv_a, rv_g;
static int rv_g_done, rv_a_told;
static struct tier *rv_t;

static void rv_ready(void *ctx, void *waiter, uint32_t id, int rc)
{
    (void)ctx;
    (void)id;
    (void)rc;
    cr_assert_eq(waiter, &rv_a);
    rv_a_told++;
    tier_forget_waiter(rv_t, &rv_g);
}

static void rv_done(void *ctx, void *waiter, int count)
{
    (void)ctx;
    (void)count;
    cr_assert_eq(waiter, &rv_g);
    rv_g_done++;
}

Test(tier_remote, a_remote_readers_waiter_forgotten_as_its_slots_go_back_is_not_told)
{
    char seeds[64], dir[64], why[256];
    struct tier_remote *r;
    struct tier_cold *cold;
    struct tier_key k;
    uint32_t ids[1], pend;
    struct tier_remote_cfg rc = { .seeds = seeds, .timeout_ms = 200, .workers = 1 };
    struct tier_cold_cfg cc = { .dir = dir, .bytes = 8u << 20, .qd = 16, .batch = 4, .sim = true };
    struct tier_cfg cfg = { .warm_bytes = 64 << 20, .ready = rv_ready, .remote_done = rv_done };
    struct tier_remote_ns_desc d = desc_of("t", "m");

    t_tmpdir("kvt-remote", dir, sizeof(dir));
    cr_assert_eq(tier_cold_open(&cc, &cold), 0);
    snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", dead_port());
    cr_assert_eq(tier_remote_open(&rc, &r), 0);
    cr_assert_eq(tier_remote_ns_add(r, 1, &d), 0);
    cfg.remote = r;
    cfg.cold = cold;
    cr_assert_eq(tier_create(&cfg, &rv_t), 0);
    t_keys((kvt_key *)&k, 1, 5791);
    cr_assert_eq(tier_get_remote(t_tns(rv_t, 1, 65536), &k, 1, &rv_g), 1, "k is read");
    cr_assert_geq(tier_commit_durable(t_tns(rv_t, 1, 65536), 2, &k, 1, &rv_a, ids, &pend), 0);
    cr_assert_eq(pend, 1, "a waits for k, which the read holds");
    while (tier_remote_inflight(r))
        cr_assert_geq(tier_poll(rv_t, true), 0);
    cr_assert_eq(rv_a_told, 1, "a was not told as k went back");
    cr_assert_eq(rv_g_done, 0, "g, forgotten in a's callback, was told its read's end");
    cr_assert_eq(tier_check(rv_t, why, sizeof(why)), 0, "%s", why);
    tier_remote_close(r);
    tier_cold_close(cold); /* first: it runs or cancels every callback naming the store */
    tier_destroy(rv_t);
    t_rmtree(dir);
}
