"""JAX-side checks for tests/cluster/test_ops.py (causeway status, pause,
resume, drain). Loaded by the runner through CW_RUNNER_CHECKS; state between
calls lives in OPS."""
from __future__ import annotations

import numpy as np

import jax

from checks import err_text, worker_of

OPS: dict = {}


def _device(worker: str):
    return next(d for d in jax.devices() if worker_of(d) == worker)


def _step(x):
    return x * 2.0 + 1.0


def ops_upload(worker: str, n: int) -> dict:
    """One array of n float32 on `worker`'s first device, kept alive."""
    d = _device(worker)
    x = jax.device_put(np.arange(n, dtype=np.float32), d)
    x.block_until_ready()
    OPS["upload"] = x
    return {"nbytes": int(x.nbytes), "device": int(d.id)}


def ops_prepare(worker: str, n: int = 8) -> dict:
    """x0 on `worker` and the step compiled and run once (so later calls only launch)."""
    d = _device(worker)
    OPS["f"] = jax.jit(_step)
    x0 = jax.device_put(np.arange(n, dtype=np.float32), d)
    OPS["f"](x0).block_until_ready()
    OPS["x0"] = x0
    OPS["x0_host"] = np.arange(n, dtype=np.float32)
    return {"device": int(d.id)}


def ops_run(k: int) -> dict:
    """k launches, each waited for."""
    x = OPS["x0"]
    for _ in range(k):
        x = OPS["f"](x)
    x.block_until_ready()
    return {"value": np.asarray(x)}


def ops_dispatch_chain(k: int) -> dict:
    """x_{i+1} = f(x_i), k launches dispatched without waiting."""
    xs, x = [], OPS["x0"]
    for _ in range(k):
        x = OPS["f"](x)
        xs.append(x)
    OPS["chain"] = xs
    return {"dispatched": len(xs)}


def ops_chain_ready() -> list:
    return [bool(x.is_ready()) for x in OPS["chain"]]


def ops_chain_collect() -> dict:
    """Every chain result, and whether each equals the host's f^i(x0)."""
    want, ok, got = OPS["x0_host"], [], []
    for x in OPS["chain"]:
        want = _step(want)
        v = np.asarray(x)
        got.append(v)
        ok.append(bool(np.array_equal(v, want)))
    return {"ok": ok, "last": got[-1] if got else None}


def ops_try_launch() -> dict:
    """One more launch on x0's device: its error, if any."""
    try:
        v = np.asarray(OPS["f"](OPS["x0"]))
        return {"ok": True, "value": v}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": err_text(e)}


def ops_chain_after_failure(k: int) -> dict:
    """A launch that fails, then k launches chained on its output: the
    errors of the first and of the last."""
    x = OPS["f"](OPS["x0"])
    try:
        x.block_until_ready()
        return {"ok": True}
    except Exception as e:  # noqa: BLE001
        first = err_text(e)
    for _ in range(k):
        x = OPS["f"](x)
    try:
        np.asarray(x)
        return {"ok": True}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "first": first, "last": err_text(e)}


def ops_try_upload(worker: str) -> dict:
    try:
        x = jax.device_put(np.ones(4, dtype=np.float32), _device(worker))
        x.block_until_ready()
        return {"ok": True, "value": np.asarray(x)}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": err_text(e)}


def ops_download_x0() -> dict:
    return {"value": np.asarray(OPS["x0"])}


def ops_devices() -> dict:
    return {"ids": [int(d.id) for d in jax.devices()],
            "workers": sorted({worker_of(d) for d in jax.devices()})}


def ops_failed_compiles(worker: str, n: int) -> dict:
    """n programs the worker's XLA refuses to compile (a custom call to a
    target nobody registered), each distinct: each compile fails there."""
    d = _device(worker)
    x = jax.device_put(np.ones(8, np.float32), d)
    errors = []
    for i in range(n):
        f = jax.jit(lambda a, i=i: jax.ffi.ffi_call(
            "cw_ops_no_such_target", jax.ShapeDtypeStruct(a.shape, a.dtype))(a) + i)
        try:
            f(x).block_until_ready()
            errors.append("")
        except Exception as e:  # noqa: BLE001 - the compile's error is the point
            errors.append(err_text(e))
    return {"errors": errors}
