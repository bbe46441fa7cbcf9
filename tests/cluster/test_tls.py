"""TLS on every TCP connection, end to end (issue 11 item 3): a controller
and two workers started by hand on loopback TCP with TLS on and a token, their
certificates made with `causeway certs`. A JAX client trains and moves arrays
between workers (client <-> controller, client <-> workers, worker <-> worker,
worker <-> controller all in TLS: every listener refuses plaintext), with the
same results as stock JAX; the token never crosses the network in clear (a
relay between the client and the controller records every byte); a client
with TLS off, or trusting another CA, is refused with an error that says
so; hostile peers (garbage instead of a ClientHello, a handshake cut short,
garbage after a handshake, a TLS handshake at a plaintext port) never crash
a daemon; with mutual TLS a client without a certificate is refused and one
with the cluster's certificate trains."""
from __future__ import annotations

import os
import pathlib
import re
import socket
import ssl
import subprocess

import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

TOKEN = "tls-test-token-e41b7d"
FAILED_PRECONDITION = 9


def _certs(args: list[str]) -> str:
    r = subprocess.run([os.path.join(harness.bin_dir(), "causeway"), "certs", *args],
                       capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    return r.stdout


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    d = tmp_path_factory.mktemp("pki")
    _certs(["ca", "--dir", str(d)])
    _certs(["daemon", "daemon", "--dir", str(d), "--host", "127.0.0.1", "--host", "localhost"])
    _certs(["client", "alice", "--dir", str(d)])
    other = tmp_path_factory.mktemp("other-pki")
    _certs(["ca", "--dir", str(other)])
    for f in d.iterdir():
        assert (f.stat().st_mode & 0o777) == 0o600, f
    return {"dir": d, "ca": str(d / "ca.pem"), "cert": str(d / "daemon.pem"),
            "key": str(d / "daemon.key"), "client_cert": str(d / "alice.pem"),
            "client_key": str(d / "alice.key"), "other_ca": str(other / "ca.pem")}


def _tls_env(pki, cert: str | None = None, key: str | None = None) -> dict:
    env = {"CAUSEWAY_TLS": "1", "CAUSEWAY_TLS_CA": pki["ca"]}
    if cert:
        env.update(CAUSEWAY_TLS_CERT=cert, CAUSEWAY_TLS_KEY=key)
    return env


@pytest.fixture(scope="module")
def cluster(pki):
    daemons = _tls_env(pki, pki["cert"], pki["key"])
    with harness.Environ({**daemons, "CAUSEWAY_LOG_LEVEL": "info"}):
        c = harness.HandCluster(workers=2, devices=4, tcp=True, token=TOKEN)
    yield c
    c.stop()


def _client_env(cluster, pki, **extra) -> dict:
    env = harness.causeway_env(controller=cluster.controller)
    for k in ("CAUSEWAY_TOKEN_FILE", "CAUSEWAY_TLS_CERT", "CAUSEWAY_TLS_KEY", "CAUSEWAY_LOG_LEVEL"):
        env.pop(k, None)
    env.update(_tls_env(pki))
    env["CAUSEWAY_TOKEN"] = TOKEN
    env.update(extra)
    return env


def _backend_init(name, env) -> dict:
    env = dict(env, CW_RUNNER_LAZY="1")
    r = harness.Runner(name, env)
    try:
        return r.call("backend_init", timeout=60)
    finally:
        r.close()


def _stats(cluster, pki, address):
    with harness.Environ({**_tls_env(pki), "CAUSEWAY_TLS_CERT": "", "CAUSEWAY_TLS_KEY": ""}):
        return harness.stats(address, TOKEN)


def test_jax_trains_and_moves_arrays_over_tls(cluster, pki):
    ref = harness.Runner("tls-ref", harness.stock_env())
    r = harness.Runner("tls-client", _client_env(cluster, pki))
    try:
        for check in ("train_mlp", "cross_island_put"):
            want, got = harness.run_both(ref, r, check)
            harness.assert_same(want, got)
    finally:
        r.close()
        ref.close()
    # Bytes went worker to worker (PUT links) and through every daemon.
    for name in ("hand-worker-0", "hand-worker-1"):
        assert _stats(cluster, pki, cluster.addresses[name])["sessions"] >= 0
    for name in ("controller", "hand-worker-0", "hand-worker-1"):
        log = cluster.log(name)
        assert not re.search(r"TLS .*failed|refused", log), log[-3000:]


def test_token_never_crosses_in_clear(cluster, pki):
    relay = harness.TcpRelay(cluster.controller)
    try:
        env = _client_env(cluster, pki)
        env["CAUSEWAY_CONTROLLER"] = relay.address
        r = harness.Runner("tls-relay", env)
        try:
            assert r.wait_ready()["devices"] == 8
            assert r.call("health", timeout=120)
        finally:
            r.close()
    finally:
        relay.close()
    assert relay.connections >= 1
    assert len(relay.up) > 1000 and len(relay.down) > 1000
    # TLS records from the first byte, and no secret in them.
    assert relay.up[:2] == b"\x16\x03" and relay.down[:2] == b"\x16\x03"
    for stream in (relay.up, relay.down):
        assert TOKEN.encode() not in stream
        assert b"causeway-pjrt" not in stream  # the HELLO's peer name: inside TLS too


def test_plaintext_client_is_refused(cluster, pki):
    env = _client_env(cluster, pki)
    env.pop("CAUSEWAY_TLS")
    res = _backend_init("tls-plain", env)
    assert not res["ok"], res
    assert res["elapsed"] < 10, res
    assert "this daemon requires TLS on TCP connections" in res["error"], res
    assert cluster.controller in res["error"], res
    assert re.search(r"127\.0\.0\.1:\d+: refused: plaintext causeway frames on a TLS port",
                     cluster.log("controller")), cluster.log("controller")[-3000:]


def test_client_trusting_another_ca_is_refused(cluster, pki):
    res = _backend_init("tls-other-ca", _client_env(cluster, pki, CAUSEWAY_TLS_CA=pki["other_ca"]))
    assert not res["ok"], res
    err = res["error"]
    assert f"TLS handshake with {cluster.controller} failed: certificate verify failed" in err, err
    assert "not signed by the CA in CAUSEWAY_TLS_CA" in err, err
    assert TOKEN not in err


def test_tool_names_local_tls_mistakes(cluster, pki):
    # A missing CA file is this host's mistake, not an unreachable
    # controller: usage exit 2, not 3 with "cannot reach".
    env = _client_env(cluster, pki, CAUSEWAY_TLS_CA="/nonexistent/ca.pem")
    p = subprocess.run([os.path.join(harness.bin_dir(), "causeway"), "status", "--controller",
                        cluster.controller], env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert p.stderr.startswith("causeway: TLS settings: CAUSEWAY_TLS_CA /nonexistent/ca.pem: "
                               "No such file or directory"), p.stderr
    # With its settings right, the tool reaches the controller over TLS.
    p = subprocess.run([os.path.join(harness.bin_dir(), "causeway"), "status", "--controller",
                        cluster.controller], env=_client_env(cluster, pki), capture_output=True,
                       text=True, timeout=60)
    assert p.returncode == 0, (p.returncode, p.stderr)


def _connect(addr: str) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    return socket.create_connection((host, int(port)), timeout=10)


def _closed(s: socket.socket) -> bool:
    try:
        while True:
            data = s.recv(65536)
            if not data:
                return True
    except (ConnectionResetError, BrokenPipeError):
        return True
    except socket.timeout:
        return False


def _hostile_tls(addr: str, pki) -> None:
    # Garbage instead of a ClientHello.
    with _connect(addr) as s:
        s.sendall(os.urandom(512))
        assert _closed(s)
    # A TLS record header that promises a huge ClientHello, then nothing.
    with _connect(addr) as s:
        s.sendall(b"\x16\x03\x01\xff\xff\x01\x00\xff\xfb" + os.urandom(100))
        s.shutdown(socket.SHUT_WR)
        assert _closed(s)
    # A ClientHello cut short.
    ctx = ssl.create_default_context(cafile=pki["ca"])
    raw = _connect(addr)
    incoming, outgoing = ssl.MemoryBIO(), ssl.MemoryBIO()
    obj = ctx.wrap_bio(incoming, outgoing, server_hostname="127.0.0.1")
    try:
        obj.do_handshake()
    except ssl.SSLWantReadError:
        pass
    hello = outgoing.read()
    raw.sendall(hello[: len(hello) // 2])
    raw.close()
    # A full handshake, then garbage instead of records.
    with ctx.wrap_socket(_connect(addr), server_hostname="127.0.0.1") as t:
        under = socket.socket(fileno=os.dup(t.fileno()))  # beneath the TLS layer
        under.settimeout(10)
        under.sendall(b"\x17\x03\x03\x00\x20" + os.urandom(32))
        assert _closed(under)
        under.close()
    # A full handshake, then garbage plaintext (not a frame).
    with ctx.wrap_socket(_connect(addr), server_hostname="127.0.0.1") as t:
        t.sendall(b"GET / HTTP/1.1\r\n\r\n" + os.urandom(64))
        data = b""
        try:
            while True:
                chunk = t.recv(4096)
                if not chunk:
                    break
                data += chunk
        except (ssl.SSLError, OSError):
            pass
        assert len(data) < 4096


def test_hostile_tls_peers_never_crash_a_daemon(cluster, pki):
    for name in ("controller", "hand-worker-0"):
        addr = cluster.controller if name == "controller" else cluster.addresses[name]
        _hostile_tls(addr, pki)
    # A worker with TLS off beside them: a TLS handshake at its plaintext
    # port is closed with a log line; its own REGISTER, in plaintext, is
    # refused by the TLS controller.
    plain = cluster.start_worker("plain-worker", env={"CAUSEWAY_TLS": "0"})
    ctx = ssl.create_default_context(cafile=pki["ca"])
    with _connect(plain) as s:
        with pytest.raises((ssl.SSLError, ConnectionResetError, OSError)):
            ctx.wrap_socket(s, server_hostname="127.0.0.1")
    assert harness.wait_until(lambda: re.search(
        r"refused: a TLS handshake on a plaintext port", cluster.log("plain-worker")), 10), \
        cluster.log("plain-worker")[-3000:]
    assert harness.wait_until(lambda: "this daemon requires TLS on TCP connections"
                              in cluster.log("plain-worker"), 15), \
        cluster.log("plain-worker")[-3000:]
    cluster.kill("plain-worker", harness.signal.SIGTERM)
    # Everyone else still serves.
    for name, p in cluster.procs.items():
        if name != "plain-worker":
            assert p.poll() is None, (name, cluster.log(name)[-3000:])
    assert _stats(cluster, pki, cluster.controller)["workers"] >= 2
    assert _stats(cluster, pki, cluster.addresses["hand-worker-0"])["sessions"] >= 0


def test_mutual_tls(pki):
    daemons = {**_tls_env(pki, pki["cert"], pki["key"]),
               "CAUSEWAY_TLS_REQUIRE_CLIENT_CERT": "1"}
    with harness.Environ(daemons):
        c = harness.HandCluster(workers=1, devices=4, tcp=True, token=TOKEN)
    try:
        res = _backend_init("mtls-anon", _client_env(c, pki))
        assert not res["ok"], res
        assert "the peer requires a client certificate for mutual TLS" in res["error"], res
        assert re.search(r"TLS handshake failed: peer did not return a certificate",
                         c.log("controller")), c.log("controller")[-3000:]
        env = _client_env(c, pki, CAUSEWAY_TLS_CERT=pki["client_cert"],
                          CAUSEWAY_TLS_KEY=pki["client_key"])
        r = harness.Runner("mtls-alice", env)
        try:
            assert r.wait_ready()["devices"] == 4
            out = r.call("train_mlp", timeout=300, steps=20)
            losses = out["losses"]
            assert losses[-1] < losses[0]
        finally:
            r.close()
    finally:
        c.stop()
