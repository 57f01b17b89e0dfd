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

struct walk {
    const char *path;     /* the path asked about, for messages */
    char *why;            /* the caller's message buffer, cap bytes */
    size_t cap;
    char todo[PATH_MAX];  /* what is left to walk, below done */
    char done[PATH_MAX];  /* the folder reached, as a path */
    int fds[WALK_DEPTH];  /* the folders from "/" to done, held open (O_PATH) */
    int depth, links;     /* fds held; links followed so far */
};

static int walk_fail(struct walk *w, int rc, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Say why in w->why; returns rc, for `return walk_fail(...)`. */
static int walk_fail(struct walk *w, int rc, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(w->why, w->cap, fmt, ap);
    va_end(ap);
    return rc;
}

/* The walk set up at "/", with the absolute form of path left to walk. */
static int walk_start(struct walk *w, const char *path)
{
    struct stat st;
    int rc;

    if (path[0] != '/') {
        if (!getcwd(w->done, sizeof(w->done)) ||
            snprintf(w->todo, sizeof(w->todo), "%s/%s", w->done, path) >= (int)sizeof(w->todo))
            return walk_fail(w, -ENAMETOOLONG, "%s: path too long", path);
    } else if (snprintf(w->todo, sizeof(w->todo), "%s", path) >= (int)sizeof(w->todo)) {
        return walk_fail(w, -ENAMETOOLONG, "%s: path too long", path);
    }
    strcpy(w->done, "/");
    w->fds[w->depth++] = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
    if (w->fds[0] < 0 || fstat(w->fds[0], &st) < 0) {
        rc = -errno;
        return walk_fail(w, rc, "/: %s", strerror(-rc));
    }
    return ancestor_ok("/", &st, w->why, w->cap);
}

/* Component c (next: its path) is a link, fd its O_PATH descriptor (closed
 * here), rest what follows it: in a folder already checked, and root's or
 * ours (in a sticky folder, another user's link is theirs to re-point at
 * any time), it is followed, from where it points. 0, or the error. */
static int follow_link(struct walk *w, const char *c, const char *rest, char *next,
                       const struct stat *st, int fd)
{
    char link[PATH_MAX];
    ssize_t len = readlinkat(w->fds[w->depth - 1], c, link, sizeof(link) - 1);
    int rc;

    close(fd);
    if (st->st_uid != 0 && st->st_uid != geteuid())
        return walk_fail(w, -EPERM, "%s is a symbolic link of uid %u, neither root nor us",
                         next, (unsigned)st->st_uid);
    if (len < 0 || ++w->links > WALK_LINKS) {
        rc = len < 0 ? -errno : -ELOOP;
        return walk_fail(w, rc, "%s: %s", next, strerror(-rc));
    }
    link[len] = 0;
    /* next is PATH_MAX bytes (walk_step's) */
    if (snprintf(next, PATH_MAX, "%s/%s", link, rest) >= PATH_MAX)
        return walk_fail(w, -ENAMETOOLONG, "%s: path too long", w->path);
    strcpy(w->todo, next);
    if (link[0] == '/') {
        while (w->depth > 1)
            close(w->fds[--w->depth]);
        strcpy(w->done, "/");
    }
    return 0;
}

/* One component of w->todo walked: 0 to go on, 1 when none is left, or
 * the error (w->why says it). */
static int walk_step(struct walk *w)
{
    char next[PATH_MAX], *c = w->todo, *rest;
    struct stat st;
    size_t n;
    int fd, rc;

    while (*c == '/')
        c++;
    if (!*c)
        return 1;
    rest = strchr(c, '/');
    n = rest ? (size_t)(rest - c) : strlen(c);
    c[n] = 0;
    rest = rest ? c + n + 1 : c + n;
    if (strcmp(c, ".") == 0 || strcmp(c, "..") == 0) {
        if (strcmp(c, "..") == 0 && w->depth > 1) { /* ".." of "/" is "/" */
            close(w->fds[--w->depth]);
            *strrchr(w->done, '/') = 0;
            if (!w->done[0])
                strcpy(w->done, "/");
        }
        memmove(w->todo, rest, strlen(rest) + 1);
        return 0;
    }
    if (snprintf(next, sizeof(next), "%s%s%s", w->done, strcmp(w->done, "/") ? "/" : "", c) >=
        (int)sizeof(next))
        return walk_fail(w, -ENAMETOOLONG, "%s: path too long", w->path);
    fd = openat(w->fds[w->depth - 1], c, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0 || fstat(fd, &st) < 0) {
        rc = -errno;
        if (fd >= 0)
            close(fd);
        return walk_fail(w, rc, "%s: %s", next, strerror(-rc));
    }
    if (S_ISLNK(st.st_mode))
        return follow_link(w, c, rest, next, &st, fd);
    if (!S_ISDIR(st.st_mode)) {
        close(fd);
        return walk_fail(w, -ENOTDIR, "%s: not a folder", next);
    }
    memmove(w->todo, rest, strlen(rest) + 1);
    while (w->todo[0] == '/')
        memmove(w->todo, w->todo + 1, strlen(w->todo));
    if (w->depth == WALK_DEPTH) {
        close(fd);
        return walk_fail(w, -ENAMETOOLONG, "%s: too deep", w->path);
    }
    w->fds[w->depth++] = fd;
    strcpy(w->done, next);
    return ancestor_ok(w->done, &st, w->why, w->cap);
}

/* What want asks of the folder the walk ended in (after "..", or ".",
 * too). 0, or the error. */
static int walk_end_ok(struct walk *w, enum tierd_dir_want want)
{
    struct stat st;
    int rc;

    if (want == TIERD_DIR_ON_THE_WAY)
        return 0;
    if (fstat(w->fds[w->depth - 1], &st) < 0) {
        rc = -errno;
        return walk_fail(w, rc, "%s: %s", w->done, strerror(-rc));
    }
    if (want == TIERD_DIR_OURS)
        return own_ok(w->done, &st, w->why, w->cap);
    if (st.st_mode & (S_IWGRP | S_IWOTH)) /* even sticky: anyone could take a name in it
                                             while we are down */
        return walk_fail(w, -EPERM, "%s is writable by %s (mode %04o): chmod go-w it, or use "
                         "another folder", w->done,
                         st.st_mode & S_IWOTH ? "every user" : "its group",
                         (unsigned)(st.st_mode & 07777));
    return 0;
}

int tierd_dir_safe(const char *path, enum tierd_dir_want want, char *why, size_t cap)
{
    struct walk w = { .path = path, .why = why, .cap = cap };
    int rc = walk_start(&w, path);

    /* one component at a time, links never followed blindly: each folder
     * reached, a link's target included, is checked before anything below
     * it is looked at, so no one but root and us can change the way */
    while (rc == 0)
        rc = walk_step(&w);
    if (rc == 1)
        rc = walk_end_ok(&w, want);
    while (w.depth > 0)
        if (w.fds[--w.depth] >= 0)
            close(w.fds[w.depth]);
    return rc;
}
