/* SPDX-License-Identifier: MIT */
/*
 * t_wire.c - raw protocol frames for the hand-played clients (t_wire.h).
 */
#include <errno.h>
#include <poll.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include "t_wire.h"

int t_wire_connect(const char *path)
{
    struct sockaddr_un a = { .sun_family = AF_UNIX };
    int fd, rc;

    if (strlen(path) >= sizeof(a.sun_path))
        return -ENAMETOOLONG;
    memcpy(a.sun_path, path, strlen(path) + 1);
    fd = socket(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

struct kvt_wire_hdr t_wire_hdr(uint16_t op, uint32_t req_id, uint32_t flags, size_t blen)
{
    return (struct kvt_wire_hdr){
        .magic = KVT_WIRE_MAGIC, .version = KVT_WIRE_VERSION, .op = op, .req_id = req_id,
        .body_len = (uint32_t)blen, .flags = flags,
    };
}

ssize_t t_wire_send_fd(int fd, const void *a, size_t alen, const void *b, size_t blen,
                       int pass_fd, int flags)
{
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm = { { 0 } }; /* padding too: memcheck reads all of msg_control */
    struct iovec iov[2] = { { (void *)a, alen }, { (void *)b, blen } };
    struct msghdr m = { .msg_iov = iov, .msg_iovlen = 2 };
    ssize_t r;

    if (pass_fd >= 0) {
        m.msg_control = cm.b;
        m.msg_controllen = sizeof(cm.b);
        *CMSG_FIRSTHDR(&m) = (struct cmsghdr){ .cmsg_len = CMSG_LEN(sizeof(int)),
                                               .cmsg_level = SOL_SOCKET,
                                               .cmsg_type = SCM_RIGHTS };
        memcpy(CMSG_DATA(CMSG_FIRSTHDR(&m)), &pass_fd, sizeof(pass_fd));
    }
    r = sendmsg(fd, &m, MSG_NOSIGNAL | flags);
    return r < 0 ? -errno : r;
}

ssize_t t_wire_send2(int fd, const void *a, size_t alen, const void *b, size_t blen)
{
    return t_wire_send_fd(fd, a, alen, b, blen, -1, 0);
}

ssize_t t_wire_recv(int fd, struct kvt_wire_hdr *h, void *body, size_t cap, int *pass_fd, int ms)
{
    static _Alignas(16) uint8_t buf[KVT_WIRE_MSG_MAX + 64];
    union {
        char b[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
    } cm;
    struct iovec iov = { buf, sizeof(buf) };
    struct msghdr m = { .msg_iov = &iov, .msg_iovlen = 1, .msg_control = cm.b,
                        .msg_controllen = sizeof(cm.b) };
    struct pollfd p = { .fd = fd, .events = POLLIN };
    ssize_t r;

    if (pass_fd)
        *pass_fd = -1;
    if (poll(&p, 1, ms) != 1)
        return -ETIMEDOUT;
    r = recvmsg(fd, &m, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    if (r < 0)
        return -errno;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(&m); c; c = CMSG_NXTHDR(&m, c))
        if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_RIGHTS) {
            int pfd;

            memcpy(&pfd, CMSG_DATA(c), sizeof(pfd));
            if (pass_fd && *pass_fd < 0)
                *pass_fd = pfd;
            else
                close(pfd);
        }
    memset(h, 0, sizeof(*h));
    if ((size_t)r >= T_WIRE_HDR) {
        memcpy(h, buf, T_WIRE_HDR);
        if (body && cap)
            memcpy(body, buf + T_WIRE_HDR,
                   (size_t)r - T_WIRE_HDR < cap ? (size_t)r - T_WIRE_HDR : cap);
    }
    return r;
}
