#!/usr/bin/env bash
# The GPU check, for a machine with a CUDA GPU and no network:
#   scripts/gpu_check.sh OUTDIR [--quick|--full]
# builds everything with all cores, runs the C++ and Python tests (GPU cases included),
# compute-sanitizer memcheck and racecheck over the small GPU cases, and the GPU
# benchmark, writing check.log, summary.txt and bench/ (JSON, Markdown, plots) to
# OUTDIR. Wheels in .whl/ (fla, say) are installed to a temporary folder first;
# CUTLASS headers in .cutlass/ (the nvidia-cutlass package's cutlass_library) are used.
# To fit a time limit: SEQMIX_CHECK_PYTEST (test paths, default tests/python) and
# SEQMIX_CHECK_BENCH_OPS (ops for the benchmark, default all; "none" skips it) and
# SEQMIX_CHECK_SMALL (the GoogleTest filter of the cases run under compute-sanitizer).
set -uo pipefail
out=${1:?usage: scripts/gpu_check.sh OUTDIR [--quick|--full]}
mode=${2:---quick}
cd "$(dirname "$0")/.."
mkdir -p "$out"
out=$(cd "$out" && pwd)
log="$out/check.log"
: >"$log"
results=()

# Runs a named step, its output appended to the log; records PASS/FAIL and seconds.
step() {
  local name=$1 start=$SECONDS
  shift
  echo "== $name: $*" | tee -a "$log"
  if "$@" >>"$log" 2>&1; then results+=("PASS  $name ($((SECONDS - start)) s)")
  else results+=("FAIL  $name (exit $?, $((SECONDS - start)) s)"); fi
}

{ nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv; nvcc --version | tail -2;
  python3 -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda)'; } >>"$log" 2>&1

if compgen -G ".whl/*.whl" >/dev/null; then
  step "install carried wheels" python3 -m pip install -q --no-index --no-deps --no-compile --target /tmp/seqmix-site .whl/*.whl
  export PYTHONPATH=/tmp/seqmix-site${PYTHONPATH:+:$PYTHONPATH}
fi
cmake_args=""
[ -d .cutlass ] && cmake_args="-DSEQMIX_CUTLASS_DIR=$PWD/.cutlass"

build=build/gpu
step "build (all targets, $(nproc) cores)" env SEQMIX_CUDA=ON PYTHON=python3 SEQMIX_CMAKE_ARGS="$cmake_args" \
  scripts/dev_python.sh "$build"
export PYTHONPATH=$PWD/$build/py${PYTHONPATH:+:$PYTHONPATH}
tests=$build/tests/cpp/seqmix_tests
small=${SEQMIX_CHECK_SMALL:-'*Cuda*Small*'}
step "C++ tests" "$tests" --gtest_brief=1
step "memcheck (small GPU cases)" compute-sanitizer --tool memcheck --error-exitcode 1 "$tests" --gtest_filter="$small"
step "racecheck (small GPU cases)" compute-sanitizer --tool racecheck --error-exitcode 1 "$tests" --gtest_filter="$small"
# shellcheck disable=SC2086  # a list of paths
step "Python tests" python3 -m pytest -q -p no:cacheprovider -rs ${SEQMIX_CHECK_PYTEST:-tests/python}
bench_ops=${SEQMIX_CHECK_BENCH_OPS:-}
if [ "$bench_ops" != none ]; then
  # torch is imported before seqmix's extension: one GPU-machine run crashed inside
  # `import torch` when the extension had been loaded first (cause not yet found).
  step "GPU benchmark ($mode${bench_ops:+, $bench_ops})" python3 -c \
    'import torch, runpy; runpy.run_module("seqmix.cli", run_name="__main__")' bench --device cuda "$mode" \
    ${bench_ops:+--ops "$bench_ops"} --out "$out/bench"
fi

{
  echo "seqmix GPU check on $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
  printf '%s\n' "${results[@]}"
  grep -E "^\[  (PASSED|FAILED|SKIPPED) " "$log" | sort | uniq -c | head -20
  grep -E "ERROR SUMMARY|RACECHECK SUMMARY" "$log"
  grep -E "^[0-9]+ (passed|failed)|passed|failed" "$log" | grep -E "in [0-9.]+s" | tail -1
} >"$out/summary.txt"
[ -f "$out/bench/results.md" ] && cat "$out/bench/results.md"
echo
cat "$out/summary.txt"
! grep -q "^FAIL" "$out/summary.txt"
