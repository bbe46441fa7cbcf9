"""JAX-side checks of test_alloc.py (loaded by the runner through
CW_RUNNER_CHECKS): what a session sees of its allocation, SPMD programs with
collectives over its devices, and launch bursts for the weights test. Every
numeric result is checked here against numpy; the test gets verdicts and
the numbers it asserts on."""
from __future__ import annotations

import time

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, PartitionSpec as P

from checks import _attr, worker_of, island_of

STATE: dict = {}


def alloc_devices() -> dict:
    """The session's devices: ids, worker, island and local id on the worker."""
    devs = jax.devices()
    return {"ids": [d.id for d in devs],
            "workers": [worker_of(d) for d in devs],
            "islands": [island_of(d) for d in devs],
            "local": [int(_attr(d, "worker_local_id")) for d in devs]}


def alloc_compute(seed: int = 0) -> dict:
    """A computation on every device of the session (placed there by
    device_put, run by jit), each result against numpy."""
    rng = np.random.default_rng(seed)
    bad = []
    for d in jax.devices():
        a = rng.standard_normal((16, 8)).astype(np.float32)
        x = jax.device_put(a, d)
        y = jax.jit(lambda v: jnp.sin(v) * 2.0 + v.sum())(x)
        got = np.asarray(y)
        want = np.sin(a) * 2.0 + a.sum()
        if not np.allclose(got, want, rtol=1e-5, atol=1e-5) or list(y.devices()) != [d]:
            bad.append(d.id)
    return {"ok": not bad, "bad": bad, "n": len(jax.devices())}


def _psum_fn():
    if "psum" not in STATE:
        mesh = Mesh(np.array(jax.devices()), ("x",))
        f = jax.jit(jax.shard_map(lambda a: lax.psum(a * 2.0 + 1.0, "x"), mesh=mesh,
                                  in_specs=P("x"), out_specs=P()))
        STATE["psum"] = (mesh, f)
    return STATE["psum"]


def spmd_psum(n: int = 20, seed: int = 0, rows: int = 8) -> dict:
    """n SPMD launches with an all-reduce over the session's devices, all
    dispatched before any result is read; every result against numpy."""
    mesh, f = _psum_fn()
    k = len(jax.devices())
    rng = np.random.default_rng(seed)
    ins = [rng.standard_normal((k * rows, 4)).astype(np.float32) for _ in range(n)]
    outs = [f(a) for a in ins]
    bad = 0
    for a, y in zip(ins, outs):
        want = (a * 2.0 + 1.0).reshape(k, rows, 4).sum(0)
        if not np.allclose(np.asarray(y), want, rtol=1e-4, atol=1e-4):
            bad += 1
    return {"ok": bad == 0, "bad": bad, "n": n, "devices": k}


def burst(n: int = 200, size: int = 192, warm: bool = False) -> dict:
    """n chained launches of a small matmul program on device 0, dispatched
    back to back (they queue at the controller), then one result read and
    checked against the same chain in numpy."""
    d = jax.devices()[0]
    f = STATE.get("burst")
    if f is None:
        f = STATE["burst"] = jax.jit(lambda v: jnp.tanh(v @ v) * 0.5)
    a = (np.arange(size * size, dtype=np.float32).reshape(size, size) % 7 - 3) / (size * 4.0)
    x = jax.device_put(a, d)
    t = time.monotonic()
    for _ in range(n):
        x = f(x)
    got = np.asarray(x)
    elapsed = time.monotonic() - t
    want = a.astype(np.float32)
    for _ in range(n):
        want = np.tanh(want @ want) * 0.5
    return {"ok": bool(np.allclose(got, want, rtol=1e-3, atol=1e-4)), "elapsed": elapsed}
