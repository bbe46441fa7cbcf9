"""Failures are events, not crashes: unreachable controller, a worker killed
mid-run, a client killed mid-run, and the embedded cluster's lifetime.

These use real processes: a cluster started by hand (causeway-controller and
causeway-worker binaries) where a test kills one of them, and runner clients
that a test kills with SIGKILL.
"""
import json
import os
import signal
import socket
import subprocess
import tempfile
import time

import pytest

import harness
from conftest import plugin_front_only, requires_causeway

pytestmark = [requires_causeway, plugin_front_only(
    "clients of the plugin and their embedded clusters; a worker killed under the "
    "proxy front is in tests/proxy")]

DEADLINE_S = 10.0


@pytest.fixture
def hand_cluster():
    c = harness.HandCluster()
    yield c
    c.stop()


def _hand_runner(name, cluster, **env):
    e = harness.causeway_env(controller=cluster.controller)
    e.update(env)
    return harness.Runner(name, e)


@pytest.mark.parametrize("kind", ["refused", "no-such-socket", "silent"])
def test_unreachable_controller(kind):
    listener = None
    if kind == "refused":
        addr = f"127.0.0.1:{harness.free_tcp_port()}"  # nothing listens there
    elif kind == "no-such-socket":
        addr = os.path.join(tempfile.gettempdir(), f"cw-none-{os.getpid()}", "controller.sock")
    else:  # accepts TCP connections (kernel backlog) but never answers HELLO
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(16)
        addr = f"127.0.0.1:{listener.getsockname()[1]}"
    env = harness.causeway_env(controller=addr)
    env["CW_RUNNER_LAZY"] = "1"
    r = harness.Runner(f"unreachable-{kind}", env)
    try:
        got = r.call("backend_init", timeout=60)
    finally:
        r.close()
        if listener:
            listener.close()
    print(f"{kind}: {got.get('elapsed', 0):.2f} s: {got.get('error', '')[:300]}")
    assert not got["ok"], f"jax.devices() succeeded against {addr}?"
    assert addr in got["error"], f"error does not name {addr}: {got['error']}"
    assert got["elapsed"] <= DEADLINE_S, \
        f"took {got['elapsed']:.1f} s (limit {DEADLINE_S} s): {got['error']}"


def test_worker_killed_mid_run(hand_cluster):
    r = _hand_runner("hand-kill", hand_cluster)
    try:
        prep = r.call("kill_prepare")
        victim, keep = prep["victim"], prep["keep"]
        assert victim in hand_cluster.procs, (victim, list(hand_cluster.procs))
        hand_cluster.kill(victim, signal.SIGKILL)
        # A hang shows up as RunnerHung (the call is bounded); each read is timed.
        got = r.call("kill_after", timeout=120)
    finally:
        log = r.log_tail()
        r.close()
    report = f"{got!r:.3000}\n--- cluster logs ---\n{hand_cluster.logs()}\n--- client ---\n{log}"
    for what in ("victim_read", "pending_read", "victim_compute", "victim_put"):
        res = got[what]
        assert not res["ok"], f"{what} on the killed worker succeeded\n{report}"
        assert "UNAVAILABLE" in res["error"], f"{what}: not UNAVAILABLE: {res['error']}"
        assert victim in res["error"], f"{what}: does not name {victim}: {res['error']}"
        assert res["elapsed"] <= DEADLINE_S, f"{what}: {res['elapsed']:.1f} s\n{report}"
    print({k: (v["ok"], round(v["elapsed"], 3), v.get("error", "")[:200])
           for k, v in got.items() if isinstance(v, dict)})
    for what in ("keep_read", "keep_compute", "keep_after"):
        assert got[what]["ok"], f"{what} on the surviving worker {keep} failed\n{report}"
    expected = got["expected_keep"]
    assert (got["keep_read"]["value"] == expected).all()
    assert (got["keep_compute"]["value"] == expected + 1).all()
    assert hand_cluster.procs["controller"].poll() is None, "the controller died"
    assert hand_cluster.procs[keep].poll() is None, f"{keep} died"


def test_client_killed_mid_run(ref, hand_cluster):
    addrs = hand_cluster.addresses
    a = _hand_runner("hand-client-a", hand_cluster)
    try:
        held = a.call("client_hold", mib=4)
        during = {w: harness.stats(addr) for w, addr in addrs.items()}
        assert sum(s["buffers"] for s in during.values()) >= held["arrays"], during
        a.kill(signal.SIGKILL)
    finally:
        a.close()

    def all_freed():
        now = {w: harness.stats(addr) for w, addr in addrs.items()}
        return now if all(s["buffers"] == 0 and s["buffer_bytes"] == 0
                          for s in now.values()) else None
    t = time.monotonic()
    freed = harness.wait_until(all_freed, DEADLINE_S, interval=0.2)
    after = {w: harness.stats(addr) for w, addr in addrs.items()}
    assert freed, (f"the killed client's buffers were not freed within {DEADLINE_S} s:\n"
                   f"during: {during}\nafter: {after}\n{hand_cluster.logs()}")
    print(f"freed in {time.monotonic() - t:.2f} s")
    ctl = harness.stats(hand_cluster.controller)
    assert ctl["workers"] == harness.NUM_WORKERS and ctl["workers_dead"] == 0, ctl
    assert all(p.poll() is None for p in hand_cluster.procs.values()), hand_cluster.logs()
    # Another client is served, and computes what stock JAX computes.
    b = _hand_runner("hand-client-b", hand_cluster)
    try:
        want, got = harness.run_both(ref, b, "health")
        harness.assert_same(want, got, "health of the next client")
    finally:
        b.close()


@pytest.mark.parametrize("how", ["exit", "sigkill"])
def test_embedded_cluster_dies_with_client(how):
    r = harness.Runner(f"embedded-{how}", harness.causeway_env())
    try:
        r.call("health")
        kids = harness.cluster_children(r.pid)
    except BaseException:
        r.kill()
        raise
    assert sorted(kids) == ["controller"] + [f"worker-{i}" for i in range(harness.NUM_WORKERS)], \
        f"embedded cluster processes: {kids}"
    sock_dir = os.path.dirname(kids["controller"][1] or "")
    if how == "exit":
        rc = r.close()
        assert rc == 0, f"client exit status {rc}\n{r.log_tail()}"
    else:
        r.kill(signal.SIGKILL)
        r.close()
    pids = {n: pid for n, (pid, _) in kids.items()}
    gone = harness.wait_until(lambda: not any(harness.proc_alive(p) for p in pids.values()),
                              DEADLINE_S)
    alive = {n: p for n, p in pids.items() if harness.proc_alive(p)}
    for p in alive.values():  # do not leak them into the next test
        os.kill(p, signal.SIGKILL)
    assert gone, f"still running {DEADLINE_S} s after the client's {how}: {alive}"
    if how == "exit":
        # JAX never destroys its client: the plugin's atexit handler removes it.
        assert sock_dir and not os.path.exists(sock_dir), \
            f"the embedded cluster's directory {sock_dir} outlived the client's exit"


_INTERRUPTED_JOB = r"""
import json, sys, time
import jax.numpy as jnp
x = jnp.arange(8.0)
before = float(jnp.sum(x * 2))
try:
    # Inside the try: the test's Ctrl-C may land before this line ends (a
    # CI run on a busy machine caught it there, uncaught).
    print("READY", flush=True)
    time.sleep(120)
except KeyboardInterrupt:  # what a program that saves its state on Ctrl-C does
    pass
after = float(jnp.sum(x * 3))  # the same arrays, on the same cluster
print("RESULT " + json.dumps({"before": before, "after": after}), flush=True)
"""


def test_ctrl_c_spares_the_embedded_cluster():
    """A terminal's Ctrl-C (and Jupyter's interrupt) signals the whole process
    group. The embedded daemons shared the JAX process's group and died of it,
    so a program that caught KeyboardInterrupt lost its cluster (an audit:
    'connection to .../controller.sock lost'). They have a group of their own
    and end with the JAX process through their watch pipe."""
    p = subprocess.Popen([harness.PYTHON, "-c", _INTERRUPTED_JOB], env=harness.causeway_env(),
                         cwd=str(harness.ROOT), stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        lines = []
        for line in p.stdout:
            lines.append(line)
            if line.startswith("READY"):
                break
        assert lines and lines[-1].startswith("READY"), "".join(lines)[-4000:]
        os.killpg(p.pid, signal.SIGINT)  # the group, as the terminal does
        out, _ = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            os.killpg(p.pid, signal.SIGKILL)
            p.wait()
    text = "".join(lines) + out
    assert p.returncode == 0, f"exited {p.returncode}:\n{text[-6000:]}"
    got = json.loads([ln for ln in text.splitlines() if ln.startswith("RESULT ")][-1][7:])
    assert got == {"before": 56.0, "after": 84.0}, text[-4000:]


def test_closed_stdout_and_stderr(tmp_path):
    """`python job.py >&- 2>&-`: the embedded cluster's pipes got descriptors
    1 and 2, which the children's log redirection then replaced (an audit:
    'controller: --watch-fd 2: socket is not connected', or libuv's assertion
    when stdin was closed too). Its pipes are kept above the standard ones."""
    result = tmp_path / "result"
    code = ("import json, sys, jax.numpy as jnp\n"
            "v = float(jnp.sum(jnp.arange(8.0) * 2))\n"
            "open(sys.argv[1], 'w').write(json.dumps(v))\n")
    for close in ((1, 2), (0, 1, 2)):
        if result.exists():
            result.unlink()
        rc = subprocess.run([harness.PYTHON, "-c", code, str(result)],
                            env=harness.causeway_env(), cwd=str(harness.ROOT),
                            pass_fds=(), preexec_fn=lambda fds=close: [os.close(f) for f in fds],
                            timeout=180).returncode
        assert rc == 0 and result.exists(), f"descriptors {close} closed: exit {rc}"
        assert json.loads(result.read_text()) == 56.0


_FORK_JOB = r"""
import gc, glob, json, multiprocessing as mp, os, signal, sys, time
import jax, jax.numpy as jnp, numpy as np
f = jax.jit(lambda v: v + 1)
x = f(jnp.arange(8.0))
x.block_until_ready()
scratch = [f(jnp.ones(1 << 19)) for _ in range(3)]  # 2 MiB each: dropping them sends at once

def drop():
    global scratch
    scratch = None
    gc.collect()

def read(q):
    try:
        q.put(("ok", float(np.asarray(x).sum())))
    except Exception as e:
        q.put(("error", str(e)))

def controller():
    for kids in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        for pid in open(kids).read().split():
            argv = open(f"/proc/{pid}/cmdline").read().split("\0")
            if "--listen" in argv and argv[argv.index("--listen") + 1].endswith("controller.sock"):
                return int(pid), os.path.dirname(argv[argv.index("--listen") + 1])

ctx = mp.get_context("fork")
p = ctx.Process(target=drop)
p.start()
p.join(60)
q = ctx.Queue()
p2 = ctx.Process(target=read, args=(q,))
p2.start()
child_read = q.get(timeout=60)
p2.join(60)
ctl_pid, d = controller()
pid = os.fork()
if pid == 0:
    # exit() runs the C atexit handlers (sys.exit would first finalize
    # jaxlib's own CPU client, which deadlocks in a forked child on stock too)
    import ctypes
    ctypes.CDLL(None).exit(0)
os.waitpid(pid, 0)
after = float(jnp.sum(f(x)))
print("RESULT " + json.dumps({"drop_exit": p.exitcode, "read": child_read,
                              "dir_kept": bool(d) and os.path.isdir(d), "after": after}),
      flush=True)
if len(sys.argv) > 1:  # killed, with a forked child still running
    sleeper = os.fork()
    if sleeper == 0:
        null = os.open(os.devnull, os.O_WRONLY)
        os.dup2(null, 1)  # the test reads the job's output to its end
        os.dup2(null, 2)
        time.sleep(60)
        os._exit(0)
    print("PIDS " + json.dumps({"controller": ctl_pid, "sleeper": sleeper}), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
"""


def test_forked_children_leave_the_parent_alone():
    """multiprocessing's default 'fork' start method: the child inherits the
    plugin's connections. A child that dropped inherited arrays sent DELETEs
    on the parent's socket, whose session then died of a protocol violation;
    one that read an array hung; one that exited through exit() removed the
    parent's cluster directory (an audit). A forked child now never writes
    on the parent's connections: reading fails by name, dropping is local."""
    got, text = harness.run_job(_FORK_JOB, harness.causeway_env(), timeout=300)
    assert got["drop_exit"] == 0, text[-4000:]
    assert got["read"][0] == "error" and "FAILED_PRECONDITION" in got["read"][1] and \
        "a child made by fork() cannot use it" in got["read"][1], got["read"]
    assert got["dir_kept"], text[-4000:]
    assert got["after"] == 44.0, text[-4000:]


def test_unusable_tmpdir_is_named():
    """The embedded cluster's directory goes in TMPDIR: one that does not
    exist fails the start with an error that names it (it said only 'No such
    file or directory')."""
    env = harness.causeway_env()
    env["TMPDIR"] = "/nonexistent-cw-tmpdir"
    out = subprocess.run([harness.PYTHON, "-c", "import jax; jax.devices()"], env=env,
                         cwd=str(harness.ROOT), capture_output=True, text=True, timeout=120)
    text = out.stdout + out.stderr
    assert out.returncode != 0, text[-4000:]
    assert "cannot create a temporary directory in /nonexistent-cw-tmpdir (TMPDIR): No such " \
        "file or directory" in text, text[-4000:]


def test_dead_clusters_directories_are_swept(tmp_path):
    """A job killed outright leaves its embedded cluster's directory: its logs
    and its dead token (36 of them piled up in this machine's /tmp by
    session 38). The next embedded cluster of the user in the same TMPDIR
    removes those: a causeway-XXXXXX directory with a token, no live
    controller socket, untouched for 10 minutes. Not a live cluster's, not
    one still starting, not one kept (CAUSEWAY_KEEP_TMP), not one without a
    token (a failed start's logs)."""
    def make(name, age_s, token=True, keep=False, live=False):
        d = tmp_path / name
        d.mkdir(mode=0o700)
        (d / "controller.log").write_text("causeway-controller listening\n")
        if token:
            (d / "token").write_text("dead\n")
        if keep:
            (d / "KEEP").write_text("")
        srv = None
        if live:
            srv = socket.socket(socket.AF_UNIX)
            srv.bind(str(d / "controller.sock"))
            srv.listen(1)
        t = time.time() - age_s
        os.utime(d, (t, t))  # last: making the files touched it
        return d, srv

    dead, _ = make("causeway-dead01", 1200)
    young, _ = make("causeway-young1", 10)
    kept, _ = make("causeway-kept01", 1200, keep=True)
    failed, _ = make("causeway-fail01", 1200, token=False)
    live, srv = make("causeway-live01", 1200, live=True)
    try:
        env = harness.causeway_env()
        env["TMPDIR"] = str(tmp_path)
        out = subprocess.run([harness.PYTHON, "-c", "import jax; print(len(jax.devices()))"],
                             env=env, cwd=str(harness.ROOT), capture_output=True, text=True,
                             timeout=300)
        assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
    finally:
        srv.close()
    assert not dead.exists()
    for d in (young, kept, failed, live):
        assert d.exists(), d
    # The job's own directory went at its exit, as before.
    left = sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("causeway-"))
    assert left == ["causeway-fail01", "causeway-kept01", "causeway-live01", "causeway-young1"], \
        left


def test_forked_child_does_not_keep_a_killed_parents_cluster():
    """The embedded daemons end when the pipe they watch closes. A forked
    child inherited its write end, so a job killed with SIGKILL while a child
    it forked ran left its cluster running as long as the child did. The
    plugin closes the child's copy at the fork."""
    p = subprocess.run([harness.PYTHON, "-c", _FORK_JOB, "kill"], env=harness.causeway_env(),
                       cwd=str(harness.ROOT), capture_output=True, text=True, timeout=300)
    text = p.stdout + p.stderr
    assert p.returncode == -signal.SIGKILL, text[-4000:]
    pids = json.loads([ln for ln in p.stdout.splitlines() if ln.startswith("PIDS ")][-1][5:])
    gone = harness.wait_until(lambda: not harness.proc_alive(pids["controller"]), DEADLINE_S)
    sleeping = harness.proc_alive(pids["sleeper"])
    for pid in pids.values():
        if harness.proc_alive(pid):
            os.kill(pid, signal.SIGKILL)
    assert sleeping, "the forked child was to outlive the job"
    assert gone, "the embedded cluster outlived its killed job while a forked child ran"
