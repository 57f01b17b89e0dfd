/* SPDX-License-Identifier: MIT */
/*
 * tierd.h - the daemon's shared state, and its namespace registry.
 *
 * One struct tierd per process, used by the event loop's thread only.
 * A namespace is a model fingerprint within a tenant; its id is its index+1
 * in the registry and is what every keys request names.
 */
#ifndef TIERD_H
#define TIERD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvt_wire.h"
#include "tier.h"

struct tier;
struct tier_cold;
struct tier_hot;
struct ev_loop;
struct metrics;

/* A namespace's traffic since start, for the metrics page; counted by
 * sess.c when requests are answered. */
struct tierd_ns_stats {
    uint64_t lookups;         /* LOOKUP requests */
    uint64_t lookup_keys;     /* keys they asked for */
    uint64_t hit_keys;        /* of those, in the leading run found */
    uint64_t miss_keys;       /* the others (lookup_keys - hit_keys) */
    uint64_t hit_tokens;      /* hit_keys x block_tokens: prefill saved */
    uint64_t put_blocks;      /* blocks committed */
    uint64_t get_blocks;      /* blocks leased to gets */
    uint64_t bytes_in;        /* put_blocks x block_bytes */
    uint64_t bytes_out;       /* get_blocks x block_bytes */
    struct tier_misses why;   /* miss_keys by cause (tier_lookup_why) */
    uint64_t deadline_misses; /* gets answered short at their deadline */
};

struct tierd_ns {
    bool open;                /* opened in this run (ids may have holes) */
    uint32_t tenant;          /* uid of the tenant that opened it */
    struct kvt_wire_ns_req d; /* the descriptor, strings NUL-padded */
    struct tierd_ns_stats st; /* traffic, for the metrics page */
};

struct tierd {
    struct tier *store;
    struct tier_cold *cold;   /* NULL with --no-cold */
    struct tier_hot *hot;     /* NULL without --hot-bytes */
    struct ev_loop *loop;
    struct metrics *metrics;  /* the Prometheus page; NULL without --metrics-port */
    int listen_fd;            /* the SOCK_SEQPACKET socket */
    int sig_fd;               /* signalfd for SIGINT/SIGTERM */
    int lock_fd;              /* flock on <data>/tierd.lock: one daemon per folder */
    uid_t uid;                /* the daemon's uid: the default tenant */
    uint32_t next_sess;       /* next session id (owner id in the store) */
    uint32_t clients;         /* sessions open */
    uint32_t max_clients;
    uint64_t next_lease;      /* next lease id, never 0 */
    uint64_t start_ms;        /* CLOCK_MONOTONIC at start */
    uint64_t proto_errors;    /* malformed messages seen */
    uint64_t get_deadline_misses; /* gets answered short at their deadline */
    struct tierd_ns *ns;      /* registry, ns id = index + 1 (with holes: ids of the
                                 cold index not opened in this run) */
    uint32_t nns, ns_cap;     /* open namespaces; entries in ns */
    bool verbose;
};

#define TIERD_NS_MAX 4096

/* Find or add the namespace for descriptor d in tenant; *id gets its id
 * (with a cold tier: the durable id of the descriptor). -EINVAL for a
 * malformed descriptor, -ENOSPC when the registry is full. */
int tierd_ns_open(struct tierd *d, uint32_t tenant, const struct kvt_wire_ns_req *req,
                  uint32_t *id);
/* The namespace id in tenant, or NULL when unknown or another tenant's. */
const struct tierd_ns *tierd_ns_get(const struct tierd *d, uint32_t tenant, uint32_t id);
void tierd_ns_free(struct tierd *d);

/* Log a line to stderr with the daemon's prefix. */
void tierd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

uint64_t tierd_now_ms(void);

#endif /* TIERD_H */
