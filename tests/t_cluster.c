/* SPDX-License-Identifier: MIT */
/*
 * t_cluster.c - the private Redis Cluster of t_cluster.h: redis-server
 * processes forked here (each dies with the test, PR_SET_PDEATHSIG), joined
 * by redis-cli, commands through hiredis.
 */
#include <criterion/criterion.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include "kvt_common.h"
#include "t.h"
#include "t_cluster.h"

static bool bindable(int port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                             .sin_addr.s_addr = htonl(0x7f000001) };
    int fd = socket(AF_INET, SOCK_STREAM, 0), one = 1;
    bool ok;

    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ok = bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    close(fd);
    return ok;
}

/* A port free with its cluster bus port (+10000), spread by pid so that
 * parallel tests rarely try the same ones. */
static int free_port(int after)
{
    int start = after ? after + 1 - 20000 : (int)(getpid() % 1000) * 10;

    for (int i = 0; i < 10000; i++) {
        int p = 20000 + (start + i) % 10000;

        if (bindable(p) && bindable(p + 10000))
            return p;
    }
    cr_assert_fail("no free port pair");
    return -1;
}

static bool have(const char *path)
{
    return access(path, X_OK) == 0;
}

int t_cluster_run(struct t_cluster *c, const char *const *argv)
{
    char log[128];
    pid_t pid;

    snprintf(log, sizeof(log), "%s/cmd.log", c->dir);
    pid = fork();
    cr_assert(pid >= 0);
    if (pid == 0) {
        int fd = open(log, O_WRONLY | O_CREAT | O_APPEND, 0600);

        prctl(PR_SET_PDEATHSIG, SIGKILL);
        if (fd >= 0) {
            dup2(fd, 1);
            dup2(fd, 2);
        }
        execv(argv[0], (char *const *)argv);
        _exit(127);
    }
    return t_wait(pid);
}

redisReply *t_cluster_cmd(int port, const char *fmt, ...)
{
    struct timeval tv = { .tv_sec = 5 };
    redisContext *rc = redisConnectWithTimeout("127.0.0.1", port, tv);
    redisReply *r = NULL;
    va_list ap;

    if (rc && !rc->err && redisSetTimeout(rc, tv) == REDIS_OK) {
        va_start(ap, fmt);
        r = redisvCommand(rc, fmt, ap);
        va_end(ap);
    }
    if (rc)
        redisFree(rc);
    return r;
}

static bool reply_has(int port, const char *what, const char *text)
{
    redisReply *r = t_cluster_cmd(port, what);
    bool ok = r && r->type == REDIS_REPLY_STRING && strstr(r->str, text);

    if (r)
        freeReplyObject(r);
    return ok;
}

void t_cluster_start(struct t_cluster *c)
{
    enum { NODES = T_CLUSTER_NODES };
    char conf[NODES][128], portstr[NODES][16], addr[NODES][32];

    memset(c, 0, sizeof(*c));
    if (!have("/usr/bin/redis-server") || !have("/usr/bin/redis-cli"))
        cr_skip_test("redis-server / redis-cli not installed (mk/deps.sh test)");
    t_tmpdir("kvt-redis", c->dir, sizeof(c->dir));
    for (int i = 0; i < NODES; i++) {
        c->port[i] = free_port(i ? c->port[i - 1] : 0);
        snprintf(portstr[i], sizeof(portstr[i]), "%d", c->port[i]);
        snprintf(conf[i], sizeof(conf[i]), "%s/nodes-%d.conf", c->dir, c->port[i]);
        snprintf(addr[i], sizeof(addr[i]), "127.0.0.1:%d", c->port[i]);
        c->pid[i] = fork();
        cr_assert(c->pid[i] >= 0);
        if (c->pid[i] == 0) {
            int null = open("/dev/null", O_WRONLY);

            prctl(PR_SET_PDEATHSIG, SIGKILL); /* a dead test leaves no server behind */
            dup2(null, 1);
            dup2(null, 2);
            execl("/usr/bin/redis-server", "redis-server", "--port", portstr[i], "--bind",
                  "127.0.0.1", "--cluster-enabled", "yes", "--cluster-config-file", conf[i],
                  "--dir", c->dir, "--save", "", "--appendonly", "no", "--daemonize", "no",
                  (char *)NULL);
            _exit(127);
        }
    }
    snprintf(c->seeds, sizeof(c->seeds), "%s,%s", addr[0], addr[1]);
    for (int i = 0; i < NODES; i++) {
        uint64_t t0 = cmn_now_ms();
        redisReply *r;

        while (!(r = t_cluster_cmd(c->port[i], "PING"))) {
            cr_assert_lt(cmn_now_ms() - t0, 10000, "redis-server on %d did not start", c->port[i]);
            usleep(20000);
        }
        freeReplyObject(r);
    }
    {
        const char *argv[] = { "/usr/bin/redis-cli", "--cluster", "create", addr[0], addr[1],
                               addr[2], "--cluster-replicas", "0", "--cluster-yes", NULL };

        cr_assert_eq(t_cluster_run(c, argv), 0,
                     "redis-cli --cluster create failed (see %s/cmd.log)", c->dir);
    }
    for (int i = 0; i < NODES; i++) {
        uint64_t t0 = cmn_now_ms();

        while (!reply_has(c->port[i], "CLUSTER INFO", "cluster_state:ok")) {
            cr_assert_lt(cmn_now_ms() - t0, 20000, "the cluster did not come up");
            usleep(50000);
        }
    }
}

void t_cluster_stop(struct t_cluster *c)
{
    for (int i = 0; i < T_CLUSTER_NODES; i++)
        if (c->pid[i] > 0) {
            kill(c->pid[i], SIGKILL);
            t_wait(c->pid[i]);
            c->pid[i] = 0;
        }
    if (c->dir[0] && cmn_rmtree(c->dir) != 0)
        fprintf(stderr, "t_cluster: could not remove %s\n", c->dir);
}

void t_cluster_node_id(int port, char *out, size_t cap)
{
    redisReply *r = t_cluster_cmd(port, "CLUSTER MYID");

    cr_assert(r && r->type == REDIS_REPLY_STRING, "CLUSTER MYID on %d", port);
    snprintf(out, cap, "%s", r->str);
    freeReplyObject(r);
}
