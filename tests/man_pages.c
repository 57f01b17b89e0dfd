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

/* Compare what pick (a shell pipeline from its input to a sorted list)
 * finds in bin's --help, from where help_cut (a pipeline) starts it, and in
 * the page at path through page_cut; where optional, only when --help has
 * some. what: what they are, for the message. */
static void expect_same(const char *bin, const char *path, const char *pick,
                        const char *help_cut, const char *page_cut, int optional,
                        const char *what)
{
    char cmd[4 * PATH_MAX];
    char *diff;
    int rc;

    /* '<' lines: in --help only; '>' lines: in the page only */
    snprintf(cmd, sizeof(cmd),
             "pick() { %s; }; d=$(mktemp -d) && { '%s' --help 2>&1 || true; } | %s | pick >$d/h "
             "&& %s '%s' | pick >$d/m && if [ %d = 0 ] || [ -s $d/h ]; then diff $d/h $d/m | "
             "grep '^[<>]'; else false; fi; rc=$?; rm -r $d; exit $rc",
             pick, bin, help_cut, page_cut, path, optional);
    rc = t_sh(cmd, &diff);
    cr_expect(rc == 1 && !*diff,
              "%s of %s --help and of %s differ ('<': only in --help, '>': only in the "
              "page):\n%s", what, bin, path, diff);
    free(diff);
}

/* Compare the long options and the exit codes of prog's --help with those
 * of man/page; groff formats the page without a warning. */
static void check_page(const char *prog, const char *page)
{
    const char *src = getenv("KVT_TEST_SRC");
    char cmd[2 * PATH_MAX], bin[PATH_MAX], path[PATH_MAX];
    char *warn;

    snprintf(path, sizeof(path), "%s/man/%s", src ? src : ".", page);
    t_bin(prog, bin, sizeof(bin));
    /* roff writes \-\- */
    expect_same(bin, path, "grep -oE -- '--[a-z][a-z0-9-]*' | grep -vx -- --help | sort -u",
                "cat", "sed 's/\\\\-/-/g'", 0, "the long options");
    /* those after "exit status:", where --help has it, and the EXIT STATUS section's */
    expect_same(bin, path, "{ grep -oE '\\<[0-9]+\\>' || true; } | sort -un",
                "sed -n '/^exit status:/,$p'",
                "sed -n '/^\\.SH EXIT STATUS/,/^\\.SH /{/^\\.SH/!p}'", 1, "the exit codes");
    snprintf(cmd, sizeof(cmd), "groff -man -ww -z -Tutf8 '%s' 2>&1", path);
    cr_assert_eq(t_sh(cmd, &warn), 0, "groff: %s", warn);
    cr_expect_str_empty(warn, "groff warns about man/%s:\n%s", page, warn);
    free(warn);
}

Test(man_pages, tierd_8_names_the_options_of_tierd_help)
{
    check_page("tierd", "tierd.8");
}

Test(man_pages, tierctl_1_names_the_options_of_tierctl_help)
{
    check_page("tierctl", "tierctl.1");
}

Test(man_pages, kvcalc_1_names_the_options_of_kvcalc_help)
{
    check_page("kvcalc", "kvcalc.1");
}

Test(man_pages, kvreplay_1_names_the_options_of_kvreplay_help)
{
    check_page("kvreplay", "kvreplay.1");
}
