/* SPDX-License-Identifier: MIT */
/*
 * fuzz_wire.c - records of a fuzz input into protocol messages, for the
 * fake peer of the protocol harnesses (the format is in fuzz_wire.h).
 * Never fails on short input: a record cut by the end of the input is
 * clipped, the next read reports the end.
 */
#include <string.h>

#include "fuzz_wire.h"

int fz_u8(struct fz_in *in, uint8_t *v)
{
    if (in->n == 0)
        return -1;
    *v = *in->p++;
    in->n--;
    return 0;
}

/* Little-endian unsigned of k bytes (fewer when the input ends). */
static uint32_t le(struct fz_in *in, int k)
{
    uint32_t v = 0;
    uint8_t b;

    for (int i = 0; i < k && fz_u8(in, &b) == 0; i++)
        v |= (uint32_t)b << (8 * i);
    return v;
}

int fz_next(struct fz_in *in, struct fz_rec *r)
{
    uint8_t mode;

    if (fz_u8(in, &mode) < 0)
        return -1;
    memset(r, 0, sizeof(*r));
    r->mode = mode;
    if (mode & FZ_M_STATUS)
        r->status = (int32_t)le(in, 4);
    if (mode & FZ_M_OP)
        r->op = (uint16_t)le(in, 1);
    r->len = le(in, 2);
    if (r->len > in->n)
        r->len = in->n;
    r->buf = in->p;
    in->p += r->len;
    in->n -= r->len;
    return 0;
}

size_t fz_build(const struct fz_rec *r, uint16_t op, uint32_t req_id, uint8_t *out, size_t cap)
{
    struct kvt_wire_hdr h = {
        .magic = KVT_WIRE_MAGIC, .version = KVT_WIRE_VERSION,
        .op = (r->mode & FZ_M_OP) ? r->op : op, .req_id = req_id, .status = r->status,
        .body_len = (uint32_t)r->len,
    };
    size_t n = 0, len;

    if (r->mode & FZ_M_FRAME) {
        if (cap < sizeof(h))
            return 0;
        memcpy(out, &h, sizeof(h));
        n = sizeof(h);
    }
    len = r->len < cap - n ? r->len : cap - n;
    memcpy(out + n, r->buf, len);
    return n + len;
}
