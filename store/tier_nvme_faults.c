/* SPDX-License-Identifier: MIT */
/*
 * tier_nvme_faults.c - the cold tier's fault injector's rules: parsing a
 * KVTIER_FAULTS spec (the grammar: tier_nvme.h) and deciding, submission by
 * submission, which one fails. KVT_FAULTS builds only; tier_nvme.c turns a
 * decision into a failed or short I/O.
 */
#ifdef KVT_FAULTS
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tier_nvme.h"
#include "tier_nvme_int.h"

/* Next field of *p up to sep (cut there); NULL once the text is used up.
 * Unlike strtok, an empty field comes back empty, so "read::eio" is an error. */
static char *field(char **p, char sep)
{
    char *start = *p, *end;

    if (!start)
        return NULL;
    end = strchr(start, sep);
    if (end) {
        *end = '\0';
        *p = end + 1;
    } else {
        *p = NULL;
    }
    return start;
}

static bool parse_u64(const char *s, uint64_t *out)
{
    char *end;

    if (*s < '0' || *s > '9') /* strtoull would take "-1" and " 1" */
        return false;
    errno = 0;
    *out = strtoull(s, &end, 10);
    return errno == 0 && *end == '\0';
}

/* One rule OP:KIND[:SEL]... into *r; false with the reason in why. */
static bool parse_rule(char *txt, struct fault_rule *r, char *why, size_t cap)
{
    enum { S_EVERY = 1, S_AFTER = 2, S_ONCE = 4, S_P = 8, S_SEED = 16 };
    const char *op = field(&txt, ':'), *kind = field(&txt, ':');
    uint64_t seed = 1;
    unsigned got = 0;
    char *sel, *end;

    *r = (struct fault_rule){ .every = 1, .p = 1.0 };
    if (!strcmp(op, "read")) {
        r->op = NVME_OP_READ;
    } else if (!strcmp(op, "write")) {
        r->op = NVME_OP_WRITE;
    } else if (!strcmp(op, "fsync")) {
        r->op = NVME_OP_SYNC;
    } else if (!strcmp(op, "isync")) {
        r->op = NVME_OP_ISYNC;
    } else {
        snprintf(why, cap, "unknown operation '%s' (read, write, fsync, isync)", op);
        return false;
    }
    if (!kind) {
        snprintf(why, cap, "no kind after '%s' (eio, enospc, short)", op);
        return false;
    }
    if (!strcmp(kind, "eio")) {
        r->err = -EIO;
    } else if (!strcmp(kind, "enospc")) {
        r->err = -ENOSPC;
    } else if (!strcmp(kind, "short")) {
        r->err = 0;
        if (r->op == NVME_OP_SYNC || r->op == NVME_OP_ISYNC) {
            snprintf(why, cap, "%s cannot be short (eio, enospc)", op);
            return false;
        }
    } else {
        snprintf(why, cap, "unknown kind '%s' (eio, enospc, short)", kind);
        return false;
    }
    while ((sel = field(&txt, ':'))) {
        unsigned bit;
        bool ok;

        if (!strncmp(sel, "every=", 6)) {
            bit = S_EVERY;
            ok = parse_u64(sel + 6, &r->every) && r->every >= 1;
        } else if (!strncmp(sel, "after=", 6)) {
            bit = S_AFTER;
            ok = parse_u64(sel + 6, &r->after);
        } else if (!strcmp(sel, "once")) {
            bit = S_ONCE;
            r->once = true;
            ok = true;
        } else if (!strncmp(sel, "p=", 2)) {
            bit = S_P;
            errno = 0;
            r->p = strtod(sel + 2, &end);
            ok = sel[2] && errno == 0 && *end == '\0' && isfinite(r->p) && r->p > 0 &&
                 r->p <= 1;
        } else if (!strncmp(sel, "seed=", 5)) {
            bit = S_SEED;
            ok = parse_u64(sel + 5, &seed);
        } else {
            snprintf(why, cap, "unknown selector '%s' (every=N, after=N, once, p=F, seed=S)",
                     sel);
            return false;
        }
        if (!ok) {
            snprintf(why, cap, "bad value in '%s' (every=N >= 1, after=N >= 0, "
                               "0 < p=F <= 1, seed=S >= 0)", sel);
            return false;
        }
        if (got & bit) {
            snprintf(why, cap, "'%s' repeats a selector", sel);
            return false;
        }
        got |= bit;
    }
    r->rng = seed;
    return true;
}

int tier_nvme_faults_parse(const char *spec, struct faults *out, char *why, size_t cap)
{
    char buf[FAULT_SPEC_MAX], one[FAULT_SPEC_MAX], reason[192];
    struct faults f = { 0 };
    char *rest = buf, *rule;

    if (spec && strlen(spec) >= sizeof(buf)) {
        snprintf(why, cap, "%s: longer than %u characters", TIER_NVME_FAULTS_ENV,
                 FAULT_SPEC_MAX - 1);
        return -EINVAL;
    }
    if (!spec || !*spec) {
        *out = f;
        return 0;
    }
    memcpy(buf, spec, strlen(spec) + 1);
    while ((rule = field(&rest, ','))) {
        snprintf(one, sizeof(one), "%s", rule);
        if (f.n == FAULT_RULES) {
            snprintf(why, cap, "%s: more than %u rules", TIER_NVME_FAULTS_ENV, FAULT_RULES);
            return -EINVAL;
        }
        if (!*rule) {
            snprintf(why, cap, "%s: an empty rule in \"%.200s\" (rules are separated by ',')",
                     TIER_NVME_FAULTS_ENV, spec);
            return -EINVAL;
        }
        if (!parse_rule(rule, &f.rule[f.n], reason, sizeof(reason))) {
            snprintf(why, cap, "%s: rule %u \"%.160s\": %s; the grammar is "
                               "OP:KIND[:SEL]... (tier_nvme.h)",
                     TIER_NVME_FAULTS_ENV, f.n + 1, one, reason);
            return -EINVAL;
        }
        f.n++;
    }
    *out = f;
    return 0;
}

/* splitmix64: small, and a seed replays the same faults */
static uint64_t mix(uint64_t *s)
{
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

bool tier_nvme_fault_pick(struct faults *f, uint8_t op, int32_t *err)
{
    uint64_t k;

    if (f->n == 0)
        return false;
    k = ++f->seen[op];
    for (unsigned i = 0; i < f->n; i++) {
        struct fault_rule *r = &f->rule[i];

        if (r->op != op || k <= r->after || (k - r->after) % r->every || (r->once && r->fired))
            continue;
        /* 53 random bits as a double in [0, 1) */
        if (r->p < 1 && (double)(mix(&r->rng) >> 11) * 0x1p-53 >= r->p)
            continue;
        r->fired = true;
        f->injected++;
        *err = r->err;
        return true;
    }
    return false;
}
#else
/* ISO C wants something in a translation unit */
typedef int tier_nvme_faults_none;
#endif /* KVT_FAULTS */
