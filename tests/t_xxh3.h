/* SPDX-License-Identifier: MIT */
/*
 * t_xxh3.h - chosen-input collisions of XXH3-64 (no seed, the default
 * secret), for tests that show why a name must never be keyed by it: the
 * remote tier once named a namespace on the cluster by XXH3-64 of a string
 * whose model id the client chooses (tierd_remote_tenants.c).
 */
#ifndef T_XXH3_H
#define T_XXH3_H

#include <stddef.h>
#include <stdint.h>

/* Change bytes of buf[lo..hi) (and only those) so that XXH3-64 of buf[0..len)
 * becomes target; every byte written is non-NUL. For 17 <= len <= 128 (the
 * mid-size path), with a 16-byte read of the hash's inside [lo, hi) that no
 * other read overlaps. 0, or -1 when no such read exists or no solution
 * came within the tries. */
int t_xxh3_collide(uint8_t *buf, size_t len, size_t lo, size_t hi, uint64_t target);

#endif /* T_XXH3_H */
