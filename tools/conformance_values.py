"""Bit-for-bit comparison of two conformance runs (docs/conformance.md, session 45).

A test passes within its tolerance, so a value off by an ulp or two does not show in
tools/conformance_report.py. As a pytest plugin (`-p conformance_values`, with tools/ on
PYTHONPATH and CW_VALUES=FILE.pkl) this records every pair of arrays JAX's test helpers
compare (assertArraysAllClose, assertArraysEqual), call by call; as a script it compares
two such files:

    python tools/conformance_values.py stock-linalg.pkl causeway-linalg.pkl
"""
from __future__ import annotations

import hashlib
import os
import pickle
import sys

import numpy as np

_current: list[str | None] = [None]
_records: dict[str, list] = {}


def _digest(x):
    """(dtype+shape:sha1, a copy when small enough to measure a difference)."""
    try:
        a = np.asarray(x)
    except Exception as e:  # PRNG keys, tracers
        return (f"unreadable:{type(e).__name__}", None)
    if a.dtype == object:
        return ("object", None)
    a = np.ascontiguousarray(a)
    return (f"{a.dtype}{a.shape}:" + hashlib.sha1(a.tobytes()).hexdigest(),
            a.copy() if a.size <= 4096 else None)


def _wrap(cls, name):
    orig = getattr(cls, name)

    def recorded(self, actual, desired, *args, **kwargs):
        if _current[0] is not None:
            _records.setdefault(_current[0], []).append((_digest(actual), _digest(desired)))
        return orig(self, actual, desired, *args, **kwargs)

    setattr(cls, name, recorded)


def pytest_configure(config):
    from jax._src import test_util as jtu
    _wrap(jtu.JaxTestCase, "assertArraysAllClose")
    _wrap(jtu.JaxTestCase, "assertArraysEqual")


def pytest_runtest_setup(item):
    _current[0] = item.nodeid


def pytest_runtest_teardown(item):
    _current[0] = None


def pytest_sessionfinish(session):
    with open(os.environ["CW_VALUES"], "wb") as fh:
        pickle.dump(_records, fh)


def _describe(x, y) -> str:
    if x is None or y is None or x.shape != y.shape:
        return ""
    if x.dtype.kind in "fc":
        with np.errstate(all="ignore"):
            d = np.abs(x.astype(np.complex128) - y.astype(np.complex128))
            n = int((~((x == y) | (np.isnan(x) & np.isnan(y)))).sum())
        return f" {n}/{x.size} elements, max abs {np.nanmax(d) if d.size else 0:.3g}"
    return f" {int((x != y).sum())}/{x.size} elements"


def main() -> int:
    a = pickle.load(open(sys.argv[1], "rb"))
    b = pickle.load(open(sys.argv[2], "rb"))
    same = differ = 0
    for tid in sorted(set(a) & set(b)):
        if len(a[tid]) != len(b[tid]):
            print(f"{tid}: {len(a[tid])} comparisons against {len(b[tid])}")
            differ += 1
            continue
        notes = []
        for i, (ra, rb) in enumerate(zip(a[tid], b[tid])):
            for slot, side in ((0, "actual"), (1, "desired")):
                (ha, xa), (hb, xb) = ra[slot], rb[slot]
                if ha != hb:
                    notes.append(f"#{i} {side} {ha.split(':')[0]}{_describe(xa, xb)}")
        if notes:
            differ += 1
            print(f"{tid}: " + "; ".join(notes[:4]))
        else:
            same += 1
    print(f"{same} tests identical, {differ} differ; {len(set(a) - set(b))} only in the "
          f"first, {len(set(b) - set(a))} only in the second")
    return 0


if __name__ == "__main__":
    sys.exit(main())
