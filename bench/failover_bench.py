#!/usr/bin/env python3
"""Failover latency: the time from a worker's death to the error in every
affected client, against what a plain TCP peer needs to see its peer die.

Usage (from the repository root, with the project's venv):

    .venv/bin/python bench/failover_bench.py            # 3 repeats per case
    .venv/bin/python bench/failover_bench.py --quick    # 1 repeat
    .venv/bin/python bench/failover_bench.py --json out.json

Cases, each on a fresh hand-started cluster (causeway-controller plus two
causeway-worker processes on loopback TCP, binaries from build/release or
CAUSEWAY_BIN_DIR), with 1 and 4 clients (each a real JAX process, runner.py
of tests/jax) that have a long computation pending on the victim worker and
block on its result:

- SIGKILL: the victim dies; its connections close at once.
- SIGSTOP: the victim goes silent; the controller declares it dead after
  --worker-timeout-ms (default 5000) without a heartbeat (--heartbeat-ms,
  default 1000).
- controller SIGSTOP: the controller goes silent and closes nothing; each
  client then compiles a new program, which waits on the controller until
  the client's watchdog gives up (CAUSEWAY_CONTROLLER_TIMEOUT_MS, set to
  --controller-timeout-ms, default 5000; it pings after half of it).

Time is taken with CLOCK_MONOTONIC (time.monotonic, system-wide on Linux)
from just before the signal is sent to the moment each client's blocked
read raised; the table shows the slowest client (every affected client has
its error by then) and the mean.

Baseline, in the same run: a Python TCP server on 127.0.0.1 and a client
process; SIGKILL the client and time until the server's recv returns 0.
"""
from __future__ import annotations

import argparse
import json
import pathlib
import signal
import socket
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent
sys.path.insert(0, str(ROOT / "tests" / "jax"))

import harness  # noqa: E402

CHECKS = str(HERE / "failover_checks.py")


def tcp_baseline() -> float:
    """Seconds from SIGKILL of a connected peer to recv() == 0 here."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen(1)
    port = srv.getsockname()[1]
    child = subprocess.Popen([sys.executable, "-c",
                              "import socket, time, sys\n"
                              f"s = socket.create_connection(('127.0.0.1', {port}))\n"
                              "s.sendall(b'x')\n"
                              "time.sleep(600)\n"])
    conn, _ = srv.accept()
    assert conn.recv(1) == b"x"
    t0 = time.monotonic()
    child.send_signal(signal.SIGKILL)
    data = conn.recv(1)
    dt = time.monotonic() - t0
    assert data == b""
    child.wait()
    conn.close()
    srv.close()
    return dt


def one_case(how: str, clients: int, heartbeat_ms: int, timeout_ms: int) -> list[float]:
    cluster = harness.HandCluster(
        workers=2, devices=2, tcp=True,
        controller_args=("--worker-timeout-ms", str(timeout_ms)),
        worker_args=("--heartbeat-ms", str(heartbeat_ms)))
    runners = []
    try:
        env = harness.causeway_env(controller=cluster.controller)
        env["CW_RUNNER_CHECKS"] = CHECKS
        env["CAUSEWAY_MIN_WORKERS"] = "2"
        runners = [harness.Runner(f"failover-{how}-{i}", env) for i in range(clients)]
        victims = {r.call("failover_prepare") for r in runners}
        assert len(victims) == 1, victims
        victim = victims.pop()
        for r in runners:
            r.submit("failover_wait")
        time.sleep(0.5)  # every client is blocked on its pending result
        sig = signal.SIGKILL if how == "SIGKILL" else signal.SIGSTOP
        t0 = time.monotonic()
        cluster.kill(victim, sig)
        out = []
        for r in runners:
            got = r.result(timeout=120)
            if got["ok"] or "UNAVAILABLE" not in got["error"] or victim not in got["error"]:
                raise AssertionError(f"{how}: unexpected result {got}\n{cluster.logs()}")
            out.append(got["t_error"] - t0)
        return out
    finally:
        for r in runners:
            r.close()
        cluster.stop()


def controller_case(clients: int, timeout_ms: int) -> list[float]:
    cluster = harness.HandCluster(workers=2, devices=2, tcp=True)
    runners = []
    try:
        env = harness.causeway_env(controller=cluster.controller)
        env["CW_RUNNER_CHECKS"] = CHECKS
        env["CAUSEWAY_MIN_WORKERS"] = "2"
        env["CAUSEWAY_CONTROLLER_TIMEOUT_MS"] = str(timeout_ms)
        # The watchdog's error itself, not a reconnection that waits it out.
        env["CAUSEWAY_CONTROLLER_RECONNECT_MS"] = "0"
        runners = [harness.Runner(f"failover-ctl-{i}", env) for i in range(clients)]
        for r in runners:
            r.call("failover_prepare")
        t0 = time.monotonic()
        cluster.kill("controller", signal.SIGSTOP)
        for r in runners:
            r.submit("failover_compile")
        out = []
        for r in runners:
            got = r.result(timeout=120)
            if got["ok"] or "no answer from" not in got["error"]:
                raise AssertionError(f"controller SIGSTOP: unexpected result {got}")
            out.append(got["t_error"] - t0)
        return out
    finally:
        cluster.kill("controller", signal.SIGCONT)
        for r in runners:
            r.close()
        cluster.stop()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--quick", action="store_true", help="one repeat per case")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--heartbeat-ms", type=int, default=1000)
    ap.add_argument("--worker-timeout-ms", type=int, default=5000)
    ap.add_argument("--controller-timeout-ms", type=int, default=5000)
    ap.add_argument("--json", help="also write the results here")
    args = ap.parse_args()
    missing = harness.missing_build()
    if missing:
        print(f"failover_bench: {missing}", file=sys.stderr)
        return 1
    repeats = 1 if args.quick else args.repeats
    rows = []
    base = [tcp_baseline() for _ in range(max(repeats, 5))]
    rows.append(("TCP peer sees SIGKILL (recv == 0)", 1, max(base), statistics.mean(base)))
    for how in ("SIGKILL", "SIGSTOP"):
        for clients in (1, 4):
            worst, means = [], []
            for _ in range(repeats):
                ts = one_case(how, clients, args.heartbeat_ms, args.worker_timeout_ms)
                worst.append(max(ts))
                means.append(statistics.mean(ts))
            label = f"worker {how} -> every client's error"
            rows.append((label, clients, statistics.median(worst), statistics.median(means)))
    for clients in (1, 4):
        worst, means = [], []
        for _ in range(repeats):
            ts = controller_case(clients, args.controller_timeout_ms)
            worst.append(max(ts))
            means.append(statistics.mean(ts))
        rows.append(("controller SIGSTOP -> every compile's error", clients,
                     statistics.median(worst), statistics.median(means)))
    print(f"\nfailover latency (--heartbeat-ms {args.heartbeat_ms}, --worker-timeout-ms "
          f"{args.worker_timeout_ms}, CAUSEWAY_CONTROLLER_TIMEOUT_MS "
          f"{args.controller_timeout_ms}; median of {repeats} runs)")
    print(f"{'case':<42} {'clients':>7} {'slowest client':>15} {'mean':>10}")
    for label, n, worst, mean in rows:
        print(f"{label:<42} {n:>7} {worst * 1000:>12.1f} ms {mean * 1000:>7.1f} ms")
    if args.json:
        with open(args.json, "w") as f:
            json.dump([{"case": l, "clients": n, "slowest_s": w, "mean_s": m}
                       for l, n, w, m in rows], f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
