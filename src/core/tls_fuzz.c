// libFuzzer target: OpenSSL's parsers as causeway's TLS code drives them
// (cw_tls.c). The first byte picks the path:
//   0-2  the rest is the CA, the certificate or the key file (PEM) of a
//        daemon's context, beside valid others (cw_tls_create: refused with
//        a reason naming the setting and the file, or a context);
//   3    the rest is what a peer sends an accepting daemon first (a
//        ClientHello, or not): the handshake fails with a described reason,
//        or wants more; what it answers is TLS records.
// Each input builds a context or runs a handshake step (about 100 per
// second); our own decoding of first bytes and addresses is
// tls_first_bytes_fuzz, fast enough for long campaigns.
#include <fcntl.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <openssl/err.h>

#include "cw_log.h"
#include "cw_tls.h"

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

enum { F_CA, F_CERT, F_KEY, F_FUZZ, F_COUNT };
static char g_dir[128];
static char g_path[F_COUNT][192];
static cw_tls_t* g_server;  // from the valid files

static void cw__cleanup(void) {
  cw_tls_release(g_server);
  for (int i = 0; i < F_COUNT; ++i) unlink(g_path[i]);
  unlink(g_path[F_CA]);
  char key[200];
  snprintf(key, sizeof key, "%s/ca.key", g_dir);
  unlink(key);
  rmdir(g_dir);
}

static void cw__init(void) {
  cw_log_set_level(CW_LOG_ERROR);
  const char* base = access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp";
  snprintf(g_dir, sizeof g_dir, "%s/cw-tls-fuzz-XXXXXX", base);
  if (!mkdtemp(g_dir)) abort();
  static const char* const names[F_COUNT] = {"ca.pem", "srv.pem", "srv.key", "fuzz"};
  for (int i = 0; i < F_COUNT; ++i) snprintf(g_path[i], sizeof g_path[i], "%s/%s", g_dir, names[i]);
  char ca_key[200];
  snprintf(ca_key, sizeof ca_key, "%s/ca.key", g_dir);
  const char* hosts[] = {"127.0.0.1"};
  cw_status_t st = cw_tls_pki_make_ca("fuzz-ca", 2, g_path[F_CA], ca_key, true);
  if (!st) {
    st = cw_tls_pki_issue(g_path[F_CA], ca_key, "srv", CW_TLS_CERT_DAEMON, hosts, 1, 2,
                          g_path[F_CERT], g_path[F_KEY], true);
  }
  cw_tls_config_t cfg = {true, g_path[F_CA], g_path[F_CERT], g_path[F_KEY], false};
  if (!st) st = cw_tls_create(&cfg, true, &g_server);
  if (st) {
    fprintf(stderr, "tls_fuzz: set-up: %s\n", cw_status_message(st));
    abort();
  }
  atexit(cw__cleanup);
}

static void cw__write(const char* path, const uint8_t* data, size_t size) {
  int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) abort();
  if (size && write(fd, data, size) != (ssize_t)size) abort();
  close(fd);
}

static bool cw__terminated(const char* s, size_t cap) { return memchr(s, 0, cap) != NULL; }

// A daemon's context with one file replaced by the input.
static void cw__files(int which, const uint8_t* data, size_t size) {
  cw__write(g_path[F_FUZZ], data, size);
  cw_tls_config_t cfg = {true, g_path[F_CA], g_path[F_CERT], g_path[F_KEY], false};
  if (which == F_CA) cfg.ca_file = g_path[F_FUZZ];
  if (which == F_CERT) cfg.cert_file = g_path[F_FUZZ];
  if (which == F_KEY) cfg.key_file = g_path[F_FUZZ];
  cw_tls_t* t = NULL;
  cw_status_t st = cw_tls_create(&cfg, true, &t);
  if (st) {
    // The reason names the setting.
    if (!strstr(cw_status_message(st), "CAUSEWAY_TLS_")) __builtin_trap();
    if (t) __builtin_trap();
    cw_status_free(st);
  } else if (!t) {
    __builtin_trap();
  }
  cw_tls_release(t);
  ERR_clear_error();
}

// The input as a peer's first flight to an accepting side.
static void cw__handshake(const uint8_t* data, size_t size) {
  SSL* ssl = NULL;
  cw_status_t st = cw_tls_ssl_new(g_server, NULL, &ssl);
  if (st) abort();
  BIO* in = BIO_new_mem_buf(data, (int)size);
  BIO* out = BIO_new(BIO_s_mem());
  BIO_set_mem_eof_return(in, -1);  // no more yet: wants more, like a socket
  SSL_set_bio(ssl, in, out);
  int r = SSL_do_handshake(ssl);
  if (r != 1 && SSL_get_error(ssl, r) != SSL_ERROR_WANT_READ) {
    char why[512];
    cw_tls_describe_error(ssl, r, why, sizeof why);
    if (!why[0] || !cw__terminated(why, sizeof why)) __builtin_trap();
  }
  char* sent;
  long n = BIO_get_mem_data(out, &sent);
  if (n > 0 && (sent[0] < 20 || sent[0] > 23)) __builtin_trap();  // records only
  SSL_free(ssl);
  ERR_clear_error();
}

int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (!g_server) cw__init();
  if (size < 1) return 0;
  int mode = data[0] % 4;
  const uint8_t* rest = data + 1;
  size_t n = size - 1;
  if (mode < 3) cw__files(mode, rest, n);
  else cw__handshake(rest, n);
  return 0;
}
