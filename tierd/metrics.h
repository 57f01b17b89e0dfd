/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - the Prometheus page: GET /metrics on a loopback HTTP port
 * (libmicrohttpd, driven from tierd's epoll loop, no thread of its own), and
 * the request latency histograms it shows. It reads the store's counters and
 * the namespaces' on the loop's thread when a scrape comes; it changes
 * nothing. Off unless --metrics-port is given.
 */
#ifndef METRICS_H
#define METRICS_H

#include <stdint.h>

struct tierd;
struct ev_loop;
struct metrics;

/* Bind addr:port (an IPv4 address, normally "127.0.0.1") and set up the
 * HTTP server, serving nothing until metrics_attach. d is read at every
 * scrape and must outlive the server. Returns 0, -EADDRINUSE (the port is
 * taken), -EINVAL (addr is not an IPv4 address), -EACCES, -ENOMEM, or the
 * errno of socket/bind/listen; -EIO when libmicrohttpd refuses to start. */
int metrics_open(struct tierd *d, const char *addr, uint16_t port, struct metrics **out);

/* Watch the server's fds on loop l (its epoll fd and a timerfd for its
 * timeouts). 0 or -errno. */
int metrics_attach(struct metrics *m, struct ev_loop *l);

/* Stop serving: drops open HTTP connections, unwatches and closes every fd.
 * NULL ok. */
void metrics_close(struct metrics *m);

/* Request latency, for kvtier_request_duration_seconds. metrics_req_start
 * returns the CLOCK_MONOTONIC time in ns (0 when m is NULL: metrics off,
 * nothing measured); metrics_req_done adds now - t0 to op's histogram (op:
 * enum kvt_wire_op; others and t0 == 0 are ignored). Loop thread only. */
uint64_t metrics_req_start(const struct metrics *m);
void metrics_req_done(struct metrics *m, uint16_t op, uint64_t t0);

#endif /* METRICS_H */
