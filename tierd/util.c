/* SPDX-License-Identifier: MIT */
/*
 * util.c - what every part of tierd uses: the log, the clock, and the
 * parsers shared by the command line and the config file.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tierd.h"

bool tierd_quiet;

void tierd_log(const char *fmt, ...)
{
    va_list ap;

    if (tierd_quiet)
        return;
    /* one line at a time: the remote tier's workers log from their threads */
    flockfile(stderr);
    fputs("tierd: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    funlockfile(stderr);
}

uint64_t tierd_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t tierd_parse_size(const char *s)
{
    char *end;
    unsigned long long v;
    int shift = 0;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    }
    if (*end == 'i' || *end == 'B')
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (*end || v > (UINT64_MAX >> shift))
        return 0;
    return (uint64_t)v << shift;
}

int tierd_parse_policy(const char *s, enum tier_remote_policy *out)
{
    if (strcmp(s, "write-through") == 0)
        *out = TIER_REMOTE_WRITE_THROUGH;
    else if (strcmp(s, "on-demotion") == 0)
        *out = TIER_REMOTE_ON_DEMOTION;
    else
        return -EINVAL;
    return 0;
}

int tierd_parse_ns_filter(const char *s, struct tierd_remote *r)
{
    if (strcmp(s, "all") == 0 || strcmp(s, "*") == 0)
        s = "";
    if (strlen(s) >= sizeof(r->ns_prefix))
        return -EINVAL;
    strcpy(r->ns_prefix, s);
    return 0;
}
