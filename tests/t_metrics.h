/* SPDX-License-Identifier: MIT */
/*
 * t_metrics.h - the metrics page as tests read it: free loopback ports, a
 * plain HTTP/1.0 GET over a TCP socket (a few lines, no library), and the
 * value of one sample of a Prometheus text page. Shared by tierd_metrics.c
 * and tierd_metrics_sec.c; loopback only.
 */
#ifndef T_METRICS_H
#define T_METRICS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* A loopback port that was free when we looked (the kernel hands ports out
 * in a rotating order, so it stays free for the moment a test needs). */
uint16_t t_metrics_free_port(void);

/* A loopback TCP socket listening on a port the kernel picked (to hold it:
 * "port in use"); the port in *port. Fails the test on error. */
int t_metrics_hold_port(uint16_t *port);

/* GET path from 127.0.0.1:port with the extra header lines hdrs (each
 * ending in "\r\n"; NULL: none), waiting at most 10 s for each read (60 s
 * under valgrind). Returns the HTTP status, -1 when no whole answer came.
 * *head gets the status line and headers, *body the body (both malloc'd,
 * NUL-terminated, NULL on failure; pass NULL for either to drop it). */
int t_metrics_get(uint16_t port, const char *path, const char *hdrs, char **head,
                  char **body);
/* The same, waiting at most secs for the connection and each read. */
int t_metrics_get_within(uint16_t port, const char *path, const char *hdrs, int secs,
                         char **head, char **body);

/* Copy the value of header name (case-insensitive) in head into out;
 * false when head has no such header. */
bool t_metrics_header(const char *head, const char *name, char *out, size_t cap);

/* The value of the sample whose line starts with prefix (a name and its
 * first labels, e.g. `x_total{ns="a"`) followed by ',', '}' or ' '; NAN
 * when there is none. */
double t_metrics_sample(const char *page, const char *prefix);

#endif /* T_METRICS_H */
