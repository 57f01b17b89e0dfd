// SPDX-License-Identifier: MIT
/*
 * kvk_check.cu - the CUDA gather/scatter movers of kernels/kvk.cu against
 * their CPU references (kernels/kvk_cpu.c), and their bandwidth against
 * cudaMemcpy. Needs a GPU; run by tests/gpu/run.sh.
 *
 * Part 1, equivalence: for the vLLM flash-attn, FlashInfer, HND and MLA
 * layouts, elem sizes 1/2/4 (MLA 2), head dims 64/128 (MLA 576), n = 1 and
 * 1024 blocks of a 4-layer cache of 2048 engine blocks: gather on the
 * device and with kvk_gather_ref on a host copy of the same cache, compare
 * the tier blocks byte for byte; scatter them at other ids into a zeroed
 * cache (the layers given the other way: one base vs a layer_base array)
 * on both sides, compare the whole allocation, gaps included. A few extra
 * cases shift every base by elem_bytes to reach the narrower copy paths.
 * Prints `gpu: kvk <layout> elem=<e> D=<d> n=<n> OK` per case, or the
 * first differing byte. Then two regression checks (issue 13): a scatter
 * with every id twice writes the last tier block of each, as the
 * reference's scatter of those; and a layer part of 2^32 - 1 bytes, copied
 * byte by byte, goes both ways (the 32-bit index wrapped there).
 *
 * Part 2, bandwidth: a Llama-3.1-8B-like vLLM cache (BF16, 32 layers, 8 KV
 * heads, head dim 128, 16-token blocks: 2 MiB tier blocks), 256 blocks
 * gathered / scattered device<->device and device<->mapped pinned host,
 * each against cudaMemcpyAsync of the same bytes. Prints
 * `bench: <name> <value> ratio target >= <t>` lines (tierbench's format).
 *
 * Exit status: 0 all equivalence cases passed, 1 some failed, 2 a CUDA or
 * allocation error. The bench targets are reported, not enforced.
 */
#include <cuda_runtime.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvk.h"
#include "../t_kvk.h"

#define CK(call)                                                                      \
    do {                                                                              \
        cudaError_t ck_err_ = (call);                                                 \
        if (ck_err_ != cudaSuccess) {                                                 \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #call,             \
                    cudaGetErrorString(ck_err_));                                     \
            exit(2);                                                                  \
        }                                                                             \
    } while (0)

/* A kvk_* call that must return 0; a failed launch shows up here too. */
#define KV(call)                                                                      \
    do {                                                                              \
        int kv_rc_ = (call);                                                          \
        if (kv_rc_ != 0) {                                                            \
            fprintf(stderr, "%s:%d: %s returned %d (%s)\n", __FILE__, __LINE__, #call, \
                    kv_rc_, cudaGetErrorString(cudaGetLastError()));                  \
            exit(2);                                                                  \
        }                                                                             \
    } while (0)

static void *xmalloc(size_t n)
{
    void *p = malloc(n ? n : 1);

    if (!p) {
        fprintf(stderr, "kvk_check: out of host memory (%zu bytes)\n", n);
        exit(2);
    }
    return p;
}

/* Deterministic bytes: every 8-byte word a hash of (seed, word index). */
static void fill_pattern(char *p, size_t bytes, uint64_t seed)
{
    size_t words = bytes / 8;

    for (size_t i = 0; i < words; i++) {
        uint64_t v = t_kvk_mix(seed ^ (i * 0x100000001b3ull));

        memcpy(p + 8 * i, &v, 8);
    }
    for (size_t i = 8 * words; i < bytes; i++)
        p[i] = (char)t_kvk_mix(seed + i);
}

/* A device copy of bytes of host memory; cudaFree it. */
static void *to_device(const void *h, size_t bytes)
{
    void *d;

    CK(cudaMalloc(&d, bytes));
    CK(cudaMemcpy(d, h, bytes, cudaMemcpyHostToDevice));
    return d;
}

/* cudaFree each device pointer, free() each host one. */
static void dev_free1(void *d)
{
    CK(cudaFree(d));
}
template <typename... P> static void dev_free(P... d)
{
    (dev_free1((void *)d), ...);
}
template <typename... P> static void host_free(P... h)
{
    (free((void *)h), ...);
}

/* Stream work between two events: span_start, the work, span_ms. */
struct span {
    cudaEvent_t t0, t1;
};

static void span_start(struct span *s, cudaStream_t st)
{
    CK(cudaEventCreate(&s->t0));
    CK(cudaEventCreate(&s->t1));
    CK(cudaEventRecord(s->t0, st));
}

/* Milliseconds since span_start, once the work queued before has run. */
static float span_ms(struct span *s, cudaStream_t st)
{
    float ms = 0;

    CK(cudaEventRecord(s->t1, st));
    CK(cudaEventSynchronize(s->t1));
    CK(cudaEventElapsedTime(&ms, s->t0, s->t1));
    CK(cudaEventDestroy(s->t0));
    CK(cudaEventDestroy(s->t1));
    return ms;
}

/* n distinct ids in [0, nb). */
static void pick_ids(int64_t *ids, size_t n, int64_t nb, uint64_t *rng)
{
    if (t_kvk_pick_ids(ids, n, nb, rng) != 0) {
        fprintf(stderr, "kvk_check: out of host memory (%lld ids)\n", (long long)nb);
        exit(2);
    }
}

/* ---------------------------------------------------------------------- */
/* Caches                                                                 */

/*
 * A cache mirrored on host and device: one allocation on each side, the
 * layers at mis + i * (layer_bytes + PAD). With one_base the layouts use
 * base + layer_stride, otherwise a layer_base array (host pointers for the
 * host layout, an uploaded device array for the device one).
 */
#define MAX_LAYERS 32
#define PAD 256

struct mcache {
    struct kvk_layout hl, dl;     /* host layout, device layout */
    char *h, *d;                  /* the two allocations */
    size_t bytes;                 /* of each */
    void *hbases[MAX_LAYERS];     /* host layer pointers */
    void *dbases_host[MAX_LAYERS]; /* device layer pointers, in host memory */
    void **dbases;                /* the same, uploaded */
};

static void mcache_init(struct mcache *c, const struct kvk_layout *shape, bool one_base,
                        size_t mis, cudaStream_t st)
{
    size_t lb = t_kvk_layer_bytes(shape);
    struct kvk_layout dl;

    memset(c, 0, sizeof(*c));
    c->bytes = mis + shape->n_layers * (lb + PAD);
    c->h = (char *)xmalloc(c->bytes);
    CK(cudaMalloc((void **)&c->d, c->bytes));
    CK(cudaMalloc((void **)&c->dbases, shape->n_layers * sizeof(void *)));
    for (uint32_t i = 0; i < shape->n_layers; i++) {
        c->hbases[i] = c->h + mis + i * (lb + PAD);
        c->dbases_host[i] = c->d + mis + i * (lb + PAD);
    }
    c->hl = *shape;
    dl = *shape;
    if (one_base) {
        c->hl.base = c->hbases[0];
        c->hl.layer_stride = (int64_t)(lb + PAD);
        dl.base = c->dbases_host[0];
        dl.layer_stride = (int64_t)(lb + PAD);
    } else {
        c->hl.layer_base = c->hbases;
        dl.layer_base = c->dbases_host;
    }
    KV(kvk_layout_check(&c->hl));
    KV(kvk_layout_upload(&dl, c->dbases, &c->dl, st));
    CK(cudaStreamSynchronize(st)); /* dbases_host is read by the queued copy */
}

static void mcache_fini(struct mcache *c)
{
    free(c->h);
    CK(cudaFree(c->d));
    CK(cudaFree(c->dbases));
}

/* Index of the first byte where a and b differ, or -1. */
static long long first_diff(const char *a, const char *b, size_t n)
{
    const size_t chunk = 1 << 20;

    for (size_t off = 0; off < n; off += chunk) {
        size_t len = n - off < chunk ? n - off : chunk;

        if (memcmp(a + off, b + off, len) == 0)
            continue;
        for (size_t i = off; i < off + len; i++)
            if (a[i] != b[i])
                return (long long)i;
    }
    return -1;
}

/* ---------------------------------------------------------------------- */
/* Part 1: equivalence with the CPU reference                             */

#define CHK_LAYERS 4
#define CHK_BLOCKS 2048
#define CHK_TOKENS 16
#define CHK_HEADS 2

static int n_fail, n_ok;

/* Count one check; a passed one prints `gpu: kvk <what> OK` (a failed one
 * printed its first difference already). */
static void tally(bool ok, const char *what)
{
    if (ok) {
        printf("gpu: kvk %s OK\n", what);
        n_ok++;
    } else {
        n_fail++;
    }
    fflush(stdout);
}

/*
 * One (layout, elem, head dim, misalignment): a patterned source cache on
 * both sides, and for each n a gather and a scatter checked against the
 * reference.
 */
static void check_shape(enum t_kvk_kind k, uint32_t eb, uint32_t hd, size_t mis, cudaStream_t st)
{
    static const size_t ns[] = { 1, 1024 };
    struct kvk_layout shape = t_kvk_layout(k, CHK_LAYERS, eb, CHK_TOKENS, CHK_HEADS, hd,
                                          CHK_BLOCKS);
    bool one_base = ((eb + hd / 64 + (uint32_t)k) & 1) != 0;
    struct mcache src, dst;
    uint64_t rng = t_kvk_mix(0x6b766b32ull ^ ((uint64_t)k << 40) ^ ((uint64_t)eb << 32) ^
                       ((uint64_t)hd << 8) ^ mis);
    size_t bb;

    mcache_init(&src, &shape, one_base, mis, st);
    mcache_init(&dst, &shape, !one_base, mis, st);
    fill_pattern(src.h, src.bytes, rng);
    CK(cudaMemcpy(src.d, src.h, src.bytes, cudaMemcpyHostToDevice));
    bb = kvk_block_bytes(&src.hl);

    for (size_t ni = 0; ni < sizeof(ns) / sizeof(ns[0]); ni++) {
        const size_t n = ns[ni];
        int64_t *src_ids = (int64_t *)xmalloc(n * sizeof(int64_t));
        int64_t *dst_ids = (int64_t *)xmalloc(n * sizeof(int64_t));
        void **hptrs = (void **)xmalloc(n * sizeof(void *));
        void **dptrs_host = (void **)xmalloc(n * sizeof(void *));
        size_t tier_bytes = n * bb + mis;
        char *htier = (char *)xmalloc(tier_bytes), *back = (char *)xmalloc(tier_bytes);
        char *dtier, *hcache_back;
        int64_t *d_src_ids, *d_dst_ids;
        void **dptrs;
        char label[96];
        long long at;
        bool ok = true;

        if (mis)
            snprintf(label, sizeof(label), "%s elem=%u D=%u n=%zu mis=%zu", t_kvk_kind_name[k], eb,
                     hd, n, mis);
        else
            snprintf(label, sizeof(label), "%s elem=%u D=%u n=%zu", t_kvk_kind_name[k], eb, hd, n);
        pick_ids(src_ids, n, CHK_BLOCKS, &rng);
        pick_ids(dst_ids, n, CHK_BLOCKS, &rng);
        KV(kvk_check_ids(&src.hl, src_ids, n));
        KV(kvk_check_ids(&dst.hl, dst_ids, n));

        CK(cudaMalloc((void **)&dtier, tier_bytes));
        for (size_t i = 0; i < n; i++) {
            hptrs[i] = htier + mis + i * bb;
            dptrs_host[i] = dtier + mis + i * bb;
        }
        d_src_ids = (int64_t *)to_device(src_ids, n * sizeof(int64_t));
        d_dst_ids = (int64_t *)to_device(dst_ids, n * sizeof(int64_t));
        dptrs = (void **)to_device(dptrs_host, n * sizeof(void *));

        /* gather: untouched bytes keep 0xee on both sides */
        memset(htier, 0xee, tier_bytes);
        CK(cudaMemset(dtier, 0xee, tier_bytes));
        KV(kvk_gather_ref(&src.hl, src_ids, n, hptrs));
        KV(kvk_gather(&src.dl, d_src_ids, n, dptrs, st));
        CK(cudaStreamSynchronize(st));
        CK(cudaMemcpy(back, dtier, tier_bytes, cudaMemcpyDeviceToHost));
        at = first_diff(htier, back, tier_bytes);
        if (at >= 0) {
            long long rel = at - (long long)mis;

            printf("gpu: kvk %s FAIL gather: tier byte %lld (block %lld, offset %lld): "
                   "expected 0x%02x, got 0x%02x\n", label, at,
                   rel < 0 ? -1 : rel / (long long)bb, rel < 0 ? rel : rel % (long long)bb,
                   (uint8_t)htier[at], (uint8_t)back[at]);
            ok = false;
        }

        /* scatter the same tier blocks into zeroed caches at other ids */
        memset(dst.h, 0, dst.bytes);
        CK(cudaMemset(dst.d, 0, dst.bytes));
        KV(kvk_scatter_ref(&dst.hl, (const void *const *)hptrs, dst_ids, n));
        KV(kvk_scatter(&dst.dl, (const void *const *)dptrs, d_dst_ids, n, st));
        CK(cudaStreamSynchronize(st));
        hcache_back = (char *)xmalloc(dst.bytes);
        CK(cudaMemcpy(hcache_back, dst.d, dst.bytes, cudaMemcpyDeviceToHost));
        at = first_diff(dst.h, hcache_back, dst.bytes);
        if (at >= 0) {
            long long rel = at - (long long)mis;
            long long span = (long long)(t_kvk_layer_bytes(&shape) + PAD);

            printf("gpu: kvk %s FAIL scatter: cache byte %lld (layer %lld, offset %lld): "
                   "expected 0x%02x, got 0x%02x\n", label, at, rel < 0 ? -1 : rel / span,
                   rel < 0 ? rel : rel % span, (uint8_t)dst.h[at], (uint8_t)hcache_back[at]);
            ok = false;
        }
        tally(ok, label);

        dev_free(dtier, d_src_ids, d_dst_ids, dptrs);
        host_free(hcache_back, src_ids, dst_ids, hptrs, dptrs_host, htier, back);
    }
    mcache_fini(&src);
    mcache_fini(&dst);
}

static void check_all(cudaStream_t st)
{
    static const uint32_t ebs[] = { 1, 2, 4 }, dims[] = { 64, 128 };

    for (int k = T_VLLM; k <= T_HND; k++)
        for (size_t e = 0; e < 3; e++)
            for (size_t d = 0; d < 2; d++)
                check_shape((enum t_kvk_kind)k, ebs[e], dims[d], 0, st);
    check_shape(T_MLA, 2, 576, 0, st);
    /* bases off 16-byte alignment: the 4-, 2- and 1-byte copy paths */
    for (int k = T_VLLM; k <= T_MLA; k++)
        for (size_t e = 0; e < 3; e++)
            if (k != T_MLA || ebs[e] == 2)
                check_shape((enum t_kvk_kind)k, ebs[e], k == T_MLA ? 576 : 64, ebs[e], st);
}

/*
 * Bug (issue 13): a scatter with a repeated id let two thread blocks write
 * one engine block at once, which could end up holding parts of both tier
 * blocks. The reference refuses such a call; the kernel writes only the
 * last tier block given for an id. 1024 tier blocks, each id twice (ids
 * i / 2), each tier block different: the device cache must equal the
 * reference's scatter of the odd (last) ones.
 */
static void check_repeated_ids(cudaStream_t st)
{
    const size_t n = 1024;
    struct kvk_layout shape = t_kvk_layout(T_VLLM, CHK_LAYERS, 2, CHK_TOKENS, CHK_HEADS, 128,
                                          CHK_BLOCKS);
    struct mcache dst;
    int64_t *ids = (int64_t *)xmalloc(n * sizeof(int64_t)), *d_ids;
    int64_t *last_ids = (int64_t *)xmalloc(n / 2 * sizeof(int64_t));
    void **hptrs = (void **)xmalloc(n * sizeof(void *)), **dptrs_host, **dptrs;
    void **last_ptrs = (void **)xmalloc(n / 2 * sizeof(void *));
    size_t bb = kvk_block_bytes(&shape);
    char *htier = (char *)xmalloc(n * bb), *dtier, *back;
    long long at;

    mcache_init(&dst, &shape, false, 0, st);
    dptrs_host = (void **)xmalloc(n * sizeof(void *));
    fill_pattern(htier, n * bb, 0x64757073ull);
    dtier = (char *)to_device(htier, n * bb);
    for (size_t i = 0; i < n; i++) {
        ids[i] = (int64_t)(i / 2);
        hptrs[i] = htier + i * bb;
        dptrs_host[i] = dtier + i * bb;
    }
    d_ids = (int64_t *)to_device(ids, n * sizeof(int64_t));
    dptrs = (void **)to_device(dptrs_host, n * sizeof(void *));
    if (kvk_check_scatter_ids(&dst.hl, ids, n) != -EINVAL ||
        kvk_scatter_ref(&dst.hl, (const void *const *)hptrs, ids, n) != -EINVAL) {
        printf("gpu: kvk repeated ids FAIL: the reference accepted them\n");
        n_fail++;
    }
    /* what must arrive: the last tier block of each id (every odd one) */
    memset(dst.h, 0, dst.bytes);
    for (size_t i = 0; i < n / 2; i++) {
        last_ids[i] = ids[2 * i + 1];
        last_ptrs[i] = hptrs[2 * i + 1];
    }
    KV(kvk_scatter_ref(&dst.hl, (const void *const *)last_ptrs, last_ids, n / 2));
    CK(cudaMemset(dst.d, 0, dst.bytes));
    KV(kvk_scatter(&dst.dl, (const void *const *)dptrs, d_ids, n, st));
    CK(cudaStreamSynchronize(st));
    back = (char *)xmalloc(dst.bytes);
    CK(cudaMemcpy(back, dst.d, dst.bytes, cudaMemcpyDeviceToHost));
    at = first_diff(dst.h, back, dst.bytes);
    if (at >= 0)
        printf("gpu: kvk repeated ids FAIL scatter: cache byte %lld: expected 0x%02x, "
               "got 0x%02x\n", at, (uint8_t)dst.h[at], (uint8_t)back[at]);
    tally(at < 0, "repeated ids: the last tier block of each id");
    dev_free(dtier, d_ids, dptrs);
    mcache_fini(&dst);
    host_free(back, ids, last_ids, hptrs, last_ptrs, dptrs_host, htier);
}

/*
 * Bug (issue 13): the copy loop's 32-bit unit index wrapped for a layer
 * part within one thread block's stride of 4 GiB, and the kernel never
 * ended. One engine block of one layer, 65537 tokens x 65535 FP8 dims
 * (MLA-shaped, dense): a part of 2^32 - 1 bytes, odd, so copied byte by
 * byte. It is one run, so the tier block holds the engine block's bytes as
 * they are: gather must give the cache's bytes, scatter must put them back.
 * Needs 8 GiB of device memory and 8 GiB of host memory; seconds.
 */
static void check_part_near_4gib(cudaStream_t st)
{
    struct kvk_layout shape = t_kvk_layout(T_MLA, 1, 1, 65537, 1, 65535, 1);
    size_t bytes = kvk_block_bytes(&shape);
    struct kvk_layout dl;
    char *h = (char *)xmalloc(bytes), *back = (char *)xmalloc(bytes), *dcache, *dtier;
    void **dptrs, *tier_ptr;
    const int64_t id = 0;
    int64_t *d_id;
    bool ok = true;
    struct span sp;
    char what[96];
    float ms;

    fill_pattern(h, bytes, 0x34676962ull);
    dcache = (char *)to_device(h, bytes);
    CK(cudaMalloc((void **)&dtier, bytes));
    tier_ptr = dtier;
    dptrs = (void **)to_device(&tier_ptr, sizeof(void *));
    d_id = (int64_t *)to_device(&id, sizeof(id));
    dl = shape;
    dl.base = dcache;
    KV(kvk_layout_check(&dl));
    span_start(&sp, st);
    CK(cudaMemset(dtier, 0, bytes));
    KV(kvk_gather(&dl, d_id, 1, dptrs, st));
    ms = span_ms(&sp, st);
    CK(cudaMemcpy(back, dtier, bytes, cudaMemcpyDeviceToHost));
    if (first_diff(h, back, bytes) >= 0) {
        printf("gpu: kvk part of %zu bytes FAIL gather\n", bytes);
        ok = false;
    }
    CK(cudaMemset(dcache, 0, bytes));
    KV(kvk_scatter(&dl, (const void *const *)dptrs, d_id, 1, st));
    CK(cudaStreamSynchronize(st));
    CK(cudaMemcpy(back, dcache, bytes, cudaMemcpyDeviceToHost));
    if (first_diff(h, back, bytes) >= 0) {
        printf("gpu: kvk part of %zu bytes FAIL scatter\n", bytes);
        ok = false;
    }
    snprintf(what, sizeof(what), "part of %zu bytes, byte copies (gather %.0f ms)", bytes, ms);
    tally(ok, what);
    dev_free(dcache, dtier, dptrs, d_id);
    host_free(h, back);
}

/* ---------------------------------------------------------------------- */
/* Part 2: bandwidth                                                      */

#define B_LAYERS 32
#define B_HEADS 8
#define B_DIM 128
#define B_TOKENS 16
#define B_ENGINE_BLOCKS 1024
#define B_N 256
#define B_WARMUP 2
#define B_REPS 10

struct bench_op {
    const struct kvk_layout *l;
    const int64_t *ids;
    void **ptrs;       /* device array of tier block pointers */
    void *a, *b;       /* memcpy dst, src */
    size_t bytes;
    cudaMemcpyKind dir;
    int what;          /* 0 gather, 1 scatter, 2 memcpy */
};

static void bench_once(const struct bench_op *op, cudaStream_t st)
{
    switch (op->what) {
    case 0:
        KV(kvk_gather(op->l, op->ids, B_N, op->ptrs, st));
        break;
    case 1:
        KV(kvk_scatter(op->l, (const void *const *)op->ptrs, op->ids, B_N, st));
        break;
    default:
        CK(cudaMemcpyAsync(op->a, op->b, op->bytes, op->dir, st));
        break;
    }
}

/* Mean milliseconds of one op over B_REPS back-to-back repetitions. */
static float time_ms(const struct bench_op *op, cudaStream_t st)
{
    struct span sp;

    for (int i = 0; i < B_WARMUP; i++)
        bench_once(op, st);
    CK(cudaStreamSynchronize(st));
    span_start(&sp, st);
    for (int i = 0; i < B_REPS; i++)
        bench_once(op, st);
    return span_ms(&sp, st) / B_REPS;
}

/* time_ms of a gather and of a scatter of op's blocks to / from ptrs */
static void time_movers(struct bench_op *op, void **ptrs, float *gather_ms, float *scatter_ms,
                        cudaStream_t st)
{
    op->ptrs = ptrs;
    op->what = 0;
    *gather_ms = time_ms(op, st);
    op->what = 1;
    *scatter_ms = time_ms(op, st);
}

static void report(const char *name, const char *a_name, float a_ms, const char *b_name,
                   float b_ms, size_t bytes, const char *target)
{
    double gb = (double)bytes / 1e9;

    printf("# %s: %s %.3f ms (%.1f GB/s), %s %.3f ms (%.1f GB/s)\n", name, a_name, a_ms,
           gb / (a_ms / 1e3), b_name, b_ms, gb / (b_ms / 1e3));
    printf("bench: %s %.3f ratio target >= %s\n", name, b_ms / a_ms, target);
    fflush(stdout);
}

static int bench_all(cudaStream_t st)
{
    struct kvk_layout shape = t_kvk_layout(T_VLLM, B_LAYERS, 2, B_TOKENS, B_HEADS, B_DIM,
                                          B_ENGINE_BLOCKS);
    struct kvk_layout hl, dl;
    size_t lb = t_kvk_layer_bytes(&shape), bb, total;
    void *layers_host[B_LAYERS];
    void **d_layers, **d_ptrs, **d_pin_ptrs;
    void *ptrs_host[B_N], *pin_ptrs_host[B_N];
    int64_t ids[B_N], *d_ids;
    uint64_t rng = 0x62656e6368ull;
    char *dtier, *dtier2, *pinned, *pinned_dev, *check;
    struct bench_op op;
    float g_ms, s_ms, d2d_ms, gp_ms, sp_ms, d2h_ms, h2d_ms;
    int bad = 0;

    for (int i = 0; i < B_LAYERS; i++) {
        CK(cudaMalloc(&layers_host[i], lb));
        CK(cudaMemset(layers_host[i], 0x11 * (i % 15 + 1), lb));
    }
    hl = shape;
    hl.layer_base = layers_host; /* device pointers, in host memory */
    CK(cudaMalloc((void **)&d_layers, B_LAYERS * sizeof(void *)));
    KV(kvk_layout_upload(&hl, d_layers, &dl, st));
    CK(cudaStreamSynchronize(st));
    bb = kvk_block_bytes(&dl);
    total = bb * B_N;

    pick_ids(ids, B_N, B_ENGINE_BLOCKS, &rng);
    KV(kvk_check_ids(&dl, ids, B_N));
    d_ids = (int64_t *)to_device(ids, sizeof(ids));

    CK(cudaMalloc((void **)&dtier, total));
    CK(cudaMalloc((void **)&dtier2, total));
    CK(cudaHostAlloc((void **)&pinned, total, cudaHostAllocMapped));
    CK(cudaHostGetDevicePointer((void **)&pinned_dev, pinned, 0));
    memset(pinned, 0, total); /* touch every page once */
    for (int i = 0; i < B_N; i++) {
        ptrs_host[i] = dtier + (size_t)i * bb;
        pin_ptrs_host[i] = pinned_dev + (size_t)i * bb;
    }
    d_ptrs = (void **)to_device(ptrs_host, sizeof(ptrs_host));
    d_pin_ptrs = (void **)to_device(pin_ptrs_host, sizeof(pin_ptrs_host));
    CK(cudaMemset(dtier2, 0x5a, total));

    printf("# bench: vLLM flash-attn BF16, %d layers, %d KV heads, head dim %d, %d-token "
           "blocks: %zu-byte tier blocks, %d of %d engine blocks, %d reps\n", B_LAYERS,
           B_HEADS, B_DIM, B_TOKENS, bb, B_N, B_ENGINE_BLOCKS, B_REPS);

    memset(&op, 0, sizeof(op));
    op.l = &dl;
    op.ids = d_ids;
    op.bytes = total;

    time_movers(&op, d_ptrs, &g_ms, &s_ms, st);
    op.what = 2, op.a = dtier2, op.b = dtier, op.dir = cudaMemcpyDeviceToDevice;
    d2d_ms = time_ms(&op, st);

    time_movers(&op, d_pin_ptrs, &gp_ms, &sp_ms, st);
    op.what = 2, op.a = pinned, op.b = dtier2, op.dir = cudaMemcpyDeviceToHost;
    d2h_ms = time_ms(&op, st);
    op.a = dtier2, op.b = pinned, op.dir = cudaMemcpyHostToDevice;
    h2d_ms = time_ms(&op, st);

    report("gpu_gather_vs_d2d", "gather", g_ms, "memcpy d2d", d2d_ms, total, "0.8");
    report("gpu_scatter_vs_d2d", "scatter", s_ms, "memcpy d2d", d2d_ms, total, "0.8");
    report("gpu_gather_to_pinned_vs_memcpy", "gather to pinned", gp_ms, "memcpy d2h",
           d2h_ms, total, "0.9");
    report("gpu_scatter_from_pinned_vs_memcpy", "scatter from pinned", sp_ms, "memcpy h2d",
           h2d_ms, total, "0.9");

    /* sanity: a gather to pinned memory equals a gather to device memory */
    op.what = 0, op.ptrs = d_ptrs;
    bench_once(&op, st);
    op.ptrs = d_pin_ptrs;
    bench_once(&op, st);
    CK(cudaStreamSynchronize(st));
    check = (char *)xmalloc(total);
    CK(cudaMemcpy(check, dtier, total, cudaMemcpyDeviceToHost));
    if (first_diff(check, pinned, total) >= 0) {
        printf("gpu: kvk bench gather to pinned differs from gather to device FAIL\n");
        bad = 1;
    } else {
        printf("gpu: kvk bench gather to pinned == gather to device OK\n");
    }
    free(check);

    dev_free(d_ids, d_ptrs, d_pin_ptrs, dtier, dtier2, d_layers);
    CK(cudaFreeHost(pinned));
    for (int i = 0; i < B_LAYERS; i++)
        CK(cudaFree(layers_host[i]));
    return bad;
}

int main(void)
{
    cudaStream_t st;
    cudaDeviceProp prop;
    int dev = 0;

    CK(cudaSetDevice(dev));
    CK(cudaGetDeviceProperties(&prop, dev));
    printf("# kvk_check: %s, sm_%d%d, %.1f GiB\n", prop.name, prop.major, prop.minor,
           (double)prop.totalGlobalMem / (1 << 30));
    CK(cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking));

    check_all(st);
    check_repeated_ids(st);
    check_part_near_4gib(st);
    printf("gpu: kvk equivalence: %d OK, %d failed\n", n_ok, n_fail);
    fflush(stdout);
    if (bench_all(st))
        n_fail++;

    CK(cudaStreamDestroy(st));
    CK(cudaDeviceSynchronize());
    return n_fail ? 1 : 0;
}
