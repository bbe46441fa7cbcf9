#!/usr/bin/env bash
# Set-up for a fresh Debian machine: build packages, a Python >= 3.12 venv at
# .venv with pinned JAX and XLA's CPU PJRT plugin. Idempotent; a second run
# only checks stamps.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

# systemd: systemd-analyze for the check of deploy/systemd (tests/deploy).
# libnghttp2-dev: HTTP/2 of causeway-proxy's gRPC front.
# libjemalloc-dev: the daemons' malloc (CW_ALLOCATOR in CMakeLists.txt).
debs=(build-essential clang llvm libclang-rt-14-dev cmake ninja-build pkg-config
      libprotobuf-c-dev protobuf-c-compiler libuv1-dev libcmocka-dev iproute2 libssl-dev libjemalloc-dev
      libjansson-dev libnghttp2-dev systemd)
missing=()
for p in "${debs[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing Debian packages: ${missing[*]}"
  sudo_cmd=""; [ "$(id -u)" = 0 ] || sudo_cmd="sudo"
  if [ -n "$sudo_cmd" ] && ! command -v sudo >/dev/null; then
    echo "setup: not root and no sudo here: as root, run 'apt-get install ${missing[*]}'," \
         "then run this again" >&2
    exit 1
  fi
  $sudo_cmd apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo_cmd apt-get install -y -qq "${missing[@]}" >/dev/null
fi

# Find a Python >= 3.12: $CW_PYTHON, then PATH, then pyenv's versions.
py_ok() { "$1" -c 'import sys; sys.exit(0 if sys.version_info >= (3, 12) else 1)' 2>/dev/null; }
find_python() {
  local c
  if [ -n "${CW_PYTHON:-}" ]; then py_ok "$CW_PYTHON" && { echo "$CW_PYTHON"; return; }; fi
  for c in python3.12 python3.13 python3; do
    command -v "$c" >/dev/null 2>&1 && py_ok "$(command -v "$c")" && { command -v "$c"; return; }
  done
  for c in $(ls -d "${PYENV_ROOT:-$HOME/.pyenv}"/versions/3.1[2-9]*/bin/python3 2>/dev/null | sort -V); do
    py_ok "$c" && { echo "$c"; return; }
  done
  return 1
}

if [ ! -x .venv/bin/python ] || ! py_ok .venv/bin/python; then
  if ! py="$(find_python)"; then
    echo "setup: no Python >= 3.12 found (looked at \$CW_PYTHON, PATH, ~/.pyenv/versions)." >&2
    echo "setup: install one, e.g. 'pyenv install 3.12' or 'apt-get install python3.12-venv'," >&2
    echo "setup: or point CW_PYTHON at it, then run this again." >&2
    exit 1
  fi
  echo "setup: creating .venv with $py"
  rm -rf .venv
  "$py" -m venv .venv
fi

stamp=.venv/.cw-requirements.sha256
want="$(cat requirements.txt python/causeway_jax/pyproject.toml | sha256sum | cut -d' ' -f1)"
if [ "$(cat "$stamp" 2>/dev/null)" != "$want" ]; then
  echo "setup: installing pinned Python packages"
  .venv/bin/python -m pip install -q --upgrade pip
  .venv/bin/python -m pip install -q -r requirements.txt
  # The JAX plugin package (entry point jax_plugins: causeway), editable so it
  # loads the repository's build of libcauseway_pjrt.so.
  .venv/bin/python -m pip install -q -e python/causeway_jax
  echo "$want" > "$stamp"
fi

plugin="$(.venv/bin/python -c 'import lammps_jax_pjrt_cpu as m; print(m.PLUGIN_PATH)')"
[ -f "$plugin" ] || { echo "setup: CPU PJRT plugin not found at $plugin" >&2; exit 1; }
echo "setup: ok (python $(.venv/bin/python -c 'import sys;print(sys.version.split()[0])'), plugin $plugin)"
