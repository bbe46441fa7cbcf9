"""The launch path (issue 3): with the controller's lease (WorkerInfo.direct_launch)
the client sends LAUNCH straight to the worker; with --relay-launches every
launch goes through the controller. Both give the same results, and the
controller's STATS say which path the launches took."""
from __future__ import annotations

import os

import numpy as np
import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "launch_path_checks.py")
CHAIN = 2000
STEPS = 30


def _run(relay: bool) -> tuple[dict, dict, dict]:
    # Explicit both ways: the flag wins over a CAUSEWAY_RELAY_LAUNCHES in the environment.
    cluster = harness.HandCluster(
        workers=2, devices=2,
        controller_args=("--relay-launches" if relay else "--relay-launches=0",))
    try:
        env = harness.causeway_env(controller=cluster.controller)
        env["CW_RUNNER_CHECKS"] = CHECKS
        r = harness.Runner("relay" if relay else "direct", env)
        try:
            r.wait_ready()
            chain = r.call("launch_chain", n=CHAIN)
            train = r.call("train_mlp", steps=STEPS)
        finally:
            r.close()
        return chain, train, harness.stats(cluster.controller)
    except BaseException:
        print(cluster.logs())
        raise
    finally:
        cluster.stop()


@pytest.fixture(scope="module")
def both():
    return {"direct": _run(relay=False), "relay": _run(relay=True)}


def _check_results(chain: dict, train: dict) -> None:
    np.testing.assert_array_equal(chain["x"], np.arange(8, dtype=np.float32) + CHAIN)
    losses = np.asarray(train["losses"])
    assert losses.shape == (STEPS,), losses.shape
    assert np.all(np.isfinite(losses)), losses
    assert losses[-1] < losses[0], losses


def test_direct_launches_bypass_the_controller(both):
    chain, train, st = both["direct"]
    _check_results(chain, train)
    # Every launch went straight to the workers: the controller relayed none.
    assert st.get("launches", 0) == 0, st
    assert st.get("compiles", 0) >= 2, st


def test_relayed_launches_go_through_the_controller(both):
    chain, train, st = both["relay"]
    _check_results(chain, train)
    # The chain's CHAIN launches and the training's STEPS, all relayed.
    assert st.get("launches", 0) >= CHAIN + STEPS, st


def test_both_paths_compute_the_same(both):
    (dc, dt, _), (rc, rt, _) = both["direct"], both["relay"]
    np.testing.assert_array_equal(dc["x"], rc["x"])
    np.testing.assert_array_equal(np.asarray(dt["losses"]), np.asarray(rt["losses"]))
    for a, b in zip(dt["params"], rt["params"]):
        np.testing.assert_array_equal(a["w"], b["w"])
        np.testing.assert_array_equal(a["b"], b["b"])
