"""Peers that drop off the network without closing their connections: a host
that dies, loses power or is partitioned away sends no FIN, and a socket
nobody acknowledges any more stays open. The daemons ask the kernel to end
such a connection once what they send (or, idle, its keepalive probes) goes
unacknowledged for --worker-link-timeout-ms (src/net/cw_net_listen.c,
cw__watch_tcp_peer); before, the controller kept a vanished client's session
and its devices for the 15 minutes of TCP's retransmissions (for ever when it
had nothing to send), and a worker cut off from its controller learned of it
only at its next retransmission after the partition healed, 48 s after a
60 s partition.

The controller and the worker each run in a network namespace of their own,
joined to this one through a bridge in a third namespace; taking a port out
of the bridge drops every packet to and from that side in flight, while both
ends of its link stay up. Needs root, `ip` and bridges in network namespaces; without
them it is skipped, saying so."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import tempfile
import time

import numpy as np
import pytest

import harness

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "health_checks.py")
LINK_MS = 2000  # the daemons' --worker-link-timeout-ms


pytestmark = [
    pytest.mark.skipif(harness.missing_build() is not None, reason=str(harness.missing_build())),
    pytest.mark.skipif(harness.netns_missing(bridge=True) is not None,
                       reason=str(harness.netns_missing(bridge=True))),
]


class Fabric:
    """A bridge in namespace `<tag>br`; namespaces `<tag>ctl` (10.214.k.3) and
    `<tag>wrk` (.2) and this namespace (.1) each on a port of it."""

    def __init__(self):
        pid = os.getpid()
        k = pid % 200 + 20
        self.tag = f"cwpl{pid}"
        self.net = f"10.214.{k}"
        self.br = f"{self.tag}br"
        self.ns = {"ctl": f"{self.tag}ctl", "wrk": f"{self.tag}wrk"}
        self.ip = {"host": f"{self.net}.1", "wrk": f"{self.net}.2", "ctl": f"{self.net}.3"}
        self.host_if = f"cwplh{pid}"[:15]
        self.made: list[str] = []
        try:
            for ns in (self.br, *self.ns.values()):
                harness.ip("netns", "add", ns)
                self.made.append(ns)
                harness.ip("-n", ns, "link", "set", "lo", "up")
            harness.ip("-n", self.br, "link", "add", "br0", "type", "bridge")
            harness.ip("-n", self.br, "link", "set", "br0", "up")
            for side, ns in self.ns.items():
                harness.ip("-n", self.br, "link", "add", f"p{side}", "type", "veth", "peer", "name",
                    "eth0", "netns", ns)
                harness.ip("-n", ns, "addr", "add", f"{self.ip[side]}/24", "dev", "eth0")
                harness.ip("-n", ns, "link", "set", "eth0", "up")
                self._port(side)
            harness.ip("link", "add", self.host_if, "type", "veth", "peer", "name", "phost", "netns",
                self.br)
            harness.ip("addr", "add", f"{self.ip['host']}/24", "dev", self.host_if)
            harness.ip("link", "set", self.host_if, "up")
            self._port("host")
            # Fixed neighbours: no ARP that fails during a cut, whose local
            # "host unreachable" would make TCP undo its backoff (RFC 6069),
            # as a partition beyond a router does not.
            macs = {"host": self._mac([], self.host_if)}
            for side, ns in self.ns.items():
                macs[side] = self._mac(["-n", ns], "eth0")
            for side, args, dev in [("host", [], self.host_if),
                                    *[(s, ["-n", n], "eth0") for s, n in self.ns.items()]]:
                for other in macs:
                    if other != side:
                        harness.ip(*args, "neigh", "replace", self.ip[other], "lladdr", macs[other],
                            "dev", dev, "nud", "permanent")
        except BaseException:
            self.remove()
            raise

    @staticmethod
    def _mac(args: list[str], dev: str) -> str:
        return json.loads(harness.ip(*args, "-j", "link", "show", dev).stdout)[0]["address"]

    def _port(self, side: str) -> None:
        harness.ip("-n", self.br, "link", "set", f"p{side}", "master", "br0")
        harness.ip("-n", self.br, "link", "set", f"p{side}", "up")

    def cut(self, side: str) -> None:
        """Every packet to and from `side` is dropped in flight: its port
        leaves the bridge but stays up, so neither end sees its link go down
        (a link that goes down makes TCP retry at once when it comes back)."""
        harness.ip("-n", self.br, "link", "set", f"p{side}", "nomaster")

    def heal(self, side: str) -> None:
        harness.ip("-n", self.br, "link", "set", f"p{side}", "master", "br0")

    def argv(self, side: str, *argv: str) -> list[str]:
        return ["ip", "netns", "exec", self.ns[side], *argv]

    def remove(self) -> None:
        harness.ip("link", "del", self.host_if, check=False)
        for ns in self.made:
            harness.ip("netns", "del", ns, check=False)


class Daemons:
    def __init__(self, fab: Fabric, ctl_args=(), wrk_args=()):
        self.fab = fab
        self.logdir = tempfile.mkdtemp(prefix="cw-peer-loss-")
        self.procs: dict[str, subprocess.Popen] = {}
        self.env = {k: v for k, v in os.environ.items()
                    if not k.startswith("CAUSEWAY_") and not k.startswith("JAX_")}
        self.ctl = f"{fab.ip['ctl']}:7000"
        self.wrk = f"{fab.ip['wrk']}:7100"
        link = ["--worker-link-timeout-ms", str(LINK_MS)]
        self.spawn("controller", "ctl", [os.path.join(harness.bin_dir(), "causeway-controller"),
                                         "--listen", self.ctl, *link, *ctl_args])
        self.spawn("worker", "wrk", [os.path.join(harness.bin_dir(), "causeway-worker"),
                                     "--plugin", harness.cpu_plugin(), "--devices", "2",
                                     "--listen", self.wrk, "--name", "pl-worker",
                                     "--controller", self.ctl, *link, *wrk_args])

    def spawn(self, name: str, side: str, argv: list[str]) -> None:
        log = open(os.path.join(self.logdir, f"{name}.log"), "ab")
        self.procs[name] = subprocess.Popen(self.fab.argv(side, *argv), env=self.env, stdout=log,
                                            stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
        log.close()

    def status(self, side: str = "ctl") -> dict:
        """`causeway status --json`, asked from inside a daemon's namespace."""
        r = subprocess.run(self.fab.argv(side, os.path.join(harness.bin_dir(), "causeway"),
                                         "status", "--json", "--max-age", "0", "--controller",
                                         self.ctl),
                           capture_output=True, text=True, timeout=30, env=self.env)
        try:
            return json.loads(r.stdout)
        except ValueError:
            return {"error": r.stdout + r.stderr}

    def worker_state(self) -> str | None:
        ws = self.status().get("workers", [])
        return ws[0].get("state") if ws else None

    def log(self, name: str) -> str:
        with open(os.path.join(self.logdir, f"{name}.log"), "rb") as f:
            return f.read().decode("utf-8", "replace")

    def logs(self) -> str:
        out = []
        for name in self.procs:
            with open(os.path.join(self.logdir, f"{name}.log"), "rb") as f:
                out.append(f"--- {name} ---\n" + f.read().decode("utf-8", "replace")[-3000:])
        return "\n".join(out)

    def stop(self) -> None:
        harness.end_processes(self.procs.values())
        shutil.rmtree(self.logdir, ignore_errors=True)


def test_a_vanished_client_gives_back_its_session_and_devices():
    fab = Fabric()
    d = r = None
    try:
        d = Daemons(fab)
        assert harness.wait_until(lambda: d.worker_state() == "alive", 60), d.logs()
        env = harness.causeway_env(controller=d.ctl)
        env["CW_RUNNER_CHECKS"] = CHECKS
        env["CAUSEWAY_DEVICES"] = "2"  # every device, exclusive
        env["CAUSEWAY_SESSION_NAME"] = "vanishing"
        r = harness.Runner("peer-loss-client", env)
        got = r.call("link_compute")
        assert got["ok"] and np.array_equal(got["value"], got["expected"]), got
        st = d.status()
        assert [s["devices"] for s in st["sessions"]] == [[0, 1]], st
        assert st["workers"][0]["buffers"] > 0, st
        # Its host drops off the network, and the client with it: no FIN
        # ever reaches the daemons.
        fab.cut("host")
        r.kill()
        t = time.monotonic()
        freed = harness.wait_until(
            lambda: (lambda s: s.get("sessions") == [] and s["workers"][0]["buffers"] == 0)(
                d.status()), 25, interval=0.5)
        took = time.monotonic() - t
        print(f"vanished client: session and buffers freed after {took:.1f} s")
        assert freed, f"{d.status()}\n{d.logs()}"
        assert "acknowledged nothing for 2000 ms: its host is down or unreachable" in d.logs()
        assert all(p.poll() is None for p in d.procs.values()), d.logs()
    finally:
        if r is not None:
            r.close(timeout=5)
        if d is not None:
            d.stop()
        fab.remove()


def test_a_worker_partitioned_from_its_controller_rejoins_when_it_heals():
    fab = Fabric()
    d = None
    try:
        d = Daemons(fab, ctl_args=["--worker-timeout-ms", "1000"],
                    # Short connect attempts: a SYN's own backoff (up to 4 s
                    # within one attempt) does not decide when it gets back.
                    wrk_args=["--heartbeat-ms", "200", "--reconnect-max-ms", "500",
                              "--connect-timeout-ms", "1000"])
        assert harness.wait_until(lambda: d.worker_state() == "alive", 60), d.logs()
        fab.cut("wrk")
        assert harness.wait_until(lambda: d.worker_state() == "dead", 10), d.logs()
        # Long enough for TCP's retransmissions to back off to several seconds.
        time.sleep(14)
        fab.heal("wrk")
        t = time.monotonic()
        back = harness.wait_until(lambda: d.worker_state() == "alive", 30, interval=0.2)
        took = time.monotonic() - t
        print(f"worker registered again {took:.2f} s after the partition healed")
        assert back, d.logs()
        # It gave up on the silent controller during the partition (its own
        # kernel said so) and was trying again, not waiting for its next
        # retransmission.
        assert "acknowledged nothing for 2000 ms" in d.log("worker"), d.logs()
        assert all(p.poll() is None for p in d.procs.values()), d.logs()
    finally:
        if d is not None:
            d.stop()
        fab.remove()
