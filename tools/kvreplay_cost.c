/* SPDX-License-Identifier: MIT */
/*
 * kvreplay_cost.c - the cost model: what cache hits save on an API bill and
 * in prefill GPU time, and what the RAM and NVMe holding them cost.
 *
 * Deliberately first-order: prefill is 2 x parameters FLOPs per token at a
 * fixed fraction of the GPU's peak (the attention term, which grows with
 * context, is left out, so GPU savings are a lower bound), and reading a
 * cached block back is taken as free. Prices come from built-in defaults, a
 * preset in a JSON file (tools/kvreplay_prices.json) and flags, in that
 * order.
 */
#include <errno.h>
#include <jansson.h>
#include <math.h>
#include <stddef.h>
#include <stdio.h>
#include <string.h>

#include "kvreplay.h"

void kvr_prices_default(struct kvr_prices *p)
{
    *p = (struct kvr_prices){
        /* an API that bills cached input at 1/50 of uncached input */
        .miss_mtok = 2.50, .hit_mtok = 0.05,
        /* Llama-3.1-8B on one H100 SXM: 989 TFLOP/s dense BF16, half of it
         * reached by prefill, at a typical on-demand price per GPU-hour */
        .params = 8e9, .gpu_flops = 989e12, .mfu = 0.5, .gpu_hour = 3.00,
        /* RAM: roughly what memory-optimised cloud instances charge per GiB
         * (with their share of CPU); NVMe: about $0.08 per GiB-month */
        .ram_gib_hour = 0.004, .nvme_gib_hour = 0.0001,
    };
    snprintf(p->preset, sizeof(p->preset), "built-in");
}

/* The members a preset may set, and where each goes. */
static double *member(struct kvr_prices *p, const char *name)
{
    static const struct {
        const char *name;
        size_t off;
    } map[] = {
        {"price_miss", offsetof(struct kvr_prices, miss_mtok)},
        {"price_hit", offsetof(struct kvr_prices, hit_mtok)},
        {"params", offsetof(struct kvr_prices, params)},
        {"gpu_flops", offsetof(struct kvr_prices, gpu_flops)},
        {"mfu", offsetof(struct kvr_prices, mfu)},
        {"gpu_price_hour", offsetof(struct kvr_prices, gpu_hour)},
        {"ram_price_gib_hour", offsetof(struct kvr_prices, ram_gib_hour)},
        {"nvme_price_gib_hour", offsetof(struct kvr_prices, nvme_gib_hour)},
    };

    for (size_t i = 0; i < sizeof(map) / sizeof(map[0]); i++)
        if (strcmp(map[i].name, name) == 0)
            return (double *)((char *)p + map[i].off);
    return NULL;
}

/* Apply one preset object over *p: 0 or -EINVAL with why. */
static int apply_preset(json_t *preset, const char *pname, struct kvr_prices *p, char *why,
                        size_t cap)
{
    struct kvr_prices q = *p; /* all or nothing */
    const char *k;
    json_t *v;

    if (!json_is_object(preset)) {
        snprintf(why, cap, "preset \"%s\" is not an object", pname);
        return -EINVAL;
    }
    json_object_foreach(preset, k, v) {
        double *dst = member(&q, k);

        if (strcmp(k, "note") == 0)
            continue; /* free text for the reader */
        if (!dst) {
            snprintf(why, cap, "preset \"%s\": unknown member \"%s\"", pname, k);
            return -EINVAL;
        }
        if (!json_is_number(v) || !isfinite(json_number_value(v)) || json_number_value(v) < 0) {
            snprintf(why, cap, "preset \"%s\": \"%s\" is not a non-negative number", pname, k);
            return -EINVAL;
        }
        *dst = json_number_value(v);
    }
    snprintf(q.preset, sizeof(q.preset), "%s", pname);
    *p = q;
    return 0;
}

int kvr_prices_load(const char *path, const char *name, struct kvr_prices *p, char *err,
                    size_t errcap)
{
    json_error_t jerr;
    json_t *root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr), *presets, *pre;
    char why[200];
    int rc = -EINVAL;

    if (!root) {
        /* jansson does not keep errno: tell a missing file from bad JSON */
        FILE *f = fopen(path, "r");

        if (!f) {
            rc = -errno;
            snprintf(err, errcap, "%s: %s", path, strerror(errno));
            return rc;
        }
        fclose(f);
        snprintf(err, errcap, "%s:%d: not valid JSON: %s", path, jerr.line, jerr.text);
        return -EINVAL;
    }
    presets = json_object_get(root, "presets");
    if (!json_is_object(presets)) {
        snprintf(err, errcap, "%s: no \"presets\" object", path);
        goto out;
    }
    if (!name) {
        name = json_string_value(json_object_get(root, "default"));
        if (!name) {
            snprintf(err, errcap, "%s: no --preset given and no \"default\" string", path);
            goto out;
        }
    }
    pre = json_object_get(presets, name);
    if (!pre) {
        snprintf(err, errcap, "%s: no preset \"%s\"", path, name);
        goto out;
    }
    rc = apply_preset(pre, name, p, why, sizeof(why));
    if (rc < 0)
        snprintf(err, errcap, "%s: %s", path, why);
out:
    json_decref(root);
    return rc;
}

int kvr_prices_check(const struct kvr_prices *p, char *err, size_t errcap)
{
    const double v[] = { p->miss_mtok, p->hit_mtok, p->params, p->gpu_flops, p->mfu,
                         p->gpu_hour, p->ram_gib_hour, p->nvme_gib_hour };

    for (size_t i = 0; i < sizeof(v) / sizeof(v[0]); i++)
        if (!isfinite(v[i]) || v[i] < 0) {
            snprintf(err, errcap, "prices must be finite and non-negative");
            return -EINVAL;
        }
    if (p->gpu_flops <= 0 || p->mfu <= 0 || p->mfu > 1) {
        snprintf(err, errcap, "--gpu-flops must be > 0 and --mfu in (0, 1]");
        return -EINVAL;
    }
    return 0;
}

void kvr_cost_compute(const struct kvr_prices *p, double hit_tokens, double miss_tokens,
                      double hours, double ram_bytes, double nvme_bytes, struct kvr_cost *c)
{
    double all = hit_tokens + miss_tokens;
    double flops_s = p->gpu_flops * p->mfu; /* prefill throughput, FLOP/s */

    memset(c, 0, sizeof(*c));
    c->hours = hours;
    c->hit_tokens = hit_tokens;
    c->miss_tokens = miss_tokens;
    c->api_nocache = all / 1e6 * p->miss_mtok;
    c->api_cache = hit_tokens / 1e6 * p->hit_mtok + miss_tokens / 1e6 * p->miss_mtok;
    c->gpu_h_nocache = 2.0 * p->params * all / flops_s / 3600.0;
    c->gpu_h_cache = 2.0 * p->params * miss_tokens / flops_s / 3600.0;
    c->gpu_nocache = c->gpu_h_nocache * p->gpu_hour;
    c->gpu_cache = c->gpu_h_cache * p->gpu_hour;
    c->ram_gib = ram_bytes / (double)(1ull << 30);
    c->nvme_gib = nvme_bytes / (double)(1ull << 30);
    c->ram_cost = c->ram_gib * p->ram_gib_hour * hours;
    c->nvme_cost = c->nvme_gib * p->nvme_gib_hour * hours;
    c->net_saved = (c->gpu_nocache - c->gpu_cache) - c->ram_cost - c->nvme_cost;
}
