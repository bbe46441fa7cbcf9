// Unit tests of `causeway certs` (cw_certs.c): what the command line
// accepts and refuses, and a cluster's files made end to end (mode 0600,
// loaded by cw_tls_create as a daemon's and a client's, not over existing
// files without --force).
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

#include "cw_certs.h"
#include "cw_tls.h"

// "causeway certs LINE" split at spaces (static storage, until the next call).
static int words(const char* line, char*** out_argv) {
  static char buf[512];
  static char* argv[32];
  snprintf(buf, sizeof(buf), "causeway certs %s", line);
  int argc = 0;
  for (char* t = strtok(buf, " "); t && argc < 31; t = strtok(NULL, " ")) argv[argc++] = t;
  argv[argc] = NULL;
  *out_argv = argv;
  return argc;
}

static bool parse(cw_certs_args_t* a, char* err, size_t n, const char* line) {
  char** argv;
  int argc = words(line, &argv);
  return cw_certs_parse(argc, argv, a, err, n);
}

static void expect_refused(const char* line, const char* needle) {
  cw_certs_args_t a;
  char err[512];
  assert_false(parse(&a, err, sizeof(err), line));
  if (!strstr(err, needle)) fail_msg("'%s': got \"%s\", want \"%s\"", line, err, needle);
}

static void test_parse(void** state) {
  cw_certs_args_t a;
  char err[512];
  assert_true(parse(&a, err, sizeof(err), "ca --dir /x"));
  assert_int_equal(a.kind, CW_CERTS_CA);
  assert_string_equal(a.dir, "/x");
  assert_string_equal(a.name, "causeway cluster CA");
  assert_int_equal(a.days, 3650);
  assert_true(parse(&a, err, sizeof(err), "daemon w0 --host 10.0.0.5 --host w0.example --days 30"));
  assert_int_equal(a.kind, CW_CERTS_DAEMON);
  assert_string_equal(a.name, "w0");
  assert_int_equal(a.num_hosts, 2);
  assert_string_equal(a.hosts[1], "w0.example");
  assert_int_equal(a.days, 30);
  assert_string_equal(a.dir, ".");
  assert_string_equal(a.ca_dir, ".");
  assert_false(a.force);
  assert_true(parse(&a, err, sizeof(err), "client bob --dir /d --ca-dir /safe"));
  assert_string_equal(a.ca_dir, "/safe");
  assert_string_equal(a.dir, "/d");
  assert_true(parse(&a, err, sizeof(err), "client alice --force"));
  assert_int_equal(a.kind, CW_CERTS_CLIENT);
  assert_int_equal(a.days, 365);
  assert_true(a.force);
  assert_false(parse(&a, err, sizeof(err), "--help"));
  assert_string_equal(err, "");
  expect_refused("", "certs needs ca, daemon or client");
  expect_refused("server x", "unknown certs kind 'server'");
  expect_refused("daemon w0", "certs daemon needs --host");
  expect_refused("daemon --host h", "needs a NAME");
  expect_refused("client ../evil", "needs a NAME");
  expect_refused("client ca", "needs a NAME");
  expect_refused("ca extra", "certs ca takes no NAME");
  expect_refused("ca --host h", "certs ca takes no --host");
  expect_refused("ca --ca-dir /x", "--ca-dir is for daemon and client");
  expect_refused("client c --days 0", "--days '0' is not a number in 1..36500");
  expect_refused("client c --bogus", "unknown option");
  expect_refused("client c --dir", "needs a value");
}

static int run(const char* line) {
  char** argv;
  int argc = words(line, &argv);
  return cw_certs_main(argc, argv);
}

static void test_cluster_files(void** state) {
  char dir[64] = "/tmp/cw_certs_test.XXXXXX";
  assert_non_null(mkdtemp(dir));
  char line[256], f[8][256];
  const char* names[] = {"ca.pem", "ca.key", "w0.pem", "w0.key", "alice.pem", "alice.key"};
  for (int i = 0; i < 6; ++i) snprintf(f[i], sizeof(f[i]), "%s/%s", dir, names[i]);
  snprintf(line, sizeof(line), "ca --dir %s --days 10", dir);
  assert_int_equal(run(line), 0);
  snprintf(line, sizeof(line), "daemon w0 --dir %s --host 127.0.0.1 --host localhost", dir);
  assert_int_equal(run(line), 0);
  snprintf(line, sizeof(line), "client alice --dir %s", dir);
  assert_int_equal(run(line), 0);
  for (int i = 0; i < 6; ++i) {
    struct stat sb;
    assert_int_equal(stat(f[i], &sb), 0);
    assert_int_equal(sb.st_mode & 0777, 0600);
  }
  // Usable as the daemon's and the client's TLS.
  cw_tls_config_t d = {true, f[0], f[2], f[3], true};
  cw_tls_t* t = NULL;
  cw_status_t s = cw_tls_create(&d, true, &t);
  if (s) fail_msg("%s", cw_status_message(s));
  cw_tls_release(t);
  cw_tls_config_t c = {true, f[0], f[4], f[5], false};
  s = cw_tls_create(&c, false, &t);
  if (s) fail_msg("%s", cw_status_message(s));
  cw_tls_release(t);
  // Never over existing files, unless --force; a bad command line is 2.
  assert_int_equal(run(line), 1);
  snprintf(line, sizeof(line), "client alice --dir %s --force", dir);
  assert_int_equal(run(line), 0);
  assert_int_equal(run("daemon w1"), 2);
  for (int i = 0; i < 6; ++i) unlink(f[i]);
  // A directory whose parents do not exist yet (/etc/causeway/tls on a fresh
  // host): a certificate before its CA is refused (1), the CA makes them.
  char deep[128], made[160];
  snprintf(deep, sizeof(deep), "%s/etc/tls", dir);
  snprintf(line, sizeof(line), "daemon w0 --dir %s --host 127.0.0.1", deep);
  assert_int_equal(run(line), 1);
  snprintf(line, sizeof(line), "ca --dir %s", deep);
  assert_int_equal(run(line), 0);
  snprintf(made, sizeof(made), "%s/ca.pem", deep);
  assert_int_equal(access(made, F_OK), 0);
  unlink(made);
  snprintf(made, sizeof(made), "%s/ca.key", deep);
  unlink(made);
  rmdir(deep);
  snprintf(made, sizeof(made), "%s/etc", dir);
  rmdir(made);
  rmdir(dir);
}

// The CA's key kept in a directory of its own: a daemon's directory gets
// its certificate, its key and the CA certificate, never the CA key.
static void test_ca_kept_apart(void** state) {
  char top[64] = "/tmp/cw_certs_test.XXXXXX";
  assert_non_null(mkdtemp(top));
  char ca[128], other[128], host[128], line[512], f[256];
  snprintf(ca, sizeof(ca), "%s/ca", top);
  snprintf(other, sizeof(other), "%s/other", top);
  snprintf(host, sizeof(host), "%s/etc/tls", top);
  snprintf(line, sizeof(line), "ca --dir %s", ca);
  assert_int_equal(run(line), 0);
  snprintf(line, sizeof(line), "daemon w0 --dir %s --ca-dir %s --host 127.0.0.1", host, ca);
  assert_int_equal(run(line), 0);
  snprintf(line, sizeof(line), "client alice --dir %s --ca-dir %s", host, ca);
  assert_int_equal(run(line), 0);  // the same CA certificate there already
  snprintf(f, sizeof(f), "%s/ca.key", host);
  assert_int_equal(access(f, F_OK), -1);
  char ca_pem[256], pem[256], key[256];
  snprintf(ca_pem, sizeof(ca_pem), "%s/ca.pem", host);
  snprintf(pem, sizeof(pem), "%s/w0.pem", host);
  snprintf(key, sizeof(key), "%s/w0.key", host);
  struct stat sb;
  assert_int_equal(stat(ca_pem, &sb), 0);
  assert_int_equal(sb.st_mode & 0777, 0600);
  // What the daemon's directory holds is a daemon's whole TLS.
  cw_tls_config_t d = {true, ca_pem, pem, key, true};
  cw_tls_t* t = NULL;
  cw_status_t s = cw_tls_create(&d, true, &t);
  if (s) fail_msg("%s", cw_status_message(s));
  cw_tls_release(t);
  // Another CA's certificate there is not replaced without --force.
  snprintf(line, sizeof(line), "ca --dir %s", other);
  assert_int_equal(run(line), 0);
  snprintf(line, sizeof(line), "daemon w1 --dir %s --ca-dir %s --host 127.0.0.1", host, other);
  assert_int_equal(run(line), 1);
  snprintf(f, sizeof(f), "%s/w1.pem", host);
  assert_int_equal(access(f, F_OK), -1);
  snprintf(line, sizeof(line), "rm -rf %s", top);
  assert_int_equal(system(line), 0);
}

int main(void) {
  const struct CMUnitTest tests[] = {
      cmocka_unit_test(test_parse),
      cmocka_unit_test(test_cluster_files),
      cmocka_unit_test(test_ca_kept_apart),
  };
  return cmocka_run_group_tests(tests, NULL, NULL);
}
