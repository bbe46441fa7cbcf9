"""Access control end to end (issue 4 item 6): a cluster started with a
token refuses every connection that does not present it -- JAX clients,
workers registering, raw sockets -- before looking at anything else, with an
error that says credentials were refused, and a log line on the daemon that
names the peer and its role, never the token. The embedded cluster makes its
own token and never puts it on a command line."""
from __future__ import annotations

import os
import pathlib
import re
import socket
import stat
import subprocess
import time

import numpy as np
import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

HERE = pathlib.Path(__file__).resolve().parent
TOKEN = "sec-test-token-7f3a9c"
UNAUTHENTICATED = 16
FAILED_PRECONDITION = 9


@pytest.fixture(scope="module")
def cluster():
    c = harness.HandCluster(workers=1, devices=2, tcp=True, token=TOKEN)
    yield c
    c.stop()


def _client_env(cluster, **extra) -> dict:
    env = harness.causeway_env(controller=cluster.controller)
    for k in ("CAUSEWAY_TOKEN", "CAUSEWAY_TOKEN_FILE"):
        env.pop(k, None)
    env["CW_RUNNER_LAZY"] = "1"
    env["CW_RUNNER_CHECKS"] = str(HERE / "security_checks.py")
    env.update(extra)
    return env


def _backend_init(name, env) -> dict:
    r = harness.Runner(name, env)
    try:
        return r.call("backend_init", timeout=60)
    finally:
        r.close()


def _log_has(cluster, name, pattern, timeout=10.0) -> str | None:
    def find():
        m = re.search(pattern, cluster.log(name))
        return m.group(0) if m else None
    return harness.wait_until(find, timeout)


def test_jax_client_without_token_is_refused(cluster):
    res = _backend_init("sec-notoken", _client_env(cluster))
    assert not res["ok"], res
    assert res["elapsed"] < 10, res  # refused at once, no hang
    err = res["error"]
    assert cluster.controller in err, err
    assert "refused this client's token" in err, err
    assert "UNAUTHENTICATED" in err and "CAUSEWAY_TOKEN" in err, err
    assert "no token presented" in err, err
    assert TOKEN not in err
    line = _log_has(cluster, "controller",
                    r"refused HELLO from 127\.0\.0\.1:\d+ \(role client\): credentials refused "
                    r"\(no token presented\)")
    assert line, cluster.log("controller")
    assert TOKEN not in cluster.log("controller")


def test_jax_client_with_wrong_token_is_refused(cluster):
    res = _backend_init("sec-wrongtoken", _client_env(cluster, CAUSEWAY_TOKEN="not-" + TOKEN))
    assert not res["ok"], res
    assert res["elapsed"] < 10, res
    err = res["error"]
    assert cluster.controller in err and "refused this client's token" in err, err
    assert "wrong token" in err, err
    assert TOKEN not in err.replace("not-" + TOKEN, "")
    assert _log_has(cluster, "controller",
                    r"refused HELLO from 127\.0\.0\.1:\d+ \(role client\): credentials refused "
                    r"\(wrong token\)"), cluster.log("controller")


def test_jax_client_with_right_token_works(cluster, tmp_path):
    # From a token file, and CAUSEWAY_TOKEN winning over a wrong file.
    good = tmp_path / "good"
    good.write_text(TOKEN + "\n")
    good.chmod(0o600)
    bad = tmp_path / "bad"
    bad.write_text("wrong\n")
    bad.chmod(0o600)
    want = {i: float((np.arange(16, dtype=np.float32) * 3 + 1).sum()) for i in range(2)}
    for name, extra in (("sec-file", {"CAUSEWAY_TOKEN_FILE": str(good)}),
                        ("sec-env-wins", {"CAUSEWAY_TOKEN": TOKEN,
                                          "CAUSEWAY_TOKEN_FILE": str(bad)})):
        r = harness.Runner(name, _client_env(cluster, **extra))
        try:
            res = r.call("backend_init", timeout=60)
            assert res["ok"] and res["devices"] == 2, res
            assert r.call("sec_compute", timeout=120) == want
        finally:
            r.close()


def test_worker_with_wrong_token_cannot_register(cluster):
    before = harness.stats(cluster.controller, TOKEN)["workers"]
    cluster.start_worker("bad-worker", devices=1, env=cluster.token_env("wrong-token", "env"),
                         wait=False)
    assert _log_has(cluster, "controller",
                    r"refused HELLO from 127\.0\.0\.1:\d+ \(role worker\): credentials refused "
                    r"\(wrong token\)", timeout=30), cluster.log("controller")
    assert _log_has(cluster, "bad-worker", r"refused REGISTER: .*credentials refused"), \
        cluster.log("bad-worker")
    assert harness.stats(cluster.controller, TOKEN)["workers"] == before
    # The worker itself requires its (wrong) token: the cluster's is refused there.
    with pytest.raises(RuntimeError, match=r"code 16: .*credentials refused: wrong token"):
        harness.stats(cluster.addresses["bad-worker"], TOKEN)
    assert "wrong-token" not in cluster.log("controller")


def test_direct_worker_connection_needs_the_token(cluster):
    addr = cluster.addresses["hand-worker-0"]
    with pytest.raises(RuntimeError, match=r"code 16: .*refused HELLO: credentials refused"):
        harness.stats(addr)
    assert harness.stats(addr, TOKEN)["sessions"] >= 0
    assert _log_has(cluster, "hand-worker-0",
                    r"refused HELLO from 127\.0\.0\.1:\d+ \(role client\): credentials refused"), \
        cluster.log("hand-worker-0")


# ---- Raw sockets -----------------------------------------------------------------



def _hello(token: bytes | None, role: int = 1) -> bytes:
    m = b"\x08\x01\x10\x01\x18" + harness.pb_varint(role)
    if token is not None:
        m += b"\x22" + harness.pb_varint(len(token)) + token
    return m + b"\x32\x03raw"


def _connect(addr: str) -> socket.socket:
    host, port = addr.rsplit(":", 1)
    s = socket.create_connection((host, int(port)), timeout=10)
    s.settimeout(10)
    return s


def _read_all(s: socket.socket) -> bytes:
    """Everything until the daemon closes (fails if it does not within 10 s)."""
    data = b""
    while True:
        chunk = s.recv(65536)
        if not chunk:
            return data
        data += chunk


def _frames(data: bytes) -> list:
    out = []
    while len(data) >= harness.FRAME_HDR.size:
        magic, _, mtype, flags, plen, rid, _ = harness.FRAME_HDR.unpack_from(data)
        assert magic == harness.FRAME_MAGIC
        payload = data[harness.FRAME_HDR.size:harness.FRAME_HDR.size + plen]
        code, msg = 0, ""
        for f, _, v in harness._pb_fields(payload) if flags & 2 else []:
            if f == 1:
                code = v
            elif f == 2:
                msg = v.decode()
        out.append((mtype, flags, rid, code, msg))
        data = data[harness.FRAME_HDR.size + plen:]
    return out


@pytest.mark.parametrize("target", ["controller", "hand-worker-0"])
def test_raw_sockets_are_refused(cluster, target):
    addr = cluster.controller if target == "controller" else cluster.addresses[target]
    # A request before HELLO.
    with _connect(addr) as s:
        s.sendall(harness.frame(15, 7, b""))
        fr = _frames(_read_all(s))
        assert len(fr) == 1 and fr[0][2] == 7 and fr[0][3] == FAILED_PRECONDITION, fr
        assert "STATS before HELLO" in fr[0][4], fr
    # Garbage: closed, at most an error reply.
    with _connect(addr) as s:
        s.sendall(os.urandom(16) + b"GET / HTTP/1.0\r\n\r\n" + b"\0" * 64)
        data = _read_all(s)
        assert len(data) < 4096
    # A wrong token with requests pipelined behind it: one refusal, nothing
    # else looked at, then closed.
    for token in (b"wrong", None):
        with _connect(addr) as s:
            s.sendall(harness.frame(1, 1, _hello(token)) + harness.frame(15, 2, b"") +
                      harness.frame(2, 3, b""))
            fr = _frames(_read_all(s))
            assert len(fr) == 1, fr
            assert fr[0][0] == 1 and fr[0][2] == 1 and fr[0][3] == UNAUTHENTICATED, fr
            assert fr[0][4].startswith("credentials refused: "), fr
            assert TOKEN not in fr[0][4]
    # The right token: served.
    with _connect(addr) as s:
        s.sendall(harness.frame(1, 1, _hello(TOKEN.encode())) +
                  harness.frame(2, 2, b"\x0a\x02hi"))
        got = b""
        while len(_frames(got)) < 2:
            chunk = s.recv(65536)
            assert chunk, _frames(got)
            got += chunk
        fr = _frames(got)
        assert [(f[0], f[1], f[2]) for f in fr] == [(1, 1, 1), (2, 1, 2)], fr


# ---- The embedded cluster ------------------------------------------------------------

def test_embedded_cluster_token_stays_off_command_lines(tmp_path):
    env = harness.causeway_env()
    for k in ("CAUSEWAY_TOKEN", "CAUSEWAY_TOKEN_FILE"):
        env.pop(k, None)
    env["CAUSEWAY_TOKEN"] = "a-token-the-children-must-not-use"  # stripped by the plugin
    env["TMPDIR"] = str(tmp_path)
    env["CW_RUNNER_CHECKS"] = str(HERE / "security_checks.py")
    r = harness.Runner("sec-embedded", env)
    try:
        assert r.wait_ready()["devices"] == harness.NUM_DEVICES
        kids = harness.cluster_children(r.pid)
        assert len(kids) == harness.NUM_WORKERS + 1, kids
        ctl_addr = kids["controller"][1]
        d = pathlib.Path(ctl_addr).parent
        assert stat.S_IMODE(d.stat().st_mode) == 0o700, oct(d.stat().st_mode)
        tok_path = d / "token"
        assert stat.S_IMODE(tok_path.stat().st_mode) == 0o600, oct(tok_path.stat().st_mode)
        token = tok_path.read_text().strip()
        assert re.fullmatch(r"[0-9a-f]{64}", token), "token is 32 random bytes in hex"
        for name, (pid, _) in kids.items():
            with open(f"/proc/{pid}/cmdline", "rb") as f:
                cmdline = f.read()
            assert token.encode() not in cmdline, name
            assert b"--token\0" not in cmdline and b"--token=" not in cmdline, (name, cmdline)
            assert b"a-token-the-children" not in cmdline, (name, cmdline)
            with open(f"/proc/{pid}/environ", "rb") as f:
                environ = f.read().split(b"\0")
            assert f"CAUSEWAY_TOKEN_FILE={tok_path}".encode() in environ, name
            assert not any(e.startswith(b"CAUSEWAY_TOKEN=") for e in environ), name
            # The compile cache directory travels the same way (on by default).
            want_cc = f"CAUSEWAY_COMPILE_CACHE_DIR={env['CAUSEWAY_COMPILE_CACHE_DIR']}".encode()
            assert want_cc in environ, name
        # The embedded daemons require it: a client without it is refused.
        with pytest.raises(RuntimeError, match="code 16"):
            harness.stats(ctl_addr, token="")
        assert harness.stats(ctl_addr, token)["workers"] == harness.NUM_WORKERS
        want = {i: float((np.arange(16, dtype=np.float32) * 3 + 1).sum())
                for i in range(harness.NUM_DEVICES)}
        assert r.call("sec_compute", timeout=120) == want
        # Another cluster gets another token.
        r2 = harness.Runner("sec-embedded-2", env)
        try:
            r2.wait_ready()
            kids2 = harness.cluster_children(r2.pid)
            other = (pathlib.Path(kids2["controller"][1]).parent / "token").read_text().strip()
            assert other != token
        finally:
            r2.close()
    finally:
        r.close()





def _serve_briefly(argv: list, env: dict) -> str:
    """Starts a server, checks it listens, stops it; returns its stderr."""
    p = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         text=True)
    try:
        line = p.stdout.readline()
        assert "listening on" in line, (line, p.stderr.read() if p.poll() is not None else "")
    finally:
        p.terminate()
        _, err = p.communicate(timeout=30)
    return err


@pytest.mark.parametrize("daemon", ["causeway-controller", "causeway-worker", "causeway-proxy"])
def test_servers_refuse_an_empty_token(daemon, tmp_path):
    # A Secret not filled in arrives as CAUSEWAY_TOKEN="": taken for "no
    # token", it would open the cluster to anyone. Every server refuses to
    # start instead, naming the variable; unset, it serves without one.
    env = {k: v for k, v in os.environ.items()
           if k not in ("CAUSEWAY_TOKEN", "CAUSEWAY_TOKEN_FILE")}
    env["CAUSEWAY_TOKEN"] = ""
    argv = [os.path.join(harness.bin_dir(), daemon), "--listen", str(tmp_path / "s.sock")]
    if daemon == "causeway-proxy":
        argv = [os.path.join(harness.bin_dir(), daemon), "--listen", "127.0.0.1:0"]
    p = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert ("CAUSEWAY_TOKEN is set but empty: set the cluster's token there or in "
            "CAUSEWAY_TOKEN_FILE, or unset CAUSEWAY_TOKEN to serve without one") in p.stderr, \
        p.stderr
    assert not (tmp_path / "s.sock").exists()
    # The token from a file beside the empty variable (a Secret mounted as a
    # file, an empty key left in the environment): served with it.
    tok = tmp_path / "token"
    tok.write_text("from-a-file\n")
    tok.chmod(0o600)
    env["CAUSEWAY_TOKEN_FILE"] = str(tok)
    _serve_briefly(argv, env)


@pytest.mark.parametrize("daemon", ["causeway-controller", "causeway-worker", "causeway-proxy"])
def test_servers_warn_once_of_a_loose_token_file(daemon, tmp_path):
    # A token file others can read: one warning at start. Until session 49
    # each server printed it twice (its settings and its credentials each
    # read the file).
    env = {k: v for k, v in os.environ.items()
           if k not in ("CAUSEWAY_TOKEN", "CAUSEWAY_TOKEN_FILE")}
    tok = tmp_path / "token"
    tok.write_text("loose\n")
    tok.chmod(0o644)
    env["CAUSEWAY_TOKEN_FILE"] = str(tok)
    argv = [os.path.join(harness.bin_dir(), daemon), "--listen", str(tmp_path / "s.sock")]
    if daemon == "causeway-proxy":
        argv = [os.path.join(harness.bin_dir(), daemon), "--listen", "127.0.0.1:0"]
    err = _serve_briefly(argv, env)
    want = f"token file {tok} is readable by group or others (mode 644); chmod 600 it"
    assert err.count(want) == 1, err
