/* SPDX-License-Identifier: MIT */
/*
 * tierd_tenants.c - tenants kept apart: clients running as two different
 * uids (forked children that setuid, so the suite must run as root, as CI
 * does) each see, map and touch only their own tenant's blocks; a uid no
 * tenant admits is refused with -EACCES; one tenant filling its quota evicts
 * its own blocks, never the other's; bad config files stop tierd with the
 * line and the reason.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <unistd.h>

#include "t.h"

#define BLK (256u << 10)
#define ALICE T_ALICE
#define BOB T_BOB
#define STRANGER T_STRANGER
#define config_two t_config_two

/* A child's client on sock, its namespace of BLK blocks and 4 keys of
 * seed in k: the namespace, or NULL when it could not connect. */
static kvt_ns *user_ns(const char *sock, kvt_client **c, kvt_key *k, uint64_t seed)
{
    if (kvt_connect(sock, c))
        return NULL;
    t_keys(k, 4, seed);
    return t_ns(*c, BLK);
}

/* Alice sees nothing of bob's: not his keys, not his namespace, not his
 * counters; her own put of the same keys holds her own bytes. */
static int alice_isolated(const char *sock, void *arg)
{
    static uint8_t buf[4 * BLK];
    kvt_key k[4];
    kvt_ns_info info[4];
    kvt_stats st;
    kvt_client *c;
    kvt_ns *ns;
    int rc;

    (void)arg;
    if (!(ns = user_ns(sock, &c, k, 1)))
        return 20;
    if (kvt_lookup(ns, k, 4, 0, NULL) != 0)
        return 21; /* bob's blocks are visible */
    if (kvt_stats_get(c, &st) || st.tier[KVT_TIER_WARM].blocks != 0 || st.clients != 1)
        return 22; /* bob's blocks or session counted */
    if (kvt_admin_namespaces(c, info, 4) != 1 || info[0].lookups != 1)
        return 23;
    /* 24: the put failed (deduplicated against bob's?), 25 the get, 26 a byte */
    if ((rc = t_put_get4(ns, k, buf, BLK, 200)) != 0)
        return 23 + rc;
    /* her namespace id may equal bob's: purging it purges hers only */
    if (kvt_admin_purge(c, info[0].id) != 4)
        return 27;
    if (kvt_admin_purge(c, 99) != KVT_ENONS)
        return 28;
    kvt_close(c);
    return 0;
}

/* Bob's blocks are all there, in warm, untouched by alice. */
static int bob_intact(const char *sock, void *arg)
{
    static uint8_t buf[4][BLK];
    void *dst[4];
    uint8_t tiers[4];
    kvt_key k[4];
    kvt_stats st;
    kvt_client *c;
    kvt_ns *ns;

    (void)arg;
    if (!(ns = user_ns(sock, &c, k, 1)))
        return 30;
    if (kvt_lookup(ns, k, 4, 0, tiers) != 4)
        return 31;
    for (int i = 0; i < 4; i++) {
        if (tiers[i] != KVT_TIER_WARM)
            return 32;
        dst[i] = buf[i];
    }
    if (kvt_get(ns, k, 4, dst) != 4)
        return 33;
    for (int i = 0; i < 4; i++)
        if (t_check(buf[i], BLK, 100 + (uint64_t)i) != -1)
            return 34;
    if (kvt_stats_get(c, &st) || st.tier[KVT_TIER_WARM].evictions != 0)
        return 35; /* someone else's pressure evicted bob's blocks */
    kvt_close(c);
    return 0;
}

static int stranger(const char *sock, void *arg)
{
    kvt_client *c;
    int rc = kvt_connect(sock, &c);

    (void)arg;
    if (rc == 0) {
        kvt_close(c);
        return 40;
    }
    return rc == -EACCES ? 0 : 41;
}

/* Alice writes 3x her warm quota (8 MiB = 32 blocks): she evicts her own. */
static int alice_floods(const char *sock, void *arg)
{
    static uint8_t buf[BLK];
    const void *src[16];
    kvt_key k[96];
    kvt_stats st;
    kvt_client *c;
    kvt_ns *ns;

    (void)arg;
    if (kvt_connect(sock, &c))
        return 50;
    ns = t_ns(c, BLK);
    t_keys(k, 96, 7);
    for (int i = 0; i < 16; i++)
        src[i] = buf;
    for (int at = 0; at < 96; at += 16) {
        int rc, tries = 0;

        /* -ENOSPC while the slots are pinned by writes to disk: an engine
         * retries (slow under valgrind) */
        while ((rc = kvt_put(ns, at ? &k[at - 1] : NULL, k + at, 16, src)) == -ENOSPC &&
               ++tries < 500)
            usleep(20000);
        if (rc != 16)
            return 51;
    }
    if (kvt_stats_get(c, &st) || st.tier[KVT_TIER_WARM].evictions == 0)
        return 52; /* over quota without evicting */
    if (st.tier[KVT_TIER_WARM].bytes_capacity > (16u << 20))
        return 53; /* her pool is not her quota */
    kvt_close(c);
    return 0;
}

/* Start d on the two tenants' config (its path returned, for the caller
 * to unlink), its folder open to their uids; skips the test unless root. */
static const char *two_tenants(struct t_tierd *d)
{
    const char *cfg;

    if (geteuid() != 0)
        cr_skip_test("needs root to run clients as other uids (CI runs as root)");
    cfg = t_config(config_two);
    t_tierd_start(d, (const char *const[]){ "--config", cfg, NULL });
    cr_assert_eq(chmod(d->dir, 0755), 0); /* the other uids must reach the socket */
    return cfg;
}

/* fn(d's socket, arg) as uid must exit 0; who names it in the failure. */
static void as_user_ok(uid_t uid, int (*fn)(const char *, void *), const struct t_tierd *d,
                       void *arg, const char *who)
{
    int st = t_as_user(uid, fn, d->sock, arg);

    cr_assert_eq(st, 0, "%s: exit %d", who, st);
}

Test(tierd_tenants, two_uids_see_and_touch_only_their_own)
{
    struct t_tierd d;
    const char *cfg = two_tenants(&d);

    as_user_ok(BOB, t_user_puts, &d, NULL, "bob");
    as_user_ok(ALICE, alice_isolated, &d, NULL, "alice");
    as_user_ok(BOB, bob_intact, &d, NULL, "bob after alice");
    as_user_ok(STRANGER, stranger, &d, NULL, "a uid of no tenant");
    as_user_ok(ALICE, alice_floods, &d, NULL, "alice over her quota");
    as_user_ok(BOB, bob_intact, &d, NULL, "bob after alice's flood");
    t_tierd_stop(&d);
    unlink(cfg);
}

/* Bob tries to release alice's pin (its id in arg) and to pin her keys. */
static int bob_unpins(const char *sock, void *arg)
{
    kvt_pin pin = *(const kvt_pin *)arg, mine;
    kvt_client *c;
    kvt_stats st;
    kvt_key k[4];
    kvt_ns *ns;

    if (!(ns = user_ns(sock, &c, k, 9)))
        return 10;
    if (kvt_unpin(c, &pin) != 0)
        return 11;
    if (kvt_lookup_pin(ns, k, 4, 0, &mine, NULL) != 0 || mine.id != 0)
        return 12;
    if (kvt_stats_get(c, &st) != 0) /* after the unpin, on the same connection */
        return 13;
    kvt_close(c);
    return 0;
}

Test(tierd_tenants, a_pin_is_released_only_within_its_tenant)
{
    struct t_tierd d;
    const char *cfg = two_tenants(&d);
    kvt_client *c;
    kvt_ns *ns;
    kvt_key k[4];
    kvt_pin pin;
    kvt_stats st;
    const void *src[4];
    static uint8_t buf[BLK];

    c = t_connect(&d); /* root: alice */
    ns = t_ns(c, BLK);
    t_keys(k, 4, 9);
    for (int i = 0; i < 4; i++)
        src[i] = buf;
    cr_assert_eq(kvt_put(ns, NULL, k, 4, src), 4);
    cr_assert_eq(kvt_lookup_pin(ns, k, 4, 0, &pin, NULL), 4);
    cr_assert_eq(pin.n, 4);
    as_user_ok(BOB, bob_unpins, &d, &pin, "bob");
    cr_assert_eq(kvt_stats_get(c, &st), 0);
    cr_assert_eq(st.leases_active, 4, "another tenant released alice's pin");
    cr_assert_eq(kvt_unpin(c, &pin), 0);
    cr_assert_eq(kvt_stats_get(c, &st), 0);
    cr_assert_eq(st.leases_active, 0);
    kvt_close(c);
    t_tierd_stop(&d);
    unlink(cfg);
}

/* Each tenant's blocks survive a restart in its own folder, and only
 * there. */
Test(tierd_tenants, each_tenant_has_its_own_disk)
{
    struct t_tierd d;
    const char *cfg = two_tenants(&d);
    char path[512];
    struct stat sb;

    as_user_ok(BOB, t_user_puts, &d, NULL, "bob");
    cr_assert_eq(t_tierd_kill(&d, SIGTERM), 0); /* flushes warm to each tenant's disk */
    snprintf(path, sizeof(path), "%s/data/tenants/bob/cold.data", d.dir);
    cr_assert_eq(stat(path, &sb), 0, "no %s", path);
    snprintf(path, sizeof(path), "%s/data/tenants/alice/cold.data", d.dir);
    cr_assert_eq(stat(path, &sb), 0, "no %s", path);
    t_tierd_restart(&d, (const char *const[]){ "--config", cfg, NULL });
    as_user_ok(ALICE, alice_isolated, &d, NULL, "alice after restart");
    t_tierd_stop(&d);
    unlink(cfg);
}

/* Run tierd with a config; its exit status, stderr into err. */
static int tierd_with(const char *cfg, char *err, size_t cap)
{
    char dir[64], sock[128], data[128], *e;
    int st;

    t_tmpdir("kvt-tcfg", dir, sizeof(dir));
    snprintf(sock, sizeof(sock), "%s/s", dir);
    snprintf(data, sizeof(data), "%s/d", dir);
    st = t_run("tierd",
               (const char *const[]){ "--socket", sock, "--data", data, "--config", cfg,
                                      "--cold-bytes", "16M", NULL },
               0, NULL, &e);
    snprintf(err, cap, "%s", e);
    free(e);
    t_rmtree(dir);
    return st;
}

Test(tierd_tenants, bad_config_files_stop_tierd_with_the_line_and_the_reason)
{
    static const struct {
        const char *text, *want;
        int status;
    } cases[] = {
        { "[tenant.a]\nuids = 1\nwarm_bytes = 12Q\n", ":3: warm_bytes: bad size '12Q'",
          EX_CONFIG },
        { "[tenant.a]\nuids = 1\ncolour = blue\n", ":3: [tenant.a]: unknown key 'colour'",
          EX_CONFIG },
        { "[tenant.a]\nuids = 1\n[tenant.b]\nuids = 2, 1\n", "uid 1 is in tenants a and b",
          EX_CONFIG },
        { "[tenant.a]\nwarm_bytes = 8M\n", "[tenant.a] admits nobody", EX_CONFIG },
        { "[daemon]\n", "no [tenant.NAME] section", EX_CONFIG },
        { "[tenant.a]\nuids = no-such-user-kvt\n", ":2: uids: no such user 'no-such-user-kvt'",
          EX_CONFIG },
        { "[tenant.a b]\nuids = 1\n", "a tenant name is", EX_CONFIG },
        { "[pool]\nsize = 1\n", ":2: unknown section [pool]", EX_CONFIG },
        { "just words\n", ":1: not a key = value line", EX_CONFIG },
    };
    char err[4096];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        const char *cfg = t_config(cases[i].text);
        int st = tierd_with(cfg, err, sizeof(err));

        cr_expect_eq(st, cases[i].status, "case %zu: status %d: %s", i, st, err);
        cr_expect(strstr(err, cases[i].want) != NULL, "case %zu: want '%s' in: %s", i,
                  cases[i].want, err);
        unlink(cfg);
    }
    cr_expect_eq(tierd_with("/nonexistent/tierd.conf", err, sizeof(err)), EX_NOINPUT, "%s",
                 err);
    cr_expect(strstr(err, "/nonexistent/tierd.conf: No such file"), "%s", err);
}
