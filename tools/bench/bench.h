/* SPDX-License-Identifier: MIT */
/*
 * bench.h - tierbench's shared harness (harness.c, fio.c), which every
 * figure file (put_get.c, lookup.c, holds.c, hash.c, cold.c, prefetch.c,
 * restart.c, hybrid.c, remote.c) uses: the options, the report lines, the
 * private tierd and redis-server, timed rounds, and fio. main.c runs the
 * figures. Not a library: one program's internal header.
 */
#ifndef BENCH_H
#define BENCH_H

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

#include <hiredis/hiredis.h>

#include "kvt_common.h"
#include "kvtier.h"

#define MIB (1024ull * 1024ull)
#define GIB (1024ull * MIB)

/* ---- options and run-wide state (harness.c) ----------------------------- */

enum {
    BENCH_GRP_PUT = 0x1,    /* figures 1 and 2: put+get vs memcpy and redis */
    BENCH_GRP_LOOKUP = 0x2, /* figure 3a: lookup through tierd */
    BENCH_GRP_INPROC = 0x4, /* figures 3b, 5 and 5b: in-process store */
    BENCH_GRP_HASH = 0x8,   /* figure 4: prompt hashing */
    BENCH_GRP_COLD = 0x10,  /* figure 6: cold-tier writes and reads vs fio */
    BENCH_GRP_PREFETCH = 0x20, /* figure 7: get of a cold chain with / without prefetch */
    BENCH_GRP_RESTART = 0x40,  /* figure 8: start-up over a cold index of 1 M blocks */
    BENCH_GRP_HYBRID = 0x80,   /* figure 9: bytes per token of hybrid models, by layer group */
    BENCH_GRP_REMOTE = 0x100,  /* figure 10: the remote tier vs redis-benchmark, Redis Cluster */
    BENCH_GRP_ALL = 0x1ff,
};

struct bench_opts {
    unsigned groups;     /* BENCH_GRP_* to run */
    bool redis;          /* run the redis comparison */
    int rounds;          /* timed rounds per figure; the median is reported */
    uint64_t round_ns;   /* minimum length of one timed round */
    int hash_runs;       /* timed runs of the hash figure */
    const char *pool_2m; /* --warm-bytes of the 2 MiB put/get tierd */
    const char *pool_64k;
    const char *pool_lookup;
    size_t lookup_blocks; /* blocks in the lookup index (1 M) */
    uint64_t cold_bytes;  /* bytes per round of the cold figures (512 MiB) */
    int cold_rounds;      /* rounds of the cold figures, tierd and fio interleaved */
    int prefetch_trials;  /* chains got with prefetch, and as many without */
    unsigned work_us;     /* simulated engine work between lookup and get */
    size_t restart_blocks; /* blocks in the cold index of the restart figure */
};
/* The options (main.c's parse_args sets them; defaults in harness.c). */
extern struct bench_opts bench_opt;
/* The private folder for sockets, data and logs (made by bench_setup). */
extern char bench_tmpdir[128];

/* Make bench_tmpdir (under $TMPDIR, short enough for socket paths), and
 * stop every child and remove it at exit or on a signal. 0 or -errno. */
int bench_setup(void);
/* The closing lines (time taken, targets met); the exit status: 1 when a
 * figure could not be measured, else 0. */
int bench_finish(uint64_t t0_ns);

/* ---- reports ------------------------------------------------------------ */

/* Print one figure ("bench: <name> <value> <unit> target <op> <target>")
 * and count it, met or missed. target is the number as printed; the
 * comparison uses its value. */
void bench_report(const char *name, double v, const char *vfmt, const char *unit,
                  const char *op, const char *target);
/* A figure that could not be measured: counted as missed, and an error
 * (err: a negative errno or kvtier error, 0 for none). */
void bench_fail(const char *name, const char *why, int err);
/* The same for an error of a program or system call, not of libkvtier: its
 * errno's own message (kvt_strerror reads -ENOENT as a missing tierd). */
void bench_fail_sys(const char *name, const char *why, int err);

/* ---- small helpers ------------------------------------------------------ */

/* splitmix64: a fast, fixed-seed generator for keys, tokens and payloads. */
uint64_t bench_rng(uint64_t *s);
/* n keys from the generator. */
void bench_rand_keys(uint64_t *s, kvt_key *k, size_t n);
/* Median of v[0..n); sorts v in place. */
double bench_median(double *v, int n);
/* A buffer of bytes whose pages are already faulted in and hold
 * pseudo-random data (so nothing is a shared zero page). NULL on failure;
 * freed with bench_free_faulted (NULL is fine). */
void *bench_alloc_faulted(size_t bytes, uint64_t seed);
void bench_free_faulted(void *p, size_t bytes);
/* A block size as a figure's label: "2MiB", "256KiB". */
const char *bench_size_label(size_t bs, char *buf, size_t cap);

/* ---- children (tracked: stopped at exit or on a signal) ------------------ */

/* Spawn argv (cmn_spawn; PATH searched) with stdout and stderr into
 * log_path, stdin from /dev/null; SIGTERM when tierbench dies. The pid
 * or -errno. */
pid_t bench_spawn(char *const argv[], const char *log_path);
/* SIGTERM the child and reap it, SIGKILL after 10 s: its wait status, or
 * -1 if it had to be killed. */
int bench_stop_child(pid_t pid);
/* True while the child runs; reaps it (wait status in *st) if it exited. */
bool bench_child_alive(pid_t pid, int *st);
/* The last lines of a child's log as context lines ("# what: ..."). */
void bench_log_tail(const char *what, const char *path);
/* The first line of a log that holds needle as a context line. */
void bench_log_line(const char *path, const char *needle);

/* ---- a private tierd ---------------------------------------------------- */

struct bench_tierd {
    pid_t pid;
    char sock[PATH_MAX];
    char log[PATH_MAX];
    char data[PATH_MAX];
    double ready_s; /* from fork until kvt_connect succeeded */
    kvt_client *c;  /* connected client, owned */
};

/* Start $KVT_TEST_BIN/tierd with its own socket and data folder named by
 * tag (<bench_tmpdir>/<tag>.data, kept between starts: a second start with
 * the same tag is a restart on the same data), --warm-bytes warm, plus the
 * NULL-terminated extra arguments, and connect to it, for up to timeout_s.
 * Returns 0 or a negative error; prints why. */
int bench_tierd_start_ex(struct bench_tierd *d, const char *tag, const char *warm, bool no_mlock,
                         const char *const *extra, unsigned timeout_s);
/* bench_tierd_start_ex with --no-flush and 10 s: the figures that predate
 * the cold tier measure the warm path. */
int bench_tierd_start(struct bench_tierd *d, const char *tag, const char *warm, bool no_mlock);
/* Close the client, SIGTERM tierd and reap it (a warning if not clean). */
void bench_tierd_stop(struct bench_tierd *d);
/* A namespace of the bench's test model with block_bytes blocks. */
int bench_ns_open(kvt_client *c, const char *model, uint64_t block_bytes, kvt_ns **ns);

/* ---- a private redis-server --------------------------------------------- */

struct bench_redis {
    pid_t pid;
    char log[PATH_MAX];
    redisContext *rc;
};

/* Ping once; true on PONG. */
bool bench_redis_ping(redisContext *rc);
/* A redis-server on a free loopback port, connected (no timeout). 0 or a
 * negative error; prints why. */
int bench_redis_start(struct bench_redis *s);
void bench_redis_stop(struct bench_redis *s);

/* ---- timed rounds and the transport floor ------------------------------- */

/* One unit of work; returns 0 or a negative error. */
typedef int (*bench_iter_fn)(void *arg);
/* Run fn until at least bench_opt.round_ns have passed; the seconds per
 * call through *per_iter, or fn's error. */
int bench_timed_round(bench_iter_fn fn, void *arg, double *per_iter);
/* An echo process at the other end of a SOCK_SEQPACKET socketpair that
 * answers every message with rep_bytes bytes: what any request/reply
 * between two processes costs here. The child's pid, *sock our end. */
pid_t bench_echo_open(size_t rep_bytes, int *sock);
void bench_echo_close(int sock, pid_t pid);

/* ---- fio (fio.c) --------------------------------------------------------- */

/* One fio run on <bench_tmpdir>/fio.dat, the same shape as tierd's cold I/O. */
struct bench_fio_job {
    const char *rw;  /* "write" or "read" */
    size_t bs;
    uint64_t size;
    unsigned qd;
    bool fdatasync;  /* --fdatasync=qd: a sync after every qd writes */
    bool lockstep;   /* submit qd, wait for all qd, repeat */
};
/* The command line of the last fio run. */
extern char bench_fio_cmd[1024];
/* Bytes per second that fio reports for the job (its "bw_bytes"), and when
 * syncs is not NULL the number of fdatasyncs it issued. 0 or an error. */
int bench_fio_run(const struct bench_fio_job *j, double *bw, double *syncs);

/* ---- durable puts and checked gets (cold.c, used by prefetch.c too) ----- */

#define CQD 32 /* blocks per batch = tierd --cold-qd = fio --iodepth */

/* 0 when slot holds block g of the pattern src (its stamp; the whole
 * block when full), else -EBADMSG. */
int bench_check_block(const void *slot, const uint8_t *src, size_t bs, size_t g, bool full);
/* 0 when r == n; else *what_out = what and an error. */
int bench_want_n(const char **what_out, const char *what, int r, int n);
/* Put keys[0..n) (blocks g0...) as one durable batch: reserve, fill,
 * commit with KVT_COMMIT_DURABLE (returns once written, synced, indexed). */
int bench_put_durable(kvt_ns *ns, const kvt_key *parent, const kvt_key *keys, size_t n,
                      const uint8_t *src, size_t nsrc, size_t bs, size_t g0, const char **what,
                      uint64_t *fill_ns);
/* Get all n keys, asking again for what a short answer left out. */
int bench_get_all(kvt_ns *ns, const kvt_key *keys, size_t n, const void **slots,
                  kvt_lease *leases, const char **what, uint64_t *calls, uint64_t *shorts);

/* ---- the figures, one file each ------------------------------------------ */

void bench_put_get(size_t bs, const char *pool, bool with_redis); /* 1, 2: put_get.c */
void bench_lookups(unsigned groups);                             /* 3, 5: lookup.c */
void bench_holds(void);                                          /* 5b: holds.c */
void bench_hash(void);                                           /* 4: hash.c */
void bench_cold(size_t bs);                                      /* 6: cold.c */
void bench_prefetch(void);                                       /* 7: prefetch.c */
void bench_restart(void);                                        /* 8: restart.c */
void bench_hybrid(void);                                         /* 9: hybrid.c */
void bench_remote(void);                                         /* 10: remote.c */

#endif /* BENCH_H */
