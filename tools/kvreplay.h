/* SPDX-License-Identifier: MIT */
/*
 * kvreplay.h - the parts of kvreplay, the trace replay and cost tool:
 * kvreplay_trace.c loads a Mooncake JSONL trace and derives its block keys,
 * kvreplay_run.c replays it (in-process through store/, with a cold tier or
 * without, or against a running tierd through libkvtier, or against an
 * unbounded cache), kvreplay_min.c has the policies --policy names and the
 * offline bound among them (Belady's MIN), kvreplay_cost.c
 * turns hit and miss token counts into money, GPU time and memory cost, and
 * kvreplay_svg.c draws the capacity curves. main and the reports are in
 * kvreplay.c. A tool, not a library: messages go to the err buffers given,
 * never to stderr from these modules.
 */
#ifndef KVREPLAY_H
#define KVREPLAY_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tier.h"

/* ---- trace (kvreplay_trace.c) ------------------------------------------ */

/* One request of the trace. */
struct kvr_req {
    uint64_t ts_ms;      /* arrival time, ms on the trace's clock */
    uint64_t input_len;  /* prompt tokens */
    uint64_t output_len; /* generated tokens (informational: never cached here) */
    uint32_t nblk;       /* blocks of the prompt (its hash_ids) */
    uint64_t first;      /* index of its first key in kvr_trace.keys */
};

/* A loaded trace; owns both arrays. */
struct kvr_trace {
    struct kvr_req *req;
    size_t nreq, req_cap;
    struct tier_key *keys;  /* every request's chain, one after another */
    size_t nkeys, key_cap;
    uint32_t max_blk;       /* longest chain, for scratch arrays */
    uint64_t tokens;        /* sum of input_len */
    uint64_t distinct;      /* distinct keys (kvr_run_unbounded fills it in) */
};

/*
 * Load up to limit requests (0: all) of the JSONL trace at path ("-":
 * stdin). Each line is an object with "hash_ids" (array of non-negative
 * integers, one per block of block_tokens tokens) and "input_length"
 * (non-negative integer); "timestamp" (ms; missing: the previous line's) and
 * "output_length" are optional, other members are ignored, blank lines are
 * skipped. Keys form prefix chains: key(i) = SHA-256(key(i-1) || le64(id)),
 * key(-1) = SHA-256("kvreplay:" || salt). Returns 0; -EINVAL with the line
 * number and the reason in err for bad content or a trace without requests;
 * -errno when the file cannot be opened or read; -ENOMEM.
 */
int kvr_trace_load(const char *path, const char *salt, size_t limit, struct kvr_trace *tr,
                   char *err, size_t errcap);
void kvr_trace_fini(struct kvr_trace *tr);

/* The key of hash id `id` after parent (the chain rule above). */
void kvr_key_next(const struct tier_key *parent, uint64_t id, struct tier_key *out);
/* The root of every chain for a salt. */
void kvr_key_root(const char *salt, struct tier_key *out);

/* Prompt tokens covered by the first k blocks of r: k x block_tokens, but
 * never more than input_len (the last block of a prompt is often partial). */
static inline uint64_t kvr_tokens_of(const struct kvr_req *r, uint64_t k, uint32_t block_tokens)
{
    uint64_t t = k * block_tokens;

    return t < r->input_len ? t : r->input_len;
}

/* ---- replays (kvreplay_run.c) -------------------------------------------- */

struct kvr_run_opts {
    uint32_t block_tokens;  /* tokens per block (Mooncake: 512) */
    uint64_t block_bytes;   /* bytes per stored block */
    double high_wm, low_wm; /* in-process watermarks (tierd's defaults 0.95 / 0.85) */
    double speed;           /* tierd mode: replay at the trace's pace x speed; 0: flat out */
    const char *socket;     /* tierd mode: socket path (NULL: kvt_default_socket()) */
    const char *model_id;   /* tierd mode: namespace model id */
    /* in-process cold tier: a data file of cold_bytes (0: cold_ratio x each
     * warm capacity; both 0: none) in a fresh folder under cold_dir (NULL:
     * $TMPDIR or /tmp), removed afterwards */
    uint64_t cold_bytes;
    double cold_ratio;
    const char *cold_dir;
    enum tier_admit admit;  /* the store's NVMe admission (tier.h) */
    enum tier_evict_policy evict; /* the store's eviction policy (tier.h) */
    double cold_dwpd;       /* write budget: drive writes per day of trace time (0: none) */
};

/* What one replay saw. Hits are the leading cached run of each request. */
struct kvr_result {
    uint64_t capacity;       /* warm bytes asked for (0: unbounded / tierd's) */
    uint64_t pool_bytes;     /* warm pool as created (whole segments) */
    uint64_t slots;          /* blocks the pool can hold (in-process; 0: unknown) */
    uint64_t requests, blocks, hit_blocks, tokens, hit_tokens;
    uint64_t tier_blocks[TIER_L_N]; /* hit blocks by the tier lookup found them in */
    uint64_t tier_tokens[TIER_L_N]; /* their tokens */
    uint64_t stored;         /* blocks newly put */
    uint64_t refused;        /* blocks whose put was refused (no room) */
    uint64_t evicted;        /* blocks that left warm (in-process) */
    uint64_t short_gets;     /* tierd: gets that leased fewer blocks than lookup found */
    uint64_t verify_errors;  /* tierd: blocks read back with a wrong byte */
    uint64_t ram_bytes;      /* RAM charged in the cost model */
    uint64_t nvme_bytes;     /* NVMe charged in the cost model */
    const char *policy;      /* the policy replayed (kvr_policies' name) */
    enum tier_admit admit;   /* in-process: the store's admission */
    uint64_t asked_blocks;   /* in-process: blocks the capacity asked holds (whole slots) */
    uint64_t held_max;       /* in-process: most blocks warm held at any lookup */
    uint64_t cold_capacity;  /* in-process: the cold tier's bytes (0: none) */
    uint64_t disk_bytes;     /* in-process: bytes written to the cold tier */
    uint64_t admitted, cold_refused, over_budget; /* the store's admission counters */
    double seconds;          /* wall time of the replay */
    double max_late_ms;      /* paced tierd mode: worst lateness behind the trace */
};

/* Replay through an in-process store of `capacity` warm bytes and, as o
 * says, a cold tier below (kvr_cold_bytes; without one evicted blocks are
 * dropped), calling tier_maintain() between requests as tierd does. The
 * store holds at most what capacity asks (its watermarks are scaled to it,
 * not to the pool rounded up to whole segments). 0, -EFBIG when a block
 * does not fit the pool's largest slot (capacity < 16 blocks), or a store
 * error; err says why. */
int kvr_run_store(const struct kvr_trace *tr, const struct kvr_run_opts *o, uint64_t capacity,
                  struct kvr_result *res, char *err, size_t errcap);

/* Count request r's hits: its first `hit` blocks, found in tiers[i]
 * (NULL: all warm). */
void kvr_count_hits(struct kvr_result *res, const struct kvr_req *r, uint64_t hit,
                    const uint8_t *tiers, uint32_t block_tokens);

/* The cold tier's bytes of a replay at warm capacity (0: none). */
uint64_t kvr_cold_bytes(const struct kvr_run_opts *o, uint64_t capacity);

/* Belady's MIN, offline, with prefix semantics: a cache of (capacity +
 * the cold tier's bytes) / slot bytes blocks that evicts the block used
 * furthest in the future (never used again first; a tie goes to the
 * deeper block, so that what stays is always a prefix: every request that
 * uses a block uses its parent too). A put block used later than all it
 * would displace is not kept. The bound no online policy passes.
 * 0 or -ENOMEM. */
int kvr_run_min(const struct kvr_trace *tr, const struct kvr_run_opts *o, uint64_t capacity,
                struct kvr_result *res, char *err, size_t errcap);

/* The replay policies --policy names. A policy of the store (one tierd
 * runs) is a row whose run is kvr_run_store, with what selects it in the
 * store passed on through kvr_run_opts; an offline bound is a row of its
 * own simulator. */
typedef int (*kvr_run_fn)(const struct kvr_trace *tr, const struct kvr_run_opts *o,
                          uint64_t capacity, struct kvr_result *res, char *err, size_t errcap);
struct kvr_policy {
    const char *name;
    const char *what;  /* one line for --help */
    kvr_run_fn run;
    bool store;        /* the store's own (a cold tier and admission apply) */
    enum tier_evict_policy evict; /* a store row: the store's policy it runs */
};
extern const struct kvr_policy kvr_policies[]; /* ends with a row whose name is NULL */
/* The row named name, or NULL. */
const struct kvr_policy *kvr_policy_find(const char *name);

/* Replay against tierd: lookup, lease and verify the hits, put the misses
 * (payloads derived from each key, see kvr_fill). 0, or a negative kvtier
 * error (connect, namespace, request) with err saying why. Wrong bytes are
 * counted in verify_errors, not returned. */
int kvr_run_tierd(const struct kvr_trace *tr, const struct kvr_run_opts *o,
                  struct kvr_result *res, char *err, size_t errcap);

/* The unbounded cache: every block ever put stays. Also fills tr->distinct.
 * 0 or -ENOMEM. */
int kvr_run_unbounded(struct kvr_trace *tr, const struct kvr_run_opts *o,
                      struct kvr_result *res);

/* The payload of a block: 64-bit words derived from its key, so a block
 * served under the wrong key, or with any byte changed, fails kvr_check,
 * which returns the offset of the first wrong byte or -1. */
void kvr_fill(void *buf, uint64_t len, const struct tier_key *key);
long kvr_check(const void *buf, uint64_t len, const struct tier_key *key);

/* ---- cost model (kvreplay_cost.c) ---------------------------------------- */

struct kvr_prices {
    double miss_mtok;     /* $ per million input tokens not served from cache */
    double hit_mtok;      /* $ per million cached input tokens */
    double params;        /* model parameters: prefill is 2 x params FLOPs per token */
    double gpu_flops;     /* GPU peak FLOP/s (dense, the model's dtype) */
    double mfu;           /* fraction of the peak prefill reaches */
    double gpu_hour;      /* $ per GPU-hour */
    double ram_gib_hour;  /* $ per GiB-hour of RAM */
    double nvme_gib_hour; /* $ per GiB-hour of NVMe */
    char preset[64];      /* the preset the values came from ("built-in" or a name) */
};

/* Money and GPU time for one set of token counts over `hours`. */
struct kvr_cost {
    double hours;                       /* the span the counts cover */
    double hit_tokens, miss_tokens;
    double api_nocache, api_cache;      /* $: every input token at the miss price / hits cheap */
    double gpu_h_nocache, gpu_h_cache;  /* GPU-hours of prefill without / with the cache */
    double gpu_nocache, gpu_cache;      /* $ of those GPU-hours */
    double ram_gib, nvme_gib;           /* capacity charged */
    double ram_cost, nvme_cost;         /* $ over hours */
    double net_saved;                   /* GPU $ saved minus RAM and NVMe $ */
};

/* The built-in prices (documented in kvreplay --help). */
void kvr_prices_default(struct kvr_prices *p);

/* Apply preset `name` (NULL: the file's "default") of the JSON prices file
 * at path over *p. 0, -errno if unreadable, -EINVAL (err says why: bad JSON,
 * unknown preset or member, a value that is not a non-negative number). */
int kvr_prices_load(const char *path, const char *name, struct kvr_prices *p, char *err,
                    size_t errcap);

/* Check that every price is finite and sensible (mfu in (0, 1], flops > 0).
 * 0 or -EINVAL with err. */
int kvr_prices_check(const struct kvr_prices *p, char *err, size_t errcap);

void kvr_cost_compute(const struct kvr_prices *p, double hit_tokens, double miss_tokens,
                      double hours, double ram_bytes, double nvme_bytes, struct kvr_cost *c);

/* ---- plot (kvreplay_svg.c) ----------------------------------------------- */

/* Write the hit-rate-versus-capacity curve (block and token hit rates) and
 * the savings curve (GPU $/h saved, memory $/h, net $/h) of n replays,
 * sorted by capacity, as one SVG file. 0 or -errno. */
int kvr_svg_write(const char *path, const char *title, const struct kvr_result *res,
                  const struct kvr_cost *cost, size_t n);

/* Human size: "64G", "1.5T", "512M" (binary units) into buf. Returns buf. */
const char *kvr_size_str(uint64_t bytes, char *buf, size_t cap);

#endif /* KVREPLAY_H */
