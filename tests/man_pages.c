/* SPDX-License-Identifier: MIT */
/*
 * man_pages.c - the man pages (man/) stay true to the programs: every long
 * option a page names is one the program's --help lists, and every option
 * --help lists has its page entry; and groff formats each page without a
 * warning; and where --help lists exit codes, they are the page's.
 */
#include <criterion/criterion.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "t.h"

/* Compare the long options of prog's --help with those of man/page. */
static void check_page(const char *prog, const char *page)
{
    const char *src = getenv("KVT_TEST_SRC");
    char cmd[4 * PATH_MAX], bin[PATH_MAX], path[PATH_MAX];
    char *diff, *warn;
    int rc;

    snprintf(path, sizeof(path), "%s/man/%s", src ? src : ".", page);
    t_bin(prog, bin, sizeof(bin));
    /* '<' lines: in --help only; '>' lines: in the page only (roff writes \-\-) */
    snprintf(cmd, sizeof(cmd),
             "opts() { grep -oE -- '--[a-z][a-z0-9-]*' | grep -vx -- --help | sort -u; }; "
             "d=$(mktemp -d) && { '%s' --help 2>&1 || true; } | opts >$d/h && "
             "sed 's/\\\\-/-/g' '%s' | opts >$d/m && diff $d/h $d/m | grep '^[<>]'; "
             "rc=$?; rm -r $d; exit $rc",
             bin, path);
    rc = t_sh(cmd, &diff);
    cr_expect(rc == 1 && !*diff,
              "%s --help and man/%s differ ('<': only in --help, '>': only in the page):\n%s",
              prog, page, diff);
    free(diff);
    /* the exit codes --help lists (after "exit status:", where it has one) and
     * those of the page's EXIT STATUS section */
    snprintf(cmd, sizeof(cmd),
             "codes() { { grep -oE '\\<[0-9]+\\>' || true; } | sort -un; }; "
             "d=$(mktemp -d) && { '%s' --help 2>&1 || true; } | sed -n '/^exit status:/,$p' | "
             "codes >$d/h && sed -n '/^\\.SH EXIT STATUS/,/^\\.SH /{/^\\.SH/!p}' '%s' | "
             "codes >$d/m && if [ -s $d/h ]; then diff $d/h $d/m | grep '^[<>]'; else false; fi; "
             "rc=$?; rm -r $d; exit $rc",
             bin, path);
    rc = t_sh(cmd, &diff);
    cr_expect(rc == 1 && !*diff,
              "the exit codes of %s --help and of man/%s differ ('<': only in --help, '>': only "
              "in the page):\n%s", prog, page, diff);
    free(diff);
    snprintf(cmd, sizeof(cmd), "groff -man -ww -z -Tutf8 '%s' 2>&1", path);
    cr_assert_eq(t_sh(cmd, &warn), 0, "groff: %s", warn);
    cr_expect_str_empty(warn, "groff warns about man/%s:\n%s", page, warn);
    free(warn);
}

Test(man, tierd_8_names_the_options_of_tierd_help)
{
    check_page("tierd", "tierd.8");
}

Test(man, tierctl_1_names_the_options_of_tierctl_help)
{
    check_page("tierctl", "tierctl.1");
}

Test(man, kvcalc_1_names_the_options_of_kvcalc_help)
{
    check_page("kvcalc", "kvcalc.1");
}

Test(man, kvreplay_1_names_the_options_of_kvreplay_help)
{
    check_page("kvreplay", "kvreplay.1");
}
