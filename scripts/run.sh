#!/usr/bin/env bash
# The main job: set-up, a release build, then examples/pipeline_mlp.py on two
# local workers.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$(nproc)"
exec .venv/bin/python examples/pipeline_mlp.py "$@"
