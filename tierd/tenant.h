/* SPDX-License-Identifier: MIT */
/*
 * tenant.h - tenants: who may connect (uids and gids, checked against
 * SO_PEERCRED), and for each tenant its own store: a warm pool (its own
 * memfd, mapped only by its clients), its own cold tier (data file and
 * LMDB index under <data>/tenants/<name>/), its own hot pool, and its own
 * namespaces. The sizes of those are the tenant's quotas, so one tenant
 * filling its share evicts its own blocks and never another's.
 *
 * Without a config file there is one tenant, "default", for the daemon's
 * own uid and root, whose cold tier lives in <data> itself.
 *
 * The config file is INI (libinih):
 *
 *     [daemon]
 *     socket_group = kvtier      ; optional: the socket becomes 0660, that group
 *
 *     [tenant.alice]
 *     uids = 1000, svc-alice     ; numbers or user names
 *     gids = 2000                ; numbers or group names (the primary gid)
 *     warm_bytes = 8G            ; defaults: tierd's --warm-bytes, --cold-bytes,
 *     cold_bytes = 100G          ;   --hot-bytes
 *     hot_bytes = 0
 *     max_clients = 64           ; default: an even share of --max-clients
 *     lease_bytes = 16M          ; tierd memory its leases may take (default:
 *                                ;   1/64 of warm_bytes, 4M .. 1G); then -EBUSY
 */
#ifndef TENANT_H
#define TENANT_H

#include <stdbool.h>
#include <stdint.h>
#include <sys/types.h>

#include "tierd.h"

#define TENANT_MAX 64
#define TENANT_IDS_MAX 64

/* What the command line says, as every tenant's defaults. */
struct tenant_defaults {
    const char *data;                 /* data folder */
    uint64_t warm_bytes, cold_bytes, hot_bytes;
    bool no_cold;
};

/* Read the config at path into d->tenants (d->ntenants), or make the one
 * default tenant when path is NULL. On a bad file: -EINVAL and a message
 * naming the line and what is wrong in err; -errno when it cannot be read. */
int tenant_config(struct tierd *d, const char *path, const struct tenant_defaults *def,
                  char *err, size_t err_cap);

/* The tenant a peer with these credentials belongs to, or NULL: admitted by
 * its uid, else by its gid. */
struct tenant *tenant_for(struct tierd *d, uid_t uid, gid_t gid);

/* Whether tenant t admits a uid other than ours and root's, or any gid. */
bool tenant_foreign(const struct tierd *d, const struct tenant *t);
/* Whether some tenant does: then the socket must be reachable by others
 * (SO_PEERCRED decides who gets in). */
bool tenant_shared(const struct tierd *d);

/* Find or add the namespace for descriptor req in tenant t; *id gets its id
 * (with a cold tier: the durable id of the descriptor in t's cold index).
 * -EINVAL for a malformed descriptor, -ENOSPC when the registry is full. */
int tenant_ns_open(struct tenant *t, const struct kvt_wire_ns_req *req, uint32_t *id);
/* Namespace id of t, or NULL when unknown (ids of other tenants mean
 * nothing here). */
struct tierd_ns *tenant_ns_get(struct tenant *t, uint32_t id);

/* Free every tenant's registry and the tenant array (stores are closed by
 * the caller first). */
void tenant_free_all(struct tierd *d);

#endif /* TENANT_H */
