/* SPDX-License-Identifier: MIT */
/*
 * clock.c - the monotonic clock and a sleep that signals do not cut short
 * (kvt_common.h).
 */
#include <errno.h>
#include <time.h>

#include "kvt_common.h"

uint64_t cmn_now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

uint64_t cmn_now_ms(void)
{
    return cmn_now_ns() / 1000000ull;
}

double cmn_now_s(void)
{
    return (double)cmn_now_ns() * 1e-9;
}

void cmn_sleep_ms(unsigned ms)
{
    struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };

    while (nanosleep(&ts, &ts) < 0 && errno == EINTR) {
    }
}
