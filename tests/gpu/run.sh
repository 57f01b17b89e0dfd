#!/bin/sh
# SPDX-License-Identifier: MIT
# Checks that need a GPU, for a machine lent with one (see the README):
#  1. builds everything with nvcc present (the CUDA kernels included);
#  2. tests/gpu/kvk_check.cu: the CUDA gather/scatter movers against the CPU
#     reference for every engine layout, then their bandwidth against
#     cudaMemcpy (device<->device and pinned host<->device), printed as
#     `bench:` lines;
#  3. the hot tier's device tests on the CUDA backend instead of the
#     emulated one;
#  4. tests/gpu/offload_check.c: kvt_offload / kvt_restore of a device cache
#     through a private tierd, via the pinned warm pool and via the hot pool
#     opened by CUDA IPC.
# Prints what it measured; exits non-zero on any failure (77: no GPU).
# Takes a few minutes at most on an H200.
set -eu
cd "$(dirname "$0")/../.."
nvidia-smi -L || { echo "gpu: no GPU visible"; exit 77; }
NVCC=${NVCC:-$(command -v nvcc 2>/dev/null || echo /usr/local/cuda/bin/nvcc)}
make -j"$(nproc)" all build/kvt_tests
make kernels # fails here, not at the link below, when nvcc is missing

# kvk.cu.o is built for sm_90 and sm_80; the checker for the GPU present.
"$NVCC" -O2 -std=c++17 -Ikernels -gencode arch=compute_90,code=sm_90 \
    -gencode arch=compute_80,code=sm_80 -Xcompiler -Wall,-Wextra \
    tests/gpu/kvk_check.cu build/kernels/kvk.cu.o build/obj/kernels/kvk_cpu.o \
    -o build/kvk_check

rc=0
timeout 240 build/kvk_check || rc=$?
[ "$rc" -eq 0 ] || echo "gpu: kvk_check failed (exit $rc)"

KVT_TEST_HOT=cuda KVT_TEST_BIN="$PWD/build" KVT_TEST_SRC="$PWD" \
    build/kvt_tests --filter 'tier_hot/*' --verbose -j1 || rc=$?

# kvt_offload / kvt_restore of a device cache on a CUDA stream, through tierd
CUDA_HOME=$(dirname "$(dirname "$NVCC")")
cc -std=gnu11 -O2 -D_GNU_SOURCE -I"$CUDA_HOME/include" -Iclient -Ikernels \
    tests/gpu/offload_check.c build/libkvtier.a -L"$CUDA_HOME/lib64" -lcudart_static \
    -ldl -lrt -lpthread -lstdc++ -lcrypto -ljansson -o build/offload_check
tmp=$(mktemp -d)
timeout 120 build/offload_check "$PWD/build/tierd" "$tmp" || rc=$?
rm -rf "$tmp"
exit "$rc"
