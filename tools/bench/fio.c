/* SPDX-License-Identifier: MIT */
/*
 * fio.c - tierbench's fio runner, the baseline of the cold figures: one job
 * shaped as tierd's cold I/O, its JSON read for bandwidth and syncs; and the
 * log readers the cold figures print context from.
 */
#include <sys/stat.h>
#include <sys/wait.h>

#include "bench.h"

/* ---- helpers for the cold-tier figures ------------------------------------ */

/* Run argv to completion (output into log_path), waiting up to timeout_s.
 * Returns its exit status (0..255), or a negative error. */
static int run_wait(char *const argv[], const char *log_path, unsigned timeout_s)
{
    pid_t pid = bench_spawn(argv, log_path);
    uint64_t t0 = cmn_now_ns();
    int st = 0;

    if (pid < 0)
        return (int)pid;
    while (bench_child_alive(pid, &st)) {
        if (cmn_now_ns() - t0 > timeout_s * 1000000000ull) {
            printf("# %s: still running after %u s: stopped\n", argv[0], timeout_s);
            bench_stop_child(pid);
            return -ETIMEDOUT;
        }
        cmn_sleep_ms(5);
    }
    return WIFEXITED(st) ? WEXITSTATUS(st) : -EINTR;
}

/* Read a whole (small) file into a NUL-terminated malloc'ed string. */
static char *slurp(const char *path)
{
    int fd = open(path, O_RDONLY);
    struct stat sb;
    char *buf = NULL;

    if (fd < 0)
        return NULL;
    if (fstat(fd, &sb) == 0 && sb.st_size < (64 << 20) && (buf = malloc((size_t)sb.st_size + 1))) {
        ssize_t n = pread(fd, buf, (size_t)sb.st_size, 0);
        if (n < 0) {
            free(buf);
            buf = NULL;
        } else {
            buf[n] = '\0';
        }
    }
    close(fd);
    return buf;
}

/* Print, as context, the first line of a log that contains needle (tierd's
 * lines name tierd already). */
void bench_log_line(const char *path, const char *needle)
{
    char *buf = slurp(path);
    char *p = buf ? strstr(buf, needle) : NULL;

    if (p) {
        while (p > buf && p[-1] != '\n')
            p--;
        char *e = strchr(p, '\n');
        if (e)
            *e = '\0';
        printf("# %s\n", p);
    }
    free(buf);
}

/* In fio's JSON, the number of field inside the object "dir" : { ... } (the
 * first such object: the first job's). The fields tierbench reads come
 * before any nested object, so the first match after the brace is the
 * object's own. A strstr walk, not a JSON parser: enough for fio's fixed
 * output format. */
static int json_field(const char *json, const char *dir, const char *field, double *out)
{
    char pat[64], fpat[64];

    snprintf(pat, sizeof(pat), "\"%s\"", dir);
    snprintf(fpat, sizeof(fpat), "\"%s\"", field);
    for (const char *p = strstr(json, pat); p; p = strstr(p + 1, pat)) {
        const char *q = p + strlen(pat), *end_obj;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
            q++;
        if (*q++ != ':')
            continue;
        while (*q == ' ' || *q == '\t' || *q == '\n' || *q == '\r')
            q++;
        if (*q != '{')
            continue;
        const char *f = strstr(q, fpat);
        end_obj = strchr(q + 1, '}'); /* the first closing brace: a nested object's, at worst */
        if (!f || (end_obj && f > end_obj))
            return -EPROTO;
        f += strlen(fpat);
        while (*f == ' ' || *f == ':')
            f++;
        char *e;
        double v = strtod(f, &e);
        if (e == f)
            return -EPROTO;
        *out = v;
        return 0;
    }
    return -EPROTO;
}

char bench_fio_cmd[1024];

/* Bytes per second that fio reports for the job (its "bw_bytes"), and when
 * syncs is not NULL the number of fdatasyncs it issued. */
int bench_fio_run(const struct bench_fio_job *j, double *bw, double *syncs)
{
    char file[PATH_MAX], out[PATH_MAX], log[PATH_MAX], a_file[PATH_MAX + 16],
        a_out[PATH_MAX + 16], a_size[48], a_bs[48], a_qd[32], a_rw[32], a_sync[32], a_b1[48],
        a_b2[48];
    char *argv[24];
    int n = 0, r;
    double io = 0, err = -1;

    snprintf(file, sizeof(file), "%s/fio.dat", bench_tmpdir);
    snprintf(out, sizeof(out), "%s/fio.json", bench_tmpdir);
    snprintf(log, sizeof(log), "%s/fio.log", bench_tmpdir);
    snprintf(a_file, sizeof(a_file), "--filename=%s", file);
    snprintf(a_out, sizeof(a_out), "--output=%s", out);
    snprintf(a_size, sizeof(a_size), "--size=%" PRIu64, j->size);
    snprintf(a_bs, sizeof(a_bs), "--bs=%zu", j->bs);
    snprintf(a_qd, sizeof(a_qd), "--iodepth=%u", j->qd);
    snprintf(a_rw, sizeof(a_rw), "--rw=%s", j->rw);
    snprintf(a_sync, sizeof(a_sync), "--fdatasync=%u", j->qd);
    snprintf(a_b1, sizeof(a_b1), "--iodepth_batch_submit=%u", j->qd);
    snprintf(a_b2, sizeof(a_b2), "--iodepth_batch_complete_min=%u", j->qd);
    argv[n++] = "fio";
    argv[n++] = "--name=tierbench";
    argv[n++] = a_file;
    argv[n++] = a_size;
    argv[n++] = a_bs;
    argv[n++] = a_qd;
    argv[n++] = "--ioengine=io_uring";
    argv[n++] = "--direct=1";
    argv[n++] = a_rw;
    if (j->fdatasync) {
        argv[n++] = a_sync;
        argv[n++] = "--end_fsync=1"; /* the last writes durable too, as tierd's are */
    }
    if (j->lockstep) {
        argv[n++] = a_b1;
        argv[n++] = a_b2;
    }
    argv[n++] = "--output-format=json";
    argv[n++] = a_out;
    argv[n] = NULL;
    bench_fio_cmd[0] = '\0';
    for (int i = 0; i < n; i++) {
        size_t at = strlen(bench_fio_cmd);

        if (at + strlen(argv[i]) + 2 >= sizeof(bench_fio_cmd))
            break;
        snprintf(bench_fio_cmd + at, sizeof(bench_fio_cmd) - at, "%s%s", i ? " " : "", argv[i]);
    }

    unlink(out);
    r = run_wait(argv, log, 300);
    if (r != 0) {
        printf("# fio exited with %d%s\n", r, r == 127 ? " (not installed? mk/deps.sh bench "
                                                         "installs Debian's fio)" : "");
        bench_log_tail("fio", log);
        return r < 0 ? r : r == 127 ? -ENOENT : -ECHILD;
    }
    char *json = slurp(out);
    if (!json)
        return -EIO;
    r = json_field(json, j->rw, "bw_bytes", bw);
    if (r == 0)
        r = json_field(json, j->rw, "io_bytes", &io);
    if (r == 0 && syncs && json_field(json, "sync", "N", syncs) < 0)
        *syncs = -1;
    /* "error" is a plain field of the job object: the first one is the job's */
    const char *e = strstr(json, "\"error\"");
    if (e && (e = strchr(e, ':')))
        err = strtod(e + 1, NULL);
    free(json);
    if (r < 0 || err != 0 || io != (double)j->size || *bw <= 0) {
        printf("# fio: unexpected output in %s (error %.0f, io_bytes %.0f of %" PRIu64 ")\n",
               out, err, io, j->size);
        return r < 0 ? r : -EIO;
    }
    return 0;
}

const char *bench_size_label(size_t bs, char *buf, size_t cap)
{
    if (bs >= MIB)
        snprintf(buf, cap, "%zuMiB", (size_t)(bs / MIB));
    else
        snprintf(buf, cap, "%zuKiB", bs / 1024);
    return buf;
}
