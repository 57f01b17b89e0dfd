#!/bin/sh
# SPDX-License-Identifier: MIT
# Assemble the GPU bundle (make gpu-bundle): a folder that runs the GPU checks
# on a bare machine with only glibc and the CUDA driver.
# Usage: mk/gpu-bundle.sh DIR RUN_SH FILE...
#   DIR     made afresh: run.sh, bin/, lib/, system-libs, glibc-min
#   RUN_SH  the bundle's run.sh (tests/gpu/run.sh)
#   FILE    a program (to bin/) or a shared library (*.so, to lib/ under its soname)
# Every shared library the files load is copied from this machine into lib/,
# except glibc's own and the driver's libcuda (SYSTEM below, listed in
# DIR/system-libs); binaries find lib/ through LD_LIBRARY_PATH, which run.sh
# sets to it alone. DIR/glibc-min is the newest glibc symbol version any of
# them needs. Fails when a library is not found or DIR passes MAX_KIB.
set -eu
MAX_KIB=40960 # 40 MiB: what the device tool carries beside the checkout
# Never copied, the machine's own: glibc 2.36's libraries (the loader, libc
# and its split-off parts, NSS), the kernel's vDSO, the driver's libcuda, and
# GCC's libstdc++ and libgcc_s, which every machine with glibc has and of
# which our programs need only the oldest versions (CXXABI_1.3, GCC_3.0);
# Debian 12's copies would need glibc 2.36 where the programs need 2.34.
SYSTEM='^(ld-linux-x86-64|linux-vdso|libc|libm|libmvec|libpthread|libdl|librt|libresolv|libutil'
SYSTEM="$SYSTEM"'|libanl|libnsl|libBrokenLocale|libthread_db|libc_malloc_debug|libnss_[a-z]+'
SYSTEM="$SYSTEM"'|libcuda|libstdc\+\+|libgcc_s)\.so\.[0-9]+$'

dir=$1 run_sh=$2
shift 2
rm -rf "$dir"
mkdir -p "$dir/bin" "$dir/lib"
dir=$(cd "$dir" && pwd) # ldd names bundle libraries by the path given here
cp "$run_sh" "$dir/run.sh"
chmod 755 "$dir/run.sh"
for f in "$@"; do
    case $f in
    *.so)
        soname=$(readelf -d "$f" | sed -n 's/.*Library soname: \[\(.*\)\].*/\1/p')
        cp "$f" "$dir/lib/${soname:-$(basename "$f")}"
        ;;
    *) cp "$f" "$dir/bin/" ;;
    esac
done

# ldd lists each file's whole closure; a library found in lib/ is done
sys=$(mktemp)
trap 'rm -f "$sys"' EXIT
for f in "$dir"/bin/* "$dir"/lib/*; do
    LD_LIBRARY_PATH="$dir/lib" ldd "$f" | while read -r name arrow path _; do
        if [ "$arrow" != "=>" ]; then # the loader or the vDSO, by path
            case $name in
            /* | linux-vdso*) path=$name name=$(basename "$name") ;;
            *) continue ;; # "statically linked"
            esac
        fi
        if printf '%s\n' "$name" | grep -Eq "$SYSTEM"; then
            echo "$name" >>"$sys"
        elif [ "$path" = "not" ]; then
            echo "gpu-bundle: $f: $name not found" >&2
            exit 1
        elif [ "${path#"$dir"/lib/}" = "$path" ] && [ ! -e "$dir/lib/$name" ]; then
            cp -L "$path" "$dir/lib/$name"
        fi
    done
done
sort -u "$sys" >"$dir/system-libs"
objdump -T "$dir"/bin/* "$dir"/lib/* | grep -o 'GLIBC_[0-9][0-9.]*' | sed 's/GLIBC_//' |
    sort -uV | tail -n 1 >"$dir/glibc-min"

# the newest libstdc++ symbol version anything needs of the machine's copy
cxx=$(objdump -T "$dir"/bin/* "$dir"/lib/* | grep -o 'GLIBCXX_[0-9][0-9.]*' | sort -uV |
    tail -n 1)

kib=$(du -sk "$dir" | cut -f1)
echo "gpu-bundle: $dir: $kib KiB of $MAX_KIB (needs glibc >= $(cat "$dir/glibc-min")," \
    "libstdc++ ${cxx:-of any version}; $(ls "$dir/lib" | wc -l) libraries in lib/)"
[ "$kib" -le "$MAX_KIB" ] || { echo "gpu-bundle: over $MAX_KIB KiB" >&2; exit 1; }
