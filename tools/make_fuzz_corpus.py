#!/usr/bin/env python3
"""Writes the seed corpora of the causeway fuzz targets.

  src/protocol/corpus/frame_fuzz/        one frame per file (header + payload
                                         [+ bulk]): every message type in both
                                         directions, error replies, frames with
                                         bulk, and broken frames.
  src/net/corpus/conn_parser_fuzz/    byte streams of several frames, as a
                                         connection would carry them, behind the
                                         one leading byte that conn_parser_fuzz.c
                                         takes as its split point (byte % size).
  src/protocol/corpus/hostcb_fuzz/       HOST_CALLBACK requests (worker to
                                         client): operands and results of
                                         several dtypes and ranks, tokens, and
                                         broken layouts and bulks.
  src/controller/corpus/compile_disk_fuzz/  compile cache files (header +
                                         payload, valid and broken) and
                                         CompileOptionsProto bytes with
                                         DebugOptions map entries.
  src/core/corpus/{settings,json,tls,tls_first_bytes}_fuzz/, src/tools/corpus/up_state_fuzz/,
  src/worker/corpus/hlo_params_fuzz/     flags and variables, peer text, a
                                         peer's first TLS bytes, `causeway up`
                                         state files, HloModuleProto bytes
                                         (each function's docstring).
  src/net/corpus/grpc_fuzz/,             an HTTP/2 client's bytes (gRPC calls)
  src/proxy/corpus/ifrt_request_fuzz/    and IFRT proxy requests (each
                                         function's docstring).

Only the Python standard library is used: the protobuf payloads are encoded
by hand from proto/causeway.proto (field numbers and wire types below), so the
corpus does not depend on a protobuf installation. The output is deterministic
(fixed seed); rerunning rewrites identical files.

Usage: tools/make_fuzz_corpus.py [--root DIR]   (DIR defaults to the repo root)
"""

import argparse
import hashlib
import os
import random
import struct

MAGIC = 0x59415743
VERSION = 1
REPLY = 0x1
ERROR = 0x2

HELLO, PING, INVENTORY, COMPILE, SERIALIZE, LOAD, UPLOAD, LAUNCH, DOWNLOAD, \
    COPY, SEND, PUT, EXPECT, DELETE, STATS, AWAIT, LAUNCH_GO = range(1, 18)
ADMIN_STATUS, ADMIN_PAUSE, ADMIN_RESUME, ADMIN_DRAIN, ADMIN_UNDRAIN, ADMIN_HOLD, \
    ADMIN_WORKER_DRAIN = range(50, 57)

TRACE_START, TRACE_FETCH = 65, 66  # obs: session timelines

HEALTH_HEARTBEAT, HEALTH_REJOIN = 45, 46
EXE_INFO = 34
SESSION_RESUME = 36
ROLE_CLIENT, ROLE_WORKER, ROLE_CONTROLLER = 1, 2, 3
F32, S32, U8, F64, BF16, PRED = 11, 4, 6, 12, 13, 1


# --- protobuf wire encoding ---------------------------------------------------

def varint(v):
    if v < 0:
        v += 1 << 64  # int64/int32 negatives are 10-byte varints
    out = bytearray()
    while True:
        b = v & 0x7F
        v >>= 7
        if v:
            out.append(b | 0x80)
        else:
            out.append(b)
            return bytes(out)


def key(field, wire):
    return varint((field << 3) | wire)


def f_varint(field, v):
    return key(field, 0) + varint(v)


def f_bytes(field, b):
    if isinstance(b, str):
        b = b.encode()
    return key(field, 2) + varint(len(b)) + b


def f_float(field, x):
    return key(field, 5) + struct.pack("<f", x)


def f_double(field, x):
    return key(field, 1) + struct.pack("<d", x)


def f_packed(field, values):
    body = b"".join(varint(v) for v in values)
    return f_bytes(field, body)


def f_unpacked(field, values):
    return b"".join(f_varint(field, v) for v in values)


# --- messages (field numbers from proto/causeway.proto) -----------------------

def error_reply(code, message):
    return f_varint(1, code) + f_bytes(2, message)


def hello_request(lo=1, hi=1, role=ROLE_CLIENT, token=b"", session=0, name="fuzz"):
    m = f_varint(1, lo) + f_varint(2, hi) + f_varint(3, role)
    if token:
        m += f_bytes(4, token)
    if session:
        m += f_varint(5, session)
    return m + f_bytes(6, name)


def hello_reply():
    return (f_varint(1, 1) + f_varint(2, 7) + f_bytes(3, "worker-0") + f_varint(4, 16 << 20) +
            f_varint(5, 64 << 30))


def named_value(name, kind, v):
    m = f_bytes(1, name)
    if kind == "s":
        m += f_bytes(2, v)
    elif kind == "i":
        m += f_varint(3, v)
    elif kind == "list":
        m += f_bytes(4, f_packed(1, v))
    elif kind == "f":
        m += f_float(5, v)
    elif kind == "b":
        m += f_varint(6, 1 if v else 0)
    return m


def inventory():
    dev = (f_varint(1, 0) + f_varint(2, 0) + f_bytes(3, "cpu") + f_bytes(4, "TFRT_CPU_0") +
           f_bytes(5, named_value("core", "i", 0)) +
           f_bytes(6, f_varint(1, 0) + f_bytes(2, "device") + f_varint(3, 0)) +
           f_varint(7, 0) + f_varint(8, 0))
    return (f_bytes(1, "worker-0") + f_bytes(2, "cpu") + f_bytes(3, "xla 0.4") +
            f_varint(4, 0) + f_varint(5, 81) +
            f_bytes(6, named_value("stablehlo_current_version", "list", [1, 9, 3])) +
            f_bytes(6, named_value("xla_version", "s", "x")) +
            f_bytes(6, named_value("ratio", "f", 0.5)) +
            f_bytes(6, named_value("supports", "b", True)) +
            f_bytes(7, dev) + f_bytes(7, dev.replace(b"TFRT_CPU_0", b"TFRT_CPU_1")))


MLIR = (b"module @add { func.func public @main(%a: tensor<4xf32>, %b: tensor<4xf32>) "
        b"-> tensor<4xf32> { %0 = stablehlo.add %a, %b : tensor<4xf32> "
        b"return %0 : tensor<4xf32> } }")


def compile_request(exe=100, fmt="mlir", code=MLIR, opts=b""):
    m = f_varint(1, exe) + f_bytes(2, fmt) + f_bytes(3, code)
    if opts:
        m += f_bytes(4, opts)
    return m


def compile_reply(exe=100):
    return f_varint(1, exe) + f_varint(2, 1) + f_varint(3, 1) + f_bytes(4, "add")


def upload_request(buf=1, dtype=F32, dims=(4,), strides=(), device=0, packed=True):
    enc = f_packed if packed else f_unpacked
    m = f_varint(1, buf) + f_varint(2, dtype)
    if dims:
        m += enc(3, list(dims))
    if strides:
        m += enc(4, list(strides))
    return m + f_varint(5, device)


def ack(i):
    return f_varint(1, i)


def id_list(ids):
    return f_packed(1, ids)


def launch_request(exe=100, args=((1, 2),), outs=((3,),), launch_id=9):
    m = f_varint(1, exe)
    for a in args:
        m += f_bytes(2, id_list(list(a)))
    for o in outs:
        m += f_bytes(3, id_list(list(o)))
    return m + f_varint(4, launch_id)


def array_info(buf=1, dtype=F32, dims=(4,), device=0, size=16):
    return (f_varint(1, buf) + f_varint(2, dtype) + f_packed(3, list(dims)) + f_varint(4, device) +
            f_varint(5, size))


def stats():
    peer = f_bytes(1, "127.0.0.1:5000") + f_varint(2, 10) + f_varint(3, 20)
    m = b"".join(f_varint(i, i * 3) for i in range(1, 9))
    return m + f_bytes(9, peer) + f_varint(10, 2) + f_varint(11, 1)


def put_request(dst=5, session=7, dtype=F32, dims=(4,), device=0, error=None):
    m = (f_varint(1, dst) + f_varint(2, session) + f_varint(3, dtype) + f_packed(4, list(dims)) +
         f_varint(5, device))
    if error:
        m += f_bytes(6, error_reply(*error))
    return m


# --- frames -------------------------------------------------------------------

def admin_status():
    worker = (f_varint(1, 0) + f_bytes(2, "worker-0") + f_bytes(3, "127.0.0.1:7001") +
              f_bytes(4, "draining") + f_varint(5, 2) + f_varint(8, 3) + f_varint(9, 4096) +
              f_double(12, 12.5) + f_varint(13, 4))
    island = f_varint(1, 0) + f_bytes(2, "worker-0") + f_varint(3, 2)
    session = (f_varint(1, 1234567) + f_bytes(2, "train \"x\"\n") + f_bytes(3, "host") +
               f_varint(4, 42) + f_packed(5, [0, 1]) + f_varint(6, 1) + f_varint(7, 16))
    error = f_varint(1, 1700000000000) + f_bytes(2, "COMPILE client") + f_varint(3, 3) + \
        f_bytes(4, "program spans islands")
    return (f_bytes(1, "controller") + f_varint(2, 5000) + f_bytes(3, worker) +
            f_bytes(4, island) + f_bytes(5, session) + f_varint(7, 1) + f_bytes(12, error))


def header(mtype, flags, payload_len, req_id, bulk_len, magic=MAGIC, version=VERSION):
    return struct.pack("<IHHIIQQ", magic, version, mtype, flags, payload_len, req_id, bulk_len)


def frame(mtype, payload, flags=0, req_id=1, bulk=b"", bulk_len=None, **kw):
    bl = len(bulk) if bulk_len is None else bulk_len
    return header(mtype, flags, len(payload), req_id, bl, **kw) + payload + bulk


def f32_bytes(values):
    return struct.pack("<%df" % len(values), *values)


def frame_corpus():
    """name -> bytes for the single-frame target."""
    c = {}
    four = f32_bytes([1.0, 2.0, 3.0, 4.0])
    # Requests, one per type.
    c["req_hello"] = frame(HELLO, hello_request())
    c["req_hello_token_session"] = frame(HELLO, hello_request(token=b"s3cret", session=42,
                                                              role=ROLE_WORKER))
    c["req_hello_range"] = frame(HELLO, hello_request(lo=0, hi=7, role=ROLE_CONTROLLER))
    c["req_hello_fresh"] = frame(HELLO, hello_request(session=42) + f_varint(8, 7) +
                                 f_varint(9, 1))
    c["req_ping"] = frame(PING, f_bytes(1, b"ping-data"), req_id=2)
    c["req_ping_empty"] = frame(PING, b"", req_id=3)
    c["req_inventory"] = frame(INVENTORY, b"", req_id=4)
    c["req_compile"] = frame(COMPILE, compile_request(), req_id=5)
    c["req_compile_opts"] = frame(COMPILE, compile_request(fmt="hlo", opts=b"\x1a\x04\x08\x01\x10\x01"),
                                  req_id=5)
    c["req_serialize"] = frame(SERIALIZE, f_varint(1, 100), req_id=6)
    c["req_exe_info_presence"] = frame(EXE_INFO, f_varint(1, 100) + f_varint(2, 1), req_id=6)
    c["req_load_bulk"] = frame(LOAD, f_varint(1, 101) + f_bytes(2, b"\x08\x01"), req_id=7,
                               bulk=b"\x00serialized-executable\xff" * 3)
    c["req_upload_f32"] = frame(UPLOAD, upload_request(), req_id=8, bulk=four)
    c["req_upload_2d_strided"] = frame(UPLOAD, upload_request(dims=(2, 2), strides=(4, 8)),
                                       req_id=8, bulk=bytes(16))
    c["req_upload_unpacked_dims"] = frame(UPLOAD, upload_request(dtype=S32, dims=(2, 3),
                                                                 packed=False),
                                          req_id=8, bulk=bytes(24))
    c["req_upload_scalar"] = frame(UPLOAD, upload_request(dtype=F64, dims=()), req_id=8,
                                   bulk=bytes(8))
    c["req_upload_zero_extent"] = frame(UPLOAD, upload_request(dtype=U8, dims=(0, 5)), req_id=8)
    c["req_upload_bf16"] = frame(UPLOAD, upload_request(dtype=BF16, dims=(3,)), req_id=8,
                                 bulk=bytes(6))
    c["req_launch"] = frame(LAUNCH, launch_request(), req_id=9)
    c["req_launch_2dev"] = frame(LAUNCH, launch_request(args=((1, 2), (11, 12)),
                                                        outs=((3,), (13,))), req_id=9)
    c["req_download"] = frame(DOWNLOAD, f_varint(1, 3), req_id=10)
    # Same host: the worker copies from/to the peer's memory; no bulk.
    c["req_upload_peer_address"] = frame(UPLOAD, upload_request() + f_varint(7, 0x7f0000001000),
                                         req_id=8)
    c["req_upload_memory_kind"] = frame(UPLOAD, upload_request() + f_bytes(6, b"pinned_host"),
                                        req_id=8, bulk=four)
    c["req_download_peer_address"] = frame(DOWNLOAD, f_varint(1, 3) + f_varint(2, 0x7f0000002000),
                                           req_id=10)
    # A range of the dense bytes; an UPLOAD in parts (first, then more and last).
    c["req_download_range"] = frame(DOWNLOAD, f_varint(1, 3) + f_varint(4, 4) + f_varint(5, 8),
                                    req_id=10)
    c["req_upload_part_first"] = frame(UPLOAD, upload_request() + f_varint(8, 1), req_id=8,
                                       bulk=four[:8])
    c["req_upload_part_more"] = frame(UPLOAD, f_varint(1, 1) + f_varint(8, 2) + f_varint(9, 8),
                                      req_id=8, bulk=four[:4])
    c["req_upload_part_last"] = frame(UPLOAD, f_varint(1, 1) + f_varint(8, 3) + f_varint(9, 12),
                                      req_id=8, bulk=four[:4])
    c["req_copy"] = frame(COPY, f_varint(1, 3) + f_varint(2, 4) + f_varint(3, 1), req_id=11)
    c["req_send"] = frame(SEND, f_varint(1, 3) + f_bytes(2, "127.0.0.1:7001") + f_varint(3, 5) +
                          f_varint(4, 0) + f_varint(5, 77), req_id=12)
    c["req_put_bulk"] = frame(PUT, put_request(), req_id=13, bulk=four)
    c["req_put_error"] = frame(PUT, put_request(error=(14, "worker w1 died")), req_id=13)
    c["req_expect"] = frame(EXPECT, f_varint(1, 5), req_id=14)
    c["req_delete"] = frame(DELETE, f_packed(1, [1, 2, 3, 4, 5]), req_id=15)
    c["req_stats"] = frame(STATS, b"", req_id=16)
    c["req_await"] = frame(AWAIT, f_varint(1, 3), req_id=17)
    # Islands of several workers: a part to prepare (stamp 5), then its go.
    c["req_launch_prepare"] = frame(LAUNCH, launch_request() + f_varint(6, 5) + f_varint(7, 1),
                                    req_id=18)
    c["req_launch_go"] = frame(LAUNCH_GO, f_varint(1, 5) + f_varint(2, 1), req_id=19)
    c["req_launch_cancel"] = frame(LAUNCH_GO, f_varint(1, 5) + f_bytes(3, "part refused"),
                                   req_id=19)
    # Replies, one per type.
    c["rep_hello"] = frame(HELLO, hello_reply(), flags=REPLY)
    c["rep_ping"] = frame(PING, f_bytes(1, b"ping-data"), flags=REPLY, req_id=2)
    c["rep_inventory"] = frame(INVENTORY, inventory(), flags=REPLY, req_id=4)
    c["rep_compile"] = frame(COMPILE, compile_reply(), flags=REPLY, req_id=5)
    c["rep_serialize_bulk"] = frame(SERIALIZE, f_varint(1, 100) + f_varint(2, 24), flags=REPLY,
                                    req_id=6, bulk=b"serialized-executable..!")
    c["rep_load"] = frame(LOAD, compile_reply(101), flags=REPLY, req_id=7)
    c["rep_upload"] = frame(UPLOAD, ack(1), flags=REPLY, req_id=8)
    c["rep_launch"] = frame(LAUNCH, ack(9), flags=REPLY, req_id=9)
    c["rep_launch_go"] = frame(LAUNCH_GO, ack(9), flags=REPLY, req_id=19)
    c["rep_download_bulk"] = frame(DOWNLOAD, array_info(buf=3), flags=REPLY, req_id=10,
                                   bulk=four)
    c["rep_copy"] = frame(COPY, ack(4), flags=REPLY, req_id=11)
    c["rep_send"] = frame(SEND, ack(3), flags=REPLY, req_id=12)
    c["rep_put"] = frame(PUT, ack(5), flags=REPLY, req_id=13)
    c["rep_expect"] = frame(EXPECT, ack(5), flags=REPLY, req_id=14)
    c["rep_delete"] = frame(DELETE, ack(0), flags=REPLY, req_id=15)
    c["rep_stats"] = frame(STATS, stats(), flags=REPLY, req_id=16)
    c["rep_await"] = frame(AWAIT, array_info(buf=3), flags=REPLY, req_id=17)
    # obs: session timelines.
    clock = f_varint(1, 123456789) + f_bytes(2, "worker-0") + f_varint(3, 4242)
    trace_event = (f_bytes(1, "jit_add") + f_bytes(2, "execute") + f_varint(3, 1) +
                   f_varint(4, 1000) + f_varint(5, 50) + f_varint(6, 100) + f_varint(7, 3) +
                   f_varint(8, 16) + f_varint(9, 9) + f_bytes(10, "worker-1"))
    c["req_trace_start"] = frame(TRACE_START, f_varint(1, 4096), req_id=18)
    c["req_trace_fetch"] = frame(TRACE_FETCH, f_varint(1, 100), req_id=19)
    c["rep_trace_start"] = frame(TRACE_START, clock, flags=REPLY, req_id=18)
    c["rep_trace_fetch"] = frame(TRACE_FETCH, f_bytes(1, clock) + f_bytes(2, trace_event) * 2 +
                                 f_varint(3, 7) + f_varint(4, 1), flags=REPLY, req_id=19)
    # Health (message types 45, 46).
    c["req_health_heartbeat"] = frame(HEALTH_HEARTBEAT, f_varint(1, 42), req_id=0)
    c["req_health_rejoin"] = frame(HEALTH_REJOIN, f_varint(1, 1) + f_varint(2, 3), req_id=18)
    c["rep_health_rejoin"] = frame(HEALTH_REJOIN, ack(1), flags=REPLY, req_id=18)
    c["rep_health_rejoin_wanted"] = frame(HEALTH_REJOIN, f_varint(1, 1) + f_packed(2, [77, 78]),
                                          flags=REPLY, req_id=18)
    c["err_health_rejoin"] = frame(HEALTH_REJOIN, error_reply(14, "worker w (a) is unavailable"),
                                   flags=REPLY | ERROR, req_id=18)
    # Operations (ADMIN_*, MsgType 50-56): requests and replies.
    c["req_admin_status"] = frame(ADMIN_STATUS, b"", req_id=50)
    c["req_admin_pause_id"] = frame(ADMIN_PAUSE, f_varint(1, 1234567), req_id=51)
    c["req_admin_resume_name"] = frame(ADMIN_RESUME, f_bytes(2, "train@host:42"), req_id=52)
    c["req_admin_drain"] = frame(ADMIN_DRAIN, f_bytes(1, "worker-1"), req_id=53)
    c["req_admin_undrain"] = frame(ADMIN_UNDRAIN, f_bytes(1, "worker-1"), req_id=54)
    c["req_admin_hold"] = frame(ADMIN_HOLD, f_varint(1, 1234567) + f_varint(2, 1), req_id=55)
    c["req_admin_worker_drain"] = frame(ADMIN_WORKER_DRAIN, f_varint(1, 1), req_id=56)
    c["rep_admin_status"] = frame(ADMIN_STATUS, admin_status(), flags=REPLY, req_id=50)
    c["rep_admin_ack"] = frame(ADMIN_PAUSE, f_varint(1, 1234567) + f_bytes(2, "paused") +
                               f_varint(3, 16), flags=REPLY, req_id=51)
    c["rep_stats_ops"] = frame(STATS, stats() + f_varint(60, 1) + f_varint(61, 1) +
                               f_varint(62, 3) + f_bytes(65, f_varint(1, 7) + f_varint(4, 2)),
                               flags=REPLY, req_id=16)
    c["err_admin_not_found"] = frame(ADMIN_PAUSE, error_reply(5, "session 9 not found; open "
                                                              "sessions: none"),
                                     flags=REPLY | ERROR, req_id=51)
    # Allocation and gang order: OPEN_SESSION (33) with its allocation fields, a
    # stamped LAUNCH, STATS with stamp records.
    c["req_open_session_alloc"] = frame(
        33, f_varint(1, 1) + f_varint(2, 100) + f_varint(3, 4) + f_bytes(4, "cpu") +
        f_varint(5, 2) + f_bytes(6, "w0") + f_bytes(6, "w1") + f_varint(7, 1) + f_varint(8, 2) +
        f_varint(9, 1500), req_id=20)
    c["req_launch_stamped"] = frame(LAUNCH, launch_request() + f_varint(6, 7), req_id=21)
    # Relayed with seq (15) and the session's life it was numbered in (16).
    c["req_launch_life"] = frame(LAUNCH, launch_request() + f_varint(15, 7) +
                                 f_varint(16, 0x8000000000000001), req_id=21)
    c["req_delete_life"] = frame(DELETE, f_packed(1, [1, 2]) + f_varint(15, 3) +
                                 f_varint(16, 12), req_id=15)
    stamp = f_varint(1, 0) + f_varint(2, 7) + f_varint(3, 42)
    c["rep_stats_stamps"] = frame(STATS, stats() + f_bytes(30, stamp) + f_bytes(30, stamp) +
                                  f_varint(31, 3) + f_varint(32, 1), flags=REPLY, req_id=22)
    # A controller restart: REGISTER (32) with the worker's previous global ids
    # (field 7); SESSION_RESUME (36) with its open request, devices and
    # executables, its SessionInfo reply and a wait that ran out.
    c["req_register_previous"] = frame(
        32, f_bytes(1, "w0") + f_bytes(2, "127.0.0.1:7311") + f_bytes(3, inventory()) +
        f_bytes(7, f_varint(1, 4)), req_id=23)
    # ... and the drain and paused sessions it still applies (fields 2, 3).
    c["req_register_paused"] = frame(
        32, f_bytes(1, "w0") + f_bytes(2, "127.0.0.1:7311") + f_bytes(3, inventory()) +
        f_bytes(7, f_varint(1, 4) + f_varint(2, 1) + f_packed(3, (1234567, 7))), req_id=23)
    c["rep_register"] = frame(32, f_varint(1, 1) + f_varint(2, 4), flags=REPLY, req_id=23)
    open_req = f_varint(2, 20000) + f_varint(3, 2) + f_varint(7, 1) + f_bytes(16, "train@h:1")
    device = f_varint(1, 0) + f_bytes(2, "w0") + f_varint(3, 1)
    c["req_session_resume"] = frame(
        SESSION_RESUME, f_bytes(1, open_req) + f_bytes(2, device) +
        f_bytes(2, f_varint(1, 1) + f_bytes(2, "w0") + f_varint(3, 0)) +
        f_bytes(3, f_varint(1, 9) + f_packed(2, (0, 1))), req_id=24)
    worker_info = f_varint(1, 0) + f_bytes(2, "w0") + f_bytes(3, "127.0.0.1:7311") + f_varint(4, 1)
    global_device = f_varint(1, 0) + f_varint(2, 0) + f_bytes(4, f_varint(1, 1))
    c["rep_session_resume"] = frame(
        SESSION_RESUME, f_varint(1, 1234567) + f_bytes(2, "cpu") + f_bytes(7, worker_info) +
        f_bytes(8, global_device), flags=REPLY, req_id=24)
    c["err_session_resume"] = frame(
        SESSION_RESUME, error_reply(4, "session 7 waited 20000 ms for worker w1 to register "
                                    "again"), flags=REPLY | ERROR, req_id=24)
    # Error replies.
    c["err_not_found"] = frame(DOWNLOAD, error_reply(5, "buffer 3 not found"),
                               flags=REPLY | ERROR, req_id=10)
    c["err_hello_unimplemented"] = frame(HELLO, error_reply(12, "no common version"),
                                         flags=REPLY | ERROR, req_id=1)
    c["err_header_unreadable"] = frame(PING, error_reply(3, "bad frame magic"),
                                       flags=REPLY | ERROR, req_id=0)
    # Broken frames: each trips one check of the decoder.
    good = c["req_ping"]
    c["bad_truncated_header"] = good[:20]
    c["bad_truncated_payload"] = good[:36]
    c["bad_magic"] = b"XWAY" + good[4:]
    c["bad_version_0"] = frame(PING, f_bytes(1, b"x"), version=0)
    c["bad_version_2"] = frame(PING, f_bytes(1, b"x"), version=2)
    c["bad_type_0"] = frame(0, b"")
    c["bad_type_18"] = frame(18, b"")
    c["bad_type_65535"] = frame(65535, b"")
    c["bad_flags"] = frame(PING, b"", flags=0x4)
    c["bad_error_without_reply"] = frame(PING, error_reply(3, "x"), flags=ERROR)
    c["bad_bulk_on_ping"] = frame(PING, b"", bulk=b"abcd")
    c["bad_bulk_on_error"] = frame(DOWNLOAD, error_reply(5, "x"), flags=REPLY | ERROR, bulk=b"ab")
    c["bad_bulk_max"] = header(UPLOAD, 0, 0, 1, 0xFFFFFFFFFFFFFFFF)
    c["bad_payload_oversize"] = header(PING, 0, 0xFFFFFFFF, 1, 0)
    c["bad_protobuf"] = frame(HELLO, b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff")
    c["bad_protobuf_len"] = frame(PING, b"\x0a\x7f\x01")  # bytes field longer than payload
    c["bad_protobuf_wiretype"] = frame(DOWNLOAD, b"\x0f\x01")  # wire type 7
    c["bad_upload_dims_overflow"] = frame(UPLOAD, upload_request(dims=(1 << 40, 1 << 40)),
                                          bulk_len=16)
    c["bad_upload_dims_negative"] = frame(UPLOAD, upload_request(dims=(-4,)), bulk_len=16)
    c["bad_upload_dtype"] = frame(UPLOAD, upload_request(dtype=99), bulk_len=16)
    c["bad_upload_extent"] = frame(UPLOAD, upload_request(dims=(4,)), bulk=bytes(12))
    c["bad_upload_part_first_over"] = frame(UPLOAD, upload_request() + f_varint(8, 1),
                                            bulk=bytes(20))
    c["bad_upload_part_kind"] = frame(UPLOAD, upload_request() + f_varint(8, 7), bulk=bytes(4))
    c["bad_upload_peer_address_bulk"] = frame(UPLOAD, upload_request() + f_varint(7, 4096),
                                              bulk=bytes(16))
    c["bad_upload_rank65"] = frame(UPLOAD, upload_request(dtype=PRED, dims=(1,) * 65),
                                   bulk_len=1)
    c["bad_upload_strides_mismatch"] = frame(UPLOAD, upload_request(dims=(2, 2), strides=(4,)),
                                             bulk_len=16)
    c["bad_upload_strides_negative"] = frame(UPLOAD, upload_request(dims=(2, 2), strides=(-8, 4)),
                                             bulk_len=16)
    c["bad_upload_strides_overflow"] = frame(UPLOAD, upload_request(dims=(5,),
                                                                    strides=(1 << 62,)),
                                             bulk_len=16)
    # Random bytes behind a valid header prefix (fixed seed).
    rng = random.Random(0xC0FFEE)
    for i in range(4):
        n = rng.randrange(8, 64)
        payload = bytes(rng.randrange(256) for _ in range(n))
        c["rand_payload_%d" % i] = frame(rng.randrange(1, 17), payload,
                                         flags=rng.choice([0, REPLY]))
    return c


def stream_corpus(frames):
    """name -> bytes for the connection-stream target."""
    hello = frames["req_hello"]
    s = {}
    s["stream_hello_ping"] = hello + frames["req_ping"]
    s["stream_session"] = (hello + frames["req_inventory"] + frames["req_upload_f32"] +
                           frames["req_await"] + frames["req_download"] + frames["req_delete"] +
                           frames["req_stats"])
    s["stream_compile_launch"] = (hello + frames["req_compile"] + frames["req_upload_f32"] +
                                  frames["req_launch"] + frames["req_serialize"] +
                                  frames["req_load_bulk"])
    s["stream_worker_put"] = (frames["req_hello_token_session"] + frames["req_expect"] +
                              frames["req_put_bulk"] + frames["req_put_error"])
    s["stream_all_replies"] = b"".join(v for k, v in sorted(frames.items())
                                       if k.startswith("rep_") or k.startswith("err_"))
    s["stream_all_requests"] = b"".join(v for k, v in sorted(frames.items())
                                        if k.startswith("req_"))
    s["stream_trace"] = (hello + frames["req_trace_fetch"] + frames["req_trace_start"] +
                         frames["req_upload_f32"] + frames["req_trace_fetch"])
    s["stream_admin"] = (hello + frames["req_admin_status"] + frames["req_admin_pause_id"] +
                         frames["req_admin_hold"] + frames["req_admin_worker_drain"] +
                         frames["req_upload_f32"] + frames["req_admin_resume_name"])
    s["stream_bulk_then_bad"] = hello + frames["req_upload_2d_strided"] + frames["bad_magic"]
    s["stream_truncated_bulk"] = hello + frames["req_upload_f32"][:-5]
    s["stream_truncated_header"] = hello + frames["req_ping"][:17]
    s["stream_oversize_prehello"] = header(PING, 0, 5000, 1, 0)
    s["stream_bulk_max"] = hello + frames["bad_bulk_max"]
    s["stream_bad_extent"] = hello + frames["bad_upload_extent"] + frames["req_ping"]
    s["stream_bad_protobuf"] = hello + frames["bad_protobuf_len"]
    s["stream_second_hello"] = hello + hello
    rng = random.Random(0xBADF00D)
    s["stream_garbage"] = bytes(rng.randrange(256) for _ in range(200))
    s["stream_hello_garbage"] = hello + bytes(rng.randrange(256) for _ in range(100))
    # conn_parser_fuzz.c feeds the stream in two chunks split at data[0] % size:
    # vary the split so seeds cut headers, payloads and bulk in different places.
    out = {}
    for i, (name, data) in enumerate(sorted(s.items())):
        out[name] = bytes([(7 + 37 * i) & 0xFF]) + data
    return out


GENERATED_PREFIXES = ("req_", "rep_", "err_", "bad_", "rand_", "stream_", "seed_")


def cache_file(payload, key=None, magic=0x43585743, version=1, length=None, checksum=None):
    """A compile cache file (src/controller/cw_compile_disk.h). The fuzz target
    takes bytes 8..40 as the key looked for, so `key` defaults to a fixed one."""
    key = key if key is not None else hashlib.sha256(b"fuzz key").digest()
    length = len(payload) if length is None else length
    checksum = checksum if checksum is not None else hashlib.sha256(payload).digest()
    return struct.pack("<II", magic, version) + key + struct.pack("<Q", length) + checksum + payload


def debug_options_opts(entries):
    """CompileOptions{3: ExecutableBuildOptions{1: 0, 3: DebugOptions{...}}}."""
    dbg = f_varint(1, 1)
    for k, v in entries:
        dbg += f_bytes(357, f_bytes(1, k) + f_bytes(2, v))
    dbg += f_bytes(500, f_bytes(1, b"extra") + f_bytes(2, b"1"))
    ebo = f_varint(1, 0) + f_varint(4, 1) + f_varint(5, 1) + f_bytes(3, dbg)
    return f_bytes(3, ebo)


def compile_disk_corpus():
    payload = bytes(range(64)) * 4
    files = {
        "seed_valid": cache_file(payload),
        "seed_valid_empty": cache_file(b""),
        "bad_truncated_header": cache_file(payload)[:50],
        "bad_truncated_payload": cache_file(payload)[:-10],
        "bad_magic": cache_file(payload, magic=0x11223344),
        "bad_version": cache_file(payload, version=2),
        "bad_length_long": cache_file(payload, length=len(payload) + 1),
        "bad_length_huge": cache_file(payload, length=(1 << 64) - 1),
        "bad_checksum": cache_file(payload, checksum=b"\0" * 32),
        "seed_options_map": debug_options_opts([(b"rtt_us", b"-1"), (b"gpus_per_node", b"-1"),
                                                (b"nic_speed_gbps", b"-1")]),
        "seed_options_plain": f_bytes(3, f_varint(4, 1) + f_varint(5, 1)),
        "bad_options_len": f_bytes(3, f_bytes(3, b"\xaa\x16\x7f")),
    }
    return files


def settings_corpus():
    """settings_fuzz: byte 0 the path (0 argv, 1 a variable, 2 a flag; bit 7
    from the command line), byte 1 the setting (an index into the table),
    then the text."""
    files = {}
    argvs = {
        "argv_listen": [b"--listen", b"127.0.0.1:0", b"--devices=2"],
        "argv_bool": [b"--tls", b"--tls-require-client-cert=yes", b"--exit-with-controller"],
        "argv_bad": [b"--", b"--=1", b"listen", b"--devices"],
        "argv_hex": [b"--devices=0x10", b"--heartbeat-ms=-0x1", b"--hello-timeout=1e-9"],
        "argv_token": [b"--token", b"secret"],
    }
    for name, args in argvs.items():
        files["seed_" + name] = bytes([0, 0]) + b"\0".join(args)
    values = [b"1", b"0", b"yes", b"-1", b"0x7fffffffffffffff", b"9223372036854775808", b"1e308",
              b"nan", b"0.0004", b"", b"127.0.0.1:7311", b"\xff\xfe"]
    for i, v in enumerate(values):
        files["seed_env_%02d" % i] = bytes([1, i * 7]) + v
        files["seed_flag_%02d" % i] = bytes([2 | (0x80 if i % 2 else 0), i * 5 + 1]) + v
    return files


def json_corpus():
    """json_fuzz: text made a JSON string (valid and broken UTF-8)."""
    texts = [b"worker-0", b"caf\xc3\xa9", b"\xe2\x82\xac\xf0\x9f\x98\x80", b"\xc0\xaf",
             b"\xed\xa0\x80", b"\xf4\x90\x80\x80", b"\xe0\x80", b"\x80\xbf\xff",
             b"quote\" back\\ nl\n tab\t \x01", b"\xff" * 8, b"\x7f" * 8]
    return {"seed_text_%02d" % i: t for i, t in enumerate(texts)}


def up_state_corpus():
    """up_state_fuzz: `causeway up` state files (src/tools/cw_up.c)."""
    good = (b"causeway-cluster 1\ncontroller /tmp/causeway-0/controller.sock\n"
            b"process controller 1234 99887766\nprocess worker-0 1240 99887770\n")
    return {
        "seed_state": good,
        "seed_state_tcp": b"causeway-cluster 1\ncontroller 127.0.0.1:7310\n",
        "bad_state_magic": good.replace(b"cluster 1", b"cluster 2"),
        "bad_state_no_newline": good[:-1],
        "bad_state_pid1": good.replace(b"1234", b"1"),
        "bad_state_long_name": good.replace(b"worker-0", b"w" * 40),
        "bad_state_no_controller": b"causeway-cluster 1\nprocess worker-0 5 6\n",
        "bad_state_long_line": b"causeway-cluster 1\ncontroller " + b"a" * 700 + b"\n",
        "bad_state_huge_numbers": good.replace(b"99887766", b"18446744073709551616"),
    }


def hlo_params_corpus():
    """hlo_params_fuzz: byte 0 bit 0 with_config, then HloModuleProto
    (proto/xla_hlo_subset.proto) bytes."""
    def shape(et, dims, tuple_shapes=()):
        return f_varint(2, et) + f_packed(3, dims) + b"".join(f_bytes(4, t) for t in tuple_shapes)
    def module(params, aliases=()):
        ps = b"".join(f_bytes(1, p) for p in params) + f_bytes(2, shape(F32, [4]))
        io = b"".join(f_bytes(1, f_varint(2, a)) for a in aliases)
        return f_bytes(4, ps) + (f_bytes(8, io) if aliases else b"")
    two = module([shape(F32, [2, 3]), shape(S32, [])], aliases=[1])
    tup = module([shape(13, [], [shape(F32, [2]), shape(PRED, [1])])])
    deep = shape(F32, [1])
    for _ in range(64):
        deep = shape(13, [], [deep])
    return {
        "seed_hlo_two_params": b"\0" + two,
        "seed_hlo_with_config": b"\1" + f_bytes(1, two),
        "seed_hlo_tuple": b"\0" + tup,
        "seed_hlo_deep_tuple": b"\0" + module([deep]),
        "seed_hlo_alias_out_of_range": b"\0" + module([shape(F32, [1])], aliases=[5, -1]),
        "seed_hlo_no_shape": b"\0" + f_bytes(8, b""),
        "bad_hlo_truncated": b"\0" + two[:-3],
    }


def tls_corpus(root):
    """tls_fuzz mode 3 (a peer's first bytes to a TLS port): ClientHellos of
    Python's ssl module (ch_*, whole and cut; their key shares differ each
    run, so they are written only when missing), and first bytes that are
    not TLS; PEM seeds (modes 0-2) are committed by hand as pem_*."""
    import ssl
    files = {}
    have = os.path.join(root, "src/core/corpus/tls_fuzz/ch_tls13")
    for name, maxv in (("tls13", ssl.TLSVersion.TLSv1_3), ("tls12", ssl.TLSVersion.TLSv1_2)):
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
        ctx.maximum_version = maxv
        inc, out = ssl.MemoryBIO(), ssl.MemoryBIO()
        obj = ctx.wrap_bio(inc, out, server_hostname="127.0.0.1")
        try:
            obj.do_handshake()
        except ssl.SSLWantReadError:
            pass
        hello = out.read()
        if not os.path.exists(have):
            files["ch_" + name] = b"\3" + hello
            files["ch_%s_half" % name] = b"\3" + hello[:len(hello) // 2]
    files["seed_first_causeway"] = b"\3CWAY\1\0\1\0"
    files["seed_first_http"] = b"\3GET / HTTP/1.1\r\n\r\n"
    files["seed_first_ccs"] = b"\3\x14\3\3\0\1\1"
    files["seed_address_v6"] = b"\3[::1]:7311"
    files["seed_address_host"] = b"\3controller.example:7310"
    return files


def tls_first_bytes_corpus():
    """tls_first_bytes_fuzz: a peer's first bytes (a TLS record header, a
    causeway frame, HTTP, cut short) and addresses, as they come."""
    return {
        "seed_first_tls_record": b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03",
        "seed_first_tls_short": b"\x16\x03",
        "seed_first_causeway": b"CWAY\1\0\1\0",
        "seed_first_cut": b"CW",
        "seed_first_http": b"GET / HTTP/1.1\r\n\r\n",
        "seed_first_ccs": b"\x14\x03\x03\x00\x01\x01",
        "seed_address_v4": b"127.0.0.1:7311",
        "seed_address_v6": b"[::1]:7311",
        "seed_address_v6_open": b"[::1:7311",
        "seed_address_host": b"controller.example:7310",
        "seed_address_unix": b"/tmp/causeway/controller.sock",
        "seed_address_long": b"h" * 80 + b":1",
    }


def write_dir(path, files):
    # Replace only what this script generates; reproducers added by hand
    # (any other name, e.g. crash-<sha1>) are kept.
    os.makedirs(path, exist_ok=True)
    for old in os.listdir(path):
        if old.startswith(GENERATED_PREFIXES):
            os.remove(os.path.join(path, old))
    for name, data in sorted(files.items()):
        with open(os.path.join(path, name), "wb") as f:
            f.write(data)


# --- Host callbacks (HOST_CALLBACK, 18) ----------------------------------------

HOST_CALLBACK = 18


def hostcb_array(dtype=F32, dims=(4,), token=False):
    return f_varint(1, dtype) + f_packed(2, dims) + (f_varint(3, 1) if token else b"")


def hostcb_request(operands, results, cbs=1, index=0, exe=100, partitioned=False, buffer=False,
                   aliases=()):
    p = f_varint(1, cbs) + f_varint(2, index)
    for a in operands:
        p += f_bytes(3, a)
    for a in results:
        p += f_bytes(4, a)
    p += f_varint(5, exe)
    if partitioned:
        p += f_varint(6, 1)
    if buffer:
        p += f_varint(7, 1)
    if aliases:
        p += f_packed(8, aliases)
    return p


def hostcb_corpus():
    """name -> bytes for hostcb_fuzz: HOST_CALLBACK frames."""
    c = {}
    four = f32_bytes([1.0, 2.0, 3.0, 4.0])
    f4 = hostcb_array(F32, (4,))
    tok = f_varint(3, 1)
    c["ok_one_f32"] = frame(HOST_CALLBACK, hostcb_request([f4], [f4]), bulk=four)
    c["ok_token_first"] = frame(HOST_CALLBACK, hostcb_request([tok, f4], [tok, f4]), bulk=four)
    c["ok_scalar_s32"] = frame(HOST_CALLBACK, hostcb_request([hostcb_array(S32, ())],
                                                             [hostcb_array(S32, ())]),
                               bulk=struct.pack("<i", 7))
    c["ok_empty"] = frame(HOST_CALLBACK, hostcb_request([hostcb_array(F32, (0, 3))],
                                                        [hostcb_array(F32, (0, 3))]))
    c["ok_many"] = frame(HOST_CALLBACK,
                         hostcb_request([hostcb_array(U8, (3,)), hostcb_array(PRED, (2, 2)),
                                         hostcb_array(F64, (1,))], [f4, tok],
                                        index=3, partitioned=True),
                         bulk=bytes(3 + 4 + 8))
    c["ok_no_operands"] = frame(HOST_CALLBACK, hostcb_request([], [f4]))
    c["bad_bulk_short"] = frame(HOST_CALLBACK, hostcb_request([f4], [f4]), bulk=four[:12])
    c["bad_bulk_long"] = frame(HOST_CALLBACK, hostcb_request([f4], []), bulk=four + four)
    c["bad_token_dtype"] = frame(HOST_CALLBACK, hostcb_request([hostcb_array(F32, (), True)],
                                                               []))
    c["bad_dtype"] = frame(HOST_CALLBACK, hostcb_request([hostcb_array(99, (4,))], []),
                           bulk=four)
    c["bad_negative_dim"] = frame(HOST_CALLBACK,
                                  hostcb_request([hostcb_array(F32, (-1 & (2**64 - 1),))], []))
    c["bad_overflow"] = frame(HOST_CALLBACK,
                              hostcb_request([hostcb_array(F64, (2**40, 2**40))], []))
    c["bad_result_dtype"] = frame(HOST_CALLBACK, hostcb_request([f4], [hostcb_array(0, (4,))]),
                                  bulk=four)
    c["bad_huge_bulk_len"] = frame(HOST_CALLBACK, hostcb_request([f4], [f4]), bulk_len=2**39)
    # Buffer callbacks (field 7) and the operands their results share (field 8).
    i4 = hostcb_array(S32, (4,))
    c["ok_buffer"] = frame(HOST_CALLBACK, hostcb_request([f4], [f4], buffer=True), bulk=four)
    c["ok_buffer_aliased"] = frame(HOST_CALLBACK, hostcb_request([i4, f4], [f4, i4], buffer=True,
                                                                 aliases=(2, 1)), bulk=four + four)
    c["bad_alias_not_buffer"] = frame(HOST_CALLBACK, hostcb_request([f4], [f4], aliases=(1,)),
                                      bulk=four)
    c["bad_alias_count"] = frame(HOST_CALLBACK, hostcb_request([f4], [f4, f4], buffer=True,
                                                               aliases=(1,)), bulk=four)
    c["bad_alias_past"] = frame(HOST_CALLBACK, hostcb_request([f4], [f4], buffer=True,
                                                              aliases=(2,)), bulk=four)
    c["bad_alias_shape"] = frame(HOST_CALLBACK, hostcb_request([f4], [i4], buffer=True,
                                                               aliases=(1,)), bulk=four)
    return c


# --- gRPC over HTTP/2 and the IFRT proxy ----------------------------------------

H2_PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"


def h2_frame(ftype, flags, stream, payload):
    return struct.pack(">I", len(payload))[1:] + bytes([ftype, flags]) + \
        struct.pack(">I", stream) + payload


def hpack_literal(name, value):
    """A header field as HPACK's literal without indexing, new name, no Huffman."""
    return b"\x00" + bytes([len(name)]) + name + bytes([len(value)]) + value


def grpc_message(body, flag=0, declared=None):
    return bytes([flag]) + struct.pack(">I", len(body) if declared is None else declared) + body


def grpc_call(stream, path, messages, end=True, extra=()):
    fields = [(b":method", b"POST"), (b":scheme", b"http"), (b":path", path),
              (b":authority", b"fuzz"), (b"content-type", b"application/grpc"),
              (b"te", b"trailers")] + list(extra)
    block = b"".join(hpack_literal(n, v) for n, v in fields)
    out = h2_frame(1, 0x4, stream, block)  # HEADERS, END_HEADERS
    body = b"".join(messages)
    out += h2_frame(0, 0x1 if end else 0, stream, body)  # DATA
    return out


def ifrt_version(protocol, serdes=6):
    return f_varint(1, protocol) + f_varint(2, serdes)


def ifrt_request(kind_field, body=b"", op_id=1):
    """IfrtRequest{1: RequestMetadata{1: fixed64 op_id}, kind: body}."""
    md = key(1, 1) + struct.pack("<Q", op_id)
    return f_bytes(1, md) + f_bytes(kind_field, body)


def grpc_corpus():
    """Client byte streams: the preface and SETTINGS, then calls of the IFRT
    proxy's methods (unary, streaming, binary metadata), broken messages
    (compressed, over the limit, cut short), a reset, a PING and junk."""
    settings = h2_frame(4, 0, 0, b"")
    gv = f_bytes(1, ifrt_version(16)) + f_bytes(2, ifrt_version(25))
    svc = b"/xla.ifrt.proxy.GrpcIfrtService/"
    md = (b"ifrt-proxy-grpc-ifrt-session-metadata-bin", b"CgQIGRAG")
    init = ifrt_request(2)
    out = {
        "get_version": H2_PREFACE + settings + grpc_call(1, svc + b"GetVersion", [grpc_message(gv)]),
        "session_init": H2_PREFACE + settings + grpc_call(
            1, svc + b"IfrtSession", [grpc_message(init), grpc_message(ifrt_request(13, b"", 2))],
            extra=[md]),
        "session_open": H2_PREFACE + settings + grpc_call(
            3, svc + b"IfrtSession", [grpc_message(init)], end=False, extra=[md]),
        "two_calls": H2_PREFACE + settings + grpc_call(1, svc + b"GetVersion", [grpc_message(gv)])
        + grpc_call(3, b"/x.Unknown/Method", [grpc_message(b"")]),
        "compressed": H2_PREFACE + settings + grpc_call(1, b"/a.B/C", [grpc_message(b"zz", flag=1)]),
        "oversize": H2_PREFACE + settings + grpc_call(1, b"/a.B/C",
                                                      [grpc_message(b"x", declared=1 << 30)]),
        "cut": H2_PREFACE + settings + grpc_call(1, b"/a.B/C", [grpc_message(b"abc", declared=9)]),
        "reset": H2_PREFACE + settings + grpc_call(1, b"/a.B/C", [], end=False)
        + h2_frame(3, 0, 1, struct.pack(">I", 8)),
        "ping": H2_PREFACE + settings + h2_frame(6, 0, 0, b"12345678"),
        "bin_metadata": H2_PREFACE + settings + grpc_call(
            1, b"/a.B/C", [grpc_message(b"q")], extra=[(b"x-bin", b"aGVsbG8"),
                                                      (b"y-bin", b"***")]),
        "not_http2": b"GET / HTTP/1.1\r\nHost: x\r\n\r\n",
        # grpc_fuzz's service: "/h..." holds its credit, "/w..." streams its answer.
        "held_flow": H2_PREFACE + settings + grpc_call(
            1, b"/h.B/C", [grpc_message(b"a" * 40), grpc_message(b"b" * 40)]),
        "streamed_answer": H2_PREFACE + settings + grpc_call(1, b"/w.B/C", [grpc_message(b"q")])
        + h2_frame(8, 0, 1, struct.pack(">I", 1 << 20)),  # WINDOW_UPDATE
        "server_resets": H2_PREFACE + settings + b"".join(
            grpc_call(2 * i + 1, b"/a.B/C", [grpc_message(b"zz")],
                      extra=[(b"content-length", b"1")]) for i in range(4)),
    }
    return out


def ifrt_sharding(type_name, data):
    """xla.ifrt.ShardingProto{1: Serialized{1: type_name, 2: data}}."""
    return f_bytes(1, f_bytes(1, type_name) + f_bytes(2, data))


def ifrt_request_corpus():
    """IfrtRequest bytes of several kinds (Init, Compile, CheckFuture with a
    handle, one past the known kinds; arrays from host buffers with each kind
    of sharding, strides and dtypes), GetVersionRequest and the session
    metadata, and broken ones."""
    gv = f_bytes(1, ifrt_version(16)) + f_bytes(2, ifrt_version(25))
    dtype = lambda k: f_varint(1, k)  # noqa: E731
    shape = lambda dims: f_packed(1, dims)  # noqa: E731
    single = ifrt_sharding(b"xla::ifrt::SingleDeviceSharding", f_varint(1, 3))
    hlo = ifrt_sharding(b"xla::ifrt::HloSharding",
                        f_bytes(1, f_packed(1, [0, 1, 2, 3])) + f_bytes(2, f_varint(1, 0)))
    even = ifrt_sharding(b"xla::ifrt::ConcreteEvenSharding",
                         f_bytes(1, f_packed(1, [4, 5])) + f_varint(5, 1))
    # As jaxlib writes it: shape (2) and shard shape (3) are ShapeProtos.
    even_shaped = ifrt_sharding(b"xla::ifrt::ConcreteEvenSharding",
                                f_bytes(1, f_packed(1, [0, 1, 2, 3])) + f_bytes(2, shape((8, 2)))
                                + f_bytes(3, shape((4, 2))) + f_varint(5, 0))
    unknown = ifrt_sharding(b"xla::ifrt::ShardingParamSharding", b"")
    handle = key(4, 1) + struct.pack("<Q", 9) + key(6, 1) + struct.pack("<Q", 10)
    def make(sh, dims=(2, 3), kind=11, strides=None):
        body = f_bytes(1, dtype(kind)) + f_bytes(2, shape(dims)) + f_bytes(3, sh) + handle
        if strides is not None:
            body += f_bytes(5, f_packed(1, strides))
        return ifrt_request(4, body)
    spec = (f_bytes(1, f_packed(1, [0, 1])) + f_bytes(2, f_bytes(1, dtype(4)) + f_bytes(2, shape((4,))))
            + f_bytes(3, f_bytes(1, dtype(4)) + f_bytes(2, shape((4,))) + f_bytes(3, hlo)))
    return {
        "make_single": make(single),
        "make_hlo": make(hlo, dims=(8,), kind=16),
        "make_even": make(even, dims=(0, 4)),
        "make_even_shaped": make(even_shaped, dims=(8, 2)),
        "make_strided": make(single, strides=(12, 4)),
        "make_transposed": make(single, strides=(4, 8)),
        "make_huge_strides": make(single, dims=(2, 2), strides=(2**63 - 1, 2**63 - 1)),
        "make_unknown_sharding": make(unknown),
        "make_bad_dtype": make(single, kind=17),
        "make_shards": ifrt_request(25, f_bytes(1, spec)),
        "assemble": ifrt_request(5, f_bytes(1, shape((4,))) + f_bytes(2, hlo) + f_bytes(7, dtype(11))),
        "init": ifrt_request(2),
        "compile": ifrt_request(13, f_bytes(1, b"program") + f_bytes(2, b"options"), 7),
        "check_future": ifrt_request(3, key(1, 1) + struct.pack("<Q", 42), 3),
        "program_text": ifrt_request(29, key(1, 1) + struct.pack("<Q", 5), 4),
        "unknown_kind": ifrt_request(99, b"abc"),
        "get_version": gv,
        "session_metadata": f_bytes(1, ifrt_version(25)) + f_bytes(2, f_bytes(1, f_bytes(1, b"k"))),
        "truncated": ifrt_request(2)[:-1] + b"\xff",
        "empty": b"",
    }


# --- Serialized executables (proto SerializedExecutable) ------------------------

def serialized_exe(magic=b"causeway.executable", version=1, fmt=b"mlir", code=MLIR,
                   opts=b"", fingerprint=b""):
    out = f_bytes(1, magic) + f_varint(2, version) + f_bytes(3, fmt) + f_bytes(4, code)
    if opts:
        out += f_bytes(5, opts)
    if fingerprint:
        out += f_bytes(6, fingerprint)
    return out


def serialized_exe_corpus():
    opts = f_bytes(3, f_varint(4, 1) + f_varint(5, 2))
    return {
        "seed_valid": serialized_exe(opts=opts, fingerprint=b"6f1c0a"),
        "seed_valid_hlo": serialized_exe(fmt=b"hlo", code=bytes(range(48))),
        "seed_valid_bare": serialized_exe(),
        "bad_magic": serialized_exe(magic=b"xla"),
        "bad_version": serialized_exe(version=2),
        "bad_format_empty": serialized_exe(fmt=b""),
        "bad_format_space": serialized_exe(fmt=b"ml ir"),
        "bad_format_long": serialized_exe(fmt=b"f" * 32),
        "bad_no_code": f_bytes(1, b"causeway.executable") + f_varint(2, 1) + f_bytes(3, b"mlir"),
        "bad_truncated": serialized_exe(opts=opts)[:-3],
        "empty": b"",
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    args = ap.parse_args()
    frames = frame_corpus()
    write_dir(os.path.join(args.root, "src/protocol/corpus/frame_fuzz"), frames)
    streams = stream_corpus(frames)
    write_dir(os.path.join(args.root, "src/net/corpus/conn_parser_fuzz"), streams)
    hostcb = hostcb_corpus()
    write_dir(os.path.join(args.root, "src/protocol/corpus/hostcb_fuzz"), hostcb)
    disk = compile_disk_corpus()
    write_dir(os.path.join(args.root, "src/controller/corpus/compile_disk_fuzz"), disk)
    print("wrote %d frame seeds, %d stream seeds and %d compile cache seeds"
          % (len(frames), len(streams), len(disk)))
    for target, make in (("src/core/corpus/settings_fuzz", settings_corpus),
                         ("src/core/corpus/json_fuzz", json_corpus),
                         ("src/core/corpus/tls_fuzz", lambda: tls_corpus(args.root)),
                         ("src/core/corpus/tls_first_bytes_fuzz", tls_first_bytes_corpus),
                         ("src/tools/corpus/up_state_fuzz", up_state_corpus),
                         ("src/worker/corpus/hlo_params_fuzz", hlo_params_corpus),
                         ("src/net/corpus/grpc_fuzz", grpc_corpus),
                         ("src/proxy/corpus/ifrt_request_fuzz", ifrt_request_corpus),
                         ("src/protocol/corpus/serialized_exe_fuzz", serialized_exe_corpus)):
        files = make()
        write_dir(os.path.join(args.root, target), files)
        print("wrote %d seeds to %s" % (len(files), target))


if __name__ == "__main__":
    main()
