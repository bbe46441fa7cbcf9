"""ctypes binding of causeway's C client library (libcauseway_client.so).

Thin on purpose: every call goes to the C library, which speaks the wire
protocol; errors come back as CausewayError with the status code and message.
"""
from __future__ import annotations

import ctypes
import os
import pathlib

import numpy as np

# Wire dtype numbers (proto DType == PJRT_Buffer_Type).
DTYPES = {
    np.dtype(np.bool_): 1, np.dtype(np.int8): 2, np.dtype(np.int16): 3,
    np.dtype(np.int32): 4, np.dtype(np.int64): 5, np.dtype(np.uint8): 6,
    np.dtype(np.uint16): 7, np.dtype(np.uint32): 8, np.dtype(np.uint64): 9,
    np.dtype(np.float16): 10, np.dtype(np.float32): 11, np.dtype(np.float64): 12,
    np.dtype(np.complex64): 14, np.dtype(np.complex128): 15,
}
try:
    import ml_dtypes
    DTYPES[np.dtype(ml_dtypes.bfloat16)] = 13
except ImportError:  # bfloat16 then unavailable from Python
    pass
NUMPY_OF = {v: k for k, v in DTYPES.items()}

CODE_NAMES = ["OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED",
              "NOT_FOUND", "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED",
              "FAILED_PRECONDITION", "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED",
              "INTERNAL", "UNAVAILABLE", "DATA_LOSS", "UNAUTHENTICATED"]


class CausewayError(RuntimeError):
    def __init__(self, code: int, message: str):
        self.code = code
        self.code_name = CODE_NAMES[code] if 0 <= code < len(CODE_NAMES) else str(code)
        super().__init__(f"{self.code_name}: {message}")


def _find_library() -> str:
    env = os.environ.get("CW_CLIENT_LIB")
    if env:
        return env
    try:  # the wheel's copy
        import causeway
        bundled = causeway.client_library()
    except ImportError:
        bundled = None
    if bundled:
        return bundled
    root = pathlib.Path(__file__).resolve().parents[2]
    for build in ("release", "asan"):
        p = root / "build" / build / "lib" / "libcauseway_client.so"
        if p.exists():
            return str(p)
    raise FileNotFoundError("libcauseway_client.so not found: install the causeway wheel, "
                            "build first or set CW_CLIENT_LIB")


_lib = None


def _load():
    global _lib
    if _lib is not None:
        return _lib
    lib = ctypes.CDLL(_find_library())
    vp, u64, i64p, u64p = ctypes.c_void_p, ctypes.c_uint64, ctypes.POINTER(ctypes.c_int64), \
        ctypes.POINTER(ctypes.c_uint64)
    lib.cw_status_code.argtypes = [vp]
    lib.cw_status_code.restype = ctypes.c_int
    lib.cw_status_message.argtypes = [vp]
    lib.cw_status_message.restype = ctypes.c_char_p
    lib.cw_status_free.argtypes = [vp]
    lib.cw_status_free.restype = None
    lib.cw_client_connect.argtypes = [ctypes.c_char_p, vp, ctypes.POINTER(vp)]
    lib.cw_client_connect.restype = vp
    lib.cw_client_release.argtypes = [vp]
    lib.cw_client_release.restype = None
    lib.cw_client_session_id.argtypes = [vp]
    lib.cw_client_session_id.restype = u64
    lib.cw_client_ping.argtypes = [vp]
    lib.cw_client_ping.restype = vp
    lib.cw_client_flush.argtypes = [vp]
    lib.cw_client_flush.restype = vp
    lib.cw_client_compile.argtypes = [vp, u64, ctypes.c_char_p, ctypes.c_char_p, ctypes.c_size_t,
                                      ctypes.c_char_p, ctypes.c_size_t,
                                      ctypes.POINTER(ctypes.c_uint32)]
    lib.cw_client_compile.restype = vp
    lib.cw_client_upload.argtypes = [vp, u64, ctypes.c_int, i64p, ctypes.c_size_t, i64p,
                                     ctypes.c_int, vp, ctypes.c_size_t, vp, vp]
    lib.cw_client_upload.restype = vp
    lib.cw_client_launch.argtypes = [vp, u64, ctypes.c_size_t, ctypes.c_size_t,
                                     ctypes.POINTER(u64p), ctypes.c_size_t,
                                     ctypes.POINTER(u64p), vp, vp]
    lib.cw_client_launch.restype = vp
    lib.cw_client_download.argtypes = [vp, u64, vp, ctypes.c_size_t,
                                       ctypes.POINTER(ctypes.c_size_t), vp]
    lib.cw_client_download.restype = vp
    lib.cw_client_await.argtypes = [vp, u64]
    lib.cw_client_await.restype = vp
    lib.cw_client_expect.argtypes = [vp, u64, vp, vp]
    lib.cw_client_expect.restype = vp
    lib.cw_client_send_to_peer.argtypes = [vp, u64, ctypes.c_char_p, u64, ctypes.c_int, u64,
                                           vp, vp]
    lib.cw_client_send_to_peer.restype = vp
    lib.cw_client_delete.argtypes = [vp, u64p, ctypes.c_size_t, vp, vp]
    lib.cw_client_delete.restype = vp
    _lib = lib
    return lib


def _check(status):
    if status:
        lib = _load()
        code = lib.cw_status_code(status)
        msg = lib.cw_status_message(status).decode("utf-8", "replace")
        lib.cw_status_free(status)
        raise CausewayError(code, msg)


class Client:
    """One connection (one session) to a causeway worker."""

    def __init__(self, address: str):
        lib = _load()
        self._lib = lib
        self.address = address
        out = ctypes.c_void_p()
        _check(lib.cw_client_connect(address.encode(), None, ctypes.byref(out)))
        self._c = out

    @property
    def session_id(self) -> int:
        return self._lib.cw_client_session_id(self._c)

    def close(self):
        if self._c:
            self._lib.cw_client_release(self._c)
            self._c = None

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def ping(self):
        _check(self._lib.cw_client_ping(self._c))

    def flush(self):
        _check(self._lib.cw_client_flush(self._c))

    def compile(self, exe_id: int, code: bytes, options: bytes = b"", fmt: str = "mlir") -> int:
        n = ctypes.c_uint32()
        _check(self._lib.cw_client_compile(self._c, exe_id, fmt.encode(), code, len(code),
                                           options, len(options), ctypes.byref(n)))
        return n.value

    def upload(self, buffer_id: int, array: np.ndarray, device: int = 0):
        """Pipelined: errors surface at flush() or when the id is used."""
        a = np.ascontiguousarray(array)
        dims = (ctypes.c_int64 * max(a.ndim, 1))(*a.shape)
        _check(self._lib.cw_client_upload(self._c, buffer_id, DTYPES[a.dtype], dims, a.ndim,
                                          None, device, a.ctypes.data, a.nbytes, None, None))

    def launch(self, exe_id: int, args: list[list[int]], outputs: list[list[int]]):
        ndev = len(args)
        nargs = len(args[0]) if ndev else 0
        nout = len(outputs[0]) if outputs else 0
        arg_rows = [(ctypes.c_uint64 * max(nargs, 1))(*row) for row in args]
        out_rows = [(ctypes.c_uint64 * max(nout, 1))(*row) for row in outputs]
        u64p = ctypes.POINTER(ctypes.c_uint64)
        argv = (u64p * ndev)(*[ctypes.cast(r, u64p) for r in arg_rows])
        outv = (u64p * ndev)(*[ctypes.cast(r, u64p) for r in out_rows])
        _check(self._lib.cw_client_launch(self._c, exe_id, ndev, nargs, argv, nout, outv,
                                          None, None))

    def download(self, buffer_id: int, shape, dtype) -> np.ndarray:
        out = np.empty(shape, dtype=dtype)
        size = ctypes.c_size_t()
        _check(self._lib.cw_client_download(self._c, buffer_id, out.ctypes.data, out.nbytes,
                                            ctypes.byref(size), None))
        if size.value != out.nbytes:
            raise CausewayError(11, f"buffer {buffer_id}: got {size.value} bytes, "
                                    f"expected {out.nbytes}")
        return out

    def expect(self, buffer_id: int):
        _check(self._lib.cw_client_expect(self._c, buffer_id, None, None))

    def send_to_peer(self, src_id: int, peer_address: str, dst_id: int, dst_session: int,
                     dst_device: int = 0):
        _check(self._lib.cw_client_send_to_peer(self._c, src_id, peer_address.encode(), dst_id,
                                                dst_device, dst_session, None, None))

    def delete(self, ids):
        arr = (ctypes.c_uint64 * len(ids))(*ids)
        _check(self._lib.cw_client_delete(self._c, arr, len(ids), None, None))
