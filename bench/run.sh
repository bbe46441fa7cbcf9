#!/usr/bin/env bash
# Full benchmark on the release build: builds build/release if needed, then
# runs cw_bench (two local workers on 127.0.0.1) with the XLA CPU plugin of the
# pinned venv. Extra arguments go to cw_bench (e.g. --quick, --max-mib 16).
set -euo pipefail
root="$(cd "$(dirname "$0")/.." && pwd)"
cd "$root"
if [[ ! -f build/release/build.ninja ]]; then
  cmake -S . -B build/release -G Ninja -DCMAKE_C_COMPILER=clang -DCMAKE_BUILD_TYPE=Release >&2
fi
cmake --build build/release --target cw_bench island_bench fleet_bench causeway-worker \
  causeway-controller causeway cw_gangplugin cw_nullplugin >&2
plugin="$(.venv/bin/python -c 'import lammps_jax_pjrt_cpu as m; print(m.PLUGIN_PATH)')"
build/release/bin/cw_bench --plugin "$plugin" "$@"
# The same paths over the null plugin (no compiler, no compute): causeway's own
# cost with XLA taken out, plaintext only.
build/release/bin/cw_bench --plugin build/release/lib/libcw_nullplugin.so --null --no-tls "$@"
jax_args=(); for a in "$@"; do [[ "$a" == --quick ]] && jax_args=(--quick); done
# An island of two worker processes (the gang test plugin) beside one worker of
# the same plugin with 2 devices (the baseline) and with 4 (the island's device
# count): pipelined launches/s through the controller, 1 and 4 sessions.
build/release/bin/island_bench --plugin "$plugin" "${jax_args[@]}"
# The same over the null plugin: the island's own cost, XLA's threads taken out.
build/release/bin/island_bench --plugin build/release/lib/libcw_nullplugin.so "${jax_args[@]}"
# Both again with each worker pinned to a core of its own, as on hosts of their
# own: unpinned, the island's two workers share the cores its baseline has alone.
build/release/bin/island_bench --plugin "$plugin" --core-per-worker "${jax_args[@]}"
build/release/bin/island_bench --plugin build/release/lib/libcw_nullplugin.so --core-per-worker \
  "${jax_args[@]}"
# One controller in front of 10, 100 and 1,000 worker processes of 8 null
# devices each: registration, status, heartbeat CPU, memory per worker,
# launches/s from 100 sessions, death notice (--quick: 10 and 30 workers).
build/release/bin/fleet_bench "${jax_args[@]}"
# 10, 100 and 1,000 sessions on one worker's island, through its scheduler:
# launches/s and the controller's CPU per launch should not grow with them.
if [[ " ${jax_args[*]} " == *" --quick "* ]]; then
  build/release/bin/fleet_bench --shared-curve 10,50 --total 2000
else
  build/release/bin/fleet_bench --shared-curve 10,100,1000 --total 200000
fi
# JAX on causeway (embedded cluster) against stock in-process JAX on CPU: sync
# call latency, async dispatch throughput, training step time (full run; with
# --quick among the arguments, its quick mode).
cmake --build build/release --target causeway_pjrt causeway-controller causeway-worker >&2
.venv/bin/python bench/jax_bench.py "${jax_args[@]}"
# The same on the null plugin, both sides: JAX in-process on it against JAX on
# causeway with null workers (XLA compiles only for the shapes): JAX's and
# causeway's dispatch with a device that costs nothing.
cmake --build build/release --target cw_nullplugin >&2
.venv/bin/python bench/jax_bench.py --plugin null "${jax_args[@]}"
# The sync call and the async chain at the PJRT C API, without JAX: a device
# plugin in-process against the same plugin behind causeway, on XLA's plugin
# and on the null plugin, with raw loopback TCP (sleeping and polling) in the
# same run.
cmake --build build/release --target dispatch_bench >&2
dispatch=(--pjrt-lib build/release/lib/libcauseway_pjrt.so --bin-dir build/release/bin
  "${jax_args[@]}")
build/release/bin/dispatch_bench "${dispatch[@]}" --device-plugin "$plugin"
build/release/bin/dispatch_bench "${dispatch[@]}" --null \
  --device-plugin build/release/lib/libcw_nullplugin.so
# Failover: time from a worker's death (SIGKILL, SIGSTOP) to the error in
# every affected JAX client, with a plain TCP peer's SIGKILL as the baseline.
.venv/bin/python bench/failover_bench.py "${jax_args[@]}"
# One island shared by 1, 4 and 16 client sessions: launches/s straight to
# its worker (sessions of one weight) and through the island's scheduler,
# beside stock in-process JAX calls/s (--quick: 1 and 4).
.venv/bin/python bench/sessions_bench.py "${jax_args[@]}"
# Start-up of the embedded cluster with an empty and a full compile cache
# (20,000 entries: real ones and junk, generated once in build/release), idle
# and under 2 CPU burners: 30 starts each (--quick: 5). Every start must
# succeed. With CW_OLD_BUILD=DIR (an older build tree: DIR/lib/
# libcauseway_pjrt.so, DIR/bin) the same for that build in the same run; its
# failed starts are reported, not fatal.
cmake --build build/release --target startup_bench causeway_pjrt causeway-controller \
  causeway-worker >&2
starts=30; [[ ${#jax_args[@]} -gt 0 ]] && starts=5
startup=(--cache build/release/startup-cache --plugin "$plugin" --starts "$starts")
build/release/bin/startup_bench --pjrt-lib build/release/lib/libcauseway_pjrt.so \
  --bin-dir build/release/bin --label current "${startup[@]}"
if [[ -n "${CW_OLD_BUILD:-}" ]]; then
  build/release/bin/startup_bench --pjrt-lib "$CW_OLD_BUILD/lib/libcauseway_pjrt.so" \
    --bin-dir "$CW_OLD_BUILD/bin" --label old "${startup[@]}" 2>/dev/null ||
    echo "startup old: some starts failed (above: how many started)"
fi
# Host callbacks: one pure_callback and one debug.print per blocked call on
# causeway (worker -> client -> Python and back) and on stock JAX, each beside
# the same call without a callback.
cmake --build build/release --target causeway_pjrt causeway-controller causeway-worker >&2
.venv/bin/python bench/callback_bench.py "${jax_args[@]}"
# The IFRT proxy front (causeway-proxy, jaxlib's `proxy` backend) beside the
# plugin front and stock in-process JAX: sync call, async chain, a training
# step and 64 MiB up and down, one device (docs/proxy.md).
cmake --build build/release --target causeway-proxy >&2
.venv/bin/python bench/proxy_bench.py "${jax_args[@]}"

# Chaos (docs/chaos.md): JAX clients train while workers and the controller are
# SIGKILLed and SIGSTOPped; long form, 40 events on 4 clients with a fresh seed
# (printed first; replay with CW_CHAOS_SEED). --quick: the short form ctest runs.
# The 1-hour soak with its RSS curve is not part of this script:
# bench/chaos_bench.py --soak 3600.
if [[ ${#jax_args[@]} -gt 0 ]]; then
  .venv/bin/python tests/chaos/chaos.py --short
else
  .venv/bin/python bench/chaos_bench.py
fi
