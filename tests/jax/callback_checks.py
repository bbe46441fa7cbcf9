"""Host callbacks (jax.debug.print, jax.debug.callback, jax.pure_callback,
io_callback): checks run unchanged on stock CPU JAX and on causeway
(test_callbacks.py; loaded through CW_RUNNER_CHECKS). On causeway the
callables run in this process, the client, called by the workers."""
from __future__ import annotations

import functools
import threading
import time

import numpy as np

import jax
import jax.numpy as jnp
from jax import lax
from jax.experimental import io_callback
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import checks


def _err(e: BaseException) -> str:
    return f"{type(e).__name__}: {e}"


def cb_debug_print() -> dict:
    @jax.jit
    def f(x):
        jax.debug.print("cw-cb-print sum={s} first={f}", s=x.sum(), f=x[0])
        return x * 2
    y = np.asarray(f(jnp.arange(4.0)))
    jax.effects_barrier()
    return {"value": y}


def cb_debug_callback() -> dict:
    seen = []

    @jax.jit
    def f(x):
        jax.debug.callback(lambda v, w: seen.append((np.asarray(v).copy(), int(w))), x * 3,
                           x.shape[0])
        return x + 1
    y = [np.asarray(f(jnp.arange(6, dtype=jnp.int32) + i)) for i in range(3)]
    jax.effects_barrier()
    return {"value": y, "seen": [s[0] for s in seen], "ints": [s[1] for s in seen]}


def cb_pure_jit() -> dict:
    def host(a, b, c):
        return (np.sin(a) * 3).astype(np.float32), (b * 2 + 1).astype(np.int32), ~c

    @jax.jit
    def f(a, b, c):
        out = jax.ShapeDtypeStruct(a.shape, jnp.float32), \
            jax.ShapeDtypeStruct(b.shape, jnp.int32), jax.ShapeDtypeStruct(c.shape, jnp.bool_)
        x, y, z = jax.pure_callback(host, out, a, b, c)
        return x + 1, y * 2, z
    a = np.linspace(0, 1, 12, dtype=np.float32).reshape(3, 4)
    b = np.arange(5, dtype=np.int32)
    c = np.array([True, False, True])
    return {"value": [np.asarray(v) for v in f(a, b, c)]}


def cb_pure_subbyte() -> dict:
    """Sub-byte operands and results (int4, uint4, int2, uint2, float4_e2m1fn),
    odd element counts included: the device packs them, the callback sees one
    byte per element; what it saw and what it returned, as stock."""
    import ml_dtypes
    names = ["int4", "uint4", "int2", "uint2", "float4_e2m1fn"]
    out = {}
    for name in names:
        dt = np.dtype(getattr(ml_dtypes, name))
        lo, hi = (0, 3) if name.startswith("u") else (-2, 1)
        x = np.array([lo, hi, 1, 0, lo, 1, hi][: 7 if "2" in name else 5], dtype=dt)
        seen = []

        def host(v):
            seen.append((str(v.dtype), v.astype(np.float32).tolist()))
            return v[::-1].copy(), np.full((3,), v[0], dtype=v.dtype)

        f = jax.jit(lambda v: jax.pure_callback(
            host, (jax.ShapeDtypeStruct(v.shape, v.dtype),
                   jax.ShapeDtypeStruct((3,), v.dtype)), v))
        r, full = f(x)
        out[name] = {"seen": seen, "reversed": np.asarray(r).astype(np.float32),
                     "full": np.asarray(full).astype(np.float32)}
    return out


def cb_dce_sink() -> dict:
    """lax.dce_sink keeps a value XLA would drop (jaxlib's no-op custom call,
    which workers must know too)."""
    @jax.jit
    def f(x):
        y = jnp.sin(x) * 2
        jax.lax.dce_sink(y, prevent_mlir_dce=True)  # emits the custom call
        return x + 1
    return {"value": np.asarray(f(jnp.arange(4.0, dtype=jnp.float32)))}


def cb_pure_scalar_and_empty() -> dict:
    @jax.jit
    def f(x):
        s = jax.pure_callback(lambda v: np.float32(v.sum()), jax.ShapeDtypeStruct((), jnp.float32),
                              x)
        e = jax.pure_callback(lambda v: np.zeros((0, 3), np.float32),
                              jax.ShapeDtypeStruct((0, 3), jnp.float32), x)
        return s, e
    s, e = f(jnp.arange(10.0, dtype=jnp.float32))
    return {"value": [np.asarray(s), np.asarray(e)]}


def cb_pure_vmap(method: str) -> dict:
    calls = []

    def host(v):
        calls.append(np.shape(v))
        return (np.asarray(v) ** 2).astype(np.float32)

    def one(x):
        return jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x,
                                 vmap_method=method)
    y = jax.jit(jax.vmap(one))(jnp.arange(12.0, dtype=jnp.float32).reshape(4, 3))
    return {"value": np.asarray(y), "calls": calls}


def cb_scan_while() -> dict:
    def host(c, x):
        return (np.asarray(c) * 0.5 + np.asarray(x)).astype(np.float32)

    def step(c, x):
        c = jax.pure_callback(host, jax.ShapeDtypeStruct(c.shape, c.dtype), c, x)
        return c, c.sum()

    @jax.jit
    def scan(xs):
        return lax.scan(step, jnp.zeros(3, jnp.float32), xs)

    @jax.jit
    def loop(n):
        def cond(s):
            return s[0] < n

        def body(s):
            i, v = s
            v = jax.pure_callback(lambda a: (np.asarray(a) + 1.5).astype(np.float32),
                                  jax.ShapeDtypeStruct((), jnp.float32), v)
            return i + 1, v
        return lax.while_loop(cond, body, (0, jnp.float32(0)))
    c, ys = scan(jnp.arange(15.0, dtype=jnp.float32).reshape(5, 3))
    i, v = loop(7)
    return {"value": [np.asarray(c), np.asarray(ys), np.asarray(i), np.asarray(v)]}


def cb_shard_map() -> dict:
    """pure_callback per shard inside shard_map over one island's devices."""
    devs = np.array(checks.islands()[0])
    mesh = Mesh(devs, ("d",))
    n = len(devs)

    def host(v):
        return (np.asarray(v) * 10 + 1).astype(np.float32)

    @jax.jit
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
    def f(x):
        y = jax.pure_callback(host, jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        return y + lax.axis_index("d").astype(jnp.float32)
    x = jax.device_put(np.arange(4.0 * n, dtype=np.float32), NamedSharding(mesh, P("d")))
    return {"value": np.asarray(f(x))}


def cb_shard_map_partitioned() -> dict:
    """jax.debug.callback(partitioned=True) inside shard_map: one call per
    shard with that shard's values, as stock (in a plain sharded jit the
    same callback needs jaxlib's own partitioner, docs/conformance.md)."""
    devs = np.array(checks.islands()[0])
    mesh = Mesh(devs, ("d",))
    shards = []

    @jax.jit
    @functools.partial(jax.shard_map, mesh=mesh, in_specs=P("d"), out_specs=P("d"))
    def f(x):
        jax.debug.callback(lambda v: shards.append(np.asarray(v).tolist()), x, partitioned=True)
        return x * 2
    x = jax.device_put(np.arange(4.0 * len(devs), dtype=np.float32), NamedSharding(mesh, P("d")))
    out = np.asarray(f(x))
    jax.effects_barrier()
    return {"value": out, "shards": sorted(shards), "devices": len(devs)}


def cb_io_ordered() -> dict:
    log = []

    def record(v):
        log.append(int(v))
        return np.int32(len(log))

    @jax.jit
    def f(x):
        a = io_callback(record, jax.ShapeDtypeStruct((), jnp.int32), x, ordered=True)
        b = io_callback(record, jax.ShapeDtypeStruct((), jnp.int32), x + 100, ordered=True)
        return a + b
    outs = [np.asarray(f(jnp.int32(i))) for i in range(6)]
    jax.effects_barrier()
    return {"value": outs, "log": log}


def cb_exception() -> dict:
    def boom(v):
        raise ValueError("cw-boom-42 from the callback")

    @jax.jit
    def f(x):
        return jax.pure_callback(boom, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + 1
    out = {"at": "call"}
    try:
        y = f(jnp.arange(3.0))
        out["at"] = "read"  # stock JAX runs it inline: the call itself raises
        np.asarray(y)
        out["ok"] = True
    except Exception as e:  # noqa: BLE001
        out.update(ok=False, error=_err(e), type=type(e).__name__)
    # The client and its workers go on.
    out["after"] = np.asarray(jax.jit(lambda v: v * 2)(jnp.arange(3.0)))
    return out


def cb_buffer() -> dict:
    """jax.experimental.buffer_callback: the callable gets the operands and
    results as buffers (numpy, DLPack) and writes the results in place."""
    from jax.experimental import buffer_callback as bc
    seen = {}

    def copy_twice(ctx, out, arg):
        seen["stage"] = str(ctx.stage)
        try:
            ctx.stream
        except jax.errors.JaxRuntimeError as e:
            seen["stream"] = str(e)
        seen["flags"] = (arg.writeable, out.writeable, arg.shape, str(arg.dtype))
        y = np.asarray(out)
        y[...] = np.asarray(arg)
        y[...] += np.asarray(arg)

    out = {}
    for dt in ("float32", "int32", "bool", "complex64", "bfloat16", "uint8"):
        x = (np.arange(12) % 5).astype(jnp.dtype(dt)).reshape(3, 4)
        f = bc.buffer_callback(copy_twice, jax.ShapeDtypeStruct.like(x))
        out[dt] = np.asarray(f(x))
        out[dt + "_jit"] = np.asarray(jax.jit(lambda v, f=f: f(v) * 3)(x))
    out["seen"] = seen

    def bump(ctx, out, arg):
        seen["aliased"] = np.asarray(arg).ctypes.data == np.asarray(out).ctypes.data
        np.asarray(out)[...] += 1
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    out["aliases"] = np.asarray(bc.buffer_callback(
        bump, jax.ShapeDtypeStruct.like(x), input_output_aliases={0: 0})(x))

    def dlpack(ctx, out, a, b):
        np.from_dlpack(out)[...] = np.from_dlpack(a) * np.from_dlpack(b)
    g = bc.buffer_callback(dlpack, jax.ShapeDtypeStruct((4,), np.float32))
    a, b = np.arange(4, dtype=np.float32), np.full(4, 2.5, np.float32)
    out["dlpack"] = np.asarray(g(a, b))
    for method in ("sequential", "expand_dims"):
        h = bc.buffer_callback(dlpack, jax.ShapeDtypeStruct((4,), np.float32),
                               vmap_method=method)
        out["vmap_" + method] = np.asarray(jax.vmap(h)(np.stack([a, b]), np.stack([b, a])))

    calls = []
    def effect(ctx, out, arg):
        calls.append(float(np.asarray(arg).sum()))
    e = bc.buffer_callback(effect, jax.ShapeDtypeStruct((), np.float32), has_side_effect=True)
    jax.block_until_ready(jax.jit(lambda v: e(v) * 0)(np.ones(3, np.float32)))
    out["effect_calls"] = calls

    def boom(ctx, out, arg):
        raise ValueError("cw-buffer-boom")
    try:
        np.asarray(bc.buffer_callback(boom, jax.ShapeDtypeStruct.like(x))(x))
        out["boom"] = "no error"
    except Exception as exc:  # noqa: BLE001
        out["boom"] = type(exc).__name__
        out["boom_says"] = "ValueError: cw-buffer-boom" in str(exc)
    out["after"] = np.asarray(jax.jit(lambda v: v * 2)(x))
    return out


def cb_wrong_result(kind: str) -> dict:
    wrong = {"shape": lambda v: np.zeros((5,), np.float32),
             "dtype": lambda v: np.zeros((3,), np.int64)}[kind]

    @jax.jit
    def f(x):
        return jax.pure_callback(wrong, jax.ShapeDtypeStruct((3,), jnp.float32), x)
    try:
        np.asarray(f(jnp.arange(3.0, dtype=jnp.float32)))
        out = {"ok": True}
    except Exception as e:  # noqa: BLE001
        out = {"ok": False, "error": _err(e)}
    out["after"] = np.asarray(jax.jit(lambda v: v + 1)(jnp.arange(3.0)))
    return out


def cb_slow_beside() -> dict:
    """A slow callback in one thread; jits without callbacks on another device
    of the same worker meanwhile finish long before it does."""
    devs = checks.islands()
    slow_dev, other_dev = devs[0][0], devs[0][1]
    started = threading.Event()

    def slow(v):
        started.set()
        time.sleep(3.0)
        return np.asarray(v)
    f = jax.jit(lambda x: jax.pure_callback(slow, jax.ShapeDtypeStruct(x.shape, x.dtype), x))
    g = jax.jit(lambda x: x * 2 + 1)
    xs = jax.device_put(jnp.arange(4.0), slow_dev)
    xo = jax.device_put(jnp.arange(4.0), other_dev)
    np.asarray(g(xo))  # compiled before the race
    result = {}

    def run_slow():
        result["slow"] = np.asarray(f(xs))
    t0 = time.monotonic()
    th = threading.Thread(target=run_slow)
    th.start()
    started.wait(30)
    fast = [np.asarray(g(xo + i)) for i in range(5)]
    fast_s = time.monotonic() - t0
    th.join()
    return {"value": [result["slow"], fast], "fast_within_slow": fast_s < 2.5}


def cb_island_beside_waiting_callback() -> dict:
    """A program over one island whose callback waits (its other devices wait
    in a collective for it: XLA's pool is full), and beside it a program
    without callbacks over the same devices, dispatched while the callback
    waits. The worker called the second one's Execute on its loop, which
    then waited for XLA's pool and could not carry the callback's answer: a
    deadlock, until the worker was declared dead. The same wait made a
    training step longer than the heartbeat timeout kill its worker."""
    devs = np.array(checks.islands()[0])
    mesh = Mesh(devs, ("d",))
    entered, release = threading.Event(), threading.Event()

    def held(v):
        entered.set()
        release.wait(30)
        return (np.asarray(v) % 1000).astype(np.int32)
    f = jax.jit(lambda v: jax.pure_callback(held, jax.ShapeDtypeStruct(v.shape, v.dtype), v,
                                            vmap_method="sequential") + 1)
    g = jax.jit(lambda v: (v * 3 + 1) % 1000)
    x = jax.device_put(np.arange(64 * 16, dtype=np.int32).reshape(64, 16),
                       NamedSharding(mesh, P("d")))
    np.asarray(g(x))  # compiled before the race
    result = {}

    def run_held():
        result["held"] = np.asarray(f(x))
    th = threading.Thread(target=run_held)
    th.start()
    if not entered.wait(30):
        release.set()
        raise RuntimeError("the callback was never called")
    y = g(x)  # dispatched while the callback waits
    time.sleep(1.0)  # long enough for the launch to reach the worker
    release.set()
    th.join(60)
    return {"value": [result.get("held"), np.asarray(y)], "sharding": checks.sharding_desc(y)}


def cb_sharded_jit(partitioned: bool = False) -> dict:
    """Callbacks in a jit over an array sharded across one island's devices:
    pure_callback and debug.print (JAX gathers to one device), and with
    `partitioned` a debug.callback per shard."""
    devs = np.array(checks.islands()[0])
    mesh = Mesh(devs, ("d",))
    shards = []

    @jax.jit
    def f(x):
        y = jax.pure_callback(lambda v: (np.asarray(v) * 2).astype(np.float32),
                              jax.ShapeDtypeStruct(x.shape, x.dtype), x)
        if partitioned:
            jax.debug.callback(lambda v: shards.append(np.asarray(v).copy()), y,
                               partitioned=True)
        jax.debug.print("cw-cb-sharded total={t}", t=y.sum())
        return y + 1
    x = jax.device_put(np.arange(8.0 * len(devs), dtype=np.float32), NamedSharding(mesh, P("d")))
    y = f(x)
    out = np.asarray(y)
    jax.effects_barrier()
    return {"value": out, "sharding": checks.sharding_desc(y),
            "shards": sorted(s.tolist() for s in shards)}


def cb_caller_context() -> dict:
    """A program that calls back runs on the thread that called it, on stock
    JAX, so the callable sees that thread's JAX context managers (they are
    thread-local; Pallas' interpret mode reads the abstract mesh a test set).
    Cheap and heavy (over XLA's 1,000-flop bar) programs, from this thread
    and from another."""
    seen = []

    def cb(x):
        seen.append({"same_thread": threading.get_ident() == want_thread[0],
                     "precision": str(jax.config.jax_default_matmul_precision),
                     "rank_promotion": str(jax.config.jax_numpy_rank_promotion)})
        return x

    def cheap(x):
        return io_callback(cb, jax.ShapeDtypeStruct(x.shape, x.dtype), x)

    def heavy(x):
        return io_callback(cb, jax.ShapeDtypeStruct(x.shape, x.dtype), x) + (x @ x)

    fs = [jax.jit(cheap), jax.jit(heavy)]
    x = np.eye(64, dtype=np.float32)
    want_thread = [threading.get_ident()]

    def run_all():
        with jax.default_matmul_precision("highest"), jax.numpy_rank_promotion("raise"):
            return [np.asarray(f(x)) for f in fs]

    values = run_all()
    out = {}
    t = threading.Thread(target=lambda: (want_thread.__setitem__(0, threading.get_ident()),
                                         out.__setitem__("v", run_all())))
    t.start()
    t.join()
    return {"value": values + out["v"], "seen": seen}
