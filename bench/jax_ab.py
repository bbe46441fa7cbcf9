#!/usr/bin/env python3
"""Two or more builds of causeway's plugin compared on JAX's async chain, each
in several processes at once, against stock in-process JAX in the same rounds.

Usage (from the repository root, with the project's venv):

    .venv/bin/python bench/jax_ab.py --lib old/libcauseway_pjrt.so \\
        --lib build/release/lib/libcauseway_pjrt.so [--procs 2] [--rounds 100] \\
        [--calls 30000] [--plugin null|xla] [--no-aslr]

Why several processes per build: two processes of the same build differ by up
to 7% on this 2-core VM, and each keeps its speed for its whole life
(docs/performance.md, session 34). One process per build therefore measures
which process was lucky as much as which build is faster. Each process here
is `jax_bench.py --serve causeway` with its own embedded cluster; all stay up,
idle but for the one asked, and every round runs one chain of N calls in each
process, in a shuffled order. The table gives, per process, its median calls/s
and its ratio to stock per round; per build, the median of its processes'
rounds against the first build's, with how many rounds it won.

A build is a libcauseway_pjrt.so; the daemons are build/release's (or
CAUSEWAY_BIN_DIR's). The file must keep its name (jax_bench checks that
libcauseway_pjrt is what JAX loaded): copy each build into a folder of its own.
--no-aslr starts every process under `setarch -R`.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import random
import statistics
import subprocess
import sys
import time

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parent


def envs_for(plugin: str, libs: list, procs: int) -> dict:
    sys.path.insert(0, str(HERE))
    import jax_bench  # noqa: E402 - its environments and its --serve mode
    envs, _ = jax_bench.side_envs(plugin)
    out = {"stock": envs["stock"]}
    for b, lib in enumerate(libs):
        for p in range(procs):
            env = dict(envs["causeway"])
            env["CAUSEWAY_PJRT_LIBRARY"] = str(pathlib.Path(lib).resolve())
            out[(b, p)] = env
    return out


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--lib", action="append", required=True,
                    help="a libcauseway_pjrt.so to compare (twice or more; the first is the base)")
    ap.add_argument("--procs", type=int, default=2, help="processes per build (default 2)")
    ap.add_argument("--rounds", type=int, default=100, help="rounds (default 100)")
    ap.add_argument("--calls", type=int, default=30000, help="calls per chain (default 30000)")
    ap.add_argument("--plugin", choices=("xla", "null"), default="null",
                    help="the device plugin under every side (default: the null plugin)")
    ap.add_argument("--no-aslr", action="store_true", help="start each process under setarch -R")
    ap.add_argument("--seed", type=int, default=1, help="the round order's seed")
    args = ap.parse_args(argv)
    for lib in args.lib:
        if pathlib.Path(lib).name != "libcauseway_pjrt.so" or not os.path.exists(lib):
            raise SystemExit(f"jax_ab: {lib}: need an existing file named libcauseway_pjrt.so")
    if args.procs < 1 or args.rounds < 1 or args.calls < 1:
        raise SystemExit("jax_ab: --procs, --rounds and --calls must be positive")

    envs = envs_for(args.plugin, args.lib, args.procs)
    pre = ["setarch", "-R"] if args.no_aslr else []
    procs = {}
    try:
        for key, env in envs.items():
            side = "stock" if key == "stock" else "causeway"
            procs[key] = subprocess.Popen(
                pre + [sys.executable, str(HERE / "jax_bench.py"), "--serve", side],
                env=env, cwd=str(ROOT), stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        deadline = time.monotonic() + 120 + args.rounds * len(procs) * (args.calls / 20000.0)

        def ask(key, req):
            p = procs[key]
            if req is not None:
                p.stdin.write(req + "\n")
                p.stdin.flush()
            line = p.stdout.readline()
            if not line or time.monotonic() > deadline:
                raise SystemExit(f"jax_ab: process {key} ended or ran out of time "
                                 f"(exit {p.poll()}) at {req!r}")
            return json.loads(line)

        for key in procs:
            ask(key, None)
        rates = {key: [] for key in procs}
        rng = random.Random(args.seed)
        for _ in range(args.rounds):
            order = list(procs)
            rng.shuffle(order)
            for key in order:
                rates[key].append(ask(key, f"chain {args.calls}")["calls_per_s"])
        for p in procs.values():
            p.stdin.write("quit\n")
            p.stdin.flush()
            p.wait(timeout=60)
    finally:
        for p in procs.values():
            if p.poll() is None:
                p.kill()
                p.wait()

    med = statistics.median
    stock = rates["stock"]
    print(f"jax_ab: {args.plugin} plugin, {args.rounds} rounds of a chain of {args.calls} "
          f"calls in each of {len(procs)} processes, shuffled"
          f"{', ASLR off' if args.no_aslr else ''}")
    print(f"  stock (in-process JAX): {med(stock):,.0f} calls/s")
    print(f"  {'build':>5} {'proc':>4} {'calls/s':>10} {'/stock':>7}   lib")
    for b, lib in enumerate(args.lib):
        for p in range(args.procs):
            r = rates[(b, p)]
            ratio = med([x / s for x, s in zip(r, stock)])
            print(f"  {b:>5} {p:>4} {med(r):>10,.0f} {ratio:>6.3f}x   {lib if p == 0 else ''}")
    print(f"  per build, all its processes' rounds: /stock, and / build 0 (rounds it won)")
    base = [x for p in range(args.procs) for x in rates[(0, p)]]
    base_stock = stock * args.procs
    for b in range(len(args.lib)):
        mine = [x for p in range(args.procs) for x in rates[(b, p)]]
        vs = [x / y for x, y in zip(mine, base)]
        won = sum(v > 1 for v in vs)
        print(f"  {b:>5}      {med(mine):>10,.0f} {med([x / s for x, s in zip(mine, base_stock)]):>6.3f}x"
              f"   {med(vs):.3f} ({won}/{len(vs)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
