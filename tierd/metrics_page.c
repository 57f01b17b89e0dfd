/* SPDX-License-Identifier: MIT */
/*
 * metrics_page.c - the metrics page's text: Prometheus text exposition
 * (format 0.0.4) printed from a snapshot (metrics_int.h). It reads nothing
 * of tierd's and takes no lock: it runs on the HTTP server's thread, on a
 * copy the event loop made. The server itself is metrics.c.
 */
#include <errno.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "metrics_int.h"

/* Three per decade: a warm get is handled in a few microseconds, a get
 * that waits for the disk takes milliseconds, and one behind a busy ring
 * or a durable commit up to seconds. */
const struct metrics_bucket metrics_bucket[METRICS_NBUCKET] = {
    { 1000, "1e-06" },        { 2500, "2.5e-06" },      { 5000, "5e-06" },
    { 10000, "1e-05" },       { 25000, "2.5e-05" },     { 50000, "5e-05" },
    { 100000, "0.0001" },     { 250000, "0.00025" },    { 500000, "0.0005" },
    { 1000000, "0.001" },     { 2500000, "0.0025" },    { 5000000, "0.005" },
    { 10000000, "0.01" },     { 25000000, "0.025" },    { 50000000, "0.05" },
    { 100000000, "0.1" },     { 250000000, "0.25" },    { 500000000, "0.5" },
    { 1000000000, "1" },      { 2500000000u, "2.5" },   { 5000000000u, "5" },
};

/* Wire opcodes as the op label names them; index = enum kvt_wire_op. An op
 * missing here is shown as "op<number>" until it is named. */
static const char *const op_name[KVT_OP_MAX_] = {
    [KVT_OP_HELLO] = "hello",           [KVT_OP_NS_OPEN] = "ns_open",
    [KVT_OP_LOOKUP] = "lookup",         [KVT_OP_PUT_RESERVE] = "put_reserve",
    [KVT_OP_PUT_COMMIT] = "put_commit", [KVT_OP_PUT_ABORT] = "put_abort",
    [KVT_OP_GET] = "get",               [KVT_OP_RELEASE] = "release",
    [KVT_OP_REMOVE] = "remove",         [KVT_OP_STATS] = "stats",
    [KVT_OP_HOT_ATTACH] = "hot_attach", [KVT_OP_NS_LIST] = "ns_list",
    [KVT_OP_WHY] = "why",               [KVT_OP_FLUSH] = "flush",
    [KVT_OP_PURGE] = "purge",           [KVT_OP_UNPIN] = "unpin",
};

/* A growing text buffer (p allocated before the first put); an allocation
 * failure is sticky (oom) and the page is not printed, rather than a
 * truncated one. */
struct buf {
    char *p;
    size_t len, cap;
    bool oom;
};

/* Room for need more bytes and a NUL; false (and oom) when there is none. */
static bool grow(struct buf *b, size_t need)
{
    size_t cap = b->cap * 2 > b->len + need + 1 ? b->cap * 2 : b->len + need + 1;
    char *p;

    if (b->oom)
        return false;
    if (b->cap - b->len > need)
        return true;
    p = realloc(b->p, cap);
    if (!p) {
        b->oom = true;
        return false;
    }
    b->p = p;
    b->cap = cap;
    return true;
}

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->oom)
        return;
    va_start(ap, fmt);
    n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
    va_end(ap);
    if (n >= 0 && (size_t)n >= b->cap - b->len && grow(b, (size_t)n)) {
        va_start(ap, fmt);
        n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
    }
    if (n < 0)
        b->oom = true;
    else if (!b->oom)
        b->len += (size_t)n;
}

/* Append n bytes of s as they are. */
static void put_raw(struct buf *b, const char *s, size_t n)
{
    if (!grow(b, n))
        return;
    memcpy(b->p + b->len, s, n);
    b->len += n;
}

/* Length of the valid UTF-8 sequence at s (at most n bytes), 0 if none. */
static size_t utf8_len(const unsigned char *s, size_t n)
{
    size_t len = s[0] < 0xc2 ? 0 : s[0] < 0xe0 ? 2 : s[0] < 0xf0 ? 3 : s[0] < 0xf5 ? 4 : 0;

    if (len == 0 || len > n)
        return 0;
    for (size_t i = 1; i < len; i++)
        if ((s[i] & 0xc0) != 0x80)
            return 0;
    /* overlong 3/4-byte forms, surrogates, beyond U+10FFFF */
    if ((s[0] == 0xe0 && s[1] < 0xa0) || (s[0] == 0xed && s[1] >= 0xa0) ||
        (s[0] == 0xf0 && s[1] < 0x90) || (s[0] == 0xf4 && s[1] >= 0x90))
        return 0;
    return len;
}

/* A label value: the format escapes \, " and newline; the strings come from
 * clients, so anything else that is not printable text becomes '?', rather
 * than let one model id make the whole page unreadable. */
static void put_label(struct buf *b, const char *s)
{
    const unsigned char *u = (const unsigned char *)s;
    size_t n = strlen(s);

    for (size_t i = 0; i < n;) {
        size_t l;

        if (u[i] == '\\' || u[i] == '"') {
            put(b, "\\%c", u[i]);
            i++;
        } else if (u[i] == '\n') {
            put(b, "\\n");
            i++;
        } else if (u[i] >= 0x20 && u[i] < 0x7f) {
            put(b, "%c", u[i]);
            i++;
        } else if (u[i] >= 0x80 && (l = utf8_len(u + i, n - i)) > 0) {
            put(b, "%.*s", (int)l, s + i);
            i += l;
        } else {
            put(b, "?");
            i++;
        }
    }
}

static void family(struct buf *b, const char *name, const char *type, const char *help)
{
    put(b, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
}

static void one(struct buf *b, const char *name, const char *type, const char *help,
                uint64_t v)
{
    family(b, name, type, help);
    put(b, "%s %llu\n", name, (unsigned long long)v);
}

static const char *const tier_name[TIER_L_N] = {
    [TIER_L_HOT] = "hot", [TIER_L_WARM] = "warm", [TIER_L_COLD] = "cold",
};

/* Every store figure is per tenant: each has its own store. */
#define ST_FIELD(f) offsetof(struct tier_stats, f)
#define NS_FIELD(f) offsetof(struct tierd_ns_stats, f)

static uint64_t st_u64(const struct tier_stats *st, size_t field, int i)
{
    uint64_t v;

    memcpy(&v, (const char *)st + field + (size_t)i * sizeof(v), sizeof(v));
    return v;
}

/* A family with a sample per tenant: one figure of each tenant's store. */
struct tenant_family {
    const char *name, *type; /* type: "counter" or "gauge" */
    const char *key;         /* the field's name (kvt_stats_list.h's list) */
    size_t field;            /* offset of the uint64_t in struct tier_stats */
    const char *help;
};

/* The stores' figures, from kvt_stats_list.h's list of counters (those with a
 * metric name; the remote tier's in their own table), in its order. */
#define FAM_STORE(name, type, metric, help) { metric, #type, #name, ST_FIELD(name), help },
#define FAM_TIERD(name, type, metric, help)
#define FAM_TIERS(name, type, metric, help)
#define FAM(src, name, type, metric, help) FAM_##src(name, type, metric, help)

static const struct tenant_family list_fam[] = { KVT_STATS_LIST(FAM) };

/* The one store figure that is not a field of kvt_stats (the page alone shows it). */
static const struct tenant_family cold_errors_fam = {
    "kvtier_cold_errors_total", "counter", "cold_errors", ST_FIELD(cold_errors),
    "Demotions or promotions that failed.",
};

/* A figure of the remote tier (its counters are named remote_*): only with
 * one configured. */
static bool remote_fam(const struct tenant_family *f)
{
    return strncmp(f->key, "remote_", 7) == 0;
}

static void per_tenant(struct buf *b, const struct metrics_snap *s,
                       const struct tenant_family *f)
{
    family(b, f->name, f->type, f->help);
    for (uint32_t i = 0; i < s->ntenants; i++)
        put(b, "%s{tenant=\"%s\"} %llu\n", f->name, s->t[i].name,
            (unsigned long long)st_u64(&s->t[i].st, f->field, 0));
}

/* One per-tier family: a sample for each tier each tenant has; rfield
 * (SIZE_MAX: none) is the remote tier's figure of the family, sampled as
 * tier="remote" for tenants with one. */
static void per_tier(struct buf *b, const struct metrics_snap *s, const char *name,
                     const char *type, const char *help, size_t field, size_t rfield)
{
    family(b, name, type, help);
    for (uint32_t i = 0; i < s->ntenants; i++) {
        const struct metrics_snap_tenant *tn = &s->t[i];

        for (int t = TIER_L_HOT; t < TIER_L_N; t++) {
            if ((t == TIER_L_HOT && !tn->hot) || (t == TIER_L_COLD && !tn->cold))
                continue;
            put(b, "%s{tenant=\"%s\",tier=\"%s\"} %llu\n", name, tn->name, tier_name[t],
                (unsigned long long)st_u64(&tn->st, field, t));
        }
        if (tn->remote && rfield != SIZE_MAX)
            put(b, "%s{tenant=\"%s\",tier=\"remote\"} %llu\n", name, tn->name,
                (unsigned long long)st_u64(&tn->st, rfield, 0));
    }
}

/* The remote tier's own families, when some tenant has one. */
static void remote_families(struct buf *b, const struct metrics_snap *s)
{
    for (size_t i = 0; s->remote && i < sizeof(list_fam) / sizeof(list_fam[0]); i++)
        if (*list_fam[i].name && remote_fam(&list_fam[i]))
            per_tenant(b, s, &list_fam[i]);
}

/* The offset in struct tier_stats of the store counter named key (kvtier.h's
 * list), SIZE_MAX for "" or none. O(list): a few dozen compares a family. */
static size_t field_named(const char *key)
{
    for (size_t i = 0; *key && i < sizeof(list_fam) / sizeof(list_fam[0]); i++)
        if (!strcmp(list_fam[i].key, key))
            return list_fam[i].field;
    return SIZE_MAX;
}

/* The per-tier families, from kvt_stats_list.h's list (remote: the name of the
 * remote tier's figure, "": it has none). */
#define TIER_FAM(name, type, metric, help, remote)                                         \
    per_tier(b, s, metric, #type, help, ST_FIELD(name), field_named(remote));

/* The label set of namespace series e, without the closing brace. The ns
 * label is what people read: the descriptor, or with no_model_ids the
 * tenant and the id ("acme/3"), names that say nothing of the model; ns_id
 * keeps series apart where two descriptors differ only in what the label
 * leaves out (block size, tp size). A tenant's namespaces past the cap are
 * one series, ns="other", ns_id="other". */
static void ns_labels(struct buf *b, const struct metrics_snap *s,
                      const struct metrics_snap_ns *e, bool no_model_ids)
{
    const char *tenant = s->t[e->tenant].name;

    if (e->id == 0) {
        put(b, "{tenant=\"%s\",ns=\"other\",ns_id=\"other\"", tenant);
        return;
    }
    if (no_model_ids) {
        put(b, "{tenant=\"%s\",ns=\"%s/%u\",ns_id=\"%u\"", tenant, tenant, e->id, e->id);
        return;
    }
    put(b, "{tenant=\"%s\",ns=\"", tenant);
    put_label(b, e->d.model_id);
    put(b, "/");
    put_label(b, e->d.dtype);
    put(b, "/");
    put_label(b, e->d.layout);
    put(b, "/tp%u\",ns_id=\"%u\"", e->d.tp_rank, e->id);
}

/* The label sets of a snapshot's namespace series, each printed once (the
 * escaping costs) and copied into the sample of every per-namespace family:
 * 20 lines a series, most of the page. */
struct labels {
    uint32_t n;       /* series */
    struct buf text;  /* their sets one after the other */
    size_t *off;      /* set i is text.p[off[i]..off[i + 1]); n + 1 entries */
};

static int labels_init(struct labels *L, const struct metrics_snap *s, bool no_model_ids)
{
    L->n = s->nns;
    L->text = (struct buf){ .cap = 256 + (size_t)s->nns * 128 };
    L->text.p = malloc(L->text.cap);
    L->off = malloc(((size_t)s->nns + 1) * sizeof(*L->off));
    L->text.oom = !L->text.p || !L->off;
    for (uint32_t i = 0; i < s->nns && !L->text.oom; i++) {
        L->off[i] = L->text.len;
        ns_labels(&L->text, s, &s->ns[i], no_model_ids);
    }
    if (L->text.oom)
        return -ENOMEM;
    L->off[s->nns] = L->text.len;
    return 0;
}

static void labels_fini(struct labels *L)
{
    free(L->text.p);
    free(L->off);
}

/* name, then series i's label set, without the closing brace. */
static void put_series(struct buf *b, const char *name, const struct labels *L, uint32_t i)
{
    put_raw(b, name, strlen(name));
    put_raw(b, L->text.p + L->off[i], L->off[i + 1] - L->off[i]);
}

/* One per-namespace family: a sample for each namespace series. */
static void per_ns(struct buf *b, const struct metrics_snap *s, const struct labels *L,
                   const char *name, const char *help, size_t field)
{
    family(b, name, "counter", help);
    for (uint32_t i = 0; i < L->n; i++) {
        uint64_t v;

        memcpy(&v, (const char *)&s->ns[i].st + field, sizeof(v));
        put_series(b, name, L, i);
        put(b, "} %llu\n", (unsigned long long)v);
    }
}

/* Missed lookup keys by namespace and cause, and how long after their
 * eviction evicted keys were asked for: a too-small cache shows as
 * dropped/evicted misses soon after eviction; an engine that hashes
 * differently as misses of keys never stored. */
static void miss_causes(struct buf *b, const struct metrics_snap *s, const struct labels *L)
{
    static const char *const cause[TIER_MISS_N] = {
        "never", "dropped", "evicted", "checksum", "io_error", "removed", "aborted",
        "writing", "broken_chain",
    };
    const char *name = "kvtier_namespace_lookup_misses_total";

    family(b, name, "counter",
           "Keys looked up and not found, by cause: never stored (or forgotten), dropped "
           "from memory, evicted from disk, checksum or I/O error, removed, aborted, being "
           "written, or present behind a missing block (broken_chain).");
    for (uint32_t i = 0; i < L->n; i++)
        for (int c = 0; c < TIER_MISS_N; c++) {
            put_series(b, name, L, i);
            put(b, ",cause=\"%s\"} %llu\n", cause[c],
                (unsigned long long)s->ns[i].st.why.cause[c]);
        }
    name = "kvtier_namespace_evicted_miss_age_seconds_total";
    family(b, name, "counter",
           "Summed over dropped and evicted misses: seconds from the eviction to the lookup.");
    for (uint32_t i = 0; i < L->n; i++) {
        uint64_t ms = s->ns[i].st.why.evicted_age_ms;

        put_series(b, name, L, i);
        put(b, "} %llu.%03llu\n", (unsigned long long)(ms / 1000),
            (unsigned long long)(ms % 1000));
    }
    per_ns(b, s, L, "kvtier_namespace_deadline_misses_total",
           "Gets answered short because their deadline passed.", NS_FIELD(deadline_misses));
}

static void latency(struct buf *b, const struct metrics_snap *s)
{
    const char *name = "kvtier_request_duration_seconds";

    family(b, name, "histogram",
           "Time from a request's arrival to its reply (for a get that waits for the disk, "
           "to the deferred reply).");
    for (int op = 1; op < KVT_OP_MAX_; op++) {
        const struct metrics_hist *h = &s->lat[op];
        uint64_t cum = 0;
        char num[16];
        const char *opn = op_name[op];

        if (!opn) {
            snprintf(num, sizeof(num), "op%d", op);
            opn = num;
        }
        for (size_t i = 0; i < METRICS_NBUCKET; i++) {
            cum += h->n[i];
            put(b, "%s_bucket{op=\"%s\",le=\"%s\"} %llu\n", name, opn, metrics_bucket[i].le,
                (unsigned long long)cum);
        }
        put(b, "%s_bucket{op=\"%s\",le=\"+Inf\"} %llu\n", name, opn,
            (unsigned long long)h->count);
        put(b, "%s_sum{op=\"%s\"} %llu.%09llu\n", name, opn,
            (unsigned long long)(h->sum_ns / 1000000000u),
            (unsigned long long)(h->sum_ns % 1000000000u));
        put(b, "%s_count{op=\"%s\"} %llu\n", name, opn, (unsigned long long)h->count);
    }
}

static void page(struct buf *b, const struct metrics_snap *s, const struct labels *L)
{
    uint64_t up_ms = s->up_ms, nns = 0;

    for (uint32_t i = 0; i < s->ntenants; i++)
        nns += s->t[i].nns;
    family(b, "kvtier_uptime_seconds", "gauge", "Seconds since tierd started.");
    put(b, "kvtier_uptime_seconds %llu.%03llu\n", (unsigned long long)(up_ms / 1000),
        (unsigned long long)(up_ms % 1000));
    one(b, "kvtier_clients_connected", "gauge", "Client sessions open.", s->clients);
    one(b, "kvtier_namespaces", "gauge", "Namespaces opened since start.", nns);
    one(b, "kvtier_protocol_errors_total", "counter", "Malformed messages received.",
        s->proto_errors);
    one(b, "kvtier_refused_clients_total", "counter",
        "Connections refused because no tenant admits the peer's uid or gid.", s->refused);
    one(b, "kvtier_get_deadline_misses_total", "counter",
        "Gets answered short because their deadline passed while reading the disk.",
        s->get_deadline_misses);
    one(b, "kvtier_durable_wait_timeouts_total", "counter",
        "Durable commits answered -EAGAIN after --durable-wait-ms (writes going on).",
        s->durable_wait_timeouts);
    one(b, "kvtier_pins_expired_total", "counter",
        "Pinning lookups' holds that expired before an unpin released them.", s->pins_expired);
    family(b, "kvtier_tenant_clients_connected", "gauge", "Client sessions open per tenant.");
    for (uint32_t i = 0; i < s->ntenants; i++)
        put(b, "kvtier_tenant_clients_connected{tenant=\"%s\"} %u\n", s->t[i].name,
            s->t[i].clients);
    family(b, "kvtier_metrics_summed_namespaces", "gauge",
           "Namespaces past --metrics-max-namespaces: their traffic is summed in the "
           "tenant's ns=\"other\" series.");
    for (uint32_t i = 0; i < s->ntenants; i++)
        put(b, "kvtier_metrics_summed_namespaces{tenant=\"%s\"} %u\n", s->t[i].name,
            s->t[i].nsummed);
    one(b, "kvtier_metrics_unauthorized_requests_total", "counter",
        "Requests for this page refused for a missing or wrong bearer token.",
        s->unauthorized);
    for (size_t i = 0; i < sizeof(list_fam) / sizeof(list_fam[0]); i++)
        if (*list_fam[i].name && !remote_fam(&list_fam[i]))
            per_tenant(b, s, &list_fam[i]);
    per_tenant(b, s, &cold_errors_fam);

    KVT_TIER_STATS_LIST(TIER_FAM)
    remote_families(b, s);

    per_ns(b, s, L, "kvtier_namespace_lookups_total", "Lookup requests.",
           NS_FIELD(lookups));
    per_ns(b, s, L, "kvtier_namespace_lookup_keys_total", "Keys looked up.",
           NS_FIELD(lookup_keys));
    per_ns(b, s, L, "kvtier_namespace_lookup_hit_keys_total",
           "Keys looked up that were found (the leading run).", NS_FIELD(hit_keys));
    per_ns(b, s, L, "kvtier_namespace_lookup_miss_keys_total",
           "Keys looked up that were not found.", NS_FIELD(miss_keys));
    per_ns(b, s, L, "kvtier_namespace_prefix_hit_tokens_total",
           "Tokens of the prefixes found by lookups (hit keys x block tokens).",
           NS_FIELD(hit_tokens));
    per_ns(b, s, L, "kvtier_namespace_put_blocks_total", "Blocks committed by puts.",
           NS_FIELD(put_blocks));
    per_ns(b, s, L, "kvtier_namespace_get_blocks_total", "Blocks handed out by gets.",
           NS_FIELD(get_blocks));
    per_ns(b, s, L, "kvtier_namespace_in_bytes_total", "Bytes committed by puts.",
           NS_FIELD(bytes_in));
    per_ns(b, s, L, "kvtier_namespace_out_bytes_total", "Bytes handed out by gets.",
           NS_FIELD(bytes_out));

    miss_causes(b, s, L);
    latency(b, s);
}

int metrics_page(const struct metrics_snap *s, bool no_model_ids, char **out, size_t *len)
{
    /* about 4 KiB a namespace series: one allocation, seldom a realloc */
    struct buf b = { .cap = 32768 + (size_t)s->nns * 4608 };
    struct labels L;

    if (labels_init(&L, s, no_model_ids) < 0) {
        labels_fini(&L);
        return -ENOMEM;
    }
    b.p = malloc(b.cap);
    b.oom = !b.p;
    page(&b, s, &L);
    labels_fini(&L);
    if (b.oom) {
        free(b.p);
        return -ENOMEM;
    }
    *out = b.p;
    *len = b.len;
    return 0;
}
