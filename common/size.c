/* SPDX-License-Identifier: MIT */
/*
 * size.c - the one size grammar (kvt_common.h): "4096", "64K", "8GiB",
 * "1.5T"; and plain counts within bounds. Exact integer arithmetic, no
 * floating point: a size near 2^63 parses to the byte it names, or is
 * refused.
 */
#include <errno.h>
#include <string.h>

#include "kvt_common.h"

#define MAX_FRAC_DIGITS 18 /* 10^18 < 2^63: the fraction's numerator never overflows */

int cmn_parse_size(const char *s, uint64_t *out)
{
    static const char units[] = "KMGTP";
    unsigned __int128 whole = 0, frac = 0, den = 1, v;
    const char *u;
    int shift = 0;

    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    for (; *s >= '0' && *s <= '9'; s++) {
        whole = whole * 10 + (unsigned)(*s - '0');
        if (whole > INT64_MAX)
            return -ERANGE;
    }
    if (*s == '.') {
        s++;
        if (*s < '0' || *s > '9')
            return -EINVAL;
        for (int n = 0; *s >= '0' && *s <= '9'; s++, n++) {
            if (n == MAX_FRAC_DIGITS)
                return -EINVAL;
            frac = frac * 10 + (unsigned)(*s - '0');
            den *= 10;
        }
    }
    if (*s && (u = strchr(units, *s >= 'a' && *s <= 'z' ? *s - 32 : *s))) {
        shift = 10 * (int)(u - units + 1);
        s++;
        if (*s == 'i')
            s++;
    }
    if (*s == 'B')
        s++;
    if (*s)
        return -EINVAL;
    frac <<= shift;
    if (frac % den)
        return -EINVAL; /* not a whole number of bytes */
    v = (whole << shift) + frac / den;
    if (v > INT64_MAX)
        return -ERANGE;
    *out = (uint64_t)v;
    return 0;
}

int cmn_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    uint64_t v = 0;

    if (!s || *s < '0' || *s > '9')
        return -EINVAL;
    for (; *s >= '0' && *s <= '9'; s++) {
        uint64_t d = (uint64_t)(*s - '0');

        if (v > UINT64_MAX / 10 || (v == UINT64_MAX / 10 && d > UINT64_MAX % 10))
            return -ERANGE;
        v = v * 10 + d;
    }
    if (*s)
        return -EINVAL;
    if (v < min || v > max)
        return -ERANGE;
    *out = v;
    return 0;
}

const char *cmn_size_why(int rc)
{
    if (rc == -ERANGE)
        return "too large (at most 2^63 - 1 bytes)";
    return "want bytes or a number with K, M, G, T or P (powers of 1024), e.g. 4096, 512M, "
           "1.5G";
}
