"""The embedded cluster's layout (issue 10 item 7): one island of every local
device by default, so Mesh(jax.devices()) works as on stock JAX, sized as JAX
asks (jax_num_cpu_devices, else --xla_force_host_platform_device_count, else
8); JAX_PLATFORMS=causeway,cpu as users combine backends. The rest of the
suite asks for two islands explicitly (harness.causeway_env)."""
import pytest

import harness
from conftest import plugin_front_only
from test_types import ref  # noqa: F401 - stock JAX with types_checks.py, a fixture

CHECKS = str(harness.HERE / "types_checks.py")
pytestmark = [pytest.mark.skipif(not harness.on_causeway(),
                                 reason="the embedded cluster's layout exists only on causeway"),
              plugin_front_only("the layout the plugin gives its own embedded cluster")]


def _env(**extra) -> dict:
    env = harness.causeway_env()
    # The defaults under test: no layout asked for.
    del env["CAUSEWAY_LOCAL_WORKERS"], env["CAUSEWAY_LOCAL_DEVICES"]
    env["CW_RUNNER_CHECKS"] = CHECKS
    env.update(extra)
    return env


@pytest.fixture(scope="module")
def runners():
    if harness.missing_build():
        pytest.fail(f"causeway is not built: {harness.missing_build()}", pytrace=False)
    # Started together: each imports JAX and starts its own embedded cluster.
    rs = {"default": harness.Runner("causeway-layout-default", _env()),
          "flag": harness.Runner("causeway-layout-flag", _env(
              JAX_PLATFORMS="causeway,cpu",
              XLA_FLAGS="--xla_force_host_platform_device_count=4")),
          "config": harness.Runner("causeway-layout-config", _env(
              JAX_NUM_CPU_DEVICES="2",
              XLA_FLAGS="--xla_force_host_platform_device_count=6"))}
    yield rs
    for r in rs.values():
        r.close()


def _layout(runner) -> dict:
    runner.submit("layout")
    return runner.result()


def test_one_island_by_default(ref, runners):
    got = _layout(runners["default"])
    assert got["num_devices"] == 8 and got["islands"] == [8], got
    assert len(got["workers"]) == 1, got
    assert got["default_backend"] == "causeway" and "cpu" in got["backends"], got
    # Mesh(jax.devices()) and a jit over it, as on stock JAX with 8 devices.
    want, got = harness.run_both(ref, runners["default"], "mesh_all")
    harness.assert_same(want, got, "mesh_all")


def test_xla_flag_sizes_the_island(runners):
    got = _layout(runners["flag"])
    assert got["num_devices"] == 4 and got["islands"] == [4], got
    # JAX_PLATFORMS=causeway,cpu: causeway first, so the default backend.
    assert got["default_backend"] == "causeway" and got["backends"] == ["causeway", "cpu"], got
    runners["flag"].submit("mesh_all")
    assert runners["flag"].result()["n"] == 4


def test_jax_config_wins_over_the_flag(runners):
    got = _layout(runners["config"])
    assert got["num_devices"] == 2 and got["islands"] == [2], got
