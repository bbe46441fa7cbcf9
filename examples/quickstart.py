"""causeway quickstart: plain JAX, every device of every worker in one process.

    JAX_PLATFORMS=causeway python examples/quickstart.py

With CAUSEWAY_CONTROLLER unset the plugin starts a private cluster (a
controller and one worker of 8 CPU devices: one island, as one machine has)
that exits with this process. CAUSEWAY_LOCAL_WORKERS=2 makes two islands of
4 devices each; step 4 then copies an array from one to the other.
"""
import os

os.environ.setdefault("JAX_PLATFORMS", "causeway")

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

# 1. Devices: where each lives is in its attributes.
devices = jax.devices()
print(f"{len(devices)} devices in {jax.process_count()} process")
islands = {}
for d in devices:
    island = getattr(d, "island", 0)
    islands.setdefault(island, []).append(d)
    print(f"  {d}  worker={getattr(d, 'worker', '-')}  island={island}")

# 2. A jit: compiled once by the controller, run on a worker.
f = jax.jit(lambda x: jnp.tanh(x) @ x.T)
x = jnp.arange(12.0).reshape(3, 4)
print("jit:\n", f(x))

# 3. A sharded array: SPMD over one island's devices (with one island, all
# of them: Mesh(jax.devices()) as on stock JAX).
first = islands[min(islands)]
mesh = Mesh(np.array(first), ("d",))
xs = jax.device_put(np.arange(16.0), NamedSharding(mesh, P("d")))
ys = jax.jit(lambda v: v * 2)(xs)
print("sharded:", ys.sharding)
for s in ys.addressable_shards:
    print(f"  {s.device}: {s.index} -> {np.asarray(s.data)}")

# 4. Across islands: an explicit copy, worker to worker.
if len(islands) > 1:
    other = islands[sorted(islands)[1]]
    z = jax.device_put(ys, NamedSharding(Mesh(np.array(other), ("d",)), P("d")))
    print("moved to island", getattr(other[0], "island", "?"), "->", np.asarray(z))
