/* SPDX-License-Identifier: MIT */
/*
 * log.c - one formatted line handed to a caller's log callback, the way
 * the store's modules report (they never print themselves).
 */
#include <stdarg.h>
#include <stdio.h>

#include "kvt_common.h"

void cmn_logf(void (*log)(void *ctx, const char *msg), void *ctx, const char *fmt, ...)
{
    char msg[512]; /* longer lines are cut: a log line, not a record */
    va_list ap;

    if (!log)
        return;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    log(ctx, msg);
}
