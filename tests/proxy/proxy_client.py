"""A stock JAX program whose backend is causeway-proxy: JAX_PLATFORMS=proxy,
the `proxy` backend registered as pathwaysutils does it (docs/proxy.md).
Prints one JSON line of what it saw, then waits for a line on stdin (so a
test can look at the cluster while the session is open) and exits.

Usage: proxy_client.py HOST:PORT [report|arrays|compute|failure|budget]

report: the devices, memories and what a computation answers.
compute: jitted programs through the proxy against the same programs on
         stock JAX's CPU backend in this process: on one device
         elementwise, matmul, reductions, random numbers, control flow and
         20 steps of training a small MLP (losses compared step by step);
         over 4 devices split, replicated and 2-D mesh programs and 10
         data-parallel steps of the MLP.
failure: an array on the last device; after a line on stdin (the test has
         killed that device's worker), reading and computing on it, and a
         program on device 0.
arrays: round trips of arrays (dtypes, a single device, replicated, split
        over devices, 64 MiB) compared with the numpy arrays they came from.
budget: 40 round trips of 8 MiB (for a proxy whose host-buffer budget is
        64 MiB), then a 48 MiB array (over a session's share of it).
"""
import json
import os
import sys

os.environ.setdefault("IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS", "true")
import jax  # noqa: E402
from jax.extend.backend import ifrt_proxy, register_backend_factory  # noqa: E402


def _client():
    options = ifrt_proxy.ClientConnectionOptions()
    options.connection_timeout_in_seconds = 60
    return ifrt_proxy.get_client("grpc://" + sys.argv[1], options)


register_backend_factory("proxy", _client, priority=-1)
mode = sys.argv[2] if len(sys.argv) > 2 else "report"
# compute: stock JAX's own CPU backend beside the proxy, for reference results.
jax.config.update("jax_platforms", "proxy,cpu" if mode == "compute" else "proxy")

out = {}
devices = jax.devices("proxy")
if mode == "failure":
    # An array on the last device; the test kills that device's worker, then
    # reading it and computing on it must fail naming the worker, while the
    # other worker's devices carry on.
    import numpy as np
    x = jax.device_put(np.arange(4.0, dtype=np.float32), devices[-1])
    x.block_until_ready()
    print(json.dumps({"ready": True, "worker": devices[-1].worker}), flush=True)
    sys.stdin.readline()
    errors = {}
    for name, fn in (("read", lambda: np.asarray(x)),
                     ("compute", lambda: np.asarray(jax.jit(lambda a: a + 1)(x)))):
        try:
            fn()
            errors[name] = "no error"
        except Exception as e:  # noqa: BLE001  the test checks the text
            errors[name] = str(e).splitlines()[0]
    y = jax.device_put(np.arange(4.0, dtype=np.float32), devices[0])
    out = {"errors": errors, "survivor": np.asarray(jax.jit(lambda a: a * 3)(y)).tolist()}
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
    sys.exit(0)
if mode == "budget":
    import numpy as np
    ok = True
    for i in range(40):
        a = np.full((2 << 20,), i, np.float32)
        ok = ok and bool((np.asarray(jax.device_put(a, devices[0])) == a).all())
    out["round_trips"] = ok
    try:
        jax.device_put(np.ones((12 << 20,), np.float32), devices[0]).block_until_ready()
        out["over"] = "no error"
    except Exception as e:  # noqa: BLE001  the test checks the text
        out["over"] = str(e).splitlines()[0]
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
    sys.exit(0)
if mode == "arrays":
    import ml_dtypes
    import numpy as np
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    rng = np.random.RandomState(0)
    checks = {}
    for dt in (np.float32, np.float64, np.int8, np.int32, np.uint64, np.bool_, np.complex64,
               ml_dtypes.bfloat16, np.float16):
        # What JAX keeps of the dtype (x32: 64-bit types narrow, as on stock JAX).
        a = (rng.rand(2, 3, 5) * 100).astype(dt).astype(jax.dtypes.canonicalize_dtype(dt))
        x = jax.device_put(a, devices[-1])
        back = np.asarray(x)
        checks[np.dtype(dt).name] = bool(back.dtype == a.dtype and back.shape == a.shape
                                         and (back.view(np.uint8) == a.view(np.uint8)).all()
                                         and x.devices() == {devices[-1]})
    scalar = jax.device_put(np.float32(7.5), devices[0])
    checks["scalar"] = float(scalar) == 7.5
    empty = jax.device_put(np.zeros((0, 4), np.float32), devices[0])
    checks["empty"] = np.asarray(empty).shape == (0, 4)
    big = rng.rand(4096, 4096).astype(np.float32)  # 64 MiB
    checks["64MiB"] = bool((np.asarray(jax.device_put(big, devices[1])) == big).all())
    mesh = Mesh(np.array(devices[:4]), ("x",))
    r = jax.device_put(np.arange(12.0).reshape(3, 4), NamedSharding(mesh, P()))
    checks["replicated"] = (len(r.addressable_shards) == 4
                            and all((np.asarray(s.data) == np.arange(12.0).reshape(3, 4)).all()
                                    for s in r.addressable_shards))
    # Large enough to stream on while stored (CW_PROXY_STREAM_MIN, 2 MiB):
    # to every device, and one shard to each.
    big_r = rng.rand(1024, 2048).astype(np.float32)  # 8 MiB
    r = jax.device_put(big_r, NamedSharding(mesh, P()))
    checks["replicated 8MiB"] = all((np.asarray(s.data) == big_r).all()
                                    for s in r.addressable_shards)
    big_s = rng.rand(4096, 1024).astype(np.float32)  # 16 MiB, 4 MiB a shard
    r = jax.device_put(big_s, NamedSharding(mesh, P("x")))
    checks["split 16MiB"] = bool(all((np.asarray(s.data) == big_s[s.index]).all()
                                 for s in r.addressable_shards)
                             and (np.asarray(r) == big_s).all())
    v = np.arange(32, dtype=np.int32).reshape(8, 4)
    w = jax.device_put(v, NamedSharding(mesh, P("x")))
    checks["split"] = ([s.data.shape for s in w.addressable_shards] == [(2, 4)] * 4
                       and (np.asarray(w) == v).all()
                       and [s.device.id for s in w.addressable_shards] == [0, 1, 2, 3])
    w.delete()
    checks["deleted"] = w.is_deleted()
    out["checks"] = checks
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
    sys.exit(0)
out["backend"] = jax.default_backend()
out["devices"] = [{"id": d.id, "kind": d.device_kind, "platform": d.platform,
                   "memories": sorted(m.kind for m in d.addressable_memories()),
                   "default_memory": d.default_memory().kind} for d in devices]
client = devices[0].client
if mode == "compute":
    import jax.numpy as jnp
    import numpy as np

    cpu = jax.devices("cpu")[0]
    proxy_dev = devices[1]

    def both(fn, *args):
        """fn's results on the proxy's device and on stock CPU, as numpy (the
        inputs are committed to the device, so the program runs there)."""
        on = lambda d: jax.jit(fn)(*[jax.device_put(a, d) for a in args])  # noqa: E731
        return np.asarray(on(proxy_dev)), np.asarray(on(cpu))

    x = np.linspace(-3, 3, 64, dtype=np.float32).reshape(8, 8)
    progs = {
        "elementwise": (lambda a: jnp.tanh(a) * 2 + jnp.exp(-a * a), x),
        "matmul": (lambda a: a @ a.T + 1, x),
        "reductions": (lambda a: jnp.stack([a.sum(0), a.max(1), a.mean(0)]), x),
        "random": (lambda k: jax.random.normal(jax.random.wrap_key_data(k), (16,)),
                   np.asarray(jax.random.key_data(jax.random.key(3)))),
        "while": (lambda a: jax.lax.fori_loop(0, 10, lambda i, c: c * 0.5 + i, a), x),
        "int": (lambda a: (a.astype(jnp.int32) * 7) % 5, x),
    }
    results = {}
    for name, (fn, arg) in progs.items():
        got, want = both(fn, arg)
        results[name] = bool(got.shape == want.shape and np.array_equal(got, want))

    # A small MLP trained for 20 steps, one device.
    rng = np.random.RandomState(0)
    xs = rng.randn(64, 16).astype(np.float32)
    ys = rng.randn(64, 4).astype(np.float32)
    params0 = [rng.randn(16, 32).astype(np.float32) * 0.1, np.zeros(32, np.float32),
               rng.randn(32, 4).astype(np.float32) * 0.1, np.zeros(4, np.float32)]

    def loss(p, a, b):
        h = jnp.tanh(a @ p[0] + p[1])
        return jnp.mean((h @ p[2] + p[3] - b) ** 2)

    def step(p, a, b):
        l, g = jax.value_and_grad(loss)(p, a, b)
        return [w - 0.1 * gw for w, gw in zip(p, g)], l

    def train(steps, params_on, batch_on):
        """Losses of `steps` SGD steps, parameters and batch placed as given."""
        f = jax.jit(step)
        p = [jax.device_put(w, params_on) for w in params0]
        a, b = jax.device_put(xs, batch_on), jax.device_put(ys, batch_on)
        ls = []
        for _ in range(steps):
            p, l = f(p, a, b)
            ls.append(float(l))
        return ls

    losses = {where: train(20, dev, dev) for where, dev in (("proxy", proxy_dev), ("cpu", cpu))}
    results["mlp_losses_equal"] = losses["proxy"] == losses["cpu"]
    # Programs over several devices: split, replicated, a 2-D mesh, and
    # the MLP data-parallel over 4 devices (batch split, parameters
    # replicated), each against stock JAX's CPU devices.
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    def on_mesh(devs, shape, names):
        return Mesh(np.array(devs).reshape(shape), names)

    cpus = jax.devices("cpu")
    sharded = {}
    for where, devs in (("proxy", devices[:4]), ("cpu", cpus[:4])):
        m1 = on_mesh(devs, (4,), ("x",))
        m2 = on_mesh(devs, (2, 2), ("a", "b"))
        v = jax.device_put(np.arange(32.0, dtype=np.float32).reshape(8, 4),
                           NamedSharding(m1, P("x", None)))
        w = jax.device_put(np.ones((4, 3), np.float32), NamedSharding(m1, P()))
        t = jax.device_put(np.arange(16.0, dtype=np.float32).reshape(4, 4),
                           NamedSharding(m2, P("a", "b")))
        mm = jax.jit(lambda a, b: a @ b)(v, w)
        sharded[where] = {"split": np.asarray(jax.jit(lambda a: jnp.sin(a) * 2)(v)),
                          "matmul": np.asarray(mm),
                          "matmul_spec": str(mm.sharding.spec),
                          "sum": np.asarray(jax.jit(lambda a: a.sum(0))(v)),
                          "mesh2d": np.asarray(jax.jit(lambda a: a.T + 1)(t))}
        sharded[where]["dp_losses"] = train(10, NamedSharding(m1, P()),
                                            NamedSharding(m1, P("x", None)))
    for k in ("split", "matmul", "sum", "mesh2d"):
        results["sharded_" + k] = bool(np.array_equal(sharded["proxy"][k], sharded["cpu"][k]))
    results["sharded_spec"] = sharded["proxy"]["matmul_spec"] == sharded["cpu"]["matmul_spec"]
    results["dp_losses_equal"] = sharded["proxy"]["dp_losses"] == sharded["cpu"]["dp_losses"]
    results["mlp_learns"] = losses["proxy"][-1] < losses["proxy"][0]
    out["checks"] = results
    out["losses"] = losses["proxy"]
    print(json.dumps(out), flush=True)
    sys.stdin.readline()
    sys.exit(0)
out["platform_version"] = client.platform_version
out["runtime_type"] = client.runtime_type
try:
    import jax.numpy as jnp
    out["compute"] = jnp.arange(4.0).tolist()
except Exception as e:  # noqa: BLE001  reported to the test, which checks the text
    out["compute_error"] = str(e).splitlines()[0]
print(json.dumps(out), flush=True)
sys.stdin.readline()
