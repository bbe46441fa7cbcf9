"""JAX on the null plugin (docs/nullplugin.md), in-process and behind causeway:
the same programs compile (XLA's CPU plugin tells the shapes) and run with
outputs of the declared shapes and dtypes, all zeros, on one device, sharded
over an island's four, and as a training step. bench/jax_bench.py --plugin
null measures dispatch on it; this checks that what it measures runs."""

import pytest

import harness
from conftest import plugin_front_only

PROGRAM = r"""
import json, sys
if sys.argv[1] == "stock":
    from jax._src import xla_bridge
    xla_bridge.discover_pjrt_plugins = lambda: None  # only the null plugin
import numpy as np
import jax, jax.numpy as jnp
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
out = {"platform": jax.devices()[0].platform, "devices": len(jax.devices())}
f = jax.jit(lambda x: x * 2 + 1)
y = f(jnp.arange(8, dtype=jnp.float32))
for _ in range(100):
    y = f(y)
out["chain"] = [str(y.dtype), list(y.shape), float(np.abs(np.asarray(y)).sum())]
g = jax.jit(lambda a, b: (a @ b, jnp.sum(a, dtype=jnp.int32)))
m, s = g(jnp.ones((4, 3)), jnp.ones((3, 5)))
out["two"] = [[str(m.dtype), list(m.shape)], [str(s.dtype), list(s.shape)]]
mesh = Mesh(np.array(jax.devices()[:4]), ("d",))
x = jax.device_put(jnp.ones((8, 6)), NamedSharding(mesh, P("d")))
z = jax.jit(lambda v: jnp.tanh(v) @ jnp.ones((6, 2)))(x)
out["sharded"] = [list(z.shape), len(z.addressable_shards),
                  sorted(list(sh.data.shape) for sh in z.addressable_shards)[0],
                  float(np.abs(np.asarray(z)).sum())]
def loss(w, xb):
    return jnp.mean((xb @ w) ** 2)
w = jnp.ones((6, 2))
step = jax.jit(lambda w, xb: w - 0.1 * jax.grad(loss)(w, xb))
for _ in range(3):
    w = step(w, x)
out["train"] = [list(w.shape), float(np.abs(np.asarray(w)).sum())]
print("RESULT " + json.dumps(out))
"""


def _run(side: str, env: dict) -> dict:
    return harness.run_job(PROGRAM, env, side, timeout=240)[0]


@pytest.mark.skipif(not harness.on_causeway(), reason="runs causeway's workers on the null plugin")
@plugin_front_only("JAX_PLATFORMS=causeway with null-plugin workers")
def test_null_plugin_in_process_and_behind_causeway():
    why = harness.missing_build()
    if why:
        pytest.fail(f"causeway is not built: {why}", pytrace=False)
    stock = _run("stock", harness.null_stock_env())
    cw = _run("causeway", harness.null_causeway_env())
    for got in (stock, cw):
        assert got["platform"] == "null", got
        assert got["devices"] == harness.NUM_DEVICES, got
        # Null executions: the declared shapes and dtypes, every value zero.
        assert got["chain"] == ["float32", [8], 0.0], got
        assert got["two"] == [["float32", [4, 5]], ["int32", []]], got
        assert got["sharded"] == [[8, 2], 4, [2, 2], 0.0], got
        assert got["train"] == [[6, 2], 0.0], got
