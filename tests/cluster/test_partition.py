"""A real network partition between a JAX process and one worker (the kernel
drops the packets, not a relay): the controller and the worker run in a
network namespace the test makes (a veth pair to this one, two addresses
there), and a blackhole route on this side drops every packet for the
worker's address. The worker and its controller talk inside the namespace
and never notice; the JAX process's link to the worker goes silent (the
worker's keepalives stop once its TCP gets no acknowledgements), and its
watchdog (CAUSEWAY_WORKER_LINK_TIMEOUT_MS) fails the call that waits on it,
where the call waited without end before. When the path heals, the same
JAX process uses that worker again: the plugin reattaches in its session
(the worker kept it, and the arrays, while the controller's link lived).
Needs root and `ip` (iproute2,
installed by scripts/setup.sh); without them it is skipped, saying so."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile
import time

import numpy as np
import pytest

import harness

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "health_checks.py")
LINK_TIMEOUT_MS = 3000


pytestmark = [
    pytest.mark.skipif(harness.missing_build() is not None, reason=str(harness.missing_build())),
    pytest.mark.skipif(harness.netns_missing() is not None, reason=str(harness.netns_missing())),
]


class Namespace:
    """A network namespace joined to this one by a veth pair: this side
    10.213.<k>.1, the namespace .2 (the worker) and .3 (the controller)."""

    def __init__(self):
        k = os.getpid() % 200 + 20
        self.name = f"cwpart{os.getpid()}"
        self.host_if, self.ns_if = f"cwh{os.getpid()}"[:15], f"cwn{os.getpid()}"[:15]
        self.net = f"10.213.{k}"
        self.worker_ip, self.controller_ip = f"{self.net}.2", f"{self.net}.3"
        self.blackholed = False
        harness.ip("netns", "add", self.name)
        try:
            harness.ip("link", "add", self.host_if, "type", "veth", "peer", "name", self.ns_if)
            harness.ip("link", "set", self.ns_if, "netns", self.name)
            harness.ip("addr", "add", f"{self.net}.1/24", "dev", self.host_if)
            harness.ip("link", "set", self.host_if, "up")
            for addr in (self.worker_ip, self.controller_ip):
                self.exec("ip", "addr", "add", f"{addr}/24", "dev", self.ns_if)
            self.exec("ip", "link", "set", self.ns_if, "up")
            self.exec("ip", "link", "set", "lo", "up")
        except BaseException:
            self.remove()
            raise

    def exec(self, *argv: str) -> None:
        subprocess.run(["ip", "netns", "exec", self.name, *argv], check=True,
                       capture_output=True, timeout=30)

    def argv(self, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.name, *argv]

    def cut_worker(self) -> None:
        harness.ip("route", "add", "blackhole", f"{self.worker_ip}/32")
        self.blackholed = True

    def heal(self) -> None:
        harness.ip("route", "del", "blackhole", f"{self.worker_ip}/32")
        self.blackholed = False

    def remove(self) -> None:
        if self.blackholed:
            harness.ip("route", "del", "blackhole", f"{self.worker_ip}/32", check=False)
        harness.ip("link", "del", self.host_if, check=False)
        harness.ip("netns", "del", self.name, check=False)


def _listening(address: str) -> bool:
    host, port = address.rsplit(":", 1)
    try:
        with socket.create_connection((host, int(port)), timeout=1):
            return True
    except OSError:
        return False


class _Cluster:
    """A controller and a worker ("ns-worker", 2 CPU devices) in a Namespace,
    and a JAX runner here with a CAUSEWAY_WORKER_LINK_TIMEOUT_MS watchdog."""

    def __init__(self, name: str):
        self.ns = Namespace()
        self.logdir = tempfile.mkdtemp(prefix="cw-partition-")
        self.procs: dict[str, subprocess.Popen] = {}
        self.r = None
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("CAUSEWAY_") and not k.startswith("JAX_")}
        self.ctl = f"{self.ns.controller_ip}:{harness.free_tcp_port()}"
        self.wrk = f"{self.ns.worker_ip}:{harness.free_tcp_port()}"
        try:
            self._start(name)
        except BaseException:
            self.close()
            raise

    def _spawn(self, name, argv):
        log = open(os.path.join(self.logdir, f"{name}.log"), "ab")
        self.procs[name] = subprocess.Popen(self.ns.argv(*argv), env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

    def logs(self) -> str:
        out = []
        for name in self.procs:
            with open(os.path.join(self.logdir, f"{name}.log"), "rb") as f:
                out.append(f"--- {name} ---\n" + f.read().decode("utf-8", "replace")[-3000:])
        if self.r is not None:
            out.append(f"--- client ---\n{self.r.log_tail()}")
        return "\n".join(out)

    def _start(self, name: str) -> None:
        ctl, wrk = self.ctl, self.wrk
        self._spawn("controller", [os.path.join(harness.bin_dir(), "causeway-controller"),
                                   "--listen", ctl])
        assert harness.wait_until(lambda: _listening(ctl), 30), self.logs()
        self._spawn("worker", [os.path.join(harness.bin_dir(), "causeway-worker"), "--plugin",
                               harness.cpu_plugin(), "--devices", "2", "--listen", wrk,
                               "--name", "ns-worker", "--controller", ctl])
        assert harness.wait_until(lambda: harness.stats(ctl)["workers"] == 1, 60), self.logs()
        cenv = harness.causeway_env(controller=ctl)
        cenv["CW_RUNNER_CHECKS"] = CHECKS
        cenv["CAUSEWAY_WORKER_LINK_TIMEOUT_MS"] = str(LINK_TIMEOUT_MS)
        self.r = harness.Runner(name, cenv)

    def close(self) -> None:
        if self.r is not None:
            self.r.close()
        harness.end_processes(self.procs.values())
        self.ns.remove()
        shutil.rmtree(self.logdir, ignore_errors=True)


def test_partition_between_a_client_and_a_worker():
    cl = _Cluster("partition")
    try:
        r, wrk = cl.r, cl.wrk
        first = r.call("link_compute")
        assert first["ok"] and np.array_equal(first["value"], first["expected"]), first
        cl.ns.cut_worker()
        got = r.call("link_compute", timeout=120)
        report = f"{got!r:.2000}\n{cl.logs()}"
        print(f"partition: {got.get('error', '')[:300]} after {got['elapsed']:.2f} s")
        assert not got["ok"], report
        assert "UNAVAILABLE" in got["error"] and wrk in got["error"], report
        assert "not even its keepalive: it is hung or unreachable" in got["error"], report
        assert LINK_TIMEOUT_MS / 1000 <= got["elapsed"] <= LINK_TIMEOUT_MS / 1000 + 15, report
        # The worker and its controller never noticed.
        st = harness.stats(cl.ctl)
        assert st["workers"] == 1 and st["workers_timed_out"] == 0, st
        assert cl.procs["worker"].poll() is None, cl.logs()
    finally:
        cl.close()


def _equal(got: dict) -> bool:
    v, e = got.get("value"), got.get("expected")
    if isinstance(e, list):
        return len(v) == len(e) and all(np.array_equal(a, b) for a, b in zip(v, e))
    return np.array_equal(v, e)


def test_partition_heals_and_the_same_process_goes_on():
    """Before: arrays on the worker. During the cut: an upload not waited for,
    a computation that fails after the link timeout, one more that fails
    (the path is still cut). Healed: the same process computes there again,
    the arrays made before read back right and feed a new launch, a new
    program compiles and runs, and the upload lost in the cut fails naming
    the lost link. Values against numpy's."""
    cl = _Cluster("partition-heal")
    try:
        r, wrk = cl.r, cl.wrk
        assert r.call("keep_arrays")["ok"], cl.logs()
        first = r.call("link_compute")
        assert first["ok"] and _equal(first), first
        cl.ns.cut_worker()
        assert r.call("put_unwaited")["ok"], cl.logs()
        cut = r.call("link_compute", timeout=120)
        assert not cut["ok"] and "not even its keepalive" in cut["error"], f"{cut!r:.2000}"
        still = r.call("link_compute", timeout=120)
        assert not still["ok"], f"{still!r:.2000}\n{cl.logs()}"
        assert "UNAVAILABLE" in still["error"] and wrk in still["error"], f"{still!r:.2000}"
        cl.ns.heal()
        # Reattaching is tried at most once a second: a few tries, bounded.
        for _ in range(30):
            again = r.call("link_compute", timeout=120)
            if again["ok"]:
                break
            time.sleep(1)
        report = f"{again!r:.2000}\n{cl.logs()}"
        assert again["ok"] and _equal(again), report
        kept = r.call("read_kept", timeout=120)
        assert kept["ok"] and _equal(kept), f"{kept!r:.2000}\n{cl.logs()}"
        fresh = r.call("fresh_work", timeout=120)
        assert fresh["ok"] and np.allclose(fresh["value"], fresh["expected"], rtol=1e-5,
                                           atol=1e-5), f"{fresh!r:.2000}\n{cl.logs()}"
        lost = r.call("read_unwaited", timeout=120)
        assert not lost["ok"], f"{lost!r:.2000}"
        assert "UNAVAILABLE" in lost["error"] and wrk in lost["error"], f"{lost!r:.2000}"
        # Still the one worker, never counted lost by the controller.
        st = harness.stats(cl.ctl)
        assert st["workers"] == 1 and st["workers_timed_out"] == 0, st
        assert cl.procs["worker"].poll() is None, cl.logs()
    finally:
        cl.close()
