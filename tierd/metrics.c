/* SPDX-License-Identifier: MIT */
/*
 * metrics.c - Prometheus text exposition (format 0.0.4) over HTTP, through
 * libmicrohttpd (the only file that sees microhttpd.h).
 *
 * Design note: the server has no thread. MHD runs in its epoll mode; its
 * epoll fd goes into tierd's own loop, and a timerfd stands for the wake-up
 * MHD_get_timeout asks for (connection timeouts, work MHD left pending).
 * Both call MHD_run, so the request handler runs on the loop's thread, where
 * it may read the store and the namespaces without a lock. A scrape holds
 * the loop for as long as it takes to print the page: O(namespaces), a few
 * microseconds per namespace.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

#include "ev.h"
#include "kvt_wire.h"
#include "metrics.h"
#include "tier.h"
#include "tenant.h"
#include "tierd.h"

/* Latency buckets: 1 us to 5 s, three per decade (a warm get is handled in
 * a few microseconds, a get that waits for the disk takes milliseconds, and
 * one behind a busy ring or a durable commit up to seconds). */
static const struct {
    uint64_t ns;    /* upper bound, inclusive */
    const char *le; /* the same, as the le label prints it */
} bucket[] = {
    { 1000, "1e-06" },        { 2500, "2.5e-06" },      { 5000, "5e-06" },
    { 10000, "1e-05" },       { 25000, "2.5e-05" },     { 50000, "5e-05" },
    { 100000, "0.0001" },     { 250000, "0.00025" },    { 500000, "0.0005" },
    { 1000000, "0.001" },     { 2500000, "0.0025" },    { 5000000, "0.005" },
    { 10000000, "0.01" },     { 25000000, "0.025" },    { 50000000, "0.05" },
    { 100000000, "0.1" },     { 250000000, "0.25" },    { 500000000, "0.5" },
    { 1000000000, "1" },      { 2500000000u, "2.5" },   { 5000000000u, "5" },
};
#define NBUCKET (sizeof(bucket) / sizeof(bucket[0]))

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

struct hist {
    uint64_t n[NBUCKET + 1]; /* requests per bucket, not cumulative; [NBUCKET]: above 5 s */
    uint64_t count;          /* requests */
    uint64_t sum_ns;         /* their latencies added up, ns */
};

struct metrics {
    struct tierd *d;          /* read at each scrape */
    struct MHD_Daemon *mhd;
    struct ev_loop *loop;     /* NULL until attached */
    int mhd_fd;               /* MHD's epoll fd (MHD owns it) */
    int timer_fd;             /* fires when MHD_get_timeout says to run it */
    bool quiet;               /* MHD's messages only with -v once started: a peer
                                 that hangs up early is not worth a log line */
    struct hist lat[KVT_OP_MAX_]; /* per opcode */
};

/* ---- latency ----------------------------------------------------------- */

static uint64_t now_ns(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

uint64_t metrics_req_start(const struct metrics *m)
{
    return m ? now_ns() : 0;
}

void metrics_req_done(struct metrics *m, uint16_t op, uint64_t t0)
{
    uint64_t dt;
    struct hist *h;
    size_t i = 0;

    if (!m || !t0 || op == 0 || op >= KVT_OP_MAX_)
        return;
    dt = now_ns() - t0;
    h = &m->lat[op];
    while (i < NBUCKET && dt > bucket[i].ns) /* linear: 21 bounds */
        i++;
    h->n[i]++;
    h->count++;
    h->sum_ns += dt;
}

/* ---- the page ------------------------------------------------------------ */

/* A growing text buffer (p allocated before the first put); an allocation
 * failure is sticky (oom) and the scrape answers 500 instead of a truncated
 * page. */
struct buf {
    char *p;
    size_t len, cap;
    bool oom;
};

static void put(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

static void put(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    int n;

    if (b->oom)
        return;
    for (;;) {
        va_start(ap, fmt);
        n = vsnprintf(b->p + b->len, b->cap - b->len, fmt, ap);
        va_end(ap);
        if (n < 0) {
            b->oom = true;
            return;
        }
        if ((size_t)n < b->cap - b->len) {
            b->len += (size_t)n;
            return;
        }
        {
            size_t cap = b->cap * 2 > b->len + (size_t)n + 1 ? b->cap * 2
                                                              : b->len + (size_t)n + 1;
            char *p = realloc(b->p, cap);

            if (!p) {
                b->oom = true;
                return;
            }
            b->p = p;
            b->cap = cap;
        }
    }
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

/* One family with a sample per tenant. */
static void per_tenant(struct buf *b, const struct tierd *d, const struct tier_stats *st,
                       const char *name, const char *type, const char *help, size_t field)
{
    family(b, name, type, help);
    for (uint32_t i = 0; i < d->ntenants; i++)
        put(b, "%s{tenant=\"%s\"} %llu\n", name, d->tenants[i].name,
            (unsigned long long)st_u64(&st[i], field, 0));
}

/* One per-tier family: a sample for each tier each tenant has; rfield
 * (SIZE_MAX: none) is the remote tier's figure of the family, sampled as
 * tier="remote" for tenants with one. */
static void per_tier(struct buf *b, const struct tierd *d, const struct tier_stats *st,
                     const char *name, const char *type, const char *help, size_t field,
                     size_t rfield)
{
    family(b, name, type, help);
    for (uint32_t i = 0; i < d->ntenants; i++) {
        const struct tenant *tn = &d->tenants[i];

        for (int t = TIER_L_HOT; t < TIER_L_N; t++) {
            if ((t == TIER_L_HOT && !tn->hot) || (t == TIER_L_COLD && !tn->cold))
                continue;
            put(b, "%s{tenant=\"%s\",tier=\"%s\"} %llu\n", name, tn->name, tier_name[t],
                (unsigned long long)st_u64(&st[i], field, t));
        }
        if (tn->remote && rfield != SIZE_MAX)
            put(b, "%s{tenant=\"%s\",tier=\"remote\"} %llu\n", name, tn->name,
                (unsigned long long)st_u64(&st[i], rfield, 0));
    }
}

/* The remote tier's own families, when some tenant has one. */
static void remote_families(struct buf *b, const struct tierd *d, const struct tier_stats *st)
{
    if (!d->remote.seeds[0])
        return;
    per_tenant(b, d, st, "kvtier_remote_misses_total", "counter",
               "Blocks asked of the remote tier that it did not hold.",
               ST_FIELD(remote_misses));
    per_tenant(b, d, st, "kvtier_remote_puts_total", "counter",
               "Blocks written to the remote tier.", ST_FIELD(remote_puts));
    per_tenant(b, d, st, "kvtier_remote_errors_total", "counter",
               "Remote tier operations failed (node down, timeout, cluster error) or "
               "writes skipped.", ST_FIELD(remote_errors));
    per_tenant(b, d, st, "kvtier_remote_checksum_errors_total", "counter",
               "Remote values read back with a wrong checksum (counted as misses).",
               ST_FIELD(remote_checksum_errors));
    per_tenant(b, d, st, "kvtier_remote_probe_keys_total", "counter",
               "Keys lookups asked the remote tier about.", ST_FIELD(remote_probes));
    per_tenant(b, d, st, "kvtier_remote_probe_hit_keys_total", "counter",
               "Keys lookups found on the remote tier.", ST_FIELD(remote_probe_hits));
    per_tenant(b, d, st, "kvtier_remote_redirects_total", "counter",
               "Cluster MOVED / ASK redirections followed.", ST_FIELD(remote_redirects));
}

/* One per-namespace family. The ns label is what people read; ns_id keeps
 * series apart where two descriptors differ only in what the label leaves
 * out (block size, tp size). */
/* The label set of namespace i (0-based) of tenant t, without the closing
 * brace. */
static void ns_labels(struct buf *b, const struct tenant *t, const struct tierd_ns *ns,
                      uint32_t i)
{
    put(b, "{tenant=\"%s\",ns=\"", t->name);
    put_label(b, ns->d.model_id);
    put(b, "/");
    put_label(b, ns->d.dtype);
    put(b, "/");
    put_label(b, ns->d.layout);
    put(b, "/tp%u\",ns_id=\"%u\"", ns->d.tp_rank, i + 1);
}

static void per_ns(struct buf *b, const struct tierd *d, const char *name, const char *help,
                   size_t field)
{
    family(b, name, "counter", help);
    for (uint32_t k = 0; k < d->ntenants; k++)
        for (uint32_t i = 0; i < d->tenants[k].ns_cap; i++) {
            const struct tierd_ns *ns = &d->tenants[k].ns[i];
            uint64_t v;

            if (!ns->open)
                continue;
            memcpy(&v, (const char *)&ns->st + field, sizeof(v));
            put(b, "%s", name);
            ns_labels(b, &d->tenants[k], ns, i);
            put(b, "} %llu\n", (unsigned long long)v);
        }
}

/* Missed lookup keys by namespace and cause, and how long after their
 * eviction evicted keys were asked for: a too-small cache shows as
 * dropped/evicted misses soon after eviction; an engine that hashes
 * differently as misses of keys never stored. */
static void miss_causes(struct buf *b, const struct tierd *d)
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
    for (uint32_t k = 0; k < d->ntenants; k++)
        for (uint32_t i = 0; i < d->tenants[k].ns_cap; i++) {
            const struct tierd_ns *ns = &d->tenants[k].ns[i];

            for (int c = 0; c < TIER_MISS_N && ns->open; c++) {
                put(b, "%s", name);
                ns_labels(b, &d->tenants[k], ns, i);
                put(b, ",cause=\"%s\"} %llu\n", cause[c],
                    (unsigned long long)ns->st.why.cause[c]);
            }
        }
    name = "kvtier_namespace_evicted_miss_age_seconds_total";
    family(b, name, "counter",
           "Summed over dropped and evicted misses: seconds from the eviction to the lookup.");
    for (uint32_t k = 0; k < d->ntenants; k++)
        for (uint32_t i = 0; i < d->tenants[k].ns_cap; i++) {
            const struct tierd_ns *ns = &d->tenants[k].ns[i];

            if (!ns->open)
                continue;
            put(b, "%s", name);
            ns_labels(b, &d->tenants[k], ns, i);
            put(b, "} %llu.%03llu\n", (unsigned long long)(ns->st.why.evicted_age_ms / 1000),
                (unsigned long long)(ns->st.why.evicted_age_ms % 1000));
        }
    per_ns(b, d, "kvtier_namespace_deadline_misses_total",
           "Gets answered short because their deadline passed.", NS_FIELD(deadline_misses));
}

static void latency(struct buf *b, const struct metrics *m)
{
    const char *name = "kvtier_request_duration_seconds";

    family(b, name, "histogram",
           "Time from a request's arrival to its reply (for a get that waits for the disk, "
           "to the deferred reply).");
    for (int op = 1; op < KVT_OP_MAX_; op++) {
        const struct hist *h = &m->lat[op];
        uint64_t cum = 0;
        char num[16];
        const char *opn = op_name[op];

        if (!opn) {
            snprintf(num, sizeof(num), "op%d", op);
            opn = num;
        }
        for (size_t i = 0; i < NBUCKET; i++) {
            cum += h->n[i];
            put(b, "%s_bucket{op=\"%s\",le=\"%s\"} %llu\n", name, opn, bucket[i].le,
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

static void page(struct buf *b, const struct metrics *m)
{
    const struct tierd *d = m->d;
    struct tier_stats st[TENANT_MAX];
    uint64_t up_ms = tierd_now_ms() - d->start_ms, nns = 0;

    for (uint32_t i = 0; i < d->ntenants; i++) {
        tier_stats_get(d->tenants[i].store, &st[i]);
        nns += d->tenants[i].nns;
    }
    family(b, "kvtier_uptime_seconds", "gauge", "Seconds since tierd started.");
    put(b, "kvtier_uptime_seconds %llu.%03llu\n", (unsigned long long)(up_ms / 1000),
        (unsigned long long)(up_ms % 1000));
    one(b, "kvtier_clients_connected", "gauge", "Client sessions open.", d->clients);
    one(b, "kvtier_namespaces", "gauge", "Namespaces opened since start.", nns);
    one(b, "kvtier_protocol_errors_total", "counter", "Malformed messages received.",
        d->proto_errors);
    one(b, "kvtier_refused_clients_total", "counter",
        "Connections refused because no tenant admits the peer's uid or gid.", d->refused);
    one(b, "kvtier_get_deadline_misses_total", "counter",
        "Gets answered short because their deadline passed while reading the disk.",
        d->get_deadline_misses);
    one(b, "kvtier_durable_wait_timeouts_total", "counter",
        "Durable commits answered -EAGAIN after --durable-wait-ms (writes going on).",
        d->durable_wait_timeouts);
    one(b, "kvtier_pins_expired_total", "counter",
        "Pinning lookups' holds that expired before an unpin released them.", d->pins_expired);
    family(b, "kvtier_tenant_clients_connected", "gauge", "Client sessions open per tenant.");
    for (uint32_t i = 0; i < d->ntenants; i++)
        put(b, "kvtier_tenant_clients_connected{tenant=\"%s\"} %u\n", d->tenants[i].name,
            d->tenants[i].clients);
    per_tenant(b, d, st, "kvtier_index_entries", "gauge", "Blocks in the index (every tier).",
               ST_FIELD(index_entries));
    per_tenant(b, d, st, "kvtier_index_memory_bytes", "gauge", "Memory the index uses.",
               ST_FIELD(index_bytes));
    per_tenant(b, d, st, "kvtier_leases_active", "gauge", "Blocks leased to readers now.",
               ST_FIELD(leases_active));
    per_tenant(b, d, st, "kvtier_reserved_blocks", "gauge",
               "Blocks reserved by writers, not committed.", ST_FIELD(reserved));
    per_tenant(b, d, st, "kvtier_reclaimed_blocks_total", "counter",
               "Leases and reservations taken back from clients that went away.",
               ST_FIELD(reclaimed));
    per_tenant(b, d, st, "kvtier_dedup_blocks_total", "counter",
               "Blocks a put offered that were already stored or reserved.",
               ST_FIELD(dedup_blocks));
    per_tenant(b, d, st, "kvtier_demotions_total", "counter", "Warm blocks written to cold.",
               ST_FIELD(demotions));
    per_tenant(b, d, st, "kvtier_promotions_total", "counter",
               "Cold blocks read back into warm.", ST_FIELD(promotions));
    per_tenant(b, d, st, "kvtier_hot_promotions_total", "counter",
               "Warm blocks copied up into hot.", ST_FIELD(hot_promotions));
    per_tenant(b, d, st, "kvtier_dropped_blocks_total", "counter",
               "Warm blocks evicted with no cold copy (lost).", ST_FIELD(dropped));
    per_tenant(b, d, st, "kvtier_cold_errors_total", "counter",
               "Demotions or promotions that failed.", ST_FIELD(cold_errors));
    per_tenant(b, d, st, "kvtier_checksum_errors_total", "counter",
               "Cold blocks read back with a wrong checksum (counted as misses).",
               ST_FIELD(checksum_errors));
    per_tenant(b, d, st, "kvtier_io_errors_total", "counter", "Cold tier read or write errors.",
               ST_FIELD(io_errors));

    per_tier(b, d, st, "kvtier_tier_hits_total", "counter", "Blocks served from the tier.",
             ST_FIELD(hits), ST_FIELD(remote_hits));
    per_tier(b, d, st, "kvtier_tier_in_bytes_total", "counter", "Bytes written into the tier.",
             ST_FIELD(bytes_in), ST_FIELD(remote_bytes_in));
    per_tier(b, d, st, "kvtier_tier_out_bytes_total", "counter", "Bytes read out of the tier.",
             ST_FIELD(bytes_out), ST_FIELD(remote_bytes_out));
    per_tier(b, d, st, "kvtier_tier_evictions_total", "counter",
             "Blocks evicted from the tier.", ST_FIELD(evictions), SIZE_MAX);
    per_tier(b, d, st, "kvtier_tier_blocks", "gauge", "Blocks held in the tier.",
             ST_FIELD(blocks), SIZE_MAX);
    per_tier(b, d, st, "kvtier_tier_used_bytes", "gauge", "Bytes of the tier in use.",
             ST_FIELD(bytes_used), SIZE_MAX);
    per_tier(b, d, st, "kvtier_tier_capacity_bytes", "gauge", "Size of the tier.",
             ST_FIELD(bytes_capacity), SIZE_MAX);
    remote_families(b, d, st);

    per_ns(b, d, "kvtier_namespace_lookups_total", "Lookup requests.", NS_FIELD(lookups));
    per_ns(b, d, "kvtier_namespace_lookup_keys_total", "Keys looked up.",
           NS_FIELD(lookup_keys));
    per_ns(b, d, "kvtier_namespace_lookup_hit_keys_total",
           "Keys looked up that were found (the leading run).", NS_FIELD(hit_keys));
    per_ns(b, d, "kvtier_namespace_lookup_miss_keys_total",
           "Keys looked up that were not found.", NS_FIELD(miss_keys));
    per_ns(b, d, "kvtier_namespace_prefix_hit_tokens_total",
           "Tokens of the prefixes found by lookups (hit keys x block tokens).",
           NS_FIELD(hit_tokens));
    per_ns(b, d, "kvtier_namespace_put_blocks_total", "Blocks committed by puts.",
           NS_FIELD(put_blocks));
    per_ns(b, d, "kvtier_namespace_get_blocks_total", "Blocks handed out by gets.",
           NS_FIELD(get_blocks));
    per_ns(b, d, "kvtier_namespace_in_bytes_total", "Bytes committed by puts.",
           NS_FIELD(bytes_in));
    per_ns(b, d, "kvtier_namespace_out_bytes_total", "Bytes handed out by gets.",
           NS_FIELD(bytes_out));

    miss_causes(b, d);
    latency(b, m);
}

/* ---- HTTP -------------------------------------------------------------- */

static enum MHD_Result answer(struct MHD_Connection *c, unsigned status, const char *type,
                              char *body, size_t len, bool must_free)
{
    struct MHD_Response *r = MHD_create_response_from_buffer(
        len, body, must_free ? MHD_RESPMEM_MUST_FREE : MHD_RESPMEM_PERSISTENT);
    enum MHD_Result ret;

    if (!r) {
        if (must_free)
            free(body);
        return MHD_NO; /* MHD closes the connection */
    }
    MHD_add_response_header(r, MHD_HTTP_HEADER_CONTENT_TYPE, type);
    if (status == MHD_HTTP_METHOD_NOT_ALLOWED)
        MHD_add_response_header(r, MHD_HTTP_HEADER_ALLOW, "GET, HEAD");
    ret = MHD_queue_response(c, status, r);
    MHD_destroy_response(r);
    return ret;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url,
                                  const char *method, const char *version,
                                  const char *upload, size_t *upload_len, void **req_ctx)
{
    static char not_found[] = "not found: the metrics are at /metrics\n";
    static char not_allowed[] = "method not allowed\n";
    static char no_memory[] = "out of memory\n";
    static int seen; /* marks a request whose headers came */
    struct metrics *m = cls;
    struct buf b = { 0 };

    (void)version;
    (void)upload;
    /* answer once the whole request is in (the first call has only the
     * headers): a reply queued before that costs the connection its
     * keep-alive, and a scraper its reuse of it */
    if (!*req_ctx) {
        *req_ctx = &seen;
        return MHD_YES;
    }
    if (*upload_len) { /* a body we do not want */
        *upload_len = 0;
        return MHD_YES;
    }
    if (strcmp(method, "GET") != 0 && strcmp(method, "HEAD") != 0)
        return answer(c, MHD_HTTP_METHOD_NOT_ALLOWED, "text/plain", not_allowed,
                      sizeof(not_allowed) - 1, false);
    if (strcmp(url, "/metrics") != 0)
        return answer(c, MHD_HTTP_NOT_FOUND, "text/plain", not_found, sizeof(not_found) - 1,
                      false);
    b.cap = 32768; /* the page with a few namespaces; put() grows it */
    b.p = malloc(b.cap);
    b.oom = !b.p;
    page(&b, m);
    if (b.oom) {
        free(b.p);
        return answer(c, MHD_HTTP_INTERNAL_SERVER_ERROR, "text/plain", no_memory,
                      sizeof(no_memory) - 1, false);
    }
    return answer(c, MHD_HTTP_OK, "text/plain; version=0.0.4; charset=utf-8", b.p, b.len,
                  true);
}

static void mhd_log(void *ctx, const char *fmt, va_list ap)
{
    char msg[256];
    size_t n;

    const struct metrics *m = ctx;

    if (m->quiet && !m->d->verbose)
        return;
    vsnprintf(msg, sizeof(msg), fmt, ap);
    n = strlen(msg);
    while (n && msg[n - 1] == '\n') /* MHD ends its messages with one */
        msg[--n] = 0;
    tierd_log("metrics: %s", msg);
}

/* Run MHD, then arm the timer for when it wants to run next. */
static void run(struct metrics *m)
{
    struct itimerspec it = { 0 };
    MHD_UNSIGNED_LONG_LONG ms;

    MHD_run(m->mhd);
    if (MHD_get_timeout(m->mhd, &ms) == MHD_YES) {
        /* 0 ms: work is pending now; a zero it_value would disarm */
        it.it_value.tv_sec = (time_t)(ms / 1000);
        it.it_value.tv_nsec = ms ? (long)(ms % 1000) * 1000000 : 1;
    }
    timerfd_settime(m->timer_fd, 0, &it, NULL);
}

static void on_mhd(struct ev_loop *l, int fd, uint32_t events, void *ctx)
{
    (void)l;
    (void)fd;
    (void)events;
    run(ctx);
}

static void on_timer(struct ev_loop *l, int fd, uint32_t events, void *ctx)
{
    uint64_t ticks;

    (void)l;
    (void)events;
    if (read(fd, &ticks, sizeof(ticks)) < 0 && errno != EAGAIN)
        return;
    run(ctx);
}

/* ---- lifecycle ------------------------------------------------------------ */

static int listen_tcp(const char *addr, uint16_t port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port) };
    int one = 1, rc, fd;

    if (inet_pton(AF_INET, addr, &a.sin_addr) != 1)
        return -EINVAL;
    fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -errno;
    /* a restart may bind while old connections sit in TIME_WAIT; a port
     * another process listens on is still refused */
    setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) < 0 || listen(fd, 16) < 0) {
        rc = -errno;
        close(fd);
        return rc;
    }
    return fd;
}

int metrics_open(struct tierd *d, const char *addr, uint16_t port, struct metrics **out)
{
    struct metrics *m = calloc(1, sizeof(*m));
    const union MHD_DaemonInfo *info;
    int rc, lfd;

    if (!m)
        return -ENOMEM;
    m->d = d;
    m->timer_fd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    if (m->timer_fd < 0) {
        rc = -errno;
        goto out_free;
    }
    /* our own socket, so that a port in use is told apart from MHD's other
     * failures (it reports none of them by errno) */
    lfd = listen_tcp(addr, port);
    if (lfd < 0) {
        rc = lfd;
        goto out_timer;
    }
    m->mhd = MHD_start_daemon(MHD_USE_EPOLL | MHD_USE_ERROR_LOG, 0, NULL, NULL, on_request, m,
                              MHD_OPTION_EXTERNAL_LOGGER, mhd_log, m,
                              MHD_OPTION_LISTEN_SOCKET, lfd,
                              /* a scrape endpoint: a few scrapers, short requests */
                              MHD_OPTION_CONNECTION_LIMIT, 16u,
                              MHD_OPTION_CONNECTION_TIMEOUT, 10u, MHD_OPTION_END);
    if (!m->mhd) {
        /* lfd is left open: whether MHD closed it on failure is not
         * documented, and tierd exits next */
        rc = -EIO;
        goto out_timer;
    }
    info = MHD_get_daemon_info(m->mhd, MHD_DAEMON_INFO_EPOLL_FD);
    if (!info || info->epoll_fd < 0) {
        rc = -EIO;
        goto out_stop;
    }
    m->mhd_fd = info->epoll_fd;
    m->quiet = true;
    *out = m;
    return 0;

out_stop:
    MHD_stop_daemon(m->mhd); /* closes lfd too */
out_timer:
    close(m->timer_fd);
out_free:
    free(m);
    return rc;
}

int metrics_attach(struct metrics *m, struct ev_loop *l)
{
    int rc = ev_add(l, m->mhd_fd, on_mhd, m);

    if (rc < 0)
        return rc;
    rc = ev_add(l, m->timer_fd, on_timer, m);
    if (rc < 0) {
        ev_del(l, m->mhd_fd);
        return rc;
    }
    m->loop = l;
    run(m); /* arm the timer MHD may already want */
    return 0;
}

void metrics_close(struct metrics *m)
{
    if (!m)
        return;
    if (m->loop) {
        ev_del(m->loop, m->mhd_fd);
        ev_del(m->loop, m->timer_fd);
    }
    MHD_stop_daemon(m->mhd); /* closes its epoll fd, the listening socket, connections */
    close(m->timer_fd);
    free(m);
}
