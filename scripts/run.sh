#!/usr/bin/env bash
# The main job: set-up, a release build, then a small model trained with
# unchanged JAX on the embedded causeway cluster (two islands), checked
# against stock JAX at the end.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
cmake -S . -B build/release -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$(nproc)"
JAX_PLATFORMS=causeway exec .venv/bin/python examples/train_two_islands.py "$@"
