"""The examples run on the embedded cluster (each checks itself against stock JAX)."""
import subprocess

import harness
from conftest import plugin_front_only, requires_causeway

pytestmark = [requires_causeway, plugin_front_only(
    "the examples as JAX_PLATFORMS=causeway runs them; the main job through the "
    "proxy is in tests/proxy")]


def _run(script, *args, timeout=300):
    env = harness.causeway_env()
    out = subprocess.run([harness.PYTHON, str(harness.ROOT / "examples" / script), *args],
                         env=env, cwd=str(harness.ROOT), capture_output=True, text=True,
                         timeout=timeout)
    text = out.stdout + out.stderr
    assert out.returncode == 0, f"{script} exited {out.returncode}:\n{text[-6000:]}"
    return out.stdout


def test_quickstart():
    out = _run("quickstart.py")
    assert f"{harness.NUM_DEVICES} devices in 1 process" in out, out
    assert "moved to island 1" in out, out


def test_train_two_islands():
    out = _run("train_two_islands.py", "--steps", "10")
    assert "stage 1 activations  on island 0" in out and "stage 2 loss         on island 1" in out
    assert "OK: 10 losses match stock JAX bit for bit" in out, out
