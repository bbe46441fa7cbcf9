"""One chaos client: trains a small MLP on its own island, checkpointing to disk.

Run by tests/chaos/chaos.py, one process per session: a job of --steps steps
starts from the checkpoint in --dir if there is one (a fresh session resuming
after its worker died), else from the initial parameters. Every step uploads
its batch (sharded over the island's devices), launches the step (params
donated) and reads the loss back, so an error surfaces at the step it hits.

Files in --dir (the driver reads them):
  ckpt.npz      step k, the losses of steps 0..k-1 and the params after k steps
                (written to a temporary name and renamed: never half a file)
  progress      "<pid> <steps done>" after every step
  events.jsonl  one JSON object a line: "ready" (session open, worker, the step
                it starts from), "error" (CLOCK_MONOTONIC time, step, text), "done"
  losses.npy    every step's loss, once the job finished
Exit status: 0 done, 3 an error from causeway (reported in events.jsonl).

--reference: stock CPU JAX (the driver sets JAX_PLATFORMS=cpu and two host
devices), the undisturbed run the chaos is judged by: one process for every
--seed given (one JAX start-up, not one per client), no files but
losses-<seed>.npy.
"""
from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time

import numpy as np

SIZES = [16, 64, 64, 1]
BATCHES = 8          # distinct batches, cycled
BATCH = 32           # rows per batch, split over the island's devices
LR = np.float32(0.05)


def _event(path: str, **kw) -> None:
    kw.setdefault("t", time.monotonic())
    kw["pid"] = os.getpid()
    with open(path, "a") as f:
        f.write(json.dumps(kw) + "\n")


def _data(seed: int):
    r = np.random.default_rng(seed)
    xs = r.standard_normal((BATCHES, BATCH, SIZES[0])).astype(np.float32)
    w = r.standard_normal((SIZES[0], 1)).astype(np.float32)
    ys = np.sin(xs @ w).astype(np.float32)
    params = []
    for n_in, n_out in zip(SIZES[:-1], SIZES[1:]):
        params.append({"w": (r.standard_normal((n_in, n_out)) / np.sqrt(n_in)).astype(np.float32),
                       "b": np.zeros((n_out,), np.float32)})
    return xs, ys, params


def make_step(jax, jnp):
    """The MLP's SGD step, jitted, its parameters donated (jax is imported by
    the caller: a reference run must keep the causeway plugin undiscovered)."""
    def mlp(p, x):
        for layer in p[:-1]:
            x = jax.nn.relu(x @ layer["w"] + layer["b"])
        return x @ p[-1]["w"] + p[-1]["b"]

    @functools.partial(jax.jit, donate_argnums=0)
    def step(p, x, y):
        loss, g = jax.value_and_grad(lambda q: jnp.mean((mlp(q, x) - y) ** 2))(p)
        return jax.tree.map(lambda a, b: a - LR * b, p, g), loss
    return step


def _save(path: str, step: int, losses: list, params) -> None:
    flat = {f"p{i}_{k}": v for i, layer in enumerate(params) for k, v in layer.items()}
    tmp = path + ".tmp.npz"
    np.savez(tmp, step=np.int64(step), losses=np.asarray(losses, np.float32).reshape(-1), **flat)
    os.replace(tmp, path)


def _load(path: str):
    with np.load(path) as z:
        params = [{"w": z[f"p{i}_w"], "b": z[f"p{i}_b"]} for i in range(len(SIZES) - 1)]
        return int(z["step"]), list(z["losses"]), params


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, nargs="+", required=True,
                    help="data and initial params (--reference: one run per seed)")
    ap.add_argument("--steps", type=int, required=True)
    ap.add_argument("--every", type=int, default=10, help="checkpoint every this many steps")
    ap.add_argument("--dir", required=True)
    ap.add_argument("--step-sleep", type=float, default=0.0)
    ap.add_argument("--reference", action="store_true")
    args = ap.parse_args()
    if len(args.seed) > 1 and not args.reference:
        ap.error("one --seed a session")
    os.makedirs(args.dir, exist_ok=True)
    events = os.path.join(args.dir, "events.jsonl")
    ckpt = os.path.join(args.dir, "ckpt.npz")
    if args.reference:
        # Stock JAX only: never discover (and dlopen) the causeway plugin.
        from jax._src import xla_bridge
        xla_bridge.discover_pjrt_plugins = lambda: None
    import jax
    import jax.numpy as jnp
    from jax.sharding import Mesh, NamedSharding, PartitionSpec as P

    step = make_step(jax, jnp)

    def train(seed: int, start: int, losses: list, params0, on_step) -> None:
        """Opens the session (the first use of the devices) and trains."""
        devs = jax.devices()[:2]
        mesh = Mesh(np.array(devs), ("data",))
        data_sh, rep = NamedSharding(mesh, P("data")), NamedSharding(mesh, P())
        xs, ys, _ = _data(seed)
        on_step(start, None, devs)
        params = jax.device_put(params0, rep)
        for i in range(start, args.steps):
            if i > start:
                on_step(i, params, devs)
            x = jax.device_put(xs[i % BATCHES], data_sh)
            y = jax.device_put(ys[i % BATCHES], data_sh)
            params, loss = step(params, x, y)
            losses.append(np.asarray(loss))
            if args.step_sleep:
                time.sleep(args.step_sleep)

    if args.reference:
        for seed in args.seed:
            losses = []
            train(seed, 0, losses, _data(seed)[2], lambda i, p, d: None)
            _write_losses(os.path.join(args.dir, f"losses-{seed}.npy"), losses)
        return 0

    start, losses, params0 = 0, [], _data(args.seed[0])[2]
    if os.path.exists(ckpt):
        start, losses, params0 = _load(ckpt)
    progress = os.path.join(args.dir, "progress")
    at = [start]

    def on_step(i: int, params, devs) -> None:
        """Before step i: the session is open (i == start), or i steps are done."""
        at[0] = i
        if params is None:
            _event(events, ev="ready", step=start, worker=str(getattr(devs[0], "worker", "")),
                   devices=[d.id for d in devs])
            return
        with open(progress, "w") as f:
            f.write(f"{os.getpid()} {i}")
        if i % args.every == 0:
            _save(ckpt, i, losses, jax.tree.map(np.asarray, params))

    try:
        train(args.seed[0], start, losses, params0, on_step)
    except Exception as e:  # noqa: BLE001 - reported to the driver
        _event(events, ev="error", t=time.monotonic(), step=at[0],
               text=f"{type(e).__name__}: {e}")
        return 3
    with open(progress, "w") as f:
        f.write(f"{os.getpid()} {args.steps}")
    _write_losses(os.path.join(args.dir, "losses.npy"), losses)
    _event(events, ev="done", step=args.steps)
    return 0


def _write_losses(path: str, losses: list) -> None:
    np.save(path + ".tmp.npy", np.asarray(losses, np.float32))
    os.replace(path + ".tmp.npy", path)

if __name__ == "__main__":
    sys.exit(main())
