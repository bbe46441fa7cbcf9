"""A cluster started by hand over loopback TCP: workers register, and a JAX
client that joins it with CAUSEWAY_CONTROLLER sees every worker's devices."""
from __future__ import annotations

import pytest

import harness

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
