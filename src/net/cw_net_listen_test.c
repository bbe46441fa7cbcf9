// Unit tests of cw_net_listen.c on a real loop (fixture:
// cw_net_test_fixture.h): the HELLO deadline and the connection budgets of
// accepted connections (before HELLO: eviction order, per address, memory;
// accept pacing); connecting: an unreachable peer, a refused HELLO, a
// close before HELLO was answered; cw_net_stop and cw_net_deinitialize with
// connections open; Unix socket paths taken or too long.
#include <arpa/inet.h>
#include <dlfcn.h>
#include <netdb.h>
#include <netinet/in.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_net_internal.h"
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

// The budget before HELLO: a newcomer closes the connection that has waited
// longest without HELLO; connections past HELLO are never closed for it, and
// a client that sends its HELLO gets in however many idle ones there are.
static void test_unauth_budget(void** state) {
  fx.sopts.max_unauth_connections = 3;
  start_server();
  peer_t *pa, *pb;
  raw_t* a = raw_ready(0, &pa);
  raw_t* b = raw_ready(0, &pb);
  raw_t* idle[12];
  for (int i = 0; i < 12; ++i) {
    idle[i] = raw_connect();
    WAIT(fx.num_peers == 3 + i);
    if (i >= 3) {
      raw_expect_eof(idle[i - 3]);  // the oldest idle one made room
      peer_t* gone = fx.peers[2 + i - 3];
      assert_int_equal(gone->close_code, CW_RESOURCE_EXHAUSTED);
      assert_non_null(strstr(gone->close_msg, "closed before HELLO to make room"));
    }
  }
  assert_int_equal(fx.srv.gate.count, 3);
  assert_int_equal(fx.srv.gate.evicted, 9);
  raw_ping(a, 2, "a");
  raw_expect_pong(a, 2, "a");
  raw_ping(b, 2, "b");
  raw_expect_pong(b, 2, "b");
  assert_int_equal(pa->closes + pb->closes, 0);
  peer_t* pc;
  raw_t* c = raw_ready(0, &pc);  // the newcomer got in (idle[9] made room)
  raw_expect_eof(idle[9]);
  raw_ping(c, 2, "c");
  raw_expect_pong(c, 2, "c");
  // Every place taken (6 past HELLO + 2 idle = 8): a newcomer closes an
  // idle one instead of being refused.
  for (int i = 0; i < 3; ++i) raw_ready(0, NULL);
  assert_int_equal(fx.srv.inbound_connections, 8);
  assert_int_equal(fx.srv.gate.count, 2);
  raw_t* d = raw_connect();
  raw_expect_eof(idle[10]);
  raw_hello(d, 0);
  assert_int_equal(fx.srv.refused, 0);
  assert_int_equal(fx.srv.inbound_connections, 8);
  raw_expect_silence(idle[11], 1);
}

// A connection part way through its HELLO outlives idle ones that are
// younger: they make room first.
static void test_silent_ones_go_first(void** state) {
  fx.sopts.max_unauth_connections = 3;
  start_server();
  raw_t* slow = raw_connect();
  buf_t hello = {0};
  buf_hello(&hello, "sesame", ROLE_CLIENT, 0, "slow");
  assert_true(raw_send(slow, hello.p, 10));
  WAIT(fx.num_peers == 1 && fx.peers[0]->bytes_in == 10);
  raw_t* s1 = raw_connect();
  raw_t* s2 = raw_connect();
  WAIT(fx.num_peers == 3);
  raw_t* s3 = raw_connect();
  raw_expect_eof(s1);
  raw_t* s4 = raw_connect();
  raw_expect_eof(s2);
  WAIT(fx.num_peers == 5);
  assert_true(raw_send(slow, hello.p + 10, hello.len - 10));
  buf_free(&hello);
  frame_t f;
  raw_next(slow, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  assert_false(f.h.flags & CW_FRAME_ERROR);
  frame_free(&f);
  raw_ping(slow, 2, "in");
  raw_expect_pong(slow, 2, "in");
  raw_expect_silence(s3, 50);
  raw_expect_silence(s4, 1);
}

// Memory before HELLO: none read yet, a small buffer while a HELLO arrives,
// the full one after it.
static void test_prehello_memory(void** state) {
  start_server();
  raw_t* r = raw_connect();
  WAIT(fx.num_peers == 1);
  cw_net_conn_t* c = fx.peers[0]->conn;
  RUN_FOR(20);
  assert_null(c->readahead);
  buf_t hello = {0};
  buf_hello(&hello, "sesame", ROLE_CLIENT, 0, "mem");
  assert_true(raw_send(r, hello.p, 5));
  WAIT(fx.peers[0]->bytes_in == 5);
  assert_int_equal(c->ra_cap, 1024);
  assert_true(raw_send(r, hello.p + 5, hello.len - 5));
  buf_free(&hello);
  frame_t f;
  raw_next(r, &f);
  frame_free(&f);
  raw_ping(r, 2, "x");
  raw_expect_pong(r, 2, "x");
  assert_int_equal(c->ra_cap, 64 * 1024);
}

// Per-address budgets (TCP, where the address is known): an address at its
// budget closes its own oldest; when all is full the busiest address pays.
static void test_per_peer_budget(void** state) {
  fx.sopts.max_unauth_connections = 4;
  fx.sopts.max_unauth_per_peer = 3;
  start_server_tcp();
  raw_t* x[4];
  for (int i = 0; i < 3; ++i) {
    x[i] = raw_connect_tcp("127.0.0.1");
    WAIT(fx.num_peers == i + 1);
  }
  raw_t* y = raw_connect_tcp("127.0.0.2");
  WAIT(fx.num_peers == 4);
  // Full: the newcomer from a third address closes the oldest of the
  // address holding most (127.0.0.1).
  raw_t* z = raw_connect_tcp("127.0.0.3");
  raw_expect_eof(x[0]);
  WAIT(fx.num_peers == 5);
  // 127.0.0.1 holds 2, below its budget of 3, but the gate is full: again
  // the busiest address (127.0.0.1) pays.
  x[3] = raw_connect_tcp("127.0.0.1");
  raw_expect_eof(x[1]);
  raw_expect_silence(y, 50);
  raw_expect_silence(z, 1);
  raw_expect_silence(x[2], 1);
  raw_hello(y, 0);
  raw_hello(z, 0);
  // Now 127.0.0.1 holds 2 of 2 waiting; at its budget of 3 it closes its own.
  fx.srv.gate.max_per_peer = 2;
  raw_t* x4 = raw_connect_tcp("127.0.0.1");
  raw_expect_eof(x[2]);
  raw_hello(x4, 0);
  raw_hello(x[3], 0);
}

// Accepts are paced: a burst of connects is taken in slices of at most 16 a
// loop turn, and every connection of the burst is served.
static void test_accept_pacing(void** state) {
  fx.sopts.max_connections = 64;
  start_server();
  enum { N = 60 };
  raw_t* r[N];
  buf_t b = {0};
  buf_hello(&b, "sesame", ROLE_CLIENT, 0, "burst");
  buf_ping(&b, 2, "hi");
  for (int i = 0; i < N; ++i) {
    r[i] = raw_connect();  // queued by the kernel until accepted
    assert_true(send(r[i]->fd, b.p, b.len, 0) == (ssize_t)b.len);
  }
  buf_free(&b);
  WAIT(fx.num_peers == N);
  int per_turn = 0, max_per_turn = 0;
  for (int i = 0; i < N; ++i) {
    per_turn = (i > 0 && fx.peers[i]->accept_turn == fx.peers[i - 1]->accept_turn)
                   ? per_turn + 1 : 1;
    if (per_turn > max_per_turn) max_per_turn = per_turn;
  }
  assert_true(max_per_turn <= 16);
  assert_true(fx.peers[N - 1]->accept_turn > fx.peers[0]->accept_turn);
  for (int i = 0; i < N; ++i) {
    frame_t f;
    raw_next(r[i], &f);
    assert_int_equal(f.h.type, CW_MSG_HELLO);
    frame_free(&f);
    raw_expect_pong(r[i], 2, "hi");
  }
}

// Out of memory for an accepted connection: libuv holds it and stops
// watching the listener until an accept. The daemon never accepted again
// (a helper's audit, an injected calloc failure); the pacer now tries again
// every 100 ms, and the connection is served once memory is back.
static void test_accept_out_of_memory(void** state) {
  start_server();
  cw_net__test_failing_conn_allocs = 3;
  raw_t* r = raw_connect();
  buf_t b = {0};
  buf_hello(&b, "sesame", ROLE_CLIENT, 0, "later");
  buf_ping(&b, 2, "hi");
  assert_true(send(r->fd, b.p, b.len, 0) == (ssize_t)b.len);
  WAIT(fx.num_peers == 1);
  assert_int_equal(cw_net__test_failing_conn_allocs, 0);
  frame_t f;
  raw_next(r, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  frame_free(&f);
  raw_expect_pong(r, 2, "hi");
  // The listener watches again: the next one is served at once.
  raw_t* r2 = raw_connect();
  assert_true(send(r2->fd, b.p, b.len, 0) == (ssize_t)b.len);
  buf_free(&b);
  WAIT(fx.num_peers == 2);
  raw_next(r2, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  frame_free(&f);
  raw_expect_pong(r2, 2, "hi");
}

// Out of descriptors, libuv accepts a connection and closes it at once,
// silently: the daemon looked alive and refused everyone (an audit). The
// pacer's probe now counts (and logs) each second it finds none free; once
// some are, connections are served again.
static void test_out_of_descriptors(void** state) {
  start_server();
  struct rlimit was;
  assert_int_equal(getrlimit(RLIMIT_NOFILE, &was), 0);
  // Made while descriptors remain; nothing between the two setrlimit calls
  // asserts (a failure there would leave later tests without descriptors).
  raw_t* r = raw_adopt(socket(AF_UNIX, SOCK_STREAM, 0));
  int probe = dup(0);
  assert_true(probe >= 0);
  close(probe);
  struct sockaddr_un sa = {.sun_family = AF_UNIX};
  snprintf(sa.sun_path, sizeof(sa.sun_path), "%s", fx.path);
  struct rlimit low = was;
  low.rlim_cur = (rlim_t)probe + 8;
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &low), 0);
  int fill[16];
  int n = 0;
  while (n < 16 && (fill[n] = dup(0)) >= 0) n++;
  int connected = connect(r->fd, (struct sockaddr*)&sa, sizeof(sa));  // into the backlog
  RUN_UNTIL(fx.srv.pacer.fds_out > 0, 3000);
  uint64_t seen = fx.srv.pacer.fds_out;
  raw_fill(r);
  bool closed = r->eof || r->reset;  // by libuv, with its spare descriptor
  for (int i = 0; i < n; ++i) close(fill[i]);
  assert_int_equal(setrlimit(RLIMIT_NOFILE, &was), 0);
  assert_true(n < 16);  // the last dup failed: none were left
  assert_int_equal(connected, 0);
  assert_true(seen > 0);
  assert_true(closed);
  assert_int_equal(fx.num_peers, 0);  // never handed to the daemon
  // Descriptors again: served.
  raw_t* r2 = raw_connect();
  buf_t b = {0};
  buf_hello(&b, "sesame", ROLE_CLIENT, 0, "later");
  buf_ping(&b, 2, "hi");
  raw_send_buf(r2, &b);
  WAIT(fx.num_peers == 1);
  frame_t f;
  raw_next(r2, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  frame_free(&f);
  raw_expect_pong(r2, 2, "hi");
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
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client(address, 0, o);
  cw_net_conn_retain(conn);
  reply_t a = {0};
  request_ping(conn, "x", &a);
  WAIT(a.done);
  expect_failed(&a, CW_UNAVAILABLE, want);
  assert_int_equal(o->closes, 1);
  assert_int_equal(o->close_code, CW_UNAVAILABLE);
  assert_string_equal(o->close_msg, want);
  assert_string_equal(cw_status_message(cw_net_conn_close_reason(conn)), want);
  reply_t b = {0};
  request_ping(conn, "y", &b);  // later requests learn why too
  assert_true(b.done);
  assert_string_equal(b.msg, want);
  cw_net_conn_release(conn);
  WAIT(o->freed);
}

// A peer that accepts and never answers HELLO (wedged, or hostile) is given
// up at the connect deadline, like one that never accepts.
static void test_silent_peer_times_out(void** state) {
  start_client("sesame");
  int s = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  assert_int_equal(bind(s, (struct sockaddr*)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(s, 4), 0);  // the kernel completes the connect; nobody reads
  socklen_t len = sizeof(sa);
  assert_int_equal(getsockname(s, (struct sockaddr*)&sa, &len), 0);
  char address[64], want[160];
  snprintf(address, sizeof(address), "127.0.0.1:%d", ntohs(sa.sin_port));
  snprintf(want, sizeof(want), "peer %s unreachable: connected, but HELLO got no answer in time",
           address);
  out_t* o = new_out();
  int64_t start = cw_time_now_ms();
  cw_net_conn_t* conn = connect_client_within(address, 0, o, 300);
  reply_t a = {0};
  request_ping(conn, "x", &a);
  WAIT(a.done);
  expect_failed(&a, CW_UNAVAILABLE, want);
  assert_true(cw_time_now_ms() - start >= 300);
  WAIT(o->freed);
  close(s);
}

// Answers the HELLO a client net sent, agreeing to keepalives every `ms`.
static uint32_t answer_hello_warm(raw_t* s, uint32_t ms) {
  frame_t f;
  raw_next(s, &f);
  assert_int_equal(f.h.type, CW_MSG_HELLO);
  uint32_t asked = ((const Causeway__V1__HelloRequest*)f.msg)->keepalive_ms;
  Causeway__V1__HelloReply rep = CAUSEWAY__V1__HELLO_REPLY__INIT;
  rep.version = CW_PROTOCOL_VERSION;
  rep.keepalive_ms = ms;
  buf_t b = {0};
  buf_frame(&b, CW_MSG_HELLO, CW_FRAME_REPLY, f.h.request_id, &rep.base, NULL, 0);
  raw_send_buf(s, &b);
  frame_free(&f);
  return asked;
}

static void send_keepalive(raw_t* s) {
  Causeway__V1__ClusterEvent ev = CAUSEWAY__V1__CLUSTER_EVENT__INIT;
  ev.kind = CAUSEWAY__V1__CLUSTER_EVENT__KIND__KEEPALIVE;
  buf_t b = {0};
  buf_frame(&b, CW_MSG_EVENT, 0, 0, &ev.base, NULL, 0);
  raw_send_buf(s, &b);
}

// An outbound link (a controller's or worker's, to a worker) asks for
// keepalives: one that owes answers and brings nothing for link_timeout_ms
// is closed and what it owes fails, naming it; keepalives keep a request
// waiting (its peer holds its reading) alive however long it waits.
static void test_outbound_link_watch(void** state) {
  fx.sopts.link_timeout_ms = 300;
  start_client("sesame");
  raw_listen();
  // Warm: the PING waits 4 periods unanswered while keepalives come.
  out_t* o = new_out();
  reply_t a = {0};
  cw_net_conn_t* conn = NULL;
  raw_t* s = connect_raw_peer(0, o, NULL, &conn);
  assert_int_equal(answer_hello_warm(s, 75), 75);  // a quarter of the limit asked
  request_ping(conn, "x", &a);
  for (int i = 0; i < 16; ++i) {
    send_keepalive(s);
    RUN_FOR(75);
  }
  assert_false(a.done);
  frame_t f;
  raw_next(s, &f);
  assert_int_equal(f.h.type, CW_MSG_PING);
  Causeway__V1__Ping pong = CAUSEWAY__V1__PING__INIT;
  pong.data = ((const Causeway__V1__Ping*)f.msg)->data;  // echoed
  buf_t b = {0};
  buf_frame(&b, CW_MSG_PING, CW_FRAME_REPLY, f.h.request_id, &pong.base, NULL, 0);
  raw_send_buf(s, &b);
  frame_free(&f);
  WAIT(a.done);
  assert_int_equal(a.code, CW_OK);
  // Silent: the next PING fails after the limit, naming the link.
  reply_t c = {0};
  int64_t start = cw_time_now_ms();
  request_ping(conn, "y", &c);
  WAIT(c.done);
  assert_int_equal(c.code, CW_UNAVAILABLE);
  if (!strstr(c.msg, "not even its keepalive: it is hung or unreachable (the link waits 300 ms)")) {
    fail_msg("got \"%s\"", c.msg);
  }
  assert_true(cw_time_now_ms() - start >= 300);
  WAIT(o->freed);
  // A peer that agrees to no keepalives (an older one) is not watched.
  out_t* o2 = new_out();
  reply_t d = {0};
  raw_t* s2 = connect_raw_peer(0, o2, NULL, &conn);
  answer_hello_warm(s2, 0);
  request_ping(conn, "z", &d);
  RUN_FOR(700);
  assert_false(d.done);
  cw_net_conn_close(conn, NULL);  // before `d` goes out of scope
  WAIT(d.done);
}

// A worker holds a connection's reading as long as it needs (memory, its
// order of requests, a paused session): a daemon's link to it must not end
// for the zero window that follows. TCP_USER_TIMEOUT counts that as bytes
// unacknowledged (it ended such a link after the limit in a first version
// of the dead-host watch): outbound links are watched by keepalives alone,
// unless marked as reading always (cw_net_conn_peer_always_reads).
static void test_outbound_zero_window_lives(void** state) {
  fx.sopts.link_timeout_ms = 2000;  // keepalives every 250 ms keep the links' own watch quiet
  start_client("sesame");
  int lfd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t len = sizeof(sa);
  assert_int_equal(bind(lfd, (struct sockaddr*)&sa, sizeof(sa)), 0);
  assert_int_equal(listen(lfd, 4), 0);
  assert_int_equal(getsockname(lfd, (struct sockaddr*)&sa, &len), 0);
  char address[64];
  snprintf(address, sizeof(address), "127.0.0.1:%d", ntohs(sa.sin_port));
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client(address, 5, o);
  int fd = -1;
  RUN_UNTIL((fd = accept4(lfd, NULL, NULL, SOCK_NONBLOCK)) >= 0, WAIT_MS);
  assert_true(fd >= 0);
  raw_t* s = raw_adopt(fd);
  assert_int_equal(answer_hello_warm(s, 500), 500);  // a quarter of the limit asked
  reply_t u = {0};
  request_upload_pattern(conn, 64 << 20, &u);  // far past both sides' socket buffers
  for (int i = 0; i < 24; ++i) {  // 6 s, three times the limit, never read
    send_keepalive(s);
    RUN_FOR(250);
  }
  assert_int_equal(o->closes, 0);
  assert_false(u.done);
  cw_net_conn_close(conn, NULL);
  WAIT(u.done);
  close(lfd);
}

// A fresh net's listen at `path` is refused INVALID_ARGUMENT naming `text`;
// the net is deinitialized (its handles close on later loop turns).
static void expect_listen_refused(cw_net_t* net, const char* path, const char* text) {
  memset(net, 0, sizeof(*net));
  cw_net_initialize(net, &fx.loop, &fx.sopts);
  cw_status_t st = listen_at(net, path);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  if (!strstr(cw_status_message(st), text)) fail_msg("got \"%s\"", cw_status_message(st));
  cw_status_free(st);
  cw_net_deinitialize(net);
}

// Unix socket paths: a second listener on a live daemon's path is refused
// (it used to unlink the path and take it over, leaving the first
// unreachable); a path longer than sockaddr_un holds is refused by name, as
// is connecting to one (libuv cut it short and bound the shorter path,
// outside its directory); a missing directory is named; a listener removes
// its socket file at the end only if the path is still that file.
static void test_unix_paths(void** state) {
  start_server();
  start_client("sesame");
  cw_status_t st = listen_at(&fx.cli, fx.path);
  assert_int_equal(cw_status_code(st), CW_FAILED_PRECONDITION);
  assert_non_null(strstr(cw_status_message(st), "another process is listening there"));
  cw_status_free(st);
  raw_t* r = raw_connect();  // the first still has its path
  raw_hello(r, 0);
  raw_ping(r, 1, "still here");
  raw_expect_pong(r, 1, "still here");
  char longp[200];
  int n = snprintf(longp, sizeof(longp), "%s/", fx.dir);
  memset(longp + n, 'x', sizeof(longp) - 1 - (size_t)n);
  longp[sizeof(longp) - 1] = 0;
  static cw_net_t other;  // its handles close on later loop turns
  expect_listen_refused(&other, longp, "Unix socket path too long (199 > 107 bytes)");
  longp[107] = 0;  // what the bind would have made of it
  assert_int_not_equal(access(longp, F_OK), 0);
  RUN_FOR(20);
  longp[107] = 'x';
  cw_net_conn_t* conn = NULL;
  st = cw_net_connect(&fx.cli, longp, "longp", CAUSEWAY__V1__ROLE__ROLE_CLIENT, 0, NULL, NULL,
                      1000, &conn);
  assert_int_equal(cw_status_code(st), CW_INVALID_ARGUMENT);
  assert_non_null(strstr(cw_status_message(st), "Unix socket path too long"));
  assert_null(conn);
  cw_status_free(st);
  // A missing directory is named (libuv would say "permission denied").
  char nodir[160];
  snprintf(nodir, sizeof(nodir), "%s/nodir/s.sock", fx.dir);
  static cw_net_t lost;
  expect_listen_refused(&lost, nodir, "/nodir: No such file or directory");
  // A listener that stops removes its socket only if the path is still its
  // own: here another file took the path meanwhile, and stays.
  char mine[160], moved[170];
  snprintf(mine, sizeof(mine), "%s/mine.sock", fx.dir);
  snprintf(moved, sizeof(moved), "%s.moved", mine);
  static cw_net_t own;
  memset(&own, 0, sizeof(own));
  cw_net_initialize(&own, &fx.loop, &fx.sopts);
  st = listen_at(&own, mine);
  assert_null(st);
  assert_int_equal(rename(mine, moved), 0);
  FILE* f = fopen(mine, "w");
  assert_non_null(f);
  fclose(f);
  cw_net_stop(&own);
  assert_int_equal(access(mine, F_OK), 0);
  cw_net_deinitialize(&own);
  RUN_FOR(20);
  unlink(mine);
  unlink(moved);
}

static void test_refused_hello(void** state) {
  start_server();
  start_client("not the token");
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client(fx.path, 0, o);
  reply_t a = {0};
  request_ping(conn, "x", &a);
  WAIT(a.done);
  assert_int_equal(a.code, CW_UNAUTHENTICATED);
  const char* want = "peer srvname refused HELLO: credentials refused: wrong token";
  if (strncmp(a.msg, want, strlen(want)) != 0) fail_msg("got \"%s\"", a.msg);
  assert_int_equal(o->closes, 1);
  assert_int_equal(o->close_code, CW_UNAUTHENTICATED);
  assert_string_equal(o->close_msg, a.msg);
  assert_int_equal(fx.num_peers, 1);
  peer_t* p = fx.peers[0];
  WAIT(p->closes == 1);
  assert_int_equal(p->calls, 0);  // the PING behind the HELLO was never handled
  WAIT(o->freed);
}

// A connection that closes after the connect but before the peer answered
// HELLO is no different from a later close: its requests fail UNAVAILABLE
// "connection to NAME closed: REASON" (only an unreachable peer or a refused
// HELLO fail them with the reason itself).
static void test_close_before_hello_answered(void** state) {
  start_client("sesame");
  raw_listen();
  for (int by_owner = 0; by_owner < 2; ++by_owner) {
    out_t* o = new_out();
    reply_t a = {0};
    cw_net_conn_t* conn;
    raw_t* s = connect_raw_peer(0, o, &a, &conn);
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
    assert_int_equal(o->closes, 1);
    assert_int_equal(o->close_code, by_owner ? CW_ABORTED : CW_UNAVAILABLE);
    WAIT(o->freed);
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
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client(fx.path, 0, o);
  reply_t d = {0};
  request_ping(conn, "defer", &d);
  WAIT(fx.num_peers == 3 && last_peer()->num_deferred == 1);
  peer_t* pc = last_peer();
  // A second client connection, to a peer that never answers.
  raw_listen();
  out_t* o2 = new_out();
  reply_t e = {0};
  cw_net_conn_t* conn2;
  raw_t* s = connect_raw_peer(0, o2, &e, &conn2);
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
  assert_int_equal(o->closes, 1);
  assert_false(e.done);
  cw_net_stop(&fx.cli);
  expect_failed(&e, CW_UNAVAILABLE, "connection to srvname closed");
  assert_int_equal(o2->closes, 1);
  assert_true(o2->closed_on_purpose);
  cw_net_deinitialize(&fx.srv);
  fx.srv_on = false;
  cw_net_deinitialize(&fx.cli);
  fx.cli_on = false;
  WAIT(fx.freed == 3 && o->freed && o2->freed);
  raw_expect_eof(s);
}

// A host name is resolved off the loop (a controller that resolved a
// worker's advertised name on its loop stalled for the resolver's time, at
// every link attempt): connecting returns the connection at once; what is
// sent meanwhile, bulk included, waits for the socket and goes out once it
// connects; a name that does not resolve fails the connection later, naming
// the name. The .invalid domain never resolves (RFC 6761).
static void test_connect_by_name(void** state) {
  start_server_tcp();
  start_client("sesame");
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client("no-such-host.invalid:1", 0, o);
  cw_net_conn_retain(conn);
  reply_t a = {0};
  request_ping(conn, "x", &a);
  WAIT(a.done);
  assert_int_equal(a.code, CW_UNAVAILABLE);
  fprintf(stderr, "  %s\n", a.msg);
  if (!strstr(a.msg, "peer no-such-host.invalid:1 unreachable: cannot resolve "
                     "'no-such-host.invalid': ") &&
      !strstr(a.msg, "peer no-such-host.invalid:1 unreachable: resolving its name timed out")) {
    fail_msg("got \"%s\"", a.msg);
  }
  cw_net_conn_release(conn);
  WAIT(o->freed);
  // localhost, where it is IPv4 (the server listens on 127.0.0.1).
  struct addrinfo hints = {.ai_socktype = SOCK_STREAM}, *res = NULL;
  assert_int_equal(getaddrinfo("localhost", NULL, &hints, &res), 0);
  bool v4 = res->ai_family == AF_INET;
  freeaddrinfo(res);
  if (!v4) {
    fprintf(stderr, "  skipped the connect by name: localhost resolves to IPv6 first here\n");
    return;
  }
  char address[64];
  snprintf(address, sizeof(address), "localhost%s", strrchr(fx.srv.listen_address, ':'));
  out_t* o2 = new_out();
  cw_net_conn_t* c2 = connect_client(address, 5, o2);  // UPLOAD needs a session
  assert_true(c2->resolving);
  reply_t u = {0}, b = {0};
  request_upload_pattern(c2, 300000, &u);  // copied while it resolves
  request_ping(c2, "by name", &b);
  WAIT(u.done && b.done);
  assert_int_equal(u.code, CW_OK);
  assert_int_equal(b.code, CW_OK);
  assert_int_equal(b.data_len, strlen("by name"));
  assert_memory_equal(b.data, "by name", b.data_len);
  expect_pattern_uploaded(300000);
  cw_net_conn_close(c2, NULL);
  WAIT(o2->freed);
}

// A resolver that takes its time for *.slow.test (a lookup under way when the
// connection closes or the net goes): 1 s, then "unknown".
int getaddrinfo(const char* node, const char* service, const struct addrinfo* hints,
                struct addrinfo** res) {
  static int (*real)(const char*, const char*, const struct addrinfo*, struct addrinfo**);
  if (!real) real = (int (*)(const char*, const char*, const struct addrinfo*,
                              struct addrinfo**))dlsym(RTLD_NEXT, "getaddrinfo");
  size_t n = node ? strlen(node) : 0;
  if (n > 10 && !strcmp(node + n - 10, ".slow.test")) {
    usleep(1000 * 1000);
    return EAI_NONAME;
  }
  // What "localhost" gives with Debian's stock /etc/hosts (::1 and
  // 127.0.0.1, IPv6 first), whatever this host's file says.
  if (node && !strcmp(node, "v6first.test")) {
    struct addrinfo *v6 = NULL, *v4 = NULL;
    int rc = real("::1", service, hints, &v6);
    if (rc) return rc;
    rc = real("127.0.0.1", service, hints, &v4);
    if (rc) {
      freeaddrinfo(v6);
      return rc;
    }
    struct addrinfo* last = v6;
    while (last->ai_next) last = last->ai_next;
    last->ai_next = v4;
    *res = v6;
    return 0;
  }
  return real(node, service, hints, res);
}

// A name whose first address refuses (IPv6 ::1, the server listening on
// 127.0.0.1 only) and whose second answers: is the second tried?
static void test_connect_by_name_tries_each_address(void** state) {
  start_server_tcp();
  start_client("sesame");
  char address[64];
  snprintf(address, sizeof(address), "v6first.test%s", strrchr(fx.srv.listen_address, ':'));
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client(address, 0, o);
  reply_t a = {0};
  request_ping(conn, "second address", &a);
  WAIT(a.done);
  if (a.code != CW_OK) fail_msg("got %d \"%s\"", a.code, a.msg);
  cw_net_conn_close(conn, NULL);
  WAIT(o->freed);
  // Both refuse (port 1: nothing listens): the last one's error, once.
  o = new_out();
  conn = connect_client("v6first.test:1", 0, o);
  reply_t b = {0};
  request_ping(conn, "none answers", &b);
  WAIT(b.done);
  assert_int_equal(b.code, CW_UNAVAILABLE);
  assert_string_equal(b.msg, "peer v6first.test:1 unreachable: connection refused");
  WAIT(o->freed);
}

// Closed by its owner while its name resolves (queued: cancelled; under way:
// runs out): the request fails, the connection is freed.
static void test_close_while_resolving(void** state) {
  start_server_tcp();
  start_client("sesame");
  const char* names[] = {"localhost", "a.slow.test"};
  for (int i = 0; i < 2; ++i) {
    out_t* o = new_out();
    char address[64];
    snprintf(address, sizeof(address), "%s%s", names[i], strrchr(fx.srv.listen_address, ':'));
    cw_net_conn_t* conn = connect_client(address, 0, o);
    assert_true(conn->resolving);
    reply_t a = {0};
    request_ping(conn, "x", &a);
    cw_net_conn_close(conn, NULL);
    assert_true(a.done);
    WAIT(o->freed);
  }
}

// The client net deinitialized while a lookup is under way: does the loop
// finish (teardown's passes), is the connection freed?
static void test_deinit_while_resolving(void** state) {
  start_client("sesame");
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client("b.slow.test:1", 0, o);
  assert_true(conn->resolving);
  usleep(100 * 1000);  // the pool thread has taken it
  cw_net_deinitialize(&fx.cli);
  fx.cli_on = false;
  // A lookup under way cannot be cancelled: the connection goes when it
  // returns (a daemon's last uv_run waits that long).
  assert_false(o->freed);
  WAIT(o->freed);
}

// A bulk sent while the name resolves, freed by its owner's bulk_free: when?
static int g_freed_inside;
static bool g_in_call;
static void note_free(void* user) {
  g_freed_inside += g_in_call;
  free(user);
}

static void test_bulk_free_while_resolving(void** state) {
  start_server_tcp();
  start_client("sesame");
  char address[64];
  snprintf(address, sizeof(address), "localhost%s", strrchr(fx.srv.listen_address, ':'));
  cw_net_conn_t* conn = connect_client(address, 5, new_out());
  uint8_t* up = malloc(1000);
  memset(up, 7, 1000);
  Causeway__V1__UploadRequest u = CAUSEWAY__V1__UPLOAD_REQUEST__INIT;
  int64_t dims = 1000;
  u.buffer_id = 1;
  u.dtype = CAUSEWAY__V1__DTYPE__DTYPE_U8;
  u.n_dims = 1;
  u.dims = &dims;
  reply_t r = {0};
  g_in_call = true;
  request_upload(conn, &u.base, up, 1000, note_free, up, &r);
  g_in_call = false;
  // Held by reference, in order, counted as a write under way (not copied
  // into the frame buffer: a bulk may be GiBs).
  assert_int_equal(g_freed_inside, 0);
  assert_int_equal(conn->writes_pending, 1);
  assert_int_equal(conn->out_len, 0);
  reply_t b = {0};
  request_ping(conn, "after", &b);
  WAIT(r.done && b.done);
  assert_int_equal(r.code, CW_OK);
  assert_int_equal(b.code, CW_OK);
  assert_int_equal(g_freed_inside, 0);
  // Closed while a held bulk waits: its owner gets it back, nothing leaks.
  out_t* o = new_out();
  conn = connect_client(address, 5, o);
  uint8_t* up2 = malloc(1000);
  reply_t r2 = {0};
  request_upload(conn, &u.base, up2, 1000, note_free, up2, &r2);
  assert_int_equal(conn->writes_pending, 1);
  cw_net_conn_close(conn, NULL);
  assert_true(r2.done);
  WAIT(o->freed);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NET_TEST(test_hello_deadline),
      NET_TEST(test_max_connections),
      NET_TEST(test_unauth_budget),
      NET_TEST(test_silent_ones_go_first),
      NET_TEST(test_prehello_memory),
      NET_TEST(test_per_peer_budget),
      NET_TEST(test_accept_pacing),
      NET_TEST(test_accept_out_of_memory),
      NET_TEST(test_out_of_descriptors),
      NET_TEST(test_connect_to_dead_address),
      NET_TEST(test_connect_by_name),
      NET_TEST(test_close_while_resolving),
      NET_TEST(test_deinit_while_resolving),
      NET_TEST(test_bulk_free_while_resolving),
      NET_TEST(test_connect_by_name_tries_each_address),
      NET_TEST(test_silent_peer_times_out),
      NET_TEST(test_unix_paths),
      NET_TEST(test_outbound_link_watch),
      NET_TEST(test_outbound_zero_window_lives),
      NET_TEST(test_refused_hello),
      NET_TEST(test_close_before_hello_answered),
      NET_TEST(test_stop_with_connections_open),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
