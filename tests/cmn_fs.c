/* SPDX-License-Identifier: MIT */
/*
 * cmn_fs.c - common/'s temp folders (under $TMPDIR) and tree removal
 * (nftw: a link is removed, never what it points at), and its children
 * (the status of one that exits or is signalled, a stop that escalates).
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvt_common.h"
#include "t.h"

static void touch(const char *dir, const char *name)
{
    char p[PATH_MAX + 64];
    int fd;

    snprintf(p, sizeof(p), "%s/%s", dir, name);
    fd = open(p, O_WRONLY | O_CREAT | O_EXCL, 0600);
    cr_assert_geq(fd, 0, "%s: %s", p, strerror(errno));
    close(fd);
}

Test(cmn_fs, tmpdir_honours_TMPDIR)
{
    char base[256], made[PATH_MAX];
    struct stat st;

    t_tmpdir("kvt-cmn-base", base, sizeof(base));
    setenv("TMPDIR", base, 1);
    cr_assert_eq(cmn_tmpdir("kvt-cmn", made, sizeof(made)), 0);
    unsetenv("TMPDIR");
    cr_expect_eq(strncmp(made, base, strlen(base)), 0, "%s is not under %s", made, base);
    cr_expect(strstr(made, "/kvt-cmn-") != NULL, "%s", made);
    cr_assert_eq(stat(made, &st), 0);
    cr_expect(S_ISDIR(st.st_mode) && (st.st_mode & 0777) == 0700, "mode %o", st.st_mode);
    cr_expect_eq(cmn_tmpdir("kvt-cmn", made, 8), -ENAMETOOLONG);
    t_rmtree(base);
    cr_expect_eq(access(base, F_OK), -1, "%s still there", base);
}

Test(cmn_fs, rmtree_removes_a_tree_and_keeps_what_links_point_at)
{
    char outside[256], tree[256], p[PATH_MAX], q[PATH_MAX];

    t_tmpdir("kvt-cmn-keep", outside, sizeof(outside));
    touch(outside, "precious");
    t_tmpdir("kvt-cmn-tree", tree, sizeof(tree));
    snprintf(p, sizeof(p), "%s/a", tree);
    cr_assert_eq(mkdir(p, 0700), 0);
    snprintf(p, sizeof(p), "%s/a/b", tree);
    cr_assert_eq(mkdir(p, 0700), 0);
    touch(p, "f");
    touch(tree, "g");
    snprintf(p, sizeof(p), "%s/a/link", tree);
    cr_assert_eq(symlink(outside, p), 0);
    cr_assert_eq(cmn_rmtree(tree), 0);
    cr_expect_eq(access(tree, F_OK), -1, "%s still there", tree);
    snprintf(q, sizeof(q), "%s/precious", outside);
    cr_expect_eq(access(q, F_OK), 0, "a link's target went with the tree");
    cr_expect_eq(cmn_rmtree(tree), 0, "a tree already gone is no error");
    t_rmtree(outside);
}

Test(cmn_fs, children_report_their_status)
{
    const char *const ok[] = { "/bin/sh", "-c", "exit 3", NULL };
    const char *const sleeper[] = { "/bin/sh", "-c", "trap '' TERM; sleep 30", NULL };
    const char *const missing[] = { "/no/such/program", NULL };
    char dir[256], log[300], buf[256] = "";
    pid_t pid;
    int st = -1, fd;

    cr_assert_eq(cmn_wait(pid = cmn_spawn(ok, NULL, 0)), 3);
    t_tmpdir("kvt-cmn-log", dir, sizeof(dir));
    snprintf(log, sizeof(log), "%s/log", dir);
    cr_assert_eq(cmn_wait(cmn_spawn(missing, log, 0)), 127);
    fd = open(log, O_RDONLY);
    cr_assert_geq(fd, 0);
    cr_expect_gt(read(fd, buf, sizeof(buf) - 1), 0);
    close(fd);
    cr_expect(strstr(buf, "/no/such/program") != NULL, "log: %s", buf);
    pid = cmn_spawn(sleeper, NULL, 0);
    cr_assert_gt(pid, 0);
    cr_expect(!cmn_exited(pid, &st), "exited early: %d", st);
    usleep(100000); /* the trap is set */
    cr_expect_eq(cmn_stop(pid, 200), -ETIMEDOUT, "SIGTERM is ignored: the stop escalates");
    cr_expect_eq(kill(pid, 0), -1, "still running after the stop");
    t_rmtree(dir);
}

Test(cmn_fs, free_port_is_bindable)
{
    int port = cmn_free_port();

    cr_assert_gt(port, 0, "cmn_free_port: %d", port);
    cr_assert_lt(port, 65536);
}
