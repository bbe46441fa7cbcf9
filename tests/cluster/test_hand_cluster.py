"""A cluster started by hand over loopback TCP: workers register, and a JAX
client that joins it with CAUSEWAY_CONTROLLER sees every worker's devices.
Daemons may start in any order: workers started seconds before their
controller register once it listens."""
from __future__ import annotations

import pathlib

import numpy as np
import pytest

import harness

HERE = pathlib.Path(__file__).resolve().parent

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))


def test_client_joins_tcp_cluster():
    cluster = harness.HandCluster(workers=2, devices=2, tcp=True)
    try:
        st = harness.stats(cluster.controller)
        assert st["workers"] == 2, st
        r = harness.Runner("join", harness.causeway_env(controller=cluster.controller))
        try:
            info = r.wait_ready()
            assert info["platform"] == "cpu", info
            assert info["devices"] == 4, info
            inv = r.call("inventory")
            assert sorted(set(inv["workers"])) == ["hand-worker-0", "hand-worker-1"], inv
        finally:
            r.close()
    finally:
        cluster.stop()


def test_workers_before_controller():
    """Workers first (with --exit-with-controller, as the embedded cluster
    starts them: it must not apply before they registered), the controller
    3 s later: both register, and a JAX client compiles and runs on them."""
    cluster = harness.HandCluster(workers=2, devices=2, tcp=True, controller_after_s=3.0,
                                  worker_args=("--exit-with-controller",))
    try:
        assert all(p.poll() is None for p in cluster.procs.values()), cluster.logs()
        assert harness.stats(cluster.controller)["workers"] == 2
        env = harness.causeway_env(controller=cluster.controller)
        env["CW_RUNNER_CHECKS"] = str(HERE / "compile_cache_checks.py")
        r = harness.Runner("late-controller", env)
        try:
            assert r.wait_ready()["devices"] == 4
            x = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
            want = np.tanh(x @ np.ones((4, 2), dtype=np.float32)) * 2.0 + 1.0
            np.testing.assert_allclose(r.call("cc_program", timeout=120), want, rtol=1e-6)
        finally:
            r.close()
    finally:
        cluster.stop()
