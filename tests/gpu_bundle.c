/* SPDX-License-Identifier: MIT */
/*
 * gpu_bundle.c - the GPU bundle (make gpu-bundle: build/gpu-bundle/), checked
 * here without a GPU: its run.sh, with nothing but the bundle's lib/ on the
 * library path, stops at its no-GPU check with 77 and logs that to $OUT; every
 * library of every program and library in it resolves inside the bundle or is
 * one it expects of the machine (its system-libs: glibc's, libcuda, libstdc++,
 * libgcc_s); it fits in 40 MiB; its run.sh is tests/gpu/run.sh. Skipped only
 * where there is no CUDA toolkit (the Makefile builds the bundle wherever there
 * is one, before the suite runs).
 */
#include <criterion/criterion.h>
#include <dirent.h>
#include <limits.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "t.h"

#define MAX_KIB 40960

/* The bundle's absolute path; skips the test where there is no nvcc. */
static const char *bundle(void)
{
    static char path[PATH_MAX];
    const char *src = getenv("KVT_TEST_SRC");
    char rel[PATH_MAX];

    if (system("command -v nvcc >/dev/null 2>&1 || test -x /usr/local/cuda/bin/nvcc") != 0)
        cr_skip_test("no CUDA toolkit (nvcc): the Makefile builds no GPU bundle");
    snprintf(rel, sizeof(rel), "%s/build/gpu-bundle", src ? src : ".");
    cr_assert_not_null(realpath(rel, path), "%s: no bundle: run make gpu-bundle", rel);
    return path;
}

Test(gpu_bundle, run_sh_exits_77_after_its_no_gpu_check)
{
    const char *b = bundle();
    char cmd[3 * PATH_MAX], out_dir[256], log[PATH_MAX + 32];
    char *out, *logged;
    int rc;

    snprintf(cmd, sizeof(cmd), "env -i LD_LIBRARY_PATH='%s/lib' '%s/bin/gpu_probe' 2>&1", b, b);
    if (t_sh(cmd, &out) == 0)
        cr_skip_test("a GPU answers here (%s): run %s/run.sh itself", out, b);
    free(out);
    t_tmpdir("kvt-gpu-out", out_dir, sizeof(out_dir));
    snprintf(cmd, sizeof(cmd), "env -i LD_LIBRARY_PATH='%s/lib' OUT='%s' '%s/run.sh' 2>&1", b,
             out_dir, b);
    rc = t_sh(cmd, &out);
    cr_assert_eq(rc, 77, "run.sh: expected exit 77 (no GPU), got %d; it said:\n%s", rc, out);
    cr_assert_not_null(strstr(out, "gpu: no GPU visible"), "run.sh said:\n%s", out);
    /* the log in $OUT holds what it printed */
    snprintf(log, sizeof(log), "%s/gpu.log", out_dir);
    snprintf(cmd, sizeof(cmd), "cat '%s'", log);
    cr_assert_eq(t_sh(cmd, &logged), 0, "no %s", log);
    cr_assert_str_eq(logged, out, "%s differs from what run.sh printed", log);
    free(logged);
    free(out);
    unlink(log);
    rmdir(out_dir);
}

/* Whether name is a line of the bundle's system-libs. */
static bool expected_of_system(const char *list, const char *name)
{
    size_t n = strlen(name);

    for (const char *p = list; (p = strstr(p, name)); p += n)
        if ((p == list || p[-1] == '\n') && (p[n] == '\n' || p[n] == '\0'))
            return true;
    return false;
}

/* Every library ldd lists for path is in lib/ or named in system-libs. */
static void check_ldd(const char *b, const char *path, const char *system_libs)
{
    char cmd[3 * PATH_MAX], lib[PATH_MAX + 8], *out, *save = NULL;
    size_t lib_len = (size_t)snprintf(lib, sizeof(lib), "%s/lib/", b);

    snprintf(cmd, sizeof(cmd), "env -i LD_LIBRARY_PATH='%s/lib' /usr/bin/ldd '%s' 2>&1", b,
             path);
    cr_assert_eq(t_sh(cmd, &out), 0, "ldd %s:\n%s", path, out);
    for (char *line = strtok_r(out, "\n", &save); line; line = strtok_r(NULL, "\n", &save)) {
        char name[256], to[PATH_MAX];
        const char *base;

        cr_assert_null(strstr(line, "not found"), "%s: %s", path, line);
        if (sscanf(line, " %255s => %4095s", name, to) == 2) {
            if (strncmp(to, lib, lib_len) == 0)
                continue;
            base = name;
        } else {
            base = strrchr(name, '/') ? strrchr(name, '/') + 1 : name; /* the loader */
        }
        cr_assert(expected_of_system(system_libs, base),
                  "%s loads %s from outside the bundle, and it is not in system-libs:\n%s",
                  path, base, line);
    }
    free(out);
}

Test(gpu_bundle, every_library_resolves_inside_the_bundle)
{
    const char *b = bundle();
    static const char *const dirs[] = { "bin", "lib" };
    char path[2 * PATH_MAX], *system_libs;
    int files = 0;

    snprintf(path, sizeof(path), "cat '%s/system-libs'", b);
    cr_assert_eq(t_sh(path, &system_libs), 0, "no system-libs in %s", b);
    for (size_t i = 0; i < 2; i++) {
        struct dirent *e;
        DIR *d;

        snprintf(path, sizeof(path), "%s/%s", b, dirs[i]);
        cr_assert_not_null(d = opendir(path), "%s", path);
        while ((e = readdir(d)))
            if (e->d_name[0] != '.') {
                snprintf(path, sizeof(path), "%s/%s/%s", b, dirs[i], e->d_name);
                check_ldd(b, path, system_libs);
                files++;
            }
        closedir(d);
    }
    cr_assert_geq(files, 6, "only %d programs and libraries in %s", files, b);
    cr_log_info("gpu bundle: %d programs and libraries, each resolved with only %s/lib", files,
                b);
    free(system_libs);
}

Test(gpu_bundle, fits_in_40_MiB)
{
    const char *b = bundle();
    char cmd[PATH_MAX + 32], *out;
    long kib;

    snprintf(cmd, sizeof(cmd), "du -sk '%s'", b);
    cr_assert_eq(t_sh(cmd, &out), 0, "du: %s", out);
    kib = strtol(out, NULL, 10);
    cr_log_info("gpu bundle: %ld KiB (%.1f MiB) of %d KiB", kib, kib / 1024.0, MAX_KIB);
    cr_assert(kib > 0 && kib <= MAX_KIB, "the bundle is %ld KiB, over %d", kib, MAX_KIB);
    free(out);
}

Test(gpu_bundle, its_run_sh_is_tests_gpu_run_sh)
{
    const char *b = bundle(), *src = getenv("KVT_TEST_SRC");
    char cmd[3 * PATH_MAX], *out;

    snprintf(cmd, sizeof(cmd), "cmp '%s/tests/gpu/run.sh' '%s/run.sh' 2>&1", src ? src : ".",
             b);
    cr_assert_eq(t_sh(cmd, &out), 0, "a stale bundle (make gpu-bundle): %s", out);
    free(out);
}
