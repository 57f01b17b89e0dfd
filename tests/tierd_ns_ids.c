/* SPDX-License-Identifier: MIT */
/*
 * tierd_ns_ids.c - namespace ids on a tierd without a cold tier, where no
 * cold index hands them out: a hundred namespaces get ids 1..100, tierd's
 * memory stays flat while they open, and each one stores and serves its
 * own block (issue 13: each new namespace doubled the id and tierd's
 * registry, so about the 22nd was refused by the remote tier and the
 * registry grew to gigabytes).
 */
#include <criterion/criterion.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t.h"

#define BLK (64u << 10)
#define NNS 100
#define GROWTH_MAX_KIB (64 << 10) /* 100 blocks of 64 KiB in warm, and some room */

/* VmRSS of pid in KiB (/proc), or -1. */
static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    long kib = -1;
    FILE *f;

    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    f = fopen(path, "r");
    if (!f)
        return -1;
    while (fgets(line, sizeof(line), f))
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    fclose(f);
    return kib;
}

Test(tierd_ns_ids, ids_stay_dense_without_a_cold_tier)
{
    static const char *const no_cold[] = { "--no-cold", "--warm-bytes", "64M", NULL };
    static uint8_t buf[BLK];
    static kvt_ns_info info[NNS + 1];
    static char names[NNS][32];
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns[NNS];
    kvt_key k[NNS];
    long base;
    int n;

    t_tierd_start(&d, no_cold);
    if (!d.pid)
        cr_skip_test("needs a private tierd with --no-cold (KVT_TEST_ATTACH is set)");
    c = t_connect(&d);
    base = rss_kib(d.pid);
    cr_assert_gt(base, 0, "no VmRSS for tierd %d", (int)d.pid);
    t_keys(k, NNS, 1300);
    for (int i = 0; i < NNS; i++) {
        kvt_model m = t_model(BLK);
        const void *src = buf;
        long rss;
        int rc;

        snprintf(names[i], sizeof(names[i]), "test/model-%d", i);
        m.model_id = names[i];
        rc = kvt_ns_open(c, &m, &ns[i]);
        cr_assert_eq(rc, 0, "namespace %d: %s", i + 1, kvt_strerror(rc));
        t_fill(buf, BLK, 1300 + (uint64_t)i);
        cr_assert_eq(kvt_put(ns[i], NULL, &k[i], 1, &src), 1, "put in namespace %d", i + 1);
        /* checked at each step: the doubling registry passes the bound at
         * about the 15th namespace, long before it could hurt the machine */
        rss = rss_kib(d.pid);
        cr_assert_lt(rss - base, GROWTH_MAX_KIB, "tierd grew by %ld KiB with %d namespaces",
                     rss - base, i + 1);
    }
    n = kvt_admin_namespaces(c, info, NNS + 1);
    cr_assert_eq(n, NNS, "%d namespaces listed", n);
    for (int i = 0; i < NNS; i++) {
        cr_assert_eq(info[i].id, (uint32_t)i + 1, "namespace %d has id %u", i + 1, info[i].id);
        cr_assert_str_eq(info[i].model_id, names[i]);
    }
    /* every namespace serves its own block, and only its own */
    for (int i = 0; i < NNS; i++) {
        void *dst = buf;
        long bad;

        memset(buf, 0, BLK);
        cr_assert_eq(kvt_get(ns[i], &k[i], 1, &dst), 1, "get in namespace %d", i + 1);
        bad = t_check(buf, BLK, 1300 + (uint64_t)i);
        cr_assert_eq(bad, -1, "namespace %d: wrong byte at %ld", i + 1, bad);
        cr_assert_eq(kvt_lookup(ns[(i + 1) % NNS], &k[i], 1, 0, NULL), 0,
                     "namespace %d's key found in namespace %d", i + 1, (i + 1) % NNS + 1);
    }
    kvt_close(c);
    t_tierd_stop(&d);
}
