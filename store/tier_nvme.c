/* SPDX-License-Identifier: MIT */
/*
 * tier_nvme.c - the cold tier's data file and its io_uring: open and
 * preallocate, queue aligned reads/writes/datasyncs, reap completions into
 * callbacks. It knows nothing of blocks, checksums or the index
 * (tier_cold.c's); this is the only file that includes liburing.h.
 *
 * Design note. Every request owns one slot of a table of qd entries; the
 * slot number is the SQE's user_data, so a completion finds its request in
 * O(1) and nothing is allocated per I/O. Free slots form a stack linked
 * through `next`. A request has at most one SQE queued or in the kernel at
 * any time (a short transfer is re-issued only after its CQE was consumed),
 * so with qd slots the SQ (>= qd entries) never runs out and the CQ
 * (2 * SQ entries) never overflows.
 *
 * Callbacks may queue new requests, and even reap: a CQE is copied out and
 * marked seen, and its slot freed, before the callback runs, so neither the
 * CQ ring nor the table is walked across a callback. A callback must not
 * call tier_nvme_close().
 *
 * Fault injection (KVT_FAULTS builds only; see the header for the rules):
 * the decision is taken in prep(), once per SQE, so a remainder re-issued
 * after a short transfer is judged again. A failure becomes a NOP SQE whose
 * completion carries the injected result, so the callback still runs from
 * tier_nvme_reap() like any real completion, and the buffer is untouched. A
 * short transfer is a real one with a smaller length: the bytes past it are
 * really not moved, and the normal short-transfer path must finish the job.
 */
#include <errno.h>
#include <fcntl.h>
#include <liburing.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "kvt_common.h"
#include "tier_nvme.h"
#include "tier_nvme_int.h"

#define QD_DEFAULT 32u
#define NONE UINT32_MAX
/* Longest single SQE: sqe->len is 32 bits and Linux moves at most
 * MAX_RW_COUNT (2 GiB - 4 KiB) per call; longer requests go in pieces
 * through the short-transfer path. A multiple of TIER_NVME_ALIGN. */
#define CHUNK_MAX (1u << 30)

struct req {
    tier_nvme_cb cb;      /* caller's callback (may be NULL) */
    void *ctx;            /* its argument */
    uint8_t *buf;         /* caller's buffer; only read from for NVME_OP_WRITE */
    uint64_t off;         /* file offset of the whole request, bytes */
    uint64_t len;         /* request length, bytes (0 for the syncs) */
    int fd;               /* NVME_OP_ISYNC: the file to sync */
    uint64_t done;        /* bytes transferred so far (short transfers) */
    uint32_t next;        /* free stack link while NVME_OP_FREE */
    uint8_t op;           /* enum nvme_op; NVME_OP_FREE when the slot is unused */
    uint64_t sim_seq;     /* sim: order queued */
    uint64_t sim_done;    /* sim: order completed (0: still queued) */
    uint64_t sim_snap;    /* sim, NVME_OP_SYNC: writes completed before it was queued */
    int64_t sim_res;      /* sim: the result its callback gets */
#ifdef KVT_FAULTS
    bool faked;           /* the SQE in flight is an injected fault's NOP */
    int32_t fake_res;     /* the result its completion stands for */
#endif
};


/* sim: a completed write not yet durable (the drive's volatile cache) */
struct ext {
    uint64_t off, len, seq; /* seq: order completed among writes */
    struct ext *next;
    uint8_t data[];
};

struct tier_nvme {
    struct io_uring ring;
    bool sim;             /* the simulated disk: no ring (header) */
    bool crashed;         /* sim: power lost; everything fails */
    uint64_t sim_qseq, sim_dseq, sim_wseq; /* sim: queue, completion, write orders */
    struct ext *ext, **ext_tail; /* sim: volatile writes, oldest first */
    int fd;               /* the data file (O_DIRECT when `direct`) */
    int efd;              /* eventfd registered with the ring */
    uint64_t bytes;       /* usable size: a 4 KiB multiple, <= file size */
    bool direct;          /* O_DIRECT in use */
    uint32_t qd;          /* slots in `req` */
    uint32_t nfree;       /* slots on the free stack */
    uint32_t free_top;    /* top of the free stack, NONE when empty */
    struct req *req;      /* qd slots, indexed by SQE user_data */
#ifdef KVT_FAULTS
    struct faults faults; /* injected faults (KVTIER_FAULTS / tier_nvme_fault_set) */
#endif
};

/* the simulated disk (end of file) */
static int sim_reap(struct tier_nvme *n, unsigned min);
static void sim_close(struct tier_nvme *n);

/* A line to the caller's log (NULL: none), as every store module reports. */
#define say(cfg, ...) cmn_logf((cfg)->log, (cfg)->log_ctx, __VA_ARGS__)

/* ---- fault injection (KVT_FAULTS builds only; the rules: tier_nvme_faults.c) -- */


/* The rules of KVTIER_FAULTS at open. Without KVT_FAULTS it is ignored,
 * and we say so: someone expecting faults must not think they ran. */
static int faults_open(struct tier_nvme *n, const struct tier_nvme_cfg *cfg)
{
    const char *spec = getenv(TIER_NVME_FAULTS_ENV);

    (void)n;
    if (!spec || !*spec)
        return 0;
#ifdef KVT_FAULTS
    char why[768];

    if (tier_nvme_faults_parse(spec, &n->faults, why, sizeof(why)) < 0) {
        say(cfg, "cold tier: %s", why);
        return -EINVAL;
    }
    say(cfg, "cold tier: fault injection on: " TIER_NVME_FAULTS_ENV "=%s", spec);
#else
    say(cfg, "cold tier: %s is set but ignored: this build has no fault injector (build "
             "with -DKVT_FAULTS, as build-san/ is)", TIER_NVME_FAULTS_ENV);
#endif
    return 0;
}

bool tier_nvme_faults_available(void)
{
#ifdef KVT_FAULTS
    return true;
#else
    return false;
#endif
}

int tier_nvme_fault_set(struct tier_nvme *n, const char *spec)
{
#ifdef KVT_FAULTS
    struct faults f;
    char why[768];
    uint64_t injected = n->faults.injected;

    if (tier_nvme_faults_parse(spec, &f, why, sizeof(why)) < 0)
        return -EINVAL;
    n->faults = f;
    n->faults.injected = injected;
    return 0;
#else
    (void)n;
    (void)spec;
    return -EOPNOTSUPP;
#endif
}

uint64_t tier_nvme_faults_injected(const struct tier_nvme *n)
{
#ifdef KVT_FAULTS
    return n->faults.injected;
#else
    (void)n;
    return 0;
#endif
}

/* ---- open ---------------------------------------------------------------- */

/* Reserve the file's blocks up front so a full disk shows at open time, not
 * as a failed demotion later. File systems without fallocate (ramfs, some
 * network ones) get a sparse file instead, and we say so. */
static int prealloc(int fd, uint64_t bytes, off_t old_size, const struct tier_nvme_cfg *cfg)
{
    int rc;

    do
        rc = fallocate(fd, 0, 0, (off_t)bytes);
    while (rc < 0 && errno == EINTR);
    if (rc == 0)
        return 0;
    if (errno != EOPNOTSUPP)
        return -errno;
    say(cfg, "cold tier: fallocate not supported on %s; the file is sparse and writes may "
             "fail with ENOSPC", cfg->path);
    if ((uint64_t)old_size < bytes && ftruncate(fd, (off_t)bytes) < 0)
        return -errno;
    return 0;
}

/* Create or open the file, preallocate it, then switch to O_DIRECT where the
 * file system takes it. On failure nothing we added stays behind: a file we
 * created is removed, an existing one cut back to its old size (fallocate
 * may have extended it before failing). */
static int open_file(struct tier_nvme *n, const struct tier_nvme_cfg *cfg, uint64_t bytes)
{
    bool created = true;
    struct stat st, st2;
    int fd, dfd, rc;

    /* never through a symbolic link: one planted where the file will be
     * would make us extend and write whatever it names (ELOOP) */
    fd = open(cfg->path, O_RDWR | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
    if (fd < 0 && errno == EEXIST) {
        created = false;
        fd = open(cfg->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC);
    }
    if (fd < 0)
        return -errno;
    if (fstat(fd, &st) < 0) {
        rc = -errno;
        goto out_unlink; /* no old size known: never truncate then */
    }
    if (!S_ISREG(st.st_mode)) {
        rc = -EINVAL; /* a device or FIFO: nothing to preallocate (we never create one) */
        goto out_close;
    }
    rc = prealloc(fd, bytes, st.st_size, cfg);
    if (rc < 0)
        goto out_truncate;
    /* an existing larger file is kept whole; its usable part ends at its
     * last full 4 KiB page */
    n->bytes = bytes;
    if ((uint64_t)st.st_size > bytes)
        n->bytes = (uint64_t)st.st_size & ~(uint64_t)(TIER_NVME_ALIGN - 1);
    if (cfg->no_direct) {
        say(cfg, "cold tier: O_DIRECT disabled by configuration for %s; using buffered I/O",
            cfg->path);
        n->fd = fd;
        return 0;
    }
    /* A second open, because file systems without direct I/O refuse
     * O_DIRECT at open time (EINVAL), and the preallocation above must not
     * depend on it. Check it is still the same file before dropping the
     * first descriptor: the path could have been renamed in between. */
    dfd = open(cfg->path, O_RDWR | O_NOFOLLOW | O_CLOEXEC | O_DIRECT);
    if (dfd < 0 && errno != EINVAL) {
        rc = -errno;
        goto out_truncate;
    }
    if (dfd < 0) {
        say(cfg, "cold tier: O_DIRECT not supported on %s; using buffered I/O", cfg->path);
        n->fd = fd;
        return 0;
    }
    rc = 0;
    if (fstat(dfd, &st2) < 0)
        rc = -errno;
    else if (st2.st_dev != st.st_dev || st2.st_ino != st.st_ino)
        rc = -ESTALE;
    if (rc < 0) {
        close(dfd);
        goto out_truncate;
    }
    close(fd);
    n->fd = dfd;
    n->direct = true;
    return 0;
    /* best effort below: the error that brought us here matters more */
out_truncate:
    if (!created)
        (void)!ftruncate(fd, st.st_size);
out_unlink:
    if (created)
        unlink(cfg->path);
out_close:
    close(fd);
    return rc;
}

int tier_nvme_open(const struct tier_nvme_cfg *cfg, struct tier_nvme **out)
{
    struct tier_nvme_cfg sim_cfg;
    struct tier_nvme *n;
    uint64_t bytes;
    int rc;

    if (!cfg || !cfg->path || !out || cfg->bytes == 0)
        return -EINVAL;
    /* the rounded size must still fit off_t */
    if (cfg->bytes > (uint64_t)INT64_MAX - (TIER_NVME_ALIGN - 1))
        return -EFBIG;
    bytes = (cfg->bytes + TIER_NVME_ALIGN - 1) & ~(uint64_t)(TIER_NVME_ALIGN - 1);
    n = calloc(1, sizeof(*n));
    if (!n)
        return -ENOMEM;
    n->fd = n->efd = -1;
    n->qd = cfg->qd ? cfg->qd : QD_DEFAULT;
    n->req = calloc(n->qd, sizeof(*n->req));
    if (!n->req) {
        rc = -ENOMEM;
        goto out_free;
    }
    for (uint32_t i = 0; i < n->qd; i++)
        n->req[i].next = i + 1 < n->qd ? i + 1 : NONE;
    n->free_top = 0;
    n->nfree = n->qd;
    rc = faults_open(n, cfg);
    if (rc < 0)
        goto out_free;
    /* Ring and eventfd before the file: they touch nothing on disk, so when
     * they fail (io_uring disabled by sysctl, memlock limits on old kernels)
     * no preallocated file is left behind. The kernel rounds the SQ up to a
     * power of two and refuses more than 32768 entries. The simulated disk
     * has no ring: its file is the medium, buffered, read back at once, and
     * nothing about it is worth a log line. */
    if (cfg->sim) {
        n->sim = true;
        n->ext_tail = &n->ext;
        sim_cfg = *cfg;
        sim_cfg.no_direct = true;
        sim_cfg.log = NULL;
        cfg = &sim_cfg;
    } else if ((rc = io_uring_queue_init(n->qd, &n->ring, 0)) < 0) {
        goto out_free;
    }
    n->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (n->efd < 0) {
        rc = -errno;
        goto out_exit_ring;
    }
    if (!n->sim && (rc = io_uring_register_eventfd(&n->ring, n->efd)) < 0)
        goto out_close_efd;
    rc = open_file(n, cfg, bytes);
    if (rc < 0)
        goto out_close_efd;
    *out = n;
    return 0;
out_close_efd:
    close(n->efd);
out_exit_ring:
    if (!n->sim)
        io_uring_queue_exit(&n->ring);
out_free:
    free(n->req);
    free(n);
    return rc;
}

/* ---- requests ------------------------------------------------------------ */

static struct io_uring_sqe *get_sqe(struct tier_nvme *n)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&n->ring);

    /* cannot happen while each slot holds at most one SQE (design note);
     * flushing and retrying keeps it harmless if it ever does */
    if (!sqe && io_uring_submit(&n->ring) >= 0)
        sqe = io_uring_get_sqe(&n->ring);
    return sqe;
}

/* Queue the next piece of slot i: the part not yet transferred. */
static int prep(struct tier_nvme *n, uint32_t i)
{
    struct req *r = &n->req[i];
    struct io_uring_sqe *sqe;

    if (n->sim) { /* it waits in its slot for tier_nvme_sim_complete() */
        r->sim_seq = ++n->sim_qseq;
        r->sim_done = 0;
        r->sim_snap = n->sim_wseq;
        return 0;
    }
    sqe = get_sqe(n);
    uint64_t left = r->len - r->done;
    unsigned chunk = left > CHUNK_MAX ? CHUNK_MAX : (unsigned)left;

    if (!sqe)
        return -EBUSY;
#ifdef KVT_FAULTS
    int32_t err;

    r->faked = false;
    if (tier_nvme_fault_pick(&n->faults, r->op, &err)) {
        if (err == 0 && chunk / 2 >= TIER_NVME_ALIGN) {
            chunk = chunk / 2 & ~(TIER_NVME_ALIGN - 1); /* short, still aligned */
        } else {
            /* a failure, or half a page: no progress, which complete() makes -EIO */
            io_uring_prep_nop(sqe);
            io_uring_sqe_set_data64(sqe, i);
            r->faked = true;
            r->fake_res = err;
            return 0;
        }
    }
#endif
    if (r->op == NVME_OP_SYNC || r->op == NVME_OP_ISYNC)
        io_uring_prep_fsync(sqe, r->op == NVME_OP_SYNC ? n->fd : r->fd, IORING_FSYNC_DATASYNC);
    else if (r->op == NVME_OP_READ)
        io_uring_prep_read(sqe, n->fd, r->buf + r->done, chunk, r->off + r->done);
    else
        io_uring_prep_write(sqe, n->fd, r->buf + r->done, chunk, r->off + r->done);
    io_uring_sqe_set_data64(sqe, i);
    return 0;
}

static void put_slot(struct tier_nvme *n, uint32_t i)
{
    n->req[i].op = NVME_OP_FREE;
    n->req[i].next = n->free_top;
    n->free_top = i;
    n->nfree++;
}

static int queue(struct tier_nvme *n, enum nvme_op op, uint64_t off, void *buf, uint64_t len,
                 int fd, tier_nvme_cb cb, void *ctx)
{
    uint32_t i;
    int rc;

    if (op != NVME_OP_SYNC && op != NVME_OP_ISYNC) {
        /* O_DIRECT needs this; buffered mode checks it too so that a
         * caller tested on tmpfs does not break on NVMe */
        if (len == 0 || off % TIER_NVME_ALIGN || len % TIER_NVME_ALIGN ||
            (uintptr_t)buf % TIER_NVME_ALIGN)
            return -EINVAL;
        if (len > n->bytes || off > n->bytes - len) /* no overflow in off + len */
            return -EINVAL;
    }
    if (n->free_top == NONE)
        return -EBUSY;
    i = n->free_top;
    n->free_top = n->req[i].next;
    n->nfree--;
    n->req[i] = (struct req){ .cb = cb, .ctx = ctx, .buf = buf, .off = off, .len = len,
                              .fd = fd, .op = (uint8_t)op, .next = NONE };
    rc = prep(n, i);
    if (rc < 0)
        put_slot(n, i);
    return rc;
}

int tier_nvme_read(struct tier_nvme *n, uint64_t off, void *buf, uint64_t len, tier_nvme_cb cb,
                   void *ctx)
{
    return queue(n, NVME_OP_READ, off, buf, len, -1, cb, ctx);
}

int tier_nvme_write(struct tier_nvme *n, uint64_t off, const void *buf, uint64_t len,
                    tier_nvme_cb cb, void *ctx)
{
    /* the cast drops const only for storage: writes never store into buf */
    return queue(n, NVME_OP_WRITE, off, (void *)buf, len, -1, cb, ctx);
}

/* No IOSQE_IO_DRAIN: the header promises ordering only after writes whose
 * callbacks ran, and draining would stall every later read behind it. */
int tier_nvme_sync(struct tier_nvme *n, tier_nvme_cb cb, void *ctx)
{
    return queue(n, NVME_OP_SYNC, 0, NULL, 0, -1, cb, ctx);
}

int tier_nvme_sync_fd(struct tier_nvme *n, int fd, tier_nvme_cb cb, void *ctx)
{
    if (fd < 0)
        return -EBADF;
    return queue(n, NVME_OP_ISYNC, 0, NULL, 0, fd, cb, ctx);
}

int tier_nvme_submit(struct tier_nvme *n)
{
    int rc;

    if (n->sim)
        return 0;
    do
        rc = io_uring_submit(&n->ring);
    while (rc == -EINTR);
    return rc < 0 ? rc : 0;
}

/* ---- completions --------------------------------------------------------- */

/* One CQE for slot i. Returns true when the request finished and its
 * callback ran, false when the rest of a short transfer was re-queued. */
static bool complete(struct tier_nvme *n, uint32_t i, int res)
{
    struct req *r = &n->req[i];
    tier_nvme_cb cb = r->cb;
    void *ctx = r->ctx;
    bool sync = r->op == NVME_OP_SYNC || r->op == NVME_OP_ISYNC;
    int64_t out;

#ifdef KVT_FAULTS
    if (r->faked) { /* an injected fault's NOP: it stands for this result */
        res = r->fake_res;
        r->faked = false;
    }
#endif
    out = res;
    if (!sync && res > 0 && r->done + (uint64_t)res < r->len) {
        /* Short transfer: go on from where it stopped. With O_DIRECT a
         * short count is still a multiple of the logical block size, so the
         * remainder stays aligned enough; if not, the kernel's -EINVAL
         * reaches the callback. */
        r->done += (uint64_t)res;
        if (prep(n, i) == 0)
            return false;
        out = -EBUSY; /* no SQE: impossible by the design note */
    } else if (!sync && res == 0) {
        /* A read at EOF (the file shrank under us) or a write that made no
         * progress: retrying would spin for ever. */
        out = -EIO;
    } else if (res >= 0) {
        out = (int64_t)r->len;
    }
    put_slot(n, i); /* before the callback, which may queue into this slot */
    if (cb)
        cb(ctx, out);
    return true;
}

int tier_nvme_reap(struct tier_nvme *n, unsigned min)
{
    struct io_uring_cqe *cqe;
    bool requeued = false;
    unsigned ran = 0;
    uint64_t v;
    uint32_t i;
    int rc, res;

    if (n->sim)
        return sim_reap(n, min);
    /* Drain the eventfd before looking at the CQ: a completion that lands
     * after the drain signals it again, so epoll never misses one (at worst
     * it wakes us once for nothing). */
    while (read(n->efd, &v, sizeof(v)) == (ssize_t)sizeof(v) || errno == EINTR)
        ;
    for (;;) {
        rc = io_uring_peek_cqe(&n->ring, &cqe);
        if (rc == -EAGAIN) {
            if (ran >= min || n->nfree == n->qd)
                break;
            /* submit what is only queued too (remainders, requests from
             * callbacks): waiting on them unsubmitted would hang */
            rc = io_uring_submit_and_wait(&n->ring, 1);
            if (rc < 0 && rc != -EINTR)
                goto out_err;
            requeued = false;
            continue;
        }
        if (rc < 0)
            goto out_err;
        /* copy out and mark seen first: the callback may re-enter us */
        i = (uint32_t)io_uring_cqe_get_data64(cqe);
        res = cqe->res;
        io_uring_cqe_seen(&n->ring, cqe);
        if (i >= n->qd || n->req[i].op == NVME_OP_FREE)
            continue; /* not ours: cannot happen, but never index past the table */
        if (complete(n, i, res))
            ran++;
        else
            requeued = true;
    }
    /* A re-queued remainder must reach the kernel now, not at the caller's
     * next submit. If this fails it stays queued for that one. */
    if (requeued)
        tier_nvme_submit(n);
    return (int)ran;
out_err:
    /* callbacks that ran are not undone; report them, the error recurs */
    return ran > 0 ? (int)ran : rc;
}

unsigned tier_nvme_inflight(const struct tier_nvme *n) { return n->qd - n->nfree; }
unsigned tier_nvme_qd(const struct tier_nvme *n) { return n->qd; }

/* ---- close and accessors ------------------------------------------------- */

void tier_nvme_close(struct tier_nvme *n)
{
    int rc;

    if (!n)
        return;
    if (n->sim) {
        sim_close(n);
        return;
    }
    /* Buffers of requests in flight belong to the caller, and the kernel may
     * still DMA into them after the ring fd is closed, so wait them all out
     * (reap submits what is only queued). Give up only on an error that will
     * not go away; their callbacks then learn it was cancelled. */
    while (n->nfree < n->qd) {
        rc = tier_nvme_reap(n, 1);
        if (rc < 0 && rc != -EAGAIN && rc != -EBUSY)
            break;
    }
    for (uint32_t i = 0; i < n->qd; i++) {
        struct req *r = &n->req[i];

        if (r->op != NVME_OP_FREE) {
            tier_nvme_cb cb = r->cb;
            void *ctx = r->ctx;

            put_slot(n, i);
            if (cb)
                cb(ctx, -ECANCELED);
        }
    }
    io_uring_queue_exit(&n->ring);
    close(n->efd);
    close(n->fd);
    free(n->req);
    free(n);
}

uint64_t tier_nvme_bytes(const struct tier_nvme *n) { return n->bytes; }
bool tier_nvme_direct(const struct tier_nvme *n) { return n->direct; }
int tier_nvme_event_fd(const struct tier_nvme *n) { return n->efd; }

/* ---- the simulated disk (header) ----------------------------------------- */

/* All len bytes at off of the file: read into dst, or (dst NULL) written
 * from src, a short transfer resumed. 0, -errno, or -EIO at end of file. */
static int sim_rw(int fd, uint8_t *dst, const uint8_t *src, uint64_t len, uint64_t off)
{
    for (uint64_t done = 0; done < len;) {
        ssize_t k = dst ? pread(fd, dst + done, len - done, (off_t)(off + done))
                        : pwrite(fd, src + done, len - done, (off_t)(off + done));

        if (k <= 0)
            return k < 0 ? -errno : -EIO;
        done += (uint64_t)k;
    }
    return 0;
}

static int sim_read(struct tier_nvme *n, struct req *r)
{
    int rc = sim_rw(n->fd, r->buf, NULL, r->len, r->off);

    if (rc < 0)
        return rc;
    /* the volatile layer over the file, oldest first: later writes win */
    for (const struct ext *e = n->ext; e; e = e->next) {
        uint64_t lo = e->off > r->off ? e->off : r->off;
        uint64_t hi = e->off + e->len < r->off + r->len ? e->off + e->len : r->off + r->len;

        if (lo < hi)
            memcpy(r->buf + (lo - r->off), e->data + (lo - e->off), hi - lo);
    }
    return 0;
}

static int sim_write(struct tier_nvme *n, const struct req *r)
{
    /* the bytes are taken now, at completion: a caller that changed its
     * buffer before the callback would be caught storing the wrong ones */
    struct ext *e = malloc(sizeof(*e) + r->len);

    if (!e)
        return -ENOMEM;
    e->off = r->off;
    e->len = r->len;
    e->seq = ++n->sim_wseq;
    e->next = NULL;
    memcpy(e->data, r->buf, r->len);
    *n->ext_tail = e;
    n->ext_tail = &e->next;
    return 0;
}

/* Write e to the medium (the file). */
static int sim_persist(struct tier_nvme *n, const struct ext *e)
{
    return sim_rw(n->fd, NULL, e->data, e->len, e->off);
}

/* A sync: the writes completed before it was queued become durable. */
static int sim_sync(struct tier_nvme *n, const struct req *r)
{
    struct ext **pp = &n->ext;
    int rc = 0;

    while (*pp) {
        struct ext *e = *pp;

        if (e->seq > r->sim_snap) {
            pp = &e->next;
            continue;
        }
        if (rc == 0)
            rc = sim_persist(n, e);
        *pp = e->next;
        free(e);
    }
    n->ext_tail = pp;
    return rc;
}

unsigned tier_nvme_sim_queued(const struct tier_nvme *n)
{
    unsigned q = 0;

    for (uint32_t i = 0; n->sim && i < n->qd; i++)
        q += n->req[i].op != NVME_OP_FREE && n->req[i].sim_done == 0;
    return q;
}

/* The slot of the k-th queued request, oldest first, or NONE. O(qd * k). */
static uint32_t sim_kth(const struct tier_nvme *n, unsigned k)
{
    uint64_t after = 0;

    for (unsigned j = 0; j <= k; j++) {
        uint32_t best = NONE;

        for (uint32_t i = 0; i < n->qd; i++) {
            const struct req *r = &n->req[i];

            if (r->op == NVME_OP_FREE || r->sim_done || r->sim_seq <= after)
                continue;
            if (best == NONE || r->sim_seq < n->req[best].sim_seq)
                best = i;
        }
        if (best == NONE)
            return NONE;
        if (j == k)
            return best;
        after = n->req[best].sim_seq;
    }
    return NONE;
}

int tier_nvme_sim_complete(struct tier_nvme *n, unsigned k, int err)
{
    uint32_t i = n->sim ? sim_kth(n, k) : NONE;
    struct req *r;
    uint64_t one = 1;
    int rc = err < 0 ? err : 0;

    if (i == NONE)
        return -ENOENT;
    r = &n->req[i];
    if (n->crashed)
        rc = -EIO;
    else if (rc == 0 && r->op == NVME_OP_READ)
        rc = sim_read(n, r);
    else if (rc == 0 && r->op == NVME_OP_WRITE)
        rc = sim_write(n, r);
    else if (rc == 0 && r->op == NVME_OP_SYNC)
        rc = sim_sync(n, r); /* (an ISYNC's file is real: nothing to simulate) */
    r->sim_res = rc < 0 ? rc : (int64_t)r->len;
    r->sim_done = ++n->sim_dseq;
    if (write(n->efd, &one, sizeof(one)) < 0)
        return 0; /* a full counter: reap still finds it */
    return 0;
}

void tier_nvme_sim_crash(struct tier_nvme *n, uint64_t seed)
{
    uint64_t s = seed;

    if (!n->sim)
        return;
    while (n->ext) {
        struct ext *e = n->ext;

        s = s * 6364136223846793005ull + 1442695040888963407ull; /* an LCG: only a coin */
        if (s >> 63)
            (void)sim_persist(n, e);
        n->ext = e->next;
        free(e);
    }
    n->ext_tail = &n->ext;
    n->crashed = true;
}

static int sim_reap(struct tier_nvme *n, unsigned min)
{
    unsigned ran = 0;
    uint64_t v;

    while (read(n->efd, &v, sizeof(v)) == (ssize_t)sizeof(v))
        ;
    for (;;) {
        uint32_t best = NONE;

        for (uint32_t i = 0; i < n->qd; i++) /* the next done, in completion order */
            if (n->req[i].op != NVME_OP_FREE && n->req[i].sim_done &&
                (best == NONE || n->req[i].sim_done < n->req[best].sim_done))
                best = i;
        if (best == NONE) {
            /* someone waits: the oldest queued request completes */
            if (ran >= min || tier_nvme_sim_complete(n, 0, 0) < 0)
                break;
            continue;
        }
        {
            tier_nvme_cb cb = n->req[best].cb;
            void *ctx = n->req[best].ctx;
            int64_t res = n->req[best].sim_res;

            put_slot(n, best); /* before the callback, which may queue into this slot */
            if (cb)
                cb(ctx, res);
            ran++;
        }
    }
    return (int)ran;
}

static void sim_close(struct tier_nvme *n)
{
    while (n->nfree < n->qd)
        if (sim_reap(n, 1) <= 0)
            break;
    while (n->ext) { /* a clean close: the cache reaches the medium */
        struct ext *e = n->ext;

        if (!n->crashed)
            (void)sim_persist(n, e);
        n->ext = e->next;
        free(e);
    }
    close(n->efd);
    close(n->fd);
    free(n->req);
    free(n);
}
