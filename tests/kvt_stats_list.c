/* SPDX-License-Identifier: MIT */
/*
 * kvt_stats_list.c - the counters are declared once (kvt_stats_list.h), and
 * every place that shows them shows exactly that list: libkvtier's
 * kvt_stats_fields() table, the Python binding's stats(), tierctl stats as
 * a table and as JSON, and the families of tierd's metrics page, read from
 * a tierd with a remote tier (a private Redis Cluster), so that the remote
 * tier's rows and samples are there too. A counter added to the list and
 * missing from any of them, or shown there and not in the list, fails.
 */
#include <criterion/criterion.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvt_common.h"
#include "kvtier.h"
#include "t.h"
#include "t_cluster.h"
#include "t_metrics.h"

#define BLK (64u << 10)

/* The list's names: kvt_stats's counters (the per-tier array aside), and
 * kvt_tier_stats's. */
#define TOP_NAME_STORE(name) #name,
#define TOP_NAME_TIERD(name) #name,
#define TOP_NAME_TIERS(name)
#define TOP_NAME(src, name, type, metric, help) TOP_NAME_##src(name)
#define TIER_NAME(name, type, metric, help, remote) #name,

static const char *const top_names[] = { KVT_STATS_LIST(TOP_NAME) NULL };
static const char *const tier_names[] = { KVT_TIER_STATS_LIST(TIER_NAME) NULL };

/* A set of names as one surface shows them (O(n^2) compares: a few dozen). */
struct names {
    char *v[256];
    size_t n;
};

static void add(struct names *s, const char *name, size_t len)
{
    cr_assert_lt(s->n, sizeof(s->v) / sizeof(s->v[0]), "more than 256 names");
    s->v[s->n] = strndup(name, len);
    cr_assert_not_null(s->v[s->n]);
    s->n++;
}

static bool in_list(const char *const *l, const char *name)
{
    for (; l && *l; l++)
        if (!strcmp(*l, name))
            return true;
    return false;
}

static bool in_set(const struct names *s, const char *name)
{
    for (size_t i = 0; i < s->n; i++)
        if (!strcmp(s->v[i], name))
            return true;
    return false;
}

/* got (where: the surface) must be want plus extra (the surface's own
 * figures, NULL-terminated; NULL: none) exactly, each name once. */
static void same_set(const char *where, struct names *got, const char *const *want,
                     const char *const *extra)
{
    for (const char *const *w = want; *w; w++)
        cr_expect(in_set(got, *w), "%s: no %s (in the list)", where, *w);
    for (const char *const *w = extra; w && *w; w++)
        cr_expect(in_set(got, *w), "%s: no %s (its own figure)", where, *w);
    for (size_t i = 0; i < got->n; i++) {
        cr_expect(in_list(want, got->v[i]) || in_list(extra, got->v[i]),
                  "%s: %s is not in the list", where, got->v[i]);
        for (size_t j = 0; j < i; j++)
            cr_expect(strcmp(got->v[i], got->v[j]), "%s: %s twice", where, got->v[i]);
    }
    for (size_t i = 0; i < got->n; i++)
        free(got->v[i]);
    got->n = 0;
}

static void keys_of(struct names *s, json_t *obj, const char *prefix)
{
    const char *k;
    json_t *v;
    char buf[128];

    json_object_foreach(obj, k, v) {
        snprintf(buf, sizeof(buf), "%s%s", prefix, k);
        add(s, buf, strlen(buf));
    }
}

Test(kvt_stats_list, the_field_table_is_the_structs_and_the_list)
{
    static const char *const head[] = { "version", "clients", "namespaces", "pad", "tier",
                                        NULL };
    struct names got = { .n = 0 };
    const kvt_stats_field *f;
    size_t n, bytes, end = 0;

    f = kvt_stats_fields(KVT_STATS_OF_STATS, &n, &bytes);
    cr_assert_not_null(f);
    cr_assert_eq(bytes, sizeof(kvt_stats));
    for (size_t i = 0; i < n; i++) {
        cr_expect_geq(f[i].offset, end, "%s at %u overlaps the field before", f[i].name,
                      f[i].offset);
        end = f[i].offset + f[i].bytes;
        cr_expect_leq(end, sizeof(kvt_stats), "%s runs past kvt_stats", f[i].name);
        cr_expect(!strcmp(f[i].name, "tier") ? f[i].bytes == sizeof(((kvt_stats *)0)->tier)
                                            : f[i].bytes == 4 || f[i].bytes == 8,
                  "%s: %u bytes", f[i].name, f[i].bytes);
        add(&got, f[i].name, strlen(f[i].name));
    }
    cr_expect_eq(f[0].offset, 0);
    cr_expect_eq(end, sizeof(kvt_stats), "the table ends at %zu of kvt_stats's %zu bytes", end,
                 sizeof(kvt_stats));
    same_set("kvt_stats_fields(KVT_STATS_OF_STATS)", &got, top_names, head);

    f = kvt_stats_fields(KVT_STATS_OF_TIER, &n, &bytes);
    cr_assert_not_null(f);
    cr_assert_eq(bytes, sizeof(kvt_tier_stats));
    for (size_t i = 0; i < n; i++) {
        cr_expect_eq(f[i].offset, i * 8, "%s", f[i].name);
        cr_expect(!strcmp(f[i].type, "counter") || !strcmp(f[i].type, "gauge"), "%s: %s",
                  f[i].name, f[i].type);
        add(&got, f[i].name, strlen(f[i].name));
    }
    same_set("kvt_stats_fields(KVT_STATS_OF_TIER)", &got, tier_names, NULL);

    n = bytes = 7;
    cr_expect_null(kvt_stats_fields(2, &n, &bytes));
    cr_expect(n == 0 && bytes == 0, "another `of`: %zu fields, %zu bytes", n, bytes);
}

/* The Python binding's stats() keys: top level, then those of one tier. */
static void python_names(const char *sock, struct names *top, struct names *tier)
{
    const char *py = getenv("KVT_TEST_PYTHON") ? getenv("KVT_TEST_PYTHON") : "/usr/bin/python3";
    const char *src = getenv("KVT_TEST_SRC") ? getenv("KVT_TEST_SRC") : ".";
    json_error_t jerr;
    json_t *j;
    char *out;

    /* the plain build's library: an ASan one does not load into python */
    out = t_sh_okf("KVTIER_LIB='%s/build/libkvtier.so' PYTHONPATH='%s/client/python' '%s' -c "
                   "'import json, kvtier; c = kvtier.Client(\"%s\"); s = c.stats(); "
                   "print(json.dumps(s)); c.close()'",
                   src, src, py, sock);
    j = json_loads(out, 0, &jerr);
    cr_assert_not_null(j, "python: not JSON (%s): %s", jerr.text, out);
    keys_of(top, j, "");
    keys_of(tier, json_object_get(json_object_get(j, "tier"), "warm"), "");
    cr_expect_eq(json_object_size(json_object_get(j, "tier")), 3, "python: tiers: %s", out);
    cr_expect_eq(json_integer_value(json_object_get(j, "put_blocks")), 4, "%s", out);
    json_decref(j);
    free(out);
}

static char *tierctl(const char *sock, bool json)
{
    const char *args[] = { "stats", "--socket", sock, json ? "--json" : NULL, NULL };
    char *out, *err;
    int st = t_run("tierctl", args, 0, &out, &err);

    cr_assert_eq(st, 0, "tierctl stats: %d: %s%s", st, out, err);
    free(err);
    return out;
}

/* tierctl stats's table: the first word of each row, the counters' rows
 * (before the blank line) into top, the per-tier table's into tier. */
static void table_names(const char *out, struct names *top, struct names *tier, bool *remote)
{
    struct names *into = top;
    const char *p = strchr(out, '\n');

    *remote = false;
    while (p && *++p) {
        const char *eol = strchrnul(p, '\n'), *w = p + 2;

        if (eol == p) {
            into = tier;
        } else {
            cr_assert(!strncmp(p, "  ", 2) && w[0] != ' ', "a row that is not one: %.*s",
                      (int)(eol - p), p);
            add(into, w, strcspn(w, " \n"));
            if (into == tier && !strncmp(w, "tier ", 5))
                *remote = memmem(w, (size_t)(eol - w), " remote", 7) != NULL;
        }
        p = *eol ? eol : NULL;
    }
}

/* The families (# TYPE lines) of the page, each with its type checked
 * against the list's; the per-tier ones with a remote figure must show a
 * tier="remote" sample. */
#define PAGE_FAM_STORE(name, type, metric) PAGE_FAM_ONE(metric, #type, "")
#define PAGE_FAM_TIERD(name, type, metric) PAGE_FAM_ONE(metric, #type, "")
#define PAGE_FAM_TIERS(name, type, metric)
#define PAGE_FAM(src, name, type, metric, help) PAGE_FAM_##src(name, type, metric)
#define PAGE_TIER_FAM(name, type, metric, help, remote) PAGE_FAM_ONE(metric, #type, remote)
#define PAGE_FAM_ONE(metric, type, remote)                                                 \
    if (*metric) {                                                                         \
        page_family(page, metric, type, *remote);                                          \
        want[n++] = metric;                                                                \
    }

static void page_family(const char *page, const char *name, const char *type, bool remote)
{
    char line[256];

    snprintf(line, sizeof(line), "\n# TYPE %s %s\n", name, type);
    cr_expect_not_null(strstr(page, line), "page: no family %s of type %s", name, type);
    snprintf(line, sizeof(line), "\n%s{tenant=\"default\",tier=\"remote\"} ", name);
    if (remote)
        cr_expect_not_null(strstr(page, line), "page: %s has no remote sample", name);
}

/* The page's families made from the list: those of the tenants' stores
 * ({tenant} or {tenant,tier} samples, as the list's are). */
static void page_names(const char *page, struct names *got)
{
    for (const char *p = page; (p = strstr(p, "\n# TYPE ")); p++) {
        const char *name = p + 8, *sample;
        size_t len = strcspn(name, " ");
        char pre[160];

        snprintf(pre, sizeof(pre), "\n%.*s{tenant=\"default\"", (int)len, name);
        sample = strstr(page, pre);
        if (sample && (sample[strlen(pre)] == '}' || !strncmp(sample + strlen(pre), ",tier=", 6)))
            add(got, name, len);
    }
}

Test(kvt_stats_list, python_tierctl_and_the_metrics_page_show_the_list, .timeout = 120)
{
    static const char *const head[] = { "version", "clients", "namespaces", "tier", NULL };
    static const char *const json_own[] = { "version", "clients", "namespaces", "hit_rate",
                                            "remote", "tiers", NULL };
    static const char *const table_own[] = { "clients", "namespaces", "hit_rate", NULL };
    static const char *const tier_own[] = { "tier", "use", NULL };
    /* the page's own per-tenant figures, not counters of the list: the
     * store's failed moves, kvt_stats's head (clients), the namespaces
     * summed into ns="other" */
    static const char *const page_own[] = { "kvtier_cold_errors_total",
                                            "kvtier_tenant_clients_connected",
                                            "kvtier_metrics_summed_namespaces", NULL };
    static uint8_t buf[BLK];
    const char *want[128];
    size_t n = 0;
    struct t_cluster cl;
    struct t_tierd d;
    struct names top = { .n = 0 }, tier = { .n = 0 };
    char port_s[8];
    const char *args[] = { "--warm-bytes", "64M", "--metrics-port", port_s, "--remote-seeds",
                           cl.seeds, "--remote-policy", "write-through", NULL };
    const void *bufs[4] = { buf, buf, buf, buf };
    kvt_client *c;
    kvt_stats st;
    kvt_key k[4];
    json_error_t jerr;
    json_t *j;
    char *out, *page = NULL;
    bool remote;

    t_cluster_start(&cl);
    snprintf(port_s, sizeof(port_s), "%u", t_metrics_free_port());
    t_tierd_start(&d, args);
    c = t_connect(&d);
    t_keys(k, 4, 18);
    t_fill(buf, BLK, 18);
    cr_assert_eq(kvt_put(t_ns(c, BLK), NULL, k, 4, bufs), 4);
    /* the remote tier's rows show once it has moved: wait for its writes */
    for (uint64_t t0 = cmn_now_ms(); kvt_stats_get(c, &st) == 0 && st.remote_puts < 4;)
        cr_assert_lt(cmn_now_ms() - t0, 30000, "remote writes: %llu of 4",
                     (unsigned long long)st.remote_puts);

    python_names(d.sock, &top, &tier);
    same_set("python stats()", &top, top_names, head);
    same_set("python stats()[\"tier\"][\"warm\"]", &tier, tier_names, NULL);

    out = tierctl(d.sock, true);
    j = json_loads(out, 0, &jerr);
    cr_assert_not_null(j, "tierctl --json: not JSON (%s): %s", jerr.text, out);
    keys_of(&top, j, "");
    keys_of(&top, json_object_get(j, "remote"), "remote_");
    same_set("tierctl stats --json", &top, top_names, json_own);
    keys_of(&tier, json_object_get(json_object_get(j, "tiers"), "cold"), "");
    same_set("tierctl stats --json tiers.cold", &tier, tier_names, NULL);
    cr_expect_eq(json_integer_value(json_object_get(j, "put_blocks")), 4, "%s", out);
    json_decref(j);
    free(out);

    out = tierctl(d.sock, false);
    table_names(out, &top, &tier, &remote);
    cr_expect(remote, "tierctl stats: no remote column: %s", out);
    same_set("tierctl stats", &top, top_names, table_own);
    same_set("tierctl stats (tiers)", &tier, tier_names, tier_own);
    free(out);

    cr_assert_eq(t_metrics_get((uint16_t)atoi(port_s), "/metrics", NULL, NULL, &page), 200);
    KVT_STATS_LIST(PAGE_FAM)
    KVT_TIER_STATS_LIST(PAGE_TIER_FAM)
    want[n] = NULL;
    page_names(page, &top);
    same_set("metrics page (the stores' families)", &top, want, page_own);
    free(page);

    kvt_close(c);
    t_tierd_stop(&d);
    t_cluster_stop(&cl);
}
