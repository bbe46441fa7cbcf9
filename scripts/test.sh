#!/usr/bin/env bash
# The whole test run: set-up, a sanitizer build (ASan+UBSan, libFuzzer
# targets) and a release build, then every test through CTest; then, from a
# ThreadSanitizer build, the C tests and benchmarks and the proxy suite (of
# the Python suites only that one: JAX's processes cannot load a TSan-built
# plugin, and there JAX only speaks gRPC to the TSan daemons).
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
cmake -S . -B build/tsan -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Debug \
      -DCW_TSAN=ON >/dev/null
cmake --build build/tsan -j "$jobs"
ctest --test-dir build/asan --output-on-failure --timeout 900 -j "$jobs" "$@"
# clang 14's TSan aborts ("FATAL: ThreadSanitizer: unexpected memory mapping")
# where the kernel randomizes mmap with more than 28 bits; without ASLR it runs.
tsan_run=()
if [ "$(cat /proc/sys/vm/mmap_rnd_bits 2>/dev/null || echo 28)" -gt 28 ]; then
  tsan_run=(setarch "$(uname -m)" -R)
fi
"${tsan_run[@]}" ctest --test-dir build/tsan --output-on-failure --timeout 900 -j "$jobs" -LE '^(e2e|packaging|deploy)$' "$@"
