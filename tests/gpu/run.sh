#!/bin/sh
# SPDX-License-Identifier: MIT
# Checks that need a GPU, for a machine lent with one (see the README):
# builds everything with nvcc present and runs the hot tier's device tests
# on the CUDA backend instead of the emulated one. Prints what it measured;
# exits non-zero on any failure.
set -eu
cd "$(dirname "$0")/../.."
nvidia-smi -L || { echo "gpu: no GPU visible"; exit 77; }
make -j"$(nproc)" all build/kvt_tests
KVT_TEST_HOT=cuda KVT_TEST_BIN="$PWD/build" KVT_TEST_SRC="$PWD" \
    build/kvt_tests --filter 'tier_hot/*' --verbose -j1
