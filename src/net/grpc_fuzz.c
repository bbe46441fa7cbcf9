// libFuzzer: a peer's bytes into a gRPC server session (HTTP/2 by nghttp2,
// gRPC framing, metadata, limits by cw_grpc.c), whose service echoes each
// message and ends each call when the client half-closes; methods "/h..."
// hold their flow-control credit (returned per message), methods "/r..."
// echo each message encoded in place (odd-sized ones reserved and never
// committed), methods "/w..."
// answer a half-close with a response sent as the call has room; and the same
// bytes through the message deframer alone. Inputs that start with the
// HTTP/2 client preface reach the frame handling.
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "cw_grpc.h"

static cw_status_t fz_start(void* user, cw_grpc_call_t* call) {
  const uint8_t* v;
  size_t n;
  (void)cw_grpc_call_metadata(call, "x-bin", &v, &n);
  char kind = cw_grpc_call_method(call)[1];
  if (kind == 'h') cw_grpc_call_hold_flow(call);
  return kind == 'x' ? cw_make_status(CW_NOT_FOUND, "no such method") : cw_ok_status();
}

static void fz_message(void* user, cw_grpc_call_t* call, const uint8_t* d, size_t n) {
  if (cw_grpc_call_method(call)[1] == 'r') {
    // Encoded in place; an odd-sized one is left reserved, never committed.
    uint8_t* p;
    cw_status_t st = cw_grpc_call_reserve(call, n, &p);
    if (!st && n) memcpy(p, d, n);
    if (!st && n % 2 == 0) st = cw_grpc_call_commit(call);
    cw_status_free(st);
  } else {
    cw_status_free(cw_grpc_call_send(call, d, n));
  }
  cw_grpc_call_consume(call, n + 5);
}

// Up to 40 messages of 100 bytes, at most 300 bytes queued at a time.
static void fz_stream(cw_grpc_call_t* call) {
  static const uint8_t msg[100];
  uintptr_t sent = (uintptr_t)cw_grpc_call_user(call);
  while (sent < 40 && cw_grpc_call_queued(call) < 300) {
    cw_status_t st = cw_grpc_call_send(call, msg, sizeof(msg));
    sent++;
    if (st) {
      cw_status_free(st);
      return;
    }
  }
  cw_grpc_call_set_user(call, (void*)sent);
  if (sent < 40) cw_grpc_call_when_writable(call, 150);
  else cw_grpc_call_finish(call, cw_ok_status());
}

static void fz_half_close(void* user, cw_grpc_call_t* call) {
  if (cw_grpc_call_method(call)[1] == 'w') {
    fz_stream(call);
    return;
  }
  cw_grpc_call_finish(call, cw_make_status(CW_ABORTED, "done \xff%%"));
}

static void fz_writable(void* user, cw_grpc_call_t* call) {
  if (!cw_grpc_call_finished(call)) fz_stream(call);
}

static const cw_grpc_handlers_t fz_handlers = {fz_start, fz_message, fz_half_close, NULL,
                                               fz_writable};

static void fz_ignore(void* user, const uint8_t* d, size_t n) {}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  cw_grpc_options_t o;
  cw_grpc_options_default(&o);
  o.max_message = 4096;
  o.max_queued = 16384;
  o.max_streams = 8;
  o.out_batch = 64;  // frames wait for room (WOULDBLOCK), DATA ones NO_COPY
  cw_grpc_session_t* s = NULL;
  if (cw_grpc_session_create(&fz_handlers, NULL, &o, &s)) abort();
  // Fed in two parts, so that state carries across reads.
  size_t half = size / 2;
  cw_status_t st = cw_grpc_session_feed(s, data, half);
  uint8_t* out;
  size_t n;
  // One batch only: the rest (a DATA frame nghttp2 holds, maybe) waits
  // across the second part, which may reset its stream.
  cw_grpc_session_take_output(s, &out, &n);
  free(out);
  if (!st) st = cw_grpc_session_feed(s, data + half, size - half);
  do {
    cw_grpc_session_take_output(s, &out, &n);
    free(out);
  } while (n);
  cw_status_free(st);
  cw_grpc_session_release(s);

  cw_grpc_deframer_t d;
  cw_grpc_deframer_initialize(&d, 1024);
  cw_status_free(cw_grpc_deframer_feed(&d, data, size, fz_ignore, NULL));
  cw_grpc_deframer_deinitialize(&d);
  return 0;
}
