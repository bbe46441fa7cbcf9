// The gRPC server on a real socket: its close lets a call's last output go
// out (the trailers after a large response the client had not read yet, or
// of a call that ends while the connection lingers) before it ends.
#include <nghttp2/nghttp2.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <cmocka.h>

#include "cw_grpc_server.h"
#include "cw_time.h"

#define MSG_LEN ((size_t)1 << 20)
#define MSGS 12  // 12 MiB: well over what the server keeps queued on a socket (4 MiB)

// --- The server side (the loop, on the test's thread) -------------------------------------

static cw_grpc_server_t* g_server;
static uv_timer_t g_close_timer, g_finish_timer;
static bool g_finish_late;  // the call ends after the server's close, not before
static cw_grpc_call_t* g_call;

static void finish_late(uv_timer_t* t) {
  cw_grpc_call_finish(g_call, cw_make_status(CW_UNAVAILABLE, "bye"));
  cw_grpc_call_release(g_call);
  g_call = NULL;
  uv_close((uv_handle_t*)t, NULL);
}

static void close_server(uv_timer_t* t) {
  cw_grpc_server_close(g_server);
  g_server = NULL;
  uv_close((uv_handle_t*)t, NULL);
}

static cw_status_t svc_start(void* user, cw_grpc_call_t* call) { return cw_ok_status(); }
static void svc_message(void* user, cw_grpc_call_t* call, const uint8_t* d, size_t n) {}

// The whole response and its end queued at once, then the server closes
// (as the proxy does on SIGTERM) while the client has read little of it.
static void svc_half_close(void* user, cw_grpc_call_t* call) {
  if (g_finish_late) {
    // Its end comes from a later loop callback, once the server closes.
    cw_grpc_call_retain(call);
    g_call = call;
    uv_timer_start(&g_close_timer, close_server, 50, 0);
    uv_timer_start(&g_finish_timer, finish_late, 100, 0);
    return;
  }
  for (int k = 0; k < MSGS; ++k) {
    uint8_t* p;
    assert_null(cw_grpc_call_reserve(call, MSG_LEN, &p));
    memset(p, (uint8_t)k, MSG_LEN);
    assert_null(cw_grpc_call_commit(call));
  }
  cw_grpc_call_finish(call, cw_make_status(CW_UNAVAILABLE, "bye"));
  uv_timer_start(&g_close_timer, close_server, 50, 0);
}

static void svc_close(void* user, cw_grpc_call_t* call) {}

static const cw_grpc_handlers_t svc_handlers = {svc_start, svc_message, svc_half_close, svc_close,
                                                NULL};

// --- The client (its own thread, a blocking socket) ----------------------------------------

typedef struct peer_s {
  char path[108];
  int grpc_status;  // -1 until the trailers come
  char grpc_message[64];
  size_t data;  // response bytes (with gRPC's prefixes)
  bool goaway, stream_closed, eof;
} peer_t;

static int on_header(nghttp2_session* h2, const nghttp2_frame* f, const uint8_t* name,
                     size_t nlen, const uint8_t* value, size_t vlen, uint8_t flags, void* user) {
  peer_t* p = user;
  if (nlen == 11 && !memcmp(name, "grpc-status", 11)) p->grpc_status = atoi((const char*)value);
  if (nlen == 12 && !memcmp(name, "grpc-message", 12) && vlen < sizeof(p->grpc_message)) {
    memcpy(p->grpc_message, value, vlen);
    p->grpc_message[vlen] = 0;
  }
  return 0;
}

static int on_data(nghttp2_session* h2, uint8_t flags, int32_t id, const uint8_t* d, size_t n,
                   void* user) {
  ((peer_t*)user)->data += n;
  return 0;
}

static int on_frame(nghttp2_session* h2, const nghttp2_frame* f, void* user) {
  if (f->hd.type == NGHTTP2_GOAWAY) ((peer_t*)user)->goaway = true;
  return 0;
}

static int on_stream_close(nghttp2_session* h2, int32_t id, uint32_t err, void* user) {
  ((peer_t*)user)->stream_closed = true;
  return 0;
}

static const uint8_t g_body[5] = {0, 0, 0, 0, 0};  // one empty message

static ssize_t body_read(nghttp2_session* h2, int32_t id, uint8_t* buf, size_t len,
                         uint32_t* flags, nghttp2_data_source* src, void* user) {
  memcpy(buf, g_body, sizeof(g_body));
  *flags |= NGHTTP2_DATA_FLAG_EOF;
  return (ssize_t)sizeof(g_body);
}

static bool send_all(nghttp2_session* h2, int fd) {
  const uint8_t* d;
  ssize_t n;
  while ((n = nghttp2_session_mem_send(h2, &d)) > 0) {
    for (ssize_t off = 0; off < n;) {
      ssize_t k = write(fd, d + off, (size_t)(n - off));
      if (k <= 0) return false;
      off += k;
    }
  }
  return true;
}

#define NV(n, v) {(uint8_t*)(n), (uint8_t*)(v), sizeof(n) - 1, sizeof(v) - 1, NGHTTP2_NV_FLAG_NONE}

// One call, its response not read for a while (the server closes
// meanwhile), then everything read to the connection's end.
static void* peer_main(void* arg) {
  peer_t* p = arg;
  int fd = socket(AF_UNIX, SOCK_STREAM, 0);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", p->path);
  int64_t until = cw_time_now_ms() + 5000;
  while (connect(fd, (struct sockaddr*)&sa, sizeof(sa)) != 0 && cw_time_now_ms() < until) {
    usleep(10000);
  }
  nghttp2_session_callbacks* cb;
  nghttp2_session* h2;
  nghttp2_session_callbacks_new(&cb);
  nghttp2_session_callbacks_set_on_header_callback(cb, on_header);
  nghttp2_session_callbacks_set_on_data_chunk_recv_callback(cb, on_data);
  nghttp2_session_callbacks_set_on_frame_recv_callback(cb, on_frame);
  nghttp2_session_callbacks_set_on_stream_close_callback(cb, on_stream_close);
  nghttp2_session_client_new(&h2, cb, p);
  nghttp2_session_callbacks_del(cb);
  // Windows wide open: only the socket holds the response back.
  nghttp2_settings_entry iv[] = {{NGHTTP2_SETTINGS_INITIAL_WINDOW_SIZE, (1u << 31) - 1}};
  nghttp2_submit_settings(h2, NGHTTP2_FLAG_NONE, iv, 1);
  nghttp2_session_set_local_window_size(h2, NGHTTP2_FLAG_NONE, 0, (1 << 30));
  nghttp2_nv nv[] = {NV(":method", "POST"), NV(":scheme", "http"), NV(":authority", "t"),
                     NV(":path", "/t.S/M"), NV("te", "trailers"),
                     NV("content-type", "application/grpc")};
  nghttp2_data_provider body = {.read_callback = body_read};
  nghttp2_submit_request(h2, NULL, nv, sizeof(nv) / sizeof(nv[0]), &body, p);
  (void)send_all(h2, fd);
  usleep(400 * 1000);  // the server finishes the call and closes meanwhile
  static uint8_t buf[1 << 16];
  until = cw_time_now_ms() + 5000;
  while (!(p->stream_closed && p->goaway) && cw_time_now_ms() < until) {
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 100) <= 0) continue;
    ssize_t n = read(fd, buf, sizeof(buf));
    if (n <= 0) {
      p->eof = true;
      break;
    }
    if (nghttp2_session_mem_recv(h2, buf, (size_t)n) < 0) break;
    (void)send_all(h2, fd);  // acknowledgements
  }
  nghttp2_session_del(h2);
  close(fd);
  return NULL;
}

// The server closes while a large response and its trailers are still
// queued for a client that reads slowly: all of it reaches the client, then
// GOAWAY. Until h1 the close sent only what its one flush could give the
// socket (4 MiB queued): the rest waited for the server's flusher, closed
// with the server, and the client saw the connection end after the linger
// (1 s) without the call's status.
static void run(peer_t* p) {
  char dir[] = "/tmp/cw_grpc_server_test.XXXXXX";
  assert_non_null(mkdtemp(dir));
  memset(p, 0, sizeof(*p));
  p->grpc_status = -1;
  snprintf(p->path, sizeof(p->path), "%s/s", dir);
  uv_loop_t loop;
  uv_loop_init(&loop);
  uv_timer_init(&loop, &g_close_timer);
  uv_timer_init(&loop, &g_finish_timer);
  cw_grpc_server_options_t o;
  memset(&o, 0, sizeof(o));
  cw_grpc_options_default(&o.grpc);
  assert_null(cw_grpc_server_create(&loop, p->path, &o, &svc_handlers, NULL, &g_server));
  pthread_t t;
  assert_int_equal(pthread_create(&t, NULL, peer_main, p), 0);
  uv_run(&loop, UV_RUN_DEFAULT);  // until the server's close is done
  if (!uv_is_closing((uv_handle_t*)&g_finish_timer)) uv_close((uv_handle_t*)&g_finish_timer, NULL);
  uv_run(&loop, UV_RUN_DEFAULT);
  assert_int_equal(pthread_join(t, NULL), 0);
  assert_int_equal(uv_loop_close(&loop), 0);
  unlink(p->path);
  rmdir(dir);
}

static void test_close_sends_the_rest_of_a_large_response(void** state) {
  peer_t p;
  g_finish_late = false;
  run(&p);
  assert_int_equal(p.data, MSGS * (MSG_LEN + 5));
  assert_int_equal(p.grpc_status, CW_UNAVAILABLE);
  assert_string_equal(p.grpc_message, "bye");
  assert_true(p.goaway);
}

// A call that ends while its connection lingers (a later loop callback
// finishes it) still reaches its client. Until h1 the server's flusher was
// closed with it: the trailers stayed in the session, and the client saw
// the connection end after the linger (1 s) without the call's status.
static void test_call_finished_while_lingering(void** state) {
  peer_t p;
  g_finish_late = true;
  run(&p);
  assert_int_equal(p.data, 0);
  assert_int_equal(p.grpc_status, CW_UNAVAILABLE);
  assert_string_equal(p.grpc_message, "bye");
  assert_true(p.goaway);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_close_sends_the_rest_of_a_large_response),
      cmocka_unit_test(test_call_finished_while_lingering),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
