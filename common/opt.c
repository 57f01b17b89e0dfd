/* SPDX-License-Identifier: MIT */
/*
 * opt.c - command-line options against a table (kvt_common.h): getopt_long
 * walks argv, and each option's value is checked here by its kind (a count
 * in bounds, a size, a number in bounds), so that every tool refuses bad
 * values in the same words. It says what is wrong; the caller prints it.
 */
#include <errno.h>
#include <getopt.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvt_common.h"

void cmn_opts_init(struct cmn_opts *p, const struct cmn_opt *tab)
{
    *p = (struct cmn_opts){ .tab = tab };
    optind = 1;
}

static const struct cmn_opt *by_key(const struct cmn_opt *tab, int key)
{
    for (; tab->name; tab++)
        if (tab->key == key)
            return tab;
    return NULL;
}

/* A decimal number: digits, then optionally '.' and digits; nothing else
 * (strtod alone would take spaces, signs, hex, "inf" and "nan"). */
static int parse_real(const char *s, double *out)
{
    const char *c = s;
    char *end;

    while (*c >= '0' && *c <= '9')
        c++;
    if (*c == '.')
        c++;
    while (*c >= '0' && *c <= '9')
        c++;
    if (c == s || *c || (c == s + 1 && *s == '.'))
        return -EINVAL;
    *out = strtod(s, &end);
    return end == c ? 0 : -EINVAL;
}

/* Check the value of option o (in p->arg) by its kind: 0, or -EINVAL with
 * p->err set. */
static int check(struct cmn_opts *p, const struct cmn_opt *o)
{
    const char *a = p->arg;
    int rc;

    switch (o->kind) {
    case CMN_OPT_UINT:
        if (cmn_parse_uint(a, o->min, o->max, &p->u) == 0)
            return 0;
        snprintf(p->err, sizeof(p->err), "--%s '%s': want a whole number from %llu to %llu", o->name,
                 a, (unsigned long long)o->min, (unsigned long long)o->max);
        return -EINVAL;
    case CMN_OPT_SIZE:
        if ((rc = cmn_parse_size(a, &p->u)) < 0) {
            snprintf(p->err, sizeof(p->err), "--%s '%s': %s", o->name, a, cmn_size_why(rc));
            return -EINVAL;
        }
        if (p->u >= o->min)
            return 0;
        snprintf(p->err, sizeof(p->err), "--%s '%s': want at least %llu bytes", o->name, a,
                 (unsigned long long)o->min);
        return -EINVAL;
    case CMN_OPT_REAL:
        if (parse_real(a, &p->d) == 0 && p->d >= o->lo && p->d <= o->hi)
            return 0;
        snprintf(p->err, sizeof(p->err), "--%s '%s': want a number from %g to %g", o->name, a,
                 o->lo, o->hi);
        return -EINVAL;
    default:
        return 0; /* FLAG, TEXT: anything goes */
    }
}

int cmn_opts_next(struct cmn_opts *p, int argc, char *const argv[])
{
    struct option lo[CMN_OPTS_MAX + 1];
    char shorts[2 + 2 * CMN_OPTS_MAX + 1] = ":"; /* ':': a missing value is ':', not '?' */
    size_t n = 0, ns = 1;
    const struct cmn_opt *o;
    int c;

    /* getopt_long's tables, made afresh each call (it keeps no pointer into
     * them between calls): O(table), a few dozen entries */
    for (o = p->tab; o->name && n < CMN_OPTS_MAX; o++, n++) {
        lo[n] = (struct option){ o->name, o->kind == CMN_OPT_FLAG ? no_argument
                                                                  : required_argument,
                                 NULL, o->key };
        if (o->letter) {
            shorts[ns++] = (char)o->key;
            if (o->kind != CMN_OPT_FLAG)
                shorts[ns++] = ':';
        }
    }
    lo[n] = (struct option){ 0 };
    shorts[ns] = '\0';
    opterr = 0; /* getopt prints nothing: p->err says it */
    p->arg = NULL;
    p->err[0] = '\0';
    c = getopt_long(argc, argv, shorts, lo, NULL);
    if (c == -1)
        return -1;
    if (c == ':' || c == '?') {
        snprintf(p->err, sizeof(p->err), c == ':' ? "option '%s' needs a value"
                                                  : "unknown option '%s'",
                 argv[optind - 1]);
        return CMN_OPTS_BAD;
    }
    o = by_key(p->tab, c);
    p->arg = optarg;
    return check(p, o) == 0 ? c : CMN_OPTS_BAD; /* o: getopt returns only the table's keys */
}
