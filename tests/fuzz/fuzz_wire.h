/* SPDX-License-Identifier: MIT */
/*
 * fuzz_wire.h - the fake peer of the protocol harnesses: how a fuzz input
 * becomes a stream of SOCK_SEQPACKET messages (kvt_wire.h); t_wire_send_fd
 * (tests/t_wire.h) sends them. fuzz_reply.c plays a hostile tierd with it;
 * a daemon-side harness plays a hostile client with the same records (each
 * record one request).
 *
 * A record in the input:
 *     mode (u8, FZ_M_*)
 *     status (i32, little-endian)   only with FZ_M_STATUS
 *     op (u8)                       only with FZ_M_OP
 *     len (u16, little-endian)
 *     bytes[len]                    clipped to what the input has left
 * With FZ_M_FRAME the bytes are a body behind a well-formed header (right
 * magic, version, body_len; the op and request id of the message answered,
 * or the record's op); without it they are the whole message, header and
 * all, so framing errors get fuzzed too.
 */
#ifndef FUZZ_WIRE_H
#define FUZZ_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "kvt_wire.h"

#define FZ_M_FRAME 0x01u   /* put a well-formed header in front of the bytes */
#define FZ_M_STATUS 0x02u  /* an i32 status word follows the mode (else status 0) */
#define FZ_M_FD_SHIFT 2    /* bits 2-3: a descriptor to pass along, FZ_FD_* */
#define FZ_M_FD_MASK 0x0cu
#define FZ_M_STALE 0x10u   /* first send a copy under another request id */
#define FZ_M_OP 0x20u      /* an op byte follows (else the op of the message answered) */

/* Descriptors a record may pass with SCM_RIGHTS (what each is, is the
 * harness's business: fuzz_reply passes the warm pool, the hot pool and a
 * pipe nobody can map). */
enum { FZ_FD_NONE = 0, FZ_FD_A = 1, FZ_FD_B = 2, FZ_FD_C = 3 };

/* The unread rest of a fuzz input. */
struct fz_in {
    const uint8_t *p;
    size_t n;
};

/* One record, pointing into the input. */
struct fz_rec {
    unsigned mode;      /* FZ_M_* */
    int32_t status;     /* header status */
    uint16_t op;        /* FZ_M_OP: the header's op */
    const uint8_t *buf; /* len bytes: body (FZ_M_FRAME) or whole message */
    size_t len;
};

/* Next byte of the input into *v: 0, or -1 when it is used up. */
int fz_u8(struct fz_in *in, uint8_t *v);

/* Next record of the input: 0, or -1 when the input is used up. */
int fz_next(struct fz_in *in, struct fz_rec *r);

/* The message of record r into out[0..cap): framed as a reply to (op,
 * req_id) under FZ_M_FRAME, else r's bytes as they are. Returns its length
 * (at most cap: longer messages are cut). */
size_t fz_build(const struct fz_rec *r, uint16_t op, uint32_t req_id, uint8_t *out, size_t cap);

#endif /* FUZZ_WIRE_H */
