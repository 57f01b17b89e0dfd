/* SPDX-License-Identifier: MIT */
/*
 * tier_key.h - the store's small shared types: a block's key, "no entry",
 * the tier levels and the events miss attribution remembers. The lower
 * modules (idx, the cold, remote and why tables) use these without the
 * store's API (tier.h).
 */
#ifndef TIER_KEY_H
#define TIER_KEY_H

#include <stdint.h>

#define TIER_KEY_BYTES 32
#define TIER_NONE UINT32_MAX /* "no entry" for entry ids */

struct tier_key {
    uint8_t b[TIER_KEY_BYTES];
};

/* Where a block lives; values equal the public KVT_TIER_* codes. */
enum tier_level { TIER_L_NONE = 0, TIER_L_HOT = 1, TIER_L_WARM = 2, TIER_L_COLD = 3, TIER_L_N = 4 };

/* What last happened to a block that is gone (miss attribution). */
enum tier_event {
    TIER_EV_NONE = 0,     /* nothing remembered: never stored, or forgotten since */
    TIER_EV_DROPPED = 1,  /* left warm (or hot) with no copy on disk: evicted */
    TIER_EV_EVICTED = 2,  /* evicted from the disk to make room */
    TIER_EV_CHECKSUM = 3, /* read back from disk with wrong bytes: dropped */
    TIER_EV_IO_ERROR = 4, /* could not be read back from disk: dropped */
    TIER_EV_REMOVED = 5,  /* removed by a client */
    TIER_EV_ABORTED = 6,  /* reserved and never committed (aborted, or its client died) */
    TIER_EV_N = 7,
};

#endif /* TIER_KEY_H */
