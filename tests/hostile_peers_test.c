// Peers that misbehave where the other suites do not look: a peer worker
// that answers a SEND's PUT with nonsense (the worker's outbound side), a
// source that failed travelling as a poisoned PUT, held `seq` requests whose
// connection goes away (docs/protocol.md "Ordering across connections"), and
// the parts of an UPLOAD refused by a drain. Each case asserts the documented
// outcome, that nothing waits forever, and that the worker still serves.
#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "cw_test_hostile.h"
#include "cw_test_launch.h"

#define T_ADMIN_WORKER_DRAIN 56
#define C_UNAVAILABLE 14
#define C_CANCELLED 1

// A client connection in a new session of `w`; its id to *out_session.
static int open_session(const worker_t* w, uint64_t* out_session) {
  int fd = conn_open(w);
  Causeway__V1__HelloReply* hr = NULL;
  hello_as(fd, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, &hr);
  *out_session = hr->session_id;
  causeway__v1__hello_reply__free_unpacked(hr, NULL);
  return fd;
}

// --- A fake peer worker on loopback ---------------------------------------------

static int listen_loopback(char* addr, size_t n) {
  int fd = socket(AF_INET, SOCK_STREAM, 0);
  assert_true(fd >= 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(fd, (struct sockaddr*)&sa, sizeof sa), 0);
  assert_int_equal(listen(fd, 4), 0);
  socklen_t len = sizeof sa;
  assert_int_equal(getsockname(fd, (struct sockaddr*)&sa, &len), 0);
  snprintf(addr, n, "127.0.0.1:%d", ntohs(sa.sin_port));
  return fd;
}

static int accept_within(int lfd, int ms) {
  struct pollfd p = {.fd = lfd, .events = POLLIN};
  if (poll(&p, 1, ms) != 1) fail_msg("the worker never connected to the fake peer");
  int fd = accept(lfd, NULL, NULL);
  assert_true(fd >= 0);
  return fd;
}

static void reply_msg(int fd, uint16_t type, uint64_t rid, uint32_t flags,
                      const ProtobufCMessage* m) {
  packed_t p = pack(m);
  hdr_t h = hdr_of(type, rid, (uint32_t)p.len, 0);
  h.flags = flags;
  assert_true(send_raw(fd, &h, p.data, p.len, NULL, 0));
  free(p.data);
}

// Takes the worker's HELLO (role WORKER) and answers it; then its PUT, whose
// request id goes to *out_rid.
static void peer_hello_then_put(int fd, uint64_t* out_rid) {
  frame_t f;
  int r = recv_frame(fd, &f, IO_TIMEOUT_MS);
  if (r != 1 || f.type != T_HELLO) fail_msg("fake peer: no HELLO (%s)", recv_result_name(r));
  Causeway__V1__HelloReply rep = CAUSEWAY__V1__HELLO_REPLY__INIT;
  rep.version = 1;
  rep.max_payload = MAX_PAYLOAD;
  rep.max_bulk = 1ull << 30;
  reply_msg(fd, T_HELLO, f.request_id, F_REPLY, &rep.base);
  frame_free(&f);
  r = recv_frame(fd, &f, IO_TIMEOUT_MS);
  if (r != 1 || f.type != T_PUT) fail_msg("fake peer: no PUT (%s, type %u)", recv_result_name(r),
                                          f.type);
  *out_rid = f.request_id;
  frame_free(&f);
}

typedef enum {
  P_ACK,            // a proper Ack: the SEND succeeds (the fake peer itself works)
  P_REQUEST,        // a PING request on the worker's outbound connection
  P_ERROR_RID0,     // ERROR with request id 0: "I could not read your frame, closing"
  P_UNKNOWN_RID,    // an Ack to a request never sent
  P_WRONG_TYPE,     // a reply of another type to the PUT's request id
  P_GARBAGE,        // bytes that are no frame
  P_CLOSE,          // the peer goes away with the PUT unanswered
} peer_act_t;

static void peer_act(int fd, peer_act_t act, uint64_t put_rid) {
  Causeway__V1__Ack ack = CAUSEWAY__V1__ACK__INIT;
  ack.id = 21;
  switch (act) {
    case P_ACK:
      reply_msg(fd, T_PUT, put_rid, F_REPLY, &ack.base);
      break;
    case P_REQUEST: {
      Causeway__V1__Ping ping_msg = CAUSEWAY__V1__PING__INIT;
      reply_msg(fd, T_PING, 77, 0, &ping_msg.base);
      break;
    }
    case P_ERROR_RID0: {
      Causeway__V1__ErrorReply er = CAUSEWAY__V1__ERROR_REPLY__INIT;
      er.code = 9999;  // no such code: UNKNOWN
      er.message = "fake peer cannot read you";
      reply_msg(fd, T_PUT, 0, F_REPLY | F_ERROR, &er.base);
      break;
    }
    case P_UNKNOWN_RID:
      reply_msg(fd, T_PUT, put_rid + 1000, F_REPLY, &ack.base);
      break;
    case P_WRONG_TYPE:
      reply_msg(fd, T_DELETE, put_rid, F_REPLY, &ack.base);
      break;
    case P_GARBAGE:
      assert_true(send_all(fd, "GET / HTTP/1.1\r\n\r\n0123456789abcdef", 34));
      break;
    case P_CLOSE:
      break;
  }
}

static void send_to(int fd, uint64_t rid, uint64_t src, const char* peer, uint64_t dst,
                    uint64_t dst_session) {
  Causeway__V1__SendRequest m = CAUSEWAY__V1__SEND_REQUEST__INIT;
  m.src_id = src;
  m.peer_address = (char*)peer;
  m.dst_id = dst;
  m.dst_session = dst_session;
  assert_true(send_msg(fd, T_SEND, rid, &m.base, NULL, 0));
}

// The worker's outbound connection to a peer is read as strictly as an
// inbound one: whatever the peer answers a PUT with, the SEND ends (an Ack,
// or an error naming the peer) and the worker drops the link; the next SEND
// connects afresh.
static void test_peer_answers_put_with_nonsense(void** state) {
  (void)state;
  static const struct {
    peer_act_t act;
    const char* what;
    const char* keywords;
  } cases[] = {
      {P_ACK, "a proper Ack", NULL},
      {P_REQUEST, "a PING request on the outbound link", "request on an outbound"},
      {P_ERROR_RID0, "ERROR with request id 0", "fake peer cannot read you"},
      {P_UNKNOWN_RID, "an Ack to an unknown request", "unknown request"},
      {P_WRONG_TYPE, "a DELETE reply to the PUT", "unknown request"},
      {P_GARBAGE, "bytes that are no frame", ""},
      {P_CLOSE, "a close with the PUT unanswered", ""},
  };
  char addr[64];
  int lfd = listen_loopback(addr, sizeof addr);
  int fd = open_hello();
  upload_f32(fd, 2, 20, 4);
  for (size_t i = 0; i < sizeof cases / sizeof cases[0]; ++i) {
    uint64_t rid = 10 + i;
    send_to(fd, rid, 20, addr, 21, 4242);
    int pfd = accept_within(lfd, IO_TIMEOUT_MS);
    uint64_t put_rid = 0;
    peer_hello_then_put(pfd, &put_rid);
    peer_act(pfd, cases[i].act, put_rid);
    char what[128];
    snprintf(what, sizeof what, "SEND answered with %s", cases[i].what);
    if (cases[i].act == P_ACK) {
      frame_t f;
      expect_reply(fd, what, T_SEND, rid, &f);
      frame_free(&f);
      close(pfd);
    } else {
      if (cases[i].act == P_CLOSE) close(pfd);
      expect_error(fd, what, rid, C_UNAVAILABLE, cases[i].keywords);
      // The worker gave up the link (it may have answered a violation first).
      if (cases[i].act != P_CLOSE) {
        expect_only_errors_then_closed(pfd, what);
        close(pfd);
      }
    }
    ping(fd, 100 + i);
    fprintf(stderr, "[hostile]   %s -> as documented\n", what);
  }
  close(lfd);
  close(fd);
  assert_serving(&g_plain);
}

// --- A failed source travels as a poisoned PUT -----------------------------------

// An UPLOAD in parts whose second part is out of place: buffer `id` fails
// with INVALID_ARGUMENT "... does not follow ...".
static void failed_buffer(int fd, uint64_t rid, uint64_t id) {
  int64_t dims[1] = {4};
  uint8_t bytes[8] = {0};
  Causeway__V1__UploadRequest m = upload_req(id, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  m.part = CAUSEWAY__V1__UPLOAD_PART__UPLOAD_FIRST;
  assert_true(send_msg(fd, T_UPLOAD, rid, &m.base, bytes, 8));
  frame_t f;
  expect_reply(fd, "first part", T_UPLOAD, rid, &f);
  frame_free(&f);
  m.part = CAUSEWAY__V1__UPLOAD_PART__UPLOAD_LAST;
  m.part_offset = 4;  // 8 are in
  assert_true(send_msg(fd, T_UPLOAD, rid + 1, &m.base, bytes, 8));
  expect_error(fd, "a last part out of place", rid + 1, C_INVALID_ARGUMENT, "does not follow");
}

// SEND of a buffer that failed: the peer's copy holds the same error (a
// reader there hears why), and the SEND answers with it.
static void test_send_of_failed_source(void** state) {
  (void)state;
  int a = open_hello();
  failed_buffer(a, 2, 30);
  uint64_t session_b = 0;
  int b = open_session(&g_plain, &session_b);
  Causeway__V1__ExpectRequest e = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
  e.buffer_id = 31;
  assert_true(send_msg(b, T_EXPECT, 2, &e.base, NULL, 0));
  frame_t f;
  expect_reply(b, "EXPECT 31", T_EXPECT, 2, &f);
  frame_free(&f);
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = 31;
  assert_true(send_msg(b, T_AWAIT, 3, &aw.base, NULL, 0));  // waits for the PUT
  send_to(a, 4, 30, g_plain.addr, 31, session_b);
  expect_error(a, "SEND of a failed buffer", 4, C_INVALID_ARGUMENT, "does not follow");
  expect_error(b, "AWAIT of the poisoned copy", 3, C_INVALID_ARGUMENT, "does not follow");
  // A COPY of it says the same; a COPY of a buffer that does not exist says so.
  Causeway__V1__CopyRequest cp = CAUSEWAY__V1__COPY_REQUEST__INIT;
  cp.src_id = 30;
  cp.dst_id = 32;
  assert_true(send_msg(a, T_COPY, 5, &cp.base, NULL, 0));
  expect_error(a, "COPY of a failed buffer", 5, C_INVALID_ARGUMENT, "30");
  ping(a, 6);
  ping(b, 4);
  close(a);
  close(b);
  assert_serving(&g_plain);
}

// --- Held requests whose connection goes ------------------------------------------

static void delete_seq(int fd, uint64_t rid, uint64_t seq, const uint64_t* ids, size_t n) {
  Causeway__V1__DeleteRequest m = CAUSEWAY__V1__DELETE_REQUEST__INIT;
  m.ids = (uint64_t*)ids;
  m.n_ids = n;
  m.seq = seq;
  assert_true(send_msg(fd, T_DELETE, rid, &m.base, NULL, 0));
}

static void expect_ack(int fd, const char* what, uint16_t type, uint64_t rid) {
  frame_t f;
  expect_reply(fd, what, type, rid, &f);
  frame_free(&f);
}

// A client connection's held request whose connection closes: its turn
// passes unapplied when it comes (a later request with that seq is a
// duplicate). The controller's: forgotten at once, its seq left for the
// client to fill (which then applies).
static void test_held_requests_of_closed_connections(void** state) {
  (void)state;
  uint64_t session = 0;
  int c = open_session(&g_plain, &session);

  // Another client connection of the session: DELETE seq 2 is held (next is 1).
  int c2 = conn_open(&g_plain);
  hello_as(c2, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, session, NULL);
  delete_seq(c2, 2, 2, NULL, 0);
  ping(c2, 3);  // read, so held
  close(c2);
  delete_seq(c, 2, 1, NULL, 0);
  expect_ack(c, "DELETE seq 1", T_DELETE, 2);
  delete_seq(c, 3, 2, NULL, 0);
  expect_error(c, "seq 2 again after its connection closed", 3, C_INVALID_ARGUMENT, "duplicate");

  // The controller's link (HELLO role CONTROLLER into the session): its
  // DELETE seq 4 is held (next is 3), then the link closes.
  int k = conn_open(&g_plain);
  hello_as(k, NULL, CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, session, NULL);
  delete_seq(k, 2, 4, NULL, 0);
  ping(k, 3);
  close(k);
  sleep_ms(50);  // the worker sees the close
  delete_seq(c, 4, 3, NULL, 0);
  expect_ack(c, "DELETE seq 3", T_DELETE, 4);
  delete_seq(c, 5, 4, NULL, 0);
  expect_ack(c, "seq 4 from the client after the controller's link closed", T_DELETE, 5);
  delete_seq(c, 6, 5, NULL, 0);
  expect_ack(c, "DELETE seq 5", T_DELETE, 6);

  // A held UPLOAD whose connection closes halfway through its bytes: its
  // turn passes, the buffer never appears, later requests go on.
  int c3 = conn_open(&g_plain);
  hello_as(c3, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, session, NULL);
  int64_t dims[1] = {1024};
  Causeway__V1__UploadRequest up = upload_req(40, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  up.seq = 7;  // next is 6
  packed_t p = pack(&up.base);
  hdr_t h = hdr_of(T_UPLOAD, 2, (uint32_t)p.len, 4096);
  static uint8_t some[1000];
  assert_true(send_raw(c3, &h, p.data, p.len, some, sizeof some));
  free(p.data);
  sleep_ms(200);  // its header read: held, its bytes arriving
  close(c3);
  sleep_ms(50);
  delete_seq(c, 7, 6, NULL, 0);
  expect_ack(c, "DELETE seq 6", T_DELETE, 7);
  delete_seq(c, 8, 7, NULL, 0);
  expect_error(c, "seq 7 again after its UPLOAD's connection closed", 8, C_INVALID_ARGUMENT,
               "duplicate");
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = 40;
  aw.seq = 8;
  assert_true(send_msg(c, T_AWAIT, 9, &aw.base, NULL, 0));
  expect_error(c, "AWAIT of the upload that never finished", 9, C_NOT_FOUND, "40");
  ping(c, 10);
  close(c);
  assert_serving(&g_plain);
}

// --- A drain refuses the later parts of an UPLOAD in parts -----------------------

static void worker_drain(int k, uint64_t rid, bool drain) {
  Causeway__V1__AdminWorkerDrainRequest m = CAUSEWAY__V1__ADMIN_WORKER_DRAIN_REQUEST__INIT;
  m.drain = drain;
  assert_true(send_msg(k, T_ADMIN_WORKER_DRAIN, rid, &m.base, NULL, 0));
  expect_ack(k, drain ? "ADMIN_WORKER_DRAIN" : "ADMIN_WORKER_DRAIN (undrain)",
             T_ADMIN_WORKER_DRAIN, rid);
}

// The first part came before the drain; the last is refused by it
// (FAILED_PRECONDITION, naming the drain). Nothing can complete the buffer
// now, so a reader of it hears the drain (as of any id a refused request
// would have made) instead of waiting for the connection to close.
static void test_drain_refuses_a_later_part(void** state) {
  (void)state;
  int k = conn_open(&g_plain);
  hello_as(k, NULL, CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, 0, NULL);
  int fd = open_hello();
  int64_t dims[1] = {4};
  uint8_t bytes[8] = {0};
  Causeway__V1__UploadRequest m = upload_req(60, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  m.part = CAUSEWAY__V1__UPLOAD_PART__UPLOAD_FIRST;
  assert_true(send_msg(fd, T_UPLOAD, 2, &m.base, bytes, 8));
  expect_ack(fd, "first part", T_UPLOAD, 2);
  worker_drain(k, 2, true);
  m.part = CAUSEWAY__V1__UPLOAD_PART__UPLOAD_LAST;
  m.part_offset = 8;
  assert_true(send_msg(fd, T_UPLOAD, 3, &m.base, bytes, 8));
  expect_error(fd, "last part while draining", 3, C_FAILED_PRECONDITION, "draining");
  // A later part of a buffer with no upload under way: refused as well,
  // and no buffer made for it (as outside a drain).
  Causeway__V1__UploadRequest stray = m;
  stray.buffer_id = 61;
  stray.part = CAUSEWAY__V1__UPLOAD_PART__UPLOAD_MORE;
  assert_true(send_msg(fd, T_UPLOAD, 6, &stray.base, bytes, 8));
  expect_error(fd, "a stray later part while draining", 6, C_FAILED_PRECONDITION, "draining");
  Causeway__V1__AwaitRequest aw = CAUSEWAY__V1__AWAIT_REQUEST__INIT;
  aw.buffer_id = 60;
  assert_true(send_msg(fd, T_AWAIT, 4, &aw.base, NULL, 0));
  frame_t f;
  int r = recv_frame(fd, &f, 3000);
  worker_drain(k, 3, false);  // whatever happened: the worker takes work again
  if (r != 1) fail_msg("AWAIT of the buffer whose last part the drain refused: %s",
                       recv_result_name(r));
  Causeway__V1__ErrorReply* er = NULL;
  if (f.flags == (F_REPLY | F_ERROR)) {
    er = causeway__v1__error_reply__unpack(NULL, f.payload_len, f.payload);
  }
  if (!er || er->code != C_FAILED_PRECONDITION || !strstr(er->message, "draining")) {
    fail_msg("AWAIT of the buffer whose last part the drain refused: flags 0x%x, %s", f.flags,
             er ? er->message : "(no error)");
  }
  causeway__v1__error_reply__free_unpacked(er, NULL);
  frame_free(&f);
  aw.buffer_id = 61;
  assert_true(send_msg(fd, T_AWAIT, 7, &aw.base, NULL, 0));
  expect_error(fd, "AWAIT of the stray part's buffer", 7, C_NOT_FOUND, "61");
  ping(fd, 5);
  close(fd);
  close(k);
  assert_serving(&g_plain);
}

// --- A paused session's launches whose connection closes ------------------------

#define T_ADMIN_HOLD 55

static const char k_mlir[] =
    "module @hostile_peers {\n"
    "  func.func public @main(%arg0: tensor<4xf32>) -> tensor<4xf32> {\n"
    "    %0 = stablehlo.add %arg0, %arg0 : tensor<4xf32>\n"
    "    return %0 : tensor<4xf32>\n"
    "  }\n"
    "}\n";

static void hold(int k, uint64_t rid, uint64_t session, bool on) {
  Causeway__V1__AdminHoldRequest m = CAUSEWAY__V1__ADMIN_HOLD_REQUEST__INIT;
  m.session_id = session;
  m.hold = on;
  assert_true(send_msg(k, T_ADMIN_HOLD, rid, &m.base, NULL, 0));
  expect_ack(k, on ? "ADMIN_HOLD" : "ADMIN_HOLD (release)", T_ADMIN_HOLD, rid);
}

static void launch_1(int fd, uint64_t rid, uint64_t exe, uint64_t arg, uint64_t out) {
  cw_test_launch_t l;
  cw_test_launch_build(&l, exe, &arg, 1, out, 0);
  l.req.launch_id = rid;
  assert_true(send_msg(fd, T_LAUNCH, rid, &l.req.base, NULL, 0));
}

static void expect_launches(int fd, uint64_t rid, uint64_t queued, uint64_t held,
                            const char* when) {
  Causeway__V1__Stats* st = stats(fd, rid);
  uint64_t q = st->launches_queued, h = st->launches_held;
  causeway__v1__stats__free_unpacked(st, NULL);
  if (q != queued || h != held) {
    fail_msg("%s: %" PRIu64 " launches queued, %" PRIu64 " held; want %" PRIu64 " and %" PRIu64,
             when, q, h, queued, held);
  }
}

// A client connection `c` of a new session that compiled k_mlir as `exe`,
// and `k`, a controller's link in that session (which keeps it).
static void session_with_program(uint64_t* session, int* c, int* k, uint64_t exe) {
  *c = open_session(&g_plain, session);
  *k = conn_open(&g_plain);
  hello_as(*k, NULL, CAUSEWAY__V1__ROLE__ROLE_CONTROLLER, *session, NULL);
  Causeway__V1__CompileRequest cm = CAUSEWAY__V1__COMPILE_REQUEST__INIT;
  cm.exe_id = exe;
  cm.format = "mlir";
  cm.code.data = (uint8_t*)k_mlir;
  cm.code.len = strlen(k_mlir);
  assert_true(send_msg(*c, T_COMPILE, 2, &cm.base, NULL, 0));
  expect_ack(*c, "COMPILE", T_COMPILE, 2);
}

// ADMIN_HOLD keeps a session's launches queued on their connections. The
// connection that sent them closing while the session stays (the
// controller's link keeps it): they fail CANCELLED (their outputs say so to
// the session's other connections) and leave nothing queued or held behind,
// so the worker's counts (what `causeway drain --wait` reads) go back to 0.
static void test_paused_launches_of_a_closed_connection(void** state) {
  (void)state;
  uint64_t session = 0;
  int c = -1, k = -1;
  session_with_program(&session, &c, &k, 700);
  upload_f32(c, 3, 10, 4);
  expect_launches(k, 2, 0, 0, "before the hold");
  // A hold names the session of the connection it comes on.
  Causeway__V1__AdminHoldRequest other = CAUSEWAY__V1__ADMIN_HOLD_REQUEST__INIT;
  other.session_id = session + 1;
  other.hold = true;
  assert_true(send_msg(k, T_ADMIN_HOLD, 7, &other.base, NULL, 0));
  expect_error(k, "ADMIN_HOLD of another session", 7, C_INVALID_ARGUMENT,
               "this connection is in session");
  hold(k, 3, session, true);
  launch_1(c, 4, 700, 10, 11);
  launch_1(c, 5, 700, 11, 12);
  expect_launches(c, 6, 2, 2, "two launches of the paused session");
  close(c);
  sleep_ms(100);
  expect_launches(k, 4, 0, 0, "after their connection closed");
  int c2 = conn_open(&g_plain);
  hello_as(c2, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, session, NULL);
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = 12;
  assert_true(send_msg(c2, T_DOWNLOAD, 2, &d.base, NULL, 0));
  expect_error(c2, "DOWNLOAD of a cancelled launch's output", 2, C_CANCELLED, "paused");
  hold(k, 5, session, false);
  launch_1(c2, 3, 700, 10, 13);
  expect_ack(c2, "a launch after the release", T_LAUNCH, 3);
  close(c2);
  close(k);
  assert_serving(&g_plain);
}

// A launch still queued when its connection closes runs when it can (here:
// when its input, an EXPECTed buffer, is filled or fails), so the worker counts
// it: launches_queued, and a draining worker is not idle meanwhile. Until
// session 49 the count walked the open connections only, and a drain's
// `idle` said yes with the launch still to run.
static void test_queued_launch_of_a_closed_connection_counts(void** state) {
  (void)state;
  uint64_t session = 0;
  int c = -1, k = -1;
  session_with_program(&session, &c, &k, 710);
  Causeway__V1__ExpectRequest e = CAUSEWAY__V1__EXPECT_REQUEST__INIT;
  e.buffer_id = 40;
  assert_true(send_msg(c, T_EXPECT, 3, &e.base, NULL, 0));
  expect_ack(c, "EXPECT 40", T_EXPECT, 3);
  launch_1(c, 4, 710, 40, 41);  // waits for 40
  expect_launches(c, 5, 1, 0, "a launch waiting for its input");
  close(c);
  sleep_ms(100);
  expect_launches(k, 2, 1, 0, "the same after its connection closed");
  worker_drain(k, 3, true);
  Causeway__V1__Stats* st = stats(k, 4);
  bool idle = st->idle;
  causeway__v1__stats__free_unpacked(st, NULL);
  if (idle) fail_msg("a draining worker with a launch still queued said it was idle");
  // Its input's PUT will not come (as a client says when its SEND failed):
  // the launch fails, and nothing is left.
  Causeway__V1__ErrorReply why = CAUSEWAY__V1__ERROR_REPLY__INIT;
  why.code = C_UNAVAILABLE;
  why.message = "the SEND to 40 failed";
  e.error = &why;
  int c2 = conn_open(&g_plain);
  hello_as(c2, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, session, NULL);
  assert_true(send_msg(c2, T_EXPECT, 2, &e.base, NULL, 0));
  expect_ack(c2, "EXPECT 40 with an error", T_EXPECT, 2);
  sleep_ms(100);
  expect_launches(k, 6, 0, 0, "after its input failed");
  st = stats(k, 7);
  idle = st->idle;
  causeway__v1__stats__free_unpacked(st, NULL);
  if (!idle) fail_msg("a draining worker with nothing left said it was not idle");
  worker_drain(k, 8, false);
  close(c2);
  close(k);
  assert_serving(&g_plain);
}

// --- An in-order connection's large held UPLOAD --------------------------------

// A worker whose held upload bytes are capped at 1,000 (its hard limit is
// twice that). One connection of the session sends, in its own order,
// UPLOAD seq 2 (400 bytes: held, seq 1 has not come) and UPLOAD seq 3 (1,800
// bytes); another then sends seq 1. Both uploads apply and read back. Until
// session 47 the second was refused as breaking seq order ("1 requests (400
// bytes) already wait for seq 1") and its connection closed, though the
// connection kept its order.
static void upload_seq(int fd, uint64_t rid, uint64_t id, int n, uint64_t seq) {
  int64_t dims[1] = {n};
  Causeway__V1__UploadRequest m = upload_req(id, CAUSEWAY__V1__DTYPE__DTYPE_F32, dims, 1);
  m.seq = seq;
  float* data = malloc(sizeof(float) * (size_t)n);
  assert_non_null(data);
  for (int i = 0; i < n; ++i) data[i] = (float)(id * 1000 + (uint64_t)i);
  assert_true(send_msg(fd, T_UPLOAD, rid, &m.base, data, sizeof(float) * (size_t)n));
  free(data);
}

static void expect_download(int fd, uint64_t rid, uint64_t id, int n, uint64_t seq) {
  Causeway__V1__DownloadRequest d = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  d.buffer_id = id;
  d.seq = seq;
  assert_true(send_msg(fd, T_DOWNLOAD, rid, &d.base, NULL, 0));
  frame_t f;
  expect_reply(fd, "DOWNLOAD of a large held upload", T_DOWNLOAD, rid, &f);
  assert_int_equal(f.bulk_len, sizeof(float) * (size_t)n);
  const float* got = (const float*)f.bulk;
  for (int i = 0; i < n; ++i) assert_true(got[i] == (float)(id * 1000 + (uint64_t)i));
  frame_free(&f);
}

static void test_large_held_upload_in_order(void** state) {
  (void)state;
  const char* plugin = hostile_plugin();
  assert_non_null(plugin);
  worker_t w = {.label = "worker with 1000 held bytes"};
  const char* args[] = {"--plugin", plugin, "--devices", "1", "--listen", "127.0.0.1:0", NULL};
  const char* env[] = {"CAUSEWAY_MAX_HELD_BYTES=1000", NULL};
  daemon_spec_t spec = {.bin = hostile_worker_bin(), .args = args, .env = env,
                        .listen_prefix = "causeway-worker listening on "};
  assert_true(daemon_start(&w, &spec));
  worker_t* ws[] = {&w};
  uint64_t session = 0;
  int c = open_session(&w, &session);
  upload_seq(c, 2, 60, 100, 2);
  ping(c, 4);  // read, so held
  upload_seq(c, 3, 61, 450, 3);
  // Read and held too (the worker reads no more of c after it, over its
  // cap): on the old code refused, c closed.
  sleep_ms(300);
  int c2 = conn_open(&w);
  hello_as(c2, NULL, CAUSEWAY__V1__ROLE__ROLE_CLIENT, session, NULL);
  delete_seq(c2, 2, 1, NULL, 0);
  expect_ack(c2, "DELETE seq 1", T_DELETE, 2);
  expect_ack(c, "UPLOAD seq 2 (400 bytes, held)", T_UPLOAD, 2);
  expect_ack(c, "UPLOAD seq 3 (1,800 bytes, held behind 400)", T_UPLOAD, 3);
  expect_download(c, 5, 60, 100, 4);
  expect_download(c, 6, 61, 450, 5);
  close(c2);
  close(c);
  daemons_sigterm_clean_exit(ws, 1);
}

int main(int argc, char** argv) {
  hostile_init(argc, argv);
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_peer_answers_put_with_nonsense),
      cmocka_unit_test(test_send_of_failed_source),
      cmocka_unit_test(test_held_requests_of_closed_connections),
      cmocka_unit_test(test_drain_refuses_a_later_part),
      cmocka_unit_test(test_paused_launches_of_a_closed_connection),
      cmocka_unit_test(test_queued_launch_of_a_closed_connection_counts),
      cmocka_unit_test(test_large_held_upload_in_order),
      // Last: SIGTERM the workers and require exit 0 (ASan: no leaks).
      cmocka_unit_test(hostile_test_sigterm_clean_exit),
  };
  return cmocka_run_group_tests_name("hostile_peers", tests, hostile_group_setup,
                                     hostile_group_teardown);
}
