"""Console entry points of the wheel: `causeway`, `causeway-controller` and
`causeway-worker` run the bundled binaries in place of this process (exec,
so signals, exit codes and the process id are theirs: a service manager
that starts `causeway-worker` supervises the worker itself)."""
from __future__ import annotations

import os
import sys

import causeway


def _exec(program: str) -> None:
    path = causeway.bin_dir() / program
    if not path.exists():
        sys.stderr.write(f"{program}: {path} is missing: this causeway package has no "
                         "native parts (install the wheel, or run the build's own "
                         f"build/release/bin/{program} from a clone)\n")
        sys.exit(127)
    env = causeway.worker_env()
    os.execve(str(path), [str(path), *sys.argv[1:]], env)


def tool() -> None:
    _exec("causeway")


def controller() -> None:
    _exec("causeway-controller")


def worker() -> None:
    _exec("causeway-worker")
