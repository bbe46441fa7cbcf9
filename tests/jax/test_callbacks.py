"""Host callbacks run in the client, as in stock JAX: jax.debug.print (on the
client's stdout), jax.debug.callback, jax.pure_callback (jit, vmap with each
vmap_method, scan and while_loop, shard_map over an island), ordered
io_callback, exceptions and wrong results, jax.experimental.buffer_callback
(callback_checks.py).

JAX runs a callable with a CPU device at hand (jax.local_devices(backend=
"cpu")), so the causeway runner here has JAX_PLATFORMS=causeway,cpu: causeway
is the default backend, the programs run on its workers, and JAX's in-process
CPU backend is beside it as users combine backends."""

import pytest

import harness

CHECKS = str(harness.HERE / "callback_checks.py")

# jaxlib 0.11.2's IFRT proxy client forwards only send/recv host callbacks,
# which JAX emits for TPU alone; on CPU devices it emits FFI callbacks, and the
# client refuses the compile before any request reaches causeway-proxy
# (test_proxy_client_refuses_ffi_callbacks checks that refusal).
proxy_refuses = pytest.mark.skipif(
    harness.on_proxy(), reason="jaxlib's proxy client refuses FFI host callbacks (\"Unsupported "
                               "host callback type\") before they reach the proxy")


def _env(env: dict, platforms: str | None) -> dict:
    env["CW_RUNNER_CHECKS"] = CHECKS
    if platforms:
        env["JAX_PLATFORMS"] = platforms
    return env


@pytest.fixture(scope="module")
def cref():
    r = harness.Runner("stock-callbacks", _env(harness.stock_env(), None))
    yield r
    r.close()


@pytest.fixture(scope="module")
def ccw():
    if harness.on_causeway():
        why = harness.missing_build()
        if why:
            pytest.fail(f"causeway is not built: {why}", pytrace=False)
        front = harness.proxy_env() if harness.on_proxy() else harness.causeway_env()
        env = _env(front, f"{harness.TARGET},cpu")
    else:
        env = _env(harness.stock_env(), None)
    r = harness.Runner(f"{harness.TARGET}-callbacks", env)
    yield r
    r.close()


def both(cref, ccw, name, **kwargs):
    want, got = harness.run_both(cref, ccw, name, **kwargs)
    harness.assert_same(want, got, name)
    return want, got


@proxy_refuses
def test_debug_print_on_client_stdout(cref, ccw):
    both(cref, ccw, "cb_debug_print")
    line = "cw-cb-print sum=6.0 first=0.0"
    assert line in cref.log_text()
    assert line in ccw.log_text(), "jax.debug.print's text is not on the client's stdout"


@proxy_refuses
def test_debug_callback(cref, ccw):
    want, got = both(cref, ccw, "cb_debug_callback")
    assert got["ints"] == [6, 6, 6]


@proxy_refuses
def test_callback_sees_the_callers_context(cref, ccw):
    """Callbacks ran on a thread of the plugin's pool, where the caller's
    thread-local JAX context managers were not set (the conformance sweep:
    Pallas interpret tests that read the abstract mesh). The caller, waiting
    in Execute, runs them now, as stock JAX's calling thread does."""
    want, got = both(cref, ccw, "cb_caller_context")
    assert len(got["seen"]) == 4, got["seen"]
    assert all(s == {"same_thread": True, "precision": "highest", "rank_promotion": "raise"}
               for s in got["seen"]), got["seen"]


@proxy_refuses
def test_pure_callback_jit(cref, ccw):
    both(cref, ccw, "cb_pure_jit")


@proxy_refuses
def test_pure_callback_subbyte_types(cref, ccw):
    # Packed on the device, one byte per element in the callback.
    both(cref, ccw, "cb_pure_subbyte")


@proxy_refuses
def test_dce_sink(cref, ccw):
    both(cref, ccw, "cb_dce_sink")


@proxy_refuses
def test_pure_callback_scalar_and_empty(cref, ccw):
    both(cref, ccw, "cb_pure_scalar_and_empty")


@proxy_refuses
@pytest.mark.parametrize("method", ["sequential", "sequential_unrolled", "expand_dims",
                                    "broadcast_all", "legacy_vectorized"])
def test_pure_callback_vmap(cref, ccw, method):
    want, got = both(cref, ccw, "cb_pure_vmap", method=method)
    assert got["calls"] == want["calls"]


@proxy_refuses
def test_pure_callback_scan_while(cref, ccw):
    both(cref, ccw, "cb_scan_while")


@proxy_refuses
def test_pure_callback_shard_map(cref, ccw):
    both(cref, ccw, "cb_shard_map")


@proxy_refuses
def test_partitioned_debug_callback_in_shard_map(cref, ccw):
    """Per shard, as stock: the way to a partitioned callback that a plain
    sharded jit cannot compile for a PJRT C API plugin (the xfail below)."""
    want, got = both(cref, ccw, "cb_shard_map_partitioned")
    assert len(got["shards"]) == got["devices"] > 1, got["shards"]


@proxy_refuses
def test_io_callback_ordered(cref, ccw):
    want, got = both(cref, ccw, "cb_io_ordered")
    assert got["log"] == sum(([i, i + 100] for i in range(6)), [])


@proxy_refuses
def test_exception_reaches_caller(cref, ccw):
    want, got = harness.run_both(cref, ccw, "cb_exception")
    assert not want["ok"] and not got["ok"]
    # Raised by the call, as stock JAX (no failed runtime token left behind).
    assert got["at"] == want["at"] == "call", (want["at"], got["at"])
    assert got["type"] == want["type"], (want["error"], got["error"])
    for e in (want["error"], got["error"]):
        assert "ValueError: cw-boom-42 from the callback" in e, e
    harness.assert_same(want["after"], got["after"], "after the exception")


@proxy_refuses
@pytest.mark.parametrize("kind", ["shape", "dtype"])
def test_wrong_result_is_a_clear_error(cref, ccw, kind):
    want, got = harness.run_both(cref, ccw, "cb_wrong_result", kind=kind)
    assert not want["ok"] and not got["ok"], (want, got)
    # JAX's own check of pure_callback's results speaks, on both sides, as
    # the callable's exception.
    last = want["error"].strip().split("\n")[-1]
    assert "Incorrect output" in last and last in got["error"], (want["error"], got["error"])
    harness.assert_same(want["after"], got["after"], "after the wrong result")


@proxy_refuses
def test_slow_callback_stalls_nothing_else(cref, ccw):
    want, got = both(cref, ccw, "cb_slow_beside")
    assert got["fast_within_slow"], "jits beside a slow callback waited for it"


@proxy_refuses
def test_island_program_beside_a_waiting_callback(cref, ccw):
    both(cref, ccw, "cb_island_beside_waiting_callback")


@proxy_refuses
def test_callbacks_in_sharded_jit(cref, ccw):
    both(cref, ccw, "cb_sharded_jit")
    assert "cw-cb-sharded total=" in ccw.log_text()


@proxy_refuses
@pytest.mark.xfail(harness.on_causeway(), strict=True,
                   reason="XLA's SPMD partitioner refuses the per-shard callback as the worker's "
                          "CPU plugin compiles it (RET_CHECK 'Side-effect HLO must have "
                          "sharding'), as it does loaded straight into stock JAX: its "
                          "partitioner is registered in jaxlib's own XLA only")
def test_partitioned_debug_callback_in_sharded_jit(cref, ccw):
    want, got = both(cref, ccw, "cb_sharded_jit", partitioned=True)
    assert len(got["shards"]) == 4, got["shards"]


@proxy_refuses
def test_buffer_callback(cref, ccw):
    want, got = both(cref, ccw, "cb_buffer")
    assert got["seen"]["aliased"] and got["seen"]["flags"][:2] == (False, True), got["seen"]
    assert "XLA FFI GPU context is not available" in got["seen"]["stream"], got["seen"]
    assert got["effect_calls"] == [3.0] and got["boom"] == "JaxRuntimeError" and got["boom_says"]


@pytest.mark.skipif(not harness.on_proxy(), reason="the proxy front's refusal of FFI callbacks")
def test_proxy_client_refuses_ffi_callbacks(cref, ccw):
    """The refusal is jaxlib's, named, and the session computes afterwards."""
    with pytest.raises(harness.CheckFailed, match="Unsupported host callback type"):
        ccw.call("cb_debug_print")
    want, got = harness.run_both(cref, ccw, "health")
    harness.assert_same(want, got, "health after the refused callback")
