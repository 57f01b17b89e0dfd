/* SPDX-License-Identifier: MIT */
/*
 * kvcalc.c - how much KV cache a model needs, from its config.json.
 *
 * Prints bytes per token of the layers that grow, fixed bytes per sequence
 * (sliding windows, recurrent state), the tier block size, and optionally
 * how many sequences fit a GPU and how many tokens a warm (RAM) or cold
 * (NVMe) budget holds. All figures come from kvt_model.h, the same code that
 * sizes tierd namespaces. It reads one file and talks to nothing.
 */
#include <errno.h>
#include <getopt.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "kvt_common.h"
#include "kvtier.h"

#define EXIT_CONFIG 1 /* the config could not be read or understood */
#define EXIT_USAGE 2

static const char usage_text[] =
    "usage: kvcalc CONFIG.json [options]\n"
    "\n"
    "  --dtype bf16|fp16|fp32|fp8|fp8_e4m3|fp8_e5m2|fp8_e4m3fnuz|fp8_e5m2fnuz\n"
    "                              KV dtype (default: the config's, else bf16)\n"
    "  --tokens N                  sequence length for the per-sequence figure (32768)\n"
    "  --block-tokens N            tokens per tier block (16)\n"
    "  --gpu-mem SIZE --weights SIZE [--util F] [--max-model-len N]\n"
    "                              sequences of max-model-len (default: the config's\n"
    "                              max_position_embeddings) that fit GPU memory x F\n"
    "                              (0.9) minus the weights (activations not counted)\n"
    "  --ram SIZE                  tokens a warm tier of SIZE holds\n"
    "  --nvme SIZE                 tokens a cold tier of SIZE holds\n"
    "  --json                      one JSON object instead of the table\n"
    "\n"
    "SIZE: bytes, or with a K/M/G/T suffix (powers of 1024), e.g. 80G, 1.5T.\n"
    "exit status: 0 ok, 1 bad config, 2 usage.\n";

/* What the command line asked for. */
struct opts {
    const char *path;
    const char *dtype;       /* NULL: the config's */
    uint64_t tokens;         /* per-sequence figure */
    uint32_t block_tokens;
    uint64_t gpu_mem, weights; /* bytes; gpu_mem 0: no GPU planning */
    double util;             /* fraction of gpu_mem the engine may use */
    uint64_t max_model_len;  /* 0: the config's */
    uint64_t ram, nvme;      /* bytes, 0: not asked */
    int json;
};

static int usage_error(const char *fmt, const char *arg)
{
    fputs("kvcalc: ", stderr);
    fprintf(stderr, fmt, arg);
    fputs("\n", stderr);
    fputs(usage_text, stderr);
    return EXIT_USAGE;
}

/* Option name's value arg, a count in [1, max] (cmn_parse_uint) into *out:
 * 0, or the usage error. */
static int count_opt(const char *name, const char *arg, uint64_t max, uint64_t *out)
{
    char fmt[96];

    if (cmn_parse_uint(arg, 1, max, out) == 0)
        return 0;
    snprintf(fmt, sizeof(fmt), "%s: '%%s' is not a count from 1 to %llu", name,
             (unsigned long long)max);
    return usage_error(fmt, arg);
}

/* Option name's value arg, a size (cmn_parse_size), above 0 unless zero_ok,
 * into *out: 0, or the usage error. */
static int size_opt(const char *name, const char *arg, bool zero_ok, uint64_t *out)
{
    char fmt[96];

    if (cmn_parse_size(arg, out) == 0 && (zero_ok || *out))
        return 0;
    snprintf(fmt, sizeof(fmt), "%s: '%%s' is not a size%s", name, zero_ok ? "" : " above 0");
    return usage_error(fmt, arg);
}

static int parse_args(int argc, char **argv, struct opts *o)
{
    static const struct option longopts[] = {
        {"dtype", required_argument, NULL, 'd'},   {"tokens", required_argument, NULL, 't'},
        {"block-tokens", required_argument, NULL, 'b'},
        {"gpu-mem", required_argument, NULL, 'g'}, {"weights", required_argument, NULL, 'w'},
        {"util", required_argument, NULL, 'u'},
        {"max-model-len", required_argument, NULL, 'l'},
        {"ram", required_argument, NULL, 'r'},     {"nvme", required_argument, NULL, 'n'},
        {"json", no_argument, NULL, 'j'},          {"help", no_argument, NULL, 'h'},
        {NULL, 0, NULL, 0},
    };
    int opt, have_weights = 0, rc = 0;
    uint64_t v;
    char *end;

    *o = (struct opts){.tokens = 32768, .block_tokens = 16, .util = 0.9};
    opterr = 0;
    while ((opt = getopt_long(argc, argv, ":h", longopts, NULL)) != -1) {
        switch (opt) {
        case 'd': o->dtype = optarg; break;
        case 'j': o->json = 1; break;
        case 'h': fputs(usage_text, stdout); exit(0);
        case 't': rc = count_opt("--tokens", optarg, UINT32_MAX, &o->tokens); break;
        case 'b':
            if (!(rc = count_opt("--block-tokens", optarg, 1u << 20, &v)))
                o->block_tokens = (uint32_t)v;
            break;
        case 'l': rc = count_opt("--max-model-len", optarg, UINT32_MAX, &o->max_model_len); break;
        case 'g': rc = size_opt("--gpu-mem", optarg, false, &o->gpu_mem); break;
        case 'w':
            rc = size_opt("--weights", optarg, true, &o->weights);
            have_weights = 1;
            break;
        case 'r': rc = size_opt("--ram", optarg, false, &o->ram); break;
        case 'n': rc = size_opt("--nvme", optarg, false, &o->nvme); break;
        case 'u':
            errno = 0;
            o->util = strtod(optarg, &end);
            if (errno || end == optarg || *end || !(o->util > 0 && o->util <= 1))
                return usage_error("--util: '%s' is not a fraction in (0, 1]", optarg);
            break;
        case ':':
            return usage_error("option '%s' needs a value", argv[optind - 1]);
        default:
            return usage_error("unknown option '%s'", argv[optind - 1]);
        }
        if (rc)
            return rc;
    }
    if (optind != argc - 1)
        return usage_error("%s", optind >= argc ? "no config file given"
                                                : "give exactly one config file");
    o->path = argv[optind];
    if (!o->gpu_mem != !have_weights)
        return usage_error("%s", "--gpu-mem and --weights go together");
    return 0;
}

/* ---- the figures ---------------------------------------------------------- */

/* Everything printed, computed once for both output forms. */
struct report {
    struct kvt_model_desc m;
    uint64_t token_bytes, window_bytes, state_bytes, seq_bytes, block_bytes;
    uint64_t max_model_len;
    /* GPU planning, when asked */
    double kv_budget;       /* bytes left for KV: gpu_mem x util - weights (may be < 0) */
    uint64_t gpu_seq_bytes; /* one sequence of max_model_len */
    uint64_t gpu_seqs;      /* whole sequences that fit */
    double gpu_ratio;       /* kv_budget / gpu_seq_bytes, vLLM's "maximum concurrency" */
};

static int compute(const struct opts *o, struct report *r)
{
    char err[256];
    int rc = kvt_model_parse_file(o->path, &r->m, err, sizeof(err));

    if (rc < 0) {
        fprintf(stderr, "kvcalc: %s: %s\n", o->path, err);
        return EXIT_CONFIG;
    }
    if (o->dtype && kvt_model_set_dtype(&r->m, o->dtype) < 0)
        return usage_error("--dtype: '%s' is not bf16, fp16, fp32 or an fp8 format "
                           "(fp8, fp8_e4m3, fp8_e5m2, fp8_e4m3fnuz, fp8_e5m2fnuz)", o->dtype);
    r->token_bytes = kvt_model_token_bytes(&r->m);
    r->window_bytes = kvt_model_window_bytes(&r->m);
    r->state_bytes = kvt_model_state_bytes(&r->m);
    r->seq_bytes = kvt_model_seq_bytes(&r->m, o->tokens);
    r->block_bytes = kvt_model_block_bytes(&r->m, o->block_tokens, 1);
    r->max_model_len = o->max_model_len ? o->max_model_len : r->m.max_model_len;
    if (!o->gpu_mem)
        return 0;
    if (!r->max_model_len) {
        fprintf(stderr, "kvcalc: %s: no max_position_embeddings; give --max-model-len\n",
                o->path);
        return EXIT_USAGE;
    }
    r->kv_budget = (double)o->gpu_mem * o->util - (double)o->weights;
    r->gpu_seq_bytes = kvt_model_seq_bytes(&r->m, r->max_model_len);
    r->gpu_ratio = r->kv_budget > 0 && r->gpu_seq_bytes ? r->kv_budget / r->gpu_seq_bytes : 0;
    r->gpu_seqs = (uint64_t)r->gpu_ratio; /* truncation is floor here: ratio >= 0 */
    return 0;
}

/* ---- table output ---------------------------------------------------------- */

/* "131072 (128.00 KiB)" style: exact bytes, then a binary-unit reading. */
static const char *human(uint64_t v, char *buf, size_t cap)
{
    static const char *const unit[] = {"KiB", "MiB", "GiB", "TiB", "PiB"};
    double d = (double)v;
    int u = -1;

    while (d >= 1024 && u < 4) {
        d /= 1024;
        u++;
    }
    if (u < 0)
        snprintf(buf, cap, "%" PRIu64 " B", v);
    else
        snprintf(buf, cap, "%" PRIu64 " (%.2f %s)", v, d, unit[u]);
    return buf;
}

/* A size without the exact byte count: "80.00 GiB". */
static const char *short_size(double v, char *buf, size_t cap)
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB"};
    int u = 0;

    while (fabs(v) >= 1024 && u < 5) {
        v /= 1024;
        u++;
    }
    snprintf(buf, cap, u ? "%.2f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

static void print_groups(const struct kvt_model_desc *m)
{
    printf("%-18s %-8s %6s %8s %8s %7s %14s %16s\n", "group", "kind", "layers", "kv_heads",
           "head_dim", "window", "bytes/token", "fixed bytes/seq");
    for (uint32_t i = 0; i < m->n_groups; i++) {
        const struct kvt_layer_group *g = &m->group[i];
        char win[16] = "-", heads[16] = "-", dim[16] = "-";

        if (g->window)
            snprintf(win, sizeof(win), "%u", g->window);
        if (g->n_kv) {
            snprintf(heads, sizeof(heads), "%u", g->kv_heads);
            snprintf(dim, sizeof(dim), "%u", g->head_dim);
        }
        printf("%-18s %-8s %6u %8s %8s %7s %14" PRIu64 " %16" PRIu64 "%s\n", g->name,
               kvt_layer_kind_name(g->kind), g->layers, heads, dim, win,
               kvt_layer_group_token_bytes(g), kvt_layer_group_fixed_bytes(g),
               g->kind == KVT_LAYER_STATE ? " (estimate)" : "");
    }
}

static void print_notes(const struct report *r)
{
    const struct kvt_layer_group *st = kvt_model_group(&r->m, KVT_LAYER_STATE);
    unsigned n = r->m.notes;

    if (st)
        printf("note: the %u %s layers add no per-token cost; their fixed state per\n"
               "      sequence is an estimate (vLLM-style: conv state in the config dtype,\n"
               "      recurrent state in mamba_ssm_dtype when given); --dtype leaves it\n",
               st->layers, st->name);
    if (n & KVT_MODEL_NOTE_DTYPE_ASSUMED)
        printf("note: the config names no known torch_dtype/dtype; bf16 assumed\n");
    if (n & KVT_MODEL_NOTE_WINDOW_UNUSED)
        printf("note: sliding_window is set but use_sliding_window is false: every layer "
               "is full\n");
    if (n & KVT_MODEL_NOTE_K_EQ_V)
        printf("note: attention_k_eq_v: K and V counted separately; an engine storing one\n"
               "      tensor for both would need half the full layers' bytes\n");
    if (n & KVT_MODEL_NOTE_MTP)
        printf("note: multi-token-prediction (MTP) layers are not counted\n");
    if (kvt_model_group(&r->m, KVT_LAYER_INDEX))
        printf("note: indexer keys counted as vLLM stores them: fp8 + a 4-byte scale per "
               "128, in any KV dtype\n");
    if (kvt_model_group(&r->m, KVT_LAYER_SLIDING))
        printf("note: tier blocks hold the sliding layers too (a restored prefix needs "
               "them)\n");
}

static void print_tier(const char *name, uint64_t budget, const struct opts *o,
                       const struct report *r)
{
    char a[48], b[48];

    if (!r->block_bytes) {
        printf("%-12s %s: no per-token KV, nothing to store in blocks\n", name,
               short_size((double)budget, a, sizeof(a)));
        return;
    }
    uint64_t blocks = budget / r->block_bytes;
    uint64_t tokens = blocks * o->block_tokens;

    printf("%-12s %s / %s blocks = %" PRIu64 " blocks = %" PRIu64
           " tokens (%.2f sequences of %" PRIu64 " tokens)\n",
           name, short_size((double)budget, a, sizeof(a)),
           short_size((double)r->block_bytes, b, sizeof(b)), blocks, tokens,
           (double)tokens / (double)o->tokens, o->tokens);
}

static void print_table(const struct opts *o, const struct report *r)
{
    const struct kvt_model_desc *m = &r->m;
    char a[64], b[64], c[64];

    printf("config       %s\n", o->path);
    snprintf(a, sizeof(a), "%u", m->max_model_len);
    printf("model        %s, %u layers, max_position_embeddings %s\n",
           m->model_type[0] ? m->model_type : "(no model_type)", m->num_layers,
           m->max_model_len ? a : "none");
    printf("kv dtype     %s, %u bytes per element (config: %s)\n\n", m->dtype, m->elem_bytes,
           m->config_dtype[0] ? m->config_dtype : "none");
    print_groups(m);
    char label[64];

    printf("\n%-30s %s\n", "per token (growing layers)", human(r->token_bytes, a, sizeof(a)));
    printf("%-30s %s: sliding %s, state %s\n", "fixed per sequence",
           human(r->window_bytes + r->state_bytes, a, sizeof(a)),
           human(r->window_bytes, b, sizeof(b)), human(r->state_bytes, c, sizeof(c)));
    snprintf(label, sizeof(label), "per sequence of %" PRIu64 " tokens", o->tokens);
    printf("%-30s %s\n", label, human(r->seq_bytes, a, sizeof(a)));
    snprintf(label, sizeof(label), "tier block of %u tokens", o->block_tokens);
    printf("%-30s %s\n", label,
           r->block_bytes ? human(r->block_bytes, a, sizeof(a)) : "none (no per-token KV)");
    print_notes(r);
    if (o->gpu_mem || o->ram || o->nvme)
        printf("\n");
    if (o->gpu_mem) {
        printf("%-12s %s x %.2f - %s weights = %s for KV\n", "gpu",
               short_size((double)o->gpu_mem, a, sizeof(a)), o->util,
               short_size((double)o->weights, b, sizeof(b)),
               short_size(r->kv_budget, c, sizeof(c)));
        printf("%-12s %" PRIu64 " sequences of %" PRIu64 " tokens (%s each; %.2fx)\n", "",
               r->gpu_seqs, r->max_model_len, short_size((double)r->gpu_seq_bytes, a, sizeof(a)),
               r->gpu_ratio);
    }
    if (o->ram)
        print_tier("warm (ram)", o->ram, o, r);
    if (o->nvme)
        print_tier("cold (nvme)", o->nvme, o, r);
}

/* ---- JSON output ------------------------------------------------------------ */

/* jansson integers are signed: saturated sizes print as INT64_MAX. */
static json_t *jint(uint64_t v)
{
    return json_integer(v > INT64_MAX ? INT64_MAX : (json_int_t)v);
}

static json_t *json_groups(const struct kvt_model_desc *m)
{
    json_t *a = json_array();

    for (uint32_t i = 0; a && i < m->n_groups; i++) {
        const struct kvt_layer_group *g = &m->group[i];

        json_array_append_new(a, json_pack("{s:s, s:s, s:I, s:I, s:I, s:I, s:I, s:I, s:I, s:b}",
            "name", g->name, "kind", kvt_layer_kind_name(g->kind),
            "layers", (json_int_t)g->layers, "kv_heads", (json_int_t)g->kv_heads,
            "head_dim", (json_int_t)g->head_dim, "elem_bytes", (json_int_t)g->elem_bytes,
            "window", (json_int_t)g->window,
            "bytes_per_token", (json_int_t)kvt_layer_group_token_bytes(g),
            "fixed_bytes_per_seq", (json_int_t)kvt_layer_group_fixed_bytes(g),
            "estimate", g->kind == KVT_LAYER_STATE));
    }
    return a;
}

/* One tier's capacity as an object. */
static json_t *json_tier(uint64_t budget, const struct opts *o, const struct report *r)
{
    uint64_t blocks = r->block_bytes ? budget / r->block_bytes : 0;

    return json_pack("{s:o, s:o, s:o, s:o}", "bytes", jint(budget), "block_bytes",
                     jint(r->block_bytes), "blocks", jint(blocks), "tokens",
                     jint(blocks * o->block_tokens));
}

static int print_json(const struct opts *o, const struct report *r)
{
    const struct kvt_model_desc *m = &r->m;
    json_t *j = json_pack("{s:s, s:s, s:I, s:I, s:s, s:s, s:I, s:o, s:o, s:o, s:o, s:o, s:I, "
                          "s:I, s:o, s:o}",
        "config", o->path, "model_type", m->model_type,
        "num_hidden_layers", (json_int_t)m->num_layers,
        "max_position_embeddings", (json_int_t)m->max_model_len,
        "dtype", m->dtype, "config_dtype", m->config_dtype,
        "elem_bytes", (json_int_t)m->elem_bytes, "groups", json_groups(m),
        "bytes_per_token", jint(r->token_bytes), "sliding_bytes_per_seq", jint(r->window_bytes),
        "state_bytes_per_seq", jint(r->state_bytes), "state_is_estimate",
        json_boolean(r->state_bytes != 0), "tokens", (json_int_t)o->tokens,
        "block_tokens", (json_int_t)o->block_tokens, "bytes_per_seq", jint(r->seq_bytes),
        "block_bytes", jint(r->block_bytes));
    int rc = 0;

    if (j && o->gpu_mem)
        json_object_set_new(j, "gpu", json_pack("{s:o, s:o, s:f, s:f, s:I, s:o, s:o, s:f}",
            "gpu_mem", jint(o->gpu_mem), "weights", jint(o->weights), "util", o->util,
            "kv_budget", r->kv_budget, "max_model_len", (json_int_t)r->max_model_len,
            "bytes_per_seq", jint(r->gpu_seq_bytes), "sequences", jint(r->gpu_seqs),
            "concurrency", r->gpu_ratio));
    if (j && o->ram)
        json_object_set_new(j, "warm", json_tier(o->ram, o, r));
    if (j && o->nvme)
        json_object_set_new(j, "cold", json_tier(o->nvme, o, r));
    if (!j || json_dumpf(j, stdout, JSON_INDENT(2)) < 0) {
        fprintf(stderr, "kvcalc: cannot write JSON\n");
        rc = EXIT_CONFIG;
    } else {
        putchar('\n');
    }
    json_decref(j);
    return rc;
}

int main(int argc, char **argv)
{
    struct opts o;
    struct report r;
    int rc = parse_args(argc, argv, &o);

    if (rc)
        return rc;
    memset(&r, 0, sizeof(r));
    if ((rc = compute(&o, &r)) != 0)
        return rc;
    if (o.json)
        rc = print_json(&o, &r);
    else
        print_table(&o, &r);
    if (fflush(stdout) != 0) {
        fprintf(stderr, "kvcalc: writing output: %s\n", strerror(errno));
        return EXIT_CONFIG;
    }
    return rc;
}
