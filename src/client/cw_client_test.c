// Unit tests of the client's framing, matching and completion logic against a
// scripted fake peer on a Unix socket (the real worker is exercised by the
// integration tests in tests/).
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "cw_client.h"
#include "cw_time.h"

// ---- Fake peer -------------------------------------------------------------

typedef struct fake_s fake_t;
typedef void (*fake_script_fn)(fake_t* f);

struct fake_s {
  char dir[64];
  char path[100];
  int listen_fd;
  int fd;
  pthread_t thread;
  fake_script_fn script;
  char failure[512];  // first failed check on the peer thread
  // HELLO behaviour.
  uint32_t hello_error_code;
  const char* hello_error_message;
  bool hello_silent;  // never answer HELLO
  // What the client's HELLO said.
  uint32_t hello_min, hello_max;
  int hello_role;
  char hello_token[64];
  uint64_t hello_session;
  char hello_peer_name[64];
  // Script parameters.
  const uint8_t* pattern;
  size_t pattern_len;
  int count;
};

static void fake_fail(fake_t* f, int line, const char* what) {
  if (!f->failure[0]) {
    snprintf(f->failure, sizeof(f->failure), "fake peer, line %d: %s", line, what);
    fprintf(stderr, "%s\n", f->failure);
  }
}
#define FCHECK(f, cond)                 \
  do {                                  \
    if (!(cond)) {                      \
      fake_fail((f), __LINE__, #cond);  \
      return;                           \
    }                                   \
  } while (0)

static bool write_all(int fd, const void* data, size_t len) {
  const uint8_t* p = data;
  while (len) {
    ssize_t n = send(fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= (size_t)n;
  }
  return true;
}

static bool read_all(int fd, void* data, size_t len) {
  uint8_t* p = data;
  while (len) {
    ssize_t n = recv(fd, p, len, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return false;
    p += n;
    len -= (size_t)n;
  }
  return true;
}

// A frame the fake peer received: header, decoded payload, bulk (malloc'd).
typedef struct frame_s {
  cw_frame_header_t h;
  ProtobufCMessage* msg;
  uint8_t* bulk;
} frame_t;

static void frame_free(frame_t* fr) {
  if (fr->msg) protobuf_c_message_free_unpacked(fr->msg, NULL);
  free(fr->bulk);
  memset(fr, 0, sizeof(*fr));
}

// False on EOF or any error.
static bool fake_read(fake_t* f, frame_t* fr) {
  memset(fr, 0, sizeof(*fr));
  uint8_t hdr[CW_FRAME_HEADER_SIZE];
  if (!read_all(f->fd, hdr, sizeof(hdr))) return false;
  cw_frame_limits_t lim = {.max_payload = 1u << 24, .max_bulk = 1ull << 32};
  cw_status_t s = cw_frame_header_decode(hdr, sizeof(hdr), &lim, &fr->h);
  if (s) {
    fake_fail(f, __LINE__, cw_status_message(s));
    cw_status_free(s);
    return false;
  }
  uint8_t* payload = malloc(fr->h.payload_len + 1);
  if (!read_all(f->fd, payload, fr->h.payload_len)) {
    free(payload);
    return false;
  }
  s = cw_frame_decode_payload(&fr->h, payload, &fr->msg);
  free(payload);
  if (s) {
    fake_fail(f, __LINE__, cw_status_message(s));
    cw_status_free(s);
    return false;
  }
  if (fr->h.bulk_len) {
    fr->bulk = malloc(fr->h.bulk_len);
    if (!read_all(f->fd, fr->bulk, fr->h.bulk_len)) {
      frame_free(fr);
      return false;
    }
  }
  return true;
}

static bool fake_write(fake_t* f, uint16_t type, uint32_t flags, uint64_t id,
                       const ProtobufCMessage* msg, const void* bulk, uint64_t bulk_len) {
  size_t len = protobuf_c_message_get_packed_size(msg);
  uint8_t* buf = malloc(len + 1);
  protobuf_c_message_pack(msg, buf);
  cw_frame_header_t h = {.magic = CW_FRAME_MAGIC,
                         .version = 1,
                         .type = type,
                         .flags = flags,
                         .payload_len = (uint32_t)len,
                         .request_id = id,
                         .bulk_len = bulk_len};
  uint8_t hdr[CW_FRAME_HEADER_SIZE];
  cw_frame_header_encode(&h, hdr);
  bool ok = write_all(f->fd, hdr, sizeof(hdr)) && write_all(f->fd, buf, len) &&
            (!bulk_len || write_all(f->fd, bulk, bulk_len));
  free(buf);
  return ok;
}

static bool fake_reply(fake_t* f, const frame_t* req, const ProtobufCMessage* msg,
                       const void* bulk, uint64_t bulk_len) {
  return fake_write(f, req->h.type, CW_FRAME_REPLY, req->h.request_id, msg, bulk, bulk_len);
}

static bool fake_ack(fake_t* f, const frame_t* req) {
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  return fake_reply(f, req, &ack.base, NULL, 0);
}

static bool fake_error(fake_t* f, uint16_t type, uint64_t id, uint32_t code, const char* text) {
  Causeway__V1__ErrorReply e = CAUSEWAY__V1__ERROR_REPLY__INIT;
  e.code = code;
  e.message = (char*)text;
  return fake_write(f, type, CW_FRAME_REPLY | CW_FRAME_ERROR, id, &e.base, NULL, 0);
}

static void fake_hello(fake_t* f) {
  frame_t fr;
  FCHECK(f, fake_read(f, &fr));
  FCHECK(f, fr.h.type == CW_MSG_HELLO && fr.h.flags == 0);
  const Causeway__V1__HelloRequest* h = (const Causeway__V1__HelloRequest*)fr.msg;
  f->hello_min = h->min_version;
  f->hello_max = h->max_version;
  f->hello_role = h->role;
  snprintf(f->hello_token, sizeof(f->hello_token), "%.*s", (int)h->token.len,
           (const char*)h->token.data);
  f->hello_session = h->session_id;
  snprintf(f->hello_peer_name, sizeof(f->hello_peer_name), "%s", h->peer_name);
  if (f->hello_silent) {
    // Hold the connection until the client gives up.
    char c;
    while (recv(f->fd, &c, 1, 0) > 0) {
    }
    frame_free(&fr);
    return;
  }
  if (f->hello_error_code) {
    fake_error(f, CW_MSG_HELLO, fr.h.request_id, f->hello_error_code, f->hello_error_message);
  } else {
    Causeway__V1__HelloReply r = CAUSEWAY__V1__HELLO_REPLY__INIT;
    r.version = 1;
    r.session_id = 77;
    r.worker_name = "fake-worker";
    r.max_payload = 1u << 24;
    r.max_bulk = 1ull << 32;
    fake_reply(f, &fr, &r.base, NULL, 0);
  }
  frame_free(&fr);
}

static void* fake_main(void* arg) {
  fake_t* f = arg;
  f->fd = accept(f->listen_fd, NULL, NULL);
  if (f->fd < 0) {
    fake_fail(f, __LINE__, "accept failed");
    return NULL;
  }
  fake_hello(f);
  if (!f->failure[0] && !f->hello_silent && !f->hello_error_code && f->script) f->script(f);
  close(f->fd);
  return NULL;
}

static void fake_start(fake_t* f, fake_script_fn script) {
  f->script = script;
  snprintf(f->dir, sizeof(f->dir), "/tmp/cw_client_test.XXXXXX");
  assert_non_null(mkdtemp(f->dir));
  snprintf(f->path, sizeof(f->path), "%s/sock", f->dir);
  f->listen_fd = socket(AF_UNIX, SOCK_STREAM, 0);
  assert_true(f->listen_fd >= 0);
  struct sockaddr_un sun = {.sun_family = AF_UNIX};
  snprintf(sun.sun_path, sizeof(sun.sun_path), "%s", f->path);
  assert_int_equal(bind(f->listen_fd, (struct sockaddr*)&sun, sizeof(sun)), 0);
  assert_int_equal(listen(f->listen_fd, 4), 0);
  assert_int_equal(pthread_create(&f->thread, NULL, fake_main, f), 0);
}

static void fake_join(fake_t* f) {
  pthread_join(f->thread, NULL);
  close(f->listen_fd);
  unlink(f->path);
  rmdir(f->dir);
  if (f->failure[0]) fail_msg("%s", f->failure);
}

static cw_client_t* connect_ok(fake_t* f) {
  cw_client_t* c = NULL;
  cw_status_t s = cw_client_connect(f->path, NULL, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  return c;
}

static void expect_status(cw_status_t s, cw_status_code_t code, const char* needle) {
  if (cw_status_code(s) != code || (needle && !strstr(cw_status_message(s), needle))) {
    char buf[512];
    snprintf(buf, sizeof(buf), "want %s containing \"%s\", got %s: %s",
             cw_status_code_name(code), needle ? needle : "", cw_status_code_name(cw_status_code(s)),
             cw_status_message(s));
    cw_status_free(s);
    fail_msg("%s", buf);
  }
  cw_status_free(s);
}

static void assert_ok(cw_status_t s) {
  if (s) {
    char buf[512];
    snprintf(buf, sizeof(buf), "%s: %s", cw_status_code_name(cw_status_code(s)),
             cw_status_message(s));
    cw_status_free(s);
    fail_msg("%s", buf);
  }
}

// Callback recorder.
typedef struct rec_s {
  pthread_mutex_t mu;
  int calls;
  cw_status_code_t code;
  char message[256];
  char data[32];  // PING echo data
} rec_t;

static void rec_done(void* user, cw_status_t status, const ProtobufCMessage* reply) {
  rec_t* r = user;
  pthread_mutex_lock(&r->mu);
  r->calls++;
  r->code = cw_status_code(status);
  snprintf(r->message, sizeof(r->message), "%s", cw_status_message(status));
  if (reply && reply->descriptor == &causeway__v1__ping__descriptor) {
    const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)reply;
    snprintf(r->data, sizeof(r->data), "%.*s", (int)p->data.len, (const char*)p->data.data);
  }
  pthread_mutex_unlock(&r->mu);
  cw_status_free(status);
}

static cw_status_t send_ping(cw_client_t* c, const char* data, cw_client_done_fn done,
                             void* user, uint64_t* out_id) {
  Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
  p.data.data = (uint8_t*)data;
  p.data.len = strlen(data);
  return cw_client_send(c, CW_MSG_PING, &p.base, NULL, 0, NULL, done, user, out_id);
}

// Scripts ----------------------------------------------------------------------

// Echoes PINGs, acks everything else, serves DOWNLOAD/SERIALIZE from
// f->pattern, until EOF.
static void script_echo(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) {
    bool ok;
    if (fr.h.type == CW_MSG_PING) {
      ok = fake_reply(f, &fr, fr.msg, NULL, 0);
    } else if (fr.h.type == CW_MSG_DOWNLOAD) {
      Causeway__V1__ArrayInfo info = CAUSEWAY__V1__ARRAY_INFO__INIT;
      info.buffer_id = ((Causeway__V1__DownloadRequest*)fr.msg)->buffer_id;
      info.dtype = CAUSEWAY__V1__DTYPE__DTYPE_U8;
      info.size = f->pattern_len;
      ok = fake_reply(f, &fr, &info.base, f->pattern, f->pattern_len);
    } else if (fr.h.type == CW_MSG_SERIALIZE) {
      Causeway__V1__SerializeReply r = CAUSEWAY__V1__SERIALIZE_REPLY__INIT;
      r.exe_id = ((Causeway__V1__SerializeRequest*)fr.msg)->exe_id;
      r.size = f->pattern_len;
      ok = fake_reply(f, &fr, &r.base, f->pattern, f->pattern_len);
    } else if (fr.h.type == CW_MSG_UPLOAD) {
      // Check the bytes arrived intact, then ack.
      if (f->pattern &&
          (fr.h.bulk_len != f->pattern_len || memcmp(fr.bulk, f->pattern, f->pattern_len) != 0)) {
        fake_fail(f, __LINE__, "upload bulk differs from the pattern");
      }
      ok = fake_ack(f, &fr);
    } else {
      ok = fake_ack(f, &fr);
    }
    frame_free(&fr);
    if (!ok) return;
  }
}

static uint8_t* make_pattern(size_t len) {
  uint8_t* p = malloc(len);
  uint32_t x = 12345;
  for (size_t i = 0; i < len; ++i) {
    x = x * 1103515245u + 12345u;
    p[i] = (uint8_t)(x >> 16);
  }
  return p;
}

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

// ---- Tests -------------------------------------------------------------------

static void test_hello(void** state) {
  fake_t f = {0};
  fake_start(&f, NULL);
  cw_client_options_t o = {.token = "s3cret", .session_id = 5, .peer_name = "unit"};
  cw_client_t* c = NULL;
  assert_ok(cw_client_connect(f.path, &o, &c));
  assert_int_equal(cw_client_session_id(c), 77);
  assert_string_equal(cw_client_peer_name(c), "fake-worker");
  cw_client_release(c);
  fake_join(&f);
  assert_int_equal(f.hello_min, 1);
  assert_int_equal(f.hello_max, 1);
  assert_int_equal(f.hello_role, CAUSEWAY__V1__ROLE__ROLE_CLIENT);
  assert_string_equal(f.hello_token, "s3cret");
  assert_int_equal(f.hello_session, 5);
  assert_string_equal(f.hello_peer_name, "unit");

  // Token from the environment, role passed through.
  fake_t g = {0};
  fake_start(&g, NULL);
  setenv("CAUSEWAY_TOKEN", "from-env", 1);
  cw_client_options_t o2 = {.role = CAUSEWAY__V1__ROLE__ROLE_WORKER};
  cw_status_t s = cw_client_connect(g.path, &o2, &c);
  unsetenv("CAUSEWAY_TOKEN");
  assert_ok(s);
  cw_client_release(c);
  fake_join(&g);
  assert_string_equal(g.hello_token, "from-env");
  assert_int_equal(g.hello_role, CAUSEWAY__V1__ROLE__ROLE_WORKER);
}

static void test_hello_refused(void** state) {
  fake_t f = {.hello_error_code = CW_UNAUTHENTICATED, .hello_error_message = "token mismatch"};
  fake_start(&f, NULL);
  cw_client_t* c = (cw_client_t*)&f;  // must be reset to NULL
  expect_status(cw_client_connect(f.path, NULL, &c), CW_UNAUTHENTICATED, "token mismatch");
  assert_null(c);
  fake_join(&f);
}

static void test_hello_timeout(void** state) {
  fake_t f = {.hello_silent = true};
  fake_start(&f, NULL);
  cw_client_options_t o = {.connect_timeout_ms = 300};
  cw_client_t* c = NULL;
  int64_t t0 = cw_time_now_ms();
  expect_status(cw_client_connect(f.path, &o, &c), CW_UNAVAILABLE, f.path);
  assert_true(cw_time_now_ms() - t0 < 3000);
  assert_null(c);
  fake_join(&f);
}

static void test_connect_refused(void** state) {
  // A port that was just free: nobody listens there.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in a = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(s, (struct sockaddr*)&a, sizeof(a)), 0);
  socklen_t len = sizeof(a);
  assert_int_equal(getsockname(s, (struct sockaddr*)&a, &len), 0);
  close(s);
  char addr[64];
  snprintf(addr, sizeof(addr), "127.0.0.1:%u", ntohs(a.sin_port));
  cw_client_options_t o = {.connect_timeout_ms = 2000};
  cw_client_t* c = NULL;
  int64_t t0 = cw_time_now_ms();
  expect_status(cw_client_connect(addr, &o, &c), CW_UNAVAILABLE, addr);
  assert_true(cw_time_now_ms() - t0 < 2500);
  assert_null(c);

  expect_status(cw_client_connect("/nonexistent/cw.sock", &o, &c), CW_UNAVAILABLE,
                "/nonexistent/cw.sock");
  expect_status(cw_client_connect("no-port-here", &o, &c), CW_INVALID_ARGUMENT, "no-port-here");
}

// Reads n PINGs, then answers them in reverse order.
static void script_reverse(fake_t* f) {
  frame_t fr[8];
  int n = f->count;
  for (int i = 0; i < n; ++i) FCHECK(f, fake_read(f, &fr[i]) && fr[i].h.type == CW_MSG_PING);
  for (int i = n - 1; i >= 0; --i) FCHECK(f, fake_reply(f, &fr[i], fr[i].msg, NULL, 0));
  for (int i = 0; i < n; ++i) frame_free(&fr[i]);
  script_echo(f);
}

static void test_pipelined_out_of_order(void** state) {
  fake_t f = {.count = 5};
  fake_start(&f, script_reverse);
  cw_client_t* c = connect_ok(&f);
  const char* data[4] = {"alpha", "bravo", "charlie", "delta"};
  uint64_t ids[4];
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  assert_ok(send_ping(c, data[0], NULL, NULL, &ids[0]));
  assert_ok(send_ping(c, data[1], NULL, NULL, &ids[1]));
  uint64_t cb_id = 0;
  assert_ok(send_ping(c, "echo", rec_done, &rec, &cb_id));
  assert_ok(send_ping(c, data[2], NULL, NULL, &ids[2]));
  assert_ok(send_ping(c, data[3], NULL, NULL, &ids[3]));
  // HELLO took id 1; the counter continues from there.
  assert_int_equal(ids[0], 2);
  assert_int_equal(ids[3], 6);
  // Wait in send order although replies come in reverse.
  for (int i = 0; i < 4; ++i) {
    ProtobufCMessage* reply = NULL;
    assert_ok(cw_client_wait(c, ids[i], &reply, NULL));
    const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)reply;
    assert_int_equal(p->data.len, strlen(data[i]));
    assert_memory_equal(p->data.data, data[i], strlen(data[i]));
    protobuf_c_message_free_unpacked(reply, NULL);
  }
  // A claimed id cannot be waited for twice; a callback id is not waitable.
  expect_status(cw_client_wait(c, ids[0], NULL, NULL), CW_INVALID_ARGUMENT, NULL);
  assert_ok(cw_client_flush(c));
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, CW_OK);
  assert_string_equal(rec.data, "echo");
  assert_ok(cw_client_ping(c));
  cw_client_release(c);
  fake_join(&f);
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

// A deferred frame goes out ahead of the next frame sent (one write); the
// peer sees both in order and both complete.
static void test_deferred_send(void** state) {
  fake_t f = {0};
  fake_start(&f, script_echo);
  cw_client_t* c = connect_ok(&f);
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
  p.data.data = (uint8_t*)"first";
  p.data.len = 5;
  uint64_t deferred_id = 0, id = 0;
  assert_ok(cw_client_send_deferred(c, CW_MSG_PING, &p.base, rec_done, &rec, &deferred_id));
  assert_ok(send_ping(c, "second", NULL, NULL, &id));
  assert_true(id > deferred_id);
  ProtobufCMessage* reply = NULL;
  assert_ok(cw_client_wait(c, id, &reply, NULL));
  protobuf_c_message_free_unpacked(reply, NULL);
  assert_ok(cw_client_flush(c));
  // The echo script answers in arrival order: the deferred one came first.
  assert_int_equal(rec.calls, 1);
  assert_string_equal(rec.data, "first");
  cw_client_release(c);
  fake_join(&f);
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

// Reads requests but never answers until the client hangs up.
static void script_mute(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) frame_free(&fr);
}

static void test_release_fails_outstanding(void** state) {
  fake_t f = {0};
  fake_start(&f, script_mute);
  cw_client_t* c = connect_ok(&f);
  rec_t r1 = {.mu = PTHREAD_MUTEX_INITIALIZER}, r2 = {.mu = PTHREAD_MUTEX_INITIALIZER};
  assert_ok(send_ping(c, "a", rec_done, &r1, NULL));
  assert_ok(cw_client_expect(c, 1, rec_done, &r2));
  uint64_t parked = 0;
  assert_ok(send_ping(c, "never claimed", NULL, NULL, &parked));
  assert_ok(cw_client_expect(c, 2, NULL, NULL));
  cw_client_release(c);
  assert_int_equal(r1.calls, 1);
  assert_int_equal(r1.code, CW_UNAVAILABLE);
  assert_non_null(strstr(r1.message, "cw_client_release"));
  assert_int_equal(r2.calls, 1);
  fake_join(&f);
}

static void script_check_local_refusal(fake_t* f) {
  // The refused upload must not reach the wire: the first frame is the PING.
  frame_t fr;
  FCHECK(f, fake_read(f, &fr));
  bool is_ping = fr.h.type == CW_MSG_PING;
  fake_reply(f, &fr, fr.msg, NULL, 0);
  frame_free(&fr);
  FCHECK(f, is_ping);
  script_echo(f);
}

static void test_upload_size_mismatch(void** state) {
  fake_t f = {0};
  fake_start(&f, script_check_local_refusal);
  cw_client_t* c = connect_ok(&f);
  int64_t dims[2] = {2, 3};
  float data[6] = {0};
  rec_t rec = {.mu = PTHREAD_MUTEX_INITIALIZER};
  expect_status(cw_client_upload(c, 1, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 2, NULL, 0, data,
                                 20, rec_done, &rec),
                CW_INVALID_ARGUMENT, "24");
  expect_status(cw_client_upload(c, 1, 9999, dims, 2, NULL, 0, data, 24, NULL, NULL),
                CW_INVALID_ARGUMENT, NULL);
  // Bulk on a request type that carries none is refused locally too.
  Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
  struct iovec iov = {data, 4};
  expect_status(cw_client_send(c, CW_MSG_PING, &p.base, &iov, 1, NULL, NULL, NULL, NULL),
                CW_INVALID_ARGUMENT, NULL);
  // So is a request whose message does not match its type, and HELLO.
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  expect_status(cw_client_send(c, CW_MSG_PING, &ack.base, NULL, 0, NULL, NULL, NULL, NULL),
                CW_INVALID_ARGUMENT, NULL);
  expect_status(cw_client_send(c, CW_MSG_HELLO, &p.base, NULL, 0, NULL, NULL, NULL, NULL),
                CW_INVALID_ARGUMENT, NULL);
  assert_ok(cw_client_ping(c));
  // A matching size with explicit strides goes through.
  int64_t strides[2] = {12, 4};
  assert_ok(cw_client_upload(c, 1, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 2, strides, 0, data, 24,
                             rec_done, &rec));
  assert_ok(cw_client_flush(c));
  assert_int_equal(rec.calls, 1);
  assert_int_equal(rec.code, CW_OK);
  cw_client_release(c);
  fake_join(&f);
}

static void script_check_launch(fake_t* f) {
  frame_t fr;
  FCHECK(f, fake_read(f, &fr));
  FCHECK(f, fr.h.type == CW_MSG_LAUNCH);
  const Causeway__V1__LaunchRequest* l = (const Causeway__V1__LaunchRequest*)fr.msg;
  bool ok = l->exe_id == 100 && l->n_args == 2 && l->n_outputs == 2 && l->args[0]->n_ids == 2 &&
            l->args[1]->ids[1] == 22 && l->outputs[1]->n_ids == 1 && l->outputs[1]->ids[0] == 31;
  fake_ack(f, &fr);
  frame_free(&fr);
  FCHECK(f, ok);
  script_echo(f);
}

static void test_launch_encoding(void** state) {
  fake_t f = {0};
  fake_start(&f, script_check_launch);
  cw_client_t* c = connect_ok(&f);
  const uint64_t a0[2] = {11, 12}, a1[2] = {21, 22}, o0[1] = {30}, o1[1] = {31};
  const uint64_t* args[2] = {a0, a1};
  const uint64_t* outs[2] = {o0, o1};
  assert_ok(cw_client_launch(c, 100, 2, 2, args, 1, outs, NULL, NULL));
  assert_ok(cw_client_flush(c));
  cw_client_release(c);
  fake_join(&f);
}

// Several threads share one client; the peer echoes.
typedef struct stress_s {
  cw_client_t* c;
  int thread;
  int failures;
} stress_t;

static void* stress_main(void* arg) {
  stress_t* s = arg;
  for (int i = 0; i < 200; ++i) {
    char data[32];
    snprintf(data, sizeof(data), "t%d-%d", s->thread, i);
    uint64_t id = 0;
    cw_status_t st = send_ping(s->c, data, NULL, NULL, &id);
    ProtobufCMessage* reply = NULL;
    if (!st) st = cw_client_wait(s->c, id, &reply, NULL);
    if (st) {
      s->failures++;
      cw_status_free(st);
      continue;
    }
    const Causeway__V1__Ping* p = (const Causeway__V1__Ping*)reply;
    if (p->data.len != strlen(data) || memcmp(p->data.data, data, p->data.len) != 0) {
      s->failures++;
    }
    protobuf_c_message_free_unpacked(reply, NULL);
  }
  return NULL;
}

static void test_threads(void** state) {
  fake_t f = {0};
  fake_start(&f, script_echo);
  cw_client_t* c = connect_ok(&f);
  pthread_t t[4];
  stress_t s[4];
  for (int i = 0; i < 4; ++i) {
    s[i] = (stress_t){.c = c, .thread = i};
    pthread_create(&t[i], NULL, stress_main, &s[i]);
  }
  for (int i = 0; i < 4; ++i) {
    pthread_join(t[i], NULL);
    assert_int_equal(s[i].failures, 0);
  }
  assert_ok(cw_client_flush(c));
  cw_client_release(c);
  fake_join(&f);
}

// ---- Liveness -------------------------------------------------------------------

// A slow but live peer: it answers INVENTORY only after 4 liveness periods,
// and every PING at once.
static void script_slow_but_alive(fake_t* f) {
  frame_t req, fr;
  FCHECK(f, fake_read(f, &req));
  FCHECK(f, req.h.type == CW_MSG_INVENTORY);
  int64_t until = cw_time_now_ms() + 4 * f->count;
  int pings = 0;
  for (int64_t left; (left = until - cw_time_now_ms()) > 0;) {
    struct pollfd pfd = {.fd = f->fd, .events = POLLIN};
    if (poll(&pfd, 1, (int)left) <= 0) continue;
    if (!fake_read(f, &fr)) break;
    if (fr.h.type == CW_MSG_PING) {
      pings++;
      fake_reply(f, &fr, fr.msg, NULL, 0);
    }
    frame_free(&fr);
  }
  FCHECK(f, pings >= 2);
  Causeway__V1__Inventory inv = CAUSEWAY__V1__INVENTORY__INIT;
  inv.worker_name = "slow";
  inv.platform_name = "cpu";
  inv.platform_version = "0";
  fake_reply(f, &req, &inv.base, NULL, 0);
  frame_free(&req);
  while (fake_read(f, &fr)) frame_free(&fr);  // until the client closes
}

// Answers every PING until the client closes.
static void script_pong(fake_t* f) {
  frame_t fr;
  while (fake_read(f, &fr)) {
    if (fr.h.type == CW_MSG_PING) fake_reply(f, &fr, fr.msg, NULL, 0);
    frame_free(&fr);
  }
}

// A hung peer: it reads everything and never answers.
static void script_hung(fake_t* f) {
  uint8_t buf[4096];
  while (read(f->fd, buf, sizeof(buf)) > 0) {
  }
}

static void test_liveness(void** state) {
  (void)state;
  const int period = 400;  // roomy: a loaded machine may be slow to answer a PING
  // Slow: pings keep the call alive past the period, and it succeeds, also
  // after a quiet time longer than the period with nothing owed.
  fake_t f = {.count = period};
  fake_start(&f, script_slow_but_alive);
  cw_client_options_t o = {.liveness_ms = period};
  cw_client_t* c = NULL;
  cw_status_t s = cw_client_connect(f.path, &o, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  struct timespec quiet = {.tv_sec = 0, .tv_nsec = 3L * period * 1000000L};
  nanosleep(&quiet, NULL);
  Causeway__V1__Inventory* inv = NULL;
  s = cw_client_inventory(c, &inv);
  if (s) fail_msg("a slow live peer: %s", cw_status_message(s));
  assert_string_equal(inv->worker_name, "slow");
  protobuf_c_message_free_unpacked(&inv->base, NULL);
  cw_client_release(c);
  fake_join(&f);
  // Hung: the call fails UNAVAILABLE saying so, and so does what follows.
  fake_t h = {0};
  fake_start(&h, script_hung);
  s = cw_client_connect(h.path, &o, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  expect_status(cw_client_ping(c), CW_UNAVAILABLE, "no answer from");
  expect_status(cw_client_ping(c), CW_UNAVAILABLE, "no answer from");
  cw_client_release(c);
  fake_join(&h);
  // Quiet with nothing owed is not hung: the connection stays up.
  fake_t idle = {0};
  fake_start(&idle, script_pong);
  s = cw_client_connect(idle.path, &o, &c);
  if (s) fail_msg("connect: %s", cw_status_message(s));
  nanosleep(&quiet, NULL);
  s = cw_client_ping(c);
  if (s) fail_msg("after an idle while: %s", cw_status_message(s));
  cw_client_release(c);
  fake_join(&idle);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hello),
      cmocka_unit_test(test_hello_refused),
      cmocka_unit_test(test_hello_timeout),
      cmocka_unit_test(test_connect_refused),
      cmocka_unit_test(test_pipelined_out_of_order),
      cmocka_unit_test(test_packed_and_split_replies),
      cmocka_unit_test(test_deferred_send),
      cmocka_unit_test(test_bulk_sink),
      cmocka_unit_test(test_oversize_bulk),
      cmocka_unit_test(test_error_reply),
      cmocka_unit_test(test_peer_closes),
      cmocka_unit_test(test_unknown_reply_id),
      cmocka_unit_test(test_protocol_violation),
      cmocka_unit_test(test_release_fails_outstanding),
      cmocka_unit_test(test_upload_size_mismatch),
      cmocka_unit_test(test_launch_encoding),
      cmocka_unit_test(test_threads),
      cmocka_unit_test(test_liveness),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
