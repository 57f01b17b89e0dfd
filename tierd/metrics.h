/* SPDX-License-Identifier: MIT */
/*
 * metrics.h - the Prometheus page: GET /metrics on a loopback HTTP port
 * (libmicrohttpd in a thread of its own), and the request latency
 * histograms it shows. The server's thread reads nothing of tierd's: at
 * each scrape it asks the event loop for a snapshot of the counters, which
 * the loop copies on its own thread, and prints the page from that copy.
 * It changes nothing. Off unless --metrics-port is given.
 */
#ifndef METRICS_H
#define METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct tierd;
struct ev_loop;
struct metrics;

#define METRICS_MAX_NS_DEFAULT 512 /* --metrics-max-namespaces: about 2 MiB of page */
#define METRICS_MAX_NS_LIMIT 65536
#define METRICS_TOKEN_MAX 4096     /* bytes of a bearer token */

/* The --metrics-* options. */
struct metrics_cfg {
    const char *addr;       /* IPv4 address to bind, normally "127.0.0.1" */
    uint16_t port;
    const char *token_file; /* NULL: none; else every request must carry
                               "Authorization: Bearer <its contents>" */
    bool no_model_ids;      /* label namespaces "<tenant>/<id>", never by model */
    uint32_t max_ns;        /* namespaces (over all tenants, in tenant and id order)
                               with series of their own; each tenant's others are
                               summed into one. At most METRICS_MAX_NS_LIMIT */
};

/* Read the token file (a regular file no one but its owner may access,
 * one line of visible ASCII, a trailing newline dropped), bind
 * cfg->addr:port and start the HTTP server, which answers 503 until
 * metrics_attach. d must outlive the server; only the loop's thread reads
 * it. Returns 0; -EADDRINUSE (the port is taken); -EINVAL (a bad token
 * file: open to group or others, empty, too long, not one word; or addr is
 * not an IPv4 address); the errno of open/read of the token file (-ENOENT:
 * none); -EACCES, -ENOMEM or the errno of socket/bind/listen; -EIO when
 * libmicrohttpd refuses to start. On failure err (cap bytes) gets a line
 * naming the option, the file or port, and what is wrong. */
int metrics_open(struct tierd *d, const struct metrics_cfg *cfg, char *err, size_t cap,
                 struct metrics **out);

/* Serve snapshots from loop l (an eventfd the server's thread signals when
 * a scrape comes). Loop thread. 0 or -errno. */
int metrics_attach(struct metrics *m, struct ev_loop *l);

/* Stop serving: drops open HTTP connections, joins the server's thread,
 * unwatches and closes every fd, forgets the token. Loop thread. NULL ok. */
void metrics_close(struct metrics *m);

/* Request latency, for kvtier_request_duration_seconds. metrics_req_start
 * returns the CLOCK_MONOTONIC time in ns (0 when m is NULL: metrics off,
 * nothing measured); metrics_req_done adds now - t0 to op's histogram (op:
 * enum kvt_wire_op; others and t0 == 0 are ignored). Loop thread only. */
uint64_t metrics_req_start(const struct metrics *m);
void metrics_req_done(struct metrics *m, uint16_t op, uint64_t t0);

#endif /* METRICS_H */
