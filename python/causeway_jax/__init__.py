"""JAX plugin entry point for causeway (selected with JAX_PLATFORMS=causeway).

JAX calls initialize() at start-up (entry point group `jax_plugins`). It
registers libcauseway_pjrt.so under the name "causeway" and, for the embedded
cluster the plugin starts when CAUSEWAY_CONTROLLER is unset, tells it where
the vendor PJRT plugin for the local workers lives (CAUSEWAY_PJRT_PLUGIN) and
how many CPU devices JAX asks for (jax_num_cpu_devices, passed as the create
option cpu_device_count; the plugin reads XLA_FLAGS itself).

JAX's in-process CPU backend stays beside causeway: JAX_PLATFORMS=causeway
reads as "causeway,cpu" (causeway the default backend, as the first), so code
that asks for a CPU device (jax.devices("cpu"), backend="cpu", the eager path
of jax.debug.callback and pure_callback) finds one, as it does next to a GPU.
It also answers compiled.cost_analysis() (see _answer_cost_analysis).

Environment:
  CAUSEWAY_PJRT_LIBRARY  path of libcauseway_pjrt.so (default: the one the
                         causeway wheel installed, else the repository's
                         build/release/lib/libcauseway_pjrt.so)
  CAUSEWAY_CONTROLLER    host:port or socket path of a running controller;
                         unset: start a private local cluster
  CAUSEWAY_PJRT_PLUGIN   the workers' PJRT plugin (default: lammps_jax_pjrt_cpu)
"""
from __future__ import annotations

import logging
import os
import pathlib

logger = logging.getLogger(__name__)

PLUGIN_NAME = "causeway"


def _repo_root() -> pathlib.Path:
    # python/causeway_jax/__init__.py -> repository root.
    return pathlib.Path(__file__).resolve().parents[2]


def _bundled() -> str | None:
    # The wheel's copy (python/causeway in a clone has none).
    try:
        import causeway
    except ImportError:
        return None
    return causeway.pjrt_library()


def library_path() -> str:
    """Where libcauseway_pjrt.so is loaded from."""
    env = os.environ.get("CAUSEWAY_PJRT_LIBRARY")
    if env:
        return env
    return _bundled() or str(_repo_root() / "build" / "release" / "lib" / "libcauseway_pjrt.so")


def _set_worker_plugin() -> None:
    # The C library cannot ask Python where the wheel put the CPU plugin, so
    # it reads CAUSEWAY_PJRT_PLUGIN; child processes inherit it.
    if os.environ.get("CAUSEWAY_PJRT_PLUGIN"):
        return
    try:
        import lammps_jax_pjrt_cpu as cpu_plugin
    except ImportError:
        return  # joining a running cluster needs no local plugin
    os.environ["CAUSEWAY_PJRT_PLUGIN"] = str(cpu_plugin.PLUGIN_PATH)


def _create_options() -> dict:
    # Read when JAX creates the client (after the program's own
    # jax.config.update("jax_num_cpu_devices", N), as JAX's CPU backend does).
    from jax._src import xla_bridge
    n = xla_bridge.num_cpu_devices.value
    return {"cpu_device_count": n} if n >= 1 else {}


def _keep_cpu_beside() -> None:
    # JAX initializes only the platforms listed in jax_platforms, and reads it
    # after plugin discovery: add "cpu" after "causeway" when it is missing.
    from jax._src import config
    platforms = config.jax_platforms.value
    if not platforms:
        return  # every registered backend starts, "cpu" among them
    names = platforms.split(",")
    if PLUGIN_NAME in names and "cpu" not in names:
        config.config.update("jax_platforms", ",".join(names + ["cpu"]))


def _answer_cost_analysis() -> None:
    # compiled.cost_analysis(): the workers' plugin (XLA's CPU plugin behind
    # the C API) has none to forward, so JAX would say None where stock CPU
    # JAX answers. The answer is XLA's cost analysis of the optimized
    # program, which the executable carries: jaxlib computes it here with the
    # CPU backend beside causeway (the same numbers stock JAX gives).
    from jax._src import stages, xla_bridge
    from jax._src.lib import _jax

    original = stages.Executable.cost_analysis
    if getattr(original, "_causeway", False):
        return

    def cost_analysis(self):
        try:
            return original(self)
        except NotImplementedError:
            exe = self.xla_extension_executable()
            backends = xla_bridge.backends()
            if (exe is None or "cpu" not in backends
                    or getattr(exe, "client", None) is not backends.get(PLUGIN_NAME)):
                raise
            modules = exe.hlo_modules()
            if len(modules) != 1:
                raise
            return _jax.hlo_module_cost_analysis(backends["cpu"], modules[0])

    cost_analysis._causeway = True
    stages.Executable.cost_analysis = cost_analysis


def initialize() -> None:
    path = library_path()
    if not os.path.exists(path):
        logger.warning(
            "causeway: %s not found; install the causeway wheel, build it "
            "(cmake --build build/release) or set CAUSEWAY_PJRT_LIBRARY", path)
        return
    _set_worker_plugin()
    from jax._src import xla_bridge
    xla_bridge.register_plugin(PLUGIN_NAME, library_path=path, options=_create_options)
    _keep_cpu_beside()
    _answer_cost_analysis()
