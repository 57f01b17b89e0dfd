/* SPDX-License-Identifier: MIT */
/*
 * tier_nvme.h - the cold tier's I/O: one preallocated data file, opened
 * O_DIRECT where the file system allows it, read and written through one
 * io_uring. Completions are signalled on an eventfd (for tierd's epoll loop)
 * and delivered by tier_nvme_reap() to per-request callbacks.
 *
 * It moves bytes and nothing else: which offsets hold which block, checksums
 * and the index are tier_cold.c's. Only this file sees liburing.h.
 * Not thread-safe: one caller at a time (tierd's loop thread).
 */
#ifndef TIER_NVME_H
#define TIER_NVME_H

#include <stdbool.h>
#include <stdint.h>

#define TIER_NVME_ALIGN 4096u /* offsets, lengths and buffers of every I/O */

struct tier_nvme;

struct tier_nvme_cfg {
    const char *path;    /* data file; created if missing */
    uint64_t bytes;      /* its size: preallocated with fallocate (rounded up to 4 KiB) */
    uint32_t qd;         /* io_uring queue depth (0: 32) */
    bool no_direct;      /* force buffered I/O (tests; file systems without O_DIRECT) */
    bool sim;            /* the simulated disk (tests; see below): no io_uring */
    void (*log)(void *ctx, const char *msg);
    void *log_ctx;
};

/* Called once per request from tier_nvme_reap(): res is the byte count
 * (always the full length: short transfers are retried inside) or a
 * negative errno (-EIO, -ENOSPC, ...). */
typedef void (*tier_nvme_cb)(void *ctx, int64_t res);

/* Open (create, preallocate) the file and set up the ring and its eventfd.
 * Where O_DIRECT is refused (tmpfs, some file systems) it logs that once and
 * uses buffered I/O. An existing larger file is kept (never truncated).
 * Errors: -ENOSPC when the file cannot be preallocated, or open/io_uring
 * errnos. */
int tier_nvme_open(const struct tier_nvme_cfg *cfg, struct tier_nvme **out);
/* Wait for every request in flight (their callbacks run), then close. NULL ok. */
void tier_nvme_close(struct tier_nvme *n);

uint64_t tier_nvme_bytes(const struct tier_nvme *n); /* usable size of the file */
bool tier_nvme_direct(const struct tier_nvme *n);     /* O_DIRECT in use */
int tier_nvme_event_fd(const struct tier_nvme *n);    /* readable when completions wait */

/* Queue a read or write of len bytes at file offset off (all three and the
 * buffer address aligned to TIER_NVME_ALIGN; off + len within the file).
 * The buffer must stay valid until the callback ran. Queued requests go to
 * the kernel at tier_nvme_submit() (or when the queue is full). -EINVAL for
 * misaligned or out-of-range requests; -EBUSY when qd requests are already
 * in flight (reap first). */
int tier_nvme_read(struct tier_nvme *n, uint64_t off, void *buf, uint64_t len, tier_nvme_cb cb,
                   void *ctx);
int tier_nvme_write(struct tier_nvme *n, uint64_t off, const void *buf, uint64_t len,
                    tier_nvme_cb cb, void *ctx);
/* Queue a data sync of the file (fdatasync semantics): ordered after every
 * write whose callback has already run, not after writes still in flight. */
int tier_nvme_sync(struct tier_nvme *n, tier_nvme_cb cb, void *ctx);
/* Queue a data sync of another file, fd (the caller's, open until the
 * callback ran): for the cold index, whose commits are made durable through
 * the same ring without stopping the caller's loop. fdatasync semantics for
 * what was written to fd before this call. The simulated disk completes it
 * as any request, with no effect on the data file. */
int tier_nvme_sync_fd(struct tier_nvme *n, int fd, tier_nvme_cb cb, void *ctx);
int tier_nvme_submit(struct tier_nvme *n);

/* Run the callbacks of completed requests; wait for at least `min` to
 * complete first (0: do not wait). Returns the number of callbacks run or a
 * negative errno. Drains the eventfd. */
int tier_nvme_reap(struct tier_nvme *n, unsigned min);

/* Requests queued or in flight. */
unsigned tier_nvme_inflight(const struct tier_nvme *n);
/* The queue depth: the most requests queued or in flight at once. */
unsigned tier_nvme_qd(const struct tier_nvme *n);

/* ---- fault injection (tests only) ----------------------------------------
 * Compiled in only when KVT_FAULTS is defined (the sanitizer build, build-san/);
 * release builds contain none of it: there the calls below are inert.
 *
 * A spec is rules separated by ',', each  OP:KIND[:SEL]...
 *   OP    read | write | fsync | isync (tier_nvme_sync_fd: the index's file)
 *   KIND  eio | enospc      the io_uring operation fails with -EIO / -ENOSPC
 *                           (nothing is transferred; a read leaves the buffer as it was)
 *         short             (read, write) the operation moves half its bytes, rounded
 *                           down to 4 KiB; the remainder is re-issued as usual, and is a
 *                           new operation for the rules. Half of one page is nothing: a
 *                           transfer without progress, which completes with -EIO.
 *   SEL   every=N  the Nth, 2Nth, ... operation of OP (N >= 1; default 1: each one)
 *         after=N  only operations after the first N of OP (default 0)
 *         once     at most one fault from this rule
 *         p=F      each operation selected so far, with probability F (0 < F <= 1)
 *         seed=S   seed of p's generator (default 1): a run replays exactly
 * Operations are io_uring submissions (a request re-issued after a short transfer
 * counts again), counted per OP from open or from the last tier_nvme_fault_set().
 * The first rule that selects an operation applies. Example:
 *   read:eio:every=3,write:short:after=10,fsync:eio:once
 *
 * tier_nvme_open() reads the spec from the environment variable KVTIER_FAULTS
 * (unset or empty: no faults); a spec that does not parse makes the open fail
 * with -EINVAL and logs why. Without KVT_FAULTS, the variable is ignored (one
 * log line says so). */
#define TIER_NVME_FAULTS_ENV "KVTIER_FAULTS"

/* Whether this build has the injector (KVT_FAULTS). */
bool tier_nvme_faults_available(void);
/* Replace n's rules with spec (NULL or "": none) and restart the counts.
 * 0, -EINVAL (bad spec: the old rules stay), -EOPNOTSUPP without KVT_FAULTS. */
int tier_nvme_fault_set(struct tier_nvme *n, const char *spec);
/* Faults injected into n so far (0 without KVT_FAULTS). */
uint64_t tier_nvme_faults_injected(const struct tier_nvme *n);

/* ---- the simulated disk (deterministic simulation tests) ------------------
 * With cfg.sim, requests never reach the kernel: they wait, queued, until the
 * caller completes them one at a time in the order it chooses, and the file
 * stands for what survives a power loss. A completed write lands in a volatile
 * layer (the drive's cache) that reads see; a completed sync moves to the file
 * the writes that had completed before the sync was queued (fdatasync's
 * promise), no others. tier_nvme_reap(n, min > 0) completes the oldest queued
 * requests itself when fewer than min are done, so code that waits still
 * progresses, deterministically. Present in every build: it is only chosen by
 * tests. */

/* Requests queued and not yet completed. */
unsigned tier_nvme_sim_queued(const struct tier_nvme *n);
/* Complete the k-th queued request (0: the oldest) now, with error err
 * (0: it does its work; -EIO and the like: it fails and moves nothing). Its
 * callback runs at the next tier_nvme_reap(). -ENOENT when k >= queued. */
int tier_nvme_sim_complete(struct tier_nvme *n, unsigned k, int err);
/* Power loss: each write not yet made durable reaches the file or not, as
 * seed's coin says (a drive may have written some of its cache), the rest
 * vanish; from now on every request fails with -EIO and moves nothing. The
 * caller then closes the tier and reopens it from the file. */
void tier_nvme_sim_crash(struct tier_nvme *n, uint64_t seed);

#endif /* TIER_NVME_H */
