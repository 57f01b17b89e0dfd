/* SPDX-License-Identifier: MIT */
/*
 * sess.h - client sessions: accept, decode and check each message, call
 * the store, reply; reclaim leases and reservations when a client goes.
 */
#ifndef SESS_H
#define SESS_H

#include <stddef.h> /* NULL */
#include <stdint.h>

struct tierd;
struct ev_loop;

/* The listening socket's callback: accepts pending connections. */
void sess_on_accept(struct ev_loop *l, int fd, uint32_t events, void *ctx);

/* Set up what sessions share (the deadline timer) on d's loop. */
int sess_init(struct tierd *d);

/* A session's gets, lookups and durable commits wait for the remote tier
 * and the disk inside the store (tier_req_submit), which tells the session
 * only their outcome: tierd sets no ready or remote_done callback. */

/* Answer the gets whose deadline has passed, now: called before disk
 * completions are delivered, so that a block that came in after its get's
 * deadline counts as late even when the daemon looks at both at once. */
void sess_expire(void);

/* Answer the FLUSH requests waiting, once the store's flush has ended:
 * called after each turn of the mover. */
void sess_flush_check(struct tierd *d);

/* Free the sessions closed since the last call: after each turn of the
 * loop, when no handler holds one. */
void sess_reap(void);

/* Close every session (at shutdown), reclaiming what they hold. */
void sess_close_all(struct tierd *d);

#endif /* SESS_H */
