/* SPDX-License-Identifier: MIT */
/*
 * kvreplay_trace.c - kvreplay, run as a program, on traces small enough to
 * work out by hand (exact block and token hits, the exact leaf-first LRU
 * outcome, watermark eviction), on the bundled real trace (the capacity
 * curve is monotone and ends at the unbounded cache), against a private
 * tierd (same hits as in-process; a corrupted block is caught), on bad
 * input (line numbers, exit 65, no crash), and its cost arithmetic.
 * Under KVT_TEST_VALGRIND kvreplay itself runs under memcheck too.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <openssl/sha.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "kvt_common.h"
#include "t.h"

/* One run of kvreplay: exit status and everything it printed. */
struct run {
    int status;
    char *out, *err; /* NUL-terminated, owned */
    json_t *json;    /* stdout parsed, when it was JSON */
};

static char tmp[64]; /* this test's folder */

static void tmp_make(void)
{
    t_tmpdir("kvr-test", tmp, sizeof(tmp));
}

static void tmp_remove(void)
{
    if (tmp[0] && cmn_rmtree(tmp) != 0)
        fprintf(stderr, "kvreplay_trace: could not remove %s\n", tmp);
}

TestSuite(kvreplay_trace, .init = tmp_make, .fini = tmp_remove, .timeout = 120);

/* A file in the test folder with the given text; returns its path (static
 * buffer per slot 0..3). */
static const char *write_file(int slot, const char *name, const char *text)
{
    static char path[4][128];
    FILE *f;

    snprintf(path[slot], sizeof(path[slot]), "%s/%s", tmp, name);
    f = fopen(path[slot], "w");
    cr_assert_not_null(f, "fopen %s: %s", path[slot], strerror(errno));
    fputs(text, f);
    cr_assert_eq(fclose(f), 0);
    return path[slot];
}

static char *slurp(const char *path)
{
    FILE *f = fopen(path, "r");
    char *buf;
    long n;

    cr_assert_not_null(f, "fopen %s: %s", path, strerror(errno));
    fseek(f, 0, SEEK_END);
    n = ftell(f);
    rewind(f);
    buf = malloc((size_t)n + 1);
    cr_assert_not_null(buf);
    cr_assert_eq(fread(buf, 1, (size_t)n, f), (size_t)n);
    buf[n] = '\0';
    fclose(f);
    return buf;
}

/* Run kvreplay with args (NULL-terminated); stdout and stderr go to files
 * that are read back. Under KVT_TEST_VALGRIND, kvreplay runs under memcheck
 * and any error or leak makes it exit 9. */
static struct run kvr(const char *const *args)
{
    struct run r = {0};

    r.status = t_run("kvreplay", args, 1, &r.out, &r.err);
    r.json = json_loads(r.out, 0, NULL);
    return r;
}

static void run_free(struct run *r)
{
    free(r->out);
    free(r->err);
    json_decref(r->json);
}

/* A successful JSON run: exit 0 and parsable output. */
static struct run kvr_ok(const char *const *args)
{
    struct run r = kvr(args);

    cr_assert_eq(r.status, 0, "kvreplay exit status: expected 0, got %d; stderr:\n%s",
                 r.status, r.err);
    cr_assert_not_null(r.json, "stdout is not JSON:\n%s", r.out);
    return r;
}

/* The value at a path like "runs/0/hit_blocks" (numbers index arrays). */
static json_t *at(json_t *j, const char *path)
{
    char buf[128], *tok, *save;

    snprintf(buf, sizeof(buf), "%s", path);
    for (tok = strtok_r(buf, "/", &save); tok && j; tok = strtok_r(NULL, "/", &save))
        j = json_is_array(j) ? json_array_get(j, strtoull(tok, NULL, 10))
                             : json_object_get(j, tok);
    cr_assert_not_null(j, "no %s in the JSON output", path);
    return j;
}

static long long ji(json_t *j, const char *path)
{
    json_t *v = at(j, path);

    cr_assert(json_is_integer(v), "%s is not an integer", path);
    return json_integer_value(v);
}

static double jd(json_t *j, const char *path)
{
    json_t *v = at(j, path);

    cr_assert(json_is_number(v), "%s is not a number", path);
    return json_number_value(v);
}

#define EXPECT_I(j, path, want)                                                          \
    cr_expect_eq(ji(j, path), (long long)(want), "%s: expected %lld, got %lld", path,    \
                 (long long)(want), ji(j, path))

/* Relative closeness for computed money (doubles through JSON). */
#define EXPECT_D(j, path, want)                                                          \
    cr_expect(fabs(jd(j, path) - (want)) <= 1e-9 * (fabs(want) > 1.0 ? fabs(want) : 1.0), \
              "%s: expected %.12g, got %.12g", path, (double)(want), jd(j, path))

/*
 * Many EXPECT_I / EXPECT_D at once: spec is "name=value ..." for the paths
 * prefix + name. A real value may be a quotient ("5/12") so the sums in
 * the comments stay readable.
 */
static void expect_spec(json_t *j, const char *prefix, const char *spec, bool real)
{
    char buf[1024], *tok, *save;

    snprintf(buf, sizeof(buf), "%s", spec);
    cr_assert_lt(strlen(spec), sizeof(buf), "spec too long: %s", spec);
    for (tok = strtok_r(buf, " ", &save); tok; tok = strtok_r(NULL, " ", &save)) {
        char path[192], *eq = strchr(tok, '='), *end;
        double want;

        cr_assert_not_null(eq, "spec item %s has no =", tok);
        *eq = '\0';
        snprintf(path, sizeof(path), "%s%s", prefix, tok);
        want = strtod(eq + 1, &end);
        if (*end == '/')
            want /= strtod(end + 1, &end);
        cr_assert_eq(*end, '\0', "spec item %s: bad value %s", tok, eq + 1);
        if (real)
            EXPECT_D(j, path, want);
        else
            EXPECT_I(j, path, (long long)want);
    }
}

#define EXPECT_INTS(j, prefix, spec) expect_spec(j, prefix, spec, false)
#define EXPECT_REALS(j, prefix, spec) expect_spec(j, prefix, spec, true)

/* ---- hand-made traces, in-process ------------------------------------------- */

/*
 * Five requests, 512-token blocks, a capacity that holds everything:
 *   r1 [1,2,3] 1200 tokens: nothing cached                   0 blocks,    0 tokens
 *   r2 [1,2,4] 1500: 1,2 cached (same prefix)                2 blocks, 1024 tokens
 *   r3 [1,5]    700: 1 cached                                1 block,   512 tokens
 *   r4 [1,2]   1000: 1,2 cached; 2 x 512 capped at 1000      2 blocks, 1000 tokens
 *   r5 [6,2]   1024: 6 new; its "2" follows 6, not 1: a
 *                    different key, so no hit                0 blocks,    0 tokens
 * Blocks 3+3+2+2+2 = 12, hit 5. Tokens 1200+1500+700+1000+1024 = 5424,
 * hit 2536. Stored: 3 + 1 + 1 + 0 + 2 = 7 distinct blocks.
 */
static const char shared_prefix_trace[] =
    "{\"timestamp\": 0, \"input_length\": 1200, \"output_length\": 5, \"hash_ids\": [1, 2, 3]}\n"
    "{\"timestamp\": 1000, \"input_length\": 1500, \"output_length\": 5, \"hash_ids\": [1, 2, 4]}\n"
    "\n"
    "{\"timestamp\": 2000, \"input_length\": 700, \"hash_ids\": [1, 5]}\n"
    "{\"timestamp\": 3000, \"input_length\": 1000, \"hash_ids\": [1, 2]}\n"
    "{\"timestamp\": 3600, \"input_length\": 1024, \"hash_ids\": [6, 2]}\n";

Test(kvreplay_trace, shared_prefixes_give_exact_hits_when_all_fits)
{
    const char *tr = write_file(0, "t.jsonl", shared_prefix_trace);
    struct run r = kvr_ok((const char *const[]){ tr, "--block-bytes", "4096", "--capacity",
                                                 "64M,1G", "--json", NULL });

    for (int i = 0; i < 2; i++) {
        char p[64];

        snprintf(p, sizeof(p), "runs/%d/", i);
        EXPECT_INTS(r.json, p, "requests=5 blocks=12 hit_blocks=5 tokens=5424 hit_tokens=2536 "
                               "tiers/warm/blocks=5 tiers/warm/tokens=2536 "
                               "tiers/cold/blocks=0 stored=7 evicted=0");
        EXPECT_REALS(r.json, p, "block_hit_rate=5/12 token_hit_rate=2536/5424");
    }
    EXPECT_I(r.json, "runs/0/capacity_bytes", 64 << 20);
    EXPECT_I(r.json, "runs/1/capacity_bytes", 1 << 30);
    EXPECT_INTS(r.json, "", "unbounded/hit_blocks=5 unbounded/hit_tokens=2536 "
                            "trace/distinct_blocks=7 trace/input_tokens=5424");
    /* 0 .. 3600 ms */
    EXPECT_D(r.json, "trace/hours", 3.6 / 3600);
    run_free(&r);
}

/*
 * Leaf-first LRU, exactly. 2 MiB blocks in an 8 MiB pool: 4 segments of
 * 2 MiB, one slot each, so 4 blocks. Watermarks at 1.0: only a put that
 * finds no free slot evicts (the LRU leaf at the tail of the list).
 *   r1 [1,2]  store 1<-2.                    LRU leaves: 2
 *   r2 [3,4]  store 3<-4. Full.              leaves: 4 2 (tail last)
 *   r3 [5]    evict leaf 2 (not its parent 1, although 1 is older: a
 *             plain LRU would take 1 and leave 2 useless); 1 becomes a
 *             leaf at the tail. Store 5.     leaves: 5 4 1
 *   r4 [1,2]  hit 1 (plain LRU: 0). The get moves 1 to the head, putting
 *             2 under it makes 1 a parent; evict tail 4, 3 becomes a leaf
 *             at the tail. Store 2.          leaves: 2 5 3
 *   r5 [3,4]  hit 3; 3 becomes a parent; evict tail 5. Store 4.
 * Hits: 2 of 9 blocks, 1024 of 4608 tokens; 3 evictions; 7 blocks stored.
 */
static const char lru_trace[] =
    "{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [1, 2]}\n"
    "{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [3, 4]}\n"
    "{\"timestamp\": 0, \"input_length\": 512, \"hash_ids\": [5]}\n"
    "{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [1, 2]}\n"
    "{\"timestamp\": 0, \"input_length\": 1024, \"hash_ids\": [3, 4]}\n";

Test(kvreplay_trace, leaf_first_lru_outcome_is_exact)
{
    const char *tr = write_file(0, "lru.jsonl", lru_trace);
    struct run r = kvr_ok((const char *const[]){ tr, "--block-bytes", "2M", "--capacity", "8M",
                                                 "--high-wm", "1", "--low-wm", "1", "--json",
                                                 NULL });

    EXPECT_INTS(r.json, "runs/0/", "slots=4 blocks=9 hit_blocks=2 hit_tokens=1024 tokens=4608 "
                                   "evicted=3 stored=7 refused=0");
    /* unbounded: r4 and r5 hit both blocks */
    EXPECT_I(r.json, "unbounded/hit_blocks", 4);
    run_free(&r);
}

/*
 * tier_maintain() between requests, as tierd: 16 slots (32 MiB of 2 MiB
 * blocks), default watermarks 0.95 / 0.85 (15.2 / 13.6 slots). Requests
 * [1] .. [16] fill all 16 slots; after r16's put the mover drains to 13:
 * blocks 1, 2, 3 (the oldest) leave. r17 [4] hits; r18 [1] misses (it was
 * evicted by the watermark, not for lack of a slot: without the mover it
 * would still be there). 1 hit of 18 blocks, 3 evictions.
 */
Test(kvreplay_trace, watermarks_evict_between_requests)
{
    char text[2048];
    size_t n = 0;
    const char *tr;
    struct run r;

    for (int i = 1; i <= 16; i++)
        n += (size_t)snprintf(text + n, sizeof(text) - n,
                              "{\"timestamp\": %d, \"input_length\": 512, \"hash_ids\": [%d]}\n",
                              i, i);
    snprintf(text + n, sizeof(text) - n,
             "{\"timestamp\": 17, \"input_length\": 512, \"hash_ids\": [4]}\n"
             "{\"timestamp\": 18, \"input_length\": 512, \"hash_ids\": [1]}\n");
    tr = write_file(0, "wm.jsonl", text);
    r = kvr_ok((const char *const[]){ tr, "--block-bytes", "2M", "--capacity", "32M", "--json",
                                      NULL });
    EXPECT_INTS(r.json, "runs/0/", "slots=16 hit_blocks=1 evicted=3 stored=17");
    run_free(&r);
}

/* ---- the bundled trace -------------------------------------------------------- */

static const char *real_trace(char *buf, size_t cap)
{
    const char *env = getenv("KVT_TEST_TRACE"), *src = getenv("KVT_TEST_SRC");

    if (env && *env)
        snprintf(buf, cap, "%s", env);
    else
        snprintf(buf, cap, "%s/data/traces/conversation_trace.jsonl", src ? src : ".");
    cr_assert_eq(access(buf, R_OK), 0, "no bundled trace at %s (set KVT_TEST_TRACE)", buf);
    return buf;
}

/*
 * The capacity curve on the real trace (all of it; its first 300 requests
 * under valgrind), 64 KiB blocks: hit rates never fall as capacity grows,
 * the curve is not flat, and a capacity that holds every distinct block
 * gives exactly the unbounded cache's hits.
 */
Test(kvreplay_trace, capacity_curve_is_monotone_on_the_real_trace)
{
    char path[512], svg[128];
    const char *limit = getenv("KVT_TEST_VALGRIND") ? "300" : "1000000";
    struct run r;
    json_t *runs;
    size_t n;

    real_trace(path, sizeof(path));
    snprintf(svg, sizeof(svg), "%s/curve.svg", tmp);
    r = kvr_ok((const char *const[]){ path, "--limit", limit, "--block-bytes", "64K",
                                      "--capacity", "2M,8M,32M,128M,512M,2G,16G", "--svg", svg,
                                      "--json", NULL });
    runs = at(r.json, "runs");
    n = json_array_size(runs);
    cr_assert_eq(n, 7);
    for (size_t i = 1; i < n; i++) {
        json_t *a = json_array_get(runs, i - 1), *b = json_array_get(runs, i);

        cr_expect_geq(ji(b, "hit_blocks"), ji(a, "hit_blocks"),
                      "block hits fell from %lld to %lld between capacities %lld and %lld",
                      ji(a, "hit_blocks"), ji(b, "hit_blocks"), ji(a, "capacity_bytes"),
                      ji(b, "capacity_bytes"));
        cr_expect_geq(ji(b, "hit_tokens"), ji(a, "hit_tokens"),
                      "token hits fell between capacities %lld and %lld",
                      ji(a, "capacity_bytes"), ji(b, "capacity_bytes"));
    }
    /* 16G holds 262144 blocks of 64K: more than the trace's distinct ones */
    cr_assert_lt(ji(r.json, "trace/distinct_blocks"), 16ll << 14);
    EXPECT_I(json_array_get(runs, n - 1), "hit_blocks", ji(r.json, "unbounded/hit_blocks"));
    EXPECT_I(json_array_get(runs, n - 1), "hit_tokens", ji(r.json, "unbounded/hit_tokens"));
    EXPECT_I(json_array_get(runs, n - 1), "evicted", 0);
    cr_expect_lt(ji(json_array_get(runs, 0), "hit_blocks"),
                 ji(json_array_get(runs, n - 1), "hit_blocks"), "a flat curve");
    /* the unbounded cache hits every repeat: blocks - distinct */
    EXPECT_I(r.json, "unbounded/hit_blocks",
             ji(r.json, "trace/blocks") - ji(r.json, "trace/distinct_blocks"));
    run_free(&r);

    /* the plot: one SVG document with both panels' curves */
    {
        char *s = slurp(svg);

        cr_expect(strncmp(s, "<?xml", 5) == 0 && strstr(s, "<svg") != NULL);
        cr_expect(strstr(s, "</svg>\n") != NULL && strstr(s, "</svg>\n")[7] == '\0');
        cr_expect(strstr(s, "Prefix hit rate vs capacity") != NULL);
        cr_expect(strstr(s, "Savings vs capacity") != NULL);
        cr_expect(strstr(s, ">512M</text>") != NULL, "no tick label for 512M");
        /* 2 hit-rate series + 3 money series */
        size_t lines = 0;
        for (const char *p = s; (p = strstr(p, "<polyline")) != NULL; p++)
            lines++;
        cr_expect_eq(lines, 5, "expected 5 polylines, got %zu", lines);
        free(s);
    }
}

/* ---- against tierd ------------------------------------------------------------- */

static const char *const tierd_args[] = { "--warm-bytes", "64M", "--no-mlock", NULL };

/*
 * The first 150 requests of the real trace in 4 KiB blocks (a few thousand
 * blocks, ~16 MiB: below the 64 MiB pool's low watermark): a replay
 * through tierd finds the same hits as the in-process one, all in warm, and
 * every byte read back is right. A second replay finds every block.
 */
Test(kvreplay_trace, tierd_replay_matches_in_process_when_all_fits)
{
    char path[512];
    struct t_tierd d;
    struct run a, b, c;

    real_trace(path, sizeof(path));
    t_tierd_start(&d, tierd_args);
    a = kvr_ok((const char *const[]){ path, "--limit", "150", "--block-bytes", "4K",
                                      "--socket", d.sock, "--json", NULL });
    b = kvr_ok((const char *const[]){ path, "--limit", "150", "--block-bytes", "4K",
                                      "--capacity", "64M", "--json", NULL });
    cr_assert_gt(ji(b.json, "runs/0/hit_blocks"), 0, "the trace has no hits to compare");
    EXPECT_I(a.json, "runs/0/hit_blocks", ji(b.json, "runs/0/hit_blocks"));
    EXPECT_I(a.json, "runs/0/hit_tokens", ji(b.json, "runs/0/hit_tokens"));
    EXPECT_I(a.json, "runs/0/stored", ji(b.json, "runs/0/stored"));
    EXPECT_I(a.json, "runs/0/tiers/warm/blocks", ji(b.json, "runs/0/hit_blocks"));
    EXPECT_I(a.json, "runs/0/verify_errors", 0);
    EXPECT_I(a.json, "runs/0/short_gets", 0);
    cr_expect_str_eq(json_string_value(at(a.json, "mode")), "tierd");
    /* the same keys again: everything is there, nothing new is stored */
    c = kvr_ok((const char *const[]){ path, "--limit", "150", "--block-bytes", "4K",
                                      "--socket", d.sock, "--json", NULL });
    EXPECT_I(c.json, "runs/0/hit_blocks", ji(c.json, "runs/0/blocks"));
    EXPECT_I(c.json, "runs/0/stored", 0);
    run_free(&a);
    run_free(&b);
    run_free(&c);
    t_tierd_stop(&d);
}

/* key(-1) = SHA-256("kvreplay:" salt), key(i) = SHA-256(key(i-1) || le64(id)):
 * kvreplay --help documents it; recomputed here independently. */
static void chain_key(const char *salt, const uint64_t *ids, size_t n, kvt_key *out)
{
    char root[128];
    unsigned char buf[KVT_KEY_BYTES + 8];

    snprintf(root, sizeof(root), "kvreplay:%s", salt);
    SHA256((const unsigned char *)root, strlen(root), out->b);
    for (size_t i = 0; i < n; i++) {
        memcpy(buf, out->b, KVT_KEY_BYTES);
        for (int k = 0; k < 8; k++)
            buf[KVT_KEY_BYTES + k] = (unsigned char)(ids[i] >> (8 * k));
        SHA256(buf, sizeof(buf), out->b);
    }
}

/* A byte of a stored block changed behind kvreplay's back: the next replay
 * reads it, reports it and exits 1. */
Test(kvreplay_trace, wrong_bytes_from_tierd_fail_the_replay)
{
    const char *tr = write_file(0, "c.jsonl",
        "{\"timestamp\": 0, \"input_length\": 1536, \"hash_ids\": [7, 8, 9]}\n"
        "{\"timestamp\": 0, \"input_length\": 1536, \"hash_ids\": [7, 8, 9]}\n");
    kvt_model m = { .model_id = "kvreplay", .dtype = "bf16", .layout = "kvreplay",
                    .block_tokens = 512, .tp_size = 1, .block_bytes = 8192 };
    const uint64_t ids[] = { 7, 8 };
    struct t_tierd d;
    struct run a, b;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key key;
    kvt_lease lease;
    const void *slot;
    int rc;

    t_tierd_start(&d, tierd_args);
    a = kvr_ok((const char *const[]){ tr, "--block-bytes", "8K", "--salt", "x", "--socket",
                                      d.sock, "--json", NULL });
    EXPECT_I(a.json, "runs/0/hit_blocks", 3); /* the second request reads all three */
    EXPECT_I(a.json, "runs/0/verify_errors", 0);
    /* corrupt block 1 (id 8 after 7) through the shared pool */
    c = t_connect(&d);
    rc = kvt_ns_open(c, &m, &ns);
    cr_assert_eq(rc, 0, "kvt_ns_open: %s", kvt_strerror(rc));
    chain_key("x", ids, 2, &key);
    rc = kvt_get_lease(ns, &key, 1, &slot, &lease);
    cr_assert_eq(rc, 1, "the block kvreplay stored is not there (%d)", rc);
    ((volatile uint8_t *)slot)[4000] ^= 0x5a;
    kvt_release(ns, &lease);
    kvt_close(c);
    b = kvr((const char *const[]){ tr, "--block-bytes", "8K", "--salt", "x", "--socket", d.sock,
                                   NULL });
    cr_expect_eq(b.status, 1, "exit status: expected 1 (wrong bytes), got %d; stderr:\n%s",
                 b.status, b.err);
    cr_expect(strstr(b.err, "block 1: wrong byte at offset 4000") != NULL,
              "stderr does not name the block and offset:\n%s", b.err);
    run_free(&a);
    run_free(&b);
    t_tierd_stop(&d);
}

/* ---- bad input --------------------------------------------------------------------- */

/* A bad trace: exit 65 (EX_DATAERR) and a message naming what is wrong. */
static void expect_bad_trace(const char *text, const char *msg)
{
    const char *tr = write_file(0, "bad.jsonl", text);
    struct run r = kvr((const char *const[]){ tr, "--capacity", "1G", NULL });

    cr_expect_eq(r.status, 65, "exit status: expected 65, got %d; stderr:\n%s", r.status,
                 r.err);
    cr_expect(strstr(r.err, msg) != NULL, "stderr lacks \"%s\":\n%s", msg, r.err);
    cr_expect_eq(r.out[0], '\0', "something on stdout:\n%s", r.out);
    run_free(&r);
}

#define GOOD "{\"timestamp\": 0, \"input_length\": 600, \"hash_ids\": [1, 2]}\n"

Test(kvreplay_trace, bad_traces_name_the_line_and_fail)
{
    expect_bad_trace(GOOD "{\"timestamp\": 5, \"input_length\": 600, \"hash_i",
                     "bad.jsonl:2: not valid JSON");
    expect_bad_trace(GOOD GOOD "\n{\"timestamp\": 5, \"input_length\": 600}\n",
                     "bad.jsonl:4: no \"hash_ids\" array");
    expect_bad_trace(GOOD "{\"input_length\": 600, \"hash_ids\": [1, \"2\"]}\n",
                     "bad.jsonl:2: hash_ids[1] is not a non-negative integer");
    expect_bad_trace("{\"input_length\": 600, \"hash_ids\": [1.5]}\n",
                     "bad.jsonl:1: hash_ids[0] is not a non-negative integer");
    expect_bad_trace("{\"input_length\": 600, \"hash_ids\": [-3]}\n",
                     "bad.jsonl:1: hash_ids[0] is not a non-negative integer");
    expect_bad_trace("{\"hash_ids\": [1]}\n", "bad.jsonl:1: no \"input_length\" member");
    expect_bad_trace(GOOD "[1, 2]\n", "bad.jsonl:2: not a JSON object");
    expect_bad_trace("", "bad.jsonl: no requests (empty file)");
    expect_bad_trace("\n  \n", "bad.jsonl: no requests (only blank lines)");
}

Test(kvreplay_trace, bad_options_and_missing_files_fail_cleanly)
{
    const char *tr = write_file(0, "ok.jsonl", GOOD);
    struct run r;

    r = kvr((const char *const[]){ tr, "--capacity", "8X", NULL });
    cr_expect_eq(r.status, 64, "bad capacity: got %d", r.status);
    cr_expect(strstr(r.err, "--capacity") != NULL, "%s", r.err);
    run_free(&r);
    r = kvr((const char *const[]){ "/nonexistent/trace.jsonl", NULL });
    cr_expect_eq(r.status, 66, "missing trace: got %d", r.status);
    run_free(&r);
    /* 64 MiB blocks need a pool of 16 of them */
    r = kvr((const char *const[]){ tr, "--capacity", "512M", NULL });
    cr_expect_eq(r.status, 64, "capacity below 16 blocks: got %d", r.status);
    cr_expect(strstr(r.err, "largest slot") != NULL, "%s", r.err);
    run_free(&r);
    r = kvr((const char *const[]){ tr, "--socket", "/nonexistent/tierd.sock", NULL });
    cr_expect_eq(r.status, 69, "no tierd: got %d", r.status);
    run_free(&r);
}

/* kvreplay with args exits with status and says needle on stderr. */
static void expect_fail(const char *const *args, int status, const char *needle)
{
    struct run r = kvr(args);

    cr_expect_eq(r.status, status, "%s %s: exit status %d, expected %d", args[1],
                 args[2] ? args[2] : "", r.status, status);
    cr_expect(strstr(r.err, needle) != NULL, "stderr has no '%s':\n%s", needle, r.err);
    run_free(&r);
}

/* A policy that is none is named, with the ones there are; options that
 * need a cold tier, or make no sense against tierd, say so. */
Test(kvreplay_trace, bad_policy_and_cold_options_fail_with_a_clear_error)
{
    const char *tr = write_file(0, "ok.jsonl", GOOD);

    expect_fail((const char *const[]){ tr, "--policy", "lru,lfu", NULL }, 64,
                "no policy 'lfu'; there are: lru keep reuse min");
    expect_fail((const char *const[]){ tr, "--cold-admit", "sometimes", NULL }, 64,
                "--cold-admit: want all, second-touch");
    expect_fail((const char *const[]){ tr, "--cold-dwpd", "3", NULL }, 64,
                "need a cold tier (--cold)");
    expect_fail((const char *const[]){ tr, "--socket", "/nonexistent/s", "--policy", "min",
                                       NULL }, 64, "are tierd's");
}

/*
 * Belady's MIN on the leaf-first LRU trace above, 4 blocks: r3's block 5
 * is never used again, so MIN does not keep it (the cache stays 1,2,3,4)
 * and r4, r5 hit both their blocks: 4 hits, LRU's 2. The pool asked holds
 * 4 blocks exactly, and neither replay held more.
 */
Test(kvreplay_trace, min_is_the_offline_bound_with_prefix_semantics)
{
    const char *tr = write_file(0, "min.jsonl", lru_trace);
    struct run r = kvr_ok((const char *const[]){ tr, "--block-bytes", "2M", "--capacity", "8M",
                                                 "--high-wm", "1", "--low-wm", "1",
                                                 "--policy", "lru,min", "--json", NULL });

    cr_expect_str_eq(json_string_value(at(r.json, "runs/0/policy")), "lru");
    cr_expect_str_eq(json_string_value(at(r.json, "runs/1/policy")), "min");
    EXPECT_INTS(r.json, "runs/0/", "hit_blocks=2 asked_blocks=4");
    EXPECT_INTS(r.json, "runs/1/", "hit_blocks=4 hit_tokens=2048 asked_blocks=4 held_max=4 "
                                   "evicted=1");
    cr_expect_leq(ji(r.json, "runs/0/held_max"), 4);
    run_free(&r);
}

/*
 * tools/gen_traces.py, the generator of make bench's traces: the same seed
 * gives the same trace to stdout as to a file; --block-tokens sizes every
 * request (its full blocks, then one partial one); kvreplay reads it all.
 */
Test(kvreplay_trace, gen_traces_writes_a_trace_of_the_blocks_asked)
{
    const char *py = getenv("KVT_TEST_PYTHON") ? getenv("KVT_TEST_PYTHON") : "/usr/bin/python3";
    const char *src = getenv("KVT_TEST_SRC") ? getenv("KVT_TEST_SRC") : ".";
    char path[512], *out, *file, *line, *save;
    struct run r;
    int n = 0;

    snprintf(path, sizeof(path), "%s/gen.jsonl", tmp);
    out = t_sh_okf("'%s' '%s/tools/gen_traces.py' multiturn --requests 200 --block-tokens 16",
                   py, src);
    free(t_sh_okf("'%s' '%s/tools/gen_traces.py' multiturn '%s' --requests 200 "
                  "--block-tokens 16", py, src, path));
    file = slurp(path);
    cr_expect_str_eq(out, file, "stdout and the file differ");
    for (line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save), n++) {
        json_t *j = json_loads(line, 0, NULL);
        json_int_t len, blocks;

        cr_assert_not_null(j, "not JSON: %s", line);
        len = json_integer_value(json_object_get(j, "input_length"));
        blocks = (json_int_t)json_array_size(json_object_get(j, "hash_ids"));
        cr_expect(len > (blocks - 1) * 16 && len < blocks * 16, "%lld tokens in %lld blocks",
                  (long long)len, (long long)blocks);
        json_decref(j);
    }
    cr_expect_eq(n, 200);
    r = kvr_ok((const char *const[]){ path, "--block-tokens", "16", "--capacity", "8M",
                                      "--json", NULL });
    EXPECT_I(r.json, "trace/requests", 200);
    run_free(&r);
    free(out);
    free(file);
}

/* tools/polsim.py on the bundled trace's first 3,000 requests at 1,000
 * blocks with the three policies `policies` names (and `more` flags): their
 * block hit rates, in order. */
static void polsim_row(const char *policies, const char *more, double v[3])
{
    const char *py = getenv("KVT_TEST_PYTHON") ? getenv("KVT_TEST_PYTHON") : "/usr/bin/python3";
    const char *src = getenv("KVT_TEST_SRC") ? getenv("KVT_TEST_SRC") : ".";
    char path[512], *out;
    int cap;

    real_trace(path, sizeof(path));
    out = t_sh_okf("'%s' '%s/tools/polsim.py' '%s' --limit 3000 --caps 1000 --policies %s %s",
                   py, src, path, policies, more);
    cr_assert_eq(sscanf(strchr(out, '\n') ? strchr(out, '\n') + 1 : out, "%d %lf %lf %lf",
                        &cap, &v[0], &v[1], &v[2]), 4, "polsim said: %s", out);
    cr_expect_eq(cap, 1000);
    free(out);
}

/*
 * tools/polsim.py's reuse experiment (a learnt reuse index per block class,
 * polsim only): it finds more hits than leaf-first LRU (it would not if its
 * classes never told a chain's tip, a returning chain or a hit block from a
 * new one) and no more than MIN.
 */
Test(kvreplay_trace, polsim_reuse_is_between_lru_and_min)
{
    double v[3]; /* lru, reuse, min */

    polsim_row("lru,reuse,min", "", v);
    cr_expect_gt(v[1], v[0] * 1.1, "reuse %.4f, lru %.4f: no class told apart", v[1], v[0]);
    cr_expect_leq(v[1], v[2], "reuse %.4f passed MIN's %.4f", v[1], v[2]);
}

/*
 * polsim's label experiment: reuse told the truth about which requests are
 * continued finds more hits than reuse on its own (it would not if the
 * label reached no class), and still no more than MIN, which knows when as
 * well.
 */
Test(kvreplay_trace, polsim_label_told_the_truth_beats_reuse_and_not_min)
{
    double v[3]; /* reuse, label, min */

    polsim_row("reuse,label,min", "--label-flip 0", v);
    cr_expect_gt(v[1], v[0] * 1.1, "label %.4f, reuse %.4f: the truth told nothing", v[1], v[0]);
    cr_expect_leq(v[1], v[2], "label %.4f passed MIN's %.4f", v[1], v[2]);
}

/*
 * --policy lru,keep,min replays the same in-process store with each of its
 * policies, then the bound: on the bundled trace's first 2,000 requests at
 * 1,000 blocks, keep (its selective retention) finds more hits than LRU,
 * which it could not if the store ran LRU for both, and neither passes MIN.
 */
Test(kvreplay_trace, keep_is_the_stores_policy_between_lru_and_min)
{
    char path[512];
    struct run r;
    long long lru, keep, min;

    real_trace(path, sizeof(path));
    r = kvr_ok((const char *const[]){ path, "--limit", "2000", "--block-bytes", "64K",
                                      "--capacity", "62.5M", "--policy", "lru,keep,min",
                                      "--json", NULL });
    cr_assert_str_eq(json_string_value(at(r.json, "runs/0/policy")), "lru");
    cr_assert_str_eq(json_string_value(at(r.json, "runs/1/policy")), "keep");
    cr_assert_str_eq(json_string_value(at(r.json, "runs/2/policy")), "min");
    lru = ji(r.json, "runs/0/hit_blocks");
    keep = ji(r.json, "runs/1/hit_blocks");
    min = ji(r.json, "runs/2/hit_blocks");
    cr_expect_gt(keep, lru, "keep %lld hits, lru %lld: the store ran one policy", keep, lru);
    cr_expect_leq(keep, min, "keep %lld hits passed MIN's %lld", keep, min);
    EXPECT_I(json_array_get(at(r.json, "runs"), 1), "asked_blocks", 1000);
    run_free(&r);

    /* the plot: a curve per policy in each panel, named in its legend */
    {
        char svg[128], *s;
        size_t lines = 0;

        snprintf(svg, sizeof(svg), "%s/policies.svg", tmp);
        r = kvr_ok((const char *const[]){ path, "--limit", "300", "--block-bytes", "64K",
                                          "--capacity", "62.5M,625M", "--policy", "lru,keep,min",
                                          "--svg", svg, "--json", NULL });
        run_free(&r);
        s = slurp(svg);
        for (const char *p = s; (p = strstr(p, "<polyline")) != NULL; p++)
            lines++;
        cr_expect_eq(lines, 6, "expected 3 curves in 2 panels, got %zu polylines", lines);
        cr_expect(strstr(s, ">lru</text>") && strstr(s, ">keep</text>") &&
                  strstr(s, ">min</text>"), "a policy missing from the legend");
        /* each curve goes through its own two capacities, not through another's */
        for (const char *p = s; (p = strstr(p, "points=\"")) != NULL; p++) {
            const char *e = strchr(p + 8, '"');
            size_t pts = 1;

            for (const char *q = p + 8; q < e; q++)
                pts += *q == ' ';
            cr_expect_eq(pts, 2, "a curve of %zu points, not 2", pts);
        }
        free(s);
    }
}

/*
 * The bundled trace's first 300 requests, 64 KiB blocks, 62.5M of warm
 * (1,000 blocks: a pool of 64M, 1,024 slots) over a cold tier as large:
 * warm never holds more than the 1,000 blocks asked; with every block
 * leaving warm written, hits come from the disk too and the disk bytes per
 * hit token are what was written over the hit tokens; second-touch
 * admission writes less, and counts what it refused.
 */
Test(kvreplay_trace, cold_tier_and_admission_in_process)
{
    char path[512];
    struct run r;
    json_t *all, *st;

    real_trace(path, sizeof(path));
    r = kvr_ok((const char *const[]){ path, "--limit", "300", "--block-bytes", "64K",
                                      "--capacity", "62.5M",
                                      "--cold", "1x", "--cold-dir", tmp,
                                      "--cold-admit", "all,second-touch", "--json", NULL });
    all = json_array_get(at(r.json, "runs"), 0);
    st = json_array_get(at(r.json, "runs"), 1);
    cr_assert_str_eq(json_string_value(at(all, "cold_admit")), "all");
    cr_assert_str_eq(json_string_value(at(st, "cold_admit")), "second-touch");
    EXPECT_I(all, "asked_blocks", 1000);
    EXPECT_I(all, "slots", 1024);
    cr_expect_leq(ji(all, "held_max"), 1000, "warm held %lld blocks", ji(all, "held_max"));
    cr_expect_leq(ji(st, "held_max"), 1000);
    EXPECT_I(all, "cold_bytes", 62.5 * (1 << 20));
    cr_expect_gt(ji(all, "tiers/cold/blocks"), 0, "no hit from the disk");
    cr_expect_gt(ji(all, "disk_bytes_written"), 0);
    EXPECT_D(all, "disk_bytes_per_hit_token",
             (double)ji(all, "disk_bytes_written") / (double)ji(all, "hit_tokens"));
    EXPECT_I(all, "cold_refused", 0);
    cr_expect_gt(ji(st, "cold_refused"), 0, "second-touch refused nothing");
    cr_expect_lt(ji(st, "disk_bytes_written"), ji(all, "disk_bytes_written"));
    run_free(&r);
}

/* ---- cost arithmetic ------------------------------------------------------------- */

/*
 * 1M cached + 3M uncached tokens over 2 h; $2 / $0.1 per M tokens:
 *   API without cache 4M x 2 = $8; with: 3M x 2 + 1M x 0.1 = $6.10.
 * 1e9 params: 2e9 FLOPs/token; 1e12 FLOP/s x 0.5 = 5e11 FLOP/s:
 *   without: 8e15 FLOPs = 16000 s = 4.444 h x $3.6 = $16;
 *   with: 6e15 = 12000 s = 3.333 h = $12; saved $4.
 * 10 GiB of RAM x $0.01 x 2 h = $0.20; 100 GiB NVMe x $0.001 x 2 h = $0.20.
 * Net $3.60, $1.80 per hour.
 */
Test(kvreplay_trace, cost_arithmetic_on_known_numbers)
{
    struct run r = kvr_ok((const char *const[]){
        "--hits", "1000000", "--misses", "3000000", "--price-hit", "0.1", "--price-miss", "2",
        "--params", "1e9", "--gpu-flops", "1e12", "--mfu", "0.5", "--gpu-price-hour", "3.6",
        "--hours", "2", "--ram-bytes", "10G", "--ram-price-gib-hour", "0.01",
        "--nvme-bytes", "100G", "--nvme-price-gib-hour", "0.001", "--json", NULL });

    EXPECT_REALS(r.json, "cost/", "api_nocache=8 api_cache=6.1 api_saved=1.9 "
                                  "gpu_hours_nocache=16000/3600 gpu_hours_cache=12000/3600 "
                                  "gpu_nocache=16 gpu_cache=12 ram_cost=0.2 nvme_cost=0.2 "
                                  "net_saved=3.6 net_saved_per_hour=1.8");
    run_free(&r);
}

/*
 * --live prices what a running tierd saw: 6 blocks of 16 tokens put, a
 * lookup of 10 keys finds the 6: 96 hit tokens, 4 x 16 = 64 missed; RAM
 * and NVMe charged are its warm and cold capacities (64M: GiB 1/16).
 */
Test(kvreplay_trace, live_cost_from_a_running_tierd)
{
    struct t_tierd d;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key k[10];
    static uint8_t buf[65536];
    const void *bufs[6];
    struct run r;

    t_tierd_start(&d, (const char *const[]){ "--warm-bytes", "64M", NULL });
    c = t_connect(&d);
    ns = t_ns(c, sizeof(buf));
    t_keys(k, 10, 4);
    for (int i = 0; i < 6; i++)
        bufs[i] = buf;
    cr_assert_eq(kvt_put(ns, NULL, k, 6, bufs), 6);
    cr_assert_eq(kvt_lookup(ns, k, 10, 0, NULL), 6);
    kvt_close(c);
    r = kvr_ok((const char *const[]){ "--live", "--socket", d.sock, "--hours", "1", "--json",
                                      NULL });
    /* nvme_gib: the tests' --cold-bytes 64M */
    EXPECT_REALS(r.json, "cost/", "hit_tokens=96 miss_tokens=64 ram_gib=1/16 nvme_gib=64/1024");
    run_free(&r);
    r = kvr((const char *const[]){ "--live", "--socket", "/nonexistent.sock", NULL });
    cr_expect_eq(r.status, 69, "no tierd: got %d", r.status);
    cr_expect(strstr(r.err, "cannot reach tierd") != NULL, "%s", r.err);
    run_free(&r);
    t_tierd_stop(&d);
}

/* A preset file, then a flag over it; a bad file is refused with exit 65. */
Test(kvreplay_trace, price_presets_and_overrides)
{
    const char *pf = write_file(1, "p.json",
        "{\"default\": \"a\", \"presets\": {"
        "\"a\": {\"price_miss\": 4, \"price_hit\": 1, \"note\": \"x\"},"
        "\"b\": {\"price_miss\": 10, \"price_hit\": 0}}}\n");
    const char *bad = write_file(2, "bad.json",
        "{\"presets\": {\"a\": {\"price_mis\": 4}}}\n");
    struct run r;

    /* 1M hits + 1M misses: a: 4 + 1 = $5; b: $10; b with --price-hit 2: $12 */
    r = kvr_ok((const char *const[]){ "--hits", "1e6", "--misses", "1e6", "--prices", pf,
                                      "--json", NULL });
    EXPECT_D(r.json, "cost/api_cache", 5.0);
    cr_expect_str_eq(json_string_value(at(r.json, "prices/preset")), "a");
    run_free(&r);
    r = kvr_ok((const char *const[]){ "--hits", "1e6", "--misses", "1e6", "--prices", pf,
                                      "--preset", "b", "--price-hit", "2", "--json", NULL });
    EXPECT_D(r.json, "cost/api_cache", 12.0);
    EXPECT_D(r.json, "cost/api_nocache", 20.0);
    run_free(&r);
    r = kvr((const char *const[]){ "--hits", "1", "--misses", "1", "--prices", bad,
                                   "--preset", "a", NULL });
    cr_expect_eq(r.status, 65, "bad prices file: got %d", r.status);
    cr_expect(strstr(r.err, "unknown member \"price_mis\"") != NULL, "%s", r.err);
    run_free(&r);
    /* the bundled presets load */
    {
        char bundled[600];
        const char *src = getenv("KVT_TEST_SRC");

        snprintf(bundled, sizeof(bundled), "%s/tools/kvreplay_prices.json", src ? src : ".");
        r = kvr_ok((const char *const[]){ "--hits", "1", "--misses", "1", "--prices", bundled,
                                          "--preset", "llama70b-h100x4", "--json", NULL });
        EXPECT_D(r.json, "prices/params", 70e9);
        run_free(&r);
    }
}

/* --speed keeps the trace's pace: 3 requests 400 ms apart take >= 0.8 s at
 * 1x and well under that at 100x. */
Test(kvreplay_trace, speed_paces_a_tierd_replay)
{
    const char *tr = write_file(0, "pace.jsonl",
        "{\"timestamp\": 1000, \"input_length\": 512, \"hash_ids\": [1]}\n"
        "{\"timestamp\": 1400, \"input_length\": 512, \"hash_ids\": [1]}\n"
        "{\"timestamp\": 1800, \"input_length\": 512, \"hash_ids\": [1]}\n");
    struct t_tierd d;
    struct run a, b;

    t_tierd_start(&d, tierd_args);
    a = kvr_ok((const char *const[]){ tr, "--block-bytes", "4K", "--socket", d.sock,
                                      "--speed", "1", "--json", NULL });
    cr_expect_geq(jd(a.json, "runs/0/seconds"), 0.79, "1x took %.3f s",
                  jd(a.json, "runs/0/seconds"));
    EXPECT_I(a.json, "runs/0/hit_blocks", 2);
    b = kvr_ok((const char *const[]){ tr, "--block-bytes", "4K", "--socket", d.sock,
                                      "--speed", "100", "--salt", "s", "--json", NULL });
    cr_expect_lt(jd(b.json, "runs/0/seconds"), 0.5, "100x took %.3f s",
                 jd(b.json, "runs/0/seconds"));
    run_free(&a);
    run_free(&b);
    t_tierd_stop(&d);
}
