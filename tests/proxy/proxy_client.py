"""A stock JAX program whose backend is causeway-proxy: JAX_PLATFORMS=proxy,
the `proxy` backend registered as pathwaysutils does it (docs/proxy.md).
Prints one JSON line of what it saw, then waits for a line on stdin (so a
test can look at the cluster while the session is open) and exits.

Usage: proxy_client.py HOST:PORT [report|arrays]

report: the devices, memories and what a computation answers.
arrays: round trips of arrays (dtypes, a single device, replicated, split
        over devices, 64 MiB) compared with the numpy arrays they came from.
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
jax.config.update("jax_platforms", "proxy")

mode = sys.argv[2] if len(sys.argv) > 2 else "report"
out = {}
devices = jax.devices()
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
out["platform_version"] = client.platform_version
out["runtime_type"] = client.runtime_type
try:
    import jax.numpy as jnp
    out["compute"] = jnp.arange(4.0).tolist()
except Exception as e:  # noqa: BLE001  reported to the test, which checks the text
    out["compute_error"] = str(e).splitlines()[0]
print(json.dumps(out), flush=True)
sys.stdin.readline()
