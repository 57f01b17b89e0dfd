/* SPDX-License-Identifier: MIT */
/*
 * t_cluster.h - a private Redis Cluster for the remote tier's tests: 3
 * masters of Debian's redis-server on 127.0.0.1 (free ports spread by pid,
 * a temp folder), started and stopped by the test, and one-command access
 * to each node. Shared by the store's tests (tier_remote.c) and tierd's
 * (tierd_remote.c); no cluster-wide state lives here.
 */
#ifndef T_CLUSTER_H
#define T_CLUSTER_H

#include <hiredis/hiredis.h>
#include <stddef.h>
#include <sys/types.h>

#define T_CLUSTER_NODES 3

struct t_cluster {
    int port[T_CLUSTER_NODES];  /* client ports (bus port: +10000) */
    pid_t pid[T_CLUSTER_NODES]; /* redis-server; 0 once killed and reaped */
    char dir[64];               /* temp folder: node configs, cmd.log */
    char seeds[128];            /* "127.0.0.1:A,127.0.0.1:B": two masters as seeds */
};

/* Start 3 masters and join them (redis-cli --cluster create, no replicas);
 * returns once every node says cluster_state:ok. Skips the test when
 * redis-server or redis-cli is missing; asserts (bounded waits) otherwise. */
void t_cluster_start(struct t_cluster *c);
/* SIGKILL every node still running, reap it, remove the folder. */
void t_cluster_stop(struct t_cluster *c);
/* Run argv (a full path first) with its output appended to <dir>/cmd.log;
 * its exit status (t_wait). */
int t_cluster_run(struct t_cluster *c, const char *const *argv);
/* One command (hiredis format) on the node at port, on a fresh connection
 * with a 5 s timeout: the reply, which the caller frees with
 * freeReplyObject, or NULL when the node does not answer. */
redisReply *t_cluster_cmd(int port, const char *fmt, ...);
/* The node id (CLUSTER MYID) of the node at port into out[0..cap). */
void t_cluster_node_id(int port, char *out, size_t cap);

#endif /* T_CLUSTER_H */
