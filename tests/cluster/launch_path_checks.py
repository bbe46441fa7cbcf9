"""JAX-side checks of the launch path (tests/cluster/test_launch_path.py)."""
from __future__ import annotations

import jax
import numpy as np


def launch_chain(n: int = 2000) -> dict:
    """x = f(x) n times on one device, then one block: the pipelined launch
    stream (with the DELETEs of every dropped x) in program order."""
    dev = jax.devices()[0]
    f = jax.jit(lambda v: v * 1.0 + 1.0)
    x = jax.device_put(np.arange(8, dtype=np.float32), dev)
    for _ in range(n):
        x = f(x)
    return {"x": np.asarray(x)}
