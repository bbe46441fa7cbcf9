"""JAX-side checks of tests/cluster/test_health.py (loaded by the runner via
CW_RUNNER_CHECKS): a training loop that survives losing its worker, and what
a client sees when a worker or the controller goes away."""
from __future__ import annotations

import functools
import os
import time

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import checks

STATE: dict = {}


def _mlp_params(key, sizes):
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        key, k1 = jax.random.split(key)
        params.append({"w": np.asarray(jax.random.normal(k1, (n_in, n_out), jnp.float32))
                       * np.float32(1.0 / np.sqrt(n_in)),
                       "b": np.zeros((n_out,), np.float32)})
    return params


def _mlp(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def _setup(island: int):
    """Host data and params, and the island's shardings (one worker)."""
    mesh = Mesh(np.array(checks.islands()[island]), ("data",))
    data_sh, rep = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    r = checks.rng(10)
    xs = r.standard_normal((4, 64, 16)).astype(np.float32)
    true_w = r.standard_normal((16, 1)).astype(np.float32)
    ys = np.sin(xs @ true_w).astype(np.float32)
    params0 = _mlp_params(jax.random.key(0), [16, 32, 32, 1])  # host arrays
    if "step" not in STATE:
        @functools.partial(jax.jit, donate_argnums=0)
        def step(params, x, y):
            loss, g = jax.value_and_grad(lambda p: jnp.mean((_mlp(p, x) - y) ** 2))(params)
            return jax.tree.map(lambda p, gp: p - 0.05 * gp, params, g), loss
        STATE["step"] = step
    return mesh, data_sh, rep, xs, ys, params0


def _upload(data_sh, rep, xs, ys, host_params):
    params = jax.device_put(host_params, rep)
    batches = [(jax.device_put(xs[i], data_sh), jax.device_put(ys[i], data_sh))
               for i in range(len(xs))]
    return params, batches


def train_reference(steps: int = 50, island: int = 1) -> dict:
    """The unbroken run: per-step losses."""
    mesh, data_sh, rep, xs, ys, p0 = _setup(island)
    params, batches = _upload(data_sh, rep, xs, ys, p0)
    losses = []
    for i in range(steps):
        params, loss = STATE["step"](params, *batches[i % 4])
        losses.append(np.asarray(loss))
    return {"losses": np.stack(losses), "worker": checks.worker_of(mesh.devices.flat[0])}


def train_until_error(steps: int = 50, island: int = 1, every: int = 10,
                      progress: str = "", step_sleep: float = 0.05) -> dict:
    """Trains with a host checkpoint every `every` steps, writing the step
    number to `progress`; returns at the end or at the first error (the test
    kills the worker meanwhile)."""
    mesh, data_sh, rep, xs, ys, p0 = _setup(island)
    params, batches = _upload(data_sh, rep, xs, ys, p0)
    losses, ckpt = [], None
    for i in range(steps):
        try:
            if i % every == 0:
                ckpt = (i, jax.tree.map(np.asarray, params))
            params, loss = STATE["step"](params, *batches[i % 4])
            losses.append(np.asarray(loss))
        except Exception as e:  # noqa: BLE001 - the worker died
            STATE["train"] = {"ckpt": ckpt, "losses": losses, "steps": steps, "island": island}
            STATE["lost_array"] = batches[0][0]
            return {"ok": False, "step": i, "error": checks.err_text(e),
                    "t_error": time.monotonic(), "ckpt_step": ckpt[0]}
        if progress:
            with open(progress, "w") as f:
                f.write(str(i + 1))
        time.sleep(step_sleep)
    return {"ok": True, "losses": np.stack(losses)}


def train_resume() -> dict:
    """Restores the checkpoint onto the same devices (re-uploading the inputs)
    and finishes the run: all per-step losses."""
    t = STATE["train"]
    k, host_params = t["ckpt"]
    mesh, data_sh, rep, xs, ys, _ = _setup(t["island"])
    params, batches = _upload(data_sh, rep, xs, ys, host_params)
    losses = list(t["losses"][:k])
    for i in range(k, t["steps"]):
        params, loss = STATE["step"](params, *batches[i % 4])
        losses.append(np.asarray(loss))
    stale = checks._timed(lambda: np.asarray(STATE["lost_array"])) if "lost_array" in STATE \
        else None
    return {"losses": np.stack(losses), "resumed_from": k, "stale_read": stale}


# ---- Silent worker (SIGSTOP) ----------------------------------------------------------------

def after_wake(victim: str) -> dict:
    """After the stopped worker woke up and registered again: old arrays stay
    in error, new uploads and computations there work."""
    s = checks.STATE["kill"]
    dev = s["victim_dev"]
    # The controller saw it register; WORKER_UP reaches this client a moment
    # later, and until then the worker still reads as dead here (the old
    # reason). Wait for that, at most 10 s, before judging new work there.
    t = time.monotonic()
    while time.monotonic() - t < 10:
        try:
            np.asarray(jax.device_put(s["a"][:1], dev))
            break
        except Exception as e:  # noqa: BLE001 - only the stale death is waited out
            if "no heartbeat" not in str(e):
                break
            time.sleep(0.05)
    out = {
        "rejoin_wait_s": time.monotonic() - t,
        "old_read": checks._timed(lambda: np.asarray(s["victim"])),
        "keep_read": checks._timed(lambda: np.asarray(s["keep"])),
        "new_put": checks._timed(lambda: np.asarray(jax.device_put(s["a"], dev))),
        "new_compute": checks._timed(lambda: np.asarray(
            jax.jit(lambda v: v * 3)(jax.device_put(s["a"], dev)))),
    }
    out["expected"] = s["a"]
    return out


def stall_prepare(programs: int = 0) -> dict:
    """An array and a program on the first device, used once; and
    `programs` more programs there (v * 10 + i), each used once."""
    dev = jax.devices()[0]
    a = jax.device_put(np.arange(8, dtype=np.float32), dev)
    f = jax.jit(lambda v: v + 1)
    np.asarray(f(a))
    more = [jax.jit(lambda v, i=i: v * 10 + i) for i in range(programs)]
    for g in more:
        np.asarray(g(a))
    STATE["stall"] = {"a": a, "f": f, "dev": dev, "more": more}
    return {}


def stall_after() -> dict:
    """After the worker, stopped while this client was idle, registered
    again: the first request naming the old array, then a read of it, then
    new work there."""
    s = STATE["stall"]
    t = time.monotonic()
    while True:
        launch = checks._timed(lambda: np.asarray(s["f"](s["a"])))
        # Until the controller's WORKER_UP reaches this client, the worker
        # reads as dead for the stall's reason (nothing is sent then).
        if launch["ok"] or "no heartbeat" not in launch["error"] or time.monotonic() - t > 10:
            break
        time.sleep(0.1)
    return {
        "launch": launch,
        "read": checks._timed(lambda: np.asarray(s["a"])),
        "fresh": checks._timed(lambda: np.asarray(
            s["f"](jax.device_put(np.ones(8, np.float32), s["dev"])))),
    }


def stall_restart_after() -> dict:
    """After the worker registered again as its own replacement and the
    controller restarted: an upload read back, a new program, and the
    program compiled before the stall, each on the worker (tried for up to
    10 s: a first call may meet the join superseded by the resume)."""
    s = STATE["stall"]

    def tried(fn):
        t = time.monotonic()
        while True:
            got = checks._timed(fn)
            if got["ok"] or time.monotonic() - t > 10:
                return got
            time.sleep(0.1)
    ones = np.ones(8, np.float32)
    out = {
        "put": tried(lambda: np.asarray(jax.device_put(ones, s["dev"]))),
        "new": tried(lambda: np.asarray(jax.jit(lambda v: v * 3)(jax.device_put(ones, s["dev"])))),
        "old": tried(lambda: np.asarray(s["f"](jax.device_put(ones, s["dev"])))),
    }
    # Each of the other programs compiled before gives its own result.
    if s["more"]:
        x = jax.device_put(ones, s["dev"])
        out["more"] = [checks._timed(lambda g=g: np.asarray(g(x))) for g in s["more"]]
    return out


# ---- Controller restart --------------------------------------------------------------------

def ctl_prepare() -> dict:
    ws = checks.by_worker()
    d = ws[sorted(ws)[0]][0]
    a = np.arange(1024, dtype=np.float32)
    x = jax.device_put(a, d)
    f = jax.jit(lambda v: v * 2 + 1)
    y = f(x)
    m = jax.device_put(np.eye(256, dtype=np.float32) * 0.5, ws[sorted(ws)[1]][0])

    @jax.jit
    def slow(m):  # still running when the controller dies
        return jax.lax.fori_loop(0, 3000, lambda i, v: jnp.tanh(v @ v + 1.0), m)
    STATE["ctl"] = {"a": a, "x": x, "f": f, "y": np.asarray(y), "pending": slow(m)}
    return {"y": np.asarray(y)}


def ctl_lost() -> dict:
    s = STATE["ctl"]
    return {
        "read": checks._timed(lambda: np.asarray(s["x"])),
        "in_flight": checks._timed(lambda: s.pop("pending").block_until_ready() is None),
        "launch": checks._timed(lambda: np.asarray(s["f"](s["x"]))),
        "compile": checks._timed(lambda: np.asarray(jax.jit(lambda v: v - 7)(s["x"]))),
        "a": s["a"],
    }


def compute_everywhere() -> dict:
    """On every device: x * 2 + 1 of a known array, and its expected value."""
    a = np.arange(256, dtype=np.float32)
    f = jax.jit(lambda v: v * 2 + 1)
    got = [np.asarray(f(jax.device_put(a, d))) for d in jax.devices()]
    return {"ok": all(np.array_equal(g, a * 2 + 1) for g in got), "devices": len(got),
            "pid": os.getpid()}


def link_compute() -> dict:
    """x * 2 + 1 on the first device, read back, timed; and what it should
    be. Compiled once: later calls need the worker's link alone."""
    a = np.arange(4096, dtype=np.float32)
    f = STATE.setdefault("link_f", jax.jit(lambda v: v * 2 + 1))
    out = checks._timed(lambda: np.asarray(f(jax.device_put(a, jax.devices()[0]))))
    out["expected"] = a * 2 + 1
    return out


def keep_arrays() -> dict:
    """An upload and a launch's output on the first device, kept for
    read_kept (after a partition healed: the same arrays on the worker)."""
    a = np.arange(1000, dtype=np.float32) - 300
    f = STATE.setdefault("link_f", jax.jit(lambda v: v * 2 + 1))
    x = jax.device_put(a, jax.devices()[0])
    y = f(x)
    y.block_until_ready()
    STATE["kept"] = (a, x, y)
    return {"ok": True}


def read_kept() -> dict:
    """The arrays keep_arrays made, read back, a third computed from them,
    and what they should be (numpy's)."""
    a, x, y = STATE["kept"]
    out = checks._timed(lambda: [np.asarray(x), np.asarray(y), np.asarray(x * y - 1)])
    out["expected"] = [a, a * 2 + 1, a * (a * 2 + 1) - 1]
    return out


def put_unwaited() -> dict:
    """An upload to the first device not waited for (kept for read_unwaited):
    during a partition, its bytes never reach the worker."""
    b = np.full(4096, 7, dtype=np.float32)
    out = checks._timed(lambda: STATE.__setitem__("unwaited", jax.device_put(b, jax.devices()[0])))
    return out


def read_unwaited() -> dict:
    return checks._timed(lambda: np.asarray(STATE["unwaited"]))


def fresh_work() -> dict:
    """A program not compiled before, on a new upload to the first device,
    read back; and what numpy says."""
    a = np.linspace(-2, 2, 512, dtype=np.float32)
    out = checks._timed(lambda: np.asarray(
        jax.jit(lambda v: jnp.tanh(v) * 5 + v)(jax.device_put(a, jax.devices()[0]))))
    out["expected"] = np.tanh(a) * 5 + a
    return out


def copy_across_then_read(src_worker: str, dst_worker: str) -> dict:
    """An array moved from src_worker's device to dst_worker's (the workers
    send the bytes), then read back from dst_worker, timed."""
    src = next(d for d in jax.devices() if d.worker == src_worker)
    dst = next(d for d in jax.devices() if d.worker == dst_worker)
    a = np.arange(4096, dtype=np.float32)
    x = jax.device_put(a, src)
    x.block_until_ready()
    out = checks._timed(lambda: np.asarray(jax.device_put(x, dst)))
    out["expected"] = a
    return out


def linalg_inv() -> dict:
    """jnp.linalg.inv on the first device (LAPACK: jaxlib's kernels on the
    worker), read back, timed."""
    a = np.array([[4.0, 1.0], [2.0, 3.0]], dtype=np.float32)
    out = checks._timed(lambda: np.asarray(jnp.linalg.inv(jax.device_put(a, jax.devices()[0]))))
    out["expected"] = np.linalg.inv(a.astype(np.float64)).astype(np.float32)
    return out


def link_compile_new() -> dict:
    """Compiles a program not seen before (the controller asks the worker),
    timed; nothing goes through this process's own link to the worker."""
    spec = jax.ShapeDtypeStruct((16,), np.float32)
    return checks._timed(lambda: jax.jit(lambda v: v * 3 - 1).lower(spec).compile() is not None)


def slow_prepare(iters: int = 3000) -> dict:
    """A computation of a few seconds on the first device, not waited for."""
    from jax import lax
    dev = jax.devices()[0]
    m = jax.device_put(np.eye(128, dtype=np.float32) * 0.5, dev)

    @jax.jit
    def slow(m):
        return lax.fori_loop(0, iters, lambda i, v: jnp.tanh(v @ v + 1.0), m)
    STATE["slow"] = slow(m)
    return {}


def slow_wait() -> dict:
    """Blocks on the slow result."""
    return checks._timed(lambda: np.asarray(STATE["slow"]))
