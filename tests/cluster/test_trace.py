"""Session timelines (CAUSEWAY_TRACE): a real JAX client on a 2-worker cluster
runs a jit on each island and a cross-island jax.device_put, then exits; the
Chrome trace it leaves is loaded and checked against what happened."""
from __future__ import annotations

import json
import os
import socket
import tempfile

import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "trace_checks.py")
# Worker clocks are mapped onto the client's by a round-trip estimate: allow
# its error (half a round trip on loopback, far below this).
SLACK_US = 2000.0


def _run_traced(cluster, path: str) -> dict:
    env = harness.causeway_env(controller=cluster.controller)
    env["CW_RUNNER_CHECKS"] = CHECKS
    env["CAUSEWAY_TRACE"] = path
    r = harness.Runner("traced", env)
    try:
        r.wait_ready()
        out = r.call("trace_work")
        # Flush on demand: the file exists before the process ends and
        # already holds the workers' executions.
        assert r.call("trace_flush")["rc"] == 0
        with open(path) as f:
            early = json.load(f)["traceEvents"]
        assert any(e.get("cat") == "execute" and e["pid"] != r.pid for e in early), early
        out["early_events"] = len(early)
    finally:
        rc = r.close()
    assert rc == 0, f"runner exited with {rc}\n{r.log_tail()}"
    return out


def test_trace_of_two_islands_and_a_transfer():
    cluster = harness.HandCluster(workers=2, devices=2, tcp=True)
    tmp = tempfile.mkdtemp(prefix="cw-trace-")
    path = os.path.join(tmp, "trace.json")
    try:
        out = _run_traced(cluster, path)
        assert os.path.exists(path), "no trace written at exit"
        with open(path) as f:
            doc = json.load(f)
    finally:
        cluster.stop()
    events = doc["traceEvents"]
    assert isinstance(events, list) and events
    # The final write keeps what the flush had fetched (workers hand events over once).
    assert len(events) >= out["early_events"]

    # Processes: the client and both workers, each named.
    names = {e["pid"]: e["args"]["name"] for e in events
             if e["ph"] == "M" and e["name"] == "process_name"}
    client_pids = [p for p, n in names.items() if n.startswith("causeway client")]
    assert len(client_pids) == 1, names
    client = client_pids[0]
    worker_pid = {}
    for w in out["workers"]:
        pids = [p for p, n in names.items() if f"worker {w} " in n]
        assert len(pids) == 1, (w, names)
        worker_pid[w] = pids[0]
    assert len(set(worker_pid.values()) | {client}) == 3

    complete = [e for e in events if e["ph"] == "X"]
    for e in complete:
        assert isinstance(e["ts"], (int, float)), e
        assert isinstance(e["dur"], (int, float)) and e["dur"] >= 0, e
        assert "tid" in e and "pid" in e and e["name"], e
    by_pid = {}
    for e in complete:
        by_pid.setdefault(e["pid"], []).append(e)
    assert by_pid.get(client), "no client events"
    for w, p in worker_pid.items():
        assert by_pid.get(p), f"no events from worker {w}"

    # Executions: one per island, named as the client's dispatch names them,
    # starting no earlier than that dispatch.
    dispatches = [e for e in by_pid[client] if e["cat"] == "execute"]
    assert len(dispatches) >= 2, dispatches
    for w, p in worker_pid.items():
        runs = [e for e in by_pid[p] if e["cat"] == "execute"]
        assert runs, f"no executions on worker {w}"
        for run in runs:
            match = [d for d in dispatches
                     if d["args"].get("worker") == w and d["args"]["seq"] == run["args"]["seq"]]
            assert len(match) == 1, (run, dispatches)
            d = match[0]
            assert run["name"] == d["name"], (run["name"], d["name"])
            assert run["args"]["id"] == d["args"]["id"]
            assert run["ts"] >= d["ts"] - SLACK_US, (run, d)
            assert isinstance(run["tid"], int) and 0 <= run["tid"] < 2, run  # a device lane

    # The worker-to-worker transfer, on both workers.
    w0, w1 = out["workers"]
    sends = [e for e in by_pid[worker_pid[w0]] if e["cat"] == "send"]
    puts = [e for e in by_pid[worker_pid[w1]] if e["cat"] == "put"]
    assert sends and puts, (sends, puts)
    assert sends[0]["args"]["bytes"] == puts[0]["args"]["bytes"] == 1024 * 4
    # Client side: the dispatches of the copy and of the uploads.
    kinds = {e["name"] for e in by_pid[client] if e["cat"] == "transfer"}
    assert {"UPLOAD", "SEND", "EXPECT"} <= kinds, kinds
    assert any(e["cat"] == "wait" for e in by_pid[client]), "no client waits"
    uploads = [e for p in worker_pid.values() for e in by_pid[p] if e["cat"] == "upload"]
    assert len(uploads) >= 2, uploads

    # Clock offsets are recorded per worker.
    meta = {m["name"]: m for m in doc["otherData"]["workers"]}
    for w in out["workers"]:
        assert "clock_offset_ns" in meta[w] and meta[w]["clock_rtt_ns"] >= 0, meta
        # One host, one CLOCK_MONOTONIC: the estimate is within its round trip.
        assert abs(meta[w]["clock_offset_ns"]) <= meta[w]["clock_rtt_ns"] + 1000, meta


# --- The worker's TRACE_START / TRACE_FETCH, spoken raw ---------------------------------

TRACE_START, TRACE_FETCH, HELLO = 65, 66, 1


class _Raw:
    """One connection to a worker, frames built by hand."""

    def __init__(self, address: str, role: int = 1):
        host, port = address.rsplit(":", 1)
        self.s = socket.create_connection((host, int(port)), timeout=10)
        self.rid = 0
        f = harness.pb_field
        flags, fields = self.call(HELLO, f(1, 1) + f(2, 1) + f(3, role) + f(6, b"trace-test"))
        assert flags == 1, fields  # a reply, not an error

    def call(self, mtype: int, payload: bytes):
        self.rid += 1
        self.s.sendall(harness.frame(mtype, self.rid, payload))
        head = self._read(harness.FRAME_HDR.size)
        magic, _, rtype, flags, plen, rid, blen = harness.FRAME_HDR.unpack(head)
        assert magic == harness.FRAME_MAGIC and rtype == mtype and rid == self.rid and blen == 0
        return flags, harness._pb_fields(self._read(plen))

    def _read(self, n: int) -> bytes:
        out = b""
        while len(out) < n:
            chunk = self.s.recv(n - len(out))
            assert chunk, "worker closed the connection"
            out += chunk
        return out

    def close(self):
        self.s.close()


def _error(fields) -> tuple:
    d = {f: v for f, _, v in fields}
    return d.get(1), d.get(2, b"").decode()


def test_worker_trace_messages_refuse_bad_use():
    cluster = harness.HandCluster(workers=1, devices=2, tcp=True)
    try:
        addr = cluster.addresses["hand-worker-0"]
        c = _Raw(addr)
        # Fetch before start: FAILED_PRECONDITION (9), naming the order.
        flags, fields = c.call(TRACE_FETCH, b"")
        assert flags == 3, fields
        code, msg = _error(fields)
        assert code == 9 and "TRACE_START" in msg, (code, msg)
        # An oversized ring: INVALID_ARGUMENT (3).
        flags, fields = c.call(TRACE_START, harness.pb_field(1, 1 << 30))
        assert flags == 3 and _error(fields)[0] == 3, fields
        # Started: the clock comes back; fetching an idle session gives nothing.
        flags, fields = c.call(TRACE_START, harness.pb_field(1, 4))
        assert flags == 1, fields
        clock = {f: v for f, _, v in fields}
        assert clock[1] > 0 and clock[2] == b"hand-worker-0" and clock[3] > 0
        flags, fields = c.call(TRACE_FETCH, b"")
        assert flags == 1 and not [f for f, _, _ in fields if f == 2], fields
        # A worker-role connection may not start a trace: PERMISSION_DENIED (7),
        # the message table's senders rule.
        w = _Raw(addr, role=2)
        flags, fields = w.call(TRACE_START, b"")
        assert flags == 3 and _error(fields)[0] == 7, fields
        assert "TRACE_START is for clients" in _error(fields)[1], fields
        w.close()
        # Garbage where a TraceStartRequest belongs: refused, the worker lives on.
        c.s.sendall(harness.frame(TRACE_START, 99, b"\xff\xff\xff"))
        c.s.settimeout(10)
        try:
            while c.s.recv(4096):
                pass
        except OSError:
            pass
        c.close()
        assert harness.stats(addr)["sessions"] >= 0
        c2 = _Raw(addr)
        assert c2.call(TRACE_START, b"")[0] == 1
        c2.close()
    finally:
        cluster.stop()
