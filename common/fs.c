/* SPDX-License-Identifier: MIT */
/*
 * fs.c - temp folders and files under $TMPDIR, and removing a tree without
 * a shell (kvt_common.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <ftw.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "kvt_common.h"

/* <$TMPDIR or /tmp>/<tag>-XXXXXX into buf; 0 or -ENAMETOOLONG. */
static int tmp_name(const char *tag, char *buf, size_t cap)
{
    const char *base = getenv("TMPDIR");
    int n;

    if (!base || !*base)
        base = "/tmp";
    n = snprintf(buf, cap, "%s/%s-XXXXXX", base, tag);
    return n < 0 || (size_t)n >= cap ? -ENAMETOOLONG : 0;
}

int cmn_tmpdir(const char *tag, char *buf, size_t cap)
{
    int rc = tmp_name(tag, buf, cap);

    if (rc == 0 && !mkdtemp(buf))
        rc = -errno;
    return rc;
}

int cmn_tmpfile(const char *tag, char *buf, size_t cap)
{
    int rc = tmp_name(tag, buf, cap), fd;

    if (rc < 0)
        return rc;
    fd = mkostemp(buf, O_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

/* nftw's callback has no context argument: the walk's first failure goes
 * here (one walk at a time per thread). */
static _Thread_local int rm_err;

static int rm_one(const char *path, const struct stat *sb, int flag, struct FTW *ftw)
{
    (void)sb, (void)ftw;
    if (flag == FTW_NS || flag == FTW_DNR) {
        if (!rm_err)
            rm_err = -EACCES;
    }
    if (remove(path) < 0 && errno != ENOENT && !rm_err)
        rm_err = -errno;
    return 0; /* go on: remove all that can be removed */
}

int cmn_rmtree(const char *path)
{
    rm_err = 0;
    if (nftw(path, rm_one, 16, FTW_DEPTH | FTW_PHYS) < 0 && errno != ENOENT && !rm_err)
        rm_err = -errno;
    return rm_err;
}
