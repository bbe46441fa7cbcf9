"""Sessions and allocation, gang order and weights (issue 4, items 1-2).

Real controller and workers started by hand, several real JAX clients at
once (each a Runner process), each asking for devices with CAUSEWAY_DEVICES
and friends. Assertions are on what JAX sees (device attributes), results
against numpy, error texts, and the launch-order records that the controller
and the workers keep (Stats.sched_stamps)."""
from __future__ import annotations

import os
import time

import pytest

import harness

pytestmark = pytest.mark.skipif(harness.missing_build() is not None,
                                reason=str(harness.missing_build()))

CHECKS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "alloc_checks.py")


def client(name, cluster, lazy=False, **alloc):
    env = harness.causeway_env(controller=cluster.controller)
    env["CW_RUNNER_CHECKS"] = CHECKS
    for k, v in alloc.items():
        env[f"CAUSEWAY_{k.upper()}"] = str(v)
    if lazy:
        env["CW_RUNNER_LAZY"] = "1"
    return harness.Runner(name, env)


def close_all(runners):
    for r in runners:
        try:
            r.close()
        except Exception:  # noqa: BLE001 - best effort
            pass


# ---- Stats.sched_stamps ----------------------------------------------------------------

def sched_record(address):
    """[(island, stamp, session_id)] from a controller's or worker's STATS."""
    st = harness.stats(address)
    out = []
    for field, wt, val in harness._pb_fields(st["raw"]):
        if field == 30 and wt == 2:
            rec = {1: 0, 2: 0, 3: 0}
            for f2, _, v2 in harness._pb_fields(val):
                rec[f2] = v2
            out.append((rec[1], rec[2], rec[3]))
    return out


# ---- Allocation ---------------------------------------------------------------------------

def test_exclusive_sessions_queue_and_errors():
    cluster = harness.HandCluster(workers=2, devices=4)
    runners = []
    try:
        a = client("alloc-a", cluster, devices=4)
        b = client("alloc-b", cluster, devices=4)
        runners += [a, b]
        ia, ib = a.call("alloc_devices"), b.call("alloc_devices")
        # Each sees exactly 4 devices, numbered 0..3, all on one worker; the two
        # sessions got different workers (exclusive).
        for info in (ia, ib):
            assert info["ids"] == [0, 1, 2, 3], info
            assert len(set(info["workers"])) == 1, info
            assert sorted(info["local"]) == [0, 1, 2, 3], info
        assert ia["workers"][0] != ib["workers"][0], (ia, ib)
        for r in (a, b):
            res = r.call("alloc_compute", seed=3)
            assert res["ok"] and res["n"] == 4, res
        # A third waits in the queue and says why on stderr.
        c = client("alloc-c", cluster, lazy=True, devices=4)
        runners.append(c)
        c.submit("backend_init")
        assert harness.wait_until(lambda: "causeway: waiting for 4 devices" in c.log_text(),
                                  150), c.log_tail()
        assert "causeway: waiting for 4 devices (0 of 8 free; 0 sessions ahead in the queue)" \
            in c.log_text(), c.log_tail()
        assert harness.stats(cluster.controller)["alloc_queue"] == 1
        # A timed wait behind it fails with DEADLINE_EXCEEDED naming what was asked.
        d = client("alloc-d", cluster, lazy=True, devices=2, queue_timeout=1.5)
        runners.append(d)
        got = d.call("backend_init", timeout=120)
        assert not got["ok"], got
        assert "waited 1." in got["error"] and "for 2 devices: 0 of 8 matching devices free, " \
            "1 session ahead in the queue" in got["error"], got
        assert "DEADLINE_EXCEEDED" in got["error"] or "deadline" in got["error"].lower(), got
        # One exits: the waiting one gets its worker.
        freed = ia["workers"][0]
        a.close()
        got = c.result(timeout=120)
        assert got["ok"] and got["devices"] == 4, got
        ic = c.call("alloc_devices")
        assert set(ic["workers"]) == {freed}, (ic, freed)
        assert c.call("alloc_compute", seed=4)["ok"]
        assert harness.stats(cluster.controller)["alloc_queue"] == 0
        # Requests that can never be met fail at once.
        for alloc, text in (({"devices": 9}, "asks for 9 devices; the matching workers have 8"),
                            ({"devices": 1, "workers": "nope"},
                             "unknown worker 'nope' (workers: hand-worker-"),
                            ({"devices": 1, "platform": "tpu"},
                             "no worker has platform 'tpu' (platforms: cpu)"),
                            ({"devices": 5, "min_island": 5},
                             "asks for islands of at least 5 devices; the largest matching "
                             "island has 4"),
                            ({"devices": "abc"}, "CAUSEWAY_DEVICES: 'abc' is not an integer"),
                            ({"devices": 2, "share": 2}, "CAUSEWAY_SHARE: '2' is not a boolean"),
                            ({"devices": 2, "queue_timeout": "-1"},
                             "CAUSEWAY_QUEUE_TIMEOUT: -1 is outside [0, 86400] seconds"),
                            ({"share": 1}, "need CAUSEWAY_DEVICES")):
            e = client("alloc-bad", cluster, lazy=True, **alloc)
            try:
                got = e.call("backend_init", timeout=60)
            finally:
                e.close()
            assert not got["ok"] and text in got["error"], (alloc, got)
            assert got["elapsed"] < 20, got
    finally:
        close_all(runners)
        cluster.stop()


def test_queued_session_waits_for_a_dead_workers_replacement():
    """A session queued for devices that only a dead worker's slot can give
    waits for its replacement (before, the death failed it at once: 'the
    matching workers have 2 in all', an audit), as does one that asks while
    the worker is dead; then both are served, one after the other."""
    cluster = harness.HandCluster(workers=2, devices=2, tcp=True)
    runners = []
    try:
        a = client("alloc-holder", cluster, devices=4)
        runners.append(a)
        assert a.call("alloc_devices")["ids"] == [0, 1, 2, 3]
        b = client("alloc-queued", cluster, lazy=True, devices=4)
        runners.append(b)
        b.submit("backend_init")
        assert harness.wait_until(lambda: "causeway: waiting for 4 devices" in b.log_text(),
                                  150), b.log_tail()
        victim = "hand-worker-1"
        cluster.kill(victim)
        assert harness.wait_until(lambda: harness.stats(cluster.controller)["workers"] == 1, 30)
        a.close()  # frees hand-worker-0's devices; b still needs the dead slot's
        late = client("alloc-late", cluster, lazy=True, devices=4)
        runners.append(late)
        late.submit("backend_init")
        assert harness.wait_until(lambda: "causeway: waiting for 4 devices" in late.log_text(),
                                  150), late.log_tail()
        time.sleep(1.0)
        assert harness.stats(cluster.controller)["alloc_queue"] == 2, b.log_tail()
        cluster.start_worker(victim, key=victim + "-replacement")
        got = b.result(timeout=120)
        assert got["ok"] and got["devices"] == 4, got
        assert b.call("alloc_compute", seed=5)["ok"]
        b.close()
        got = late.result(timeout=120)
        assert got["ok"] and got["devices"] == 4, got
        assert late.call("alloc_compute", seed=6)["ok"]
    finally:
        close_all(runners)
        cluster.stop()


def test_queued_behind_a_dead_workers_wait_go_first():
    """A request that waits for a dead worker's slot holds up nobody behind
    it: a request that fits on the live workers is granted meanwhile (before,
    first come first served kept it waiting as long as the worker stayed
    dead, with its devices free). Once the worker is back the first one waits
    for sessions like any other, and holds up those behind it again."""
    cluster = harness.HandCluster(workers=2, devices=2, tcp=True)
    runners = []
    try:
        victim = "hand-worker-1"
        cluster.kill(victim)
        assert harness.wait_until(lambda: harness.stats(cluster.controller)["workers"] == 1, 30)
        big = client("alloc-big", cluster, lazy=True, devices=4)
        runners.append(big)
        big.submit("backend_init")
        assert harness.wait_until(lambda: "causeway: waiting for 4 devices" in big.log_text(),
                                  150), big.log_tail()
        assert "(2 of 4 free; 0 sessions ahead in the queue; it needs devices of workers that " \
            "are down or draining, and sessions queued behind it may go first meanwhile)" \
            in big.log_text(), big.log_tail()
        # Behind it, two devices of the live worker: granted, and they compute.
        small = client("alloc-small", cluster, lazy=True, devices=2)
        runners.append(small)
        got = small.call("backend_init", timeout=120)
        assert got["ok"] and got["devices"] == 2, got
        info = small.call("alloc_devices")
        assert set(info["workers"]) == {"hand-worker-0"}, info
        assert small.call("alloc_compute", seed=7)["ok"]
        # The worker comes back: the first request now waits for `small` to end,
        # and a later one waits behind it.
        cluster.start_worker(victim, key=victim + "-replacement")
        late = client("alloc-after", cluster, lazy=True, devices=2)
        runners.append(late)
        late.submit("backend_init")
        assert harness.wait_until(
            lambda: "causeway: waiting for 2 devices (2 of 4 free; 1 session ahead in the queue)"
            in late.log_text(), 150), late.log_tail()
        assert harness.stats(cluster.controller)["alloc_queue"] == 2
        small.close()
        got = big.result(timeout=120)
        assert got["ok"] and got["devices"] == 4, got
        assert big.call("alloc_compute", seed=8)["ok"]
        big.close()
        got = late.result(timeout=120)
        assert got["ok"] and got["devices"] == 2, got
        assert late.call("alloc_compute", seed=9)["ok"]
    finally:
        close_all(runners)
        cluster.stop()


def test_a_request_for_other_workers_goes_first():
    """A request queued behind one it cannot delay goes first: the first waits
    for hand-worker-0 (busy), and a later one is granted hand-worker-1 (free),
    which the first can never be given. Before, first come first served kept it
    waiting until hand-worker-0 was free. One that needs hand-worker-0's
    devices too still waits behind the first."""
    cluster = harness.HandCluster(workers=2, devices=2, tcp=True)
    runners = []
    try:
        holder = client("alloc-w0-holder", cluster, devices=2, workers="hand-worker-0")
        runners.append(holder)
        assert set(holder.call("alloc_devices")["workers"]) == {"hand-worker-0"}
        first = client("alloc-w0-next", cluster, lazy=True, devices=2, workers="hand-worker-0")
        runners.append(first)
        first.submit("backend_init")
        assert harness.wait_until(
            lambda: "causeway: waiting for 2 devices (on workers hand-worker-0) (0 of 2 free; "
            "0 sessions ahead in the queue)" in first.log_text(), 150), first.log_tail()
        # Any worker will do for this one: granted hand-worker-1 at once.
        other = client("alloc-any", cluster, lazy=True, devices=2)
        runners.append(other)
        got = other.call("backend_init", timeout=120)
        assert got["ok"] and got["devices"] == 2, got
        assert set(other.call("alloc_devices")["workers"]) == {"hand-worker-1"}
        assert other.call("alloc_compute", seed=11)["ok"]
        # Four devices need hand-worker-0's as well: it waits behind the first.
        big = client("alloc-big-any", cluster, lazy=True, devices=4, queue_timeout=2)
        runners.append(big)
        got = big.call("backend_init", timeout=120)
        assert not got["ok"] and "waited 2." in got["error"] and "1 session ahead in the " \
            "queue" in got["error"], got
        assert harness.stats(cluster.controller)["alloc_queue"] == 1
        holder.close()
        got = first.result(timeout=120)
        assert got["ok"] and got["devices"] == 2, got
        assert first.call("alloc_compute", seed=12)["ok"]
    finally:
        close_all(runners)
        cluster.stop()


def test_named_workers_and_sharing_placement():
    cluster = harness.HandCluster(workers=2, devices=4)
    runners = []
    try:
        # Named worker; two sharers of one island pack onto the same devices.
        # One after the other: a second sharer that attached before the first
        # could take worker 1's free island and leave the named one waiting.
        a = client("named", cluster, devices=2, workers="hand-worker-1")
        runners.append(a)
        ia = a.call("alloc_devices")
        assert set(ia["workers"]) == {"hand-worker-1"} and ia["ids"] == [0, 1], ia
        s1 = client("share-1", cluster, devices=4, share=1, workers="hand-worker-0")
        runners.append(s1)
        i1 = s1.call("alloc_devices")
        s2 = client("share-2", cluster, devices=4, share=1)
        runners.append(s2)
        i2 = s2.call("alloc_devices")
        assert set(i1["workers"]) == {"hand-worker-0"} and set(i2["workers"]) == {"hand-worker-0"}
        # An exclusive request cannot take shared devices: 2 left on worker 1.
        e = client("excl", cluster, lazy=True, devices=3, queue_timeout=1)
        runners.append(e)
        got = e.call("backend_init", timeout=60)
        assert not got["ok"] and "2 of 8 matching devices free" in got["error"], got
        for r in (a, s1, s2):
            assert r.call("alloc_compute", seed=5)["ok"]
    finally:
        close_all(runners)
        cluster.stop()


# ---- Gang order and weights ---------------------------------------------------------------

def island_records(ctl_records):
    out = {}
    for isl, stamp, sid in ctl_records:
        out.setdefault(isl, []).append((stamp, sid))
    return out


def test_shared_island_gang_order():
    cluster = harness.HandCluster(workers=2, devices=4)
    runners = []
    try:
        # Three sessions share one island (worker 0's 4 devices), a fourth has
        # worker 1 alone (direct launches under the lease); all run SPMD
        # programs with an all-reduce at once. The sharers' weights differ, so
        # the island's scheduler must order them: the third's coming withdraws
        # the first two's direct leases (LEASE_CHANGED), and every launch of
        # the three is relayed and stamped.
        sharers = [client(f"gang-{i}", cluster, devices=4, share=1, weight=w,
                          workers="hand-worker-0")
                   for i, w in enumerate((1, 1, 2))]
        # Pinned: the four start at once, and an exclusive session that took
        # worker 0 first would leave the sharers waiting for it forever.
        other = client("gang-excl", cluster, devices=4, workers="hand-worker-1")
        runners += sharers + [other]
        for r in runners:
            info = r.call("alloc_devices")
            want = "hand-worker-1" if r is other else "hand-worker-0"
            assert set(info["workers"]) == {want}, info
        for i, r in enumerate(runners):
            r.submit("spmd_psum", n=40, seed=i)
        for r in runners:
            res = r.result(timeout=300)
            assert res["ok"] and res["n"] == 40 and res["devices"] == 4, res
        ctl = island_records(sched_record(cluster.controller))
        assert harness.stats(cluster.controller)["sched_stamps_dropped"] == 0
        for name in ("hand-worker-0", "hand-worker-1"):
            wrec = [(stamp, sid) for _, stamp, sid in sched_record(cluster.addresses[name])]
            assert harness.stats(cluster.addresses[name])["sched_stamps_dropped"] == 0
            if name == "hand-worker-1":
                # Its devices are the exclusive session's alone: under the lease it
                # launches straight to the worker, with no stamps on either side.
                assert wrec == [] and len(ctl) == 1, (wrec[:5], list(ctl))
                assert harness.stats(cluster.addresses[name])["launches"] >= 40
                continue
            # The worker issued exactly the controller's stamps for its island, in order.
            match = [isl for isl, rec in ctl.items() if rec == wrec]
            assert match, (name, wrec[:20], {k: v[:20] for k, v in ctl.items()})
            stamps = [s for s, _ in wrec]
            assert stamps == list(range(1, len(stamps) + 1)), stamps[:50]
            sessions = {sid for _, sid in wrec}
            switches = sum(1 for a, b in zip(wrec, wrec[1:]) if a[1] != b[1])
            print(f"{name}: {len(wrec)} stamps from {len(sessions)} sessions, "
                  f"{switches} switches between sessions")
            # The withdrawal reaches a client as an event on its controller
            # connection; a launch sent before it was read would go direct. The
            # sharers launch long after (the third's client starts, the test asks
            # each for its devices), so all 120 must be stamped.
            assert len(sessions) == 3 and len(wrec) >= 120, (len(sessions), len(wrec))
    finally:
        close_all(runners)
        cluster.stop()


def test_shared_island_of_one_weight_launches_direct():
    # Sessions of one weight sharing a one-worker island need no scheduler:
    # the worker's single loop issues their launches in one order, so they go
    # straight to it under the lease. Their all-reduces over the same 4
    # devices, from three processes at once, all finish with the right values.
    cluster = harness.HandCluster(workers=1, devices=4)
    runners = []
    try:
        runners += [client(f"direct-{i}", cluster, devices=4, share=1) for i in range(3)]
        for r in runners:
            assert set(r.call("alloc_devices")["workers"]) == {"hand-worker-0"}
        for i, r in enumerate(runners):
            r.submit("spmd_psum", n=40, seed=i)
        for r in runners:
            res = r.result(timeout=300)
            assert res["ok"] and res["n"] == 40 and res["devices"] == 4, res
        ctl = harness.stats(cluster.controller)
        worker = harness.stats(cluster.addresses["hand-worker-0"])
        assert ctl.get("launches", 0) == 0 and sched_record(cluster.controller) == [], ctl
        assert sched_record(cluster.addresses["hand-worker-0"]) == []
        assert worker.get("launches", 0) >= 120, worker.get("launches")
    finally:
        close_all(runners)
        cluster.stop()


def backlogged_stretch(seq, run):
    """The longest stretch of seq in which no value repeats more than `run`
    times in a row (cut through the middle of each longer run)."""
    best, start, i = [], 0, 0
    while i < len(seq):
        j = i
        while j < len(seq) and seq[j] == seq[i]:
            j += 1
        if j - i > run:  # a run too long: the stretch ends before it
            if i - start > len(best):
                best = seq[start:i]
            start = j
        i = j
    if len(seq) - start > len(best):
        best = seq[start:]
    return best


def test_weights_share_a_backlogged_island():
    # The window the default (128) would let out unordered is most of the
    # bursts; a small one leaves the scheduler's order to measure.
    cluster = harness.HandCluster(workers=1, devices=4, controller_args=("--sched-window", "32"))
    runners = []
    try:
        heavy = client("weight-2", cluster, devices=1, share=1, weight=2)
        light = client("weight-1", cluster, devices=1, share=1, weight=1)
        runners += [heavy, light]
        for r in runners:
            assert r.call("burst", n=1)["ok"]  # compiled, warm
        n_heavy, n_light = 240, 120
        # Up to three rounds: on a busy machine one client's burst can start
        # late, and then the two were backlogged together too briefly to
        # measure (CI once: 63 stamps, ratio 2.00). The ratio is checked on
        # the first round that gives a window of 25 light stamps or more.
        for attempt in range(3):
            # Launches heavy enough that the island, not the clients' dispatch,
            # is the bottleneck: both queues stay backlogged at the controller
            # (with light ones a loaded machine could leave them empty, and the
            # stamps would follow arrival instead of the weights).
            heavy.submit("burst", n=n_heavy, size=384)
            light.submit("burst", n=n_light, size=384)
            for r in runners:
                assert r.result(timeout=600)["ok"]
            rec = sched_record(cluster.controller)
            (island,) = {isl for isl, _, _ in rec}
            seq = [sid for _, _, sid in sorted(rec, key=lambda x: x[1])]
            sessions = sorted(set(seq), key=seq.count)
            assert len(sessions) == 2, sessions
            light_sid, heavy_sid = sessions
            # This round's bursts: each session's last n stamps.
            hpos = [i for i, s in enumerate(seq) if s == heavy_sid][-n_heavy:]
            lpos = [i for i, s in enumerate(seq) if s == light_sid][-n_light:]
            lo, hi = max(hpos[0], lpos[0]), min(hpos[-1], lpos[-1])
            # Within that, where both queues were backlogged: the longest
            # stretch in which neither session ran more than RUN stamps in a
            # row. Weights 2:1 interleave (HHL HHL); a queue that ran dry (a
            # client descheduled mid-burst: CI once had the light one alone
            # through the middle) leaves the other a long run, which is not a
            # share to measure. A scheduler that ignored the weights would
            # still fail the ratio below, or leave no such stretch at all.
            window = backlogged_stretch(seq[lo:hi + 1] if hi >= lo else [], run=8)
            h, l = window.count(heavy_sid), window.count(light_sid)
            print(f"round {attempt + 1}, weights 2:1: {h} and {l} stamps in the window where "
                  f"both waited (ratio {h / max(l, 1):.2f})")
            if l >= 25:
                break
        assert l >= 25, (h, l, lo, hi)
        assert 1.6 <= h / l <= 2.5, (h, l, window[:60])
    finally:
        close_all(runners)
        cluster.stop()
