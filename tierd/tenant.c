/* SPDX-License-Identifier: MIT */
/*
 * tenant.c - the tenants of tenant.h: the config file (INI, through
 * libinih), admission by peer credentials, and each tenant's namespace
 * registry. Opening and closing each tenant's tiers is tierd.c's.
 */
#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <ini.h>
#include <limits.h>
#include <pwd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvt_common.h"
#include "tenant.h"
#include "tier_cold.h"
#include "tier_remote.h"

/* ---- the config file ---------------------------------------------------- */

struct parse {
    struct tierd *d;
    const struct tenant_defaults *def;
    char err[256];   /* the first problem, without its line */
    bool failed;
};

/* A size for a config key (cmn_parse_size's grammar), 0 too; -1 when
 * malformed or too large. */
static int64_t size_of(const char *s)
{
    uint64_t v;

    return cmn_parse_size(s, &v) < 0 ? -1 : (int64_t)v;
}

/* A comma or space separated list of ids or names into out (users when
 * user is true, else groups). */
static int id_list(struct parse *p, const char *key, const char *val, bool user,
                   uint32_t *out, uint32_t *n)
{
    char buf[1024], *save = NULL;

    if (strlen(val) >= sizeof(buf)) {
        snprintf(p->err, sizeof(p->err), "%s: list too long", key);
        return -1;
    }
    strcpy(buf, val);
    for (char *w = strtok_r(buf, ", \t", &save); w; w = strtok_r(NULL, ", \t", &save)) {
        char *end;
        unsigned long v = strtoul(w, &end, 10);

        if (*end || end == w) {
            /* a name: resolved now, so a typo stops tierd instead of
             * silently admitting nobody */
            struct passwd *pw = user ? getpwnam(w) : NULL;
            struct group *gr = user ? NULL : getgrnam(w);

            if (!pw && !gr) {
                snprintf(p->err, sizeof(p->err), "%s: no such %s '%s'", key,
                         user ? "user" : "group", w);
                return -1;
            }
            v = user ? pw->pw_uid : gr->gr_gid;
        } else if (v > UINT32_MAX - 1) {
            snprintf(p->err, sizeof(p->err), "%s: '%s' is not an id", key, w);
            return -1;
        }
        if (*n == TENANT_IDS_MAX) {
            snprintf(p->err, sizeof(p->err), "%s: more than %d ids", key, TENANT_IDS_MAX);
            return -1;
        }
        out[(*n)++] = (uint32_t)v;
    }
    return 0;
}

static bool name_ok(const char *s)
{
    size_t n = strlen(s);

    if (n == 0 || n >= sizeof(((struct tenant *)0)->name))
        return false;
    for (; *s; s++)
        if (!isalnum((unsigned char)*s) && *s != '-' && *s != '_')
            return false;
    return true;
}

/* The tenant of section "tenant.NAME", created on its first key. */
static struct tenant *section_tenant(struct parse *p, const char *name)
{
    struct tierd *d = p->d;
    struct tenant *t;

    for (uint32_t i = 0; i < d->ntenants; i++)
        if (strcmp(d->tenants[i].name, name) == 0)
            return &d->tenants[i];
    if (!name_ok(name)) {
        snprintf(p->err, sizeof(p->err),
                 "[tenant.%s]: a tenant name is 1-39 letters, digits, '-' or '_'", name);
        return NULL;
    }
    if (d->ntenants == TENANT_MAX) {
        snprintf(p->err, sizeof(p->err), "more than %d tenants", TENANT_MAX);
        return NULL;
    }
    t = &d->tenants[d->ntenants++];
    *t = (struct tenant){ .warm_bytes = p->def->warm_bytes,
                          .cold_bytes = p->def->no_cold ? 0 : p->def->cold_bytes,
                          .hot_bytes = p->def->hot_bytes, .d = d };
    strcpy(t->name, name);
    snprintf(t->dir, sizeof(t->dir), "%s/tenants/%s", p->def->data, name);
    return t;
}

/*
 * The config's keys, a table per section: each key's setter reads its
 * value into the daemon, the remote tier or tenant t (NULL outside a
 * [tenant.NAME] section); 0, or -1 with p->err set. The "known:" list of
 * an unknown key's message is the table's, so it never falls behind.
 */
struct key {
    const char *name;
    int (*set)(struct parse *p, struct tenant *t, const char *key, const char *val);
};

static int set_socket_group(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    struct group *g = getgrnam(val);
    char *end;
    unsigned long n = strtoul(val, &end, 10);

    (void)t, (void)key;
    if (!g && (*end || end == val)) {
        snprintf(p->err, sizeof(p->err), "socket_group: no such group '%s'", val);
        return -1;
    }
    p->d->socket_gid = g ? g->gr_gid : (gid_t)n;
    return 0;
}

static int set_seeds(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    struct tierd_remote *r = &p->d->remote;

    (void)t, (void)key;
    if (snprintf(r->seeds, sizeof(r->seeds), "%s", val) >= (int)sizeof(r->seeds)) {
        snprintf(p->err, sizeof(p->err), "seeds: list too long");
        return -1;
    }
    return 0;
}

static int set_timeout_ms(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    char *end;
    unsigned long v = strtoul(val, &end, 10);

    (void)t, (void)key;
    if (*end || end == val || v < 1 || v > 60000) {
        snprintf(p->err, sizeof(p->err), "timeout_ms: want 1..60000, got '%s'", val);
        return -1;
    }
    p->d->remote.timeout_ms = (uint32_t)v;
    return 0;
}

static int set_policy(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    (void)t, (void)key;
    if (tierd_parse_policy(val, &p->d->remote.policy) < 0) {
        snprintf(p->err, sizeof(p->err), "policy: want write-through or on-demotion, got '%s'",
                 val);
        return -1;
    }
    return 0;
}

static int set_namespaces(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    (void)t, (void)key;
    if (tierd_parse_ns_filter(val, &p->d->remote) < 0) {
        snprintf(p->err, sizeof(p->err), "namespaces: prefix too long");
        return -1;
    }
    return 0;
}

static int set_uids(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    return id_list(p, key, val, true, t->uids, &t->nuids);
}

static int set_gids(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    return id_list(p, key, val, false, t->gids, &t->ngids);
}

static int set_max_clients(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    char *end;
    unsigned long n = strtoul(val, &end, 10);

    (void)key;
    if (*end || end == val || *val < '0' || *val > '9' || n < 1 || n > 1000000) {
        snprintf(p->err, sizeof(p->err), "max_clients: want 1..1000000, got '%s'", val);
        return -1;
    }
    t->max_clients = (uint32_t)n;
    return 0;
}

static int set_lease_bytes(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    int64_t v = size_of(val);

    (void)key;
    if (v < (64 << 10)) {
        snprintf(p->err, sizeof(p->err), "lease_bytes: %s '%s' (at least 64K)",
                 v < 0 ? "bad size" : "too small", val);
        return -1;
    }
    t->lease_bytes_max = (uint64_t)v;
    return 0;
}

/* A pool's size into *out: at least min bytes, or 0 where zero_ok. */
static int pool_size(struct parse *p, const char *key, const char *val, int64_t min,
                     bool zero_ok, uint64_t *out)
{
    int64_t v = size_of(val);

    if (v < 0 || (v < min && !(zero_ok && v == 0))) {
        char least[32] = "";

        if (min > 0)
            snprintf(least, sizeof(least), "; at least %lldM", (long long)(min >> 20));
        snprintf(p->err, sizeof(p->err), "%s: bad size '%s' (e.g. 512M, 8G%s%s)", key, val,
                 least, zero_ok ? (min > 0 ? ", or 0 for none" : "; 0 for none") : "");
        return -1;
    }
    *out = (uint64_t)v;
    return 0;
}

static int set_warm_bytes(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    return pool_size(p, key, val, 1 << 20, false, &t->warm_bytes);
}

static int set_cold_bytes(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    int rc = pool_size(p, key, val, 1 << 20, true, &t->cold_bytes);

    if (p->def->no_cold)
        t->cold_bytes = 0; /* --no-cold wins over the file */
    return rc;
}

static int set_hot_bytes(struct parse *p, struct tenant *t, const char *key, const char *val)
{
    return pool_size(p, key, val, 0, true, &t->hot_bytes);
}

static const struct key daemon_keys[] = {
    { "socket_group", set_socket_group },
    { 0 },
};

static const struct key remote_keys[] = {
    { "seeds", set_seeds },   { "timeout_ms", set_timeout_ms },
    { "policy", set_policy }, { "namespaces", set_namespaces },
    { 0 },
};

static const struct key tenant_keys[] = {
    { "uids", set_uids },               { "gids", set_gids },
    { "warm_bytes", set_warm_bytes },   { "cold_bytes", set_cold_bytes },
    { "hot_bytes", set_hot_bytes },     { "max_clients", set_max_clients },
    { "lease_bytes", set_lease_bytes },
    { 0 },
};

/* Key key of [section], found in keys and set; 0, or -1 with p->err set. */
static int set_key(struct parse *p, const struct key *keys, struct tenant *t,
                   const char *section, const char *key, const char *val)
{
    char known[128];
    size_t n = 0;

    for (const struct key *k = keys; k->name; k++)
        if (strcmp(k->name, key) == 0)
            return k->set(p, t, key, val);
    known[0] = '\0';
    for (const struct key *k = keys; k->name && n < sizeof(known); k++)
        n += (size_t)snprintf(known + n, sizeof(known) - n, "%s%s", k == keys ? "" : ", ",
                              k->name);
    snprintf(p->err, sizeof(p->err), "[%s]: unknown key '%s' (known: %s)", section, key, known);
    return -1;
}

/* libinih's callback: 1 to go on, 0 for an error on this line. */
static int on_key(void *user, const char *section, const char *key, const char *val)
{
    struct parse *p = user;
    struct tenant *t;
    int rc;

    if (p->failed)
        return 1; /* only the first problem is reported */
    if (strcmp(section, "daemon") == 0) {
        rc = set_key(p, daemon_keys, NULL, section, key, val);
    } else if (strcmp(section, "remote") == 0) {
        rc = set_key(p, remote_keys, NULL, section, key, val);
    } else if (strncmp(section, "tenant.", 7) == 0) {
        t = section_tenant(p, section + 7);
        rc = t ? set_key(p, tenant_keys, t, section, key, val) : -1;
    } else {
        snprintf(p->err, sizeof(p->err),
                 "unknown section [%s] (sections: [daemon], [remote], [tenant.NAME])",
                 section);
        rc = -1;
    }
    if (rc < 0)
        p->failed = true;
    return rc < 0 ? 0 : 1;
}

/* The first id of a[0..na) that b[0..nb) holds too, into *id. */
static bool shared_id(const uint32_t *a, uint32_t na, const uint32_t *b, uint32_t nb,
                      uint32_t *id)
{
    for (uint32_t x = 0; x < na; x++)
        for (uint32_t y = 0; y < nb; y++)
            if (a[x] == b[y]) {
                *id = a[x];
                return true;
            }
    return false;
}

/* No two tenants admit the same uid or gid: who a peer is must be clear. */
static int check_overlap(struct tierd *d, char *err, size_t cap)
{
    for (uint32_t i = 0; i < d->ntenants; i++)
        for (uint32_t j = i + 1; j < d->ntenants; j++) {
            const struct tenant *a = &d->tenants[i], *b = &d->tenants[j];
            uint32_t id;
            bool uid = shared_id(a->uids, a->nuids, b->uids, b->nuids, &id);

            if (uid || shared_id(a->gids, a->ngids, b->gids, b->ngids, &id)) {
                snprintf(err, cap, "%s %u is in tenants %s and %s", uid ? "uid" : "gid", id,
                         a->name, b->name);
                return -EINVAL;
            }
        }
    for (uint32_t i = 0; i < d->ntenants; i++)
        if (!d->tenants[i].nuids && !d->tenants[i].ngids) {
            snprintf(err, cap, "[tenant.%s] admits nobody: give it uids or gids",
                     d->tenants[i].name);
            return -EINVAL;
        }
    return 0;
}

/* Limits a tenant's config left unsaid. Clients: an even share of
 * --max-clients, so that no tenant's connections can lock out another's.
 * Leases: tierd's memory for them, 1/64 of the warm tier (4 MiB .. 1 GiB),
 * so that leases taken over and over on a few blocks cannot grow tierd
 * past what the tenant's quota implies. */
static int tenant_limits(struct tierd *d, char *err, size_t cap)
{
    uint64_t sum = 0;

    if (d->ntenants > d->max_clients) {
        snprintf(err, cap, "%u tenants but --max-clients %u: each tenant needs a client at "
                 "least", d->ntenants, d->max_clients);
        return -EINVAL;
    }
    for (uint32_t i = 0; i < d->ntenants; i++) {
        struct tenant *t = &d->tenants[i];
        uint64_t lb = t->warm_bytes / 64;

        if (!t->max_clients)
            t->max_clients = d->max_clients / d->ntenants ? d->max_clients / d->ntenants : 1;
        if (!t->lease_bytes_max)
            t->lease_bytes_max = lb < (4u << 20) ? (4u << 20) : lb > (1ull << 30) ? 1ull << 30 : lb;
        sum += t->max_clients;
    }
    if (sum > d->max_clients)
        tierd_log("warning: the tenants' max_clients add up to %llu, over --max-clients %u: "
                  "some tenants' clients can keep others out", (unsigned long long)sum,
                  d->max_clients);
    return 0;
}

int tenant_config(struct tierd *d, const char *path, const struct tenant_defaults *def,
                  char *err, size_t err_cap)
{
    struct parse p = { .d = d, .def = def };
    int rc;

    d->socket_gid = (gid_t)-1;
    d->tenants = calloc(TENANT_MAX, sizeof(*d->tenants));
    if (!d->tenants)
        return -ENOMEM;
    d->ntenants = 0;
    if (!path) {
        struct tenant *t = &d->tenants[d->ntenants++];

        /* the daemon's own uid, and root (who may connect anywhere anyway) */
        *t = (struct tenant){ .name = "default", .nuids = 1, .uids = { d->uid },
                              .warm_bytes = def->warm_bytes,
                              .cold_bytes = def->no_cold ? 0 : def->cold_bytes,
                              .hot_bytes = def->hot_bytes, .d = d };
        if (d->uid != 0)
            t->uids[t->nuids++] = 0;
        snprintf(t->dir, sizeof(t->dir), "%s", def->data);
        return tenant_limits(d, err, err_cap);
    }
    rc = ini_parse(path, on_key, &p);
    if (rc == -1) {
        rc = -errno ? -errno : -ENOENT;
        snprintf(err, err_cap, "%s: %s", path, strerror(-rc));
        return rc;
    }
    if (rc > 0) {
        snprintf(err, err_cap, "%s:%d: %s", path, rc,
                 p.failed ? p.err : "not a key = value line or a [section]");
        return -EINVAL;
    }
    if (rc < 0) {
        snprintf(err, err_cap, "%s: cannot read it (%d)", path, rc);
        return -ENOMEM;
    }
    if (d->ntenants == 0) {
        snprintf(err, err_cap, "%s: no [tenant.NAME] section", path);
        return -EINVAL;
    }
    rc = check_overlap(d, err, err_cap);
    if (rc < 0)
        return rc;
    return tenant_limits(d, err, err_cap);
}

struct tenant *tenant_for(struct tierd *d, uid_t uid, gid_t gid)
{
    for (uint32_t i = 0; i < d->ntenants; i++)
        for (uint32_t j = 0; j < d->tenants[i].nuids; j++)
            if (d->tenants[i].uids[j] == uid)
                return &d->tenants[i];
    for (uint32_t i = 0; i < d->ntenants; i++)
        for (uint32_t j = 0; j < d->tenants[i].ngids; j++)
            if (d->tenants[i].gids[j] == gid)
                return &d->tenants[i];
    return NULL;
}

bool tenant_foreign(const struct tierd *d, const struct tenant *t)
{
    if (t->ngids)
        return true;
    for (uint32_t j = 0; j < t->nuids; j++)
        if (t->uids[j] != d->uid && t->uids[j] != 0)
            return true;
    return false;
}

bool tenant_shared(const struct tierd *d)
{
    for (uint32_t i = 0; i < d->ntenants; i++)
        if (tenant_foreign(d, &d->tenants[i]))
            return true;
    return false;
}

/* ---- namespaces ------------------------------------------------------ */

static bool str_ok(const char *s, size_t cap, bool nonempty)
{
    const char *z = memchr(s, 0, cap);

    return z && (!nonempty || z != s);
}

/* req checked, and copied field by field into *n, so that padding after
 * the NULs never tells two equal descriptors apart. 0 or -EINVAL. */
static int ns_normal(const struct kvt_wire_ns_req *req, struct kvt_wire_ns_req *n)
{
    if (!str_ok(req->model_id, sizeof(req->model_id), true) ||
        !str_ok(req->dtype, sizeof(req->dtype), false) ||
        !str_ok(req->layout, sizeof(req->layout), false) || req->block_bytes == 0 ||
        req->block_tokens == 0 || req->tp_size == 0 || req->tp_rank >= req->tp_size)
        return -EINVAL;
    memset(n, 0, sizeof(*n)); /* the padding too: the registry compares bytes */
    n->block_bytes = req->block_bytes;
    n->block_tokens = req->block_tokens;
    n->tp_rank = req->tp_rank;
    n->tp_size = req->tp_size;
    strcpy(n->model_id, req->model_id);
    strcpy(n->dtype, req->dtype);
    strcpy(n->layout, req->layout);
    return 0;
}

/* The id of a namespace new to t, described by n. */
static int ns_new_id(struct tenant *t, const struct kvt_wire_ns_req *n, uint32_t *id)
{
    if (t->cold) {
        /* the id comes from the tenant's cold index, so that blocks on disk
         * find their namespace again after a restart, and only theirs;
         * packed by hand: struct padding would put undefined bytes into a
         * key that must be the same on every run (the uid keeps the ids of
         * folders written before tenants existed) */
        uint8_t desc[sizeof(uint32_t) + sizeof(*n)];
        uint32_t tag = (uint32_t)t->d->uid;

        memcpy(desc, &tag, sizeof(tag));
        memcpy(desc + sizeof(tag), n, sizeof(*n));
        return tier_cold_ns_id(t->cold, desc, sizeof(desc), id);
    }
    /* the next id: namespaces never close, so the nns open take 1..nns
     * (not ns_cap + 1: that doubled the registry with each namespace) */
    *id = t->nns + 1;
    return 0;
}

/* Room in t's registry for namespace id (doubling it). 0 or -ENOMEM. */
static int ns_room(struct tenant *t, uint32_t id)
{
    return CMN_GROW(&t->ns, &t->ns_cap, id, 16);
}

/* Namespace id (n) on t's remote tier, when it has one and the model id
 * passes its filter; a failure is logged, and the namespace stays local. */
static void ns_remote(struct tenant *t, const struct kvt_wire_ns_req *n, uint32_t id)
{
    /* on the cluster, a namespace is named by what is the same on every
     * node (tenant and descriptor), never by the local id; given as
     * fields, which the store hashes with SHA-256 (tier_remote_ns_id).
     * The tenant's name is our config's, never the client's text: a
     * client picks only fields under its own tenant's name. */
    struct tier_remote_ns_desc rd = {
        .tenant = t->name, .model_id = n->model_id, .dtype = n->dtype,
        .layout = n->layout, .block_tokens = n->block_tokens,
        .block_bytes = n->block_bytes, .tp_rank = n->tp_rank, .tp_size = n->tp_size,
    };
    int rc;

    if (!t->remote || strncmp(n->model_id, t->d->remote.ns_prefix,
                              strlen(t->d->remote.ns_prefix)) != 0)
        return;
    rc = tier_remote_ns_add(t->remote, id, &rd);
    if (rc < 0)
        tierd_log("tenant %s namespace %u: not on the remote tier: %s", t->name, id,
                  strerror(-rc));
}

int tenant_ns_open(struct tenant *t, const struct kvt_wire_ns_req *req, uint32_t *id)
{
    struct kvt_wire_ns_req n;
    struct tier_ns *sns;
    int rc = ns_normal(req, &n);

    if (rc < 0)
        return rc;
    /* linear: namespaces are opened once per engine process, and few */
    for (uint32_t i = 0; i < t->ns_cap; i++)
        if (t->ns[i].open && memcmp(&t->ns[i].d, &n, sizeof(n)) == 0) {
            *id = i + 1;
            return 0;
        }
    if (t->nns == TIERD_NS_MAX)
        return -ENOSPC;
    /* the store's object first: registered only once it exists (the id's
     * block size is the descriptor's, so the store never refuses it as a
     * size conflict) */
    if ((rc = ns_new_id(t, &n, id)) < 0 || (rc = ns_room(t, *id)) < 0 ||
        (rc = tier_ns_open(t->store, *id, n.block_bytes, &sns)) < 0)
        return rc;
    t->ns[*id - 1] = (struct tierd_ns){ .open = true, .d = n, .store_ns = sns };
    t->nns++;
    ns_remote(t, &n, *id);
    if (t->d->verbose)
        tierd_log("tenant %s namespace %u: %s %s %s block %u tokens / %llu bytes, tp %u/%u",
                  t->name, *id, n.model_id, n.dtype, n.layout, n.block_tokens,
                  (unsigned long long)n.block_bytes, n.tp_rank, n.tp_size);
    return 0;
}

struct tierd_ns *tenant_ns_get(struct tenant *t, uint32_t id)
{
    if (id == 0 || id > t->ns_cap || !t->ns[id - 1].open)
        return NULL;
    return &t->ns[id - 1];
}

void tenant_free_all(struct tierd *d)
{
    for (uint32_t i = 0; d->tenants && i < d->ntenants; i++) {
        free(d->tenants[i].ns);
        d->tenants[i].ns = NULL;
    }
    free(d->tenants);
    d->tenants = NULL;
    d->ntenants = 0;
}
