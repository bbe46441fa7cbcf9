"""JAX-side checks of the metrics suite (test_metrics.py): loaded by the runner
through CW_RUNNER_CHECKS. Each runs in a real JAX client on causeway."""
from __future__ import annotations

import numpy as np

import jax

import checks

STATE: dict = {}


def _double_plus_one(a):
    return a * 2.0 + 1.0


def metrics_setup(size: int, device: int = 0) -> dict:
    """Uploads `size` float32s to one device and compiles (and runs once) a jit."""
    x = np.arange(size, dtype=np.float32)
    dev = jax.devices()[device]
    xa = jax.device_put(x, dev)
    xa.block_until_ready()
    f = jax.jit(_double_plus_one)
    f(xa).block_until_ready()
    STATE.update(f=f, x=xa)
    return {"bytes": int(x.nbytes), "worker": checks.worker_of(dev)}


def metrics_launch(n: int) -> dict:
    """Runs the jit of metrics_setup n times (n launches) and downloads the last."""
    f, x = STATE["f"], STATE["x"]
    ys = [f(x) for _ in range(n)]
    for y in ys:
        y.block_until_ready()
    last = np.asarray(ys[-1])
    return {"sum": float(last.sum()), "bytes": int(last.nbytes)}


def metrics_recompile() -> dict:
    """Drops JAX's in-process caches and compiles the same jit again: the
    controller receives the same program and options a second time."""
    jax.clear_caches()
    f = jax.jit(_double_plus_one)
    f(STATE["x"]).block_until_ready()
    STATE["f"] = f
    return {}
