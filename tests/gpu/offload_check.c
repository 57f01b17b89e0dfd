/* SPDX-License-Identifier: MIT */
/*
 * offload_check.c - for a machine with a GPU (run by tests/gpu/run.sh, from
 * the GPU bundle, linked against the bundle's libkvtier.so as an engine
 * would be): kvt_offload / kvt_restore of a vLLM-layout cache in device
 * memory, through a private tierd (a second process, which owns the pools).
 *
 * Check: offload 64 blocks of an 8-layer cache on a CUDA stream, restore
 * them into other block ids of a second device cache, compare on the host;
 * once through the pinned warm pool (DMA), once through the hot pool opened
 * by CUDA IPC (device to device; the blocks must be reported in hot).
 *
 * Bench: 128 blocks of a 32-layer cache (2 MiB tier blocks, as a Llama-3.1-8B
 * BF16 cache of 16-token blocks), offloaded, restored and removed again for
 * B_ROUNDS rounds, each call timed on the wall clock (tierd's round trips
 * included) beside a cudaMemcpy of the same bytes on the same stream,
 * interleaved round by round; the median of the per-round ratios is printed
 * as tierbench does (`bench: <name> <ratio> ratio target >= <t>`):
 *   warm: offload vs device-to-pinned-host, restore vs pinned-host-to-device,
 *         target >= 0.9 each;
 *   hot:  restore from the hot pool (IPC) vs device-to-device, >= 0.8; the
 *         offload into hot is printed beside it, without a target.
 * A missed target is reported, not fatal.
 *
 * Usage: offload_check <tierd binary> <temp dir>. Exit 0 ok, 1 a call failed
 * or a byte differs, 2 setup error.
 */
#include <cuda_runtime.h>
#include <signal.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "kv_layout.h"
#include "kvtier.h"

/* one geometry, two depths: the check uses the first LAYERS layers of the
 * bench's B_LAYERS; every layer is [2, NB, BS, H, D] of BF16 */
enum { LAYERS = 8, B_LAYERS = 32, BS = 16, H = 8, D = 128, NB = 256, ELEM = 2 };
enum { N = 64, B_N = 128, B_ROUNDS = 7 };
#define PAGE ((size_t)BS * H * D)
#define LAYER_BYTES ((size_t)2 * NB * PAGE * ELEM)
#define BLOCK_BYTES(layers) ((size_t)(layers) * 2 * PAGE * ELEM)

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { \
    fprintf(stderr, "gpu: %s:%d %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
    exit(2); } } while (0)

static pid_t daemon_pid;

/* Every exit (CK included) stops the private tierd. */
static void stop_daemon(void)
{
    if (daemon_pid > 0) {
        kill(daemon_pid, SIGTERM);
        waitpid(daemon_pid, NULL, 0);
        daemon_pid = 0;
    }
}

static void layout(struct kvk_layout *l, void **bases, uint32_t layers)
{
    *l = (struct kvk_layout){
        .n_layers = layers, .layer_base = bases, .elem_bytes = ELEM, .block_tokens = BS,
        .kv_heads = H, .head_dim = D, .n_kv = 2, .num_blocks = NB,
        .stride_kv = (int64_t)NB * PAGE, .stride_block = (int64_t)PAGE,
        .stride_token = H * D, .stride_head = D, .stride_dim = 1,
    };
}

static kvt_ns *open_ns(kvt_client *c, const char *id, uint32_t layers)
{
    kvt_model m = { .model_id = id, .dtype = "bf16", .layout = "vllm-flash",
                    .block_tokens = BS, .tp_size = 1, .block_bytes = BLOCK_BYTES(layers) };
    kvt_ns *ns = NULL;

    return kvt_ns_open(c, &m, &ns) == 0 ? ns : NULL;
}

/* Pages sids[i] of src equal pages dids[i] of dst, on every layer. */
static int compare(void **src, void **dst, uint8_t *hsrc, uint8_t *hdst, const int64_t *sids,
                   const int64_t *dids, int n, int layers)
{
    for (int l = 0; l < layers; l++) {
        CK(cudaMemcpy(hsrc, src[l], LAYER_BYTES, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hdst, dst[l], LAYER_BYTES, cudaMemcpyDeviceToHost));
        for (int i = 0; i < n; i++)
            for (int kv = 0; kv < 2; kv++)
                if (memcmp(hdst + ((size_t)kv * NB + (size_t)dids[i]) * PAGE * ELEM,
                           hsrc + ((size_t)kv * NB + (size_t)sids[i]) * PAGE * ELEM,
                           PAGE * ELEM)) {
                    printf("gpu: layer %d block %d %s differs\n", l, i, kv ? "V" : "K");
                    return 1;
                }
    }
    return 0;
}

/* How many of keys[0..n) tierd reports in hot. */
static int count_hot(kvt_ns *ns, const kvt_key *keys, int n)
{
    uint8_t tiers[B_N];
    int in_hot = 0;

    if (kvt_lookup(ns, keys, (size_t)n, 0, tiers) == n)
        for (int i = 0; i < n; i++)
            in_hot += tiers[i] == KVT_TIER_HOT;
    return in_hot;
}

/* ---- the check --------------------------------------------------------- */

static int check(kvt_ns *ns, void **src, void **dst, uint8_t *hsrc, uint8_t *hdst,
                 cudaStream_t st)
{
    struct kvk_layout ls, ld;
    kvt_key keys[N];
    int64_t sids[N], dids[N];
    int bad = 0, rc;

    layout(&ls, src, LAYERS);
    layout(&ld, dst, LAYERS);
    for (int i = 0; i < N; i++) {
        memset(keys[i].b, 0, sizeof(keys[i].b));
        keys[i].b[0] = (uint8_t)i;
        keys[i].b[1] = 0x5a;
        sids[i] = (i * 37) % 128;
        dids[i] = 128 + (i * 11) % 128;
    }
    for (int round = 0; round < 2 && !bad; round++) {
        const char *via = round ? "hot" : "warm";
        int in_hot;

        /* round 1: through the hot pool, a fresh chain */
        if (round == 1) {
            rc = kvt_ns_set_hot(ns, KVT_GET_HOT);
            printf("gpu: kvt_ns_set_hot (CUDA IPC open of the hot pool): %d\n", rc);
            if (rc)
                return 1;
            for (int i = 0; i < N; i++)
                keys[i].b[1] = 0xa5;
            for (int l = 0; l < LAYERS; l++)
                CK(cudaMemset(dst[l], 0, LAYER_BYTES));
        }
        rc = kvt_offload(ns, NULL, keys, N, &ls, sids, st);
        printf("gpu: [%s] kvt_offload of %d blocks from device memory: %d\n", via, N, rc);
        if (rc != N)
            bad = 1;
        in_hot = count_hot(ns, keys, N);
        printf("gpu: [%s] blocks in hot after the offload: %d\n", via, in_hot);
        if (round == 1 && in_hot != N)
            bad = 1;
        rc = kvt_restore(ns, keys, N, &ld, dids, st);
        printf("gpu: [%s] kvt_restore into other block ids: %d\n", via, rc);
        if (rc != N)
            bad = 1;
        bad |= compare(src, dst, hsrc, hdst, sids, dids, N, LAYERS);
    }
    printf("gpu: offload/restore through tierd on the device: %s\n", bad ? "FAILED" : "OK");
    fflush(stdout);
    return bad;
}

/* ---- the bench --------------------------------------------------------- */

struct bench {
    kvt_ns *ns;
    struct kvk_layout ls, ld;
    kvt_key keys[B_N];
    int64_t sids[B_N], dids[B_N];
    void *dev_a, *dev_b;   /* B_N blocks each: the memcpy baselines' device side */
    void *pinned;          /* B_N blocks of cudaHostAlloc memory */
    cudaStream_t st;
};

static double now(void)
{
    struct timespec t;

    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + (double)t.tv_nsec * 1e-9;
}

static double median(double *v, int n)
{
    for (int i = 1; i < n; i++) /* insertion sort: n is B_ROUNDS */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            double t = v[j];

            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : (v[n / 2 - 1] + v[n / 2]) / 2;
}

/* Seconds of one cudaMemcpyAsync of the bench's bytes, synchronised. */
static double time_memcpy(struct bench *b, void *to, const void *from,
                          enum cudaMemcpyKind k)
{
    double t0 = now();

    CK(cudaMemcpyAsync(to, from, (size_t)B_N * BLOCK_BYTES(B_LAYERS), k, b->st));
    CK(cudaStreamSynchronize(b->st));
    return now() - t0;
}

/* Remove the bench's chain, so the next round stores it again. A key tierd
 * still holds (a copy between tiers in flight) stays: try again for up to
 * a second. 0, or 1 when some are still there. */
static int remove_all(struct bench *b)
{
    int removed = 0, rc;

    for (int tries = 0; removed < B_N && tries < 100; tries++) {
        if (tries)
            usleep(10000);
        if ((rc = kvt_remove(b->ns, b->keys, B_N)) < 0) {
            printf("gpu: bench kvt_remove: %s\n", kvt_strerror(rc));
            return 1;
        }
        removed += rc;
    }
    if (removed < B_N)
        printf("gpu: bench kvt_remove: %d of %d after a second\n", removed, B_N);
    return removed < B_N;
}

/* One round: zero the target cache (so the last round's restore is what
 * main compares), offload, restore, remove; the offload and the restore
 * timed (seconds in *off and *res). 0, or 1 when a call did not do all of
 * its blocks. */
static int round_trip(struct bench *b, double *off, double *res, bool want_hot)
{
    double t0;
    int rc;

    for (uint32_t l = 0; l < b->ld.n_layers; l++)
        CK(cudaMemsetAsync(b->ld.layer_base[l], 0, LAYER_BYTES, b->st));
    CK(cudaStreamSynchronize(b->st));
    t0 = now();
    rc = kvt_offload(b->ns, NULL, b->keys, B_N, &b->ls, b->sids, b->st);
    *off = now() - t0;
    if (rc != B_N) {
        printf("gpu: bench kvt_offload: %d of %d (%s)\n", rc, B_N, rc < 0 ? kvt_strerror(rc)
                                                                            : "short");
        return 1;
    }
    if (want_hot && (rc = count_hot(b->ns, b->keys, B_N)) != B_N) {
        printf("gpu: bench: %d of %d blocks in hot after the offload\n", rc, B_N);
        return 1;
    }
    t0 = now();
    rc = kvt_restore(b->ns, b->keys, B_N, &b->ld, b->dids, b->st);
    *res = now() - t0;
    if (rc != B_N) {
        printf("gpu: bench kvt_restore: %d of %d (%s)\n", rc, B_N, rc < 0 ? kvt_strerror(rc)
                                                                             : "short");
        return 1;
    }
    return remove_all(b);
}

static void report(const char *name, const char *what, double t_kvt, const char *base,
                   double t_base, double ratio, const char *target)
{
    double gb = (double)B_N * BLOCK_BYTES(B_LAYERS) / 1e9;

    printf("# %s: %s %.3f ms (%.1f GB/s), %s %.3f ms (%.1f GB/s)\n", name, what, t_kvt * 1e3,
           gb / t_kvt, base, t_base * 1e3, gb / t_base);
    if (target)
        printf("bench: %s %.3f ratio target >= %s\n", name, ratio, target);
    else
        printf("# %s: %.3f ratio (no target)\n", name, ratio);
    fflush(stdout);
}

/* One figure: a kvtier call against a cudaMemcpy of the same bytes between
 * the bench's dev_a and other (dev_a -> other for an offload, other -> dev_a
 * for a restore). */
struct figure {
    const char *name, *what, *base; /* the bench line's name; the two calls */
    const char *target;             /* ">= target" ratio, or NULL: none */
    void *other;
    enum cudaMemcpyKind kind;
};

/* One way through tierd (into and out of hot, or warm): an untimed round
 * (the pool's registration with CUDA, the IPC open), then B_ROUNDS rounds,
 * each with its two cudaMemcpys first. 0, or 1 when a call failed. */
static int phase(struct bench *b, bool hot, const struct figure *off, const struct figure *res)
{
    double t_off[B_ROUNDS], t_res[B_ROUNDS], m_off[B_ROUNDS], m_res[B_ROUNDS];
    double r_off[B_ROUNDS], r_res[B_ROUNDS], o, r;

    if (round_trip(b, &o, &r, hot))
        return 1;
    for (int i = 0; i < B_ROUNDS; i++) {
        m_off[i] = time_memcpy(b, off->other, b->dev_a, off->kind);
        m_res[i] = time_memcpy(b, b->dev_a, res->other, res->kind);
        if (round_trip(b, &t_off[i], &t_res[i], hot))
            return 1;
        r_off[i] = m_off[i] / t_off[i];
        r_res[i] = m_res[i] / t_res[i];
    }
    report(off->name, off->what, median(t_off, B_ROUNDS), off->base, median(m_off, B_ROUNDS),
           median(r_off, B_ROUNDS), off->target);
    report(res->name, res->what, median(t_res, B_ROUNDS), res->base, median(m_res, B_ROUNDS),
           median(r_res, B_ROUNDS), res->target);
    return 0;
}

/* Through warm (DMA to and from pinned memory), then through hot (device
 * to device, the pool opened by CUDA IPC). */
static int bench(struct bench *b)
{
    const size_t bytes = (size_t)B_N * BLOCK_BYTES(B_LAYERS);
    int rc;

    printf("# bench: %d blocks of %zu bytes (%d layers) per call, median of %d rounds, "
           "each call timed with tierd's round trips\n", B_N, BLOCK_BYTES(B_LAYERS), B_LAYERS,
           B_ROUNDS);
    CK(cudaHostAlloc(&b->pinned, bytes, cudaHostAllocDefault));
    memset(b->pinned, 0, bytes); /* touch every page once */
    rc = phase(b, false,
               &(struct figure){ "gpu_offload_warm_vs_memcpy", "kvt_offload via pinned warm",
                                 "cudaMemcpy d2h pinned", "0.9", b->pinned,
                                 cudaMemcpyDeviceToHost },
               &(struct figure){ "gpu_restore_warm_vs_memcpy", "kvt_restore via pinned warm",
                                 "cudaMemcpy h2d pinned", "0.9", b->pinned,
                                 cudaMemcpyHostToDevice });
    if (rc == 0 && (rc = kvt_ns_set_hot(b->ns, KVT_GET_HOT)) != 0)
        printf("gpu: bench kvt_ns_set_hot: %d\n", rc);
    if (rc == 0)
        rc = phase(b, true,
                   &(struct figure){ "gpu_offload_hot_vs_d2d", "kvt_offload into hot",
                                     "cudaMemcpy d2d", NULL, b->dev_b,
                                     cudaMemcpyDeviceToDevice },
                   &(struct figure){ "gpu_restore_hot_vs_d2d", "kvt_restore from hot by IPC",
                                     "cudaMemcpy d2d", "0.8", b->dev_b,
                                     cudaMemcpyDeviceToDevice });
    CK(cudaFreeHost(b->pinned));
    return rc != 0;
}

int main(int argc, char **argv)
{
    char sock[256], data[256];
    void *src[B_LAYERS], *dst[B_LAYERS];
    uint8_t *hsrc = malloc(LAYER_BYTES), *hdst = malloc(LAYER_BYTES);
    static struct bench b;
    kvt_client *c = NULL;
    kvt_ns *ns;
    cudaStream_t st;
    int bad;
    pid_t d;

    if (argc != 3 || !hsrc || !hdst)
        return 2;
    snprintf(sock, sizeof(sock), "%s/gpu.sock", argv[2]);
    snprintf(data, sizeof(data), "%s/gpu.data", argv[2]);
    /* before any CUDA call: the child must not inherit a CUDA context */
    d = fork();
    daemon_pid = d;
    atexit(stop_daemon);
    if (d == 0) {
        daemon_pid = 0;
        execl(argv[1], "tierd", "--socket", sock, "--data", data, "--warm-bytes", "1G",
              "--cold-bytes", "1G", "--hot-bytes", "1G", (char *)NULL);
        _exit(127);
    }
    for (int i = 0; i < 500 && kvt_connect(sock, &c); i++)
        usleep(10000);
    if (!c)
        return 2;
    ns = open_ns(c, "gpu/check", LAYERS);
    b.ns = open_ns(c, "gpu/bench", B_LAYERS);
    if (!ns || !b.ns)
        return 2;
    CK(cudaStreamCreate(&st));
    for (int l = 0; l < B_LAYERS; l++) {
        for (size_t i = 0; i < LAYER_BYTES; i++)
            hsrc[i] = (uint8_t)(i * 131 + (size_t)l * 7 + (i >> 13));
        CK(cudaMalloc(&src[l], LAYER_BYTES));
        CK(cudaMalloc(&dst[l], LAYER_BYTES));
        CK(cudaMemcpy(src[l], hsrc, LAYER_BYTES, cudaMemcpyHostToDevice));
        CK(cudaMemset(dst[l], 0, LAYER_BYTES));
    }
    bad = check(ns, src, dst, hsrc, hdst, st);

    if (!bad) {
        layout(&b.ls, src, B_LAYERS);
        layout(&b.ld, dst, B_LAYERS);
        for (int i = 0; i < B_N; i++) {
            memset(b.keys[i].b, 0, sizeof(b.keys[i].b));
            b.keys[i].b[0] = (uint8_t)i;
            b.keys[i].b[1] = 0xbe;
            b.sids[i] = i;                 /* blocks 0..127 out, */
            b.dids[i] = NB - 1 - i;        /* restored to 255..128 */
        }
        b.st = st;
        CK(cudaMalloc(&b.dev_a, (size_t)B_N * BLOCK_BYTES(B_LAYERS)));
        CK(cudaMalloc(&b.dev_b, (size_t)B_N * BLOCK_BYTES(B_LAYERS)));
        bad = bench(&b);
        /* the last round's restore (from hot) into a zeroed cache */
        if (!bad)
            bad = compare(src, dst, hsrc, hdst, b.sids, b.dids, B_N, B_LAYERS);
        printf("gpu: offload/restore bench rounds: %s\n", bad ? "FAILED" : "OK");
    }
    kvt_close(c);
    return bad; /* stop_daemon runs at exit */
}
