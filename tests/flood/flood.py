"""A connection flooder for tests/flood/test_flood.py: holds `--silent`
connections that never send a byte and `--slow` slowloris connections that
dribble a request one byte at a time, against one address, and opens again
whatever the target closes (at most `--rate` new connections a second, so the
flooder's own CPU stays small beside what it costs the target).

--kind wire: slowloris peers dribble a causeway HELLO frame (its token wrong);
--kind http: they dribble an HTTP request head that never ends.

Prints one JSON line "ready" once the first round is open, and one JSON line
of counts when SIGTERM arrives (then exits 0). It runs at nice 10: a flood
from the network costs the target's machine nothing but the connections, and
on loopback the flooder must not win by eating the CPU the client needs.
"""
from __future__ import annotations

import argparse
import errno
import json
import os
import resource
import select
import signal
import socket
import struct
import sys
import time

FRAME = struct.Struct("<IHHIIQQ")  # magic, version, type, flags, payload, request id, bulk
MAGIC = 0x59415743  # "CWAY", as harness.FRAME_MAGIC


def _varint(v: int) -> bytes:
    out = b""
    while True:
        b = v & 0x7F
        v >>= 7
        out += bytes([b | (0x80 if v else 0)])
        if not v:
            return out


def wire_script() -> bytes:
    payload = b"\x08\x01\x10\x01\x18\x01\x22" + _varint(5) + b"wrong" + b"\x32\x04slow"
    return FRAME.pack(MAGIC, 1, 1, 0, len(payload), 1, 0) + payload


def http_script() -> bytes:
    return b"GET /metrics HTTP/1.1\r\nHost: flood\r\n" + b"X-Slow: " + b"a" * 4000


def raise_nofile(want: int) -> int:
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    target = hard if hard != resource.RLIM_INFINITY else max(soft, want)
    if soft < target:
        resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


class Conn:
    __slots__ = ("sock", "slow", "sent", "next_at")

    def __init__(self, sock, slow):
        self.sock = sock
        self.slow = slow
        self.sent = 0
        self.next_at = 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--target", required=True)
    ap.add_argument("--silent", type=int, default=5000)
    ap.add_argument("--slow", type=int, default=100)
    ap.add_argument("--kind", choices=("wire", "http"), default="wire")
    ap.add_argument("--rate", type=float, default=1000.0, help="new connections a second")
    ap.add_argument("--byte-every", type=float, default=0.3, help="slowloris: seconds a byte")
    a = ap.parse_args()
    os.nice(10)

    limit = raise_nofile(a.silent + a.slow + 64)
    room = max(0, limit - 64)
    silent = min(a.silent, max(0, room - a.slow))
    slow = min(a.slow, room)
    host, port = a.target.rsplit(":", 1)
    addr = (host, int(port))
    script = wire_script() if a.kind == "wire" else http_script()

    stats = {"target": a.target, "kind": a.kind, "silent_wanted": silent, "slow_wanted": slow,
             "nofile": limit, "connects": 0, "closed_by_target": 0, "connect_errors": 0,
             "slow_bytes": 0}
    stop = False

    def on_term(*_):
        nonlocal stop
        stop = True
    signal.signal(signal.SIGTERM, on_term)
    signal.signal(signal.SIGINT, on_term)

    conns: dict[int, Conn] = {}
    slow_conns: dict[int, Conn] = {}
    poller = select.poll()
    budget = 0.0
    last = time.monotonic()
    ready_said = False

    def open_one(is_slow: bool) -> bool:
        s = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        s.setblocking(False)
        rc = s.connect_ex(addr)
        if rc not in (0, errno.EINPROGRESS):
            s.close()
            stats["connect_errors"] += 1
            return False
        stats["connects"] += 1
        c = Conn(s, is_slow)
        conns[s.fileno()] = c
        if is_slow:
            slow_conns[s.fileno()] = c
        poller.register(s.fileno(), select.POLLIN)
        return True

    def drop(fd: int) -> None:
        c = conns.pop(fd)
        slow_conns.pop(fd, None)
        poller.unregister(fd)
        c.sock.close()

    while not stop:
        now = time.monotonic()
        # A full first round at once, then at most `rate` new ones a second.
        budget = min(budget + (now - last) * a.rate, a.rate)
        last = now
        n_slow = len(slow_conns)
        n_silent = len(conns) - n_slow
        first = not ready_said
        for want, have, is_slow in ((slow, n_slow, True), (silent, n_silent, False)):
            for _ in range(want - have):
                if not first and budget < 1:
                    break
                if not open_one(is_slow):
                    break
                budget -= 0 if first else 1
        if first:
            ready_said = True
            print(json.dumps({"ready": True, "open": len(conns), **stats}), flush=True)
        # Slowloris: one more byte each.
        for c in list(slow_conns.values()):
            if now >= c.next_at and c.sent < len(script):
                try:
                    c.sock.send(script[c.sent:c.sent + 1])
                    c.sent += 1
                    stats["slow_bytes"] += 1
                except BlockingIOError:
                    pass
                except OSError:
                    pass  # closed: the poll below sees it
                c.next_at = now + a.byte_every
        # Whatever the target closed (or answered: read and keep holding).
        for fd, ev in poller.poll(50):
            c = conns.get(fd)
            if c is None:
                continue
            try:
                data = c.sock.recv(65536)
            except BlockingIOError:
                continue
            except OSError:
                data = b""
            if not data:
                stats["closed_by_target"] += 1
                drop(fd)
    stats["open_at_end"] = len(conns)
    for fd in list(conns):
        drop(fd)
    print(json.dumps(stats), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
