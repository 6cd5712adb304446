# Sourced by test.sh and bench.sh: a virtual environment outside the repo (cached, so a
# rerun downloads nothing) with the build and test dependencies of seqmix.
#   SEQMIX_VENV     where it lives (default ~/.cache/seqmix-ci/venv)
#   SEQMIX_NO_TORCH=1  skip torch (the torch tests then skip with a printed reason)
set -euo pipefail
SEQMIX_VENV=${SEQMIX_VENV:-${XDG_CACHE_HOME:-$HOME/.cache}/seqmix-ci/venv}
if [ ! -x "$SEQMIX_VENV/bin/python" ]; then
  echo "== creating $SEQMIX_VENV"
  python3 -m venv "$SEQMIX_VENV"
fi
py="$SEQMIX_VENV/bin/python"
deps=(numpy pytest nanobind scikit-build-core ninja nvidia-cutlass)
[ "${SEQMIX_NO_TORCH:-0}" = 1 ] || deps+=(torch)
# Install only what is missing: a warm cache costs one import check.
missing=()
for dep in "${deps[@]}"; do
  case $dep in nvidia-cutlass) module=cutlass_library ;; *) module=${dep//-/_} ;; esac
  "$py" -c "import importlib.util,sys; sys.exit(importlib.util.find_spec('$module') is None)" 2>/dev/null || missing+=("$dep")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "== installing ${missing[*]} into $SEQMIX_VENV"
  "$py" -m pip install -q --upgrade pip
  for dep in "${missing[@]}"; do
    case $dep in
      # Only CUTLASS's headers are used: the pinned version, without its Python tooling.
      nvidia-cutlass) "$py" -m pip install -q --no-deps nvidia-cutlass==4.2.0.0 ;;
      *) "$py" -m pip install -q "$dep" ;;
    esac
  done
fi
export PATH="$SEQMIX_VENV/bin:$PATH"
