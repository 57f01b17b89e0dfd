/* SPDX-License-Identifier: MIT */
/*
 * t_xxh3.c - the collision finder of t_xxh3.h. It reads the default secret
 * from xxhash.h (XXH_INLINE_ALL, in this file only) and does its own
 * arithmetic; callers check the result with the library's XXH3_64bits.
 *
 * Design note: why one 16-byte read is enough. For 17..128 bytes XXH3-64 is
 *   avalanche(len * PRIME64_1 + sum of mix16B(input + o_i, secret + s_i))
 * with up to 8 reads, mix16B(in, s) = fold64((lo ^ s_lo) * (hi ^ s_hi)) as a
 * 128-bit product, fold64 = low half ^ high half, and avalanche a bijection.
 * So a read whose bytes are ours and no other read's must contribute
 * need = avalanche^-1(target) - (the rest). With lo ^ s_lo = 2^k the product
 * is (hi ^ s_hi) << k and its fold rotl(hi ^ s_hi, k): hi = rotr(need, k) ^
 * s_hi hits any target. k (64 choices) and a free byte outside the read
 * are varied until no byte written is NUL.
 */
#include <stdbool.h>
#include <string.h>

#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wunused-function"
#define XXH_INLINE_ALL
#include <xxhash.h>
#pragma GCC diagnostic pop

#include "t_xxh3.h"

#define PRIME64_1 0x9E3779B185EBCA87ull
#define AVALANCHE_MUL 0x165667919E3779F9ull

static uint64_t le64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static void put_le64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t rotr(uint64_t v, unsigned k)
{
    return k ? v >> k | v << (64 - k) : v;
}

static uint64_t mix16(const uint8_t *in, const uint8_t *sec)
{
    unsigned __int128 p = (unsigned __int128)(le64(in) ^ le64(sec)) *
                          (le64(in + 8) ^ le64(sec + 8));

    return (uint64_t)p ^ (uint64_t)(p >> 64);
}

/* XXH3's avalanche undone: xorshifts by 32 and 37 are their own inverses
 * on 64 bits, the odd multiplier has one mod 2^64 (Newton's iteration). */
static uint64_t unavalanche(uint64_t h)
{
    uint64_t inv = AVALANCHE_MUL;

    for (int i = 0; i < 5; i++)
        inv *= 2 - AVALANCHE_MUL * inv;
    h ^= h >> 32;
    h *= inv;
    return h ^ h >> 37;
}

/* The reads of XXH3_len_17to128_64b for len: input and secret offsets. */
static int reads(size_t len, size_t in[8], size_t sec[8])
{
    int n = 0;

    if (len > 96) {
        in[n] = 48, sec[n++] = 96;
        in[n] = len - 64, sec[n++] = 112;
    }
    if (len > 64) {
        in[n] = 32, sec[n++] = 64;
        in[n] = len - 48, sec[n++] = 80;
    }
    if (len > 32) {
        in[n] = 16, sec[n++] = 32;
        in[n] = len - 32, sec[n++] = 48;
    }
    in[n] = 0, sec[n++] = 0;
    in[n] = len - 16, sec[n++] = 16;
    return n;
}

/* Solve read `pick` for target with the rest of buf as it is: 0, or -1 when
 * every k leaves a NUL byte. */
static int solve(uint8_t *buf, size_t len, const size_t *in, const size_t *sec, int n,
                 int pick, uint64_t target)
{
    uint64_t need = unavalanche(target) - len * PRIME64_1;
    const uint8_t *s = XXH3_kSecret + sec[pick];

    for (int i = 0; i < n; i++)
        if (i != pick)
            need -= mix16(buf + in[i], XXH3_kSecret + sec[i]);
    for (unsigned k = 0; k < 64; k++) {
        uint8_t *c = buf + in[pick];

        put_le64(c, (1ull << k) ^ le64(s));
        put_le64(c + 8, rotr(need, k) ^ le64(s + 8));
        if (!memchr(c, 0, 16))
            return 0;
    }
    return -1;
}

int t_xxh3_collide(uint8_t *buf, size_t len, size_t lo, size_t hi, uint64_t target)
{
    size_t in[8], sec[8];
    int n, pick = -1;

    if (len < 17 || len > 128 || hi > len || lo >= hi)
        return -1;
    n = reads(len, in, sec);
    for (int i = 0; i < n && pick < 0; i++) {
        bool alone = in[i] >= lo && in[i] + 16 <= hi;

        for (int j = 0; j < n && alone; j++)
            alone = j == i || in[j] + 16 <= in[i] || in[j] >= in[i] + 16;
        if (alone)
            pick = i;
    }
    if (pick < 0)
        return -1;
    if (solve(buf, len, in, sec, n, pick, target) == 0)
        return 0;
    /* a free byte outside the read: its values give the other reads new sums */
    for (size_t p = lo; p < hi; p++) {
        if (p >= in[pick] && p < in[pick] + 16)
            continue;
        for (int v = 'a'; v <= 'z'; v++) {
            buf[p] = (uint8_t)v;
            if (solve(buf, len, in, sec, n, pick, target) == 0)
                return 0;
        }
    }
    return -1;
}
