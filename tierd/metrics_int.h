/* SPDX-License-Identifier: MIT */
/*
 * metrics_int.h - between the two halves of the metrics page: metrics.c
 * (the HTTP server, and the snapshot the event loop takes for it) and
 * metrics_page.c (the text, printed from a snapshot alone). Not for the
 * rest of tierd, which uses metrics.h.
 */
#ifndef METRICS_INT_H
#define METRICS_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "kvt_wire.h"
#include "tenant.h"
#include "tier.h"
#include "tierd.h"

/* Latency buckets, 1 us to 5 s: their bounds and how the le label prints
 * them (metrics_page.c). */
#define METRICS_NBUCKET 21
struct metrics_bucket {
    uint64_t ns;    /* upper bound, inclusive */
    const char *le; /* the same, as the le label prints it */
};
extern const struct metrics_bucket metrics_bucket[METRICS_NBUCKET];

/* One request type's latencies. */
struct metrics_hist {
    uint64_t n[METRICS_NBUCKET + 1]; /* requests per bucket, not cumulative; [NBUCKET]: > 5 s */
    uint64_t count;                  /* requests */
    uint64_t sum_ns;                 /* their latencies added up, ns */
};

/* What the page shows of one tenant. */
struct metrics_snap_tenant {
    char name[40];
    bool hot, cold, remote;   /* the tiers it has */
    uint32_t clients;         /* its sessions open */
    uint32_t nns;             /* its namespaces open */
    uint32_t nsummed;         /* of those, past the cap: in its ns="other" series */
    struct tier_stats st;     /* its store's counters */
};

/* One namespace series: a namespace (id > 0), or (id 0) the traffic of all
 * the tenant's namespaces past the cap, added up. */
struct metrics_snap_ns {
    uint32_t tenant;          /* index into metrics_snap.t */
    uint32_t id;              /* namespace id; 0: the tenant's others, summed */
    struct kvt_wire_ns_req d; /* the descriptor; zeroed with --metrics-no-model-ids */
    struct tierd_ns_stats st;
};

/* Everything the page shows, copied by the loop at one instant: the page
 * is printed from this alone, on the server's thread. */
struct metrics_snap {
    uint64_t up_ms;           /* since tierd started */
    uint32_t clients;         /* sessions open */
    uint32_t ntenants;        /* entries in t */
    uint64_t proto_errors, refused, get_deadline_misses, durable_wait_timeouts, pins_expired;
    bool remote;              /* a remote tier is configured */
    struct metrics_snap_tenant t[TENANT_MAX];
    struct metrics_hist lat[KVT_OP_MAX_]; /* per opcode */
    uint32_t nns;             /* series in ns, tenant by tenant, ids rising, each tenant's
                                 others (id 0) last */
    struct metrics_snap_ns *ns;
    uint64_t unauthorized;    /* requests refused for want of the token (server's count) */
};

/* Print the page of s (Prometheus text format 0.0.4) into *out (malloc'd,
 * the caller frees it), *len bytes. Namespaces are labelled by model id,
 * dtype, layout and tp rank, or with no_model_ids by "<tenant>/<id>" only.
 * 0, or -ENOMEM (nothing to free). */
int metrics_page(const struct metrics_snap *s, bool no_model_ids, char **out, size_t *len);

#endif /* METRICS_INT_H */
