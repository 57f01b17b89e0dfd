/* SPDX-License-Identifier: MIT */
/*
 * kvt_stats_list.h - the daemon's counters, declared once: two X-macro
 * lists and nothing else (no types, no functions, no includes). Every
 * place that names a counter expands them: kvt_stats and kvt_tier_stats
 * and the field table kvt_stats_fields() (client/), the store's struct
 * tier_stats (store/tier.h), tierd's stats reply and metrics page, and
 * tierctl's table and JSON; the Python binding builds its ctypes struct
 * from kvt_stats_fields().
 *
 * A header of its own, not part of kvtier.h, because store/ includes
 * nothing of client/ and its struct tier_stats is made from these lists
 * too; kvtier.h includes it, and it is installed next to kvtier.h.
 *
 *   KVT_STATS_LIST(X): X(src, name, type, metric, help), in kvt_stats's
 *   order after its head (version .. pad):
 *     src     where tierd takes it from: STORE (the same field of the
 *             tenant's store counters, struct tier_stats), TIERD (its own),
 *             TIERS (the per-tier array: KVT_TIER_STATS_LIST)
 *     type    counter (only grows) or gauge (a figure now)
 *     metric  its per-tenant family on tierd's metrics page, or "" (none, or
 *             shown another way)
 *     help    what it counts (tierctl's table prints it next to the figure)
 *   KVT_TIER_STATS_LIST(X): X(name, type, metric, help, remote): a field of
 *     kvt_tier_stats; remote names the STORE counter that is the remote
 *     tier's figure of it (tier="remote" on the page), "": there is none.
 * A field whose name holds "bytes" is a byte count (tierctl shows it in
 * IEC units). A new counter goes at the end of a list (and
 * KVT_STATS_VERSION in kvtier.h goes up): fields already there keep their
 * offsets. Then it needs only its increment in the store or tierd.
 */
#ifndef KVT_STATS_LIST_H
#define KVT_STATS_LIST_H

#define KVT_TIER_STATS_LIST(X)                                                             \
    X(hits, counter, "kvtier_tier_hits_total", "Blocks served from the tier.", "remote_hits") \
    X(bytes_in, counter, "kvtier_tier_in_bytes_total", "Bytes written into the tier.",     \
      "remote_bytes_in")                                                                   \
    X(bytes_out, counter, "kvtier_tier_out_bytes_total", "Bytes read out of the tier.",    \
      "remote_bytes_out")                                                                  \
    X(evictions, counter, "kvtier_tier_evictions_total", "Blocks evicted from the tier.",  \
      "")                                                                                  \
    X(blocks, gauge, "kvtier_tier_blocks", "Blocks held in the tier.", "")                 \
    X(bytes_used, gauge, "kvtier_tier_used_bytes", "Bytes of the tier in use.", "")        \
    X(bytes_capacity, gauge, "kvtier_tier_capacity_bytes", "Size of the tier.", "")

#define KVT_STATS_LIST(X)                                                                  \
    X(TIERD, uptime_ms, gauge, "", "Milliseconds since tierd started.")                    \
    X(STORE, lookups, counter, "", "Lookup calls.")                                        \
    X(STORE, lookup_keys, counter, "", "Keys asked by lookups.")                           \
    X(STORE, lookup_hits, counter, "", "Leading hits answered by lookups.")                \
    X(STORE, misses, counter, "", "Keys asked by lookup or get and not found.")            \
    X(STORE, puts, counter, "", "Put reserve calls.")                                      \
    X(STORE, put_blocks, counter, "", "Blocks committed.")                                 \
    X(STORE, dedup_blocks, counter, "kvtier_dedup_blocks_total",                           \
      "Blocks a put offered that were already stored or reserved.")                        \
    X(STORE, gets, counter, "", "Get calls.")                                              \
    X(STORE, get_blocks, counter, "", "Blocks leased by gets.")                            \
    X(STORE, removes, counter, "", "Blocks removed by request.")                           \
    X(STORE, leases_active, gauge, "kvtier_leases_active", "Blocks leased to readers now.") \
    X(STORE, reserved, gauge, "kvtier_reserved_blocks",                                    \
      "Blocks reserved by writers, not committed.")                                        \
    X(STORE, reclaimed, counter, "kvtier_reclaimed_blocks_total",                          \
      "Leases and reservations taken back from clients that went away.")                   \
    X(TIERD, proto_errors, counter, "", "Malformed messages received.")                    \
    X(STORE, index_entries, gauge, "kvtier_index_entries",                                 \
      "Blocks in the index (every tier).")                                                 \
    X(STORE, index_bytes, gauge, "kvtier_index_memory_bytes", "Memory the index uses.")   \
    X(STORE, demotions, counter, "kvtier_demotions_total", "Warm blocks written to cold.")  \
    X(STORE, promotions, counter, "kvtier_promotions_total",                               \
      "Cold blocks read back into warm.")                                                  \
    X(STORE, dropped, counter, "kvtier_dropped_blocks_total",                              \
      "Warm blocks evicted with no cold copy (lost).")                                     \
    X(STORE, checksum_errors, counter, "kvtier_checksum_errors_total",                     \
      "Cold blocks read back with a wrong checksum (counted as misses).")                  \
    X(STORE, io_errors, counter, "kvtier_io_errors_total", "Cold tier read or write errors.") \
    X(TIERD, deadline_misses, counter, "",                                                 \
      "Gets answered short because their deadline passed.")                                \
    X(TIERS, tier, counter, "", "Per tier, indexed by KVT_TIER_*: KVT_TIER_STATS_LIST.")   \
    X(STORE, hot_promotions, counter, "kvtier_hot_promotions_total",                       \
      "Warm blocks copied up into hot.")                                                   \
    /* version 4: the remote tier (a Redis Cluster shared by every node's tierd);          \
     * all zero without one */                                                             \
    X(STORE, remote_hits, counter, "", "Blocks read back from the remote tier (verified).") \
    X(STORE, remote_misses, counter, "kvtier_remote_misses_total",                         \
      "Blocks asked of the remote tier that it did not hold.")                             \
    X(STORE, remote_puts, counter, "kvtier_remote_puts_total",                             \
      "Blocks written to the remote tier.")                                                \
    X(STORE, remote_bytes_in, counter, "", "Payload bytes written to the remote tier.")    \
    X(STORE, remote_bytes_out, counter, "", "Payload bytes read back from the remote tier.") \
    X(STORE, remote_errors, counter, "kvtier_remote_errors_total",                         \
      "Remote tier operations failed (node down, timeout, cluster error) or writes "       \
      "skipped.")                                                                          \
    X(STORE, remote_checksum_errors, counter, "kvtier_remote_checksum_errors_total",       \
      "Remote values read back with a wrong checksum (counted as misses).")                \
    X(STORE, remote_probes, counter, "kvtier_remote_probe_keys_total",                     \
      "Keys lookups asked the remote tier about.")                                         \
    X(STORE, remote_probe_hits, counter, "kvtier_remote_probe_hit_keys_total",             \
      "Keys lookups found on the remote tier.")                                            \
    X(STORE, remote_redirects, counter, "kvtier_remote_redirects_total",                   \
      "Cluster MOVED / ASK redirections followed.")                                         \
    /* version 5: NVMe admission */                                                        \
    X(STORE, cold_admitted, counter, "kvtier_cold_admitted_blocks_total",                  \
      "Blocks leaving warm that the mover wrote to cold.")                                  \
    X(STORE, cold_refused, counter, "kvtier_cold_refused_blocks_total",                    \
      "Blocks leaving warm not written to cold: no second touch (counted in dropped).")     \
    X(STORE, cold_over_budget, counter, "kvtier_cold_over_budget_blocks_total",            \
      "Blocks leaving warm not written to cold: the write budget was spent (in dropped).")

#endif /* KVT_STATS_LIST_H */
