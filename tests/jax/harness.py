"""Harness of the end-to-end suite: real JAX on causeway against stock CPU JAX.

Choice: every JAX computation runs in a *runner subprocess* (runner.py), never in
the pytest process, and the reference comes from a second runner that is stock
JAX and nothing else.

- The reference runner has JAX_PLATFORMS=cpu and
  XLA_FLAGS=--xla_force_host_platform_device_count=8 (the embedded cluster's
  device count: 2 workers x 4). It disables JAX's plugin discovery before the
  first backend call, so libcauseway_pjrt.so is never even dlopened there
  (causeway_jax is installed in the same venv and would otherwise be
  registered), and reports its backend's platform_version to prove it.
- The target runner has JAX_PLATFORMS=causeway and loads the plugin through the
  causeway_jax entry point (CAUSEWAY_PJRT_LIBRARY, CAUSEWAY_BIN_DIR point at
  the build). XLA_FLAGS is removed there: the local workers inherit the
  environment and must run XLA's CPU plugin as configured by causeway.
- Both runners import the same checks.py and run the same function by name,
  so the reference is the same code on stock JAX, not a value written in a
  test. Results (numpy arrays, numbers, strings) come back pickled and are
  compared bit for bit: the workers run XLA's CPU PJRT plugin built from the
  same XLA as the pinned jaxlib, on the same machine, so compiled programs and
  their results are identical. A check that may differ says so with a
  tolerance and the reason at the call site.

Why not one process with JAX_PLATFORMS=causeway,cpu: the reference would share
the process (and its address space, its jit caches and its global config) with
the code under test, a plugin crash would take the reference with it, and a
test of process lifetime (SIGKILL of the client) is impossible in-process.
Subprocesses cost a JAX import each (about 2 s), so runners are long-lived:
one reference runner per session (one per x64 setting), one causeway runner
(one embedded cluster) per test module, restarted only if a check killed it.

Modes (CW_JAX_TARGET): "causeway" (default) runs the target on causeway;
"cpu" runs the target on stock CPU JAX too, with islands emulated as groups of
4 devices, to validate the checks and the harness themselves; tests that only
mean something on causeway (worker stats, process lifetime, failures) are
skipped in that mode. "proxy" runs the target through the IFRT proxy front:
each runner gets a causeway-proxy of its own on a private Unix socket, and its
stock JAX is the `proxy` backend (JAX_PLATFORMS=proxy, JAX_BACKEND_TARGET);
the runner's IFRT session is a causeway session whose embedded cluster (2
workers x 4 devices) the proxy starts. Tests that reach the plugin front's
own machinery (the runner's cluster children, in-process callbacks) say
so and are skipped there.
"""
from __future__ import annotations

import ctypes
import json
import os
import pathlib
import pickle
import re
import select
import shutil
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import threading
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
PYTHON = os.environ.get("CW_PYTHON") or sys.executable
TARGET = os.environ.get("CW_JAX_TARGET", "causeway")
NUM_WORKERS = 2
DEVICES_PER_WORKER = 4
NUM_DEVICES = NUM_WORKERS * DEVICES_PER_WORKER


def on_causeway() -> bool:
    """The target runs on causeway (either front)."""
    return TARGET in ("causeway", "proxy")


def on_proxy() -> bool:
    """The target is stock JAX's `proxy` backend in front of causeway-proxy."""
    return TARGET == "proxy"


requires_plugin_front = ("reaches the plugin front's own machinery (the runner's embedded "
                         "cluster, callbacks in the client process); the proxy front has "
                         "its own suite in tests/proxy")


# ---- Locations ---------------------------------------------------------------

def pjrt_library() -> str:
    return os.environ.get("CAUSEWAY_PJRT_LIBRARY") or str(
        ROOT / "build" / "release" / "lib" / "libcauseway_pjrt.so")


def bin_dir() -> str:
    return os.environ.get("CAUSEWAY_BIN_DIR") or str(ROOT / "build" / "release" / "bin")


def client_library() -> str:
    env = os.environ.get("CW_CLIENT_LIB")
    if env:
        return env
    lib = pathlib.Path(pjrt_library()).parent / "libcauseway_client.so"
    return str(lib)


_cpu_plugin = None


def cpu_plugin() -> str:
    """XLA's CPU PJRT plugin the workers load (CAUSEWAY_PJRT_PLUGIN)."""
    global _cpu_plugin
    if _cpu_plugin is None:
        _cpu_plugin = os.environ.get("CAUSEWAY_PJRT_PLUGIN") or subprocess.check_output(
            [PYTHON, "-c", "import lammps_jax_pjrt_cpu as m; print(m.PLUGIN_PATH)"],
            text=True).strip()
    return _cpu_plugin


def missing_build() -> str | None:
    """Why causeway cannot run here, or None."""
    needed = [pjrt_library(), os.path.join(bin_dir(), "causeway-controller"),
              os.path.join(bin_dir(), "causeway-worker")]
    if on_proxy():
        needed.append(os.path.join(bin_dir(), "causeway-proxy"))
    for path in needed:
        if not os.path.exists(path):
            return f"{path} not found: build the release tree (cmake --build build/release)"
    return None


# ---- Environments --------------------------------------------------------------

_STRIP = ("JAX_PLATFORMS", "JAX_PLATFORM_NAME", "XLA_FLAGS", "CAUSEWAY_CONTROLLER",
          "PJRT_NAMES_AND_LIBRARY_PATHS", "JAX_ENABLE_X64", "CW_EMULATE_ISLAND_SIZE",
          "CW_RUNNER_NO_PLUGINS")


def _base_env(x64: bool) -> dict:
    env = {k: v for k, v in os.environ.items() if k not in _STRIP}
    # ROOT/python: this tree's causeway_jax, whichever tree the venv's
    # editable install points at.
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), str(ROOT / "python"),
                                         env.get("PYTHONPATH", "")])
    env["PYTHONUNBUFFERED"] = "1"
    env["TF_CPP_MIN_LOG_LEVEL"] = env.get("TF_CPP_MIN_LOG_LEVEL", "1")
    if x64:
        env["JAX_ENABLE_X64"] = "1"
    return env


def stock_env(x64: bool = False) -> dict:
    """Stock CPU JAX with the embedded cluster's device count."""
    env = _base_env(x64)
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = f"--xla_force_host_platform_device_count={NUM_DEVICES}"
    env["CW_EMULATE_ISLAND_SIZE"] = str(DEVICES_PER_WORKER)
    env["CW_RUNNER_NO_PLUGINS"] = "1"
    return env


def causeway_env(x64: bool = False, controller: str | None = None) -> dict:
    """JAX on causeway: the embedded cluster, or `controller` if given."""
    env = _base_env(x64)
    env["JAX_PLATFORMS"] = "causeway"
    env["CAUSEWAY_PJRT_LIBRARY"] = pjrt_library()
    env["CAUSEWAY_BIN_DIR"] = bin_dir()
    env["CAUSEWAY_PJRT_PLUGIN"] = cpu_plugin()
    env["CAUSEWAY_LOCAL_WORKERS"] = str(NUM_WORKERS)
    env["CAUSEWAY_LOCAL_DEVICES"] = str(DEVICES_PER_WORKER)
    # The embedded cluster's compile cache on disk: the test run's own, not the user's.
    env.setdefault("CAUSEWAY_COMPILE_CACHE_DIR", os.path.join(log_dir(), "compile-cache"))
    if controller:
        env["CAUSEWAY_CONTROLLER"] = controller
    return env


def null_plugin() -> str:
    """The null PJRT plugin (docs/nullplugin.md), built beside libcauseway_pjrt.so."""
    return str(pathlib.Path(pjrt_library()).parent / "libcw_nullplugin.so")


def null_stock_env() -> dict:
    """JAX in-process on the null plugin: JAX's own dispatch before a device
    that costs nothing. XLA's CPU plugin compiles, only to tell the shapes."""
    env = stock_env()
    del env["XLA_FLAGS"]  # the null plugin's devices instead
    env["JAX_PLATFORMS"] = "cwnull"
    env["PJRT_NAMES_AND_LIBRARY_PATHS"] = f"cwnull:{null_plugin()}"
    env["CW_NULL_COMPILER"] = cpu_plugin()
    env["CW_NULL_DEVICES"] = str(NUM_DEVICES)
    return env


def null_causeway_env() -> dict:
    """JAX on causeway whose workers run the null plugin (the embedded
    cluster's workers inherit CW_NULL_COMPILER)."""
    env = causeway_env()
    env["CAUSEWAY_PJRT_PLUGIN"] = null_plugin()
    env["CW_NULL_COMPILER"] = cpu_plugin()
    return env


def proxy_env(x64: bool = False) -> dict:
    """Stock JAX's `proxy` backend; Runner.start puts a causeway-proxy behind it."""
    env = _base_env(x64)
    env["JAX_PLATFORMS"] = "proxy"
    env["IFRT_PROXY_USE_INSECURE_GRPC_CREDENTIALS"] = "true"
    env["CW_PROXY_FRONT"] = "1"
    return env


def target_env(x64: bool = False) -> dict:
    if on_proxy():
        return proxy_env(x64)
    return causeway_env(x64) if on_causeway() else stock_env(x64)


def _die_with_parent() -> None:
    """In a child before exec: SIGTERM when the test process goes, so a
    killed pytest leaves no proxy behind."""
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG


class ProxyProcess:
    """A causeway-proxy with environment `env`, listening on `listen` (host:port
    or a Unix socket path), stderr appended to `log_path`. `address` is its
    gRPC target (host:port, or unix:PATH). `new_session`: a session (and, with
    Linux's autogroup scheduling, a CPU share) of its own, as a daemon has;
    bench/proxy_bench.py keeps it in the caller's to compare with earlier runs."""

    def __init__(self, env: dict, listen: str, log_path: str, start_timeout: float = 30.0,
                 new_session: bool = True):
        self.log_path = log_path
        with open(log_path, "ab") as log:
            self.proc = subprocess.Popen(
                [os.path.join(bin_dir(), "causeway-proxy"), "--listen", listen], env=env,
                stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=log,
                start_new_session=new_session, preexec_fn=_die_with_parent)
        # The address line, then stdout is closed: nothing more is read from it.
        line = b""
        ready, _, _ = select.select([self.proc.stdout], [], [], start_timeout)
        if ready:
            line = self.proc.stdout.readline()
        self.proc.stdout.close()
        if not line.startswith(b"causeway-proxy listening on "):
            self.stop()
            raise RunnerDied(f"causeway-proxy did not start in {start_timeout:.0f} s: {line!r}\n"
                             f"{self.logs()[-4000:]}")
        self.address = line.split()[-1].decode()
        if "/" in self.address:
            self.address = "unix:" + self.address

    def logs(self) -> str:
        return pathlib.Path(self.log_path).read_text(errors="replace")

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode


class ProxyFront(ProxyProcess):
    """causeway-proxy on a Unix socket only this user may reach; its sessions
    start embedded clusters as the plugin front's runner would."""

    def __init__(self, log_path: str):
        env = {k: v for k, v in causeway_env().items() if not k.startswith("JAX_")}
        env["CAUSEWAY_PROXY_PJRT_LIBRARY"] = pjrt_library()
        self.dir = tempfile.mkdtemp(prefix="proxy-", dir=log_dir())
        try:
            super().__init__(env, os.path.join(self.dir, "ifrt.sock"), log_path)
        except BaseException:
            shutil.rmtree(self.dir, ignore_errors=True)
            raise
        self.target = "grpc://" + self.address

    def stop(self) -> int:
        rc = super().stop()
        shutil.rmtree(self.dir, ignore_errors=True)
        return rc


def run_job(code: str, env: dict, *args: str, timeout: float = 300.0):
    """Runs `code` in a fresh Python process (`python -c code args...`) and
    returns the JSON of its last line starting "RESULT "; fails the test with
    the output's tail when the process fails."""
    out = subprocess.run([PYTHON, "-c", code, *args], env=env, cwd=str(ROOT),
                         capture_output=True, text=True, timeout=timeout)
    text = out.stdout + out.stderr
    assert out.returncode == 0, f"exited {out.returncode}:\n{text[-6000:]}"
    lines = [ln for ln in out.stdout.splitlines() if ln.startswith("RESULT ")]
    assert lines, f"no RESULT line:\n{text[-6000:]}"
    return json.loads(lines[-1][len("RESULT "):]), text


_log_dir = None


def log_dir() -> str:
    """Where runner logs go: $CW_JAX_LOG_DIR, or a temporary directory that
    conftest removes when the session passes (kept, and named, when it fails)."""
    global _log_dir
    if _log_dir is None:
        _log_dir = os.environ.get("CW_JAX_LOG_DIR") or tempfile.mkdtemp(prefix="cw-jax-logs-")
        os.makedirs(_log_dir, exist_ok=True)
    return _log_dir


# ---- Runner subprocesses ------------------------------------------------------

class RunnerDied(AssertionError):
    pass


class RunnerHung(AssertionError):
    pass


class CheckFailed(AssertionError):
    """The check raised inside the runner."""

    def __init__(self, type_name: str, message: str, tb: str):
        self.type_name = type_name
        self.message = message
        self.tb = tb
        super().__init__(f"{type_name}: {message}\n--- runner traceback ---\n{tb}")


def _write_frame(fd: int, obj) -> None:
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    data = struct.pack("<Q", len(data)) + data
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def _read_exact(fd: int, n: int, deadline: float) -> bytes | None:
    chunks, got = [], 0
    while got < n:
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError
        r, _, _ = select.select([fd], [], [], left)
        if not r:
            raise TimeoutError
        chunk = os.read(fd, min(n - got, 1 << 20))
        if not chunk:
            return None
        chunks.append(chunk)
        got += len(chunk)
    return b"".join(chunks)


class Runner:
    """A long-lived `python runner.py` that runs checks.py functions by name.

    Requests and replies travel on a private pipe pair (not stdout, which
    jax.debug.print and XLA may write to); the runner's stdout and stderr go
    to a log file whose tail is attached to every failure.
    """

    def __init__(self, name: str, env: dict, start_timeout: float = 180.0):
        self.name = name
        self.env = env
        self.start_timeout = start_timeout
        self.proc: subprocess.Popen | None = None
        self.restarts = 0
        self.info: dict | None = None
        self._ready = False
        self._pending: str | None = None
        self.proxy: ProxyFront | None = None
        fd, self.log_path = tempfile.mkstemp(prefix=f"{name}-", suffix=".log", dir=log_dir())
        os.close(fd)
        self.start()

    # Starting is asynchronous: the first call waits for the ready message, so
    # several runners start (and import JAX) in parallel.
    def start(self) -> None:
        req_r, req_w = os.pipe()
        rep_r, rep_w = os.pipe()
        log = open(self.log_path, "ab")
        log.write(f"\n=== {self.name}: start {time.strftime('%X')} ===\n".encode())
        log.flush()
        env = self.env
        if env.get("CW_PROXY_FRONT"):
            if self.proxy is not None and self.proxy.proc.poll() is not None:
                self.proxy.stop()  # it died: its directory goes
                self.proxy = None
            if self.proxy is None:
                try:
                    self.proxy = ProxyFront(self.log_path)
                except BaseException:
                    for fd in (req_r, req_w, rep_r, rep_w):
                        os.close(fd)
                    log.close()
                    raise
            env = dict(env, JAX_BACKEND_TARGET=self.proxy.target)
        self.proc = subprocess.Popen(
            [PYTHON, str(HERE / "runner.py"), str(req_r), str(rep_w)],
            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            pass_fds=(req_r, rep_w), cwd=str(ROOT), start_new_session=True)
        log.close()
        os.close(req_r)
        os.close(rep_w)
        self._req, self._rep = req_w, rep_r
        self._ready = False
        self._start_deadline = time.monotonic() + self.start_timeout

    @property
    def pid(self) -> int:
        return self.proc.pid

    @property
    def cluster_pid(self) -> int:
        """The process whose children are this runner's embedded cluster: the
        runner, or its causeway-proxy on the proxy front."""
        return self.proxy.proc.pid if self.proxy is not None else self.proc.pid

    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def log_tail(self, n: int = 6000) -> str:
        try:
            with open(self.log_path, "rb") as f:
                f.seek(0, 2)
                size = f.tell()
                f.seek(max(0, size - n))
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def log_text(self) -> str:
        with open(self.log_path, "rb") as f:
            return f.read().decode("utf-8", "replace")

    def _died(self, what: str) -> RunnerDied:
        try:
            self.proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            pass
        rc = self.proc.returncode
        how = (f"killed by signal {-rc}" if rc is not None and rc < 0 else f"exit status {rc}")
        return RunnerDied(f"runner {self.name} (pid {self.pid}) died during {what}: {how}\n"
                          f"--- runner log tail ({self.log_path}) ---\n{self.log_tail()}")

    def _recv(self, what: str, deadline: float):
        try:
            head = _read_exact(self._rep, 8, deadline)
            if head is None:
                raise self._died(what)
            (n,) = struct.unpack("<Q", head)
            body = _read_exact(self._rep, n, deadline)
            if body is None:
                raise self._died(what)
        except TimeoutError:
            tail = self.log_tail()
            self.kill()
            raise RunnerHung(f"runner {self.name}: {what} did not answer in time (killed it)\n"
                             f"--- runner log tail ({self.log_path}) ---\n{tail}") from None
        return pickle.loads(body)

    def wait_ready(self) -> dict:
        if not self._ready:
            msg = self._recv("start-up", self._start_deadline)
            if msg[0] != "ready":
                _, type_name, message, tb = msg
                raise CheckFailed(type_name, f"runner {self.name} start-up: {message}", tb)
            self.info = msg[1]
            self._ready = True
        return self.info

    def submit(self, check: str, **kwargs) -> None:
        """Sends checks.<check>(**kwargs) to the runner; result() collects it."""
        if not self.alive():
            self.restarts += 1
            self.start()
        self.wait_ready()
        try:
            _write_frame(self._req, (check, kwargs))
        except BrokenPipeError:
            raise self._died(f"sending {check}") from None
        self._pending = check

    def result(self, timeout: float = 300.0):
        check, self._pending = self._pending, None
        msg = self._recv(check, time.monotonic() + timeout)
        if msg[0] == "ok":
            return msg[1]
        _, type_name, message, tb = msg
        raise CheckFailed(type_name, message, tb)

    def reply_waiting(self, timeout: float = 0.0) -> bool:
        """True when the submitted check has answered (or answers within timeout);
        result() then returns at once."""
        ready, _, _ = select.select([self._rep], [], [], timeout)
        return bool(ready)

    def call(self, check: str, timeout: float = 300.0, **kwargs):
        """Runs checks.<check>(**kwargs) in the runner; returns its result."""
        self.submit(check, **kwargs)
        return self.result(timeout)

    def try_call(self, check: str, timeout: float = 300.0, **kwargs):
        """(result, None) or (None, CheckFailed)."""
        try:
            return self.call(check, timeout=timeout, **kwargs), None
        except CheckFailed as e:
            return None, e

    def kill(self, sig: int = signal.SIGKILL) -> None:
        if self.proc and self.proc.poll() is None:
            try:
                os.kill(self.proc.pid, sig)
            except ProcessLookupError:
                pass
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                pass

    def close(self, timeout: float = 30.0) -> int | None:
        """Asks the runner to exit (normal interpreter exit); kills it if it lingers."""
        if self.proc and self.proc.poll() is None:
            try:
                _write_frame(self._req, None)
            except OSError:
                pass
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                self.kill()
        for fd in (self._req, self._rep):
            try:
                os.close(fd)
            except OSError:
                pass
        self._req = self._rep = -1
        if self.proxy is not None:
            self.proxy.stop()
        return self.proc.returncode if self.proc else None


def run_both(ref: Runner, target: Runner, check: str, timeout: float = 300.0, **kwargs):
    """Runs one check on the stock runner and the target runner concurrently.

    Returns (stock result, target result); both replies are always collected
    so both runners stay in step. A target failure is raised first.
    """
    __tracebackhide__ = True
    ref.submit(check, **kwargs)
    target.submit(check, **kwargs)
    errors = []
    want = got = None
    try:
        want = ref.result(timeout)
    except BaseException as e:  # noqa: BLE001
        errors.append(AssertionError(f"the STOCK JAX side of {check} failed (a test bug):\n{e}"))
    try:
        got = target.result(timeout)
    except BaseException as e:  # noqa: BLE001
        errors.insert(0, e)
    if errors:
        raise errors[0]
    return want, got


# ---- Comparison ------------------------------------------------------------------

def assert_same(ref, got, path: str = "result", tol: dict | None = None) -> None:
    """Bit-for-bit equality of two result trees (dtypes and shapes included).

    `tol` maps a path prefix to (rtol, atol, reason) for leaves that may
    legitimately differ; the reason is part of the failure message.
    """
    __tracebackhide__ = True
    import numpy as np

    def tol_for(p):
        for prefix, t in (tol or {}).items():
            if p.startswith(prefix):
                return t
        return None

    if isinstance(ref, dict):
        assert isinstance(got, dict), f"{path}: expected a dict, got {type(got).__name__}"
        assert sorted(map(str, ref)) == sorted(map(str, got)), \
            f"{path}: keys differ: stock {sorted(map(str, ref))} causeway {sorted(map(str, got))}"
        for k in ref:
            assert_same(ref[k], got[k], f"{path}[{k!r}]", tol)
        return
    if isinstance(ref, (list, tuple)):
        assert isinstance(got, (list, tuple)) and len(ref) == len(got), \
            f"{path}: expected a sequence of {len(ref)}, got {got!r:.200}"
        for i, (a, b) in enumerate(zip(ref, got)):
            assert_same(a, b, f"{path}[{i}]", tol)
        return
    if isinstance(ref, np.ndarray) or isinstance(ref, np.generic):
        ref = np.asarray(ref)
        assert isinstance(got, (np.ndarray, np.generic)), \
            f"{path}: expected an array, got {type(got).__name__}"
        got = np.asarray(got)
        assert ref.dtype == got.dtype, f"{path}: dtype stock {ref.dtype} causeway {got.dtype}"
        assert ref.shape == got.shape, f"{path}: shape stock {ref.shape} causeway {got.shape}"
        t = tol_for(path)
        if t is not None:
            rtol, atol, reason = t
            ok = np.allclose(got.astype(np.complex128 if got.dtype.kind == "c" else np.float64),
                             ref.astype(np.complex128 if ref.dtype.kind == "c" else np.float64),
                             rtol=rtol, atol=atol, equal_nan=True)
            assert ok, (f"{path}: differs beyond rtol={rtol} atol={atol} ({reason})\n"
                        f"stock:    {ref!r:.600}\ncauseway: {got!r:.600}")
            return
        if ref.tobytes() != got.tobytes():
            diff = ""
            try:
                bad = np.argwhere(ref.reshape(-1).view(np.uint8) != got.reshape(-1).view(np.uint8))
                diff = f" (first differing byte at {int(bad[0][0]) if len(bad) else '?'})"
            except (ValueError, TypeError):
                pass
            raise AssertionError(f"{path}: not bit-identical to stock JAX{diff}\n"
                                 f"stock:    {ref!r:.600}\ncauseway: {got!r:.600}")
        return
    assert ref == got, f"{path}: stock {ref!r:.300} causeway {got!r:.300}"


# ---- Processes (/proc, no psutil) -------------------------------------------------

def proc_state(pid: int) -> str | None:
    """The /proc state letter, or None if the pid is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            data = f.read()
    except OSError:
        return None
    return data[data.rindex(")") + 2]


def proc_alive(pid: int) -> bool:
    s = proc_state(pid)
    return s is not None and s not in ("Z", "X")


def proc_cmdline(pid: int) -> list[str]:
    try:
        with open(f"/proc/{pid}/cmdline", "rb") as f:
            return [a.decode("utf-8", "replace") for a in f.read().split(b"\0") if a]
    except OSError:
        return []


def children_of(pid: int) -> list[int]:
    out = []
    for name in os.listdir("/proc"):
        if not name.isdigit():
            continue
        try:
            with open(f"/proc/{name}/stat") as f:
                data = f.read()
        except OSError:
            continue
        fields = data[data.rindex(")") + 2:].split()
        if int(fields[1]) == pid and fields[0] not in ("Z", "X"):
            out.append(int(name))
    return sorted(out)


def cluster_children(pid: int) -> dict:
    """The embedded cluster a client process started: {name: (pid, listen address)}."""
    out = {}
    for child in children_of(pid):
        argv = proc_cmdline(child)
        if not argv or not os.path.basename(argv[0]).startswith("causeway-"):
            continue
        opts = {argv[i]: argv[i + 1] for i in range(1, len(argv) - 1) if argv[i].startswith("--")}
        name = opts.get("--name") or os.path.basename(argv[0]).replace("causeway-", "")
        out[name] = (child, opts.get("--listen"))
    return out


def wait_until(pred, timeout: float, interval: float = 0.05):
    deadline = time.monotonic() + timeout
    while True:
        v = pred()
        if v or time.monotonic() >= deadline:
            return v
        time.sleep(interval)


# ---- Raw frames, for tests that speak the wire protocol by hand -------------------

# magic, version, type, flags, payload length, request id, bulk length (docs/protocol.md)
FRAME_HDR = struct.Struct("<IHHIIQQ")
FRAME_MAGIC = 0x59415743


def pb_varint(v: int) -> bytes:
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        out.append(b | (0x80 if v else 0))
        if not v:
            return bytes(out)


def pb_field(num: int, v) -> bytes:
    """A varint (int) or length-delimited (bytes) protobuf field."""
    if isinstance(v, int):
        return pb_varint(num << 3) + pb_varint(v)
    return pb_varint((num << 3) | 2) + pb_varint(len(v)) + v


def frame(mtype: int, rid: int, payload: bytes, flags: int = 0) -> bytes:
    return FRAME_HDR.pack(FRAME_MAGIC, 1, mtype, flags, len(payload), rid, 0) + payload


# ---- STATS through the C client library (ctypes) ---------------------------------

def _pb_fields(data: bytes) -> list:
    """(field number, wire type, value) of a protobuf message (varint/len only)."""
    out, i = [], 0

    def varint():
        nonlocal i
        shift = val = 0
        while True:
            b = data[i]
            i += 1
            val |= (b & 0x7F) << shift
            if b < 0x80:
                return val
            shift += 7

    while i < len(data):
        key = varint()
        field, wt = key >> 3, key & 7
        if wt == 0:
            out.append((field, wt, varint()))
        elif wt == 2:
            n = varint()
            out.append((field, wt, data[i:i + n]))
            i += n
        elif wt == 1:
            out.append((field, wt, data[i:i + 8]))
            i += 8
        elif wt == 5:
            out.append((field, wt, data[i:i + 4]))
            i += 4
        else:
            raise ValueError(f"wire type {wt}")
    return out


_STATS_FIELDS = {1: "buffers", 2: "buffer_bytes", 3: "executables", 4: "launches",
                 5: "uploads", 6: "downloads", 7: "sessions", 8: "connections",
                 10: "session_buffers", 11: "errors", 12: "workers", 13: "compiles",
                 14: "cache_hits", 15: "cache_misses", 16: "cache_bytes", 17: "workers_dead",
                 31: "sched_stamps_dropped", 32: "alloc_queue",
                 80: "disk_hits", 81: "disk_misses", 82: "disk_bytes", 83: "disk_errors",
                 84: "compiles_sent", 85: "compiles_queued", 86: "compiles_dropped"}
# Health (tests/cluster/test_health.py).
_STATS_FIELDS.update({50: "workers_replaced", 51: "workers_timed_out", 52: "heartbeats",
                      53: "exes_reloaded"})

_clib = None


def _client_lib():
    global _clib
    if _clib is None:
        lib = ctypes.CDLL(client_library())
        vp = ctypes.c_void_p
        lib.cw_client_connect.argtypes = [ctypes.c_char_p, vp, ctypes.POINTER(vp)]
        lib.cw_client_connect.restype = vp
        lib.cw_client_release.argtypes = [vp]
        lib.cw_client_release.restype = None
        lib.cw_client_stats.argtypes = [vp, ctypes.POINTER(vp)]
        lib.cw_client_stats.restype = vp
        lib.cw_status_code.argtypes = [vp]
        lib.cw_status_code.restype = ctypes.c_int
        lib.cw_status_message.argtypes = [vp]
        lib.cw_status_message.restype = ctypes.c_char_p
        lib.cw_status_free.argtypes = [vp]
        lib.cw_status_free.restype = None
        # protobuf-c, a dependency of the client library (dlsym searches it).
        lib.protobuf_c_message_get_packed_size.argtypes = [vp]
        lib.protobuf_c_message_get_packed_size.restype = ctypes.c_size_t
        lib.protobuf_c_message_pack.argtypes = [vp, ctypes.c_char_p]
        lib.protobuf_c_message_pack.restype = ctypes.c_size_t
        lib.protobuf_c_message_free_unpacked.argtypes = [vp, vp]
        lib.protobuf_c_message_free_unpacked.restype = None
        _clib = lib
    return _clib


# What AddressSanitizer, LeakSanitizer, UBSan and ThreadSanitizer (a warning)
# print in a daemon's log when they find something (HandCluster.stop, chaos).
SANITIZER_REPORT = re.compile(r"ERROR: (Address|Leak|Thread|Memory)Sanitizer|runtime error: |"
                              r"UndefinedBehaviorSanitizer|WARNING: ThreadSanitizer")


def stats(address: str, token: str | None = None) -> dict:
    """STATS of a worker or controller, through libcauseway_client's cw_client_stats.

    `token`: the cluster's token, presented through CAUSEWAY_TOKEN (the client
    library's default) for the duration of the call. None: for a Unix socket
    of an embedded cluster, the token file beside it (the cluster's own, 0600).

    The reply struct is packed back to protobuf bytes with protobuf-c and
    decoded here, so no C struct layout is mirrored in Python. Returns the
    numeric fields by name and "peers": {peer: (bytes_in, bytes_out)}.
    """
    lib = _client_lib()
    conn = ctypes.c_void_p()

    def check(st):
        if st:
            code = lib.cw_status_code(st)
            msg = lib.cw_status_message(st).decode("utf-8", "replace")
            lib.cw_status_free(st)
            raise RuntimeError(f"STATS {address}: code {code}: {msg}")

    if token is None and "/" in address:
        try:
            with open(os.path.join(os.path.dirname(address), "token")) as f:
                token = f.readline().strip()
        except OSError:
            pass
    saved = os.environ.get("CAUSEWAY_TOKEN")
    if token is not None:
        os.environ["CAUSEWAY_TOKEN"] = token
    try:
        check(lib.cw_client_connect(address.encode(), None, ctypes.byref(conn)))
    finally:
        if token is not None:
            if saved is None:
                del os.environ["CAUSEWAY_TOKEN"]
            else:
                os.environ["CAUSEWAY_TOKEN"] = saved
    try:
        msg = ctypes.c_void_p()
        check(lib.cw_client_stats(conn, ctypes.byref(msg)))
        size = lib.protobuf_c_message_get_packed_size(msg)
        buf = ctypes.create_string_buffer(max(size, 1))
        lib.protobuf_c_message_pack(msg, buf)
        lib.protobuf_c_message_free_unpacked(msg, None)
        data = buf.raw[:size]
    finally:
        lib.cw_client_release(conn)
    out = {name: 0 for name in _STATS_FIELDS.values()}
    out["peers"] = {}
    out["raw"] = data  # the packed Stats, for fields not decoded here
    for field, wt, val in _pb_fields(data):
        if field == 9 and wt == 2:
            peer, bin_, bout = "", 0, 0
            for f2, _, v2 in _pb_fields(val):
                if f2 == 1:
                    peer = v2.decode("utf-8", "replace")
                elif f2 == 2:
                    bin_ = v2
                elif f2 == 3:
                    bout = v2
            a, b = out["peers"].get(peer, (0, 0))
            out["peers"][peer] = (a + bin_, b + bout)
        elif field in _STATS_FIELDS and wt == 0:
            out[_STATS_FIELDS[field]] = val
    return out


# ---- A cluster started by hand ------------------------------------------------------

_HANDED_PORTS: set[int] = set()


def free_tcp_port() -> int:
    """A loopback port nothing listens on, never one this process handed out
    before: the kernel may give a port just closed again, and two daemons
    told to listen there (a hand cluster's workers, spawned before either
    binds) then collide ('address already in use', seen in a CI run)."""
    for _ in range(1000):
        with socket.socket() as s:
            s.bind(("127.0.0.1", 0))
            port = s.getsockname()[1]
        if port not in _HANDED_PORTS:
            _HANDED_PORTS.add(port)
            return port
    raise AssertionError("no loopback port left that this process did not hand out already")


def end_processes(procs, wait_s: float = 30) -> None:
    """SIGTERM every process still running, then wait for each; one that
    outlives `wait_s` is killed (the clusters tests build by hand)."""
    for p in procs:
        if p.poll() is None:
            p.terminate()
    for p in procs:
        try:
            p.wait(wait_s)
        except subprocess.TimeoutExpired:
            p.kill()


def ip(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    """`ip ARGS` (iproute2), its output captured: tests that make network namespaces."""
    return subprocess.run(["ip", *args], capture_output=True, text=True, timeout=30,
                          check=check)


def netns_missing(bridge: bool = False) -> str | None:
    """Why this process cannot make network namespaces (with a bridge in one,
    when asked), or None: the reason a namespace test is skipped with."""
    if os.geteuid() != 0:
        return "needs root to make network namespaces"
    if not shutil.which("ip"):
        return "needs `ip` (iproute2)"
    probe = f"cwprobe{os.getpid()}"
    if ip("netns", "add", probe, check=False).returncode != 0:
        return "this kernel or container cannot make network namespaces"
    try:
        if bridge:
            r = ip("-n", probe, "link", "add", "br0", "type", "bridge", check=False)
            if r.returncode != 0:
                return f"cannot make a bridge in a network namespace: {r.stderr.strip()}"
    finally:
        ip("netns", "del", probe, check=False)
    return None


class Environ:
    """os.environ with `extra` while a cluster starts (HandCluster copies it)
    and while the test process's own client library reads it (harness.stats)."""

    def __init__(self, extra: dict):
        self.extra = extra
        self.saved = {k: os.environ.get(k) for k in extra}

    def __enter__(self):
        os.environ.update(self.extra)
        return self

    def __exit__(self, *exc):
        for k, v in self.saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


class HandCluster:
    """causeway-controller plus workers started as separate real processes.

    Addresses are Unix sockets in a private directory; every process logs to
    a file there. stop() terminates whatever is still running.
    """

    def __init__(self, workers: int = NUM_WORKERS, devices: int = DEVICES_PER_WORKER,
                 tcp: bool = False, token: str | None = None, token_via: str = "file",
                 controller_args: tuple = (), controller_env: dict | None = None,
                 worker_args: tuple = (), controller_after_s: float | None = None,
                 plugin: str | None = None):
        """`token`: every daemon requires it, given through a 0600 token file
        in the cluster's directory (token_via="file", CAUSEWAY_TOKEN_FILE) or the
        environment (token_via="env", CAUSEWAY_TOKEN); never on a command line.
        `controller_args` / `controller_env`: extra flags and environment of
        the controller; `worker_args`: extra flags of every worker;
        `controller_after_s`: start the workers first and the controller this
        many seconds after they listen (daemons may start in any order);
        `plugin`: the workers' PJRT plugin (default XLA's CPU plugin; the null
        plugin's workers compile with CW_NULL_COMPILER, set here)."""
        self.dir = tempfile.mkdtemp(prefix="cw-hand-")
        self.token = token
        self.tcp = tcp
        self.devices = devices
        self.controller_args = tuple(controller_args)
        self.controller_env = dict(controller_env or {})
        self.worker_args = tuple(worker_args)
        if tcp:
            self.controller = f"127.0.0.1:{free_tcp_port()}"
        else:
            self.controller = os.path.join(self.dir, "controller.sock")
        self.procs: dict[str, subprocess.Popen] = {}
        self.addresses: dict[str, str] = {}
        env = {k: v for k, v in os.environ.items()
               if k not in _STRIP and k not in ("CAUSEWAY_TOKEN", "CAUSEWAY_TOKEN_FILE")}
        if token is not None:
            env.update(self.token_env(token, token_via))
        self.plugin = plugin or cpu_plugin()
        if self.plugin == null_plugin():
            env["CW_NULL_COMPILER"] = cpu_plugin()
        self.env = env
        if controller_after_s is None:
            self.start_controller()
        for i in range(workers):
            name = f"hand-worker-{i}"
            addr = (f"127.0.0.1:{free_tcp_port()}" if tcp
                    else os.path.join(self.dir, f"{name}.sock"))
            self.addresses[name] = addr
            self._spawn(name, [os.path.join(bin_dir(), "causeway-worker"),
                               "--plugin", self.plugin, "--devices", str(devices),
                               "--listen", addr, "--name", name,
                               "--controller", self.controller, *self.worker_args], env)
        for name, addr in self.addresses.items():
            self._wait_listening(name, addr)
        if controller_after_s is not None:
            time.sleep(controller_after_s)
            self.start_controller()
        # Registered with the controller?
        ok = wait_until(lambda: self._registered() >= workers, 30)
        if not ok:
            logs = self.logs()
            self.stop()
            raise AssertionError(f"hand cluster: {workers} workers did not register\n{logs}")

    def token_env(self, token: str, via: str = "file") -> dict:
        """Daemon environment that presents `token` (a fresh 0600 file for "file")."""
        if via == "env":
            return {"CAUSEWAY_TOKEN": token}
        fd, path = tempfile.mkstemp(prefix="token-", dir=self.dir)
        os.write(fd, token.encode() + b"\n")
        os.close(fd)  # mkstemp makes it 0600
        return {"CAUSEWAY_TOKEN_FILE": path}

    def start_controller(self) -> None:
        """(Re)starts the controller on its address (after it was killed)."""
        self._spawn("controller", [os.path.join(bin_dir(), "causeway-controller"),
                                   "--listen", self.controller, *self.controller_args],
                    {**self.env, **self.controller_env})
        self._wait_listening("controller", self.controller)

    def start_worker(self, name: str, addr: str | None = None, key: str | None = None,
                     devices: int | None = None, env: dict | None = None,
                     wait: bool = True, wrap: tuple = ()) -> str:
        """Starts a worker called `name` (a replacement when one had that name),
        listening on `addr` (default: a fresh address), with `devices` (default:
        the cluster's) and environment `env` over the cluster's; its process is
        procs[key or name], started through the command `wrap` when given (one
        that ends by exec'ing its arguments). Returns the address (once it
        listens, with `wait`)."""
        if addr is None:
            addr = (f"127.0.0.1:{free_tcp_port()}" if self.tcp
                    else os.path.join(self.dir, f"{name}-{len(self.procs)}.sock"))
        key = key or name
        self.addresses[key] = addr
        self._spawn(key, [*wrap, os.path.join(bin_dir(), "causeway-worker"),
                          "--plugin", self.plugin, "--devices",
                          str(self.devices if devices is None else devices),
                          "--listen", addr, "--name", name,
                          "--controller", self.controller, *self.worker_args],
                    {**self.env, **(env or {})})
        if wait:
            self._wait_listening(key, addr)
        return addr

    def log(self, name: str) -> str:
        try:
            with open(os.path.join(self.dir, f"{name}.log"), "rb") as f:
                return f.read().decode("utf-8", "replace")
        except OSError:
            return ""

    def _registered(self) -> int:
        try:
            return stats(self.controller, self.token)["workers"]
        except Exception:  # noqa: BLE001 - not up yet
            return 0

    def _spawn(self, name: str, argv: list[str], env: dict) -> None:
        log = open(os.path.join(self.dir, f"{name}.log"), "ab")
        self.procs[name] = subprocess.Popen(argv, env=env, stdin=subprocess.DEVNULL,
                                            stdout=log, stderr=subprocess.STDOUT,
                                            start_new_session=True)
        log.close()

    def _wait_listening(self, name: str, addr: str) -> None:
        def up():
            if self.procs[name].poll() is not None:
                logs = self.logs()
                self.stop()
                raise AssertionError(f"{name} exited ({self.procs[name].returncode})\n{logs}")
            try:
                if "/" in addr:
                    s = socket.socket(socket.AF_UNIX)
                    s.connect(addr)
                else:
                    host, port = addr.rsplit(":", 1)
                    s = socket.create_connection((host, int(port)), timeout=1)
                s.close()
                return True
            except OSError:
                return False
        if not wait_until(up, 30):
            logs = self.logs()
            self.stop()
            raise AssertionError(f"{name} is not listening on {addr}\n{logs}")

    def logs(self) -> str:
        out = []
        for name in self.procs:
            try:
                with open(os.path.join(self.dir, f"{name}.log"), "rb") as f:
                    out.append(f"--- {name} ---\n" + f.read()[-3000:].decode("utf-8", "replace"))
            except OSError:
                pass
        return "\n".join(out)

    def kill(self, name: str, sig: int = signal.SIGKILL) -> None:
        self.procs[name].send_signal(sig)
        if sig in (signal.SIGSTOP, signal.SIGCONT):
            return  # it does not exit
        self.procs[name].wait(timeout=10)

    def stop(self) -> None:
        """Stops every daemon; raises AssertionError if a sanitizer reported in
        any daemon's log (daemons of a sanitizer build, CAUSEWAY_BIN_DIR; a
        killed daemon's exit status cannot say so)."""
        for p in self.procs.values():
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)  # a stopped one cannot handle SIGTERM
                p.terminate()
        for p in self.procs.values():
            try:
                p.wait(timeout=5)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait(timeout=5)
        reports = []
        for name in self.procs:
            try:
                with open(os.path.join(self.dir, f"{name}.log"), "rb") as f:
                    text = f.read().decode("utf-8", "replace")
            except OSError:
                continue
            m = SANITIZER_REPORT.search(text)
            if m:
                reports.append(f"--- {name} ---\n" + text[m.start():m.start() + 4000])
        shutil.rmtree(self.dir, ignore_errors=True)
        if reports:
            raise AssertionError("sanitizer report in a daemon's log:\n" + "\n".join(reports))


class TcpRelay:
    """A TCP relay on 127.0.0.1 that forwards to `target` ("host:port") and
    records every byte in both directions (`up` to the target, `down` from
    it). With `down_chunks`, only that many reads from the target are passed
    on per connection, the rest swallowed: a peer that says hello, then
    nothing. Setting `frozen` stops all forwarding, the connections left
    open (a link that drops everything, while both ends live on). Setting
    `refuse_after` to S makes each new connection silent for S seconds, then
    closed, while those already open go on (a peer no new dialer reaches)."""

    def __init__(self, target: str, down_chunks: int | None = None):
        host, port = target.rsplit(":", 1)
        self.target = (host, int(port))
        self.down_chunks = down_chunks
        self.srv = socket.socket()
        self.srv.bind(("127.0.0.1", 0))
        self.srv.listen(8)
        self.address = f"127.0.0.1:{self.srv.getsockname()[1]}"
        self.up = bytearray()
        self.down = bytearray()
        self.connections = 0
        self.refused = 0
        self.stop = False
        self.frozen = False
        self.refuse_after: float | None = None
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    def _run(self):
        pairs = {}
        passed = {}  # target-side socket -> reads passed on
        held = {}  # refused socket -> when it closes
        while not self.stop:
            now = time.monotonic()
            for s in [s for s, t in held.items() if t <= now]:
                del held[s]
                s.close()
            r, _, _ = select.select([self.srv, *([] if self.frozen else pairs)], [], [], 0.05)
            for s in r:
                if s is self.srv:
                    a, _ = self.srv.accept()
                    if self.refuse_after is not None:
                        held[a] = time.monotonic() + self.refuse_after
                        self.refused += 1
                        continue
                    b = socket.create_connection(self.target)
                    pairs[a], pairs[b] = (b, self.up), (a, self.down)
                    passed[b] = 0
                    self.connections += 1
                    continue
                try:
                    data = s.recv(65536)
                except OSError:
                    data = b""
                other, log = pairs.get(s, (None, None))
                if not data:
                    if other:
                        pairs.pop(other, None)
                        other.close()
                    pairs.pop(s, None)
                    s.close()
                    continue
                log.extend(data)
                if s in passed:
                    passed[s] += 1
                    if self.down_chunks is not None and passed[s] > self.down_chunks:
                        continue
                other.sendall(data)
        for s in [*pairs, *held]:
            s.close()
        self.srv.close()

    def close(self):
        self.stop = True
        self.thread.join(5)
