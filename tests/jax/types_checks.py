"""Checks of issue 10 items 4-7 (element types, strides, buffer pointers,
donation, cost analysis, JAX's CPU backend beside causeway, the embedded
cluster's layout), run like checks.py (runner.py loads this module through
CW_RUNNER_CHECKS; test_types.py and test_layout.py give it to both sides).
"""
from __future__ import annotations

import numpy as np

import jax
import jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

import checks

# Every element type JAX has beyond checks.dtypes' own, by ml_dtypes name.
# float6_* are left out: stock CPU JAX cannot compile a program that converts
# them ("Invalid bitcast i6 to i8" in XLA's CPU backend).
EXOTIC = ["int4", "uint4", "int2", "uint2", "float8_e5m2", "float8_e4m3fn",
          "float8_e4m3b11fnuz", "float8_e5m2fnuz", "float8_e4m3fnuz", "float8_e4m3",
          "float8_e3m4", "float8_e8m0fnu", "float4_e2m1fn"]


JIT_STRIDES = ("float32", "int4", "bool", "float64", "complex128")


def _dtype(name: str) -> np.dtype:
    import ml_dtypes
    return np.dtype(getattr(ml_dtypes, name, None) or name)


def _sample(dt: np.dtype, shape=(5, 7)) -> np.ndarray:
    """Every representable small value of dt, and its extremes, in shape."""
    import ml_dtypes
    n = int(np.prod(shape))
    if dt.kind in "iu" or dt.name in ("int4", "uint4", "int2", "uint2"):
        info = ml_dtypes.iinfo(dt)
        lo, hi = max(int(info.min), -100), min(int(info.max), 100)
        vals = (np.arange(n) % (hi - lo + 1) + lo).astype(dt)
        vals[:2] = [info.min, info.max]
        return vals.reshape(shape)
    if dt.kind == "b":
        return (np.arange(n) % 3 == 0).reshape(shape)
    r = checks.rng(11)
    vals = (r.standard_normal(n) * 4).astype(np.float32)
    vals[:4] = [0.0, 1.0, -2.0, 0.5]
    return vals.astype(dt).reshape(shape)


def dtypes_all(names: list[str], x64: bool = False) -> dict:
    """Each type: host round trip, device_put to the last device and across
    islands, jit programs that read it, write it and move it."""
    with jax.enable_x64(x64):
        return _dtypes_all(names)


def _dtypes_all(names: list[str]) -> dict:
    devs = jax.devices()
    out = {}
    for name in names:
        dt = _dtype(name)
        a = _sample(dt)
        x = jnp.asarray(a)
        odd = _sample(dt, (7,))  # an odd count: packed types end mid-byte
        res = {
            "dtype": str(x.dtype), "roundtrip": np.asarray(x),
            "odd": np.asarray(jax.device_put(odd, devs[3])),
            "device_put": np.asarray(jax.device_put(a, devs[-1])),
            "moved": np.asarray(jax.device_put(x, devs[5])),
            "to_f32": np.asarray(jax.jit(lambda v: v.astype(jnp.float32))(x)),
            "from_f32": np.asarray(
                jax.jit(lambda v: (v.astype(jnp.float32) * 2).astype(dt))(x)),
            "transpose": np.asarray(jax.jit(lambda v: v.T[::2])(x)),
            "scalar": np.asarray(jax.device_put(a[1, 2], devs[2])),
            "empty": np.asarray(jnp.asarray(a[:0])),
        }
        out[name] = res
    return out


def tokens() -> dict:
    """Tokens into and out of a jit (JAX keeps them off the wire)."""
    from jax import lax
    tok, y = jax.jit(lambda x: (lax.create_token(), x + 1))(np.float32(1.0))
    tok2, z = jax.jit(lambda t, x: (t, x * 2))(tok, np.float32(3.0))
    return {"out": type(tok).__name__, "y": np.asarray(y), "through": type(tok2).__name__,
            "z": np.asarray(z)}


def _stride_kinds(dt: np.dtype) -> dict:
    m = _sample(dt, (6, 8))
    cube = _sample(dt, (3, 4, 5))
    win = np.lib.stride_tricks.sliding_window_view(_sample(dt, (12,)), 4)
    return {
        "rows_reversed": m[::-1],
        "cols_reversed": m[:, ::-1],
        "both_reversed_steps": m[::-2, ::-3],
        "transposed": m.T,
        "transposed_reversed": m.T[::-1],
        "every_other": m[::2, 1::3],
        "fortran": np.asfortranarray(m),
        "broadcast_rows": np.broadcast_to(m[2], (5, 8)),
        "broadcast_cols": np.broadcast_to(m[:, :1], (6, 4)),
        "broadcast_scalar": np.broadcast_to(m[1, 1], (3, 3)),
        "reversed_broadcast": np.broadcast_to(m[3, ::-1], (2, 8)),
        "overlapping_windows": win,
        "overlapping_reversed": win[::-1],
        "cube_mixed": cube[::-1, :, ::2].transpose(2, 0, 1),
        "vector_reversed": m[4, ::-1],
        "single_row_reversed": m[2:3, ::-1],
    }


def strides(names: list[str], x64: bool = False, positive_only: bool = False) -> dict:
    """numpy views of every stride kind (negative, zero, arbitrary, overlapping)
    through device_put, jnp.asarray and as jit arguments (64-bit types under
    jax.enable_x64). positive_only: only the views whose strides are all
    positive (jaxlib's IFRT proxy client refuses the others itself)."""
    with jax.enable_x64(x64):
        return _strides(names, positive_only)


def positive_strides(v: np.ndarray) -> bool:
    return all(s > 0 for s, d in zip(v.strides, v.shape) if d > 1)


def negative_stride_put() -> dict:
    """device_put of a reversed view: {"ok"} or {"error"}."""
    try:
        jax.device_put(np.arange(12.0, dtype=np.float32).reshape(3, 4)[::-1], jax.devices()[0])
        return {"ok": True}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "error": f"{type(e).__name__}: {e}"}


def _strides(names: list[str], positive_only: bool = False) -> dict:
    devs = jax.devices()
    f = jax.jit(lambda v: v.astype(jnp.float32) + 1)
    out = {}
    for name in names:
        dt = _dtype(name)
        res = {}
        for kind, v in _stride_kinds(dt).items():
            if positive_only and not positive_strides(v):
                continue
            res[kind] = {"put": np.asarray(jax.device_put(v, devs[-1])),
                         "asarray": np.asarray(jnp.asarray(v)),
                         # As a jit argument (a compile per shape: a few types).
                         "jit_arg": np.asarray(f(v.real if dt.kind == "c" else v))
                         if name in JIT_STRIDES else None}
        out[name] = res
    return out


def buffer_pointer() -> dict:
    """unsafe_buffer_pointer(): an address, stable for the buffer's life,
    distinct for live buffers (values are not comparable across backends)."""
    devs = jax.devices()
    x = jax.device_put(np.arange(1024, dtype=np.float32), devs[1])
    y = jax.device_put(np.arange(1024, dtype=np.float32), devs[1])
    z = jax.jit(lambda v: v * 2)(x)
    px = x.unsafe_buffer_pointer()
    sharded = jax.device_put(np.arange(16.0, dtype=np.float32),
                             NamedSharding(Mesh(np.array(devs[:4]), ("d",)), P("d")))
    shard_ptrs = [s.data.unsafe_buffer_pointer() for s in sharded.addressable_shards]
    out = {
        "is_int": isinstance(px, int),
        "nonzero": px != 0,
        "stable": px == x.unsafe_buffer_pointer(),
        "distinct": len({px, y.unsafe_buffer_pointer(), z.unsafe_buffer_pointer()}) == 3,
        "aligned": px % 16 == 0,
        "shards_distinct": len(set(shard_ptrs)) == 4 and 0 not in shard_ptrs,
        "value_after": np.asarray(x + z),
    }
    x.delete()
    try:
        x.unsafe_buffer_pointer()
        out["deleted"] = "no error"
    except Exception as e:  # noqa: BLE001
        out["deleted"] = "raised" if "delete" in str(e).lower() else checks.err_text(e)
    return out


def _distinct_donation(out: dict) -> dict:
    """Donating two different buffers to a fresh function still works (after a
    refused call stock JAX keeps both inputs of the next one)."""
    import warnings
    g = jax.jit(lambda a, b: a + b, donate_argnums=(0, 1))
    y, z = jnp.arange(8.0) + 1, jnp.arange(8.0) + 2
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        out["distinct"] = np.asarray(g(y, z))
    out["distinct_deleted"] = [y.is_deleted(), z.is_deleted()]
    return out


def donate_twice_fresh() -> dict:
    """donate_twice with a fresh array for each case: whether each call is
    refused, with what, and what is left of the array after."""
    import warnings
    cases = {"both_donated": jax.jit(lambda a, b: a + b, donate_argnums=(0, 1)),
             "donated_and_kept": jax.jit(lambda a, b: a * b, donate_argnums=(0,)),
             "kept_and_donated": jax.jit(lambda a, b: a - b, donate_argnums=(1,))}
    out = {}
    for name, f in cases.items():
        x = jnp.arange(8.0)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            try:
                out[name] = {"ok": True, "value": np.asarray(f(x, x))}
            except Exception as e:  # noqa: BLE001
                out[name] = {"ok": False, "message": str(e)}
        out[name]["x_deleted"] = x.is_deleted()
    return _distinct_donation(out)


def donate_twice() -> dict:
    """One buffer donated twice, or donated and also passed undonated, in one
    call: refused as stock refuses it; the buffer stays usable."""
    out = {}
    x = jnp.arange(8.0)
    cases = {"both_donated": jax.jit(lambda a, b: a + b, donate_argnums=(0, 1)),
             "donated_and_kept": jax.jit(lambda a, b: a * b, donate_argnums=(0,)),
             "kept_and_donated": jax.jit(lambda a, b: a - b, donate_argnums=(1,))}
    import warnings
    for name, f in cases.items():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # "Some donated buffers were not usable"
            try:
                out[name] = {"ok": True, "value": np.asarray(f(x, x))}
            except Exception as e:  # noqa: BLE001
                msg = str(e)
                out[name] = {"ok": False, "type": type(e).__name__,
                             "names_it": "donat" in msg.lower()}
        out[name]["x_deleted"] = x.is_deleted()
    out["x_after"] = np.asarray(x)
    return _distinct_donation(out)


def cost_analysis() -> dict:
    """compiled.cost_analysis(): the same numbers as stock (same XLA)."""
    f = jax.jit(lambda a, b: jnp.tanh(a @ b) + a.sum())
    c = f.lower(jnp.ones((16, 32)), jnp.ones((32, 16))).compile()
    ca = c.cost_analysis()
    g = jax.jit(lambda a: a * 2).lower(jnp.ones((1000,), jnp.int32)).compile().cost_analysis()
    return {"type": type(ca).__name__, "matmul": ca, "elementwise": g}


def cpu_beside() -> dict:
    """JAX's in-process CPU backend next to the default one (causeway on the
    target, cpu on stock): a CPU device, jit on it, transfers both ways."""
    cpu = jax.devices("cpu")[0]
    default = jax.devices()[0]
    x = jax.device_put(np.arange(6.0, dtype=np.float32), default)
    on_cpu = jax.device_put(x, cpu)
    y = jax.jit(lambda v: v * 3 + 1)(on_cpu)
    back = jax.device_put(y, default)
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # backend= is deprecated, still used
        z = jax.jit(lambda v: v - 1, backend="cpu")(np.float32(2.0))
    return {"cpu_platform": cpu.platform, "on_cpu": list(on_cpu.devices())[0].platform,
            "y": np.asarray(y), "y_platform": list(y.devices())[0].platform,
            "back": np.asarray(back * 2), "back_default": list(back.devices())[0] == default,
            "backend_cpu": np.asarray(z), "local_cpu": len(jax.local_devices(backend="cpu")) >= 1}


def layout() -> dict:
    """The devices JAX sees: count, islands, workers, default backend."""
    from jax._src import xla_bridge
    devs = jax.devices()
    isl = checks.islands()
    backends = xla_bridge.backends()
    # (causeway's platform is "cpu", so jax.default_backend() says "cpu".)
    default = [name for name, b in backends.items() if b is xla_bridge.get_backend()]
    return {"num_devices": len(devs), "islands": [len(g) for g in isl],
            "workers": sorted({checks.worker_of(d) for d in devs}),
            "default_backend": default[0], "platform": devs[0].platform,
            "backends": sorted(backends)}


def mesh_all() -> dict:
    """Mesh(jax.devices()) with a jit over it, as most users write it first."""
    devs = jax.devices()
    n = len(devs)
    mesh = Mesh(np.array(devs), ("d",))
    x = jax.device_put(np.arange(n * 4 * 3, dtype=np.float32).reshape(n * 4, 3),
                       NamedSharding(mesh, P("d")))
    w = jax.device_put(np.linspace(-1, 1, 9, dtype=np.float32).reshape(3, 3),
                       NamedSharding(mesh, P()))
    f = jax.jit(lambda a, b: (jnp.tanh(a @ b), jnp.sum(a * a)),
                out_shardings=(NamedSharding(mesh, P("d")), NamedSharding(mesh, P())))
    y, s = f(x, w)
    g = jax.jit(jax.grad(lambda b, a: jnp.mean((a @ b) ** 2)))(w, x)
    return {"y": np.asarray(y), "s": np.asarray(s), "grad": np.asarray(g),
            "y_sharding": checks.sharding_desc(y), "n": n}


# --- Memory kinds (issue 10 item 3) -------------------------------------------

KINDS = ("device", "pinned_host", "unpinned_host")


def _kind(a) -> str:
    return a.sharding.memory_kind


def memory_kinds_listed() -> dict:
    """Each device's memories as JAX sees them: kinds, default, and that every
    memory names its device."""
    out = {}
    for i, d in enumerate(jax.devices()):
        mems = d.addressable_memories()
        out[i] = {"kinds": sorted(m.kind for m in mems), "default": d.default_memory().kind,
                  "own": all(d in m.addressable_by_devices() for m in mems),
                  "by_kind": d.memory("pinned_host").kind}
    return out


def memory_kinds_put() -> dict:
    """device_put between kinds on one device and across workers (first and
    last device), from numpy and from arrays; values and kinds after each."""
    from jax.sharding import SingleDeviceSharding
    devs = jax.devices()
    x = np.arange(24, dtype=np.float32).reshape(4, 6) - 7.5
    out = {}
    for di in (0, len(devs) - 1):
        s = SingleDeviceSharding(devs[di])
        for kind in KINDS:
            a = jax.device_put(x, s.with_memory_kind(kind))  # numpy -> kind
            out[f"d{di}_np_{kind}"] = {"kind": _kind(a), "v": np.asarray(a)}
            for to in KINDS:  # kind -> kind on the same device
                b = jax.device_put(a, s.with_memory_kind(to))
                out[f"d{di}_{kind}_to_{to}"] = {"kind": _kind(b), "v": np.asarray(b * 2)}
    # Across workers: first device's device memory to the last one's host memory.
    a = jax.device_put(x, devs[0])
    far = SingleDeviceSharding(devs[-1], memory_kind="pinned_host")
    b = jax.device_put(a, far)
    out["cross"] = {"kind": _kind(b), "device": b.devices() == {devs[-1]}, "v": np.asarray(b)}
    back = jax.device_put(b, SingleDeviceSharding(devs[0], memory_kind="device"))
    out["cross_back"] = {"kind": _kind(back), "v": np.asarray(back + 1)}
    try:
        jax.device_put(x, SingleDeviceSharding(devs[0], memory_kind="no_such_kind"))
        out["unknown"] = "no error"
    except Exception as e:  # noqa: BLE001
        out["unknown"] = {"type": type(e).__name__, "names_it": "no_such_kind" in str(e)}
    return out


def memory_kinds_jit() -> dict:
    """Memory kinds in out_shardings and on jit arguments, one device and a
    sharded mesh of four."""
    from jax.sharding import SingleDeviceSharding
    devs = jax.devices()
    s = SingleDeviceSharding(devs[0])
    x = jnp.arange(16.0, dtype=jnp.float32).reshape(4, 4)
    out = {}
    for kind in KINDS:
        f = jax.jit(lambda a: jnp.sin(a) * 2, out_shardings=s.with_memory_kind(kind))
        y = f(x)
        out[f"out_{kind}"] = {"kind": _kind(y), "v": np.asarray(y)}
    xh = jax.device_put(x, s.with_memory_kind("pinned_host"))
    y = jax.jit(lambda a: a + 1)(xh)  # a host argument: the output follows it
    out["arg_host"] = {"kind": _kind(y), "v": np.asarray(y)}
    g = jax.jit(lambda a, b: (a * 3, b - 1), in_shardings=(s.with_memory_kind("pinned_host"), s),
                out_shardings=(s, s.with_memory_kind("pinned_host")))
    y1, y2 = g(xh, x)
    out["in_out"] = {"kinds": [_kind(y1), _kind(y2)], "v": [np.asarray(y1), np.asarray(y2)]}
    mesh = Mesh(np.array(devs[:4]), ("d",))
    ns = NamedSharding(mesh, P("d"))
    xs = jax.device_put(np.arange(32.0, dtype=np.float32).reshape(8, 4),
                        ns.with_memory_kind("pinned_host"))
    h = jax.jit(lambda a: jnp.cos(a).sum(axis=1), out_shardings=ns.with_memory_kind("pinned_host"))
    ys = h(jax.device_put(xs, ns))
    out["sharded"] = {"in_kind": _kind(xs), "kind": _kind(ys), "v": np.asarray(ys),
                      "shard_kinds": sorted({_kind(sh.data) for sh in ys.addressable_shards}),
                      "back": np.asarray(jax.device_put(ys, ns.with_memory_kind("device")))}
    return out


def memory_kinds_offload() -> dict:
    """Host-offloaded activations: jax.checkpoint with a policy that offloads
    a named residual to pinned_host, in a plain function and in a scan; the
    gradients as stock computes them."""
    from jax.ad_checkpoint import checkpoint_name
    policy = jax.checkpoint_policies.save_and_offload_only_these_names(
        names_which_can_be_saved=[], names_which_can_be_offloaded=["h"],
        offload_src="device", offload_dst="pinned_host")

    def layer(w, a):
        h = checkpoint_name(jnp.sin(a @ w), "h")
        return jnp.tanh(h @ w.T)

    def loss(w, a):
        return jnp.sum(jax.checkpoint(layer, policy=policy)(w, a) ** 2)

    def scan_loss(w, a):
        def body(c, _):
            return jax.checkpoint(layer, policy=policy)(w, c), None
        c, _ = jax.lax.scan(body, a, None, length=4)
        return jnp.sum(c ** 2)

    rng = np.random.default_rng(3)
    w = jnp.asarray(rng.standard_normal((8, 8), dtype=np.float32) * 0.3)
    a = jnp.asarray(rng.standard_normal((16, 8), dtype=np.float32))
    f = jax.jit(jax.value_and_grad(loss))
    g = jax.jit(jax.value_and_grad(scan_loss))
    # JAX moves the residual to host memory space (on CPU its lowering needs
    # no transfer: both spaces are host memory); this checks the policy took.
    jaxpr = str(jax.make_jaxpr(jax.value_and_grad(loss))(w, a))
    v1, g1 = f(w, a)
    v2, g2 = g(w, a)
    return {"loss": np.asarray(v1), "grad": np.asarray(g1), "scan_loss": np.asarray(v2),
            "scan_grad": np.asarray(g2),
            "offloaded": "f32<host>" in jaxpr}


def big_transfers(positive_only: bool = False) -> dict:
    """Arrays past the same-host copy threshold (512 KiB; on the embedded
    cluster the worker copies them from and to the client's memory): dense,
    strided and reversed views, to another device and back, through jit and
    donation."""
    rng = np.random.default_rng(11)
    devs = jax.devices()
    x = rng.standard_normal((1024, 1024), dtype=np.float32)  # 4 MiB
    b = rng.integers(-128, 127, size=(3, 1 << 20), dtype=np.int8)
    out = {}
    a = jax.device_put(x, devs[0])
    out["dense"] = np.asarray(a)
    out["int8"] = np.asarray(jax.device_put(b, devs[1]))
    out["columns"] = np.asarray(jax.device_put(x[:, ::2], devs[0]))  # positive strides
    if not positive_only:
        out["reversed"] = np.asarray(jax.device_put(x[::-1], devs[0]))  # made dense first
    out["other_device"] = np.asarray(jax.device_put(a, devs[-1]))
    out["jit"] = np.asarray(jax.jit(lambda v: jnp.tanh(v) @ v[:8].T)(a))
    f = jax.jit(lambda v: v * 2 + 1, donate_argnums=0)
    out["donated"] = np.asarray(f(jax.device_put(x, devs[0])))
    out["small_after"] = np.asarray(jax.device_put(np.arange(5.0, dtype=np.float32), devs[0]))
    return out
