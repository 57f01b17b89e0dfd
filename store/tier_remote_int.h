/* SPDX-License-Identifier: MIT */
/*
 * tier_remote_int.h - what the remote tier's caller side (tier_remote.c)
 * shares with its workers (tier_remote_worker.c): jobs and their keys, the
 * queues, the workers' node tables. Never installed; hiredis stays in the
 * worker's file (a node's connection is only named here).
 */
#ifndef TIER_REMOTE_INT_H
#define TIER_REMOTE_INT_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tier_remote.h"

struct redisContext;

#define REMOTE_NODES_MAX 64          /* cluster masters a worker can know */
#define REMOTE_NO_NODE 0xFFu         /* slot map: no owner known */

/* What a job does. */
enum { REMOTE_OP_PUT = 1, REMOTE_OP_GET = 2, REMOTE_OP_EXISTS = 3 };

/* One key of a job. */
struct item {
    struct job *job;
    char key[TIER_REMOTE_KEY_MAX];
    uint8_t klen;
    uint16_t slot;
    int16_t ask;           /* ASK target for the next try (-1: none) */
    int16_t tgt;           /* node of its last send (worker) */
    uint8_t tries;
    uint8_t state;         /* IT_* (the worker's): unfinished (to send, or sent this
                              round) or done */
    int res;               /* outcome (see tier_remote_get / _exists) */
    void *dst;             /* GET: the caller's buffer */
    uint16_t cmdlen;
    char cmd[200];         /* the command; PUT: up to the payload (head + value header) */
};

/* The longest command head, "*3\r\n$3\r\nSET\r\n$<klen>\r\n<key>\r\n$<20 digits>\r\n"
 * (under 48 bytes besides the key), and a PUT's value header fit in cmd. */
_Static_assert(sizeof(((struct item *)0)->cmd) >=
               48 + TIER_REMOTE_KEY_MAX + TIER_REMOTE_HDR_BYTES, "item.cmd too small");

/* One call (put, get, exists). */
struct job {
    int op;
    uint32_t n;
    uint64_t len;          /* PUT/GET: payload bytes per key */
    const uint8_t *src;    /* PUT: the payload (the caller's, or own) */
    uint8_t *own;          /* PUT with copy: ours, freed at completion */
    int *res;              /* GET/EXISTS: the caller's results */
    tier_remote_cb cb;
    void *ctx;
    struct job *next;
    struct item items[];
};

struct node {
    char host[64];
    int port;
    struct redisContext *c; /* NULL: not connected (hiredis, in the worker only) */
    uint64_t down_until;   /* CLOCK_MONOTONIC ms; not tried before */
};

struct worker {
    struct tier_remote *r;
    pthread_t thread;
    bool started;
    struct node node[REMOTE_NODES_MAX];
    unsigned nnodes;
    uint8_t slots[TIER_REMOTE_SLOTS]; /* slot -> node index, REMOTE_NO_NODE: unknown */
    uint64_t map_at;       /* ms of the last slot map read (0: never) */
    bool map_stale;        /* a MOVED or a failure: read it again */
    uint64_t log_at;       /* ms of the last warning (rate limit) */
};

struct jq {
    struct job *head, **tail;
};

/* A namespace added (tier_remote_ns_add). */
struct rns {
    bool on;                     /* added: uses the remote tier */
    uint8_t id[TIER_REMOTE_NS_ID_BYTES]; /* tier_remote_ns_id of its descriptor */
};

struct tier_remote {
    struct tier_remote_cfg cfg;
    char seeds[REMOTE_NODES_MAX][72];   /* "host:port" as given */
    unsigned nseeds;
    pthread_mutex_t lock;        /* guards the three queues and stop */
    pthread_cond_t cond;         /* work queued, or stop */
    struct jq rq, wq, done;      /* reads, writes, finished */
    bool stop;
    int efd;                     /* written once per finished batch */
    struct worker *w;
    unsigned nw;
    /* caller's thread only */
    unsigned inflight;
    struct rns *ns;              /* ns id -> its namespace on the cluster */
    size_t nscap;                /* entries in ns */
    struct tier_remote_stats st;
    /* counted by workers */
    _Atomic uint64_t redirects, slot_maps;
};

/* The index of node host (hlen bytes):port in w's table, added when new;
 * -1 when the table is full. */
int remote_node_of(struct worker *w, const char *host, size_t hlen, int port);
/* "host:port" of len bytes (the last ':' splits, so "::1:7000" works too):
 * 0 with the host's length and the port, or -EINVAL. */
int remote_parse_addr(const char *s, size_t len, size_t *hlen, int *port);

/* A worker thread's body: takes batches from the queues until stop. */
void *remote_worker_main(void *arg);

#endif /* TIER_REMOTE_INT_H */
