"""JAX-side checks for tests/cluster/test_memory.py (memory back-pressure).
Loaded by the runner through CW_RUNNER_CHECKS; arrays a session keeps
between calls live in MEM. Every array is on the first device (global id 0)
and holds float32 values whose f(x) = 2x + 1 is exact, so results compare
with numpy exactly."""
from __future__ import annotations

import gc
import time

import numpy as np

import jax

from checks import err_text

MEM: dict = {}
MIB = 1 << 20


def _dev():
    return jax.devices()[0]


def _host(mib: float, seed: int) -> np.ndarray:
    n = int(mib * MIB) // 4
    return ((np.arange(n, dtype=np.int64) * 7 + seed) % 1000).astype(np.float32)


def _step(x):
    return x * 2.0 + 1.0


def _f():
    if "f" not in MEM:
        MEM["f"] = jax.jit(_step)
    return MEM["f"]


def mem_hold(name: str, mib: float, seed: int = 0) -> dict:
    """Uploads an array of `mib` MiB to device 0 and keeps it as `name`;
    returns how long the upload took (it waits while the worker's memory is
    full) and whether its bytes are right."""
    host = _host(mib, seed)
    t0 = time.monotonic()
    x = jax.device_put(host, _dev())
    x.block_until_ready()
    took = time.monotonic() - t0
    MEM[name] = x
    MEM[name + "_host"] = host
    return {"seconds": took, "ok": bool(np.array_equal(np.asarray(x), host)),
            "nbytes": int(x.nbytes)}


def mem_try_hold(name: str, mib: float, seed: int = 0) -> dict:
    """mem_hold, answering with the error instead of raising it."""
    t0 = time.monotonic()
    try:
        out = mem_hold(name, mib, seed)
        out["error"] = None
        return out
    except Exception as e:  # noqa: BLE001 - the error is the answer
        MEM.pop(name, None)
        return {"error": err_text(e), "seconds": time.monotonic() - t0}


def mem_release(name: str) -> dict:
    """Drops `name`; one small launch after it carries the client's batched
    DELETE to the worker (the plugin sends deletes with its next request)."""
    MEM.pop(name, None)
    MEM.pop(name + "_host", None)
    gc.collect()
    small = jax.device_put(np.ones(16, dtype=np.float32), _dev())
    _f()(small).block_until_ready()
    return {"released": name}


def mem_steps(k: int, kib: int = 256) -> dict:
    """k launches x = f(x) on a small array (a training loop's steps);
    the result against numpy."""
    host = _host(kib / 1024, 3)
    t0 = time.monotonic()
    x = jax.device_put(host, _dev())
    want = host
    for _ in range(k):
        x = _f()(x)
        want = _step(want)
    got = np.asarray(x)
    return {"ok": bool(np.array_equal(got, want)), "steps": k,
            "seconds": time.monotonic() - t0}


def mem_apply(src: str, dst: str) -> dict:
    """dst = f(src) (its outputs need as much memory as src), waited for and
    checked against numpy; how long it took."""
    t0 = time.monotonic()
    y = _f()(MEM[src])
    y.block_until_ready()
    took = time.monotonic() - t0
    want = _step(MEM[src + "_host"])
    MEM[dst] = y
    MEM[dst + "_host"] = want
    return {"seconds": took, "ok": bool(np.array_equal(np.asarray(y), want))}


def mem_check(name: str) -> dict:
    """Whether `name` still holds its values."""
    return {"ok": bool(np.array_equal(np.asarray(MEM[name]), MEM[name + "_host"]))}
