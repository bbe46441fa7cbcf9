"""JAX-side checks of the trace suite (test_trace.py), loaded by the runner
through CW_RUNNER_CHECKS; the runner's environment sets CAUSEWAY_TRACE."""
from __future__ import annotations

import numpy as np

import jax

import checks


def _scale_shift(a):
    return a * 3.0 - 1.0


def trace_work(size: int = 1024) -> dict:
    """A jit on each island, then a cross-island jax.device_put (worker to
    worker), all waited for. Returns the executable's name and the workers."""
    isl = checks.islands()
    assert len(isl) >= 2, f"need two islands, have {len(isl)}"
    f = jax.jit(_scale_shift)
    x = np.arange(size, dtype=np.float32)
    outs = []
    for devs in isl[:2]:
        xa = jax.device_put(x, devs[0])
        y = f(xa)
        y.block_until_ready()
        outs.append(y)
    moved = jax.device_put(outs[0], isl[1][0])  # island 0 -> island 1
    moved.block_until_ready()
    got = np.asarray(moved)
    assert np.allclose(got, x * 3.0 - 1.0)
    return {"workers": [checks.worker_of(devs[0]) for devs in isl[:2]]}


def trace_flush() -> dict:
    """Flush on demand: the plugin's exported CausewayTraceFlush (the library
    JAX loaded; dlopen hands back the same one)."""
    import ctypes
    import os
    lib = ctypes.CDLL(os.environ["CAUSEWAY_PJRT_LIBRARY"])
    return {"rc": int(lib.CausewayTraceFlush())}
