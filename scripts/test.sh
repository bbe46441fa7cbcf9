#!/usr/bin/env bash
# The whole test run: set-up, a sanitizer build (ASan+UBSan, libFuzzer
# targets) and a release build, then every test through CTest.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
bash scripts/setup.sh
jobs="$(nproc)"
cmake -S . -B build/asan -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
      -DCW_SANITIZE=ON -DCW_FUZZ=ON >/dev/null
cmake --build build/asan -j "$jobs"
cmake -S . -B build/release -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release >/dev/null
cmake --build build/release -j "$jobs"
ctest --test-dir build/asan --output-on-failure --timeout 900 -j "$jobs" "$@"
