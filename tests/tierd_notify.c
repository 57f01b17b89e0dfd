/* SPDX-License-Identifier: MIT */
/*
 * tierd_notify.c - readiness under systemd (tierd.service, Type=notify):
 * with NOTIFY_SOCKET set, tierd's own process sends READY=1 there once
 * clients can connect (what systemd's NotifyAccess=main accepts). Without
 * it, nothing is sent: every other daemon test runs so.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "t.h"

Test(tierd_notify, tierd_sends_ready_from_its_own_pid_once_it_accepts_clients)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    char dir[96], msg[256]; /* dir: short enough for a socket path */
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(sizeof(struct ucred))];
    } ctl;
    struct iovec iov = { .iov_base = msg, .iov_len = sizeof(msg) - 1 };
    struct msghdr mh = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = ctl.buf,
                         .msg_controllen = sizeof(ctl.buf) };
    struct ucred *cred = NULL;
    struct pollfd p;
    struct t_tierd d;
    int fd, on = 1;
    ssize_t n;

    if (getenv("KVT_TEST_ATTACH"))
        cr_skip_test("KVT_TEST_ATTACH: this test starts its own tierd");
    t_tmpdir("kvt-notify", dir, sizeof(dir));
    snprintf(a.sun_path, sizeof(a.sun_path), "%s/notify", dir);
    fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    cr_assert_geq(fd, 0, "socket: %s", strerror(errno));
    /* the sender's credentials, as systemd reads them */
    cr_assert_eq(setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &on, sizeof(on)), 0);
    cr_assert_eq(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0, "bind: %s", strerror(errno));
    setenv("NOTIFY_SOCKET", a.sun_path, 1);
    t_tierd_start(&d, NULL); /* returns once a client got through HELLO */
    unsetenv("NOTIFY_SOCKET");
    p = (struct pollfd){ .fd = fd, .events = POLLIN };
    cr_assert_eq(poll(&p, 1, 10000), 1, "no message on NOTIFY_SOCKET within 10 s");
    n = recvmsg(fd, &mh, 0);
    cr_assert_gt(n, 0, "recvmsg: %s", strerror(errno));
    msg[n] = '\0';
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&mh); c; c = CMSG_NXTHDR(&mh, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS)
            cred = (struct ucred *)CMSG_DATA(c);
    cr_expect_str_eq(msg, "READY=1", "expected READY=1, got '%s'", msg);
    cr_assert_not_null(cred, "no sender credentials");
    cr_expect_eq(cred->pid, d.pid, "READY=1 from pid %d, not tierd's (%d)", (int)cred->pid,
                 (int)d.pid);
    /* one message: nothing else follows while tierd runs */
    cr_expect_eq(poll(&p, 1, 200), 0, "a second message on NOTIFY_SOCKET");
    t_tierd_stop(&d);
    close(fd);
    unlink(a.sun_path);
    rmdir(dir);
}
