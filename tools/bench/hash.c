/* SPDX-License-Identifier: MIT */
/*
 * hash.c - figure 4: hashing a 128K-token prompt into block keys, against
 * raw SHA-256 of the same CBOR encodings.
 */
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include <openssl/evp.h>

#include "bench.h"

/* ---- figure 4: hashing a prompt ------------------------------------------ */

#define H_TOKENS 131072
#define H_BLOCK 16
#define H_KEYS (H_TOKENS / H_BLOCK)

/* Canonical CBOR of an unsigned integer (major type 0). */
static size_t cbor_uint(uint8_t *o, uint32_t v)
{
    if (v < 24) {
        o[0] = (uint8_t)v;
        return 1;
    }
    if (v <= 0xff) {
        o[0] = 0x18, o[1] = (uint8_t)v;
        return 2;
    }
    if (v <= 0xffff) {
        o[0] = 0x19, o[1] = (uint8_t)(v >> 8), o[2] = (uint8_t)v;
        return 3;
    }
    o[0] = 0x1a, o[1] = (uint8_t)(v >> 24), o[2] = (uint8_t)(v >> 16);
    o[3] = (uint8_t)(v >> 8), o[4] = (uint8_t)v;
    return 5;
}

/* vLLM's block encoding: [parent bytes(32), [16 uints], null]. The worst
 * case is 1 + 34 + 1 + 16 * 5 + 1 = 117 bytes. */
#define H_ENC_MAX 128

static size_t cbor_block(uint8_t *o, const uint8_t parent[32], const uint32_t *tok)
{
    size_t n = 0;
    o[n++] = 0x83; /* array(3) */
    o[n++] = 0x58; /* bytes, 1-byte length */
    o[n++] = 0x20; /* 32 */
    memcpy(o + n, parent, 32);
    n += 32;
    o[n++] = 0x80 | H_BLOCK; /* array(16) */
    for (int i = 0; i < H_BLOCK; i++)
        n += cbor_uint(o + n, tok[i]);
    o[n++] = 0xf6; /* null: no extra keys */
    return n;
}

struct hb {
    const uint32_t *tokens;
    kvt_key *keys;          /* kvt_hash_prompt's output */
    uint8_t *enc;           /* H_KEYS encodings of H_ENC_MAX bytes each */
    size_t len[H_KEYS];     /* bytes of each encoding */
    uint8_t out[H_KEYS][32];
    EVP_MD_CTX *ctx;
    EVP_MD *md;
};

static int hb_raw(struct hb *h)
{
    for (size_t i = 0; i < H_KEYS; i++) {
        if (EVP_DigestInit_ex(h->ctx, h->md, NULL) != 1 ||
            EVP_DigestUpdate(h->ctx, h->enc + i * H_ENC_MAX, h->len[i]) != 1 ||
            EVP_DigestFinal_ex(h->ctx, h->out[i], NULL) != 1)
            return -EIO;
    }
    return 0;
}

static int hb_kvt(struct hb *h)
{
    kvt_hash_opts o = { .block_tokens = H_BLOCK, .seed = "0" };
    ssize_t n = kvt_hash_prompt(&o, h->tokens, H_TOKENS, h->keys);
    return n == H_KEYS ? 0 : n < 0 ? (int)n : -EIO;
}

/*
 * Build the encodings tierbench expects (the chain computed here with
 * CBOR + SHA-256 of its own) and compare kvt_hash_prompt's keys with them:
 * a fast hash of the wrong bytes would be no figure at all.
 */
static int hb_prepare(struct hb *h)
{
    static const uint8_t seed_cbor[] = { 0x61, '0' }; /* CBOR text "0" */
    uint8_t parent[32];
    kvt_key none;
    int r;

    if (EVP_Digest(seed_cbor, sizeof(seed_cbor), parent, NULL, h->md, NULL) != 1)
        return -EIO;
    if ((r = kvt_none_hash("0", &none)) < 0)
        return r;
    if (memcmp(none.b, parent, 32) != 0) {
        printf("# ERROR: kvt_none_hash(\"0\") is not SHA-256(CBOR(\"0\"))\n");
        return -EIO;
    }
    for (size_t i = 0; i < H_KEYS; i++) {
        uint8_t *e = h->enc + i * H_ENC_MAX;
        h->len[i] = cbor_block(e, parent, h->tokens + i * H_BLOCK);
        if (EVP_Digest(e, h->len[i], parent, NULL, h->md, NULL) != 1)
            return -EIO;
        memcpy(h->out[i], parent, 32);
    }
    if ((r = hb_kvt(h)) < 0)
        return r;
    for (size_t i = 0; i < H_KEYS; i++) {
        if (memcmp(h->keys[i].b, h->out[i], 32) != 0) {
            char a[65], b[65];
            kvt_key mine;
            memcpy(mine.b, h->out[i], 32);
            printf("# ERROR: kvt_hash_prompt key %zu is %s, expected %s\n", i,
                   kvt_key_hex(&h->keys[i], a), kvt_key_hex(&mine, b));
            return -EIO;
        }
    }
    return 0;
}

/* Median seconds of bench_opt.hash_runs calls of fn. */
static int hb_time(int (*fn)(struct hb *), struct hb *h, double *secs)
{
    double t[256];
    int runs = bench_opt.hash_runs < 256 ? bench_opt.hash_runs : 256, r;
    if ((r = fn(h)) < 0) /* warm */
        return r;
    for (int i = 0; i < runs; i++) {
        uint64_t t0 = cmn_now_ns();
        if ((r = fn(h)) < 0)
            return r;
        t[i] = (double)(cmn_now_ns() - t0) / 1e9;
    }
    *secs = bench_median(t, runs);
    return 0;
}

void bench_hash(void)
{
    const char *name = "hash_131072_tokens_ms", *rname = "hash_vs_raw_sha256";
    struct hb *h = calloc(1, sizeof(*h));
    uint32_t *tokens = malloc(H_TOKENS * sizeof(*tokens));
    cpu_set_t old, one;
    bool pinned = false;
    const char *what = "malloc";
    double t_kvt, t_raw;
    uint64_t seed = 42;
    size_t total = 0;
    int r = -ENOMEM;

    printf("# --- %s: kvt_hash_prompt of %d random tokens (< 128000, seed 42), block %d, "
           "median of %d runs on one core\n", name, H_TOKENS, H_BLOCK, bench_opt.hash_runs);
    fflush(stdout);
    if (!h || !tokens)
        goto out_fail;
    h->keys = malloc(H_KEYS * sizeof(*h->keys));
    h->enc = malloc((size_t)H_KEYS * H_ENC_MAX);
    h->ctx = EVP_MD_CTX_new();
    h->md = EVP_MD_fetch(NULL, "SHA256", NULL);
    if (!h->keys || !h->enc || !h->ctx || !h->md)
        goto out_fail;
    for (size_t i = 0; i < H_TOKENS; i++)
        tokens[i] = (uint32_t)(bench_rng(&seed) % 128000);
    h->tokens = tokens;

    /* one core: stay on the CPU we are on for the timed part */
    if (sched_getaffinity(0, sizeof(old), &old) == 0) {
        CPU_ZERO(&one);
        CPU_SET(sched_getcpu() >= 0 ? sched_getcpu() : 0, &one);
        pinned = sched_setaffinity(0, sizeof(one), &one) == 0;
    }
    what = "correctness check against tierbench's own CBOR + SHA-256";
    if ((r = hb_prepare(h)) < 0)
        goto out_fail;
    for (size_t i = 0; i < H_KEYS; i++)
        total += h->len[i];
    what = "kvt_hash_prompt";
    if ((r = hb_time(hb_kvt, h, &t_kvt)) < 0)
        goto out_fail;
    what = "EVP SHA-256";
    if ((r = hb_time(hb_raw, h, &t_raw)) < 0)
        goto out_fail;
    /* once more, so that drift between the two is visible in the context line */
    double t_kvt2;
    if ((r = hb_time(hb_kvt, h, &t_kvt2)) < 0)
        goto out_fail;
    t_kvt = t_kvt < t_kvt2 ? t_kvt : t_kvt2;

    printf("# keys checked against tierbench's own CBOR + SHA-256 chain: all %d equal\n",
           H_KEYS);
    printf("# raw EVP SHA-256 over %d buffers, %zu bytes in all (%.1f per block): %.3f ms; "
           "kvt_hash_prompt: %.3f ms (%.3f ms in a second pass)\n", H_KEYS, total,
           (double)total / H_KEYS, t_raw * 1e3, t_kvt * 1e3, t_kvt2 * 1e3);
    bench_report(name, t_kvt * 1e3, "%.3f", "ms", "<=", "3");
    bench_report(rname, t_raw / t_kvt, "%.2f", "ratio", ">=", "0.5");
    goto out;

out_fail:
    bench_fail(name, what, r);
    bench_fail(rname, what, r);
out:
    if (pinned)
        sched_setaffinity(0, sizeof(old), &old);
    if (h) {
        EVP_MD_free(h->md);
        EVP_MD_CTX_free(h->ctx);
        free(h->keys);
        free(h->enc);
    }
    free(h);
    free(tokens);
}
