// The gRPC server session against a real HTTP/2 client (an nghttp2 client
// session), bytes passed in memory: calls, metadata, statuses, limits and
// the close paths.
#include <nghttp2/nghttp2.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "cw_grpc.h"

// --- The service under test ------------------------------------------------------

typedef struct svc_s {
  int started, messages, half_closes, closes;
  cw_status_code_t refuse;  // on_start's answer when not OK
  char md[64];
  size_t md_len;
  bool echo, finish_on_half_close;
  bool echo_lenient;       // echoes, counting refused sends instead of failing
  int send_failures;
  char first_failure[256];
  int stream_left;  // > 0: half-close starts a response of this many messages
  int writables;
  size_t most_queued;
  bool hold;  // holds the call's flow-control credit
  cw_grpc_call_t* last;
  int big_left;    // > 0: half-close starts this many messages of big_len
  int big_sent;    // message k is big_len bytes of (uint8_t)k, encoded in place
  size_t big_len;
} svc_t;

static cw_status_t svc_start(void* user, cw_grpc_call_t* call) {
  svc_t* s = user;
  s->started++;
  s->last = call;
  if (s->hold) cw_grpc_call_hold_flow(call);
  const uint8_t* v;
  size_t n;
  if (cw_grpc_call_metadata(call, "x-trace-bin", &v, &n) && n < sizeof(s->md)) {
    memcpy(s->md, v, n);
    s->md_len = n;
  }
  if (s->refuse) return cw_make_status(s->refuse, "refused: 100%% \xc3\xa9");
  return cw_ok_status();
}

static void svc_message(void* user, cw_grpc_call_t* call, const uint8_t* d, size_t n) {
  svc_t* s = user;
  s->messages++;
  if (s->echo) assert_null(cw_grpc_call_send(call, d, n));
  if (s->echo_lenient) {
    cw_status_t st = cw_grpc_call_send(call, d, n);
    if (st && !s->send_failures++) {
      snprintf(s->first_failure, sizeof(s->first_failure), "%s", cw_status_message(st));
    }
    cw_status_free(st);
  }
}

// Queues big messages while fewer than four wait, encoded in place, then
// asks to be called again below one (as the proxy's host-buffer lookups).
static void svc_stream_big(svc_t* s, cw_grpc_call_t* call) {
  cw_status_t none = cw_grpc_call_commit(call);  // nothing reserved: refused
  assert_int_equal(cw_status_code(none), CW_FAILED_PRECONDITION);
  cw_status_free(none);
  while (s->big_left > 0 && cw_grpc_call_queued(call) < 4 * s->big_len) {
    uint8_t* p;
    assert_null(cw_grpc_call_reserve(call, s->big_len, &p));
    memset(p, (uint8_t)s->big_sent, s->big_len);
    assert_null(cw_grpc_call_commit(call));
    s->big_sent++;
    s->big_left--;
  }
  if (s->big_left > 0) {
    cw_grpc_call_when_writable(call, s->big_len);
  } else {
    cw_grpc_call_finish(call, cw_ok_status());
  }
}

// Queues 50-byte messages while fewer than 300 bytes wait, then asks to be
// called again below 150; finishes after the last.
static void svc_stream(svc_t* s, cw_grpc_call_t* call) {
  if (s->big_len) {
    svc_stream_big(s, call);
    return;
  }
  uint8_t msg[50];
  while (s->stream_left > 0 && cw_grpc_call_queued(call) < 300) {
    memset(msg, 'a' + s->stream_left % 26, sizeof(msg));
    assert_null(cw_grpc_call_send(call, msg, sizeof(msg)));
    s->stream_left--;
    if (cw_grpc_call_queued(call) > s->most_queued) s->most_queued = cw_grpc_call_queued(call);
  }
  if (s->stream_left > 0) {
    cw_grpc_call_when_writable(call, 150);
  } else {
    cw_grpc_call_finish(call, cw_ok_status());
  }
}

static void svc_half_close(void* user, cw_grpc_call_t* call) {
  svc_t* s = user;
  s->half_closes++;
  if (s->stream_left || s->big_left) svc_stream(s, call);
  else if (s->finish_on_half_close) cw_grpc_call_finish(call, cw_ok_status());
}

static void svc_close(void* user, cw_grpc_call_t* call) { ((svc_t*)user)->closes++; }

static void svc_writable(void* user, cw_grpc_call_t* call) {
  svc_t* s = user;
  s->writables++;
  svc_stream(s, call);
}

static const cw_grpc_handlers_t svc_handlers = {svc_start, svc_message, svc_half_close, svc_close,
                                                svc_writable};

// --- A client ----------------------------------------------------------------------------

typedef struct cli_s {
  nghttp2_session* h2;
  uint8_t body[4096];
  size_t body_len, body_off;
  bool end_after_body;
  uint8_t got[8192];
  size_t got_len;
  int grpc_status;  // -1 until the trailers come
  char grpc_message[512];
  bool closed;
  uint32_t goaway;  // a GOAWAY's error code + 1 once one came
  size_t check_len;  // nonzero: DATA is checked as messages of this many bytes
  size_t seen;       // of kind (uint8_t)k for message k, not kept in got
  size_t data_frames, largest_frame;
} cli_t;

static ssize_t cli_read(nghttp2_session* h2, int32_t id, uint8_t* buf, size_t len,
                        uint32_t* flags, nghttp2_data_source* src, void* user) {
  cli_t* c = user;
  size_t n = c->body_len - c->body_off < len ? c->body_len - c->body_off : len;
  memcpy(buf, c->body + c->body_off, n);
  c->body_off += n;
  if (c->body_off == c->body_len) {
    if (!c->end_after_body) return n ? (ssize_t)n : NGHTTP2_ERR_DEFERRED;
    *flags |= NGHTTP2_DATA_FLAG_EOF;
  }
  return (ssize_t)n;
}

static int cli_header(nghttp2_session* h2, const nghttp2_frame* f, const uint8_t* name,
                      size_t nlen, const uint8_t* value, size_t vlen, uint8_t flags, void* user) {
  cli_t* c = user;
  if (nlen == 11 && !memcmp(name, "grpc-status", 11)) c->grpc_status = atoi((const char*)value);
  if (nlen == 12 && !memcmp(name, "grpc-message", 12) && vlen < sizeof(c->grpc_message)) {
    memcpy(c->grpc_message, value, vlen);
    c->grpc_message[vlen] = 0;
  }
  return 0;
}

static int cli_data(nghttp2_session* h2, uint8_t flags, int32_t id, const uint8_t* d, size_t n,
                    void* user) {
  cli_t* c = user;
  if (c->check_len) {
    for (size_t i = 0; i < n; i++, c->seen++) {
      size_t k = c->seen / (5 + c->check_len), at = c->seen % (5 + c->check_len);
      uint8_t want = at == 0 ? 0 : at < 5 ? (uint8_t)(c->check_len >> (8 * (4 - at))) : (uint8_t)k;
      if (d[i] != want) fail_msg("byte %zu of the response is %u, not %u", c->seen, d[i], want);
    }
    return 0;
  }
  assert_true(c->got_len + n <= sizeof(c->got));
  memcpy(c->got + c->got_len, d, n);
  c->got_len += n;
  return 0;
}

static int cli_frame(nghttp2_session* h2, const nghttp2_frame* f, void* user) {
  cli_t* c = user;
  if (f->hd.type == NGHTTP2_GOAWAY) c->goaway = f->goaway.error_code + 1;
  if (f->hd.type == NGHTTP2_DATA) {
    c->data_frames++;
    if (f->hd.length > c->largest_frame) c->largest_frame = f->hd.length;
  }
  return 0;
}

static int cli_close(nghttp2_session* h2, int32_t id, uint32_t err, void* user) {
  ((cli_t*)user)->closed = true;
  return 0;
}

static void cli_init(cli_t* c) {
  memset(c, 0, sizeof(*c));
  c->grpc_status = -1;
  c->end_after_body = true;
  nghttp2_session_callbacks* cb;
  assert_int_equal(nghttp2_session_callbacks_new(&cb), 0);
  nghttp2_session_callbacks_set_on_header_callback(cb, cli_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, cli_data);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, cli_close);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, cli_frame);
  assert_int_equal(nghttp2_session_client_new(&c->h2, cb, c), 0);
  nghttp2_session_callbacks_del(cb);
  assert_int_equal(nghttp2_submit_settings(c->h2, NGHTTP2_FLAG_NONE, NULL, 0), 0);
}

// A message with gRPC's prefix in the request body.
static void cli_add_message(cli_t* c, uint8_t flag, const char* text, uint32_t declared) {
  size_t n = strlen(text);
  uint8_t* p = c->body + c->body_len;
  p[0] = flag;
  p[1] = (uint8_t)(declared >> 24);
  p[2] = (uint8_t)(declared >> 16);
  p[3] = (uint8_t)(declared >> 8);
  p[4] = (uint8_t)declared;
  memcpy(p + 5, text, n);
  c->body_len += 5 + n;
}

#define NV(n, v) {(uint8_t*)(n), (uint8_t*)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE}

// A request; with content_length, a content-length header saying so.
static int32_t cli_call_with(cli_t* c, const char* content_type, const char* content_length) {
  nghttp2_nv nv[] = {NV(":method", "POST"), NV(":scheme", "http"), NV(":authority", "t"),
                     NV(":path", "/t.S/M"), NV("te", "trailers"),
                     {(uint8_t*)"content-type", (uint8_t*)content_type, 12, strlen(content_type),
                      NGHTTP2_NV_FLAG_NONE},
                     NV("x-trace-bin", "aGVsbG8"),  // "hello", unpadded
                     {(uint8_t*)"content-length", (uint8_t*)content_length, 14,
                      content_length ? strlen(content_length) : 0, NGHTTP2_NV_FLAG_NONE}};
  nghttp2_data_provider p = {.read_callback = cli_read};
  size_t n = sizeof(nv) / sizeof(nv[0]) - (content_length ? 0 : 1);
  int32_t id = nghttp2_submit_request(c->h2, NULL, nv, n, &p, c);
  assert_true(id > 0);
  return id;
}

static int32_t cli_call(cli_t* c, const char* content_type) {
  return cli_call_with(c, content_type, NULL);
}

// Passes bytes both ways until neither side has any.
static void pump(cli_t* c, cw_grpc_session_t* s) {
  for (int round = 0; round < 100; round++) {
    bool moved = false;
    const uint8_t* d;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(c->h2, &d)) > 0) {
      moved = true;
      cw_status_t st = cw_grpc_session_feed(s, d, (size_t)n);
      if (st) {
        cw_status_free(st);
        return;
      }
    }
    size_t len;
    uint8_t* out;
    for (cw_grpc_session_take_output(s, &out, &len); len;
         cw_grpc_session_take_output(s, &out, &len)) {
      moved = true;
      assert_true(nghttp2_session_mem_recv(c->h2, out, len) >= 0);
      free(out);
    }
    if (!moved) return;
  }
  fail_msg("the sessions kept talking");
}

typedef struct fix_s {
  svc_t svc;
  cli_t cli;
  cw_grpc_options_t o;
  cw_grpc_session_t* s;
} fix_t;

static int setup(void** state) {
  fix_t* f = calloc(1, sizeof(*f));
  cw_grpc_options_default(&f->o);
  f->o.max_message = 64;
  f->svc.echo = f->svc.finish_on_half_close = true;
  assert_null(cw_grpc_session_create(&svc_handlers, &f->svc, &f->o, &f->s));
  cli_init(&f->cli);
  *state = f;
  return 0;
}

// A new server session with the fixture's options as the test changed them.
static void restart(fix_t* f) {
  cw_grpc_session_release(f->s);
  assert_null(cw_grpc_session_create(&svc_handlers, &f->svc, &f->o, &f->s));
}

static int teardown(void** state) {
  fix_t* f = *state;
  cw_grpc_session_release(f->s);
  nghttp2_session_del(f->cli.h2);
  free(f);
  return 0;
}

// Two messages echoed in order, then OK trailers; metadata decoded.
static void test_unary_echo(void** state) {
  fix_t* f = *state;
  cli_add_message(&f->cli, 0, "ab", 2);
  cli_add_message(&f->cli, 0, "", 0);
  cli_call(&f->cli, "application/grpc");
  pump(&f->cli, f->s);
  assert_int_equal(f->svc.started, 1);
  assert_int_equal(f->svc.messages, 2);
  assert_int_equal(f->svc.half_closes, 1);
  assert_int_equal(f->svc.closes, 1);
  assert_int_equal(f->svc.md_len, 5);
  assert_memory_equal(f->svc.md, "hello", 5);
  assert_int_equal(f->cli.got_len, 7 + 5);
  assert_memory_equal(f->cli.got, "\0\0\0\0\2ab\0\0\0\0\0", 12);
  assert_int_equal(f->cli.grpc_status, 0);
  assert_true(f->cli.closed);
  assert_int_equal(cw_grpc_session_calls(f->s), 0);
}

// A response larger than what may wait goes out a window at a time: the
// service queues more only when asked, never more than its bound.
static void test_streamed_response(void** state) {
  fix_t* f = *state;
  f->svc.stream_left = 40;
  cli_call(&f->cli, "application/grpc");
  pump(&f->cli, f->s);
  assert_int_equal(f->cli.grpc_status, 0);
  assert_int_equal(f->cli.got_len, 40 * 55);
  for (int i = 0; i < 40; i++) {
    const uint8_t* m = f->cli.got + i * 55;
    assert_int_equal(m[4], 50);
    assert_int_equal(m[5], 'a' + (40 - i) % 26);  // in order
  }
  assert_true(f->svc.writables >= 6);  // 40 messages, at most 6 queued at a time
  assert_true(f->svc.most_queued < 300 + 55);
}

// A large streamed response, encoded in place, to a client that takes
// DATA frames of up to `max_frame`: every byte arrives in order across the
// queue's compactions. Returns how many outputs the transport was handed,
// and the largest.
static void stream_large(fix_t* f, uint32_t max_frame, size_t* outputs, size_t* largest) {
  f->o.max_message = 1u << 20;
  f->svc.big_len = 300000;  // not a multiple of any frame or batch size
  f->svc.big_left = 40;
  restart(f);
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_MAX_FRAME_SIZE, max_frame},
                                 {NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 64u << 20}};
  assert_int_equal(nghttp2_submit_settings(f->cli.h2, NGHTTP2_FLAG_NONE, iv, 2), 0);
  assert_int_equal(nghttp2_session_set_local_window_size(f->cli.h2, NGHTTP2_FLAG_NONE, 0,
                                                         64 << 20), 0);
  f->cli.check_len = f->svc.big_len;
  cli_call(&f->cli, "application/grpc");
  *outputs = *largest = 0;
  for (int round = 0; round < 1000 && f->cli.grpc_status < 0; round++) {
    const uint8_t* d;
    ssize_t n;
    while ((n = nghttp2_session_mem_send(f->cli.h2, &d)) > 0) {
      assert_null(cw_grpc_session_feed(f->s, d, (size_t)n));
    }
    size_t len;
    uint8_t* out;
    for (cw_grpc_session_take_output(f->s, &out, &len); len;
         cw_grpc_session_take_output(f->s, &out, &len)) {
      ++*outputs;
      if (len > *largest) *largest = len;
      assert_true(nghttp2_session_mem_recv(f->cli.h2, out, len) >= 0);
      free(out);
    }
  }
  assert_int_equal(f->cli.grpc_status, 0);
  assert_int_equal(f->cli.seen, 40 * (5 + f->svc.big_len));
  assert_true(f->svc.writables >= 9);  // 40 messages, at most 4 queued at a time
}

// DATA frames as large as the client allows (here 4 MiB) up to 256 KiB, not
// nghttp2's 16 KiB; outputs at most the session's batch (1 MiB).
static void test_large_response_frames(void** state) {
  fix_t* f = *state;
  size_t outputs, largest;
  stream_large(f, 4u << 20, &outputs, &largest);
  assert_true(f->cli.largest_frame > 16384);
  assert_int_equal(f->cli.largest_frame, 256u << 10);
  assert_true(largest <= (1u << 20));
}

// With HTTP/2's default 16 KiB frames the transport is handed many frames
// at a time, never more than a batch.
static void test_small_frames_gathered(void** state) {
  fix_t* f = *state;
  size_t outputs, largest;
  stream_large(f, 16384, &outputs, &largest);
  assert_int_equal(f->cli.largest_frame, 16384);
  assert_true(outputs * 20 < f->cli.data_frames);
  assert_true(largest > 16 * (16384 + 9));
  assert_true(largest <= (1u << 20));
}

// The client resets a stream whose DATA frame waits for room in a full
// output batch: the frame is dropped with the stream, and the call ends.
static void test_reset_with_frames_waiting(void** state) {
  fix_t* f = *state;
  f->o.max_message = 1u << 20;
  f->o.out_batch = 4096;
  f->svc.big_len = 300000;
  f->svc.big_left = 4;
  restart(f);
  f->cli.check_len = f->svc.big_len;
  int32_t id = cli_call(&f->cli, "application/grpc");
  const uint8_t* d;
  ssize_t n;
  size_t len = 0;
  while ((n = nghttp2_session_mem_send(f->cli.h2, &d)) > 0) {
    assert_null(cw_grpc_session_feed(f->s, d, (size_t)n));
  }
  // Outputs until the response's first DATA frame has come, then one more.
  for (int i = 0; i < 8 && f->cli.data_frames == 0; i++) {
    uint8_t* out;
    cw_grpc_session_take_output(f->s, &out, &len);
    assert_true(len > 0 && len <= 16384 + 9);  // a batch, or one default-size frame
    assert_true(nghttp2_session_mem_recv(f->cli.h2, out, len) >= 0);
    free(out);
  }
  assert_true(f->cli.data_frames > 0);
  assert_int_equal(nghttp2_submit_rst_stream(f->cli.h2, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL),
                   0);
  pump(&f->cli, f->s);
  assert_int_equal(f->svc.closes, 1);
  assert_int_equal(cw_grpc_session_calls(f->s), 0);
  assert_true(f->cli.seen < 4 * (5 + f->svc.big_len));
}

// A call that holds its credit: the client stops at one window of
// unhandled bytes and goes on as the service gives credit back.
static void test_held_flow(void** state) {
  fix_t* f = *state;
  f->o.window = 1024;
  f->svc.hold = true;
  f->svc.echo = false;
  restart(f);
  pump(&f->cli, f->s);  // SETTINGS both ways before any data
  char text[60];
  memset(text, 'q', 59);
  text[59] = 0;
  for (int i = 0; i < 64; i++) cli_add_message(&f->cli, 0, text, 59);  // 64 x 64 bytes
  int32_t id = cli_call(&f->cli, "application/grpc");
  pump(&f->cli, f->s);
  assert_int_equal(f->svc.messages, 1024 / 64);  // one window, then the client waits
  assert_int_equal(nghttp2_session_get_stream_remote_window_size(f->cli.h2, id), 0);
  assert_int_equal(f->svc.half_closes, 0);
  for (int round = 0; round < 64 && !f->svc.half_closes; round++) {
    cw_grpc_call_consume(f->svc.last, 64 * 4);  // four handled
    pump(&f->cli, f->s);
  }
  assert_int_equal(f->svc.messages, 64);
  assert_int_equal(f->svc.half_closes, 1);
  assert_int_equal(f->cli.grpc_status, 0);
}

// Streams opened and reset at once, past the burst: the session ends with
// ENHANCE_YOUR_CALM and says so in a GOAWAY; within it, nothing happens.
static void test_rapid_reset(void** state) {
  fix_t* f = *state;
  f->o.reset_burst = 50;
  f->o.resets_per_second = 0;  // no refill: the same on any machine
  f->svc.finish_on_half_close = false;
  f->cli.end_after_body = false;
  restart(f);
  int resets = 0;
  for (int round = 0; round < 10 && !f->cli.goaway; round++) {
    int32_t ids[10];
    for (int i = 0; i < 10; i++) ids[i] = cli_call(&f->cli, "application/grpc");
    pump(&f->cli, f->s);
    for (int i = 0; i < 10; i++) {
      assert_int_equal(nghttp2_submit_rst_stream(f->cli.h2, NGHTTP2_FLAG_NONE, ids[i],
                                                 NGHTTP2_CANCEL), 0);
    }
    pump(&f->cli, f->s);
    resets += 10;
    if (resets <= 50) assert_int_equal(f->cli.goaway, 0);
  }
  assert_int_equal(f->cli.goaway, NGHTTP2_ENHANCE_YOUR_CALM + 1);
  assert_int_equal(resets, 60);
}

// Credit of a handled request that nghttp2 keeps back (less than half a
// window) never leaves a held stream too small for a whole message.
static void test_held_flow_largest_message(void** state) {
  fix_t* f = *state;
  f->o.window = 1;  // raised to what max_message (64) needs
  f->svc.hold = true;
  f->svc.echo = false;
  restart(f);
  pump(&f->cli, f->s);
  f->cli.end_after_body = false;
  cli_add_message(&f->cli, 0, "0123456789", 10);
  int32_t id = cli_call(&f->cli, "application/grpc");
  pump(&f->cli, f->s);
  assert_int_equal(f->svc.messages, 1);
  cw_grpc_call_consume(f->svc.last, 15);  // handled
  char big[65];
  memset(big, 'b', 64);
  big[64] = 0;
  cli_add_message(&f->cli, 0, big, 64);
  f->cli.end_after_body = true;
  assert_int_equal(nghttp2_session_resume_data(f->cli.h2, id), 0);
  pump(&f->cli, f->s);
  assert_int_equal(f->svc.messages, 2);
  assert_int_equal(f->svc.half_closes, 1);
}

// Resets nghttp2 makes for the client's fault (a body longer than its
// content-length) spend the same tokens as the client's own.
static void test_rapid_reset_by_protocol_error(void** state) {
  fix_t* f = *state;
  f->o.reset_burst = 20;
  f->o.resets_per_second = 0;
  restart(f);
  cli_add_message(&f->cli, 0, "ab", 2);  // 7 bytes of body
  int calls = 0;
  for (; calls < 60 && !f->cli.goaway; calls++) {
    f->cli.body_off = 0;
    cli_call_with(&f->cli, "application/grpc", "1");
    pump(&f->cli, f->s);
  }
  assert_int_equal(f->cli.goaway, NGHTTP2_ENHANCE_YOUR_CALM + 1);
  assert_true(calls > 20 && calls < 60);
}

// A refusal in on_start: its code, and its message percent-encoded.
static void test_refused(void** state) {
  fix_t* f = *state;
  f->svc.refuse = CW_PERMISSION_DENIED;
  cli_call(&f->cli, "application/grpc+proto");
  pump(&f->cli, f->s);
  assert_int_equal(f->cli.grpc_status, CW_PERMISSION_DENIED);
  assert_string_equal(f->cli.grpc_message, "refused: 100%25 %C3%A9");
  assert_int_equal(f->svc.closes, 0);  // never started
}

static void test_not_grpc(void** state) {
  fix_t* f = *state;
  cli_call(&f->cli, "text/plain");
  pump(&f->cli, f->s);
  assert_int_equal(f->cli.grpc_status, CW_INVALID_ARGUMENT);
  assert_int_equal(f->svc.started, 0);
}

// A declared length over the limit ends the call before any byte is kept.
static void test_oversize(void** state) {
  fix_t* f = *state;
  cli_add_message(&f->cli, 0, "x", 1u << 30);
  cli_call(&f->cli, "application/grpc");
  pump(&f->cli, f->s);
  assert_int_equal(f->cli.grpc_status, CW_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(f->cli.grpc_message, "over the limit 64"));
  assert_int_equal(f->svc.messages, 0);
}

// A peer that sends requests but takes no responses (its window is 0):
// responses wait up to max_queued bytes; the one past it ends the call
// RESOURCE_EXHAUSTED (the service's send refused) instead of the queue
// growing, and the peer gets that status once it reads again.
static void test_responses_past_max_queued(void** state) {
  fix_t* f = *state;
  f->o.max_queued = 200;
  f->svc.echo = false;
  f->svc.echo_lenient = true;
  restart(f);
  nghttp2_settings_entry closed[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 0}};
  assert_int_equal(nghttp2_submit_settings(f->cli.h2, NGHTTP2_FLAG_NONE, closed, 1), 0);
  static const char msg[] = "0123456789012345678901234567890123456789";  // 40 bytes
  for (int i = 0; i < 8; i++) cli_add_message(&f->cli, 0, msg, 40);
  cli_call(&f->cli, "application/grpc");
  pump(&f->cli, f->s);
  // 4 echoes of 45 bytes fit in 200; the fifth ends the call, and the
  // messages after it are not delivered.
  assert_int_equal(f->svc.messages, 5);
  assert_int_equal(f->svc.send_failures, 1);
  assert_non_null(strstr(f->svc.first_failure, "225 response bytes wait for the peer (limit 200)"));
  assert_int_equal(f->cli.got_len, 0);
  nghttp2_settings_entry open[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, 65535}};
  assert_int_equal(nghttp2_submit_settings(f->cli.h2, NGHTTP2_FLAG_NONE, open, 1), 0);
  pump(&f->cli, f->s);
  assert_int_equal(f->cli.got_len, 4 * 45);
  assert_int_equal(f->cli.grpc_status, CW_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(f->cli.grpc_message, "wait for the peer"));
  assert_true(f->cli.closed);
}

static void test_compressed(void** state) {
  fix_t* f = *state;
  cli_add_message(&f->cli, 1, "zz", 2);
  cli_call(&f->cli, "application/grpc");
  pump(&f->cli, f->s);
  assert_int_equal(f->cli.grpc_status, CW_UNIMPLEMENTED);
  assert_non_null(strstr(f->cli.grpc_message, "compressed"));
}

// The stream ends inside a message.
static void test_truncated(void** state) {
  fix_t* f = *state;
  cli_add_message(&f->cli, 0, "abc", 10);
  cli_call(&f->cli, "application/grpc");
  pump(&f->cli, f->s);
  assert_int_equal(f->cli.grpc_status, CW_INVALID_ARGUMENT);
  assert_int_equal(f->svc.messages, 0);
}

// A client that resets its stream: the call closes, the session lives on.
static void test_reset_and_release(void** state) {
  fix_t* f = *state;
  f->cli.end_after_body = false;
  f->svc.finish_on_half_close = false;
  int32_t id = cli_call(&f->cli, "application/grpc");
  int32_t id2 = cli_call(&f->cli, "application/grpc");
  pump(&f->cli, f->s);
  assert_int_equal(f->svc.started, 2);
  assert_int_equal(cw_grpc_session_calls(f->s), 2);
  assert_int_equal(nghttp2_submit_rst_stream(f->cli.h2, NGHTTP2_FLAG_NONE, id, NGHTTP2_CANCEL),
                   0);
  pump(&f->cli, f->s);
  assert_int_equal(f->svc.closes, 1);
  assert_true(cw_grpc_session_alive(f->s));
  (void)id2;
  // The session goes with a call open: that call closes too.
  cw_grpc_session_release(f->s);
  assert_int_equal(f->svc.closes, 2);
  assert_null(cw_grpc_session_create(&svc_handlers, &f->svc, &f->o, &f->s));
}

// Garbage instead of the HTTP/2 preface breaks the session.
static void test_bad_preface(void** state) {
  fix_t* f = *state;
  const char junk[] = "GET / HTTP/1.1\r\nHost: x\r\n\r\n";
  cw_status_t st = cw_grpc_session_feed(f->s, (const uint8_t*)junk, sizeof(junk) - 1);
  assert_non_null(st);
  cw_status_free(st);
}

static void collect(void* user, const uint8_t* d, size_t n) {
  size_t* total = user;
  *total += n + 1;
}

// The deframer across arbitrary splits, and its bound.
static void test_deframer(void** state) {
  const uint8_t bytes[] = {0, 0, 0, 0, 3, 'a', 'b', 'c', 0, 0, 0, 0, 0, 0, 0, 0, 0, 1, 'z'};
  for (size_t split = 0; split <= sizeof(bytes); split++) {
    cw_grpc_deframer_t d;
    cw_grpc_deframer_initialize(&d, 8);
    size_t total = 0;
    assert_null(cw_grpc_deframer_feed(&d, bytes, split, collect, &total));
    assert_null(cw_grpc_deframer_feed(&d, bytes + split, sizeof(bytes) - split, collect, &total));
    assert_int_equal(total, 4 + 1 + 2);
    cw_grpc_deframer_deinitialize(&d);
  }
  cw_grpc_deframer_t d;
  cw_grpc_deframer_initialize(&d, 2);
  size_t total = 0;
  cw_status_t st = cw_grpc_deframer_feed(&d, bytes, sizeof(bytes), collect, &total);
  assert_int_equal(cw_status_code(st), CW_RESOURCE_EXHAUSTED);
  cw_status_free(st);
  assert_null(d.buf);  // nothing allocated for the refused message
  cw_grpc_deframer_deinitialize(&d);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test_setup_teardown(test_unary_echo, setup, teardown),
      cmocka_unit_test_setup_teardown(test_streamed_response, setup, teardown),
      cmocka_unit_test_setup_teardown(test_large_response_frames, setup, teardown),
      cmocka_unit_test_setup_teardown(test_small_frames_gathered, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reset_with_frames_waiting, setup, teardown),
      cmocka_unit_test_setup_teardown(test_held_flow, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rapid_reset, setup, teardown),
      cmocka_unit_test_setup_teardown(test_held_flow_largest_message, setup, teardown),
      cmocka_unit_test_setup_teardown(test_rapid_reset_by_protocol_error, setup, teardown),
      cmocka_unit_test_setup_teardown(test_refused, setup, teardown),
      cmocka_unit_test_setup_teardown(test_not_grpc, setup, teardown),
      cmocka_unit_test_setup_teardown(test_oversize, setup, teardown),
      cmocka_unit_test_setup_teardown(test_responses_past_max_queued, setup, teardown),
      cmocka_unit_test_setup_teardown(test_compressed, setup, teardown),
      cmocka_unit_test_setup_teardown(test_truncated, setup, teardown),
      cmocka_unit_test_setup_teardown(test_reset_and_release, setup, teardown),
      cmocka_unit_test_setup_teardown(test_bad_preface, setup, teardown),
      cmocka_unit_test(test_deframer),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
