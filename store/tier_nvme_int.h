/* SPDX-License-Identifier: MIT */
/*
 * tier_nvme_int.h - internals of the cold tier's data file module shared
 * by its files (never installed, and free of liburing.h): the request
 * kinds, and the fault injector's rules (tier_nvme_faults.c), which
 * tier_nvme.c consults once per SQE in KVT_FAULTS builds.
 */
#ifndef TIER_NVME_INT_H
#define TIER_NVME_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* What a request slot holds: ISYNC is the sync of another file (the cold
 * index's), its own kind so that fault rules tell the two syncs apart. */
enum nvme_op { NVME_OP_FREE, NVME_OP_READ, NVME_OP_WRITE, NVME_OP_SYNC, NVME_OP_ISYNC };

#ifdef KVT_FAULTS
#define FAULT_RULES 16     /* rules in one spec */
#define FAULT_SPEC_MAX 512 /* characters in one spec, NUL included */

struct fault_rule {
    uint8_t op;           /* enum nvme_op it applies to */
    int32_t err;          /* injected result: -EIO or -ENOSPC; 0 for a short transfer */
    uint64_t every;       /* fault the every-th eligible submission (>= 1) */
    uint64_t after;       /* submissions of op let through before any is eligible */
    double p;             /* probability per selected submission (1: always) */
    uint64_t rng;         /* splitmix64 state for p, from seed= */
    bool once;            /* at most one fault */
    bool fired;           /* this rule injected at least one */
};

struct faults {
    struct fault_rule rule[FAULT_RULES];
    unsigned n;                 /* rules in use */
    uint64_t seen[NVME_OP_ISYNC + 1]; /* submissions per nvme_op since the rules were set */
    uint64_t injected;          /* faults injected since open */
};

/* A whole spec (NULL or "": no rules; the grammar: tier_nvme.h) into *out;
 * -EINVAL with the reason in why. */
int tier_nvme_faults_parse(const char *spec, struct faults *out, char *why, size_t cap);

/* Count one submission of op; true when a rule faults it, with its result
 * in *err (0: make it short). O(rules). */
bool tier_nvme_fault_pick(struct faults *f, uint8_t op, int32_t *err);
#endif /* KVT_FAULTS */

#endif /* TIER_NVME_INT_H */
