"""The checks: plain JAX functions run unchanged on stock CPU JAX and on causeway.

Imported only inside runner subprocesses (runner.py). Each check returns a
tree of numpy arrays, numbers and strings that the test compares between the
two runners; nothing here depends on which backend it runs on, except through
the helpers below (islands, workers), which read causeway's device attributes
"island" and "worker" and, on stock JAX, emulate them: with
CW_EMULATE_ISLAND_SIZE=4, devices 0-3 are island 0 ("worker-0") and 4-7
island 1, as in the default embedded cluster. Devices are reported by their
position in jax.devices(), never by id, so both sides are comparable.

Checks that expect an error catch it and return it as {"ok": False, "error":
...}; any other exception travels to the test as a failure.
"""
from __future__ import annotations

import functools
import gc
import hashlib
import os
import re
import time
from typing import NamedTuple

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

STATE: dict = {}  # objects kept between calls of a multi-step check


# ---- Start-up and placement helpers ------------------------------------------------

def startup() -> dict:
    info = {"jax": jax.__version__, "pid": os.getpid()}
    if os.environ.get("CW_RUNNER_NO_PLUGINS"):
        from jax._src import xla_bridge
        assert "causeway" not in xla_bridge._backend_factories, "stock runner loaded causeway"
    if not os.environ.get("CW_RUNNER_LAZY"):
        info.update(backend_info())
    return info


def backend_info() -> dict:
    from jax._src import xla_bridge
    b = xla_bridge.get_backend()
    return {"platform": b.platform, "platform_version": b.platform_version,
            "devices": len(jax.devices()), "backends": sorted(xla_bridge.backends())}


def backend_init() -> dict:
    """Initializes the backend, timed: {"ok", "elapsed", "error"}."""
    t = time.monotonic()
    try:
        n = len(jax.devices())
        return {"ok": True, "devices": n, "elapsed": time.monotonic() - t}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": f"{type(e).__name__}: {e}", "elapsed": time.monotonic() - t}


def _attr(d, name):
    try:
        return getattr(d, name)
    except AttributeError:
        return None


def island_of(d) -> int:
    v = _attr(d, "island")
    if v is not None:
        return int(v)
    size = int(os.environ.get("CW_EMULATE_ISLAND_SIZE", "0"))
    if not size:
        raise RuntimeError(f"{d} has no 'island' attribute and islands are not emulated")
    return d.id // size


def worker_of(d) -> str:
    v = _attr(d, "worker")
    if v is not None:
        return str(v)
    return f"worker-{island_of(d)}"


def islands() -> list[list]:
    """Devices grouped by island, islands in ascending order, devices by id."""
    groups: dict[int, list] = {}
    for d in jax.devices():
        groups.setdefault(island_of(d), []).append(d)
    return [sorted(groups[k], key=lambda d: d.id) for k in sorted(groups)]


def pos(d) -> int:
    return jax.devices().index(d)


def positions(arr) -> list[int]:
    return sorted(pos(d) for d in arr.devices())


def shard_layout(arr) -> list:
    """[(device position, index tuple as (start, stop) pairs, shard shape)], sorted."""
    out = []
    for s in arr.addressable_shards:
        idx = tuple((sl.start, sl.stop) if isinstance(sl, slice) else sl for sl in s.index)
        out.append((pos(s.device), idx, tuple(s.data.shape)))
    return sorted(out)


def sharding_desc(arr) -> dict:
    sh = arr.sharding
    d = {"type": type(sh).__name__, "devices": positions(arr), "layout": shard_layout(arr),
         "fully_replicated": bool(sh.is_fully_replicated)}
    if isinstance(sh, NamedSharding):
        d["spec"] = str(sh.spec)
        d["mesh_shape"] = dict(sh.mesh.shape)
        d["mesh_devices"] = [pos(x) for x in sh.mesh.devices.flat]
    return d


def rng(seed=0):
    return np.random.default_rng(seed)


def err_text(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


# ---- Inventory -----------------------------------------------------------------------

def inventory() -> dict:
    devs = jax.devices()
    isl = islands()
    return {
        "num_devices": len(devs),
        "local_device_count": jax.local_device_count(),
        "process_count": jax.process_count(),
        "process_index": jax.process_index(),
        "ids_unique": len({d.id for d in devs}) == len(devs),
        "islands": [[pos(d) for d in g] for g in isl],
        "workers": {w: [pos(d) for d in devs if worker_of(d) == w]
                    for w in sorted({worker_of(d) for d in devs})},
        "island_worker": [sorted({worker_of(d) for d in g}) for g in isl],
        "has_attributes": [(_attr(d, "island") is not None, _attr(d, "worker") is not None)
                           for d in devs],
        "addressable": [d.process_index == jax.process_index() for d in devs],
        "platform": devs[0].platform,
        "repr": [repr(d) for d in devs],
    }


# ---- jnp ops -------------------------------------------------------------------------

def jnp_ops(jit: bool = False) -> dict:
    """Op by op (one small executable each), or all in one jit."""
    if jit:
        return jax.tree.map(np.asarray, jax.jit(_jnp_ops)())
    return jax.tree.map(np.asarray, _jnp_ops())


def _jnp_ops() -> dict:
    r = rng(1)
    a = r.standard_normal((6, 5)).astype(np.float32)
    b = r.standard_normal((5, 4)).astype(np.float32)
    v = r.standard_normal(17).astype(np.float32)
    i = r.integers(-50, 50, size=(4, 7)).astype(np.int32)
    x, y, w, k = jnp.asarray(a), jnp.asarray(b), jnp.asarray(v), jnp.asarray(i)
    out = {
        "add": x + 1.5, "sub": x - x.T.T * 2, "mul": x * x, "div": x / (jnp.abs(x) + 1),
        "pow": jnp.abs(x) ** 1.7, "neg": -x, "broadcast": x + w[:5],
        "matmul": x @ y, "dot": jnp.dot(w, w), "einsum": jnp.einsum("ij,jk->ik", x, y),
        "outer": jnp.outer(w[:3], w[3:6]), "transpose": x.T, "reshape": x.reshape(5, 6),
        "concat": jnp.concatenate([x, x * 2], axis=1), "stack": jnp.stack([w, -w]),
        "split": jnp.split(w[:16], 4), "sum": x.sum(), "sum0": x.sum(axis=0),
        "mean": x.mean(axis=1), "var": x.var(), "std": jnp.std(w), "prod": x.prod(axis=0),
        "max": x.max(), "min": x.min(axis=1), "argmax": jnp.argmax(x, axis=1),
        "argmin": jnp.argmin(w), "cumsum": jnp.cumsum(w), "cumprod": jnp.cumprod(x, axis=1),
        "sort": jnp.sort(w), "argsort": jnp.argsort(w), "sort2": jnp.sort(x, axis=0),
        "where": jnp.where(x > 0, x, 0.0), "clip": jnp.clip(x, -0.5, 0.5),
        "exp": jnp.exp(x), "log": jnp.log(jnp.abs(x) + 1e-3), "tanh": jnp.tanh(x),
        "sin": jnp.sin(x), "cos": jnp.cos(w), "sqrt": jnp.sqrt(jnp.abs(x)),
        "logsumexp": jax.nn.logsumexp(x, axis=1), "softmax": jax.nn.softmax(x),
        "relu": jax.nn.relu(x), "gelu": jax.nn.gelu(x), "sigmoid": jax.nn.sigmoid(x),
        "erf": jax.scipy.special.erf(x),
        "take": jnp.take(w, jnp.array([3, 1, 16, 0])), "gather": x[jnp.array([0, 5, 2])],
        "slice": x[1:5:2, ::-1], "at_set": x.at[2, 3].set(100.0),
        "at_add": w.at[jnp.array([1, 1, 4])].add(1.0), "pad": jnp.pad(x, ((1, 0), (0, 2))),
        "roll": jnp.roll(w, 3), "flip": jnp.flip(x, 1), "tile": jnp.tile(w[:3], 3),
        "linspace": jnp.linspace(-1, 1, 11), "arange": jnp.arange(3, 40, 3),
        "eye": jnp.eye(4), "tri": jnp.tril(jnp.ones((4, 4))), "trace": jnp.trace(x[:5]),
        "int_ops": [k + 3, k * k, k // 7, k % 7, k >> 2, k & 5, jnp.abs(k), k.sum(),
                    k.max(axis=0), jnp.bitwise_xor(k, 1234)],
        "compare": [x > 0, x == x, jnp.isnan(x / 0.0 * 0.0), jnp.any(x > 2), jnp.all(x < 10)],
        "cast": [x.astype(jnp.int32), k.astype(jnp.float32), (x > 0).astype(jnp.int8)],
        "round": [jnp.round(x * 10), jnp.floor(x), jnp.ceil(x), jnp.sign(x)],
        "unique_sorted": jnp.unique(jnp.array([3, 1, 3, 2, 1]), size=3),
        "conv": jnp.convolve(w, jnp.array([1.0, -2.0, 1.0], jnp.float32)),
        "norm": jnp.linalg.norm(x), "norm_ax": jnp.linalg.norm(x, axis=0),
        "top_k": list(lax.top_k(w, 5)),
    }
    return out


# ---- jit -------------------------------------------------------------------------------

class Pair(NamedTuple):
    left: object
    right: object


def jit_pytrees() -> dict:
    r = rng(2)
    tree = {"x": r.standard_normal((3, 4)).astype(np.float32),
            "y": [np.arange(5, dtype=np.int32), r.standard_normal(2).astype(np.float32)],
            "p": Pair(np.float32(2.0), (np.ones(3, np.float32), None))}
    traces = []

    @functools.partial(jax.jit, static_argnums=(1,))
    def f(t, n):
        traces.append(n)
        return ({"a": t["x"] * n, "b": [t["y"][0] + n, t["y"][1].sum()]},
                Pair(t["p"].left * t["p"].right[0], n * 2))

    out = {"static2": f(tree, 2), "static3": f(tree, 3), "again2": f(tree, 2)}
    out["traces"] = list(traces)

    @functools.partial(jax.jit, static_argnames=("mode",))
    def g(x, mode="sum"):
        return x.sum() if mode == "sum" else x.max()

    out["static_names"] = [g(tree["x"]), g(tree["x"], mode="max")]

    donate = jax.jit(lambda acc, d: (acc + d, acc.sum()), donate_argnums=0)
    acc = jnp.zeros((256,), jnp.float32)
    for step in range(3):
        old = acc
        acc, s = donate(acc, jnp.full((256,), float(step + 1), jnp.float32))
        out[f"donated_deleted_{step}"] = bool(old.is_deleted())
        out[f"donate_sum_{step}"] = s
    out["donate_final"] = acc
    try:
        np.asarray(old)
        out["donated_read"] = "readable"
    except Exception as e:  # noqa: BLE001 - stock JAX raises: the buffer was donated
        out["donated_read"] = type(e).__name__

    # Output structure: nested tuples of dicts, and out_shardings on one device.
    h = jax.jit(lambda a: (a, {"z": [a * 2, (a.T, a[0])]}))
    out["nested"] = h(tree["x"])
    leaves, treedef = jax.tree.flatten(out["nested"])
    out["treedef"] = str(treedef)
    return jax.tree.map(lambda v: np.asarray(v) if isinstance(v, jax.Array) else v, out)


def grad_vmap() -> dict:
    r = rng(3)
    w = jnp.asarray(r.standard_normal((4, 3)).astype(np.float32))
    xs = jnp.asarray(r.standard_normal((8, 4)).astype(np.float32))

    def loss(w, x):
        return jnp.sum(jnp.tanh(x @ w) ** 2)

    out = {
        "grad": jax.grad(loss)(w, xs[0]),
        "value_and_grad": jax.value_and_grad(loss, argnums=(0, 1))(w, xs[0]),
        "vmap": jax.vmap(loss, in_axes=(None, 0))(w, xs),
        "vmap_grad": jax.vmap(jax.grad(loss), in_axes=(None, 0))(w, xs),
        "jit_grad": jax.jit(jax.grad(lambda w: jnp.mean(jax.vmap(loss, (None, 0))(w, xs))))(w),
        "jacfwd": jax.jacfwd(lambda x: jnp.sin(x) * x.sum())(xs[1]),
        "jacrev": jax.jacrev(lambda x: jnp.sin(x) * x.sum())(xs[1]),
        "hessian": jax.hessian(lambda x: jnp.sum(x ** 3))(xs[2]),
        "vmap_axes": jax.vmap(lambda a, b: a * b, in_axes=(1, 0), out_axes=1)(w, xs[:3]),
        "jvp": jax.jvp(jnp.sin, (xs[0],), (jnp.ones(4),)),
        "vjp": jax.vjp(jnp.cos, xs[0])[1](jnp.ones(4)),
    }
    return jax.tree.map(np.asarray, out)


def control_flow() -> dict:
    r = rng(4)
    xs = jnp.asarray(r.standard_normal((10, 3)).astype(np.float32))

    def scan_fn(c, x):
        c = c * 0.9 + x
        return c, c.sum()

    @jax.jit
    def run(xs):
        carry, ys = lax.scan(scan_fn, jnp.zeros(3), xs)
        wl = lax.while_loop(lambda s: s[0] < 17, lambda s: (s[0] + 3, s[1] * 1.1), (0, xs[0]))
        fl = lax.fori_loop(0, 5, lambda i, v: v + i * v, xs[1])
        c1 = lax.cond(xs[0, 0] > 0, lambda v: v * 2, lambda v: v - 1, xs[2])
        c2 = lax.cond(xs[0, 0] <= 0, lambda v: v * 2, lambda v: v - 1, xs[2])
        sw = [lax.switch(i, [jnp.sin, jnp.cos, jnp.tanh], xs[3]) for i in range(3)]
        rev = lax.scan(scan_fn, jnp.ones(3), xs, reverse=True)
        return carry, ys, wl, fl, c1, c2, sw, rev

    out = {"jit": run(xs)}
    # Data-dependent predicate, dispatched outside jit too.
    out["eager_cond"] = lax.cond(jnp.sum(xs) > 0, lambda: jnp.ones(2), lambda: jnp.zeros(2))
    out["grad_scan"] = jax.grad(lambda x: lax.scan(scan_fn, jnp.zeros(3), x)[1].sum())(xs)
    out["assoc_scan"] = lax.associative_scan(jnp.add, xs[:, 0])
    return jax.tree.map(np.asarray, out)


def random_draws() -> dict:
    key = jax.random.key(42)
    k1, k2, k3 = jax.random.split(key, 3)
    old = jax.random.PRNGKey(7)
    out = {
        "key_data": jax.random.key_data(key),
        "split": jax.random.key_data(jax.random.split(k1, 4)),
        "fold_in": jax.random.key_data(jax.random.fold_in(k1, 3)),
        "normal": jax.random.normal(k1, (64, 3)),
        "uniform": jax.random.uniform(k2, (1000,), minval=-2, maxval=3),
        "randint": jax.random.randint(k3, (50,), 0, 1000),
        "bernoulli": jax.random.bernoulli(k1, 0.3, (100,)),
        "permutation": jax.random.permutation(k2, 20),
        "categorical": jax.random.categorical(k3, jnp.log(jnp.array([0.1, 0.6, 0.3])), shape=(40,)),
        "gamma": jax.random.gamma(k1, 2.5, (10,)),
        "truncated": jax.random.truncated_normal(k2, -1, 1, (10,)),
        "bits": jax.random.bits(k3, (16,), jnp.uint32),
        "raw_key": jax.random.normal(old, (5,)),
        "jit_normal": jax.jit(lambda k: jax.random.normal(k, (8,)))(k2),
        "vmap_keys": jax.vmap(lambda k: jax.random.uniform(k, (3,)))(jax.random.split(k3, 5)),
    }
    out = jax.tree.map(np.asarray, out)
    out["impl"] = str(jax.random.key_impl(key))
    return out


# ---- dtypes, scalars, zero-size ---------------------------------------------------------

def _sample(dt: np.dtype) -> np.ndarray:
    r = rng(5)
    if dt == np.bool_:
        return r.integers(0, 2, (5, 7)).astype(np.bool_)
    if dt.kind in "iu":
        info = np.iinfo(dt)
        lo, hi = max(int(info.min), -10_000), min(int(info.max), 10_000)
        a = r.integers(lo, hi + 1, (5, 7)).astype(dt)
        a.flat[0], a.flat[1] = info.min, info.max
        return a
    if dt.kind == "c":
        return (r.standard_normal((5, 7)) + 1j * r.standard_normal((5, 7))).astype(dt)
    a = (r.standard_normal((5, 7)) * 10).astype(dt)
    a.flat[0], a.flat[1], a.flat[2], a.flat[3] = np.inf, -np.inf, -0.0, np.nan
    return a


def dtypes(names: list[str]) -> dict:
    import ml_dtypes
    devs = jax.devices()
    out = {"x64": bool(jax.config.jax_enable_x64)}
    for name in names:
        dt = np.dtype(ml_dtypes.bfloat16) if name == "bfloat16" else np.dtype(name)
        a = _sample(dt)
        x = jnp.asarray(a)
        res = {"dtype": str(x.dtype), "roundtrip": np.asarray(x),
               "device_put": np.asarray(jax.device_put(a, devs[-1])),
               "moved": np.asarray(jax.device_put(x, devs[5])),
               "jit": np.asarray(jax.jit(lambda v: v * v + v)(x)),
               "sum": np.asarray(jnp.sum(x)),
               "max": np.asarray(jnp.max(x)),
               "cast_f32": np.asarray(x.astype(jnp.float32)) if dt.kind != "c"
               else np.asarray(jnp.real(x).astype(jnp.float32)),
               "from_int": np.asarray(jnp.arange(-3, 9).astype(dt)),
               "transpose": np.asarray(x.T[::2])}
        if dt.kind == "f":
            res["exp"] = np.asarray(jnp.exp(x[1:] / 10))
            res["matmul"] = np.asarray(jnp.nan_to_num(x) @ jnp.nan_to_num(x.T))
        out[name] = res
    return out


def scalars() -> dict:
    f = jax.jit(lambda a, b: a * b + 1)
    out = {
        "py": f(2.0, 3), "np": f(np.float32(2.5), np.int32(4)), "int": f(2, 5),
        "zero_d": jnp.asarray(3.5), "zero_d_op": jnp.asarray(3.5) * jnp.asarray(2),
        "reduce_to_0d": jnp.arange(10.0).sum(),
        "bool": jnp.asarray(True) & jnp.asarray(False),
    }
    out = {k: np.asarray(v) for k, v in out.items()}
    out["weak"] = [bool(f(2.0, 3).weak_type), bool(jnp.asarray(3.5).weak_type)]
    out["item_float"] = float(jnp.asarray(2.5) * 2)
    out["item_int"] = int(jnp.int32(7) + 1)
    out["item_bool"] = bool(jnp.asarray(3) > 2)
    out["item_method"] = jnp.arange(4)[2].item()
    out["index_scalar"] = np.asarray(jnp.arange(12).reshape(3, 4)[1, 2])
    out["device_put_scalar"] = np.asarray(jax.device_put(np.float32(1.25), jax.devices()[3]))
    out["complex"] = complex(jnp.asarray(1 + 2j, jnp.complex64) * 2)
    return out


def zero_size() -> dict:
    devs = jax.devices()
    z = jnp.zeros((0, 3), jnp.float32)
    out = {
        "zeros": z, "sum0": z.sum(axis=0), "sum_all": z.sum(), "max_initial": jnp.max(z, initial=-1.0),
        "concat": jnp.concatenate([z, jnp.ones((2, 3))]),
        "jit": jax.jit(lambda a: a * 2 + 1)(np.zeros((4, 0), np.float32)),
        "put": jax.device_put(np.zeros((0,), np.int32), devs[-1]),
        "put_moved": jax.device_put(jax.device_put(np.zeros((2, 0), np.int8), devs[0]), devs[6]),
        "matmul": jnp.zeros((3, 0)) @ jnp.zeros((0, 5)),
        "arange": jnp.arange(0), "reshape": z.reshape(3, 0, 1), "slice": jnp.arange(5)[3:3],
        "empty_bool": jnp.zeros((0,), bool), "cumsum": jnp.cumsum(z, axis=0),
    }
    res = {k: np.asarray(v) for k, v in out.items()}
    res["put_device"] = positions(out["put"])
    res["moved_device"] = positions(out["put_moved"])
    return res


# ---- Large arrays and placement ---------------------------------------------------------

def _pattern(nbytes: int) -> np.ndarray:
    n = nbytes // 4
    a = np.arange(n, dtype=np.uint32)
    a *= np.uint32(2654435761)  # a cheap, non-repeating pattern
    return a.view(np.float32).reshape(-1, 1024) if n % 1024 == 0 else a.view(np.float32)


def big_roundtrip(mib: int = 512) -> dict:
    a = _pattern(mib << 20)
    dev = jax.devices()[-1]
    t0 = time.monotonic()
    x = jax.device_put(a, dev)
    x.block_until_ready()
    t1 = time.monotonic()
    b = np.asarray(x)
    t2 = time.monotonic()
    equal = bool(a.shape == b.shape and a.dtype == b.dtype and
                 np.array_equal(a.view(np.uint32), b.view(np.uint32)))
    digest = hashlib.sha256(memoryview(b).cast("B")).hexdigest()
    del x, b
    return {"equal": equal, "nbytes": a.nbytes, "shape": a.shape, "sha256": digest,
            "up_s": t1 - t0, "down_s": t2 - t1}


def repeated_transfers() -> dict:
    """Arrays of 1 to 6 MiB up and back, one after the other, each with its
    own bytes: the proxy hands a released buffer to the next transfer that
    fits (cw_proxy_bytes.c), so a later array must never show an earlier
    one's bytes. Digests of what came back, and whether each matched."""
    dev = jax.devices()[0]
    out = {"equal": [], "sha256": []}
    for k, mib in enumerate((4, 2, 3, 6, 1, 4, 4)):
        a = _pattern(mib << 20)
        a = (a.view(np.uint32) ^ np.uint32(0x9E3779B9 * (k + 1) & 0xFFFFFFFF)).view(np.float32)
        b = np.asarray(jax.device_put(a, dev) + 0)  # through a program too
        c = np.asarray(jax.device_put(a, dev))
        out["equal"].append(bool(np.array_equal(a.view(np.uint32), c.view(np.uint32))))
        out["sha256"].append(hashlib.sha256(memoryview(b).cast("B")).hexdigest())
    return out


def device_put_chosen() -> dict:
    r = rng(6)
    a = r.standard_normal((16, 8)).astype(np.float32)
    f = jax.jit(lambda v: jnp.tanh(v) * 2 + v.sum(axis=0))
    out = {}
    for d in jax.devices():
        x = jax.device_put(a, d)
        y = f(x)
        z = jax.device_put(y, jax.devices()[(pos(d) + 3) % len(jax.devices())])
        out[pos(d)] = {"x_dev": positions(x), "y_dev": positions(y), "z_dev": positions(z),
                       "committed": bool(x.committed),
                       "y": np.asarray(y), "z": np.asarray(z)}
    # Default placement: uncommitted arrays go to the default device.
    u = jnp.asarray(a)
    out["default_dev"] = positions(u)
    out["default_committed"] = bool(u.committed)
    with jax.default_device(jax.devices()[5]):
        v = jnp.ones(3) * 2
        out["default_device_ctx"] = positions(v)
    return out


# ---- SPMD within one island ---------------------------------------------------------------

def sharding_island() -> dict:
    from jax import shard_map
    isl = islands()[0]
    mesh = Mesh(np.array(isl), ("x",))
    mesh2 = Mesh(np.array(isl).reshape(2, 2), ("a", "b"))
    r = rng(7)
    a = r.standard_normal((8, 12)).astype(np.float32)
    out = {}
    x = jax.device_put(a, NamedSharding(mesh, P("x")))
    out["put"] = sharding_desc(x)
    out["put_value"] = np.asarray(x)

    f = jax.jit(lambda v: jnp.sin(v) @ v.T, out_shardings=NamedSharding(mesh, P(None, "x")))
    y = f(x)
    out["out_shardings"] = sharding_desc(y)
    out["out_value"] = np.asarray(y)

    g = jax.jit(lambda v: v * 2 + 1)  # sharding propagates from the input
    z = g(x)
    out["propagated"] = sharding_desc(z)
    out["propagated_value"] = np.asarray(z)

    @jax.jit
    def h(v):
        w = jax.lax.with_sharding_constraint(v * 3, NamedSharding(mesh2, P("a", "b")))
        return w.sum(axis=0), w
    s, w = h(x)
    out["constraint"] = sharding_desc(w)
    out["constraint_value"] = np.asarray(w)
    out["constraint_sum"] = np.asarray(s)
    out["constraint_sum_sharding"] = sharding_desc(s)

    @jax.jit
    @functools.partial(shard_map, mesh=mesh, in_specs=P("x"), out_specs=(P(), P("x")))
    def sm(v):
        local = v.sum()
        total = jax.lax.psum(local, "x")
        idx = jax.lax.axis_index("x")
        return total, v * 0 + idx.astype(v.dtype)
    tot, ids = sm(x)
    out["shard_map_psum"] = np.asarray(tot)
    out["shard_map_ids"] = np.asarray(ids)
    out["shard_map_sharding"] = [sharding_desc(tot), sharding_desc(ids)]

    rep = jax.device_put(a, NamedSharding(mesh, P()))
    out["replicated"] = sharding_desc(rep)
    out["replicated_shards_equal"] = all(
        np.array_equal(np.asarray(s.data), a) for s in rep.addressable_shards)
    two = jax.device_put(a, NamedSharding(mesh2, P("b", "a")))
    out["mesh2"] = sharding_desc(two)
    out["mesh2_value"] = np.asarray(two)
    out["mesh2_matmul"] = np.asarray(jax.jit(lambda v: v @ v.T)(two))
    out["reshard"] = sharding_desc(jax.device_put(two, NamedSharding(mesh, P(None, "x"))))
    out["shard_values"] = [(pos(s.device), np.asarray(s.data)) for s in
                           sorted(y.addressable_shards, key=lambda s: pos(s.device))]
    return out



def export_roundtrip() -> dict:
    """jax.export: export (which reads the client's serialize_with_sdy to
    write the module) and call the exported program, on one device and
    sharded over an island. (Serializing it needs flatbuffers, which the
    project does not install.)"""
    from jax import export
    f = jax.jit(lambda x, y: jnp.tanh(x) @ y + 1)
    x = np.linspace(-2, 2, 24, dtype=np.float32).reshape(4, 6)
    y = np.ones((6, 3), np.float32)
    exp = export.export(f)(x, y)
    out = {"one": np.asarray(exp.call(x, y)), "in_avals": str(exp.in_avals),
           "bytecode": len(exp.mlir_module_serialized) > 0}
    mesh = Mesh(np.array(islands()[0]), ("d",))
    s = NamedSharding(mesh, P("d"))
    g = jax.jit(lambda v: v * 2 + 1, in_shardings=s, out_shardings=s)
    v = jax.device_put(np.arange(8, dtype=np.float32), s)
    w = export.export(g)(v).call(v)
    out["sharded"] = np.asarray(w)
    out["sharded_layout"] = sharding_desc(w)["layout"]
    return out


def _two_orders():
    """Two 2x2 meshes over island 0's devices in opposite orders, and two
    arrays on the first (float32 split on "a", int32 split on "b")."""
    isl = islands()[0]
    mesh1 = Mesh(np.array(isl).reshape(2, 2), ("a", "b"))
    mesh2 = Mesh(np.array(isl[::-1]).reshape(2, 2), ("c", "d"))
    a = np.arange(8 * 6, dtype=np.float32).reshape(8, 6)
    b = np.arange(8 * 4, dtype=np.int32).reshape(8, 4)
    return (mesh1, mesh2, jax.device_put(a, NamedSharding(mesh1, P("a"))),
            jax.device_put(b, NamedSharding(mesh1, P("b"))))


def reshard_device_order() -> dict:
    """device_put between meshes over the same devices in another order: JAX
    reorders the shards (IFRT RemapArrays, no bytes moved) and then reshards
    with a program."""
    mesh1, mesh2, x1, x2 = _two_orders()
    s2 = NamedSharding(mesh2, P("c", "d"))
    y1, y2 = jax.device_put((x1, x2), s2)
    out = {"y1": np.asarray(y1), "y2": np.asarray(y2), "y1_sharding": sharding_desc(y1),
           "y2_sharding": sharding_desc(y2), "x2_kept": not x2.is_deleted(),
           "x1_after": np.asarray(x1)}
    z = jax.device_put(x2, NamedSharding(mesh2, P("c")), donate=False)
    out["z"] = np.asarray(z)
    out["z_sharding"] = sharding_desc(z)
    return out


def reshard_donation(asked: bool = False) -> dict:
    """Donation through a reshard. device_put((x1, x2), s2, donate=(True,
    False)) onto the same devices in another order: JAX reorders x1's shards
    (IFRT RemapArrays, REUSE_INPUT) and donates the reordered array to a
    program. A jit with replicated in_shardings donating a single-device
    array: JAX copies it onto the island's devices and donates the array
    assembled from it and the copies. Both donated inputs share their
    buffers with what was donated, so both are deleted (IFRT's semantics: a
    donation deletes the buffers, and every array over them); x2, not
    donated, is kept. With `asked`, each donated input is then given to a
    program, which must refuse it (on the proxy front the server does: its
    shared buffers were donated), and is_deleted() of the donated inputs is
    left out (jaxlib's proxy client answers it from its own state)."""
    mesh1, mesh2, x1, x2 = _two_orders()
    y1, y2 = jax.device_put((x1, x2), NamedSharding(mesh2, P("c")), donate=(True, False))
    arr = jnp.arange(16, dtype=jnp.int32)  # uncommitted, on the first device
    z = jax.jit(lambda v: v * 2, in_shardings=NamedSharding(mesh1, P()), donate_argnums=0)(arr)
    out = {"y1": np.asarray(y1), "y2": np.asarray(y2), "z": np.asarray(z)}
    if asked:
        for name, v in (("x1", x1), ("arr", arr)):
            try:
                jax.jit(lambda t: t + 1)(v).block_until_ready()
                out[f"{name}_usable"] = True
            except Exception:  # noqa: BLE001 - stock JAX and the proxy word it differently
                out[f"{name}_usable"] = False
    else:
        out.update(x1_deleted=x1.is_deleted(), arr_deleted=arr.is_deleted())
    out.update(x2_deleted=x2.is_deleted(), x2=np.asarray(x2))
    return out


def no_outputs_island() -> dict:
    """Programs over an island's devices that return nothing (XLA gives the
    empty tuple one sharding of its own), then one that returns something."""
    from jax import shard_map
    from jax.extend.core import Primitive
    isl = islands()[0]
    mesh = Mesh(np.array(isl), ("x",))
    prim = Primitive("cw_no_results")  # compiled, though it computes nothing
    prim.multiple_results = True
    prim.def_impl(lambda: [])
    prim.def_abstract_eval(lambda: [])

    def body():
        prim.bind()

    nothing = shard_map(body, mesh=mesh, in_specs=(), out_specs=None, check_vma=False)
    out = {"eager": nothing(), "jit": jax.jit(nothing)()}
    x = jax.device_put(np.arange(8, dtype=np.float32), NamedSharding(mesh, P("x")))
    out["jit_sharded_arg"] = jax.jit(lambda v: None)(x)
    out["after"] = np.asarray(jax.jit(lambda v: v * 2)(x))
    return out


def compiled_text() -> dict:
    """What a compiled program says about itself: compiled.as_text() (XLA's
    HLO text of the optimized program, which the proxy prints itself), the
    output info and the input and output formats (layouts), for programs on
    one device and over an island (collectives, host memory, a while loop,
    LAPACK custom calls, donation, constants)."""
    isl = islands()[0]
    mesh = Mesh(np.array(isl), ("x",))
    x = np.arange(8, dtype=np.float32)
    xs = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8),
                        NamedSharding(mesh, P("x")))
    host = NamedSharding(mesh, P("x"), memory_kind="pinned_host")
    xh = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8), host)
    programs = {
        "one_device": jax.jit(lambda a: a * 2 + 1).lower(x),
        "constants": jax.jit(lambda a: a + jnp.array([[1., 2.], [3., 4.]]) @ a[:2].reshape(2, 1)
                             ).lower(x),
        "while": jax.jit(lambda a: lax.fori_loop(0, 10, lambda i, c: c * 1.5 + i, a)).lower(x),
        "cond": jax.jit(lambda p, a: lax.cond(p > 0, lambda: a + 1, lambda: a - 1)).lower(1.0, x),
        "lapack": jax.jit(lambda a: jnp.linalg.inv(a)).lower(np.eye(4, dtype=np.float32)),
        "donated": jax.jit(lambda a: a + 1, donate_argnums=0).lower(x),
        "all_reduce": jax.jit(lambda a: jnp.sum(a, axis=0)).lower(xs),
        "all_gather": jax.jit(lambda a: a, out_shardings=NamedSharding(mesh, P())).lower(xs),
        "pinned_host": jax.jit(
            lambda a: jax.device_put(a, host.with_memory_kind("device")) * 2,
            out_shardings=host).lower(xh),
        "tuple_out": jax.jit(lambda a: tuple(a + i for i in range(7))).lower(x),
    }
    def sharding(sh):  # devices by position, as everywhere here
        spec = str(sh.spec) if isinstance(sh, NamedSharding) else type(sh).__name__
        return (spec, sorted(pos(d) for d in sh.device_set), sh.memory_kind)

    def leaves(tree, f):
        return [f(v) for v in jax.tree.leaves(tree)]

    out = {}
    for name, lowered in programs.items():
        c = lowered.compile()
        # The source locations' numbering follows the order a lowering met
        # them, which differs between backends (the text says the same).
        text = c.as_text()
        out[name + "_frames"] = "\nStackFrames\n" in text
        text = re.sub(r"\n\nFileNames\n.*?\nStackFrames\n.*?\n\n", "\n\n", text, flags=re.S)
        out[name] = re.sub(r" stack_frame_id=\d+", "", text)
        out[name + "_out_info"] = leaves(c.out_info, lambda o: (
            o.shape, str(o.dtype), sharding(o.sharding), str(o.format.layout)))
        out[name + "_formats"] = [leaves(fs, lambda f: (str(f.layout), sharding(f.sharding)))
                                  for fs in (c.input_formats, c.output_formats)]
    return out


def array_layouts() -> dict:
    """Arrays in a layout other than row-major (jax.experimental.layout): put
    on a device in column-major order, made column-major by a program's
    out_layouts (on one device and sharded over an island), and taken in by
    one whose in_layouts ask for it. Their values read back as the numbers
    they hold, whatever order the device keeps them in."""
    from jax.experimental.layout import Format, Layout
    from jax.sharding import SingleDeviceSharding
    out = {}
    col = Layout(major_to_minor=(1, 0))
    x = np.arange(8 * 128, dtype=np.int32).reshape(8, 128)
    one = SingleDeviceSharding(jax.devices()[0])
    put = jax.device_put(x, Format(col, one))
    out["put"] = np.asarray(put)
    out["put_layout"] = put.format.layout.major_to_minor
    f = jax.jit(lambda a: a * 2 + 1, out_shardings=Format(col, one))
    y = f(x)
    out["out_layouts"] = np.asarray(y)
    out["out_layout"] = y.format.layout.major_to_minor
    g = jax.jit(lambda a: a.T @ a, in_shardings=Format(col, one))
    out["in_layouts"] = np.asarray(g(put))
    out["then_default"] = np.asarray(jax.jit(lambda a: a[:, :4] - 1)(y))
    mesh = Mesh(np.array(islands()[0]), ("x",))
    sh = NamedSharding(mesh, P("x"))
    z = jax.jit(lambda a: a + 3, out_shardings=Format(col, sh))(
        jax.device_put(np.arange(16 * 32, dtype=np.float32).reshape(16, 32), sh))
    out["sharded"] = np.asarray(z)
    out["sharded_shards"] = [np.asarray(s.data) for s in z.addressable_shards]
    three = Layout(major_to_minor=(2, 0, 1))
    w = jax.jit(lambda a: a * 1.5, out_shardings=Format(three, one))(
        np.arange(4 * 5 * 6, dtype=np.float32).reshape(4, 5, 6))
    out["rank3"] = np.asarray(w)
    out["rank3_layout"] = w.format.layout.major_to_minor
    return out

def compiled_cost() -> dict:
    """compiled.cost_analysis() of programs on one device and over an island,
    every key (XLA's cost analysis in the JAX process on stock and on the
    plugin front; priced by causeway-proxy from the optimized program
    through the proxy, src/protocol/cw_hlo_cost.c)."""
    isl = islands()[0]
    mesh = Mesh(np.array(isl), ("x",))
    xs = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8),
                        NamedSharding(mesh, P("x")))
    m = np.ones((32, 32), np.float32)
    img, ker = np.ones((2, 3, 16, 16), np.float32), np.ones((4, 3, 3, 3), np.float32)
    programs = {
        "matmul": jax.jit(lambda a, b: a @ b).lower(m[:8, :16], m[:16, :4]),
        "mlp": jax.jit(lambda w, x: jnp.tanh(x @ w).mean()).lower(m, m[:16]),
        "mlp_grad": jax.jit(jax.grad(lambda w, x: jnp.mean(jnp.tanh(x @ w) ** 2))).lower(m, m[:8]),
        "conv": jax.jit(lambda i, k: lax.conv_general_dilated(i, k, (1, 1), "SAME")).lower(img, ker),
        "softmax": jax.jit(lambda a: jax.nn.softmax(a, axis=-1)).lower(m),
        "while": jax.jit(lambda a: lax.fori_loop(0, 10, lambda i, c: c * 1.5 + i, a)).lower(m[0]),
        "cond": jax.jit(lambda p, a: lax.cond(p > 0, lambda: a + 1, lambda: jnp.exp(a))
                        ).lower(1.0, m[0]),
        "sort_scatter": jax.jit(lambda a, i: jnp.sort(a.at[i].add(1.0), axis=1)
                                ).lower(m, np.array([3, 1, 4], np.int32)),
        "rng": jax.jit(lambda k: jax.random.normal(k, (64,))).lower(jax.random.key(0)),
        "island_sum": jax.jit(lambda a: jnp.sum(a, axis=0)).lower(xs),
    }
    return {name: lowered.compile().cost_analysis() for name, lowered in programs.items()}


def compiled_memory() -> dict:
    """compiled.memory_analysis(): XLA's buffer sizes of the compiled program
    (on causeway the worker's plugin's, sent with the executable), for one
    device, a donation, an island, and a program compiled again (a cache hit
    at the controller when run second)."""
    isl = islands()[0]
    mesh = Mesh(np.array(isl), ("x",))
    xs = jax.device_put(np.ones((16, 8), np.float32), NamedSharding(mesh, P("x")))
    m = np.ones((32, 32), np.float32)
    programs = {
        "mlp": jax.jit(lambda w, x: jnp.tanh(x @ w).mean(0)).lower(m, m[:16]),
        "temp": jax.jit(lambda a: jnp.sort(a @ a.T + jnp.exp(a), axis=0)[::2]).lower(m),
        "donate": jax.jit(lambda a: a * 3, donate_argnums=0).lower(m),
        "island": jax.jit(lambda a: jnp.sum(a * 2, axis=1)).lower(xs),
        "again": jax.jit(lambda w, x: jnp.tanh(x @ w).mean(0)).lower(m, m[:16]),
    }
    out = {}
    for name, lowered in programs.items():
        ma = lowered.compile().memory_analysis()
        out[name] = None if ma is None else {
            k: getattr(ma, k) for k in ("argument_size_in_bytes", "output_size_in_bytes",
                                        "alias_size_in_bytes", "temp_size_in_bytes",
                                        "host_argument_size_in_bytes",
                                        "host_output_size_in_bytes")}
    return out


def pmap_island() -> dict:
    """jax.pmap over one island's devices: collectives, an unmapped output,
    a second call on its own output (jit and shard_map underneath)."""
    isl = islands()[0]
    n = len(isl)
    x = np.arange(n * 6, dtype=np.float32).reshape(n, 6)
    f = jax.pmap(lambda v: (v * 2 + jax.lax.psum(v, "i"), jax.lax.pmax(v.sum(), "i")),
                 axis_name="i", devices=isl)
    y, m = f(x)
    out = {"y": np.asarray(y), "max": np.asarray(m), "y_devices": positions(y)}
    g = jax.pmap(lambda v: jax.lax.pmean(v, "i") - v, axis_name="i", devices=isl)
    out["again"] = np.asarray(g(y))
    h = jax.pmap(lambda v, w: v @ w, in_axes=(0, None), out_axes=0, devices=isl)
    out["broadcast_arg"] = np.asarray(h(x.reshape(n, 2, 3), np.ones((3, 2), np.float32)))
    return out


def dp_training_pipelined(steps: int = 200) -> dict:
    """Data-parallel SGD over one island's 4 devices, every step dispatched
    without blocking: far more 4-device launches with an all-reduce in flight
    than XLA's CPU client allows per device (32). Regression: the worker let
    them all through and XLA's client thread pool (max(cores, 4) threads)
    deadlocked in the all-reduce rendezvous, then aborted the worker."""
    isl = islands()[0]
    mesh = Mesh(np.array(isl), ("x",))
    batch, rep = NamedSharding(mesh, P("x")), NamedSharding(mesh, P())
    r = rng(11)
    d_in, hidden = 16, 32
    params = {"w1": (r.standard_normal((d_in, hidden)) * 0.1).astype(np.float32),
              "b1": np.zeros(hidden, np.float32),
              "w2": (r.standard_normal((hidden, 1)) * 0.1).astype(np.float32)}
    xs = r.standard_normal((64, d_in)).astype(np.float32)
    ys = (xs.sum(axis=1, keepdims=True) > 0).astype(np.float32)
    params = jax.device_put(params, rep)
    xs, ys = jax.device_put(xs, batch), jax.device_put(ys, batch)

    def loss(p, x, y):
        h = jnp.tanh(x @ p["w1"] + p["b1"])
        return jnp.mean((h @ p["w2"] - y) ** 2)

    @jax.jit
    def step(p, x, y):
        l, g = jax.value_and_grad(loss)(p, x, y)
        return jax.tree.map(lambda a, b: a - 0.1 * b, p, g), l

    losses = []
    for _ in range(steps):
        params, l = step(params, xs, ys)
        losses.append(l)
    jax.block_until_ready((params, losses))
    return {"losses": np.asarray([np.asarray(l) for l in losses]),
            "params": {k: np.asarray(v) for k, v in params.items()},
            "params_sharding": sharding_desc(params["w1"])}

# ---- Across islands ---------------------------------------------------------------------

def xfer_prepare(nbytes: int) -> dict:
    i0, i1 = islands()[:2]
    a = _pattern(nbytes)
    x = jax.device_put(a, i0[0])
    x.block_until_ready()
    STATE["xfer"] = (a, x)
    return {"src_worker": worker_of(i0[0]), "dst_worker": worker_of(i1[0]),
            "src": pos(i0[0]), "dst": pos(i1[0]), "nbytes": a.nbytes}


def xfer_move() -> dict:
    i0, i1 = islands()[:2]
    a, x = STATE["xfer"]
    y = jax.device_put(x, i1[0])
    y.block_until_ready()
    STATE["xfer"] = (a, x, y)
    return {"y_dev": positions(y)}


def xfer_check() -> dict:
    a, x, y = STATE.pop("xfer")
    b = np.asarray(y)
    return {"equal": bool(np.array_equal(a.view(np.uint32), b.view(np.uint32))),
            "y_dev": positions(y), "x_dev": positions(x)}


def cross_island_put() -> dict:
    i0, i1 = islands()[:2]
    m0, m1 = Mesh(np.array(i0), ("d",)), Mesh(np.array(i1), ("d",))
    r = rng(8)
    a = r.standard_normal((16, 4)).astype(np.float32)
    out = {}
    x = jax.device_put(a, i0[1])
    y = jax.device_put(x, i1[2])
    out["single"] = {"x": positions(x), "y": positions(y), "value": np.asarray(y),
                     "y_island": island_of(next(iter(y.devices())))}
    xs = jax.device_put(a, NamedSharding(m0, P("d")))
    ys = jax.device_put(xs, NamedSharding(m1, P("d")))
    out["sharded"] = {"x": sharding_desc(xs), "y": sharding_desc(ys), "value": np.asarray(ys)}
    yr = jax.device_put(xs, NamedSharding(m1, P(None, "d")))  # reshard while crossing
    out["resharded"] = {"y": sharding_desc(yr), "value": np.asarray(yr)}
    back = jax.device_put(jax.jit(lambda v: v * 10)(ys), NamedSharding(m0, P("d")))
    out["roundtrip"] = {"x": sharding_desc(back), "value": np.asarray(back)}
    return out


def mpmd_pipeline(microbatches: int = 4) -> dict:
    i0, i1 = islands()[:2]
    m0, m1 = Mesh(np.array(i0), ("d",)), Mesh(np.array(i1), ("d",))
    r = rng(9)
    w1 = jax.device_put(r.standard_normal((8, 16)).astype(np.float32), NamedSharding(m0, P()))
    w2 = jax.device_put(r.standard_normal((16, 4)).astype(np.float32), NamedSharding(m1, P()))
    xs = r.standard_normal((microbatches, 32, 8)).astype(np.float32)
    stage1 = jax.jit(lambda w, x: jnp.tanh(x @ w))
    stage2 = jax.jit(lambda w, h: jax.nn.log_softmax(h @ w))
    outs, where = [], []
    for mb in range(microbatches):  # dispatched asynchronously: the stages overlap
        x = jax.device_put(xs[mb], NamedSharding(m0, P("d")))
        h = stage1(w1, x)
        h1 = jax.device_put(h, NamedSharding(m1, P("d")))
        y = stage2(w2, h1)
        outs.append(y)
        where.append({"h": sorted({island_of(d) for d in h.devices()}),
                      "y": sorted({island_of(d) for d in y.devices()})})
    return {"outs": [np.asarray(y) for y in outs], "where": where,
            "y_sharding": sharding_desc(outs[0])}


def cross_island_jit() -> dict:
    """A jit whose devices span both islands (a mesh over every device)."""
    i0, i1 = islands()[:2]
    mesh = Mesh(np.array(i0 + i1), ("d",))
    a = np.arange(32, dtype=np.float32)
    out = {}
    try:
        x = jax.device_put(a, NamedSharding(mesh, P("d")))
        out["put_ok"] = True
    except Exception as e:  # noqa: BLE001
        out["put_ok"] = False
        out["put_error"] = err_text(e)
        x = a
    try:
        y = jax.jit(lambda v: v * 2 + 1, out_shardings=NamedSharding(mesh, P("d")))(x)
        out["jit"] = {"ok": True, "value": np.asarray(y)}
    except Exception as e:  # noqa: BLE001
        out["jit"] = {"ok": False, "error": err_text(e)}
    return out


# ---- Training ---------------------------------------------------------------------------------

def _mlp_params(key, sizes):
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        key, k1 = jax.random.split(key)
        params.append({"w": jax.random.normal(k1, (n_in, n_out)) * (1.0 / np.sqrt(n_in)),
                       "b": jnp.zeros((n_out,))})
    return params


def _mlp(params, x):
    for layer in params[:-1]:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x @ params[-1]["w"] + params[-1]["b"]


def train_mlp(steps: int = 50) -> dict:
    mesh = Mesh(np.array(islands()[0]), ("data",))
    data_sh, rep = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
    r = rng(10)
    xs = r.standard_normal((4, 64, 16)).astype(np.float32)
    true_w = r.standard_normal((16, 1)).astype(np.float32)
    ys = np.sin(xs @ true_w).astype(np.float32)
    params = jax.device_put(_mlp_params(jax.random.key(0), [16, 32, 32, 1]), rep)
    batches = [(jax.device_put(xs[i], data_sh), jax.device_put(ys[i], data_sh)) for i in range(4)]

    @functools.partial(jax.jit, donate_argnums=0)
    def step(params, x, y):
        loss, g = jax.value_and_grad(lambda p: jnp.mean((_mlp(p, x) - y) ** 2))(params)
        return jax.tree.map(lambda p, gp: p - 0.05 * gp, params, g), loss

    losses = []
    for i in range(steps):
        params, loss = step(params, *batches[i % 4])
        losses.append(loss)
    return {"losses": np.stack([np.asarray(l) for l in losses]),
            "params": jax.tree.map(np.asarray, params),
            "param_sharding": sharding_desc(params[0]["w"])}


# ---- Things a worker cannot do for the client ---------------------------------------------------

def health() -> dict:
    """Computes on every device and on each island's mesh."""
    f = jax.jit(lambda v: v * v + 1)
    per_dev = [np.asarray(f(jax.device_put(np.arange(16, dtype=np.float32) + pos(d), d)))
               for d in jax.devices()]
    meshes = []
    for isl in islands():
        m = Mesh(np.array(isl), ("d",))
        x = jax.device_put(np.arange(32, dtype=np.float32), NamedSharding(m, P("d")))
        meshes.append(np.asarray(jax.jit(lambda v: jnp.cumsum(v) * 2)(x)))
    return {"per_device": per_dev, "meshes": meshes}


def debug_print() -> dict:
    @jax.jit
    def f(x):
        jax.debug.print("cw-debug-print sum={s}", s=x.sum())
        return x * 2
    try:
        y = np.asarray(f(jnp.arange(4.0)))
        jax.effects_barrier()
        return {"ok": True, "value": y}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": err_text(e)}


def pure_callback() -> dict:
    def host_fn(v):
        return np.sin(np.asarray(v)) * 3

    @jax.jit
    def f(x):
        y = jax.pure_callback(host_fn, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return y + 1
    try:
        return {"ok": True, "value": np.asarray(f(jnp.arange(5.0, dtype=jnp.float32)))}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": err_text(e)}


def dlpack() -> dict:
    """DLPack both ways. Export (np.from_dlpack) is zero-copy on stock CPU JAX;
    on causeway the bytes are in a worker and the plugin reads them into a
    host copy held while the export lives. Import copies on both (stock when
    the memory is not aligned for a view). An export keeps its array from
    being donated, and outlives a delete."""
    out = {}
    x = jax.jit(lambda v: v * 2)(jnp.arange(6.0, dtype=jnp.float32))
    a = np.from_dlpack(x)
    out["export"] = np.array(a)
    out["export_writeable"] = bool(a.flags.writeable)
    out["export_again"] = np.array(np.from_dlpack(x))  # a second reference, same bytes
    for name in ["int8", "uint16", "int32", "float64", "bool", "complex64"]:
        v = jnp.arange(12).reshape(3, 4).astype(name)
        out[f"export_{name}"] = np.array(np.from_dlpack(jax.jit(lambda t: t[::-1])(v)))
    out["export_empty"] = np.array(np.from_dlpack(jnp.zeros((0, 3), jnp.float32)))
    out["export_scalar"] = np.array(np.from_dlpack(jnp.float32(2.5) * 2))
    big = jnp.arange(1 << 20, dtype=jnp.float32) * 3  # 4 MiB: the same-host path
    out["export_big_sum"] = float(np.from_dlpack(big).astype(np.float64).sum())
    h = np.arange(10, dtype=np.int32) * 7
    y = jax.dlpack.from_dlpack(h)
    out["import"] = np.asarray(jax.jit(lambda t: t + 1)(y))
    out["roundtrip"] = np.asarray(jnp.asarray(np.from_dlpack(jnp.arange(5.0) ** 2)) + 1)
    try:
        jax.dlpack.from_dlpack(np.arange(3.0)[1:], copy=False)
        out["import_no_copy_refused"] = False
    except ValueError:
        out["import_no_copy_refused"] = True
    f = jax.jit(lambda t: t + 1, donate_argnums=0)
    w = jnp.arange(4.0)
    m = np.from_dlpack(w)
    out["donated_result"] = np.asarray(f(w))
    out["exported_not_donated"] = not w.is_deleted()
    out["exported_after_donate"] = np.array(m) + np.asarray(w)
    del m
    w3 = f(w)  # the export is gone: this one donates
    out["donated_after_release"] = [np.asarray(w3), w.is_deleted()]
    q = jnp.arange(3.0) * 3
    mq = np.from_dlpack(q)
    q.delete()
    gc.collect()
    out["export_outlives_delete"] = np.array(mq)
    q4 = jnp.ones(4, jnp.int4) * 2
    try:
        np.from_dlpack(q4)
        out["int4_refused"] = False
    except Exception:  # noqa: BLE001 - stock and causeway refuse it at different steps
        out["int4_refused"] = True
    # A refused export holds nothing: the array is donated as any other.
    jax.jit(lambda t: t + 1, donate_argnums=0)(q4)
    out["int4_donated_after_refusal"] = q4.is_deleted()
    return out


def linalg(op: str) -> dict:
    """One LAPACK-backed jnp.linalg call (getrf, potrf or syevd on CPU)."""
    r = rng(11)
    a = r.standard_normal((6, 6)).astype(np.float32)
    spd = (a @ a.T + 6 * np.eye(6)).astype(np.float32)
    b = r.standard_normal((6, 2)).astype(np.float32)
    fn = {"solve": lambda: jnp.linalg.solve(a, b),
          "cholesky": lambda: jnp.linalg.cholesky(spd),
          "eigh": lambda: jnp.linalg.eigh(spd)[0]}[op]
    try:
        return {"ok": True, "value": np.asarray(fn())}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": err_text(e)}


def xla_rejects() -> dict:
    """A program XLA's compiler refuses: a custom call nobody registered."""
    try:
        y = jax.ffi.ffi_call("cw_no_such_target", jax.ShapeDtypeStruct((3,), jnp.float32))(
            jnp.ones(3, jnp.float32))
        return {"ok": True, "value": np.asarray(y)}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": err_text(e), "type": type(e).__name__}


# ---- Custom calls on workers (test_ffi.py) ---------------------------------------------

def _linalg_inputs(dtype: str, n: int = 5):
    r = rng(23)
    dt = np.dtype(dtype)
    def draw(*shape):
        x = r.standard_normal(shape)
        if dt.kind == "c":
            x = x + 1j * r.standard_normal(shape)
        return x.astype(dt)
    a = draw(n, n)
    herm = a @ a.conj().T + n * np.eye(n, dtype=dt)
    return a, herm.astype(dt), draw(n, 2), draw(3, n, n)


def linalg_suite(dtype: str = "float32") -> dict:
    """LAPACK-backed jnp.linalg, jax.scipy.linalg and lax.linalg calls on
    fixed inputs: each result, or the error it raised."""
    import jax.scipy.linalg as jsl
    a, spd, b, batch = _linalg_inputs(dtype)
    real = np.dtype(dtype).kind == "f"
    tri = np.triu(a) + len(a) * np.eye(len(a), dtype=a.dtype)
    calls = {
        "solve": lambda: jnp.linalg.solve(a, b),
        "cholesky": lambda: jnp.linalg.cholesky(spd),
        "eigh": lambda: jnp.linalg.eigh(spd),
        "eigvalsh": lambda: jnp.linalg.eigvalsh(spd),
        "svd": lambda: jnp.linalg.svd(a),
        "svdvals": lambda: jnp.linalg.svd(a, compute_uv=False),
        "qr": lambda: jnp.linalg.qr(a),
        "det": lambda: jnp.linalg.det(a),
        "slogdet": lambda: jnp.linalg.slogdet(a),
        "inv": lambda: jnp.linalg.inv(a),
        "pinv": lambda: jnp.linalg.pinv(a),
        "lstsq": lambda: jnp.linalg.lstsq(a, b)[0],
        "matrix_rank": lambda: jnp.linalg.matrix_rank(a),
        "norm2": lambda: jnp.linalg.norm(a, ord=2),
        "eig": lambda: jnp.linalg.eigvals(a),
        "batched_solve": lambda: jnp.linalg.solve(batch, batch[..., :1]),
        "vmap_cholesky": lambda: jax.vmap(jnp.linalg.cholesky)(
            np.stack([spd, 2 * spd]).astype(spd.dtype)),
        "grad_det": lambda: jax.grad(lambda m: jnp.linalg.det(m).real)(a),
        "scipy_lu": lambda: jsl.lu(a),
        "scipy_lu_solve": lambda: jsl.lu_solve(jsl.lu_factor(a), b),
        "scipy_cho_solve": lambda: jsl.cho_solve(jsl.cho_factor(spd), b),
        "scipy_solve_triangular": lambda: jsl.solve_triangular(tri, b),
        "scipy_qr": lambda: jsl.qr(a, pivoting=True),
        "scipy_schur": lambda: jsl.schur(a),
        "scipy_hessenberg": lambda: jsl.hessenberg(a),
        "scipy_expm": lambda: jsl.expm(a / 4),
        "scipy_eigh": lambda: jsl.eigh(spd),
        "scipy_svd": lambda: jsl.svd(a),
        "scipy_inv": lambda: jsl.inv(a),
        "scipy_det": lambda: jsl.det(a),
        "scipy_polar": lambda: jsl.polar(a)[0],
        "tridiagonal_solve": lambda: jax.lax.linalg.tridiagonal_solve(
            np.concatenate([[0], np.diag(a, -1)]).astype(a.dtype),
            (np.diag(a) + 4).astype(a.dtype),
            np.concatenate([np.diag(a, 1), [0]]).astype(a.dtype), b),
    }
    if real:
        calls["scipy_sqrtm"] = lambda: jsl.sqrtm(spd)
    out = {}
    for name, fn in calls.items():
        try:
            out[name] = {"ok": True, "value": jax.tree.map(np.asarray, fn())}
        except Exception as e:  # noqa: BLE001
            out[name] = {"ok": False, "error": err_text(e)}
    return out


def linalg_sharded() -> dict:
    """A batch of solves sharded over one island's devices, under jit."""
    isl = islands()[0]
    mesh = Mesh(np.array(isl), ("x",))
    a, _, _, _ = _linalg_inputs("float32")
    batch = np.stack([a + i * np.eye(len(a), dtype=a.dtype) for i in range(len(isl) * 2)])
    x = jax.device_put(batch, NamedSharding(mesh, P("x")))
    f = jax.jit(lambda m: jnp.linalg.inv(m) @ m[..., :1])
    y = f(x)
    return {"value": np.asarray(y), "sharding": sharding_desc(y)}


def linalg_each_island() -> dict:
    """One program (a solve) on every island in turn: the first compiles it,
    the others load the executable the controller ships them."""
    a, _, b, _ = _linalg_inputs("float32")
    f = jax.jit(jnp.linalg.solve)
    out = []
    for isl in islands():
        y = f(jax.device_put(a, isl[0]), jax.device_put(b, isl[0]))
        out.append({"value": np.asarray(y), "device": positions(y)})
    return {"islands": out}


def _ffi_library():
    import ctypes
    return ctypes.CDLL(os.environ["CW_TEST_FFI_LIB"])


def ffi_register() -> dict:
    """What a user's program does in process for its own kernels (stock JAX
    needs it; on causeway the workers have them from CAUSEWAY_FFI_LIBRARIES)."""
    lib = _ffi_library()
    for name in ("cw_test_add_one",):
        jax.ffi.register_ffi_target(name, jax.ffi.pycapsule(getattr(lib, name)), platform="cpu")
    return {"ok": True}


def ffi_call(target: str = "cw_test_add_one", dtype: str = "float32") -> dict:
    """A user's jax.ffi kernel: under jit, vmap, and on one island's devices."""
    x = np.arange(12, dtype=dtype).reshape(3, 4)
    def call(v):
        return jax.ffi.ffi_call(target, jax.ShapeDtypeStruct(v.shape, v.dtype),
                                vmap_method="broadcast_all")(v)
    out = {}
    try:
        out["eager"] = np.asarray(call(x))
        out["jit"] = np.asarray(jax.jit(lambda v: call(v) * 2)(x))
        out["vmap"] = np.asarray(jax.vmap(call)(x))
        isl = islands()[0]
        mesh = Mesh(np.array(isl), ("x",))
        xs = jax.device_put(np.arange(8 * len(isl), dtype=dtype).reshape(len(isl), 8),
                            NamedSharding(mesh, P("x")))
        from jax import shard_map
        sm = jax.jit(shard_map(call, mesh=mesh, in_specs=P("x"), out_specs=P("x")))
        y = sm(xs)
        out["shard_map"] = np.asarray(y)
        out["shard_map_sharding"] = sharding_desc(y)
        return {"ok": True, "value": out}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": err_text(e)}


# ---- Failure scenarios (hand-started clusters) ------------------------------------------------

def by_worker() -> dict:
    out: dict = {}
    for d in jax.devices():
        out.setdefault(worker_of(d), []).append(d)
    return out


def kill_prepare(victim_index: int = 1) -> dict:
    ws = by_worker()
    names = sorted(ws)
    keep, victim = names[1 - victim_index], names[victim_index]
    a = np.arange(4096, dtype=np.float32)
    a_keep = jax.device_put(a, ws[keep][0])
    a_victim = jax.device_put(a, ws[victim][0])
    a_keep.block_until_ready()
    a_victim.block_until_ready()
    m = jax.device_put(np.eye(512, dtype=np.float32) * 0.5, ws[victim][1])

    @jax.jit
    def slow(m):  # seconds of work on the victim, still running when it dies
        return lax.fori_loop(0, 4000, lambda i, v: jnp.tanh(v @ v + 1.0), m)
    t = time.monotonic()
    pending = slow(m)
    dispatch = time.monotonic() - t
    STATE["kill"] = {"a": a, "keep": a_keep, "victim": a_victim, "pending": pending,
                     "keep_dev": ws[keep][1], "victim_dev": ws[victim][2]}
    return {"keep": keep, "victim": victim, "dispatch_s": dispatch}


def _timed(fn):
    t = time.monotonic()
    try:
        v = fn()
        return {"ok": True, "value": v, "elapsed": time.monotonic() - t}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": err_text(e), "elapsed": time.monotonic() - t}


def kill_after() -> dict:
    s = STATE["kill"]
    out = {
        "victim_read": _timed(lambda: np.asarray(s["victim"])),
        "pending_read": _timed(lambda: np.asarray(s["pending"])),
        "keep_read": _timed(lambda: np.asarray(s["keep"])),
        "keep_compute": _timed(lambda: np.asarray(
            jax.jit(lambda v: v + 1)(jax.device_put(s["a"], s["keep_dev"])))),
        "victim_put": _timed(lambda: np.asarray(jax.device_put(s["a"], s["victim_dev"]))),
        "victim_compute": _timed(lambda: np.asarray(jax.jit(lambda v: v + 1)(s["victim"]))),
        "keep_after": _timed(lambda: np.asarray(s["keep"]) * 2),
    }
    out["expected_keep"] = s["a"]
    return out


def client_hold(mib: int = 4) -> dict:
    """Leaves arrays and executables on every device of every worker."""
    held = []
    a = _pattern(mib << 20)
    f = jax.jit(lambda v: v * 2)
    for d in jax.devices():
        x = jax.device_put(a, d)
        held.append(x)
        held.append(f(x))
    for x in held:
        x.block_until_ready()
    STATE["held"] = held
    return {"arrays": len(held), "bytes": sum(x.nbytes for x in held)}
