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
"$py" -m pip install -q --no-build-isolation .

echo "== Python: pytest"
# Run from the tests folder so the installed package, not the source tree, is imported.
(cd tests/python && "$py" -m pytest -q -p no:cacheprovider .)
