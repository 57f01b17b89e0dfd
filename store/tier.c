/* SPDX-License-Identifier: MIT */
/*
 * tier.c - the store's frame: opening and closing it (with the tiers it
 * owns: tier_open), its pools, the event fds and poll that deliver every
 * tier's completions, and its counters.
 *
 * The jobs themselves live beside it (tier_int.h has the map): chains and
 * LRU, slots, the movers, namespaces, reservations, leases, durable
 * commits, removal, restart and the invariant checker.
 */
#include <errno.h>
#include <stdlib.h>
#include <time.h>

#include "tier_int.h"

uint64_t tier_slot_bytes(uint64_t block_bytes)
{
    return (block_bytes + TIER_RAM_PAGE - 1) & ~(uint64_t)(TIER_RAM_PAGE - 1);
}

int tier_create(const struct tier_cfg *cfg, struct tier **out)
{
    struct tier_ram_cfg rc_cfg = {
        .bytes = cfg->warm_bytes, .lock = cfg->lock_memory, .huge = cfg->huge_pages,
        .log = cfg->log, .log_ctx = cfg->log_ctx,
    };
    struct tier *t;
    double hi = cfg->high_wm > 0 ? cfg->high_wm : 0.95;
    double lo = cfg->low_wm > 0 ? cfg->low_wm : 0.85;
    int rc;

    if (cfg->warm_bytes == 0 || hi > 1.0 || lo > hi)
        return -EINVAL;
    t = calloc(1, sizeof(*t));
    if (!t)
        return -ENOMEM;
    rc = tier_pol_init(t, cfg->evict_policy);
    if (rc < 0)
        goto out_free;
    rc = idx_create(1024, &t->idx);
    if (rc < 0)
        goto out_free;
    rc = tier_why_create(cfg->why_events ? cfg->why_events : 65536, &t->why);
    if (rc < 0)
        goto out_idx;
    rc = tier_ram_open(&rc_cfg, &t->ram);
    if (rc < 0)
        goto out_idx;
    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        for (int l = 0; l < TIER_POL_LISTS; l++)
            for (int k = 0; k < 2; k++)
                t->lru[c][l][k].head = t->lru[c][l][k].tail = TIER_NONE;
    t->clru.head = t->clru.tail = TIER_NONE;
    for (int c = 0; c < TIER_RAM_CLASSES; c++)
        t->hlru[c].head = t->hlru[c].tail = TIER_NONE;
    if (cfg->hot) {
        struct tier_ram_cfg hc = { .bytes = tier_hot_bytes(cfg->hot), .no_memory = true };

        rc = tier_ram_open(&hc, &t->hram);
        if (rc < 0) {
            tier_ram_close(t->ram);
            goto out_idx;
        }
        t->hot = cfg->hot;
        t->hot_high = (uint64_t)(hi * (double)tier_ram_bytes(t->hram));
        t->hot_low = (uint64_t)(lo * (double)tier_ram_bytes(t->hram));
    }
    t->high_bytes = (uint64_t)(hi * (double)tier_ram_bytes(t->ram));
    t->low_bytes = (uint64_t)(lo * (double)tier_ram_bytes(t->ram));
    t->cold = cfg->cold;
    t->write_through = cfg->cold && cfg->write_through;
    t->remote = cfg->remote;
    t->cfg = *cfg;
    *out = t;
    return 0;
out_idx:
    tier_why_destroy(t->why);
    idx_destroy(t->idx);
out_free:
    free(t);
    return rc;
}

void tier_destroy(struct tier *t)
{
    if (!t)
        return;
    /* the caller closed the cold tier first (tier_cold_close runs or cancels
     * every callback), so nothing in flight can name t any more */
    tier_pol_fini(t);
    while (t->moves) {
        struct move *m = t->moves;

        t->moves = m->next;
        free(m->ws.w);
        free(m->dws.w);
        free(m);
    }
    while (t->dwaits) {
        struct dwait *d = t->dwaits;

        t->dwaits = d->next;
        free(d);
    }
    tier_dholds_free(t);
    while (t->rops) { /* none once the remote tier is closed first, as it must be */
        struct rop *o = t->rops;

        t->rops = o->next;
        free(o);
    }
    tier_ns_free_all(t); /* callers' handles die with the store, as tier.h says */
    tier_ram_close(t->hram);
    tier_ram_close(t->ram);
    tier_why_destroy(t->why);
    idx_destroy(t->idx);
    free(t);
}

int tier_open(const struct tier_open_cfg *cfg, struct tier **out, enum tier_part *failed)
{
    struct tier_cfg tc = cfg->store;
    struct tier_cold *cold = NULL;
    struct tier_remote *remote = NULL;
    struct tier_hot *hot = NULL;
    enum tier_part part = TIER_PART_COLD;
    int rc = 0;

    if (cfg->cold && (rc = tier_cold_open(cfg->cold, &cold)) < 0)
        goto out_close;
    part = TIER_PART_REMOTE;
    if (cfg->remote && (rc = tier_remote_open(cfg->remote, &remote)) < 0)
        goto out_close;
    part = TIER_PART_HOT;
    if (cfg->hot && (rc = tier_hot_open(cfg->hot, &hot)) < 0)
        goto out_close;
    part = TIER_PART_WARM;
    tc.cold = cold;
    tc.remote = remote;
    tc.hot = hot;
    rc = tier_create(&tc, out);
    if (rc < 0)
        goto out_close;
    (*out)->owns_tiers = true;
    return 0;
out_close:
    tier_cold_close(cold);
    tier_remote_close(remote);
    tier_hot_close(hot);
    if (failed)
        *failed = part;
    return rc;
}

void tier_close(struct tier *t)
{
    if (!t)
        return;
    if (t->owns_tiers) {
        /* the order of tier.h: callbacks only ever run into what is open */
        tier_cold_close(t->cold);
        tier_remote_close(t->remote);
        tier_hot_close(t->hot);
    }
    tier_destroy(t);
}

struct tier_cold *tier_cold_of(const struct tier *t) { return t->cold; }
struct tier_hot *tier_hot_of(const struct tier *t) { return t->hot; }
struct tier_remote *tier_remote_of(const struct tier *t) { return t->remote; }

int tier_pool_fd(const struct tier *t) { return tier_ram_fd(t->ram); }

uint64_t tier_pool_bytes(const struct tier *t) { return tier_ram_bytes(t->ram); }

void *tier_pool_base(const struct tier *t) { return tier_ram_base(t->ram); }

uint64_t tier_block_max(const struct tier *t) { return tier_ram_seg_bytes(t->ram); }

uint64_t tier_now_ms(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC_COARSE, &ts); /* ms granularity is plenty; no syscall */
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* id's data is gone for reason ev (enum tier_event), from tier lvl. */
void tier_remember(struct tier *t, uint32_t id, uint8_t ev, uint8_t lvl)
{
    const struct idx_entry *e = idx_at(t->idx, id);

    tier_why_put(t->why, e->ns, &e->key, ev, lvl, tier_now_ms());
}

int tier_event_fd(const struct tier *t)
{
    return t->cold ? tier_cold_event_fd(t->cold) : -1;
}

int tier_hot_fd(const struct tier *t)
{
    return t->hot ? tier_hot_event_fd(t->hot) : -1;
}

int tier_remote_fd(const struct tier *t)
{
    return t->remote ? tier_remote_event_fd(t->remote) : -1;
}

int tier_poll(struct tier *t, bool wait)
{
    int n = t->hot ? tier_hot_poll(t->hot, false) : 0, rc;

    if (n < 0)
        return n;
    if (t->remote) {
        /* waits on the remote only when nothing else is in flight */
        bool others = (t->cold && tier_cold_busy(t->cold)) ||
                      (t->hot && tier_hot_inflight(t->hot));

        rc = tier_remote_poll(t->remote, wait && n == 0 && !others);
        if (rc < 0)
            return rc;
        n += rc;
    }
    /* wait on whichever has work in flight: the disk first */
    if (t->cold && (tier_cold_busy(t->cold) || !wait || n > 0))
        rc = tier_cold_poll(t->cold, wait && n == 0);
    else if (t->hot)
        rc = tier_hot_poll(t->hot, wait && n == 0);
    else
        rc = 0;
    return rc < 0 ? rc : n + rc;
}

void tier_stats_get(const struct tier *t, struct tier_stats *out)
{
    *out = t->st;
    out->bytes_used[TIER_L_WARM] = tier_ram_used(t->ram);
    out->bytes_capacity[TIER_L_WARM] = tier_ram_bytes(t->ram);
    out->index_entries = idx_count(t->idx);
    out->index_bytes = idx_mem_bytes(t->idx);
    out->memory_locked = tier_ram_locked(t->ram);
    out->huge_pages = tier_ram_huge(t->ram);
    if (t->hot) {
        out->bytes_used[TIER_L_HOT] = tier_ram_used(t->hram);
        out->bytes_capacity[TIER_L_HOT] = tier_ram_bytes(t->hram);
    }
    if (t->cold) {
        struct tier_cold_stats cs;

        tier_cold_stats_get(t->cold, &cs);
        out->bytes_used[TIER_L_COLD] = cs.bytes_used;
        out->bytes_capacity[TIER_L_COLD] = cs.bytes_capacity;
        out->checksum_errors = cs.checksum_errors;
        out->io_errors = cs.io_errors;
    }
    if (t->remote) {
        struct tier_remote_stats rs;

        tier_remote_stats_get(t->remote, &rs);
        out->remote_hits = t->remote_hits;
        out->remote_misses = rs.misses;
        out->remote_puts = rs.puts;
        out->remote_bytes_in = rs.bytes_in;
        out->remote_bytes_out = rs.bytes_out;
        out->remote_errors = rs.errors + t->remote_skipped;
        out->remote_checksum_errors = rs.checksum_errors;
        out->remote_probes = rs.probes;
        out->remote_probe_hits = rs.probe_hits;
        out->remote_redirects = rs.redirects;
    }
}

double tier_index_bytes_per_block(const struct tier *t)
{
    uint32_t n = idx_count(t->idx);

    return n ? (double)idx_mem_bytes(t->idx) / n : 0.0;
}
