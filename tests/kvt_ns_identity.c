/* SPDX-License-Identifier: MIT */
/*
 * kvt_ns_identity.c - what keeps namespaces apart, through tierd: every
 * parameter that changes a block's bytes (each FP8 format, the pipeline
 * stage, an engine's own variant such as its KV scales) opens a namespace
 * of its own, and equal descriptors share one. A block put under one must
 * never be found under another.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "t.h"

#define BLK 4096

/* Whether a block put under a is found under b (same keys), through tierd. */
static bool shared(kvt_client *c, const kvt_model *a, const kvt_model *b, uint64_t seed)
{
    kvt_ns *na, *nb;
    kvt_key k[2];
    uint8_t buf[BLK];
    const void *bufs[2] = { buf, buf };
    int rc;

    t_keys(k, 2, seed);
    t_fill(buf, sizeof(buf), seed);
    rc = kvt_ns_open(c, a, &na);
    cr_assert_eq(rc, 0, "kvt_ns_open: %s", kvt_strerror(rc));
    rc = kvt_ns_open(c, b, &nb);
    cr_assert_eq(rc, 0, "kvt_ns_open: %s", kvt_strerror(rc));
    cr_assert_eq(kvt_put(na, NULL, k, 2, bufs), 2);
    rc = kvt_lookup(nb, k, 2, 0, NULL);
    cr_assert(rc == 0 || rc == 2, "lookup: %d", rc);
    return rc == 2;
}

/*
 * Bug (issue 13): every FP8 format (E4M3, E5M2 and their FNUZ variants)
 * was named "fp8", so engines storing different bytes for the same values
 * shared blocks. Each is its own dtype now, through the model description
 * into the namespace; "fp8" is E4M3, as vLLM defines it.
 */
Test(kvt_ns_identity, each_fp8_format_is_its_own_namespace)
{
    static const char *const names[][2] = {
        { "fp8", "fp8_e4m3" },          { "float8_e4m3fn", "fp8_e4m3" },
        { "fp8_e5m2", "fp8_e5m2" },     { "float8_e5m2", "fp8_e5m2" },
        { "fp8_e4m3fnuz", "fp8_e4m3fnuz" }, { "float8_e4m3fnuz", "fp8_e4m3fnuz" },
        { "fp8_e5m2fnuz", "fp8_e5m2fnuz" }, { "float8_e5m2fnuz", "fp8_e5m2fnuz" },
    };
    static const char *const formats[] = { "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz",
                                           "fp8_e5m2fnuz" };
    struct kvt_model_desc d = t_model_desc("llama-3.1-8b.json"), fd[4];
    kvt_model m[4];
    struct t_tierd td;
    kvt_client *c;

    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        cr_assert_eq(kvt_model_set_dtype(&d, names[i][0]), 0, "%s refused", names[i][0]);
        cr_assert_str_eq(d.dtype, names[i][1], "%s: named %s", names[i][0], d.dtype);
        cr_assert_eq(d.elem_bytes, 1);
    }
    t_tierd_start(&td, NULL);
    c = t_connect(&td);
    /* the descriptions of one model in each format, as an engine opens them */
    for (int i = 0; i < 4; i++) {
        fd[i] = d;
        cr_assert_eq(kvt_model_set_dtype(&fd[i], formats[i]), 0);
        m[i] = (kvt_model){ .model_id = "test/llama-fp8", .layout = "test", .tp_size = 1 };
        cr_assert_eq(kvt_model_fill_ns(&fd[i], 16, &m[i]), 0);
        m[i].block_bytes = BLK; /* small blocks for the test; the dtype is the point */
        cr_assert_str_eq(m[i].dtype, formats[i]);
    }
    for (int i = 0; i < 4; i++)
        for (int j = 0; j < 4; j++)
            cr_assert_eq(shared(c, &m[i], &m[j], 100 + 4 * (uint64_t)i + (uint64_t)j),
                         i == j, "%s and %s: %s", formats[i], formats[j],
                         i == j ? "a format must share with itself" : "blocks shared");
    kvt_close(c);
    t_tierd_stop(&td);
}

/*
 * Bug (issue 13): the pipeline-parallel stage and per-instance parameters
 * such as KV scales were not part of a namespace, so two stages of one
 * model (same layer count, same tensor-parallel rank) shared blocks that
 * hold different layers, and engines with different scales shared FP8
 * bytes that mean different values. Both are in the namespace now; a plain
 * descriptor is what it was (its layout as given).
 */
Test(kvt_ns_identity, pipeline_stages_and_variants_are_namespaces)
{
    static const char scales_a[] = "k_scale=0.5,v_scale=0.25", scales_b[] = "k_scale=0.5";
    kvt_model base = t_model(BLK), st0 = base, st1 = base, st0_again = base, pp1 = base;
    kvt_model va = base, vb = base, va_again = base, bad;
    struct t_tierd td;
    kvt_client *c;
    kvt_ns_info info[16];
    kvt_ns *ns;
    int n, found = 0;

    st0.pp_size = 2, st0_again.pp_size = 2;
    st1.pp_size = 2, st1.pp_rank = 1;
    pp1.pp_size = 1; /* the same as 0: one stage */
    va.variant = scales_a, va.variant_len = sizeof(scales_a);
    va_again.variant = scales_a, va_again.variant_len = sizeof(scales_a);
    vb.variant = scales_b, vb.variant_len = sizeof(scales_b);
    t_tierd_start(&td, NULL);
    c = t_connect(&td);
    cr_assert_not(shared(c, &st0, &st1, 1), "two pipeline stages share blocks");
    cr_assert_not(shared(c, &base, &st0, 2), "a stage shares with the whole model");
    cr_assert(shared(c, &st0, &st0_again, 3), "one stage must share with itself");
    cr_assert(shared(c, &base, &pp1, 4), "pp_size 1 is the default");
    cr_assert_not(shared(c, &va, &vb, 5), "different variants share blocks");
    cr_assert_not(shared(c, &base, &va, 6), "a variant shares with none");
    cr_assert(shared(c, &va, &va_again, 7), "equal variants must share");
    /* what tierd records: the plain layout, or its start and a digest */
    n = kvt_admin_namespaces(c, info, 16);
    cr_assert_geq(n, 5);
    for (int i = 0; i < n && i < 16; i++) {
        cr_assert(strcmp(info[i].layout, "test") == 0 ||
                  (strncmp(info[i].layout, "test#", 5) == 0 &&
                   strlen(info[i].layout) == sizeof(info[i].layout) - 1),
                  "namespace %u: layout '%s'", info[i].id, info[i].layout);
        found += strcmp(info[i].layout, "test") == 0;
    }
    cr_assert_eq(found, 1, "the plain descriptor's layout changed");
    /* bad stages and variants */
    bad = base, bad.pp_size = 2, bad.pp_rank = 2;
    cr_assert_eq(kvt_ns_open(c, &bad, &ns), -EINVAL);
    bad = base, bad.pp_rank = 1; /* pp_size 0: one stage */
    cr_assert_eq(kvt_ns_open(c, &bad, &ns), -EINVAL);
    bad = base, bad.variant_len = 4;
    cr_assert_eq(kvt_ns_open(c, &bad, &ns), -EINVAL, "a variant length without bytes");
    bad = base, bad.variant = scales_a, bad.variant_len = KVT_VARIANT_MAX + 1;
    cr_assert_eq(kvt_ns_open(c, &bad, &ns), -EINVAL);
    kvt_close(c);
    t_tierd_stop(&td);
}

/* A '#' in the caller's layout is always digested, so no plain layout can
 * pose as another descriptor's digest form; a long layout keeps its start. */
Test(kvt_ns_identity, layouts_that_look_like_digests_stay_apart)
{
    kvt_model a = t_model(BLK), b = t_model(BLK), st = t_model(BLK);
    char fake[sizeof(((kvt_ns_info *)0)->layout)];
    kvt_ns_info info[8];
    struct t_tierd td;
    kvt_client *c;
    int n;

    st.pp_size = 2;
    t_tierd_start(&td, NULL);
    c = t_connect(&td);
    cr_assert(shared(c, &st, &st, 1));
    n = kvt_admin_namespaces(c, info, 8);
    cr_assert_eq(n, 1);
    /* a caller passing that very string as its layout gets another namespace */
    snprintf(fake, sizeof(fake), "%s", info[0].layout);
    a.layout = fake;
    cr_assert_not(shared(c, &st, &a, 2), "a layout posed as a stage's digest");
    b.layout = "a-very-long-engine-layout-name!"; /* 31 bytes */
    b.pp_size = 2;
    cr_assert(shared(c, &b, &b, 3));
    n = kvt_admin_namespaces(c, info, 8);
    cr_assert_eq(n, 3);
    /* its first 18 bytes, '#', 12 digits */
    cr_assert_eq(strncmp(info[2].layout, "a-very-long-engine#", 19), 0, "%s", info[2].layout);
    cr_assert_eq(strlen(info[2].layout), 31, "%s", info[2].layout);
    kvt_close(c);
    t_tierd_stop(&td);
}
