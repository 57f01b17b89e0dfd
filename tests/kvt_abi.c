/* SPDX-License-Identifier: MIT */
/*
 * kvt_abi.c - libkvtier's ABI as built: the shared library exports exactly
 * the functions its installed headers declare (kvtier.h, kv_layout.h), as
 * the compiler reads them (gcc -aux-info), each under a version node of
 * client/libkvtier.map of the soname's line (KVTIER_1, or KVTIER_1.N for
 * the functions a MINOR added); its soname is libkvtier.so.0, a link in the
 * build folder to libkvtier.so.0.MINOR.PATCH; and libkvtier.a's global
 * symbols are all ours (the CUDA runtime inside it stays local).
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t.h"

/* The version nodes of libkvtier.so.0's line (client/libkvtier.map's rule):
 * KVTIER_1, then KVTIER_1.1, KVTIER_1.2 ... for the functions each MINOR
 * adds; an ABI break starts the next line (KVTIER_2, a new soname). */
#define NODE_LINE "KVTIER_1"

/* Into dir/decl, sorted: the names of the functions kvtier.h and kv_layout.h
 * (found by incs, -I options) declare, as the compiler sees them. Returns
 * how many. */
static int declared(const char *dir, const char *incs)
{
    char *n = t_sh_okf("cd '%s' && printf '#include <kvtier.h>\\n#include <kv_layout.h>\\n' >h.c "
                       "&& cc -std=gnu11 %s -fsyntax-only -aux-info h.aux h.c && "
                       "sed -n -E 's@^/\\* [^ ]*/(kvtier|kv_layout)\\.h:[0-9]+:NC \\*/ .*[ *]"
                       "([A-Za-z_0-9]+) \\(.*@\\2@p' h.aux | LC_ALL=C sort -u >decl && "
                       "wc -l <decl", dir, incs);
    int count = atoi(n);

    free(n);
    return count;
}

/* The exports in nm_cmd's output (`nm -D --defined-only` lines) without a
 * default version (@@) of a node of NODE_LINE, one a line. */
static char *off_the_line(const char *nm_cmd)
{
    char cmd[3 * PATH_MAX];

    snprintf(cmd, sizeof(cmd),
             "%s | awk '$2 != \"A\" && $3 !~ /@@" NODE_LINE "(\\.[1-9][0-9]*)?$/ { print $3 }'",
             nm_cmd);
    return t_sh_ok(cmd);
}

/* The two checks above on made-up input: a MINOR's node (KVTIER_1.N) is of
 * the line, no node or another line's is not; a declared name with capitals
 * is a name. */
Test(kvt_abi, the_checks_take_every_node_of_the_line_and_names_with_capitals)
{
    char dir[256], cmd[2 * PATH_MAX], inc[PATH_MAX + 8];
    char *out;

    out = off_the_line("printf '%s\\n' '1000 T kvt_a@@KVTIER_1' '1010 T kvt_b@@KVTIER_1.1' "
                       "'1020 T kvt_c@@KVTIER_1.12' '0 A KVTIER_1.1' '1030 T kvt_d' "
                       "'1040 T kvt_e@@KVTIER_2' '1050 T kvt_f@@KVTIER_10' "
                       "'1060 T kvt_g@KVTIER_1' '1070 T kvt_h@@KVTIER_1.'");
    cr_expect_str_eq(out, "kvt_d\nkvt_e@@KVTIER_2\nkvt_f@@KVTIER_10\nkvt_g@KVTIER_1\n"
                     "kvt_h@@KVTIER_1.\n", "exports off the line " NODE_LINE ":\n%s", out);
    free(out);
    t_tmpdir("kvt-abi", dir, sizeof(dir));
    snprintf(cmd, sizeof(cmd),
             "cd '%s' && printf 'int kvt_lower(int a);\\nvoid kvt_Mixed_Case(void);\\n"
             "const char *KVT_UPPER(const char *s);\\n' >kvtier.h && : >kv_layout.h", dir);
    free(t_sh_ok(cmd));
    snprintf(inc, sizeof(inc), "-I'%s'", dir);
    cr_expect_eq(declared(dir, inc), 3);
    snprintf(cmd, sizeof(cmd), "cat '%s/decl' | tr '\\n' ' '; rm -r '%s'", dir, dir);
    out = t_sh_ok(cmd);
    cr_expect_str_eq(out, "KVT_UPPER kvt_Mixed_Case kvt_lower ", "declared: %s", out);
    free(out);
}

Test(kvt_abi, exports_are_exactly_the_functions_the_headers_declare)
{
    const char *src = getenv("KVT_TEST_SRC");
    char cmd[4 * PATH_MAX], lib[PATH_MAX], inc[3 * PATH_MAX + 48], dir[256];
    char *undeclared, *unexported;
    int n;

    t_bin("libkvtier.so.0", lib, sizeof(lib));
    t_tmpdir("kvt-abi", dir, sizeof(dir));
    /* decl: every function the two headers declare, as the compiler sees them;
     * exp: every function the library exports */
    /* common/: kvt_stats_list.h, which kvtier.h includes (installed beside it) */
    snprintf(inc, sizeof(inc), "-I'%s/client' -I'%s/common' -I'%s/kernels'", src ? src : ".",
             src ? src : ".", src ? src : ".");
    n = declared(dir, inc);
    cr_assert_gt(n, 50, "only %d functions found in kvtier.h and kv_layout.h", n);
    snprintf(cmd, sizeof(cmd),
             "cd %s && nm -D --defined-only '%s' | awk '$2 != \"A\" { sub(/@.*/, \"\", $3); "
             "print $3 }' | LC_ALL=C sort -u >exp", dir, lib);
    free(t_sh_ok(cmd));
    snprintf(cmd, sizeof(cmd), "cd %s && LC_ALL=C comm -23 decl exp | tr '\\n' ' '", dir);
    unexported = t_sh_ok(cmd);
    snprintf(cmd, sizeof(cmd), "cd %s && LC_ALL=C comm -13 decl exp | tr '\\n' ' '", dir);
    undeclared = t_sh_ok(cmd);
    snprintf(cmd, sizeof(cmd), "rm -r '%s'", dir);
    free(t_sh_ok(cmd));
    cr_expect_str_empty(unexported, "declared in the headers, not exported by %s (add to "
                        "client/libkvtier.map): %s", lib, unexported);
    cr_expect_str_empty(undeclared, "exported by %s, declared in no installed header (keep "
                        "out of client/libkvtier.map): %s", lib, undeclared);
    free(unexported);
    free(undeclared);
}

Test(kvt_abi, every_export_has_a_node_of_the_line_and_the_soname_is_the_major)
{
    char cmd[2 * PATH_MAX], lib[PATH_MAX], ar[PATH_MAX], real[PATH_MAX];
    char *out;

    t_bin("libkvtier.so.0", lib, sizeof(lib));
    snprintf(cmd, sizeof(cmd),
             "readelf -d '%s' | sed -n 's/.*Library soname: \\[\\(.*\\)\\]/\\1/p'", lib);
    out = t_sh_ok(cmd);
    cr_expect_str_eq(out, "libkvtier.so.0\n", "soname of %s: expected libkvtier.so.0, got %s",
                     lib, out);
    free(out);
    /* the soname's file is a link to the versioned one, as installed */
    cr_assert_not_null(realpath(lib, real), "%s: no such file (make builds it)", lib);
    cr_expect(strncmp(strrchr(real, '/'), "/libkvtier.so.0.", 16) == 0,
              "%s: expected a link to libkvtier.so.0.MINOR.PATCH, it is %s", lib, real);
    snprintf(cmd, sizeof(cmd), "nm -D --defined-only '%s'", lib);
    out = off_the_line(cmd);
    cr_expect_str_empty(out, "exports without a node of " NODE_LINE " (" NODE_LINE " or "
                        NODE_LINE ".N):\n%s", out);
    free(out);
    t_bin("libkvtier.a", ar, sizeof(ar));
    snprintf(cmd, sizeof(cmd),
             "nm -g --defined-only '%s' | awk 'NF == 3 && $3 !~ /^kv[tk]_/ { print $3 }'", ar);
    out = t_sh_ok(cmd);
    cr_expect_str_empty(out, "%s defines global symbols that are not ours:\n%.2000s", ar, out);
    free(out);
}

Test(kvt_abi, the_debian_symbols_file_names_every_export)
{
    const char *src = getenv("KVT_TEST_SRC");
    char cmd[3 * PATH_MAX], lib[PATH_MAX];
    char *diff;
    int rc;

    t_bin("libkvtier.so.0", lib, sizeof(lib));
    /* name@node, as both spell it (the node is a symbol of its own);
     * '<': exported, not in the symbols file (add it with the version it came in);
     * '>': in the symbols file, not exported (an ABI break: see libkvtier.map) */
    snprintf(cmd, sizeof(cmd),
             "d=$(mktemp -d) && nm -D --defined-only '%s' | awk '$2 == \"A\" { $3 = $3 \"@\" $3 } "
             "{ sub(/@@/, \"@\", $3); print $3 }' | sort >$d/e && "
             "sed -n 's/^ \\([^ ]*\\) .*/\\1/p' '%s/debian/libkvtier0.symbols' | sort >$d/s && "
             "diff $d/e $d/s | grep '^[<>]'; rc=$?; rm -r $d; exit $rc",
             lib, src ? src : ".");
    rc = t_sh(cmd, &diff);
    cr_expect(rc == 1 && !*diff, "%s against debian/libkvtier0.symbols:\n%s", lib, diff);
    free(diff);
}
