#!/usr/bin/env python3
"""The round-trip cost of one host callback: causeway against stock in-process
JAX on CPU, each beside its own baseline in the same run.

Usage (from the repository root, with the project's venv):

    .venv/bin/python bench/callback_bench.py            # full run (about a minute)
    .venv/bin/python bench/callback_bench.py --quick    # smoke run
    .venv/bin/python bench/callback_bench.py --json out.json

Each side runs in its own subprocess, one after the other (environments as in
tests/jax/harness.py; the causeway side has JAX_PLATFORMS=causeway,cpu because
JAX runs a callable with a CPU device at hand). Per side, on one device:

  plain:    f = jax.jit(lambda x: x + 1) on float32[8], blocked per call;
  callback: the same with a jax.pure_callback of an identity function in it;
  print:    the same with jax.debug.print of one scalar, output to /dev/null.

callback - plain is what one callback costs a call. On causeway it is a
HOST_CALLBACK round trip (worker -> client -> Python -> client -> worker) plus
the Execute that waits for its launch; stock JAX calls Python in its process.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def measure(side: str, cfg: dict) -> dict:
    if side == "stock":
        from jax._src import xla_bridge
        xla_bridge.discover_pjrt_plugins = lambda: None
    import numpy as np
    import jax
    import jax.numpy as jnp

    dev = jax.devices()[0]
    if side == "causeway":
        from jax._src import xla_bridge
        assert xla_bridge.get_backend().platform_version == dev.client.platform_version
        assert "causeway" in xla_bridge.backends() and dev.client is \
            xla_bridge.backends()["causeway"], dev

    def identity(v):
        return v

    plain = jax.jit(lambda x: x + 1)
    cb = jax.jit(lambda x: jax.pure_callback(identity, jax.ShapeDtypeStruct(x.shape, x.dtype),
                                             x) + 1)

    def printing(x):
        jax.debug.print("{s}", s=x[0])
        return x + 1
    pr = jax.jit(printing)
    out = {"info": {"side": side, "device": str(dev), "jax": jax.__version__}}
    devnull = os.open(os.devnull, os.O_WRONLY)
    saved = os.dup(1)
    for name, f in (("plain", plain), ("callback", cb), ("print", pr)):
        x = jax.device_put(np.zeros(8, np.float32), dev)
        if name == "print":
            sys.stdout.flush()
            os.dup2(devnull, 1)
        try:
            for _ in range(cfg["warmup"]):
                x = f(x).block_until_ready()
            times = []
            for _ in range(cfg["calls"]):
                t = time.perf_counter_ns()
                x = f(x).block_until_ready()
                times.append((time.perf_counter_ns() - t) / 1e3)
            jax.effects_barrier()
        finally:
            if name == "print":
                sys.stdout.flush()
                os.dup2(saved, 1)
        want = cfg["warmup"] + cfg["calls"]
        assert float(np.asarray(x)[0]) == want, (name, float(np.asarray(x)[0]), want)
        times.sort()
        out[name] = {"calls": len(times), "median_us": statistics.median(times),
                     "p90_us": times[int(0.9 * (len(times) - 1))]}
    return out


def side_envs() -> dict:
    sys.path.insert(0, str(ROOT / "tests" / "jax"))
    import harness  # noqa: E402 - the suite's environments, shared on purpose
    missing = harness.missing_build()
    if missing:
        raise SystemExit(f"callback_bench: {missing}")
    cw = harness.causeway_env()
    cw["JAX_PLATFORMS"] = "causeway,cpu"
    return {"causeway": cw, "stock": harness.stock_env()}


def run_side(side: str, env: dict, cfg: dict) -> dict:
    with tempfile.NamedTemporaryFile(prefix=f"cb-bench-{side}-", suffix=".json",
                                     delete=False) as tf:
        path = tf.name
    try:
        cmd = [sys.executable, str(pathlib.Path(__file__).resolve()), "--side", side, "--out",
               path, "--config", json.dumps(cfg)]
        p = subprocess.run(cmd, env=env, cwd=str(ROOT), stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=600)
        if p.returncode != 0:
            raise SystemExit(f"callback_bench: the {side} side failed (exit {p.returncode}):\n"
                             f"{p.stdout[-3000:]}\n{p.stderr[-6000:]}")
        with open(path) as f:
            return json.load(f)
    finally:
        os.unlink(path)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--json")
    ap.add_argument("--side", choices=("causeway", "stock"), help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--config", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.side:
        res = measure(args.side, json.loads(args.config))
        with open(args.out, "w") as f:
            json.dump(res, f)
        return 0
    cfg = {"warmup": 20, "calls": 200} if args.quick else {"warmup": 100, "calls": 2000}
    res = {side: run_side(side, env, cfg) for side, env in side_envs().items()}
    cw, st = res["causeway"], res["stock"]
    with open("/proc/loadavg") as f:
        load = f.read().split()[0]
    print("causeway host callback benchmark" + (" (--quick)" if args.quick else ""))
    print(f"  {os.cpu_count()} CPU core(s), jax {cw['info']['jax']}; load average at the end "
          f"{load}; medians of {cfg['calls']} blocked calls on one device (float32[8])")
    print(f"  {'call':<44} {'causeway':>10} {'stock':>10}  unit")
    print("  " + "-" * 72)
    for key, label in (("plain", "jit(x + 1) (baseline)"),
                       ("callback", "same + pure_callback(identity)"),
                       ("print", "same + debug.print of a scalar")):
        print(f"  {label:<44} {cw[key]['median_us']:>10.1f} {st[key]['median_us']:>10.1f}  us")
    for key, label in (("callback", "one pure_callback round trip (- baseline)"),
                       ("print", "one debug.print (- baseline)")):
        print(f"  {label:<44} {cw[key]['median_us'] - cw['plain']['median_us']:>10.1f} "
              f"{st[key]['median_us'] - st['plain']['median_us']:>10.1f}  us")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
