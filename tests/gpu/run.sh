#!/bin/sh
# SPDX-License-Identifier: MIT
# The GPU checks, run from the GPU bundle (`make gpu-bundle` copies this file
# to build/gpu-bundle/run.sh; see the README). Runs on a bare GPU machine: it
# builds nothing and loads only glibc, the driver's libcuda.so.1 and the
# bundle's own lib/ (LD_LIBRARY_PATH is set to that alone).
#  0. bin/gpu_probe: no GPU here -> exit 77 at once;
#  1. bin/kvk_check: the CUDA gather/scatter movers against the CPU reference
#     for every engine layout and element size, then their bandwidth against
#     cudaMemcpy;
#  2. bin/kvt_hot_tests: the hot tier's Criterion tests on the CUDA backend
#     (KVT_TEST_HOT=cuda) instead of the emulated one;
#  3. bin/offload_check: kvt_offload / kvt_restore of a device cache through
#     a private tierd (bin/tierd), via the pinned warm pool and via the hot
#     pool opened by CUDA IPC, then their bandwidth against cudaMemcpy.
# Each check runs under its own timeout. Prints what it measured (`bench:`
# lines, repeated at the end with the targets met or missed; a missed target
# is reported, not a failure) and writes the whole log to $OUT/gpu.log when
# OUT is set. Exits 0 when every check passed, 1 when one failed, 77 when
# there is no GPU. A few minutes on an H200; the timeouts add up to 8.5
# minutes, under the device tool's 10 a command.
set -u
: "${PATH:=/usr/local/bin:/usr/bin:/bin}"
export PATH
B=$(cd "$(dirname "$0")" && pwd)
LD_LIBRARY_PATH="$B/lib"
export LD_LIBRARY_PATH

tee_pid=
if [ -n "${OUT:-}" ]; then
    mkdir -p "$OUT" || exit 1
    fifo=$(mktemp -u "${TMPDIR:-/tmp}/kvt-gpu-log.XXXXXX")
    mkfifo "$fifo" || exit 1
    tee "$OUT/gpu.log" <"$fifo" &
    tee_pid=$!
    exec >"$fifo" 2>&1
    rm -f "$fifo"
fi

# Exit with $1 once tee has written everything.
finish() {
    if [ -n "$tee_pid" ]; then
        exec >&- 2>&-
        wait "$tee_pid"
    fi
    exit "$1"
}

echo "gpu: bundle $B"
"$B/bin/gpu_probe"
rc=$?
case $rc in
0) ;;
77) echo "gpu: no GPU visible: skipped (77)"; finish 77 ;;
1) echo "gpu: FAILED: a GPU driver is there but the CUDA runtime cannot use it"; finish 1 ;;
*)
    # most likely the loader refused: a glibc older than the bundle's build
    echo "gpu: FAILED: bin/gpu_probe could not run (exit $rc); the bundle needs" \
        "glibc >= $(cat "$B/glibc-min" 2>/dev/null), this machine has" \
        "$(getconf GNU_LIBC_VERSION 2>/dev/null || echo 'an unknown one')"
    finish 1
    ;;
esac

work=$(mktemp -d "${TMPDIR:-/tmp}/kvt-gpu.XXXXXX") || finish 1
failed=

# run NAME SECONDS CMD...: CMD under a timeout, its output shown and kept.
run() {
    name=$1 secs=$2
    shift 2
    echo "gpu: --- $name (timeout $secs s)"
    timeout -k 10 "$secs" "$@" >"$work/$name.log" 2>&1
    st=$?
    cat "$work/$name.log"
    if [ "$st" -eq 0 ]; then
        echo "gpu: $name OK"
    else
        [ "$st" -eq 124 ] && echo "gpu: $name timed out after $secs s"
        echo "gpu: $name FAILED (exit $st)"
        failed="$failed $name"
    fi
}

run kvk_check 240 "$B/bin/kvk_check"
run hot_tier 90 env KVT_TEST_HOT=cuda KVT_TEST_BIN="$B/bin" \
    "$B/bin/kvt_hot_tests" --verbose -j1 --timeout 60
mkdir -p "$work/tierd"
run offload_check 150 "$B/bin/offload_check" "$B/bin/tierd" "$work/tierd"

echo "gpu: --- figures"
cat "$work"/*.log | awk '
    $1 == "bench:" && $5 == "target" {
        met = ($6 == ">=") ? ($3 + 0 >= $7 + 0) : ($3 + 0 <= $7 + 0)
        print $0 (met ? "" : "   <- target missed")
        n++; m += met
    }
    END { printf "gpu: %d of %d targets met\n", m, n }'
rm -rf "$work"
if [ -n "$failed" ]; then
    echo "gpu: FAILED:$failed"
    finish 1
fi
echo "gpu: all checks passed"
finish 0
