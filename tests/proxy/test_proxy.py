"""causeway-proxy end to end: a cluster started by hand (controller and a
worker over loopback TCP), the proxy in front of it, and stock JAX's IFRT
proxy client (jaxlib 0.11.2) as the `proxy` backend; then a raw gRPC peer
for bad versions, metadata, methods and requests."""
from __future__ import annotations

import json
import os
import pathlib
import signal
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

import grpc
import pytest

import harness

HERE = pathlib.Path(__file__).resolve().parent
SERVICE = "/xla.ifrt.proxy.GrpcIfrtService/"
SESSION_MD = "ifrt-proxy-grpc-ifrt-session-metadata-bin"

pytestmark = pytest.mark.skipif(
    harness.missing_build() is not None
    or not os.path.exists(os.path.join(harness.bin_dir(), "causeway-proxy")),
    reason="causeway-proxy is not built: build the release tree (cmake --build build/release)")


class Proxy(harness.ProxyProcess):
    """causeway-proxy on a free loopback port in front of `controller`."""

    def __init__(self, controller: str, env: dict | None = None, listen: str = "127.0.0.1:0"):
        log = tempfile.NamedTemporaryFile(prefix="cw-proxy-", suffix=".log", delete=False)
        log.close()
        e = {k: v for k, v in os.environ.items() if not k.startswith("CAUSEWAY_")}
        e.update({"CAUSEWAY_CONTROLLER": controller,
                  "CAUSEWAY_PJRT_PLUGIN": harness.cpu_plugin(),
                  "CAUSEWAY_BIN_DIR": harness.bin_dir(),
                  "CAUSEWAY_PROXY_PJRT_LIBRARY": harness.pjrt_library(),
                  "CAUSEWAY_LOG_LEVEL": "info"})
        e.update(env or {})
        super().__init__(e, listen, log.name)


@pytest.fixture(scope="module")
def cluster():
    c = harness.HandCluster(workers=1, devices=4, tcp=True)
    yield c
    c.stop()


@pytest.fixture(scope="module")
def proxy(cluster):
    p = Proxy(cluster.controller)
    yield p
    rc = p.stop()
    assert rc == 0, p.logs()


def jax_client(address: str, mode: str = "report", env_extra: dict | None = None
               ) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("CAUSEWAY_", "JAX_"))}
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=4"  # stock JAX's side
    env.update(env_extra or {})
    return subprocess.Popen([sys.executable, str(HERE / "proxy_client.py"), address, mode],
                            env=env,
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def read_report(client: subprocess.Popen) -> dict:
    line = client.stdout.readline()
    if not line:
        client.wait(10)
        raise AssertionError(f"the JAX client said nothing:\n{client.stderr.read()}")
    return json.loads(line)


def finish(client: subprocess.Popen) -> None:
    client.stdin.write("\n")
    client.stdin.flush()
    client.wait(60)


def expect_jax_report(address: str) -> None:
    """jaxlib's client through the proxy at `address` sees the worker's 4
    devices and computes on each."""
    client = jax_client(address)
    try:
        out = read_report(client)
        assert len(out["devices"]) == 4 and out["compute"] == [0.0, 1.0, 2.0, 3.0], out
    finally:
        finish(client)


def sessions(controller: str) -> int:
    """Client sessions on the controller (the STATS probe is one of them)."""
    return harness.stats(controller)["sessions"] - 1


def test_stock_jax_sees_the_cluster_through_the_proxy(cluster, proxy):
    """JAX_PLATFORMS=proxy lists the worker's devices as causeway's plugin
    front does (ids, kind, memories); the IFRT session is a causeway session
    while the stream is open and is gone once it breaks."""
    before = sessions(cluster.controller)
    client = jax_client(proxy.address)
    try:
        out = read_report(client)
        assert out["backend"] == "cpu", out
        assert [d["id"] for d in out["devices"]] == [0, 1, 2, 3], out
        assert {d["kind"] for d in out["devices"]} == {"cpu"}, out
        assert out["devices"][0]["memories"] == ["device", "pinned_host", "unpinned_host"], out
        assert out["devices"][0]["default_memory"] == "device", out
        assert out["runtime_type"] == "proxy/causeway", out
        assert sessions(cluster.controller) == before + 1
        assert out["compute"] == [0.0, 1.0, 2.0, 3.0], out
    finally:
        finish(client)
    assert harness.wait_until(lambda: sessions(cluster.controller) == before, 30), proxy.logs()


def test_arrays_round_trip(cluster, proxy):
    """device_put and back through the proxy: every dtype, a scalar, an empty
    array, 64 MiB, replicated over four devices and split over them; the
    session's buffers on the worker are gone once the stream ends."""
    client = jax_client(proxy.address, "arrays")
    try:
        out = read_report(client)
        assert out["checks"] and all(out["checks"].values()), out
        assert harness.stats(cluster.addresses["hand-worker-0"])["buffers"] > 0
    finally:
        finish(client)
    assert harness.wait_until(
        lambda: harness.stats(cluster.addresses["hand-worker-0"])["buffers"] == 0, 30), \
        proxy.logs()


def test_programs_match_stock_jax(cluster, proxy):
    """Jitted programs through the proxy give stock JAX's results bit for
    bit: on one device (elementwise, matmul, reductions, random numbers,
    control flow, integers; 20 training steps of a small MLP) and over four
    devices (split, replicated, a 2-D mesh; 10 data-parallel MLP steps)."""
    client = jax_client(proxy.address, "compute")
    try:
        out = read_report(client)
    finally:
        finish(client)
    assert out["checks"] and all(out["checks"].values()), out


def test_unix_socket_for_its_owner_only(cluster):
    """On a Unix socket (jaxlib's client takes grpc://unix:PATH) the proxy
    serves as on TCP, and only its owner may use the socket: the file mode is the
    credential, since jaxlib's client sends no token and speaks no TLS."""
    d = tempfile.mkdtemp(prefix="cw-proxy-sock-")
    path = os.path.join(d, "proxy.sock")
    p = Proxy(cluster.controller, listen=path)
    try:
        assert os.stat(path).st_mode & 0o077 == 0  # nobody but the owner
        # A second proxy on the path is refused; it used to take the path over,
        # and the first one's exit then removed it from under the second.
        second = subprocess.run([os.path.join(harness.bin_dir(), "causeway-proxy"),
                                 "--listen", path], capture_output=True, text=True, timeout=60)
        assert second.returncode == 1, (second.returncode, second.stderr)
        assert f"--listen: {path}: another process is listening there" in second.stderr, \
            second.stderr
        # Peers that close at once (as that check does): the proxy's first
        # write to them used to raise SIGPIPE, which ended the proxy.
        for _ in range(20):
            with socket.socket(socket.AF_UNIX) as s:
                s.connect(path)
        time.sleep(0.5)
        assert p.proc.poll() is None, p.logs()
        expect_jax_report(p.address)
    finally:
        assert p.stop() == 0, p.logs()
    assert not os.path.exists(path)


def test_two_streams_are_two_sessions(cluster, proxy):
    before = sessions(cluster.controller)
    a, b = jax_client(proxy.address), jax_client(proxy.address)
    try:
        ra, rb = read_report(a), read_report(b)
        assert len(ra["devices"]) == len(rb["devices"]) == 4
        assert sessions(cluster.controller) == before + 2
    finally:
        finish(a)
    # One ends; the other's session stays.
    assert harness.wait_until(lambda: sessions(cluster.controller) == before + 1, 30)
    finish(b)
    assert harness.wait_until(lambda: sessions(cluster.controller) == before, 30)


# --- A raw gRPC peer -------------------------------------------------------------------

def varint(v: int) -> bytes:
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def field(num: int, body: bytes) -> bytes:
    return varint(num << 3 | 2) + varint(len(body)) + body


def version(protocol: int, serdes: int = 6) -> bytes:
    return varint(1 << 3) + varint(protocol) + varint(2 << 3) + varint(serdes)


def ifrt_request(kind: int, op_id: int, body: bytes = b"") -> bytes:
    md = varint(1 << 3 | 1) + struct.pack("<Q", op_id)
    return field(1, md) + field(kind, body)


def response_status(data: bytes) -> tuple[int, int, str]:
    """(op_id, code, message) of an IfrtResponse's metadata (hand decoded)."""
    md = dict(_fields(data)).get(1, b"")
    mdf = dict(_fields(md))
    st = dict(_fields(mdf.get(2, b"")))
    return mdf.get(1, 0), st.get(1, 0), st.get(2, b"").decode()


def _uvarint(b: bytes, i: int) -> tuple[int, int]:
    r = s = 0
    while True:
        c = b[i]
        i += 1
        r |= (c & 0x7F) << s
        s += 7
        if not c & 0x80:
            return r, i


def raw(channel, method: str):
    return channel.unary_unary(SERVICE + method, request_serializer=None,
                               response_deserializer=None)


def test_version_negotiation(proxy):
    with grpc.insecure_channel(proxy.address) as ch:
        got = raw(ch, "GetVersion")(field(1, version(16)) + field(2, version(25)), timeout=10)
        assert got == field(1, version(25)), got
        with pytest.raises(grpc.RpcError) as e:
            raw(ch, "GetVersion")(field(1, version(3)) + field(2, version(9)), timeout=10)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "speaks IFRT proxy protocol versions 25 to 25; the client offers 3 to 9" \
            in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            raw(ch, "GetVersion")(b"\xff\xff", timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT


def test_unknown_method_and_unserved_methods(proxy):
    with grpc.insecure_channel(proxy.address) as ch:
        with pytest.raises(grpc.RpcError) as e:
            ch.unary_unary("/no.Such/Method")(b"", timeout=10)
        assert e.value.code() == grpc.StatusCode.UNIMPLEMENTED
        assert "causeway-proxy has no method /no.Such/Method" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            raw(ch, "HostBufferReadFromDisk")(b"", timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "does not decode, names no handle (or 0)" in e.value.details()
        # Host buffers of a session that does not exist.
        ids = varint(1 << 3 | 1) + struct.pack("<Q", 77) + varint(2 << 3 | 1) + struct.pack("<Q", 5)
        for method in ("HostBufferDelete", "HostBufferLookup"):
            with pytest.raises(grpc.RpcError) as e:
                list(ch.unary_stream(SERVICE + method)(ids, timeout=10))
            assert e.value.code() == grpc.StatusCode.NOT_FOUND, method
            assert "no IFRT session 000000000000004d on this proxy" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            ch.stream_unary(SERVICE + "HostBufferStore")(iter([b""]), timeout=10)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "metadata ifrt-proxy-grpc-host-buffer-store-metadata-bin is missing" \
            in e.value.details()


def session_call(ch, requests, metadata):
    call = ch.stream_stream(SERVICE + "IfrtSession", request_serializer=None,
                            response_deserializer=None)
    return call(iter(requests), metadata=metadata, timeout=60)


def test_session_metadata_is_checked(proxy):
    with grpc.insecure_channel(proxy.address) as ch:
        for md, code, text in (
                ((), grpc.StatusCode.INVALID_ARGUMENT, f"metadata {SESSION_MD} is missing"),
                (((SESSION_MD, b"\xff\xff"),), grpc.StatusCode.INVALID_ARGUMENT,
                 "does not decode"),
                (((SESSION_MD, field(1, version(30))),), grpc.StatusCode.FAILED_PRECONDITION,
                 "the client offers 30 to 30")):
            with pytest.raises(grpc.RpcError) as e:
                list(session_call(ch, [ifrt_request(2, 1)], md))
            assert e.value.code() == code, e.value
            assert text in e.value.details(), e.value.details()


def test_sessions_and_silent_streams_are_bounded(cluster):
    """At most CAUSEWAY_PROXY_MAX_SESSIONS sessions at once (each holds a
    thread and a session of the cluster); the next is refused
    RESOURCE_EXHAUSTED, and one more fits once one ends. A stream opened and
    left silent (headers, no message) no longer takes its connection out of
    the first-call deadline: the connection is closed after it, where it
    used to stay open for good."""
    p = Proxy(cluster.controller, env={"CAUSEWAY_PROXY_MAX_SESSIONS": "2"})
    md = ((SESSION_MD, field(1, version(25))),)
    release = threading.Event()

    def held():
        yield ifrt_request(2, 1)
        release.wait(120)

    try:
        with grpc.insecure_channel(p.address) as ch:
            open_calls = [session_call(ch, held(), md) for _ in range(2)]
            firsts = [response_status(next(c)) for c in open_calls]  # Init answered
            assert [f[1] for f in firsts] == [0, 0], firsts
            with pytest.raises(grpc.RpcError) as e:
                list(session_call(ch, [ifrt_request(2, 1)], md))
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED, e.value
            assert ("causeway-proxy serves at most 2 sessions at once "
                    "(CAUSEWAY_PROXY_MAX_SESSIONS); 2 are open, 0 of them still opening after "
                    "their clients left") in e.value.details()
            # The operator reads it too (it was silent in the proxy's log).
            assert harness.wait_until(lambda: "session refused: causeway-proxy serves at most 2"
                                      in p.logs(), 10), p.logs()[-3000:]
            release.set()
            for c in open_calls:
                list(c)
            got = [response_status(r) for r in session_call(ch, [ifrt_request(2, 1)], md)]
            assert got == [(1, 0, "")], got
        # A stream that never sends its first message, on a connection of its
        # own (grpc shares connections between channels by default).
        t = time.monotonic()
        with grpc.insecure_channel(p.address,
                                   options=[("grpc.use_local_subchannel_pool", 1)]) as ch:
            silent = threading.Event()

            def nothing():
                silent.wait(60)
                return
                yield  # a generator that sends nothing

            with pytest.raises(grpc.RpcError) as e:
                list(session_call(ch, nothing(), md))
            silent.set()
        assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
        assert 9 < time.monotonic() - t < 40, time.monotonic() - t
    finally:
        release.set()
        assert p.stop() == 0, p.logs()


def test_bad_requests_get_answers_and_the_session_lives(cluster, proxy):
    """Garbage, an unknown kind, a bitcast without specs, a program that does not
    parse, a program of another type and an unknown executable (to run, to
    print) each get an error response naming the problem, in order; Init
    after them works."""
    md = ((SESSION_MD, field(1, version(25))),)
    junk_program = field(1, field(1, b"xla::ifrt::XlaProgram") + field(2, b"not a module")) + \
        field(2, field(1, b"xla::ifrt::XlaCompileOptions"))
    other_program = field(1, field(1, b"xla::ifrt::SomethingElse"))
    reqs = [b"\xff\xff\xff", ifrt_request(99, 5, b"x"),
            ifrt_request(34, 6, field(1, struct.pack("<Q", 1))),
            ifrt_request(13, 8, junk_program), ifrt_request(13, 9, other_program),
            ifrt_request(15, 10, varint(1 << 3 | 1) + struct.pack("<Q", 12345)),
            ifrt_request(29, 11, varint(1 << 3 | 1) + struct.pack("<Q", 777)),
            ifrt_request(2, 7)]
    with grpc.insecure_channel(proxy.address) as ch:
        got = [response_status(r) for r in session_call(ch, reqs, md)]
    assert len(got) == 8, got
    assert got[0][1] == grpc.StatusCode.INVALID_ARGUMENT.value[0]
    assert "an IfrtRequest of 3 bytes does not decode" in got[0][2]
    assert got[1][:2] == (5, grpc.StatusCode.INVALID_ARGUMENT.value[0])
    assert "names no request kind" in got[1][2]
    assert got[2] == (6, grpc.StatusCode.INVALID_ARGUMENT.value[0],
                      "BitcastArrays: 1 arrays, 0 specs, 0 result handles"), got[2]
    assert got[3][0] == 8 and got[3][1] != 0 and got[3][2].startswith("Compile: "), got[3]
    assert got[4][:2] == (9, grpc.StatusCode.UNIMPLEMENTED.value[0])
    assert "programs of type xla::ifrt::SomethingElse are not served" in got[4][2]
    assert got[5][:2] == (10, grpc.StatusCode.NOT_FOUND.value[0])
    assert "no executable with handle 12345 in this session" in got[5][2]
    # compiled.as_text() of an executable the session does not have.
    assert got[6][:2] == (11, grpc.StatusCode.NOT_FOUND.value[0])
    assert got[6][2] == ("LoadedExecutableHumanReadableProgramText: no executable with handle "
                         "777 in this session"), got[6]
    assert got[7] == (7, 0, ""), got[7]


def test_session_credit_returns_as_requests_are_handled(proxy):
    """A session holds its stream's flow-control credit until its thread has
    handled a request (the stream's window is the 64 MiB message limit), so
    100 MiB of requests in one stream get through only if the credit comes
    back: each of the 100 gets its answer, in order."""
    md = ((SESSION_MD, field(1, version(25))),)
    pad = field(15, b"x" * (1 << 20))  # a field the proxy does not read
    reqs = (ifrt_request(34, 100 + i, pad) for i in range(100))
    with grpc.insecure_channel(proxy.address) as ch:
        got = [response_status(r) for r in session_call(ch, reqs, md)]
    assert [g[0] for g in got] == list(range(100, 200))
    assert all(g[1] == 0 for g in got), got[:3]  # empty bitcasts


def test_oversize_message_is_refused(cluster):
    p = Proxy(cluster.controller, {"CAUSEWAY_PROXY_MAX_MESSAGE": "4096"})
    try:
        md = ((SESSION_MD, field(1, version(25))),)
        with grpc.insecure_channel(p.address) as ch:
            with pytest.raises(grpc.RpcError) as e:
                list(session_call(ch, [ifrt_request(2, 1, b"x" * 8192)], md))
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "over the limit 4096" in e.value.details(), e.value.details()
            # The proxy still serves.
            got = raw(ch, "GetVersion")(field(1, version(16)) + field(2, version(25)), timeout=10)
            assert got == field(1, version(25))
    finally:
        assert p.stop() == 0, p.logs()


def test_token_is_required_when_set(cluster):
    p = Proxy(cluster.controller, {"CAUSEWAY_TOKEN": "s3cret"})
    try:
        with grpc.insecure_channel(p.address) as ch:
            with pytest.raises(grpc.RpcError) as e:
                raw(ch, "GetVersion")(field(1, version(16)) + field(2, version(25)), timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "no token presented" in e.value.details()
            got = raw(ch, "GetVersion")(field(1, version(16)) + field(2, version(25)),
                                        metadata=(("authorization", "Bearer s3cret"),),
                                        timeout=10)
            assert got == field(1, version(25))
        # It says at start that jaxlib's client cannot get in this way.
        assert "jaxlib's IFRT proxy client cannot, and is refused: for it, listen on a Unix " \
            "socket" in p.logs(), p.logs()
    finally:
        assert p.stop() == 0, p.logs()


def test_token_file_rotated_without_a_restart(cluster, tmp_path):
    """The proxy reads its token file again when it changes (docs/operations.md,
    "Rotating credentials"): each of its lines is accepted, and a token dropped
    from it is refused from then on."""
    path = tmp_path / "token"
    path.write_text("new-b7\nold-a1\n")
    path.chmod(0o600)
    p = Proxy(cluster.controller, {"CAUSEWAY_TOKEN_FILE": str(path),
                                   "CAUSEWAY_CREDENTIALS_CHECK_MS": "50",
                                   "CAUSEWAY_LOG_LEVEL": "warn"})
    ask = field(1, version(16)) + field(2, version(25))
    try:
        with grpc.insecure_channel(p.address) as ch:
            for token in ("old-a1", "new-b7"):
                got = raw(ch, "GetVersion")(ask, metadata=(("authorization", f"Bearer {token}"),),
                                            timeout=10)
                assert got == field(1, version(25))
            path.write_text("new-b7\n")
            assert harness.wait_until(lambda: "credentials reloaded (a credentials file "
                                      "changed): a new token" in p.logs(), 30), p.logs()
            with pytest.raises(grpc.RpcError) as e:
                raw(ch, "GetVersion")(ask, metadata=(("authorization", "Bearer old-a1"),),
                                      timeout=10)
            assert e.value.code() == grpc.StatusCode.UNAUTHENTICATED
            assert "wrong token" in e.value.details()
            got = raw(ch, "GetVersion")(ask, metadata=(("authorization", "Bearer new-b7"),),
                                        timeout=10)
            assert got == field(1, version(25))
    finally:
        assert p.stop() == 0, p.logs()


def test_token_not_needed_by_the_owner_on_a_unix_socket():
    """On a cluster with a token (as `eval "$(causeway up)"` starts one), the
    proxy's socket lets its owner in without it: jaxlib's client sends none,
    and only the owner can reach the socket (before session 42 jaxlib retried
    its refused GetVersion for ever, without a word)."""
    tokened = harness.HandCluster(workers=1, devices=4, tcp=True, token="s3cret")
    d = tempfile.mkdtemp(prefix="cw-proxy-sock-")
    path = os.path.join(d, "proxy.sock")
    p = Proxy(tokened.controller, tokened.token_env("s3cret"), listen=path)
    try:
        with grpc.insecure_channel(p.address) as ch:
            got = raw(ch, "GetVersion")(field(1, version(16)) + field(2, version(25)), timeout=10)
            assert got == field(1, version(25))
        assert "jaxlib's IFRT proxy client cannot" not in p.logs(), p.logs()
        expect_jax_report(p.address)  # jaxlib's own client, end to end
    finally:
        assert p.stop() == 0, p.logs()
        shutil.rmtree(d, ignore_errors=True)
        tokened.stop()


def test_session_waiting_for_devices_ends_with_its_stream(cluster):
    """A session whose PJRT client waits in the controller's device queue
    (another session holds every device) ends as soon as its stream does:
    the proxy cuts the create short (causeway_cancel_fd) and the controller
    drops the request, where before it waited for the devices, took them, and
    only then closed; a SIGTERM then needs no second signal."""
    p = Proxy(cluster.controller, env={"CAUSEWAY_DEVICES": "4"})
    try:
        with grpc.insecure_channel(p.address) as ch:
            q, responses, _ = live_session(ch)  # holds the cluster's 4 devices
            md = ((SESSION_MD, field(1, version(25))),)
            waiting = session_call(ch, iter([ifrt_request(2, 1)]), md)
            assert harness.wait_until(
                lambda: harness.stats(cluster.controller)["alloc_queue"] == 1, 30), p.logs()
            waiting.cancel()
            # Dropped while the other session still holds every device: not granted.
            assert harness.wait_until(
                lambda: harness.stats(cluster.controller)["alloc_queue"] == 0, 10), p.logs()
            assert harness.wait_until(lambda: "the caller gave up the session while it was "
                                      "opening (causeway_cancel_fd)" in p.logs(), 10), p.logs()
            # Another one waits again, and the proxy's SIGTERM ends it at once.
            waiting = session_call(ch, iter([ifrt_request(2, 1)]), md)
            assert harness.wait_until(
                lambda: harness.stats(cluster.controller)["alloc_queue"] == 1, 30), p.logs()
            p.proc.send_signal(signal.SIGTERM)
            # Before, it waited for the devices until a second signal.
            assert p.proc.wait(timeout=60) == 0, p.logs()
            try:  # how the stream ends on SIGTERM is not this test's business
                list(waiting)
            except grpc.RpcError:
                pass
            q.put(None)
        assert harness.wait_until(
            lambda: harness.stats(cluster.controller)["alloc_queue"] == 0, 10)
    finally:
        p.stop()


def test_sigterm_ends_open_sessions_with_unavailable(cluster):
    """SIGTERM ends an open session's stream with UNAVAILABLE saying the proxy
    is shutting down (before, the stream ended OK, and a client waiting for
    answers was not told why), then the proxy exits 0."""
    p = Proxy(cluster.controller)
    try:
        with grpc.insecure_channel(p.address) as ch:
            q, responses, sid = live_session(ch)
            p.proc.send_signal(signal.SIGTERM)
            with pytest.raises(grpc.RpcError) as err:
                for _ in responses:
                    pass
            assert err.value.code() == grpc.StatusCode.UNAVAILABLE, err.value
            assert "causeway-proxy is shutting down (signal 15): session " \
                f"{sid:016x} ended" in err.value.details(), (err.value.details(), p.logs())
            q.put(None)
        assert p.proc.wait(timeout=60) == 0, p.logs()
    finally:
        p.stop()


def live_session(ch):
    """An IfrtSession after Init: (queue of requests, responses, session id).
    Put a request on the queue to send it, None to end the stream."""
    import queue
    q: queue.Queue = queue.Queue()
    q.put(ifrt_request(2, 1))

    def requests():
        while (item := q.get()) is not None:
            yield item

    responses = session_call(ch, requests(), ((SESSION_MD, field(1, version(25))),))
    init = next(responses)
    assert response_status(init)[1] == 0
    return q, responses, dict(_fields(dict(_fields(init))[2]))[8]  # InitResponse.session_id


def buffer_ids(sid: int, handle: int) -> bytes:
    """HostBufferLookup/DeleteRequest{session_id, handle}."""
    return (varint(1 << 3 | 1) + struct.pack("<Q", sid) + varint(2 << 3 | 1)
            + struct.pack("<Q", handle))


def store(ch, sid: int, handle: int, chunks, declared: int, timeout: float = 10):
    """HostBufferStore of `chunks` (an iterable of bytes) declaring `declared` bytes."""
    meta = buffer_ids(sid, handle) + varint(3 << 3) + varint(declared)
    return ch.stream_unary(SERVICE + "HostBufferStore")(
        (field(1, c) for c in chunks),
        metadata=(("ifrt-proxy-grpc-host-buffer-store-metadata-bin", meta),), timeout=timeout)


def f32x4_from_host_buffer(host_handle: int, array_handle: int, sharding: bytes,
                           n: int = 4) -> bytes:
    """MakeArrayFromHostBufferRequest of an f32[4] (or f32[n]) in host buffer
    `host_handle`, as array `array_handle`."""
    return (field(1, varint(1 << 3) + varint(11)) + field(2, field(1, varint(n)))
            + field(3, sharding) + varint(4 << 3 | 1) + struct.pack("<Q", host_handle)
            + varint(6 << 3 | 1) + struct.pack("<Q", array_handle))


def test_host_buffers_of_a_session(proxy):
    """HostBufferStore/Lookup/Delete against a live session: sizes that do
    not match the metadata, a handle stored twice, lookups and deletes."""
    with grpc.insecure_channel(proxy.address) as ch:
        q, responses, sid = live_session(ch)
        ids = lambda h: buffer_ids(sid, h)  # noqa: E731
        with pytest.raises(grpc.RpcError) as e:
            store(ch, sid, 5, [b"12345678"], 4)
        assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
        assert "more than the 4 bytes declared" in e.value.details()
        with pytest.raises(grpc.RpcError) as e:
            store(ch, sid, 5, [b"12"], 4)
        assert "2 bytes arrived of the 4 declared" in e.value.details()
        store(ch, sid, 5, [b"ab", b"cd"], 4)
        with pytest.raises(grpc.RpcError) as e:
            store(ch, sid, 5, [b"wxyz"], 4)
        assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS
        assert "handle 5 is in use" in e.value.details()
        got = b"".join(dict(_fields(m)).get(1, b"")
                       for m in ch.unary_stream(SERVICE + "HostBufferLookup")(ids(5), timeout=10))
        assert got == b"abcd"
        list(ch.unary_stream(SERVICE + "HostBufferDelete")(ids(5), timeout=10))
        with pytest.raises(grpc.RpcError) as e:
            list(ch.unary_stream(SERVICE + "HostBufferDelete")(ids(5), timeout=10))
        assert e.value.code() == grpc.StatusCode.NOT_FOUND
        assert "no host buffer 5" in e.value.details()
        # Byte strides that reach past any buffer (they once wrapped around
        # the size check): refused, and the session answers on.
        store(ch, sid, 6, [b"x" * 16], 16)
        sharding = field(1, field(1, b"xla::ifrt::SingleDeviceSharding") + field(2, varint(1 << 3) + varint(0)))
        big = (1 << 63) - 1
        make = (field(1, varint(1 << 3) + varint(11)) + field(2, field(1, varint(2) + varint(2)))
                + field(3, sharding) + varint(4 << 3 | 1) + struct.pack("<Q", 6)
                + field(5, field(1, varint(big) + varint(big))))
        q.put(ifrt_request(4, 40, make))
        op, code, msg = response_status(next(responses))
        assert (op, code) == (40, grpc.StatusCode.INVALID_ARGUMENT.value[0]), (op, code, msg)
        assert "byte strides reach past any buffer" in msg, msg
        q.put(ifrt_request(2, 41))
        assert response_status(next(responses)) == (41, 0, "")
        # A request that fails part way leaves nothing behind: CopyArrays of
        # [a real array, an unknown one] fails, and its first result handle
        # is free again.
        store(ch, sid, 7, [b"y" * 16], 16)
        q.put(ifrt_request(4, 42, f32x4_from_host_buffer(7, 50, sharding)))
        assert response_status(next(responses)) == (42, 0, "")

        def copy(op, arrays, results):
            return ifrt_request(24, op, field(1, b"".join(struct.pack("<Q", a) for a in arrays))
                                + field(2, varint(1)) + field(5, b"".join(
                                    struct.pack("<Q", r) for r in results)))
        q.put(copy(43, [50, 999], [60, 61]))
        op, code, msg = response_status(next(responses))
        assert (op, code) == (43, grpc.StatusCode.NOT_FOUND.value[0]), (op, code, msg)
        assert "no array with handle 999" in msg, msg
        q.put(copy(44, [50], [60]))
        assert response_status(next(responses)) == (44, 0, "")
        # RemapArrays plans that do not fit their arrays: named, nothing made.
        spec = (field(1, varint(1 << 3) + varint(11)) + field(2, field(1, varint(4)))
                + field(3, sharding))

        def remap(op, mapping, semantics=2):
            plan = field(1, spec) + field(2, spec) + (field(3, mapping) if mapping else b"")
            return ifrt_request(23, op, field(1, plan) + field(2, struct.pack("<Q", 50))
                                + varint(3 << 3) + varint(semantics)
                                + field(4, struct.pack("<Q", 70)))

        def interval(*v):  # in, out, then from start/end/step and to start/end/step
            return (varint(1 << 3) + varint(v[0]) + varint(2 << 3) + varint(v[1])
                    + b"".join(field(3 + k, varint(x)) for k, x in enumerate(v[2:])))
        for op, mapping, text in (
                (45, interval(0, 0, 0, 5, 1, 0, 5, 1), "interval 0: shards 0:5:1 of 1 to 0:5:1 of 1"),
                (46, interval(0, 3, 0, 1, 1, 0, 1, 1), "mapping 0: arrays 0 to 3"),
                (47, b"", "shard 0 of output 0 is not mapped")):
            q.put(remap(op, mapping))
            got_op, code, msg = response_status(next(responses))
            assert (got_op, code) == (op, grpc.StatusCode.INVALID_ARGUMENT.value[0]), msg
            assert text in msg, msg
        q.put(remap(44, interval(0, 0, 0, 1, 1, 0, 1, 1), semantics=1))  # ALWAYS_COPY
        got_op, code, msg = response_status(next(responses))
        assert (got_op, code) == (44, grpc.StatusCode.INVALID_ARGUMENT.value[0]), msg
        assert "copy semantics 1; shards are shared" in msg, msg
        # One that fits, donating its input: array 50 is then deleted.
        q.put(remap(48, interval(0, 0, 0, 1, 1, 0, 1, 1), semantics=3))
        got_op, code, msg = response_status(next(responses))
        assert (got_op, code) == (48, 0), msg
        q.put(copy(49, [50], [61]))
        got_op, code, msg = response_status(next(responses))
        assert (got_op, code) == (49, grpc.StatusCode.FAILED_PRECONDITION.value[0]), msg
        assert "array 50 was deleted" in msg, msg
        q.put(copy(51, [70], [62]))
        assert response_status(next(responses)) == (51, 0, "")
        q.put(None)
        assert list(responses) == []


def packed_fixed64(num: int, values) -> bytes:
    return field(num, b"".join(struct.pack("<Q", v) for v in values))


def single_device(device: int, memory_kind: str | None = None) -> bytes:
    """ShardingProto of xla::ifrt::SingleDeviceSharding."""
    body = varint(1 << 3) + varint(device) + (field(2, memory_kind.encode()) if memory_kind
                                               else b"")
    return field(1, field(1, b"xla::ifrt::SingleDeviceSharding") + field(2, body))


def replicated(devices) -> bytes:
    """ShardingProto of an xla::ifrt::HloSharding replicated over `devices`."""
    body = field(1, field(1, b"".join(varint(d) for d in devices))) + field(2, b"")
    return field(1, field(1, b"xla::ifrt::HloSharding") + field(2, body))


def array_spec(kind: int, dims, sharding: bytes) -> bytes:
    return (field(1, varint(1 << 3) + varint(kind))
            + field(2, field(1, b"".join(varint(d) for d in dims))) + field(3, sharding))


def to_specs(kind: int, op: int, arrays, specs, results, semantics: int = 2) -> bytes:
    """ReshardArrays (33) or BitcastArrays (34)."""
    return ifrt_request(kind, op, packed_fixed64(1, arrays) + b"".join(field(2, sp) for sp in specs)
                        + varint(3 << 3) + varint(semantics) + packed_fixed64(4, results))


def copy_to_host(array: int, handle: int) -> bytes:
    """CopyToHostBufferRequest{host_buffer_handle, array_handle}."""
    return (varint(1 << 3 | 1) + struct.pack("<Q", handle) + varint(2 << 3 | 1)
            + struct.pack("<Q", array))


def handles_of(response: bytes, kind: int) -> list[int]:
    body = dict(_fields(response)).get(kind, b"")
    raw_handles = dict(_fields(body)).get(1, b"")
    return [struct.unpack("<Q", raw_handles[i:i + 8])[0] for i in range(0, len(raw_handles), 8)]


def test_arrays_to_new_specs_and_error_arrays(cluster, proxy):
    """ReshardArrays moves whole arrays onto other devices (shared where a
    shard is there already), BitcastArrays reinterprets their bytes, and
    MakeErrorArrays makes arrays whose every use answers their error; specs
    that do not fit are refused by name and the session lives. Then the
    default device assignment and the MPMD and host-callback requests."""
    import numpy as np
    worker = cluster.addresses["hand-worker-0"]
    # The sessions of earlier tests have freed theirs: the worker's buffers
    # counted below are this session's.
    assert harness.wait_until(lambda: harness.stats(worker)["buffers"] == 0, 30)
    with grpc.insecure_channel(proxy.address) as ch:
        q, responses, sid = live_session(ch)

        def call(req):
            q.put(req)
            return next(responses)

        def read_back(op, array, handle):
            """CopyToHostBuffer of `array` into host buffer `handle`, then its bytes."""
            st = response_status(call(ifrt_request(6, op, copy_to_host(array, handle))))
            assert st[1] == 0, st
            return b"".join(dict(_fields(m)).get(1, b"") for m in ch.unary_stream(
                SERVICE + "HostBufferLookup")(buffer_ids(sid, handle), timeout=10))
        data = np.arange(1, 5, dtype=np.float32).tobytes()
        store(ch, sid, 30, [data], 16)
        assert response_status(call(ifrt_request(4, 60, f32x4_from_host_buffer(
            30, 100, single_device(0))))) == (60, 0, "")
        # Onto device 1, then replicated over 1 and 2, then device 2 alone.
        r = call(to_specs(33, 61, [100], [array_spec(11, [4], single_device(1))], [101]))
        assert response_status(r) == (61, 0, "") and handles_of(r, 33) == [101]
        assert read_back(62, 101, 31) == data
        r = call(to_specs(33, 63, [101], [array_spec(11, [4], replicated([1, 2]))], [102]))
        assert response_status(r) == (63, 0, "") and handles_of(r, 33) == [102]
        r = call(to_specs(33, 64, [102], [array_spec(11, [4], single_device(2))], [103]))
        assert response_status(r) == (64, 0, "")
        assert read_back(65, 103, 32) == data
        # Bitcast: the same 16 bytes as u32[2,2].
        r = call(to_specs(34, 66, [100], [array_spec(8, [2, 2], single_device(3))], [104]))
        assert response_status(r) == (66, 0, "") and handles_of(r, 34) == [104]
        assert read_back(67, 104, 33) == data
        for op, req, code, text in (
                (68, to_specs(33, 68, [100], [array_spec(8, [4], single_device(1))], [105]),
                 grpc.StatusCode.INVALID_ARGUMENT, "the spec's dtype or shape is not the array's"),
                (69, to_specs(34, 69, [100], [array_spec(11, [2], single_device(1))], [105]),
                 grpc.StatusCode.INVALID_ARGUMENT, "shard on device 0 has 16 bytes, the spec's 8"),
                (70, to_specs(33, 70, [100, 101], [array_spec(11, [4], single_device(1))], []),
                 grpc.StatusCode.INVALID_ARGUMENT, "ReshardArrays: 2 arrays, 1 specs"),
                (71, to_specs(33, 71, [999], [array_spec(11, [4], single_device(1))], [105]),
                 grpc.StatusCode.NOT_FOUND, "no array with handle 999")):
            got_op, got_code, msg = response_status(call(req))
            assert (got_op, got_code) == (op, code.value[0]), msg
            assert text in msg, msg
        # Whether a shard is in the memory asked for is the plugin's answer,
        # not the kept sharding's (a CopyArrays result's names its source's
        # memory): one in pinned_host is copied into device memory, and
        # shared into pinned_host. Copies reach the worker after their
        # answer; a read of the copy (later in its order) settles the count.
        r = call(ifrt_request(24, 90, packed_fixed64(1, [100]) + field(2, varint(0))
                              + field(3, b"pinned_host") + packed_fixed64(5, [120])))
        assert response_status(r) == (90, 0, "")
        assert read_back(96, 120, 37) == data
        before = harness.stats(worker)["buffers"]
        r = call(to_specs(33, 91, [120], [array_spec(11, [4], single_device(0))], [121]))
        assert response_status(r) == (91, 0, "")
        r = call(to_specs(33, 92, [120], [array_spec(11, [4], single_device(0, "pinned_host"))],
                          [122]))
        assert response_status(r) == (92, 0, "")
        assert read_back(93, 121, 36) == data
        assert harness.stats(worker)["buffers"] == before + 1
        # Devices a spec names: the session's, each once.
        for op, spec, text in (
                (94, array_spec(11, [4], replicated([1, 1])), "device 1 is named twice"),
                (95, array_spec(11, [4], single_device(77)), "77")):
            got_op, code, msg = response_status(call(to_specs(33, op, [100], [spec], [123])))
            assert got_op == op and code != 0 and text in msg, (op, code, msg)
            got_op, code, msg = response_status(call(ifrt_request(
                26, op, field(1, varint(1 << 3) + varint(8)) + field(2, spec))))
            assert got_op == op and code != 0 and text in msg, (op, code, msg)
        # Donated: the input is deleted, the output has its bytes.
        r = call(to_specs(33, 72, [103], [array_spec(11, [4], single_device(0))], [106],
                          semantics=3))
        assert response_status(r) == (72, 0, "")
        assert read_back(73, 106, 34) == data
        op, code, msg = response_status(call(to_specs(
            33, 74, [103], [array_spec(11, [4], single_device(0))], [107])))
        assert (op, code) == (74, grpc.StatusCode.FAILED_PRECONDITION.value[0]), msg
        assert "array 103 was deleted" in msg
        # Error arrays: made, and every use answers their error.
        err = field(1, varint(1 << 3) + varint(8) + field(2, b"disk on fire"))
        r = call(ifrt_request(26, 75, err + field(2, array_spec(11, [4], single_device(0)))
                              + packed_fixed64(3, [110])))
        assert response_status(r) == (75, 0, "") and handles_of(r, 26) == [110]
        for op, req in ((76, ifrt_request(8, 76, packed_fixed64(1, [110]))),
                        (77, ifrt_request(6, 77, copy_to_host(110, 35))),
                        (78, to_specs(33, 78, [110], [array_spec(11, [4], single_device(1))],
                                      [111]))):
            got_op, code, msg = response_status(call(req))
            assert (got_op, code) == (op, grpc.StatusCode.RESOURCE_EXHAUSTED.value[0]), msg
            assert "disk on fire" in msg, msg
        op, code, msg = response_status(call(ifrt_request(26, 79, field(1, b"") + field(
            2, array_spec(11, [4], single_device(0))))))
        assert (op, code) == (79, grpc.StatusCode.INVALID_ARGUMENT.value[0])
        assert "MakeErrorArrays: the error is OK" in msg
        # The default device assignment: 2 replicas x 2 partitions over the
        # island's devices, each computation (partition) listing its replicas.
        r = call(ifrt_request(19, 80, varint(1 << 3 | 1) + struct.pack("<Q", 2)
                              + varint(2 << 3 | 1) + struct.pack("<Q", 2)))
        assert response_status(r) == (80, 0, "")
        da = list(_fields(dict(_fields(dict(_fields(r))[19]))[1]))
        assert (dict(da)[1], dict(da)[2]) == (2, 2), da
        comps = [_varints(dict(_fields(v))[1]) for k, v in da if k == 3]
        # As XLA's computation placer: partition p of replica r on device p * 2 + r.
        assert comps == [[0, 1], [2, 3]], comps
        for op, replicas, partitions, code, text in (
                (81, 0, 2, grpc.StatusCode.INVALID_ARGUMENT, "0 replicas x 2 partitions"),
                (82, 3, 3, grpc.StatusCode.INVALID_ARGUMENT, "no causeway island has 9 devices")):
            got_op, got_code, msg = response_status(call(ifrt_request(
                19, op, varint(1 << 3 | 1) + struct.pack("<Q", replicas) + varint(2 << 3 | 1)
                + struct.pack("<Q", partitions))))
            assert (got_op, got_code) == (op, code.value[0]), msg
            assert text in msg, msg
        # MPMD requests of a program the proxy compiled: answered as XLA's
        # server answers for one that is not MPMD (metadata: in the response).
        mlir = (b"module @m { func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> "
                b"{ return %arg0 : tensor<4xf32> } }")
        r = call(ifrt_request(13, 87, field(1, field(1, b"xla::ifrt::XlaProgram")
                                             + field(2, mlir))
                              + field(2, field(1, b"xla::ifrt::XlaCompileOptions"))))
        assert response_status(r) == (87, 0, "")
        exe = dict(_fields(dict(_fields(r))[13]))[1]
        r = call(ifrt_request(30, 88, varint(1 << 3 | 1) + struct.pack("<Q", exe)))
        assert response_status(r) == (88, 0, "")
        assert dict(_fields(dict(_fields(r))[30])) == {
            2: varint(1 << 3) + varint(3) + field(2, b"LoadedExecutable is not an MPMD executable")}
        got_op, code, msg = response_status(call(ifrt_request(
            31, 89, varint(1 << 3 | 1) + struct.pack("<Q", exe))))
        assert (got_op, code) == (89, grpc.StatusCode.INVALID_ARGUMENT.value[0]), msg
        assert msg == "LoadedExecutableMpmdCostAnalysis: LoadedExecutable is not an MPMD executable"
        # Unknown handles; and host callbacks, of which no session here has any.
        for op, kind, text in ((83, 30, "no executable with handle 4242"),
                               (84, 31, "no executable with handle 4242"),
                               (85, 21, "no host callback with handle 4242"),
                               (86, 22, "no host callback execution 4242")):
            got_op, code, msg = response_status(call(ifrt_request(
                kind, op, varint(1 << 3 | 1) + struct.pack("<Q", 4242))))
            assert (got_op, code) == (op, grpc.StatusCode.NOT_FOUND.value[0]), msg
            assert text in msg, msg
        q.put(None)
        assert list(responses) == []


def hlo_sharding(devices, op: bytes) -> bytes:
    """ShardingProto of an xla::ifrt::HloSharding over `devices` with xla.OpSharding `op`."""
    body = field(1, field(1, b"".join(varint(d) for d in devices))) + field(2, op)
    return field(1, field(1, b"xla::ifrt::HloSharding") + field(2, body))


def tiled(tiles, devices=None, iota=None, replicate_last=False) -> bytes:
    """xla.OpSharding of type OTHER: `tiles` with an explicit device list or
    an iota (reshape dims, permutation)."""
    b = varint(1 << 3) + varint(3) + field(3, b"".join(varint(t) for t in tiles))
    if devices is not None:
        b += field(4, b"".join(varint(d) for d in devices))
    if replicate_last:
        b += varint(6 << 3) + varint(1)
    if iota is not None:
        b += field(9, b"".join(varint(d) for d in iota[0]))
        b += field(10, b"".join(varint(d) for d in iota[1]))
    return b


def concrete_even(devices, dims, shard_dims, replicated_: bool = False) -> bytes:
    body = (field(1, field(1, b"".join(varint(d) for d in devices)))
            + field(2, field(1, b"".join(varint(d) for d in dims)))
            + field(3, field(1, b"".join(varint(d) for d in shard_dims)))
            + (varint(5 << 3) + varint(1) if replicated_ else b""))
    return field(1, field(1, b"xla::ifrt::ConcreteEvenSharding") + field(2, body))


def make_from_shards(op: int, spec: bytes, buffers, handle: int) -> bytes:
    """MakeArraysFromHostBufferShards of one array: `buffers` lists
    (dtype kind, dims, host buffer handle, shard indices)."""
    body = b"".join(field(1, field(1, b"".join(varint(i) for i in idx)))
                    for _, _, _, idx in buffers)
    body += b"".join(field(2, field(1, varint(1 << 3) + varint(kind))
                           + field(2, field(1, b"".join(varint(d) for d in dims)))
                           + varint(3 << 3 | 1) + struct.pack("<Q", h))
                     for kind, dims, h, _ in buffers)
    return ifrt_request(25, op, field(1, body + field(3, spec)) + packed_fixed64(2, [handle]))


def test_reshard_and_bitcast_of_split_arrays(cluster, proxy):
    """ReshardArrays of arrays split over devices: shards of the same place
    are shared or copied worker to worker, others gathered from the shards
    that overlap them; the layouts of the source come from the sharding it
    was made with (tiles by a device list, an iota, a replicated last tile
    dimension). BitcastArrays goes shard by shard, as IFRT defines it.
    Specs that do not say where their shards lie are refused by name."""
    import numpy as np
    worker = cluster.addresses["hand-worker-0"]
    assert harness.wait_until(lambda: harness.stats(worker)["buffers"] == 0, 30)
    data = np.arange(24, dtype=np.float32).reshape(4, 6)
    with grpc.insecure_channel(proxy.address) as ch:
        q, responses, sid = live_session(ch)
        next_buffer = iter(range(300, 400))

        def call(req):
            q.put(req)
            return next(responses)

        def ok(req, op):
            r = call(req)
            assert response_status(r) == (op, 0, ""), response_status(r)
            return r

        def read(op, array):
            """The bytes of a single-device array."""
            h = next(next_buffer)
            ok(ifrt_request(6, op, copy_to_host(array, h)), op)
            return b"".join(dict(_fields(m)).get(1, b"") for m in ch.unary_stream(
                SERVICE + "HostBufferLookup")(buffer_ids(sid, h), timeout=10))

        def gathered(op, array, dims, kind=11, dtype=np.float32):
            """`array` resharded onto device 3 alone, read back."""
            ok(to_specs(33, op, [array], [array_spec(kind, dims, single_device(3))], [op + 1000]),
               op)
            return np.frombuffer(read(op + 500, op + 1000), dtype).reshape(dims)

        def pieces(op, array, n):
            """The single-device arrays of `array`'s shards, read back."""
            r = ok(ifrt_request(7, op, varint(1 << 3 | 1) + struct.pack("<Q", array)
                                + packed_fixed64(4, [op * 10 + k for k in range(n)])), op)
            return [read(op * 10 + k, h) for k, h in enumerate(handles_of(r, 7))]

        # A: f32[4,6] in 2x2 tiles of [2,3], device position k holding tile
        # (k // 2, k % 2).
        blocks = [data[r * 2:r * 2 + 2, c * 3:c * 3 + 3] for r in (0, 1) for c in (0, 1)]
        for k, b in enumerate(blocks):
            store(ch, sid, 40 + k, [np.ascontiguousarray(b).tobytes()], 24)
        a_sharding = hlo_sharding([0, 1, 2, 3], tiled([2, 2], devices=[0, 1, 2, 3]))
        ok(make_from_shards(100, array_spec(11, [4, 6], a_sharding),
                            [(11, [2, 3], 40 + k, [k]) for k in range(4)], 200), 100)
        assert (gathered(101, 200, [4, 6]) == data).all()

        # B: columns split in two, each half on two devices (the last tile
        # dimension replicates), by an iota: gathered from A's tiles.
        b_sharding = hlo_sharding([0, 1, 2, 3], tiled([1, 2, 2], iota=([4], [0]),
                                                      replicate_last=True))
        ok(to_specs(33, 102, [200], [array_spec(11, [4, 6], b_sharding)], [201]), 102)
        got = pieces(103, 201, 4)
        for k in range(4):
            want = data[:, (k // 2) * 3:(k // 2) * 3 + 3]
            assert np.frombuffer(got[k], np.float32).reshape(4, 3).tolist() == want.tolist(), k
        # B's own layout is where it was made: back to one device whole.
        assert (gathered(104, 201, [4, 6]) == data).all()

        # C: A's tiles placed by a transposed iota over the devices reversed:
        # tile (r, c) on position 2c + r, so devices 1 and 2 hold the tile
        # they hold in A (shared: REUSE_INPUT) and 0 and 3 swap theirs
        # (copied worker to worker). Then A's own sharding with ALWAYS_COPY:
        # four copies; and with REUSE_INPUT: none.
        # Copies reach the worker after their answer: counts are taken after
        # reads, which the worker serves in the session's order.
        c_sharding = hlo_sharding([3, 2, 1, 0], tiled([2, 2], iota=([2, 2], [1, 0])))
        before = harness.stats(worker)["buffers"]
        ok(to_specs(33, 105, [200], [array_spec(11, [4, 6], c_sharding)], [202]), 105)
        got = pieces(106, 202, 4)  # positions 0..3: devices 3, 2, 1, 0
        for k, (r, c) in enumerate(((0, 0), (1, 0), (0, 1), (1, 1))):
            want = data[r * 2:r * 2 + 2, c * 3:c * 3 + 3]
            assert np.frombuffer(got[k], np.float32).reshape(2, 3).tolist() == want.tolist(), k
        assert harness.stats(worker)["buffers"] == before + 2
        before = harness.stats(worker)["buffers"]
        ok(to_specs(33, 107, [200], [array_spec(11, [4, 6], a_sharding)], [203], semantics=1),
           107)
        ok(to_specs(33, 108, [200], [array_spec(11, [4, 6], a_sharding)], [208]), 108)
        pieces(109, 203, 4)
        pieces(133, 208, 4)
        assert harness.stats(worker)["buffers"] == before + 4
        assert (gathered(124, 203, [4, 6]) == data).all()

        # A copied onto the devices reversed keeps where its shards lie:
        # gathered whole again.
        ok(ifrt_request(24, 131, packed_fixed64(1, [200]) + field(2, b"".join(
            varint(d) for d in (3, 2, 1, 0))) + packed_fixed64(5, [213])), 131)
        assert (gathered(132, 213, [4, 6]) == data).all()

        # D: one row per device, each gathered from the two tiles it
        # crosses; E: Shardy's named axes on a mesh whose devices are
        # given in reverse (mesh position p holds device 3 - p, and its
        # tile is (p // 2, p % 2)).
        rows = hlo_sharding([0, 1, 2, 3], tiled([4, 1], devices=[0, 1, 2, 3]))
        ok(to_specs(33, 125, [200], [array_spec(11, [4, 6], rows)], [209]), 125)
        got = pieces(126, 209, 4)
        for k in range(4):
            assert np.frombuffer(got[k], np.float32).tolist() == data[k].tolist(), k
        mesh = (field(1, field(1, b"x") + varint(2 << 3) + varint(2))
                + field(1, field(1, b"y") + varint(2 << 3) + varint(2))
                + field(2, b"".join(varint(d) for d in (3, 2, 1, 0))))
        named = field(14, field(2, mesh) + field(3, field(1, varint(1 << 3) + varint(0)))
                      + field(3, field(1, varint(1 << 3) + varint(1))))
        ok(to_specs(33, 127, [209], [array_spec(11, [4, 6], hlo_sharding([0, 1, 2, 3], named))],
                    [212]), 127)
        got = pieces(128, 212, 4)
        for k in range(4):
            p = 3 - k
            want = data[(p // 2) * 2:(p // 2) * 2 + 2, (p % 2) * 3:(p % 2) * 3 + 3]
            assert np.frombuffer(got[k], np.float32).reshape(2, 3).tolist() == want.tolist(), k

        # Bitcast shard by shard: A's tiles as u32, and a replicated scalar as
        # f32[2] split in two (each shard the scalar's bytes).
        ok(to_specs(34, 109, [200], [array_spec(8, [4, 6], a_sharding)], [204]), 109)
        assert (gathered(110, 204, [4, 6], kind=8, dtype=np.uint32) == data.view(np.uint32)).all()
        store(ch, sid, 50, [np.float32(2.5).tobytes()], 4)
        ok(make_from_shards(111, array_spec(11, [], replicated([0, 1])),
                            [(11, [], 50, [0, 1])], 205), 111)
        ok(to_specs(34, 112, [205], [array_spec(11, [2], concrete_even([0, 1], [2], [1]))],
                    [206]), 112)
        assert pieces(113, 206, 2) == [np.float32(2.5).tobytes()] * 2

        # A program's split output keeps where its shards lie: x + x over
        # devices 0 and 1, its output gathered onto device 3.
        from jax._src.lib import xla_client as xc
        opts = xc.CompileOptions()
        opts.num_partitions = opts.executable_build_options.num_partitions = 2
        opts.executable_build_options.use_spmd_partitioning = True
        opts.executable_build_options.device_assignment = xc.DeviceAssignment.create(
            np.array([[0, 1]], np.int32))
        split = '{mhlo.sharding = "{devices=[2]<=[2]}"}'
        mlir = ("module @m attributes {mhlo.num_partitions = 2 : i32} { func.func public "
                f"@main(%arg0: tensor<4xf32> {split}) -> (tensor<4xf32> {split}) {{ "
                "%0 = stablehlo.add %arg0, %arg0 : tensor<4xf32> "
                "return %0 : tensor<4xf32> } }").encode()
        r = ok(ifrt_request(13, 120, field(1, field(1, b"xla::ifrt::XlaProgram") + field(2, mlir))
                            + field(2, field(1, b"xla::ifrt::XlaCompileOptions") + field(
                                2, field(1, opts.SerializeAsString())))), 120)
        exe = dict(_fields(dict(_fields(r))[13]))[1]
        x = np.arange(4, dtype=np.float32)
        for k in (0, 1):
            store(ch, sid, 60 + k, [x[k * 2:k * 2 + 2].tobytes()], 8)
        ok(make_from_shards(121, array_spec(11, [4], hlo_sharding([0, 1], tiled([2], [0, 1]))),
                            [(11, [2], 60 + k, [k]) for k in (0, 1)], 210), 121)
        ok(ifrt_request(15, 122, varint(1 << 3 | 1) + struct.pack("<Q", exe)
                        + packed_fixed64(2, [210]) + field(4, varint(0) + varint(1))
                        + packed_fixed64(5, [211])), 122)
        assert (gathered(123, 211, [4]) == x + x).all()

        # Refused by name, and the session carries on.
        for op, req, code, text in (
                (114, to_specs(33, 114, [200], [array_spec(11, [4, 6], concrete_even(
                    [0, 1], [4, 6], [2, 6]))], [207]),
                 grpc.StatusCode.UNIMPLEMENTED, "does not say where its shards lie"),
                (115, to_specs(33, 115, [200], [array_spec(11, [4, 6], hlo_sharding(
                    [0, 1, 2, 3], tiled([1, 4], devices=[0, 1, 2, 3])))], [207]),
                 grpc.StatusCode.UNIMPLEMENTED, "does not split evenly"),
                (116, to_specs(33, 116, [200], [array_spec(11, [4, 6], hlo_sharding(
                    [0, 1, 2, 3], tiled([2, 2], devices=[0, 1, 2, 2])))], [207]),
                 grpc.StatusCode.INVALID_ARGUMENT, "each once"),
                (117, to_specs(34, 117, [200], [array_spec(6, [4, 6], a_sharding)], [207]),
                 grpc.StatusCode.INVALID_ARGUMENT, "has 24 bytes, the spec's 6"),
                (118, to_specs(34, 118, [200], [array_spec(11, [4, 6], hlo_sharding(
                    [0, 1, 2], tiled([3, 1], devices=[0, 1, 2])))], [207]),
                 grpc.StatusCode.UNIMPLEMENTED, "does not split evenly")):
            got_op, got_code, msg = response_status(call(req))
            assert (got_op, got_code) == (op, code.value[0]), msg
            assert text in msg, msg
        assert (gathered(119, 200, [4, 6]) == data).all()
        q.put(None)
        assert list(responses) == []


class HeldReads:
    """A live session over raw requests with x = [0, 1, 2, ... n - 1] on
    device 0 and a compiled x + x; `pause()`/`resume()` hold its launches at
    the worker."""

    def __init__(self, ch, controller: str, n: int = 4):
        import concurrent.futures
        import numpy as np
        from jax._src.lib import xla_client as xc
        self.ch, self.controller = ch, controller
        self.q, self.responses, self.sid = live_session(ch)
        self.pool = concurrent.futures.ThreadPoolExecutor(2)
        self.x = np.arange(n, dtype=np.float32)
        raw = self.x.tobytes()
        store(ch, self.sid, 70, (raw[i:i + (1 << 20)] for i in range(0, len(raw), 1 << 20)),
              len(raw), timeout=30)
        self.ok(ifrt_request(4, 130, f32x4_from_host_buffer(70, 300, single_device(0), n)), 130)
        t = b"tensor<%dxf32>" % n
        mlir = (b"module @m { func.func public @main(%arg0: " + t + b") -> " + t + b" { "
                b"%0 = stablehlo.add %arg0, %arg0 : " + t + b" return %0 : " + t + b" } }")
        r = self.ok(ifrt_request(13, 131, field(1, field(1, b"xla::ifrt::XlaProgram")
                                                + field(2, mlir))
                                 + field(2, field(1, b"xla::ifrt::XlaCompileOptions") + field(
                                     2, field(1, xc.CompileOptions().SerializeAsString())))),
                    131)
        self.exe = dict(_fields(dict(_fields(r))[13]))[1]
        # This stream's causeway session: the one holding devices, once
        # the sessions of earlier tests' streams have closed.
        mine: list = []

        def alone() -> bool:
            status = json.loads(self.cli("status", "--json").stdout)
            mine[:] = [s["id"] for s in status["sessions"] if s.get("devices")]
            return len(mine) == 1
        assert harness.wait_until(alone, 30), mine
        self.causeway_session = str(mine[0])

    def cli(self, *args):
        return subprocess.run([os.path.join(harness.bin_dir(), "causeway"), "--controller",
                               self.controller, *args], capture_output=True, text=True,
                              timeout=60, check=True)

    def pause(self):
        self.cli("pause", self.causeway_session)

    def resume(self):
        self.cli("resume", self.causeway_session)

    def call(self, req, timeout=30):
        self.q.put(req)
        return self.pool.submit(next, self.responses).result(timeout)

    def ok(self, req, op):
        r = self.call(req)
        assert response_status(r) == (op, 0, ""), response_status(r)
        return r

    def execute(self, op, out):
        """x + x into array `out` (launched, not waited for)."""
        self.ok(ifrt_request(15, op, varint(1 << 3 | 1) + struct.pack("<Q", self.exe)
                             + packed_fixed64(2, [300]) + field(4, varint(0) + varint(1))
                             + packed_fixed64(5, [out])), op)

    def lookup(self, handle):
        return b"".join(dict(_fields(m)).get(1, b"") for m in self.ch.unary_stream(
            SERVICE + "HostBufferLookup")(buffer_ids(self.sid, handle), timeout=30))

    def delete(self, handle):
        list(self.ch.unary_stream(SERVICE + "HostBufferDelete")(buffer_ids(self.sid, handle),
                                                               timeout=10))

    def end(self):
        self.q.put(None)
        assert list(self.responses) == []
        self.pool.shutdown()


def test_execute_refusals(cluster, proxy):
    """An Execute naming an array the session lacks, result handles that do
    not match the outputs, or non-donatable input indices outside the
    arguments (too many, past the end, negative): each answered with its
    error, nothing run; the session then executes as before."""
    with grpc.insecure_channel(proxy.address) as ch:
        h = HeldReads(ch, cluster.controller)

        def execute(op, args, outs, keep=None):
            options = field(7, b"".join(varint(k & ((1 << 64) - 1)) for k in keep)) \
                if keep is not None else b""
            body = (varint(1 << 3 | 1) + struct.pack("<Q", h.exe) + packed_fixed64(2, args)
                    + (field(3, options) if keep is not None else b"")
                    + field(4, varint(0) + varint(1)) + packed_fixed64(5, outs))
            return response_status(h.call(ifrt_request(15, op, body)))

        code = grpc.StatusCode
        assert execute(140, [999], [310]) == (
            140, code.NOT_FOUND.value[0], "Execute: argument 0: no array with handle 999")
        assert execute(141, [300], [311, 312]) == (
            141, code.INVALID_ARGUMENT.value[0], "Execute: 2 result handles for 1 outputs")
        for op, keep, text in [(142, [0, 0], "2 non-donatable inputs of 1 arguments"),
                               (143, [5], "non-donatable input 5 of 1 arguments"),
                               (144, [-1], "non-donatable input -1 of 1 arguments")]:
            got = execute(op, [300], [313], keep)
            assert got[:2] == (op, code.INVALID_ARGUMENT.value[0]) and text in got[2], got
        # Nothing was made under the refused result handles; the session runs.
        h.ok(ifrt_request(6, 145, copy_to_host(300, 73)), 145)
        h.execute(146, 314)
        h.ok(ifrt_request(6, 147, copy_to_host(314, 74)), 147)
        assert h.lookup(74) == (h.x + h.x).tobytes()
        h.end()


# Read back in ranges of 2 MiB, four at a time (CW_PROXY_READ_RANGE): five
# of them, the last not full.
BIG = ((9 << 20) + 12) // 4


@pytest.mark.parametrize("n", [4, BIG])
def test_read_back_answered_before_its_bytes(cluster, proxy, n):
    """CopyToHostBuffer is answered as soon as the read is under way: with the
    session paused at the worker, the read of a program's output is answered
    while the program is held, and the lookup waits for the bytes, then gets
    every one in order (an array of five ranges: a download per range). A
    buffer deleted while it is read leaves the session working, and the
    session reads the array again."""
    with grpc.insecure_channel(proxy.address) as ch:
        h = HeldReads(ch, cluster.controller, n)
        want = (h.x + h.x).tobytes()

        def downloads() -> int:
            status = json.loads(h.cli("status", "--json").stdout)
            return sum(w.get("downloads", 0) for w in status["workers"])
        before = downloads()
        h.pause()
        try:
            h.execute(132, 301)
            # Answered while the program that makes the bytes is held (the
            # session's next request waits for them).
            h.ok(ifrt_request(6, 133, copy_to_host(301, 71)), 133)
            read = h.pool.submit(h.lookup, 71)
            time.sleep(0.5)
            assert not read.done()
        finally:
            h.resume()
        got = read.result(30)
        assert len(got) == len(want) and got == want
        if n == BIG:
            assert harness.wait_until(lambda: downloads() - before >= 5, 30), \
                (before, downloads())
        # Deleted while it is read: the read's bytes are dropped, nothing else.
        h.pause()
        try:
            h.execute(134, 302)
            h.ok(ifrt_request(6, 135, copy_to_host(302, 72)), 135)
            h.delete(72)
        finally:
            h.resume()
        h.ok(ifrt_request(6, 136, copy_to_host(302, 72)), 136)
        assert h.lookup(72) == want
        h.end()


@pytest.mark.parametrize("n", [4, BIG])
def test_read_back_that_fails_fails_its_lookup(n):
    """A read answered early whose worker dies before the bytes come (in one
    read, or in ranges): the lookup, and a MakeArray from the same host
    buffer, get the read's error (UNAVAILABLE naming the worker), and the
    proxy ends cleanly."""
    c = harness.HandCluster(workers=1, devices=1, tcp=True)
    p = None
    try:
        p = Proxy(c.controller)
        with grpc.insecure_channel(p.address) as ch:
            h = HeldReads(ch, c.controller, n)
            h.pause()
            h.execute(132, 301)
            h.ok(ifrt_request(6, 133, copy_to_host(301, 71)), 133)
            victim = next(k for k in c.procs if "worker" in k)
            c.procs[victim].kill()
            c.procs[victim].wait(10)
            with pytest.raises(grpc.RpcError) as e:
                h.lookup(71)
            assert e.value.code() == grpc.StatusCode.UNAVAILABLE, e.value
            assert "reading host buffer 71" in e.value.details(), e.value.details()
            assert victim in e.value.details(), e.value.details()
            got_op, code, msg = response_status(h.call(ifrt_request(
                4, 137, f32x4_from_host_buffer(71, 303, single_device(0), n))))
            assert (got_op, code) == (137, grpc.StatusCode.UNAVAILABLE.value[0]), msg
            assert "reading host buffer 71" in msg and victim in msg, msg
            h.end()
    finally:
        if p:
            assert p.stop() == 0, p.logs()
        c.stop()


def test_lookup_streams_and_a_delete_cuts_it_short(proxy):
    """A 96 MiB lookup goes out as the client reads it (the proxy queues 8 MiB
    ahead). Deleting the buffer meanwhile, and storing another under the same
    handle, ends the lookup NOT_FOUND; it never sends the new buffer's bytes.
    A fresh lookup then reads the new buffer."""
    size = 96 << 20
    with grpc.insecure_channel(proxy.address) as ch:
        q, responses, sid = live_session(ch)
        ids = buffer_ids(sid, 8)
        store(ch, sid, 8, (b"z" * (1 << 20) for _ in range(96)), size, timeout=60)
        lookup = ch.unary_stream(SERVICE + "HostBufferLookup")(ids, timeout=60)
        first = dict(_fields(next(lookup))).get(1, b"")
        assert first == b"z" * len(first) and first
        list(ch.unary_stream(SERVICE + "HostBufferDelete")(ids, timeout=10))
        store(ch, sid, 8, [b"new!"], 4)
        got = len(first)
        with pytest.raises(grpc.RpcError) as e:
            for m in lookup:
                data = dict(_fields(m)).get(1, b"")
                assert data == b"z" * len(data), "the lookup sent another buffer's bytes"
                got += len(data)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND, e.value
        assert "host buffer 8 was deleted while it was read" in e.value.details()
        assert got < size
        again = b"".join(dict(_fields(m)).get(1, b"")
                         for m in ch.unary_stream(SERVICE + "HostBufferLookup")(ids, timeout=10))
        assert again == b"new!"
        q.put(None)
        assert list(responses) == []


@pytest.mark.parametrize("devices", [[0], [0, 1, 2]], ids=["one-device", "replicated"])
def test_upload_streams_on_while_it_is_stored(cluster, proxy, devices):
    """A MakeArrayFromHostBuffer of an 8 MiB host buffer still being stored
    sends the bytes on to the worker as they come, in parts of 4 MiB
    (CW_PROXY_STREAM_PART), to each device of its sharding: the worker has
    the first 4 MiB for each while the store is still open. The array is
    then whole and right. A store that breaks off fails its MakeArray by
    name, and the session goes on."""
    import concurrent.futures
    import queue
    import numpy as np
    worker = cluster.addresses["hand-worker-0"]
    sharding = single_device(0) if len(devices) == 1 else replicated(devices)

    def worker_bytes_in() -> int:
        return sum(b_in for b_in, _ in harness.stats(worker)["peers"].values())
    n = 2 << 20
    x = np.arange(n, dtype=np.float32)
    raw = x.tobytes()
    mib = 1 << 20
    with grpc.insecure_channel(proxy.address) as ch, \
            concurrent.futures.ThreadPoolExecutor(2) as pool:
        q, responses, sid = live_session(ch)
        chunks: queue.Queue = queue.Queue()

        def feed():
            while (c := chunks.get()) is not None:
                yield c
        stored = pool.submit(store, ch, sid, 80, feed(), len(raw), 60)
        before = worker_bytes_in()
        for i in range(5):
            chunks.put(raw[i * mib:(i + 1) * mib])
        q.put(ifrt_request(4, 140, f32x4_from_host_buffer(80, 400, sharding, n)))
        made = pool.submit(next, responses)
        assert harness.wait_until(
            lambda: worker_bytes_in() - before >= 4 * mib * len(devices), 30), \
            worker_bytes_in() - before
        assert not made.done() and not stored.done()
        chunks.put(raw[5 * mib:])
        chunks.put(None)
        stored.result(30)
        assert response_status(made.result(30)) == (140, 0, "")
        # (the worker may still be reading the last part)
        assert harness.wait_until(
            lambda: worker_bytes_in() - before >= len(raw) * len(devices), 30)
        singles = [400]  # each device's copy as an array of its own
        if len(devices) > 1:
            singles = [410 + k for k in range(len(devices))]
            q.put(ifrt_request(7, 141, varint(1 << 3 | 1) + struct.pack("<Q", 400)
                               + packed_fixed64(4, singles)))
            assert response_status(next(responses)) == (141, 0, "")
        for k, a in enumerate(singles):
            q.put(ifrt_request(6, 150 + k, copy_to_host(a, 90 + k)))
            assert response_status(next(responses)) == (150 + k, 0, "")
            back = b"".join(dict(_fields(m)).get(1, b"") for m in ch.unary_stream(
                SERVICE + "HostBufferLookup")(buffer_ids(sid, 90 + k), timeout=30))
            assert back == raw, k
        # The store breaks off (fewer bytes than declared): the MakeArray
        # streaming it fails by name.
        chunks = queue.Queue()
        stored = pool.submit(store, ch, sid, 82, feed(), len(raw), 60)
        before = worker_bytes_in()
        chunks.put(raw[:5 * mib])
        q.put(ifrt_request(4, 142, f32x4_from_host_buffer(82, 401, sharding, n)))
        made = pool.submit(next, responses)
        # Streaming (its first part at the worker) before the store breaks off.
        assert harness.wait_until(
            lambda: worker_bytes_in() - before >= 4 * mib * len(devices), 30)
        chunks.put(None)
        with pytest.raises(grpc.RpcError) as e:
            stored.result(30)
        assert "arrived of the" in e.value.details()
        op, code, msg = response_status(made.result(30))
        assert (op, code) == (142, grpc.StatusCode.NOT_FOUND.value[0]), msg
        assert "host buffer 82 was not stored in full" in msg, msg
        q.put(ifrt_request(6, 143, copy_to_host(singles[0], 83)))  # the session goes on
        assert response_status(next(responses)) == (143, 0, "")
        q.put(None)
        assert list(responses) == []


def test_store_cut_off_by_a_delete_leaves_the_next_buffer_alone(proxy):
    """A store under way whose buffer is deleted, then stored again under the
    same handle by a second store, fails when its next chunk comes, and
    neither writes into nor removes the second one's buffer, which gets its
    own bytes."""
    import queue
    with grpc.insecure_channel(proxy.address) as ch:
        q, responses, sid = live_session(ch)
        ids = buffer_ids(sid, 20)

        def streaming(first: bytes):
            chunks: queue.Queue = queue.Queue()
            chunks.put(first)
            call = ch.stream_unary(SERVICE + "HostBufferStore").future(
                (field(1, c) for c in iter(chunks.get, None)),
                metadata=(("ifrt-proxy-grpc-host-buffer-store-metadata-bin",
                           ids + varint(3 << 3) + varint(8)),), timeout=30)
            return chunks, call
        old, old_call = streaming(b"old1")
        # The first store's buffer exists once its call has begun: delete it.
        assert harness.wait_until(lambda: _deleted(ch, ids), 10)
        new, new_call = streaming(b"new1")
        # One connection: the second store's first chunk reaches the proxy
        # before the first store's second.
        time.sleep(0.5)
        old.put(b"old2")
        old.put(None)
        with pytest.raises(grpc.RpcError) as e:
            old_call.result(timeout=30)
        assert e.value.code() == grpc.StatusCode.NOT_FOUND, e.value
        assert "HostBufferStore: host buffer 20 is gone" in e.value.details()
        new.put(b"new2")
        new.put(None)
        new_call.result(timeout=30)
        got = b"".join(dict(_fields(m)).get(1, b"")
                       for m in ch.unary_stream(SERVICE + "HostBufferLookup")(ids, timeout=10))
        assert got == b"new1new2"
        q.put(None)
        assert list(responses) == []


def _deleted(ch, ids: bytes) -> bool:
    try:
        list(ch.unary_stream(SERVICE + "HostBufferDelete")(ids, timeout=10))
        return True
    except grpc.RpcError:
        return False


def read_from_disk(ch, sid: int, handle: int, size: int | None):
    """HostBufferReadFromDisk{metadata{session_id, handle, buffer_size}}."""
    md = buffer_ids(sid, handle) + (varint(3 << 3) + varint(size & (2**64 - 1))
                                    if size is not None else b"")
    return raw(ch, "HostBufferReadFromDisk")(field(1, md), timeout=10)


def test_host_buffers_read_from_disk(cluster, proxy, tmp_path):
    """HostBufferReadFromDisk takes the bytes a client left in the transfer
    directory as lt_<handle as a 32-bit int> and removes the file; a missing
    file, a size other than declared or over the largest host buffer (a
    sparse file: checked before reading), a negative size, handle 0, a link, a
    FIFO, a handle in use, a second session while the first is open and a
    proxy with no directory are refused by name, and nothing is read from
    them."""
    with grpc.insecure_channel(proxy.address) as ch:
        q, responses, sid = live_session(ch)
        with pytest.raises(grpc.RpcError) as e:
            read_from_disk(ch, sid, 1, 4)
        assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        assert "this proxy has no transfer directory" in e.value.details()
        q.put(None)
    p = Proxy(cluster.controller, env={"CAUSEWAY_PROXY_TRANSFER_DIR": str(tmp_path),
                                       "CAUSEWAY_PROXY_MAX_HOST_BUFFER": str(1 << 20)})
    try:
        with grpc.insecure_channel(p.address) as ch:
            q, responses, sid = live_session(ch)
            data = bytes(range(256)) * 40
            (tmp_path / "lt_9").write_bytes(data)
            read_from_disk(ch, sid, 9, len(data))
            assert not (tmp_path / "lt_9").exists()
            got = b"".join(dict(_fields(m)).get(1, b"") for m in
                           ch.unary_stream(SERVICE + "HostBufferLookup")(buffer_ids(sid, 9),
                                                                          timeout=10))
            assert got == data
            # The handle is in use: refused, and the file is gone all the same.
            (tmp_path / "lt_9").write_bytes(b"other")
            with pytest.raises(grpc.RpcError) as e:
                read_from_disk(ch, sid, 9, 5)
            assert e.value.code() == grpc.StatusCode.ALREADY_EXISTS, e.value
            assert "handle 9 is in use" in e.value.details()
            assert not (tmp_path / "lt_9").exists()
            # jaxlib names the file by the handle cut to a 32-bit int.
            (tmp_path / "lt_5").write_bytes(b"five")
            read_from_disk(ch, sid, (1 << 32) + 5, None)
            assert not (tmp_path / "lt_5").exists()
            (tmp_path / "lt_-1").write_bytes(b"minus one")
            read_from_disk(ch, sid, 0xFFFFFFFF, 9)
            for handle, text in (((1 << 32) + 5, b"five"), (0xFFFFFFFF, b"minus one")):
                got = b"".join(dict(_fields(m)).get(1, b"") for m in ch.unary_stream(
                    SERVICE + "HostBufferLookup")(buffer_ids(sid, handle), timeout=10))
                assert got == text
            with pytest.raises(grpc.RpcError) as e:
                read_from_disk(ch, sid, 10, 4)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            assert f"cannot open {tmp_path}/lt_10: No such file or directory" \
                in e.value.details(), e.value.details()
            (tmp_path / "lt_11").write_bytes(b"12345")
            with pytest.raises(grpc.RpcError) as e:
                read_from_disk(ch, sid, 11, 6)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "lt_11 holds 5 bytes; the request declares 6" in e.value.details()
            secret = tmp_path / "secret"
            secret.write_bytes(b"not for clients")
            (tmp_path / "lt_12").symlink_to(secret)
            with pytest.raises(grpc.RpcError) as e:
                read_from_disk(ch, sid, 12, None)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            assert "cannot open" in e.value.details() and "lt_12" in e.value.details()
            assert secret.exists() and (tmp_path / "lt_12").is_symlink()
            os.mkfifo(tmp_path / "lt_13")
            with pytest.raises(grpc.RpcError) as e:
                read_from_disk(ch, sid, 13, None)
            assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
            assert "lt_13 is not a regular file" in e.value.details()
            with pytest.raises(grpc.RpcError) as e:
                read_from_disk(ch, 77, 14, None)
            assert e.value.code() == grpc.StatusCode.NOT_FOUND
            assert "no IFRT session 000000000000004d" in e.value.details()
            with open(tmp_path / "lt_15", "wb") as f:
                f.truncate(2 << 20)  # sparse: costs its writer nothing
            with pytest.raises(grpc.RpcError) as e:
                read_from_disk(ch, sid, 15, None)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert ("lt_15 holds 2097152 bytes, over this proxy's largest host buffer, 1048576 "
                    "bytes (CAUSEWAY_PROXY_MAX_HOST_BUFFER)") in e.value.details()
            assert not (tmp_path / "lt_15").exists()
            with pytest.raises(grpc.RpcError) as e:
                store(ch, sid, 16, [b"x"], 2 << 20)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert "2097152 bytes is over this proxy's largest host buffer" in e.value.details()
            (tmp_path / "lt_0").write_bytes(b"zero")
            for handle, size in ((16, -5), (0, 4)):
                with pytest.raises(grpc.RpcError) as e:
                    read_from_disk(ch, sid, handle, size)
                assert e.value.code() == grpc.StatusCode.INVALID_ARGUMENT
                assert "names no handle (or 0), or declares a negative size" in e.value.details()
            assert (tmp_path / "lt_0").read_bytes() == b"zero"
            # jaxlib names its files by handle alone: a second client's would
            # land on the first's, so the first session keeps the directory.
            q2, responses2, sid2 = live_session(ch)
            (tmp_path / "lt_17").write_bytes(b"second")
            with pytest.raises(grpc.RpcError) as e:
                read_from_disk(ch, sid2, 17, 6)
            assert e.value.code() == grpc.StatusCode.FAILED_PRECONDITION
            assert (f"session {sid:016x} takes files from this proxy's transfer directory"
                    in e.value.details()), e.value.details()
            assert (tmp_path / "lt_17").exists()
            for handle in (10, 11, 12, 13, 15):  # nothing was stored for the refused ones
                with pytest.raises(grpc.RpcError) as e:
                    list(ch.unary_stream(SERVICE + "HostBufferDelete")(buffer_ids(sid, handle),
                                                                         timeout=10))
                assert e.value.code() == grpc.StatusCode.NOT_FOUND, handle
            q.put(None)
            assert list(responses) == []
            # The first session gone, a read that fails (no file) claims
            # nothing, and the second session may have the directory.
            q3, responses3, sid3 = live_session(ch)

            def missing_file() -> bool:
                try:
                    read_from_disk(ch, sid3, 40, 4)
                except grpc.RpcError as e:
                    return e.code() == grpc.StatusCode.NOT_FOUND
                raise AssertionError("lt_40 was read")
            assert harness.wait_until(missing_file, 30), p.logs()[-2000:]
            assert _reads(ch, sid2, 17, 6)
            assert not (tmp_path / "lt_17").exists()
            q2.put(None)
            assert list(responses2) == []
            q3.put(None)
            assert list(responses3) == []
    finally:
        assert p.stop() == 0, p.logs()


def _reads(ch, sid: int, handle: int, size: int) -> bool:
    try:
        read_from_disk(ch, sid, handle, size)
        return True
    except grpc.RpcError as e:
        assert e.code() == grpc.StatusCode.FAILED_PRECONDITION, e
        return False


def test_stock_jax_uploads_through_the_transfer_directory(cluster, tmp_path):
    """jaxlib's client, told to (IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_*),
    writes host buffers of 1 MiB and up to the transfer directory rather than
    streaming them: the round trips of `arrays` (64 MiB among them) give back
    the same bytes, the proxy read them from disk, and no file is left."""
    p = Proxy(cluster.controller, env={"CAUSEWAY_PROXY_TRANSFER_DIR": str(tmp_path),
                                       "CAUSEWAY_LOG_LEVEL": "debug"})
    try:
        client = jax_client(p.address, "arrays", {
            "IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_DIRECTORY": str(tmp_path),
            "IFRT_PROXY_GRPC_LARGE_TRANSFER_OPTIMIZATION_THRESHOLD_BYTES": str(1 << 20)})
        try:
            out = read_report(client)
            assert out["checks"] and all(out["checks"].values()), out
        finally:
            finish(client)
        assert client.returncode == 0, client.stderr.read()[-3000:]
        assert " bytes read" in p.logs() and "HostBufferReadFromDisk" in p.logs(), p.logs()
        assert "67108864 bytes read" in p.logs()
        assert list(tmp_path.iterdir()) == []
    finally:
        assert p.stop() == 0, p.logs()[-3000:]


def test_host_buffer_budget(cluster, tmp_path):
    """CAUSEWAY_PROXY_HOST_BUFFER_BUDGET bounds the host buffers the proxy
    holds, all sessions together, and each session's to half of it. A store,
    a read back (CopyToHostBuffer) or a file in the transfer directory
    (sparse: it costs its writer nothing) that would pass either is refused
    RESOURCE_EXHAUSTED naming the sizes and the setting (a read before any
    byte is kept, a store at the chunk that would pass); that session and the
    others go on, and what is deleted, made into
    an array or left by a session's end counts no more."""
    mib = 1 << 20
    exhausted = grpc.StatusCode.RESOURCE_EXHAUSTED
    p = Proxy(cluster.controller, env={"CAUSEWAY_PROXY_TRANSFER_DIR": str(tmp_path),
                                       "CAUSEWAY_PROXY_HOST_BUFFER_BUDGET": str(4 * mib)})
    try:
        with grpc.insecure_channel(p.address) as ch:
            def lookup(sid, handle):
                return b"".join(dict(_fields(m)).get(1, b"") for m in ch.unary_stream(
                    SERVICE + "HostBufferLookup")(buffer_ids(sid, handle), timeout=10))

            def delete(sid, handle):
                list(ch.unary_stream(SERVICE + "HostBufferDelete")(buffer_ids(sid, handle),
                                                                     timeout=10))
            qa, ra, a = live_session(ch)
            qb, rb, b = live_session(ch)
            qc, rc, c = live_session(ch)
            # A session's share: half of the budget.
            store(ch, a, 1, [b"a" * mib, b"A" * mib], 2 * mib)
            with pytest.raises(grpc.RpcError) as e:
                store(ch, a, 2, [b"x" * 4096], 4096)
            assert e.value.code() == exhausted, e.value
            assert (f"HostBufferStore 2: session {a:016x} holds 2097152 bytes of host buffers; "
                    "4096 more would pass its share, half of this proxy's budget of 4194304 "
                    "bytes (CAUSEWAY_PROXY_HOST_BUFFER_BUDGET)") in e.value.details()
            # The others store on, up to the budget.
            store(ch, b, 1, [b"b" * mib], mib)
            store(ch, c, 1, [b"c" * mib], mib)
            with pytest.raises(grpc.RpcError) as e:
                store(ch, c, 2, [b"y" * 4096], 4096)
            assert e.value.code() == exhausted, e.value
            assert ("HostBufferStore 2: this proxy holds 4194304 bytes of host buffers for all "
                    "sessions; 4096 more would pass its budget of 4194304 bytes "
                    "(CAUSEWAY_PROXY_HOST_BUFFER_BUDGET)") in e.value.details()
            # The refused sessions answer on; nothing of theirs was lost.
            qa.put(ifrt_request(2, 10))
            assert response_status(next(ra)) == (10, 0, "")
            qc.put(ifrt_request(2, 10))
            assert response_status(next(rc)) == (10, 0, "")
            assert lookup(a, 1) == b"a" * mib + b"A" * mib
            assert lookup(c, 1) == b"c" * mib
            # Deleted: free again.
            delete(a, 1)
            data = bytes(range(256)) * (2 * mib // 256)
            store(ch, a, 3, [data[:mib], data[mib:]], 2 * mib)
            # Made into an array (f32[524288] on device 0): free again.
            qa.put(ifrt_request(4, 11, f32x4_from_host_buffer(3, 50, single_device(0),
                                                              n=2 * mib // 4)))
            assert response_status(next(ra)) == (11, 0, "")
            store(ch, a, 4, [b"z" * mib], mib)
            # A read back is charged its size before it begins.
            qa.put(ifrt_request(6, 12, copy_to_host(50, 5)))
            op, code, msg = response_status(next(ra))
            assert (op, code) == (12, exhausted.value[0]), (op, code, msg)
            assert (f"CopyToHostBuffer: host buffer 5: session {a:016x} holds 1048576 bytes of "
                    "host buffers; 2097152 more would pass its share") in msg, msg
            delete(a, 4)
            qa.put(ifrt_request(6, 13, copy_to_host(50, 5)))
            assert response_status(next(ra)) == (13, 0, "")
            assert lookup(a, 5) == data
            delete(a, 5)
            # The transfer directory: two sparse files, each within the largest
            # host buffer; the second would pass the share and is refused
            # unread, and removed all the same.
            for name in ("lt_20", "lt_21"):
                with open(tmp_path / name, "wb") as f:
                    f.truncate(2 * mib)
            read_from_disk(ch, a, 20, 2 * mib)
            with pytest.raises(grpc.RpcError) as e:
                read_from_disk(ch, a, 21, 2 * mib)
            assert e.value.code() == exhausted, e.value
            assert (f"HostBufferReadFromDisk 21: session {a:016x} holds 2097152 bytes of host "
                    "buffers; 2097152 more would pass its share, half of this proxy's budget "
                    "of 4194304 bytes (CAUSEWAY_PROXY_HOST_BUFFER_BUDGET)") in e.value.details()
            assert not (tmp_path / "lt_21").exists()
            assert lookup(a, 20) == bytes(2 * mib)
            # A session's end frees what it held: c fits its share again.
            with pytest.raises(grpc.RpcError) as e:
                store(ch, c, 2, [b"y" * mib], mib)
            assert e.value.code() == exhausted, e.value
            qb.put(None)
            assert list(rb) == []

            def stored() -> bool:
                try:
                    store(ch, c, 2, [b"y" * mib], mib)
                    return True
                except grpc.RpcError as e:
                    assert e.code() == exhausted, e
                    return False
            assert harness.wait_until(stored, 10)
            assert lookup(c, 2) == b"y" * mib
            for q, responses in ((qa, ra), (qc, rc)):
                q.put(None)
                assert list(responses) == []
    finally:
        assert p.stop() == 0, p.logs()[-3000:]
    assert "still charged at exit" not in p.logs(), p.logs()[-3000:]


def test_idle_stores_hold_nothing_of_the_budget(cluster):
    """A store is charged as its bytes arrive: two stores that declare half
    of the budget each and send nothing hold none of it, and a third session
    stores at once (a review found the three sessions locked out when stores
    were charged their declared size as they began). One that declares more
    than a session's share is refused when it begins."""
    import threading
    mib = 1 << 20
    p = Proxy(cluster.controller, env={"CAUSEWAY_PROXY_HOST_BUFFER_BUDGET": str(8 * mib)})
    stop = threading.Event()
    try:
        with grpc.insecure_channel(p.address) as ch:
            sessions = [live_session(ch) for _ in range(3)]

            def nothing():
                stop.wait(30)
                return
                yield

            idle = []
            for _, _, sid in sessions[:2]:
                meta = buffer_ids(sid, 1) + varint(3 << 3) + varint(4 * mib)
                idle.append(ch.stream_unary(SERVICE + "HostBufferStore").future(
                    nothing(), metadata=(("ifrt-proxy-grpc-host-buffer-store-metadata-bin",
                                          meta),), timeout=30))
            time.sleep(0.5)  # both began
            _, _, sid = sessions[2]
            store(ch, sid, 1, [b"z" * mib, b"Z" * mib], 2 * mib)
            with pytest.raises(grpc.RpcError) as e:
                store(ch, sid, 2, [b"y" * 4096], 4 * mib + 1)
            assert e.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert ("HostBufferStore 2: 4194305 bytes is more than a session's share, half of "
                    "this proxy's budget of 8388608 bytes (CAUSEWAY_PROXY_HOST_BUFFER_BUDGET)"
                    ) in e.value.details(), e.value.details()
            stop.set()
            for f in idle:  # ended without their bytes: refused, nothing kept
                with pytest.raises(grpc.RpcError):
                    f.result()
            for q, responses, _ in sessions:
                q.put(None)
                list(responses)
    finally:
        stop.set()
        assert p.stop() == 0, p.logs()[-3000:]
    assert "still charged at exit" not in p.logs(), p.logs()[-3000:]


def test_stalled_lookup_gives_back_a_deleted_buffer(cluster):
    """A lookup whose client stops reading kept its buffer, and its charge,
    after HostBufferDelete and the session's end, until the connection
    closed: three sessions in turn, each storing, stalling a lookup, deleting
    and leaving, took the whole budget (found by a review). Now the delete
    ends such a lookup (NOT_FOUND) and frees the buffer: a fourth session
    stores."""
    mib = 1 << 20
    p = Proxy(cluster.controller, env={"CAUSEWAY_PROXY_HOST_BUFFER_BUDGET": str(64 * mib)})
    held = []
    try:
        for size in (24, 24, 16):
            ch = grpc.insecure_channel(p.address, options=[("grpc.http2.bdp_probe", 0)])
            q, responses, sid = live_session(ch)
            store(ch, sid, 1, [b"x" * mib] * size, size * mib, timeout=60)
            it = ch.unary_stream(SERVICE + "HostBufferLookup")(buffer_ids(sid, 1), timeout=120)
            next(it)  # it began; never read again
            held.append((ch, it))
            list(ch.unary_stream(SERVICE + "HostBufferDelete")(buffer_ids(sid, 1), timeout=10))
            q.put(None)
            list(responses)  # the session ends
        with grpc.insecure_channel(p.address) as ch:
            q, responses, sid = live_session(ch)
            store(ch, sid, 1, [b"y" * mib] * 16, 16 * mib, timeout=60)
            q.put(None)
            list(responses)
        for ch, it in held:
            it.cancel()
            ch.close()
    finally:
        assert p.stop() == 0, p.logs()[-3000:]
    assert "still charged at exit" not in p.logs(), p.logs()[-3000:]


def test_stock_jax_within_the_host_buffer_budget(cluster):
    """jaxlib's client deletes each host buffer once it is used, so 320 MiB
    each way pass through a 64 MiB budget; an array over a session's share
    (32 MiB) is refused, and jaxlib then ends its session, saying why."""
    p = Proxy(cluster.controller, env={"CAUSEWAY_PROXY_HOST_BUFFER_BUDGET": str(64 << 20)})
    try:
        client = jax_client(p.address, "budget")
        try:
            out = read_report(client)
        finally:
            finish(client)
        err = client.stderr.read()
        assert out["round_trips"], (out, err[-3000:])
        assert out["over"].startswith("UNAVAILABLE: Connection to IFRT proxy server was "
                                      "terminated"), out
        assert ("Handling error in background data-transfer by disconnecting from server (if "
                "not already disconnected), error: RESOURCE_EXHAUSTED: HostBufferStore") in err
        assert ("50331648 bytes is more than a session's share, half of this proxy's budget "
                "of 67108864 bytes (CAUSEWAY_PROXY_HOST_BUFFER_BUDGET)") in err, err[-3000:]
    finally:
        assert p.stop() == 0, p.logs()[-3000:]
    assert "still charged at exit" not in p.logs(), p.logs()[-3000:]


def _varints(b: bytes) -> list[int]:
    out, i = [], 0
    while i < len(b):
        v, i = _uvarint(b, i)
        out.append(v)
    return out


def _fields(b: bytes):
    i = 0
    while i < len(b):
        k, i = _uvarint(b, i)
        wt = k & 7
        if wt == 0:
            v, i = _uvarint(b, i)
        elif wt == 1:
            v, i = struct.unpack("<Q", b[i:i + 8])[0], i + 8
        elif wt == 2:
            n, i = _uvarint(b, i)
            v, i = b[i:i + n], i + n
        else:
            raise AssertionError(f"wire type {wt}")
        yield k >> 3, v


def test_main_job_through_the_proxy():
    """The main job (examples/train_two_islands.py: two islands, data-parallel
    within each, a pipeline across them with worker-to-worker copies) through
    the proxy: its 30 losses equal stock JAX's bit for bit (the example
    checks and exits 1 otherwise)."""
    c = harness.HandCluster(workers=2, devices=4, tcp=True)
    p = None
    try:
        p = Proxy(c.controller)
        env = {k: v for k, v in os.environ.items() if not k.startswith(("CAUSEWAY_", "JAX_"))}
        env.update({"JAX_PLATFORMS": "proxy", "JAX_BACKEND_TARGET": "grpc://" + p.address,
                    "IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS": "true"})
        r = subprocess.run([sys.executable, str(HERE.parent.parent / "examples" /
                                                "train_two_islands.py")],
                           env=env, capture_output=True, text=True, timeout=600)
        assert r.returncode == 0, (r.stdout[-3000:], r.stderr[-3000:], p.logs()[-3000:])
        assert "OK: 30 losses match stock JAX bit for bit" in r.stdout, r.stdout
        assert "stage 2 loss         on island 1" in r.stdout, r.stdout
    finally:
        if p:
            assert p.stop() == 0, p.logs()
        c.stop()


def test_dying_worker_fails_its_arrays_by_name():
    """A worker killed for real (SIGKILL) under an open session: reading and
    computing on an array it held fail UNAVAILABLE naming the worker; the
    session carries on with the other worker's devices."""
    c = harness.HandCluster(workers=2, devices=2, tcp=True)
    p = None
    try:
        p = Proxy(c.controller)
        client = jax_client(p.address, "failure")
        try:
            first = read_report(client)
            assert first["ready"], first
            # The worker of the last device (its `worker` attribute, as on the
            # plugin front).
            victim = first["worker"]
            assert victim in c.procs, first
            c.procs[victim].kill()
            c.procs[victim].wait(10)
            client.stdin.write("\n")
            client.stdin.flush()
            out = read_report(client)
        finally:
            finish(client)
        for name, text in out["errors"].items():
            assert "UNAVAILABLE" in text and victim in text, (name, text)
        assert out["survivor"] == [0.0, 3.0, 6.0, 9.0], out
    finally:
        if p:
            assert p.stop() == 0, p.logs()
        c.stop()

