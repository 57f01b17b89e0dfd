/* SPDX-License-Identifier: MIT */
/*
 * offload_check.c - for a machine with a GPU (run by tests/gpu/run.sh):
 * kvt_offload / kvt_restore of a vLLM-layout cache in device memory,
 * through a private tierd: offload 64 blocks on a CUDA stream, restore them
 * into other block ids of a second device cache, compare on the host; once
 * through the pinned warm pool (DMA), once through the hot pool opened by
 * CUDA IPC (device to device; the blocks must be reported in hot).
 * Usage: offload_check <tierd binary> <temp dir>. Exit 0 ok, 1 mismatch,
 * 2 setup error.
 */
#include <cuda_runtime.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kv_layout.h"
#include "kvtier.h"

enum { LAYERS = 8, BS = 16, H = 8, D = 128, NB = 256, ELEM = 2, N = 64 };
#define PAGE ((size_t)BS * H * D)
#define LAYER_BYTES ((size_t)2 * NB * PAGE * ELEM)

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

static void layout(struct kvk_layout *l, void **bases)
{
    *l = (struct kvk_layout){
        .n_layers = LAYERS, .layer_base = bases, .elem_bytes = ELEM, .block_tokens = BS,
        .kv_heads = H, .head_dim = D, .n_kv = 2, .num_blocks = NB,
        .stride_kv = (int64_t)NB * PAGE, .stride_block = (int64_t)PAGE,
        .stride_token = H * D, .stride_head = D, .stride_dim = 1,
    };
}

/* Pages sids[i] of src equal pages dids[i] of dst, on every layer. */
static int compare(void **src, void **dst, uint8_t *hsrc, uint8_t *hdst, const int64_t *sids,
                   const int64_t *dids)
{
    for (int l = 0; l < LAYERS; l++) {
        CK(cudaMemcpy(hsrc, src[l], LAYER_BYTES, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(hdst, dst[l], LAYER_BYTES, cudaMemcpyDeviceToHost));
        for (int i = 0; i < N; i++)
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

int main(int argc, char **argv)
{
    char sock[256], data[256];
    void *src[LAYERS], *dst[LAYERS];
    uint8_t *hsrc = malloc(LAYER_BYTES), *hdst = malloc(LAYER_BYTES);
    struct kvk_layout ls, ld;
    kvt_key keys[N];
    int64_t sids[N], dids[N];
    kvt_client *c = NULL;
    kvt_ns *ns = NULL;
    cudaStream_t st;
    int bad = 0, rc;
    pid_t d;

    if (argc != 3 || !hsrc || !hdst)
        return 2;
    snprintf(sock, sizeof(sock), "%s/gpu.sock", argv[2]);
    snprintf(data, sizeof(data), "%s/gpu.data", argv[2]);
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
    {
        kvt_model m = { .model_id = "gpu/check", .dtype = "bf16", .layout = "vllm-flash",
                        .block_tokens = BS, .tp_size = 1,
                        .block_bytes = (uint64_t)LAYERS * 2 * PAGE * ELEM };

        if (kvt_ns_open(c, &m, &ns))
            return 2;
    }
    CK(cudaStreamCreate(&st));
    for (int l = 0; l < LAYERS; l++) {
        for (size_t b = 0; b < LAYER_BYTES; b++)
            hsrc[b] = (uint8_t)(b * 131 + (size_t)l * 7 + (b >> 13));
        CK(cudaMalloc(&src[l], LAYER_BYTES));
        CK(cudaMalloc(&dst[l], LAYER_BYTES));
        CK(cudaMemcpy(src[l], hsrc, LAYER_BYTES, cudaMemcpyHostToDevice));
        CK(cudaMemset(dst[l], 0, LAYER_BYTES));
    }
    layout(&ls, src);
    layout(&ld, dst);
    for (int i = 0; i < N; i++) {
        memset(keys[i].b, 0, sizeof(keys[i].b));
        keys[i].b[0] = (uint8_t)i;
        keys[i].b[1] = 0x5a;
        sids[i] = (i * 37) % 128;
        dids[i] = 128 + (i * 11) % 128;
    }
    for (int round = 0; round < 2 && !bad; round++) {
        const char *via = round ? "hot" : "warm";
        uint8_t tiers[N];
        int in_hot = 0;

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
        if (kvt_lookup(ns, keys, N, 0, tiers) == N)
            for (int i = 0; i < N; i++)
                in_hot += tiers[i] == KVT_TIER_HOT;
        printf("gpu: [%s] blocks in hot after the offload: %d\n", via, in_hot);
        if (round == 1 && in_hot != N)
            bad = 1;
        rc = kvt_restore(ns, keys, N, &ld, dids, st);
        printf("gpu: [%s] kvt_restore into other block ids: %d\n", via, rc);
        if (rc != N)
            bad = 1;
        bad |= compare(src, dst, hsrc, hdst, sids, dids);
    }
    printf("gpu: offload/restore through tierd on the device: %s\n", bad ? "FAILED" : "OK");
    kvt_close(c);
    return bad; /* stop_daemon runs at exit */
}
