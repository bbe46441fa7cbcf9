// Unit tests of cw_net_listen.c on a real loop (fixture:
// cw_net_test_fixture.h): the HELLO deadline and the connection budget of
// accepted connections; connecting: an unreachable peer, a refused HELLO, a
// close before HELLO was answered; cw_net_stop and cw_net_deinitialize with
// connections open.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_net_test_fixture.h"
#include "cw_time.h"

static void test_hello_deadline(void** state) {
  fx.sopts.hello_timeout_ms = 150;
  start_server();
  int64_t t0 = cw_time_now_ms();
  raw_t* silent = raw_connect();
  WAIT(fx.num_peers == 1);
  peer_t* pt;
  raw_t* talker = raw_ready(0, &pt);
  peer_t* ps = fx.peers[0];
  assert_ptr_not_equal(ps, pt);
  raw_expect_eof(silent);
  int64_t waited = cw_time_now_ms() - t0;
  assert_true(waited >= 140);
  assert_int_equal(ps->closes, 1);
  assert_int_equal(ps->close_code, CW_DEADLINE_EXCEEDED);
  assert_string_equal(ps->close_msg, "no HELLO in time");
  // A peer past HELLO outlives the deadline.
  RUN_FOR(250);
  raw_ping(talker, 2, "alive");
  raw_expect_pong(talker, 2, "alive");
  assert_int_equal(pt->closes, 0);
}

static void test_max_connections(void** state) {
  fx.sopts.max_connections = 2;
  start_server();
  peer_t *pa, *pb;
  raw_t* a = raw_ready(0, &pa);
  raw_t* b = raw_ready(0, &pb);
  raw_t* c = raw_connect();
  raw_expect_eof(c);  // refused: closed with nothing said
  assert_int_equal(fx.num_peers, 2);  // and never handed to on_accept
  raw_ping(a, 2, "a");
  raw_expect_pong(a, 2, "a");
  raw_ping(b, 2, "b");
  raw_expect_pong(b, 2, "b");
  // A place is free again once one closes.
  raw_close(a);
  WAIT(pa->closes == 1);
  peer_t* pd;
  raw_t* d = raw_ready(0, &pd);
  raw_ping(d, 2, "d");
  raw_expect_pong(d, 2, "d");
  assert_int_equal(fx.num_peers, 3);
}

static void test_connect_to_dead_address(void** state) {
  start_client("sesame");
  // A port nobody listens on.
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(s, (struct sockaddr*)&sa, sizeof(sa)), 0);
  socklen_t len = sizeof(sa);
  assert_int_equal(getsockname(s, (struct sockaddr*)&sa, &len), 0);
  close(s);
  char address[64];
  snprintf(address, sizeof(address), "127.0.0.1:%d", ntohs(sa.sin_port));
  char want[128];
  snprintf(want, sizeof(want), "peer %s unreachable: connection refused", address);
  out_t o = {0};
  cw_net_conn_t* conn = connect_client(address, 0, &o);
  cw_net_conn_retain(conn);
  reply_t a = {0};
  request_ping(conn, "x", &a);
  WAIT(a.done);
  expect_failed(&a, CW_UNAVAILABLE, want);
  assert_int_equal(o.closes, 1);
  assert_int_equal(o.close_code, CW_UNAVAILABLE);
  assert_string_equal(o.close_msg, want);
  assert_string_equal(cw_status_message(cw_net_conn_close_reason(conn)), want);
  reply_t b = {0};
  request_ping(conn, "y", &b);  // later requests learn why too
  assert_true(b.done);
  assert_string_equal(b.msg, want);
  cw_net_conn_release(conn);
  WAIT(o.freed);
}

static void test_refused_hello(void** state) {
  start_server();
  start_client("not the token");
  out_t o = {0};
  cw_net_conn_t* conn = connect_client(fx.path, 0, &o);
  reply_t a = {0};
  request_ping(conn, "x", &a);
  WAIT(a.done);
  assert_int_equal(a.code, CW_UNAUTHENTICATED);
  const char* want = "peer srvname refused HELLO: credentials refused: wrong token";
  if (strncmp(a.msg, want, strlen(want)) != 0) fail_msg("got \"%s\"", a.msg);
  assert_int_equal(o.closes, 1);
  assert_int_equal(o.close_code, CW_UNAUTHENTICATED);
  assert_string_equal(o.close_msg, a.msg);
  assert_int_equal(fx.num_peers, 1);
  peer_t* p = fx.peers[0];
  WAIT(p->closes == 1);
  assert_int_equal(p->calls, 0);  // the PING behind the HELLO was never handled
  WAIT(o.freed);
}

// A connection that closes after the connect but before the peer answered
// HELLO is no different from a later close: its requests fail UNAVAILABLE
// "connection to NAME closed: REASON" (only an unreachable peer or a refused
// HELLO fail them with the reason itself).
static void test_close_before_hello_answered(void** state) {
  start_client("sesame");
  raw_listen();
  for (int by_owner = 0; by_owner < 2; ++by_owner) {
    out_t o = {0};
    reply_t a = {0};
    cw_net_conn_t* conn;
    raw_t* s = connect_raw_peer(0, &o, &a, &conn);
    WAIT(raw_has_frames(s, 2));  // HELLO and PING, HELLO unanswered
    if (by_owner) {
      cw_net_conn_close(conn, cw_make_status(CW_ABORTED, "given up"));
    } else {
      raw_shutdown(s);
      WAIT(a.done);
    }
    assert_true(a.done);
    assert_int_equal(a.code, CW_UNAVAILABLE);
    assert_string_equal(a.msg, by_owner ? "connection to srvname closed: given up"
                                        : "connection to srvname closed: connection closed "
                                          "by peer");
    assert_int_equal(o.closes, 1);
    assert_int_equal(o.close_code, by_owner ? CW_ABORTED : CW_UNAVAILABLE);
    WAIT(o.freed);
    raw_close(s);
  }
}

// cw_net_stop closes every connection (on_close once each, requests failed,
// gathered frames tried), stops listening; deinitialize then leaves no
// handle open (teardown checks uv_loop_close).
static void test_stop_with_connections_open(void** state) {
  start_server();
  start_client("sesame");
  peer_t *pa, *pb;
  raw_t* a = raw_ready(0, &pa);
  raw_t* b = raw_ready(7, &pb);
  out_t o = {0};
  cw_net_conn_t* conn = connect_client(fx.path, 0, &o);
  reply_t d = {0};
  request_ping(conn, "defer", &d);
  WAIT(fx.num_peers == 3 && last_peer()->num_deferred == 1);
  peer_t* pc = last_peer();
  // A second client connection, to a peer that never answers.
  raw_listen();
  out_t o2 = {0};
  reply_t e = {0};
  cw_net_conn_t* conn2;
  raw_t* s = connect_raw_peer(0, &o2, &e, &conn2);
  raw_answer_hello(s);
  frame_t f;
  raw_next(s, &f);  // the PING arrived; HELLO is done
  assert_int_equal(f.h.type, CW_MSG_PING);
  frame_free(&f);
  // A reply gathered, not yet written, when the net stops.
  Causeway__V1__Ping bye = CAUSEWAY__V1__PING__INIT;
  bye.data.data = (uint8_t*)"bye";
  bye.data.len = 3;
  cw_net_conn_reply(pa->conn, CW_MSG_PING, 999, &bye.base);
  cw_net_stop(&fx.srv);
  assert_int_equal(pa->closes, 1);
  assert_int_equal(pb->closes, 1);
  assert_int_equal(pc->closes, 1);
  assert_true(pa->closed_on_purpose && pb->closed_on_purpose && pc->closed_on_purpose);
  cw_net_conn_reply(pc->conn, CW_MSG_PING, pc->deferred[0], &bye.base);  // ignored now
  assert_true(unix_connect(fx.path) < 0);  // no longer listening
  raw_expect_pong(a, 999, "bye");
  raw_expect_eof(a);
  raw_expect_eof(b);
  WAIT(d.done);
  expect_failed(&d, CW_UNAVAILABLE, "connection to srvname closed: connection closed by peer");
  assert_int_equal(o.closes, 1);
  assert_false(e.done);
  cw_net_stop(&fx.cli);
  expect_failed(&e, CW_UNAVAILABLE, "connection to srvname closed");
  assert_int_equal(o2.closes, 1);
  assert_true(o2.closed_on_purpose);
  cw_net_deinitialize(&fx.srv);
  fx.srv_on = false;
  cw_net_deinitialize(&fx.cli);
  fx.cli_on = false;
  WAIT(fx.freed == 3 && o.freed && o2.freed);
  raw_expect_eof(s);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NET_TEST(test_hello_deadline),
      NET_TEST(test_max_connections),
      NET_TEST(test_connect_to_dead_address),
      NET_TEST(test_refused_hello),
      NET_TEST(test_close_before_hello_answered),
      NET_TEST(test_stop_with_connections_open),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
