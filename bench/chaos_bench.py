#!/usr/bin/env python3
"""The chaos suite's long form and its soak (tests/chaos/chaos.py does the work).

    .venv/bin/python bench/chaos_bench.py                    # long form: 40 events, 4 clients
    .venv/bin/python bench/chaos_bench.py --seed 7 --events 100
    nice -n 10 .venv/bin/python bench/chaos_bench.py --soak 3600 --out /tmp/soak

Long form: the checks of the short form in ctest (chaos_e2e) over more events,
clients and steps; it prints the seed first and the counts at the end.

--soak S: jobs and events go on for S seconds. The controller and
hand-worker-0 are never SIGKILLed (SIGSTOP still reaches them), so one
process of each lives the whole soak; every daemon's VmRSS is sampled every
--rss-every seconds (rss.csv in --out). At the end: a table of minute and
RSS per daemon (the process of that name then), start/min/max/end per
process, and a verdict per process that lived at least half the soak: flat
when its RSS at the end (median of the last 5 samples) exceeds its RSS after
the warm-up (median of the 5 samples from minute --warmup-min) by at most
max(--flat-mib, --flat-pct % of it). Exit status 1 on any failure of the
chaos checks or a verdict that is not flat.
"""
from __future__ import annotations

import argparse
import json
import os
import pathlib
import statistics
import sys

ROOT = pathlib.Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tests" / "chaos"))

import chaos  # noqa: E402

LONG = chaos.Config(seed=0, clients=4, events=40, steps=400)
SOAK_PROTECT = ("controller", "hand-worker-0")


def load_rss(csv_path: str) -> list[tuple]:
    rows = []
    with open(csv_path) as f:
        next(f)
        for line in f:
            t, name, pid, kib = line.strip().split(",")
            rows.append((float(t), name, int(pid), int(kib) / 1024))
    return rows


def minute_table(rows: list[tuple]) -> tuple[list[str], list[list]]:
    """One row a minute: the last sample of each daemon name in that minute."""
    names = sorted({r[1] for r in rows}, key=lambda n: (n != "controller", n))
    by_min: dict[int, dict] = {}
    for t, name, _pid, mib in rows:
        by_min.setdefault(int(t // 60), {})[name] = mib
    table = [[m] + [by_min[m].get(n) for n in names] for m in sorted(by_min)]
    return names, table


def verdicts(rows: list[tuple], soak_s: float, warmup_min: float, flat_mib: float,
             flat_pct: float) -> list[dict]:
    per: dict[tuple, list] = {}
    for t, name, pid, mib in rows:
        per.setdefault((name, pid), []).append((t, mib))
    out = []
    for (name, pid), pts in sorted(per.items()):
        life = pts[-1][0] - pts[0][0]
        if life < soak_s / 2:
            continue
        t_warm = pts[0][0] + warmup_min * 60
        after = [v for t, v in pts if t >= t_warm]
        if len(after) < 10:
            continue
        base = statistics.median(after[:5])
        end = statistics.median(after[-5:])
        allowed = max(flat_mib, base * flat_pct / 100)
        out.append({"daemon": name, "pid": pid, "life_min": round(life / 60, 1),
                    "after_warmup_mib": round(base, 1), "end_mib": round(end, 1),
                    "max_mib": round(max(v for _, v in pts), 1),
                    "growth_mib": round(end - base, 1), "allowed_mib": round(allowed, 1),
                    "flat": end - base <= allowed})
    return out


def main() -> int:
    ap = argparse.ArgumentParser(add_help=False)
    ap.add_argument("--warmup-min", type=float, default=5.0)
    ap.add_argument("--flat-mib", type=float, default=8.0)
    ap.add_argument("--flat-pct", type=float, default=5.0)
    own, rest = ap.parse_known_args()
    chaos.stop_on_sigterm()
    defaults = LONG
    soak = "--soak" in rest
    if soak:
        defaults = chaos.Config(seed=0, clients=3, events=0, steps=400, gap=(2.0, 6.0),
                                protect=SOAK_PROTECT, rss_every=10.0)
    missing = chaos.harness.missing_build()
    if missing:
        print(f"chaos_bench: {missing}", file=sys.stderr)
        return 2
    cfg = chaos.parse_args(rest, defaults)
    if soak and not cfg.protect:
        cfg.protect = SOAK_PROTECT
    rep = chaos.Driver(cfg).run()
    chaos.print_report(rep)
    bad = bool(rep["failures"])
    if soak:
        rows = load_rss(os.path.join(rep["out"], "rss.csv"))
        names, table = minute_table(rows)
        print("\nRSS (MiB) by minute, the process of each name then:")
        print("minute " + " ".join(f"{n:>14}" for n in names))
        for row in table:
            print(f"{row[0]:6d} " + " ".join(f"{v:14.1f}" if v is not None else f"{'-':>14}"
                                             for v in row[1:]))
        vs = verdicts(rows, cfg.soak_s, own.warmup_min, own.flat_mib, own.flat_pct)
        print(f"\nflatness (processes that lived >= half the soak; growth from minute "
              f"{own.warmup_min:g} to the end, allowed max({own.flat_mib:g} MiB, "
              f"{own.flat_pct:g} %)):")
        for v in vs:
            print(f"  {v['daemon']:<16} pid {v['pid']:<7} {v['life_min']:5.1f} min: "
                  f"{v['after_warmup_mib']:.1f} -> {v['end_mib']:.1f} MiB (max {v['max_mib']:.1f}),"
                  f" growth {v['growth_mib']:+.1f} MiB, allowed {v['allowed_mib']:.1f}: "
                  f"{'FLAT' if v['flat'] else 'GROWING'}")
        if not vs:
            print("  no process lived half the soak: no verdict")
            bad = True
        bad = bad or not all(v["flat"] for v in vs)
        with open(os.path.join(rep["out"], "soak.json"), "w") as f:
            json.dump({"names": names, "table": table, "verdicts": vs}, f, indent=1)
        print(f"\nsoak verdict: {'FLAT' if vs and all(v['flat'] for v in vs) else 'NOT FLAT'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
