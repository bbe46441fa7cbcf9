"""`causeway up` / `causeway down` end to end: a background cluster that
outlives the shell that started it, two JAX clients on it at once through the
lines up printed, a second up refused, down stopping every daemon and
removing its files; a dead cluster's files replaced, and a failed up cleaning
up after itself."""
from __future__ import annotations

import json
import os
import pathlib
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request

import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

CLIENT = pathlib.Path(__file__).resolve().parent / "up_client.py"


def tool(*args, env=None, timeout=120, cwd=None):
    return subprocess.run([os.path.join(harness.bin_dir(), "causeway"), *args],
                          capture_output=True, text=True, timeout=timeout, cwd=cwd,
                          env=env if env is not None else tool_env())


def tool_env() -> dict:
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("CAUSEWAY_") and not k.startswith("JAX_")}
    env["CAUSEWAY_PJRT_PLUGIN"] = harness.cpu_plugin()
    return env


def exports(stdout: str, tls: bool = False) -> dict:
    out = {}
    for line in stdout.splitlines():
        assert line.startswith("export "), stdout
        k, v = line[len("export "):].split("=", 1)
        out[k] = v
    want = {"CAUSEWAY_CONTROLLER", "CAUSEWAY_TOKEN_FILE"}
    assert set(out) == (want | {"CAUSEWAY_TLS", "CAUSEWAY_TLS_CA"} if tls else want), stdout
    return out


def pids(d: str) -> dict:
    procs = {}
    for line in pathlib.Path(d, "cluster").read_text().splitlines():
        if line.startswith("process "):
            _, name, pid, _start = line.split()
            procs[name] = int(pid)
    return procs


def client_env(ex: dict) -> dict:
    env = harness.causeway_env(controller=ex["CAUSEWAY_CONTROLLER"])
    env["CAUSEWAY_TOKEN_FILE"] = ex["CAUSEWAY_TOKEN_FILE"]
    env.pop("CAUSEWAY_TOKEN", None)
    return env


@pytest.fixture()
def state_dir():
    parent = tempfile.mkdtemp(prefix="cw-up-")
    d = os.path.join(parent, "cluster")
    yield d
    if os.path.exists(os.path.join(d, "cluster")):
        tool("down", "--dir", d, "--grace", "2")
    shutil.rmtree(parent, ignore_errors=True)


def test_up_two_clients_down(state_dir):
    d = state_dir
    # Started from a shell that exits at once: the daemons live on in
    # sessions of their own.
    sh = subprocess.run(["bash", "-c", f'"{harness.bin_dir()}/causeway" up --dir "{d}" '
                         "--workers 2 --devices 2"], capture_output=True, text=True,
                        timeout=120, env=tool_env())
    assert sh.returncode == 0, sh.stderr
    ex = exports(sh.stdout)
    assert ex == {"CAUSEWAY_CONTROLLER": os.path.join(d, "controller.sock"),
                  "CAUSEWAY_TOKEN_FILE": os.path.join(d, "token")}
    assert "a cluster of 2 workers x 2 devices is up in " + d in sh.stderr
    assert (os.stat(d).st_mode & 0o777) == 0o700
    assert (os.stat(ex["CAUSEWAY_TOKEN_FILE"]).st_mode & 0o777) == 0o600
    assert len(pathlib.Path(ex["CAUSEWAY_TOKEN_FILE"]).read_text().strip()) == 64
    assert pathlib.Path(d, "env").read_text() == sh.stdout
    procs = pids(d)
    assert sorted(procs) == ["controller", "worker-0", "worker-1"]
    for pid in procs.values():
        assert harness.proc_alive(pid)
        assert os.getsid(pid) == pid != os.getsid(0)
        assert "--token" not in " ".join(harness.proc_cmdline(pid))

    # Two JAX clients at once, each seeing all 4 devices.
    env = client_env(ex)
    clients = [subprocess.Popen([harness.PYTHON, str(CLIENT), str(i)], env=env, text=True,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE)
               for i in range(2)]
    for i, c in enumerate(clients):
        out, err = c.communicate(timeout=180)
        assert c.returncode == 0, err[-3000:]
        r = json.loads(out.strip().splitlines()[-1])
        assert r["devices"] == 4 and r["workers"] == ["worker-0", "worker-1"], r
        assert r["process_count"] == 1 and r["sum"] == 2 * (28 + 8 * i), r
    # Without the token a client is refused: the cluster is not open.
    st = tool("status", env={**tool_env(), "CAUSEWAY_CONTROLLER": ex["CAUSEWAY_CONTROLLER"]})
    assert st.returncode == 3, st
    st = tool("status", env={**tool_env(), **ex})
    assert st.returncode == 0 and "2 workers" in st.stdout, st

    # A second cluster in the same directory is refused, the first untouched.
    again = tool("up", "--dir", d)
    assert again.returncode == 1, again
    assert f"a cluster is running in {d} already" in again.stderr, again.stderr
    assert again.stdout == ""
    assert all(harness.proc_alive(p) for p in procs.values())

    down = tool("down", "--dir", d)
    assert down.returncode == 0, down.stderr
    assert "(3 processes were running)" in down.stderr, down.stderr
    assert not any(harness.proc_alive(p) for p in procs.values())
    assert not os.path.exists(d)
    again = tool("down", "--dir", d)
    assert again.returncode == 4 and "no cluster in " + d in again.stderr, again


def test_dead_cluster_replaced_and_failed_up_cleans_up(state_dir):
    d = state_dir
    up = tool("up", "--dir", d, "--workers", "1", "--devices", "1", "--listen", "127.0.0.1:0",
              "--metrics-listen", "127.0.0.1:0")
    assert up.returncode == 0, up.stderr
    ctl = exports(up.stdout)["CAUSEWAY_CONTROLLER"]
    assert ctl.startswith("127.0.0.1:") and not ctl.endswith(":0"), ctl
    # The metrics port the kernel chose is printed, and serves.
    m = re.search(r"the controller's metrics: (http://127\.0\.0\.1:(\d+)/metrics)\n",
                  up.stderr)
    assert m and m.group(2) != "0", up.stderr
    with urllib.request.urlopen(m.group(1), timeout=10) as r:
        assert 'causeway_workers{state="alive"} 1' in r.read().decode(), m.group(1)
    old = pids(d)
    for pid in old.values():
        os.kill(pid, signal.SIGKILL)
    assert harness.wait_until(lambda: not any(harness.proc_alive(p) for p in old.values()), 10)
    # Its files are left; a new up replaces them.
    up = tool("up", "--dir", d, "--workers", "1", "--devices", "1")
    assert up.returncode == 0, up.stderr
    assert "removing the files of a cluster in " + d + " that is no longer running" in up.stderr
    assert tool("down", "--dir", d).returncode == 0

    # A worker that cannot load its plugin: up fails, says why, stops the
    # controller and leaves nothing behind.
    bad = tool("up", "--dir", d, "--workers", "1", "--plugin", sys.executable, "--timeout", "30")
    assert bad.returncode == 1, bad
    assert "up failed; stopping what started" in bad.stderr and "worker-0.log" in bad.stderr
    assert bad.stdout == ""
    assert not os.path.exists(d)
    # No plugin at all is a usage error, before anything starts.
    env = tool_env()
    del env["CAUSEWAY_PJRT_PLUGIN"]
    none = tool("up", "--dir", d, env=env)
    assert none.returncode == 2 and "no PJRT plugin for the workers" in none.stderr, none
    assert not os.path.exists(d)


def test_controller_log_on_a_full_disk(state_dir):
    # The controller's log cannot be written (its disk is full: /dev/full
    # stands in). up read the controller's address from that log, and so
    # waited out --timeout and said the controller did not start, while it
    # ran (a helper's audit). It reads the controller's readiness pipe now.
    os.makedirs(state_dir, mode=0o700)
    os.symlink("/dev/full", os.path.join(state_dir, "controller.log"))
    up = tool("up", "--dir", state_dir, "--workers", "1", "--devices", "1", "--timeout", "20")
    assert up.returncode == 0, up.stderr
    ex = exports(up.stdout)
    st = tool("status", env={**tool_env(), **ex})
    assert st.returncode == 0 and "1 worker" in st.stdout, (st.stdout, st.stderr)


def test_up_with_stdio_closed(state_dir):
    # Started with descriptors 0, 1 and 2 closed (a supervisor's way), up's
    # readiness pipe came out as 1 and 2, which the controller's log then
    # replaced in the child: up killed a healthy controller (the review).
    sh = subprocess.run(["sh", "-c", 'exec 0<&- 1>&- 2>&-; exec "$0" "$@"',
                         os.path.join(harness.bin_dir(), "causeway"), "up", "--dir", state_dir,
                         "--workers", "1", "--devices", "1"], env=tool_env(), timeout=120)
    assert sh.returncode == 0
    ex = dict(line[len("export "):].split("=", 1)
              for line in pathlib.Path(state_dir, "env").read_text().splitlines())
    st = tool("status", env={**tool_env(), **ex})
    assert st.returncode == 0 and "1 worker" in st.stdout, (st.stdout, st.stderr)


def test_up_interrupted_while_starting_stops_what_it_started(state_dir, tmp_path):
    """`up` killed (Ctrl-C, a supervisor's SIGTERM) while its controller
    started: nothing recorded the controller yet, so it ran on where `down`
    could not see it, and the next `up` took its socket over (an audit). The
    interrupted `up` now stops what it started."""
    wrap = tmp_path / "bin"
    wrap.mkdir()
    real = harness.bin_dir()
    (wrap / "causeway-controller").write_text(
        f"#!/bin/sh\nsleep 3\nexec {real}/causeway-controller \"$@\"\n")
    (wrap / "causeway-controller").chmod(0o755)
    os.symlink(os.path.join(real, "causeway-worker"), wrap / "causeway-worker")
    env = tool_env()
    env["CAUSEWAY_BIN_DIR"] = str(wrap)
    up = subprocess.Popen([os.path.join(real, "causeway"), "up", "--dir", state_dir,
                           "--workers", "1", "--devices", "2"], env=env,
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    kids = []
    assert harness.wait_until(lambda: bool(kids.extend(harness.children_of(up.pid)) or kids),
                              30, interval=0.05), "up started no controller"
    up.send_signal(signal.SIGTERM)
    up.communicate(timeout=60)
    assert up.returncode == 128 + signal.SIGTERM, up.returncode
    gone = harness.wait_until(lambda: not any(harness.proc_alive(p) for p in kids), 10)
    for p in kids:
        if harness.proc_alive(p):
            os.kill(p, signal.SIGKILL)
    assert gone, f"the controller up started ({kids}) outlived up"


def test_devices_numbered_in_worker_order(state_dir, tmp_path):
    """The controller numbers devices in registration order. `up` started its
    workers together, so on a loaded host worker-1 could register first and
    take devices 0-1 (an audit); it starts them one at a time now, as the
    embedded cluster does. Here worker-0 is slow to start (a wrapper sleeps
    first): its devices are still 0 and 1."""
    wrap = tmp_path / "bin"
    wrap.mkdir()
    real = harness.bin_dir()
    (wrap / "causeway-worker").write_text(
        "#!/bin/sh\ncase \"$*\" in *'--name worker-0 '*) sleep 2;; esac\n"
        f"exec {real}/causeway-worker \"$@\"\n")
    (wrap / "causeway-worker").chmod(0o755)
    os.symlink(os.path.join(real, "causeway-controller"), wrap / "causeway-controller")
    env = tool_env()
    env["CAUSEWAY_BIN_DIR"] = str(wrap)
    up = tool("up", "--dir", state_dir, "--workers", "2", "--devices", "2", env=env)
    try:
        assert up.returncode == 0, up.stderr
        st = tool("status", "--json", env={**tool_env(), **exports(up.stdout)})
        assert st.returncode == 0, st.stderr
        got = {w["name"]: w["devices"] for w in json.loads(st.stdout)["workers"]}
        assert got == {"worker-0": [0, 1], "worker-1": [2, 3]}, got
    finally:
        assert tool("down", "--dir", state_dir).returncode == 0


def test_controller_lost_while_a_worker_starts(state_dir, tmp_path):
    """`up` waits for each worker's registration in turn; the controller dying
    meanwhile (here killed as worker-1 starts) fails it at once, naming the
    controller, instead of waiting out --timeout and blaming the worker (a
    review)."""
    wrap = tmp_path / "bin"
    wrap.mkdir()
    real = harness.bin_dir()
    state = os.path.join(state_dir, "cluster")
    (wrap / "causeway-worker").write_text(
        "#!/bin/sh\ncase \"$*\" in *'--name worker-1 '*) "
        f"kill -9 $(awk '$1==\"process\" && $2==\"controller\" {{print $3}}' {state});; esac\n"
        f"exec {real}/causeway-worker \"$@\"\n")
    (wrap / "causeway-worker").chmod(0o755)
    os.symlink(os.path.join(real, "causeway-controller"), wrap / "causeway-controller")
    env = tool_env()
    env["CAUSEWAY_BIN_DIR"] = str(wrap)
    t = time.monotonic()
    up = tool("up", "--dir", state_dir, "--workers", "2", "--devices", "1", "--timeout", "60",
              env=env)
    took = time.monotonic() - t
    assert up.returncode == 1, (up.returncode, up.stderr)
    assert "causeway: controller was killed by signal 9" in up.stderr, up.stderr
    assert "before worker-1 registered with the controller" in up.stderr, up.stderr
    assert took < 30, f"{took:.1f} s: waited for the timeout"
    assert not os.path.exists(state_dir)


def test_corrupt_state_file_says_how_to_recover(state_dir):
    """A state file that is no state file (a crash mid-write by something else,
    an editor): neither up nor down can know what ran, and both refuse. They
    say how to find the daemons and what to remove (an audit: they said only
    'not a causeway cluster state file')."""
    os.makedirs(state_dir, mode=0o700)
    pathlib.Path(state_dir, "cluster").write_text("garbage\n")
    for cmd in ("down", "up"):
        p = tool(cmd, "--dir", state_dir)
        assert p.returncode == 1, (cmd, p.returncode, p.stderr)
        assert "not a causeway cluster state file. If daemons of that cluster still run" in \
            p.stderr and f"pgrep -af '{state_dir}/'" in p.stderr and \
            f"then remove {state_dir}/cluster" in p.stderr, (cmd, p.stderr)
    os.unlink(os.path.join(state_dir, "cluster"))


def test_tls_cluster_exports_what_its_clients_need(state_dir, tmp_path):
    # A TLS cluster's exports carry TLS on and the CA (absolute), so that a
    # client in another shell that evaluates them reaches it; before, it got
    # "requires TLS on TCP connections".
    pki = tmp_path / "pki"
    assert tool("certs", "ca", "--dir", str(pki)).returncode == 0
    made = tool("certs", "daemon", "d", "--host", "127.0.0.1", "--dir", str(pki))
    assert made.returncode == 0, made.stderr
    env = dict(tool_env(), CAUSEWAY_TLS="1", CAUSEWAY_TLS_CA=str(pki / "ca.pem"),
               CAUSEWAY_TLS_CERT=str(pki / "d.pem"), CAUSEWAY_TLS_KEY=str(pki / "d.key"))
    env["CAUSEWAY_TLS_CA"] = "pki/ca.pem"  # relative to up's directory: exported absolute
    up = tool("up", "--dir", state_dir, "--workers", "1", "--devices", "1", "--listen",
              "127.0.0.1:0", env=env, cwd=str(tmp_path))
    assert up.returncode == 0, up.stderr
    ex = exports(up.stdout, tls=True)
    assert ex["CAUSEWAY_TLS"] == "1" and ex["CAUSEWAY_TLS_CA"] == str(pki / "ca.pem"), ex
    st = tool("status", env=dict(tool_env(), **ex))
    assert st.returncode == 0, st.stderr
    assert "1 workers" in st.stdout or "1 worker" in st.stdout, st.stdout

    # Client certificates required: up says each client needs its own (it
    # exports none), and a client certificate made apart from the CA key
    # (--ca-dir) is what such a client needs.
    assert tool("down", "--dir", state_dir).returncode == 0
    env["CAUSEWAY_TLS_REQUIRE_CLIENT_CERT"] = "1"
    up = tool("up", "--dir", state_dir, "--workers", "1", "--devices", "1", "--listen",
              "127.0.0.1:0", env=env, cwd=str(tmp_path))
    assert up.returncode == 0, up.stderr
    assert "each client also needs CAUSEWAY_TLS_CERT and CAUSEWAY_TLS_KEY" in up.stderr, up.stderr
    ex = exports(up.stdout, tls=True)
    refused = tool("status", env=dict(tool_env(), **ex))
    assert refused.returncode != 0, refused.stdout
    alice = tmp_path / "alice"
    made = tool("certs", "client", "alice", "--ca-dir", str(pki), "--dir", str(alice))
    assert made.returncode == 0, made.stderr
    assert sorted(os.listdir(alice)) == ["alice.key", "alice.pem", "ca.pem"]
    st = tool("status", env={**tool_env(), **ex, "CAUSEWAY_TLS_CERT": str(alice / "alice.pem"),
                             "CAUSEWAY_TLS_KEY": str(alice / "alice.key"),
                             "CAUSEWAY_TLS_CA": str(alice / "ca.pem")})
    assert st.returncode == 0, st.stderr
