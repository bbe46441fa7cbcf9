#!/usr/bin/env python3
"""Chaos driver: JAX clients train while workers and the controller are killed
(SIGKILL) and stopped (SIGSTOP/SIGCONT) at moments drawn from a seed.

    .venv/bin/python tests/chaos/chaos.py --short              # what ctest runs (chaos_e2e)
    .venv/bin/python tests/chaos/chaos.py --seed 11 --events 8
    CW_CHAOS_SEED=11 .venv/bin/python tests/chaos/chaos.py       # replay a run
    .venv/bin/python bench/chaos_bench.py ...                       # long form, soak

Set-up: a hand-started cluster on loopback TCP (causeway-controller, one
causeway-worker of 2 devices per client, binaries of build/release), and one
client slot per worker: slot k trains chaos_client.py on worker k alone
(CAUSEWAY_WORKERS=hand-worker-k, CAUSEWAY_DEVICES=2, exclusive), jobs of
--steps steps back to back, one process per session. A client checkpoints
every --every steps; when causeway fails it with an error it exits, and the
slot starts a fresh process (a fresh session) that resumes from the
checkpoint once its worker is back. Every finished job's losses must equal,
bit for bit, those of the same client run undisturbed on stock CPU JAX with
two host devices (the workers run XLA's CPU plugin from the same XLA as
jaxlib; tests/jax/harness.py compares the same way).

The schedule is a function of the seed alone (printed first): event n is a
kind, a target and a duration, drawn in order from random.Random(seed); it
runs --gap seconds (drawn too) after the previous one settled. What happens
around it (the step a client is at) depends on timing and is logged. Events
run one at a time, each once the cluster is steady (every daemon up, and
the target worker's client mid-job: past a step of its current process, short
of its last 10%; for a controller event every running client is mid-job, and
no new session opens until the event is over), so each outcome has one cause:

- kill_worker k: SIGKILL; after down_ms a replacement of the same name
  starts. Client k fails with UNAVAILABLE naming hand-worker-k within 5 s of
  the kill, resumes from its checkpoint once the replacement registered.
- stop_worker k (short): SIGSTOP for down_ms < --worker-timeout-ms / 2, then
  SIGCONT: the controller still has its heartbeats within the timeout;
  nothing fails, client k only waits.
- stop_worker k (long): SIGSTOP for down_ms > --worker-timeout-ms + 1.5 s:
  the controller declares it dead (no heartbeat for the timeout), client k
  fails with UNAVAILABLE naming it within 5 s of that declaration (the
  timeout after the stop), and once SIGCONT wakes it the worker registers
  again as its own replacement and client k resumes from its checkpoint.
- kill_controller: SIGKILL; after down_ms a new controller starts on the
  same address. Workers register again and every client resumes its session
  (CAUSEWAY_CONTROLLER_RECONNECT_MS): nothing fails, clients only wait.
- stop_controller: SIGSTOP for down_ms, then SIGCONT: nothing fails.

Checked (each failure is listed with its evidence, the run fails if any):
the expected errors, their text (UNAVAILABLE, the worker's name) and
latency; no other client error; every job's losses; no client hang (no
progress for --hang-s) or crash; at the end, every daemon not killed by the
driver is still running, the workers hold no buffers and no sessions and
the controller no session once the clients are gone, and every daemon exits
0 on SIGTERM. --soak S: jobs go on for S seconds with an event every --gap
seconds, and every daemon's VmRSS is sampled every --rss-every seconds into
rss.csv, summarised per daemon at the end.
"""
from __future__ import annotations

import argparse
import dataclasses
import json
import os
import pathlib
import random
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

import numpy as np

HERE = pathlib.Path(__file__).resolve().parent
ROOT = HERE.parents[1]
sys.path.insert(0, str(ROOT / "tests" / "jax"))

import harness  # noqa: E402

CLIENT = str(HERE / "chaos_client.py")
KINDS = ("kill_worker", "stop_worker", "kill_controller", "stop_controller")
ERROR_BOUND_S = 5.0  # issue 11: UNAVAILABLE naming the worker within 5 s
EXIT_ERROR = 3       # chaos_client.py: failed with an error it reported
# The plugin's report of a session resumed on a restarted controller.
RESUMED = re.compile(r"resumed session \d+ on the controller at \S+ after ([0-9.]+) s")


@dataclasses.dataclass
class Config:
    seed: int
    clients: int = 3
    events: int = 8             # 0 with soak_s: as many as fit
    steps: int = 400            # per job
    every: int = 10             # checkpoint interval, steps
    step_sleep: float = 0.01
    gap: tuple = (1.0, 3.0)     # seconds between one event settling and the next
    weights: tuple = (3, 3, 2, 2)  # of KINDS
    heartbeat_ms: int = 200
    worker_timeout_ms: int = 3000
    reconnect_max_ms: int = 300
    relay: bool = False
    protect: tuple = ()         # daemons never SIGKILLed ("controller", "hand-worker-0")
    soak_s: float = 0.0
    rss_every: float = 30.0
    settle_s: float = 180.0     # an event waits at most this for a steady cluster
    hang_s: float = 90.0        # a client without progress this long is hung
    out: str = ""
    quiet: bool = False


def schedule(cfg: Config):
    """The events, drawn from the seed alone (an endless generator)."""
    r = random.Random(cfg.seed)
    t_ms = cfg.worker_timeout_ms
    n = 0
    while True:
        kind = r.choices(KINDS, weights=cfg.weights)[0]
        ev = {"n": n, "kind": kind, "gap": round(r.uniform(*cfg.gap), 3)}
        if kind in ("kill_worker", "stop_worker"):
            targets = [k for k in range(cfg.clients)
                       if kind == "stop_worker" or f"hand-worker-{k}" not in cfg.protect]
            ev["worker"] = r.choice(targets) if targets else None
        if kind == "kill_worker":
            ev["down_ms"] = r.randint(100, 2000)   # until the replacement starts
        elif kind == "stop_worker":
            ev["long"] = r.random() < 0.5
            ev["down_ms"] = (r.randint(t_ms + 1500, t_ms + 3000) if ev["long"]
                             else r.randint(100, t_ms // 2))
        elif kind == "kill_controller":
            if "controller" in cfg.protect:
                ev["kind"] = kind = "stop_controller"
            ev["down_ms"] = r.randint(100, 2000)
        if kind == "stop_controller":
            ev["down_ms"] = r.randint(200, 4000)
        if ev.get("worker", 0) is None:
            continue
        n += 1
        yield ev


class Failure(Exception):
    pass


class Slot:
    """Client slot k: jobs on worker k, one process per session."""

    def __init__(self, drv: "Driver", k: int):
        self.drv = drv
        self.k = k
        self.worker = f"hand-worker-{k}"
        self.job = 0
        self.proc: subprocess.Popen | None = None
        self.dir = ""
        self.state = "idle"    # idle, running, waiting (its worker is down), finished
        self.procs_in_job = 0
        self.ev_off = 0
        self.ready = None      # the "ready" event of the current process
        self.progress = 0      # steps done, current process
        self.progress_t = 0.0
        self.start_step = 0
        self.error = None      # the "error" event of the current process
        self.error_seen_t = 0.0
        self.expect = None     # the event whose error this slot must see
        self.jobs_ok = 0
        self.resumes = 0
        self.ckpt_step = 0     # the checkpoint a resuming process must start from
        self.resumed_from: list[int] = []
        self.resumed_after: list[float] = []  # the plugin's own reports of controller restarts

    def log(self) -> str:
        return os.path.join(self.dir, f"client-{self.procs_in_job}.log")

    def log_tail(self, n: int = 4000) -> str:
        try:
            with open(self.log(), "rb") as f:
                return f.read()[-n:].decode("utf-8", "replace")
        except OSError:
            return ""

    def start(self, fresh: bool) -> None:
        if fresh:
            self.job += 1
            self.dir = os.path.join(self.drv.out, f"slot{self.k}", f"job{self.job}")
            os.makedirs(self.dir, exist_ok=True)
            self.procs_in_job = 0
            self.ev_off = 0
        else:
            self.resumes += 1
            try:
                with np.load(os.path.join(self.dir, "ckpt.npz")) as z:
                    self.ckpt_step = int(z["step"])
            except OSError:
                self.ckpt_step = 0  # failed before its first checkpoint
        if fresh:
            self.ckpt_step = 0
        self.procs_in_job += 1
        self.roles: set[str] = set()  # what events reached this session (process)
        env = dict(self.drv.client_env)
        env["CAUSEWAY_WORKERS"] = self.worker
        env["CAUSEWAY_SESSION_NAME"] = f"chaos-{self.k}-{self.job}-{self.procs_in_job}"
        log = open(self.log(), "ab")
        self.proc = subprocess.Popen(
            [harness.PYTHON, CLIENT, "--seed", str(self.k), "--steps", str(self.drv.cfg.steps),
             "--every", str(self.drv.cfg.every), "--dir", self.dir,
             "--step-sleep", str(self.drv.cfg.step_sleep)],
            env=env, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
            cwd=str(ROOT), start_new_session=True)
        log.close()
        self.state = "running"
        self.ready = self.error = None
        self.progress, self.progress_t = 0, time.monotonic()

    def training(self) -> bool:
        """Mid-job: its process has done a step since it started and has at
        least 10% of the job left (an event will reach its session)."""
        return (self.state == "running" and self.ready is not None and self.error is None
                and self.ready["step"] < self.progress < self.drv.cfg.steps * 9 // 10)

    def _read_events(self) -> None:
        path = os.path.join(self.dir, "events.jsonl")
        try:
            with open(path) as f:
                f.seek(self.ev_off)
                data = f.read()
        except OSError:
            return
        end = data.rfind("\n") + 1
        self.ev_off += len(data[:end].encode())
        for line in data[:end].splitlines():
            ev = json.loads(line)
            if ev["pid"] != self.proc.pid:
                continue
            if ev["ev"] == "ready":
                self.ready = ev
                if ev["step"] != self.ckpt_step:
                    self.drv.fail(f"client {self.k}: process {self.procs_in_job} of job "
                                  f"{self.job} started at step {ev['step']}, its checkpoint "
                                  f"is at step {self.ckpt_step}")
                if self.procs_in_job > 1:
                    self.resumed_from.append(ev["step"])
            elif ev["ev"] == "error":
                self.error = ev
                self.error_seen_t = time.monotonic()
                self.drv.client_error(self, ev)

    def poll(self) -> None:
        if self.state != "running":
            if self.state == "waiting" and self.drv.worker_up(self.worker):
                self.start(fresh=False)
            elif self.state == "idle" and self.drv.starting_jobs and \
                    not self.drv.held() and self.drv.worker_up(self.worker):
                self.start(fresh=True)
            return
        self._read_events()
        try:
            with open(os.path.join(self.dir, "progress")) as f:
                pid, step = (int(v) for v in f.read().split())
            if pid == self.proc.pid and step != self.progress:
                self.progress, self.progress_t = step, time.monotonic()
        except (OSError, ValueError):
            pass
        rc = self.proc.poll()
        now = time.monotonic()
        if rc is None:
            if self.error is not None and now - self.error_seen_t > 30:
                self.drv.fail(f"client {self.k}: reported its error but did not exit in 30 s "
                              f"(killed)\n{self.log_tail()}")
                self.proc.kill()
                self.proc.wait()
            elif self.error is None and now - self.progress_t > self.drv.cfg.hang_s and \
                    not self.drv.paused():
                self.drv.fail(f"client {self.k}: no progress for {self.drv.cfg.hang_s:.0f} s at "
                              f"step {self.progress} (killed)\n{self.drv.daemon_logs()}\n"
                              f"--- client ---\n{self.log_tail()}")
                self.proc.kill()
                self.proc.wait()
            return
        self._read_events()
        self.resumed_after += [float(v) for v in RESUMED.findall(self.log_tail(1 << 20))]
        self.drv.count_session(self.roles, "done" if rc == 0 else
                               "error" if rc == EXIT_ERROR and self.error is not None else "crash")
        if rc == 0:
            self._job_done()
        elif rc == EXIT_ERROR and self.error is not None:
            self.state = "waiting"   # starts again (resumes) once its worker is up
        else:
            self.drv.fail(f"client {self.k}: exited with status {rc} without a reported "
                          f"error\n{self.log_tail()}")
            self.state = "waiting"

    def _job_done(self) -> None:
        got = np.load(os.path.join(self.dir, "losses.npy"))
        want = self.drv.reference[self.k]
        if got.shape != want.shape or not np.array_equal(got, want):
            bad = [i for i in range(min(len(got), len(want))) if got[i] != want[i]][:5]
            self.drv.fail(f"client {self.k} job {self.job}: losses differ from the undisturbed "
                          f"run (first differing steps {bad}, {self.procs_in_job} processes)")
        else:
            self.jobs_ok += 1
            if not self.drv.keep_jobs:
                shutil.rmtree(self.dir, ignore_errors=True)
        if self.expect is not None:
            # The job ended before the event reached it (its last step came first).
            self.drv.note(f"client {self.k}: job ended before event {self.expect['n']} "
                          f"reached it")
            self.expect["missed"] = True
            self.expect = None
        self.state = "idle" if self.drv.starting_jobs else "finished"


class Driver:
    def __init__(self, cfg: Config):
        self.cfg = cfg
        self.out = cfg.out or tempfile.mkdtemp(prefix=f"cw-chaos-{cfg.seed}-")
        os.makedirs(self.out, exist_ok=True)
        harness._log_dir = self.out  # harness's scratch files go here too
        self.keep_jobs = False
        self.failures: list[str] = []
        self.notes: list[str] = []
        self.done_events: list[dict] = []
        self.latencies: list[dict] = []
        self.starting_jobs = True
        self.hold_starts = False          # no new job while a controller event waits
        self.down: set[str] = set()       # workers (or "controller") the driver took down
        self.killed: list[tuple] = []     # (name, Popen) killed on purpose
        self.current: dict[str, str] = {}  # daemon name -> key in cluster.procs
        self.cluster: harness.HandCluster | None = None
        self.slots: list[Slot] = []
        self.reference: list[np.ndarray] = []
        self.rss_file = None
        self.next_rss = 0.0
        self.t_start = time.monotonic()
        self._pause_until = 0.0
        self.sessions: dict[str, int] = {}

    # ---- reporting -------------------------------------------------------------------------

    def say(self, msg: str) -> None:
        if not self.cfg.quiet:
            print(f"[chaos {time.monotonic() - self.t_start:7.1f}s] {msg}", flush=True)

    def note(self, msg: str) -> None:
        self.notes.append(msg)
        self.say(msg)

    def fail(self, msg: str) -> None:
        self.failures.append(msg)
        self.say("FAILURE: " + msg.splitlines()[0])

    def count_session(self, roles: set, outcome: str) -> None:
        """A client process ended: `outcome` (done, error, crash) of a session,
        by the first of what reached it: the target of a worker event, a
        controller event, only bystanding worker events (its own worker
        untouched), nothing."""
        role = next((r for r in ("target", "controller", "bystander") if r in roles),
                    "untouched")
        key = f"{role}_{outcome}"
        self.sessions[key] = self.sessions.get(key, 0) + 1
        self.sessions["all"] = self.sessions.get("all", 0) + 1

    def daemon_logs(self) -> str:
        return self.cluster.logs() if self.cluster else ""

    # ---- cluster -----------------------------------------------------------------------------

    def start(self) -> None:
        cfg = self.cfg
        ref_procs = self._start_reference()
        self.cluster = harness.HandCluster(
            workers=cfg.clients, devices=2, tcp=True,
            controller_args=("--worker-timeout-ms", str(cfg.worker_timeout_ms),
                             "--relay-launches" if cfg.relay else "--relay-launches=0"),
            worker_args=("--heartbeat-ms", str(cfg.heartbeat_ms),
                         "--reconnect-max-ms", str(cfg.reconnect_max_ms)))
        self.current = {k: k for k in self.cluster.procs}
        env = harness.causeway_env(controller=self.cluster.controller)
        env.pop("CAUSEWAY_COMPILE_CACHE_DIR", None)
        env["CAUSEWAY_DEVICES"] = "2"
        env["CAUSEWAY_MIN_WORKERS"] = "1"
        self.client_env = env
        self._finish_reference(ref_procs)
        self.slots = [Slot(self, k) for k in range(cfg.clients)]
        if cfg.soak_s:
            self.rss_file = open(os.path.join(self.out, "rss.csv"), "w")
            self.rss_file.write("t_s,daemon,pid,rss_kib\n")

    def _start_reference(self) -> tuple:
        """Every slot's undisturbed run in one stock JAX process, while the cluster starts."""
        env = harness.stock_env()
        env["XLA_FLAGS"] = "--xla_force_host_platform_device_count=2"
        d = os.path.join(self.out, "reference")
        os.makedirs(d, exist_ok=True)
        with open(os.path.join(d, "log"), "wb") as log:
            return d, subprocess.Popen(
                [harness.PYTHON, CLIENT, "--reference", "--steps", str(self.cfg.steps),
                 "--dir", d, "--seed", *(str(k) for k in range(self.cfg.clients))],
                env=env, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                cwd=str(ROOT))

    def _finish_reference(self, ref: tuple) -> None:
        d, p = ref
        if p.wait(timeout=300) != 0:
            with open(os.path.join(d, "log"), "rb") as f:
                raise Failure(f"reference run failed ({p.returncode}):\n"
                              f"{f.read()[-3000:].decode('utf-8', 'replace')}")
        self.reference = [np.load(os.path.join(d, f"losses-{k}.npy"))
                          for k in range(self.cfg.clients)]

    def proc(self, name: str) -> subprocess.Popen:
        return self.cluster.procs[self.current[name]]

    def worker_up(self, name: str) -> bool:
        return name not in self.down and "controller" not in self.down

    def held(self) -> bool:
        """No new session now: a controller event waits for the running ones
        to get mid-job (with none running, one starts, so that it has one)."""
        return self.hold_starts and any(s.state == "running" for s in self.slots)

    def paused(self) -> bool:
        """While something is down clients may wait: no hang verdicts then."""
        return bool(self.down) or time.monotonic() < self._pause_until

    def ctl_stats(self) -> dict | None:
        try:
            return harness.stats(self.cluster.controller)
        except Exception:  # noqa: BLE001 - not listening (yet)
            return None

    def registered(self) -> int:
        st = self.ctl_stats()
        return st["workers"] if st else -1

    # ---- the loop ------------------------------------------------------------------------------

    def tick(self) -> None:
        for s in self.slots:
            s.poll()
        now = time.monotonic()
        if self.rss_file and now >= self.next_rss:
            self.next_rss = now + self.cfg.rss_every
            self._sample_rss(now)
        # A daemon that exits by itself is a crash (or a hang turned exit).
        for name, key in self.current.items():
            p = self.cluster.procs[key]
            if p.poll() is not None and name not in self.down:
                self.fail(f"{name} (pid {p.pid}) exited with {p.returncode} on its own\n"
                          f"{self.cluster.log(key)[-3000:]}")
                self.down.add(name)  # reported once

    def wait(self, cond, timeout: float, what: str, every: float = 0.1) -> bool:
        """Ticks until cond() (asked every `every` s: some ask a daemon) or the timeout."""
        deadline = time.monotonic() + timeout
        asked = 0.0
        while True:
            self.tick()
            if time.monotonic() - asked >= every:
                asked = time.monotonic()
                if cond():
                    return True
            if time.monotonic() >= deadline:
                self.fail(f"timed out after {timeout:.0f} s waiting for {what}\n"
                          + "\n".join(f"client {s.k}: state {s.state} step {s.progress} "
                                      f"ready {s.ready} error {s.error}" for s in self.slots))
                return False
            time.sleep(0.02)

    def sleep(self, seconds: float) -> None:
        deadline = time.monotonic() + seconds
        while time.monotonic() < deadline:
            self.tick()
            time.sleep(min(0.02, max(0.0, deadline - time.monotonic())))

    def ready_for(self, ev: dict) -> bool:
        """Nothing down, and the sessions the event is about are mid-job: the
        target worker's for a worker event, every one for a controller event."""
        if self.down:
            return False
        if "worker" in ev:
            return self.slots[ev["worker"]].training()
        return (all(s.training() or s.state in ("idle", "finished") for s in self.slots) and
                any(s.training() for s in self.slots))

    # ---- events --------------------------------------------------------------------------------

    def client_error(self, slot: Slot, ev: dict) -> None:
        exp = slot.expect
        text = ev["text"]
        if exp is None:
            self.fail(f"client {slot.k}: unexpected error at step {ev['step']}: {text[:600]}\n"
                      f"{self.daemon_logs()}\n--- client ---\n{slot.log_tail()}")
            return
        slot.expect = None
        lat = ev["t"] - exp["t_dead"]
        rec = {"event": exp["n"], "kind": exp["kind"], "client": slot.k, "step": ev["step"],
               "latency_s": round(lat, 3), "since_signal_s": round(ev["t"] - exp["t0"], 3)}
        self.latencies.append(rec)
        self.say(f"client {slot.k}: error {lat:.3f} s after {exp['target']} was dead "
                 f"(step {ev['step']}): {text[:160]}")
        if "UNAVAILABLE" not in text or exp["target"] not in text:
            self.fail(f"client {slot.k}: the error does not say UNAVAILABLE and name "
                      f"{exp['target']}: {text[:600]}")
        if lat > ERROR_BOUND_S:
            self.fail(f"client {slot.k}: error {lat:.2f} s after {exp['target']} was dead "
                      f"(bound {ERROR_BOUND_S} s; event {exp})\n{self.daemon_logs()}\n"
                      f"--- client ---\n{slot.log_tail()}")

    def run_event(self, ev: dict) -> None:
        cfg = self.cfg
        if not self.wait(lambda: not self.down, cfg.settle_s, f"every daemon up before {ev}"):
            raise Failure("the cluster did not settle")
        self.sleep(ev["gap"])
        # A controller event reaches every session: no new one opens meanwhile
        # (the running ones get to mid-job, the others wait until it is over).
        self.hold_starts = "worker" not in ev
        if not self.wait(lambda: self.ready_for(ev), cfg.settle_s, f"sessions mid-job for {ev}"):
            raise Failure("the cluster did not settle")
        steps = {s.k: s.progress for s in self.slots}
        self.say(f"event {ev['n']}: {ev['kind']} "
                 + (f"hand-worker-{ev['worker']} " if "worker" in ev else "")
                 + f"{ev['down_ms']} ms" + (" (long)" if ev.get("long") else "")
                 + f"; client steps {steps}")
        ev = dict(ev, steps=steps)
        if "worker" in ev:
            ev["target"] = f"hand-worker-{ev['worker']}"
        for s in self.slots:
            if s.state == "running":
                s.roles.add("controller" if "worker" not in ev else
                            "target" if s.k == ev["worker"] else "bystander")
        getattr(self, "_" + ev["kind"])(ev)
        self.hold_starts = False
        self.done_events.append(ev)

    def _expect(self, ev: dict, k: int, t0: float, t_dead: float) -> None:
        slot = self.slots[k]
        if slot.state == "running":
            ev.update(t0=t0, t_dead=t_dead)
            slot.expect = ev
        # else: between jobs (finished just now); the next job waits for the worker

    def _settled_error(self, k: int):
        slot = self.slots[k]
        return lambda: slot.expect is None

    def _wait_replaced(self, before: dict, what: str) -> None:
        """Until the controller counts one more replacement and every worker."""
        def done():
            st = self.ctl_stats()
            return (st is not None and st["workers"] == self.cfg.clients and
                    st["workers_replaced"] > before.get("workers_replaced", 0))
        self.wait(done, 60, what)

    def _kill_worker(self, ev: dict) -> None:
        k = ev["worker"]
        name = f"hand-worker-{k}"
        before = self.ctl_stats() or {}
        p = self.proc(name)
        self.down.add(name)
        t0 = time.monotonic()
        p.send_signal(signal.SIGKILL)
        self._expect(ev, k, t0, t0)
        p.wait(timeout=10)
        self.killed.append((name, p))
        self.sleep(ev["down_ms"] / 1000)
        key = f"{name}#{len(self.cluster.procs)}"
        self.cluster.start_worker(name, key=key)
        self.current[name] = key
        self._wait_replaced(before, f"replacement {name} to register")
        self.down.discard(name)
        self.wait(self._settled_error(k), 60, f"client {k}'s error after {name} was killed")

    def _stop_worker(self, ev: dict) -> None:
        k = ev["worker"]
        name = f"hand-worker-{k}"
        p = self.proc(name)
        before = self.ctl_stats() or {}
        t0 = time.monotonic()
        p.send_signal(signal.SIGSTOP)
        timeout_s = self.cfg.worker_timeout_ms / 1000
        if ev["long"]:
            self.down.add(name)
            self._expect(ev, k, t0, t0 + timeout_s)
        else:
            self._pause_until = t0 + ev["down_ms"] / 1000 + 30
        self.sleep(ev["down_ms"] / 1000)
        p.send_signal(signal.SIGCONT)
        if not ev["long"]:
            return
        st = self.ctl_stats() or {}
        timed_out = st.get("workers_timed_out", 0) - before.get("workers_timed_out", 0)
        if timed_out != 1:
            self.fail(f"{name} stopped {ev['down_ms']} ms (--worker-timeout-ms "
                      f"{self.cfg.worker_timeout_ms}) was not declared dead: {st}")
        self._wait_replaced(before, f"{name} to register again after SIGCONT")
        self.down.discard(name)
        self.wait(self._settled_error(k), 60, f"client {k}'s error after {name} went silent")

    def _kill_controller(self, ev: dict) -> None:
        p = self.proc("controller")
        self.down.add("controller")
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
        self.killed.append(("controller", p))
        self.sleep(ev["down_ms"] / 1000)
        key = f"controller#{len(self.cluster.procs)}"
        # HandCluster restarts the controller under the key "controller".
        self.cluster.procs[key] = self.cluster.procs.pop("controller")
        self.cluster.start_controller()
        self.current["controller"] = "controller"
        self.wait(lambda: self.registered() == self.cfg.clients, 60,
                  "every worker to register with the new controller")
        self.down.discard("controller")
        self._pause_until = time.monotonic() + 30

    def _stop_controller(self, ev: dict) -> None:
        p = self.proc("controller")
        p.send_signal(signal.SIGSTOP)
        self.sleep(ev["down_ms"] / 1000)
        p.send_signal(signal.SIGCONT)
        self._pause_until = time.monotonic() + 30

    # ---- RSS -----------------------------------------------------------------------------------

    def _sample_rss(self, now: float) -> None:
        for name, key in self.current.items():
            p = self.cluster.procs[key]
            try:
                with open(f"/proc/{p.pid}/status") as f:
                    kib = next(int(line.split()[1]) for line in f if line.startswith("VmRSS:"))
            except (OSError, StopIteration):
                continue
            self.rss_file.write(f"{now - self.t_start:.1f},{name},{p.pid},{kib}\n")
        self.rss_file.flush()

    # ---- the end --------------------------------------------------------------------------------

    def finish(self) -> None:
        self.starting_jobs = False
        self.wait(lambda: all(s.state in ("finished", "idle") for s in self.slots),
                  self.cfg.settle_s + self.cfg.steps * (self.cfg.step_sleep + 0.2),
                  "every client to finish its job")
        for s in self.slots:
            if s.proc and s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        if self.rss_file:
            self._sample_rss(time.monotonic())
        # No daemon died on its own: each current one runs.
        for name, key in self.current.items():
            p = self.cluster.procs[key]
            if p.poll() is not None and name not in self.down:
                self.fail(f"{name} (pid {p.pid}) is not running at the end: {p.returncode}")
        for name, p in self.killed:
            if p.returncode != -signal.SIGKILL:
                self.fail(f"{name} (pid {p.pid}), killed by the driver, exited with "
                          f"{p.returncode}")
        # No leaks: the clients are gone, so is everything they held.
        leaks = {}

        def clean() -> bool:
            leaks.clear()
            for name, key in self.current.items():
                try:
                    st = harness.stats(self.cluster.addresses.get(key, self.cluster.controller))
                except Exception as e:  # noqa: BLE001
                    leaks[name] = str(e)
                    continue
                # STATS itself is a session on either daemon; a worker also
                # keeps the controller's connection (it LOADs executables there).
                if name == "controller":
                    bad = {k: st[k] for k in ("sessions", "alloc_queue")
                           if st[k] > (1 if k == "sessions" else 0)}
                else:
                    bad = {k: st[k] for k in ("buffers", "buffer_bytes", "session_buffers",
                                              "executables") if st[k]}
                    if st["sessions"] > 2:
                        bad["sessions"] = st["sessions"]
                if bad:
                    leaks[name] = bad
            return not leaks
        self.wait(clean, 30, "the daemons to hold nothing once the clients are gone")
        if leaks:
            self.fail(f"held after every client left: {leaks}")
        self.end_stats = leaks
        # Clean exits.
        codes = {}
        for name, key in self.current.items():
            p = self.cluster.procs[key]
            if p.poll() is None:
                p.send_signal(signal.SIGCONT)
                p.terminate()
        for name, key in self.current.items():
            try:
                codes[name] = self.cluster.procs[key].wait(timeout=30)
            except subprocess.TimeoutExpired:
                codes[name] = "hung"
                self.cluster.procs[key].kill()
        if any(rc != 0 for rc in codes.values()):
            self.fail(f"daemons did not exit 0 on SIGTERM: {codes}\n{self.daemon_logs()}")
        self.exit_codes = codes
        self._scan_logs()

    def _scan_logs(self) -> None:
        """A sanitizer's report in any daemon's log, killed ones too (with
        CAUSEWAY_BIN_DIR pointing at a CW_SANITIZE build)."""
        for key in self.cluster.procs:
            text = self.cluster.log(key)
            m = harness.SANITIZER_REPORT.search(text)
            if m:
                self.fail(f"{key}: sanitizer report in its log:\n"
                          f"{text[max(0, m.start() - 500):m.start() + 3000]}")

    def stop(self) -> None:
        for s in self.slots:
            if s.proc and s.proc.poll() is None:
                s.proc.kill()
                s.proc.wait()
        if self.rss_file:
            self.rss_file.close()
        if self.cluster:
            shutil.copytree(self.cluster.dir, os.path.join(self.out, "daemons"),
                            dirs_exist_ok=True, ignore=shutil.ignore_patterns("*.sock", "token*"))
            self.cluster.stop()

    # ---- a run -------------------------------------------------------------------------------------

    def run(self) -> dict:
        cfg = self.cfg
        self.say(f"seed={cfg.seed} (replay: CW_CHAOS_SEED={cfg.seed} or --seed {cfg.seed}); "
                 f"{cfg.clients} clients, logs in {self.out}")
        try:
            self.start()
            events = schedule(cfg)
            deadline = self.t_start + cfg.soak_s if cfg.soak_s else None
            for ev in events:
                if deadline is None and ev["n"] >= cfg.events:
                    break
                if deadline is not None and (time.monotonic() + ev["gap"] >= deadline or
                                             cfg.events and ev["n"] >= cfg.events):
                    break
                self.run_event(ev)
            if deadline is not None:
                self.sleep(max(0.0, deadline - time.monotonic()))
            self.finish()
        except Failure as e:
            self.fail(str(e))
        finally:
            self.stop()
        return self.report()

    def report(self) -> dict:
        counts = {k: sum(1 for e in self.done_events if e["kind"] == k) for k in KINDS}
        counts["stop_worker_long"] = sum(1 for e in self.done_events
                                         if e["kind"] == "stop_worker" and e["long"])
        lats = [r["latency_s"] for r in self.latencies]
        rep = {
            "seed": self.cfg.seed,
            "config": dataclasses.asdict(self.cfg),
            "wall_s": round(time.monotonic() - self.t_start, 1),
            "events": [{k: v for k, v in e.items() if k not in ("t0", "t_dead")}
                       for e in self.done_events],
            "counts": counts,
            "latencies": self.latencies,
            "latency_median_s": statistics.median(lats) if lats else None,
            "latency_max_s": max(lats) if lats else None,
            "jobs_ok": {s.k: s.jobs_ok for s in self.slots},
            "sessions": dict(sorted(self.sessions.items())),
            "resumes": {s.k: s.resumes for s in self.slots},
            "resumed_from_steps": {s.k: s.resumed_from for s in self.slots},
            "sessions_resumed_after_s": sorted(t for s in self.slots for t in s.resumed_after),
            "notes": self.notes,
            "failures": self.failures,
            "out": self.out,
        }
        with open(os.path.join(self.out, "report.json"), "w") as f:
            json.dump(rep, f, indent=1, default=str)
        if self.rss_file:
            rep["rss"] = rss_table(os.path.join(self.out, "rss.csv"))
        return rep


def rss_table(csv_path: str, warmup_s: float = 300.0) -> list[dict]:
    """Per daemon process: start, min, max, end (MiB) and the least-squares
    slope (MiB per hour) of the samples after warmup_s of its life."""
    series: dict[tuple, list] = {}
    with open(csv_path) as f:
        next(f)
        for line in f:
            t, name, pid, kib = line.strip().split(",")
            series.setdefault((name, int(pid)), []).append((float(t), int(kib) / 1024))
    rows = []
    for (name, pid), pts in sorted(series.items()):
        t0 = pts[0][0]
        late = [(t, v) for t, v in pts if t - t0 >= warmup_s] or pts
        slope = 0.0
        if len(late) >= 3:
            ts = np.array([t for t, _ in late])
            vs = np.array([v for _, v in late])
            slope = float(np.polyfit(ts, vs, 1)[0]) * 3600
        vals = [v for _, v in pts]
        rows.append({"daemon": name, "pid": pid, "samples": len(pts),
                     "life_s": round(pts[-1][0] - t0, 1), "start_mib": round(vals[0], 1),
                     "min_mib": round(min(vals), 1), "max_mib": round(max(vals), 1),
                     "end_mib": round(vals[-1], 1), "slope_mib_per_h": round(slope, 2)})
    return rows


def print_report(rep: dict) -> None:
    print(f"\nchaos seed {rep['seed']}: {rep['wall_s']} s, events {rep['counts']}")
    print(f"  jobs finished with the reference losses: {rep['jobs_ok']}; "
          f"resumed from a checkpoint: {rep['resumes']}")
    print(f"  steps they resumed from: {rep['resumed_from_steps']}")
    print(f"  sessions (client processes) by what reached them and how they ended: "
          f"{rep['sessions']}")
    if rep["latencies"]:
        print(f"  error after the worker was dead: median {rep['latency_median_s']:.3f} s, "
              f"max {rep['latency_max_s']:.3f} s over {len(rep['latencies'])} errors")
    res = rep["sessions_resumed_after_s"]
    if res:
        print(f"  sessions resumed on a restarted controller: {len(res)}, after median "
              f"{statistics.median(res):.2f} s, max {max(res):.2f} s")
    for row in rep.get("rss", []):
        print(f"  RSS {row['daemon']:<16} pid {row['pid']:<7} {row['life_s']:>7.0f} s: start "
              f"{row['start_mib']:7.1f} min {row['min_mib']:7.1f} max {row['max_mib']:7.1f} end "
              f"{row['end_mib']:7.1f} MiB, slope {row['slope_mib_per_h']:+.2f} MiB/h")
    for n in rep["notes"]:
        print(f"  note: {n}")
    for f in rep["failures"]:
        print(f"  FAILURE: {f}")
    print(f"  logs: {rep['out']}")


def parse_args(argv=None, defaults: Config | None = None) -> Config:
    d = defaults or Config(seed=0)
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None,
                    help="the schedule's seed (default: $CW_CHAOS_SEED, else --short's "
                    "fixed one, else random)")
    ap.add_argument("--clients", type=int, default=d.clients)
    ap.add_argument("--events", type=int, default=d.events)
    ap.add_argument("--steps", type=int, default=d.steps)
    ap.add_argument("--every", type=int, default=d.every)
    ap.add_argument("--step-sleep", type=float, default=d.step_sleep)
    ap.add_argument("--gap", type=float, nargs=2, default=d.gap)
    ap.add_argument("--heartbeat-ms", type=int, default=d.heartbeat_ms)
    ap.add_argument("--worker-timeout-ms", type=int, default=d.worker_timeout_ms)
    ap.add_argument("--reconnect-max-ms", type=int, default=d.reconnect_max_ms)
    ap.add_argument("--relay", action="store_true", default=d.relay)
    ap.add_argument("--protect", default=",".join(d.protect),
                    help="daemons never SIGKILLed, comma separated")
    ap.add_argument("--soak", type=float, default=d.soak_s, help="seconds")
    ap.add_argument("--rss-every", type=float, default=d.rss_every)
    ap.add_argument("--out", default=d.out)
    a = ap.parse_args(argv)
    seed = a.seed
    if seed is None:
        env = os.environ.get("CW_CHAOS_SEED")
        seed = int(env) if env else (d.seed or random.SystemRandom().randrange(1 << 31))
    return Config(seed=seed, clients=a.clients, events=a.events, steps=a.steps, every=a.every,
                  step_sleep=a.step_sleep, gap=tuple(a.gap), weights=d.weights,
                  heartbeat_ms=a.heartbeat_ms, worker_timeout_ms=a.worker_timeout_ms,
                  reconnect_max_ms=a.reconnect_max_ms, relay=a.relay,
                  protect=tuple(filter(None, a.protect.split(","))), soak_s=a.soak,
                  rss_every=a.rss_every, out=a.out, settle_s=d.settle_s, hang_s=d.hang_s)


# The short form ctest runs (chaos_e2e): seed 1 draws each kind of event once
# or twice (kill_worker x2, stop_worker long and short, kill_controller,
# stop_controller); about 45 s on 2 busy cores.
SHORT = Config(seed=1, clients=3, events=6, steps=400, gap=(0.5, 1.5))


def stop_on_sigterm() -> None:
    """SIGTERM (ctest's timeout, a stopped soak) ends a run as Ctrl-C does: the
    daemons and clients it started are stopped, not left behind."""
    def raise_interrupt(_sig, _frame):
        raise KeyboardInterrupt
    signal.signal(signal.SIGTERM, raise_interrupt)


def main(argv=None) -> int:
    stop_on_sigterm()
    argv = list(sys.argv[1:] if argv is None else argv)
    defaults = None
    if "--short" in argv:
        argv.remove("--short")
        defaults = SHORT
    missing = harness.missing_build()
    if missing:
        print(f"chaos: {missing}", file=sys.stderr)
        return 2
    cfg = parse_args(argv, defaults)
    rep = Driver(cfg).run()
    print_report(rep)
    return 1 if rep["failures"] else 0


if __name__ == "__main__":
    sys.exit(main())
