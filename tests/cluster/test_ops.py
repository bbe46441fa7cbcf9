"""`causeway status | pause | resume | drain` against a real hand-started
cluster (controller + 2 workers over loopback TCP) with real JAX clients
(issue 4, items 4 and 5). The JAX side is in ops_checks.py."""
from __future__ import annotations

import json
import os
import pathlib
import subprocess
import time

import numpy as np
import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

CHECKS = str(pathlib.Path(__file__).resolve().parent / "ops_checks.py")


def cli(cluster, *args, env_controller: bool = False, timeout: float = 120, **more_env):
    """Runs the causeway tool; the controller by flag, or by environment."""
    env = {k: v for k, v in os.environ.items() if k != "CAUSEWAY_CONTROLLER"}
    env.update(more_env)
    argv = [os.path.join(harness.bin_dir(), "causeway")]
    if cluster is not None:
        if env_controller:
            env["CAUSEWAY_CONTROLLER"] = cluster.controller
        else:
            argv += ["--controller", cluster.controller]
    return subprocess.run(argv + list(args), env=env, capture_output=True, text=True,
                          timeout=timeout)


def status(cluster) -> dict:
    p = cli(cluster, "status", "--json")
    assert p.returncode == 0, (p.returncode, p.stderr)
    return json.loads(p.stdout)


def runner(cluster, name: str) -> harness.Runner:
    env = harness.causeway_env(controller=cluster.controller)
    env["CW_RUNNER_CHECKS"] = CHECKS
    env["CAUSEWAY_SESSION_NAME"] = name
    r = harness.Runner(name, env)
    return r


def session(st: dict, name: str) -> dict:
    found = [s for s in st["sessions"] if s["name"] == name]
    assert len(found) == 1, st["sessions"]
    return found[0]


def worker(st: dict, name: str) -> dict:
    return next(w for w in st["workers"] if w["name"] == name)


def names_by_index(cluster) -> list[str]:
    return [w["name"] for w in sorted(status(cluster)["workers"], key=lambda w: w["index"])]


def stop_checked(c: harness.HandCluster) -> None:
    """Stops the cluster; every daemon must exit cleanly (under ASan: without
    leaks) on SIGTERM."""
    for p in c.procs.values():
        if p.poll() is None:
            p.terminate()
    codes = {}
    for name, p in c.procs.items():
        try:
            codes[name] = p.wait(timeout=60)
        except subprocess.TimeoutExpired:
            codes[name] = "hung"
    logs = c.logs()
    c.stop()
    assert all(rc == 0 for rc in codes.values()), (codes, logs)


@pytest.fixture
def cluster():
    c = harness.HandCluster(workers=2, devices=2, tcp=True)
    try:
        yield c
    finally:
        stop_checked(c)


def test_status_workers_sessions_buffers_launches_errors(cluster):
    st = status(cluster)
    assert sorted(w["name"] for w in st["workers"]) == ["hand-worker-0", "hand-worker-1"]
    assert all(w["state"] == "alive" and len(w["devices"]) == 2 for w in st["workers"]), st
    assert sorted(d for w in st["workers"] for d in w["devices"]) == [0, 1, 2, 3]
    assert len(st["islands"]) == 2 and st["sessions"] == []
    w0 = names_by_index(cluster)[0]
    r = runner(cluster, "ops-status client")
    try:
        info = r.wait_ready()
        assert info["devices"] == 4, info
        st = status(cluster)
        s = session(st, "ops-status client")
        assert s["devices"] == [0, 1, 2, 3] and s["client_pid"] == r.pid, s
        assert s["paused"] is False and s["buffers"] == 0, s

        # Buffers and bytes: exactly what the client uploaded.
        up = r.call("ops_upload", worker=w0, n=1000)
        assert up["nbytes"] == 4000
        st = status(cluster)
        s = session(st, "ops-status client")
        assert (s["buffers"], s["buffer_bytes"]) == (1, 4000), s
        assert (worker(st, w0)["buffers"], worker(st, w0)["buffer_bytes"]) == (1, 4000), st
        assert worker(st, w0)["stats_fresh"] is True

        # Launches: one warm-up and five more, all on w0.
        r.call("ops_prepare", worker=w0)
        got = r.call("ops_run", k=5)
        assert (got["value"] == chain(5)).all(), got
        # The rate covers the last 5 s of the controller's once-a-second polls.
        assert harness.wait_until(
            lambda: worker(status(cluster), w0)["launches_per_sec"] > 0, 10)
        st = status(cluster)
        assert worker(st, w0)["launches"] == 6, worker(st, w0)
        assert worker(st, w0)["executables"] >= 1
        assert st["compile_cache"]["misses"] >= 1 and st["compile_cache"]["compiles"] >= 1, st
        assert session(st, "ops-status client")["executables"] >= 1

        # A failed compile lands in recent errors.
        out = r.call("cross_island_jit")
        assert out["jit"]["ok"] is False and "spans islands" in out["jit"]["error"], out
        st = status(cluster)
        errs = [e for e in st["recent_errors"] if "spans islands" in e["message"]]
        assert errs and errs[-1]["code"] == "INVALID_ARGUMENT", st["recent_errors"]
        assert errs[-1]["where"].startswith("COMPILE"), errs
        assert errs[-1]["time"].endswith("Z"), errs

        # The table says the same.
        p = cli(cluster, "status", env_controller=True)
        assert p.returncode == 0, p.stderr
        text = p.stdout
        for needle in ("WORKERS", "hand-worker-0", "hand-worker-1", "alive", "ISLANDS",
                       "SESSIONS", "ops-status client", "RECENT ERRORS", "spans islands",
                       "INVALID_ARGUMENT"):
            assert needle in text, (needle, text)
        s = session(status(cluster), "ops-status client")  # nothing runs meanwhile
        row = next(line for line in text.splitlines() if "ops-status client" in line).split()
        assert row[0] == str(s["id"]) and "0-3" in row, row
        assert row[-5:] == [str(s["launches_held"]), str(s["buffers"]), str(s["buffer_bytes"]),
                            str(s["executables"]), str(s["memory_waiting"])], (row, s)
    finally:
        r.close()


def test_failed_compiles_leave_nothing_on_the_worker(cluster):
    """The controller compiles on a private link of its own to the worker. A
    compile that failed there left its error under the executable's id for
    as long as the controller lived: one entry per failed compile, which
    status counted as executables with no session open (the soak audit)."""
    w0 = names_by_index(cluster)[0]
    r = runner(cluster, "ops-failed-compiles")
    try:
        r.wait_ready()
        out = r.call("ops_failed_compiles", worker=w0, n=5)
        assert all("cw_ops_no_such_target" in e for e in out["errors"]), out
    finally:
        r.close()
    # The worker's numbers come from the controller's once-a-second poll.
    assert harness.wait_until(
        lambda: (lambda st: not st["sessions"] and worker(st, w0)["executables"] == 0)(
            status(cluster)), 15), worker(status(cluster), w0)


def harness_arange(n):
    return np.arange(n, dtype=np.float32)


def chain(k: int):
    """f^k(x0) for f(x) = 2x + 1, on the host."""
    x = harness_arange(8)
    for _ in range(k):
        x = x * 2 + 1
    return x


def test_pause_holds_launches_and_resume_releases_them_in_order(cluster):
    w0 = names_by_index(cluster)[0]
    r = runner(cluster, "ops-pause")
    try:
        r.wait_ready()
        r.call("ops_prepare", worker=w0)
        p = cli(cluster, "pause", "ops-pause")
        assert p.returncode == 0 and "paused" in p.stdout, (p.returncode, p.stdout, p.stderr)
        assert r.call("ops_dispatch_chain", k=16)["dispatched"] == 16
        time.sleep(1.0)
        assert r.call("ops_chain_ready") == [False] * 16
        # Held, not lost: the worker counts them.
        assert harness.wait_until(
            lambda: session(status(cluster), "ops-pause")["launches_held"] == 16, 30)
        st = status(cluster)
        s = session(st, "ops-pause")
        assert s["paused"] is True, s
        assert worker(st, w0)["launches_held"] == 16 and worker(st, w0)["queue_depth"] >= 16, st
        row = next(line for line in cli(cluster, "status").stdout.splitlines()
                   if "ops-pause" in line)
        assert " yes " in row and " 16 " in row, row
        # Other requests go on while paused.
        assert r.call("ops_try_upload", worker=w0)["ok"] is True
        assert (r.call("ops_download_x0")["value"] == harness_arange(8)).all()
        assert r.call("ops_chain_ready") == [False] * 16
        # Idempotent; by id as well as by name.
        again = cli(cluster, "pause", str(s["id"]))
        assert again.returncode == 0 and "16 launches held" in again.stdout, again.stdout
        # A download of a held result waits (no reply within a second) ...
        r.submit("ops_chain_collect")
        assert not r.reply_waiting(1.0)
        # ... until the resume releases the launches, in order.
        p = cli(cluster, "resume", str(s["id"]))
        assert p.returncode == 0 and "resumed" in p.stdout, (p.stdout, p.stderr)
        got = r.result()
        assert got["ok"] == [True] * 16, got
        st = status(cluster)
        assert session(st, "ops-pause")["paused"] is False
        assert session(st, "ops-pause")["launches_held"] == 0
        assert cli(cluster, "resume", "ops-pause").returncode == 0  # idempotent
        # A client that dies while paused: its held launches go with it.
        assert cli(cluster, "pause", "ops-pause").returncode == 0
        r.call("ops_dispatch_chain", k=8)
        assert harness.wait_until(
            lambda: worker(status(cluster), w0)["launches_held"] == 8, 30)
        r.kill()
        assert harness.wait_until(lambda: status(cluster)["sessions"] == [], 30)
        assert harness.wait_until(
            lambda: worker(status(cluster), w0)["launches_held"] == 0, 30)
        assert worker(status(cluster), w0)["queue_depth"] == 0
        assert all(w["state"] == "alive" for w in status(cluster)["workers"])
    finally:
        r.close()


def test_drain_finishes_held_work_refuses_new_and_reports_idle(cluster):
    keep, drain = names_by_index(cluster)  # draining index 1 leaves devices 0-1
    a = runner(cluster, "ops-drain-a")
    b = runner(cluster, "ops-drain-b")
    try:
        a.wait_ready()
        b.wait_ready()
        a.call("ops_prepare", worker=drain)
        b.call("ops_prepare", worker=keep)
        # Work arriving at the worker, then the drain: all of it completes.
        a.call("ops_dispatch_chain", k=100)
        assert harness.wait_until(lambda: worker(status(cluster), drain)["launches"] +
                                  worker(status(cluster), drain)["queue_depth"] >= 101, 60)
        p = cli(cluster, "drain", drain, "--wait", "--timeout", "120")
        assert p.returncode == 0 and f"worker {drain} is idle" in p.stdout, (p.stdout, p.stderr)
        assert a.call("ops_chain_collect")["ok"] == [True] * 100
        assert worker(status(cluster), drain)["launches"] == 101
        assert cli(cluster, "undrain", drain).returncode == 0
        # A has work queued on the worker (held by a pause) when the drain starts.
        assert cli(cluster, "pause", "ops-drain-a").returncode == 0
        a.call("ops_dispatch_chain", k=12)
        assert harness.wait_until(
            lambda: session(status(cluster), "ops-drain-a")["launches_held"] == 12, 30)
        p = cli(cluster, "drain", drain)
        assert p.returncode == 0, (p.stdout, p.stderr)
        assert f"worker {drain} is draining: 12 launches queued" in p.stdout, p.stdout
        assert worker(status(cluster), drain)["state"] == "draining"
        p = cli(cluster, "drain", drain, "--wait", "--timeout", "1")
        assert p.returncode == 5 and f"worker {drain} is not idle after 1.0 s" in p.stderr, \
            (p.returncode, p.stderr)
        # Another client's work on the other worker is unaffected.
        assert (b.call("ops_run", k=3)["value"] == chain(3)).all()
        # The held work completes on the draining worker.
        assert cli(cluster, "resume", "ops-drain-a").returncode == 0
        assert a.call("ops_chain_collect")["ok"] == [True] * 12
        p = cli(cluster, "drain", drain, "--wait", "--timeout", "60")
        assert p.returncode == 0 and f"worker {drain} is idle" in p.stdout, (p.stdout, p.stderr)
        st = status(cluster)
        assert worker(st, drain)["state"] == "idle" and worker(st, keep)["state"] == "alive"
        # New work there is refused; downloads still work.
        got = a.call("ops_try_launch")
        assert got["ok"] is False and f"worker {drain} is draining" in got["error"], got
        assert "FAILED_PRECONDITION" in got["error"] or "draining" in got["error"]
        # Launches chained on the refused one carry its error with one
        # prefix (a prefix a launch made the text, and dispatch, grow without
        # bound: 16,000 steps took 13 s and made a 384 kB text, an audit).
        got = a.call("ops_chain_after_failure", k=2000)
        assert got["ok"] is False and f"worker {drain} is draining" in got["last"], got
        assert got["last"].count("input 0 of") == 1 and len(got["last"]) < 1000, got
        got = a.call("ops_try_upload", worker=drain)
        assert got["ok"] is False and f"worker {drain} is draining" in got["error"], got
        assert (a.call("ops_download_x0")["value"] == harness_arange(8)).all()
        assert b.call("ops_try_launch")["ok"] is True
        # A new session does not get the draining worker's devices.
        c = runner(cluster, "ops-drain-c")
        try:
            c.wait_ready()
            assert c.call("ops_devices") == {"ids": [0, 1], "workers": [keep]}
        finally:
            c.close()
        # Nor one that asks for devices: four are there only with the draining
        # worker's, so it waits in the queue (here until its timeout); it was
        # granted them and failed at its first compile (an audit).
        p = subprocess.run(
            [harness.PYTHON, "-c", "import jax; print('devices', len(jax.devices()))"],
            env={**harness.causeway_env(controller=cluster.controller), "CAUSEWAY_DEVICES": "4",
                 "CAUSEWAY_QUEUE_TIMEOUT": "2"}, capture_output=True, text=True, timeout=120)
        assert p.returncode != 0 and "waited" in p.stderr and "for 4 devices" in p.stderr, \
            (p.returncode, p.stdout, p.stderr[-3000:])
        p = cli(cluster, "undrain", drain)
        assert p.returncode == 0 and "takes work again" in p.stdout, (p.stdout, p.stderr)
        assert worker(status(cluster), drain)["state"] == "alive"
        assert a.call("ops_try_launch")["ok"] is True
    finally:
        a.close()
        b.close()


def test_cli_errors_and_exit_codes(cluster):
    p = cli(cluster, "pause", "424242")
    assert p.returncode == 4, (p.returncode, p.stderr)
    assert "NOT_FOUND: session 424242 not found; open sessions: none" in p.stderr, p.stderr
    p = cli(cluster, "resume", "no-such-session")
    assert p.returncode == 4 and "session 'no-such-session' not found" in p.stderr, p.stderr
    p = cli(cluster, "drain", "no-such-worker")
    assert p.returncode == 4 and "worker 'no-such-worker' not found; workers: " in p.stderr
    assert "hand-worker-0" in p.stderr and "hand-worker-1" in p.stderr, p.stderr
    # The failures are recent errors too.
    assert any("424242" in e["message"] for e in status(cluster)["recent_errors"])
    port = harness.free_tcp_port()
    p = cli(None, "--controller", f"127.0.0.1:{port}", "status")
    assert p.returncode == 3, (p.returncode, p.stderr)
    assert f"cannot reach the controller at 127.0.0.1:{port}" in p.stderr, p.stderr
    p = cli(None, "status")
    assert p.returncode == 2 and "no controller address" in p.stderr, p.stderr
    p = cli(cluster, "frobnicate")
    assert p.returncode == 2 and "unknown command 'frobnicate'" in p.stderr, p.stderr
    p = cli(cluster, "pause")
    assert p.returncode == 2 and "pause needs a SESSION id or name" in p.stderr, p.stderr
    p = cli(None, "--help")
    assert p.returncode == 0 and "exit codes" in p.stdout


def test_cli_gives_up_on_a_hung_controller(cluster):
    """A controller that answers HELLO and then nothing held `causeway status`
    (and `up`'s wait) forever (an audit). The tool takes such a controller for
    hung after CAUSEWAY_CONTROLLER_TIMEOUT_MS, as the plugin does."""
    relay = harness.TcpRelay(cluster.controller, down_chunks=1)  # the HELLO answer only
    try:
        t = time.monotonic()
        p = cli(None, "--controller", relay.address, "status", timeout=60,
                CAUSEWAY_CONTROLLER_TIMEOUT_MS="1000")
        took = time.monotonic() - t
    finally:
        relay.close()
    assert p.returncode == 1, (p.returncode, p.stderr)
    assert f"no answer from {relay.address} for" in p.stderr and "the client waits 1000 ms" in p.stderr, \
        p.stderr
    print(f"hung controller: status gave up after {took:.1f} s: {p.stderr.strip()[:200]}")
