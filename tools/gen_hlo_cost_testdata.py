#!/usr/bin/env python3
"""Writes src/protocol/testdata/hlo_cost: programs compiled by stock JAX's CPU
client (the pinned jaxlib), each NAME.pb its optimized HloModuleProto, and
expected.json what compiled.cost_analysis() gave for each, by name: every key
XLA gave (flops, transcendentals, bytes accessed and the per-operand ones).

cw_hlo_cost_test checks that causeway prices every module the same.

Usage: .venv/bin/python tools/gen_hlo_cost_testdata.py [OUTDIR]
"""
import json
import os
import sys

os.environ["JAX_PLATFORMS"] = "cpu"
os.environ["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"

from jax._src import xla_bridge  # noqa: E402

xla_bridge.discover_pjrt_plugins = lambda: None  # stock CPU only, no causeway

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from jax import lax  # noqa: E402
from jax.experimental import io_callback  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
OUT = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
    HERE, "..", "src", "protocol", "testdata", "hlo_cost")

x8 = np.arange(8, dtype=np.float32)
m = np.ones((32, 32), np.float32)
img = np.ones((2, 3, 16, 16), np.float32)
img4 = np.ones((2, 4, 16, 16), np.float32)
ker = np.ones((4, 3, 3, 3), np.float32)
mesh = Mesh(np.array(jax.devices()[:4]), ("x",))
xs = jax.device_put(np.arange(64, dtype=np.float32).reshape(8, 8), NamedSharding(mesh, P("x")))


def scan_f(a):
    def body(c, x):
        return c * 0.9 + x, jnp.sin(c)
    return lax.scan(body, jnp.zeros(8), a)


def attention(q, k, v):
    s = jnp.einsum("bqd,bkd->bqk", q, k) / 5.6
    return jnp.einsum("bqk,bkd->bqd", jax.nn.softmax(s, -1), v)


def layernorm(x, g, b):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / jnp.sqrt(v + 1e-5) * g + b


def conv_bn(x, k):
    y = lax.conv_general_dilated(x, k, (1, 1), "SAME", dimension_numbers=("NHWC", "HWIO", "NHWC"))
    m, v = y.mean((0, 1, 2)), y.var((0, 1, 2))
    return jax.nn.relu((y - m) / jnp.sqrt(v + 1e-5))


def dus_loop(a):
    def body(i, c):
        return lax.dynamic_update_slice(c, jnp.full((1, 8), i, jnp.float32), (i, 0))
    return lax.fori_loop(0, 16, body, a)


q3 = np.random.RandomState(0).rand(4, 16, 32).astype(np.float32)


PROGRAMS = {
    "id": (lambda x: x, (1.,)),
    "add4": (lambda x: x + 4, (1.,)),
    "matmul": (lambda a, b: a @ b, (jnp.ones((8, 16)), jnp.ones((16, 4)))),
    "exp_sum": (lambda x: jnp.sum(jnp.exp(x) * 2.0), (m,)),
    "tanh_mlp": (lambda w, x: jnp.tanh(x @ w).mean(), (jnp.ones((64, 64)), jnp.ones((16, 64)))),
    "elementwise": (lambda a: jnp.sin(a) * jnp.cos(a) + jnp.sqrt(jnp.abs(a)) - jnp.log1p(a * a), (x8,)),
    "erf_tan": (lambda a: lax.erf(a) + jnp.tan(a), (x8,)),
    "conv": (lambda i, k: lax.conv_general_dilated(i, k, (1, 1), "SAME"), (img, ker)),
    "conv_stride": (lambda i, k: lax.conv_general_dilated(i, k, (2, 2), "VALID", rhs_dilation=(2, 2)), (img, ker)),
    "sort": (lambda a: jnp.sort(a), (np.random.RandomState(0).rand(100).astype(np.float32),)),
    "cumsum": (lambda a: jnp.cumsum(a, axis=1), (m,)),
    "max_pool": (lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (2, 2), (2, 2), "VALID"), (m,)),
    "while": (lambda a: lax.fori_loop(0, 10, lambda i, c: c * 1.5 + i, a), (x8,)),
    "cond": (lambda p, a: lax.cond(p > 0, lambda: a + 1, lambda: jnp.exp(a) - 1), (1.0, x8)),
    "gather": (lambda a, i: a[i], (m, np.array([3, 1, 4, 1, 5], np.int32))),
    "scatter": (lambda a, i: a.at[i].add(1.0), (m, np.array([3, 1, 4], np.int32))),
    "dyn_slice": (lambda a, i: lax.dynamic_slice(a, (i, 0), (4, 32)), (m, 3)),
    "dyn_update": (lambda a, i: lax.dynamic_update_slice(a, jnp.ones((4, 32)), (i, 0)), (m, 3)),
    "slice_sum": (lambda a: a[2:10, ::2].sum() + a[0], (m,)),
    "transpose": (lambda a: a.T @ a, (np.ones((16, 8), np.float32),)),
    "concat_pad": (lambda a: jnp.pad(jnp.concatenate([a, a]), 2), (m,)),
    "argmax": (lambda a: jnp.argmax(a, axis=1), (m,)),
    "rng": (lambda k: jax.random.normal(k, (64,)), (jax.random.key(0),)),
    "softmax": (lambda a: jax.nn.softmax(a, axis=-1), (m,)),
    "tuple_out": (lambda a: tuple(a + i for i in range(7)), (x8,)),
    "lapack": (lambda a: jnp.linalg.inv(a), (np.eye(4, dtype=np.float32),)),
    "cholesky": (lambda a: jnp.linalg.cholesky(a), (np.eye(4, dtype=np.float32) * 2,)),
    "fft": (lambda a: jnp.fft.fft(a), (np.ones(16, np.complex64),)),
    "int_ops": (lambda a: (a << 2) ^ (a >> 1) | (a % 3), (np.arange(16, dtype=np.int32),)),
    "bf16": (lambda a: (a.astype(jnp.bfloat16) * 2).astype(jnp.float32).sum(), (m,)),
    "mlp_grad": (lambda w, x: jax.grad(lambda w: jnp.mean(jnp.tanh(x @ w) ** 2))(w), (np.ones((32, 16), np.float32), np.ones((8, 32), np.float32))),
    "all_reduce": (lambda a: jnp.sum(a, axis=0), (xs,)),
    "all_gather": (jax.jit(lambda a: a, out_shardings=NamedSharding(mesh, P())), (xs,)),
    "sharded_matmul": (lambda a: a @ a.T, (xs,)),
    "pool_grad": (lambda a: jax.grad(lambda a: lax.reduce_window(a, -jnp.inf, lax.max, (2, 2), (2, 2), "VALID").sum())(a), (m,)),
    "grouped_conv": (lambda i: lax.conv_general_dilated(i, jnp.ones((4, 1, 3, 3)), (1, 1), "SAME", feature_group_count=4), (img4,)),
    "conv_lhs_dil": (lambda i: lax.conv_general_dilated(i, jnp.ones((2, 4, 3, 3)), (1, 1), ((1, 1), (1, 1)), lhs_dilation=(2, 2)), (img4,)),
    "scan": (scan_f, (np.ones((16, 8), np.float32),)),
    "int8_dot": (lambda a, b: lax.dot(a, b, preferred_element_type=jnp.int32), (np.ones((8, 16), np.int8), np.ones((16, 4), np.int8))),
    "x_mean_var": (lambda a: (a.mean(0), a.var(0)), (m,)),
    "top_k": (lambda a: lax.top_k(a, 3), (np.random.RandomState(1).rand(64).astype(np.float32),)),
    "einsum_batch": (lambda a, b: jnp.einsum("bij,bjk->bik", a, b), (np.ones((4, 8, 16), np.float32), np.ones((4, 16, 8), np.float32))),
    "clamp_pow": (lambda a: jnp.clip(a, 0.1, 0.9) ** 2.5 + jnp.maximum(a, 0.3), (m,)),
    "complex": (lambda a: jnp.abs(a * (1 + 2j)) + jnp.real(a), (np.ones(16, np.complex64),)),
    "switch": (lambda i, a: lax.switch(i, [lambda a: a + 1, lambda a: a * 2, lambda a: jnp.exp(a)], a), (1, np.ones(8, np.float32))),
    "reverse_iota": (lambda a: a[::-1] + jnp.arange(8.0), (np.ones(8, np.float32),)),
    "triangular": (lambda a, b: jax.scipy.linalg.solve_triangular(a, b, lower=True), (np.eye(4, dtype=np.float32) * 2, np.ones((4, 2), np.float32))),
    # From a review: a long 1-D convolution (thousands of window positions),
    # a conditional with custom calls in one branch (-1 values), an ordered
    # callback (a token in a tuple).
    "convolve_long": (lambda a, b: jnp.convolve(a, b), (np.ones(3000, np.float32), np.ones(2000, np.float32))),
    "cond_custom": (lambda p, a: lax.cond(p > 0, lambda: jnp.linalg.inv(a), lambda: a * 2),
                    (1.0, np.eye(4, dtype=np.float32))),
    "ordered_callback": (lambda a: io_callback(lambda v: v, jax.ShapeDtypeStruct((8,), jnp.float32), a,
                                               ordered=True) + 1, (x8,)),
    # Programs as models have them, and sorts of several arrays (their
    # outputs count whole, not as a tuple's table).
    "argsort": (lambda a: jnp.argsort(a), (np.random.RandomState(2).rand(50).astype(np.float32),)),
    "sort_pairs": (lambda a, b: lax.sort((a, b), num_keys=1), (x8[::-1].copy(), x8)),
    "attention_grad": (jax.grad(lambda q, k, v: attention(q, k, v).sum()), (q3, q3, q3)),
    "layernorm": (layernorm, (q3, np.ones(32, np.float32), np.zeros(32, np.float32))),
    "conv_bn_grad": (jax.grad(lambda x, k: conv_bn(x, k).sum(), argnums=1),
                     (np.ones((2, 8, 8, 3), np.float32), np.ones((3, 3, 3, 4), np.float32))),
    "dus_loop": (dus_loop, (np.zeros((16, 8), np.float32),)),
}


def main():
    os.makedirs(OUT, exist_ok=True)
    expected = {}
    for name, (f, args) in PROGRAMS.items():
        jf = f if hasattr(f, "lower") else jax.jit(f)
        c = jf.lower(*args).compile()
        mod = c.runtime_executable().hlo_modules()[0]
        with open(os.path.join(OUT, name + ".pb"), "wb") as fh:
            fh.write(mod.as_serialized_hlo_module_proto())
        expected[name] = {k: float(v) for k, v in sorted(c.cost_analysis().items())}
    with open(os.path.join(OUT, "expected.json"), "w") as fh:
        json.dump(expected, fh, indent=1, sort_keys=True)
        fh.write("\n")
    print(f"{len(expected)} programs in {OUT}")


if __name__ == "__main__":
    main()
