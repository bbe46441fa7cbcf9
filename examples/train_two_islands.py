"""Train a small model across two islands of a causeway cluster.

    JAX_PLATFORMS=causeway python examples/train_two_islands.py [--steps 30]

The model is a two-stage MLP classifier. Stage 1 lives on island 0, stage 2
on island 1 (with the embedded cluster: worker-0 and worker-1; the script asks
for them with CAUSEWAY_LOCAL_WORKERS=2, since by default the embedded cluster
is one island, as one machine is). Within an
island the stage is data-parallel over the island's 4 devices (batch sharded,
parameters replicated: XLA all-reduces the gradients inside the island).
Across islands it is a pipeline: each step splits the batch into
microbatches; activations go to island 1 and their gradients come back to
island 0 with jax.device_put, worker to worker. JAX dispatches asynchronously,
so stage 1 of one microbatch overlaps stage 2 of the previous one.

At the end the same program runs on stock JAX (a subprocess with
JAX_PLATFORMS=cpu and 8 host devices, islands emulated as devices 0-3 and
4-7) and the losses must match bit for bit (or within --rtol); the script
exits 1 on a mismatch.
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time

REFERENCE = "--reference" in sys.argv
if REFERENCE:
    # Stock JAX only: do not load any installed PJRT plugin (causeway's included).
    from jax._src import xla_bridge
    xla_bridge.discover_pjrt_plugins = lambda: None
else:
    os.environ.setdefault("JAX_PLATFORMS", "causeway")
    # Two islands of the embedded cluster (ignored when joining a cluster).
    os.environ.setdefault("CAUSEWAY_LOCAL_WORKERS", "2")

import numpy as np  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

ISLAND_SIZE = 4  # emulated islands on stock JAX


def island_of(d) -> int:
    return int(getattr(d, "island", d.id // ISLAND_SIZE))


def worker_of(d) -> str:
    return str(getattr(d, "worker", f"(stock) host devices of island {island_of(d)}"))


def init_params(key, sizes):
    params = []
    for n_in, n_out in zip(sizes[:-1], sizes[1:]):
        key, k = jax.random.split(key)
        params.append({"w": jax.random.normal(k, (n_in, n_out)) / np.sqrt(n_in),
                       "b": jnp.zeros((n_out,))})
    return params


def stage1(p, x):  # island 0
    for layer in p:
        x = jax.nn.relu(x @ layer["w"] + layer["b"])
    return x


def stage2_loss(p, h, y):  # island 1
    for layer in p[:-1]:
        h = jax.nn.relu(h @ layer["w"] + layer["b"])
    logits = h @ p[-1]["w"] + p[-1]["b"]
    return -jnp.mean(jnp.sum(jax.nn.log_softmax(logits) * jax.nn.one_hot(y, 4), axis=-1))


# Stage 1 forward; stage 2 forward+backward (loss, its parameter gradients and
# the gradient of its input); stage 1 backward from that input gradient.
fwd1 = jax.jit(stage1)
fwd_bwd2 = jax.jit(jax.value_and_grad(stage2_loss, argnums=(0, 1)))
bwd1 = jax.jit(lambda p, x, dh: jax.vjp(lambda q: stage1(q, x), p)[1](dh)[0])
add = jax.jit(lambda a, b: jax.tree.map(jnp.add, a, b))
sgd = jax.jit(lambda p, g, lr, n: jax.tree.map(lambda w, gw: w - lr * gw / n, p, g),
              donate_argnums=0)


def train(steps: int, microbatches: int, batch: int, verbose: bool) -> list[float]:
    devices = jax.devices()
    isl = sorted({island_of(d) for d in devices})
    if len(isl) < 2:
        sys.exit(f"need two islands, found {isl}: run with JAX_PLATFORMS=causeway")
    dev0 = [d for d in devices if island_of(d) == isl[0]]
    dev1 = [d for d in devices if island_of(d) == isl[1]]
    mesh0, mesh1 = Mesh(np.array(dev0), ("data",)), Mesh(np.array(dev1), ("data",))
    data0, rep0 = NamedSharding(mesh0, P("data")), NamedSharding(mesh0, P())
    data1, rep1 = NamedSharding(mesh1, P("data")), NamedSharding(mesh1, P())

    k1, k2 = jax.random.split(jax.random.key(0))
    p1 = jax.device_put(init_params(k1, [16, 64, 64]), rep0)
    p2 = jax.device_put(init_params(k2, [64, 32, 4]), rep1)

    rng = np.random.default_rng(0)
    centers = rng.standard_normal((4, 16)).astype(np.float32) * 2
    mb = batch // microbatches

    losses = []
    for step in range(steps):
        labels = rng.integers(0, 4, batch).astype(np.int32)
        xs = (centers[labels] + rng.standard_normal((batch, 16)).astype(np.float32))
        t = time.monotonic()
        g1 = g2 = None
        step_losses = []
        for m in range(microbatches):
            x = jax.device_put(xs[m * mb:(m + 1) * mb], data0)        # host -> island 0
            y = jax.device_put(labels[m * mb:(m + 1) * mb], data1)    # host -> island 1
            h = fwd1(p1, x)                                           # island 0
            h1 = jax.device_put(h, data1)                             # island 0 -> 1
            loss, (gp2, dh) = fwd_bwd2(p2, h1, y)                     # island 1
            dh0 = jax.device_put(dh, data0)                           # island 1 -> 0
            gp1 = bwd1(p1, x, dh0)                                    # island 0
            g1 = gp1 if g1 is None else add(g1, gp1)
            g2 = gp2 if g2 is None else add(g2, gp2)
            step_losses.append(loss)
            if verbose and step == 0 and m == 0:
                for name, arr in (("stage 1 activations", h), ("stage 2 loss", loss),
                                  ("stage 1 gradients", gp1[0]["w"])):
                    ds = sorted(arr.devices(), key=lambda d: d.id)
                    print(f"  {name:20s} on island {island_of(ds[0])}, "
                          f"{worker_of(ds[0])}, devices {[d.id for d in ds]}")
        p1 = sgd(p1, g1, 0.1, microbatches)                           # island 0
        p2 = sgd(p2, g2, 0.1, microbatches)                           # island 1
        loss = float(np.mean([np.asarray(v) for v in step_losses], dtype=np.float32))
        losses.append(loss)
        if verbose:
            print(f"step {step:3d}  loss {loss:.6f}  ({(time.monotonic() - t) * 1e3:.0f} ms)")
    return losses


def reference_losses(args) -> list[float]:
    env = {k: v for k, v in os.environ.items()
           if k not in ("CAUSEWAY_CONTROLLER", "PJRT_NAMES_AND_LIBRARY_PATHS")}
    env["JAX_PLATFORMS"] = "cpu"
    env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=8"
    cmd = [sys.executable, os.path.abspath(__file__), "--reference", "--steps", str(args.steps),
           "--microbatches", str(args.microbatches), "--batch", str(args.batch)]
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=600)
    if out.returncode != 0:
        sys.exit(f"the stock JAX reference run failed:\n{out.stderr[-4000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--microbatches", type=int, default=4)
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--rtol", type=float, default=0.0,
                    help="allowed relative loss difference (default 0: bit for bit)")
    ap.add_argument("--reference", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.batch % (args.microbatches * ISLAND_SIZE):
        sys.exit("--batch must be a multiple of 4 x --microbatches")

    if args.reference:
        print(json.dumps(train(args.steps, args.microbatches, args.batch, verbose=False)))
        return 0

    devices = jax.devices()
    print(f"platform {devices[0].platform}: {len(devices)} devices, "
          f"{jax.process_count()} process")
    got = train(args.steps, args.microbatches, args.batch, verbose=True)
    want = reference_losses(args)
    bad = [(i, g, w) for i, (g, w) in enumerate(zip(got, want))
           if not (g == w or abs(g - w) <= args.rtol * abs(w))]
    if len(want) != len(got) or bad:
        for i, g, w in bad[:10]:
            print(f"MISMATCH step {i}: causeway {g!r} stock JAX {w!r}")
        print(f"FAIL: {len(bad)} of {len(got)} losses differ from stock JAX")
        return 1
    how = "bit for bit" if args.rtol == 0 else f"within rtol {args.rtol}"
    print(f"OK: {len(got)} losses match stock JAX {how} "
          f"(first {got[0]:.6f}, last {got[-1]:.6f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
