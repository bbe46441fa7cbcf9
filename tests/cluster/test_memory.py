"""Memory back-pressure (issue 11 item 4) with real JAX clients: a
hand-started controller and one worker with --memory-limit 64 MiB per
device, two sessions whose working sets together exceed it. The JAX side is
in memory_checks.py; results are compared with numpy (f(x) = 2x + 1 on
integer-valued floats is exact).

- An upload that does not fit waits until the other session frees memory;
  meanwhile `causeway status` shows the waiting (worker and session) and the
  other session's launches keep running. Then a launch that does not fit
  waits the same way. Both sessions finish with correct results. Run with
  launches straight to the worker and, with --relay-launches, through the
  controller's island queue (stamped: a waiting launch passes its turn).
- An upload bigger than the budget fails at once with RESOURCE_EXHAUSTED
  naming the sizes and the budget.
- With --memory-wait-ms 2000 a wait that never ends fails with
  RESOURCE_EXHAUSTED naming what it waited for; the session goes on.
- A client killed while its upload waits for memory (the worker reads
  nothing more of that connection) leaves no session, wait or buffer: its
  EOF is not read, the next keepalive write to it fails.

The clients watch their worker links with a 1 s CAUSEWAY_WORKER_LINK_TIMEOUT_MS,
shorter than the waits: a worker that holds a connection's reading while an
upload waits for memory keeps the link warm (its keepalives), so the wait is
not taken for a lost link.
"""
from __future__ import annotations

import contextlib
import os
import pathlib
import subprocess
import tempfile
import time

import pytest

import harness
from test_ops import cli, session, status, stop_checked, worker

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

CHECKS = str(pathlib.Path(__file__).resolve().parent / "memory_checks.py")
MIB = 1 << 20
BUDGET = 64 * MIB
W = "hand-worker-0"
LINK_TIMEOUT_MS = 1000


def runner(cluster, name: str) -> harness.Runner:
    env = harness.causeway_env(controller=cluster.controller)
    env["CW_RUNNER_CHECKS"] = CHECKS
    env["CAUSEWAY_SESSION_NAME"] = name
    env["CAUSEWAY_WORKER_LINK_TIMEOUT_MS"] = str(LINK_TIMEOUT_MS)
    return harness.Runner(name, env)


def make_cluster(wait_ms: int, relay: bool = False) -> harness.HandCluster:
    return harness.HandCluster(workers=1, devices=2, tcp=True,
                               controller_args=("--relay-launches",) if relay else (),
                               worker_args=("--memory-limit", str(BUDGET),
                                            "--memory-wait-ms", str(wait_ms)))


# Launches straight to the worker (sessions that asked for no devices), or
# all through the controller's island queue, stamped (--relay-launches).
@pytest.fixture(params=["direct", "relayed"])
def cluster(request):
    c = make_cluster(120000, relay=request.param == "relayed")
    c.relay = request.param == "relayed"
    try:
        yield c
    finally:
        stop_checked(c)


def waiting_seen(cluster, name: str, bytes_: int) -> dict:
    """Polls `causeway status --json` until session `name` waits for memory
    on the worker; returns that status."""
    seen = {}

    def check():
        st = status(cluster)
        w = worker(st, W)["memory"]
        s = session(st, name)
        if w["waiting"] >= 1 and w["waiting_bytes"] >= bytes_ and s["memory_waiting"] >= 1:
            seen["st"] = st
            return True
        return False
    assert harness.wait_until(check, 60), status(cluster)
    return seen["st"]


def test_two_sessions_over_the_budget_both_finish(cluster):
    a, b = runner(cluster, "mem-a"), runner(cluster, "mem-b")
    try:
        a.wait_ready()
        b.wait_ready()
        st = status(cluster)
        m = worker(st, W)["memory"]
        assert (m["budget_per_device"], m["budget_source"]) == (BUDGET, "--memory-limit"), m

        # 1. a holds 48 MiB; b's 24 MiB upload does not fit (72 > 64): it waits.
        assert a.call("mem_hold", name="big", mib=48)["ok"]
        b.submit("mem_hold", name="x", mib=24, seed=1)
        st = waiting_seen(cluster, "mem-b", 24 * MIB)
        m = worker(st, W)["memory"]
        assert m["in_use"] >= 48 * MIB and m["in_use_max_device"] >= 48 * MIB, m
        assert session(st, "mem-a")["memory_waiting"] == 0
        # The table says so too: the MEMORY row and mem-b's MEMWAIT column.
        text = cli(cluster, "status").stdout
        print(text)
        mem_row = next(line for line in text.split("MEMORY\n")[1].splitlines()
                       if line.startswith(W)).split()
        assert mem_row[1:3] == ["64", "MiB"] and mem_row[-1] == "--memory-limit", mem_row
        b_row = next(line for line in text.splitlines() if "mem-b" in line).split()
        assert b_row[-1] == "1", b_row
        # The worker serves a meanwhile: its launches run (small ones fit).
        got = a.call("mem_steps", k=20)
        assert got["ok"], got
        assert not b.reply_waiting(0.5)  # b still waits
        # Its link unread for longer than its watchdog's limit: still alive.
        time.sleep(2.5 * LINK_TIMEOUT_MS / 1000)
        # a frees its 48 MiB: b's upload goes in, its bytes intact.
        a.call("mem_release", name="big")
        got = b.result(timeout=120)
        assert got["ok"] and got["seconds"] > 2.5 * LINK_TIMEOUT_MS / 1000, got

        # 2. a holds 24 MiB again (24 + 24 < 64); b's launch f(x) needs 24
        # MiB more for its output: it waits in the worker's queue (relayed:
        # stamped by the controller, it passes its turn), while a's launches
        # run.
        assert a.call("mem_hold", name="again", mib=24, seed=2)["ok"]
        b.submit("mem_apply", src="x", dst="y")
        waiting_seen(cluster, "mem-b", 24 * MIB)
        got = a.call("mem_steps", k=20)
        # Not held behind b's turn (the gang order's stall recovery takes 5 s).
        assert got["ok"] and got["seconds"] < 4.5, got
        assert not b.reply_waiting(0.5)
        a.call("mem_release", name="again")
        got = b.result(timeout=120)
        assert got["ok"] and got["seconds"] > 0.5, got  # y = f(x), exact
        assert b.call("mem_check", name="x")["ok"]
        relayed = status(cluster)["launches_relayed"]
        assert (relayed > 40) if cluster.relay else (relayed == 0), relayed

        # 3. Bigger than the budget: refused at once, naming sizes and budget.
        got = b.call("mem_try_hold", name="huge", mib=80)
        print("too big:", got)
        assert got["error"] and "RESOURCE_EXHAUSTED" in got["error"], got
        assert ("needs 80 MiB on device 0; the worker's budget is 64 MiB per device "
                "(--memory-limit)") in got["error"], got
        assert got["seconds"] < 15, got
        assert b.call("mem_check", name="y")["ok"]  # the session goes on
        st = status(cluster)
        m = worker(st, W)["memory"]
        assert m["waits"] >= 2 and m["refused"] >= 1 and m["waiting"] == 0, m
    finally:
        a.close()
        b.close()
    # Both sessions are gone: their memory is free again.
    assert harness.wait_until(lambda: worker(status(cluster), W)["memory"]["in_use"] == 0, 30), \
        status(cluster)


@contextlib.contextmanager
def one_holds_48_mib(memory_wait_ms: int):
    """A cluster of --memory-wait-ms `memory_wait_ms` whose session mem-a holds
    48 MiB of the worker's 64 MiB, and session mem-b beside it."""
    c = make_cluster(memory_wait_ms)
    a = b = None
    try:
        a, b = runner(c, "mem-a"), runner(c, "mem-b")
        a.wait_ready()
        b.wait_ready()
        assert a.call("mem_hold", name="big", mib=48)["ok"]
        yield c, a, b
    finally:
        for r in (a, b):
            if r is not None:
                r.close()
        stop_checked(c)


def test_killed_waiter_leaves_nothing_on_the_worker():
    # A soak audit's case: while an upload waits for memory the worker reads
    # nothing more of that connection, so it does not see the client's EOF;
    # its next keepalive write fails instead. A waiter killed so must leave no
    # session, wait or buffer behind, and the other session's memory is all
    # that stays in use.
    with one_holds_48_mib(120000) as (c, a, b):
        b.submit("mem_hold", name="x", mib=24, seed=1)
        waiting_seen(c, "mem-b", 24 * MIB)
        b.kill()

        def only_a_left():
            st = status(c)
            w, m = worker(st, W), worker(st, W)["memory"]
            if [s["name"] for s in st["sessions"]] != ["mem-a"]:
                return False
            a_st = session(st, "mem-a")
            return (m["waiting"] == 0 and m["waiting_bytes"] == 0
                    and (w["buffers"], w["buffer_bytes"]) == (a_st["buffers"], a_st["buffer_bytes"])
                    and m["in_use"] >= 48 * MIB)
        assert harness.wait_until(only_a_left, 30), status(c)
        a.call("mem_release", name="big")
        got = a.call("mem_steps", k=5)  # the session goes on
        assert got["ok"], got


def test_wait_that_never_ends_times_out():
    with one_holds_48_mib(2000) as (c, a, b):
        t0 = time.monotonic()
        got = b.call("mem_try_hold", name="x", mib=24)
        took = time.monotonic() - t0
        print("timed out:", got)
        assert got["error"] and "RESOURCE_EXHAUSTED" in got["error"], got
        assert ("waited 2000 ms (--memory-wait-ms) for 24 MiB on device 0, and it did not "
                "free: 48 MiB of the worker's budget of 64 MiB per device (--memory-limit) are "
                "in use") in got["error"], got
        assert 1.5 < took < 60, took
        # The session goes on: what fits is stored.
        assert b.call("mem_hold", name="x", mib=8)["ok"]
        assert a.call("mem_steps", k=5)["ok"]
        assert worker(status(c), W)["memory"]["wait_timeouts"] >= 1


CGROUP_V1_MEMORY = "/sys/fs/cgroup/memory"
CGROUP_V1_PIDS = "/sys/fs/cgroup/pids"


def _cgroup_usable(controller: str) -> bool:
    """Root, and a cgroup v1 controller mounted where we can make groups."""
    return (os.geteuid() == 0 and os.path.exists(os.path.join(controller, "cgroup.procs"))
            and os.access(controller, os.W_OK))


def _remove_cgroup(group: str) -> None:
    """Its directory goes once its last process has been reaped."""
    for _ in range(50):
        try:
            os.rmdir(group)
            return
        except OSError:
            time.sleep(0.1)


@pytest.mark.skipif(not _cgroup_usable(CGROUP_V1_MEMORY),
                    reason="needs root and cgroup v1's memory controller at /sys/fs/cgroup/memory "
                           "(to start a worker inside a memory limit)")
def test_staging_cache_fits_the_workers_memory_cgroup():
    # Freed upload blocks are kept for reuse (1 GiB by default). In a memory
    # cgroup of 600 MiB the block a 320 MiB upload left behind, idle, got the
    # worker OOM-killed at the next session's 300 MiB upload, though each fit
    # (a helper's audit). By default the cache now keeps at most a sixteenth
    # of the memory the worker may use.
    group = tempfile.mkdtemp(prefix="cw-test-", dir=CGROUP_V1_MEMORY)
    cluster = None
    try:
        with open(os.path.join(group, "memory.limit_in_bytes"), "w") as f:
            f.write(str(600 * MIB))
        cluster = harness.HandCluster(workers=0, devices=1, tcp=True)
        cluster.start_worker(W, wrap=("sh", "-c", 'echo $$ > "$0" && exec "$@"',
                                      os.path.join(group, "cgroup.procs")))
        assert harness.wait_until(lambda: len(status(cluster)["workers"]) == 1, 30), cluster.logs()
        first = runner(cluster, "first")
        try:
            got = first.call("mem_hold", name="a", mib=320)
            assert got["ok"], got
        finally:
            first.close()
        second = runner(cluster, "second")
        try:
            got = second.call("mem_try_hold", name="b", mib=300, timeout=120)
            report = f"{got!r:.2000}\n{cluster.logs()}"
            assert got["error"] is None and got["ok"], report
        finally:
            second.close()
        assert cluster.procs[W].poll() is None, cluster.logs()  # not OOM-killed
    finally:
        if cluster is not None:
            cluster.stop()
        _remove_cgroup(group)


@pytest.mark.skipif(not _cgroup_usable(CGROUP_V1_PIDS),
                    reason="needs root and cgroup v1's pids controller at /sys/fs/cgroup/pids "
                           "(to start a daemon under a thread limit)")
def test_thread_limit_is_named_at_start():
    # libuv starts its thread pool at the first queued job and aborts the
    # process, without a word, when it cannot make its threads: the controller
    # died at start (its compile-cache scan) and a worker at its first compile
    # (a helper's audit). Both start the pool at start now and say why not.
    group = tempfile.mkdtemp(prefix="cw-test-", dir=CGROUP_V1_PIDS)
    try:
        with open(os.path.join(group, "pids.max"), "w") as f:
            f.write("3")
        # UV_THREADPOOL_SIZE read as libuv reads it: "-1" is 1024 threads.
        for daemon, size, want in (("causeway-controller", None, 4), ("causeway-worker", None, 4),
                                   ("causeway-controller", "-1", 1024)):
            args = ["--listen", f"127.0.0.1:{harness.free_tcp_port()}"]
            if daemon == "causeway-worker":
                args += ["--plugin", harness.cpu_plugin(), "--controller", "127.0.0.1:1"]
            env = {k: v for k, v in os.environ.items() if k != "UV_THREADPOOL_SIZE"}
            if size is not None:
                env["UV_THREADPOOL_SIZE"] = size
            p = subprocess.run(["sh", "-c", 'echo $$ > "$0" && exec "$@"',
                                os.path.join(group, "cgroup.procs"),
                                os.path.join(harness.bin_dir(), daemon), *args],
                               capture_output=True, text=True, timeout=60, env=env)
            assert p.returncode == 1, (daemon, p.returncode, p.stderr[-2000:])
            assert f"cannot start libuv's {want} worker threads" in p.stderr, \
                (daemon, p.stderr[-2000:])
            assert "pids.max" in p.stderr, p.stderr[-2000:]
    finally:
        _remove_cgroup(group)
