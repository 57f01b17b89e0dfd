/* SPDX-License-Identifier: MIT */
/*
 * t.h - shared test helpers: a private tierd per test (own socket and data
 * folder under a temp dir), clients, deterministic keys and payloads.
 *
 * KVT_TEST_BIN names the folder with tierd/tierctl (build/ or build-san/).
 * KVT_TEST_ATTACH=<socket> makes tests use a tierd already running (e.g.
 * under gdb) instead of starting one.
 */
#ifndef T_H
#define T_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "kv_layout.h"
#include "kvtier.h"

struct t_tierd {
    pid_t pid;          /* 0 when attached to an outside daemon */
    char dir[256];      /* temp folder: socket + data */
    char sock[320];
    char log[320];      /* its stderr (appended across restarts), unless
                           KVT_TEST_VERBOSE sends it to the test's */
};

/* Start tierd with extra arguments (NULL-terminated list, may be NULL) and
 * wait until it accepts connections. Fails the test on error. */
void t_tierd_start(struct t_tierd *d, const char *const *args);
/* Start a tierd again on the same folder (after t_tierd_kill). */
void t_tierd_restart(struct t_tierd *d, const char *const *args);
/* tierd's arguments for a small warm tier over a disk: 32 MiB of warm,
 * moved down from 75 % to 50 %, 256 MiB of cold (the disk suites'). */
extern const char *const t_small_warm[];
/* Send sig, wait, keep the folder; returns the exit status (128+signal). */
int t_tierd_kill(struct t_tierd *d, int sig);
/* SIGTERM it, wait, and assert a clean exit (status 0). Removes the dir. */
void t_tierd_stop(struct t_tierd *d);
/* With KVT_TEST_VALGRIND set, the start of an argv that runs a program
 * under memcheck (exit 9 on any error or leak; supp holds the suppressions
 * option and must outlive argv); else nothing. Returns the words added (at
 * most 6). */
int t_memcheck_argv(const char **argv, char *supp, size_t cap);

/* The argv of the built program prog (t_bin) with args (NULL-terminated,
 * at most 72), behind t_memcheck_argv's words when memcheck: a->argv, whose
 * strings a holds. */
struct t_argv {
    const char *argv[80];
    char bin[512], supp[600];
};
const char *const *t_prog_argv(struct t_argv *a, const char *prog, const char *const *args,
                               int memcheck);

/* Run the built program prog (t_bin) with args (NULL-terminated), under
 * memcheck when memcheck and KVT_TEST_VALGRIND are set. Its stdout and
 * stderr go to *out and *err (malloc'd, NUL-terminated; either pointer may
 * be NULL to drop that stream). Returns its exit status (128+signal; 127:
 * it could not be run). Fails the test if it cannot fork. */
int t_run(const char *prog, const char *const *args, int memcheck, char **out, char **err);

/* Run cmd through sh: its stdout (stderr too where cmd says 2>&1) into *out
 * (malloc'd, NUL-terminated); its exit status (128+signal). */
int t_sh(const char *cmd, char **out);
/* t_sh of a command that must succeed (else the test fails, showing its
 * output): the output (malloc'd). */
char *t_sh_ok(const char *cmd);
/* t_sh_ok of the command fmt formats (printf). */
__attribute__((format(printf, 1, 2))) char *t_sh_okf(const char *fmt, ...);

/* Run tierd (under memcheck when the suite is) in folder dir (its socket
 * and data there) with extra args (NULL-terminated; later options win)
 * until it exits: its exit status, and its stderr into err. One still
 * running after 10 s (60 s under memcheck) is killed: 124. */
int t_tierd_exit(const char *dir, const char *const *extra, char *err, size_t cap);

/* Path of a built program (tierd, tierctl) for this flavour. */
const char *t_bin(const char *name, char *buf, size_t cap);

kvt_client *t_connect(const struct t_tierd *d);
/* The test model: one namespace per block size. */
kvt_model t_model(uint64_t block_bytes);
/* Open a test namespace of block_bytes blocks. */
kvt_ns *t_ns(kvt_client *c, uint64_t block_bytes);

/* A chain of n blocks (n <= KVT_BATCH_MAX) of blk bytes under keys k,
 * block i's payload t_fill'ed from seed0 + i. t_put_chain reserves, fills
 * the slots it got and commits with flags (KVT_COMMIT_*): the commit's
 * return, or the reservation's error. t_get_chain gets into bufs (n buffers
 * of blk bytes, poisoned first) and checks every byte of every block
 * served, failing the test on a wrong one: the hits, or kvt_get's error. */
int t_put_chain(kvt_ns *ns, const kvt_key *k, size_t n, size_t blk, uint64_t seed0,
                unsigned flags);
int t_get_chain(kvt_ns *ns, const kvt_key *k, size_t n, size_t blk, uint64_t seed0,
                void *const *bufs);
/* The same under the keys t_keys(key_seed) makes. */
int t_put_seeded(kvt_ns *ns, uint64_t key_seed, size_t n, size_t blk, uint64_t seed0,
                 unsigned flags);
int t_get_seeded(kvt_ns *ns, uint64_t key_seed, size_t n, size_t blk, uint64_t seed0,
                 void *const *bufs);

/* An engine's paged cache in host memory, vLLM's flash-attention layout:
 * per layer [2 (K, V), nb blocks, bs tokens, h heads, d dims] of elem-byte
 * elements, each layer malloc'd; l describes it (kv_layout.h). */
#define T_CACHE_LAYERS_MAX 8
struct t_cache {
    void *layer[T_CACHE_LAYERS_MAX];
    struct kvk_layout l;
    size_t layer_bytes, page_bytes; /* one layer; one (kv, block) page of a layer */
};
/* Allocate it, layer i filled from seed + i (t_fill), or zeroed for seed 0. */
void t_cache_init(struct t_cache *c, uint32_t layers, uint32_t nb, uint32_t bs, uint32_t h,
                  uint32_t d, uint32_t elem, uint64_t seed);
void t_cache_free(struct t_cache *c);
/* The page of (layer, kv, block): page_bytes bytes. */
const uint8_t *t_cache_page(const struct t_cache *c, int layer, int kv, int64_t block);

/* n distinct keys from a seed (keys of different seeds differ). */
void t_keys(kvt_key *k, size_t n, uint64_t seed);
/* Fill / check a payload derived from (seed, len). t_check returns the
 * offset of the first wrong byte, or -1 when all are right. */
void t_fill(void *buf, size_t len, uint64_t seed);
long t_check(const void *buf, size_t len, uint64_t seed);

/* The description of one of data/configs/ (name: its file), parsed; fails
 * the test if it does not parse. */
struct kvt_model_desc t_model_desc(const char *name);

struct tier;
struct tier_cold;
struct tier_hot;
struct tier_ns;
/* Namespace id of store t with blocks of block_bytes (tier_ns_open: opened
 * on first use, the same object after); fails the test on an error. */
struct tier_ns *t_tns(struct tier *t, uint32_t id, uint64_t block_bytes);
/* Namespace id of store t, open already (tier_ns_find): for the calls that
 * name no block size. Fails the test if it is not open. */
struct tier_ns *t_tns_of(struct tier *t, uint32_t id);
/* A store over the simulated disk (tier_nvme.h): complete every queued
 * request and deliver every completion, the hot tier's (h, may be NULL)
 * too, until nothing is in flight. Fails the test if it never settles. */
void t_store_settle(struct tier *t, struct tier_cold *c, struct tier_hot *h);
/* Close a test's store in the order it needs (the hot tier's copies, then
 * the disk, then the store), after settling it, and remove its folder. */
void t_store_close(struct tier *t, struct tier_cold *c, struct tier_hot *h, const char *dir);

/* len bytes aligned for O_DIRECT (4096), filled with 0xa5 (never zeros a
 * test could mistake for data); free() them. */
void *t_abuf(size_t len);

/* One tier_nvme request's outcome, as t_io_done (its completion callback,
 * ctx: the struct t_io) records it. */
struct t_io {
    int calls;   /* times the callback ran: must end at exactly 1 */
    int64_t res; /* what it got */
};
void t_io_done(void *ctx, int64_t res);
struct tier_nvme;
/* Submit a tier_nvme's queued requests and reap until none is in flight;
 * fails the test on an error. */
void t_nvme_drain(struct tier_nvme *n);

/* The crash tests' witness: a child running fn(arg, wfd) (it must _exit)
 * that writes the number of each block or chain acknowledged to it, with
 * t_ack_send, to the pipe whose read end the parent keeps. */
struct t_acks {
    pid_t pid; /* the child */
    int rfd;   /* the pipe's read end */
};
void t_acks_open(struct t_acks *a, void (*fn)(const char *arg, int wfd), const char *arg);
/* In the child: report number i acknowledged. 0, or -1 when the pipe is
 * gone. */
int t_ack_send(int wfd, uint64_t i);
/* Read acks, up to max of them (max < 0: until the child's end), setting
 * acked[i] for each (i < cap, else the test fails): how many were read. */
long t_acks_read(struct t_acks *a, uint8_t *acked, size_t cap, long max);
/* Close the read end and reap the child. */
void t_acks_close(struct t_acks *a);

/* Wait for a child and return its exit status (or 128+signal). */
int t_wait(pid_t pid);

/* A fresh temp folder <$TMPDIR or /tmp>/<tag>-XXXXXX into buf[cap]; fails
 * the test when none can be made. */
void t_tmpdir(const char *tag, char *buf, size_t cap);
/* Remove path and all below it (cmn_rmtree, no shell); fails the test on
 * an error. */
void t_rmtree(const char *path);

/* Two tenants of 8 MiB of warm each: alice (root, which runs the tests,
 * and uid T_ALICE) and bob (T_BOB); T_STRANGER is in neither. */
#define T_ALICE 40001
#define T_BOB 40002
#define T_STRANGER 40003
extern const char *const t_config_two;

/* A tenants config (tierd --config) of text in a fresh temp file, mode
 * 0644; returns its path (static: until the next call). */
const char *t_config(const char *text);
/* Run fn(sock, arg) in a child as uid (gid = uid, no other groups; the
 * suite must run as root); its return is the child's exit status. */
int t_as_user(uid_t uid, int (*fn)(const char *sock, void *arg), const char *sock, void *arg);
/* Put 4 blocks of blk bytes under k (payloads t_fill'ed from seed0 + i,
 * in buf, 4 * blk bytes) with kvt_put, read them back with kvt_get into
 * buf zeroed and check every byte; no assertion, for t_as_user children:
 * 0, or 1 when the put, 2 the get, 3 a byte failed. */
int t_put_get4(kvt_ns *ns, const kvt_key *k, uint8_t *buf, size_t blk, uint64_t seed0);
/* A t_as_user function: connect to sock, put 4 blocks of T_USER_BLK (keys
 * of seed 1, payloads of seeds 100..103) and read them back, every byte
 * checked. 0, 9 when refused with -EUSERS, else 10..13 for the step that
 * failed (connect, put, get, check). */
#define T_USER_BLK (256u << 10)
int t_user_puts(const char *sock, void *arg);

#endif /* T_H */
