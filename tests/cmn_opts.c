/* SPDX-License-Identifier: MIT */
/*
 * cmn_opts.c - command-line options against a table (common/opt.c): each
 * kind's value is checked and handed over, operands stay where getopt
 * leaves them, and every refusal says which option and why.
 */
#include <criterion/criterion.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "kvt_common.h"

static const struct cmn_opt tab[] = {
    { "json", 'j', CMN_OPT_FLAG, 0, 0, 0, 0, false },
    { "socket", 's', CMN_OPT_TEXT, 0, 0, 0, 0, false },
    { "count", 'n', CMN_OPT_UINT, 1, 64, 0, 0, false },
    { "bytes", 'b', CMN_OPT_SIZE, 4096, 0, 0, 0, false },
    { "interval", 'i', CMN_OPT_REAL, 0, 0, 0.05, 3600, false },
    { "help", 'h', CMN_OPT_FLAG, 0, 0, 0, 0, true },
    { NULL },
};

/* The walk of argv (NULL-terminated) up to its first bad option or its
 * end: the last return, p's state then. */
static int walk(struct cmn_opts *p, char **argv, int *seen)
{
    int argc = 0, c;

    while (argv[argc])
        argc++;
    cmn_opts_init(p, tab);
    *seen = 0;
    while ((c = cmn_opts_next(p, argc, argv)) != -1 && c != CMN_OPTS_BAD)
        (*seen)++;
    return c;
}

Test(cmn_opts, each_kind_hands_over_its_checked_value)
{
    char *argv[] = { "prog", "--json", "--socket", "/s", "--count", "64", "--bytes", "1M",
                     "--interval=0.5", "-h", "op1", "op2", NULL };
    int argc = 12, c, seen = 0;
    struct cmn_opts p;

    cmn_opts_init(&p, tab);
    while ((c = cmn_opts_next(&p, argc, argv)) != -1) {
        seen++;
        switch (c) {
        case 'j': cr_expect_null(p.arg); break;
        case 's': cr_expect_str_eq(p.arg, "/s"); break;
        case 'n': cr_expect_eq(p.u, 64); break;
        case 'b': cr_expect_eq(p.u, 1u << 20); break;
        case 'i': cr_expect_float_eq(p.d, 0.5, 1e-12); break;
        case 'h': break;
        default: cr_assert_fail("unexpected %d: %s", c, p.err);
        }
    }
    cr_expect_eq(seen, 6);
    cr_expect_eq(optind, 10, "operands start at argv[%d]", optind);
    cr_expect_str_eq(argv[optind], "op1");
}

Test(cmn_opts, refusals_name_the_option_and_the_rule)
{
    static const struct {
        char *argv[4];
        const char *err;
    } bad[] = {
        { { "prog", "--bogus", NULL }, "unknown option '--bogus'" },
        { { "prog", "-x", NULL }, "unknown option '-x'" },
        { { "prog", "--count", NULL }, "option '--count' needs a value" },
        { { "prog", "--count", "0", NULL }, "--count '0': want a whole number from 1 to 64" },
        { { "prog", "--count", "65", NULL }, "--count '65': want a whole number from 1 to 64" },
        { { "prog", "--count", "+3", NULL }, "--count '+3': want a whole number from 1 to 64" },
        { { "prog", "--bytes", "1Q", NULL }, "--bytes '1Q': want bytes" },
        { { "prog", "--bytes", "4095", NULL }, "--bytes '4095': want at least 4096 bytes" },
        { { "prog", "--interval", "0", NULL }, "--interval '0': want a number from 0.05 to 3600" },
        { { "prog", "--interval", "inf", NULL }, "--interval 'inf': want a number" },
        { { "prog", "--interval", " 1", NULL }, "--interval ' 1': want a number" },
        { { "prog", "--interval", ".", NULL }, "--interval '.': want a number" },
        { { "prog", "--json=1", NULL }, "unknown option '--json=1'" },
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        struct cmn_opts p;
        int seen, c = walk(&p, (char **)bad[i].argv, &seen);

        cr_expect_eq(c, CMN_OPTS_BAD, "%s %s: accepted", bad[i].argv[1],
                     bad[i].argv[2] ? bad[i].argv[2] : "");
        cr_expect(!strncmp(p.err, bad[i].err, strlen(bad[i].err)), "%s: '%s', not '%s...'",
                  bad[i].argv[1], p.err, bad[i].err);
    }
}

Test(cmn_opts, a_second_walk_starts_afresh)
{
    char *a[] = { "prog", "--count", "3", "x", NULL };
    char *b[] = { "prog", "--count", "5", NULL };
    struct cmn_opts p;
    int seen;

    cr_assert_eq(walk(&p, a, &seen), -1);
    cr_expect_eq(seen, 1);
    cr_expect_eq(optind, 3);
    cr_assert_eq(walk(&p, b, &seen), -1);
    cr_expect_eq(p.u, 5, "the second walk's value: %llu", (unsigned long long)p.u);
    cr_expect_eq(optind, 3);
}
