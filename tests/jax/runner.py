"""Runner subprocess: imports JAX (platform chosen by the environment) and
checks.py, then runs checks by name for the test process (see harness.py).

argv: request-fd reply-fd. Frames are an 8-byte little-endian length and a
pickle: request (check name, kwargs) or None to exit; reply ("ok", result),
("err", type, message, traceback) or, once at start-up, ("ready", info).
"""
import os
import pickle
import struct
import sys
import traceback


def _read_exact(fd, n):
    chunks, got = [], 0
    while got < n:
        c = os.read(fd, n - got)
        if not c:
            return None
        chunks.append(c)
        got += len(c)
    return b"".join(chunks)


def _write(fd, obj):
    data = pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)
    data = struct.pack("<Q", len(data)) + data
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view):]


def _error(e):
    return ("err", type(e).__name__, str(e), traceback.format_exc())


def main():
    req, rep = int(sys.argv[1]), int(sys.argv[2])
    # The embedded cluster's children must not inherit the channel.
    os.set_inheritable(req, False)
    os.set_inheritable(rep, False)
    try:
        if os.environ.get("CW_RUNNER_NO_PLUGINS"):
            # Stock JAX only: never discover (and dlopen) installed plugins.
            from jax._src import xla_bridge
            xla_bridge.discover_pjrt_plugins = lambda: None
        import checks
        # More check modules (tests/cluster/*_checks.py), looked up first:
        # CW_RUNNER_CHECKS="path/a_checks.py:path/b_checks.py".
        extra = []
        for path in filter(None, os.environ.get("CW_RUNNER_CHECKS", "").split(":")):
            import importlib.util
            spec = importlib.util.spec_from_file_location(
                os.path.splitext(os.path.basename(path))[0], path)
            mod = importlib.util.module_from_spec(spec)
            spec.loader.exec_module(mod)
            extra.append(mod)
        info = checks.startup()
    except BaseException as e:  # noqa: BLE001 - reported to the test
        _write(rep, _error(e))
        return 1
    _write(rep, ("ready", info))
    while True:
        head = _read_exact(req, 8)
        if head is None:
            return 0
        (n,) = struct.unpack("<Q", head)
        body = _read_exact(req, n)
        if body is None:
            return 0
        msg = pickle.loads(body)
        if msg is None:
            return 0
        name, kwargs = msg
        try:
            mod = next((m for m in extra if hasattr(m, name)), checks)
            result = getattr(mod, name)(**kwargs)
            reply = ("ok", result)
        except BaseException as e:  # noqa: BLE001 - reported to the test
            reply = _error(e)
        sys.stdout.flush()
        sys.stderr.flush()
        _write(rep, reply)


if __name__ == "__main__":
    sys.exit(main())
