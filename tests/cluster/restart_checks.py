"""JAX-side checks of tests/cluster/test_restart.py (loaded by the runner via
CW_RUNNER_CHECKS): a training loop that runs on while the test kills and
restarts the controller, and what a client sees when it never comes back."""
from __future__ import annotations

import functools
import time

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import checks

STATE: dict = {}


def _setup():
    """The session's first island as a data-parallel mesh, host data, the step."""
    devs = checks.islands()[0]
    mesh = Mesh(np.array(devs), ("data",))
    data_sh, rep = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    r = checks.rng(11)
    xs = r.standard_normal((8, 16 * len(devs), 16)).astype(np.float32)
    true_w = r.standard_normal((16, 1)).astype(np.float32)
    ys = np.sin(xs @ true_w).astype(np.float32)
    if "step" not in STATE:
        @functools.partial(jax.jit, donate_argnums=0)
        def step(params, x, y):
            def mse(p):
                return jnp.mean((checks._mlp(p, x) - y) ** 2)
            loss, g = jax.value_and_grad(mse)(params)
            return jax.tree.map(lambda p, gp: p - 0.05 * gp, params, g), loss
        STATE["step"] = step
    p0 = jax.tree.map(np.asarray, checks._mlp_params(jax.random.key(1), [16, 32, 32, 1]))
    return data_sh, rep, xs, ys, p0


def train(steps: int = 60, progress: str = "", step_sleep: float = 0.0,
          probe_at: int = -1) -> dict:
    """Trains `steps` steps: each uploads its batch, launches the step (the
    params donated) and reads the loss back. At step `probe_at` it also
    compiles a program it never ran before (through the controller). Writes
    the step count to `progress`. Returns the losses, the probe's value and
    each step's wall time."""
    data_sh, rep, xs, ys, p0 = _setup()
    params = jax.device_put(p0, rep)
    losses, times, probe = [], [], None
    for i in range(steps):
        t = time.monotonic()
        x = jax.device_put(xs[i % len(xs)], data_sh)
        y = jax.device_put(ys[i % len(ys)], data_sh)
        params, loss = STATE["step"](params, x, y)
        losses.append(np.asarray(loss))
        if i == probe_at:
            # A fresh function object: traced and compiled now, not cached.
            fresh = jax.jit(lambda p, v, k=float(i): jnp.mean(checks._mlp(p, v)) + k)
            probe = np.asarray(fresh(params, x))
        times.append(time.monotonic() - t)
        if progress:
            with open(progress, "w") as f:
                f.write(str(i + 1))
        if step_sleep:
            time.sleep(step_sleep)
    final = jax.tree.map(np.asarray, params)
    return {"losses": np.stack(losses), "probe": probe, "times": times, "final": final,
            "devices": [d.id for d in checks.islands()[0]]}


def train_when_joined(steps: int = 20, within_s: float = 20.0) -> dict:
    """`train`, tried again until it runs: its worker was replaced, and a
    first try may find it down (before the controller's WORKER_UP reached
    this client). A program that cannot run there fails every try."""
    t = time.monotonic()
    while True:
        try:
            return train(steps)
        except Exception:  # noqa: BLE001
            if time.monotonic() - t > within_s:
                raise
            time.sleep(0.2)


# ---- A controller that never comes back ------------------------------------------------------

def lost_prepare() -> dict:
    devs = checks.islands()[0]
    a = np.arange(512, dtype=np.float32)
    x = jax.device_put(a, devs[0])
    f = jax.jit(lambda v: v * 2 + 1)
    y = np.asarray(f(x))
    STATE["lost"] = {"a": a, "x": x, "f": f}
    return {"y": y}


def lost_after() -> dict:
    s = STATE["lost"]
    return {
        "read": checks._timed(lambda: np.asarray(s["x"])),
        "compile": checks._timed(lambda: np.asarray(jax.jit(lambda v: v - 3)(s["x"]))),
        "launch": checks._timed(lambda: np.asarray(s["f"](s["x"]))),
        "compile_again": checks._timed(lambda: np.asarray(jax.jit(lambda v: v * 5)(s["x"]))),
        "a": s["a"],
    }
