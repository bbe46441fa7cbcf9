"""Credentials changed while the cluster runs (docs/operations.md, "Rotating
credentials"): a controller and two workers started by hand on loopback TCP,
real JAX clients. The token is rotated in three steps (the controller reads
its file when it changes, the workers on SIGHUP): a client with the new token
joins in between, one with the old token is refused at the end, a session
that connected with the old one keeps training, and after a controller
restart that session reconnects with the token its own file now holds. The
TLS certificate and key are replaced with new ones: new connections get the
new certificate, sessions keep going, a broken key changes nothing, and the
certificate's end is exported as a metric."""
from __future__ import annotations

import hashlib
import os
import re
import signal
import socket
import ssl
import subprocess
import time
import urllib.request

import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "restart_checks.py")
WORKER_ARGS = ("--heartbeat-ms", "200", "--reconnect-max-ms", "300",
               "--credentials-check-ms", "0")  # workers read again on SIGHUP only
CONTROLLER_ARGS = ("--credentials-check-ms", "100")


def _write(path: str, text: str) -> None:
    """Whole at once (a rename): a daemon's check never reads it half written."""
    tmp = f"{path}.new"
    with open(tmp, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def _reloads(cluster, name: str) -> int:
    return len(re.findall(r"credentials reloaded \(", cluster.log(name)))


def _workers(cluster) -> list[str]:
    return [k for k in cluster.procs if k != "controller"]


def _rotate(cluster, path: str, text: str) -> None:
    """Writes the daemons' token file: the controller sees the change itself,
    the workers are sent SIGHUP; returns once each logged the reload."""
    before = {n: _reloads(cluster, n) for n in cluster.procs}
    _write(path, text)
    for n in _workers(cluster):
        cluster.procs[n].send_signal(signal.SIGHUP)
    assert harness.wait_until(
        lambda: all(_reloads(cluster, n) > before[n] for n in cluster.procs), 30), cluster.logs()


def _runner(name: str, cluster, **env_extra) -> harness.Runner:
    env = harness.causeway_env(controller=cluster.controller)
    env.pop("CAUSEWAY_TOKEN", None)
    env.pop("CAUSEWAY_TOKEN_FILE", None)
    env["CW_RUNNER_CHECKS"] = CHECKS
    env["CAUSEWAY_MIN_WORKERS"] = "2"
    env.update(env_extra)
    return harness.Runner(name, env)


def _backend_init(name: str, cluster, **env_extra) -> dict:
    r = _runner(name, cluster, CW_RUNNER_LAZY="1", **env_extra)
    try:
        return r.call("backend_init", timeout=120)
    finally:
        r.close()


def test_token_rotated_without_a_restart(tmp_path):
    cluster = harness.HandCluster(workers=2, devices=2, tcp=True, token="old-token-5b1e",
                                  controller_args=CONTROLLER_ARGS, worker_args=WORKER_ARGS)
    daemons_file = cluster.env["CAUSEWAY_TOKEN_FILE"]
    client_file = str(tmp_path / "client-token")
    _write(client_file, "old-token-5b1e\n")
    a = _runner("cred-a", cluster, CAUSEWAY_TOKEN_FILE=client_file)
    try:
        ref = a.call("train", steps=8)
        # 1: the new token accepted beside the old.
        _rotate(cluster, daemons_file, "old-token-5b1e\nnew-token-c3d2\n")
        got = _backend_init("cred-b", cluster, CAUSEWAY_TOKEN="new-token-c3d2")
        assert got["ok"] and got["devices"] == 4, (got, cluster.logs())
        # 2: the new one presented (workers to the controller and to each other).
        _rotate(cluster, daemons_file, "new-token-c3d2\nold-token-5b1e\n")
        # 3: the old one dropped: a new client with it is refused, saying so.
        _rotate(cluster, daemons_file, "new-token-c3d2\n")
        got = _backend_init("cred-c", cluster, CAUSEWAY_TOKEN="old-token-5b1e")
        assert not got["ok"], got
        assert f"the controller at {cluster.controller} refused this client's token" \
            in got["error"], got
        # The session that connected with the old token trains on.
        assert (a.call("train", steps=8)["losses"] == ref["losses"]).all()
        # After a controller restart it reconnects: with the token its file
        # holds now (the plugin reads the file again when it changed).
        _write(client_file, "new-token-c3d2\n")
        cluster.kill("controller", signal.SIGKILL)
        time.sleep(0.5)
        cluster.start_controller()
        assert harness.wait_until(lambda: re.search(r"resumed session \d+ on the controller",
                                                    a.log_text()), 60), \
            f"{a.log_tail()}\n{cluster.log('controller')}"
        # A program it never ran: compiled through the new controller.
        got = a.call("train", steps=8, probe_at=2)
        assert (got["losses"] == ref["losses"]).all()
        assert harness.wait_until(lambda: harness.stats(cluster.controller,
                                                        "new-token-c3d2")["workers"] == 2, 30)
        # The new controller refused nobody: workers and the client presented the new token.
        assert "refused HELLO" not in \
            cluster.log("controller").split("causeway-controller listening on")[-1]
        for n in cluster.procs:
            assert cluster.procs[n].poll() is None, cluster.logs()
    finally:
        a.close()
        cluster.stop()


# ---- TLS ----------------------------------------------------------------------------------

def _certs(*args: str) -> None:
    r = subprocess.run([os.path.join(harness.bin_dir(), "causeway"), "certs", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr


def _served(address: str, ca: str) -> str:
    """SHA-256 of the certificate a daemon presents to a new connection."""
    host, port = address.rsplit(":", 1)
    ctx = ssl.create_default_context(cafile=ca)
    ctx.check_hostname = False
    with socket.create_connection((host, int(port)), timeout=10) as s:
        with ctx.wrap_socket(s) as t:
            return hashlib.sha256(t.getpeercert(binary_form=True)).hexdigest()


def _metrics(port: int) -> str:
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        return r.read().decode()


def _reload_failures(port: int) -> int:
    """The controller's refused reloads: a renewal that lands between its two
    files may count one, so tests compare with the figure before."""
    m = re.search(r"^causeway_credential_reload_failures_total (\d+)$", _metrics(port), re.M)
    return int(m.group(1))


def test_tls_certificates_replaced_without_a_restart(tmp_path):
    d = tmp_path / "pki"
    d.mkdir()
    _certs("ca", "--dir", str(d))
    daemon = ("daemon", "daemon", "--dir", str(d), "--host", "127.0.0.1", "--host", "localhost")
    _certs(*daemon)
    ca, cert, key = str(d / "ca.pem"), str(d / "daemon.pem"), str(d / "daemon.key")
    tls = {"CAUSEWAY_TLS": "1", "CAUSEWAY_TLS_CA": ca}
    port = harness.free_tcp_port()
    with harness.Environ({**tls, "CAUSEWAY_TLS_CERT": cert, "CAUSEWAY_TLS_KEY": key}):
        cluster = harness.HandCluster(
            workers=2, devices=2, tcp=True, token="tls-rotation-token",
            controller_args=(*CONTROLLER_ARGS, "--metrics-listen", f"127.0.0.1:{port}"),
            worker_args=WORKER_ARGS)
    env = {**tls, "CAUSEWAY_TOKEN": "tls-rotation-token", "CAUSEWAY_TLS_CERT": "",
           "CAUSEWAY_TLS_KEY": ""}
    a = _runner("cred-tls-a", cluster, **env)
    try:
        ref = a.call("train", steps=8)
        daemons = [cluster.controller] + [cluster.addresses[n] for n in _workers(cluster)]
        before = {addr: _served(addr, ca) for addr in daemons}
        # The end of the certificate, for alerts: the controller's and, from
        # their STATS, the workers'.
        text = _metrics(port)
        end = int(re.search(r"^causeway_tls_certificate_expiry_timestamp_seconds (\d+)$", text,
                            re.M).group(1))
        assert 364 * 86400 < end - time.time() < 366 * 86400, end
        assert harness.wait_until(lambda: len(re.findall(
            r"^causeway_worker_tls_certificate_expiry_timestamp_seconds\{", _metrics(port),
            re.M)) == 2, 30), _metrics(port)

        # A new key and certificate, as `causeway certs` renews them.
        _certs(*daemon, "--force")
        for n in _workers(cluster):
            cluster.procs[n].send_signal(signal.SIGHUP)
        assert harness.wait_until(lambda: all(_served(addr, ca) != before[addr]
                                              for addr in daemons), 30), cluster.logs()
        after = {addr: _served(addr, ca) for addr in daemons}
        assert (a.call("train", steps=8)["losses"] == ref["losses"]).all()
        got = _backend_init("cred-tls-b", cluster, **env)
        assert got["ok"] and got["devices"] == 4, (got, cluster.logs())

        # A key that is not the certificate's (another daemon's, put in place
        # whole): refused, the pair in use kept.
        failed = _reload_failures(port)
        other = tmp_path / "other"
        other.mkdir()
        _certs("daemon", "other", "--dir", str(other), "--ca-dir", str(d), "--host", "127.0.0.1")
        os.replace(other / "other.key", key)
        assert harness.wait_until(lambda: _reload_failures(port) > failed, 30), \
            cluster.log("controller")
        assert re.search(r"credentials not reloaded \(a credentials file changed\): TLS: "
                         r"CAUSEWAY_TLS_KEY \S+ is not the key of CAUSEWAY_TLS_CERT",
                         cluster.log("controller")), cluster.log("controller")
        assert _served(cluster.controller, ca) == after[cluster.controller]
        got = _backend_init("cred-tls-c", cluster, **env)
        assert got["ok"], (got, cluster.logs())
        for n in cluster.procs:
            assert cluster.procs[n].poll() is None, cluster.logs()
    finally:
        a.close()
        cluster.stop()


def _hup_ignored(pid: int) -> bool:
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            if line.startswith("SigIgn:"):
                return bool(int(line.split()[1], 16) & (1 << (signal.SIGHUP - 1)))
    return False


def test_sighup_while_starting_ends_nothing(tmp_path):
    """A SIGHUP that lands while a worker still loads its PJRT plugin (seconds
    for a GPU's; a `systemctl reload` just after a start) ended it, and
    systemd does not restart a unit that SIGHUP ended. The plugin here is a
    FIFO, which holds the worker in its dlopen until the test writes junk."""
    fifo = str(tmp_path / "plugin.so")
    os.mkfifo(fifo)
    env = {k: v for k, v in os.environ.items() if not k.startswith("CAUSEWAY_TOKEN")}
    p = subprocess.Popen([os.path.join(harness.bin_dir(), "causeway-worker"), "--plugin", fifo,
                          "--devices", "1", "--listen", str(tmp_path / "w.sock")],
                         env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        harness.wait_until(lambda: _hup_ignored(p.pid), 10)
        p.send_signal(signal.SIGHUP)
        fd = None
        while fd is None and p.poll() is None:
            try:
                fd = os.open(fifo, os.O_WRONLY | os.O_NONBLOCK)  # once the worker reads it
            except OSError:
                time.sleep(0.02)
        if fd is not None:
            os.write(fd, b"not a library\n")
            os.close(fd)
        _, err = p.communicate(timeout=30)
        assert p.returncode == 1 and "causeway-worker: fatal: " in err, (p.returncode, err)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
