"""Prometheus metrics of the controller (--metrics-listen): a real HTTP GET
against a hand-started cluster, the exposition text parsed strictly, and
figures that must follow from what real JAX clients did; then hostile HTTP
peers (garbage, an oversized head, slow and idle clients) that must not stop
the controller from serving metrics or clients."""
from __future__ import annotations

import os
import re
import socket
import time
import urllib.error
import urllib.request

import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "metrics_checks.py")

_NAME = r"[a-zA-Z_:][a-zA-Z0-9_:]*"
_LABEL = r'[a-zA-Z_][a-zA-Z0-9_]*="(?:\\\\|\\"|\\n|[^"\\\n])*"'
_SAMPLE = re.compile(rf"^({_NAME})(\{{(?:{_LABEL}(?:,{_LABEL})*)?\}})? (\S+)$")
_LABEL_RE = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:\\\\|\\"|\\n|[^"\\\n])*)"')


def parse_exposition(text: str) -> dict:
    """Strict parser of the text format 0.0.4. Returns {family: {"type", "help",
    "samples": [(name, labels dict, value)]}}; asserts on any malformed line."""
    families: dict = {}
    assert text.endswith("\n"), "exposition must end with a newline"
    for line in text.splitlines():
        assert line, "empty line in the exposition"
        if line.startswith("# HELP "):
            _, _, name, help_text = line.split(" ", 3)
            assert re.fullmatch(_NAME, name), line
            fam = families.setdefault(name, {"samples": []})
            assert "help" not in fam, f"second HELP for {name}"
            fam["help"] = help_text
            continue
        if line.startswith("# TYPE "):
            parts = line.split(" ")
            assert len(parts) == 4, line
            name, typ = parts[2], parts[3]
            assert typ in ("counter", "gauge", "histogram", "summary", "untyped"), line
            fam = families.setdefault(name, {"samples": []})
            assert "type" not in fam and not fam["samples"], f"TYPE of {name} misplaced"
            fam["type"] = typ
            continue
        assert not line.startswith("#"), f"unknown comment: {line}"
        m = _SAMPLE.match(line)
        assert m, f"malformed sample line: {line!r}"
        name, labels_text, value = m.group(1), m.group(2) or "", m.group(3)
        v = float(value)  # raises on a malformed number
        labels = {k: val.replace("\\n", "\n").replace('\\"', '"').replace("\\\\", "\\")
                  for k, val in _LABEL_RE.findall(labels_text)}
        fam_name = name
        for suffix in ("_bucket", "_sum", "_count"):
            base = name[: -len(suffix)]
            if name.endswith(suffix) and families.get(base, {}).get("type") == "histogram":
                fam_name = base
        fam = families.get(fam_name)
        assert fam and "type" in fam and "help" in fam, f"{name}: sample before HELP/TYPE"
        if fam["type"] == "counter":
            assert v >= 0, line
        fam["samples"].append((name, labels, v))
    for name, fam in families.items():
        assert "help" in fam and "type" in fam, f"{name} lacks HELP or TYPE"
        if fam["type"] == "histogram":
            check_histogram(name, fam["samples"])
    return families


def check_histogram(name: str, samples: list) -> None:
    series: dict = {}
    for sname, labels, v in samples:
        key = tuple(sorted((k, x) for k, x in labels.items() if k != "le"))
        series.setdefault(key, {"buckets": [], "sum": None, "count": None})
        s = series[key]
        if sname == name + "_bucket":
            s["buckets"].append((labels["le"], v))
        elif sname == name + "_sum":
            s["sum"] = v
        elif sname == name + "_count":
            s["count"] = v
        else:
            raise AssertionError(f"{sname} in histogram {name}")
    assert series, f"histogram {name} has no samples"
    for key, s in series.items():
        b = s["buckets"]
        assert b and b[-1][0] == "+Inf", f"{name}{key}: buckets must end in +Inf"
        bounds = [float(le) for le, _ in b[:-1]]
        assert bounds == sorted(bounds) and len(set(bounds)) == len(bounds), name
        counts = [v for _, v in b]
        assert counts == sorted(counts), f"{name}{key}: buckets not cumulative: {counts}"
        assert s["sum"] is not None and s["count"] is not None, f"{name}: _sum/_count missing"
        assert counts[-1] == s["count"], f"{name}: +Inf bucket {counts[-1]} != count {s['count']}"


def scrape(url: str) -> dict:
    with urllib.request.urlopen(url, timeout=10) as r:
        assert r.status == 200
        ctype = r.headers["Content-Type"]
        assert ctype.startswith("text/plain") and "version=0.0.4" in ctype, ctype
        return parse_exposition(r.read().decode("utf-8"))


def value(fams: dict, name: str, **labels) -> float:
    """Sum of the samples of `name` whose labels include `labels`."""
    base = re.sub(r"_(bucket|sum|count)$", "", name)
    fam = fams[name] if name in fams else fams[base]
    return sum(v for n, ls, v in fam["samples"]
               if n == name and all(ls.get(k) == str(x) for k, x in labels.items()))


@pytest.fixture(scope="module")
def cluster():
    port = harness.free_tcp_port()
    c = harness.HandCluster(workers=2, devices=2, tcp=True,
                            controller_args=("--metrics-listen", f"127.0.0.1:{port}",
                                             # The relayed-launch figures (counts per
                                             # session, latency) need launches to pass
                                             # through the controller.
                                             "--relay-launches"))
    c.metrics_url = f"http://127.0.0.1:{port}/metrics"
    c.metrics_port = port
    yield c
    c.stop()


def _runner(cluster, name):
    env = harness.causeway_env(controller=cluster.controller)
    env["CW_RUNNER_CHECKS"] = CHECKS
    r = harness.Runner(name, env)
    r.wait_ready()
    return r


def test_metrics_follow_what_clients_did(cluster):
    url = cluster.metrics_url
    fams = scrape(url)
    for need in ("causeway_launches_total", "causeway_launch_latency_seconds",
                 "causeway_compile_latency_seconds", "causeway_compile_cache_hits_total",
                 "causeway_upload_bytes_total", "causeway_launch_queue_depth",
                 "causeway_sessions", "causeway_workers", "causeway_buffers",
                 "causeway_buffer_bytes", "causeway_errors_total",
                 "causeway_transfer_sent_bytes_total"):
        assert need in fams, need
    assert value(fams, "causeway_workers", state="alive") == 2
    assert value(fams, "causeway_workers", state="dead") == 0

    size = 1 << 16  # float32s: 256 KiB
    a = _runner(cluster, "metrics-a")
    try:
        up = a.call("metrics_setup", size=size)
        w0 = up["worker"]  # the island of jax.devices()[0]
        w1 = ({"hand-worker-0", "hand-worker-1"} - {w0}).pop()
        # Per-worker figures come from the once-a-second STATS poll.
        assert harness.wait_until(
            lambda: value(scrape(url), "causeway_upload_bytes_total",
                          worker=w0) >= up["bytes"], 15), scrape(url)
        fams = scrape(url)
        assert value(fams, "causeway_sessions") >= 1
        assert value(fams, "causeway_compiles_total") >= 1
        before = value(fams, "causeway_launches_total", worker=w0)
        lat_before = value(fams, "causeway_launch_latency_seconds_count")
        n = 7
        out = a.call("metrics_launch", n=n)
        assert harness.wait_until(
            lambda: value(scrape(url), "causeway_launches_total", worker=w0)
            >= before + n, 15)
        time.sleep(0.3)
        fams = scrape(url)
        assert value(fams, "causeway_launches_total", worker=w0) == before + n
        assert value(fams, "causeway_launches_total", worker=w1) == 0
        assert value(fams, "causeway_launch_latency_seconds_count") - lat_before == n
        # The workers' own count (from their STATS; direct launches included).
        assert harness.wait_until(
            lambda: value(scrape(url), "causeway_worker_launches_total", worker=w0)
            >= before + n, 15), scrape(url)
        sess = fams["causeway_session_launches_total"]["samples"]
        assert any(v >= n + 1 for _, _, v in sess), sess
        assert harness.wait_until(
            lambda: value(scrape(url), "causeway_download_bytes_total",
                          worker=w0) >= out["bytes"], 15)
        fams = scrape(url)
        assert value(fams, "causeway_buffers", worker=w0) >= 1
        assert value(fams, "causeway_buffer_bytes", worker=w0) >= up["bytes"]

        # Compiles: every answered compile is a hit or a miss, and the figures
        # equal the controller's STATS. (JAX serializes CompileOptions' map
        # fields in a varying order, so JAX's repeated compiles of one jit reach
        # the controller with different option bytes and miss the cache; the
        # C-level cache hit is covered by cw_controller_test. See the obs report.)
        compile_count = value(fams, "causeway_compile_latency_seconds_count")
        a.call("metrics_recompile")
        fams = scrape(url)
        st = harness.stats(cluster.controller)
        hits = value(fams, "causeway_compile_cache_hits_total")
        misses = value(fams, "causeway_compile_cache_misses_total")
        assert (hits, misses) == (st["cache_hits"], st["cache_misses"]), st
        assert value(fams, "causeway_compiles_total") == st["compiles"] == hits + misses
        assert value(fams, "causeway_compiles_queued") == st["compiles_queued"] == 0
        assert value(fams, "causeway_compiles_dropped_total") == st["compiles_dropped"]
        assert value(fams, "causeway_compile_latency_seconds_count") == compile_count + 1
        # A second session: counted as a live session and its compile answered.
        b = _runner(cluster, "metrics-b")
        try:
            b.call("metrics_setup", size=size)
            fams = scrape(url)
            assert value(fams, "causeway_sessions") >= 2
            assert value(fams, "causeway_compile_latency_seconds_count") == compile_count + 2
        finally:
            b.close()
    finally:
        a.close()


def _http(port: int, data: bytes, timeout: float = 10.0) -> bytes:
    s = socket.create_connection(("127.0.0.1", port), timeout=timeout)
    try:
        s.sendall(data)
        out = b""
        while True:
            try:
                chunk = s.recv(65536)
            except ConnectionResetError:
                return out + b"<reset>"  # closed with our bytes unread
            if not chunk:
                return out
            out += chunk
    finally:
        s.close()


def test_hostile_http_peers(cluster):
    port, url = cluster.metrics_port, cluster.metrics_url
    assert _http(port, b"\x16\x03\x01garbage\x00\xff\r\n\r\n").startswith(b"HTTP/1.1 400")
    # Refused at 8 KiB: the 431 arrives, or the close resets our unread rest.
    big = _http(port, b"GET /metrics HTTP/1.1\r\n" + b"X: " + b"a" * 20000)
    assert big.startswith(b"HTTP/1.1 431") or big == b"<reset>", big[:100]
    assert _http(port, b"DELETE /metrics HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 405")
    assert _http(port, b"GET /secret HTTP/1.1\r\n\r\n").startswith(b"HTTP/1.1 404")
    assert _http(port, b"HEAD /metrics HTTP/1.0\r\n\r\n").startswith(b"HTTP/1.1 200")
    try:
        urllib.request.urlopen(url.replace("/metrics", "/"), timeout=10)
        raise AssertionError("GET / must be 404")
    except urllib.error.HTTPError as e:
        assert e.code == 404
    # A slow client trickling its head, and many idle ones past the limit:
    # scrapes are still answered at once, and the slow one is cut off.
    slow = socket.create_connection(("127.0.0.1", port), timeout=30)
    slow.sendall(b"GET /met")
    idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(40)]
    try:
        for _ in range(3):
            scrape(url)
        assert harness.stats(cluster.controller)["workers"] == 2
        t0 = time.monotonic()
        slow.settimeout(30)
        try:
            while slow.recv(4096):
                pass
        except ConnectionResetError:
            pass
        assert time.monotonic() - t0 < 25, "the slow client was not cut off"
    finally:
        slow.close()
        for s in idle:
            s.close()
    # A peer that disconnects mid-request.
    s = socket.create_connection(("127.0.0.1", port))
    s.sendall(b"GET /metrics HTTP/1.1\r\n")
    s.close()
    fams = scrape(url)
    assert value(fams, "causeway_workers", state="alive") == 2
    # Clients are still served after all of that.
    r = _runner(cluster, "metrics-after-hostile")
    try:
        r.call("metrics_setup", size=16)
    finally:
        r.close()
