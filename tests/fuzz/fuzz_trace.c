/* SPDX-License-Identifier: MIT */
/*
 * fuzz_trace.c - libFuzzer harness for kvreplay's file parsers: the
 * Mooncake JSONL trace (kvr_trace_load) and the prices file
 * (kvr_prices_load). The first input byte picks the parser and its options,
 * the rest is the file, handed over as /proc/self/fd/N of a memfd, since both
 * parsers read paths. Checks what each promises on success and on failure.
 */
#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "kvreplay.h"

#define CHECK(x) do { if (!(x)) __builtin_trap(); } while (0)

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* The input as a file: one memfd, rewritten for each input. */
static const char *as_file(const uint8_t *data, size_t size)
{
    static char path[64];
    static int fd = -1;

    if (fd < 0) {
        fd = memfd_create("fuzz-input", MFD_CLOEXEC);
        CHECK(fd >= 0);
        snprintf(path, sizeof(path), "/proc/self/fd/%d", fd);
    }
    CHECK(ftruncate(fd, 0) == 0);
    CHECK(size == 0 || pwrite(fd, data, size, 0) == (ssize_t)size);
    return path;
}

static void check_msg(const char *err, size_t cap)
{
    CHECK(memchr(err, 0, cap) && err[0]);
}

/* A loaded trace: the requests' chains laid end to end, totals right. */
static void check_trace(const struct kvr_trace *tr, size_t limit)
{
    uint64_t keys = 0, tokens = 0;
    uint32_t max_blk = 0;

    CHECK(tr->nreq >= 1 && tr->nreq <= tr->req_cap && (limit == 0 || tr->nreq <= limit));
    CHECK(tr->nkeys <= tr->key_cap && (tr->nkeys == 0 || tr->keys));
    for (size_t i = 0; i < tr->nreq; i++) {
        const struct kvr_req *r = &tr->req[i];

        CHECK(r->first == keys);
        keys += r->nblk;
        tokens += r->input_len; /* wraps as the tool's sum does */
        max_blk = r->nblk > max_blk ? r->nblk : max_blk;
        CHECK(kvr_tokens_of(r, r->nblk, 16) <= r->input_len);
    }
    CHECK(keys == tr->nkeys && tokens == tr->tokens && max_blk == tr->max_blk);
    /* a chain's first key hangs off the root, never equal to it */
    if (tr->nkeys) {
        struct tier_key root;

        kvr_key_root("fuzz", &root);
        CHECK(memcmp(&root, &tr->keys[0], sizeof(root)) != 0);
    }
}

static void fuzz_trace(uint8_t sel, const uint8_t *data, size_t size)
{
    static const struct kvr_trace zero;
    struct kvr_trace tr;
    size_t limit = sel >> 4; /* 0: all */
    char err[200];
    int rc;

    memset(err, 0, sizeof(err));
    rc = kvr_trace_load(as_file(data, size), "fuzz", limit, &tr, err, sizeof(err));
    if (rc < 0) {
        CHECK(rc == -EINVAL || rc == -ENOMEM || rc == -EIO);
        check_msg(err, sizeof(err));
        CHECK(memcmp(&tr, &zero, sizeof(tr)) == 0); /* nothing left to free */
        return;
    }
    CHECK(rc == 0);
    check_trace(&tr, limit);
    kvr_trace_fini(&tr);
    CHECK(memcmp(&tr, &zero, sizeof(tr)) == 0);
}

static void fuzz_prices(uint8_t sel, const uint8_t *data, size_t size)
{
    static const char *const names[4] = { NULL, "api-1-50", "llama8b-h100", "" };
    struct kvr_prices p, before;
    struct kvr_cost c;
    char err[200];
    int rc;

    kvr_prices_default(&p);
    before = p;
    memset(err, 0, sizeof(err));
    rc = kvr_prices_load(as_file(data, size), names[(sel >> 1) & 3], &p, err, sizeof(err));
    if (rc < 0) {
        CHECK(rc == -EINVAL);
        check_msg(err, sizeof(err));
        CHECK(memcmp(&p, &before, sizeof(p)) == 0); /* all or nothing */
        return;
    }
    CHECK(rc == 0 && memchr(p.preset, 0, sizeof(p.preset)));
    {
        const double v[] = { p.miss_mtok, p.hit_mtok, p.params, p.gpu_flops, p.mfu,
                             p.gpu_hour, p.ram_gib_hour, p.nvme_gib_hour };

        for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
            CHECK(isfinite(v[i]) && v[i] >= 0);
    }
    /* the cost model only runs on checked prices; it must not trip then */
    if (kvr_prices_check(&p, err, sizeof(err)) == 0) {
        kvr_cost_compute(&p, 1e6, 3e6, 2.0, 1e9, 1e12, &c);
        CHECK(!(c.gpu_h_cache > c.gpu_h_nocache)); /* hits never cost GPU time */
    } else {
        check_msg(err, sizeof(err));
    }
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size == 0)
        return 0;
    if (data[0] & 1)
        fuzz_prices(data[0], data + 1, size - 1);
    else
        fuzz_trace(data[0], data + 1, size - 1);
    return 0;
}
