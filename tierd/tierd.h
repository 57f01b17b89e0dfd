/* SPDX-License-Identifier: MIT */
/*
 * tierd.h - the daemon's shared state, and its namespace registry.
 *
 * One struct tierd per process, used by the event loop's thread only. It
 * holds tenants (tenant.h), each with its own store and namespaces. A
 * namespace is a model fingerprint within a tenant; its id is its index+1
 * in the tenant's registry and is what every keys request names.
 */
#ifndef TIERD_H
#define TIERD_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "kvt_common.h"
#include "kvt_wire.h"
#include "tier.h"

struct tier;
struct tier_cold;
struct tier_hot;
struct tier_remote;
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
    struct kvt_wire_ns_req d; /* the descriptor, strings NUL-padded */
    struct tier_ns *store_ns; /* the store's namespace (tier_ns_open): id and block size;
                                 the store's to free, valid while the tenant's store is */
    struct tierd_ns_stats st; /* traffic, for the metrics page */
};

/* A tenant: who may connect as it, and everything it stores. */
struct tenant {
    char name[40];
    uid_t uids[64];           /* admitted peers (SO_PEERCRED) */
    gid_t gids[64];
    uint32_t nuids, ngids;
    uint64_t warm_bytes, cold_bytes, hot_bytes; /* its quotas: the tier sizes */
    char dir[4096];           /* its cold tier's folder */
    struct tier *store;       /* tier_open: owns the three below */
    struct tier_cold *cold;   /* the store's (borrowed); NULL with --no-cold or cold_bytes = 0 */
    struct tier_hot *hot;     /* the store's (borrowed); NULL without hot_bytes */
    struct tier_remote *remote; /* the store's (borrowed); NULL without a remote tier */
    struct tierd_ns *ns;      /* registry, ns id = index + 1 (with holes: ids of the
                                 cold index not opened in this run) */
    uint32_t nns;             /* open namespaces */
    size_t ns_cap;            /* entries in ns */
    uint32_t clients;         /* its sessions open */
    uint32_t max_clients;     /* ... at most (config max_clients) */
    uint64_t pinned_bytes;    /* blocks its sessions' pins hold, against the pin budget */
    uint64_t lease_bytes;     /* tierd's memory its sessions' leases take ... */
    uint64_t lease_bytes_max; /* ... at most (config lease_bytes): then -EBUSY */
    uint64_t proto_errors;    /* its malformed messages (its STATS) */
    uint64_t deadline_misses; /* its gets answered short at their deadline */
    struct tierd *d;
};

/* The remote tier's settings: the config file's [remote] section, then the
 * --remote-* options (which win). Off while seeds is empty. */
struct tierd_remote {
    char seeds[1024];         /* "host:port,...": cluster nodes to start from */
    uint32_t timeout_ms;      /* per network operation (0: the store's default, 100) */
    enum tier_remote_policy policy;
    char ns_prefix[128];      /* namespaces whose model id starts with it ("": all) */
};

struct tierd {
    struct tenant *tenants;   /* at least one */
    uint32_t ntenants;
    struct ev_loop *loop;
    struct metrics *metrics;  /* the Prometheus page; NULL without --metrics-port */
    int listen_fd;            /* the SOCK_SEQPACKET socket */
    int sig_fd;               /* signalfd for SIGINT/SIGTERM */
    int lock_fd;              /* flock on <data>/tierd.lock: one daemon per folder */
    uid_t uid;                /* the daemon's uid: the default tenant */
    uint32_t clients;         /* sessions open */
    uint32_t max_clients;
    uint32_t handshake_ms;    /* a connection without HELLO is closed after it (0: never) */
    uint32_t durable_wait_ms; /* a durable commit waits this long at most (0: for ever) */
    uint64_t start_ms;        /* CLOCK_MONOTONIC at start */
    uint64_t proto_errors;    /* malformed messages seen (every tenant's: the metrics page) */
    uint64_t get_deadline_misses; /* gets answered short at their deadline (every tenant's) */
    uint64_t pins_expired;    /* pins released at their deadline, not by a client */
    uint64_t durable_wait_timeouts; /* durable commits answered -EAGAIN at their bound */
    uint32_t refused;         /* connections refused: no tenant admits the peer */
    gid_t socket_gid;         /* config's socket_group ((gid_t)-1: none) */
    struct tierd_remote remote; /* every tenant's remote tier (each its own connections) */
    bool verbose;
};

#define TIERD_NS_MAX 4096

/* turn.c: the event loop's own work (tierd.c's main and the protocol
 * fuzzer both turn the loop with these). tierd_on_tiers: an ev_cb for a
 * tenant's cold, hot or remote completion fd (ctx: its struct tenant):
 * expires sessions' deadlines, then runs the store's callbacks.
 * tierd_turn_end: ev_run's after-each-turn callback (ctx: the struct
 * tierd): every tenant's mover, finished flushes answered, closed sessions
 * freed. */
struct ev_loop;
void tierd_on_tiers(struct ev_loop *l, int fd, uint32_t events, void *ctx);
void tierd_turn_end(void *ctx);

/* util.c. tierd_quiet: the log says nothing (harnesses that run the
 * session code by the million). */
extern bool tierd_quiet;

/* Log a line to stderr with the daemon's prefix. */
void tierd_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

/* The monotonic clock in ms (common/'s): the name the sessions use. */
static inline uint64_t tierd_now_ms(void)
{
    return cmn_now_ms();
}

/* "write-through" / "on-demotion" into *out: 0, or -EINVAL. */
int tierd_parse_policy(const char *s, enum tier_remote_policy *out);
/* "all" / "*" (every namespace) or a model id prefix into r->ns_prefix:
 * 0, or -EINVAL (too long). */
int tierd_parse_ns_filter(const char *s, struct tierd_remote *r);

/* What tierd_dir_safe asks of the folder a path ends in. */
enum tierd_dir_want {
    TIERD_DIR_ON_THE_WAY, /* nothing more than of the folders on the way */
    TIERD_DIR_TRUSTED,    /* root's or ours, writable by no one else (sticky or not) */
    TIERD_DIR_OURS,       /* ours, writable by no one else: where tierd keeps files */
};

/* Whether tierd may trust folder path: every folder on the way to it,
 * through links too (each root's or ours, followed from a folder already
 * checked), is root's or ours and writable by no other user unless sticky
 * (as /tmp); and the folder it ends in is as want says. 0, or -errno with
 * why saying what is wrong and how to fix it. */
int tierd_dir_safe(const char *path, enum tierd_dir_want want, char *why, size_t cap);

#endif /* TIERD_H */
