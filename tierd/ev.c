/* SPDX-License-Identifier: MIT */
/*
 * ev.c - epoll loop. Handlers live in a table indexed by fd (fds are small
 * dense integers), so dispatch is an array access.
 */
#include <errno.h>
#include <stdbool.h>
#include <stdlib.h>
#include <sys/epoll.h>
#include <time.h>
#include <unistd.h>

#include "kvt_common.h"
#include "ev.h"

struct handler {
    ev_cb cb;  /* NULL: fd not watched */
    void *ctx;
};

struct ev_loop {
    int epfd;
    bool stop;
    int cap;               /* entries in h */
    int spin_us;           /* busy-poll this long after activity before sleeping */
    struct handler *h;     /* indexed by fd */
};

int ev_loop_create(struct ev_loop **out)
{
    struct ev_loop *l = calloc(1, sizeof(*l));

    if (!l)
        return -ENOMEM;
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0) {
        int rc = -errno;

        free(l);
        return rc;
    }
    *out = l;
    return 0;
}

void ev_loop_destroy(struct ev_loop *l)
{
    if (!l)
        return;
    close(l->epfd);
    free(l->h);
    free(l);
}

int ev_add(struct ev_loop *l, int fd, ev_cb cb, void *ctx)
{
    struct epoll_event e = { .events = EPOLLIN, .data.fd = fd };

    if (fd >= l->cap) {
        int n = l->cap ? l->cap : 64;
        struct handler *h;

        while (n <= fd)
            n *= 2;
        h = realloc(l->h, (size_t)n * sizeof(*h));
        if (!h)
            return -ENOMEM;
        for (int i = l->cap; i < n; i++)
            h[i] = (struct handler){ 0 };
        l->h = h;
        l->cap = n;
    }
    if (epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &e) < 0)
        return -errno;
    l->h[fd] = (struct handler){ cb, ctx };
    return 0;
}

void ev_del(struct ev_loop *l, int fd)
{
    epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL);
    if (fd < l->cap)
        l->h[fd] = (struct handler){ 0 };
}

void ev_set_spin(struct ev_loop *l, int spin_us)
{
    l->spin_us = spin_us;
}

int ev_run(struct ev_loop *l, void (*idle)(void *ctx), void *ctx)
{
    struct epoll_event ev[64];
    uint64_t spin_until = 0;

    l->stop = false;
    while (!l->stop) {
        /* after activity, poll without sleeping for a while: a client's next
         * request (commit after its copy, get after commit) usually comes
         * within ~100 us, and a sleeping daemon costs each request a wake-up
         * on another CPU, as much again as the request itself */
        int n = epoll_wait(l->epfd, ev, 64, spin_until ? 0 : -1);

        if (n == 0 && spin_until) {
            if (cmn_now_ns() >= spin_until)
                spin_until = 0;
            continue;
        }
        if (n > 0 && l->spin_us > 0)
            spin_until = cmn_now_ns() + (uint64_t)l->spin_us * 1000u;

        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -errno;
        }
        for (int i = 0; i < n; i++) {
            int fd = ev[i].data.fd;

            /* a handler earlier in this batch may have dropped fd */
            if (fd < l->cap && l->h[fd].cb)
                l->h[fd].cb(l, fd, ev[i].events, l->h[fd].ctx);
        }
        if (idle)
            idle(ctx);
    }
    return 0;
}

void ev_stop(struct ev_loop *l)
{
    l->stop = true;
}
