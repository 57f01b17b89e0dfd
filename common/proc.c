/* SPDX-License-Identifier: MIT */
/*
 * proc.c - children: spawning one with its log, reaping and stopping it,
 * waiting for a private tierd to answer, and a free loopback port
 * (kvt_common.h).
 */
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvt_common.h"

pid_t cmn_spawn(const char *const *argv, const char *log, unsigned flags)
{
    pid_t parent = getpid(), pid = fork();

    if (pid < 0)
        return -errno;
    if (pid == 0) {
        prctl(PR_SET_PDEATHSIG, flags & CMN_SPAWN_TERM ? SIGTERM : SIGKILL);
        if (getppid() != parent)
            _exit(127); /* the parent died before the line above took hold */
        if (log) {
            int fd = open(log, O_WRONLY | O_CREAT | O_CLOEXEC |
                          (flags & CMN_SPAWN_TRUNCATE ? O_TRUNC : O_APPEND), 0600);

            if (fd >= 0) {
                if (flags & CMN_SPAWN_STDOUT)
                    dup2(fd, STDOUT_FILENO);
                dup2(fd, STDERR_FILENO);
            }
        }
        if (flags & CMN_SPAWN_NULL_STDIN) {
            int nul = open("/dev/null", O_RDONLY | O_CLOEXEC);

            if (nul >= 0)
                dup2(nul, STDIN_FILENO);
        }
        execvp(argv[0], (char *const *)argv);
        fprintf(stderr, "exec %s: %s\n", argv[0], strerror(errno));
        _exit(127);
    }
    return pid;
}

static int status_of(int st)
{
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
}

int cmn_wait(pid_t pid)
{
    int st;

    while (waitpid(pid, &st, 0) < 0)
        if (errno != EINTR)
            return -errno;
    return status_of(st);
}

bool cmn_exited(pid_t pid, int *st)
{
    int raw;

    if (waitpid(pid, &raw, WNOHANG) != pid)
        return false;
    if (st)
        *st = status_of(raw);
    return true;
}

int cmn_wait_ms(pid_t pid, unsigned timeout_ms)
{
    int st;

    for (unsigned waited = 0; waited < timeout_ms; waited += 10) {
        if (cmn_exited(pid, &st))
            return st;
        cmn_sleep_ms(10);
    }
    kill(pid, SIGKILL);
    cmn_wait(pid);
    return -ETIMEDOUT;
}

int cmn_stop(pid_t pid, unsigned timeout_ms)
{
    kill(pid, SIGTERM);
    return cmn_wait_ms(pid, timeout_ms);
}

int cmn_tierd_wait(pid_t pid, const char *sock, int (*ready)(const char *sock, void *arg),
                   void *arg, unsigned timeout_ms, int *status)
{
    uint64_t t0 = cmn_now_ms();

    do {
        int st;

        if (ready(sock, arg) == 0)
            return 0;
        if (cmn_exited(pid, &st)) {
            if (status)
                *status = st;
            return -ECHILD;
        }
        cmn_sleep_ms(2);
    } while (cmn_now_ms() - t0 < timeout_ms);
    return -ETIMEDOUT;
}

int cmn_free_port(void)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    socklen_t len = sizeof(a);
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0), port;

    if (fd < 0)
        return -errno;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &len) == 0)
        port = ntohs(a.sin_port);
    else
        port = -errno;
    close(fd);
    return port;
}
