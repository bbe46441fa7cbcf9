// Unit tests of cw_net.c on a real loop (fixture: cw_net_test_fixture.h):
// framing (frames split byte by byte, many in one write, replies matched by
// id, replies nobody asked for), limits before and after HELLO,
// frames-per-wakeup fairness, batched writes and the prepare hook, bulk
// destinations and reply bulk, hold_reading, and the close paths.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <cmocka.h>

#include "cw_messages.h"
#include "cw_net_test_fixture.h"

// --- Framing -------------------------------------------------------------------------

static void test_frames_split_byte_by_byte(void** state) {
  start_server();
  raw_t* r = raw_connect();
  WAIT(fx.num_peers == 1);
  peer_t* p = last_peer();
  buf_t b = {0};
  buf_hello(&b, "sesame", ROLE_CLIENT, 0, "bytewise");
  buf_ping(&b, 11, "one");
  buf_ping(&b, 12, "");
  buf_ping(&b, 13, "three");
  // Every byte its own write, read by the server before the next is sent.
  for (size_t i = 0; i < b.len; ++i) {
    assert_true(raw_send(r, b.p + i, 1));
    WAIT(p->bytes_in == i + 1);
  }
  buf_free(&b);
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  frame_free(&f);
  raw_expect_pong(r, 11, "one");
  raw_expect_pong(r, 12, "");
  raw_expect_pong(r, 13, "three");
  assert_int_equal(fx.num_calls, 3);
  for (int i = 0; i < 3; ++i) assert_int_equal(fx.calls[i].rid, 11 + i);
}

static void test_many_frames_in_one_write(void** state) {
  start_server();
  raw_t* r = raw_connect();
  buf_t b = {0};
  buf_hello(&b, "sesame", ROLE_CLIENT, 0, "burst");
  char data[16];
  for (int i = 0; i < 150; ++i) {  // more than frames_per_wakeup (64)
    snprintf(data, sizeof(data), "p%d", i);
    buf_ping(&b, 100 + (uint64_t)i, data);
  }
  raw_send_buf(r, &b);
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  frame_free(&f);
  for (int i = 0; i < 150; ++i) {
    snprintf(data, sizeof(data), "p%d", i);
    raw_expect_pong(r, 100 + (uint64_t)i, data);
  }
  assert_int_equal(fx.num_calls, 150);
  for (int i = 0; i < 150; ++i) assert_int_equal(fx.calls[i].rid, 100 + i);
}

static bool all_done(const reply_t* rs, int n) {
  for (int k = 0; k < n; ++k) {
    if (!rs[k].done) return false;
  }
  return true;
}

// Replies complete the request with their id, whatever order they come in:
// 60 outstanding (the index by id grows from 16 buckets to 64 meanwhile),
// answered last first.
static void test_reply_completes_request_by_id(void** state) {
  enum { N = 60 };
  start_server();
  start_client("sesame");
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client(fx.path, 0, o);
  static reply_t rs[N];
  memset(rs, 0, sizeof(rs));
  for (int i = 0; i < N; ++i) request_ping(conn, "defer", &rs[i]);
  WAIT(fx.num_peers == 1 && last_peer()->num_deferred == N);
  peer_t* p = last_peer();
  assert_int_equal(cw_net_conn_role(p->conn), ROLE_CLIENT);
  assert_string_equal(cw_net_conn_name(p->conn), "cli");  // named by its HELLO
  // Arrival k is answered "dk", last first.
  for (int k = N - 1; k >= 0; --k) {
    char data[8];
    snprintf(data, sizeof(data), "d%d", k);
    Causeway__V1__Ping ping = CAUSEWAY__V1__PING__INIT;
    ping.data.data = (uint8_t*)data;
    ping.data.len = strlen(data);
    cw_net_conn_reply(p->conn, CW_MSG_PING, p->deferred[k], &ping.base);
  }
  WAIT(all_done(rs, N));
  for (int k = 0; k < N; ++k) {
    char want[8];
    snprintf(want, sizeof(want), "d%d", k);
    assert_int_equal(rs[k].code, CW_OK);
    assert_int_equal(rs[k].data_len, strlen(want));
    assert_memory_equal(rs[k].data, want, rs[k].data_len);
    assert_int_equal(rs[k].order, N - 1 - k);
  }
  assert_int_equal(o->closes, 0);
}

// A reply over the payload limit is never sent: the peer would refuse it
// and drop the connection (a controller's status of many sessions did).
// The requester gets RESOURCE_EXHAUSTED naming the sizes, and the
// connection keeps serving.
static void test_oversize_reply_becomes_error(void** state) {
  start_server();
  start_client("sesame");
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client(fx.path, 0, o);
  static reply_t rs[2];
  memset(rs, 0, sizeof(rs));
  request_ping(conn, "defer", &rs[0]);
  request_ping(conn, "defer", &rs[1]);
  WAIT(fx.num_peers == 1 && last_peer()->num_deferred == 2);
  peer_t* p = last_peer();
  static uint8_t big[4097];
  Causeway__V1__Ping ping = CAUSEWAY__V1__PING__INIT;
  ping.data.data = big;
  ping.data.len = sizeof(big);  // packed: a few bytes over 4096
  cw_net_conn_reply(p->conn, CW_MSG_PING, p->deferred[0], &ping.base);
  ping.data.data = (uint8_t*)"ok";
  ping.data.len = 2;
  cw_net_conn_reply(p->conn, CW_MSG_PING, p->deferred[1], &ping.base);
  WAIT(all_done(rs, 2));
  assert_int_equal(rs[0].code, CW_RESOURCE_EXHAUSTED);
  assert_non_null(strstr(rs[0].msg, "PING reply of 4100 bytes exceeds the payload limit of "
                                    "4096 bytes"));
  assert_int_equal(rs[1].code, CW_OK);
  assert_int_equal(rs[1].data_len, 2);
  assert_int_equal(o->closes, 0);
}

// A reply nobody asked for: an outbound connection closes (its requests
// fail with why); an accepted one gets a violation.
static void test_unknown_reply_id(void** state) {
  start_client("sesame");
  raw_listen();
  for (int wrong_type = 0; wrong_type < 2; ++wrong_type) {
    out_t* o = new_out();
    reply_t a = {0};
    cw_net_conn_t* conn;
    raw_t* s = connect_raw_peer(0, o, &a, &conn);
    raw_answer_hello(s);
    frame_t f;
    raw_next(s, &f);
    assert_int_equal(f.h.type, CW_MSG_PING);
    uint64_t rid = f.h.request_id;
    frame_free(&f);
    // Either an id never sent, or the right id with another type.
    Causeway__V1__Ping ping = CAUSEWAY__V1__PING__INIT;
    Causeway__V1__ArrayInfo ai = CAUSEWAY__V1__ARRAY_INFO__INIT;
    buf_t b = {0};
    if (wrong_type) buf_frame(&b, CW_MSG_DOWNLOAD, CW_FRAME_REPLY, rid, &ai.base, NULL, 0);
    else buf_frame(&b, CW_MSG_PING, CW_FRAME_REPLY, 999, &ping.base, NULL, 0);
    raw_send_buf(s, &b);
    WAIT(o->closes == 1);
    char want[128];
    snprintf(want, sizeof(want), "%s reply to unknown request %llu",
             wrong_type ? "DOWNLOAD" : "PING", wrong_type ? (unsigned long long)rid : 999ull);
    assert_int_equal(o->close_code, CW_UNAVAILABLE);
    assert_string_equal(o->close_msg, want);
    assert_true(a.done);
    assert_int_equal(a.code, CW_UNAVAILABLE);
    char want_req[200];
    snprintf(want_req, sizeof(want_req), "connection to srvname closed: %s", want);
    assert_string_equal(a.msg, want_req);
    raw_expect_eof(s);
    WAIT(o->freed);  // nobody kept a reference
  }

  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  Causeway__V1__Ping ping = CAUSEWAY__V1__PING__INIT;
  buf_t b = {0};
  buf_frame(&b, CW_MSG_PING, CW_FRAME_REPLY, 77, &ping.base, NULL, 0);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_PING, 77, CW_INVALID_ARGUMENT, "unexpected PING reply");
  raw_expect_eof(r);
  assert_int_equal(p->calls, 0);
}

// --- Limits --------------------------------------------------------------------------

// A HELLO from `name` whose payload is exactly `size` bytes.
static void buf_hello_sized(buf_t* b, size_t size) {
  char name[512];
  for (size_t n = 0; n < sizeof(name) - 1; ++n) {
    memset(name, 'n', n);
    name[n] = 0;
    Causeway__V1__HelloRequest h;
    cw_hello_request_fill(&h, ROLE_CLIENT, "sesame", 0, name);
    if (protobuf_c_message_get_packed_size(&h.base) == size) {
      buf_frame(b, CW_MSG_HELLO, 0, 1, &h.base, NULL, 0);
      return;
    }
  }
  fail_msg("no HELLO of %zu bytes", size);
}

// A PING whose payload is exactly `size` bytes.
static void buf_ping_sized(buf_t* b, uint64_t rid, size_t size) {
  char* data = malloc(size + 1);
  for (size_t n = 0; n < size; ++n) {
    memset(data, 'q', n);
    data[n] = 0;
    Causeway__V1__Ping p = CAUSEWAY__V1__PING__INIT;
    p.data.data = (uint8_t*)data;
    p.data.len = n;
    if (protobuf_c_message_get_packed_size(&p.base) == size) {
      buf_frame(b, CW_MSG_PING, 0, rid, &p.base, NULL, 0);
      free(data);
      return;
    }
  }
  free(data);
  fail_msg("no PING of %zu bytes", size);
}

static void test_prehello_limits(void** state) {
  start_server();
  // A request before HELLO is refused, then the connection closes...
  raw_t* r = raw_connect();
  raw_ping(r, 5, "early");
  raw_expect_error(r, CW_MSG_PING, 5, CW_FAILED_PRECONDITION, "PING before HELLO");
  raw_expect_eof(r);
  // ...whatever length it declares (refused before its length is checked).
  r = raw_connect();
  buf_t b = {0};
  buf_header(&b, CW_MSG_PING, 0, 6, 100000, 0);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_PING, 6, CW_FAILED_PRECONDITION, "PING before HELLO");
  raw_expect_eof(r);
  // A HELLO over the pre-HELLO payload limit (256).
  r = raw_connect();
  buf_hello_sized(&b, 257);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_HELLO, 1, CW_RESOURCE_EXHAUSTED,
                   "HELLO payload of 257 bytes exceeds the limit of 256 bytes");
  raw_expect_eof(r);
  // Exactly at the limit is fine, and after HELLO the limits rise: a
  // 300-byte PING passes.
  r = raw_connect();
  buf_hello_sized(&b, 256);
  raw_send_buf(r, &b);
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  frame_free(&f);
  buf_ping_sized(&b, 8, 300);
  raw_send_buf(r, &b);
  raw_next(r, &f);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  assert_int_equal(f.h.request_id, 8);
  assert_int_equal(f.h.payload_len, 300);
  frame_free(&f);
  assert_int_equal(fx.num_calls, 1);  // only that PING reached a handler
  assert_int_equal(fx.num_peers, 4);
  for (int i = 0; i < 3; ++i) {
    WAIT(fx.peers[i]->closes == 1);
    assert_int_equal(fx.peers[i]->calls, 0);
  }
}

static void test_post_hello_limits(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  // A payload of exactly max_payload is served; one byte more is a violation.
  buf_t b = {0};
  buf_ping_sized(&b, 9, 4096);
  raw_send_buf(r, &b);
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  assert_int_equal(f.h.payload_len, 4096);
  frame_free(&f);
  buf_header(&b, CW_MSG_PING, 0, 10, 4097, 0);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_PING, 10, CW_RESOURCE_EXHAUSTED,
                   "PING payload of 4097 bytes exceeds the limit of 4096 bytes");
  raw_expect_eof(r);
  assert_int_equal(p->calls, 1);
  // Bulk over max_bulk (declared only: refused from the header).
  r = raw_ready(7, &p);
  buf_header(&b, CW_MSG_UPLOAD, 0, 11, 0, (8u << 20) + 1);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_UPLOAD, 11, CW_RESOURCE_EXHAUSTED,
                   "UPLOAD bulk of 8388609 bytes exceeds the limit of 8388608 bytes");
  raw_expect_eof(r);
  // Bulk on a type that carries none.
  r = raw_ready(7, &p);
  buf_header(&b, CW_MSG_PING, 0, 12, 0, 10);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_PING, 12, CW_INVALID_ARGUMENT, "PING frames carry no bulk bytes");
  raw_expect_eof(r);
  assert_int_equal(fx.num_calls, 1);
}

// A peer flooding frames does not starve another: with frames_per_wakeup 4,
// each is handled at most 4 frames per loop turn and both progress in the
// same turns.
static void test_frames_per_wakeup_fairness(void** state) {
  fx.sopts.frames_per_wakeup = 4;
  start_server();
  peer_t *pa, *pb;
  raw_t* a = raw_ready(0, &pa);
  raw_t* b = raw_ready(0, &pb);
  buf_t buf = {0};
  for (int i = 0; i < 400; ++i) buf_ping(&buf, 1000 + (uint64_t)i, "a");
  raw_send_buf(a, &buf);
  WAIT(pa->calls >= 1);  // a's flood is being handled
  int first_b = fx.num_calls;
  for (int i = 0; i < 20; ++i) buf_ping(&buf, 2000 + (uint64_t)i, "b");
  raw_send_buf(b, &buf);
  WAIT(pb->calls == 20);
  assert_true(pa->calls < 400);  // b did not wait for a's backlog
  // In every turn b's frames were handled, a's were too.
  for (int i = first_b; i < fx.num_calls; ++i) {
    if (fx.calls[i].peer != pb->id) continue;
    bool a_too = false;
    for (int j = 0; j < fx.num_calls && !a_too; ++j) {
      a_too = fx.calls[j].peer == pa->id && fx.calls[j].turn == fx.calls[i].turn;
    }
    assert_true(a_too);
  }
  WAIT(pa->calls == 400);
  assert_true(pa->max_turn_calls <= 4);
  assert_true(pb->max_turn_calls <= 4);
  for (int i = 0; i < 20; ++i) raw_expect_pong(b, 2000 + (uint64_t)i, "b");
  for (int i = 0; i < 400; ++i) raw_expect_pong(a, 1000 + (uint64_t)i, "a");
}

// --- Batched writes ------------------------------------------------------------------

// Small replies are gathered while handlers run and written together before
// the loop blocks: no handler of a burst sees an earlier reply at the peer.
static void test_small_replies_are_batched(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  fx.probe_fd = r->fd;
  int first = fx.num_calls;
  buf_t b = {0};
  for (int i = 0; i < 20; ++i) buf_ping(&b, 300 + (uint64_t)i, "s");
  raw_send_buf(r, &b);
  WAIT(raw_has_frames(r, 20));
  assert_int_equal(fx.num_calls - first, 20);
  for (int i = first; i < fx.num_calls; ++i) {
    assert_int_equal(fx.calls[i].turn, fx.calls[first].turn);  // one read, one turn
    assert_false(fx.calls[i].probed);
  }
  for (int i = 0; i < 20; ++i) raw_expect_pong(r, 300 + (uint64_t)i, "s");
}

// A frame with bulk is written at once and takes the frames gathered before
// it along, in order.
static void test_bulk_frame_takes_gathered_frames(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  fx.probe_fd = r->fd;
  int first = fx.num_calls;
  buf_t b = {0};
  buf_ping(&b, 41, "one");
  Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dl.buffer_id = 300000;
  buf_frame(&b, CW_MSG_DOWNLOAD, 0, 42, &dl.base, NULL, 0);
  buf_ping(&b, 43, "two");
  raw_send_buf(r, &b);
  raw_expect_pong(r, 41, "one");
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_DOWNLOAD);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  assert_int_equal(f.h.request_id, 42);
  assert_int_equal(f.h.bulk_len, 300000);
  for (uint64_t i = 0; i < 300000; ++i) {
    if (f.bulk[i] != pattern(i)) fail_msg("bulk byte %llu differs", (unsigned long long)i);
  }
  frame_free(&f);
  raw_expect_pong(r, 43, "two");
  assert_int_equal(fx.num_calls - first, 3);
  assert_false(fx.calls[first].probed);     // PING 41's reply was only gathered...
  assert_true(fx.download_wrote_at_once);   // ...and went out with the DOWNLOAD reply
  assert_true(fx.calls[first + 2].probed);  // before PING 43 was handled
  WAIT(fx.bulk_frees == 1);
  RUN_FOR(20);
  assert_int_equal(fx.bulk_frees, 1);
}

static void send_event(cw_net_conn_t* conn, int i) {
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  char text[16];
  snprintf(text, sizeof(text), "e%d", i);
  ev.message = text;
  cw_net_conn_send(conn, CW_MSG_EVENT, 0, 0, &ev.base, NULL, 0, NULL, NULL);
}

static bool hook(void* user) {
  assert_ptr_equal(user, &fx);
  fx.hook_calls++;
  char b;
  if (fx.probe_fd >= 0 && recv(fx.probe_fd, &b, 1, MSG_PEEK | MSG_DONTWAIT) > 0 &&
      !fx.hook_first_hit) {
    fx.hook_first_hit = fx.hook_calls;
  }
  if (fx.hook_true_left > 0 && fx.hook_conn) {
    send_event(fx.hook_conn, 3 - fx.hook_true_left);
    fx.hook_true_left--;
    return true;  // did work: run again
  }
  return false;
}

// The prepare hook runs before the gathered frames are written, again while
// it returns true; its frames go out in the same pass. cw_net_wake runs it.
static void test_prepare_hook_and_wake(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  cw_net_set_prepare_hook(&fx.srv, hook, &fx);
  fx.probe_fd = r->fd;
  fx.hook_conn = p->conn;
  fx.hook_true_left = 3;
  raw_ping(r, 51, "x");
  WAIT(raw_has_frames(r, 4));
  // Four calls (three true, one false) before anything was written; the
  // pass may call it again after writing.
  assert_true(fx.hook_calls >= 4);
  assert_true(fx.hook_first_hit == 0 || fx.hook_first_hit > 4);
  raw_expect_pong(r, 51, "x");
  for (int i = 0; i < 3; ++i) {
    frame_t f;
    raw_next(r, &f);
    assert_int_equal(f.h.type, CW_MSG_EVENT);
    assert_int_equal(f.h.flags, 0);
    char want[16];
    snprintf(want, sizeof(want), "e%d", i);
    assert_string_equal(((const Causeway__V1__ClusterEvent*)f.msg)->message, want);
    frame_free(&f);
  }
  // Idle: the hook does not run until something wakes the prepare phase.
  RUN_FOR(30);
  int calls = fx.hook_calls;
  RUN_FOR(30);
  assert_int_equal(fx.hook_calls, calls);
  cw_net_wake(&fx.srv);
  assert_int_equal(fx.hook_calls, calls);
  uv_run(&fx.loop, UV_RUN_NOWAIT);
  assert_int_equal(fx.hook_calls, calls + 1);
  RUN_FOR(30);
  assert_int_equal(fx.hook_calls, calls + 1);
}

// --- Bulk destinations ---------------------------------------------------------------

static void expect_ack(raw_t* r, uint64_t rid, uint64_t id) {
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_UPLOAD);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  assert_int_equal(f.h.request_id, rid);
  assert_int_equal(((const Causeway__V1__Ack*)f.msg)->id, id);
  frame_free(&f);
}

static void expect_dest_pattern(const peer_t* p, uint64_t n) {
  assert_int_equal(p->dest_len, n);
  for (uint64_t i = 0; i < n; ++i) {
    if (p->dest[i] != pattern(i)) fail_msg("bulk byte %llu differs", (unsigned long long)i);
  }
}

static void test_bulk_into_destination(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  // Small bulk arrives with its frame in the read-ahead; the next frame
  // right behind it is parsed right.
  buf_t b = {0};
  buf_upload(&b, 61, 1, 24, 24);
  buf_ping(&b, 62, "after");
  raw_send_buf(r, &b);
  expect_ack(r, 61, 1);
  raw_expect_pong(r, 62, "after");
  assert_int_equal(p->bulk_done, 1);
  assert_int_equal(p->bulk_done_rid, 61);
  expect_dest_pattern(p, 24);
  // Large bulk is read straight into the destination (reads larger than the
  // 64 KiB read-ahead), in pieces.
  uint64_t big = 3u << 20;
  p->max_read = 0;
  buf_upload(&b, 63, 1, (int64_t)big, big);
  buf_ping(&b, 64, "after big");
  assert_true(raw_send(r, b.p, 1000));
  WAIT(p->calls == 3);  // the UPLOAD's handler named the destination
  assert_true(raw_send(r, b.p + 1000, b.len - 1000));
  buf_free(&b);
  expect_ack(r, 63, 1);
  raw_expect_pong(r, 64, "after big");
  assert_int_equal(p->bulk_done, 2);
  assert_int_equal(p->bulk_done_rid, 63);
  expect_dest_pattern(p, big);
  assert_true(p->max_read > 65536);
  RUN_FOR(20);
  assert_int_equal(p->bulk_done, 2);  // once each
}

static void test_bulk_without_destination(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  buf_t b = {0};
  buf_upload(&b, 71, 2, 10, 10);
  buf_ping(&b, 72, "next");
  buf_upload(&b, 73, 2, 300000, 300000);
  buf_ping(&b, 74, "next again");
  raw_send_buf(r, &b);
  expect_ack(r, 71, 2);
  raw_expect_pong(r, 72, "next");
  expect_ack(r, 73, 2);
  raw_expect_pong(r, 74, "next again");
  assert_int_equal(p->bulk_done, 0);
  assert_true(p->max_read <= 65536);  // discarded through the read-ahead
  assert_int_equal(p->closes, 0);
}

static void test_bulk_check_refused(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  buf_t b = {0};
  buf_upload(&b, 81, 1, 24, 20);  // a u8[24] with 20 bytes
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_UPLOAD, 81, CW_INVALID_ARGUMENT,
                   "UPLOAD bulk of 20 bytes differs from the array's 24 bytes");
  raw_expect_eof(r);
  assert_int_equal(p->calls, 0);
  WAIT(p->closes == 1);
}

// Reply bulk is collected and handed (taken) to the request's completion.
static void test_reply_bulk_collected(void** state) {
  start_server();
  start_client("sesame");
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client(fx.path, 7, o);
  reply_t rs[3];
  memset(rs, 0, sizeof(rs));
  const uint64_t sizes[3] = {0, 100, 300000};
  for (int i = 0; i < 3; ++i) request_download(conn, sizes[i], &rs[i]);
  WAIT(rs[0].done && rs[1].done && rs[2].done);
  for (int i = 0; i < 3; ++i) {
    assert_int_equal(rs[i].code, CW_OK);
    assert_int_equal(rs[i].order, i);
    char want[24];
    snprintf(want, sizeof(want), "%llu", (unsigned long long)sizes[i]);
    assert_int_equal(rs[i].data_len, strlen(want));
    assert_memory_equal(rs[i].data, want, rs[i].data_len);
    assert_int_equal(rs[i].bulk_len, sizes[i]);
    if (!sizes[i]) assert_null(rs[i].bulk);
    for (uint64_t k = 0; k < sizes[i]; ++k) {
      if (rs[i].bulk[k] != pattern(k)) fail_msg("byte %llu differs", (unsigned long long)k);
    }
    free(rs[i].bulk);
  }
  WAIT(fx.bulk_frees == 2);
}

// While reading is held no frame is handled (those read wait); releasing
// resumes from the idle phase, not inside the call.
static void test_hold_reading(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  buf_t b = {0};
  buf_ping(&b, 91, "hold");
  buf_ping(&b, 92, "a");
  buf_ping(&b, 93, "b");
  raw_send_buf(r, &b);
  raw_expect_pong(r, 91, "hold");
  raw_ping(r, 94, "c");  // not even read
  raw_expect_silence(r, 50);
  assert_int_equal(p->calls, 1);
  cw_net_conn_hold_reading(p->conn, false);
  assert_int_equal(p->calls, 1);
  uv_run(&fx.loop, UV_RUN_NOWAIT);
  assert_true(p->calls >= 3);  // those read already, from the idle phase
  raw_expect_pong(r, 92, "a");
  raw_expect_pong(r, 93, "b");
  raw_expect_pong(r, 94, "c");
  assert_int_equal(p->calls, 4);
}

// A peer that closes while its connection's reading is held is seen (no read
// would see its EOF): the connection closes, its unread frames unhandled. A
// worker kept the session of a client gone while its requests waited at the
// flow control's cap, and everything the session held, for good.
static void test_peer_close_while_reading_held(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  buf_t b = {0};
  buf_ping(&b, 91, "hold");
  buf_ping(&b, 92, "a");  // waits in the read-ahead
  raw_send_buf(r, &b);
  raw_expect_pong(r, 91, "hold");
  raw_ping(r, 93, "b");  // waits in the socket
  raw_close(r);
  WAIT(p->closes == 1);
  assert_int_equal(p->close_code, CW_UNAVAILABLE);
  assert_non_null(strstr(p->close_msg, "connection closed by peer"));
  assert_int_equal(p->calls, 1);
  WAIT(p->freed);
}

// A handler that holds reading before it returns may name the bulk
// destination later (the worker does, while an upload waits for memory):
// none of the bytes is read or discarded meanwhile, and neither is the frame
// behind them.
static void test_bulk_destination_named_later(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  // More than the 64 KiB read-ahead (which holds the bulk's first bytes when
  // the hold begins), less than the socket buffers (the test's sends must not block).
  uint64_t n = 100000;
  buf_t b = {0};
  buf_upload(&b, 95, 3, (int64_t)n, n);
  buf_ping(&b, 96, "behind");
  raw_send_buf(r, &b);
  expect_ack(r, 95, 3);
  raw_expect_silence(r, 50);
  RUN_FOR(20);
  assert_int_equal(p->calls, 1);
  assert_int_equal(p->bulk_done, 0);
  cw_net_conn_set_bulk_dest(p->conn, p->dest);
  cw_net_conn_hold_reading(p->conn, false);
  raw_expect_pong(r, 96, "behind");
  assert_int_equal(p->bulk_done, 1);
  assert_int_equal(p->bulk_done_rid, 95);
  expect_dest_pattern(p, n);
}

// --- Close paths ---------------------------------------------------------------------

static void test_peer_eof_mid_payload(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  buf_t b = {0};
  buf_header(&b, CW_MSG_PING, 0, 101, 10, 0);
  buf_put(&b, "\x0a\x08" "ab", 4);
  size_t sent = b.len;
  raw_send_buf(r, &b);
  uint64_t before = p->bytes_in;
  WAIT(p->bytes_in == before + sent);
  raw_shutdown(r);
  WAIT(p->closes == 1);
  assert_int_equal(p->close_code, CW_UNAVAILABLE);
  assert_string_equal(p->close_msg, "connection closed by peer");
  assert_int_equal(p->calls, 0);
  WAIT(p->freed);
}

static void test_peer_eof_mid_bulk(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  buf_t b = {0};
  buf_upload(&b, 102, 1, 1 << 20, 1 << 20);
  size_t half = b.len / 2;
  uint64_t before = p->bytes_in;
  assert_true(raw_send(r, b.p, half));
  buf_free(&b);
  WAIT(p->bytes_in == before + half);
  assert_int_equal(p->calls, 1);
  raw_shutdown(r);
  WAIT(p->closes == 1);
  assert_int_equal(p->close_code, CW_UNAVAILABLE);
  assert_string_equal(p->close_msg, "connection closed by peer");
  assert_int_equal(p->bulk_done, 0);
  WAIT(p->freed);
}

// cw_net_conn_close with a reason: the connection's requests fail with it,
// on_close gets it once, and the memory stays while a reference is held.
static void test_close_with_reason(void** state) {
  start_server();
  start_client("sesame");
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client(fx.path, 0, o);
  cw_net_conn_retain(conn);
  reply_t sync = {0}, a = {0}, b = {0};
  request_ping(conn, "sync", &sync);  // answered: HELLO is done
  WAIT(sync.done);
  request_ping(conn, "defer", &a);
  request_ping(conn, "defer", &b);
  WAIT(fx.num_peers == 1 && last_peer()->num_deferred == 2);
  peer_t* p = last_peer();
  assert_true(cw_net_conn_is_open(conn));
  assert_null(cw_net_conn_close_reason(conn));
  cw_net_conn_close(conn, cw_make_status(CW_ABORTED, "the test is done with it"));
  assert_true(a.done && b.done);
  assert_true(a.order < b.order);
  assert_int_equal(a.code, CW_UNAVAILABLE);
  assert_string_equal(a.msg, "connection to srvname closed: the test is done with it");
  assert_string_equal(b.msg, a.msg);
  assert_int_equal(o->closes, 1);
  assert_int_equal(o->completions_at_close, fx.completions);  // requests failed first
  assert_int_equal(o->close_code, CW_ABORTED);
  assert_string_equal(o->close_msg, "the test is done with it");
  assert_false(cw_net_conn_is_open(conn));
  assert_string_equal(cw_status_message(cw_net_conn_close_reason(conn)),
                      "the test is done with it");
  cw_net_conn_close(conn, cw_make_status(CW_INTERNAL, "again"));  // taken, ignored
  assert_int_equal(o->closes, 1);
  reply_t c = {0};
  request_ping(conn, "late", &c);  // fails before it returns
  expect_failed(&c, CW_UNAVAILABLE, "connection to srvname is closed");
  WAIT(p->closes == 1);
  assert_string_equal(p->close_msg, "connection closed by peer");
  // on_free waits for the last reference.
  RUN_FOR(20);
  assert_false(o->freed);
  cw_net_conn_release(conn);
  assert_true(o->freed);
}

// A violation answers, then closes once the answer (and what was written
// before it, a large bulk here) is out; frames behind it are not handled.
static void test_violation_closes_after_write(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(7, &p);
  buf_t b = {0};
  buf_ping(&b, 111, "first");
  Causeway__V1__DownloadRequest dl = CAUSEWAY__V1__DOWNLOAD_REQUEST__INIT;
  dl.buffer_id = 4u << 20;
  buf_frame(&b, CW_MSG_DOWNLOAD, 0, 112, &dl.base, NULL, 0);
  buf_ping(&b, 113, "violate");
  buf_ping(&b, 114, "never");
  raw_send_buf(r, &b);
  raw_expect_pong(r, 111, "first");
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.request_id, 112);
  assert_int_equal(f.h.bulk_len, 4u << 20);
  assert_int_equal(f.bulk[12345], pattern(12345));
  frame_free(&f);
  raw_expect_error(r, CW_MSG_PING, 113, CW_INVALID_ARGUMENT, "the test dislikes this PING");
  raw_expect_eof(r);
  assert_int_equal(p->calls, 3);
  assert_int_equal(p->closes, 1);
  assert_true(p->closed_on_purpose);
  assert_int_equal(fx.bulk_frees, 1);
}

// Frames gathered and not yet written when a connection closes are tried once.
static void test_close_tries_gathered_frames(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  buf_t b = {0};
  buf_ping(&b, 121, "a");
  buf_ping(&b, 122, "close");
  buf_ping(&b, 123, "b");
  raw_send_buf(r, &b);
  raw_expect_pong(r, 121, "a");
  raw_expect_pong(r, 122, "close");
  raw_expect_eof(r);
  assert_int_equal(p->calls, 2);
  assert_int_equal(p->closes, 1);
}

static void test_on_free_after_last_reference(void** state) {
  fx.retain_accepted = true;
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  raw_close(r);
  WAIT(p->closes == 1);
  RUN_FOR(30);  // the handles are closed by now
  assert_false(p->freed);
  cw_net_conn_release(p->conn);
  assert_true(p->freed);
}

// An EOF while a reply's bulk arrives fails that request (and frees what was
// collected).
static void test_outbound_eof_mid_reply_bulk(void** state) {
  start_client("sesame");
  raw_listen();
  out_t* o = new_out();
  cw_net_conn_t* conn;
  raw_t* s = connect_raw_peer(7, o, NULL, &conn);
  reply_t a = {0};
  request_download(conn, 1000, &a);
  raw_answer_hello(s);
  frame_t f;
  raw_next(s, &f);
  assert_int_equal(f.h.type, CW_MSG_DOWNLOAD);
  Causeway__V1__ArrayInfo ai = CAUSEWAY__V1__ARRAY_INFO__INIT;
  buf_t b = {0};
  uint8_t bulk[1000] = {0};
  buf_frame(&b, CW_MSG_DOWNLOAD, CW_FRAME_REPLY, f.h.request_id, &ai.base, bulk, sizeof(bulk));
  frame_free(&f);
  assert_true(raw_send(s, b.p, b.len - 990));
  buf_free(&b);
  RUN_FOR(20);
  assert_false(a.done);
  raw_close(s);
  WAIT(a.done);
  expect_failed(&a, CW_UNAVAILABLE, "connection to srvname closed: connection closed by peer");
  assert_null(a.bulk);
  assert_int_equal(o->closes, 1);
  WAIT(o->freed);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NET_TEST(test_frames_split_byte_by_byte),
      NET_TEST(test_many_frames_in_one_write),
      NET_TEST(test_reply_completes_request_by_id),
      NET_TEST(test_oversize_reply_becomes_error),
      NET_TEST(test_unknown_reply_id),
      NET_TEST(test_prehello_limits),
      NET_TEST(test_post_hello_limits),
      NET_TEST(test_frames_per_wakeup_fairness),
      NET_TEST(test_small_replies_are_batched),
      NET_TEST(test_bulk_frame_takes_gathered_frames),
      NET_TEST(test_prepare_hook_and_wake),
      NET_TEST(test_bulk_into_destination),
      NET_TEST(test_bulk_without_destination),
      NET_TEST(test_bulk_check_refused),
      NET_TEST(test_reply_bulk_collected),
      NET_TEST(test_hold_reading),
      NET_TEST(test_peer_close_while_reading_held),
      NET_TEST(test_bulk_destination_named_later),
      NET_TEST(test_peer_eof_mid_payload),
      NET_TEST(test_peer_eof_mid_bulk),
      NET_TEST(test_close_with_reason),
      NET_TEST(test_violation_closes_after_write),
      NET_TEST(test_close_tries_gathered_frames),
      NET_TEST(test_on_free_after_last_reference),
      NET_TEST(test_outbound_eof_mid_reply_bulk),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
