"""A stock JAX program whose backend is causeway-proxy: JAX_PLATFORMS=proxy,
the `proxy` backend registered as pathwaysutils does it (docs/proxy.md).
Prints one JSON line of what it saw, then waits for a line on stdin (so a
test can look at the cluster while the session is open) and exits.

Usage: proxy_client.py HOST:PORT
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

out = {}
devices = jax.devices()
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
