"""JAX side of bench/failover_bench.py (loaded by tests/jax/runner.py through
CW_RUNNER_CHECKS): pending work on the victim worker, then a blocked read."""
from __future__ import annotations

import time

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax

import checks

STATE: dict = {}


def failover_prepare() -> str:
    """Starts a long computation on the second worker; returns its name."""
    ws = checks.by_worker()
    victim = sorted(ws)[1]
    m = jax.device_put(np.eye(256, dtype=np.float32) * 0.5, ws[victim][0])

    @jax.jit
    def slow(m):  # far longer than the bench waits
        return lax.fori_loop(0, 1_000_000, lambda i, v: jnp.tanh(v @ v + 1.0), m)
    STATE["pending"] = slow(m)
    return victim


def failover_wait() -> dict:
    """Blocks on the pending result; reports when (and how) it failed."""
    try:
        np.asarray(STATE["pending"])
        return {"ok": True, "t_error": time.monotonic()}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "t_error": time.monotonic(), "error": checks.err_text(e)}


def failover_compile() -> dict:
    """A program not compiled yet (the controller must answer); when it failed."""
    ws = checks.by_worker()
    x = jax.device_put(np.arange(16, dtype=np.float32), ws[sorted(ws)[0]][0])
    try:
        np.asarray(jax.jit(lambda v: v * 3 - 1)(x))
        return {"ok": True, "t_error": time.monotonic()}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "t_error": time.monotonic(), "error": checks.err_text(e)}
