"""Sessions and allocation, gang order and weights (issue 4, items 1-2).

Real controller and workers started by hand, several real JAX clients at
once (each a Runner process), each asking for devices with CAUSEWAY_DEVICES
and friends. Assertions are on what JAX sees (device attributes), results
against numpy, error texts, and the launch-order records that the controller
and the workers keep (Stats.sched_stamps)."""
from __future__ import annotations

import os
import time

import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "alloc_checks.py")


def client(name, cluster, lazy=False, **alloc):
    env = harness.causeway_env(controller=cluster.controller)
    env["CW_RUNNER_CHECKS"] = CHECKS
    for k, v in alloc.items():
        env[f"CAUSEWAY_{k.upper()}"] = str(v)
    if lazy:
        env["CW_RUNNER_LAZY"] = "1"
    return harness.Runner(name, env)


def close_all(runners):
    for r in runners:
        try:
            r.close()
        except Exception:  # noqa: BLE001 - best effort
            pass


# ---- Stats.sched_stamps ----------------------------------------------------------------

def sched_record(address):
    """[(island, stamp, session_id)] from a controller's or worker's STATS."""
    st = harness.stats(address)
    out = []
    for field, wt, val in harness._pb_fields(st["raw"]):
        if field == 30 and wt == 2:
            rec = {1: 0, 2: 0, 3: 0}
            for f2, _, v2 in harness._pb_fields(val):
                rec[f2] = v2
            out.append((rec[1], rec[2], rec[3]))
    return out


# ---- Allocation ---------------------------------------------------------------------------

def test_exclusive_sessions_queue_and_errors():
    cluster = harness.HandCluster(workers=2, devices=4)
    runners = []
    try:
        a = client("alloc-a", cluster, devices=4)
        b = client("alloc-b", cluster, devices=4)
        runners += [a, b]
        ia, ib = a.call("alloc_devices"), b.call("alloc_devices")
        # Each sees exactly 4 devices, numbered 0..3, all on one worker; the two
        # sessions got different workers (exclusive).
        for info in (ia, ib):
            assert info["ids"] == [0, 1, 2, 3], info
            assert len(set(info["workers"])) == 1, info
            assert sorted(info["local"]) == [0, 1, 2, 3], info
        assert ia["workers"][0] != ib["workers"][0], (ia, ib)
        for r in (a, b):
            res = r.call("alloc_compute", seed=3)
            assert res["ok"] and res["n"] == 4, res
        # A third waits in the queue and says why on stderr.
        c = client("alloc-c", cluster, lazy=True, devices=4)
        runners.append(c)
        c.submit("backend_init")
        assert harness.wait_until(lambda: "causeway: waiting for 4 devices (0 of 8 free; 0 "
                                  "sessions ahead in the queue)" in c.log_text(), 60), c.log_tail()
        assert harness.stats(cluster.controller)["alloc_queue"] == 1
        # A timed wait behind it fails with DEADLINE_EXCEEDED naming what was asked.
        d = client("alloc-d", cluster, lazy=True, devices=2, queue_timeout=1.5)
        runners.append(d)
        got = d.call("backend_init", timeout=120)
        assert not got["ok"], got
        assert "waited 1." in got["error"] and "for 2 devices: 0 of 8 matching devices free, " \
            "1 session ahead in the queue" in got["error"], got
        assert "DEADLINE_EXCEEDED" in got["error"] or "deadline" in got["error"].lower(), got
        # One exits: the waiting one gets its worker.
        freed = ia["workers"][0]
        a.close()
        got = c.result(timeout=120)
        assert got["ok"] and got["devices"] == 4, got
        ic = c.call("alloc_devices")
        assert set(ic["workers"]) == {freed}, (ic, freed)
        assert c.call("alloc_compute", seed=4)["ok"]
        assert harness.stats(cluster.controller)["alloc_queue"] == 0
        # Requests that can never be met fail at once.
        for alloc, text in (({"devices": 9}, "asks for 9 devices; the matching workers have 8"),
                            ({"devices": 1, "workers": "nope"},
                             "unknown worker 'nope' (workers: hand-worker-"),
                            ({"devices": 1, "platform": "tpu"},
                             "no worker has platform 'tpu' (platforms: cpu)"),
                            ({"devices": 5, "min_island": 5},
                             "asks for islands of at least 5 devices; the largest matching "
                             "island has 4"),
                            ({"devices": "abc"}, "CAUSEWAY_DEVICES=abc: want a whole number"),
                            ({"devices": 2, "share": 2}, "CAUSEWAY_SHARE=2"),
                            ({"devices": 2, "queue_timeout": "-1"}, "CAUSEWAY_QUEUE_TIMEOUT=-1"),
                            ({"share": 1}, "need CAUSEWAY_DEVICES")):
            e = client("alloc-bad", cluster, lazy=True, **alloc)
            try:
                got = e.call("backend_init", timeout=60)
            finally:
                e.close()
            assert not got["ok"] and text in got["error"], (alloc, got)
            assert got["elapsed"] < 20, got
    finally:
        close_all(runners)
        cluster.stop()


def test_named_workers_and_sharing_placement():
    cluster = harness.HandCluster(workers=2, devices=4)
    runners = []
    try:
        # Named worker; two sharers of one island pack onto the same devices.
        a = client("named", cluster, devices=2, workers="hand-worker-1")
        s1 = client("share-1", cluster, devices=4, share=1, workers="hand-worker-0")
        s2 = client("share-2", cluster, devices=4, share=1)
        runners += [a, s1, s2]
        ia = a.call("alloc_devices")
        assert set(ia["workers"]) == {"hand-worker-1"} and ia["ids"] == [0, 1], ia
        i1, i2 = s1.call("alloc_devices"), s2.call("alloc_devices")
        assert set(i1["workers"]) == {"hand-worker-0"} and set(i2["workers"]) == {"hand-worker-0"}
        # An exclusive request cannot take shared devices: 2 left on worker 1.
        e = client("excl", cluster, lazy=True, devices=3, queue_timeout=1)
        runners.append(e)
        got = e.call("backend_init", timeout=60)
        assert not got["ok"] and "2 of 8 matching devices free" in got["error"], got
        for r in (a, s1, s2):
            assert r.call("alloc_compute", seed=5)["ok"]
    finally:
        close_all(runners)
        cluster.stop()
