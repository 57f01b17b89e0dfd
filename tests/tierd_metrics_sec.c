/* SPDX-License-Identifier: MIT */
/*
 * tierd_metrics_sec.c - the metrics page against the findings of issue 14
 * (finding 4): a bearer token (--metrics-token-file) keeps tenant names and
 * model ids from anyone without it, and a token file others can read stops
 * tierd; --metrics-no-model-ids keeps model ids off the page; a flood of
 * stalled connections does not lock a scrape out; thousands of namespaces
 * give a page of bounded size (--metrics-max-namespaces), built off the
 * event loop while it answers clients. Loopback only.
 */
#include <criterion/criterion.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "t.h"
#include "t_metrics.h"

#define BLK (64u << 10)
#define SECRET_MODEL "acme-secret/llama-70b-legal-finetune"
#define TOKEN "kvt-3b1f0c9e7d2a4f68a1c0"

static bool under_valgrind(void)
{
    return getenv("KVT_TEST_VALGRIND") != NULL;
}

/* Write text to dir/name with mode (exactly: not masked by the umask). */
static const char *write_file(const char *dir, const char *name, const char *text, mode_t mode,
                              char *path, size_t cap)
{
    int fd;

    snprintf(path, cap, "%s/%s", dir, name);
    fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    cr_assert(fd >= 0, "%s: %s", path, strerror(errno));
    cr_assert_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    cr_assert_eq(fchmod(fd, mode), 0);
    close(fd);
    return path;
}

static char *tmp_dir(char *buf, size_t cap)
{
    snprintf(buf, cap, "/tmp/kvt-test-XXXXXX");
    cr_assert_not_null(mkdtemp(buf), "mkdtemp: %s", strerror(errno));
    return buf;
}

static void rm_dir(const char *dir)
{
    t_rmtree(dir);
}

/* Open a namespace of model id and do one lookup of one key in it. */
static kvt_ns *ns_looked_up(kvt_client *c, const char *model_id)
{
    kvt_model m = t_model(BLK);
    kvt_key k;
    kvt_ns *ns;
    int rc;

    m.model_id = model_id;
    rc = kvt_ns_open(c, &m, &ns);
    cr_assert_eq(rc, 0, "kvt_ns_open %s: %s", model_id, kvt_strerror(rc));
    t_keys(&k, 1, 1);
    rc = kvt_lookup(ns, &k, 1, 0, NULL);
    cr_assert_eq(rc, 0, "lookup in %s: expected 0 hits, got %d", model_id, rc);
    return ns;
}

/* ---- the bearer token ------------------------------------------------------- */

Test(tierd_metrics_sec, without_the_token_the_page_is_refused_and_tells_nothing)
{
    static const struct {
        const char *hdr;
        const char *what;
    } refused[] = {
        { NULL, "no Authorization" },
        { "Authorization: Bearer kvt-wrong\r\n", "a wrong token" },
        { "Authorization: Bearer " TOKEN "0\r\n", "the token with a byte more" },
        { "Authorization: Bearer kvt-3b1f0c9e7d2a4f68a1c\r\n", "the token less its last byte" },
        { "Authorization: Basic " TOKEN "\r\n", "another scheme" },
        { "Authorization: Bearer\r\n", "an empty token" },
        { "Authorization: Bearer " TOKEN " " TOKEN "\r\n", "the token and more" },
    };
    struct t_tierd d;
    char dir[64], cfg[128], tok[128], port_s[8], text[128], val[256];
    const char *args[] = { "--config", cfg, "--warm-bytes", "16M", "--metrics-port", port_s,
                           "--metrics-token-file", tok, NULL };
    uint16_t port = t_metrics_free_port();
    char *head, *body;
    kvt_client *c;
    int st;

    tmp_dir(dir, sizeof(dir));
    snprintf(text, sizeof(text), "[tenant.acme]\nuids = %u\nwarm_bytes = 16M\n",
             (unsigned)getuid());
    write_file(dir, "tenants.ini", text, 0600, cfg, sizeof(cfg));
    write_file(dir, "token", TOKEN "\n", 0600, tok, sizeof(tok)); /* the newline is dropped */
    snprintf(port_s, sizeof(port_s), "%u", port);
    t_tierd_start(&d, args);
    c = t_connect(&d);
    ns_looked_up(c, SECRET_MODEL);

    for (size_t i = 0; i < sizeof(refused) / sizeof(refused[0]); i++) {
        st = t_metrics_get(port, "/metrics", refused[i].hdr, &head, &body);
        cr_expect_eq(st, 401, "%s: expected 401, got %d", refused[i].what, st);
        cr_expect(head && t_metrics_header(head, "WWW-Authenticate", val, sizeof(val)) &&
                  strncmp(val, "Bearer", 6) == 0,
                  "%s: no WWW-Authenticate: Bearer in\n%s", refused[i].what, head);
        cr_expect(body && !strstr(body, "acme") && !strstr(body, "llama"),
                  "%s: the 401 tells a tenant or model:\n%s", refused[i].what, body);
        free(head);
        free(body);
    }
    /* no path is answered without it either */
    st = t_metrics_get(port, "/nothing", NULL, NULL, &body);
    cr_expect_eq(st, 401, "GET /nothing without the token: expected 401, got %d", st);
    free(body);

    /* the scheme is case-insensitive (RFC 7235) */
    st = t_metrics_get(port, "/metrics", "authorization: bearer " TOKEN "\r\n", NULL, &body);
    cr_assert_eq(st, 200, "with the token: expected 200, got %d", st);
    cr_expect_eq(t_metrics_sample(body, "kvtier_namespace_lookups_total{tenant=\"acme\",ns=\""
                                        SECRET_MODEL "/bf16/test/tp0\""), 1,
                 "the page with the token lacks the namespace:\n%.2000s", body);
    cr_expect_eq(t_metrics_sample(body, "kvtier_metrics_unauthorized_requests_total"), 8,
                 "refused requests not counted");
    free(body);
    kvt_close(c);
    t_tierd_stop(&d);
    rm_dir(dir);
}

Test(tierd_metrics_sec, a_token_file_others_can_read_stops_tierd)
{
    static const struct {
        const char *text;
        mode_t mode;
        const char *want;
        int status;
    } cases[] = {
        { TOKEN "\n", 0644, "mode 0644 gives group or others access", 78 },
        { TOKEN, 0640, "mode 0640 gives group or others access", 78 },
        { "", 0600, "is empty", 78 },
        { "\n", 0600, "is empty", 78 },
        { "two words\n", 0600, "byte 4 is not a visible ASCII character", 78 },
        { TOKEN "\n\n", 0600, "not a visible ASCII character", 78 },
    };
    char dir[64], sock[128], data[128], tok[128], port_s[8], missing[128];
    const char *args[] = { "--socket", sock, "--data", data, "--warm-bytes", "16M",
                           "--cold-bytes", "64M", "--metrics-port", port_s,
                           "--metrics-token-file", tok, NULL };
    char *err;
    int st;

    tmp_dir(dir, sizeof(dir));
    snprintf(sock, sizeof(sock), "%s/tierd.sock", dir);
    snprintf(data, sizeof(data), "%s/data", dir);
    snprintf(port_s, sizeof(port_s), "%u", t_metrics_free_port());
    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        write_file(dir, "token", cases[i].text, cases[i].mode, tok, sizeof(tok));
        st = t_run("tierd", args, 1, NULL, &err);
        cr_expect_eq(st, cases[i].status, "case %zu: expected exit %d, got %d; stderr:\n%s", i,
                     cases[i].status, st, err);
        cr_expect(strstr(err, tok) && strstr(err, cases[i].want),
                  "case %zu: stderr names not the file %s and '%s':\n%s", i, tok,
                  cases[i].want, err);
        cr_expect_null(strstr(err, "listening on"), "case %zu: tierd started anyway:\n%s", i,
                       err);
        free(err);
    }
    /* a FIFO would hang a reader that waits for its writer */
    snprintf(missing, sizeof(missing), "%s/fifo", dir);
    cr_assert_eq(mkfifo(missing, 0600), 0, "mkfifo: %s", strerror(errno));
    args[11] = missing;
    st = t_run("tierd", args, 1, NULL, &err);
    cr_expect_eq(st, 78, "a FIFO: expected exit 78, got %d:\n%s", st, err);
    cr_expect(strstr(err, missing) && strstr(err, "not a regular file"), "stderr:\n%s", err);
    free(err);
    snprintf(missing, sizeof(missing), "%s/no-such-token", dir);
    st = t_run("tierd", args, 1, NULL, &err);
    cr_expect_eq(st, 66, "missing token file: expected exit 66 (EX_NOINPUT), got %d:\n%s", st,
                 err);
    cr_expect(strstr(err, missing) && strstr(err, "No such file"), "stderr:\n%s", err);
    free(err);
    rm_dir(dir);
}

/* ---- model ids -------------------------------------------------------------- */

Test(tierd_metrics_sec, no_model_ids_leaves_every_model_id_off_the_page)
{
    struct t_tierd d;
    char port_s[8];
    const char *args[] = { "--warm-bytes", "64M", "--metrics-port", port_s,
                           "--metrics-no-model-ids", NULL };
    uint16_t port = t_metrics_free_port();
    kvt_client *c;
    char *page;
    int st;

    snprintf(port_s, sizeof(port_s), "%u", port);
    t_tierd_start(&d, args);
    c = t_connect(&d);
    ns_looked_up(c, SECRET_MODEL);
    ns_looked_up(c, "test/model");
    ns_looked_up(c, "test/model"); /* the same namespace again */
    st = t_metrics_get(port, "/metrics", NULL, NULL, &page);
    cr_assert_eq(st, 200, "GET /metrics: %d", st);
    cr_expect_null(strstr(page, "acme-secret"), "a model id on the page");
    cr_expect_null(strstr(page, "llama"), "a model id on the page");
    cr_expect_null(strstr(page, "test/model"), "a model id on the page");
    cr_expect_eq(t_metrics_sample(page, "kvtier_namespace_lookups_total{tenant=\"default\","
                                        "ns=\"default/1\",ns_id=\"1\""), 1,
                 "no series ns=\"default/1\":\n%.3000s", page);
    cr_expect_eq(t_metrics_sample(page, "kvtier_namespace_lookups_total{tenant=\"default\","
                                        "ns=\"default/2\",ns_id=\"2\""), 2,
                 "no series ns=\"default/2\"");
    free(page);
    kvt_close(c);
    t_tierd_stop(&d);
}

/* ---- slow connections -------------------------------------------------------- */

#define NSLOW 200

/* A loopback connection to port that has sent half a request and stalls;
 * -1 when it could not connect at once. */
static int slow_open(uint16_t port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);

    cr_assert(fd >= 0, "socket: %s", strerror(errno));
    if (connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0 && errno != EINPROGRESS) {
        close(fd);
        return -1;
    }
    return fd;
}

Test(tierd_metrics_sec, stalled_connections_do_not_lock_out_a_scrape)
{
    static const char half[] = "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nUser-Agent: slo";
    struct t_tierd d;
    char port_s[8];
    const char *args[] = { "--warm-bytes", "64M", "--metrics-port", port_s, NULL };
    uint16_t port = t_metrics_free_port();
    struct pollfd p[NSLOW];
    int bound = under_valgrind() ? 30 : 5, nopen = 0, nsent = 0, nclosed = 0, st;
    char *page;

    snprintf(port_s, sizeof(port_s), "%u", port);
    t_tierd_start(&d, args);
    for (int i = 0; i < NSLOW; i++)
        p[i] = (struct pollfd){ .fd = slow_open(port), .events = POLLOUT };
    /* each sends half a request once connected, then nothing */
    for (int round = 0; round < 20 && nsent < NSLOW; round++) {
        poll(p, NSLOW, 100);
        for (int i = 0; i < NSLOW; i++) {
            int e = 0;
            socklen_t el = sizeof(e);

            if (p[i].fd < 0 || !(p[i].revents & POLLOUT) || p[i].events == 0)
                continue;
            getsockopt(p[i].fd, SOL_SOCKET, SO_ERROR, &e, &el);
            if (e == 0 && write(p[i].fd, half, sizeof(half) - 1) == sizeof(half) - 1) {
                nsent++;
                p[i].events = 0;
            } else { /* refused or reset: not one of the flood */
                close(p[i].fd);
                p[i].fd = -1;
            }
        }
    }
    for (int i = 0; i < NSLOW; i++) {
        if (p[i].fd >= 0 && p[i].events) { /* not connected in 2 s */
            close(p[i].fd);
            p[i].fd = -1;
        }
        nopen += p[i].fd >= 0;
    }
    cr_log_info("%d connections sent half a request", nopen);
    cr_expect_geq(nopen, NSLOW / 2, "only %d of %d connections got through to tierd", nopen,
                  NSLOW);

    st = t_metrics_get_within(port, "/metrics", NULL, bound, NULL, &page);
    cr_expect_eq(st, 200,
                 "a scrape beside %d stalled connections: expected 200 within %d s, got %d",
                 nopen, bound, st);
    free(page);

    /* the stalled ones are dropped by the server, not kept for ever */
    for (int i = 0; i < NSLOW; i++)
        p[i].events = POLLIN;
    for (int round = 0; round < (under_valgrind() ? 300 : 80) && nclosed < nopen; round++) {
        poll(p, NSLOW, 100);
        for (int i = 0; i < NSLOW; i++) {
            char b[64];

            if (p[i].fd < 0 || !(p[i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (read(p[i].fd, b, sizeof(b)) <= 0) {
                close(p[i].fd);
                p[i].fd = -1;
                nclosed++;
            }
        }
    }
    cr_expect_eq(nclosed, nopen, "%d of %d stalled connections closed by tierd within %d s",
                 nclosed, nopen, under_valgrind() ? 30 : 8);
    for (int i = 0; i < NSLOW; i++)
        if (p[i].fd >= 0)
            close(p[i].fd);
    t_tierd_stop(&d);
}

/* ---- many namespaces ----------------------------------------------------------- */

#define NNS 2000

/* Open NNS namespaces (m0000, m0001, ...) and look one key up in each. */
static void many_namespaces(kvt_client *c)
{
    char id[16];

    for (int i = 0; i < NNS; i++) {
        snprintf(id, sizeof(id), "m%04d", i);
        ns_looked_up(c, id);
    }
}

Test(tierd_metrics_sec, many_namespaces_give_a_page_of_bounded_size)
{
    const char *fam = "kvtier_namespace_lookups_total{";
    struct t_tierd d;
    char port_s[8];
    const char *args[] = { "--warm-bytes", "64M", "--metrics-port", port_s, "--no-cold", NULL };
    uint16_t port = t_metrics_free_port();
    kvt_client *c;
    double sum = 0;
    int series = 0, st;
    char *page;

    snprintf(port_s, sizeof(port_s), "%u", port);
    t_tierd_start(&d, args);
    c = t_connect(&d);
    many_namespaces(c);
    st = t_metrics_get(port, "/metrics", NULL, NULL, &page);
    cr_assert_eq(st, 200, "GET /metrics: %d", st);
    for (const char *l = page; (l = strstr(l, fam)); l++) {
        if (l != page && l[-1] != '\n')
            continue;
        series++;
        sum += strtod(strchr(l, ' ') + 1, NULL);
    }
    /* 512 namespaces by the default cap, the other 1488 summed in one */
    cr_expect_eq(series, 513, "%s: expected 513 series, got %d", fam, series);
    cr_expect_eq(sum, NNS, "%s: the series add up to %g, not %d", fam, sum, NNS);
    cr_expect_eq(t_metrics_sample(page, "kvtier_namespace_lookups_total{tenant=\"default\","
                                        "ns=\"other\",ns_id=\"other\""), NNS - 512,
                 "no ns=\"other\" series of %d lookups", NNS - 512);
    cr_expect_eq(t_metrics_sample(page, "kvtier_metrics_summed_namespaces{tenant=\"default\""),
                 NNS - 512, "kvtier_metrics_summed_namespaces");
    cr_expect_eq(t_metrics_sample(page, "kvtier_namespaces"), NNS, "kvtier_namespaces");
    cr_expect_eq(t_metrics_sample(page, "kvtier_namespace_lookups_total{tenant=\"default\","
                                        "ns=\"m0511/bf16/test/tp0\",ns_id=\"512\""), 1,
                 "the 512th namespace has no series of its own");
    free(page);
    kvt_close(c);
    t_tierd_stop(&d);
}

/* Send a scrape's request on a new connection; the socket, to read later. */
static int scrape_send(uint16_t port)
{
    struct sockaddr_in a = { .sin_family = AF_INET, .sin_port = htons(port),
                             .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
    static const char req[] = "GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

    cr_assert(fd >= 0, "socket: %s", strerror(errno));
    cr_assert_eq(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0, "connect: %s",
                 strerror(errno));
    cr_assert_eq(write(fd, req, sizeof(req) - 1), (ssize_t)sizeof(req) - 1);
    return fd;
}

/* Read the whole answer; whether it is a 200 with the last namespace. */
static bool scrape_read(int fd)
{
    size_t cap = 1 << 20, len = 0;
    char *buf = malloc(cap);
    bool ok;
    ssize_t r;

    cr_assert_not_null(buf);
    while ((r = read(fd, buf + len, cap - len - 1)) > 0 || (r < 0 && errno == EINTR)) {
        len += r > 0 ? (size_t)r : 0;
        if (cap - len < 65536) {
            cap *= 2;
            buf = realloc(buf, cap);
            cr_assert_not_null(buf);
        }
    }
    buf[len] = 0;
    close(fd);
    ok = strncmp(buf, "HTTP/1.1 200", 12) == 0 && strstr(buf, "ns_id=\"2000\"");
    free(buf);
    return ok;
}

/* Not a timed check: the loop answers requests from a client while a page
 * of 2000 namespaces is being built, between the scrape's request and the
 * first byte of its answer. Built on the loop, the page left room for the
 * one request already in flight and no more (1 of each of 3 scrapes, before
 * the fix); off it, hundreds (dozens under valgrind, whose threads take
 * turns). */
Test(tierd_metrics_sec, the_loop_answers_clients_while_a_big_page_is_built)
{
    struct t_tierd d;
    char port_s[8];
    const char *args[] = { "--warm-bytes", "64M", "--metrics-port", port_s, "--no-cold",
                           "--metrics-max-namespaces", "4096", NULL };
    uint16_t port = t_metrics_free_port();
    kvt_client *c;
    kvt_stats s;
    long most = 0;

    snprintf(port_s, sizeof(port_s), "%u", port);
    t_tierd_start(&d, args);
    c = t_connect(&d);
    many_namespaces(c);
    for (int round = 0; round < 3; round++) {
        int fd = scrape_send(port);
        struct pollfd p = { .fd = fd, .events = POLLIN };
        long replies = 0;

        /* bounded: a page never answered fails below */
        while (replies < 1000000 && poll(&p, 1, 0) == 0) {
            int rc = kvt_stats_get(c, &s);

            cr_assert_eq(rc, 0, "stats during a scrape: %s", kvt_strerror(rc));
            replies++;
        }
        cr_assert(scrape_read(fd), "scrape %d: no 200 with all %d namespaces", round, NNS);
        cr_log_info("scrape %d: %ld client requests answered before its first byte", round,
                    replies);
        most = replies > most ? replies : most;
    }
    cr_expect_geq(most, 10,
                  "the loop answered at most %ld client requests while a page was built: "
                  "is it built on the loop?", most);
    kvt_close(c);
    t_tierd_stop(&d);
}
