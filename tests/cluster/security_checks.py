"""JAX-side checks of tests/cluster/test_security.py (loaded by the runner
through CW_RUNNER_CHECKS)."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def sec_compute() -> dict:
    """A jitted program on every device; returns host values."""
    f = jax.jit(lambda x: (x * 3 + 1).sum())
    out = {}
    for d in jax.devices():
        x = jax.device_put(np.arange(16, dtype=np.float32), d)
        out[d.id] = float(f(x))
    return out
