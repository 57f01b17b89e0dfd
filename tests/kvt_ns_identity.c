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

static struct kvt_model_desc desc_of(const char *name)
{
    struct kvt_model_desc d;
    char path[512], err[256];
    const char *src = getenv("KVT_TEST_SRC");

    snprintf(path, sizeof(path), "%s/data/configs/%s", src ? src : ".", name);
    cr_assert_eq(kvt_model_parse_file(path, &d, err, sizeof(err)), 0, "%s: %s", name, err);
    return d;
}

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
Test(ns_identity, each_fp8_format_is_its_own_namespace)
{
    static const char *const names[][2] = {
        { "fp8", "fp8_e4m3" },          { "float8_e4m3fn", "fp8_e4m3" },
        { "fp8_e5m2", "fp8_e5m2" },     { "float8_e5m2", "fp8_e5m2" },
        { "fp8_e4m3fnuz", "fp8_e4m3fnuz" }, { "float8_e4m3fnuz", "fp8_e4m3fnuz" },
        { "fp8_e5m2fnuz", "fp8_e5m2fnuz" }, { "float8_e5m2fnuz", "fp8_e5m2fnuz" },
    };
    static const char *const formats[] = { "fp8_e4m3", "fp8_e5m2", "fp8_e4m3fnuz",
                                           "fp8_e5m2fnuz" };
    struct kvt_model_desc d = desc_of("llama-3.1-8b.json"), fd[4];
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
