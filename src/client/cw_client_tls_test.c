// Unit tests of the client library over TLS (cw_client_tls.c) against the
// fake peer speaking TLS on 127.0.0.1: HELLO inside TLS; large bulk both
// ways; several writer threads and the reader sharing one SSL at once; a
// peer certificate of another CA; mutual TLS without and with a client
// certificate; a TLS client at a plaintext peer; TLS from the environment;
// a Unix socket staying plaintext.
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "cw_client_fake_peer.h"
#include "cw_tls_test_pki.h"

static tls_test_pki_t g_pki;

static int group_setup(void** state) { return tls_test_pki_make(&g_pki, "cw_client_tls_test"); }

static int group_teardown(void** state) {
  tls_test_pki_remove(&g_pki);
  return 0;
}

// A context of the cluster's CA (or another), with a certificate and key
// (TP_COUNT: none).
static cw_tls_t* ctx(int ca, int cert, int key, bool server, bool require) {
  cw_tls_config_t c = {true, g_pki.path[ca], cert < TP_COUNT ? g_pki.path[cert] : "",
                       key < TP_COUNT ? g_pki.path[key] : "", require};
  cw_tls_t* t = NULL;
  assert_ok(cw_tls_create(&c, server, &t));
  return t;
}

static cw_client_t* connect_tls(fake_t* f, cw_tls_t* tls) {
  cw_client_options_t o = {.token = "tls-token", .tls = tls};
  cw_client_t* c = NULL;
  assert_ok(cw_client_connect(f->path, &o, &c));
  return c;
}

// The usual pair: a fake peer with the cluster's daemon certificate running
// script_echo (serving f->pattern), and a client of the cluster's CA
// connected to it. Release both contexts after fake_join.
static cw_client_t* start_echo(fake_t* f, cw_tls_t** out_srv, cw_tls_t** out_cli) {
  *out_srv = ctx(TP_CA, TP_SRV, TP_SRV_KEY, true, false);
  *out_cli = ctx(TP_CA, TP_COUNT, TP_COUNT, false, false);
  f->tls = *out_srv;
  fake_start(f, script_echo);
  return connect_tls(f, *out_cli);
}

static void test_hello_inside_tls(void** state) {
  cw_tls_t *srv, *cli;
  fake_t f = {0};
  cw_client_t* c = start_echo(&f, &srv, &cli);
  assert_int_equal(cw_client_session_id(c), 77);
  assert_ok(cw_client_ping(c));
  cw_client_release(c);
  fake_join(&f);
  assert_string_equal(f.hello_token, "tls-token");  // it arrived, decrypted
  assert_string_equal(f.tls_error, "");
  cw_tls_release(cli);
  cw_tls_release(srv);
}

static void test_bulk_both_ways(void** state) {
  enum { N = 24 << 20 };
  uint8_t* pattern = make_pattern(N);
  cw_tls_t *srv, *cli;
  fake_t f = {.pattern = pattern, .pattern_len = N};
  cw_client_t* c = start_echo(&f, &srv, &cli);
  int64_t dims = N;
  // Upload: the fake checks every byte against the pattern.
  assert_ok(cw_client_upload(c, 1, CAUSEWAY__V1__DTYPE__DTYPE_U8, &dims, 1, NULL, 0, pattern, N,
                             NULL, NULL));
  assert_ok(cw_client_flush(c));
  uint8_t* got = malloc(N);
  size_t size = 0;
  assert_ok(cw_client_download(c, 1, got, N, &size, NULL));
  assert_int_equal(size, N);
  assert_memory_equal(got, pattern, N);
  free(got);
  cw_client_release(c);
  fake_join(&f);
  free(pattern);
  cw_tls_release(cli);
  cw_tls_release(srv);
}

typedef struct writer_s {
  cw_client_t* c;
  const uint8_t* pattern;
  size_t len;
  int failures;
  char first[256];  // the first failure's message
} writer_t;

static void writer_failed(writer_t* w, const char* call, cw_status_t s) {
  if (!w->failures++) {
    snprintf(w->first, sizeof(w->first), "%s: %s", call, cw_status_message(s));
  }
  cw_status_free(s);
}

// Uploads and pings from its own thread while others download.
static void* writer_main(void* arg) {
  writer_t* w = arg;
  int64_t dims = (int64_t)w->len;
  for (int i = 0; i < 20; ++i) {
    cw_status_t s = cw_client_upload(w->c, (uint64_t)i, CAUSEWAY__V1__DTYPE__DTYPE_U8, &dims, 1,
                                     NULL, 0, w->pattern, w->len, NULL, NULL);
    if (s) {
      writer_failed(w, "upload", s);
    } else if ((s = cw_client_ping(w->c)) != NULL) {
      writer_failed(w, "ping", s);
    }
  }
  cw_status_t s = cw_client_flush(w->c);
  if (s) writer_failed(w, "flush", s);
  return NULL;
}

// One SSL, four writers and the reader at once: every request completes
// and every byte arrives intact (the reader decrypts downloads while
// writers encrypt uploads; neither waits for the socket holding the lock).
static void test_writers_and_reader_share_the_ssl(void** state) {
  enum { N = 1 << 20 };
  uint8_t* pattern = make_pattern(N);
  cw_tls_t *srv, *cli;
  fake_t f = {.pattern = pattern, .pattern_len = N};
  cw_client_t* c = start_echo(&f, &srv, &cli);
  writer_t w[4];
  pthread_t t[4];
  for (int i = 0; i < 4; ++i) {
    w[i] = (writer_t){.c = c, .pattern = pattern, .len = N};
    pthread_create(&t[i], NULL, writer_main, &w[i]);
  }
  uint8_t* got = malloc(N);
  for (int i = 0; i < 20; ++i) {
    size_t size = 0;
    memset(got, 0, N);
    assert_ok(cw_client_download(c, 1, got, N, &size, NULL));
    assert_int_equal(size, N);
    assert_memory_equal(got, pattern, N);
  }
  for (int i = 0; i < 4; ++i) {
    pthread_join(t[i], NULL);
    if (w[i].failures) fail_msg("writer %d: %d failed, the first %s", i, w[i].failures, w[i].first);
  }
  free(got);
  cw_client_release(c);
  fake_join(&f);
  free(pattern);
  cw_tls_release(cli);
  cw_tls_release(srv);
}

// A connect through `cli` to a fake peer with `srv` fails with `needle`,
// and the peer's handshake with `peer_needle`.
static void expect_refused(cw_tls_t* srv, cw_tls_t* cli, const char* needle,
                           const char* peer_needle) {
  fake_t f = {.tls = srv};
  fake_start(&f, NULL);
  cw_client_options_t o = {.tls = cli};
  cw_client_t* c = NULL;
  expect_status(cw_client_connect(f.path, &o, &c), CW_UNAVAILABLE, needle);
  assert_null(c);
  fake_join(&f);
  if (!strstr(f.tls_error, peer_needle)) fail_msg("peer: \"%s\"", f.tls_error);
}

static void test_peer_of_another_ca(void** state) {
  cw_tls_t* srv = ctx(TP_OCA, TP_OSRV, TP_OSRV_KEY, true, false);
  cw_tls_t* cli = ctx(TP_CA, TP_COUNT, TP_COUNT, false, false);
  expect_refused(srv, cli, "(the peer's certificate is not signed by the CA in CAUSEWAY_TLS_CA)",
                 "unknown ca");
  cw_tls_release(cli);
  cw_tls_release(srv);
}

static void test_mutual_tls(void** state) {
  cw_tls_t* srv = ctx(TP_CA, TP_SRV, TP_SRV_KEY, true, true);
  cw_tls_t* anon = ctx(TP_CA, TP_COUNT, TP_COUNT, false, false);
  expect_refused(srv, anon, "the peer requires a client certificate for mutual TLS",
                 "peer did not return a certificate");
  cw_tls_t* cert = ctx(TP_CA, TP_CLI, TP_CLI_KEY, false, false);
  fake_t g = {.tls = srv};
  fake_start(&g, script_echo);
  cw_client_t* c = connect_tls(&g, cert);
  assert_ok(cw_client_ping(c));
  cw_client_release(c);
  fake_join(&g);
  cw_tls_release(cert);
  cw_tls_release(anon);
  cw_tls_release(srv);
}

static void test_tls_client_at_plaintext_peer(void** state) {
  cw_tls_t* cli = ctx(TP_CA, TP_COUNT, TP_COUNT, false, false);
  fake_t f = {.plain_tcp = true};
  fake_start(&f, NULL);  // reads a "frame" that is a ClientHello, fails, closes
  cw_client_options_t o = {.tls = cli, .connect_timeout_ms = 1000};
  cw_client_t* c = NULL;
  expect_status(cw_client_connect(f.path, &o, &c), CW_UNAVAILABLE, "TLS handshake with ");
  assert_null(c);
  f.failure[0] = 0;  // the fake's complaint about the ClientHello is expected
  fake_join(&f);
  cw_tls_release(cli);
}

static void test_tls_from_environment(void** state) {
  cw_tls_t* srv = ctx(TP_CA, TP_SRV, TP_SRV_KEY, true, false);
  fake_t f = {.tls = srv};
  fake_start(&f, script_echo);
  setenv("CAUSEWAY_TLS", "1", 1);
  setenv("CAUSEWAY_TLS_CA", g_pki.path[TP_CA], 1);
  cw_client_t* c = NULL;
  cw_status_t s = cw_client_connect(f.path, NULL, &c);
  assert_ok(s);
  assert_ok(cw_client_ping(c));
  cw_client_release(c);
  fake_join(&f);
  // A missing CA is said at connect.
  setenv("CAUSEWAY_TLS_CA", "/nonexistent/ca.pem", 1);
  fake_t g = {.tls = srv};
  fake_start(&g, NULL);
  expect_status(cw_client_connect(g.path, NULL, &c), CW_INVALID_ARGUMENT,
                "CAUSEWAY_TLS_CA /nonexistent/ca.pem: No such file or directory");
  // The fake still waits for a connection: give it one that closes.
  cw_client_options_t plain = {.connect_timeout_ms = 500};
  unsetenv("CAUSEWAY_TLS");
  unsetenv("CAUSEWAY_TLS_CA");
  cw_status_free(cw_client_connect(g.path, &plain, &c));
  fake_join(&g);
  cw_tls_release(srv);
}

// A Unix socket stays plaintext whatever TLS says.
static void test_unix_socket_stays_plaintext(void** state) {
  cw_tls_t* cli = ctx(TP_CA, TP_COUNT, TP_COUNT, false, false);
  fake_t f = {0};
  fake_start(&f, script_echo);
  cw_client_t* c = connect_tls(&f, cli);
  assert_ok(cw_client_ping(c));
  cw_client_release(c);
  fake_join(&f);
  cw_tls_release(cli);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_hello_inside_tls),
      cmocka_unit_test(test_bulk_both_ways),
      cmocka_unit_test(test_writers_and_reader_share_the_ssl),
      cmocka_unit_test(test_peer_of_another_ca),
      cmocka_unit_test(test_mutual_tls),
      cmocka_unit_test(test_tls_client_at_plaintext_peer),
      cmocka_unit_test(test_tls_from_environment),
      cmocka_unit_test(test_unix_socket_stays_plaintext),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
