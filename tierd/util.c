/* SPDX-License-Identifier: MIT */
/*
 * util.c - what every part of tierd uses: the log, the parsers shared by
 * the command line and the config file (sizes: common/'s grammar), and the
 * check of the folders it writes in.
 */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
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

/* The folder tierd keeps its files in: ours, and no one else may write it. */
static int own_ok(const char *path, const struct stat *st, char *why, size_t cap)
{
    if (st->st_uid != geteuid()) {
        snprintf(why, cap, "%s belongs to uid %u, not to us (uid %u): chown it, or use "
                 "another folder", path, (unsigned)st->st_uid, (unsigned)geteuid());
        return -EPERM;
    }
    if (st->st_mode & (S_IWGRP | S_IWOTH)) {
        snprintf(why, cap, "%s is writable by %s (mode %04o): chmod go-w it", path,
                 st->st_mode & S_IWOTH ? "every user" : "its group",
                 (unsigned)(st->st_mode & 07777));
        return -EPERM;
    }
    return 0;
}

/* The walk of tierd_dir_safe: folders held open from "/" down, so that
 * ".." steps back up the folders actually walked. */
#define WALK_DEPTH 128
#define WALK_LINKS 40

int tierd_dir_safe(const char *path, enum tierd_dir_want want, char *why, size_t cap)
{
    char todo[PATH_MAX], next[PATH_MAX], done[PATH_MAX], link[PATH_MAX];
    int fds[WALK_DEPTH], depth = 0, links = 0, rc = 0;
    struct stat st;

    if (path[0] != '/') {
        if (!getcwd(done, sizeof(done)) ||
            snprintf(todo, sizeof(todo), "%s/%s", done, path) >= (int)sizeof(todo)) {
            snprintf(why, cap, "%s: path too long", path);
            return -ENAMETOOLONG;
        }
    } else if (snprintf(todo, sizeof(todo), "%s", path) >= (int)sizeof(todo)) {
        snprintf(why, cap, "%s: path too long", path);
        return -ENAMETOOLONG;
    }
    strcpy(done, "/");
    fds[depth++] = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (fds[0] < 0 || fstat(fds[0], &st) < 0) {
        rc = -errno;
        snprintf(why, cap, "/: %s", strerror(-rc));
        goto out;
    }
    rc = ancestor_ok("/", &st, why, cap);
    /* one component at a time, links never followed blindly: each folder
     * reached, a link's target included, is checked before anything below
     * it is looked at, so no one but root and us can change the way */
    while (rc == 0) {
        char *c = todo, *rest;
        size_t n;
        int fd;

        while (*c == '/')
            c++;
        if (!*c)
            break;
        rest = strchr(c, '/');
        n = rest ? (size_t)(rest - c) : strlen(c);
        c[n] = 0;
        rest = rest ? c + n + 1 : c + n;
        if (strcmp(c, ".") == 0 || (strcmp(c, "..") == 0 && depth == 1)) {
            memmove(todo, rest, strlen(rest) + 1);
            continue;
        }
        if (strcmp(c, "..") == 0) {
            close(fds[--depth]);
            *strrchr(done, '/') = 0;
            if (!done[0])
                strcpy(done, "/");
            memmove(todo, rest, strlen(rest) + 1);
            continue;
        }
        if (snprintf(next, sizeof(next), "%s%s%s", done, strcmp(done, "/") ? "/" : "", c) >=
            (int)sizeof(next)) {
            rc = -ENAMETOOLONG;
            snprintf(why, cap, "%s: path too long", path);
            break;
        }
        fd = openat(fds[depth - 1], c, O_PATH | O_NOFOLLOW | O_CLOEXEC);
        if (fd < 0 || fstat(fd, &st) < 0) {
            rc = -errno;
            snprintf(why, cap, "%s: %s", next, strerror(-rc));
            if (fd >= 0)
                close(fd);
            break;
        }
        if (S_ISLNK(st.st_mode)) {
            /* in a folder already checked, and root's or ours (in a sticky
             * folder, another user's link is theirs to re-point at any
             * time): follow it, from where it points */
            ssize_t len = readlinkat(fds[depth - 1], c, link, sizeof(link) - 1);

            close(fd);
            if (st.st_uid != 0 && st.st_uid != geteuid()) {
                rc = -EPERM;
                snprintf(why, cap, "%s is a symbolic link of uid %u, neither root nor us",
                         next, (unsigned)st.st_uid);
                break;
            }
            if (len < 0 || ++links > WALK_LINKS) {
                rc = len < 0 ? -errno : -ELOOP;
                snprintf(why, cap, "%s: %s", next, strerror(-rc));
                break;
            }
            link[len] = 0;
            if (snprintf(next, sizeof(next), "%s/%s", link, rest) >= (int)sizeof(next)) {
                rc = -ENAMETOOLONG;
                snprintf(why, cap, "%s: path too long", path);
                break;
            }
            strcpy(todo, next);
            if (link[0] == '/') {
                while (depth > 1)
                    close(fds[--depth]);
                strcpy(done, "/");
            }
            continue;
        }
        if (!S_ISDIR(st.st_mode)) {
            close(fd);
            rc = -ENOTDIR;
            snprintf(why, cap, "%s: not a folder", next);
            break;
        }
        memmove(todo, rest, strlen(rest) + 1);
        while (todo[0] == '/')
            memmove(todo, todo + 1, strlen(todo));
        if (depth == WALK_DEPTH) {
            close(fd);
            rc = -ENAMETOOLONG;
            snprintf(why, cap, "%s: too deep", path);
            break;
        }
        fds[depth++] = fd;
        strcpy(done, next);
        rc = ancestor_ok(done, &st, why, cap);
    }
    /* the folder the walk ended in (after "..", or ".", too) */
    if (rc == 0 && want != TIERD_DIR_ON_THE_WAY) {
        if (fstat(fds[depth - 1], &st) < 0) {
            rc = -errno;
            snprintf(why, cap, "%s: %s", done, strerror(-rc));
        } else if (want == TIERD_DIR_OURS) {
            rc = own_ok(done, &st, why, cap);
        } else if (rc == 0 && (st.st_mode & (S_IWGRP | S_IWOTH))) {
            rc = -EPERM; /* even sticky: anyone could take a name in it while we are down */
            snprintf(why, cap, "%s is writable by %s (mode %04o): chmod go-w it, or use "
                     "another folder", done, st.st_mode & S_IWOTH ? "every user" : "its group",
                     (unsigned)(st.st_mode & 07777));
        }
    }
out:
    while (depth > 0)
        if (fds[--depth] >= 0)
            close(fds[depth]);
    return rc;
}
