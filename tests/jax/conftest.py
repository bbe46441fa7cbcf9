"""Fixtures of the end-to-end suite (see harness.py for the design).

ref        session: stock CPU JAX, 8 devices (x32)
cw         module:  the target (causeway: one embedded cluster per module)
ref64/cw64 module:  the same with JAX_ENABLE_X64=1 (test_x64.py)
"""
from __future__ import annotations

import os
import shutil

import pytest

import harness


def pytest_report_header(config):
    lines = [f"causeway e2e: target={harness.TARGET}"]
    if harness.on_causeway():
        lines.append(f"  CAUSEWAY_PJRT_LIBRARY={harness.pjrt_library()}")
        lines.append(f"  CAUSEWAY_BIN_DIR={harness.bin_dir()}")
        why = harness.missing_build()
        if why:
            lines.append(f"  NOT RUNNABLE: {why}")
    return lines


def pytest_sessionfinish(session, exitstatus):
    if harness._log_dir is None or os.environ.get("CW_JAX_LOG_DIR"):
        return
    if exitstatus == 0:
        shutil.rmtree(harness._log_dir, ignore_errors=True)
    else:
        tr = session.config.pluginmanager.get_plugin("terminalreporter")
        if tr:
            tr.write_line(f"runner logs kept in {harness._log_dir}")


requires_causeway = pytest.mark.skipif(
    not harness.on_causeway(),
    reason="meaningful only on causeway (CW_JAX_TARGET=cpu validates the checks on stock JAX)")


def plugin_front_only(why: str):
    """Skips on the proxy front (CW_JAX_TARGET=proxy): the test drives the
    plugin front's own machinery, `why`."""
    return pytest.mark.skipif(harness.on_proxy(), reason=f"plugin front only: {why}")


def _need_build():
    if harness.on_causeway():
        why = harness.missing_build()
        if why:
            pytest.fail(f"causeway is not built: {why}", pytrace=False)


def _module_name(request) -> str:
    return request.module.__name__.rsplit(".", 1)[-1].replace("test_", "")


@pytest.fixture(scope="session")
def ref():
    r = harness.Runner("stock", harness.stock_env())
    yield r
    r.close()


@pytest.fixture(scope="module")
def cw(request):
    _need_build()
    r = harness.Runner(f"{harness.TARGET}-{_module_name(request)}", harness.target_env())
    yield r
    r.close()


@pytest.fixture(scope="module")
def ref64():
    r = harness.Runner("stock-x64", harness.stock_env(x64=True))
    yield r
    r.close()


@pytest.fixture(scope="module")
def cw64(request):
    _need_build()
    r = harness.Runner(f"{harness.TARGET}-{_module_name(request)}", harness.target_env(x64=True))
    yield r
    r.close()


@pytest.fixture
def check(ref, cw):
    """check(name, **kwargs): runs it on both sides, asserts bit equality, returns both."""
    def run(name, tol=None, timeout=300.0, **kwargs):
        want, got = harness.run_both(ref, cw, name, timeout=timeout, **kwargs)
        harness.assert_same(want, got, name, tol)
        return want, got
    return run
