#!/usr/bin/env python3
"""A bounded chaos soak of one JAX process that goes on through every fault.

    nice -n 19 .venv/bin/python tests/chaos/jax_soak.py --seed 3 --minutes 8
    CAUSEWAY_BIN_DIR=build/asan/bin ... --seed 4     # the daemons under ASan

One client (soak_client.py: training on each worker's 2 devices, 1-16 MiB
round trips, fresh compiles, all checked exactly) runs against a hand-started
cluster (controller, 3 workers of 2 devices, loopback TCP) while seeded events
hit it one at a time:

- kill_worker: SIGKILL, a replacement of the same name after down_ms;
- stop_worker: SIGSTOP past --worker-timeout-ms, then SIGCONT;
- kill_controller: SIGKILL, a new controller on the address after down_ms;
- freeze_client: the JAX process SIGSTOPped, a worker SIGKILLed meanwhile,
  its replacement started before or after the client's SIGCONT;
- kill_in_compile / kill_in_upload: the worker SIGKILLed while the client's
  compile of a new program / 64 MiB round trip on it is in flight;
- kill_controller_in_compile: the controller SIGKILLed (and restarted) while
  a compile is in flight; stop_in_upload: a worker SIGSTOPped past the
  timeout while a 64 MiB round trip on it is in flight;
- freeze_client_ctl: the JAX process SIGSTOPped while the controller is
  SIGKILLed and restarted; freeze_in_download: the JAX process SIGSTOPped
  during a 64 MiB round trip, nothing else (every op must succeed);
- kill_two: two workers SIGKILLed at once; kill_worker_then_controller: a
  worker SIGKILLed, then the controller, the replacement registering with
  the new controller.

--kinds picks some; --freeze-max-ms bounds the client's stops. The client
goes on in the same process after every error (a training step re-uploads
its host checkpoint; an array of a replaced worker fails `... lived on the
lost worker ...; upload it again`, which is expected, and is re-uploaded).

Checked: every op that succeeded has the right numbers; every op that failed
did so with UNAVAILABLE naming the lost daemon, and only while it was down
(or having started before its replacement was in); the client never stalls
(--hang-s); once the fault is over, ops on the victim succeed again (the
recovery time: from the fault's end to that success); no daemon exits on its
own, sanitizer reports in no log, everything freed once the client leaves,
every daemon exits 0 on SIGTERM. report.json in --out has the counts, the
recoveries and every distinct error text (numbers as N).
"""
from __future__ import annotations

import argparse
import json
import os
import random
import re
import shutil
import signal
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
sys.path.insert(0, os.path.join(ROOT, "tests", "jax"))

import harness  # noqa: E402

KINDS = ("kill_worker", "stop_worker", "kill_controller", "freeze_client",
         "kill_in_compile", "kill_in_upload", "kill_controller_in_compile", "stop_in_upload",
         "freeze_client_ctl", "kill_two", "kill_worker_then_controller", "freeze_in_download")
REF_STEPS = 300


class Soak:
    def __init__(self, a):
        self.a = a
        self.rng = random.Random(a.seed)
        self.out = a.out or tempfile.mkdtemp(prefix=f"cw-soak-{a.seed}-")
        os.makedirs(self.out, exist_ok=True)
        self.t_start = time.monotonic()
        self.failures: list[str] = []
        self.windows: list[dict] = []  # fault windows: who, t_from, t_to
        self.counts = {k: 0 for k in KINDS}
        self.recoveries: list[tuple] = []
        self.ops_off = 0
        self.ops: list[dict] = []
        self.frozen_s = 0.0
        self.nkey = 0
        self.shapes: dict[str, int] = {}
        self.kinds = a.kinds.split(",") if a.kinds else list(KINDS)
        bad = set(self.kinds) - set(KINDS)
        if bad:
            raise SystemExit(f"unknown kinds {sorted(bad)}; known: {', '.join(KINDS)}")

    def say(self, msg):
        print(f"[soak {time.monotonic() - self.t_start:7.1f}s] {msg}", flush=True)

    def fail(self, msg):
        self.failures.append(msg)
        self.say("FAILURE: " + msg[:600])

    # ---- set-up ---------------------------------------------------------------------------

    def start(self):
        a = self.a
        ref = os.path.join(self.out, "reference")
        env = harness.stock_env()
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        rc = subprocess.run([harness.PYTHON, os.path.join(HERE, "chaos_client.py"), "--reference",
                             "--steps", str(REF_STEPS), "--dir", ref, "--seed", "0", "1", "2"],
                            env=env, cwd=ROOT, capture_output=True, timeout=600)
        if rc.returncode:
            raise SystemExit(f"reference failed: {rc.stderr[-3000:]!r}")
        self.cluster = harness.HandCluster(
            workers=3, devices=2, tcp=True,
            controller_args=("--worker-timeout-ms", str(a.worker_timeout_ms)),
            worker_args=("--heartbeat-ms", "200", "--reconnect-max-ms", "300"))
        self.current = {n: n for n in self.cluster.procs}
        env = harness.causeway_env(controller=self.cluster.controller)
        env.pop("CAUSEWAY_COMPILE_CACHE_DIR", None)
        env["CAUSEWAY_MIN_WORKERS"] = "3"
        env["CAUSEWAY_WORKER_LINK_TIMEOUT_MS"] = str(a.link_timeout_ms)
        self.cdir = os.path.join(self.out, "client")
        os.makedirs(self.cdir, exist_ok=True)
        log = open(os.path.join(self.cdir, "log"), "ab")
        self.client = subprocess.Popen(
            [harness.PYTHON, os.path.join(HERE, "soak_client.py"), "--seed", str(a.seed),
             "--dir", self.cdir, "--reference", ref, "--steps", str(REF_STEPS)],
            env=env, cwd=ROOT, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            start_new_session=True)
        log.close()
        if not harness.wait_until(lambda: len(self.read_ops()) >= 3, 180, 0.2):
            raise SystemExit("client made no progress\n" + self.client_log())

    def client_log(self, n=4000):
        try:
            with open(os.path.join(self.cdir, "log"), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def read_ops(self):
        try:
            with open(os.path.join(self.cdir, "ops.jsonl")) as f:
                f.seek(self.ops_off)
                data = f.read()
        except OSError:
            return self.ops
        end = data.rfind("\n") + 1
        self.ops_off += len(data[:end].encode())
        for line in data[:end].splitlines():
            rec = json.loads(line)
            self.ops.append(rec)
            self.judge(rec)
        return self.ops

    def doing(self):
        try:
            with open(os.path.join(self.cdir, "doing")) as f:
                op, w, t0 = f.read().split()
            return op, w, float(t0)
        except (OSError, ValueError):
            return None

    # ---- judging ------------------------------------------------------------------------------

    def judge(self, rec):
        if rec.get("bad"):
            self.fail(f"WRONG NUMBER: op {rec['n']} {rec['op']} on {rec['worker']}: {rec['bad']}")
            return
        if rec["ok"]:
            return
        err = rec["error"]
        shape = re.sub(r"[0-9]+", "N", err)[:300]
        self.shapes[shape] = self.shapes.get(shape, 0) + 1
        # An array of a worker lost before (the docs: upload it again).
        if "lived on the lost worker" in err and "UNAVAILABLE" in err and \
                any(w["name"] in err for w in self.windows):
            return
        # The windows that may explain it: the op overlapped them.
        cands = [w for w in self.windows
                 if rec["t0"] <= w["t_to"] + 1.0 and rec["t1"] >= w["t_from"]]
        names = [w["name"] for w in cands]
        why = None
        if not cands:
            why = "an error with no fault going on"
        elif "UNAVAILABLE" not in err:
            why = "not UNAVAILABLE"
        elif not any(n in err for n in names):
            why = f"names none of {names}"
        if why:
            self.fail(f"op {rec['n']} {rec['op']} on {rec['worker']} "
                      f"({rec['t1'] - rec['t0']:.2f} s): {why}: {err[:800]}")

    # ---- events ------------------------------------------------------------------------------

    def proc(self, name):
        return self.cluster.procs[self.current[name]]

    def window(self, name):
        w = {"name": name, "t_from": time.monotonic(), "t_to": float("inf")}
        self.windows.append(w)
        return w

    def kill_worker(self, name):
        p = self.proc(name)
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        key = f"{name}#{self.nkey}"
        self.nkey += 1
        self.cluster.procs[key] = self.cluster.procs.pop(self.current[name])
        if self.current[name] in self.cluster.addresses and self.current[name] != key:
            self.cluster.addresses[key] = self.cluster.addresses.pop(self.current[name])
        self.current[name] = None

    def replace_worker(self, name):
        key = f"{name}@{self.nkey}"
        self.nkey += 1
        self.cluster.start_worker(name, key=key)
        self.current[name] = key

    def addr_of(self, name):
        return self.cluster.addresses.get(self.current[name] or "", name)

    def ctl_stats(self):
        try:
            return harness.stats(self.cluster.controller)
        except Exception:  # noqa: BLE001
            return None

    def wait_registered(self, what, timeout=60):
        if not harness.wait_until(lambda: (self.ctl_stats() or {}).get("workers") == 3,
                                  timeout, 0.1):
            self.fail(f"{what}: the workers did not all register in {timeout} s\n"
                      f"{self.cluster.logs()}")

    def recovered(self, name, w, t_end, kind):
        """Waits for an op on `name` that started after t_end and succeeded."""
        deadline = time.monotonic() + self.a.recover_s
        while time.monotonic() < deadline:
            self.tick()
            for rec in self.ops[::-1]:
                if rec["t0"] < t_end:
                    break
                if rec["ok"] and (rec["worker"] == name or name == "controller"):
                    dt = rec["t1"] - t_end
                    self.recoveries.append((kind, name, round(dt, 3)))
                    w["t_to"] = rec["t0"]
                    return
            time.sleep(0.05)
        last = [r for r in self.ops if r["t0"] >= t_end][-5:]
        self.fail(f"{kind} on {name}: no successful op on it within {self.a.recover_s} s of the "
                  f"fault's end; the last ops: {json.dumps(last)[:2000]}\n"
                  f"--- client ---\n{self.client_log()}")
        w["t_to"] = time.monotonic()

    def force(self, op, name, timeout=60):
        with open(os.path.join(self.cdir, "request"), "w") as f:
            f.write(f"{op} {name}")
        ok = harness.wait_until(lambda: (self.doing() or ("",))[:2] == (op, name), timeout, 0.001)
        if not ok:
            self.fail(f"the client did not take the request {op} {name} in {timeout} s")
        return ok

    def force_in(self, ev, op, name):
        """Has the client start `op` on `name`, then waits the event's delay:
        False if the client never took it; ev["in_flight"] says whether the
        op was still under way after the delay (the fault lands inside it)."""
        if not self.force(op, name):
            return False
        time.sleep(ev["delay_ms"] / 1000)
        d = self.doing()
        ev["in_flight"] = d is not None and d[:2] == (op, name)
        return True

    def restart_controller(self, down_ms):
        p = self.proc("controller")
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        key = f"controller#{self.nkey}"
        self.nkey += 1
        self.cluster.procs[key] = self.cluster.procs.pop("controller")
        time.sleep(down_ms / 1000)
        self.cluster.start_controller()

    def run_event(self, ev):
        kind, name = ev["kind"], ev.get("worker")
        self.say(f"event {ev}")
        self.counts[kind] += 1
        if kind in ("kill_worker", "kill_in_compile", "kill_in_upload"):
            if kind != "kill_worker":
                op = "compile" if kind == "kill_in_compile" else "upload_big"
                if not self.force_in(ev, op, name):
                    return
            w = self.window(name)
            self.kill_worker(name)
            time.sleep(ev["down_ms"] / 1000)
            self.replace_worker(name)
            self.wait_registered(kind)
            self.recovered(name, w, time.monotonic(), kind)
        elif kind in ("stop_worker", "stop_in_upload"):
            if kind == "stop_in_upload":
                if not self.force_in(ev, "upload_big", name):
                    return
            w = self.window(name)
            p = self.proc(name)
            p.send_signal(signal.SIGSTOP)
            time.sleep(ev["down_ms"] / 1000)
            p.send_signal(signal.SIGCONT)
            self.wait_registered(kind)
            self.recovered(name, w, time.monotonic(), kind)
        elif kind in ("kill_controller", "kill_controller_in_compile"):
            if kind == "kill_controller_in_compile":
                if not self.force_in(ev, "compile", name):
                    return
            w = self.window(self.cluster.controller)
            self.restart_controller(ev["down_ms"])
            self.wait_registered(kind)
            t_end = time.monotonic()
            for n in ("hand-worker-0", "hand-worker-1", "hand-worker-2"):
                self.recovered(n, w, t_end, kind)
        elif kind == "freeze_client_ctl":
            w = self.window(self.cluster.controller)
            self.client.send_signal(signal.SIGSTOP)
            t_f = time.monotonic()
            self.restart_controller(ev["down_ms"])
            self.wait_registered(kind)
            time.sleep(max(0.0, ev["frozen_ms"] / 1000 - (time.monotonic() - t_f)))
            self.client.send_signal(signal.SIGCONT)
            self.frozen_s += time.monotonic() - t_f
            t_end = time.monotonic()
            for n in ("hand-worker-0", "hand-worker-1", "hand-worker-2"):
                self.recovered(n, w, t_end, kind)
        elif kind == "kill_worker_then_controller":
            w = self.window(name)
            wc = self.window(self.cluster.controller)
            self.kill_worker(name)
            time.sleep(ev["down_ms"] / 1000)
            self.restart_controller(ev["ctl_down_ms"])
            if ev["replace_after"]:
                time.sleep(1.0)
            self.replace_worker(name)
            self.wait_registered(kind)
            t_end = time.monotonic()
            self.recovered(name, w, t_end, kind)
            for n in ("hand-worker-0", "hand-worker-1", "hand-worker-2"):
                self.recovered(n, wc, t_end, kind)
        elif kind == "freeze_in_download":
            if not self.force_in(ev, "upload_big", name):
                return
            self.client.send_signal(signal.SIGSTOP)
            t_f = time.monotonic()
            time.sleep(ev["frozen_ms"] / 1000)
            self.client.send_signal(signal.SIGCONT)
            self.frozen_s += time.monotonic() - t_f
            w = {"name": "-", "t_from": 0, "t_to": 0}
            self.recovered(name, w, time.monotonic(), kind)
        elif kind == "kill_two":
            others = [n for n in ("hand-worker-0", "hand-worker-1", "hand-worker-2") if n != name]
            two = [name, others[ev["other"] % 2]]
            ws = [self.window(n) for n in two]
            for n in two:
                self.kill_worker(n)
            time.sleep(ev["down_ms"] / 1000)
            for n in two:
                self.replace_worker(n)
            self.wait_registered(kind)
            t_end = time.monotonic()
            for n, w in zip(two, ws):
                self.recovered(n, w, t_end, kind)
        elif kind == "freeze_client":
            w = self.window(name)
            self.client.send_signal(signal.SIGSTOP)
            t_f = time.monotonic()
            self.kill_worker(name)
            time.sleep(ev["frozen_ms"] / 1000)
            if ev["replace_first"]:
                self.replace_worker(name)
                self.wait_registered(kind)
                time.sleep(0.5)
            self.client.send_signal(signal.SIGCONT)
            self.frozen_s += time.monotonic() - t_f
            if not ev["replace_first"]:
                time.sleep(ev["down_ms"] / 1000)
                self.replace_worker(name)
                self.wait_registered(kind)
            self.recovered(name, w, time.monotonic(), kind)
        self.say(f"  recovered; in flight: {ev.get('in_flight', '-')}; "
                 f"ops so far {len(self.ops)}, errors {sum(1 for r in self.ops if not r['ok'])}")

    def schedule(self):
        r = self.rng
        names = ["hand-worker-0", "hand-worker-1", "hand-worker-2"]
        while True:
            kind = r.choice(self.kinds)
            ev = {"kind": kind, "gap": round(r.uniform(*self.a.gap), 2)}
            ev["worker"] = r.choice(names)
            t = self.a.worker_timeout_ms
            if kind in ("stop_worker", "stop_in_upload"):
                ev["down_ms"] = r.randint(t + 1500, t + 3000)
            else:
                ev["down_ms"] = r.randint(100, 2000)
            if kind == "kill_worker_then_controller":
                ev["ctl_down_ms"] = r.randint(100, 1500)
                ev["replace_after"] = r.random() < 0.5
            if kind == "freeze_in_download":
                ev["frozen_ms"] = r.randint(500, self.a.freeze_max_ms)
                ev["delay_ms"] = r.randint(0, 80)
            if kind == "kill_two":
                ev["other"] = r.randint(0, 1)
            if kind == "freeze_client_ctl":
                ev["frozen_ms"] = r.randint(1000, self.a.freeze_max_ms)
            if kind == "freeze_client":
                ev["frozen_ms"] = r.randint(1000, self.a.freeze_max_ms)
                ev["replace_first"] = r.random() < 0.5
            if kind in ("kill_in_compile", "kill_controller_in_compile"):
                ev["delay_ms"] = r.randint(0, 300)
            if kind in ("kill_in_upload", "stop_in_upload"):
                ev["delay_ms"] = r.randint(0, 60)
            yield ev

    # ---- the loop -------------------------------------------------------------------------------

    def tick(self):
        self.read_ops()
        if self.client.poll() is not None:
            raise RuntimeError(f"client exited {self.client.returncode}\n{self.client_log()}")
        d = self.doing()
        if d and time.monotonic() - d[2] > self.a.hang_s:
            raise RuntimeError(f"client hung: {d[0]} on {d[1]} for {time.monotonic() - d[2]:.0f} s"
                               f"\n{self.cluster.logs()}\n--- client ---\n{self.client_log()}")
        for name, key in self.current.items():
            if key is None:
                continue
            p = self.cluster.procs[key]
            if p.poll() is not None:
                raise RuntimeError(f"{key} exited {p.returncode} on its own\n"
                                   f"{self.cluster.log(key)[-4000:]}")

    def idle(self, s):
        end = time.monotonic() + s
        while time.monotonic() < end:
            self.tick()
            time.sleep(0.05)

    def run(self):
        a = self.a
        self.say(f"seed {a.seed}, bin {harness.bin_dir()}, out {self.out}")
        self.start()
        deadline = self.t_start + a.minutes * 60
        try:
            for ev in self.schedule():
                if time.monotonic() + ev["gap"] + 20 > deadline:
                    break
                self.idle(ev["gap"])
                self.run_event(ev)
            self.idle(3)
            self.finish()
        except RuntimeError as e:
            self.fail(str(e))
        finally:
            self.stop()
        return self.report()

    def finish(self):
        open(os.path.join(self.cdir, "stop"), "w").close()
        try:
            rc = self.client.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.fail("the client did not stop in 60 s")
            return
        self.read_ops()
        if rc != 0:
            self.fail(f"client exited {rc}\n{self.client_log()}")
        leaks = {}

        def clean():
            leaks.clear()
            for name, key in self.current.items():
                addr = self.cluster.controller if name == "controller" else \
                    self.cluster.addresses[key]
                try:
                    st = harness.stats(addr)
                except Exception as e:  # noqa: BLE001
                    leaks[name] = str(e)
                    continue
                if name == "controller":
                    bad = {k: st[k] for k in ("sessions",) if st[k] > 1}
                else:
                    bad = {k: st[k] for k in ("buffers", "buffer_bytes", "session_buffers",
                                              "executables") if st[k]}
                if bad:
                    leaks[name] = bad
            return not leaks
        if not harness.wait_until(clean, 30, 0.5):
            self.fail(f"held after the client left: {leaks}")
        codes = {}
        for name, key in self.current.items():
            p = self.cluster.procs[key]
            p.terminate()
        for name, key in self.current.items():
            try:
                codes[name] = self.cluster.procs[key].wait(timeout=30)
            except subprocess.TimeoutExpired:
                codes[name] = "hung"
        if any(c != 0 for c in codes.values()):
            self.fail(f"daemons did not exit 0 on SIGTERM: {codes}\n{self.cluster.logs()}")

    def stop(self):
        if self.client.poll() is None:
            self.client.send_signal(signal.SIGCONT)
            self.client.kill()
            self.client.wait()
        for key in self.cluster.procs:
            m = harness.SANITIZER_REPORT.search(self.cluster.log(key))
            if m:
                text = self.cluster.log(key)
                self.fail(f"{key}: sanitizer report:\n{text[max(0, m.start() - 300):m.start() + 4000]}")
        shutil.copytree(self.cluster.dir, os.path.join(self.out, "daemons"), dirs_exist_ok=True,
                        ignore=shutil.ignore_patterns("*.sock", "token*"))
        try:
            self.cluster.stop()
        except AssertionError:
            pass  # reported above

    def report(self):
        by_op = {}
        for r in self.ops:
            k = by_op.setdefault(r["op"], {"ok": 0, "err": 0})
            k["ok" if r["ok"] else "err"] += 1
        rep = {"seed": self.a.seed, "bin": harness.bin_dir(), "wall_s": round(time.monotonic() - self.t_start, 1),
               "faults": self.counts, "ops": by_op, "recoveries": len(self.recoveries),
               "longest_recovery": max(self.recoveries, key=lambda x: x[2], default=None),
               "recovery_list": self.recoveries, "error_shapes": self.shapes, "failures": self.failures, "out": self.out}
        with open(os.path.join(self.out, "report.json"), "w") as f:
            json.dump(rep, f, indent=1)
        print(json.dumps({k: v for k, v in rep.items() if k != "recovery_list"}, indent=1)[:20000])
        return rep


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--minutes", type=float, default=8.0)
    ap.add_argument("--gap", type=float, nargs=2, default=(1.0, 4.0))
    ap.add_argument("--worker-timeout-ms", type=int, default=3000)
    ap.add_argument("--link-timeout-ms", type=int, default=5000)
    ap.add_argument("--hang-s", type=float, default=60.0)
    ap.add_argument("--recover-s", type=float, default=60.0)
    ap.add_argument("--out", default="")
    ap.add_argument("--kinds", default="", help="comma separated; default: all")
    ap.add_argument("--freeze-max-ms", type=int, default=12000,
                    help="the longest SIGSTOP of the JAX process")
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, lambda *_: (_ for _ in ()).throw(KeyboardInterrupt()))
    rep = Soak(a).run()
    return 1 if rep["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
