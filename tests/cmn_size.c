/* SPDX-License-Identifier: MIT */
/*
 * cmn_size.c - the one size grammar (common/size.c) that every option and
 * config key taking bytes parses: what it accepts, exactly, and what it
 * refuses, with which error.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <stdint.h>

#include "kvt_common.h"

static const struct {
    const char *text;
    uint64_t bytes;
} good[] = {
    { "0", 0 },          { "4096", 4096 },        { "4096B", 4096 },
    { "64k", 64 << 10 }, { "64K", 64 << 10 },     { "64KiB", 64 << 10 },
    { "64KB", 64 << 10 }, { "512M", 512ull << 20 }, { "1Gi", 1ull << 30 },
    { "8GiB", 8ull << 30 }, { "2t", 2ull << 40 },  { "1P", 1ull << 50 },
    { "1.5K", 1536 },    { "1.5T", 3ull << 39 },  { "0.25M", 256 << 10 },
    { "2.0", 2 },        { "9223372036854775807", INT64_MAX },
    { "8191P", 8191ull << 50 },
};

Test(cmn_size, accepts_the_grammar)
{
    for (size_t i = 0; i < sizeof(good) / sizeof(good[0]); i++) {
        uint64_t v = 1;
        int rc = cmn_parse_size(good[i].text, &v);

        cr_expect_eq(rc, 0, "'%s': expected 0, got %d", good[i].text, rc);
        cr_expect_eq(v, good[i].bytes, "'%s': expected %llu bytes, got %llu", good[i].text,
                     (unsigned long long)good[i].bytes, (unsigned long long)v);
    }
}

static const struct {
    const char *text;
    int rc;
} bad[] = {
    { "", -EINVAL },       { "M", -EINVAL },     { "-1", -EINVAL },     { "+1", -EINVAL },
    { " 1", -EINVAL },     { "1 ", -EINVAL },    { "12Q", -EINVAL },    { "1MM", -EINVAL },
    { "1iB", -EINVAL },    { "1.5", -EINVAL },   { "0.3K", -EINVAL },   { "1.", -EINVAL },
    { ".5K", -EINVAL },    { "1e3", -EINVAL },   { "0x10", -EINVAL },   { "1Bi", -EINVAL },
    { "9223372036854775808", -ERANGE },          { "8192P", -ERANGE },
    { "99999999999999999999999", -ERANGE },      { "16E", -EINVAL },
};

Test(cmn_size, refuses_what_is_outside_it)
{
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        uint64_t v = 77;
        int rc = cmn_parse_size(bad[i].text, &v);

        cr_expect_eq(rc, bad[i].rc, "'%s': expected %d, got %d", bad[i].text, bad[i].rc, rc);
        cr_expect_eq(v, 77, "'%s': *out changed on an error", bad[i].text);
    }
    cr_expect_eq(cmn_parse_size(NULL, &(uint64_t){ 0 }), -EINVAL);
}

Test(cmn_size, says_why)
{
    cr_expect(strstr(cmn_size_why(-EINVAL), "1.5G") != NULL, "%s", cmn_size_why(-EINVAL));
    cr_expect(strstr(cmn_size_why(-ERANGE), "too large") != NULL, "%s", cmn_size_why(-ERANGE));
}

Test(cmn_size, counts_are_plain_decimals_within_bounds)
{
    uint64_t v = 5;

    cr_expect_eq(cmn_parse_uint("4096", 1, 4096, &v), 0);
    cr_expect_eq(v, 4096);
    cr_expect_eq(cmn_parse_uint("0", 0, 0, &v), 0);
    cr_expect_eq(v, 0);
    cr_expect_eq(cmn_parse_uint("18446744073709551615", 0, UINT64_MAX, &v), 0);
    cr_expect_eq(v, UINT64_MAX);
    v = 5;
    cr_expect_eq(cmn_parse_uint("4097", 1, 4096, &v), -ERANGE);
    cr_expect_eq(cmn_parse_uint("0", 1, 4096, &v), -ERANGE);
    cr_expect_eq(cmn_parse_uint("18446744073709551616", 0, UINT64_MAX, &v), -ERANGE);
    cr_expect_eq(cmn_parse_uint("", 0, 9, &v), -EINVAL);
    cr_expect_eq(cmn_parse_uint("-1", 0, 9, &v), -EINVAL);
    cr_expect_eq(cmn_parse_uint("+1", 0, 9, &v), -EINVAL);
    cr_expect_eq(cmn_parse_uint("1K", 0, 9999, &v), -EINVAL);
    cr_expect_eq(cmn_parse_uint("0x1", 0, 9, &v), -EINVAL);
    cr_expect_eq(cmn_parse_uint("1 ", 0, 9, &v), -EINVAL);
    cr_expect_eq(v, 5, "*out changed on an error");
}
