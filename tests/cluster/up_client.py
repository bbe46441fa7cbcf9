"""A JAX client of a running causeway cluster (CAUSEWAY_CONTROLLER and
CAUSEWAY_TOKEN_FILE as `causeway up` prints them): a jit and one array on
every device, checked here; prints one JSON line. Used by
tests/cluster/test_up.py and, copied outside the repository, by the
packaging test (tests/packaging/wheel_test.sh)."""
import json
import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "causeway")

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402

tag = int(sys.argv[1]) if len(sys.argv) > 1 else 0
devices = jax.devices()
x = jnp.arange(8.0) + tag
total = float(jax.jit(lambda v: (v * 2).sum())(x))
assert total == float(2 * (np.arange(8.0) + tag).sum()), total
per = [float(np.asarray(jax.device_put(np.float32(i + tag), d) * 3)) for i, d in enumerate(devices)]
assert per == [3.0 * (i + tag) for i in range(len(devices))], per
print(json.dumps({"backend": jax.default_backend(), "devices": len(devices),
                  "workers": sorted({str(getattr(d, "worker", "?")) for d in devices}),
                  "process_count": jax.process_count(), "sum": total}))
