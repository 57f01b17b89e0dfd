/* SPDX-License-Identifier: MIT */
/*
 * turn.c - what tierd's event loop does besides reading requests: deliver
 * each tenant's tier completions, and after each turn run the mover, answer
 * finished flushes and free closed sessions. A file of its own so that the
 * protocol fuzzer (tests/fuzz/fuzz_proto.c), which cannot link tierd.c's
 * main, turns the loop with these very callbacks.
 */
#include "sess.h"
#include "tenant.h"
#include "tier.h"
#include "tierd.h"

void tierd_on_tiers(struct ev_loop *l, int fd, uint32_t events, void *ctx)
{
    struct tenant *t = ctx;

    (void)l;
    (void)fd;
    (void)events;
    sess_expire();
    tier_poll(t->store, false);
}

void tierd_turn_end(void *ctx)
{
    struct tierd *d = ctx;

    /* demotion between watermarks happens between batches of requests,
     * so a put never waits for more than the eviction it needs itself */
    for (uint32_t i = 0; i < d->ntenants; i++)
        tier_maintain(d->tenants[i].store);
    sess_flush_check(d);
    sess_reap();
}
