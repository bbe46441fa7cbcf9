"""The JAX side of tests/chaos/jax_soak.py: one process that goes on through
every fault, mixing training, large round trips and fresh compiles.

Each op is drawn from --seed, targets one worker and is logged to
--dir/ops.jsonl (t0, t1, ok, error, and "bad" for a wrong number); the op in
progress is in --dir/doing ("<op> <worker> <t0>"). The driver may ask for an
op by writing --dir/request ("<op> <worker>"); --dir/stop ends the loop.

Numbers are checked exactly: training losses against the stock-JAX run of
chaos_client.py --reference (same model, data and step), round trips against
the bytes sent, compiled int32 programs against numpy.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import chaos_client as cc  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
from jax.sharding import Mesh, NamedSharding, PartitionSpec as P  # noqa: E402

def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, required=True)
    ap.add_argument("--dir", required=True)
    ap.add_argument("--reference", required=True, help="dir of losses-<k>.npy")
    ap.add_argument("--steps", type=int, required=True, help="reference length")
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    ops_path = os.path.join(args.dir, "ops.jsonl")
    doing = os.path.join(args.dir, "doing")
    request = os.path.join(args.dir, "request")
    stop = os.path.join(args.dir, "stop")

    by_worker: dict = {}
    for d in jax.devices():
        by_worker.setdefault(str(getattr(d, "worker", "")), []).append(d)
    workers = sorted(by_worker)
    refs = {w: np.load(os.path.join(args.reference, f"losses-{k}.npy"))
            for k, w in enumerate(workers)}

    step = cc.make_step(jax, jnp)

    affine = jax.jit(lambda v: v * 3 + 7)

    # Per worker: its model (seed = its index), host checkpoint, device params.
    models = {}
    for k, w in enumerate(workers):
        mesh = Mesh(np.array(by_worker[w][:2]), ("data",))
        xs, ys, p0 = cc._data(k)
        models[w] = {"k": k, "sh": NamedSharding(mesh, P("data")),
                     "rep": NamedSharding(mesh, P()), "xs": xs, "ys": ys, "p0": p0,
                     "host": (0, p0), "dev": None}

    def log(rec):
        with open(ops_path, "a") as f:
            f.write(json.dumps(rec) + "\n")

    def op_train(w, r):
        m = models[w]
        i, host = m["host"]
        if m["dev"] is None:
            m["dev"] = (i, jax.device_put(host, m["rep"]))
        i, params = m["dev"]
        assert i == m["host"][0]
        n = int(r.integers(5, 30))
        ref = refs[w]
        for _ in range(n):
            if i >= len(ref):  # a job done: start again from the initial params
                i, params = 0, jax.device_put(m["p0"], m["rep"])
            x = jax.device_put(m["xs"][i % cc.BATCHES], m["sh"])
            y = jax.device_put(m["ys"][i % cc.BATCHES], m["sh"])
            m["dev"] = None  # params are donated: lost if the step fails
            params, loss = step(params, x, y)
            loss = np.asarray(loss)
            if loss != ref[i]:
                return f"step {i}: loss {loss!r} != reference {ref[i]!r}"
            i += 1
            m["dev"] = (i, params)
        m["host"] = (i, jax.tree.map(np.asarray, params))
        return None

    def op_roundtrip(w, r, mib=None):
        mib = mib or float(r.uniform(1, 16))
        n = int(mib * (1 << 20)) // 4
        host = r.integers(-2**31, 2**31 - 1, size=n, dtype=np.int32)
        d = by_worker[w][int(r.integers(0, len(by_worker[w])))]
        a = jax.device_put(host, d)
        got = np.asarray(a)
        if not np.array_equal(got, host):
            return f"round trip of {n * 4} bytes differs at {int(np.argmax(got != host))}"
        # A program on it, too (cached after the first).
        got = np.asarray(affine(a))
        if not np.array_equal(got, host * np.int32(3) + np.int32(7)):
            return "v*3+7 differs from numpy"
        return None

    def op_compile(w, r):
        # A program never compiled before: its constants differ each time.
        c = [int(v) for v in r.integers(1, 1000, size=int(r.integers(20, 60)))]
        d = by_worker[w][0]

        def f(v):
            for j, cj in enumerate(c):
                v = (v * cj + j) ^ (v >> 3) if j % 2 else v + cj
            return v
        host = r.integers(-1000, 1000, size=4096, dtype=np.int32)
        got = np.asarray(jax.jit(f)(jax.device_put(host, d)))
        want = host.copy()
        with np.errstate(over="ignore"):
            want = f(want)
        if not np.array_equal(got, want):
            return "compiled program differs from numpy"
        return None

    fns = {"train": op_train, "roundtrip": op_roundtrip, "compile": op_compile,
           "upload_big": lambda w, r: op_roundtrip(w, r, mib=64.0)}
    n = 0
    while not os.path.exists(stop):
        op = str(rng.choice(["train", "train", "roundtrip", "compile"]))
        w = workers[int(rng.integers(0, len(workers)))]
        forced = False
        try:
            with open(request) as f:
                op, w = f.read().split()
            os.unlink(request)
            forced = True
        except (OSError, ValueError):
            pass
        r = np.random.default_rng([args.seed, n])
        t0 = time.monotonic()
        with open(doing + ".tmp", "w") as f:
            f.write(f"{op} {w} {t0}")
        os.replace(doing + ".tmp", doing)
        rec = {"n": n, "op": op, "worker": w, "t0": t0, "forced": forced}
        try:
            bad = fns[op](w, r)
            rec["ok"] = bad is None
            if bad:
                rec["bad"] = bad
        except Exception as e:  # noqa: BLE001 - judged by the driver
            rec["ok"] = False
            rec["error"] = f"{type(e).__name__}: {e}"[:2000]
            if op == "train":
                models[w]["dev"] = None  # re-upload the host checkpoint next time
        rec["t1"] = time.monotonic()
        log(rec)
        n += 1
        if not rec["ok"]:
            time.sleep(0.05)
    with open(doing, "w") as f:
        f.write(f"stopped - {time.monotonic()}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
