// Unit tests of cw_net_service.c on a real loop (fixture:
// cw_net_test_fixture.h): HELLO refusals (credentials, versions, roles, the
// service's on_hello, a second HELLO) and the message table's rules (not
// served, a sender the table forbids, a session needed), the admit and
// applied hooks' order and who owns a request's message; KEEPALIVE events
// for a peer that asks for them in HELLO, and none for one that does not.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <cmocka.h>

#include "cw_messages.h"
#include "cw_net_test_fixture.h"

static void hello_refused(Causeway__V1__HelloRequest* h, cw_status_code_t code,
                          const char* needle) {
  raw_t* r = raw_connect();
  buf_t b = {0};
  buf_frame(&b, CW_MSG_HELLO, 0, 1, &h->base, NULL, 0);
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_HELLO, 1, code, needle);
  raw_expect_eof(r);
  peer_t* p = last_peer();
  WAIT(p->closes == 1);
  assert_int_equal(cw_net_conn_role(p->conn), 0);
}

static void test_hello_refusals(void** state) {
  start_server();
  Causeway__V1__HelloRequest h;
  cw_hello_request_fill(&h, ROLE_CLIENT, "open", 0, "x");
  hello_refused(&h, CW_UNAUTHENTICATED, "credentials refused: wrong token");
  cw_hello_request_fill(&h, ROLE_CLIENT, "", 0, "x");
  hello_refused(&h, CW_UNAUTHENTICATED, "credentials refused: no token presented");
  cw_hello_request_fill(&h, ROLE_CLIENT, "sesame", 0, "x");
  h.min_version = 7;
  h.max_version = 9;
  hello_refused(&h, CW_UNIMPLEMENTED, "protocol versions 7..9 not supported");
  h.min_version = 1;
  h.max_version = 0;
  hello_refused(&h, CW_UNIMPLEMENTED, "protocol versions 1..0 not supported");
  cw_hello_request_fill(&h, ROLE_CONTROLLER, "sesame", 0, "x");
  hello_refused(&h, CW_PERMISSION_DENIED, "the testsvc accepts HELLO role CLIENT or WORKER, not 3");
  cw_hello_request_fill(&h, 0, "sesame", 0, "x");
  hello_refused(&h, CW_PERMISSION_DENIED, "not 0");
  cw_hello_request_fill(&h, ROLE_CLIENT, "sesame", 0, "refuse-me");
  hello_refused(&h, CW_PERMISSION_DENIED, "refused by the test service");
  // A second HELLO.
  peer_t* p;
  raw_t* r = raw_ready(0, &p);
  raw_hello_as(r, "sesame", ROLE_CLIENT, 0, "again");
  raw_expect_error(r, CW_MSG_HELLO, 1, CW_FAILED_PRECONDITION, "second HELLO");
  raw_expect_eof(r);
  assert_int_equal(fx.num_calls, 0);  // no handler ran
}

static void test_message_table_rules(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(0, &p);  // a client without a session
  // Not served here: UNIMPLEMENTED with the service's hint; the connection stays.
  send_empty(r, CW_MSG_INVENTORY, 21);
  raw_expect_error(r, CW_MSG_INVENTORY, 21, CW_UNIMPLEMENTED,
                   "the testsvc does not serve INVENTORY (ask elsewhere)");
  // A sender the table forbids.
  send_empty(r, CW_MSG_REGISTER, 22);
  raw_expect_error(r, CW_MSG_REGISTER, 22, CW_PERMISSION_DENIED,
                   "REGISTER is for workers (this connection's HELLO role is CLIENT)");
  // A type that needs a session.
  send_empty(r, CW_MSG_COMPILE, 23);
  raw_expect_error(r, CW_MSG_COMPILE, 23, CW_FAILED_PRECONDITION,
                   "COMPILE needs a session (this CLIENT connection has none)");
  raw_ping(r, 24, "still here");
  raw_expect_pong(r, 24, "still here");
  assert_int_equal(p->calls, 1);
  assert_int_equal(p->closes, 0);
  // With a session the same COMPILE is served.
  r = raw_ready(9, &p);
  send_empty(r, CW_MSG_COMPILE, 25);
  expect_reply_type(r, CW_MSG_COMPILE, 25);
  // A worker may REGISTER but not COMPILE.
  r = raw_connect();
  raw_hello_as(r, "sesame", ROLE_WORKER, 0, "w");
  expect_reply_type(r, CW_MSG_HELLO, 1);
  p = last_peer();
  assert_int_equal(cw_net_conn_role(p->conn), ROLE_WORKER);
  send_empty(r, CW_MSG_REGISTER, 26);
  expect_reply_type(r, CW_MSG_REGISTER, 26);
  send_empty(r, CW_MSG_COMPILE, 27);
  raw_expect_error(r, CW_MSG_COMPILE, 27, CW_PERMISSION_DENIED,
                   "COMPILE is for clients or the controller");
  assert_int_equal(p->calls, 1);
}

// admit runs after the table's checks and before the handler, applied after
// it; a refused admission skips both. A handler (or admit) that takes the
// message owns it; otherwise the net frees it (ASan checks both).
static void test_admit_applied_and_ownership(void** state) {
  start_server();
  peer_t* p;
  raw_t* r = raw_ready(3, &p);
  fx.log[0] = 0;
  buf_t b = {0};
  buf_ping(&b, 31, "a");
  buf_frame(&b, CW_MSG_STATS, 0, 32, NULL, NULL, 0);
  buf_frame(&b, CW_MSG_INVENTORY, 0, 33, NULL, NULL, 0);
  buf_ping(&b, 34, "take");
  buf_frame(&b, CW_MSG_EXE_INFO, 0, 35, NULL, NULL, 0);
  raw_send_buf(r, &b);
  raw_expect_pong(r, 31, "a");
  raw_expect_error(r, CW_MSG_STATS, 32, CW_ABORTED, "admit says not now");
  raw_expect_error(r, CW_MSG_INVENTORY, 33, CW_UNIMPLEMENTED, "does not serve INVENTORY");
  raw_expect_pong(r, 34, "take");
  expect_reply_type(r, CW_MSG_EXE_INFO, 35);
  assert_string_equal(fx.log,
                      "admit:PING,handler:PING,applied:PING,"
                      "admit:STATS,"
                      "admit:PING,handler:PING,applied:PING,"
                      "admit:EXE_INFO,handler:EXE_INFO,applied:EXE_INFO,");
  // The taken message is the handler's, intact after the net moved on.
  assert_non_null(p->kept);
  const Causeway__V1__Ping* kept = (const Causeway__V1__Ping*)p->kept;
  assert_int_equal(kept->data.len, 4);
  assert_memory_equal(kept->data.data, "take", 4);
  // admit may take it too.
  fx.admit_takes = true;
  send_empty(r, CW_MSG_STATS, 36);
  raw_expect_error(r, CW_MSG_STATS, 36, CW_ABORTED, "admit says not now");
  assert_non_null(fx.admitted_kept);
  assert_ptr_equal(fx.admitted_kept->descriptor, &causeway__v1__stats_request__descriptor);
}

// HELLO asking for keepalives every `ms`: the reply's period.
static uint32_t hello_keepalive(raw_t* r, uint32_t ms) {
  Causeway__V1__HelloRequest h;
  cw_hello_request_fill(&h, ROLE_CLIENT, "sesame", 0, "warm");
  h.keepalive_ms = ms;
  buf_t b = {0};
  buf_frame(&b, CW_MSG_HELLO, 0, 1, &h.base, NULL, 0);
  raw_send_buf(r, &b);
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  uint32_t got = ((const Causeway__V1__HelloReply*)f.msg)->keepalive_ms;
  frame_free(&f);
  return got;
}

static void expect_keepalive(raw_t* r) {
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_EVENT);
  assert_int_equal(f.h.flags, 0);
  assert_int_equal(f.h.request_id, 0);
  assert_int_equal(((const Causeway__V1__ClusterEvent*)f.msg)->kind,
                   CAUSEWAY__V1__CLUSTER_EVENT__KIND__KEEPALIVE);
  frame_free(&f);
}

static void test_keepalive(void** state) {
  start_server();
  // Asked for 1 ms: clamped to the floor, and sent on, between replies.
  raw_t* r = raw_connect();
  assert_int_equal(hello_keepalive(r, 1), CW_NET_KEEPALIVE_MIN_MS);
  expect_keepalive(r);
  expect_keepalive(r);
  raw_ping(r, 2, "between");
  frame_t f;
  do {  // keepalives may come first
    raw_next(r, &f);
    if (f.h.type == CW_MSG_PING) break;
    assert_int_equal(f.h.type, CW_MSG_EVENT);
    frame_free(&f);
  } while (true);
  assert_int_equal(f.h.request_id, 2);
  frame_free(&f);
  expect_keepalive(r);
  // Asked for more than the ceiling: the ceiling, and nothing comes soon.
  raw_t* slow = raw_connect();
  assert_int_equal(hello_keepalive(slow, 4000000000u), CW_NET_KEEPALIVE_MAX_MS);
  raw_expect_silence(slow, 100);
  // Not asked: none.
  raw_t* plain = raw_ready(0, NULL);
  raw_expect_silence(plain, 100);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NET_TEST(test_keepalive),
      NET_TEST(test_hello_refusals),
      NET_TEST(test_message_table_rules),
      NET_TEST(test_admit_applied_and_ownership),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
