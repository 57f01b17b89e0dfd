/* SPDX-License-Identifier: MIT */
/*
 * kvcalc_sizes.c - KV sizes from real config.json files (kvt_model.h and the
 * kvcalc tool) against the figures of data/configs/SOURCES.md, worked
 * out by hand in the comments. Also: every form of layer mix, dtypes, tier
 * blocks and tensor parallelism, namespace filling, and bad configs (each
 * error must name the field or the line). The kvcalc binary is run from
 * KVT_TEST_BIN, the configs are found from KVT_TEST_SRC.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvtier.h"
#include "t.h"

#define KIB 1024ull
#define MIB (1024ull * KIB)
#define GIB (1024ull * MIB)

/* ---- helpers ------------------------------------------------------------- */

static const char *cfg_path(const char *name, char *buf, size_t cap)
{
    const char *src = getenv("KVT_TEST_SRC");

    snprintf(buf, cap, "%s/data/configs/%s", src && *src ? src : ".", name);
    return buf;
}

static struct kvt_model_desc load(const char *name)
{
    char path[512], err[256];
    struct kvt_model_desc m;
    int rc = kvt_model_parse_file(cfg_path(name, path, sizeof(path)), &m, err, sizeof(err));

    cr_assert_eq(rc, 0, "%s: parse failed (%d): %s", path, rc, err);
    return m;
}

/* Parse a config given as a string; returns the error code, err the message. */
static int parse_str(const char *json, struct kvt_model_desc *m, char *err, size_t cap)
{
    return kvt_model_parse_json(json, strlen(json), m, err, cap);
}

/* A config that must parse: its description into *m; the parser's reason
 * is the failure's message. */
static void parse_ok(const char *json, struct kvt_model_desc *m)
{
    char err[256];
    int rc = parse_str(json, m, err, sizeof(err));

    cr_assert_eq(rc, 0, "%s", err);
}

/* m's layers of kind a number na and those of kind b nb. */
static void expect_split(const struct kvt_model_desc *m, enum kvt_layer_kind a, uint32_t na,
                         enum kvt_layer_kind b, uint32_t nb)
{
    cr_assert_eq(kvt_model_group(m, a)->layers, na);
    cr_assert_eq(kvt_model_group(m, b)->layers, nb);
}

/* What SOURCES.md says of one config. */
struct expect {
    const char *file;
    const char *dtype;            /* KV dtype read from the config */
    enum kvt_layer_kind grow;     /* kind of the growing layers: FULL or MLA */
    uint32_t grow_layers, heads, dim;
    uint64_t token_bytes;         /* all growing groups together */
    uint32_t sliding_layers, window;
    uint64_t window_bytes;
    const char *state_name;       /* NULL: no state layers */
    uint32_t state_layers;
    uint64_t state_bytes;         /* whole model, per sequence */
    uint32_t none_layers;
    uint32_t n_groups;
};

static void check(const struct expect *e)
{
    struct kvt_model_desc m = load(e->file);
    const struct kvt_layer_group *g = kvt_model_group(&m, e->grow);
    const struct kvt_layer_group *sw = kvt_model_group(&m, KVT_LAYER_SLIDING);
    const struct kvt_layer_group *st = kvt_model_group(&m, KVT_LAYER_STATE);
    const struct kvt_layer_group *none = kvt_model_group(&m, KVT_LAYER_NONE);
    uint32_t total = 0;

    cr_assert_str_eq(m.dtype, e->dtype, "%s: dtype %s, expected %s", e->file, m.dtype, e->dtype);
    cr_assert_eq(m.n_groups, e->n_groups, "%s: %u groups, expected %u", e->file, m.n_groups,
                 e->n_groups);
    cr_assert_not_null(g, "%s: no %s group", e->file, kvt_layer_kind_name(e->grow));
    cr_assert_eq(g->layers, e->grow_layers, "%s: %u growing layers, expected %u", e->file,
                 g->layers, e->grow_layers);
    cr_assert_eq(g->kv_heads, e->heads, "%s: kv_heads %u, expected %u", e->file, g->kv_heads,
                 e->heads);
    cr_assert_eq(g->head_dim, e->dim, "%s: head_dim %u, expected %u", e->file, g->head_dim,
                 e->dim);
    cr_assert_eq(kvt_model_token_bytes(&m), e->token_bytes, "%s: %llu bytes/token, expected %llu",
                 e->file, (unsigned long long)kvt_model_token_bytes(&m),
                 (unsigned long long)e->token_bytes);
    cr_assert_eq(sw ? sw->layers : 0, e->sliding_layers, "%s: sliding layers", e->file);
    cr_assert_eq(sw ? sw->window : 0, e->window, "%s: window", e->file);
    cr_assert_eq(kvt_model_window_bytes(&m), e->window_bytes,
                 "%s: sliding bytes/seq %llu, expected %llu", e->file,
                 (unsigned long long)kvt_model_window_bytes(&m),
                 (unsigned long long)e->window_bytes);
    cr_assert_eq(st ? st->layers : 0, e->state_layers, "%s: state layers", e->file);
    if (e->state_name)
        cr_assert_str_eq(st->name, e->state_name, "%s: state kind", e->file);
    cr_assert_eq(kvt_model_state_bytes(&m), e->state_bytes,
                 "%s: state bytes/seq %llu, expected %llu", e->file,
                 (unsigned long long)kvt_model_state_bytes(&m),
                 (unsigned long long)e->state_bytes);
    cr_assert_eq(none ? none->layers : 0, e->none_layers, "%s: cache-less layers", e->file);
    /* every layer is in exactly one group (the indexer shares the MLA layers) */
    for (uint32_t i = 0; i < m.n_groups; i++)
        if (m.group[i].kind != KVT_LAYER_INDEX)
            total += m.group[i].layers;
    cr_assert_eq(total, m.num_layers, "%s: groups hold %u layers of %u", e->file, total,
                 m.num_layers);
}

/* ---- every config of the reference folder ----------------------------------- */

/* 32 layers x 2 (K,V) x 8 KV heads x (4096/32 = 128) x 2 B = 131,072 = 128 KiB */
Test(kvcalc_sizes, llama_3_1_8b)
{
    check(&(struct expect){"llama-3.1-8b.json", "bf16", KVT_LAYER_FULL, 32, 8, 128,
                           128 * KIB, .n_groups = 1});
    struct kvt_model_desc m = load("llama-3.1-8b.json");

    /* 32,768 tokens x 128 KiB = 4 GiB */
    cr_assert_eq(kvt_model_seq_bytes(&m, 32768), 4 * GIB);
    cr_assert_eq(m.max_model_len, 131072);
}

/* 80 x 2 x 8 x (8192/64 = 128) x 2 = 327,680 = 320 KiB */
Test(kvcalc_sizes, llama_3_1_70b)
{
    check(&(struct expect){"llama-3.1-70b.json", "bf16", KVT_LAYER_FULL, 80, 8, 128,
                           320 * KIB, .n_groups = 1});
}

Test(kvcalc_sizes, llama_3_3_70b)
{
    check(&(struct expect){"llama-3.3-70b-instruct.json", "bf16", KVT_LAYER_FULL, 80, 8, 128,
                           320 * KIB, .n_groups = 1});
}

/* text_config; explicit head_dim 128 wins over 5120/32 = 160:
 * 40 x 2 x 8 x 128 x 2 = 163,840 = 160 KiB (200 KiB if 160 were used) */
Test(kvcalc_sizes, mistral_small_3_1_24b)
{
    check(&(struct expect){"mistral-small-3.1-24b.json", "bf16", KVT_LAYER_FULL, 40, 8, 128,
                           160 * KIB, .n_groups = 1});
}

/* layer_types: 18 full + 18 sliding, head_dim 64 (not 2880/64 = 45), no dtype.
 * full: 18 x 2 x 8 x 64 x 2 = 36,864 = 36 KiB per token;
 * sliding: 18 x 128 tokens x (2 x 8 x 64 x 2 = 2 KiB) = 4,718,592 = 4.5 MiB */
Test(kvcalc_sizes, gpt_oss_120b)
{
    check(&(struct expect){"gpt-oss-120b.json", "bf16", KVT_LAYER_FULL, 18, 8, 64, 36 * KIB,
                           18, 128, 4608 * KIB, .n_groups = 2});
    struct kvt_model_desc m = load("gpt-oss-120b.json");

    cr_assert(m.notes & KVT_MODEL_NOTE_DTYPE_ASSUMED, "no dtype in gpt-oss: must be noted");
    cr_assert_str_eq(m.config_dtype, "");
}

/* 12 full x 2 x 8 x 64 x 2 = 24 KiB; 12 sliding x 128 x 2 KiB = 3 MiB */
Test(kvcalc_sizes, gpt_oss_20b)
{
    check(&(struct expect){"gpt-oss-20b.json", "bf16", KVT_LAYER_FULL, 12, 8, 64, 24 * KIB,
                           12, 128, 3 * MIB, .n_groups = 2});
}

/* full_attention_interval 4: full at i % 4 == 3, 12 full + 36 Gated DeltaNet.
 * full: 12 x 2 x 2 x 256 x 2 = 24,576 = 24 KiB.
 * state per layer (no ssm dtype: bf16): conv (4-1) x (2x16x128 + 32x128 = 8192)
 * x 2 = 49,152; recurrent 32 x 128 x 128 x 2 = 1,048,576; x 36 layers
 * = 39,518,208 = 37.69 MiB */
Test(kvcalc_sizes, qwen3_next_80b)
{
    check(&(struct expect){"qwen3-next-80b-a3b.json", "bf16", KVT_LAYER_FULL, 12, 2, 256,
                           24 * KIB, .state_name = "gated_deltanet", .state_layers = 36,
                           .state_bytes = 39518208, .n_groups = 2});
}

/* text_config, `dtype`, layer_types 16 full + 48 linear, mamba_ssm_dtype fp32.
 * full: 16 x 2 x 4 x 256 x 2 = 65,536 = 64 KiB.
 * state: conv 3 x (2x16x128 + 48x128 = 10,240) x 2 = 61,440; recurrent
 * 48 x 128 x 128 x 4 = 3,145,728; x 48 = 153,944,064 = 146.81 MiB */
Test(kvcalc_sizes, qwen3_5_27b)
{
    check(&(struct expect){"qwen3.5-27b.json", "bf16", KVT_LAYER_FULL, 16, 4, 256, 64 * KIB,
                           .state_name = "gated_deltanet", .state_layers = 48,
                           .state_bytes = 153944064, .n_groups = 2});
}

/* 10 x 2 x 2 x 256 x 2 = 20 KiB. state: conv 3 x 8192 x 2 = 49,152;
 * recurrent 32 x 128 x 128 x 4 = 2,097,152; x 30 = 64,389,120 = 61.41 MiB */
Test(kvcalc_sizes, qwen3_6_35b)
{
    check(&(struct expect){"qwen3.6-35b-a3b.json", "bf16", KVT_LAYER_FULL, 10, 2, 256,
                           20 * KIB, .state_name = "gated_deltanet", .state_layers = 30,
                           .state_bytes = 64389120, .n_groups = 2});
}

/* 23 x 2 x 4 x 256 x 2 = 94,208 = 92 KiB. state: conv 3 x (4096 + 128 x 128
 * = 20,480) x 2 = 122,880; recurrent 128 x 128 x 128 x 4 = 8,388,608;
 * x 69 = 587,292,672 = 560.09 MiB */
Test(kvcalc_sizes, qwen3_8_2_4t)
{
    check(&(struct expect){"qwen3.8-2.4t-a95b.json", "bf16", KVT_LAYER_FULL, 23, 4, 256,
                           92 * KIB, .state_name = "gated_deltanet", .state_layers = 69,
                           .state_bytes = 587292672, .n_groups = 2});
}

/* MLA: 61 x (512 + 64) x 2 = 70,272 = 68.625 KiB; num_key_value_heads 128 is
 * a red herring (61 x 2 x 128 x 128 x 2 would be 3.8 MiB) */
Test(kvcalc_sizes, deepseek_v3)
{
    check(&(struct expect){"deepseek-v3.json", "bf16", KVT_LAYER_MLA, 61, 1, 576, 70272,
                           .n_groups = 1});
    struct kvt_model_desc m = load("deepseek-v3.json");

    cr_assert(m.notes & KVT_MODEL_NOTE_MTP, "the MTP layer must be noted as not counted");
}

/* MLA 70,272 + indexer keys as vLLM stores them, 128 FP8 values and a 4-byte
 * scale: 61 x 132 = 8,052 -> 78,324 (data/configs/SOURCES.md). Bug (issue
 * 13): they were sized 128 x the KV dtype (61 x 256 = 15,616 in BF16), so
 * a tier block never matched vLLM's indexer cache and every offload was
 * refused. The indexer does not follow the KV dtype. */
Test(kvcalc_sizes, deepseek_v3_2)
{
    check(&(struct expect){"deepseek-v3.2.json", "bf16", KVT_LAYER_MLA, 61, 1, 576, 78324,
                           .n_groups = 2});
    struct kvt_model_desc m = load("deepseek-v3.2.json");
    const struct kvt_layer_group *ix = kvt_model_group(&m, KVT_LAYER_INDEX);

    cr_assert_not_null(ix);
    cr_assert_eq(ix->layers, 61);
    cr_assert_eq(ix->head_dim, 132);
    cr_assert_eq(ix->elem_bytes, 1);
    cr_assert_eq(kvt_layer_group_token_bytes(ix), 8052);
    /* a 16-token tier block of the group: vLLM's [blocks, 16, 132] uint8 page per layer */
    cr_assert_eq(kvt_layer_group_block_bytes(ix, 16, 8), 61 * 16 * 132);
    cr_assert_eq(kvt_model_set_dtype(&m, "fp32"), 0);
    ix = kvt_model_group(&m, KVT_LAYER_INDEX);
    cr_assert_eq(ix->elem_bytes, 1, "the indexer followed the KV dtype");
    cr_assert_eq(kvt_model_token_bytes(&m), 61 * 576 * 4 + 8052);
}

/* No layer_types, no pattern: gemma3's default 6 gives full at (i+1) % 6 == 0,
 * 10 full + 52 sliding. full: 10 x 2 x 16 x 128 x 2 = 81,920 = 80 KiB;
 * sliding: 52 x 1024 x 8 KiB = 436,207,616 = 416 MiB. All 62 as full would
 * be 496 KiB. */
Test(kvcalc_sizes, gemma_3_27b)
{
    check(&(struct expect){"gemma-3-27b-it.json", "bf16", KVT_LAYER_FULL, 10, 16, 128,
                           80 * KIB, 52, 1024, 416 * MIB, .n_groups = 2});
}

/* Global layers: num_global_key_value_heads 2, global_head_dim 512:
 * 5 x 2 x 2 x 512 x 2 = 20,480 = 20 KiB. Sliding: 8 heads x 256:
 * 25 x 1024 x (2 x 8 x 256 x 2 = 8 KiB) = 200 MiB */
Test(kvcalc_sizes, gemma_4_26b)
{
    check(&(struct expect){"gemma-4-26b-a4b.json", "bf16", KVT_LAYER_FULL, 5, 2, 512, 20 * KIB,
                           25, 1024, 200 * MIB, .n_groups = 2});
    struct kvt_model_desc m = load("gemma-4-26b-a4b.json");

    cr_assert(m.notes & KVT_MODEL_NOTE_K_EQ_V);
    cr_assert_eq(kvt_model_group(&m, KVT_LAYER_SLIDING)->kv_heads, 8);
    cr_assert_eq(kvt_model_group(&m, KVT_LAYER_SLIDING)->head_dim, 256);
}

/* The file holds a literal Infinity. Pattern: 54 M, 10 *, 54 -.
 * attn: 10 x 2 x 8 x 128 x 2 = 40,960 = 40 KiB. Mamba2 (bf16, no ssm dtype):
 * d_inner 256 x 64 = 16,384; conv 3 x (16,384 + 2 x 8 x 256) x 2 = 122,880;
 * ssm 256 x 64 x 256 x 2 = 8,388,608; x 54 = 459,620,352 = 438.33 MiB */
Test(kvcalc_sizes, nemotron_h_56b)
{
    check(&(struct expect){"nemotron-h-56b.json", "bf16", KVT_LAYER_FULL, 10, 8, 128, 40 * KIB,
                           .state_name = "mamba2", .state_layers = 54,
                           .state_bytes = 459620352, .none_layers = 54, .n_groups = 3});
}

/* Pattern: 23 M, 6 *, 23 E. attn: 6 x 2 x 2 x 128 x 2 = 6,144 = 6 KiB.
 * Mamba2, fp32 ssm: conv 3 x (64 x 64 + 2 x 8 x 128 = 6,144) x 2 = 36,864;
 * ssm 64 x 64 x 128 x 4 = 2,097,152; x 23 = 49,082,368 = 46.81 MiB */
Test(kvcalc_sizes, nemotron_3_nano_30b)
{
    check(&(struct expect){"nemotron-3-nano-30b-a3b.json", "bf16", KVT_LAYER_FULL, 6, 2, 128,
                           6 * KIB, .state_name = "mamba2", .state_layers = 23,
                           .state_bytes = 49082368, .none_layers = 23, .n_groups = 3});
}

/* attn_layer_period 8, offset 4: layers 4, 12, 20, 28. attn: 4 x 2 x 8 x 128
 * x 2 = 16 KiB. Mamba1: d_inner 2 x 4096 = 8192; conv 3 x 8192 x 2 = 49,152;
 * ssm 8192 x 16 x 2 = 262,144; x 28 = 8,716,288 = 8.31 MiB */
Test(kvcalc_sizes, jamba_v0_1)
{
    check(&(struct expect){"jamba-v0.1.json", "bf16", KVT_LAYER_FULL, 4, 8, 128, 16 * KIB,
                           .state_name = "mamba1", .state_layers = 28, .state_bytes = 8716288,
                           .n_groups = 2});
}

/* MHA (no num_key_value_heads: 40), float16: 40 x 2 x 40 x 128 x 2 = 819,200
 * = 800 KiB; x 2048 = 1,677,721,600 B = 1.5625 GiB */
Test(kvcalc_sizes, opt_13b)
{
    check(&(struct expect){"opt-13b.json", "fp16", KVT_LAYER_FULL, 40, 40, 128, 800 * KIB,
                           .n_groups = 1});
    struct kvt_model_desc m = load("opt-13b.json");

    cr_assert_eq(kvt_model_seq_bytes(&m, m.max_model_len), 1677721600ull);
}

/* 36 x 2 x 8 x 128 x 2 = 147,456 = 144 KiB (sliding_window null) */
Test(kvcalc_sizes, qwen3_8b)
{
    check(&(struct expect){"qwen3-8b.json", "bf16", KVT_LAYER_FULL, 36, 8, 128, 144 * KIB,
                           .n_groups = 1});
}

/* sliding_window 131072 with use_sliding_window false: all full.
 * 28 x 2 x 4 x (3584/28 = 128) x 2 = 57,344 = 56 KiB */
Test(kvcalc_sizes, qwen2_5_7b)
{
    check(&(struct expect){"qwen2.5-7b.json", "bf16", KVT_LAYER_FULL, 28, 4, 128, 56 * KIB,
                           .n_groups = 1});
    struct kvt_model_desc m = load("qwen2.5-7b.json");

    cr_assert(m.notes & KVT_MODEL_NOTE_WINDOW_UNUSED);
}

/* 32 x 2 x 8 x 128 x 2 = 128 KiB (sliding_window null) */
Test(kvcalc_sizes, mixtral_8x7b)
{
    check(&(struct expect){"mixtral-8x7b.json", "bf16", KVT_LAYER_FULL, 32, 8, 128, 128 * KIB,
                           .n_groups = 1});
}

/* ---- dtypes, sequences, blocks ------------------------------------------------ */

/* FP8 halves bytes/token and the sliding figure; the state does not move. */
Test(kvcalc_sizes, dtype_changes_kv_not_state)
{
    struct kvt_model_desc m = load("gpt-oss-120b.json");
    struct kvt_model_desc q = load("qwen3-next-80b-a3b.json");

    cr_assert_eq(kvt_model_set_dtype(&m, "fp8"), 0);
    cr_assert_str_eq(m.dtype, "fp8_e4m3"); /* vLLM's "fp8" */
    cr_assert_eq(kvt_model_token_bytes(&m), 18 * KIB);
    cr_assert_eq(kvt_model_window_bytes(&m), 2304 * KIB);
    cr_assert_eq(kvt_model_set_dtype(&m, "float32"), 0);
    cr_assert_eq(kvt_model_token_bytes(&m), 72 * KIB);
    cr_assert_eq(kvt_model_set_dtype(&m, "fp4"), -EINVAL);
    cr_assert_str_eq(m.dtype, "fp32", "a refused dtype must leave the model as it was");
    cr_assert_eq(kvt_model_set_dtype(&q, "fp8"), 0);
    cr_assert_eq(kvt_model_token_bytes(&q), 12 * KIB);
    cr_assert_eq(kvt_model_state_bytes(&q), 39518208);
}

/* A sequence shorter than the window holds only its own tokens there. */
Test(kvcalc_sizes, seq_bytes_bounds_sliding_by_length)
{
    struct kvt_model_desc m = load("gpt-oss-120b.json");

    /* 100 tokens: 100 x 36 KiB (full) + 100 x 36 KiB (18 sliding, 2 KiB each) */
    cr_assert_eq(kvt_model_seq_bytes(&m, 100), 100 * 36 * KIB * 2);
    /* 32,768 tokens: 32,768 x 36 KiB + 4.5 MiB */
    cr_assert_eq(kvt_model_seq_bytes(&m, 32768), 32768 * 36 * KIB + 4608 * KIB);
    cr_assert_eq(kvt_model_seq_bytes(&m, 0), 0);
}

/* Tier blocks: layer-major K then V, every layer with per-token K/V. */
Test(kvcalc_sizes, block_bytes_and_tensor_parallel)
{
    struct kvt_model_desc l = load("llama-3.1-8b.json");
    struct kvt_model_desc d = load("deepseek-v3.json");
    struct kvt_model_desc g = load("gpt-oss-120b.json");
    struct kvt_model_desc n = load("nemotron-h-56b.json");

    /* 32 layers x 2 x 16 tokens x 8 heads x 128 x 2 B = 2 MiB */
    cr_assert_eq(kvt_model_block_bytes(&l, 16, 1), 2 * MIB);
    cr_assert_eq(kvt_model_block_bytes(&l, 16, 2), 1 * MIB, "TP 2 halves the heads");
    cr_assert_eq(kvt_model_block_bytes(&l, 16, 8), 256 * KIB);
    /* TP 16 > 8 heads: each rank keeps one head (replicated) */
    cr_assert_eq(kvt_model_block_bytes(&l, 16, 16), 256 * KIB);
    cr_assert_eq(kvt_model_block_bytes(&l, 16, 3), 0, "8 heads do not split 3 ways");
    cr_assert_eq(kvt_model_block_bytes(&l, 0, 1), 0);
    /* MLA, no V: 61 x 16 x 576 x 2 = 1,124,352, the same on every rank */
    cr_assert_eq(kvt_model_block_bytes(&d, 16, 1), 1124352);
    cr_assert_eq(kvt_model_block_bytes(&d, 16, 8), 1124352);
    /* gpt-oss: full and sliding layers, 36 x 2 x 16 x 8 x 64 x 2 = 1,179,648 */
    cr_assert_eq(kvt_model_block_bytes(&g, 16, 1), 1179648);
    /* Nemotron-H: only the 10 attention layers: 10 x 2 x 16 x 8 x 128 x 2 */
    cr_assert_eq(kvt_model_block_bytes(&n, 16, 1), 655360);
}

/* The namespace descriptor tierd gets comes from the same numbers. */
Test(kvcalc_sizes, fill_ns_from_model)
{
    struct kvt_model_desc m = load("llama-3.1-8b.json");
    kvt_model ns = {.model_id = "meta-llama/Llama-3.1-8B", .layout = "vllm-flash",
                    .tp_size = 2, .tp_rank = 1};

    cr_assert_eq(kvt_model_fill_ns(&m, 16, &ns), 0);
    cr_assert_eq(ns.block_bytes, 1 * MIB);
    cr_assert_eq(ns.block_tokens, 16);
    cr_assert_str_eq(ns.dtype, "bf16");
    cr_assert_str_eq(ns.model_id, "meta-llama/Llama-3.1-8B", "caller's fields untouched");
    ns.tp_size = 0; /* taken as 1 */
    cr_assert_eq(kvt_model_fill_ns(&m, 16, &ns), 0);
    cr_assert_eq(ns.block_bytes, 2 * MIB);
    /* 2 MiB x 256 = 512 MiB > KVT_BLOCK_MAX (256 MiB): refused, ns unchanged */
    cr_assert_eq(kvt_model_fill_ns(&m, 4096, &ns), -EINVAL);
    cr_assert_eq(ns.block_tokens, 16);
    ns.tp_size = 3;
    cr_assert_eq(kvt_model_fill_ns(&m, 16, &ns), -EINVAL);
}

/* ---- layer-mix forms not in the folder -------------------------------------- */

/* Mistral-7B-v0.1 style: a window and no pattern: every layer slides. */
Test(kvcalc_sizes, window_without_pattern_slides_everywhere)
{
    struct kvt_model_desc m;

    parse_ok("{\"num_hidden_layers\": 32, \"num_attention_heads\": 32,"
             "\"num_key_value_heads\": 8, \"hidden_size\": 4096,"
             "\"sliding_window\": 4096, \"torch_dtype\": \"bfloat16\"}", &m);
    cr_assert_eq(m.n_groups, 1);
    cr_assert_eq(m.group[0].kind, KVT_LAYER_SLIDING);
    cr_assert_eq(kvt_model_token_bytes(&m), 0);
    cr_assert_eq(kvt_model_window_bytes(&m), 4096 * 128 * KIB);
}

/* Qwen2 with the window on: layers from max_window_layers slide. */
Test(kvcalc_sizes, qwen2_max_window_layers)
{
    struct kvt_model_desc m;

    parse_ok("{\"num_hidden_layers\": 28, \"num_attention_heads\": 28,"
             "\"num_key_value_heads\": 4, \"hidden_size\": 3584,"
             "\"sliding_window\": 4096, \"use_sliding_window\": true,"
             "\"max_window_layers\": 21}", &m);
    expect_split(&m, KVT_LAYER_FULL, 21, KVT_LAYER_SLIDING, 7);
}

/* An explicit sliding_window_pattern, text_config winning over the top level,
 * and an integral real accepted. */
Test(kvcalc_sizes, explicit_pattern_and_text_config)
{
    struct kvt_model_desc m;

    parse_ok("{\"num_hidden_layers\": 99, \"torch_dtype\": \"float16\","
             "\"text_config\": {\"num_hidden_layers\": 12, \"head_dim\": 64.0,"
             "\"num_attention_heads\": 8, \"num_key_value_heads\": 4,"
             "\"sliding_window\": 512, \"sliding_window_pattern\": 4}}", &m);
    cr_assert_eq(m.num_layers, 12);
    cr_assert_str_eq(m.dtype, "fp16", "dtype comes from the top level when text_config has none");
    expect_split(&m, KVT_LAYER_FULL, 3, KVT_LAYER_SLIDING, 9);
    cr_assert_eq(kvt_model_group(&m, KVT_LAYER_FULL)->head_dim, 64);
}

/* Where the attention layers fall, on counts where the offset matters:
 * 10 layers, period 4, offset 3 -> layers 3, 7 (offset 0 would give 0, 4, 8);
 * full_attention_interval 4 -> full at i % 4 == 3: layers 3, 7 as well. */
Test(kvcalc_sizes, period_offset_and_interval_positions)
{
    struct kvt_model_desc m;

    parse_ok("{\"num_hidden_layers\": 10, \"num_attention_heads\": 2,"
             "\"head_dim\": 8, \"attn_layer_period\": 4, \"attn_layer_offset\": 3,"
             "\"mamba_expand\": 2, \"hidden_size\": 16, \"mamba_d_state\": 4,"
             "\"mamba_d_conv\": 4}", &m);
    expect_split(&m, KVT_LAYER_FULL, 2, KVT_LAYER_STATE, 8);
    /* Mamba1 per layer: conv 3 x 32 x 2 + ssm 32 x 4 x 2 (no dtype: bf16) = 448 */
    cr_assert_eq(kvt_model_state_bytes(&m), 8 * 448);
    parse_ok("{\"num_hidden_layers\": 10, \"num_attention_heads\": 2,"
             "\"head_dim\": 8, \"full_attention_interval\": 4,"
             "\"linear_num_key_heads\": 1, \"linear_key_head_dim\": 2,"
             "\"linear_num_value_heads\": 3, \"linear_value_head_dim\": 4,"
             "\"linear_conv_kernel_dim\": 4, \"torch_dtype\": \"float32\"}", &m);
    expect_split(&m, KVT_LAYER_FULL, 2, KVT_LAYER_STATE, 8);
    /* GDN per layer, fp32: conv 3 x (2x1x2 + 3x4 = 16) x 4 = 192 + rec 3x2x4 x 4 = 96 */
    cr_assert_eq(kvt_model_state_bytes(&m), 8 * (192 + 96));
}

/* Infinity / NaN outside strings are read; inside strings they stay text. */
Test(kvcalc_sizes, infinity_and_nan_tokens)
{
    struct kvt_model_desc m;
    char err[256];
    const char *j = "{\"model_type\": \"Infinity\", \"x\": [-Infinity, Infinity, NaN],"
                    "\"s\": \"a \\\"NaN\\\" Infinity\","
                    "\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"head_dim\": 8}";

    parse_ok(j, &m);
    cr_assert_str_eq(m.model_type, "Infinity", "a string must not be rewritten");
    cr_assert_eq(kvt_model_token_bytes(&m), 2 * 2 * 2 * 8 * 2);
    /* InfinityX is not the token: a syntax error, with its line */
    cr_assert_eq(parse_str("{\n\"a\": InfinityX}", &m, err, sizeof(err)), -EINVAL);
    cr_assert(strstr(err, "line 2"), "error should name line 2: %s", err);
}

/* ---- bad configs: a clear error naming the problem, never a crash ------------ */

/* Each bad config and a word its error message must contain. */
static const struct {
    const char *json, *needle;
} bad_cfgs[] = {
    {"{\"num_attention_heads\": 32, \"hidden_size\": 4096}", "num_hidden_layers"},
    {"{\"num_hidden_layers\": 0, \"num_attention_heads\": 32}", "num_hidden_layers"},
    {"{\"num_hidden_layers\": -4, \"num_attention_heads\": 32}", "num_hidden_layers"},
    {"{\"num_hidden_layers\": \"32\", \"num_attention_heads\": 32}", "num_hidden_layers"},
    {"{\"num_hidden_layers\": 3.5, \"num_attention_heads\": 32}", "num_hidden_layers"},
    {"{\"num_hidden_layers\": 1e300, \"num_attention_heads\": 32}", "num_hidden_layers"},
    {"{\"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"hidden_size\": 4096,"
     "\"num_key_value_heads\": 0}", "num_key_value_heads"},
    {"{\"num_hidden_layers\": 32, \"hidden_size\": 4096}", "num_attention_heads"},
    {"{\"num_hidden_layers\": 32, \"num_attention_heads\": 32}", "head_dim"},
    {"{\"num_hidden_layers\": 32, \"num_attention_heads\": 7, \"hidden_size\": 100}",
     "hidden_size"},
    {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"head_dim\": 8,"
     "\"layer_types\": [\"full_attention\"]}", "layer_types"},
    {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"head_dim\": 8,"
     "\"layer_types\": [\"full_attention\", \"weird\"]}", "layer_types[1]"},
    {"{\"num_hidden_layers\": 2, \"num_attention_heads\": 2, \"head_dim\": 8,"
     "\"layer_types\": [\"full_attention\", \"sliding_attention\"]}", "sliding_window"},
    {"{\"num_hidden_layers\": 3, \"num_attention_heads\": 2, \"head_dim\": 8,"
     "\"hybrid_override_pattern\": \"M*\"}", "hybrid_override_pattern"},
    {"{\"num_hidden_layers\": 3, \"num_attention_heads\": 2, \"head_dim\": 8,"
     "\"hybrid_override_pattern\": \"M*X\"}", "hybrid_override_pattern"},
    {"{\"num_hidden_layers\": 4, \"num_attention_heads\": 2, \"head_dim\": 8,"
     "\"hybrid_override_pattern\": \"M*M*\", \"mamba_num_heads\": 8}", "mamba_head_dim"},
    {"{\"num_hidden_layers\": 8, \"num_attention_heads\": 2, \"head_dim\": 8,"
     "\"full_attention_interval\": 4, \"linear_num_key_heads\": 16}", "linear_key_head_dim"},
    {"{\"num_hidden_layers\": 8, \"num_attention_heads\": 2, \"head_dim\": 8,"
     "\"attn_layer_period\": 4, \"attn_layer_offset\": 4}", "attn_layer_offset"},
    {"{\"num_hidden_layers\": 4, \"kv_lora_rank\": 512}", "qk_rope_head_dim"},
    {"{\"num_hidden_layers\": 4, \"num_attention_heads\": 2, \"head_dim\": 8,"
     "\"use_sliding_window\": \"yes\", \"sliding_window\": 8}", "use_sliding_window"},
    {"{\"num_hidden_layers\": 4, \"num_attention_heads\": 2, \"head_dim\": 8,"
     "\"torch_dtype\": 16}", "torch_dtype"},
    {"{\"num_hidden_layers\": 4, \"num_attention_heads\": 2, \"head_dim\": 8,"
     "\"full_attention_interval\": 2, \"linear_num_key_heads\": 1, \"linear_key_head_dim\": 1,"
     "\"linear_num_value_heads\": 1, \"linear_value_head_dim\": 1, \"linear_conv_kernel_dim\": 2,"
     "\"mamba_ssm_dtype\": \"int3\"}", "mamba_ssm_dtype"},
    {"[1, 2, 3]", "object"},
    {"\"llama\"", "object"},
    {"", "line 1"},
    {"{\"num_hidden_layers\": 32,\n\"num_attention_heads\": ", "line 2"},
    {"{\"num_hidden_layers\": 32} trailing", "line 1"},
};

Test(kvcalc_sizes, bad_configs_name_the_problem)
{
    for (size_t i = 0; i < sizeof(bad_cfgs) / sizeof(bad_cfgs[0]); i++) {
        struct kvt_model_desc m;
        char err[256] = "untouched";
        int rc = parse_str(bad_cfgs[i].json, &m, err, sizeof(err));

        cr_assert_eq(rc, -EINVAL, "case %zu (%s): returned %d, expected -EINVAL (msg: %s)", i,
                     bad_cfgs[i].json, rc, err);
        cr_assert(strstr(err, bad_cfgs[i].needle), "case %zu (%s): message \"%s\" lacks \"%s\"",
                  i, bad_cfgs[i].json, err, bad_cfgs[i].needle);
    }
}

/* A short buffer truncates the message; a NULL buffer with 0 is allowed. */
Test(kvcalc_sizes, error_buffer_edges)
{
    struct kvt_model_desc m;
    char err[8];

    cr_assert_eq(parse_str("[]", &m, err, sizeof(err)), -EINVAL);
    cr_assert_eq(strlen(err), sizeof(err) - 1);
    cr_assert_eq(parse_str("[]", &m, NULL, 0), -EINVAL);
    cr_assert_eq(kvt_model_parse_file("/nonexistent/config.json", &m, NULL, 0), -ENOENT);
}

/* Every prefix of a real config is refused cleanly (never a crash or a read
 * past the end); only the whole file parses. */
Test(kvcalc_sizes, every_truncation_of_a_config_fails_cleanly)
{
    char path[512], err[256];
    FILE *f = fopen(cfg_path("nemotron-h-56b.json", path, sizeof(path)), "rb");
    static char buf[1 << 16];
    size_t len;
    struct kvt_model_desc m;

    cr_assert_not_null(f, "%s: %s", path, strerror(errno));
    len = fread(buf, 1, sizeof(buf), f);
    fclose(f);
    cr_assert(len > 100);
    for (size_t n = 0; n < len - 2; n++) {
        /* a private copy of exactly n bytes, so ASan sees any overread */
        char *p = malloc(n ? n : 1);

        cr_assert_not_null(p);
        memcpy(p, buf, n);
        cr_assert_eq(kvt_model_parse_json(p, n, &m, err, sizeof(err)), -EINVAL,
                     "prefix of %zu bytes accepted", n);
        free(p);
    }
    cr_assert_eq(kvt_model_parse_json(buf, len, &m, err, sizeof(err)), 0, "%s", err);
}

/* ---- the kvcalc binary ---------------------------------------------------------- */

struct run {
    int status;
    char out[16384];
    char err[4096];
};

/* Run kvcalc with args (NULL-terminated), capturing stdout and stderr.
 * Under KVT_TEST_VALGRIND the tool runs under memcheck (exit 9 on error). */
static void run_kvcalc(struct run *r, const char *const *args)
{
    char *out, *err;

    r->status = t_run("kvcalc", args, 1, &out, &err);
    snprintf(r->out, sizeof(r->out), "%s", out);
    snprintf(r->err, sizeof(r->err), "%s", err);
    free(out);
    free(err);
    cr_assert_neq(r->status, 127, "cannot run kvcalc (build it: make build/kvcalc)");
}

/* Write text to a fresh temp file; the caller unlinks path. */
static void write_tmp(char *path, const char *text)
{
    int fd = mkstemp(path);

    cr_assert(fd >= 0, "mkstemp: %s", strerror(errno));
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

/* JSON member of the tool's output as an integer (fails the test if absent). */
static long long jget(json_t *o, const char *a, const char *b)
{
    json_t *v = json_object_get(o, a);

    if (b)
        v = json_object_get(v, b);
    cr_assert(json_is_number(v), "JSON output lacks %s%s%s", a, b ? "." : "", b ? b : "");
    return json_is_integer(v) ? json_integer_value(v) : (long long)json_real_value(v);
}

Test(kvcalc_sizes, tool_table_llama)
{
    char path[512];
    struct run r;

    run_kvcalc(&r, (const char *const[]){cfg_path("llama-3.1-8b.json", path, sizeof(path)),
                                         NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert(strstr(r.out, "131072 (128.00 KiB)"), "no 128 KiB per token in:\n%s", r.out);
    cr_assert(strstr(r.out, "4294967296 (4.00 GiB)"), "no 4 GiB per 32k sequence in:\n%s",
              r.out);
    cr_assert(strstr(r.out, "full_attention"), "%s", r.out);
}

/* gpt-oss-120b with every capacity option, as JSON. */
Test(kvcalc_sizes, tool_json_capacity)
{
    char path[512];
    struct run r;
    json_error_t je;
    json_t *j;

    run_kvcalc(&r, (const char *const[]){cfg_path("gpt-oss-120b.json", path, sizeof(path)),
                                         "--json", "--gpu-mem", "80G", "--weights", "61G",
                                         "--util", "0.9", "--max-model-len", "131072",
                                         "--ram", "64G", "--nvme", "1T", NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    j = json_loads(r.out, 0, &je);
    cr_assert_not_null(j, "output is not JSON (%s):\n%s", je.text, r.out);
    cr_assert_eq(jget(j, "bytes_per_token", NULL), 36864);
    cr_assert_eq(jget(j, "sliding_bytes_per_seq", NULL), 4718592);
    cr_assert_eq(jget(j, "block_bytes", NULL), 1179648);
    /* 80 GiB x 0.9 = 72 GiB - 61 GiB = 11 GiB for KV; one sequence of 131,072
     * tokens = 131,072 x 36 KiB + 4.5 MiB = 4.5 GiB + 4.5 MiB -> 2 fit */
    cr_assert_eq(jget(j, "gpu", "bytes_per_seq"), 131072 * 36 * KIB + 4608 * KIB);
    cr_assert_eq(jget(j, "gpu", "sequences"), 2);
    /* 64 GiB / 1,179,648 B = 58,254 blocks x 16 = 932,064 tokens */
    cr_assert_eq(jget(j, "warm", "blocks"), 58254);
    cr_assert_eq(jget(j, "warm", "tokens"), 932064);
    /* 1 TiB / 1,179,648 B = 932,067 blocks x 16 = 14,913,072 tokens */
    cr_assert_eq(jget(j, "cold", "tokens"), 14913072);
    json_decref(j);
}

/* --dtype fp8 through the tool: Llama at 64 KiB per token. */
Test(kvcalc_sizes, tool_dtype_fp8)
{
    char path[512];
    struct run r;

    run_kvcalc(&r, (const char *const[]){cfg_path("llama-3.1-8b.json", path, sizeof(path)),
                                         "--dtype", "fp8", NULL});
    cr_assert_eq(r.status, 0, "exit %d, stderr: %s", r.status, r.err);
    cr_assert(strstr(r.out, "65536 (64.00 KiB)"), "%s", r.out);
}

/* A bad config: exit 1 and a message naming the problem. */
static void expect_bad(const char *text, const char *needle)
{
    char path[] = "/tmp/kvcalc_cfg.XXXXXX";
    struct run r;

    write_tmp(path, text);
    run_kvcalc(&r, (const char *const[]){path, NULL});
    unlink(path);
    cr_assert_eq(r.status, 1, "exit %d for a bad config (%s), stderr: %s", r.status, needle,
                 r.err);
    cr_assert(strstr(r.err, needle), "stderr \"%s\" lacks \"%s\"", r.err, needle);
    cr_assert_eq(r.out[0], '\0', "nothing on stdout for a bad config: %s", r.out);
}

Test(kvcalc_sizes, tool_bad_configs)
{
    expect_bad("{\"num_attention_heads\": 32, \"hidden_size\": 4096}", "num_hidden_layers");
    expect_bad("{\"num_hidden_layers\": 32,\n\"num_attention_heads\": 3", "line 2");
    expect_bad("[{\"num_hidden_layers\": 32}]", "object");
    expect_bad("{\"num_hidden_layers\": 32, \"num_attention_heads\": 32, \"hidden_size\": 4096,"
               "\"num_key_value_heads\": -8}", "num_key_value_heads");
}

Test(kvcalc_sizes, tool_usage_errors)
{
    char path[512];
    struct run r;
    const char *cfg = cfg_path("llama-3.1-8b.json", path, sizeof(path));

    run_kvcalc(&r, (const char *const[]){NULL});
    cr_assert_eq(r.status, 2, "no arguments: exit %d", r.status);
    run_kvcalc(&r, (const char *const[]){cfg, "--dtype", "fp4", NULL});
    cr_assert_eq(r.status, 2, "--dtype fp4: exit %d", r.status);
    cr_assert(strstr(r.err, "--dtype"), "%s", r.err);
    run_kvcalc(&r, (const char *const[]){cfg, "--tokens", "0", NULL});
    cr_assert_eq(r.status, 2);
    run_kvcalc(&r, (const char *const[]){cfg, "--gpu-mem", "80G", NULL});
    cr_assert_eq(r.status, 2, "--gpu-mem without --weights: exit %d", r.status);
    run_kvcalc(&r, (const char *const[]){cfg, "--ram", "12Q", NULL});
    cr_assert_eq(r.status, 2);
    run_kvcalc(&r, (const char *const[]){cfg, "--util", "1.5", "--gpu-mem", "8G",
                                         "--weights", "1G", NULL});
    cr_assert_eq(r.status, 2);
    run_kvcalc(&r, (const char *const[]){"/nonexistent/config.json", NULL});
    cr_assert_eq(r.status, 1, "missing file: exit %d", r.status);
    cr_assert(strstr(r.err, "No such file"), "%s", r.err);
}
