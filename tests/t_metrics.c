/* SPDX-License-Identifier: MIT */
/*
 * t_metrics.c - the metrics page as tests read it (see t_metrics.h).
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "t_metrics.h"

/* A loopback TCP socket bound to a port the kernel picked; listening when
 * asked (to hold the port), else closed after reading the number. */
static int bind_any(uint16_t *port, bool keep)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t al = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    cr_assert(fd >= 0, "socket: %s", strerror(errno));
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0, "bind: %s", strerror(errno));
    cr_assert_eq(getsockname(fd, (struct sockaddr *)&a, &al), 0);
    *port = ntohs(a.sin_port);
    if (keep) {
        cr_assert_eq(listen(fd, 4), 0, "listen: %s", strerror(errno));
        return fd;
    }
    close(fd);
    return -1;
}

uint16_t t_metrics_free_port(void)
{
    uint16_t p;

    bind_any(&p, false);
    return p;
}

int t_metrics_hold_port(uint16_t *port)
{
    return bind_any(port, true);
}

int t_metrics_get(uint16_t port, const char *path, const char *hdrs, char **head,
                  char **body)
{
    return t_metrics_get_within(port, path, hdrs, getenv("KVT_TEST_VALGRIND") ? 60 : 10, head,
                                body);
}

int t_metrics_get_within(uint16_t port, const char *path, const char *hdrs, int secs,
                         char **head, char **body)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    struct timeval tv = { .tv_sec = secs };
    char req[2048], *buf = NULL, *hdr_end;
    size_t len = 0, cap = 0;
    int fd, status = -1;

    if (head)
        *head = NULL;
    if (body)
        *body = NULL;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    setsockopt(fd, SOL_SOCKET, SO_SNDTIMEO, &tv, sizeof(tv));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0)
        goto out;
    snprintf(req, sizeof(req), "GET %s HTTP/1.0\r\nHost: 127.0.0.1:%u\r\n%s\r\n", path, port,
             hdrs ? hdrs : "");
    if (write(fd, req, strlen(req)) != (ssize_t)strlen(req))
        goto out;
    for (;;) { /* HTTP/1.0: the body ends when the server closes */
        ssize_t r;

        if (cap - len < 4096) {
            cap = cap ? cap * 2 : 65536;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
        r = read(fd, buf + len, cap - len - 1);
        if (r < 0 && errno == EINTR)
            continue;
        if (r < 0)
            goto out;
        if (r == 0)
            break;
        len += (size_t)r;
    }
    buf[len] = 0;
    hdr_end = strstr(buf, "\r\n\r\n");
    if (!hdr_end || sscanf(buf, "HTTP/1.%*d %d", &status) != 1) {
        status = -1;
        goto out;
    }
    *hdr_end = 0;
    if (body)
        *body = strdup(hdr_end + 4);
    if (head)
        *head = strdup(buf);
out:
    free(buf);
    close(fd);
    return status;
}

bool t_metrics_header(const char *head, const char *name, char *out, size_t cap)
{
    size_t n = strlen(name);

    for (const char *l = strstr(head, "\r\n"); l; l = strstr(l, "\r\n")) {
        l += 2;
        if (strncasecmp(l, name, n) == 0 && l[n] == ':') {
            const char *v = l + n + 1;
            size_t k;

            v += strspn(v, " \t");
            k = strcspn(v, "\r");
            k = k < cap ? k : cap - 1;
            memcpy(out, v, k);
            out[k] = 0;
            return true;
        }
    }
    return false;
}

double t_metrics_sample(const char *page, const char *prefix)
{
    size_t n = strlen(prefix);

    for (const char *l = page; *l;) {
        const char *nl = strchr(l, '\n');

        if (strncmp(l, prefix, n) == 0 && l[n] && strchr(",} ", l[n])) {
            const char *v = strchr(l + n, ' ');

            return v ? strtod(v + 1, NULL) : NAN;
        }
        if (!nl)
            break;
        l = nl + 1;
    }
    return NAN;
}
