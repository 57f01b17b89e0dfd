/* SPDX-License-Identifier: MIT */
/*
 * kvreplay_trace.c - load a Mooncake-format JSONL trace and turn each
 * request's hash_ids into a chain of 32-byte block keys.
 *
 * The whole trace is kept in memory (the bundled one: 12k requests, 288k
 * keys, 9 MiB of keys), so that a capacity curve replays it many times
 * without parsing or hashing again. Bad lines are reported with their line
 * number; nothing here prints or exits.
 */
#include <errno.h>
#include <jansson.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "kvreplay.h"

void kvr_key_root(const char *salt, struct tier_key *out)
{
    char buf[512];
    int n = snprintf(buf, sizeof(buf), "kvreplay:%s", salt ? salt : "");

    /* a salt longer than the buffer is cut: still a stable key */
    if (n < 0 || (size_t)n >= sizeof(buf))
        n = (int)sizeof(buf) - 1;
    SHA256((const unsigned char *)buf, (size_t)n, out->b);
}

void kvr_key_next(const struct tier_key *parent, uint64_t id, struct tier_key *out)
{
    unsigned char buf[TIER_KEY_BYTES + 8];

    /* little-endian id, whatever the host: keys must match across machines */
    memcpy(buf, parent->b, TIER_KEY_BYTES);
    for (int i = 0; i < 8; i++)
        buf[TIER_KEY_BYTES + i] = (unsigned char)(id >> (8 * i));
    SHA256(buf, sizeof(buf), out->b);
}

static int grow(void **arr, size_t *cap, size_t need, size_t elem)
{
    size_t c = *cap ? *cap : 1024;
    void *p;

    if (need <= *cap)
        return 0;
    while (c < need)
        c *= 2;
    p = realloc(*arr, c * elem);
    if (!p)
        return -ENOMEM;
    *arr = p;
    *cap = c;
    return 0;
}

/* A member that must be a non-negative integer: 0, or -EINVAL with why. */
static int get_count(json_t *obj, const char *name, bool required, uint64_t *out,
                     char *why, size_t cap)
{
    json_t *v = json_object_get(obj, name);

    if (!v) {
        if (required)
            snprintf(why, cap, "no \"%s\" member", name);
        return required ? -EINVAL : 1;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        snprintf(why, cap, "\"%s\" is not a non-negative integer", name);
        return -EINVAL;
    }
    *out = (uint64_t)json_integer_value(v);
    return 0;
}

/* Parse one line's object into a request and its keys. 0 or -EINVAL/-ENOMEM
 * (why says what is wrong with the line). */
static int parse_line(struct kvr_trace *tr, const char *line, const struct tier_key *root,
                      uint64_t prev_ts, char *why, size_t cap)
{
    json_error_t jerr;
    json_t *o = json_loads(line, JSON_REJECT_DUPLICATES, &jerr), *ids;
    struct kvr_req r = { .ts_ms = prev_ts, .first = tr->nkeys };
    size_t n;
    int rc;

    if (!o) {
        snprintf(why, cap, "not valid JSON (column %d: %s)", jerr.column, jerr.text);
        return -EINVAL;
    }
    rc = -EINVAL;
    if (!json_is_object(o)) {
        snprintf(why, cap, "not a JSON object");
        goto out;
    }
    ids = json_object_get(o, "hash_ids");
    if (!ids || !json_is_array(ids)) {
        snprintf(why, cap, ids ? "\"hash_ids\" is not an array" : "no \"hash_ids\" array");
        goto out;
    }
    if (get_count(o, "input_length", true, &r.input_len, why, cap) < 0 ||
        get_count(o, "timestamp", false, &r.ts_ms, why, cap) < 0 ||
        get_count(o, "output_length", false, &r.output_len, why, cap) < 0)
        goto out;
    n = json_array_size(ids);
    if (n > UINT32_MAX) {
        snprintf(why, cap, "more than %u hash_ids", UINT32_MAX);
        goto out;
    }
    if (grow((void **)&tr->req, &tr->req_cap, tr->nreq + 1, sizeof(*tr->req)) < 0 ||
        grow((void **)&tr->keys, &tr->key_cap, tr->nkeys + n, sizeof(*tr->keys)) < 0) {
        snprintf(why, cap, "out of memory");
        rc = -ENOMEM;
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *v = json_array_get(ids, i);

        if (!json_is_integer(v) || json_integer_value(v) < 0) {
            snprintf(why, cap, "hash_ids[%zu] is not a non-negative integer", i);
            goto out;
        }
        kvr_key_next(i ? &tr->keys[tr->nkeys + i - 1] : root,
                     (uint64_t)json_integer_value(v), &tr->keys[tr->nkeys + i]);
    }
    /* only now: a bad id above leaves the trace as it was */
    r.nblk = (uint32_t)n;
    tr->nkeys += n;
    tr->req[tr->nreq++] = r;
    tr->tokens += r.input_len;
    if (r.nblk > tr->max_blk)
        tr->max_blk = r.nblk;
    rc = 0;
out:
    json_decref(o);
    return rc;
}

static bool blank(const char *s)
{
    for (; *s; s++)
        if (*s != ' ' && *s != '\t' && *s != '\r' && *s != '\n')
            return false;
    return true;
}

int kvr_trace_load(const char *path, const char *salt, size_t limit, struct kvr_trace *tr,
                   char *err, size_t errcap)
{
    bool is_stdin = strcmp(path, "-") == 0;
    FILE *f = is_stdin ? stdin : fopen(path, "r");
    struct tier_key root;
    char why[256];
    char *line = NULL;
    size_t linecap = 0, lineno = 0;
    uint64_t prev_ts = 0;
    ssize_t len;
    int rc = 0;

    memset(tr, 0, sizeof(*tr));
    if (!f) {
        rc = -errno;
        snprintf(err, errcap, "%s: %s", path, strerror(errno));
        return rc;
    }
    kvr_key_root(salt, &root);
    while ((limit == 0 || tr->nreq < limit) && (len = getline(&line, &linecap, f)) >= 0) {
        lineno++;
        /* a NUL inside the line would hide the rest of it from the parser */
        if (strlen(line) != (size_t)len) {
            snprintf(err, errcap, "%s:%zu: a NUL byte inside the line", path, lineno);
            rc = -EINVAL;
            break;
        }
        if (blank(line))
            continue;
        rc = parse_line(tr, line, &root, prev_ts, why, sizeof(why));
        if (rc < 0) {
            snprintf(err, errcap, "%s:%zu: %s", path, lineno, why);
            break;
        }
        prev_ts = tr->req[tr->nreq - 1].ts_ms;
    }
    if (rc == 0 && ferror(f)) {
        rc = -EIO;
        snprintf(err, errcap, "%s: read error after line %zu", path, lineno);
    }
    if (rc == 0 && tr->nreq == 0) {
        rc = -EINVAL;
        snprintf(err, errcap, "%s: no requests (%s)", path,
                 lineno ? "only blank lines" : "empty file");
    }
    free(line);
    if (!is_stdin)
        fclose(f);
    if (rc < 0)
        kvr_trace_fini(tr);
    return rc;
}

void kvr_trace_fini(struct kvr_trace *tr)
{
    free(tr->req);
    free(tr->keys);
    memset(tr, 0, sizeof(*tr));
}
