"""The IFRT proxy front (issue 14): causeway-proxy in front of a cluster
started by hand, driven by stock JAX's own IFRT proxy client (jaxlib's
`ifrt_proxy`, registered as the `proxy` backend) and by a raw gRPC peer
(grpcio) for what that client never sends. Reuses tests/jax/harness.py."""
from __future__ import annotations

import pathlib
import sys

HERE = pathlib.Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "jax"))
sys.path.insert(0, str(HERE))
