#!/usr/bin/env bash
# JAX's own test files as the conformance suite: runs each file on causeway
# (JAX_PLATFORMS=causeway, the embedded cluster) and on stock CPU JAX with the
# same device count, then prints per file passed/failed/skipped on each side
# and every test that passes on stock but not on causeway (docs/conformance.md).
#
# JAX's tests are not part of the project and never committed: they are
# copied from a JAX source tree into build/conformance/ (git ignores build/).
#
#   tools/conformance.sh --jax-src DIR [--files api,lax,...] [--cases N]
#                        [--devices N] [--timeout S] [--side both|stock|causeway|proxy]
#
# --side proxy runs the files on the IFRT proxy front instead: one
# causeway-proxy for the run, each test process a session of it with a
# private embedded cluster (JAX_PLATFORMS=proxy, JAX_BACKEND_TARGET; the
# report then compares proxy with stock).
#
# DIR is a checkout of github.com/jax-ml/jax (ideally at tag jax-v0.11.2, the
# pinned release; a bare git directory works too: HEAD's tests/ is taken).
# Not in CI: a full run takes an hour or more on 2 cores.
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"

jax_src=""
files="api,lax,lax_numpy,pjit,shard_map,random,linalg,array,memories,checkify,export,lax_control_flow,python_callback,debugging_primitives"
cases=3
devices=8
timeout_s=3600
side=both
while (($#)); do
  case "$1" in
    --jax-src) jax_src="$2"; shift 2 ;;
    --files) files="$2"; shift 2 ;;
    --cases) cases="$2"; shift 2 ;;
    --devices) devices="$2"; shift 2 ;;
    --timeout) timeout_s="$2"; shift 2 ;;
    --side) side="$2"; shift 2 ;;
    -h|--help) sed -n '2,15p' "$0"; exit 0 ;;
    *) echo "conformance: unknown argument '$1' (see --help)" >&2; exit 2 ;;
  esac
done
[[ -n "$jax_src" ]] || { echo "conformance: --jax-src DIR is required (a jax-ml/jax checkout)" >&2; exit 2; }

py=.venv/bin/python
[[ -x "$py" ]] || { echo "conformance: run scripts/setup.sh first (no .venv)" >&2; exit 2; }
[[ -f build/release/lib/libcauseway_pjrt.so ]] || {
  echo "conformance: build the release tree first (cmake --build build/release)" >&2; exit 2; }

out=build/conformance
mkdir -p "$out"
# The tests' own requirements (JAX's build/test-requirements.txt, the part these files use).
"$py" -m pip install -q -r tools/conformance-requirements.txt

# Copy tests/ from a work tree, or HEAD's from a git directory.
rm -rf "$out/jax"
mkdir -p "$out/jax"
if [[ -d "$jax_src/tests" ]]; then
  cp -r "$jax_src/tests" "$out/jax/tests"
  commit="$(git -C "$jax_src" rev-parse HEAD 2>/dev/null || echo unknown)"
else
  git --git-dir="$jax_src" archive HEAD tests | tar -x -C "$out/jax"
  commit="$(git --git-dir="$jax_src" rev-parse HEAD)"
fi
echo "conformance: JAX tests from $jax_src at $commit; jax $("$py" -c 'import jax; print(jax.__version__)')"
echo "$commit" > "$out/jax-commit"

proxy_pid=""
if [[ "$side" == proxy ]]; then
  # Sessions of one proxy, each with its own embedded cluster of $devices.
  rm -f "$out/proxy.addr"  # an earlier run's address must not be read
  (CAUSEWAY_LOCAL_WORKERS=1 CAUSEWAY_LOCAL_DEVICES="$devices" \
   CAUSEWAY_PJRT_PLUGIN="$("$py" -c 'import lammps_jax_pjrt_cpu as m; print(m.PLUGIN_PATH)')" \
   CAUSEWAY_BIN_DIR="$root/build/release/bin" CAUSEWAY_COMPILE_CACHE_DIR="$root/$out/compile-cache" \
   exec build/release/bin/causeway-proxy --listen 127.0.0.1:0 > "$out/proxy.addr" 2> "$out/proxy.log") &
  proxy_pid=$!
  trap 'kill "$proxy_pid" 2>/dev/null || true' EXIT
  for _ in $(seq 100); do grep -q listening "$out/proxy.addr" 2>/dev/null && break; sleep 0.1; done
  proxy_addr="$(sed -n 's/causeway-proxy listening on //p' "$out/proxy.addr")"
  [[ -n "$proxy_addr" ]] || { echo "conformance: causeway-proxy did not start" >&2; exit 1; }
fi

run_side() {
  local name="$1" f="$2"
  local xml="$out/$name-$f.xml"
  local -a env_side
  if [[ "$name" == stock ]]; then
    env_side=(JAX_PLATFORMS=cpu "XLA_FLAGS=--xla_force_host_platform_device_count=$devices")
  elif [[ "$name" == proxy ]]; then
    # causeway_jax registers the `proxy` backend from JAX_BACKEND_TARGET.
    env_side=(JAX_PLATFORMS=proxy "JAX_BACKEND_TARGET=grpc://$proxy_addr"
              IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS=true "PYTHONPATH=$root/python")
  else
    # The embedded cluster: one island of all devices, as a single machine has
    # (its default; said here so the count cannot drift from stock's).
    env_side=(JAX_PLATFORMS=causeway CAUSEWAY_LOCAL_WORKERS=1 "CAUSEWAY_LOCAL_DEVICES=$devices"
              "PYTHONPATH=$root/python"
              "CAUSEWAY_PJRT_LIBRARY=$root/build/release/lib/libcauseway_pjrt.so"
              "CAUSEWAY_BIN_DIR=$root/build/release/bin"
              "CAUSEWAY_COMPILE_CACHE_DIR=$root/$out/compile-cache")
  fi
  (cd "$out/jax" && env "${env_side[@]}" JAX_NUM_GENERATED_CASES="$cases" \
      timeout "$timeout_s" "$root/$py" -m pytest -q -p no:cacheprovider \
      --junitxml="$root/$xml" "tests/${f}_test.py" > "$root/$out/$name-$f.log" 2>&1) || true
  echo "conformance: $name $f done ($(tail -1 "$out/$name-$f.log"))"
}

IFS=, read -r -a list <<< "$files"
for f in "${list[@]}"; do
  [[ -f "$out/jax/tests/${f}_test.py" ]] || { echo "conformance: no tests/${f}_test.py" >&2; continue; }
  if [[ "$side" == both || "$side" == stock ]]; then run_side stock "$f"; fi
  if [[ "$side" == both || "$side" == causeway ]]; then run_side causeway "$f"; fi
  if [[ "$side" == proxy ]]; then run_side proxy "$f"; fi
done
CW_CONFORMANCE_TARGET="$([[ "$side" == proxy ]] && echo proxy || echo causeway)" \
  "$py" tools/conformance_report.py "$out" "${list[@]}"
