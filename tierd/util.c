/* SPDX-License-Identifier: MIT */
/*
 * util.c - what every part of tierd uses: the log, the clock, the
 * parsers shared by the command line and the config file, and the check of
 * the folders it writes in.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "tierd.h"

bool tierd_quiet;

void tierd_log(const char *fmt, ...)
{
    va_list ap;

    if (tierd_quiet)
        return;
    /* one line at a time: the remote tier's workers log from their threads */
    flockfile(stderr);
    fputs("tierd: ", stderr);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
    funlockfile(stderr);
}

uint64_t tierd_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
}

uint64_t tierd_parse_size(const char *s)
{
    char *end;
    unsigned long long v;
    int shift = 0;

    errno = 0;
    v = strtoull(s, &end, 10);
    if (errno || end == s || *s == '-')
        return 0;
    switch (*end) {
    case 'k': case 'K': shift = 10; end++; break;
    case 'm': case 'M': shift = 20; end++; break;
    case 'g': case 'G': shift = 30; end++; break;
    case 't': case 'T': shift = 40; end++; break;
    }
    if (*end == 'i' || *end == 'B')
        end += (*end == 'i' && end[1] == 'B') ? 2 : 1;
    if (*end || v > (UINT64_MAX >> shift))
        return 0;
    return (uint64_t)v << shift;
}

int tierd_parse_policy(const char *s, enum tier_remote_policy *out)
{
    if (strcmp(s, "write-through") == 0)
        *out = TIER_REMOTE_WRITE_THROUGH;
    else if (strcmp(s, "on-demotion") == 0)
        *out = TIER_REMOTE_ON_DEMOTION;
    else
        return -EINVAL;
    return 0;
}

int tierd_parse_ns_filter(const char *s, struct tierd_remote *r)
{
    if (strcmp(s, "all") == 0 || strcmp(s, "*") == 0)
        s = "";
    if (strlen(s) >= sizeof(r->ns_prefix))
        return -EINVAL;
    strcpy(r->ns_prefix, s);
    return 0;
}

/* One folder on the way to a data folder: another user who may write it
 * could swap what lies below (a sticky folder, /tmp, lets nobody rename
 * what is ours). */
static int ancestor_ok(const char *path, const struct stat *st, char *why, size_t cap)
{
    if (st->st_uid != 0 && st->st_uid != geteuid()) {
        snprintf(why, cap, "%s belongs to uid %u, neither root nor us", path,
                 (unsigned)st->st_uid);
        return -EPERM;
    }
    if ((st->st_mode & (S_IWGRP | S_IWOTH)) && !(st->st_mode & S_ISVTX)) {
        snprintf(why, cap, "%s is writable by %s (mode %04o)", path,
                 st->st_mode & S_IWOTH ? "every user" : "its group",
                 (unsigned)(st->st_mode & 07777));
        return -EPERM;
    }
    return 0;
}

int tierd_dir_safe(const char *path, char *why, size_t cap)
{
    char real[PATH_MAX], part[PATH_MAX];
    struct stat st;
    int fd, rc;

    /* the folder itself, not a link to one: opened without following */
    fd = open(path, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0) {
        rc = -errno;
        snprintf(why, cap, "%s: %s", path,
                 rc == -ELOOP || rc == -ENOTDIR ? "not a folder (a symbolic link or a file)"
                                                : strerror(-rc));
        return rc;
    }
    rc = fstat(fd, &st) < 0 ? -errno : 0;
    close(fd);
    if (rc < 0) {
        snprintf(why, cap, "%s: %s", path, strerror(-rc));
        return rc;
    }
    if (st.st_uid != geteuid()) {
        snprintf(why, cap, "%s belongs to uid %u, not to us (uid %u): chown it, or use "
                 "another --data", path, (unsigned)st.st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if (st.st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, cap, "%s is writable by %s (mode %04o): chmod go-w it", path,
                 st.st_mode & S_IWOTH ? "every user" : "its group",
                 (unsigned)(st.st_mode & 07777));
        return -EPERM;
    }
    /* and every folder above it */
    if (!realpath(path, real)) {
        rc = -errno;
        snprintf(why, cap, "%s: %s", path, strerror(-rc));
        return rc;
    }
    for (char *slash = strrchr(real, '/'); slash; slash = strrchr(real, '/')) {
        size_t n = slash == real ? 1 : (size_t)(slash - real);

        memcpy(part, real, n);
        part[n] = 0;
        if (stat(part, &st) < 0) {
            rc = -errno;
            snprintf(why, cap, "%s: %s", part, strerror(-rc));
            return rc;
        }
        rc = ancestor_ok(part, &st, why, cap);
        if (rc < 0)
            return rc;
        if (slash == real)
            break;
        *slash = 0;
    }
    return 0;
}
