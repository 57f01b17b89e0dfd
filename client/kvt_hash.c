/* SPDX-License-Identifier: MIT */
/*
 * kvt_hash.c - block keys, byte-identical to vLLM's sha256_cbor prefix hashes.
 *
 * Each full block is encoded as canonical CBOR [parent, [tokens], extra|null]
 * and hashed with SHA-256 through OpenSSL's EVP API. This file only computes
 * keys; it knows nothing of tierd, namespaces or which blocks get cached.
 */
#include <errno.h>
#include <stdbool.h>
#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <string.h>

#include <openssl/evp.h>

#include "kvt_int.h"
#include "kvtier.h"

/* CBOR initial bytes: the major type sits in the top three bits. */
#define MT_UINT 0x00u
#define MT_NEGINT 0x20u
#define MT_BYTES 0x40u
#define MT_TEXT 0x60u
#define MT_ARRAY 0x80u
#define CBOR_NULL 0xf6u

#define HEAD_MAX 9  /* largest CBOR head: initial byte + 8-byte argument */
#define TOKEN_MAX 5 /* a uint32 token: initial byte + 4-byte argument */

/*
 * Design note: the encoding of a block is never materialised in full. It is
 * written into a fixed stack buffer that is fed to the digest whenever it
 * fills, so any block size and any extra-key length hash without malloc.
 * At 2 KiB, a 256-token block of 4-byte ids (about 1.3 KiB) still goes to
 * OpenSSL in one EVP_DigestUpdate call, which is what keeps small blocks fast.
 */
#define SINK_BYTES 2048
_Static_assert(SINK_BYTES >= 3 + KVT_KEY_BYTES + HEAD_MAX, "block prefix fits the buffer");

struct sink {
    EVP_MD_CTX *ctx;             /* digest being fed; owned by the caller */
    size_t len;                  /* bytes pending in buf, <= SINK_BYTES */
    int ok;                      /* 0 once an EVP call failed (sticky) */
    uint8_t buf[SINK_BYTES + 8]; /* pending encoded bytes; +8: put_tok's store */
};

/* Every hash uses one SHA-256 implementation, fetched once per process and
 * kept for its lifetime (explicit fetch avoids a lookup per EVP init). Note
 * that OpenSSL 3.0 itself still allocates a small provider context inside
 * each EVP_DigestInit_ex2 (malloc, free and cleanse: under 10% of a 16-token
 * block's cost in perf); that allocation is the library's, not ours. */
static pthread_once_t md_once = PTHREAD_ONCE_INIT;
static EVP_MD *md_sha256;

static void md_fetch(void)
{
    md_sha256 = EVP_MD_fetch(NULL, "SHA256", NULL);
}

static const EVP_MD *sha256(void)
{
    pthread_once(&md_once, md_fetch);
    return md_sha256;
}

/* Write the shortest CBOR head for (major type, value) at p; returns its size. */
static size_t head(uint8_t *p, unsigned mt, uint64_t v)
{
    if (v < 24) {
        p[0] = (uint8_t)(mt | v);
        return 1;
    }
    if (v <= UINT8_MAX) {
        p[0] = (uint8_t)(mt | 24);
        p[1] = (uint8_t)v;
        return 2;
    }
    if (v <= UINT16_MAX) {
        p[0] = (uint8_t)(mt | 25);
        p[1] = (uint8_t)(v >> 8);
        p[2] = (uint8_t)v;
        return 3;
    }
    if (v <= UINT32_MAX) {
        p[0] = (uint8_t)(mt | 26);
        p[1] = (uint8_t)(v >> 24);
        p[2] = (uint8_t)(v >> 16);
        p[3] = (uint8_t)(v >> 8);
        p[4] = (uint8_t)v;
        return 5;
    }
    p[0] = (uint8_t)(mt | 27);
    for (int i = 0; i < 8; i++)
        p[1 + i] = (uint8_t)(v >> (56 - 8 * i));
    return 9;
}

/* Hand the pending bytes to the digest. */
static void flush(struct sink *s)
{
    if (s->len && !EVP_DigestUpdate(s->ctx, s->buf, s->len))
        s->ok = 0;
    s->len = 0;
}

/* Make room for n more bytes (n <= SINK_BYTES). */
static uint8_t *room(struct sink *s, size_t n)
{
    if (SINK_BYTES - s->len < n)
        flush(s);
    return s->buf + s->len;
}

static void put_head(struct sink *s, unsigned mt, uint64_t v)
{
    s->len += head(room(s, HEAD_MAX), mt, v);
}

/* A byte or text string. Long ones bypass the buffer and go straight to the
 * digest, which gives the same bytes in the same order. */
static void put_str(struct sink *s, unsigned mt, const void *p, size_t n)
{
    put_head(s, mt, n);
    if (n <= SINK_BYTES - s->len) {
        memcpy(s->buf + s->len, p, n);
        s->len += n;
        return;
    }
    flush(s);
    if (!EVP_DigestUpdate(s->ctx, p, n))
        s->ok = 0;
}

/*
 * One token id as a CBOR uint at p; returns the end. Prompts mix ids of 1, 3
 * and 5 encoded bytes at random, so a branch per width mispredicts often
 * (about 15% of the whole hash). Instead all four forms are built, one is
 * picked by index and written as a single 8-byte little-endian store, which
 * needs 3 bytes of slack past the 5 the token may use.
 */
static inline uint8_t *put_tok(uint8_t *p, uint32_t v)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
    const uint64_t form[4] = {
        v,                                                       /* < 24: inline */
        MT_UINT | 24u | (uint64_t)v << 8,                        /* 1-byte argument */
        MT_UINT | 25u | (uint64_t)__builtin_bswap16((uint16_t)v) << 8, /* 2-byte */
        MT_UINT | 26u | (uint64_t)__builtin_bswap32(v) << 8,     /* 4-byte */
    };
    size_t c = (size_t)(v >= 24) + (v > UINT8_MAX) + (v > UINT16_MAX);

    memcpy(p, &form[c], sizeof(form[c]));
    return p + c + 1 + (c == 3);
#else
    return p + head(p, MT_UINT, v);
#endif
}

/* The token array: checks for room once per run of tokens, not per token. */
static void put_tokens(struct sink *s, const uint32_t *t, size_t n)
{
    put_head(s, MT_ARRAY, n);
    while (n) {
        size_t fit = (SINK_BYTES - s->len) / TOKEN_MAX;

        if (fit == 0) {
            flush(s);
            continue;
        }
        if (fit > n)
            fit = n;
        uint8_t *p = s->buf + s->len;
        for (size_t i = 0; i < fit; i++)
            p = put_tok(p, t[i]);
        s->len = (size_t)(p - s->buf);
        t += fit;
        n -= fit;
    }
}

/* Reject what vLLM could not have produced. Items must be sorted by offset
 * (vLLM assumes so too) so that the block walk below can keep two cursors. */
static int check_opts(const kvt_hash_opts *o, const uint32_t *tokens, size_t n_tokens,
                      const kvt_key *keys_out)
{
    if (!o || !o->seed || !keys_out || o->block_tokens == 0 || (!tokens && n_tokens))
        return -EINVAL;
    if (!o->parent && o->start_token != 0)
        return -EINVAL;
    if (o->start_token % o->block_tokens || o->start_token > UINT64_MAX - n_tokens)
        return -EINVAL;
    if (n_tokens / o->block_tokens > SSIZE_MAX || (o->n_mm && !o->mm))
        return -EINVAL;
    if (o->extra_format > KVT_EXTRA_UNTAGGED ||
        (o->extra_format == KVT_EXTRA_TAGGED && o->lora_name && !o->lora_path))
        return -EINVAL;
    for (size_t i = 0; i < o->n_mm; i++) {
        const kvt_mm_item *m = &o->mm[i];

        if (!m->identifier || m->length == 0 || m->offset > UINT64_MAX - m->length)
            return -EINVAL;
        if (i && m->offset < o->mm[i - 1].offset)
            return -EINVAL;
    }
    return 0;
}

/*
 * Multimodal cursors. Item i covers [offset, offset + length); block covers
 * [start, end). They overlap when offset < end and offset + length > start.
 * hi: items before it start before the current block's end (offsets are
 * sorted, so it only moves forward). lo: items before it ended at or before
 * the current block's start. Both move forward only, so a walk costs
 * O(blocks + items) in the usual case of non-overlapping items.
 */
struct mm_walk {
    size_t lo, hi;
};

/* Advance the cursors to block [start, end); returns how many items overlap. */
static size_t mm_advance(const kvt_hash_opts *o, struct mm_walk *w, uint64_t start,
                         uint64_t end)
{
    size_t n = 0;

    while (w->hi < o->n_mm && o->mm[w->hi].offset < end)
        w->hi++;
    while (w->lo < w->hi && o->mm[w->lo].offset + o->mm[w->lo].length <= start)
        w->lo++;
    for (size_t i = w->lo; i < w->hi; i++)
        n += o->mm[i].offset + o->mm[i].length > start;
    return n;
}

/* A C string as a CBOR text string. */
static void put_text(struct sink *s, const char *t)
{
    put_str(s, MT_TEXT, t, strlen(t));
}

/* A signed integer: major type 0 for v >= 0, 1 (encoding -1 - v) below. */
static void put_int(struct sink *s, int64_t v)
{
    if (v >= 0)
        put_head(s, MT_UINT, (uint64_t)v);
    else
        put_head(s, MT_NEGINT, (uint64_t)(-1 - v));
}

/* Encode the extra keys of block [start, end): null, or [lora?, mm..., salt?],
 * each tagged (["lora", name, path], ...) or bare, as o->extra_format says. */
static void put_extra(struct sink *s, const kvt_hash_opts *o, struct mm_walk *w,
                      uint64_t start, uint64_t end)
{
    size_t n_mm = o->n_mm ? mm_advance(o, w, start, end) : 0;
    int salt = start == 0 && o->cache_salt && o->cache_salt[0];
    size_t n = (o->lora_name != NULL) + n_mm + (size_t)salt;
    bool tagged = o->extra_format == KVT_EXTRA_TAGGED;

    if (n == 0) {
        *room(s, 1) = CBOR_NULL;
        s->len++;
        return;
    }
    put_head(s, MT_ARRAY, n);
    if (o->lora_name && tagged) {
        put_head(s, MT_ARRAY, 3);
        put_text(s, "lora");
        put_text(s, o->lora_name);
        put_text(s, o->lora_path);
    } else if (o->lora_name) {
        put_text(s, o->lora_name);
    }
    for (size_t i = w->lo; n_mm && i < w->hi; i++) {
        const kvt_mm_item *m = &o->mm[i];

        if (m->offset + m->length <= start)
            continue;
        if (tagged) {
            /* the item's offset from the block's start: negative when it
             * began in an earlier block */
            put_head(s, MT_ARRAY, 3);
            put_text(s, "mm");
            put_text(s, m->identifier);
            put_int(s, (int64_t)m->offset - (int64_t)start);
        } else {
            put_text(s, m->identifier);
        }
    }
    if (salt && tagged) {
        put_head(s, MT_ARRAY, 2);
        put_text(s, "cache_salt");
    }
    if (salt)
        put_text(s, o->cache_salt);
}

ssize_t kvt_hash_prompt(const kvt_hash_opts *o, const uint32_t *tokens, size_t n_tokens,
                        kvt_key *keys_out)
{
    const EVP_MD *md;
    struct sink s;
    struct mm_walk w = {0, 0};
    kvt_key parent;
    size_t bt, n_keys;
    int err = check_opts(o, tokens, n_tokens, keys_out);

    if (err)
        return err;
    bt = o->block_tokens;
    n_keys = n_tokens / bt;
    if (n_keys == 0)
        return 0;
    md = sha256();
    if (!md)
        return -EIO;
    /* The first block's parent, copied: the caller's may alias keys_out[0]. */
    if (o->parent)
        parent = *o->parent;
    else if ((err = kvt_none_hash(o->seed, &parent)) < 0)
        return err;

    s.ctx = EVP_MD_CTX_new();
    if (!s.ctx)
        return -ENOMEM;
    s.ok = 1;
    for (size_t i = 0; i < n_keys && s.ok; i++) {
        uint64_t start = o->start_token + (uint64_t)i * bt;
        uint8_t *p;

        if (!EVP_DigestInit_ex2(s.ctx, md, NULL)) {
            s.ok = 0;
            break;
        }
        /* [parent, [tokens], extra]: 0x83, then the parent as a 32-byte string. */
        p = s.buf;
        *p++ = MT_ARRAY | 3;
        *p++ = MT_BYTES | 24;
        *p++ = KVT_KEY_BYTES;
        memcpy(p, i ? keys_out[i - 1].b : parent.b, KVT_KEY_BYTES);
        s.len = 3 + KVT_KEY_BYTES;
        put_tokens(&s, tokens + i * bt, bt);
        put_extra(&s, o, &w, start, start + bt);
        flush(&s);
        if (s.ok && !EVP_DigestFinal_ex(s.ctx, keys_out[i].b, NULL))
            s.ok = 0;
    }
    EVP_MD_CTX_free(s.ctx);
    return s.ok ? (ssize_t)n_keys : -EIO;
}

int kvt_none_hash(const char *seed, kvt_key *out)
{
    const EVP_MD *md;
    EVP_MD_CTX *ctx;
    uint8_t h[HEAD_MAX];
    size_t len;
    int ok;

    if (!seed || !out)
        return -EINVAL;
    md = sha256();
    if (!md)
        return -EIO;
    ctx = EVP_MD_CTX_new();
    if (!ctx)
        return -ENOMEM;
    /* The seed alone, as a CBOR text string: vLLM's hash_fn(PYTHONHASHSEED). */
    len = strlen(seed);
    ok = EVP_DigestInit_ex2(ctx, md, NULL) &&
         EVP_DigestUpdate(ctx, h, head(h, MT_TEXT, len)) &&
         EVP_DigestUpdate(ctx, seed, len) &&
         EVP_DigestFinal_ex(ctx, out->b, NULL);
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -EIO;
}

int kvt_sha256_parts(const void *const *parts, const size_t *lens, size_t n, kvt_key *out)
{
    const EVP_MD *md = sha256();
    EVP_MD_CTX *ctx;
    int ok;

    if (!md)
        return -EIO;
    ctx = EVP_MD_CTX_new();
    if (!ctx)
        return -ENOMEM;
    ok = EVP_DigestInit_ex2(ctx, md, NULL);
    for (size_t i = 0; ok && i < n; i++)
        ok = EVP_DigestUpdate(ctx, parts[i], lens[i]);
    ok = ok && EVP_DigestFinal_ex(ctx, out->b, NULL);
    EVP_MD_CTX_free(ctx);
    return ok ? 0 : -EIO;
}

char *kvt_key_hex(const kvt_key *k, char out[2 * KVT_KEY_BYTES + 1])
{
    static const char digits[] = "0123456789abcdef";

    for (int i = 0; i < KVT_KEY_BYTES; i++) {
        out[2 * i] = digits[k->b[i] >> 4];
        out[2 * i + 1] = digits[k->b[i] & 0xf];
    }
    out[2 * KVT_KEY_BYTES] = '\0';
    return out;
}
