/* SPDX-License-Identifier: MIT */
/*
 * tierd_metrics.c - the Prometheus page (--metrics-port): counters that
 * match the requests made, the page checked by promtool, a real Prometheus
 * server scraping tierd and seeing a counter move, and a port in use.
 * Loopback only; the HTTP client is t_metrics.h's few lines over a socket.
 * The page's access control and bounds: tierd_metrics_sec.c.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/time.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"
#include "t_metrics.h"

#define BLK (64u << 10)
#define NS_LABEL "tenant=\"default\",ns=\"test/model/bf16/test/tp0\""

static bool under_valgrind(void)
{
    return getenv("KVT_TEST_VALGRIND") != NULL;
}

#define expect_sample(page, prefix, want)                                                     \
    do {                                                                                      \
        double got_ = t_metrics_sample(page, prefix);                                         \
        cr_expect(got_ == (double)(want), "%s: expected %g, got %g", prefix, (double)(want), \
                  got_);                                                                      \
    } while (0)

/* promtool check metrics on the page: 0 when it has nothing to say. */
static int promtool(const char *page, char *out, size_t cap)
{
    char path[] = "/tmp/kvt-metrics-XXXXXX", cmd[256];
    int fd = mkstemp(path);
    FILE *p;
    size_t n = 0;
    int st;

    cr_assert(fd >= 0, "mkstemp: %s", strerror(errno));
    cr_assert_eq(write(fd, page, strlen(page)), (ssize_t)strlen(page));
    close(fd);
    snprintf(cmd, sizeof(cmd), "promtool check metrics < %s 2>&1", path);
    p = popen(cmd, "r");
    cr_assert_not_null(p, "popen promtool");
    n = fread(out, 1, cap - 1, p);
    out[n] = 0;
    st = pclose(p);
    unlink(path);
    return WIFEXITED(st) ? WEXITSTATUS(st) : 128;
}

static void put_blocks(kvt_ns *ns, const kvt_key *keys, size_t n, uint64_t seed)
{
    void *slots[16];
    int rc = kvt_put_reserve(ns, NULL, keys, n, slots);

    cr_assert_eq(rc, (int)n, "put_reserve: expected %zu, got %d (%s)", n, rc,
                 kvt_strerror(rc));
    for (size_t i = 0; i < n; i++)
        t_fill(slots[i], BLK, seed + i);
    rc = kvt_put_commit(ns, keys, n);
    cr_assert_eq(rc, (int)n, "put_commit: expected %zu, got %d", n, rc);
}

Test(tierd_metrics, counters_match_the_requests_and_promtool_accepts_the_page)
{
    struct t_tierd d;
    char port_s[8], ctype[256], lint[4096];
    const char *args[] = { "--warm-bytes", "64M", "--metrics-port", port_s, NULL };
    uint16_t port = t_metrics_free_port();
    kvt_client *c;
    kvt_ns *ns, *odd;
    kvt_model m = t_model(BLK);
    kvt_key keys[10];
    const void *got[8];
    kvt_lease lease;
    char *page, *head;
    int st, hits;

    snprintf(port_s, sizeof(port_s), "%u", port);
    t_tierd_start(&d, args);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    /* a model id the label must escape: quote, backslash, newline, a byte
     * that is not UTF-8 */
    m.model_id = "odd\"id\\x\ny\xff";
    cr_assert_eq(kvt_ns_open(c, &m, &odd), 0);

    t_keys(keys, 10, 42);
    put_blocks(ns, keys, 8, 4200);
    hits = kvt_lookup(ns, keys, 10, 0, NULL);
    cr_assert_eq(hits, 8, "lookup: expected 8 hits, got %d", hits);
    hits = kvt_get_lease(ns, keys, 8, got, &lease);
    cr_assert_eq(hits, 8, "get: expected 8 blocks, got %d", hits);
    cr_assert_eq(kvt_release(ns, &lease), 0);

    st = t_metrics_get(port, "/metrics", NULL, &head, &page);
    cr_assert_eq(st, 200, "GET /metrics: status %d", st);
    cr_expect(t_metrics_header(head, "Content-Type", ctype, sizeof(ctype)) &&
              strstr(ctype, "text/plain") && strstr(ctype, "version=0.0.4"),
              "Content-Type: %s", ctype);
    free(head);

    expect_sample(page, "kvtier_namespace_lookups_total{" NS_LABEL, 1);
    expect_sample(page, "kvtier_namespace_lookup_keys_total{" NS_LABEL, 10);
    expect_sample(page, "kvtier_namespace_lookup_hit_keys_total{" NS_LABEL, 8);
    expect_sample(page, "kvtier_namespace_lookup_miss_keys_total{" NS_LABEL, 2);
    expect_sample(page, "kvtier_namespace_prefix_hit_tokens_total{" NS_LABEL, 8 * 16);
    expect_sample(page, "kvtier_namespace_put_blocks_total{" NS_LABEL, 8);
    expect_sample(page, "kvtier_namespace_get_blocks_total{" NS_LABEL, 8);
    expect_sample(page, "kvtier_namespace_in_bytes_total{" NS_LABEL, 8.0 * BLK);
    expect_sample(page, "kvtier_namespace_out_bytes_total{" NS_LABEL, 8.0 * BLK);
    /* the odd model id, escaped (and its non-UTF-8 byte replaced) */
    expect_sample(page,
                  "kvtier_namespace_lookups_total{tenant=\"default\",ns=\"odd\\\"id\\\\x\\ny?/bf16/test/tp0\"", 0);
    expect_sample(page, "kvtier_clients_connected", 1);
    expect_sample(page, "kvtier_namespaces", 2);
    expect_sample(page, "kvtier_protocol_errors_total", 0);
    expect_sample(page, "kvtier_tier_blocks{tenant=\"default\",tier=\"warm\"", 8);
    expect_sample(page, "kvtier_tier_hits_total{tenant=\"default\",tier=\"warm\"", 8);
    expect_sample(page, "kvtier_tier_capacity_bytes{tenant=\"default\",tier=\"cold\"", 64 << 20);
    cr_expect(t_metrics_sample(page, "kvtier_tier_capacity_bytes{tenant=\"default\","
                                     "tier=\"warm\"") >= 64 << 20,
              "warm capacity below --warm-bytes");
    cr_expect(isnan(t_metrics_sample(page,
                                     "kvtier_tier_blocks{tenant=\"default\",tier=\"hot\"")),
              "a hot tier shown without --hot-bytes");
    /* one of each request, timed; every request falls in some bucket */
    expect_sample(page, "kvtier_request_duration_seconds_count{op=\"lookup\"", 1);
    expect_sample(page, "kvtier_request_duration_seconds_count{op=\"put_reserve\"", 1);
    expect_sample(page, "kvtier_request_duration_seconds_count{op=\"put_commit\"", 1);
    expect_sample(page, "kvtier_request_duration_seconds_count{op=\"get\"", 1);
    expect_sample(page, "kvtier_request_duration_seconds_count{op=\"ns_open\"", 2);
    expect_sample(page, "kvtier_request_duration_seconds_bucket{op=\"get\",le=\"+Inf\"", 1);
    expect_sample(page, "kvtier_request_duration_seconds_bucket{op=\"get\",le=\"5\"", 1);
    cr_expect(t_metrics_sample(page, "kvtier_request_duration_seconds_sum{op=\"get\"") > 0,
              "get latency sum is 0");
    cr_expect(t_metrics_sample(page, "kvtier_uptime_seconds") > 0, "uptime 0");

    st = promtool(page, lint, sizeof(lint));
    cr_expect_eq(st, 0, "promtool check metrics: exit %d:\n%s", st, lint);
    cr_expect_eq(lint[0], 0, "promtool check metrics has remarks:\n%s", lint);
    free(page);

    st = t_metrics_get(port, "/nothing", NULL, NULL, &page);
    cr_expect_eq(st, 404, "GET /nothing: expected 404, got %d", st);
    free(page);

    kvt_close(c);
    t_tierd_stop(&d);
}

Test(tierd_metrics, disk_waits_are_counted_and_timed_to_their_reply)
{
    struct t_tierd d;
    char port_s[8];
    const char *args[] = { "--warm-bytes", "64M", "--metrics-port", port_s, NULL };
    uint16_t port = t_metrics_free_port();
    kvt_client *c;
    kvt_ns *ns;
    kvt_key keys[8];
    void *slots[8];
    const void *got[8];
    kvt_lease lease;
    char *page;
    int rc;

    snprintf(port_s, sizeof(port_s), "%u", port);
    t_tierd_start(&d, args);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    t_keys(keys, 8, 5);
    cr_assert_eq(kvt_put_reserve(ns, NULL, keys, 8, slots), 8);
    for (int i = 0; i < 8; i++)
        t_fill(slots[i], BLK, 500 + (uint64_t)i);
    /* a durable commit is answered once the writes land: a deferred reply */
    rc = kvt_put_commit_flags(ns, keys, 8, KVT_COMMIT_DURABLE);
    cr_assert_eq(rc, 8, "durable commit: %d (%s)", rc, kvt_strerror(rc));
    cr_assert_eq(t_metrics_get(port, "/metrics", NULL, NULL, &page), 200);
    expect_sample(page, "kvtier_namespace_put_blocks_total{" NS_LABEL, 8);
    expect_sample(page, "kvtier_request_duration_seconds_count{op=\"put_commit\"", 1);
    free(page);
    kvt_close(c);

    /* after a restart the blocks are only on disk: the get waits for reads
     * (and the same port binds again at once) */
    cr_assert_eq(t_tierd_kill(&d, SIGTERM), 0, "clean stop");
    t_tierd_restart(&d, args);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    rc = kvt_get_lease(ns, keys, 8, got, &lease);
    cr_assert_eq(rc, 8, "get from disk: %d (%s)", rc, kvt_strerror(rc));
    for (int i = 0; i < 8; i++)
        cr_assert_eq(t_check(got[i], BLK, 500 + (uint64_t)i), -1, "block %d", i);
    cr_assert_eq(kvt_release(ns, &lease), 0);
    cr_assert_eq(t_metrics_get(port, "/metrics", NULL, NULL, &page), 200);
    expect_sample(page, "kvtier_namespace_get_blocks_total{" NS_LABEL, 8);
    expect_sample(page, "kvtier_namespace_out_bytes_total{" NS_LABEL, 8.0 * BLK);
    expect_sample(page, "kvtier_request_duration_seconds_count{op=\"get\"", 1);
    expect_sample(page, "kvtier_promotions_total{tenant=\"default\"", 8);
    expect_sample(page, "kvtier_tier_hits_total{tenant=\"default\",tier=\"cold\"", 8);
    free(page);
    kvt_close(c);
    t_tierd_stop(&d);
}

/* ---- a real Prometheus ---------------------------------------------------- */

/* Prometheus scraping 127.0.0.1:target with the bearer token in the file
 * credentials (the README's scrape config). */
static pid_t prometheus_start(const char *dir, uint16_t target, uint16_t port,
                              const char *credentials)
{
    char cfg[512], data[512], cfg_arg[600], data_arg[600], listen_arg[64];
    FILE *f;
    pid_t pid;

    snprintf(cfg, sizeof(cfg), "%s/prometheus.yml", dir);
    snprintf(data, sizeof(data), "%s/prometheus-data", dir);
    f = fopen(cfg, "w");
    cr_assert_not_null(f, "%s: %s", cfg, strerror(errno));
    fprintf(f,
            "global:\n"
            "  scrape_interval: 1s\n"
            "  scrape_timeout: 1s\n"
            "scrape_configs:\n"
            "  - job_name: kvtier\n"
            "    authorization:\n"
            "      credentials_file: %s\n"
            "    static_configs:\n"
            "      - targets: ['127.0.0.1:%u']\n",
            credentials, target);
    fclose(f);
    snprintf(cfg_arg, sizeof(cfg_arg), "--config.file=%s", cfg);
    snprintf(data_arg, sizeof(data_arg), "--storage.tsdb.path=%s", data);
    snprintf(listen_arg, sizeof(listen_arg), "--web.listen-address=127.0.0.1:%u", port);
    pid = fork();
    cr_assert(pid >= 0, "fork: %s", strerror(errno));
    if (pid == 0) {
        int null = open("/dev/null", O_WRONLY);

        prctl(PR_SET_PDEATHSIG, SIGKILL); /* never outlive the test */
        if (null >= 0) {
            dup2(null, 1);
            if (!getenv("KVT_TEST_VERBOSE"))
                dup2(null, 2);
        }
        execl("/usr/bin/prometheus", "prometheus", cfg_arg, data_arg, listen_arg,
              "--log.level=warn", (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* SIGTERM, then wait up to 30 s (SIGKILL after). The exit status. */
static int prometheus_stop(pid_t pid)
{
    int st;

    kill(pid, SIGTERM);
    for (int i = 0; i < 3000; i++) {
        if (waitpid(pid, &st, WNOHANG) == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        usleep(10000);
    }
    kill(pid, SIGKILL);
    return t_wait(pid);
}

/* Percent-encode s for a query string. */
static void urlenc(char *out, size_t cap, const char *s)
{
    size_t n = 0;

    for (; *s && n + 4 < cap; s++) {
        unsigned char ch = (unsigned char)*s;

        if ((ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || (ch >= '0' && ch <= '9') ||
            strchr("-_.~", ch))
            out[n++] = (char)ch;
        else
            n += (size_t)snprintf(out + n, cap - n, "%%%02X", ch);
    }
    out[n] = 0;
}

/* An instant query: the value of its first result, NAN when there is none
 * (or Prometheus does not answer yet). */
static double prom_query(uint16_t port, const char *expr)
{
    char path[1024], enc[900];
    json_t *root, *res, *val;
    json_error_t err;
    double v = NAN;
    char *body;
    int st;

    urlenc(enc, sizeof(enc), expr);
    snprintf(path, sizeof(path), "/api/v1/query?query=%s", enc);
    st = t_metrics_get(port, path, NULL, NULL, &body);
    if (st != 200) {
        free(body);
        return NAN;
    }
    root = json_loads(body, 0, &err);
    free(body);
    if (!root)
        return NAN;
    res = json_object_get(json_object_get(root, "data"), "result");
    val = json_object_get(json_array_get(res, 0), "value"); /* [time, "value"] */
    if (json_is_string(json_array_get(val, 1)))
        v = strtod(json_string_value(json_array_get(val, 1)), NULL);
    json_decref(root);
    return v;
}

/* Poll expr until it equals want; bounded by secs. Returns the last value. */
static double prom_wait(uint16_t port, const char *expr, double want, int secs)
{
    double v = NAN;

    for (int i = 0; i < secs * 5; i++) {
        v = prom_query(port, expr);
        if (v == want)
            break;
        usleep(200000);
    }
    return v;
}

/* With a bearer token, as the README configures both sides. */
Test(tierd_metrics, prometheus_server_scrapes_tierd_and_sees_puts)
{
    struct t_tierd d;
    char port_s[8], dir[256], tok[320];
    const char *args[] = { "--warm-bytes", "64M", "--metrics-port", port_s,
                           "--metrics-token-file", tok, NULL };
    uint16_t port = t_metrics_free_port(), prom_port;
    int secs = under_valgrind() ? 120 : 30;
    kvt_client *c;
    kvt_ns *ns;
    kvt_key keys[8];
    pid_t prom;
    FILE *f;
    double v;

    /* `make test` installs it (mk/deps.sh): missing is a failure, not a skip */
    cr_assert_eq(access("/usr/bin/prometheus", X_OK), 0,
                 "no /usr/bin/prometheus (Debian package prometheus)");
    snprintf(port_s, sizeof(port_s), "%u", port);
    t_tmpdir("kvt-test", dir, sizeof(dir));
    snprintf(tok, sizeof(tok), "%s/token", dir);
    f = fopen(tok, "w"); /* the umask may be 022: the mode is set below */
    cr_assert_not_null(f);
    fprintf(f, "kvt-prometheus-test-token\n");
    fclose(f);
    cr_assert_eq(chmod(tok, 0600), 0);
    t_tierd_start(&d, args);
    c = t_connect(&d);
    ns = t_ns(c, BLK);
    do
        prom_port = t_metrics_free_port();
    while (prom_port == port);
    prom = prometheus_start(d.dir, port, prom_port, tok);

    v = prom_wait(prom_port, "up{job=\"kvtier\"}", 1, secs);
    cr_assert_eq(v, 1, "Prometheus did not report tierd up within %d s (up = %g)", secs, v);
    /* the namespace's series before the puts, then after */
    v = prom_wait(prom_port, "kvtier_namespace_put_blocks_total{" NS_LABEL "}", 0, secs);
    cr_assert_eq(v, 0, "kvtier_namespace_put_blocks_total before the puts: expected 0, got %g", v);
    t_keys(keys, 8, 77);
    put_blocks(ns, keys, 8, 7700);
    v = prom_wait(prom_port, "kvtier_namespace_put_blocks_total{" NS_LABEL "}", 8, secs);
    cr_expect_eq(v, 8, "Prometheus saw kvtier_namespace_put_blocks_total = %g in %d s, not 8", v,
                 secs);
    v = prom_wait(prom_port, "sum(kvtier_tier_blocks)", 8, secs);
    cr_expect_eq(v, 8, "sum(kvtier_tier_blocks) = %g, expected 8", v);

    cr_expect_eq(prometheus_stop(prom), 0, "Prometheus did not stop cleanly");
    kvt_close(c);
    t_tierd_stop(&d);
    t_rmtree(dir);
}

/* ---- bad input ------------------------------------------------------------- */

Test(tierd_metrics, port_in_use_is_a_clear_error_and_a_nonzero_exit)
{
    char dir[256], port_s[8], want[64], err[8192];
    const char *args[] = { "--metrics-port", port_s, NULL };
    const char *bad[] = { "--metrics-port", "0", NULL };
    const char *bad_addr[] = { "--metrics-port", "9", "--metrics-addr", "localhost", NULL };
    const char *bad_max[] = { "--metrics-port", "9", "--metrics-max-namespaces", NULL, NULL };
    const char *max_values[] = { "-1", "65537", "12x", "" };
    uint16_t port;
    int hold = t_metrics_hold_port(&port), st;

    t_tmpdir("kvt-test", dir, sizeof(dir));
    snprintf(port_s, sizeof(port_s), "%u", port);
    st = t_tierd_exit(dir, args, err, sizeof(err));
    snprintf(want, sizeof(want), "tierd: --metrics-port %u: address in use", port);
    cr_expect_eq(st, 75, "port in use: expected exit 75 (EX_TEMPFAIL), got %d; stderr:\n%s", st,
                 err);
    cr_expect(strstr(err, want), "stderr lacks '%s':\n%s", want, err);
    cr_expect_null(strstr(err, "listening on"), "tierd started anyway:\n%s", err);

    st = t_tierd_exit(dir, bad, err, sizeof(err));
    cr_expect_eq(st, 64, "--metrics-port 0: expected exit 64 (EX_USAGE), got %d", st);
    cr_expect(strstr(err, "--metrics-port"), "stderr: %s", err);
    st = t_tierd_exit(dir, bad_addr, err, sizeof(err));
    cr_expect_eq(st, 64, "--metrics-addr localhost: expected exit 64 (EX_USAGE), got %d", st);
    cr_expect(strstr(err, "--metrics-addr"), "stderr: %s", err);
    for (size_t i = 0; i < sizeof(max_values) / sizeof(max_values[0]); i++) {
        bad_max[3] = max_values[i];
        st = t_tierd_exit(dir, bad_max, err, sizeof(err));
        cr_expect_eq(st, 64, "--metrics-max-namespaces '%s': expected exit 64, got %d",
                     max_values[i], st);
        cr_expect(strstr(err, "tierd: --metrics-max-namespaces: want 0..65536"), "stderr: %s",
                  err);
    }

    close(hold);
    t_rmtree(dir);
}
