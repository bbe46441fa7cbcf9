"""A long `x = f(x)` chain with a tiny seq hold cap on the workers.

Each step sends a LAUNCH through the controller (two hops) and a DELETE of the
old x straight to the worker (one hop): the DELETEs run ahead and wait on the
worker for their seq. Past CAUSEWAY_MAX_HELD_REQUESTS the worker must stop reading
that connection (flow control), not refuse a request: a refused seq is a hole
nobody fills, and every later LAUNCH waited forever (docs/protocol.md,
"Ordering across connections (seq)")."""
import subprocess

import pytest

import harness
from conftest import plugin_front_only

PROGRAM = """
import jax, jax.numpy as jnp
f = jax.jit(lambda x: x + 1)
x = jnp.zeros(4)
for i in range(3000):
    x = f(x)
print("RESULT", [float(v) for v in x])
"""


@pytest.mark.skipif(not harness.on_causeway(), reason="exercises causeway's worker seq gate")
@plugin_front_only("a JAX_PLATFORMS=causeway program with a small hold cap")
def test_long_chain_small_hold_cap():
    why = harness.missing_build()
    if why:
        pytest.fail(f"causeway is not built: {why}", pytrace=False)
    env = harness.causeway_env()
    env["CAUSEWAY_MAX_HELD_REQUESTS"] = "64"  # inherited by the embedded cluster's workers
    try:
        p = subprocess.run([harness.PYTHON, "-c", PROGRAM], env=env, capture_output=True,
                           text=True, timeout=240)
    except subprocess.TimeoutExpired as e:
        pytest.fail(f"x = f(x) chain hung (seq hole?)\n{(e.stderr or '')[-4000:]}")
    assert p.returncode == 0, f"exit {p.returncode}\n{p.stderr[-4000:]}"
    assert "RESULT [3000.0, 3000.0, 3000.0, 3000.0]" in p.stdout, p.stdout[-2000:] + p.stderr[-2000:]
