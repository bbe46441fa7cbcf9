"""Custom calls on workers (issue 10 item 2): its own CTest entry (ffi_e2e)
beside jax_e2e, whose harness, checks and session hooks it reuses
(tests/jax/harness.py, checks.py, conftest.py)."""
from __future__ import annotations

import importlib.util
import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "jax"))

_spec = importlib.util.spec_from_file_location("cw_jax_conftest",
                                               HERE.parent / "jax" / "conftest.py")
_jax = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_jax)

pytest_report_header = _jax.pytest_report_header
pytest_sessionfinish = _jax.pytest_sessionfinish  # runner logs: kept only on failure
requires_causeway = _jax.requires_causeway
