"""64-bit dtypes with jax_enable_x64 (its own runners: the flag is set at start-up)."""
import harness

DTYPES_64 = ["float64", "int64", "uint64", "complex64", "complex128", "float32", "int32"]


# float64 dot: the workers run XLA's CPU PJRT plugin from the lammps-jax-pjrt-cpu
# wheel, whose float64 matmul rounds differently (1 ulp) from the CPU client
# built into jaxlib. Measured: that plugin loaded straight into JAX
# (PJRT_NAMES_AND_LIBRARY_PATHS, no causeway) gives exactly causeway's bits,
# so this is the wheel, not causeway. Every other float64 result is bit-exact.
F64_DOT_TOL = {"dtypes_x64['float64']['matmul']":
               (1e-14, 0.0, "float64 dot of the XLA CPU plugin wheel vs jaxlib's CPU client")}


def test_dtypes_x64(ref64, cw64):
    want, got = harness.run_both(ref64, cw64, "dtypes", names=DTYPES_64)
    harness.assert_same(want, got, "dtypes_x64", F64_DOT_TOL)
    assert got["x64"]
    for name in DTYPES_64:
        assert got[name]["dtype"] == name


def test_x64_ops(ref64, cw64):
    want, got = harness.run_both(ref64, cw64, "jnp_ops", jit=True)
    harness.assert_same(want, got, "jnp_ops_x64")
