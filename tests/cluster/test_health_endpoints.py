"""Health probes on the daemons' HTTP port (--metrics-listen): /healthz and
/readyz of a real controller and real workers, through the states an
orchestrator's probes must tell apart -- a worker whose controller is not
there yet, registered, its controller lost and back, standalone; a
controller listening, then gone."""
from __future__ import annotations

import os
import re
import subprocess
import tempfile
import time
import urllib.error
import urllib.request

import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))


def get(url: str, method: str = "GET") -> tuple[int, str]:
    req = urllib.request.Request(url, method=method)
    try:
        with urllib.request.urlopen(req, timeout=10) as r:
            return r.status, r.read().decode()
    except urllib.error.HTTPError as e:
        return e.code, e.read().decode()


def http_base(log_text: str, who: str) -> str | None:
    m = re.search(rf"{who} (?:http|metrics) on (http://[0-9.]+:[0-9]+)", log_text)
    return m.group(1) if m else None


def wait_base(read_log, who: str) -> str:
    assert harness.wait_until(lambda: http_base(read_log(), who) is not None, 30), read_log()
    return http_base(read_log(), who)


def wait_status(url: str, code: int, timeout: float = 20) -> str:
    last = [None, ""]

    def ok():
        last[:] = get(url)
        return last[0] == code
    assert harness.wait_until(ok, timeout, interval=0.1), f"{url}: {last}"
    return last[1]


@pytest.fixture()
def cluster():
    c = harness.HandCluster(workers=2, devices=1, tcp=True,
                            controller_args=("--metrics-listen", "127.0.0.1:0"),
                            worker_args=("--metrics-listen", "127.0.0.1:0",
                                         "--reconnect-max-ms", "200"))
    yield c
    c.stop()


def test_probes_follow_registration_and_the_controller(cluster):
    ctl = wait_base(lambda: cluster.log("controller"), "causeway-controller")
    workers = {n: wait_base(lambda n=n: cluster.log(n), "causeway-worker")
               for n in ("hand-worker-0", "hand-worker-1")}
    assert get(ctl + "/healthz") == (200, "ok\n")
    body = wait_status(ctl + "/readyz", 200)
    assert body.startswith("ready: listening on ") and "2 of 2 workers alive" in body, body
    for base in workers.values():
        assert get(base + "/healthz") == (200, "ok\n")
        assert wait_status(base + "/readyz", 200) == "ready: 1 devices, registered\n"
    # HEAD answers without a body; other methods and paths are refused.
    assert get(ctl + "/readyz", "HEAD") == (200, "")
    assert get(ctl + "/healthz", "POST")[0] == 405
    assert get(ctl + "/nope")[0] == 404
    assert get(workers["hand-worker-0"] + "/metrics")[0] == 404

    # The controller dies: workers stay alive (healthz) but are not ready
    # until they have registered with its replacement.
    cluster.kill("controller")
    for base in workers.values():
        body = wait_status(base + "/readyz", 503)
        assert body == "not ready: not registered with the controller\n", body
        assert get(base + "/healthz") == (200, "ok\n")
    with pytest.raises(OSError):
        urllib.request.urlopen(ctl + "/healthz", timeout=5)
    before = len(cluster.log("controller"))  # the new controller's lines come after
    cluster.start_controller()
    ctl = wait_base(lambda: cluster.log("controller")[before:], "causeway-controller")
    for base in workers.values():
        wait_status(base + "/readyz", 200)
    assert "2 of 2 workers alive" in wait_status(ctl + "/readyz", 200)


def test_worker_before_its_controller_and_standalone():
    d = tempfile.mkdtemp(prefix="cw-probes-")
    procs = []

    def start(name, *args):
        log = os.path.join(d, name + ".log")
        with open(log, "wb") as f:
            procs.append(subprocess.Popen(
                [os.path.join(harness.bin_dir(), "causeway-worker"), "--plugin",
                 harness.cpu_plugin(), "--devices", "1", "--metrics-listen", "127.0.0.1:0",
                 *args], stdout=f, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL))
        return lambda: open(log, errors="replace").read()
    try:
        # No controller at that address yet: alive, not ready, and it stays so.
        orphan = wait_base(start("orphan", "--listen", os.path.join(d, "w.sock"),
                                 "--controller", os.path.join(d, "nobody.sock")),
                           "causeway-worker")
        assert get(orphan + "/healthz") == (200, "ok\n")
        time.sleep(0.5)
        assert get(orphan + "/readyz") == (503, "not ready: not registered with the controller\n")
        # No --controller at all: ready once its plugin is loaded.
        alone = wait_base(start("alone", "--listen", os.path.join(d, "s.sock")),
                          "causeway-worker")
        assert get(alone + "/readyz") == (200, "ready: 1 devices, standalone\n")
        # SIGTERM: a clean exit, the port closed.
        for p in procs:
            p.terminate()
            assert p.wait(timeout=30) == 0
        with pytest.raises(OSError):
            urllib.request.urlopen(alone + "/healthz", timeout=5)
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
                p.wait()
        subprocess.run(["rm", "-rf", d], check=False)


def test_embedded_cluster_with_metrics_listen():
    """CAUSEWAY_METRICS_LISTEN set for a JAX process names the embedded
    controller's port: its workers must not inherit it (they would all try to
    bind it and the cluster would not start)."""
    port = harness.free_tcp_port()
    env = harness.causeway_env()
    env["CAUSEWAY_METRICS_LISTEN"] = f"127.0.0.1:{port}"
    r = harness.Runner("embedded-metrics", env)
    try:
        info = r.call("backend_info")
        assert info["devices"] == 8, info
        code, body = get(f"http://127.0.0.1:{port}/readyz")
        assert code == 200, body
        code, body = get(f"http://127.0.0.1:{port}/metrics")
        assert code == 200 and "causeway_workers" in body, body[:500]
    finally:
        r.close()
