/* SPDX-License-Identifier: MIT */
/*
 * tierctl.c - the operator's command line for kvtier.
 *
 * `hash` prints the block keys of a token sequence (no daemon needed);
 * `stats` prints tierd's counters as a table or as JSON; `top` refreshes a
 * live view of them; `health` answers for scripts. Exit codes come from
 * sysexits.h.
 */
#include <ctype.h>
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <time.h>
#include <unistd.h>

#include "kvt_common.h"
#include "kvtier.h"

static const char usage_text[] =
    "usage: tierctl <command> [options]\n"
    "\n"
    "commands:\n"
    "  hash --seed S [--block-tokens N] [--salt S] [--lora NAME --lora-path P]\n"
    "       [--untagged]  < token-ids\n"
    "      Read whitespace-separated decimal token ids from stdin and print the\n"
    "      key of each full block, one lower-case hex key per line (vLLM's\n"
    "      sha256_cbor block hashes). --seed defaults to $PYTHONHASHSEED,\n"
    "      --block-tokens to 16. A partial last block gets no key. Extra keys\n"
    "      (salt, LoRA) are tagged as vLLM 0.32 and later hash them; --untagged\n"
    "      for earlier vLLM.\n"
    "  stats [--json] [--socket PATH]\n"
    "      Print tierd's counters, as a table or as one JSON object. PATH\n"
    "      defaults to $KVTIER_SOCKET, else " KVT_DEFAULT_SOCKET ".\n"
    "  top [--interval SEC] [--count N] [--socket PATH]\n"
    "      A live view, refreshed every SEC seconds (default 1): request and\n"
    "      hit rates, each tier's occupancy and traffic, errors. Runs until\n"
    "      interrupted, or N refreshes.\n"
    "  health [--socket PATH]\n"
    "      Exit 0 and print one line when tierd answers; 69 when it does not.\n"
    "  namespaces [--json] [--socket PATH]\n"
    "      Each namespace: model, block size, lookups, hit rate, tokens saved,\n"
    "      and its missed keys by cause (never stored, dropped, evicted,\n"
    "      checksum, i/o, removed, aborted, being written, broken chain).\n"
    "  why KEY [--socket PATH]\n"
    "      One key's story (64 hex digits, as `tierctl hash` prints): where it\n"
    "      is, or the last thing that happened to it, in each namespace.\n"
    "  flush [--timeout SEC] [--socket PATH]\n"
    "      Write every block in warm that is not on disk yet to the cold tier\n"
    "      and wait until it is durable (default: up to 600 s).\n"
    "  evict --ns ID [--socket PATH]\n"
    "      Remove namespace ID (see `namespaces`) from every tier and from the\n"
    "      disk, e.g. after a model's weights changed under the same name.\n"
    "\n"
    "exit status: 0 ok, 64 usage, 65 bad input (token ids, key, namespace),\n"
    "69 tierd unreachable, 70 request refused, 71 out of memory, 74 i/o error,\n"
    "75 busy (retry), 76 protocol error, 77 tierd does not admit this user (no\n"
    "tenant of its config names the uid or primary gid).\n";

static int usage(void)
{
    fputs(usage_text, stderr);
    return EX_USAGE;
}

/* Report a refused option of subcommand cmd (p->err says why); returns
 * EX_USAGE. */
static int bad_option(const char *cmd, const struct cmn_opts *p)
{
    fprintf(stderr, "tierctl %s: %s\n", cmd, p->err);
    return p->arg ? EX_USAGE : usage(); /* a bad value: the line says it all */
}

/* The options every operator command may take. */
#define OPT_SOCKET { "socket", 's', CMN_OPT_TEXT, 0, 0, 0, 0, false }
#define OPT_HELP { "help", 'h', CMN_OPT_FLAG, 0, 0, 0, 0, true }

/* ---- hash ------------------------------------------------------------ */

/* A growable array of token ids. */
struct tokvec {
    uint32_t *v;
    size_t n, cap;
};

static int tokvec_push(struct tokvec *t, uint32_t id)
{
    if (CMN_GROW(&t->v, &t->cap, t->n + 1, 4096) < 0)
        return -ENOMEM;
    t->v[t->n++] = id;
    return 0;
}

/*
 * Read token ids from f into t. A word is a run of non-space characters; it
 * must be a decimal number no larger than UINT32_MAX (no sign, no 0x).
 * Returns 0, or a sysexits code after printing why.
 */
static int read_tokens(FILE *f, struct tokvec *t)
{
    char word[32];   /* the current word as typed, for messages (truncated) */
    size_t wlen = 0; /* characters in the current word */
    uint64_t val = 0;
    int bad = 0;     /* the current word is not a valid id */
    int c;

    do {
        c = getc(f);
        if (c != EOF && c != ' ' && c != '\t' && c != '\n' && c != '\r' && c != '\v' &&
            c != '\f') {
            if (wlen < sizeof(word) - 1)
                word[wlen] = (char)c;
            wlen++;
            if (c < '0' || c > '9')
                bad = 1;
            else if (!bad && (val = val * 10 + (uint64_t)(c - '0')) > UINT32_MAX)
                bad = 2;
            continue;
        }
        if (wlen == 0)
            continue;
        word[wlen < sizeof(word) ? wlen : sizeof(word) - 1] = '\0';
        if (bad) {
            fprintf(stderr, "tierctl hash: token %zu: '%s%s' is %s\n", t->n + 1, word,
                    wlen >= sizeof(word) ? "..." : "",
                    bad == 1 ? "not a decimal token id" : "larger than 4294967295");
            return EX_DATAERR;
        }
        if (tokvec_push(t, (uint32_t)val) < 0) {
            fprintf(stderr, "tierctl hash: out of memory after %zu tokens\n", t->n);
            return EX_OSERR;
        }
        wlen = 0;
        val = 0;
    } while (c != EOF);
    if (ferror(f)) {
        fprintf(stderr, "tierctl hash: reading stdin: %s\n", strerror(errno));
        return EX_IOERR;
    }
    return 0;
}

/* Hash the tokens and print one hex key per full block. */
static int print_keys(const kvt_hash_opts *o, const struct tokvec *t)
{
    size_t n = t->n / o->block_tokens;
    kvt_key *keys = malloc((n ? n : 1) * sizeof(*keys));
    char hex[2 * KVT_KEY_BYTES + 1];
    ssize_t got;

    if (!keys) {
        fprintf(stderr, "tierctl hash: out of memory for %zu keys\n", n);
        return EX_OSERR;
    }
    got = kvt_hash_prompt(o, t->v, t->n, keys);
    if (got < 0) {
        fprintf(stderr, "tierctl hash: %s\n", kvt_strerror((int)got));
        free(keys);
        return got == -EINVAL ? EX_USAGE : EX_SOFTWARE;
    }
    for (ssize_t i = 0; i < got; i++)
        printf("%s\n", kvt_key_hex(&keys[i], hex));
    free(keys);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tierctl hash: writing stdout: %s\n", strerror(errno));
        return EX_IOERR;
    }
    return 0;
}

static int cmd_hash(int argc, char *argv[])
{
    static const struct cmn_opt tab[] = {
        { "seed", 'S', CMN_OPT_TEXT, 0, 0, 0, 0, false },
        { "block-tokens", 'b', CMN_OPT_UINT, 1, UINT32_MAX, 0, 0, false },
        { "salt", 'a', CMN_OPT_TEXT, 0, 0, 0, 0, false },
        { "lora", 'l', CMN_OPT_TEXT, 0, 0, 0, 0, false },
        { "lora-path", 'p', CMN_OPT_TEXT, 0, 0, 0, 0, false },
        { "untagged", 'u', CMN_OPT_FLAG, 0, 0, 0, 0, false },
        OPT_HELP,
        { NULL },
    };
    kvt_hash_opts o = {.block_tokens = 16, .seed = getenv("PYTHONHASHSEED")};
    struct tokvec t = {NULL, 0, 0};
    struct cmn_opts p;
    int opt, rc;

    cmn_opts_init(&p, tab);
    while ((opt = cmn_opts_next(&p, argc, argv)) != -1) {
        switch (opt) {
        case 'S':
            o.seed = p.arg;
            break;
        case 'b':
            o.block_tokens = (uint32_t)p.u;
            break;
        case 'a':
            o.cache_salt = p.arg;
            break;
        case 'l':
            o.lora_name = p.arg;
            break;
        case 'p':
            o.lora_path = p.arg;
            break;
        case 'u':
            o.extra_format = KVT_EXTRA_UNTAGGED;
            break;
        case 'h':
            return usage();
        default:
            return bad_option("hash", &p);
        }
    }
    if (optind < argc) {
        fprintf(stderr, "tierctl hash: unexpected argument '%s' (tokens go to stdin)\n",
                argv[optind]);
        return usage();
    }
    if (!o.seed) {
        fprintf(stderr, "tierctl hash: no --seed given and PYTHONHASHSEED is not set\n");
        return usage();
    }
    if (o.lora_name && !o.lora_path && o.extra_format == KVT_EXTRA_TAGGED) {
        fprintf(stderr, "tierctl hash: --lora needs --lora-path (vLLM hashes the adapter's "
                        "path too; --untagged for vLLM before 0.32)\n");
        return usage();
    }
    rc = read_tokens(stdin, &t);
    if (rc == 0)
        rc = print_keys(&o, &t);
    free(t.v);
    return rc;
}

/* ---- stats ----------------------------------------------------------- */

static const char *const tier_names[KVT_TIER_COUNT] = {
    [KVT_TIER_HOT] = "hot", [KVT_TIER_WARM] = "warm", [KVT_TIER_COLD] = "cold",
};

/* Human-readable byte count with IEC units into buf. Returns buf. */
static const char *fmt_bytes(uint64_t b, char buf[16])
{
    static const char *const unit[] = {"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
    double v = (double)b;
    int u = 0;

    while (v >= 1024.0 && u < 6) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, 16, "%" PRIu64 " B", b);
    else
        snprintf(buf, 16, "%.1f %s", v, unit[u]);
    return buf;
}

/* "part/whole" as a percentage into buf, "-" when whole is 0. */
static const char *fmt_pct(uint64_t part, uint64_t whole, char buf[16])
{
    if (whole == 0)
        snprintf(buf, 16, "-");
    else
        snprintf(buf, 16, "%.1f%%", 100.0 * (double)part / (double)whole);
    return buf;
}

/* The value of the counter named key of kvt_stats_list.h's list (a STORE or
 * TIERD one) into *v; false when there is none. O(list): a few per table. */
#define BY_NAME_STORE(name)                                                                \
    if (!strcmp(key, #name)) {                                                             \
        *v = s->name;                                                                      \
        return true;                                                                       \
    }
#define BY_NAME_TIERD(name) BY_NAME_STORE(name)
#define BY_NAME_TIERS(name)
#define BY_NAME(src, name, type, metric, help) BY_NAME_##src(name)

static bool counter_named(const kvt_stats *s, const char *key, uint64_t *v)
{
    KVT_STATS_LIST(BY_NAME)
    return false;
}

/* A figure as the table shows it: a byte count (kvt_stats_list.h: its name
 * holds "bytes") in IEC units, anything else as the number. Returns buf. */
static const char *fmt_figure(const char *name, uint64_t v, char buf[24])
{
    if (strstr(name, "bytes"))
        return fmt_bytes(v, buf);
    snprintf(buf, 24, "%" PRIu64, v);
    return buf;
}

static void row(const char *name, const char *figure, const char *help)
{
    printf("  %-22s %12s  %s\n", name, figure, help);
}

/* A remote tier is in use when any of its counters (remote_*) moved: its
 * rows and its column are shown only then. */
#define REMOTE_USED_STORE(name) used |= !strncmp(#name, "remote_", 7) && s->name;
#define REMOTE_USED_TIERD(name)
#define REMOTE_USED_TIERS(name)
#define REMOTE_USED(src, name, type, metric, help) REMOTE_USED_##src(name)

static bool remote_used(const kvt_stats *s)
{
    bool used = false;

    KVT_STATS_LIST(REMOTE_USED)
    return used;
}

/* The table's rows, from kvt_stats_list.h's list in its order: one a
 * counter (name, figure, help), hit_rate after lookup_hits, the remote
 * tier's only when one is in use; the per-tier array is the table below. */
#define ROW_TIERD(name, help) ROW_STORE(name, help)
#define ROW_STORE(name, help)                                                              \
    if (remote || strncmp(#name, "remote_", 7))                                            \
        row(#name, fmt_figure(#name, s->name, b), help);                                   \
    if (!strcmp(#name, "lookup_hits"))                                                     \
        row("hit_rate", fmt_pct(s->lookup_hits, s->lookup_keys, b),                       \
            "Leading hits per key asked.");
#define ROW_TIERS(name, help)
#define ROW(src, name, type, metric, help) ROW_##src(name, help)

/* One row of the per-tier table: the field of each tier, and the remote
 * tier's figure of it (rname, "": none) when one is in use. */
static void tier_row(const kvt_stats *s, const char *name, size_t off, const char *rname,
                     bool remote, const char *help)
{
    char b[24];
    uint64_t v;

    printf("  %-14s", name);
    for (int i = KVT_TIER_HOT; i < KVT_TIER_COUNT; i++) {
        memcpy(&v, (const char *)&s->tier[i] + off, sizeof(v));
        printf(" %11s", fmt_figure(name, v, b));
    }
    if (remote)
        printf(" %11s", counter_named(s, rname, &v) ? fmt_figure(name, v, b) : "-");
    printf("  %s\n", help);
}

#define TIER_ROW(name, type, metric, help, rname)                                          \
    tier_row(s, #name, offsetof(kvt_tier_stats, name), rname, remote, help);

/* Every counter of kvt_stats, one row each, then the per-tier figures as a
 * table of a row a figure and a column a tier (narrow, however many
 * figures the list holds). */
static void print_table(const char *path, const kvt_stats *s)
{
    uint64_t secs = s->uptime_ms / 1000;
    bool remote = remote_used(s);
    char b[24];

    printf("tierd at %s, up %" PRIu64 "d %02" PRIu64 ":%02" PRIu64 ":%02" PRIu64 "\n", path,
           secs / 86400, secs / 3600 % 24, secs / 60 % 60, secs % 60);
    snprintf(b, sizeof(b), "%" PRIu32, s->clients);
    row("clients", b, "Clients connected (of this tenant).");
    snprintf(b, sizeof(b), "%" PRIu32, s->namespaces);
    row("namespaces", b, "Namespaces open.");
    KVT_STATS_LIST(ROW)
    printf("\n  %-14s", "tier");
    for (int i = KVT_TIER_HOT; i < KVT_TIER_COUNT; i++)
        printf(" %11s", tier_names[i]);
    printf("%s\n", remote ? "      remote" : "");
    KVT_TIER_STATS_LIST(TIER_ROW)
    printf("  %-14s", "use");
    for (int i = KVT_TIER_HOT; i < KVT_TIER_COUNT; i++)
        printf(" %11s", fmt_pct(s->tier[i].bytes_used, s->tier[i].bytes_capacity, b));
    printf("%s  Share of the tier in use.\n", remote ? "           -" : "");
}

/* The JSON of kvt_stats_list.h's list of counters: top-level fields, the remote
 * tier's (remote_*) in "remote" without the prefix, the per-tier array in
 * "tiers"; hit_rate follows lookup_hits. */
#define JSON_TOP_TIERD(name) JSON_TOP_STORE(name)
#define JSON_TOP_STORE(name)                                                               \
    if (strncmp(#name, "remote_", 7))                                                      \
        json_u64(#name, s->name, &first);                                                  \
    if (!strcmp(#name, "lookup_hits"))                                                     \
        json_hit_rate(s);
#define JSON_TOP_TIERS(name)
#define JSON_TOP(src, name, type, metric, help) JSON_TOP_##src(name)
#define JSON_REMOTE_TIERD(name)
#define JSON_REMOTE_STORE(name)                                                            \
    if (!strncmp(#name, "remote_", 7))                                                     \
        json_u64(#name + 7, s->name, &first);
#define JSON_REMOTE_TIERS(name)
#define JSON_REMOTE(src, name, type, metric, help) JSON_REMOTE_##src(name)
#define JSON_TIER(name, type, metric, help, remote) json_u64(#name, t->name, &first);

static void json_u64(const char *name, uint64_t v, bool *first)
{
    printf("%s\"%s\":%" PRIu64, *first ? "" : ",", name, v);
    *first = false;
}

static void json_hit_rate(const kvt_stats *s)
{
    if (s->lookup_keys)
        printf(",\"hit_rate\":%.6f", (double)s->lookup_hits / (double)s->lookup_keys);
    else
        printf(",\"hit_rate\":null");
}

/* One JSON object: every field of kvt_stats (pad excepted), plus hit_rate. */
static void print_json(const kvt_stats *s)
{
    bool first = false;

    printf("{\"version\":%" PRIu32 ",\"clients\":%" PRIu32 ",\"namespaces\":%" PRIu32,
           s->version, s->clients, s->namespaces);
    KVT_STATS_LIST(JSON_TOP)
    printf(",\"remote\":{");
    first = true;
    KVT_STATS_LIST(JSON_REMOTE)
    printf("},\"tiers\":{");
    for (int i = KVT_TIER_HOT; i < KVT_TIER_COUNT; i++) {
        const kvt_tier_stats *t = &s->tier[i];

        printf("%s\"%s\":{", i == KVT_TIER_HOT ? "" : ",", tier_names[i]);
        first = true;
        KVT_TIER_STATS_LIST(JSON_TIER)
        printf("}");
    }
    printf("}}\n");
}

/* sysexits code for a failed connect or request, printing why (and, when
 * nothing listens at path, how to start tierd). */
static int unreachable(const char *path, int err)
{
    fprintf(stderr, "tierctl: cannot reach tierd at %s: %s\n", path, kvt_strerror(err));
    if (err == KVT_EVERSION || err == KVT_EPROTO)
        return EX_PROTOCOL;
    if (err == -EACCES || err == -EPERM)
        return EX_NOPERM;
    fprintf(stderr, "tierctl: is tierd running? Start it with `systemctl start tierd` "
                    "(installed), `make run` (in the tree: socket var/tierd.sock) or "
                    "`tierd --socket %s`\n", path);
    return EX_UNAVAILABLE;
}

/* The options of the operator commands: --socket and --help, and those
 * of the TAKES_* bits the command takes, each into its field of struct
 * opts (the caller sets the defaults first). */
struct opts {
    const char *path;
    int json;
    double timeout, interval; /* seconds */
    long ns, count;
};

enum { TAKES_JSON = 1, TAKES_TIMEOUT = 2, TAKES_INTERVAL = 4, TAKES_NS = 8, TAKES_COUNT = 16 };

static int parse_opts(const char *cmd, int argc, char *argv[], struct opts *o, unsigned takes)
{
    static const struct cmn_opt takes_opt[] = { /* in the order of the TAKES_* bits */
        { "json", 'j', CMN_OPT_FLAG, 0, 0, 0, 0, false },
        { "timeout", 't', CMN_OPT_REAL, 0, 0, 1, 86400, false },
        { "interval", 'i', CMN_OPT_REAL, 0, 0, 0.05, 3600, false },
        { "ns", 'n', CMN_OPT_UINT, 1, UINT32_MAX, 0, 0, false },
        { "count", 'c', CMN_OPT_UINT, 1, LONG_MAX, 0, 0, false },
    };
    enum { NTAKES = sizeof(takes_opt) / sizeof(takes_opt[0]) };
    struct cmn_opt tab[2 + NTAKES + 1] = { OPT_SOCKET, OPT_HELP }; /* ends with { NULL } */
    int n = 2, opt;
    struct cmn_opts p;

    for (int i = 0; i < NTAKES; i++)
        if (takes & (1u << i))
            tab[n++] = takes_opt[i];
    cmn_opts_init(&p, tab);
    while ((opt = cmn_opts_next(&p, argc, argv)) != -1) {
        switch (opt) {
        case 'j':
            o->json = 1;
            break;
        case 't':
            o->timeout = p.d;
            break;
        case 'i':
            o->interval = p.d;
            break;
        case 'n':
            o->ns = (long)p.u;
            break;
        case 'c':
            o->count = (long)p.u;
            break;
        case 's':
            o->path = p.arg;
            break;
        case 'h':
            return usage();
        default:
            return bad_option(cmd, &p);
        }
    }
    if (!o->path)
        o->path = kvt_default_socket();
    return 0;
}

/* No arguments after the options: 0, or EX_USAGE after saying so. */
static int no_args(const char *cmd, int argc, char *argv[])
{
    if (optind >= argc)
        return 0;
    fprintf(stderr, "tierctl %s: unexpected argument '%s'\n", cmd, argv[optind]);
    return usage();
}

static int cmd_stats(int argc, char *argv[])
{
    struct opts o = { 0 };
    const char *path;
    int json, err = parse_opts("stats", argc, argv, &o, TAKES_JSON);
    kvt_client *c;
    kvt_stats st;

    if (err || (err = no_args("stats", argc, argv)))
        return err;
    path = o.path;
    json = o.json;
    err = kvt_connect(path, &c);
    if (err < 0)
        return unreachable(path, err);
    err = kvt_stats_get(c, &st);
    kvt_close(c);
    if (err < 0) {
        fprintf(stderr, "tierctl: stats from tierd at %s: %s\n", path, kvt_strerror(err));
        return err == KVT_EDISCONNECTED ? EX_UNAVAILABLE : EX_PROTOCOL;
    }
    if (st.version != KVT_STATS_VERSION)
        fprintf(stderr, "tierctl: warning: tierd sends stats version %" PRIu32
                ", tierctl knows %d\n", st.version, KVT_STATS_VERSION);
    if (json)
        print_json(&st);
    else
        print_table(path, &st);
    if (fflush(stdout) != 0 || ferror(stdout)) {
        fprintf(stderr, "tierctl stats: writing stdout: %s\n", strerror(errno));
        return EX_IOERR;
    }
    return 0;
}

/* ---- namespaces, why, flush, evict ------------------------------------- */

/* A failed request: message and sysexits code. */
static int failed(const char *cmd, const char *path, int err)
{
    fprintf(stderr, "tierctl %s: tierd at %s: %s\n", cmd, path, kvt_strerror(err));
    return err == KVT_EDISCONNECTED || err == -ETIMEDOUT ? EX_UNAVAILABLE
           : err == KVT_EPROTO || err == KVT_EVERSION  ? EX_PROTOCOL
                                                       : EX_SOFTWARE;
}

static void print_ns_json(const kvt_ns_info *v, int n)
{
    printf("[");
    for (int i = 0; i < n; i++) {
        const kvt_ns_info *x = &v[i];

        /* model ids come from clients: printed through %s only after a
         * check that they hold nothing JSON would need escaped */
        printf("%s{\"id\":%" PRIu32 ",\"model_id\":\"", i ? "," : "", x->id);
        for (const char *p = x->model_id; *p; p++)
            if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
                printf("\\u%04x", (unsigned char)*p);
            else
                putchar(*p);
        printf("\",\"dtype\":\"%s\",\"layout\":\"%s\",\"block_tokens\":%" PRIu32
               ",\"block_bytes\":%" PRIu64 ",\"tp_rank\":%" PRIu32 ",\"tp_size\":%" PRIu32,
               x->dtype, x->layout, x->block_tokens, x->block_bytes, x->tp_rank, x->tp_size);
        printf(",\"lookups\":%" PRIu64 ",\"lookup_keys\":%" PRIu64 ",\"hit_keys\":%" PRIu64
               ",\"hit_tokens\":%" PRIu64 ",\"put_blocks\":%" PRIu64 ",\"get_blocks\":%" PRIu64
               ",\"bytes_in\":%" PRIu64 ",\"bytes_out\":%" PRIu64 ",\"misses\":{",
               x->lookups, x->lookup_keys, x->hit_keys, x->hit_tokens, x->put_blocks,
               x->get_blocks, x->bytes_in, x->bytes_out);
        for (int c = 0; c < KVT_MISS_CAUSES; c++)
            printf("%s\"%s\":%" PRIu64, c ? "," : "", kvt_miss_cause_name(c), x->misses[c]);
        printf("},\"evicted_age_ms\":%" PRIu64 ",\"deadline_misses\":%" PRIu64 "}",
               x->evicted_age_ms, x->deadline_misses);
    }
    printf("]\n");
}

static void print_ns_table(const kvt_ns_info *v, int n)
{
    char b1[16], b2[16];

    if (n == 0) {
        printf("no namespaces\n");
        return;
    }
    for (int i = 0; i < n; i++) {
        const kvt_ns_info *x = &v[i];
        uint64_t evicted = x->misses[KVT_MISS_DROPPED] + x->misses[KVT_MISS_EVICTED];

        printf("%s%" PRIu32 "  %s  %s %s tp %" PRIu32 "/%" PRIu32 ", %" PRIu32
               " tokens per block of %s\n",
               i ? "\n" : "", x->id, x->model_id, x->dtype, x->layout, x->tp_rank, x->tp_size,
               x->block_tokens, fmt_bytes(x->block_bytes, b1));
        printf("    lookups %" PRIu64 ", keys %" PRIu64 ", hit rate %s, tokens saved %" PRIu64
               "; put %" PRIu64 " blocks, got %" PRIu64 "\n",
               x->lookups, x->lookup_keys, fmt_pct(x->hit_keys, x->lookup_keys, b2),
               x->hit_tokens, x->put_blocks, x->get_blocks);
        printf("    misses:");
        for (int c = 0; c < KVT_MISS_CAUSES; c++)
            printf(" %s %" PRIu64, kvt_miss_cause_name(c), x->misses[c]);
        printf(", deadline %" PRIu64 "\n", x->deadline_misses);
        if (evicted)
            printf("    evicted blocks were asked for %.1f s after their eviction, on average\n",
                   (double)x->evicted_age_ms / 1000.0 / (double)evicted);
    }
}

static int cmd_namespaces(int argc, char *argv[])
{
    struct opts o = { 0 };
    kvt_ns_info *v = NULL;
    kvt_client *c;
    int rc = parse_opts("namespaces", argc, argv, &o, TAKES_JSON), n;

    if (rc || (rc = no_args("namespaces", argc, argv)))
        return rc;
    rc = kvt_connect(o.path, &c);
    if (rc < 0)
        return unreachable(o.path, rc);
    /* the count first, then all of them (a namespace opened in between
     * shows next time) */
    n = kvt_admin_namespaces(c, NULL, 0);
    if (n > 0 && !(v = calloc((size_t)n, sizeof(*v))))
        n = -ENOMEM;
    if (n > 0) {
        int m = kvt_admin_namespaces(c, v, (size_t)n);

        n = m < n ? m : n; /* an error, or fewer (none closes: never more than n kept) */
    }
    kvt_close(c);
    if (n < 0) {
        free(v);
        return failed("namespaces", o.path, n);
    }
    if (o.json)
        print_ns_json(v, n);
    else
        print_ns_table(v, n);
    free(v);
    return 0;
}

static const char *const event_text[KVT_MISS_CAUSES] = {
    "nothing known (never stored, or forgotten)",
    "dropped from memory with no copy on disk (evicted)",
    "evicted from the disk to make room",
    "read back from disk with wrong bytes (checksum): dropped",
    "could not be read back from disk (i/o error): dropped",
    "removed by a client or an operator",
    "reserved by a client and never committed",
    "being written", "present behind a missing block",
};

static int cmd_why(int argc, char *argv[])
{
    struct opts o = { 0 };
    kvt_key_story st[64];
    kvt_ns_info ns[256];
    kvt_key key;
    kvt_client *c;
    int rc = parse_opts("why", argc, argv, &o, 0), n, nns;
    const char *hex;

    if (rc)
        return rc;
    if (optind + 1 != argc) {
        fprintf(stderr, "tierctl why: give one key (64 hex digits)\n");
        return usage();
    }
    hex = argv[optind];
    if (strlen(hex) != 2 * KVT_KEY_BYTES) {
        fprintf(stderr, "tierctl why: '%s' is not a key: 64 hex digits expected\n", hex);
        return EX_DATAERR;
    }
    for (int i = 0; i < KVT_KEY_BYTES; i++) {
        unsigned v;

        if (sscanf(hex + 2 * i, "%2x", &v) != 1 || !isxdigit((unsigned char)hex[2 * i]) ||
            !isxdigit((unsigned char)hex[2 * i + 1])) {
            fprintf(stderr, "tierctl why: '%s' is not a key: 64 hex digits expected\n", hex);
            return EX_DATAERR;
        }
        key.b[i] = (uint8_t)v;
    }
    rc = kvt_connect(o.path, &c);
    if (rc < 0)
        return unreachable(o.path, rc);
    n = kvt_admin_why(c, &key, st, 64);
    nns = n > 0 ? kvt_admin_namespaces(c, ns, 256) : 0;
    kvt_close(c);
    if (n < 0 || nns < 0)
        return failed("why", o.path, n < 0 ? n : nns);
    if (n == 0)
        printf("%s: unknown in every namespace (never stored, or forgotten)\n", hex);
    for (int i = 0; i < n && i < 64; i++) {
        const char *model = "?";

        for (int j = 0; j < nns && j < 256; j++)
            if (ns[j].id == st[i].ns_id)
                model = ns[j].model_id;
        printf("namespace %" PRIu32 " (%s): ", st[i].ns_id, model);
        if (st[i].present)
            printf("present in %s%s, %" PRIu32 " leases%s\n",
                   st[i].tier < KVT_TIER_COUNT ? tier_names[st[i].tier] : "?",
                   st[i].on_disk && st[i].tier != KVT_TIER_COLD ? " and on disk" : "",
                   st[i].leases, st[i].chain_ok ? "" : "; the block before it is missing");
        else if (st[i].writing)
            printf("being written by a client (not committed yet)\n");
        else
            printf("%s, from %s, %.1f s ago\n",
                   st[i].event < KVT_MISS_CAUSES ? event_text[st[i].event] : "?",
                   st[i].event_tier < KVT_TIER_COUNT ? tier_names[st[i].event_tier] : "?",
                   (double)st[i].event_age_ms / 1000.0);
    }
    return 0;
}

static int cmd_flush(int argc, char *argv[])
{
    struct opts o = { .timeout = 600 };
    char ms[32];
    kvt_client *c;
    int rc = parse_opts("flush", argc, argv, &o, TAKES_TIMEOUT);

    if (rc || (rc = no_args("flush", argc, argv)))
        return rc;
    /* the reply comes when the disk has everything: wait that long */
    snprintf(ms, sizeof(ms), "%.0f", o.timeout * 1000.0);
    setenv("KVTIER_TIMEOUT_MS", ms, 1);
    rc = kvt_connect(o.path, &c);
    if (rc < 0)
        return unreachable(o.path, rc);
    rc = kvt_admin_flush(c);
    kvt_close(c);
    if (rc < 0)
        return failed("flush", o.path, rc);
    printf("flushed: every block that was only in warm is durable on disk\n");
    return 0;
}

static int cmd_evict(int argc, char *argv[])
{
    struct opts o = { 0 };
    kvt_client *c;
    int rc = parse_opts("evict", argc, argv, &o, TAKES_NS);

    if (rc)
        return rc;
    if (optind < argc || !o.ns) {
        fprintf(stderr, "tierctl evict: --ns ID is required (see `tierctl namespaces`)\n");
        return usage();
    }
    rc = kvt_connect(o.path, &c);
    if (rc < 0)
        return unreachable(o.path, rc);
    rc = kvt_admin_purge(c, (uint32_t)o.ns);
    kvt_close(c);
    if (rc == -EBUSY) {
        fprintf(stderr, "tierctl evict: namespace %ld is in use (blocks leased, being written "
                        "or moving); try again\n", o.ns);
        return EX_TEMPFAIL;
    }
    if (rc == KVT_ENONS) {
        fprintf(stderr, "tierctl evict: no namespace %ld (see `tierctl namespaces`)\n", o.ns);
        return EX_DATAERR;
    }
    if (rc < 0)
        return failed("evict", o.path, rc);
    printf("evicted namespace %ld: %d blocks removed\n", o.ns, rc);
    return 0;
}

/* ---- top and health ----------------------------------------------------- */

/* Connect to path (NULL: the default) and read the counters; a sysexits
 * code after printing why, or 0. */
static int fetch(const char *path, kvt_client **c, kvt_stats *st)
{
    int err = *c ? 0 : kvt_connect(path, c);

    if (err < 0)
        return unreachable(path, err);
    err = kvt_stats_get(*c, st);
    if (err < 0) {
        fprintf(stderr, "tierctl: stats from tierd at %s: %s\n", path, kvt_strerror(err));
        kvt_close(*c);
        *c = NULL;
        return err == KVT_EDISCONNECTED || err == -ETIMEDOUT ? EX_UNAVAILABLE : EX_PROTOCOL;
    }
    return 0;
}

/* A bar of width w, filled part/whole. */
static const char *bar(uint64_t part, uint64_t whole, char *buf, int w)
{
    int fill = whole ? (int)((double)w * (double)part / (double)whole + 0.5) : 0;

    for (int i = 0; i < w; i++)
        buf[i] = i < fill ? '#' : '.';
    buf[w] = '\0';
    return buf;
}

/* One screen of top: now s, and rates against the previous sample p
 * (NULL: the first screen, counters since start), dt seconds apart. */
static void print_top(const char *path, const kvt_stats *s, const kvt_stats *p, double dt)
{
    static const kvt_stats zero;
    char b1[16], b2[16], b3[16], b4[16], bb[32];
    uint64_t secs = s->uptime_ms / 1000;
    double per;

    if (!p) {
        p = &zero;
        dt = (double)s->uptime_ms / 1000.0;
    }
    per = dt > 0 ? 1.0 / dt : 0;
#define RATE(f) ((double)(s->f - p->f) * per)
    printf("tierd at %s  up %" PRIu64 ":%02" PRIu64 ":%02" PRIu64 "  clients %" PRIu32
           "  namespaces %" PRIu32 "\n",
           path, secs / 3600, secs / 60 % 60, secs % 60, s->clients, s->namespaces);
    printf("  lookups %9.0f/s  keys %10.0f/s  hit rate %s (interval)  %s (all)\n",
           RATE(lookups), RATE(lookup_keys),
           fmt_pct(s->lookup_hits - p->lookup_hits, s->lookup_keys - p->lookup_keys, b1),
           fmt_pct(s->lookup_hits, s->lookup_keys, b2));
    printf("  puts    %9.0f/s  blocks %8.0f/s  gets %9.0f/s  blocks %8.0f/s\n", RATE(puts),
           RATE(put_blocks), RATE(gets), RATE(get_blocks));
    printf("  leases %" PRIu64 "  reserved %" PRIu64 "  demotions %.0f/s  promotions %.0f/s"
           "  to hot %.0f/s  dropped %.0f/s\n",
           s->leases_active, s->reserved, RATE(demotions), RATE(promotions),
           RATE(hot_promotions), RATE(dropped));
    printf("\n  %-5s %-22s %7s %11s %11s %10s %11s %11s\n", "tier", "occupancy", "use", "used",
           "blocks", "hits/s", "in/s", "out/s");
    for (int i = KVT_TIER_HOT; i < KVT_TIER_COUNT; i++) {
        const kvt_tier_stats *t = &s->tier[i], *q = &p->tier[i];

        if (!t->bytes_capacity) {
            printf("  %-5s (none)\n", tier_names[i]);
            continue;
        }
        printf("  %-5s [%s] %7s %11s %11" PRIu64 " %10.0f %9s/s %9s/s\n", tier_names[i],
               bar(t->bytes_used, t->bytes_capacity, bb, 20),
               fmt_pct(t->bytes_used, t->bytes_capacity, b1), fmt_bytes(t->bytes_used, b2),
               t->blocks, (double)(t->hits - q->hits) * per,
               fmt_bytes((uint64_t)((double)(t->bytes_in - q->bytes_in) * per), b3),
               fmt_bytes((uint64_t)((double)(t->bytes_out - q->bytes_out) * per), b4));
    }
    printf("\n  errors: checksum %" PRIu64 "  i/o %" PRIu64 "  deadline misses %" PRIu64
           "  protocol %" PRIu64 "\n",
           s->checksum_errors, s->io_errors, s->deadline_misses, s->proto_errors);
#undef RATE
}

static int cmd_top(int argc, char *argv[])
{
    struct opts o = { .interval = 1.0, .count = -1 }; /* until interrupted */
    kvt_client *c = NULL;
    kvt_stats cur, prev;
    bool tty = isatty(STDOUT_FILENO);
    int rc = parse_opts("top", argc, argv, &o, TAKES_INTERVAL | TAKES_COUNT);

    if (rc || (rc = no_args("top", argc, argv)))
        return rc;
    rc = fetch(o.path, &c, &cur);
    for (long shown = 0; rc == 0;) {
        struct timespec ts = { (time_t)o.interval,
                               (long)((o.interval - (double)(time_t)o.interval) * 1e9) };

        if (tty)
            fputs("\033[H\033[2J", stdout); /* home, clear: a screen, not a scroll */
        else if (shown)
            putchar('\n');
        print_top(o.path, &cur, shown ? &prev : NULL,
                  shown ? (double)(cur.uptime_ms - prev.uptime_ms) / 1000.0 : 0);
        if (fflush(stdout) != 0 || ferror(stdout))
            break; /* a closed pipe (`tierctl top | head`) ends it quietly */
        if (++shown == o.count)
            break;
        nanosleep(&ts, NULL);
        prev = cur;
        rc = fetch(o.path, &c, &cur);
    }
    kvt_close(c);
    return rc;
}

static int cmd_health(int argc, char *argv[])
{
    struct opts o = { 0 };
    kvt_client *c = NULL;
    const char *path;
    kvt_stats st;
    int rc = parse_opts("health", argc, argv, &o, 0);

    if (rc || (rc = no_args("health", argc, argv)))
        return rc;
    path = o.path;
    rc = fetch(path, &c, &st);
    kvt_close(c);
    if (rc)
        return rc;
    printf("ok: tierd at %s up %" PRIu64 " s, %" PRIu32 " clients, %" PRIu64
           " blocks (hot %" PRIu64 ", warm %" PRIu64 ", cold %" PRIu64 ")\n",
           path, st.uptime_ms / 1000, st.clients,
           st.tier[KVT_TIER_HOT].blocks + st.tier[KVT_TIER_WARM].blocks +
               st.tier[KVT_TIER_COLD].blocks,
           st.tier[KVT_TIER_HOT].blocks, st.tier[KVT_TIER_WARM].blocks,
           st.tier[KVT_TIER_COLD].blocks);
    return 0;
}

int main(int argc, char *argv[])
{
    static const struct {
        const char *name;
        int (*run)(int argc, char *argv[]);
    } cmds[] = {
        { "hash", cmd_hash },   { "stats", cmd_stats }, { "top", cmd_top },
        { "health", cmd_health }, { "namespaces", cmd_namespaces }, { "why", cmd_why },
        { "flush", cmd_flush }, { "evict", cmd_evict },
    };

    if (argc < 2)
        return usage();
    /* Each subcommand parses its own options, its name standing as argv[0]. */
    for (size_t i = 0; i < sizeof(cmds) / sizeof(cmds[0]); i++)
        if (strcmp(argv[1], cmds[i].name) == 0)
            return cmds[i].run(argc - 1, argv + 1);
    if (strcmp(argv[1], "--help") != 0 && strcmp(argv[1], "-h") != 0 &&
        strcmp(argv[1], "help") != 0)
        fprintf(stderr, "tierctl: unknown command '%s'\n", argv[1]);
    return usage();
}
