/* SPDX-License-Identifier: MIT */
/*
 * kvt_stats.c - kvt_stats_fields(): the layout of kvt_stats and
 * kvt_tier_stats as a table (name, type, help, offset, size), made from
 * kvt_stats_list.h's lists, for bindings that build the structs from the
 * library they loaded (the Python binding) rather than copy them by hand.
 * It describes; fetching the counters is kvt_stats_get's (kvt_client.c).
 */
#include <stddef.h>

#include "kvtier.h"

#define FIELD(s, name, type, help)                                                         \
    { #name, type, help, (uint32_t)offsetof(s, name), (uint32_t)sizeof(((s *)0)->name) },
#define STATS_FIELD(src, name, type, metric, help) FIELD(kvt_stats, name, #type, help)
#define TIER_FIELD(name, type, metric, help, remote) FIELD(kvt_tier_stats, name, #type, help)

/* kvt_stats's head is not counters (no list of its own): "" type and help. */
static const kvt_stats_field stats_fields[] = {
    FIELD(kvt_stats, version, "", "")
    FIELD(kvt_stats, clients, "", "")
    FIELD(kvt_stats, namespaces, "", "")
    FIELD(kvt_stats, pad, "", "")
    KVT_STATS_LIST(STATS_FIELD)
};

static const kvt_stats_field tier_fields[] = { KVT_TIER_STATS_LIST(TIER_FIELD) };

const kvt_stats_field *kvt_stats_fields(int of, size_t *n, size_t *bytes)
{
    const kvt_stats_field *f = NULL;
    size_t count = 0, size = 0;

    if (of == KVT_STATS_OF_STATS) {
        f = stats_fields;
        count = sizeof(stats_fields) / sizeof(stats_fields[0]);
        size = sizeof(kvt_stats);
    } else if (of == KVT_STATS_OF_TIER) {
        f = tier_fields;
        count = sizeof(tier_fields) / sizeof(tier_fields[0]);
        size = sizeof(kvt_tier_stats);
    }
    if (n)
        *n = count;
    if (bytes)
        *bytes = size;
    return f;
}
