/* SPDX-License-Identifier: MIT */
/*
 * tierctl_cli.c - the operator's command line against a private tierd:
 * stats as a table and as JSON (parsed back with jansson and compared with
 * what the test did), the live view, health for scripts, and the clear
 * errors and exit codes for a dead socket and bad usage.
 */
#include <criterion/criterion.h>
#include <signal.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <sysexits.h>
#include <unistd.h>

#include "t.h"

#define BLK (64u << 10)

/* Run tierctl with args (NULL-terminated), stdout and stderr together into
 * out. Returns the exit status (128+signal when killed). */
static int tierctl(char *out, size_t cap, const char *const *args)
{
    char *o, *e;
    int st = t_run("tierctl", args, 0, &o, &e);

    snprintf(out, cap, "%s%s", o, e);
    free(o);
    free(e);
    return st;
}

/* Put n blocks and look up n + extra keys (n hits, extra misses). */
static void traffic(const struct t_tierd *d, int n, int extra)
{
    kvt_client *c = t_connect(d);
    kvt_ns *ns = t_ns(c, BLK);
    static uint8_t buf[BLK];
    const void *bufs[16];
    kvt_key k[32];

    t_keys(k, (size_t)(n + extra), 5);
    t_fill(buf, BLK, 1);
    for (int i = 0; i < n; i++)
        bufs[i] = buf;
    cr_assert_eq(kvt_put(ns, NULL, k, (size_t)n, bufs), n);
    cr_assert_eq(kvt_lookup(ns, k, (size_t)(n + extra), 0, NULL), n);
    kvt_close(c);
}

Test(tierctl_cli, stats_table_and_json_tell_what_happened)
{
    static char out[16384];
    struct t_tierd d;
    json_error_t jerr;
    json_t *j, *warm;

    t_tierd_start(&d, NULL);
    traffic(&d, 6, 2);
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "stats", "--socket", d.sock, NULL }),
                 0, "%s", out);
    cr_assert(strstr(out, "hit_rate") && strstr(out, "75.0%"), "table: %s", out);
    cr_assert(strstr(out, "warm"), "no tier rows: %s", out);
    cr_assert_eq(tierctl(out, sizeof(out),
                         (const char *[]){ "stats", "--json", "--socket", d.sock, NULL }),
                 0, "%s", out);
    j = json_loads(out, 0, &jerr);
    cr_assert_not_null(j, "not JSON (%s): %s", jerr.text, out);
    cr_assert_eq(json_integer_value(json_object_get(j, "lookup_keys")), 8);
    cr_assert_eq(json_integer_value(json_object_get(j, "lookup_hits")), 6);
    cr_assert_eq(json_integer_value(json_object_get(j, "put_blocks")), 6);
    cr_assert_eq(json_integer_value(json_object_get(j, "version")), KVT_STATS_VERSION);
    cr_assert_float_eq(json_real_value(json_object_get(j, "hit_rate")), 0.75, 1e-9);
    warm = json_object_get(json_object_get(j, "tiers"), "warm");
    cr_assert_eq(json_integer_value(json_object_get(warm, "blocks")), 6);
    json_decref(j);
    t_tierd_stop(&d);
}

Test(tierctl_cli, top_refreshes_with_rates_and_health_answers)
{
    static char out[32768];
    struct t_tierd d;
    const char *p;
    int screens = 0;

    t_tierd_start(&d, NULL);
    traffic(&d, 4, 0);
    cr_assert_eq(tierctl(out, sizeof(out),
                         (const char *[]){ "top", "--socket", d.sock, "--count", "3",
                                           "--interval", "0.1", NULL }),
                 0, "%s", out);
    for (p = out; (p = strstr(p, "tierd at ")); p++)
        screens++;
    cr_assert_eq(screens, 3, "%d screens: %s", screens, out);
    cr_assert(strstr(out, "hit rate 100.0%") || strstr(out, "100.0% (all)"), "%s", out);
    cr_assert(strstr(out, "warm  ["), "no occupancy bar: %s", out);
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "health", "--socket", d.sock, NULL }),
                 0, "%s", out);
    cr_assert(strncmp(out, "ok: tierd at ", 13) == 0, "%s", out);
    cr_assert(strstr(out, "warm 4"), "%s", out);
    t_tierd_stop(&d);
}

Test(tierctl_cli, dead_socket_and_bad_usage_get_clear_errors)
{
    static char out[8192];
    static const char *const cmds[] = { "stats", "top", "health" };

    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++) {
        cr_assert_eq(tierctl(out, sizeof(out),
                             (const char *[]){ cmds[i], "--socket", "/nonexistent/tierd.sock",
                                               NULL }),
                     EX_UNAVAILABLE, "%s: %s", cmds[i], out);
        cr_assert(strstr(out, "cannot reach tierd at /nonexistent/tierd.sock"), "%s", out);
        cr_assert(strstr(out, "is tierd running?"), "%s", out);
        /* how to start it, installed and in the tree */
        cr_assert(strstr(out, "systemctl start tierd") && strstr(out, "make run"), "%s", out);
    }
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "top", "--interval", "0", NULL }),
                 EX_USAGE);
    cr_assert(strstr(out, "--interval '0'"), "%s", out);
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "top", "--count", "x", NULL }),
                 EX_USAGE);
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "stats", "--bogus", NULL }),
                 EX_USAGE);
    cr_assert(strstr(out, "unknown option '--bogus'"), "%s", out);
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "frobnicate", NULL }), EX_USAGE);
    cr_assert(strstr(out, "unknown command 'frobnicate'"), "%s", out);
}

/* Hex of a key, as `tierctl hash` prints it. */
static const char *hex_of(const kvt_key *k, char buf[65])
{
    for (int i = 0; i < KVT_KEY_BYTES; i++)
        snprintf(buf + 2 * i, 3, "%02x", k->b[i]);
    return buf;
}

Test(tierctl_cli, namespaces_and_why_tell_each_miss_its_cause)
{
    static char out[65536];
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key k[12];
    static uint8_t buf[BLK];
    const void *bufs[8];
    json_error_t jerr;
    json_t *j, *x, *m;
    char hex[65];

    t_tierd_start(&d, NULL);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    t_keys(k, 12, 21);
    for (int i = 0; i < 8; i++)
        bufs[i] = buf;
    cr_assert_eq(kvt_put(ns, NULL, k, 8, bufs), 8);
    cr_assert_eq(kvt_remove(ns, k + 6, 2), 2);
    /* 6 hits; k[6..7] removed; k[8..11] never stored */
    cr_assert_eq(kvt_lookup(ns, k, 12, 0, NULL), 6);
    cr_assert_eq(tierctl(out, sizeof(out),
                         (const char *[]){ "namespaces", "--json", "--socket", d.sock, NULL }),
                 0, "%s", out);
    j = json_loads(out, 0, &jerr);
    cr_assert_not_null(j, "not JSON (%s): %s", jerr.text, out);
    cr_assert_eq(json_array_size(j), 1, "%s", out);
    x = json_array_get(j, 0);
    cr_assert_str_eq(json_string_value(json_object_get(x, "model_id")), "test/model");
    cr_assert_eq(json_integer_value(json_object_get(x, "lookup_keys")), 12);
    cr_assert_eq(json_integer_value(json_object_get(x, "hit_keys")), 6);
    cr_assert_eq(json_integer_value(json_object_get(x, "hit_tokens")), 6 * 16);
    m = json_object_get(x, "misses");
    cr_assert_eq(json_integer_value(json_object_get(m, "removed")), 2, "%s", out);
    cr_assert_eq(json_integer_value(json_object_get(m, "never")), 4, "%s", out);
    cr_assert_eq(json_integer_value(json_object_get(m, "dropped")), 0, "%s", out);
    json_decref(j);
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "namespaces", "--socket", d.sock,
                                                             NULL }),
                 0, "%s", out);
    cr_assert(strstr(out, "test/model") && strstr(out, "hit rate 50.0%") &&
                  strstr(out, "removed 2") && strstr(out, "never 4"),
              "%s", out);
    /* one key's story: present, removed, never heard of */
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "why", hex_of(&k[0], hex),
                                                             "--socket", d.sock, NULL }),
                 0, "%s", out);
    cr_assert(strstr(out, "present in warm"), "%s", out);
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "why", hex_of(&k[7], hex),
                                                             "--socket", d.sock, NULL }),
                 0, "%s", out);
    cr_assert(strstr(out, "removed by a client"), "%s", out);
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "why", hex_of(&k[11], hex),
                                                             "--socket", d.sock, NULL }),
                 0, "%s", out);
    cr_assert(strstr(out, "unknown in every namespace"), "%s", out);
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "why", "12zz", "--socket", d.sock,
                                                             NULL }),
                 EX_DATAERR, "%s", out);
    cr_assert(strstr(out, "64 hex digits"), "%s", out);
    kvt_close(c);
    t_tierd_stop(&d);
}

Test(tierctl_cli, flush_makes_warm_durable_and_evict_purges_a_namespace)
{
    static char out[16384];
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key k[8];
    static uint8_t buf[BLK];
    const void *bufs[8];
    const void *slots[8];
    kvt_lease l;
    kvt_stats st;

    t_tierd_start(&d, NULL);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    t_keys(k, 8, 22);
    t_fill(buf, BLK, 3);
    for (int i = 0; i < 8; i++)
        bufs[i] = buf;
    cr_assert_eq(kvt_put(ns, NULL, k, 8, bufs), 8);
    kvt_close(c);
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "flush", "--socket", d.sock, NULL }),
                 0, "%s", out);
    /* durable: a kill -9 now loses nothing */
    cr_assert_eq(t_tierd_kill(&d, SIGKILL), 128 + SIGKILL);
    t_tierd_restart(&d, NULL);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    cr_assert_eq(kvt_lookup(ns, k, 8, 0, NULL), 8, "the flush did not reach the disk");
    /* a lease holds an evict off; then it goes, from disk too */
    cr_assert_eq(kvt_get_lease(ns, k, 1, slots, &l), 1);
    cr_assert_eq(tierctl(out, sizeof(out),
                         (const char *[]){ "evict", "--ns", "1", "--socket", d.sock, NULL }),
                 EX_TEMPFAIL, "%s", out);
    cr_assert(strstr(out, "in use"), "%s", out);
    cr_assert_eq(kvt_release(ns, &l), 0);
    cr_assert_eq(tierctl(out, sizeof(out),
                         (const char *[]){ "evict", "--ns", "1", "--socket", d.sock, NULL }),
                 0, "%s", out);
    cr_assert(strstr(out, "8 blocks removed"), "%s", out);
    cr_assert_eq(kvt_lookup(ns, k, 8, 0, NULL), 0);
    cr_assert_eq(kvt_stats_get(c, &st), 0);
    cr_assert_eq(st.tier[KVT_TIER_COLD].blocks, 0);
    cr_assert_eq(tierctl(out, sizeof(out),
                         (const char *[]){ "evict", "--ns", "9", "--socket", d.sock, NULL }),
                 EX_DATAERR, "%s", out);
    cr_assert(strstr(out, "no namespace 9"), "%s", out);
    cr_assert_eq(tierctl(out, sizeof(out), (const char *[]){ "evict", "--socket", d.sock, NULL }),
                 EX_USAGE, "%s", out);
    kvt_close(c);
    t_tierd_stop(&d);
}
