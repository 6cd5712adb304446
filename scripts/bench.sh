#!/usr/bin/env bash
# Installs seqmix (and torch, for the eager baselines) and runs `seqmix bench`.
# Arguments go to seqmix bench, e.g. scripts/bench.sh --json results.json
set -euo pipefail
cd "$(dirname "$0")/.."
source scripts/env.sh
"$py" -m pip install -q --no-build-isolation .
"$SEQMIX_VENV/bin/seqmix" bench "$@"
