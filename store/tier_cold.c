/* SPDX-License-Identifier: MIT */
/*
 * tier_cold.c - the cold tier (see tier_cold.h for the ordering rules).
 *
 * Design note. A put walks four states: WRITING (its write is in the ring),
 * PENDING (written, waiting for a batch), SYNCING (the batch's fdatasync is
 * in flight), INDEXED (its record committed to LMDB, which is not durable
 * yet). When the data sync completes, one LMDB transaction indexes the
 * whole batch: it syncs its own pages but not its meta page (idx_cold.h),
 * so it costs the loop one sync, not two. Its meta page reaches the disk
 * with the next sync of the index's file: the next batch's commit (which
 * syncs before it writes anything, so it makes every earlier transaction
 * durable), or the sync this commit queues into the ring (ISYNC), which
 * runs beside the next batch's writes and data sync. Only once its
 * transaction is durable is a put told (its callback runs) and the space of
 * a copy it replaced freed: a durable ack means bytes and record on disk,
 * and a crash before it leaves the index at an earlier transaction, whose
 * records all point at bytes synced before it committed. So one batch's
 * writes overlap the previous batch's index commit and the syncs of both,
 * and the order on disk stays: data, then the record, then the ack.
 * A failed sync (of either file) leaves the state on disk unknown: the tier
 * turns failed and refuses writes (sticky), since retrying could index data
 * that never reached the disk; puts not yet told are told -EIO.
 *
 * The ring has SYNC_SLOTS slots more than the configured qd, and they are
 * the syncs': reads and writes take at most qd, and at most one data sync
 * and one ISYNC are ever in flight, so a sync always finds a slot. Without
 * the reserve, a backlog of reads refilled every slot a completion freed,
 * turn after turn, and a batch already written waited for its sync as long
 * as reads kept coming: its puts untold, the blocks being demoted held in
 * warm, unreachable orphans among them (the simulation's seed 3 with faults).
 *
 * Space is a bitmap of 4 KiB pages with first-fit from a rotating cursor:
 * O(pages) in the worst case, but the cursor makes a mostly sequential fill
 * cheap, and blocks of any size share one file. It is rebuilt from the
 * index at open, so it never needs to be stored.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <xxhash.h>

#include "idx_cold.h"
#include "kvt_common.h"
#include "tier_cold.h"
#include "tier_nvme.h"

#define PAGE 4096u
#define SYNC_SLOTS 2u /* ring slots only syncs take: one data sync, one ISYNC */

struct op {
    struct tier_cold *c;
    uint32_t ns;
    struct tier_key key;
    uint64_t off, len, xxh3, gen;
    bool has_parent;
    struct tier_key parent;
    void *buf;            /* get: the caller's buffer */
    tier_cold_cb cb;
    void *ctx;
    uint64_t txn;         /* INDEXED: the index transaction holding its record */
    uint64_t old_off, old_len; /* INDEXED: the copy it replaced (len 0: none), freed
                                  once txn is durable */
    struct op *next;      /* pending / syncing / indexed list */
};

struct tier_cold {
    struct tier_nvme *io;
    struct idx_cold *idx;
    uint64_t *map;        /* 1 bit per page, set = in use */
    uint64_t npages, cursor, used_pages;
    uint64_t next_gen;
    uint32_t batch;
    unsigned data_qd;     /* reads and writes in the ring at most (its qd - SYNC_SLOTS) */
    struct op *pending;   /* written, not yet synced (LIFO: order does not matter) */
    unsigned npending;
    struct op *syncing;   /* the batch whose sync is in flight */
    unsigned nsyncing;
    bool sync_inflight;
    bool flush_wanted;    /* commit the pending ops as soon as possible */
    struct op *indexed, **indexed_tail; /* records committed, not yet durable, FIFO */
    unsigned nindexed;
    uint64_t txn_seq;     /* index transactions committed (put batches) */
    uint64_t txn_durable; /* ... of those, the last known durable */
    uint64_t isync_covers; /* the transaction the ISYNC in flight makes durable */
    bool isync_inflight;
    bool isync_wanted;    /* an ISYNC is owed (the ring was full): from tier_cold_poll */
    unsigned writes, reads; /* in flight (reads: backlog included) */
    struct op *backlog, **backlog_tail; /* reads waiting for a ring slot, FIFO */
    unsigned nbacklog;    /* reads on the backlog */
    bool write_wanted;    /* a write was refused for want of a slot since the last that
                             went in: reads keep to half of the data slots meanwhile */
    struct tier_cold_stats st;
    void (*log)(void *ctx, const char *msg);
    void *log_ctx;
};

static void say(struct tier_cold *c, const char *msg)
{
    if (c->log)
        c->log(c->log_ctx, msg);
}

/* Whether a read or write may take a ring slot now: the syncs' reserve
 * stays free for them (design note). */
static bool data_room(const struct tier_cold *c)
{
    unsigned syncs = (unsigned)c->sync_inflight + (unsigned)c->isync_inflight;

    return tier_nvme_inflight(c->io) - syncs < c->data_qd;
}

/* Whether a read may take a free data slot now. While a write waits for
 * one (refused since the last write went in), reads in the ring keep to
 * half of the data slots, so the slots the writes' completions free go to
 * writes: else a backlog of reads refilled every slot freed, and a durable
 * commit's write waited as long as reads kept coming (review of issue 19).
 * Reads still get half, so neither side starves the other. */
static bool read_room(const struct tier_cold *c)
{
    return data_room(c) && (!c->write_wanted || c->reads - c->nbacklog < (c->data_qd + 1) / 2);
}

/* Whether the puts written since the last sync want theirs now: a batch's
 * worth, or any while a flush is asked for. */
static bool sync_due(const struct tier_cold *c)
{
    return c->npending >= c->batch || (c->flush_wanted && c->npending);
}

/* ---- page map -------------------------------------------------------- */

static bool page_used(const struct tier_cold *c, uint64_t p)
{
    return c->map[p >> 6] >> (p & 63) & 1;
}

static void mark(struct tier_cold *c, uint64_t p, uint64_t n, bool used)
{
    for (uint64_t i = p; i < p + n; i++) {
        if (used)
            c->map[i >> 6] |= 1ull << (i & 63);
        else
            c->map[i >> 6] &= ~(1ull << (i & 63));
    }
    if (used)
        c->used_pages += n;
    else
        c->used_pages -= n;
}

static void free_bytes(struct tier_cold *c, uint64_t off, uint64_t len)
{
    mark(c, off / PAGE, len / PAGE, false);
}

/* First fit of k contiguous pages from the cursor, one lap at most. */
static int alloc_bytes(struct tier_cold *c, uint64_t len, uint64_t *off)
{
    uint64_t k = len / PAGE, p = c->cursor, run = 0;

    if (k > c->npages - c->used_pages)
        return -ENOSPC;
    for (uint64_t scanned = 0; scanned < c->npages + k; scanned++, p++) {
        if (p >= c->npages) { /* runs do not wrap around the end */
            p = 0;
            run = 0;
        }
        if (run == 0 && (p & 63) == 0 && c->map[p >> 6] == ~0ull) {
            p += 63; /* a full word: skip it */
            scanned += 63;
            continue;
        }
        if (page_used(c, p)) {
            run = 0;
            continue;
        }
        if (++run == k) {
            *off = (p + 1 - k) * PAGE;
            mark(c, p + 1 - k, k, true);
            c->cursor = p + 1 < c->npages ? p + 1 : 0;
            return 0;
        }
    }
    return -ENOSPC;
}

/* ---- writes and the durable commit ------------------------------------ */

static void fail_op(struct tier_cold *c, struct op *o, int rc)
{
    free_bytes(c, o->off, o->len);
    o->cb(o->ctx, rc);
    free(o);
}

static void start_sync(struct tier_cold *c);
static void start_isync(struct tier_cold *c);

/* The disk or the index failed: what reached it is unknown, so the tier
 * refuses writes from now on (sticky). */
static void turn_failed(struct tier_cold *c)
{
    if (c->st.failed)
        return;
    c->st.failed = true;
    c->st.io_errors++;
    say(c, "cold tier: sync or index commit failed; refusing further writes");
}

/* o's transaction may not be durable and o is told it failed: its record
 * goes, so that a block its owner dropped does not come back after a
 * restart (its bytes are right: they were synced first). Where that delete
 * fails too, the record and both copies' space stay until a restart. */
static void unindex(struct tier_cold *c, const struct op *o)
{
    struct idx_cold_rec now;

    if (idx_cold_get(c->idx, o->ns, &o->key, &now) < 0 || now.gen != o->gen)
        return; /* replaced or removed since */
    if (idx_cold_del(c->idx, o->ns, &o->key) < 0)
        return;
    free_bytes(c, o->off, o->len);
    c->st.blocks--;
}

/* Tell the indexed puts whose transaction is durable (all of them with
 * rc < 0: failed, their records not vouched for). They leave the list
 * before any is told: a callback may queue or remove blocks. */
static void tell_indexed(struct tier_cold *c, int rc)
{
    struct op *mine = NULL, **tail = &mine, *o;

    while ((o = c->indexed) && (rc < 0 || o->txn <= c->txn_durable)) {
        c->indexed = o->next;
        c->nindexed--;
        o->next = NULL;
        *tail = o;
        tail = &o->next;
    }
    if (!c->indexed)
        c->indexed_tail = &c->indexed;
    while ((o = mine)) {
        mine = o->next;
        if (rc == 0 && o->old_len) /* no durable record points at it any more */
            free_bytes(c, o->old_off, o->old_len);
        if (rc < 0) {
            unindex(c, o);
            /* the copy it replaced: the disk's index may still name it, but
             * the tier is read-only from here and a restart maps its space
             * from that index, so nothing writes over it before then */
            if (o->old_len)
                free_bytes(c, o->old_off, o->old_len);
        }
        o->cb(o->ctx, rc);
        free(o);
    }
}

/* The ISYNC landed: every transaction committed before it was queued is
 * durable. */
static void on_isync(void *ctx, int64_t res)
{
    struct tier_cold *c = ctx;

    c->isync_inflight = false;
    if (res < 0) {
        turn_failed(c);
        tell_indexed(c, -EIO);
        return;
    }
    if (c->isync_covers > c->txn_durable)
        c->txn_durable = c->isync_covers;
    tell_indexed(c, 0);
    if (c->indexed) /* committed while it ran: they need one more */
        start_isync(c);
}

/* Queue the sync of the index's file for the transactions not yet durable,
 * unless one is in flight (its landing queues the next for those committed
 * meanwhile). */
static void start_isync(struct tier_cold *c)
{
    if (!c->indexed || c->isync_inflight) {
        c->isync_wanted = false;
        return;
    }
    if (c->st.failed) {
        tell_indexed(c, -EIO);
        return;
    }
    if (tier_nvme_sync_fd(c->io, idx_cold_fd(c->idx), on_isync, c) < 0) {
        c->isync_wanted = true; /* ring full: retried from tier_cold_poll */
        return;
    }
    c->isync_wanted = false;
    c->isync_inflight = true;
    c->isync_covers = c->txn_seq;
    tier_nvme_submit(c->io);
}

static void on_sync(void *ctx, int64_t res)
{
    struct tier_cold *c = ctx;
    struct op *o = c->syncing, *next;
    struct idx_cold_put *p = NULL;
    struct idx_cold_rec *old = NULL;
    unsigned n = c->nsyncing, i = 0;
    int rc = res < 0 ? (int)res : c->st.failed ? -EIO : 0;

    c->sync_inflight = false;
    c->syncing = NULL;
    c->nsyncing = 0;
    /* the next group's data sync goes to the disk first, so that it runs
     * while this group's index commit (whose own sync blocks the loop)
     * does: the two are of different files and cover different puts (after
     * a failed sync, nothing more is synced: the tier turns failed below) */
    if (rc == 0 && sync_due(c))
        start_sync(c);
    if (rc == 0) {
        p = malloc(n * sizeof(*p));
        old = malloc(n * sizeof(*old));
        if (!p || !old)
            rc = -ENOMEM;
    }
    for (struct op *q = o; rc == 0 && q; q = q->next, i++)
        p[i] = (struct idx_cold_put){ .ns = q->ns, .key = q->key,
                                      .rec = { .off = q->off, .len = q->len, .xxh3 = q->xxh3,
                                               .gen = q->gen, .parent = q->parent,
                                               .flags = q->has_parent ? IDX_COLD_HAS_PARENT
                                                                      : 0 } };
    if (rc == 0)
        rc = idx_cold_put_batch(c->idx, p, n, old);
    if (rc < 0 && rc != -ENOMEM)
        turn_failed(c);
    if (rc == 0) {
        /* this commit synced the index's file before writing its meta
         * page: every earlier transaction is durable now */
        c->txn_durable = c->txn_seq++;
        c->st.commits++;
    }
    for (i = 0; o; o = next, i++) {
        next = o->next;
        if (rc < 0) {
            fail_op(c, o, rc == -ENOMEM ? rc : -EIO);
            continue;
        }
        if (!old[i].len)
            c->st.blocks++;
        o->txn = c->txn_seq;
        o->old_off = old[i].off;
        o->old_len = old[i].len;
        o->next = NULL;
        *c->indexed_tail = o;
        c->indexed_tail = &o->next;
        c->nindexed++;
    }
    free(p);
    free(old);
    tell_indexed(c, 0);
    start_isync(c);
    /* puts written during the commit: their sync, unless one is running */
    if (!c->sync_inflight && sync_due(c))
        start_sync(c);
}

static void start_sync(struct tier_cold *c)
{
    int rc;

    if (!c->pending)
        return;
    if (c->st.failed) {
        while (c->pending) {
            struct op *o = c->pending;

            c->pending = o->next;
            fail_op(c, o, -EIO);
        }
        c->npending = 0;
        return;
    }
    if (c->sync_inflight) {
        c->flush_wanted = true; /* the next batch starts when this one lands */
        return;
    }
    /* fdatasync is ordered after every write already completed: all of the
     * pending ones, by construction */
    rc = tier_nvme_sync(c->io, on_sync, c);
    if (rc < 0) {
        c->flush_wanted = true; /* ring full: retried from tier_cold_poll */
        return;
    }
    c->syncing = c->pending;
    c->nsyncing = c->npending;
    c->pending = NULL;
    c->npending = 0;
    c->sync_inflight = true;
    c->flush_wanted = false;
    tier_nvme_submit(c->io);
}

static void on_write(void *ctx, int64_t res)
{
    struct op *o = ctx;
    struct tier_cold *c = o->c;

    c->writes--;
    if (res < 0) {
        c->st.io_errors++;
        fail_op(c, o, (int)res);
        return;
    }
    c->st.writes++;
    c->st.bytes_written += o->len;
    o->next = c->pending;
    c->pending = o;
    if (++c->npending >= c->batch)
        start_sync(c);
}

static bool aligned(const void *buf, uint64_t len)
{
    return len > 0 && len % PAGE == 0 && (uintptr_t)buf % PAGE == 0;
}

int tier_cold_put(struct tier_cold *c, uint32_t ns, const struct tier_key *key,
                  const struct tier_key *parent, const void *buf, uint64_t len,
                  tier_cold_cb cb, void *ctx)
{
    struct op *o;
    uint64_t off;
    int rc;

    if (c->st.failed)
        return -EIO;
    if (!aligned(buf, len) || !cb)
        return -EINVAL;
    if (!data_room(c)) {
        c->write_wanted = true; /* its caller tries again: reads leave it room */
        return -EBUSY; /* before the space and the checksum: a refused put costs nothing */
    }
    o = malloc(sizeof(*o));
    if (!o)
        return -ENOMEM;
    rc = alloc_bytes(c, len, &off);
    if (rc < 0) {
        free(o);
        return rc;
    }
    *o = (struct op){ .c = c, .ns = ns, .key = *key, .off = off, .len = len,
                      .xxh3 = XXH3_64bits(buf, len), .gen = c->next_gen++, .cb = cb,
                      .ctx = ctx, .has_parent = parent != NULL };
    if (parent)
        o->parent = *parent;
    rc = tier_nvme_write(c->io, o->off, buf, len, on_write, o);
    if (rc < 0) {
        free_bytes(c, o->off, len);
        free(o);
        return rc;
    }
    c->writes++;
    c->write_wanted = false;
    tier_nvme_submit(c->io);
    return 0;
}

void tier_cold_flush(struct tier_cold *c)
{
    c->flush_wanted = true;
    start_sync(c);
}

void tier_cold_flush_idle(struct tier_cold *c)
{
    if (c->writes == 0 && c->npending)
        tier_cold_flush(c);
}

/* ---- reads ------------------------------------------------------------ */

static void on_read(void *ctx, int64_t res)
{
    struct op *o = ctx;
    struct tier_cold *c = o->c;
    struct idx_cold_rec now;
    int rc = 0;

    c->reads--;
    if (res < 0) {
        c->st.io_errors++;
        rc = -EIO;
    } else if (XXH3_64bits(o->buf, o->len) != o->xxh3) {
        /* never hand these bytes out; drop the record unless it was
         * replaced meanwhile (then the mismatch was the race, not the disk) */
        c->st.checksum_errors++;
        rc = -EBADMSG;
        if (idx_cold_get(c->idx, o->ns, &o->key, &now) == 0 && now.gen == o->gen &&
            idx_cold_del(c->idx, o->ns, &o->key) == 0) {
            free_bytes(c, now.off, now.len);
            c->st.blocks--;
        }
    } else {
        c->st.reads++;
        c->st.bytes_read += o->len;
    }
    o->cb(o->ctx, rc);
    free(o);
}

int tier_cold_get(struct tier_cold *c, uint32_t ns, const struct tier_key *key, void *buf,
                  uint64_t cap, uint64_t *len_out, tier_cold_cb cb, void *ctx)
{
    struct idx_cold_rec rec;
    struct op *o;
    int rc = idx_cold_get(c->idx, ns, key, &rec);

    if (rc < 0)
        return rc;
    /* a block is written as its slot, and read into a slot of its size:
     * any other length is another size's block, never served as this one */
    if (!aligned(buf, cap) || rec.len != cap || !cb)
        return -EINVAL;
    o = malloc(sizeof(*o));
    if (!o)
        return -ENOMEM;
    *o = (struct op){ .c = c, .ns = ns, .key = *key, .off = rec.off, .len = rec.len,
                      .xxh3 = rec.xxh3, .gen = rec.gen, .buf = buf, .cb = cb, .ctx = ctx };
    rc = c->backlog || !read_room(c) ? -EBUSY
                                     : tier_nvme_read(c->io, rec.off, buf, rec.len, on_read, o);
    if (rc == -EBUSY) {
        /* no data slot free: a long chain's reads wait their turn here rather
         * than being refused, and go in as earlier ones complete (FIFO) */
        o->next = NULL;
        *c->backlog_tail = o;
        c->backlog_tail = &o->next;
        c->nbacklog++;
    } else if (rc < 0) {
        free(o);
        return rc;
    }
    c->reads++;
    if (len_out)
        *len_out = rec.len;
    tier_nvme_submit(c->io);
    return 0;
}

bool tier_cold_has(struct tier_cold *c, uint32_t ns, const struct tier_key *key)
{
    struct idx_cold_rec rec;

    return idx_cold_get(c->idx, ns, key, &rec) == 0;
}

int tier_cold_remove(struct tier_cold *c, uint32_t ns, const struct tier_key *key)
{
    struct idx_cold_rec rec;
    int rc = idx_cold_get(c->idx, ns, key, &rec);

    if (rc == 0)
        rc = idx_cold_del(c->idx, ns, key);
    if (rc < 0)
        return rc;
    /* the delete is durable: the space can be reused */
    free_bytes(c, rec.off, rec.len);
    c->st.blocks--;
    return 0;
}

bool tier_cold_frees(struct tier_cold *c, uint32_t ns, const struct tier_key *key,
                     uint64_t len)
{
    struct idx_cold_rec rec;
    uint64_t k = len / PAGE, p0, p1, run; /* the pages alloc_bytes asks for */

    if (idx_cold_get(c->idx, ns, key, &rec) < 0)
        return false;
    p0 = rec.off / PAGE;
    run = rec.len / PAGE;
    p1 = p0 + run;
    /* runs do not wrap around the end (alloc_bytes) */
    while (run < k && p0 > 0 && !page_used(c, p0 - 1)) {
        p0--;
        run++;
    }
    while (run < k && p1 < c->npages && !page_used(c, p1)) {
        p1++;
        run++;
    }
    return run >= k;
}

/* Extents of deleted records, freed once the delete is durable. */
struct extents {
    struct { uint64_t off, len; } *v;
    size_t n, cap;
    bool oom;
};

static void collect(void *ctx, const struct idx_cold_rec *rec)
{
    struct extents *x = ctx;

    if (CMN_GROW(&x->v, &x->cap, x->n + 1, 256) < 0) {
        x->oom = true; /* that space stays unused until a restart rebuilds the map */
        return;
    }
    x->v[x->n].off = rec->off;
    x->v[x->n++].len = rec->len;
}

int tier_cold_remove_ns(struct tier_cold *c, uint32_t ns)
{
    struct extents x = { 0 };
    int rc = idx_cold_del_ns(c->idx, ns, collect, &x);

    if (rc >= 0) {
        for (size_t i = 0; i < x.n; i++)
            free_bytes(c, x.v[i].off, x.v[i].len);
        c->st.blocks -= (uint64_t)rc;
    }
    free(x.v);
    return rc;
}

/* ---- the rest --------------------------------------------------------- */

int tier_cold_event_fd(const struct tier_cold *c)
{
    return tier_nvme_event_fd(c->io);
}

unsigned tier_cold_busy(const struct tier_cold *c)
{
    return c->writes + c->reads + c->npending + c->nsyncing + c->nindexed;
}

/* Move backlogged reads into the ring while it has room for data. */
static void feed_backlog(struct tier_cold *c)
{
    while (c->backlog) {
        struct op *o = c->backlog;
        int rc = read_room(c) ? tier_nvme_read(c->io, o->off, o->buf, o->len, on_read, o)
                              : -EBUSY;

        if (rc == -EBUSY)
            break; /* still full: the next completion makes room */
        c->nbacklog--;
        c->backlog = o->next;
        if (!c->backlog)
            c->backlog_tail = &c->backlog;
        if (rc < 0)
            on_read(o, rc); /* refused for good: the getter hears it now */
    }
    tier_nvme_submit(c->io);
}

int tier_cold_poll(struct tier_cold *c, bool wait)
{
    bool inflight = tier_nvme_inflight(c->io) > 0;
    int rc = tier_nvme_reap(c->io, wait && inflight ? 1 : 0);

    /* syncs first: they have their reserve, but a sync owed should not wait
     * behind reads either way */
    if (c->flush_wanted && !c->sync_inflight)
        start_sync(c);
    if (c->isync_wanted)
        start_isync(c);
    feed_backlog(c);
    return rc;
}

int tier_cold_drain(struct tier_cold *c)
{
    while (tier_cold_busy(c)) {
        int rc;

        tier_cold_flush(c);
        rc = tier_cold_poll(c, true);
        if (rc < 0)
            return rc;
    }
    return c->st.failed ? -EIO : 0;
}

struct scan_ctx {
    int (*fn)(void *ctx, uint32_t ns, const struct tier_key *key,
              const struct tier_key *parent, uint64_t len);
    void *ctx;
};

static int scan_one(void *ctx, uint32_t ns, const struct tier_key *key,
                    const struct idx_cold_rec *rec)
{
    struct scan_ctx *s = ctx;

    return s->fn(s->ctx, ns, key, rec->flags & IDX_COLD_HAS_PARENT ? &rec->parent : NULL,
                 rec->len);
}

int tier_cold_scan(struct tier_cold *c,
                   int (*fn)(void *ctx, uint32_t ns, const struct tier_key *key,
                             const struct tier_key *parent, uint64_t len),
                   void *ctx)
{
    struct scan_ctx s = { fn, ctx };

    return idx_cold_scan(c->idx, scan_one, &s);
}

int tier_cold_ns_id(struct tier_cold *c, const void *desc, size_t len, uint32_t *id)
{
    return idx_cold_ns_id(c->idx, desc, len, id);
}

void tier_cold_stats_get(const struct tier_cold *c, struct tier_cold_stats *out)
{
    *out = c->st;
    out->bytes_used = c->used_pages * PAGE;
    out->bytes_capacity = c->npages * PAGE;
    out->direct = tier_nvme_direct(c->io);
}

/* ---- open / close: rebuilding the page map ------------------------------ */

struct rebuild {
    struct tier_cold *c;
    struct idx_cold_put *bad; /* records to drop after the walk */
    size_t nbad, cap;
};

static int claim(void *ctx, uint32_t ns, const struct tier_key *key,
                 const struct idx_cold_rec *rec)
{
    struct rebuild *r = ctx;
    struct tier_cold *c = r->c;
    uint64_t p = rec->off / PAGE, n = rec->len / PAGE;
    bool ok = rec->off % PAGE == 0 && rec->len % PAGE == 0 && rec->len > 0 &&
              p + n <= c->npages && p + n > p;

    for (uint64_t i = p; ok && i < p + n; i++)
        ok = !page_used(c, i);
    if (ok) {
        mark(c, p, n, true);
        c->st.blocks++;
        if (rec->gen >= c->next_gen)
            c->next_gen = rec->gen + 1;
        return 0;
    }
    if (CMN_GROW(&r->bad, &r->cap, r->nbad + 1, 16) < 0)
        return -ENOMEM;
    r->bad[r->nbad++] = (struct idx_cold_put){ .ns = ns, .key = *key, .rec = *rec };
    return 0;
}

int tier_cold_open(const struct tier_cold_cfg *cfg, struct tier_cold **out)
{
    char path[4096], msg[320];
    uint32_t qd = cfg->qd ? cfg->qd : 32;
    /* the syncs' slots come on top of the depth asked for reads and writes */
    struct tier_nvme_cfg ncfg = { .path = path, .bytes = cfg->bytes ? cfg->bytes : 16ull << 30,
                                  .qd = qd + SYNC_SLOTS, .no_direct = cfg->no_direct,
                                  .sim = cfg->sim, .log = cfg->log, .log_ctx = cfg->log_ctx };
    struct rebuild r = { 0 };
    struct tier_cold *c = calloc(1, sizeof(*c));
    int rc;

    if (!c)
        return -ENOMEM;
    if (qd > UINT32_MAX - SYNC_SLOTS) { /* the ring's depth would wrap */
        free(c);
        return -EINVAL;
    }
    c->log = cfg->log;
    c->log_ctx = cfg->log_ctx;
    c->batch = cfg->batch ? cfg->batch : 32;
    c->next_gen = 1;
    c->backlog_tail = &c->backlog;
    c->indexed_tail = &c->indexed;
    snprintf(path, sizeof(path), "%s/cold.lmdb", cfg->dir);
    rc = idx_cold_open(path, 0, cfg->log, cfg->log_ctx, &c->idx);
    if (rc < 0)
        goto out_free;
    /* a daemon killed between an index commit and its sync left that
     * transaction in the page cache only: what the restart vouches for
     * (every record it finds is on disk) must be first */
    rc = idx_cold_sync(c->idx);
    if (rc < 0)
        goto out_idx;
    snprintf(path, sizeof(path), "%s/cold.data", cfg->dir);
    rc = tier_nvme_open(&ncfg, &c->io);
    if (rc < 0)
        goto out_idx;
    c->data_qd = tier_nvme_qd(c->io) - SYNC_SLOTS;
    c->npages = tier_nvme_bytes(c->io) / PAGE;
    c->map = calloc((c->npages + 63) / 64, sizeof(uint64_t));
    if (!c->map) {
        rc = -ENOMEM;
        goto out_io;
    }
    if (c->npages % 64) /* the tail of the last word is never free */
        c->map[c->npages / 64] = ~0ull << (c->npages % 64);
    r.c = c;
    rc = idx_cold_scan(c->idx, claim, &r);
    if (rc < 0)
        goto out_map;
    for (size_t i = 0; i < r.nbad; i++) {
        snprintf(msg, sizeof(msg), "cold tier: dropping a record at %llu+%llu: outside the "
                                   "file or overlapping another",
                 (unsigned long long)r.bad[i].rec.off, (unsigned long long)r.bad[i].rec.len);
        say(c, msg);
        idx_cold_del(c->idx, r.bad[i].ns, &r.bad[i].key);
    }
    free(r.bad);
    *out = c;
    return 0;
out_map:
    free(r.bad);
    free(c->map);
out_io:
    tier_nvme_close(c->io);
out_idx:
    idx_cold_close(c->idx);
out_free:
    free(c);
    return rc;
}

void tier_cold_close(struct tier_cold *c)
{
    if (!c)
        return;
    tier_cold_drain(c);
    tier_nvme_close(c->io);
    idx_cold_close(c->idx);
    free(c->map);
    free(c);
}

struct tier_nvme *tier_cold_io(struct tier_cold *c) { return c->io; }
