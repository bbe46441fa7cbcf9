"""Custom calls on workers (issue 10 item 2, docs/ffi.md), real JAX against stock JAX.

- jaxlib's LAPACK kernels: the workers load them from the venv that holds
  their PJRT plugin (the embedded cluster's default), and every
  jnp.linalg / jax.scipy.linalg / lax.linalg call gives stock JAX's bits
  (same kernels, same scipy LAPACK), in float32, float64, complex64 and
  complex128, batched, under vmap and grad, and sharded over an island.
- A user's FFI library (libcw_test_ffi.so, built by the project) given to the
  embedded workers with CAUSEWAY_FFI_LIBRARIES runs through jax.ffi.ffi_call
  as the same library registered in process runs on stock JAX.
- A custom call no worker provides fails at compile, naming the target and
  how to provide it; a kernel's own error reaches the caller.
- Bad input: a library path that does not exist, a missing symbol, a jaxlib
  that does not import: a worker asked for them explicitly refuses to start
  and says why; the embedded cluster's jaxlib that does not import leaves the
  workers serving and the error names it.

One causeway runner (x64, so float64 runs too; float32 inputs stay float32)
serves the module, against one stock x64 runner.
"""
import os
import pathlib
import re
import subprocess
import tempfile

import pytest

import harness
from conftest import requires_causeway  # tests/ffi/conftest.py

FFI_LIB = str(pathlib.Path(harness.bin_dir()).parent / "lib" / "libcw_test_ffi.so")
FFI_SPEC = f"{FFI_LIB}:cw_test_ffi_targets"


def _env(env: dict) -> dict:
    env["CW_TEST_FFI_LIB"] = FFI_LIB
    if harness.on_causeway():
        env["CAUSEWAY_FFI_LIBRARIES"] = FFI_SPEC
    return env


@pytest.fixture(scope="module")
def ref_ffi():
    r = harness.Runner("stock-ffi", _env(harness.stock_env(x64=True)))
    r.call("ffi_register")
    yield r
    r.close()


@pytest.fixture(scope="module")
def cw_ffi():
    if harness.on_causeway() and harness.missing_build():
        pytest.fail(f"causeway is not built: {harness.missing_build()}", pytrace=False)
    if not os.path.exists(FFI_LIB):
        pytest.fail(f"{FFI_LIB} is missing: build the release tree", pytrace=False)
    r = harness.Runner(f"{harness.TARGET}-ffi", _env(harness.target_env(x64=True)))
    # The user's program unchanged: it registers its kernel in process as on
    # stock JAX (harmless on causeway, where the workers run it).
    r.call("ffi_register")
    yield r
    r.close()


# The LAPACK results themselves are bit-identical in every dtype. These few
# routines follow their factorization with a matmul, and the workers' XLA CPU
# plugin wheel rounds some float64 and complex64 dots differently (1 ulp)
# from jaxlib's CPU client: measured here, a plain complex64 jit(x @ x.T) on
# that plugin loaded straight into JAX (no causeway) differs from stock the
# same way (test_x64.py's F64_DOT_TOL is the float64 case). Which dots
# differ depends on the host's CPU: on an AMD EPYC without AVX-512
# (2026-12-03) float64 polar differed by 1 ulp in 1 of 25 elements, and a
# plain float64 jit(u @ vh) of the same inputs, the wheel loaded straight
# into JAX, differed from stock by up to 2 ulps.
_DOT = "a matmul after the LAPACK call: the plugin wheel's dot rounds differently from jaxlib's"
LINALG_TOL = {
    "linalg[float64]['pinv']": (1e-14, 0.0, _DOT),
    "linalg[float64]['scipy_polar']": (1e-14, 0.0, _DOT),
    "linalg[complex64]['pinv']": (1e-6, 0.0, _DOT),
    "linalg[complex64]['scipy_expm']": (1e-6, 0.0, _DOT),
    "linalg[complex64]['scipy_polar']": (1e-6, 0.0, _DOT),
}


def _all_ok(result: dict, side: str) -> None:
    bad = {k: v["error"] for k, v in result.items() if not v["ok"]}
    assert not bad, f"{side} failed: {bad}"


@pytest.mark.parametrize("dtype", ["float32", "float64", "complex64", "complex128"])
def test_linalg_same_bits(ref_ffi, cw_ffi, dtype):
    want, got = harness.run_both(ref_ffi, cw_ffi, "linalg_suite", dtype=dtype)
    _all_ok(want, "stock JAX")
    _all_ok(got, "causeway")
    assert len(got) >= 32
    harness.assert_same(want, got, f"linalg[{dtype}]", LINALG_TOL)


def test_linalg_sharded(ref_ffi, cw_ffi):
    want, got = harness.run_both(ref_ffi, cw_ffi, "linalg_sharded")
    harness.assert_same(want, got, "linalg_sharded")


def test_linalg_each_island(ref_ffi, cw_ffi):
    # Workers that load (not compile) the executable load jaxlib's kernels too.
    want, got = harness.run_both(ref_ffi, cw_ffi, "linalg_each_island")
    harness.assert_same(want, got, "linalg_each_island")


def test_user_ffi_library(ref_ffi, cw_ffi):
    want, got = harness.run_both(ref_ffi, cw_ffi, "ffi_call")
    assert want["ok"], want
    assert got["ok"], got
    harness.assert_same(want, got, "ffi_call")


def test_kernel_error_reaches_caller(ref_ffi, cw_ffi):
    # Bad operands (int32 where the kernel wants float32): the kernel's own
    # message, on both sides.
    want, got = harness.run_both(ref_ffi, cw_ffi, "ffi_call", dtype="int32")
    assert not want["ok"] and not got["ok"]
    assert "cw_test_add_one: wants float32 in and out" in want["error"]
    assert "cw_test_add_one: wants float32 in and out" in got["error"]
    want, got = harness.run_both(ref_ffi, cw_ffi, "health")
    harness.assert_same(want, got, "health after a failing kernel")


@requires_causeway
def test_missing_target_names_it(cw_ffi):
    got = cw_ffi.call("ffi_call", target="cw_nobody_has_this")
    assert not got["ok"]
    for words in ("cw_nobody_has_this", "has no handler", "--ffi-libraries",
                  "CAUSEWAY_FFI_LIBRARIES", "cw_test_ffi_targets (2 targets)", "jaxlib",
                  "docs/ffi.md"):
        assert words in got["error"], f"{words!r} not in {got['error']!r}"
    assert len(cw_ffi.call("health")["per_device"]) == harness.NUM_DEVICES


# ---- Bad input at the worker -----------------------------------------------------------

def _fake_venv(root: str) -> str:
    """A venv of the pinned Python without jaxlib (nor anything else)."""
    # The pinned venv's pyvenv.cfg names its base installation and version.
    cfg = pathlib.Path(harness.PYTHON).parents[1] / "pyvenv.cfg"
    text = cfg.read_text()
    home = re.search(r"^home\s*=\s*(.+)$", text, re.M).group(1).strip()
    version = re.search(r"^version\s*=\s*(.+)$", text, re.M).group(1).strip()
    os.makedirs(os.path.join(root, "bin"))
    site = os.path.join(root, "lib", "python" + ".".join(version.split(".")[:2]),
                        "site-packages")
    os.makedirs(site)
    with open(os.path.join(root, "pyvenv.cfg"), "w") as f:
        f.write(f"home = {home}\ninclude-system-site-packages = false\nversion = {version}\n")
    os.symlink(os.path.join(home, "python3"), os.path.join(root, "bin", "python3"))
    return site


def _start_worker(tmp: str, *flags: str, timeout: float = 120.0):
    exe = os.path.join(harness.bin_dir(), "causeway-worker")
    return subprocess.run(
        [exe, "--plugin", harness.cpu_plugin(), "--listen", os.path.join(tmp, "w.sock"),
         "--devices", "1", *flags],
        capture_output=True, text=True, timeout=timeout)


@requires_causeway
@pytest.mark.parametrize("case", ["no_library", "no_symbol", "no_jaxlib"])
def test_worker_refuses_what_it_was_asked_for(case):
    with tempfile.TemporaryDirectory(prefix="cw-ffi-") as tmp:
        if case == "no_library":
            flags, words = ["--ffi-libraries", "/nonexistent/libmine.so:my_targets"], \
                "cannot load FFI library /nonexistent/libmine.so"
        elif case == "no_symbol":
            flags, words = ["--ffi-libraries", f"{FFI_LIB}:no_such_table"], \
                f"FFI library {FFI_LIB} has no symbol no_such_table"
        else:
            _fake_venv(os.path.join(tmp, "venv"))
            python = os.path.join(tmp, "venv", "bin", "python3")
            flags, words = ["--jaxlib-python", python], \
                "cannot import jaxlib.cpu._lapack: ModuleNotFoundError"
        r = _start_worker(tmp, *flags)
        assert r.returncode != 0, r.stderr
        assert "causeway-worker: fatal:" in r.stderr and words in r.stderr, r.stderr


@requires_causeway
def test_embedded_jaxlib_that_does_not_import(ref_ffi):
    """The embedded workers find jaxlib beside their PJRT plugin; here that
    is a venv without jaxlib: a LAPACK call fails naming why, and the cluster
    keeps computing."""
    with tempfile.TemporaryDirectory(prefix="cw-ffi-") as tmp:
        site = _fake_venv(os.path.join(tmp, "venv"))
        plugin = os.path.join(site, "xla_cpu", "pjrt_plugin.so")
        os.makedirs(os.path.dirname(plugin))
        os.symlink(harness.cpu_plugin(), plugin)
        env = harness.causeway_env()
        env["CAUSEWAY_PJRT_PLUGIN"] = plugin
        r = harness.Runner("causeway-ffi-nojaxlib", env)
        try:
            got = r.call("linalg", op="solve")
            assert not got["ok"], got
            for words in ("lapack_", "has no handler",
                          "jaxlib's kernels did not load", "No module named 'jaxlib'"):
                assert words in got["error"], f"{words!r} not in {got['error']!r}"
            assert len(r.call("health")["per_device"]) == harness.NUM_DEVICES
            kids = harness.cluster_children(r.pid)
            assert len(kids) == 1 + harness.NUM_WORKERS
            assert all(harness.proc_alive(pid) for pid, _ in kids.values()), kids
        finally:
            r.close()
