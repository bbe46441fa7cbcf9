#!/usr/bin/env python3
"""Launches per second on one island shared by 1, 4 and 16 concurrent client
sessions, beside stock in-process JAX calls/s of the same program, in one
table.

Usage (from the repository root, with the project's venv and build/release):

    .venv/bin/python bench/sessions_bench.py           # 1, 4, 16 sessions
    .venv/bin/python bench/sessions_bench.py --quick   # 1 and 4 sessions, fewer calls
    .venv/bin/python bench/sessions_bench.py --plugin null  # both sides on the null plugin

A controller and one worker (4 CPU devices: one island) are started by hand
(tests/jax/harness.py HandCluster, Unix sockets). Each session is its own JAX
process with CAUSEWAY_DEVICES=1 CAUSEWAY_SHARE=1, so all of them share the
island's device 0. Two paths, each on its own cluster: `direct`, as
deployed (sharers of one weight on a one-worker island launch straight to the
worker, whose loop orders them), and `relayed` (the controller runs with
--relay-launches: every launch goes through the island's scheduler, one
stamped order, as sharers of different weights do). The program:
f = jax.jit(lambda x: x + 1) on a float32[8].
Each session warms up, waits for a common start time, runs x = f(x) N times
asynchronously, then blocks on x. Launches/s = all sessions' launches over
the time from the common start to the last session's end. Stock: the same
chain in one stock CPU JAX process (JAX_PLATFORMS=cpu), calls/s, measured in
the same run before and after the sessions (the ratio is over their mean).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "jax"))

CLIENT = r"""
import json, os, sys, time
if os.environ.get("JAX_PLATFORMS") == "cpu":
    from jax._src import xla_bridge
    xla_bridge.discover_pjrt_plugins = lambda: None
import numpy as np
import jax
import jax.numpy as jnp
n = int(sys.argv[1])
f = jax.jit(lambda v: v + 1)
d = jax.devices()[0]
x = jax.device_put(np.zeros(8, np.float32), d)
for _ in range(50):
    x = f(x)
x.block_until_ready()
print("ready", flush=True)
start = float(sys.stdin.readline())
while time.time() < start:
    time.sleep(0.001)
t0 = time.time()
for _ in range(n):
    x = f(x)
x.block_until_ready()
t1 = time.time()
ok = bool(np.asarray(x)[0] == (0 if sys.argv[2] == "null" else 50 + n))
print(json.dumps({"start": t0, "end": t1, "n": n, "ok": ok}), flush=True)
"""


def run_clients(env: dict, k: int, n: int, plugin: str) -> dict:
    procs = []
    for _ in range(k):
        procs.append(subprocess.Popen([sys.executable, "-c", CLIENT, str(n), plugin], env=env,
                                      stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                      stderr=subprocess.DEVNULL, text=True))
    for p in procs:
        line = p.stdout.readline()
        if line.strip() != "ready":
            raise RuntimeError(f"a session did not start (rc {p.poll()}): {line!r}")
    start = time.time() + 0.5
    for p in procs:
        p.stdin.write(f"{start}\n")
        p.stdin.flush()
    res = [json.loads(p.stdout.readline()) for p in procs]
    for p in procs:
        p.wait(timeout=60)
    if not all(r["ok"] for r in res):
        raise RuntimeError(f"wrong results: {res}")
    end = max(r["end"] for r in res)
    total = sum(r["n"] for r in res)
    return {"sessions": k, "launches": total, "seconds": end - start,
            "per_s": total / (end - start)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json", help="also write the results here")
    ap.add_argument("--launches", type=int, default=0,
                    help="launches per row in all (default 20000; --quick 1000)")
    ap.add_argument("--sessions", default="",
                    help="comma-separated session counts (default 1,4,16; --quick 1,4)")
    ap.add_argument("--paths", default="direct,relayed",
                    help="comma-separated: direct, relayed (default both)")
    ap.add_argument("--plugin", choices=("xla", "null"), default="xla",
                    help="the device plugin under both sides (null: docs/nullplugin.md; "
                         "stock is JAX in-process on it, the worker loads it)")
    args = ap.parse_args()
    import harness
    null = args.plugin == "null"
    if null and not os.path.exists(harness.null_plugin()):
        raise SystemExit(f"sessions_bench: {harness.null_plugin()} not found: build the release "
                         "tree first")
    counts = (1, 4) if args.quick else (1, 4, 16)
    if args.sessions:
        counts = tuple(int(c) for c in args.sessions.split(","))
    total = args.launches or (1000 if args.quick else 20000)

    # Stock before and after the sessions: this machine's speed drifts within
    # a run (up to 2x between two stock runs a minute apart); the ratio is
    # over their mean.
    stock_env = harness.null_stock_env() if null else harness.stock_env()
    stock_runs = [run_clients(stock_env, 1, total, args.plugin)]

    rows, relayed = [], {}
    for path in args.paths.split(","):
        if path not in ("direct", "relayed"):
            ap.error(f"--paths: unknown path {path!r} (direct, relayed)")
        cluster = harness.HandCluster(
            workers=1, devices=4,
            controller_args=("--relay-launches",) if path == "relayed" else (),
            plugin=harness.null_plugin() if null else None)
        try:
            env = harness.causeway_env(controller=cluster.controller)
            env["CAUSEWAY_DEVICES"] = "1"
            env["CAUSEWAY_SHARE"] = "1"
            for k in counts:
                row = run_clients(env, k, max(100, total // k), args.plugin)
                row["path"] = path
                rows.append(row)
            relayed[path] = harness.stats(cluster.controller).get("launches", 0)
        finally:
            cluster.stop()
    stock_runs.append(run_clients(stock_env, 1, total, args.plugin))
    stock = {"per_s": sum(r["per_s"] for r in stock_runs) / len(stock_runs),
             "launches": total, "runs": [r["per_s"] for r in stock_runs]}
    kind = "null-plugin" if null else "CPU"
    print(f"\nOne island (1 worker, 4 {kind} devices), sessions sharing its device 0; "
          f"program: jit(x + 1) on f32[8], async chain per session")
    print(f"stock in-process JAX{' on the null plugin' if null else ''}: "
          f"{stock['per_s']:.0f} calls/s ({stock['launches']} calls; "
          f"{stock['runs'][0]:.0f} before the sessions, {stock['runs'][1]:.0f} after)\n")
    print(f"{'path':>7} | {'sessions':>8} | {'launches':>8} | {'seconds':>7} | "
          f"{'launches/s':>10} | {'per session/s':>13} | {'vs stock':>8}")
    print("-" * 80)
    for r in rows:
        print(f"{r['path']:>7} | {r['sessions']:>8} | {r['launches']:>8} | {r['seconds']:>7.2f} | "
              f"{r['per_s']:>10.0f} | {r['per_s'] / r['sessions']:>13.0f} | "
              f"{r['per_s'] / stock['per_s']:>7.2f}x")
    print("\nlaunches the controller relayed and stamped: " +
          ", ".join(f"{p} {n}" for p, n in relayed.items()))
    if args.json:
        pathlib.Path(args.json).write_text(json.dumps({"plugin": args.plugin, "stock": stock,
                                                      "sessions": rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
