"""Multi-process suites of the resource manager (issue 4): real controllers,
workers and JAX clients started by hand, killed for real. They reuse
tests/jax/harness.py (Runner: a JAX client in its own process driven by the
checks in tests/jax/checks.py and tests/cluster/*_checks.py; HandCluster:
daemons started by hand on loopback TCP)."""
from __future__ import annotations

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "jax"))
sys.path.insert(0, str(HERE))
