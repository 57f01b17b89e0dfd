#!/bin/sh
# SPDX-License-Identifier: MIT
# Install the Debian packages kvtier builds and tests with, or say how.
# Usage: mk/deps.sh build|test|bench   (each level includes the ones before)
#        mk/deps.sh fuzz                (build + clang with libFuzzer, for make fuzz)
#        mk/deps.sh deb                 (build + Debian's packaging tools, for make deb)
set -eu
level=${1:-build}
# libhiredis-dev: the store's remote tier (Redis Cluster client); libsystemd-dev:
# tierd's sd_notify (readiness under systemd)
pkgs="build-essential pkg-config libssl-dev liburing-dev liblmdb-dev libxxhash-dev libjansson-dev libmicrohttpd-dev libinih-dev libhiredis-dev libsystemd-dev"
case "$level" in
# redis-server + redis-tools (redis-cli): the remote tier's tests start a 3-master cluster;
# systemd (systemd-analyze verify of tierd.service), man-db and groff-base: the install
# and man page tests; python3-pip (with setuptools and wheel): tests/python's pip install
test|bench) pkgs="$pkgs libcriterion-dev python3 python3-cbor2 python3-pytest python3-numpy python3-venv python3-pip valgrind prometheus redis-server redis-tools systemd man-db groff-base" ;;
esac
case "$level" in
# dpkg-buildpackage, dh, dh_python3, lintian (debian/control's Build-Depends: the build level)
deb) pkgs="$pkgs dpkg-dev debhelper dh-python python3 lintian" ;;
esac
case "$level" in
bench) pkgs="$pkgs fio" ;;
esac
case "$level" in
fuzz) pkgs="$pkgs clang libclang-rt-14-dev" ;; # libFuzzer + sanitizer runtimes (Debian 12)
esac
missing=""
for p in $pkgs; do
    # "install ok installed" is the only state in which the files are there
    st=$(dpkg-query -W -f='${Status}' "$p" 2>/dev/null || true)
    [ "$st" = "install ok installed" ] || missing="$missing $p"
done
[ -z "$missing" ] && exit 0
if [ "$(id -u)" -ne 0 ]; then
    echo "kvtier: missing Debian packages:$missing" >&2
    echo "kvtier: run: sudo apt-get update && sudo apt-get install -y$missing" >&2
    exit 1
fi
echo "kvtier: installing:$missing"
export DEBIAN_FRONTEND=noninteractive
# update only when the package lists are missing or a plain install fails
apt-get install -y -q $missing >/dev/null 2>&1 || {
    apt-get update -q >/dev/null
    apt-get install -y -q $missing >/dev/null
}
