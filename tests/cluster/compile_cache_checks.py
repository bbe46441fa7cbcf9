"""JAX-side checks of tests/cluster/test_compile_cache_disk.py."""
from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np


def cc_program() -> list:
    """One jitted program on the first device; its result as a list."""
    f = jax.jit(lambda x, y: jnp.tanh(x @ y) * 2.0 + 1.0)
    d = jax.devices()[0]
    x = jax.device_put(np.arange(12, dtype=np.float32).reshape(3, 4) / 10, d)
    y = jax.device_put(np.ones((4, 2), dtype=np.float32), d)
    return np.asarray(f(x, y)).tolist()
