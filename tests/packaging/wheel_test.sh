#!/usr/bin/env bash
# The wheel as a user gets it (CTest: wheel_e2e, label packaging): build it
# with scripts/wheel.sh, check its tag and that its binaries need nothing but
# glibc, install it with the cpu extra into a fresh venv in a temporary
# directory that has never seen the repository (from the base interpreter of
# the set-up's venv; pip's cache may serve the downloads), then, from a
# directory outside the repository with an environment that names nothing in
# it, run the quickstart on the embedded cluster and a two-client cluster
# from the installed commands alone: causeway up, two JAX clients, causeway
# down. Needs the network or pip's cache for jax, jaxlib and the CPU plugin.
set -euo pipefail
root="${CW_SOURCE_DIR:-$(cd "$(dirname "$0")/../.." && pwd)}"
py="${CW_PYTHON:-$root/.venv/bin/python}"
work="$(mktemp -d "${TMPDIR:-/tmp}/cw-wheel-XXXXXX")"
state="$work/state"
cleanup() {
  if [ -f "$state/cluster" ]; then "$work/venv/bin/causeway" down --dir "$state" --grace 2 || true; fi
  rm -rf "$work"
}
trap cleanup EXIT
step() { printf '\n== %s (%ds)\n' "$*" "$SECONDS"; }
fail() { echo "wheel_test: FAILED: $*" >&2; exit 1; }

step "build the wheel"
wheel="$(bash "$root/scripts/wheel.sh" "$work/dist" | tail -1)"
name="$(basename "$wheel")"
version="$(sed -n 's/^project(causeway VERSION \([0-9.]*\).*/\1/p' "$root/CMakeLists.txt")"
echo "$name: $(du -k "$wheel" | cut -f1) KiB"
[[ "$name" =~ ^causeway-${version}-py3-none-manylinux_2_[0-9]+_x86_64\.whl$ ]] ||
  fail "unexpected wheel name $name"

step "its binaries need only glibc"
unpacked="$work/unpacked"
"$py" -m zipfile -e "$wheel" "$unpacked"
for f in causeway/bin/causeway causeway/bin/causeway-controller causeway/bin/causeway-worker \
         causeway/lib/libcauseway_pjrt.so causeway/lib/libcauseway_client.so; do
  [ -f "$unpacked/$f" ] || fail "$f missing from the wheel"
  needed="$(readelf -d "$unpacked/$f" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')"
  echo "$f: $needed"
  for lib in $needed; do
    case "$lib" in
      libc.so.6|libm.so.6|libdl.so.2|libpthread.so.0|librt.so.1|ld-linux-x86-64.so.2) ;;
      *) fail "$f needs $lib" ;;
    esac
  done
done
# The plugin exports only the PJRT entry points; the static libraries' own
# symbols stay inside (no clash with a host process's libuv or libcrypto).
exported="$(nm -D --defined-only "$unpacked/causeway/lib/libcauseway_pjrt.so" | awk '{print $3}' | sort | tr '\n' ' ')"
[ "$exported" = "CausewayBufferCallbackRunner CausewayHostCallbackRunner CausewayTraceFlush GetPjrtApi " ] || fail "the plugin exports $exported"
if nm -D --defined-only "$unpacked/causeway/lib/libcauseway_client.so" | grep -qE ' (uv_|protobuf_c_|json_)'; then
  fail "libcauseway_client.so exports symbols of its static dependencies"
fi

# What the pinned jax needs: a Python that cannot have it must refuse the wheel.
grep -qx 'Requires-Python: >=3.12' "$unpacked"/causeway-*.dist-info/METADATA ||
  fail "Requires-Python is not >=3.12 (jax 0.11.2's floor)"

step "a fresh venv, the wheel with the cpu extra"
base="$("$py" -c 'import sys; print(sys._base_executable)')"
"$base" -m venv "$work/venv"
"$work/venv/bin/python" -m pip install -q --disable-pip-version-check "$wheel[cpu]"

step "the quickstart, from outside the repository"
run="$work/run"
mkdir -p "$run"
cp "$root/examples/quickstart.py" "$root/tests/cluster/up_client.py" "$run/"
cd "$run"
# Only what a user's shell would have: nothing of the repository's or CTest's.
clean=(env -i "PATH=$work/venv/bin:/usr/bin:/bin" "HOME=$work/home" "TMPDIR=$work"
       "XDG_CACHE_HOME=$work/cache" "XDG_RUNTIME_DIR=$work")
mkdir -p "$work/home"
where="$("${clean[@]}" python -c 'import causeway, causeway_jax, causeway_client
from importlib.metadata import entry_points
ep = [e.value for e in entry_points(group="jax_plugins") if e.name == "causeway"]
assert ep == ["causeway_jax"], ep
print(causeway_jax.library_path()); print(causeway_client._find_library()); print(causeway.bin_dir())')"
echo "$where"
case "$where" in *"$root"*) fail "the installed packages point into the repository";; esac
"${clean[@]}" JAX_PLATFORMS=causeway python quickstart.py > quickstart.out 2>&1 ||
  { cat quickstart.out; fail "quickstart.py"; }
grep -q "^8 devices in 1 process" quickstart.out || { cat quickstart.out; fail "quickstart devices"; }
grep -q "^sharded: NamedSharding(mesh=Mesh('d': 8" quickstart.out ||
  { cat quickstart.out; fail "quickstart: one island of 8 devices by default"; }
tail -3 quickstart.out
"${clean[@]}" JAX_PLATFORMS=causeway CAUSEWAY_LOCAL_WORKERS=2 python quickstart.py \
  > quickstart2.out 2>&1 || { cat quickstart2.out; fail "quickstart.py, two islands"; }
grep -q "^moved to island 1 -> " quickstart2.out || { cat quickstart2.out; fail "quickstart copy"; }

step "causeway up, two clients, causeway down (the installed commands)"
"${clean[@]}" causeway-worker --help | head -1
"${clean[@]}" causeway-controller --help | head -1
exports="$("${clean[@]}" causeway up --dir "$state" --workers 2 --devices 2)"
echo "$exports"
eval "$exports"
case "$CAUSEWAY_CONTROLLER" in "$state"/*) ;; *) fail "CAUSEWAY_CONTROLLER=$CAUSEWAY_CONTROLLER";; esac
cl=("${clean[@]}" "CAUSEWAY_CONTROLLER=$CAUSEWAY_CONTROLLER" "CAUSEWAY_TOKEN_FILE=$CAUSEWAY_TOKEN_FILE")
"${cl[@]}" python up_client.py 0 > client0.out 2>&1 &
c0=$!
"${cl[@]}" python up_client.py 1 > client1.out 2>&1 &
c1=$!
wait "$c0" || { cat client0.out; fail "client 0"; }
wait "$c1" || { cat client1.out; fail "client 1"; }
for i in 0 1; do
  r="$(tail -1 client$i.out)"
  echo "client $i: $r"
  case "$r" in *'"devices": 4, "workers": ["worker-0", "worker-1"], "process_count": 1'*) ;;
    *) fail "client $i: $r";; esac
done
"${cl[@]}" causeway status | head -3
"${clean[@]}" causeway down --dir "$state"
[ ! -e "$state" ] || fail "causeway down left $state"
printf '\nwheel_test: passed (%ds): %s\n' "$SECONDS" "$name"
