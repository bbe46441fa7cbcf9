// Unit tests of the reader thread (cw_client_reader.c): replies packed and
// split across reads, reply bulk into sinks, error replies, a peer that
// closes or breaks the protocol; a waiting thread taking replies itself,
// the reader parked beside it; against the fake peer.
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cw_client_fake_peer.h"
#include "cw_client_internal.h"

// Appends one reply frame to buf[*len..] (caller-sized).
static void pack_frame(uint8_t* buf, size_t* len, uint16_t type, uint64_t id,
                       const ProtobufCMessage* msg, const void* bulk, uint64_t bulk_len) {
  size_t plen = protobuf_c_message_get_packed_size(msg);
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC, .version = 1, .type = type,
                         .flags = CW_FRAME_REPLY, .payload_len = (uint32_t)plen,
                         .request_id = id, .bulk_len = bulk_len};
  cw_frame_header_encode(&h, buf + *len);
  *len += CW_FRAME_HEADER_SIZE;
  protobuf_c_message_pack(msg, buf + *len);
  *len += plen;
  if (bulk_len) memcpy(buf + *len, bulk, bulk_len);
  *len += bulk_len;
}

// Reads f->count requests (PINGs and DOWNLOADs), then answers them all as
// one byte stream written in pieces of odd sizes: many frames packed in one
// piece, headers, payloads and bulk split across pieces.
static void script_packed(fake_t* f) {
  frame_t fr[64];
  int n = f->count;
  size_t cap = (size_t)n * (256 + f->pattern_len), len = 0;
  uint8_t* out = malloc(cap);
  for (int i = 0; i < n; ++i) {
    FCHECK(f, fake_read(f, &fr[i]));
    if (fr[i].h.type == CW_MSG_DOWNLOAD) {
      Causeway__V1__ArrayInfo info = CAUSEWAY__V1__ARRAY_INFO__INIT;
      info.buffer_id = ((Causeway__V1__DownloadRequest*)fr[i].msg)->buffer_id;
      info.size = f->pattern_len;
      pack_frame(out, &len, CW_MSG_DOWNLOAD, fr[i].h.request_id, &info.base, f->pattern,
                 f->pattern_len);
    } else {
      pack_frame(out, &len, fr[i].h.type, fr[i].h.request_id, fr[i].msg, NULL, 0);
    }
  }
  static const size_t pieces[] = {3, 1, 40, 7, 900, 13, 70000, 2, 5000, 31};
  size_t off = 0;
  for (size_t k = 0; off < len; ++k) {
    size_t piece = pieces[k % (sizeof(pieces) / sizeof(pieces[0]))];
    if (k == 0) piece = len / 3;  // the first piece holds many whole frames
    if (piece > len - off) piece = len - off;
    FCHECK(f, write_all(f->fd, out + off, piece));
    off += piece;
    usleep(200);  // let the client's recv see each piece alone
  }
  free(out);
  for (int i = 0; i < n; ++i) frame_free(&fr[i]);
  script_echo(f);
}

// Replies packed many to a read and split across reads (the reader's
// buffered reads, cw_rbuf.h) all reach their requests intact, bulk included.
static void test_packed_and_split_replies(void** state) {
  const size_t bulk = 100 * 1000;  // larger than the read buffer: goes straight to the sink
  uint8_t* pattern = make_pattern(bulk);
  enum { kN = 48 };
  fake_t f = {.count = kN, .pattern = pattern, .pattern_len = bulk};
  fake_start(&f, script_packed);
  cw_client_t* c = connect_ok(&f);
  uint64_t ids[kN];
  char data[kN][16];
  uint8_t* sinks[kN] = {0};
  for (int i = 0; i < kN; ++i) {
    if (i % 16 == 5) {
      Causeway__V1__DownloadRequest req = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
      req.buffer_id = (uint64_t)i;
      sinks[i] = calloc(1, bulk);
      cw_client_sink_t sink = {.data = sinks[i], .capacity = bulk};
      assert_ok(cw_client_send(c, CW_MSG_DOWNLOAD, &req.base, NULL, 0, &sink, NULL, NULL,
                               &ids[i]));
    } else {
      snprintf(data[i], sizeof(data[i]), "ping-%d", i);
      assert_ok(send_ping(c, data[i], NULL, NULL, &ids[i]));
    }
  }
  for (int i = 0; i < kN; ++i) {
    ProtobufCMessage* reply = NULL;
    uint64_t bulk_len = 0;
    assert_ok(cw_client_wait(c, ids[i], &reply, &bulk_len));
    if (sinks[i]) {
      assert_int_equal(bulk_len, bulk);
      assert_int_equal(((Causeway__V1__ArrayInfo*)reply)->buffer_id, (uint64_t)i);
      assert_memory_equal(sinks[i], pattern, bulk);
      free(sinks[i]);
    } else {
      const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)reply;
      assert_int_equal(p->data.len, strlen(data[i]));
      assert_memory_equal(p->data.data, data[i], strlen(data[i]));
    }
    protobuf_c_message_free_unpacked(reply, NULL);
  }
  assert_ok(cw_client_ping(c));
  cw_client_release(c);
  fake_join(&f);
  free(pattern);
}

static void test_bulk_sink(void** state) {
  const size_t n = (1u << 20) + 3;  // odd size, several socket buffers
  uint8_t* pattern = make_pattern(n);
  fake_t f = {.pattern = pattern, .pattern_len = n};
  fake_start(&f, script_echo);
  cw_client_t* c = connect_ok(&f);

  // Download helper: exact capacity.
  uint8_t* out = calloc(1, n);
  size_t got = 0;
  Causeway__V1__ArrayInfo* info = NULL;
  assert_ok(cw_client_download(c, 42, out, n, &got, &info));
  assert_int_equal(got, n);
  assert_int_equal(info->buffer_id, 42);
  assert_memory_equal(out, pattern, n);
  protobuf_c_message_free_unpacked(&info->base, NULL);

  // Raw send with a larger sink.
  uint8_t* big = calloc(1, n + 100);
  Causeway__V1__DownloadRequest req = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  req.buffer_id = 43;
  cw_client_sink_t sink = {.data = big, .capacity = n + 100};
  uint64_t bulk_len = 0;
  ProtobufCMessage* reply = NULL;
  assert_ok(cw_client_call(c, CW_MSG_DOWNLOAD, &req.base, NULL, 0, &sink, &reply, &bulk_len));
  assert_int_equal(bulk_len, n);
  assert_memory_equal(big, pattern, n);
  protobuf_c_message_free_unpacked(reply, NULL);

  // Upload from three iovecs; the peer checks the bytes.
  Causeway__V1__UploadRequest up = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  int64_t dims[1] = {(int64_t)n};
  up.buffer_id = 9;
  up.dtype = CAUSEWAY__V1__DTYPE__DTYPE_U8;
  up.n_dims = 1;
  up.dims = dims;
  struct iovec iov[3] = {{(void*)pattern, 10}, {(void*)(pattern + 10), 0},
                         {(void*)(pattern + 10), n - 10}};
  assert_ok(cw_client_call(c, CW_MSG_UPLOAD, &up.base, iov, 3, NULL, NULL, NULL));
  // And through the helper (detached).
  assert_ok(cw_client_upload(c, 10, CAUSEWAY__V1__DTYPE__DTYPE_U8, dims, 1, NULL, 0, pattern, n,
                             NULL, NULL));

  // Serialize: the library allocates the buffer.
  void* ser = NULL;
  size_t ser_len = 0;
  assert_ok(cw_client_serialize(c, 5, &ser, &ser_len));
  assert_int_equal(ser_len, n);
  assert_memory_equal(ser, pattern, n);
  free(ser);
  assert_ok(cw_client_flush(c));

  cw_client_release(c);
  fake_join(&f);
  free(out);
  free(big);
  free(pattern);
}

static void test_oversize_bulk(void** state) {
  uint8_t* pattern = make_pattern(100);
  fake_t f = {.pattern = pattern, .pattern_len = 100};
  fake_start(&f, script_echo);
  cw_client_t* c = connect_ok(&f);
  uint8_t small[16];
  memset(small, 0xAB, sizeof(small));
  size_t got = 99;
  expect_status(cw_client_download(c, 1, small, sizeof(small), &got, NULL), CW_OUT_OF_RANGE,
                "100");
  assert_int_equal(got, 0);
  // No sink at all: same.
  Causeway__V1__DownloadRequest req = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  expect_status(cw_client_call(c, CW_MSG_DOWNLOAD, &req.base, NULL, 0, NULL, NULL, NULL),
                CW_OUT_OF_RANGE, NULL);
  // The stream stayed in step.
  assert_ok(cw_client_ping(c));
  uint8_t exact[100];
  assert_ok(cw_client_download(c, 1, exact, sizeof(exact), &got, NULL));
  assert_int_equal(got, 100);
  assert_memory_equal(exact, pattern, 100);
  cw_client_release(c);
  fake_join(&f);
  free(pattern);
}

// A sink that must be filled: a DOWNLOAD reply with fewer bytes is an error,
// not an array whose tail was never written (an audit: np.asarray gave zeros
// where a peer sent half); none at all only when the caller allows it (the
// peer wrote the memory itself, a same-host copy).
static cw_status_t download_exact(cw_client_t* c, void* dst, size_t capacity, bool none_ok) {
  Causeway__V1__DownloadRequest req = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  req.buffer_id = 7;
  cw_client_sink_t sink = {.data = dst, .capacity = capacity, .exact = true, .none_ok = none_ok};
  ProtobufCMessage* reply = NULL;
  cw_status_t s = cw_client_call(c, CW_MSG_DOWNLOAD, &req.base, NULL, 0, &sink, &reply, NULL);
  if (reply) protobuf_c_message_free_unpacked(reply, NULL);
  return s;
}

static void test_exact_sink(void** state) {
  uint8_t* pattern = make_pattern(100);
  fake_t f = {.pattern = pattern, .pattern_len = 100};
  fake_start(&f, script_echo);
  cw_client_t* c = connect_ok(&f);
  uint8_t out[150];
  assert_ok(download_exact(c, out, 100, false));
  assert_memory_equal(out, pattern, 100);
  expect_status(download_exact(c, out, 150, true), CW_DATA_LOSS,
                "DOWNLOAD reply carries 100 bulk bytes; 150 were asked for");
  assert_ok(cw_client_ping(c));  // the stream stayed in step
  cw_client_release(c);
  fake_join(&f);
  fake_t none = {0};
  fake_start(&none, script_echo);
  c = connect_ok(&none);
  expect_status(download_exact(c, out, 100, false), CW_DATA_LOSS,
                "DOWNLOAD reply carries 0 bulk bytes; 100 were asked for");
  assert_ok(download_exact(c, out, 100, true));
  cw_client_release(c);
  fake_join(&none);
  free(pattern);
}

// Answers AWAIT and COPY with errors, echoes the rest.
static void script_errors(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) {
    bool ok;
    if (fr.h.type == CW_MSG_AWAIT) {
      ok = fake_error(f, fr.h.type, fr.h.request_id, CW_NOT_FOUND, "buffer 7 not found");
    } else if (fr.h.type == CW_MSG_COPY) {
      char text[64];
      snprintf(text, sizeof(text), "copy %llu failed",
               (unsigned long long)((Causeway__V1__CopyRequest*)fr.msg)->src_id);
      ok = fake_error(f, fr.h.type, fr.h.request_id, CW_INTERNAL, text);
    } else if (fr.h.type == CW_MSG_DELETE) {
      ok = fake_error(f, fr.h.type, fr.h.request_id, 999, "");  // out-of-range code
    } else {
      ok = fake_reply(f, &fr, fr.msg, NULL, 0);
    }
    frame_free(&fr);
    if (!ok) return;
  }
}

static void test_error_reply(void** state) {
  fake_t f = {0};
  fake_start(&f, script_errors);
  cw_client_t* c = connect_ok(&f);
  expect_status(cw_client_await(c, 7), CW_NOT_FOUND, "buffer 7 not found");
  // Callback sees the code and message.
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  assert_ok(cw_client_copy(c, 3, 4, 0, rec_done, &rec));
  // Detached errors are parked for flush, which returns the first.
  assert_ok(cw_client_copy(c, 11, 12, 0, NULL, NULL));
  assert_ok(cw_client_copy(c, 13, 14, 0, NULL, NULL));
  uint64_t del = 5;
  assert_ok(cw_client_delete(c, &del, 1, NULL, NULL));
  expect_status(cw_client_flush(c), CW_INTERNAL, "copy 11 failed");
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, CW_INTERNAL);
  assert_non_null(strstr(rec.message, "copy 3 failed"));
  // Flush drained them; the next flush is clean and the connection open.
  assert_ok(cw_client_flush(c));
  assert_ok(cw_client_ping(c));
  // An unknown code from the peer maps to UNKNOWN.
  assert_ok(cw_client_delete(c, &del, 1, NULL, NULL));
  expect_status(cw_client_flush(c), CW_UNKNOWN, NULL);
  cw_client_release(c);
  fake_join(&f);
}

// Reads f->count frames, then hangs up without answering.
static void script_read_then_close(fake_t* f) {
  for (int i = 0; i < f->count; ++i) {
    frame_t fr;
    FCHECK(f, fake_read(f, &fr));
    frame_free(&fr);
  }
}

// A request sent while the connection dies either fails in cw_client_send
// (its frame was still being written) or completes through its callback,
// never both; tests whose peer acts after the last request accept either.
static void test_peer_closes(void** state) {
  fake_t f = {.count = 5};
  fake_start(&f, script_read_then_close);
  cw_client_t* c = connect_ok(&f);
  rec_t r1 = {.mu = PTHREAD_MUTEX_INITIALIZER}, r2 = {.mu = PTHREAD_MUTEX_INITIALIZER};
  assert_ok(cw_client_copy(c, 1, 2, 0, rec_done, &r1));
  uint64_t ping_id = 0;
  assert_ok(send_ping(c, "x", NULL, NULL, &ping_id));
  assert_ok(cw_client_expect(c, 8, NULL, NULL));
  assert_ok(cw_client_copy(c, 3, 4, 0, rec_done, &r2));
  rec_t rt = {.mu = PTHREAD_MUTEX_INITIALIZER};
  cw_status_t ts = send_ping(c, "trigger", rec_done, &rt, NULL);  // the peer closes after it
  expect_status(cw_client_wait(c, ping_id, NULL, NULL), CW_UNAVAILABLE, f.path);
  expect_status(cw_client_flush(c), CW_UNAVAILABLE, "lost");
  assert_int_equal(r1.calls, 1);
  assert_int_equal(r1.code, CW_UNAVAILABLE);
  assert_non_null(strstr(r1.message, f.path));
  assert_int_equal(r2.calls, 1);
  assert_int_equal(r2.code, CW_UNAVAILABLE);
  // The trigger raced the close: an error from send, or one failed callback.
  assert_int_equal(rt.calls, ts ? 0 : 1);
  expect_status(ts ? ts : cw_make_status(CW_UNAVAILABLE, "x"), CW_UNAVAILABLE, NULL);
  // Later requests fail at once, naming the address; no callback runs.
  rec_t r3 = {.mu = PTHREAD_MUTEX_INITIALIZER};
  expect_status(cw_client_copy(c, 5, 6, 0, rec_done, &r3), CW_UNAVAILABLE, f.path);
  expect_status(cw_client_ping(c), CW_UNAVAILABLE, f.path);
  assert_ok(cw_client_flush(c));
  cw_client_release(c);
  assert_int_equal(r1.calls, 1);
  assert_int_equal(r3.calls, 0);
  fake_join(&f);
}

// After two requests, answers with a reply for an id never sent.
static void script_bad_id(fake_t* f) {
  frame_t fr, fr2;
  FCHECK(f, fake_read(f, &fr));
  FCHECK(f, fake_read(f, &fr2));
  fake_write(f, CW_MSG_PING, CW_FRAME_REPLY, 999, fr.msg, NULL, 0);
  frame_free(&fr);
  frame_free(&fr2);
  script_echo(f);
}

static void test_unknown_reply_id(void** state) {
  fake_t f = {0};
  fake_start(&f, script_bad_id);
  cw_client_t* c = connect_ok(&f);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  assert_ok(send_ping(c, "p", rec_done, &rec, NULL));
  uint64_t id = 0;
  cw_status_t ts = send_ping(c, "trigger", NULL, NULL, &id);  // may race the violation
  if (ts) {
    expect_status(ts, CW_UNAVAILABLE, "unknown request id 999");
  } else {
    expect_status(cw_client_wait(c, id, NULL, NULL), CW_UNAVAILABLE, "unknown request id 999");
  }
  assert_ok(cw_client_flush(c));  // nothing parked; waits for the callback
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, CW_UNAVAILABLE);
  assert_non_null(strstr(rec.message, "unknown request id 999"));
  assert_non_null(strstr(rec.message, f.path));
  expect_status(cw_client_ping(c), CW_UNAVAILABLE, NULL);
  cw_client_release(c);
  fake_join(&f);
}

// Sends bulk on a reply type that may not carry it: a protocol violation.
static void script_bad_bulk(fake_t* f) {
  frame_t fr;
  FCHECK(f, fake_read(f, &fr));
  uint8_t junk[8] = {0};
  fake_reply(f, &fr, fr.msg, junk, sizeof(junk));
  frame_free(&fr);
  script_echo(f);
}

static void test_protocol_violation(void** state) {
  fake_t f = {0};
  fake_start(&f, script_bad_bulk);
  cw_client_t* c = connect_ok(&f);
  expect_status(cw_client_ping(c), CW_UNAVAILABLE, "carry no bulk");
  cw_client_release(c);
  fake_join(&f);
}

// ---- A waiting thread takes the replies itself (cw_client_take_replies) ------

// Answers the first PING with an EVENT and its reply in one write, the
// second with its reply alone, then echoes.
static void script_event_then_replies(fake_t* f) {
  frame_t fr;
  FCHECK(f, fake_read(f, &fr));
  uint8_t out[512];
  size_t len = 0;
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  size_t plen = protobuf_c_message_get_packed_size(&ev.base);
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC, .version = 1, .type = CW_MSG_EVENT,
                         .payload_len = (uint32_t)plen};
  cw_frame_header_encode(&h, out);
  len = CW_FRAME_HEADER_SIZE;
  protobuf_c_message_pack(&ev.base, out + len);
  len += plen;
  pack_frame(out, &len, fr.h.type, fr.h.request_id, fr.msg, NULL, 0);
  FCHECK(f, write_all(f->fd, out, len));
  frame_free(&fr);
  script_echo(f);
}

typedef struct {
  rec_t rec;
  pthread_t thread;  // where the callback ran
  int events;
  cw_client_t* client;           // set: the callback tries a blocking call on it
  cw_status_code_t nested_code;  // what that call answered
} took_t;

static void took_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  took_t* t = user;
  t->thread = pthread_self();
  if (t->client) {
    cw_status_t s = cw_client_ping(t->client);  // nobody would read its reply
    t->nested_code = cw_status_code(s);
    cw_status_free(s);
  }
  rec_done(&t->rec, status, reply);
}

static void took_event(void* user, const ProtobufCMessage* event) {
  (void)event;
  took_t* t = user;
  pthread_mutex_lock(&t->rec.mu);
  t->events++;
  pthread_mutex_unlock(&t->rec.mu);
}

// Connects; returns once the reader lets waiters take replies.
static cw_client_t* connect_shared(fake_t* f, const cw_client_options_t* options) {
  cw_client_t* c = NULL;
  assert_ok(cw_client_connect(f->path, options, &c));
  while (!atomic_load(&c->shared_reads)) usleep(100);
  return c;
}

// Waits until the peer has written something to `c`.
static void await_readable(cw_client_t* c) {
  struct pollfd p = {.fd = c->fd, .events = POLLIN};
  assert_int_equal(poll(&p, 1, 10 * 1000), 1);
}

// With the reader kept out (read_mu held, as while it is busy), a reply that
// has arrived is taken by the caller, its callback on the caller's thread; an
// EVENT ahead of it is left, with the reply behind it, to the reader, which
// carries on afterwards.
static void test_waiter_takes_replies(void** state) {
  (void)state;
  fake_t f = {0};
  fake_start(&f, script_event_then_replies);
  took_t t = {.rec = {.mu = PTHREAD_MUTEX_INITIALIZER}};
  cw_client_options_t opt = {.on_event = took_event, .event_user = &t};
  cw_client_t* c = connect_shared(&f, &opt);

  // The EVENT comes first: the caller takes nothing.
  pthread_mutex_lock(&c->read_mu);
  assert_ok(send_ping(c, "first", took_done, &t, NULL));
  await_readable(c);
  assert_false(cw_client_take_replies_locked(c));
  pthread_mutex_unlock(&c->read_mu);
  assert_ok(cw_client_flush(c));
  assert_int_equal(t.rec.calls, 1);
  assert_string_equal(t.rec.data, "first");
  assert_int_equal(t.events, 1);
  assert_false(pthread_equal(t.thread, pthread_self()));  // the reader's

  // A reply alone: the caller takes it. Its callback, on the caller's
  // thread, may not wait on the client (only a reader could answer).
  t.client = c;
  pthread_mutex_lock(&c->read_mu);
  assert_ok(send_ping(c, "second", took_done, &t, NULL));
  await_readable(c);
  bool took = false;
  for (int i = 0; i < 10000 && !took; ++i) {  // its bytes may come in pieces
    took = cw_client_take_replies_locked(c);
    if (!took) usleep(100);
  }
  assert_true(took);
  assert_int_equal(t.rec.calls, 2);
  assert_string_equal(t.rec.data, "second");
  assert_true(pthread_equal(t.thread, pthread_self()));
  assert_int_equal(t.nested_code, CW_FAILED_PRECONDITION);
  assert_false(cw_client_take_replies_locked(c));  // nothing more has come
  pthread_mutex_unlock(&c->read_mu);
  t.client = NULL;
  assert_ok(cw_client_ping(c));  // outside a callback, the same call works

  // The public form beside the reader: whichever takes the reply, it is
  // delivered once and intact.
  assert_ok(send_ping(c, "third", took_done, &t, NULL));
  while (!cw_client_take_replies(c)) {
    pthread_mutex_lock(&t.rec.mu);
    int calls = t.rec.calls;
    pthread_mutex_unlock(&t.rec.mu);
    if (calls == 3) break;  // the reader was first
    sched_yield();
  }
  assert_ok(cw_client_flush(c));
  assert_int_equal(t.rec.calls, 3);
  assert_string_equal(t.rec.data, "third");
  cw_client_release(c);
  fake_join(&f);
}

// A reply that breaks the protocol, taken by a waiter: the connection ends
// with the reason, as when the reader reads it. A header the waiter cannot
// read is left to the reader (test_protocol_violation's script).
static void test_waiter_takes_a_bad_reply(void** state) {
  (void)state;
  fake_t f = {0};
  fake_start(&f, script_bad_id);
  cw_client_t* c = connect_shared(&f, NULL);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  pthread_mutex_lock(&c->read_mu);
  assert_ok(send_ping(c, "p", rec_done, &rec, NULL));
  uint64_t id = 0;
  assert_ok(send_ping(c, "q", NULL, NULL, &id));
  await_readable(c);
  for (int i = 0; i < 10000 && !c->read_err; ++i) {
    assert_false(cw_client_take_replies_locked(c));
    if (!c->read_err) usleep(100);
  }
  assert_non_null(c->read_err);
  pthread_mutex_unlock(&c->read_mu);
  expect_status(cw_client_wait(c, id, NULL, NULL), CW_UNAVAILABLE, "unknown request id 999");
  assert_ok(cw_client_flush(c));  // waits for the callback
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, CW_UNAVAILABLE);
  assert_non_null(strstr(rec.message, "unknown request id 999"));
  expect_status(cw_client_ping(c), CW_UNAVAILABLE, "unknown request id 999");
  cw_client_release(c);
  fake_join(&f);
}

static void test_waiter_leaves_a_bad_header(void** state) {
  (void)state;
  fake_t f = {0};
  fake_start(&f, script_bad_bulk);
  cw_client_t* c = connect_shared(&f, NULL);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  pthread_mutex_lock(&c->read_mu);
  assert_ok(send_ping(c, "p", rec_done, &rec, NULL));
  await_readable(c);
  // The waiter reads the header off the socket and leaves it.
  for (int i = 0; i < 10000 && cw_rbuf_buffered(&c->rb) < CW_FRAME_HEADER_SIZE; ++i) {
    assert_false(cw_client_take_replies_locked(c));
    usleep(100);
  }
  assert_true(cw_rbuf_buffered(&c->rb) >= CW_FRAME_HEADER_SIZE);
  assert_false(cw_client_take_replies_locked(c));
  assert_null(c->read_err);
  pthread_mutex_unlock(&c->read_mu);
  assert_ok(cw_client_flush(c));
  assert_int_equal(rec.calls, 1);
  assert_non_null(strstr(rec.message, "carry no bulk"));
  cw_client_release(c);
  fake_join(&f);
}

// Reads two requests, then answers with a reply for an unknown id and, in
// the same write, a good reply to the first request.
static void script_bad_id_then_good(fake_t* f) {
  frame_t fr, fr2;
  FCHECK(f, fake_read(f, &fr));
  FCHECK(f, fake_read(f, &fr2));
  uint8_t out[512];
  size_t len = 0;
  pack_frame(out, &len, CW_MSG_PING, 999, fr.msg, NULL, 0);
  pack_frame(out, &len, CW_MSG_PING, fr.h.request_id, fr.msg, NULL, 0);
  FCHECK(f, write_all(f->fd, out, len));
  frame_free(&fr);
  frame_free(&fr2);
  script_echo(f);
}

// Once the reader has ended the connection, a waiter takes nothing, not even
// a whole reply left behind the bad frame: fail_all has completed it.
static void test_waiter_stops_once_the_reader_failed(void** state) {
  (void)state;
  fake_t f = {0};
  fake_start(&f, script_bad_id_then_good);
  cw_client_t* c = connect_shared(&f, NULL);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  pthread_mutex_lock(&c->read_mu);  // both frames arrive before the reader reads
  assert_ok(send_ping(c, "p", rec_done, &rec, NULL));
  uint64_t id = 0;
  assert_ok(send_ping(c, "q", NULL, NULL, &id));
  await_readable(c);
  pthread_mutex_unlock(&c->read_mu);
  expect_status(cw_client_wait(c, id, NULL, NULL), CW_UNAVAILABLE, "unknown request id 999");
  assert_ok(cw_client_flush(c));
  assert_false(cw_client_take_replies(c));
  pthread_mutex_lock(&c->read_mu);
  assert_true(c->read_closed);
  assert_null(c->read_err);  // it did not read the reply behind
  pthread_mutex_unlock(&c->read_mu);
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, CW_UNAVAILABLE);
  cw_client_release(c);
  fake_join(&f);
}

// With parking chosen (as the tuner does where waiters' replies come sooner
// so), the reader parks while a waiter takes its
// replies; a reply nobody polls for still reaches its caller through the
// reader; a kick sends the reader back to the socket, not to park again until
// a waiter takes.
static void test_reader_parks_beside_a_waiter(void** state) {
  (void)state;
  fake_t f = {0};
  fake_start(&f, script_echo);
  cw_client_t* c = connect_shared(&f, NULL);
  atomic_store(&c->park_reader, true);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  uint64_t parks = 0;
  for (int i = 1; parks == 0; ++i) {  // the reader must first run out of frames
    assert_true(i < 1000000);
    assert_ok(send_ping(c, "p", rec_done, &rec, NULL));
    for (;;) {
      cw_client_take_replies(c);
      pthread_mutex_lock(&rec.mu);
      int calls = rec.calls;
      pthread_mutex_unlock(&rec.mu);
      if (calls == i) break;
      sched_yield();
    }
    pthread_mutex_lock(&c->read_mu);
    parks = c->reader_parks;
    pthread_mutex_unlock(&c->read_mu);
  }
  assert_ok(cw_client_ping(c));  // waits on a condition: the reader reads it
  cw_client_kick_reader(c);
  assert_int_equal(atomic_load(&c->last_take_ns), 0);
  assert_ok(cw_client_ping(c));
  assert_int_equal(rec.code, CW_OK);
  cw_client_release(c);
  fake_join(&f);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_packed_and_split_replies),
      cmocka_unit_test(test_bulk_sink),
      cmocka_unit_test(test_oversize_bulk),
      cmocka_unit_test(test_exact_sink),
      cmocka_unit_test(test_error_reply),
      cmocka_unit_test(test_peer_closes),
      cmocka_unit_test(test_unknown_reply_id),
      cmocka_unit_test(test_protocol_violation),
      cmocka_unit_test(test_waiter_takes_replies),
      cmocka_unit_test(test_waiter_takes_a_bad_reply),
      cmocka_unit_test(test_waiter_leaves_a_bad_header),
      cmocka_unit_test(test_waiter_stops_once_the_reader_failed),
      cmocka_unit_test(test_reader_parks_beside_a_waiter),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
