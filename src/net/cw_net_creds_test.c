// Unit tests of cw_net_creds.c on a real loop (fixture: cw_net_test_fixture.h):
// a token file rotated in three steps while peers connect (the old and the
// new accepted in between, the first line presented); TLS files replaced by
// another CA's (new connections see them, one made before keeps going); a
// broken reload that keeps what was in use; SIGHUP; the certificate's end.
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>
#include <cmocka.h>

#include "cw_net_creds.h"
#include "cw_net_internal.h"
#include "cw_net_test_fixture.h"
#include "cw_tls_test_pki.h"

static tls_test_pki_t g_pki;
static cw_settings_t g_settings;
static cw_net_creds_t g_creds;
static char g_token[200], g_ca[200], g_cert[200], g_key[200];

static int group_setup(void** state) { return tls_test_pki_make(&g_pki, "cw_net_creds_test"); }

static int group_teardown(void** state) {
  tls_test_pki_remove(&g_pki);
  return 0;
}

static void write_text(const char* path, const char* text) {
  FILE* f = fopen(path, "w");
  assert_non_null(f);
  fputs(text, f);
  fclose(f);
  chmod(path, 0600);
}

static void copy_file(const char* from, const char* to) {
  FILE* in = fopen(from, "r");
  assert_non_null(in);
  char buf[8192];
  size_t n = fread(buf, 1, sizeof(buf), in);
  fclose(in);
  FILE* out = fopen(to, "w");
  assert_non_null(out);
  assert_int_equal(fwrite(buf, 1, n, out), n);
  fclose(out);
  chmod(to, 0600);
}

// Settings as a daemon's: a token file, and TLS files the test replaces,
// looked at every 20 ms.
static void settings_with(const char* token_text, bool tls) {
  snprintf(g_token, sizeof(g_token), "%s/token", fx.dir);
  snprintf(g_ca, sizeof(g_ca), "%s/ca.pem", fx.dir);
  snprintf(g_cert, sizeof(g_cert), "%s/cert.pem", fx.dir);
  snprintf(g_key, sizeof(g_key), "%s/key.pem", fx.dir);
  write_text(g_token, token_text);
  copy_file(g_pki.path[TP_CA], g_ca);
  copy_file(g_pki.path[TP_SRV], g_cert);
  copy_file(g_pki.path[TP_SRV_KEY], g_key);
  unsetenv("CAUSEWAY_TOKEN");
  unsetenv("CAUSEWAY_TOKEN_FILE");
  assert_null(cw_settings_initialize(&g_settings, CW_SCOPE_CONTROLLER));
  assert_null(cw_settings_set(&g_settings, "token-file", g_token, false));
  assert_null(cw_settings_set(&g_settings, "credentials-check-ms", "20", false));
  if (tls) {
    assert_null(cw_settings_set(&g_settings, "tls", "1", false));
    assert_null(cw_settings_set(&g_settings, "tls-ca", g_ca, false));
    assert_null(cw_settings_set(&g_settings, "tls-cert", g_cert, false));
    assert_null(cw_settings_set(&g_settings, "tls-key", g_key, false));
    cw_tls_config_from_settings(&g_settings, &fx.sopts.tls);
  }
}

static void creds_end(void) {
  cw_net_creds_stop(&g_creds);
  RUN_FOR(10);
  cw_net_creds_free(&g_creds);
  cw_settings_deinitialize(&g_settings);
}

// A raw peer's HELLO with `token`: NULL when answered OK, else the refusal
// (its message, static).
static const char* hello_with(const char* token) {
  static char msg[512];
  raw_t* r = raw_connect();
  raw_hello_as(r, token, ROLE_CLIENT, 0, "rawpeer");
  frame_t f;
  raw_next(r, &f);
  const char* out = NULL;
  if (f.h.flags & CW_FRAME_ERROR) {
    snprintf(msg, sizeof(msg), "%s", ((const Causeway__V1__ErrorReply*)f.msg)->message);
    out = msg;
  }
  frame_free(&f);
  raw_close(r);
  return out;
}

static void expect_refused(const char* token) {
  const char* why = hello_with(token);
  assert_non_null(why);
  assert_string_equal(why, "credentials refused: wrong token (this cluster requires its shared "
                           "token: CAUSEWAY_TOKEN or CAUSEWAY_TOKEN_FILE, or --token-file for "
                           "daemons)");
}

static const char* presented(void) {
  return fx.srv.tokens && fx.srv.tokens->count ? fx.srv.tokens->tokens[0] : "";
}

// Add the new token, present it, drop the old: each step taken up by the
// file check alone, and nobody refused who holds a token still listed.
static void test_token_rotation(void** state) {
  start_server();
  settings_with("old\n", false);
  assert_null(cw_net_creds_start(&g_creds, &fx.loop, &g_settings, &fx.srv));
  assert_null(hello_with("old"));
  expect_refused("new");
  assert_string_equal(presented(), "old");

  write_text(g_token, "old\nnew\n");
  WAIT(g_creds.reloads == 1);
  assert_null(hello_with("old"));
  assert_null(hello_with("new"));
  assert_string_equal(presented(), "old");

  write_text(g_token, "new\nold\n");
  WAIT(g_creds.reloads == 2);
  assert_string_equal(presented(), "new");
  assert_null(hello_with("old"));

  // A connection made with the old token keeps going after it is dropped.
  raw_t* kept = raw_connect();
  raw_hello_as(kept, "old", ROLE_CLIENT, 0, "kept");
  frame_t f;
  raw_next(kept, &f);
  assert_int_equal(f.h.flags, CW_FRAME_REPLY);
  frame_free(&f);
  write_text(g_token, "new\n");
  WAIT(g_creds.reloads == 3);
  expect_refused("old");
  assert_null(hello_with("new"));
  raw_ping(kept, 7, "still");
  raw_expect_pong(kept, 7, "still");

  // A file that cannot be read keeps the tokens in use.
  write_text(g_token, "\n");
  WAIT(g_creds.failures == 1);
  assert_int_equal(g_creds.reloads, 3);
  assert_null(hello_with("new"));
  unlink(g_token);
  WAIT(g_creds.failures == 2);
  assert_null(hello_with("new"));

  // SIGHUP reads it again, changed or not.
  write_text(g_token, "newer\n");
  cw_net_creds_stop(&g_creds);  // no file check: the signal alone
  RUN_FOR(10);
  cw_net_creds_free(&g_creds);
  write_text(g_token, "newest\n");
  assert_null(cw_net_creds_start(&g_creds, &fx.loop, &g_settings, &fx.srv));
  assert_int_equal(uv_timer_stop(&g_creds.timer), 0);
  write_text(g_token, "after\n");
  assert_null(hello_with("newest"));
  assert_int_equal(raise(SIGHUP), 0);
  WAIT(g_creds.reloads == 1);
  assert_null(hello_with("after"));
  expect_refused("newest");
  unlink(g_token);
  creds_end();
}

// A fresh client net trusting `ca` pings through TLS: its reply.
static void ping_with_ca(int ca, reply_t* r) {
  if (fx.cli_on) {
    cw_net_deinitialize(&fx.cli);
    fx.cli_on = false;
    RUN_FOR(20);
  }
  cw_tls_config_t mine = fx.sopts.tls;
  fx.sopts.tls = (cw_tls_config_t){true, g_pki.path[ca], "", "", false};
  start_client("tok");
  fx.sopts.tls = mine;
  cw_net_conn_t* conn = connect_client(fx.srv.listen_address, 0, new_out());
  request_ping(conn, "x", r);
  WAIT(r->done);
}

// The certificate, key and CA replaced by another CA's: new connections
// see them; one made before keeps going; a key that is not the
// certificate's changes nothing.
static void test_tls_files_replaced(void** state) {
  settings_with("tok\n", true);
  start_server_tcp();
  assert_null(cw_net_creds_start(&g_creds, &fx.loop, &g_settings, &fx.srv));
  assert_true(g_creds.not_after > (int64_t)time(NULL));
  reply_t a = {0};
  ping_with_ca(TP_CA, &a);
  assert_int_equal(a.code, CW_OK);
  cw_net_conn_t* before = connect_client(fx.srv.listen_address, 0, new_out());
  reply_t b0 = {0};
  request_ping(before, "before", &b0);
  WAIT(b0.done);
  assert_int_equal(b0.code, CW_OK);

  copy_file(g_pki.path[TP_OCA], g_ca);
  copy_file(g_pki.path[TP_OSRV], g_cert);
  copy_file(g_pki.path[TP_OSRV_KEY], g_key);
  WAIT(g_creds.reloads >= 1 && g_creds.failures == 0);
  RUN_FOR(60);  // no second reload follows
  uint64_t reloads = g_creds.reloads;
  reply_t b1 = {0};
  request_ping(before, "after", &b1);
  WAIT(b1.done);
  assert_int_equal(b1.code, CW_OK);
  reply_t c = {0};
  ping_with_ca(TP_OCA, &c);
  assert_int_equal(c.code, CW_OK);
  reply_t d = {0};
  ping_with_ca(TP_CA, &d);
  assert_int_equal(d.code, CW_UNAVAILABLE);
  if (!strstr(d.msg, "certificate verify failed")) fail_msg("got \"%s\"", d.msg);

  // The first CA's key beside the other CA's certificate: refused, kept.
  copy_file(g_pki.path[TP_SRV_KEY], g_key);
  WAIT(g_creds.failures == 1);
  assert_int_equal(g_creds.reloads, reloads);
  reply_t e = {0};
  ping_with_ca(TP_OCA, &e);
  assert_int_equal(e.code, CW_OK);
  creds_end();
}

static void on_hup(int sig) { (void)sig; }

// SIGHUP ends nothing once the handler is closed (libuv restores the
// default action, which would end a daemon that is shutting down).
static void test_hup_ignored_after_stop(void** state) {
  signal(SIGHUP, SIG_DFL);
  start_server();
  settings_with("tok\n", false);
  assert_null(cw_net_creds_start(&g_creds, &fx.loop, &g_settings, &fx.srv));
  creds_end();
  struct sigaction sa;
  assert_int_equal(sigaction(SIGHUP, NULL, &sa), 0);
  assert_true(sa.sa_handler == SIG_IGN);
  assert_int_equal(raise(SIGHUP), 0);  // and the test goes on
  // A handler someone else installed is left alone.
  signal(SIGHUP, SIG_DFL);
  assert_null(cw_net_creds_start(&g_creds, &fx.loop, &g_settings, &fx.srv));
  cw_net_creds_stop(&g_creds);
  signal(SIGHUP, SIG_DFL);
  cw_net_creds_ignore_hup();
  assert_int_equal(sigaction(SIGHUP, NULL, &sa), 0);
  assert_true(sa.sa_handler == SIG_IGN);
  signal(SIGHUP, on_hup);
  cw_net_creds_ignore_hup();
  assert_int_equal(sigaction(SIGHUP, NULL, &sa), 0);
  assert_true(sa.sa_handler == on_hup);
  signal(SIGHUP, SIG_DFL);
  RUN_FOR(10);
  cw_net_creds_free(&g_creds);
  cw_settings_deinitialize(&g_settings);
}

// Without a file check (--credentials-check-ms 0) the timer still learns
// the certificate's end once TLS is made (a worker's, at its first
// connection out) and warns of it; the files are not looked at.
static void test_expiry_without_file_check(void** state) {
  settings_with("tok\n", true);
  assert_null(cw_settings_set(&g_settings, "credentials-check-ms", "0", false));
  start_server();  // a Unix socket: no TLS made yet
  assert_null(cw_net_creds_start(&g_creds, &fx.loop, &g_settings, &fx.srv));
  assert_int_equal(g_creds.not_after, 0);
  uv_timer_set_repeat(&g_creds.timer, 20);  // the test's period
  assert_int_equal(uv_timer_again(&g_creds.timer), 0);
  cw_tls_t* tls = NULL;
  assert_null(cw_net__tls_context(&fx.srv, true, &tls));
  WAIT(g_creds.not_after > (int64_t)time(NULL));
  assert_true(g_creds.expiry_warned_ms > 0);  // the test CA's certificates end in days
  write_text(g_token, "other\n");
  RUN_FOR(60);
  assert_int_equal(g_creds.reloads, 0);
  creds_end();
}

// A net whose TLS no connection made yet (a worker on a Unix socket before
// its first link out) checks the files at a reload all the same: a broken key
// is refused, not found only at the first connection.
static void test_tls_checked_before_first_use(void** state) {
  settings_with("tok\n", true);
  start_server();  // a Unix socket: no TLS context yet
  assert_null(fx.srv.tls);
  assert_null(cw_net_creds_start(&g_creds, &fx.loop, &g_settings, &fx.srv));
  copy_file(g_pki.path[TP_OSRV_KEY], g_key);  // another CA's key beside our certificate
  WAIT(g_creds.failures == 1);
  assert_int_equal(g_creds.reloads, 0);
  copy_file(g_pki.path[TP_SRV_KEY], g_key);
  WAIT(g_creds.reloads == 1);
  assert_non_null(fx.srv.tls);
  assert_true(g_creds.not_after > (int64_t)time(NULL));
  creds_end();
}

int main(void) {
  const struct CMUnitTest tests[] = {
      NET_TEST(test_token_rotation),
      NET_TEST(test_tls_files_replaced),
      NET_TEST(test_tls_checked_before_first_use),
      NET_TEST(test_hup_ignored_after_stop),
      NET_TEST(test_expiry_without_file_check),
  };
  return cmocka_run_group_tests(tests, group_setup, group_teardown);
}
