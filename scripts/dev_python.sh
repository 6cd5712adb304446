#!/usr/bin/env bash
# Builds the C++ library, its tests and seqmix._C into a build folder of your choice and
# lays out an importable package there, without pip:
#   scripts/dev_python.sh build/dev && PYTHONPATH=build/dev/py python -m pytest tests/python
# Several checkouts or people can build side by side in separate folders.
# SEQMIX_CUDA=ON|OFF|AUTO (default OFF) and SEQMIX_CMAKE_ARGS (extra cmake arguments) pass through.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:?usage: scripts/dev_python.sh BUILD_DIR}
python=${PYTHON:-python3}
mkdir -p "$build"
build=$(cd "$build" && pwd)
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=Release -DSEQMIX_CUDA="${SEQMIX_CUDA:-OFF}" \
  -DSEQMIX_BUILD_PYTHON=ON -DSEQMIX_BUILD_TESTS=ON -DPython_EXECUTABLE="$(command -v "$python")" \
  ${SEQMIX_CMAKE_ARGS:-} >/dev/null
cmake --build "$build" -j "$(nproc)"
rm -rf "$build/py" && mkdir -p "$build/py"
cp -r "$root/python/seqmix" "$build/py/seqmix"
cp "$build"/python/_C*.so "$build/py/seqmix/"
echo "PYTHONPATH=$build/py"
