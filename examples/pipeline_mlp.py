"""The main job for now: a two-stage MLP pipelined across two causeway workers.

Stage 1 (dense + relu) runs on worker A, stage 2 (dense + loss) on worker B.
Each program is lowered by the pinned JAX, compiled once on its worker, and
each micro-batch's activations move from A to B worker-to-worker (SEND/PUT):
the client never touches them. Results are compared with stock JAX.

Run through scripts/run.sh, which builds everything first.
"""
from __future__ import annotations

import os
import pathlib
import subprocess
import sys
import tempfile
import time

import numpy as np

os.environ.setdefault("JAX_PLATFORMS", "cpu")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax._src import compiler  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "python"))
from causeway_client import Client  # noqa: E402


def start_worker(binary: str, plugin: str, address: str, name: str) -> subprocess.Popen:
    p = subprocess.Popen([binary, "--plugin", plugin, "--devices", "2", "--listen", address,
                          "--name", name], stdout=subprocess.PIPE, text=True)
    line = p.stdout.readline()
    if "listening on" not in line:
        p.kill()
        raise RuntimeError(f"worker {name} did not start: {line!r}")
    return p


def options_bytes() -> bytes:
    opts = compiler.get_compile_options(num_replicas=1, num_partitions=1,
                                        device_assignment=np.array([[0]]))
    return opts.SerializeAsString()


def stage1(w1, b1, x):
    return jax.nn.relu(x @ w1 + b1)


def stage2(w2, b2, h, y):
    logits = h @ w2 + b2
    return jnp.mean((logits - y) ** 2), logits


def main() -> int:
    build = pathlib.Path(os.environ.get("CW_BUILD", ROOT / "build" / "release"))
    binary = str(build / "bin" / "causeway-worker")
    import lammps_jax_pjrt_cpu
    plugin = str(lammps_jax_pjrt_cpu.PLUGIN_PATH)

    rng = np.random.default_rng(0)
    batch, d_in, d_hidden, d_out, steps = 64, 128, 256, 10, 8
    w1 = rng.standard_normal((d_in, d_hidden), dtype=np.float32) * 0.05
    b1 = np.zeros((d_hidden,), np.float32)
    w2 = rng.standard_normal((d_hidden, d_out), dtype=np.float32) * 0.05
    b2 = np.zeros((d_out,), np.float32)
    xs = [rng.standard_normal((batch, d_in), dtype=np.float32) for _ in range(steps)]
    ys = [rng.standard_normal((batch, d_out), dtype=np.float32) for _ in range(steps)]

    prog1 = jax.jit(stage1).lower(w1, b1, xs[0]).as_text().encode()
    h_shape = (batch, d_hidden)
    prog2 = jax.jit(stage2).lower(w2, b2, np.zeros(h_shape, np.float32), ys[0]).as_text().encode()

    with tempfile.TemporaryDirectory(prefix="causeway-") as tmp:
        addr_a, addr_b = f"{tmp}/worker-a.sock", f"{tmp}/worker-b.sock"
        workers = [start_worker(binary, plugin, addr_a, "worker-a"),
                   start_worker(binary, plugin, addr_b, "worker-b")]
        try:
            with Client(addr_a) as a, Client(addr_b) as b:
                t0 = time.perf_counter()
                a.compile(1, prog1, options_bytes())
                b.compile(1, prog2, options_bytes())
                print(f"compiled stage 1 on worker-a, stage 2 on worker-b "
                      f"in {time.perf_counter() - t0:.2f} s")
                a.upload(10, w1)
                a.upload(11, b1)
                b.upload(10, w2)
                b.upload(11, b2)
                jit1, jit2 = jax.jit(stage1), jax.jit(stage2)
                worst = 0.0
                for step in range(steps):
                    x_id, h_id, y_id = 100 + 4 * step, 101 + 4 * step, 102 + 4 * step
                    loss_id, logits_id = 1000 + 2 * step, 1001 + 2 * step
                    t = time.perf_counter()
                    a.upload(x_id, xs[step])
                    a.launch(1, [[10, 11, x_id]], [[h_id]])
                    b.expect(h_id)
                    a.send_to_peer(h_id, addr_b, h_id, b.session_id)
                    b.upload(y_id, ys[step])
                    b.launch(1, [[10, 11, h_id, y_id]], [[loss_id, logits_id]])
                    loss = b.download(loss_id, (), np.float32)
                    ms = (time.perf_counter() - t) * 1e3
                    ref_loss, _ = jit2(w2, b2, jit1(w1, b1, xs[step]), ys[step])
                    err = abs(float(loss) - float(ref_loss))
                    worst = max(worst, err)
                    print(f"step {step}: loss {float(loss):.6f} (stock JAX {float(ref_loss):.6f})"
                          f"  stage1@worker-a -> {h_shape} activations worker-a->worker-b"
                          f" -> stage2@worker-b  {ms:.1f} ms")
                    a.delete([x_id, h_id])
                    b.delete([h_id, y_id, loss_id, logits_id])
                a.flush()
                b.flush()
                # Same StableHLO, same XLA, same CPU: results must match bit for bit.
                ok = worst == 0.0
                print(f"max |loss - stock JAX| = {worst:.3g}: {'OK' if ok else 'MISMATCH'}")
                return 0 if ok else 1
        finally:
            for w in workers:
                w.terminate()
                w.wait(timeout=10)


if __name__ == "__main__":
    sys.exit(main())
