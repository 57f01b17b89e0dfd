/* SPDX-License-Identifier: MIT */
/*
 * sim.h - the store's deterministic simulation: a seeded random schedule of
 * every store operation by many virtual clients, over the simulated disk
 * (tier_nvme.h) and the emulated hot tier, with crashes and restarts, checked
 * after every step against a reference model (sim.c's design note).
 *
 * One seed replays one run exactly: `make sim SEED=... STEPS=...`.
 */
#ifndef SIM_H
#define SIM_H

#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>

#include "tier.h" /* enum tier_evict_policy */

/* The operations the schedule draws from (counted in sim_result.ops). */
#define SIM_OPS(X)                                                                         \
    X(RESERVE) X(RESERVE_HOT) X(FILL) X(COMMIT) X(COMMIT_DURABLE) X(ABORT) X(GET)          \
    X(GET_HOT) X(GET_PROMOTE) X(LOOKUP_GET) X(PREFETCH) X(GIVE_UP) X(RELEASE) X(REMOVE)    \
    X(PURGE) X(FLUSH) X(DIE) X(MAINTAIN) X(DISK) X(DISK_FAULT) X(POLL) X(CRASH) X(PIN)      \
    X(UNPIN) X(PIN_GET)

enum sim_op {
#define SIM_ENUM(n) SIM_##n,
    SIM_OPS(SIM_ENUM)
#undef SIM_ENUM
    SIM_OP_N
};

struct sim_opts {
    uint64_t seed;
    uint64_t steps;
    bool faults;      /* inject disk errors (DISK_FAULT) */
    bool quiet;       /* no trace on failure */
    enum tier_evict_policy policy; /* warm's; keep starts at a share of 0.5, so that
                                      both of its lists are in play from the start */
    uint32_t adapt_min; /* keep's and reuse's adaptations, every this many blocks
                           leaving warm at least (0: the store's 1,024, which this
                           small warm reaches a few times a run) */
    uint64_t cold_bytes; /* the disk's size (0: 12 MiB) */
    FILE *log;        /* where a failure's trace goes (NULL: stderr) */
};

struct sim_result {
    uint64_t steps;             /* steps run (up to and including a failing one) */
    uint64_t ops[SIM_OP_N];     /* operations run, by kind */
    uint64_t crashes, acked_durable, bytes_checked, leases_checked;
    uint64_t pins_checked;      /* pinned runs got after a flood of other operations */
    uint64_t refused, over_budget; /* blocks NVMe admission kept off the disk, by cause */
    uint64_t cold_evicted;      /* blocks the disk evicted to make room */
    uint64_t dropped;           /* blocks dropped from warm, not counting admission's */
    uint64_t adaptations;       /* of keep or reuse, every store of the run (crashes too) */
    char failure[512];          /* the first violation ("" when none) */
};

/* Run one simulation. 0 when every check held; -1 with r->failure set (and
 * the last steps of the trace written to o->log) when one did not; or a
 * negative errno when the world could not be set up. */
int sim_run(const struct sim_opts *o, struct sim_result *r);

/* The name of an operation ("RESERVE", ...). */
const char *sim_op_name(int op);

#endif /* SIM_H */
