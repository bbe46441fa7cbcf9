"""The flood suite (issue 11 item 2): a hand-started cluster under connection
floods, with tests/jax/harness.py (Runner, HandCluster) and the flooder in
flood.py."""
from __future__ import annotations

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "jax"))
sys.path.insert(0, str(HERE))
