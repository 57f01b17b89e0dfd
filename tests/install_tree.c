/* SPDX-License-Identifier: MIT */
/*
 * install_tree.c - make install, tested where make test put it
 * (build/destdir, the Makefile's test-install): the tree holds exactly the
 * files make install lists (so make uninstall removes them all); a program
 * built outside the tree with nothing but pkg-config's flags for kvtier
 * (tests/install/put_get.c) puts and gets through the installed tierd,
 * every byte checked, linked to libkvtier.so and, with --static, to
 * libkvtier.a; the installed kvreplay finds its presets; and
 * systemd-analyze verify accepts the installed unit.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t.h"

static const char *src(void)
{
    const char *s = getenv("KVT_TEST_SRC");

    return s && *s ? s : ".";
}

/* Run make in the checkout with args (-s: only what goes wrong), as from a
 * shell (none of the make that runs the tests' flags); its output into out. */
static int make_in_tree(const char *args, char **out)
{
    char cmd[4 * PATH_MAX];

    snprintf(cmd, sizeof(cmd),
             "env -u MAKEFLAGS -u MFLAGS -u MAKELEVEL make -s -C '%s' %s 2>&1", src(), args);
    return t_sh(cmd, out);
}

/* make_in_tree with the arguments fmt formats, which must succeed. */
__attribute__((format(printf, 1, 2))) static void make_in_tree_ok(const char *fmt, ...)
{
    char args[3 * PATH_MAX];
    char *out;
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(args, sizeof(args), fmt, ap);
    va_end(ap);
    cr_assert_eq(make_in_tree(args, &out), 0, "make %s:\n%s", args, out);
    free(out);
}

/* Remove the temporary folder dir and all below it. */
static void rm_tree(const char *dir)
{
    free(t_sh_okf("rm -r '%s'", dir));
}

/* The temporary folder of a test that has one (.init = tmp_make, .fini =
 * tmp_remove): made before it, removed after it, passed or failed. */
static char tmp[256];

static void tmp_make(void)
{
    t_tmpdir("kvt-install", tmp, sizeof(tmp));
}

static void tmp_remove(void)
{
    rm_tree(tmp);
}

/* The install root: build/destdir of the checkout. */
static const char *root(void)
{
    static char r[PATH_MAX];

    snprintf(r, sizeof(r), "%s/build/destdir", src());
    cr_assert_eq(access(r, F_OK), 0, "%s: not there (make test-install makes it)", r);
    return r;
}

/* The installed path (below the root) of the listed file whose path ends in
 * suffix (build/destdir.files: make install's list). */
static const char *installed(const char *suffix, char *buf, size_t cap)
{
    char list[PATH_MAX], line[PATH_MAX];
    size_t n = strlen(suffix);
    FILE *f;

    snprintf(list, sizeof(list), "%s.files", root());
    f = fopen(list, "r");
    cr_assert_not_null(f, "%s: not there (make test-install writes it)", list);
    while (fgets(line, sizeof(line), f)) {
        size_t len = strcspn(line, "\n");

        line[len] = '\0';
        if (len >= n && strcmp(line + len - n, suffix) == 0) {
            fclose(f);
            snprintf(buf, cap, "%s", line);
            return buf;
        }
    }
    fclose(f);
    cr_assert_fail("%s lists no file ending in %s", list, suffix);
    return NULL;
}

Test(install_tree, the_tree_holds_exactly_the_files_make_install_lists)
{
    char cmd[3 * PATH_MAX], so[PATH_MAX];
    char *out;

    /* '<': listed, not installed; '>': installed, not listed (uninstall keeps it) */
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && find . -type f -o -type l | sed 's/^\\.//' | sort >../destdir.found "
             "&& sort ../destdir.files | diff - ../destdir.found; rc=$?; "
             "rm -f ../destdir.found; exit $rc", root());
    cr_assert_eq(t_sh(cmd, &out), 0, "build/destdir against make install's list:\n%s", out);
    free(out);
    /* the library's links, as ldconfig and the linker look for them */
    installed("/libkvtier.so.0", so, sizeof(so));
    snprintf(cmd, sizeof(cmd), "cd '%s%.*s' && readlink libkvtier.so libkvtier.so.0", root(),
             (int)(strrchr(so, '/') - so), so);
    out = t_sh_ok(cmd);
    cr_expect(strncmp(out, "libkvtier.so.0\nlibkvtier.so.0.", 30) == 0,
              "expected libkvtier.so -> libkvtier.so.0 -> libkvtier.so.0.MINOR.PATCH, got\n%s",
              out);
    free(out);
}

/* Build put_get.c into dir with `pkg-config [--static] --cflags --libs
 * kvtier` (the installed kvtier.pc, its prefix moved into the root) and
 * cflags: the program's path into prog, the libdir kvtier.pc names into
 * libdir. */
static void build_put_get(const char *dir, const char *pc_flags, const char *cflags, char *prog,
                          size_t cap, char *libdir, size_t libdir_cap)
{
    char cmd[6 * PATH_MAX], pc[PATH_MAX], pc_dir[PATH_MAX];
    char *prefix, *flags, *out;

    installed("/kvtier.pc", pc, sizeof(pc));
    snprintf(pc_dir, sizeof(pc_dir), "%s%.*s", root(), (int)(strrchr(pc, '/') - pc), pc);
    snprintf(cmd, sizeof(cmd), "sed -n 's/^prefix=//p' '%s/kvtier.pc' | tr -d '\\n'", pc_dir);
    prefix = t_sh_ok(cmd);
    /* PKG_CONFIG_PATH comes before the system's folders: this kvtier.pc
     * wins over an installed one; libcrypto's and jansson's are the system's */
    snprintf(cmd, sizeof(cmd),
             "PKG_CONFIG_PATH='%s' pkg-config --define-variable=prefix='%s%s' %s --cflags "
             "--libs kvtier 2>&1 | tr -d '\\n'", pc_dir, root(), prefix, pc_flags);
    flags = t_sh_ok(cmd);
    snprintf(cmd, sizeof(cmd), "PKG_CONFIG_PATH='%s' pkg-config --define-variable=prefix='%s%s' "
             "--variable=libdir kvtier | tr -d '\\n'", pc_dir, root(), prefix);
    out = t_sh_ok(cmd);
    snprintf(libdir, libdir_cap, "%s", out);
    free(out);
    snprintf(prog, cap, "%s/put_get", dir);
    snprintf(cmd, sizeof(cmd),
             "cc -std=c11 -Wall -Wextra -Werror %s -o '%s' '%s/tests/install/put_get.c' %s 2>&1",
             cflags, prog, src(), flags);
    out = t_sh_ok(cmd);
    free(out);
    free(flags);
    free(prefix);
}

/* Start the installed tierd, run prog against it (env before it), stop it. */
static void run_against_installed_tierd(const char *env, const char *prog, const char *seed)
{
    char sbin[PATH_MAX], dir[PATH_MAX], cmd[3 * PATH_MAX];
    struct t_tierd d;
    char *out;
    int rc;

    installed("/sbin/tierd", sbin, sizeof(sbin));
    snprintf(dir, sizeof(dir), "%s%.*s", root(), (int)(strrchr(sbin, '/') - sbin), sbin);
    setenv("KVT_TEST_BIN", dir, 1); /* t_tierd_start runs KVT_TEST_BIN/tierd */
    t_tierd_start(&d, NULL);
    snprintf(cmd, sizeof(cmd), "%s '%s' '%s' %s 2>&1", env, prog, d.sock, seed);
    rc = t_sh(cmd, &out);
    t_tierd_stop(&d);
    cr_expect_eq(rc, 0, "%s: exit %d:\n%s", cmd, rc, out);
    cr_expect(strstr(out, "every byte checked") != NULL, "%s said:\n%s", prog, out);
    free(out);
}

Test(install_tree, a_program_built_with_pkg_config_puts_and_gets_through_the_installed_tierd)
{
    char dir[256], prog[PATH_MAX], libdir[PATH_MAX];
    char env[PATH_MAX + 64], cmd[3 * PATH_MAX];
    char *out;

    t_tmpdir("kvt-install", dir, sizeof(dir));
    build_put_get(dir, "", "", prog, sizeof(prog), libdir, sizeof(libdir));
    /* the loader finds the installed libkvtier.so.0, by its soname */
    snprintf(cmd, sizeof(cmd), "LD_LIBRARY_PATH='%s' ldd '%s' | grep libkvtier", libdir, prog);
    out = t_sh_ok(cmd);
    cr_expect(strstr(out, "libkvtier.so.0 => ") && strstr(out, libdir),
              "expected libkvtier.so.0 from %s:\n%s", libdir, out);
    free(out);
    snprintf(env, sizeof(env), "LD_LIBRARY_PATH='%s'", libdir);
    run_against_installed_tierd(env, prog, "dynamic");
    rm_tree(dir);
}

Test(install_tree, libkvtier_a_links_statically_with_what_pkg_config_static_prints)
{
    char dir[256], prog[PATH_MAX], libdir[PATH_MAX];
    char cmd[2 * PATH_MAX];
    char *out;

    t_tmpdir("kvt-install", dir, sizeof(dir));
    /* -static: libkvtier.a and everything it needs, or the link fails */
    build_put_get(dir, "--static", "-static", prog, sizeof(prog), libdir, sizeof(libdir));
    snprintf(cmd, sizeof(cmd), "readelf -lW '%s' | grep -c INTERP || true", prog);
    out = t_sh_ok(cmd);
    cr_expect_str_eq(out, "0\n", "%s: expected a static program (no INTERP)", prog);
    free(out);
    run_against_installed_tierd("env -u LD_LIBRARY_PATH", prog, "static");
    rm_tree(dir);
}

/* A blank in DESTDIR or PREFIX would split each path make install writes
 * (and make uninstall removes) in two: both refuse, and touch nothing. */
Test(install_tree, install_and_uninstall_refuse_a_path_with_whitespace, .init = tmp_make,
     .fini = tmp_remove)
{
    static const char *const cases[] = {
        "install DESTDIR='%1$s/a %1$s/b'",
        "install DESTDIR='%1$s/d' PREFIX='/usr %1$s/b'",
        "uninstall DESTDIR='%1$s/a %1$s/b'",
    };
    const char *dir = tmp;
    char args[PATH_MAX * 3];
    char *out, *left;

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        /* a/: a file that must stay (uninstall would remove it) */
        free(t_sh_okf("cd '%s' && echo keep >a", dir));
        snprintf(args, sizeof(args), cases[i], dir);
        cr_expect_neq(make_in_tree(args, &out), 0, "make %s: succeeded:\n%s", args, out);
        cr_expect(strstr(out, "holds whitespace"), "make %s said:\n%s", args, out);
        free(out);
        left = t_sh_okf("cd '%s' && find . -mindepth 1 ! -name a; cat a", dir);
        cr_expect_str_eq(left, "keep\n", "make %s: wrote or removed in %s:\n%s", args, dir, left);
        free(left);
    }
}

/* With a PREFIX of one's own (not /usr), make install writes nothing outside
 * it, the sample config (SYSCONFDIR) included, and the unit reads that config. */
Test(install_tree, all_that_make_install_writes_lies_under_prefix, .init = tmp_make,
     .fini = tmp_remove)
{
    const char *dir = tmp;
    char *out;

    make_in_tree_ok("install DESTDIR='%s' PREFIX=/opt/kvt", dir);
    out = t_sh_okf("cd '%s' && find . -mindepth 1 | grep -v -e '^\\./opt$' -e '^\\./opt/kvt$' "
                   "-e '^\\./opt/kvt/' || true", dir);
    cr_expect_str_empty(out, "make install PREFIX=/opt/kvt wrote outside PREFIX:\n%s", out);
    free(out);
    out = t_sh_okf("cd '%s/opt/kvt' && test -f etc/kvtier/tierd.conf && "
                   "grep '^ExecStart=' lib/systemd/system/tierd.service", dir);
    cr_expect_str_eq(out, "ExecStart=/opt/kvt/sbin/tierd --config /opt/kvt/etc/kvtier/tierd.conf\n",
                     "the unit of make install PREFIX=/opt/kvt:\n%s", out);
    free(out);
}

/* make uninstall removes what make install wrote, then the folders it made
 * once they are empty: those that were there (here usr/local/lib and
 * usr/local/share/man, as a system has them) stay, and so do the folders of
 * a config that was changed. */
Test(install_tree, uninstall_leaves_only_the_folders_that_were_there, .init = tmp_make,
     .fini = tmp_remove)
{
    const char *dir = tmp;
    char *out;

    free(t_sh_okf("mkdir -p '%s/usr/local/lib' '%s/usr/local/share/man'", dir, dir));
    for (int changed = 0; changed < 2; changed++) {
        make_in_tree_ok("install DESTDIR='%s'", dir);
        if (changed)
            free(t_sh_okf("echo '; mine' >>'%s/usr/local/etc/kvtier/tierd.conf'", dir));
        make_in_tree_ok("uninstall DESTDIR='%s'", dir);
        out = t_sh_okf("cd '%s' && find . -mindepth 1 | LC_ALL=C sort | tr '\\n' ' '", dir);
        cr_expect_str_eq(out,
                         changed ? "./usr ./usr/local ./usr/local/etc ./usr/local/etc/kvtier "
                                   "./usr/local/etc/kvtier/tierd.conf ./usr/local/lib "
                                   "./usr/local/share ./usr/local/share/man "
                                 : "./usr ./usr/local ./usr/local/lib ./usr/local/share "
                                   "./usr/local/share/man ",
                         "after make install and uninstall%s, %s holds: %s",
                         changed ? " (the config changed)" : "", dir, out);
        free(out);
    }
}

/* kvreplay --preset without --prices reads the presets make install put
 * beside it (share/kvtier/, from bin/), not the tree's. */
Test(install_tree, the_installed_kvreplay_reads_its_presets)
{
    char bin[PATH_MAX], cmd[2 * PATH_MAX];
    char *out;
    int rc;

    installed("/bin/kvreplay", bin, sizeof(bin));
    snprintf(cmd, sizeof(cmd), "'%s%s' --hits 1e9 --misses 3e9 --preset api-1-10 2>&1", root(),
             bin);
    rc = t_sh(cmd, &out);
    cr_expect(rc == 0 && strstr(out, "prices (api-1-10)"), "%s: exit %d:\n%s", cmd, rc, out);
    free(out);
}

Test(install_tree, systemd_analyze_verify_accepts_the_unit)
{
    char unit[PATH_MAX], man[PATH_MAX], cmd[4 * PATH_MAX], dir[256];
    char *out;
    int rc;

    installed("/tierd.service", unit, sizeof(unit));
    installed("/man8/tierd.8", man, sizeof(man));
    t_tmpdir("kvt-unit", dir, sizeof(dir));
    /* a root of the installed tree and systemd's own units (the targets
     * tierd.service is ordered against): verify checks that ExecStart's
     * program is there, and MANPATH lets it find Documentation=man:tierd(8) */
    snprintf(cmd, sizeof(cmd),
             "cp -a '%s/.' '%s/' && mkdir -p '%s/usr/lib/systemd' && "
             "cp -a /usr/lib/systemd/system '%s/usr/lib/systemd/' && ln -s usr/lib '%s/lib' && "
             "MANPATH='%s%.*s' systemd-analyze verify --root='%s' tierd.service 2>&1",
             root(), dir, dir, dir, dir, dir, (int)(strstr(man, "/man8/") - man), man, dir);
    rc = t_sh(cmd, &out);
    cr_expect(rc == 0 && !*out, "systemd-analyze verify %s: exit %d:\n%s", unit, rc, out);
    free(out);
    rm_tree(dir);
}
