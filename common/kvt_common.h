/* SPDX-License-Identifier: MIT */
/*
 * kvt_common.h - the small jobs that tierd, the tools and the tests all need,
 * written once: the monotonic clock, the size grammar, command-line options
 * checked against a table, temp folders under $TMPDIR, removing a tree,
 * spawning a child with its log, waiting for a private tierd to come up,
 * a free loopback port, growing arrays, and a log line through a callback.
 *
 * Dependency-free (libc only): it knows nothing of libkvtier, the store or
 * Criterion, and never prints or exits. Not part of libkvtier's ABI: it is
 * linked as build/libcommon.a into tierd, the tools and the tests, and
 * wherever the store is (store/ uses its arrays and its log line).
 */
#ifndef KVT_COMMON_H
#define KVT_COMMON_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

/* ---- the clock ---------------------------------------------------------- */

/* CLOCK_MONOTONIC in nanoseconds / milliseconds / seconds (never goes back). */
uint64_t cmn_now_ns(void);
uint64_t cmn_now_ms(void);
double cmn_now_s(void);
/* Sleep ms milliseconds, resumed across signals. */
void cmn_sleep_ms(unsigned ms);

/* ---- sizes -------------------------------------------------------------- */

/* The one size grammar of every option and config key that takes bytes:
 *     digits [ "." digits ] [ K | M | G | T | P ] [ "i" | "iB" | "B" ]
 * units are powers of 1024, either case ("64k", "512M", "8GiB", "1.5T",
 * "4096", "4096B"). A fraction must come out as whole bytes ("1.5K" is 1536,
 * "0.3K" is refused). No sign, no spaces. 0 parses (callers that refuse it
 * say so themselves).
 * Returns 0 with *out set, -EINVAL for text outside the grammar, -ERANGE
 * for a size over 2^63 - 1 bytes; *out untouched on error. */
int cmn_parse_size(const char *s, uint64_t *out);
/* A plain decimal count in [min, max] (digits only: no sign, space, suffix
 * or base prefix): 0 with *out set, -EINVAL for other text, -ERANGE for a
 * number outside the bounds; *out untouched on error. */
int cmn_parse_uint(const char *s, uint64_t min, uint64_t max, uint64_t *out);
/* Why cmn_parse_size refused (rc: its return), for an error message:
 * a static string naming the grammar, e.g. "want bytes or a number with
 * K, M, G, T or P (powers of 1024), e.g. 4096, 512M, 1.5G". */
const char *cmn_size_why(int rc);

/* ---- command-line options ------------------------------------------------ */

/* What an option's value is, checked by cmn_opts_next before the caller
 * sees it. */
enum cmn_opt_kind {
    CMN_OPT_FLAG, /* no value */
    CMN_OPT_TEXT, /* any text: cmn_opts.arg */
    CMN_OPT_UINT, /* a plain decimal count in [min, max] (cmn_parse_uint): .u */
    CMN_OPT_SIZE, /* bytes in the size grammar (cmn_parse_size), at least min: .u */
    CMN_OPT_REAL, /* a decimal number (digits, optional fraction) in [lo, hi]: .d */
};

/* One long option of a command, --name. A table of them ends with a
 * { NULL } entry; CMN_OPTS_MAX entries at most. */
struct cmn_opt {
    const char *name;       /* without the dashes */
    int key;                /* what cmn_opts_next returns for it: > 0, not '?' or ':' */
    enum cmn_opt_kind kind;
    uint64_t min, max;      /* UINT: its bounds; SIZE: its least (no most) */
    double lo, hi;          /* REAL: its bounds */
    bool letter;            /* -key too (key a letter), e.g. -h for --help */
};

#define CMN_OPTS_MAX 48
#define CMN_OPTS_BAD '?' /* cmn_opts_next: a bad option, cmn_opts.err says why */

/* A walk over argv's options against one table. */
struct cmn_opts {
    const struct cmn_opt *tab; /* the table (borrowed: it outlives the walk) */
    const char *arg;           /* the value of the option just returned; NULL for a flag */
    uint64_t u;                /* its value, UINT and SIZE */
    double d;                  /* its value, REAL */
    char err[192];             /* why CMN_OPTS_BAD: "unknown option '--x'", "option
                                  '--x' needs a value", "--x '0': want a whole number
                                  from 1 to 64" (no program name, no newline) */
};

/* Start a walk of argv's options against tab (resets getopt wholly: optind = 0). */
void cmn_opts_init(struct cmn_opts *p, const struct cmn_opt *tab);
/* The next option of argv (getopt_long's rules: options and operands may
 * mix, "--" ends the options): its key, with its value checked and stored
 * by its kind; -1 when the options are over (optind indexes the first
 * operand); CMN_OPTS_BAD for an unknown option, a missing value or a value
 * outside its grammar or bounds, p->err saying which. Never prints. Uses
 * getopt_long's globals: one walk at a time per process. */
int cmn_opts_next(struct cmn_opts *p, int argc, char *const argv[]);

/* ---- folders ------------------------------------------------------------ */

/* A fresh private folder (mode 0700) named <$TMPDIR or /tmp>/<tag>-XXXXXX
 * into buf[cap]. Returns 0, -ENAMETOOLONG, or mkdtemp's -errno. */
int cmn_tmpdir(const char *tag, char *buf, size_t cap);
/* A fresh file (mode 0600) named <$TMPDIR or /tmp>/<tag>-XXXXXX into
 * buf[cap], open for reading and writing (O_CLOEXEC): the fd, or -errno. */
int cmn_tmpfile(const char *tag, char *buf, size_t cap);
/* Remove path and everything below it (nftw, links not followed: a link
 * is removed, never what it points at). A path that does not exist is
 * not an error. Returns 0, or the first failure's -errno (the walk goes
 * on past it, removing what it can). */
int cmn_rmtree(const char *path);

/* ---- children ----------------------------------------------------------- */

enum {
    CMN_SPAWN_STDOUT = 0x1,    /* stdout into the log too (else inherited) */
    CMN_SPAWN_TRUNCATE = 0x2,  /* start the log afresh (else appended) */
    CMN_SPAWN_NULL_STDIN = 0x4, /* stdin from /dev/null */
    CMN_SPAWN_TERM = 0x8,      /* SIGTERM, not SIGKILL, when the parent dies */
};

/* Fork and exec argv (NULL-terminated; argv[0] searched in PATH when it has
 * no '/'), stderr into log (NULL: inherited, as stdout then is), flags
 * CMN_SPAWN_*. The child dies with its parent (PR_SET_PDEATHSIG), so a
 * test or tool that dies leaves nothing behind; a child that cannot exec
 * exits 127 with a line on its stderr. Returns the pid or -errno. */
pid_t cmn_spawn(const char *const *argv, const char *log, unsigned flags);
/* Reap pid (waiting as long as it runs): its exit status, 128+signal for
 * one a signal ended, -errno when it cannot be waited for. */
int cmn_wait(pid_t pid);
/* Reap pid if it has exited: true with its status in *st (as cmn_wait);
 * false while it runs. */
bool cmn_exited(pid_t pid, int *st);
/* Reap pid within timeout_ms, else SIGKILL and reap it: its exit status
 * (as cmn_wait), or -ETIMEDOUT when it had to be killed. */
int cmn_wait_ms(pid_t pid, unsigned timeout_ms);
/* SIGTERM pid, then cmn_wait_ms. */
int cmn_stop(pid_t pid, unsigned timeout_ms);

/* Wait for a tierd just spawned (pid) to answer on its socket: poll
 * ready(sock, arg) every 2 ms (0: it answered; what "answered" means is
 * the caller's, a client's HELLO most often) for up to timeout_ms.
 * Returns 0 once ready; -ECHILD when tierd exited first (reaped, its
 * status in *status when not NULL); -ETIMEDOUT when time ran out (tierd
 * left running: the caller stops it). */
int cmn_tierd_wait(pid_t pid, const char *sock, int (*ready)(const char *sock, void *arg),
                   void *arg, unsigned timeout_ms, int *status);

/* A TCP port on 127.0.0.1 that nothing is bound to right now (the kernel's
 * pick), or -errno. Racy by nature: another process may take it before the
 * caller binds it, so callers that can retry should. */
int cmn_free_port(void);

/* ---- arrays ------------------------------------------------------------- */

/* Room for need elements of size bytes in the caller's array: arrp is the
 * address of its T * (NULL with *cap 0 before the first call), *cap its
 * length in elements. When *cap < need, the array grows by doubling (from
 * first when it has none yet) to the first length that holds need, the new
 * elements zeroed, and *arrp and *cap are updated. Returns 0 (also when it
 * had room), or -ENOMEM (no memory, or the size overflows: *arrp and *cap
 * are then untouched and the caller still owns the array). */
int cmn_grow(void *arrp, size_t *cap, size_t need, size_t size, size_t first);
/* cmn_grow with the element size taken from the array itself. */
#define CMN_GROW(arrp, cap, need, first) cmn_grow((arrp), (cap), (need), sizeof(**(arrp)), (first))
/* lo doubled until it is at least want or reaches hi (lo and hi powers of
 * two, lo <= hi): a power-of-two table size for want entries. */
uint32_t cmn_pow2_fit(uint32_t want, uint32_t lo, uint32_t hi);

/* ---- log lines ---------------------------------------------------------- */

/* Format one line (cut at 511 bytes) and hand it to log(ctx, line); nothing
 * when log is NULL. For modules that report through a callback. */
void cmn_logf(void (*log)(void *ctx, const char *msg), void *ctx, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

#endif /* KVT_COMMON_H */
