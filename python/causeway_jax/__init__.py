"""JAX plugin entry point for causeway (selected with JAX_PLATFORMS=causeway).

JAX calls initialize() at start-up (entry point group `jax_plugins`). It
registers libcauseway_pjrt.so under the name "causeway" and, for the embedded
cluster the plugin starts when CAUSEWAY_CONTROLLER is unset, tells it where
the vendor PJRT plugin for the local workers lives (CAUSEWAY_PJRT_PLUGIN) and
how many CPU devices JAX asks for (jax_num_cpu_devices, passed as the create
option cpu_device_count; the plugin reads XLA_FLAGS itself).

JAX's in-process CPU backend stays beside causeway: JAX_PLATFORMS=causeway
reads as "causeway,cpu" (causeway the default backend, as the first), so code
that asks for a CPU device (jax.devices("cpu"), backend="cpu", the eager path
of jax.debug.callback and pure_callback) finds one, as it does next to a GPU.
It also answers compiled.cost_analysis() (see _answer_cost_analysis).

With JAX_PLATFORMS=proxy and JAX_BACKEND_TARGET=grpc://HOST:PORT it registers
the `proxy` backend instead: jaxlib's IFRT proxy client to causeway-proxy
(docs/proxy.md), as pathwaysutils does.

Environment:
  CAUSEWAY_PJRT_LIBRARY  path of libcauseway_pjrt.so (default: the one the
                         causeway wheel installed, else the repository's
                         build/release/lib/libcauseway_pjrt.so)
  CAUSEWAY_CONTROLLER    host:port or socket path of a running controller;
                         unset: start a private local cluster
  CAUSEWAY_PJRT_PLUGIN   the workers' PJRT plugin (default: lammps_jax_pjrt_cpu)
"""
from __future__ import annotations

import functools
import logging
import os
import pathlib
import sys

logger = logging.getLogger(__name__)

PLUGIN_NAME = "causeway"


def _repo_root() -> pathlib.Path:
    # python/causeway_jax/__init__.py -> repository root.
    return pathlib.Path(__file__).resolve().parents[2]


def _bundled() -> str | None:
    # The wheel's copy (python/causeway in a clone has none).
    try:
        import causeway
    except ImportError:
        return None
    return causeway.pjrt_library()


def library_path() -> str:
    """Where libcauseway_pjrt.so is loaded from."""
    env = os.environ.get("CAUSEWAY_PJRT_LIBRARY")
    if env:
        return env
    return _bundled() or str(_repo_root() / "build" / "release" / "lib" / "libcauseway_pjrt.so")


def _set_worker_plugin() -> None:
    # The C library cannot ask Python where the wheel put the CPU plugin, so
    # it reads CAUSEWAY_PJRT_PLUGIN; child processes inherit it.
    if os.environ.get("CAUSEWAY_PJRT_PLUGIN"):
        return
    try:
        import lammps_jax_pjrt_cpu as cpu_plugin
    except ImportError:
        return  # joining a running cluster needs no local plugin
    os.environ["CAUSEWAY_PJRT_PLUGIN"] = str(cpu_plugin.PLUGIN_PATH)


# Host callbacks (docs/host_callbacks.md): the plugin runs a launch's Python
# callables through this runner, which it calls from a thread of its own
# (ctypes takes the GIL). Wire dtypes are PJRT_Buffer_Type numbers.
_runners = []  # the ctypes callbacks the plugin holds, kept alive


@functools.lru_cache(maxsize=None)
def _wire_dtypes():
    # Built once: every host callback asks.
    import numpy as np
    names = {1: "bool", 2: "int8", 3: "int16", 4: "int32", 5: "int64", 6: "uint8",
             7: "uint16", 8: "uint32", 9: "uint64", 10: "float16", 11: "float32",
             12: "float64", 14: "complex64", 15: "complex128"}
    out = {k: np.dtype(v) for k, v in names.items()}
    try:
        import ml_dtypes
    except ImportError:
        return out
    # Sub-byte types arrive one byte per element, as ml_dtypes holds them.
    extra = {13: "bfloat16", 16: "float8_e5m2", 17: "float8_e4m3fn", 18: "float8_e4m3b11fnuz",
             19: "float8_e5m2fnuz", 20: "float8_e4m3fnuz", 21: "int4", 22: "uint4", 24: "int2",
             25: "uint2", 26: "float8_e4m3", 27: "float8_e3m4", 28: "float8_e8m0fnu",
             29: "float4_e2m1fn", 32: "float6_e2m3fn", 33: "float6_e3m2fn"}
    for k, name in extra.items():
        if hasattr(ml_dtypes, name):
            out[k] = np.dtype(getattr(ml_dtypes, name))
    return out


def _describe(dtype, shape) -> str:
    return f"{dtype}{list(shape)}"


def _shapes(n, ranks, dims):
    """The n shapes that ranks[] and the concatenated dims[] describe."""
    out, k = [], 0
    for i in range(n):
        out.append(tuple(dims[k + d] for d in range(ranks[i])))
        k += ranks[i]
    return out


def _view(data_ptr, dtype, shape):
    """A numpy array over `shape` elements of `dtype` at data_ptr (writeable)."""
    import ctypes

    import numpy as np
    count = int(np.prod(shape, dtype=np.int64))
    if not count:
        return np.zeros(shape, dtype)
    raw = (ctypes.c_char * (count * dtype.itemsize)).from_address(data_ptr)
    return np.frombuffer(raw, dtype=dtype, count=count).reshape(shape)


def _report(err, err_cap, text):
    import ctypes
    data = text.encode("utf-8", "replace")
    if len(data) > err_cap - 1:  # keep the head and the exception's own lines
        keep = max(0, err_cap - 1 - 5)
        data = data[: keep // 4] + b"\n...\n" + data[len(data) - (keep - keep // 4):]
        data = data[: max(0, err_cap - 1)]
    ctypes.memmove(err, data + b"\0", len(data) + 1)


def _run_callback(callable_ptr, n_ops, op_dtypes, op_ranks, op_dims, op_data, n_res,
                  res_dtypes, res_ranks, res_dims, res_data, err, err_cap):
    import ctypes
    import traceback

    import numpy as np
    try:
        dtypes = _wire_dtypes()
        callback = ctypes.cast(callable_ptr, ctypes.py_object).value
        args = []
        for i, shape in enumerate(_shapes(n_ops, op_ranks, op_dims)):
            if op_dtypes[i] < 0:
                args.append(None)  # a token
                continue
            a = _view(op_data[i], dtypes[op_dtypes[i]], shape).copy()
            a.flags.writeable = False
            args.append(a)
        try:
            results = callback(*args)
        except Exception:
            raise RuntimeError(
                "CpuCallback error calling callback: " + traceback.format_exc()) from None
        for i, shape in enumerate(_shapes(n_res, res_ranks, res_dims)):
            if res_dtypes[i] < 0:
                continue  # a token
            dt = dtypes[res_dtypes[i]]
            got = np.asarray(results[i])
            if got.shape != shape or got.dtype != dt:
                raise TypeError(
                    f"host callback result {i}: the program expects "
                    f"{_describe(dt, shape)}, the callback returned "
                    f"{_describe(got.dtype, got.shape)}")
            got = np.ascontiguousarray(got)
            ctypes.memmove(res_data[i], got.ctypes.data, got.nbytes)
        return 0
    except BaseException as e:  # everything goes back to the program as its error
        _report(err, err_cap, str(e) if isinstance(e, (RuntimeError, TypeError)) and
                str(e).startswith(("CpuCallback", "host callback")) else
                "CpuCallback error calling callback: " + traceback.format_exc())
        return 1


class _ExecutionContext:
    """What jax.experimental.buffer_callback hands a callable as its context:
    the stage (always EXECUTE here) and no GPU stream, as on stock CPU JAX."""

    @property
    def stage(self):
        from jax.experimental.buffer_callback import ExecutionStage
        return ExecutionStage.EXECUTE

    @property
    def stream(self):
        import jax
        raise jax.errors.JaxRuntimeError("UNIMPLEMENTED: XLA FFI GPU context is not available")


class _HostBuffer:
    """A buffer callback's operand (read-only) or result (written in place),
    in the client's memory, as jax.experimental.buffer_callback.Buffer looks
    on stock CPU JAX: dtype, shape, writeable, numpy and DLPack."""

    __slots__ = ("_a",)

    def __init__(self, array):
        self._a = array

    dtype = property(lambda self: self._a.dtype)
    shape = property(lambda self: self._a.shape)
    ndim = property(lambda self: self._a.ndim)
    writeable = property(lambda self: bool(self._a.flags.writeable))

    def __array__(self, dtype=None, copy=None):
        if copy:
            return self._a.astype(dtype or self._a.dtype, copy=True)
        return self._a if dtype is None else self._a.astype(dtype, copy=False)

    def __dlpack__(self, *args, **kwargs):
        return self._a.__dlpack__(*args, **kwargs)

    def __dlpack_device__(self):
        return self._a.__dlpack_device__()


def _run_buffer_callback(callable_ptr, n_ops, op_dtypes, op_ranks, op_dims, op_data, n_res,
                         res_dtypes, res_ranks, res_dims, res_data, res_aliases, err, err_cap):
    import ctypes
    import traceback
    try:
        dtypes = _wire_dtypes()
        callback = ctypes.cast(callable_ptr, ctypes.py_object).value
        # A result aliased to an operand (input_output_aliases) shares its
        # memory, as XLA gives it on stock JAX: the operand is a read-only
        # view of the result's bytes, which the plugin started as the operand's.
        # Other operands are copies: a callable that keeps one keeps valid memory.
        shared = {res_aliases[i]: i for i in range(n_res) if res_aliases[i] >= 0}
        results = [_view(res_data[i], dtypes[res_dtypes[i]], shape)
                   for i, shape in enumerate(_shapes(n_res, res_ranks, res_dims))]
        args = []
        for i, shape in enumerate(_shapes(n_ops, op_ranks, op_dims)):
            a = results[shared[i]][...] if i in shared else \
                _view(op_data[i], dtypes[op_dtypes[i]], shape).copy()
            a.flags.writeable = False
            args.append(_HostBuffer(a))
        callback(_ExecutionContext(), *args, *(_HostBuffer(r) for r in results))
        return 0
    except BaseException:  # everything goes back to the program as its error
        _report(err, err_cap, "Error when calling buffer callback: " + traceback.format_exc())
        return 1


def _install_runner(path: str) -> None:
    import ctypes
    i32p, i64p, vpp = (ctypes.POINTER(ctypes.c_int32), ctypes.POINTER(ctypes.c_int64),
                       ctypes.POINTER(ctypes.c_void_p))
    proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, i32p, i32p, i64p,
                             vpp, ctypes.c_int32, i32p, i32p, i64p, vpp, ctypes.c_void_p,
                             ctypes.c_int64)
    try:
        lib = ctypes.CDLL(path)
        hook = lib.CausewayHostCallbackRunner
    except (OSError, AttributeError) as e:
        logger.warning("causeway: host callbacks unavailable: %s", e)
        return
    runner = proto(_run_callback)
    hook.argtypes = [proto]
    hook.restype = None
    hook(runner)
    _runners.append(runner)
    buffer_proto = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_int32, i32p, i32p,
                                    i64p, vpp, ctypes.c_int32, i32p, i32p, i64p, vpp, i32p,
                                    ctypes.c_void_p, ctypes.c_int64)
    buffer_hook = getattr(lib, "CausewayBufferCallbackRunner", None)
    if buffer_hook is not None:
        buffer_runner = buffer_proto(_run_buffer_callback)
        buffer_hook.argtypes = [buffer_proto]
        buffer_hook.restype = None
        buffer_hook(buffer_runner)
        _runners.append(buffer_runner)


def _create_options() -> dict:
    # Read when JAX creates the client (after the program's own
    # jax.config.update("jax_num_cpu_devices", N), as JAX's CPU backend does).
    from jax._src import xla_bridge
    n = xla_bridge.num_cpu_devices.value
    return {"cpu_device_count": n} if n >= 1 else {}


def _keep_cpu_beside(name: str = PLUGIN_NAME) -> None:
    # JAX initializes only the platforms jax_platforms lists, expanding each
    # name through expand_platform_alias after plugin discovery: `name`
    # ("causeway", or "proxy") expands to itself then cpu there when the
    # list lacks cpu. The config
    # value itself stays as the user set it (JAX's own tests check that no
    # test changes it), and the expansion applies only to that one call site.
    from jax._src import config, xla_bridge
    original = xla_bridge.expand_platform_alias
    if getattr(original, "_causeway", False):
        return
    backends_code = xla_bridge.backends.__code__

    def expand_platform_alias(platform: str) -> list[str]:
        out = original(platform)
        if platform == name and sys._getframe(1).f_code is backends_code:
            names = (config.jax_platforms.value or "").split(",")
            if "cpu" not in names:
                out = list(out) + ["cpu"]
        return out

    expand_platform_alias._causeway = True
    xla_bridge.expand_platform_alias = expand_platform_alias


def _answer_cost_analysis() -> None:
    # compiled.cost_analysis(): the workers' plugin (XLA's CPU plugin behind
    # the C API) has none to forward, so JAX would say None where stock CPU
    # JAX answers. The answer is XLA's cost analysis of the optimized
    # program, which the executable carries: jaxlib computes it here with the
    # CPU backend beside causeway (the same numbers stock JAX gives).
    from jax._src import stages, xla_bridge
    from jax._src.lib import _jax

    original = stages.Executable.cost_analysis
    if getattr(original, "_causeway", False):
        return

    def cost_analysis(self):
        try:
            return original(self)
        except NotImplementedError:
            exe = self.xla_extension_executable()
            backends = xla_bridge.backends()
            if (exe is None or "cpu" not in backends
                    or getattr(exe, "client", None) is not backends.get(PLUGIN_NAME)):
                raise
            modules = exe.hlo_modules()
            if len(modules) != 1:
                raise
            return _jax.hlo_module_cost_analysis(backends["cpu"], modules[0])

    cost_analysis._causeway = True
    stages.Executable.cost_analysis = cost_analysis


def _register_proxy() -> bool:
    """JAX_PLATFORMS=proxy with JAX_BACKEND_TARGET=grpc://HOST:PORT: the
    `proxy` backend, jaxlib's IFRT proxy client to causeway-proxy (the
    registration pathwaysutils does; docs/proxy.md). The plugin itself is
    then not loaded into this process."""
    target = os.environ.get("JAX_BACKEND_TARGET", "")
    if "proxy" not in os.environ.get("JAX_PLATFORMS", "").split(",") or \
            not target.startswith("grpc://"):
        return False
    from jax._src import xla_bridge
    if "proxy" in xla_bridge._backend_factories:  # registered by the program or pathwaysutils
        return True
    from jax._src.lib import ifrt_proxy

    def factory():
        return ifrt_proxy.get_client(target, ifrt_proxy.ClientConnectionOptions())
    xla_bridge.register_backend_factory("proxy", factory, priority=-1)
    _keep_cpu_beside("proxy")  # as for the plugin front: jax.devices("cpu") still answers
    return True


def initialize() -> None:
    if _register_proxy():
        return
    path = library_path()
    if not os.path.exists(path):
        logger.warning(
            "causeway: %s not found; install the causeway wheel, build it "
            "(cmake --build build/release) or set CAUSEWAY_PJRT_LIBRARY", path)
        return
    _set_worker_plugin()
    _install_runner(path)
    from jax._src import xla_bridge
    xla_bridge.register_plugin(PLUGIN_NAME, library_path=path, options=_create_options)
    _keep_cpu_beside()
    _answer_cost_analysis()
