/* SPDX-License-Identifier: MIT */
/*
 * kvreplay_svg.c - the capacity curves as a hand-written SVG: hit rate
 * versus capacity (top) and dollars per hour versus capacity (bottom), each
 * with axes, ticks, labels and one polyline per series. Replays of several
 * policies (or admissions) are one curve each: token hit rate on top, net
 * dollars saved below. No library: SVG is text, and these are two line charts.
 */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "kvreplay.h"

const char *kvr_size_str(uint64_t bytes, char *buf, size_t cap)
{
    static const char unit[] = "BKMGTPE";
    double v = (double)bytes;
    int u = 0;

    while (u < 6 && v >= 1024.0) {
        v /= 1024.0;
        u++;
    }
    if (u == 0)
        snprintf(buf, cap, "%lluB", (unsigned long long)bytes);
    else if (v == floor(v))
        snprintf(buf, cap, "%.0f%c", v, unit[u]);
    else
        snprintf(buf, cap, "%.4g%c", v, unit[u]); /* 312.5M, not 312M */
    return buf;
}

/* Plot geometry: one panel's box in SVG user units. */
#define W 760.0
#define PANEL_H 380.0
#define ML 80.0  /* left margin: y tick labels */
#define MR 190.0 /* right margin: legend */
#define MT 50.0  /* top margin: title */
#define MB 60.0  /* bottom margin: x tick labels and axis name */

struct axis {
    double lo, hi;  /* data range */
    bool log;       /* log2 scale (capacities spanning 8x or more) */
    double p0, p1;  /* pixel range */
};

static double to_px(const struct axis *a, double v)
{
    double f;

    if (a->hi <= a->lo)
        return (a->p0 + a->p1) / 2;
    if (a->log)
        f = (log2(v) - log2(a->lo)) / (log2(a->hi) - log2(a->lo));
    else
        f = (v - a->lo) / (a->hi - a->lo);
    return a->p0 + f * (a->p1 - a->p0);
}

/* A "nice" tick step (1, 2 or 5 times a power of ten) for about 5 ticks. */
static double nice_step(double range)
{
    double raw = range / 5, p, f;

    if (!(raw > 0))
        return 1;
    p = pow(10, floor(log10(raw)));
    f = raw / p;
    return (f <= 1 ? 1 : f <= 2 ? 2 : f <= 5 ? 5 : 10) * p;
}

static void escape(FILE *f, const char *s)
{
    for (; *s; s++) {
        if (*s == '<')
            fputs("&lt;", f);
        else if (*s == '>')
            fputs("&gt;", f);
        else if (*s == '&')
            fputs("&amp;", f);
        else if (*s == '"')
            fputs("&quot;", f);
        else
            fputc(*s, f);
    }
}

/* The frame of a panel: title, box, x ticks at each capacity, y ticks,
 * axis names. */
static void frame(FILE *f, double top, const char *title, const char *ylabel,
                  const struct axis *x, const struct axis *y, double ystep, const char *yfmt,
                  const struct kvr_result *res, size_t n)
{
    double bottom = top + PANEL_H - MB;
    size_t every = n > 10 ? (n + 9) / 10 : 1; /* at most ~10 labels */
    char sz[32];

    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"16\" text-anchor=\"middle\">",
            (ML + W - MR) / 2, top + 28);
    escape(f, title);
    fputs("</text>\n", f);
    fprintf(f, "<rect x=\"%.1f\" y=\"%.1f\" width=\"%.1f\" height=\"%.1f\" fill=\"none\" "
            "stroke=\"#000\"/>\n", ML, top + MT, W - MR - ML, PANEL_H - MT - MB);
    for (size_t i = 0; i < n; i += every) {
        double px = to_px(x, (double)res[i].capacity);

        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n",
                px, bottom, px, bottom + 5);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#ddd\"/>\n",
                px, top + MT, px, bottom);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"middle\">%s"
                "</text>\n", px, bottom + 18, kvr_size_str(res[i].capacity, sz, sizeof(sz)));
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\">"
            "warm capacity%s</text>\n", (ML + W - MR) / 2, bottom + 40,
            x->log ? " (log scale)" : "");
    for (double v = ceil(y->lo / ystep) * ystep; v <= y->hi + ystep * 1e-9; v += ystep) {
        double py = to_px(y, v);

        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#000\"/>\n",
                ML - 5, py, ML, py);
        fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"#eee\"/>\n",
                ML, py, W - MR, py);
        fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"11\" text-anchor=\"end\">",
                ML - 8, py + 4);
        fprintf(f, yfmt, fabs(v) < ystep * 1e-9 ? 0.0 : v);
        fputs("</text>\n", f);
    }
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\" text-anchor=\"middle\" "
            "transform=\"rotate(-90 %.1f %.1f)\">%s</text>\n", ML - 55, (top + MT + bottom) / 2,
            ML - 55, (top + MT + bottom) / 2, ylabel);
}

/* One series: a polyline, a dot per point and a legend entry (slot k). */
static void series(FILE *f, double top, int k, const char *name, const char *color,
                   const struct axis *x, const struct axis *y, const struct kvr_result *res,
                   const double *v, size_t n)
{
    double ly = top + MT + 10 + 20 * k;

    fprintf(f, "<polyline fill=\"none\" stroke=\"%s\" stroke-width=\"2\" points=\"", color);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "%s%.1f,%.1f", i ? " " : "", to_px(x, (double)res[i].capacity),
                to_px(y, v[i]));
    fputs("\"/>\n", f);
    for (size_t i = 0; i < n; i++)
        fprintf(f, "<circle cx=\"%.1f\" cy=\"%.1f\" r=\"3\" fill=\"%s\"/>\n",
                to_px(x, (double)res[i].capacity), to_px(y, v[i]), color);
    fprintf(f, "<line x1=\"%.1f\" y1=\"%.1f\" x2=\"%.1f\" y2=\"%.1f\" stroke=\"%s\" "
            "stroke-width=\"2\"/>\n", W - MR + 12, ly, W - MR + 36, ly, color);
    fprintf(f, "<text x=\"%.1f\" y=\"%.1f\" font-size=\"12\">%s</text>\n", W - MR + 42, ly + 4,
            name);
}

/* Whether runs a and b are one curve: the same policy, and admission. */
static bool same_curve(const struct kvr_result *a, const struct kvr_result *b)
{
    return strcmp(a->policy ? a->policy : "", b->policy ? b->policy : "") == 0 &&
           a->admit == b->admit;
}

/* A curve's legend name: its policy, and its admission under a cold tier. */
static const char *curve_name(const struct kvr_result *r, char *buf, size_t cap)
{
    const char *p = r->policy && *r->policy ? r->policy : "store";

    if (r->cold_capacity && strcmp(p, "min") != 0)
        snprintf(buf, cap, "%s, admit %s", p, r->admit == TIER_ADMIT_ALL ? "all" : "2nd");
    else
        snprintf(buf, cap, "%s", p);
    return buf;
}

static const char *const palette[] = { "#1f77b4", "#ff7f0e", "#2ca02c", "#d62728",
                                       "#9467bd", "#8c564b", "#e377c2", "#7f7f7f" };

int kvr_svg_write(const char *path, const char *title, const struct kvr_result *res,
                  const struct kvr_cost *cost, size_t n)
{
    double tok[n ? n : 1], blk[n ? n : 1], gpu[n ? n : 1], mem[n ? n : 1], net[n ? n : 1];
    double top2 = PANEL_H, lo = 0, hi = 0, step;
    struct axis x = { .p0 = ML + 20, .p1 = W - MR - 20 };
    struct axis y = { .lo = 0, .hi = 100 };
    char t1[300];
    FILE *f;
    int rc = 0;

    if (n == 0)
        return -EINVAL;
    size_t first = 1; /* runs of the first curve: the x ticks */
    bool curves;      /* several policies or admissions: a curve each */

    while (first < n && same_curve(&res[0], &res[first]))
        first++;
    curves = first < n;
    x.lo = x.hi = (double)res[0].capacity;
    for (size_t i = 0; i < n; i++) {
        x.lo = fmin(x.lo, (double)res[i].capacity);
        x.hi = fmax(x.hi, (double)res[i].capacity);
    }
    x.log = x.lo > 0 && x.hi / x.lo >= 8;
    for (size_t i = 0; i < n; i++) {
        double h = cost[i].hours > 0 ? cost[i].hours : 1;

        tok[i] = res[i].tokens ? 100.0 * (double)res[i].hit_tokens / (double)res[i].tokens : 0;
        blk[i] = res[i].blocks ? 100.0 * (double)res[i].hit_blocks / (double)res[i].blocks : 0;
        gpu[i] = (cost[i].gpu_nocache - cost[i].gpu_cache) / h;
        mem[i] = (cost[i].ram_cost + cost[i].nvme_cost) / h;
        net[i] = cost[i].net_saved / h;
        lo = fmin(lo, fmin(net[i], fmin(gpu[i], mem[i])));
        hi = fmax(hi, fmax(net[i], fmax(gpu[i], mem[i])));
    }
    f = fopen(path, "w");
    if (!f)
        return -errno;
    fprintf(f, "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n"
            "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"%.0f\" height=\"%.0f\" "
            "viewBox=\"0 0 %.0f %.0f\" font-family=\"sans-serif\">\n"
            "<rect width=\"100%%\" height=\"100%%\" fill=\"#fff\"/>\n", W, 2 * PANEL_H, W,
            2 * PANEL_H);
    /* top: hit rates, 0-100 %, or 0-50 % when none passes half (most traces'
     * curves would sit in the bottom third) */
    y.hi = 50;
    for (size_t i = 0; i < n; i++)
        if (tok[i] > 50 || blk[i] > 50)
            y.hi = 100;
    y.p0 = PANEL_H - MB;
    y.p1 = MT;
    snprintf(t1, sizeof(t1), "Prefix hit rate vs capacity: %s", title);
    frame(f, 0, t1, curves ? "token hit rate (%)" : "hit rate (%)", &x, &y, y.hi / 5, "%.0f%%",
          res, first);
    if (!curves) {
        series(f, 0, 0, "tokens", "#1f77b4", &x, &y, res, tok, n);
        series(f, 0, 1, "blocks", "#ff7f0e", &x, &y, res, blk, n);
    }
    for (size_t i = 0, k = 0; curves && i < n; k++) {
        size_t j = i + 1;
        char name[64];

        while (j < n && same_curve(&res[i], &res[j]))
            j++;
        series(f, 0, (int)k, curve_name(&res[i], name, sizeof(name)), palette[k % 8], &x, &y,
               res + i, tok + i, j - i);
        i = j;
    }
    /* bottom: dollars per hour, a range that always shows zero */
    step = nice_step(hi - lo);
    y.lo = floor(lo / step) * step;
    y.hi = ceil(hi / step) * step;
    if (y.hi <= y.lo)
        y.hi = y.lo + step;
    y.p0 = top2 + PANEL_H - MB;
    y.p1 = top2 + MT;
    frame(f, top2, "Savings vs capacity (per hour of trace time)",
          curves ? "net $ saved per hour" : "$ per hour", &x, &y, step,
          step < 1 ? "%.2f" : "%.0f", res, first);
    if (!curves) {
        series(f, top2, 0, "GPU $ saved", "#2ca02c", &x, &y, res, gpu, n);
        series(f, top2, 1, "RAM+NVMe $", "#d62728", &x, &y, res, mem, n);
        series(f, top2, 2, "net $ saved", "#9467bd", &x, &y, res, net, n);
    }
    for (size_t i = 0, k = 0; curves && i < n; k++) {
        size_t j = i + 1;
        char name[64];

        while (j < n && same_curve(&res[i], &res[j]))
            j++;
        series(f, top2, (int)k, curve_name(&res[i], name, sizeof(name)), palette[k % 8], &x, &y,
               res + i, net + i, j - i);
        i = j;
    }
    fputs("</svg>\n", f);
    if (ferror(f))
        rc = -EIO;
    if (fclose(f) != 0 && rc == 0)
        rc = -errno;
    return rc;
}
