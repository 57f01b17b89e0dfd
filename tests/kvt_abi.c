/* SPDX-License-Identifier: MIT */
/*
 * kvt_abi.c - libkvtier's ABI as built: the shared library exports exactly
 * the functions its installed headers declare (kvtier.h, kv_layout.h), as
 * the compiler reads them (gcc -aux-info), each under the version node of
 * client/libkvtier.map; its soname is libkvtier.so.0, a link in the build
 * folder to libkvtier.so.0.MINOR.PATCH; and libkvtier.a's global symbols
 * are all ours (the CUDA runtime inside it stays local).
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "t.h"

#define NODE "KVTIER_1"

Test(abi, exports_are_exactly_the_functions_the_headers_declare)
{
    const char *src = getenv("KVT_TEST_SRC");
    char cmd[4 * PATH_MAX], lib[PATH_MAX], dir[] = "/tmp/kvt-abi-XXXXXX";
    char *n, *undeclared, *unexported;

    t_bin("libkvtier.so.0", lib, sizeof(lib));
    cr_assert_not_null(mkdtemp(dir));
    /* decl: every function the two headers declare, as the compiler sees them;
     * exp: every function the library exports */
    snprintf(cmd, sizeof(cmd),
             "cd %s && printf '#include <kvtier.h>\\n#include <kv_layout.h>\\n' >h.c && "
             "cc -std=gnu11 -I'%s/client' -I'%s/kernels' -fsyntax-only -aux-info h.aux h.c && "
             "sed -n -E 's@^/\\* [^ ]*/(kvtier|kv_layout)\\.h:[0-9]+:NC \\*/ .*[ *]"
             "([a-z_0-9]+) \\(.*@\\2@p' h.aux | sort -u >decl && "
             "nm -D --defined-only '%s' | awk '$2 != \"A\" { sub(/@.*/, \"\", $3); print $3 }' "
             "| sort -u >exp && wc -l <decl",
             dir, src ? src : ".", src ? src : ".", lib);
    n = t_sh_ok(cmd);
    cr_assert_gt(atoi(n), 50, "only %d functions found in kvtier.h and kv_layout.h", atoi(n));
    snprintf(cmd, sizeof(cmd), "cd %s && comm -23 decl exp | tr '\\n' ' '", dir);
    unexported = t_sh_ok(cmd);
    snprintf(cmd, sizeof(cmd), "cd %s && comm -13 decl exp | tr '\\n' ' '", dir);
    undeclared = t_sh_ok(cmd);
    snprintf(cmd, sizeof(cmd), "rm -r '%s'", dir);
    free(t_sh_ok(cmd));
    cr_expect_str_empty(unexported, "declared in the headers, not exported by %s (add to "
                        "client/libkvtier.map): %s", lib, unexported);
    cr_expect_str_empty(undeclared, "exported by %s, declared in no installed header (keep "
                        "out of client/libkvtier.map): %s", lib, undeclared);
    free(n);
    free(unexported);
    free(undeclared);
}

Test(abi, every_export_has_the_version_node_and_the_soname_is_the_major)
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
    snprintf(cmd, sizeof(cmd),
             "nm -D --defined-only '%s' | awk '$2 != \"A\" && $3 !~ /@@" NODE "$/ "
             "{ print $3 }'", lib);
    out = t_sh_ok(cmd);
    cr_expect_str_empty(out, "exports without the node " NODE ":\n%s", out);
    free(out);
    t_bin("libkvtier.a", ar, sizeof(ar));
    snprintf(cmd, sizeof(cmd),
             "nm -g --defined-only '%s' | awk 'NF == 3 && $3 !~ /^kv[tk]_/ { print $3 }'", ar);
    out = t_sh_ok(cmd);
    cr_expect_str_empty(out, "%s defines global symbols that are not ours:\n%.2000s", ar, out);
    free(out);
}

Test(abi, the_debian_symbols_file_names_every_export)
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
