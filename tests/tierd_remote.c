/* SPDX-License-Identifier: MIT */
/*
 * tierd_remote.c - the remote tier through two tierds sharing a Redis
 * Cluster (3 masters of Debian's redis-server on 127.0.0.1, t_cluster.h):
 * a prefix put through one is a hit through the other, byte-identical;
 * a master killed during reads turns into misses, never wrong bytes or a
 * stuck daemon; a resharding during reads is followed (MOVED / ASK); a
 * value corrupted behind tierd's back is a counted checksum miss; a tenant
 * whose model id collides with another tenant's namespace under the old
 * XXH3 naming (issue 14) neither reads nor plants that tenant's blocks;
 * a client killed while the store waits for a hung node on its behalf
 * leaves nothing behind (that one needs no redis-server).
 * The others are skipped when redis-server or redis-cli is missing. No per-test .timeout
 * (Criterion 2.4.1 leaks in the runner with mixed ones, see tier_nvme_io.c):
 * every wait here is bounded, and make test's --timeout covers each test.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <hiredis/hiredis.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>
#include <xxhash.h>

#include "kvt_common.h"
#include "kvt_wire.h"
#include "t.h"
#include "t_cluster.h"
#include "t_xxh3.h"

#define BLK (64u << 10)
#define CHAIN 4
#define NODES T_CLUSTER_NODES

static bool slow(void) { return getenv("KVT_TEST_VALGRIND") != NULL; }

/* A tierd on the cluster; with cfg, the tenants of that config file. */
static void tierd_cfg_on(struct t_tierd *d, struct t_cluster *c, const char *policy,
                         const char *cfg)
{
    const char *args[] = { "--warm-bytes", "64M", "--remote-seeds", c->seeds,
                           "--remote-timeout-ms", slow() ? "3000" : "500",
                           "--remote-policy", policy, cfg ? "--config" : NULL, cfg, NULL };

    t_tierd_start(d, args);
}

static void tierd_on(struct t_tierd *d, struct t_cluster *c, const char *policy)
{
    tierd_cfg_on(d, c, policy, NULL);
}

static void chain_keys(kvt_key *k, int chain)
{
    t_keys(k, CHAIN, 7700 + (uint64_t)chain);
}

/* Put chain's keys with the bytes of chain bytes_of; the count put. */
static int put_as(kvt_ns *ns, int chain, int bytes_of)
{
    static uint8_t buf[CHAIN][BLK];
    const void *src[CHAIN];
    kvt_key k[CHAIN];

    chain_keys(k, chain);
    for (int i = 0; i < CHAIN; i++) {
        t_fill(buf[i], BLK, (uint64_t)bytes_of * 100 + (uint64_t)i);
        src[i] = buf[i];
    }
    return kvt_put(ns, NULL, k, CHAIN, src);
}

static void put_chain(kvt_ns *ns, int chain)
{
    cr_assert_eq(put_as(ns, chain, chain), CHAIN);
}

/* Get chain c; every byte of each hit checked. Returns the hits. */
static int get_chain(kvt_ns *ns, int chain)
{
    static uint8_t buf[CHAIN][BLK];
    void *dst[CHAIN];
    kvt_key k[CHAIN];
    int hits;

    chain_keys(k, chain);
    for (int i = 0; i < CHAIN; i++)
        dst[i] = buf[i];
    hits = t_get_chain(ns, k, CHAIN, BLK, (uint64_t)chain * 100, dst);
    cr_assert_geq(hits, 0, "get of chain %d: %s", chain, kvt_strerror(hits));
    return hits;
}

/* Wait (bounded) until tierd has tried to write want blocks to the
 * cluster, *st its stats then: 0, -ETIMEDOUT, or kvt_stats_get's error.
 * Asserts nothing: tenants' children call it too. */
static int puts_settled(kvt_client *c, uint64_t want, kvt_stats *st)
{
    uint64_t t0 = cmn_now_ms();
    int rc;

    while ((rc = kvt_stats_get(c, st)) == 0 && st->remote_puts + st->remote_errors < want) {
        if (cmn_now_ms() - t0 > (slow() ? 60000u : 15000u))
            return -ETIMEDOUT;
        usleep(20000);
    }
    return rc;
}

/* Wait (bounded) until tierd has written want blocks to the cluster. */
static void wait_puts(kvt_client *c, uint64_t want)
{
    kvt_stats st;
    int rc = puts_settled(c, want, &st);

    cr_assert_eq(rc, 0, "remote writes: %llu of %llu (%s)", (unsigned long long)st.remote_puts,
                 (unsigned long long)want, kvt_strerror(rc));
    cr_assert_eq(st.remote_puts, want, "remote writes: %llu, errors %llu",
                 (unsigned long long)st.remote_puts, (unsigned long long)st.remote_errors);
}

/* A stats request answers within the bound: the daemon is not stuck. */
static void responsive(kvt_client *c, kvt_stats *st)
{
    uint64_t t0 = cmn_now_ms();

    cr_assert_eq(kvt_stats_get(c, st), 0);
    cr_assert_lt(cmn_now_ms() - t0, slow() ? 10000 : 2000, "stats took %llu ms",
                 (unsigned long long)(cmn_now_ms() - t0));
}

/* Two tierds (A and B) on one private cluster under policy, a client and a
 * namespace on each; with chains, A puts chains 0..chains-1 and waits until
 * the cluster holds every block. */
struct pair {
    struct t_cluster cl;
    struct t_tierd a, b;
    kvt_client *ca, *cb;
    kvt_ns *na, *nb;
};

static void pair_open(struct pair *p, const char *policy, int chains)
{
    t_cluster_start(&p->cl);
    tierd_on(&p->a, &p->cl, policy);
    tierd_on(&p->b, &p->cl, policy);
    p->ca = t_connect(&p->a);
    p->cb = t_connect(&p->b);
    p->na = t_ns(p->ca, BLK);
    p->nb = t_ns(p->cb, BLK);
    for (int c = 0; c < chains; c++)
        put_chain(p->na, c);
    if (chains)
        wait_puts(p->ca, (uint64_t)chains * CHAIN);
}

/* Close both clients, stop both tierds (each must stop cleanly), stop the
 * cluster. */
static void pair_close(struct pair *p)
{
    kvt_close(p->ca);
    kvt_close(p->cb);
    t_tierd_stop(&p->a);
    t_tierd_stop(&p->b);
    t_cluster_stop(&p->cl);
}

Test(tierd_remote, a_prefix_put_on_one_node_is_a_hit_on_another)
{
    struct pair p;
    kvt_ns *other;
    kvt_model m2 = t_model(BLK);
    kvt_key k[CHAIN];
    uint8_t tiers[CHAIN];
    kvt_stats st;

    pair_open(&p, "write-through", 3);

    /* B never saw these: its lookup asks the cluster, its get reads it */
    chain_keys(k, 0);
    cr_assert_eq(kvt_lookup(p.nb, k, CHAIN, 0, tiers), CHAIN, "lookup through the second tierd");
    for (int c = 0; c < 3; c++)
        cr_assert_eq(get_chain(p.nb, c), CHAIN, "chain %d: not a full hit through B", c);
    /* now local in B: a hit without the cluster */
    cr_assert_eq(get_chain(p.nb, 1), CHAIN);
    responsive(p.cb, &st);
    cr_assert_eq(st.remote_hits, 3 * CHAIN, "remote hits %llu",
                 (unsigned long long)st.remote_hits);
    cr_assert_eq(st.remote_bytes_out, 3ull * CHAIN * BLK);
    cr_assert_geq(st.remote_probe_hits, CHAIN);
    cr_assert_eq(st.remote_checksum_errors, 0);
    /* another model never finds them: namespaces stay apart on the cluster */
    m2.model_id = "test/other-model";
    cr_assert_eq(kvt_ns_open(p.cb, &m2, &other), 0);
    chain_keys(k, 2);
    cr_assert_eq(kvt_lookup(other, k, CHAIN, 0, NULL), 0);

    pair_close(&p);
}

Test(tierd_remote, a_killed_master_turns_into_misses)
{
    struct pair p;
    enum { CHAINS = 24, KILL_AT = 6 };
    kvt_stats st;
    int full_after = 0, short_after = 0;

    pair_open(&p, "write-through", CHAINS);
    /* B reads each chain once, from the cluster; a master dies midway */
    for (int c = 0; c < CHAINS; c++) {
        uint64_t t0 = cmn_now_ms();
        int hits;

        if (c == KILL_AT) {
            kill(p.cl.pid[2], SIGKILL);
            t_wait(p.cl.pid[2]);
            p.cl.pid[2] = 0;
        }
        hits = get_chain(p.nb, c); /* never a wrong byte */
        cr_assert_lt(cmn_now_ms() - t0, slow() ? 30000 : 5000, "a get took %llu ms",
                     (unsigned long long)(cmn_now_ms() - t0));
        if (c < KILL_AT)
            cr_assert_eq(hits, CHAIN, "chain %d before the kill: %d hits", c, hits);
        else if (hits == CHAIN)
            full_after++;
        else
            short_after++;
        responsive(p.cb, &st);
    }
    /* about a third of the keys lived there: most 4-block chains lose one */
    cr_assert_gt(short_after, 0, "no get after the kill missed (%d full)", full_after);
    responsive(p.cb, &st);
    cr_assert_gt(st.remote_errors, 0, "the dead master's keys were not counted as errors");
    cr_assert_eq(st.remote_checksum_errors, 0);

    pair_close(&p);
}

Test(tierd_remote, a_resharding_during_reads_is_followed)
{
    struct pair p;
    enum { CHAINS = 32 };
    kvt_stats st;
    char from[64], to[64], addr[32];
    pid_t mover;

    pair_open(&p, "write-through", CHAINS);
    cr_assert_eq(get_chain(p.nb, 0), CHAIN); /* B has its slot map now */

    /* move half of the first master's slots to the second, keys and all,
     * while B reads */
    t_cluster_node_id(p.cl.port[0], from, sizeof(from));
    t_cluster_node_id(p.cl.port[1], to, sizeof(to));
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", p.cl.port[0]);
    mover = fork();
    cr_assert(mover >= 0);
    if (mover == 0) {
        const char *argv[] = { "/usr/bin/redis-cli", "--cluster", "reshard", addr,
                               "--cluster-from", from, "--cluster-to", to, "--cluster-slots",
                               "2700", "--cluster-yes", NULL };

        _exit(t_cluster_run(&p.cl, argv));
    }
    for (int c = 1; c < CHAINS / 2; c++)
        cr_assert_eq(get_chain(p.nb, c), CHAIN, "chain %d during the resharding", c);
    cr_assert_eq(t_wait(mover), 0, "redis-cli --cluster reshard failed (see %s/cmd.log)",
                 p.cl.dir);
    for (int c = CHAINS / 2; c < CHAINS; c++)
        cr_assert_eq(get_chain(p.nb, c), CHAIN, "chain %d after the resharding", c);
    responsive(p.cb, &st);
    cr_assert_gt(st.remote_redirects, 0, "no MOVED/ASK was seen");
    cr_assert_eq(st.remote_hits, CHAINS * CHAIN);
    cr_assert_eq(st.remote_checksum_errors, 0);

    pair_close(&p);
}

Test(tierd_remote, a_corrupted_value_is_a_counted_miss)
{
    struct pair p;
    kvt_key k[CHAIN];
    kvt_stats st;
    int changed = 0;

    pair_open(&p, "on-demotion", 0);
    put_chain(p.na, 0);
    /* on-demotion: nothing goes out until the blocks leave warm; a flush
     * writes them to cold, which is not leaving warm either */
    responsive(p.ca, &st);
    cr_assert_eq(st.remote_puts, 0, "on-demotion wrote at commit");
    kvt_close(p.ca);
    /* a clean stop flushes warm to cold through the mover's demotions,
     * which write to the cluster too (drained before tierd exits) */
    t_tierd_stop(&p.a);
    cr_assert_eq(get_chain(p.nb, 0), CHAIN, "on-demotion: the demoted blocks are not there");
    tierd_on(&p.a, &p.cl, "write-through");
    p.ca = t_connect(&p.a);
    p.na = t_ns(p.ca, BLK);
    chain_keys(k, 1);
    put_chain(p.na, 1);
    wait_puts(p.ca, CHAIN);

    /* behind tierd's back: overwrite one payload byte of chain 1's first
     * block (its key is the only one whose value holds chain 1's data; find
     * it by reading every kvt: key on every master) */
    for (int i = 0; i < NODES && !changed; i++) {
        redisReply *keys = t_cluster_cmd(p.cl.port[i], "KEYS kvt:*");

        cr_assert(keys && keys->type == REDIS_REPLY_ARRAY);
        for (size_t j = 0; j < keys->elements && !changed; j++) {
            redisReply *v = t_cluster_cmd(p.cl.port[i], "GET %s", keys->element[j]->str);
            static uint8_t want[BLK];

            t_fill(want, BLK, 100);
            if (v && v->type == REDIS_REPLY_STRING && v->len == 32 + BLK &&
                memcmp(v->str + 32, want, BLK) == 0) {
                redisReply *w = t_cluster_cmd(p.cl.port[i], "SETRANGE %s %d %b",
                                              keys->element[j]->str, 32 + 1000, "\xff\x00",
                                              (size_t)2);

                cr_assert(w && w->type == REDIS_REPLY_INTEGER);
                freeReplyObject(w);
                changed = 1;
            }
            if (v)
                freeReplyObject(v);
        }
        freeReplyObject(keys);
    }
    cr_assert(changed, "chain 1's first block is not on the cluster");
    cr_assert_eq(get_chain(p.nb, 1), 0, "a corrupted block was served");
    responsive(p.cb, &st);
    cr_assert_eq(st.remote_checksum_errors, 1, "checksum errors: %llu",
                 (unsigned long long)st.remote_checksum_errors);
    cr_assert_eq(st.remote_hits, CHAIN, "remote hits %llu: chain 0's only",
                 (unsigned long long)st.remote_hits);

    pair_close(&p);
}

/* ---- issue 14: a tenant's model id that collides with another's name ---- */

#define BOBBY 40002 /* alice is root (this process) */
#define FORGED 9    /* bobby's forged blocks hold chain 9's bytes */
#define A_MODEL "meta-llama/Llama-3.1-8B-Instruct"

static const char *const two_tenants =
    "[tenant.alice]\n"
    "uids = 0, 40001\n"
    "warm_bytes = 16M\n"
    "[tenant.bobby]\n"
    "uids = 40002\n"
    "warm_bytes = 16M\n";

static kvt_model attack_model(const char *model_id)
{
    kvt_model m = t_model(BLK);

    m.model_id = model_id;
    return m;
}

/* The name the remote tier hashed with XXH3-64 into a namespace's key
 * prefix before issue 14 (tenant.c's format then); its length. */
static size_t old_name(char *out, size_t cap, const char *tenant, const kvt_model *m)
{
    int n = snprintf(out, cap, "tenant=%s model=%s dtype=%s layout=%s block_tokens=%u "
                     "block_bytes=%llu tp=%u/%u", tenant, m->model_id, m->dtype, m->layout,
                     m->block_tokens, (unsigned long long)m->block_bytes, m->tp_rank,
                     m->tp_size);

    cr_assert(n > 0 && (size_t)n < cap);
    return (size_t)n;
}

/* Bobby, through the tierd at sock, opens the model id arg and reads
 * alice's chain 0 keys: 0, or a mask of 1 (the lookup found some), 2 (a get
 * served alice's bytes), 4 (a get served other bytes); 64+ on a failure. */
static int bobby_reads(const char *sock, void *arg)
{
    static uint8_t buf[CHAIN][BLK];
    kvt_model m = attack_model(arg);
    void *dst[CHAIN];
    kvt_key k[CHAIN];
    kvt_client *c;
    kvt_ns *ns;
    int mask = 0, n;

    if (kvt_connect(sock, &c))
        return 64;
    if (kvt_ns_open(c, &m, &ns))
        return 65;
    chain_keys(k, 0);
    n = kvt_lookup(ns, k, CHAIN, 0, NULL);
    if (n < 0)
        return 66;
    mask |= n > 0;
    for (int i = 0; i < CHAIN; i++)
        dst[i] = buf[i];
    n = kvt_get(ns, k, CHAIN, dst);
    if (n < 0)
        return 67;
    for (int i = 0; i < n; i++)
        mask |= t_check(buf[i], BLK, (uint64_t)i) == -1 ? 2 : 4;
    kvt_close(c);
    return mask;
}

/* Bobby, through the tierd at sock, puts chain FORGED's bytes under
 * alice's chain 0 keys in the model id arg and waits until they are
 * written to the cluster: 0, or 64+. */
static int bobby_forges(const char *sock, void *arg)
{
    kvt_model m = attack_model(arg);
    kvt_client *c;
    kvt_stats st;
    kvt_ns *ns;

    if (kvt_connect(sock, &c))
        return 64;
    if (kvt_ns_open(c, &m, &ns))
        return 65;
    if (put_as(ns, 0, FORGED) != CHAIN)
        return 66;
    if (puts_settled(c, CHAIN, &st) != 0 || st.remote_puts != CHAIN)
        return 67;
    kvt_close(c);
    return 0;
}

/* Issue 14, finding 1: a namespace's key prefix on the cluster was XXH3-64
 * of a name whose model id the client chooses, and XXH3 is no defence
 * against chosen input: bobby computes a model id whose old name hashes
 * like alice's. Two tierds with both tenants share the cluster; alice
 * writes a chain through the first; bobby, through the second, must not
 * find or read it, and his blocks put under the same keys through the
 * first must never be served to alice through the second (whose alice has
 * nothing local: every read goes to the cluster). */
Test(tierd_remote, a_colliding_model_id_reaches_no_other_tenants_blocks)
{
    char a_name[256], b_name[256], b_model[KVT_WIRE_MODEL_ID_MAX];
    static uint8_t buf[CHAIN][BLK];
    kvt_model am = attack_model(A_MODEL), bm = attack_model(A_MODEL);
    struct t_cluster cl;
    struct t_tierd one, two;
    const char *cfg;
    kvt_client *c;
    kvt_ns *ns;
    void *dst[CHAIN];
    kvt_key k[CHAIN];
    size_t alen, blen, at;
    int st, hits;

    /* the finder: bobby's old name is alice's with his tenant and the
     * model id's bytes changed, to the same XXH3-64 (this part documents
     * the attack, and holds whatever tierd does) */
    alen = old_name(a_name, sizeof(a_name), "alice", &am);
    blen = old_name(b_name, sizeof(b_name), "bobby", &bm);
    at = strlen("tenant=bobby model=");
    cr_assert_eq(alen, blen);
    cr_assert_eq(t_xxh3_collide((uint8_t *)b_name, blen, at, at + strlen(A_MODEL),
                                XXH3_64bits(a_name, alen)), 0, "no collision for '%s'", a_name);
    memcpy(b_model, b_name + at, strlen(A_MODEL));
    b_model[strlen(A_MODEL)] = 0;
    cr_assert_eq(strlen(b_model), strlen(A_MODEL), "a NUL in the crafted model id");
    cr_assert_neq(strcmp(b_model, A_MODEL), 0);
    bm.model_id = b_model;
    cr_assert_eq(old_name(b_name, sizeof(b_name), "bobby", &bm), alen);
    cr_assert_eq(XXH3_64bits(b_name, blen), XXH3_64bits(a_name, alen),
                 "the old names of alice's and bobby's namespaces do not collide");

    if (geteuid() != 0)
        cr_skip_test("needs root to run clients as other uids (CI runs as root)");
    t_cluster_start(&cl);
    cfg = t_config(two_tenants);
    tierd_cfg_on(&one, &cl, "write-through", cfg);
    tierd_cfg_on(&two, &cl, "write-through", cfg);
    cr_assert_eq(chmod(one.dir, 0755), 0); /* bobby must reach the sockets */
    cr_assert_eq(chmod(two.dir, 0755), 0);

    c = t_connect(&one); /* root: alice */
    cr_assert_eq(kvt_ns_open(c, &am, &ns), 0);
    put_chain(ns, 0);
    wait_puts(c, CHAIN);
    kvt_close(c);

    st = t_as_user(BOBBY, bobby_reads, two.sock, b_model);
    cr_expect_eq(st, 0, "bobby's colliding model id reached alice's blocks: exit %d (1: "
                 "found, 2: read her bytes, 4: read others)", st);
    st = t_as_user(BOBBY, bobby_forges, one.sock, b_model);
    cr_assert_eq(st, 0, "bobby's put: exit %d", st);

    c = t_connect(&two);
    cr_assert_eq(kvt_ns_open(c, &am, &ns), 0);
    chain_keys(k, 0);
    for (int i = 0; i < CHAIN; i++)
        dst[i] = buf[i];
    hits = kvt_get(ns, k, CHAIN, dst);
    cr_assert_geq(hits, 0, "alice's get: %s", kvt_strerror(hits));
    for (int i = 0; i < hits; i++) {
        cr_assert_neq(t_check(buf[i], BLK, FORGED * 100 + (uint64_t)i), -1,
                      "block %d: bobby's forged bytes served to alice", i);
        cr_assert_eq(t_check(buf[i], BLK, (uint64_t)i), -1, "block %d: wrong bytes", i);
    }
    cr_assert_eq(hits, CHAIN, "alice's own chain: %d of %d blocks", hits, CHAIN);
    kvt_close(c);

    t_tierd_stop(&one);
    t_tierd_stop(&two);
    unlink(cfg);
    t_cluster_stop(&cl);
}

/* ---- a client gone while the store waits for the remote tier ----------- */

/* A cluster node that hangs: the kernel takes the connection (the listen
 * backlog), nobody ever answers. The listening socket, *port its port. */
static int hung_node(int *port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(0x7f000001) };
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    cr_assert(fd >= 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    cr_assert_eq(listen(fd, 16), 0);
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &len), 0);
    *port = ntohs(a.sin_port);
    return fd;
}

/* c's stats once pred holds (bounded). */
static kvt_stats stats_until(kvt_client *c, bool (*pred)(const kvt_stats *), const char *what)
{
    uint64_t t0 = cmn_now_ms();
    kvt_stats st;

    for (;;) {
        cr_assert_eq(kvt_stats_get(c, &st), 0);
        if (pred(&st))
            return st;
        cr_assert_lt(cmn_now_ms() - t0, slow() ? 60000u : 15000u,
                     "%s: never (reserved %llu, leases %llu)", what,
                     (unsigned long long)st.reserved, (unsigned long long)st.leases_active);
        usleep(10000);
    }
}

static bool remote_reading(const kvt_stats *st) { return st->reserved == 2; }
static bool all_back(const kvt_stats *st) { return st->reserved == 0 && st->leases_active == 0; }

/* The store holds the request (two slots for the remote's read), its
 * client is killed: the request goes with the session at once, the read
 * answers nobody when the node times out, its slots go back, and the
 * daemon (under valgrind: with no leak, no read of freed memory) serves
 * on. */
Test(tierd_remote, a_client_gone_while_its_get_waits_for_the_remote_leaves_nothing)
{
    static uint8_t buf[CHAIN][BLK];
    const void *src[CHAIN];
    void *dst[CHAIN];
    char seeds[64];
    kvt_key k[CHAIN];
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_stats st;
    int port, lfd = hung_node(&port), status;
    const char *args[] = { "--warm-bytes", "64M", "--remote-seeds", seeds,
                           "--remote-timeout-ms", slow() ? "3000" : "1000",
                           "--remote-policy", "on-demotion", NULL };
    pid_t pid;

    snprintf(seeds, sizeof(seeds), "127.0.0.1:%d", port);
    t_tierd_start(&d, args);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    chain_keys(k, 0);
    for (int i = 0; i < CHAIN; i++) {
        t_fill(buf[i], BLK, (uint64_t)i);
        src[i] = buf[i];
        dst[i] = buf[i];
    }
    cr_assert_eq(kvt_put(ns, NULL, k, 2, src), 2); /* the chain's first half, here */

    pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) { /* the client that goes: its get asks the hung node for the rest */
        kvt_client *cc = NULL;
        kvt_ns *cn = NULL;
        kvt_model m = t_model(BLK);

        if (kvt_connect(d.sock, &cc) < 0 || kvt_ns_open(cc, &m, &cn) < 0)
            _exit(2);
        kvt_get(cn, k, CHAIN, dst);
        _exit(3); /* killed before it is answered */
    }
    stats_until(c, remote_reading, "the get's read of the remote tier");
    cr_assert_eq(kill(pid, SIGKILL), 0);
    cr_assert_eq(waitpid(pid, &status, 0), pid);
    cr_assert(WIFSIGNALED(status), "the client was answered while the node hangs (exit %d)",
              WEXITSTATUS(status));

    st = stats_until(c, all_back, "everything back once the node timed out");
    cr_assert_eq(st.remote_hits, 0);
    /* and served on: the blocks here, byte for byte */
    cr_assert_eq(t_get_chain(ns, k, 2, BLK, 0, dst), 2);
    kvt_close(c);
    t_tierd_stop(&d);
    close(lfd);
}
