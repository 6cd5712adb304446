#!/usr/bin/env bash
# Installs seqmix with its test dependencies and runs every test: the C++ tests
# (GoogleTest through ctest) and the Python tests (pytest, torch included).
# GPU tests skip with a printed reason on a machine without a GPU.
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
jobs=$(nproc)

echo "== C++: configure, build, ctest"
cmake --preset default -DPython_EXECUTABLE="$py" >/dev/null
cmake --build --preset default -j "$jobs"
ctest --preset default -j "$jobs"

echo "== Python: pip install ."
# Without a GPU (CI's 2-core machine) the build above has compiled every CUDA kernel once
# already and the Python GPU tests skip, so the extension takes one kernel folder (the
# gated scan: its CUDA dispatch path still builds) instead of compiling them all again.
pip_args=()
if ! nvidia-smi -L >/dev/null 2>&1; then
  pip_args+=(--config-settings=cmake.define.SEQMIX_CUDA_KERNELS=gated_scan)
fi
"$py" -m pip install -q --no-build-isolation ${pip_args[@]+"${pip_args[@]}"} .

echo "== Python: pytest"
# Run from the tests folder so the installed package, not the source tree, is imported.
(cd tests/python && "$py" -m pytest -q -p no:cacheprovider .)
