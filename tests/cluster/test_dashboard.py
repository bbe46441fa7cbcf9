"""The Grafana dashboard (deploy/grafana/causeway.json) against what the
daemons really export: the JSON's shape (panels laid out without overlap,
every query on the dashboard's data source), then a live cluster scraped
after a JAX client ran on it -- every metric a query names must be a family
the controller exports, with samples, and every label a query selects or
groups by must be one of those metrics' labels."""
from __future__ import annotations

import json
import pathlib
import re
import subprocess

import pytest

import harness
from test_metrics import scrape

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

DASHBOARD = harness.ROOT / "deploy" / "grafana" / "causeway.json"
CLIENT = pathlib.Path(__file__).resolve().parent / "up_client.py"
_METRIC = re.compile(r"\bcauseway_[a-z0-9_]+\b")
_SELECTOR = re.compile(r"(causeway_[a-z0-9_]+)\{([^}]*)\}")
_BY = re.compile(r"\bby \(([^)]*)\)")
# PromQL functions and the dashboard's own variables are no labels.
_GRAFANA_VARS = re.compile(r"\$__rate_interval|\$worker")


def load() -> dict:
    return json.loads(DASHBOARD.read_text())


def panels(dash: dict) -> list:
    out = []
    for p in dash["panels"]:
        out.append(p)
        out.extend(p.get("panels", []))
    return out


def queries(dash: dict) -> list[str]:
    exprs = [t["expr"] for p in panels(dash) for t in p.get("targets", [])]
    for v in dash["templating"]["list"]:
        if v["type"] == "query":
            exprs.append(v["definition"])
    return exprs


def test_dashboard_shape():
    dash = load()
    assert dash["uid"] == "causeway" and dash["title"] == "causeway"
    names = {v["name"] for v in dash["templating"]["list"]}
    assert names == {"datasource", "worker"}
    ids = [p["id"] for p in panels(dash)]
    assert len(ids) == len(set(ids)), "panel ids repeat"
    cells = {}
    for p in panels(dash):
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        for dx in range(g["w"]):
            for dy in range(g["h"]):
                cell = (g["x"] + dx, g["y"] + dy)
                assert cell not in cells, f"{p['title']} overlaps {cells[cell]}"
                cells[cell] = p["title"]
        if p["type"] == "row":
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert p["targets"], p["title"]
        for t in p["targets"]:
            assert t["datasource"] == p["datasource"] and _METRIC.search(t["expr"]), t
    # The list: launch rate, latency histograms, queue depth, bytes,
    # cache hits, worker health.
    used = {m for e in queries(dash) for m in _METRIC.findall(e)}
    for need in ("causeway_worker_launches_total", "causeway_launch_latency_seconds_bucket",
                 "causeway_compile_latency_seconds_bucket", "causeway_launch_queue_depth",
                 "causeway_upload_bytes_total", "causeway_transfer_sent_bytes_total",
                 "causeway_compile_cache_hits_total", "causeway_worker_up"):
        assert need in used, need


def _family(fams: dict, sample_name: str) -> str | None:
    if sample_name in fams:
        return sample_name
    for suffix in ("_bucket", "_sum", "_count"):
        base = sample_name[: -len(suffix)]
        if sample_name.endswith(suffix) and fams.get(base, {}).get("type") == "histogram":
            return base
    return None


def test_dashboard_queries_name_exported_metrics():
    port = harness.free_tcp_port()
    c = harness.HandCluster(workers=2, devices=2, tcp=True,
                            controller_args=("--metrics-listen", f"127.0.0.1:{port}",
                                             "--relay-launches"))
    try:
        env = harness.causeway_env(controller=c.controller)
        r = subprocess.run([harness.PYTHON, str(CLIENT), "0"], env=env, capture_output=True,
                           text=True, timeout=300)
        assert r.returncode == 0, r.stderr[-3000:]
        url = f"http://127.0.0.1:{port}/metrics"
        # Per-worker figures come from STATS polled every second.
        assert harness.wait_until(
            lambda: scrape(url).get("causeway_buffers", {}).get("samples"), 10)
        fams = scrape(url)
    finally:
        c.stop()
    dash = load()
    for expr in queries(dash):
        names = _METRIC.findall(expr)
        labels = set()
        for name in names:
            fam = _family(fams, name)
            assert fam, f"{name} (in {expr!r}) is not exported"
            samples = [s for s in fams[fam]["samples"] if s[0] == name]
            assert samples, f"{name} has no samples after a client ran"
            for _, ls, _ in samples:
                labels |= set(ls)
        # Labels a query selects on or groups by exist on its metrics.
        wanted = set()
        for _, sel in _SELECTOR.findall(expr):
            wanted |= {m.split("=")[0].rstrip("!~") for m in
                       _GRAFANA_VARS.sub("", sel).split(",") if m.strip()}
        for group in _BY.findall(expr):
            wanted |= {g.strip() for g in group.split(",") if g.strip()}
        assert wanted <= labels, f"{expr!r}: labels {wanted - labels} not on {names}"
