"""jax.distributed.initialize on causeway. Programs written for multi-controller
JAX call it first; with one process it must work as on stock JAX (before
session 41 the process aborted: jaxlib ends it when the plugin refuses
PJRT_Client_UpdateGlobalProcessInfo). Several processes are refused with a
Python error that says why: causeway is a single controller."""
import subprocess

import harness
from conftest import plugin_front_only, requires_causeway

pytestmark = [requires_causeway, plugin_front_only(
    "jax.distributed with the plugin as JAX_PLATFORMS=causeway loads it")]

ONE = """
import jax, jax.numpy as jnp
jax.distributed.initialize("127.0.0.1:{port}", num_processes=1, process_id=0)
print("process_count", jax.process_count(), "process_index", jax.process_index(), flush=True)
print("sum", float(jnp.arange(10.0).sum()), flush=True)
jax.distributed.shutdown()
print("OK", flush=True)
"""

SEVERAL = """
import os, time, jax
jax.distributed.initialize("127.0.0.1:{port}", num_processes=2, process_id={pid})
try:
    print("devices", len(jax.devices()), flush=True)
except Exception as e:
    print("ERROR", type(e).__name__, e, flush=True)
# Process 0 runs the coordination service: it leaves last (jaxlib ends a
# process whose service went away first).
if {pid} == 0:
    time.sleep(3)
os._exit(0)
"""


def _start(code: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([harness.PYTHON, "-c", code], env=env, cwd=str(harness.ROOT),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def _finish(p: subprocess.Popen, timeout: float = 180) -> str:
    try:
        out, _ = p.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
        raise AssertionError(f"hung:\n{out[-4000:]}")
    assert p.returncode == 0, f"exit {p.returncode}:\n{out[-4000:]}"
    return out


def test_one_process_works_as_on_stock():
    outs = {}
    for side, env in (("stock", harness.stock_env()), ("causeway", harness.causeway_env())):
        outs[side] = _finish(_start(ONE.format(port=harness.free_tcp_port()), env))
    for side, out in outs.items():
        assert "process_count 1 process_index 0" in out, (side, out)
        assert "sum 45.0" in out and "OK" in out, (side, out)


def test_several_processes_are_refused_by_name():
    port = harness.free_tcp_port()
    env = harness.causeway_env()
    procs = [_start(SEVERAL.format(port=port, pid=i), env) for i in range(2)]
    outs = [_finish(p) for p in procs]
    for out in outs:
        assert "ERROR RuntimeError" in out, out
        assert "one of 2 JAX processes" in out and "causeway is a single controller" in out, out
