#!/bin/sh
# SPDX-License-Identifier: MIT
# make deb: the Debian binary packages, built by Debian's tools (dpkg-buildpackage,
# debhelper; debian/) on a copy of the tree, then checked by lintian.
# Usage: mk/deb.sh VERSION OUTDIR
#   The copy (OUTDIR/kvtier-VERSION) holds the files git tracks or would track (the
#   tree's build folders stay out of it, and the package build cleans only the copy);
#   the .deb, .changes and .buildinfo files land in OUTDIR, lintian's report in
#   OUTDIR/lintian.txt. Fails when debian/changelog's version is not VERSION, when the
#   build fails, when kvtier's postinst does not restart tierd on upgrade or its prerm
#   does not stop it on removal (OUTDIR/kvtier.control: its control files), or on any
#   lintian error or warning not overridden with a reason (debian/*.lintian-overrides).
set -eu
version=$1 out=$2
changelog=$(dpkg-parsechangelog -l debian/changelog -S Version)
if [ "$changelog" != "$version" ]; then
    echo "deb: debian/changelog's version is $changelog, the Makefile's $version" >&2
    exit 1
fi
rm -rf "$out"
mkdir -p "$out/kvtier-$version"
if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
    # tracked and untracked-but-not-ignored files that exist (a deletion not yet
    # committed stays deleted)
    git ls-files -z -co --exclude-standard | xargs -0 sh -c \
        'for f; do [ -e "$f" ] && printf "%s\0" "$f"; done' sh |
        xargs -0 cp --parents -t "$out/kvtier-$version"
else
    tar -c --exclude=./build --exclude=./build-san --exclude=./build-fuzz --exclude=./var . |
        tar -x -C "$out/kvtier-$version"
fi
# -b: binary packages only; -us -uc: unsigned; parallel=2: the machine's two cores
(cd "$out/kvtier-$version" &&
    DEB_BUILD_OPTIONS="parallel=2 ${DEB_BUILD_OPTIONS:-}" dpkg-buildpackage -b -us -uc) \
    >"$out/build.log" 2>&1 || {
    tail -n 40 "$out/build.log"
    echo "deb: dpkg-buildpackage failed (log: $out/build.log)" >&2
    exit 1
}
changes=$(ls "$out"/kvtier_"$version"_*.changes)
# tierd's unit in kvtier's maintainer scripts (debian/rules, override_dh_installsystemd):
# postinst restarts it on upgrade (deb-systemd-invoke starts no disabled unit), prerm
# stops it on removal
ctl="$out/kvtier.control"
dpkg-deb -e "$out"/kvtier_"$version"_*.deb "$ctl"
script_has() { # FILE TEXT WHAT
    grep -qF -- "$2" "$ctl/$1" 2>/dev/null ||
        { echo "deb: kvtier's $1 does not $3 (no \"$2\" in it)" >&2; exit 1; }
}
script_has postinst "_dh_action=restart" "restart tierd on upgrade"
script_has postinst "deb-systemd-invoke \$_dh_action 'tierd.service'" "start or restart tierd"
script_has prerm "deb-systemd-invoke stop 'tierd.service'" "stop tierd on removal"
# every tag shown, info and overridden ones too; only errors and warnings fail
rc=0
lintian --info --display-info --show-overrides --fail-on error,warning "$changes" \
    >"$out/lintian.txt" 2>&1 || rc=$?
cat "$out/lintian.txt"
ls -l "$out"/*.deb
[ "$rc" -eq 0 ] || { echo "deb: lintian: errors or warnings (above)" >&2; exit 1; }
echo "deb: $(ls "$out"/*.deb | wc -l) packages in $out, lintian clean of errors and warnings"
