/* SPDX-License-Identifier: MIT */
/*
 * ev.h - tierd's event loop: one epoll instance, one thread, callbacks per
 * file descriptor (the Redis ae model, without timers until they are needed).
 */
#ifndef EV_H
#define EV_H

#include <stdint.h>

struct ev_loop;

/* Called with the epoll events (EPOLLIN, EPOLLHUP, ...) of fd. */
typedef void (*ev_cb)(struct ev_loop *l, int fd, uint32_t events, void *ctx);

int ev_loop_create(struct ev_loop **out);
void ev_loop_destroy(struct ev_loop *l); /* NULL ok; closes no registered fd */

/* Watch fd for readability; cb(ctx) runs from ev_run. -errno on failure. */
int ev_add(struct ev_loop *l, int fd, ev_cb cb, void *ctx);
/* Stop watching fd (before closing it). */
void ev_del(struct ev_loop *l, int fd);

/* Dispatch events until ev_stop(); after each batch of events, idle(ctx)
 * runs (background work such as eviction). Returns 0 or -errno. */
int ev_run(struct ev_loop *l, void (*idle)(void *ctx), void *ctx);
void ev_stop(struct ev_loop *l);

/* After handling events, keep polling without sleeping for spin_us
 * microseconds (0: always sleep). Trades a little CPU for latency. */
void ev_set_spin(struct ev_loop *l, int spin_us);

#endif /* EV_H */
