"""Floods and slow peers cannot deny service (issue 11 item 2).

A hand-started TCP cluster (a controller with its metrics port, one worker,
a token). A JAX client with the token starts, trains (checks.train_mlp) and
exits: twice with nobody else around (its idle time, the better run), then
twice while flooders
(tests/flood/flood.py, one process per target) hold 5,000 silent connections
and 100 slowloris peers each against the worker, the controller and the
controller's metrics port, opening again whatever the daemons close (at nice
10, flood.py). The flooded clients must connect, train and give the idle
runs' losses bit for bit, and metrics scrapes must still be answered. How
much slower the flooded runs are is measured, not asserted (a busy CI
machine moves it: 2.36x in one run beside other tests): both times, their
ratio and the scrapes' times are printed (and written to $CW_FLOOD_REPORT
when set).

Open files: the test raises its own soft RLIMIT_NOFILE to the hard limit
(the daemons inherit it, and raise theirs to --max-connections + 256 in
cw_net_listen anyway); each flooder raises its own and holds what fits.
"""
from __future__ import annotations

import json
import os
import pathlib
import resource
import subprocess
import sys
import time
import urllib.request

import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

HERE = pathlib.Path(__file__).resolve().parent
TOKEN = "flood-test-token-51c2"
STEPS = 200
SILENT = 5000
SLOW = 100


def _raise_nofile() -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard != resource.RLIM_INFINITY and soft < hard:
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


@pytest.fixture(scope="module")
def cluster():
    _raise_nofile()
    metrics = f"127.0.0.1:{harness.free_tcp_port()}"
    c = harness.HandCluster(workers=1, devices=4, tcp=True, token=TOKEN,
                            controller_args=("--metrics-listen", metrics))
    c.metrics = metrics
    yield c
    c.stop()


def _client_env(cluster) -> dict:
    env = harness.causeway_env(controller=cluster.controller)
    env.pop("CAUSEWAY_TOKEN_FILE", None)
    env["CAUSEWAY_TOKEN"] = TOKEN
    return env


def _train(cluster, name: str) -> tuple[float, dict]:
    """Seconds from starting a JAX client to its exit, and its training result."""
    t0 = time.monotonic()
    r = harness.Runner(name, _client_env(cluster))
    try:
        r.wait_ready()
        out = r.call("train_mlp", timeout=300, steps=STEPS)
    finally:
        r.close()
    return time.monotonic() - t0, out


def _scrape(cluster) -> float:
    t0 = time.monotonic()
    with urllib.request.urlopen(f"http://{cluster.metrics}/metrics", timeout=10) as resp:
        body = resp.read().decode()
        assert resp.status == 200
    assert "causeway_" in body
    return time.monotonic() - t0


def _start_flooder(target: str, kind: str) -> subprocess.Popen:
    p = subprocess.Popen([sys.executable, str(HERE / "flood.py"), "--target", target,
                          "--kind", kind, "--silent", str(SILENT), "--slow", str(SLOW)],
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                         start_new_session=True)
    line = p.stdout.readline()
    assert line, p.stderr.read()
    info = json.loads(line)
    assert info.get("ready"), info
    return p


def _stop_flooder(p: subprocess.Popen) -> dict:
    p.terminate()
    out, err = p.communicate(timeout=30)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert lines, err
    return json.loads(lines[-1])


def test_flood_does_not_deny_service(cluster):
    nofile = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    # Warm up (the compile cache, the page cache), then the idle time: the
    # best of two runs each way (a loaded CI machine makes single runs noisy).
    _train(cluster, "flood-warmup")
    idle_runs = [_train(cluster, f"flood-idle-{i}") for i in range(2)]
    idle, want = min(idle_runs, key=lambda r: r[0])
    idle_scrapes = [_scrape(cluster) for _ in range(3)]

    flooders = [_start_flooder(cluster.addresses["hand-worker-0"], "wire"),
                _start_flooder(cluster.controller, "wire"),
                _start_flooder(cluster.metrics, "http")]
    try:
        time.sleep(2.0)  # the first wave is accepted and the budgets are full
        flooded_runs = [_train(cluster, f"flood-flooded-{i}") for i in range(2)]
        flooded_scrapes = [_scrape(cluster) for _ in range(3)]
    finally:
        counts = [_stop_flooder(p) for p in flooders]
    flooded = min(r[0] for r in flooded_runs)

    report = {"idle_s": round(idle, 2), "flooded_s": round(flooded, 2),
              "ratio": round(flooded / idle, 2),
              "idle_runs_s": [round(r[0], 2) for r in idle_runs],
              "flooded_runs_s": [round(r[0], 2) for r in flooded_runs],
              "idle_scrape_ms": [round(t * 1000, 1) for t in idle_scrapes],
              "flooded_scrape_ms": [round(t * 1000, 1) for t in flooded_scrapes],
              "nofile": nofile, "flooders": counts}
    print("\nflood report: " + json.dumps(report))
    if os.environ.get("CW_FLOOD_REPORT"):
        with open(os.environ["CW_FLOOD_REPORT"], "w") as f:
            json.dump(report, f, indent=1)

    for _, out in idle_runs + flooded_runs:
        harness.assert_same(want, out)  # the same training, bit for bit
    for c in counts:
        # The flood was real: every flooder held its connections and the
        # daemon kept closing them to make room.
        assert c["silent_wanted"] >= min(SILENT, nofile - 300), c
        assert c["connects"] > c["silent_wanted"], c
        assert c["closed_by_target"] > 0, c
    # Nobody crashed, and the daemons said what they did, in few lines.
    for name, p in cluster.procs.items():
        assert p.poll() is None, (name, cluster.log(name))
    for name in ("controller", "hand-worker-0"):
        log = cluster.log(name)
        assert "closing the oldest connection without HELLO to make room" in log, log[-3000:]
        assert log.count("to make room") < 200, log.count("to make room")
