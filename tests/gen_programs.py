#!/usr/bin/env python3
"""Generates the programs, inputs and reference outputs of the worker integration test.

Usage: $CW_PYTHON tests/gen_programs.py OUTDIR

Everything is produced at test time with the pinned JAX (stock CPU backend): each case is
lowered with jax.jit(f).lower(*args) to StableHLO (text, MLIR bytecode, or the portable VHLO
artifact JAX's plugin path sends), paired with a serialized xla.CompileOptionsProto whose
device assignment uses the worker's local device ids 0..N-1, and run by stock JAX for the
expected outputs. Arrays are written as raw little-endian bytes, dense row-major.

OUTDIR/manifest.txt, one record a line (C parses it with sscanf/strtok):

  case NAME devices N format FORMAT program FILE options FILE
  in DEVICE DTYPE DIMS FILE        (one per argument per device, in argument order)
  out DEVICE DTYPE DIMS FILE       (one per output per device, in output order)
  end
  reject NAME program FILE options FILE expect TEXT...   (compile must fail; TEXT is XLA's)

DTYPE is the wire number of proto DType (= PJRT_Buffer_Type). DIMS is "d0,d1,..." or "-"
for a scalar. FORMAT is text, bytecode or portable (all sent with format "mlir").
"""

import os
import sys

os.environ.setdefault("JAX_PLATFORMS", "cpu")
_flags = os.environ.get("XLA_FLAGS", "")
if "xla_force_host_platform_device_count" not in _flags:
    os.environ["XLA_FLAGS"] = (_flags + " --xla_force_host_platform_device_count=4").strip()

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import ml_dtypes  # noqa: E402
import numpy as np  # noqa: E402
from jax._src import compiler  # noqa: E402
from jax._src import xla_bridge as xb  # noqa: E402
from jax._src.interpreters import mlir  # noqa: E402
from jax._src.lib import _jax  # noqa: E402
from jax._src.lib import xla_client as xc  # noqa: E402
from jax._src.lib.mlir.dialects import hlo  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

# proto DType wire numbers (proto/causeway.proto; equal PJRT_Buffer_Type).
DTYPES = {
    np.dtype(np.bool_): 1,
    np.dtype(np.int8): 2,
    np.dtype(np.int16): 3,
    np.dtype(np.int32): 4,
    np.dtype(np.int64): 5,
    np.dtype(np.uint8): 6,
    np.dtype(np.uint16): 7,
    np.dtype(np.uint32): 8,
    np.dtype(np.uint64): 9,
    np.dtype(np.float16): 10,
    np.dtype(np.float32): 11,
    np.dtype(np.float64): 12,
    np.dtype(ml_dtypes.bfloat16): 13,
    np.dtype(np.complex64): 14,
    np.dtype(np.complex128): 15,
}

REJECT_EXPECT = "requires the same shape for all operands and results"
REJECT_TEXT = """module @rejected attributes {mhlo.num_partitions = 1 : i32, mhlo.num_replicas = 1 : i32} {
  func.func public @main(%arg0: tensor<2xf32>, %arg1: tensor<3xf32>) -> tensor<2xf32> {
    %0 = stablehlo.add %arg0, %arg1 : (tensor<2xf32>, tensor<3xf32>) -> tensor<2xf32>
    return %0 : tensor<2xf32>
  }
}
"""


class Writer:
    def __init__(self, outdir):
        self.outdir = outdir
        self.lines = []

    def blob(self, name, data):
        with open(os.path.join(self.outdir, name), "wb") as f:
            f.write(data)
        return name

    def array(self, name, arr):
        arr = np.asarray(arr)
        dt = DTYPES[arr.dtype]
        le = arr.astype(arr.dtype.newbyteorder("<"), copy=False)
        self.blob(name, np.ascontiguousarray(le).tobytes())
        dims = ",".join(str(d) for d in arr.shape) if arr.ndim else "-"
        return dt, dims, name


def compile_options(n):
    opts = compiler.get_compile_options(
        num_replicas=1, num_partitions=n, device_assignment=np.arange(n).reshape(1, n))
    return opts.SerializeAsString()


def program_bytes(lowered, fmt):
    if fmt == "text":
        return lowered.as_text().encode()
    module = lowered.compiler_ir("stablehlo")
    bytecode = mlir.module_to_bytecode(module)
    if fmt == "bytecode":
        return bytecode
    assert fmt == "portable"
    target = hlo.get_version_from_compatibility_requirement(
        hlo.StablehloCompatibilityRequirement.WEEK_4)
    return _jax.mlir.serialize_portable_artifact(
        bytecode, target, xb.get_backend().serialize_with_sdy)


def emit_case(w, name, fn, args, fmt="text"):
    """A single-device case: args on device 0, outputs compared from device 0."""
    jitted = jax.jit(fn, keep_unused=True)
    lowered = jitted.lower(*args)
    outs = jitted(*args)
    outs = outs if isinstance(outs, (tuple, list)) else (outs,)
    prog = w.blob(f"{name}.mlir", program_bytes(lowered, fmt))
    opts = w.blob(f"{name}.opts", compile_options(1))
    w.lines.append(f"case {name} devices 1 format {fmt} program {prog} options {opts}")
    for i, a in enumerate(args):
        dt, dims, f = w.array(f"{name}.in{i}.bin", np.asarray(a))
        w.lines.append(f"in 0 {dt} {dims} {f}")
    for i, o in enumerate(outs):
        dt, dims, f = w.array(f"{name}.out{i}.bin", np.asarray(o))
        w.lines.append(f"out 0 {dt} {dims} {f}")
    w.lines.append("end")


def emit_spmd(w):
    """4-device SPMD: x sharded over rows; outputs 2*x (sharded) and the column sums (an
    all-reduce over the sharded axis, replicated). Inputs are integer-valued so the sum is
    exact whatever order the all-reduce adds in."""
    n = 4
    devs = jax.devices()[:n]
    assert len(devs) == n, "needs --xla_force_host_platform_device_count=4"
    mesh = Mesh(np.array(devs), ("x",))
    rows = NamedSharding(mesh, P("x"))
    repl = NamedSharding(mesh, P())
    rng = np.random.default_rng(7)
    x = rng.integers(-50, 50, size=(8, 6)).astype(np.float32)
    y = rng.integers(-5, 5, size=(8, 6)).astype(np.float32)

    def f(a, b):
        return a * 2.0 + b, jnp.sum(a * b, axis=0)

    jitted = jax.jit(f, in_shardings=(rows, rows), out_shardings=(rows, repl), keep_unused=True)
    xs = jax.device_put(x, rows)
    ys = jax.device_put(y, rows)
    lowered = jitted.lower(xs, ys)
    outs = jitted(xs, ys)
    name = "spmd4_f32"
    prog = w.blob(f"{name}.mlir", program_bytes(lowered, "text"))
    opts = w.blob(f"{name}.opts", compile_options(n))
    w.lines.append(f"case {name} devices {n} format text program {prog} options {opts}")

    def shards(arr):
        by_dev = sorted(arr.addressable_shards, key=lambda s: s.device.id)
        assert [s.device.id for s in by_dev] == [d.id for d in devs]
        return [np.asarray(s.data) for s in by_dev]

    ins = [shards(xs), shards(ys)]
    res = [shards(o) for o in outs]
    for d in range(n):
        for i, per_dev in enumerate(ins):
            dt, dims, fname = w.array(f"{name}.d{d}.in{i}.bin", per_dev[d])
            w.lines.append(f"in {d} {dt} {dims} {fname}")
    for d in range(n):
        for i, per_dev in enumerate(res):
            dt, dims, fname = w.array(f"{name}.d{d}.out{i}.bin", per_dev[d])
            w.lines.append(f"out {d} {dt} {dims} {fname}")
    w.lines.append("end")


def emit_reject(w):
    """A type-incorrect StableHLO module; checks that stock XLA rejects it with the text the
    integration test looks for."""
    opts = compiler.get_compile_options(
        num_replicas=1, num_partitions=1, device_assignment=np.array([[0]]))
    backend = xb.get_backend()
    try:
        backend.compile_and_load(REJECT_TEXT, xc.DeviceList(tuple(jax.devices()[:1])), opts)
    except Exception as e:  # noqa: BLE001 - any compile error will do; check its text
        if REJECT_EXPECT not in str(e):
            raise SystemExit(f"stock XLA rejected the program with unexpected text: {e}")
    else:
        raise SystemExit("stock XLA accepted the program meant to be rejected")
    prog = w.blob("rejected.mlir", REJECT_TEXT.encode())
    optf = w.blob("rejected.opts", opts.SerializeAsString())
    w.lines.append(f"reject rejected program {prog} options {optf} expect {REJECT_EXPECT}")


def main():
    if len(sys.argv) != 2:
        raise SystemExit(__doc__)
    outdir = sys.argv[1]
    os.makedirs(outdir, exist_ok=True)
    w = Writer(outdir)
    rng = np.random.default_rng(20240611)

    def normal(*shape, dtype=np.float32):
        return rng.standard_normal(shape).astype(dtype)

    # Elementwise + matmul, float32. (Its first input is also uploaded column-major.)
    emit_case(w, "matmul_f32", lambda a, b, c: jnp.tanh(a @ b) * 2.0 + c,
              [normal(4, 8), normal(8, 16), normal(4, 16)])

    # A small MLP forward, sent as the portable VHLO artifact JAX's plugin path uses.
    def mlp(x, w1, b1, w2, b2):
        h = jax.nn.relu(x @ w1 + b1)
        return jax.nn.log_softmax(h @ w2 + b2, axis=-1)

    emit_case(w, "mlp_f32", mlp,
              [normal(8, 16), normal(16, 32) * 0.25, normal(32), normal(32, 10) * 0.25,
               normal(10)], fmt="portable")

    # One case per element type.
    with jax.enable_x64(True):
        emit_case(w, "f64", lambda a, b: a * b + jnp.sin(a),
                  [normal(3, 5, dtype=np.float64), normal(3, 5, dtype=np.float64)])
        emit_case(w, "s64", lambda a, b: a * b + np.int64(1 << 40),
                  [rng.integers(-(1 << 20), 1 << 20, size=(6,), dtype=np.int64),
                   rng.integers(-(1 << 20), 1 << 20, size=(6,), dtype=np.int64)])
    emit_case(w, "bf16", lambda a, b: a * b + a,
              [normal(4, 4).astype(ml_dtypes.bfloat16), normal(4, 4).astype(ml_dtypes.bfloat16)])
    emit_case(w, "f16", lambda a, b: a + b * np.float16(2),
              [normal(2, 7, dtype=np.float16), normal(2, 7, dtype=np.float16)])
    emit_case(w, "s8", lambda a, b: a * b + np.int8(3),
              [rng.integers(-128, 128, size=(5, 3), dtype=np.int8),
               rng.integers(-128, 128, size=(5, 3), dtype=np.int8)])
    emit_case(w, "s32", lambda a, b: a * b - (b >> 1),
              [rng.integers(-1000, 1000, size=(3, 4, 2), dtype=np.int32),
               rng.integers(-1000, 1000, size=(3, 4, 2), dtype=np.int32)], fmt="bytecode")
    emit_case(w, "u8", lambda a, b: a + b,
              [rng.integers(0, 256, size=(9,), dtype=np.uint8),
               rng.integers(0, 256, size=(9,), dtype=np.uint8)])
    emit_case(w, "pred", lambda a, b: jnp.logical_xor(a, b) | (a & b),
              [rng.integers(0, 2, size=(3, 3)).astype(np.bool_),
               rng.integers(0, 2, size=(3, 3)).astype(np.bool_)])
    emit_case(w, "c64", lambda a, b: a * b + jnp.conj(a),
              [(normal(2, 3) + 1j * normal(2, 3)).astype(np.complex64),
               (normal(2, 3) + 1j * normal(2, 3)).astype(np.complex64)])
    emit_case(w, "scalar_f32", lambda a, b: a * b + 1.0,
              [np.float32(1.5), np.float32(-2.25)])
    emit_case(w, "zero_size_f32", lambda a: (a * 2.0, jnp.sum(a, axis=0)),
              [np.zeros((0, 3), np.float32)])

    emit_spmd(w)
    emit_reject(w)

    with open(os.path.join(outdir, "manifest.txt"), "w") as f:
        f.write("\n".join(w.lines) + "\n")
    print(f"gen_programs: wrote {sum(1 for l in w.lines if l.startswith('case '))} cases "
          f"to {outdir}")


if __name__ == "__main__":
    main()
