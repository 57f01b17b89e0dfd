/* SPDX-License-Identifier: MIT */
/*
 * kvt_hash_vs_python.c - kvt_hash_prompt() against an independent reference.
 *
 * Random and edge-case prompts are hashed here and by tests/hash_ref.py
 * (python3-cbor2 + hashlib, vLLM's own walk); every key must match. Also
 * checks chain properties (salt, partial tails, continuation) and option
 * validation. The RNG seed is fixed, printed on failure, and can be replayed
 * with KVT_TEST_SEED=<n>.
 */
#include <criterion/criterion.h>
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "kvtier.h"

#define SEED_DEFAULT 0x6b767469657248ull /* "kvtierH" */
#define HEX_LEN (2 * KVT_KEY_BYTES)

/* One prompt with its hashing options; every pointer is owned (heap). */
struct hcase {
    char *seed;
    uint32_t block;
    char *salt;      /* NULL: none */
    char *lora;      /* NULL: none */
    char *lora_path; /* with lora: the adapter's path (tagged extra keys hash it) */
    uint32_t format; /* KVT_EXTRA_TAGGED or KVT_EXTRA_UNTAGGED */
    kvt_mm_item *mm; /* identifiers are owned too */
    size_t n_mm;
    uint32_t *tok;
    size_t n;
};

static uint64_t rng_seed;
static uint64_t rng_state;

static void rng_init(void)
{
    const char *env = getenv("KVT_TEST_SEED");

    rng_seed = env ? strtoull(env, NULL, 0) : SEED_DEFAULT;
    rng_state = rng_seed;
}

/* splitmix64: small, fast, and the same on every platform. */
static uint64_t rnd(void)
{
    uint64_t z = (rng_state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Uniform in [0, n) (n > 0); the modulo bias is irrelevant here. */
static uint64_t below(uint64_t n)
{
    return rnd() % n;
}

static char *xstrdup(const char *s)
{
    char *p = strdup(s);

    cr_assert_not_null(p, "out of memory");
    return p;
}

static void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size);

    cr_assert_not_null(p, "out of memory");
    return p;
}

/* A token id: every CBOR integer width equally often, boundaries included. */
static uint32_t rnd_token(int small_only)
{
    static const uint32_t edge[] = {0, 23, 24, 255, 256, 65535, 65536, UINT32_MAX};

    if (small_only)
        return (uint32_t)below(152064); /* a large vocabulary */
    switch (below(5)) {
    case 0:
        return (uint32_t)below(24);
    case 1:
        return (uint32_t)(24 + below(256 - 24));
    case 2:
        return (uint32_t)(256 + below(65536 - 256));
    case 3:
        return (uint32_t)(65536 + below(UINT32_MAX - 65536ull + 1));
    default:
        return edge[below(sizeof(edge) / sizeof(edge[0]))];
    }
}

/* A string of n characters: printable ASCII (quotes and backslashes too),
 * sometimes with multi-byte UTF-8 mixed in. */
static char *rnd_str(size_t n)
{
    static const char *const utf8[] = {"\xc3\xa9", "\xe2\x82\xac", "\xf0\x9f\x98\x80"};
    char *s = xcalloc(4 * n + 1, 1);
    size_t len = 0;
    int wide = below(4) == 0;

    for (size_t i = 0; i < n; i++) {
        if (wide && below(3) == 0) {
            const char *u = utf8[below(3)];

            memcpy(s + len, u, strlen(u));
            len += strlen(u);
        } else {
            s[len++] = (char)(' ' + below(95));
        }
    }
    return s;
}

/* String lengths that hit the inline, 1-byte and 2-byte CBOR length forms. */
static size_t rnd_len(void)
{
    switch (below(6)) {
    case 0:
        return 0;
    case 1:
        return 256 + below(200);
    case 2:
        return 24 + below(232);
    default:
        return 1 + below(23);
    }
}

/* Sorted, non-overlapping multimodal items, as an engine produces them:
 * some adjacent, some ending on a block boundary, some past the prompt. */
static void rnd_mm(struct hcase *c)
{
    uint64_t pos = below(c->n / 2 + 8);

    c->n_mm = below(7);
    c->mm = xcalloc(c->n_mm, sizeof(*c->mm));
    for (size_t i = 0; i < c->n_mm; i++) {
        kvt_mm_item *m = &c->mm[i];
        uint64_t len = 1 + below(3 * (uint64_t)c->block + 40);

        if (below(3) == 0) /* end exactly on a block boundary */
            len += c->block - (pos + len) % c->block;
        m->offset = pos;
        m->length = len;
        m->identifier = rnd_str(below(3) ? 16 + below(50) : 1 + below(10));
        pos += len + (below(3) == 0 ? 0 : below(2 * (uint64_t)c->block + 30));
    }
}

/* Replace the case's prompt by n random tokens. */
static void set_tokens(struct hcase *c, size_t n, int small_only)
{
    free(c->tok);
    c->n = n;
    c->tok = xcalloc(n, sizeof(*c->tok));
    for (size_t i = 0; i < n; i++)
        c->tok[i] = rnd_token(small_only);
}

static void rnd_case(struct hcase *c, uint32_t block)
{
    int small_only = below(4) == 0;

    memset(c, 0, sizeof(*c));
    c->seed = below(4) ? xstrdup("0") : rnd_str(rnd_len());
    c->block = block;
    set_tokens(c, below(2001), small_only);
    if (below(2))
        c->salt = rnd_str(rnd_len());
    if (below(2)) {
        c->lora = rnd_str(rnd_len());
        c->lora_path = rnd_str(rnd_len());
    }
    if (below(2))
        rnd_mm(c);
    c->format = below(2) ? KVT_EXTRA_TAGGED : KVT_EXTRA_UNTAGGED;
}

static void case_free(struct hcase *c)
{
    for (size_t i = 0; i < c->n_mm; i++)
        free((char *)c->mm[i].identifier);
    free(c->mm);
    free(c->tok);
    free(c->seed);
    free(c->salt);
    free(c->lora);
    free(c->lora_path);
}

static kvt_hash_opts case_opts(const struct hcase *c)
{
    return (kvt_hash_opts){
        .block_tokens = c->block,
        .seed = c->seed,
        .cache_salt = c->salt,
        .lora_name = c->lora,
        .lora_path = c->lora_path,
        .extra_format = c->format,
        .mm = c->mm,
        .n_mm = c->n_mm,
    };
}

/* A JSON string; our strings are valid UTF-8, so only escapes are needed. */
static void json_str(FILE *f, const char *s)
{
    if (!s) {
        fputs("null", f);
        return;
    }
    fputc('"', f);
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;

        if (ch == '"' || ch == '\\')
            fprintf(f, "\\%c", ch);
        else if (ch < 0x20)
            fprintf(f, "\\u%04x", ch);
        else
            fputc(ch, f);
    }
    fputc('"', f);
}

/* One line of hash_ref.py's input format. */
static void json_case(FILE *f, const struct hcase *c)
{
    fputs("{\"seed\":", f);
    json_str(f, c->seed);
    fprintf(f, ",\"block\":%" PRIu32 ",\"salt\":", c->block);
    json_str(f, c->salt);
    fputs(",\"lora\":", f);
    json_str(f, c->lora);
    fputs(",\"lora_path\":", f);
    json_str(f, c->lora_path);
    fprintf(f, ",\"format\":\"%s\"", c->format == KVT_EXTRA_TAGGED ? "tagged" : "untagged");
    fputs(",\"mm\":[", f);
    for (size_t i = 0; i < c->n_mm; i++) {
        fputs(i ? ",[" : "[", f);
        json_str(f, c->mm[i].identifier);
        fprintf(f, ",%" PRIu64 ",%" PRIu64 "]", c->mm[i].offset, c->mm[i].length);
    }
    fputs("],\"tokens\":[", f);
    for (size_t i = 0; i < c->n; i++)
        fprintf(f, i ? ",%" PRIu32 : "%" PRIu32, c->tok[i]);
    fputs("]}\n", f);
}

/* Run hash_ref.py with `in` as its stdin; returns its whole stdout (malloc'd,
 * NUL-terminated). A missing python, script or cbor2 fails the test. */
static char *run_ref(FILE *in)
{
    const char *py = getenv("KVT_TEST_PYTHON") ? getenv("KVT_TEST_PYTHON") : "/usr/bin/python3";
    const char *src = getenv("KVT_TEST_SRC") ? getenv("KVT_TEST_SRC") : ".";
    char script[4096];
    size_t len = 0, cap = 1 << 16;
    char *out = xcalloc(cap, 1);
    int pfd[2], status;
    pid_t pid;
    ssize_t r;

    snprintf(script, sizeof(script), "%s/tests/hash_ref.py", src);
    if (access(py, X_OK) != 0)
        cr_assert_fail("cannot run the reference: no python at %s (set KVT_TEST_PYTHON)", py);
    if (access(script, R_OK) != 0)
        cr_assert_fail("cannot read %s (set KVT_TEST_SRC to the source tree)", script);
    fflush(NULL);
    cr_assert_eq(pipe(pfd), 0, "pipe: %s", strerror(errno));
    pid = fork();
    cr_assert_neq(pid, -1, "fork: %s", strerror(errno));
    if (pid == 0) {
        dup2(fileno(in), 0);
        dup2(pfd[1], 1);
        close(pfd[0]);
        close(pfd[1]);
        execl(py, py, script, (char *)NULL);
        _exit(127);
    }
    close(pfd[1]);
    while ((r = read(pfd[0], out + len, cap - len - 1)) != 0) {
        if (r < 0 && errno == EINTR)
            continue;
        cr_assert_gt(r, 0, "read from hash_ref.py: %s", strerror(errno));
        len += (size_t)r;
        if (cap - len < 4096) {
            out = realloc(out, cap *= 2);
            cr_assert_not_null(out, "out of memory");
        }
    }
    out[len] = '\0';
    close(pfd[0]);
    while (waitpid(pid, &status, 0) < 0)
        cr_assert_eq(errno, EINTR, "waitpid: %s", strerror(errno));
    if (WIFEXITED(status) && WEXITSTATUS(status) == 3)
        cr_assert_fail("python module cbor2 is missing: install python3-cbor2 (%s)", py);
    if (WIFEXITED(status) && WEXITSTATUS(status) == 127)
        cr_assert_fail("could not execute %s %s", py, script);
    cr_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0,
              "%s %s failed (status 0x%x; see its stderr above)", py, script, status);
    return out;
}

/* Hash one case here and compare with one line of the reference. */
static void check_line(const struct hcase *c, size_t idx, const char *line, size_t len)
{
    size_t want = c->n / c->block;
    kvt_key *keys = xcalloc(want, sizeof(*keys));
    kvt_hash_opts o = case_opts(c);
    ssize_t got = kvt_hash_prompt(&o, c->tok, c->n, keys);
    char hex[HEX_LEN + 1];

    cr_assert_eq(got, (ssize_t)want, "seed 0x%" PRIx64 " case %zu: expected %zu keys, got %zd",
                 rng_seed, idx, want, got);
    cr_assert_eq(len, want ? want * (HEX_LEN + 1) - 1 : 0,
                 "seed 0x%" PRIx64 " case %zu: reference line has %zu chars for %zu keys",
                 rng_seed, idx, len, want);
    for (size_t k = 0; k < want; k++) {
        kvt_key_hex(&keys[k], hex);
        cr_assert(memcmp(hex, line + k * (HEX_LEN + 1), HEX_LEN) == 0,
                  "seed 0x%" PRIx64 " case %zu (block %" PRIu32 ", %zu tokens, salt %s, "
                  "lora %s, %zu mm items): key %zu is %s, reference %.64s",
                  rng_seed, idx, c->block, c->n, c->salt ? "yes" : "no",
                  c->lora ? "yes" : "no", c->n_mm, k, hex, line + k * (HEX_LEN + 1));
    }
    free(keys);
}

/* Every key of every case must equal hash_ref.py's. */
static void check_cases(struct hcase *cases, size_t n_cases)
{
    FILE *in = tmpfile();
    char *out, *line;

    cr_assert_not_null(in, "tmpfile: %s", strerror(errno));
    for (size_t i = 0; i < n_cases; i++)
        json_case(in, &cases[i]);
    cr_assert_eq(fflush(in), 0, "writing the cases: %s", strerror(errno));
    rewind(in);
    out = run_ref(in);
    fclose(in);

    line = out;
    for (size_t i = 0; i < n_cases; i++) {
        char *nl = strchr(line, '\n');

        cr_assert_not_null(nl, "seed 0x%" PRIx64 ": reference printed %zu lines for %zu cases",
                           rng_seed, i, n_cases);
        check_line(&cases[i], i, line, (size_t)(nl - line));
        line = nl + 1;
    }
    free(out);
}

/* check_cases, then free the cases. */
static void check_vs_python(struct hcase *cases, size_t n_cases)
{
    check_cases(cases, n_cases);
    for (size_t i = 0; i < n_cases; i++)
        case_free(&cases[i]);
}

Test(kvt_hash_vs_python, vs_python_random)
{
    static const uint32_t blocks[] = {1, 16, 32, 256};
    enum { PER_BLOCK = 60 };
    struct hcase cases[4 * PER_BLOCK];

    rng_init();
    for (size_t i = 0; i < 4 * PER_BLOCK; i++)
        rnd_case(&cases[i], blocks[i % 4]);
    check_vs_python(cases, 4 * PER_BLOCK);
}

/* Drop a string field and put a copy of s (NULL: none) in its place. */
static void set_str(char **field, const char *s)
{
    free(*field);
    *field = s ? xstrdup(s) : NULL;
}

/* Multimodal items on and around block boundaries (block 16): adjacent
 * items, items ending on a boundary, several in one block, one spanning
 * many blocks, one past the end of the prompt. */
static void edge_mm(struct hcase *c)
{
    static const uint64_t at[][2] = {{0, 3},  {3, 13},   {16, 16},  {40, 2},    {42, 1},
                                     {43, 5}, {48, 100}, {150, 2}, {400, 10000}};

    for (size_t i = 0; i < c->n_mm; i++)
        free((char *)c->mm[i].identifier);
    free(c->mm);
    c->n_mm = sizeof(at) / sizeof(at[0]);
    c->mm = xcalloc(c->n_mm, sizeof(*c->mm));
    for (size_t i = 0; i < c->n_mm; i++) {
        char id[32];

        snprintf(id, sizeof(id), "image-%zu", i);
        c->mm[i] = (kvt_mm_item){xstrdup(id), at[i][0], at[i][1]};
    }
}

/* Fixed cases for the encoder's corners: every integer width in one block,
 * strings needing 2- and 4-byte lengths, blocks larger than the encoder's
 * stack buffer, and multimodal items on and around block boundaries. */
Test(kvt_hash_vs_python, vs_python_edges)
{
    static const uint32_t edge[16] = {0,     1,     23,    24,    25,         254,        255, 256,
                                      257, 65534, 65535, 65536, 65537, 0xfffffffe, UINT32_MAX, 100};
    enum { N = 8 };
    struct hcase cases[N];
    char *huge = xcalloc(70001, 1);

    rng_init();
    memset(huge, 'x', 70000);
    for (int i = 0; i < N; i++)
        rnd_case(&cases[i], 16);

    /* 0: integer boundaries in every position, no extra keys */
    set_str(&cases[0].salt, NULL);
    set_str(&cases[0].lora, NULL);
    set_tokens(&cases[0], 48, 0);
    for (size_t i = 0; i < 48; i++)
        cases[0].tok[i] = edge[(i * 7) % 16];
    /* 1: a 70000-byte LoRA name and salt (4-byte text lengths, streamed) */
    set_str(&cases[1].lora, huge);
    set_str(&cases[1].salt, huge + 1);
    set_tokens(&cases[1], 100, 0);
    /* 2, 3: blocks of 1000 and 2000 large ids, beyond one encoder buffer */
    cases[2].block = 1000;
    set_tokens(&cases[2], 2000, 0);
    for (size_t i = 0; i < 2000; i++)
        cases[2].tok[i] = UINT32_MAX - (uint32_t)i;
    cases[3].block = 2000;
    set_tokens(&cases[3], 2000, 0);
    /* 4: an empty salt is no salt; an empty LoRA name is still a key */
    set_str(&cases[4].salt, "");
    set_str(&cases[4].lora, "");
    set_str(&cases[4].seed, "");
    set_tokens(&cases[4], 40, 0);
    /* 5: multimodal items around block boundaries */
    edge_mm(&cases[5]);
    set_tokens(&cases[5], 500, 1);
    /* 6: a prompt shorter than one block: no keys at all */
    set_tokens(&cases[6], 15, 0);
    /* 7: exactly one block, a typical PYTHONHASHSEED */
    set_str(&cases[7].seed, "12345");
    set_tokens(&cases[7], 16, 1);
    /* the tagged form hashes the adapter's path with its name; and both
     * forms for the multimodal corners */
    for (int i = 0; i < N; i++)
        if (cases[i].lora && !cases[i].lora_path)
            set_str(&cases[i].lora_path, "/adapters/a");
    cases[5].format = KVT_EXTRA_TAGGED;

    free(huge);
    check_cases(cases, N);
    for (int i = 0; i < N; i++)
        cases[i].format = cases[i].format == KVT_EXTRA_TAGGED ? KVT_EXTRA_UNTAGGED
                                                              : KVT_EXTRA_TAGGED;
    check_vs_python(cases, N);
}

/* Regression vector, computed once with tests/hash_ref.py:
 * seed "0", block 16, tokens 0..31, no extras. */
Test(kvt_hash_vs_python, fixed_vector)
{
    static const char *const want[2] = {
        "d830de3d42c00f25a2949b5d12d98642664a44872c1614c5b0147556276afc9c",
        "fedd9e4abebebbe6f6cf96b682f08d316063fe2f22a5c552192dd62904fcccac",
    };
    const char *none = "4e1195df020de59e0d65a33a4279f1183e7ae4e5d980e309f8b55adff2e61c3e";
    kvt_hash_opts o = {.block_tokens = 16, .seed = "0"};
    uint32_t tok[32];
    kvt_key keys[2], nh;
    char hex[HEX_LEN + 1];

    for (uint32_t i = 0; i < 32; i++)
        tok[i] = i;
    cr_assert_eq(kvt_none_hash("0", &nh), 0);
    cr_assert_str_eq(kvt_key_hex(&nh, hex), none, "NONE_HASH(\"0\") is %s, expected %s", hex,
                     none);
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), 2);
    for (int i = 0; i < 2; i++)
        cr_assert_str_eq(kvt_key_hex(&keys[i], hex), want[i], "key %d is %s, expected %s", i,
                         hex, want[i]);
}

/* A random prompt of n tokens with LoRA, salt and two images. */
static void demo_case(struct hcase *c, size_t n, uint32_t block)
{
    rng_init();
    memset(c, 0, sizeof(*c));
    c->seed = xstrdup("0");
    c->block = block;
    c->n = n;
    c->tok = xcalloc(n, sizeof(*c->tok));
    for (size_t i = 0; i < n; i++)
        c->tok[i] = rnd_token(0);
    c->salt = xstrdup("tenant-a");
    c->lora = xstrdup("sql-adapter");
    c->lora_path = xstrdup("/adapters/sql");
    c->n_mm = 2;
    c->mm = xcalloc(2, sizeof(*c->mm));
    c->mm[0] = (kvt_mm_item){xstrdup("img-0"), 5, 40};
    c->mm[1] = (kvt_mm_item){xstrdup("img-1"), 45 + 3 * (uint64_t)block, 2 * (uint64_t)block + 1};
}

/* The salt sits in block 0 only, yet through the chain it must change every
 * key; the same salt must give the same keys. */
Test(kvt_hash_vs_python, salt_changes_every_key)
{
    enum { BT = 16, NB = 40 };
    struct hcase c;
    kvt_key a[NB], b[NB], a2[NB], none[NB];
    kvt_hash_opts o;

    demo_case(&c, BT * NB, BT);
    o = case_opts(&c);
    o.cache_salt = "salt-a";
    cr_assert_eq(kvt_hash_prompt(&o, c.tok, c.n, a), NB);
    cr_assert_eq(kvt_hash_prompt(&o, c.tok, c.n, a2), NB);
    o.cache_salt = "salt-b";
    cr_assert_eq(kvt_hash_prompt(&o, c.tok, c.n, b), NB);
    o.cache_salt = NULL;
    cr_assert_eq(kvt_hash_prompt(&o, c.tok, c.n, none), NB);
    for (int i = 0; i < NB; i++) {
        cr_assert(memcmp(&a[i], &a2[i], sizeof(kvt_key)) == 0, "same salt, key %d differs", i);
        cr_assert(memcmp(&a[i], &b[i], sizeof(kvt_key)) != 0, "salts a/b share key %d", i);
        cr_assert(memcmp(&a[i], &none[i], sizeof(kvt_key)) != 0, "salt/none share key %d", i);
    }
    case_free(&c);
}

/* n = k * block + r hashes k blocks, equal to the first k keys of the longer
 * prompt, and writes nothing past them. */
Test(kvt_hash_vs_python, partial_tail_gets_no_key)
{
    static const uint32_t blocks[] = {1, 16, 32, 256};

    for (size_t bi = 0; bi < 4; bi++) {
        uint32_t bt = blocks[bi];
        struct hcase c;
        kvt_hash_opts o;
        kvt_key full[8], part[9];

        demo_case(&c, 8 * (size_t)bt, bt);
        o = case_opts(&c);
        cr_assert_eq(kvt_hash_prompt(&o, c.tok, c.n, full), 8);
        for (uint32_t r = 1; r < bt; r += (bt > 40 ? 37 : 1)) {
            memset(part, 0xa5, sizeof(part));
            ssize_t got = kvt_hash_prompt(&o, c.tok, 5 * (size_t)bt + r, part);

            cr_assert_eq(got, 5, "block %u, 5 blocks + %u tokens: %zd keys", bt, r, got);
            cr_assert(memcmp(part, full, 5 * sizeof(kvt_key)) == 0, "block %u: keys differ", bt);
            for (size_t i = 0; i < sizeof(kvt_key); i++)
                cr_assert_eq(part[5].b[i], 0xa5, "block %u: key written past the tail", bt);
        }
        case_free(&c);
    }
}

/* Hashing a prompt in pieces (parent + start_token) gives the keys of
 * hashing it whole, for every split point and block by block. */
Test(kvt_hash_vs_python, chain_continues_with_parent)
{
    enum { BT = 16, NB = 12 };
    struct hcase c;
    kvt_key whole[NB], part[NB], nh;
    kvt_hash_opts o;

    demo_case(&c, BT * NB + 7, BT);
    o = case_opts(&c);
    cr_assert_eq(kvt_hash_prompt(&o, c.tok, c.n, whole), NB);
    cr_assert_eq(kvt_none_hash(c.seed, &nh), 0);
    for (size_t j = 0; j <= NB; j++) {
        kvt_hash_opts tail = o;

        memset(part, 0, sizeof(part));
        cr_assert_eq(kvt_hash_prompt(&o, c.tok, j * BT, part), (ssize_t)j);
        tail.parent = j ? &whole[j - 1] : &nh; /* NONE_HASH given explicitly at 0 */
        tail.start_token = j * BT;
        cr_assert_eq(kvt_hash_prompt(&tail, c.tok + j * BT, c.n - j * BT, part + j),
                     (ssize_t)(NB - j), "split at block %zu", j);
        cr_assert(memcmp(part, whole, sizeof(whole)) == 0, "split at block %zu: keys differ", j);
    }
    /* One block per call, the parent read from the output array itself. */
    memset(part, 0, sizeof(part));
    for (size_t j = 0; j < NB; j++) {
        kvt_hash_opts one = o;

        one.parent = j ? &part[j - 1] : NULL;
        one.start_token = j * BT;
        cr_assert_eq(kvt_hash_prompt(&one, c.tok + j * BT, BT, part + j), 1);
    }
    cr_assert(memcmp(part, whole, sizeof(whole)) == 0, "block-by-block keys differ");
    /* The parent may even be the slot being written. */
    part[0] = whole[3];
    o.parent = &part[0];
    o.start_token = 4 * BT;
    cr_assert_eq(kvt_hash_prompt(&o, c.tok + 4 * BT, 2 * BT, part), 2);
    cr_assert(memcmp(part, whole + 4, 2 * sizeof(kvt_key)) == 0, "aliased parent differs");
    case_free(&c);
}

Test(kvt_hash_vs_python, bad_options_einval)
{
    uint32_t tok[32] = {0};
    kvt_key keys[2], parent = {{0}};
    kvt_mm_item mm[2] = {{"a", 0, 4}, {"b", 8, 4}};
    kvt_hash_opts ok = {.block_tokens = 16, .seed = "0"}, o;

    cr_assert_eq(kvt_hash_prompt(NULL, tok, 32, keys), -EINVAL);
    o = ok, o.block_tokens = 0;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "block_tokens 0");
    o = ok, o.seed = NULL;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "NULL seed");
    cr_assert_eq(kvt_hash_prompt(&ok, NULL, 32, keys), -EINVAL, "NULL tokens");
    cr_assert_eq(kvt_hash_prompt(&ok, tok, 32, NULL), -EINVAL, "NULL keys_out");
    o = ok, o.start_token = 16;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "start_token without parent");
    o = ok, o.parent = &parent, o.start_token = 8;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "start_token not on a block");
    o = ok, o.parent = &parent, o.start_token = UINT64_MAX - 15;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "start_token + n overflows");
    o = ok, o.mm = NULL, o.n_mm = 1;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "n_mm without mm");
    o = ok, o.mm = mm, o.n_mm = 2, mm[1].identifier = NULL;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "mm identifier NULL");
    mm[1].identifier = "b", mm[1].length = 0;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "mm length 0");
    mm[1].length = 4, mm[1].offset = 0, mm[0].offset = 8;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "mm not sorted by offset");
    mm[0].offset = 0, mm[1].offset = UINT64_MAX - 1;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "mm offset + length overflows");
    o = ok, o.lora_name = "a";
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "tagged LoRA without its path");
    o.extra_format = KVT_EXTRA_UNTAGGED;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), 2, "untagged LoRA needs no path");
    o = ok, o.extra_format = 2;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), -EINVAL, "unknown extra format");
    cr_assert_eq(kvt_none_hash(NULL, keys), -EINVAL, "kvt_none_hash(NULL)");
    cr_assert_eq(kvt_none_hash("0", NULL), -EINVAL, "kvt_none_hash(.., NULL)");

    /* Valid edge cases: no tokens at all, and less than one block. */
    cr_assert_eq(kvt_hash_prompt(&ok, NULL, 0, keys), 0);
    cr_assert_eq(kvt_hash_prompt(&ok, tok, 15, keys), 0);
    o = ok, o.mm = mm, o.n_mm = 2, mm[1].offset = 8;
    cr_assert_eq(kvt_hash_prompt(&o, tok, 32, keys), 2);
}

Test(kvt_hash_vs_python, key_hex)
{
    kvt_key k;
    char hex[HEX_LEN + 1];

    for (int i = 0; i < KVT_KEY_BYTES; i++)
        k.b[i] = (uint8_t)(i * 0x11 + 0x0f);
    cr_assert_eq(kvt_key_hex(&k, hex), hex);
    cr_assert_str_eq(hex, "0f2031425364758697a8b9cadbecfd0e1f30415263748596a7b8c9daebfc0d1e");
}
