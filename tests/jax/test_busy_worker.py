"""A worker stays alive while it computes: a read of a result that is not
ready yet waits for it off the worker's loop, so heartbeats go on (issue
found by JAX's random_lax_test: the worker's loop waited inside XLA's CPU
plugin for a 1e8-element program, the controller declared it lost after 5 s
without a heartbeat and every later test failed). Here the controller's
timeout is 2 s (20 heartbeats: room for a busy machine) and the program
runs for about 4.5 s on the development machine."""
import harness
from conftest import plugin_front_only, requires_causeway

pytestmark = [requires_causeway, plugin_front_only(
    "the embedded cluster's worker timeout, set through the plugin's environment")]

JOB = r"""
import json, sys
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
f = jax.jit(lambda x: lax.fori_loop(0, 1500, lambda i, v: jnp.sin(v) * 1.5 + 0.25, x))
x = jnp.linspace(0, 1, 1 << 20, dtype=jnp.float32)
f(x).block_until_ready()  # compiled
# The sum's read is asked for while the loop runs (seconds): the worker must
# wait for it without holding its loop.
total = np.asarray(jnp.sum(f(x)))
print("RESULT " + json.dumps({"sum": total.view(np.uint32).tolist()}))
"""


def _stock_and_causeway(job: str):
    """The job's result on stock JAX, and on causeway with the controller's
    timeout at 2 s (20 heartbeats: room for a busy machine)."""
    want, _ = harness.run_job(job, harness.stock_env())
    env = harness.causeway_env()
    env["CAUSEWAY_WORKER_TIMEOUT_MS"] = "2000"
    env["CAUSEWAY_HEARTBEAT_MS"] = "100"
    got, _ = harness.run_job(job, env)
    return want, got


def test_reading_a_result_that_is_not_ready_keeps_the_worker_alive():
    want, got = _stock_and_causeway(JOB)
    assert got == want


# A program over every device of a worker (the embedded cluster's first of
# two holds 4) holds all of XLA's pool threads (max(cores, devices)) while
# it runs, and a multi-device Execute waits for
# that pool to take its parts: the second step, queued behind the first as
# JAX dispatches ahead, made the worker's loop wait out the whole first
# step. It is handed to the worker's dispatch thread now.
STEPS = r"""
import json
import numpy as np
import jax, jax.numpy as jnp
from jax import lax
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P
mesh = Mesh(np.array(jax.devices()[:4]), ("d",))  # every device of the first worker
f = jax.jit(lambda x: lax.fori_loop(0, 1500, lambda i, v: jnp.sin(v) * 1.5 + 0.25, x))
x = jax.device_put(jnp.linspace(0, 1, 1 << 20, dtype=jnp.float32), NamedSharding(mesh, P("d")))
f(x).block_until_ready()  # compiled
y = f(f(x))  # the second step is dispatched while the first runs
total = np.asarray(jnp.sum(y))
print("RESULT " + json.dumps({"sum": total.view(np.uint32).tolist(), "devices": len(y.devices())}))
"""


def test_a_step_queued_behind_a_long_one_keeps_the_worker_alive():
    want, got = _stock_and_causeway(STEPS)
    assert got == want and got["devices"] > 1, (got, want)


# XLA's CPU client runs a single-device program of under 1,000 flops on the
# calling thread, and filling memory counts none: `jnp.ones` of 2.2 GB in
# JAX's pmap_test (testSizeOverflow) filled it on the worker's loop, which
# missed its heartbeats on a busy machine. Launches moving 16 MiB or more
# go to the dispatch thread.
FILL = r"""
import json
import jax, jax.numpy as jnp
n = 1 << 32  # 4 GiB of int8 ones: no flops
f = jax.jit(lambda: jnp.ones((n,), jnp.int8))
g = jax.jit(lambda v: v[-1000:].astype(jnp.int32).sum())
f.lower().compile()
g.lower(jax.ShapeDtypeStruct((n,), jnp.int8)).compile()
y = f()
print("RESULT " + json.dumps({"sum": int(g(y))}))
"""


def test_filling_gigabytes_keeps_the_worker_alive():
    want, got = _stock_and_causeway(FILL)
    assert got == want == {"sum": 1000}, (got, want)
