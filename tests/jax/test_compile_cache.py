"""JAX's persistent compilation cache (jax_compilation_cache_dir) on causeway:
the plugin serializes an executable as the program and options it was
compiled from (PJRT_Executable_Serialize), and a later process loads it
through the controller (PJRT_Executable_DeserializeAndLoad), whose own
compile cache makes that a lookup. Values match stock JAX."""
import harness
from conftest import plugin_front_only, requires_causeway

pytestmark = [requires_causeway, plugin_front_only(
    "the plugin's PJRT_Executable_Serialize; the proxy front serves no serialization")]

JOB = r"""
import json, sys
import numpy as np
import jax, jax.numpy as jnp
from jax._src import monitoring
hits = []
monitoring.register_event_listener(
    lambda event, **kw: hits.append(event) if event == "/jax/compilation_cache/cache_hits"
    else None)
jax.config.update("jax_compilation_cache_dir", sys.argv[1])
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)
f = jax.jit(lambda x, w: jnp.tanh(x @ w) + jnp.sum(w, axis=0))
x = np.arange(32, dtype=np.float32).reshape(4, 8) / 7
w = np.linspace(-1, 1, 64, dtype=np.float32).reshape(8, 8)
y = np.asarray(f(x, w))
print("RESULT " + json.dumps({"hits": len(hits), "y": y.view(np.uint32).tolist()}))
"""


def _run(env, cache_dir):
    result, text = harness.run_job(JOB, env, str(cache_dir))
    assert "Error reading persistent compilation cache" not in text, text[-6000:]
    assert "Error writing persistent compilation cache" not in text, text[-6000:]
    return result


def test_persistent_cache_across_processes(tmp_path):
    want = _run(harness.stock_env(), tmp_path / "stock")
    env = harness.causeway_env()
    first = _run(env, tmp_path / "causeway")
    entries = sorted(p.name for p in (tmp_path / "causeway").iterdir())
    assert first["hits"] == 0 and any(n.startswith("jit__lambda") for n in entries), entries
    second = _run(env, tmp_path / "causeway")
    assert second["hits"] >= 1, second
    assert first["y"] == want["y"] and second["y"] == want["y"]
