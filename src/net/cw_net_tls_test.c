// Unit tests of cw_net_tls.c on a real loop (fixture: cw_net_test_fixture.h,
// a server net on TCP with TLS, a client net or raw sockets as peers):
// handshake and HELLO inside TLS; bulk both ways larger than the ciphertext
// kept in flight; a plaintext causeway peer told that TLS is required and
// other plaintext closed; a TLS client at a plaintext port; a client that
// trusts another CA; mutual TLS without a client certificate, with one, and
// with one of another CA.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_net_internal.h"
#include "cw_net_test_fixture.h"
#include "cw_tls_test_pki.h"

static tls_test_pki_t g_pki;
#define F(name) g_pki.path[TP_##name]

static int group_setup(void** state) { return tls_test_pki_make(&g_pki, "cw_net_tls_test"); }

static int group_teardown(void** state) {
  tls_test_pki_remove(&g_pki);
  return 0;
}

static void server_tls(bool require_client_cert) {
  fx.sopts.tls = (cw_tls_config_t){true, F(CA), F(SRV), F(SRV_KEY), require_client_cert};
  start_server_tcp();
  assert_true(fx.srv.tls_listener);
}

// The client net's TLS: the cluster's CA (or another) and maybe a
// certificate (TP_COUNT: none).
static void client_tls(int ca, int cert, int key) {
  fx.sopts.tls = (cw_tls_config_t){true, g_pki.path[ca], cert < TP_COUNT ? g_pki.path[cert] : "",
                                   key < TP_COUNT ? g_pki.path[key] : "", false};
  start_client("sesame");
}

// Another client net: the last one's handles close first (the loop runs).
static void restart_client(int ca, int cert, int key) {
  cw_net_deinitialize(&fx.cli);
  fx.cli_on = false;
  RUN_FOR(20);
  client_tls(ca, cert, key);
}

static void expect_contains(const char* got, const char* want) {
  if (!strstr(got, want)) fail_msg("got \"%s\", want \"%s\"", got, want);
}

static void test_handshake_and_hello(void** state) {
  server_tls(false);
  client_tls(TP_CA, TP_COUNT, TP_COUNT);
  cw_net_conn_t* conn = connect_client(fx.srv.listen_address, 0, new_out());
  reply_t a = {0};
  request_ping(conn, "over tls", &a);
  WAIT(a.done);
  assert_int_equal(a.code, CW_OK);
  assert_memory_equal(a.data, "over tls", 8);
  assert_true(conn->tls && conn->tls_up);
  peer_t* p = last_peer();
  assert_true(p->conn->tls_up);
  assert_non_null(p->conn->ssl);
  assert_string_equal(SSL_get_version(p->conn->ssl), "TLSv1.3");
  assert_true(p->bytes_in > 0);  // plaintext counted as it is decrypted
}

// By name (resolved off the loop): the ClientHello and the frames queued
// meanwhile wait for the socket, then go out; the name is what is verified.
static void test_bulk_by_name(void** state) {
  server_tls(false);
  client_tls(TP_CA, TP_COUNT, TP_COUNT);
  char address[64];
  snprintf(address, sizeof(address), "localhost%s", strrchr(fx.srv.listen_address, ':'));
  cw_net_conn_t* conn = connect_client(address, 5, new_out());
  assert_true(conn->resolving);
  reply_t u = {0};
  request_upload_pattern(conn, 1 << 20, &u);
  WAIT(u.done);
  assert_int_equal(u.code, CW_OK);
  expect_pattern_uploaded(1 << 20);
}

static void test_bulk_both_ways(void** state) {
  server_tls(false);
  client_tls(TP_CA, TP_COUNT, TP_COUNT);
  // UPLOAD needs a session.
  cw_net_conn_t* conn = connect_client(fx.srv.listen_address, 5, new_out());
  enum { N = 6 << 20 };  // more than the ciphertext kept in flight (4 MiB)
  reply_t u = {0};
  request_upload_pattern(conn, N, &u);
  reply_t d = {0};
  request_download(conn, N, &d);
  WAIT(u.done && d.done);
  assert_int_equal(u.code, CW_OK);
  expect_pattern_uploaded(N);
  assert_int_equal(d.code, CW_OK);
  assert_int_equal(d.bulk_len, N);
  for (uint64_t i = 0; i < N; ++i) {
    if (d.bulk[i] != pattern(i)) fail_msg("download byte %llu differs", (unsigned long long)i);
  }
  free(d.bulk);
  assert_int_equal(conn->tls_inflight, 0);
}

static void test_plaintext_peer_refused(void** state) {
  server_tls(false);
  // A causeway peer with TLS off: told so in plaintext, then closed.
  raw_t* r = raw_connect_tcp("127.0.0.1");
  buf_t b = {0};
  buf_hello(&b, "sesame", ROLE_CLIENT, 0, "plain");
  raw_send_buf(r, &b);
  raw_expect_error(r, CW_MSG_HELLO, 1, CW_FAILED_PRECONDITION,
                   "this daemon requires TLS on TCP connections: set CAUSEWAY_TLS=1");
  raw_expect_eof(r);
  // Anything else that is not a TLS handshake: closed, nothing said.
  raw_t* g = raw_connect_tcp("127.0.0.1");
  assert_true(raw_send(g, "GET / HTTP/1.0\r\n\r\n", 18));
  raw_expect_eof(g);
  assert_int_equal(g->len, 0);
  assert_int_equal(fx.srv.tls_failures, 2);
  WAIT(fx.num_peers == 2 && fx.peers[0]->closes == 1 && fx.peers[1]->closes == 1);
  assert_int_equal(fx.peers[0]->calls + fx.peers[1]->calls, 0);
}

static void test_tls_client_at_plaintext_port(void** state) {
  start_server_tcp();  // TLS off
  client_tls(TP_CA, TP_COUNT, TP_COUNT);
  out_t* o = new_out();
  cw_net_conn_t* conn = connect_client(fx.srv.listen_address, 0, o);
  reply_t a = {0};
  request_ping(conn, "x", &a);
  WAIT(a.done);
  assert_int_equal(a.code, CW_UNAVAILABLE);
  expect_contains(a.msg, "TLS handshake with 127.0.0.1:");
  expect_contains(a.msg, "during the TLS handshake: a daemon with TLS off closes one");
  assert_int_equal(fx.srv.tls_failures, 1);
  WAIT(o->freed);
}

static void test_wrong_ca(void** state) {
  server_tls(false);
  client_tls(TP_OCA, TP_COUNT, TP_COUNT);
  cw_net_conn_t* conn = connect_client(fx.srv.listen_address, 0, new_out());
  reply_t a = {0};
  request_ping(conn, "x", &a);
  WAIT(a.done);
  assert_int_equal(a.code, CW_UNAVAILABLE);
  expect_contains(a.msg, "certificate verify failed");
  expect_contains(a.msg, "(the peer's certificate is not signed by the CA in CAUSEWAY_TLS_CA)");
  WAIT(fx.srv.tls_failures == 1);  // the client's alert ends the server's handshake
  WAIT(fx.num_peers == 1 && fx.peers[0]->closes == 1);
  expect_contains(fx.peers[0]->close_msg, "TLS handshake failed: ");
}

// A fresh client connection's PING, waited for: its reply, and the server
// side's close text when it closed.
static void ping_through(const char* data, reply_t* r) {
  cw_net_conn_t* conn = connect_client(fx.srv.listen_address, 0, new_out());
  request_ping(conn, data, r);
  WAIT(r->done);
}

static void test_mutual_tls(void** state) {
  static const struct {
    int cert, key;
    const char* client_reads;  // NULL: served
    const char* server_closes;
  } cases[] = {
      {TP_COUNT, TP_COUNT, "(the peer requires a client certificate for mutual TLS",
       "peer did not return a certificate"},
      {TP_OCLI, TP_OCLI_KEY, "unknown ca (the peer does not trust this side's certificate",
       "certificate verify failed"},
      {TP_CLI, TP_CLI_KEY, NULL, NULL},  // the cluster's client certificate
  };
  server_tls(true);
  for (int i = 0; i < 3; ++i) {
    if (i) restart_client(TP_CA, cases[i].cert, cases[i].key);
    else client_tls(TP_CA, cases[i].cert, cases[i].key);
    reply_t r = {0};
    ping_through("x", &r);
    if (!cases[i].client_reads) {
      assert_int_equal(r.code, CW_OK);
      continue;
    }
    assert_int_equal(r.code, CW_UNAVAILABLE);
    expect_contains(r.msg, cases[i].client_reads);
    WAIT(fx.num_peers == i + 1 && fx.peers[i]->closes == 1);
    expect_contains(fx.peers[i]->close_msg, cases[i].server_closes);
  }
  assert_int_equal(fx.srv.tls_failures, 2);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NET_TEST(test_handshake_and_hello),
      NET_TEST(test_bulk_both_ways),
      NET_TEST(test_bulk_by_name),
      NET_TEST(test_plaintext_peer_refused),
      NET_TEST(test_tls_client_at_plaintext_port),
      NET_TEST(test_wrong_ca),
      NET_TEST(test_mutual_tls),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
