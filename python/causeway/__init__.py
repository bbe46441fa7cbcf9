"""causeway as an installed package: where the wheel put its native parts.

The wheel lays them out as the plugin expects (it starts the daemons of its
embedded cluster from bin/ beside its own lib/, unless CAUSEWAY_BIN_DIR says
otherwise):

    causeway/lib/libcauseway_pjrt.so     the PJRT plugin JAX loads
    causeway/lib/libcauseway_client.so   the C client library (causeway_client)
    causeway/bin/causeway                the operations tool (causeway up/down/status ...)
    causeway/bin/causeway-controller
    causeway/bin/causeway-worker

In a clone these files are not here (python/causeway has none); callers then
fall back to the repository's build (build/release).
"""
from __future__ import annotations

import os
import pathlib

_HERE = pathlib.Path(__file__).resolve().parent


def bin_dir() -> pathlib.Path:
    """The directory of the bundled daemons and tool."""
    return _HERE / "bin"


def lib_dir() -> pathlib.Path:
    """The directory of the bundled libraries."""
    return _HERE / "lib"


def bundled(path: pathlib.Path) -> str | None:
    """`path` as a string when the wheel installed it, else None."""
    return str(path) if path.exists() else None


def pjrt_library() -> str | None:
    return bundled(lib_dir() / "libcauseway_pjrt.so")


def client_library() -> str | None:
    return bundled(lib_dir() / "libcauseway_client.so")


def cpu_plugin() -> str | None:
    """XLA's CPU PJRT plugin for workers (the `cpu` extra), or None."""
    try:
        import lammps_jax_pjrt_cpu as cpu
    except ImportError:
        return None
    return str(cpu.PLUGIN_PATH)


def worker_env(env: dict | None = None) -> dict:
    """`env` (default: os.environ) with CAUSEWAY_PJRT_PLUGIN set from the
    installed CPU plugin when it names none: the C programs cannot ask Python
    where the wheel put it."""
    out = dict(os.environ if env is None else env)
    if not out.get("CAUSEWAY_PJRT_PLUGIN"):
        plugin = cpu_plugin()
        if plugin:
            out["CAUSEWAY_PJRT_PLUGIN"] = plugin
    return out
