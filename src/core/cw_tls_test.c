// Unit tests of cw_tls.c and cw_tls_pki.c: a CA and certificates made and
// written 0600 (refused over existing files), contexts and what their
// loading refuses, handshakes between two SSL objects in memory (accepted;
// refused for a wrong CA, a name the certificate lacks, a missing client
// certificate under mutual TLS, each with its text), addresses and first
// bytes.
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>
#include <cmocka.h>

#include <openssl/err.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include "cw_tls.h"

static char g_dir[64];
static char g_path[16][256];

static const char* path(int i, const char* name) {
  snprintf(g_path[i], sizeof(g_path[i]), "%s/%s", g_dir, name);
  return g_path[i];
}

static void expect_ok(cw_status_t s) {
  if (s) fail_msg("%s", cw_status_message(s));
}

static void expect_error(cw_status_t s, const char* needle) {
  if (!s) fail_msg("no error, want \"%s\"", needle);
  if (!strstr(cw_status_message(s), needle)) {
    char msg[1024];
    snprintf(msg, sizeof(msg), "got \"%s\", want \"%s\"", cw_status_message(s), needle);
    cw_status_free(s);
    fail_msg("%s", msg);
  }
  cw_status_free(s);
}

// ca.pem/ca.key, d.pem/d.key (daemon for 127.0.0.1 and localhost),
// c.pem/c.key (client), and other-ca.pem/other-ca.key.
static int setup(void** state) {
  snprintf(g_dir, sizeof(g_dir), "/tmp/cw_tls_test.XXXXXX");
  if (!mkdtemp(g_dir)) return -1;
  const char* hosts[] = {"127.0.0.1", "localhost"};
  expect_ok(cw_tls_pki_make_ca("test-ca", 30, path(0, "ca.pem"), path(1, "ca.key"), false));
  expect_ok(cw_tls_pki_issue(path(0, "ca.pem"), path(1, "ca.key"), "d", CW_TLS_CERT_DAEMON,
                             hosts, 2, 30, path(2, "d.pem"), path(3, "d.key"), false));
  expect_ok(cw_tls_pki_issue(path(0, "ca.pem"), path(1, "ca.key"), "c", CW_TLS_CERT_CLIENT, NULL,
                             0, 30, path(4, "c.pem"), path(5, "c.key"), false));
  expect_ok(cw_tls_pki_make_ca("other", 30, path(6, "other-ca.pem"), path(7, "other-ca.key"),
                               false));
  return 0;
}

static int teardown(void** state) {
  static const char* names[] = {"ca.pem", "ca.key", "d.pem", "d.key", "c.pem", "c.key",
                                "other-ca.pem", "other-ca.key", "o.pem", "o.key",
                                "expired.pem"};
  for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); ++i) unlink(path(15, names[i]));
  rmdir(g_dir);
  return 0;
}

static void test_files(void** state) {
  const char* files[] = {"ca.pem", "ca.key", "d.pem", "d.key", "c.pem", "c.key"};
  for (size_t i = 0; i < 6; ++i) {
    struct stat sb;
    assert_int_equal(stat(path(8, files[i]), &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
    assert_true(sb.st_size > 100);
  }
  // Not over an existing file, unless asked.
  expect_error(cw_tls_pki_make_ca("x", 30, path(0, "ca.pem"), path(9, "new.key"), false),
               "exists (--force replaces it)");
  const char* hosts[] = {"a.example", "10.0.0.7"};
  expect_error(cw_tls_pki_issue(path(0, "ca.pem"), path(1, "ca.key"), "d", CW_TLS_CERT_DAEMON,
                                hosts, 2, 30, path(2, "d.pem"), path(9, "o.key"), false),
               "exists");
  expect_error(cw_tls_pki_issue(path(0, "ca.pem"), path(1, "ca.key"), "d", CW_TLS_CERT_DAEMON,
                                NULL, 0, 30, path(8, "o.pem"), path(9, "o.key"), false),
               "needs the host names");
  const char* bad[] = {"a,DNS:evil"};
  expect_error(cw_tls_pki_issue(path(0, "ca.pem"), path(1, "ca.key"), "d", CW_TLS_CERT_DAEMON,
                                bad, 1, 30, path(8, "o.pem"), path(9, "o.key"), false),
               "is not a host name or address");
  expect_error(cw_tls_pki_issue(path(0, "ca.pem"), path(6, "other-ca.key"), "d",
                                CW_TLS_CERT_DAEMON, hosts, 2, 30, path(8, "o.pem"),
                                path(9, "o.key"), false),
               "is not the key of");
  expect_error(cw_tls_pki_make_ca("x", 0, path(8, "o.pem"), path(9, "o.key"), false),
               "--days 0");
}

static cw_tls_t* context(const char* ca, const char* cert, const char* key, bool server,
                         bool require) {
  cw_tls_config_t c = {true, ca, cert, key, require};
  cw_tls_t* t = NULL;
  expect_ok(cw_tls_create(&c, server, &t));
  return t;
}

// The daemon's certificate again, its validity ended yesterday, signed by
// the CA: as `causeway certs` made it a year ago.
static void write_expired(const char* out) {
  FILE* f = fopen(path(10, "d.pem"), "r");
  assert_non_null(f);
  X509* x = PEM_read_X509(f, NULL, NULL, NULL);
  fclose(f);
  f = fopen(path(11, "ca.key"), "r");
  assert_non_null(f);
  EVP_PKEY* k = PEM_read_PrivateKey(f, NULL, NULL, NULL);
  fclose(f);
  assert_non_null(x);
  assert_non_null(k);
  assert_non_null(X509_gmtime_adj(X509_getm_notBefore(x), -3 * 86400L));
  assert_non_null(X509_gmtime_adj(X509_getm_notAfter(x), -86400L));
  assert_true(X509_sign(x, k, EVP_sha256()) > 0);
  f = fopen(out, "w");
  assert_non_null(f);
  assert_int_equal(PEM_write_X509(f, x), 1);
  fclose(f);
  X509_free(x);
  EVP_PKEY_free(k);
}

// A daemon refuses to start with a certificate every peer would refuse:
// expired, of another CA, a client's; a client is only warned.
static void test_own_certificate_checked(void** state) {
  cw_tls_t* t = NULL;
  write_expired(path(12, "expired.pem"));
  cw_tls_config_t c = {true, path(0, "ca.pem"), path(12, "expired.pem"), path(3, "d.key"), false};
  expect_error(cw_tls_create(&c, true, &t), "as a daemon's certificate (certificate has expired)");
  c = (cw_tls_config_t){true, path(6, "other-ca.pem"), path(2, "d.pem"), path(3, "d.key"), false};
  expect_error(cw_tls_create(&c, true, &t), "does not verify against CAUSEWAY_TLS_CA");
  c = (cw_tls_config_t){true, path(0, "ca.pem"), path(4, "c.pem"), path(5, "c.key"), false};
  expect_error(cw_tls_create(&c, true, &t), "(unsuitable certificate purpose)");
  assert_null(t);
  t = context(path(6, "other-ca.pem"), path(4, "c.pem"), path(5, "c.key"), false, false);
  cw_tls_release(t);
  t = context(path(0, "ca.pem"), path(2, "d.pem"), path(3, "d.key"), true, false);
  cw_tls_release(t);
}

static void test_contexts(void** state) {
  cw_tls_t* t = NULL;
  cw_tls_config_t c = {true, "", "", "", false};
  expect_error(cw_tls_create(&c, false, &t), "CAUSEWAY_TLS_CA (--tls-ca) is not set");
  c.ca_file = path(0, "ca.pem");
  expect_error(cw_tls_create(&c, true, &t), "a daemon needs its certificate and key");
  c.cert_file = path(2, "d.pem");
  expect_error(cw_tls_create(&c, false, &t), "go together");
  c.key_file = path(5, "c.key");
  expect_error(cw_tls_create(&c, true, &t), "is not the key of CAUSEWAY_TLS_CERT");
  c.key_file = path(8, "missing.key");
  expect_error(cw_tls_create(&c, true, &t), "No such file or directory");
  c.ca_file = path(2, "d.key");  // not a certificate
  c.key_file = path(3, "d.key");
  expect_error(cw_tls_create(&c, true, &t), "cannot load CA certificates");
  assert_null(t);
  // A client without a certificate is fine.
  t = context(path(0, "ca.pem"), NULL, NULL, false, false);
  assert_false(cw_tls_requires_client_cert(t));
  cw_tls_retain(t);
  cw_tls_release(t);
  cw_tls_release(t);
}

// Runs a handshake between `srv` and `cli` in memory. Returns 0 when both
// finished, else the side that failed (1 server, 2 client) with its text.
static int handshake(SSL* srv, SSL* cli, char* why, size_t cap) {
  BIO *s_in = BIO_new(BIO_s_mem()), *s_out = BIO_new(BIO_s_mem());
  BIO *c_in = BIO_new(BIO_s_mem()), *c_out = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(s_in, -1);
  BIO_set_mem_eof_return(c_in, -1);
  SSL_set_bio(srv, s_in, s_out);
  SSL_set_bio(cli, c_in, c_out);
  bool s_done = false, c_done = false;
  for (int round = 0; round < 20 && !(s_done && c_done); ++round) {
    if (!c_done) {
      int r = SSL_do_handshake(cli);
      if (r == 1) c_done = true;
      else if (SSL_get_error(cli, r) != SSL_ERROR_WANT_READ) {
        cw_tls_describe_error(cli, r, why, cap);
        return 2;
      }
    }
    char buf[16384];
    int n;
    while ((n = BIO_read(c_out, buf, sizeof(buf))) > 0) BIO_write(s_in, buf, n);
    if (!s_done) {
      int r = SSL_do_handshake(srv);
      if (r == 1) s_done = true;
      else if (SSL_get_error(srv, r) != SSL_ERROR_WANT_READ) {
        cw_tls_describe_error(srv, r, why, cap);
        // The client reads the alert the server sent.
        while ((n = BIO_read(s_out, buf, sizeof(buf))) > 0) BIO_write(c_in, buf, n);
        return 1;
      }
    }
    while ((n = BIO_read(s_out, buf, sizeof(buf))) > 0) BIO_write(c_in, buf, n);
  }
  // TLS 1.3: a client may finish before the server has checked its
  // certificate; one more read on the client reports the server's alert.
  char b;
  int r = SSL_read(cli, &b, 1);
  if (r <= 0 && SSL_get_error(cli, r) != SSL_ERROR_WANT_READ) {
    cw_tls_describe_error(cli, r, why, cap);
    return 2;
  }
  return s_done && c_done ? 0 : 3;
}

static int run(cw_tls_t* server, cw_tls_t* client, const char* host, char* why, size_t cap,
               char* server_why, size_t server_cap) {
  SSL *s = NULL, *c = NULL;
  expect_ok(cw_tls_ssl_new(server, NULL, &s));
  expect_ok(cw_tls_ssl_new(client, host, &c));
  why[0] = server_why[0] = 0;
  int rc = handshake(s, c, why, cap);
  if (rc == 1) {
    snprintf(server_why, server_cap, "%s", why);
    char b;
    int r = SSL_read(c, &b, 1);
    cw_tls_describe_error(c, r, why, cap);
    rc = 2;
  }
  SSL_free(s);
  SSL_free(c);
  ERR_clear_error();
  return rc;
}

static void expect_text(const char* got, const char* want) {
  if (!strstr(got, want)) fail_msg("got \"%s\", want \"%s\"", got, want);
}

static void test_handshakes(void** state) {
  cw_tls_t* srv = context(path(0, "ca.pem"), path(2, "d.pem"), path(3, "d.key"), true, false);
  cw_tls_t* cli = context(path(0, "ca.pem"), NULL, NULL, false, false);
  char why[512], swhy[512];
  assert_int_equal(run(srv, cli, "127.0.0.1", why, sizeof(why), swhy, sizeof(swhy)), 0);
  assert_int_equal(run(srv, cli, "localhost", why, sizeof(why), swhy, sizeof(swhy)), 0);
  // A name the certificate does not carry.
  assert_int_equal(run(srv, cli, "10.9.9.9", why, sizeof(why), swhy, sizeof(swhy)), 2);
  expect_text(why, "certificate verify failed: IP address mismatch (the peer's certificate "
                   "does not name the host it was reached at");
  assert_int_equal(run(srv, cli, "db.example", why, sizeof(why), swhy, sizeof(swhy)), 2);
  expect_text(why, "certificate verify failed: hostname mismatch");
  // A client that trusts another CA.
  cw_tls_t* other = context(path(6, "other-ca.pem"), NULL, NULL, false, false);
  assert_int_equal(run(srv, other, "127.0.0.1", why, sizeof(why), swhy, sizeof(swhy)), 2);
  // (the server sends its chain up to its CA: "self-signed certificate in
  // certificate chain"; without it "unable to get local issuer certificate")
  expect_text(why, "certificate verify failed: ");
  expect_text(why, "(the peer's certificate is not signed by the CA in CAUSEWAY_TLS_CA)");
  cw_tls_release(other);
  // Mutual TLS: without a client certificate, then with one.
  cw_tls_t* msrv = context(path(0, "ca.pem"), path(2, "d.pem"), path(3, "d.key"), true, true);
  assert_true(cw_tls_requires_client_cert(msrv));
  assert_int_equal(run(msrv, cli, "127.0.0.1", why, sizeof(why), swhy, sizeof(swhy)), 2);
  expect_text(swhy, "peer did not return a certificate (mutual TLS is required here");
  expect_text(why, "certificate required (the peer requires a client certificate");
  cw_tls_t* mcli = context(path(0, "ca.pem"), path(4, "c.pem"), path(5, "c.key"), false, false);
  assert_int_equal(run(msrv, mcli, "127.0.0.1", why, sizeof(why), swhy, sizeof(swhy)), 0);
  // A client certificate of another CA.
  expect_ok(cw_tls_pki_issue(path(6, "other-ca.pem"), path(7, "other-ca.key"), "o",
                             CW_TLS_CERT_CLIENT, NULL, 0, 30, path(8, "o.pem"), path(9, "o.key"),
                             false));
  cw_tls_t* ocli = context(path(0, "ca.pem"), path(8, "o.pem"), path(9, "o.key"), false, false);
  assert_int_equal(run(msrv, ocli, "127.0.0.1", why, sizeof(why), swhy, sizeof(swhy)), 2);
  expect_text(swhy, "certificate verify failed");
  expect_text(why, "unknown ca (the peer does not trust this side's certificate");
  cw_tls_release(ocli);
  cw_tls_release(mcli);
  cw_tls_release(msrv);
  cw_tls_release(cli);
  cw_tls_release(srv);
}

static void test_addresses_and_first_bytes(void** state) {
  char h[64];
  assert_true(cw_tls_address_host("10.1.2.3:7000", h, sizeof(h)));
  assert_string_equal(h, "10.1.2.3");
  assert_true(cw_tls_address_host("[::1]:7000", h, sizeof(h)));
  assert_string_equal(h, "::1");
  assert_true(cw_tls_address_host("ctl.example:7000", h, sizeof(h)));
  assert_string_equal(h, "ctl.example");
  assert_false(cw_tls_address_host("/tmp/x:1.sock", h, sizeof(h)));
  assert_false(cw_tls_address_host("noport", h, sizeof(h)));
  assert_false(cw_tls_address_host(":7000", h, sizeof(h)));

  const uint8_t tls[] = {0x16, 0x03, 0x01};
  const uint8_t cw[] = {'C', 'W', 'A', 'Y', 1, 0};
  const uint8_t http[] = "GET / HTTP/1.1";
  assert_int_equal(cw_tls_classify_first_bytes(tls, 3), CW_TLS_FIRST_TLS);
  assert_int_equal(cw_tls_classify_first_bytes(tls, 1), CW_TLS_FIRST_UNKNOWN);
  assert_int_equal(cw_tls_classify_first_bytes(cw, 6), CW_TLS_FIRST_CAUSEWAY);
  assert_int_equal(cw_tls_classify_first_bytes(cw, 2), CW_TLS_FIRST_UNKNOWN);
  assert_int_equal(cw_tls_classify_first_bytes(http, 3), CW_TLS_FIRST_OTHER);
  assert_int_equal(cw_tls_classify_first_bytes(tls, 0), CW_TLS_FIRST_UNKNOWN);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_files),
      cmocka_unit_test(test_contexts),
      cmocka_unit_test(test_own_certificate_checked),
      cmocka_unit_test(test_handshakes),
      cmocka_unit_test(test_addresses_and_first_bytes),
  };
  return cmocka_run_group_tests(tests, setup, teardown);
}
