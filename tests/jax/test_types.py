"""Every element type and stride kind, unsafe_buffer_pointer, double
donation, cost_analysis and JAX's CPU backend beside causeway (issue 10
items 4-6): causeway against stock JAX, checks in types_checks.py."""
import numpy as np
import pytest

import harness
import types_checks

CHECKS = str(harness.HERE / "types_checks.py")


@pytest.fixture(scope="module")
def ref():
    env = harness.stock_env()
    env["CW_RUNNER_CHECKS"] = CHECKS
    r = harness.Runner("stock-types", env)
    yield r
    r.close()


@pytest.fixture(scope="module")
def cw(ref):
    if harness.on_causeway() and harness.missing_build():
        pytest.fail(f"causeway is not built: {harness.missing_build()}", pytrace=False)
    env = harness.target_env()
    env["CW_RUNNER_CHECKS"] = CHECKS
    r = harness.Runner(f"{harness.TARGET}-types", env)
    yield r
    r.close()


def test_every_element_type(check):
    want, got = check("dtypes_all", names=types_checks.EXOTIC)
    for name in types_checks.EXOTIC:
        assert got[name]["dtype"] == name


def test_wide_types_x64(check):
    names = ["float64", "complex128", "int64", "uint64", "bool", "complex64"]
    want, got = check("dtypes_all", names=names, x64=True)
    for name in names:
        assert got[name]["dtype"] == name


def test_tokens(check):
    want, got = check("tokens")
    assert got["out"] == "Token"


STRIDE_TYPES = ["float32", "int8", "bool", "bfloat16", "float16", "uint16", "complex64", "int4",
                "uint2", "float8_e4m3fn", "float4_e2m1fn"]


# jaxlib's IFRT proxy client refuses host views with negative or zero strides
# before any request ("Negative or zero strides are not fully supported"), so
# the proxy front runs the positive ones and checks that refusal.
POSITIVE_ONLY = harness.on_proxy()


def test_every_stride(check):
    want, got = check("strides", names=STRIDE_TYPES, positive_only=POSITIVE_ONLY)
    assert set(got["float32"]) >= {"transposed", "every_other", "overlapping_windows"}
    if not POSITIVE_ONLY:
        assert set(got["float32"]) >= {"rows_reversed", "broadcast_rows"}


def test_every_stride_x64(check):
    check("strides", names=["float64", "complex128", "int64"], x64=True,
          positive_only=POSITIVE_ONLY)


@pytest.mark.skipif(not harness.on_proxy(), reason="a refusal of jaxlib's proxy client")
def test_proxy_client_refuses_negative_strides(ref, cw):
    want, got = harness.run_both(ref, cw, "negative_stride_put")
    assert want["ok"], want
    assert not got["ok"] and "Negative or zero strides are not fully supported" in got["error"]
    want, got = harness.run_both(ref, cw, "health")
    harness.assert_same(want, got, "health after the refusal")


@pytest.mark.skipif(harness.on_proxy(), reason="jaxlib's proxy client has no buffer pointers; "
                    "test_proxy_client_refuses_buffer_pointer checks its refusal")
def test_unsafe_buffer_pointer(check):
    want, got = check("buffer_pointer")
    assert got["stable"] and got["distinct"] and got["nonzero"]


@pytest.mark.skipif(not harness.on_proxy(), reason="a refusal of jaxlib's proxy client")
def test_proxy_client_refuses_buffer_pointer(cw):
    with pytest.raises(harness.CheckFailed, match="implemented for a PjRt-compatible backend only"):
        cw.call("buffer_pointer")


# The proxy reports each executable's donatable inputs, as XLA's own proxy
# server does (without them jaxlib's client asks the server after every run
# whether each argument still lives: a round trip per argument per call).
# Knowing them, the client marks a donated argument deleted as it sends the
# call, before the call can be refused: a refused double donation leaves the
# array deleted, and the client refuses the second use itself ("Array already
# deleted"). test_proxy_donate_twice_refused checks what the proxy front does.
@pytest.mark.xfail(harness.on_proxy(), strict=True,
                   reason="jaxlib's proxy client deletes a donated argument before the call is "
                          "refused")
def test_donate_twice_refused(check):
    want, got = check("donate_twice")
    assert not got["both_donated"]["ok"] and got["both_donated"]["names_it"], got
    assert not got["donated_and_kept"]["ok"], got


@pytest.mark.skipif(not harness.on_proxy(), reason="the proxy front's answer")
def test_proxy_donate_twice_refused(cw):
    got = cw.call("donate_twice_fresh")
    for name in ("both_donated", "donated_and_kept", "kept_and_donated"):
        assert not got[name]["ok"] and got[name]["x_deleted"], got
    # The one the client sends is refused by the proxy, which names it.
    assert "donated in the same call" in got["kept_and_donated"]["message"], got
    np.testing.assert_array_equal(got["distinct"], np.arange(8.0) * 2 + 3)
    # One output: only its aliased input is donated, as on stock JAX.
    assert got["distinct_deleted"] == [True, False], got


def test_cost_analysis(check):
    # Through the proxy: jaxlib's client asks the server, and causeway-proxy
    # prices the optimized program itself, every key as XLA gives it
    # (src/protocol/cw_hlo_cost.c; XLA's CPU plugin has no cost analysis).
    want, got = check("cost_analysis")
    assert got["matmul"] and got["matmul"].get("flops", 0) > 0, got


def test_cpu_beside(check):
    want, got = check("cpu_beside")
    assert got["cpu_platform"] == "cpu" and got["y_platform"] == "cpu"


# Memory kinds (issue 10 item 3).

def test_memory_kinds_listed(check):
    want, got = check("memory_kinds_listed")
    assert got[0]["kinds"] == ["device", "pinned_host", "unpinned_host"], got[0]
    assert got[0]["default"] == "device" and got[0]["own"], got[0]


def test_memory_kinds_device_put(check):
    want, got = check("memory_kinds_put")
    assert got["d0_np_pinned_host"]["kind"] == "pinned_host", got
    assert got["d0_pinned_host_to_unpinned_host"]["kind"] == "unpinned_host", got
    assert got["cross"]["kind"] == "pinned_host" and got["cross"]["device"], got["cross"]
    assert got["unknown"]["names_it"], got["unknown"]


def test_memory_kinds_in_jit(check):
    want, got = check("memory_kinds_jit")
    assert got["out_pinned_host"]["kind"] == "pinned_host", got
    assert got["in_out"]["kinds"] == ["device", "pinned_host"], got["in_out"]
    assert got["sharded"]["shard_kinds"] == ["pinned_host"], got["sharded"]


def test_memory_kinds_offloaded_activations(check):
    want, got = check("memory_kinds_offload")
    assert want["offloaded"] and got["offloaded"], (want["offloaded"], got["offloaded"])


def test_big_transfers(check):
    # Same bits as stock for arrays that move by same-host copies on causeway.
    want, got = check("big_transfers", positive_only=POSITIVE_ONLY)
    assert got["dense"].nbytes == 4 << 20
