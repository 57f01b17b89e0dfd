/* SPDX-License-Identifier: MIT */
/*
 * kvreplay.c - replay a request trace (Mooncake JSONL) and report prefix
 * hit rates, the hit-rate-versus-capacity curve and what the cache saves.
 *
 * In-process (default): one replay per capacity through the store's own
 * code (tier.h), no daemon, no payload bytes. Against tierd (--socket):
 * real puts and verified gets through libkvtier. Without a trace
 * (--hits/--misses): the cost model alone. Options and definitions are in
 * usage_text; exit codes come from sysexits.h.
 */
#include <errno.h>
#include <getopt.h>
#include <jansson.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sysexits.h>
#include <unistd.h>

#include "kvreplay.h"
#include "kvt_common.h"
#include "kvtier.h"

#define MAX_CAPS 64 /* capacities in one curve */
#define MAX_POL 8   /* policies in one run */

static const char usage_text[] =
    "usage: kvreplay [options] TRACE     replay a Mooncake JSONL trace (\"-\": stdin)\n"
    "       kvreplay --hits N --misses N [cost options]   cost of known token counts\n"
    "       kvreplay --live [--socket PATH] [cost options]  what a running tierd saved\n"
    "\n"
    "Replay (each request: look its block chain up, count the leading cached run\n"
    "as the hit, then put the blocks from the first miss on, as an engine does\n"
    "after prefill):\n"
    "  --capacity LIST      warm capacities for in-process replays, one per entry:\n"
    "                       8G,16G,64G (K/M/G/T, binary; default 8G,32G,128G,512G,2T)\n"
    "  --socket PATH        replay against a running tierd instead (real puts and\n"
    "                       gets; every byte read back is verified)\n"
    "  --speed X            with --socket: keep the trace's pace, X times faster\n"
    "                       (default 0: as fast as possible)\n"
    "  --policy LIST        eviction policies, each replayed at every capacity\n"
    "                       (default lru; see Policies below)\n"
    "  --cold SIZE|Rx       in-process: a cold tier (an NVMe data file) below each\n"
    "                       warm capacity, of SIZE, or R times the warm capacity\n"
    "                       (default: none; blocks leaving warm are dropped)\n"
    "  --cold-dir DIR       folder for the cold tier's temporary folder (default\n"
    "                       $TMPDIR or /tmp); removed after each replay\n"
    "  --cold-admit LIST    NVMe admission of the store, each replayed: all (every\n"
    "                       block leaving warm is written) or second-touch (only\n"
    "                       blocks read or put again); default all, as tierd's.\n"
    "                       With both, the report compares them\n"
    "  --cold-dwpd F        write budget: F drive writes per day of trace time\n"
    "                       (F x cold size per 24 h); default none\n"
    "  --bench NAME         with --cold-admit all,second-touch: print the admission\n"
    "                       figures as make bench's lines (bench: NAME_...)\n"
    "  --block-tokens N     tokens per hash_id block (default 512, Mooncake's)\n"
    "  --bytes-per-token N  KV bytes per token (default 131072: Llama-3.1-8B BF16)\n"
    "  --block-bytes SIZE   bytes per block (default block-tokens x bytes-per-token)\n"
    "  --high-wm F --low-wm F  in-process watermarks (default 0.95 / 0.85, tierd's)\n"
    "  --limit N            replay only the first N requests\n"
    "  --salt S             mix S into every key (fresh keys on a shared tierd)\n"
    "  --model-id S         tierd namespace model id (default \"kvreplay\")\n"
    "  --json               one JSON object on stdout instead of tables\n"
    "  --svg FILE           write the hit-rate and savings curves as SVG\n"
    "\n"
    "Cost (defaults: the built-in preset; a preset file, then flags, override):\n"
    "  --prices FILE        JSON presets (tools/kvreplay_prices.json)\n"
    "  --preset NAME        preset of that file (default: its \"default\")\n"
    "  --price-miss P       $ per million uncached input tokens (2.50)\n"
    "  --price-hit P        $ per million cached input tokens (0.05, 1/50)\n"
    "  --params N           model parameters (8e9); prefill = 2 x N FLOPs/token\n"
    "  --gpu-flops F        GPU peak FLOP/s (989e12, H100 SXM dense BF16)\n"
    "  --mfu F              fraction of peak prefill reaches (0.5)\n"
    "  --gpu-price-hour P   $ per GPU-hour (3.00)\n"
    "  --ram-price-gib-hour P   $ per GiB-hour of RAM (0.004)\n"
    "  --nvme-price-gib-hour P  $ per GiB-hour of NVMe (0.0001)\n"
    "  --nvme-bytes SIZE    NVMe charged in-process / with --hits (default 0;\n"
    "                       with --socket: tierd's cold capacity)\n"
    "  --ram-bytes SIZE     with --hits: RAM charged (default 0)\n"
    "  --hours H            time the counts cover (default: the trace's span;\n"
    "                       with --hits: 1)\n"
    "\n"
    "Definitions: a request's hit is the leading run of its blocks found cached\n"
    "(a cached block after a miss is of no use to an engine). Block hit rate =\n"
    "hit blocks / blocks. Token hit rate = hit tokens / input tokens, where a\n"
    "request's hit tokens are min(hit blocks x block-tokens, input_length): the\n"
    "last block of a prompt is usually partial. Per tier: hits by the tier the\n"
    "lookup found each block in. Keys: key(i) = SHA-256(key(i-1) || le64(id)),\n"
    "key(-1) = SHA-256(\"kvreplay:\" || salt); equal prefixes give equal keys.\n"
    "Costs: API bill = miss tokens x price-miss + hit tokens x price-hit (without\n"
    "the cache every token is a miss); prefill GPU-hours = 2 x params x tokens /\n"
    "(gpu-flops x mfu) / 3600, for all tokens without the cache and for the\n"
    "misses with it (attention FLOPs and the cost of reading blocks back are\n"
    "left out); net saving = GPU $ saved - RAM $ - NVMe $ over the same hours.\n"
    "The in-process store has no cold tier unless --cold gives one: blocks\n"
    "leaving warm are dropped. Its watermarks are scaled to the capacity asked\n"
    "(the pool is whole segments, often larger): asked = capacity / slot\n"
    "bytes, held = the most blocks warm held at any lookup. disk B/hit tok =\n"
    "bytes written to the cold tier per hit token.\n"
    "\n"
    "Policies: lru (the store's leaf-first LRU, tierd's default), keep (the\n"
    "store's adaptive selective retention, tierd --evict-policy keep), reuse\n"
    "(the store's learnt reuse index per class of block, tierd --evict-policy\n"
    "reuse), min\n"
    "(Belady's MIN with prefix semantics, offline: warm plus cold capacity as one\n"
    "cache that knows every request to come; the bound for any policy).\n"
    "\n"
    "exit status: 0 ok, 1 wrong bytes read back from tierd, 64 usage, 65 bad trace\n"
    "or prices file, 66 file not found, 69 tierd unreachable, 70 store or request\n"
    "error, 73 cannot write the SVG, 74 i/o error on stdout.\n";

static int usage(void)
{
    fputs(usage_text, stderr);
    return EX_USAGE;
}

struct opts {
    const char *trace, *socket, *svg, *prices, *preset, *salt, *model_id;
    uint64_t caps[MAX_CAPS];
    size_t ncaps;
    uint32_t block_tokens;
    uint64_t bytes_per_token, block_bytes, nvme_bytes, ram_bytes;
    size_t limit;
    double high_wm, low_wm, speed, hours; /* hours: NAN when not given */
    double hits, misses;                  /* NAN when not given */
    bool json;
    bool live;                            /* --live: counts from a running tierd */
    const struct kvr_policy *pol[MAX_POL]; /* --policy */
    size_t npol;
    enum tier_admit admit[2];             /* --cold-admit */
    size_t nadmit;
    uint64_t cold_bytes;                  /* --cold SIZE */
    double cold_ratio, cold_dwpd;         /* --cold Rx, --cold-dwpd */
    const char *cold_dir, *bench;
    double over[8];                       /* price flags, NAN when not given */
};

/* The price flags, in the order of opts.over, and what each sets. */
static const char *const price_flag[8] = {
    "price-miss", "price-hit", "params", "gpu-flops", "mfu", "gpu-price-hour",
    "ram-price-gib-hour", "nvme-price-gib-hour",
};

static double *price_field(struct kvr_prices *p, int i)
{
    double *f[8] = { &p->miss_mtok, &p->hit_mtok, &p->params, &p->gpu_flops, &p->mfu,
                     &p->gpu_hour, &p->ram_gib_hour, &p->nvme_gib_hour };

    return f[i];
}

/* ---- parsing ------------------------------------------------------------- */

/* A finite non-negative number (1e9, 0.5). 0 or -EINVAL. */
static int parse_num(const char *s, double *out)
{
    char *end;
    double v;

    errno = 0;
    v = strtod(s, &end);
    if (errno || end == s || *end || !isfinite(v) || v < 0)
        return -EINVAL;
    *out = v;
    return 0;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

    return x < y ? -1 : x > y;
}

/* "8G,16G,64G" into o->caps, sorted, duplicates dropped. */
static int parse_caps(const char *list, struct opts *o)
{
    char buf[1024], *tok, *save;
    size_t n = 0;

    if (strlen(list) >= sizeof(buf))
        return -EINVAL;
    strcpy(buf, list);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
        if (n == MAX_CAPS || cmn_parse_size(tok, &o->caps[n]) < 0 || o->caps[n] == 0)
            return -EINVAL;
        n++;
    }
    if (n == 0)
        return -EINVAL;
    qsort(o->caps, n, sizeof(o->caps[0]), cmp_u64);
    o->ncaps = 0;
    for (size_t i = 0; i < n; i++)
        if (o->ncaps == 0 || o->caps[o->ncaps - 1] != o->caps[i])
            o->caps[o->ncaps++] = o->caps[i];
    return 0;
}

/* Call item(tok, o) for each comma-separated entry of list, in order,
 * after clear(o). 0, or the first item's error; -EINVAL for an empty list. */
static int each_item(const char *list, struct opts *o, void (*clear)(struct opts *),
                     int (*item)(const char *tok, struct opts *o))
{
    char buf[256], *tok, *save;
    int n = 0, rc;

    if (strlen(list) >= sizeof(buf))
        return -EINVAL;
    strcpy(buf, list);
    clear(o);
    for (tok = strtok_r(buf, ",", &save); tok; tok = strtok_r(NULL, ",", &save), n++)
        if ((rc = item(tok, o)) < 0)
            return rc;
    return n ? 0 : -EINVAL;
}

static void clear_policies(struct opts *o)
{
    o->npol = 0;
}

/* One --policy entry into o->pol: -EINVAL after naming the policy that is
 * none and the ones there are. */
static int add_policy(const char *tok, struct opts *o)
{
    const struct kvr_policy *p = kvr_policy_find(tok);

    if (!p) {
        fprintf(stderr, "kvreplay: --policy: no policy '%s'; there are:", tok);
        for (p = kvr_policies; p->name; p++)
            fprintf(stderr, " %s", p->name);
        fprintf(stderr, "\n");
        return -EINVAL;
    }
    if (o->npol == MAX_POL)
        return -EINVAL;
    o->pol[o->npol++] = p;
    return 0;
}

static const char *const admit_name[2] = { "all", "second-touch" };

static void clear_admit(struct opts *o)
{
    o->nadmit = 0;
}

/* One --cold-admit entry ("all", "second-touch"; each once) into o->admit. */
static int add_admit(const char *tok, struct opts *o)
{
    int a = strcmp(tok, "all") == 0 ? TIER_ADMIT_ALL
          : strcmp(tok, "second-touch") == 0 ? TIER_ADMIT_REUSED : -1;

    if (a < 0 || o->nadmit == 2 || (o->nadmit == 1 && (int)o->admit[0] == a))
        return -EINVAL;
    o->admit[o->nadmit++] = (enum tier_admit)a;
    return 0;
}

/* --cold: a size, or "R x" the warm capacity. */
static int parse_cold(const char *arg, struct opts *o)
{
    size_t n = strlen(arg);
    char buf[64];

    if (n > 1 && n < sizeof(buf) && arg[n - 1] == 'x') {
        memcpy(buf, arg, n - 1);
        buf[n - 1] = '\0';
        o->cold_bytes = 0;
        return parse_num(buf, &o->cold_ratio) == 0 && o->cold_ratio > 0 ? 0 : -EINVAL;
    }
    o->cold_ratio = 0;
    return cmn_parse_size(arg, &o->cold_bytes) == 0 && o->cold_bytes >= (1u << 20) ? 0
                                                                                  : -EINVAL;
}

enum {
    O_CAP = 256, O_SOCKET, O_SPEED, O_BT, O_BPT, O_BB, O_HWM, O_LWM, O_LIMIT, O_SALT,
    O_MODEL, O_JSON, O_SVG, O_PRICES, O_PRESET, O_NVME, O_RAM, O_HOURS, O_HITS, O_MISSES,
    O_LIVE, O_POLICY, O_COLD, O_COLD_DIR, O_ADMIT, O_DWPD, O_BENCH,
    O_PRICE0, /* O_PRICE0 + i: price_flag[i] */
};

static const struct option base_opts[] = {
    {"capacity", required_argument, NULL, O_CAP},
    {"socket", required_argument, NULL, O_SOCKET},
    {"speed", required_argument, NULL, O_SPEED},
    {"block-tokens", required_argument, NULL, O_BT},
    {"bytes-per-token", required_argument, NULL, O_BPT},
    {"block-bytes", required_argument, NULL, O_BB},
    {"high-wm", required_argument, NULL, O_HWM},
    {"low-wm", required_argument, NULL, O_LWM},
    {"limit", required_argument, NULL, O_LIMIT},
    {"salt", required_argument, NULL, O_SALT},
    {"model-id", required_argument, NULL, O_MODEL},
    {"json", no_argument, NULL, O_JSON},
    {"svg", required_argument, NULL, O_SVG},
    {"prices", required_argument, NULL, O_PRICES},
    {"preset", required_argument, NULL, O_PRESET},
    {"nvme-bytes", required_argument, NULL, O_NVME},
    {"ram-bytes", required_argument, NULL, O_RAM},
    {"hours", required_argument, NULL, O_HOURS},
    {"hits", required_argument, NULL, O_HITS},
    {"misses", required_argument, NULL, O_MISSES},
    {"live", no_argument, NULL, O_LIVE},
    {"policy", required_argument, NULL, O_POLICY},
    {"cold", required_argument, NULL, O_COLD},
    {"cold-dir", required_argument, NULL, O_COLD_DIR},
    {"cold-admit", required_argument, NULL, O_ADMIT},
    {"cold-dwpd", required_argument, NULL, O_DWPD},
    {"bench", required_argument, NULL, O_BENCH},
    {"help", no_argument, NULL, 'h'},
};
#define NBASE (sizeof(base_opts) / sizeof(base_opts[0]))

/* The long name of option value opt, for messages. */
static const char *opt_name(const struct option *lo, int opt)
{
    for (; lo->name; lo++)
        if (lo->val == opt)
            return lo->name;
    return "?";
}

/* One option's value into o: 0, or -EINVAL when the value is bad. */
static int set_opt(struct opts *o, int opt, const char *arg)
{
    uint64_t u = 0;
    double d = 0;
    bool size = opt == O_BT || opt == O_BPT || opt == O_BB || opt == O_NVME || opt == O_RAM ||
                opt == O_LIMIT;

    if (size && cmn_parse_size(arg, &u) < 0)
        return -EINVAL;
    if (!size && opt != O_CAP && opt != O_COLD && parse_num(arg, &d) < 0)
        return -EINVAL;
    switch (opt) {
    case O_CAP: return parse_caps(arg, o);
    case O_COLD: return parse_cold(arg, o);
    case O_DWPD: o->cold_dwpd = d; return d > 0 ? 0 : -EINVAL;
    case O_BT:
        if (u == 0 || u > (1u << 20))
            return -EINVAL;
        o->block_tokens = (uint32_t)u;
        return 0;
    case O_BPT: o->bytes_per_token = u; return u ? 0 : -EINVAL;
    case O_BB: o->block_bytes = u; return u ? 0 : -EINVAL;
    case O_LIMIT: o->limit = (size_t)u; return u ? 0 : -EINVAL;
    case O_NVME: o->nvme_bytes = u; return 0;
    case O_RAM: o->ram_bytes = u; return 0;
    case O_HWM: o->high_wm = d; return d > 0 && d <= 1 ? 0 : -EINVAL;
    case O_LWM: o->low_wm = d; return d > 0 && d <= 1 ? 0 : -EINVAL;
    case O_SPEED: o->speed = d; return 0;
    case O_HOURS: o->hours = d; return d > 0 ? 0 : -EINVAL;
    case O_HITS: o->hits = d; return 0;
    case O_MISSES: o->misses = d; return 0;
    default:
        o->over[opt - O_PRICE0] = d;
        return 0;
    }
}

/* Parse argv into o. 0, or an exit code after saying why. */
static int parse_args(int argc, char **argv, struct opts *o)
{
    struct option lo[NBASE + 9];
    int opt;

    memcpy(lo, base_opts, sizeof(base_opts));
    for (int i = 0; i < 8; i++)
        lo[NBASE + (size_t)i] =
            (struct option){ price_flag[i], required_argument, NULL, O_PRICE0 + i };
    lo[NBASE + 8] = (struct option){ NULL, 0, NULL, 0 };
    while ((opt = getopt_long(argc, argv, ":h", lo, NULL)) != -1) {
        switch (opt) {
        case O_SOCKET: o->socket = optarg; break;
        case O_SALT: o->salt = optarg; break;
        case O_MODEL: o->model_id = optarg; break;
        case O_JSON: o->json = true; break;
        case O_LIVE: o->live = true; break;
        case O_SVG: o->svg = optarg; break;
        case O_PRICES: o->prices = optarg; break;
        case O_PRESET: o->preset = optarg; break;
        case O_COLD_DIR: o->cold_dir = optarg; break;
        case O_BENCH: o->bench = optarg; break;
        case O_POLICY:
            if (each_item(optarg, o, clear_policies, add_policy) < 0)
                return EX_USAGE;
            break;
        case O_ADMIT:
            if (each_item(optarg, o, clear_admit, add_admit) < 0) {
                fprintf(stderr, "kvreplay: --cold-admit: want all, second-touch or both "
                                "(all,second-touch), got '%s'\n", optarg);
                return EX_USAGE;
            }
            break;
        case 'h':
            fputs(usage_text, stdout);
            exit(0);
        case ':':
            fprintf(stderr, "kvreplay: option '%s' needs a value\n", argv[optind - 1]);
            return usage();
        case '?':
            fprintf(stderr, "kvreplay: unknown option '%s'\n", argv[optind - 1]);
            return usage();
        default:
            if (set_opt(o, opt, optarg) < 0) {
                fprintf(stderr, "kvreplay: bad value '%s' for --%s (see --help)\n", optarg,
                        opt_name(lo, opt));
                return EX_USAGE;
            }
            break;
        }
    }
    if (optind < argc)
        o->trace = argv[optind++];
    if (optind < argc) {
        fprintf(stderr, "kvreplay: unexpected argument '%s'\n", argv[optind]);
        return usage();
    }
    return 0;
}

/* ---- prices ------------------------------------------------------------------ */

/* The bundled presets, for --preset without --prices, found from the
 * binary's folder: the tree's (build/kvreplay -> tools/), else the installed
 * one (bin/kvreplay -> share/kvtier/, as make install and the package put it). */
static const char *bundled_prices(char *buf, size_t cap)
{
    static const char *const rel[] = { "tools", "share/kvtier" };
    char exe[4096];
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    char *slash;

    if (n <= 0)
        return "tools/kvreplay_prices.json";
    exe[n] = '\0';
    slash = strrchr(exe, '/');
    if (slash)
        *slash = '\0';
    for (size_t i = 0; i < sizeof(rel) / sizeof(rel[0]); i++) {
        snprintf(buf, cap, "%s/../%s/kvreplay_prices.json", exe, rel[i]);
        if (access(buf, F_OK) == 0)
            break;
    }
    return buf;
}

/* Defaults, then the preset file, then flags. 0 or an exit code. */
static int setup_prices(const struct opts *o, struct kvr_prices *p)
{
    char err[512], path[4200];
    const char *file = o->prices;
    int rc;

    kvr_prices_default(p);
    if (!file && o->preset)
        file = bundled_prices(path, sizeof(path));
    if (file) {
        rc = kvr_prices_load(file, o->preset, p, err, sizeof(err));
        if (rc < 0) {
            fprintf(stderr, "kvreplay: prices: %s\n", err);
            return rc == -EINVAL ? EX_DATAERR : EX_NOINPUT;
        }
    }
    for (int i = 0; i < 8; i++)
        if (!isnan(o->over[i]))
            *price_field(p, i) = o->over[i];
    if (kvr_prices_check(p, err, sizeof(err)) < 0) {
        fprintf(stderr, "kvreplay: %s\n", err);
        return EX_USAGE;
    }
    return 0;
}

/* ---- reports: JSON ---------------------------------------------------------- */

static json_t *prices_json(const struct kvr_prices *p)
{
    json_t *j = json_object();

    json_object_set_new(j, "preset", json_string(p->preset));
    for (int i = 0; i < 8; i++) {
        char key[32];

        /* the flag names, as the preset file spells them */
        snprintf(key, sizeof(key), "%s", price_flag[i]);
        for (char *c = key; *c; c++)
            if (*c == '-')
                *c = '_';
        json_object_set_new(j, key, json_real(*price_field((struct kvr_prices *)p, i)));
    }
    return j;
}

static json_t *cost_json(const struct kvr_cost *c)
{
    json_t *j = json_object();

    json_object_set_new(j, "hours", json_real(c->hours));
    json_object_set_new(j, "hit_tokens", json_real(c->hit_tokens));
    json_object_set_new(j, "miss_tokens", json_real(c->miss_tokens));
    json_object_set_new(j, "api_nocache", json_real(c->api_nocache));
    json_object_set_new(j, "api_cache", json_real(c->api_cache));
    json_object_set_new(j, "api_saved", json_real(c->api_nocache - c->api_cache));
    json_object_set_new(j, "gpu_hours_nocache", json_real(c->gpu_h_nocache));
    json_object_set_new(j, "gpu_hours_cache", json_real(c->gpu_h_cache));
    json_object_set_new(j, "gpu_nocache", json_real(c->gpu_nocache));
    json_object_set_new(j, "gpu_cache", json_real(c->gpu_cache));
    json_object_set_new(j, "gpu_saved", json_real(c->gpu_nocache - c->gpu_cache));
    json_object_set_new(j, "ram_gib", json_real(c->ram_gib));
    json_object_set_new(j, "nvme_gib", json_real(c->nvme_gib));
    json_object_set_new(j, "ram_cost", json_real(c->ram_cost));
    json_object_set_new(j, "nvme_cost", json_real(c->nvme_cost));
    json_object_set_new(j, "net_saved", json_real(c->net_saved));
    json_object_set_new(j, "net_saved_per_hour", json_real(c->net_saved / c->hours));
    return j;
}

static double rate(uint64_t a, uint64_t b)
{
    return b ? (double)a / (double)b : 0.0;
}

static json_t *result_json(const struct kvr_result *r, const struct kvr_cost *c)
{
    static const char *const tname[TIER_L_N] = { "none", "hot", "warm", "cold" };
    json_t *j = json_object(), *t = json_object();

    json_object_set_new(j, "policy", json_string(r->policy ? r->policy : ""));
    json_object_set_new(j, "capacity_bytes", json_integer((json_int_t)r->capacity));
    json_object_set_new(j, "asked_blocks", json_integer((json_int_t)r->asked_blocks));
    json_object_set_new(j, "held_max", json_integer((json_int_t)r->held_max));
    json_object_set_new(j, "cold_bytes", json_integer((json_int_t)r->cold_capacity));
    if (r->cold_capacity && r->policy && strcmp(r->policy, "min") != 0) {
        json_object_set_new(j, "cold_admit", json_string(admit_name[r->admit]));
        json_object_set_new(j, "disk_bytes_written", json_integer((json_int_t)r->disk_bytes));
        json_object_set_new(j, "disk_bytes_per_hit_token",
                            json_real(r->hit_tokens ? (double)r->disk_bytes /
                                                      (double)r->hit_tokens : 0));
        json_object_set_new(j, "cold_admitted", json_integer((json_int_t)r->admitted));
        json_object_set_new(j, "cold_refused", json_integer((json_int_t)r->cold_refused));
        json_object_set_new(j, "cold_over_budget", json_integer((json_int_t)r->over_budget));
    }
    json_object_set_new(j, "pool_bytes", json_integer((json_int_t)r->pool_bytes));
    json_object_set_new(j, "slots", json_integer((json_int_t)r->slots));
    json_object_set_new(j, "requests", json_integer((json_int_t)r->requests));
    json_object_set_new(j, "blocks", json_integer((json_int_t)r->blocks));
    json_object_set_new(j, "hit_blocks", json_integer((json_int_t)r->hit_blocks));
    json_object_set_new(j, "block_hit_rate", json_real(rate(r->hit_blocks, r->blocks)));
    json_object_set_new(j, "tokens", json_integer((json_int_t)r->tokens));
    json_object_set_new(j, "hit_tokens", json_integer((json_int_t)r->hit_tokens));
    json_object_set_new(j, "token_hit_rate", json_real(rate(r->hit_tokens, r->tokens)));
    for (int i = TIER_L_HOT; i < TIER_L_N; i++)
        json_object_set_new(t, tname[i], json_pack("{sIsI}", "blocks",
                            (json_int_t)r->tier_blocks[i], "tokens",
                            (json_int_t)r->tier_tokens[i]));
    json_object_set_new(j, "tiers", t);
    json_object_set_new(j, "stored", json_integer((json_int_t)r->stored));
    json_object_set_new(j, "refused", json_integer((json_int_t)r->refused));
    json_object_set_new(j, "evicted", json_integer((json_int_t)r->evicted));
    json_object_set_new(j, "short_gets", json_integer((json_int_t)r->short_gets));
    json_object_set_new(j, "verify_errors", json_integer((json_int_t)r->verify_errors));
    json_object_set_new(j, "seconds", json_real(r->seconds));
    json_object_set_new(j, "requests_per_s",
                        json_real(r->seconds > 0 ? (double)r->requests / r->seconds : 0));
    json_object_set_new(j, "max_late_ms", json_real(r->max_late_ms));
    json_object_set_new(j, "cost", cost_json(c));
    return j;
}

/* ---- reports: tables ------------------------------------------------------- */

/* Money with the precision its size deserves, right-aligned in w columns. */
static void money(double v, int w)
{
    double a = fabs(v);

    printf("%*.*f", w, a >= 1000 ? 0 : a >= 1 ? 2 : 4, v);
}

static void print_prices(const struct kvr_prices *p)
{
    printf("prices (%s): $%g / $%g per M input tokens uncached / cached; %g params at "
           "%g TFLOP/s x %g MFU, $%g per GPU-hour; RAM $%g, NVMe $%g per GiB-hour\n",
           p->preset, p->miss_mtok, p->hit_mtok, p->params, p->gpu_flops / 1e12, p->mfu,
           p->gpu_hour, p->ram_gib_hour, p->nvme_gib_hour);
}

/* The cost table's first column: 10 wide, wider when its rows name their
 * policy and admission too (several replays at one capacity). */
static int label_w = 10;

static void cost_header(void)
{
    printf("%*s %10s %7s %9s %12s %12s %10s %14s\n", label_w, "capacity", "API $/h", "saved",
           "GPU-h/h", "GPU $ saved/h", "RAM+NVMe $/h", "net $/h", "marginal $/GiB");
}

/* One row of the cost table; prev (NULL: none) gives the marginal column:
 * GPU $/h saved per extra GiB of RAM from the previous capacity, to set
 * against the RAM price per GiB-hour. */
static void cost_row(const char *label, const struct kvr_cost *c, const struct kvr_cost *prev)
{
    double h = c->hours;

    printf("%*s ", label_w, label);
    money(c->api_cache / h, 10);
    printf(" %6.2f%% %9.4f ",
           c->api_nocache > 0 ? 100 * (c->api_nocache - c->api_cache) / c->api_nocache : 0,
           c->gpu_h_cache / h);
    money((c->gpu_nocache - c->gpu_cache) / h, 12);
    printf(" ");
    money((c->ram_cost + c->nvme_cost) / h, 12);
    printf(" ");
    money(c->net_saved / h, 10);
    if (prev && c->ram_gib > prev->ram_gib)
        printf(" %14.3g", ((c->gpu_nocache - c->gpu_cache) - (prev->gpu_nocache - prev->gpu_cache))
                              / h / (c->ram_gib - prev->ram_gib));
    printf("\n");
}

static void nocache_row(const struct kvr_cost *c)
{
    double h = c->hours;

    printf("%*s ", label_w, "no cache");
    money(c->api_nocache / h, 10);
    printf(" %7s %9.4f ", "-", c->gpu_h_nocache / h);
    printf("%12s %12s %10s\n", "-", "-", "-");
}

/* The in-process table: a row per replay, its policy (and admission, with
 * a cold tier), what it held, where its hits came from, what it wrote. */
static void store_header(bool cold)
{
    printf("%-6s %-12s %10s %9s %9s %10s %10s", "policy", cold ? "cold admit" : "", "capacity",
           "asked", "held", "block hit", "token hit");
    if (cold)
        printf(" %8s %8s %12s %14s", "warm", "cold", "disk written", "disk B/hit tok");
    printf(" %10s %10s\n", "evicted", "req/s");
}

static void store_row(const char *label, const struct kvr_result *r, bool cold)
{
    bool min = r->policy && strcmp(r->policy, "min") == 0;
    char a[32];

    printf("%-6s %-12s %10s %9llu %9llu %9.2f%% %9.2f%%", r->policy ? r->policy : "",
           cold && !min && r->policy ? admit_name[r->admit] : "", label,
           (unsigned long long)r->asked_blocks, (unsigned long long)r->held_max,
           100 * rate(r->hit_blocks, r->blocks), 100 * rate(r->hit_tokens, r->tokens));
    if (cold && min)
        printf(" %8s %8s %12s %14s", "-", "-", "-", "-");
    else if (cold)
        printf(" %8llu %8llu %12s %14.0f", (unsigned long long)r->tier_blocks[TIER_L_WARM],
               (unsigned long long)r->tier_blocks[TIER_L_COLD],
               kvr_size_str(r->disk_bytes, a, sizeof(a)),
               r->hit_tokens ? (double)r->disk_bytes / (double)r->hit_tokens : 0.0);
    printf(" %10llu %10.0f\n", (unsigned long long)r->evicted,
           r->seconds > 0 ? (double)r->requests / r->seconds : 0);
}

static void hit_header(bool tiers)
{
    printf("%10s %11s %10s %10s", "capacity", "blocks held", "block hit", "token hit");
    if (tiers)
        printf(" %8s %8s %8s", "hot", "warm", "cold");
    printf(" %10s %10s\n", tiers ? "stored" : "evicted", "req/s");
}

static void hit_row(const char *label, const struct kvr_result *r, bool tiers)
{
    printf("%10s %11llu %9.2f%% %9.2f%%", label, (unsigned long long)r->slots,
           100 * rate(r->hit_blocks, r->blocks), 100 * rate(r->hit_tokens, r->tokens));
    if (tiers)
        printf(" %8llu %8llu %8llu", (unsigned long long)r->tier_blocks[TIER_L_HOT],
               (unsigned long long)r->tier_blocks[TIER_L_WARM],
               (unsigned long long)r->tier_blocks[TIER_L_COLD]);
    printf(" %10llu %10.0f\n", (unsigned long long)(tiers ? r->stored : r->evicted),
           r->seconds > 0 ? (double)r->requests / r->seconds : 0);
}

/* ---- the three modes ------------------------------------------------------ */

/* Write j to stdout (consumes it). 0 or EX_IOERR. */
static int emit_json(json_t *j)
{
    int rc = json_dumpf(j, stdout, JSON_INDENT(2) | JSON_REAL_PRECISION(10));

    json_decref(j);
    if (rc < 0)
        return EX_IOERR;
    putchar('\n');
    return 0;
}

/* --hits/--misses: the cost model on counts from elsewhere (tierd's stats). */
static int cost_only(const struct opts *o, const struct kvr_prices *p)
{
    double hours = isnan(o->hours) ? 1.0 : o->hours;
    uint64_t ram = o->ram_bytes ? o->ram_bytes : o->ncaps == 1 ? o->caps[0] : 0;
    struct kvr_cost c;
    char label[64];

    kvr_cost_compute(p, o->hits, o->misses, hours, (double)ram, (double)o->nvme_bytes, &c);
    if (o->json) {
        json_t *j = json_object();

        json_object_set_new(j, "prices", prices_json(p));
        json_object_set_new(j, "cost", cost_json(&c));
        return emit_json(j);
    }
    printf("cost of %.0f cached + %.0f uncached input tokens over %g h (token hit rate %.2f%%)\n",
           o->hits, o->misses, hours,
           o->hits + o->misses > 0 ? 100 * o->hits / (o->hits + o->misses) : 0.0);
    print_prices(p);
    printf("%-22s %14s %14s %14s\n", "", "without cache", "with cache", "saved");
    printf("%-22s %14.2f %14.2f %14.2f\n", "API bill $", c.api_nocache, c.api_cache,
           c.api_nocache - c.api_cache);
    printf("%-22s %14.4f %14.4f %14.4f\n", "prefill GPU-hours", c.gpu_h_nocache, c.gpu_h_cache,
           c.gpu_h_nocache - c.gpu_h_cache);
    printf("%-22s %14.2f %14.2f %14.2f\n", "GPU $", c.gpu_nocache, c.gpu_cache,
           c.gpu_nocache - c.gpu_cache);
    snprintf(label, sizeof(label), "RAM $ (%.1f GiB)", c.ram_gib);
    printf("%-22s %14s %14.4f\n", label, "", c.ram_cost);
    snprintf(label, sizeof(label), "NVMe $ (%.1f GiB)", c.nvme_gib);
    printf("%-22s %14s %14.4f\n", label, "", c.nvme_cost);
    printf("net saving $: %.2f over %g h, %.2f per hour\n", c.net_saved, hours,
           c.net_saved / hours);
    return 0;
}

/* --live: the prefix-hit and missed tokens a running tierd has seen since it
 * started (every namespace of this tenant: hit tokens, and missed lookup
 * keys x block tokens), over its uptime, with its RAM and NVMe as the
 * storage charged; then the cost model as for --hits/--misses. */
static int live_cost(struct opts *o, const struct kvr_prices *p)
{
    const char *path = o->socket ? o->socket : kvt_default_socket();
    kvt_ns_info *ns = NULL;
    kvt_client *c;
    kvt_stats st;
    int rc = kvt_connect(path, &c), n = 0;

    if (rc < 0) {
        fprintf(stderr, "kvreplay: cannot reach tierd at %s: %s\n", path, kvt_strerror(rc));
        return EX_UNAVAILABLE;
    }
    rc = kvt_stats_get(c, &st);
    if (rc == 0)
        rc = n = kvt_admin_namespaces(c, NULL, 0);
    if (rc > 0 && !(ns = calloc((size_t)n, sizeof(*ns))))
        rc = -ENOMEM;
    if (rc > 0) {
        rc = kvt_admin_namespaces(c, ns, (size_t)n);
        n = rc < n ? rc : n;
    }
    kvt_close(c);
    if (rc < 0) {
        fprintf(stderr, "kvreplay: tierd at %s: %s\n", path, kvt_strerror(rc));
        free(ns);
        return EX_UNAVAILABLE;
    }
    o->hits = o->misses = 0;
    for (int i = 0; i < n; i++) {
        o->hits += (double)ns[i].hit_tokens;
        o->misses += (double)(ns[i].lookup_keys - ns[i].hit_keys) * ns[i].block_tokens;
    }
    free(ns);
    if (isnan(o->hours))
        o->hours = st.uptime_ms > 0 ? (double)st.uptime_ms / 3.6e6 : 1e-9;
    if (!o->ram_bytes)
        o->ram_bytes = st.tier[KVT_TIER_WARM].bytes_capacity;
    if (!o->nvme_bytes)
        o->nvme_bytes = st.tier[KVT_TIER_COLD].bytes_capacity;
    if (!o->json)
        printf("tierd at %s: %d namespaces, up %.3f h (missed tokens: missed lookup keys x "
               "block tokens)\n", path, n, o->hours);
    return cost_only(o, p);
}

/* The trace's span in hours (0 when every request has the same time). */
static double trace_hours(const struct kvr_trace *tr)
{
    uint64_t lo = UINT64_MAX, hi = 0;

    for (size_t i = 0; i < tr->nreq; i++) {
        lo = tr->req[i].ts_ms < lo ? tr->req[i].ts_ms : lo;
        hi = tr->req[i].ts_ms > hi ? tr->req[i].ts_ms : hi;
    }
    return (double)(hi - lo) / 3.6e6;
}

/* Everything a trace replay reports. */
struct report {
    const struct opts *o;
    const struct kvr_trace *tr;
    const struct kvr_run_opts *ro;
    const struct kvr_prices *p;
    double hours;
    bool span_given;              /* hours came from --hours or the trace */
    struct kvr_result *res;       /* n replays, by capacity */
    struct kvr_cost *cost;
    size_t n;
    struct kvr_result unb;        /* the unbounded cache */
    struct kvr_cost unb_cost;
};

static int report_json(const struct report *r)
{
    json_t *j = json_object(), *t = json_object(), *runs = json_array();

    json_object_set_new(t, "path", json_string(r->o->trace));
    json_object_set_new(t, "requests", json_integer((json_int_t)r->tr->nreq));
    json_object_set_new(t, "blocks", json_integer((json_int_t)r->tr->nkeys));
    json_object_set_new(t, "distinct_blocks", json_integer((json_int_t)r->tr->distinct));
    json_object_set_new(t, "input_tokens", json_integer((json_int_t)r->tr->tokens));
    json_object_set_new(t, "hours", json_real(r->hours));
    json_object_set_new(t, "block_tokens", json_integer(r->ro->block_tokens));
    json_object_set_new(t, "block_bytes", json_integer((json_int_t)r->ro->block_bytes));
    json_object_set_new(j, "trace", t);
    json_object_set_new(j, "mode", json_string(r->o->socket ? "tierd" : "store"));
    if (!r->o->socket) {
        json_object_set_new(j, "high_wm", json_real(r->ro->high_wm));
        json_object_set_new(j, "low_wm", json_real(r->ro->low_wm));
    }
    json_object_set_new(j, "prices", prices_json(r->p));
    for (size_t i = 0; i < r->n; i++)
        json_array_append_new(runs, result_json(&r->res[i], &r->cost[i]));
    json_object_set_new(j, "runs", runs);
    json_object_set_new(j, "unbounded", result_json(&r->unb, &r->unb_cost));
    return emit_json(j);
}

/* Run i's label in the cost table: its capacity (the pool, against tierd),
 * with its policy and admission when several replays share a capacity. */
static const char *run_label(const struct report *r, size_t i, char *buf, size_t cap)
{
    const struct kvr_result *x = &r->res[i];
    char sz[32];

    kvr_size_str(x->capacity ? x->capacity : x->ram_bytes, sz, sizeof(sz));
    if (label_w == 10)
        snprintf(buf, cap, "%s", sz);
    else if (x->cold_capacity && strcmp(x->policy, "min") != 0)
        snprintf(buf, cap, "%s %s %s", x->policy, x->admit == TIER_ADMIT_ALL ? "all" : "2nd",
                 sz);
    else
        snprintf(buf, cap, "%s %s", x->policy, sz);
    return buf;
}

/* What the in-process store held, and why it may differ from the capacity
 * asked: the pool is whole segments; the watermarks are scaled to the ask. */
static void held_note(const struct report *r)
{
    for (size_t i = 0; i < r->n; i++) {
        const struct kvr_result *x = &r->res[i];
        char a[32], b[32];

        if (!x->pool_bytes || x->pool_bytes == x->capacity)
            continue;
        printf("(asked: capacity / slot bytes; held: the most blocks in warm at any lookup. The "
               "pool is whole segments: %s became %s, %llu slots; the watermarks are scaled to "
               "%s, so the store holds what was asked)\n",
               kvr_size_str(x->capacity, a, sizeof(a)), kvr_size_str(x->pool_bytes, b, sizeof(b)),
               (unsigned long long)x->slots, kvr_size_str(x->capacity, a, sizeof(a)));
        return;
    }
    printf("(asked: capacity / slot bytes; held: the most blocks in warm at any lookup)\n");
}

/* With --cold-admit all,second-touch: at each capacity, what second-touch
 * admission saves in disk writes and what it costs in token hit rate
 * (relative to the hit rate of writing every block); with --bench, as
 * make bench's lines. */
static void admission_report(const struct report *r)
{
    const struct opts *o = r->o;

    if (o->socket || o->nadmit != 2 || !(o->cold_bytes || o->cold_ratio > 0))
        return;
    printf("\nNVMe admission: second-touch against all (hit loss relative to all's token hit "
           "rate)\n");
    printf("%10s %12s %12s %9s %10s %10s %9s\n", "capacity", "disk (all)", "disk (2nd)", "cut",
           "hit (all)", "hit (2nd)", "loss");
    for (size_t i = 0; i < r->n; i++) {
        const struct kvr_result *x = &r->res[i], *y = NULL;
        double cut, loss;
        char a[32], b[32], c[32];

        if (strcmp(x->policy, "lru") != 0 || x->admit != TIER_ADMIT_ALL)
            continue;
        for (size_t k = 0; k < r->n; k++)
            if (r->res[k].policy == x->policy && r->res[k].admit == TIER_ADMIT_REUSED &&
                r->res[k].capacity == x->capacity)
                y = &r->res[k];
        if (!y)
            continue;
        cut = x->disk_bytes ? 100.0 * (1.0 - (double)y->disk_bytes / (double)x->disk_bytes) : 0;
        loss = x->hit_tokens ? 100.0 * (1.0 - (double)y->hit_tokens / (double)x->hit_tokens)
                             : 0;
        kvr_size_str(x->capacity, a, sizeof(a));
        printf("%10s %12s %12s %8.1f%% %9.2f%% %9.2f%% %8.2f%%\n", a,
               kvr_size_str(x->disk_bytes, b, sizeof(b)),
               kvr_size_str(y->disk_bytes, c, sizeof(c)), cut,
               100 * rate(x->hit_tokens, x->tokens), 100 * rate(y->hit_tokens, y->tokens), loss);
        if (o->bench) {
            printf("bench: %s_%s_disk_write_cut %.1f %% target >= 50\n", o->bench, a, cut);
            printf("bench: %s_%s_hit_loss %.2f %% target <= 2\n", o->bench, a, loss);
        }
    }
}

static void report_text(const struct report *r)
{
    const struct kvr_trace *tr = r->tr;
    bool tierd = r->o->socket != NULL, cold = r->o->cold_bytes || r->o->cold_ratio > 0;
    char a[32], b[32], dwpd[64] = "", lbl[80];

    if (r->o->cold_dwpd > 0)
        snprintf(dwpd, sizeof(dwpd), ", write budget %g drive writes per day", r->o->cold_dwpd);
    printf("kvreplay: %s: %zu requests, %zu blocks (%llu distinct), %llu input tokens, "
           "%.3f h\n", r->o->trace, tr->nreq, tr->nkeys, (unsigned long long)tr->distinct,
           (unsigned long long)tr->tokens, r->hours);
    printf("blocks of %u tokens, %s each", r->ro->block_tokens,
           kvr_size_str(r->ro->block_bytes, a, sizeof(a)));
    if (tierd)
        printf("; against tierd at %s: warm %s (its pool: --warm-bytes rounded up to whole "
               "segments), cold %s\n",
               r->o->socket, kvr_size_str(r->res[0].ram_bytes, a, sizeof(a)),
               kvr_size_str(r->res[0].nvme_bytes, b, sizeof(b)));
    else if (!cold)
        printf("; in-process store, watermarks %.2f/%.2f, no cold tier\n", r->ro->high_wm,
               r->ro->low_wm);
    else if (r->o->cold_bytes)
        printf("; in-process store, watermarks %.2f/%.2f, cold tier %s%s\n", r->ro->high_wm,
               r->ro->low_wm, kvr_size_str(r->o->cold_bytes, b, sizeof(b)), dwpd);
    else
        printf("; in-process store, watermarks %.2f/%.2f, cold tier %gx warm%s\n",
               r->ro->high_wm, r->ro->low_wm, r->o->cold_ratio, dwpd);
    printf("\nprefix hit rate%s\n", tierd ? " (hit blocks by tier at lookup)" : " vs capacity");
    if (tierd) {
        hit_header(tierd);
        for (size_t i = 0; i < r->n; i++)
            hit_row(kvr_size_str(r->res[i].ram_bytes, a, sizeof(a)), &r->res[i], tierd);
        hit_row("unbounded", &r->unb, tierd);
    } else {
        store_header(cold);
        for (size_t i = 0; i < r->n; i++)
            store_row(kvr_size_str(r->res[i].capacity, a, sizeof(a)), &r->res[i], cold);
        store_row("unbounded", &r->unb, false);
        held_note(r);
    }
    if (tierd) {
        printf("gets shorter than their lookup: %llu; bytes verified on every get: %llu wrong",
               (unsigned long long)r->res[0].short_gets,
               (unsigned long long)r->res[0].verify_errors);
        if (r->o->speed > 0)
            printf("; paced at %gx, worst lateness %.1f ms", r->o->speed,
                   r->res[0].max_late_ms);
        printf("\n");
    }
    printf("(unbounded: every distinct block kept, %s of blocks)\n",
           kvr_size_str(r->unb.capacity, a, sizeof(a)));
    printf("\ncost per hour of trace time%s\n",
           r->span_given ? "" : " (the trace has no time span: taken as 1 h)");
    print_prices(r->p);
    label_w = tierd || r->n <= r->o->ncaps ? 10 : 22;
    cost_header();
    nocache_row(&r->cost[0]);
    for (size_t i = 0; i < r->n; i++)
        cost_row(run_label(r, i, lbl, sizeof(lbl)), &r->cost[i], i ? &r->cost[i - 1] : NULL);
    cost_row("unbounded", &r->unb_cost, r->n ? &r->cost[r->n - 1] : NULL);
    printf("(marginal: GPU $/h saved per extra GiB of warm capacity, against RAM at $%g per "
           "GiB-hour)\n", r->p->ram_gib_hour);
    admission_report(r);
}

static int trace_exit(int rc)
{
    return rc == -EINVAL ? EX_DATAERR : rc == -ENOMEM ? EX_OSERR : EX_NOINPUT;
}

/* Run the replays of a loaded trace into r (res and cost allocated here).
 * 0 or an exit code after saying why. */
static int replay(struct report *r)
{
    const struct opts *o = r->o;
    char err[512];
    int rc;

    r->n = 1;
    if (!o->socket) {
        r->n = 0;
        for (size_t i = 0; i < o->npol; i++)
            r->n += o->ncaps * (o->pol[i]->store ? o->nadmit : 1);
    }
    r->res = calloc(r->n, sizeof(*r->res));
    r->cost = calloc(r->n, sizeof(*r->cost));
    if (!r->res || !r->cost) {
        fprintf(stderr, "kvreplay: out of memory\n");
        return EX_OSERR;
    }
    if (kvr_run_unbounded((struct kvr_trace *)r->tr, r->ro, &r->unb) < 0) {
        fprintf(stderr, "kvreplay: out of memory\n");
        return EX_OSERR;
    }
    kvr_cost_compute(r->p, (double)r->unb.hit_tokens,
                     (double)(r->unb.tokens - r->unb.hit_tokens), r->hours,
                     (double)r->unb.ram_bytes, (double)o->nvme_bytes, &r->unb_cost);
    for (size_t i = 0; i < r->n; i++) {
        struct kvr_result *res = &r->res[i];
        /* run i: policy by policy, admission by admission, capacity by capacity */
        size_t k = i, pi = 0, ai = 0, ci;

        while (!o->socket && k >= o->ncaps * (o->pol[pi]->store ? o->nadmit : 1))
            k -= o->ncaps * (o->pol[pi++]->store ? o->nadmit : 1);
        ci = k % o->ncaps;
        ai = k / o->ncaps;
        if (o->socket) {
            rc = kvr_run_tierd(r->tr, r->ro, res, err, sizeof(err));
        } else {
            struct kvr_run_opts ro = *r->ro;

            ro.admit = o->admit[ai];
            ro.evict = o->pol[pi]->evict;
            rc = o->pol[pi]->run(r->tr, &ro, o->caps[ci], res, err, sizeof(err));
            res->admit = ro.admit;
        }
        res->policy = o->socket ? "tierd" : o->pol[pi]->name;
        if (rc < 0) {
            fprintf(stderr, "kvreplay: %s\n", err);
            if (o->socket && res->requests == 0 && (rc == -ENOENT || rc == -ECONNREFUSED))
                return EX_UNAVAILABLE;
            return rc == -EFBIG ? EX_USAGE : EX_SOFTWARE;
        }
        if (res->verify_errors)
            fprintf(stderr, "kvreplay: %s\n", err);
        if (!o->socket)
            res->nvme_bytes = o->nvme_bytes ? o->nvme_bytes : res->cold_capacity;
        kvr_cost_compute(r->p, (double)res->hit_tokens, (double)(res->tokens - res->hit_tokens),
                         r->hours, (double)res->ram_bytes, (double)res->nvme_bytes, &r->cost[i]);
    }
    return 0;
}

/* Check option combinations and fill in the replay options. */
static int check_opts(struct opts *o, struct kvr_run_opts *ro)
{
    if (o->block_bytes && o->bytes_per_token) {
        fprintf(stderr, "kvreplay: give --block-bytes or --bytes-per-token, not both\n");
        return EX_USAGE;
    }
    if (o->low_wm > o->high_wm) {
        fprintf(stderr, "kvreplay: --low-wm must not exceed --high-wm\n");
        return EX_USAGE;
    }
    if (o->speed > 0 && !o->socket) {
        fprintf(stderr, "kvreplay: --speed paces a replay against tierd (--socket)\n");
        return EX_USAGE;
    }
    if (o->socket && o->ncaps) {
        fprintf(stderr, "kvreplay: with --socket the capacity is tierd's (--warm-bytes, "
                        "--cold-bytes): drop --capacity\n");
        return EX_USAGE;
    }
    if (o->socket && (o->npol || o->cold_bytes || o->cold_ratio > 0 || o->nadmit ||
                      o->cold_dwpd > 0 || o->cold_dir)) {
        fprintf(stderr, "kvreplay: with --socket the policy, cold tier and admission are "
                        "tierd's (its --cold-bytes, --cold-admit, --cold-dwpd)\n");
        return EX_USAGE;
    }
    if ((o->cold_dwpd > 0 || o->cold_dir) && !o->cold_bytes && !(o->cold_ratio > 0)) {
        fprintf(stderr, "kvreplay: --cold-dwpd and --cold-dir need a cold tier (--cold)\n");
        return EX_USAGE;
    }
    if (o->bench && !(o->nadmit == 2 && (o->cold_bytes || o->cold_ratio > 0))) {
        fprintf(stderr, "kvreplay: --bench compares admissions: give --cold and "
                        "--cold-admit all,second-touch\n");
        return EX_USAGE;
    }
    if (o->ncaps == 0)
        parse_caps("8G,32G,128G,512G,2T", o);
    if (o->npol == 0)
        o->pol[o->npol++] = kvr_policy_find("lru");
    if (o->nadmit == 0)
        o->admit[o->nadmit++] = TIER_ADMIT_ALL; /* tierd's default */
    *ro = (struct kvr_run_opts){
        .block_tokens = o->block_tokens,
        .block_bytes = o->block_bytes ? o->block_bytes
                       : (uint64_t)o->block_tokens * (o->bytes_per_token ? o->bytes_per_token
                                                                           : 131072),
        .high_wm = o->high_wm, .low_wm = o->low_wm, .speed = o->speed, .socket = o->socket,
        .model_id = o->model_id, .cold_bytes = o->cold_bytes, .cold_ratio = o->cold_ratio,
        .cold_dir = o->cold_dir, .cold_dwpd = o->cold_dwpd,
    };
    if (ro->block_bytes > KVT_BLOCK_MAX) {
        fprintf(stderr, "kvreplay: blocks of %llu bytes: more than kvtier's limit\n",
                (unsigned long long)ro->block_bytes);
        return EX_USAGE;
    }
    return 0;
}

int main(int argc, char **argv)
{
    struct opts o = {
        .block_tokens = 512, .high_wm = 0.95, .low_wm = 0.85, .hours = NAN, .hits = NAN,
        .misses = NAN, .salt = "",
    };
    struct kvr_run_opts ro;
    struct kvr_prices p;
    struct kvr_trace tr;
    struct report r = { .o = &o, .tr = &tr, .ro = &ro, .p = &p };
    char err[512];
    int rc;

    for (int i = 0; i < 8; i++)
        o.over[i] = NAN;
    rc = parse_args(argc, argv, &o);
    if (rc)
        return rc;
    rc = setup_prices(&o, &p);
    if (rc)
        return rc;
    if (o.live) {
        if (o.trace || !isnan(o.hits) || !isnan(o.misses)) {
            fprintf(stderr, "kvreplay: --live takes no trace and no --hits/--misses\n");
            return usage();
        }
        return live_cost(&o, &p);
    }
    if (!isnan(o.hits) || !isnan(o.misses)) {
        if (isnan(o.hits) || isnan(o.misses) || o.trace) {
            fprintf(stderr, "kvreplay: --hits and --misses go together, without a trace\n");
            return usage();
        }
        return cost_only(&o, &p);
    }
    if (!o.trace) {
        fprintf(stderr, "kvreplay: no trace given\n");
        return usage();
    }
    rc = check_opts(&o, &ro);
    if (rc)
        return rc;
    rc = kvr_trace_load(o.trace, o.salt, o.limit, &tr, err, sizeof(err));
    if (rc < 0) {
        fprintf(stderr, "kvreplay: %s\n", err);
        return trace_exit(rc);
    }
    r.hours = isnan(o.hours) ? trace_hours(&tr) : o.hours;
    r.span_given = r.hours > 0;
    if (!r.span_given)
        r.hours = 1.0;
    rc = replay(&r);
    if (rc == 0 && o.svg &&
        (rc = kvr_svg_write(o.svg, strrchr(o.trace, '/') ? strrchr(o.trace, '/') + 1 : o.trace,
                            r.res, r.cost, r.n)) < 0) {
        fprintf(stderr, "kvreplay: %s: %s\n", o.svg, strerror(-rc));
        rc = EX_CANTCREAT;
    }
    if (rc == 0) {
        if (o.json) {
            rc = report_json(&r);
        } else {
            report_text(&r);
            rc = fflush(stdout) != 0 || ferror(stdout) ? EX_IOERR : 0;
        }
        if (rc == 0 && r.n && r.res[0].verify_errors)
            rc = 1;
    }
    free(r.res);
    free(r.cost);
    kvr_trace_fini(&tr);
    return rc;
}
