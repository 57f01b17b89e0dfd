/* SPDX-License-Identifier: MIT */
/*
 * t_wire.h - raw protocol frames for the tests that play a client by hand
 * (a malformed or hostile one, or a fake tierd): a SOCK_SEQPACKET
 * connection to tierd, a well-formed header, one message sent exactly as
 * given (a descriptor passed with it if asked), one received with the
 * descriptor it may carry. No assertions: the callers decide what a
 * refusal means. The wire layout is client/kvt_wire.h's.
 */
#ifndef T_WIRE_H
#define T_WIRE_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvt_wire.h"

#define T_WIRE_HDR sizeof(struct kvt_wire_hdr)

/* Connect to tierd's socket at path: the descriptor, or -errno
 * (-ENAMETOOLONG for a path sun_path cannot hold). */
int t_wire_connect(const char *path);
/* A well-formed request header: magic, version, op, req_id, flags and a
 * body of blen bytes. */
struct kvt_wire_hdr t_wire_hdr(uint16_t op, uint32_t req_id, uint32_t flags, size_t blen);
/* Send one message made of a then b (either may be empty), exactly as given
 * (MSG_NOSIGNAL): the bytes sent, or -errno. */
ssize_t t_wire_send2(int fd, const void *a, size_t alen, const void *b, size_t blen);
/* t_wire_send2 passing descriptor pass_fd with it (SCM_RIGHTS; none when
 * pass_fd < 0), with flags (MSG_DONTWAIT, ...) besides MSG_NOSIGNAL. */
ssize_t t_wire_send_fd(int fd, const void *a, size_t alen, const void *b, size_t blen,
                       int pass_fd, int flags);
/* Receive one message, waiting up to ms: its length (header included), 0
 * when tierd closed the connection, -ETIMEDOUT, or -errno. The header goes
 * to *h (zeroed when the message is shorter than one), up to cap body bytes
 * to body (may be NULL). A passed descriptor goes to *pass_fd (-1 when
 * none came); with pass_fd NULL it is closed. */
ssize_t t_wire_recv(int fd, struct kvt_wire_hdr *h, void *body, size_t cap, int *pass_fd, int ms);

#endif /* T_WIRE_H */
