"""A real network partition between a JAX process and one worker (the kernel
drops the packets, not a relay): the controller and the worker run in a
network namespace the test makes (a veth pair to this one, two addresses
there), and a blackhole route on this side drops every packet for the
worker's address. The worker and its controller talk inside the namespace
and never notice; the JAX process's link to the worker goes silent (the
worker's keepalives stop once its TCP gets no acknowledgements), and its
watchdog (CAUSEWAY_WORKER_LINK_TIMEOUT_MS) fails the call that waits on it,
where the call waited without end before. Needs root and `ip` (iproute2,
installed by scripts/setup.sh); without them it is skipped, saying so."""
from __future__ import annotations

import os
import shutil
import socket
import subprocess
import tempfile

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


def test_partition_between_a_client_and_a_worker():
    ns = Namespace()
    logdir = tempfile.mkdtemp(prefix="cw-partition-")
    procs: dict[str, subprocess.Popen] = {}
    r = None
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CAUSEWAY_") and not k.startswith("JAX_")}
    ctl = f"{ns.controller_ip}:{harness.free_tcp_port()}"
    wrk = f"{ns.worker_ip}:{harness.free_tcp_port()}"

    def spawn(name, argv):
        log = open(os.path.join(logdir, f"{name}.log"), "ab")
        procs[name] = subprocess.Popen(ns.argv(*argv), env=env, stdout=log,
                                       stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

    def logs() -> str:
        out = []
        for name in procs:
            with open(os.path.join(logdir, f"{name}.log"), "rb") as f:
                out.append(f"--- {name} ---\n" + f.read().decode("utf-8", "replace")[-3000:])
        return "\n".join(out)

    try:
        spawn("controller", [os.path.join(harness.bin_dir(), "causeway-controller"),
                             "--listen", ctl])
        assert harness.wait_until(lambda: _listening(ctl), 30), logs()
        spawn("worker", [os.path.join(harness.bin_dir(), "causeway-worker"), "--plugin",
                         harness.cpu_plugin(), "--devices", "2", "--listen", wrk, "--name",
                         "ns-worker", "--controller", ctl])
        assert harness.wait_until(lambda: harness.stats(ctl)["workers"] == 1, 60), logs()
        cenv = harness.causeway_env(controller=ctl)
        cenv["CW_RUNNER_CHECKS"] = CHECKS
        cenv["CAUSEWAY_WORKER_LINK_TIMEOUT_MS"] = str(LINK_TIMEOUT_MS)
        r = harness.Runner("partition", cenv)
        first = r.call("link_compute")
        assert first["ok"] and np.array_equal(first["value"], first["expected"]), first
        ns.cut_worker()
        got = r.call("link_compute", timeout=120)
        report = f"{got!r:.2000}\n{logs()}\n--- client ---\n{r.log_tail()}"
        print(f"partition: {got.get('error', '')[:300]} after {got['elapsed']:.2f} s")
        assert not got["ok"], report
        assert "UNAVAILABLE" in got["error"] and wrk in got["error"], report
        assert "not even its keepalive: it is hung or unreachable" in got["error"], report
        assert LINK_TIMEOUT_MS / 1000 <= got["elapsed"] <= LINK_TIMEOUT_MS / 1000 + 15, report
        # The worker and its controller never noticed.
        st = harness.stats(ctl)
        assert st["workers"] == 1 and st["workers_timed_out"] == 0, st
        assert procs["worker"].poll() is None, logs()
    finally:
        if r is not None:
            r.close()
        for p in procs.values():
            if p.poll() is None:
                p.terminate()
        for p in procs.values():
            try:
                p.wait(30)
            except subprocess.TimeoutExpired:
                p.kill()
        ns.remove()
        shutil.rmtree(logdir, ignore_errors=True)
