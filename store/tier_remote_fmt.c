/* SPDX-License-Identifier: MIT */
/*
 * tier_remote_fmt.c - the remote tier's formats (tier_remote.h): cluster
 * hash slots, namespace ids, key names and the header every value carries.
 * Pure functions: no connection, no thread, no hiredis.
 *
 * Design note: names. A namespace is named on the cluster by a SHA-256 over
 * its fields (tier_remote_ns_id), never by a fast hash of a string: most of
 * those fields are a client's text, and a client who could make its name
 * collide with another tenant's (XXH3-64 falls to chosen input, issue 14)
 * would read that tenant's blocks and plant its own. The encoding is
 * length-prefixed so that no two descriptors share one, and a key carries
 * 128 bits of the digest: finding a descriptor for a given id is a 2^128
 * search.
 */
#include <errno.h>
#include <stdio.h>
#include <string.h>

#include <openssl/evp.h>
#include <xxhash.h>

#include "tier_remote.h"

#define VALUE_MAGIC 0x5254564Bu /* "KVTR" little-endian */
#define VALUE_VERSION 1

uint16_t tier_remote_crc16(const void *buf, size_t len)
{
    const uint8_t *p = buf;
    uint16_t crc = 0;

    /* bitwise: keys are short, and this runs once per key at submit */
    for (size_t i = 0; i < len; i++) {
        crc ^= (uint16_t)(p[i] << 8);
        for (int b = 0; b < 8; b++)
            crc = (crc & 0x8000) ? (uint16_t)((crc << 1) ^ 0x1021) : (uint16_t)(crc << 1);
    }
    return crc;
}

unsigned tier_remote_slot(const void *key, size_t len)
{
    const char *k = key, *open = memchr(k, '{', len);

    if (open) {
        size_t from = (size_t)(open - k) + 1;
        const char *close = memchr(k + from, '}', len - from);

        if (close && close > k + from)
            return tier_remote_crc16(k + from, (size_t)(close - (k + from))) %
                   TIER_REMOTE_SLOTS;
    }
    return tier_remote_crc16(k, len) % TIER_REMOTE_SLOTS;
}

static void put64(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static void put32(uint8_t *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

int tier_remote_ns_id(const struct tier_remote_ns_desc *desc,
                      uint8_t out[TIER_REMOTE_NS_ID_BYTES])
{
    static const char tag[] = "kvtier remote namespace 1";
    const char *str[] = { tag, desc->tenant, desc->model_id, desc->dtype, desc->layout };
    uint8_t ints[20], len[4];
    EVP_MD_CTX *ctx;
    bool ok;

    for (size_t i = 0; i < sizeof(str) / sizeof(str[0]); i++)
        if (!str[i] || strlen(str[i]) > UINT32_MAX)
            return -EINVAL;
    put32(ints, desc->block_tokens);
    put64(ints + 4, desc->block_bytes);
    put32(ints + 12, desc->tp_rank);
    put32(ints + 16, desc->tp_size);
    ctx = EVP_MD_CTX_new();
    if (!ctx)
        return -ENOMEM;
    /* OpenSSL fails here only for want of memory */
    ok = EVP_DigestInit_ex(ctx, EVP_sha256(), NULL) == 1;
    for (size_t i = 0; ok && i < sizeof(str) / sizeof(str[0]); i++) {
        put32(len, (uint32_t)strlen(str[i]));
        ok = EVP_DigestUpdate(ctx, len, sizeof(len)) == 1 &&
             EVP_DigestUpdate(ctx, str[i], strlen(str[i])) == 1;
    }
    ok = ok && EVP_DigestUpdate(ctx, ints, sizeof(ints)) == 1 &&
         EVP_DigestFinal_ex(ctx, out, NULL) == 1;
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -ENOMEM;
}

static void hex_of(char *out, const uint8_t *b, size_t n)
{
    static const char hex[] = "0123456789abcdef";

    for (size_t i = 0; i < n; i++) {
        out[2 * i] = hex[b[i] >> 4];
        out[2 * i + 1] = hex[b[i] & 15];
    }
}

size_t tier_remote_key(char *out, const uint8_t ns_id[TIER_REMOTE_NS_ID_BYTES],
                       const struct tier_key *key)
{
    /* no hash tag: a block's slot comes from its whole key, so a
     * namespace's blocks spread over every master instead of one slot */
    size_t n = 0;

    memcpy(out, "kvt:", 4);
    n += 4;
    hex_of(out + n, ns_id, TIER_REMOTE_NS_KEY_BYTES);
    n += 2 * TIER_REMOTE_NS_KEY_BYTES;
    out[n++] = ':';
    hex_of(out + n, key->b, TIER_KEY_BYTES);
    n += 2 * TIER_KEY_BYTES;
    out[n] = 0;
    return n;
}

static uint64_t get64(const uint8_t *p)
{
    uint64_t v = 0;

    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

/* Header: magic u32, version u16, header bytes u16, payload bytes u64,
 * XXH3-64 of the payload, XXH3-64 of the key (a value copied under another
 * key is wrong too). Little-endian, whatever the host. The key's XXH3 checks
 * against misplacement, not a security boundary (anyone can compute it):
 * what keeps tenants apart is the SHA-256 namespace id inside the key. */
void tier_remote_hdr_make(uint8_t hdr[TIER_REMOTE_HDR_BYTES], const char *rkey, size_t klen,
                          const void *payload, uint64_t len)
{
    put64(hdr, (uint64_t)VALUE_MAGIC | (uint64_t)VALUE_VERSION << 32 |
                   (uint64_t)TIER_REMOTE_HDR_BYTES << 48);
    put64(hdr + 8, len);
    put64(hdr + 16, XXH3_64bits(payload, len));
    put64(hdr + 24, XXH3_64bits(rkey, klen));
}

int tier_remote_value_check(const void *val, size_t vlen, const char *rkey, size_t klen,
                            uint64_t want_len)
{
    const uint8_t *v = val;

    if (vlen != TIER_REMOTE_HDR_BYTES + want_len ||
        get64(v) != ((uint64_t)VALUE_MAGIC | (uint64_t)VALUE_VERSION << 32 |
                     (uint64_t)TIER_REMOTE_HDR_BYTES << 48) ||
        get64(v + 8) != want_len || get64(v + 24) != XXH3_64bits(rkey, klen) ||
        get64(v + 16) != XXH3_64bits(v + TIER_REMOTE_HDR_BYTES, want_len))
        return -EBADMSG;
    return 0;
}

