/* SPDX-License-Identifier: MIT */
/*
 * tier_why.h - a bounded memory of what last happened to blocks that are
 * gone: dropped from warm, evicted from disk, failed a checksum or a read,
 * removed, or reserved and never committed. It answers "why is this key a
 * miss?" for the store's miss attribution and for `tierctl why`.
 *
 * An open-addressing table of fixed size keyed by (namespace, key), probed
 * over a short window; when the window is full the oldest event in it is
 * overwritten, so memory stays fixed (48 bytes per event) and old events
 * fade. Not thread-safe: the store's one caller.
 */
#ifndef TIER_WHY_H
#define TIER_WHY_H

#include <stdbool.h>
#include <stdint.h>

#include "tier_key.h"

struct tier_why;

/* A table of about `events` events (rounded up to a power of two, >= 64).
 * -ENOMEM. */
int tier_why_create(uint32_t events, struct tier_why **out);
void tier_why_destroy(struct tier_why *w); /* NULL ok */

/* Remember that `ev` (enum tier_event) happened to (ns, key) in tier lvl at
 * now_ms, replacing what was remembered of it. */
void tier_why_put(struct tier_why *w, uint32_t ns, const struct tier_key *key, uint8_t ev,
                  uint8_t lvl, uint64_t now_ms);

/* The last event of (ns, key): true and its fields, or false when none is
 * remembered (never stored, or forgotten since). */
bool tier_why_find(const struct tier_why *w, uint32_t ns, const struct tier_key *key,
                   uint8_t *ev, uint8_t *lvl, uint64_t *at_ms);

/* Events held now, and the most it holds. */
uint32_t tier_why_count(const struct tier_why *w);
uint32_t tier_why_capacity(const struct tier_why *w);

#endif /* TIER_WHY_H */
