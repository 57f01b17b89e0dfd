/* SPDX-License-Identifier: MIT */
/*
 * kvt_model.c - a model's KV-cache shape from its Hugging Face config.json.
 *
 * Reads the config with jansson (the only file that sees it), sorts the
 * layers into groups (full, sliding, MLA, indexer, recurrent state, none)
 * and gives each its shape. What the groups cost is kvt_model_size.c's; it
 * never allocates a cache, and knows nothing of tierd.
 */
#include <errno.h>
#include <fcntl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <jansson.h>

#include "kvt_int.h"
#include "kvtier.h"

#define LAYERS_MAX 65536u      /* more layers than any model has: a typo */
#define DIM_MAX (1u << 20)     /* bound on heads, dims, windows, ranks */
#define FILE_MAX (16u << 20)   /* a config.json is a few KiB */
#define BF16_BYTES 2u
#define INDEX_QUANT_BLOCK 128u /* indexer key values per FP8 scale (vLLM) */

/* Layer classes while reading; STATE splits by the state's formula. */
enum lclass { C_FULL, C_SLIDING, C_GDN, C_MAMBA2, C_MAMBA1, C_NONE, C_COUNT };

/* The parse in progress: both JSON levels and where errors go. */
struct cfg {
    json_t *root;  /* the whole config (borrowed) */
    json_t *text;  /* root's "text_config" object, or NULL */
    char *err;     /* caller's message buffer */
    size_t cap;    /* its size, 0: no message */
    uint32_t conv_elem; /* bytes per element of the config dtype (conv state) */
};

static int fail(struct cfg *c, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* Write a message to the caller's buffer; returns -EINVAL for `return fail()`. */
static int fail(struct cfg *c, const char *fmt, ...)
{
    va_list ap;

    if (c->cap) {
        va_start(ap, fmt);
        vsnprintf(c->err, c->cap, fmt, ap);
        va_end(ap);
        /* one line, whatever the config's strings and jansson's "near '...'"
         * quote from the input: control characters become '?' */
        for (char *s = c->err; *s; s++)
            if ((unsigned char)*s < 0x20 || *s == 0x7f)
                *s = '?';
    }
    return -EINVAL;
}

/* ---- field access -------------------------------------------------------- */

/*
 * The value of a field: text_config's when it has one, else the top level's.
 * A JSON null counts as absent (configs write "head_dim": null). *where gets
 * the prefix to name it by in messages.
 */
static json_t *field(const struct cfg *c, const char *name, const char **where)
{
    json_t *v = c->text ? json_object_get(c->text, name) : NULL;

    *where = "text_config.";
    if (!v || json_is_null(v)) {
        v = json_object_get(c->root, name);
        *where = "";
    }
    return v && !json_is_null(v) ? v : NULL;
}

/* A readable name of a JSON value's type, for messages. */
static const char *type_name(const json_t *v)
{
    switch (json_typeof(v)) {
    case JSON_OBJECT: return "an object";
    case JSON_ARRAY: return "an array";
    case JSON_STRING: return "a string";
    case JSON_TRUE: case JSON_FALSE: return "a boolean";
    case JSON_NULL: return "null";
    default: return "a number";
    }
}

/*
 * Read an integer field (the first of names[] present) into *out, checking
 * min <= value <= max. Integral reals (2.0) are accepted. Returns 0, 1 when
 * absent and optional, or -EINVAL with a message naming the field.
 */
static int get_uint(struct cfg *c, const char *const *names, int required, uint32_t min,
                    uint32_t max, uint32_t *out)
{
    const char *where;
    json_t *v = NULL;
    double d;
    int i;

    for (i = 0; names[i] && !v; i++)
        v = field(c, names[i], &where);
    if (!v) {
        if (!required)
            return 1;
        if (names[1])
            return fail(c, "missing field '%s' (or '%s')", names[0], names[1]);
        return fail(c, "missing field '%s'", names[0]);
    }
    if (json_is_integer(v)) {
        json_int_t n = json_integer_value(v);

        if (n < (json_int_t)min || n > (json_int_t)max)
            return fail(c, "field '%s%s' must be between %u and %u, found %" JSON_INTEGER_FORMAT,
                        where, names[i - 1], min, max, n);
        *out = (uint32_t)n;
        return 0;
    }
    if (json_is_real(v)) {
        d = json_real_value(v);
        /* range first: converting an out-of-range double is undefined */
        if (!(d >= min && d <= max) || d != (double)(uint32_t)d)
            return fail(c, "field '%s%s' must be an integer between %u and %u, found %g",
                        where, names[i - 1], min, max, d);
        *out = (uint32_t)d;
        return 0;
    }
    return fail(c, "field '%s%s' must be an integer, found %s", where, names[i - 1],
                type_name(v));
}

/* get_uint() of one name. */
static int get_u(struct cfg *c, const char *name, int required, uint32_t min, uint32_t max,
                 uint32_t *out)
{
    const char *names[] = {name, NULL};

    return get_uint(c, names, required, min, max, out);
}

/* A string field, or NULL when absent; -EINVAL (via *rc) when not a string. */
static const char *get_str(struct cfg *c, const char *name, int *rc)
{
    const char *where;
    json_t *v = field(c, name, &where);

    *rc = 0;
    if (!v)
        return NULL;
    if (!json_is_string(v)) {
        *rc = fail(c, "field '%s%s' must be a string, found %s", where, name, type_name(v));
        return NULL;
    }
    return json_string_value(v);
}

/* A boolean field: 1 true, 0 false, -1 absent; -EINVAL when another type. */
static int get_bool(struct cfg *c, const char *name)
{
    const char *where;
    json_t *v = field(c, name, &where);

    if (!v)
        return -1;
    if (!json_is_boolean(v))
        return fail(c, "field '%s%s' must be true or false, found %s", where, name,
                    type_name(v));
    return json_is_true(v);
}

/* ---- dtypes -------------------------------------------------------------- */

/* Bytes per element of a dtype name (ours, vLLM's or torch's), and our
 * short name; 0 when unknown. Each FP8 format keeps its own name: the same
 * values are different bytes in each, and the name goes into namespaces.
 * A bare "fp8" is E4M3 (FN), as vLLM defines its "fp8" (= "fp8_e4m3"). */
static uint32_t dtype_bytes(const char *s, const char **canon)
{
    static const struct { const char *name, *canon; uint32_t bytes; } tab[] = {
        {"bf16", "bf16", 2},    {"bfloat16", "bf16", 2}, {"fp16", "fp16", 2},
        {"float16", "fp16", 2}, {"half", "fp16", 2},     {"fp32", "fp32", 4},
        {"float32", "fp32", 4}, {"float", "fp32", 4},
        {"fp8", "fp8_e4m3", 1},         {"fp8_e4m3", "fp8_e4m3", 1},
        {"float8_e4m3fn", "fp8_e4m3", 1}, {"fp8_e4m3fn", "fp8_e4m3", 1},
        {"fp8_e5m2", "fp8_e5m2", 1},    {"float8_e5m2", "fp8_e5m2", 1},
        {"fp8_e4m3fnuz", "fp8_e4m3fnuz", 1}, {"float8_e4m3fnuz", "fp8_e4m3fnuz", 1},
        {"fp8_e5m2fnuz", "fp8_e5m2fnuz", 1}, {"float8_e5m2fnuz", "fp8_e5m2fnuz", 1},
    };

    for (size_t i = 0; i < sizeof(tab) / sizeof(tab[0]); i++) {
        if (strcmp(s, tab[i].name) == 0) {
            *canon = tab[i].canon;
            return tab[i].bytes;
        }
    }
    return 0;
}

/* Bytes per element of group g under a KV dtype of e bytes: the indexer's
 * keys are FP8 bytes (and scales) in any dtype. */
static uint32_t kv_elem(const struct kvt_layer_group *g, uint32_t e)
{
    return g->kind == KVT_LAYER_INDEX ? 1 : e;
}

int kvt_model_set_dtype(struct kvt_model_desc *m, const char *dtype)
{
    const char *canon = NULL;
    uint32_t e = dtype ? dtype_bytes(dtype, &canon) : 0;

    if (!m || !e)
        return -EINVAL;
    snprintf(m->dtype, sizeof(m->dtype), "%s", canon);
    m->elem_bytes = e;
    for (uint32_t i = 0; i < m->n_groups; i++)
        if (m->group[i].n_kv)
            m->group[i].elem_bytes = kv_elem(&m->group[i], e);
    return 0;
}

/* The KV dtype from torch_dtype (or the newer "dtype"); bf16 when absent or
 * unknown (gpt-oss names none), which the notes record. */
static int read_dtype(struct cfg *c, struct kvt_model_desc *m)
{
    const char *canon = "bf16";
    int rc;
    const char *s = get_str(c, "torch_dtype", &rc);

    if (rc)
        return rc;
    if (!s && (s = get_str(c, "dtype", &rc)) == NULL && rc)
        return rc;
    m->elem_bytes = s ? dtype_bytes(s, &canon) : 0;
    if (!m->elem_bytes) {
        m->elem_bytes = BF16_BYTES;
        canon = "bf16";
        m->notes |= KVT_MODEL_NOTE_DTYPE_ASSUMED;
    }
    snprintf(m->config_dtype, sizeof(m->config_dtype), "%s", s ? s : "");
    snprintf(m->dtype, sizeof(m->dtype), "%s", canon);
    c->conv_elem = m->elem_bytes;
    return 0;
}

/* ---- which layer is what --------------------------------------------------- */

/*
 * Design note: configs describe their layer mix in five ways (SOURCES.md,
 * "Traps"). Each becomes a per-layer class; a layer is classified once and
 * counted, so the groups' layer counts always add up to num_hidden_layers.
 * The first form present wins, in this order: layer_types (explicit),
 * hybrid_override_pattern (Nemotron-H), attn_layer_period/offset (Jamba),
 * full_attention_interval (Qwen3-Next), then sliding_window with a pattern.
 */
struct plan {
    int how;            /* which of the forms below */
    json_t *types;      /* P_TYPES: the layer_types array */
    const char *pattern; /* P_HYBRID: the pattern string */
    uint32_t period, offset; /* P_PERIOD: attention at i % period == offset;
                                P_INTERVAL / P_SW_PATTERN: full at i % period ==
                                period - 1; P_SW_FROM: sliding from layer offset */
};

enum { P_ALL_FULL, P_ALL_SLIDING, P_TYPES, P_HYBRID, P_PERIOD, P_INTERVAL, P_SW_PATTERN,
       P_SW_FROM };

/* Class of an entry of layer_types, or -EINVAL naming it. */
static int class_of_type(struct cfg *c, json_t *t, uint32_t i)
{
    static const struct { const char *name; enum lclass cls; } tab[] = {
        {"full_attention", C_FULL},       {"attention", C_FULL},
        {"sliding_attention", C_SLIDING}, {"linear_attention", C_GDN},
        {"mamba", C_MAMBA2},              {"mamba2", C_MAMBA2},
    };
    const char *s = json_string_value(t);

    if (!s)
        return fail(c, "field 'layer_types[%u]' must be a string, found %s", i, type_name(t));
    for (size_t k = 0; k < sizeof(tab) / sizeof(tab[0]); k++)
        if (strcmp(s, tab[k].name) == 0)
            return tab[k].cls;
    return fail(c, "field 'layer_types[%u]': unknown layer type \"%s\"", i, s);
}

/* Class of a character of hybrid_override_pattern, or -EINVAL. */
static int class_of_char(struct cfg *c, char ch, uint32_t i)
{
    switch (ch) {
    case 'M': return C_MAMBA2;  /* Mamba2 mixer */
    case '*': return C_FULL;    /* attention */
    case '-': return C_NONE;    /* MLP only */
    case 'E': return C_NONE;    /* mixture of experts, no cache */
    default:
        return fail(c, "field 'hybrid_override_pattern': unknown layer '%c' at position %u",
                    ch, i);
    }
}

/* Class of layer i under plan p, or -EINVAL. */
static int classify(struct cfg *c, const struct plan *p, uint32_t i)
{
    switch (p->how) {
    case P_TYPES:
        return class_of_type(c, json_array_get(p->types, i), i);
    case P_HYBRID:
        return class_of_char(c, p->pattern[i], i);
    case P_PERIOD:
        return i % p->period == p->offset ? C_FULL : C_MAMBA1;
    case P_INTERVAL:
        return i % p->period == p->period - 1 ? C_FULL : C_GDN;
    case P_SW_PATTERN:
        return i % p->period == p->period - 1 ? C_FULL : C_SLIDING;
    case P_SW_FROM:
        return i >= p->offset ? C_SLIDING : C_FULL;
    case P_ALL_SLIDING:
        return C_SLIDING;
    default:
        return C_FULL;
    }
}

/* Default sliding pattern of model families whose configs leave it out:
 * Gemma 3 puts a full layer after every 5 sliding ones, Gemma 2 alternates. */
static uint32_t default_sw_pattern(const char *model_type)
{
    if (strncmp(model_type, "gemma3", 6) == 0)
        return 6;
    if (strncmp(model_type, "gemma2", 6) == 0)
        return 2;
    if (strcmp(model_type, "cohere2") == 0)
        return 4;
    return 0;
}

/* The sliding-window forms (no explicit layer list). *window is 0 when
 * sliding is off or absent. */
static int plan_sliding(struct cfg *c, const struct kvt_model_desc *m, struct plan *p,
                        uint32_t *window)
{
    int use = get_bool(c, "use_sliding_window");
    int rc;

    if (use < -1)
        return use;
    rc = get_u(c, "sliding_window", 0, 1, UINT32_MAX, window);
    if (rc < 0)
        return rc;
    if (rc == 1 || use == 0) {
        *window = 0;
        p->how = P_ALL_FULL;
        return rc == 1 ? 0 : 2; /* 2: a window was given but turned off */
    }
    rc = get_u(c, "sliding_window_pattern", 0, 1, LAYERS_MAX, &p->period);
    if (rc < 0)
        return rc;
    if (rc == 1)
        p->period = default_sw_pattern(m->model_type);
    if (p->period) {
        p->how = P_SW_PATTERN;
        return 0;
    }
    /* Qwen2-style: with the window on, layers from max_window_layers slide */
    rc = get_u(c, "max_window_layers", 0, 0, LAYERS_MAX, &p->offset);
    if (rc < 0)
        return rc;
    p->how = rc == 0 && use == 1 ? P_SW_FROM : P_ALL_SLIDING;
    return 0;
}

/* Choose how layers are classified (see the design note above). */
static int make_plan(struct cfg *c, struct kvt_model_desc *m, struct plan *p, uint32_t *window)
{
    const char *where;
    json_t *v;
    int rc;

    memset(p, 0, sizeof(*p));
    *window = 0;
    if ((v = field(c, "layer_types", &where)) != NULL) {
        if (!json_is_array(v))
            return fail(c, "field '%slayer_types' must be an array, found %s", where,
                        type_name(v));
        if (json_array_size(v) != m->num_layers)
            return fail(c, "field '%slayer_types' has %zu entries but num_hidden_layers is %u",
                        where, json_array_size(v), m->num_layers);
        p->how = P_TYPES;
        p->types = v;
        rc = get_u(c, "sliding_window", 0, 1, UINT32_MAX, window);
        return rc < 0 ? rc : 0;
    }
    if ((v = field(c, "hybrid_override_pattern", &where)) != NULL) {
        if (!json_is_string(v))
            return fail(c, "field '%shybrid_override_pattern' must be a string, found %s",
                        where, type_name(v));
        if (json_string_length(v) != m->num_layers)
            return fail(c, "field '%shybrid_override_pattern' has %zu layers but "
                        "num_hidden_layers is %u", where, json_string_length(v), m->num_layers);
        p->how = P_HYBRID;
        p->pattern = json_string_value(v);
        return 0;
    }
    if ((rc = get_u(c, "attn_layer_period", 0, 1, LAYERS_MAX, &p->period)) <= 0) {
        if (rc < 0)
            return rc;
        rc = get_u(c, "attn_layer_offset", 0, 0, p->period - 1, &p->offset);
        p->how = P_PERIOD;
        return rc < 0 ? rc : 0;
    }
    if ((rc = get_u(c, "full_attention_interval", 0, 1, LAYERS_MAX, &p->period)) <= 0) {
        p->how = P_INTERVAL;
        return rc;
    }
    rc = plan_sliding(c, m, p, window);
    if (rc == 2)
        m->notes |= KVT_MODEL_NOTE_WINDOW_UNUSED;
    return rc < 0 ? rc : 0;
}

/* ---- group shapes ------------------------------------------------------------ */

/* KV heads and head dim of ordinary attention layers. */
static int attn_shape(struct cfg *c, uint32_t *heads, uint32_t *dim)
{
    static const char *const dim_names[] = {"head_dim", "attention_head_dim", NULL};
    uint32_t q_heads = 0, hidden;
    int rc, have_q;

    have_q = get_u(c, "num_attention_heads", 0, 1, DIM_MAX, &q_heads);
    if (have_q < 0)
        return have_q;
    rc = get_u(c, "num_key_value_heads", 0, 1, DIM_MAX, heads);
    if (rc < 0)
        return rc;
    if (rc == 1) { /* no GQA field: multi-head attention, one KV head per query head */
        if (have_q == 1)
            return fail(c, "missing field 'num_key_value_heads' (or 'num_attention_heads')");
        *heads = q_heads;
    }
    rc = get_uint(c, dim_names, 0, 1, DIM_MAX, dim);
    if (rc <= 0)
        return rc;
    /* no explicit head dim: hidden_size / num_attention_heads */
    if (have_q == 1)
        return fail(c, "missing field 'head_dim' (or 'num_attention_heads' with 'hidden_size')");
    if ((rc = get_u(c, "hidden_size", 1, 1, UINT32_MAX, &hidden)) < 0)
        return fail(c, "missing field 'head_dim' (or a valid 'hidden_size')");
    if (hidden % q_heads)
        return fail(c, "missing field 'head_dim', and hidden_size %u is not a multiple of "
                    "num_attention_heads %u", hidden, q_heads);
    *dim = hidden / q_heads;
    return 0;
}

/* Bytes per element of the recurrent state: mamba_ssm_dtype (or its older
 * name) when the config gives one, else the config's dtype. */
static int ssm_elem(struct cfg *c, uint32_t *elem)
{
    static const char *const names[] = {"mamba_ssm_dtype", "mamba_ssm_cache_dtype"};
    const char *canon;

    *elem = c->conv_elem;
    for (size_t i = 0; i < 2; i++) {
        int rc;
        const char *s = get_str(c, names[i], &rc);

        if (rc)
            return rc;
        if (s) {
            if (!(*elem = dtype_bytes(s, &canon)))
                return fail(c, "field '%s': unknown dtype \"%s\"", names[i], s);
            return 0;
        }
    }
    return 0;
}

/* Read the required fields names[0..n) into v[]. */
static int get_all(struct cfg *c, const char *const *names, size_t n, uint32_t *v)
{
    for (size_t i = 0; i < n; i++) {
        int rc = get_u(c, names[i], 1, 1, DIM_MAX, &v[i]);

        if (rc < 0)
            return rc;
    }
    return 0;
}

/*
 * State bytes per layer and sequence, vLLM's layout (SOURCES.md): a conv
 * state of (kernel - 1) x conv_dim in the config dtype, plus the recurrent
 * state in the SSM dtype. Gated DeltaNet: conv_dim = 2 K heads x K dim +
 * V heads x V dim, recurrent V heads x K dim x V dim. Mamba2: conv_dim =
 * d_inner + 2 groups x d_state, recurrent heads x head dim x d_state.
 * Mamba1: conv_dim = d_inner = expand x hidden, recurrent d_inner x d_state.
 */
static int state_bytes(struct cfg *c, enum lclass cls, uint64_t *out)
{
    static const char *const gdn[] = {"linear_num_key_heads", "linear_key_head_dim",
                                      "linear_num_value_heads", "linear_value_head_dim",
                                      "linear_conv_kernel_dim"};
    static const char *const m1[] = {"mamba_expand", "hidden_size", "mamba_d_state",
                                     "mamba_d_conv"};
    static const char *const m2[][3] = {
        {"mamba_num_heads", "mamba_n_heads", NULL}, {"mamba_head_dim", "mamba_d_head", NULL},
        {"ssm_state_size", "mamba_d_state", NULL},  {"n_groups", "mamba_n_groups", NULL},
        {"conv_kernel", "mamba_d_conv", NULL},
    };
    uint64_t conv_dim, rec;
    uint32_t v[5], elem;
    int rc = ssm_elem(c, &elem);

    if (rc)
        return rc;
    if (cls == C_GDN) {
        if ((rc = get_all(c, gdn, 5, v)) < 0)
            return rc;
        conv_dim = 2ull * v[0] * v[1] + (uint64_t)v[2] * v[3];
        rec = (uint64_t)v[2] * v[1] * v[3];
    } else if (cls == C_MAMBA1) {
        if ((rc = get_all(c, m1, 4, v)) < 0)
            return rc;
        conv_dim = (uint64_t)v[0] * v[1];
        rec = conv_dim * v[2];
        v[4] = v[3];
    } else {
        for (int i = 0; i < 5; i++)
            if ((rc = get_uint(c, m2[i], 1, 1, DIM_MAX, &v[i])) < 0)
                return rc;
        conv_dim = (uint64_t)v[0] * v[1] + 2ull * v[3] * v[2];
        rec = (uint64_t)v[0] * v[1] * v[2];
    }
    *out = add_sat(mul_sat(mul_sat(v[4] - 1, conv_dim), c->conv_elem), mul_sat(rec, elem));
    return 0;
}

/* ---- building the description -------------------------------------------- */

static struct kvt_layer_group *add_group(struct kvt_model_desc *m, enum kvt_layer_kind kind,
                                         const char *name, uint32_t layers)
{
    struct kvt_layer_group *g = &m->group[m->n_groups++];

    memset(g, 0, sizeof(*g));
    g->kind = kind;
    g->name = name;
    g->layers = layers;
    return g;
}

/* The attention groups: MLA (+ indexer) when the config has kv_lora_rank,
 * else full and sliding GQA. */
static int attn_groups(struct cfg *c, struct kvt_model_desc *m, const uint32_t *count,
                       uint32_t window)
{
    struct kvt_layer_group *g;
    uint32_t heads = 0, dim = 0, rank = 0, rope, idx_dim;
    int rc;

    if ((rc = get_u(c, "kv_lora_rank", 0, 1, DIM_MAX, &rank)) < 0)
        return rc;
    if (rank && count[C_FULL]) {
        /* MLA caches one latent per token; num_key_value_heads is meaningless here */
        if ((rc = get_u(c, "qk_rope_head_dim", 1, 1, DIM_MAX, &rope)) < 0)
            return rc;
        g = add_group(m, KVT_LAYER_MLA, "mla", count[C_FULL]);
        g->kv_heads = 1;
        g->head_dim = rank + rope;
        g->n_kv = 1;
        if ((rc = get_u(c, "index_head_dim", 0, 1, DIM_MAX, &idx_dim)) < 0)
            return rc;
        if (rc == 0) {
            /* DeepSeek-V3.2's lightning indexer keeps a key per token, which
             * vLLM stores as FP8 bytes with a 4-byte scale per 128 values,
             * whatever the KV dtype (132 B per token and layer) */
            g = add_group(m, KVT_LAYER_INDEX, "indexer", count[C_FULL]);
            g->kv_heads = 1;
            g->head_dim = idx_dim + idx_dim / INDEX_QUANT_BLOCK * 4;
            g->n_kv = 1;
        }
    }
    if ((count[C_FULL] && !rank) || count[C_SLIDING]) {
        if ((rc = attn_shape(c, &heads, &dim)) < 0)
            return rc;
    }
    if (count[C_FULL] && !rank) {
        g = add_group(m, KVT_LAYER_FULL, "full_attention", count[C_FULL]);
        g->n_kv = 2;
        /* Gemma 4: global (full) layers have their own KV heads and head dim */
        if ((rc = get_u(c, "num_global_key_value_heads", 0, 1, DIM_MAX, &g->kv_heads)) < 0)
            return rc;
        if (rc == 1)
            g->kv_heads = heads;
        if ((rc = get_u(c, "global_head_dim", 0, 1, DIM_MAX, &g->head_dim)) < 0)
            return rc;
        if (rc == 1)
            g->head_dim = dim;
    }
    if (count[C_SLIDING]) {
        if (!window)
            return fail(c, "missing field 'sliding_window' (layers %u of %u are sliding)",
                        count[C_SLIDING], m->num_layers);
        g = add_group(m, KVT_LAYER_SLIDING, "sliding_attention", count[C_SLIDING]);
        g->kv_heads = heads;
        g->head_dim = dim;
        g->n_kv = 2;
        g->window = window;
    }
    return 0;
}

/* The STATE group (one formula per model) and the NONE group. */
static int other_groups(struct cfg *c, struct kvt_model_desc *m, const uint32_t *count)
{
    static const char *const names[C_COUNT] = {
        [C_GDN] = "gated_deltanet", [C_MAMBA2] = "mamba2", [C_MAMBA1] = "mamba1"};
    enum lclass cls = C_COUNT;
    struct kvt_layer_group *g;
    int rc;

    for (int k = C_GDN; k <= C_MAMBA1; k++) {
        if (!count[k])
            continue;
        if (cls != C_COUNT)
            return fail(c, "layers mix %s and %s state layers: not supported", names[cls],
                        names[k]);
        cls = (enum lclass)k;
    }
    if (cls != C_COUNT) {
        g = add_group(m, KVT_LAYER_STATE, names[cls], count[cls]);
        if ((rc = state_bytes(c, cls, &g->state_bytes)) < 0)
            return rc;
        m->notes |= KVT_MODEL_NOTE_STATE_EST;
    }
    if (count[C_NONE])
        add_group(m, KVT_LAYER_NONE, "mlp", count[C_NONE]);
    return 0;
}

/* Top-level facts: type, dtype, layer count, context length, notes. */
static int read_basics(struct cfg *c, struct kvt_model_desc *m)
{
    uint32_t v;
    int rc;
    const char *s = get_str(c, "model_type", &rc);

    if (rc)
        return rc;
    snprintf(m->model_type, sizeof(m->model_type), "%s", s ? s : "");
    if ((rc = read_dtype(c, m)) < 0)
        return rc;
    if ((rc = get_u(c, "num_hidden_layers", 1, 1, LAYERS_MAX, &m->num_layers)) < 0)
        return rc;
    if ((rc = get_u(c, "max_position_embeddings", 0, 1, UINT32_MAX, &m->max_model_len)) < 0)
        return rc;
    /* DeepSeek's and Qwen's multi-token-prediction layers are not in the count */
    for (int i = 0; i < 2; i++) {
        rc = get_u(c, i ? "mtp_num_hidden_layers" : "num_nextn_predict_layers", 0, 0,
                   LAYERS_MAX, &v);
        if (rc < 0)
            return rc;
        if (rc == 0 && v > 0)
            m->notes |= KVT_MODEL_NOTE_MTP;
    }
    rc = get_bool(c, "attention_k_eq_v");
    if (rc == 1)
        m->notes |= KVT_MODEL_NOTE_K_EQ_V;
    return rc < -1 ? rc : 0;
}

/* Fill m from a parsed config object. */
static int describe(struct cfg *c, struct kvt_model_desc *m)
{
    uint32_t count[C_COUNT] = {0}, window;
    struct plan p;
    int rc;

    if ((rc = read_basics(c, m)) < 0)
        return rc;
    if ((rc = make_plan(c, m, &p, &window)) < 0)
        return rc;
    for (uint32_t i = 0; i < m->num_layers; i++) {
        int cls = classify(c, &p, i);

        if (cls < 0)
            return cls;
        count[cls]++;
    }
    if ((rc = attn_groups(c, m, count, window)) < 0)
        return rc;
    if ((rc = other_groups(c, m, count)) < 0)
        return rc;
    for (uint32_t i = 0; i < m->n_groups; i++)
        m->group[i].elem_bytes = m->group[i].n_kv ? kv_elem(&m->group[i], m->elem_bytes) : 0;
    return 0;
}

/* ---- reading the text ------------------------------------------------------- */

static int word_char(char ch)
{
    return (ch >= '0' && ch <= '9') || (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') ||
           ch == '_';
}

/*
 * Python's json module writes float('inf') as Infinity and nan as NaN
 * (Nemotron-H-56B's time_step_limit), which strict JSON, and so jansson,
 * refuses. Copy text with those bare words, outside strings, replaced by
 * 1e308 (so -Infinity becomes -1e308) and null. No newline moves, so
 * jansson's line numbers still match the file. Returns a malloc'd copy
 * (NUL-terminated, *n bytes) or NULL when out of memory.
 */
static char *sanitize(const char *s, size_t len, size_t *n)
{
    char *o;
    int in_str = 0, esc = 0;

    if (len > SIZE_MAX / 2 - 2 || !(o = malloc(len + len / 3 + 2)))
        return NULL;
    *n = 0;
    for (size_t i = 0; i < len; i++) {
        char prev = i ? s[i - 1] : ' ';

        if (in_str) {
            in_str = esc || s[i] != '"';
            esc = !esc && s[i] == '\\';
        } else if (s[i] == '"') {
            in_str = 1;
        } else if (!word_char(prev) && len - i >= 8 && memcmp(s + i, "Infinity", 8) == 0 &&
                   (len - i == 8 || !word_char(s[i + 8]))) {
            memcpy(o + *n, "1e308", 5); /* 8 bytes become 5 */
            *n += 5;
            i += 7;
            continue;
        } else if (!word_char(prev) && len - i >= 3 && memcmp(s + i, "NaN", 3) == 0 &&
                   (len - i == 3 || !word_char(s[i + 3]))) {
            memcpy(o + *n, "null", 4); /* 3 bytes become 4: len / 3 extra at most */
            *n += 4;
            i += 2;
            continue;
        }
        o[(*n)++] = s[i];
    }
    o[*n] = '\0';
    return o;
}

int kvt_model_parse_json(const char *text, size_t len, struct kvt_model_desc *out, char *err,
                         size_t err_cap)
{
    struct cfg c = {.err = err, .cap = err_cap};
    json_error_t jerr;
    size_t n;
    char *buf;
    int rc;

    if (err_cap)
        err[0] = '\0';
    if (!out || (!text && len))
        return fail(&c, "no config given");
    memset(out, 0, sizeof(*out));
    if (!(buf = sanitize(text ? text : "", len, &n))) {
        fail(&c, "out of memory");
        return -ENOMEM;
    }
    /* any value decodes, so that a non-object gets our own clear message */
    c.root = json_loadb(buf, n, JSON_DECODE_ANY, &jerr);
    free(buf);
    if (!c.root)
        return fail(&c, "invalid JSON at line %d, column %d: %s", jerr.line, jerr.column,
                    jerr.text);
    if (!json_is_object(c.root)) {
        rc = fail(&c, "the config must be a JSON object, found %s", type_name(c.root));
        goto out_decref;
    }
    c.text = json_object_get(c.root, "text_config");
    if (!json_is_object(c.text))
        c.text = NULL;
    rc = describe(&c, out);
out_decref:
    json_decref(c.root);
    return rc;
}

/* Read a whole file (up to FILE_MAX) into a malloc'd buffer. */
static int slurp(const char *path, char **buf, size_t *len)
{
    struct stat st;
    ssize_t r;
    size_t n = 0;
    int rc, fd = open(path, O_RDONLY | O_CLOEXEC);

    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        goto out_close;
    }
    rc = -EFBIG;
    if (st.st_size > FILE_MAX)
        goto out_close;
    rc = -ENOMEM;
    if (!(*buf = malloc((size_t)st.st_size + 1)))
        goto out_close;
    /* a regular file's size is known; read until it is all in or EOF */
    while (n < (size_t)st.st_size && (r = read(fd, *buf + n, (size_t)st.st_size - n)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0) {
            rc = -errno;
            free(*buf);
            goto out_close;
        }
        n += (size_t)r;
    }
    *len = n;
    rc = 0;
out_close:
    close(fd);
    return rc;
}

int kvt_model_parse_file(const char *path, struct kvt_model_desc *out, char *err,
                         size_t err_cap)
{
    char *buf = NULL;
    size_t len = 0;
    int rc;

    if (!path) {
        if (err_cap)
            snprintf(err, err_cap, "no config path given");
        return -EINVAL;
    }
    rc = slurp(path, &buf, &len);
    if (rc < 0) {
        if (err_cap)
            snprintf(err, err_cap, "cannot read %s: %s", path,
                     rc == -EFBIG ? "larger than 16 MiB" : strerror(-rc));
        return rc;
    }
    rc = kvt_model_parse_json(buf, len, out, err, err_cap);
    free(buf);
    return rc;
}
