/* SPDX-License-Identifier: MIT */
/*
 * hybrid.c - figure 9: bytes per token of hybrid models, layer group by
 * layer group, against storing every layer as full attention.
 */
#include <signal.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>

#include "bench.h"

/* Figure 9: what kvtier stores per cached token of a 32K-token prefix of
 * each hybrid model, group by group under its rule (sliding: the window;
 * state: every 256th block's), against storing every layer with a cache as
 * full attention. The bytes come from the same code kvt_offload_hybrid
 * applies (kvt_hybrid_stored_bytes); the models from data/configs. */
void bench_hybrid(void)
{
    static const struct {
        const char *file;
        const char *target; /* stored / naive */
    } m[] = {
        { "gpt-oss-120b", "0.55" },   /* half its layers slide over 128 tokens */
        { "gemma-3-27b-it", "0.25" }, /* five sliding layers in six */
        { "qwen3-next-80b-a3b", "0.5" },
        { "nemotron-h-56b", "0.7" },  /* Mamba-2 states are large: every 256th kept */
        { "deepseek-v3", "1.0" },     /* MLA on every layer: nothing to save, nothing wasted */
    };
    const char *src = getenv("KVT_TEST_SRC");
    kvt_hybrid_opts o = { .block_tokens = 16, .state_every = 256 };

    printf("# --- hybrid models: bytes stored per token of a 32768-token prefix, blocks of "
           "16 tokens, one batch, tp 1\n");
    for (size_t i = 0; i < sizeof(m) / sizeof(m[0]); i++) {
        struct kvt_model_desc d;
        char path[512], err[256], name[96];
        uint64_t st, nv;
        int rc;

        snprintf(path, sizeof(path), "%s/data/configs/%s.json", src && *src ? src : ".",
                 m[i].file);
        snprintf(name, sizeof(name), "hybrid_%s_32k_stored_vs_naive", m[i].file);
        rc = kvt_model_parse_file(path, &d, err, sizeof(err));
        if (rc < 0) {
            printf("# %s\n", err);
            bench_fail(name, "config", rc);
            continue;
        }
        st = kvt_hybrid_stored_bytes(&d, &o, 1, 32768, 0);
        nv = kvt_hybrid_naive_bytes(&d, 16, 1, 32768);
        printf("# %s: kvtier %.1f KiB/token, naive %.1f KiB/token\n", m[i].file,
               (double)st / 32768 / 1024, (double)nv / 32768 / 1024);
        bench_report(name, nv ? (double)st / (double)nv : 0, "%.3f", "ratio", "<=", m[i].target);
    }
}
