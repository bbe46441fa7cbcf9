"""What a worker cannot do for the client: each works like stock JAX or raises an
error that names what is missing; none may crash or wedge a worker, and the
cluster computes afterwards (checked against stock JAX)."""
import re

import pytest

import harness

# An error "names what is missing" if it says which feature or custom call.
MISSING = re.compile(r"callback|custom.?call|ffi|lapack|handler|not supported|unimplemented|"
                     r"host", re.I)


def _still_serving(ref, cw):
    want, got = harness.run_both(ref, cw, "health")
    harness.assert_same(want, got, "health after the check")
    if harness.on_causeway():
        kids = harness.cluster_children(cw.cluster_pid)
        dead = [n for n, (pid, _) in kids.items() if not harness.proc_alive(pid)]
        assert len(kids) == 1 + harness.NUM_WORKERS and not dead, f"cluster processes {kids}"


def _works_or_names_missing(want, got, what, tol=None):
    assert want["ok"], f"stock JAX failed {what}: {want}"
    if got["ok"]:
        harness.assert_same(want["value"], got["value"], what, tol)
    else:
        assert MISSING.search(got["error"]), f"{what}: error does not say what is missing: " \
                                             f"{got['error']}"


def test_xla_rejects_program(ref, cw):
    want, got = harness.run_both(ref, cw, "xla_rejects")
    assert not want["ok"] and not got["ok"]
    # XLA's own message, as stock JAX shows it, minus the status-code prefix.
    core = re.sub(r"^\w+: (\w+: )?", "", want["error"]).strip()
    core = core.split("\n")[0]
    assert core in got["error"], f"XLA's message {core!r} missing from {got['error']!r}"
    _still_serving(ref, cw)


def test_debug_print(ref, cw):
    want, got = harness.run_both(ref, cw, "debug_print")
    _works_or_names_missing(want, got, "jax.debug.print")
    if got["ok"]:
        assert "cw-debug-print sum=6.0" in cw.log_text(), "printed nothing"
    _still_serving(ref, cw)


def test_pure_callback(ref, cw):
    want, got = harness.run_both(ref, cw, "pure_callback")
    _works_or_names_missing(want, got, "jax.pure_callback")
    _still_serving(ref, cw)


@pytest.mark.parametrize("op", ["solve", "cholesky", "eigh"])
def test_linalg_lapack(ref, cw, op):
    want, got = harness.run_both(ref, cw, "linalg", op=op)
    # If it runs, it runs the same LAPACK kernels through the same XLA: same bits.
    _works_or_names_missing(want, got, f"jnp.linalg {op}")
    _still_serving(ref, cw)
