"""The compile cache on disk (issue 4 item 7): a controller started with
--compile-cache-dir writes what its workers compiled; after the whole
cluster is stopped, a new controller and workers with the same directory
answer the same program from disk -- zero compiles sent to workers -- and
the results are right. A corrupted entry is ignored with a warning and
recompiled, never trusted. The directory is scanned in the background
after the controller listens (issue 11): files that cannot be entries are
pruned, the byte bound is kept at start-up and after stores."""
from __future__ import annotations

import hashlib
import os
import pathlib
import stat
import struct

import numpy as np
import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

HERE = pathlib.Path(__file__).resolve().parent


def _expected() -> list:
    x = np.arange(12, dtype=np.float32).reshape(3, 4) / 10
    return (np.tanh(x @ np.ones((4, 2), dtype=np.float32)) * 2.0 + 1.0).tolist()


def _entry(payload: bytes, key: bytes | None = None, name_key: bytes | None = None):
    """A file in the entry format (cw_compile_disk.h): (its name, its bytes)."""
    key = key or os.urandom(32)
    header = (struct.pack("<II", 0x43585743, 1) + key + struct.pack("<Q", len(payload))
              + hashlib.sha256(payload).digest())
    return (name_key or key).hex() + ".cwx", header + payload


def _run_once(cache_dir: pathlib.Path, name: str, controller_args: tuple = (),
              until=None, worker_args: tuple = ()) -> dict:
    """A fresh cluster on `cache_dir` runs cc_program once; its controller's
    stats (once `until(stats)` holds, if given)."""
    cluster = harness.HandCluster(workers=1, devices=2, worker_args=worker_args, controller_args=(
        "--compile-cache-dir", str(cache_dir), *controller_args))
    try:
        env = harness.causeway_env(controller=cluster.controller)
        env["CW_RUNNER_CHECKS"] = str(HERE / "compile_cache_checks.py")
        r = harness.Runner(name, env)
        try:
            got = r.call("cc_program", timeout=120)
        finally:
            r.close()
        np.testing.assert_allclose(got, _expected(), rtol=1e-6)
        # Writes are asynchronous: wait for them before stopping.
        done = until or (lambda s: s["disk_bytes"] > 0 or s["compiles_sent"] == 0)
        st = harness.wait_until(
            lambda: (lambda s: s if done(s) else None)(harness.stats(cluster.controller)), 30)
        assert st, harness.stats(cluster.controller)
        st["log"] = cluster.log("controller")
        return st
    finally:
        cluster.stop()


def test_second_cluster_compiles_nothing(tmp_path):
    cache = tmp_path / "cc"
    first = _run_once(cache, "cc-first")
    assert first["compiles_sent"] >= 1, first
    assert first["disk_misses"] >= 1 and first["disk_hits"] == 0, first
    files = sorted(cache.glob("*.cwx"))
    assert files, list(cache.iterdir())
    assert stat.S_IMODE(cache.stat().st_mode) == 0o700
    for f in files:
        assert stat.S_IMODE(f.stat().st_mode) == 0o600, f
        assert f.read_bytes()[:4] == b"CWXC"
    assert first["disk_bytes"] == sum(f.stat().st_size for f in files), first

    second = _run_once(cache, "cc-second")
    assert second["compiles_sent"] == 0, second
    assert second["disk_hits"] >= 1, second
    assert second["disk_errors"] == 0, second
    assert second["cache_misses"] == second["disk_hits"], second  # every memory miss hit disk


def test_corrupt_entry_is_recompiled(tmp_path):
    cache = tmp_path / "cc"
    _run_once(cache, "cc-seed")
    files = sorted(cache.glob("*.cwx"))
    assert files
    for f in files:  # flip a payload byte: the checksum no longer matches
        data = bytearray(f.read_bytes())
        data[-1] ^= 0xFF
        f.write_bytes(bytes(data))
    st = _run_once(cache, "cc-corrupt")
    assert st["disk_errors"] >= len(files), st
    assert st["disk_hits"] == 0 and st["compiles_sent"] >= 1, st
    assert "ignoring a disk entry (recompiling)" in st["log"], st["log"]
    assert "payload checksum mismatch" in st["log"], st["log"]
    # Rewritten whole: the next cluster hits again.
    again = _run_once(cache, "cc-after")
    assert again["compiles_sent"] == 0 and again["disk_hits"] >= 1, again


def test_entry_the_worker_cannot_load_is_recompiled(tmp_path):
    """An entry whose checksum holds but whose bytes the worker's XLA cannot
    deserialize (written by another build of the plugin that names itself
    the same, or damaged before it was written) is compiled again and
    rewritten: it failed its program for good, from memory and from the disk
    (an audit)."""
    cache = tmp_path / "cc"
    _run_once(cache, "cc-seed")
    files = sorted(cache.glob("*.cwx"))
    assert files
    for f in files:
        size = len(f.read_bytes()) - 80  # the header: magic, version, key, length, digest
        name, data = _entry(os.urandom(size), key=bytes.fromhex(f.name[:64]))
        assert name == f.name
        f.write_bytes(data)
    st = _run_once(cache, "cc-refused")  # the results are checked there
    assert st["disk_hits"] >= 1 and st["compiles_sent"] >= 1, st
    assert st["disk_errors"] >= 1, st
    assert "could not load the cached executable" in st["log"], st["log"]
    assert "compiling it again" in st["log"], st["log"]
    again = _run_once(cache, "cc-rewritten")
    assert again["compiles_sent"] == 0 and again["disk_hits"] >= 1, again
    assert again["disk_errors"] == 0, again


def test_another_cpu_does_not_share_entries(tmp_path):
    """XLA's CPU code is its host's, and XLA loads code compiled on another CPU
    with only a logged error (it may then stop on an illegal instruction): a
    worker on another CPU (as --host-cpu says) compiles for itself, the
    entries of both stay."""
    cache = tmp_path / "cc"
    first = _run_once(cache, "cc-here")
    assert first["compiles_sent"] >= 1, first
    there = _run_once(cache, "cc-other-cpu", worker_args=("--host-cpu", "x86_64 another-cpu"),
                      until=lambda s: s["disk_bytes"] > first["disk_bytes"])
    assert there["compiles_sent"] >= 1 and there["disk_hits"] == 0, there
    here = _run_once(cache, "cc-here-again")
    assert here["compiles_sent"] == 0 and here["disk_hits"] >= 1, here


def test_size_bound_evicts_oldest(tmp_path):
    cache = tmp_path / "cc"
    cache.mkdir(mode=0o700)
    old = cache / ("0" * 64 + ".cwx")
    old.write_bytes(b"x" * 4096)
    os.utime(old, (1, 1))
    cluster = harness.HandCluster(workers=1, devices=1, controller_args=(
        "--compile-cache-dir", str(cache), "--compile-cache-disk-bytes", "1000"))
    try:
        # At start-up (in the background) the directory is trimmed to its bound.
        assert harness.wait_until(lambda: not old.exists(), 30)
        assert harness.wait_until(
            lambda: harness.stats(cluster.controller)["disk_bytes"] == 0, 30)
    finally:
        cluster.stop()


def test_startup_scan_prunes_invalid_files(tmp_path):
    """The start-up scan (after the controller listens) removes files named
    like entries that cannot be one, keeps valid entries and files that are
    not the cache's, and counts what the entries hold."""
    cache = tmp_path / "cc"
    cache.mkdir(mode=0o700)
    files = {}
    name, data = _entry(b"g" * 1000)
    files["good"] = (cache / name, data)
    name, data = _entry(b"m" * 1000)
    files["bad-magic"] = (cache / name, b"XXXX" + data[4:])
    name, data = _entry(b"t" * 1000)
    files["truncated"] = (cache / name, data[:-10])
    name, data = _entry(b"o" * 1000, name_key=os.urandom(32))
    files["other-key"] = (cache / name, data)
    files["bad-name"] = (cache / "not-a-digest.cwx", data)
    files["not-ours"] = (cache / "notes.txt", b"keep me")
    for path, data in files.values():
        path.write_bytes(data)
    cluster = harness.HandCluster(workers=1, devices=1, controller_args=(
        "--compile-cache-dir", str(cache), "--log-level", "info"))
    try:
        invalid = ("bad-magic", "truncated", "other-key", "bad-name")
        assert harness.wait_until(lambda: not any(files[k][0].exists() for k in invalid), 30), \
            sorted(p.name for p in cache.iterdir())
        assert files["good"][0].exists() and files["not-ours"][0].exists()
        good_size = len(files["good"][1])
        assert harness.wait_until(
            lambda: harness.stats(cluster.controller)["disk_bytes"] == good_size, 30)
        assert "1 entries" in cluster.log("controller") and "removed 4 invalid" in \
            cluster.log("controller"), cluster.log("controller")
    finally:
        cluster.stop()


def test_store_over_bound_evicts_oldest(tmp_path):
    """A store that takes the cache over its bound trims it, oldest first,
    to 90% of the bound: here exactly the oldest of four old entries goes."""
    seed = tmp_path / "seed"
    _run_once(seed, "cc-size")
    size = sum(f.stat().st_size for f in seed.glob("*.cwx"))  # what cc_program stores
    cache = tmp_path / "cc"
    cache.mkdir(mode=0o700)
    old = []
    for i in range(4):
        name, data = _entry(bytes([i]) * (size - 80))
        path = cache / name
        path.write_bytes(data)
        os.utime(path, (1000 + i, 1000 + i))
        old.append(path)
    bound = 4 * size + size // 2
    st = _run_once(cache, "cc-bound", ("--compile-cache-disk-bytes", str(bound), "--log-level",
                                       "info"),
                   until=lambda s: not old[0].exists() and s["disk_bytes"] == sum(
                       f.stat().st_size for f in cache.glob("*.cwx")))
    assert st["compiles_sent"] >= 1, st
    assert not old[0].exists()
    assert all(p.exists() for p in old[1:])
    assert st["disk_bytes"] <= bound, st
    assert "1 oldest" in st["log"], st["log"]


def test_embedded_cluster_default_cache_dir(tmp_path):
    """The embedded cluster caches in $XDG_CACHE_HOME/causeway/compile by
    default; CAUSEWAY_COMPILE_CACHE_DIR= (empty) turns it off."""
    for name, cc in (("cc-default", None), ("cc-off", "")):
        xdg = tmp_path / name
        env = harness.causeway_env()
        env.pop("CAUSEWAY_COMPILE_CACHE_DIR", None)
        if cc is not None:
            env["CAUSEWAY_COMPILE_CACHE_DIR"] = cc
        env["XDG_CACHE_HOME"] = str(xdg)
        env["CW_RUNNER_CHECKS"] = str(HERE / "compile_cache_checks.py")
        r = harness.Runner(name, env)
        try:
            np.testing.assert_allclose(r.call("cc_program", timeout=120), _expected(), rtol=1e-6)
            want = xdg / "causeway" / "compile"
            if cc is None:
                assert harness.wait_until(lambda: list(want.glob("*.cwx")), 30), want
                assert stat.S_IMODE(want.stat().st_mode) == 0o700
        finally:
            r.close()
        if cc is not None:
            assert not xdg.exists(), list(xdg.rglob("*"))
