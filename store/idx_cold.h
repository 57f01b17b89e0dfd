/* SPDX-License-Identifier: MIT */
/*
 * idx_cold.h - the cold tier's durable index: (namespace, key) -> where the
 * block lies in the data file, its length, XXH3-64 checksum and generation.
 *
 * An LMDB environment in its own folder. Every write is one transaction.
 * idx_cold_put_batch's is committed with one sync (its pages, never its
 * meta page): it is on disk once a later sync of the environment's file ran
 * (idx_cold_fd, the next put_batch, or idx_cold_sync), which is what lets
 * tier_cold.c pipeline its index commits; every other write is durable
 * when the call returns. A crash never corrupts the index either way: it
 * comes back at the last transaction whose meta page reached the disk.
 * Only this file sees lmdb.h. Not thread-safe: one caller at a time.
 */
#ifndef IDX_COLD_H
#define IDX_COLD_H

#include <stddef.h>
#include <stdint.h>

#include "tier_key.h"

#define IDX_COLD_HAS_PARENT 0x1u

struct idx_cold_rec {
    uint64_t off;           /* byte offset in the data file (4 KiB aligned) */
    uint64_t len;           /* bytes stored (4 KiB multiple) */
    uint64_t xxh3;          /* XXH3-64 of those bytes */
    uint64_t gen;           /* write generation: larger is newer */
    uint32_t file;          /* data file number (0 for now: one file) */
    uint32_t flags;         /* IDX_COLD_HAS_PARENT */
    struct tier_key parent; /* the block before this one in its chain, so that
                               a restart can rebuild leaf-first order */
};
_Static_assert(sizeof(struct idx_cold_rec) == 72, "cold record layout is on disk");

/* One record to write (ns, key -> rec). */
struct idx_cold_put {
    uint32_t ns;
    struct tier_key key;
    struct idx_cold_rec rec;
};

struct idx_cold;

/* Open or create the environment in folder dir (created if missing) with a
 * map of map_bytes (0: 4 GiB, about 40 M records). -errno or -EIO with a
 * description through log on LMDB errors. */
int idx_cold_open(const char *dir, uint64_t map_bytes, void (*log)(void *, const char *),
                  void *log_ctx, struct idx_cold **out);
void idx_cold_close(struct idx_cold *x); /* NULL ok */

/* Write n records in one transaction, committed but not yet durable: it
 * is once the environment's file is synced after this returns (a later
 * put_batch's commit syncs it before anything else, so the transactions
 * before that one are durable when it returns). old (NULL or n entries)
 * receives the record each key had before (len 0 where none), so the
 * caller can free replaced space once this transaction is durable. */
int idx_cold_put_batch(struct idx_cold *x, const struct idx_cold_put *p, size_t n,
                       struct idx_cold_rec *old);
/* The environment's data file, for a sync issued elsewhere (fdatasync of
 * it makes every transaction committed so far durable). Owned by x. */
int idx_cold_fd(struct idx_cold *x);
/* Make every committed transaction durable now (fdatasync). */
int idx_cold_sync(struct idx_cold *x);
/* Delete one record durably; -ENOENT when absent. */
int idx_cold_del(struct idx_cold *x, uint32_t ns, const struct tier_key *key);
/* Delete every record of namespace ns in one durable transaction, calling
 * fn with each record first (its space is the caller's to free once this
 * returns). Returns the number deleted or an error (then nothing is). */
int idx_cold_del_ns(struct idx_cold *x, uint32_t ns,
                    void (*fn)(void *ctx, const struct idx_cold_rec *rec), void *ctx);
/* The record of (ns, key): 0, -ENOENT, or an error. */
int idx_cold_get(struct idx_cold *x, uint32_t ns, const struct tier_key *key,
                 struct idx_cold_rec *rec);

/* Call fn for every record in key order; a non-zero return stops the walk
 * and is returned. */
int idx_cold_scan(struct idx_cold *x,
                  int (*fn)(void *ctx, uint32_t ns, const struct tier_key *key,
                            const struct idx_cold_rec *rec),
                  void *ctx);

/* The durable id of a namespace descriptor (opaque bytes, 1..511): the same
 * bytes get the same id across restarts, new ones the next free id (>= 1),
 * assigned in a durable transaction. Cold records name namespaces by these
 * ids, so a restarted daemon can never attach one model's blocks to
 * another. */
int idx_cold_ns_id(struct idx_cold *x, const void *desc, size_t len, uint32_t *id);

#endif /* IDX_COLD_H */
