"""Summarizes tools/conformance.sh's JUnit files: per test file, passed /
failed / skipped on stock CPU JAX and on causeway, then every test that passes
on stock but not on causeway with the first line of its failure.

Usage: conformance_report.py OUT_DIR FILE [FILE ...]   (FILE: api, lax, ...)
"""
from __future__ import annotations

import os
import sys
import xml.etree.ElementTree as ET


def results(path: str) -> dict[str, tuple[str, str]]:
    """test id -> (outcome, first line of the message)."""
    out: dict[str, tuple[str, str]] = {}
    if not os.path.exists(path):
        return out
    try:
        tree = ET.parse(path)
    except ET.ParseError:
        return out
    for case in tree.iter("testcase"):
        tid = f"{case.get('classname', '')}::{case.get('name', '')}"
        outcome, msg = "passed", ""
        for child in case:
            if child.tag in ("failure", "error"):
                outcome = "failed"
                msg = (child.get("message") or child.text or "").strip().splitlines()
                msg = msg[0][:200] if msg else ""
                break
            if child.tag == "skipped":
                outcome = "skipped"
        out[tid] = (outcome, msg)
    return out


def count(r: dict[str, tuple[str, str]]) -> tuple[int, int, int]:
    n = {"passed": 0, "failed": 0, "skipped": 0}
    for outcome, _ in r.values():
        n[outcome] += 1
    return n["passed"], n["failed"], n["skipped"]


def main() -> int:
    out_dir, files = sys.argv[1], sys.argv[2:]
    # The side compared with stock: causeway (the plugin) or proxy.
    target = os.environ.get("CW_CONFORMANCE_TARGET", "causeway")
    rows, regressions = [], []
    tot = [0] * 6
    for f in files:
        stock = results(os.path.join(out_dir, f"stock-{f}.xml"))
        cw = results(os.path.join(out_dir, f"{target}-{f}.xml"))
        s, c = count(stock), count(cw)
        rows.append((f, *s, *c))
        tot = [a + b for a, b in zip(tot, (*s, *c))]
        for tid, (outcome, _) in sorted(stock.items()):
            if outcome != "passed":
                continue
            c_out, c_msg = cw.get(tid, ("missing", "not run (the file crashed or timed out)"))
            if c_out != "passed":
                regressions.append((f, tid, c_out, c_msg))
    print(f"{'file':<24} {'stock pass':>10} {'fail':>6} {'skip':>6}   {target + ' pass':>13} "
          f"{'fail':>6} {'skip':>6}")
    for r in rows:
        print(f"{r[0]:<24} {r[1]:>10} {r[2]:>6} {r[3]:>6}   {r[4]:>13} {r[5]:>6} {r[6]:>6}")
    print(f"{'total':<24} {tot[0]:>10} {tot[1]:>6} {tot[2]:>6}   {tot[3]:>13} {tot[4]:>6} "
          f"{tot[5]:>6}")
    print(f"\n{len(regressions)} tests pass on stock and not on {target}:")
    for f, tid, outcome, msg in regressions:
        print(f"  {f}: {tid} [{outcome}] {msg}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
