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


def test_default_disk_cache_off_when_home_is_read_only():
    """The embedded controller's compile cache on disk defaults to
    ~/.cache/causeway/compile. With a HOME nobody may write (a container's
    user with HOME=/), the controller refused to start and JAX with it (an
    audit). The default is made only if it can be: otherwise a warning, and
    the disk cache is off."""
    env = harness.causeway_env()
    env.pop("CAUSEWAY_COMPILE_CACHE_DIR", None)
    env.pop("XDG_CACHE_HOME", None)
    env["HOME"] = "/proc"  # no directory can be made there, not even by root
    code = "import json, jax.numpy as jnp\n" \
           "print('RESULT ' + json.dumps(float(jnp.sum(jnp.arange(8.0) * 2))))\n"
    got, text = harness.run_job(code, env)
    assert got == 56.0, text[-4000:]
    assert "causeway: the compile cache on disk is off: directory /proc/.cache/causeway/compile" \
        in text, text[-4000:]
