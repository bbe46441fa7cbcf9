#!/usr/bin/env python3
"""The IFRT proxy front beside the plugin front and stock in-process JAX, in
one run (issue 14, item 5): dispatch and bulk through each.

Usage (from the repository root, with the project's venv):

    .venv/bin/python bench/proxy_bench.py            # a few minutes
    .venv/bin/python bench/proxy_bench.py --quick    # smoke run

One cluster started by hand (a controller and one worker of 4 CPU devices on
loopback TCP, tests/jax/harness.py) and causeway-proxy in front of it. Three
sides, each a subprocess, one after the other:

- stock: JAX_PLATFORMS=cpu, in-process;
- plugin: JAX_PLATFORMS=causeway joining the cluster (CAUSEWAY_CONTROLLER);
- proxy: JAX_PLATFORMS=proxy, jaxlib's IFRT proxy client to causeway-proxy;
- proxy, disk: the same, uploads of 1 MiB and up left in the proxy's transfer
  directory (HostBufferReadFromDisk, under /dev/shm when there is one) rather
  than streamed over gRPC: bulk only.

Measured on one device: a synchronous tiny call (jit(x + 1) on float32[8],
blocked per call; median), an asynchronous chain (x = f(x) N times, one
block; calls/s), one training step of an MLP (784-512-512-10, batch 128,
blocked on its loss; median), and 64 MiB up (device_put, blocked) and down
(np.asarray) in GB/s (median of R); then 16 MiB up replicated on four devices
(one host buffer to each; GB/s of the host buffer).
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import shutil
import statistics
import subprocess
import sys
import tempfile
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def measure(side: str, cfg: dict) -> dict:
    if side.startswith("proxy"):
        os.environ["IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS"] = "true"
    if side == "proxy-disk":
        os.environ["IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY"] = cfg["transfer_dir"]
        os.environ["IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_THRESHOLD_BYTES"] = str(1 << 20)
    import jax
    if side.startswith("proxy"):
        from jax.extend.backend import ifrt_proxy, register_backend_factory

        def client():
            o = ifrt_proxy.ClientConnectionOptions()
            o.connection_timeout_in_seconds = 60
            return ifrt_proxy.get_client("grpc://" + cfg["proxy"], o)
        register_backend_factory("proxy", client, priority=-1)
        jax.config.update("jax_platforms", "proxy")
    import jax.numpy as jnp
    import numpy as np

    dev = jax.devices()[0]
    out = {"platform": jax.default_backend(), "runtime": dev.client.runtime_type}
    if side == "proxy-disk":
        return bulk(cfg, dev, out)
    f = jax.jit(lambda x: x + 1)
    x = jax.device_put(np.zeros(8, np.float32), dev)
    for _ in range(cfg["warmup"]):
        x = f(x).block_until_ready()
    ts = []
    for _ in range(cfg["sync"]):
        t = time.perf_counter_ns()
        x = f(x).block_until_ready()
        ts.append(time.perf_counter_ns() - t)
    out["sync_us"] = statistics.median(ts) / 1e3
    rates = []
    for _ in range(cfg["repeats"]):
        t = time.perf_counter()
        for _ in range(cfg["chain"]):
            x = f(x)
        x.block_until_ready()
        rates.append(cfg["chain"] / (time.perf_counter() - t))
    out["async_per_s"] = statistics.median(rates)

    rng = np.random.RandomState(0)
    sizes = [784, 512, 512, 10]
    params = [jax.device_put(rng.randn(a, b).astype(np.float32) * 0.05, dev)
              for a, b in zip(sizes, sizes[1:])]
    xs = jax.device_put(rng.randn(128, 784).astype(np.float32), dev)
    ys = jax.device_put(rng.randn(128, 10).astype(np.float32), dev)

    def loss(p, a, b):
        for w in p[:-1]:
            a = jnp.tanh(a @ w)
        return jnp.mean((a @ p[-1] - b) ** 2)

    step = jax.jit(lambda p, a, b: (lambda l, g: ([w - 0.01 * gw for w, gw in zip(p, g)], l))(
        *jax.value_and_grad(loss)(p, a, b)))
    for _ in range(3):
        params, l = step(params, xs, ys)
        l.block_until_ready()
    ts = []
    for _ in range(cfg["steps"]):
        t = time.perf_counter()
        params, l = step(params, xs, ys)
        l.block_until_ready()
        ts.append(time.perf_counter() - t)
    out["train_ms"] = statistics.median(ts) * 1e3
    return bulk(cfg, dev, out)


def bulk(cfg: dict, dev, out: dict) -> dict:
    import jax
    import numpy as np
    rng = np.random.RandomState(0)
    big = rng.rand(cfg["mib"] << 18).astype(np.float32)  # mib MiB
    ups, downs = [], []
    for _ in range(cfg["bulk_repeats"]):
        t = time.perf_counter()
        y = jax.device_put(big, dev)
        y.block_until_ready()
        ups.append(big.nbytes / (time.perf_counter() - t) / 1e9)
        t = time.perf_counter()
        back = np.asarray(y)
        downs.append(big.nbytes / (time.perf_counter() - t) / 1e9)
        assert back[-1] == big[-1]
        y.delete()
    out["up_gbs"] = statistics.median(ups)
    out["down_gbs"] = statistics.median(downs)
    # The same bytes to four devices at once (one host buffer, replicated).
    from jax.sharding import Mesh, NamedSharding, PartitionSpec
    rep = NamedSharding(Mesh(np.array(jax.devices()[:4]), ("x",)), PartitionSpec())
    small = big[:cfg["rep_mib"] << 18]
    reps = []
    for _ in range(cfg["bulk_repeats"]):
        t = time.perf_counter()
        y = jax.device_put(small, rep)
        y.block_until_ready()
        reps.append(small.nbytes / (time.perf_counter() - t) / 1e9)
        assert np.asarray(y.addressable_shards[-1].data)[-1] == small[-1]
        y.delete()
    out["up_rep_gbs"] = statistics.median(reps)
    return out


def run_side(side: str, env: dict, cfg: dict) -> dict:
    p = subprocess.run([sys.executable, str(pathlib.Path(__file__).resolve()), "--side", side,
                        "--config", json.dumps(cfg)], env=env, cwd=str(ROOT),
                       stdin=subprocess.DEVNULL, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        raise SystemExit(f"proxy_bench: the {side} side failed:\n{p.stderr[-4000:]}")
    return json.loads(p.stdout.strip().splitlines()[-1])


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--quick", action="store_true")
    ap.add_argument("--side")
    ap.add_argument("--config")
    a = ap.parse_args()
    if a.side:
        print(json.dumps(measure(a.side, json.loads(a.config))))
        return 0
    cfg = ({"warmup": 20, "sync": 200, "chain": 500, "repeats": 2, "steps": 5, "mib": 16,
            "bulk_repeats": 2, "rep_mib": 4} if a.quick else
           {"warmup": 200, "sync": 2000, "chain": 5000, "repeats": 5, "steps": 30, "mib": 64,
            "bulk_repeats": 5, "rep_mib": 16})
    sys.path.insert(0, str(ROOT / "tests" / "jax"))
    import harness  # noqa: E402  the suite's environments and hand cluster
    missing = harness.missing_build()
    if missing:
        raise SystemExit(f"proxy_bench: {missing}")
    cluster = harness.HandCluster(workers=1, devices=4, tcp=True)
    transfer_dir = tempfile.mkdtemp(prefix="cw-proxy-bench-",
                                    dir="/dev/shm" if os.path.isdir("/dev/shm") else None)
    cfg["transfer_dir"] = transfer_dir
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUSEWAY_")}
    env.update({"CAUSEWAY_CONTROLLER": cluster.controller,
                "CAUSEWAY_PROXY_PJRT_LIBRARY": harness.pjrt_library(),
                "CAUSEWAY_PROXY_TRANSFER_DIR": transfer_dir})
    # In this process's session, as every run before: the proxy's thread
    # hops are slower across autogroups (docs/performance.md).
    proxy = harness.ProxyProcess(env, "127.0.0.1:0", os.devnull,
                                 new_session=bool(os.environ.get("CW_BENCH_PROXY_SESSION")))
    try:
        cfg["proxy"] = proxy.address
        res = {}
        clean = {k: v for k, v in os.environ.items() if not k.startswith(("CAUSEWAY_", "JAX_"))}
        res["stock"] = run_side("stock", harness.stock_env(), cfg)
        res["plugin"] = run_side("plugin", harness.causeway_env(controller=cluster.controller),
                                 cfg)
        res["proxy"] = run_side("proxy", clean, cfg)
        res["proxy-disk"] = run_side("proxy-disk", clean, cfg)
        left = os.listdir(transfer_dir)
        if left:
            raise SystemExit(f"proxy_bench: the proxy left {left} in {transfer_dir}")
    finally:
        proxy.stop()
        cluster.stop()
        shutil.rmtree(transfer_dir, ignore_errors=True)
    rows = [("sync tiny call", "sync_us", "us", "{:.1f}"),
            ("async chain", "async_per_s", "calls/s", "{:,.0f}"),
            ("MLP training step", "train_ms", "ms", "{:.2f}"),
            (f"{cfg['mib']} MiB up (device_put)", "up_gbs", "GB/s", "{:.2f}"),
            (f"{cfg['mib']} MiB down (np.asarray)", "down_gbs", "GB/s", "{:.2f}"),
            (f"{cfg['rep_mib']} MiB up, 4 devices", "up_rep_gbs", "GB/s", "{:.2f}")]
    print("causeway proxy front, plugin front and stock in-process JAX, one device"
          + (" (--quick: rough)" if a.quick else ""))
    print(f"  {'measurement':<30} {'proxy':>12} {'plugin':>12} {'stock':>12} {'unit':<8}"
          f" {'proxy/stock':>11} {'proxy/plugin':>12}")
    for name, key, unit, fmt in rows:
        p, g, s = (res[side][key] for side in ("proxy", "plugin", "stock"))
        print(f"  {name:<30} {fmt.format(p):>12} {fmt.format(g):>12} {fmt.format(s):>12} "
              f"{unit:<8} {p / s:>10.2f}x {p / g:>11.2f}x")
    d, g, s = (res[side]["up_gbs"] for side in ("proxy-disk", "plugin", "stock"))
    name = f"{cfg['mib']} MiB up, transfer dir"
    print(f"  {name:<30} {d:>12.2f} {g:>12.2f} {s:>12.2f} {'GB/s':<8} {d / s:>10.2f}x "
          f"{d / g:>11.2f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
