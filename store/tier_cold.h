/* SPDX-License-Identifier: MIT */
/*
 * tier_cold.h - the cold tier: blocks in a preallocated data file on NVMe
 * (tier_nvme.c: io_uring, O_DIRECT), indexed durably in LMDB (idx_cold.c),
 * each with an XXH3-64 checksum verified on every read.
 *
 * Ordering is the point of this module: a block's data is written and made
 * durable (fdatasync) before the LMDB transaction that points at it commits,
 * and replaced or deleted space is reused only after the transaction that
 * stops pointing at it commits. So after a crash the index never points at
 * unwritten or reused data, and a read that still finds wrong bytes (a disk
 * fault, a concurrent overwrite) is caught by the checksum: a miss, counted,
 * never bytes handed out. Commits are batched and pipelined: one fdatasync
 * and one LMDB transaction per batch, not per block, the transaction made
 * durable by a sync of the index queued in the ring or by the next batch's
 * commit, while the next batch is written; a put's callback runs only once
 * its bytes and its record are both durable.
 * Asynchronous: completions come through tier_cold_poll() (its event fd is
 * for the caller's epoll loop). Not thread-safe.
 */
#ifndef TIER_COLD_H
#define TIER_COLD_H

#include <stdbool.h>
#include <stdint.h>

#include "tier_key.h"

struct tier_cold;
struct tier_nvme; /* tier_nvme.h */

struct tier_cold_cfg {
    const char *dir;   /* folder for cold.data and cold.lmdb/ (created) */
    uint64_t bytes;    /* data file size (0: 16 GiB) */
    uint32_t qd;       /* reads and writes in flight at most (0: 32); the io_uring
                          queue has 2 slots more, kept for the syncs (tier_cold.c) */
    uint32_t batch;    /* blocks per durable commit (0: 32); a flush commits sooner */
    bool no_direct;    /* buffered I/O even where O_DIRECT works */
    bool sim;          /* the simulated disk of tier_nvme.h (tests) */
    void (*log)(void *ctx, const char *msg);
    void *log_ctx;
};

struct tier_cold_stats {
    uint64_t blocks;          /* records in the index */
    uint64_t bytes_used;      /* bytes of the file held by records and writes in flight */
    uint64_t bytes_capacity;  /* size of the data file */
    uint64_t writes, reads;   /* completed block writes / reads */
    uint64_t bytes_written, bytes_read;
    uint64_t commits;         /* batches indexed (one fdatasync + one LMDB commit each) */
    uint64_t checksum_errors; /* reads whose bytes did not match: dropped, reported as misses */
    uint64_t io_errors;       /* failed reads, writes or syncs */
    bool direct;              /* O_DIRECT in use */
    bool failed;              /* a sync failed: the tier refuses writes (sticky) */
};

/* Called when a put is durable and indexed (rc 0) or failed, and when a get
 * has verified bytes in the buffer (rc 0) or not (-EBADMSG checksum, -EIO,
 * -ENOENT removed meanwhile). */
typedef void (*tier_cold_cb)(void *ctx, int rc);

/* Open the tier, rebuilding the free-space map from the index (records that
 * point outside the file or overlap another are dropped and logged).
 * Errors: -ENOSPC (file cannot be preallocated), -EINVAL (qd past UINT32_MAX - 2),
 * LMDB and I/O errnos. */
int tier_cold_open(const struct tier_cold_cfg *cfg, struct tier_cold **out);
/* Make every put issued so far durable (or failed), run all callbacks,
 * close. NULL ok. */
void tier_cold_close(struct tier_cold *c);

/* Readable when tier_cold_poll() has completions to deliver. */
int tier_cold_event_fd(const struct tier_cold *c);
/* Deliver completions (callbacks run here); wait for at least one when
 * wait is true and work is in flight. Returns callbacks run or -errno. */
int tier_cold_poll(struct tier_cold *c, bool wait);
/* Work in flight: writes not yet durable (their index too) plus reads. */
unsigned tier_cold_busy(const struct tier_cold *c);

/* Store len bytes of buf (4 KiB aligned address and length) under (ns, key),
 * recording parent (NULL: none), the key before it in its chain,
 * replacing any older copy once the new one is durable. buf must stay valid
 * and unchanged until cb runs. Immediate errors: -ENOSPC (no room in the
 * file), -EBUSY (qd reads and writes in flight: poll and retry), -EIO (tier
 * failed), -EINVAL. */
int tier_cold_put(struct tier_cold *c, uint32_t ns, const struct tier_key *key,
                  const struct tier_key *parent, const void *buf, uint64_t len,
                  tier_cold_cb cb, void *ctx);
/* Start the durable commit of every completed write now instead of waiting
 * for a full batch. */
void tier_cold_flush(struct tier_cold *c);
/* tier_cold_flush, but only when no write is in flight: for an idle loop,
 * so that a batch still being written is not split into two syncs. */
void tier_cold_flush_idle(struct tier_cold *c);
/* flush + poll until nothing is in flight. 0 or the first error seen. */
int tier_cold_drain(struct tier_cold *c);

/* Read (ns, key) into buf (4 KiB aligned, cap bytes); cb tells whether the
 * bytes are verified. Immediate errors: -ENOENT (not in the cold tier),
 * -EINVAL (cap not the block's stored length), -EBUSY. *len_out (may be NULL) gets
 * the stored length. */
int tier_cold_get(struct tier_cold *c, uint32_t ns, const struct tier_key *key, void *buf,
                  uint64_t cap, uint64_t *len_out, tier_cold_cb cb, void *ctx);

/* Whether (ns, key) is in the index (committed). */
bool tier_cold_has(struct tier_cold *c, uint32_t ns, const struct tier_key *key);

/* Remove (ns, key) durably and free its space: 0 or -ENOENT. */
int tier_cold_remove(struct tier_cold *c, uint32_t ns, const struct tier_key *key);

/* Whether removing (ns, key) would free a run of at least len bytes where
 * it lies (its own space and the free space either side): a write of len
 * would then fit. False when it is not on disk. O(len / 4 KiB) and one index
 * read. */
bool tier_cold_frees(struct tier_cold *c, uint32_t ns, const struct tier_key *key,
                     uint64_t len);

/* Remove every block of namespace ns durably (one transaction) and free
 * their space. Returns the number removed or an error (nothing removed).
 * The caller has no write or read of ns in flight. */
int tier_cold_remove_ns(struct tier_cold *c, uint32_t ns);

/* Every record, for a restart: fn(ctx, ns, key, parent or NULL, len);
 * non-zero stops. */
int tier_cold_scan(struct tier_cold *c,
                   int (*fn)(void *ctx, uint32_t ns, const struct tier_key *key,
                             const struct tier_key *parent, uint64_t len),
                   void *ctx);

/* The durable namespace id of a descriptor (see idx_cold_ns_id). */
int tier_cold_ns_id(struct tier_cold *c, const void *desc, size_t len, uint32_t *id);

/* The tier's I/O layer, for tests that drive the simulated disk or inject
 * faults (tier_nvme.h). */
struct tier_nvme *tier_cold_io(struct tier_cold *c);
void tier_cold_stats_get(const struct tier_cold *c, struct tier_cold_stats *out);

#endif /* TIER_COLD_H */
